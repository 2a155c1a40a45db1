"""Parquet files reduced by plain Ray tasks (extra ``[ray]``): the cheap way through Ray.

Ray Data's ``read_parquet`` alone costs tens of times what the kernel spends reducing the rows
it reads (the guide's page "which engine" has the figures). :func:`reduce_parquet` leaves Ray
Data out of the read: the driver reads the files' footers, cuts their row groups into parts of
about ``rows_per_task`` rows, and one Ray task per part reads its row groups with pyarrow,
reduces them with ``reduce_table`` and either writes them to ``output`` as one Parquet file or
keeps them in Ray's object store, as the blocks of a materialized ``ray.data.Dataset``::

    from contextpolicy.batch.ray import reduce_parquet

    reduce_parquet("conversations/", policy, output="reduced/")   # the files written
    ds = reduce_parquet("s3://bucket/conversations/", policy)      # a Dataset, in order

Everything that can be checked is checked on the driver before a task starts: the policy (with
what the factories build), every file's footer, schema and column, the name of the figures
column and the output folder (missing or empty, not inside a source: nothing is overwritten).
The tasks write into a hidden folder of the output, whose parts are moved into place once every
task is done; a run that fails or is interrupted waits for its running tasks and leaves no part
behind.
"""

from __future__ import annotations

import os
import sys
import uuid
import warnings
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ..errors import ContextPlanError, ContextPolicyError, Issue
from .mapped import ReduceBatches, built_once, driver_policy
from .parquet_files import Location, ParquetFile, files_of, footers, output_folder
from .table import reduce_table, shift_rows

__all__ = ["reduce_parquet"]

_STOP_WAIT = 30.0  # seconds a failed run waits for its running tasks before cleaning up


@dataclass(frozen=True)
class _Part:
    """The row groups of one file one task reads: ``first_row`` is the first one's row in the
    file (the rows an error names are counted from the file's start)."""

    index: int
    file: ParquetFile
    row_groups: tuple[int, ...]
    first_row: int
    rows: int

    @property
    def name(self) -> str:
        """Its file's name in the output, in the folders its source file was in."""
        own = f"part-{self.index:05d}.parquet"
        return f"{self.file.folder}/{own}" if self.file.folder else own


@dataclass(frozen=True)
class _Task:
    """What every task of one run shares: the run's key, the policy (an object reference), the
    options of :class:`ReduceBatches`, the folder the parts are written to (or ``None``: they
    are given back, with a column for each partition key of ``keys``)."""

    key: str
    policy: Any
    options: dict[str, Any]
    staging: tuple[Any, str] | None
    keys: tuple[str, ...] = ()


