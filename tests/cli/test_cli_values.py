"""``contextpolicy reduce`` where values cross between JSONL and Parquet, on the compiled kernel
and on the twin: bytes that are not UTF-8 in any string of a Parquet file are the one-line
error naming the file, the row, the message and the field (exit 2, no output left); a value an
output format cannot hold as it is (an integer beyond 64 bits, or beyond 2**53 in a double
column, for Parquet; NaN or an infinity for JSON) is refused where it is, never changed."""

from __future__ import annotations

import json
from decimal import Decimal
from pathlib import Path

import orjson
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from tests.support.cli import leftovers, run

TOKEN = b"QZJXQZ"  # replaced in a file's bytes by bytes that are not UTF-8
TRIM = {"mode": "reduce", "triggerChars": 50, "targetInputChars": 40, "steps": [
    {"id": "t", "kind": "trim", "fragmentId": "history", "targetChars": 10, "keepGroups": 0,
     "grouping": {"kind": "user-turn"}}]}
VALIDATE = {"mode": "validate"}


@pytest.fixture(params=["c", "py"])
def env(request) -> dict[str, str]:
    """The command line on each kernel."""
    return {"CONTEXTPOLICY_PURE_PYTHON": "0" if request.param == "c" else "1"}


@pytest.fixture
def policies(tmp_path) -> dict[str, Path]:
    out = {}
    for name, doc in (("trim", TRIM), ("validate", VALIDATE)):
        out[name] = tmp_path / f"{name}.json"
        out[name].write_text(json.dumps(doc))
    return out


def one_error(done, *says: str) -> str:
    """The run failed with exit 2 and said one line, holding ``says``."""
    err = done.stderr.decode()
    assert done.returncode == 2, err
    assert "Traceback" not in err and "Exception ignored" not in err, err
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    for said in says:
        assert said in lines[0], lines[0]
    return lines[0]


def nothing_left(folder: Path, *names: str) -> None:
    assert not [n for n in names if (folder / n).exists()]
    assert leftovers(folder) == []


def rows() -> list[list[dict]]:
    row = [
        {"role": "system", "content": "be brief", "name": None, "tool_call_id": None,
         "tool_calls": None},
        {"role": "user", "content": "hello " * 10, "name": "ann", "tool_call_id": None,
         "tool_calls": None},
        {"role": "assistant", "content": None, "name": None, "tool_call_id": None,
         "tool_calls": [{"id": "c1", "type": "function",
                         "function": {"name": "find", "arguments": "{}"}}]},
        {"role": "tool", "content": "found " * 10, "name": None, "tool_call_id": "c1",
         "tool_calls": None},
        {"role": "user", "content": "and?", "name": None, "tool_call_id": None,
         "tool_calls": None},
    ]
    return [json.loads(json.dumps(row)) for _ in range(3)]


def bad_parquet(path: Path, table: pa.Table, bad: bytes = b"\xff") -> Path:
    """``table`` written plainly (no dictionary, no compression, no statistics), ``TOKEN``
    then replaced by ``bad`` in the file's bytes: a file as a writer that does not validate
    leaves it."""
    pq.write_table(table, path, use_dictionary=False, compression="NONE",
                   write_statistics=False)
    raw = path.read_bytes()
    assert raw.count(TOKEN) == 1
    path.write_bytes(raw.replace(TOKEN, bad.ljust(len(TOKEN), b"_")))
    return path


SLOTS = {
    "role": ((1, 0, "role"), "messages[1][0].role"),
    "name": ((1, 1, "name"), "messages[1][1].name"),
    "tool_calls-id": ((1, 2, "tool_calls", 0, "id"), "messages[1][2].tool_calls[0].id"),
    "function-name": ((1, 2, "tool_calls", 0, "function", "name"),
                      "messages[1][2].tool_calls[0].function.name"),
    "tool_call_id": ((1, 3, "tool_call_id"), "messages[1][3].tool_call_id"),
    "content": ((1, 4, "content"), "messages[1][4].content"),
    "id-column": (None, "id[1]"),
}
OUTPUTS = {
    "jsonl": ["o.jsonl"],
    "parquet": ["o.parquet"],
    "parquet+json-report": ["o.parquet", "--report", "r.json"],
    "jsonl+parquet-report": ["o.jsonl", "--report", "r.parquet"],
    "parquet+parquet-report": ["o.parquet", "--report", "r.parquet"],
}


