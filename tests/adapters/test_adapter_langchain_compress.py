"""Compress handlers through the LangChain adapter: a message a handler left alone goes back as
the very object it was, and a message a handler changed keeps every field it did not change.

The history carries what LangChain messages carry (ids, names, ``response_metadata``,
``additional_kwargs``, ``usage_metadata``, a ``ToolMessage``'s ``artifact`` and ``status``) and
every kind of call: ``tool_calls``, Anthropic ``tool_use`` blocks (answered by a
``ToolMessage`` and by a ``tool_result`` carrier), ``invalid_tool_calls`` and a legacy
``function_call``. Each built-in handler runs on it in both modes of the middleware inside
``create_agent`` with a fake chat model (``invoke`` and ``ainvoke``), and in the LangGraph node.
What the model is sent is held to what ``process_context`` makes of the same messages' chat
dicts, message by message.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from langchain.agents import create_agent
from langchain.agents.middleware import AgentMiddleware, ModelRequest, ModelResponse
from langchain_core.language_models import BaseChatModel
from langchain_core.language_models.fake_chat_models import FakeListChatModel
from langchain_core.messages import (
    AIMessage,
    BaseMessage,
    FunctionMessage,
    HumanMessage,
    SystemMessage,
    ToolMessage,
)
from langchain_core.outputs import ChatGeneration, ChatResult
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.graph import END, START, MessagesState, StateGraph
from pydantic import Field

from contextpolicy import ContextPlan, ContextPlanError, process_context
from contextpolicy.adapters.langchain import (
    ContextPolicyMiddleware,
    context_policy_node,
    to_chat_dicts,
)
from contextpolicy.handlers import (
    clear_tool_results,
    is_summary,
    registry,
    summarize,
    truncate_messages,
)

pytestmark = [pytest.mark.extras, pytest.mark.usefixtures("pipeline_kernel")]


@pytest.fixture(autouse=True)
def _no_tracing(monkeypatch: pytest.MonkeyPatch) -> None:
    """No LangSmith tracing (a network call) whatever the environment says."""
    for name in ("LANGSMITH_TRACING", "LANGCHAIN_TRACING_V2", "LANGCHAIN_TRACING"):
        monkeypatch.delenv(name, raising=False)


SYSTEM = "You are a terse support agent."
LONG = "parcel status: in transit, depot 7, next stop the sorting centre. " * 6
PLACEHOLDER = "[tool result cleared: {chars} chars]"


def _meta(n: int) -> dict[str, Any]:
    return {"model_name": "fake-1", "finish_reason": "stop", "system_fingerprint": f"fp{n}"}


def _usage(n: int) -> dict[str, Any]:
    return {"input_tokens": 10 + n, "output_tokens": n, "total_tokens": 10 + 2 * n}


def history() -> list[BaseMessage]:
    """Five turns, one kind of call each, every message with an id, and the question.

    Turn 1 and turn 4 ask the same thing (the same content, different ids)."""
    tu1 = {"type": "tool_use", "id": "tu1", "name": "lookup", "input": {"q": "parcel 1 " * 8}}
    tu4 = {"type": "tool_use", "id": "tu4", "name": "lookup", "input": {"q": "parcel 4 " * 8}}
    return [
        HumanMessage("question 0: " + LONG, id="h0", name="ann"),
        AIMessage("", id="a0", tool_calls=[
            {"id": "c0", "name": "lookup", "args": {"q": "parcel 0 " * 8}}],
            response_metadata=_meta(0), usage_metadata=_usage(0),
            additional_kwargs={"refusal": None}),
        ToolMessage("result 0: " + LONG, id="t0", tool_call_id="c0", name="lookup",
                    artifact={"rows": [0, 1]}, status="success"),
        AIMessage("answer 0: " + LONG, id="r0", response_metadata=_meta(1),
                  usage_metadata=_usage(1)),
        HumanMessage("the same again please: " + LONG, id="h1"),
        AIMessage([{"type": "text", "text": "looking it up: " + LONG}, tu1], id="a1",
                  tool_calls=[{"id": "tu1", "name": "lookup", "args": tu1["input"]}],
                  response_metadata=_meta(2)),
        ToolMessage("result 1: " + LONG, id="t1", tool_call_id="tu1",
                    artifact={"raw": "r1"}),
        AIMessage("answer 1", id="r1"),
        HumanMessage("question 2: " + LONG, id="h2"),
        AIMessage("", id="a2", invalid_tool_calls=[{
            "type": "invalid_tool_call", "id": "bad2", "name": "lookup",
            "args": '{"q": "parcel 2 ' + "x" * 60, "error": "unterminated string"}],
            response_metadata=_meta(3)),
        ToolMessage("Error: the arguments were not JSON. " + LONG, id="t2", tool_call_id="bad2",
                    status="error"),
        AIMessage("answer 2", id="r2"),
        HumanMessage("question 3: " + LONG, id="h3"),
        AIMessage("", id="a3", additional_kwargs={
            "function_call": {"name": "lookup", "arguments": '{"q": "parcel 3"}'}}),
        FunctionMessage("result 3: " + LONG, id="f3", name="lookup"),
        AIMessage("answer 3", id="r3"),
        HumanMessage("the same again please: " + LONG, id="h4"),
        AIMessage([tu4], id="a4", tool_calls=[{"id": "tu4", "name": "lookup",
                                               "args": tu4["input"]}]),
        HumanMessage([{"type": "tool_result", "tool_use_id": "tu4",
                       "content": "result 4: " + LONG}], id="u4"),
        AIMessage("answer 4", id="r4", usage_metadata=_usage(4)),
        HumanMessage("and now?", id="q"),
    ]


def _summary(text: str, target: int) -> str:
    return "Parcels 0 to 3 were looked up; the call for parcel 2 failed."


def _step(step_id: str, handler_id: str, **extra: Any) -> dict[str, Any]:
    return {"id": step_id, "kind": "compress", "fragmentId": "history",
            "handlerId": handler_id, "targetChars": 0, **extra}


TRIM = {"id": "trim", "kind": "trim", "fragmentId": "history", "keepGroups": 2,
        "targetChars": 0, "grouping": {"kind": "user-turn"}}

# Each case: the steps of the policy and the handlers they name. A summary's newest groups are
# the messages as the step before it left them: the originals after a trim, copies after
# another compress step (which the adapter traces back to the originals).
CASES = {
    "clear": ([_step("c", "clear-tool-results")], lambda: [clear_tool_results(keep=1)]),
    "clear-inputs": ([_step("c", "clear-tool-results")],
                     lambda: [clear_tool_results(keep=1, clear_inputs=True)]),
    "truncate": ([_step("c", "truncate-messages")], lambda: [truncate_messages(max_chars=120)]),
    "summarize": ([_step("c", "summarize", keepGroups=1)], lambda: [summarize(_summary)]),
    "clear-then-summarize": (
        [_step("c", "clear-tool-results"), _step("s", "summarize", keepGroups=1)],
        lambda: [clear_tool_results(keep=1), summarize(_summary)]),
    "trim-then-truncate": ([TRIM, _step("c", "truncate-messages")],
                           lambda: [truncate_messages(max_chars=120)]),
}


def policy_of(case: str) -> dict[str, Any]:
    return {"mode": "reduce", "triggerChars": 1, "steps": CASES[case][0]}


def handlers_of(case: str) -> dict[str, Any]:
    return registry(*CASES[case][1]())


def expected(case: str, messages: list[BaseMessage]) -> list[dict[str, Any]]:
    """What the policy makes of the messages' chat dicts, without LangChain: the chat dicts of
    what the model must be sent (the question last)."""
    result = process_context(ContextPlan.from_messages(to_chat_dicts(messages)),
                             policy_of(case), handlers=handlers_of(case))
    return result.input


def dump(message: BaseMessage, *exclude: str) -> dict[str, Any]:
    return message.model_dump(exclude=set(exclude))


def check_sent(sent: list[BaseMessage], given: list[BaseMessage],
               want: list[dict[str, Any]]) -> None:
    """``sent`` is what the policy made of ``given`` (``want``, its chat dicts): messages the
    handler left as they were are the given objects, changed ones keep every other field."""
    by_id = {m.id: m for m in given}
    # What was measured and reduced is what is sent (a summary's mark is in additional_kwargs).
    assert to_chat_dicts(sent) == [
        {k: v for k, v in d.items() if k != "metadata"} if is_summary(d) else d for d in want]
    for message, dict_ in zip(sent, want, strict=True):
        original = by_id.get(message.id)
        if original is None:  # no given message stands behind it: the summary, and only it
            assert is_summary(dict_) and isinstance(message, HumanMessage)
            assert message.additional_kwargs["metadata"] == dict_["metadata"]
            continue
        assert type(message) is type(original)
        if dict_ == to_chat_dicts([original])[0]:
            assert message is original, message.id
            continue
        assert message is not original
        # Only the content and the calls' arguments may differ; ids, names, metadata, usage,
        # artifact, status, invalid calls and function_call are the original's.
        assert dump(message, "content", "tool_calls") == dump(original, "content", "tool_calls")
        if isinstance(message, AIMessage):
            assert [(c["id"], c["name"]) for c in message.tool_calls] == [
                (c["id"], c["name"]) for c in original.tool_calls]
    # Every given message sent is sent once, in order, with its id.
    ids = [m.id for m in sent if m.id in by_id]
    assert ids == [m.id for m in given if m.id in ids]
    assert sum(m.id not in by_id for m in sent) == sum(is_summary(d) for d in want)
    invalid = {c["id"] for m in given if isinstance(m, AIMessage)
               for c in m.invalid_tool_calls}
    for message in sent:
        if not isinstance(message, AIMessage):
            continue
        # A call that lives in a tool_use block has the block's input as its arguments.
        args = {c["id"]: c["args"] for c in message.tool_calls}
        blocks = [p for p in message.content if isinstance(p, dict)
                  and p.get("type") == "tool_use"] if isinstance(message.content, list) else []
        assert all(args[b["id"]] == b["input"] for b in blocks)
        # An invalid call stays invalid, as it was.
        assert not set(args) & invalid
        if message.id in by_id:
            assert message.invalid_tool_calls == by_id[message.id].invalid_tool_calls


class DoneModel(BaseChatModel):
    """Records every call's messages and answers without a tool call, so a run is one call."""

    received: list[list[BaseMessage]] = Field(default_factory=list)

    @property
    def _llm_type(self) -> str:
        return "done"

    def bind_tools(self, tools: Any, **kwargs: Any) -> DoneModel:
        return self

    def _generate(self, messages: list[BaseMessage], stop: Any = None, run_manager: Any = None,
                  **kwargs: Any) -> ChatResult:
        self.received.append(list(messages))
        return ChatResult(generations=[ChatGeneration(message=AIMessage("done", id="done"))])


