"""Pure-Python twin of the compiled kernel (``csrc/_kernel_c.pyx``).

Same functions, same results, same errors. It is the type surface of the kernel and the
implementation wherever the compiled module is missing (PyPy, no compiler, or
``CONTEXTPOLICY_PURE_PYTHON=1``).

Object path: :func:`measure_messages` reads a list of message dicts once and returns role codes,
chars, flags and opaque-part counts as numpy arrays; :func:`group_offsets` groups them;
:func:`trim_cut` finds the first group a trim keeps. Columnar path: :func:`utf8_lengths`,
:func:`role_codes_utf8` and :func:`trim_cut_many` work straight on Arrow-layout buffers.
"""

from __future__ import annotations

import json
import math
import operator
import re
from collections.abc import Callable
from typing import Any, cast

import numpy as np
import numpy.typing as npt
import orjson

from ._read import ListChanged, exact_str, fields, items
from ._tables import (
    FLAG_GLUES_NEXT,
    FLAG_OPENS_TURN,
    FLAG_TOOL_CALLS,
    FLAG_TOOL_RESULT,
    FLAG_UNKNOWN_ROLE,
    GROUP_MESSAGE,
    GROUP_USER_TURN,
    INSTRUCTION_ROLE_CODES,
    ITEM_CALL,
    ITEM_MESSAGE,
    ITEM_OUTPUT,
    ITEM_REASONING,
    ITEM_UNKNOWN,
    JSON_WHITESPACE,
    MAX_JSON_DEPTH,
    MAX_NESTING,
    MISSED_NONE,
    MISSED_REASONS,
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
    missed_code,
    tables,
)
from ._tool_ids import call_ids, item_code, result_ids
from .errors import ContextPlanError

__all__ = [
    "GROUP_MESSAGE",
    "ORPHAN_CODE",
    "SCAN_DEPTH",
    "SCAN_FIGURES",
    "SCAN_KEYS",
    "SCAN_NUMBER",
    "ENTRY_SLOTS",
    "UNANSWERED_CODE",
    "GROUP_USER_TURN",
    "IMPLEMENTATION",
    "TABLES",
    "Measure",
    "fused_result",
    "group_offsets",
    "measure",
    "measure_messages",
    "message_text_pieces",
    "line_bounds",
    "reduce_lines",
    "report_lines",
    "reduce_plan",
    "reduce_rows",
    "reduce_transcript",
    "role_codes_utf8",
    "split_transcript",
    "text_pieces",
    "tool_pairing",
    "trim_cut",
    "trim_cut_many",
    "utf8_lengths",
    "utf8_validate",
    "gather_bytes",
    "gather_bits",
    "gather_offsets",
    "part_chars",
    "PART_FIELDS",
    "string_codes",
    "string_ids",
    "arrange_ids",
    "json_string_lengths",
    "compact_json",
    "compact_json_length",
    "Utf8Error",
    "pooled_arrays",
    "pool_stats",
    "release_pool",
]

IMPLEMENTATION = "python"
TABLES = tables()

Int64Array = npt.NDArray[np.int64]

# ``json.dumps(x, separators=(",", ":"), ensure_ascii=False)``, built once.
COMPACT_JSON = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False)


# The compiled kernel's typed arguments (C int, int64_t, Py_ssize_t, tuple, bint) are converted
# by Cython's rules before its body runs; the twin converts its arguments the same way, in the
# same order, so that both accept and refuse the same values with the same errors.
_C_INT = (-(2**31), 2**31 - 1)
_C_LONG = (-(2**63), 2**63 - 1)


def _c_int(value: Any, ctype: str = "int64_t") -> int:
    """``value`` as a C ``int``, ``int64_t`` or ``Py_ssize_t`` argument of the compiled kernel:
    an int (a bool, an int subclass) as it is; for the others ``__index__`` (``Py_ssize_t``)
    or ``__int__`` (a float truncates); out of range, an OverflowError."""
    if ctype == "Py_ssize_t":
        value = operator.index(value)
        if not _C_LONG[0] <= value <= _C_LONG[1]:
            raise OverflowError("Python int too large to convert to C ssize_t")
        return int.__int__(value)
    if not isinstance(value, int):
        convert = getattr(type(value), "__int__", None)
        if convert is None:
            raise TypeError("an integer is required")
        value = convert(value)
        if not isinstance(value, int):
            raise TypeError(f"__int__ returned non-int (type {type(value).__name__})")
    value = int.__int__(value)
    if not _C_LONG[0] <= value <= _C_LONG[1]:
        raise OverflowError("Python int too large to convert to C long")
    if ctype == "int" and not _C_INT[0] <= value <= _C_INT[1]:
        raise OverflowError("value too large to convert to int")
    return value


def _c_type_name(t: type) -> str:
    # The C tp_name: a class's name; a static type's dotted one (numpy.float64).
    if t.__flags__ & (1 << 9) or t.__module__ == "builtins":  # Py_TPFLAGS_HEAPTYPE
        return t.__name__
    return f"{t.__module__}.{t.__name__}"


def _c_tuple(value: Any, name: str) -> Any:
    """A ``tuple`` argument of the compiled kernel: exactly a tuple, or None."""
    if value is not None and type(value) is not tuple:
        raise TypeError(f"Argument '{name}' has incorrect type (expected tuple, got "
                        f"{_c_type_name(type(value))})")
    return value


def _c_array(value: Any, dtype: Any) -> Any:
    """A ``const T[::1]`` argument filled from ``np.ascontiguousarray(value, dtype)`` (which
    makes a scalar 1-d): it must then be 1-d."""
    array = np.ascontiguousarray(value, dtype=dtype)
    if array.ndim != 1:
        raise ValueError(f"Buffer has wrong number of dimensions (expected 1, got {array.ndim})")
    return array


def _c_unpack(value: Any, n: int) -> list[Any]:
    """``a, b, ... = value`` as the compiled kernel unpacks it (its errors' words)."""
    items: list[Any] = []
    for item in value:
        if len(items) == n:
            raise ValueError(f"too many values to unpack (expected {n})")
        items.append(item)
    if len(items) < n:
        raise ValueError(f"need more than {len(items)} value{'' if len(items) == 1 else 's'} "
                         "to unpack")
    return items


# ---------------------------------------------------------------------------------------------
# Compact JSON, without recursion
#
# What ``COMPACT_JSON.encode(value)`` writes, character for character and with the same errors,
# read the way its C encoder reads (a subclass of dict through its ``items()``, of list or tuple
# through its iterator, every scalar through its real storage), but walked with a stack of its
# own: a value nested up to MAX_JSON_DEPTH levels of arrays and objects is written whatever the
# interpreter's stack allows, and a deeper one (a value that contains itself among them) is
# _JsonTooDeep at the first container past the limit, before anything of it is read. The
# compiled kernel writes values of exact built-in types itself and hands every other value to
# _json_text.

JSON_TOO_DEEP = (f"the JSON value nests arrays and objects deeper than {MAX_JSON_DEPTH} levels "
                 "(or contains itself)")

_encode_str = json.encoder.encode_basestring  # the encoder's own (ensure_ascii=False)
_float_repr = float.__repr__
_isfinite = math.isfinite
_int_repr = int.__repr__
_dict_len = dict.__len__
_dict_items = dict.items
_tuple_len = tuple.__len__
_END = object()


class _JsonTooDeep(Exception):
    """A value nests deeper than ``MAX_JSON_DEPTH`` (or contains itself)."""


def _float_text(value: float) -> str:
    # math reads a float subclass's own value, never a method of it.
    if math.isfinite(value):
        return _float_repr(value)
    if math.isnan(value):
        return "NaN"
    return "Infinity" if math.copysign(1.0, value) > 0 else "-Infinity"


def _key_text(key: Any) -> str:
    """A dict key as the encoder writes it (a str; numbers and constants as their JSON)."""
    kind = type(key)
    if issubclass(kind, str):
        return _encode_str(key)
    if issubclass(kind, float):
        return _encode_str(_float_text(key))
    if key is True or key is False or key is None:
        return '"true"' if key is True else '"false"' if key is False else '"null"'
    if issubclass(kind, int):
        return _encode_str(_int_repr(key))
    raise TypeError(f"keys must be str, int, float, bool or None, not "
                    f"{_c_type_name(kind)[:100]}")


def _pairs(value: dict[Any, Any]) -> Any:
    """An iterator over the items of a dict subclass as the encoder reads them: as its
    ``items()`` returns them (an exact dict's are read as they are when it is reached)."""
    got: Any = value.items()
    if type(got) is not list:
        try:
            it = iter(got)
        except TypeError:
            raise TypeError(f"{_c_type_name(type(value))[:200]}.items() returned a "
                            f"non-iterable (type {_c_type_name(type(got))[:200]})") from None
        got = list(it)
    return iter(got)


def _as_list(value: Any) -> list[Any]:
    """The items of a list or tuple subclass as the encoder reads them: as its iterator gives
    them (an exact list is read as it is at each item, an exact tuple as it is)."""
    try:
        it = iter(value)
    except TypeError:
        raise TypeError("_iterencode_list needs a sequence") from None
    return list(it)


def _json_text(value: Any) -> str:
    """``COMPACT_JSON.encode(value)``, without recursion (see above)."""
    if type(value) is str:
        return _encode_str(value)  # type: ignore[no-any-return]
    out: list[str] = []
    put = out.append
    # The container being written: its items, its closing bracket, how its items are read
    # (0: values, 1: an exact dict's pairs, 2: pairs a subclass's items() returned) and whether
    # nothing of it is written yet; the root is the one value of a container without brackets.
    # The containers around it wait on the stack.
    stack: list[tuple[Any, str, int]] = []
    it: Any = iter((value,))
    closer, mode, first = "", 0, True
    while True:
        for item in it:
            if first:
                first = False
            else:
                put(",")
            if mode:
                if mode == 2 and (not issubclass(type(item), tuple) or _tuple_len(item) != 2):
                    raise ValueError("items must return 2-tuples")
                key = tuple.__getitem__(item, 0)
                put(_encode_str(key) if type(key) is str else _key_text(key))
                put(":")
                item = tuple.__getitem__(item, 1)
            kind = type(item)
            if kind is str:
                put(_encode_str(item))
            elif item is None:
                put("null")
            elif item is True:
                put("true")
            elif item is False:
                put("false")
            elif kind is int:
                put(_int_repr(item))
            elif kind is float:
                put(_float_repr(item) if _isfinite(item) else _float_text(item))
            elif issubclass(kind, (list, tuple, dict)):
                if len(stack) >= MAX_JSON_DEPTH:
                    raise _JsonTooDeep
                if kind is dict or issubclass(kind, dict):
                    if not _dict_len(item):
                        put("{}")
                        continue
                    put("{")
                    stack.append((it, closer, mode))
                    closer = "}"
                    if kind is dict:
                        it, mode = iter(list(_dict_items(item))), 1
                    else:
                        it, mode = _pairs(item), 2
                else:
                    seq = item if kind is list or kind is tuple else _as_list(item)
                    if not len(seq):
                        put("[]")
                        continue
                    put("[")
                    stack.append((it, closer, mode))
                    it = iter(seq)
                    closer, mode = "]", 0
                first = True
                break
            elif issubclass(kind, str):
                put(_encode_str(item))
            elif issubclass(kind, int):
                put(_int_repr(item))
            elif issubclass(kind, float):
                put(_float_text(item))
            else:
                COMPACT_JSON.default(item)  # raises the encoder's TypeError
        else:
            put(closer)
            if not stack:
                return "".join(out)
            it, closer, mode = stack.pop()
            first = False


