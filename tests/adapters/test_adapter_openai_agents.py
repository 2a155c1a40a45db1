"""The OpenAI Agents SDK adapter: ``context_policy_input_filter`` inside ``Runner.run`` /
``run_sync`` / ``run_streamed`` and ``ContextPolicySession`` over the SDK's ``SQLiteSession``.

The model is a fake that implements the SDK's ``Model`` interface and records what it receives
(a reasoning item and a function call on the first call of every turn, a final message after
the tool's output), so every run carries ``reasoning``, ``function_call`` and
``function_call_output`` items. No API key, no tracing, no network. Marked ``extras``: the main
suite deselects it; CI runs it with ``pytest -m extras`` after installing ``[openai-agents]``.
"""

from __future__ import annotations

import asyncio
import copy
import inspect
import itertools
import json
import subprocess
import sys
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import agents
import hypothesis
import pytest
from agents import Agent, RunConfig, Runner, SQLiteSession, Usage, function_tool
from agents.items import ModelResponse
from agents.memory import Session
from agents.models.interface import Model
from agents.run import CallModelData, ModelInputData
from agents.run_context import RunContextWrapper
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from openai.types.responses import (
    Response,
    ResponseCompletedEvent,
    ResponseFunctionToolCall,
    ResponseOutputMessage,
    ResponseOutputText,
    ResponseReasoningItem,
)
from openai.types.responses.response_reasoning_item import Summary

from contextpolicy import (
    ContextPlanError,
    ContextPolicyError,
    check_input_budget,
    prepare_policy,
)
from contextpolicy.adapters.openai_agents import (
    ContextPolicyInputFilter,
    ContextPolicySession,
    context_policy_input_filter,
)
from contextpolicy.handlers import clear_tool_results, registry, truncate_messages

pytestmark = [pytest.mark.extras, pytest.mark.usefixtures("pipeline_kernel")]

INSTRUCTIONS = "Answer from the lookup tool, briefly."


@pytest.fixture(autouse=True)
def offline(monkeypatch: pytest.MonkeyPatch) -> None:
    """No key to reach OpenAI with, and no traces to export."""
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    agents.set_tracing_disabled(True)


# ---------------------------------------------------------------------------------------------
# A fake model, a tool, and the items of finished turns.


@dataclass
class Call:
    instructions: str | None
    input: list[Any]  # the list object the model received
    snapshot: list[Any]  # a deep copy, taken on receipt


_ids = itertools.count()


class RecordingModel(Model):
    """Calls the tool when the last input item is a user message, answers otherwise. Item ids
    and call ids are unique across models (the SDK drops repeated ids from a model's input)."""

    def __init__(self) -> None:
        self.calls: list[Call] = []

    def _output(self, n: int, input: Any) -> list[Any]:
        last = input[-1] if isinstance(input, list) and input else {}
        uid = next(_ids)
        if isinstance(last, dict) and last.get("role") == "user":
            return [
                ResponseReasoningItem(id=f"rs_{uid}", type="reasoning",
                                      summary=[Summary(text=f"look it up {n}", type="summary_text")]),
                ResponseFunctionToolCall(id=f"fc_{uid}", call_id=f"call_{uid}", name="lookup",
                                         arguments=json.dumps({"q": f"q{n}"}),
                                         type="function_call", status="completed"),
            ]
        return [ResponseOutputMessage(
            id=f"msg_{uid}", type="message", role="assistant", status="completed",
            content=[ResponseOutputText(type="output_text", text=f"answer {n}", annotations=[])],
        )]

    def _record(self, system_instructions: str | None, input: Any) -> list[Any]:
        n = len(self.calls)
        self.calls.append(Call(system_instructions, input, copy.deepcopy(input)))
        return self._output(n, input)

    async def get_response(self, system_instructions: str | None, input: Any, *args: Any,
                           **kwargs: Any) -> ModelResponse:
        output = self._record(system_instructions, input)
        return ModelResponse(output=output, usage=Usage(), response_id=None)

    async def stream_response(self, system_instructions: str | None, input: Any, *args: Any,
                              **kwargs: Any) -> AsyncIterator[Any]:
        output = self._record(system_instructions, input)
        response = Response(id="resp_fake", created_at=0, model="fake", object="response",
                            output=output, tool_choice="auto", tools=[],
                            parallel_tool_calls=False, status="completed")
        yield ResponseCompletedEvent(type="response.completed", response=response,
                                     sequence_number=0)