class Probe(AgentMiddleware):
    """Outermost middleware: records the messages the agent hands the middleware stack."""

    def __init__(self) -> None:
        super().__init__()
        self.seen: list[list[BaseMessage]] = []

    def wrap_model_call(self, request, handler):
        self.seen.append(list(request.messages))
        return handler(request)

    async def awrap_model_call(self, request, handler):
        self.seen.append(list(request.messages))
        return await handler(request)


def run_agent(middleware: ContextPolicyMiddleware, messages: list[BaseMessage],
              use_async: bool) -> tuple[DoneModel, Probe, list[BaseMessage]]:
    model, probe = DoneModel(), Probe()
    agent = create_agent(model, [], system_prompt=SYSTEM, middleware=[probe, middleware],
                         checkpointer=InMemorySaver())
    config = {"configurable": {"thread_id": "t"}}
    if use_async:
        state = asyncio.run(agent.ainvoke({"messages": messages}, config))
    else:
        state = agent.invoke({"messages": messages}, config)
    return model, probe, state["messages"]


@pytest.mark.parametrize("use_async", [False, True], ids=["invoke", "ainvoke"])
@pytest.mark.parametrize("case", list(CASES))
def test_ephemeral_agent_sends_the_originals_and_the_changed_messages_whole(case, use_async):
    messages = history()
    before = [dump(m) for m in messages]
    middleware = ContextPolicyMiddleware(policy_of(case), handlers=handlers_of(case), cut="plain")
    model, probe, state = run_agent(middleware, messages, use_async)

    (sent,), (handed,) = model.received, probe.seen
    assert all(a is b for a, b in zip(handed, messages, strict=True))
    assert isinstance(sent[0], SystemMessage) and sent[0].content == SYSTEM
    check_sent(sent[1:], messages, expected(case, messages))
    # The state keeps every message as it was, and nothing given was changed.
    assert all(a is b for a, b in zip(state, messages)) and len(state) == len(messages) + 1
    assert [dump(m) for m in messages] == before
    step = middleware.last_report.steps[-1]
    assert (step.status, step.reason) == ("applied", "compressed")


