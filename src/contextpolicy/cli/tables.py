"""``contextpolicy reduce`` over Parquet: Parquet in and out by record batch through
``batch.reduce_table``, Parquet to JSONL, and JSONL (reduced by the line runner) to Parquet.

The Parquet input is streamed a batch at a time (memory stays near a few row groups); every
output is written through ``AtomicOutput``, so a run that fails or is stopped leaves no file.
"""

from __future__ import annotations

import bisect
import os
import tempfile
import time
from array import array
from dataclasses import dataclass
from typing import Any, BinaryIO

import orjson

from ..jsonl.runner import Summary
from .common import CliError
from .documents import is_parquet
from .row_groups import record_batches
from .summary import ReportFile, finish_run

__all__ = ["ParquetFromLines", "is_parquet", "reduce_parquet"]

BATCH_ROWS = 16_384  # rows reduced at a time (a row group is read as needed)
SPOOL_LINES = 4_096  # lines converted to Arrow at a time


def _numpy() -> Any:
    # numpy, for Parquet only (pyarrow imports it anyway): a JSONL run never loads it
    import numpy

    return numpy


def _pyarrow() -> tuple[Any, Any]:
    try:
        import pyarrow as pa
        import pyarrow.parquet as pq
    except ImportError:
        raise CliError("Parquet needs pyarrow: pip install 'contextpolicy[arrow]'") from None
    return pa, pq


def _plain_rows(batch: Any, column: str) -> list[dict[str, Any]]:
    """A batch's rows as JSON-ready objects: JSON-typed message fields parsed again."""
    from ..batch.rows import json_field_names, parse_json_fields

    pa, _ = _pyarrow()
    rows: list[dict[str, Any]] = batch.to_pylist()
    t = batch.schema.field(column).type if column in batch.schema.names else None
    if t is None or not (pa.types.is_list(t) or pa.types.is_large_list(t)) or not (
        pa.types.is_struct(t.value_type)
    ):
        return rows
    fields = json_field_names(t.value_type)
    if fields:
        for r, row in enumerate(rows):
            parse_json_fields(row.get(column), r, column, fields)
    return rows


class _Rows:
    """A progress bar over rows (on a terminal only)."""

    def __init__(self, console: Any, total: int, show: bool) -> None:
        self.progress = None
        if not show:
            return
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TimeRemainingColumn

        self.progress = Progress("[progress.description]{task.description}", BarColumn(),
                                 MofNCompleteColumn(), TimeRemainingColumn(),
                                 console=getattr(console, "rich", console), transient=True)
        self.task = self.progress.add_task("reducing rows", total=total)
        self.progress.start()

    def advance(self, rows: int) -> None:
        if self.progress is not None:
            self.progress.advance(self.task, rows)

    def stop(self) -> None:
        if self.progress is not None:
            self.progress.stop()


@dataclass
class TableSummary(Summary):
    """The line runner's totals, added up from the figures of each batch, and the rows each
    path took."""

    columnar_rows: int = 0
    object_rows: int = 0

    def add_figures(self, figures: Any) -> None:
        import pyarrow.compute as pc

        def total(name: str) -> int:
            return int(pc.sum(figures.column(name)).as_py() or 0)

        self.conversations += figures.num_rows
        self.triggered += total("triggered")
        self.target_reached += total("target_reached")
        self.chars_before += total("chars_before")
        self.chars_after += total("chars_after")
        went_down = pc.or_(
            pc.less(figures.column("chars_after"), figures.column("chars_before")),
            pc.less(figures.column("messages_after"), figures.column("messages_before")))
        self.reduced += int(pc.sum(went_down).as_py() or 0)
        missed = figures.column("missed_reason")
        if missed.null_count < len(missed):
            for item in pc.value_counts(missed.drop_null()).to_pylist():
                self.missed[item["values"]] += item["counts"]
        before, after = total("messages_before"), total("messages_after")
        self.messages_before += before
        self.messages_after += after
        self.messages_removed += before - after
        self.groups_removed += total("groups_removed")
        objects = int(pc.sum(pc.equal(figures.column("path"), "object")).as_py() or 0)
        self.object_rows += objects
        self.columnar_rows += figures.num_rows - objects
        warnings = pc.list_flatten(figures.column("warnings"))
        if len(warnings):
            for item in pc.value_counts(pc.struct_field(warnings, "code")).to_pylist():
                self.warnings[item["values"]] += item["counts"]

    def to_json_dict(self) -> dict[str, Any]:
        # The rows each path took, in place of the line runner's lines.
        doc = super().to_json_dict()
        del doc["paths"]
        return {**doc, "columnarRows": self.columnar_rows, "objectRows": self.object_rows}


