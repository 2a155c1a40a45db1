"""Where Parquet files are: the files a source names and the folder an output goes to, checked
before any work starts (the engines that read files themselves use it: ``ray_parquet``).

A source is a file, a folder or a list of them, local or a URI pyarrow opens (``s3://``,
``gs://``, ...), or paths on a given ``pyarrow.fs.FileSystem``. A folder is read as Spark and
pyarrow read one: its files, recursively, but for names starting with ``.`` or ``_``; the
``key=value`` folders on the way (Hive partitions) are kept with each file. Every path is
absolute before it leaves the driver, so a worker whose current folder differs reads and writes
what the driver checked; a file is named to the caller as the caller named its source (a URI
keeps its scheme, host and query).
"""

from __future__ import annotations

import os
import posixpath
from dataclasses import dataclass, replace
from typing import Any
from urllib.parse import quote, unquote

__all__ = ["HIVE_NULL", "Location", "ParquetFile", "files_of", "footers", "output_folder"]

_READERS = 16  # footers read at once (an object store answers each in tens of milliseconds)

HIVE_NULL = "__HIVE_DEFAULT_PARTITION__"  # a partition folder's null value (as pyarrow reads it)


@dataclass(frozen=True)
class Location:
    """A folder or file: ``path`` on ``filesystem``, and how to name what lies below it to the
    caller (``name(relative)``: the caller's own spelling, a URI's parts kept)."""

    filesystem: Any
    path: str
    given: str
    uri: bool

    def name(self, relative: str = "") -> str:
        if not relative:
            return self.given
        if self.uri:
            base, mark, query = self.given.partition("?")
            return f"{base.rstrip('/')}/{quote(relative)}{mark}{query}"
        return f"{self.path.rstrip('/')}/{relative}"


@dataclass(frozen=True)
class ParquetFile:
    """One file to read: ``path`` on ``filesystem``; ``shown``, the name the caller knows it by;
    ``folder``, the folders between the source folder given and the file (``""`` for a file
    given itself); ``partitions``, their ``key=value`` pairs (a value ``None`` for Hive's
    null)."""

    filesystem: Any
    path: str
    shown: str
    folder: str = ""
    partitions: tuple[tuple[str, str | None], ...] = ()


def files_of(source: Any, filesystem: Any = None) -> tuple[list[ParquetFile], list[Location]]:
    """The files of ``source``, each once, in the order given (a folder's sorted; a file also
    found in a folder given keeps that folder's partitions); and the folders given, which an
    output must not be inside."""
    from pyarrow import fs

    given = list(source) if isinstance(source, (list, tuple)) else [source]
    if not given:
        raise ValueError("source: expected a file, a folder or a list of them, got an empty list")
    files: list[ParquetFile] = []
    folders: list[Location] = []
    seen: dict[tuple[str, str], int] = {}
    for item in given:
        at = _resolve(_named("source", item), filesystem)
        info = at.filesystem.get_file_info(at.path)
        if info.type == fs.FileType.NotFound:
            raise FileNotFoundError(f"{at.given}: no such file or folder")
        found: list[ParquetFile]
        if info.type == fs.FileType.Directory:
            folders.append(at)
            listed = sorted(f.path for f in at.filesystem.get_file_info(
                fs.FileSelector(at.path, recursive=True)) if f.type == fs.FileType.File)
            found = [f for f in (_in_folder(at, name) for name in listed) if f is not None]
            if not found:
                raise FileNotFoundError(f"{at.given}: a folder without a file to read")
        else:
            found = [ParquetFile(at.filesystem, at.path, at.given)]
        for f in found:
            key = (f.filesystem.type_name, _normal(f.filesystem, f.path))
            if key not in seen:  # a file named twice (itself and in its folder) is read once
                seen[key] = len(files)
                files.append(f)
            elif f.folder and not files[seen[key]].folder:
                files[seen[key]] = replace(f, shown=files[seen[key]].shown)
    return files, folders


