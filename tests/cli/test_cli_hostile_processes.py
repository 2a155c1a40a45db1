"""The command line's processes in hostile surroundings: a signal during a run (it exits 128 + the
signal's number, stops its workers and leaves no file behind; one ignored when the run starts
stays ignored), a file that shrinks while it is read (a clear error, never a crash), a parent
killed outright (its workers end), and absurd ``--jobs`` (no more workers than CPUs, nor than
work)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from contextpolicy.jsonl import files as jsonl_files
from contextpolicy.jsonl.files import InputFile
from contextpolicy.jsonl.runner import BATCH_BYTES
from tests.support.cli import (
    JOBS,
    SCRIPT,
    expected_output,
    leftovers,
    one_line_error,
    run,
    running,
    with_workers,
    workers_of,
    write_corpus,
)

pytestmark = pytest.mark.skipif(sys.platform == "win32", reason="POSIX streams and signals")


# ---------------------------------------------------------------------------------------------
# 1. signals clean up (exit 128 + the signal); a file truncated mid-run is an error, no crash

SIGNALS = ["SIGTERM", "SIGHUP", "SIGQUIT", "SIGUSR1", "SIGALRM", "SIGINT"]


# A policy whose lines go through the object path (a compress step by a built-in handler):
# --jobs N on a file then starts N - 1 worker processes, which the tests of workers watch. (A
# policy the kernel runs in one call reads lines as bytes, in threads of the run's own.)
def started(workdir: Path, args: list[str], signum: int | None = None,
            policy: list[str] | None = None) -> subprocess.Popen:
    """``contextpolicy reduce ARGS`` with every stream a pipe, ``signum`` at its default (a
    test runner may have inherited it ignored)."""

    def defaults():
        for s in (signal.SIGINT, signum):
            if s is not None:
                signal.signal(s, signal.SIG_DFL)

    return subprocess.Popen([str(SCRIPT), "reduce", *args,
                             *(policy or ["--policy", "policy.json"])],
                            cwd=workdir, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, preexec_fn=defaults)


def wait_for_leftovers(workdir: Path, proc: subprocess.Popen) -> None:
    deadline = time.monotonic() + 30
    while not leftovers(workdir) and time.monotonic() < deadline:
        time.sleep(0.01)
    time.sleep(0.5)
    assert proc.poll() is None and leftovers(workdir), "the run is not waiting for input"


@pytest.mark.parametrize("jobs", JOBS)
@pytest.mark.parametrize("name", SIGNALS)
def test_a_signal_during_a_run_leaves_no_temporary_file(workdir, name, jobs):
    signum = getattr(signal, name)
    write_corpus(workdir / "in.jsonl", 6)
    proc = started(workdir, ["-", "-o", "out.jsonl", "--report", "r.json", "--jobs", jobs],
                   signum)
    proc.stdin.write((workdir / "in.jsonl").read_bytes())
    proc.stdin.flush()
    wait_for_leftovers(workdir, proc)
    proc.send_signal(signum)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 128 + signum, err
    how = "interrupted" if name == "SIGINT" else f"stopped by {name}"
    assert err.decode().strip().splitlines()[-1] == (
        f"contextpolicy reduce: {how}; no output file was written")
    assert not (workdir / "out.jsonl").exists() and not (workdir / "r.json").exists()
    assert leftovers(workdir) == []


@pytest.mark.parametrize("name", ["SIGTERM", "SIGHUP"])
def test_a_signal_during_a_run_on_a_file_stops_the_workers(workdir, name):
    signum = getattr(signal, name)
    write_corpus(workdir / "in.jsonl", 20, repeat=15)
    proc = started(workdir, ["in.jsonl", "--report", "r.json", "--jobs", "2"], signum,
                   with_workers(workdir))
    assert proc.stdout.read(1) == b"{"  # reducing has begun; nobody reads on: it is blocked
    time.sleep(0.5)
    workers = workers_of(proc.pid)
    assert proc.poll() is None and len(workers) == 1
    proc.send_signal(signum)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 128 + signum, err
    assert err.decode().strip().splitlines() == [
        f"contextpolicy reduce: stopped by {name}; no output file was written; what went to "
        "standard output is incomplete"]
    assert not (workdir / "r.json").exists() and leftovers(workdir) == []
    assert not any(running(w) for w in workers)


@pytest.mark.parametrize("jobs", JOBS)
def test_a_signal_ends_the_run_even_when_nobody_reads_its_output(workdir, jobs):
    write_corpus(workdir / "in.jsonl", 20, repeat=15)
    proc = started(workdir, ["in.jsonl", "--jobs", jobs, "-q"], signal.SIGTERM)
    assert proc.stdout.read(1) == b"{"  # begun, and blocked on its output from now on
    time.sleep(0.5)
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=30) == 128 + signal.SIGTERM  # nothing read meanwhile
    assert proc.stderr.read().decode().strip() == (
        "contextpolicy reduce: stopped by SIGTERM; what went to standard output is incomplete")


def test_a_signal_ignored_when_the_run_starts_stays_ignored(workdir):
    # nohup: a hangup does not stop the run.
    write_corpus(workdir / "in.jsonl", 6)
    proc = subprocess.Popen([str(SCRIPT), "reduce", "-", "--policy", "policy.json", "-q",
                             "-o", "out.jsonl"], cwd=workdir, stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            preexec_fn=lambda: signal.signal(signal.SIGHUP, signal.SIG_IGN))
    proc.stdin.write((workdir / "in.jsonl").read_bytes())
    proc.stdin.flush()
    wait_for_leftovers(workdir, proc)
    proc.send_signal(signal.SIGHUP)
    time.sleep(0.3)
    proc.stdin.close()
    assert proc.wait(timeout=60) == 0, proc.stderr.read()
    assert (workdir / "out.jsonl").read_bytes() == expected_output(workdir)


@pytest.mark.parametrize("jobs", JOBS)
def test_a_file_truncated_during_the_run_is_a_clear_error(workdir, jobs):
    write_corpus(workdir / "in.jsonl", 30, repeat=120)  # some 40 MB: many ranges
    size = (workdir / "in.jsonl").stat().st_size
    assert size > 8 * BATCH_BYTES
    proc = started(workdir, ["in.jsonl", "--report", "r.json", "-q", "--jobs", jobs])
    assert proc.stdout.read(1) == b"{"  # begun; blocked on its output, which nobody reads
    time.sleep(0.5)
    assert proc.poll() is None and leftovers(workdir)
    os.truncate(workdir / "in.jsonl", 1 << 20)
    out, err = proc.communicate(timeout=120)  # read on: the run goes on, to the missing bytes
    assert proc.returncode == 2, err
    assert -proc.returncode != signal.SIGBUS
    result = subprocess.CompletedProcess(proc.args, proc.returncode, out, err)
    one_line_error(result, "in.jsonl: the file shrank while it was read: it is now 1,048,576 "
                           "bytes, and bytes ")
    assert not (workdir / "r.json").exists() and leftovers(workdir) == []


# ---------------------------------------------------------------------------------------------
# 2. workers end with a parent killed outright


@pytest.mark.parametrize("source", ["file", "pipe"])
def test_workers_end_when_the_run_is_killed(workdir, source):
    write_corpus(workdir / "in.jsonl", 20, repeat=15)
    data = (workdir / "in.jsonl").read_bytes()
    if source == "file":
        proc = started(workdir, ["in.jsonl", "--report", "r.json", "--jobs", "2"],
                       policy=with_workers(workdir))
        assert proc.stdout.read(1) == b"{"  # blocked on its output, its worker on its results
    else:  # a pool of workers, fed from a pipe that stays open
        proc = started(workdir, ["-", "-o", "out.jsonl", "--jobs", "2"])
        proc.stdin.write(data[:len(data) // 2])
        proc.stdin.flush()
    deadline = time.monotonic() + 30
    while len(workers_of(proc.pid)) < (1 if source == "file" else 2):
        assert time.monotonic() < deadline, "no workers started"
        time.sleep(0.05)
    time.sleep(0.5)
    workers = workers_of(proc.pid)
    proc.kill()
    proc.wait(timeout=30)
    deadline = time.monotonic() + 10
    while any(running(w) for w in workers) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not any(running(w) for w in workers), "a worker outlived its parent"
    # Nothing holds the run's standard error open any more: it ends.
    ended = threading.Event()
    threading.Thread(target=lambda: (proc.stderr.read(), proc.stdout.read(), ended.set()),
                     daemon=True).start()
    assert ended.wait(10), "a worker still holds the run's output open"


# ---------------------------------------------------------------------------------------------
# 3. --jobs: no more workers than CPUs, nor than work

COUNT_PROBE = """\
import sys
import multiprocessing.process

