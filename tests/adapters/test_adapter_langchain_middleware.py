"""``ContextPolicyMiddleware`` of ``contextpolicy.adapters.langchain``: the converter to chat
dicts, the checks at construction, the middleware inside real LangChain v1 agents
(``create_agent``, both modes, handlers, the turn in progress), our counters inside LangChain's
own middleware, and the adapter's layering.

Every model is a scripted fake (``tests/support/langchain_agents.py``, no network). Expected
messages are written out by position in the agent's state, and figures are held to
``check_input_budget`` on the converted dicts.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import threading
from typing import Any

import pytest
from langchain.agents import create_agent
from langchain.agents.middleware import (
    AgentMiddleware,
    ClearToolUsesEdit,
    ContextEditingMiddleware,
    ModelRequest,
    ModelResponse,
    SummarizationMiddleware,
)
from langchain_core.messages import (
    AIMessage,
    BaseMessage,
    ChatMessage,
    HumanMessage,
    RemoveMessage,
    SystemMessage,
    ToolMessage,
)
from langchain_core.tools import tool
from langchain_core.utils.function_calling import convert_to_openai_tool
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.graph.message import REMOVE_ALL_MESSAGES

from contextpolicy import (
    ContextCancelledError,
    ContextPlanError,
    ContextPolicyError,
    check_input_budget,
    prepare_policy,
)
from contextpolicy.adapters.langchain import (
    ContextPolicyMiddleware,
    langchain_token_counter,
    to_chat_dicts,
)
from tests.support.langchain_agents import (
    SYSTEM,
    TOOL_TEXT,
    ScriptedModel,
    Words,
    anthropic_history,
    call_middleware,
    chars,
    is_subsequence,
    pairing_problems,
    trim_policy,
    turns_of,
)

pytestmark = [pytest.mark.extras, pytest.mark.usefixtures("pipeline_kernel")]


@pytest.fixture(autouse=True)
def _no_tracing(monkeypatch: pytest.MonkeyPatch) -> None:
    """No LangSmith tracing (a network call) whatever the environment says."""
    for name in ("LANGSMITH_TRACING", "LANGCHAIN_TRACING_V2", "LANGCHAIN_TRACING"):
        monkeypatch.delenv(name, raising=False)


@tool
def lookup(q: str) -> str:
    """Look up a parcel."""
    return TOOL_TEXT


class Probe(AgentMiddleware):
    """Outermost middleware: records what the agent hands the middleware stack."""

    def __init__(self) -> None:
        super().__init__()
        self.seen: list[tuple[SystemMessage | None, list[BaseMessage]]] = []

    def wrap_model_call(self, request, handler):
        self.seen.append((request.system_message, list(request.messages)))
        return handler(request)

    async def awrap_model_call(self, request, handler):
        self.seen.append((request.system_message, list(request.messages)))
        return await handler(request)


class FramedWords(Words):
    """A counter with chat framing: 3 tokens per message on top of the words."""

    name = "framed-words"

    def count_messages(self, messages: list[dict]) -> int:
        return sum(3 for _ in messages) + sum(
            len(p.split()) for m in messages for p in _texts(m)
        )


def _texts(message: dict) -> list[str]:
    content = message.get("content")
    found = [content] if isinstance(content, str) else [
        p["text"] for p in content or [] if isinstance(p, dict) and p.get("type") == "text"]
    found += [c["function"]["name"] + c["function"]["arguments"]
              for c in message.get("tool_calls", [])]
    return found


def run_turns(agent: Any, turns: int, use_async: bool, thread: str = "t",
              first: int = 0) -> list[BaseMessage]:
    """Ask questions ``first`` .. ``first + turns - 1`` in one thread; the state's messages at
    the end."""
    config = {"configurable": {"thread_id": thread}}
    asked = range(first, first + turns)

    async def arun() -> dict:
        out: dict = {}
        for i in asked:
            out = await agent.ainvoke({"messages": [HumanMessage(f"question {i}", id=f"h{i}")]},
                                      config)
        return out

    if use_async:
        return asyncio.run(arun())["messages"]
    out: dict = {}
    for i in asked:
        out = agent.invoke({"messages": [HumanMessage(f"question {i}", id=f"h{i}")]}, config)
    return out["messages"]


def with_tools(dicts: list[dict]) -> list[dict]:
    """``dicts`` as an ephemeral middleware measures a request with the ``lookup`` tool: its
    schema (the protected ``tools`` fragment, as LangChain binds it) first."""
    schema = json.dumps([convert_to_openai_tool(lookup)], ensure_ascii=False,
                        separators=(",", ":"))
    return [{"role": "system", "content": schema}, *dicts]


# --------------------------------------------------------------------------------------------
# The converter: one dict per message, the message's own content, tool calls as LangChain's
# OpenAI encoding writes them.


def test_chat_dicts_are_one_per_message_and_carry_the_content_itself():
    anthropic = [{"type": "text", "text": "let me look"},
                 {"type": "tool_use", "id": "tu1", "name": "lookup", "input": {"q": "é"}}]
    messages = [
        SystemMessage("rules", additional_kwargs={"__openai_role__": "developer"}),
        HumanMessage("where is my parcel?", name="ann"),
        AIMessage("", tool_calls=[{"id": "c1", "name": "lookup", "args": {"q": "é 7"}}]),
        ToolMessage("in transit", tool_call_id="c1"),
        AIMessage(anthropic, tool_calls=[{"id": "tu1", "name": "lookup", "args": {"q": "é"}}]),
        HumanMessage([{"type": "tool_result", "tool_use_id": "tu1", "content": "ok"}]),
        AIMessage("", invalid_tool_calls=[{"id": "bad", "name": "lookup", "args": "{oops",
                                           "error": "not JSON", "type": "invalid_tool_call"}]),
        ChatMessage("hi", role="human"),
        SystemMessage("plain"),
    ]
    dicts = to_chat_dicts(messages)
    assert dicts == [
        {"role": "developer", "content": "rules"},
        {"role": "user", "content": "where is my parcel?", "name": "ann"},
        {"role": "assistant", "content": "", "tool_calls": [
            {"id": "c1", "type": "function",
             "function": {"name": "lookup", "arguments": '{"q": "é 7"}'}}]},
        {"role": "tool", "content": "in transit", "tool_call_id": "c1"},
        # The tool_use block is the call: it is not listed again as a tool_calls entry.
        {"role": "assistant", "content": anthropic},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "tu1",
                                      "content": "ok"}]},
        {"role": "assistant", "content": "", "tool_calls": [
            {"id": "bad", "type": "function", "function": {"name": "lookup",
                                                           "arguments": "{oops"}}]},
        {"role": "user", "content": "hi"},
        {"role": "system", "content": "plain"},
    ]
    assert all(d["content"] is m.content for d, m in zip(dicts, messages))
    # The Anthropic call counts once: "let me look" + "lookup" + '{"q":"é"}'.
    assert chars(messages[4:5]) == len("let me look") + len("lookup") + len('{"q":"é"}')
    assert chars(messages[2:3]) == len("lookup") + len('{"q": "é 7"}')


def test_a_state_entry_that_is_not_a_message_is_a_plan_error_naming_it():
    middleware = ContextPolicyMiddleware(trim_policy(), mode="persist")
    with pytest.raises(ContextPlanError) as exc:
        middleware.before_model({"messages": [HumanMessage("a"), {"role": "user"}]}, None)
    assert exc.value.issues[0].path == "state.messages[1]"
    assert exc.value.issues[0].code == "invalid-message"


# --------------------------------------------------------------------------------------------
# The middleware, checked at construction.


@pytest.mark.parametrize(("policy", "kwargs", "expected"), [
    ({"mode": "reduce", "triggerChar": 10, "steps": []}, {}, {"unknown-key"}),
    (trim_policy(fragment="question"), {}, {"protected-fragment"}),
    (trim_policy(fragment="system"), {}, {"protected-fragment"}),
    (trim_policy(fragment="instructions"), {}, {"protected-fragment"}),
    (trim_policy(fragment="notes"), {}, {"unknown-fragment"}),
    ({"mode": "reduce", "triggerChars": 5, "steps": [{"id": "c", "kind": "compress",
      "fragmentId": "history", "handlerId": "summary", "targetChars": 0}]}, {}, {"unknown-handler"}),
    ({"mode": "reduce", "triggerTokens": 5, "steps": trim_policy()["steps"]}, {},
     {"tokens-without-counter"}),
    ({"mode": "audit", "mutableFragmentIds": ["history"]}, {}, {"unsupported-mode"}),
    ({"mode": "validate"}, {"mode": "sometimes"}, {"invalid-option"}),
    ({"mode": "validate"}, {"counter": 3}, {"invalid-counter"}),
    (prepare_policy(trim_policy()), {"counter": len}, {"invalid-option"}),
])
def test_a_bad_policy_fails_at_construction(policy, kwargs, expected):
    with pytest.raises(ContextPolicyError) as exc:
        ContextPolicyMiddleware(policy, **kwargs)
    assert expected <= set(exc.value.codes)


def test_every_problem_at_construction_at_once():
    policy = {"mode": "audit", "mutableFragmentIds": ["question", "notes"]}
    with pytest.raises(ContextPolicyError) as exc:
        ContextPolicyMiddleware(prepare_policy(policy), handlers={})
    assert sorted((i.path, i.code) for i in exc.value.issues) == [
        ("handlers", "invalid-option"), ("mode", "unsupported-mode"),
        ("mutableFragmentIds[0]", "protected-fragment"),
        ("mutableFragmentIds[1]", "unknown-fragment")]


def test_the_policy_may_name_history_and_turn_and_a_prepared_policy_keeps_its_handlers():
    def summary(request):
        return [{"role": "assistant", "content": "summary"}]

    prepared = prepare_policy({"mode": "reduce", "triggerChars": 1, "steps": [
        {"id": "c", "kind": "compress", "fragmentId": "turn", "handlerId": "s", "targetChars": 0},
    ]}, handlers={"s": summary})
    middleware = ContextPolicyMiddleware(prepared)
    assert middleware.policy.steps[0].fragment_id == "turn"
    sent = call_middleware(middleware, [HumanMessage("q"), AIMessage("long " * 30)])
    assert [m.content for m in sent[1:]] == ["q", "summary"]
    assert middleware.last_report.steps[0].status == "applied"


def test_handler_messages_become_new_langchain_messages_or_a_clear_error():
    def rewrite(role):
        def handler(request):
            return [{"role": role}]  # no content: read as empty
        return handler

    messages = turns_of(2) + [HumanMessage("q", id="q")]
    policy = {"mode": "reduce", "triggerChars": 1, "steps": [{
        "id": "c", "kind": "compress", "fragmentId": "history", "handlerId": "h",
        "targetChars": 0}]}
    sent = call_middleware(ContextPolicyMiddleware(policy, handlers={"h": rewrite("assistant")}),
                           messages)
    assert isinstance(sent[1], AIMessage) and sent[1].content == "" and sent[2] is messages[-1]
    with pytest.raises(ContextPlanError) as exc:
        call_middleware(ContextPolicyMiddleware(policy, handlers={"h": rewrite("critic")}),
                        messages)
    assert (exc.value.issues[0].path, exc.value.codes) == ("input[1]", ["unsupported-message"])


def test_a_handler_that_writes_into_its_request_never_reaches_the_messages():
    def vandal(request):
        for message in request.content:
            message["content"] = "HACKED"
            message.get("tool_calls", [{}])[0]["id"] = "HACKED"
        return request.content[:1]

    messages = turns_of(2) + anthropic_history() + [HumanMessage("q", id="q")]
    before = [m.model_dump() for m in messages]
    policy = {"mode": "reduce", "triggerChars": 1, "steps": [{
        "id": "c", "kind": "compress", "fragmentId": "history", "handlerId": "v",
        "targetChars": 0}]}
    middleware = ContextPolicyMiddleware(policy, handlers={"v": vandal}, mode="persist")
    update = middleware.before_model({"messages": messages}, None)
    assert [m.model_dump() for m in messages] == before
    assert [m.content for m in update["messages"][1:]] == ["HACKED", "q"]


def test_two_instances_with_two_names_in_one_agent():
    model, reports = ScriptedModel(), {"cap": [], "fit": []}
    cap = ContextPolicyMiddleware(trim_policy(trigger=2_000, keep=2), mode="persist",
                                  name="cap", on_report=reports["cap"].append)
    fit = ContextPolicyMiddleware(trim_policy(), name="fit", on_report=reports["fit"].append)
    agent = create_agent(model, [lookup], middleware=[cap, fit], checkpointer=InMemorySaver())
    assert "cap.before_model" in agent.get_graph().nodes
    state = run_turns(agent, 3, use_async=False)
    assert len(state) == 12 and len(reports["cap"]) == len(reports["fit"]) == 6
    assert not any(r.triggered for r in reports["cap"])
    assert [m.id for m in model.received[-1]] == [m.id for m in state[4:11]]


def test_each_mode_wires_only_its_own_hook():
    ephemeral = create_agent(ScriptedModel(), [lookup], middleware=[
        ContextPolicyMiddleware(trim_policy())])
    persist = create_agent(ScriptedModel(), [lookup], middleware=[
        ContextPolicyMiddleware(trim_policy(), mode="persist")])
    assert "ContextPolicyMiddleware.before_model" not in ephemeral.get_graph().nodes
    assert "ContextPolicyMiddleware.before_model" in persist.get_graph().nodes
    assert isinstance(ContextPolicyMiddleware(trim_policy(), mode="persist"),
                      ContextPolicyMiddleware)

    class Mine(ContextPolicyMiddleware):
        pass

    with pytest.raises(TypeError, match="the mode is the class"):
        Mine(trim_policy(), mode="persist")  # its class has no before_model to run it


# --------------------------------------------------------------------------------------------
# The middleware inside create_agent.


@pytest.mark.parametrize("use_async", [False, True], ids=["invoke", "ainvoke"])
def test_ephemeral_agent_sends_the_kept_original_messages_and_keeps_its_state(
    use_async, pipeline_kernel
):
    model, probe, reports = ScriptedModel(), Probe(), []
    middleware = ContextPolicyMiddleware(trim_policy(), counter=Words(), on_report=reports.append, cut="plain")
    agent = create_agent(model, [lookup], system_prompt=SYSTEM, middleware=[probe, middleware],
                         checkpointer=InMemorySaver())
    state = run_turns(agent, 4, use_async)

    # The state keeps every message: 4 turns of question, tool call, tool result, answer.
    assert len(state) == 16
    assert [type(m).__name__ for m in state[:4]] == [
        "HumanMessage", "AIMessage", "ToolMessage", "AIMessage"]
    assert len(model.received) == len(probe.seen) == len(reports) == 8
    for call, (sent, (system, handed), report) in enumerate(
            zip(model.received, probe.seen, reports)):
        turn, second = divmod(call, 2)
        # The system prompt is sent as it was, the same object.
        assert sent[0] is system and sent[0].content == SYSTEM
        # The history keeps its newest turn; the question and the turn's tool work all stay.
        expected = state[4 * (turn - 1):4 * turn] if turn else []
        expected += state[4 * turn:4 * turn + 1 + 2 * second]
        assert [m.id for m in sent[1:]] == [m.id for m in expected]
        # ... as the very objects the agent handed the middleware.
        assert is_subsequence(sent[1:], handed) and len(handed) == 4 * turn + 1 + 2 * second
        assert sent[1 + (4 if turn else 0)] is handed[4 * turn]  # the question
        assert pairing_problems(sent) == []
        # The figures are what was handed and what was sent, measured.
        before = check_input_budget(with_tools(to_chat_dicts([system, *handed])),
                                    counter=Words())
        after = check_input_budget(with_tools(to_chat_dicts(sent)), counter=Words())
        assert (report.before.chars, report.before.tokens) == (before.chars, before.tokens)
        assert (report.after.chars, report.after.tokens) == (after.chars, after.tokens)
        assert report.after.messages == len(sent) + 1  # the tool's schema
        assert report.kernel == pipeline_kernel.IMPLEMENTATION
    last = reports[-1].steps[0]
    assert (last.status, last.groups_before, last.groups_after, last.messages_removed) == (
        "applied", 3, 1, 8)
    assert middleware.last_report == reports[-1]


def test_async_compress_handler_summary_is_sent_and_never_stored():
    model, reports, seen = ScriptedModel(), [], []

    async def summarize(request):
        await asyncio.sleep(0)
        seen.append([m["role"] for m in request.content])
        return [{"role": "assistant", "content": f"summary of {len(request.content)} messages"}]

    policy = {"mode": "reduce", "triggerChars": 1, "steps": [{
        "id": "sum", "kind": "compress", "fragmentId": "history", "handlerId": "summarize",
        "keepGroups": 1, "targetChars": 0}]}
    middleware = ContextPolicyMiddleware(policy, handlers={"summarize": summarize},
                                         on_report=reports.append, cut="plain")
    agent = create_agent(model, [lookup], system_prompt=SYSTEM, middleware=[middleware],
                         checkpointer=InMemorySaver())
    state = run_turns(agent, 4, use_async=True)

    assert len(state) == 16 and not any("summary" in str(m.content) for m in state)
    sent = model.received[-1]
    assert sent[1].content == "summary of 8 messages" and isinstance(sent[1], AIMessage)
    assert all(sent[1] is not m for m in state)
    assert [m.id for m in sent[2:]] == [m.id for m in state[8:15]]
    assert seen[-1] == ["user", "assistant", "tool", "assistant"] * 2
    assert reports[-1].steps[0].status == "applied"
    assert reports[-1].after.chars == check_input_budget(with_tools(to_chat_dicts(sent))).chars


def test_a_coroutine_handler_under_invoke_is_a_clear_error():
    async def summarize(request):
        return []

    policy = {"mode": "reduce", "triggerChars": 1, "steps": [{
        "id": "sum", "kind": "compress", "fragmentId": "history", "handlerId": "summarize",
        "targetChars": 0}]}
    agent = create_agent(ScriptedModel(), [lookup], middleware=[
        ContextPolicyMiddleware(policy, handlers={"summarize": summarize})])
    with pytest.raises(ContextPolicyError) as exc:
        agent.invoke({"messages": [HumanMessage("q")]})
    assert "async-handler" in exc.value.codes


@pytest.mark.parametrize("use_async", [False, True], ids=["invoke", "ainvoke"])
def test_persist_agent_shrinks_its_state(use_async):
    model, probe, reports = ScriptedModel(), Probe(), []
    middleware = ContextPolicyMiddleware(trim_policy(), mode="persist", on_report=reports.append)
    agent = create_agent(model, [lookup], system_prompt=SYSTEM, middleware=[probe, middleware],
                         checkpointer=InMemorySaver())
    after_two = run_turns(agent, 2, use_async, thread="p")
    state = run_turns(agent, 2, use_async, thread="p", first=2)

    # Before each model call the state keeps one turn of history: the last two turns remain.
    assert len(after_two) == 8 and len(state) == 8
    assert not any(isinstance(m, RemoveMessage) for m in state)
    assert [type(m).__name__ for m in state] == [
        "HumanMessage", "AIMessage", "ToolMessage", "AIMessage"] * 2
    assert [m.id for m in state[:4]] == [m.id for m in run_state(agent, "p")[:4]]
    # The model is sent the reduced state itself (with the system prompt, which the state
    # does not hold and the persist mode does not count).
    for sent, (system, handed) in zip(model.received, probe.seen):
        assert sent[0] is system and sent[1:] == handed and all(
            a is b for a, b in zip(sent[1:], handed))
        assert len(handed) <= 7 and pairing_problems(handed) == []
    assert reports[-1].after.chars == chars(probe.seen[-1][1])
    # A state within the policy is left alone (None: no update).
    small = ContextPolicyMiddleware(trim_policy(trigger=10_000), mode="persist")
    assert small.before_model({"messages": state}, None) is None
    assert small.last_report.triggered is False


def run_state(agent: Any, thread: str) -> list[BaseMessage]:
    return agent.get_state({"configurable": {"thread_id": thread}}).values["messages"]


def test_persist_update_replaces_all_with_the_same_objects():
    messages = turns_of(4) + [HumanMessage("now", id="q")]
    middleware = ContextPolicyMiddleware(trim_policy(), mode="persist")
    update = middleware.before_model({"messages": messages}, None)
    remove, *kept = update["messages"]
    assert isinstance(remove, RemoveMessage) and remove.id == REMOVE_ALL_MESSAGES
    assert kept == messages[-5:] and all(a is b for a, b in zip(kept, messages[-5:]))
    assert asyncio.run(middleware.abefore_model({"messages": messages}, None)) == update


def test_validate_reports_orphans_and_hands_the_request_on_untouched():
    middleware = ContextPolicyMiddleware({"mode": "validate"})
    messages = [HumanMessage("q0"), ToolMessage("stray", tool_call_id="nobody"),
                AIMessage("", tool_calls=[{"id": "open", "name": "f", "args": {}}]),
                HumanMessage("q1")]
    request = ModelRequest(model=ScriptedModel(), messages=messages,
                           system_message=SystemMessage(SYSTEM))
    handed = []
    middleware.wrap_model_call(request, lambda r: handed.append(r) or ModelResponse(result=[]))
    assert handed == [request] and handed[0] is request
    warnings = {(w.code, w.fragment_id, w.tool_call_id)
                for w in middleware.last_report.warnings}
    assert warnings == {("orphan-tool-result", "history", "nobody"),
                        ("unanswered-tool-call", "history", "open")}
    # An empty request: the system prompt alone, measured.
    assert call_middleware(middleware, []) == [request.system_message]
    assert middleware.last_report.after.chars == len(SYSTEM)


def test_events_and_last_report():
    events = []
    middleware = ContextPolicyMiddleware(trim_policy(), on_event=events.append)
    assert middleware.last_report is None
    call_middleware(middleware, turns_of(2) + [HumanMessage("q")])
    assert [e.type for e in events] == [
        "context.started", "context.measured", "context.triggered", "step.started",
        "step.completed", "context.completed"]
    assert events[-1].data["after"]["chars"] == middleware.last_report.after.chars


def test_cancel_event_stops_the_call():
    cancel = threading.Event()
    cancel.set()
    middleware = ContextPolicyMiddleware(trim_policy(), cancel=cancel)
    with pytest.raises(ContextCancelledError):
        call_middleware(middleware, turns_of(2) + [HumanMessage("q")])


def tool_rounds(n: int = 2, size: int = 2_000) -> list[BaseMessage]:
    """The agent's work on the question so far: ``n`` rounds of a tool call and its result."""
    out: list[BaseMessage] = []
    for r in range(n):
        out += [AIMessage("", id=f"now-a{r}", tool_calls=[
                    {"id": f"now{r}", "name": "lookup", "args": {"round": r}}]),
                ToolMessage("o" * size, tool_call_id=f"now{r}", id=f"now-t{r}")]
    return out


