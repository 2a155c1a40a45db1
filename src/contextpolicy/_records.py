"""The records the kernels return, defined once.

Both kernels build these same classes: the pure twin by calling them, the compiled kernel by
filling instances in C (``csrc/records.h``), so a record reads the same by name on either.
Each is a plain named tuple (no fields of its own beyond the tuple's), which is what lets the
compiled kernel make one as cheaply as a tuple.
"""

from __future__ import annotations

from typing import Any, NamedTuple


class FragmentFigures(NamedTuple):
    """One fragment measured: its chars, messages and opaque parts."""

    chars: int
    messages: int
    opaque_parts: int


class StepRecord(NamedTuple):
    """What one trim step did. ``status``: ``applied``, ``unchanged`` or ``skipped``;
    ``reason``: why (``trimmed``, ``keep-groups-floor``, ``within-target``, ``not-triggered``,
    ``target-reached``, ``fragment-absent``, ``fragment-empty``); the chars and groups of its
    fragment before and after (``None`` when skipped) and the messages it removed."""

    status: str
    reason: str
    chars_before: int | None
    chars_after: int | None
    groups_before: int | None
    groups_after: int | None
    messages_removed: int


class KernelWarning(NamedTuple):
    """A warning of a result: the fragment's index in the plan, the message's index in that
    fragment, its code, and its detail (``(role, messages)`` for ``unknown-role``, the tool call
    id for the pairing warnings)."""

    fragment: int
    message_index: int
    code: str
    detail: Any


class FusedRecord(NamedTuple):
    """A plan reduced in one call (``reduce_plan``, ``reduce_transcript``): whether the trigger
    fired; each fragment's :class:`FragmentFigures` before and after; the new message list of
    each fragment a trim changed (``None`` for the others); a :class:`StepRecord` per step; the
    result's :class:`KernelWarning` s (first the unknown roles, then the pairing warnings); the
    assembled input (``None`` in the records of a JSONL line read as bytes); the fragment ids;
    then the plan's chars, messages and opaque parts before and after, the messages and groups
    the applied trims removed, and whether the chars watermark is met after."""

    triggered: bool
    before: list[FragmentFigures]
    after: list[FragmentFigures]
    kept: list[Any]
    steps: list[StepRecord]
    warnings: list[KernelWarning]
    input: list[Any] | None
    ids: list[str]
    chars_before: int
    messages_before: int
    opaque_before: int
    chars_after: int
    messages_after: int
    opaque_after: int
    messages_removed: int
    groups_removed: int
    watermark_met: bool


class RowWarnings(NamedTuple):
    """The pairing warnings of many rows (``reduce_rows``), an int64 array per field: the row,
    the fragment (0 system, 1 history, 2 question), the message's index within it, the code
    (``ORPHAN_CODE`` or ``UNANSWERED_CODE``) and the tool call id's code (-1: none)."""

    row: Any
    fragment: Any
    message_index: Any
    code: Any
    id: Any


class RowsRecord(NamedTuple):
    """Many transcripts reduced at once (``reduce_rows``), an array per field with a value
    per row: where the system fragment ends (``head``), where the kept history begins
    (``cut``) and where the question begins (``tail``), as absolute message indices; the chars
    before and after; the groups removed; whether the trigger fired; the code of the report's
    ``missedReason`` (its index in ``MISSED_REASONS`` + 1, 0 for none); and the
    :class:`RowWarnings`."""

    head: Any
    cut: Any
    tail: Any
    chars_before: Any
    chars_after: Any
    groups_removed: Any
    triggered: Any
    missed: Any
    warnings: RowWarnings


# The records made in C, as tuples (csrc/records.h): each a named tuple with nothing of its own.
RECORDS = (FragmentFigures, StepRecord, KernelWarning, FusedRecord)
