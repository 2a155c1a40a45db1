"""``mode: validate``, usage figures, tokens, warnings, assembly and the hard budget."""

from __future__ import annotations

import copy
import json

import pytest

from contextpolicy import (
    ContextPlan,
    ContextPolicyError,
    Fragment,
    InputBudgetError,
    TokenCounter,
    check_input_budget,
    process_context,
)

# The whole pipeline runs on the compiled kernel and on the twin: ids [c] and [py].
pytestmark = pytest.mark.usefixtures("pipeline_kernel")

PLAN = {
    "fragments": [
        {"id": "system", "kind": "system", "text": "Be brief."},
        {"id": "evidence", "kind": "evidence", "text": "Order 7 shipped.", "metadata": {"src": "db"}},
        {"id": "history", "kind": "history", "messages": [
            {"role": "user", "content": "Where is my order?"},
            {"role": "assistant", "content": None, "tool_calls": [
                {"id": "c1", "type": "function", "function": {"name": "lookup", "arguments": '{"id":7}'}},
            ]},
            {"role": "tool", "tool_call_id": "c1", "content": "shipped"},
            {"role": "assistant", "content": [{"type": "output_text", "text": "It shipped."},
                                              {"type": "image_url", "image_url": {"url": "x"}}]},
        ]},
        {"id": "question", "kind": "question", "text": "When will it arrive?"},
    ]
}
HISTORY_CHARS = 18 + (6 + 8) + 7 + 11  # question, lookup + {"id":7}, shipped, It shipped.


def test_validate_assembles_and_reports():
    plan = copy.deepcopy(PLAN)
    result = process_context(plan, {"mode": "validate"})
    assert plan == PLAN
    assert result.input == [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "Order 7 shipped."},
        *PLAN["fragments"][2]["messages"],
        {"role": "user", "content": "When will it arrive?"},
    ]
    report = result.report
    assert report.mode == "validate" and report.triggered is False
    assert report.before == report.after
    assert report.before.chars == 9 + 16 + HISTORY_CHARS + 20
    assert report.before.messages == 7
    assert report.before.fragments == 4
    assert report.before.opaque_parts == 1
    assert report.before.tokens is None
    assert report.steps == [] and report.warnings == [] and report.audit is None
    assert [f.chars_before for f in report.fragments] == [9, 16, HISTORY_CHARS, 20]
    assert not any(f.changed for f in report.fragments)
    assert result.plan.fragments == as_fragments(PLAN)


def as_fragments(plan):
    return [Fragment.model_validate(f) for f in plan["fragments"]]


def test_report_json_is_camel_case():
    report = process_context(PLAN, {"mode": "validate"}).report
    data = report.model_dump(by_alias=True, mode="json")
    assert set(data) >= {"mode", "kernel", "triggered", "trigger", "target", "before", "after",
                         "targetReached", "steps", "warnings"}
    assert set(data["before"]) == {"chars", "tokens", "messages", "fragments", "opaqueParts",
                                   "tokensExact", "tokensReported"}
    assert json.loads(json.dumps(data)) == data


def test_tokens_with_a_callable_counter():
    calls = []

    def count(text: str) -> int:
        calls.append(text)
        return len(text.split())

    report = process_context(PLAN, {"mode": "validate"}, counter=count).report
    words = sum(len(t.split()) for t in calls)
    assert report.before.tokens == words
    # The counter saw exactly the text that chars counts.
    assert sum(len(t) for t in calls) == report.before.chars


def test_tokens_with_count_messages():
    class Counter:
        def count_text(self, text: str) -> int:
            return 1

        def count_messages(self, messages: list) -> int:
            return 100 * len(messages)

    result = process_context(PLAN, {"mode": "validate"}, counter=Counter())
    report = result.report
    # A counter that frames messages counts the plan as the input it assembles to (seven
    # messages here), framing once; each fragment is counted on its own.
    assert report.before.tokens == 700 == check_input_budget(result, counter=Counter()).tokens
    assert [f.tokens_before for f in report.fragments] == [1, 1, 400, 1]
    assert report.counter == "test_tokens_with_count_messages.<locals>.Counter"


