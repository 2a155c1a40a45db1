"""The OpenAI Agents SDK adapter's input filter: ``context_policy_input_filter`` inside
``Runner.run`` / ``run_sync`` / ``run_streamed`` (what the model is sent, the report's figures,
async handlers, the SDK's own item objects, compress steps), the policy checked when the filter
is built, and the adapter's layering (no ``agents`` import, the extra named when missing, the
tools fragment).

The fake model and the shared helpers are in ``tests/support/openai_agents.py``. No API key, no
tracing, no network. Marked ``extras``: the main suite deselects it; CI runs it with
``pytest -m extras`` after installing ``[openai-agents]``.
"""

from __future__ import annotations

import asyncio
import copy
import inspect
import json
import subprocess
import sys
from typing import Any

import agents
import pytest
from agents import Agent, Runner, function_tool
from agents.run import ModelInputData
from openai.types.responses import (
    ResponseFunctionToolCall,
    ResponseOutputMessage,
    ResponseOutputText,
    ResponseReasoningItem,
)
from openai.types.responses.response_reasoning_item import Summary

from contextpolicy import ContextPlanError, ContextPolicyError, check_input_budget, prepare_policy
from contextpolicy.adapters.openai_agents import ContextPolicySession, context_policy_input_filter
from contextpolicy.handlers import clear_tool_results, registry, truncate_messages
from tests.support.openai_agents import (
    INSTRUCTIONS,
    RecordingModel,
    Spy,
    assert_model_got_what_the_filter_kept,
    call_data,
    chars,
    identities,
    lookup,
    make_agent,
    old_turn,
    orphans,
    question,
    run,
    run_config,
    trim,
    with_instructions,
)

pytestmark = [pytest.mark.extras, pytest.mark.usefixtures("pipeline_kernel")]


@pytest.fixture(autouse=True)
def offline(monkeypatch: pytest.MonkeyPatch) -> None:
    """No key to reach OpenAI with, and no traces to export."""
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    agents.set_tracing_disabled(True)


TOOLS = json.dumps([{"type": "function", "name": "lookup", "description": "Look ``q`` up.",
                     "parameters": lookup.params_json_schema}], separators=(",", ":"))


def fragments_of(report: Any) -> dict[str, Any]:
    return {f.id: f for f in report.fragments}


def with_tools(items: list[Any], instructions: str | None = INSTRUCTIONS) -> list[Any]:
    """``items`` as the model reads them from ``make_agent``'s agent: the instructions, the
    schemas of its tool (the protected ``tools`` fragment), then the items."""
    tools = [{"role": "system", "content": TOOLS}]
    head = [{"role": "system", "content": instructions}] if instructions is not None else []
    return head + tools + list(items)


# ---------------------------------------------------------------------------------------------
# The filter inside the runner.


def test_filter_inside_run_sync_sends_the_model_exactly_the_kept_items():
    history = [item for i in range(4) for item in old_turn(i)]
    sizes = [chars(old_turn(i)) for i in range(4)]
    target = sizes[2] + sizes[3]
    model = RecordingModel()
    keep = context_policy_input_filter(trim(target), cut="plain")
    spy = Spy(keep)
    result = Runner.run_sync(make_agent(model), [*history, question()], run_config=run_config(spy))

    assert result.final_output == "answer 1"
    assert len(model.calls) == 2  # the tool call, then the answer
    assert_model_got_what_the_filter_kept(model, spy)
    first, second = spy.given
    # First call: the two newest old turns, whole, and the question.
    assert spy.returned[0].input == [*old_turn(2), *old_turn(3), question()]
    assert identities(spy.returned[0].input) == identities(first[10:])
    # Second call: the same history, and the turn in progress untouched (no step names it).
    assert [item.get("type") for item in second[21:]] == [
        "reasoning", "function_call", "function_call_output"]
    assert identities(spy.returned[1].input) == identities(second[10:])
    assert second[-1]["output"] == "result for q0"

    report = keep.last_report
    assert report is not None and report.triggered
    step = report.steps[0]
    assert (step.status, step.reason) == ("applied", "trimmed")
    assert (step.groups_before, step.groups_after, step.messages_removed) == (4, 2, 10)
    assert (step.chars_before, step.chars_after) == (sum(sizes), target)
    # The report's figures are those of the input as the model sees it: instructions and tools
    # included.
    assert report.before.chars == chars(with_tools(second))
    assert report.after.chars == chars(with_tools(spy.returned[1].input))
    assert fragments_of(report)["tools"].chars_after == len(TOOLS)
    assert report.after.messages == len(spy.returned[1].input) + 2  # instructions, tools