def reduce_parquet(source: Any, policy: Any, *, output: Any = None, column: str = "messages",
                   figures_column: str | None = "figures",
                   make_counter: Callable[[], Any] | None = None,
                   make_handlers: Callable[[], Mapping[str, Callable[..., Any]]] | None = None,
                   filesystem: Any = None, rows_per_task: int = 10_000, num_cpus: float = 1.0,
                   progress: bool | None = None, **options: Any) -> Any:
    """Every row's ``column`` in the Parquet files of ``source`` reduced by ``policy``, by
    one Ray task per part of about ``rows_per_task`` rows (whole row groups of one file).

    ``source`` is a file, a folder (its files, recursively, but for names starting with ``.``
    or ``_``, as Spark and pyarrow read a folder) or a list of them, each file read once: local
    paths or URIs pyarrow can open (``s3://``, ``gs://``, ...), or paths on ``filesystem`` (a
    ``pyarrow.fs.FileSystem``). The files must share one schema. Each output row is its input
    row with ``column`` reduced and, unless ``figures_column=None``, a struct of its figures
    (those of ``reduce_table``).

    With ``output`` (a folder, local or a URI, missing or empty, not inside a source folder),
    each part is written as ``part-NNNNN.parquet`` in the folders its file was in below the
    source folder (``day=1/part-00000.parquet``: Hive partitions stay partitions) and the names
    written are returned in order. Without it, the parts stay in Ray's object store and a
    materialized ``ray.data.Dataset`` of them is returned, its rows in the order of the files
    and their rows, with a string column for each ``key=value`` folder a file was in.

    ``make_counter`` and ``make_handlers`` are factories: called once here to check the policy
    against what they build, then once per Ray worker process (a prepared policy carries its
    own handlers and counter instead). A bad policy is a
    :class:`~contextpolicy.ContextPolicyError` here; a missing column, a column that is not a
    list of messages or a figures column the files already have a
    :class:`~contextpolicy.ContextPlanError` here; a row that is not a transcript stops the
    run with a ``ContextPlanError`` naming the file and the row in it. A run that fails or is
    interrupted writes nothing. A progress bar of rows is drawn on
    standard error when it is a terminal (``progress=True`` always, ``False`` never). Further
    keywords are the tasks' Ray options (``runtime_env``, ``memory``,
    ``scheduling_strategy``, ...)."""
    import ray

    if "num_returns" in options:
        raise TypeError("num_returns: the tasks' results are this function's to choose")
    if figures_column is not None and (type(figures_column) is not str or not figures_column):
        raise TypeError(f"figures_column: expected a column name (a non-empty str) or None, "
                        f"got {figures_column!r}")
    if type(rows_per_task) is not int or rows_per_task < 1:
        raise ValueError(f"rows_per_task: expected an integer >= 1, got {rows_per_task!r}")
    prepared = driver_policy(policy, make_counter, make_handlers)
    files, folders = files_of(source, filesystem)
    target = None if output is None else output_folder(output, filesystem, folders)
    keys = _keys(files, figures_column)
    parts = _parts(files, prepared, column, figures_column, rows_per_task,
                   keys if target is None else ())
    if not ray.is_initialized():
        ray.init()  # as a task or Ray Data would start it
    _warn_unplaceable(ray, num_cpus)
    key = uuid.uuid4().hex
    staging = "" if target is None else f"{target.path.rstrip('/')}/.contextpolicy-{key}"
    factories = make_counter is not None or make_handlers is not None
    task = _Task(key, ray.put(policy if factories else prepared), {
        "column": column, "figures_column": figures_column, "make_counter": make_counter,
        "make_handlers": make_handlers}, None if target is None else (
            target.filesystem, staging), keys if target is None else ())
    remote = ray.remote(_run_part).options(num_cpus=num_cpus, num_returns=2, **options)
    refs: list[Any] = []
    made = False
    try:
        if target is not None:
            made = _missing(target.filesystem, target.path)
            target.filesystem.create_dir(staging, recursive=True)
            _claimed(target, staging)
        for part in parts:  # each kept as it goes: an interrupt here waits for those sent
            refs.append(remote.remote(task, part))
        _wait(ray, refs, parts, progress)
        if target is None:
            return ray.data.from_arrow_refs([ref[0] for ref in refs])
        _claimed(target, staging)
        return _publish(target, staging, parts)
    except BaseException:
        if target is not None:  # first, so that a task starting now does nothing
            _clean(target, staging, False)
        _stop(ray, refs)
        if target is not None:  # and again, after the tasks that were running
            _clean(target, staging, made)
        raise


def _keys(files: list[ParquetFile], figures_column: str | None) -> tuple[str, ...]:
    """The partition keys of the files' folders, in the order first met; one that is the
    figures column's name (without case) is refused."""
    keys = tuple(dict.fromkeys(k for f in files for k, _ in f.partitions))
    for k in keys:
        if figures_column is not None and k.lower() == figures_column.lower():
            raise ContextPlanError([Issue(figures_column, (
                f"a partition folder is named {k}=...: the output would have two columns "
                f"{figures_column!r} (name another figures_column, or None)"), "column-exists")])
    return keys


def _parts(files: list[ParquetFile], prepared: Any, column: str, figures_column: str | None,
           rows_per_task: int, keys: tuple[str, ...]) -> list[_Part]:
    """The files' row groups in parts of about ``rows_per_task`` rows (a file without a row
    group one empty part), every file's schema checked as ``reduce_table`` checks a table (on
    no row) and against the first file's; the partition ``keys`` to add as columns must be
    none of the files'."""
    parts: list[_Part] = []
    first: tuple[Any, str] | None = None
    for f, meta in zip(files, footers(files), strict=True):
        schema = meta.schema.to_arrow_schema()
        clash = [k for k in keys if k in schema.names]
        if clash:
            raise ValueError(f"{f.shown}: has a column {clash[0]!r} that is also a partition "
                             f"folder's key ({clash[0]}=...): give the output folder, where "
                             "partitions stay folders, or rename one")
        same = first is not None and schema.equals(first[0], check_metadata=False)
        if not same:
            try:  # (a file of the first one's schema passes as it did)
                reduce_table(schema.empty_table(), prepared, column=column)
            except ContextPlanError as exc:
                raise ContextPlanError([Issue(i.path, f"{i.message} (file {f.shown})", i.code)
                                        for i in exc.issues]) from None
        if figures_column is not None and figures_column.lower() in (
                n.lower() for n in schema.names):
            raise ContextPlanError([Issue(figures_column, (
                f"{f.shown} already has a column {figures_column!r} (names compared without "
                "case, as Spark and DuckDB compare them): the output would have two (name "
                "another figures_column, or None)"), "column-exists")])
        if first is None:
            first = (schema, f.shown)
        elif not same:
            raise ValueError(f"{f.shown}: its columns differ from those of {first[1]} "
                             f"({_difference(first[0], schema)}): one run reads files of one "
                             "schema")
        _cut(parts, f, meta, rows_per_task)
    return parts


