"""The fused reduce of one plan: measure, trim and assemble in one call (the pure twin of
``csrc/_fused.pxi``).

:func:`reduce_plan` and :func:`fused_result` run a prepared policy's trims over a plan's
fragments; :func:`split_transcript` and :func:`reduce_transcript` do the same for one chat
transcript (the record the JSONL byte path and the columnar path are held to).
"""

from __future__ import annotations

from typing import Any, cast

from ._c_args import c_int, c_tuple, c_unpack
from ._messages_py import measure
from ._read import exact_str, fields
from ._records import FragmentFigures, FusedRecord, KernelWarning, StepRecord
from ._tables import (
    INSTRUCTION_ROLE_CODES,
    ITEM_MESSAGE,
    ITEM_UNKNOWN,
    PART_CODES,
    PART_TOOL_RESULT,
    ROLE_CODES,
)
from ._tool_ids import item_code
from .errors import ContextPlanError


def reduce_plan(
    fragments: list[Any], steps: tuple[tuple[str, int, int, int], ...], trigger_chars: int,
    watermark_chars: int, fragment_type: type | None = None,
    protected_kinds: frozenset[str] | None = None,
) -> FusedRecord | None:
    """The default ``validate``, or a ``reduce`` whose steps are all trims by chars, of a whole
    plan in one call: what the pipeline's measure, reduce, report and assemble compute for it.

    ``fragments``: the plan's fragments (``id``, ``messages``, ``text`` and, for text,
    ``assembled_role`` are read once each, in order); ``steps``: ``(fragment id, grouping,
    keep_groups, target_chars)`` per trim; ``trigger_chars`` and ``watermark_chars``: the
    policy's, ``-1`` for none. Returns a :class:`~contextpolicy._records.FusedRecord`: the
    first warnings are an ``unknown-role`` for each role of a fragment the accounting does not
    know (at its first message), then the pairing warnings. A step that runs on a fragment
    holding no message is skipped (``fragment-empty``), and so is one on a ``history`` the plan
    does not hold (``fragment-absent``); any other fragment a step names must be there. With
    ``fragment_type``, ``None`` when a fragment is not exactly of that type (fields are then
    read from the ``__dict__``, as validated); with ``protected_kinds``, ``None`` when a step's
    fragment is missing (but for the history), protected (its kind is one of them, or it is
    marked ``protected``) or holds text.
    """
    trigger_chars, watermark_chars = c_int(trigger_chars), c_int(watermark_chars)
    steps = c_tuple(steps, "steps")
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
    result._input = raw.input
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
) -> FusedRecord:
    """:func:`reduce_plan` of ``ContextPlan.from_messages(messages)`` without building the
    plan: fragments ``system``, ``history`` and ``question`` as :func:`split_transcript` cuts
    them, each there only when it holds a message."""
    trigger_chars, watermark_chars = c_int(trigger_chars), c_int(watermark_chars)
    steps = c_tuple(steps, "steps")
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
) -> FusedRecord:
    measures = [_measured(fid, messages, text)
                for fid, messages, text in zip(ids, lists, texts, strict=True)]
    before = [figures for figures, _ in measures]
    fired = trigger_chars >= 0 and sum(f.chars for f in before) > trigger_chars
    kept: list[Any] = [None] * len(ids)
    done: list[StepRecord] = []
    # the plan's chars now, the messages and groups the applied trims removed
    totals = [sum(f.chars for f in before), 0, 0]
    for step in steps:
        _trim_step(step, ids, lists, measures, kept, done, fired, watermark_chars, totals)
    # Without steps nothing changed: the figures after are the figures before (one list).
    after = [figures for figures, _ in measures] if steps else before
    plan_before = (sum(f.chars for f in before), sum(f.messages for f in before),
                   sum(f.opaque_parts for f in before))
    # (one object per figure when nothing changed)
    plan_after = plan_before if after is before else (
        sum(f.chars for f in after), sum(f.messages for f in after),
        sum(f.opaque_parts for f in after))
    return FusedRecord(fired, before, after, kept, done, _warnings(ids, lists, measures),
                       _assembled(lists, texts), ids, *plan_before, *plan_after, totals[1],
                       totals[2], not (watermark_chars >= 0 and plan_after[0] > watermark_chars))


