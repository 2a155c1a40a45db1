"""``context_policy_node``, the LangGraph node of ``contextpolicy.adapters.langchain``, inside
real graphs: its update, no update when nothing changed, its streamed events, cancellation with
its task, a cancel event and a custom messages key.
"""

from __future__ import annotations

import asyncio
import json
import threading
from typing import Annotated, Any

import pytest
from langchain_core.messages import HumanMessage
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.graph import END, START, MessagesState, StateGraph
from langgraph.graph.message import REMOVE_ALL_MESSAGES, add_messages
from typing_extensions import TypedDict

from contextpolicy import ContextCancelledError
from contextpolicy.adapters.langchain import context_policy_node
from tests.support.langchain_agents import chars, trim_policy, turns_of

pytestmark = [pytest.mark.extras, pytest.mark.usefixtures("pipeline_kernel")]


@pytest.fixture(autouse=True)
def _no_tracing(monkeypatch: pytest.MonkeyPatch) -> None:
    """No LangSmith tracing (a network call) whatever the environment says."""
    for name in ("LANGSMITH_TRACING", "LANGCHAIN_TRACING_V2", "LANGCHAIN_TRACING"):
        monkeypatch.delenv(name, raising=False)


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