def _cut(parts: list[_Part], f: ParquetFile, meta: Any, rows_per_task: int) -> None:
    """``f``'s row groups appended to ``parts``, in parts of at least ``rows_per_task`` rows
    (the last of a file may hold fewer)."""
    groups: list[int] = []
    first = row = 0
    for k in range(meta.num_row_groups):
        groups.append(k)
        row += meta.row_group(k).num_rows
        if row - first >= rows_per_task or k == meta.num_row_groups - 1:
            parts.append(_Part(len(parts), f, tuple(groups), first, row - first))
            groups, first = [], row
    if not meta.num_row_groups:  # its schema, and no row
        parts.append(_Part(len(parts), f, (), 0, 0))


def _difference(a: Any, b: Any) -> str:
    """What differs between two schemas, said shortly."""
    left = {field.name: field.type for field in a}
    right = {field.name: field.type for field in b}
    said = [f"{n}: {left[n]} against {right[n]}" for n in left if n in right and
            left[n] != right[n]]
    said += [f"{n} missing" for n in left if n not in right]
    said += [f"{n} added" for n in right if n not in left]
    nulls = {field.name: field.nullable for field in b}
    said += [f"{field.name} {'nullable' if field.nullable else 'not nullable'} against "
             f"{'nullable' if nulls[field.name] else 'not nullable'}" for field in a
             if field.name in nulls and field.nullable != nulls[field.name]]
    return "; ".join(said[:3]) or "the order of the columns"


def _with_partitions(table: Any, partitions: tuple[tuple[str, str | None], ...],
                     keys: tuple[str, ...]) -> Any:
    """``table`` with a string column for each partition key of ``keys``: its value in
    ``partitions``, null where the file's folders have none."""
    import pyarrow as pa

    values = dict(partitions)
    for name in keys:
        table = table.append_column(name, pa.array([values.get(name)] * table.num_rows,
                                                   pa.string()))
    return table


def _warn_unplaceable(ray: Any, num_cpus: float) -> None:
    """A warning when no node of the cluster has ``num_cpus`` CPUs (the tasks would wait)."""
    nodes = [n.get("Resources", {}).get("CPU", 0) for n in ray.nodes() if n.get("Alive")]
    largest = max(nodes, default=0)
    if num_cpus > largest:
        warnings.warn(f"num_cpus={num_cpus}: the largest node of the cluster has {largest:g} "
                      "CPUs; no task starts until a node that large joins it", RuntimeWarning,
                      stacklevel=3)


def _run_part(task: _Task, part: _Part) -> tuple[Any, int]:
    """One part read, reduced and written (or given back): (the table or ``None``, its
    rows)."""
    import pyarrow.parquet as pq
    import ray

    if task.staging is not None and _missing(*task.staging):  # the run failed: nothing to do
        return None, 0
    run = built_once(task.key, lambda: ReduceBatches(ray.get(task.policy), **task.options))
    f = part.file
    with f.filesystem.open_input_file(f.path) as handle:
        parquet = pq.ParquetFile(handle)
        table = parquet.read_row_groups(list(part.row_groups), use_threads=False) if (
            part.row_groups) else parquet.schema_arrow.empty_table()
    if task.staging is None:
        table = _with_partitions(table, f.partitions, task.keys)
    try:
        out = run(table)
    except ContextPlanError as exc:
        shifted = shift_rows(exc, run.column, part.first_row) if part.first_row else exc
        raise ContextPlanError([Issue(i.path, f"{i.message} (file {f.shown})", i.code)
                                for i in shifted.issues]) from None
    if task.staging is None:
        return out, table.num_rows
    where, folder = task.staging
    if f.folder:
        where.create_dir(f"{folder}/{f.folder}", recursive=True)
    pq.write_table(out, f"{folder}/{part.name}", filesystem=where)
    return None, table.num_rows


def _wait(ray: Any, refs: Sequence[Any], parts: Sequence[_Part], progress: bool | None) -> None:
    """Every task waited for (the small second result of each), drawn as a progress bar of
    rows; the first task that failed raises its own error (not Ray's wrapper)."""
    draw = sys.stderr.isatty() if progress is None else bool(progress)
    rows = {ref[1]: part.rows for ref, part in zip(refs, parts, strict=True)}
    tables = {ref[1]: ref[0] for ref in refs}
    pending = list(rows)
    with _Bar(draw, sum(rows.values())) as advance:
        while pending:
            done, pending = ray.wait(pending, num_returns=len(pending), timeout=0.25,
                                     fetch_local=False)
            for ref in done:
                try:
                    ray.get(ref)
                except ray.exceptions.RayTaskError as exc:
                    _discard(ray, tables[ref])
                    cause = exc.cause
                    if isinstance(cause, (ContextPlanError, ContextPolicyError, OSError)):
                        raise cause from None
                    raise
                advance(rows[ref])


