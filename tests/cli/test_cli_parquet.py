"""``contextpolicy reduce`` with Parquet: Parquet in and out, Parquet to JSONL and back, the
report as JSON or Parquet, errors per row, atomic output."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import orjson
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from contextpolicy import synthetic
from contextpolicy.batch import reduce_table
from tests.support.cli import run

POLICY = {"mode": "reduce", "triggerChars": 2000, "targetInputChars": 1500, "steps": [
    {"id": "t", "kind": "trim", "fragmentId": "history", "targetChars": 1000,
     "grouping": {"kind": "user-turn"}, "keepGroups": 1}]}


@pytest.fixture(scope="module")
def files(tmp_path_factory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("parquet")
    chats = synthetic.corpus("chats", 3000, 11)
    table = pa.table({"id": list(range(len(chats))), "messages": chats})
    pq.write_table(table, root / "chats.parquet", row_group_size=700)
    traces = synthetic.corpus("agent-traces", 30, 11)
    with open(root / "traces.jsonl", "wb") as f:
        for i, messages in enumerate(traces):
            f.write(orjson.dumps({"id": i, "messages": messages}) + b"\n")
    (root / "policy.json").write_text(json.dumps(POLICY))
    return {"root": root, "chats": root / "chats.parquet", "traces": root / "traces.jsonl",
            "policy": root / "policy.json"}


def test_parquet_to_parquet_equals_reduce_table(files, tmp_path):
    out, report = tmp_path / "out.parquet", tmp_path / "figures.parquet"
    done = run("reduce", files["chats"], "--policy", files["policy"], "-o", out,
               "--report", report)
    assert done.returncode == 0, done.stderr
    source = pq.read_table(files["chats"])
    expected = reduce_table(source, POLICY)
    got = pq.read_table(out)
    assert got.schema.equals(source.schema)
    assert got.column("messages").to_pylist() == expected.table.column("messages").to_pylist()
    assert got.column("id").to_pylist() == list(range(3000))
    figures = pq.read_table(report)
    assert figures.column("row").to_pylist() == list(range(3000))
    assert figures.drop_columns(["row"]).to_pylist() == expected.figures.to_pylist()
    text = done.stderr.decode()
    assert "rows: columnar path" in text and "3,000" in text


@pytest.mark.parametrize("out_name", ["out.parquet", "out.jsonl"])
def test_jobs_decode_row_groups_ahead_and_change_nothing(files, tmp_path, out_name):
    outputs = {}
    for jobs in ("1", "2"):
        out, report = tmp_path / f"{jobs}-{out_name}", tmp_path / f"{jobs}-report.json"
        done = run("reduce", files["chats"], "--policy", files["policy"], "-o", out,
                   "--report", report, "-q", "--jobs", jobs)
        assert done.returncode == 0, done.stderr
        assert done.stderr == b""  # --jobs is no longer said to apply to JSONL only
        report_doc = json.loads(report.read_text())
        report_doc["summary"].pop("seconds", None)
        report_doc["summary"].pop("rate", None)
        outputs[jobs] = (out.read_bytes() if out_name.endswith(".jsonl")
                         else pq.read_table(out), report_doc["conversations"])
    assert outputs["2"][1] == outputs["1"][1]
    if out_name.endswith(".jsonl"):
        assert outputs["2"][0] == outputs["1"][0]
    else:
        assert outputs["2"][0].equals(outputs["1"][0], check_metadata=True)
        assert outputs["2"][0].column("id").to_pylist() == list(range(3000))


def test_jobs_with_bad_rows_in_later_row_groups(files, tmp_path):
    rows = [[{"role": "user", "content": f"fine {k}"}] for k in range(40)]
    rows[25] = [{"role": None, "content": "no role"}]
    bad = tmp_path / "bad.parquet"
    pq.write_table(pa.table({"messages": pa.array(rows, type=pa.list_(pa.struct([
        ("role", pa.string()), ("content", pa.string())])))}), bad, row_group_size=10)
    out = tmp_path / "out.parquet"
    done = run("reduce", bad, "--policy", files["policy"], "-o", out, "--jobs", "2")
    assert done.returncode == 2 and "row 25" in done.stderr.decode(), done.stderr
    assert not out.exists()
    done = run("reduce", bad, "--policy", files["policy"], "-o", out, "--jobs", "2",
               "--on-error", "skip", "-q")
    assert done.returncode == 0, done.stderr
    assert pq.read_table(out).column("messages").to_pylist() == rows[:25] + rows[26:]


def test_parquet_to_jsonl_and_json_report(files, tmp_path):
    out, report = tmp_path / "out.jsonl", tmp_path / "report.json"
    done = run("reduce", files["chats"], "--policy", files["policy"], "-o", out,
               "--report", report, "-q")
    assert done.returncode == 0, done.stderr
    lines = [orjson.loads(line) for line in out.read_bytes().splitlines()]
    expected = reduce_table(pq.read_table(files["chats"]), POLICY)
    assert [line["messages"] for line in lines] == expected.table.column("messages").to_pylist()
    doc = json.loads(report.read_text())
    assert len(doc["conversations"]) == 3000
    first = doc["conversations"][0]
    assert first["row"] == 0 and first["id"] == 0
    assert first["chars_after"] == expected.figures.column("chars_after")[0].as_py()
    summary = doc["summary"]
    assert summary["conversations"] == 3000
    assert summary["charsAfter"] == sum(expected.figures.column("chars_after").to_pylist())
    assert summary["columnarRows"] + summary["objectRows"] == 3000


def test_jsonl_to_parquet_and_back(files, tmp_path):
    # Agent traces mix text content and lists of blocks: the content column is Arrow's JSON.
    out = tmp_path / "traces.parquet"
    done = run("reduce", files["traces"], "--policy", files["policy"], "-o", out, "-q")
    assert done.returncode == 0, done.stderr
    as_jsonl = run("reduce", files["traces"], "--policy", files["policy"], "-q")
    expected = [orjson.loads(line) for line in as_jsonl.stdout.splitlines()]
    table = pq.read_table(out)
    content = table.schema.field("messages").type.value_type.field("content").type
    assert getattr(content, "extension_name", None) == "arrow.json"
    back = tmp_path / "back.jsonl"
    again = run("reduce", out, "--policy", files["policy"], "-o", back, "-q")
    assert again.returncode == 0, again.stderr
    lines = [orjson.loads(line) for line in back.read_bytes().splitlines()]
    assert len(lines) == len(expected) == 30

    def plain(messages):  # Arrow holds every field: a missing key reads back as null
        return [{k: v for k, v in m.items() if v is not None} for m in messages]

    assert [plain(line["messages"]) for line in lines] == [
        plain(line["messages"]) for line in expected]


def test_bad_rows_fail_or_are_skipped(files, tmp_path):
    rows = [[{"role": "user", "content": "fine"}], [{"role": None, "content": "no role"}],
            [{"role": "user", "content": "also fine"}]]
    bad = tmp_path / "bad.parquet"
    pq.write_table(pa.table({"messages": pa.array(rows, type=pa.list_(pa.struct([
        ("role", pa.string()), ("content", pa.string())])))}), bad)
    out = tmp_path / "out.parquet"
    done = run("reduce", bad, "--policy", files["policy"], "-o", out)
    assert done.returncode == 2
    assert "row 1" in done.stderr.decode() and "messages[1][0].role" in done.stderr.decode()
    assert not out.exists()  # nothing is left by a failed run
    done = run("reduce", bad, "--policy", files["policy"], "-o", out, "--on-error", "skip")
    assert done.returncode == 0, done.stderr
    assert pq.read_table(out).column("messages").to_pylist() == [rows[0], rows[2]]
    assert "skipped" in done.stderr.decode()


def test_parquet_input_errors(files, tmp_path):
    notparquet = tmp_path / "x.parquet"
    notparquet.write_bytes(b"PAR1 but not really")
    done = run("reduce", notparquet, "--policy", files["policy"], "-o", tmp_path / "o.parquet")
    assert done.returncode == 2 and "cannot read as Parquet" in done.stderr.decode()
    other = tmp_path / "other.parquet"
    pq.write_table(pa.table({"text": ["a"]}), other)
    done = run("reduce", other, "--policy", files["policy"], "-o", tmp_path / "o.parquet")
    assert done.returncode == 2 and "no column 'messages'" in done.stderr.decode()
    done = run("reduce", files["traces"], "--policy", files["policy"], "--report",
               tmp_path / "r.parquet")
    assert done.returncode == 2 and "for JSONL input the report is JSON" in done.stderr.decode()


PEAK = """\
import resource, sys
from contextpolicy.cli import main

