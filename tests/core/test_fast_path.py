"""The one-call paths agree with the step-by-step run, figure for figure.

``process_context`` runs validate, and a reduce whose steps are all trims by chars, in one kernel
call (``_kernel.fused_result``: ``reduce_plan``, its records held by a result that reads them
later) when nothing needs the steps one by one (no counter, listener, cancel, handler or custom
implementation); the JSONL runner runs such transcripts through
``_kernel.reduce_transcript`` without building a plan. A listener forces the step-by-step run,
so the two can be compared on the same plan: the same input (the same message objects), the
same report (as models and as JSON, byte for byte), the same plan.
"""

from __future__ import annotations

import copy
import json

import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from contextpolicy import (
    ContextPlan,
    Fragment,
    PreparedPolicy,
    prepare_policy,
    process_context,
    validate_context_policy,
)
from contextpolicy import _kernel as kernel
from contextpolicy.jsonl.worker import LineWorker
from contextpolicy.synthetic import (
    SEED_POLICY,
    agent_trace_corpus,
    chat_corpus,
    long_transcript_corpus,
)
from tests.support.plans import plans

# The whole pipeline runs on the compiled kernel and on the twin: ids [c] and [py].
pytestmark = pytest.mark.usefixtures("pipeline_kernel")

SETTINGS = settings(
    max_examples=120, deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)


@pytest.fixture
def calls(monkeypatch):
    """How often each one-call kernel function ran."""
    seen = {"fused_result": 0, "reduce_plan": 0, "reduce_transcript": 0}
    for name in seen:
        real = getattr(kernel, name)

        def spy(*args, _real=real, _name=name, **kwargs):
            seen[_name] += 1
            return _real(*args, **kwargs)

        monkeypatch.setattr(kernel, name, spy)
    return seen


def step_by_step(plan, policy, **kwargs):
    return process_context(plan, policy, on_event=lambda event: None, **kwargs)


def assert_same(fast, slow, plan):
    # The same message objects; a text fragment's message is made anew, with the same content.
    given = {id(m) for f in plan.fragments if f.messages is not None for m in f.messages}
    assert fast.input == slow.input
    for a, b in zip(fast.input, slow.input, strict=True):
        assert a is b if id(b) in given else id(a) not in given
    # Byte for byte: the same keys in the same order, the same values.
    # json, not orjson: a generated tool id may hold a lone surrogate, which orjson refuses.
    assert json.dumps(fast.report_json()) == json.dumps(slow.report_json())
    assert fast.report == slow.report
    assert json.dumps(fast.report.to_json_dict()) == json.dumps(slow.report.to_json_dict())
    assert fast.plan.model_dump() == slow.plan.model_dump()
    for a, b in zip(fast.plan.fragments, slow.plan.fragments, strict=True):
        assert (a.messages is None) == (b.messages is None)
        if a.messages is not None:
            assert all(x is y for x, y in zip(a.messages, b.messages, strict=True))


def transcripts():
    return (chat_corpus(60, seed=1) + agent_trace_corpus(6, seed=2)
            + long_transcript_corpus(2, seed=3))


TRIMS = [
    SEED_POLICY,
    {"mode": "validate"},
    {"mode": "reduce", "triggerChars": 500, "steps": [
        {"id": "a", "kind": "trim", "fragmentId": "history", "grouping": {"kind": "message"},
         "keepGroups": 0, "targetChars": 300},
        {"id": "b", "kind": "trim", "fragmentId": "history", "keepGroups": 1,
         "targetChars": 100}]},
    {"mode": "reduce", "triggerChars": 10**9, "steps": [
        {"id": "a", "kind": "trim", "fragmentId": "history", "keepGroups": 0,
         "targetChars": 0}]},
]


@pytest.mark.parametrize("policy", TRIMS, ids=["seed", "validate", "two-trims", "untriggered"])
def test_one_call_equals_step_by_step_on_the_corpora(policy, calls):
    typed = validate_context_policy(policy)
    prepared = prepare_policy(policy)
    ran = 0
    for messages in transcripts():
        plan = ContextPlan.from_messages(messages)
        if policy["mode"] == "reduce" and not any(f.id == "history" for f in plan.fragments):
            continue
        snapshot = copy.deepcopy(messages)
        slow = step_by_step(plan, typed)
        for given_policy in (policy, typed, prepared):
            assert_same(process_context(plan, given_policy), slow, plan)
        assert messages == snapshot  # the caller's data, untouched
        ran += 1
    assert ran > 40
    assert calls["fused_result"] == 3 * ran  # the one-call path did run, every time


