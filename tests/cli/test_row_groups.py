"""``cli.row_groups.record_batches``: a Parquet file's batches in order, decoded ahead by
several readers, or streamed by one where reading ahead does not win."""

from __future__ import annotations

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from contextpolicy.cli import row_groups
from contextpolicy.cli.row_groups import record_batches


@pytest.fixture
def path(tmp_path):
    table = pa.table({"id": list(range(1000)), "text": [f"row {k}" * (k % 7) for k in range(1000)]})
    pq.write_table(table, tmp_path / "t.parquet", row_group_size=90)  # 12 groups, the last short
    return str(tmp_path / "t.parquet")


def read(path: str, size: int, readers: int) -> list[pa.RecordBatch]:
    return list(record_batches(path, pq.ParquetFile(path), size, readers))


@pytest.mark.parametrize("readers", [1, 2, 3, 16])
@pytest.mark.parametrize("size", [1, 7, 90, 1000])
def test_every_row_in_order_in_batches_of_at_most_size(path, readers, size):
    batches = read(path, size, readers)
    assert all(0 < b.num_rows <= size for b in batches)
    got = pa.Table.from_batches(batches)
    assert got.equals(pq.read_table(path), check_metadata=True)


def test_one_reader_one_row_group_or_large_groups_stream(path, tmp_path, monkeypatch):
    calls = []
    real = pq.ParquetFile.iter_batches

    def spy(self, *args, **kwargs):
        calls.append(kwargs.get("batch_size"))
        return real(self, *args, **kwargs)

    monkeypatch.setattr(pq.ParquetFile, "iter_batches", spy)
    read(path, 50, 1)
    assert calls == [50]
    read(path, 50, 2)
    assert calls == [50]  # read ahead, not streamed
    monkeypatch.setattr(row_groups, "MAX_AHEAD_BYTES", 10)  # row groups too large to hold
    read(path, 50, 2)
    assert calls == [50, 50]
    single = str(tmp_path / "one.parquet")
    pq.write_table(pa.table({"x": [1, 2, 3]}), single)
    assert [b.num_rows for b in read(single, 2, 4)] == [2, 1]
    assert calls == [50, 50, 2]


def test_a_run_stopped_early_returns_and_leaves_no_reader(path):
    import threading

    before = {t.name for t in threading.enumerate()}
    batches = record_batches(path, pq.ParquetFile(path), 10, 2)
    first = next(batches)
    assert first.column("id").to_pylist() == list(range(10))
    batches.close()  # as a run that fails on a row does
    after = {t.name for t in threading.enumerate()} - before
    assert not any(name.startswith("contextpolicy-parquet") for name in after)


def test_a_file_that_breaks_while_read_ahead_is_an_error(path, tmp_path):
    broken = tmp_path / "broken.parquet"
    data = open(path, "rb").read()
    source = pq.ParquetFile(path)
    broken.write_bytes(data)
    handle = pq.ParquetFile(str(broken))
    with open(broken, "r+b") as f:  # the pages of the middle row groups overwritten
        f.seek(len(data) // 3)
        f.write(b"\xff" * (len(data) // 3))
    with pytest.raises((OSError, pa.ArrowException)):
        list(record_batches(str(broken), handle, 50, 2))
    assert source.metadata.num_row_groups == 12
