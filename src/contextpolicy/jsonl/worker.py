"""The line worker: a policy that turns lines (bytes, or ranges of a file) into results, reading a
transcript as bytes in the kernel where the policy allows and as objects otherwise (the object
path, ``objects``, loaded when the first line needs it)."""

from __future__ import annotations

import copy
import os
import threading
from collections.abc import Callable, Iterable, Iterator
from typing import TYPE_CHECKING, Any

from .. import _kernel
from .digits import lines_holding, long_digit_runs
from .files import (
    FileRange,
    open_range_file,
    read_file_range,
    read_range,
)
from .line_policy import LinePolicy, line_policy
from .results import LineResult
from .scanned import POLL_BYTES, ScannedLines

if TYPE_CHECKING:
    from ..prepared import PreparedPolicy
    from .objects import ObjectLines

__all__ = ["GC_GEN0_THRESHOLD", "POLL_BYTES", "QUEUED", "LineWorker", "in_process"]

# The least room left in the buffer a file range is read into, for a later range a little longer.
READ_BUFFER_SLACK = 256 << 10
# Ranges queued for each worker process, so that it never waits for the next one.
QUEUED = 2
# A parsed transcript is thousands of acyclic dicts and lists that reference counting frees the
# moment the line is done; collecting after every 700 of them (the default) only walks them in
# vain. Cycles are still collected, every this many container allocations.
GC_GEN0_THRESHOLD = 50_000


class _Shared:
    """The object path of a worker and its copies: made once, under the lock."""

    __slots__ = ("lock", "objects", "prepared")

    def __init__(self, prepared: PreparedPolicy | None) -> None:
        self.lock = threading.Lock()
        self.prepared = prepared
        self.objects: ObjectLines | None = None


class LineWorker:
    """Holds the policy; turns lines into results.

    When the policy is one the kernel runs in one call, transcript lines are read as bytes
    (``_kernel.reduce_lines``): a line whose shape the scanner takes is reduced without being
    parsed, its kept messages copied byte for byte; every other line, and every line of any
    other policy, is parsed and processed as objects (the object path). What lines read as
    bytes need of the policy (``line_policy``) may come from the cache of validated policies;
    the validated policy itself is made when the object path or a report first needs it."""

    # Read transcript lines as bytes where the policy allows (off: every line as objects).
    byte_path = True

    def __init__(
        self, policy: dict[str, Any], with_reports: bool,
        handlers: dict[str, Callable[..., Any]] | None = None, runs: bool = False,
        facts: LinePolicy | None = None,
    ) -> None:
        self.runs = runs
        # The policy and its handlers: a handler a step names that is missing here is an error
        # each line reports.
        self.handlers = dict(handlers or {})
        self.policy_doc = policy
        self.with_reports = with_reports
        prepared = None
        if facts is None:  # a ContextPolicyError here for a policy that is not valid
            facts, prepared = line_policy(policy, self.handlers)
        self.facts = facts
        # The object path, made once for this worker and its copies (threads share it).
        self._shared = _Shared(prepared)
        self._files: dict[str, int] = {}  # open input files, by path
        self._buffer = bytearray()  # where a file range is read
        # The numbers of the lines of the batch at hand to be read again exactly, once the
        # batch has been checked (a line handed over alone is checked by itself).
        self._exact: set[int] = set()
        self._checked = False
        # A transcript in one kernel call (_kernel.reduce_transcript, reduce_lines) when the
        # policy is one the kernel runs and names no fragment but the history.
        self.fused = facts.steps
        self.trigger, self.watermark = facts.trigger, facts.watermark
        self.reduces = facts.reduces
        self.scan = self.fused is not None and self.byte_path
        # Lines read as bytes (when scan is on: a policy the kernel runs in one call).
        self.scanned = None if self.fused is None else ScannedLines(
            self.fused, self.trigger, self.watermark, self.objects_of, runs=runs,
            with_reports=with_reports, reduces=self.reduces, entry=facts.entry)

    def objects_of(self) -> ObjectLines:
        """The object path (the validated policy, its prepared form, the report templates),
        made on first use and shared by the copies of this worker."""
        shared = self._shared
        if shared.objects is None:
            with shared.lock:
                if shared.objects is None:
                    shared.objects = self._made_objects(shared.prepared)
        return shared.objects

    def _made_objects(self, prepared: PreparedPolicy | None) -> ObjectLines:
        from .line_policy import validated_facts
        from .objects import ObjectLines

        if prepared is None:  # the facts came from the cache: validated now, for the first time
            facts, prepared = validated_facts(self.policy_doc, self.handlers)
            if facts != self.facts:  # a cache file changed by hand
                from .files import FileError
                from .line_policy import cache_folder

                raise FileError(
                    f"{cache_folder()}: the cached facts of this policy disagree with the "
                    "policy; delete the folder (or set CONTEXTPOLICY_CACHE_DIR=off) and run "
                    "again")
        return ObjectLines(prepared, self.with_reports, self.handlers)

    @property
    def policy(self) -> Any:
        """The validated policy."""
        return self.objects_of().policy

    @property
    def prepared(self) -> PreparedPolicy:
        return self.objects_of().prepared

    @property
    def reports(self) -> Any:
        """The report templates (``templates.FusedReports``)."""
        return self.objects_of().reports

    def line(self, number: int, raw: bytes | memoryview) -> LineResult:
        exact = number in self._exact if self._checked else None
        return self.objects_of().line(number, raw, exact)

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
        # A spawned worker process gets the document and its facts (validated again only if
        # the object path is needed).
        # Handlers travel pickled (the built-in ones are plain objects with their parameters).
        # Whether lines are read as bytes travels too: a spawned process starts from defaults.
        return (LineWorker, (self.policy_doc, self.with_reports, self.handlers, self.runs,
                             self.facts), {"scan": self.scan})

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