@function_tool
def lookup(q: str) -> str:
    """Look ``q`` up."""
    return f"result for {q}"


# What the model reads of make_agent's tool, every call: the protected tools fragment.
TOOLS = json.dumps([{"type": "function", "name": "lookup", "description": "Look ``q`` up.",
                     "parameters": lookup.params_json_schema}], separators=(",", ":"))


def fragments_of(report: Any) -> dict[str, Any]:
    return {f.id: f for f in report.fragments}


def run(awaitable: Any) -> Any:
    """``asyncio.run`` without closing the thread's event loop policy's loop slot: SDKs before
    0.3 run ``run_sync`` on ``asyncio.get_event_loop()``, which ``asyncio.run`` leaves unset."""
    loop = asyncio.new_event_loop()
    try:
        return loop.run_until_complete(awaitable)
    finally:
        loop.close()


def make_agent(model: Model, instructions: str | None = INSTRUCTIONS) -> Agent[Any]:
    return Agent(name="assistant", instructions=instructions, model=model, tools=[lookup])


def run_config(input_filter: Any = None) -> RunConfig:
    return RunConfig(call_model_input_filter=input_filter, tracing_disabled=True)


def old_turn(i: int, size: int = 40) -> list[dict[str, Any]]:
    """A finished turn as the SDK replays it: question, reasoning, call, output, answer."""
    cid = f"call_old_{i}"
    return [
        {"role": "user", "content": f"question {i} " + "q" * size},
        {"type": "reasoning", "id": f"rs_old_{i}",
         "summary": [{"type": "summary_text", "text": "r" * size}]},
        {"type": "function_call", "call_id": cid, "name": "lookup",
         "arguments": json.dumps({"q": str(i)}), "id": f"fc_old_{i}"},
        {"type": "function_call_output", "call_id": cid, "output": "o" * size},
        {"type": "message", "role": "assistant",
         "content": [{"type": "output_text", "text": f"answer {i}"}]},
    ]


def question(text: str = "What is new?") -> dict[str, Any]:
    return {"role": "user", "content": text}


def trim(target: int, keep: int = 0, trigger: int = 1,
         grouping: str = "user-turn") -> dict[str, Any]:
    return {"mode": "reduce", "triggerChars": trigger, "steps": [{
        "id": "trim", "kind": "trim", "fragmentId": "history", "field": "messages",
        "grouping": {"kind": grouping}, "keepGroups": keep, "targetChars": target,
    }]}


def chars(items: list[Any]) -> int:
    return check_input_budget(items).chars


def with_instructions(items: list[Any], instructions: str | None = INSTRUCTIONS) -> list[Any]:
    head = [{"role": "system", "content": instructions}] if instructions is not None else []
    return head + list(items)


def with_tools(items: list[Any], instructions: str | None = INSTRUCTIONS) -> list[Any]:
    """``items`` as the model reads them from ``make_agent``'s agent: the instructions, the
    schemas of its tool (the protected ``tools`` fragment), then the items."""
    tools = [{"role": "system", "content": TOOLS}]
    head = [{"role": "system", "content": instructions}] if instructions is not None else []
    return head + tools + list(items)


def call_data(items: list[Any], instructions: str | None = INSTRUCTIONS) -> CallModelData[Any]:
    return CallModelData(model_data=ModelInputData(input=list(items), instructions=instructions),
                         agent=Agent(name="probe"), context=None)