def bad_table(slot: tuple | None) -> pa.Table:
    data = rows()
    ids = ["r0", "r1", "r2"]
    if slot is None:
        ids[1] = TOKEN.decode()
    else:
        holder = data
        for step in slot[:-1]:
            holder = holder[step]
        holder[slot[-1]] = "ok" + TOKEN.decode()
    return pa.table({"id": ids, "messages": data})


@pytest.mark.parametrize("output", list(OUTPUTS))
@pytest.mark.parametrize("field", list(SLOTS))
def test_parquet_with_bytes_that_are_not_utf8_is_one_line_and_exit_2(env, policies, tmp_path,
                                                                     field, output):
    slot, path = SLOTS[field]
    source = bad_parquet(tmp_path / "in.parquet", bad_table(slot))
    args = OUTPUTS[output]
    done = run("reduce", source, "--policy", policies["trim"], "-o", tmp_path / args[0],
               *[tmp_path / a if a.startswith("r.") else a for a in args[1:]], "-q", env=env)
    one_error(done, f"{source}: row 1: ", path, "not UTF-8", "0xff", "[invalid-utf8]")
    nothing_left(tmp_path, "o.jsonl", "o.parquet", "r.json", "r.parquet")


@pytest.mark.parametrize("output", ["o.jsonl", "o.parquet"])
def test_a_row_that_is_not_utf8_is_skipped_on_request(env, policies, tmp_path, output):
    source = bad_parquet(tmp_path / "in.parquet", bad_table(SLOTS["role"][0]))
    done = run("reduce", source, "--policy", policies["validate"], "-o", tmp_path / output,
               "--on-error", "skip", "-q", env=env)
    assert done.returncode == 0, done.stderr
    assert f"skipped {source}: row 1: " in done.stderr.decode()
    got = (pq.read_table(tmp_path / output).to_pylist() if output.endswith(".parquet") else
           [orjson.loads(line) for line in (tmp_path / output).read_bytes().splitlines()])
    assert [row["id"] for row in got] == ["r0", "r2"]
    assert [row["messages"] for row in got] == [rows()[0], rows()[2]]


# ---------------------------------------------------------------------------------------------
# JSONL to Parquet: integers as they are, or the line refused


def line(i: int, **extra) -> bytes:
    return orjson.dumps({"id": i, "messages": [{"role": "user", "content": f"hi {i}"}]}
                        | extra, option=orjson.OPT_PASSTHROUGH_DATACLASS)


def big(i: int, key: str, digits: str) -> bytes:
    # orjson writes no integer beyond 64 bits: the line is written by hand
    return (f'{{"id":{i},"messages":[{{"role":"user","content":"hi"}}],"{key}":{digits}}}'
            .encode())


@pytest.mark.parametrize(("value", "why"), [
    (str(2**64), "does not fit a Parquet integer column"),
    (str(2**63), "does not fit a Parquet integer column"),
    (str(-2**63 - 1), "does not fit a Parquet integer column"),
    ("123456789012345678901234567890", "does not fit a Parquet integer column"),
])
@pytest.mark.parametrize("stdin", [False, True])
def test_jsonl_to_parquet_refuses_an_integer_beyond_64_bits(env, policies, tmp_path, value,
                                                            why, stdin):
    lines = [line(0, n=5), line(1, n=7), big(2, "n", value), line(3, n=5)]
    source = tmp_path / "in.jsonl"
    source.write_bytes(b"\n".join(lines) + b"\n")
    out = tmp_path / "o.parquet"
    if stdin:
        done = run("reduce", "-", "--policy", policies["validate"], "-o", out, "-q",
                   stdin=source.read_bytes(), env=env)
    else:
        done = run("reduce", source, "--policy", policies["validate"], "-o", out, "-q",
                   env=env)
    name = "<stdin>" if stdin else str(source)
    one_error(done, f"{name}:3: n: the integer {value} {why}", "quote the number",
              "write JSONL")
    nothing_left(tmp_path, "o.parquet")


