"""Options and kernel fixtures shared by the test suite and the benchmarks.

``kernel`` is each kernel module in turn (ids ``c`` and ``py``), for tests of the kernel's own
functions. ``pipeline_kernel`` makes each kernel the live one for a whole module, so that
``process_context`` and everything above it run on the compiled kernel and on the twin in one
pytest run. A missing compiled module is an error, never a silent skip, unless
``--no-c-extensions`` is given (which deselects the ``c`` parameter).
"""

from __future__ import annotations

import importlib
import os
import re
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import pytest

KERNEL_MODULES = {"c": "contextpolicy._kernel_c", "py": "contextpolicy._kernel_py"}
KERNEL_PARAMS = [pytest.param("c", marks=pytest.mark.c_extension), "py"]


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--no-c-extensions", action="store_true", default=False,
        help="run without the compiled kernel: deselect the tests marked c_extension",
    )


_EXTRAS_MODULE = re.compile(r"^pytestmark = \[?pytest\.mark\.extras\b", re.M)


def pytest_ignore_collect(collection_path: Path, config: pytest.Config) -> bool | None:
    """A module of the optional extras' suites (``pytestmark = pytest.mark.extras``) is not even
    imported when the run deselects them (the default ``-m 'not extras'``), so that the main
    suite needs none of the extras installed; ``-m extras`` collects them, and then a missing
    extra is an import error, never a skip."""
    if collection_path.suffix != ".py" or not collection_path.name.startswith("test_"):
        return None
    expr = config.getoption("markexpr") or ""
    if not expr.strip() or re.search(r"(?<!not )\bextras\b", expr):
        return None
    try:
        text = collection_path.read_text("utf-8")
    except OSError:
        return None
    return True if _EXTRAS_MODULE.search(text) else None


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if not config.getoption("--no-c-extensions"):
        return
    kept, dropped = [], []
    for item in items:
        (dropped if item.get_closest_marker("c_extension") else kept).append(item)
    if dropped:
        config.hook.pytest_deselected(items=dropped)
        items[:] = kept


def load_kernel(name: str) -> ModuleType:
    return importlib.import_module(KERNEL_MODULES[name])


@pytest.fixture(scope="session", params=KERNEL_PARAMS)
def kernel(request: pytest.FixtureRequest) -> ModuleType:
    """Each kernel implementation in turn."""
    return load_kernel(request.param)


@pytest.fixture(scope="session")
def kernels(request: pytest.FixtureRequest) -> list[ModuleType]:
    """Every implementation that must agree (both, unless ``--no-c-extensions``)."""
    names = ["py"] if request.config.getoption("--no-c-extensions") else ["c", "py"]
    return [load_kernel(name) for name in names]


@pytest.fixture(scope="session")
def two_kernels(kernels: list[ModuleType]) -> list[ModuleType]:
    """Both kernels, for tests that compare them: skipped when only the twin is present, where a
    comparison would hold the twin to itself."""
    if len(kernels) < 2:
        pytest.skip("only the pure-Python twin is present (--no-c-extensions): comparing the "
                    "kernels needs the compiled one too")
    return kernels


@pytest.fixture(scope="module", params=KERNEL_PARAMS)
def pipeline_kernel(request: pytest.FixtureRequest) -> Iterator[ModuleType]:
    """Each kernel in turn as the live kernel of the whole library, for a module's tests."""
    from contextpolicy import _kernel

    impl = load_kernel(request.param)
    previous = _kernel.use(impl)
    try:
        yield impl
    finally:
        _kernel.use(previous)


@pytest.fixture(scope="session", autouse=True)
def _policy_cache(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """The cache of validated policies (``jsonl.line_policy``) in a folder of the run's own,
    for this process and the commands it starts, never the user's."""
    from contextpolicy.jsonl.line_policy import CACHE_VARIABLE

    previous = os.environ.get(CACHE_VARIABLE)
    os.environ[CACHE_VARIABLE] = str(tmp_path_factory.mktemp("policy-cache"))
    yield
    if previous is None:
        os.environ.pop(CACHE_VARIABLE, None)
    else:
        os.environ[CACHE_VARIABLE] = previous