def _measured(fid: str, messages: Any, text: Any) -> tuple[FragmentFigures, Any]:
    """A fragment's figures, and its ``Measure`` (``None`` for a text fragment)."""
    if messages is None:
        if not isinstance(text[1], str):
            raise TypeError(f"fragment {fid!r}: expected a str text")
        return FragmentFigures(len(exact_str(text[1])), 1, 0), None
    m = measure(messages, fid)
    return FragmentFigures(m.chars, m.messages, m.opaque_parts), m


def _trim_step(step: Any, ids: list[str], lists: list[Any], measures: list[Any],
               kept: list[Any], done: list[StepRecord], fired: bool, watermark_chars: int,
               totals: list[int]) -> None:
    """One trim of :func:`_reduce`: its record appended to ``done``; a fragment it cut has its
    new list (in ``lists`` and ``kept``) and measure; ``totals`` (the plan's chars, the
    messages and groups trims removed) follow."""
    fid, grouping, keep_groups, target = c_unpack(step, 4)
    grouping, keep_groups, target = c_int(grouping, "int"), c_int(keep_groups), c_int(target)
    if keep_groups < 0:
        raise ValueError("keep_groups must be >= 0")
    if target < 0:
        raise ValueError("target_chars must be >= 0")
    if not fired or not (watermark_chars >= 0 and totals[0] > watermark_chars):
        done.append(StepRecord("skipped", "not-triggered" if not fired else "target-reached",
                               None, None, None, None, 0))
        return
    if fid not in ids:
        if fid != "history":
            raise ValueError(f"a step names fragment {fid!r}, which the plan does not hold")
        done.append(StepRecord("skipped", "fragment-absent", None, None, None, None, 0))
        return
    i = ids.index(fid)
    m = measures[i][1]
    if m is None:
        raise TypeError(f"expected a list of messages, got {type(lists[i]).__name__}")
    if m.messages == 0:
        done.append(StepRecord("skipped", "fragment-empty", None, None, None, None, 0))
        return
    first, cut, ngroups = m.cut(lists[i], grouping, keep_groups, target)
    if cut == 0:
        reason = "within-target" if m.chars <= target else "keep-groups-floor"
        done.append(StepRecord("unchanged", reason, m.chars, m.chars, ngroups, ngroups, 0))
        return
    tail = m.tail(cut)
    lists[i] = kept[i] = list.__getitem__(lists[i], slice(cut, None))
    measures[i] = (FragmentFigures(tail.chars, tail.messages, tail.opaque_parts), tail)
    reason = "trimmed" if tail.chars <= target else "keep-groups-floor"
    done.append(StepRecord("applied", reason, m.chars, tail.chars, ngroups, ngroups - first,
                           cut))
    totals[0] += tail.chars - m.chars
    totals[1] += cut
    totals[2] += first


def _warnings(ids: list[str], lists: list[Any], measures: list[Any]) -> list[KernelWarning]:
    """The result's warnings: the unknown roles of every fragment, then the pairing warnings."""
    warnings = [
        KernelWarning(i, first, "unknown-role", (role, count))
        for i, (_, m) in enumerate(measures) if m is not None and m.unknown_role
        for first, role, count in m.unknown_roles(lists[i], 0, ids[i])
    ]
    return warnings + [
        KernelWarning(i, index, code, cid)
        for i, (_, m) in enumerate(measures) if m is not None and m.tool_traffic
        for index, code, cid in m.pairing(lists[i])
    ]


def _assembled(lists: list[Any], texts: list[Any]) -> list[Any]:
    """The fragments as they ended, one list of messages (a text fragment as one message)."""
    assembled: list[Any] = []
    for i, messages in enumerate(lists):
        if messages is None:
            role, text = texts[i]
            assembled.append({"role": role, "content": text})
        else:
            assembled.extend(messages if type(messages) is list else list.copy(messages))
    return assembled
