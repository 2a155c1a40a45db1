"""``contextpolicy.adapters.langchain``: the middleware inside real LangChain v1 agents, the
LangGraph node inside real graphs, and our counters inside LangChain's own middleware.

Every model is a scripted fake (no network): it records the messages it is sent and answers a
question with a tool call and a tool result with text, so the agents' histories hold tool calls
and tool messages. Expected messages are written out by position in the agent's state, and
figures are held to ``check_input_budget`` on the converted dicts.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import threading
from typing import Annotated, Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from langchain.agents import create_agent
from langchain.agents.middleware import (
    AgentMiddleware,
    ClearToolUsesEdit,
    ContextEditingMiddleware,
    ModelRequest,
    ModelResponse,
    SummarizationMiddleware,
)
from langchain_core.language_models import BaseChatModel
from langchain_core.messages import (
    AIMessage,
    BaseMessage,
    ChatMessage,
    HumanMessage,
    RemoveMessage,
    SystemMessage,
    ToolMessage,
)
from langchain_core.outputs import ChatGeneration, ChatResult
from langchain_core.tools import tool
from langchain_core.utils.function_calling import convert_to_openai_tool
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.graph import END, START, MessagesState, StateGraph
from langgraph.graph.message import REMOVE_ALL_MESSAGES, add_messages
from pydantic import Field
from typing_extensions import TypedDict

from contextpolicy import (
    ContextCancelledError,
    ContextPlanError,
    ContextPolicyError,
    check_input_budget,
    prepare_policy,
)
from contextpolicy.adapters.langchain import (
    ContextPolicyMiddleware,
    context_policy_node,
    langchain_token_counter,
    to_chat_dicts,
)

pytestmark = [pytest.mark.extras, pytest.mark.usefixtures("pipeline_kernel")]


@pytest.fixture(autouse=True)
def _no_tracing(monkeypatch: pytest.MonkeyPatch) -> None:
    """No LangSmith tracing (a network call) whatever the environment says."""
    for name in ("LANGSMITH_TRACING", "LANGCHAIN_TRACING_V2", "LANGCHAIN_TRACING"):
        monkeypatch.delenv(name, raising=False)

SYSTEM = "You are a terse support agent."
TOOL_TEXT = "parcel status: in transit. " * 4


class ScriptedModel(BaseChatModel):
    """Records every call's messages; a question gets a tool call, a tool result an answer."""

    received: list[list[BaseMessage]] = Field(default_factory=list)

    @property
    def _llm_type(self) -> str:
        return "scripted"

    def bind_tools(self, tools: Any, **kwargs: Any) -> ScriptedModel:
        return self

    def _generate(self, messages: list[BaseMessage], stop: Any = None, run_manager: Any = None,
                  **kwargs: Any) -> ChatResult:
        self.received.append(list(messages))
        n = len(self.received)
        last = messages[-1]
        if isinstance(last, HumanMessage):
            reply = AIMessage(content="", id=f"ai-{n}", tool_calls=[
                {"id": f"call-{n}", "name": "lookup", "args": {"q": str(last.content)}}])
        else:
            reply = AIMessage(content=f"answer {n}", id=f"ai-{n}")
        return ChatResult(generations=[ChatGeneration(message=reply)])


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


class Words:
    name = "words"
    exact = True

    def count_text(self, text: str) -> int:
        return len(text.split())


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


def trim_policy(trigger: int = 1, target: int = 0, keep: int = 1, grouping: str = "user-turn",
                fragment: str = "history") -> dict:
    return {"mode": "reduce", "triggerChars": trigger, "steps": [{
        "id": "trim", "kind": "trim", "fragmentId": fragment, "keepGroups": keep,
        "targetChars": target, "grouping": {"kind": grouping}}]}


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


