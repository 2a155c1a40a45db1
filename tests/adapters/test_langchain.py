"""A trim by user turn equals LangChain's ``trim_messages(strategy="last", start_on="human",
include_system=False)`` on histories that start with a user message (OpenAI tool messages;
LangChain has no notion of Anthropic tool-result carriers, which are human messages to it)."""

from __future__ import annotations

import langchain_core.messages as lc_messages
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from contextpolicy import ContextPlan, Fragment, process_context
from contextpolicy import _kernel as kernel
from contextpolicy.synthetic import make_history
from tests.support.strategies import text

# The whole pipeline runs on the compiled kernel and on the twin: ids [c] and [py].
pytestmark = pytest.mark.usefixtures("pipeline_kernel")


@st.composite
def openai_turn(draw, i: int):
    out = [{"role": "user", "content": draw(text)}]
    for c in range(draw(st.integers(0, 3))):
        cid = f"call_{i}_{c}"
        out.append({"role": "assistant", "content": draw(st.none() | text), "tool_calls": [
            {"id": cid, "type": "function",
             "function": {"name": "lookup", "arguments": draw(st.sampled_from(["{}", '{"q":1}']))}},
        ]})
        out.append({"role": "tool", "tool_call_id": cid, "content": draw(text)})
    if draw(st.booleans()):
        out.append({"role": "assistant", "content": draw(text)})
    return out


@st.composite
def openai_histories(draw):
    turns = draw(st.integers(1, 25))
    return [m for i in range(turns) for m in draw(openai_turn(i))]


def ours(history: list[dict], target: int) -> list[dict]:
    # The system prompt keeps the plan above the 1-char trigger even for a one-char history.
    plan = ContextPlan(fragments=[
        Fragment(id="system", kind="system", text="be brief"),
        Fragment(id="history", kind="history", messages=history),
    ])
    policy = {"mode": "reduce", "triggerChars": 1, "steps": [{
        "id": "trim", "kind": "trim", "fragmentId": "history", "field": "messages",
        "grouping": {"kind": "user-turn"}, "keepGroups": 0, "targetChars": target,
    }]}
    return process_context(plan, policy).plan.fragment("history").messages


def langchains(history: list[dict], target: int) -> list[dict]:
    converted = lc_messages.convert_to_messages(history)
    chars = kernel.measure_messages(history)[1]
    index = {id(m): i for i, m in enumerate(converted)}
    by_id = {id(m): int(c) for m, c in zip(converted, chars)}

    def count(messages):  # the same character figures as ours, per message object
        return sum(by_id[id(m)] for m in messages)

    kept = lc_messages.trim_messages(
        converted, max_tokens=target, token_counter=count, strategy="last",
        start_on="human", include_system=False,
    )
    return [history[index[id(m)]] for m in kept]


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(openai_histories(), st.integers(0, 3_000))
def test_trim_equals_langchain(history, target):
    assert ours(history, target) == langchains(history, target)


@pytest.mark.parametrize("seed", range(4))
def test_trim_equals_langchain_on_realistic_histories(seed):
    history = [m for m in make_history(400, seed) if not isinstance(m.get("content"), list)]
    while history and history[0]["role"] != "user":
        history.pop(0)
    for target in (0, 500, 5_000, 20_000, 10**9):
        assert ours(history, target) == langchains(history, target)
