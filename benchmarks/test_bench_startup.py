"""Whole processes, as a user times them: what a command or a short-lived worker pays before it
does any work.

Group ``start-up``, each a fresh interpreter (best of ``ROUNDS``, interleaved, so a slow minute
of the machine weighs on every kind alike), against ``python -c "import orjson"``:

- ``orjson-import``: the floor, ``python -c "import orjson"``;
- ``reduce-one-line``: ``contextpolicy reduce`` (the installed command) of a one-line JSONL
  file with the seed policy, ``-q``, output to a file, the policy's facts in the cache of
  validated policies (``jsonl.line_policy``; every run after a policy's first);
- ``reduce-one-line-report``: the same with ``--report``;
- ``reduce-one-line-uncached``: the same with the cache off (``CONTEXTPOLICY_CACHE_DIR=off``):
  what a policy's first run pays, validating it with pydantic;
- ``first-process-context``: ``import contextpolicy`` and one ``process_context`` of a six-message
  chat with the seed policy.

``ratios`` holds each kind's best over the floor's. Measure with
``pytest benchmarks/test_bench_startup.py --benchmark-enable --benchmark-only -s``.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from .conftest import SEED_POLICY, measuring

ROUNDS = 15
CHAT = [
    {"role": "system", "content": "You answer briefly."},
    {"role": "user", "content": "Where is my order?"},
    {"role": "assistant", "content": "It left the warehouse this morning."},
    {"role": "user", "content": "Can I change the address?"},
    {"role": "assistant", "content": "Yes, until it is out for delivery."},
    {"role": "user", "content": "Then change it to 5 Main Street."},
]


def _command() -> list[str]:
    found = shutil.which("contextpolicy", path=os.path.dirname(sys.executable))
    return [found] if found else [sys.executable, "-m", "contextpolicy"]


def _kinds(folder: Path) -> dict[str, list[str]]:
    policy = folder / "policy.json"
    policy.write_text(json.dumps(SEED_POLICY))
    one = folder / "one.jsonl"
    one.write_text(json.dumps({"id": "a", "messages": CHAT}) + "\n")
    reduce = [*_command(), "reduce", str(one), "--policy", str(policy), "-q",
              "-o", str(folder / "out.jsonl")]
    script = ("import json, sys\nfrom contextpolicy import ContextPlan, process_context\n"
              f"chat = json.loads({json.dumps(json.dumps(CHAT))})\n"
              f"policy = json.loads({json.dumps(json.dumps(SEED_POLICY))})\n"
              "process_context(ContextPlan.from_messages(chat), policy)\n")
    return {
        "orjson-import": [sys.executable, "-c", "import orjson"],
        "reduce-one-line": reduce,
        "reduce-one-line-report": [*reduce, "--report", str(folder / "report.json")],
        "reduce-one-line-uncached": [*reduce, UNCACHED],
        "first-process-context": [sys.executable, "-c", script],
    }


# As an installed package runs: its modules' bytecode cached (pip compiles it at install).
ENV = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}


UNCACHED = "--uncached"  # (a mark of this benchmark's, not an option: the cache off)


def _run(argv: list[str]) -> float:
    env = ENV
    if argv[-1] == UNCACHED:
        argv, env = argv[:-1], {**ENV, "CONTEXTPOLICY_CACHE_DIR": "off"}
    start = time.perf_counter()
    subprocess.run(argv, check=True, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                   env=env)
    return time.perf_counter() - start


def test_start_up(benchmark, tmp_path, request):
    kinds = _kinds(tmp_path)
    rounds = ROUNDS if measuring(request.config) else 2
    best = dict.fromkeys(kinds, float("inf"))
    for _ in range(rounds):
        for kind, argv in kinds.items():
            best[kind] = min(best[kind], _run(argv))
    benchmark.group = "start-up"
    benchmark.extra_info.update(kind="orjson-import")
    benchmark.pedantic(_run, args=(kinds["orjson-import"],), rounds=3, iterations=1)
    floor = best["orjson-import"]
    benchmark.extra_info["best_ms"] = {k: round(v * 1e3, 1) for k, v in best.items()}
    benchmark.extra_info["ratios"] = {f"{k} / orjson-import": v / floor
                                      for k, v in best.items() if k != "orjson-import"}
    print(benchmark.extra_info)
    assert (tmp_path / "out.jsonl").stat().st_size > 0
    assert json.loads((tmp_path / "report.json").read_text())


if __name__ == "__main__":  # pragma: no cover
    pytest.main([__file__, "--benchmark-enable", "--benchmark-only", "-s"])
