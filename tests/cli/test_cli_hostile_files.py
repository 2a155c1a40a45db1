"""The command line on hostile files and streams: inputs that are not regular files (a FIFO, a
process substitution, /dev/stdin), outputs that are not regular files (a device, a FIFO,
/dev/stdout, a symbolic link), what cannot be written or read (a folder, a full disk, a closed
stream, a file size limit, bad gzip), one file named twice or an output the run reads, and bench
arguments and input files that are wrong. A run either writes exactly what it should or says, in
one line naming the file, what went wrong (exit 2), and leaves no file behind."""

from __future__ import annotations

import gzip
import json
import os
import signal
import stat
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from tests.support.cli import (
    JOBS,
    SCRIPT,
    expected_output,
    leftovers,
    one_line_error,
    run,
    write_corpus,
)

pytestmark = pytest.mark.skipif(sys.platform == "win32", reason="POSIX streams and signals")
linux = pytest.mark.skipif(sys.platform != "linux", reason="/dev/full, /proc and Linux's device "
                           "numbers")


# ---------------------------------------------------------------------------------------------
# 1. streams that are not regular files: a FIFO, a process substitution, /dev/stdin


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
# 2. outputs that are not regular files are written through; a symbolic link is kept


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
# 3. what cannot be written or read: one line naming the path, exit 2, nothing left behind


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
# 4. one file named twice, or a file the run reads named as an output: refused


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
# 5. bench: bad arguments and bad input files are one-line errors


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