@SETTINGS
@given(plans(), st.data())
def test_one_call_equals_step_by_step_on_any_plan(plan, data):
    trims = []
    for i in range(data.draw(st.integers(1, 3))):
        fragment = data.draw(st.sampled_from(
            [f for f in plan.fragments if f.messages is not None and not f.is_protected]
        ))
        trims.append({"id": f"t{i}", "kind": "trim", "fragmentId": fragment.id,
                      "grouping": {"kind": data.draw(st.sampled_from(["user-turn", "message"]))},
                      "keepGroups": data.draw(st.integers(0, 5)),
                      "targetChars": data.draw(st.integers(0, 3000))})
    policy = {"mode": "reduce", "triggerChars": data.draw(st.integers(1, 5000)), "steps": trims}
    if data.draw(st.booleans()):
        policy["targetInputChars"] = data.draw(st.integers(1, policy["triggerChars"]))
    for given_policy in (policy, {"mode": "validate"}):
        assert_same(process_context(plan, given_policy), step_by_step(plan, given_policy), plan)


def test_the_step_by_step_run_serves_what_one_call_cannot(calls):
    plan = ContextPlan.from_messages(chat_corpus(5, seed=9)[3])
    for kwargs in ({"counter": len}, {"on_event": lambda event: None}, {"handlers": {}},
                   {"implementations": {}}):
        process_context(plan, {"mode": "validate"}, **kwargs)
    assert calls["fused_result"] == calls["reduce_plan"] == 0
    # A fragment of a subclass is read as it says, step by step.

    class Mine(Fragment):
        pass

    mine = ContextPlan(fragments=[Mine(id="h", kind="history", messages=[
        {"role": "user", "content": "hi"}])])
    assert process_context(mine, {"mode": "validate"}).report.before.chars == 2
    assert calls["fused_result"] == 1  # asked, and it declined


def test_the_runner_in_one_call_equals_the_runner_step_by_step(calls):
    lines = [orjson.dumps({"id": f"c{i}", "messages": m, "extra": 12345678901234567890 % 97})
             for i, m in enumerate(transcripts())]
    for policy in TRIMS:
        fast, slow = LineWorker(policy, with_reports=True), LineWorker(policy, with_reports=True)
        assert fast.fused is not None
        slow.objects_of().fused = None  # the plan path: from_messages, process_context
        before = calls["reduce_transcript"]
        for number, raw in enumerate(lines, 1):
            a, b = fast.line(number, raw), slow.line(number, raw)
            assert (a.output, a.report, a.figures, a.error) == (
                b.output, b.report, b.figures, b.error)
        assert calls["reduce_transcript"] - before == len(lines)


def test_the_runner_errors_are_the_same_in_one_call():
    bad = [
        [{"role": "user", "content": 5}],
        [{"role": "system", "content": "s"}, {"content": "no role"}],
        [{"role": "user", "content": "q"}, 7],
        [{"role": "assistant", "tool_calls": "x"}, {"role": "user", "content": "q"}],
    ]
    fast, slow = LineWorker(SEED_POLICY, False), LineWorker(SEED_POLICY, False)
    slow.objects_of().fused = None  # the plan path
    for number, messages in enumerate(bad, 1):
        raw = orjson.dumps({"id": "x", "messages": messages})
        a, b = fast.line(number, raw), slow.line(number, raw)
        assert a.error is not None and a.error == b.error


