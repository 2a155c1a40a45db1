"""Polars DataFrames and DuckDB relations in and out of ``reduce_table``, as Arrow tables.

An engine's object is known by the module of its class, so neither Polars nor DuckDB is imported
unless such an object is given (and then it is loaded already). Each input becomes an Arrow table
and comes with the function that turns an Arrow table (the reduced table, the figures) back into
the input's kind.

A Polars DataFrame goes to Arrow and back without a copy: Polars exports its own buffers
(strings as ``string_view`` and lists as ``large_list``, which ``reduce_table`` reads as they
are) and imports Arrow's, chunks as they are. A DuckDB relation is a query: it runs once, and
DuckDB writes its rows out as Arrow (a copy, as every read of a relation is); the relation given
back reads the output's Arrow buffers where they are, every time it is read.
"""

from __future__ import annotations

import secrets
from collections.abc import Callable
from typing import Any, NamedTuple

from .arrow import require_pyarrow

__all__ = ["ACCEPTED", "Frame", "as_arrow", "engine_of"]

ACCEPTED = "a pyarrow Table or RecordBatch, a Polars DataFrame or a DuckDB relation"

# (top-level module, class name) -> engine; "_duckdb" is DuckDB's compiled module.
_ENGINES = {
    ("polars", "DataFrame"): "polars",
    ("polars", "LazyFrame"): "polars-lazy",
    ("duckdb", "DuckDBPyRelation"): "duckdb",
}


class Frame(NamedTuple):
    """The input as an Arrow table, and how an Arrow table becomes the input's kind."""

    table: Any
    back: Callable[[Any], Any] | None  # None: the input is Arrow already


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
    """``obj`` as an Arrow table or record batch; a TypeError for anything else (a Polars
    LazyFrame: collect it first)."""
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
    table = frame.to_arrow(compat_level=level.newest()) if level else frame.to_arrow()
    return Frame(table, lambda out: pl.from_arrow(out, rechunk=False))


def _from_duckdb(relation: Any) -> Frame:
    return Frame(relation.to_arrow_table(), lambda out: on_connection_of(relation, out))


def on_connection_of(relation: Any, table: Any) -> Any:
    """A relation over ``table`` on ``relation``'s connection, reading it in place.

    DuckDB's Python API does not give a relation's connection, but ``relation.query`` runs SQL on
    it, and DuckDB reads a Python variable the SQL names (its scan of Python objects), holding the
    object for as long as the new relation lives. The name is random, so that no table or view of
    the user's can shadow it, and it is never put in the catalog: nothing is left behind. The new
    relation is built over ``relation``, so DuckDB binds the input's query again when the
    catalog changes (it never runs it again).
    """
    import duckdb

    name = f"contextpolicy_{secrets.token_hex(8)}"
    # eval: the frame DuckDB looks in for the name is the one that calls query.
    scope = {name: table, "relation": relation}
    try:
        return eval(f"relation.query('{name}_input', 'SELECT * FROM {name}')", scope)
    except duckdb.CatalogException as exc:  # the name not found: DuckDB does not look
        raise ValueError(
            "DuckDB cannot read Python objects on this relation's connection (is "
            "python_enable_replacements off?): reduce its Arrow table instead, "
            "reduce_table(relation.to_arrow_table(), ...), and read the result with "
            "connection.from_arrow(...)") from exc
