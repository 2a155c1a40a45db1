"""JSONL lines read as bytes: the scanner of ``contextpolicy reduce`` (the pure twin of
``csrc/_lines.pxi``, with its helpers ``_json_bytes.pxi`` and ``_line_reducer.pxi``).

:func:`reduce_lines` reduces the lines whose shape the rules below describe, and
:func:`line_bounds` finds the lines of a buffer.
"""

from __future__ import annotations

import re
from array import array
from typing import Any

import orjson

from ._c_args import c_int, c_int64_copy, c_tuple, c_unpack
from ._fused_py import reduce_transcript
from ._kernel_names import SCAN_DEPTH, SCAN_FIGURES, SCAN_KEYS, SCAN_NUMBER
from ._records import FusedRecord
from ._tables import (
    GROUP_MESSAGE,
    GROUP_USER_TURN,
    JSON_WHITESPACE,
    LINE_FIGURES,
    LINE_MISSED,
    MAX_NESTING,
    MISSED_NONE,
    PART_CODES,
    PART_OTHER,
    PART_TEXT,
    PART_THINKING,
    PART_TOOL_RESULT,
    PART_TOOL_USE,
    missed_code,
)

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
    steps = c_tuple(steps, "steps")
    if steps is None:
        raise TypeError("steps: expected a tuple of trims, got None")
    checked = []
    for step in steps:
        fid, grouping, keep, target = c_unpack(step, 4)
        grouping, keep, target = c_int(grouping, "int"), c_int(keep), c_int(target)
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
    a = c_int64_copy(starts)
    z = c_int64_copy(stops)
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
) -> tuple[bytearray, Any, Any, list[Any] | None]:
    """:func:`reduce_transcript` of the transcript lines ``data[starts[i]:stops[i]]``, read and
    written as bytes.

    Returns ``(out, ends, figures, raws)``: the reduced lines that took the byte path, each
    followed by a newline, one after another in ``out``, line ``i`` ending at ``ends[i]`` (a
    line of the object path adds nothing); per line the figures of ``LINE_FIGURES`` (all zero
    for a line of the object path), line ``i``'s at ``figures[i * SCAN_FIGURES:]``; ``ends``
    and ``figures`` are ``array.array("q")``, which need no numpy (``np.asarray`` views
    them); with ``raw``, per line ``None`` (the object path) or ``(records, id span)``: the
    records of :func:`reduce_transcript` (each changed fragment's kept list as ``True``, the
    input as ``None``) and where the line's ``id`` value lies in ``data``.

    The kept messages are copied byte for byte, and so is everything around the ``messages``
    array, without the whitespace around the line; a line that loses no message is copied
    whole. ``steps`` may trim only the history (a line without one skips them:
    ``fragment-absent``)."""
    trigger_chars, watermark_chars = c_int(trigger_chars), c_int(watermark_chars)
    raw = bool(raw)
    steps = _line_steps(steps)
    b, lo_list, hi_list = _line_bounds(data, starts, stops)
    n = len(lo_list)
    out = bytearray()
    ends = array("q", bytes(8 * n))
    figures = array("q", bytes(8 * n * SCAN_FIGURES))
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
        figures[k * SCAN_FIGURES:(k + 1) * SCAN_FIGURES] = array("q", row)
        if raws is not None:
            raws.append((records, None if id_node is None else (lo + id_node[1], lo + id_node[2])))
    return out, ends, figures, raws


