"""Arrow arrays read where they lie: the buffers, offsets and validity of strings and lists, code
points and JSON lengths counted by the kernel a whole array at a time, sums per row. pyarrow is
imported when these are used."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from .. import _kernel

# How deep the functions here follow an Arrow type by recursion. A deeper type (a tool input
# nested deeply) is left to Arrow's own functions and to the values, which the kernel measures
# without recursion: what a table can hold is handled whatever the interpreter's stack allows.
TYPE_DEPTH = 64


def require_pyarrow() -> Any:
    try:
        import pyarrow as pa
    except ImportError as exc:  # pragma: no cover - the extra is installed in the test suite
        raise ImportError(
            "contextpolicy.batch needs pyarrow: pip install 'contextpolicy[arrow]'"
        ) from exc
    return pa



def _is_string(t: Any) -> bool:
    pa = require_pyarrow()
    return bool(pa.types.is_string(t) or pa.types.is_large_string(t)
                or pa.types.is_string_view(t))


def is_list_type(t: Any) -> bool:
    pa = require_pyarrow()
    return bool(pa.types.is_list(t) or pa.types.is_large_list(t))


def as_strings(arr: Any) -> Any:
    """``arr`` as a string or large_string array (views and dictionaries decoded)."""
    pa = require_pyarrow()
    if pa.types.is_dictionary(arr.type):
        arr = decoded(arr)
    if pa.types.is_string_view(arr.type):
        arr = arr.cast(pa.large_string())
    return arr


def decoded(arr: Any) -> Any:
    """A dictionary array's values, in order (a null index gives a null)."""
    pa = require_pyarrow()
    if pa.types.is_string_view(arr.type.value_type):
        # Arrow's take has no kernel for string_view (what Polars exports a Categorical or an
        # Enum as): its dictionary, a few values, is cast first, and then taken.
        return arr.dictionary.cast(pa.large_string()).take(arr.indices)
    return arr.dictionary_decode()


def is_text_type(t: Any) -> bool:
    pa = require_pyarrow()
    return _is_string(t) or (pa.types.is_dictionary(t) and _is_string(t.value_type))


def string_buffers(arr: Any) -> tuple[Any, Any]:
    """(data, offsets) of a string or large_string array, offsets for its own slice."""
    _validity, offsets, data = arr.buffers()
    dtype = np.int64 if require_pyarrow().types.is_large_string(arr.type) else np.int32
    offs = np.frombuffer(offsets, dtype=dtype)[arr.offset: arr.offset + len(arr) + 1]
    return (data if data is not None else b""), offs


class Counted:
    """The string arrays whose strings the kernel has read while it counted them (it checks
    UTF-8 as it counts), so that the check of the whole column does not read them again. An
    array is known by its buffers and its slice, and where the count skipped nulls, by its
    validity too; each is held until the column is checked, so no address is used again."""

    def __init__(self) -> None:
        self._held: dict[tuple[int, ...], Any] = {}

    @staticmethod
    def _key(arr: Any, validity: bool) -> tuple[int, ...]:
        bits, offsets, data = arr.buffers()[:3]
        return (data.address if data is not None else 0, offsets.address, arr.offset, len(arr),
                (bits.address if bits is not None else 0) if validity else -1)

    def add(self, arr: Any, *, nulls_skipped: bool) -> None:
        types = require_pyarrow().types
        if types.is_string(arr.type) or types.is_large_string(arr.type):
            self._held[self._key(arr, nulls_skipped)] = arr

    def __call__(self, arr: Any) -> bool:
        """Whether the strings of ``arr`` that are not null were read already."""
        pa = require_pyarrow()
        if not (pa.types.is_string(arr.type) or pa.types.is_large_string(arr.type)):
            return False
        return self._key(arr, False) in self._held or self._key(arr, True) in self._held


def _counts(count: Callable[[Any, Any], Any], arr: Any, counted: Counted | None) -> Any:
    """``count(data, offsets)`` of a string or large_string array: the kernel's figure of each
    string. A null holds no string: bytes that are not UTF-8 under a null (Arrow leaves them
    as a writer left them) are not counted, and no error."""
    data, offs = string_buffers(arr)
    try:
        out = count(data, offs)
    except _kernel.Utf8Error as exc:
        if not (arr.null_count and null_mask(arr)[exc.index]):
            raise
        out = count(*string_buffers(arr.fill_null("")))
        if counted is not None:
            counted.add(arr, nulls_skipped=True)
        return out
    if counted is not None:
        counted.add(arr, nulls_skipped=False)
    return out


def code_point_lengths(arr: Any, counted: Counted | None = None) -> Any:
    """Code points of each string of ``arr`` (0 where null), straight from its UTF-8."""
    arr = as_strings(arr)
    counts = _counts(_kernel.utf8_lengths, arr, counted)
    if arr.null_count:
        counts[null_mask(arr)] = 0
    return counts


