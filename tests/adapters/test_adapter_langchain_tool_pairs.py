"""The LangChain middleware never cuts a tool call from its results: regressions of LangChain
trims that split them (Anthropic blocks, partly overlapping tool runs), and the invariants of
every call on generated conversations.
"""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, SystemMessage, ToolMessage

from contextpolicy import check_input_budget
from contextpolicy.adapters.langchain import ContextPolicyMiddleware, to_chat_dicts
from tests.support.langchain_agents import (
    SYSTEM,
    TOOL_TEXT,
    Words,
    anthropic_history,
    call_middleware,
    chars,
    is_subsequence,
    pairing_problems,
    trim_policy,
)

pytestmark = [pytest.mark.extras, pytest.mark.usefixtures("pipeline_kernel")]


@pytest.fixture(autouse=True)
def _no_tracing(monkeypatch: pytest.MonkeyPatch) -> None:
    """No LangSmith tracing (a network call) whatever the environment says."""
    for name in ("LANGSMITH_TRACING", "LANGCHAIN_TRACING_V2", "LANGCHAIN_TRACING"):
        monkeypatch.delenv(name, raising=False)


def unanswered_calls(kept: list[BaseMessage], original: list[BaseMessage]) -> list[str]:
    """Calls kept whose results (present in ``original``) were cut."""
    answered = {m.tool_call_id for m in original if isinstance(m, ToolMessage)} | {
        p["tool_use_id"] for m in original if isinstance(m.content, list)
        for p in m.content if isinstance(p, dict) and p.get("type") == "tool_result"}
    kept_answers = {m.tool_call_id for m in kept if isinstance(m, ToolMessage)} | {
        p["tool_use_id"] for m in kept if isinstance(m.content, list)
        for p in m.content if isinstance(p, dict) and p.get("type") == "tool_result"}
    out = []
    for m in kept:
        if isinstance(m, AIMessage):
            ids = [c["id"] for c in m.tool_calls] + ([
                p["id"] for p in m.content if isinstance(p, dict) and p.get("type") == "tool_use"]
                if isinstance(m.content, list) else [])
            out += [i for i in ids if i in answered and i not in kept_answers]
    return out


# --------------------------------------------------------------------------------------------
# Regressions of LangChain trims that split tool calls from their results.


@pytest.mark.parametrize("grouping", ["user-turn", "message"])
def test_langchain_29637_anthropic_tool_blocks_are_never_split(grouping):
    history = anthropic_history()
    messages = [*history, HumanMessage("thanks, and parcel 4?", id="q")]
    cuts = set()
    for target in range(chars(history) + 2):
        middleware = ContextPolicyMiddleware(trim_policy(target=target, keep=0,
                                                         grouping=grouping))
        sent = call_middleware(middleware, messages)
        assert pairing_problems(sent) == [], target
        assert unanswered_calls(sent, messages) == [], target
        assert sent[-1] is messages[-1]
        assert chars(sent[1:-1]) <= target
        cuts.add(tuple(m.id for m in sent[1:]))
    # Every cut there is, and none inside a call and its results.
    turn1, turn2 = ("h1", "a1", "r1", "a1b"), ("h2", "a2", "r2", "r3", "a2b")
    expected = {(), turn2, turn1 + turn2}
    if grouping == "message":
        expected |= {("a2b",), turn2[1:], turn1[1:] + turn2, turn1[3:] + turn2}
    assert cuts == {ids + ("q",) for ids in expected}


def test_langchain_29637_a_tool_result_carrier_is_never_the_question():
    # Mid-turn in Anthropic format: the last human message carries a tool_result.
    messages = anthropic_history()[:3]
    middleware = ContextPolicyMiddleware(trim_policy(target=0, keep=0))
    sent = call_middleware(middleware, messages)
    assert sent[1:] == messages and all(a is b for a, b in zip(sent[1:], messages))
    fragments = {f.id: f for f in middleware.last_report.fragments}
    assert fragments["question"].messages_before == 1 and fragments["turn"].messages_before == 2
    assert fragments["history"].messages_before == 0


