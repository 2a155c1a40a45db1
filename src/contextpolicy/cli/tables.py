"""``contextpolicy reduce`` over Parquet: Parquet in and out by record batch through
``batch.reduce_table``, Parquet to JSONL, and JSONL (reduced by the line runner) to Parquet.

The Parquet input is streamed a batch at a time (memory stays near a few row groups); every
output is written through ``AtomicOutput``, so a run that fails or is stopped leaves no file.
"""

from __future__ import annotations

import os
import tempfile
import time
from dataclasses import dataclass
from typing import Any, BinaryIO

import numpy as np
import orjson

from ..jsonl.runner import Summary
from .common import CliError
from .main import _finish, _ReportFile

__all__ = ["ParquetFromLines", "is_parquet", "reduce_parquet"]

PARQUET_SUFFIXES = (".parquet", ".pq", ".parq")
BATCH_ROWS = 16_384  # rows reduced at a time (a row group is read as needed)
SPOOL_LINES = 4_096  # lines converted to Arrow at a time


def is_parquet(path: str | None, *, reading: bool = False) -> bool:
    """Whether ``path`` names Parquet: by its suffix, or (a file being read) by its magic."""
    if path in (None, "-"):
        return False
    assert path is not None
    if path.lower().endswith(PARQUET_SUFFIXES):
        return True
    if reading and os.path.isfile(path):
        try:
            with open(path, "rb") as f:
                return f.read(4) == b"PAR1"
        except OSError:
            return False
    return False


def _pyarrow() -> tuple[Any, Any]:
    try:
        import pyarrow as pa
        import pyarrow.parquet as pq
    except ImportError:
        raise CliError("Parquet needs pyarrow: pip install 'contextpolicy[arrow]'") from None
    return pa, pq


def _plain_rows(batch: Any, column: str) -> list[dict[str, Any]]:
    """A batch's rows as JSON-ready objects: JSON-typed message fields parsed again."""
    from ..batch.table import _json_fields, _parse_json_fields

    pa, _ = _pyarrow()
    rows: list[dict[str, Any]] = batch.to_pylist()
    t = batch.schema.field(column).type if column in batch.schema.names else None
    if t is None or not (pa.types.is_list(t) or pa.types.is_large_list(t)) or not (
        pa.types.is_struct(t.value_type)
    ):
        return rows
    fields = _json_fields(t.value_type)
    if fields:
        for r, row in enumerate(rows):
            _parse_json_fields(row.get(column), r, column, fields)
    return rows


class _Rows:
    """A progress bar over rows (on a terminal only)."""

    def __init__(self, console: Any, total: int, show: bool) -> None:
        self.progress = None
        if not show:
            return
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TimeRemainingColumn

        self.progress = Progress("[progress.description]{task.description}", BarColumn(),
                                 MofNCompleteColumn(), TimeRemainingColumn(), console=console,
                                 transient=True)
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


class _Report(_ReportFile):
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
                np.arange(start, start + table.num_rows, dtype=np.int64)))
            if self.writer is None:
                self.writer = pq.ParquetWriter(self.out.stream, table.schema)
            self.writer.write_table(table)
            return
        for k, row in enumerate(figures.to_pylist()):
            self.add(orjson.dumps({"row": start + k, **({"id": ids[k]} if ids is not None
                                                         else {}), **row}))

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


def _reduce_batch(batch: Any, policy: Any, column: str, on_error: str, start: int,
                  summary: TableSummary, console: Any, name: str) -> Any:
    """A batch reduced; with ``--on-error skip`` a batch with a bad row is reduced row by row
    and the bad rows are left out (each said on stderr)."""
    from ..batch import reduce_table
    from ..errors import ContextPlanError

    try:
        return reduce_table(batch, policy, column=column)
    except ContextPlanError as exc:
        if on_error == "fail":
            raise CliError(f"{name}: row {_first_row(exc, column, start)}: {exc}") from None
    pa, _ = _pyarrow()
    tables, figures = [], []
    for k in range(batch.num_rows):
        try:
            done = reduce_table(batch.slice(k, 1), policy, column=column)
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


def _first_row(exc: Any, column: str, start: int) -> str:
    import re

    path = exc.issues[0].path if exc.issues else ""
    found = re.match(rf"{re.escape(column)}\[(\d+)\]", path)
    return str(start + int(found.group(1))) if found else "?"