started = []
start = multiprocessing.process.BaseProcess.start
multiprocessing.process.BaseProcess.start = lambda self: (started.append(1), start(self))[1]
from contextpolicy.cli import main

code = main(sys.argv[1:])
print(len(started))
sys.exit(code)
"""


def processes_started(workdir: Path, *args: str, stdin: bytes | None = None) -> tuple[int, str]:
    result = subprocess.run([sys.executable, "-c", COUNT_PROBE, "reduce", *args, "--policy",
                             "policy.json", "-o", "out.jsonl"], cwd=workdir, input=stdin,
                            capture_output=True, timeout=120)
    assert result.returncode == 0, result.stderr
    return int(result.stdout), result.stderr.decode()


def cpus() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # macOS
        return os.cpu_count() or 1


def cpu_limit() -> int:
    return max(2, cpus())


def test_jobs_beyond_the_cpus_are_lowered_and_said(workdir):
    write_corpus(workdir / "in.jsonl", 3)
    loud = run("reduce", "in.jsonl", "--policy", "policy.json", "-o", "out.jsonl", "--jobs",
               "1000", cwd=workdir)
    assert loud.returncode == 0
    assert loud.stderr.decode().splitlines()[0] == (
        f"contextpolicy: --jobs 1000 lowered to {cpu_limit()}: this process can use "
        f"{cpus()} CPU{'s' if cpus() != 1 else ''}, and the work is CPU-bound")
    quiet = run("reduce", "in.jsonl", "--policy", "policy.json", "-o", "out.jsonl", "--jobs",
                "1000", "-q", cwd=workdir)
    assert quiet.returncode == 0 and quiet.stderr == b""


def test_a_few_lines_start_no_worker_whatever_the_jobs(workdir):
    write_corpus(workdir / "in.jsonl", 3, size=(4, 8))  # one range: this process's own
    assert (workdir / "in.jsonl").stat().st_size < jsonl_files.MIN_RANGE
    data = (workdir / "in.jsonl").read_bytes()
    expected = expected_output(workdir)
    assert processes_started(workdir, "in.jsonl", "--jobs", "1000", "-q") == (0, "")
    assert (workdir / "out.jsonl").read_bytes() == expected
    assert processes_started(workdir, "-", "--jobs", "1000", "-q", stdin=data) == (0, "")
    assert (workdir / "out.jsonl").read_bytes() == expected


def test_no_more_workers_than_ranges_or_batches(workdir):
    write_corpus(workdir / "in.jsonl", 40, repeat=3)
    data = (workdir / "in.jsonl").read_bytes()
    expected = expected_output(workdir)
    with InputFile(str(workdir / "in.jsonl")) as source:
        ranges = len(list(source.ranges(BATCH_BYTES, workers=cpu_limit())))
    filed, _ = processes_started(workdir, "in.jsonl", "--jobs", "1000", "-q")
    assert filed <= min(ranges, cpu_limit() - 1)
    assert (workdir / "out.jsonl").read_bytes() == expected
    batches = -(-data.count(b"\n") // 64)  # BATCH_LINES
    piped, _ = processes_started(workdir, "-", "--jobs", "1000", "-q", stdin=data)
    assert 2 <= piped <= min(batches, cpu_limit())
    assert (workdir / "out.jsonl").read_bytes() == expected
