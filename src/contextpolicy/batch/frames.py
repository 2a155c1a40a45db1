"""Polars DataFrames and DuckDB relations in and out of ``reduce_table``: only the messages column
goes through Arrow.

An engine's object is known by the module of its class, so neither Polars nor DuckDB is imported
unless such an object is given (and then it is loaded already). Each input becomes a
:class:`Columns`: the names of its columns and, once asked for by ``reduce_table``, one column
(the messages) as an Arrow chunked array; and it comes with the function that turns the result
(the reduced column, the figures) back into the input's kind.

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

from .arrow import require_pyarrow

__all__ = ["ACCEPTED", "Columns", "Frame", "as_arrow", "engine_of"]

ACCEPTED = "a pyarrow Table or RecordBatch, a Polars DataFrame or a DuckDB relation"

# (top-level module, class name) -> engine; "_duckdb" is DuckDB's compiled module.
_ENGINES = {
    ("polars", "DataFrame"): "polars",
    ("polars", "LazyFrame"): "polars-lazy",
    ("duckdb", "DuckDBPyRelation"): "duckdb",
}


class Frame(NamedTuple):
    """The input as an Arrow table (or :class:`Columns`), and how the result becomes the
    input's kind."""

    table: Any
    back: Callable[[Any], Any] | None  # None: the input is Arrow already


class _Names:
    """The schema :class:`Columns` shows ``reduce_table``: every column's name, and the Arrow
    field of the one column exported."""

    def __init__(self, columns: Columns) -> None:
        self._columns = columns
        self.names = list(columns.names)

    def field(self, where: int) -> Any:
        data = self._columns.column(where)
        return require_pyarrow().field(self.names[where], data.type)


class Columns:
    """An engine's table as ``reduce_table`` reads it: the names of all its columns, and one of
    them exported to Arrow when asked for (``column``), the others left where they are.
    ``set_column`` gives the same table with that column replaced by an Arrow chunked array
    (the reduced messages), which ``back`` puts in the engine's table."""

    def __init__(self, names: list[str], export: Callable[[int], Any]) -> None:
        self.names = names
        self._export = export
        self.where: int | None = None
        self.data: Any = None
        self.replaced: Any = None  # the chunked array set in place of column ``where``

    @property
    def schema(self) -> _Names:
        return _Names(self)

    @property
    def column_names(self) -> list[str]:
        return list(self.names)

    def column(self, where: int) -> Any:
        """Column ``where`` as an Arrow chunked array, exported once."""
        if self.where is None:
            self.where, self.data = where, self._export(where)
        elif where != self.where:
            raise ValueError("only one column of an engine's table goes through Arrow")
        return self.data

    def set_column(self, where: int, _field: Any, data: Any) -> Columns:
        self.column(where)
        out = Columns(self.names, self._export)
        out.where, out.data, out.replaced = where, self.data, data
        return out


def engine_of(obj: object) -> str | None:
    """``"polars"``, ``"polars-lazy"``, ``"duckdb"`` or None, from the modules of the object's
    classes (a subclass counts), importing nothing."""
    for cls in type(obj).__mro__:
        top = cls.__module__.partition(".")[0].lstrip("_")
        engine = _ENGINES.get((top, cls.__name__))
        if engine is not None:
            return engine
    return None


def as_arrow(obj: object) -> Frame:
    """``obj`` as an Arrow table or record batch, or an engine's table as :class:`Columns`; a
    TypeError for anything else (a Polars LazyFrame: collect it first)."""
    pa = require_pyarrow()
    if isinstance(obj, (pa.Table, pa.RecordBatch)):
        return Frame(obj, None)
    engine = engine_of(obj)
    if engine == "polars":
        return _from_polars(obj)
    if engine == "duckdb":
        return _from_duckdb(obj)
    if engine == "polars-lazy":
        raise TypeError("expected a Polars DataFrame, got a LazyFrame: reduce_table needs every "
                        "row in memory, so collect it first (reduce_table(frame.collect(), ...))")
    raise TypeError(f"expected {ACCEPTED}, got {type(obj).__name__}")


def _from_polars(frame: Any) -> Frame:
    import polars as pl

    # CompatLevel (Polars 1.1 on): Polars' own string_view, not a copy into large_string.
    level = getattr(pl, "CompatLevel", None)

    def export(where: int) -> Any:
        # By position, not by name: pl.col would read a name like "^m.*$" as a pattern.
        one = frame.select(frame.to_series(where))
        return (one.to_arrow(compat_level=level.newest()) if level else one.to_arrow()).column(0)

    def back(out: Any) -> Any:
        if not isinstance(out, Columns):  # the figures
            return pl.from_arrow(out, rechunk=False)
        if out.replaced is None:  # nothing reduced: the input's own columns
            return frame.clone()
        assert out.where is not None
        table = require_pyarrow().table([out.replaced], names=[out.names[out.where]])
        return frame.with_columns(pl.from_arrow(table, rechunk=False).to_series(0))

    return Frame(Columns(list(frame.columns), export), back)


def _quote(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def _from_duckdb(relation: Any) -> Frame:
    held: list[Any] = []  # the relation's rows, once the messages column is asked for

    def export(where: int) -> Any:
        # The query runs once: its rows are held, the messages column read from them.
        held.append(relation.materialize())
        return held[0].select(_quote(relation.columns[where])).to_arrow_table().column(0)

    def back(out: Any) -> Any:
        if not isinstance(out, Columns):  # the figures
            return on_connection_of(held[0] if held else relation, out)
        assert out.where is not None
        data = out.data if out.replaced is None else out.replaced
        name = out.names[out.where]
        reduced = require_pyarrow().table([data], names=[name])
        picked = ", ".join(
            f"r.{_quote(n)}" if i == out.where else f"h.{_quote(n)}"
            for i, n in enumerate(out.names))
        return on_connection_of(
            held[0], reduced,
            lambda rows, arrow: f"SELECT {picked} FROM {rows} AS h POSITIONAL JOIN {arrow} AS r")

    return Frame(Columns(list(relation.columns), export), back)


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
