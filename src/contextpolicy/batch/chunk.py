"""One chunk of a column reduced: measured from its buffers, split, grouped and cut in one kernel
call, the rows that need objects run on the object path, and the output and figures built."""

from __future__ import annotations

from typing import Any

import numpy as np

from .. import _kernel
from .._records import RowsRecord
from .._tables import (
    MISSED_REASONS,
    ROLE_OTHER,
)
from ..errors import ContextPlanError
from .arrow import is_list_type, offsets_of, require_pyarrow
from .assemble import expand_ranges, gather, index_runs, joined_runs, new_values
from .checks import check_utf8
from .measure import Measured
from .rows import json_field_names, object_row, rows_messages
from .run import FRAGMENTS, ROW_WARNING_CODES, TableRun, warning_type


def _unknown_roles(measured: Measured, fast: Any, offs: Any, head: Any, cut: Any,
                   tail: Any) -> tuple[Any, Any, Any] | None:
    """The ``unknown-role`` warnings of the rows reduced here, as arrays ``(row, fragment,
    index)``: per row and fragment of the result (system before ``head``, the kept history
    from ``cut``, the question from ``tail``), one per role the accounting does not know, at
    its first message, in order. Roles are told apart by their bytes (dictionary codes): the
    figures name no role, so none is decoded."""
    at = np.flatnonzero(measured.roles == ROLE_OTHER)
    if not len(at):
        return None
    row = np.searchsorted(offs, at, side="right") - 1
    at, row = at[fast[row]], row[fast[row]]
    h, c, t = head[row], cut[row], tail[row]
    kept = (at < h) | (at >= c)  # messages head..cut were trimmed
    at, row, h, c, t = at[kept], row[kept], h[kept], c[kept], t[kept]
    if not len(at):
        return None
    frag = np.where(at < h, 0, np.where(at < t, 1, 2))
    start = np.where(frag == 0, offs[:-1][row], np.where(frag == 1, c, t))
    import pyarrow.compute as pc

    role = pc.dictionary_encode(measured.role_strings.take(require_pyarrow().array(at)))
    code = np.asarray(role.indices, dtype=np.int64)
    # each (row, fragment, role) at its first message, in order of rows, fragments, messages
    order = np.lexsort((at, code, frag, row))
    row, frag, code, at, start = row[order], frag[order], code[order], at[order], start[order]
    first = np.flatnonzero(np.concatenate([[True], (row[1:] != row[:-1]) | (
        frag[1:] != frag[:-1]) | (code[1:] != code[:-1])]))
    order = np.lexsort((at[first], frag[first], row[first]))
    first = first[order]
    return row[first], frag[first], at[first] - start[first]