def output_folder(output: Any, filesystem: Any, sources: list[Location]) -> Location:
    """The output folder: missing or empty, and not inside a source folder (a later read of the
    source would read the output back)."""
    from pyarrow import fs

    at = _resolve(_named("output", output), filesystem)
    mine = _normal(at.filesystem, at.path)
    for source in sources:
        theirs = _normal(source.filesystem, source.path)
        if source.filesystem.type_name == at.filesystem.type_name and (
                theirs == "" or mine == theirs or mine.startswith(theirs.rstrip("/") + "/")):
            raise ValueError(f"{at.given}: the output folder is inside a source folder "
                             f"({source.given}): a later read of the source would read the "
                             "output too")
    info = at.filesystem.get_file_info(at.path)
    if info.type == fs.FileType.Directory:
        held = at.filesystem.get_file_info(fs.FileSelector(at.path))
        if held:
            raise FileExistsError(f"{at.given}: the output folder holds files already "
                                  f"({posixpath.basename(held[0].path)}, ...): give a missing "
                                  "or empty folder (nothing is overwritten)")
    elif info.type != fs.FileType.NotFound:
        raise FileExistsError(f"{at.given}: expected a folder for the output, found a file")
    return at


def _named(what: str, item: Any) -> str:
    if not isinstance(item, (str, os.PathLike)):
        raise TypeError(f"{what}: expected a path or a URI (str or os.PathLike), got "
                        f"{type(item).__name__}")
    name = os.fspath(item)
    if not isinstance(name, str):
        raise TypeError(f"{what}: expected a path as text, got bytes {name!r}")
    return name


def _resolve(given: str, filesystem: Any) -> Location:
    from pyarrow import fs

    if filesystem is not None:
        if not isinstance(filesystem, fs.FileSystem):
            raise TypeError(f"filesystem: expected a pyarrow.fs.FileSystem or None, got "
                            f"{type(filesystem).__name__}")
        if isinstance(filesystem, fs.LocalFileSystem):
            return Location(filesystem, os.path.abspath(given), os.path.abspath(given), False)
        if isinstance(filesystem, fs.SubTreeFileSystem) and isinstance(
                filesystem.base_fs, fs.LocalFileSystem) and not os.path.isabs(
                filesystem.base_path):
            raise ValueError(f"filesystem: a local SubTreeFileSystem of a relative folder "
                             f"({filesystem.base_path!r}) means another folder to every worker "
                             "whose current folder differs: give an absolute one")
        return Location(filesystem, given, given, False)
    if "://" in given:
        where, path = fs.FileSystem.from_uri(given)
        return Location(where, path, given, True)
    return Location(fs.LocalFileSystem(), os.path.abspath(given), os.path.abspath(given), False)


def _normal(filesystem: Any, path: str) -> str:
    """``path`` as one spelling: a local one with its links resolved, another normalized."""
    from pyarrow import fs

    if isinstance(filesystem, fs.LocalFileSystem):
        return os.path.realpath(path)
    cleaned = posixpath.normpath("/" + path.strip()).lstrip("/")
    return "" if cleaned == "." else cleaned


def _in_folder(root: Location, path: str) -> ParquetFile | None:
    """A file found under ``root``: ``None`` when a name on the way starts with ``.`` or ``_``
    (``_SUCCESS``, ``.part.crc``, a writer's temporary folder)."""
    top = [p for p in root.path.split("/") if p]
    names = [p for p in path.split("/") if p][len(top):]
    if not names or any(name.startswith((".", "_")) for name in names):
        return None
    folders = names[:-1]
    partitions = tuple((unquote(k), None if unquote(v) == HIVE_NULL else unquote(v))
                       for k, _, v in (name.partition("=") for name in folders if "=" in name)
                       if k)
    return ParquetFile(root.filesystem, path, root.name("/".join(names)), "/".join(folders),
                       partitions)


def footers(files: list[ParquetFile]) -> list[Any]:
    """Each file's Parquet metadata, in order, read by up to 16 threads at once; the first
    file in order that cannot be read raises, naming it."""
    from concurrent.futures import ThreadPoolExecutor

    if len(files) <= 1:
        return [_footer(f) for f in files]
    with ThreadPoolExecutor(min(_READERS, len(files))) as pool:
        return list(pool.map(_footer, files))


def _footer(f: ParquetFile) -> Any:
    import pyarrow.parquet as pq

    try:
        with f.filesystem.open_input_file(f.path) as handle:
            return pq.ParquetFile(handle).metadata
    except (OSError, ValueError) as exc:  # pyarrow's ArrowInvalid is a ValueError
        raise type(exc)(f"{f.shown}: not a Parquet file that can be read ({exc})") from None