def test_jsonl_to_parquet_names_the_line_and_the_key_path(env, policies, tmp_path):
    # Blank lines before it, inside a run of lines the kernel reduces as one: the line is
    # still the line of the file.
    deep = (b'{"id":9,"messages":[{"role":"user","content":"hi","metadata":{"n":'
            + str(-2**70).encode() + b'}}]}')
    source = tmp_path / "in.jsonl"
    source.write_bytes(line(0) + b"\n\n" + line(1) + b"\n  \n" + line(2) + b"\n" + deep + b"\n"
                       + line(4) + b"\n")
    for args in ([source], ["-"]):
        done = run("reduce", *args, "--policy", policies["validate"], "-o",
                   tmp_path / "o.parquet", "-q",
                   stdin=source.read_bytes() if args == ["-"] else None, env=env)
        name = str(source) if args == [source] else "<stdin>"
        one_error(done, f"{name}:6: messages[0].metadata.n: the integer {-2**70} ")
    nothing_left(tmp_path, "o.parquet")


@pytest.mark.parametrize("lines_before", [3, 5000])  # the same chunk, and another chunk
def test_jsonl_to_parquet_refuses_an_integer_a_double_column_cannot_hold(env, policies,
                                                                        tmp_path, lines_before):
    lines = [line(i, x=i) for i in range(lines_before)]
    lines[1] = big(1, "x", str(2**53 + 1))
    lines.append(line(lines_before, x=0.5))
    source = tmp_path / "in.jsonl"
    source.write_bytes(b"\n".join(lines) + b"\n")
    done = run("reduce", source, "--policy", policies["validate"], "-o",
               tmp_path / "o.parquet", "-q", env=env)
    one_error(done, f"{source}:2: x: the integer {2**53 + 1} is in a field that holds "
              "fractions too, so its column is double")
    nothing_left(tmp_path, "o.parquet")


def test_jsonl_to_parquet_keeps_every_value(env, policies, tmp_path):
    # Integers stay int64; a field of integers and fractions is double, each integer exactly
    # (up to 2**53); an integer beyond 64 bits inside content stays in its JSON text.
    tool = [{"type": "tool_use", "id": "t", "name": "f", "input": {"n": 0}}]
    lines = [line(0, n=2**63 - 1, x=2**53),
             line(1, n=-2**63, x=0.5),
             orjson.dumps({"id": 2, "n": 5, "x": -2**53, "messages": [
                 {"role": "user", "content": "q"},
                 {"role": "assistant", "content": tool}]}).replace(
                 b'"n":0', b'"n":' + str(2**80).encode())]
    source = tmp_path / "in.jsonl"
    source.write_bytes(b"\n".join(lines) + b"\n")
    out = tmp_path / "o.parquet"
    done = run("reduce", source, "--policy", policies["validate"], "-o", out, "-q", env=env)
    assert done.returncode == 0, done.stderr
    table = pq.read_table(out)
    assert table.schema.field("n").type == pa.int64()
    assert table.schema.field("x").type == pa.float64()
    assert table.column("n").to_pylist() == [2**63 - 1, -2**63, 5]
    assert table.column("x").to_pylist() == [2.0**53, 0.5, -2.0**53]
    content = table.column("messages").to_pylist()[2][1]["content"]
    assert str(2**80) in content
    # and back to JSONL: the same integers, digit for digit
    back = tmp_path / "back.jsonl"
    done = run("reduce", out, "--policy", policies["validate"], "-o", back, "-q", env=env)
    assert done.returncode == 0, done.stderr
    got = [json.loads(b) for b in back.read_bytes().splitlines()]
    assert [g["n"] for g in got] == [2**63 - 1, -2**63, 5]
    assert got[2]["messages"][1]["content"] == [dict(tool[0], input={"n": 2**80})]


def test_jsonl_to_jsonl_keeps_integers_beyond_64_bits(env, policies, tmp_path):
    source = tmp_path / "in.jsonl"
    source.write_bytes(big(0, "n", str(2**70)) + b"\n" + line(1, n=5) + b"\n")
    out = tmp_path / "o.jsonl"
    for policy in ("validate", "trim"):
        done = run("reduce", source, "--policy", policies[policy], "-o", out, "-q", env=env)
        assert done.returncode == 0, done.stderr
        assert [json.loads(b)["n"] for b in out.read_bytes().splitlines()] == [2**70, 5]