def test_filter_inside_run_streamed():
    history = [item for i in range(3) for item in old_turn(i)]
    model = RecordingModel()
    spy = Spy(context_policy_input_filter(trim(chars(old_turn(2))), cut="plain"))

    async def main() -> Any:
        streamed = Runner.run_streamed(make_agent(model), [*history, question()],
                                       run_config=run_config(spy))
        async for _ in streamed.stream_events():
            pass
        return streamed.final_output

    assert run(main()) == "answer 1"
    assert_model_got_what_the_filter_kept(model, spy)
    assert model.calls[0].snapshot == [*old_turn(2), question()]


def test_filter_keeps_the_turn_in_progress_and_leading_instructions_at_any_target():
    model = RecordingModel()
    developer = {"role": "developer", "content": "Never guess."}
    history = [developer, *old_turn(0), *old_turn(1)]
    keep = context_policy_input_filter(trim(0), cut="plain")
    spy = Spy(keep)
    Runner.run_sync(make_agent(model), [*history, question()], run_config=run_config(spy))
    assert_model_got_what_the_filter_kept(model, spy)
    assert model.calls[0].snapshot == [developer, question()]
    assert [item.get("type", "message") for item in model.calls[1].snapshot] == [
        "message", "message", "reasoning", "function_call", "function_call_output"]
    assert model.calls[1].input[0] is spy.given[1][0]
    fragments = {f.id: f for f in keep.last_report.fragments}
    assert [f.id for f in keep.last_report.fragments] == [
        "instructions", "tools", "system", "history", "question", "turn"]
    assert fragments["history"].messages_after == 0
    # The question is the user's message alone; the tool work after it is the turn, kept whole.
    assert fragments["question"].messages_after == 1
    assert fragments["turn"].messages_before == fragments["turn"].messages_after == 3
    assert fragments["instructions"].chars_after == len(INSTRUCTIONS)


def test_filter_without_instructions():
    model = RecordingModel()
    keep = context_policy_input_filter(trim(0), cut="plain")
    spy = Spy(keep)
    Runner.run_sync(make_agent(model, instructions=None), [*old_turn(0), question()],
                    run_config=run_config(spy))
    assert [call.instructions for call in model.calls] == [None, None]
    assert model.calls[0].snapshot == [question()]
    assert "instructions" not in {f.id for f in keep.last_report.fragments}
    assert keep.last_report.before.chars == chars(with_tools(spy.given[1], None))


def test_filter_below_the_trigger_returns_every_item_the_sdk_gave():
    model = RecordingModel()
    keep = context_policy_input_filter(trim(0, trigger=10**6), cut="plain")
    spy = Spy(keep)
    Runner.run_sync(make_agent(model), [*old_turn(0), question()], run_config=run_config(spy))
    for given, returned in zip(spy.given, spy.returned):
        assert identities(returned.input) == identities(given)
    data = call_data([*old_turn(0), question()])
    out = keep(data)
    assert out is not data.model_data and out.input is not data.model_data.input
    assert identities(out.input) == identities(data.model_data.input)
    assert keep.last_report.triggered is False
    assert keep.last_report.steps[0].status == "skipped"


def test_async_handlers_return_an_awaitable_and_work_in_runner_run():
    requests: list[Any] = []

    async def summarise(request: Any) -> list[dict[str, Any]]:
        await asyncio.sleep(0)
        requests.append(request)
        return [{"role": "assistant", "content": f"(summary of {len(request.content)} items)"}]

    policy = {"mode": "reduce", "triggerChars": 1, "steps": [{
        "id": "summary", "kind": "compress", "fragmentId": "history", "handlerId": "summarise",
        "keepGroups": 1, "targetChars": 0,
    }]}
    keep = context_policy_input_filter(policy, handlers={"summarise": summarise}, cut="plain")
    assert keep.is_async
    history = [item for i in range(3) for item in old_turn(i)]

    # Called directly: an awaitable of the ModelInputData.
    pending = keep(call_data([*history, question()]))
    assert inspect.isawaitable(pending)
    direct = run(pending)
    assert isinstance(direct, ModelInputData)
    assert direct.instructions == INSTRUCTIONS
    assert direct.input[0] == {"role": "assistant", "content": "(summary of 10 items)"}
    assert direct.input[1:] == [*old_turn(2), question()]

    # Inside Runner.run, which awaits it.
    model = RecordingModel()
    spy = Spy(keep)
    result = run(Runner.run(make_agent(model), [*history, question()],
                                    run_config=run_config(spy)))
    assert result.final_output == "answer 1"
    assert spy.awaitables == 2
    first = model.calls[0]
    assert first.snapshot[0] == {"role": "assistant", "content": "(summary of 10 items)"}
    assert identities(first.input[1:]) == identities(spy.given[0][10:])
    assert first.instructions == INSTRUCTIONS
    assert orphans(first.input) == []
    step = keep.last_report.steps[0]
    assert (step.status, step.handler_id) == ("applied", "summarise")
    assert keep.last_report.after.chars == chars(with_tools(model.calls[1].input))


