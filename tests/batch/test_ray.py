"""The ``[ray]`` extra: ``reduce_dataset`` on a local Ray cluster the test starts and stops,
Parquet in and Parquet out, equal to ``reduce_table`` in one process. Marked ``extras``: the
main suite deselects it, and CI runs it on its own after installing the extras
(``pytest -m extras``)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from contextpolicy import ContextPolicyError, synthetic, validate_context_policy
from contextpolicy.batch import reduce_table
from contextpolicy.prepared import PreparedPolicy
from tests.support.ray import local_cluster

pytestmark = pytest.mark.extras

POLICY = {"mode": "reduce", "triggerChars": 2000, "targetInputChars": 1500, "steps": [
    {"id": "t", "kind": "trim", "fragmentId": "history", "targetChars": 1000,
     "grouping": {"kind": "user-turn"}, "keepGroups": 1}]}


def words() -> object:
    return lambda text: len(text.split())


@pytest.fixture(scope="module")
def cluster() -> Iterator[Any]:
    yield from local_cluster()


@pytest.mark.parametrize("workers", [None, 2], ids=["tasks", "actors"])
def test_parquet_in_parquet_out_equals_one_process(cluster, tmp_path, workers):
    from contextpolicy.batch.ray import reduce_dataset

    chats = synthetic.corpus("chats", 2000, 21)
    table = pa.table({"id": list(range(len(chats))), "messages": chats})
    pq.write_table(table, tmp_path / "in.parquet", row_group_size=500)
    ds = cluster.data.read_parquet(str(tmp_path / "in.parquet"))
    reduce_dataset(ds, POLICY, workers=workers, num_cpus=0.5, batch_size=500).write_parquet(
        str(tmp_path / "out"))
    got = pq.read_table(tmp_path / "out").sort_by("id")
    expected = reduce_table(table, POLICY)
    assert got.column("messages").to_pylist() == expected.table.column("messages").to_pylist()
    figures = got.column("figures").to_pylist()
    assert figures == expected.figures.to_pylist()


def test_at_its_defaults_the_read_and_the_reduction_are_one_task(cluster, tmp_path):
    from contextpolicy.batch.ray import reduce_dataset

    chats = synthetic.corpus("chats", 600, 24)
    pq.write_table(pa.table({"id": list(range(600)), "messages": chats}),
                   tmp_path / "in.parquet", row_group_size=200)

    def operators(**keywords: Any) -> list[str]:
        ds = cluster.data.read_parquet(str(tmp_path / "in.parquet"))
        stats = reduce_dataset(ds, POLICY, **keywords).materialize().stats()
        return [line.split(":")[0].split(" ", 2)[2] for line in stats.splitlines()
                if line.startswith("Operator ") and "MapBatches" in line]

    fused = operators()
    assert len(fused) == 1 and fused[0].startswith("Read") and \
        fused[0].endswith("->MapBatches(_reduce_batch)"), fused
    assert operators(batch_size=100) == ["MapBatches(_reduce_batch)"]  # split in two
    assert operators(num_cpus=0.5) == ["MapBatches(_reduce_batch)"]


class _Recorded:
    """A dataset that records what ``map_batches`` is asked to run."""

    def map_batches(self, fn, **kwargs):
        self.fn, self.kwargs = fn, kwargs
        return self


def test_actors_only_where_something_is_built_once_per_worker():
    import ray

    from contextpolicy.batch.ray import ReduceBatches, reduce_dataset

    plain = reduce_dataset(_Recorded(), POLICY, num_cpus=0.5)
    assert plain.fn is not ReduceBatches and "compute" not in plain.kwargs
    prepared = plain.kwargs["fn_kwargs"]["policy"]  # prepared once, here
    assert isinstance(prepared, PreparedPolicy)
    assert prepared.policy == validate_context_policy(POLICY)
    assert plain.kwargs["num_cpus"] == 0.5
    defaults = reduce_dataset(_Recorded(), POLICY).kwargs
    assert defaults["batch_size"] is None and defaults["num_cpus"] == 1.0
    with pytest.raises(ContextPolicyError) as info:  # checked before Ray runs anything
        reduce_dataset(_Recorded(), {**POLICY, "triggerChar": 5})
    assert [i.code for i in info.value.issues] == ["unknown-key"]
    for given in ({"make_counter": words}, {"make_handlers": dict}, {"workers": 3}):
        pooled = reduce_dataset(_Recorded(), POLICY, **given)
        assert pooled.fn is ReduceBatches
        assert isinstance(pooled.kwargs["compute"], ray.data.ActorPoolStrategy)
        assert pooled.kwargs["compute"].max_size == given.get("workers", 1)
    for bad in (0, -1, 1.5, True, "2"):
        with pytest.raises(ValueError, match="workers: expected an integer >= 1 or None"):
            reduce_dataset(_Recorded(), POLICY, workers=bad)


def test_counter_built_once_per_worker(cluster):
    from contextpolicy.batch.ray import reduce_dataset

    chats = synthetic.corpus("chats", 300, 22)
    policy = {"mode": "reduce", "triggerTokens": 300, "targetInputTokens": 200, "steps": [
        {"id": "t", "kind": "trim", "fragmentId": "history", "targetChars": 1000,
         "keepGroups": 1}]}
    ds = cluster.data.from_arrow(pa.table({"id": list(range(300)), "messages": chats}))
    out = reduce_dataset(ds, policy, make_counter=words, workers=1, num_cpus=0.5,
                         batch_size=100).to_arrow_refs()
    got = pa.concat_tables(cluster.get(out)).sort_by("id")
    expected = reduce_table(pa.table({"messages": chats}), policy, counter=words())
    assert [f["tokens_after"] for f in got.column("figures").to_pylist()] == \
        expected.figures.column("tokens_after").to_pylist()


def test_jsonl_lines_read_as_bytes_equal_the_command_line(cluster, tmp_path):
    import json

    import orjson

    from contextpolicy.batch.ray import ReduceLines, reduce_jsonl
    from contextpolicy.jsonl.runner import process_lines

    chats = synthetic.corpus("chats", 400, 23)
    lines = [orjson.dumps({"id": k, "messages": m}) for k, m in enumerate(chats)]
    lines[7] = b'{"id": 7, "messages": [1]}'  # an error, as the command line says it
    lines[9] = json.dumps({"id": 9, "messages": chats[9]}, indent=None).encode()  # spaced
    path = tmp_path / "in.jsonl"
    path.write_bytes(b"\n".join(lines) + b"\n")
    ds = cluster.data.read_text(str(path))
    got = pa.concat_tables(cluster.get(reduce_jsonl(ds, POLICY, workers=1, num_cpus=0.5,
                                                    batch_size=100).to_arrow_refs()))
    expected = list(process_lines([[(k + 1, line) for k, line in enumerate(lines)]], POLICY))
    assert got.num_rows == len(lines)
    assert got.column("text").to_pylist() == [
        None if r.output is None else r.output[:-1].decode() for r in expected]
    assert got.column("error").to_pylist() == [r.error for r in expected]
    assert "expected a message object" in got.column("error")[7].as_py()
    figures = got.column("figures").to_pylist()
    assert sum(f["read_as_bytes"] for f in figures if f) == len(lines) - 1
    assert [f and f["chars_after"] for f in figures] == [
        r.figures and r.figures[3] for r in expected]
    assert [f and (f["missed_reason"], f["reduced"]) for f in figures] == [
        r.figures and ((r.figures.missed or [None])[0], bool(r.figures.reduced))
        for r in expected]
    assert any(f and f["missed_reason"] for f in figures)
    # one process, no cluster: the same callable
    one = ReduceLines(POLICY)(pa.table({"text": [line.decode() for line in lines]}))
    assert one.column("text").to_pylist() == got.column("text").to_pylist()
