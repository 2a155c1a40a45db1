"""Process JSONL conversations with one policy: the engine behind ``contextpolicy reduce``.

Each line is a transcript (``{"id": ..., "messages": [...]}``, turned into a plan by
``ContextPlan.from_messages``) or a plan (``{"fragments": [...]}``). The output line has the
input's shape: the transcript's ``messages`` (or the plan's ``fragments``) replaced by the result,
every other key kept. With ``--jobs N`` the lines are shared out in batches between processes
and come back in input order, so ``--jobs 2`` writes exactly the bytes ``--jobs 1`` does.
"""

from __future__ import annotations

import contextlib
import gc
import itertools
import multiprocessing
import os
import signal
import sys
import traceback
from collections import Counter, deque
from collections.abc import Callable, Generator, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

import orjson

from ..core import process_context
from ..errors import ContextAuditError, ContextError, ContextPlanError, ContextPolicyError
from ..plan import ContextPlan, Fragment, as_plan
from ..policy import validate_context_policy
from ..report import ContextReport
from .files import FileRange, map_range, read_range

__all__ = ["LineError", "LineResult", "Summary", "process_lines"]

O_BINARY = getattr(os, "O_BINARY", 0)  # Windows
BATCH_LINES = 64
BATCH_BYTES = 4 << 20
# Ranges queued for each worker process, so that it never waits for the next one.
QUEUED = 2
# While the main process works through a range itself, it collects finished ranges from the
# workers after about this much input, so a worker is never left waiting to hand one over.
POLL_BYTES = 256 << 10
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


@dataclass
class LineResult:
    """What one input line became."""

    line: int
    output: bytes | None = None
    report: bytes | None = None
    figures: dict[str, Any] | None = None
    error: str | None = None
    violation: bool = False


class LineError(Exception):
    """A line that cannot be processed; ``str()`` names the line and what was expected."""


@dataclass
class Summary:
    """Totals over a run, all counted from the per-line reports."""

    conversations: int = 0
    skipped: int = 0
    triggered: int = 0
    target_reached: int = 0
    audit_violations: int = 0
    chars_before: int = 0
    chars_after: int = 0
    messages_before: int = 0
    messages_after: int = 0
    messages_removed: int = 0
    groups_removed: int = 0
    bytes_in: int = 0
    seconds: float = 0.0
    warnings: Counter[str] = field(default_factory=Counter)
    skipped_lines: list[dict[str, Any]] = field(default_factory=list)

    def add(self, result: LineResult) -> None:
        if result.error is not None:
            self.skipped += 1
            self.skipped_lines.append({"line": result.line, "error": result.error})
            return
        f = result.figures or {}
        self.conversations += 1
        self.triggered += bool(f["triggered"])
        self.target_reached += bool(f["targetReached"])
        self.audit_violations += bool(result.violation)
        self.chars_before += f["charsBefore"]
        self.chars_after += f["charsAfter"]
        self.messages_before += f["messagesBefore"]
        self.messages_after += f["messagesAfter"]
        self.messages_removed += f["messagesRemoved"]
        self.groups_removed += f["groupsRemoved"]
        self.warnings.update(f["warnings"])

    def to_json_dict(self) -> dict[str, Any]:
        seconds = max(self.seconds, 1e-9)
        return {
            "conversations": self.conversations,
            "skipped": self.skipped,
            "triggered": self.triggered,
            "targetReached": self.target_reached,
            "auditViolations": self.audit_violations,
            "charsBefore": self.chars_before,
            "charsAfter": self.chars_after,
            "messagesBefore": self.messages_before,
            "messagesAfter": self.messages_after,
            "messagesRemoved": self.messages_removed,
            "groupsRemoved": self.groups_removed,
            "warnings": dict(sorted(self.warnings.items())),
            "bytesIn": self.bytes_in,
            "seconds": round(self.seconds, 6),
            "megabytesPerSecond": round(self.bytes_in / seconds / 1e6, 3),
            "conversationsPerSecond": round(self.conversations / seconds, 3),
            "skippedLines": self.skipped_lines,
        }


