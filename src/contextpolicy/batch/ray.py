"""``reduce_table`` over a Ray Dataset (extra ``[ray]``).

:class:`ReduceBatches` is the class-based callable Ray Data builds once per worker (so a
counter or handlers are built once per worker, by the factories given), and
:func:`reduce_dataset` maps it over a dataset's pyarrow batches::

    import ray
    from contextpolicy.batch.ray import reduce_dataset

    ds = ray.data.read_parquet("conversations/")
    reduce_dataset(ds, policy).write_parquet("reduced/")

Each output batch is the input batch with its ``messages`` column reduced and, unless
``figures_column=None``, a struct column of the row's figures (those of ``reduce_table``).

JSONL goes through :func:`reduce_jsonl` (:class:`ReduceLines`): the lines of
``ray.data.read_text`` reduced as ``contextpolicy reduce`` reduces them, read as bytes by the
kernel's scanner where the policy and the line allow::

    ds = ray.data.read_text("conversations/*.jsonl")
    reduce_jsonl(ds, policy).write_parquet("reduced/")
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping
from typing import Any

from .table import reduce_table

__all__ = ["ReduceBatches", "ReduceLines", "reduce_dataset", "reduce_jsonl"]


class ReduceBatches:
    """``reduce_table`` as a Ray Data callable class: ``ds.map_batches(ReduceBatches,
    fn_constructor_kwargs={"policy": policy}, batch_format="pyarrow",
    compute=ray.data.ActorPoolStrategy(size=N))``.

    ``make_counter`` and ``make_handlers`` are called once, when Ray builds the callable on a
    worker (a tokenizer loads once per worker, not once per batch).
    """

    def __init__(self, policy: Any, *, column: str = "messages",
                 make_counter: Callable[[], Any] | None = None,
                 make_handlers: Callable[[], Mapping[str, Callable[..., Any]]] | None = None,
                 figures_column: str | None = "figures") -> None:
        from ..prepared import prepare_policy

        self.column = column
        self.figures_column = figures_column
        self.prepared = prepare_policy(
            policy, handlers=make_handlers() if make_handlers is not None else None,
            counter=make_counter() if make_counter is not None else None)

    def __call__(self, batch: Any) -> Any:
        import pyarrow as pa

        table = batch if isinstance(batch, pa.Table) else pa.Table.from_batches([batch])
        out, figures = reduce_table(table, self.prepared, column=self.column)
        if self.figures_column is None:
            return out
        figures = figures.combine_chunks()
        struct = pa.StructArray.from_arrays(
            [col.combine_chunks() if isinstance(col, pa.ChunkedArray) else col
             for col in figures.columns], names=figures.column_names)
        return out.append_column(self.figures_column, struct)


def _reduce_batch(batch: Any, *, policy: Any, column: str, figures_column: str | None) -> Any:
    """One batch reduced by a Ray task (``reduce_dataset`` without actors)."""
    return ReduceBatches(policy, column=column, figures_column=figures_column)(batch)


def reduce_dataset(ds: Any, policy: Any, *, column: str = "messages",
                   make_counter: Callable[[], Any] | None = None,
                   make_handlers: Callable[[], Mapping[str, Callable[..., Any]]] | None = None,
                   figures_column: str | None = "figures", workers: int | None = None,
                   num_cpus: float = 1.0, batch_size: int | None = 4096,
                   **map_batches: Any) -> Any:
    """``ds`` with every row's ``column`` reduced by ``policy`` (lazily, as Ray Data runs).

    With ``make_counter`` or ``make_handlers`` (something to build once per worker), or a
    number of ``workers``, the batches go to a pool of ``workers`` actors (default 1) of
    ``num_cpus`` each, each built once (:class:`ReduceBatches`). Otherwise nothing needs
    building on a worker: the policy is checked and prepared here (a
    :class:`~contextpolicy.ContextPolicyError` at once), and Ray tasks of ``num_cpus`` each
    reduce the batches, since actors take seconds to start on every run. Leave the
    reading and writing tasks a CPU (on a two-CPU machine, two one-CPU actors would starve
    them). Further keywords go to ``map_batches``."""
    import ray

    if workers is not None and (type(workers) is not int or workers < 1):
        raise ValueError(f"workers: expected an integer >= 1 or None, got {workers!r}")
    kwargs: dict[str, Any] = {"batch_format": "pyarrow", "batch_size": batch_size,
                              "num_cpus": num_cpus}
    if make_counter is None and make_handlers is None and workers is None:
        from ..prepared import prepare_policy

        # Checked here, once: a bad policy is an error now, not in every task.
        kwargs["fn_kwargs"] = {"policy": prepare_policy(policy), "column": column,
                               "figures_column": figures_column}
        kwargs.update(map_batches)
        return ds.map_batches(_reduce_batch, **kwargs)
    kwargs["fn_constructor_kwargs"] = {
        "policy": policy, "column": column, "make_counter": make_counter,
        "make_handlers": make_handlers, "figures_column": figures_column}
    kwargs["compute"] = ray.data.ActorPoolStrategy(size=workers or 1)
    kwargs.update(map_batches)
    return ds.map_batches(ReduceBatches, **kwargs)


class ReduceLines:
    """The JSONL runner as a Ray Data callable class: a batch's ``column`` (lines of text, one
    JSON document each) reduced line by line, as ``contextpolicy reduce`` reduces them.

    The output batch has the reduced line in ``column`` (null for a line that could not be
    processed), its ``error`` (null, or what the command line would say of it), and a
    ``figures`` struct: ``triggered``, ``target_reached``, ``missed_reason`` (the report's
    ``missedReason``), ``reduced`` (chars or messages went down), ``chars_before``,
    ``chars_after``, ``messages_before``, ``messages_after``, ``messages_removed``,
    ``groups_removed`` and ``read_as_bytes`` (the line went through the kernel's scanner, not
    the object path).
    """

    def __init__(self, policy: Any, *, column: str = "text") -> None:
        from ..jsonl.worker import LineWorker

        doc = policy if isinstance(policy, dict) else policy.to_json_dict()
        self.column = column
        self.worker = LineWorker(doc, False)

    def __call__(self, batch: Any) -> Any:
        import pyarrow as pa

        table = batch if isinstance(batch, pa.Table) else pa.Table.from_batches([batch])
        column = table.column(self.column)
        # The lines' bytes as they are (no decoding): a line that is not UTF-8 is that line's
        # error, as on the command line, not the whole batch's.
        raw = _BYTES_OF.get(str(column.type))
        if raw is not None:
            texts = column.cast(getattr(pa, raw)()).to_pylist()
        else:
            texts = [(t or "").encode("utf-8", "surrogatepass") for t in column.to_pylist()]
        lines = [(k + 1, text or b"") for k, text in enumerate(texts)]
        _, results = self.worker.batch(lines)
        out, errors, rows = [], [], []
        for r in results:
            out.append(None if r.output is None else bytes(r.output[:-1]).decode(
                "utf-8", "surrogatepass"))
            errors.append(r.error)
            f = r.figures
            rows.append(None if f is None else {
                "triggered": bool(f.triggered), "target_reached": bool(f.reached),
                # a line's figures: its missed reason as a list of one, or none
                "missed_reason": next(iter(f.missed), None), "reduced": bool(f.reduced),
                "chars_before": f.chars_before, "chars_after": f.chars_after,
                "messages_before": f.messages_before, "messages_after": f.messages_after,
                "messages_removed": f.messages_removed, "groups_removed": f.groups_removed,
                "read_as_bytes": bool(r.scanned)})
        index = table.column_names.index(self.column)
        table = table.set_column(index, self.column, pa.array(out, pa.string()))
        table = table.append_column("error", pa.array(errors, pa.string()))
        return table.append_column("figures", pa.array(rows, _figures_type()))


# The type of a text column's bytes, by the column's type (a cast that reads no byte).
_BYTES_OF = {"string": "binary", "large_string": "large_binary", "string_view": "binary_view",
             "binary": "binary", "large_binary": "large_binary"}


@functools.cache
def _figures_type() -> Any:
    import pyarrow as pa

    return pa.struct([("triggered", pa.bool_()), ("target_reached", pa.bool_()),
                      ("missed_reason", pa.string()), ("reduced", pa.bool_())] + [
        (name, pa.int64()) for name in ("chars_before", "chars_after", "messages_before",
                                        "messages_after", "messages_removed", "groups_removed")
    ] + [("read_as_bytes", pa.bool_())])


def reduce_jsonl(ds: Any, policy: Any, *, column: str = "text", workers: int = 1,
                 num_cpus: float = 1.0, batch_size: int | None = 4096,
                 **map_batches: Any) -> Any:
    """``ds`` (lines of JSONL in ``column``, as ``ray.data.read_text`` reads them) with every
    line reduced by ``policy`` (see :class:`ReduceLines`), by a pool of ``workers`` actors."""
    import ray

    kwargs: dict[str, Any] = {
        "fn_constructor_kwargs": {"policy": policy, "column": column},
        "batch_format": "pyarrow", "batch_size": batch_size, "num_cpus": num_cpus,
        "compute": ray.data.ActorPoolStrategy(size=workers),
    }
    kwargs.update(map_batches)
    return ds.map_batches(ReduceLines, **kwargs)
