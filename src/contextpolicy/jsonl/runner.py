"""Process JSONL conversations with one policy: the engine behind ``contextpolicy reduce``.

Each line is a transcript (``{"id": ..., "messages": [...]}``, turned into a plan by
``ContextPlan.from_messages``) or a plan (``{"fragments": [...]}``). The output line has the
input's shape: the transcript's ``messages`` (or the plan's ``fragments``) replaced by the result,
every other key kept. With ``--jobs N`` the lines are shared out in batches between processes
and come back in input order, so ``--jobs 2`` writes exactly the bytes ``--jobs 1`` does.
"""

from __future__ import annotations

import bisect
import contextlib
import copy
import gc
import itertools
import multiprocessing
import os
import queue
import re
import signal
import sys
import threading
import time
import traceback
from collections import Counter, deque
from collections.abc import Callable, Generator, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any, NamedTuple

import numpy as np
import orjson

from .. import _kernel
from .._tables import MISSED_REASONS
from ..core import fused_missed_reason, fused_report_json, process_context
from ..errors import ContextAuditError, ContextError, ContextPlanError, ContextPolicyError
from ..plan import PROTECTED_KINDS, ContextPlan, as_plan
from ..policy import ReducePolicy, validate_context_policy
from ..prepared import PreparedPolicy
from ..report import ContextReport
from .diagnose import json_problem, top_level_hint
from .files import (
    FileError,
    FileRange,
    dumps,
    open_range_file,
    read_file_range,
    read_range,
    reread_exactly,
)

__all__ = ["LineError", "LineResult", "Summary", "WorkerError", "process_lines"]

O_BINARY = getattr(os, "O_BINARY", 0)  # Windows
BATCH_LINES = 64
# About this much input per file range or batch of lines: a range read as bytes is copied from
# the page cache, scanned and written while it is still in the core's cache (measured A/B:
# ranges of 1 MB ran chats 2-16% faster than ranges of 4 MB in four runs of five, 2% slower in
# one; ranges of 256 KB were slower again).
BATCH_BYTES = 1 << 20
# The least room left in the buffer a file range is read into, for a later range a little longer.
READ_BUFFER_SLACK = 256 << 10
# Ranges queued for each worker process, so that it never waits for the next one.
QUEUED = 2
# While the main process works through a range itself, it collects finished ranges from the
# workers after about this much input, so a worker is never left waiting to hand one over.
POLL_BYTES = 256 << 10
# Lines read as bytes go to the kernel in chunks of about this much input when they come back as
# runs (the kernel reads them at gigabytes a second: a chunk is a millisecond or so of work, and
# its output is one allocation), and of POLL_BYTES when every line has a result of its own.
SCAN_CHUNK_BYTES = 1 << 20
# With lines read as bytes, --jobs N on a file shares its ranges between N threads of this
# process (True), or between worker processes as for the object path (False). The scanner
# releases the GIL; on 2 cores threads measured 1.2-1.45x --jobs 1 where processes, which
# must send every output back to be written, measured 0.6x.
SCAN_THREADS = True
# A worker's finished ranges wait in a pipe this large (where the system allows it).
PIPE_BYTES = 1 << 20
# A parsed transcript is thousands of acyclic dicts and lists that reference counting frees the
# moment the line is done; collecting after every 700 of them (the default) only walks them in
# vain. Cycles are still collected, every this many container allocations.
GC_GEN0_THRESHOLD = 50_000


@contextlib.contextmanager
def _streaming_gc() -> Iterator[None]:
    """Garbage collection tuned for a stream of parsed lines: what exists before the run (modules,
    the policy) is frozen, so full collections never walk it again, and young collections run
    less often. Both are restored afterwards."""
    threshold = gc.get_threshold()
    gc.freeze()
    gc.set_threshold(GC_GEN0_THRESHOLD, *threshold[1:])
    try:
        yield
    finally:
        gc.set_threshold(*threshold)
        gc.unfreeze()


class Figures(NamedTuple):
    """A line's figures; for a run of lines, the counts of lines triggered, reaching the target
    and reduced, the sums, and the warnings and missed reasons as a count per code."""

    triggered: int
    reached: int
    chars_before: int
    chars_after: int
    messages_before: int
    messages_after: int
    messages_removed: int
    groups_removed: int
    warnings: list[str] | dict[str, int]  # the codes of a line's warnings
    reduced: int  # chars or messages went down
    missed: list[str] | dict[str, int]  # a line's missedReason, if it has one


# _kernel.reduce_lines' figures: where "reduced", the missed reasons (MISSED_REASONS) and the
# warnings of each code are.
REDUCED_FIGURE = 11
MISSED_FIGURES = slice(12, 12 + len(MISSED_REASONS))
WARNING_CODES = ("orphan-tool-result", "unanswered-tool-call", "unknown-role")
WARNING_FIGURES = (9, 10, 12 + len(MISSED_REASONS))


@dataclass(slots=True)
class LineResult:
    """What one input line became, or a run of ``lines`` consecutive lines that took the byte
    path (their outputs one after another, their figures added up, warnings by code)."""

    line: int
    # bytes; a run's may be a bytearray, or a view of what a worker process sent
    output: bytes | bytearray | memoryview | None = None
    report: bytes | None = None
    figures: Figures | None = None
    error: str | None = None
    # The byte of the line (from 1) where ``error`` is, when it is at one (invalid JSON).
    column: int = 0
    violation: bool = False
    lines: int = 1
    scanned: int = 0  # how many of the lines took the byte path
    # A run's reports, (line number, report entry without its opening brace) per line, until
    # they are numbered.
    reports: list[tuple[int, bytes]] | None = None


class LineError(Exception):
    """A line that cannot be processed; ``str()`` says what was expected."""