def _figures(report: ContextReport) -> dict[str, Any]:
    removed = sum(s.messages_removed for s in report.steps if s.status == "applied")
    groups = sum(
        (s.groups_before or 0) - (s.groups_after or 0)
        for s in report.steps if s.status == "applied" and s.kind == "trim"
    )
    return {
        "triggered": report.triggered,
        "targetReached": bool(report.target_reached),
        "charsBefore": report.before.chars,
        "charsAfter": report.after.chars,
        "messagesBefore": report.before.messages,
        "messagesAfter": report.after.messages,
        "messagesRemoved": removed,
        "groupsRemoved": groups,
        "warnings": Counter(w.code for w in report.warnings),
    }


def _with_empty_history(plan: ContextPlan) -> ContextPlan:
    fragments = list(plan.fragments)
    at = 1 if fragments and fragments[0].id == "system" else 0
    fragments.insert(at, Fragment(id="history", kind="history", messages=[]))
    return ContextPlan(fragments=fragments)


class _Worker:
    """Holds the validated policy; turns lines into results."""

    def __init__(self, policy: dict[str, Any], with_reports: bool) -> None:
        self.policy = validate_context_policy(policy)
        self.policy_doc = policy
        self.with_reports = with_reports
        self._files: dict[str, int] = {}  # open input files, by path
        # A transcript too short to have a history still goes through a policy that trims one:
        # its history is empty, and nothing is there to trim.
        doc = self.policy.to_json_dict()
        self.needs_history = "history" in (
            [s.get("fragmentId") for s in doc.get("steps", [])] + doc.get("mutableFragmentIds", [])
        )

    def line(self, number: int, raw: bytes | memoryview) -> LineResult:
        try:
            doc = orjson.loads(raw)
        except orjson.JSONDecodeError as exc:
            return LineResult(number, error=f"invalid JSON ({exc})")
        try:
            return self._process(number, doc)
        except LineError as exc:
            return LineResult(number, error=str(exc))
        except (ContextPlanError, ContextPolicyError) as exc:
            return LineResult(number, error=str(exc))
        except ContextError as exc:
            return LineResult(number, error=f"{type(exc).__name__}: {exc}")

    def _process(self, number: int, doc: Any) -> LineResult:
        if not isinstance(doc, dict):
            raise LineError(
                'expected a JSON object (a transcript {"id", "messages"} or a plan '
                f'{{"fragments"}}), got {type(doc).__name__}'
            )
        if "fragments" in doc:
            plan_doc = {k: doc[k] for k in ("fragments", "original") if k in doc}
            plan = as_plan(plan_doc)
            transcript = False
        elif "messages" in doc:
            plan = ContextPlan.from_messages(doc["messages"])
            if self.needs_history and not any(f.id == "history" for f in plan.fragments):
                plan = _with_empty_history(plan)
            transcript = True
        else:
            keys = ", ".join(sorted(map(str, doc))) or "none"
            raise LineError(
                'expected a transcript {"id", "messages"} or a plan {"fragments"}; '
                f"the object has keys: {keys}"
            )
        violation = False
        try:
            result = process_context(plan, self.policy)
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
        line = LineResult(
            number, output=orjson.dumps(out) + b"\n", figures=_figures(report),
            violation=violation,
        )
        if self.with_reports:
            # The line number is put in front by the caller, who knows where the batch began.
            entry = {"id": doc.get("id"), "report": report.model_dump(by_alias=True, mode="json")}
            line.report = orjson.dumps(entry)
        return line

    def in_worker_process(self) -> _Worker:
        """Set up a worker process, which lives for one run: input files of its own, and the
        collector settings of ``_streaming_gc`` for good."""
        self._files = {}
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
        return (_Worker, (self.policy_doc, self.with_reports))

    def batch(
        self, batch: list[tuple[int, bytes]] | FileRange,
        between: Callable[[], None] | None = None,
    ) -> tuple[int, list[LineResult]]:
        """Results of a batch, and how many lines it spanned (line numbers within a file range
        count from 1; the caller, who knows where the range starts, makes them absolute).
        ``between`` is called after every ``POLL_BYTES`` or so of input."""
        if not isinstance(batch, FileRange):
            return 0, self._lines(batch, between)
        fd = self._files.get(batch.path)
        if fd is None:
            fd = self._files[batch.path] = os.open(batch.path, os.O_RDONLY | O_BINARY)
        # Only this range is mapped, and only while its lines are parsed in place: however long
        # the file, what is mapped never adds up.
        data, where = map_range(fd, batch)
        try:
            count, lines = read_range(data, where)
            results = self._lines(lines, between)
            del lines
        finally:
            with contextlib.suppress(BufferError):  # the lines are held by an error's traceback
                data.close()
        return count, results

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
) -> Generator[LineResult, None, None]:
    """Results for every line, in input order, computed by ``jobs`` processes.

    The ranges of a file (``InputFile.ranges``) are shared between this process and
    ``jobs - 1`` worker processes, each of which maps the file itself. Lines read from a stream
    go to ``jobs`` worker processes, while this one reads (and decompresses) the input.
    """
    # An invalid policy, or start method of CONTEXTPOLICY_START_METHOD, fails here, before any
    # work (whatever the number of jobs, so that a wrong setting is never silently ignored).
    start_method()
    worker = _Worker(policy, with_reports)
    base = 0

    def absolute(spanned: int, results: list[LineResult]) -> list[LineResult]:
        # A file range numbers its lines from its own start; lines sent as bytes carry theirs.
        nonlocal base
        for r in results:
            r.line += base
            if r.report is not None:
                r.report = b'{"line":%d,' % r.line + r.report[1:]
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
        if isinstance(first, FileRange):
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