def reduce_parquet(args: Any, console: Any, policy: Any, input_path: str, out: Any,
                   report_out: Any, handlers: dict[str, Any] | None = None,
                   ) -> tuple[dict[str, Any], str]:
    """Reduce a Parquet file into ``out`` (Parquet, or JSONL for any other name), with the
    compress ``handlers`` given (each row that needs one goes through the object path);
    returns the summary and the input's name."""
    pa, pq = _pyarrow()
    from ..errors import ContextPlanError
    from ..jsonl.files import dumps
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
            for batch in source.iter_batches(batch_size=max(size, 1), use_threads=False):
                done = _reduce_batch(batch, prepared, column, args.on_error, start, summary,
                                     console, input_path)
                summary.add_figures(done.figures)
                if writer is not None:
                    writer.write_batch(done.table)
                else:
                    try:
                        rows_out = _plain_rows(done.table, column)
                    except ContextPlanError as exc:
                        raise CliError(f"{input_path}: rows from {start}: {exc}") from None
                    for row in rows_out:
                        out.write(dumps(row) + b"\n")
                report.rows(start, done.figures, done.table.column("id").to_pylist()
                           if ids_column and not report.parquet else None)
                start += batch.num_rows
                rows.advance(batch.num_rows)
        finally:
            rows.stop()
        if writer is not None:
            writer.close()
        data = _finish(args, summary, bytes_in, started, out, report)
    return data, input_path


class ParquetFromLines:
    """An output for the line runner that ends up as Parquet: the reduced lines are spooled to
    a temporary file and, on ``commit()``, converted (the schema inferred over every line, so
    a field that appears late is still a column; message content that is text in some
    messages and a list of parts in others is kept as Arrow's JSON type) and put in place
    through ``target``."""

    def __init__(self, target: Any) -> None:
        _pyarrow()
        self.target = target
        self.kind, self.name, self.given = target.kind, target.name, target.given
        self.streaming = False
        self.spool: BinaryIO | None = None

    def identity(self) -> Any:
        return self.target.identity()

    def __enter__(self) -> ParquetFromLines:
        self.target.__enter__()
        folder = os.path.dirname(self.target.target or "") or None
        self.spool = tempfile.TemporaryFile(dir=folder)
        return self

    def write(self, data: bytes) -> None:
        assert self.spool is not None
        try:
            self.spool.write(data)
        except OSError as exc:
            raise CliError(f"{self.name}: cannot write ({exc.strerror or exc})") from None

    def flush(self) -> None:
        assert self.spool is not None
        self.spool.flush()

    def _lines(self) -> Any:
        assert self.spool is not None
        self.spool.seek(0)
        chunk: list[Any] = []
        for line in self.spool:
            chunk.append(orjson.loads(line))
            if len(chunk) == SPOOL_LINES:
                yield chunk
                chunk = []
        if chunk:
            yield chunk

    def commit(self) -> None:
        pa, pq = _pyarrow()
        as_json = False
        try:
            schema = self._schema(False)
        except (pa.ArrowInvalid, pa.ArrowTypeError):
            as_json = True
            try:
                schema = self._schema(True)
            except (pa.ArrowInvalid, pa.ArrowTypeError) as exc:
                raise CliError(f"{self.name}: the reduced lines do not fit one Arrow schema "
                               f"({exc})") from None
        if schema is None:  # no lines: a valid Parquet file with no rows and no columns
            pq.write_table(pa.table({}), self.target.stream)
        else:
            writer = pq.ParquetWriter(self.target.stream, schema)
            for chunk in self._lines():
                table = pa.Table.from_pylist(_json_content(chunk) if as_json else chunk,
                                             schema=_storage(schema))
                writer.write_table(table.cast(schema) if as_json else table)
            writer.close()
        self.target.commit()
        self.committed = True

    def _schema(self, as_json: bool) -> Any:
        pa, _ = _pyarrow()
        schemas = [pa.Table.from_pylist(_json_content(c) if as_json else c).schema
                   for c in self._lines()]
        if not schemas:
            return None
        schema = pa.unify_schemas(schemas, promote_options="permissive")
        return _with_json_content(schema) if as_json else schema

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
    from ..batch.table import _storage_type

    pa, _ = _pyarrow()
    return pa.schema([f.with_type(_storage_type(f.type)) for f in schema])
