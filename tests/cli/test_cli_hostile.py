"""The command line under hostile input and surroundings: JSON at the edges of what orjson
reads and writes, streams that are not files, outputs that are not regular files, full disks,
closed streams, signals, files that shrink while they are read, a killed parent, absurd
``--jobs`` and bench arguments. Nothing is ever lost or damaged: a run either writes exactly
what it should or says, in one line naming the file (and line), what went wrong (exit 2), and
leaves no file behind."""

from __future__ import annotations

import gzip
import json
import os
import re
import signal
import stat
import subprocess
import sys
import threading
import time
import tracemalloc
import types
from pathlib import Path

import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from contextpolicy._tables import MAX_JSON_DEPTH
from contextpolicy.jsonl import files as jsonl_files
from contextpolicy.jsonl.files import InputFile, dumps_exactly
from contextpolicy.jsonl.runner import BATCH_BYTES
from tests.support.cli import (
    SCRIPT,
    leftovers,
    run,
    running,
    with_workers,
    workers_of,
    write_corpus,
)

pytestmark = pytest.mark.skipif(sys.platform == "win32", reason="POSIX streams and signals")
linux = pytest.mark.skipif(sys.platform != "linux", reason="/dev/full, /proc and Linux's device "
                           "numbers")

JOBS = ["1", "2"]
SHORT = [{"role": "user", "content": "Where is my order?"},
         {"role": "assistant", "content": "It ships tomorrow."}]


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


def compact(doc) -> bytes:
    """What orjson writes, written by the standard library (no floats in these documents), at
    any depth."""
    limit = sys.getrecursionlimit()
    sys.setrecursionlimit(10_000)
    try:
        return json.dumps(doc, separators=(",", ":"), ensure_ascii=False).encode()
    finally:
        sys.setrecursionlimit(limit)


def jsonl(*docs) -> bytes:
    return b"".join(compact(d) + b"\n" for d in docs)


# ---------------------------------------------------------------------------------------------
# 1. nesting orjson reads (1,024 levels) but will not write (254): the line is processed


def nested(depth: int, kind: str = "list"):
    value: object = "leaf"
    for _ in range(depth):
        value = [value] if kind == "list" else {"k": value}
    return value


def deep_docs(depth: int) -> dict[str, dict]:
    deep = nested(depth)
    return {
        "extra key": {"id": "a", "extra": deep, "messages": SHORT},
        "objects": {"id": "b", "extra": nested(depth, "dict"), "messages": SHORT},
        "id": {"id": deep, "messages": SHORT},
        "message key": {"id": "c", "messages": [{**SHORT[0], "meta": deep}, SHORT[1]]},
        "tool_use input": {"id": "d", "messages": [SHORT[0], {"role": "assistant", "content": [
            {"type": "tool_use", "id": "t1", "name": "lookup", "input": {"q": deep}}]}]},
        "tool_call arguments": {"id": "e", "messages": [SHORT[0], {
            "role": "assistant", "content": None, "tool_calls": [{
                "id": "c1", "type": "function",
                "function": {"name": "lookup", "arguments": {"q": deep}}}]}]},
    }


@pytest.mark.parametrize("jobs", JOBS)
@pytest.mark.parametrize("where", list(deep_docs(3)))
def test_a_line_nested_deeper_than_orjson_writes_is_processed(workdir, where, jobs):
    doc = deep_docs(300)[where]
    (workdir / "in.jsonl").write_bytes(jsonl({"id": "first", "messages": SHORT}, doc))
    result = run("reduce", "in.jsonl", "--policy", "policy.json", "-o", "out.jsonl",
                 "--report", "report.json", "--jobs", jobs, "-q", cwd=workdir)
    assert result.returncode == 0 and result.stderr == b"", result.stderr
    lines = (workdir / "out.jsonl").read_bytes().splitlines()
    assert lines[1] == compact(doc)  # short: nothing to trim, written back byte for byte
    report = json.loads((workdir / "report.json").read_text())
    assert report["conversations"][1]["id"] == doc["id"]
    assert leftovers(workdir) == []


@pytest.mark.parametrize("jobs", JOBS)
def test_nesting_up_to_what_orjson_reads_passes_and_beyond_is_a_line_error(workdir, jobs):
    docs = [{"id": depth, "extra": nested(depth), "messages": SHORT}
            for depth in (253, 254, 255, 1000, 1022)]
    too_deep = b'{"id": "x", "extra": ' + b"[" * 1100 + b"]" * 1100 + b', "messages": []}'
    (workdir / "in.jsonl").write_bytes(jsonl(*docs) + too_deep + b"\n")
    skipped = run("reduce", "in.jsonl", "--policy", "policy.json", "-o", "out.jsonl",
                  "--on-error", "skip", "--jobs", jobs, "-q", cwd=workdir)
    assert skipped.returncode == 0, skipped.stderr
    # orjson reads 1,024 levels: the object and 1,023 arrays; the byte after them is at fault.
    assert b"skipped in.jsonl:6:1046: invalid JSON: depth limit exceeded" in skipped.stderr
    assert (workdir / "out.jsonl").read_bytes() == jsonl(*docs)
    failed = run("reduce", "in.jsonl", "--policy", "policy.json", "-o", "out2.jsonl",
                 "--jobs", jobs, "-q", cwd=workdir)
    one_line_error(failed, "in.jsonl:6:1046: invalid JSON: depth limit exceeded")
    assert not (workdir / "out2.jsonl").exists() and leftovers(workdir) == []