class _Report(ReportFile):
    """``--report``: the figures of every row, as JSON (``{"conversations": [...],
    "summary": {...}}``) or, for a ``.parquet`` name, as a Parquet table with a ``row``
    column."""

    def __init__(self, out: Any, path: str | None) -> None:
        super().__init__(out)
        self.parquet = is_parquet(path)
        self.writer: Any = None

    def __enter__(self) -> _Report:
        if self.out is not None and self.parquet:
            self.out.__enter__()
            return self
        super().__enter__()
        return self

    def rows(self, start: int, figures: Any, ids: list[Any] | None) -> None:
        if self.out is None:
            return
        pa, pq = _pyarrow()
        if self.parquet:
            table = pa.Table.from_batches([figures]) if isinstance(
                figures, pa.RecordBatch) else figures
            table = table.add_column(0, "row", pa.array(
                _numpy().arange(start, start + table.num_rows, dtype=_numpy().int64)))
            if self.writer is None:
                self.writer = pq.ParquetWriter(self.out.stream, table.schema)
            self.writer.write_table(table)
            return
        from ..jsonl.files import dumps

        for k, row in enumerate(figures.to_pylist()):
            self.add(dumps({"row": start + k, **({"id": ids[k]} if ids is not None else {}),
                            **row}))

    def finish(self, summary: dict[str, Any]) -> None:
        if self.out is None or not self.parquet:
            super().finish(summary)
            return
        if self.writer is None:
            from ..batch import figures_schema

            pa, pq = _pyarrow()
            schema = pa.schema([pa.field("row", pa.int64()), *figures_schema(False)])
            self.writer = pq.ParquetWriter(self.out.stream, schema)
        self.writer.close()
        self.out.flush()

    def __exit__(self, *exc: object) -> None:
        _abandon(self.writer)
        super().__exit__(*exc)


def _abandon(writer: Any) -> None:
    """A Parquet writer left by a run that failed, closed while its file is still open (the
    file is then removed): left to the garbage collector, it would write its footer to a
    closed file, and say so on stderr."""
    if writer is not None and getattr(writer, "is_open", False):
        try:
            writer.close()
        except Exception:  # the run has failed already: its error is the one to say
            pass


def _reduce_rows(batch: Any, policy: Any, column: str) -> Any:
    """``reduce_table`` of a batch, whose other columns' strings are checked too: the command
    line writes every column of a row, and writes no string that is not UTF-8."""
    from ..batch import reduce_table
    from ..batch.checks import check_utf8

    for name in batch.schema.names:
        if name != column:
            check_utf8(batch.column(name), name)
    return reduce_table(batch, policy, column=column)


def _reduce_batch(batch: Any, policy: Any, column: str, on_error: str, start: int,
                  summary: TableSummary, console: Any, name: str) -> Any:
    """A batch reduced; with ``--on-error skip`` a batch with a bad row is reduced row by row
    and the bad rows are left out (each said on stderr)."""
    from ..errors import ContextPlanError

    try:
        return _reduce_rows(batch, policy, column)
    except ContextPlanError as exc:
        if on_error == "fail":
            raise CliError(f"{name}: row {_first_row(exc, batch, start)}: {exc}") from None
    pa, _ = _pyarrow()
    tables, figures = [], []
    for k in range(batch.num_rows):
        try:
            done = _reduce_rows(batch.slice(k, 1), policy, column)
        except ContextPlanError as exc:
            console.print(f"contextpolicy: skipped {name}: row {start + k}: {exc}", markup=False)
            summary.skipped += 1
            summary.skipped_lines.append({"row": start + k, "error": str(exc)})
            continue
        tables.append(done.table)
        figures.append(done.figures)
    from ..batch import Reduced, figures_schema

    if not tables:
        return Reduced(batch.slice(0, 0), pa.RecordBatch.from_pylist(
            [], schema=figures_schema(False)))
    return Reduced(pa.Table.from_batches(tables).combine_chunks().to_batches()[0] if len(
        tables) else batch.slice(0, 0), pa.Table.from_batches(figures).combine_chunks()
        .to_batches()[0])


