"""LangChain messages as the plain chat dicts the core measures, one dict per message, and
the plan they make (:func:`split_messages`, the fragments of ``_agent``).

:func:`chat_dict` is a one-to-one view, not a re-encoding: ``content`` is the message's own
object (a str or its list of parts, Anthropic ``tool_use``/``tool_result`` blocks included, never
joined, split or copied), so a dict the policy kept maps back to the message it came from by
identity, and what is measured is what the model is sent. LangChain's own
``convert_to_openai_messages`` is not: it joins text blocks with newlines (changing the
characters), turns ``tool_use`` blocks into ``tool_calls`` and splits a message carrying
several ``tool_result`` blocks into several tool messages.

Tool calls read as LangChain's OpenAI encoding writes them: ``tool_calls[].args`` as
``json.dumps(args, ensure_ascii=False)``, invalid tool calls with their raw ``args`` string (the
agent answers those too). A call already present as a ``tool_use`` block of the content is not
listed again, so it is counted once.

:class:`Split` maps the dicts of a result's input back to the messages they came from, by
identity; a dict a compress handler wrote becomes a new LangChain message.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from langchain_core.messages import (
    AIMessage,
    BaseMessage,
    ChatMessage,
    FunctionMessage,
    HumanMessage,
    SystemMessage,
    ToolMessage,
    convert_to_messages,
)

from .._tables import TOOL_USE_PART
from ..errors import ContextPlanError
from ..plan import ContextPlan
from ..report import ContextResult
from ._agent import agent_plan

__all__ = ["Split", "as_messages", "chat_dict", "chat_dicts", "from_chat_dict", "split_messages"]

# ChatMessage roles LangChain writes in its own vocabulary.
_CHAT_ROLES = {"human": "user", "ai": "assistant"}


def chat_dict(message: BaseMessage) -> dict[str, Any]:
    """The chat dict of one LangChain message (a new dict; ``content`` is the message's own)."""
    out: dict[str, Any] = {"role": _role(message), "content": message.content}
    if message.name is not None:
        out["name"] = message.name
    if isinstance(message, AIMessage):
        calls = _tool_calls(message)
        if calls:
            out["tool_calls"] = calls
    elif isinstance(message, ToolMessage):
        out["tool_call_id"] = message.tool_call_id
    return out


def chat_dicts(messages: Sequence[Any], path: str = "messages") -> list[dict[str, Any]]:
    """:func:`chat_dict` of each message; anything that is not a LangChain message is a
    :class:`ContextPlanError` naming its index under ``path``."""
    out: list[dict[str, Any]] = []
    for i, message in enumerate(messages):
        if not isinstance(message, BaseMessage):
            raise ContextPlanError(
                f"expected a LangChain message (BaseMessage), got {type(message).__name__}",
                path=f"{path}[{i}]", code="invalid-message",
            )
        out.append(chat_dict(message))
    return out


def from_chat_dict(message: Mapping[str, Any], index: int) -> BaseMessage:
    """A LangChain message from a chat dict a compress handler wrote (OpenAI chat shape), at
    ``index`` of the model input; one LangChain cannot read is a :class:`ContextPlanError`."""
    values = dict(message)
    if values.get("content") is None:  # OpenAI writes null content beside tool calls
        values["content"] = ""
    try:
        return convert_to_messages([values])[0]
    except (ValueError, TypeError, NotImplementedError) as exc:
        raise ContextPlanError(
            f"a compress handler wrote a message LangChain cannot read: {exc}".split("\n")[0],
            path=f"input[{index}]", code="unsupported-message",
        ) from exc


def as_messages(messages: Iterable[Any]) -> list[BaseMessage]:
    """Messages in any form LangChain accepts (messages, chat dicts, ``(role, text)`` pairs,
    strings), as LangChain messages; LangChain messages are kept as they are."""
    items = list(messages)
    if all(isinstance(m, BaseMessage) for m in items):
        return items
    return convert_to_messages(items)


@dataclass(frozen=True)
class Split:
    """The plan of a message list, and what maps its dicts back to the messages."""

    plan: ContextPlan
    messages: Sequence[BaseMessage]
    # id of each dict of the list -> its message; the dicts are held by the plan, so no id is
    # reused while the split lives.
    by_dict: Mapping[int, BaseMessage]
    # The dict of the system message given apart from the list: counted, never handed back.
    apart: dict[str, Any] | None

    def kept(self, result: ContextResult) -> list[BaseMessage]:
        """The messages of ``result.input``: the original objects the policy kept, in order,
        and a new message for each dict a compress handler wrote."""
        out: list[BaseMessage] = []
        by_dict, apart = self.by_dict, self.apart
        for i, d in enumerate(result.input):
            if d is apart:
                continue
            found = by_dict.get(id(d))
            out.append(found if found is not None else from_chat_dict(d, i))
        return out

    def unchanged(self, kept: Sequence[BaseMessage]) -> bool:
        """``kept`` is the list itself: the same objects in the same order."""
        return len(kept) == len(self.messages) and all(
            a is b for a, b in zip(kept, self.messages, strict=True)
        )


def split_messages(
    messages: Sequence[BaseMessage], system: SystemMessage | None = None, path: str = "messages"
) -> Split:
    """The plan of ``messages`` and of ``system`` (the system message given apart, which opens
    the protected ``system`` fragment); anything in ``messages`` that is not a LangChain
    message is a :class:`ContextPlanError` naming its index under ``path``."""
    dicts = chat_dicts(messages, path)
    apart = chat_dict(system) if system is not None else None
    plan = agent_plan(dicts, lead=[apart] if apart is not None else (), path=path)
    by_dict = {id(d): m for d, m in zip(dicts, messages, strict=True)}
    return Split(plan, messages, by_dict, apart)


def _role(message: BaseMessage) -> str:
    if isinstance(message, HumanMessage):
        return "user"
    if isinstance(message, AIMessage):
        return "assistant"
    if isinstance(message, SystemMessage):
        role = message.additional_kwargs.get("__openai_role__")
        return "developer" if role == "developer" else "system"
    if isinstance(message, ToolMessage):
        return "tool"
    if isinstance(message, FunctionMessage):
        return "function"
    if isinstance(message, ChatMessage):
        return _CHAT_ROLES.get(message.role, message.role)
    return str(message.type)


def _tool_calls(message: AIMessage) -> list[dict[str, Any]]:
    in_content = _tool_use_ids(message.content)
    calls: list[dict[str, Any]] = []
    for call in message.tool_calls:
        if call.get("id") is not None and call.get("id") in in_content:
            continue
        calls.append(_call(call.get("id"), call.get("name"),
                           json.dumps(call.get("args", {}), ensure_ascii=False, default=str)))
    for bad in message.invalid_tool_calls:
        if bad.get("id") is not None and bad.get("id") in in_content:
            continue
        args = bad.get("args")
        calls.append(_call(bad.get("id"), bad.get("name"), args if isinstance(args, str) else ""))
    return calls


def _call(call_id: Any, name: Any, arguments: str) -> dict[str, Any]:
    return {"id": call_id, "type": "function",
            "function": {"name": name if isinstance(name, str) else "", "arguments": arguments}}


def _tool_use_ids(content: Any) -> set[Any]:
    if not isinstance(content, list):
        return set()
    return {part.get("id") for part in content
            if isinstance(part, dict) and part.get("type") == TOOL_USE_PART}
