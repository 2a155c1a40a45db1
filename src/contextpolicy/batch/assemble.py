"""The output built from the input's own buffers: the kept messages of every row gathered by ranges
(offset arithmetic and one ``take``), and the messages the object path made new written into
arrays of the column's type."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from .. import _kernel
from ..errors import ContextPlanError
from .arrow import TYPE_DEPTH, is_list_type, require_pyarrow
from .exact import first_difference
from .rows import parse_json_text


def expand_ranges(starts: Any, lengths: Any) -> Any:
    """Concatenated ``range(start, start + length)`` for each pair, vectorised."""
    lengths = np.asarray(lengths, dtype=np.int64)
    total = int(lengths.sum())
    if total == 0:
        return np.zeros(0, dtype=np.int64)
    ends = np.cumsum(lengths)
    shift = np.repeat(np.asarray(starts, dtype=np.int64) - (ends - lengths), lengths)
    return np.arange(total, dtype=np.int64) + shift


def _map_type(t: Any, leaf: Callable[[Any], Any]) -> Any:
    """``t`` with ``leaf`` applied to every type it holds (through structs and lists), with a
    stack of its own: a type may nest as deeply as a tool input."""
    pa = require_pyarrow()

    def children(node: Any) -> list[Any]:
        if pa.types.is_struct(node):
            return [f.type for f in node]
        if pa.types.is_list(node) or pa.types.is_large_list(node):
            return [node.value_type]
        return []

    done: list[Any] = []  # the mapped types, each waiting for its parent
    stack: list[tuple[Any, bool]] = [(t, False)]
    while stack:
        node, expanded = stack.pop()
        if not expanded:
            node = leaf(node)
            inner = children(node)
            stack.append((node, True))
            stack += [(child, False) for child in reversed(inner)]
            continue
        n = len(children(node))
        mapped, done[len(done) - n:] = done[len(done) - n:], []
        if pa.types.is_struct(node):
            node = pa.struct([f.with_type(m) for f, m in zip(node, mapped, strict=True)])
        elif pa.types.is_list(node):
            node = pa.list_(node.value_field.with_type(mapped[0]))
        elif pa.types.is_large_list(node):
            node = pa.large_list(node.value_field.with_type(mapped[0]))
        done.append(node)
    return done[0]


def _storage(t: Any) -> Any:
    """An extension type (Arrow's JSON type, say) as its storage type."""
    while isinstance(t, require_pyarrow().BaseExtensionType):
        t = t.storage_type
    return t


def _plain(t: Any) -> Any:
    """A view type as the large type ``take`` supports."""
    pa = require_pyarrow()
    if pa.types.is_string_view(t):
        return pa.large_string()
    if pa.types.is_binary_view(t):
        return pa.large_binary()
    return t


def storage_type_of(t: Any) -> Any:
    """``t`` with every extension type replaced by its storage."""
    return _map_type(t, _storage)


def new_values(struct_type: Any, messages: list[dict[str, Any]], json_fields: set[str],
                column: str) -> Any:
    """New messages (a handler's) as Arrow values of the column's message type."""
    pa = require_pyarrow()
    names = {f.name for f in struct_type}
    rows = []
    for message in messages:
        extra = set(message) - names
        if extra:
            raise ContextPlanError(
                f"a new message has fields the column's messages do not: {sorted(extra)}",
                path=column, code="schema-mismatch",
            )
        if json_fields:
            from ..jsonl.files import dumps  # orjson's bytes, deep nesting too

            message = {k: (dumps(v).decode() if k in json_fields and v is not None else v)
                       for k, v in message.items()}
        rows.append(message)
    storage = storage_type_of(struct_type)
    try:
        built = pa.array(rows, type=storage)
    except (pa.ArrowInvalid, pa.ArrowTypeError, OverflowError) as exc:
        raise ContextPlanError(
            f"a new message does not fit the column's message type ({exc})", path=column,
            code="schema-mismatch",
        ) from None
    except UnicodeEncodeError as exc:  # a lone surrogate: no UTF-8 holds it
        raise ContextPlanError(
            f"a new message holds text that is not UTF-8 ({exc.reason}: "
            f"{exc.object[exc.start:exc.end]!r})", path=column, code="invalid-utf8",
        ) from None
    _check_held(messages, built, json_fields, column)
    return built.cast(struct_type) if storage != struct_type else built


def _check_held(messages: list[dict[str, Any]], built: Any, json_fields: set[str],
                column: str) -> None:
    """The new messages, as the column holds them, are the messages given: every value reads
    back as it was (Arrow would cut a fraction put into an integer field, say), and they carry
    the chars they were measured with (an emptied tool input in a struct reads back with a null
    for every field, which would make the figures say what the table does not)."""
    back = built.to_pylist()
    if json_fields:
        for message in back:
            for key in json_fields & message.keys():
                if isinstance(message[key], str):
                    message[key] = parse_json_text(message[key], column)
    for i, (given, held) in enumerate(zip(messages, back, strict=True)):
        found = first_difference(given, held)
        if found is not None:
            where, was, would_be = found
            raise ContextPlanError(
                f"a new message does not fit the column's message type as it is: new message "
                f"{i}, {where}: {was!r} would be held as {would_be!r}", path=column,
                code="schema-mismatch",
            )
    measured = _kernel.measure_messages(messages)[1]
    held = _kernel.measure_messages(back)[1]
    for i in np.flatnonzero(measured != held).tolist()[:1]:
        raise ContextPlanError(
            f"a new message does not fit the column's message type as it is: it holds "
            f"{int(measured[i])} chars, and {int(held[i])} as the column would hold it "
            f"(Arrow structs cannot hold an empty tool input, say)", path=column,
            code="schema-mismatch",
        )


def take_values(values: Any, indices: Any) -> Any:
    pa = require_pyarrow()
    try:
        return values.take(indices)
    except pa.ArrowNotImplementedError:
        plain = _map_type(values.type, _plain)
        if plain == values.type:
            raise
        return values.cast(plain).take(indices).cast(values.type)


def joined_runs(starts: Any, lengths: Any) -> tuple[Any, Any]:
    """The ranges ``[start, start + length)`` without the empty ones, each run of adjacent
    ranges joined into one: (starts, lengths)."""
    keep = lengths > 0
    s, n = starts[keep], lengths[keep]
    if len(s) < 2:
        return s, n
    ends = s + n
    first = np.flatnonzero(np.concatenate([[True], s[1:] != ends[:-1]]))
    last = np.concatenate([first[1:] - 1, [len(s) - 1]])
    return s[first], ends[last] - s[first]


def index_runs(indices: Any) -> tuple[Any, Any]:
    """The runs of consecutive ``indices``: (starts, lengths)."""
    if not len(indices):
        return indices, indices
    first = np.flatnonzero(np.concatenate([[True], np.diff(indices) != 1]))
    return indices[first], np.diff(np.concatenate([first, [len(indices)]]))


def _copy(data: Any, byte_starts: Any, byte_stops: Any) -> Any:
    """The byte ranges of ``data`` in one new Arrow buffer: a numpy array's, so that inside a
    pooled section (``_kernel.pooled_arrays``) its memory comes from the kernel's pool, whose
    blocks keep their pages between calls where a fresh allocation faults each one in."""
    size = int((byte_stops - byte_starts).sum())
    out = np.empty(size, dtype=np.uint8)
    if size:
        _kernel.gather_bytes(data, byte_starts, byte_stops, out)
    return require_pyarrow().py_buffer(out)


_BYTES_TYPES = ("is_string", "is_large_string", "is_binary", "is_large_binary")


def gather(arr: Any, starts: Any, lengths: Any, indices: Any = None, depth: int = 0) -> Any:
    """The elements of ``arr`` in the ranges ``[start, start + length)``, one after the other:
    a take by ranges, each range of each buffer copied in one piece (nested lists and structs
    by offset arithmetic down to their leaves). Types without a plain buffer layout (booleans,
    dictionaries, views, unions), and what lies deeper than ``TYPE_DEPTH``, are taken element
    by element. ``indices``: the ranges' elements, where the caller has them (a struct's
    children share them)."""
    pa = require_pyarrow()
    t = arr.type
    total = int(lengths.sum())
    if len(starts) == 1:
        return arr.slice(int(starts[0]), total)  # one range: no copy at all

    def elements() -> Any:
        nonlocal indices
        if indices is None:
            indices = expand_ranges(starts, lengths)
        return indices

    if isinstance(t, pa.BaseExtensionType):
        return pa.ExtensionArray.from_storage(t, gather(arr.storage, starts, lengths, indices,
                                                         depth + 1))
    is_bytes = any(getattr(pa.types, name)(t) for name in _BYTES_TYPES)
    fixed = (pa.types.is_integer(t) or pa.types.is_floating(t) or pa.types.is_temporal(t)
             or pa.types.is_decimal(t) or pa.types.is_fixed_size_binary(t))
    if depth > TYPE_DEPTH or not (is_bytes or fixed or pa.types.is_struct(t) or is_list_type(t)):
        return take_values(arr, pa.array(elements(), type=pa.int64()))
    validity, null_count = None, 0
    if arr.null_count:
        bits, valid = _kernel.gather_bits(arr.buffers()[0], arr.offset, starts, lengths)
        null_count = total - valid
        validity = pa.py_buffer(bits)
    at = starts + arr.offset
    if pa.types.is_struct(t):
        children = [gather(arr.field(i), starts, lengths, indices, depth + 1)
                    for i in range(t.num_fields)]
        return pa.Array.from_buffers(t, total, [validity], null_count, children=children)
    if fixed:
        width = t.bit_width // 8
        data = _copy(arr.buffers()[1], at * width, (at + lengths) * width)
        return pa.Array.from_buffers(t, total, [validity, data], null_count)
    wide = pa.types.is_large_list(t) or pa.types.is_large_string(t) or pa.types.is_large_binary(
        t)
    dtype = np.int64 if wide else np.int32
    offs = np.frombuffer(arr.buffers()[1], dtype=dtype)[arr.offset: arr.offset + len(arr) + 1]
    gathered, lo, hi = _kernel.gather_offsets(offs, starts, lengths)
    new_offsets = pa.py_buffer(gathered)
    if is_bytes:
        data = arr.buffers()[2]
        data = _copy(data if data is not None else b"", lo, hi)
        return pa.Array.from_buffers(t, total, [validity, new_offsets, data], null_count)
    # A list: its values in the ranges its offsets give (absolute: ``values`` is unsliced).
    values = gather(arr.values, *joined_runs(lo, hi - lo), depth=depth + 1)
    return pa.Array.from_buffers(t, total, [validity, new_offsets], null_count,
                                 children=[values])


