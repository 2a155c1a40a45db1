"""Chooses the kernel once, at import: the compiled module, or its pure-Python twin.

The twin is used when ``CONTEXTPOLICY_PURE_PYTHON`` is set, on interpreters other than
CPython, or when the compiled module is missing.
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

IMPLEMENTATION: str = _impl.IMPLEMENTATION
COMPILED: bool = IMPLEMENTATION == "cython"
GROUP_MESSAGE = _impl.GROUP_MESSAGE
GROUP_USER_TURN = _impl.GROUP_USER_TURN
dict_lookup_floor = _impl.dict_lookup_floor
group_offsets = _impl.group_offsets
measure_messages = _impl.measure_messages
message_text_pieces = _impl.message_text_pieces
role_codes_utf8 = _impl.role_codes_utf8
tool_pairing = _impl.tool_pairing
trim_cut = _impl.trim_cut
trim_cut_many = _impl.trim_cut_many
utf8_lengths = _impl.utf8_lengths


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
        "implementation": IMPLEMENTATION,
        "pure_python_requested": PURE_REQUESTED,
    }