@pytest.mark.parametrize("pure", ["0", "1"], ids=["compiled", "twin"])
@pytest.mark.parametrize("jobs", JOBS)
def test_tool_inputs_as_deep_as_a_line_holds_are_measured_exactly(workdir, jobs, pure):
    # A line nests at most MAX_JSON_DEPTH levels, what orjson reads, and the kernels measure
    # every value in it exactly: a tool input (5 levels inside its line) or a call's arguments
    # (6 levels inside) filling the line to one level short of the limit, and to the limit, are
    # written back whole with their chars in the report; one level more is the line's error.
    def doc(kind: str, line_depth: int) -> dict:
        if kind == "input":
            call = {"role": "assistant", "content": [
                {"type": "tool_use", "id": "t1", "name": "f", "input": nested(line_depth - 5)}]}
            result = {"role": "user", "content": [
                {"type": "tool_result", "tool_use_id": "t1", "content": "r"}]}
        else:
            call = {"role": "assistant", "content": None, "tool_calls": [
                {"id": "c1", "type": "function",
                 "function": {"name": "f", "arguments": nested(line_depth - 6)}}]}
            result = {"role": "tool", "tool_call_id": "c1", "content": "r"}
        return {"id": f"{kind}-{line_depth}", "messages": [SHORT[0], call, result, SHORT[1]]}

    docs = [doc(kind, MAX_JSON_DEPTH + k) for kind in ("input", "arguments") for k in (-1, 0, 1)]
    (workdir / "in.jsonl").write_bytes(b"".join(dumps_exactly(d) + b"\n" for d in docs))
    env = {"CONTEXTPOLICY_PURE_PYTHON": pure}
    skipped = run("reduce", "in.jsonl", "--policy", "policy.json", "-o", "out.jsonl",
                  "--report", "report.json", "--on-error", "skip", "--jobs", jobs, "-q",
                  cwd=workdir, env=env)
    assert skipped.returncode == 0, skipped.stderr
    err = skipped.stderr.decode()
    assert re.search(r"in\.jsonl:3:\d+: invalid JSON: depth limit exceeded", err), err
    assert re.search(r"in\.jsonl:6:\d+: invalid JSON: depth limit exceeded", err), err
    kept = [d for d in docs if int(d["id"].split("-")[1]) <= MAX_JSON_DEPTH]
    assert (workdir / "out.jsonl").read_bytes() == b"".join(
        dumps_exactly(d) + b"\n" for d in kept)
    report = json.loads((workdir / "report.json").read_text())
    chars = {c["id"]: c["report"]["before"]["chars"] for c in report["conversations"]}
    # "Where is my order?" "It ships tomorrow." (the question), "f", "r", and the JSON: "leaf"
    # in as many brackets as it nests.
    for d in kept:
        kind, depth = d["id"].split("-")
        levels = int(depth) - (5 if kind == "input" else 6)
        assert chars[d["id"]] == 18 + 18 + 1 + 1 + len('"leaf"') + 2 * levels, d["id"]
    failed = run("reduce", "in.jsonl", "--policy", "policy.json", "-o", "out2.jsonl",
                 "--jobs", jobs, "-q", cwd=workdir, env=env)
    one_line_error(failed, "in.jsonl:3:")
    assert "invalid JSON: depth limit exceeded" in failed.stderr.decode()
    assert not (workdir / "out2.jsonl").exists() and leftovers(workdir) == []


json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**63), 2**64 - 1)
    | st.floats(allow_nan=False, allow_infinity=False) | st.text(),
    lambda children: st.lists(children, max_size=4)
    | st.dictionaries(st.text(max_size=8), children, max_size=4),
    max_leaves=40,
)


@settings(max_examples=300, deadline=None)
@given(json_values)
def test_the_exact_writer_writes_the_bytes_orjson_writes(value):
    assert dumps_exactly(value) == orjson.dumps(value)


def test_the_exact_writer_writes_the_bytes_orjson_writes_on_real_lines(tmp_path):
    write_corpus(tmp_path / "in.jsonl", 30, seed=5)
    for line in (tmp_path / "in.jsonl").read_bytes().splitlines():
        doc = orjson.loads(line)
        assert dumps_exactly(doc) == orjson.dumps(doc)
    floats = [0.1, 1e16, 1.5e-7, -0.0, 5e-324, 1.7976931348623157e308, 123456789.125]
    assert dumps_exactly(floats) == orjson.dumps(floats)


def test_the_exact_writer_goes_deeper_than_orjson_and_keeps_large_integers():
    deep = nested(1024)
    with pytest.raises(TypeError):
        orjson.dumps(deep)
    assert dumps_exactly(deep) == compact(deep)
    big = {"n": [2**64, -(2**63) - 1, 10**40], "t": "é\u2028\x00"}
    assert dumps_exactly(big) == compact(big)
    with pytest.raises(TypeError):
        dumps_exactly({1: "a key that is not a string"})