def test_a_sync_filter_needs_no_event_loop():
    keep = context_policy_input_filter(trim(0), cut="plain")
    out = keep(call_data([*old_turn(0), question()]))
    assert isinstance(out, ModelInputData)
    assert out.input == [question()]
    assert keep.is_async is False


def test_token_figures_from_the_counter():
    words = lambda text: len(text.split())  # noqa: E731
    keep = context_policy_input_filter(trim(0), counter=words, cut="plain")
    items = [*old_turn(0), *old_turn(1), question("two words")]
    out = keep(call_data(items))
    report = keep.last_report
    assert report.before.tokens == check_input_budget(with_instructions(items), counter=words).tokens
    assert report.after.tokens == check_input_budget(with_instructions(out.input), counter=words).tokens
    assert report.after.tokens == len(INSTRUCTIONS.split()) + 2


def test_pydantic_items_come_back_as_the_same_objects():
    call = ResponseFunctionToolCall(call_id="call_p", name="lookup", arguments='{"q":"p"}',
                                    type="function_call", id="fc_p", status="completed")
    answer = ResponseOutputMessage(
        id="msg_p", type="message", role="assistant", status="completed",
        content=[ResponseOutputText(type="output_text", text="pydantic answer", annotations=[])],
    )
    reasoning = ResponseReasoningItem(id="rs_p", type="reasoning",
                                      summary=[Summary(text="thinking", type="summary_text")])
    output = {"type": "function_call_output", "call_id": "call_p", "output": "po"}
    turn = [question("old"), reasoning, call, output, answer]
    items = [*turn, *old_turn(1), question()]
    keep = context_policy_input_filter(trim(chars(old_turn(1))), cut="plain")
    out = keep(call_data(items))
    assert identities(out.input) == identities(items[5:])
    dumped = [i.model_dump(exclude_unset=True) if hasattr(i, "model_dump") else i for i in items]
    assert keep.last_report.before.chars == chars(with_instructions(dumped))
    assert keep.last_report.steps[0].chars_before == chars(dumped[:10])

    # Kept, they are the SDK's model objects themselves.
    keep_all = context_policy_input_filter({"mode": "validate"}, cut="plain")
    out = keep_all(call_data(items))
    assert identities(out.input) == identities(items)
    assert out.input[1] is reasoning and out.input[2] is call and out.input[4] is answer


def compress(handler_id: str) -> dict[str, Any]:
    return {"mode": "reduce", "triggerChars": 1, "steps": [{
        "id": "c", "kind": "compress", "fragmentId": "history", "handlerId": handler_id,
        "targetChars": 0}]}


def test_the_stable_filter_hands_the_sdk_back_every_item_no_cut_changed():
    call = ResponseFunctionToolCall(call_id="call_p", name="lookup", arguments='{"q":"p"}',
                                    type="function_call", id="fc_p", status="completed")
    output = {"type": "function_call_output", "call_id": "call_p", "output": "po" * 200}
    items = [*old_turn(0, 300), question("old"), call, output, *old_turn(2, 300), question()]
    before = copy.deepcopy(items)
    keep = context_policy_input_filter(compress("clear-tool-results"),
                                       handlers=registry(clear_tool_results(keep=1)))
    out = keep(call_data(items)).input
    originals = {id(i) for i in items}
    dumped = [i if isinstance(i, dict) else i.model_dump(exclude_unset=True) for i in items]
    for item in out:
        if id(item) not in originals:  # a changed item: none of the given ones as it was
            assert all(item != d for d in dumped)
    assert call in out and sum(id(i) in originals for i in out) >= len(items) - 3
    assert keep.last_cut is not None and items == before


