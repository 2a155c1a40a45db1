"""Streaming JSONL in and out: plain or gzip files, pipes, FIFOs and standard input, line by
line; JSON read and written exactly (integers beyond 64 bits, any nesting orjson reads); output
written to a temporary file beside its target and renamed into place only on success, so a
failed or interrupted run never leaves half a file, or written through to what is not a regular
file (a device, a FIFO, standard output).

Every failure to read or write is a ``FileError`` whose message names the file and says what went
wrong. This module loads neither numpy nor the kernel: the command line reads its policies with
it before any command needs them.
"""

from __future__ import annotations

import contextlib
import gzip
import os
import re
import stat
import sys
import tempfile
import zlib
from collections.abc import Iterator
from typing import IO, Any, BinaryIO, NamedTuple, cast

import orjson

from .._tables import JSON_WHITESPACE, MAX_JSON_DEPTH
from .diagnose import BOM

__all__ = [
    "AtomicOutput", "FileError", "FileRange", "InputFile", "batched_lines", "conflicting_files",
    "dumps", "dumps_exactly", "loads_exactly", "open_range_file", "read_file_range",
    "read_range",
]

GZIP_MAGIC = b"\x1f\x8b"
READ_BLOCK = 8 << 20
SCAN_BLOCK = 64 << 10  # read at a time, looking for the end of a line
MIN_RANGE = 64 << 10  # the smallest range handed out near the end of a file
O_BINARY = getattr(os, "O_BINARY", 0)  # Windows


class FileError(Exception):
    """A file that cannot be read or written: ``str()`` names it and says what went wrong."""


# ---------------------------------------------------------------------------------------------
# JSON, exactly


# An integer literal that orjson reads as a float (beyond -2**63 .. 2**64 - 1) has 19 digits or
# more. So do some strings and long fractions: those are read again too, to the same values.
LONG_DIGITS = re.compile(rb"[0-9]{19}")


def loads_exactly(data: bytes | memoryview) -> Any:
    """The value of a JSON document read as orjson reads it (its errors are ``orjson``'s), but
    with every integer exact however large. A ``ValueError`` for a document with an integer
    beyond 64 bits nested deeper than this interpreter can read it again."""
    doc = orjson.loads(data)
    if LONG_DIGITS.search(data) is None:
        return doc
    return reread_exactly(data)


def reread_exactly(data: bytes | memoryview) -> Any:
    """A document orjson has read without error, read again by the standard library, which keeps
    integers beyond 64 bits exact (orjson makes them floats). Everything else reads to the same
    values: orjson has already refused what only the standard library accepts (NaN, Infinity,
    lone surrogates, invalid UTF-8)."""
    import json

    limit = sys.getrecursionlimit()
    # orjson reads arrays and objects nested up to MAX_JSON_DEPTH levels (the JSON depth
    # limit of the kernels), so the standard library gets the stack for as many.
    sys.setrecursionlimit(limit + MAX_JSON_DEPTH + 64)
    try:
        return json.loads(bytes(data))
    except RecursionError:
        raise ValueError(
            "a number of 19 digits or more nested too deeply to be read exactly"
        ) from None
    finally:
        sys.setrecursionlimit(limit)


def _exact_number(value: Any) -> Any:
    """What orjson does not write but JSON holds exactly: a decimal (as Arrow gives the values
    of a decimal column), written as its number, every digit as it is."""
    from decimal import Decimal

    if isinstance(value, Decimal) and value.is_finite():
        return orjson.Fragment(str(value).encode())
    raise TypeError(f"Type is not JSON serializable: {type(value).__name__}")


def dumps(value: Any) -> bytes:
    """``orjson.dumps(value)``, and the same bytes for what orjson reads but will not write:
    nesting deeper than 254 levels, integers beyond 64 bits; a decimal as its exact number."""
    try:
        return orjson.dumps(value, default=_exact_number)
    except TypeError:
        return dumps_exactly(value)


_END = object()


