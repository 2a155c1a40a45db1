"""Polars DataFrames and DuckDB relations in and out of ``reduce_table``: only the messages column
goes through Arrow.

An engine's object is known by the module of its class, so neither Polars nor DuckDB is imported
unless such an object is given (and then it is loaded already). An engine's table gives
``reduce_table`` its messages column alone, as a one-column Arrow table, with the function that
turns the result (the reduced column, the figures) back into the input's kind.

The other columns never leave the engine, so they come back exactly as they were, dtype and
values: Arrow cannot hold every engine type as it is (Polars exports an ``Object`` column as
8-byte addresses and cannot export ``Int128``; DuckDB writes ``TIMETZ`` without its offset,
``BIT`` as bytes, ``ENUM``, ``JSON`` and ``UUID`` as strings, ``HUGEINT`` as a decimal).

A Polars DataFrame's messages column goes to Arrow and back without a copy: Polars exports its
own buffers (strings as ``string_view`` and lists as ``large_list``, which ``reduce_table`` reads
as they are) and imports Arrow's, chunks as they are; the reduced column is put back in its place
with ``with_columns``. A DuckDB relation is a query: it runs once, its rows held by DuckDB in
memory (``materialize``), and the messages column is written out as Arrow (a copy, as every read
of a relation is). The relation given back joins, by position (``POSITIONAL JOIN``, the held
rows and the reduced column both read in order), the held rows' other columns with the reduced
column, which it reads where it is, every time it is read.
"""

from __future__ import annotations

import secrets
from collections.abc import Callable
from typing import Any, NamedTuple

from ..errors import ContextPlanError
from .arrow import require_pyarrow

__all__ = ["ACCEPTED", "Frame", "as_arrow", "engine_of", "missing_column"]

ACCEPTED = "a pyarrow Table or RecordBatch, a Polars DataFrame or a DuckDB relation"

# (top-level module, class name) -> engine; "_duckdb" is DuckDB's compiled module.
_ENGINES = {
    ("polars", "DataFrame"): "polars",
    ("polars", "LazyFrame"): "polars-lazy",
    ("duckdb", "DuckDBPyRelation"): "duckdb",
}


class Frame(NamedTuple):
    """What ``reduce_table`` reduces (an Arrow table or record batch: for an engine's table,
    its messages column alone), and how the result becomes the input's kind."""

    table: Any
    back: Callable[[Any], Any] | None  # Reduced -> Reduced; None: the input is Arrow already


def engine_of(obj: object) -> str | None:
    """``"polars"``, ``"polars-lazy"``, ``"duckdb"`` or None, from the modules of the object's
    classes (a subclass counts), importing nothing."""
    for cls in type(obj).__mro__:
        top = cls.__module__.partition(".")[0].lstrip("_")
        engine = _ENGINES.get((top, cls.__name__))
        if engine is not None:
            return engine
    return None


def missing_column(column: str, names: list[str]) -> ContextPlanError:
    """The error of a table without ``column``."""
    return ContextPlanError(
        f"the table has no column {column!r} (columns: {', '.join(names) or 'none'})",
        path=column, code="missing-column")


def as_arrow(obj: object, column: str) -> Frame:
    """``obj`` as ``reduce_table`` reduces it: an Arrow table or record batch as it is, an
    engine's table as its ``column`` alone; a TypeError for anything else (a Polars LazyFrame:
    collect it first), a ContextPlanError for an engine's table without ``column``."""
    pa = require_pyarrow()
    if isinstance(obj, (pa.Table, pa.RecordBatch)):
        return Frame(obj, None)
    engine = engine_of(obj)
    if engine == "polars":
        return _from_polars(obj, column)
    if engine == "duckdb":
        return _from_duckdb(obj, column)
    if engine == "polars-lazy":
        raise TypeError("expected a Polars DataFrame, got a LazyFrame: reduce_table needs every "
                        "row in memory, so collect it first (reduce_table(frame.collect(), ...))")
    raise TypeError(f"expected {ACCEPTED}, got {type(obj).__name__}")


