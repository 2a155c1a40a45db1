"""The line worker: a validated policy that turns lines (bytes, or ranges of a file) into results,
reading a transcript as bytes in the kernel where the policy allows and as objects otherwise."""

from __future__ import annotations

import copy
import os
from collections.abc import Callable, Iterable, Iterator
from typing import Any

import orjson

from .. import _kernel
from ..core import process_context
from ..errors import ContextAuditError, ContextError, ContextPlanError, ContextPolicyError
from ..fused import fused_report_json
from ..plan import PROTECTED_KINDS, ContextPlan, as_plan
from ..policy import ReducePolicy, validate_context_policy
from ..prepared import PreparedPolicy
from .diagnose import json_problem, top_level_hint
from .digits import lines_holding, long_digit_runs
from .files import (
    FileRange,
    dumps,
    open_range_file,
    read_file_range,
    read_range,
    reread_exactly,
)
from .results import (
    LineError,
    LineResult,
    fused_figures,
    report_figures,
)
from .scanned import POLL_BYTES, ScannedLines
from .templates import FusedReports

__all__ = ["GC_GEN0_THRESHOLD", "POLL_BYTES", "QUEUED", "LineWorker", "in_process"]

# The least room left in the buffer a file range is read into, for a later range a little longer.
READ_BUFFER_SLACK = 256 << 10
# Ranges queued for each worker process, so that it never waits for the next one.
QUEUED = 2
# A parsed transcript is thousands of acyclic dicts and lists that reference counting frees the
# moment the line is done; collecting after every 700 of them (the default) only walks them in
# vain. Cycles are still collected, every this many container allocations.
GC_GEN0_THRESHOLD = 50_000



class LineWorker:
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
        self.prepared = PreparedPolicy.of_valid(self.policy, self.handlers, None)
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
        path = prepared.transcript_path
        self.fused = path.steps if path is not None else None
        self.trigger, self.watermark = (path.trigger_chars, path.watermark_chars) if (
            path is not None) else (-1, -1)
        self.reduces = type(self.policy) is ReducePolicy
        self.transcript_kinds = {fid: (fid, fid in PROTECTED_KINDS)
                                 for fid in ("system", "history", "question")}
        self.scan = self.fused is not None and self.byte_path
        self.reports = FusedReports(prepared, self.transcript_kinds)
        # Lines read as bytes (when scan is on: a policy the kernel runs in one call).
        self.scanned = None if path is None else ScannedLines(
            prepared, path, self.reports, runs=runs, with_reports=with_reports,
            reduces=self.reduces)

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
            number, output=dumps(out) + b"\n", figures=report_figures(report), violation=violation,
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
        raw = _kernel.reduce_transcript(messages, steps, self.trigger, self.watermark)
        out = dict(doc)
        out["messages"] = raw.input
        # A validate reaches no target (report.targetReached is null).
        line = LineResult(number, output=dumps(out) + b"\n", figures=fused_figures(
            raw, self.reduces and raw.watermark_met, prepared))
        if self.with_reports:
            kinds = self.transcript_kinds
            line.report = dumps({"id": doc.get("id"), "report": fused_report_json(
                prepared, raw, [kinds[fid] for fid in raw.ids])})
        return line

    def copy(self) -> LineWorker:
        """A worker for another thread: the same policy, a buffer and open files of its own."""
        other = copy.copy(self)
        other._files = {}
        other._buffer = bytearray()
        other._exact = set()
        return other

    def reset_files(self) -> None:
        """Forget the input files and buffer this worker inherited (a new process opens its own)."""
        self._files = {}
        self._buffer = bytearray()

    def close(self) -> None:
        """Close the input files opened so far."""
        for fd in self._files.values():
            os.close(fd)
        self._files.clear()

    def __reduce__(self) -> tuple[Any, ...]:
        # A spawned worker process validates the policy again from the document.
        # Handlers travel pickled (the built-in ones are plain objects with their parameters).
        # Whether lines are read as bytes travels too: a spawned process starts from defaults.
        return (LineWorker, (self.policy_doc, self.with_reports, self.handlers, self.runs),
                {"scan": self.scan})

    def batch(
        self, batch: list[tuple[int, bytes]] | FileRange,
        between: Callable[[], None] | None = None,
    ) -> tuple[int, list[LineResult]]:
        """Results of a batch, and how many lines it spanned (line numbers within a file range
        count from 1; the caller, who knows where the range starts, makes them absolute).
        ``between`` is called after every ``POLL_BYTES`` or so of input."""
        scanned = self.scanned if self.scan else None
        if not isinstance(batch, FileRange):
            if scanned is not None:
                joined = b"\n".join(raw for _, raw in batch)
                starts, stops, at = [], [], 0
                for _, raw in batch:
                    starts.append(at)
                    at += len(raw)
                    stops.append(at)
                    at += 1
                return 0, scanned.results(joined, [number for number, _ in batch], starts, stops,
                                          between, self.line)
            if len(batch) == 1:
                runs = long_digit_runs(batch[0][1])
                exact = {batch[0][0]} if runs else set()
            else:
                starts, at = [], 0
                for _, raw in batch:
                    starts.append(at)
                    at += len(raw) + 1
                runs = long_digit_runs(b"\n".join(raw for _, raw in batch))
                exact = lines_holding(starts, batch, runs)
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
        if scanned is not None:
            count, numbers_a, starts_a, stops_a = _kernel.line_bounds(self._buffer, 0,
                                                                      batch.length)
            return count, scanned.results(self._buffer, numbers_a.tolist(), starts_a.tolist(),
                                          stops_a.tolist(), between, self.line)
        count, lines, starts = read_range(self._buffer, FileRange(batch.path, 0, batch.length))
        if lines:
            with memoryview(self._buffer)[:batch.length] as data:
                exact = lines_holding(starts, lines, long_digit_runs(data))
        else:
            exact = set()
        results = self._checked_lines(lines, exact, between)
        del lines
        return count, results

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


def in_process(
    batches: Iterable[Any], worker: LineWorker,
    absolute: Callable[[int, list[LineResult]], list[LineResult]],
    on_batch: Callable[[], None] | None,
) -> Iterator[LineResult]:
    """Every batch worked through by ``worker`` in this process, its results made absolute."""
    for batch in batches:
        yield from absolute(*worker.batch(batch))
        if on_batch is not None:
            on_batch()
