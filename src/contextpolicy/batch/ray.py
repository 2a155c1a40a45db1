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

Parquet files go cheaper through :func:`reduce_parquet` (plain Ray tasks reading row groups
with pyarrow, no Ray Data read)::

    reduce_parquet("conversations/", policy, output="reduced/")

JSONL goes through :func:`reduce_jsonl` (:class:`ReduceLines`): the lines of
``ray.data.read_text`` reduced as ``contextpolicy reduce`` reduces them, read as bytes by the
kernel's scanner where the policy and the line allow::

    ds = ray.data.read_text("conversations/*.jsonl")
    reduce_jsonl(ds, policy).write_parquet("reduced/")
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from .mapped import ReduceBatches, ReduceLines
from .ray_parquet import reduce_parquet

__all__ = ["ReduceBatches", "ReduceLines", "reduce_dataset", "reduce_jsonl", "reduce_parquet"]


def _reduce_batch(batch: Any, *, policy: Any, column: str, figures_column: str | None) -> Any:
    """One batch reduced by a Ray task (``reduce_dataset`` without actors)."""
    return ReduceBatches(policy, column=column, figures_column=figures_column)(batch)


def reduce_dataset(ds: Any, policy: Any, *, column: str = "messages",
                   make_counter: Callable[[], Any] | None = None,
                   make_handlers: Callable[[], Mapping[str, Callable[..., Any]]] | None = None,
                   figures_column: str | None = "figures", workers: int | None = None,
                   num_cpus: float = 1.0, batch_size: int | None = None,
                   **map_batches: Any) -> Any:
    """``ds`` with every row's ``column`` reduced by ``policy`` (lazily, as Ray Data runs).

    ``batch_size=None`` (the default) reduces each block whole, and with ``num_cpus`` equal to
    the read's (1, Ray's default) Ray runs the read and the reduction as one task: the blocks
    never pass through the object store between them. A smaller batch, or a different
    ``num_cpus``, splits them into two operators and costs more (measured on a local cluster:
    the guide's page "which engine"); a batch larger than a block makes Ray gather blocks
    into it.

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
