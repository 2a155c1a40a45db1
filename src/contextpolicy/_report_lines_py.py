"""Report entries of JSONL lines: :func:`report_lines` (the pure twin of
``csrc/_report_lines.pxi``), ``reduce_lines`` with each line's entry written from a template of
the policy's report (what the JSONL runner writes for ``--report``).
"""

from __future__ import annotations

import re
from array import array
from typing import Any

from ._c_args import c_int
from ._kernel_names import ENTRY_SLOTS
from ._lines_py import _flat_bytes, _line_steps, _missed, reduce_lines
from ._records import FusedRecord
from ._tables import MISSED_REASONS

# A template is ``(head, steps, fragments)``: ``head`` a program for the entry, ``steps`` one
# program per trim, ``fragments`` one per fragment (system, history, question). A program is a
# tuple of bytes with a slot code between each two: the bytes are written as they are, each
# slot as the line's value of it. ``steps`` writes the array of the steps' programs, ``fragments``
# the array of the programs of the fragments the line has. A line gets no entry (its records
# instead) when it has warnings (pairing, unknown roles) or an ``id`` whose JSON is not written
# back as it is read: only a string without escapes, ``null``, ``true``, ``false`` and an
# integer of at most 18 digits (not ``-0``) are.

_SLOT = {name: code for code, name in enumerate(ENTRY_SLOTS)}  # a slot's code
# The codes of the slots of a head, a step and a fragment.
_ENTRY_RANGES = ((0, _SLOT["status"]), (_SLOT["status"], _SLOT["fragment-chars-before"]),
                 (_SLOT["fragment-chars-before"], len(ENTRY_SLOTS)))
_ENTRY_ID = re.compile(rb"-?(?:0|[1-9][0-9]{0,17})")


def _entry_program(program: Any, kind: int, where: str) -> tuple[Any, ...]:
    if type(program) is not tuple or len(program) % 2 == 0:
        raise TypeError(f"{where}: expected a tuple of bytes with a slot code between each two")
    lo, hi = _ENTRY_RANGES[kind]
    for i, item in enumerate(program):
        if i % 2 == 0:
            if type(item) is not bytes:
                raise TypeError(f"{where}[{i}]: expected bytes, got {type(item).__name__}")
        elif type(item) is not int or not lo <= item < hi:
            raise ValueError(f"{where}[{i}]: expected a slot code from {lo} to {hi - 1}")
    return program


def _entry_template(template: Any, nsteps: int) -> tuple[Any, ...]:
    """A template of :func:`report_lines`, checked."""
    if type(template) is not tuple or len(template) != 3:
        raise TypeError("template: expected a tuple (head, steps, fragments)")
    head, steps, fragments = template
    if type(steps) is not tuple or len(steps) != nsteps:
        raise ValueError(f"template: expected a tuple of a program for each of the {nsteps} "
                         "steps")
    if type(fragments) is not tuple or len(fragments) != 3:
        raise ValueError("template: expected a tuple of a program for each of the 3 fragments")
    return (_entry_program(head, 0, "template head"),
            tuple(_entry_program(s, 1, f"template steps[{i}]") for i, s in enumerate(steps)),
            tuple(_entry_program(f, 2, f"template fragments[{i}]")
                  for i, f in enumerate(fragments)))


def _written_back(piece: bytes) -> bool:
    """Whether ``dumps(loads(piece))`` is ``piece``, for a JSON value the scan validated."""
    if piece[:1] == b'"':
        return b"\\" not in piece
    if piece in (b"null", b"true", b"false"):
        return True
    return piece != b"-0" and _ENTRY_ID.fullmatch(piece) is not None


def _json_value(value: Any) -> bytes:
    if value is None:
        return b"null"
    if value is True:
        return b"true"
    if value is False:
        return b"false"
    if type(value) is str:
        return b'"%s"' % value.encode()
    return b"%d" % value


