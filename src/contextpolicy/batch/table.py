"""``reduce_table``: a whole Arrow table of transcripts reduced at once.

Each row of the ``messages`` column is one transcript, and each row means exactly what
``process_context(ContextPlan.from_messages(row), policy)`` means. The columnar path measures
every message straight from the Arrow buffers (code points from the content buffers, roles from
the role buffers, tool call ids as dictionary codes), splits, groups and cuts all rows in one
kernel call, and builds the output by offset arithmetic and one ``take``. A row the columnar
path cannot measure (content it does not know, tool blocks whose input must be serialised, a
value the object path rejects) goes through the object path on its own; so do all rows when
the policy needs objects (compress handlers, a token counter, custom implementations).
"""


from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from itertools import pairwise
from typing import TYPE_CHECKING, Any, NamedTuple

import numpy as np

from .. import _kernel
from .._tables import (
    MISSED_REASONS,
)
from ..errors import ContextPlanError, Issue
from .arrow import as_int64, is_list_type, require_pyarrow
from .chunk import Chunk
from .frames import as_arrow, missing_column
from .run import FAST, OBJECT, TableRun, warning_type

if TYPE_CHECKING:
    import pyarrow as pa

__all__ = ["FIGURE_COLUMNS", "Reduced", "reduce_table"]

# The figures' columns, in order (tokens_before / tokens_after follow when a counter is given).
FIGURE_COLUMNS = (
    "chars_before", "chars_after", "messages_before", "messages_after", "groups_removed",
    "triggered", "target_reached", "missed_reason", "warnings", "path",
)


class Reduced(NamedTuple):
    """What :func:`reduce_table` returns: the reduced ``table`` (every column kept, rows in
    input order) and its ``figures``, one row per input row."""

    table: Any
    figures: Any





MIN_PIECE_MESSAGES = 32_768  # messages below which a piece is not worth a thread of its own


