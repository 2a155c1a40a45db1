"""``batch.parquet_files``: the files a source names, their footers and the output folder,
without any engine (``reduce_parquet``'s own tests run them on a Ray cluster)."""

from __future__ import annotations

import threading
import time

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from contextpolicy.batch import parquet_files
from contextpolicy.batch.parquet_files import files_of, footers, output_folder


def write(folder, n: int) -> None:
    for k in range(n):
        pq.write_table(pa.table({"id": list(range(k + 1))}), folder / f"f{k:03d}.parquet")


def test_footers_are_read_at_once_in_the_files_order(tmp_path, monkeypatch):
    write(tmp_path, 24)
    files, _ = files_of(tmp_path)
    running = [0, 0]  # now, most at once
    lock = threading.Lock()
    read = parquet_files._footer

    def slow(f):
        with lock:
            running[0] += 1
            running[1] = max(running[1], running[0])
        time.sleep(0.02)
        with lock:
            running[0] -= 1
        return read(f)

    monkeypatch.setattr(parquet_files, "_footer", slow)
    metas = footers(files)
    assert [m.num_rows for m in metas] == list(range(1, 25))  # in order
    assert running[1] > 1


def test_the_first_unreadable_file_in_order_is_named(tmp_path):
    write(tmp_path, 6)
    (tmp_path / "f002.parquet").write_text("not parquet")
    (tmp_path / "f004.parquet").write_text("nor this")
    files, _ = files_of(tmp_path)
    with pytest.raises(ValueError, match=r"f002\.parquet: not a Parquet file that can be read"):
        footers(files)


def test_a_folder_lists_its_files_sorted_and_leaves_hidden_names_out(tmp_path):
    (tmp_path / "b=2").mkdir()
    (tmp_path / "_temporary").mkdir()
    for name in ("b=2/z.parquet", "a.parquet", "_temporary/x.parquet", ".a.crc", "_SUCCESS"):
        (tmp_path / name).write_bytes(b"")
    files, folders = files_of(tmp_path)
    assert [f.shown for f in files] == [str(tmp_path / "a.parquet"),
                                        str(tmp_path / "b=2" / "z.parquet")]
    assert [f.partitions for f in files] == [(), (("b", "2"),)]
    assert [f.path for f in folders] == [str(tmp_path)]
    with pytest.raises(ValueError, match="inside a source folder"):
        output_folder(tmp_path / "b=2" / "out", None, folders)
    assert output_folder(tmp_path.parent / "elsewhere", None, folders).path == str(
        tmp_path.parent / "elsewhere")
