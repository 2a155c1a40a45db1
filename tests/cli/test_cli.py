"""End to end: the installed ``contextpolicy`` console script, run as a subprocess."""

from __future__ import annotations

import gzip
import json
import multiprocessing
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import jsonschema
import pytest

from contextpolicy import check_input_budget
from contextpolicy.synthetic import make_transcript
from tests.support.cli import (
    EXAMPLES,
    SCRIPT,
    SEED_POLICY,
    leftovers,
    run,
    running,
    workers_of,
    write_corpus,
)

# The corpus and policies shipped inside the installed package (never the source tree's copy).
# ---------------------------------------------------------------------------------------------
# help and the example run


@pytest.mark.parametrize("command", ["validate", "reduce", "audit", "schema", "bench",
                                     "examples"])
def test_every_subcommand_has_help_with_an_example(command):
    result = run(command, "--help")
    assert result.returncode == 0
    assert b"example" in result.stdout


def test_python_dash_m_runs_the_same_cli():
    result = subprocess.run([sys.executable, "-m", "contextpolicy", "--version"],
                            capture_output=True, text=True)
    assert result.returncode == 0 and result.stdout.startswith("contextpolicy ")


def test_no_arguments_runs_the_shipped_example(tmp_path):
    result = run("reduce", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    err = result.stderr.decode()
    assert "running the example corpus shipped in the package" in err
    assert "conversations" in err and "30" in err
    assert result.stdout == b""  # nothing asked to be kept
    assert list(tmp_path.iterdir()) == []


# ---------------------------------------------------------------------------------------------
# reduce


def test_reduce_file_to_file_with_report(workdir):
    docs = write_corpus(workdir / "in.jsonl", 12)
    result = run("reduce", "in.jsonl", "--policy", "policy.json", "-o", "out.jsonl",
                 "--report", "report.json", cwd=workdir)
    assert result.returncode == 0, result.stderr
    out = [json.loads(line) for line in (workdir / "out.jsonl").read_text().splitlines()]
    assert [o["id"] for o in out] == [d["id"] for d in docs]
    assert all(o["tenant"] == "acme" for o in out)  # other keys kept: same shape
    report = json.loads((workdir / "report.json").read_text())
    conversations, summary = report["conversations"], report["summary"]
    assert [c["line"] for c in conversations] == list(range(1, 13))
    for o, d, c in zip(out, docs, conversations):
        assert o["messages"][0] == d["messages"][0] and o["messages"][-1] == d["messages"][-1]
        assert c["report"]["after"]["chars"] == check_input_budget(o["messages"]).chars
        assert c["report"]["before"]["chars"] == check_input_budget(d["messages"]).chars
    assert summary["conversations"] == 12 and summary["skipped"] == 0
    assert summary["charsBefore"] == sum(c["report"]["before"]["chars"] for c in conversations)
    assert summary["charsAfter"] == sum(c["report"]["after"]["chars"] for c in conversations)
    assert summary["messagesRemoved"] == sum(
        d_len - o_len for d_len, o_len in
        ((len(d["messages"]), len(o["messages"])) for d, o in zip(docs, out))
    )
    assert summary["bytesIn"] == (workdir / "in.jsonl").stat().st_size
    assert leftovers(workdir) == []
    err = result.stderr.decode()
    assert "throughput" in err and "MB/s" in err


def test_jobs_2_writes_exactly_what_jobs_1_writes(workdir):
    write_corpus(workdir / "in.jsonl", 150, seed=3, size=(4, 60))
    one = run("reduce", "in.jsonl", "--policy", "policy.json", "-o", "one.jsonl",
              "--report", "one.json", "--jobs", "1", cwd=workdir)
    two = run("reduce", "in.jsonl", "--policy", "policy.json", "-o", "two.jsonl",
              "--report", "two.json", "--jobs", "2", cwd=workdir)
    assert one.returncode == two.returncode == 0
    assert (workdir / "one.jsonl").read_bytes() == (workdir / "two.jsonl").read_bytes()
    r1 = json.loads((workdir / "one.json").read_text())
    r2 = json.loads((workdir / "two.json").read_text())
    assert r1["conversations"] == r2["conversations"]


START_METHODS = [m for m in ("fork", "spawn", "forkserver")
                 if m in multiprocessing.get_all_start_methods()]


@pytest.mark.parametrize("method", START_METHODS)
def test_jobs_2_writes_what_jobs_1_writes_however_workers_start(workdir, method):
    # CONTEXTPOLICY_START_METHOD: the workers of a file (its ranges) and of a pipe (a pool).
    write_corpus(workdir / "in.jsonl", 40, seed=4, size=(4, 40))
    data = (workdir / "in.jsonl").read_bytes()
    expected = run("reduce", "in.jsonl", "--policy", "policy.json", "-q", cwd=workdir).stdout
    env = {"CONTEXTPOLICY_START_METHOD": method}
    filed = run("reduce", "in.jsonl", "--policy", "policy.json", "-q", "--jobs", "2",
                cwd=workdir, env=env)
    piped = run("reduce", "-", "--policy", "policy.json", "-q", "--jobs", "2", stdin=data,
                cwd=workdir, env=env)
    assert filed.returncode == piped.returncode == 0, filed.stderr + piped.stderr
    assert filed.stdout == piped.stdout == expected and expected.count(b"\n") == 40


@pytest.mark.parametrize("jobs", ["1", "2"])
def test_an_unknown_start_method_is_a_one_line_error(workdir, jobs):
    write_corpus(workdir / "in.jsonl", 3)
    result = run("reduce", "in.jsonl", "--policy", "policy.json", "-o", "out.jsonl",
                 "--jobs", jobs, cwd=workdir, env={"CONTEXTPOLICY_START_METHOD": "vfork"})
    assert result.stderr.decode().splitlines() == [
        "contextpolicy reduce: error: CONTEXTPOLICY_START_METHOD='vfork' is not a start "
        "method: expected one of fork, spawn, forkserver (or unset for the default)"
    ]
    assert result.returncode == 2
    assert not (workdir / "out.jsonl").exists() and leftovers(workdir) == []


def test_stdin_to_stdout(workdir):
    write_corpus(workdir / "in.jsonl", 5)
    data = (workdir / "in.jsonl").read_bytes()
    piped = run("reduce", "-", "--policy", "policy.json", "-q", stdin=data, cwd=workdir)
    assert piped.returncode == 0 and piped.stderr == b""
    filed = run("reduce", "in.jsonl", "--policy", "policy.json", "-o", "out.jsonl", cwd=workdir)
    assert filed.returncode == 0
    assert piped.stdout == (workdir / "out.jsonl").read_bytes()
    implicit = run("reduce", "--policy", "policy.json", "-q", stdin=data, cwd=workdir)
    assert implicit.stdout == piped.stdout


def test_gzip_input(workdir):
    write_corpus(workdir / "in.jsonl", 6)
    with gzip.open(workdir / "in.jsonl.gz", "wb") as fh:
        fh.write((workdir / "in.jsonl").read_bytes())
    plain = run("reduce", "in.jsonl", "--policy", "policy.json", "-q", cwd=workdir)
    packed = run("reduce", "in.jsonl.gz", "--policy", "policy.json", "-q", cwd=workdir)
    assert packed.returncode == 0 and packed.stdout == plain.stdout and plain.stdout


def test_plan_lines_keep_the_plan_shape(workdir):
    plan = json.loads((EXAMPLES / "plan.json").read_text())
    (workdir / "plans.jsonl").write_text(json.dumps({"id": "p1", **plan}) + "\n")
    result = run("reduce", "plans.jsonl", "--policy", "policy.json", "-q", cwd=workdir)
    assert result.returncode == 0, result.stderr
    out = json.loads(result.stdout)
    assert out["id"] == "p1"
    assert [f["id"] for f in out["fragments"]] == [f["id"] for f in plan["fragments"]]
    history = next(f for f in out["fragments"] if f["id"] == "history")
    original = next(f for f in plan["fragments"] if f["id"] == "history")
    assert history["messages"] == original["messages"][-len(history["messages"]):]
    assert len(history["messages"]) < len(original["messages"])


# ---------------------------------------------------------------------------------------------
# error paths


def corrupt(workdir: Path, bad_line: int, text: str, n: int = 6) -> None:
    write_corpus(workdir / "in.jsonl", n)
    lines = (workdir / "in.jsonl").read_text().splitlines()
    lines[bad_line - 1] = text
    (workdir / "in.jsonl").write_text("\n".join(lines) + "\n")


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ('{"id": "x", "messages": [', "in.jsonl:3:26: invalid JSON: unexpected end of data"),
        ("[1, 2, 3]", "in.jsonl:3: expected a JSON object"),
        ('{"id": "x", "turns": []}', "in.jsonl:3: expected a transcript {\"id\", \"messages\"} or a plan"),
        ('{"id": "x", "messages": [{"content": "no role"}]}', "in.jsonl:3: invalid context plan: messages[0]"),
        ('{"fragments": [{"id": "h", "kind": "chat", "text": "x"}]}', "in.jsonl:3: invalid context plan: fragments[h].kind"),
    ],
)
def test_a_bad_line_stops_the_run_and_leaves_no_file(workdir, text, message):
    corrupt(workdir, 3, text)
    result = run("reduce", "in.jsonl", "--policy", "policy.json", "-o", "out.jsonl",
                 "--report", "report.json", cwd=workdir)
    assert result.returncode == 2
    assert message in result.stderr.decode()
    assert not (workdir / "out.jsonl").exists() and not (workdir / "report.json").exists()
    assert leftovers(workdir) == []


