"""Where JSON that cannot be read goes wrong, said one way everywhere, and the mistakes of a first
contact with the library: a byte order mark at the start of a file (accepted), bytes that are
not UTF-8 (named, with their line and byte column), a transcript where a plan was expected.

Positions are checked against an oracle that does not share the code under test: documents
built so that the byte at fault is known, whatever characters (of one to four bytes) and lines
come before it. The JSONL runner gives the same positions on both kernels, with the byte path
on and off.
"""

from __future__ import annotations

import asyncio
import gzip
import json

import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from contextpolicy import ContextPlan, ContextPlanError, process_context
from contextpolicy.core import aprocess_context, astream_context
from contextpolicy.jsonl import runner
from contextpolicy.jsonl.diagnose import BOM, json_problem, position, utf8_problem
from contextpolicy.jsonl.files import InputFile
from contextpolicy.jsonl.worker import LineWorker

SETTINGS = settings(max_examples=120, deadline=None,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large,
                                           HealthCheck.function_scoped_fixture])
SEED_POLICY = {"mode": "reduce", "triggerChars": 50, "targetInputChars": 40, "steps": [
    {"id": "trim", "kind": "trim", "fragmentId": "history", "keepGroups": 1,
     "targetChars": 20}]}

# Text of characters of one to four bytes in UTF-8 (no lone surrogates, which are not UTF-8).
texts = st.text(st.characters(blacklist_categories=("Cs",)), max_size=12)
values = st.recursive(
    st.none() | st.booleans() | st.integers() | texts,
    lambda children: st.lists(children, max_size=3)
    | st.dictionaries(texts, children, max_size=3), max_leaves=8)


def expected_position(data: bytes, offset: int) -> tuple[int, int]:
    before = data[:offset].split(b"\n")
    return len(before), len(before[-1]) + 1


# ---------------------------------------------------------------------------------------------
# positions: line and byte column


@SETTINGS
@given(st.lists(values, min_size=1, max_size=4), st.sampled_from([None, 1, 2]),
       st.sampled_from([b"#", b"}", b"tru", b"'a'", b"\x01"]))
def test_a_syntax_error_is_placed_at_its_byte(items, indent, garbage):
    # An array whose items read, then garbage where the next value should start: the garbage
    # is the first byte orjson cannot read.
    prefix = json.dumps(items, ensure_ascii=False, indent=indent)[:-1].rstrip()
    data = (prefix + ",\n ").encode() + garbage + b"]"
    offset = len((prefix + ",\n ").encode())
    with pytest.raises(orjson.JSONDecodeError) as info:
        orjson.loads(data)
    problem = json_problem(data, info.value)
    assert (problem.line, problem.column) == expected_position(data, offset)
    assert problem.message.startswith(f"invalid JSON: {info.value.msg} (found ")
    assert "(char " not in problem.message


@SETTINGS
@given(st.lists(values, min_size=1, max_size=4), st.sampled_from([None, 1]),
       st.integers(0x80, 0xFF), st.data())
def test_a_byte_that_is_not_utf8_is_named_at_its_offset(items, indent, byte, data):
    text = json.dumps(items, ensure_ascii=False, indent=indent)
    at = data.draw(st.integers(0, len(text)))  # a character boundary
    head = text[:at].encode()
    raw = head + bytes([byte]) + text[at:].encode()
    # A byte of 0x80-0xFF where a character starts is never UTF-8 there, whatever follows.
    with pytest.raises(orjson.JSONDecodeError) as info:
        orjson.loads(raw)
    problem = json_problem(raw, info.value)
    assert (problem.line, problem.column) == expected_position(raw, len(head))
    assert problem.message.startswith(f"byte 0x{byte:02X} is not UTF-8 (")
    assert "iconv -f latin1 -t utf-8" in problem.message
    assert utf8_problem(raw) == problem
    assert utf8_problem(text.encode()) is None