class Spy:
    """A filter wrapped to keep what the SDK gave it (and a deep copy) and what it returned (the
    SDK goes on to deduplicate the returned ``input`` in place: the list is copied here)."""

    def __init__(self, inner: ContextPolicyInputFilter) -> None:
        self.inner = inner
        self.given: list[list[Any]] = []
        self.given_copies: list[list[Any]] = []
        self.returned: list[ModelInputData] = []
        self.awaitables = 0

    def __call__(self, data: CallModelData[Any]) -> Any:
        self.given.append(list(data.model_data.input))
        self.given_copies.append(copy.deepcopy(data.model_data.input))
        out = self.inner(data)
        if inspect.isawaitable(out):
            self.awaitables += 1

            async def done() -> ModelInputData:
                value = await out
                self.returned.append(ModelInputData(list(value.input), value.instructions))
                return value
            return done()
        self.returned.append(ModelInputData(list(out.input), out.instructions))
        return out


def identities(items: list[Any]) -> list[int]:
    return [id(item) for item in items]


def orphans(items: list[Any]) -> list[str]:
    """call_ids of function_call_output items without their function_call before them."""
    called: set[str] = set()
    out = []
    for item in items:
        kind = item.get("type") if isinstance(item, dict) else getattr(item, "type", None)
        cid = item.get("call_id") if isinstance(item, dict) else getattr(item, "call_id", None)
        if kind == "function_call":
            called.add(cid)
        elif kind == "function_call_output" and cid not in called:
            out.append(cid)
    return out


def expected_turns(sizes: list[int], target: int, keep: int = 0) -> int:
    """How many of the newest turns a user-turn trim keeps: the longest suffix that fits, but at
    least ``keep``."""
    kept, total = 0, 0
    for size in reversed(sizes):
        if total + size > target:
            break
        total += size
        kept += 1
    return min(len(sizes), max(kept, keep))


def assert_model_got_what_the_filter_kept(model: RecordingModel, spy: Spy) -> None:
    assert len(model.calls) == len(spy.returned)
    for call, returned, given, given_copy in zip(model.calls, spy.returned, spy.given,
                                                  spy.given_copies):
        # The very objects the filter kept, in order; the instructions as they came.
        assert identities(call.input) == identities(returned.input)
        assert call.instructions == returned.instructions == INSTRUCTIONS
        # Every kept item is one the SDK gave, in the SDK's order.
        positions = {id(item): i for i, item in enumerate(given)}
        order = [positions[id(item)] for item in returned.input]
        assert order == sorted(order)
        # The last user item is sent, and no output without its call.
        users = [item for item in given if isinstance(item, dict) and item.get("role") == "user"]
        assert any(item is users[-1] for item in returned.input)
        assert orphans(returned.input) == []
        # Nothing the SDK passed in was changed.
        assert given == given_copy


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
# Regressions of peers' trimming.


def parallel_turn(i: int, size: int = 30) -> list[dict[str, Any]]:
    """Two rounds of tools in one turn, the first round with two parallel calls."""
    a, b, c = f"call_{i}_a", f"call_{i}_b", f"call_{i}_c"
    return [
        {"role": "user", "content": f"turn {i} " + "u" * size},
        {"type": "reasoning", "id": f"rs_{i}_1", "summary": [{"type": "summary_text", "text": "r"}]},
        {"type": "function_call", "call_id": a, "name": "lookup", "arguments": "a" * size},
        {"type": "function_call", "call_id": b, "name": "lookup", "arguments": "{}"},
        {"type": "function_call_output", "call_id": a, "output": "x"},
        {"type": "function_call_output", "call_id": b, "output": "y" * size},
        {"type": "reasoning", "id": f"rs_{i}_2", "summary": [{"type": "summary_text", "text": "rr"}]},
        {"type": "function_call", "call_id": c, "name": "lookup", "arguments": "{}"},
        {"type": "function_call_output", "call_id": c, "output": "z" * (size // 2)},
        {"type": "reasoning", "id": f"rs_{i}_3", "summary": [{"type": "summary_text", "text": "rrr"}]},
        {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "done"}]},
    ]


