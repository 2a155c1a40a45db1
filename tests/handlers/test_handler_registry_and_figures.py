"""``contextpolicy.handlers`` as a policy uses them, on the compiled kernel and on the twin:
ids, registries, pickling and handlers files; the figures of a compress step, measured by the
core and never claimed; the three handlers in sequence, and ``reduce_table`` per row.
"""

from __future__ import annotations

import pickle

import pyarrow as pa
import pytest

from contextpolicy import (
    CompressRequest,
    ContextPlan,
    ContextPlanError,
    ContextPolicyError,
    Fragment,
    PolicyOutcome,
    process_context,
)
from contextpolicy.batch import reduce_table
from contextpolicy.handlers import (
    BUILTIN_IDS,
    ClearToolResults,
    TruncateMessages,
    clear_tool_results,
    defaults,
    from_config,
    is_summary,
    registry,
    summarize,
    truncate_messages,
)
from contextpolicy.implementations import reduce as default_reduce
from contextpolicy.report import CompressFigures
from tests.support.handlers import (
    FakeSummariser,
    compress_policy,
    make_history,
    plan_of,
    results,
    run_checked,
    texts,
    warnings_of,
)

# The whole pipeline runs on the compiled kernel and on the twin: ids [c] and [py].
pytestmark = pytest.mark.usefixtures("pipeline_kernel")


# ---------------------------------------------------------------------------------------------
# Ids, registries, pickling, handlers files


def test_ids_registry_and_defaults():
    assert BUILTIN_IDS == ("clear-tool-results", "truncate-messages", "summarize")
    assert sorted(defaults()) == ["clear-tool-results", "truncate-messages"]
    assert defaults()["clear-tool-results"] == clear_tool_results()
    two = registry(clear_tool_results(), clear_tool_results(keep=0, handler_id="clear-all"))
    assert sorted(two) == ["clear-all", "clear-tool-results"]
    with pytest.raises(ContextPolicyError) as exc:
        registry(clear_tool_results(), clear_tool_results(keep=1), lambda r: r)
    assert exc.value.codes == ["duplicate-id", "invalid-handler"]
    assert repr(clear_tool_results(keep=1, handler_id="x")) == (
        "clear_tool_results(keep=1, placeholder='[tool result cleared: {chars} chars]', "
        "exclude_tools=(), clear_inputs=False, min_chars=100, clear_at_least=0, "
        "handler_id='x')")


def _summary_fn(text: str, target: int) -> str:
    return text[:10]


@pytest.mark.parametrize("handler", [
    clear_tool_results(keep=1, exclude_tools=("memory",), clear_inputs=True),
    truncate_messages(max_chars=50, head=10, tail=5, marker="<{chars}>", handler_id="cut"),
    summarize(_summary_fn, prefix="S: "),
], ids=["clear", "truncate", "summarize"])
def test_handlers_pickle_with_their_parameters(handler):
    copy_ = pickle.loads(pickle.dumps(handler))
    assert type(copy_) is type(handler) and copy_ == handler
    history = make_history("chat", broken=False)
    request = CompressRequest(fragment=Fragment(id="history", kind="history", messages=history),
                              content=history, kept=None, target_chars=0, step_id="s",
                              counter=None, cancel=None)
    assert copy_(request) == handler(request)


def test_handlers_from_a_config_document():
    handlers = from_config({
        "clear-tool-results": {"keep": 1, "excludeTools": ["memory"], "clearInputs": True},
        "short": {"handler": "truncate-messages", "maxChars": 300, "head": 100},
    })
    assert handlers == {
        "clear-tool-results": clear_tool_results(keep=1, exclude_tools=("memory",),
                                                 clear_inputs=True),
        "short": truncate_messages(max_chars=300, head=100, handler_id="short"),
    }
    assert isinstance(handlers["short"], TruncateMessages) and handlers["short"].handler_id == "short"
    with pytest.raises(ContextPolicyError) as exc:
        from_config({"clear-tool-results": {"keeep": 1, "keep": "1"}, "mine": {"maxChars": 5},
                     "summarize": {}, "other": {"handler": "nope"}, "bad": 3})
    assert sorted((i.path, i.code) for i in exc.value.issues) == [
        ("bad", "expected-object"), ("clear-tool-results.keeep", "unknown-key"),
        ("clear-tool-results.keep", "expected-integer"), ("mine.handler", "missing"),
        ("other.handler", "unknown-handler"), ("summarize", "needs-function")]
    assert "did you mean 'keep'?" in str(exc.value)


