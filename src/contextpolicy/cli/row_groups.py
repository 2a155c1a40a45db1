"""A Parquet file's record batches, in order, decoded by several readers ahead of their use.

Decoding Parquet is most of what reducing a Parquet file costs, and one reader decodes one row
group at a time on one core. With ``readers`` above one, each of that many threads (pyarrow
decodes without the GIL) holds a file handle of its own and decodes a whole row group, up to
``readers`` row groups ahead of the one being reduced: memory stays near ``readers + 1`` row
groups, and what the allocator keeps of row groups one thread decoded and another freed (pyarrow's
mimalloc keeps memory a thread frees for the thread that took it). That part does not grow with
the file: with two readers and row groups of 13 MB the peak was 316 MB for 16 row groups, 364 MB
for 64 and 347-353 MB for 256, against 265-270 MB with one reader. A file of one row group, or
one whose row groups are too large to hold several of, is streamed by one reader a batch at a
time, as before.
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Iterator
from typing import Any

__all__ = ["MAX_AHEAD_BYTES", "record_batches"]

MAX_AHEAD_BYTES = 256 << 20  # the largest row group (uncompressed) read whole ahead


def record_batches(path: str, source: Any, size: int, readers: int) -> Iterator[Any]:
    """``source``'s (a ``pq.ParquetFile`` of ``path``) record batches of at most ``size`` rows,
    in the file's order, decoded by ``readers`` threads ahead where that wins."""
    meta = source.metadata
    groups = meta.num_row_groups
    if readers < 2 or groups < 2 or max(
            meta.row_group(i).total_byte_size for i in range(groups)) > MAX_AHEAD_BYTES:
        yield from source.iter_batches(batch_size=size, use_threads=False)
        return
    yield from _ahead(path, groups, size, readers)


def _ahead(path: str, groups: int, size: int, readers: int) -> Iterator[Any]:
    from concurrent.futures import ThreadPoolExecutor

    import pyarrow.parquet as pq

    local = threading.local()
    opened: list[Any] = []

    def read(group: int) -> Any:
        handle = getattr(local, "handle", None)
        if handle is None:
            handle = local.handle = pq.ParquetFile(path, pre_buffer=False, buffer_size=1 << 20)
            opened.append(handle)
        return handle.read_row_group(group, use_threads=False)

    pending: deque[Any] = deque()
    with ThreadPoolExecutor(readers, thread_name_prefix="contextpolicy-parquet") as pool:
        try:
            following = 0
            while pending or following < groups:
                while following < groups and len(pending) < readers:
                    pending.append(pool.submit(read, following))
                    following += 1
                yield from pending.popleft().result().to_batches(max_chunksize=size)
        finally:
            for future in pending:  # a run stopped early waits for no decode it will not use
                future.cancel()
    for handle in opened:
        handle.close()