def dumps_exactly(value: Any) -> bytes:
    """Compact JSON of ``value``, byte for byte what ``orjson.dumps`` writes (every scalar is
    written by orjson itself), at any depth (no recursion), with integers of any size and
    decimals as their exact numbers.
    ``TypeError`` for what orjson cannot write (a key that is not a string, an unknown type)."""
    parts: list[bytes] = []
    # Open containers: [items, is an object, nothing written yet].
    stack: list[list[Any]] = []

    def start(item: Any) -> None:
        kind = type(item)
        if kind is dict or (kind is not list and isinstance(item, dict)):
            parts.append(b"{")
            stack.append([iter(item.items()), True, True])
        elif kind is list or kind is tuple:
            parts.append(b"[")
            stack.append([iter(item), False, True])
        elif kind is int:
            parts.append(str(item).encode())  # what orjson writes, and exact beyond 64 bits
        else:
            parts.append(orjson.dumps(item, default=_exact_number))

    start(value)
    while stack:
        top = stack[-1]
        item: Any = next(top[0], _END)
        if item is _END:
            parts.append(b"}" if top[1] else b"]")
            stack.pop()
            continue
        if top[2]:
            top[2] = False
        else:
            parts.append(b",")
        if top[1]:
            key, item = item
            if type(key) is not str:
                raise TypeError(f"Dict key must be str, not {type(key).__name__}")
            parts.append(orjson.dumps(key))
            parts.append(b":")
        start(item)
    return b"".join(parts)


# ---------------------------------------------------------------------------------------------
# input

# A blank line is empty or holds nothing but JSON whitespace (space, tab, carriage return; its
# line feed ends it), and is skipped (it still counts for the line numbers). Any other line is
# read as JSON, a vertical tab, a form feed or a non-breaking space alone among them: a bad line
# then, never a blank one. Found without copying the line: a byte that is not JSON whitespace.
NOT_BLANK = re.compile(b"[^" + re.escape(JSON_WHITESPACE) + b"]")


class FileRange(NamedTuple):
    """Whole lines of a plain file: ``length`` bytes from ``offset``; ``file`` is the file's
    ``(device, inode)`` when the ranges were cut (``None``: not checked), so that whoever opens
    ``path`` to read the range knows it is still that file."""

    path: str
    offset: int
    length: int
    file: tuple[int, int] | None = None


def open_range_file(task: FileRange) -> int:
    """A descriptor of the file of ``task``, checked to be the file its ranges were cut from (a
    file renamed over the input meanwhile would be read in place of it)."""
    try:
        fd = os.open(task.path, os.O_RDONLY | O_BINARY)
    except OSError as exc:
        raise FileError(f"{task.path}: cannot open ({exc.strerror or exc})") from None
    st = os.fstat(fd)
    if task.file is not None and (st.st_dev, st.st_ino) != task.file:
        os.close(fd)
        raise FileError(f"{task.path}: the file was replaced by another while it was read")
    return fd


def read_file_range(fileno: int, task: FileRange, buffer: bytearray) -> int:
    """Read the bytes of ``task`` from the open file ``fileno`` into the start of ``buffer``
    (at least ``task.length`` long), and return their number. A file that has shrunk since its
    ranges were cut is a ``FileError`` (never a crash: nothing is mapped, so a truncated file
    cannot pull pages from under the reader)."""
    end = task.offset + task.length
    view = memoryview(buffer)[:task.length]
    done = 0
    try:
        size = os.fstat(fileno).st_size
        if size >= end:
            while done < task.length:
                more = _read_into(fileno, view[done:], task.offset + done)
                if not more:
                    break
                done += more
    except OSError as exc:
        raise FileError(f"{task.path}: cannot read ({exc.strerror or exc})") from None
    finally:
        view.release()
    if done < task.length:
        if size >= end:  # it shrank between the size and the read
            size = task.offset + done
        raise FileError(
            f"{task.path}: the file shrank while it was read: it is now {size:,} bytes, and "
            f"bytes {task.offset:,} to {end:,} were still to be read"
        )
    return done


def _read_into(fileno: int, view: memoryview, offset: int) -> int:
    preadv = getattr(os, "preadv", None)
    if preadv is not None:
        return int(preadv(fileno, [view], offset))
    os.lseek(fileno, offset, os.SEEK_SET)
    readv = getattr(os, "readv", None)
    if readv is not None:
        return int(readv(fileno, [view]))
    data = os.read(fileno, len(view))  # Windows
    view[:len(data)] = data
    return len(data)


def read_range(
    data: bytes | bytearray, task: FileRange,
) -> tuple[int, list[tuple[int, memoryview]], list[int]]:
    """``(lines in the range, [(line number within the range, line)], [where each line
    starts])`` for the lines of a range held in ``data`` that are not blank (see
    ``NOT_BLANK``). The lines are views: nothing is copied."""
    view = memoryview(data)
    lines: list[tuple[int, memoryview]] = []
    starts: list[int] = []
    start, end = task.offset, task.offset + task.length
    number = 0
    while start < end:
        stop = data.find(b"\n", start, end)
        if stop < 0:
            stop = end
        number += 1
        if NOT_BLANK.search(data, start, stop):
            lines.append((number, view[start:stop]))
            starts.append(start)
        start = stop + 1
    return number, lines, starts