def test_a_policy_by_id_with_its_handlers_once_prepared():
    from contextpolicy import prepare_policy

    history = make_history("chat", broken=False)
    policy = {"mode": "reduce", "triggerChars": 1000, "targetInputChars": 900, "steps": [
        {"id": "old-outputs", "kind": "compress", "fragmentId": "history",
         "handlerId": "clear-tool-results", "targetChars": 1200},
        {"id": "recent", "kind": "trim", "fragmentId": "history", "keepGroups": 1,
         "targetChars": 1200}]}
    prepared = prepare_policy(policy, handlers=defaults())
    a = process_context(plan_of(history), prepared)
    b = process_context(plan_of(history), policy, handlers=defaults())
    assert a.report == b.report and a.input == b.input
    assert a.report.steps[0].handler_figures.results_cleared == 6


# ---------------------------------------------------------------------------------------------
# Figures are measured by the core, never claimed


def test_a_custom_implementation_cannot_claim_handler_figures():
    history = make_history("chat", broken=False)
    lie = CompressFigures(handler="clear-tool-results", chars_removed=10**6, results_cleared=99)

    def claiming(ctx):
        outcome = yield from default_reduce(ctx)
        steps = [s.model_copy(update={"handler_figures": lie}) for s in outcome.steps]
        return PolicyOutcome(fragments=outcome.fragments, steps=steps,
                             triggered=outcome.triggered)

    honest = process_context(plan_of(history), compress_policy("clear-tool-results"),
                             handlers=defaults())
    claimed = process_context(plan_of(history), compress_policy("clear-tool-results"),
                              handlers=defaults(), implementations={"reduce": claiming})
    assert claimed.report.steps[0].handler_figures == honest.report.steps[0].handler_figures
    assert honest.report.steps[0].handler_figures.results_cleared == 6
    assert [w.code for w in claimed.report.warnings] == ["figure-replaced"]
    # A handler of the caller's own, which is no built-in: no figures, whatever it does.
    mine = process_context(plan_of(history), compress_policy("mine"),
                           handlers={"mine": clear_tool_results()})
    assert mine.report.steps[0].status == "applied"
    assert mine.report.steps[0].handler_figures is not None  # a built-in under any id
    own = process_context(plan_of(history), compress_policy("mine"),
                          handlers={"mine": lambda r: clear_tool_results()(r)})
    assert own.report.steps[0].handler_figures is None
    assert own.input == mine.input


def test_a_subclass_is_measured_for_what_it_did():
    class Sneaky(ClearToolResults):
        def __call__(self, request):
            out = super().__call__(request)
            return out[:-1]  # drops the last message too

    history = make_history("chat", broken=False)
    sneaky = Sneaky(clear_tool_results().params)
    result = process_context(plan_of(history), compress_policy("clear-tool-results"),
                             handlers=registry(sneaky))
    step = result.report.steps[0]
    assert step.status == "applied" and step.messages_removed == 1
    # Not aligned with its input any more: no count is claimed for it.
    assert step.handler_figures.results_cleared is None
    assert step.handler_figures.chars_removed == step.chars_before - step.chars_after


def test_events_carry_the_figures_the_report_has():
    history = make_history("anthropic")
    events = []
    policy = {"mode": "reduce", "triggerChars": 1, "steps": [
        {"id": "clear", "kind": "compress", "fragmentId": "history",
         "handlerId": "clear-tool-results", "targetChars": 0},
        {"id": "cut", "kind": "compress", "fragmentId": "history",
         "handlerId": "truncate-messages", "targetChars": 0}]}
    result = process_context(plan_of(history), policy, on_event=events.append,
                             handlers=registry(clear_tool_results(keep=1),
                                               truncate_messages(max_chars=100)))
    done = [e.data["step"] for e in events if e.type == "step.completed"]
    assert [d["handlerFigures"] for d in done] == [
        s.handler_figures.to_json_dict() for s in result.report.steps]
    assert done[0]["handlerFigures"]["resultsCleared"] == 9  # 9 calls and the ghost, one kept
    assert done[1]["handlerFigures"]["messagesTruncated"] > 0


def test_report_json_carries_the_figures():
    history = make_history("responses", broken=False)
    result = process_context(plan_of(history), compress_policy("clear-tool-results"),
                             handlers=defaults())
    doc = result.report_json()
    assert doc == result.report.model_dump(by_alias=True, mode="json")
    assert doc["steps"][0]["handlerFigures"] == {
        "handler": "clear-tool-results", "charsRemoved": doc["steps"][0]["charsBefore"]
        - doc["steps"][0]["charsAfter"], "resultsCleared": 6, "inputsCleared": 0,
        "messagesTruncated": None, "messagesSummarized": None, "summaryChars": None}


# ---------------------------------------------------------------------------------------------
# The three in sequence, and reduce_table per row


