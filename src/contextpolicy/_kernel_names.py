"""The constants, codes and exception classes both kernels export, defined once.

The pure twin's modules and the compiled kernel (``csrc/_kernel_c.pyx``) import them from here,
so a figure's slot, a warning code or an error class is the same object on both kernels. Tables
that the compiled kernel needs at build time (role, part and key codes) live in
:mod:`contextpolicy._tables`.
"""

from __future__ import annotations

from ._tables import LINE_FIGURE, LINE_FIGURES, MAX_JSON_DEPTH

# Compact JSON (both kernels' writers): the message of a value nested too deep.
JSON_TOO_DEEP = (f"the JSON value nests arrays and objects deeper than {MAX_JSON_DEPTH} levels "
                 "(or contains itself)")


class JsonTooDeep(Exception):
    """A value nests deeper than ``MAX_JSON_DEPTH`` (or contains itself)."""


class Utf8Error(ValueError):
    """Bytes that are not UTF-8: ``index`` is the string's (or part's) place in the array it was
    read from, ``byte`` the absolute offset of the first byte of the invalid sequence."""

    def __init__(self, message: str, index: int, byte: int) -> None:
        super().__init__(message)
        self.index, self.byte = index, byte


# part_chars: the fields it reads, in order. A part whose field is missing or null is one only
# the object path can measure for text and thinking, and counts 0 for a result's content and a
# tool_use's name.
PART_FIELDS = ("text", "content", "name", "thinking")

ORPHAN_CODE = 0  # warning codes of reduce_rows: an orphan tool result ...
UNANSWERED_CODE = 1  # ... and an unanswered tool call

# The byte scan of JSONL lines (reduce_lines): the deepest nesting, the longest number and the
# most keys of a line's object it reads; longer, deeper or wider lines take the object path.
SCAN_DEPTH = 64
SCAN_NUMBER = 63
SCAN_KEYS = 64
# reduce_lines' figures of a line: the columns of LINE_FIGURES (their count; where the
# unknown-role warnings are).
SCAN_UNKNOWN_ROLES = LINE_FIGURE["unknown_roles"]
SCAN_FIGURES = len(LINE_FIGURES)

# The slots of a report entry's template (report_lines).
ENTRY_SLOTS = (
    # the entry (head)
    "id", "triggered", "before-chars", "before-messages", "fragments-count", "before-opaque",
    "after-chars", "after-messages", "after-opaque", "target-reached", "steps", "fragments",
    "missed-reason",
    # a step
    "status", "reason", "chars-before", "chars-after", "groups-before", "groups-after",
    "messages-removed",
    # a fragment
    "fragment-chars-before", "fragment-chars-after", "fragment-messages-before",
    "fragment-messages-after", "fragment-changed",
)
