"""``reduce_parquet`` (the ``[ray]`` extra): Parquet files reduced by plain Ray tasks on a local
cluster the module starts and stops, every task on the compiled kernel and on the twin (the
workers' environment chooses), equal to ``reduce_table`` in one process. Marked ``extras``."""

from __future__ import annotations

import gc
import hashlib
import os
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import quote

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
    (source / "_tmp").mkdir()
    pq.write_table(first, source / "a.parquet", row_group_size=300)
    pq.write_table(second, source / "day=2" / "b.parquet", row_group_size=500)
    pq.write_table(second, source / "_tmp" / "c.parquet")  # a writer's: not read
    (source / "_SUCCESS").write_bytes(b"")
    (source / ".a.parquet.crc").write_bytes(b"not parquet")
    written = reduce_parquet(str(source), POLICY, output=tmp_path / "out", rows_per_task=500,
                             runtime_env=workers_env["runtime_env"])
    out = tmp_path / "out"
    assert written == [str(out / "part-00000.parquet"), str(out / "part-00001.parquet"),
                       str(out / "day=2" / "part-00002.parquet")]  # the folders kept
    got = pa.concat_tables([pq.read_table(p) for p in written])
    expected = reduce_table(pa.concat_tables([first, second]), POLICY)
    assert got.num_rows == 1200
    assert got.column("messages").to_pylist() == expected.table.column("messages").to_pylist()
    assert got.column("figures").to_pylist() == expected.figures.to_pylist()
    assert sorted(str(p) for p in out.rglob("*") if p.is_file()) == sorted(written)
    # read back as a folder, the partition is a column again, as it was in the source
    days = pq.read_table(out).column("day").to_pylist()
    assert (days.count(None), days.count(2), len(days)) == (700, 500, 1200)


def test_a_partition_folder_is_a_column_of_the_dataset(cluster, tmp_path):
    source = tmp_path / "in"
    for day, seed in (("2024-01-01", 50), ("2024 01 02", 51)):
        (source / f"day={quote(day)}" / "kind=chat").mkdir(parents=True)
        pq.write_table(chats_table(40, seed), source / f"day={quote(day)}" / "kind=chat" /
                       "x.parquet")
    (source / "day=__HIVE_DEFAULT_PARTITION__").mkdir()
    pq.write_table(chats_table(5, 58), source / "day=__HIVE_DEFAULT_PARTITION__" / "y.parquet")
    pq.write_table(chats_table(10, 59), source / "z.parquet")  # beside the partitions
    # a file of the folder named first keeps its folder's partitions
    first = source / "day=2024-01-01" / "kind=chat" / "x.parquet"
    ds = reduce_parquet([first, source], POLICY)
    got = pa.concat_tables(cluster.get(ds.to_arrow_refs()))
    assert got.column_names == ["id", "messages", "day", "kind", "figures"]
    assert got.column("day").to_pylist() == \
        ["2024-01-01"] * 40 + ["2024 01 02"] * 40 + [None] * 15
    assert got.column("kind").to_pylist() == ["chat"] * 80 + [None] * 15


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


def test_a_counter_is_built_once_per_worker_and_counts(cluster, tmp_path, workers_env):
    policy = {"mode": "reduce", "triggerTokens": 300, "targetInputTokens": 200, "steps": [
        {"id": "t", "kind": "trim", "fragmentId": "history", "targetChars": 1000,
         "keepGroups": 1}]}
    table = chats_table(400, 34)
    pq.write_table(table, tmp_path / "in.parquet", row_group_size=100)
    ds = reduce_parquet(tmp_path / "in.parquet", policy, rows_per_task=100,
                        make_counter=_words, runtime_env=workers_env["runtime_env"])
    got = pa.concat_tables(cluster.get(ds.to_arrow_refs()))
    expected = reduce_table(table, policy, counter=_words())
    assert got.column("figures").to_pylist() == expected.figures.to_pylist()
    assert any(f["tokens_after"] for f in got.column("figures").to_pylist())


def _words() -> Any:
    return lambda text: len(text.split())