def test_a_compress_step_hands_the_sdk_back_every_item_it_left_alone():
    call = ResponseFunctionToolCall(call_id="call_p", name="lookup", arguments='{"q":"p"}',
                                    type="function_call", id="fc_p", status="completed")
    answer = ResponseOutputMessage(
        id="msg_p", type="message", role="assistant", status="completed",
        content=[ResponseOutputText(type="output_text", text="pydantic answer", annotations=[])],
    )
    reasoning = ResponseReasoningItem(id="rs_p", type="reasoning",
                                      summary=[Summary(text="thinking", type="summary_text")])
    output = {"type": "function_call_output", "call_id": "call_p", "output": "po" * 200}
    items = [*old_turn(0, 300), question("old"), reasoning, call, output, answer,
             *old_turn(2, 300), question()]
    before = copy.deepcopy(items)
    keep = context_policy_input_filter(compress("clear-tool-results"),
                                       handlers=registry(clear_tool_results(keep=1)), cut="plain")
    out = keep(call_data(items)).input
    # Only the two older outputs were cleared: every other item is the SDK's own object.
    changed = [i for i, (a, b) in enumerate(zip(out, items, strict=True)) if a is not b]
    assert changed == [3, 8]
    for i in changed:
        assert out[i] == {**items[i],
                          "output": f"[tool result cleared: {len(items[i]['output'])} chars]"}
    assert out[6] is reasoning and out[7] is call and out[9] is answer
    assert keep.last_report.steps[0].status == "applied" and items == before

    # Inside the runner: the model is sent the SDK's items, but for the ones a handler cut.
    model = RecordingModel()
    spy = Spy(context_policy_input_filter(compress("truncate-messages"),
                                          handlers=registry(truncate_messages(max_chars=100)), cut="plain"))
    history = [item for i in range(3) for item in old_turn(i, 300)]
    Runner.run_sync(make_agent(model), [*history, question()], run_config=run_config(spy))
    for given, returned in zip(spy.given, spy.returned, strict=True):
        assert len(given) == len(returned.input)
        cut = [i for i, (a, b) in enumerate(zip(returned.input, given)) if a is not b]
        long = [i for i, item in enumerate(given) if isinstance(item, dict) and (
            (item.get("role") == "user" and len(item["content"]) > 100)
            or (item.get("type") == "function_call_output" and len(item["output"]) > 100))]
        assert cut == long and len(long) == 6  # 3 old questions and 3 old outputs
        assert all(returned.input[i].keys() == given[i].keys() for i in cut)
    assert identities(model.calls[-1].input) == identities(spy.returned[-1].input)


def test_validate_mode_reports_an_orphan_output_and_drops_nothing():
    items = [question("old"), {"type": "function_call_output", "call_id": "call_gone",
                               "output": "late"}, question()]
    keep = context_policy_input_filter({"mode": "validate"}, cut="plain")
    out = keep(call_data(items))
    assert identities(out.input) == identities(items)
    warnings = [(w.code, w.fragment_id, w.tool_call_id) for w in keep.last_report.warnings]
    assert warnings == [("orphan-tool-result", "history", "call_gone")]


def test_the_policy_is_checked_once_when_the_filter_is_built():
    with pytest.raises(ContextPolicyError) as info:
        context_policy_input_filter({"mode": "reduce", "triggerChar": 10, "steps": []})
    assert "triggerChar" in str(info.value)
    for fragment, code in (("question", "protected-fragment"), ("system", "protected-fragment"),
                           ("instructions", "protected-fragment"),
                           ("memory", "unknown-fragment")):
        policy = trim(0)
        policy["steps"][0]["fragmentId"] = fragment
        with pytest.raises(ContextPolicyError) as info:
            context_policy_input_filter(policy)
        assert [(i.path, i.code) for i in info.value.issues] == [
            ("steps[0].fragmentId", code)], fragment
    # Both reducible fragments may be named.
    both = trim(0)
    both["steps"].append({**both["steps"][0], "id": "tools", "fragmentId": "turn"})
    assert [s.fragment_id for s in context_policy_input_filter(both).policy.policy.steps] == [
        "history", "turn"]
    with pytest.raises(ContextPolicyError) as info:
        context_policy_input_filter({"mode": "audit", "mutableFragmentIds": ["history"]})
    assert [issue.code for issue in info.value.issues] == ["unsupported-mode"]
    with pytest.raises(ContextPolicyError) as info:
        context_policy_input_filter({"mode": "reduce", "triggerTokens": 10, "steps": [
            {"id": "t", "kind": "trim", "fragmentId": "history", "keepGroups": 0,
             "targetChars": 0}]})
    assert [issue.code for issue in info.value.issues] == ["tokens-without-counter"]
    compress = {"mode": "reduce", "triggerChars": 1, "steps": [{
        "id": "s", "kind": "compress", "fragmentId": "history", "handlerId": "missing",
        "targetChars": 0}]}
    with pytest.raises(ContextPolicyError) as info:
        context_policy_input_filter(compress)
    assert info.value.codes == ["unknown-handler"]
    prepared = prepare_policy(trim(0))
    assert context_policy_input_filter(prepared).policy is prepared
    with pytest.raises(ContextPolicyError) as info:
        context_policy_input_filter(prepared, counter=len)
    assert [issue.code for issue in info.value.issues] == ["invalid-option"]