# ---------------------------------------------------------------------------------------------
# 2. streams that are not regular files: a FIFO, a process substitution, /dev/stdin


def expected_output(workdir: Path) -> bytes:
    result = run("reduce", "in.jsonl", "--policy", "policy.json", "-q", cwd=workdir)
    assert result.returncode == 0 and result.stdout.count(b"\n") > 0
    return result.stdout


def feed_fifo(path: Path, data: bytes) -> threading.Thread:
    def write():
        with open(path, "wb") as fh:  # waits for the reader
            for at in range(0, len(data), 7000):  # in pieces, as a writer would
                fh.write(data[at:at + 7000])
                fh.flush()

    thread = threading.Thread(target=write, daemon=True)
    thread.start()
    return thread


@pytest.mark.parametrize("jobs", JOBS)
@pytest.mark.parametrize("packed", [False, True], ids=["plain", "gzip"])
def test_a_fifo_is_read_as_a_stream(workdir, jobs, packed):
    write_corpus(workdir / "in.jsonl", 12, seed=2, repeat=3)
    data = (workdir / "in.jsonl").read_bytes()
    name = "chats.fifo.gz" if packed else "chats.fifo"
    os.mkfifo(workdir / name)
    writer = feed_fifo(workdir / name, gzip.compress(data) if packed else data)
    result = run("reduce", name, "--policy", "policy.json", "--jobs", jobs, "--report",
                 "report.json", "-q", cwd=workdir)
    writer.join(timeout=30)
    assert result.returncode == 0, result.stderr
    assert result.stdout == expected_output(workdir)
    summary = json.loads((workdir / "report.json").read_text())["summary"]
    assert summary["conversations"] == 36 and summary["bytesIn"] == len(data)


@pytest.mark.parametrize("jobs", JOBS)
def test_a_process_substitution_is_read_as_a_stream(workdir, jobs):
    write_corpus(workdir / "in.jsonl", 10, seed=3)
    result = subprocess.run(
        ["bash", "-c", f'"{SCRIPT}" reduce <(cat in.jsonl) --policy policy.json -q --jobs {jobs}'],
        cwd=workdir, capture_output=True, timeout=120,
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout == expected_output(workdir)


@pytest.mark.parametrize("jobs", JOBS)
def test_dev_stdin_is_read_as_a_stream(workdir, jobs):
    write_corpus(workdir / "in.jsonl", 10, seed=4)
    data = (workdir / "in.jsonl").read_bytes()
    result = run("reduce", "/dev/stdin", "--policy", "policy.json", "-q", "--jobs", jobs,
                 stdin=data, cwd=workdir)
    assert result.returncode == 0, result.stderr
    assert result.stdout == expected_output(workdir)


@pytest.mark.parametrize("jobs", JOBS)
def test_dev_stdin_on_a_regular_file_is_read_as_a_stream(workdir, jobs):
    # A worker that opened /dev/stdin would find its own standard input there.
    write_corpus(workdir / "in.jsonl", 10, seed=5)
    with open(workdir / "in.jsonl", "rb") as stdin:
        result = subprocess.run([str(SCRIPT), "reduce", "/dev/stdin", "--policy", "policy.json",
                                 "-q", "--jobs", jobs], cwd=workdir, stdin=stdin,
                                capture_output=True, timeout=120)
    assert result.returncode == 0, result.stderr
    assert result.stdout == expected_output(workdir)


# ---------------------------------------------------------------------------------------------
# 3. outputs that are not regular files are written through; a symbolic link is kept


def own_null_device(workdir: Path) -> object:
    """A null device of this test's own where it may make one (as root), so that a regression
    can never replace the system's /dev/null; else /dev/null itself."""
    try:
        os.mknod(workdir / "null", stat.S_IFCHR | 0o666, os.makedev(1, 3))
    except (PermissionError, AttributeError):
        return "/dev/null"
    return workdir / "null"


def reduce_to(workdir: Path, target, *more: str, jobs: str = "1", **kw):
    return run("reduce", "in.jsonl", "--policy", "policy.json", "-o", target, "-q",
               "--jobs", jobs, *more, cwd=workdir, **kw)


@linux
@pytest.mark.parametrize("jobs", JOBS)
def test_a_character_device_stays_a_device(workdir, jobs):
    write_corpus(workdir / "in.jsonl", 10)
    targets: list[object] = [own_null_device(workdir)]
    for target in targets:
        result = reduce_to(workdir, target, "--report", workdir / "r.json", jobs=jobs)
        assert result.returncode == 0, result.stderr
        assert stat.S_ISCHR(os.stat(target).st_mode)
        assert os.stat(target).st_rdev == os.makedev(1, 3)
    assert leftovers(workdir) == [] and not any(
        p.name.startswith(".null.") for p in Path("/dev").iterdir())


@pytest.mark.parametrize("jobs", JOBS)
def test_a_fifo_output_is_written_to_its_reader(workdir, jobs):
    write_corpus(workdir / "in.jsonl", 10, seed=6, repeat=3)
    expected = expected_output(workdir)
    os.mkfifo(workdir / "out.fifo")
    received: list[bytes] = []
    reader = threading.Thread(target=lambda: received.append((workdir / "out.fifo").read_bytes()),
                              daemon=True)
    reader.start()
    result = reduce_to(workdir, "out.fifo", jobs=jobs, timeout=60)
    reader.join(timeout=30)
    assert result.returncode == 0, result.stderr
    assert received == [expected]
    assert stat.S_ISFIFO(os.stat(workdir / "out.fifo").st_mode) and leftovers(workdir) == []


@pytest.mark.parametrize("jobs", JOBS)
def test_a_symbolic_link_is_kept_and_its_file_replaced(workdir, jobs):
    write_corpus(workdir / "in.jsonl", 8)
    expected = expected_output(workdir)
    elsewhere = workdir / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "real.jsonl").write_text("the old content\n")
    (workdir / "link.jsonl").symlink_to(elsewhere / "real.jsonl")
    (workdir / "chain.jsonl").symlink_to("link.jsonl")  # a link to a link
    (workdir / "dangling.jsonl").symlink_to(elsewhere / "new.jsonl")  # to a file to be made
    for name, real in [("link.jsonl", "real.jsonl"), ("chain.jsonl", "real.jsonl"),
                       ("dangling.jsonl", "new.jsonl")]:
        (elsewhere / real).unlink(missing_ok=True)
        if real == "real.jsonl":
            (elsewhere / real).write_text("the old content\n")
        result = reduce_to(workdir, name, jobs=jobs)
        assert result.returncode == 0, result.stderr
        assert (workdir / name).is_symlink()
        assert (elsewhere / real).read_bytes() == expected
    assert (workdir / "link.jsonl").readlink() == elsewhere / "real.jsonl"
    assert leftovers(workdir) == leftovers(elsewhere) == []


