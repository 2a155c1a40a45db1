"""``reduce_table`` over a Spark DataFrame (extra ``[spark]``).

:func:`reduce_dataframe` maps :class:`~contextpolicy.batch.mapped.ReduceBatches` over a
DataFrame's partitions with ``mapInArrow``: Spark hands each Python worker the partition as
Arrow record batches, the kernel reduces each batch in one call, and the batch goes back with
its messages column reduced and, unless ``figures_column=None``, a struct column of the rows'
figures::

    from contextpolicy.batch.spark import reduce_dataframe

    df = spark.read.parquet("conversations/")
    reduce_dataframe(df, policy).write.parquet("reduced/")

JSONL goes through :func:`reduce_jsonl`: the lines of ``spark.read.text`` reduced as
``contextpolicy reduce`` reduces them (:class:`~contextpolicy.batch.mapped.ReduceLines`).

Everything that can be checked is checked on the driver, before any task runs: the policy
(with the handlers and the counter the factories build), the column and its type, the names of
the new columns. What a worker builds (the prepared policy, a counter, handlers) is built once
per Python worker process and kept for the tasks it runs next (Spark reuses its Python workers:
``spark.python.worker.reuse``, on by default).
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator, Mapping
from typing import Any

from ..errors import ContextPlanError, ContextPolicyError, Issue
from .frames import missing_column
from .mapped import ReduceBatches, ReduceLines, built_once, driver_policy, line_figures_type
from .table import figures_schema, shift_rows

__all__ = ["reduce_dataframe", "reduce_jsonl"]


def reduce_dataframe(df: Any, policy: Any, *, column: str = "messages",
                     figures_column: str | None = "figures",
                     make_counter: Callable[[], Any] | None = None,
                     make_handlers: Callable[[], Mapping[str, Callable[..., Any]]] | None = None,
                     ) -> Any:
    """``df`` with every row's ``column`` reduced by ``policy`` (lazily, as Spark runs).

    ``column`` must be an ``array<struct<role: string, content, ...>>`` (the shape of
    ``spark.read.parquet`` over a table ``reduce_table`` reads). The output's schema is the
    input's, plus ``figures_column`` (a struct of :func:`~contextpolicy.batch.reduce_table`'s
    figures; ``None`` adds none). ``make_counter`` and ``make_handlers`` are factories: called
    once on the driver to check the policy against what they build, then once per Python
    worker (a prepared policy carries its own handlers and counter to the workers instead). A
    bad policy is a :class:`~contextpolicy.ContextPolicyError` here, a column that is missing or
    not a list of messages a :class:`~contextpolicy.ContextPlanError`; a row that is not a
    valid transcript fails its task with a ``ContextPlanError`` naming the partition and the
    row within it.

    How many rows a batch holds is Spark's ``spark.sql.execution.arrow.maxRecordsPerBatch``
    (10,000 by default)."""
    _require_dataframe(df)
    if figures_column is not None and (type(figures_column) is not str or not figures_column):
        raise TypeError(f"figures_column: expected a column name (a non-empty str) or None, "
                        f"got {figures_column!r}")
    prepared = driver_policy(policy, make_counter, make_handlers)
    _require_messages(df.schema, column)
    new: list[tuple[str, Any, bool]] = []
    if figures_column is not None:
        _require_new(df, figures_column)
        new.append((figures_column, _spark_type(
            figures_struct_type(prepared.counter is not None)), False))
    factories = make_counter is not None or make_handlers is not None
    built = policy if factories else prepared
    return _mapped(df, column, new, ReduceBatches, built, {
        "figures_column": figures_column, "make_counter": make_counter,
        "make_handlers": make_handlers})


def reduce_jsonl(df: Any, policy: Any, *, column: str = "value") -> Any:
    """``df`` (lines of JSONL in ``column``, as ``spark.read.text`` reads them into ``value``)
    with every line reduced by ``policy`` as ``contextpolicy reduce`` reduces it: the reduced
    line in ``column`` (null for a line that could not be processed, and for a blank line, which
    is skipped), its ``error`` (null, or what the command line would say of it: kept, not
    raised) and a ``figures`` struct (see :class:`~contextpolicy.batch.mapped.ReduceLines`). A
    bad policy is a :class:`~contextpolicy.ContextPolicyError` here, on the driver; so is a
    prepared policy with handlers or a counter (lines are reduced by the policy alone)."""
    from pyspark.sql.types import StringType

    _require_dataframe(df)
    prepared = driver_policy(policy, None, None)
    if prepared.handlers or prepared.counter is not None:
        raise ContextPolicyError([Issue(
            "handlers" if prepared.handlers else "counter", "reduce_jsonl reduces lines by the "
            "policy alone: pass a policy without handlers or a counter", "invalid-option")])
    field = _field(df.schema, column)
    if not isinstance(field.dataType, StringType):
        raise ContextPlanError([Issue(column, f"expected a column of text (string), got "
                                      f"{field.dataType.simpleString()}", "invalid-column")])
    for name in ("error", "figures"):
        _require_new(df, name)
    new = [("error", StringType(), True), ("figures", _spark_type(line_figures_type()), True)]
    return _mapped(df, column, new, ReduceLines, prepared.policy.to_json_dict(), {})


def _mapped(df: Any, column: str, new: list[tuple[str, Any, bool]], kind: type, policy: Any,
            options: dict[str, Any]) -> Any:
    """``df`` mapped by ``kind`` over ``mapInArrow``, the output's schema the input's and
    ``new``. Spark's ``mapInArrow`` cannot name a column holding a dot or a backtick, so such a
    DataFrame's columns are renamed for the map and named back after it."""
    from pyspark.sql.types import StructField, StructType

    names = df.schema.names
    odd = any("." in n or "`" in n for n in names + [n for n, _t, _n in new])
    safe = [f"_contextpolicy_{k}" for k in range(len(names) + len(new))] if odd else [
        *names, *(n for n, _t, _n in new)]
    inner = safe[names.index(column)]
    given = [(f.dataType, f.nullable, f.metadata) for f in df.schema.fields]
    given += [(t, nullable, None) for _n, t, nullable in new]
    fields = [StructField(name, *kept) for name, kept in zip(safe, given, strict=True)]
    if kind is ReduceBatches and options.get("figures_column") is not None:
        options = {**options, "figures_column": safe[len(names)]}
    step = _Partitions(uuid.uuid4().hex, inner, column, kind, policy,
                       {"column": inner, **options})
    source = df.toDF(*safe[:len(names)]) if odd else df
    out = source.mapInArrow(step, StructType(fields))
    return out.toDF(*names, *(n for n, _t, _n in new)) if odd else out