class Chunk:
    """One chunk of the column, reduced: ``messages`` (the chunk's output column), and the
    figures of its rows (``figs``, ``triggered``, ``missed``, ``reached``, ``tokens``,
    ``warnings``, ``path``)."""

    def __init__(self, run: TableRun, arr: Any, column: str) -> None:
        pa = require_pyarrow()
        t = arr.type
        if not (is_list_type(t) and pa.types.is_struct(t.value_type)):
            raise ContextPlanError(
                f"expected a list<struct<role, content, ...>> column, got {t}", path=column,
                code="invalid-messages",
            )
        self.run, self.arr, self.column, self.n = run, arr, column, len(arr)
        self.json_fields = json_field_names(t.value_type)
        measured = self._measured()
        n = self.n
        if measured is None:
            self.slow = np.ones(n, dtype=bool)
            self.offs, self.values = offsets_of(arr)
        else:
            self.slow = measured.slow
            self.offs, self.values = measured.offsets, measured.values
        self.figs = {name: np.zeros(n, dtype=np.int64) for name in (
            "chars_before", "chars_after", "messages_before", "messages_after",
            "groups_removed")}
        self.triggered = np.zeros(n, dtype=bool)
        self.missed = np.zeros(n, dtype=np.uint8)  # a missed reason's code (0: none)
        self.reached_values: Any = np.zeros(n, dtype=bool)
        self.reached_null = np.zeros(n, dtype=bool)
        self.tokens = [np.zeros(n, dtype=np.int64), np.zeros(n, dtype=np.int64)]
        # Each row's kept messages as two ranges of the values (before and after a cut).
        self.starts = np.empty(2 * n, dtype=np.int64)
        self.lengths = np.zeros(2 * n, dtype=np.int64)
        self.changed = False
        self.w_rows: list[Any] = []
        self.w_cols: list[Any] = [[], [], [], []]
        object_rows = np.flatnonzero(self.slow)
        if measured is not None:
            self._columnar(measured, bool(object_rows.size))
        new, pieces = self._object_path(object_rows)
        self.path = np.where(self.slow, 1, 0).astype(np.int8)
        reached, reached_null = self.reached_values, self.reached_null
        if not reached_null.any():
            self.reached = pa.array(reached, type=pa.bool_())
        elif reached_null.all():
            self.reached = pa.nulls(n, type=pa.bool_())
        else:
            self.reached = pa.array(reached, mask=reached_null, type=pa.bool_())
        self.warnings = self._warnings(n, self.w_rows, self.w_cols)
        self.messages = self._output(new, pieces) if self.changed else arr
        # What the work held, let go: only the output and the figures stay until the table is
        # put together.
        del self.arr, self.values, self.offs, self.slow, self.starts, self.lengths
        del self.reached_values, self.reached_null, self.w_rows, self.w_cols

    def _measured(self) -> Measured | None:
        """The chunk measured from its buffers (when the policy runs in the kernel), every
        string of it checked to be UTF-8: what is not goes into no figure, no warning and no
        output."""
        arr, column = self.arr, self.column
        try:
            measured = Measured(arr, column) if self.run.steps is not None else None
        except _kernel.Utf8Error as exc:
            check_utf8(arr, column)  # names the first string that is not UTF-8
            raise ContextPlanError(f"holds bytes that are not UTF-8 ({exc})", path=column,
                                   code="invalid-utf8") from None
        # Those the counts read are known to be UTF-8.
        check_utf8(arr, column, measured.counted if measured is not None else None)
        return measured

    def _columnar(self, measured: Measured, some_slow: bool) -> None:
        """The rows measured here reduced in one kernel call: their ranges, figures and
        warnings."""
        run, n, offs = self.run, self.n, self.offs
        starts, lengths, figs = self.starts, self.lengths, self.figs
        assert run.steps is not None
        rows = _kernel.reduce_rows(
            offs, measured.roles, measured.flags, measured.chars, measured.call_offsets,
            measured.call_codes, measured.result_offsets, measured.result_codes,
            measured.ncodes, run.steps, run.trigger, run.watermark, self.slow.view(np.uint8),
        )
        head, cut, before, after = rows.head, rows.cut, rows.chars_before, rows.chars_after
        groups, fired, codes = rows.groups_removed, rows.triggered, rows.missed
        fast = ~self.slow
        a, b = offs[:-1], offs[1:]
        watermark = run.watermark
        kept = (b - a) - (cut - head)
        over = (after > watermark) if watermark >= 0 else None
        if not some_slow:
            # Every row measured here: the kernel's arrays are the figures.
            starts[0::2], lengths[0::2] = a, head - a
            starts[1::2], lengths[1::2] = cut, b - cut
            figs.update(chars_before=before, chars_after=after, messages_before=b - a,
                        messages_after=kept, groups_removed=groups)
            self.triggered = fired != 0
            self.missed = codes
            if run.reduces:
                self.reached_values = ~over if over is not None else np.ones(n, dtype=bool)
            else:
                self.reached_null[:] = True
            self.changed = bool(np.any(cut != head))
        else:
            starts[0::2], lengths[0::2] = a, np.where(fast, head - a, 0)
            starts[1::2] = np.where(fast, cut, b)
            lengths[1::2] = np.where(fast, b - cut, 0)
            figs["chars_before"][fast] = before[fast]
            figs["chars_after"][fast] = after[fast]
            figs["messages_before"][fast] = (b - a)[fast]
            figs["messages_after"][fast] = kept[fast]
            figs["groups_removed"][fast] = groups[fast]
            self.triggered[fast] = fired[fast].astype(bool)
            self.missed[fast] = codes[fast]
            if run.reduces:
                self.reached_values[fast] = True if over is None else ~over[fast]
            else:
                self.reached_null[fast] = True
            self.changed = bool(np.any(cut[fast] != head[fast]))
        self._columnar_warnings(measured, fast, rows)

    def _columnar_warnings(self, measured: Measured, fast: Any, rows: RowsRecord) -> None:
        pa = require_pyarrow()
        w_rows, w_cols = self.w_rows, self.w_cols
        unknown = _unknown_roles(measured, fast, self.offs, rows.head, rows.cut, rows.tail)
        if unknown is not None:  # before the pairing warnings, as a report has them
            u_row, u_frag, u_index = unknown
            w_rows.append(u_row)
            w_cols[0].append(pa.repeat(pa.scalar("unknown-role", type=pa.string()),
                                       len(u_row)))
            w_cols[1].append(pa.array(FRAGMENTS, type=pa.string()).take(pa.array(u_frag)))
            w_cols[2].append(pa.array(u_index, type=pa.int64()))
            w_cols[3].append(pa.nulls(len(u_row), type=pa.string()))
        warn = rows.warnings
        if len(warn.row):
            w_rows.append(warn.row)
            w_cols[0].append(pa.array(np.asarray(ROW_WARNING_CODES, dtype=object)[warn.code],
                                      type=pa.string()))
            frag_names = pa.array(FRAGMENTS, type=pa.string())
            w_cols[1].append(frag_names.take(pa.array(warn.fragment)))
            w_cols[2].append(pa.array(warn.message_index, type=pa.int64()))
            w_cols[3].append(measured.id_strings(warn.id).cast(pa.string()))

    def _object_path(self, object_rows: Any) -> tuple[list[dict[str, Any]], dict[int, list[int]]]:
        """The rows that need objects, row by row through ``process_context``: their figures
        and warnings, and where each kept message comes from (an index into the values, or one
        of ``new``, the messages the object path made)."""
        pa = require_pyarrow()
        run, offs, values = self.run, self.offs, self.values
        figs, triggered, missed, tokens = self.figs, self.triggered, self.missed, self.tokens
        reached, reached_null = self.reached_values, self.reached_null
        new: list[dict[str, Any]] = []
        pieces: dict[int, list[int]] = {}
        ow_rows: list[int] = []
        ow: list[list[Any]] = [[], [], [], []]
        rows_py = rows_messages(self.arr, object_rows, self.column, self.json_fields)
        for row, messages in zip(object_rows.tolist(), rows_py, strict=True):
            done = object_row(run, messages, self.column, row)
            f = done.figures
            for name in figs:
                figs[name][row] = getattr(f, name)
            triggered[row] = f.triggered
            if f.missed_reason is not None:
                missed[row] = MISSED_REASONS.index(f.missed_reason) + 1
            if f.target_reached is None:
                reached_null[row] = True
            else:
                reached[row] = f.target_reached
            if run.counted:
                tokens[0][row] = f.tokens_before or 0
                tokens[1][row] = f.tokens_after or 0
            a_row = int(offs[row])
            kept_at: list[int] = []
            for item in done.kept:
                if isinstance(item, int):
                    kept_at.append(a_row + item)
                else:
                    kept_at.append(len(values) + len(new))
                    new.append(item)
            if kept_at != list(range(a_row, int(offs[row + 1]))):
                self.changed = True
            pieces[row] = kept_at
            for w in done.warnings:
                ow_rows.append(row)
                for column, value in zip(ow, w, strict=True):  # a RowWarning's fields, in order
                    column.append(value)
        if ow_rows:
            self.w_rows.append(np.asarray(ow_rows, dtype=np.int64))
            self.w_cols[0].append(pa.array(ow[0], type=pa.string()))
            self.w_cols[1].append(pa.array(ow[1], type=pa.string()))
            self.w_cols[2].append(pa.array(ow[2], type=pa.int64()))
            self.w_cols[3].append(pa.array(ow[3], type=pa.string()))
        return new, pieces

    def _output(self, new: list[dict[str, Any]], pieces: dict[int, list[int]]) -> Any:
        """The kept messages of every row gathered by ranges from the column's values (and the
        new messages after them), rows delimited by offset arithmetic."""
        pa = require_pyarrow()
        arr, values, t = self.arr, self.values, self.arr.type
        starts, lengths = self.starts, self.lengths
        per_row = lengths[0::2] + lengths[1::2]
        if not pieces:
            taken = gather(values, *joined_runs(starts, lengths))
        else:
            indices = expand_ranges(starts, lengths)
            # Object rows have no columnar ranges: their indices go where their row begins.
            rows = np.asarray(sorted(pieces), dtype=np.int64)
            fast_at = np.concatenate([[0], np.cumsum(per_row)])
            segments = np.split(indices, fast_at[rows])
            parts: list[Any] = [segments[0]]
            for k, row in enumerate(rows.tolist()):
                parts += [np.asarray(pieces[row], dtype=np.int64), segments[k + 1]]
                per_row[row] = len(pieces[row])
            indices = np.concatenate(parts)
            source = values
            if new:
                source = pa.concat_arrays([values, new_values(t.value_type, new,
                                                               self.json_fields, self.column)])
            taken = gather(source, *index_runs(indices))
        list_offsets = np.concatenate([[0], np.cumsum(per_row)])
        cls = pa.LargeListArray if pa.types.is_large_list(t) else pa.ListArray
        odtype = np.int64 if pa.types.is_large_list(t) else np.int32
        mask = arr.is_null() if arr.null_count else None
        return cls.from_arrays(pa.array(list_offsets.astype(odtype)), taken, type=t, mask=mask)

    @staticmethod
    def _warnings(n: int, rows: list[Any], cols: list[list[Any]]) -> Any:
        pa = require_pyarrow()
        wtype = warning_type()
        if not rows:
            return pa.ListArray.from_arrays(pa.array(np.zeros(n + 1, dtype=np.int32)),
                                            pa.array([], type=wtype.value_type), type=wtype)
        row = np.concatenate(rows)
        order = np.argsort(row, kind="stable")
        struct = pa.StructArray.from_arrays(
            [pa.concat_arrays(c).take(pa.array(order)) for c in cols],
            fields=list(wtype.value_type),
        )
        counts = np.bincount(row, minlength=n)
        offsets = np.concatenate([[0], np.cumsum(counts)]).astype(np.int32)
        return pa.ListArray.from_arrays(pa.array(offsets), struct, type=wtype)