def _first_row(exc: Any, batch: Any, start: int) -> str:
    """The row of the batch an error names (its path begins with a column's name and the
    row: ``messages[3]...``, ``id[3]``), counted from the first row of the file."""
    import re

    path = exc.issues[0].path if exc.issues else ""
    for name in sorted(batch.schema.names, key=len, reverse=True):
        found = re.match(rf"{re.escape(name)}\[(\d+)\]", path)
        if found:
            return str(start + int(found.group(1)))
    return "?"


def reduce_parquet(args: Any, console: Any, policy: Any, input_path: str, out: Any,
                   report_out: Any, handlers: dict[str, Any] | None = None, readers: int = 1,
                   ) -> tuple[dict[str, Any], str]:
    """Reduce a Parquet file into ``out`` (Parquet, or JSONL for any other name), with the
    compress ``handlers`` given (each row that needs one goes through the object path), its
    row groups decoded by ``readers`` threads ahead (``--jobs``); returns the summary and the
    input's name."""
    pa, pq = _pyarrow()
    from ..prepared import prepare_policy

    try:
        # Read as the batches need it: pre-buffering would hold the file's ranges ahead.
        source = pq.ParquetFile(input_path, pre_buffer=False, buffer_size=1 << 20)
    except (OSError, pa.ArrowInvalid) as exc:
        raise CliError(f"{input_path}: cannot read as Parquet ({exc})") from None
    column = "messages"
    if column not in source.schema_arrow.names:
        raise CliError(f"{input_path}: no column {column!r} (columns: "
                       f"{', '.join(source.schema_arrow.names) or 'none'})")
    try:
        prepared = prepare_policy(policy, handlers=handlers)
    except Exception as exc:  # a policy error is said as the JSONL path says it
        raise CliError(str(exc)) from None
    to_parquet = out.kind != "discard" and is_parquet(out.given)
    summary = TableSummary()
    started = time.perf_counter()
    bytes_in = os.path.getsize(input_path)
    rows = _Rows(console, source.metadata.num_rows, console.is_terminal and not args.quiet)
    ids_column = "id" in source.schema_arrow.names
    with out, _Report(report_out, args.report) as report:
        writer = pq.ParquetWriter(out.stream, source.schema_arrow) if to_parquet else None
        start = 0
        # Never more than a row group at a time: memory stays near a few row groups.
        groups = source.metadata.num_row_groups
        size = min([BATCH_ROWS] + [source.metadata.row_group(i).num_rows or BATCH_ROWS
                                   for i in range(min(groups, 1))])
        try:
            for batch in record_batches(input_path, source, max(size, 1), readers):
                done = _reduce_batch(batch, prepared, column, args.on_error, start, summary,
                                     console, input_path)
                summary.add_figures(done.figures)
                if writer is not None:
                    writer.write_batch(done.table)
                else:
                    for line in _json_lines(done.table, column, input_path, start):
                        out.write(line)
                ids = None
                if ids_column and not report.parquet and report.out is not None:
                    _check_json_numbers(done.table, ["id"], input_path, start)
                    ids = done.table.column("id").to_pylist()
                report.rows(start, done.figures, ids)
                start += batch.num_rows
                rows.advance(batch.num_rows)
            if writer is not None:
                writer.close()
        finally:
            rows.stop()
            _abandon(writer)
        data = finish_run(args, summary, bytes_in, started, out, report)
    return data, input_path


def _check_json_numbers(table: Any, names: list[str], name: str, start: int) -> None:
    """No NaN or infinity in the columns ``names``: JSON has neither (a JSON writer would make
    each a null)."""
    from ..batch.checks import check_json_numbers
    from ..errors import ContextPlanError

    for column in names:
        try:
            check_json_numbers(table.column(column), column)
        except ContextPlanError as exc:
            raise CliError(f"{name}: row {_first_row(exc, table, start)}: {exc.issues[0]}"
                           ) from None


