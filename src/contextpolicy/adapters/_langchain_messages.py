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

:class:`Split` maps the dicts of a result's input back to the messages they came from
(``_returned``): a message the policy kept, or a compress handler left as it was, goes back as
the original object; a message a handler changed goes back as a copy of the original with only
what the handler changed (:func:`edited`): ids, names, ``response_metadata``,
``additional_kwargs`` (a legacy ``function_call`` included), ``usage_metadata``, a
``ToolMessage``'s ``artifact`` and ``status`` stay. Only a message no given one stands behind (a
summary) becomes a new LangChain message (:func:`from_chat_dict`).

An ``AIMessage``'s invalid tool calls are listed with their raw ``args`` text, counted as the
text they carry, and go back as invalid calls: never parsed, never made valid (the built-in
``clear-tool-results`` leaves arguments that are not a JSON object as they are). A valid call's
arguments a handler changed (``tool_calls`` entries, or the input of its ``tool_use`` block,
which the call then follows) must stay a JSON object.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Mapping, Sequence
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
from ..content import same
from ..errors import ContextPlanError
from ..plan import ContextPlan
from ..report import ContextResult
from ..stable import StableResult
from ._agent import agent_plan, tools_text
from ._returned import origins, trimmed_away

__all__ = ["Split", "as_messages", "chat_dict", "chat_dicts", "edited", "from_chat_dict",
           "split_messages"]

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


# The keys of a chat dict (chat_dict); any other key a handler writes is kept in
# additional_kwargs, as LangChain's own conversion keeps it.
_CHAT_KEYS = frozenset({"role", "content", "name", "tool_calls", "tool_call_id"})


def edited(message: BaseMessage, before: dict[str, Any], after: dict[str, Any],
           index: int) -> BaseMessage:
    """``message`` with the changes a compress handler made to its chat dict (``before``, as
    :func:`chat_dict` made it, became ``after``, at ``index`` of the model input): a copy
    (``model_copy``) in which only the fields the handler changed differ (the content, the
    names and arguments of tool calls; keys a chat dict does not have go to
    ``additional_kwargs``), every other field the original's (the role, the name and the tool
    ids traced the dict to the message, so they are the original's too). What a LangChain
    message cannot hold is a :class:`ContextPlanError`."""
    update: dict[str, Any] = {}
    content = after.get("content")
    if not same(content, before.get("content")):
        if content is None:
            content = ""
        elif not isinstance(content, (str, list)):
            raise _unreadable(index, f"content of type {type(content).__name__}")
        update["content"] = content
    extra = {k: v for k, v in after.items() if k not in _CHAT_KEYS}
    if extra:
        update["additional_kwargs"] = {**message.additional_kwargs, **extra}
    if isinstance(message, AIMessage):
        update.update(_edited_calls(message, before, after, update.get("content"), index))
    return message.model_copy(update=update) if update else message