def _stop(ray: Any, refs: Sequence[Any]) -> None:
    """The run's tasks waited for (a while), their errors taken so that Ray does not log them
    as unhandled. They are not cancelled: ``ray.cancel`` racing a task's completion fails a
    check in Ray's core worker (2.60) that ends the driver's process; a task that starts after
    the run failed finds its hidden folder gone and does nothing."""
    small = [ref[1] for ref in refs]
    done, _ = ray.wait(small, num_returns=len(small), timeout=_STOP_WAIT, fetch_local=False)
    ready = set(done)
    for ref in refs:
        if ref[1] in ready:
            try:
                ray.get(ref[1])
            except Exception:  # a cancelled or failed task: its error is taken
                _discard(ray, ref[0])


def _discard(ray: Any, ref: Any) -> None:
    try:
        ray.get(ref)
    except Exception:  # the other result of a task whose error is raised
        pass


def _missing(where: Any, path: str) -> bool:
    from pyarrow import fs

    return bool(where.get_file_info(path).type == fs.FileType.NotFound)


def _claimed(target: Location, staging: str) -> None:
    """The output folder holds this run's hidden folder and nothing else (another run, or
    anyone, writing into it meanwhile is an error, not a mix of two runs' files)."""
    from pyarrow import fs

    held = [f.path for f in target.filesystem.get_file_info(fs.FileSelector(target.path))]
    others = [p for p in held if p.rstrip("/") != staging.rstrip("/")]
    if others:
        raise FileExistsError(f"{target.given}: something else wrote into the output folder "
                              f"meanwhile ({others[0].rsplit('/', 1)[-1]}); nothing of this "
                              "run is kept")


def _publish(target: Location, staging: str, parts: Sequence[_Part]) -> list[str]:
    """The parts moved from ``staging`` into the output folder, in order; the names written.
    If a move fails, the parts moved and the folders made are taken back."""
    where, folder = target.filesystem, target.path.rstrip("/")
    moved: list[str] = []
    made: list[str] = []
    ready = {folder}  # the folders known to be there (each looked at once)
    try:
        for part in parts:
            name = f"{folder}/{part.name}"
            if not _missing(where, name):
                raise FileExistsError(f"{target.name(part.name)}: written meanwhile by "
                                      "something else; nothing of this run is kept")
            below = folder
            for step in part.file.folder.split("/") if part.file.folder else ():
                below = f"{below}/{step}"
                if below not in ready:
                    if _missing(where, below):
                        where.create_dir(below, recursive=False)
                        made.append(below)
                    ready.add(below)
            where.move(f"{staging}/{part.name}", name)
            moved.append(name)
    except BaseException:
        for name in moved:
            where.delete_file(name)
        for below in reversed(made):
            _remove_empty(where, below)
        raise
    try:
        where.delete_dir(staging)
    except OSError as exc:  # every part is in place: the run is done
        warnings.warn(f"{target.name(staging.rsplit('/', 1)[-1])}: this run's hidden folder "
                      f"could not be removed ({exc}); remove it", RuntimeWarning, stacklevel=3)
    return [target.name(part.name) for part in parts]


def _clean(target: Location, staging: str, made: bool) -> None:
    """What a failed run wrote removed: its hidden folder (its own), and the output folder if
    the run made it and it is still empty."""
    try:
        target.filesystem.delete_dir(staging)
    except OSError:
        pass
    if made:
        _remove_empty(target.filesystem, target.path)


def _remove_empty(where: Any, folder: str) -> None:
    """``folder`` removed if it is empty: on a local disk by ``rmdir``, which removes nothing
    else whatever appears meanwhile; elsewhere left (an object store's folder is no object)."""
    from pyarrow import fs

    if isinstance(where, fs.LocalFileSystem):
        try:
            os.rmdir(folder)
        except OSError:
            pass


class _Bar:
    """A rich progress bar of rows on standard error, or nothing."""

    def __init__(self, draw: bool, total: int) -> None:
        self.draw, self.total = draw, total
        self.progress: Any = None

    def __enter__(self) -> Callable[[int], None]:
        if not self.draw:
            return lambda _rows: None
        from rich.console import Console
        from rich.progress import Progress

        self.progress = Progress(console=Console(stderr=True), transient=False)
        self.progress.__enter__()
        bar = self.progress.add_task("reducing rows", total=self.total)
        return lambda rows: self.progress.advance(bar, rows)

    def __exit__(self, *exc: Any) -> None:
        if self.progress is not None:
            self.progress.__exit__(*exc)
