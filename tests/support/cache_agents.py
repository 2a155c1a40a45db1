"""The 60-turn tool agent of the prompt-cache figures, in LangChain's ``create_agent`` and in
the OpenAI Agents SDK: each turn a question, a tool call, a ~3,000-char tool result and an
answer; every model call's input recorded and priced as a prompt cache bills it."""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from contextpolicy.replay import Prices, ReplayRow, price_calls

TURNS = 60
SYSTEM = "You are a research agent. Use the search tool, then answer in one paragraph."
TRIGGER, TARGET = 60_000, 30_000
# The policy of the figures: trim the history by user turn to 30,000 chars above 60,000.
TRIM_POLICY = {"mode": "reduce", "triggerChars": TRIGGER, "targetInputChars": TARGET, "steps": [
    {"id": "recent-turns", "kind": "trim", "fragmentId": "history", "targetChars": TARGET,
     "keepGroups": 1, "grouping": {"kind": "user-turn"}}]}


def tool_text(question: str) -> str:
    """The search tool's result for a question: ~3,000 chars, the same for the same question."""
    rnd = random.Random(question)
    words = ["parcel", "depot", "route", "scan", "customs", "delay", "carrier", "hub"]
    out = f"results for {question}: "
    target = rnd.randint(2_700, 3_300)
    while len(out) < target:
        out += rnd.choice(words) + f" {rnd.randint(0, 999)}; "
    return out


def question(i: int) -> str:
    return f"question {i}: where is shipment {i * 7919 % 10_000} and why is it late?"


@dataclass
class Run:
    """What an agent sent its model at every call, and the history it kept."""

    inputs: list[list[dict[str, Any]]]  # each call's input as chat dicts, system first
    state: int  # messages the agent's history holds at the end

    def priced(self, name: str, prices: Prices | None = None) -> ReplayRow:
        return price_calls(self.inputs, prices=prices, policy=name)


# ---------------------------------------------------------------------------------------------
# LangChain

def langchain_run(middleware: list[Any], turns: int = TURNS) -> Run:
    """The agent with ``middleware`` (outermost first), ``turns`` questions in one thread."""
    from langchain.agents import create_agent
    from langchain_core.language_models.chat_models import BaseChatModel
    from langchain_core.messages import AIMessage, BaseMessage, HumanMessage
    from langchain_core.outputs import ChatGeneration, ChatResult
    from langchain_core.tools import tool
    from langgraph.checkpoint.memory import InMemorySaver
    from pydantic import Field

    from contextpolicy.adapters.langchain import to_chat_dicts

    class Model(BaseChatModel):
        received: list[list[BaseMessage]] = Field(default_factory=list)

        @property
        def _llm_type(self) -> str:
            return "scripted"

        def bind_tools(self, tools: Any, **kwargs: Any) -> Model:
            return self

        def _generate(self, messages: list[BaseMessage], stop: Any = None,
                      run_manager: Any = None, **kwargs: Any) -> ChatResult:
            self.received.append(list(messages))
            n = len(self.received)
            last = messages[-1]
            if isinstance(last, HumanMessage):
                reply = AIMessage(content="", id=f"ai-{n}", tool_calls=[
                    {"id": f"call-{n}", "name": "search", "args": {"q": str(last.content)}}])
            else:
                rnd = random.Random(n)
                reply = AIMessage(content="answer: " + "the shipment is at the hub. " *
                                  rnd.randint(8, 20), id=f"ai-{n}")
            return ChatResult(generations=[ChatGeneration(message=reply)])

    @tool
    def search(q: str) -> str:
        """Search the shipment records."""
        return tool_text(q)

    model = Model()
    agent = create_agent(model, [search], system_prompt=SYSTEM, middleware=middleware,
                         checkpointer=InMemorySaver())
    config = {"configurable": {"thread_id": "t"}}
    out: dict[str, Any] = {}
    for i in range(turns):
        out = agent.invoke({"messages": [HumanMessage(question(i), id=f"h{i}")]}, config)
    return Run([to_chat_dicts(m) for m in model.received], len(out["messages"]))