def _json_lines(table: Any, column: str, name: str, start: int) -> Any:
    """The rows of a reduced batch as JSON lines, every value as it is: decimals as their exact
    numbers, and a value JSON cannot hold (NaN, an infinity, bytes, a duration ...) an error
    naming its row and column, not a changed value."""
    from ..errors import ContextPlanError
    from ..jsonl.files import dumps

    _check_json_numbers(table, table.schema.names, name, start)
    try:
        rows = _plain_rows(table, column)
    except ContextPlanError as exc:
        raise CliError(f"{name}: rows from {start}: {exc}") from None
    for k, row in enumerate(rows):
        try:
            yield dumps(row) + b"\n"
        except TypeError as exc:
            key = next((key for key, value in row.items() if not _writable(value)), "?")
            raise CliError(f"{name}: row {start + k}: column {key!r} holds a value JSON cannot "
                           f"hold ({exc}): write Parquet, or cast the column to one JSON holds "
                           f"first") from None


def _writable(value: Any) -> bool:
    from ..jsonl.files import dumps

    try:
        dumps(value)
    except TypeError:
        return False
    return True


class _Unfit(Exception):
    """Lines Arrow would not convert: the rows (``None``: no one chunk is at fault, the
    schemas of all are), the index of the first among the lines spooled, and the schema they
    were converted to (``None``: inferred from them)."""

    def __init__(self, rows: list[Any] | None, first: int, schema: Any, error: Exception):
        super().__init__(str(error))
        self.rows, self.first, self.schema, self.error = rows, first, schema, error


