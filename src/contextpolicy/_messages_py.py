"""Measuring message objects (the pure twin of ``csrc/_messages.pxi``).

:func:`measure_messages` reads a list of message dicts once and returns role codes, chars, flags
and opaque-part counts as numpy arrays; :func:`text_pieces` returns the text each message
counts; :class:`Measure` is a measured list with its cut, tail and pairing.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import numpy.typing as npt

from ._c_args import Int64Array, c_int
from ._json_py import _compact_json
from ._pairing_py import _unknown_roles, group_offsets, tool_pairing, trim_cut
from ._read import ListChanged, exact_str, fields, items
from ._tables import (
    FLAG_GLUES_NEXT,
    FLAG_OPENS_TURN,
    FLAG_TOOL_CALLS,
    FLAG_TOOL_RESULT,
    FLAG_UNKNOWN_ROLE,
    ITEM_CALL,
    ITEM_MESSAGE,
    ITEM_OUTPUT,
    ITEM_REASONING,
    ITEM_UNKNOWN,
    MAX_NESTING,
    PART_CODES,
    PART_OTHER,
    PART_TEXT,
    PART_THINKING,
    PART_TOOL_RESULT,
    PART_TOOL_USE,
    ROLE_CODES,
    ROLE_OTHER,
    ROLE_USER,
    TOOL_RESULT_ROLES,
)
from ._tool_ids import call_ids, item_code
from .errors import ContextPlanError


class _Acc:
    """Running totals for one message (chars and opaque parts)."""

    __slots__ = ("chars", "opaque", "pieces")

    def __init__(self, pieces: list[str] | None) -> None:
        self.chars = 0
        self.opaque = 0
        self.pieces = pieces

    def add(self, text: str) -> None:
        text = exact_str(text)
        self.chars += len(text)
        if self.pieces is not None:
            self.pieces.append(text)


def _too_deep(index: int, fid: str | None, field: str) -> ContextPlanError:
    return ContextPlanError.for_message(
        index, f"tool_result blocks nest deeper than {MAX_NESTING} levels (or a content list "
        "contains itself)", fragment_id=fid, field=field, code="too-deep",
    )


def _list_changed(index: int, fid: str | None, field: str) -> ContextPlanError:
    return ContextPlanError.for_message(
        index, "the list changed while it was measured", fragment_id=fid, field=field,
        code="changed-while-measured",
    )


def _parts(
    parts: list[Any], acc: _Acc, index: int, fid: str | None, field: str, depth: int
) -> int:
    """Count a list of content parts; return the flags they imply (tool results, tool uses)."""
    try:
        return _read_parts(parts, acc, index, fid, field, depth)
    except ListChanged:
        raise _list_changed(index, fid, field) from None


def _read_parts(
    parts: list[Any], acc: _Acc, index: int, fid: str | None, field: str, depth: int
) -> int:
    flags = 0
    # Index by index, the length read again each time: the list may change while a part's JSON
    # is encoded (a dict subclass's items() runs Python code), and the compiled kernel reads it
    # the same way.
    for j, part in items(parts):
        where = f"{field}[{j}]"
        if isinstance(part, str):
            acc.add(part)
            continue
        if not isinstance(part, dict):
            raise ContextPlanError.for_message(
                index, f"expected a content part object or string, got {type(part).__name__}",
                fragment_id=fid, field=where, code="invalid-content",
            )
        f = fields(part)
        ptype = f.get("type")
        code = PART_CODES.get(exact_str(ptype), PART_OTHER) if isinstance(ptype, str) else (
            PART_OTHER
        )
        if code == PART_TEXT:
            text = f.get("text")
            if not isinstance(text, str):
                raise ContextPlanError.for_message(
                    index, f"expected a string text, got {type(text).__name__}",
                    fragment_id=fid, field=where + ".text", code="invalid-content",
                )
            acc.add(text)
        elif code == PART_TOOL_RESULT:
            flags |= FLAG_TOOL_RESULT
            if depth >= MAX_NESTING:
                raise _too_deep(index, fid, where + ".content")
            _content(f.get("content"), acc, index, fid, where + ".content", depth + 1)
        elif code == PART_TOOL_USE:
            name = f.get("name")
            if isinstance(name, str):
                acc.add(name)
            if "input" in f:
                acc.add(_compact_json(f["input"], index, fid, where + ".input"))
            flags |= FLAG_TOOL_CALLS
        elif code == PART_THINKING:
            thinking = f.get("thinking")
            if not isinstance(thinking, str):
                raise ContextPlanError.for_message(
                    index, f"expected a string thinking, got {type(thinking).__name__}",
                    fragment_id=fid, field=where + ".thinking", code="invalid-content",
                )
            acc.add(thinking)
        else:
            acc.opaque += 1
    return flags


def _content(
    content: Any, acc: _Acc, index: int, fid: str | None, field: str, depth: int = 0
) -> int:
    if isinstance(content, str):
        acc.add(content)
    elif isinstance(content, list):
        return _parts(content, acc, index, fid, field, depth)
    elif content is not None:
        raise ContextPlanError.for_message(
            index, f"expected a string, a list of parts or null, got {type(content).__name__}",
            fragment_id=fid, field=field, code="invalid-content",
        )
    return 0


def _message(message: Any, acc: _Acc, index: int, fid: str | None) -> tuple[int, int]:
    """Count one message into ``acc``; return (role code, flags)."""
    if not isinstance(message, dict):
        raise ContextPlanError.for_message(
            index, f"expected a message object (dict), got {type(message).__name__}",
            fragment_id=fid, code="invalid-message",
        )
    # Every key is read before any Python code can run (the JSON of a tool input may).
    f = fields(message)
    role = f.get("role")
    item = item_code(f)
    if item != ITEM_MESSAGE and (item != ITEM_UNKNOWN or not isinstance(role, str)):
        return ROLE_OTHER, _item(item, f, acc, index, fid)
    if not isinstance(role, str):
        what = "missing" if role is None else f"a {type(role).__name__}"
        raise ContextPlanError.for_message(
            index, f"expected a string role, got {what}", fragment_id=fid, field="role",
            code="invalid-role",
        )
    role = exact_str(role)
    code = ROLE_CODES.get(role, ROLE_OTHER)
    flags = _content(f.get("content"), acc, index, fid, "content")
    if code == ROLE_OTHER:
        flags |= FLAG_UNKNOWN_ROLE
    # A user message that carries tool_result blocks belongs to the turn that called the tool.
    if code == ROLE_USER and not flags & FLAG_TOOL_RESULT:
        flags |= FLAG_OPENS_TURN
    if role in TOOL_RESULT_ROLES:
        flags |= FLAG_TOOL_RESULT
    calls = f.get("tool_calls")
    if calls is not None:
        if not isinstance(calls, list):
            raise ContextPlanError.for_message(
                index, f"expected a list of tool calls, got {type(calls).__name__}",
                fragment_id=fid, field="tool_calls", code="invalid-tool-calls",
            )
        if list.__len__(calls):
            flags |= FLAG_TOOL_CALLS
        try:
            _read_calls(calls, acc, index, fid)
        except ListChanged:
            raise _list_changed(index, fid, "tool_calls") from None
    return code, flags


def _item(item: int, f: dict[str, Any], acc: _Acc, index: int, fid: str | None) -> int:
    """Count one Responses item that is not a chat message into ``acc``; return its flags."""
    if item == ITEM_CALL:
        counted = False
        for key in ("name", "arguments", "input"):
            value = f.get(key)
            if isinstance(value, str):
                acc.add(value)
            elif value is not None and key != "name":
                acc.add(_compact_json(value, index, fid, key))
            counted = counted or value is not None
        if not counted:  # a call whose payload is not text (a computer action, ...)
            acc.opaque += 1
        return FLAG_TOOL_CALLS
    if item == ITEM_OUTPUT:
        output = f.get("output")
        flags = FLAG_TOOL_RESULT
        if isinstance(output, str):
            acc.add(output)
        elif isinstance(output, list):
            flags |= _parts(output, acc, index, fid, "output", 0)
        elif isinstance(output, dict):  # a screenshot, ...
            acc.opaque += 1
        elif output is not None:
            raise ContextPlanError.for_message(
                index, f"expected a string, a list of parts, an object or null, got "
                f"{type(output).__name__}", fragment_id=fid, field="output",
                code="invalid-content",
            )
        return flags
    if item == ITEM_REASONING:
        summary = f.get("summary")
        if isinstance(summary, list):
            _parts(summary, acc, index, fid, "summary", 0)
        elif summary is not None:
            raise ContextPlanError.for_message(
                index, f"expected a list of summary parts or null, got "
                f"{type(summary).__name__}", fragment_id=fid, field="summary",
                code="invalid-content",
            )
        _content(f.get("content"), acc, index, fid, "content")
        if f.get("encrypted_content") is not None:
            acc.opaque += 1
        return FLAG_GLUES_NEXT
    acc.opaque += 1  # an item of a type this kernel does not know: opaque, inside its turn
    return 0


def _read_calls(calls: list[Any], acc: _Acc, index: int, fid: str | None) -> None:
    for j, call in items(calls):
        where = f"tool_calls[{j}]"
        if not isinstance(call, dict):
            raise ContextPlanError.for_message(
                index, f"expected a tool call object, got {type(call).__name__}",
                fragment_id=fid, field=where, code="invalid-tool-calls",
            )
        fn = fields(call).get("function")
        if fn is None:
            continue
        if not isinstance(fn, dict):
            raise ContextPlanError.for_message(
                index, f"expected a function object, got {type(fn).__name__}",
                fragment_id=fid, field=where + ".function", code="invalid-tool-calls",
            )
        ff = fields(fn)
        name = ff.get("name")
        if isinstance(name, str):
            acc.add(name)
        args = ff.get("arguments")
        if isinstance(args, str):
            acc.add(args)
        elif args is not None:
            acc.add(_compact_json(args, index, fid, where + ".function.arguments"))


def _changed(fragment_id: str | None) -> ContextPlanError:
    return ContextPlanError(
        "the message list changed while it was measured",
        path=f"fragments[{fragment_id}].messages" if fragment_id is not None else "messages",
        code="changed-while-measured",
    )


def measure_messages(
    messages: list[Any], fragment_id: str | None = None
) -> tuple[npt.NDArray[np.int8], Int64Array, npt.NDArray[np.uint8], npt.NDArray[np.int32]]:
    """One pass over ``messages``: (role codes, chars, flags, opaque parts), one entry each.

    Raises :class:`ContextPlanError` naming ``fragment_id`` and the index of a bad message, and
    when the list changes size while it is measured (Python code a message runs, such as a dict
    subclass's ``items()`` in a tool input, can change it).
    """
    if not isinstance(messages, list):
        raise ContextPlanError(
            f"expected a list of messages, got {type(messages).__name__}",
            path=f"fragments[{fragment_id}].messages" if fragment_id is not None else "messages",
            code="invalid-messages",
        )
    n = list.__len__(messages)
    roles = np.zeros(n, dtype=np.int8)
    chars = np.zeros(n, dtype=np.int64)
    flags = np.zeros(n, dtype=np.uint8)
    opaque = np.zeros(n, dtype=np.int32)
    acc = _Acc(None)
    for i in range(n):
        if i >= list.__len__(messages):
            raise _changed(fragment_id)
        acc.chars = 0
        acc.opaque = 0
        roles[i], flags[i] = _message(list.__getitem__(messages, i), acc, i, fragment_id)
        chars[i] = acc.chars
        opaque[i] = acc.opaque
    if list.__len__(messages) != n:
        raise _changed(fragment_id)
    return roles, chars, flags, opaque


def message_text_pieces(message: Any, index: int = 0, fragment_id: str | None = None) -> list[str]:
    """The text pieces whose code points :func:`measure_messages` counts, in order."""
    index = c_int(index, "Py_ssize_t")
    pieces: list[str] = []
    _message(message, _Acc(pieces), index, fragment_id)
    return pieces


def text_pieces(messages: list[Any], fragment_id: str | None = None) -> tuple[list[str], list[int]]:
    """:func:`message_text_pieces` of every message in one pass: the pieces in order, and
    where each message's pieces end (the same checks and errors as :func:`measure_messages`)."""
    if not isinstance(messages, list):
        raise ContextPlanError(
            f"expected a list of messages, got {type(messages).__name__}",
            path=f"fragments[{fragment_id}].messages" if fragment_id is not None else "messages",
            code="invalid-messages",
        )
    pieces: list[str] = []
    ends: list[int] = []
    acc = _Acc(pieces)
    n = list.__len__(messages)
    for i in range(n):
        if i >= list.__len__(messages):
            raise _changed(fragment_id)
        _message(list.__getitem__(messages, i), acc, i, fragment_id)
        ends.append(len(pieces))
    if list.__len__(messages) != n:
        raise _changed(fragment_id)
    return pieces, ends


class Measure:
    """A message list measured in one pass: ``chars``, ``messages``, ``opaque_parts``,
    ``tool_traffic`` (some message calls a tool or carries a result) and ``unknown_role`` (some
    message has a role the accounting does not know), and per message its role, chars, flags
    and opaque parts, which :meth:`cut`, :meth:`tail`, :meth:`pairing` and
    :meth:`unknown_roles` use.
    The compiled kernel keeps them in C arrays, so a short conversation costs no numpy."""

    __slots__ = ("_arrays", "chars", "messages", "opaque_parts", "tool_traffic", "unknown_role")
    _arrays: tuple[Any, Any, Any, Any]
    chars: int
    messages: int
    opaque_parts: int
    tool_traffic: bool
    unknown_role: bool

    def __init__(self) -> None:
        raise TypeError("Measure objects come from measure()")

    @classmethod
    def _of(cls, arrays: tuple[Any, Any, Any, Any]) -> Measure:
        self = object.__new__(cls)
        self._arrays = arrays
        _roles, chars, flags, opaque = arrays
        self.chars = int(chars.sum())
        self.messages = len(chars)
        self.opaque_parts = int(opaque.sum())
        self.tool_traffic = bool(np.any(flags & (FLAG_TOOL_CALLS | FLAG_TOOL_RESULT)))
        self.unknown_role = bool(np.any(flags & FLAG_UNKNOWN_ROLE))
        return self

    def arrays(self) -> tuple[npt.NDArray[np.int8], Int64Array, npt.NDArray[np.uint8],
                              npt.NDArray[np.int32]]:
        """(role codes, chars, flags, opaque parts) as numpy arrays (copies)."""
        return tuple(a.copy() for a in self._arrays)  # type: ignore[return-value]

    def tail(self, start: int, stop: int | None = None) -> Measure:
        """The measure of ``messages[start:stop]`` (``stop``: the end by default)."""
        start = c_int(start, "Py_ssize_t")
        end = self.messages if stop is None else c_int(stop, "Py_ssize_t")
        if start < 0 or start > self.messages:
            raise ValueError(f"start {start} is outside 0..{self.messages}")
        if end < start or end > self.messages:
            raise ValueError(f"stop {end} is outside {start}..{self.messages}")
        return Measure._of(tuple(a[start:end] for a in self._arrays))  # type: ignore[arg-type]

    def groups(self, grouping: int) -> int:
        """How many groups the messages form."""
        grouping = c_int(grouping, "int")
        _roles, chars, flags, _opaque = self._arrays
        return len(group_offsets(flags, chars, grouping)[1])

    def pairing(self, messages: list[Any], start: int = 0) -> list[tuple[int, str, str | None]]:
        """:func:`tool_pairing` of ``messages[start:]`` with these flags from ``start`` on
        (indices relative to ``start``)."""
        return tool_pairing(*self._from(messages, start))

    def unknown_roles(self, messages: list[Any], start: int = 0,
                      fragment_id: str | None = None) -> list[tuple[int, str, int]]:
        """Each role of ``messages[start:]`` the accounting does not know: ``(first index,
        role, messages)`` in the order of first appearance (indices relative to ``start``);
        ``fragment_id`` names the list in the error a message changed since measured raises."""
        return _unknown_roles(*self._from(messages, start), fragment_id)

    def _from(self, messages: list[Any], start: Any) -> tuple[list[Any], Any]:
        """``messages[start:]`` and these flags from ``start`` on, checked to belong together
        (as the compiled kernel checks them)."""
        start = c_int(start, "Py_ssize_t")
        if not isinstance(messages, list):
            raise TypeError(f"expected a list of messages, got {type(messages).__name__}")
        if start < 0 or start > self.messages:
            raise ValueError(f"start {start} is outside 0..{self.messages}")
        flags = self._arrays[2]
        if len(flags) > list.__len__(messages):
            raise ValueError(
                f"flags and messages differ in length ({len(flags)} != "
                f"{list.__len__(messages)})"
            )
        return list.__getitem__(messages, slice(start, None)), flags[start:]

    def cut(
        self, messages: list[Any], grouping: int, keep_groups: int, target_chars: int | None
    ) -> tuple[int, int, int]:
        """Where a trim (``target_chars``) or a compress split (``target_chars=None``: keep the
        newest ``keep_groups`` groups) cuts these messages: ``(first kept group, first kept
        message, groups)``.

        The cut then moves back, keeping more whole groups, until no kept tool result has lost
        its call to it. Well-formed histories never need that: a call and its results share a
        user turn, and message grouping keeps results with the message before them. It guards
        against results that come later (after another message or turn): a cut never orphans a
        tool result.
        """
        grouping, keep_groups = c_int(grouping, "int"), c_int(keep_groups)
        if not isinstance(messages, list):
            raise TypeError(f"expected a list of messages, got {type(messages).__name__}")
        if keep_groups < 0:
            raise ValueError("keep_groups must be >= 0")
        if target_chars is not None:
            target_chars = c_int(target_chars)
            if target_chars < 0:
                raise ValueError("target_chars must be >= 0")
        _roles, chars, flags, _opaque = self._arrays
        offsets, group_chars = group_offsets(flags, chars, grouping)
        ngroups = len(group_chars)
        if ngroups == 0:
            return 0, 0, 0
        if target_chars is not None:
            first = trim_cut(group_chars, keep_groups, target_chars)
        else:
            first = ngroups - min(keep_groups, ngroups)
        if len(flags) > list.__len__(messages):
            raise ValueError(
                f"flags and messages differ in length ({len(flags)} != "
                f"{list.__len__(messages)})"
            )
        while first > 0:
            cut = int(offsets[first])
            kept = list.__getitem__(messages, slice(cut, None))
            missing = {
                cid for _, code, cid in tool_pairing(kept, flags[cut:])
                if code == "orphan-tool-result" and cid is not None
            }
            if not missing:
                break
            earliest = cut
            for i in np.flatnonzero(flags[:cut] & FLAG_TOOL_CALLS)[::-1].tolist():
                message = list.__getitem__(messages, i)
                if not isinstance(message, dict):  # no longer a message: it calls nothing
                    continue
                found = missing.intersection(call_ids(message))
                if found:
                    earliest = i
                    missing -= found
                    if not missing:
                        break
            if earliest == cut:  # results whose calls never were in the plan: nothing to keep
                break
            first = int(np.searchsorted(offsets, earliest, side="right")) - 1
        return first, int(offsets[first]), ngroups


def measure(messages: list[Any], fragment_id: str | None = None) -> Measure:
    """Measure ``messages`` in one pass into a :class:`Measure` (same checks and errors as
    :func:`measure_messages`)."""
    return Measure._of(measure_messages(messages, fragment_id))