def _column_back(out: Any, read: Any, exported: Any) -> Any | None:
    """The reduced column as a chunked array of the exported type, or None when nothing in it
    changed (``reduce_table`` gives back the very table it read)."""
    if out.table is read:
        return None
    data = out.table.column(0)
    return data if data.type == exported.type else data.cast(exported.type)


def _from_polars(frame: Any, column: str) -> Frame:
    import polars as pl

    if column not in frame.columns:
        raise missing_column(column, list(frame.columns))
    # CompatLevel (Polars 1.1 on): Polars' own string_view, not a copy into large_string.
    # By position, not by name: pl.col would read a name like "^m.*$" as a pattern.
    one = frame.select(frame.to_series(frame.columns.index(column)))
    level = getattr(pl, "CompatLevel", None)
    read = one.to_arrow(compat_level=level.newest()) if level else one.to_arrow()
    exported = read.schema.field(0)

    def back(out: Any) -> Any:
        figures = pl.from_arrow(out.figures, rechunk=False)
        data = _column_back(out, read, exported)
        if data is None:  # nothing reduced: the input's own columns
            return type(out)(frame.clone(), figures)
        reduced = pl.from_arrow(require_pyarrow().table([data], schema=require_pyarrow().schema(
            [exported])), rechunk=False)
        assert isinstance(reduced, pl.DataFrame)  # a Table gives a DataFrame
        return type(out)(frame.with_columns(reduced.to_series(0)), figures)

    return Frame(read, back)


def _quote(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def _from_duckdb(relation: Any, column: str) -> Frame:
    names = list(relation.columns)
    if column not in names:
        raise missing_column(column, names)
    # The query runs once: its rows are held, the messages column read from them.
    held = relation.materialize()
    read = held.select(_quote(column)).to_arrow_table()
    exported = read.schema.field(0)

    def back(out: Any) -> Any:
        pa = require_pyarrow()
        figures = on_connection_of(held, out.figures)
        data = _column_back(out, read, exported)
        reduced = pa.table([read.column(0).cast(exported.type) if data is None else data],
                           schema=pa.schema([exported]))
        picked = ", ".join(f"r.{_quote(n)}" if n == column else f"h.{_quote(n)}" for n in names)
        return type(out)(on_connection_of(
            held, reduced,
            lambda rows, arrow: f"SELECT {picked} FROM {rows} AS h POSITIONAL JOIN {arrow} AS r"),
            figures)

    return Frame(read, back)


def on_connection_of(relation: Any, table: Any,
                     select: Callable[[str, str], str] | None = None) -> Any:
    """A relation over ``table`` on ``relation``'s connection, reading it in place.

    ``select(rows, arrow)`` is the query, given the name ``relation`` is read under and the name
    ``table`` is (``SELECT * FROM arrow`` without it). DuckDB's Python API does not give a
    relation's connection, but ``relation.query`` runs SQL on it, and DuckDB reads a Python
    variable the SQL names (its scan of Python objects), holding the object for as long as the
    new relation lives. The name is random, so that no table or view of the user's can shadow
    it, and it is never put in the catalog: nothing is left behind. The new relation is built
    over ``relation`` (the input's held rows), so it never runs the input's query again.
    """
    import duckdb

    name = f"contextpolicy_{secrets.token_hex(8)}"
    sql = select(f"{name}_input", name) if select else f"SELECT * FROM {name}"
    # eval: the frame DuckDB looks in for the name is the one that calls query.
    scope = {name: table, "relation": relation, "sql": sql}
    try:
        return eval(f"relation.query('{name}_input', sql)", scope)
    except duckdb.CatalogException as exc:  # the name not found: DuckDB does not look
        raise ValueError(
            "DuckDB cannot read Python objects on this relation's connection (is "
            "python_enable_replacements off?): reduce its Arrow table instead, "
            "reduce_table(relation.to_arrow_table(), ...), and read the result with "
            "connection.from_arrow(...)") from exc
