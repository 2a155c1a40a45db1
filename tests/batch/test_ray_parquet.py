"""``reduce_parquet`` (the ``[ray]`` extra): Parquet files reduced by plain Ray tasks on a local
cluster the module starts and stops, every task on the compiled kernel and on the twin (the
workers' environment chooses), equal to ``reduce_table`` in one process. Marked ``extras``."""

from __future__ import annotations

import hashlib
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from contextpolicy import ContextPlanError, ContextPolicyError, kernel_info, synthetic
from contextpolicy.batch import reduce_table
from contextpolicy.batch.ray import reduce_parquet
from tests.support.ray import local_cluster
from tests.support.tables import corpus_rows

pytestmark = pytest.mark.extras

POLICY = {"mode": "reduce", "triggerChars": 2000, "targetInputChars": 1500, "steps": [
    {"id": "t", "kind": "trim", "fragmentId": "history", "targetChars": 1000,
     "grouping": {"kind": "user-turn"}, "keepGroups": 1}]}
KERNELS = {"cython": {}, "python": {"CONTEXTPOLICY_PURE_PYTHON": "1"}}  # by implementation


@pytest.fixture(scope="module")
def cluster() -> Iterator[Any]:
    yield from local_cluster()


@pytest.fixture(params=[pytest.param("cython", marks=pytest.mark.c_extension), "python"])
def workers_env(request) -> dict[str, Any]:
    """The tasks' Ray options: their workers run the kernel of the parameter."""
    return {"runtime_env": {"env_vars": KERNELS[request.param]}, "kernel": request.param}


def chats_table(n: int, seed: int, kind: str = "chats") -> pa.Table:
    return pa.table({"id": list(range(n)), "messages": corpus_rows(kind, n, seed)})


def digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


