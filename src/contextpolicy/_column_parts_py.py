"""Tool ids and content parts of Arrow columns (the pure twin of ``csrc/_column_parts.pxi``):
:func:`string_ids` numbers tool-call id strings, :func:`arrange_ids` lays them out per message,
:func:`part_chars` measures content parts.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import numpy.typing as npt

from ._c_args import Int64Array, c_int
from ._columns_py import _flags_array, _offsets_array, _positions
from ._kernel_names import PART_FIELDS, Utf8Error
from ._tables import (
    FLAG_TOOL_CALLS,
    FLAG_TOOL_RESULT,
)


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
_FIELD_NEEDED = (True, False, False, True)


_Column = tuple[memoryview, list[int], Any]  # a field's bytes, offsets and nulls (or None)


def _field_columns(fields: Any, k: int) -> list[_Column | None]:
    """part_chars' ``fields``, checked: per name of ``PART_FIELDS`` its column, or None."""
    if type(fields) is not tuple or len(fields) != 4:
        raise TypeError(f"part_chars: fields must be a tuple of 4 (one per {PART_FIELDS})")
    given: list[_Column | None] = []
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
    return given


def _field_of_kind(kd: int, ntext: int) -> tuple[int, int]:
    """The field a part of kind ``kd`` counts (-1: none, an opaque part) and the flag it sets."""
    if kd < 0 or kd > ntext + 2:
        return -1, 0
    if kd < ntext:
        return 0, 0
    if kd == ntext:
        return 1, FLAG_TOOL_RESULT
    if kd == ntext + 1:
        return 2, FLAG_TOOL_CALLS
    return 3, 0


def _field_chars(given: list[_Column | None], p: int, x: int, total: int) -> tuple[int, bool]:
    """``total`` plus the chars of part ``p``'s field ``x``, and whether the part is one only the
    object path can measure. Every string the part holds in a field given is UTF-8, whatever
    its kind; only its kind's field is counted."""
    unreadable = False
    for y, field in enumerate(given):
        if field is None or (field[2] is not None and field[2][p]):
            if y == x and _FIELD_NEEDED[x]:
                unreadable = True
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
    return total, unreadable


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
    ntext = c_int(ntext, "Py_ssize_t")
    if not 0 <= ntext <= 125:  # kinds are int8: up to ntext + 2
        raise ValueError(f"part_chars: ntext must lie in 0..125, got {ntext}")
    o = _offsets_array(part_offsets, -1, "part_chars", "part offsets")
    m = len(o) - 1
    kinds = np.asarray(kinds)
    if kinds.ndim != 1 or kinds.dtype != np.int8:
        raise TypeError("part_chars: expected a 1-d int8 array of kinds")
    kind = [int(v) for v in kinds.tolist()]
    k = len(kind)
    given = _field_columns(fields, k)
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
            x, flag = _field_of_kind(kind[p], ntext)
            fl |= flag
            total, unreadable_field = _field_chars(given, p, x, total)
            unreadable_part = unreadable_part or unreadable_field
        chars[r], flags[r], bad[r] = total, fl, unreadable_part
    return chars, flags, bad