def _reduce_line(
    b: bytes, steps: tuple[Any, ...], trigger_chars: int, watermark_chars: int,
) -> tuple[bytes, FusedRecord, Any, list[int]] | None:
    try:
        doc = orjson.loads(b)
        array_start, array_end, spans, id_node = _scan_line(b)
    except (orjson.JSONDecodeError, _Fallback):
        return None
    messages = doc["messages"]
    records = reduce_transcript(messages, steps, trigger_chars, watermark_chars)
    ids = records.ids
    # where the transcript was split, from the fragments' sizes
    head = records.before[0].messages if ids[:1] == ["system"] else 0
    tail = len(messages) - (records.before[-1].messages if ids[-1:] == ["question"] else 0)
    cut = head
    if "history" in ids:
        cut = tail - records.after[ids.index("history")].messages
    lo, hi = _skip_ws(b, 0), len(b)
    while hi > lo and b[hi - 1] in _SCAN_WS:
        hi -= 1
    if cut == head:
        line = b[lo:hi]
    else:
        kept_spans = spans[:head] + spans[cut:]
        line = b"".join((b[lo:array_start], b"[", b",".join(b[s:e] for s, e in kept_spans), b"]",
                         b[array_end:hi]))
    codes = [w.code for w in records.warnings]
    figures = {
        "handled": 1, "triggered": int(records.triggered), "reached": int(records.watermark_met),
        "chars_before": records.chars_before, "chars_after": records.chars_after,
        "messages_before": records.messages_before, "messages_after": records.messages_after,
        "messages_removed": records.messages_removed, "groups_removed": records.groups_removed,
        "orphan_results": codes.count("orphan-tool-result"),
        "unanswered_calls": codes.count("unanswered-tool-call"),
        "reduced": int(records.chars_after < records.chars_before
                       or records.messages_after < records.messages_before),
        "unknown_roles": codes.count("unknown-role"),
    }
    missed = _missed(records, steps, watermark_chars)
    for code, name in enumerate(LINE_FIGURES[LINE_MISSED], 1):
        figures[name] = int(missed == code)
    row = [figures[name] for name in LINE_FIGURES]
    records = records._replace(kept=[None if k is None else True for k in records.kept],
                               input=None)
    return line, records, id_node, row


def _missed(records: FusedRecord, steps: tuple[Any, ...], watermark_chars: int) -> int:
    """The code of a reduce's ``missedReason`` (0: none), from its records."""
    if not records.triggered or records.watermark_met:
        return MISSED_NONE
    named = {step[0] for step in steps}
    fixed = sum(a.chars for fid, a in zip(records.ids, records.after, strict=True)
                if fid not in named)
    return missed_code(watermark_chars >= 0 and fixed > watermark_chars, False,
                       any(d.reason == "keep-groups-floor" for d in records.steps))


def line_bounds(data: Any, offset: int, length: int) -> tuple[int, Any, Any, Any]:
    """The lines of ``data[offset:offset + length]`` (ended by newlines; the last one may not
    be): ``(lines, numbers, starts, stops)``, the count of all lines, and for each line that is
    not blank (empty, or JSON whitespace only: ``_tables.JSON_WHITESPACE``) its number from 1
    and where it starts and stops."""
    offset, length = c_int(offset, "Py_ssize_t"), c_int(length, "Py_ssize_t")
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
    return number, array("q", numbers), array("q", starts), array("q", stops)


def _int64_view(values: Any) -> list[int]:
    """The ints of a flat buffer of int64 (the compiled kernel's ``_int64_view``)."""
    try:
        view = memoryview(values)
    except TypeError:
        raise TypeError("expected a flat buffer of int64, got "
                        f"{type(values).__name__}") from None
    with view:
        if (view.ndim != 1 or view.itemsize != 8 or view.format not in ("q", "l")
                or not view.c_contiguous):
            raise ValueError(f"expected a flat buffer of int64, got one of format "
                             f"{view.format!r} and {view.ndim} dimension(s)")
        return view.tolist()


def figure_sums(figures: Any, start: int, stop: int) -> list[int]:
    """The sums of the figures of lines ``start`` to ``stop`` of a :func:`reduce_lines` result
    (numpy's ``figures.reshape(-1, SCAN_FIGURES)[start:stop].sum(axis=0)`` without numpy)."""
    start, stop = c_int(start, "Py_ssize_t"), c_int(stop, "Py_ssize_t")
    values = _int64_view(figures)
    if len(values) % SCAN_FIGURES:
        raise ValueError(f"expected {SCAN_FIGURES} figures per line, got {len(values)} in all")
    lines = len(values) // SCAN_FIGURES
    if not 0 <= start <= stop <= lines:
        raise ValueError(f"lines {start}..{stop} lie outside the {lines} lines")
    sums = [0] * SCAN_FIGURES
    for k in range(start, stop):
        for j, value in enumerate(values[k * SCAN_FIGURES:(k + 1) * SCAN_FIGURES]):
            sums[j] += value
    # beyond int64 a sum wraps, as numpy's and the compiled kernel's do
    return [(s + 2**63) % 2**64 - 2**63 for s in sums]