@pytest.mark.parametrize("use_async", [False, True], ids=["invoke", "ainvoke"])
@pytest.mark.parametrize("case", list(CASES))
def test_persist_agent_writes_the_originals_and_the_changed_messages_whole(case, use_async):
    messages = history()
    before = [dump(m) for m in messages]
    middleware = ContextPolicyMiddleware(policy_of(case), handlers=handlers_of(case),
                                         mode="persist")
    model, probe, state = run_agent(middleware, messages, use_async)

    (sent,), (handed,) = model.received, probe.seen
    # The model is sent the state as the policy wrote it: the same objects.
    assert all(a is b for a, b in zip(sent[1:], handed, strict=True))
    assert all(a is b for a, b in zip(state, handed)) and len(state) == len(handed) + 1
    check_sent(handed, messages, expected(case, messages))
    assert [dump(m) for m in messages] == before


@pytest.mark.parametrize("case", list(CASES))
def test_the_langgraph_node_writes_the_originals_and_the_changed_messages_whole(case):
    messages = history()
    builder = StateGraph(MessagesState)
    builder.add_node("context", context_policy_node(policy_of(case),
                                                    handlers=handlers_of(case)))
    builder.add_edge(START, "context")
    builder.add_edge("context", END)
    graph = builder.compile()
    want = expected(case, messages)
    check_sent(graph.invoke({"messages": messages})["messages"], messages, want)
    check_sent(asyncio.run(graph.ainvoke({"messages": messages}))["messages"], messages, want)