def test_on_error_skip_counts_and_reports(workdir):
    corrupt(workdir, 2, "not json at all")
    lines = (workdir / "in.jsonl").read_text().splitlines()
    lines[4] = '{"id": 5}'
    (workdir / "in.jsonl").write_text("\n".join(lines) + "\n")
    result = run("reduce", "in.jsonl", "--policy", "policy.json", "-o", "out.jsonl",
                 "--report", "report.json", "--on-error", "skip", cwd=workdir)
    assert result.returncode == 0, result.stderr
    err = result.stderr.decode()
    assert "skipped in.jsonl:2:1: invalid JSON" in err and "skipped in.jsonl:5:" in err
    summary = json.loads((workdir / "report.json").read_text())["summary"]
    assert summary["skipped"] == 2 and summary["conversations"] == 4
    assert [s["line"] for s in summary["skippedLines"]] == [2, 5]
    assert len((workdir / "out.jsonl").read_text().splitlines()) == 4


def test_invalid_policy_names_the_file_and_path(workdir):
    (workdir / "bad.json").write_text(json.dumps({**SEED_POLICY, "triggerChars": "1800"}))
    write_corpus(workdir / "in.jsonl", 2)
    result = run("reduce", "in.jsonl", "--policy", "bad.json", "-o", "out.jsonl", cwd=workdir)
    assert result.returncode == 1  # a policy that does not validate, as in validate
    err = result.stderr.decode()
    assert "bad.json: invalid policy" in err and "triggerChars: expected an integer" in err
    assert not (workdir / "out.jsonl").exists()


