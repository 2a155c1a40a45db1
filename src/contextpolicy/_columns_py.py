"""Arrow-layout buffers (the pure twin of ``csrc/_columns.pxi``): offsets, UTF-8 lengths and
validation, role codes, gathering byte ranges, the memory pool, and trim cuts of many lists.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import numpy.typing as npt

from ._c_args import Int64Array, c_array, c_int
from ._json_py import COMPACT_JSON
from ._kernel_names import Utf8Error
from ._pairing_py import group_offsets, trim_cut
from ._tables import (
    GROUP_MESSAGE,
    GROUP_USER_TURN,
    ROLE_CODES,
)


def _check_offsets(offsets: npt.NDArray[Any], limit: int, what: str) -> None:
    if offsets.ndim != 1 or len(offsets) == 0:
        raise ValueError(f"{what}: expected a 1-d offsets array with at least one entry")
    if offsets.dtype not in (np.int32, np.int64):
        raise TypeError(f"{what}: expected int32 or int64 offsets, got {offsets.dtype}")
    # (Compared, not subtracted: a difference of int32 or int64 offsets can wrap.)
    if int(offsets[0]) < 0 or int(offsets[-1]) > limit or bool(
            np.any(offsets[1:] < offsets[:-1])):
        raise ValueError(f"{what}: offsets must be non-decreasing and within 0..{limit}")


def _utf8_error(row: int, pos: int) -> Utf8Error:
    return Utf8Error(f"invalid UTF-8 in string {row} at byte {pos}", row, pos)


def _string_counts(data: Any, offsets: Any, what: str,
                   count: Callable[[str], int]) -> Int64Array:
    # ``count`` of each string, decoded strictly (the error names the string and the byte).
    buf = np.frombuffer(data, dtype=np.uint8)
    offsets = np.array(np.asarray(offsets), copy=True)  # read once: checked as it is used
    _check_offsets(offsets, len(buf), what)
    raw = memoryview(buf.tobytes()) if not buf.flags.c_contiguous else memoryview(buf.data)
    bounds = offsets.tolist()
    out = np.zeros(len(bounds) - 1, dtype=np.int64)
    for r in range(len(bounds) - 1):
        start, end = bounds[r], bounds[r + 1]
        try:
            out[r] = count(str(raw[start:end], "utf-8"))
        except UnicodeDecodeError as exc:
            raise _utf8_error(r, start + exc.start) from None
    return out


def utf8_lengths(data: Any, offsets: npt.NDArray[Any]) -> Int64Array:
    """Code points of each string of an Arrow string array (UTF-8 ``data`` + ``offsets``).

    Invalid UTF-8 raises ``ValueError`` naming the row and the absolute offset of the first
    byte of the invalid sequence. (The compiled kernel creates no Python string; the twin lets
    Python's strict decoder validate, which reports the same byte.)
    """
    return _string_counts(data, offsets, "utf8_lengths", len)


def json_string_lengths(data: Any, offsets: npt.NDArray[Any]) -> Int64Array:
    """Chars of each string of an Arrow string array as compact JSON writes it: its code points,
    the two quotes and what escaping adds (``json.dumps(s, ensure_ascii=False)``)."""
    return _string_counts(data, offsets, "json_string_lengths",
                          lambda text: len(COMPACT_JSON.encode(text)))


def _positions(values: Any, what: str, name: str) -> list[int]:
    values = np.asarray(values)
    if values.ndim != 1:
        raise ValueError(f"{what}: expected a 1-d array of {name}")
    if values.dtype.kind not in "iu":
        raise TypeError(f"{what}: expected integer {name}, got {values.dtype}")
    if values.dtype.kind == "u" and values.size and int(values.max()) >= 1 << 63:
        raise ValueError(f"{what}: {name} must be below 2**63")
    return [int(v) for v in values.astype(np.int64).tolist()]


class pooled_arrays:
    """``with pooled_arrays():`` on the compiled kernel, numpy's large arrays created in the
    section come from a pool that keeps freed blocks for the next one; here numpy's own
    allocator serves them (the results are the same)."""

    def __init__(self) -> None:
        self._entered = False

    def __enter__(self) -> pooled_arrays:
        if self._entered:
            raise RuntimeError("pooled_arrays: this section is already entered")
        self._entered = True
        return self

    def __exit__(self, *exc: object) -> None:
        self._entered = False


def pool_stats() -> dict[str, Any]:
    """The pool's state (the twin has none)."""
    return {"active": False, "blocks": 0, "bytes": 0, "hits": 0, "misses": 0, "limit": 0}


def release_pool() -> None:
    """Give back every block the pool holds (the twin holds none)."""


def gather_bytes(src: Any, starts: Any, stops: Any, out: Any) -> None:
    """Copy ``src[starts[i]:stops[i]]`` for each ``i``, one after the other, into ``out`` (a
    writable buffer of exactly their total size)."""
    buf = np.frombuffer(src, dtype=np.uint8)
    dst = np.frombuffer(out, dtype=np.uint8)
    if not dst.flags.writeable:
        raise ValueError("gather_bytes: out must be a writable buffer")
    a = _positions(starts, "gather_bytes", "starts")
    b = _positions(stops, "gather_bytes", "stops")
    if len(a) != len(b):
        raise ValueError(f"gather_bytes: {len(a)} starts but {len(b)} stops")
    limit, size, total = len(buf), len(dst), 0
    for i, (start, stop) in enumerate(zip(a, b, strict=True)):
        if start < 0 or start > stop or stop > limit:
            raise ValueError(f"gather_bytes: range {i} is {start}..{stop}, expected "
                             f"0 <= start <= stop <= {limit}")
        total += stop - start
        if total > size:
            break
    if total != size:
        raise ValueError(f"gather_bytes: the ranges hold {total} bytes, out holds {size}")
    at = 0
    for start, stop in zip(a, b, strict=True):
        dst[at: at + stop - start] = buf[start:stop]
        at += stop - start


def _offsets_array(offsets: Any, entries: int, what: str, name: str) -> npt.NDArray[Any]:
    offsets = np.asarray(offsets)
    if offsets.ndim != 1:
        raise ValueError(f"{what}: expected a 1-d array of {name}")
    if offsets.dtype not in (np.int32, np.int64):
        raise TypeError(f"{what}: expected int32 or int64 {name}, got {offsets.dtype}")
    if len(offsets) < 1 or (entries >= 0 and len(offsets) != entries):
        want = "at least 1" if entries < 0 else str(entries)
        raise ValueError(f"{what}: expected {want} {name}, got {len(offsets)}")
    return np.array(offsets, copy=True)


def _ranges_checked(starts: Any, lengths: Any, limit: int,
                    what: str) -> tuple[list[int], list[int], int]:
    s = _positions(starts, what, "starts")
    n = _positions(lengths, what, "lengths")
    if len(s) != len(n):
        raise ValueError(f"{what}: {len(s)} starts but {len(n)} lengths")
    total = 0
    for j, (a, length) in enumerate(zip(s, n, strict=True)):
        if a < 0 or length < 0 or a > limit - length:
            raise ValueError(f"{what}: range {j} is {a}+{length}, expected within 0..{limit}")
        if length > 2**63 - 1 - total:
            raise ValueError(f"{what}: the ranges hold more than 2**63 elements")
        total += length
    return s, n, total


def gather_offsets(offsets: Any, starts: Any,
                   lengths: Any) -> tuple[npt.NDArray[Any], Int64Array, Int64Array]:
    """The offsets of the elements in the ranges ``[starts[j], starts[j] + lengths[j])`` of a
    list or string array (``offsets``: int32 or int64), laid end to end from 0 in the same
    dtype; and what each range spans of the child or data: ``(offsets, lo, hi)``."""
    o = _offsets_array(offsets, -1, "gather_offsets", "offsets")
    s, n, total = _ranges_checked(starts, lengths, len(o) - 1, "gather_offsets")
    limit = 2**63 - 1 if o.dtype == np.int64 else 2**31 - 1
    out = np.zeros(total + 1, dtype=np.int64)
    lo = np.zeros(len(s), dtype=np.int64)
    hi = np.zeros(len(s), dtype=np.int64)
    at, base = 0, 0
    for j, (a, length) in enumerate(zip(s, n, strict=True)):
        seg = [int(v) for v in o[a: a + length + 1].tolist()]
        first = seg[0]
        if first < 0:
            raise ValueError(f"gather_offsets: the offsets of range {j} are negative or "
                             f"decrease")
        prev = first
        for cur in seg[1:]:
            if cur < prev:
                raise ValueError(f"gather_offsets: the offsets of range {j} are negative or "
                                 f"decrease")
            if cur - first > limit - base:
                raise ValueError(f"gather_offsets: the gathered values need more than "
                                 f"offsets of {o.dtype} can address")
            prev = cur
        out[at + 1: at + length + 1] = np.asarray(seg[1:], dtype=np.int64) - first + base
        at += length
        lo[j], hi[j] = first, prev
        base += prev - first
    return out.astype(o.dtype), lo, hi


def gather_bits(bitmap: Any, bit_offset: Any, starts: Any,
                lengths: Any) -> tuple[npt.NDArray[np.uint8], int]:
    """The bits of elements in the ranges ``[starts[j], starts[j] + lengths[j])`` of a bitmap
    (least significant bit first, element 0 at bit ``bit_offset``), packed from bit 0: ``(bytes
    as a uint8 array, how many bits are set)``."""
    bit_offset = c_int(bit_offset, "Py_ssize_t")
    buf = np.frombuffer(bitmap, dtype=np.uint8)
    if bit_offset < 0:
        raise ValueError(f"gather_bits: bit_offset must be >= 0, got {bit_offset}")
    limit = len(buf) * 8 - bit_offset
    s, n, total = _ranges_checked(starts, lengths, max(limit, 0), "gather_bits")
    if total == 0:
        return np.zeros(0, dtype=np.uint8), 0
    bits = np.unpackbits(buf, bitorder="little")
    picked = np.concatenate([bits[bit_offset + a: bit_offset + a + length]
                             for a, length in zip(s, n, strict=True)])
    return np.packbits(picked, bitorder="little"), int(np.count_nonzero(picked))


def _flags_array(values: Any, n: int, what: str, name: str) -> npt.NDArray[np.bool_]:
    values = np.asarray(values)
    if values.ndim != 1 or values.dtype != np.bool_:
        raise TypeError(f"{what}: expected a 1-d bool array of {name}")
    if len(values) != n:
        raise ValueError(f"{what}: expected {n} {name}, got {len(values)}")
    return np.array(values, copy=True)


def string_codes(data: Any, offsets: Any, names: Any, nulls: Any = None) -> npt.NDArray[np.int8]:
    """Per string of an Arrow string array, the index in ``names`` (a tuple of bytes) of the
    one it equals, else -1 (and -1 where ``nulls`` is set)."""
    buf = np.frombuffer(data, dtype=np.uint8)
    o = _offsets_array(offsets, -1, "string_codes", "offsets")
    n = len(o) - 1
    if type(names) is not tuple or not 0 < len(names) <= 127 or any(
            type(x) is not bytes for x in names):
        raise TypeError("string_codes: names must be a tuple of 1 to 127 bytes")
    nul = _flags_array(nulls, n, "string_codes", "nulls") if nulls is not None else None
    raw = buf.tobytes()
    table: dict[bytes, int] = {}
    for k, name in enumerate(names):
        table.setdefault(name, k)
    out = np.full(n, -1, dtype=np.int8)
    bounds = [int(v) for v in o.tolist()]
    for r in range(n):
        a, b = bounds[r], bounds[r + 1]
        if a < 0 or a > b or b > len(raw):
            raise ValueError(f"string_codes: offsets must be non-decreasing and within "
                             f"0..{len(raw)}")
        if nul is not None and nul[r]:
            continue
        out[r] = table.get(raw[a:b], -1)
    return out


def utf8_validate(data: Any, offsets: npt.NDArray[Any], nulls: Any = None) -> None:
    """Check that every string of an Arrow string array (UTF-8 ``data`` + ``offsets``) that is
    not null (``nulls``: a bool array, or ``None``) is UTF-8; ``Utf8Error`` names the first
    that is not and the absolute offset of the first byte of its invalid sequence.

    The bytes of all strings are checked at once, and each string's first byte: UTF-8 cut where
    no continuation byte begins is UTF-8 in every piece. Only when that fails are the strings
    checked one by one, for the first at fault (a null's bytes are not a string: bytes that are
    not UTF-8 there are no fault)."""
    buf = np.frombuffer(data, dtype=np.uint8)
    offsets = np.array(np.asarray(offsets), copy=True)  # read once: checked as it is used
    if offsets.ndim != 1 or len(offsets) == 0:
        raise ValueError("utf8_validate: expected a 1-d offsets array with at least one entry")
    if offsets.dtype not in (np.int32, np.int64):
        raise TypeError(f"utf8_validate: expected int32 or int64 offsets, got {offsets.dtype}")
    n = len(offsets) - 1
    skip = _flags_array(nulls, n, "utf8_validate", "nulls") if nulls is not None else None
    _check_offsets(offsets, len(buf), "utf8_validate")
    raw = memoryview(buf.tobytes()) if not buf.flags.c_contiguous else memoryview(buf.data)
    lo, hi = int(offsets[0]), int(offsets[-1])
    try:
        str(raw[lo:hi], "utf-8")
    except UnicodeDecodeError:
        pass
    else:
        starts = offsets[1:-1]
        starts = starts[starts < hi]
        if not np.any((buf[starts] & 0xC0) == 0x80):
            return
    bounds = offsets.tolist()
    for r in range(n):
        start, end = bounds[r], bounds[r + 1]
        if start == end or (skip is not None and skip[r]):
            continue
        try:
            str(raw[start:end], "utf-8")
        except UnicodeDecodeError as exc:
            raise _utf8_error(r, start + exc.start) from None


def role_codes_utf8(data: Any, offsets: npt.NDArray[Any]) -> npt.NDArray[np.int8]:
    """Role code of each string of an Arrow string array, without creating Python strings."""
    buf = np.frombuffer(data, dtype=np.uint8)
    offsets = np.array(np.asarray(offsets), copy=True)  # read once: checked as it is used
    _check_offsets(offsets, len(buf), "role_codes_utf8")
    raw = buf.tobytes()
    table = {name.encode(): code for name, code in ROLE_CODES.items()}
    n = len(offsets) - 1
    out = np.zeros(n, dtype=np.int8)
    for r in range(n):
        out[r] = table.get(raw[int(offsets[r]) : int(offsets[r + 1])], 0)
    return out


def _check_chars(list_offsets: npt.NDArray[Any], chars: Int64Array) -> None:
    """Chars below zero, or a row's chars adding up past 64 bits: a ValueError (a group sum
    that wrapped would cut in the wrong place)."""
    if not len(chars):
        return
    if int(chars.min()) < 0:
        raise ValueError("chars must be >= 0")
    if int(chars.max()) * len(chars) <= 2**63 - 1:  # no row can reach 64 bits
        return
    bounds = list_offsets.tolist()
    for r in range(len(bounds) - 1):
        if sum(chars[bounds[r]:bounds[r + 1]].tolist()) > 2**63 - 1:
            raise ValueError(f"the chars of row {r} add up to more than 64 bits hold")


def trim_cut_many(
    list_offsets: npt.NDArray[Any],
    flags: npt.NDArray[np.uint8],
    chars: Int64Array,
    keep_groups: int,
    target_chars: int,
    grouping: int = GROUP_USER_TURN,
) -> tuple[Int64Array, Int64Array, Int64Array, Int64Array]:
    """Group and cut many conversations at once.

    ``list_offsets`` (Arrow list offsets) delimit each conversation's messages in ``flags`` and
    ``chars``. Returns, per conversation: absolute index of the first kept message, groups
    before, groups kept, chars kept.
    """
    # The compiled kernel's conversions, in its order.
    keep_groups, target_chars = c_int(keep_groups), c_int(target_chars)
    grouping = c_int(grouping, "int")
    flags = c_array(flags, np.uint8)
    chars = c_array(chars, np.int64)
    list_offsets = np.array(np.asarray(list_offsets), copy=True)  # read once
    _check_offsets(list_offsets, len(flags), "trim_cut_many")
    if len(chars) != len(flags):
        raise ValueError(f"flags and chars differ in length ({len(flags)} != {len(chars)})")
    if keep_groups < 0 or target_chars < 0:
        raise ValueError("keep_groups and target_chars must be >= 0")
    _check_chars(list_offsets, chars)
    if grouping not in (GROUP_USER_TURN, GROUP_MESSAGE):  # (even with no conversation)
        raise ValueError(f"unknown grouping code {grouping}")
    n = len(list_offsets) - 1
    first = np.zeros(n, dtype=np.int64)
    before = np.zeros(n, dtype=np.int64)
    after = np.zeros(n, dtype=np.int64)
    kept_chars = np.zeros(n, dtype=np.int64)
    for r in range(n):
        a, b = int(list_offsets[r]), int(list_offsets[r + 1])
        offsets, group_chars = group_offsets(flags[a:b], chars[a:b], grouping)
        g = trim_cut(group_chars, keep_groups, target_chars)
        ngroups = len(group_chars)
        first[r] = a + int(offsets[g])
        before[r] = ngroups
        after[r] = ngroups - g
        kept_chars[r] = int(group_chars[g:].sum())
    return first, before, after, kept_chars
