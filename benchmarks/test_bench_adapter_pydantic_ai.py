"""The Pydantic AI adapter's cost per model call, against Pydantic AI's own call without it.

A 30-turn conversation of a tool agent (``Agent`` with a ``FunctionModel``: each turn a
question, a tool call, a ~3,000-char tool return and an answer; 60 model calls, each run given
the history the last one ended with; no network), run with no policy (``none``), with
``ProcessHistory(ContextPolicyProcessor(policy))`` (persist; its sync call runs in Pydantic AI's
worker thread), ``ProcessHistory(processor.areduce)`` (persist, on the event loop) and
``ContextPolicyCapability(policy)`` with the stable cut (the default) and the plain one. Ratios
to ``none`` in ``extra_info["ratios"]``, the fastest of five passes of each, the
passes of the two interleaved; ``extra_info["per_call_us"]`` is the time of one model call.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import pytest

pytestmark = pytest.mark.extras

from pydantic_ai import Agent  # noqa: E402
from pydantic_ai.capabilities import ProcessHistory  # noqa: E402
from pydantic_ai.messages import (  # noqa: E402
    ModelResponse,
    TextPart,
    ToolCallPart,
    UserPromptPart,
)
from pydantic_ai.models.function import FunctionModel  # noqa: E402

from contextpolicy.adapters.pydantic_ai import (  # noqa: E402
    ContextPolicyCapability,
    ContextPolicyProcessor,
)

from .conftest import measuring  # noqa: E402

POLICY = {"mode": "reduce", "triggerChars": 60_000, "targetInputChars": 30_000, "steps": [
    {"id": "recent", "kind": "trim", "fragmentId": "history", "targetChars": 30_000,
     "keepGroups": 1, "grouping": {"kind": "user-turn"}}]}


def _model(messages: list[Any], info: Any) -> ModelResponse:
    if any(isinstance(p, UserPromptPart) for p in messages[-1].parts):
        return ModelResponse(parts=[ToolCallPart("lookup", {"q": "parcel"},
                                                 tool_call_id=f"call_{len(messages)}")])
    return ModelResponse(parts=[TextPart("It is in transit. " * 10)])


def _lookup(q: str) -> str:
    """Look ``q`` up."""
    return f"{q}: " + "in transit, arriving Thursday; " * 100  # ~3,000 chars


KINDS: dict[str, Callable[[], list[Any]]] = {
    "none": lambda: [],
    "ProcessHistory(processor)": lambda: [ProcessHistory(ContextPolicyProcessor(POLICY))],
    "ProcessHistory(processor.areduce)": lambda: [
        ProcessHistory(ContextPolicyProcessor(POLICY).areduce)],
    "ContextPolicyCapability stable": lambda: [ContextPolicyCapability(POLICY)],
    "ContextPolicyCapability plain": lambda: [ContextPolicyCapability(POLICY, cut="plain")],
}


def _conversation(kind: str, turns: int) -> int:
    """``turns`` runs of a fresh agent with ``kind``'s capabilities; the model calls made."""
    agent = Agent(FunctionModel(_model), instructions="Answer from the tool, briefly.",
                  system_prompt="You are the parcel desk.", tools=[_lookup],
                  capabilities=KINDS[kind]())
    history: list[Any] = []
    calls = 0
    for t in range(turns):
        result = agent.run_sync(f"Where is parcel P-{t}? " + "details " * 20,
                                message_history=history)
        history = result.all_messages()
        calls += sum(isinstance(m, ModelResponse) for m in result.new_messages())
    return calls


def _interleaved(kind: str, turns: int, passes: int) -> tuple[float, float]:
    """The fastest pass of ``kind`` and of ``none``, timed in turns (a load that comes and goes
    weighs on both alike)."""
    best = {kind: float("inf"), "none": float("inf")}
    for _ in range(passes):
        for k in best:
            start = time.perf_counter()
            _conversation(k, turns)
            best[k] = min(best[k], time.perf_counter() - start)
    return best[kind], best["none"]


@pytest.mark.parametrize("kind", list(KINDS))
def test_pydantic_ai_per_call_overhead(benchmark, request, kind):
    turns = 30 if measuring(request.config) else 4
    passes = 5 if measuring(request.config) else 1
    calls = _conversation(kind, turns)
    assert calls == 2 * turns
    ratios = {}
    time_kind, time_none = _interleaved(kind, turns, passes)
    if kind != "none":
        ratios[f"{kind} / none (in run)"] = time_kind / time_none
        ratios[f"{kind} - none per call (us)"] = (time_kind - time_none) / calls * 1e6
    benchmark.group = f"Pydantic AI: {calls} model calls of a tool agent"
    benchmark.extra_info.update(kind=kind, calls=calls, ratios=ratios,
                                per_call_us=time_kind / calls * 1e6)
    benchmark.pedantic(lambda: _conversation(kind, turns), rounds=3, iterations=1)
