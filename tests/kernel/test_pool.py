"""The kernel's pool of numpy's large blocks (``pooled_arrays``): numpy's arrays of 64 KiB or
more created inside a pooled section take their memory from it, freed blocks are handed out
again, the contents are what numpy promises (zeros from ``np.zeros``, kept data on a resize),
and the handler is numpy's own again outside the section and in other threads. On the twin
the section does nothing and arrays are numpy's own."""

from __future__ import annotations

import importlib
import subprocess
import sys
import threading
import time

import numpy as np
import pytest

try:
    from numpy._core.multiarray import get_handler_name
except ImportError:  # numpy 1.x
    from numpy.core.multiarray import get_handler_name  # type: ignore[no-redef]

BIG = 1 << 20  # elements: 8 MiB of float64, well above the pool's 64 KiB


@pytest.fixture
def pool(kernel):
    kernel.release_pool()
    yield kernel
    kernel.release_pool()


@pytest.fixture(params=[pytest.param("c", marks=pytest.mark.c_extension)])
def compiled(request):
    """The compiled kernel only: what the pool itself does (the twin has none)."""
    kernel = importlib.import_module("contextpolicy._kernel_c")
    kernel.release_pool()
    yield kernel
    kernel.release_pool()


def test_arrays_in_a_section_come_from_the_pool_and_are_numpys_outside(pool):
    compiled = pool.IMPLEMENTATION == "cython"
    outside = get_handler_name()
    with pool.pooled_arrays():
        inside = get_handler_name()
        a = np.arange(BIG, dtype=np.float64)
        b = np.arange(10)  # small arrays too: every array of the section has the handler
    assert get_handler_name() == outside
    if compiled:
        assert inside == get_handler_name(a) == get_handler_name(b) == "contextpolicy_pool"
    else:
        assert inside == outside == get_handler_name(a)
    # An array outlives its section and is still an ordinary array.
    assert a[-1] == BIG - 1 and a.sum() == BIG * (BIG - 1) / 2
    assert b.tolist() == list(range(10))


