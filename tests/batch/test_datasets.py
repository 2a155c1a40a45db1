"""Hugging Face ``datasets``: a dataset with a ``messages`` column reduced through its Arrow
table, batch by batch (``with_format("arrow").map(..., batched=True)``), equal to
``reduce_table`` over the whole table. Marked ``extras``: CI runs it with the Ray suite after
installing the extras (``pytest -m extras``)."""

from __future__ import annotations

import pyarrow as pa
import pytest

from contextpolicy import synthetic
from contextpolicy.batch import reduce_table

pytestmark = pytest.mark.extras

POLICY = {"mode": "reduce", "triggerChars": 2000, "targetInputChars": 1500, "steps": [
    {"id": "t", "kind": "trim", "fragmentId": "history", "targetChars": 1000,
     "grouping": {"kind": "user-turn"}, "keepGroups": 1}]}


def test_a_dataset_reduced_through_its_arrow_table(tmp_path):
    from datasets import Dataset

    chats = synthetic.corpus("chats", 500, 31)
    ds = Dataset.from_list([{"id": i, "messages": m} for i, m in enumerate(chats)])

    def reduce(batch: pa.Table) -> pa.Table:
        return reduce_table(batch, POLICY).table

    reduced = ds.with_format("arrow").map(reduce, batched=True, batch_size=128,
                                          cache_file_name=str(tmp_path / "cache.arrow"))
    expected = reduce_table(pa.table({"id": list(range(500)), "messages": chats}), POLICY)
    assert reduced["messages"].to_pylist() == expected.table.column("messages").to_pylist()
    assert reduced.num_rows == 500
    assert sum(len(m) for m in reduced.with_format(None)["messages"]) < sum(map(len, chats))
