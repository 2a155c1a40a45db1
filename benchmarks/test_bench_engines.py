"""One job on every engine: the same chats read from Parquet, reduced by the same policy and
written to Parquet, by ``pq.read_table`` + ``reduce_table``, Polars, DuckDB, the command line
(a whole process, ``--jobs 1`` and ``2``), a local Spark session (``local[2]``;
``maxRecordsPerBatch`` of 1,000, 10,000 and 100,000) and a local Ray cluster (2 CPUs:
``reduce_dataset``'s defaults over Ray Data's ``read_parquet``, and ``reduce_parquet``'s plain
tasks), beside
``reduce_table`` alone on the table in memory (the floor). Each engine's output equals
``reduce_table``'s. A cluster is started once for its engine's tests (its start-up is not in
the figures: a cluster is up before a job is given to it); the command line's start-up is.

Marked ``extras`` (Spark and Ray): collected only with ``-m extras``. Measured:
``pytest benchmarks/test_bench_engines.py -m extras --benchmark-enable --benchmark-only``,
100,000 chats in row groups of 10,000, 3 rounds each; unmeasured, 2,000 chats, one round.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from collections.abc import Iterator
from typing import Any

import pytest

from contextpolicy import synthetic
from contextpolicy.batch import reduce_table

from .conftest import cached, measuring
from .test_bench_cli import command

pytestmark = [pytest.mark.extras, pytest.mark.filterwarnings(
    "ignore:PySpark does not yet fully support pandas:FutureWarning")]

POLICY = {"mode": "reduce", "triggerChars": 2000, "targetInputChars": 1500, "steps": [
    {"id": "t", "kind": "trim", "fragmentId": "history", "targetChars": 1000,
     "grouping": {"kind": "user-turn"}, "keepGroups": 1}]}
GROUP = "read, reduce and write chats: Parquet to Parquet, per engine"


@pytest.fixture(scope="module")
def chats(request, tmp_path_factory) -> tuple[Any, Any, Any]:
    """The chats as a table, the Parquet file, and reduce_table's output of them."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    n, group = (100_000, 10_000) if measuring(request.config) else (2_000, 500)
    table = cached(("engine-chats", n), lambda: pa.table({
        "id": list(range(n)), "messages": synthetic.corpus("chats", n, 43)}))
    folder = tmp_path_factory.mktemp("bench-engines")
    pq.write_table(table, folder / "chats.parquet", row_group_size=group)
    (folder / "policy.json").write_text(json.dumps(POLICY))
    return table, folder, reduce_table(table, POLICY)


def run(benchmark, request, chats, kind: str, fn: Any) -> Any:
    import pyarrow.compute as pc

    table = chats[0]
    benchmark.group = GROUP
    benchmark.extra_info.update(
        kind=kind, conversations=table.num_rows,
        messages=int(pc.sum(pc.list_value_length(table.column("messages"))).as_py()))
    passes = 3 if measuring(request.config) else 1
    return benchmark.pedantic(fn, rounds=passes, iterations=1, warmup_rounds=1)


def out_dir(folder: Any, name: str) -> str:
    path = folder / name
    shutil.rmtree(path, ignore_errors=True)
    return str(path)


def assert_equal(chats: Any, got: Any) -> None:
    """``got`` (an Arrow table with ``id``) holds reduce_table's rows and, if any, figures."""
    expected = chats[2]
    got = got.sort_by("id")
    assert got.column("messages").to_pylist() == expected.table.column("messages").to_pylist()
    if "figures" in got.column_names:
        assert got.column("figures").to_pylist() == expected.figures.to_pylist()


def test_reduce_table_in_memory(benchmark, request, chats):
    run(benchmark, request, chats, "reduce-table-in-memory",
        lambda: reduce_table(chats[0], POLICY))


