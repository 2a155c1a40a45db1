"""Worker processes for the line runner: how they start (fork or spawn), their signals and their
end with the main process, a pool for batches of lines, and file ranges shared between worker
processes and this one, their results sent back as raw bytes."""

from __future__ import annotations

import contextlib
import gc
import itertools
import os
import signal
import sys
import threading
import time
import traceback
from collections import deque
from collections.abc import Callable, Iterator
from typing import Any

from .files import (
    FileError,
    FileRange,
)
from .results import LineResult
from .worker import GC_GEN0_THRESHOLD, QUEUED, LineWorker, in_process

__all__ = [
    "START_METHODS", "START_METHOD_VARIABLE", "WorkerError", "WorkerProcess", "context",
    "in_workers", "share_ranges", "start_method", "terminate_pool",
]

# A worker's finished ranges wait in a pipe this large (where the system allows it).
PIPE_BYTES = 1 << 20


class WorkerError(RuntimeError):
    """A worker process failed (its traceback follows) or exited unexpectedly."""


def _exit_status(code: int | None) -> str:
    if code is not None and code < 0:
        with contextlib.suppress(ValueError):
            return f"exit code {code}, {signal.Signals(-code).name}"
    return f"exit code {code}"



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


_WORKER: LineWorker | None = None


def enter_worker_process(worker: LineWorker) -> LineWorker:
    """Set up a worker process, which lives for one run: input files of its own, signals
    left to the main process, an exit of its own when the main process has gone, and the
    collector settings of the runner's streaming collection for good."""
    worker.reset_files()
    _worker_signals()
    _exit_with_parent()
    gc.freeze()
    gc.set_threshold(GC_GEN0_THRESHOLD, *gc.get_threshold()[1:])
    return worker


def _init_worker(worker: LineWorker) -> None:
    global _WORKER
    _WORKER = enter_worker_process(worker)


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
    chosen = os.environ.get(START_METHOD_VARIABLE, "")
    if not chosen:  # (Linux always has fork, and every platform spawn)
        return "fork" if sys.platform == "linux" else "spawn"
    import multiprocessing

    available = multiprocessing.get_all_start_methods()
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


def context() -> Any:
    import multiprocessing

    return multiprocessing.get_context(start_method())




def in_workers(
    batches: Iterator[Any], worker: LineWorker, jobs: int,
    absolute: Callable[[int, list[LineResult]], list[LineResult]],
    on_batch: Callable[[], None] | None,
) -> Iterator[LineResult]:
    # As many workers as there are batches to begin with, up to jobs: a stream of a few lines
    # is worked through here, by no pool at all.
    ahead = list(itertools.islice(batches, jobs))
    if len(ahead) <= 1:
        yield from in_process(ahead, worker, absolute, on_batch)
        return
    jobs = len(ahead)
    batches = itertools.chain(ahead, batches)
    del ahead
    # At most a few batches per worker in flight: the input is read only as fast as it is
    # processed, so memory stays flat however long the file is. Forked workers inherit the
    # parent's objects frozen (_streaming_gc): their collector never walks, and so never
    # copies, them.
    in_flight = jobs * 3
    pool = context().Pool(jobs, initializer=_init_worker, initargs=(worker,))
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
                terminate_pool(pool)
            raise
        except BaseException:
            terminate_pool(pool)
            raise


POOL_GRACE = 30.0  # seconds a batch in flight may take to finish once the consumer stopped
TERMINATE_WAIT = 10.0  # seconds pool.terminate() may take before the workers are killed


def _finished(result: Any) -> bool:
    result.wait(POOL_GRACE)
    return bool(result.ready())


def terminate_pool(pool: Any) -> None:
    """``pool.terminate()``, which can wait for good on a pipe a killed worker left half
    written: run in a daemon thread and, past a few seconds, the workers killed and the pipes
    closed, which ends the pool's threads."""
    stopper = threading.Thread(target=pool.terminate, daemon=True)
    stopper.start()
    stopper.join(TERMINATE_WAIT)
    if stopper.is_alive():
        for process in list(getattr(pool, "_pool", [])):
            with contextlib.suppress(Exception):
                process.kill()
        for end in ("_inqueue", "_outqueue"):
            channel = getattr(pool, end, None)
            for pipe in ("_reader", "_writer"):
                with contextlib.suppress(Exception):
                    getattr(channel, pipe).close()
        stopper.join(TERMINATE_WAIT)