def _piece_bounds(chunk: Any, workers: int) -> list[int]:
    """Where to cut a chunk's rows into pieces of about as many messages each (a few long
    transcripts weigh as much as many short ones)."""
    n = len(chunk)
    if workers < 2 or n < 2 or not is_list_type(chunk.type):
        return [0, n]
    offs = as_int64(chunk.offsets)
    messages = int(offs[-1]) - int(offs[0])
    k = max(1, min(workers, messages // MIN_PIECE_MESSAGES, n))
    if k == 1:
        return [0, n]
    targets = int(offs[0]) + messages * np.arange(1, k, dtype=np.int64) // k
    cuts = np.searchsorted(offs, targets).tolist()
    return sorted({0, n, *(c for c in cuts if 0 < c < n)})


def _threads(threads: int | None) -> int:
    if threads is not None:
        if type(threads) is not int or threads < 1:
            raise ValueError(f"threads: expected an integer >= 1, got {threads!r}")
        return threads
    try:
        return max(1, len(os.sched_getaffinity(0)))  # type: ignore[attr-defined,unused-ignore]
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def reduce_table(
    table: Any,
    policy: Any,
    *,
    column: str = "messages",
    counter: Any = None,
    handlers: Mapping[str, Callable[..., Any]] | None = None,
    implementations: Mapping[str, Any] | None = None,
    threads: int | None = None,
) -> Reduced:
    """Reduce every transcript of ``table[column]`` by ``policy``.

    ``table``: a ``pyarrow.Table`` or ``RecordBatch``, a Polars ``DataFrame`` or a DuckDB
    relation (``DuckDBPyRelation``), whose ``column`` is a
    ``list<struct<role, content, ...>>`` (``list`` or ``large_list``, any child name; strings as
    ``string``, ``large_string`` or ``string_view``; content as a string, a list of parts or
    Arrow's JSON type; ``tool_calls``, ``tool_call_id``; nulls for missing keys). ``policy``: a
    document, a typed policy or a prepared one (validate or reduce; an audit needs an original
    plan, which a table does not have).

    Returns :class:`Reduced` ``(table, figures)``: the table with every column kept, rows in
    input order, ``column`` reduced; the figures one row per input row (``chars_before``,
    ``chars_after``, ``messages_before``, ``messages_after``, ``groups_removed``,
    ``triggered``, ``target_reached`` (null for a validate policy), ``missed_reason`` (the
    report's ``missedReason``: null unless the row triggered and missed its target),
    ``warnings`` (code, fragment_id, index, tool_call_id), ``path`` (``columnar`` or
    ``object``), and
    ``tokens_before``, ``tokens_after`` when a counter is given). A row means exactly what
    ``process_context(ContextPlan.from_messages(row), policy)`` means (a row without a history
    skips the steps on it, as ``process_context`` does).

    A Polars DataFrame or a DuckDB relation gives back its own kind: ``table`` and ``figures``
    are then both Polars DataFrames, or both relations on the input relation's connection (they
    join with its tables). Only ``column`` goes through Arrow: every other column stays in the
    engine and comes back exactly as it was, dtype and values (a Polars ``Object`` or
    ``Int128``, a DuckDB ``TIMETZ``, ``BIT``, ``ENUM``, ``HUGEINT``, ``JSON`` or ``UUID``,
    which Arrow cannot hold as they are). Polars hands the column to Arrow and takes the
    reduced one back without a copy, put in its place with ``with_columns``. A relation is a
    query, run once here, its rows held by DuckDB (``materialize``) and the column written out
    as Arrow; the output relation joins the held rows' other columns, by position, with the
    reduced column read in place. DuckDB's API does not give a relation's connection, so the
    output relations are made by the held rows' ``query``, reading the output under a random
    name: no name is registered in, or left in, the connection's catalog, and the input's
    query never runs again. The input is never changed. A Polars
    ``LazyFrame`` is a TypeError: ``.collect()`` it first (reducing needs every row in memory,
    and when to collect is the caller's choice).

    ``threads``: how many pieces of a table's rows are reduced side by side (default: the
    CPUs this process may use; a piece holds about as many messages as the others, at least
    32,768, and a RecordBatch is one piece). The output column is then chunked by piece.

    Raises :class:`ContextPlanError` naming the column, the row, the message and the field of
    the first row that is not a valid transcript, :class:`ContextPolicyError` for the policy.
    """
    require_pyarrow()
    run = TableRun(policy, counter, handlers, implementations)
    frame = as_arrow(table, column)
    out = _reduce_arrow(frame.table, run, column, threads)
    return out if frame.back is None else frame.back(out)


def _reduce_arrow(table: Any, run: TableRun, column: str, threads: int | None) -> Reduced:
    """:func:`reduce_table` of an Arrow table or record batch."""
    pa = require_pyarrow()
    is_batch = isinstance(table, pa.RecordBatch)
    names = table.schema.names
    if column not in names:
        raise missing_column(column, names)
    where = names.index(column)
    data = table.column(where)
    chunks = [data] if is_batch else list(data.chunks)
    workers = 1 if is_batch else _threads(threads)
    pieces = _pieces(chunks, workers)
    done = _reduced(run, pieces, column, workers) if chunks else []
    with _kernel.pooled_arrays():
        figures = _figures(done, run)
    if is_batch:
        arrays = list(table.columns)
        arrays[where] = done[0].messages if done else data
        out = pa.RecordBatch.from_arrays(arrays, schema=table.schema)
        combined = figures.combine_chunks()
        return Reduced(out, pa.RecordBatch.from_arrays(
            [col.chunk(0) if col.num_chunks else pa.array([], type=col.type)
             for col in combined.columns], schema=figures.schema))
    if all(c.messages is arr for c, (_, arr) in zip(done, pieces, strict=True)):
        return Reduced(table, figures)
    new = pa.chunked_array([c.messages for c in done], type=data.type)
    return Reduced(table.set_column(where, table.schema.field(where), new), figures)


def _pieces(chunks: list[Any], workers: int) -> list[tuple[int, Any]]:
    """The column's chunks cut into pieces of rows to reduce side by side (the kernel, the
    UTF-8 count and Arrow's take run without the GIL), each with the row it starts at. A
    RecordBatch stays one piece (its column is one array)."""
    pieces: list[tuple[int, Any]] = []
    offset = 0
    for chunk in chunks:
        bounds = _piece_bounds(chunk, workers)
        if len(bounds) == 2:
            pieces.append((offset, chunk))
        else:
            pieces += [(offset + a, chunk.slice(a, b - a)) for a, b in pairwise(bounds)]
        offset += len(chunk)
    return pieces


def _reduced(run: TableRun, pieces: list[tuple[int, Any]], column: str,
             workers: int) -> list[Chunk]:
    """Every piece reduced, in threads when there are several; an error names the row of the
    whole column."""
    def one(piece: tuple[int, Any]) -> Chunk:
        at, arr = piece
        try:
            # numpy's large arrays from the kernel's pool (a context variable: per thread).
            with _kernel.pooled_arrays():
                return Chunk(run, arr, column)
        except ContextPlanError as exc:
            raise (shift_rows(exc, column, at) if at else exc) from None

    if len(pieces) > 1:
        from concurrent.futures import ThreadPoolExecutor

        with ThreadPoolExecutor(min(workers, len(pieces))) as pool:
            return list(pool.map(one, pieces))
    return [one(p) for p in pieces]


def release_memory() -> None:
    """Give back the blocks the compiled kernel's pool holds for the next call.

    Inside ``reduce_table`` numpy's large arrays (the temporaries over every message, the
    output's copied buffers) take their memory from a pool that keeps freed blocks, up to 512
    MiB, so that the next call, or the next record batch of a stream, does not fault every
    page in again. Blocks that have waited two seconds since they were freed are given back
    when a call begins or ends; nothing runs between calls, so this gives back all of them now
    (after the last table of a long-running process, say)."""
    _kernel.release_pool()


def shift_rows(exc: ContextPlanError, column: str, offset: int) -> ContextPlanError:
    """``exc`` with the rows its paths name (``column[k]``) counted ``offset`` rows later."""
    import re

    pattern = re.compile(rf"^{re.escape(column)}\[(\d+)\]")
    return ContextPlanError([
        Issue(pattern.sub(lambda m: f"{column}[{int(m.group(1)) + offset}]", i.path), i.message,
              i.code) for i in exc.issues
    ])


def figures_schema(counted: bool) -> pa.Schema:
    """The schema of :func:`reduce_table`'s figures."""
    pa = require_pyarrow()
    fields = [pa.field(name, pa.int64(), nullable=False) for name in FIGURE_COLUMNS[:5]]
    fields += [pa.field("triggered", pa.bool_(), nullable=False),
               pa.field("target_reached", pa.bool_()),
               pa.field("missed_reason", pa.string()),
               pa.field("warnings", warning_type(), nullable=False),
               pa.field("path", pa.string(), nullable=False)]
    if counted:
        fields += [pa.field("tokens_before", pa.int64()), pa.field("tokens_after", pa.int64())]
    return pa.schema(fields)


def _figures(done: list[Chunk], run: TableRun) -> Any:
    pa = require_pyarrow()
    schema = figures_schema(run.counted)

    def cat(parts: list[Any], dtype: Any) -> Any:
        if len(parts) == 1:
            return parts[0].astype(dtype, copy=False)
        return np.concatenate(parts).astype(dtype, copy=False) if parts else np.zeros(
            0, dtype=dtype)

    columns: dict[str, Any] = {}
    for name in FIGURE_COLUMNS[:5]:
        columns[name] = pa.array(cat([c.figs[name] for c in done], np.int64))
    columns["triggered"] = pa.array(cat([c.triggered for c in done], bool))
    columns["target_reached"] = pa.concat_arrays([c.reached for c in done]) if done else \
        pa.array([], type=pa.bool_())
    missed = cat([c.missed for c in done], np.uint8)
    if missed.any():
        names = pa.array([None, *MISSED_REASONS], type=pa.string())
        columns["missed_reason"] = names.take(pa.array(missed))
    else:
        columns["missed_reason"] = pa.nulls(len(missed), type=pa.string())
    columns["warnings"] = pa.concat_arrays([c.warnings for c in done]) if done else \
        pa.array([], type=warning_type())
    path = cat([c.path for c in done], np.int8)
    if path.any():
        columns["path"] = pa.array([FAST, OBJECT], type=pa.string()).take(pa.array(path))
    else:  # every row on the columnar path
        columns["path"] = pa.repeat(pa.scalar(FAST, type=pa.string()), len(path))
    if run.counted:
        columns["tokens_before"] = pa.array(cat([c.tokens[0] for c in done], np.int64))
        columns["tokens_after"] = pa.array(cat([c.tokens[1] for c in done], np.int64))
    return pa.Table.from_pydict(columns, schema=schema)