def null_mask(arr: Any) -> Any:
    """Where ``arr`` is null, as a numpy bool array (from its validity bitmap)."""
    n = len(arr)
    validity = arr.buffers()[0] if arr.null_count else None
    if validity is None:
        if arr.null_count == n and n:  # a null-typed array has no bitmap
            return np.ones(n, dtype=bool)
        return np.zeros(n, dtype=bool)
    bits = np.unpackbits(np.frombuffer(validity, dtype=np.uint8), bitorder="little")
    return ~bits[arr.offset: arr.offset + n].astype(bool)


def as_int64(arr: Any) -> Any:
    """An integer array without nulls as a numpy array (its data buffer, no copy)."""
    dtype = np.dtype(arr.type.to_pandas_dtype())
    return np.frombuffer(arr.buffers()[1], dtype=dtype)[arr.offset: arr.offset + len(arr)]


def offsets_of(arr: Any) -> Any:
    """List offsets of ``arr`` as int64, starting at 0, and its values sliced to match."""
    offs = as_int64(arr.offsets).astype(np.int64)
    base = int(offs[0])
    values = arr.values.slice(base, int(offs[-1]) - base)
    if base:
        offs -= base
    return offs, values


def field_of(struct: Any, name: str) -> Any:
    """The child ``name`` of a struct array, null where the struct is (``None`` without it)."""
    import pyarrow.compute as pc

    at = struct.type.get_field_index(name)
    if at < 0:
        return None
    # Without null structs the child is as it is (no validity to combine, nothing copied).
    return struct.field(at) if struct.null_count == 0 else pc.struct_field(struct, name)


def rows_of(per_message: Any, offs: Any) -> Any:
    """Rows holding at least one message where ``per_message`` is set."""
    if not per_message.any():
        return np.zeros(len(offs) - 1, dtype=bool)
    counts = np.concatenate([[0], np.cumsum(per_message, dtype=np.int64)])
    return counts[offs[1:]] > counts[offs[:-1]]


def row_sums(values: Any, offs: Any) -> Any:
    """Per list of ``offs``, the sum of its ``values``."""
    csum = np.concatenate([[0], np.cumsum(values, dtype=np.int64)])
    return csum[offs[1:]] - csum[offs[:-1]]


_POWERS = np.array([10**k for k in range(1, 20)], dtype=np.uint64)


def _digits(arr: Any) -> Any:
    """Chars of each integer of ``arr`` as JSON writes it (nulls: any figure, set apart)."""
    values = arr.fill_null(0).to_numpy(zero_copy_only=False)
    if values.dtype.kind == "i":
        negative = values < 0
        wide = values.astype(np.int64)
        magnitude = np.where(negative, (-(wide + 1)).astype(np.uint64) + np.uint64(1),
                             wide.astype(np.uint64))
    else:
        negative = np.zeros(len(values), dtype=bool)
        magnitude = values.astype(np.uint64)
    return 1 + negative + np.searchsorted(_POWERS, magnitude, side="right")


def json_lengths(arr: Any, depth: int = 0) -> Any | None:
    """Chars of the compact JSON of each value of ``arr`` as the object path writes it (the
    value Arrow gives back, ``null`` for a null), from the buffers: strings, integers, booleans
    and nulls, structs and lists of them. ``None`` for any other type (floats, whose shortest
    form only Python writes, dates, binaries, maps, ...) and for a type nested deeper than
    ``TYPE_DEPTH``: the caller asks the values."""
    pa = require_pyarrow()
    t = arr.type
    n = len(arr)
    if depth > TYPE_DEPTH:
        return None
    if pa.types.is_null(t):
        return np.full(n, 4, dtype=np.int64)
    if pa.types.is_boolean(t):
        out = 5 - arr.fill_null(True).to_numpy(zero_copy_only=False).astype(np.int64)
    elif pa.types.is_integer(t):
        out = _digits(arr)
    elif is_text_type(t):
        # Decoded first: a dictionary's own values may be null where its indices are not.
        arr = as_strings(arr)
        out = _counts(_kernel.json_string_lengths, arr, None)
    elif pa.types.is_struct(t):
        names = [f.name for f in t]
        if len(set(names)) != len(names):  # a dict keeps one of each: the values say which
            return None
        out = np.full(n, 2 + max(len(names) - 1, 0), dtype=np.int64)
        for name in names:
            # A null struct's children are null (Arrow may leave them holding anything: a
            # dictionary index into an empty dictionary, say).
            child = json_lengths(field_of(arr, name), depth + 1)
            if child is None:
                return None
            out += child + _kernel.compact_json_length(name) + 1
    elif is_list_type(t):
        offs, values = offsets_of(arr)
        child = json_lengths(values, depth + 1)
        if child is None:
            return None
        count = np.diff(offs)
        out = 2 + np.maximum(count - 1, 0) + row_sums(child, offs)
    else:
        return None
    out = np.asarray(out, dtype=np.int64)
    if arr.null_count:
        out[null_mask(arr)] = 4
    return out



def pa_concat(arrays: list[Any]) -> Any:
    return arrays[0] if len(arrays) == 1 else require_pyarrow().concat_arrays(arrays)

