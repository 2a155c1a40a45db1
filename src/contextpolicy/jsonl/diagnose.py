"""What is wrong with bytes that do not read as JSON, and where.

One description for every place that reads JSON from a user: the lines of a JSONL file (every
path of ``reduce``, ``bench --input``) and whole documents (policies, plans, handlers files).
A position is a line number and a byte column within that line, both from 1, so that
``FILE:LINE:COLUMN`` points at the same byte in an editor, ``sed -n LINEp`` and ``cut -b``
(orjson counts characters from the start of what it was given, which inside a JSONL file is
neither). Bytes that are not UTF-8 are named, in hex, with the way to re-encode them; a JSON
array or a pretty-printed document given as JSONL says what JSONL is.

Like ``files``, this module loads neither numpy nor the kernel.
"""

from __future__ import annotations

from typing import NamedTuple

import orjson

__all__ = ["BOM", "Problem", "json_problem", "position", "top_level_hint", "utf8_problem"]

BOM = b"\xef\xbb\xbf"  # a UTF-8 byte order mark: accepted at the start of a file, nowhere else
UTF16_BOMS = (b"\xff\xfe", b"\xfe\xff")

JQ_ARRAY = "jq -c '.[]'"  # a JSON array of objects -> one object per line
JQ_COMPACT = "jq -c ."  # pretty-printed objects -> one object per line
RE_ENCODE_UTF16 = "re-encode it, e.g. with iconv -f utf-16 -t utf-8"
RE_ENCODE_LATIN1 = "re-encode it, e.g. with iconv -f latin1 -t utf-8 if it is Latin-1"


class Problem(NamedTuple):
    """Why bytes are not JSON: ``line`` and byte ``column`` (from 1) within them, and a message
    that says what was found, what was expected and what to do."""

    line: int
    column: int
    message: str

    def at(self, name: str, first_line: int = 1) -> str:
        """``NAME:LINE:COLUMN: message``, the line counted from ``first_line`` (the number in
        the file of the first line of the bytes described)."""
        return f"{name}:{first_line + self.line - 1}:{self.column}: {self.message}"


def position(data: bytes, offset: int) -> tuple[int, int]:
    """``(line, byte column)`` of ``offset`` in ``data``, both from 1 (lines end at ``\\n``)."""
    line_start = data.rfind(b"\n", 0, offset) + 1
    return data.count(b"\n", 0, line_start) + 1, offset - line_start + 1


def _byte_offset(text: str, pos: int) -> int:
    """The byte offset in UTF-8 of the character ``pos`` of ``text``."""
    return len(text[:pos].encode("utf-8", "surrogatepass"))


def json_problem(
    data: bytes | bytearray | memoryview, exc: orjson.JSONDecodeError, *,
    subject: str = "invalid JSON", jsonl: bool = False,
) -> Problem:
    """The problem orjson found in ``data`` (``exc``), placed by line and byte column and said
    for a person: ``"{subject}: {what}"`` for a syntax error; bytes that are not UTF-8 (and a
    byte order mark where none is accepted) named as such. ``jsonl``: ``data`` is one line of
    a JSONL file, and a line that starts a document spread over several lines says so."""
    raw = bytes(data)
    if raw.startswith(BOM):
        return Problem(1, 1, "a UTF-8 byte order mark (BOM) in the middle of the input: it is "
                       "accepted only as the first bytes of a file (were files joined?); "
                       "remove it")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as err:
        return _not_utf8(raw, err)
    if exc.msg.startswith("str is not valid UTF-8"):  # bytes Python decodes and orjson not
        return Problem(1, 1, f"{subject}: {exc.msg}")
    pos = max(0, min(exc.pos, len(text)))
    offset = _byte_offset(text, pos)
    line, column = position(raw, offset)
    found = raw[offset:offset + 1]
    if found == b"\x00":
        return Problem(line, column, "a NUL byte (0x00), which JSON text never holds: is the "
                       f"input UTF-16? {RE_ENCODE_UTF16}")
    what = exc.msg
    if pos < len(text):
        what += f" (found {text[pos]!r})"
    if jsonl and offset >= len(raw.rstrip()):  # the line ends before the document does
        stripped = raw.strip()
        if stripped.startswith(b"["):  # no line of JSONL input is an array
            what += (": the line starts a JSON array that goes on over the next lines; reduce "
                     "wants one JSON object per line (JSONL): convert a file that is one JSON "
                     f"array with {JQ_ARRAY}")
        elif stripped == b"{":
            what += (": the line starts a JSON object that goes on over the next lines (a "
                     "pretty-printed document?); JSONL wants each object on one line: convert "
                     f"it with {JQ_COMPACT}")
    return Problem(line, column, f"{subject}: {what}")


def utf8_problem(data: bytes | bytearray | memoryview) -> Problem | None:
    """Where ``data`` is not UTF-8, or ``None`` when it is."""
    raw = bytes(data)
    try:
        raw.decode("utf-8")
    except UnicodeDecodeError as err:
        return _not_utf8(raw, err)
    return None


def _not_utf8(raw: bytes, err: UnicodeDecodeError) -> Problem:
    if raw.startswith(UTF16_BOMS):
        return Problem(1, 1, "the input is UTF-16 (it starts with a UTF-16 byte order mark), "
                       f"not UTF-8: {RE_ENCODE_UTF16}")
    line, column = position(raw, err.start)
    return Problem(line, column, f"byte 0x{raw[err.start]:02X} is not UTF-8 ({err.reason}); "
                   f"the input must be UTF-8: {RE_ENCODE_LATIN1}")


def top_level_hint(value: object) -> str:
    """What to do with a JSONL line that holds a JSON array, where an object was expected."""
    if isinstance(value, list) and value and all(
            isinstance(item, dict) and "role" in item for item in value):
        return ('the line is a JSON array of messages: write it as {"messages": [...]} '
                "(jq -c '{messages: .}')")
    return ("the line is a JSON array: reduce wants one JSON object per line (JSONL); convert a "
            f"file that is one JSON array with {JQ_ARRAY}")
