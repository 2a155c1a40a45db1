"""The callables an engine maps over record batches: Ray Data's ``map_batches`` and Spark's
``mapInArrow`` run the same two.

:class:`ReduceBatches` reduces a batch's messages column with ``reduce_table`` and appends the
rows' figures as one struct column; :class:`ReduceLines` reduces a batch of JSONL lines as
``contextpolicy reduce`` does. Neither imports an engine: both take and give pyarrow tables
and record batches, so each engine's module only says how to map them.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping
from typing import Any

from ..jsonl.files import NOT_BLANK
from .table import reduce_table

__all__ = ["ReduceBatches", "ReduceLines", "built_once", "driver_policy", "line_figures_type"]

_BUILT: dict[str, Any] = {}  # per worker process: the callables built, by the run's key
_KEEP = 8  # runs whose callables a worker keeps (a long-lived worker serves many jobs)


def driver_policy(policy: Any, make_counter: Callable[[], Any] | None,
                   make_handlers: Callable[[], Mapping[str, Callable[..., Any]]] | None) -> Any:
    """``policy`` checked on the driver, with what the factories build, as a prepared policy;
    a prepared policy as it is (with its handlers and counter; factories beside it are an
    error)."""
    from ..errors import ContextPolicyError
    from ..prepared import PreparedPolicy, carried_options, prepare_policy

    if isinstance(policy, PreparedPolicy):
        carried = carried_options(make_handlers, make_counter)
        if carried is not None:
            raise ContextPolicyError(carried)
        return policy
    counter = make_counter() if make_counter is not None else None
    handlers = make_handlers() if make_handlers is not None else None
    return prepare_policy(policy, handlers=handlers, counter=counter)


def built_once(key: str, build: Callable[[], Any]) -> Any:
    """What ``build`` gives, built once per worker process for the run ``key`` and kept for
    the run's next tasks there (at most the last 8 runs are kept)."""
    built = _BUILT.get(key)
    if built is None:
        built = build()
        while len(_BUILT) >= _KEEP:
            _BUILT.pop(next(iter(_BUILT)))
        _BUILT[key] = built
    return built


class ReduceBatches:
    """``reduce_table`` as a callable over batches (a Ray Data callable class, a Spark
    ``mapInArrow`` step): ``ds.map_batches(ReduceBatches, fn_constructor_kwargs={"policy":
    policy}, batch_format="pyarrow", compute=ray.data.ActorPoolStrategy(size=N))``.

    ``make_counter`` and ``make_handlers`` are called once, when the callable is built on a
    worker (a tokenizer loads once per worker, not once per batch). A table gives a table, a
    record batch a record batch: the input's columns, ``column`` reduced, and, unless
    ``figures_column`` is ``None``, a struct column of the row's figures (those of
    ``reduce_table``).
    """

    def __init__(self, policy: Any, *, column: str = "messages",
                 make_counter: Callable[[], Any] | None = None,
                 make_handlers: Callable[[], Mapping[str, Callable[..., Any]]] | None = None,
                 figures_column: str | None = "figures") -> None:
        from ..prepared import PreparedPolicy, prepare_policy

        self.column = column
        self.figures_column = figures_column
        if isinstance(policy, PreparedPolicy) and make_counter is None and make_handlers is None:
            self.prepared = policy  # with its own handlers and counter
        else:
            self.prepared = prepare_policy(
                policy, handlers=make_handlers() if make_handlers is not None else None,
                counter=make_counter() if make_counter is not None else None)

    def __call__(self, batch: Any) -> Any:
        import pyarrow as pa

        out, figures = reduce_table(batch, self.prepared, column=self.column)
        if self.figures_column is None:
            return out
        struct = figures_struct(figures)
        if isinstance(out, pa.RecordBatch):
            return pa.RecordBatch.from_arrays(
                [*out.columns, struct], schema=out.schema.append(
                    pa.field(self.figures_column, struct.type)))
        return out.append_column(self.figures_column, struct)


def figures_struct(figures: Any) -> Any:
    """A figures table (or record batch) as one ``StructArray``, a row's figures a value."""
    import pyarrow as pa

    if isinstance(figures, pa.Table):
        figures = figures.combine_chunks()
        columns = [col.combine_chunks() for col in figures.columns]
    else:
        columns = list(figures.columns)
    return pa.StructArray.from_arrays(columns, fields=list(figures.schema))


class ReduceLines:
    """The JSONL runner as a callable over batches (a Ray Data callable class, a Spark
    ``mapInArrow`` step): a batch's ``column`` (lines of text, one
    JSON document each) reduced line by line, as ``contextpolicy reduce`` reduces them.

    The output batch has the reduced line in ``column`` (null for a line that could not be
    processed, and for a blank line or a null, which are skipped as the command line skips a
    blank line: no error, no figures), its ``error`` (null, or what the command line would say
    of it), and a ``figures`` struct: ``triggered``, ``target_reached``, ``missed_reason``
    (the report's ``missedReason``), ``reduced`` (chars or messages went down), ``chars_before``,
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
            texts = [None if t is None else t.encode("utf-8", "surrogatepass")
                     for t in column.to_pylist()]
        # A blank line (nothing but JSON whitespace) or a null is skipped, as the command line
        # skips it: no output, no error, no figures.
        lines = [(k + 1, text) for k, text in enumerate(texts)
                 if text is not None and NOT_BLANK.search(text)]
        _, done = self.worker.batch(lines)
        results: list[Any] = [None] * len(texts)
        for (number, _text), r in zip(lines, done, strict=True):
            results[number - 1] = r
        out: list[str | None] = []
        errors: list[str | None] = []
        rows: list[dict[str, Any] | None] = []
        for r in results:
            if r is None:
                out.append(None)
                errors.append(None)
                rows.append(None)
                continue
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
        return table.append_column("figures", pa.array(rows, line_figures_type()))


# The type of a text column's bytes, by the column's type (a cast that reads no byte).
_BYTES_OF = {"string": "binary", "large_string": "large_binary", "string_view": "binary_view",
             "binary": "binary", "large_binary": "large_binary"}


@functools.cache
def line_figures_type() -> Any:
    import pyarrow as pa

    return pa.struct([("triggered", pa.bool_()), ("target_reached", pa.bool_()),
                      ("missed_reason", pa.string()), ("reduced", pa.bool_())] + [
        (name, pa.int64()) for name in ("chars_before", "chars_after", "messages_before",
                                        "messages_after", "messages_removed", "groups_removed")
    ] + [("read_as_bytes", pa.bool_())])
