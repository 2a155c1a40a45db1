"""The LiteLLM adapter's cost per model call, against LiteLLM's own call without it.

A 30-turn tool session (``tests/support/replays.tool_session``: each turn a question, a tool
call, a ~3,000-char result and an answer; 60 model calls), every call a
``litellm.completion(..., mock_response=...)`` (LiteLLM's whole client path, no network): with
the messages as they are (``none``), through ``ContextPolicyMessages`` (one per agent: the
stable cut's memo holds the call before) and through ``apply_policy`` afresh on every call (no
memo: each call replays the history). Ratios to ``none`` in ``extra_info["ratios"]``, the
fastest of a few passes of each, timed one after the other in the same run.
"""

from __future__ import annotations

import os

import pytest

pytestmark = pytest.mark.extras

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

import litellm  # noqa: E402

from contextpolicy.adapters.litellm import ContextPolicyMessages, apply_policy  # noqa: E402
from tests.support.replays import tool_session  # noqa: E402

from .conftest import best_of, measuring  # noqa: E402

SYSTEM = {"role": "system", "content": "You are a shipping agent. Use the tools."}
POLICY = {"mode": "reduce", "triggerChars": 60_000, "targetInputChars": 30_000, "steps": [
    {"id": "recent", "kind": "trim", "fragmentId": "history", "targetChars": 30_000,
     "keepGroups": 1, "grouping": {"kind": "user-turn"}}]}


def _calls(session: list[dict]) -> list[list[dict]]:
    """The history before each model call (after a question or a tool result)."""
    history, out = [SYSTEM], []
    for m in session:
        history = [*history, m]
        if m["role"] in ("user", "tool"):
            out.append(history)
    return out


def _agent(calls: list[list[dict]], kind: str) -> None:
    keep = ContextPolicyMessages(POLICY)
    for history in calls:
        if kind == "none":
            messages = history
        elif kind == "ContextPolicyMessages":
            messages = keep(history)
        else:
            messages = apply_policy(history, POLICY)
        litellm.completion(model="gpt-4", messages=messages, mock_response="noted")



@pytest.mark.parametrize("kind", ["none", "ContextPolicyMessages", "apply_policy"])
def test_litellm_per_call_overhead(benchmark, request, kind):
    turns = 30 if measuring(request.config) else 4
    calls = _calls(tool_session(turns, seed=2))
    passes = 3 if measuring(request.config) else 1
    ratios = {}
    if kind != "none":
        ratios[f"{kind} / none (in run)"] = (best_of(lambda: _agent(calls, kind), passes)
                                            / best_of(lambda: _agent(calls, "none"), passes))
    benchmark.group = f"LiteLLM: {len(calls)} completion calls of a tool agent"
    benchmark.extra_info.update(kind=kind, calls=len(calls), ratios=ratios)
    benchmark.pedantic(lambda: _agent(calls, kind), rounds=3, iterations=1)
