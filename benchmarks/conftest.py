"""Benchmark fixtures: seeded synthetic histories (loaded back from JSON, as an application
holds them) and the sizes to run; the kernel fixtures (``kernel``, ``pipeline_kernel``) come
from the root conftest.

``pytest benchmarks --benchmark-enable --benchmark-only`` measures at 10k, 100k and 1M
messages; the test suite runs the same benchmarks once each, disabled, at 10k (correctness).
"""

from __future__ import annotations

import importlib
import json
import time
from collections.abc import Callable
from types import ModuleType
from typing import Any

import pytest

from contextpolicy.synthetic import (
    SEED_POLICY,  # noqa: F401  (shared with the benchmarks)
    make_history,
    make_transcript,
)

FULL_SIZES = [10_000, 100_000, 1_000_000]
SMOKE_SIZES = [10_000]
_CACHE: dict[tuple[str, int], Any] = {}


def measuring(config: pytest.Config) -> bool:
    # `--benchmark-enable` overrides the `--benchmark-disable` of the test suite's addopts.
    return bool(config.getoption("benchmark_enable")) or not config.getoption("benchmark_disable")


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "size" in metafunc.fixturenames:
        sizes = FULL_SIZES if measuring(metafunc.config) else SMOKE_SIZES
        metafunc.parametrize("size", sizes, ids=[f"{n // 1000}k" for n in sizes], scope="session")


def lookup_floor() -> ModuleType:
    """``benchmarks/floor.pyx``, compiled on first use: three bare dict lookups per message."""
    import pyximport

    pyximport.install(language_level=3, inplace=False)
    return importlib.import_module("benchmarks.floor")


def cached(key: tuple[str, int], make: Any) -> Any:
    if key not in _CACHE:
        _CACHE[key] = make()
    return _CACHE[key]


@pytest.fixture(scope="session")
def history(size: int) -> list[dict[str, Any]]:
    """``size`` messages of history, JSON round-tripped (realistic object layout)."""
    return cached(("history", size), lambda: json.loads(json.dumps(make_history(size, seed=7))))


@pytest.fixture(scope="session")
def transcript(size: int) -> list[dict[str, Any]]:
    """A system prompt, ``size`` messages of history and a question."""
    return cached(
        ("transcript", size), lambda: json.loads(json.dumps(make_transcript(size, seed=7)))
    )


def rounds(size: int, small: int = 20) -> int:
    return max(2, small * 10_000 // size)


def best_of(fn: Callable[[], Any], passes: int) -> float:
    """The fastest of ``passes`` timed calls of ``fn``, in seconds: a ratio's side, timed in
    the same run as the other."""
    best = float("inf")
    for _ in range(passes):
        start = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - start)
    return best
