"""``clear_tool_results`` beside LangChain's ``ClearToolUsesEdit``, on the same chat history.

Both run as LangChain middleware on one ``ModelRequest`` (ours through
``ContextPolicyMiddleware`` with a compress step, theirs through ``ContextEditingMiddleware``),
and the messages each hands the model are compared. Where the two mean the same thing (every
result longer than the placeholder and answering a call an earlier AI message made, both
triggered, no ``clear_at_least``) they clear the same results for the same ``keep`` (with
``exclude_tools`` and ``clear_tool_inputs`` too). Where they differ, a test says how:

- a result shorter than the placeholder, or under ``min_chars``: LangChain replaces it (the
  message may grow); ours leaves it (a step never makes a result larger);
- a result no earlier AI message called (an orphan): LangChain leaves it; ours clears it (its
  pairing warning stays), unless tools are excluded and it cannot be named;
- Anthropic ``tool_result`` blocks in a human message: LangChain clears only ``ToolMessage``;
  ours clears the blocks too;
- a result cleared before: LangChain knows it by its ``response_metadata``, ours by the
  placeholder's text (so a result holding the placeholder already is never cleared again);
- ``trigger`` and ``clear_at_least`` (tokens): ours has the policy's trigger and the step's
  ``targetChars`` instead, and clears every result it may in one step;
- the placeholder: LangChain's is fixed text (``[cleared]``); ours says how many chars were
  cleared (``{chars}``) unless given fixed text.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from langchain.agents.middleware import (
    ClearToolUsesEdit,
    ContextEditingMiddleware,
    ModelRequest,
    ModelResponse,
)
from langchain_core.language_models import BaseChatModel
from langchain_core.language_models.fake_chat_models import FakeListChatModel
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, ToolMessage
from langchain_core.outputs import ChatGeneration, ChatResult
from pydantic import Field

from contextpolicy import ContextPlan, aprocess_context, process_context
from contextpolicy.adapters.langchain import ContextPolicyMiddleware, to_chat_dicts
from contextpolicy.handlers import (
    AsyncSummarize,
    Summarize,
    clear_tool_results,
    is_summary,
    registry,
    render_transcript,
    summarize,
)

pytestmark = [pytest.mark.extras, pytest.mark.usefixtures("pipeline_kernel")]

PLACEHOLDER = "[cleared]"
TOOLS = ("search", "lookup", "memory")


@pytest.fixture(autouse=True)
def _no_tracing(monkeypatch: pytest.MonkeyPatch) -> None:
    """No LangSmith tracing (a network call) whatever the environment says."""
    for name in ("LANGSMITH_TRACING", "LANGCHAIN_TRACING_V2", "LANGCHAIN_TRACING"):
        monkeypatch.delenv(name, raising=False)


class SilentModel(BaseChatModel):
    """A model the middlewares never call here (the handler below stands in for it)."""

    @property
    def _llm_type(self) -> str:
        return "silent"

    def _generate(self, messages: list[BaseMessage], stop: Any = None, run_manager: Any = None,
                  **kwargs: Any) -> ChatResult:
        return ChatResult(generations=[ChatGeneration(message=AIMessage("unused"))])


def history(turns: int = 6) -> list[BaseMessage]:
    """Turns of one to three tool calls each, results of distinct lengths (every one longer
    than any placeholder), every other result naming its tool, and a final question."""
    out: list[BaseMessage] = []
    k = 0
    for i in range(turns):
        calls = []
        for _ in range(1 + i % 3):
            calls.append((f"call_{k}", TOOLS[k % 3], f"output {k} " + "data " * (30 + 9 * k)))
            k += 1
        out.append(HumanMessage(f"question {i}"))
        out.append(AIMessage("", tool_calls=[
            {"id": cid, "name": tool, "args": {"q": i, "filter": "recent " * 4}}
            for cid, tool, _ in calls]))
        out += [ToolMessage(text, tool_call_id=cid, **({"name": tool} if j % 2 else {}))
                for j, (cid, tool, text) in enumerate(calls)]
        out.append(AIMessage(f"answer {i}"))
    out.append(HumanMessage("and now?"))
    return out


POLICY = {"mode": "reduce", "triggerChars": 1, "steps": [
    {"id": "clear", "kind": "compress", "fragmentId": "history",
     "handlerId": "clear-tool-results", "targetChars": 0}]}


def sent_by(middleware: Any, messages: list[BaseMessage]) -> list[BaseMessage]:
    """The messages ``middleware`` hands the model for a request holding ``messages``."""
    sent: list[ModelRequest] = []
    middleware.wrap_model_call(ModelRequest(model=SilentModel(), messages=list(messages)),
                               lambda r: sent.append(r) or ModelResponse(result=[]))
    return list(sent[0].messages)


def theirs(messages: list[BaseMessage], **edit: Any) -> list[BaseMessage]:
    edit.setdefault("placeholder", PLACEHOLDER)
    return sent_by(ContextEditingMiddleware(edits=[ClearToolUsesEdit(trigger=0, **edit)]),
                   messages)


def ours(messages: list[BaseMessage], **params: Any) -> list[BaseMessage]:
    params.setdefault("placeholder", PLACEHOLDER)
    params.setdefault("min_chars", 0)
    return sent_by(ContextPolicyMiddleware(POLICY, handlers=registry(clear_tool_results(
        **params))), messages)


def cleared(sent: list[BaseMessage]) -> list[str]:
    return [m.tool_call_id for m in sent if isinstance(m, ToolMessage)
            and m.content == PLACEHOLDER]


@pytest.mark.parametrize("keep", [0, 1, 2, 3, 5, 11, 12, 30])
def test_the_same_results_cleared_for_the_same_keep(keep):
    messages = history()
    assert len([m for m in messages if isinstance(m, ToolMessage)]) == 12
    a, b = theirs(messages, keep=keep), ours(messages, keep=keep)
    assert cleared(a) == cleared(b)
    assert len(cleared(a)) == max(0, 12 - keep)
    # And nothing else differs: the same messages, the same ids, in the same order.
    assert to_chat_dicts(a) == to_chat_dicts(b)


@pytest.mark.parametrize("keep", [0, 2, 4])
@pytest.mark.parametrize("exclude", [("memory",), ("memory", "search"), ("nothing",)])
def test_excluded_tools_coincide_and_count_among_the_kept(keep, exclude):
    messages = history()
    a, b = theirs(messages, keep=keep, exclude_tools=exclude), ours(
        messages, keep=keep, exclude_tools=exclude)
    assert cleared(a) == cleared(b)
    assert to_chat_dicts(a) == to_chat_dicts(b)
    tool = {c["id"]: c["name"] for m in messages if isinstance(m, AIMessage)
            for c in m.tool_calls}
    assert cleared(b) and not {tool[cid] for cid in cleared(b)} & set(exclude)
    results = [m.tool_call_id for m in messages if isinstance(m, ToolMessage)]
    assert cleared(b) == [cid for cid in results[:len(results) - keep]
                          if tool[cid] not in exclude]


@pytest.mark.parametrize("keep", [0, 3])
def test_cleared_tool_inputs_coincide(keep):
    messages = history()
    a = theirs(messages, keep=keep, clear_tool_inputs=True)
    b = ours(messages, keep=keep, clear_inputs=True)
    assert cleared(a) == cleared(b)
    # LangChain empties args to {}; the chat dicts of both send "{}" for those calls.
    assert to_chat_dicts(a) == to_chat_dicts(b)
    calls = {c["id"]: c["args"] for m in b if isinstance(m, AIMessage) for c in m.tool_calls}
    assert {cid for cid, args in calls.items() if args == {}} == set(cleared(b))


# ---------------------------------------------------------------------------------------------
# Where the two differ


def test_a_result_shorter_than_the_placeholder_is_replaced_by_theirs_only():
    messages = history(2)
    messages[2] = ToolMessage("ok", tool_call_id=messages[2].tool_call_id)
    a, b = theirs(messages, keep=0), ours(messages, keep=0)
    assert a[2].content == PLACEHOLDER  # "ok" (2 chars) became "[cleared]" (9)
    assert b[2].content == "ok"
    assert cleared(a) == [messages[2].tool_call_id, *cleared(b)]


def test_an_orphan_result_is_cleared_by_ours_only():
    messages = history(2)
    messages.insert(2, ToolMessage("stray " * 40, tool_call_id="nobody-called-this"))
    a, b = theirs(messages, keep=0), ours(messages, keep=0)
    assert "nobody-called-this" not in cleared(a)
    assert "nobody-called-this" in cleared(b)
    assert set(cleared(b)) - set(cleared(a)) == {"nobody-called-this"}
    # With tools excluded, a result whose tool cannot be named is left alone.
    assert "nobody-called-this" not in cleared(ours(messages, keep=0, exclude_tools=("x",)))


def test_anthropic_result_blocks_are_cleared_by_ours_only():
    call = {"type": "tool_use", "id": "toolu_1", "name": "search", "input": {"q": "x"}}
    messages: list[BaseMessage] = [
        HumanMessage("question"),
        AIMessage(content=[call], tool_calls=[{"id": "toolu_1", "name": "search",
                                               "args": {"q": "x"}}]),
        HumanMessage(content=[{"type": "tool_result", "tool_use_id": "toolu_1",
                               "content": "found " * 50}]),
        AIMessage("answer"),
        HumanMessage("and now?"),
    ]
    a, b = theirs(messages, keep=0), ours(messages, keep=0)
    assert a[2].content == messages[2].content
    assert b[2].content == [{"type": "tool_result", "tool_use_id": "toolu_1",
                             "content": PLACEHOLDER}]


def test_a_result_cleared_before_is_known_by_its_text_here():
    messages = theirs(history(), keep=4)  # LangChain's output, marked in response_metadata
    marked = [m for m in messages if isinstance(m, ToolMessage)
              and m.response_metadata.get("context_editing", {}).get("cleared")]
    assert len(marked) == 8
    # Ours reads the same placeholder as cleared: nothing is cleared twice or counted again.
    again = ours(messages, keep=4)
    assert to_chat_dicts(again) == to_chat_dicts(messages)


def test_the_default_placeholders_differ():
    messages = history(2)
    a = theirs(messages, keep=0, placeholder="[cleared]")
    b = sent_by(ContextPolicyMiddleware(POLICY, handlers=registry(clear_tool_results(keep=0))),
                messages)
    tool_a = [m.content for m in a if isinstance(m, ToolMessage)]
    tool_b = [m.content for m in b if isinstance(m, ToolMessage)]
    assert tool_a == ["[cleared]"] * 3
    assert tool_b == [f"[tool result cleared: {len(m.content)} chars]" for m in messages
                      if isinstance(m, ToolMessage)]


# ---------------------------------------------------------------------------------------------
# summarize with a LangChain chat model


class RecordingModel(FakeListChatModel):
    """LangChain's fake chat model, recording the prompts it is sent."""

    prompts: list[Any] = Field(default_factory=list)

    def _call(self, messages: list[BaseMessage], *args: Any, **kwargs: Any) -> str:
        self.prompts.append([m.content for m in messages])
        return super()._call(messages, *args, **kwargs)


