"""The ``[spark]`` extra: ``reduce_dataframe`` and ``reduce_jsonl`` on a local Spark session
(``local[2]``) the module starts and stops, once with each kernel in the Python workers,
Parquet in and Parquet out, equal to ``reduce_table`` in one process. Marked ``extras``: the
main suite deselects it, and CI runs it with the other extras (``pytest -m extras``)."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from typing import Any

import orjson
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from conftest import KERNEL_PARAMS, load_kernel
from contextpolicy import ContextPlanError, ContextPolicyError, _kernel, synthetic
from contextpolicy.batch import reduce_table
from tests.support.spark import local_session
from tests.support.tables import corpus_rows

pytestmark = [pytest.mark.extras, pytest.mark.filterwarnings(
    "ignore:PySpark does not yet fully support pandas:FutureWarning")]

POLICY = {"mode": "reduce", "triggerChars": 2000, "targetInputChars": 1500, "steps": [
    {"id": "t", "kind": "trim", "fragmentId": "history", "targetChars": 1000,
     "grouping": {"kind": "user-turn"}, "keepGroups": 1}]}
COMPRESS = {"mode": "reduce", "triggerChars": 2000, "steps": [
    {"id": "c", "kind": "compress", "fragmentId": "history", "handlerId": "sum",
     "targetChars": 100, "keepGroups": 1}]}


@pytest.fixture(scope="module", params=KERNEL_PARAMS)
def spark(request) -> Iterator[Any]:
    """A session whose Python workers run the kernel of the parameter, the driver too."""
    impl = load_kernel(request.param)
    previous = _kernel.use(impl)
    try:
        yield from local_session(pure=request.param == "py")
    finally:
        _kernel.use(previous)


def words() -> Any:
    return lambda text: len(text.split())


class Builds:
    """A handlers factory that writes the process it ran in to a file, one line a call."""

    def __init__(self, path: str) -> None:
        self.path = path

    def __call__(self) -> dict[str, Any]:
        with open(self.path, "a") as f:
            f.write(f"{os.getpid()}\n")
        return {"sum": lambda request: [
            {"role": "assistant", "content": f"summary of {len(request.content)}"}]}


def _kernels_of_workers(batches: Iterator[Any]) -> Iterator[Any]:
    from contextpolicy import kernel_info

    for batch in batches:
        yield pa.RecordBatch.from_pydict({"impl": [kernel_info()["implementation"]]
                                          * batch.num_rows})


def write(tmp_path, table: Any, files: int = 3) -> str:
    """``table`` as a folder of ``files`` Parquet files (a partition each, or more)."""
    folder = tmp_path / "in"
    folder.mkdir()
    step = -(-table.num_rows // files)
    for k in range(files):
        pq.write_table(table.slice(k * step, step), folder / f"part-{k}.parquet",
                       row_group_size=200)
    return str(folder)


def test_workers_run_the_kernel_of_the_session(spark):
    got = spark.range(4).mapInArrow(_kernels_of_workers, "impl string").collect()
    assert {row["impl"] for row in got} == {_kernel.kernel_info()["implementation"]}


@pytest.mark.parametrize("corpus", ["chats", "agent-traces"])
def test_parquet_in_parquet_out_equals_one_process(spark, tmp_path, corpus):
    from contextpolicy.batch.spark import reduce_dataframe

    rows = corpus_rows(corpus, 1200 if corpus == "chats" else 300, 31)
    table = pa.table({"id": list(range(len(rows))), "messages": rows})
    df = spark.read.parquet(write(tmp_path, table))
    schema = df.schema.json()
    out = reduce_dataframe(df, POLICY)
    assert df.schema.json() == schema  # the caller's DataFrame is as it was
    assert out.columns == ["id", "messages", "figures"]
    out.write.parquet(str(tmp_path / "out"))
    got = pq.read_table(tmp_path / "out").sort_by("id")
    expected = reduce_table(pq.read_table(tmp_path / "in").sort_by("id"), POLICY)
    assert got.column("messages").to_pylist() == expected.table.column("messages").to_pylist()
    assert got.column("figures").to_pylist() == expected.figures.to_pylist()
    reduced = sum(f["messages_after"] < f["messages_before"]
                  for f in got.column("figures").to_pylist())
    assert reduced > 0


def test_without_figures_the_schema_is_the_input_s(spark, tmp_path):
    from contextpolicy.batch.spark import reduce_dataframe

    rows = synthetic.corpus("chats", 300, 32)
    table = pa.table({"id": list(range(300)), "messages": rows})
    df = spark.read.parquet(write(tmp_path, table, files=2))
    out = reduce_dataframe(df, POLICY, figures_column=None)
    assert out.schema == df.schema
    got = sorted(out.collect(), key=lambda row: row["id"])
    expected = reduce_table(table, POLICY).table.column("messages").to_pylist()
    assert [[m.asDict() for m in row["messages"]] for row in got] == expected


def test_counter_and_handlers_built_once_per_worker(spark, tmp_path):
    from contextpolicy.batch.spark import reduce_dataframe

    rows = synthetic.corpus("chats", 600, 33)
    table = pa.table({"id": list(range(600)), "messages": rows})
    df = spark.read.parquet(write(tmp_path, table, files=6))
    builds = Builds(str(tmp_path / "builds.txt"))
    out = reduce_dataframe(df, COMPRESS, make_handlers=builds).collect()
    pids = (tmp_path / "builds.txt").read_text().split()
    assert pids[0] == str(os.getpid())  # checked on the driver first
    workers = pids[1:]
    assert 1 <= len(workers) == len(set(workers)) <= 2  # once per Python worker, 6 tasks
    expected = reduce_table(table, COMPRESS, handlers=builds())
    got = sorted(out, key=lambda row: row["id"])
    assert [[m.asDict() for m in row["messages"]] for row in got] == \
        expected.table.column("messages").to_pylist()
    assert any("summary of" in str(row["messages"]) for row in got)

    counted = {"mode": "reduce", "triggerTokens": 300, "targetInputTokens": 200, "steps": [
        {"id": "t", "kind": "trim", "fragmentId": "history", "targetChars": 1000,
         "keepGroups": 1}]}
    got = sorted(reduce_dataframe(df, counted, make_counter=words).collect(),
                 key=lambda row: row["id"])
    tokens = reduce_table(table, counted, counter=words()).figures.column("tokens_after")
    assert [row["figures"]["tokens_after"] for row in got] == tokens.to_pylist()


def test_bad_input_is_an_error_on_the_driver(spark, tmp_path):
    from contextpolicy.batch.spark import reduce_dataframe, reduce_jsonl

    table = pa.table({"id": [1], "text": ["x"], "messages": [[{"role": "user",
                                                                "content": "hi"}]]})
    df = spark.read.parquet(write(tmp_path, table, files=1))
    jobs = spark.sparkContext.statusTracker().getJobIdsForGroup()
    with pytest.raises(ContextPolicyError) as info:
        reduce_dataframe(df, {**POLICY, "triggerChar": 5})
    assert [i.code for i in info.value.issues] == ["unknown-key"]
    with pytest.raises(ContextPolicyError, match="handler"):
        reduce_dataframe(df, COMPRESS)  # the handler it names is not given
    with pytest.raises(ContextPlanError, match=r"no column 'turns'.*id, text, messages"):
        reduce_dataframe(df, POLICY, column="turns")
    with pytest.raises(ContextPlanError, match=r"expected a list of messages.*got string"):
        reduce_dataframe(df, POLICY, column="text")
    with pytest.raises(ContextPlanError, match="already has a column 'id'"):
        reduce_dataframe(df, POLICY, figures_column="id")
    with pytest.raises(TypeError, match="expected a Spark DataFrame, got Table"):
        reduce_dataframe(table, POLICY)
    for name in ("", 5, b"figures"):
        with pytest.raises(TypeError, match="figures_column: expected a column name"):
            reduce_dataframe(df, POLICY, figures_column=name)
    for kind in ("array<struct<content string>>", "array<struct<role int, content string>>"):
        odd = spark.createDataFrame([], f"messages {kind}")
        with pytest.raises(ContextPlanError, match=r"array<struct<role: string, content"):
            reduce_dataframe(odd, POLICY)
    with pytest.raises(ContextPlanError, match=r"expected a column of text.*got array"):
        reduce_jsonl(df, POLICY, column="messages")
    with pytest.raises(ContextPolicyError):
        reduce_jsonl(spark.read.text(str(tmp_path)), {"mode": "shrink"})
    assert spark.sparkContext.statusTracker().getJobIdsForGroup() == jobs  # no job ran


def test_names_spark_cannot_map_and_names_it_compares_without_case(spark, tmp_path):
    from contextpolicy.batch.spark import reduce_dataframe, reduce_jsonl

    rows = synthetic.corpus("chats", 200, 35)
    table = pa.table({"user.id": list(range(200)), "odd`name": ["x"] * 200, "m.sgs": rows})
    df = spark.read.parquet(write(tmp_path, table, files=2))
    out = reduce_dataframe(df, POLICY, column="m.sgs", figures_column="fig.ures")
    assert out.columns == ["user.id", "odd`name", "m.sgs", "fig.ures"]
    assert df.columns == ["user.id", "odd`name", "m.sgs"]  # the caller's as it was
    got = sorted(out.collect(), key=lambda row: row[0])
    expected = reduce_table(table, POLICY, column="m.sgs")
    assert [[m.asDict() for m in row[2]] for row in got] == \
        expected.table.column("m.sgs").to_pylist()
    assert [row[3].asDict(recursive=True) for row in got] == expected.figures.to_pylist()
    bad = pa.table({"a.b": [1], "messages": [[{"role": "user", "content": "ok"},
                                              {"role": None, "content": "who?"}]]})
    (tmp_path / "bad").mkdir()
    bad_df = spark.read.parquet(write(tmp_path / "bad", bad, files=1))
    with pytest.raises(Exception) as info:
        reduce_dataframe(bad_df, POLICY).collect()
    assert "messages[0][1].role" in str(info.value)  # named as the caller named it
    with pytest.raises(ContextPlanError, match="already has a column 'ID'"):
        reduce_dataframe(spark.createDataFrame([(1, [("user", "hi")])],
                                               "id long, messages array<struct<role string, "
                                               "content string>>"), POLICY, figures_column="ID")
    with pytest.raises(ContextPlanError, match="already has a column 'error'"):
        reduce_jsonl(spark.createDataFrame([("{}", "e")], "value string, Error string"), POLICY)


def test_a_prepared_policy_carries_its_handlers_to_the_workers(spark, tmp_path):
    from contextpolicy import prepare_policy
    from contextpolicy.batch.spark import reduce_dataframe, reduce_jsonl

    rows = synthetic.corpus("chats", 200, 36)
    table = pa.table({"id": list(range(200)), "messages": rows})
    df = spark.read.parquet(write(tmp_path, table, files=2))
    handlers = Builds(str(tmp_path / "builds.txt"))()
    prepared = prepare_policy(COMPRESS, handlers=handlers)
    got = sorted(reduce_dataframe(df, prepared).collect(), key=lambda row: row["id"])
    expected = reduce_table(table, prepared).table.column("messages").to_pylist()
    assert [[m.asDict() for m in row["messages"]] for row in got] == expected
    with pytest.raises(ContextPolicyError, match="prepared policy carries its handlers"):
        reduce_dataframe(df, prepared, make_handlers=Builds(str(tmp_path / "b.txt")))
    with pytest.raises(ContextPolicyError, match="reduce_jsonl reduces lines by the policy"):
        reduce_jsonl(spark.createDataFrame([("{}",)], "value string"), prepared)


def test_a_row_that_is_not_a_transcript_names_its_partition_and_row(spark, tmp_path):
    from contextpolicy.batch.spark import reduce_dataframe

    rows: list[Any] = [[{"role": "user", "content": f"q{k}"}] for k in range(50)]
    rows[37] = [{"role": "user", "content": "ok"}, {"role": None, "content": "who?"}]
    table = pa.table({"id": list(range(50)), "messages": rows})
    df = spark.read.parquet(write(tmp_path, table, files=1)).coalesce(1)
    spark.conf.set("spark.sql.execution.arrow.maxRecordsPerBatch", "10")
    try:
        with pytest.raises(Exception) as info:
            reduce_dataframe(df, POLICY).collect()
    finally:
        spark.conf.unset("spark.sql.execution.arrow.maxRecordsPerBatch")
    text = str(info.value)
    assert "ContextPlanError" in text and "messages[37][1].role" in text, text
    assert "(partition 0)" in text


def test_jsonl_lines_equal_the_command_line(spark, tmp_path):
    from contextpolicy.batch.spark import reduce_jsonl
    from contextpolicy.jsonl.runner import process_lines

    chats = synthetic.corpus("chats", 400, 34)
    lines = [orjson.dumps({"id": k, "messages": m}) for k, m in enumerate(chats)]
    lines[7] = b'{"id": 7, "messages": [1]}'  # an error, as the command line says it
    lines[9] = json.dumps({"id": 9, "messages": chats[9]}).encode()  # spaced JSON
    lines[11] = b"   "  # a blank line: skipped, as the command line skips it
    path = tmp_path / "in.jsonl"
    path.write_bytes(b"\n".join(lines) + b"\n")
    got = reduce_jsonl(spark.read.text(str(path)).coalesce(1), POLICY).collect()
    expected = list(process_lines([[(k + 1, line) for k, line in enumerate(lines)]], POLICY))
    assert expected[11].error is not None  # the runner alone reads it as a document
    assert (got[11]["value"], got[11]["error"], got[11]["figures"]) == (None, None, None)
    assert [row["value"] for row in got] == [
        None if r.output is None else r.output[:-1].decode() for r in expected]
    assert [row["error"] for row in got] == [None if k == 11 else r.error
                                             for k, r in enumerate(expected)]
    assert "expected a message object" in got[7]["error"]
    figures = [row["figures"] for row in got]
    assert sum(f["read_as_bytes"] for f in figures if f) == len(lines) - 2
    assert [f and f["chars_after"] for f in figures] == [
        r.figures and r.figures[3] for r in expected]
    assert any(f and f["reduced"] for f in figures)
