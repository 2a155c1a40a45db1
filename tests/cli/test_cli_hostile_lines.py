"""The command line on lines at the edges of what orjson reads and writes: nesting orjson reads
(1,024 levels) but will not write, tool inputs as deep as a line holds, integers beyond 64 bits,
digit strings and fractions read as orjson reads them, a long line from a pipe (read in linear
time, whatever its pieces). Nothing is lost or changed: a line is written back byte for byte,
digit for digit, or is an error naming its line. And the exact writer and the files module that
read and write those lines, on their own."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import tracemalloc
import types

import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from contextpolicy._tables import MAX_JSON_DEPTH
from contextpolicy.jsonl import files as jsonl_files
from contextpolicy.jsonl.files import InputFile, dumps_exactly
from tests.support.cli import (
    JOBS,
    leftovers,
    one_line_error,
    run,
    write_corpus,
)

pytestmark = pytest.mark.skipif(sys.platform == "win32", reason="POSIX streams and signals")

SHORT = [{"role": "user", "content": "Where is my order?"},
         {"role": "assistant", "content": "It ships tomorrow."}]


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
# 2. integers beyond 64 bits pass through exactly (orjson alone reads them as floats)

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
# 3. a long line from a pipe is read in linear time


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
# 4. the files module, which reads and writes the lines, on its own


def test_the_files_module_loads_neither_numpy_nor_the_kernel():
    code = ("import sys, contextpolicy.jsonl.files; "
            "sys.exit(any(m.split('.')[0] == 'numpy' or '_kernel' in m for m in sys.modules))")
    assert subprocess.run([sys.executable, "-c", code]).returncode == 0
    assert jsonl_files.__name__ == "contextpolicy.jsonl.files"
