"""The command line's exit statuses and the errors a newcomer meets, end to end.

One meaning per exit status in every command and however a policy arrives (0 success, 1 a policy
that does not validate or an audit violation, 2 bad input, 130 interrupted); and for each
mistake a person makes on first contact (a file that is not UTF-8, a JSON array given as JSONL,
a YAML or inline policy, a byte order mark, a transcript where a plan was expected) one line
that says where (``FILE:LINE:COLUMN``, the column counting bytes) and what to do. Where lines
are read, on both kernels (the compiled one and the twin, chosen by
``CONTEXTPOLICY_PURE_PYTHON``), on the byte path and the object path, from a plain file, a
gzip file and standard input, with ``--jobs 1`` and ``--jobs 2``.
"""

from __future__ import annotations

import gzip
import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from contextpolicy.jsonl.files import MIN_RANGE
from contextpolicy.jsonl.runner import BATCH_BYTES, BATCH_LINES
from tests.support.cli import (
    EXAMPLES,
    OBJECT_PATH_POLICY,
    SCRIPT,
    SEED_POLICY,
    leftovers,
    run,
    write_corpus,
)

# The kernel a command line run uses: the compiled one, or the twin.
KERNELS = [pytest.param("c", marks=pytest.mark.c_extension), "py"]
KERNEL_ENV = {"c": {"CONTEXTPOLICY_PURE_PYTHON": "0"}, "py": {"CONTEXTPOLICY_PURE_PYTHON": "1"}}
KERNEL_NAME = {"c": "cython", "py": "python"}
# The seed policy reads transcript lines as bytes (the kernel's scanner); a compress step sends
# every line through the object path (and --jobs 2 on a file to a worker process).
POLICIES = {"bytes": ["--policy", "policy.json"],
            "objects": ["--policy", "objects.json", "--handler", "clear-tool-results"]}
SOURCES = ["plain", "gzip", "stdin"]
JOBS = ["1", "2"]
# Some 400 KB: several ranges of a file with --jobs 2, and two batches of standard input (of 64
# lines each).
LINES = 70
assert BATCH_LINES < LINES
BAD_LINE = 67  # near the end: in a range or batch of a thread or worker process with --jobs 2


@pytest.fixture(scope="module")
def corpus_lines(tmp_path_factory) -> list[bytes]:
    path = tmp_path_factory.mktemp("corpus") / "in.jsonl"
    write_corpus(path, LINES, size=(4, 12))
    lines = path.read_bytes().splitlines(keepends=True)
    assert 4 * MIN_RANGE < sum(map(len, lines)) < BATCH_BYTES
    return lines


@pytest.fixture
def folder(workdir):
    (workdir / "objects.json").write_text(json.dumps(OBJECT_PATH_POLICY))
    return workdir


def reduce_run(folder: Path, data: bytes, source: str, kernel: str, policy: str, jobs: str,
               *extra: str) -> tuple[subprocess.CompletedProcess, str]:
    """``reduce`` of ``data`` given as ``source``; returns the run and the input's name."""
    stdin = None
    if source == "plain":
        name = "in.jsonl"
        (folder / name).write_bytes(data)
    elif source == "gzip":
        name = "in.jsonl.gz"
        (folder / name).write_bytes(gzip.compress(data))
    else:
        name, stdin = "-", data
    result = run("reduce", name, *POLICIES[policy], "--jobs", jobs, "-q", *extra, stdin=stdin,
                 cwd=folder, env=KERNEL_ENV[kernel])
    return result, "<stdin>" if name == "-" else name


def one_line(result: subprocess.CompletedProcess, code: int = 2) -> str:
    """The one line a failed run printed, after its exit status; no traceback, no message of
    orjson's with its own position."""
    err = result.stderr.decode()
    assert result.returncode == code, err
    assert "Traceback" not in err and "(char " not in err, err
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    return lines[0]


# ---------------------------------------------------------------------------------------------
# exit statuses: one meaning in every command, however the policy arrives

