"""The differential helper: run every kernel implementation (the ``kernels`` fixture of the
root conftest) on the same input and insist that they agree."""

from __future__ import annotations

import array
import json
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np
import pytest

from contextpolicy.errors import ContextError


def _same(a: Any, b: Any) -> bool:
    if isinstance(a, np.ndarray) or isinstance(b, np.ndarray):
        return (
            isinstance(a, np.ndarray) and isinstance(b, np.ndarray)
            and a.dtype == b.dtype and a.shape == b.shape and bool(np.array_equal(a, b))
        )
    if isinstance(a, (tuple, list)) and isinstance(b, (tuple, list)):
        return type(a) is type(b) and len(a) == len(b) and all(map(_same, a, b))
    if isinstance(a, array.array) or isinstance(b, array.array):
        return type(a) is type(b) and a.typecode == b.typecode and a == b
    return type(a) is type(b) and a == b


@pytest.fixture(scope="session")
def differential(kernels: list[ModuleType]) -> Callable[..., Any]:
    """``differential("measure_messages", msgs)`` (or ``differential(fn, msgs)``, which calls
    ``fn(kernel, msgs)``): call every implementation, assert equal
    results (or the same exception type and message), return the shared result or raise."""

    def run(name: str | Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        # A kernel function's name, or a function of (kernel, *args) for what needs more than
        # one call (a Measure's methods).
        outcomes = []
        for k in kernels:
            call = (lambda *a, _k=k, **kw: name(_k, *a, **kw)) if callable(name) else getattr(
                k, name)
            try:
                outcomes.append(("ok", call(*args, **kwargs)))
            except (ContextError, ValueError, TypeError) as exc:
                # Errors the kernels are documented to raise; anything else (an
                # AssertionError, a RecursionError) propagates as it is, readable.
                outcomes.append(("error", exc))
        first = outcomes[0]
        for k, other in zip(kernels[1:], outcomes[1:]):
            if first[0] == "error" or other[0] == "error":
                assert first[0] == other[0], (
                    f"{name}: {kernels[0].IMPLEMENTATION} gave {first[1]!r}, "
                    f"{k.IMPLEMENTATION} gave {other[1]!r}"
                )
                assert type(first[1]) is type(other[1]), (first[1], other[1])
                assert str(first[1]) == str(other[1])
                assert getattr(first[1], "issues", None) == getattr(other[1], "issues", None)
            else:
                assert _same(first[1], other[1]), (
                    f"{name}: {kernels[0].IMPLEMENTATION} and {k.IMPLEMENTATION} disagree:\n"
                    f"{first[1]!r}\n{other[1]!r}"
                )
        if first[0] == "error":
            raise first[1]
        return first[1]

    return run


@pytest.fixture
def workdir(tmp_path: Path) -> Path:
    """A folder of its own for a command line test, holding the example reduce policy as
    ``policy.json``."""
    from tests.support.cli import SEED_POLICY

    (tmp_path / "policy.json").write_text(json.dumps(SEED_POLICY))
    return tmp_path