def compact_json(value: Any) -> str:
    """The compact JSON of ``value`` (``json.dumps(value, separators=(",", ":"),
    ensure_ascii=False)``), as the kernels measure a tool input, without recursion: a value
    nested deeper than ``MAX_JSON_DEPTH`` levels of arrays and objects, or one that contains
    itself, is a :class:`ContextPlanError` ``too-deep``; one JSON cannot hold, ``invalid-json``.
    """
    try:
        return _json_text(value)
    except _JsonTooDeep:
        raise ContextPlanError(JSON_TOO_DEEP, code="too-deep") from None
    except (TypeError, ValueError, RecursionError) as exc:
        raise ContextPlanError(f"expected JSON-serialisable data ({exc})",
                               code="invalid-json") from None


def compact_json_length(value: Any) -> int:
    """``len(compact_json(value))`` (the compiled kernel counts it without writing it)."""
    return len(compact_json(value))


def _compact_json(value: Any, index: int, fragment_id: str | None, field: str) -> str:
    try:
        return _json_text(value)
    except _JsonTooDeep:
        raise ContextPlanError.for_message(
            index, JSON_TOO_DEEP, fragment_id=fragment_id, field=field, code="too-deep",
        ) from None
    except (TypeError, ValueError, RecursionError) as exc:
        raise ContextPlanError.for_message(
            index, f"expected JSON-serialisable data ({exc})", fragment_id=fragment_id,
            field=field, code="invalid-json",
        ) from None


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
    index = _c_int(index, "Py_ssize_t")
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


def group_offsets(
    flags: npt.NDArray[np.uint8], chars: Int64Array, grouping: int = GROUP_USER_TURN
) -> tuple[Int64Array, Int64Array]:
    """Group messages; return (offsets, chars per group), ``len(offsets) == groups + 1``.

    ``GROUP_USER_TURN``: a group starts at each turn-opening message; messages before the first
    one form the lead group. ``GROUP_MESSAGE``: a group per message, except that tool results
    stay in the group of the message before them.
    """
    grouping = _c_int(grouping, "int")
    flags = np.array(_c_array(flags, np.uint8), copy=True)  # read once
    chars = _c_array(chars, np.int64)
    n = len(flags)
    if len(chars) != n:
        raise ValueError(f"flags and chars differ in length ({n} != {len(chars)})")
    if grouping == GROUP_USER_TURN:
        opens = (flags & FLAG_OPENS_TURN) != 0
    elif grouping == GROUP_MESSAGE:
        opens = (flags & FLAG_TOOL_RESULT) == 0
    else:
        raise ValueError(f"unknown grouping code {grouping}")
    if n == 0:
        return np.zeros(1, dtype=np.int64), np.zeros(0, dtype=np.int64)
    # No boundary after a reasoning item: it stays with the item it precedes.
    opens[1:] &= (flags[:-1] & FLAG_GLUES_NEXT) == 0
    opens[0] = True
    starts = np.flatnonzero(opens).astype(np.int64)
    offsets = np.append(starts, np.int64(n))
    group_chars = np.add.reduceat(chars, starts).astype(np.int64)
    return offsets, group_chars


def trim_cut(group_chars: Int64Array, keep_groups: int, target_chars: int) -> int:
    """First group kept by a trim: the longest suffix of whole groups within ``target_chars``,
    but never fewer than ``keep_groups`` groups (nor more than there are)."""
    keep_groups, target_chars = _c_int(keep_groups), _c_int(target_chars)
    if keep_groups < 0 or target_chars < 0:
        raise ValueError("keep_groups and target_chars must be >= 0")
    group_chars = _c_array(group_chars, np.int64)
    n = len(group_chars)
    if n and int(group_chars.min()) < 0:
        raise ValueError("group_chars must be >= 0")
    # Suffix sums are non-decreasing (chars >= 0), so the fitting suffix is a binary search.
    suffix = np.cumsum(group_chars[::-1])
    # Sums of values >= 0 that pass 2**63 wrap below zero where they first do.
    if n and bool(np.any(suffix < 0)):
        raise ValueError("group_chars add up to more than 64 bits hold")
    kept = int(np.searchsorted(suffix, target_chars, side="right"))
    return n - max(kept, min(keep_groups, n))


def tool_pairing(
    messages: list[Any], flags: npt.NDArray[np.uint8]
) -> list[tuple[int, str, str | None]]:
    """Tool results without an earlier call and calls without a later result.

    Returns ``(index, code, id)`` sorted by index (stable), code ``orphan-tool-result`` (a result
    whose id no earlier call made, or a result without an id) or ``unanswered-tool-call`` (a call
    with no later result; a call id used again needs a result of its own). Only messages flagged
    as calls or results are read.
    """
    if not isinstance(messages, list):
        raise TypeError(f"expected a list of messages, got {type(messages).__name__}")
    flags = _c_array(flags, np.uint8)
    if len(flags) > list.__len__(messages):
        raise ValueError(
            f"flags and messages differ in length ({len(flags)} != {list.__len__(messages)})"
        )
    called: set[str] = set()
    pending: dict[str, int] = {}
    found: list[tuple[int, str, str | None]] = []
    for i in np.flatnonzero(flags & (FLAG_TOOL_CALLS | FLAG_TOOL_RESULT)).tolist():
        message = list.__getitem__(messages, i)
        if not isinstance(message, dict):
            raise TypeError(f"message {i} is not a dict: flags do not belong to these messages")
        f = int(flags[i])
        if f & FLAG_TOOL_RESULT:
            for cid in result_ids(message):
                if cid is not None and cid in pending:
                    del pending[cid]
                elif cid is None or cid not in called:
                    found.append((i, "orphan-tool-result", cid))
        if f & FLAG_TOOL_CALLS:
            for cid in call_ids(message):
                called.add(cid)
                if cid not in pending:
                    pending[cid] = i
    found += [(i, "unanswered-tool-call", cid) for cid, i in pending.items()]
    found.sort(key=lambda item: item[0])
    return found


def _unknown_roles(messages: list[Any], flags: npt.NDArray[np.uint8],
                   fragment_id: str | None = None) -> list[tuple[int, str, int]]:
    """``(first index, role, messages)`` of each role the accounting does not know, in the order
    of first appearance; only the messages flagged ``FLAG_UNKNOWN_ROLE`` are read. A flagged
    message that no longer holds a string role changed after it was measured: an error."""
    if len(flags) > list.__len__(messages):
        raise ValueError(
            f"flags and messages differ in length ({len(flags)} != {list.__len__(messages)})"
        )
    found: dict[str, list[int]] = {}
    for i in np.flatnonzero(flags & FLAG_UNKNOWN_ROLE).tolist():
        message = list.__getitem__(messages, i)
        role = fields(message).get("role") if isinstance(message, dict) else None
        if not isinstance(role, str):
            raise ContextPlanError.for_message(
                i, "the message changed while it was measured (it no longer holds a string "
                "role)", fragment_id=fragment_id, field="role", code="changed-while-measured")
        role = exact_str(role)
        entry = found.get(role)
        if entry is None:
            found[role] = [i, 1]
        else:
            entry[1] += 1
    return [(first, role, count) for role, (first, count) in found.items()]


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

    def tail(self, start: int) -> Measure:
        """The measure of ``messages[start:]``."""
        start = _c_int(start, "Py_ssize_t")
        if start < 0 or start > self.messages:
            raise ValueError(f"start {start} is outside 0..{self.messages}")
        return Measure._of(tuple(a[start:] for a in self._arrays))  # type: ignore[arg-type]

    def groups(self, grouping: int) -> int:
        """How many groups the messages form."""
        grouping = _c_int(grouping, "int")
        _roles, chars, flags, _opaque = self._arrays
        return len(group_offsets(flags, chars, grouping)[1])

    def pairing(self, messages: list[Any], start: int = 0) -> list[tuple[int, str, str | None]]:
        """:func:`tool_pairing` of ``messages[start:]`` with these flags from ``start`` on
        (indices relative to ``start``)."""
        start = _c_int(start, "Py_ssize_t")
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
        return tool_pairing(list.__getitem__(messages, slice(start, None)), flags[start:])

    def unknown_roles(self, messages: list[Any], start: int = 0,
                      fragment_id: str | None = None) -> list[tuple[int, str, int]]:
        """Each role of ``messages[start:]`` the accounting does not know: ``(first index,
        role, messages)`` in the order of first appearance (indices relative to ``start``);
        ``fragment_id`` names the list in the error a message changed since measured raises."""
        start = _c_int(start, "Py_ssize_t")
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
        return _unknown_roles(list.__getitem__(messages, slice(start, None)), flags[start:],
                              fragment_id)

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
        grouping, keep_groups = _c_int(grouping, "int"), _c_int(keep_groups)
        if not isinstance(messages, list):
            raise TypeError(f"expected a list of messages, got {type(messages).__name__}")
        if keep_groups < 0:
            raise ValueError("keep_groups must be >= 0")
        if target_chars is not None:
            target_chars = _c_int(target_chars)
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


def reduce_plan(
    fragments: list[Any], steps: tuple[tuple[str, int, int, int], ...], trigger_chars: int,
    watermark_chars: int, fragment_type: type | None = None,
    protected_kinds: frozenset[str] | None = None,
) -> tuple[Any, ...] | None:
    """The default ``validate``, or a ``reduce`` whose steps are all trims by chars, of a whole
    plan in one call: what the pipeline's measure, reduce, report and assemble compute for it.

    ``fragments``: the plan's fragments (``id``, ``messages``, ``text`` and, for text,
    ``assembled_role`` are read once each, in order); ``steps``: ``(fragment id, grouping,
    keep_groups, target_chars)`` per trim; ``trigger_chars`` and ``watermark_chars``: the
    policy's, ``-1`` for none. Returns ``(triggered, before, after, kept, steps, warnings,
    input, ids, totals)``: ``(chars, messages, opaque_parts)`` per fragment before and after;
    the new
    message list of each fragment a trim changed (``None`` for the others); ``(status, reason,
    chars_before, chars_after, groups_before, groups_after, messages_removed)`` per step;
    ``(fragment index, message index, code, detail)`` per warning of the result: first an
    ``unknown-role`` for each role of a fragment the accounting does not know (at its first
    message, detail ``(role, messages)``), then the pairing warnings (detail: the tool call id);
    the assembled input; the fragment ids; the plan's chars, messages and opaque parts
    before and after, the messages and groups the applied trims removed, and whether the
    chars watermark is met after. A step that runs on a fragment holding no message is skipped
    (``fragment-empty``), and so is one on a ``history`` the plan does not hold
    (``fragment-absent``); any other fragment a step names must be there. With
    ``fragment_type``, ``None`` when a fragment is not exactly of that type (fields are then
    read from the ``__dict__``, as validated); with ``protected_kinds``, ``None`` when a step's
    fragment is missing (but for the history), protected (its kind is one of them, or it is
    marked ``protected``) or holds text.
    """
    trigger_chars, watermark_chars = _c_int(trigger_chars), _c_int(watermark_chars)
    steps = _c_tuple(steps, "steps")
    if not isinstance(fragments, list):
        raise TypeError(f"expected a list of fragments, got {type(fragments).__name__}")
    n = list.__len__(fragments)
    if fragment_type is not None and any(
        type(f) is not fragment_type for f in list.copy(fragments)
    ):
        return None
    ids: list[str] = []
    lists: list[Any] = []
    texts: list[Any] = []
    for i in range(n):
        if i >= list.__len__(fragments):
            raise ValueError("the fragment list changed while it was read")
        f = list.__getitem__(fragments, i)
        if fragment_type is not None:
            d = f.__dict__
            fid, messages, text = d["id"], d["messages"], d["text"]
        else:
            fid, messages, text = f.id, f.messages, f.text
        ids.append(fid)
        lists.append(messages)
        texts.append((f.assembled_role, text) if messages is None else None)
    if protected_kinds is not None:
        for step in steps:
            if step[0] not in ids:
                if step[0] == "history":  # left out of a transcript: the step is skipped
                    continue
                return None
            i = ids.index(step[0])
            # The list as it is now (reading a fragment may have run code that changed it).
            f = list.__getitem__(fragments, i) if i < list.__len__(fragments) else None
            if f is None or lists[i] is None:
                return None
            if fragment_type is not None:
                d = f.__dict__
                if d["kind"] in protected_kinds or d["protected"] is True:
                    return None
            elif f.kind in protected_kinds or f.protected is True:
                return None
    return _reduce(ids, lists, texts, steps, trigger_chars, watermark_chars)