def test_position_and_the_name_of_a_place():
    data = "a\nbé\n\nc".encode()
    assert [position(data, k) for k in range(len(data))] == [
        (1, 1), (1, 2), (2, 1), (2, 2), (2, 3), (2, 4), (3, 1), (4, 1)]
    problem = json_problem(b"\n [1,]", _error(b"\n [1,]"))  # at the trailing comma
    assert problem.message == "invalid JSON: trailing comma is not allowed (found ',')"
    assert problem.at("f.json") == f"f.json:2:4: {problem.message}"
    assert problem.at("f.jsonl", first_line=7) == f"f.jsonl:8:4: {problem.message}"


def _error(data: bytes) -> orjson.JSONDecodeError:
    try:
        orjson.loads(data)
    except orjson.JSONDecodeError as exc:
        return exc
    raise AssertionError(data)


# ---------------------------------------------------------------------------------------------
# the runner: the same error and column on both kernels, byte path on and off


def run_lines(kernel, lines: list[bytes], byte_path: bool) -> list[runner.LineResult]:
    from contextpolicy import _kernel

    previous = _kernel.use(kernel)
    try:
        with pytest.MonkeyPatch.context() as patch:
            patch.setattr(LineWorker, "byte_path", byte_path)
            return list(runner.process_lines([list(enumerate(lines, 1))], SEED_POLICY))
    finally:
        _kernel.use(previous)


@SETTINGS
@given(texts, st.integers(0x80, 0xFF), st.data())
def test_the_runner_names_the_byte_on_both_kernels(kernels, content, byte, data):
    good = json.dumps({"id": 1, "messages": [{"role": "user", "content": content}]},
                      ensure_ascii=False).encode()
    escaped = json.dumps(content, ensure_ascii=False)[1:-1]  # as the line holds it
    cut = data.draw(st.integers(0, len(escaped)))  # a character boundary inside the content
    at = good.index(b'"content": "') + len(b'"content": "') + len(escaped[:cut].encode())
    bad = good[:at] + bytes([byte]) + good[at:]
    outcomes = {(k.IMPLEMENTATION, path): [(r.line, r.error, r.column, r.output is None)
                                           for r in run_lines(k, [good, bad], path)]
                for k in kernels for path in (True, False)}
    expected = json_problem(bad, _error(bad), jsonl=True)
    assert expected.column == at + 1
    for found in outcomes.values():
        assert found[1] == (2, expected.message, at + 1, True)
        assert found[0][1:] == (None, 0, False)


def test_the_runner_gives_a_json_array_its_hint(kernels):
    lines = [b"[", b'[{"id": 1, "messages": []}]', b'[{"role": "user", "content": "hi"}]', b"{"]
    for kernel in kernels:
        for path in (True, False):
            results = run_lines(kernel, lines, path)
            assert [r.column for r in results] == [2, 0, 0, 2]
            assert "starts a JSON array" in results[0].error and "jq -c '.[]'" in results[0].error
            assert results[1].error.endswith("convert a file that is one JSON array with "
                                             "jq -c '.[]'")
            assert "a JSON array of messages" in results[2].error
            assert results[3].error.endswith("convert it with jq -c .")


# ---------------------------------------------------------------------------------------------
# a byte order mark at the start of a file: left out on every way a file is read


class OneByteAtATime:
    """A pipe that hands over one byte per read."""

    def __init__(self, data: bytes) -> None:
        self.data = data

    def read1(self, n: int = -1) -> bytes:
        head, self.data = self.data[:1], self.data[1:]
        return head

    read = read1

    def close(self) -> None:
        pass


LINES = [b'{"id": 1, "messages": []}', b"", b'{"id": 2, "messages": []}']