class _Partitions:
    """The function ``mapInArrow`` runs over a partition's record batches: the batch callable
    built once per Python worker (by the run's key), a row that is not a transcript named by
    its partition and its row within the partition."""

    def __init__(self, key: str, column: str, shown: str, kind: type, policy: Any,
                 options: dict[str, Any]) -> None:
        self.key, self.column, self.shown, self.kind = key, column, shown, kind
        self.policy, self.options = policy, options

    def callable(self) -> Any:
        return built_once(self.key, lambda: self.kind(self.policy, **self.options))

    def __call__(self, batches: Iterator[Any]) -> Iterator[Any]:
        run = self.callable()
        offset = 0
        for batch in batches:
            try:
                out = run(batch)
            except ContextPlanError as exc:
                raise _in_partition(exc, self.column, self.shown, offset) from None
            offset += batch.num_rows
            if hasattr(out, "to_batches"):  # ReduceLines gives a table
                yield from out.to_batches()
            else:
                yield out


def _in_partition(exc: ContextPlanError, column: str, shown: str,
                  offset: int) -> ContextPlanError:
    """``exc`` with its rows counted from the partition's start, the column by the name the
    caller gave it, and the partition named."""
    from pyspark import TaskContext

    shifted = shift_rows(exc, column, offset) if offset else exc
    task = TaskContext.get()
    where = f" (partition {task.partitionId()})" if task is not None else ""
    return ContextPlanError([Issue(
        shown + i.path[len(column):] if i.path.startswith(column + "[") else i.path,
        i.message + where, i.code) for i in shifted.issues])


def figures_struct_type(counted: bool) -> Any:
    """The Arrow struct type of a row's figures (``tokens_*`` when ``counted``)."""
    import pyarrow as pa

    return pa.struct(list(figures_schema(counted)))


def _spark_type(arrow_type: Any) -> Any:
    from pyspark.sql.pandas.types import from_arrow_type

    return from_arrow_type(arrow_type)


def _require_dataframe(df: Any) -> None:
    from pyspark.sql import DataFrame

    if not isinstance(df, DataFrame):
        raise TypeError(f"expected a Spark DataFrame, got {type(df).__name__}")


def _field(schema: Any, column: str) -> Any:
    if column not in schema.names:
        raise missing_column(column, schema.names)
    return schema[column]


def _require_messages(schema: Any, column: str) -> None:
    from pyspark.sql.types import ArrayType, StringType, StructType

    kind = _field(schema, column).dataType
    message = kind.elementType if isinstance(kind, ArrayType) else None
    if not isinstance(message, StructType) or "role" not in message.names or not isinstance(
            message["role"].dataType, StringType):
        raise ContextPlanError([Issue(
            column, "expected a list of messages (array<struct<role: string, content, ...>>), "
            f"got {kind.simpleString()}", "invalid-messages")])


def _require_new(df: Any, name: str) -> None:
    """``name`` is no column of ``df`` yet, as Spark compares names (without case unless
    ``spark.sql.caseSensitive``)."""
    sensitive = str(df.sparkSession.conf.get("spark.sql.caseSensitive", "false")).lower()
    taken = df.schema.names if sensitive == "true" else [n.lower() for n in df.schema.names]
    if (name if sensitive == "true" else name.lower()) in taken:
        raise ContextPlanError([Issue(
            name, f"the DataFrame already has a column {name!r}: the output would have two "
            "(name another figures_column, or drop it first)", "column-exists")])