rc = main(["reduce", sys.argv[1], "--policy", sys.argv[2], "-o", sys.argv[3], "-q",
           "--jobs", sys.argv[4]])
if sys.platform == "linux":
    peak = int(open("/proc/self/status").read().split("VmHWM:")[1].split()[0]) * 1024
else:
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * (1 if sys.platform == "darwin"
                                                                 else 1024)
print(peak)
sys.exit(rc)
"""


@pytest.mark.skipif(sys.platform == "win32", reason="peak memory is read from resource/proc")
@pytest.mark.parametrize("jobs", ["1", "2"])
def test_memory_stays_near_a_few_row_groups(files, tmp_path, jobs):
    chats = synthetic.corpus("chats", 4000, 12)
    table = pa.table({"id": list(range(4000)), "messages": chats})
    group = 2000
    per_group = table.nbytes / 2
    # Eight row groups, then thirty-two: past the first few groups the allocator has what it
    # keeps, and the peak must not grow with the file.
    pq.write_table(pa.concat_tables([table] * 4), tmp_path / "small.parquet",
                   row_group_size=group)
    big = pa.concat_tables([table] * 16)
    pq.write_table(big, tmp_path / "big.parquet", row_group_size=group)
    assert big.nbytes > 30 * per_group  # the big file holds thirty-two row groups
    del big
    peaks: dict[str, int] = {}
    # Read ahead by two readers, the peak also depends on how the threads met: the same file's
    # peak varies by about three row groups from run to run (files of 8, 32 and 64 row groups
    # peaked at 24-28 row groups each), so each is the lower of two runs.
    for name in ("small", "big"):
        for _ in range(1 if jobs == "1" else 2):
            done = subprocess.run([sys.executable, "-c", PEAK, str(tmp_path / f"{name}.parquet"),
                                   str(files["policy"]), str(tmp_path / f"{name}-out.parquet"),
                                   jobs],
                                  capture_output=True, text=True)
            assert done.returncode == 0, done.stderr
            peak = int(done.stdout.split()[-1])
            peaks[name] = min(peaks.get(name, peak), peak)
    # Four times the rows cost less than two row groups more: the file is streamed. Read ahead
    # by two readers, the allocator also keeps some of what one thread decoded and another
    # freed (cli/row_groups.py), and the peak varies as said: still far from what a run that
    # held the file would add (its 24 more row groups, and their output).
    assert peaks["big"] - peaks["small"] < (2 if jobs == "1" else 10) * per_group, (
        peaks, per_group)


def test_deep_json_content_is_one_line_error(files, tmp_path):
    depth = 900
    text = '[{"type":"tool_result","tool_use_id":"a","content":' * depth + '"x"' + "}]" * depth
    storage = pa.struct([("role", pa.string()), ("content", pa.string())])
    typed = pa.list_(pa.struct([("role", pa.string()), ("content", pa.json_())]))
    arr = pa.array([[{"role": "user", "content": text}]], type=pa.list_(storage)).cast(typed)
    deep = tmp_path / "deep.parquet"
    pq.write_table(pa.table({"messages": arr}), deep)
    done = run("reduce", deep, "--policy", files["policy"], "-o", tmp_path / "out.jsonl")
    err = done.stderr.decode()
    assert done.returncode == 2 and "Traceback" not in err, err
    assert "row 0" in err and "too-deep" in err


def test_empty_inputs_make_valid_files(files, tmp_path):
    empty = tmp_path / "empty.jsonl"
    empty.write_bytes(b"")
    out = tmp_path / "empty.parquet"
    done = run("reduce", empty, "--policy", files["policy"], "-o", out, "-q")
    assert done.returncode == 0, done.stderr
    assert pq.read_table(out).num_rows == 0
    none = tmp_path / "none.parquet"
    pq.write_table(pq.read_table(files["chats"]).slice(0, 0), none)
    again = tmp_path / "again.parquet"
    done = run("reduce", none, "--policy", files["policy"], "-o", again, "-q")
    assert done.returncode == 0, done.stderr
    assert pq.read_table(again).schema.equals(pq.read_table(none).schema)