# ---------------------------------------------------------------------------------------------
# Parquet to JSONL: every value exactly, or the row refused


def test_parquet_to_jsonl_writes_decimals_and_64_bit_integers_exactly(env, policies,
                                                                       tmp_path):
    table = pa.table({
        "id": pa.array([Decimal("12345678901234567890.1234567890"), Decimal("-0.5")],
                       pa.decimal128(30, 10)),
        "big": pa.array([Decimal(2**200), Decimal(-(2**100))], pa.decimal256(76, 0)),
        "u": pa.array([2**64 - 1, 0], pa.uint64()),
        "i": pa.array([-2**63, 2**63 - 1], pa.int64()),
        "messages": [[{"role": "user", "content": "hi"}]] * 2,
    })
    source = tmp_path / "in.parquet"
    pq.write_table(table, source)
    out, report = tmp_path / "o.jsonl", tmp_path / "r.json"
    done = run("reduce", source, "--policy", policies["validate"], "-o", out, "--report",
               report, "-q", env=env)
    assert done.returncode == 0, done.stderr
    got = out.read_bytes().splitlines()
    assert got[0].startswith(b'{"id":12345678901234567890.1234567890,"big":'
                             + str(2**200).encode() + b',"u":18446744073709551615,'
                             b'"i":-9223372036854775808,')
    assert got[1].startswith(b'{"id":-0.5000000000,"big":' + str(-(2**100)).encode())
    doc = json.loads(report.read_text(), parse_float=Decimal)
    assert [c["id"] for c in doc["conversations"]] == [
        Decimal("12345678901234567890.1234567890"), Decimal("-0.5000000000")]


@pytest.mark.parametrize(("value", "said"), [
    (float("nan"), "NaN"), (float("inf"), "Infinity"), (float("-inf"), "-Infinity")])
@pytest.mark.parametrize("where", ["column", "message"])
def test_parquet_to_jsonl_refuses_what_json_cannot_hold(env, policies, tmp_path, value, said,
                                                         where):
    meta = pa.struct([("score", pa.float32())])
    message = pa.struct([("role", pa.string()), ("content", pa.string()), ("meta", meta)])
    scores = [1.5, value, 2.5]
    table = pa.table({
        "id": [0, 1, 2],
        "score": scores if where == "column" else [0.0] * 3,
        "messages": pa.array([[{"role": "user", "content": "hi", "meta": {
            "score": s if where == "message" else 0.0}}] for s in scores],
            type=pa.list_(message)),
    })
    source = tmp_path / "in.parquet"
    pq.write_table(table, source)
    done = run("reduce", source, "--policy", policies["validate"], "-o", tmp_path / "o.jsonl",
               "-q", env=env)
    path = "score[1]" if where == "column" else "messages[1][0].meta.score"
    one_error(done, f"{source}: row 1: {path}: holds {said}, which JSON cannot write",
              "[non-finite-number]")
    nothing_left(tmp_path, "o.jsonl")
    # Parquet holds them: Parquet to Parquet writes them as they are.
    done = run("reduce", source, "--policy", policies["validate"], "-o",
               tmp_path / "o.parquet", "-q", env=env)
    assert done.returncode == 0, done.stderr
    assert str(pq.read_table(tmp_path / "o.parquet").to_pylist()) == str(table.to_pylist())


def test_parquet_to_jsonl_of_a_type_json_has_not_is_one_line(env, policies, tmp_path):
    table = pa.table({"id": [0, 1], "blob": [b"ab", b"\x00\xff"],
                      "messages": [[{"role": "user", "content": "hi"}]] * 2})
    source = tmp_path / "in.parquet"
    pq.write_table(table, source)
    done = run("reduce", source, "--policy", policies["validate"], "-o", tmp_path / "o.jsonl",
               "-q", env=env)
    one_error(done, f"{source}: row 0: column 'blob' holds a value JSON cannot hold")
    nothing_left(tmp_path, "o.jsonl")
