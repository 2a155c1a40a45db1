"""The command line as the tests run it: the installed script, the example policy and corpora, a
run's leftovers and worker processes, the one line a failed run prints."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from importlib import resources
from pathlib import Path

import psutil

from contextpolicy.synthetic import make_transcript

SCRIPT = Path(sys.executable).parent / ("contextpolicy.exe" if os.name == "nt" else "contextpolicy")


EXAMPLES = Path(str(resources.files("contextpolicy").joinpath("examples")))


SEED_POLICY = json.loads((EXAMPLES / "policy-reduce.json").read_text())


def run(*args, stdin=None, cwd=None, timeout=120, env=None):
    # The installed script, never a skip: a missing script is a failed install.
    assert SCRIPT.exists(), f"the console script is not installed at {SCRIPT}"
    return subprocess.run(
        [str(SCRIPT), *map(str, args)], input=stdin, capture_output=True, cwd=cwd,
        timeout=timeout, env=None if env is None else {**os.environ, **env},
    )


def write_corpus(path: Path, n: int, seed: int = 0, size=(8, 80), repeat: int = 1) -> list[dict]:
    """``n`` generated transcripts, written ``repeat`` times over (generating is the slow part)."""
    import numpy as np

    rng = np.random.default_rng(seed)
    docs = []
    for i in range(n):
        messages = make_transcript(int(rng.integers(*size)), seed=seed * 1000 + i)
        docs.append({"id": f"c{i}", "tenant": "acme", "messages": messages})
    text = "".join(json.dumps(d, ensure_ascii=False) + "\n" for d in docs)
    path.write_text(text * repeat, "utf-8")
    return docs


def leftovers(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir() if p.name.endswith(".tmp"))


def workers_of(pid: int) -> list[psutil.Process]:
    """The worker processes of the run ``pid``: its child processes, but not the helpers that
    multiprocessing starts for spawn and forkserver (its resource tracker, and the fork server,
    whose children the workers are then)."""
    workers = []
    for child in psutil.Process(pid).children():
        command = " ".join(child.cmdline())
        if "multiprocessing.resource_tracker" in command:
            continue
        if "multiprocessing.forkserver" in command:
            workers += child.children()
        else:
            workers.append(child)
    return workers


def running(process: psutil.Process) -> bool:
    try:
        return process.is_running() and process.status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


OBJECT_PATH_POLICY = {"mode": "reduce", "triggerChars": 1800, "targetInputChars": 1500,
                      "steps": [{"id": "clear", "kind": "compress", "fragmentId": "history",
                                 "handlerId": "clear-tool-results", "targetChars": 1000},
                                {"id": "trim", "kind": "trim", "fragmentId": "history",
                                 "targetChars": 1000, "keepGroups": 2}]}


def with_workers(workdir: Path) -> list[str]:
    """The arguments of a run on the object path (see OBJECT_PATH_POLICY)."""
    (workdir / "objects.json").write_text(json.dumps(OBJECT_PATH_POLICY))
    return ["--policy", "objects.json", "--handler", "clear-tool-results"]


# What the hostile suites of the command line (tests/cli/test_cli_hostile_*.py) share: every run
# at --jobs 1 and 2, the one line a failed run prints, what a plain run writes.
JOBS = ["1", "2"]


def one_line_error(result, *fragments: str, code: int = 2) -> str:
    """The single line a failed run printed (with -q), after checking its exit status and that
    it names what it should."""
    err = result.stderr.decode()
    assert result.returncode == code, err
    assert "Traceback" not in err and "Exception ignored" not in err, err
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    for fragment in fragments:
        assert fragment in lines[0], (fragment, lines[0])
    return lines[0]


def expected_output(workdir: Path) -> bytes:
    result = run("reduce", "in.jsonl", "--policy", "policy.json", "-q", cwd=workdir)
    assert result.returncode == 0 and result.stdout.count(b"\n") > 0
    return result.stdout
