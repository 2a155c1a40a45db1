"""Many transcripts at once: :func:`reduce_rows`, the columnar form of ``reduce_transcript``
(the pure twin of ``csrc/_rows.pxi``).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ._c_args import c_array, c_int, c_tuple, c_unpack
from ._columns_py import _check_offsets
from ._kernel_names import ORPHAN_CODE, UNANSWERED_CODE
from ._pairing_py import group_offsets, trim_cut
from ._records import RowsRecord, RowWarnings
from ._tables import (
    FLAG_TOOL_CALLS,
    FLAG_TOOL_RESULT,
    GROUP_MESSAGE,
    GROUP_USER_TURN,
    INSTRUCTION_ROLE_CODES,
    ROLE_USER,
    missed_code,
)


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


class _Rows:
    """The arrays of :func:`reduce_rows`, converted and checked (each a copy of its own where
    the compiled kernel reads one), and its trims as ``(grouping, keep_groups, target_chars)``."""

    __slots__ = ("call_codes", "call_offsets", "chars", "flags", "n", "offsets",
                 "result_codes", "result_offsets", "roles", "skip", "specs")

    def __init__(self, list_offsets: Any, roles: Any, flags: Any, chars: Any,
                 call_offsets: Any, call_codes: Any, result_offsets: Any, result_codes: Any,
                 ncodes: int, steps: Any, skip: Any) -> None:
        # The compiled kernel's conversions and checks, value for value and in its order.
        roles = c_array(roles, np.int8)
        flags = c_array(flags, np.uint8)
        chars = c_array(chars, np.int64)
        call_codes = c_array(call_codes, np.int64)
        result_codes = c_array(result_codes, np.int64)
        # Offsets and codes read once, into copies of their own (as the compiled kernel does).
        call_codes = np.array(call_codes, copy=True)
        result_codes = np.array(result_codes, copy=True)
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
        self.call_offsets, self.result_offsets = checked
        _check_codes(call_codes, result_codes, ncodes)
        if len(chars) and int(chars.min()) < 0:
            raise ValueError("chars must be >= 0")
        for r in range(len(off) - 1):
            if sum(chars[int(off[r]):int(off[r + 1])].tolist()) > 2**63 - 1:
                raise ValueError(f"the chars of row {r} add up to more than 64 bits hold")
        self.specs = _trim_specs(steps)
        self.n = n = len(off) - 1
        if skip is not None:
            skip = np.ascontiguousarray(skip, dtype=np.uint8)
            if len(skip) != n:
                raise ValueError(f"skip: expected {n} entries, got {len(skip)}")
            skip = c_array(skip, np.uint8)
        self.offsets, self.roles, self.flags, self.chars, self.skip = off, roles, flags, chars, skip
        self.call_codes, self.result_codes = call_codes, result_codes

    def pairing(self, lo: int, hi: int, orphans_only: bool = False) -> list[tuple[int, int, int]]:
        return _rows_pairing(lo, hi, self.flags, self.call_offsets, self.call_codes,
                             self.result_offsets, self.result_codes, orphans_only)

    def calls_of(self, i: int) -> list[int]:
        lo, hi = int(self.call_offsets[i]), int(self.call_offsets[i + 1])
        return [int(c) for c in self.call_codes[lo:hi]]


def _check_codes(call_codes: Any, result_codes: Any, ncodes: int) -> None:
    if ncodes < 0:
        raise ValueError("ncodes must be >= 0")
    if len(call_codes) and (int(call_codes.min()) < -1 or int(call_codes.max()) >= ncodes):
        raise ValueError(f"call_codes must lie in -1..{ncodes - 1}")
    if len(result_codes) and (int(result_codes.min()) < -1 or int(result_codes.max()) >= ncodes):
        raise ValueError(f"result_codes must lie in -1..{ncodes - 1}")


def _trim_specs(steps: Any) -> list[tuple[int, int, int]]:
    specs = []
    len(steps)  # (None: the compiled kernel's TypeError)
    for step in steps:
        grouping, keep, target = c_unpack(step, 3)
        if grouping not in (GROUP_USER_TURN, GROUP_MESSAGE):
            raise ValueError(f"unknown grouping code {grouping}")
        if keep < 0 or target < 0:
            raise ValueError("keep_groups and target_chars must be >= 0")
        specs.append((c_int(grouping), c_int(keep), c_int(target)))
    return specs


def _paired_cut(rows: _Rows, first: int, h0: int, tail: int, offsets: Any) -> int:
    """The first group a trim keeps, moved back until no kept result has lost its call."""
    while first > 0:
        cut = h0 + int(offsets[first])
        missing = {cid for _, code, cid in rows.pairing(cut, tail, True) if cid >= 0}
        if not missing:
            break
        earliest = cut
        for i in range(cut - 1, h0 - 1, -1):
            if not int(rows.flags[i]) & FLAG_TOOL_CALLS:
                continue
            found = missing.intersection(rows.calls_of(i))
            if found:
                earliest = i
                missing -= found
                if not missing:
                    break
        if earliest == cut:
            break
        first = int(np.searchsorted(offsets, earliest - h0, side="right")) - 1
    return first


def _trim_history(rows: _Rows, head: int, tail: int, total: int, fired: bool,
                  watermark_chars: int) -> tuple[int, int, int, int, bool]:
    """The row's trims of its history ``head:tail``: ``(cut, total, history, groups removed,
    keep-groups floor met)``."""
    chars, h0, removed_groups, floor = rows.chars, head, 0, False
    history = int(chars[head:tail].sum())
    for grouping, keep, target in rows.specs:
        if not fired or not (watermark_chars >= 0 and total > watermark_chars):
            continue
        offsets, group_chars = group_offsets(rows.flags[h0:tail], chars[h0:tail], grouping)
        if len(group_chars) == 0:
            continue
        first = _paired_cut(rows, trim_cut(group_chars, keep, target), h0, tail, offsets)
        cut = h0 + int(offsets[first])
        if cut == h0:
            floor = floor or history > target
            continue
        total -= int(chars[h0:cut].sum())
        history -= int(chars[h0:cut].sum())
        floor = floor or history > target
        removed_groups += first
        h0 = cut
    return h0, total, history, removed_groups, floor


def reduce_rows(
    list_offsets: Any, roles: Any, flags: Any, chars: Any, call_offsets: Any, call_codes: Any,
    result_offsets: Any, result_codes: Any, ncodes: int,
    steps: tuple[tuple[int, int, int], ...], trigger_chars: int, watermark_chars: int,
    skip: Any = None,
) -> RowsRecord:
    """:func:`reduce_transcript` of many transcripts held as arrays, in one call.

    ``list_offsets`` delimit each transcript's messages in ``roles``, ``flags`` and ``chars``
    (what :func:`measure_messages` gives); ``call_offsets`` delimit each message's tool call
    ids in ``call_codes`` (``-1``: a call without an id), ``result_offsets`` the ids each
    answers in ``result_codes`` (``-1``: a result without an id); only messages flagged as
    calls or results are read for them. Ids are codes below ``ncodes``. ``steps``:
    ``(grouping, keep_groups, target_chars)`` per trim of the history; rows where ``skip`` is
    set are left at zero.

    Returns a :class:`~contextpolicy._records.RowsRecord`: ``messages[a:head]`` is a row's
    system fragment, ``messages[cut:tail]`` its kept history, ``messages[tail:b]`` its
    question.
    """
    ncodes = c_int(ncodes)
    trigger_chars, watermark_chars = c_int(trigger_chars), c_int(watermark_chars)
    steps = c_tuple(steps, "steps")
    rows = _Rows(list_offsets, roles, flags, chars, call_offsets, call_codes, result_offsets,
                 result_codes, ncodes, steps, skip)
    n, roles, flags, chars = rows.n, rows.roles, rows.flags, rows.chars
    out = [np.zeros(n, dtype=np.int64) for _ in range(6)]
    fired_out = np.zeros(n, dtype=np.uint8)
    missed_out = np.zeros(n, dtype=np.uint8)
    warn: list[tuple[int, int, int, int, int]] = []
    tool_bits = FLAG_TOOL_CALLS | FLAG_TOOL_RESULT
    for r in range(n):
        if rows.skip is not None and rows.skip[r]:
            continue
        a, b = int(rows.offsets[r]), int(rows.offsets[r + 1])
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
        h0, total, history, removed_groups, floor = _trim_history(
            rows, head, tail, total, fired, watermark_chars)
        for fragment, (lo, hi) in enumerate(((a, head), (h0, tail), (tail, b))):
            if hi > lo and np.any(flags[lo:hi] & tool_bits):
                warn += [(r, fragment, i - lo, code, cid)
                         for i, code, cid in rows.pairing(lo, hi)]
        for k, value in enumerate((head, h0, tail, int(chars[a:b].sum()), total,
                                   removed_groups)):
            out[k][r] = value
        fired_out[r] = fired
        if fired and watermark_chars >= 0 and total > watermark_chars:
            # What no trim may reduce: all but the history (and the history too without one).
            fixed = total - history if rows.specs else total
            missed_out[r] = missed_code(fixed > watermark_chars, False, floor)
    w = np.array(warn, dtype=np.int64).reshape(-1, 5)
    columns = [np.ascontiguousarray(w[:, k]) for k in range(5)]
    return RowsRecord(out[0], out[1], out[2], out[3], out[4], out[5], fired_out, missed_out,
                      RowWarnings(columns[0], columns[1], columns[2], columns[3], columns[4]))