def test_a_prepared_policy_checks_everything_once():
    with pytest.raises(Exception) as info:
        prepare_policy({"mode": "reduce", "triggerTokens": 5, "steps": [
            {"id": "c", "kind": "compress", "fragmentId": "history", "handlerId": "sum",
             "targetChars": 10}]}, handlers={"other": 5})
    codes = {issue.code for issue in info.value.issues}
    assert codes == {"tokens-without-counter", "unknown-handler", "handler-not-callable"}
    prepared = prepare_policy(SEED_POLICY)
    assert isinstance(prepared, PreparedPolicy) and prepared.mode == "reduce"
    with pytest.raises(TypeError):
        PreparedPolicy()
    plan = ContextPlan.from_messages(chat_corpus(8, seed=4)[2])
    with pytest.raises(Exception) as info:
        process_context(plan, prepared, counter=len)
    assert info.value.issues[0].code == "invalid-option"
    # Fragment references are checked against each plan, every issue at once (a step on the
    # history a plan does not hold is skipped instead: fragment-absent).
    other = ContextPlan(fragments=[Fragment(id="question", kind="question", text="q")])
    notes = prepare_policy({**SEED_POLICY, "steps": [
        {**SEED_POLICY["steps"][0], "fragmentId": "notes"}]})
    with pytest.raises(Exception) as info:
        process_context(other, notes)
    assert [i.code for i in info.value.issues] == ["unknown-fragment"]
    assert [(s.status, s.reason) for s in process_context(other, prepared).report.steps] == [
        ("skipped", "not-triggered")]


def test_a_prepared_compress_policy_carries_its_handlers_and_counter():
    policy = {"mode": "reduce", "triggerTokens": 3, "steps": [
        {"id": "c", "kind": "compress", "fragmentId": "history", "handlerId": "short",
         "targetChars": 1}]}
    asked = []

    def short(request):
        asked.append(request.step_id)
        return [{"role": "assistant", "content": "s"}]

    prepared = prepare_policy(policy, handlers={"short": short}, counter=lambda t: len(t.split()))
    plan = ContextPlan.from_messages([{"role": "user", "content": "a b c d"},
                                      {"role": "assistant", "content": "e f g"},
                                      {"role": "user", "content": "q"}])
    result = process_context(plan, prepared)
    assert asked == ["c"]
    assert result.report.steps[0].status == "applied"
    assert result.report.after.tokens == 2  # "s" and "q"


def test_cached_policies_follow_their_content():
    plan = ContextPlan.from_messages(chat_corpus(30, seed=6)[11])
    assert any(f.id == "history" for f in plan.fragments)
    doc = copy.deepcopy(SEED_POLICY)
    first = process_context(plan, doc).report
    doc["steps"][0]["targetChars"] = 0  # the same dict, changed in place
    again = process_context(plan, doc).report
    assert again.steps[0].target_chars == 0 != first.steps[0].target_chars
    # A typed policy whose list changed in place is prepared again.
    typed = validate_context_policy(SEED_POLICY)
    assert process_context(plan, typed).report.steps[0].id == "recent-history"
    typed.steps.append(typed.steps[0].model_copy(update={"id": "again"}))
    assert [s.id for s in process_context(plan, typed).report.steps] == [
        "recent-history", "again"]
    # NaN is written as null: a document with NaN never takes the place of one with null.
    ok = {"mode": "reduce", "triggerChars": 10, "targetInputTokens": None,
          "steps": SEED_POLICY["steps"]}
    process_context(plan, ok)
    with pytest.raises(Exception) as info:
        process_context(plan, dict(ok, targetInputTokens=float("nan")))
    assert info.value.issues[0].path == "targetInputTokens"


def test_a_result_builds_its_plan_and_report_once_and_only_when_read():
    plan = ContextPlan.from_messages(chat_corpus(30, seed=6)[11])
    result = process_context(plan, SEED_POLICY)
    assert result._report is None and result._plan is None  # records only, so far
    assert result.report is result.report and result.plan is result.plan
    assert result.report_json() == result.report.model_dump(by_alias=True, mode="json")
    assert result.plan.fragments[0] is plan.fragments[0]


# ---------------------------------------------------------------------------------------------
# Validate in one call: records that share what validate cannot change, a result made by the
# kernel, and a process_context that takes its options as keyword-only arguments.

VALIDATE = {"mode": "validate"}