def test_clear_then_trim_then_summarise():
    history = make_history("anthropic", turns=10)
    policy = {"mode": "reduce", "triggerChars": 4000, "targetInputChars": 2000, "steps": [
        {"id": "clear", "kind": "compress", "fragmentId": "history",
         "handlerId": "clear-tool-results", "targetChars": 1500},
        {"id": "trim", "kind": "trim", "fragmentId": "history", "keepGroups": 5,
         "targetChars": 2500},
        {"id": "summary", "kind": "compress", "fragmentId": "history", "handlerId": "summarize",
         "keepGroups": 2, "targetChars": 1500}]}
    handlers = registry(clear_tool_results(keep=2), summarize(FakeSummariser()))
    result, before = run_checked(plan_of(history), policy, handlers)
    steps = result.report.steps
    assert [s.status for s in steps] == ["applied", "applied", "applied"]
    assert [(s.groups_before, s.groups_after) for s in steps] == [(10, 10), (10, 5), (5, 3)]
    assert [s.handler_figures.handler if s.handler_figures else None for s in steps] == [
        "clear-tool-results", None, "summarize"]
    assert steps[1].handler_figures is None  # a trim says its figures itself
    assert result.report.after.chars < result.report.before.chars
    # The trim cut away turn 2's stray result and call; nothing else is left unpaired.
    assert before and warnings_of(result) == []
    assert is_summary(result.plan.fragment("history").messages[0])


CHAT_MESSAGE = pa.struct([
    ("role", pa.string()), ("content", pa.string()), ("name", pa.string()),
    ("tool_calls", pa.list_(pa.struct([("id", pa.string()), ("type", pa.string()), (
        "function", pa.struct([("name", pa.string()), ("arguments", pa.string())]))]))),
    ("tool_call_id", pa.string())])


def filled(messages: list[dict], names: list[str]) -> list[dict]:
    return [{name: m.get(name) for name in names} for m in messages]


def test_reduce_table_clears_and_truncates_per_row():
    rows = [[{"role": "system", "content": "sys"}, *make_history("chat", turns=t),
             {"role": "user", "content": "now?"}] for t in (1, 3, 6)]
    table = pa.table({"id": ["a", "b", "c"],
                      "messages": pa.array(rows, type=pa.list_(CHAT_MESSAGE))})
    policy = {"mode": "reduce", "triggerChars": 3000, "steps": [
        {"id": "clear", "kind": "compress", "fragmentId": "history",
         "handlerId": "clear-tool-results", "targetChars": 0},
        {"id": "cut", "kind": "compress", "fragmentId": "history",
         "handlerId": "truncate-messages", "targetChars": 0}]}
    handlers = registry(clear_tool_results(keep=1), truncate_messages(max_chars=80))
    out = reduce_table(table, policy, handlers=handlers)
    names = [f.name for f in CHAT_MESSAGE]
    got = out.table.column("messages").to_pylist()
    figures = out.figures.to_pylist()
    for i, row in enumerate(table.column("messages").to_pylist()):
        expected = process_context(ContextPlan.from_messages(row), policy, handlers=handlers)
        assert got[i] == filled(expected.input, names)
        assert (figures[i]["chars_before"], figures[i]["chars_after"]) == (
            expected.report.before.chars, expected.report.after.chars)
        assert [(w["code"], w["tool_call_id"]) for w in figures[i]["warnings"]] == [
            (w.code, w.tool_call_id) for w in expected.report.warnings]
    assert figures[0]["chars_after"] == figures[0]["chars_before"]  # below the trigger
    assert figures[2]["chars_after"] < figures[2]["chars_before"] // 3
    assert out.table.column("id").to_pylist() == ["a", "b", "c"]
    # Messages the handlers left as they were are the table's own values, taken, not rebuilt.
    assert got[2][1] == rows[2][1] | {"name": None, "tool_call_id": None, "tool_calls": None}


def test_reduce_table_with_blocks_and_an_input_a_struct_cannot_empty():
    # Tool results as text throughout (an Arrow column holds one type).
    rows = [[{**m, "content": [{**b, "content": texts(b["content"])[0]}
                               if b["type"] == "tool_result" else b for b in m["content"]]}
             for m in make_history("anthropic", turns=4, broken=False)]]
    table = pa.table({"messages": rows})
    out = reduce_table(table, compress_policy("clear-tool-results"), handlers=defaults())
    expected = process_context(ContextPlan.from_messages(table.column("messages").to_pylist()[0]),
                               compress_policy("clear-tool-results"), handlers=defaults())
    assert out.figures.column("chars_after").to_pylist() == [expected.report.after.chars]
    assert [c for _, c in results(out.table.column("messages").to_pylist()[0])][:2] == [
        c for _, c in results(expected.input)][:2]
    # tool_use inputs are structs here: an emptied input would read back with null fields, so
    # the figures would not say what the table holds.
    with pytest.raises(ContextPlanError) as exc:
        reduce_table(table, compress_policy("clear-tool-results"),
                     handlers=registry(clear_tool_results(clear_inputs=True)))
    assert exc.value.codes == ["schema-mismatch"]
    assert "Arrow structs cannot hold an empty tool input" in str(exc.value)