class _Prefixed:
    """A stream whose first bytes were read already (to look for the gzip magic)."""

    def __init__(self, head: bytes, stream: Any) -> None:
        self.head = head
        self.stream = stream

    def read(self, n: int = -1) -> bytes:
        if self.head:
            head, self.head = self.head, b""
            if n is None or n < 0:
                return head + self.stream.read()
            if len(head) >= n:
                head, self.head = head[:n], head[n:]
                return head
            return head  # a short read, as a pipe gives
        return self.stream.read(n)

    def read1(self, n: int = -1) -> bytes:
        if self.head:
            return self.read(n)
        return self.stream.read1(n)

    def tell(self) -> int:
        return self.stream.tell()

    def close(self) -> None:
        self.stream.close()


class InputFile:
    """A JSONL source: a path (gzip found by its magic bytes; a ``.gz`` name must hold gzip
    data), or ``-`` for standard input. A regular file can be read in ranges, in place; anything
    else (a pipe, a FIFO, ``/dev/fd/N`` of a process substitution, a device) is a stream.

    ``size`` is the number of bytes to read when it is known (plain files), for progress;
    ``position`` the number of (decompressed) bytes handed out so far.
    """

    def __init__(self, path: str) -> None:
        self.name = "<stdin>" if path == "-" else path
        self.path = path
        self.position = 0
        self.size: int | None = None
        # Bytes before the first line: a UTF-8 byte order mark, which the ranges leave out.
        self.skip = 0
        self._file: tuple[int, int] | None = None
        if path == "-":
            if sys.stdin is None:
                raise FileError("<stdin>: standard input is closed")
            self._raw: BinaryIO = sys.stdin.buffer
            self._stream: IO[bytes] = self._raw
            return
        try:
            self._raw = open(path, "rb")
            mode = os.fstat(self._raw.fileno()).st_mode
        except OSError as exc:
            raise FileError(f"{path}: cannot open ({exc.strerror or exc})") from None
        if stat.S_ISDIR(mode):  # Windows opens some folders
            self._raw.close()
            raise FileError(f"{path}: is a folder; expected a JSONL file")
        # A regular file named by a descriptor (/dev/stdin, /dev/fd/N) is read as a stream:
        # a worker process that opened the name would find its own descriptor there.
        regular = stat.S_ISREG(mode) and _descriptor(path) is None
        try:
            if regular:
                head = self._raw.peek(2)[:2]  # type: ignore[attr-defined]
                source: Any = self._raw
            else:
                head = self._head()
                source = _Prefixed(head, self._raw)
        except OSError as exc:
            self._raw.close()
            raise FileError(f"{path}: cannot read ({exc.strerror or exc})") from None
        if head == GZIP_MAGIC:
            self._stream = cast("IO[bytes]", gzip.GzipFile(fileobj=source, mode="rb"))
        elif path.endswith(".gz") and head:
            self._raw.close()
            raise FileError(
                f"{path}: expected gzip data (the name ends in .gz), but the file does not "
                "start with the gzip magic bytes"
            )
        else:
            self._stream = source
            if regular:
                st = os.fstat(self._raw.fileno())
                self.size = st.st_size
                self._file = (st.st_dev, st.st_ino)
                try:
                    starts_with_bom = self._raw.peek(len(BOM))[:len(BOM)] == BOM  # type: ignore[attr-defined]
                except OSError as exc:
                    self._raw.close()
                    raise FileError(f"{path}: cannot read ({exc.strerror or exc})") from None
                if starts_with_bom:  # ranges begin after it (lines() drops it as it reads)
                    self.skip = len(BOM)

    def _head(self) -> bytes:
        """The first two bytes of a stream (fewer at its end), however a pipe hands them over."""
        head = b""
        while len(head) < 2:
            more = self._raw.read1(2 - len(head))  # type: ignore[attr-defined]
            if not more:
                break
            head += more
        return head

    def _read(self, read: Any) -> bytes:
        try:
            return cast(bytes, read(READ_BLOCK))
        except EOFError:
            raise FileError(
                f"{self.name}: the gzip data ends before its end marker: the file is truncated"
            ) from None
        except (gzip.BadGzipFile, zlib.error) as exc:
            raise FileError(f"{self.name}: invalid gzip data ({exc})") from None
        except OSError as exc:
            raise FileError(f"{self.name}: cannot read ({exc.strerror or exc})") from None

    def lines(self) -> Iterator[tuple[int, bytes]]:
        """``(line number, raw line)`` for every line that is not blank (``NOT_BLANK``),
        numbered from 1.

        Read in large blocks and split: transcripts make long lines, which a line-by-line
        reader copies piecemeal. The blocks of a line longer than a block are kept as they come
        and joined once, when its end arrives: every byte is copied a fixed number of times,
        however long the line (a pipe hands over 64 KB at a time).
        """
        number = 0
        pending: list[bytes] = []  # the blocks of a line whose end has not arrived yet
        for block in self._blocks():
            if block.find(b"\n") < 0:
                pending.append(block)
                continue
            parts = block.split(b"\n")
            if pending:
                pending.append(parts[0])
                parts[0] = b"".join(pending)
                pending = []
            tail = parts.pop()
            if tail:
                pending.append(tail)
            for line in parts:
                number += 1
                self.position += len(line) + 1
                if NOT_BLANK.search(line):
                    yield number, line
        if pending:
            rest = b"".join(pending)
            self.position += len(rest)
            if NOT_BLANK.search(rest):
                yield number + 1, rest

    def _blocks(self) -> Iterator[bytes]:
        """The (decompressed) bytes as they come, without a UTF-8 byte order mark at the start
        (however few bytes the first reads of a pipe hand over)."""
        # read1 hands over what has arrived (a pipe streams); read waits for a full block.
        read = getattr(self._stream, "read1", self._stream.read)
        head: bytes | None = b""  # the first bytes, until they tell whether there is a BOM
        while True:
            block = self._read(read)
            if head is not None:
                ended = not block
                head += block
                if not ended and len(head) < len(BOM) and BOM.startswith(head):
                    continue
                if head.startswith(BOM):
                    self.position += len(BOM)
                    head = head[len(BOM):]
                block, head = head, None
                if not block and not ended:
                    continue
            if not block:
                return
            yield block

    @property
    def seekable(self) -> bool:
        """A plain regular file: workers can read their own ranges of it."""
        return self.size is not None

    def ranges(self, max_bytes: int, *, workers: int = 1) -> Iterator[FileRange]:
        """Consecutive ranges of about ``max_bytes`` of whole lines. Workers read a range and
        parse its lines in place, so no line is sent through a pipe; here only the line ends at
        the range boundaries are looked up.

        With several ``workers``, the ranges shrink toward the end of the file (none is more
        than a ``2 * workers``-th of what remains), so that the workers finish together rather
        than one waiting for another's last large range.
        """
        assert self.seekable
        size = self.size or 0
        start = self.position = self.skip
        while start < size:
            length = max_bytes
            if workers > 1:
                length = max(min(length, (size - start) // (2 * workers)), MIN_RANGE)
            stop = self._line_end(min(start + length, size) - 1, size)
            yield FileRange(self.path, start, stop - start, self._file)
            self.position = stop
            start = stop

    def _line_end(self, position: int, size: int) -> int:
        """Where the line that holds ``position`` ends (just past its newline, or the size)."""
        try:
            self._raw.seek(position)
            while position < size:
                block = self._raw.read(SCAN_BLOCK)
                if not block:
                    break
                at = block.find(b"\n")
                if at >= 0:
                    return position + at + 1
                position += len(block)
        except OSError as exc:
            raise FileError(f"{self.name}: cannot read ({exc.strerror or exc})") from None
        return size

    def close(self) -> None:
        with contextlib.suppress(Exception):  # a truncated gzip stream complains again
            if self._stream is not self._raw:
                self._stream.close()
        if self._raw is not getattr(sys.stdin, "buffer", None):
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


# ---------------------------------------------------------------------------------------------
# output

STANDARD_NAMES = {0: "standard input", 1: "standard output", 2: "standard error"}
_DESCRIPTOR_PATH = re.compile(r"^/(?:dev/fd|proc/(?:self|thread-self|\d+)/fd)/(\d+)$")
_STANDARD_PATHS = {"/dev/stdin": 0, "/dev/stdout": 1, "/dev/stderr": 2}


def standard_stream_closed(fd: int) -> bool:
    """Whether standard input, output or error (``fd`` 0, 1, 2) was closed when Python started
    (it then sets ``sys.stdin``, ``sys.stdout`` or ``sys.stderr`` to ``None``)."""
    return (sys.stdin, sys.stdout, sys.stderr)[fd] is None if fd in (0, 1, 2) else False


def _descriptor(path: str) -> int | None:
    """The open file descriptor a path names (``/dev/stdout``, ``/dev/fd/N``,
    ``/proc/self/fd/N``), following the symbolic links that lead to one; ``None`` otherwise."""
    if os.name != "posix":
        return None
    here = os.path.abspath(path)
    for _ in range(40):
        if here in _STANDARD_PATHS:
            return _STANDARD_PATHS[here]
        match = _DESCRIPTOR_PATH.match(here)
        if match and (not here.startswith("/proc/") or here.split("/")[2] in
                      ("self", "thread-self", str(os.getpid()))):
            return int(match.group(1))
        try:
            link = os.readlink(here)
        except OSError:
            return None
        here = os.path.normpath(os.path.join(os.path.dirname(here), link))
    return None


class AtomicOutput:
    """Where a run writes: a regular file (or one to be made) through a temporary file beside it,
    renamed onto it by ``commit()``; standard output for ``None`` or ``-``; and, written through
    as they are, what is not a regular file: a device, a FIFO, ``/dev/stdout``, ``/dev/fd/N``.
    A symbolic link to a file is kept: the file it leads to is replaced.

    Creating one checks the target (before any work), entering it opens it, leaving it without
    ``commit()`` (an error, a signal) removes the temporary file. Every failure is a
    ``FileError`` naming the target.
    """

    def __init__(self, path: str | None, *, discard: bool = False) -> None:
        self.given = path
        self.discard = discard
        self.mode: int | None = None  # of the file being replaced
        self._tmp: str | None = None
        self._opened: int | None = None  # a descriptor of ours to close
        self.committed = False
        self.stream: BinaryIO
        self.target: str | None = None  # the regular file written, where there is one
        self.fd: int | None = None  # the descriptor a path names
        if discard:
            self.kind, self.name = "discard", "nowhere"
        elif path in (None, "-"):
            self.kind, self.name, self.fd = "stdout", "standard output", 1
            if sys.stdout is None:
                raise FileError(
                    "standard output is closed: there is nowhere to write the output "
                    "(give -o FILE)"
                )
        else:
            self.name = str(path)
            self._check(str(path))

    def _check(self, path: str) -> None:
        fd = _descriptor(path)
        if fd is not None:
            if standard_stream_closed(fd):
                raise FileError(f"{path}: cannot write: {STANDARD_NAMES[fd]} is closed")
            self.kind, self.fd = "descriptor", fd
            return
        real = os.path.realpath(path)
        try:
            st: os.stat_result | None = os.stat(real)
        except FileNotFoundError:
            st = None
        except OSError as exc:
            raise FileError(f"{path}: cannot write ({exc.strerror or exc})") from None
        if st is None:
            folder = os.path.dirname(real) or "."
            if not os.path.isdir(folder):
                raise FileError(f"{path}: cannot write: the folder {folder} does not exist")
            self.kind, self.target = "file", real
        elif stat.S_ISDIR(st.st_mode):
            raise FileError(f"{path}: is a folder; expected a file to write")
        elif stat.S_ISREG(st.st_mode):
            if not os.access(real, os.W_OK):
                raise FileError(f"{path}: cannot write (Permission denied)")
            self.kind, self.target, self.mode = "file", real, stat.S_IMODE(st.st_mode)
        else:  # a device, a FIFO, a socket: written through, never replaced
            self.kind = "device"

    @property
    def path(self) -> str | None:
        """What was named (``None`` for standard output or nowhere)."""
        return None if self.kind in ("stdout", "discard") else self.name

    @property
    def streaming(self) -> bool:
        """Written as it goes (standard output, a device, a FIFO): a reader sees every line
        when it is flushed, and an interrupted run leaves what was written so far."""
        return self.kind in ("stdout", "descriptor", "device")

    def identity(self) -> tuple[str | None, tuple[int, int] | None, int]:
        """``(resolved path, (device, inode), mode)`` of the target, as far as they exist, for
        ``conflicting_files``."""
        if self.kind == "discard":
            return None, None, 0
        if self.fd is not None:
            try:
                st = os.fstat(self.fd)
            except OSError:
                return None, None, 0
            return None, (st.st_dev, st.st_ino), st.st_mode
        return _identity(self.name)

    def __enter__(self) -> AtomicOutput:
        try:
            self._open()
        except OSError as exc:
            raise FileError(f"{self.name}: cannot write ({exc.strerror or exc})") from None
        return self

    def _open(self) -> None:
        if self.kind == "discard":
            self.stream = _Null()  # type: ignore[assignment]
        elif self.kind == "stdout":
            assert sys.stdout is not None
            self.stream = sys.stdout.buffer
        elif self.kind == "descriptor":
            assert self.fd is not None
            self._opened = os.dup(self.fd)
            self.stream = os.fdopen(self._opened, "wb", buffering=1 << 16, closefd=False)
        elif self.kind == "device":
            # Opened as it is: a FIFO waits here for its reader; nothing is truncated or made.
            flags = os.O_WRONLY | getattr(os, "O_NOCTTY", 0) | O_BINARY
            self._opened = os.open(self.name, flags)
            self.stream = os.fdopen(self._opened, "wb", buffering=1 << 16, closefd=False)
        else:
            assert self.target is not None
            folder, name = os.path.split(self.target)
            fd, self._tmp = tempfile.mkstemp(dir=folder or ".", prefix=f".{name}.", suffix=".tmp")
            self.stream = os.fdopen(fd, "wb", buffering=1 << 18)

    def _failed(self, exc: OSError) -> FileError:
        return FileError(f"{self.name}: cannot write ({exc.strerror or exc})")

    def write(self, data: bytes) -> None:
        try:
            self.stream.write(data)
        except BrokenPipeError:
            raise  # the reader has gone: the caller decides how quietly to stop
        except OSError as exc:
            raise self._failed(exc) from None

    def flush(self) -> None:
        try:
            self.stream.flush()
        except BrokenPipeError:
            raise
        except OSError as exc:
            raise self._failed(exc) from None

    def commit(self) -> None:
        """Everything was written: put the file in place (or flush the stream)."""
        if self.kind == "discard":
            self.committed = True
            return
        self.flush()
        if self._tmp is not None:
            assert self.target is not None
            try:
                self.stream.close()
                if self.mode is None:
                    # mkstemp makes the file private: give it the permissions a new file gets.
                    umask = os.umask(0)
                    os.umask(umask)
                    os.chmod(self._tmp, 0o666 & ~umask)
                else:  # those of the file it replaces
                    os.chmod(self._tmp, self.mode)
                if os.path.isdir(self.target):
                    raise IsADirectoryError(21, "a folder has been made there since the run began")
                os.replace(self._tmp, self.target)
            except OSError as exc:
                raise self._failed(exc) from None
            self._tmp = None
        self._close()
        self.committed = True

    def _close(self) -> None:
        if self._opened is not None:
            fd, self._opened = self._opened, None
            try:
                self.stream.close()
            finally:
                os.close(fd)

    def __exit__(self, *exc: object) -> None:
        if self._tmp is not None:
            try:
                with contextlib.suppress(OSError):  # a full disk fails the last flush too
                    self.stream.close()
            finally:
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(self._tmp)
                self._tmp = None
        if self._opened is not None:
            with contextlib.suppress(OSError):
                self._close()


def _identity(path: str) -> tuple[str | None, tuple[int, int] | None, int]:
    real = os.path.realpath(path)
    try:
        st = os.stat(real)
    except OSError:
        return real, None, 0
    return real, (st.st_dev, st.st_ino), st.st_mode


def input_identity(path: str) -> tuple[str | None, tuple[int, int] | None, int]:
    """``(resolved path, (device, inode), mode)`` of a file read (``-``: standard input)."""
    if path == "-":
        try:
            st = os.fstat(0)
        except OSError:
            return None, None, 0
        return None, (st.st_dev, st.st_ino), st.st_mode
    return _identity(path)


def conflicting_files(
    a: tuple[str | None, tuple[int, int] | None, int],
    b: tuple[str | None, tuple[int, int] | None, int],
) -> bool:
    """Whether two identities name one file that two writers (or a writer and a reader) would
    damage: the same inode (hard links, symbolic links, ``/dev/stdout``) or the same resolved
    path. A character device (a terminal, ``/dev/null``) takes any number of them."""
    same = (a[1] is not None and a[1] == b[1]) or (a[0] is not None and a[0] == b[0])
    return same and not stat.S_ISCHR(a[2] or b[2])


class _Null:
    """A sink for output nobody asked to keep."""

    def write(self, data: bytes) -> int:
        return len(data)

    def flush(self) -> None:
        pass

    def close(self) -> None:
        pass
