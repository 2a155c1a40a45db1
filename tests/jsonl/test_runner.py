"""The engine behind ``contextpolicy reduce``: a file's ranges shared between this process and
worker processes, results in input order whatever the number of jobs, and workers that are
stopped (never left behind) when a run fails, is interrupted or is abandoned."""

from __future__ import annotations

import gc
import itertools
import json
import multiprocessing
import os
import re
import sys
import threading
from importlib import resources
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from contextpolicy import _kernel
from contextpolicy.errors import ContextPolicyError
from contextpolicy.jsonl import digits, processes, runner
from contextpolicy.jsonl.files import MIN_RANGE, FileError, FileRange, InputFile
from contextpolicy.jsonl.runner import process_lines
from contextpolicy.jsonl.worker import LineWorker
from contextpolicy.synthetic import make_transcript

EXAMPLES = resources.files("contextpolicy").joinpath("examples")
POLICY = json.loads(EXAMPLES.joinpath("policy-reduce.json").read_text())
PLAN = json.loads(EXAMPLES.joinpath("plan.json").read_text())


def corpus_lines(n: int, seed: int = 0) -> list[bytes]:
    """Transcripts of varied length, a plan, and lines that fail (skipped, with their reason)."""
    rng = np.random.default_rng(seed)
    lines = [
        json.dumps({"id": f"c{i}", "messages": make_transcript(int(rng.integers(4, 120)),
                                                               seed=seed * 100 + i)}).encode()
        for i in range(n)
    ]
    lines[n // 3] = json.dumps({"id": "p", **PLAN}).encode()
    lines[n // 2] = b'{"id": "broken", "messages": ['
    lines[n // 2 + 1] = b'{"id": "x", "turns": []}'
    lines.insert(n // 4, b"   ")  # a blank line counts for the line numbers, and is skipped
    return lines


@pytest.fixture(scope="module")
def corpus(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("runner") / "corpus.jsonl"
    path.write_bytes(b"\n".join(corpus_lines(40)) + b"\n")
    return path


def ranges(path: Path, max_bytes: int, workers: int = 1) -> list[FileRange]:
    with InputFile(str(path)) as source:
        return list(source.ranges(max_bytes, workers=workers))


def outcome(path: Path, max_bytes: int, jobs: int) -> list[tuple]:
    with InputFile(str(path)) as source:
        return [
            (r.line, r.output, r.report, r.figures, r.error, r.violation)
            for r in process_lines(source.ranges(max_bytes, workers=jobs), POLICY, jobs=jobs,
                                   with_reports=True)
        ]


def no_workers_left() -> bool:
    return multiprocessing.active_children() == []


# ---------------------------------------------------------------------------------------------
# ranges


@pytest.mark.parametrize("workers", [1, 2, 4])
def test_ranges_are_whole_lines_that_cover_the_file(tmp_path, workers):
    rng = np.random.default_rng(3)
    data = b"".join(b"x" * int(rng.integers(0, 3000)) + b"\n" for _ in range(3000))
    data += b"no newline at the end"
    path = tmp_path / "lines.jsonl"
    path.write_bytes(data)
    parts = ranges(path, 40_000, workers)
    assert parts[0].offset == 0
    assert all(a.offset + a.length == b.offset for a, b in itertools.pairwise(parts))
    assert parts[-1].offset + parts[-1].length == len(data)
    assert all(data[p.offset + p.length - 1:p.offset + p.length] == b"\n" for p in parts[:-1])


def test_ranges_shrink_toward_the_end_for_several_workers(tmp_path):
    line = b"y" * 999 + b"\n"  # 1,000 bytes
    path = tmp_path / "even.jsonl"
    path.write_bytes(line * 3000)  # 3 MB
    max_bytes, size = 512_000, 3_000_000
    one = ranges(path, max_bytes, 1)
    two = ranges(path, max_bytes, 2)
    # One worker: ranges of max_bytes (rounded up to the end of a line), the rest at the end.
    assert [p.length for p in one] == [512_000] * 5 + [440_000]
    # Two workers: no range is more than a quarter of what remains (rounded up to a line),
    # nor less than MIN_RANGE, until the last.
    for p in two[:-1]:
        share = min(max_bytes, (size - p.offset) // 4)
        assert max(share, MIN_RANGE) <= p.length < max(share, MIN_RANGE) + len(line)
    lengths = [p.length for p in two]
    assert lengths == sorted(lengths, reverse=True)
    assert lengths[0] == 512_000 and lengths[-1] <= MIN_RANGE + len(line)
    assert len(two) > len(one)


# ---------------------------------------------------------------------------------------------
# the same results, however the work is shared


@pytest.mark.parametrize("jobs", [2, 3])
def test_shared_ranges_give_exactly_the_results_of_one_process(corpus, jobs):
    expected = outcome(corpus, 8_000, 1)
    assert outcome(corpus, 8_000, jobs) == expected
    # The corpus holds what every line can become: reduced, skipped with a reason, a plan.
    errors = [(line, error) for line, _, _, _, error, _ in expected if error is not None]
    assert [line for line, _ in errors] == [22, 23]  # after the blank line 11
    assert "invalid JSON" in errors[0][1] and "the object has keys: id, turns" in errors[1][1]
    assert len(expected) == 40  # 41 lines, one of them blank
    assert any(json.loads(out).get("fragments") for _, out, *_ in expected if out)
    assert sum(figures[0] for _, _, _, figures, _, _ in expected if figures) > 0
    assert no_workers_left()


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(max_bytes=st.integers(1, 60_000), jobs=st.integers(2, 4))
def test_any_range_size_and_job_count_give_the_results_of_one_process(corpus, max_bytes, jobs):
    # Module-scoped corpus; hypothesis varies how it is cut and shared.
    assert outcome(corpus, max_bytes, jobs) == outcome(corpus, max_bytes, 1)
    assert no_workers_left()


class Probe(LineWorker):
    """A worker that does a little more, however worker processes start: forked, they inherit
    it; spawned (macOS, Windows, ``CONTEXTPOLICY_START_METHOD=spawn``) or started by a fork
    server, they unpickle it, by reference to this module, with what it was given here (a
    patch of the worker's class, by contrast, reaches forked workers only).

    ``log``: a file where every batch appends the id of the process that worked on it.
    ``action``: a module-level function called for every line in a worker process (never in
    this one). ``describe``: every line's output is how the process that handled it started."""

    def __init__(self, policy, with_reports, parent=None, log=None, action=None, describe=False):
        super().__init__(policy, with_reports)
        self.parent = os.getpid() if parent is None else parent
        self.log, self.action, self.describe = log, action, describe
        if action is not None or describe:
            self.scan = False  # every line through line(), the object path

    def __reduce__(self):
        return (type(self), (self.policy_doc, self.with_reports, self.parent, self.log,
                             self.action, self.describe))

    def batch(self, task, between=None):
        if self.log is not None:
            with open(self.log, "a") as fh:
                fh.write(f"{os.getpid()}\n")
        return super().batch(task, between)

    def line(self, number, raw):
        if os.getpid() != self.parent:
            if self.action is not None:
                self.action()
        if self.describe:
            started = {"pid": os.getpid(), "ppid": os.getppid(), "inherited": INHERITED,
                       "spawned": "--multiprocessing-fork" in sys.orig_argv}
            return runner.LineResult(number, output=json.dumps(started).encode())
        return super().line(number, raw)


# Set in this process by the start-method test: a worker that sees it was forked from here.
INHERITED = False


@pytest.fixture
def probe(monkeypatch):
    """``probe(**what)``: the runs of this test use a ``Probe`` worker given ``what``."""

    def use(**what):
        monkeypatch.setattr(runner, "LineWorker", lambda policy, with_reports, *rest:
                            Probe(policy, with_reports, **what))

    return use


def test_the_ranges_are_shared_between_this_process_and_the_workers(corpus, tmp_path, probe,
                                                                    monkeypatch):
    monkeypatch.setattr(runner, "SCAN_THREADS", False)  # worker processes for lines as bytes too
    log = tmp_path / "pids"
    probe(log=str(log))
    shared = outcome(corpus, 4_000, 3)
    pids = log.read_text().split()
    assert len(pids) == len(ranges(corpus, 4_000, 3))  # each range once
    assert str(os.getpid()) in pids and len(set(pids)) == 3  # here and in two workers
    assert shared == outcome(corpus, 4_000, 1)


# ---------------------------------------------------------------------------------------------
# failures and interruptions stop the workers


def fail():
    raise ValueError("a bug in a worker")


def die():
    os._exit(3)


def test_a_worker_that_fails_stops_the_run_with_its_traceback(corpus, probe):
    probe(action=fail)
    before = gc.get_threshold()
    with pytest.raises(RuntimeError, match="a worker process failed") as info:
        outcome(corpus, 8_000, 2)
    assert "ValueError: a bug in a worker" in str(info.value)
    assert no_workers_left() and gc.get_threshold() == before


def test_a_worker_that_dies_stops_the_run_with_its_exit_code(corpus, probe):
    probe(action=die)
    with pytest.raises(RuntimeError, match=r"a worker process exited unexpectedly \(exit code 3\)"):
        outcome(corpus, 8_000, 2)
    assert no_workers_left()


@pytest.mark.parametrize("exception", [KeyboardInterrupt, GeneratorExit])
def test_an_interrupted_or_abandoned_run_stops_its_workers(corpus, exception, monkeypatch):
    monkeypatch.setattr(runner, "SCAN_THREADS", False)
    with InputFile(str(corpus)) as source:
        results = process_lines(source.ranges(4_000, workers=2), POLICY, jobs=2)
        assert next(results).line == 1
        assert len(multiprocessing.active_children()) == 1
        if exception is GeneratorExit:
            results.close()
        else:
            with pytest.raises(KeyboardInterrupt):
                results.throw(KeyboardInterrupt())
    assert no_workers_left()


@pytest.mark.parametrize("jobs", [1, 2])
def test_an_invalid_policy_fails_before_any_work(jobs):
    bad = {**POLICY, "steps": [{"kind": "trim"}]}
    with pytest.raises(ContextPolicyError):
        next(process_lines([], bad, jobs=jobs))
    assert no_workers_left()


@pytest.mark.parametrize("jobs", [1, 2])
@pytest.mark.parametrize("byte_path", [False, True])
def test_an_interrupt_inside_a_line_is_what_the_caller_sees(corpus, monkeypatch, jobs,
                                                            byte_path):
    # The lines of the range being worked on are still referenced by the traceback when the
    # run cleans up; unmapping the file must not replace the interrupt with an error of its own.
    monkeypatch.setattr(LineWorker, "byte_path", byte_path)
    seen = []
    parent = os.getpid()
    if byte_path:
        original = _kernel.reduce_lines

        def reduce_lines(*args):
            seen.append(1)
            if len(seen) == 3 and os.getpid() == parent:
                raise KeyboardInterrupt
            return original(*args)

        monkeypatch.setattr(_kernel, "reduce_lines", reduce_lines)
    else:
        original_line = LineWorker.line

        def line(self, number, raw):
            seen.append(number)
            if len(seen) == 3 and os.getpid() == parent:
                raise KeyboardInterrupt
            return original_line(self, number, raw)

        monkeypatch.setattr(LineWorker, "line", line)
    with pytest.raises(KeyboardInterrupt):
        outcome(corpus, 200_000, jobs)
    assert no_workers_left()


# ---------------------------------------------------------------------------------------------
# how worker processes start: CONTEXTPOLICY_START_METHOD

AVAILABLE = [m for m in processes.START_METHODS if m in multiprocessing.get_all_start_methods()]


@pytest.mark.parametrize("source", ["stream", "file"])
@pytest.mark.parametrize("method", AVAILABLE)
def test_the_variable_selects_how_the_workers_start(corpus, monkeypatch, probe, method, source):
    monkeypatch.setenv(processes.START_METHOD_VARIABLE, method)
    monkeypatch.setattr(sys.modules[__name__], "INHERITED", True)
    probe(describe=True)
    assert runner.start_method() == processes.context().get_start_method() == method
    if source == "stream":  # batches of lines go to a pool of workers
        batches = [[(n, b"{}") for n in range(k * 4 + 1, k * 4 + 5)] for k in range(8)]
        outputs = [r.output for r in process_lines(batches, POLICY, jobs=2)]
    else:  # the ranges of a file are shared between this process and a worker
        with InputFile(str(corpus)) as source_file:
            outputs = [r.output for r in process_lines(source_file.ranges(4_000, workers=2),
                                                       POLICY, jobs=2)]
    here = os.getpid()
    workers = [w for w in map(json.loads, outputs) if w["pid"] != here]
    assert workers, "no line was handled by a worker process"
    for worker in workers:
        if method == "fork":  # a copy of this process: it sees what was set here
            assert (worker["ppid"], worker["inherited"], worker["spawned"]) == (here, True, False)
        elif method == "spawn":  # a new interpreter started by this process
            assert (worker["ppid"], worker["inherited"], worker["spawned"]) == (here, False, True)
        else:  # forked by the fork server, a new interpreter that this process started
            assert worker["ppid"] != here and not worker["inherited"] and not worker["spawned"]
    assert no_workers_left()


@pytest.mark.parametrize("value", [None, ""])
def test_without_the_variable_workers_fork_on_linux_and_are_spawned_elsewhere(monkeypatch,
                                                                             value):
    if value is None:
        monkeypatch.delenv(processes.START_METHOD_VARIABLE, raising=False)
    else:
        monkeypatch.setenv(processes.START_METHOD_VARIABLE, value)
    expected = "fork" if sys.platform == "linux" else "spawn"
    assert runner.start_method() == processes.context().get_start_method() == expected


@pytest.mark.parametrize("jobs", [1, 2])
@pytest.mark.parametrize("value", ["vfork", "Spawn", "spawn ", "threads"])
def test_an_unknown_start_method_is_a_clear_error_before_any_work(monkeypatch, value, jobs):
    monkeypatch.setenv(processes.START_METHOD_VARIABLE, value)
    with pytest.raises(ValueError) as info:
        next(process_lines([[(1, b'{"id": "a", "messages": []}')]], POLICY, jobs=jobs))
    assert str(info.value) == (
        f"CONTEXTPOLICY_START_METHOD={value!r} is not a start method: expected one of fork, "
        "spawn, forkserver (or unset for the default)"
    )
    assert no_workers_left()


def test_a_start_method_this_platform_lacks_is_a_clear_error(monkeypatch):
    monkeypatch.setattr(multiprocessing, "get_all_start_methods", lambda: ["spawn"])  # Windows
    monkeypatch.setenv(processes.START_METHOD_VARIABLE, "forkserver")
    with pytest.raises(ValueError) as info:
        next(process_lines([[(1, b'{"id": "a", "messages": []}')]], POLICY, jobs=2))
    assert str(info.value) == (
        f"CONTEXTPOLICY_START_METHOD=forkserver: that start method is not available on "
        f"{sys.platform}; expected one of spawn (or unset for the default)"
    )
    assert no_workers_left()


# ---------------------------------------------------------------------------------------------
# integers beyond 64 bits: every run of 19 digits is found, however the bytes fall

LONG_RUN = re.compile(rb"(?<![0-9])[0-9]{19,}")


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 40), st.sampled_from(b"0123456789:;<=>?x \n")),
                max_size=40),
       st.integers(0, 70_000), st.integers(0, 7))
def test_every_run_of_19_digits_is_found(pieces, padding, shift):
    # Runs of digits among the bytes that look most like them (the high nibble 3), at every
    # alignment, in buffers scanned byte by byte and eight bytes at a time.
    data = b"y" * shift + b"".join(bytes([c]) * n if c != ord("x") else
                                   b"1" * n + b":" for n, c in pieces)
    data = b"a" * (padding // 2) + data + b"b" * (padding - padding // 2)
    expected = [m.start() for m in LONG_RUN.finditer(data)]
    assert digits.long_digit_runs(data) == expected
    assert digits.long_digit_runs(memoryview(bytearray(data))) == expected


@pytest.mark.parametrize("byte_path", [True, False])
def test_the_lines_that_hold_a_long_run_are_read_exactly(tmp_path, monkeypatch, byte_path):
    # Read as bytes, a line is copied as it is; parsed, it is read again exactly and written
    # compact. Big integers survive both.
    monkeypatch.setattr(LineWorker, "byte_path", byte_path)
    lines = [b'{"id": 18446744073709551616, "messages": []}', b'{"id": 1, "messages": []}',
             b'{"id": "12345678901234567890", "messages": []}', b'{"id": -9223372036854775809, '
             b'"messages": [], "n": 1.5}']
    path = tmp_path / "big.jsonl"
    path.write_bytes(b"\n".join(lines) + b"\n")
    for jobs in (1, 2):
        with InputFile(str(path)) as source:
            results = list(process_lines(source.ranges(8), POLICY, jobs=jobs))
        outputs = [r.output for r in results]
        assert [r.scanned for r in results] == [int(byte_path)] * 4
        assert outputs == ([line + b"\n" for line in lines] if byte_path else [
            b'{"id":18446744073709551616,"messages":[]}\n',
            b'{"id":1,"messages":[]}\n',
            b'{"id":"12345678901234567890","messages":[]}\n',
            b'{"id":-9223372036854775809,"messages":[],"n":1.5}\n'])
        streamed = [r.output for r in process_lines([[(i + 1, line) for i, line in
                                                      enumerate(lines)]], POLICY, jobs=jobs)]
        assert streamed == outputs
    worker = LineWorker(POLICY, False)  # a line handed over alone is checked by itself
    assert worker.line(1, memoryview(lines[0])).output == b'{"id":18446744073709551616,"messages":[]}\n'



# ---------------------------------------------------------------------------------------------
# no more workers than work, and a file that shrinks is an error, not a crash


@pytest.mark.parametrize("jobs", [2, 5, 50])
def test_a_worker_is_started_only_for_a_range_there_is(corpus, monkeypatch, jobs):
    started = []

    class Counted(processes.WorkerProcess):
        def __init__(self, *args):
            started.append(1)
            super().__init__(*args)

    monkeypatch.setattr(processes, "WorkerProcess", Counted)
    for max_bytes in (10**9, 120_000, 40_000):
        count = len(ranges(corpus, max_bytes, jobs))
        started.clear()
        assert outcome(corpus, max_bytes, jobs) == outcome(corpus, max_bytes, 1)
        assert len(started) <= min(count - 1, jobs - 1), (count, started)
    assert no_workers_left()


@pytest.mark.parametrize("batches", [1, 3])
def test_a_pool_is_no_larger_than_the_batches(batches):
    lines = [[(k * 2 + i + 1, b'{"id": "a", "messages": []}') for i in range(2)]
             for k in range(batches)]
    results = process_lines(lines, POLICY, jobs=50)
    assert next(results).line == 1
    assert len(multiprocessing.active_children()) <= (batches if batches > 1 else 0)
    assert [r.line for r in results] == list(range(2, 2 * batches + 1))
    assert no_workers_left()


@pytest.mark.parametrize("jobs", [1, 2, 3])
def test_a_file_that_shrinks_during_a_run_is_a_file_error(tmp_path, jobs):
    path = tmp_path / "shrinks.jsonl"
    path.write_bytes(b"\n".join(corpus_lines(60, seed=2)) + b"\n")
    size = path.stat().st_size
    with InputFile(str(path)) as source:
        parts = list(source.ranges(20_000, workers=jobs))
    assert len(parts) > 4
    os.truncate(path, size // 3)
    with pytest.raises(FileError, match=r"shrinks\.jsonl: the file shrank while it was read: "
                                        rf"it is now {size // 3:,} bytes, and bytes "):
        list(process_lines(iter(parts), POLICY, jobs=jobs))
    assert no_workers_left()


@pytest.mark.parametrize("jobs", [1, 2])
def test_a_file_replaced_during_a_run_is_a_file_error(tmp_path, jobs):
    # Renamed over by another file of the same size: reading it in place of the input would
    # give wrong lines, silently.
    path = tmp_path / "replaced.jsonl"
    path.write_bytes(b"\n".join(corpus_lines(30, seed=3)) + b"\n")
    with InputFile(str(path)) as source:
        parts = list(source.ranges(20_000, workers=jobs))
    (tmp_path / "other.jsonl").write_bytes(path.read_bytes())
    os.replace(tmp_path / "other.jsonl", path)
    with pytest.raises(FileError, match=r"replaced\.jsonl: the file was replaced by another "
                                        "while it was read"):
        list(process_lines(iter(parts), POLICY, jobs=jobs))
    assert no_workers_left()


# ---------------------------------------------------------------------------------------------
# lines read as bytes: --jobs N on a file is N threads of this process


def contextpolicy_threads():
    return [t for t in threading.enumerate() if t.name.startswith("contextpolicy")]


@pytest.mark.parametrize("jobs", [2, 3])
def test_lines_read_as_bytes_share_the_ranges_between_threads(corpus, jobs, monkeypatch):
    seen = set()
    original = LineWorker.batch

    def batch(self, task, between=None):
        seen.add(threading.current_thread().name)
        return original(self, task, between)

    monkeypatch.setattr(LineWorker, "batch", batch)
    shared = outcome(corpus, 4_000, jobs)
    # threads of the pool, never this one (the pool starts a thread only when none is idle)
    assert 1 <= len(seen) <= jobs and all(name.startswith("contextpolicy") for name in seen)
    assert not multiprocessing.active_children()
    assert shared == outcome(corpus, 4_000, 1)
    assert contextpolicy_threads() == []


@pytest.mark.parametrize("exception", [KeyboardInterrupt, GeneratorExit])
def test_an_interrupted_or_abandoned_threaded_run_stops_its_threads(corpus, exception):
    with InputFile(str(corpus)) as source:
        results = process_lines(source.ranges(4_000, workers=2), POLICY, jobs=2, runs=True)
        assert next(results).scanned
        assert contextpolicy_threads()
        if exception is GeneratorExit:
            results.close()
        else:
            with pytest.raises(KeyboardInterrupt):
                results.throw(KeyboardInterrupt())
    assert contextpolicy_threads() == []


def test_a_failing_range_in_a_thread_is_the_callers_error(corpus, monkeypatch):
    original = LineWorker.batch
    calls = []

    def batch(self, task, between=None):
        calls.append(1)
        if len(calls) == 3:
            raise RuntimeError("a range failed")
        return original(self, task, between)

    monkeypatch.setattr(LineWorker, "batch", batch)
    with pytest.raises(RuntimeError, match="a range failed"):
        outcome(corpus, 4_000, 2)
    assert contextpolicy_threads() == []


def test_a_pool_whose_terminate_hangs_is_stopped_anyway(monkeypatch):
    # Pool.terminate() can wait for good on a pipe a killed worker left half written: past the
    # wait, the workers are killed and the pipes closed, which ends the waiting thread.
    import threading


    class End:
        closed = False

        def close(self):
            self.closed = True

    class Channel:
        def __init__(self):
            self._reader, self._writer = End(), End()

    class Worker:
        killed = False

        def kill(self):
            self.killed = True

    class HangingPool:
        def __init__(self):
            self._pool, self._inqueue, self._outqueue = [Worker(), Worker()], Channel(), Channel()

        def terminate(self):  # blocked until its pipe is closed under it
            while not self._inqueue._reader.closed:
                threading.Event().wait(0.01)

    monkeypatch.setattr(processes, "TERMINATE_WAIT", 0.2)
    pool = HangingPool()
    before = threading.active_count()
    processes.terminate_pool(pool)
    assert all(w.killed for w in pool._pool)
    assert all(getattr(c, end).closed for c in (pool._inqueue, pool._outqueue)
               for end in ("_reader", "_writer"))
    assert threading.active_count() == before  # the thread that waited has ended