def pairing_problems(messages: list[BaseMessage]) -> list[str]:
    """Tool results without an earlier call among ``messages`` (ToolMessages and
    ``tool_result`` blocks alike)."""
    calls: set[str] = set()
    problems = []
    for m in messages:
        if isinstance(m, AIMessage):
            calls.update(c["id"] for c in m.tool_calls)
            calls.update(p["id"] for p in m.content if isinstance(p, dict)
                         and p.get("type") == "tool_use") if isinstance(m.content, list) else None
        if isinstance(m, ToolMessage) and m.tool_call_id not in calls:
            problems.append(f"tool message {m.tool_call_id} without its call")
        if isinstance(m.content, list):
            for p in m.content:
                if isinstance(p, dict) and p.get("type") == "tool_result" and (
                        p["tool_use_id"] not in calls):
                    problems.append(f"tool_result {p['tool_use_id']} without its tool_use")
    return problems


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


def is_subsequence(kept: list[Any], of: list[Any]) -> bool:
    """``kept`` are objects of ``of`` (identity), in its order."""
    it = iter(of)
    return all(any(k is o for o in it) for k in kept)


def chars(messages: list[BaseMessage]) -> int:
    return check_input_budget(to_chat_dicts(messages)).chars


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


def call_middleware(middleware: ContextPolicyMiddleware, messages: list[BaseMessage],
                    system: SystemMessage | None = None) -> list[BaseMessage]:
    """One ephemeral model call: what the model is sent (system message first)."""
    sent: list[ModelRequest] = []

    def handler(request: ModelRequest) -> ModelResponse:
        sent.append(request)
        return ModelResponse(result=[AIMessage("ok")])

    request = ModelRequest(model=ScriptedModel(), messages=messages,
                           system_message=system or SystemMessage(SYSTEM))
    middleware.wrap_model_call(request, handler)
    assert request.messages is messages  # the agent's request is never changed
    return [sent[0].system_message, *sent[0].messages]


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


def turns_of(n: int, prefix: str = "t") -> list[BaseMessage]:
    """``n`` OpenAI-style turns: question, tool call, tool result, answer."""
    out: list[BaseMessage] = []
    for i in range(n):
        cid = f"{prefix}{i}-call"
        out += [
            HumanMessage(f"question {i} " * 3, id=f"{prefix}{i}-h"),
            AIMessage("", id=f"{prefix}{i}-ai", tool_calls=[
                {"id": cid, "name": "lookup", "args": {"q": i}}]),
            ToolMessage(TOOL_TEXT, tool_call_id=cid, id=f"{prefix}{i}-tool"),
            AIMessage(f"answer {i}", id=f"{prefix}{i}-answer"),
        ]
    return out


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
# Regressions of LangChain trims that split tool calls from their results.


def anthropic_history() -> list[BaseMessage]:
    """Anthropic blocks: tool_use in the AI content, results as tool_result blocks carried by a
    human message, and as a ToolMessage."""
    return [
        HumanMessage("where is parcel 1?", id="h1"),
        AIMessage([{"type": "text", "text": "Checking."},
                   {"type": "tool_use", "id": "tu1", "name": "track", "input": {"p": 1}}],
                  tool_calls=[{"id": "tu1", "name": "track", "args": {"p": 1}}], id="a1"),
        HumanMessage([{"type": "tool_result", "tool_use_id": "tu1", "content": TOOL_TEXT}],
                     id="r1"),
        AIMessage("Parcel 1 is in transit.", id="a1b"),
        HumanMessage("and parcels 2 and 3?", id="h2"),
        AIMessage([{"type": "tool_use", "id": "tu2", "name": "track", "input": {"p": 2}},
                   {"type": "tool_use", "id": "tu3", "name": "track", "input": {"p": 3}}],
                  id="a2"),
        ToolMessage([{"type": "text", "text": TOOL_TEXT}], tool_call_id="tu2", id="r2"),
        HumanMessage([{"type": "tool_result", "tool_use_id": "tu3",
                       "content": [{"type": "text", "text": TOOL_TEXT}]}], id="r3"),
        AIMessage("Both in transit.", id="a2b"),
    ]


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


# --------------------------------------------------------------------------------------------
# The LangGraph node.


def graph_of(node: Any, checkpointer: Any = None) -> Any:
    builder = StateGraph(MessagesState)
    builder.add_node("context", node)
    builder.add_edge(START, "context")
    builder.add_edge("context", END)
    return builder.compile(checkpointer=checkpointer)


