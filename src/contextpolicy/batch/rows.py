"""The object path, one row at a time: a row the columnar path cannot measure (or every row, when
the policy needs objects) read as Python objects and run through ``process_context``, and the
messages it keeps found again among the row's own."""

from __future__ import annotations

from typing import Any, NamedTuple

import orjson

from .. import _kernel
from .._tables import (
    MAX_JSON_DEPTH,
)
from ..core import process_context
from ..errors import ContextPlanError, Issue
from ..fused import fused_missed_reason
from ..plan import ContextPlan
from .arrow import require_pyarrow
from .run import TableRun


def json_field_names(t: Any) -> set[str]:
    """Fields of a message struct held as Arrow's JSON extension type (parsed for the object
    path)."""
    pa = require_pyarrow()
    found = set()
    for f in t:
        if isinstance(f.type, pa.BaseExtensionType) and f.type.extension_name == "arrow.json":
            found.add(f.name)
    return found


def rows_messages(arr: Any, rows: Any, column: str, json_fields: set[str]) -> list[Any]:
    """The messages of ``rows`` as Python objects (one conversion), JSON-typed fields parsed."""
    if not len(rows):
        return []
    # Row by row: a take of the rows first would copy their (often long) values once more.
    out = [arr[row].as_py() for row in rows.tolist()]  # the column's UTF-8 is checked
    if json_fields:
        for row, messages in zip(rows.tolist(), out, strict=True):
            parse_json_fields(messages, row, column, json_fields)
    return out


def parse_json_fields(messages: Any, row: int, column: str, json_fields: set[str]) -> None:
    if isinstance(messages, list):
        for i, message in enumerate(messages):
            if not isinstance(message, dict):
                continue
            for key in json_fields & message.keys():
                if isinstance(message[key], str):
                    message[key] = parse_json_text(message[key], f"{column}[{row}][{i}].{key}")


def parse_json_text(text: str, path: str) -> Any:
    """``text`` parsed by orjson, which reads arrays and objects nested up to
    ``MAX_JSON_DEPTH`` levels (a JSONL line's limit too); deeper is ``too-deep``; integers
    exact however large (orjson alone makes a float of one beyond 64 bits)."""
    from ..jsonl.files import loads_exactly

    try:
        return loads_exactly(text.encode())
    except orjson.JSONDecodeError as exc:
        if "depth" in str(exc):
            raise ContextPlanError(
                f"the JSON text nests arrays and objects deeper than {MAX_JSON_DEPTH} levels",
                path=path, code="too-deep") from None
        raise ContextPlanError(f"expected JSON text ({exc})", path=path,
                               code="invalid-json") from None
    except ValueError:  # a long number nested too deeply to be read exactly
        raise ContextPlanError(
            f"the JSON text nests arrays and objects deeper than {MAX_JSON_DEPTH} levels",
            path=path, code="too-deep") from None


def _row_error(exc: ContextPlanError, column: str, row: int) -> ContextPlanError:
    def where(path: str) -> str:
        rest = path[len("messages"):] if path.startswith("messages") else (
            "." + path if path else "")
        return f"{column}[{row}]{rest}"

    return ContextPlanError([Issue(where(i.path), i.message, i.code) for i in exc.issues])


class RowFigures(NamedTuple):
    """A row's figures, as its report gives them."""

    chars_before: int
    chars_after: int
    messages_before: int
    messages_after: int
    groups_removed: int
    triggered: bool
    target_reached: bool | None
    tokens_before: int | None
    tokens_after: int | None
    missed_reason: str | None


class RowWarning(NamedTuple):
    """A row's warning: its code, fragment, message index and tool call id."""

    code: str
    fragment_id: str
    message_index: int | None
    tool_call_id: str | None


class ObjectRow(NamedTuple):
    """A row through the object path: the messages it keeps (each an index of the row's
    messages, or a new message), its figures and its warnings."""

    kept: list[int | dict[str, Any]]
    figures: RowFigures
    warnings: list[RowWarning]


def object_row(run: TableRun, messages: Any, column: str, row: int) -> ObjectRow:
    if messages is None:
        raise ContextPlanError("expected a list of messages, got null", path=f"{column}[{row}]",
                               code="invalid-messages")
    try:
        _kernel.measure(messages)  # errors named by the message's index in the row
        if run.fused is not None:
            return _fused_row(run, messages)
        plan = ContextPlan.from_messages(messages)
        result = process_context(plan, run.prepared, implementations=run.implementations)
    except ContextPlanError as exc:
        raise _row_error(exc, column, row) from None
    report = result.report
    groups = sum((s.groups_before or 0) - (s.groups_after or 0)
                 for s in report.steps if s.status == "applied" and s.kind == "trim")
    figures = RowFigures(report.before.chars, report.after.chars, report.before.messages,
                         report.after.messages, groups, report.triggered,
                         report.target_reached, report.before.tokens, report.after.tokens,
                         report.missed_reason)
    warnings = [RowWarning(w.code, w.fragment_id, w.index, w.tool_call_id)
                for w in report.warnings]
    return ObjectRow(_kept(messages, result.input), figures, warnings)


def _fused_row(run: TableRun, messages: list[Any]) -> ObjectRow:
    prepared = run.prepared
    assert run.fused is not None
    raw = _kernel.reduce_transcript(messages, run.fused, run.trigger, run.watermark)
    figures = RowFigures(raw.chars_before, raw.chars_after, raw.messages_before, raw.messages_after,
                         raw.groups_removed, raw.triggered,
                         bool(raw.watermark_met) if run.reduces else None, None, None,
                         fused_missed_reason(prepared, raw))
    ids = raw.ids
    # (the detail of an unknown-role is its role and count, which the figures leave out)
    warnings = [RowWarning(w.code, ids[w.fragment], w.message_index,
                           None if w.code == "unknown-role" else w.detail)
                for w in raw.warnings]
    assert raw.input is not None  # (only the records of a line read as bytes have none)
    return ObjectRow(_kept(messages, raw.input), figures, warnings)


def _kept(messages: list[Any], output: list[Any]) -> list[int | dict[str, Any]]:
    """The output as indices of the row's messages where it holds them (in order), new
    messages as they are.

    A compress handler answers with copies: a message it left as it was (same content, as the
    model sees it) is the row's own message again, in order, so that its Arrow value is taken
    as it was rather than built anew; only the messages a handler changed or wrote are new."""
    at = {id(m): i for i, m in enumerate(messages)}
    kept: list[int | dict[str, Any]] = [at.get(id(m), m) if type(m) is dict else m
                                        for m in output]
    if all(isinstance(k, int) for k in kept):
        return kept
    from ..content import snapshot

    by_content: dict[Any, list[int]] = {}
    for i in reversed(range(len(messages))):
        by_content.setdefault(snapshot(messages[i]), []).append(i)
    last = -1
    for j, item in enumerate(kept):
        if isinstance(item, int):
            last = item
            continue
        found = by_content.get(snapshot(item))
        while found and found[-1] <= last:  # only a later message keeps the order
            found.pop()
        if found:
            last = found.pop()
            kept[j] = last
    return kept