def fused_result(
    result_type: Any, make: Any, plan: Any, prepared: Any, fragments: list[Any],
    steps: tuple[tuple[str, int, int, int], ...], trigger_chars: int, watermark_chars: int,
    fragment_type: type | None = None, protected_kinds: frozenset[str] | None = None,
) -> Any:
    """:func:`reduce_plan` as a result whose records are made when first read: ``None`` when
    it declines, else ``result_type.__new__(result_type)`` (a ``ContextResult``) with ``_input``
    the assembled input, ``_make`` ``(make, plan, prepared, raw)`` (``raw``: what
    :func:`reduce_plan` returned) and ``_plan``, ``_records`` and ``_report`` ``None``."""
    raw = reduce_plan(fragments, steps, trigger_chars, watermark_chars, fragment_type,
                      protected_kinds)
    if raw is None:
        return None
    if not isinstance(result_type, type):
        raise TypeError(f"expected a class, got {type(result_type).__name__}")
    result = cast(Any, result_type).__new__(result_type)
    result._input = raw[6]
    result._make = (make, plan, prepared, raw)
    result._plan = result._records = result._report = None
    return result


def split_transcript(messages: list[Any]) -> tuple[int, int]:
    """Where ``ContextPlan.from_messages`` splits a transcript: ``(head, tail)``, so that
    ``messages[:head]`` are the leading ``system``/``developer`` messages, ``messages[tail:]``
    the final ``user`` question (one that carries no tool results), the rest the history. Only
    the messages read to decide are checked (each a dict with a string role)."""
    if not isinstance(messages, list):
        raise ContextPlanError(
            f"expected a list of messages, got {type(messages).__name__}",
            path="messages", code="invalid-messages",
        )

    def role(i: int) -> str | None:
        m = list.__getitem__(messages, i)
        if not isinstance(m, dict):
            raise ContextPlanError.for_message(
                i, f"expected a message object (dict), got {type(m).__name__}",
            )
        f = fields(m)  # keys by their text, as measuring reads them
        value = f.get("role")
        item = item_code(f)
        if item != ITEM_MESSAGE and (item != ITEM_UNKNOWN or not isinstance(value, str)):
            return None  # a Responses item that is not a message: neither system nor question
        if not isinstance(value, str):
            raise ContextPlanError.for_message(
                i, "expected a string role", field="role", code="invalid-role",
            )
        return exact_str(value)

    n = list.__len__(messages)
    head = 0
    while head < n and ROLE_CODES.get(role(head) or "") in INSTRUCTION_ROLE_CODES:
        head += 1
    tail = n
    if tail > head and role(tail - 1) == "user" and not _carries_tool_results(
        list.__getitem__(messages, tail - 1)
    ):
        tail -= 1
    return head, tail


def _carries_tool_results(message: dict[str, Any]) -> bool:
    content = fields(message).get("content")
    if not isinstance(content, list):
        return False
    for part in list.copy(content):
        if isinstance(part, dict):
            ptype = fields(part).get("type")
            if isinstance(ptype, str) and PART_CODES.get(exact_str(ptype)) == PART_TOOL_RESULT:
                return True
    return False


def reduce_transcript(
    messages: list[Any], steps: tuple[tuple[str, int, int, int], ...], trigger_chars: int,
    watermark_chars: int,
) -> tuple[Any, ...]:
    """:func:`reduce_plan` of ``ContextPlan.from_messages(messages)`` without building the
    plan: fragments ``system``, ``history`` and ``question`` as :func:`split_transcript` cuts
    them, each there only when it holds a message."""
    trigger_chars, watermark_chars = _c_int(trigger_chars), _c_int(watermark_chars)
    steps = _c_tuple(steps, "steps")
    head, tail = split_transcript(messages)
    ids: list[str] = []
    lists: list[Any] = []
    n = list.__len__(messages)
    if head:
        ids.append("system")
        lists.append(list.__getitem__(messages, slice(None, head)))
    if tail > head:
        ids.append("history")
        lists.append(list.__getitem__(messages, slice(head, tail)))
    if tail < n:
        ids.append("question")
        lists.append(list.__getitem__(messages, slice(tail, None)))
    return _reduce(ids, lists, [None] * len(ids), steps, trigger_chars, watermark_chars)


def _reduce(
    ids: list[str], lists: list[Any], texts: list[Any],
    steps: tuple[tuple[str, int, int, int], ...], trigger_chars: int, watermark_chars: int,
) -> tuple[Any, ...]:
    measures: list[Any] = []
    for fid, messages, text in zip(ids, lists, texts, strict=True):
        if messages is None:
            if not isinstance(text[1], str):
                raise TypeError(f"fragment {fid!r}: expected a str text")
            measures.append((len(exact_str(text[1])), 1, 0, None))
        else:
            m = measure(messages, fid)
            measures.append((m.chars, m.messages, m.opaque_parts, m))
    before = [m[:3] for m in measures]
    chars = sum(m[0] for m in measures)
    fired = trigger_chars >= 0 and chars > trigger_chars
    kept: list[Any] = [None] * len(ids)
    done: list[tuple[Any, ...]] = []
    for step in steps:
        fid, grouping, keep_groups, target = _c_unpack(step, 4)
        grouping, keep_groups, target = _c_int(grouping, "int"), _c_int(keep_groups), _c_int(
            target)
        if keep_groups < 0:
            raise ValueError("keep_groups must be >= 0")
        if target < 0:
            raise ValueError("target_chars must be >= 0")
        if not fired or not (watermark_chars >= 0 and chars > watermark_chars):
            done.append(("skipped", "not-triggered" if not fired else "target-reached",
                         None, None, None, None, 0))
            continue
        if fid not in ids:
            if fid != "history":
                raise ValueError(f"a step names fragment {fid!r}, which the plan does not hold")
            done.append(("skipped", "fragment-absent", None, None, None, None, 0))
            continue
        i = ids.index(fid)
        m = measures[i][3]
        if m is None:
            raise TypeError(f"expected a list of messages, got {type(lists[i]).__name__}")
        if m.messages == 0:
            done.append(("skipped", "fragment-empty", None, None, None, None, 0))
            continue
        first, cut, ngroups = m.cut(lists[i], grouping, keep_groups, target)
        if cut == 0:
            reason = "within-target" if m.chars <= target else "keep-groups-floor"
            done.append(("unchanged", reason, m.chars, m.chars, ngroups, ngroups, 0))
            continue
        tail = m.tail(cut)
        lists[i] = kept[i] = list.__getitem__(lists[i], slice(cut, None))
        measures[i] = (tail.chars, tail.messages, tail.opaque_parts, tail)
        reason = "trimmed" if tail.chars <= target else "keep-groups-floor"
        done.append(("applied", reason, m.chars, tail.chars, ngroups, ngroups - first, cut))
        chars += tail.chars - m.chars
    warnings: list[tuple[int, int, str, Any]] = [
        (i, first, "unknown-role", (role, count))
        for i, m in enumerate(measures) if m[3] is not None and m[3].unknown_role
        for first, role, count in m[3].unknown_roles(lists[i], 0, ids[i])
    ]
    warnings += [
        (i, index, code, cid)
        for i, m in enumerate(measures) if m[3] is not None and m[3].tool_traffic
        for index, code, cid in m[3].pairing(lists[i])
    ]
    assembled: list[Any] = []
    for i, messages in enumerate(lists):
        if messages is None:
            role, text = texts[i]
            assembled.append({"role": role, "content": text})
        else:
            assembled.extend(messages if type(messages) is list else list.copy(messages))
    # Without steps nothing changed: the figures after are the figures before (one list).
    after = [m[:3] for m in measures] if steps else before
    applied = [d for d in done if d[0] == "applied"]
    plan_before = tuple(sum(f[k] for f in before) for k in range(3))
    plan_after = plan_before if after is before else tuple(
        sum(f[k] for f in after) for k in range(3))
    a_chars = plan_after[0]
    totals = (*plan_before, *plan_after,
              sum(d[6] for d in applied), sum(d[4] - d[5] for d in applied),
              not (watermark_chars >= 0 and a_chars > watermark_chars))
    return fired, before, after, kept, done, warnings, assembled, ids, totals


# ---------------------------------------------------------------------------------------------
# Columnar path (Arrow layout)


def _check_offsets(offsets: npt.NDArray[Any], limit: int, what: str) -> None:
    if offsets.ndim != 1 or len(offsets) == 0:
        raise ValueError(f"{what}: expected a 1-d offsets array with at least one entry")
    if offsets.dtype not in (np.int32, np.int64):
        raise TypeError(f"{what}: expected int32 or int64 offsets, got {offsets.dtype}")
    # (Compared, not subtracted: a difference of int32 or int64 offsets can wrap.)
    if int(offsets[0]) < 0 or int(offsets[-1]) > limit or bool(
            np.any(offsets[1:] < offsets[:-1])):
        raise ValueError(f"{what}: offsets must be non-decreasing and within 0..{limit}")


class Utf8Error(ValueError):
    """Bytes that are not UTF-8: ``index`` is the string's (or part's) place in the array it was
    read from, ``byte`` the absolute offset of the first byte of the invalid sequence."""

    def __init__(self, message: str, index: int, byte: int) -> None:
        super().__init__(message)
        self.index, self.byte = index, byte


def _utf8_error(row: int, pos: int) -> Utf8Error:
    return Utf8Error(f"invalid UTF-8 in string {row} at byte {pos}", row, pos)


def _string_counts(data: Any, offsets: Any, what: str,
                   count: Callable[[str], int]) -> Int64Array:
    # ``count`` of each string, decoded strictly (the error names the string and the byte).
    buf = np.frombuffer(data, dtype=np.uint8)
    offsets = np.array(np.asarray(offsets), copy=True)  # read once: checked as it is used
    _check_offsets(offsets, len(buf), what)
    raw = memoryview(buf.tobytes()) if not buf.flags.c_contiguous else memoryview(buf.data)
    bounds = offsets.tolist()
    out = np.zeros(len(bounds) - 1, dtype=np.int64)
    for r in range(len(bounds) - 1):
        start, end = bounds[r], bounds[r + 1]
        try:
            out[r] = count(str(raw[start:end], "utf-8"))
        except UnicodeDecodeError as exc:
            raise _utf8_error(r, start + exc.start) from None
    return out


def utf8_lengths(data: Any, offsets: npt.NDArray[Any]) -> Int64Array:
    """Code points of each string of an Arrow string array (UTF-8 ``data`` + ``offsets``).

    Invalid UTF-8 raises ``ValueError`` naming the row and the absolute offset of the first
    byte of the invalid sequence. (The compiled kernel creates no Python string; the twin lets
    Python's strict decoder validate, which reports the same byte.)
    """
    return _string_counts(data, offsets, "utf8_lengths", len)