def test_openai_agents_4322_function_call_output_whose_call_was_cut():
    # A trim by item (or by characters) drops the big function_call and keeps its small output:
    # the Responses API then rejects the input ("No tool call found for function call output").
    big_call = [
        question("old"),
        {"type": "function_call", "call_id": "call_big", "name": "lookup", "arguments": "A" * 500},
        {"type": "function_call_output", "call_id": "call_big", "output": "ok"},
        {"type": "message", "role": "assistant", "content": "small answer"},
    ]
    history = [*big_call, *parallel_turn(1), *parallel_turn(2)]
    sizes = [chars(big_call), chars(parallel_turn(1)), chars(parallel_turn(2))]
    for target in range(0, sum(sizes) + 2):
        keep = context_policy_input_filter(trim(target), cut="plain")
        out = keep(call_data([*history, question()]))
        assert orphans(out.input) == []
        assert not [w for w in keep.last_report.warnings if w.code == "orphan-tool-result"]
        kept = expected_turns(sizes, target)
        assert len(out.input) - 1 == sum(len(t) for t in (big_call, parallel_turn(1),
                                                           parallel_turn(2))[3 - kept:])

    # Inside the runner: a second run replays the first run's items, calls included, and the
    # cut falls before the newest finished turn.
    first = Runner.run_sync(make_agent(RecordingModel()), [*big_call, question("first")],
                            run_config=run_config())
    finished = first.to_input_list()
    assert [i.get("type") for i in finished].count("function_call_output") == 2
    model = RecordingModel()
    spy = Spy(context_policy_input_filter(trim(chars(finished[4:])), cut="plain"))
    Runner.run_sync(make_agent(model), [*finished, question("second")],
                    run_config=run_config(spy))
    assert_model_got_what_the_filter_kept(model, spy)
    assert "call_big" not in json.dumps(model.calls[0].snapshot)
    assert model.calls[0].snapshot == [*finished[4:], question("second")]


def test_openai_agents_2503_reasoning_item_never_left_without_its_following_item():
    # A reasoning item and the item after it travel together: the Responses API rejects a
    # function_call whose reasoning item was dropped ("provided without its required
    # 'reasoning' item") and a reasoning item left without what followed it.
    history = [*parallel_turn(0), *parallel_turn(1), *parallel_turn(2)]
    items = [*history, question()]
    glued = [i for i, item in enumerate(history) if item.get("type") == "reasoning"]
    assert glued
    total = chars(history)
    for grouping in ("user-turn", "message"):
        for target in range(0, total + 2, 3):
            keep = context_policy_input_filter(trim(target, grouping=grouping), cut="plain")
            out = keep(call_data(items))
            kept = {id(item) for item in out.input}
            for i in glued:
                assert (id(history[i]) in kept) == (id(history[i + 1]) in kept), (
                    grouping, target, i)
            assert orphans(out.input) == []
            at = {id(item): i for i, item in enumerate(items)}
            positions = [at[id(item)] for item in out.input]
            for a, b in itertools.pairwise(positions):
                if items[a].get("type") == "reasoning":
                    assert b == a + 1

    # Inside the runner: the reasoning item of the turn in progress reaches the model with the
    # function_call it preceded.
    model = RecordingModel()
    spy = Spy(context_policy_input_filter(trim(0), cut="plain"))
    Runner.run_sync(make_agent(model), items, run_config=run_config(spy))
    assert [i.get("type", "message") for i in model.calls[1].snapshot] == [
        "message", "reasoning", "function_call", "function_call_output"]
    assert_model_got_what_the_filter_kept(model, spy)


def test_autogen_7955_no_middle_pop_orphans_function_results():
    # AutoGen's buffered context popped messages from the middle of a history and left function
    # results without their calls. A trim only ever drops whole oldest turns.
    turns = [parallel_turn(0), old_turn(1), parallel_turn(2), old_turn(3, size=5)]
    history = [item for turn in turns for item in turn]
    sizes = [chars(turn) for turn in turns]
    starts = [0]
    for turn in turns:
        starts.append(starts[-1] + len(turn))
    for keep_groups in (0, 1, 2):
        for target in range(0, sum(sizes) + 2, 2):
            keep = context_policy_input_filter(trim(target, keep=keep_groups), cut="plain")
            items = [*history, question()]
            out = keep(call_data(items))
            kept_history = out.input[:-1]
            assert out.input[-1] is items[-1]
            # A suffix of the history, nothing taken from its middle, starting at a turn.
            n = len(kept_history)
            assert identities(kept_history) == identities(history[len(history) - n:])
            assert len(history) - n in starts
            assert orphans(out.input) == []
            expected = expected_turns(sizes, target, keep_groups)
            assert n == starts[-1] - starts[len(turns) - expected]
            step = keep.last_report.steps[0]
            assert step.chars_after == sum(sizes[len(turns) - expected:])
            assert step.messages_removed == len(history) - n


