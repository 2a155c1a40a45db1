"""``batch.mapped``: the callables Ray and Spark map over record batches, in one process."""

from __future__ import annotations

import pyarrow as pa
import pytest

from contextpolicy.batch import reduce_table
from contextpolicy.batch.mapped import ReduceBatches, ReduceLines
from contextpolicy.jsonl.runner import process_lines

POLICY = {"mode": "reduce", "triggerChars": 20, "steps": [
    {"id": "t", "kind": "trim", "fragmentId": "history", "targetChars": 0, "keepGroups": 0}]}
LINE = ('{"id": 1, "messages": [{"role": "user", "content": "an old question, long enough"}, '
        '{"role": "user", "content": "now?"}]}')

pytestmark = pytest.mark.usefixtures("pipeline_kernel")


def test_blank_lines_and_nulls_are_skipped_as_the_command_line_skips_them():
    texts = ["", "  \t\r", None, LINE, "x", " " + LINE]
    got = ReduceLines(POLICY)(pa.table({"text": texts})).to_pylist()
    assert [row["text"] is None and row["error"] is None and row["figures"] is None
            for row in got] == [True, True, True, False, False, False]
    # the lines that are not blank: what the command line writes and says of them
    expected = list(process_lines([[(4, LINE.encode()), (5, b"x"),
                                    (6, b" " + LINE.encode())]], POLICY))
    assert [row["text"] for row in got[3:]] == [
        None if r.output is None else r.output[:-1].decode() for r in expected]
    assert [row["error"] for row in got[3:]] == [r.error for r in expected]
    assert got[3]["figures"]["messages_after"] == 1 and got[4]["error"].startswith("invalid JSON")


def test_a_record_batch_gives_a_record_batch_with_its_figures():
    table = pa.table({"id": [1, 2], "messages": [
        [{"role": "user", "content": "an old question, long enough"},
         {"role": "user", "content": "now?"}], [{"role": "user", "content": "hi"}]]})
    batch = table.to_batches()[0]
    out = ReduceBatches(POLICY)(batch)
    assert isinstance(out, pa.RecordBatch)
    assert out.schema.names == ["id", "messages", "figures"]
    expected = reduce_table(table, POLICY)
    assert out.column(1).to_pylist() == expected.table.column("messages").to_pylist()
    assert out.column(2).to_pylist() == expected.figures.to_pylist()
    as_table = ReduceBatches(POLICY, figures_column="f")(table)
    assert isinstance(as_table, pa.Table) and as_table.column_names == ["id", "messages", "f"]
    assert ReduceBatches(POLICY, figures_column=None)(batch).schema == batch.schema


def test_a_prepared_policy_keeps_its_handlers():
    from contextpolicy import prepare_policy

    policy = {"mode": "reduce", "triggerChars": 20, "steps": [
        {"id": "c", "kind": "compress", "fragmentId": "history", "handlerId": "sum",
         "targetChars": 0, "keepGroups": 0}]}
    prepared = prepare_policy(policy, handlers={"sum": lambda request: [
        {"role": "assistant", "content": "summary"}]})
    table = pa.table({"messages": [[{"role": "user", "content": "an old question, long"},
                                    {"role": "user", "content": "now?"}]]})
    out = ReduceBatches(prepared)(table)
    assert out.column("messages").to_pylist() == [[{"role": "assistant", "content": "summary"},
                                                   {"role": "user", "content": "now?"}]]
