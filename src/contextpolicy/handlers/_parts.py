"""Where tool results, tool calls and texts sit in a message list, in every format the
kernels read: chat messages (``tool`` messages, ``tool_calls``), Anthropic blocks (``tool_use``,
``tool_result``) and OpenAI Responses items (``*_call`` and ``*_call_output`` by ``call_id``).

Messages are read as the kernels classify them (``_tool_ids``): a ``type``, a ``role`` or an id
is the text of a str (a str subclass's own text, whatever its ``__eq__`` or ``__hash__`` say) and
nothing else (a part whose ``type`` is a list, an object or a number is an opaque part, as the
kernels count it); a value's chars are counted by the live kernel, so a handler's figures are
the ones the report measures.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from .._read import exact_str
from .._tables import (
    ITEM_CALL,
    ITEM_MESSAGE,
    ITEM_OUTPUT,
    ITEM_UNKNOWN,
    TEXT_PART_TYPES,
    TOOL_RESULT_PART,
    TOOL_RESULT_ROLES,
    TOOL_USE_PART,
)
from .._tool_ids import item_code

__all__ = ["CallSlot", "ResultSlot", "call_slots", "item_of", "part_type", "result_slots",
           "text_part_type", "text_of", "value_chars"]


def item_of(message: Any) -> int:
    """The Responses item code of a message as measuring reads it (an unknown type with a role is
    a chat message)."""
    if not isinstance(message, dict):
        return ITEM_UNKNOWN
    kind = message.get("type")
    if kind is None:  # a chat message: the common case, read without a call
        return ITEM_MESSAGE
    code = item_code(message)
    if code == ITEM_UNKNOWN and isinstance(message.get("role"), str):
        return ITEM_MESSAGE
    return code


def text_of(value: Any) -> str | None:
    """``value`` as the kernels read a ``type``, ``role`` or id: the text of a str, else None."""
    return exact_str(value) if isinstance(value, str) else None



def part_type(part: dict[str, Any]) -> str | None:
    """A content part's ``type`` as the kernels read it (``None``: not a str, an opaque part)."""
    return text_of(part.get("type"))


@dataclass(frozen=True)
class ResultSlot:
    """One tool result: message ``index``; ``block``, the index of its ``tool_result`` block in
    the content (``None``: the message is the result); ``key``, where its content is
    (``content`` or ``output``); the id it answers, and its tool's name when the result says."""

    index: int
    block: int | None
    key: str
    call_id: str | None
    name: str | None

    def holder(self, messages: list[Any]) -> dict[str, Any]:
        message = messages[self.index]
        return message if self.block is None else message["content"][self.block]

    def value(self, messages: list[Any]) -> Any:
        return self.holder(messages).get(self.key)

    def item_type(self, messages: list[Any]) -> str | None:
        """The Responses item type of an output item (``function_call_output``, ...)."""
        return text_of(messages[self.index].get("type")) if self.key == "output" else None


@dataclass(frozen=True)
class CallSlot:
    """One tool call: message ``index``; ``where`` it is (``tool_calls``: an entry of the
    message's ``tool_calls``; ``content``: a ``tool_use`` block; ``item``: a Responses call
    item) and its position there; its tool's name."""

    index: int
    where: str
    position: int
    name: str | None


def _parts(content: Any) -> Iterator[tuple[int, dict[str, Any]]]:
    if isinstance(content, list):
        for j, part in enumerate(content):
            if isinstance(part, dict):
                yield j, part


def result_slots(messages: list[Any]) -> list[ResultSlot]:
    """Every tool result of ``messages``, in order."""
    out: list[ResultSlot] = []
    for i, message in enumerate(messages):
        item = item_of(message)
        if item == ITEM_OUTPUT:
            out.append(ResultSlot(i, None, "output", text_of(message.get("call_id")), None))
            continue
        if item != ITEM_MESSAGE:
            continue
        if text_of(message.get("role")) in TOOL_RESULT_ROLES:
            out.append(ResultSlot(i, None, "content", text_of(message.get("tool_call_id")),
                                  text_of(message.get("name"))))
            continue
        for j, part in _parts(message.get("content")):
            if part_type(part) == TOOL_RESULT_PART:
                out.append(ResultSlot(i, j, "content", text_of(part.get("tool_use_id")), None))
    return out


def call_slots(messages: list[Any]) -> Iterator[tuple[str | None, CallSlot]]:
    """Every tool call of ``messages`` with its id, in order."""
    for i, message in enumerate(messages):
        item = item_of(message)
        if item == ITEM_CALL:
            yield text_of(message.get("call_id")), CallSlot(i, "item", 0,
                                                             text_of(message.get("name")))
            continue
        if item != ITEM_MESSAGE:
            continue
        calls = message.get("tool_calls")
        if isinstance(calls, list):
            for j, call in enumerate(calls):
                if isinstance(call, dict):
                    fn = call.get("function")
                    name = text_of(fn.get("name")) if isinstance(fn, dict) else None
                    yield text_of(call.get("id")), CallSlot(i, "tool_calls", j, name)
        for j, part in _parts(message.get("content")):
            if part_type(part) == TOOL_USE_PART:
                yield text_of(part.get("id")), CallSlot(i, "content", j,
                                                        text_of(part.get("name")))


def value_chars(value: Any, key: str, item_type: str | None = None) -> int:
    """The chars the kernel counts for a tool result's content (``key="content"``) or a
    Responses output (``key="output"``)."""
    from .. import _kernel

    if key == "output":
        probe: dict[str, Any] = {"type": item_type or "function_call_output", "call_id": "",
                                 "output": value}
    else:
        probe = {"role": "tool", "content": value}
    return int(_kernel.measure([probe]).chars)


def text_part_type(value: Any, default: str) -> str:
    """The type of the first text part of a list of parts (``default`` when there is none)."""
    for _, part in _parts(value):
        kind = part_type(part)
        if kind is not None and kind in TEXT_PART_TYPES:
            return kind
    return default