def test_missing_input_and_policy_files(workdir):
    result = run("reduce", "nope.jsonl", "--policy", "policy.json", cwd=workdir)
    assert result.returncode == 2 and b"nope.jsonl: cannot open" in result.stderr
    result = run("reduce", "nope.jsonl", cwd=workdir)
    assert result.returncode == 2 and b"--policy POLICY.json is required" in result.stderr
    result = run("validate", "missing.json", cwd=workdir)
    assert result.returncode == 2 and b"missing.json: cannot read the policy" in result.stderr


def test_bad_jobs_value(workdir):
    result = run("reduce", "--policy", "policy.json", "--jobs", "0", stdin=b"", cwd=workdir)
    assert result.returncode == 2 and b"--jobs" in result.stderr


def interruptible(workdir: Path, *args: str, policy: tuple[str, ...] = ("--policy", "policy.json"),
                  ) -> subprocess.Popen:
    """``contextpolicy reduce ARGS`` with every stream a pipe, ready for a Ctrl-C."""
    return subprocess.Popen(
        [str(SCRIPT), "reduce", *args, *policy], cwd=workdir,
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        # A test runner started in the background inherits an ignored SIGINT; a person at a
        # terminal has it: give the child the terminal's default.
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )


# Ctrl-C is SIGINT, sent to the one process, on Linux and macOS.
ctrl_c = pytest.mark.skipif(
    sys.platform == "win32",
    reason="Windows has no SIGINT to send to one process: Ctrl-C is a console event delivered "
    "to every process attached to the console, the test runner included",
)


@ctrl_c
@pytest.mark.parametrize("jobs", ["1", "2"])
def test_ctrl_c_leaves_no_half_file(workdir, jobs):
    # Input arrives through a pipe that stays open, so the run is certainly still going (and
    # has written output to its temporary file) when the interrupt comes.
    write_corpus(workdir / "in.jsonl", 6)
    proc = interruptible(workdir, "-", "-o", "out.jsonl", "--jobs", jobs)
    proc.stdin.write((workdir / "in.jsonl").read_bytes())
    proc.stdin.flush()
    deadline = time.monotonic() + 30
    while not leftovers(workdir) and time.monotonic() < deadline:
        time.sleep(0.01)
    time.sleep(0.5)
    assert proc.poll() is None and leftovers(workdir), "the run is not waiting for input"
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, err
    assert b"interrupted; no output file was written" in err
    assert not (workdir / "out.jsonl").exists() and leftovers(workdir) == []


@ctrl_c
@pytest.mark.parametrize("jobs", ["1", "2"])
@pytest.mark.parametrize("path", ["objects", "bytes"])
def test_ctrl_c_on_a_file_stops_the_workers_and_leaves_no_report(workdir, jobs, path):
    # Nobody reads the output, so the run is certainly still going (blocked writing it, its
    # workers waiting to hand over more) when the interrupt comes. Lines read as bytes are
    # shared between threads of the run's own; lines of the object path (a compress step)
    # between worker processes.
    from tests.support.cli import with_workers

    write_corpus(workdir / "in.jsonl", 20, repeat=15)
    policy = tuple(with_workers(workdir)) if path == "objects" else ("--policy", "policy.json")
    proc = interruptible(workdir, "in.jsonl", "--report", "r.json", "--jobs", jobs,
                         policy=policy)
    assert proc.stdout.read(1) == b"{"  # reducing has begun
    time.sleep(0.5)
    assert proc.poll() is None, "the run ended before the interrupt"
    workers = workers_of(proc.pid)
    assert len(workers) == (int(jobs) - 1 if path == "objects" else 0)
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, err
    assert b"interrupted; no output file was written" in err and b"Traceback" not in err
    assert not (workdir / "r.json").exists() and leftovers(workdir) == []
    assert not any(running(worker) for worker in workers)


def read_terminal(args: list[str], cwd: Path) -> tuple[int, str]:
    """Run with standard error on a pseudo-terminal; its exit status and what it showed there.

    The follower end stays open here until the run has ended and what it wrote is read: macOS
    throws away what is unread when the last follower closes; Linux keeps it for the reader, but
    may hand it over a moment after the write, so it is read to the end once the follower is
    closed."""
    import pty
    import select

    leader, follower = pty.openpty()
    shown = b""
    try:
        proc = subprocess.Popen(args, cwd=cwd, stdin=subprocess.DEVNULL,
                                stdout=subprocess.DEVNULL, stderr=follower,
                                env={**os.environ, "TERM": "xterm", "COLUMNS": "100"})
        ended = False
        while True:
            if select.select([leader], [], [], 0 if ended else 0.05)[0]:
                shown += os.read(leader, 65536)
            elif ended:
                break
            else:
                ended = proc.poll() is not None
        os.close(follower)
        follower = -1
        while True:
            try:
                chunk = os.read(leader, 65536)
            except OSError:  # the terminal is closed (Linux) and everything was read
                break
            if not chunk:  # the same, elsewhere
                break
            shown += chunk
    finally:
        if follower != -1:
            os.close(follower)
        os.close(leader)
    return proc.wait(timeout=60), shown.decode("utf-8", "replace")