def test_what_each_handler_changed_and_kept():
    """The figures behind the cases above, on the messages themselves."""
    messages = history()
    ids = {m.id: m for m in messages}

    def sent(case: str) -> dict[str, BaseMessage]:
        middleware = ContextPolicyMiddleware(policy_of(case), handlers=handlers_of(case),
                                             mode="persist")
        update = middleware.before_model({"messages": messages}, None)
        return {m.id: m for m in update["messages"][1:]}

    cleared = sent("clear")
    changed = sorted(k for k, m in cleared.items() if m is not ids[k])
    assert changed == ["f3", "t0", "t1", "t2"]  # every result but the newest (u4's block)
    assert cleared["t0"].artifact == {"rows": [0, 1]} and cleared["t0"].name == "lookup"
    assert cleared["t2"].status == "error" and cleared["f3"].name == "lookup"
    assert cleared["t0"].content == PLACEHOLDER.format(chars=len(ids["t0"].content))

    inputs = sent("clear-inputs")
    changed = sorted(k for k, m in inputs.items() if m is not ids[k])
    # The calls of cleared results lose their arguments: a0's listed call and a1's tool_use
    # block (its tool_calls entry with it); the invalid call of a2 and the legacy function_call
    # of a3 are left as they were.
    assert changed == ["a0", "a1", "f3", "t0", "t1", "t2"]
    assert inputs["a0"].tool_calls[0]["args"] == {}
    assert inputs["a0"].usage_metadata == ids["a0"].usage_metadata
    assert inputs["a0"].response_metadata == ids["a0"].response_metadata
    assert inputs["a1"].content[1]["input"] == {} and inputs["a1"].tool_calls[0]["args"] == {}
    assert inputs["a1"].content[0] == ids["a1"].content[0]
    assert inputs["a2"] is ids["a2"] and inputs["a3"] is ids["a3"]
    assert inputs["a3"].additional_kwargs["function_call"]["name"] == "lookup"

    cut = sent("truncate")
    changed = sorted(k for k, m in cut.items() if m is not ids[k])
    assert changed == ["a1", "f3", "h0", "h1", "h2", "h3", "h4", "r0", "t0", "t1", "t2", "u4"]
    # a1's text is cut, its tool_use block and its call are the original's.
    assert cut["a1"].content[1] == ids["a1"].content[1]
    assert cut["a1"].tool_calls == ids["a1"].tool_calls
    assert cut["h0"].name == "ann" and len(cut["h0"].content) < len(ids["h0"].content)

    for case in ("summarize", "clear-then-summarize"):
        summary = sent(case)
        assert list(summary) == [None, "h4", "a4", "u4", "r4", "q"]
        # The newest turn is the original objects; h4 is itself, not h1 (which reads the same).
        assert all(summary[k] is ids[k] for k in ("h4", "a4", "u4", "r4", "q"))

    trimmed = sent("trim-then-truncate")
    # The trim kept the two newest turns; h3, the first message left, was cut and is h3 still.
    assert list(trimmed) == [m.id for m in messages[12:]]
    assert trimmed["h3"] is not ids["h3"] and trimmed["h3"].content.startswith("question 3")
    assert trimmed["a3"] is ids["a3"] and trimmed["q"] is ids["q"]


