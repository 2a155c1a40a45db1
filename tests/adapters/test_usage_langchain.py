"""LangChain feeds a usage-anchored counter from each model call's ``usage_metadata``.

The fake chat model reports, with every answer, the input tokens its own "tokenizer" counts of
what it was sent: 3 per message plus the words of each text (tool calls and the tools' schemas
included), plus ``HIDDEN`` tokens of framing no local counter sees. The figures of the next call
are held to that report plus the framed words of the messages added since.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest
from langchain.agents import create_agent
from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage
from langchain_core.outputs import ChatGeneration, ChatResult
from langchain_core.tools import tool
from langchain_core.utils.function_calling import convert_to_openai_tool
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.graph import END, START, MessagesState, StateGraph
from pydantic import Field

from contextpolicy.adapters.langchain import (
    ContextPolicyMiddleware,
    context_policy_node,
    to_chat_dicts,
)
from contextpolicy.counters import usage_anchored
from tests.support.usage_replay import FramedCounter

pytestmark = [pytest.mark.extras, pytest.mark.usefixtures("pipeline_kernel")]

SYSTEM = "You are a terse support agent."
HIDDEN = 11  # the provider's own framing of a request


@pytest.fixture(autouse=True)
def _no_tracing(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("LANGSMITH_TRACING", "LANGCHAIN_TRACING_V2", "LANGCHAIN_TRACING"):
        monkeypatch.delenv(name, raising=False)


@tool
def lookup(q: str) -> str:
    """Look up a parcel."""
    return "parcel status: in transit. " * 4


def framed(dicts: list[dict]) -> int:
    """3 tokens a message, plus the words of its texts and tool calls."""
    total = 0
    for m in dicts:
        content = m.get("content")
        texts = [content] if isinstance(content, str) else [
            p["text"] for p in content or [] if isinstance(p, dict) and p.get("type") == "text"]
        texts += [c["function"]["name"] + c["function"]["arguments"]
                  for c in m.get("tool_calls", [])]
        total += 3 + sum(len(t.split()) for t in texts)
    return total


def local_words() -> FramedCounter:
    """The local counter: ``framed``, the provider's tokenizer without its overhead."""
    return FramedCounter(framed)


def provider_words() -> FramedCounter:
    """The provider's own count: ``framed`` plus ``HIDDEN``."""
    return FramedCounter(framed, HIDDEN)


TOOLS = {"role": "system", "content": json.dumps(
    [convert_to_openai_tool(lookup)], ensure_ascii=False, separators=(",", ":"))}


def provider_count(messages: list[BaseMessage]) -> int:
    """What the provider reports for a request of ``messages`` with the ``lookup`` tool."""
    dicts = to_chat_dicts(messages)
    return framed([*dicts[:1], TOOLS, *dicts[1:]]) + HIDDEN


class ReportingModel(BaseChatModel):
    """A question gets a tool call, a tool result an answer; each answer reports usage."""

    received: list[list[BaseMessage]] = Field(default_factory=list)
    reported: list[int] = Field(default_factory=list)

    @property
    def _llm_type(self) -> str:
        return "reporting"

    def bind_tools(self, tools: Any, **kwargs: Any) -> ReportingModel:
        return self

    def _generate(self, messages: list[BaseMessage], stop: Any = None, run_manager: Any = None,
                  **kwargs: Any) -> ChatResult:
        self.received.append(list(messages))
        self.reported.append(provider_count(messages))
        n, last = len(self.received), messages[-1]
        usage = {"input_tokens": self.reported[-1], "output_tokens": 2,
                 "total_tokens": self.reported[-1] + 2}
        if isinstance(last, HumanMessage):
            reply = AIMessage(content="", id=f"ai-{n}", usage_metadata=usage, tool_calls=[
                {"id": f"call-{n}", "name": "lookup", "args": {"q": str(last.content)}}])
        else:
            reply = AIMessage(content=f"answer {n} from the depot", id=f"ai-{n}",
                              usage_metadata=usage)
        return ChatResult(generations=[ChatGeneration(message=reply)])


def policy(trigger: int = 10**6) -> dict:
    return {"mode": "reduce", "triggerTokens": trigger, "steps": [{
        "id": "trim", "kind": "trim", "fragmentId": "history", "keepGroups": 1,
        "targetChars": 0, "grouping": {"kind": "user-turn"}}]}