INVALID = {"validate": {"mode": "reduce", "triggerChars": "1800", "steps": []},
           "reduce": {"mode": "reduce", "triggerChars": "1800", "steps": []},
           "audit": {"mode": "audit", "mutableFragmentIds": "history"}}
ARRIVALS = ["file", "stdin", "inline", "yaml"]


def policy_argument(folder: Path, doc: object, how: str) -> tuple[str, bytes | None, str]:
    """(argument, standard input, the name messages give) of a policy given ``how``."""
    text = json.dumps(doc)
    if how == "file":
        (folder / "p.json").write_text(text)
        return "p.json", None, "p.json"
    if how == "stdin":
        return "-", text.encode(), "<stdin>"
    if how == "inline":
        return text, None, "<inline JSON>"
    (folder / "p.yaml").write_text(text)  # JSON is YAML
    return "p.yaml", None, "p.yaml"


def command(name: str, policy: str, folder: Path) -> list[str]:
    if name == "validate":
        return ["validate", policy]
    if name == "audit":
        return ["audit", str(EXAMPLES / "audit-plan.json"), "--policy", policy]
    write_corpus(folder / "in.jsonl", 2)
    return ["reduce", "in.jsonl", "--policy", policy, "-o", "out.jsonl", "-q"]


@pytest.mark.parametrize("how", ARRIVALS)
@pytest.mark.parametrize("name", list(INVALID))
def test_a_policy_that_does_not_validate_is_exit_1(workdir, name, how):
    policy, stdin, shown = policy_argument(workdir, INVALID[name], how)
    result = run(*command(name, policy, workdir), stdin=stdin, cwd=workdir)
    assert result.returncode == 1, result.stderr
    said = (result.stdout + result.stderr).decode()
    assert f"{shown}: invalid" in said and "[expected-" in said
    assert not (workdir / "out.jsonl").exists() and leftovers(workdir) == []


@pytest.mark.parametrize("how", ARRIVALS)
@pytest.mark.parametrize("name", list(INVALID))
def test_a_policy_that_is_not_json_is_exit_2_at_its_line_and_column(workdir, name, how):
    policy, stdin, shown = policy_argument(workdir, {"mode": "validate"}, how)
    broken = '{\n  "mode": "validate",,\n}' if how != "yaml" else "mode: [validate\n"
    if how == "inline":
        policy = broken
    elif how == "stdin":
        stdin = broken.encode()
    else:
        (workdir / policy).write_text(broken)
    line = one_line(run(*command(name, policy, workdir), stdin=stdin, cwd=workdir))
    where = f"{shown}:2:1: the policy is not valid YAML" if how == "yaml" else (
        f"{shown}:2:22: the policy is not valid JSON")
    assert where in line, line


def test_the_reference_checks_of_an_audit_policy_are_exit_1(workdir):
    # mutableFragmentIds naming a protected fragment of the plan: the policy does not validate
    # against the plan, as `validate --plan` says with exit 1 too.
    (workdir / "p.json").write_text(json.dumps({"mode": "audit",
                                                "mutableFragmentIds": ["evidence"]}))
    plan = str(EXAMPLES / "audit-plan.json")
    audited = run("audit", plan, "--policy", "p.json", cwd=workdir)
    assert audited.returncode == 1, audited.stderr
    assert b"p.json: invalid context policy" in audited.stderr
    validated = run("validate", "p.json", "--plan", plan, cwd=workdir)
    assert validated.returncode == 1 and b"[protected-fragment]" in validated.stdout


def test_the_shipped_example_policy_keeps_the_same_exit_statuses(workdir):
    # No input and no policy: the shipped corpus and policy. A handlers file that does not
    # validate is exit 1 there too; an output that cannot be written is bad input, exit 2.
    (workdir / "h.json").write_text(json.dumps({"clear-tool-results": {"keep": "2"}}))
    invalid = run("reduce", "--handlers", "h.json", cwd=workdir)
    assert invalid.returncode == 1 and b"h.json: invalid handlers" in invalid.stderr
    unwritable = run("reduce", "-o", "missing/out.jsonl", cwd=workdir)
    assert unwritable.returncode == 2 and b"the folder" in unwritable.stderr
    assert run("reduce", cwd=workdir).returncode == 0