def test_a_langchain_chat_model_summary_beside_the_original_newest_turn():
    messages = history()
    middleware = ContextPolicyMiddleware(policy_of("summarize"), handlers=registry(summarize(
        FakeListChatModel(responses=["what happened so far"]))), cut="plain")
    model, _, _ = run_agent(middleware, messages, use_async=False)
    sent = model.received[0][1:]
    assert isinstance(sent[0], HumanMessage) and sent[0].content.endswith("what happened so far")
    assert sent[0].id is None
    assert sent[0].additional_kwargs["metadata"]["contextpolicy"]["kind"] == "summary"
    assert all(a is b for a, b in zip(sent[1:], messages[16:], strict=True))


def edit(fn):
    """A policy whose compress step on history runs ``fn`` on each message dict it is given."""
    def handler(request):
        return [fn(dict(m)) for m in request.content]
    return {"e": handler}


EDIT_POLICY = {"mode": "reduce", "triggerChars": 1, "steps": [_step("c", "e")]}


def test_a_handler_that_rewrites_calls_keeps_them_what_they_are():
    messages = history()
    ids = {m.id: m for m in messages}

    def shorten(m):
        # Every listed call's arguments become a smaller JSON object, and a long text shorter.
        for call in m.get("tool_calls") or []:
            call["function"] = {**call["function"], "arguments": '{"q": "p"}'}
        if isinstance(m.get("content"), str) and len(m["content"]) > 100:
            m["content"] = m["content"][:50]
        return m

    middleware = ContextPolicyMiddleware(EDIT_POLICY, handlers=edit(shorten), mode="persist")
    out = {m.id: m for m in middleware.before_model({"messages": messages}, None)["messages"][1:]}
    assert out["a0"].tool_calls[0]["args"] == {"q": "p"}
    assert dump(out["a0"], "tool_calls") == dump(ids["a0"], "tool_calls")
    # The invalid call took the new text and stays invalid; nothing made it a valid call.
    assert out["a2"].tool_calls == []
    assert out["a2"].invalid_tool_calls == [{**ids["a2"].invalid_tool_calls[0],
                                             "args": '{"q": "p"}'}]
    assert dump(out["a2"], "invalid_tool_calls") == dump(ids["a2"], "invalid_tool_calls")
    assert out["t0"].artifact == {"rows": [0, 1]} and out["t0"].content == ids["t0"].content[:50]


def test_arguments_langchain_cannot_hold_are_a_clear_error():
    messages = history()

    def break_calls(m):
        for call in m.get("tool_calls") or []:
            call["function"] = {**call["function"], "arguments": "[1]"}
        return m

    middleware = ContextPolicyMiddleware(EDIT_POLICY, handlers=edit(break_calls))
    with pytest.raises(ContextPlanError) as exc:
        middleware.wrap_model_call(
            ModelRequest(model=DoneModel(), messages=messages,
                         system_message=SystemMessage(SYSTEM)),
            lambda r: ModelResponse(result=[]))
    issue = exc.value.issues[0]
    assert (issue.path, issue.code) == ("input[2]", "unsupported-message")
    assert "tool call arguments that are not a JSON object" in issue.message