def json_string_lengths(data: Any, offsets: npt.NDArray[Any]) -> Int64Array:
    """Chars of each string of an Arrow string array as compact JSON writes it: its code points,
    the two quotes and what escaping adds (``json.dumps(s, ensure_ascii=False)``)."""
    return _string_counts(data, offsets, "json_string_lengths",
                          lambda text: len(COMPACT_JSON.encode(text)))


def _positions(values: Any, what: str, name: str) -> list[int]:
    values = np.asarray(values)
    if values.ndim != 1:
        raise ValueError(f"{what}: expected a 1-d array of {name}")
    if values.dtype.kind not in "iu":
        raise TypeError(f"{what}: expected integer {name}, got {values.dtype}")
    if values.dtype.kind == "u" and values.size and int(values.max()) >= 1 << 63:
        raise ValueError(f"{what}: {name} must be below 2**63")
    return [int(v) for v in values.astype(np.int64).tolist()]


class pooled_arrays:
    """``with pooled_arrays():`` on the compiled kernel, numpy's large arrays created in the
    section come from a pool that keeps freed blocks for the next one; here numpy's own
    allocator serves them (the results are the same)."""

    def __init__(self) -> None:
        self._entered = False

    def __enter__(self) -> pooled_arrays:
        if self._entered:
            raise RuntimeError("pooled_arrays: this section is already entered")
        self._entered = True
        return self

    def __exit__(self, *exc: object) -> None:
        self._entered = False


def pool_stats() -> dict[str, Any]:
    """The pool's state (the twin has none)."""
    return {"active": False, "blocks": 0, "bytes": 0, "hits": 0, "misses": 0, "limit": 0}


def release_pool() -> None:
    """Give back every block the pool holds (the twin holds none)."""


def gather_bytes(src: Any, starts: Any, stops: Any, out: Any) -> None:
    """Copy ``src[starts[i]:stops[i]]`` for each ``i``, one after the other, into ``out`` (a
    writable buffer of exactly their total size)."""
    buf = np.frombuffer(src, dtype=np.uint8)
    dst = np.frombuffer(out, dtype=np.uint8)
    if not dst.flags.writeable:
        raise ValueError("gather_bytes: out must be a writable buffer")
    a = _positions(starts, "gather_bytes", "starts")
    b = _positions(stops, "gather_bytes", "stops")
    if len(a) != len(b):
        raise ValueError(f"gather_bytes: {len(a)} starts but {len(b)} stops")
    limit, size, total = len(buf), len(dst), 0
    for i, (start, stop) in enumerate(zip(a, b, strict=True)):
        if start < 0 or start > stop or stop > limit:
            raise ValueError(f"gather_bytes: range {i} is {start}..{stop}, expected "
                             f"0 <= start <= stop <= {limit}")
        total += stop - start
        if total > size:
            break
    if total != size:
        raise ValueError(f"gather_bytes: the ranges hold {total} bytes, out holds {size}")
    at = 0
    for start, stop in zip(a, b, strict=True):
        dst[at: at + stop - start] = buf[start:stop]
        at += stop - start


def _offsets_array(offsets: Any, entries: int, what: str, name: str) -> npt.NDArray[Any]:
    offsets = np.asarray(offsets)
    if offsets.ndim != 1:
        raise ValueError(f"{what}: expected a 1-d array of {name}")
    if offsets.dtype not in (np.int32, np.int64):
        raise TypeError(f"{what}: expected int32 or int64 {name}, got {offsets.dtype}")
    if len(offsets) < 1 or (entries >= 0 and len(offsets) != entries):
        want = "at least 1" if entries < 0 else str(entries)
        raise ValueError(f"{what}: expected {want} {name}, got {len(offsets)}")
    return np.array(offsets, copy=True)


def _ranges_checked(starts: Any, lengths: Any, limit: int,
                    what: str) -> tuple[list[int], list[int], int]:
    s = _positions(starts, what, "starts")
    n = _positions(lengths, what, "lengths")
    if len(s) != len(n):
        raise ValueError(f"{what}: {len(s)} starts but {len(n)} lengths")
    total = 0
    for j, (a, length) in enumerate(zip(s, n, strict=True)):
        if a < 0 or length < 0 or a > limit - length:
            raise ValueError(f"{what}: range {j} is {a}+{length}, expected within 0..{limit}")
        if length > 2**63 - 1 - total:
            raise ValueError(f"{what}: the ranges hold more than 2**63 elements")
        total += length
    return s, n, total


def gather_offsets(offsets: Any, starts: Any,
                   lengths: Any) -> tuple[npt.NDArray[Any], Int64Array, Int64Array]:
    """The offsets of the elements in the ranges ``[starts[j], starts[j] + lengths[j])`` of a
    list or string array (``offsets``: int32 or int64), laid end to end from 0 in the same
    dtype; and what each range spans of the child or data: ``(offsets, lo, hi)``."""
    o = _offsets_array(offsets, -1, "gather_offsets", "offsets")
    s, n, total = _ranges_checked(starts, lengths, len(o) - 1, "gather_offsets")
    limit = 2**63 - 1 if o.dtype == np.int64 else 2**31 - 1
    out = np.zeros(total + 1, dtype=np.int64)
    lo = np.zeros(len(s), dtype=np.int64)
    hi = np.zeros(len(s), dtype=np.int64)
    at, base = 0, 0
    for j, (a, length) in enumerate(zip(s, n, strict=True)):
        seg = [int(v) for v in o[a: a + length + 1].tolist()]
        first = seg[0]
        if first < 0:
            raise ValueError(f"gather_offsets: the offsets of range {j} are negative or "
                             f"decrease")
        prev = first
        for cur in seg[1:]:
            if cur < prev:
                raise ValueError(f"gather_offsets: the offsets of range {j} are negative or "
                                 f"decrease")
            if cur - first > limit - base:
                raise ValueError(f"gather_offsets: the gathered values need more than "
                                 f"offsets of {o.dtype} can address")
            prev = cur
        out[at + 1: at + length + 1] = np.asarray(seg[1:], dtype=np.int64) - first + base
        at += length
        lo[j], hi[j] = first, prev
        base += prev - first
    return out.astype(o.dtype), lo, hi


def gather_bits(bitmap: Any, bit_offset: Any, starts: Any,
                lengths: Any) -> tuple[npt.NDArray[np.uint8], int]:
    """The bits of elements in the ranges ``[starts[j], starts[j] + lengths[j])`` of a bitmap
    (least significant bit first, element 0 at bit ``bit_offset``), packed from bit 0: ``(bytes
    as a uint8 array, how many bits are set)``."""
    bit_offset = _c_int(bit_offset, "Py_ssize_t")
    buf = np.frombuffer(bitmap, dtype=np.uint8)
    if bit_offset < 0:
        raise ValueError(f"gather_bits: bit_offset must be >= 0, got {bit_offset}")
    limit = len(buf) * 8 - bit_offset
    s, n, total = _ranges_checked(starts, lengths, max(limit, 0), "gather_bits")
    if total == 0:
        return np.zeros(0, dtype=np.uint8), 0
    bits = np.unpackbits(buf, bitorder="little")
    picked = np.concatenate([bits[bit_offset + a: bit_offset + a + length]
                             for a, length in zip(s, n, strict=True)])
    return np.packbits(picked, bitorder="little"), int(np.count_nonzero(picked))


def _flags_array(values: Any, n: int, what: str, name: str) -> npt.NDArray[np.bool_]:
    values = np.asarray(values)
    if values.ndim != 1 or values.dtype != np.bool_:
        raise TypeError(f"{what}: expected a 1-d bool array of {name}")
    if len(values) != n:
        raise ValueError(f"{what}: expected {n} {name}, got {len(values)}")
    return np.array(values, copy=True)


def string_codes(data: Any, offsets: Any, names: Any, nulls: Any = None) -> npt.NDArray[np.int8]:
    """Per string of an Arrow string array, the index in ``names`` (a tuple of bytes) of the
    one it equals, else -1 (and -1 where ``nulls`` is set)."""
    buf = np.frombuffer(data, dtype=np.uint8)
    o = _offsets_array(offsets, -1, "string_codes", "offsets")
    n = len(o) - 1
    if type(names) is not tuple or not 0 < len(names) <= 127 or any(
            type(x) is not bytes for x in names):
        raise TypeError("string_codes: names must be a tuple of 1 to 127 bytes")
    nul = _flags_array(nulls, n, "string_codes", "nulls") if nulls is not None else None
    raw = buf.tobytes()
    table: dict[bytes, int] = {}
    for k, name in enumerate(names):
        table.setdefault(name, k)
    out = np.full(n, -1, dtype=np.int8)
    bounds = [int(v) for v in o.tolist()]
    for r in range(n):
        a, b = bounds[r], bounds[r + 1]
        if a < 0 or a > b or b > len(raw):
            raise ValueError(f"string_codes: offsets must be non-decreasing and within "
                             f"0..{len(raw)}")
        if nul is not None and nul[r]:
            continue
        out[r] = table.get(raw[a:b], -1)
    return out


def string_ids(sources: Any) -> tuple[tuple[Int64Array, ...], Int64Array, Int64Array]:
    """Codes for the strings of several Arrow string arrays, equal strings one code: in order
    of first appearance over the sources in turn, -1 for a null. ``sources``: a tuple of
    ``(data, offsets, nulls or None, at or None)``, ``at`` the positions of the strings to code
    (all of them for None). Returns ``(codes, first_source, first_index)``: a tuple of int64
    arrays, one per source, and for each code the source and the position in it of its first
    string."""
    if type(sources) is not tuple:
        raise TypeError("string_ids: sources must be a tuple of (data, offsets, nulls, at)")
    table: dict[bytes, int] = {}
    first_source: list[int] = []
    first_index: list[int] = []
    checked = []
    for s, item in enumerate(sources):
        if type(item) is not tuple or len(item) != 4:
            raise TypeError(f"string_ids: source {s} must be a tuple of "
                            f"(data, offsets, nulls, at)")
        data, offsets, nulls, positions = item
        raw = np.frombuffer(data, dtype=np.uint8).tobytes()
        o = _offsets_array(offsets, -1, "string_ids", "offsets")
        n = len(o) - 1
        nul = _flags_array(nulls, n, "string_ids", "nulls") if nulls is not None else None
        if positions is not None:
            at = _positions(positions, "string_ids", "positions")
            for r in at:
                if r < 0 or r >= n:
                    raise ValueError(f"string_ids: position {r} of source {s} is outside "
                                     f"0..{n - 1}")
        else:
            at = list(range(n))
        checked.append((raw, [int(v) for v in o.tolist()], nul, at))
    codes = []
    for s, (raw, bounds, nul, at) in enumerate(checked):
        out = np.empty(len(at), dtype=np.int64)
        for j, r in enumerate(at):
            if nul is not None and nul[r]:
                out[j] = -1
                continue
            a, b = bounds[r], bounds[r + 1]
            if a < 0 or a > b or b > len(raw):
                raise ValueError(f"string_ids: the offsets of source {s} must be "
                                 f"non-decreasing and within its data")
            key = raw[a:b]
            code = table.get(key)
            if code is None:
                code = table[key] = len(table)
                first_source.append(s)
                first_index.append(r)
            out[j] = code
        codes.append(out)
    return (tuple(codes), np.asarray(first_source, dtype=np.int64),
            np.asarray(first_index, dtype=np.int64))