@pytest.mark.parametrize("name", ["/dev/stdout", "/dev/fd/1",
                                  pytest.param("/proc/self/fd/1", marks=linux), "link"])
def test_dev_stdout_is_standard_output(workdir, name):
    write_corpus(workdir / "in.jsonl", 8)
    expected = expected_output(workdir)
    (workdir / "link").symlink_to("/dev/stdout")
    piped = reduce_to(workdir, name)
    assert piped.returncode == 0 and piped.stderr == b"", piped.stderr
    assert piped.stdout == expected
    # Standard output on a file opened for appending: written where it stands, not replaced.
    (workdir / "log").write_bytes(b"before\n")
    with open(workdir / "log", "ab") as log:
        appended = subprocess.run([str(SCRIPT), "reduce", "in.jsonl", "--policy",
                                   "policy.json", "-q", "-o", name], cwd=workdir,
                                  stdout=log, stderr=subprocess.PIPE, timeout=120)
    assert appended.returncode == 0, appended.stderr
    assert (workdir / "log").read_bytes() == b"before\n" + expected
    assert leftovers(workdir) == [] and leftovers(Path("/dev")) == []


def test_a_replaced_file_keeps_its_permissions(workdir):
    write_corpus(workdir / "in.jsonl", 4)
    (workdir / "private.jsonl").write_text("secret\n")
    os.chmod(workdir / "private.jsonl", 0o600)
    assert reduce_to(workdir, "private.jsonl").returncode == 0
    assert stat.S_IMODE(os.stat(workdir / "private.jsonl").st_mode) == 0o600
    assert (workdir / "private.jsonl").read_bytes() == expected_output(workdir)


# ---------------------------------------------------------------------------------------------
# 4. what cannot be written or read: one line naming the path, exit 2, nothing left behind


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["-o", "folder"], "folder: is a folder; expected a file to write"),
        (["-o", "/nonexistent/x.jsonl"], "/nonexistent/x.jsonl: cannot write: the folder "
                                         "/nonexistent does not exist"),
        (["-o", "out.jsonl", "--report", "missing/r.json"], "missing/r.json: cannot write: the "
                                                            "folder"),
        (["-o", "out.jsonl", "--report", "folder"], "folder: is a folder"),
        (["--report", "folder"], "folder: is a folder"),
        (["-o", "folder/"], "folder/: is a folder"),
    ],
)
@pytest.mark.parametrize("jobs", JOBS)
def test_an_output_that_cannot_be_written_fails_before_the_work(workdir, args, message, jobs):
    write_corpus(workdir / "in.jsonl", 6)
    (workdir / "folder").mkdir()
    result = run("reduce", "in.jsonl", "--policy", "policy.json", "-q", "--jobs", jobs, *args,
                 cwd=workdir)
    one_line_error(result, message)
    assert result.stdout == b""  # refused before any line was reduced
    assert not (workdir / "out.jsonl").exists()
    assert leftovers(workdir) == leftovers(workdir / "folder") == []