@st.composite
def responses_turn(draw: Any, i: int) -> list[dict[str, Any]]:
    """A finished turn of Responses items: rounds of (reasoning?, parallel calls, outputs), an
    unknown item now and then, a final answer that may be preceded by reasoning."""
    words = st.text("ab 😀", max_size=draw(st.sampled_from([3, 40])))
    turn: list[dict[str, Any]] = [{"role": "user", "content": draw(words)}]
    for r in range(draw(st.integers(0, 3))):
        if draw(st.booleans()):
            turn.append({"type": "reasoning", "id": f"rs_{i}_{r}",
                         "summary": [{"type": "summary_text", "text": draw(words)}]})
        ids = [f"call_{i}_{r}_{c}" for c in range(draw(st.integers(1, 3)))]
        turn += [{"type": "function_call", "call_id": cid, "name": "lookup",
                  "arguments": draw(words)} for cid in ids]
        if draw(st.booleans()):
            turn.append({"type": "web_search_call", "id": f"ws_{i}_{r}", "status": "completed"})
        turn += [{"type": "function_call_output", "call_id": cid, "output": draw(words)}
                 for cid in draw(st.permutations(ids))]
    if draw(st.booleans()):
        turn.append({"type": "reasoning", "id": f"rs_{i}_end", "summary": []})
    turn.append({"type": "message", "role": "assistant",
                 "content": [{"type": "output_text", "text": draw(words)}]})
    return turn


@st.composite
def responses_histories(draw: Any) -> list[list[dict[str, Any]]]:
    return [draw(responses_turn(i)) for i in range(draw(st.integers(0, 6)))]


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@hypothesis.given(turns=responses_histories(), target=st.integers(0, 400), keep_groups=st.integers(0, 2),
       grouping=st.sampled_from(["user-turn", "message"]))
def test_any_history_trims_to_whole_oldest_groups_with_figures_as_measured(
    turns, target, keep_groups, grouping,
):
    history = [item for turn in turns for item in turn]
    current = [question(), {"type": "function_call", "call_id": "now", "name": "f",
                            "arguments": "{}"},
               {"type": "function_call_output", "call_id": "now", "output": "o"}]
    items = [*history, *current]
    keep = context_policy_input_filter(trim(target, keep=keep_groups, grouping=grouping), cut="plain")
    out = keep(call_data(items))
    n = len(out.input) - len(current)
    # A suffix of the history, then the turn in progress, all as the SDK's objects.
    assert identities(out.input) == identities(items[len(history) - n:])
    assert orphans(out.input) == []
    kept = {id(item) for item in out.input}
    for i, item in enumerate(items[:-1]):
        if item.get("type") == "reasoning":
            assert (id(item) in kept) == (id(items[i + 1]) in kept)
    if grouping == "user-turn":
        sizes = [chars(turn) for turn in turns]
        expected = expected_turns(sizes, target, keep_groups)
        assert n == sum(len(turn) for turn in turns[len(turns) - expected:])
    report = keep.last_report
    assert report.before.chars == chars(with_instructions(items))
    assert report.after.chars == chars(with_instructions(out.input))
    assert report.after.opaque_parts == sum(
        1 for item in out.input if item.get("type") == "web_search_call")
    step = report.steps[0]
    if history:
        assert step.chars_after == chars(out.input[:n])
    else:  # the adapter's history is there, and holds no message: the step is skipped
        assert (step.status, step.reason, step.chars_after) == ("skipped", "fragment-empty", None)


# ---------------------------------------------------------------------------------------------
# The session wrapper.