class Recorder:
    """A handlers factory that writes, each time a worker builds it, the worker's pid and
    kernel to a file (the driver's call is in it too)."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def __call__(self) -> dict[str, Any]:
        with open(self.path, "a") as out:
            out.write(f"{os.getpid()} {kernel_info()['implementation']}\n")
        return {}


@pytest.mark.parametrize("kind", ["chats", "agent-traces"])
def test_files_in_a_dataset_out_equal_reduce_table(cluster, tmp_path, workers_env, kind):
    table = chats_table(1200, 31, kind)
    pq.write_table(table, tmp_path / "in.parquet", row_group_size=100)
    before = digest(tmp_path / "in.parquet")
    built = Recorder(tmp_path / "built.txt")
    ds = reduce_parquet(tmp_path / "in.parquet", POLICY, rows_per_task=250,
                        make_handlers=built, runtime_env=workers_env["runtime_env"])
    refs = ds.to_arrow_refs()
    assert len(refs) == 4  # row groups of 100 in parts of 300, 300, 300, 300
    got = pa.concat_tables(cluster.get(refs))
    expected = reduce_table(table, POLICY)
    assert got.column("id").to_pylist() == list(range(1200))  # in order
    assert got.column("messages").to_pylist() == expected.table.column("messages").to_pylist()
    assert got.column("figures").to_pylist() == expected.figures.to_pylist()
    assert any(f["groups_removed"] for f in got.column("figures").to_pylist())
    assert digest(tmp_path / "in.parquet") == before
    lines = (tmp_path / "built.txt").read_text().split("\n")[:-1]
    assert lines[0] == f"{os.getpid()} {kernel_info()['implementation']}"  # the driver's check
    workers = [line.split() for line in lines[1:]]
    assert workers and all(pid != str(os.getpid()) for pid, _ in workers)
    assert len({pid for pid, _ in workers}) == len(workers)  # once per worker process
    assert {impl for _, impl in workers} == {workers_env["kernel"]}


def test_a_folder_written_part_by_part_equals_reduce_table(cluster, tmp_path, workers_env):
    first, second = chats_table(700, 32), chats_table(500, 33)
    source = tmp_path / "in"
    (source / "day=2").mkdir(parents=True)
    pq.write_table(first, source / "a.parquet", row_group_size=300)
    pq.write_table(second, source / "day=2" / "b.parquet", row_group_size=500)
    (source / "_SUCCESS").write_bytes(b"")
    (source / ".a.parquet.crc").write_bytes(b"not parquet")
    written = reduce_parquet(str(source), POLICY, output=tmp_path / "out", rows_per_task=500,
                             runtime_env=workers_env["runtime_env"])
    assert [Path(p).name for p in written] == [f"part-0000{k}.parquet" for k in range(3)]
    got = pa.concat_tables([pq.read_table(p) for p in written])
    expected = reduce_table(pa.concat_tables([first, second]), POLICY)
    assert got.num_rows == 1200
    assert got.column("messages").to_pylist() == expected.table.column("messages").to_pylist()
    assert got.column("figures").to_pylist() == expected.figures.to_pylist()
    assert sorted(os.listdir(tmp_path / "out")) == [Path(p).name for p in written]


def test_a_list_of_files_keeps_its_order_and_no_figures_adds_no_column(cluster, tmp_path):
    tables = [chats_table(150, 40 + k) for k in range(3)]
    paths = []
    for k, table in enumerate(tables):
        paths.append(str(tmp_path / f"{k}.parquet"))
        pq.write_table(table, paths[-1], row_group_size=50)
    ds = reduce_parquet(paths[::-1], POLICY, figures_column=None, progress=False)
    got = pa.concat_tables(cluster.get(ds.to_arrow_refs()))
    assert got.column_names == ["id", "messages"]
    expected = reduce_table(pa.concat_tables(tables[::-1]), POLICY)
    assert got.column("messages").to_pylist() == expected.table.column("messages").to_pylist()


def test_a_counter_is_built_once_per_worker_and_counts(cluster, tmp_path):
    policy = {"mode": "reduce", "triggerTokens": 300, "targetInputTokens": 200, "steps": [
        {"id": "t", "kind": "trim", "fragmentId": "history", "targetChars": 1000,
         "keepGroups": 1}]}
    table = chats_table(400, 34)
    pq.write_table(table, tmp_path / "in.parquet", row_group_size=100)
    ds = reduce_parquet(tmp_path / "in.parquet", policy, rows_per_task=100,
                        make_counter=_words)
    got = pa.concat_tables(cluster.get(ds.to_arrow_refs()))
    expected = reduce_table(table, policy, counter=_words())
    assert got.column("figures").to_pylist() == expected.figures.to_pylist()
    assert any(f["tokens_after"] for f in got.column("figures").to_pylist())


def _words() -> Any:
    return lambda text: len(text.split())


def test_a_bad_row_is_named_by_its_file_and_its_row_in_the_file(cluster, tmp_path):
    rows = synthetic.corpus("chats", 600, 35)
    rows[437] = [{"role": "user", "content": "ok"}, {"role": None, "content": "who?"}]
    pq.write_table(pa.table({"messages": rows}), tmp_path / "in.parquet", row_group_size=100)
    with pytest.raises(ContextPlanError) as info:
        reduce_parquet(tmp_path / "in.parquet", POLICY, output=tmp_path / "out",
                       rows_per_task=100)
    assert type(info.value) is ContextPlanError  # the task's own error, not Ray's wrapper
    [issue] = info.value.issues
    assert issue.path.startswith("messages[437]")
    assert str(tmp_path / "in.parquet") in issue.message


@pytest.mark.parametrize(("setup", "kind", "match"), [
    ("missing-column", ContextPlanError, "no column 'chat'"),
    ("not-messages", ContextPlanError, "expected a list<struct<role, content"),
    ("figures-exists", ContextPlanError, "already has a column 'figures'"),
    ("not-parquet", ValueError, "not a Parquet file that can be read"),
    ("missing-file", FileNotFoundError, "no such file or folder"),
    ("empty-folder", FileNotFoundError, "a folder without a file to read"),
    ("empty-list", ValueError, "got an empty list"),
    ("not-a-path", TypeError, "expected a path or a URI"),
    ("output-not-empty", FileExistsError, "holds files already"),
    ("output-a-file", FileExistsError, "found a file"),
    ("bad-policy", ContextPolicyError, "invalid context policy"),
    ("rows-per-task", ValueError, "rows_per_task: expected an integer >= 1"),
    ("figures-column", TypeError, "figures_column: expected a column name"),
    ("num-returns", TypeError, "num_returns"),
])
def test_what_can_be_checked_fails_on_the_driver_before_any_task(tmp_path, setup, kind, match):
    # no cluster: every one of these fails before Ray is asked for anything
    good = tmp_path / "good.parquet"
    pq.write_table(chats_table(10, 36), good)
    source: Any = good
    options: dict[str, Any] = {}
    policy: Any = POLICY
    if setup == "missing-column":
        options["column"] = "chat"
    elif setup == "not-messages":
        source = tmp_path / "text.parquet"
        pq.write_table(pa.table({"messages": ["a", "b"]}), source)
    elif setup == "figures-exists":
        source = tmp_path / "figured.parquet"
        pq.write_table(chats_table(3, 37).append_column("figures", pa.array([1, 2, 3])), source)
    elif setup == "not-parquet":
        source = tmp_path / "x.parquet"
        source.write_text("{}\n")
    elif setup == "missing-file":
        source = tmp_path / "nowhere.parquet"
    elif setup == "empty-folder":
        source = tmp_path / "empty"
        source.mkdir()
        (source / "_SUCCESS").write_bytes(b"")
    elif setup == "empty-list":
        source = []
    elif setup == "not-a-path":
        source = [good, 3]
    elif setup == "output-not-empty":
        (tmp_path / "out").mkdir()
        (tmp_path / "out" / "kept.parquet").write_bytes(b"mine")
        options["output"] = tmp_path / "out"
    elif setup == "output-a-file":
        options["output"] = good
    elif setup == "bad-policy":
        policy = {**POLICY, "targetInputChars": -1}
    elif setup == "rows-per-task":
        options["rows_per_task"] = 0
    elif setup == "figures-column":
        options["figures_column"] = ""
    elif setup == "num-returns":
        options["num_returns"] = 1
    with pytest.raises(kind, match=match):
        reduce_parquet(source, policy, **options)
    if setup == "output-not-empty":
        assert (tmp_path / "out" / "kept.parquet").read_bytes() == b"mine"


def test_progress_is_drawn_in_rows(cluster, tmp_path, capfd):
    pq.write_table(chats_table(300, 38), tmp_path / "in.parquet", row_group_size=100)
    reduce_parquet(tmp_path / "in.parquet", POLICY, rows_per_task=100, progress=True)
    err = capfd.readouterr().err
    assert "reducing rows" in err and "100%" in err
    reduce_parquet(tmp_path / "in.parquet", POLICY, rows_per_task=100)  # not a terminal
    assert "reducing rows" not in capfd.readouterr().err
