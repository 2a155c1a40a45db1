"""Chooses the kernel once, at import: the compiled module, or its pure-Python twin.

The twin is used when ``CONTEXTPOLICY_PURE_PYTHON`` is set, on interpreters other than
CPython, or when the compiled module is missing. Every module reads the kernel through this one
(``_kernel.measure_messages(...)``), so :func:`use` can run the whole pipeline on either.
"""

from __future__ import annotations

import os
import platform
from types import ModuleType
from typing import TYPE_CHECKING

PURE_REQUESTED = os.environ.get("CONTEXTPOLICY_PURE_PYTHON", "").strip().lower() not in (
    "", "0", "false", "no",
)
NO_EXTENSIONS = PURE_REQUESTED or platform.python_implementation() != "CPython"

if TYPE_CHECKING or NO_EXTENSIONS:
    from . import _kernel_py as _impl
else:
    try:
        from . import _kernel_c as _impl
    except ImportError:  # built without a compiler: the twin gives identical results
        from . import _kernel_py as _impl

if TYPE_CHECKING:  # the annotated twin is the type surface; use() binds the live kernel
    from ._kernel_py import *  # noqa: F403

COMPILED: bool


def use(impl: ModuleType) -> ModuleType:
    """Make ``impl`` (a module of :func:`available_kernels`) the live kernel and return the one it
    replaces. For tests and benchmarks that run the pipeline on both kernels in one process."""
    global _impl, COMPILED
    previous, _impl = _impl, impl
    for name in impl.__all__:
        globals()[name] = getattr(impl, name)
    COMPILED = impl.IMPLEMENTATION == "cython"
    return previous


use(_impl)


def available_kernels() -> dict[str, ModuleType]:
    """Every kernel that imports here, by implementation name (for benchmarks)."""
    from . import _kernel_py

    found: dict[str, ModuleType] = {}
    if platform.python_implementation() == "CPython":
        try:
            from . import _kernel_c  # type: ignore[attr-defined]

            found[_kernel_c.IMPLEMENTATION] = _kernel_c
        except ImportError:
            pass
    found[_kernel_py.IMPLEMENTATION] = _kernel_py
    return found


def kernel_info() -> dict[str, object]:
    """Which kernel is live: ``{"compiled": bool, "implementation": "cython" | "python", ...}``."""
    return {
        "compiled": COMPILED,
        "implementation": _impl.IMPLEMENTATION,
        "pure_python_requested": PURE_REQUESTED,
    }