def ask(agent: Any, turns: int, use_async: bool = False, thread: str = "t") -> None:
    config = {"configurable": {"thread_id": thread}}
    for i in range(turns):
        state = {"messages": [HumanMessage(f"where is parcel {i} now", id=f"{thread}-h{i}")]}
        if use_async:
            asyncio.run(agent.ainvoke(state, config))
        else:
            agent.invoke(state, config)


def run_agent(counter: Any, turns: int = 2, use_async: bool = False, **kwargs: Any,
              ) -> tuple[ReportingModel, list[Any]]:
    model, reports = ReportingModel(), []
    middleware = ContextPolicyMiddleware(kwargs.pop("policy", policy()), counter=counter,
                                         on_report=reports.append, **kwargs)
    agent = create_agent(model, [lookup], system_prompt=SYSTEM, middleware=[middleware],
                         checkpointer=InMemorySaver())
    ask(agent, turns, use_async)
    return model, reports


@pytest.mark.parametrize("use_async", [False, True], ids=["invoke", "ainvoke"])
@pytest.mark.parametrize("cut", ["stable", "plain"])
def test_ephemeral_counts_each_call_from_the_previous_report(use_async, cut):
    model, reports = run_agent(usage_anchored(local_words()), use_async=use_async, cut=cut)
    assert len(reports) == len(model.reported) == 4
    first = reports[0].before
    assert first.tokens_reported is None and first.tokens == model.reported[0] - HIDDEN
    for k in range(1, 4):
        before, added = reports[k].before, model.received[k][len(model.received[k - 1]):]
        assert before.tokens_reported == model.reported[k - 1]
        assert before.tokens == model.reported[k - 1] + framed(to_chat_dicts(added))
        assert before.tokens == model.reported[k] and before.tokens_exact is True


def test_a_counter_that_is_not_anchored_records_nothing():
    model, reports = run_agent(local_words())
    assert [r.before.tokens_reported for r in reports] == [None] * 4
    assert [r.before.tokens for r in reports] == [c - HIDDEN for c in model.reported]
    assert ContextPolicyMiddleware(policy(), counter=local_words())._usage is None


def test_persist_records_the_answer_that_follows_the_persisted_state():
    counter = usage_anchored(local_words())
    model, reports = run_agent(counter, mode="persist")
    assert reports[0].before.tokens_reported is None
    for k in range(1, 4):
        # The state holds no system prompt and no tools: the report covers them.
        added = model.received[k][len(model.received[k - 1]):]
        assert reports[k].before.tokens_reported == model.reported[k - 1]
        assert reports[k].before.tokens == model.reported[k - 1] + framed(to_chat_dicts(added))
    # Another thread's state starts with none of these inputs: counted locally.
    assert counter.count_input([{"role": "user", "content": "hi"}]).reported is None


def test_the_node_records_the_answer_that_follows_the_state_it_left():
    model, reports = ReportingModel(), []

    def call_model(state: MessagesState) -> dict:
        return {"messages": [model.invoke([("system", SYSTEM), *state["messages"]])]}

    graph = StateGraph(MessagesState)
    graph.add_node("policy", context_policy_node(
        policy(), counter=usage_anchored(local_words()), on_report=reports.append))
    graph.add_node("model", call_model)
    graph.add_edge(START, "policy")
    graph.add_edge("policy", "model")
    graph.add_edge("model", END)
    ask(graph.compile(checkpointer=InMemorySaver()), 3)
    assert reports[0].before.tokens_reported is None
    for k in (1, 2):
        added = model.received[k][len(model.received[k - 1]):]
        assert reports[k].before.tokens_reported == model.reported[k - 1]
        assert reports[k].before.tokens == model.reported[k - 1] + framed(to_chat_dicts(added))


def words(text: str) -> int:
    return len(text.split())


def first_fired(reports: list[Any]) -> int | None:
    return next((k for k, r in enumerate(reports) if r.triggered), None)


def test_a_token_trigger_fires_where_the_providers_count_passes_it():
    model, _ = run_agent(provider_words())  # the provider's own count of each call
    counts = model.reported
    assert len(counts) == 4 and counts[1] + 2 < counts[2]
    trigger = counts[1] + 1
    expected = next(k for k, c in enumerate(counts) if c > trigger)
    assert expected == 2
    fired = {name: first_fired(run_agent(counter, policy=policy(trigger))[1]) for name, counter
             in [("exact", provider_words()), ("anchored", usage_anchored(words)), ("local", words)]}
    assert fired["exact"] == fired["anchored"] == expected
    assert fired["local"] != expected  # words alone miss the framing: later, if ever
