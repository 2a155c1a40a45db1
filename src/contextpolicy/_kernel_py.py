"""Pure-Python twin of the compiled kernel (``contextpolicy._kernel_c``, built from ``csrc/``).

Same functions, same results, same errors. It is the type surface of the kernel and the
implementation wherever the compiled module is missing (PyPy, no compiler, or
``CONTEXTPOLICY_PURE_PYTHON=1``). Each concern lives in its own module beside its compiled
counterpart; this module gathers their exported names:

- messages (``_messages_py``, ``_pairing_py``, ``_json_py``, ``_fused_py``): measuring message
  objects, text pieces, groups and trim cuts, tool pairing, unknown roles, compact JSON, the
  fused reduce of one plan and of one transcript;
- columns (``_columns_py``, ``_column_parts_py``): Arrow-layout buffers;
- rows (``_rows_py``): many transcripts at once;
- lines (``_lines_py``): the byte scan of JSONL lines;
- report lines (``_report_lines_py``): report entries written from a template;
- exactness (``_exact_py``): a value and its snapshot compared by exact types and values.

Constants, codes and exception classes come from ``_kernel_names`` and ``_tables``, which the
compiled kernel imports too.
"""

from __future__ import annotations

from ._column_parts_py import arrange_ids, part_chars, string_ids
from ._columns_py import (
    gather_bits,
    gather_bytes,
    gather_offsets,
    json_string_lengths,
    pool_stats,
    pooled_arrays,
    release_pool,
    role_codes_utf8,
    string_codes,
    trim_cut_many,
    utf8_lengths,
    utf8_validate,
)
from ._exact_py import exact_same
from ._fused_py import fused_result, reduce_plan, reduce_transcript, split_transcript
from ._json_py import COMPACT_JSON as COMPACT_JSON
from ._json_py import compact_json, compact_json_length
from ._kernel_names import (
    ENTRY_SLOTS,
    ORPHAN_CODE,
    PART_FIELDS,
    SCAN_DEPTH,
    SCAN_FIGURES,
    SCAN_KEYS,
    SCAN_NUMBER,
    UNANSWERED_CODE,
    Utf8Error,
)
from ._lines_py import figure_sums, line_bounds, reduce_lines
from ._messages_py import Measure, measure, measure_messages, message_text_pieces, text_pieces
from ._pairing_py import group_offsets, tool_pairing, trim_cut
from ._report_lines_py import report_lines
from ._rows_py import reduce_rows
from ._tables import GROUP_MESSAGE, GROUP_USER_TURN, tables

__all__ = [
    "GROUP_MESSAGE",
    "ORPHAN_CODE",
    "SCAN_DEPTH",
    "SCAN_FIGURES",
    "SCAN_KEYS",
    "SCAN_NUMBER",
    "ENTRY_SLOTS",
    "UNANSWERED_CODE",
    "GROUP_USER_TURN",
    "IMPLEMENTATION",
    "TABLES",
    "Measure",
    "fused_result",
    "group_offsets",
    "measure",
    "measure_messages",
    "message_text_pieces",
    "line_bounds",
    "figure_sums",
    "reduce_lines",
    "report_lines",
    "reduce_plan",
    "reduce_rows",
    "reduce_transcript",
    "role_codes_utf8",
    "split_transcript",
    "text_pieces",
    "tool_pairing",
    "trim_cut",
    "trim_cut_many",
    "utf8_lengths",
    "utf8_validate",
    "gather_bytes",
    "gather_bits",
    "gather_offsets",
    "part_chars",
    "PART_FIELDS",
    "string_codes",
    "string_ids",
    "arrange_ids",
    "json_string_lengths",
    "compact_json",
    "compact_json_length",
    "Utf8Error",
    "pooled_arrays",
    "pool_stats",
    "release_pool",
    "exact_same",
]

IMPLEMENTATION = "python"
TABLES = tables()