@pytest.mark.parametrize("grouping", ["user-turn", "message"])
def test_langchain_38352_partly_overlapping_tool_runs_are_never_cut_inside(grouping):
    history = [
        HumanMessage("check a1, a2 and b1", id="h"),
        AIMessage("", id="A", tool_calls=[{"id": "a1", "name": "f", "args": {"n": 1}},
                                          {"id": "a2", "name": "f", "args": {"n": 2}}]),
        ToolMessage("a1 " + TOOL_TEXT, tool_call_id="a1", id="Ta1"),
        AIMessage("", id="B", tool_calls=[{"id": "b1", "name": "g", "args": {"n": 3}}]),
        ToolMessage("b1 " + TOOL_TEXT, tool_call_id="b1", id="Tb1"),
        ToolMessage("a2 " + TOOL_TEXT, tool_call_id="a2", id="Ta2"),
        AIMessage("done", id="D"),
    ]
    messages = [HumanMessage("first", id="h0"), AIMessage("hello", id="a0"), *history,
                HumanMessage("next?", id="q")]
    cuts = set()
    for target in range(chars(messages[:-1]) + 2):
        middleware = ContextPolicyMiddleware(trim_policy(target=target, keep=0,
                                                         grouping=grouping))
        sent = call_middleware(middleware, messages)
        assert pairing_problems(sent) == [], target
        assert unanswered_calls(sent, messages) == [], target
        cuts.add(tuple(m.id for m in sent[1:]))
    # A .. Ta2 leave together: no cut between them, by turn or by message.
    run = ("A", "Ta1", "B", "Tb1", "Ta2", "D")
    expected = {(), ("h", *run), ("h0", "a0", "h", *run)}
    if grouping == "message":
        expected |= {("D",), run, ("a0", "h", *run)}
    assert cuts == {ids + ("q",) for ids in expected}


# --------------------------------------------------------------------------------------------
# Generated conversations: the invariants of every call.


@st.composite
def conversations(draw):
    messages: list[BaseMessage] = []
    for t in range(draw(st.integers(0, 6))):
        messages.append(HumanMessage("q" * draw(st.integers(0, 40)), id=f"h{t}"))
        for r in range(draw(st.integers(0, 2))):
            ids = [f"c{t}-{r}-{k}" for k in range(draw(st.integers(1, 2)))]
            if draw(st.booleans()):  # OpenAI style
                messages.append(AIMessage("", id=f"a{t}-{r}", tool_calls=[
                    {"id": i, "name": "f", "args": {"x": "y" * draw(st.integers(0, 9))}}
                    for i in ids]))
                messages += [ToolMessage("r" * draw(st.integers(0, 40)), tool_call_id=i,
                                         id=f"r{i}") for i in ids]
            else:  # Anthropic blocks, results carried by one human message
                messages.append(AIMessage([{"type": "tool_use", "id": i, "name": "f",
                                            "input": {}} for i in ids], id=f"a{t}-{r}"))
                messages.append(HumanMessage([{"type": "tool_result", "tool_use_id": i,
                                               "content": "r" * draw(st.integers(0, 40))}
                                              for i in ids], id=f"r{t}-{r}"))
        if draw(st.booleans()):
            messages.append(AIMessage("a" * draw(st.integers(0, 40)), id=f"e{t}"))
    if draw(st.booleans()):
        messages.append(HumanMessage("final question", id="q"))
    return messages


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(conversations(), st.integers(0, 600), st.integers(0, 2),
       st.sampled_from(["user-turn", "message"]))
def test_every_call_keeps_the_invariants(messages, target, keep, grouping):
    middleware = ContextPolicyMiddleware(trim_policy(target=target, keep=keep,
                                                     grouping=grouping), counter=Words(), cut="plain")
    system = SystemMessage(SYSTEM)
    before = [m.model_dump() for m in messages]
    sent = call_middleware(middleware, messages, system)
    assert [m.model_dump() for m in messages] == before
    assert sent[0] is system
    assert is_subsequence(sent[1:], messages)
    assert pairing_problems(sent) == []
    assert unanswered_calls(sent, messages) == []
    openers = [i for i, m in enumerate(messages) if isinstance(m, HumanMessage)
               and isinstance(m.content, str)]
    if openers:  # the question and everything after it are all sent
        tail = messages[openers[-1]:]
        assert sent[-len(tail):] == tail and all(a is b for a, b in zip(sent[-len(tail):], tail))
    report = middleware.last_report
    after = check_input_budget(to_chat_dicts(sent), counter=Words())
    assert (report.after.chars, report.after.tokens) == (after.chars, after.tokens)
    assert report.before.chars == chars([system, *messages])