def test_session_reduces_what_get_items_returns_and_stores_everything(tmp_path):
    store = SQLiteSession("chat", tmp_path / "chat.db")
    session = ContextPolicySession(store, trim(0, keep=1), cut="plain")
    assert isinstance(session, Session)
    assert session.session_id == "chat"
    model = RecordingModel()
    agent = make_agent(model)

    async def main() -> None:
        for n in range(3):
            await Runner.run(agent, f"question {n}", session=session, run_config=run_config())

    run(main())
    stored = run(store.get_items())
    assert len(stored) == 15
    assert [item.get("content") for item in stored if item.get("role") == "user"] == [
        "question 0", "question 1", "question 2"]
    # The third run's first model call: the newest stored turn only, then the new question.
    third = model.calls[4].snapshot
    assert third == [*stored[5:10], {"content": "question 2", "role": "user"}]
    assert orphans(third) == []
    report = session.last_report
    assert (report.steps[0].groups_before, report.steps[0].groups_after) == (2, 1)
    assert report.before.chars == chars(stored[:10])
    assert report.after.chars == chars(stored[5:10])
    # A session stores the history: no question, and an empty turn.
    assert [(f.id, f.messages_before) for f in report.fragments] == [
        ("history", 10), ("turn", 0)]

    # Reads through the wrapper: reduced in full, as stored with a limit (the SDK's tail checks).
    assert run(session.get_items()) == stored[10:]
    assert run(session.get_items(limit=2)) == stored[-2:]
    assert len(run(store.get_items())) == 15
    # Writes go to the store.
    run(session.add_items([question("added")]))
    assert run(store.get_items(limit=1)) == [question("added")]
    assert run(session.pop_item()) == question("added")
    run(session.clear_session())
    assert run(store.get_items()) == []
    assert session.session_settings is getattr(store, "session_settings", None)
    assert session.db_path == store.db_path  # anything else is the wrapped session's
    store.close()


def test_session_in_memory_with_a_filter_too():
    store = SQLiteSession("memory")
    session = ContextPolicySession(store, {"mode": "validate"}, cut="plain")
    model = RecordingModel()
    spy = Spy(context_policy_input_filter(trim(0), cut="plain"))
    agent = make_agent(model)
    Runner.run_sync(agent, "first", session=session, run_config=run_config(spy))
    Runner.run_sync(agent, "second", session=session, run_config=run_config(spy))
    assert session.last_report.mode == "validate"
    assert len(run(store.get_items())) == 10
    # The filter sees the session's history and the new question, and keeps the question.
    assert model.calls[2].snapshot == [{"content": "second", "role": "user"}]
    assert_model_got_what_the_filter_kept(model, spy)
    store.close()


class ContextAwareSession:
    """A session whose methods take the run's context (``wrapper=``)."""

    def __init__(self) -> None:
        self.session_id = "aware"
        self.session_settings = None
        self.items: list[Any] = []
        self.wrappers: list[Any] = []

    async def get_items(self, limit: int | None = None, *, wrapper: Any = None) -> list[Any]:
        self.wrappers.append(wrapper)
        return list(self.items[-limit:] if limit else self.items)

    async def add_items(self, items: list[Any], *, wrapper: Any = None) -> None:
        self.wrappers.append(wrapper)
        self.items.extend(items)

    async def pop_item(self, *, wrapper: Any = None) -> Any:
        self.wrappers.append(wrapper)
        return self.items.pop() if self.items else None

    async def clear_session(self, *, wrapper: Any = None) -> None:
        self.wrappers.append(wrapper)
        self.items.clear()


@pytest.mark.skipif(not hasattr(agents.memory.session, "_session_accepts_wrapper"),
                    reason="this SDK hands no run context to sessions")