@linux
@pytest.mark.parametrize("jobs", JOBS)
def test_a_full_device_is_a_one_line_error(workdir, jobs):
    write_corpus(workdir / "in.jsonl", 10)
    full = reduce_to(workdir, "/dev/full", jobs=jobs)
    one_line_error(full, "/dev/full: cannot write (No space left on device)")
    report = reduce_to(workdir, "out.jsonl", "--report", "/dev/full", jobs=jobs)
    one_line_error(report, "/dev/full: cannot write (No space left on device)")
    assert not (workdir / "out.jsonl").exists()  # the output waits for the report
    assert stat.S_ISCHR(os.stat("/dev/full").st_mode) and leftovers(workdir) == []


@linux
@pytest.mark.parametrize("args", [
    ["reduce", "in.jsonl", "--policy", "policy.json", "-q"],
    ["reduce", "in.jsonl", "--policy", "policy.json", "-q", "--jobs", "2", "--report", "r.json"],
    ["schema", "policy"], ["validate", "policy.json"], ["bench", "--sizes", "50", "--repeat",
                                                         "1", "--no-langchain"],
], ids=["reduce", "reduce-jobs-2", "schema", "validate", "bench"])
def test_standard_output_on_a_full_disk_is_a_one_line_error(workdir, args):
    write_corpus(workdir / "in.jsonl", 10)
    with open("/dev/full", "wb") as full:
        result = subprocess.run([str(SCRIPT), *args], cwd=workdir, stdout=full,
                                stderr=subprocess.PIPE, timeout=120)
    one_line_error(result, "standard output: cannot write (No space left on device)")
    assert leftovers(workdir) == [] and not (workdir / "r.json").exists()


@pytest.mark.parametrize("args", [
    ["reduce", "in.jsonl", "--policy", "policy.json"], ["schema", "plan"],
    ["validate", "policy.json"], ["audit", "plan.json", "--policy", "policy.json"],
], ids=["reduce", "schema", "validate", "audit"])
def test_a_closed_standard_output_is_a_one_line_error(workdir, args):
    write_corpus(workdir / "in.jsonl", 3)
    result = subprocess.run([str(SCRIPT), *args], cwd=workdir, stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, timeout=120,
                            preexec_fn=lambda: os.close(1))
    one_line_error(result, "standard output is closed")
    assert leftovers(workdir) == []


def test_a_closed_standard_input_is_a_one_line_error(workdir):
    result = subprocess.run([str(SCRIPT), "reduce", "-", "--policy", "policy.json", "-q"],
                            cwd=workdir, stdin=subprocess.DEVNULL, capture_output=True,
                            timeout=120, preexec_fn=lambda: os.close(0))
    one_line_error(result, "<stdin>: standard input is closed")


@pytest.mark.parametrize("jobs", JOBS)
@pytest.mark.parametrize("sigxfsz", ["default", "ignored"])
def test_a_file_size_limit_reached_mid_run_leaves_nothing(workdir, jobs, sigxfsz):
    # As a full disk would: the write fails part of the way through the run.
    import resource

    write_corpus(workdir / "in.jsonl", 40, repeat=10)

    def limit():
        resource.setrlimit(resource.RLIMIT_FSIZE, (200_000, 200_000))
        signal.signal(signal.SIGXFSZ, signal.SIG_DFL if sigxfsz == "default" else signal.SIG_IGN)

    result = subprocess.run([str(SCRIPT), "reduce", "in.jsonl", "--policy", "policy.json", "-q",
                             "-o", "out.jsonl", "--jobs", jobs], cwd=workdir,
                            capture_output=True, timeout=120, preexec_fn=limit)
    one_line_error(result, "out.jsonl: cannot write (File too large)")
    assert not (workdir / "out.jsonl").exists() and leftovers(workdir) == []


