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

from ..errors import ContextPlanError, Issue
from .mapped import ReduceBatches, ReduceLines, line_figures_type
from .table import figures_schema, shift_rows

__all__ = ["reduce_dataframe", "reduce_jsonl"]

_BUILT: dict[str, Any] = {}  # per Python worker: the callables built, by the run's key
_KEEP = 8  # runs whose callables a worker keeps (a long-lived worker serves many jobs)


def reduce_dataframe(df: Any, policy: Any, *, column: str = "messages",
                     figures_column: str | None = "figures",
                     make_counter: Callable[[], Any] | None = None,
                     make_handlers: Callable[[], Mapping[str, Callable[..., Any]]] | None = None,
                     ) -> Any:
    """``df`` with every row's ``column`` reduced by ``policy`` (lazily, as Spark runs).

    ``column`` must be an ``array<struct<role, content, ...>>`` (the shape of
    ``spark.read.parquet`` over a table ``reduce_table`` reads). The output's schema is the
    input's, plus ``figures_column`` (a struct of :func:`~contextpolicy.batch.reduce_table`'s
    figures; ``None`` adds none). ``make_counter`` and ``make_handlers`` are factories: called
    once on the driver to check the policy against what they build, then once per Python
    worker. A bad policy is a :class:`~contextpolicy.ContextPolicyError` here, a column that is
    missing or not a list of messages a :class:`~contextpolicy.ContextPlanError`; a row that is
    not a valid transcript fails its task with a ``ContextPlanError`` naming the partition and
    the row within it.

    How many rows a batch holds is Spark's ``spark.sql.execution.arrow.maxRecordsPerBatch``
    (10,000 by default)."""
    from ..prepared import prepare_policy

    _require_dataframe(df)
    counter = make_counter() if make_counter is not None else None
    handlers = make_handlers() if make_handlers is not None else None
    prepared = prepare_policy(policy, handlers=handlers, counter=counter)
    _require_messages(df.schema, column)
    schema = df.schema
    if figures_column is not None:
        _require_new(schema, figures_column)
        schema = _with(schema, (figures_column, _spark_type(
            figures_struct_type(prepared.counter is not None)), False))
    built = prepared if make_counter is None and make_handlers is None else policy
    step = _Partitions(uuid.uuid4().hex, column, ReduceBatches, built, {
        "column": column, "figures_column": figures_column, "make_counter": make_counter,
        "make_handlers": make_handlers})
    return df.mapInArrow(step, schema)


def reduce_jsonl(df: Any, policy: Any, *, column: str = "value") -> Any:
    """``df`` (lines of JSONL in ``column``, as ``spark.read.text`` reads them into ``value``)
    with every line reduced by ``policy`` as ``contextpolicy reduce`` reduces it: the reduced
    line in ``column`` (null for a line that could not be processed), its ``error`` (null, or
    what the command line would say of it: kept, not raised) and a ``figures`` struct (see
    :class:`~contextpolicy.batch.mapped.ReduceLines`). A bad policy is a
    :class:`~contextpolicy.ContextPolicyError` here, on the driver."""
    from pyspark.sql.types import StringType

    from ..prepared import prepare_policy

    _require_dataframe(df)
    prepared = prepare_policy(policy)
    field = _field(df.schema, column)
    if not isinstance(field.dataType, StringType):
        raise ContextPlanError([Issue(column, f"expected a column of text (string), got "
                                      f"{field.dataType.simpleString()}", "invalid-column")])
    for name in ("error", "figures"):
        _require_new(df.schema, name)
    schema = _with(df.schema, ("error", StringType(), True),
                   ("figures", _spark_type(line_figures_type()), True))
    doc = prepared.policy.to_json_dict()
    step = _Partitions(uuid.uuid4().hex, column, ReduceLines, doc, {"column": column})
    return df.mapInArrow(step, schema)


class _Partitions:
    """The function ``mapInArrow`` runs over a partition's record batches: the batch callable
    built once per Python worker (by the run's key), a row that is not a transcript named by
    its partition and its row within the partition."""

    def __init__(self, key: str, column: str, kind: type, policy: Any,
                 options: dict[str, Any]) -> None:
        self.key, self.column, self.kind = key, column, kind
        self.policy, self.options = policy, options

    def callable(self) -> Any:
        built = _BUILT.get(self.key)
        if built is None:
            built = self.kind(self.policy, **self.options)
            while len(_BUILT) >= _KEEP:
                _BUILT.pop(next(iter(_BUILT)))
            _BUILT[self.key] = built
        return built

    def __call__(self, batches: Iterator[Any]) -> Iterator[Any]:
        run = self.callable()
        offset = 0
        for batch in batches:
            try:
                out = run(batch)
            except ContextPlanError as exc:
                raise _in_partition(exc, self.column, offset) from None
            offset += batch.num_rows
            if hasattr(out, "to_batches"):  # ReduceLines gives a table
                yield from out.to_batches()
            else:
                yield out


def _in_partition(exc: ContextPlanError, column: str, offset: int) -> ContextPlanError:
    """``exc`` with its rows counted from the partition's start, and the partition named."""
    from pyspark import TaskContext

    shifted = shift_rows(exc, column, offset) if offset else exc
    task = TaskContext.get()
    where = f" (partition {task.partitionId()})" if task is not None else ""
    return ContextPlanError([Issue(i.path, i.message + where, i.code) for i in shifted.issues])


def figures_struct_type(counted: bool) -> Any:
    """The Arrow struct type of a row's figures (``tokens_*`` when ``counted``)."""
    import pyarrow as pa

    return pa.struct(list(figures_schema(counted)))


def _spark_type(arrow_type: Any) -> Any:
    from pyspark.sql.pandas.types import from_arrow_type

    return from_arrow_type(arrow_type)


def _with(schema: Any, *fields: tuple[str, Any, bool]) -> Any:
    """``schema`` and ``fields`` after it, as a new schema (``StructType.add`` would change the
    DataFrame's own)."""
    from pyspark.sql.types import StructField, StructType

    return StructType([*schema.fields, *(StructField(*f) for f in fields)])


def _require_dataframe(df: Any) -> None:
    from pyspark.sql import DataFrame

    if not isinstance(df, DataFrame):
        raise TypeError(f"expected a Spark DataFrame, got {type(df).__name__}")


def _field(schema: Any, column: str) -> Any:
    if column not in schema.names:
        raise ContextPlanError([Issue(
            column, f"the DataFrame has no column {column!r} (columns: "
            f"{', '.join(schema.names) or 'none'})", "missing-column")])
    return schema[column]


def _require_messages(schema: Any, column: str) -> None:
    from pyspark.sql.types import ArrayType, StructType

    kind = _field(schema, column).dataType
    if not (isinstance(kind, ArrayType) and isinstance(kind.elementType, StructType)):
        raise ContextPlanError([Issue(
            column, "expected a list of messages (array<struct<role, content, ...>>), got "
            f"{kind.simpleString()}", "invalid-messages")])


def _require_new(schema: Any, name: str) -> None:
    if name in schema.names:
        raise ContextPlanError([Issue(
            name, f"the DataFrame already has a column {name!r}: the output would have two "
            "(name another figures_column, or drop it first)", "column-exists")])
