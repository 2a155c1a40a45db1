"""Streaming JSONL in and out: plain or gzip files or standard input, line by line; output
written to a temporary file beside the target and renamed into place only on success, so a
failed or interrupted run never leaves half a file."""

from __future__ import annotations

import gzip
import os
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import IO, BinaryIO, cast

__all__ = ["AtomicOutput", "InputFile", "batched_lines"]

GZIP_MAGIC = b"\x1f\x8b"


class InputFile:
    """A JSONL source: a path (``.gz`` or gzip magic detected), or ``-`` for standard input.

    ``size`` is the number of bytes to read when it is known (plain files), for progress;
    ``position`` the number of (decompressed) bytes handed out so far.
    """

    def __init__(self, path: str) -> None:
        self.name = "<stdin>" if path == "-" else path
        self.position = 0
        self.size: int | None = None
        if path == "-":
            self._raw: BinaryIO = sys.stdin.buffer
            self._stream: IO[bytes] = self._raw
            return
        try:
            self._raw = open(path, "rb")
        except OSError as exc:
            raise FileNotFoundError(f"{path}: cannot open ({exc.strerror})") from None
        if path.endswith(".gz") or self._raw.peek(2)[:2] == GZIP_MAGIC:  # type: ignore[attr-defined]
            self._stream = cast("IO[bytes]", gzip.GzipFile(fileobj=self._raw, mode="rb"))
        else:
            self._stream = self._raw
            self.size = os.fstat(self._raw.fileno()).st_size

    @property
    def compressed_position(self) -> int | None:
        """Bytes of the file itself consumed so far (for progress on gzip input)."""
        try:
            return self._raw.tell()
        except (OSError, ValueError):
            return None

    def lines(self) -> Iterator[tuple[int, bytes]]:
        """``(line number, raw line)`` for every non-blank line, numbered from 1."""
        for number, line in enumerate(self._stream, start=1):
            self.position += len(line)
            if line.strip():
                yield number, line

    def close(self) -> None:
        if self._stream is not self._raw:
            self._stream.close()
        if self._raw is not sys.stdin.buffer:
            self._raw.close()

    def __enter__(self) -> InputFile:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def batched_lines(
    lines: Iterator[tuple[int, bytes]], max_lines: int, max_bytes: int
) -> Iterator[list[tuple[int, bytes]]]:
    """Group lines into batches of at most ``max_lines`` lines or about ``max_bytes`` bytes."""
    batch: list[tuple[int, bytes]] = []
    size = 0
    for item in lines:
        batch.append(item)
        size += len(item[1])
        if len(batch) >= max_lines or size >= max_bytes:
            yield batch
            batch, size = [], 0
    if batch:
        yield batch


class AtomicOutput:
    """Write to ``path`` through a temporary file in the same folder, renamed on ``commit()``.

    ``path`` of ``None`` or ``-`` writes to standard output (nothing to rename). Leaving the
    context without ``commit()`` (an error, Ctrl-C) removes the temporary file.
    """

    def __init__(self, path: str | None, *, discard: bool = False) -> None:
        self.path = None if path in (None, "-") else Path(path)  # type: ignore[arg-type]
        self.discard = discard
        self._tmp: str | None = None
        self.stream: BinaryIO

    def __enter__(self) -> AtomicOutput:
        if self.discard:
            self.stream = _Null()  # type: ignore[assignment]
        elif self.path is None:
            self.stream = sys.stdout.buffer
        else:
            folder = self.path.resolve().parent
            if not folder.is_dir():
                raise FileNotFoundError(f"{self.path}: folder {folder} does not exist")
            fd, self._tmp = tempfile.mkstemp(
                dir=folder, prefix=f".{self.path.name}.", suffix=".tmp"
            )
            self.stream = os.fdopen(fd, "wb", buffering=1 << 20)
        return self

    def write(self, data: bytes) -> None:
        self.stream.write(data)

    def commit(self) -> None:
        if self._tmp is not None:
            self.stream.close()
            # mkstemp makes the file private; give it the permissions a new file gets here.
            umask = os.umask(0)
            os.umask(umask)
            os.chmod(self._tmp, 0o666 & ~umask)
            os.replace(self._tmp, self.path)  # type: ignore[arg-type]
            self._tmp = None
        elif not self.discard:
            self.stream.flush()

    def __exit__(self, *exc: object) -> None:
        if self._tmp is not None:
            try:
                self.stream.close()
            finally:
                os.unlink(self._tmp)
                self._tmp = None


class _Null:
    """A sink for output nobody asked to keep."""

    def write(self, data: bytes) -> int:
        return len(data)

    def flush(self) -> None:
        pass

    def close(self) -> None:
        pass