def test_a_bad_row_is_named_by_its_file_and_its_row_in_the_file(cluster, tmp_path, caplog,
                                                                 workers_env):
    rows = synthetic.corpus("chats", 600, 35)
    rows[437] = [{"role": "user", "content": "ok"}, {"role": None, "content": "who?"}]
    pq.write_table(pa.table({"messages": rows}), tmp_path / "in.parquet", row_group_size=100)
    with pytest.raises(ContextPlanError) as info:
        reduce_parquet(tmp_path / "in.parquet", POLICY, output=tmp_path / "out",
                       rows_per_task=100, runtime_env=workers_env["runtime_env"])
    assert type(info.value) is ContextPlanError  # the task's own error, not Ray's wrapper
    [issue] = info.value.issues
    assert issue.path.startswith("messages[437]")
    assert str(tmp_path / "in.parquet") in issue.message
    time.sleep(1)  # a task still running would write now
    assert not (tmp_path / "out").exists()  # the run made it; nothing of the run is left
    # an output folder that was there (empty) stays, empty
    (tmp_path / "out").mkdir()
    with pytest.raises(ContextPlanError):
        reduce_parquet(tmp_path / "in.parquet", POLICY, output=tmp_path / "out",
                       rows_per_task=100)
    assert list((tmp_path / "out").iterdir()) == []
    gc.collect()
    time.sleep(5)  # Ray logs an error nobody took a while after its reference is gone
    assert not [r for r in caplog.records if "Unhandled error" in r.getMessage()]  # every task's error was taken


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
    ("figures-other-case", ContextPlanError, "already has a column 'figures'.*without case"),
    ("schemas-differ", ValueError, r"columns differ from those of .*id: int64 against int32"),
    ("output-inside-source", ValueError, "inside a source folder"),
    ("relative-subtree", ValueError, "SubTreeFileSystem of a relative folder"),
    ("output-inside-source-link", ValueError, "inside a source folder"),
    ("figures-partition", ContextPlanError, "a partition folder is named figures="),
    ("not-a-filesystem", TypeError, "expected a pyarrow.fs.FileSystem"),
])
@pytest.mark.usefixtures("pipeline_kernel")  # the driver's checks on each kernel
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
    elif setup == "figures-other-case":
        source = tmp_path / "figured.parquet"
        pq.write_table(chats_table(3, 37).append_column("Figures", pa.array([1, 2, 3])), source)
    elif setup == "schemas-differ":
        other = tmp_path / "other.parquet"
        pq.write_table(chats_table(3, 37).set_column(0, "id", pa.array([1, 2, 3], pa.int32())),
                       other)
        source = [good, other]
    elif setup == "output-inside-source":
        options["output"] = tmp_path / "reduced"  # tmp_path holds good.parquet
        source = tmp_path
    elif setup == "output-inside-source-link":
        (tmp_path.parent / (tmp_path.name + "-link")).symlink_to(tmp_path)
        options["output"] = tmp_path.parent / (tmp_path.name + "-link") / "reduced"
        source = tmp_path
    elif setup == "figures-partition":
        (tmp_path / "figures=1").mkdir()
        pq.write_table(chats_table(3, 37), tmp_path / "figures=1" / "x.parquet")
        source, options["output"] = tmp_path / "figures=1" / "..", tmp_path.parent / "o"
    elif setup == "relative-subtree":
        from pyarrow import fs

        options["filesystem"] = fs.SubTreeFileSystem("data", fs.LocalFileSystem())
    elif setup == "not-a-filesystem":
        options["filesystem"] = "/"
    with pytest.raises(kind, match=match):
        reduce_parquet(source, policy, **options)
    if setup == "output-not-empty":
        assert (tmp_path / "out" / "kept.parquet").read_bytes() == b"mine"
    assert not (tmp_path / "reduced").exists()


def test_progress_is_drawn_in_rows(cluster, tmp_path, capfd):
    pq.write_table(chats_table(300, 38), tmp_path / "in.parquet", row_group_size=100)
    reduce_parquet(tmp_path / "in.parquet", POLICY, rows_per_task=100, progress=True)
    err = capfd.readouterr().err
    assert "reducing rows" in err and "100%" in err
    reduce_parquet(tmp_path / "in.parquet", POLICY, rows_per_task=100)  # not a terminal
    assert "reducing rows" not in capfd.readouterr().err


def test_relative_paths_are_the_drivers_whatever_the_workers_folder(cluster, tmp_path,
                                                                    monkeypatch):
    from pyarrow import fs

    pq.write_table(chats_table(50, 52), tmp_path / "in.parquet")
    (tmp_path / "elsewhere").mkdir()
    monkeypatch.chdir(tmp_path / "elsewhere")  # the workers' folder is the test's start
    for k, filesystem in enumerate((None, fs.LocalFileSystem())):
        written = reduce_parquet("../in.parquet", POLICY, output=f"out{k}",
                                 filesystem=filesystem)
        assert written == [str(tmp_path / "elsewhere" / f"out{k}" / "part-00000.parquet")]
        assert pq.read_table(written[0]).num_rows == 50


