"""What the LangChain adapter's suites share: a scripted chat model, a word counter, a trim
policy, one ephemeral model call through the middleware, conversations of tool turns (OpenAI
tool calls and Anthropic blocks) and the checks of tool calls and their results.

The model is a scripted fake (no network): it records the messages it is sent and answers a
question with a tool call and a tool result with text. This module imports LangChain: only the
extras' modules (``pytest -m extras``) import it.
"""

from __future__ import annotations

from typing import Any

from langchain.agents.middleware import ModelRequest, ModelResponse
from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, SystemMessage, ToolMessage
from langchain_core.outputs import ChatGeneration, ChatResult
from pydantic import Field

from contextpolicy import check_input_budget
from contextpolicy.adapters.langchain import ContextPolicyMiddleware, to_chat_dicts

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


class Words:
    name = "words"
    exact = True

    def count_text(self, text: str) -> int:
        return len(text.split())


def trim_policy(trigger: int = 1, target: int = 0, keep: int = 1, grouping: str = "user-turn",
                fragment: str = "history") -> dict:
    return {"mode": "reduce", "triggerChars": trigger, "steps": [{
        "id": "trim", "kind": "trim", "fragmentId": fragment, "keepGroups": keep,
        "targetChars": target, "grouping": {"kind": grouping}}]}


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


def is_subsequence(kept: list[Any], of: list[Any]) -> bool:
    """``kept`` are objects of ``of`` (identity), in its order."""
    it = iter(of)
    return all(any(k is o for o in it) for k in kept)


def chars(messages: list[BaseMessage]) -> int:
    return check_input_budget(to_chat_dicts(messages)).chars


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