@pytest.mark.parametrize("policy", [
    trim_policy(target=0, keep=0),
    trim_policy(target=0, keep=0, grouping="message"),
    {**trim_policy(target=0, keep=0), "targetInputChars": 1},  # out of a history trim's reach
    {"mode": "reduce", "triggerChars": 1, "targetInputChars": 1, "steps": [{
        "id": "c", "kind": "compress", "fragmentId": "history", "handlerId": "summary",
        "targetChars": 0}]},
    {"mode": "validate"},
], ids=["trim", "trim-by-message", "unreachable-target", "compress", "validate"])
def test_the_turn_is_reduced_only_by_a_step_that_names_it(policy):
    def summary(request):
        return [{"role": "assistant", "content": "summary"}]

    messages = turns_of(2) + [HumanMessage("now?", id="q")] + tool_rounds()
    middleware = ContextPolicyMiddleware(
        policy, handlers={"summary": summary} if policy["mode"] == "reduce" else None, cut="plain")
    sent = call_middleware(middleware, messages)
    # The question and the agent's tool work on it are sent whole, as the same objects.
    tail = messages[-5:]
    assert len(sent) >= 6 and all(a is b for a, b in zip(sent[-5:], tail, strict=True))
    report = middleware.last_report
    turn = next(f for f in report.fragments if f.id == "turn")
    assert (turn.messages_before, turn.messages_after) == (4, 4)
    assert turn.chars_before == turn.chars_after == chars(tool_rounds()) > 4_000
    if policy["mode"] == "reduce":
        assert report.steps[0].status == "applied" and len(sent) < len(messages) + 1
    if policy.get("targetInputChars"):
        assert report.target_reached is False