@pytest.mark.skipif(sys.platform == "win32", reason="a pseudo-terminal is POSIX-only")
@pytest.mark.parametrize("jobs", ["1", "2"])
def test_a_progress_bar_on_a_terminal_and_none_on_a_pipe(workdir, jobs):
    write_corpus(workdir / "in.jsonl", 10, repeat=6)
    args = [str(SCRIPT), "reduce", "in.jsonl", "--policy", "policy.json", "-o", "out.jsonl",
            "--jobs", jobs]
    status, shown = read_terminal(args, workdir)
    assert status == 0, shown
    assert "reducing" in shown and "━" in shown  # the bar, drawn and then cleared
    assert "conversations" in shown and "wrote out.jsonl" in shown
    piped = run(*args[1:], cwd=workdir)
    assert piped.returncode == 0
    assert b"reducing" not in piped.stderr and "━".encode() not in piped.stderr
    assert b"conversations" in piped.stderr  # the summary table only


def test_audit_violation_exit_status_in_reduce(workdir):
    plan = json.loads((EXAMPLES / "audit-plan.json").read_text())
    (workdir / "plans.jsonl").write_text(json.dumps(plan) + "\n")
    (workdir / "audit.json").write_text((EXAMPLES / "policy-audit.json").read_text())
    result = run("reduce", "plans.jsonl", "--policy", "audit.json", "-q", cwd=workdir)
    assert result.returncode == 1


# ---------------------------------------------------------------------------------------------
# validate, audit, schema, bench


def test_validate_ok_and_invalid(workdir):
    ok = run("validate", "policy.json", cwd=workdir)
    assert ok.returncode == 0
    assert ok.stdout.decode().strip() == "ok: policy.json is a valid reduce policy (1 step)"
    (workdir / "bad.json").write_text(json.dumps(
        {"mode": "reduce", "triggerChar": 5, "steps": [{"id": "t", "kind": "trim"}]}))
    bad = run("validate", "bad.json", cwd=workdir)
    assert bad.returncode == 1
    text = bad.stdout.decode()
    assert "bad.json: invalid" in text
    for path in ("triggerChar", "steps[0].fragmentId", "steps[0].keepGroups",
                 "steps[0].targetChars"):
        assert f"  {path}: " in text


def test_validate_against_a_plan_and_handlers(workdir):
    (workdir / "compress.json").write_text(json.dumps({
        "mode": "reduce", "triggerChars": 100, "steps": [
            {"id": "c", "kind": "compress", "fragmentId": "system", "handlerId": "sum",
             "targetChars": 10}]}))
    result = run("validate", "compress.json", "--plan", EXAMPLES / "plan.json",
                 "--handler", "other", cwd=workdir)
    assert result.returncode == 1
    text = result.stdout.decode()
    assert "steps[0].fragmentId: fragment 'system' is a protected 'system' fragment" in text
    assert "steps[0].handlerId: no handler 'sum' is registered (registered: other)" in text
    good = run("validate", "policy.json", "--plan", EXAMPLES / "plan.json", cwd=workdir)
    assert good.returncode == 0 and b"references checked against" in good.stdout


def test_audit_command(workdir):
    result = run("audit", EXAMPLES / "audit-plan.json", "--policy",
                 EXAMPLES / "policy-audit.json", cwd=workdir)
    assert result.returncode == 1
    text = result.stdout.decode()
    rows = [line.split() for line in text.splitlines() if line.startswith("│")]
    assert ["│", "evidence", "│", "modified", "│", "content", "│", "81", "│", "80", "│", "NO",
            "│", "protected", "│"] in rows
    assert any(r[1] == "history" and r[-4] == "yes" and r[-2] == "mutable" for r in rows)
    assert "failed: 1 disallowed change(s)" in text
    as_json = run("audit", EXAMPLES / "audit-plan.json", "--policy",
                  EXAMPLES / "policy-audit.json", "--json", cwd=workdir)
    report = json.loads(as_json.stdout)
    assert as_json.returncode == 1 and report["audit"]["violations"] == 1
    plan = json.loads((EXAMPLES / "audit-plan.json").read_text())
    plan["fragments"][2] = plan["original"][2]  # undo the evidence edit
    (workdir / "fixed.json").write_text(json.dumps(plan))
    fixed = run("audit", "fixed.json", "--policy", EXAMPLES / "policy-audit.json", cwd=workdir)
    assert fixed.returncode == 0 and b"passed" in fixed.stdout
    wrong = run("audit", "fixed.json", "--policy", "policy.json", cwd=workdir)
    assert wrong.returncode == 2 and b"expected an audit policy" in wrong.stderr


