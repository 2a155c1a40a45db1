"""Options shared by the test suite and the benchmarks."""

from __future__ import annotations

import pytest


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--no-c-extensions", action="store_true", default=False,
        help="run without the compiled kernel: deselect the tests marked c_extension",
    )


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if not config.getoption("--no-c-extensions"):
        return
    kept, dropped = [], []
    for item in items:
        (dropped if item.get_closest_marker("c_extension") else kept).append(item)
    if dropped:
        config.hook.pytest_deselected(items=dropped)
        items[:] = kept