@pytest.mark.parametrize("args, code", [
    (["schema", "policy"], 0),
    (["schema", "nothing"], 2),
    (["validate"], 2),
    (["audit", "missing.json", "--policy", "p.json"], 2),
    (["bench", "--sizes", "abc"], 2),
    (["bench", "--input", "missing.jsonl"], 2),
    (["bench", "--input", "array.jsonl", "--repeat", "1", "--no-langchain"], 2),
    (["bench", "--input", "latin1.jsonl", "--repeat", "1", "--no-langchain"], 2),
])
def test_every_command_uses_the_same_statuses(workdir, args, code):
    (workdir / "p.json").write_text(json.dumps({"mode": "audit", "mutableFragmentIds": []}))
    (workdir / "array.jsonl").write_text('[{"id": 1, "messages": []}]\n')
    latin1 = b'{"id": "caf\xe9", "messages": []}\n'
    (workdir / "latin1.jsonl").write_bytes(latin1)
    result = run(*args, cwd=workdir)
    assert result.returncode == code, result.stderr
    if args[-1] == "--no-langchain":
        line = one_line(result)
        assert {"array.jsonl": "array.jsonl:1: expected a transcript", "latin1.jsonl":
                f"latin1.jsonl:1:{latin1.index(0xE9) + 1}: byte 0xE9 is not UTF-8"}[args[2]] in line


def waiting_for_input(proc: subprocess.Popen) -> None:
    """Returns once ``proc`` waits on its standard input (Linux says so; elsewhere, after a
    while)."""
    wchan = Path(f"/proc/{proc.pid}/wchan")
    deadline = time.monotonic() + 60
    while wchan.exists() and time.monotonic() < deadline:
        if "pipe_read" in wchan.read_text():  # pipe_read, anon_pipe_read
            time.sleep(0.1)
            if "pipe_read" in wchan.read_text():
                break
        time.sleep(0.05)
    else:
        time.sleep(3)
    assert proc.poll() is None, proc.communicate()


@pytest.mark.skipif(sys.platform == "win32", reason="SIGINT is sent to one process on POSIX")
@pytest.mark.parametrize("args", [["validate", "-"], ["audit", "-", "--policy", "p.json"],
                                  ["bench", "--input", "-", "--no-langchain"]])