def gzip_cases(data: bytes) -> dict[str, tuple[str, bytes, str]]:
    packed = gzip.compress(data)
    corrupt = bytearray(packed)
    corrupt[10:16] = b"\xff" * 6  # the first block's type is one that does not exist
    return {
        "truncated": ("in.jsonl.gz", packed[:len(packed) // 2],
                      "in.jsonl.gz: the gzip data ends before its end marker"),
        "not gzip": ("plain.jsonl.gz", data, "plain.jsonl.gz: expected gzip data"),
        "corrupt": ("bad.jsonl.gz", bytes(corrupt), "bad.jsonl.gz: invalid gzip data"),
        "bad crc": ("crc.jsonl.gz", packed[:-8] + b"\0" * 8, "crc.jsonl.gz: invalid gzip data"),
    }


@pytest.mark.parametrize("jobs", JOBS)
@pytest.mark.parametrize("case", ["truncated", "not gzip", "corrupt", "bad crc"])
def test_bad_gzip_input_is_a_one_line_error(workdir, jobs, case):
    write_corpus(workdir / "in.jsonl", 30, seed=7)
    name, content, message = gzip_cases((workdir / "in.jsonl").read_bytes())[case]
    (workdir / name).write_bytes(content)
    result = run("reduce", name, "--policy", "policy.json", "-o", "out.jsonl", "--report",
                 "r.json", "-q", "--jobs", jobs, cwd=workdir)
    one_line_error(result, message)
    assert not (workdir / "out.jsonl").exists() and not (workdir / "r.json").exists()
    assert leftovers(workdir) == []


def test_an_input_that_cannot_be_read_is_a_one_line_error(workdir):
    (workdir / "folder").mkdir()
    one_line_error(run("reduce", "folder", "--policy", "policy.json", "-q", cwd=workdir),
                   "folder: cannot open (Is a directory)")
    one_line_error(run("reduce", "nope.jsonl", "--policy", "policy.json", "-q", cwd=workdir),
                   "nope.jsonl: cannot open (No such file or directory)")


def test_a_folder_made_at_the_target_during_the_run_is_a_one_line_error(workdir):
    # The rename at the end is checked too: the run still says which file and why.
    write_corpus(workdir / "in.jsonl", 4)
    proc = subprocess.Popen([str(SCRIPT), "reduce", "-", "--policy", "policy.json", "-q",
                             "-o", "out.jsonl"], cwd=workdir, stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    proc.stdin.write((workdir / "in.jsonl").read_bytes())
    proc.stdin.flush()
    deadline = time.monotonic() + 30
    while not leftovers(workdir) and time.monotonic() < deadline:
        time.sleep(0.01)
    (workdir / "out.jsonl").mkdir()
    out, err = proc.communicate(timeout=60)
    result = subprocess.CompletedProcess(proc.args, proc.returncode, out, err)
    one_line_error(result, "out.jsonl: cannot write (")
    assert (workdir / "out.jsonl").is_dir() and leftovers(workdir) == []


# ---------------------------------------------------------------------------------------------
# 5. one file named twice, or a file the run reads named as an output: refused


@pytest.mark.parametrize("jobs", JOBS)
@pytest.mark.parametrize("spelling", ["same", "dot", "dotdot", "symlink", "hardlink",
                                      "symlinked folder", "absolute"])
def test_one_file_named_as_both_outputs_is_refused(workdir, jobs, spelling):
    write_corpus(workdir / "in.jsonl", 4)
    (workdir / "sub").mkdir()
    (workdir / "x.json").write_text("keep me\n")
    os.link(workdir / "x.json", workdir / "hard.json")
    (workdir / "soft.json").symlink_to("x.json")
    (workdir / "via").symlink_to(workdir)
    other = {"same": "x.json", "dot": "./x.json", "dotdot": "sub/../x.json",
             "symlink": "soft.json", "hardlink": "hard.json", "symlinked folder": "via/x.json",
             "absolute": str(workdir / "x.json")}[spelling]
    result = run("reduce", "in.jsonl", "--policy", "policy.json", "-q", "--jobs", jobs,
                 "-o", "x.json", "--report", other, cwd=workdir)
    one_line_error(result, f"-o x.json and --report {other} are the same file")
    assert (workdir / "x.json").read_text() == "keep me\n" and leftovers(workdir) == []


def test_a_file_to_be_made_named_twice_is_refused(workdir):
    write_corpus(workdir / "in.jsonl", 4)
    result = run("reduce", "in.jsonl", "--policy", "policy.json", "-q", "-o", "new.json",
                 "--report", "./new.json", cwd=workdir)
    one_line_error(result, "-o new.json and --report ./new.json are the same file")
    assert not (workdir / "new.json").exists()


def test_standard_output_and_dev_stdout_are_one_output(workdir):
    write_corpus(workdir / "in.jsonl", 4)
    result = run("reduce", "in.jsonl", "--policy", "policy.json", "-q", "--report",
                 "/dev/stdout", cwd=workdir)
    one_line_error(result, "standard output and --report /dev/stdout are the same file")
    assert result.stdout == b""


@pytest.mark.parametrize(("args", "message"), [
    (["-o", "in.jsonl"], "-o in.jsonl is the input in.jsonl"),
    (["--report", "in.jsonl"], "--report in.jsonl is the input in.jsonl"),
    (["-o", "again.jsonl"], "-o again.jsonl is the input in.jsonl"),
    (["--report", "policy.json"], "--report policy.json is the policy policy.json"),
])
def test_an_output_that_is_a_file_the_run_reads_is_refused(workdir, args, message):
    write_corpus(workdir / "in.jsonl", 4)
    os.link(workdir / "in.jsonl", workdir / "again.jsonl")
    before = (workdir / "in.jsonl").read_bytes(), (workdir / "policy.json").read_bytes()
    result = run("reduce", "in.jsonl", "--policy", "policy.json", "-q", *args, cwd=workdir)
    one_line_error(result, message)
    assert ((workdir / "in.jsonl").read_bytes(), (workdir / "policy.json").read_bytes()) == before


def test_the_null_device_takes_both_outputs(workdir):
    write_corpus(workdir / "in.jsonl", 4)
    null = own_null_device(workdir)
    result = run("reduce", "in.jsonl", "--policy", "policy.json", "-q", "-o", null,
                 "--report", null, cwd=workdir)
    assert result.returncode == 0, result.stderr
    assert stat.S_ISCHR(os.stat(null).st_mode)


# ---------------------------------------------------------------------------------------------
# 6. signals clean up (exit 128 + the signal); a file truncated mid-run is an error, no crash

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
# 7. workers end with a parent killed outright


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
# 8. integers beyond 64 bits pass through exactly (orjson alone reads them as floats)

BIG = [2**64, 2**64 + 1, -(2**63) - 1, -(2**64) - 1, 10**30, -(10**40)]


def big_docs() -> list[dict]:
    return [
        {"id": BIG[1], "messages": SHORT},
        {"id": "nested", "meta": {"trace": [BIG[0], {"span": BIG[2]}]}, "messages": SHORT},
        {"id": BIG[3], "messages": [SHORT[0], {
            "role": "assistant", "content": None, "tool_calls": [{
                "id": "c1", "type": "function",
                "function": {"name": "refund", "arguments": {"cents": BIG[4]}}}]}]},
        {"id": "tool", "messages": [SHORT[0], {"role": "assistant", "content": [
            {"type": "tool_use", "id": "t1", "name": "lookup", "input": {"n": BIG[5]}}]}]},
        {"id": 18446744073709551615, "low": -9223372036854775808, "messages": SHORT},  # fit
    ]


@pytest.mark.parametrize("jobs", JOBS)
@pytest.mark.parametrize("source", ["file", "pipe"])
def test_integers_beyond_64_bits_pass_through_exactly(workdir, jobs, source):
    docs = big_docs()
    write_corpus(workdir / "more.jsonl", 20)  # and ordinary lines around them
    data = (workdir / "more.jsonl").read_bytes() + jsonl(*docs)
    (workdir / "in.jsonl").write_bytes(data)
    args = ["in.jsonl"] if source == "file" else ["-"]
    result = run("reduce", *args, "--policy", "policy.json", "-q", "--jobs", jobs, "--report",
                 "r.json", stdin=data if source == "pipe" else None, cwd=workdir)
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[-len(docs):] == [compact(d) for d in docs]  # byte for byte, digit for digit
    assert [json.loads(line) for line in lines[-len(docs):]] == docs
    report = json.loads((workdir / "r.json").read_text())
    assert [c["id"] for c in report["conversations"][-len(docs):]] == [d["id"] for d in docs]
    ordinary = run("reduce", "more.jsonl", "--policy", "policy.json", "-q", cwd=workdir)
    assert lines[:-len(docs)] == ordinary.stdout.splitlines()


def test_long_digit_strings_and_fractions_read_as_orjson_reads_them(workdir):
    # 19 digits or more that are no integer: read again exactly, to the same values and bytes.
    docs = [{"id": "1234567890123456789012345", "messages": SHORT},
            {"id": "f", "x": 0.12345678901234567890123, "y": 1.5e300, "messages": SHORT},
            {"id": "s", "messages": [{"role": "user", "content": "call 00000000000000000000001"},
                                     SHORT[1]]}]
    raw = b"".join(json.dumps(d).encode() + b"\n" for d in docs)
    result = run("reduce", "-", "--policy", "policy.json", "-q", stdin=raw, cwd=workdir)
    assert result.returncode == 0, result.stderr
    # Nothing is trimmed, and lines read as bytes are copied as they are.
    assert result.stdout.splitlines() == raw.splitlines()
    assert [orjson.loads(line) for line in result.stdout.splitlines()] == [
        orjson.loads(line) for line in raw.splitlines()]


@pytest.mark.parametrize("value", [2**64 + 1, -(2**64) - 1])
def test_a_policy_with_an_integer_beyond_64_bits_is_read_exactly(workdir, value):
    from tests.support.cli import SEED_POLICY

    (workdir / "big.json").write_text(json.dumps({**SEED_POLICY, "triggerChars": value}))
    result = run("validate", "big.json", cwd=workdir)
    assert result.returncode == 1
    assert "triggerChars: expected an integer" in result.stdout.decode()
    assert str(value) in result.stdout.decode() and "e+19" not in result.stdout.decode()
    write_corpus(workdir / "in.jsonl", 2)
    reduced = run("reduce", "in.jsonl", "--policy", "big.json", "-q", cwd=workdir)
    assert reduced.returncode == 1 and str(value).encode() in reduced.stderr
    assert b"Traceback" not in reduced.stderr


# ---------------------------------------------------------------------------------------------
# 9. a long line from a pipe is read in linear time


class Chunks:
    """A pipe's read end: hands over ``chunks`` (made beforehand) one ``read1`` at a time, and
    records how many bytes the reader allocated between two reads."""

    def __init__(self, chunks: list[bytes]) -> None:
        self.chunks = iter(chunks)
        self.allocated: list[int] = []
        self.mark: int | None = None

    def read1(self, n: int = -1) -> bytes:
        current, peak = tracemalloc.get_traced_memory()
        if self.mark is not None:
            self.allocated.append(peak - self.mark)
        chunk = next(self.chunks, b"")
        tracemalloc.reset_peak()
        self.mark = tracemalloc.get_traced_memory()[0]
        return chunk

    read = read1


def read_lines(monkeypatch, chunks: list[bytes]) -> tuple[list[tuple[int, bytes]], list[int]]:
    stream = Chunks(chunks)
    monkeypatch.setattr(sys, "stdin", types.SimpleNamespace(buffer=stream))
    tracemalloc.start()
    try:
        with InputFile("-") as source:
            lines = list(source.lines())
    finally:
        tracemalloc.stop()
    return lines, stream.allocated


def test_a_long_line_from_a_pipe_is_copied_a_bounded_number_of_times(monkeypatch):
    piece = 64 << 10  # what a pipe hands over at a time
    line = b'{"id": "long", "messages": [{"role": "user", "content": "' + b"x" * (8 << 20)
    line += b'"}]}'
    chunks = [line[at:at + piece] for at in range(0, len(line), piece)] + [b"\n{}\n"]
    lines, allocated = read_lines(monkeypatch, chunks)
    assert lines == [(1, line), (2, b"{}")]
    # Every block is kept as it came and the line joined once, at its end: what the reader
    # allocates is a few times the line, where joining the growing line to every block (the
    # quadratic reading) allocates some 64 times it here (and more the longer the line).
    assert sum(allocated) < 3 * len(line), (sum(allocated), len(line))
    assert max(allocated[:-2]) < 4 * piece  # nothing grows with the line until its end


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                  HealthCheck.function_scoped_fixture])
@given(st.lists(st.sampled_from([b"ab", b"\n", b" ", b"{}", b"x" * 50, b"\n\n", b"\t"]),
                max_size=60),
       st.lists(st.integers(1, 40), min_size=1, max_size=10))