def test_node_update_replaces_the_messages_with_the_kept_ones():
    messages = turns_of(3) + [HumanMessage("now?", id="q")]
    reports = []
    graph = graph_of(context_policy_node(trim_policy(), on_report=reports.append))
    updates = list(graph.stream({"messages": messages}, stream_mode="updates"))
    remove, *kept = updates[0]["context"]["messages"]
    assert remove.id == REMOVE_ALL_MESSAGES
    assert [m.id for m in kept] == [m.id for m in messages[-5:]]
    out = graph.invoke({"messages": messages})["messages"]
    assert [m.id for m in out] == [m.id for m in messages[-5:]]
    assert reports[-1].after.chars == chars(out) and reports[-1].steps[0].messages_removed == 8


def test_node_returns_no_update_when_nothing_changed():
    node = context_policy_node(trim_policy(trigger=10_000))
    messages = turns_of(2) + [HumanMessage("now?")]
    assert node.invoke({"messages": messages}) == {}
    assert asyncio.run(node.ainvoke({"messages": messages})) == {}
    out = graph_of(node).invoke({"messages": messages})["messages"]
    assert [m.id for m in out] == [m.id for m in messages]


EVENTS = ["context.started", "context.measured", "context.triggered", "step.started",
          "step.completed", "context.completed"]


@pytest.mark.parametrize("use_async", [False, True], ids=["stream", "astream"])
def test_node_streams_the_policy_events(use_async, pipeline_kernel):
    messages = turns_of(3) + [HumanMessage("now?", id="q")]
    graph = graph_of(context_policy_node(trim_policy()))

    async def collect():
        return [c async for c in graph.astream({"messages": messages}, stream_mode="custom")]

    chunks = asyncio.run(collect()) if use_async else list(
        graph.stream({"messages": messages}, stream_mode="custom"))
    assert [c["contextpolicy"] for c in chunks] == EVENTS
    started, measured, *_, completed = chunks
    assert started["kernel"] == pipeline_kernel.IMPLEMENTATION and started["mode"] == "reduce"
    assert measured["usage"]["chars"] == chars(messages)
    assert completed["after"]["chars"] == chars(messages[-5:])
    assert completed["after"]["messages"] == 5 and completed["triggered"] is True
    step = chunks[4]["step"]
    assert (step["status"], step["messagesRemoved"]) == ("applied", 8)
    json.dumps(chunks)  # plain JSON figures


def test_node_is_cancelled_with_its_task():
    started, cancelled = asyncio.Event(), []

    async def slow_summary(request):
        started.set()
        try:
            await asyncio.sleep(30)
        except asyncio.CancelledError:
            cancelled.append(request.step_id)
            raise
        return [{"role": "assistant", "content": "summary"}]

    policy = {"mode": "reduce", "triggerChars": 1, "steps": [{
        "id": "summary", "kind": "compress", "fragmentId": "history",
        "handlerId": "slow", "targetChars": 0}]}
    graph = graph_of(context_policy_node(policy, handlers={"slow": slow_summary}),
                     checkpointer=InMemorySaver())
    messages = turns_of(3) + [HumanMessage("now?", id="q")]
    config = {"configurable": {"thread_id": "cancel"}}

    async def main():
        task = asyncio.ensure_future(graph.ainvoke({"messages": messages}, config))
        await asyncio.wait_for(started.wait(), 10)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(main())
    assert cancelled == ["summary"]
    state = graph.get_state(config)
    assert [m.id for m in state.values["messages"]] == [m.id for m in messages]
    assert state.next == ("context",)  # the node never completed: no update was written


def test_node_cancel_event_and_a_custom_messages_key():
    class State(TypedDict):
        transcript: Annotated[list, add_messages]

    messages = turns_of(2) + [HumanMessage("now?", id="q")]
    builder = StateGraph(State)
    builder.add_node("context", context_policy_node(trim_policy(), messages_key="transcript"))
    builder.add_edge(START, "context")
    graph = builder.compile()
    out = graph.invoke({"transcript": messages})["transcript"]
    assert [m.id for m in out] == [m.id for m in messages[-5:]]

    cancel = threading.Event()
    cancel.set()
    stopped = graph_of(context_policy_node(trim_policy(), cancel=cancel))
    with pytest.raises(ContextCancelledError):
        stopped.invoke({"messages": messages})


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