def arrange_ids(messages: Any, codes: Any) -> tuple[Int64Array, Int64Array]:
    """Items of several sources merged by message: ``messages[s][j]`` is the message of item
    ``j`` of source ``s`` (non-decreasing in each source) and ``codes[s][j]`` its code. Within
    a message the items of the first source come first, each source's in their order (a
    stable sort by message of the sources in turn). Returns ``(messages, codes)``, merged."""
    if type(messages) is not tuple or type(codes) is not tuple or len(messages) != len(codes):
        raise TypeError("arrange_ids: messages and codes must be tuples of one length")
    all_messages, all_codes = [np.zeros(0, dtype=np.int64)], [np.zeros(0, dtype=np.int64)]
    for s, (msg, code) in enumerate(zip(messages, codes, strict=True)):
        msg_a = np.asarray(_positions(msg, "arrange_ids", "messages"), dtype=np.int64)
        code_a = np.asarray(_positions(code, "arrange_ids", "codes"), dtype=np.int64)
        if len(msg_a) != len(code_a):
            raise ValueError(f"arrange_ids: source {s} has {len(msg_a)} messages but "
                             f"{len(code_a)} codes")
        if len(msg_a) and (msg_a[0] < 0 or bool(np.any(msg_a[1:] < msg_a[:-1]))):
            raise ValueError(f"arrange_ids: the messages of source {s} must be >= 0 and "
                             f"non-decreasing")
        all_messages.append(msg_a)
        all_codes.append(code_a)
    msg_all = np.concatenate(all_messages)
    order = np.argsort(msg_all, kind="stable")
    return msg_all[order], np.concatenate(all_codes)[order]


# part_chars: the fields it reads, in order. A part whose field is missing or null is one only
# the object path can measure for text and thinking, and counts 0 for a result's content and a
# tool_use's name.
PART_FIELDS = ("text", "content", "name", "thinking")
_FIELD_NEEDED = (True, False, False, True)


def part_chars(part_offsets: Any, kinds: Any, ntext: Any, fields: Any, extra: Any = None,
               unreadable: Any = None) -> tuple[Int64Array, npt.NDArray[np.uint8],
                                                npt.NDArray[np.bool_]]:
    """Per message, the chars of its content parts, the flags its parts set and whether one of
    them only the object path can measure: ``(chars, flags, bad)``.

    ``part_offsets``: the messages' content lists (``m + 1`` offsets into the ``k`` parts).
    ``kinds``: each part's kind (int8): below ``ntext`` a text part, ``ntext`` a tool_result,
    ``ntext + 1`` a tool_use, ``ntext + 2`` a thinking block, anything else opaque. ``fields``:
    for each name of ``PART_FIELDS``, ``None`` (missing, or not text) or ``(data, offsets,
    nulls)`` of a string child (``nulls``: a bool array, or ``None``). ``extra``: chars added
    per part, measured elsewhere (int64), and ``unreadable``: parts only the object path can
    measure (bool); either may be ``None``. Every string of a field given that is not null is
    checked as UTF-8, whatever the kind of its part (a ``Utf8Error`` names the field, the part
    and the byte); only the field of the part's kind is counted."""
    ntext = _c_int(ntext, "Py_ssize_t")
    if not 0 <= ntext <= 125:  # kinds are int8: up to ntext + 2
        raise ValueError(f"part_chars: ntext must lie in 0..125, got {ntext}")
    o = _offsets_array(part_offsets, -1, "part_chars", "part offsets")
    m = len(o) - 1
    kinds = np.asarray(kinds)
    if kinds.ndim != 1 or kinds.dtype != np.int8:
        raise TypeError("part_chars: expected a 1-d int8 array of kinds")
    kind = [int(v) for v in kinds.tolist()]
    k = len(kind)
    if type(fields) is not tuple or len(fields) != 4:
        raise TypeError(f"part_chars: fields must be a tuple of 4 (one per {PART_FIELDS})")
    given: list[tuple[memoryview, list[int], Any] | None] = []
    for x, spec in enumerate(fields):
        if spec is None:
            given.append(None)
            continue
        if type(spec) is not tuple or len(spec) != 3:
            raise TypeError(f"part_chars: {PART_FIELDS[x]}: expected (data, offsets, nulls) "
                            f"or None")
        fdata = np.frombuffer(spec[0], dtype=np.uint8)
        foffs = _offsets_array(spec[1], k + 1, "part_chars", f"{PART_FIELDS[x]} offsets")
        fnul = None
        if spec[2] is not None:
            fnul = _flags_array(spec[2], k, "part_chars", f"{PART_FIELDS[x]} nulls").tolist()
        raw = memoryview(fdata.tobytes())
        given.append((raw, [int(v) for v in foffs.tolist()], fnul))
    add = None
    if extra is not None:
        extra_a = np.asarray(extra)
        if extra_a.ndim != 1 or extra_a.dtype != np.int64 or len(extra_a) != k:
            raise TypeError(f"part_chars: extra must be a 1-d int64 array of {k}")
        add = [int(v) for v in extra_a.tolist()]
    unread = None
    if unreadable is not None:
        unread = _flags_array(unreadable, k, "part_chars", "unreadable").tolist()
    chars = np.zeros(m, dtype=np.int64)
    flags = np.zeros(m, dtype=np.uint8)
    bad = np.zeros(m, dtype=np.bool_)
    bounds = [int(v) for v in o.tolist()]
    for r in range(m):
        a, b = bounds[r], bounds[r + 1]
        if a < 0 or a > b or b > k:
            raise ValueError(f"part_chars: part offsets must be non-decreasing and within "
                             f"0..{k}")
        total, fl, unreadable_part = 0, 0, False
        for p in range(a, b):
            if unread is not None and unread[p]:
                unreadable_part = True
            if add is not None:
                if add[p] < 0 or add[p] > 2**63 - 1 - total:
                    raise ValueError("part_chars: extra must be >= 0, and a message's chars "
                                     "below 2**63")
                total += add[p]
            kd = kind[p]
            x = -1  # the field this part's kind counts (none for an opaque part)
            if kd < 0 or kd > ntext + 2:
                pass
            elif kd < ntext:
                x = 0
            elif kd == ntext:
                x = 1
                fl |= FLAG_TOOL_RESULT
            elif kd == ntext + 1:
                x = 2
                fl |= FLAG_TOOL_CALLS
            else:
                x = 3
            # Every string the part holds in a field given is UTF-8, whatever its kind; only
            # its kind's field is counted.
            for y, field in enumerate(given):
                if field is None or (field[2] is not None and field[2][p]):
                    if y == x and _FIELD_NEEDED[x]:
                        unreadable_part = True
                    continue
                raw, bounds_of = field[0], field[1]
                lo, hi = bounds_of[p], bounds_of[p + 1]
                if lo < 0 or lo > hi or hi > len(raw):
                    raise ValueError(f"part_chars: {PART_FIELDS[y]} offsets must be "
                                     f"non-decreasing and within 0..{len(raw)}")
                if lo == hi:
                    continue
                try:
                    count = len(str(raw[lo:hi], "utf-8"))
                except UnicodeDecodeError as exc:
                    raise Utf8Error(f"invalid UTF-8 in {PART_FIELDS[y]} of part {p} at byte "
                                    f"{lo + exc.start}", p, lo + exc.start) from None
                if y != x:
                    continue
                if count > 2**63 - 1 - total:
                    raise ValueError("part_chars: extra must be >= 0, and a message's chars "
                                     "below 2**63")
                total += count
        chars[r], flags[r], bad[r] = total, fl, unreadable_part
    return chars, flags, bad


def utf8_validate(data: Any, offsets: npt.NDArray[Any], nulls: Any = None) -> None:
    """Check that every string of an Arrow string array (UTF-8 ``data`` + ``offsets``) that is
    not null (``nulls``: a bool array, or ``None``) is UTF-8; ``Utf8Error`` names the first
    that is not and the absolute offset of the first byte of its invalid sequence.

    The bytes of all strings are checked at once, and each string's first byte: UTF-8 cut where
    no continuation byte begins is UTF-8 in every piece. Only when that fails are the strings
    checked one by one, for the first at fault (a null's bytes are not a string: bytes that are
    not UTF-8 there are no fault)."""
    buf = np.frombuffer(data, dtype=np.uint8)
    offsets = np.array(np.asarray(offsets), copy=True)  # read once: checked as it is used
    if offsets.ndim != 1 or len(offsets) == 0:
        raise ValueError("utf8_validate: expected a 1-d offsets array with at least one entry")
    if offsets.dtype not in (np.int32, np.int64):
        raise TypeError(f"utf8_validate: expected int32 or int64 offsets, got {offsets.dtype}")
    n = len(offsets) - 1
    skip = _flags_array(nulls, n, "utf8_validate", "nulls") if nulls is not None else None
    _check_offsets(offsets, len(buf), "utf8_validate")
    raw = memoryview(buf.tobytes()) if not buf.flags.c_contiguous else memoryview(buf.data)
    lo, hi = int(offsets[0]), int(offsets[-1])
    try:
        str(raw[lo:hi], "utf-8")
    except UnicodeDecodeError:
        pass
    else:
        starts = offsets[1:-1]
        starts = starts[starts < hi]
        if not np.any((buf[starts] & 0xC0) == 0x80):
            return
    bounds = offsets.tolist()
    for r in range(n):
        start, end = bounds[r], bounds[r + 1]
        if start == end or (skip is not None and skip[r]):
            continue
        try:
            str(raw[start:end], "utf-8")
        except UnicodeDecodeError as exc:
            raise _utf8_error(r, start + exc.start) from None


def role_codes_utf8(data: Any, offsets: npt.NDArray[Any]) -> npt.NDArray[np.int8]:
    """Role code of each string of an Arrow string array, without creating Python strings."""
    buf = np.frombuffer(data, dtype=np.uint8)
    offsets = np.array(np.asarray(offsets), copy=True)  # read once: checked as it is used
    _check_offsets(offsets, len(buf), "role_codes_utf8")
    raw = buf.tobytes()
    table = {name.encode(): code for name, code in ROLE_CODES.items()}
    n = len(offsets) - 1
    out = np.zeros(n, dtype=np.int8)
    for r in range(n):
        out[r] = table.get(raw[int(offsets[r]) : int(offsets[r + 1])], 0)
    return out


def _check_chars(list_offsets: npt.NDArray[Any], chars: Int64Array) -> None:
    """Chars below zero, or a row's chars adding up past 64 bits: a ValueError (a group sum
    that wrapped would cut in the wrong place)."""
    if not len(chars):
        return
    if int(chars.min()) < 0:
        raise ValueError("chars must be >= 0")
    if int(chars.max()) * len(chars) <= 2**63 - 1:  # no row can reach 64 bits
        return
    bounds = list_offsets.tolist()
    for r in range(len(bounds) - 1):
        if sum(chars[bounds[r]:bounds[r + 1]].tolist()) > 2**63 - 1:
            raise ValueError(f"the chars of row {r} add up to more than 64 bits hold")


def trim_cut_many(
    list_offsets: npt.NDArray[Any],
    flags: npt.NDArray[np.uint8],
    chars: Int64Array,
    keep_groups: int,
    target_chars: int,
    grouping: int = GROUP_USER_TURN,
) -> tuple[Int64Array, Int64Array, Int64Array, Int64Array]:
    """Group and cut many conversations at once.

    ``list_offsets`` (Arrow list offsets) delimit each conversation's messages in ``flags`` and
    ``chars``. Returns, per conversation: absolute index of the first kept message, groups
    before, groups kept, chars kept.
    """
    # The compiled kernel's conversions, in its order.
    keep_groups, target_chars = _c_int(keep_groups), _c_int(target_chars)
    grouping = _c_int(grouping, "int")
    flags = _c_array(flags, np.uint8)
    chars = _c_array(chars, np.int64)
    list_offsets = np.array(np.asarray(list_offsets), copy=True)  # read once
    _check_offsets(list_offsets, len(flags), "trim_cut_many")
    if len(chars) != len(flags):
        raise ValueError(f"flags and chars differ in length ({len(flags)} != {len(chars)})")
    if keep_groups < 0 or target_chars < 0:
        raise ValueError("keep_groups and target_chars must be >= 0")
    _check_chars(list_offsets, chars)
    if grouping not in (GROUP_USER_TURN, GROUP_MESSAGE):  # (even with no conversation)
        raise ValueError(f"unknown grouping code {grouping}")
    n = len(list_offsets) - 1
    first = np.zeros(n, dtype=np.int64)
    before = np.zeros(n, dtype=np.int64)
    after = np.zeros(n, dtype=np.int64)
    kept_chars = np.zeros(n, dtype=np.int64)
    for r in range(n):
        a, b = int(list_offsets[r]), int(list_offsets[r + 1])
        offsets, group_chars = group_offsets(flags[a:b], chars[a:b], grouping)
        g = trim_cut(group_chars, keep_groups, target_chars)
        ngroups = len(group_chars)
        first[r] = a + int(offsets[g])
        before[r] = ngroups
        after[r] = ngroups - g
        kept_chars[r] = int(group_chars[g:].sum())
    return first, before, after, kept_chars