class WorkerProcess:
    """A worker process of ``share_ranges``: file ranges go in through one pipe, their results
    come back through another, in the order the ranges were sent."""

    def __init__(self, ctx: Any, worker: LineWorker, others: list[WorkerProcess]) -> None:
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


def _child_main(tasks: Any, results: Any, worker: LineWorker, inherited: list[Any]) -> None:
    for conn in inherited:
        with contextlib.suppress(OSError):
            conn.close()
    enter_worker_process(worker)
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


def _received_results(conn: Any, worker: LineWorker) -> tuple[int, Any, Any]:
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


def share_ranges(
    batches: Iterator[FileRange], worker: LineWorker, jobs: int,
    absolute: Callable[[int, list[LineResult]], list[LineResult]],
    on_batch: Callable[[], None] | None,
) -> Iterator[LineResult]:
    """File ranges shared between up to ``jobs - 1`` worker processes and this one. A range is
    a few bytes to send, so the workers are kept supplied without ever blocking this process,
    which works through the ranges nobody else is waiting for. A worker is started only for a
    range there is to give it."""
    sharing = _Sharing(batches, worker, jobs)
    failed = True
    try:
        # The first range is this process's own: a file of one range starts no worker.
        first = next(batches, None)
        if first is None:
            return
        sharing.sent = 1
        sharing.feed()
        sharing.done[0] = worker.batch(first, between=sharing.drain)
        sharing.drain()
        given = 0
        while True:
            while given in sharing.done:
                yield from absolute(*sharing.done.pop(given))
                given += 1
                if on_batch is not None:
                    on_batch()
            if sharing.work_here():
                continue
            if not sharing.wait():
                break
        failed = False
    finally:
        for child in sharing.children:
            child.stop(kill=failed)


class _Sharing:
    """The state of :func:`share_ranges`: the worker processes, the ranges sent and the results
    come back, by the order of their ranges."""

    def __init__(self, batches: Iterator[FileRange], worker: LineWorker, jobs: int) -> None:
        self.batches, self.worker, self.jobs = batches, worker, jobs
        self.ctx = context()
        self.children: list[WorkerProcess] = []
        self.done: dict[int, tuple[int, list[LineResult]]] = {}
        self.sent = 0
        self.more = True

    def supply(self, child: WorkerProcess) -> None:
        while self.more and len(child.pending) < QUEUED:
            batch = next(self.batches, None)
            if batch is None:
                self.more = False
                return
            child.send((self.sent, batch))
            self.sent += 1

    def feed(self) -> None:
        """Every worker kept supplied; a new worker for a range while there are fewer than
        ``jobs - 1``; a worker with nothing left to do let go."""
        for child in self.children:
            self.supply(child)
        while self.more and len(self.children) < self.jobs - 1:
            batch = next(self.batches, None)
            if batch is None:
                self.more = False
                break
            child = WorkerProcess(self.ctx, self.worker, self.children)
            self.children.append(child)
            child.send((self.sent, batch))
            self.sent += 1
            self.supply(child)
        if not self.more:
            for child in self.children:
                if not child.pending:
                    child.release()

    def collect(self, child: WorkerProcess) -> None:
        try:
            index, result, failure = _received_results(child.results, self.worker)
        except EOFError:
            raise child.died() from None
        if isinstance(failure, BaseException):
            raise failure
        if failure is not None:
            raise WorkerError(f"a worker process failed:\n{failure}")
        assert index == child.pending.popleft()
        self.done[index] = result

    def drain(self) -> None:
        """The results the workers have finished, collected without waiting; then more work."""
        for child in self.children:
            while child.pending and child.results.poll():
                self.collect(child)
        self.feed()

    def work_here(self) -> bool:
        """A range worked through in this process, when there is one and not too many results
        wait to be given: whether it did."""
        if not self.more or len(self.done) >= self.jobs * QUEUED:
            return False
        batch = next(self.batches, None)
        if batch is None:
            self.more = False
            return False
        index = self.sent
        self.sent += 1
        self.done[index] = self.worker.batch(batch, between=self.drain)
        self.drain()
        return True

    def wait(self) -> bool:
        """The next results of the busy workers, waited for: whether any worker was busy."""
        from multiprocessing.connection import wait

        busy = [child for child in self.children if child.pending]
        if not busy:
            return False
        for conn in wait([child.results for child in busy]):
            self.collect(next(child for child in busy if child.results is conn))
        self.feed()
        return True