def test_every_problem_of_the_policy_at_once():
    policy = {"mode": "reduce", "triggerTokens": 10, "steps": [
        {"id": "a", "kind": "trim", "fragmentId": "question", "keepGroups": 0,
         "targetChars": 0},
        {"id": "b", "kind": "compress", "fragmentId": "notes", "handlerId": "missing",
         "targetChars": 0},
    ]}
    with pytest.raises(ContextPolicyError) as info:
        context_policy_input_filter(policy)
    assert sorted((i.path, i.code) for i in info.value.issues) == [
        ("steps[0].fragmentId", "protected-fragment"),
        ("steps[1].fragmentId", "unknown-fragment"),
        ("steps[1].handlerId", "unknown-handler"),
        ("triggerTokens", "tokens-without-counter"),
    ]
    with pytest.raises(ContextPolicyError) as info:
        context_policy_input_filter(prepare_policy({"mode": "audit", "mutableFragmentIds": [
            "question"]}), counter=len)
    assert sorted((i.path, i.code) for i in info.value.issues) == [
        ("counter", "invalid-option"), ("mode", "unsupported-mode"),
        ("mutableFragmentIds[0]", "protected-fragment")]


def test_bad_items_are_plan_errors_from_the_run():
    keep = context_policy_input_filter(trim(0), cut="plain")
    with pytest.raises(ContextPlanError) as info:
        keep(call_data([question("old"), "not an item", question()]))
    # Named where the SDK's list holds it (the item is measured before it is in a fragment).
    assert [issue.path for issue in info.value.issues] == ["input[1]"]
    assert info.value.codes == ["invalid-message"]


# ---------------------------------------------------------------------------------------------
# Layering.


def test_import_contextpolicy_never_imports_agents():
    code = (
        "import sys, contextpolicy, contextpolicy.adapters.openai_agents; "
        "contextpolicy.process_context; contextpolicy.ContextPlan; "
        "print(sorted(m for m in sys.modules if m == 'agents' or m.startswith('agents.')))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_a_missing_sdk_names_the_extra(monkeypatch: pytest.MonkeyPatch):
    for name in ("agents", "agents.run_config", "agents.run"):
        monkeypatch.setitem(sys.modules, name, None)
    with pytest.raises(ImportError, match=r"contextpolicy\[openai-agents\]"):
        context_policy_input_filter(trim(0))
    with pytest.raises(ImportError, match=r"contextpolicy\[openai-agents\]"):
        ContextPolicySession(object(), trim(0))


def test_the_tools_fragment_holds_what_the_model_is_offered():
    from agents import WebSearchTool, handoff

    from contextpolicy.adapters.openai_agents import agent_tools

    @function_tool(is_enabled=False)
    def hidden(y: int) -> str:
        """Never offered."""
        return "y"

    billing = Agent(name="Billing agent", handoff_description="billing")
    agent = Agent(name="a", tools=[lookup, hidden, WebSearchTool()],
                  handoffs=[billing, handoff(Agent(name="c"))])
    schemas = json.loads(agent_tools(agent))
    assert [s["name"] if s["type"] == "function" else s["type"] for s in schemas] == [
        "lookup", "web_search", "transfer_to_billing_agent", "transfer_to_c"]
    assert schemas[0]["parameters"] == lookup.params_json_schema
    assert schemas[2]["description"] == handoff(billing).tool_description
    assert agent_tools(Agent(name="bare")) is None