# ---------------------------------------------------------------------------------------------
# Many transcripts at once (the columnar form of reduce_transcript)

ORPHAN_CODE = 0  # warning codes of reduce_rows: an orphan tool result ...
UNANSWERED_CODE = 1  # ... and an unanswered tool call


def _rows_pairing(
    lo: int, hi: int, flags: Any, call_offsets: Any, call_codes: Any, result_offsets: Any,
    result_codes: Any, orphans_only: bool = False,
) -> list[tuple[int, int, int]]:
    """:func:`tool_pairing` of messages ``lo:hi`` given as codes: ``(index, code, id)``."""
    called: set[int] = set()
    pending: dict[int, int] = {}
    found: list[tuple[int, int, int]] = []
    for i in range(lo, hi):
        f = int(flags[i])
        if f & FLAG_TOOL_RESULT:
            for j in range(int(result_offsets[i]), int(result_offsets[i + 1])):
                cid = int(result_codes[j])
                if cid >= 0 and cid in pending:
                    del pending[cid]
                elif cid < 0 or cid not in called:
                    found.append((i, ORPHAN_CODE, cid))
        if f & FLAG_TOOL_CALLS:
            for j in range(int(call_offsets[i]), int(call_offsets[i + 1])):
                cid = int(call_codes[j])
                if cid < 0:
                    continue
                called.add(cid)
                if cid not in pending:
                    pending[cid] = i
    if not orphans_only:
        found += [(i, UNANSWERED_CODE, cid) for cid, i in pending.items()]
        found.sort(key=lambda item: item[0])
    return found


def reduce_rows(
    list_offsets: Any, roles: Any, flags: Any, chars: Any, call_offsets: Any, call_codes: Any,
    result_offsets: Any, result_codes: Any, ncodes: int,
    steps: tuple[tuple[int, int, int], ...], trigger_chars: int, watermark_chars: int,
    skip: Any = None,
) -> tuple[Any, ...]:
    """:func:`reduce_transcript` of many transcripts held as arrays, in one call.

    ``list_offsets`` delimit each transcript's messages in ``roles``, ``flags`` and ``chars``
    (what :func:`measure_messages` gives); ``call_offsets`` delimit each message's tool call
    ids in ``call_codes`` (``-1``: a call without an id), ``result_offsets`` the ids each
    answers in ``result_codes`` (``-1``: a result without an id); only messages flagged as
    calls or results are read for them. Ids are codes below ``ncodes``. ``steps``:
    ``(grouping, keep_groups, target_chars)`` per trim of the history; rows where ``skip`` is
    set are left at zero.

    Returns per row ``(head, cut, tail, chars_before, chars_after, groups_removed, fired,
    missed)`` (``messages[a:head]`` the system fragment, ``messages[cut:tail]`` the kept
    history, ``messages[tail:b]`` the question, as absolute message indices; ``missed`` the
    code of the report's ``missedReason``, its index in ``MISSED_REASONS`` + 1, 0 for none) and
    the pairing warnings of the result as arrays ``(row, fragment, index, code, id)``
    (fragment 0 system, 1 history, 2 question; the index within its fragment; code
    :data:`ORPHAN_CODE` or :data:`UNANSWERED_CODE`).
    """
    # The compiled kernel's conversions, value for value.
    ncodes = _c_int(ncodes)
    trigger_chars, watermark_chars = _c_int(trigger_chars), _c_int(watermark_chars)
    steps = _c_tuple(steps, "steps")
    roles = _c_array(roles, np.int8)
    flags = _c_array(flags, np.uint8)
    chars = _c_array(chars, np.int64)
    call_codes = _c_array(call_codes, np.int64)
    result_codes = _c_array(result_codes, np.int64)
    # Offsets and codes read once, into copies of their own (as the compiled kernel does).
    call_codes, result_codes = np.array(call_codes, copy=True), np.array(result_codes, copy=True)
    m = len(flags)
    off = np.array(np.asarray(list_offsets), copy=True)
    _check_offsets(off, m, "reduce_rows")
    if len(roles) != m or len(chars) != m:
        raise ValueError("roles, flags and chars differ in length")
    checked = []
    for name, raw, codes in (("call_offsets", call_offsets, call_codes),
                             ("result_offsets", result_offsets, result_codes)):
        if len(raw) != m + 1:
            raise ValueError(f"{name}: expected {m + 1} entries, got {len(raw)}")
        offsets = np.array(np.asarray(raw), copy=True)
        _check_offsets(offsets, len(codes), "reduce_rows")
        checked.append(offsets)
    call_offsets, result_offsets = checked
    if ncodes < 0:
        raise ValueError("ncodes must be >= 0")
    if len(call_codes) and (int(call_codes.min()) < -1 or int(call_codes.max()) >= ncodes):
        raise ValueError(f"call_codes must lie in -1..{ncodes - 1}")
    if len(result_codes) and (int(result_codes.min()) < -1 or int(result_codes.max()) >= ncodes):
        raise ValueError(f"result_codes must lie in -1..{ncodes - 1}")
    if len(chars) and int(chars.min()) < 0:
        raise ValueError("chars must be >= 0")
    for r in range(len(off) - 1):
        if sum(chars[int(off[r]):int(off[r + 1])].tolist()) > 2**63 - 1:
            raise ValueError(f"the chars of row {r} add up to more than 64 bits hold")
    specs = []
    len(steps)  # (None: the compiled kernel's TypeError)
    for step in steps:
        grouping, keep, target = _c_unpack(step, 3)
        if grouping not in (GROUP_USER_TURN, GROUP_MESSAGE):
            raise ValueError(f"unknown grouping code {grouping}")
        if keep < 0 or target < 0:
            raise ValueError("keep_groups and target_chars must be >= 0")
        specs.append((_c_int(grouping), _c_int(keep), _c_int(target)))
    n = len(off) - 1
    if skip is not None:
        skip = np.ascontiguousarray(skip, dtype=np.uint8)
        if len(skip) != n:
            raise ValueError(f"skip: expected {n} entries, got {len(skip)}")
        skip = _c_array(skip, np.uint8)
    out = [np.zeros(n, dtype=np.int64) for _ in range(6)]
    fired_out = np.zeros(n, dtype=np.uint8)
    missed_out = np.zeros(n, dtype=np.uint8)
    warn: list[tuple[int, int, int, int, int]] = []
    tool_bits = FLAG_TOOL_CALLS | FLAG_TOOL_RESULT

    def calls_of(i: int) -> list[int]:
        return [int(c) for c in call_codes[int(call_offsets[i]):int(call_offsets[i + 1])]]

    for r in range(n):
        if skip is not None and skip[r]:
            continue
        a, b = int(off[r]), int(off[r + 1])
        head = a
        while head < b and int(roles[head]) in INSTRUCTION_ROLE_CODES:
            head += 1
        tail = b
        if tail > head and int(roles[b - 1]) == ROLE_USER and not int(flags[b - 1]) & (
            FLAG_TOOL_RESULT
        ):
            tail -= 1
        total = int(chars[a:b].sum())
        fired = trigger_chars >= 0 and total > trigger_chars
        h0 = head
        removed_groups = 0
        history = int(chars[head:tail].sum())
        floor = False
        for grouping, keep, target in specs:
            if not fired or not (watermark_chars >= 0 and total > watermark_chars):
                continue
            offsets, group_chars = group_offsets(flags[h0:tail], chars[h0:tail], grouping)
            ngroups = len(group_chars)
            if ngroups == 0:
                continue
            first = trim_cut(group_chars, keep, target)
            while first > 0:
                cut = h0 + int(offsets[first])
                missing = {cid for _, code, cid in _rows_pairing(
                    cut, tail, flags, call_offsets, call_codes, result_offsets, result_codes,
                    True) if cid >= 0}
                if not missing:
                    break
                earliest = cut
                for i in range(cut - 1, h0 - 1, -1):
                    if not int(flags[i]) & FLAG_TOOL_CALLS:
                        continue
                    found = missing.intersection(calls_of(i))
                    if found:
                        earliest = i
                        missing -= found
                        if not missing:
                            break
                if earliest == cut:
                    break
                first = int(np.searchsorted(offsets, earliest - h0, side="right")) - 1
            cut = h0 + int(offsets[first])
            if cut == h0:
                floor = floor or history > target
                continue
            total -= int(chars[h0:cut].sum())
            history -= int(chars[h0:cut].sum())
            floor = floor or history > target
            removed_groups += first
            h0 = cut
        for fragment, (lo, hi) in enumerate(((a, head), (h0, tail), (tail, b))):
            if hi > lo and np.any(flags[lo:hi] & tool_bits):
                warn += [(r, fragment, i - lo, code, cid) for i, code, cid in _rows_pairing(
                    lo, hi, flags, call_offsets, call_codes, result_offsets, result_codes)]
        for k, value in enumerate((head, h0, tail, int(chars[a:b].sum()), total,
                                   removed_groups)):
            out[k][r] = value
        fired_out[r] = fired
        if fired and watermark_chars >= 0 and total > watermark_chars:
            # What no trim may reduce: all but the history (and the history too without one).
            fixed = total - history if specs else total
            missed_out[r] = missed_code(fixed > watermark_chars, False, floor)
    w = np.array(warn, dtype=np.int64).reshape(-1, 5)
    return (*out, fired_out, missed_out,
            tuple(np.ascontiguousarray(w[:, k]) for k in range(5)))


# ---------------------------------------------------------------------------------------------
# JSONL lines read as bytes (the scanner of ``contextpolicy reduce``)
#
# A transcript line ``{"messages": [...], ...}`` is read for what a trim needs: each message's
# byte range, role, chars, flags, opaque parts and tool call ids, and the reduced line is
# written by copying byte ranges. A line takes this path only when its shape is one the rules
# below describe; any other line (``None``) goes through the object path, which gives its
# result or its error. The compiled kernel scans the bytes itself; this twin states the same
# rules over a tree of byte spans, validates with ``orjson`` and measures with
# :func:`reduce_transcript`, so that the differential tests hold the compiled scanner to the
# object path.
#
# A line takes the byte path when: it is JSON that orjson reads; containers nest at most
# ``SCAN_DEPTH`` deep and no number is longer than ``SCAN_NUMBER`` bytes; it is an object of at
# most ``SCAN_KEYS`` keys with a ``messages`` array, no ``fragments`` key and no key twice (nor
# one written with an escape);
# every message is an object without a ``type`` (a chat message), whose keys carry no escape
# and whose ``role``, ``content``, ``tool_calls`` and ``tool_call_id`` appear at most once;
# ``role`` is a string without escapes; ``content`` is a string, null or a list of parts;
# each part is a string or an object whose ``type``, ``text``, ``content``, ``name``,
# ``input``, ``thinking``, ``id`` and ``tool_use_id`` appear at most once and whose keys carry
# no escape, with a string ``text`` for a text type, a string ``thinking`` for a thinking
# block, a string, null or a list of parts as a tool_result's content; ``tool_calls`` is null
# or a list of objects (keys without escapes, ``id`` and ``function`` at most once) whose
# ``function`` is null or an object (``name`` and ``arguments`` at most once); ids
# (``tool_calls[].id``, ``tool_call_id``, ``id`` and ``tool_use_id`` of parts) and part types
# are written without escapes; a ``tool_use`` input or a non-string ``arguments`` (measured by
# its compact JSON) holds no run of 19 digits (an integer orjson may read inexactly).

