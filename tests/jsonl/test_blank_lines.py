"""What a blank JSONL line is: empty, or nothing but JSON whitespace (space, tab, carriage
return; its line feed ends it). It is skipped, and still counts for the line numbers. Any other
line is read as JSON: a vertical tab, a form feed, a control character or a Unicode space alone
is a bad line named by its number (or counted by ``--on-error skip``), never a blank one. The
same on every path that finds lines: the kernels' ``line_bounds`` (compiled and twin), a file's
ranges read for the object path, and a stream (a pipe, standard input, gzip), with one job or
two."""

from __future__ import annotations

import gzip
import json
import sys
import types

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from contextpolicy._tables import JSON_WHITESPACE
from contextpolicy.jsonl.files import FileRange, InputFile, read_range
from tests.support.cli import run

BLANK = [b"", b" ", b"\t", b"\r", b" \t\r  \r"]
# Whitespace to Python or to Unicode, never to JSON; control characters; the bytes of U+0085
# and U+00A0 alone (not UTF-8) and in UTF-8; the line and ideographic spaces.
NOT_BLANK = [b"\x0b", b"\x0c", b" \x0c\t", b"\r\x0b", b"\x1c", b"\x1d", b"\x1e", b"\x1f",
             b"\x00", b"\x85", b"\xa0", "\u0085".encode(), "\u00a0".encode(),
             "\u2028".encode(), "\u3000".encode()]
VALID = b'{"id":"ok","messages":[{"role":"user","content":"hi"}]}'


def test_json_whitespace_is_what_rfc_8259_says():
    assert sorted(JSON_WHITESPACE) == sorted(b" \t\n\r")


def expected_numbers(lines: list[bytes]) -> list[int]:
    """The numbers (from 1) of the lines that are not blank, worked out here."""
    return [k + 1 for k, line in enumerate(lines) if any(b not in b" \t\r" for b in line)]


def bounds(kernel, data: bytes, offset: int = 0, length: int | None = None) -> list[int]:
    count, numbers, starts, stops = kernel.line_bounds(
        data, offset, len(data) - offset if length is None else length)
    return [count, numbers.tolist(), starts.tolist(), stops.tolist()]


def test_line_bounds_skip_only_json_whitespace(differential):
    lines = [VALID, *BLANK, *NOT_BLANK, b" " + VALID + b"\r"]
    data = b"\n".join(lines)
    count, numbers, starts, stops = differential(bounds, data)
    assert count == len(lines)
    assert numbers == expected_numbers(lines)
    assert [data[a:b] for a, b in zip(starts, stops, strict=True)] == [
        line for line in lines if any(b not in b" \t\r" for b in line)]
    # A range in the middle of a buffer, its last line without a line feed.
    inner = b"\n".join([b"\x0c", b" ", b"\x0b"])
    count, numbers, starts, _ = differential(bounds, b"x\n" + inner + b"\ny", 2, len(inner))
    assert (count, numbers, starts) == (3, [1, 3], [2, 6])


lines_strategy = st.lists(st.lists(st.sampled_from(
    [b" ", b"\t", b"\r", b"\x0b", b"\x0c", b"\x1c", b"\x1f", b"\xa0", b"\xc2\x85", b"{", b"a"]),
    max_size=5).map(b"".join), max_size=12)


@settings(max_examples=200, deadline=None)
@given(lines_strategy)
def test_every_path_agrees_on_which_lines_are_blank(differential, lines):
    data = b"\n".join(lines)
    want = expected_numbers(lines)
    # Every line feed ends a line, and what follows the last one (if anything) is one more.
    lines_in = data.count(b"\n") + (1 if data and not data.endswith(b"\n") else 0)
    assert differential(bounds, data)[:2] == [lines_in, want]
    # A file's range read for the object path, the lines as views of the buffer.
    count, found, _ = read_range(bytearray(data), FileRange("f", 0, len(data)))
    assert (count, [n for n, _ in found]) == (lines_in, want)


@pytest.mark.parametrize("chunk", [1, 3, 1 << 20])
def test_a_stream_skips_the_same_lines(monkeypatch, tmp_path, chunk):
    lines = [VALID, *BLANK, *NOT_BLANK, b"\x0b"]  # the last without its line feed
    data = b"\n".join(lines)

    class Pipe:
        def __init__(self) -> None:
            self.at = 0

        def read1(self, n: int = -1) -> bytes:
            piece = data[self.at:self.at + chunk]
            self.at += len(piece)
            return piece

        read = read1

    monkeypatch.setattr(sys, "stdin", types.SimpleNamespace(buffer=Pipe()))
    with InputFile("-") as source:
        found = list(source.lines())
    want = expected_numbers(lines)
    assert [n for n, _ in found] == want
    assert [line for _, line in found] == [lines[n - 1] for n in want]
    (tmp_path / "in.jsonl.gz").write_bytes(gzip.compress(data))
    with InputFile(str(tmp_path / "in.jsonl.gz")) as source:
        assert [n for n, _ in source.lines()] == want


@pytest.mark.parametrize("pure", ["0", "1"], ids=["compiled", "twin"])
@pytest.mark.parametrize("jobs", ["1", "2"])
@pytest.mark.parametrize("source", ["file", "gzip", "stdin"])
def test_a_line_of_no_json_is_a_bad_line_and_a_blank_one_is_skipped(workdir, pure, jobs, source):
    lines = [VALID, b"", b" \t\r", b"\x0b", b"\x0c", b"\r", "\u00a0".encode(), VALID, b"\x1c"]
    data = b"\n".join(lines) + b"\n"
    if source == "gzip":
        (workdir / "in.jsonl").write_bytes(gzip.compress(data))
    else:
        (workdir / "in.jsonl").write_bytes(data)
    name = "<stdin>" if source == "stdin" else "in.jsonl"
    given = ["-"] if source == "stdin" else ["in.jsonl"]
    stdin = data if source == "stdin" else None
    env = {"CONTEXTPOLICY_PURE_PYTHON": pure}
    failed = run("reduce", *given, "--policy", "policy.json", "-o", "out.jsonl", "--jobs", jobs,
                 "-q", cwd=workdir, env=env, stdin=stdin)
    assert failed.returncode == 2
    assert f"{name}:4:1: invalid JSON" in failed.stderr.decode()
    assert not (workdir / "out.jsonl").exists()
    skipped = run("reduce", *given, "--policy", "policy.json", "-o", "out.jsonl", "--jobs",
                  jobs, "--report", "report.json", "--on-error", "skip", "-q", cwd=workdir,
                  env=env, stdin=stdin)
    assert skipped.returncode == 0, skipped.stderr
    summary = json.loads((workdir / "report.json").read_text())["summary"]
    assert (summary["conversations"], summary["skipped"]) == (2, 4)
    assert [s["line"] for s in summary["skippedLines"]] == [4, 5, 7, 9]
    assert (workdir / "out.jsonl").read_bytes() == VALID + b"\n" + VALID + b"\n"