def test_the_lines_of_a_stream_whatever_its_pieces(monkeypatch, parts, sizes):
    data = b"".join(parts)
    chunks, at, k = [], 0, 0
    while at < len(data):
        chunks.append(data[at:at + sizes[k % len(sizes)]])
        at += sizes[k % len(sizes)]
        k += 1
    lines, _ = read_lines(monkeypatch, chunks)
    expected = [(n, line) for n, line in enumerate(data.split(b"\n"), 1)
                if line and not line.isspace()]
    assert lines == expected


@pytest.mark.parametrize("jobs", JOBS)
def test_a_long_line_through_a_pipe(workdir, jobs):
    doc = {"id": "long", "messages": [{"role": "user", "content": "y" * (16 << 20)}]}
    data = jsonl({"id": "short", "messages": SHORT}, doc)
    result = run("reduce", "-", "--policy", "policy.json", "-q", "--jobs", jobs, stdin=data,
                 cwd=workdir)
    assert result.returncode == 0, result.stderr
    assert result.stdout == data


# ---------------------------------------------------------------------------------------------
# 10. --jobs: no more workers than CPUs, nor than work

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


# ---------------------------------------------------------------------------------------------
# 11. bench: bad arguments and bad input files are one-line errors


@pytest.mark.parametrize(("value", "message"), [
    ("abc", "--sizes: expected whole numbers of messages separated by commas"),
    ("0", "--sizes: expected histories of at least 2 messages"),
    ("1", "--sizes: expected histories of at least 2 messages"),
    ("-5", "--sizes: expected histories of at least 2 messages"),
    ("1000,x", "got 'x'"),
    ("1e3", "got '1e3'"),
    (",", "--sizes: expected at least one size"),
])
def test_bench_bad_sizes_are_one_line_errors(value, message):
    one_line_error(run("bench", f"--sizes={value}", "--repeat", "1", "--no-langchain"), message)