def test_a_freed_block_is_handed_out_again_zeroed_for_zeros(pool):
    if pool.IMPLEMENTATION != "cython":
        with pool.pooled_arrays():
            del_me = np.full(BIG, 7.0)
            del del_me
            assert not np.zeros(BIG).any()
        assert pool.pool_stats() == {"active": False, "blocks": 0, "bytes": 0, "hits": 0,
                                     "misses": 0, "limit": 0}
        return
    with pool.pooled_arrays():
        a = np.full(BIG, 7.0)
        at = a.ctypes.data
        del a
        held = pool.pool_stats()
        assert held["blocks"] == 1 and held["bytes"] == BIG * 8
        before = held["hits"]
        z = np.zeros(BIG)  # the same block, cleared (calloc's promise)
        assert z.ctypes.data == at
        assert pool.pool_stats()["hits"] == before + 1
        assert not z.any()
        del z
        e = np.empty(BIG // 2 + 1)  # more than half the block's size: it is handed out
        assert e.ctypes.data == at and pool.pool_stats()["blocks"] == 0
        del e
        g = np.empty(BIG // 2 - 1)  # less than half: a new block
        assert g.ctypes.data != at and pool.pool_stats()["blocks"] == 1
        del g
    assert pool.pool_stats()["blocks"] == 2
    pool.release_pool()
    stats = pool.pool_stats()
    assert stats["blocks"] == 0 and stats["bytes"] == 0


def test_data_is_kept_when_an_array_grows(pool):
    with pool.pooled_arrays():
        a = np.arange(BIG, dtype=np.int64)
        a.resize(3 * BIG, refcheck=False)  # numpy's realloc
        assert a[:BIG].tolist() == list(range(BIG))
        assert not a[BIG:].any()
        a.resize(BIG // 2, refcheck=False)
        assert a.tolist() == list(range(BIG // 2))


def test_blocks_are_64_byte_aligned(compiled):
    with compiled.pooled_arrays():
        arrays = [np.empty(n, dtype=np.uint8) for n in (1, 63, 65_537, 3 * BIG + 5)]
    assert all(a.ctypes.data % 64 == 0 for a in arrays)


def test_the_pool_never_holds_more_than_its_limit(compiled):
    limit = compiled.pool_stats()["limit"]
    with compiled.pooled_arrays():
        arrays = [np.empty(limit // 8, dtype=np.uint8) for _ in range(12)]  # 1.5 limits
        del arrays
        stats = compiled.pool_stats()
    assert 0 < stats["bytes"] <= limit
    assert stats["blocks"] == 8


def test_blocks_idle_for_two_seconds_are_given_back(compiled):
    with compiled.pooled_arrays():
        a = np.empty(BIG)
        del a  # freed now: its two seconds start here, not at a section's edge
        time.sleep(1.0)
        b = np.empty(BIG // 2 + 1)
        del b  # the same block, freed again
    assert compiled.pool_stats()["blocks"] == 1
    time.sleep(1.2)
    with compiled.pooled_arrays():  # 1.2 s since the block was last freed: kept
        pass
    assert compiled.pool_stats()["blocks"] == 1
    time.sleep(1.0)
    with compiled.pooled_arrays():  # 2.2 s: given back
        pass
    assert compiled.pool_stats()["blocks"] == 0


def test_a_shrunk_block_moves_to_a_smaller_one(compiled):
    with compiled.pooled_arrays():
        a = np.arange(4 * BIG, dtype=np.int64)
        a.resize(BIG, refcheck=False)  # a quarter: moved, the big block back in the pool
        assert a.tolist() == list(range(BIG))
        assert compiled.pool_stats()["bytes"] == 4 * BIG * 8
        a.resize(BIG - 10, refcheck=False)  # still more than half: stays where it is
        assert compiled.pool_stats()["bytes"] == 4 * BIG * 8
        assert a[-1] == BIG - 11


@pytest.mark.skipif(sys.platform == "win32", reason="the address-space limit is resource's")
def test_a_failed_allocation_gives_the_pool_back_and_tries_again(compiled):
    # Under an address-space limit a request that fits only without the pool's blocks: the
    # pool gives them back and the request succeeds.
    code = f"""
import resource, numpy as np
from {compiled.__name__} import pooled_arrays, pool_stats
resource.setrlimit(resource.RLIMIT_AS, (1400 << 20, resource.RLIM_INFINITY))
with pooled_arrays():
    held = [np.empty(100 << 20, dtype=np.uint8) for _ in range(4)]
    del held
    assert pool_stats()["bytes"] == 400 << 20
    big = np.empty(900 << 20, dtype=np.uint8)
    big[::4096] = 1
print(pool_stats()["bytes"], int(big.sum()))
"""
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr
    held, ones = map(int, done.stdout.split())
    assert held == 0 and ones == (900 << 20) // 4096


def test_sections_left_out_of_order_leave_numpys_handler(pool):
    outside = get_handler_name()
    a, b = pool.pooled_arrays(), pool.pooled_arrays()
    a.__enter__()
    b.__enter__()
    a.__exit__(None, None, None)
    assert get_handler_name() == outside
    b.__exit__(None, None, None)  # the pool is not this context's handler now: nothing to undo
    assert get_handler_name() == outside

    def suspended():
        with pool.pooled_arrays():
            yield

    first, second = suspended(), suspended()
    next(first)
    next(second)
    # Generators suspended inside sections, closed in the order they were entered: the first
    # restores numpy's handler, the second finds the pool no longer set and leaves it so.
    first.close()
    assert get_handler_name() == outside
    second.close()
    assert get_handler_name() == outside


def test_a_section_is_per_thread_and_nests(pool):
    seen = {}

    def other():
        seen["thread"] = get_handler_name()
        seen["array"] = get_handler_name(np.empty(BIG))

    outside = get_handler_name()
    with pool.pooled_arrays() as section:
        inner_name = get_handler_name()
        with pool.pooled_arrays():
            assert get_handler_name() == inner_name
        assert get_handler_name() == inner_name  # the inner one restores the outer one
        t = threading.Thread(target=other)
        t.start()
        t.join()
        with pytest.raises(RuntimeError, match="already entered"):
            section.__enter__()
    assert get_handler_name() == outside
    assert seen == {"thread": outside, "array": outside}
    section.__exit__(None, None, None)  # a second exit does nothing
    assert get_handler_name() == outside


def test_a_section_is_left_when_its_body_raises(pool):
    outside = get_handler_name()
    with pytest.raises(ZeroDivisionError), pool.pooled_arrays():
        _ = np.empty(BIG)
        1 / 0  # noqa: B018
    assert get_handler_name() == outside


def test_arrays_freed_in_other_threads_are_safe(pool):
    # Blocks go back to the pool from whichever thread frees them (holding the GIL, as numpy
    # frees arrays); many threads allocating and freeing never share a block.
    errors = []

    def work(k):
        try:
            for i in range(40):
                with pool.pooled_arrays():
                    a = np.full(BIG // 8 + i, k, dtype=np.int64)
                    b = np.zeros(BIG // 8 + i, dtype=np.int64)
                if not (a == k).all() or b.any():
                    errors.append((k, i))
        except Exception as exc:  # pragma: no cover - reported below
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(k,)) for k in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