def test_session_hands_the_run_context_to_a_session_that_takes_it():
    inner = ContextAwareSession()
    session = ContextPolicySession(inner, trim(0), cut="plain")
    model = RecordingModel()
    Runner.run_sync(make_agent(model), "hello", session=session, run_config=run_config(),
                    context={"user": 7})
    assert inner.wrappers
    assert all(isinstance(w, RunContextWrapper) and w.context == {"user": 7}
               for w in inner.wrappers)
    assert len(inner.items) == 5

    plain = SQLiteSession("plain")
    wrapped = ContextPolicySession(plain, trim(0), cut="plain")
    run(wrapped.add_items([question("x")], wrapper=object()))  # not handed on
    assert run(plain.get_items()) == [question("x")]
    plain.close()


# ---------------------------------------------------------------------------------------------
# The turn in progress, and one policy for both adapters.


def turn_in_progress(size: int = 2_000) -> list[dict[str, Any]]:
    """Two rounds of tool work after the question, each a reasoning item, a call and its
    (large) output: what the input ends with between two model calls of one turn."""
    out: list[dict[str, Any]] = []
    for r in range(2):
        out += [
            {"type": "reasoning", "id": f"rs_now_{r}",
             "summary": [{"type": "summary_text", "text": f"round {r}"}]},
            {"type": "function_call", "call_id": f"call_now_{r}", "name": "lookup",
             "arguments": json.dumps({"round": r})},
            {"type": "function_call_output", "call_id": f"call_now_{r}", "output": "o" * size},
        ]
    return out


def summary_of(request: Any) -> list[dict[str, Any]]:
    return [{"role": "assistant", "content": "(summary)"}]


@pytest.mark.parametrize("policy", [
    trim(0),
    trim(0, grouping="message"),
    {**trim(0), "targetInputChars": 1},  # a watermark no history trim can reach
    {"mode": "reduce", "triggerChars": 1, "targetInputChars": 1, "steps": [{
        "id": "summary", "kind": "compress", "fragmentId": "history", "handlerId": "summary",
        "targetChars": 0}]},
    {"mode": "validate"},
], ids=["trim", "trim-by-message", "unreachable-target", "compress", "validate"])
def test_the_turn_is_reduced_only_by_a_step_that_names_it(policy):
    items = [*old_turn(0), *old_turn(1), question(), *turn_in_progress()]
    keep = context_policy_input_filter(policy, handlers={"summary": summary_of}
                                       if policy["mode"] == "reduce" else None, cut="plain")
    out = keep(call_data(items))
    # The question and every item after it are sent, as the SDK's objects, in order.
    assert identities(out.input[-7:]) == identities(items[-7:])
    report = keep.last_report
    turn = next(f for f in report.fragments if f.id == "turn")
    assert (turn.messages_before, turn.messages_after) == (6, 6)
    assert turn.chars_before == turn.chars_after == chars(turn_in_progress()) > 4_000
    if policy["mode"] == "reduce":
        assert report.triggered and report.steps[0].status == "applied"
        assert len(out.input) < len(items)  # the history was reduced, the turn was not
    if policy.get("targetInputChars"):
        assert report.target_reached is False  # the turn is over the watermark, and stays


def test_a_step_that_names_the_turn_trims_its_oldest_tool_rounds():
    policy = {"mode": "reduce", "triggerChars": 1, "steps": [{
        "id": "tools", "kind": "trim", "fragmentId": "turn", "grouping": {"kind": "message"},
        "keepGroups": 1, "targetChars": 0}]}
    items = [*old_turn(0), question(), *turn_in_progress()]
    keep = context_policy_input_filter(policy, cut="plain")
    out = keep(call_data(items))
    # The history and the question stay; the turn keeps its newest round, reasoning included.
    assert identities(out.input) == identities([*items[:6], *items[-3:]])
    assert orphans(out.input) == []
    step = keep.last_report.steps[0]
    assert (step.fragment_id, step.groups_before, step.groups_after, step.messages_removed) == (
        "turn", 2, 1, 3)


SHARED_POLICY = {
    "mode": "reduce", "triggerChars": 1,
    "steps": [
        {"id": "recent-history", "kind": "trim", "fragmentId": "history",
         "grouping": {"kind": "user-turn"}, "keepGroups": 1, "targetChars": 0},
        {"id": "recent-tools", "kind": "trim", "fragmentId": "turn",
         "grouping": {"kind": "message"}, "keepGroups": 1, "targetChars": 0},
    ],
}