SCAN_DEPTH = 64
SCAN_NUMBER = 63
SCAN_KEYS = 64
# handled, triggered, reached, chars before/after, messages before/after, messages removed,
# groups removed, orphan results, unanswered calls, reduced (chars or messages went down), one
# per missed reason (MISSED_REASONS: 1 for the line's, if it missed its target), and the
# unknown-role warnings (at SCAN_UNKNOWN_ROLES)
SCAN_UNKNOWN_ROLES = 12 + len(MISSED_REASONS)
SCAN_FIGURES = SCAN_UNKNOWN_ROLES + 1
_SCAN_STRING = re.compile(rb'"(?:[^"\\]|\\.)*"', re.DOTALL)
_SCAN_NUMBER = re.compile(rb"-?(?:0|[1-9][0-9]*)(?:\.[0-9]+)?(?:[eE][+-]?[0-9]+)?")
_SCAN_DIGITS = re.compile(rb"[0-9]{19}")
_SCAN_WS = JSON_WHITESPACE


class _Fallback(Exception):
    """The line takes the object path."""


def _span_tree(b: bytes, i: int, depth: int) -> tuple[tuple[Any, ...], int]:
    """The value at ``b[i]`` (JSON that orjson read) as ``(kind, start, end, payload)``, and
    where the text after it starts: ``o`` objects (payload: ``[(key bytes, escaped, value)]``),
    ``a`` arrays (the values), ``s`` strings (escaped), ``n`` numbers, ``l`` literals (their
    bytes)."""
    c = b[i]
    if c == 0x22:
        end = _SCAN_STRING.match(b, i).end()  # type: ignore[union-attr]
        return ("s", i, end, b"\\" in b[i:end]), end
    if c in b"{[":
        if depth >= SCAN_DEPTH:
            raise _Fallback
        close = 0x7D if c == 0x7B else 0x5D
        items: list[Any] = []
        j = _skip_ws(b, i + 1)
        if b[j] == close:
            return ("o" if c == 0x7B else "a", i, j + 1, items), j + 1
        while True:
            if c == 0x7B:
                key, j = _span_tree(b, j, depth + 1)
                j = _skip_ws(b, _skip_ws(b, j) + 1)  # past the colon
                value, j = _span_tree(b, j, depth + 1)
                items.append((b[key[1] + 1:key[2] - 1], key[3], value))
            else:
                value, j = _span_tree(b, j, depth + 1)
                items.append(value)
            j = _skip_ws(b, j)
            if b[j] == close:
                return ("o" if c == 0x7B else "a", i, j + 1, items), j + 1
            j = _skip_ws(b, j + 1)  # past the comma
    if c in b"tfn":
        end = i + (5 if c == 0x66 else 4)
        return ("l", i, end, b[i:end]), end
    end = _SCAN_NUMBER.match(b, i).end()  # type: ignore[union-attr]
    if end - i > SCAN_NUMBER:
        raise _Fallback
    return ("n", i, end, None), end


def _skip_ws(b: bytes, i: int) -> int:
    while i < len(b) and b[i] in _SCAN_WS:
        i += 1
    return i


def _fields(node: tuple[Any, ...], known: tuple[bytes, ...]) -> dict[bytes, Any]:
    """The known keys of an object node (each at most once, no key with an escape)."""
    found: dict[bytes, Any] = {}
    for key, escaped, value in node[3]:
        if escaped:
            raise _Fallback
        if key in known:
            if key in found:
                raise _Fallback
            found[key] = value
    return found


def _plain(node: Any) -> bool:
    """Whether ``node`` is a string written without escapes."""
    return node is not None and node[0] == "s" and not node[3]


def _no_escape(node: Any) -> None:
    if node is not None and node[0] == "s" and node[3]:
        raise _Fallback


def _measured_json(b: bytes, node: Any) -> None:
    if node is not None and node[0] != "l" and _SCAN_DIGITS.search(b, node[1], node[2]):
        raise _Fallback


_PART_KEYS = (b"type", b"text", b"content", b"name", b"input", b"thinking", b"id",
              b"tool_use_id")


def _scan_parts(b: bytes, node: tuple[Any, ...], depth: int) -> None:
    for part in node[3]:
        if part[0] == "s":
            continue
        if part[0] != "o":
            raise _Fallback
        f = _fields(part, _PART_KEYS)
        ptype = f.get(b"type")
        _no_escape(ptype)
        _no_escape(f.get(b"id"))
        _no_escape(f.get(b"tool_use_id"))
        code = PART_OTHER
        if ptype is not None and _plain(ptype):
            code = PART_CODES.get(b[ptype[1] + 1:ptype[2] - 1].decode(), PART_OTHER)
        if code == PART_TEXT and (f.get(b"text") is None or f[b"text"][0] != "s"):
            raise _Fallback
        if code == PART_THINKING and (f.get(b"thinking") is None or f[b"thinking"][0] != "s"):
            raise _Fallback
        if code == PART_TOOL_RESULT:
            if depth >= MAX_NESTING:
                raise _Fallback
            inner = f.get(b"content")
            if inner is not None and inner[0] == "a":
                _scan_parts(b, inner, depth + 1)
            elif inner is not None and inner[0] != "s" and inner[3] != b"null":
                raise _Fallback
        if code == PART_TOOL_USE:
            _measured_json(b, f.get(b"input"))


def _scan_message(b: bytes, node: tuple[Any, ...]) -> None:
    if node[0] != "o":
        raise _Fallback
    f = _fields(node, (b"role", b"content", b"tool_calls", b"tool_call_id", b"type"))
    if b"type" in f or not _plain(f.get(b"role")):
        raise _Fallback
    _no_escape(f.get(b"tool_call_id"))
    content = f.get(b"content")
    if content is not None and content[0] == "a":
        _scan_parts(b, content, 0)
    elif content is not None and content[0] != "s" and content[3] != b"null":
        raise _Fallback
    calls = f.get(b"tool_calls")
    if calls is None or (calls[0] == "l" and calls[3] == b"null"):
        return
    if calls[0] != "a":
        raise _Fallback
    for call in calls[3]:
        if call[0] != "o":
            raise _Fallback
        c = _fields(call, (b"id", b"function"))
        _no_escape(c.get(b"id"))
        fn = c.get(b"function")
        if fn is None or (fn[0] == "l" and fn[3] == b"null"):
            continue
        if fn[0] != "o":
            raise _Fallback
        args = _fields(fn, (b"name", b"arguments")).get(b"arguments")
        if args is not None and args[0] != "s":
            _measured_json(b, args)


def _scan_line(b: bytes) -> tuple[int, int, list[tuple[int, int]], Any]:
    """``(start, end)`` of the messages array, each message's span, and the ``id`` node (or
    None), for a line that takes the byte path; :class:`_Fallback` for any other."""
    start = _skip_ws(b, 0)
    if start == len(b) or b[start] != 0x7B:
        raise _Fallback
    top, _ = _span_tree(b, start, 0)
    keys = [key for key, escaped, _ in top[3] if not escaped]
    if (len(top[3]) > SCAN_KEYS or len(keys) != len(top[3]) or len(set(keys)) != len(keys)
            or b"fragments" in keys):
        raise _Fallback
    values = {key: value for key, _, value in top[3]}
    messages = values.get(b"messages")
    if messages is None or messages[0] != "a":
        raise _Fallback
    for message in messages[3]:
        _scan_message(b, message)
    return messages[1], messages[2], [(m[1], m[2]) for m in messages[3]], values.get(b"id")


def _line_steps(steps: Any) -> tuple[tuple[str, int, int, int], ...]:
    """The trims of :func:`reduce_lines`, checked before any line is read."""
    steps = _c_tuple(steps, "steps")
    if steps is None:
        raise TypeError("steps: expected a tuple of trims, got None")
    checked = []
    for step in steps:
        fid, grouping, keep, target = _c_unpack(step, 4)
        grouping, keep, target = _c_int(grouping, "int"), _c_int(keep), _c_int(target)
        if fid != "history" or type(fid) is not str:
            raise ValueError(f"reduce_lines trims the history only; a step names {fid!r}")
        if grouping not in (GROUP_USER_TURN, GROUP_MESSAGE):
            raise ValueError(f"unknown grouping code {grouping}")
        if keep < 0 or target < 0:
            raise ValueError("keep_groups and target_chars must be >= 0")
        checked.append((fid, grouping, keep, target))
    return tuple(checked)


def _flat_bytes(data: Any) -> bytes:
    """The bytes of a flat, contiguous buffer (as the compiled kernel reads it in place)."""
    try:
        view = memoryview(data)
    except TypeError:
        raise TypeError(f"expected a bytes-like object, got {type(data).__name__}") from None
    with view:
        if view.ndim != 1 or view.itemsize != 1 or not view.c_contiguous:
            raise ValueError("expected a flat, contiguous buffer of bytes")
        return view.tobytes()


def _line_bounds(data: Any, starts: Any, stops: Any) -> tuple[bytes, list[int], list[int]]:
    b = _flat_bytes(data)
    a = _c_array(starts, np.int64)
    z = _c_array(stops, np.int64)
    if len(a) != len(z):
        raise ValueError(f"starts and stops differ in length ({len(a)} != {len(z)})")
    # Read once: the bounds checked are the bounds used (another thread may change the arrays).
    lo_list, hi_list = a.tolist(), z.tolist()
    for lo, hi in zip(lo_list, hi_list, strict=True):
        if not 0 <= lo <= hi <= len(b):
            raise ValueError(f"line {lo}..{hi} lies outside the buffer of {len(b)} bytes")
    return b, lo_list, hi_list


def reduce_lines(
    data: Any, starts: Any, stops: Any, steps: tuple[tuple[str, int, int, int], ...],
    trigger_chars: int, watermark_chars: int, raw: bool = False,
) -> tuple[bytearray, Int64Array, Int64Array, list[Any] | None]:
    """:func:`reduce_transcript` of the transcript lines ``data[starts[i]:stops[i]]``, read and
    written as bytes.

    Returns ``(out, ends, figures, raws)``: the reduced lines that took the byte path, each
    followed by a newline, one after another in ``out``, line ``i`` ending at ``ends[i]`` (a
    line of the object path adds nothing); per line ``SCAN_FIGURES`` figures (all zero for a
    line of the object path): handled, triggered, target reached, chars before and after,
    messages before and after, messages removed, groups removed, orphan results, unanswered
    calls, reduced (chars or messages went down), one for each of ``MISSED_REASONS`` (1 for
    the reason of a line that missed its target), and the unknown-role warnings; with ``raw``,
    per line ``None`` (the object path) or ``(records, id span)``: the records of
    :func:`reduce_transcript` (each changed fragment's kept list as ``True``, the input as
    ``None``) and where the line's ``id`` value lies in ``data``.

    The kept messages are copied byte for byte, and so is everything around the ``messages``
    array, without the whitespace around the line; a line that loses no message is copied
    whole. ``steps`` may trim only the history (a line without one skips them:
    ``fragment-absent``)."""
    trigger_chars, watermark_chars = _c_int(trigger_chars), _c_int(watermark_chars)
    raw = bool(raw)
    steps = _line_steps(steps)
    b, lo_list, hi_list = _line_bounds(data, starts, stops)
    n = len(lo_list)
    out = bytearray()
    ends = np.zeros(n, dtype=np.int64)
    figures = np.zeros((n, SCAN_FIGURES), dtype=np.int64)
    raws: list[Any] | None = [] if raw else None
    for k in range(n):
        lo, hi = lo_list[k], hi_list[k]
        record = _reduce_line(b[lo:hi], steps, trigger_chars, watermark_chars)
        if record is None:
            ends[k] = len(out)
            if raws is not None:
                raws.append(None)
            continue
        line, records, id_node, row = record
        out += line
        out += b"\n"
        ends[k] = len(out)
        figures[k] = row
        if raws is not None:
            raws.append((records, None if id_node is None else (lo + id_node[1], lo + id_node[2])))
    return out, ends, figures, raws


