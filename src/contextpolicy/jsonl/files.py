"""Streaming JSONL in and out: plain or gzip files or standard input, line by line; output
written to a temporary file beside the target and renamed into place only on success, so a
failed or interrupted run never leaves half a file."""

from __future__ import annotations

import gzip
import mmap
import os
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import IO, BinaryIO, NamedTuple, cast

__all__ = [
    "AtomicOutput", "FileRange", "InputFile", "batched_lines", "map_range", "read_range",
]

GZIP_MAGIC = b"\x1f\x8b"
READ_BLOCK = 8 << 20
SCAN_BLOCK = 64 << 10  # read at a time, looking for the end of a line
MIN_RANGE = 64 << 10  # the smallest range handed out near the end of a file


class FileRange(NamedTuple):
    """Whole lines of a plain file: ``length`` bytes from ``offset``."""

    path: str
    offset: int
    length: int


def map_range(fileno: int, task: FileRange) -> tuple[mmap.mmap, FileRange]:
    """A read-only mapping of the pages that hold ``task`` (and no others), and where in the
    mapping the range lies."""
    start = task.offset - task.offset % mmap.ALLOCATIONGRANULARITY
    data = mmap.mmap(fileno, task.offset + task.length - start, offset=start,
                     access=mmap.ACCESS_READ)
    return data, FileRange(task.path, task.offset - start, task.length)


def read_range(data: mmap.mmap, task: FileRange) -> tuple[int, list[tuple[int, memoryview]]]:
    """``(lines in the range, [(line number within the range, line)])`` for the non-blank lines
    of a range of a memory-mapped file. The lines are views: nothing is copied."""
    view = memoryview(data)
    lines: list[tuple[int, memoryview]] = []
    start, end = task.offset, task.offset + task.length
    number = 0
    while start < end:
        stop = data.find(b"\n", start, end)
        if stop < 0:
            stop = end
        number += 1
        if stop > start and not _blank(view, start, stop):
            lines.append((number, view[start:stop]))
        start = stop + 1
    return number, lines


def _blank(view: memoryview, start: int, stop: int) -> bool:
    head = bytes(view[start:min(stop, start + 64)])
    return head.isspace() and not bytes(view[start:stop]).strip()


class InputFile:
    """A JSONL source: a path (``.gz`` or gzip magic detected), or ``-`` for standard input.

    ``size`` is the number of bytes to read when it is known (plain files), for progress;
    ``position`` the number of (decompressed) bytes handed out so far.
    """

    def __init__(self, path: str) -> None:
        self.name = "<stdin>" if path == "-" else path
        self.path = path
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
        """``(line number, raw line)`` for every non-blank line, numbered from 1.

        Read in large blocks and split: transcripts make long lines, which a line-by-line
        reader copies piecemeal.
        """
        number = 0
        rest = b""
        # read1 hands over what has arrived (a pipe streams); read waits for a full block.
        read = getattr(self._stream, "read1", self._stream.read)
        while True:
            block = read(READ_BLOCK)
            if not block:
                break
            parts = (rest + block if rest else block).split(b"\n")
            rest = parts.pop()
            for line in parts:
                number += 1
                self.position += len(line) + 1
                if line and not line.isspace():
                    yield number, line
        if rest:
            self.position += len(rest)
            if not rest.isspace():
                yield number + 1, rest

    @property
    def seekable(self) -> bool:
        """A plain file: workers can map it and read their own ranges."""
        return self.size is not None

    def ranges(self, max_bytes: int, *, workers: int = 1) -> Iterator[FileRange]:
        """Consecutive ranges of about ``max_bytes`` of whole lines. Workers map a range and
        parse its lines in place, so no line is copied or sent through a pipe; here only the
        line ends at the range boundaries are looked up.

        With several ``workers``, the ranges shrink toward the end of the file (none is more
        than a ``2 * workers``-th of what remains), so that the workers finish together rather
        than one waiting for another's last large range.
        """
        assert self.seekable
        size = self.size or 0
        start = 0
        while start < size:
            length = max_bytes
            if workers > 1:
                length = max(min(length, (size - start) // (2 * workers)), MIN_RANGE)
            stop = self._line_end(min(start + length, size) - 1, size)
            yield FileRange(self.path, start, stop - start)
            self.position = stop
            start = stop

    def _line_end(self, position: int, size: int) -> int:
        """Where the line that holds ``position`` ends (just past its newline, or the size)."""
        self._raw.seek(position)
        while position < size:
            block = self._raw.read(SCAN_BLOCK)
            if not block:
                break
            at = block.find(b"\n")
            if at >= 0:
                return position + at + 1
            position += len(block)
        return size

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