SUMMARY_POLICY = {"mode": "reduce", "triggerChars": 1, "steps": [
    {"id": "summary", "kind": "compress", "fragmentId": "history", "handlerId": "summarize",
     "keepGroups": 2, "targetChars": 1500}]}


def test_a_langchain_chat_model_summarises_sync_and_async():
    messages = to_chat_dicts(history()[:-1])
    plan = ContextPlan.from_messages([*messages, {"role": "user", "content": "and now?"}])
    model = RecordingModel(responses=["Parcels 0-3 were looked up.", "Async summary."])
    handler = summarize(model)
    assert type(handler) is Summarize
    result = process_context(plan, SUMMARY_POLICY, handlers=registry(handler))
    first = result.plan.fragment("history").messages[0]
    assert first["content"] == "Summary of the earlier conversation:\nParcels 0-3 were looked up."
    assert is_summary(first)
    (prompt,) = model.prompts[0]
    older = plan.fragment("history").messages[:len(plan.fragment("history").messages)
                                               - len(result.plan.fragment("history").messages)
                                               + 1]
    assert prompt.endswith(render_transcript(older))
    aio = summarize(model, use_async=True)
    assert type(aio) is AsyncSummarize
    result = asyncio.run(aprocess_context(plan, SUMMARY_POLICY, handlers=registry(aio)))
    assert result.plan.fragment("history").messages[0]["content"].endswith("\nAsync summary.")


def test_the_summary_reaches_a_langchain_model_marked():
    middleware = ContextPolicyMiddleware(SUMMARY_POLICY, handlers=registry(summarize(
        FakeListChatModel(responses=["what happened so far"]))))
    sent = sent_by(middleware, history())
    summary = sent[0]
    assert isinstance(summary, HumanMessage)
    assert summary.content == "Summary of the earlier conversation:\nwhat happened so far"
    assert summary.additional_kwargs["metadata"]["contextpolicy"]["kind"] == "summary"
    # Whole groups: every tool message the model receives has its call before it.
    called = set()
    for m in sent:
        if isinstance(m, AIMessage):
            called |= {c["id"] for c in m.tool_calls}
        if isinstance(m, ToolMessage):
            assert m.tool_call_id in called