def test_every_command_interrupted_is_exit_130(workdir, args):
    # Each waits on its standard input, which stays open, when Ctrl-C comes.
    (workdir / "p.json").write_text(json.dumps({"mode": "audit", "mutableFragmentIds": []}))
    proc = subprocess.Popen(
        [str(SCRIPT), *args], cwd=workdir, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
        stderr=subprocess.PIPE, preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    waiting_for_input(proc)
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, err
    assert err.decode().strip().splitlines()[-1].startswith(f"contextpolicy {args[0]}: "
                                                            "interrupted")


INTERRUPTED_IMPORT = """\
import os, signal, sys, time
import contextpolicy.cli
import contextpolicy.cli.schema

cli = sys.modules["contextpolicy.cli.main"]

def schema(args):
    # What a Ctrl-C in the middle of loading numpy gives: the import fails with another error.
    try:
        os.kill(os.getpid(), signal.SIGINT)
        time.sleep(5)
    except KeyboardInterrupt:
        raise ImportError("cannot load module more than once per process") from None

contextpolicy.cli.schema.cmd_schema = schema  # what the command runs
sys.exit(cli.main(["schema", "policy"]))
"""


@pytest.mark.skipif(sys.platform == "win32", reason="SIGINT is sent to one process on POSIX")
def test_an_error_that_follows_an_interrupt_is_the_interrupt(workdir):
    result = subprocess.run([sys.executable, "-c", INTERRUPTED_IMPORT], capture_output=True,
                            cwd=workdir)
    assert one_line(result, 130) == "contextpolicy schema: interrupted; no output file was written"


# ---------------------------------------------------------------------------------------------
# a file that is not UTF-8: the byte, where it is, and how to re-encode


@pytest.mark.parametrize("jobs", JOBS)
@pytest.mark.parametrize("source", SOURCES)
@pytest.mark.parametrize("policy", list(POLICIES))
@pytest.mark.parametrize("kernel", KERNELS)
def test_a_byte_that_is_not_utf8_is_named_with_its_line_and_column(
        folder, corpus_lines, kernel, policy, source, jobs):
    lines = list(corpus_lines)
    doc = json.loads(lines[BAD_LINE - 1])
    text = json.dumps(doc, ensure_ascii=False).encode()
    at = text.index(b'"content": "') + len(b'"content": "')
    # "café" in Latin-1, after a character of two bytes and one of four (columns count bytes).
    lines[BAD_LINE - 1] = text[:at] + "é😀caf".encode() + b"\xe9" + text[at:] + b"\n"
    result, name = reduce_run(folder, b"".join(lines), source, kernel, policy, jobs,
                              "-o", "out.jsonl")
    assert one_line(result) == (
        f"contextpolicy reduce: error: {name}:{BAD_LINE}:{at + 10}: byte 0xE9 is not UTF-8 "
        "(invalid continuation byte); the input must be UTF-8: re-encode it, e.g. with "
        "iconv -f latin1 -t utf-8 if it is Latin-1")
    assert not (folder / "out.jsonl").exists() and leftovers(folder) == []
    skipped, _ = reduce_run(folder, b"".join(lines), source, kernel, policy, jobs,
                            "--on-error", "skip", "-o", "out.jsonl", "--report", "r.json")
    assert skipped.returncode == 0, skipped.stderr
    assert len((folder / "out.jsonl").read_bytes().splitlines()) == LINES - 1
    summary = json.loads((folder / "r.json").read_text())["summary"]
    (entry,) = summary["skippedLines"]
    assert (entry["line"], entry["column"]) == (BAD_LINE, at + 10)
    assert entry["error"].startswith("byte 0xE9 is not UTF-8")


@pytest.mark.parametrize("kernel", KERNELS)
def test_utf16_input_says_it_is_utf16(folder, kernel):
    data = '{"id": "a", "messages": [{"role": "user", "content": "hi"}]}\n'.encode("utf-16")
    result, _ = reduce_run(folder, data, "plain", kernel, "bytes", "1")
    assert one_line(result).endswith(
        "in.jsonl:1:1: the input is UTF-16 (it starts with a UTF-16 byte order mark), not "
        "UTF-8: re-encode it, e.g. with iconv -f utf-16 -t utf-8")
    without_bom = data[2:]  # UTF-16LE: a NUL after every ASCII byte
    result, _ = reduce_run(folder, without_bom, "plain", kernel, "bytes", "1")
    assert one_line(result).endswith(
        "in.jsonl:1:2: a NUL byte (0x00), which JSON text never holds: is the input UTF-16? "
        "re-encode it, e.g. with iconv -f utf-16 -t utf-8")


# ---------------------------------------------------------------------------------------------
# a JSON array given as JSONL


ARRAY_HINT = ("reduce wants one JSON object per line (JSONL): convert a file that is one JSON "
              "array with jq -c '.[]'")


@pytest.mark.parametrize("jobs", JOBS)
@pytest.mark.parametrize("kernel", KERNELS)
def test_a_json_array_given_as_jsonl(folder, corpus_lines, kernel, jobs):
    docs = [json.loads(line) for line in corpus_lines[:3]]
    pretty = json.dumps(docs, indent=2).encode()
    result, _ = reduce_run(folder, pretty, "plain", kernel, "bytes", jobs)
    assert one_line(result).endswith(
        "in.jsonl:1:2: invalid JSON: unexpected end of data: the line starts a JSON array that "
        f"goes on over the next lines; {ARRAY_HINT}")
    one_per_line = b"[" + b",\n".join(json.dumps(d).encode() for d in docs) + b"]\n"
    result, _ = reduce_run(folder, one_per_line, "stdin", kernel, "objects", jobs)
    assert one_line(result).endswith(f"<stdin>:1:{len(json.dumps(docs[0])) + 3}: invalid JSON: "
                                     f"unexpected end of data: the line starts a JSON array "
                                     f"that goes on over the next lines; {ARRAY_HINT}")
    whole = json.dumps(docs).encode() + b"\n"
    result, _ = reduce_run(folder, whole, "gzip", kernel, "bytes", jobs)
    assert one_line(result).endswith(
        'in.jsonl.gz:1: expected a JSON object (a transcript {"id", "messages"} or a plan '
        '{"fragments"}), got list: the line is a JSON array: reduce wants one JSON object per '
        "line (JSONL); convert a file that is one JSON array with jq -c '.[]'")
    messages = json.dumps(docs[0]["messages"]).encode() + b"\n"
    result, _ = reduce_run(folder, messages, "plain", kernel, "bytes", jobs)
    assert one_line(result).endswith(
        'got list: the line is a JSON array of messages: write it as {"messages": [...]} '
        "(jq -c '{messages: .}')")
    pretty_object = json.dumps(docs[0], indent=1).encode()
    result, _ = reduce_run(folder, pretty_object, "plain", kernel, "bytes", jobs)
    assert one_line(result).endswith(
        "in.jsonl:1:2: invalid JSON: unexpected end of data: the line starts a JSON object "
        "that goes on over the next lines (a pretty-printed document?); JSONL wants each "
        "object on one line: convert it with jq -c .")


# ---------------------------------------------------------------------------------------------
# a UTF-8 byte order mark at the start: accepted everywhere


@pytest.mark.parametrize("jobs", JOBS)
@pytest.mark.parametrize("source", SOURCES)
@pytest.mark.parametrize("policy", list(POLICIES))
@pytest.mark.parametrize("kernel", KERNELS)
def test_a_byte_order_mark_at_the_start_is_accepted(folder, corpus_lines, kernel, policy,
                                                    source, jobs):
    data = b"".join(corpus_lines)
    plain, _ = reduce_run(folder, data, source, kernel, policy, jobs, "-o", "plain.jsonl",
                          "--report", "plain.json")
    assert plain.returncode == 0, plain.stderr
    marked, _ = reduce_run(folder, b"\xef\xbb\xbf" + data, source, kernel, policy, jobs,
                           "-o", "marked.jsonl", "--report", "marked.json")
    assert marked.returncode == 0, marked.stderr
    assert (folder / "marked.jsonl").read_bytes() == (folder / "plain.jsonl").read_bytes()
    reports = [json.loads((folder / f"{n}.json").read_text()) for n in ("plain", "marked")]
    assert reports[1]["conversations"] == reports[0]["conversations"]
    assert reports[1]["conversations"][0]["report"]["kernel"] == KERNEL_NAME[kernel]
    summaries = [r["summary"] for r in reports]
    assert summaries[1]["bytesIn"] == summaries[0]["bytesIn"] + 3  # every byte read counted
    # The first line takes the path the others take (the byte path with the seed policy).
    assert summaries[1]["paths"] == summaries[0]["paths"]
    if policy == "bytes":
        assert summaries[1]["paths"]["bytes"] == LINES


@pytest.mark.parametrize("kernel", KERNELS)
def test_a_byte_order_mark_inside_the_input_is_a_clear_error(folder, corpus_lines, kernel):
    lines = list(corpus_lines[:4])
    lines[2] = b"\xef\xbb\xbf" + lines[2]  # two files joined, the second with its BOM
    result, _ = reduce_run(folder, b"".join(lines), "plain", kernel, "bytes", "1")
    assert one_line(result).endswith(
        "in.jsonl:3:1: a UTF-8 byte order mark (BOM) in the middle of the input: it is accepted "
        "only as the first bytes of a file (were files joined?); remove it")


def test_a_byte_order_mark_on_policies_plans_and_handlers_files(workdir):
    bom = b"\xef\xbb\xbf"
    (workdir / "p.json").write_bytes(bom + json.dumps(SEED_POLICY).encode())
    (workdir / "plan.json").write_bytes(bom + (EXAMPLES / "plan.json").read_bytes())
    (workdir / "h.json").write_bytes(bom + b'{"clear-tool-results": {"keep": 2}}')
    (workdir / "p.yaml").write_bytes(bom + b"mode: validate\n")
    validated = run("validate", "p.json", "--plan", "plan.json", "--handlers", "h.json",
                    cwd=workdir)
    assert validated.returncode == 0, validated.stdout + validated.stderr
    assert run("validate", "p.yaml", cwd=workdir).returncode == 0
    (workdir / "audit.json").write_bytes(bom + (EXAMPLES / "policy-audit.json").read_bytes())
    (workdir / "audit-plan.json").write_bytes(bom + (EXAMPLES / "audit-plan.json").read_bytes())
    audited = run("audit", "audit-plan.json", "--policy", "audit.json", cwd=workdir)
    assert audited.returncode == 1 and b"1 disallowed change" in audited.stdout  # as without
    write_corpus(workdir / "in.jsonl", 3)
    reduced = run("reduce", "in.jsonl", "--policy", "p.json", "--handlers", "h.json", "-q",
                  cwd=workdir)
    plain = run("reduce", "in.jsonl", "--policy", "policy.json", "-q", cwd=workdir)
    assert reduced.returncode == 0 and reduced.stdout == plain.stdout


# ---------------------------------------------------------------------------------------------
# YAML and inline JSON policies


def test_inline_json_and_yaml_policies_reduce_as_the_file_does(workdir):
    import yaml

    write_corpus(workdir / "in.jsonl", 8)
    (workdir / "p.yaml").write_text(yaml.safe_dump(SEED_POLICY))
    outputs = {}
    for policy in ("policy.json", json.dumps(SEED_POLICY), "p.yaml"):
        result = run("reduce", "in.jsonl", "--policy", policy, "-q", cwd=workdir)
        assert result.returncode == 0, result.stderr
        outputs[policy] = result.stdout
    assert len(set(outputs.values())) == 1
    ok = run("validate", json.dumps(SEED_POLICY), cwd=workdir)
    assert ok.stdout.decode().strip() == "ok: <inline JSON> is a valid reduce policy (1 step)"


def test_yaml_scalars_are_typed_as_json_types_them(workdir):
    # YAML 1.1 (PyYAML's default) reads 010 as 8, 1:30 as 90 and `no` as false: values nobody
    # wrote. Here they stay the strings they are, which a policy's strict fields refuse.
    (workdir / "p.yaml").write_text(
        "mode: reduce\ntriggerChars: 010\ntargetInputChars: 1:30\nsteps:\n"
        "  - {id: no, kind: trim, fragmentId: history, keepGroups: 1, targetChars: 1e3}\n")
    result = run("validate", "p.yaml", cwd=workdir)
    assert result.returncode == 1
    text = result.stdout.decode()
    assert "triggerChars: expected an integer, got str '010'" in text
    assert "targetInputChars: expected an integer, got str '1:30'" in text
    assert "steps[0].targetChars: expected an integer, got float 1000.0" in text
    assert "steps[0].id" not in text  # `no` is the id "no"
    (workdir / "q.yaml").write_text(
        "mode: reduce\ntriggerChars: 1800\ntargetInputChars: 1500\nsteps:\n"
        "  - {id: no, kind: trim, fragmentId: history, keepGroups: 2, targetChars: 1000}\n"
        "  - {id: on, kind: trim, fragmentId: history, keepGroups: 0, targetChars: ~}\n")
    result = run("validate", "q.yaml", cwd=workdir)
    assert result.returncode == 1
    assert "steps[1].targetChars: expected an integer, got None" in result.stdout.decode()


def test_a_yaml_policy_without_pyyaml_says_what_to_install(workdir):
    (workdir / "p.yaml").write_text("mode: validate\n")
    code = ("import sys; sys.modules['yaml'] = None\n"
            "from contextpolicy.cli import main\n"
            "sys.exit(main(['validate', 'p.yaml']))")
    result = subprocess.run([sys.executable, "-c", code], cwd=workdir, capture_output=True)
    assert one_line(result) == (
        "contextpolicy validate: error: p.yaml: reading a YAML policy needs PyYAML (pip install "
        "contextpolicy[yaml]); or give it as JSON")
    code = code.replace("p.yaml", "p.json")
    (workdir / "p.json").write_text('{"mode": "validate"}')
    assert subprocess.run([sys.executable, "-c", code], cwd=workdir).returncode == 0


def test_a_policy_argument_that_is_no_file_says_what_policy_wants(workdir):
    line = one_line(run("validate", "mode: validate", cwd=workdir))
    assert line.endswith("mode: validate: cannot read the policy (No such file or directory); "
                         "expected a file (JSON, or YAML named .yaml/.yml), - for standard "
                         "input, or inline JSON starting with { or [")


def test_a_yaml_or_inline_document_that_is_not_utf8(workdir):
    (workdir / "p.yaml").write_bytes(b"mode: validate\nsteps: caf\xe9\n")
    assert one_line(run("validate", "p.yaml", cwd=workdir)).endswith(
        "p.yaml:2:11: byte 0xE9 is not UTF-8 (invalid continuation byte); the input must be "
        "UTF-8: re-encode it, e.g. with iconv -f latin1 -t utf-8 if it is Latin-1")
    second = b' "validate", "x": "caf\xe9"}'
    (workdir / "p.json").write_bytes(b'{"mode":\n' + second)
    assert f"p.json:2:{second.index(0xE9) + 1}: byte 0xE9 is not UTF-8" in one_line(
        run("validate", "p.json", cwd=workdir))


# ---------------------------------------------------------------------------------------------
# validate --plan takes a transcript, as reduce does


@pytest.mark.parametrize("shape", ["transcript", "messages", "inline"])
def test_validate_checks_references_against_a_transcript(workdir, corpus_lines, shape):
    doc = json.loads(corpus_lines[0])
    plan = {"transcript": json.dumps(doc), "messages": json.dumps(doc["messages"]),
            "inline": json.dumps(doc["messages"])}[shape]
    argument = plan if shape == "inline" else "plan.json"
    (workdir / "plan.json").write_text(plan)
    ok = run("validate", "policy.json", "--plan", argument, cwd=workdir)
    assert ok.returncode == 0, ok.stderr
    assert ok.stdout.decode().strip().endswith(
        "references checked against " + ("<inline JSON>" if shape == "inline" else "plan.json"))
    # The transcript is split as reduce splits it: its last user message is the question.
    (workdir / "q.json").write_text(json.dumps({**SEED_POLICY, "steps": [
        {**SEED_POLICY["steps"][0], "fragmentId": "question"}]}))
    protected = run("validate", "q.json", "--plan", argument, cwd=workdir)
    assert protected.returncode == 1, protected.stderr
    assert ("steps[0].fragmentId: fragment 'question' is a protected 'question' fragment"
            in protected.stdout.decode())


def test_validate_plan_that_is_neither_says_what_it_wants(workdir):
    (workdir / "plan.json").write_text('{"turns": [], "id": 1}')
    assert one_line(run("validate", "policy.json", "--plan", "plan.json", cwd=workdir)) == (
        "contextpolicy validate: error: plan.json: invalid context plan: <root>: expected a "
        'plan {"fragments": [...]} or a transcript {"messages": [...]} (or its list of '
        "messages); the object has keys: id, turns [invalid-plan]")


# ---------------------------------------------------------------------------------------------
# one position style: FILE:LINE:COLUMN, the column counting bytes within the line


@pytest.mark.parametrize("kernel", KERNELS)
def test_positions_count_bytes_within_the_line_of_the_file(folder, kernel):
    good = '{"id": "a", "messages": [{"role": "user", "content": "ok"}]}\n'
    bad = '{"id": "é😀", "messages": [] x}\n'  # "x": character 28 of line 2, byte 32
    column = bad.encode().index(b"x") + 1
    assert column == bad.index("x") + 5  # where orjson says "column 29"
    result, _ = reduce_run(folder, (good + bad).encode(), "plain", kernel, "bytes", "1")
    assert one_line(result).endswith(
        f"in.jsonl:2:{column}: invalid JSON: {_orjson_message(bad)} (found 'x')")
    (folder / "p.json").write_text('{\n  "mode": "é",\n  "x": tru\n}')
    assert one_line(run("validate", "p.json", cwd=folder)).startswith(
        "contextpolicy validate: error: p.json:3:8: the policy is not valid JSON: ")


def _orjson_message(text: str) -> str:
    import orjson

    try:
        orjson.loads(text)
    except orjson.JSONDecodeError as exc:
        return str(exc.msg)
    raise AssertionError(text)


def test_a_document_named_with_a_trailing_slash_is_the_file(workdir):
    # as pathlib reads it: policy.json/ is policy.json
    result = subprocess.run([sys.executable, "-m", "contextpolicy", "validate", "policy.json/"],
                            capture_output=True, cwd=workdir)
    assert result.returncode == 0, result.stderr
    empty = subprocess.run([sys.executable, "-m", "contextpolicy", "validate", ""],
                           capture_output=True, cwd=workdir)
    assert empty.returncode == 2
    assert b"cannot read the policy (Is a directory)" in empty.stderr


@pytest.mark.parametrize("args, says", [
    (["reduce", "--policy", "-"], "INPUT and --policy"),
    (["reduce", "-", "--policy", "-"], "INPUT and --policy"),
    (["reduce", "in.jsonl", "--policy", "-", "--handlers", "-"], "--handlers and --policy"),
    (["replay", "-", "--policy", "-"], "INPUT and --policy"),
    (["replay", "in.jsonl", "--policy", "p.json", "--policy", "-", "--policy", "-"],
     "--policy and --policy"),
    (["audit", "-", "--policy", "-"], "PLAN and --policy"),
    (["validate", "-", "--plan", "-"], "--plan and POLICY"),
])
def test_standard_input_named_twice_is_refused_before_it_is_read(workdir, args, says):
    # The second document would be read from what the first left: nothing, and a confusing
    # error about the wrong document.
    policy = json.dumps({"mode": "validate"}).encode()
    result = run(*args, stdin=policy, cwd=workdir)
    assert result.returncode == 2 and result.stdout == b""
    assert one_line(result) == (f"contextpolicy {args[0]}: error: standard input can be read "
                                f"once, but {says} both name it (-): give all but one of them "
                                "as a file")


def test_standard_input_named_once_is_read(workdir):
    policy = json.dumps({"mode": "reduce", "triggerChars": 10, "steps": [
        {"id": "t", "kind": "trim", "fragmentId": "history", "targetChars": 5,
         "keepGroups": 1}]})
    (workdir / "in.jsonl").write_text(json.dumps({"id": "a", "messages": [
        {"role": "user", "content": "hi"}]}) + "\n")
    result = run("reduce", "in.jsonl", "--policy", "-", "-q", stdin=policy.encode(), cwd=workdir)
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["id"] == "a"