def langchain_trim_messages() -> Any:
    """LangChain's ``trim_messages`` to the policy's target on every call (chars counted as
    tokens, so the target is the same), as a model-call middleware."""
    from langchain.agents.middleware import AgentMiddleware
    from langchain_core.messages import trim_messages

    def chars(messages: list[Any]) -> int:
        return sum(len(str(m.content)) for m in messages)

    class Trim(AgentMiddleware):  # type: ignore[type-arg]
        def wrap_model_call(self, request: Any, handler: Callable[[Any], Any]) -> Any:
            if chars(request.messages) <= TRIGGER:
                return handler(request)
            kept = trim_messages(request.messages, max_tokens=TARGET, token_counter=chars,
                                 strategy="last", start_on="human")
            return handler(request.override(messages=kept))

    return Trim()


def langchain_summarization() -> Any:
    """LangChain's ``SummarizationMiddleware`` at the policy's trigger and target (chars
    counted as tokens), with a summariser that answers at once."""
    from langchain.agents.middleware import SummarizationMiddleware
    from langchain_core.language_models.fake_chat_models import FakeListChatModel

    def chars(messages: Any) -> int:
        return sum(len(str(getattr(m, "content", m))) for m in messages)

    summariser = FakeListChatModel(responses=["Shipments asked about so far: all at the hub."])
    return SummarizationMiddleware(summariser, trigger=("tokens", TRIGGER),
                                   keep=("tokens", TARGET), token_counter=chars)


# ---------------------------------------------------------------------------------------------
# The OpenAI Agents SDK

def openai_agents_run(input_filter: Any, turns: int = TURNS) -> Run:
    """The same agent in the OpenAI Agents SDK, ``input_filter`` its ``call_model_input_filter``
    (``None``: none); the history carried from turn to turn as ``to_input_list()``."""
    from agents import Agent, ModelResponse, RunConfig, Runner, Usage, function_tool
    from agents.models.interface import Model
    from openai.types.responses import (
        ResponseFunctionToolCall,
        ResponseOutputMessage,
        ResponseOutputText,
    )

    received: list[list[dict[str, Any]]] = []

    class Scripted(Model):  # type: ignore[misc]
        async def get_response(self, system_instructions: Any, input: Any, *args: Any,
                               **kwargs: Any) -> Any:
            items = [i if isinstance(i, dict) else i.model_dump(exclude_unset=True)
                     for i in input]
            received.append([{"role": "system", "content": system_instructions}, *items])
            n = len(received)
            last = items[-1]
            if last.get("role") == "user":
                output: Any = ResponseFunctionToolCall(
                    type="function_call", call_id=f"call-{n}", name="search",
                    arguments=f'{{"q": "{last["content"]}"}}', id=f"fc-{n}")
            else:
                rnd = random.Random(n)
                output = ResponseOutputMessage(
                    type="message", role="assistant", id=f"msg-{n}", status="completed",
                    content=[ResponseOutputText(
                        type="output_text", annotations=[],
                        text="answer: " + "the shipment is at the hub. " * rnd.randint(8, 20))])
            return ModelResponse(output=[output], usage=Usage(), response_id=None)

        def stream_response(self, *args: Any, **kwargs: Any) -> Any:
            raise NotImplementedError

    @function_tool
    def search(q: str) -> str:
        """Search the shipment records."""
        return tool_text(q)

    agent = Agent(name="research", instructions=SYSTEM, model=Scripted(), tools=[search])
    config = RunConfig(call_model_input_filter=input_filter, tracing_disabled=True)
    history: list[Any] = []
    for i in range(turns):
        result = Runner.run_sync(agent, [*history, {"role": "user", "content": question(i)}],
                                 run_config=config)
        history = result.to_input_list()
    return Run(received, len(history))
