"""Groups, trim cuts, tool pairing and unknown roles of a measured message list (the pure
twin of ``csrc/_pairing.pxi``).

:func:`group_offsets` groups measured messages by user turn (or one per message),
:func:`trim_cut` finds the first group a trim keeps, :func:`tool_pairing` finds orphan tool
results and unanswered calls.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import numpy.typing as npt

from ._c_args import Int64Array, c_array, c_int
from ._read import exact_str, fields
from ._tables import (
    FLAG_GLUES_NEXT,
    FLAG_OPENS_TURN,
    FLAG_TOOL_CALLS,
    FLAG_TOOL_RESULT,
    FLAG_UNKNOWN_ROLE,
    GROUP_MESSAGE,
    GROUP_USER_TURN,
)
from ._tool_ids import call_ids, result_ids
from .errors import ContextPlanError


def group_offsets(
    flags: npt.NDArray[np.uint8], chars: Int64Array, grouping: int = GROUP_USER_TURN
) -> tuple[Int64Array, Int64Array]:
    """Group messages; return (offsets, chars per group), ``len(offsets) == groups + 1``.

    ``GROUP_USER_TURN``: a group starts at each turn-opening message; messages before the first
    one form the lead group. ``GROUP_MESSAGE``: a group per message, except that tool results
    stay in the group of the message before them.
    """
    grouping = c_int(grouping, "int")
    flags = np.array(c_array(flags, np.uint8), copy=True)  # read once
    chars = c_array(chars, np.int64)
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
    keep_groups, target_chars = c_int(keep_groups), c_int(target_chars)
    if keep_groups < 0 or target_chars < 0:
        raise ValueError("keep_groups and target_chars must be >= 0")
    group_chars = c_array(group_chars, np.int64)
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
    flags = c_array(flags, np.uint8)
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
