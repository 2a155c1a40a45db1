"""``contextpolicy reduce`` on three JSONL corpora of at least 100 MB each when measuring (chats,
agent traces, long transcripts; ``synthetic.CORPORA``), against the floor: bare ``orjson.loads``
over the same lines. ``--jobs 2`` against ``--jobs 1`` on this 2-core machine, ``--jobs 1``
with ``--report``, and ``--jobs 1`` with every line parsed into objects (the object path, the
runner's ``byte_path`` off) against the lines read as bytes.

Each is timed twice: in this process (``main(...)``, the work alone) and as a whole process
(the installed command, started, run and ended: what a user times). ``--jobs 2`` is held to the
ceiling of this machine at the moment: two independent ``--jobs 1`` runs started together, in
two processes (their throughput together, ``2 x size / time``).

Each command writes to an output of its own that is removed before it runs: replacing the last
round's output would add the file system's unlinking of it to the command's time."""

from __future__ import annotations

import contextlib
import json
import mmap
import multiprocessing
import os
import shutil
import statistics
import subprocess
import sys
import time

import orjson
import pytest

from contextpolicy.cli import main
from contextpolicy.jsonl.worker import LineWorker
from contextpolicy.synthetic import corpus as make_corpus

from .conftest import SEED_POLICY, measuring

ROUNDS = 15  # interleaved: this machine's speed swings by a third from minute to minute
# Distinct transcripts per corpus, repeated (with ids of their own) up to the corpus size.
DISTINCT = {"chats": 20_000, "agent-traces": 400, "long-transcripts": 120}


@pytest.fixture(scope="session", params=list(DISTINCT))
def corpus(tmp_path_factory, request):
    name = request.param
    target = (100 << 20) if measuring(request.config) else (1 << 20)
    folder = tmp_path_factory.mktemp(f"cli-bench-{name}")
    distinct = DISTINCT[name] if measuring(request.config) else max(3, DISTINCT[name] // 200)
    lines = make_corpus(name, distinct, seed=500)
    path = folder / "corpus.jsonl"
    written = 0
    with open(path, "wb") as fh:
        k = 0
        while written < target:
            line = orjson.dumps({"id": f"t{k}", "messages": lines[k % len(lines)]}) + b"\n"
            fh.write(line)
            written += len(line)
            k += 1
    (folder / "policy.json").write_text(json.dumps(SEED_POLICY))
    return folder, path, written, k, name


def label(benchmark, corpus, kind):
    folder, path, size, count, name = corpus
    benchmark.group = f"reduce command: {name} {size / 1e6:.0f} MB"
    benchmark.extra_info.update(bytes=size, conversations=count, kind=kind)


def parse_all(path):
    """The floor: the fastest way to parse every line (map the file, parse each line in place)."""
    n = 0
    with open(path, "rb") as fh, mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ) as data:
        view = memoryview(data)
        start, end = 0, len(data)
        while start < end:
            stop = data.find(b"\n", start)
            stop = end if stop < 0 else stop
            orjson.loads(view[start:stop])
            n += 1
            start = stop + 1
        view.release()
    return n


def reduce_args(folder, path, jobs, out=None, report=False):
    out_path = folder / (out or f"out{jobs}.jsonl")
    report_path = folder / f"report{jobs}.json"
    for old in (out_path, report_path):
        with contextlib.suppress(FileNotFoundError):
            os.remove(old)
    args = ["reduce", str(path), "--policy", str(folder / "policy.json"),
            "-o", str(out_path), "-q", "--jobs", str(jobs)]
    return args + (["--report", str(report_path)] if report else [])


def objects(args):
    """The command with every line parsed into objects (the object path)."""
    before = LineWorker.byte_path
    LineWorker.byte_path = False
    try:
        return main(args)
    finally:
        LineWorker.byte_path = before


def side_by_side(folder, path):
    """Two independent `reduce --jobs 1` runs started together in two processes: what the
    machine gives two processes at this moment, the ceiling for --jobs 2."""
    ctx = multiprocessing.get_context("fork" if sys.platform == "linux" else "spawn")
    runs = [ctx.Process(target=main, args=(reduce_args(folder, path, 1, f"twin{i}.jsonl"),))
            for i in range(2)]
    for run in runs:
        run.start()
    for run in runs:
        run.join()
        assert run.exitcode == 0


def command() -> list[str]:
    """The installed command (``python -m contextpolicy`` where it is not on the path)."""
    found = shutil.which("contextpolicy", path=os.path.dirname(sys.executable))
    return [found] if found else [sys.executable, "-m", "contextpolicy"]


def whole(args: list[str]) -> None:
    """The command in a process of its own, as a user runs it."""
    subprocess.run([*command(), *args], check=True, stdin=subprocess.DEVNULL)


def whole_side_by_side(folder, path) -> None:
    """Two independent whole ``reduce --jobs 1`` processes started together."""
    runs = [subprocess.Popen([*command(), *reduce_args(folder, path, 1, f"ptwin{i}.jsonl")],
                             stdin=subprocess.DEVNULL) for i in range(2)]
    for run in runs:
        assert run.wait() == 0