def test_a_step_that_names_the_turn_keeps_its_newest_tool_rounds():
    messages = turns_of(1) + [HumanMessage("now?", id="q")] + tool_rounds(3)
    middleware = ContextPolicyMiddleware(trim_policy(target=0, keep=1, grouping="message",
                                                     fragment="turn"), cut="plain")
    sent = call_middleware(middleware, messages)
    assert [m.id for m in sent[1:]] == [m.id for m in messages[:5]] + ["now-a2", "now-t2"]
    assert pairing_problems(sent) == []
    step = middleware.last_report.steps[0]
    assert (step.fragment_id, step.groups_before, step.groups_after, step.messages_removed) == (
        "turn", 3, 1, 4)


# --------------------------------------------------------------------------------------------
# Our counters inside LangChain's own middleware.


@pytest.mark.parametrize("counter", [Words(), FramedWords(), lambda s: len(s)],
                         ids=["count_text", "count_messages", "callable"])
def test_token_counter_counts_what_the_policy_counts(counter):
    messages = turns_of(2) + anthropic_history()
    count = langchain_token_counter(counter)
    expected = check_input_budget(to_chat_dicts(messages), counter=counter).tokens
    assert count(messages) == expected > 0
    assert count(iter(messages)) == expected
    # Anything LangChain converts to messages.
    assert count([("user", "three little words"), {"role": "assistant", "content": "ok"}]) == (
        check_input_budget([{"role": "user", "content": "three little words"},
                            {"role": "assistant", "content": "ok"}], counter=counter).tokens)