def _odd_plans():
    """Plans the corpora leave out: a fragment longer than the kernel keeps on its stack, with
    tool traffic (an orphan result, an unanswered call) past that point; text fragments; an
    empty fragment; a str subclass as content; parts that carry no text."""
    from tests.support.hostile_objects import LyingStr

    long = []
    for i in range(300):
        long.append({"role": "user", "content": f"question {i}"})
        long.append({"role": "assistant", "content": None, "tool_calls": [
            {"id": f"c{i}", "type": "function",
             "function": {"name": "look", "arguments": '{"q": 1}'}}]})
        long.append({"role": "tool", "tool_call_id": f"c{i}", "content": "found"})
    long.append({"role": "tool", "tool_call_id": "nobody", "content": "orphan"})
    long.append({"role": "assistant", "tool_calls": [
        {"id": "late", "function": {"name": "f", "arguments": {"n": [1, 2.5]}}}]})
    return [
        ContextPlan(fragments=[
            Fragment(id="rules", kind="system", text="be brief"),
            Fragment(id="history", kind="history", messages=long),
            Fragment(id="question", kind="question", messages=[
                {"role": "user", "content": "and now?"}]),
        ]),
        ContextPlan(fragments=[
            Fragment(id="rules", kind="system", text="é😀 rules"),
            Fragment(id="history", kind="history", messages=[]),
            Fragment(id="note", kind="note", role="user", text=""),
            Fragment(id="question", kind="question", messages=[
                {"role": "user", "content": LyingStr("what now?")},
                {"role": "user", "content": [
                    {"type": "text", "text": "see"},
                    {"type": "image_url", "image_url": {"url": "data:,"}}]}]),
        ]),
        ContextPlan(fragments=[Fragment(id="history", kind="history", messages=long[:256]),
                               Fragment(id="more", kind="memory", messages=long[:257])]),
        ContextPlan(fragments=[]),
    ]


def test_validate_in_one_call_equals_step_by_step_on_odd_plans(calls):
    odd = _odd_plans()
    for plan in odd:
        slow = step_by_step(plan, VALIDATE)
        for policy in (VALIDATE, validate_context_policy(VALIDATE), prepare_policy(VALIDATE)):
            assert_same(process_context(plan, policy), slow, plan)
    assert calls["fused_result"] == 3 * len(odd)
    assert process_context(odd[0], VALIDATE).report.warnings[-1].tool_call_id == "late"


def test_validate_records_share_what_nothing_changes():
    from contextpolicy import PROTECTED_KINDS

    for plan in _odd_plans():
        for watermark in (-1, 0, 10**6):
            raw = kernel.reduce_plan(plan.fragments, (), -1, watermark, Fragment,
                                     PROTECTED_KINDS)
            t, ids = raw, raw.ids
            # Nothing changes: the figures after are the figures before, the very objects.
            assert raw.after is raw.before
            for name in ("chars", "messages", "opaque"):
                assert getattr(t, f"{name}_after") is getattr(t, f"{name}_before")
            assert raw.kept == [None] * len(ids) and raw.steps == []
            assert t.messages_removed == t.groups_removed == 0
            assert t.watermark_met is (watermark < 0 or t.chars_after <= watermark)
            assert raw.triggered is False and ids == [f.id for f in plan.fragments]
            assert (t.chars_before, t.messages_before, t.opaque_before) == tuple(
                sum(b[k] for b in raw.before) for k in range(3))
            # As the step-by-step run measures it.
            report = step_by_step(plan, VALIDATE).report
            assert [(b.chars, b.messages) for b in raw.before] == [
                (f.chars_before, f.messages_before) for f in report.fragments]
            assert len(raw.warnings) == len(report.warnings)
            assert len(raw.input) == report.after.messages


def test_the_kernel_makes_the_result_and_its_records_wait():
    from contextpolicy import PROTECTED_KINDS, ContextResult

    plan = _odd_plans()[1]
    prepared = prepare_policy(VALIDATE)

    def make(*args):
        return args

    raw = kernel.reduce_plan(plan.fragments, (), -1, -1, Fragment, PROTECTED_KINDS)

    class Mine(ContextResult):  # no slots of its own: set by name
        pass

    class Loose:  # no slots at all
        pass

    for cls in (ContextResult, Mine, Loose, ContextResult):
        result = kernel.fused_result(cls, make, plan, prepared, plan.fragments, (), -1, -1,
                                     Fragment, PROTECTED_KINDS)
        assert type(result) is cls
        assert result._input == raw.input and result._make[:3] == (make, plan, prepared)
        assert result._make[3] == raw
        assert result._plan is None and result._records is None and result._report is None
    # Read, the records are made once, by make.
    result = kernel.fused_result(ContextResult, make, plan, prepared, plan.fragments, (), -1,
                                 -1, Fragment, PROTECTED_KINDS)
    assert result._made() == (plan, prepared, raw) and result._make is None
    # Declined: a fragment of a subclass, a step on a protected fragment.

    class Other(Fragment):
        pass

    odd = [Other(id="h", kind="history", messages=[])]
    assert kernel.fused_result(ContextResult, make, plan, prepared, odd, (), -1, -1, Fragment,
                               PROTECTED_KINDS) is None
    assert kernel.fused_result(ContextResult, make, plan, prepared, plan.fragments,
                               (("rules", 0, 0, 0),), 0, 0, Fragment, PROTECTED_KINDS) is None
    with pytest.raises(TypeError, match="expected a class, got int"):
        kernel.fused_result(5, make, plan, prepared, plan.fragments, (), -1, -1)