def test_orjson_loads_floor(benchmark, corpus):
    folder, path, size, count, _ = corpus
    label(benchmark, corpus, "orjson-loads")
    assert benchmark.pedantic(parse_all, (path,), rounds=7, iterations=1) == count


@pytest.mark.parametrize("jobs, report", [(1, False), (1, True), (2, False)],
                         ids=["jobs1", "jobs1-report", "jobs2"])
def test_reduce_command(benchmark, corpus, jobs, report):
    folder, path, size, count, _ = corpus
    label(benchmark, corpus, f"reduce-jobs{jobs}" + ("-report" if report else ""))
    assert benchmark.pedantic(main, (reduce_args(folder, path, jobs, report=report),),
                              rounds=5, iterations=1) == 0
    with open(folder / f"out{jobs}.jsonl", "rb") as fh:
        assert sum(1 for _ in fh) == count
    if report:
        summary = json.loads((folder / f"report{jobs}.json").read_text())
        assert summary["summary"]["conversations"] == count


def test_reduce_ratios_interleaved(benchmark, corpus, request):
    """The floor, --jobs 1, --jobs 2 and two --jobs 1 side by side timed one after another in
    every round (their order rotating from round to round), so that a noisy neighbour slows
    them all alike; the ratios are the medians over the rounds."""
    folder, path, size, count, _ = corpus
    commands = {
        "floor": lambda: parse_all(path),
        "jobs1": lambda: main(reduce_args(folder, path, 1)),
        "report": lambda: main(reduce_args(folder, path, 1, "outr.jsonl", report=True)),
        "jobs2": lambda: main(reduce_args(folder, path, 2)),
        "twins": lambda: side_by_side(folder, path),
        "objects": lambda: objects(reduce_args(folder, path, 1, "outo.jsonl")),
        "process-jobs1": lambda: whole(reduce_args(folder, path, 1, "pout1.jsonl")),
        "process-report": lambda: whole(reduce_args(folder, path, 1, "poutr.jsonl",
                                                    report=True)),
        "process-jobs2": lambda: whole(reduce_args(folder, path, 2, "pout2.jsonl")),
        "process-twins": lambda: whole_side_by_side(folder, path),
    }
    names = list(commands)
    rounds: list[dict[str, float]] = []

    def one_round():
        k = len(rounds) % len(names)
        times = {}
        for name in names[k:] + names[:k]:
            start = time.perf_counter()
            commands[name]()
            times[name] = time.perf_counter() - start
        rounds.append(times)

    label(benchmark, corpus, "interleaved")
    benchmark.pedantic(one_round, rounds=ROUNDS, iterations=1)
    benchmark.extra_info["ratios"] = {
        "jobs1 throughput / orjson.loads": statistics.median(r["floor"] / r["jobs1"]
                                                             for r in rounds),
        "jobs1 --report throughput / orjson.loads": statistics.median(
            r["floor"] / r["report"] for r in rounds),
        "jobs2 speedup over jobs1": statistics.median(r["jobs1"] / r["jobs2"] for r in rounds),
        "ceiling: 2 x jobs1 / two jobs1 side by side": statistics.median(
            2 * r["jobs1"] / r["twins"] for r in rounds),
        "jobs1 bytes speedup over jobs1 objects": statistics.median(
            r["objects"] / r["jobs1"] for r in rounds),
        "jobs2 / two-process ceiling": statistics.median(
            r["twins"] / (2 * r["jobs2"]) for r in rounds),
        # whole processes: start-up, the run and the exit, as a user times the command
        "whole process: jobs1 throughput / orjson.loads": statistics.median(
            r["floor"] / r["process-jobs1"] for r in rounds),
        "whole process: jobs1 --report throughput / orjson.loads": statistics.median(
            r["floor"] / r["process-report"] for r in rounds),
        "whole process: jobs2 / two-process ceiling": statistics.median(
            r["process-twins"] / (2 * r["process-jobs2"]) for r in rounds),
    }
    # the share of lines read as bytes, from the run's summary
    main(reduce_args(folder, path, 1, "outs.jsonl", report=True))
    paths = json.loads((folder / "report1.json").read_text())["summary"]["paths"]
    benchmark.extra_info["paths"] = paths
    assert paths["bytes"] + paths["objects"] == count
    with open(folder / "outo.jsonl", "rb") as a, open(folder / "out1.jsonl", "rb") as b:
        assert [orjson.loads(x) for x in a] == [orjson.loads(y) for y in b]
    for name in ("pout1", "pout2", "ptwin0", "ptwin1"):  # whole processes: the same bytes
        assert (folder / f"{name}.jsonl").read_bytes() == (folder / "out1.jsonl").read_bytes()
    benchmark.extra_info["rounds"] = rounds
    assert len(rounds) == (ROUNDS if measuring(request.config) else 1)
