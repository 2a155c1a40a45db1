"""What the OpenAI Agents SDK adapter's suites share: a fake model, a tool, the items of
finished turns, a spy on the input filter and the checks of what the model was sent.

The model is a fake that implements the SDK's ``Model`` interface and records what it receives
(a reasoning item and a function call on the first call of every turn, a final message after
the tool's output), so every run carries ``reasoning``, ``function_call`` and
``function_call_output`` items. No API key, no network. This module imports the SDK: only the
extras' modules (``pytest -m extras``) import it.
"""

from __future__ import annotations

import asyncio
import copy
import inspect
import itertools
import json
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

from agents import Agent, RunConfig, Usage, function_tool
from agents.items import ModelResponse
from agents.models.interface import Model
from agents.run import CallModelData, ModelInputData
from openai.types.responses import (
    Response,
    ResponseCompletedEvent,
    ResponseFunctionToolCall,
    ResponseOutputMessage,
    ResponseOutputText,
    ResponseReasoningItem,
)
from openai.types.responses.response_reasoning_item import Summary

from contextpolicy import check_input_budget
from contextpolicy.adapters.openai_agents import ContextPolicyInputFilter

INSTRUCTIONS = "Answer from the lookup tool, briefly."


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