@pytest.mark.parametrize(("content", "message"), [
    (None, "missing.jsonl: cannot open (No such file or directory)"),
    (b"\xff\xfe{}\n", "in.jsonl:1:1: the input is UTF-16 (it starts with a UTF-16 byte order "
                     "mark), not UTF-8: re-encode it, e.g. with iconv -f utf-16 -t utf-8"),
    (b'{"id": "a", "messages": [\n', "in.jsonl:1:26: invalid JSON: unexpected end of data"),
    (b"\n[1, 2]\n", 'in.jsonl:2: expected a transcript {"id", "messages"}, got an array'),
    (b'"text"\n', "got a string"),
    (b'{"id": 1}\n', "in.jsonl:1: expected a transcript {\"id\", \"messages\"}, got an object "
                     "with keys: id"),
    (b'{"id": 1, "messages": [{"content": "no role"}]}\n', "in.jsonl:1: invalid context plan"),
    (b'{"id": 1, "messages": [{"role": "user", "content": "only a question"}]}\n',
     "in.jsonl: no transcript with a history to time"),
    (b"", "in.jsonl: no transcript with a history to time"),
])
def test_bench_bad_input_files_are_one_line_errors(workdir, content, message):
    if content is not None:
        (workdir / "in.jsonl").write_bytes(content)
    name = "in.jsonl" if content is not None else "missing.jsonl"
    one_line_error(run("bench", "--input", name, "--repeat", "1", "--no-langchain",
                       cwd=workdir), message)


def test_the_files_module_loads_neither_numpy_nor_the_kernel():
    code = ("import sys, contextpolicy.jsonl.files; "
            "sys.exit(any(m.split('.')[0] == 'numpy' or '_kernel' in m for m in sys.modules))")
    assert subprocess.run([sys.executable, "-c", code]).returncode == 0
    assert jsonl_files.__name__ == "contextpolicy.jsonl.files"
