"""The Google ADK adapter's cost per model call, against ADK's own call without it.

An ``LlmAgent`` with a scripted ``BaseLlm`` (a tool call on each question, an answer after the
tool's ~3,000-char response) runs 20 questions (40 model calls) in an ``InMemoryRunner``:
without a callback (``none``), and with ``context_policy_callback`` (the stable cut, a 60,000
to 30,000-char trim). The ratio to ``none`` is in ``extra_info["ratios"]``, the fastest of a few
passes of each, timed one after the other in the same run: ADK's whole path per call, the
policy's part in it.
"""

from __future__ import annotations

import asyncio

import pytest

pytestmark = pytest.mark.extras

from google.adk.agents import LlmAgent  # noqa: E402
from google.adk.models.base_llm import BaseLlm  # noqa: E402
from google.adk.models.llm_response import LlmResponse  # noqa: E402
from google.adk.runners import InMemoryRunner  # noqa: E402
from google.genai import types  # noqa: E402

from contextpolicy.adapters.google_adk import context_policy_callback  # noqa: E402

from .conftest import best_of, measuring  # noqa: E402

POLICY = {"mode": "reduce", "triggerChars": 60_000, "targetInputChars": 30_000, "steps": [
    {"id": "recent", "kind": "trim", "fragmentId": "history", "targetChars": 30_000,
     "keepGroups": 1, "grouping": {"kind": "user-turn"}}]}


class Scripted(BaseLlm):
    async def generate_content_async(self, llm_request, stream=False):
        last = llm_request.contents[-1].parts[0]
        if last.function_response:
            part = types.Part(text="It is at the depot.")
        else:
            part = types.Part(function_call=types.FunctionCall(name="track", args={"q": 1}))
        yield LlmResponse(content=types.Content(role="model", parts=[part]))


def track(q: int) -> str:
    """Where a parcel is."""
    return f"parcel {q}: " + "scanned at the depot; " * 140


def _run(turns: int, with_policy: bool) -> None:
    callback = context_policy_callback(POLICY) if with_policy else None
    agent = LlmAgent(name="tracker", model=Scripted(model="scripted"), tools=[track],
                     instruction="You track parcels.", before_model_callback=callback)
    runner = InMemoryRunner(agent=agent, app_name="bench")
    session = asyncio.run(runner.session_service.create_session(app_name="bench", user_id="u"))
    for i in range(turns):
        message = types.Content(role="user", parts=[types.Part(text=f"Where is parcel {i}? "
                                                               + "soon? " * 100)])
        for _ in runner.run(user_id="u", session_id=session.id, new_message=message):
            pass



@pytest.mark.parametrize("kind", ["none", "context_policy_callback"])
def test_google_adk_per_call_overhead(benchmark, request, kind):
    turns = 20 if measuring(request.config) else 3
    passes = 3 if measuring(request.config) else 1
    with_policy = kind != "none"
    ratios = {}
    if with_policy:
        ratios["context_policy_callback / none (in run)"] = (
            best_of(lambda: _run(turns, True), passes) / best_of(lambda: _run(turns, False), passes))
    benchmark.group = f"Google ADK: {2 * turns} model calls of a tool agent"
    benchmark.extra_info.update(kind=kind, calls=2 * turns, ratios=ratios)
    benchmark.pedantic(lambda: _run(turns, with_policy), rounds=3, iterations=1)
