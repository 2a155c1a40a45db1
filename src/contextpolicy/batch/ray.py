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
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from .table import reduce_table

__all__ = ["ReduceBatches", "reduce_dataset"]


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


def reduce_dataset(ds: Any, policy: Any, *, column: str = "messages",
                   make_counter: Callable[[], Any] | None = None,
                   make_handlers: Callable[[], Mapping[str, Callable[..., Any]]] | None = None,
                   figures_column: str | None = "figures", workers: int = 1,
                   num_cpus: float = 1.0, batch_size: int | None = 4096,
                   **map_batches: Any) -> Any:
    """``ds`` with every row's ``column`` reduced by ``policy`` (lazily, as Ray Data runs),
    by a pool of ``workers`` actors of ``num_cpus`` each (leave the reading and writing tasks a
    CPU: on a two-CPU machine, two one-CPU actors would starve them). Further keywords go to
    ``map_batches``."""
    import ray

    kwargs: dict[str, Any] = {
        "fn_constructor_kwargs": {"policy": policy, "column": column,
                                  "make_counter": make_counter, "make_handlers": make_handlers,
                                  "figures_column": figures_column},
        "batch_format": "pyarrow", "batch_size": batch_size, "num_cpus": num_cpus,
        "compute": ray.data.ActorPoolStrategy(size=workers),
    }
    kwargs.update(map_batches)
    return ds.map_batches(ReduceBatches, **kwargs)
