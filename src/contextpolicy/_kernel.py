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
    GROUP_MESSAGE = _impl.GROUP_MESSAGE
    GROUP_USER_TURN = _impl.GROUP_USER_TURN
    IMPLEMENTATION = _impl.IMPLEMENTATION
    TABLES = _impl.TABLES
    Measure = _impl.Measure
    group_offsets = _impl.group_offsets
    measure = _impl.measure
    measure_messages = _impl.measure_messages
    message_text_pieces = _impl.message_text_pieces
    line_bounds = _impl.line_bounds
    reduce_lines = _impl.reduce_lines
    report_lines = _impl.report_lines
    ENTRY_SLOTS = _impl.ENTRY_SLOTS
    reduce_plan = _impl.reduce_plan
    fused_result = _impl.fused_result
    reduce_rows = _impl.reduce_rows
    SCAN_FIGURES = _impl.SCAN_FIGURES
    ORPHAN_CODE = _impl.ORPHAN_CODE
    UNANSWERED_CODE = _impl.UNANSWERED_CODE
    reduce_transcript = _impl.reduce_transcript
    split_transcript = _impl.split_transcript
    text_pieces = _impl.text_pieces
    role_codes_utf8 = _impl.role_codes_utf8
    tool_pairing = _impl.tool_pairing
    trim_cut = _impl.trim_cut
    trim_cut_many = _impl.trim_cut_many
    utf8_lengths = _impl.utf8_lengths
    utf8_validate = _impl.utf8_validate
    gather_bytes = _impl.gather_bytes
    gather_bits = _impl.gather_bits
    gather_offsets = _impl.gather_offsets
    part_chars = _impl.part_chars
    PART_FIELDS = _impl.PART_FIELDS
    string_codes = _impl.string_codes
    string_ids = _impl.string_ids
    arrange_ids = _impl.arrange_ids
    json_string_lengths = _impl.json_string_lengths
    compact_json = _impl.compact_json
    compact_json_length = _impl.compact_json_length
    Utf8Error = _impl.Utf8Error
    pooled_arrays = _impl.pooled_arrays
    pool_stats = _impl.pool_stats
    release_pool = _impl.release_pool

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
        "implementation": IMPLEMENTATION,
        "pure_python_requested": PURE_REQUESTED,
    }