def test_standard_tool_call_blocks_follow_their_cleared_call():
    # LangChain's v1 content holds a call as a "tool_call" block beside tool_calls: when the
    # handler empties the call's arguments, the block says the same.
    call = {"id": "c0", "name": "lookup", "args": {"q": "parcel 0 " * 8}}
    messages = [
        HumanMessage("question 0", id="h0"),
        AIMessage([{"type": "text", "text": "looking"}, {"type": "tool_call", **call}], id="a0",
                  tool_calls=[call], response_metadata=_meta(0)),
        ToolMessage("result 0: " + LONG, id="t0", tool_call_id="c0"),
        AIMessage("answer 0", id="r0"),
        HumanMessage("and now?", id="q"),
    ]
    middleware = ContextPolicyMiddleware(policy_of("clear-inputs"), handlers=registry(
        clear_tool_results(keep=0, clear_inputs=True)), mode="persist")
    a0 = middleware.before_model({"messages": messages}, None)["messages"][2]
    assert a0.id == "a0" and a0.tool_calls[0]["args"] == {} and a0.content[1]["args"] == {}
    assert a0.content[0] == messages[1].content[0]
    assert dump(a0, "content", "tool_calls") == dump(messages[1], "content", "tool_calls")
    assert messages[1].content[1]["args"] == call["args"]  # the original is untouched


# ---------------------------------------------------------------------------------------------
# Generated histories through generated policies.

TEXTS = ["yes", "the same again please", "question: " + LONG[:150], LONG]


@st.composite
def rich_histories(draw):
    """Turns of every kind of call, with metadata, repeated texts, and a final question."""
    out: list[BaseMessage] = []
    n = 0

    def uid(prefix: str) -> str:
        nonlocal n
        n += 1
        return f"{prefix}{n}"

    def extras() -> dict[str, Any]:
        kw: dict[str, Any] = {}
        if draw(st.booleans()):
            kw["response_metadata"] = _meta(n)
        if draw(st.booleans()):
            kw["additional_kwargs"] = {"trace": uid("x")}
        return kw

    for _ in range(draw(st.integers(1, 5))):
        out.append(HumanMessage(draw(st.sampled_from(TEXTS)), id=uid("h"), **extras()))
        kind = draw(st.sampled_from(["listed", "tool_use", "carrier", "invalid", "function",
                                     "none"]))
        result = draw(st.sampled_from(TEXTS))
        cid = uid("c")
        args = {"q": draw(st.sampled_from(TEXTS))}
        if kind == "listed":
            out.append(AIMessage("", id=uid("a"), tool_calls=[{"id": cid, "name": "lookup",
                                                               "args": args}],
                                 usage_metadata=_usage(n), **extras()))
            out.append(ToolMessage(result, id=uid("t"), tool_call_id=cid, name="lookup",
                                   artifact={"n": n}, status="success"))
        elif kind in ("tool_use", "carrier"):
            block = {"type": "tool_use", "id": cid, "name": "lookup", "input": args}
            text = [{"type": "text", "text": draw(st.sampled_from(TEXTS))}] if draw(
                st.booleans()) else []
            out.append(AIMessage([*text, block], id=uid("a"), tool_calls=[
                {"id": cid, "name": "lookup", "args": args}], **extras()))
            if kind == "tool_use":
                out.append(ToolMessage(result, id=uid("t"), tool_call_id=cid, artifact=[n]))
            else:
                out.append(HumanMessage([{"type": "tool_result", "tool_use_id": cid,
                                          "content": result}], id=uid("u")))
        elif kind == "invalid":
            out.append(AIMessage("", id=uid("a"), invalid_tool_calls=[{
                "type": "invalid_tool_call", "id": cid, "name": "lookup",
                "args": '{"q": "' + draw(st.sampled_from(TEXTS)), "error": "not JSON"}],
                **extras()))
            out.append(ToolMessage(result, id=uid("t"), tool_call_id=cid, status="error"))
        elif kind == "function":
            out.append(AIMessage("", id=uid("a"), additional_kwargs={"function_call": {
                "name": "lookup", "arguments": json.dumps(args)}}))
            out.append(FunctionMessage(result, id=uid("f"), name="lookup"))
        if draw(st.booleans()):
            out.append(AIMessage(draw(st.sampled_from(TEXTS)), id=uid("r"), **extras()))
    out.append(HumanMessage("and now?", id="q"))
    return out