@dataclass
class Summary:
    """Totals over a run, all counted from the per-line reports."""

    conversations: int = 0
    skipped: int = 0
    triggered: int = 0
    target_reached: int = 0
    reduced: int = 0
    audit_violations: int = 0
    chars_before: int = 0
    chars_after: int = 0
    messages_before: int = 0
    messages_after: int = 0
    messages_removed: int = 0
    groups_removed: int = 0
    bytes_in: int = 0
    scanned: int = 0
    seconds: float = 0.0
    warnings: Counter[str] = field(default_factory=Counter)
    missed: Counter[str] = field(default_factory=Counter)  # triggered runs that missed, by reason
    skipped_lines: list[dict[str, Any]] = field(default_factory=list)

    def add(self, result: LineResult) -> None:
        if result.error is not None:
            self.skipped += 1
            entry: dict[str, Any] = {"line": result.line, "error": result.error}
            if result.column:
                entry["column"] = result.column
            self.skipped_lines.append(entry)
            return
        assert result.figures is not None
        (triggered, reached, c_before, c_after, m_before, m_after, removed, groups, warnings,
         reduced, missed) = result.figures
        self.conversations += result.lines
        self.scanned += result.scanned
        self.triggered += triggered
        self.target_reached += reached
        self.reduced += reduced
        self.audit_violations += result.violation
        self.chars_before += c_before
        self.chars_after += c_after
        self.messages_before += m_before
        self.messages_after += m_after
        self.messages_removed += removed
        self.groups_removed += groups
        if warnings:
            self.warnings.update(warnings)
        if missed:
            self.missed.update(missed)

    def to_json_dict(self) -> dict[str, Any]:
        seconds = max(self.seconds, 1e-9)
        return {
            "conversations": self.conversations,
            "skipped": self.skipped,
            "triggered": self.triggered,
            # Over every conversation: one that did not trigger is within its target.
            "targetReached": self.target_reached,
            # Conversations whose chars or messages went down; triggered ones that missed their
            # target, and the count of each reason (every reason, in precedence order).
            "reduced": self.reduced,
            "missedTarget": sum(self.missed.values()),
            "missedReasons": {reason: self.missed[reason] for reason in MISSED_REASONS},
            "auditViolations": self.audit_violations,
            "charsBefore": self.chars_before,
            "charsAfter": self.chars_after,
            "messagesBefore": self.messages_before,
            "messagesAfter": self.messages_after,
            "messagesRemoved": self.messages_removed,
            "groupsRemoved": self.groups_removed,
            "warnings": dict(sorted(self.warnings.items())),
            "bytesIn": self.bytes_in,
            # Lines read as bytes (the kernel's scanner) and lines parsed into objects.
            "paths": {"bytes": self.scanned,
                      "objects": self.conversations + self.skipped - self.scanned},
            "seconds": round(self.seconds, 6),
            "megabytesPerSecond": round(self.bytes_in / seconds / 1e6, 3),
            "conversationsPerSecond": round(self.conversations / seconds, 3),
            "skippedLines": self.skipped_lines,
        }


def _figures(report: ContextReport) -> Figures:
    removed = sum(s.messages_removed for s in report.steps if s.status == "applied")
    groups = sum(
        (s.groups_before or 0) - (s.groups_after or 0)
        for s in report.steps if s.status == "applied" and s.kind == "trim"
    )
    before, after = report.before, report.after
    return Figures(report.triggered, bool(report.target_reached), before.chars, after.chars,
                   before.messages, after.messages, removed, groups,
                   [w.code for w in report.warnings],
                   after.chars < before.chars or after.messages < before.messages,
                   [report.missed_reason] if report.missed_reason is not None else [])


def _fused_figures(raw: tuple[Any, ...], target_reached: bool,
                   prepared: PreparedPolicy) -> Figures:
    """:func:`_figures` of a run the kernel did in one call (``_kernel.reduce_transcript``), from
    its records (a test holds the two to each other)."""
    totals = raw[8]
    missed = fused_missed_reason(prepared, raw)
    return Figures(raw[0], target_reached, totals[0], totals[3], totals[1], totals[4], totals[6],
                   totals[7], [w[2] for w in raw[5]] if raw[5] else [],
                   totals[3] < totals[0] or totals[4] < totals[1],
                   [missed] if missed is not None else [])


# ---------------------------------------------------------------------------------------------
# Integers beyond 64 bits: the lines that must be read again exactly

# Eight bytes at a time: a run of 19 digits holds at least one aligned word of eight digits,
# wherever it starts. Words whose eight bytes all have the high nibble 3 (the digits, and
# ":;<=>?") are looked at closely; they are rare in JSON.
_HIGH = np.uint64(0xF0F0F0F0F0F0F0F0)
_THREES = np.uint64(0x3030303030303030)
_DIGITS = re.compile(rb"[0-9]*")
_DIGITS_AS_ZEROS = bytes(0x30 if 0x30 <= i <= 0x39 else 0x20 for i in range(256))
_RUN = b"0" * 19
# Shorter buffers are scanned byte by byte: below this, numpy's start-up costs more.
SMALL_SCAN = 16 << 10
SCAN_WORDS = 1 << 15  # 256 KB of input at a time


