"""Where Parquet files are: the files a source names and the folder an output goes to, checked
before any work starts (the engines that read files themselves use it: ``ray_parquet``).

A source is a file, a folder or a list of them, local or a URI pyarrow opens (``s3://``,
``gs://``, ...), or paths on a given ``pyarrow.fs.FileSystem``. A folder is read as Spark and
pyarrow read one: its files, recursively, but for names starting with ``.`` or ``_``; the
``key=value`` folders on the way (Hive partitions) are kept with each file. Every path is
absolute before it leaves the driver, so a worker whose current folder differs reads and writes
what the driver checked.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any
from urllib.parse import unquote

__all__ = ["ParquetFile", "files_of", "output_folder"]


@dataclass(frozen=True)
class ParquetFile:
    """One file to read: ``path`` on ``filesystem``; ``shown``, the name the caller knows it by
    (a URI keeps its scheme); ``folder``, the folders between the source folder given and the
    file (``""`` for a file given itself); ``partitions``, their ``key=value`` pairs."""

    filesystem: Any
    path: str
    shown: str
    folder: str = ""
    partitions: tuple[tuple[str, str], ...] = ()


def files_of(source: Any, filesystem: Any = None,
             ) -> tuple[list[ParquetFile], list[tuple[Any, str]]]:
    """The files of ``source``, each once, in the order given (a folder's sorted); and the
    folders given, as (filesystem, path), which an output must not be inside."""
    from pyarrow import fs

    given = list(source) if isinstance(source, (list, tuple)) else [source]
    if not given:
        raise ValueError("source: expected a file, a folder or a list of them, got an empty list")
    files: list[ParquetFile] = []
    folders: list[tuple[Any, str]] = []
    seen: set[tuple[str, str]] = set()
    for item in given:
        shown = _named("source", item)
        where, path, scheme = _resolve(shown, filesystem)
        info = where.get_file_info(path)
        if info.type == fs.FileType.NotFound:
            raise FileNotFoundError(f"{shown}: no such file or folder")
        found: list[ParquetFile]
        if info.type == fs.FileType.Directory:
            folders.append((where, path))
            listed = sorted(f.path for f in where.get_file_info(
                fs.FileSelector(path, recursive=True)) if f.type == fs.FileType.File)
            found = [f for f in (_in_folder(where, path, name, scheme) for name in listed)
                     if f is not None]
            if not found:
                raise FileNotFoundError(f"{shown}: a folder without a file to read")
        else:
            found = [ParquetFile(where, path, scheme + path if scheme else shown)]
        for f in found:
            key = (where.type_name, f.path)
            if key not in seen:  # a file named twice (itself and in its folder) is read once
                seen.add(key)
                files.append(f)
    return files, folders


def output_folder(output: Any, filesystem: Any, sources: list[tuple[Any, str]],
                  ) -> tuple[Any, str, str]:
    """The output folder as (filesystem, path, the name the caller knows it by): missing or
    empty, and not inside a source folder (a later run would read the output back)."""
    from pyarrow import fs

    shown = _named("output", output)
    where, path, scheme = _resolve(shown, filesystem)
    for source_fs, folder in sources:
        if source_fs.type_name == where.type_name and (
                path.rstrip("/") + "/").startswith(folder.rstrip("/") + "/"):
            raise ValueError(f"{shown}: the output folder is inside a source folder "
                             f"({scheme + folder if scheme else folder}): a later read of the "
                             "source would read the output too")
    info = where.get_file_info(path)
    if info.type == fs.FileType.Directory:
        if where.get_file_info(fs.FileSelector(path)):
            raise FileExistsError(f"{shown}: the output folder holds files already (give a "
                                  "missing or empty folder: nothing is overwritten)")
    elif info.type != fs.FileType.NotFound:
        raise FileExistsError(f"{shown}: expected a folder for the output, found a file")
    return where, path, scheme


def _named(what: str, item: Any) -> str:
    if not isinstance(item, (str, os.PathLike)):
        raise TypeError(f"{what}: expected a path or a URI (str or os.PathLike), got "
                        f"{type(item).__name__}")
    name = os.fspath(item)
    if not isinstance(name, str):
        raise TypeError(f"{what}: expected a path as text, got bytes {name!r}")
    return name


def _resolve(shown: str, filesystem: Any) -> tuple[Any, str, str]:
    """(filesystem, absolute path on it, the URI scheme to name its files by, or ``""``)."""
    from pyarrow import fs

    if filesystem is not None:
        if not isinstance(filesystem, fs.FileSystem):
            raise TypeError(f"filesystem: expected a pyarrow.fs.FileSystem or None, got "
                            f"{type(filesystem).__name__}")
        if isinstance(filesystem, fs.LocalFileSystem):
            return filesystem, os.path.abspath(shown), ""
        if isinstance(filesystem, fs.SubTreeFileSystem) and isinstance(
                filesystem.base_fs, fs.LocalFileSystem) and not os.path.isabs(
                filesystem.base_path):
            raise ValueError(f"filesystem: a local SubTreeFileSystem of a relative folder "
                             f"({filesystem.base_path!r}) means another folder to every worker "
                             "whose current folder differs: give an absolute one")
        return filesystem, shown, ""
    if "://" in shown:
        where, path = fs.FileSystem.from_uri(shown)
        return where, path, shown.split("://", 1)[0] + "://"
    return fs.LocalFileSystem(), os.path.abspath(shown), ""


def _in_folder(where: Any, root: str, path: str, scheme: str) -> ParquetFile | None:
    """A file found under ``root``: ``None`` when a name on the way starts with ``.`` or ``_``
    (``_SUCCESS``, ``.part.crc``, a writer's temporary folder)."""
    top = [p for p in root.split("/") if p]
    names = [p for p in path.split("/") if p][len(top):]
    if not names or any(name.startswith((".", "_")) for name in names):
        return None
    folders = names[:-1]
    partitions = tuple((unquote(k), unquote(v)) for k, _, v in (
        name.partition("=") for name in folders if "=" in name) if k)
    return ParquetFile(where, path, scheme + path if scheme else path, "/".join(folders),
                       partitions)