@st.composite
def policies(draw):
    """A policy of compress steps on history, a trim among them or not, and its handlers: the
    summary, when there is one, is the last step."""
    steps: list[dict[str, Any]] = []
    handlers: list[Any] = []
    for kind in draw(st.lists(st.sampled_from(["clear", "truncate"]), max_size=2,
                              unique=True)):
        if kind == "clear":
            handlers.append(clear_tool_results(keep=draw(st.integers(0, 3)),
                                               clear_inputs=draw(st.booleans()),
                                               min_chars=draw(st.integers(0, 150))))
            steps.append(_step("clear", "clear-tool-results"))
        else:
            handlers.append(truncate_messages(max_chars=draw(st.integers(20, 300))))
            steps.append(_step("cut", "truncate-messages"))
    if draw(st.booleans()):
        steps.insert(draw(st.integers(0, len(steps))),
                     {**TRIM, "keepGroups": draw(st.integers(1, 4))})
    if draw(st.booleans()) or not handlers:
        handlers.append(summarize(_summary, min_target_chars=0))
        steps.append(_step("sum", "summarize", keepGroups=draw(st.integers(0, 2))))
    return {"mode": "reduce", "triggerChars": 1, "steps": steps}, registry(*handlers)


@settings(max_examples=80, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(rich_histories(), policies(), st.sampled_from(["ephemeral", "persist"]))
def test_any_history_through_any_handlers_keeps_what_they_did_not_change(messages, policy, mode):
    document, handlers = policy
    before = [dump(m) for m in messages]
    middleware = ContextPolicyMiddleware(document, handlers=handlers, mode=mode, cut="plain")
    if mode == "persist":
        update = middleware.before_model({"messages": messages}, None)
        sent = messages if update is None else update["messages"][1:]
    else:
        request = ModelRequest(model=DoneModel(), messages=messages,
                               system_message=SystemMessage(SYSTEM))
        seen: list[ModelRequest] = []
        middleware.wrap_model_call(request, lambda r: seen.append(r) or ModelResponse(result=[]))
        sent = list(seen[0].messages)
    want = process_context(ContextPlan.from_messages(to_chat_dicts(messages)), document,
                           handlers=handlers).input
    check_sent(sent, messages, want)
    assert [dump(m) for m in messages] == before


def test_content_whose_strs_lie_is_read_from_its_storage():
    # Types and ids whose equality and hash lie (LangChain keeps them in content parts): the
    # messages are traced and edited by what they hold, and nothing given changes.
    from tests.support.hostile_objects import LyingStr

    block = {"type": LyingStr("tool_use"), "id": LyingStr("tu1"), "name": "lookup",
             "input": {"q": "parcel 1 " * 8}}
    messages = [
        HumanMessage([{"type": LyingStr("text"), "text": "question 0"}], id="h0"),
        AIMessage([{"type": "text", "text": "looking"}, block], id="a1", tool_calls=[
            {"id": "tu1", "name": "lookup", "args": {"q": "parcel 1 " * 8}}]),
        ToolMessage("result 1: " + LONG, id="t1", tool_call_id="tu1"),
        AIMessage("answer 1", id="r1"),
        HumanMessage("and now?", id="q"),
    ]
    assert type(messages[1].content[1]["id"]) is LyingStr
    before = [dump(m) for m in messages]
    middleware = ContextPolicyMiddleware(policy_of("clear-inputs"), handlers=registry(
        clear_tool_results(keep=0, clear_inputs=True)), mode="persist")
    out = middleware.before_model({"messages": messages}, None)["messages"][1:]
    assert [m.id for m in out] == [m.id for m in messages]
    assert out[0] is messages[0] and out[3] is messages[3] and out[4] is messages[4]
    assert out[2].content == PLACEHOLDER.format(chars=len(messages[2].content))
    # The block's input is emptied (in a plain copy) and its call follows it.
    assert out[1].content[1] == {"type": "tool_use", "id": "tu1", "name": "lookup", "input": {}}
    assert type(out[1].content[1]["id"]) is str and out[1].tool_calls[0]["args"] == {}
    assert out[1].content[0] == messages[1].content[0]
    assert [dump(m) for m in messages] == before
    assert block["input"] == {"q": "parcel 1 " * 8}