@pytest.mark.parametrize("bad", [lambda t: -1, lambda t: 1.5, lambda t: "3", lambda t: None])
def test_bad_counter_results_are_errors(bad):
    with pytest.raises(ContextPolicyError) as info:
        process_context(PLAN, {"mode": "validate"}, counter=bad)
    assert info.value.codes == ["invalid-counter-result"]


def test_counter_must_be_callable():
    with pytest.raises(ContextPolicyError) as info:
        process_context(PLAN, {"mode": "validate"}, counter=42)
    assert info.value.codes == ["invalid-counter"]


def test_tool_pairing_warnings_drop_nothing():
    plan = {"fragments": [{"id": "history", "kind": "history", "messages": [
        {"role": "tool", "tool_call_id": "ghost", "content": "stale"},
        {"role": "user", "content": "hi"},
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": "c9", "function": {"name": "f", "arguments": "{}"}}]},
    ]}]}
    result = process_context(plan, {"mode": "validate"})
    assert [(w.code, w.fragment_id, w.index, w.tool_call_id) for w in result.report.warnings] == [
        ("orphan-tool-result", "history", 0, "ghost"),
        ("unanswered-tool-call", "history", 2, "c9"),
    ]
    assert len(result.input) == 3


def test_text_fragment_roles_in_input():
    plan = ContextPlan(fragments=[
        Fragment(id="a", kind="authorization", text="may refund"),
        Fragment(id="n", kind="note", text="internal", role="developer"),
    ])
    assert process_context(plan, {"mode": "validate"}).input == [
        {"role": "system", "content": "may refund"},
        {"role": "developer", "content": "internal"},
    ]


def test_process_refuses_bad_options():
    with pytest.raises(ContextPolicyError):
        process_context(PLAN, {"mode": "validate"}, on_step_error="ignore")
    with pytest.raises(ContextPolicyError):
        process_context(PLAN, {"mode": "validate"}, cancel=object())
    with pytest.raises(ContextPolicyError):
        process_context(PLAN, {"mode": "validate"}, handlers=["h"])


# ---------------------------------------------------------------------------------------------
# check_input_budget


def test_budget_within_returns_usage():
    result = process_context(PLAN, {"mode": "validate"})
    usage = check_input_budget(result, max_chars=result.report.after.chars)
    assert usage.chars == result.report.after.chars
    assert usage.messages == 7 and usage.opaque_parts == 1
    assert check_input_budget(result.input).chars == usage.chars


def test_budget_over_chars_raises_with_both_figures():
    result = process_context(PLAN, {"mode": "validate"})
    chars = result.report.after.chars
    with pytest.raises(InputBudgetError) as info:
        check_input_budget(result, max_chars=chars - 1)
    err = info.value
    assert (err.unit, err.used, err.limit) == ("chars", chars, chars - 1)
    assert f"{chars} chars used, {chars - 1} chars allowed" in str(err)


def test_budget_tokens_need_a_counter():
    with pytest.raises(ContextPolicyError) as info:
        check_input_budget([{"role": "user", "content": "hi there"}], max_tokens=5)
    assert info.value.codes == ["tokens-without-counter"]
    with pytest.raises(InputBudgetError) as over:
        check_input_budget([{"role": "user", "content": "hi there you"}], max_tokens=2,
                           counter=lambda t: len(t.split()))
    assert (over.value.unit, over.value.used, over.value.limit) == ("tokens", 3, 2)
    usage = check_input_budget([{"role": "user", "content": "a b"}], max_tokens=2,
                               counter=TokenCounter(lambda t: len(t.split())))
    assert usage.tokens == 2


@pytest.mark.parametrize("bad", [-1, 1.5, True, "10"])
def test_budget_limits_must_be_integers(bad):
    with pytest.raises(ContextPolicyError):
        check_input_budget([], max_chars=bad)
