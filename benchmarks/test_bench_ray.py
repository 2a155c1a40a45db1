"""The ``[ray]`` extra's cost per row: ``reduce_dataset`` reading chats from Parquet on a local
Ray cluster (2 CPUs, started and stopped by the module), against ``reduce_table`` alone on the
same rows in memory, ``pq.read_table`` + ``reduce_table`` in one process, and Ray's own
``read_parquet`` with nothing after it. ``reduce_dataset`` runs at its defaults (Ray tasks,
``batch_size=None``: a block whole, ``num_cpus=1``: the read and the reduction one task), with
Ray's Parquet reader at its defaults and with one footer-reading actor
(``RAY_DATA_PARQUET_FOOTER_NUM_ACTORS=1``), with blocks of 5,000 rows and of 50,000; then
batch sizes of 1,000, 4,096 and 10,000 rows, the settings before (``batch_size=4096``,
``num_cpus=0.5``), and a pool of one actor; and ``reduce_parquet``, plain Ray tasks reading
row groups with pyarrow (no Ray Data read), at its defaults and in parts of one row group and
of 25,000 rows. Each Ray round is a whole run: the actors (if any)
started, the file read, the rows reduced and the result materialized. The reduced rows equal
``reduce_table``'s.

Marked ``extras`` (as ``tests/batch/test_ray.py``): collected only with ``-m extras``. Measured:
``pytest benchmarks/test_bench_ray.py -m extras --benchmark-enable --benchmark-only``, 50,000
chats in row groups of 5,000 (or 50,000); unmeasured, 2,000 in row groups of 500 (or 2,000).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from contextpolicy import synthetic
from contextpolicy.batch import reduce_table
from tests.support.ray import local_cluster

from .conftest import cached, measuring

pytestmark = pytest.mark.extras

POLICY = {"mode": "reduce", "triggerChars": 2000, "targetInputChars": 1500, "steps": [
    {"id": "t", "kind": "trim", "fragmentId": "history", "targetChars": 1000,
     "grouping": {"kind": "user-turn"}, "keepGroups": 1}]}


@pytest.fixture(scope="module")
def cluster() -> Iterator[Any]:
    yield from local_cluster()


def write_chats(request, tmp_path_factory, blocks: str) -> tuple[Any, Any]:
    import pyarrow as pa
    import pyarrow.parquet as pq

    full = measuring(request.config)
    n, group = (50_000, 5_000) if full else (2_000, 500)
    if blocks == "large":
        group = n
    table = cached(("ray-chats", n), lambda: pa.table({
        "id": list(range(n)), "messages": synthetic.corpus("chats", n, 43)}))
    path = tmp_path_factory.mktemp("bench-ray") / "chats.parquet"
    pq.write_table(table, path, row_group_size=group)
    return table, path


@pytest.fixture(scope="module")
def chats_file(request, tmp_path_factory) -> tuple[Any, Any]:
    """The chats in row groups (Ray's blocks) of 5,000 rows."""
    return write_chats(request, tmp_path_factory, "small")


@pytest.fixture(scope="module")
def large_blocks(request, tmp_path_factory) -> tuple[Any, Any]:
    """The chats in one row group of 50,000 rows."""
    return write_chats(request, tmp_path_factory, "large")


def label(benchmark, table, kind: str) -> None:
    import pyarrow.compute as pc

    benchmark.group = "reduce chats from Parquet on a local Ray cluster"
    benchmark.extra_info.update(
        kind=kind, conversations=table.num_rows,
        messages=int(pc.sum(pc.list_value_length(table.column("messages"))).as_py()))


def rounds(request) -> int:
    return 5 if measuring(request.config) else 1


def test_reduce_table_alone(benchmark, request, chats_file):
    table, _path = chats_file
    label(benchmark, table, "reduce-table")
    benchmark.pedantic(reduce_table, (table, POLICY), rounds=4 * rounds(request), iterations=1,
                       warmup_rounds=1)


def test_pyarrow_read_and_reduce(benchmark, request, chats_file):
    import pyarrow.parquet as pq

    table, path = chats_file
    label(benchmark, table, "pyarrow-read+reduce-table")
    out = benchmark.pedantic(lambda: reduce_table(pq.read_table(path), POLICY),
                             rounds=rounds(request), iterations=1, warmup_rounds=1)
    assert out.table.column("messages").to_pylist() == \
        reduce_table(table, POLICY).table.column("messages").to_pylist()


@pytest.mark.parametrize("footer", ["ray-default", "one-footer-actor"])
def test_ray_read_parquet(benchmark, request, cluster, chats_file, footer, monkeypatch):
    table, path = chats_file
    if footer != "ray-default":
        monkeypatch.setenv("RAY_DATA_PARQUET_FOOTER_NUM_ACTORS", "1")
    label(benchmark, table, f"ray-read-parquet ({footer})")
    out = benchmark.pedantic(lambda: cluster.data.read_parquet(str(path)).materialize(),
                             rounds=rounds(request), iterations=1, warmup_rounds=1)
    assert out.count() == table.num_rows


# (kind, reduce_dataset's keywords, footer actors: None for Ray's default, blocks)
SETTINGS = [
    ("defaults", {}, None, "small"),
    ("defaults, one footer actor", {}, 1, "small"),
    ("defaults, one footer actor, blocks of 50,000", {}, 1, "large"),
    ("batch 1,000", {"batch_size": 1_000}, 1, "small"),
    ("batch 4,096", {"batch_size": 4_096}, 1, "small"),
    ("batch 10,000", {"batch_size": 10_000}, 1, "small"),
    ("before: batch 4,096, half a CPU", {"batch_size": 4_096, "num_cpus": 0.5}, None, "small"),
    ("one actor", {"workers": 1}, 1, "small"),
]


@pytest.mark.parametrize("setting", SETTINGS, ids=[s[0] for s in SETTINGS])
def test_ray_read_and_reduce_dataset(benchmark, request, cluster, chats_file, large_blocks,
                                     setting, monkeypatch):
    import pyarrow as pa

    from contextpolicy.batch.ray import reduce_dataset

    kind, keywords, footer, blocks = setting
    table, path = chats_file if blocks == "small" else large_blocks
    if footer is not None:
        monkeypatch.setenv("RAY_DATA_PARQUET_FOOTER_NUM_ACTORS", str(footer))

    def run() -> Any:
        ds = cluster.data.read_parquet(str(path))
        return reduce_dataset(ds, POLICY, **keywords).materialize()

    label(benchmark, table, f"ray-read+reduce-dataset ({kind})")
    out = benchmark.pedantic(run, rounds=rounds(request), iterations=1, warmup_rounds=1)
    got = pa.concat_tables(cluster.get(out.to_arrow_refs())).sort_by("id")
    expected = reduce_table(table, POLICY)
    assert got.column("messages").to_pylist() == \
        expected.table.column("messages").to_pylist()
    assert got.column("figures").to_pylist() == expected.figures.to_pylist()


@pytest.mark.parametrize("rows_per_task", [None, 5_000, 25_000],
                         ids=["defaults", "parts of 5,000", "parts of 25,000"])
def test_ray_reduce_parquet(benchmark, request, cluster, chats_file, rows_per_task):
    import pyarrow as pa

    from contextpolicy.batch.ray import reduce_parquet

    table, path = chats_file
    keywords = {} if rows_per_task is None else {"rows_per_task": rows_per_task}
    label(benchmark, table, f"ray-reduce-parquet ({'defaults' if rows_per_task is None else rows_per_task})")
    out = benchmark.pedantic(lambda: reduce_parquet(path, POLICY, **keywords),
                             rounds=rounds(request), iterations=1, warmup_rounds=1)
    got = pa.concat_tables(cluster.get(out.to_arrow_refs()))
    expected = reduce_table(table, POLICY)
    assert got.column("messages").to_pylist() == \
        expected.table.column("messages").to_pylist()
    assert got.column("figures").to_pylist() == expected.figures.to_pylist()
