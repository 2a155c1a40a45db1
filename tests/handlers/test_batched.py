"""Handlers that act in batches: ``clear_tool_results(clear_at_least=...)`` and
``truncate_messages(min_gain=...)`` change nothing until that much would go at once."""

from __future__ import annotations

from itertools import pairwise
from typing import Any

import pytest

from contextpolicy import ContextPolicyError, process_context
from contextpolicy.handlers import clear_tool_results, from_config, registry, truncate_messages
from contextpolicy.stable import StableCut
from tests.support.replays import call_points, tool_session

pytestmark = pytest.mark.usefixtures("pipeline_kernel")


def compress(handler_id: str, trigger: int = 1, target: int = 0) -> dict[str, Any]:
    return {"mode": "reduce", "triggerChars": trigger, "steps": [
        {"id": "c", "kind": "compress", "fragmentId": "history", "targetChars": target,
         "handlerId": handler_id}]}


def history(results: int, size: int = 1_000) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for i in range(results):
        out += [{"role": "user", "content": f"q{i}"},
                {"role": "assistant", "content": None, "tool_calls": [{
                    "id": f"c{i}", "type": "function",
                    "function": {"name": "f", "arguments": "{}"}}]},
                {"role": "tool", "tool_call_id": f"c{i}", "content": "r" * size}]
    return [*out, {"role": "user", "content": "now?"}]


def cleared(result: Any) -> int:
    return sum(1 for m in result.input if m.get("role") == "tool"
               and str(m["content"]).startswith("[tool result cleared"))


@pytest.mark.parametrize(("least", "results", "expected"), [
    (0, 2, 1),         # no batching: the one result older than the newest is cleared
    (5_000, 2, 0),     # one result would free ~960 chars: below the batch, nothing changes
    (5_000, 7, 6),     # six results free ~5,800 chars: all six go at once
])
def test_clear_at_least_clears_nothing_until_the_batch_is_worth_it(least, results, expected):
    handlers = registry(clear_tool_results(keep=1, clear_at_least=least))
    result = process_context(
        {"fragments": [{"id": "history", "kind": "history", "messages": history(results)}]},
        compress("clear-tool-results"), handlers=handlers)
    assert cleared(result) == expected
    step = result.report.steps[0]
    assert (step.status == "applied") == (expected > 0)


def test_clear_at_least_counts_tokens_with_a_counter():
    def words(text: str) -> int:
        return len(text.split())

    # Each result is one word of 1,000 chars: clearing six frees far more than 100 chars but
    # fewer than 100 tokens (the placeholder has more words than the result).
    handlers = registry(clear_tool_results(keep=1, clear_at_least=100))
    plan = {"fragments": [{"id": "history", "kind": "history", "messages": history(7)}]}
    assert cleared(process_context(plan, compress("clear-tool-results"), handlers=handlers)) == 6
    counted = process_context(plan, compress("clear-tool-results"), handlers=handlers,
                              counter=words)
    assert cleared(counted) == 0


def test_min_gain_truncates_only_when_enough_would_go():
    plan = {"fragments": [{"id": "history", "kind": "history", "messages": [
        {"role": "user", "content": "x" * 2_100}, {"role": "assistant", "content": "ok"}]}]}
    for gain, cut in ((0, True), (100, True), (5_000, False)):
        handlers = registry(truncate_messages(max_chars=2_000, min_gain=gain))
        result = process_context(plan, compress("truncate-messages"), handlers=handlers)
        assert (len(result.input[0]["content"]) < 2_100) is cut, gain
    text = {"fragments": [{"id": "history", "kind": "history", "text": "y" * 3_000}]}
    handlers = registry(truncate_messages(max_chars=2_000, min_gain=5_000))
    assert process_context(text, compress("truncate-messages"),
                           handlers=handlers).input[0]["content"] == "y" * 3_000


def test_the_parameters_come_from_a_handlers_document_and_are_checked():
    handlers = from_config({"clear-tool-results": {"clearAtLeast": 4_000},
                            "truncate-messages": {"minGain": 300}})
    assert handlers["clear-tool-results"].params.clear_at_least == 4_000
    assert handlers["truncate-messages"].params.min_gain == 300
    with pytest.raises(ContextPolicyError, match="clearAtLeast"):
        from_config({"clear-tool-results": {"clearAtLeast": -1}})
    with pytest.raises(Exception, match=r"min_gain|minGain"):
        truncate_messages(min_gain="5")  # type: ignore[arg-type]


def test_batched_clearing_rewrites_the_history_at_fewer_calls():
    # An agent whose policy clears old tool results on every call above a low trigger: one
    # at a time without a batch, several at once with one.
    messages = tool_session(40, result_chars=(1_500, 2_500))
    policy = compress("clear-tool-results", trigger=15_000, target=0)
    rewrites = {}
    for least in (0, 8_000):
        cut = StableCut(policy, handlers=registry(clear_tool_results(keep=2,
                                                                     clear_at_least=least)))
        inputs = [cut.process(messages[:n]).input for n in [*call_points(messages),
                                                               len(messages)]]
        rewrites[least] = sum(1 for a, b in pairwise(inputs) if b[:len(a)] != a)
    assert rewrites[8_000] * 3 <= rewrites[0]


@pytest.mark.parametrize("handler", [clear_tool_results(keep=1, clear_at_least=50_000),
                                     truncate_messages(max_chars=500, min_gain=50_000),
                                     clear_tool_results(keep=10)])
def test_a_built_in_handler_that_waits_leaves_its_step_unchanged_not_failed(handler):
    # Below its batch, or with nothing to do, a built-in handler gives its input back: the step
    # waits. It is not a failure: the run's missed reason does not blame a step, and a caller
    # who asked to raise on a failed step gets no error.
    plan = {"fragments": [{"id": "history", "kind": "history", "messages": history(7)}]}
    for on_step_error in ("continue", "raise"):
        result = process_context(plan, compress(handler.handler_id), handlers=registry(handler),
                                 on_step_error=on_step_error)
        (step,) = result.report.steps
        assert (step.status, step.reason) == ("unchanged", "nothing-to-compress")
        assert step.message is not None and "returned its input" in step.message
        assert step.chars_after == step.chars_before and step.handler_figures is None
        assert result.report.missed_reason == "no-step-could-act"
        assert result.input == history(7)


def test_a_handler_of_the_caller_that_returns_its_input_still_fails():
    plan = {"fragments": [{"id": "history", "kind": "history", "messages": history(3)}]}
    result = process_context(plan, compress("mine"), handlers={"mine": lambda r: list(r.content)})
    (step,) = result.report.steps
    assert (step.status, step.reason) == ("failed", "not-smaller")
    assert result.report.missed_reason == "step-failed"