class ParquetFromLines:
    """An output for the line runner that ends up as Parquet: the reduced lines are spooled to
    a temporary file and, on ``commit()``, converted (the schema inferred over every line, so
    a field that appears late is still a column; message content that is text in some
    messages and a list of parts in others is kept as Arrow's JSON type) and put in place
    through ``target``.

    Every value is written as it is or not at all (``batch.exact``): an integer beyond 64
    bits, or beyond 2**53 in a field that holds fractions too (a double column), ends the run
    with an error naming the input line (``write_result``), the key path and the value."""

    def __init__(self, target: Any) -> None:
        _pyarrow()
        self.target = target
        self.kind, self.name, self.given = target.kind, target.name, target.given
        self.streaming = False
        self.spool: BinaryIO | None = None
        # The input's name; its path when it can be read again (a line inside a run of lines
        # is found there); per result written, the index of its first line in the spool and
        # its input line.
        self.source, self.reread = "-", None
        self._starts, self._first_lines = array("q"), array("q")
        self._spooled = 0

    def identity(self) -> Any:
        return self.target.identity()

    def __enter__(self) -> ParquetFromLines:
        self.target.__enter__()
        folder = os.path.dirname(self.target.target or "") or None
        self.spool = tempfile.TemporaryFile(dir=folder)
        return self

    def write(self, data: bytes | bytearray | memoryview) -> None:
        assert self.spool is not None
        try:
            self.spool.write(data)
        except OSError as exc:
            raise CliError(f"{self.name}: cannot write ({exc.strerror or exc})") from None

    def write_result(self, line: int, count: int, data: bytes | bytearray | memoryview) -> None:
        """The output of ``count`` input lines from ``line`` on (one line, or a run of lines
        that took the byte path)."""
        self._starts.append(self._spooled)
        self._first_lines.append(line)
        self._spooled += count
        self.write(data)

    def flush(self) -> None:
        assert self.spool is not None
        self.spool.flush()

    def _lines(self) -> Any:
        """``(index of the first, rows)`` for each chunk of the lines spooled, read exactly
        (orjson alone makes a float of an integer beyond 64 bits)."""
        assert self.spool is not None
        self.spool.seek(0)
        chunk: list[bytes] = []
        first = 0
        for line in self.spool:
            chunk.append(line)
            if len(chunk) == SPOOL_LINES:
                yield first, self._rows(first, chunk)
                first += len(chunk)
                chunk = []
        if chunk:
            yield first, self._rows(first, chunk)

    def _rows(self, first: int, lines: list[bytes]) -> list[Any]:
        from ..jsonl.digits import long_digit_runs
        from ..jsonl.files import reread_exactly

        rows = [orjson.loads(line) for line in lines]
        # Only a line with a run of 19 digits can hold an integer orjson makes a float: the
        # lines of the chunk are looked at together, and those read again.
        runs = long_digit_runs(b"".join(lines))
        if runs:
            np = _numpy()
            ends = np.cumsum([len(line) for line in lines])
            for k in sorted(set(np.searchsorted(ends, runs, side="right").tolist())):
                try:
                    rows[k] = reread_exactly(lines[k])
                except ValueError as exc:
                    raise CliError(f"{self._where(first + k)}: {exc}") from None
        return rows

    def _where(self, at: int) -> str:
        """The input line of the line spooled at ``at``."""
        r = bisect.bisect_right(self._starts, at) - 1
        if r < 0:
            return f"{self.name}: reduced line {at + 1}"
        line, k = self._first_lines[r], at - self._starts[r]
        if k:  # inside a run of lines: the k-th line after its first, blank lines not counted
            line = self._nth_line(line, k)
        return f"{self.source}:{line}"

    def _nth_line(self, line: int, k: int) -> int:
        from ..jsonl.files import FileError, InputFile

        if self.reread is not None:
            try:
                with InputFile(self.reread) as source:
                    for number, _ in source.lines():
                        if number >= line:
                            if not k:
                                return number
                            k -= 1
            except FileError:
                pass
        return line + k  # as it would be without blank lines (the input is gone)

    def commit(self) -> None:
        pa, pq = _pyarrow()
        as_json = False
        try:
            schema = self._schema(False)
        except _Unfit:
            as_json = True
            try:
                schema = self._schema(True)
            except _Unfit as unfit:
                raise self._refusal(unfit) from None
        if schema is None:  # no lines: a valid Parquet file with no rows and no columns
            pq.write_table(pa.table({}), self.target.stream)
        else:
            writer = pq.ParquetWriter(self.target.stream, schema)
            try:
                for first, chunk in self._lines():
                    rows = _json_content(chunk) if as_json else chunk
                    try:
                        table = pa.Table.from_pylist(rows, schema=_storage(schema))
                    except (pa.ArrowInvalid, pa.ArrowTypeError, OverflowError) as exc:
                        raise self._refusal(_Unfit(rows, first, schema, exc)) from None
                    writer.write_table(table.cast(schema) if as_json else table)
                writer.close()
            finally:
                _abandon(writer)
        self.target.commit()
        self.committed = True

    def _schema(self, as_json: bool) -> Any:
        pa, _ = _pyarrow()
        schemas = []
        for first, chunk in self._lines():
            rows = _json_content(chunk) if as_json else chunk
            try:
                schemas.append(pa.Table.from_pylist(rows).schema)
            except (pa.ArrowInvalid, pa.ArrowTypeError, OverflowError) as exc:
                raise _Unfit(rows, first, None, exc) from None
        if not schemas:
            return None
        try:
            schema = pa.unify_schemas(schemas, promote_options="permissive")
        except (pa.ArrowInvalid, pa.ArrowTypeError) as exc:
            raise _Unfit(None, 0, None, exc) from None
        return _with_json_content(schema) if as_json else schema

    def _refusal(self, unfit: _Unfit) -> CliError:
        """The error for lines that do not convert: the value no column holds as it is, named
        by its input line, or what Arrow said."""
        from ..batch.exact import find_unrepresentable

        fault = None
        if unfit.rows is not None:
            fault = find_unrepresentable(unfit.rows, unfit.schema)
        if fault is None:
            return CliError(f"{self.name}: the reduced lines do not fit one Arrow schema "
                            f"({unfit.error})")
        return CliError(f"{self._where(unfit.first + fault.row)}: {fault}")

    def __exit__(self, *exc: object) -> None:
        if self.spool is not None:
            self.spool.close()
            self.spool = None
        self.target.__exit__(*exc)


def _json_content(chunk: list[dict[str, Any]]) -> list[dict[str, Any]]:
    from ..jsonl.files import dumps

    out = []
    for row in chunk:
        messages = row.get("messages")
        if isinstance(messages, list):
            row = dict(row, messages=[
                dict(m, content=dumps(m["content"]).decode())
                if isinstance(m, dict) and m.get("content") is not None else m
                for m in messages])
        out.append(row)
    return out


def _with_json_content(schema: Any) -> Any:
    pa, _ = _pyarrow()
    at = schema.get_field_index("messages")
    if at < 0:
        return schema
    t = schema.field(at).type
    message = pa.struct([f.with_type(pa.json_()) if f.name == "content" else f
                         for f in t.value_type])
    return schema.set(at, schema.field(at).with_type(pa.list_(t.value_field.with_type(message))))


def _storage(schema: Any) -> Any:
    from ..batch.assemble import storage_type_of

    pa, _ = _pyarrow()
    return pa.schema([f.with_type(storage_type_of(f.type)) for f in schema])