def _in_workers(
    batches: Iterable[Any], worker: _Worker, jobs: int,
    absolute: Callable[[int, list[LineResult]], list[LineResult]],
    on_batch: Callable[[], None] | None,
) -> Iterator[LineResult]:
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
        except BaseException:
            pool.terminate()
            raise


class _Child:
    """A worker process of ``_share_ranges``: file ranges go in through one pipe, their results
    come back through another, in the order the ranges were sent."""

    def __init__(self, ctx: Any, worker: _Worker) -> None:
        tasks_out, tasks_in = ctx.Pipe(duplex=False)
        results_out, results_in = ctx.Pipe(duplex=False)
        _enlarge(results_in)
        self.process = ctx.Process(
            target=_child_main, args=(tasks_out, results_in, worker), daemon=True,
            name="contextpolicy-worker",
        )
        self.process.start()
        tasks_out.close()
        results_in.close()
        self.tasks = tasks_in
        self.results = results_out
        self.pending: deque[int] = deque()
        self.released = False

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


def _child_main(tasks: Any, results: Any, worker: _Worker) -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the main process handles Ctrl-C, and stops us
    worker.in_worker_process()
    while True:
        try:
            task = tasks.recv()
        except EOFError:
            return
        if task is None:
            return
        index, batch = task
        message: tuple[int, Any, str | None]
        try:
            message = (index, worker.batch(batch), None)
        except BaseException:
            message = (index, None, traceback.format_exc())
        results.send(message)


def _share_ranges(
    batches: Iterator[FileRange], worker: _Worker, jobs: int,
    absolute: Callable[[int, list[LineResult]], list[LineResult]],
    on_batch: Callable[[], None] | None,
) -> Iterator[LineResult]:
    """File ranges shared between ``jobs - 1`` worker processes and this one. A range is a few
    bytes to send, so the workers are kept supplied without ever blocking this process, which
    works through the ranges nobody else is waiting for."""
    from multiprocessing.connection import wait

    ctx = _context()
    children: list[_Child] = []
    done: dict[int, tuple[int, list[LineResult]]] = {}
    sent = 0
    more = True

    def feed() -> None:
        nonlocal sent, more
        for child in children:
            while more and len(child.pending) < QUEUED:
                batch = next(batches, None)
                if batch is None:
                    more = False
                    return
                child.tasks.send((sent, batch))
                child.pending.append(sent)
                sent += 1
        if not more:
            for child in children:
                if not child.pending:
                    child.release()

    def collect(child: _Child) -> None:
        try:
            index, result, failure = child.results.recv()
        except EOFError:
            child.process.join(timeout=10)  # its pipe closed as it exited: collect its status
            raise RuntimeError(
                f"a worker process exited unexpectedly (exit code {child.process.exitcode})"
            ) from None
        if failure is not None:
            raise RuntimeError(f"a worker process failed:\n{failure}")
        assert index == child.pending.popleft()
        done[index] = result

    def drain() -> None:
        for child in children:
            while child.pending and child.results.poll():
                collect(child)
        feed()

    failed = True
    try:
        for _ in range(jobs - 1):
            children.append(_Child(ctx, worker))
        feed()
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