def _edited_calls(message: AIMessage, before: dict[str, Any], after: dict[str, Any],
                  content: Any, index: int) -> dict[str, Any]:
    """The tool call fields of ``message`` a handler changed, as ``model_copy`` updates: the
    calls listed in ``tool_calls`` (valid ones and invalid ones, in :func:`_tool_calls`'s
    order), and the calls whose ``tool_use`` block's input changed in ``content``."""
    calls: list[dict[str, Any]] = [*message.tool_calls]  # type: ignore[list-item]
    invalid: list[dict[str, Any]] = [*message.invalid_tool_calls]  # type: ignore[list-item]
    changed_calls = changed_invalid = False
    old, new = before.get("tool_calls") or [], after.get("tool_calls") or []
    if not same(old, new):
        if not isinstance(new, list) or len(new) != len(old):
            raise _unreadable(index, "another list of tool calls in a message it kept")
        # The same ids in the same order (the handler kept the message's identity), so the
        # entries pair up one for one with the calls they list.
        for (bad, k), was, now in zip(_listed(message), old, new, strict=True):
            if same(was, now):
                continue
            fn = now.get("function") if isinstance(now, dict) else None
            if not isinstance(fn, dict):
                raise _unreadable(index, "a tool call without its function")
            name, arguments = fn.get("name"), fn.get("arguments")
            was_name, was_arguments = was["function"]["name"], was["function"]["arguments"]
            if bad:  # invalid it came, invalid it stays: its text, never parsed
                entry = dict(invalid[k])
                if not same(arguments, was_arguments):
                    entry["args"] = arguments if isinstance(arguments, str) else json.dumps(
                        arguments, ensure_ascii=False, default=str)
                if not same(name, was_name):
                    entry["name"] = _call_name(name, index)
                invalid[k] = entry
                changed_invalid = True
            else:
                call = dict(calls[k])
                if not same(arguments, was_arguments):
                    call["args"] = _arguments(arguments, index)
                if not same(name, was_name):
                    call["name"] = _call_name(name, index)
                calls[k] = call
                changed_calls = True
    if content is not None and calls:
        # A call that lives in a tool_use block follows the block's input.
        was_blocks, now_blocks = _blocks(before.get("content")), _blocks(content)
        for k, call in enumerate(calls):
            now = now_blocks.get(call.get("id"))
            was = was_blocks.get(call.get("id"))
            if now is None or was is None or same(now, was):
                continue
            entry = dict(call)
            if not same(dict.get(now, "input"), dict.get(was, "input")):
                entry["args"] = _arguments(dict.get(now, "input"), index)
            if not same(dict.get(now, "name"), dict.get(was, "name")):
                entry["name"] = _call_name(dict.get(now, "name"), index)
            calls[k] = entry
            changed_calls = True
    update: dict[str, Any] = {}
    if changed_calls:
        update["tool_calls"] = calls
        synced = _synced_blocks(content if content is not None else message.content, calls)
        if synced is not None:
            update["content"] = synced
    if changed_invalid:
        update["invalid_tool_calls"] = invalid
    return update


def _listed(message: AIMessage) -> list[tuple[bool, int]]:
    """Where each ``tool_calls`` entry of :func:`chat_dict` comes from: (invalid, position in
    ``tool_calls`` or ``invalid_tool_calls``)."""
    in_content = _tool_use_ids(message.content)
    return [(False, k) for k, c in enumerate(message.tool_calls)
            if c.get("id") is None or c.get("id") not in in_content] + [
        (True, k) for k, c in enumerate(message.invalid_tool_calls)
        if c.get("id") is None or c.get("id") not in in_content]


def _arguments(value: Any, index: int) -> dict[str, Any]:
    """A valid call's arguments as LangChain holds them: a JSON object."""
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except ValueError:
            pass
    if not isinstance(value, dict):
        raise _unreadable(index, "tool call arguments that are not a JSON object")
    return value


def _call_name(name: Any, index: int) -> str:
    if not isinstance(name, str):
        raise _unreadable(index, f"a tool call name of type {type(name).__name__}")
    return name


def _parts_of(content: Any, kind: str) -> list[tuple[int, str, dict[str, Any]]]:
    """(position, id, part) of each part of type ``kind`` with a str id, read from the real
    storage (a part's own methods never run: they may say anything)."""
    if not isinstance(content, list):
        return []
    out = []
    for j, part in enumerate(list.copy(content)):
        if isinstance(part, dict):
            kind_of, part_id = dict.get(part, "type"), dict.get(part, "id")
            if (isinstance(kind_of, str) and str.__eq__(kind_of, kind) is True
                    and isinstance(part_id, str)):
                out.append((j, str.__str__(part_id), part))
    return out


def _blocks(content: Any) -> dict[Any, dict[str, Any]]:
    """The ``tool_use`` blocks of a content, by id."""
    return {part_id: part for _, part_id, part in _parts_of(content, TOOL_USE_PART)}


def _synced_blocks(content: Any, calls: list[Any]) -> list[Any] | None:
    """``content`` with its standard ``tool_call`` blocks (LangChain's v1 content) holding the
    arguments of the calls of the same id, or ``None`` when none differs."""
    args = {c.get("id"): c.get("args") for c in calls}
    out: list[Any] | None = None
    for j, part_id, part in _parts_of(content, "tool_call"):
        if part_id in args and not same(dict.get(part, "args"), args[part_id]):
            if out is None:
                out = list.copy(content)
            out[j] = {**dict(dict.items(part)), "args": args[part_id]}
    return out


