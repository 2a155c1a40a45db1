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
import queue
from collections import deque
from collections.abc import Callable, Generator, Iterable, Iterator
from typing import Any

from .files import FileRange
from .line_policy import LinePolicy
from .processes import WorkerError, in_workers, share_ranges, start_method
from .results import LineError, LineResult, Summary
from .worker import GC_GEN0_THRESHOLD, QUEUED, LineWorker, in_process

__all__ = [
    "BATCH_BYTES", "BATCH_LINES", "GC_GEN0_THRESHOLD", "LineError", "LineResult", "Summary",
    "WorkerError", "process_lines", "start_method",
]

BATCH_LINES = 64
# About this much input per file range or batch of lines: a range read as bytes is copied from
# the page cache, scanned and written while it is still in the core's cache (measured A/B:
# ranges of 1 MB ran chats 2-16% faster than ranges of 4 MB in four runs of five, 2% slower in
# one; ranges of 256 KB were slower again).
BATCH_BYTES = 1 << 20
# With lines read as bytes, --jobs N on a file shares its ranges between N threads of this
# process (True), or between worker processes as for the object path (False). The scanner
# releases the GIL; on 2 cores threads measured 1.2-1.45x --jobs 1 where processes, which
# must send every output back to be written, measured 0.6x.
SCAN_THREADS = True


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


def process_lines(
    batches: Iterable[list[tuple[int, bytes]]] | Iterable[FileRange],
    policy: dict[str, Any],
    *,
    jobs: int = 1,
    with_reports: bool = False,
    on_batch: Callable[[], None] | None = None,
    handlers: dict[str, Callable[..., Any]] | None = None,
    runs: bool = False,
    facts: LinePolicy | None = None,
) -> Generator[LineResult, None, None]:
    """Results for every line, in input order, computed by up to ``jobs`` processes; with
    ``runs`` (and no reports), consecutive lines read as bytes come as one result for them all
    (``LineResult.lines``), which is what the command line writes and adds up.

    The ranges of a file (``InputFile.ranges``) are shared between this process and up to
    ``jobs - 1`` worker processes, each of which reads the file itself. Lines read from a stream
    go to up to ``jobs`` worker processes, while this one reads (and decompresses) the input.
    A worker is started only for work there is: never more of them than ranges or batches.
    ``facts``: the policy's :class:`~contextpolicy.jsonl.line_policy.LinePolicy` when the
    caller has them (found from the cache, or by validating the policy, otherwise).
    """
    # An invalid policy, or start method of CONTEXTPOLICY_START_METHOD, fails here, before any
    # work (whatever the number of jobs, so that a wrong setting is never silently ignored).
    start_method()
    worker = LineWorker(policy, with_reports, handlers, runs, facts)
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
            yield from in_process(batches, worker, absolute, on_batch)
            return
        iterator = iter(batches)
        first = next(iterator, None)
        if first is None:
            return
        rest: Iterator[Any] = itertools.chain([first], iterator)
        if isinstance(first, FileRange) and worker.scan and SCAN_THREADS:
            yield from _thread_ranges(rest, worker, jobs, absolute, on_batch)
        elif isinstance(first, FileRange):
            yield from share_ranges(rest, worker, jobs, absolute, on_batch)
        else:
            yield from in_workers(rest, worker, jobs, absolute, on_batch)


def _thread_ranges(
    batches: Iterator[FileRange], worker: LineWorker, jobs: int,
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

    idle: queue.SimpleQueue[LineWorker] = queue.SimpleQueue()
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