def _run_program(program: tuple[Any, ...], values: dict[int, Any], out: list[bytes]) -> None:
    out.append(program[0])
    for i in range(1, len(program), 2):
        value = values[program[i]]
        if type(value) is list:  # the steps or fragments: programs with their values
            out.append(b"[")
            for j, (sub, sub_values) in enumerate(value):
                if j:
                    out.append(b",")
                _run_program(sub, sub_values, out)
            out.append(b"]")
        else:
            out.append(value if type(value) is bytes else _json_value(value))
        out.append(program[i + 1])


def _entry(template: tuple[Any, ...], records: FusedRecord, ident: bytes | None,
           trims: tuple[Any, ...], watermark_chars: int) -> bytes | None:
    if records.warnings or (ident is not None and not _written_back(ident)):
        return None
    head, step_programs, fragment_programs = template
    steps = [(program, {
        _SLOT["status"]: d.status, _SLOT["reason"]: d.reason,
        _SLOT["chars-before"]: d.chars_before, _SLOT["chars-after"]: d.chars_after,
        _SLOT["groups-before"]: d.groups_before, _SLOT["groups-after"]: d.groups_after,
        _SLOT["messages-removed"]: d.messages_removed,
    }) for program, d in zip(step_programs, records.steps, strict=True)]
    fragments = [
        (fragment_programs[("system", "history", "question").index(fid)], {
            _SLOT["fragment-chars-before"]: b.chars, _SLOT["fragment-chars-after"]: a.chars,
            _SLOT["fragment-messages-before"]: b.messages,
            _SLOT["fragment-messages-after"]: a.messages,
            _SLOT["fragment-changed"]: k is not None,
        })
        for fid, b, a, k in zip(records.ids, records.before, records.after, records.kept,
                                strict=True)
    ]
    missed = _missed(records, trims, watermark_chars)
    values = {
        _SLOT["id"]: b"null" if ident is None else ident, _SLOT["triggered"]: records.triggered,
        _SLOT["before-chars"]: records.chars_before,
        _SLOT["before-messages"]: records.messages_before,
        _SLOT["fragments-count"]: len(records.ids), _SLOT["before-opaque"]: records.opaque_before,
        _SLOT["after-chars"]: records.chars_after, _SLOT["after-messages"]: records.messages_after,
        _SLOT["after-opaque"]: records.opaque_after, _SLOT["target-reached"]: records.watermark_met,
        _SLOT["steps"]: steps, _SLOT["fragments"]: fragments,
        _SLOT["missed-reason"]: MISSED_REASONS[missed - 1] if missed else None,
    }
    out: list[bytes] = []
    _run_program(head, values, out)
    return b"".join(out)


def report_lines(
    data: Any, starts: Any, stops: Any, steps: tuple[tuple[str, int, int, int], ...],
    trigger_chars: int, watermark_chars: int, template: Any,
) -> tuple[bytearray, Any, Any, bytearray, Any, list[Any]]:
    """:func:`reduce_lines`, and each line's report entry from ``template`` (see above).

    Returns ``(out, ends, figures, entries, entry_ends, raws)``: the first three as
    :func:`reduce_lines` gives them; the entries one after another in ``entries``, line ``i``'s
    ending at ``entry_ends[i]`` (a line of the object path, or one without an entry, adds
    nothing); ``raws[i]`` the records and id span of ``reduce_lines(..., raw=True)`` for a line
    of the byte path without an entry, ``None`` for every other line."""
    trigger_chars, watermark_chars = c_int(trigger_chars), c_int(watermark_chars)
    trims = _line_steps(steps)
    checked = _entry_template(template, len(trims))
    out, ends, figures, raws = reduce_lines(data, starts, stops, steps, trigger_chars,
                                            watermark_chars, True)
    b = _flat_bytes(data)
    entries = bytearray()
    entry_ends = array("q", bytes(8 * len(ends)))
    assert raws is not None
    for k, record in enumerate(raws):
        if record is not None:
            records, span = record
            entry = _entry(checked, records, None if span is None else b[span[0]:span[1]], trims,
                           watermark_chars)
            if entry is not None:
                entries += entry
                raws[k] = None
        entry_ends[k] = len(entries)
    return out, ends, figures, entries, entry_ends, raws