def _unreadable(index: int, what: str) -> ContextPlanError:
    return ContextPlanError(
        f"a compress handler wrote {what}, which a LangChain message cannot hold",
        path=f"input[{index}]", code="unsupported-message",
    )


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
    # The chat dict of each message, in order; the plan holds them, so no id is reused while
    # the split lives.
    dicts: list[dict[str, Any]]
    # The dict of the system message given apart from the list: counted, never handed back.
    apart: dict[str, Any] | None
    # The text fragments that open the input (the tools' schemas): counted, never handed back.
    texts: int = 0

    def kept(self, result: ContextResult) -> list[BaseMessage]:
        """The messages of ``result.input``: the original objects the policy kept or a handler
        left as they were, in order; for a message a handler changed, the original with the
        handler's changes (:func:`edited`); a new message for each dict no original stands
        behind."""
        apart, texts = self.apart, self.texts
        at = [i for i, d in enumerate(result.input) if i >= texts and d is not apart]
        returned = [result.input[i] for i in at]
        out: list[BaseMessage] = []
        for i, d, origin in zip(at, returned, origins(self.dicts, returned, self._away(result)),
                                strict=True):
            if origin is None:
                out.append(from_chat_dict(d, i))
            elif origin.unchanged:
                out.append(self.messages[origin.source])
            else:
                out.append(edited(self.messages[origin.source], self.dicts[origin.source], d, i))
        return out

    def _away(self, result: ContextResult) -> Callable[[], set[int]]:
        def away() -> set[int]:
            fragments = [(f.id, f.messages) for f in self.plan.fragments
                         if f.messages is not None]
            return trimmed_away(fragments, result.report.steps, self.dicts)
        return away

    def unchanged(self, kept: Sequence[BaseMessage]) -> bool:
        """``kept`` is the list itself: the same objects in the same order."""
        return len(kept) == len(self.messages) and all(
            a is b for a, b in zip(kept, self.messages, strict=True)
        )


def traced(messages: Sequence[BaseMessage], dicts: list[dict[str, Any]],
           result: StableResult, skip: int) -> list[BaseMessage]:
    """The messages of a stable cut's ``result.input`` after its first ``skip`` (the tools'
    schemas and the system message given apart), mapped back through ``result.sources``: the
    original object for a dict that is the original's; the original with the changes an
    earlier or this call's handler made (:func:`edited`); a new message where no original
    stands behind."""
    out: list[BaseMessage] = []
    for j in range(skip, len(result.input)):
        d, s = result.input[j], result.sources[j]
        if s < 0:
            out.append(from_chat_dict(d, j))
        elif d is dicts[s]:
            out.append(messages[s])
        else:
            out.append(edited(messages[s], dicts[s], d, j))
    return out


def split_messages(
    messages: Sequence[BaseMessage], system: SystemMessage | None = None, path: str = "messages",
    tools: str | None = None,
) -> Split:
    """The plan of ``messages``, of ``system`` (the system message given apart, which opens
    the protected ``system`` fragment) and of ``tools`` (the tools' schemas, the protected
    ``tools`` fragment); anything in ``messages`` that is not a LangChain message is a
    :class:`ContextPlanError` naming its index under ``path``."""
    dicts = chat_dicts(messages, path)
    apart = chat_dict(system) if system is not None else None
    plan = agent_plan(dicts, lead=[apart] if apart is not None else (), path=path, tools=tools)
    return Split(plan, messages, dicts, apart, tools is not None)


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


def request_tools(tools: Sequence[Any] | None,
                  known: dict[int, tuple[Any, Any]] | None = None) -> str | None:
    """The ``tools`` fragment's text of a model request's tools: each ``BaseTool`` (or function)
    as the OpenAI tool schema LangChain binds it as, a provider's own tool dict as it is.
    ``known`` keeps each tool object's schema (by identity) for the next call."""
    from langchain_core.utils.function_calling import convert_to_openai_tool

    if not tools:
        return None
    schemas = []
    for tool in tools:
        if isinstance(tool, Mapping):  # a dict may change between calls: read it each time
            schemas.append(tool)
            continue
        hit = known.get(id(tool)) if known is not None else None
        if hit is None or hit[0] is not tool:
            hit = (tool, convert_to_openai_tool(tool))
            if known is not None:
                if len(known) >= _KNOWN_TOOLS:
                    known.clear()
                known[id(tool)] = hit
        schemas.append(hit[1])
    return tools_text(schemas)


_KNOWN_TOOLS = 256