def test_schema_validates_real_documents():
    policy_schema = json.loads(run("schema", "policy").stdout)
    jsonschema.validate(SEED_POLICY, policy_schema)
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate({**SEED_POLICY, "triggerChar": 5}, policy_schema)
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate({**SEED_POLICY, "triggerChars": "5"}, policy_schema)
    plan_schema = json.loads(run("schema", "plan").stdout)
    jsonschema.validate(json.loads((EXAMPLES / "plan.json").read_text()), plan_schema)
    report_schema = json.loads(run("schema", "report").stdout)
    report = json.loads(run("audit", EXAMPLES / "audit-plan.json", "--policy",
                            EXAMPLES / "policy-audit.json", "--json").stdout)
    jsonschema.validate(report, report_schema)
    assert run("schema", "nonsense").returncode == 2


def test_bench_json_and_plot(tmp_path, request):
    result = run("bench", "--sizes", "300,2000", "--repeat", "1", "--json", "--plot",
                 tmp_path / "bench.png", "--corpora", "none", timeout=300)
    assert result.returncode == 0, result.stderr
    rows = json.loads(result.stdout)
    impls = {r["implementation"] for r in rows}
    expected = {"kernel (python)", "langchain trim_messages"}
    if not request.config.getoption("--no-c-extensions"):
        expected.add("kernel (cython)")  # the compiled kernel must be there to be measured
    assert expected <= impls
    assert {r["messages"] for r in rows} == {300, 2000}
    assert all(r["nsPerMessage"] > 0 for r in rows)
    assert (tmp_path / "bench.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_bench_refuses_a_plot_it_cannot_write_before_timing_anything(tmp_path):
    for plot, says in ((tmp_path / "bench.unknown", "expected a file name ending in an image"),
                       (tmp_path, "expected a file name ending in an image"),
                       (tmp_path / "missing" / "bench.png", "cannot write: the folder")):
        result = run("bench", "--sizes", "300", "--repeat", "1", "--plot", plot, timeout=60)
        assert result.returncode == 2 and result.stdout == b""
        assert says.encode() in result.stderr and b"Traceback" not in result.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == []  # nothing written, nothing left


def test_bench_times_the_corpora(request):
    result = run("bench", "--sizes", "300", "--repeat", "1", "--json", "--no-langchain",
                 "--corpora", "chats,agent-traces", "--conversations", "40", timeout=300)
    assert result.returncode == 0, result.stderr
    rows = json.loads(result.stdout)
    cases = {r["history"] for r in rows}
    assert "300" in cases and {c.split(" (")[0] for c in cases} == {"300", "chats",
                                                                  "agent-traces"}
    chats = [r for r in rows if r["history"].startswith("chats")]
    # Many short conversations: a few messages each, every one measured.
    count = int(chats[0]["history"].split("(")[1].rstrip(")"))
    assert 20 <= count <= 40 and chats[0]["messages"] < 20 * count
    bad = run("bench", "--corpora", "chats,tweets", timeout=60)
    assert bad.returncode == 2 and b"--corpora: expected names from chats" in bad.stderr


def test_bench_on_an_input_file(workdir):
    write_corpus(workdir / "in.jsonl", 4)
    result = run("bench", "--input", "in.jsonl", "--repeat", "1", "--no-langchain", cwd=workdir)
    assert result.returncode == 0, result.stderr
    assert b"kernel (python)" in result.stdout and b"langchain" not in result.stdout


# The peak resident memory of a run's process and of its largest worker (none with --jobs 1),
# in bytes, each as the platform keeps it:
# - Linux: VmHWM (ru_maxrss would count what the forked test runner held before exec), and
#   ru_maxrss (KiB) over the workers;
# - macOS: ru_maxrss (bytes) of the process, which ``run_probe`` starts with posix_spawn so that
#   it never was a copy of the test runner, and over the workers;
# - Windows: psutil's peak_wset (the peak working set) of the process, and of the workers as
#   sampled while they run: a process's peak so far, so the last sample before a worker exits
#   (10 ms or less before it does) stands for the worker.
PEAK_PROBE = """\
import os
import sys

os.chdir(sys.argv[1])
if sys.platform == "win32":
    import threading

    import psutil

    me = psutil.Process()
    workers_peak = 0
    stop = threading.Event()

    def sample():
        global workers_peak
        while not stop.wait(0.01):
            for child in me.children(recursive=True):  # a venv's launcher starts python
                try:
                    workers_peak = max(workers_peak, child.memory_info().peak_wset)
                except psutil.Error:  # it has just ended
                    pass

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
from contextpolicy.cli import main

rc = main(["reduce", sys.argv[2], "--policy", "policy.json", "-o", "out.jsonl", "-q",
           "--jobs", sys.argv[3]])
if sys.platform == "win32":
    stop.set()
    sampler.join()
    print(me.memory_info().peak_wset, workers_peak)
else:
    import resource

    unit = 1 if sys.platform == "darwin" else 1024
    if sys.platform == "linux":
        status = open("/proc/self/status").read().split("VmHWM:")[1]
        peak = int(status.split()[0]) * 1024
    else:
        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * unit
    print(peak, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss * unit)
sys.exit(rc)
"""


def run_probe(*args: str) -> tuple[int, str, str]:
    """PEAK_PROBE run with ARGS: its exit status, standard output and standard error."""
    command = [sys.executable, "-c", PEAK_PROBE, *args]
    if sys.platform != "darwin":
        result = subprocess.run(command, capture_output=True, text=True)
        return result.returncode, result.stdout, result.stderr
    # posix_spawn on macOS makes a new process, where fork would copy this one first.
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        pid = os.posix_spawn(sys.executable, command, os.environ, file_actions=[
            (os.POSIX_SPAWN_DUP2, out.fileno(), 1), (os.POSIX_SPAWN_DUP2, err.fileno(), 2),
        ])
        status = os.waitpid(pid, 0)[1]
        out.seek(0)
        err.seek(0)
        return os.waitstatus_to_exitcode(status), out.read().decode(), err.read().decode()


@pytest.mark.parametrize("jobs", ["1", "2"])
def test_memory_stays_flat_in_the_number_of_lines(workdir, jobs):
    write_corpus(workdir / "lines.jsonl", 40, seed=1, size=(50, 150))
    lines = (workdir / "lines.jsonl").read_bytes()
    # Both far past the ranges a run holds at a time (42 and 125 MB).
    (workdir / "small.jsonl").write_bytes(lines * 16)
    (workdir / "big.jsonl").write_bytes(lines * 48)
    rss = {}
    for name in ("small.jsonl", "big.jsonl"):
        returncode, stdout, stderr = run_probe(str(workdir), name, jobs)
        assert returncode == 0, stderr
        rss[name] = [int(n) for n in stdout.split()]
    measured = ("process", "worker")[:int(jobs)]  # --jobs 1 has no worker
    for this_one, big, small in zip(measured, rss["big.jsonl"], rss["small.jsonl"]):
        # 1,280 more lines cost less memory than the 40 they repeat take on disk: what a run
        # holds is bounded by its ranges and its longest lines, not by the length of its input.
        assert big - small < len(lines), (this_one, rss, len(lines))


def test_short_transcripts_skip_the_steps_on_their_absent_history(workdir):
    # As process_context: no history is invented; a triggered step on it is skipped.
    lines = [{"id": "empty", "messages": []},
             {"id": "question-only", "messages": [{"role": "user", "content": "hi"}]},
             {"id": "system-only", "messages": [{"role": "system", "content": "rules"}]}]
    (workdir / "policy.json").write_text(json.dumps(
        {**SEED_POLICY, "triggerChars": 1, "targetInputChars": 1}))
    data = "".join(json.dumps(line) + "\n" for line in lines).encode()
    result = run("reduce", "-", "--policy", "policy.json", "--report", "report.json", "-q",
                 stdin=data, cwd=workdir)
    assert result.returncode == 0, result.stderr
    assert [json.loads(x) for x in result.stdout.splitlines()] == lines
    report = json.loads((workdir / "report.json").read_text())
    conversations = report["conversations"]
    assert [[f["id"] for f in c["report"]["fragments"]] for c in conversations] == [
        [], ["question"], ["system"]]
    assert [[(s["status"], s["reason"]) for s in c["report"]["steps"]]
            for c in conversations] == [[("skipped", "not-triggered")],
                                        [("skipped", "fragment-absent")],
                                        [("skipped", "fragment-absent")]]


def test_a_pipe_streams_line_by_line(workdir):
    # The first conversation comes out before the second goes in.
    import threading

    proc = subprocess.Popen([str(SCRIPT), "reduce", "-", "--policy", "policy.json", "-q"],
                            cwd=workdir, stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    first: list[bytes] = []
    reader = threading.Thread(target=lambda: first.append(proc.stdout.readline()))
    reader.start()
    proc.stdin.write(b'{"id": "a", "messages": [{"role": "user", "content": "hi"}]}\n')
    proc.stdin.flush()
    reader.join(timeout=30)
    assert first and json.loads(first[0])["id"] == "a"
    proc.stdin.write(b'{"id": "b", "messages": []}\n')
    proc.stdin.close()
    assert json.loads(proc.stdout.read())["id"] == "b"
    assert proc.wait(timeout=30) == 0


@pytest.mark.parametrize("jobs", [1, 2])
def test_collector_settings_are_restored_after_a_run_and_after_an_abandoned_one(jobs):
    import gc

    from contextpolicy.jsonl.runner import GC_GEN0_THRESHOLD, process_lines

    lines = [(i + 1, json.dumps({"id": f"t{i}", "messages": make_transcript(40, seed=i)}).encode())
             for i in range(6)]
    before, frozen = gc.get_threshold(), gc.get_freeze_count()
    assert before[0] != GC_GEN0_THRESHOLD
    results = process_lines([lines[:3], lines[3:]], SEED_POLICY, jobs=jobs)
    first = next(results)
    assert first.line == 1 and first.error is None
    assert gc.get_threshold()[0] == GC_GEN0_THRESHOLD  # tuned while the run streams
    results.close()  # a consumer that stops early (an error, Ctrl-C)
    assert gc.get_threshold() == before and gc.get_freeze_count() == frozen
    assert [r.line for r in process_lines([lines], SEED_POLICY, jobs=jobs)] == [1, 2, 3, 4, 5, 6]
    assert gc.get_threshold() == before and gc.get_freeze_count() == frozen


def test_a_compress_policy_names_its_missing_handler_per_line(workdir):
    # reduce registers no handlers: each line says so, as a one-line error, never a traceback.
    (workdir / "compress.json").write_text(json.dumps({
        "mode": "reduce", "triggerChars": 10, "steps": [
            {"id": "c", "kind": "compress", "fragmentId": "history", "handlerId": "x",
             "targetChars": 5}]}))
    write_corpus(workdir / "in.jsonl", 2)
    result = run("reduce", "in.jsonl", "--policy", "compress.json", "-o", "out.jsonl",
                 cwd=workdir)
    assert result.returncode != 0 and b"Traceback" not in result.stderr
    assert (b"in.jsonl:1: invalid context policy: steps[0].handlerId: no handler 'x' is "
            b"registered (registered: none) [unknown-handler]") in result.stderr
    skipped = run("reduce", "in.jsonl", "--policy", "compress.json", "-o", "out.jsonl",
                  "--on-error", "skip", cwd=workdir)
    assert skipped.returncode == 0, skipped.stderr
    assert skipped.stderr.count(b"[unknown-handler]") == 2


# ---------------------------------------------------------------------------------------------
# Built-in compress handlers: --handler, --handlers, and validate knowing their ids


CLEAR_POLICY = {"mode": "reduce", "triggerChars": 5000, "steps": [
    {"id": "old-outputs", "kind": "compress", "fragmentId": "history",
     "handlerId": "clear-tool-results", "targetChars": 2000},
    {"id": "short", "kind": "compress", "fragmentId": "history", "handlerId": "short-texts",
     "targetChars": 2000},
    {"id": "recent", "kind": "trim", "fragmentId": "history", "keepGroups": 3,
     "targetChars": 2000}]}


def write_traces(path: Path, n: int = 12) -> list[dict]:
    from contextpolicy.synthetic import agent_trace_corpus

    docs = [{"id": f"t{i}", "messages": m} for i, m in enumerate(agent_trace_corpus(n, seed=5))]
    path.write_text("".join(json.dumps(d, ensure_ascii=False) + "\n" for d in docs), "utf-8")
    return docs


@pytest.mark.parametrize("method", ["fork", "spawn"])
def test_reduce_runs_built_in_handlers_from_a_handlers_file(workdir, method):
    from contextpolicy import ContextPlan, process_context
    from contextpolicy.handlers import clear_tool_results, registry, truncate_messages

    docs = write_traces(workdir / "in.jsonl")
    (workdir / "p.json").write_text(json.dumps(CLEAR_POLICY))
    (workdir / "h.json").write_text(json.dumps({
        "clear-tool-results": {"keep": 2, "excludeTools": ["search_kb"]},
        "short-texts": {"handler": "truncate-messages", "maxChars": 400}}))
    outputs = []
    for jobs in (1, 2):
        result = run("reduce", "in.jsonl", "--policy", "p.json", "--handlers", "h.json",
                     "-o", f"out{jobs}.jsonl", "--report", f"r{jobs}.json", "--jobs", jobs,
                     cwd=workdir, env={"CONTEXTPOLICY_START_METHOD": method})
        assert result.returncode == 0, result.stderr
        outputs.append((workdir / f"out{jobs}.jsonl").read_bytes())
    assert outputs[0] == outputs[1]  # the handlers travel to the workers with their parameters
    handlers = registry(clear_tool_results(keep=2, exclude_tools=["search_kb"]),
                        truncate_messages(max_chars=400, handler_id="short-texts"))
    lines = [json.loads(line) for line in outputs[0].splitlines()]
    report = json.loads((workdir / "r2.json").read_text())
    applied = 0
    for doc, line, entry in zip(docs, lines, report["conversations"], strict=True):
        expected = process_context(ContextPlan.from_messages(doc["messages"]), CLEAR_POLICY,
                                   handlers=handlers)
        assert line["messages"] == expected.input
        assert entry["report"] == expected.report.model_dump(by_alias=True, mode="json")
        figures = entry["report"]["steps"][0]["handlerFigures"]
        if figures is not None:
            applied += 1
            assert figures["handler"] == "clear-tool-results" and figures["resultsCleared"] > 0
    assert applied >= 8
    assert report["summary"]["charsAfter"] < report["summary"]["charsBefore"] // 4


def test_reduce_handler_flag_registers_the_defaults(workdir):
    write_traces(workdir / "in.jsonl", 4)
    policy = {**CLEAR_POLICY, "steps": [CLEAR_POLICY["steps"][0]]}
    (workdir / "p.json").write_text(json.dumps(policy))
    result = run("reduce", "in.jsonl", "--policy", "p.json", "--handler", "clear-tool-results",
                 "--handler", "truncate-messages", "-o", "out.jsonl", "-q", cwd=workdir)
    assert result.returncode == 0, result.stderr
    cleared = [m for line in (workdir / "out.jsonl").read_text().splitlines()
               for m in json.loads(line)["messages"]
               if isinstance(m.get("content"), str)
               and m["content"].startswith("[tool result cleared: ")]
    assert len(cleared) > 10


@pytest.mark.parametrize("args, message", [
    ([], "--policy: steps[0].handlerId: the built-in handler 'clear-tool-results' is not "
         "registered: add --handler clear-tool-results (its defaults) or give its parameters "
         "in --handlers FILE"),
    (["--handler", "nope"], "--handler nope: not a built-in handler; expected one of "
                            "clear-tool-results, truncate-messages"),
    (["--handler", "summarize"], "--handler summarize: summarize needs a summariser function"),
    (["--handler", "clear-tool-results", "--handler", "clear-tool-results"],
     "--handler clear-tool-results is given twice"),
    (["--handler", "clear-tool-results", "--handlers", "h.json"],
     "h.json: handler 'clear-tool-results' is also given by --handler clear-tool-results"),
    (["--handlers", "bad.json"], "bad.json: invalid handlers (3 problem(s)):\n"
     "  clear-tool-results.keep: expected an integer, got str '2' [expected-integer]\n"
     "  x.handler: 'x' is not a built-in handler id"),
    (["--handlers", "missing.json"], "missing.json: cannot read the handlers file"),
])
def test_reduce_handler_errors_come_before_any_work(workdir, args, message):
    write_traces(workdir / "in.jsonl", 2)
    (workdir / "p.json").write_text(json.dumps({**CLEAR_POLICY,
                                                "steps": [CLEAR_POLICY["steps"][0]]}))
    (workdir / "h.json").write_text(json.dumps({"clear-tool-results": {}}))
    (workdir / "bad.json").write_text(json.dumps({
        "clear-tool-results": {"keep": "2"}, "x": {}, "summarize": {"role": "user"}}))
    result = run("reduce", "in.jsonl", "--policy", "p.json", *args, "-o", "out.jsonl",
                 cwd=workdir)
    # A handlers file that does not validate is exit 1, as in validate; the rest is bad input.
    assert result.returncode == (1 if "invalid handlers" in message else 2), result.stderr
    assert message in result.stderr.decode()
    assert not (workdir / "out.jsonl").exists() and leftovers(workdir) == []


def test_reduce_handlers_on_parquet_input_equal_reduce_table(workdir):
    import pyarrow as pa
    import pyarrow.parquet as pq

    from contextpolicy.batch import reduce_table
    from contextpolicy.handlers import with_defaults

    def conversation(k):
        messages = []
        for turn in range(6):
            cid = f"c{k}-{turn}"
            messages += [
                {"role": "user", "content": f"question {turn} " * 20},
                {"role": "assistant", "content": "", "tool_calls": [
                    {"id": cid, "type": "function",
                     "function": {"name": "search", "arguments": '{"q": "x"}'}}]},
                {"role": "tool", "tool_call_id": cid, "content": f"result {turn} " * 150}]
        return messages + [{"role": "user", "content": "and now?"}]

    table = pa.table({"id": list(range(8)), "messages": [conversation(k) for k in range(8)]})
    pq.write_table(table, workdir / "in.parquet")
    policy = {**CLEAR_POLICY, "steps": [CLEAR_POLICY["steps"][0]]}
    (workdir / "p.json").write_text(json.dumps(policy))
    result = run("reduce", "in.parquet", "--policy", "p.json", "--handler",
                 "clear-tool-results", "-o", "out.parquet", "-q", cwd=workdir)
    assert result.returncode == 0, result.stderr
    expected = reduce_table(table, policy,
                            handlers={"clear-tool-results": with_defaults("clear-tool-results")})
    got = pq.read_table(workdir / "out.parquet")
    assert got.column("messages").to_pylist() == expected.table.column("messages").to_pylist()
    assert "[tool result cleared" in json.dumps(got.column("messages").to_pylist())


def test_validate_knows_the_built_in_ids_and_checks_a_handlers_file(workdir):
    (workdir / "p.json").write_text(json.dumps(CLEAR_POLICY))
    plain = run("validate", "p.json", cwd=workdir)
    assert plain.returncode == 0
    assert plain.stdout.decode().strip() == (
        "ok: p.json is a valid reduce policy (3 steps); built-in handler clear-tool-results")
    # With handlers named, the built-in ids count as registered; another id must be given.
    named = run("validate", "p.json", "--handler", "short-texts", cwd=workdir)
    assert named.returncode == 0, named.stdout
    assert named.stdout.decode().strip().endswith(
        "; handlers short-texts; built-in handler clear-tool-results")
    missing = run("validate", "p.json", "--handler", "other", cwd=workdir)
    assert missing.returncode == 1
    assert ("steps[1].handlerId: no handler 'short-texts' is registered (registered: "
            "clear-tool-results, other)") in missing.stdout.decode()
    (workdir / "h.json").write_text(json.dumps({
        "short-texts": {"handler": "truncate-messages", "maxChars": 300}}))
    good = run("validate", "p.json", "--handlers", "h.json", cwd=workdir)
    assert good.returncode == 0 and b"handlers short-texts" in good.stdout
    (workdir / "bad.json").write_text(json.dumps({
        "short-texts": {"handler": "truncate-messages", "maxChars": 300, "head": 200,
                        "tail": 200}}))
    bad = run("validate", "p.json", "--handlers", "bad.json", cwd=workdir)
    assert bad.returncode == 1
    assert bad.stdout.decode().splitlines() == [
        "bad.json: invalid (1 problem(s))",
        "  short-texts: head + tail (200 + 200) must not exceed maxChars (300) [invalid-value]"]