def test_a_uri_keeps_its_scheme_in_names_and_errors(cluster, tmp_path):
    rows = synthetic.corpus("chats", 30, 53)
    pq.write_table(pa.table({"messages": rows}), tmp_path / "in.parquet")
    uri = (tmp_path / "in.parquet").as_uri()
    written = reduce_parquet(uri, POLICY, output=(tmp_path / "out dir%").as_uri())
    assert written == [(tmp_path / "out dir%" / "part-00000.parquet").as_uri()]
    assert "out%20dir%25" in written[0]
    assert pq.read_table(written[0]).num_rows == 30  # a URI pyarrow reads
    rows[3] = [{"role": None, "content": "who?"}]
    pq.write_table(pa.table({"messages": rows}), tmp_path / "bad.parquet")
    with pytest.raises(ContextPlanError, match=f"file {(tmp_path / 'bad.parquet').as_uri()}"):
        reduce_parquet((tmp_path / "bad.parquet").as_uri(), POLICY)


def test_a_file_named_twice_is_read_once_and_an_empty_file_gives_its_schema(cluster, tmp_path):
    table = chats_table(20, 54)
    pq.write_table(table, tmp_path / "a.parquet")
    pq.ParquetWriter(tmp_path / "b.parquet", table.schema).close()  # no row group
    ds = reduce_parquet([tmp_path / "a.parquet", tmp_path, tmp_path / "b.parquet"], POLICY)
    got = pa.concat_tables(cluster.get(ds.to_arrow_refs()))
    assert got.column("id").to_pylist() == list(range(20))
    written = reduce_parquet(tmp_path / "b.parquet", POLICY, output=tmp_path.parent / (
        tmp_path.name + "-out"))
    empty = pq.read_table(written[0])
    assert empty.num_rows == 0 and empty.column_names == ["id", "messages", "figures"]


class _Interrupting:
    """The progress bar's advance, made to do something when the first part is done."""

    def __init__(self, action):
        self.action = action

    def __call__(self, draw, total):
        outer = self

        class Bar:
            def __enter__(self):
                return lambda rows: outer.action()

            def __exit__(self, *exc):
                return None

        return Bar()


def test_an_interrupted_run_leaves_nothing(cluster, tmp_path,
                                                                   monkeypatch):
    from contextpolicy.batch import ray_parquet

    pq.write_table(chats_table(2000, 55), tmp_path / "in.parquet", row_group_size=50)

    def interrupt():
        raise KeyboardInterrupt

    monkeypatch.setattr(ray_parquet, "_Bar", _Interrupting(interrupt))
    with pytest.raises(KeyboardInterrupt):
        reduce_parquet(tmp_path / "in.parquet", POLICY, output=tmp_path / "out",
                       rows_per_task=50)
    time.sleep(2)  # a task left running would write meanwhile
    assert not (tmp_path / "out").exists()


def test_a_part_written_meanwhile_by_another_is_kept_and_the_run_writes_nothing(
        cluster, tmp_path, monkeypatch):
    from contextpolicy.batch import ray_parquet

    pq.write_table(chats_table(300, 56), tmp_path / "in.parquet", row_group_size=100)
    intruder = tmp_path / "out" / "part-00002.parquet"

    def write_meanwhile():
        if not intruder.exists():
            intruder.write_bytes(b"another run's")

    monkeypatch.setattr(ray_parquet, "_Bar", _Interrupting(write_meanwhile))
    with pytest.raises(FileExistsError, match="wrote into the output folder meanwhile "
                       r"\(part-00002.parquet\)"):
        reduce_parquet(tmp_path / "in.parquet", POLICY, output=tmp_path / "out",
                       rows_per_task=100)
    assert [p.name for p in (tmp_path / "out").iterdir()] == ["part-00002.parquet"]
    assert intruder.read_bytes() == b"another run's"


def test_another_run_into_the_same_output_in_other_folders_fails_one(cluster, tmp_path,
                                                                     monkeypatch):
    from contextpolicy.batch import ray_parquet

    (tmp_path / "in" / "day=1").mkdir(parents=True)
    pq.write_table(chats_table(100, 57), tmp_path / "in" / "day=1" / "a.parquet")
    other = tmp_path / "out" / "day=3" / "part-00000.parquet"  # no name of this run's

    def another_run():
        if not other.exists():
            other.parent.mkdir()
            other.write_bytes(b"another run's")

    monkeypatch.setattr(ray_parquet, "_Bar", _Interrupting(another_run))
    with pytest.raises(FileExistsError, match="wrote into the output folder meanwhile"):
        reduce_parquet(tmp_path / "in", POLICY, output=tmp_path / "out")
    assert sorted(str(p.relative_to(tmp_path / "out")) for p in (tmp_path / "out").rglob("*")) \
        == ["day=3", "day=3/part-00000.parquet"]


def test_more_cpus_a_task_than_the_cluster_has_is_said(cluster):
    from contextpolicy.batch.ray_parquet import _warn_unplaceable

    with pytest.warns(RuntimeWarning, match="the largest node of the cluster has 2 CPUs"):
        _warn_unplaceable(cluster, 3)