@pytest.mark.parametrize("kind", ["plain", "gzip"])
@pytest.mark.parametrize("marked", [False, True])
def test_input_files_leave_out_a_byte_order_mark(tmp_path, kind, marked):
    data = (BOM if marked else b"") + b"\n".join(LINES) + b"\n"
    path = tmp_path / ("in.jsonl" + (".gz" if kind == "gzip" else ""))
    path.write_bytes(gzip.compress(data) if kind == "gzip" else data)
    with InputFile(str(path)) as source:
        assert list(source.lines()) == [(1, LINES[0]), (3, LINES[2])]
        assert source.position == len(data)
    if kind == "plain":
        with InputFile(str(path)) as source:
            (whole,) = source.ranges(1 << 20)
            assert (whole.offset, whole.length) == (3 if marked else 0, len(data) - whole.offset)
            assert source.position == len(data)


@pytest.mark.parametrize("data, lines", [
    (BOM + b'{"a": 1}\n', [(1, b'{"a": 1}')]),
    (BOM, []),
    (BOM[:2], [(1, BOM[:2])]),  # not a BOM: the bytes as they are (an error later)
    (BOM[:2] + b"x\n", [(1, BOM[:2] + b"x")]),
    (b"\xef\n" + BOM + b"{}\n", [(1, b"\xef"), (2, BOM + b"{}")]),  # only at the start
    (b"", []),
])
def test_a_byte_order_mark_split_over_reads(tmp_path, data, lines):
    (tmp_path / "x").write_bytes(b"")
    with InputFile(str(tmp_path / "x")) as source:
        source._stream = OneByteAtATime(data)  # type: ignore[assignment]
        assert list(source.lines()) == lines
        assert source.position == len(data)


def test_a_file_of_only_a_byte_order_mark_has_no_range(tmp_path):
    (tmp_path / "x").write_bytes(BOM)
    with InputFile(str(tmp_path / "x")) as source:
        assert list(source.ranges(1 << 20)) == []


# ---------------------------------------------------------------------------------------------
# a transcript where a plan was expected


MESSAGES = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"},
            {"role": "assistant", "content": "Hello"}, {"role": "user", "content": "Bye?"}]


def _all_calls(plan: object) -> list[BaseException]:
    errors: list[BaseException] = []

    async def both() -> None:
        for call in (lambda: aprocess_context(plan, {"mode": "validate"}),):
            try:
                await call()
            except ContextPlanError as exc:
                errors.append(exc)
        try:
            async for _ in astream_context(plan, {"mode": "validate"}):
                pass
        except ContextPlanError as exc:
            errors.append(exc)

    for options in ({}, {"on_step_error": "continue"}):
        try:
            process_context(plan, {"mode": "validate"}, **options)
        except ContextPlanError as exc:
            errors.append(exc)
    asyncio.run(both())
    return errors


@pytest.mark.parametrize("given_as", [list, tuple])
def test_processing_a_list_of_messages_points_to_from_messages(pipeline_kernel, given_as):
    errors = _all_calls(given_as(MESSAGES))
    assert len(errors) == 4  # process_context (both of its ways), aprocess, astream
    for exc in errors:
        assert exc.codes == ["invalid-plan"]
        assert str(exc) == (
            "invalid context plan: <root>: expected a ContextPlan or a mapping, got a "
            f"{given_as.__name__}: for a chat transcript (a list of messages), make the plan "
            "with ContextPlan.from_messages(messages) [invalid-plan]")
    # and what it points to works
    assert process_context(ContextPlan.from_messages(MESSAGES), {"mode": "validate"})


def test_processing_a_transcript_dict_points_to_from_messages(pipeline_kernel):
    errors = _all_calls({"id": "t", "messages": MESSAGES})
    assert len(errors) == 4
    for exc in errors:
        assert exc.codes == ["invalid-plan"]
        assert "ContextPlan.from_messages(transcript[\"messages\"])" in str(exc)


def test_what_is_neither_a_list_nor_a_mapping_is_named_by_its_type(pipeline_kernel):
    for value in ("text", None, 3):
        with pytest.raises(ContextPlanError, match=f"got {type(value).__name__} "):
            process_context(value, {"mode": "validate"})  # type: ignore[arg-type]
