"""Columnar path: code points per string straight from an Arrow UTF-8 buffer, against the
best chunked numpy ``(b & 0xC0) != 0x80`` count and ``pyarrow.compute.utf8_length`` on the
same buffer; and grouping + cut of many conversations at once from list offsets."""

from __future__ import annotations

import numpy as np
import pytest

from .conftest import cached, rounds

CHUNK = 1 << 18  # 256 KiB blocks: the fastest block size for numpy on this kind of machine


@pytest.fixture(scope="session")
def strings(history, size):
    import pyarrow as pa

    def build():
        contents = [m["content"] for m in history if isinstance(m.get("content"), str)]
        arr = pa.array(contents, type=pa.large_string())
        data = np.frombuffer(arr.buffers()[2], dtype=np.uint8)[: arr.buffers()[2].size]
        offsets = np.frombuffer(arr.buffers()[1], dtype=np.int64)[: len(arr) + 1]
        return arr, data, offsets, [len(s) for s in contents]

    return cached(("strings", size), build)


def numpy_total(data):
    """The floor numpy offers: a chunked count of non-continuation bytes (one total)."""
    total = 0
    for start in range(0, len(data), CHUNK):
        block = data[start : start + CHUNK]
        total += len(block) - int(np.count_nonzero((block & 0xC0) == 0x80))
    return total


def numpy_per_string(data, offsets):
    """Per-string counts in numpy: chunked cumulative sums read at the offsets."""
    at = np.empty(len(offsets), dtype=np.int64)
    total = 0
    for start in range(0, max(len(data), 1), CHUNK):
        block = data[start : start + CHUNK]
        csum = np.cumsum((block & 0xC0) != 0x80, dtype=np.int64)
        lo, hi = np.searchsorted(offsets, [start, start + len(block)])
        rel = offsets[lo:hi] - start
        at[lo:hi] = total + np.where(rel > 0, csum[np.maximum(rel - 1, 0)], 0)
        total += int(csum[-1]) if len(csum) else 0
    at[offsets >= len(data)] = total
    return np.diff(at)


def label(benchmark, strings, kind):
    arr, data, offsets, _ = strings
    benchmark.group = f"utf8 code points {len(data) / 1e6:.0f} MB"
    benchmark.extra_info.update(bytes=len(data), strings=len(arr), kind=kind)


def test_utf8_lengths_kernel(benchmark, kernel, strings, size):
    arr, data, offsets, expected = strings
    label(benchmark, strings, f"kernel-{kernel.IMPLEMENTATION}")
    counts = benchmark.pedantic(kernel.utf8_lengths, (data, offsets), rounds=rounds(size, 50),
                                iterations=1)
    assert counts.tolist() == expected


def test_utf8_numpy_total(benchmark, strings, size):
    arr, data, offsets, expected = strings
    label(benchmark, strings, "numpy-total")
    total = benchmark.pedantic(numpy_total, (data,), rounds=rounds(size, 50), iterations=1)
    assert total == sum(expected)


def test_utf8_numpy_per_string(benchmark, strings, size):
    arr, data, offsets, expected = strings
    label(benchmark, strings, "numpy-per-string")
    counts = benchmark.pedantic(numpy_per_string, (data, offsets), rounds=rounds(size, 50),
                                iterations=1)
    assert counts.tolist() == expected


def test_utf8_pyarrow(benchmark, strings, size):
    import pyarrow.compute as pc

    arr, data, offsets, expected = strings
    label(benchmark, strings, "pyarrow")
    counts = benchmark.pedantic(pc.utf8_length, (arr,), rounds=rounds(size, 50), iterations=1)
    assert counts.to_pylist() == expected


@pytest.fixture(scope="session")
def conversations(history, size):
    import contextpolicy._kernel as kernel

    def build():
        _, chars, flags, _ = kernel.measure_messages(history)
        # Conversations of 50..400 messages, seeded.
        rng = np.random.default_rng(3)
        cuts = np.cumsum(rng.integers(50, 400, size=size // 50))
        offsets = np.concatenate([[0], cuts[cuts < size], [size]]).astype(np.int64)
        return offsets, flags, chars

    return cached(("conversations", size), build)


def test_trim_cut_many(benchmark, kernel, conversations, size):
    offsets, flags, chars = conversations
    benchmark.group = f"group + cut on arrays {size // 1000}k"
    benchmark.extra_info.update(messages=size, kind=f"kernel-{kernel.IMPLEMENTATION}")
    first, before, after, kept = benchmark.pedantic(
        kernel.trim_cut_many, (offsets, flags, chars, 2, 1000), rounds=rounds(size, 50),
        iterations=1,
    )
    assert len(first) == len(offsets) - 1 and bool(np.all(after <= before))