def _reduce_line(
    b: bytes, steps: tuple[Any, ...], trigger_chars: int, watermark_chars: int,
) -> tuple[bytes, tuple[Any, ...], Any, list[int]] | None:
    try:
        doc = orjson.loads(b)
        array_start, array_end, spans, id_node = _scan_line(b)
    except (orjson.JSONDecodeError, _Fallback):
        return None
    messages = doc["messages"]
    records = reduce_transcript(messages, steps, trigger_chars, watermark_chars)
    fired, before, after, kept, done, warnings, _, ids, totals = records
    # where the transcript was split, from the fragments' sizes
    head = before[0][1] if ids[:1] == ["system"] else 0
    tail = len(messages) - (before[-1][1] if ids[-1:] == ["question"] else 0)
    cut = head
    if "history" in ids:
        cut = tail - after[ids.index("history")][1]
    lo, hi = _skip_ws(b, 0), len(b)
    while hi > lo and b[hi - 1] in _SCAN_WS:
        hi -= 1
    if cut == head:
        line = b[lo:hi]
    else:
        kept_spans = spans[:head] + spans[cut:]
        line = b"".join((b[lo:array_start], b"[", b",".join(b[s:e] for s, e in kept_spans), b"]",
                         b[array_end:hi]))
    codes = [w[2] for w in warnings]
    row = [1, int(fired), int(totals[8]), totals[0], totals[3], totals[1], totals[4], totals[6],
           totals[7], codes.count("orphan-tool-result"), codes.count("unanswered-tool-call"),
           int(totals[3] < totals[0] or totals[4] < totals[1])]
    missed = _missed(records, steps, watermark_chars)
    row += [int(missed == code) for code in range(1, len(MISSED_REASONS) + 1)]
    row.append(codes.count("unknown-role"))
    records = (fired, before, after, [None if k is None else True for k in kept], done,
               warnings, None, ids, totals)
    return line, records, id_node, row


def _missed(records: tuple[Any, ...], steps: tuple[Any, ...], watermark_chars: int) -> int:
    """The code of a reduce's ``missedReason`` (0: none), from its records."""
    fired, _, after, _, done, _, _, ids, totals = records
    if not fired or totals[8]:
        return MISSED_NONE
    named = {step[0] for step in steps}
    fixed = sum(a[0] for fid, a in zip(ids, after, strict=True) if fid not in named)
    return missed_code(watermark_chars >= 0 and fixed > watermark_chars, False,
                       any(d[1] == "keep-groups-floor" for d in done))


# ---------------------------------------------------------------------------------------------
# report_lines: reduce_lines, and the report entry of each line written from a template of the
# policy's report (what the JSONL runner writes for --report).
#
# A template is ``(head, steps, fragments)``: ``head`` a program for the entry, ``steps`` one
# program per trim, ``fragments`` one per fragment (system, history, question). A program is a
# tuple of bytes with a slot code between each two: the bytes are written as they are, each
# slot as the line's value of it. ``steps`` writes the array of the steps' programs, ``fragments``
# the array of the programs of the fragments the line has. A line gets no entry (its records
# instead) when it has warnings (pairing, unknown roles) or an ``id`` whose JSON is not written
# back as it is read: only a string without escapes, ``null``, ``true``, ``false`` and an
# integer of at most 18 digits (not ``-0``) are.

ENTRY_SLOTS = (
    # the entry (head)
    "id", "triggered", "before-chars", "before-messages", "fragments-count", "before-opaque",
    "after-chars", "after-messages", "after-opaque", "target-reached", "steps", "fragments",
    "missed-reason",
    # a step
    "status", "reason", "chars-before", "chars-after", "groups-before", "groups-after",
    "messages-removed",
    # a fragment
    "fragment-chars-before", "fragment-chars-after", "fragment-messages-before",
    "fragment-messages-after", "fragment-changed",
)
_ENTRY_RANGES = ((0, 13), (13, 20), (20, 25))  # the slots of a head, a step and a fragment
_ENTRY_ID = re.compile(rb"-?(?:0|[1-9][0-9]{0,17})")


def _entry_program(program: Any, kind: int, where: str) -> tuple[Any, ...]:
    if type(program) is not tuple or len(program) % 2 == 0:
        raise TypeError(f"{where}: expected a tuple of bytes with a slot code between each two")
    lo, hi = _ENTRY_RANGES[kind]
    for i, item in enumerate(program):
        if i % 2 == 0:
            if type(item) is not bytes:
                raise TypeError(f"{where}[{i}]: expected bytes, got {type(item).__name__}")
        elif type(item) is not int or not lo <= item < hi:
            raise ValueError(f"{where}[{i}]: expected a slot code from {lo} to {hi - 1}")
    return program


def _entry_template(template: Any, nsteps: int) -> tuple[Any, ...]:
    """A template of :func:`report_lines`, checked."""
    if type(template) is not tuple or len(template) != 3:
        raise TypeError("template: expected a tuple (head, steps, fragments)")
    head, steps, fragments = template
    if type(steps) is not tuple or len(steps) != nsteps:
        raise ValueError(f"template: expected a tuple of a program for each of the {nsteps} "
                         "steps")
    if type(fragments) is not tuple or len(fragments) != 3:
        raise ValueError("template: expected a tuple of a program for each of the 3 fragments")
    return (_entry_program(head, 0, "template head"),
            tuple(_entry_program(s, 1, f"template steps[{i}]") for i, s in enumerate(steps)),
            tuple(_entry_program(f, 2, f"template fragments[{i}]")
                  for i, f in enumerate(fragments)))


def _written_back(piece: bytes) -> bool:
    """Whether ``dumps(loads(piece))`` is ``piece``, for a JSON value the scan validated."""
    if piece[:1] == b'"':
        return b"\\" not in piece
    if piece in (b"null", b"true", b"false"):
        return True
    return piece != b"-0" and _ENTRY_ID.fullmatch(piece) is not None


def _json_value(value: Any) -> bytes:
    if value is None:
        return b"null"
    if value is True:
        return b"true"
    if value is False:
        return b"false"
    if type(value) is str:
        return b'"%s"' % value.encode()
    return b"%d" % value


def _run_program(program: tuple[Any, ...], values: dict[int, Any], out: list[bytes]) -> None:
    out.append(program[0])
    for i in range(1, len(program), 2):
        value = values[program[i]]
        if type(value) is list:  # the steps or fragments: programs with their values
            out.append(b"[")
            for j, (sub, sub_values) in enumerate(value):
                if j:
                    out.append(b",")
                _run_program(sub, sub_values, out)
            out.append(b"]")
        else:
            out.append(value if type(value) is bytes else _json_value(value))
        out.append(program[i + 1])


def _entry(template: tuple[Any, ...], records: tuple[Any, ...], ident: bytes | None,
           trims: tuple[Any, ...], watermark_chars: int) -> bytes | None:
    fired, before, after, kept, done, warnings, _, ids, totals = records
    if warnings or (ident is not None and not _written_back(ident)):
        return None
    head, step_programs, fragment_programs = template
    steps = [(program, dict(zip(range(13, 20), d, strict=True)))
             for program, d in zip(step_programs, done, strict=True)]
    fragments = [
        (fragment_programs[("system", "history", "question").index(fid)],
         {20: b[0], 21: a[0], 22: b[1], 23: a[1], 24: k is not None})
        for fid, b, a, k in zip(ids, before, after, kept, strict=True)
    ]
    missed = _missed(records, trims, watermark_chars)
    values = {0: b"null" if ident is None else ident, 1: fired, 2: totals[0], 3: totals[1],
              4: len(ids), 5: totals[2], 6: totals[3], 7: totals[4], 8: totals[5],
              9: totals[8], 10: steps, 11: fragments,
              12: MISSED_REASONS[missed - 1] if missed else None}
    out: list[bytes] = []
    _run_program(head, values, out)
    return b"".join(out)


def report_lines(
    data: Any, starts: Any, stops: Any, steps: tuple[tuple[str, int, int, int], ...],
    trigger_chars: int, watermark_chars: int, template: Any,
) -> tuple[bytearray, Int64Array, Int64Array, bytearray, Int64Array, list[Any]]:
    """:func:`reduce_lines`, and each line's report entry from ``template`` (see above).

    Returns ``(out, ends, figures, entries, entry_ends, raws)``: the first three as
    :func:`reduce_lines` gives them; the entries one after another in ``entries``, line ``i``'s
    ending at ``entry_ends[i]`` (a line of the object path, or one without an entry, adds
    nothing); ``raws[i]`` the records and id span of ``reduce_lines(..., raw=True)`` for a line
    of the byte path without an entry, ``None`` for every other line."""
    trigger_chars, watermark_chars = _c_int(trigger_chars), _c_int(watermark_chars)
    trims = _line_steps(steps)
    checked = _entry_template(template, len(trims))
    out, ends, figures, raws = reduce_lines(data, starts, stops, steps, trigger_chars,
                                            watermark_chars, True)
    b = _flat_bytes(data)
    entries = bytearray()
    entry_ends = np.zeros(len(ends), dtype=np.int64)
    assert raws is not None
    for k, record in enumerate(raws):
        if record is not None:
            records, span = record
            entry = _entry(checked, records, None if span is None else b[span[0]:span[1]], trims,
                           watermark_chars)
            if entry is not None:
                entries += entry
                raws[k] = None
        entry_ends[k] = len(entries)
    return out, ends, figures, entries, entry_ends, raws



def line_bounds(data: Any, offset: int, length: int) -> tuple[int, Int64Array, Int64Array,
                                                                Int64Array]:
    """The lines of ``data[offset:offset + length]`` (ended by newlines; the last one may not
    be): ``(lines, numbers, starts, stops)``, the count of all lines, and for each line that is
    not blank (empty, or JSON whitespace only: ``_tables.JSON_WHITESPACE``) its number from 1
    and where it starts and stops."""
    offset, length = _c_int(offset, "Py_ssize_t"), _c_int(length, "Py_ssize_t")
    whole = _flat_bytes(data)
    if offset < 0 or length < 0 or offset + length > len(whole):
        raise ValueError(f"range {offset}+{length} lies outside the buffer of {len(whole)} bytes")
    b = whole[offset:offset + length]
    numbers, starts, stops = [], [], []
    at, number = 0, 0
    while at < len(b):
        stop = b.find(b"\n", at)
        if stop < 0:
            stop = len(b)
        number += 1
        if b[at:stop].strip(JSON_WHITESPACE):
            numbers.append(number)
            starts.append(offset + at)
            stops.append(offset + stop)
        at = stop + 1
    return (number, np.array(numbers, dtype=np.int64), np.array(starts, dtype=np.int64),
            np.array(stops, dtype=np.int64))