def test_a_prepared_validate_policy_follows_its_policy():
    plan = ContextPlan.from_messages(chat_corpus(8, seed=4)[2])
    prepared = prepare_policy(VALIDATE)
    assert prepared.current(prepared.policy)
    assert process_context(plan, prepared).report.mode == "validate"
    # Its policy replaced, the call runs the policy it now holds, as before.
    prepared.policy = validate_context_policy(SEED_POLICY)
    assert not prepared.current(prepared.policy)
    result = process_context(plan, prepared)
    assert result.report == process_context(plan, SEED_POLICY).report
    prepared.policy = validate_context_policy(VALIDATE)  # another validate policy: current
    assert prepared.current(prepared.policy)
    assert process_context(plan, prepared).report.mode == "validate"


def test_process_context_takes_its_options_by_keyword_as_documented(calls):
    import inspect

    params = list(inspect.signature(process_context).parameters.values())
    assert [p.name for p in params] == ["plan", "policy", "handlers", "counter", "cancel",
                                        "on_event", "on_step_error", "implementations"]
    assert {p.kind for p in params[:2]} == {inspect.Parameter.POSITIONAL_OR_KEYWORD}
    assert {p.kind for p in params[2:]} == {inspect.Parameter.KEYWORD_ONLY}
    assert params[6].default == "continue" and all(
        p.default is None for p in params[2:] if p.name != "on_step_error")
    assert process_context.__name__ == "process_context" and "Never mutates" in (
        process_context.__doc__ or "")
    plan = ContextPlan.from_messages(chat_corpus(8, seed=4)[2])
    prepared = prepare_policy(VALIDATE)
    for call, message in (
        (lambda: process_context(plan, prepared, None), "takes 2 positional arguments"),
        (lambda: process_context(plan, prepared, bogus=1), "unexpected keyword argument"),
        (lambda: process_context(plan), "missing 1 required positional argument"),
        (lambda: process_context(plan, prepared, plan=plan), "multiple values for argument"),
    ):
        with pytest.raises(TypeError, match=message) as info:
            call()
        assert str(info.value).startswith("process_context()")
    # Options given as their defaults, or on_step_error="raise", take the one call too.
    plain = process_context(plan, prepared)
    for options in ({"handlers": None, "counter": None, "cancel": None, "on_event": None,
                     "implementations": None}, {"on_step_error": "raise"}, {}):
        assert_same(process_context(plan=plan, policy=prepared, **options), plain, plan)
    assert calls["fused_result"] == 4
    with pytest.raises(Exception) as info:
        process_context(plan, prepared, on_step_error="never")
    assert info.value.issues[0].path == "on_step_error"


def test_fragment_fields_are_read_as_their_class_keeps_them():
    # A class whose __dict__ is its own (a property) is read through it, as the attribute
    # says; Fragment, whose __dict__ is every class's, without the attribute lookup.
    class Shown:
        def __init__(self, fields):
            self.fields = fields

        @property
        def __dict__(self):
            return self.fields

    messages = [{"role": "user", "content": "abc"}]
    shown = [Shown({"id": "h", "messages": messages, "text": None}), Shown(
        {"id": "n", "messages": None, "text": "note"})]
    shown[1].assembled_role = "user"
    for fragment_type in (Shown, Fragment, Shown):
        fragments = shown if fragment_type is Shown else [
            Fragment(id="h", kind="history", messages=messages),
            Fragment(id="n", kind="note", text="note")]
        raw = kernel.reduce_plan(fragments, (), -1, -1, fragment_type)
        assert raw.ids == ["h", "n"] and raw.before == [(3, 1, 0), (4, 1, 0)]
        assert raw.input == [*messages, {"role": "user", "content": "note"}]