def test_one_policy_document_works_unchanged_in_every_adapter():
    from langchain.agents.middleware import ModelRequest, ModelResponse
    from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
    from langchain_core.messages import AIMessage, HumanMessage, SystemMessage, ToolMessage

    from contextpolicy.adapters import langchain as lc_adapter
    from contextpolicy.adapters import openai_agents as oa_adapter

    assert lc_adapter.FRAGMENT_IDS == oa_adapter.FRAGMENT_IDS == (
        "instructions", "tools", "system", "history", "question", "turn")
    document = copy.deepcopy(SHARED_POLICY)

    # The same conversation in each framework's shape: two finished turns, the question, and
    # two rounds of tool work on it.
    messages: list[Any] = []
    for i in range(2):
        messages += [
            HumanMessage(f"question {i}", id=f"h{i}"),
            AIMessage("", id=f"a{i}", tool_calls=[{"id": f"c{i}", "name": "lookup",
                                                   "args": {"q": i}}]),
            ToolMessage("o" * 40, tool_call_id=f"c{i}", id=f"t{i}"),
            AIMessage(f"answer {i}", id=f"e{i}"),
        ]
    messages.append(HumanMessage("What is new?", id="q"))
    for r in range(2):
        messages += [
            AIMessage("", id=f"now-a{r}", tool_calls=[{"id": f"now{r}", "name": "lookup",
                                                       "args": {"round": r}}]),
            ToolMessage("o" * 2_000, tool_call_id=f"now{r}", id=f"now-t{r}"),
        ]
    items = [*old_turn(0), *old_turn(1), question(), *turn_in_progress()]

    middleware = lc_adapter.ContextPolicyMiddleware(document, cut="plain")
    sent: list[Any] = []
    request = ModelRequest(model=GenericFakeChatModel(messages=iter([])), messages=messages,
                           system_message=SystemMessage(INSTRUCTIONS))
    middleware.wrap_model_call(request, lambda r: sent.append(r) or ModelResponse(result=[]))
    keep = context_policy_input_filter(document, cut="plain")
    out = keep(call_data(items))
    # LiteLLM: the same conversation as OpenAI chat dicts, the system prompt leading.
    from contextpolicy.adapters.litellm import ContextPolicyMessages

    chat = lc_adapter.to_chat_dicts([SystemMessage(INSTRUCTIONS), *messages])
    litellm_keep = ContextPolicyMessages(document, cut="plain")
    chat_sent = litellm_keep(chat)

    # Each keeps the newest finished turn, the question, and the newest round of tool work.
    assert [m.id for m in sent[0].messages] == ["h1", "a1", "t1", "e1", "q", "now-a1", "now-t1"]
    assert identities(out.input) == identities([*items[5:11], *items[-3:]])
    assert identities(chat_sent) == identities([chat[0], *chat[5:10], *chat[-2:]])
    reports = {"langchain": middleware.last_report, "openai-agents": keep.last_report,
               "litellm": litellm_keep.last_report}
    sent_chars = {
        "langchain": chars(lc_adapter.to_chat_dicts([request.system_message,
                                                     *sent[0].messages])),
        "openai-agents": chars(with_instructions(out.input)),
        "litellm": chars(chat_sent),
    }
    for name, report in reports.items():
        assert [(s.id, s.fragment_id, s.status, s.groups_before, s.groups_after)
                for s in report.steps] == [
            ("recent-history", "history", "applied", 2, 1),
            ("recent-tools", "turn", "applied", 2, 1)], name
        assert report.after.chars == sent_chars[name], name
    # The system prompt is ``system`` in LangChain, the instructions ``instructions`` here.
    assert [f.id for f in reports["langchain"].fragments] == [
        "system", "history", "question", "turn"]
    assert [f.id for f in reports["openai-agents"].fragments] == [
        "instructions", "history", "question", "turn"]
    assert [f.id for f in reports["litellm"].fragments] == [
        "system", "history", "question", "turn"]
    assert document == SHARED_POLICY  # neither adapter changed the document


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