def test_pyarrow(benchmark, request, chats):
    import pyarrow.parquet as pq

    folder = chats[1]
    run(benchmark, request, chats, "pyarrow", lambda: pq.write_table(
        reduce_table(pq.read_table(folder / "chats.parquet"), POLICY).table,
        folder / "pyarrow.parquet"))
    assert_equal(chats, pq.read_table(folder / "pyarrow.parquet"))


def test_polars(benchmark, request, chats):
    import polars as pl
    import pyarrow.parquet as pq

    folder = chats[1]
    run(benchmark, request, chats, "polars", lambda: reduce_table(
        pl.read_parquet(folder / "chats.parquet"), POLICY).table.write_parquet(
        folder / "polars.parquet"))
    assert_equal(chats, pq.read_table(folder / "polars.parquet"))


def test_duckdb(benchmark, request, chats):
    import duckdb
    import pyarrow.parquet as pq

    folder = chats[1]
    con = duckdb.connect()
    run(benchmark, request, chats, "duckdb", lambda: reduce_table(
        con.read_parquet(str(folder / "chats.parquet")), POLICY).table.write_parquet(
        str(folder / "duckdb.parquet")))
    assert_equal(chats, pq.read_table(folder / "duckdb.parquet"))


@pytest.mark.parametrize("jobs", [1, 2])
def test_command_line(benchmark, request, chats, jobs):
    import pyarrow.parquet as pq

    folder = chats[1]
    args = [*command(), "reduce", str(folder / "chats.parquet"), "--policy",
            str(folder / "policy.json"), "-o", str(folder / "cli.parquet"), "-q",
            "--jobs", str(jobs)]
    run(benchmark, request, chats, f"command-line-jobs{jobs}", lambda: subprocess.run(
        args, check=True, stdin=subprocess.DEVNULL))
    assert_equal(chats, pq.read_table(folder / "cli.parquet"))


class TestSpark:
    @pytest.fixture(scope="class")
    def spark(self) -> Iterator[Any]:
        from tests.support.spark import local_session

        yield from local_session()

    @pytest.mark.parametrize("per_batch", [1_000, 10_000, 100_000])
    def test_spark(self, benchmark, request, chats, spark, per_batch):
        import pyarrow.parquet as pq

        from contextpolicy.batch.spark import reduce_dataframe

        folder = chats[1]
        target = out_dir(folder, f"spark-{per_batch}")
        spark.conf.set("spark.sql.execution.arrow.maxRecordsPerBatch", str(per_batch))

        def job() -> None:
            df = spark.read.parquet(str(folder / "chats.parquet"))
            reduce_dataframe(df, POLICY).write.mode("overwrite").parquet(target)

        try:
            run(benchmark, request, chats, f"spark-{per_batch}-per-batch", job)
        finally:
            spark.conf.unset("spark.sql.execution.arrow.maxRecordsPerBatch")
        assert_equal(chats, pq.read_table(target))


class TestRay:
    @pytest.fixture(scope="class")
    def cluster(self) -> Iterator[Any]:
        from tests.support.ray import local_cluster

        yield from local_cluster()

    def test_ray(self, benchmark, request, chats, cluster):
        import pyarrow.parquet as pq

        from contextpolicy.batch.ray import reduce_dataset

        folder = chats[1]
        target = out_dir(folder, "ray")

        def job() -> None:
            shutil.rmtree(target, ignore_errors=True)
            ds = cluster.data.read_parquet(str(folder / "chats.parquet"))
            reduce_dataset(ds, POLICY).write_parquet(target)

        run(benchmark, request, chats, "ray", job)
        assert_equal(chats, pq.read_table(target))

    def test_ray_tasks(self, benchmark, request, chats, cluster):
        import pyarrow.parquet as pq

        from contextpolicy.batch.ray import reduce_parquet

        folder = chats[1]
        target = out_dir(folder, "ray-tasks")

        def job() -> None:
            shutil.rmtree(target, ignore_errors=True)
            reduce_parquet(folder / "chats.parquet", POLICY, output=target)

        run(benchmark, request, chats, "ray-tasks", job)
        assert_equal(chats, pq.read_table(target))