def test_token_counter_refuses_what_is_not_a_counter():
    with pytest.raises(ContextPolicyError) as exc:
        langchain_token_counter(42)
    assert exc.value.codes == ["invalid-counter"]


@pytest.mark.parametrize(("extra", "summarized"), [(0, True), (1, False)])
def test_token_counter_drives_summarization_middleware(extra, summarized):
    history = turns_of(3)
    question = HumanMessage("and now?", id="q")
    words = check_input_budget(to_chat_dicts([*history, question]), counter=Words()).tokens
    model = ScriptedModel()
    summarization = SummarizationMiddleware(
        model=model, trigger=("tokens", words + extra), keep=("messages", 1),
        token_counter=langchain_token_counter(Words()), summarizer=lambda messages: "SUMMARY",
    )
    agent = create_agent(model, [lookup], middleware=[summarization])
    agent.invoke({"messages": [*history, question]})
    first = model.received[0]
    if summarized:
        assert first[0].content.endswith("SUMMARY") and first[1:] == [question]
    else:
        assert [m.id for m in first] == [m.id for m in [*history, question]]


@pytest.mark.parametrize(("extra", "cleared"), [(-1, True), (0, False)])
def test_token_counter_drives_context_editing_middleware(extra, cleared):
    messages = turns_of(2) + [HumanMessage("now?")]
    words = langchain_token_counter(Words())(messages)
    editing = ContextEditingMiddleware(
        edits=[ClearToolUsesEdit(trigger=words + extra, keep=0)],
        token_counter=langchain_token_counter(Words()),
    )
    sent: list[ModelRequest] = []
    editing.wrap_model_call(ModelRequest(model=ScriptedModel(), messages=messages),
                            lambda r: sent.append(r) or ModelResponse(result=[]))
    tools = [m.content for m in sent[0].messages if isinstance(m, ToolMessage)]
    assert tools == (["[cleared]"] * 2 if cleared else [TOOL_TEXT] * 2)


# --------------------------------------------------------------------------------------------


def test_import_contextpolicy_never_imports_langchain():
    code = (
        "import sys, contextpolicy, contextpolicy.adapters\n"
        "from contextpolicy import ContextPlan, process_context\n"
        "process_context(ContextPlan.from_messages([{'role': 'user', 'content': 'x'}]),"
        " {'mode': 'validate'})\n"
        "found = sorted(m for m in sys.modules if m.split('.')[0] in"
        " ('langchain', 'langchain_core', 'langgraph'))\n"
        "print(found)\n"
        "import contextpolicy.adapters.langchain\n"
        "print('langchain' in sys.modules)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True).stdout.split("\n")
    assert out[:2] == ["[]", "True"]


def test_without_the_extra_the_import_error_names_it():
    code = (
        "import sys\n"
        "sys.modules['langchain'] = None\n"
        "try:\n"
        "    import contextpolicy.adapters.langchain\n"
        "except ImportError as exc:\n"
        "    print(exc)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True).stdout
    assert "pip install contextpolicy[langchain]" in out