def long_digit_runs(data: bytes | bytearray | memoryview) -> list[int]:
    """Where the runs of 19 digits or more in ``data`` start: where an integer may be that
    orjson reads as a float (it keeps -2**63 .. 2**64 - 1 exact). Some twenty times faster than
    a regular expression over the same bytes (0.06 ns a byte), so that every line is checked."""
    size = len(data)
    if size < SMALL_SCAN:
        marked = (data if isinstance(data, (bytes, bytearray)) else bytes(data)).translate(
            _DIGITS_AS_ZEROS)
        starts = []
        at = marked.find(_RUN)
        while at >= 0:
            starts.append(at)
            end = marked.find(b" ", at)
            if end < 0:
                break
            at = marked.find(_RUN, end)
        return starts
    words = np.frombuffer(data, np.uint64, count=size // 8)
    high = np.empty(min(SCAN_WORDS, len(words)), np.uint64)
    found = np.empty(len(high), bool)
    candidates: list[int] = []
    for begin in range(0, len(words), SCAN_WORDS):
        part = words[begin:begin + SCAN_WORDS]
        np.bitwise_and(part, _HIGH, out=high[:len(part)])
        hits = np.equal(high[:len(part)], _THREES, out=found[:len(part)])
        if hits.any():
            candidates += (np.flatnonzero(hits) + begin).tolist()
    starts = []
    end = 0
    for word in candidates:
        at = 8 * word
        if at < end:  # in the run just measured
            continue
        match = _DIGITS.match(data, at)
        if match is None or match.end() < at + 8:  # not eight digits: ":", "<" and the like
            continue
        start = at
        while start > 0 and 48 <= data[start - 1] <= 57:
            start -= 1
        end = match.end()
        if end - start >= 19:
            starts.append(start)
    return starts


def _lines_holding(starts: list[int], lines: list[Any], runs: list[int]) -> set[int]:
    """The numbers of the lines (``(number, line)``, starting at ``starts``) that hold one of
    the ``runs``."""
    held = set()
    for at in runs:
        index = bisect.bisect_right(starts, at) - 1
        if index >= 0:
            held.add(lines[index][0])
    return held


_OWN = object()  # a report's missedReason as its records give it


class _FusedReports:
    """The JSON of a line's report from the records of a one-call reduce: what
    ``dumps(fused_report_json(...))`` writes, byte for byte, from a template per shape of
    report (its fragments, the statuses and reasons of its steps, what is null) in which only
    the figures change; a report with warnings is written in full."""

    SENTINEL = 7_319_000_000_000_000_000  # figures no line can have
    LIMIT = 256  # shapes kept

    def __init__(self, prepared: PreparedPolicy, kinds: dict[str, tuple[str, bool]]) -> None:
        self.prepared = prepared
        self.kinds = kinds
        self.templates: dict[Any, tuple[bytes, list[int]]] = {}
        self._entry_template: Any = False  # not made yet
        # Templates need sentinels no figure of the policy's own could pass for.
        self.plain = b"%d" % (self.SENTINEL // 10**9) not in dumps(
            prepared.policy.to_json_dict())

    @staticmethod
    def _figures(raw: tuple[Any, ...]) -> list[Any]:
        _, before, after, _, done, _, _, _, totals = raw
        figures = list(totals[:6])
        for d in done:
            figures += d[2:7]
        for b, a in zip(before, after, strict=True):
            figures += (b[0], a[0], b[1], a[1])
        return figures

    def _json(self, raw: tuple[Any, ...], missed: Any = _OWN) -> bytes:
        """The report's JSON; ``missed``: its missedReason, when not what the records give (a
        template's records hold sentinels)."""
        kinds = self.kinds
        doc = fused_report_json(self.prepared, raw, [kinds[fid] for fid in raw[7]])
        if missed is not _OWN:
            doc["missedReason"] = missed
        return dumps(doc)

    def render(self, raw: tuple[Any, ...]) -> bytes:
        fired, _, _, kept, done, found, _, ids, totals = raw
        if found or not self.plain:
            return self._json(raw)
        figures = self._figures(raw)
        missed = fused_missed_reason(self.prepared, raw)
        key = (tuple(ids), fired, totals[8], missed, tuple(d[:2] for d in done),
               tuple(k is not None for k in kept), tuple(f is None for f in figures))
        template = self.templates.get(key)
        if template is None:
            template = self._template(raw, figures, missed)
            if len(self.templates) < self.LIMIT:
                self.templates[key] = template
        text, order = template
        return text % tuple([figures[i] for i in order])

    def entry_template(self) -> tuple[Any, ...] | None:
        """The template of ``_kernel.report_lines`` for this policy: the programs of a line's
        report entry (without its opening brace) cut from what :func:`fused_report_json` writes
        with every figure a sentinel of its slot; None where a sentinel would be ambiguous
        (``plain`` false)."""
        if self._entry_template is False:
            self._entry_template = self._make_entry_template()
        return self._entry_template  # type: ignore[return-value]

    def _make_entry_template(self) -> tuple[Any, ...] | None:
        if not self.plain:
            return None
        slot = {name: self.SENTINEL + i for i, name in enumerate(_kernel.ENTRY_SLOTS)}
        ids = ["system", "history", "question"]
        nsteps = len(self.prepared._fused or ())
        done = [tuple(slot[k] for k in ("status", "reason", "chars-before", "chars-after",
                                         "groups-before", "groups-after", "messages-removed"))
                ] * nsteps
        side = (slot["fragment-chars-before"], slot["fragment-messages-before"], 0)
        after = (slot["fragment-chars-after"], slot["fragment-messages-after"], 0)
        totals = (slot["before-chars"], slot["before-messages"], slot["before-opaque"],
                  slot["after-chars"], slot["after-messages"], slot["after-opaque"], 0, 0,
                  slot["target-reached"])
        raw: tuple[Any, ...] = (slot["triggered"], [side] * 3, [after] * 3, [True] * 3, done,
                                [], None, ids, totals)
        doc = fused_report_json(self.prepared, raw, [self.kinds[fid] for fid in ids])
        doc["missedReason"] = slot["missed-reason"]
        for side_doc in (doc["before"], doc["after"]):
            side_doc["fragments"] = slot["fragments-count"]
        steps = doc["steps"]
        fragments = doc["fragments"]
        for fragment in fragments:
            fragment["changed"] = slot["fragment-changed"]
        doc["steps"], doc["fragments"] = slot["steps"], slot["fragments"]
        entry = dumps({"id": slot["id"], "report": doc})[1:]
        programs = (self._program(entry, slot["id"], slot["status"]),
                    tuple(self._program(dumps(s), slot["status"], slot["fragment-chars-before"])
                          for s in steps),
                    tuple(self._program(dumps(f), slot["fragment-chars-before"],
                                        self.SENTINEL + len(_kernel.ENTRY_SLOTS))
                          for f in fragments))
        if None in programs[:1] + programs[1] + programs[2]:
            return None
        return programs

    def _program(self, text: bytes, lo: int, hi: int) -> tuple[Any, ...] | None:
        # bytes with the slot code of each sentinel between them (the sentinels from lo to hi)
        pieces = re.split(rb"(?<![0-9])(%d[0-9]{3})(?![0-9])" % (self.SENTINEL // 1000), text)
        program: list[Any] = []
        for i, piece in enumerate(pieces):
            if i % 2:
                if not lo <= int(piece) < hi:
                    return None
                program.append(int(piece) - self.SENTINEL)
            else:
                program.append(piece)
        return tuple(program)

    def _template(self, raw: tuple[Any, ...], figures: list[Any], missed: str | None,
                  ) -> tuple[bytes, list[int]]:
        # The report of this shape with every figure a sentinel of its own, the sentinels
        # then made %d slots in the order they appear.
        marks = [None if f is None else self.SENTINEL + i for i, f in enumerate(figures)]
        fired, before, after, kept, done, found, inputs, ids, totals = raw
        at = iter(marks)
        t = [next(at) for _ in range(6)]
        new_done = [(*d[:2], *(next(at) for _ in range(5))) for d in done]
        sides = [[next(at) for _ in range(4)] for _ in before]
        fake = (fired, [(s[0], s[2], b[2]) for s, b in zip(sides, before, strict=True)],
                [(s[1], s[3], a[2]) for s, a in zip(sides, after, strict=True)], kept,
                new_done, found, inputs, ids, (*t, *totals[6:]))
        text = self._json(fake, missed).replace(b"%", b"%%")
        found_at = sorted((text.index(b"%d" % m), m, i) for i, m in enumerate(marks)
                          if m is not None)
        for _, mark, _ in found_at:
            text = text.replace(b"%d" % mark, b"%d", 1)
        return text, [i for _, _, i in found_at]


class WorkerError(RuntimeError):
    """A worker process failed (its traceback follows) or exited unexpectedly."""


def _exit_status(code: int | None) -> str:
    if code is not None and code < 0:
        with contextlib.suppress(ValueError):
            return f"exit code {code}, {signal.Signals(-code).name}"
    return f"exit code {code}"


class _Worker:
    """Holds the validated policy; turns lines into results.

    When the policy is one the kernel runs in one call, transcript lines are read as bytes
    (``_kernel.reduce_lines``): a line whose shape the scanner takes is reduced without being
    parsed, its kept messages copied byte for byte; every other line, and every line of any
    other policy, is parsed and processed as objects (the object path)."""

    # Read transcript lines as bytes where the policy allows (off: every line as objects).
    byte_path = True

    def __init__(
        self, policy: dict[str, Any], with_reports: bool,
        handlers: dict[str, Callable[..., Any]] | None = None, runs: bool = False,
    ) -> None:
        self.runs = runs
        self.policy = validate_context_policy(policy)
        # The policy and its handlers: a handler a step names that is missing here is an error
        # each line reports.
        self.handlers = dict(handlers or {})
        self.prepared = PreparedPolicy._of(self.policy, self.handlers, None)
        self.policy_doc = policy
        self.with_reports = with_reports
        self._files: dict[str, int] = {}  # open input files, by path
        self._buffer = bytearray()  # where a file range is read
        # The numbers of the lines of the batch at hand to be read again exactly, once the
        # batch has been checked (a line handed over alone is checked by itself).
        self._exact: set[int] = set()
        self._checked = False
        # A transcript in one kernel call (_kernel.reduce_transcript) when the policy is one the
        # kernel runs and names no fragment but the history, which may change and holds messages.
        prepared = self.prepared
        self.fused = prepared._fused if all(
            ref.name == "history" for ref in prepared._refs
        ) else None
        self.reduces = type(self.policy) is ReducePolicy
        self.transcript_kinds = {fid: (fid, fid in PROTECTED_KINDS)
                                 for fid in ("system", "history", "question")}
        self.scan = self.fused is not None and self.byte_path
        self.reports = _FusedReports(prepared, self.transcript_kinds)

    def line(self, number: int, raw: bytes | memoryview) -> LineResult:
        exact = number in self._exact if self._checked else bool(long_digit_runs(raw))
        try:
            doc = orjson.loads(raw)
        except orjson.JSONDecodeError as exc:
            problem = json_problem(raw, exc, jsonl=True)
            return LineResult(number, error=problem.message, column=problem.column)
        if exact:  # orjson may have read an integer beyond 64 bits as a float: read it exactly
            try:
                doc = reread_exactly(raw)
            except ValueError as exc:
                return LineResult(number, error=str(exc))
        try:
            return self._process(number, doc)
        except LineError as exc:
            return LineResult(number, error=str(exc))
        except (ContextPlanError, ContextPolicyError) as exc:
            return LineResult(number, error=str(exc))
        except ContextError as exc:
            return LineResult(number, error=f"{type(exc).__name__}: {exc}")
        except RecursionError:
            return LineResult(number, error="the line is nested too deeply to be processed")

    def _process(self, number: int, doc: Any) -> LineResult:
        if not isinstance(doc, dict):
            raise LineError(
                'expected a JSON object (a transcript {"id", "messages"} or a plan '
                f'{{"fragments"}}), got {type(doc).__name__}'
                + (f": {top_level_hint(doc)}" if isinstance(doc, list) else "")
            )
        if "fragments" in doc:
            plan_doc = {k: doc[k] for k in ("fragments", "original") if k in doc}
            plan = as_plan(plan_doc)
            transcript = False
        elif "messages" in doc:
            messages = doc["messages"]
            if self.fused is not None and type(messages) is list:
                return self._fused(number, doc, messages, self.fused)
            plan = ContextPlan.from_messages(messages)
            transcript = True
        else:
            keys = ", ".join(sorted(map(str, doc))) or "none"
            raise LineError(
                'expected a transcript {"id", "messages"} or a plan {"fragments"}; '
                f"the object has keys: {keys}"
            )
        violation = False
        try:
            result = process_context(plan, self.policy, handlers=self.handlers or None)
            report = result.report
            out = dict(doc)
            if transcript:
                out["messages"] = result.input
            else:
                out["fragments"] = [
                    f.model_dump(by_alias=True, exclude_none=True) for f in result.plan.fragments
                ]
        except ContextAuditError as exc:
            report = exc.report
            violation = True
            out = doc
        # dumps: orjson's bytes, also for what orjson reads but will not write (nesting deeper
        # than 254 levels, integers beyond 64 bits).
        line = LineResult(
            number, output=dumps(out) + b"\n", figures=_figures(report), violation=violation,
        )
        if self.with_reports:
            # The line number is put in front by the caller, who knows where the batch began.
            entry = {"id": doc.get("id"), "report": report.model_dump(by_alias=True, mode="json")}
            line.report = dumps(entry)
        return line

    def _fused(
        self, number: int, doc: dict[str, Any], messages: list[Any],
        steps: tuple[tuple[str, int, int, int], ...],
    ) -> LineResult:
        prepared = self.prepared
        raw = _kernel.reduce_transcript(messages, steps, prepared._trigger, prepared._watermark)
        out = dict(doc)
        out["messages"] = raw[6]
        # A validate reaches no target (report.targetReached is null).
        line = LineResult(number, output=dumps(out) + b"\n",
                          figures=_fused_figures(raw, self.reduces and raw[8][8], prepared))
        if self.with_reports:
            kinds = self.transcript_kinds
            line.report = dumps({"id": doc.get("id"), "report": fused_report_json(
                prepared, raw, [kinds[fid] for fid in raw[7]])})
        return line

    def copy(self) -> _Worker:
        """A worker for another thread: the same policy, a buffer and open files of its own."""
        other = copy.copy(self)
        other._files = {}
        other._buffer = bytearray()
        other._exact = set()
        return other

    def in_worker_process(self) -> _Worker:
        """Set up a worker process, which lives for one run: input files of its own, signals
        left to the main process, an exit of its own when the main process has gone, and the
        collector settings of ``_streaming_gc`` for good."""
        self._files = {}
        self._buffer = bytearray()
        _worker_signals()
        _exit_with_parent()
        gc.freeze()
        gc.set_threshold(GC_GEN0_THRESHOLD, *gc.get_threshold()[1:])
        return self

    def close(self) -> None:
        """Close the input files opened so far."""
        for fd in self._files.values():
            os.close(fd)
        self._files.clear()

    def __reduce__(self) -> tuple[Any, ...]:
        # A spawned worker process validates the policy again from the document.
        # Handlers travel pickled (the built-in ones are plain objects with their parameters).
        # Whether lines are read as bytes travels too: a spawned process starts from defaults.
        return (_Worker, (self.policy_doc, self.with_reports, self.handlers, self.runs),
                {"scan": self.scan})

    def batch(
        self, batch: list[tuple[int, bytes]] | FileRange,
        between: Callable[[], None] | None = None,
    ) -> tuple[int, list[LineResult]]:
        """Results of a batch, and how many lines it spanned (line numbers within a file range
        count from 1; the caller, who knows where the range starts, makes them absolute).
        ``between`` is called after every ``POLL_BYTES`` or so of input."""
        if not isinstance(batch, FileRange):
            if self.scan:
                joined = b"\n".join(raw for _, raw in batch)
                starts, stops, at = [], [], 0
                for _, raw in batch:
                    starts.append(at)
                    at += len(raw)
                    stops.append(at)
                    at += 1
                return 0, self._scanned(joined, [number for number, _ in batch], starts, stops,
                                        between)
            if len(batch) == 1:
                runs = long_digit_runs(batch[0][1])
                exact = {batch[0][0]} if runs else set()
            else:
                starts, at = [], 0
                for _, raw in batch:
                    starts.append(at)
                    at += len(raw) + 1
                runs = long_digit_runs(b"\n".join(raw for _, raw in batch))
                exact = _lines_holding(starts, batch, runs)
            return 0, self._checked_lines(batch, exact, between)
        fd = self._files.get(batch.path)
        if fd is None:
            fd = self._files[batch.path] = open_range_file(batch)
        # Only this range is held, and only while its lines are parsed, in one buffer that the
        # ranges share: however long the file, what is held never adds up. It is read, not
        # mapped: a file truncated meanwhile is a short read, and an error that says so, where a
        # mapping would crash the process (SIGBUS).
        if len(self._buffer) < batch.length:
            # A new buffer, never a resized one (the lines of an error's traceback may still be
            # views of the old one), made after the old one is let go, and with room for the
            # next ranges, which are as long give or take a line.
            self._buffer = bytearray()
            self._buffer = bytearray(batch.length + max(READ_BUFFER_SLACK, batch.length // 4))
        read_file_range(fd, batch, self._buffer)
        if self.scan:
            count, numbers_a, starts_a, stops_a = _kernel.line_bounds(self._buffer, 0,
                                                                      batch.length)
            return count, self._scanned(self._buffer, numbers_a.tolist(), starts_a.tolist(),
                                        stops_a.tolist(), between)
        count, lines, starts = read_range(self._buffer, FileRange(batch.path, 0, batch.length))
        if lines:
            with memoryview(self._buffer)[:batch.length] as data:
                exact = _lines_holding(starts, lines, long_digit_runs(data))
        else:
            exact = set()
        results = self._checked_lines(lines, exact, between)
        del lines
        return count, results

    def _scanned(
        self, data: bytes | bytearray, numbers: list[int], starts: list[int], stops: list[int],
        between: Callable[[], None] | None,
    ) -> list[LineResult]:
        """Results of the lines of ``data`` (numbered ``numbers``, from ``starts`` to ``stops``)
        read as bytes, a chunk of about ``POLL_BYTES`` at a time: consecutive lines of the byte
        path as one run (``runs``, without reports) or one result per line, the others through
        the object path."""
        results: list[LineResult] = []
        steps, prepared = self.fused, self.prepared
        assert steps is not None
        per_line = not self.runs
        with_reports = self.with_reports
        chunk = POLL_BYTES if per_line else SCAN_CHUNK_BYTES
        # A run's report entries written by the kernel from the policy's template.
        template = self.reports.entry_template() if with_reports and not per_line else None
        entries = b""
        entry_at: list[int] = []
        n = len(starts)
        begin = 0
        while begin < n:
            # the lines up to the first that ends a chunk past where this one begins
            end = min(bisect.bisect_left(stops, starts[begin] + chunk, begin) + 1, n)
            raws: list[Any] | None
            if template is not None:
                out, ends, figures, written, entry_ends, raws = _kernel.report_lines(
                    data, starts[begin:end], stops[begin:end], steps, prepared._trigger,
                    prepared._watermark, template)
                entries, entry_at = bytes(written), [0, *entry_ends.tolist()]
                del written
            else:
                out, ends, figures, raws = _kernel.reduce_lines(
                    data, starts[begin:end], stops[begin:end], steps, prepared._trigger,
                    prepared._watermark, per_line or with_reports)
            handled = figures[:, 0].tolist()
            offsets = [0, *ends.tolist()]
            if not per_line and not with_reports and all(handled):
                # the chunk is one run: its output as it is
                results.append(self._run(numbers[begin], out, figures.sum(axis=0).tolist(),
                                         end - begin))
                k = end - begin
            else:
                k = 0
            while k < end - begin:
                number = numbers[begin + k]
                if not handled[k]:
                    with memoryview(data) as view:
                        raw = view[starts[begin + k]:stops[begin + k]]
                        results.append(self.line(number, raw))
                        raw.release()
                    k += 1
                    continue
                if per_line:
                    assert raws is not None
                    results.append(self._scanned_line(
                        number, bytes(out[offsets[k]:offsets[k + 1]]), raws[k], data))
                    k += 1
                    continue
                run = k
                while k < end - begin and handled[k]:
                    k += 1
                result = self._run(number, out[offsets[run]:offsets[k]],
                                   figures[run:k].sum(axis=0).tolist(), k - run)
                if with_reports:
                    assert raws is not None
                    result.reports = [
                        (numbers[begin + j], self._report(raws[j], data)[1:]
                         if raws[j] is not None else entries[entry_at[j]:entry_at[j + 1]])
                        for j in range(run, k)]
                results.append(result)
            begin = end
            if between is not None:
                between()
        return results

    def _run(self, number: int, output: bytes | bytearray, sums: list[int], count: int,
             ) -> LineResult:
        warnings = {code: sums[i] for code, i in zip(WARNING_CODES, WARNING_FIGURES, strict=True)
                    if sums[i]}
        missed = {reason: n for reason, n in zip(MISSED_REASONS, sums[MISSED_FIGURES],
                                                 strict=True) if n}
        figures = Figures(sums[1], sums[2] if self.reduces else 0, sums[3], sums[4], sums[5],
                          sums[6], sums[7], sums[8], warnings, sums[REDUCED_FIGURE], missed)
        return LineResult(number, output=output, figures=figures, lines=count, scanned=count)

    def _scanned_line(self, number: int, output: bytes, record: Any,
                      data: bytes | bytearray) -> LineResult:
        raw = record[0]
        figures = _fused_figures(raw, self.reduces and raw[8][8], self.prepared)
        line = LineResult(number, output=output, figures=figures, scanned=1)
        if self.with_reports:
            line.report = self._report(record, data)
        return line

    def _report(self, record: Any, data: bytes | bytearray) -> bytes:
        """The report entry of a line read as bytes (its line number is put in front later)."""
        raw, id_span = record
        ident = None
        if id_span is not None:
            piece = bytes(data[id_span[0]:id_span[1]])
            ident = reread_exactly(piece) if long_digit_runs(piece) else orjson.loads(piece)
        return b'{"id":%b,"report":%b}' % (dumps(ident), self.reports.render(raw))

    def _checked_lines(
        self, lines: list[Any], exact: set[int], between: Callable[[], None] | None,
    ) -> list[LineResult]:
        self._exact, self._checked = exact, True
        try:
            return self._lines(lines, between)
        finally:
            self._exact, self._checked = set(), False

    def _lines(
        self, lines: Iterable[tuple[int, bytes | memoryview]], between: Callable[[], None] | None,
    ) -> list[LineResult]:
        if between is None:
            return [self.line(number, raw) for number, raw in lines]
        results = []
        seen = 0
        for number, raw in lines:
            results.append(self.line(number, raw))
            seen += len(raw)
            if seen >= POLL_BYTES:
                seen = 0
                between()
        return results


# ---------------------------------------------------------------------------------------------
# worker processes: no signal of the main process's, and no life after it

# How often a worker looks whether the main process is still there (where the system cannot
# tell it: elsewhere than Linux, or before it could ask).
PARENT_POLL_SECONDS = 0.5
PR_SET_PDEATHSIG = 1  # linux/prctl.h


def _worker_signals() -> None:
    """Ctrl-C is the main process's to handle (it stops the workers); the handlers the command
    line set for other signals (to clean up its files) are the main process's too: here they
    are the default again, so that the main process can stop a worker with SIGTERM."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    for signum in signal.valid_signals():
        if signum == signal.SIGINT:
            continue
        try:
            if callable(signal.getsignal(signum)):
                signal.signal(signum, signal.SIG_DFL)
        except (OSError, ValueError):
            continue


def _exit_with_parent() -> None:
    """Make this worker end when the process that started it does (killed, say, with SIGKILL,
    which leaves it no chance to stop its workers): on Linux the system kills it then
    (PR_SET_PDEATHSIG); everywhere on POSIX a thread checks for a new parent process."""
    if os.name != "posix":
        return
    parent = os.getppid()
    if sys.platform.startswith("linux"):
        with contextlib.suppress(Exception):
            import ctypes

            libc = ctypes.CDLL(None, use_errno=True)
            libc.prctl(ctypes.c_int(PR_SET_PDEATHSIG), ctypes.c_ulong(signal.SIGKILL),
                       ctypes.c_ulong(0), ctypes.c_ulong(0), ctypes.c_ulong(0))
    if os.getppid() != parent:  # it died before it could be asked to
        os._exit(1)
    threading.Thread(target=_watch_parent, args=(parent,), daemon=True,
                     name="contextpolicy-parent-watch").start()


def _watch_parent(parent: int) -> None:
    while True:
        time.sleep(PARENT_POLL_SECONDS)
        if os.getppid() != parent:
            os._exit(1)


_WORKER: _Worker | None = None


def _init_worker(worker: _Worker) -> None:
    global _WORKER
    _WORKER = worker.in_worker_process()


def _work(batch: list[tuple[int, bytes]] | FileRange) -> tuple[int, list[LineResult]]:
    assert _WORKER is not None
    return _WORKER.batch(batch)


START_METHOD_VARIABLE = "CONTEXTPOLICY_START_METHOD"
START_METHODS = ("fork", "spawn", "forkserver")


def start_method() -> str:
    """How worker processes are started: ``CONTEXTPOLICY_START_METHOD`` (``fork``, ``spawn`` or
    ``forkserver``) when it is set, so that the spawn path of macOS and Windows can run on Linux;
    otherwise fork, which starts workers in milliseconds, where it is safe (Linux), and spawn
    elsewhere. A value that is not one of those, or not available here, is a ``ValueError``
    naming the variable and the values allowed."""
    available = multiprocessing.get_all_start_methods()
    chosen = os.environ.get(START_METHOD_VARIABLE, "")
    if not chosen:
        return "fork" if "fork" in available and sys.platform == "linux" else "spawn"
    if chosen not in START_METHODS:
        raise ValueError(
            f"{START_METHOD_VARIABLE}={chosen!r} is not a start method: expected one of "
            f"{', '.join(START_METHODS)} (or unset for the default)"
        )
    if chosen not in available:
        here = ", ".join(m for m in START_METHODS if m in available)
        raise ValueError(
            f"{START_METHOD_VARIABLE}={chosen}: that start method is not available on "
            f"{sys.platform}; expected one of {here} (or unset for the default)"
        )
    return chosen


def _context() -> Any:
    return multiprocessing.get_context(start_method())




def process_lines(
    batches: Iterable[list[tuple[int, bytes]]] | Iterable[FileRange],
    policy: dict[str, Any],
    *,
    jobs: int = 1,
    with_reports: bool = False,
    on_batch: Callable[[], None] | None = None,
    handlers: dict[str, Callable[..., Any]] | None = None,
    runs: bool = False,
) -> Generator[LineResult, None, None]:
    """Results for every line, in input order, computed by up to ``jobs`` processes; with
    ``runs`` (and no reports), consecutive lines read as bytes come as one result for them all
    (``LineResult.lines``), which is what the command line writes and adds up.

    The ranges of a file (``InputFile.ranges``) are shared between this process and up to
    ``jobs - 1`` worker processes, each of which reads the file itself. Lines read from a stream
    go to up to ``jobs`` worker processes, while this one reads (and decompresses) the input.
    A worker is started only for work there is: never more of them than ranges or batches.
    """
    # An invalid policy, or start method of CONTEXTPOLICY_START_METHOD, fails here, before any
    # work (whatever the number of jobs, so that a wrong setting is never silently ignored).
    start_method()
    worker = _Worker(policy, with_reports, handlers, runs)
    base = 0

    def absolute(spanned: int, results: list[LineResult]) -> list[LineResult]:
        # A file range numbers its lines from its own start; lines sent as bytes carry theirs.
        nonlocal base
        for r in results:
            r.line += base
            if r.report is not None:
                r.report = b'{"line":%d,' % r.line + r.report[1:]
            elif r.reports is not None:  # a run's, as one piece of the report's list
                r.report = b",\n".join([b'{"line":%d,%b' % (number + base, entry)
                                        for number, entry in r.reports])
                r.reports = None
        base += spanned
        return results

    with _streaming_gc(), contextlib.closing(worker):
        if jobs <= 1:
            yield from _in_process(batches, worker, absolute, on_batch)
            return
        iterator = iter(batches)
        first = next(iterator, None)
        if first is None:
            return
        rest: Iterator[Any] = itertools.chain([first], iterator)
        if isinstance(first, FileRange) and worker.scan and SCAN_THREADS:
            yield from _thread_ranges(rest, worker, jobs, absolute, on_batch)
        elif isinstance(first, FileRange):
            yield from _share_ranges(rest, worker, jobs, absolute, on_batch)
        else:
            yield from _in_workers(rest, worker, jobs, absolute, on_batch)


def _in_process(
    batches: Iterable[Any], worker: _Worker,
    absolute: Callable[[int, list[LineResult]], list[LineResult]],
    on_batch: Callable[[], None] | None,
) -> Iterator[LineResult]:
    for batch in batches:
        yield from absolute(*worker.batch(batch))
        if on_batch is not None:
            on_batch()


def _thread_ranges(
    batches: Iterator[FileRange], worker: _Worker, jobs: int,
    absolute: Callable[[int, list[LineResult]], list[LineResult]],
    on_batch: Callable[[], None] | None,
) -> Iterator[LineResult]:
    """File ranges of lines read as bytes, shared between ``jobs`` threads of this process.
    The kernel's scanner releases the GIL while it reads and reduces a range (it makes no
    Python object), and so do the reads of the file and the writes of the output: threads
    scale it with no process to start and no result to send between processes. Each thread
    has a worker of its own (its buffer, its open files); results come back in input order.
    A line that needs the object path is processed in its thread, under the GIL."""
    from concurrent.futures import ThreadPoolExecutor

    idle: queue.SimpleQueue[_Worker] = queue.SimpleQueue()
    copies = [worker] + [worker.copy() for _ in range(jobs - 1)]
    for each in copies:
        idle.put(each)

    def run(batch: FileRange) -> tuple[int, list[LineResult]]:
        mine = idle.get()
        try:
            return mine.batch(batch)
        finally:
            idle.put(mine)

    pending: deque[Any] = deque()
    pool = ThreadPoolExecutor(jobs, thread_name_prefix="contextpolicy")
    try:
        for batch in batches:
            pending.append(pool.submit(run, batch))
            while len(pending) >= jobs * QUEUED:
                yield from absolute(*pending.popleft().result())
                if on_batch is not None:
                    on_batch()
        while pending:
            yield from absolute(*pending.popleft().result())
            if on_batch is not None:
                on_batch()
    finally:
        for future in pending:
            future.cancel()
        pool.shutdown(wait=True)
        for each in copies[1:]:
            each.close()


def _in_workers(
    batches: Iterator[Any], worker: _Worker, jobs: int,
    absolute: Callable[[int, list[LineResult]], list[LineResult]],
    on_batch: Callable[[], None] | None,
) -> Iterator[LineResult]:
    # As many workers as there are batches to begin with, up to jobs: a stream of a few lines
    # is worked through here, by no pool at all.
    ahead = list(itertools.islice(batches, jobs))
    if len(ahead) <= 1:
        yield from _in_process(ahead, worker, absolute, on_batch)
        return
    jobs = len(ahead)
    batches = itertools.chain(ahead, batches)
    del ahead
    # At most a few batches per worker in flight: the input is read only as fast as it is
    # processed, so memory stays flat however long the file is. Forked workers inherit the
    # parent's objects frozen (_streaming_gc): their collector never walks, and so never
    # copies, them.
    in_flight = jobs * 3
    pool = _context().Pool(jobs, initializer=_init_worker, initargs=(worker,))
    with pool:
        pending: deque[Any] = deque()
        try:
            for batch in batches:
                pending.append(pool.apply_async(_work, (batch,)))
                while len(pending) >= in_flight:
                    yield from absolute(*pending.popleft().get())
                    if on_batch is not None:
                        on_batch()
            while pending:
                yield from absolute(*pending.popleft().get())
                if on_batch is not None:
                    on_batch()
        except GeneratorExit:
            # The consumer stopped early: the batches in flight (a few per worker) finish and
            # the workers stop on their own. Terminating them mid-write can leave the pool's
            # task or result thread blocked on a pipe for good.
            pool.close()
            if all(_finished(r) for r in pending):
                pool.join()
            else:
                _terminate(pool)
            raise
        except BaseException:
            _terminate(pool)
            raise


_POOL_GRACE = 30.0  # seconds a batch in flight may take to finish once the consumer stopped
_TERMINATE_WAIT = 10.0  # seconds pool.terminate() may take before the workers are killed


def _finished(result: Any) -> bool:
    result.wait(_POOL_GRACE)
    return bool(result.ready())


def _terminate(pool: Any) -> None:
    """``pool.terminate()``, which can wait for good on a pipe a killed worker left half
    written: run in a daemon thread and, past a few seconds, the workers killed and the pipes
    closed, which ends the pool's threads."""
    stopper = threading.Thread(target=pool.terminate, daemon=True)
    stopper.start()
    stopper.join(_TERMINATE_WAIT)
    if stopper.is_alive():
        for process in list(getattr(pool, "_pool", [])):
            with contextlib.suppress(Exception):
                process.kill()
        for end in ("_inqueue", "_outqueue"):
            channel = getattr(pool, end, None)
            for pipe in ("_reader", "_writer"):
                with contextlib.suppress(Exception):
                    getattr(channel, pipe).close()
        stopper.join(_TERMINATE_WAIT)


class _Child:
    """A worker process of ``_share_ranges``: file ranges go in through one pipe, their results
    come back through another, in the order the ranges were sent."""

    def __init__(self, ctx: Any, worker: _Worker, others: list[_Child]) -> None:
        tasks_out, tasks_in = ctx.Pipe(duplex=False)
        results_out, results_in = ctx.Pipe(duplex=False)
        _enlarge(results_in)
        # A forked worker starts with a copy of every descriptor open here: this process's ends
        # of its own pipes, and of the pipes of the workers started before it. It closes them,
        # so that when this process has gone, nothing holds its task pipe open: it reads the
        # end of it and exits (and a worker started later cannot keep an earlier one waiting).
        inherited: list[Any] = []
        if ctx.get_start_method() == "fork":
            inherited = [tasks_in, results_out]
            for other in others:
                inherited += [other.tasks, other.results]
        self.process = ctx.Process(
            target=_child_main, args=(tasks_out, results_in, worker, inherited), daemon=True,
            name="contextpolicy-worker",
        )
        self.process.start()
        tasks_out.close()
        results_in.close()
        self.tasks: Any = tasks_in
        self.results: Any = results_out
        self.pending: deque[int] = deque()
        self.released = False

    def send(self, task: tuple[int, FileRange]) -> None:
        try:
            self.tasks.send(task)
        except OSError:  # it has exited
            raise self.died() from None
        self.pending.append(task[0])

    def died(self) -> WorkerError:
        self.process.join(timeout=10)  # its pipe closed as it exited: collect its status
        return WorkerError(
            f"a worker process exited unexpectedly ({_exit_status(self.process.exitcode)})"
        )

    def release(self) -> None:
        """No more ranges: the worker exits (while this process finishes its own)."""
        if not self.released:
            self.released = True
            with contextlib.suppress(OSError):
                self.tasks.send(None)
            self.tasks.close()

    def stop(self, *, kill: bool) -> None:
        if kill and self.process.is_alive():
            self.process.terminate()
        self.release()
        self.process.join()
        self.results.close()


def _enlarge(conn: Any) -> None:
    try:
        import fcntl
    except ImportError:  # Windows
        return
    setpipe = getattr(fcntl, "F_SETPIPE_SZ", None)  # Linux
    if setpipe is not None:
        with contextlib.suppress(OSError):
            fcntl.fcntl(conn.fileno(), setpipe, PIPE_BYTES)


def _child_main(tasks: Any, results: Any, worker: _Worker, inherited: list[Any]) -> None:
    for conn in inherited:
        with contextlib.suppress(OSError):
            conn.close()
    worker.in_worker_process()
    while True:
        try:
            task = tasks.recv()
        except (EOFError, OSError):  # the main process has gone
            return
        if task is None:
            return
        index, batch = task
        message: tuple[int, Any, Any]
        try:
            message = (index, worker.batch(batch), None)
        except FileError as exc:  # the input, not a bug: the main process reports it as it is
            message = (index, None, exc)
        except BaseException:
            message = (index, None, traceback.format_exc())
        try:
            _send_results(results, message)
        except OSError:  # the main process has gone
            return


def _send_results(conn: Any, message: tuple[int, Any, Any]) -> None:
    """A range's results through the pipe: the results pickled without their outputs, then the
    outputs, one after another, as raw bytes (never pickled: one copy fewer on each side)."""
    index, result, failure = message
    if result is None:
        conn.send((index, None, failure, None))
        return
    count, lines = result
    outputs = [r.output for r in lines]
    sizes = [-1 if o is None else len(o) for o in outputs]
    for r in lines:
        r.output = None
    conn.send((index, (count, lines), None, sizes))
    body = [o for o in outputs if o]
    conn.send_bytes(body[0] if len(body) == 1 else b"".join(body))


def _received_results(conn: Any, worker: _Worker) -> tuple[int, Any, Any]:
    """What :func:`_send_results` sent. With ``runs`` the outputs are views of the bytes
    received (the command line writes them out), otherwise bytes of their own."""
    index, result, failure, sizes = conn.recv()
    if sizes is not None:
        data = conn.recv_bytes()
        view = memoryview(data) if worker.runs else data
        at = 0
        for r, size in zip(result[1], sizes, strict=True):
            if size >= 0:
                r.output = view[at:at + size]
                at += size
    return index, result, failure


def _share_ranges(
    batches: Iterator[FileRange], worker: _Worker, jobs: int,
    absolute: Callable[[int, list[LineResult]], list[LineResult]],
    on_batch: Callable[[], None] | None,
) -> Iterator[LineResult]:
    """File ranges shared between up to ``jobs - 1`` worker processes and this one. A range is
    a few bytes to send, so the workers are kept supplied without ever blocking this process,
    which works through the ranges nobody else is waiting for. A worker is started only for a
    range there is to give it."""
    from multiprocessing.connection import wait

    ctx = _context()
    children: list[_Child] = []
    done: dict[int, tuple[int, list[LineResult]]] = {}
    sent = 0
    more = True
    workers = jobs - 1

    def supply(child: _Child) -> None:
        nonlocal sent, more
        while more and len(child.pending) < QUEUED:
            batch = next(batches, None)
            if batch is None:
                more = False
                return
            child.send((sent, batch))
            sent += 1

    def feed() -> None:
        nonlocal sent, more
        for child in children:
            supply(child)
        while more and len(children) < workers:
            batch = next(batches, None)
            if batch is None:
                more = False
                break
            child = _Child(ctx, worker, children)
            children.append(child)
            child.send((sent, batch))
            sent += 1
            supply(child)
        if not more:
            for child in children:
                if not child.pending:
                    child.release()

    def collect(child: _Child) -> None:
        try:
            index, result, failure = _received_results(child.results, worker)
        except EOFError:
            raise child.died() from None
        if isinstance(failure, BaseException):
            raise failure
        if failure is not None:
            raise WorkerError(f"a worker process failed:\n{failure}")
        assert index == child.pending.popleft()
        done[index] = result

    def drain() -> None:
        for child in children:
            while child.pending and child.results.poll():
                collect(child)
        feed()

    failed = True
    try:
        # The first range is this process's own: a file of one range starts no worker.
        first = next(batches, None)
        if first is None:
            return
        sent = 1
        feed()
        done[0] = worker.batch(first, between=drain)
        drain()
        given = 0
        while True:
            while given in done:
                yield from absolute(*done.pop(given))
                given += 1
                if on_batch is not None:
                    on_batch()
            if more and len(done) < jobs * QUEUED:
                batch = next(batches, None)
                if batch is None:
                    more = False
                else:
                    index = sent
                    sent += 1
                    done[index] = worker.batch(batch, between=drain)
                    drain()
                    continue
            busy = [child for child in children if child.pending]
            if not busy:
                break
            for conn in wait([child.results for child in busy]):
                collect(next(child for child in busy if child.results is conn))
            feed()
        failed = False
    finally:
        for child in children:
            child.stop(kill=failed)
