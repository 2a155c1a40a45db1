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
what the factories build), every file's footer, the column's type, the name of the figures
column and the output folder (missing or empty: nothing is overwritten).
"""

from __future__ import annotations

import os
import sys
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ..errors import ContextPlanError, ContextPolicyError, Issue
from .mapped import ReduceBatches, built_once, checked_policy
from .table import reduce_table, shift_rows

__all__ = ["reduce_parquet"]


@dataclass(frozen=True)
class _Part:
    """The row groups of one file one task reads: ``first_row`` is the first one's row in the
    file (the rows an error names are counted from the file's start)."""

    index: int
    filesystem: Any
    path: str
    row_groups: tuple[int, ...]
    first_row: int
    rows: int


def reduce_parquet(source: Any, policy: Any, *, output: Any = None, column: str = "messages",
                   figures_column: str | None = "figures",
                   make_counter: Callable[[], Any] | None = None,
                   make_handlers: Callable[[], Mapping[str, Callable[..., Any]]] | None = None,
                   filesystem: Any = None, rows_per_task: int = 10_000, num_cpus: float = 1.0,
                   progress: bool | None = None, **options: Any) -> Any:
    """Every row's ``column`` in the Parquet files of ``source`` reduced by ``policy``, by
    one Ray task per part of about ``rows_per_task`` rows (whole row groups of one file).

    ``source`` is a file, a folder (its files, recursively, but for names starting with ``.``
    or ``_``, as Spark and pyarrow read a folder) or a list of them: local paths or URIs
    pyarrow can open (``s3://``, ``gs://``, ...), or paths on ``filesystem`` (a
    ``pyarrow.fs.FileSystem``). Each output row is its input row with ``column`` reduced and,
    unless ``figures_column=None``, a struct of its figures (those of ``reduce_table``).

    With ``output`` (a folder, local or a URI, that is missing or empty), each task writes its
    part as ``part-NNNNN.parquet`` there and the paths written are returned in order; without
    it, the parts stay in Ray's object store and a materialized ``ray.data.Dataset`` of them
    is returned, its rows in the order of the files and their rows.

    ``make_counter`` and ``make_handlers`` are factories: called once here to check the policy
    against what they build, then once per Ray worker process (a prepared policy carries its
    own handlers and counter instead). A bad policy is a
    :class:`~contextpolicy.ContextPolicyError` here; a missing column, a column that is not a
    list of messages or a figures column the files already have a
    :class:`~contextpolicy.ContextPlanError` here; a row that is not a transcript stops the
    run with a ``ContextPlanError`` naming the file and the row in it, and the tasks not yet
    done are cancelled. A progress bar is drawn on standard error when it is a terminal
    (``progress=True`` always, ``False`` never). Further keywords are the tasks' Ray options
    (``runtime_env``, ``memory``, ``scheduling_strategy``, ...)."""
    import ray

    if "num_returns" in options:
        raise TypeError("num_returns: the tasks' results are this function's to choose")

    if figures_column is not None and (type(figures_column) is not str or not figures_column):
        raise TypeError(f"figures_column: expected a column name (a non-empty str) or None, "
                        f"got {figures_column!r}")
    if type(rows_per_task) is not int or rows_per_task < 1:
        raise ValueError(f"rows_per_task: expected an integer >= 1, got {rows_per_task!r}")
    prepared = checked_policy(policy, make_counter, make_handlers)
    files = _files(source, filesystem)
    parts = _parts(files, prepared, column, figures_column, rows_per_task)
    target = None if output is None else _output(output, filesystem)
    factories = make_counter is not None or make_handlers is not None
    task = _Task(uuid.uuid4().hex, ray.put(policy if factories else prepared), {
        "column": column, "figures_column": figures_column, "make_counter": make_counter,
        "make_handlers": make_handlers}, target)
    remote = ray.remote(_run_part).options(num_cpus=num_cpus, num_returns=2, **options)
    refs: list[Any] = [remote.remote(task, part) for part in parts]
    rows = {ref[1]: part.rows for ref, part in zip(refs, parts, strict=True)}
    _wait(ray, [ref[1] for ref in refs], rows, progress)
    if target is not None:
        return ray.get([ref[1] for ref in refs])
    return ray.data.from_arrow_refs([ref[0] for ref in refs])


def _files(source: Any, filesystem: Any) -> list[tuple[Any, str, str]]:
    """The Parquet files of ``source``: (filesystem, path on it, the name the caller gave)."""
    from pyarrow import fs

    given = list(source) if isinstance(source, (list, tuple)) else [source]
    if not given:
        raise ValueError("source: expected a file, a folder or a list of them, got an empty list")
    files: list[tuple[Any, str, str]] = []
    for item in given:
        if not isinstance(item, (str, os.PathLike)):
            raise TypeError(f"source: expected a path or a URI (str or os.PathLike), got "
                            f"{type(item).__name__}")
        shown = os.fspath(item)
        where, path = _resolve(shown, filesystem)
        info = where.get_file_info(path)
        if info.type == fs.FileType.NotFound:
            raise FileNotFoundError(f"{shown}: no such file or folder")
        if info.type == fs.FileType.Directory:
            found = sorted(f.path for f in where.get_file_info(fs.FileSelector(
                path, recursive=True)) if f.type == fs.FileType.File and not _hidden(path, f.path))
            if not found:
                raise FileNotFoundError(f"{shown}: a folder without a file to read")
            files += [(where, f, f) for f in found]
        else:
            files.append((where, path, shown))
    return files


def _resolve(shown: str, filesystem: Any) -> tuple[Any, str]:
    from pyarrow import fs

    if filesystem is not None:
        return filesystem, shown
    if "://" in shown:
        return fs.FileSystem.from_uri(shown)
    return fs.LocalFileSystem(), os.path.abspath(shown)


def _hidden(root: str, path: str) -> bool:
    """A name under ``root`` starting with ``.`` or ``_`` (``_SUCCESS``, ``.part.crc``)."""
    rest = path[len(root):].strip("/").split("/")
    return any(name.startswith((".", "_")) for name in rest)


def _parts(files: list[tuple[Any, str, str]], prepared: Any, column: str,
           figures_column: str | None, rows_per_task: int) -> list[_Part]:
    """The files' row groups in parts of about ``rows_per_task`` rows, every file's schema
    checked as ``reduce_table`` checks a table (on no row)."""
    import pyarrow.parquet as pq

    parts: list[_Part] = []
    for where, path, shown in files:
        try:
            with where.open_input_file(path) as handle:
                meta = pq.ParquetFile(handle).metadata
                schema = meta.schema.to_arrow_schema()
        except (OSError, ValueError) as exc:  # pyarrow's ArrowInvalid is a ValueError
            raise type(exc)(f"{shown}: not a Parquet file that can be read ({exc})") from None
        try:
            reduce_table(schema.empty_table(), prepared, column=column)
        except ContextPlanError as exc:
            raise ContextPlanError([Issue(i.path, f"{i.message} (file {shown})", i.code)
                                    for i in exc.issues]) from None
        if figures_column is not None and figures_column in schema.names:
            raise ContextPlanError([Issue(figures_column, (
                f"{shown} already has a column {figures_column!r}: the output would have two "
                "(name another figures_column, or None)"), "column-exists")])
        groups: list[int] = []
        first = row = 0
        for k in range(meta.num_row_groups):
            groups.append(k)
            row += meta.row_group(k).num_rows
            if row - first >= rows_per_task or k == meta.num_row_groups - 1:
                parts.append(_Part(len(parts), where, path, tuple(groups), first, row - first))
                groups, first = [], row
    return parts


def _output(output: Any, filesystem: Any) -> tuple[Any, str]:
    """The output folder, made if missing; one that holds anything is refused."""
    from pyarrow import fs

    if not isinstance(output, (str, os.PathLike)):
        raise TypeError(f"output: expected a folder's path or URI (str or os.PathLike) or None, "
                        f"got {type(output).__name__}")
    shown = os.fspath(output)
    where, path = _resolve(shown, filesystem)
    info = where.get_file_info(path)
    if info.type == fs.FileType.Directory:
        if where.get_file_info(fs.FileSelector(path)):
            raise FileExistsError(f"{shown}: the output folder holds files already (give a "
                                  "missing or empty folder: nothing is overwritten)")
    elif info.type != fs.FileType.NotFound:
        raise FileExistsError(f"{shown}: expected a folder for the output, found a file")
    where.create_dir(path, recursive=True)
    return where, path


@dataclass(frozen=True)
class _Task:
    """What every task of one run shares: the run's key, the policy (an object reference), the
    options of :class:`ReduceBatches` and the output folder (or ``None``)."""

    key: str
    policy: Any
    options: dict[str, Any]
    output: tuple[Any, str] | None


def _run_part(task: _Task, part: _Part) -> tuple[Any, Any]:
    """One part read, reduced and written (or given back): (the table or ``None``, the path
    written or the rows reduced)."""
    import pyarrow.parquet as pq
    import ray

    def build() -> ReduceBatches:
        options = dict(task.options)
        policy = ray.get(task.policy)
        if options["make_counter"] is None and options["make_handlers"] is None:
            options.pop("make_counter")
            options.pop("make_handlers")
        return ReduceBatches(policy, **options)

    run = built_once(task.key, build)
    with part.filesystem.open_input_file(part.path) as handle:
        table = pq.ParquetFile(handle).read_row_groups(list(part.row_groups), use_threads=False)
    try:
        out = run(table)
    except ContextPlanError as exc:
        shifted = shift_rows(exc, run.column, part.first_row) if part.first_row else exc
        raise ContextPlanError([Issue(i.path, f"{i.message} (file {part.path})", i.code)
                                for i in shifted.issues]) from None
    if task.output is None:
        return out, table.num_rows
    where, folder = task.output
    name = f"{folder.rstrip('/')}/part-{part.index:05d}.parquet"
    pq.write_table(out, name, filesystem=where)
    return None, name


def _wait(ray: Any, refs: Sequence[Any], rows: Mapping[Any, int], progress: bool | None) -> None:
    """Every task waited for (the small second result of each), drawn as a progress bar of
    rows; the first task that failed raises its own error (not Ray's wrapper), and the others
    are cancelled."""
    draw = sys.stderr.isatty() if progress is None else bool(progress)
    pending = list(refs)
    with _Bar(draw, sum(rows.values())) as advance:
        while pending:
            done, pending = ray.wait(pending, num_returns=1)
            try:
                ray.get(done)
            except ray.exceptions.RayTaskError as exc:
                for ref in pending:
                    ray.cancel(ref)
                cause = exc.cause
                if isinstance(cause, (ContextPlanError, ContextPolicyError, OSError)):
                    raise cause from None
                raise
            advance(rows[done[0]])


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
