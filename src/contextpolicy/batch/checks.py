"""What an Arrow array holds, checked where the library reads or writes it, each fault named by
its place (``messages[3][1].content[0].text``, ``id[7]``):

- strings that are not UTF-8, by Arrow's own rule (what ``Array.validate(full=True)`` checks
  of strings): every string that is not null, of every string array at any depth (struct
  children, list and map values, dictionaries, views, run-end encoded and union children).
  Parquet and IPC readers hand over what a file holds without this check;
- numbers JSON cannot write: NaN and the infinities (a JSON writer makes them ``null``), where
  they are values (under a null struct or list there is no value).

The strings are checked by the kernel a whole array at a time (``_kernel.utf8_validate``);
the places are worked out only for a fault.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import numpy as np

from .. import _kernel
from ..errors import ContextPlanError
from .arrow import decoded, null_mask, require_pyarrow, string_buffers

__all__ = ["check_json_numbers", "check_utf8"]

# A step from a value down to one it holds: (its order among its siblings, its label: a list
# index or a field name).
Step = tuple[int, int | str]


class Place:
    """Where each value of an array sits: one link per level of nesting, each mapping an index
    of its array to the index of the value holding it one level up and the step between them
    (``None``: the same place, as a union adds none). Called with an index, it gives the steps
    from the top, or ``None`` for a value of no row (a list view's child that no list holds, a
    dense union's child that no slot points to). Walked without recursion, so a value nested
    as deep as Arrow allows is named as one at the top."""

    __slots__ = ("link", "up")

    def __init__(self, up: Place | None,
                 link: Callable[[int], tuple[int, Step | None] | None]) -> None:
        self.up, self.link = up, link

    def __call__(self, j: int) -> tuple[Step, ...] | None:
        steps: list[Step] = []
        level: Place | None = self
        while level is not None:
            found = level.link(j)
            if found is None:
                return None
            j, step = found
            if step is not None:
                steps.append(step)
            level = level.up
        steps.reverse()
        return tuple(steps)


def _path(name: str, steps: tuple[Step, ...]) -> str:
    return name + "".join(f"[{label}]" if isinstance(label, int) else f".{label}"
                          for _, label in steps)


def _is_list(t: Any) -> bool:
    pa = require_pyarrow()
    return bool(pa.types.is_list(t) or pa.types.is_large_list(t)
                or pa.types.is_fixed_size_list(t) or pa.types.is_list_view(t)
                or pa.types.is_large_list_view(t))


def _types_below(t: Any) -> list[Any]:
    """The types a value of type ``t`` holds one level down, in the order :func:`_below`
    gives the arrays (a map's entries are a struct of its key and item)."""
    pa = require_pyarrow()
    if isinstance(t, pa.BaseExtensionType):
        return [t.storage_type]
    if pa.types.is_dictionary(t) or pa.types.is_run_end_encoded(t) or _is_list(t):
        return [t.value_type]
    if pa.types.is_map(t):
        return [pa.struct([t.key_field, t.item_field])]
    if pa.types.is_struct(t) or pa.types.is_union(t):
        return [f.type for f in t]
    return []


class _Node:
    """A place in a type: whether a value there can hold a leaf ``want`` takes (``holds``),
    whether it is one (``wanted``), and the places one level down (``below``)."""

    __slots__ = ("below", "holds", "wanted")

    def __init__(self) -> None:
        self.holds = self.wanted = False
        self.below: list[_Node] = []


def _plan(top: Any, want: Callable[[Any], bool]) -> _Node:
    """The places of type ``top``, each knowing whether it can hold a leaf ``want`` takes:
    worked out once, bottom up, with a stack of its own (a type may nest as deeply as a tool
    input), so that the walk of the arrays asks nothing of the types again."""
    pa = require_pyarrow()
    root = _Node()
    todo: list[tuple[Any, _Node, bool]] = [(top, root, False)]
    while todo:
        t, node, expanded = todo.pop()
        if expanded:
            node.holds = any(n.holds for n in node.below)
            continue
        if not isinstance(t, pa.BaseExtensionType) and want(t):
            node.holds = node.wanted = True
            continue
        types = _types_below(t)
        node.below = [_Node() for _ in types]
        todo.append((t, node, True))
        todo.extend((b, n, False) for b, n in zip(types, node.below, strict=True))
    return root


def _list_link(offsets: Any) -> Callable[[int], tuple[int, Step | None] | None]:
    def link(j: int) -> tuple[int, Step | None]:
        i = int(np.searchsorted(offsets, j, side="right")) - 1
        return i, (j - int(offsets[i]), j - int(offsets[i]))
    return link


def _below(arr: Any, place: Place) -> list[tuple[Any, Place]]:
    """The arrays one level inside ``arr``, in order, each with the place of its values (an
    encoding Arrow can undo, a dictionary or run ends, keeps the place)."""
    pa = require_pyarrow()
    t = arr.type
    if isinstance(t, pa.BaseExtensionType):
        return [(arr.storage, place)]
    if pa.types.is_dictionary(t):
        return [(decoded(arr), place)]
    if pa.types.is_run_end_encoded(t):
        import pyarrow.compute as pc

        return [(pc.run_end_decode(arr), place)]
    if pa.types.is_struct(t):
        def field(k: int, label: str) -> Callable[[int], tuple[int, Step | None] | None]:
            return lambda i: (i, (k, label))
        return [(arr.field(k), Place(place, field(k, f.name))) for k, f in enumerate(t)]
    if pa.types.is_list(t) or pa.types.is_large_list(t) or pa.types.is_map(t):
        offs = np.asarray(arr.offsets, dtype=np.int64)  # this slice's, into the whole values
        base = int(offs[0])
        values = arr.values.slice(base, int(offs[-1]) - base)
        return [(values, Place(place, _list_link(offs - base)))]
    if pa.types.is_fixed_size_list(t):
        size = t.list_size
        values = arr.values.slice(arr.offset * size, len(arr) * size)
        return [(values, Place(place, lambda j: (j // size, (j % size, j % size))))]
    if pa.types.is_list_view(t) or pa.types.is_large_list_view(t):
        starts = np.asarray(arr.offsets, dtype=np.int64)
        sizes = np.asarray(arr.sizes, dtype=np.int64)
        held = ~np.asarray(arr.is_null(), dtype=bool)

        def viewed(j: int) -> tuple[int, Step | None] | None:
            found = np.flatnonzero(held & (starts <= j) & (j < starts + sizes))
            if not len(found):
                return None
            i = int(found[0])
            return i, (j - int(starts[i]), j - int(starts[i]))
        return [(arr.values, Place(place, viewed))]
    if pa.types.is_union(t):
        dense = t.mode == "dense"
        codes = np.asarray(arr.type_codes, dtype=np.int64)
        value_offsets = np.asarray(arr.offsets, dtype=np.int64) if dense else None

        def member(code: int) -> Callable[[int], tuple[int, Step | None] | None]:
            def link(j: int) -> tuple[int, Step | None] | None:
                if value_offsets is None:  # sparse: the child's slots are the union's
                    return (j, None) if codes[j] == code else None
                found = np.flatnonzero((codes == code) & (value_offsets == j))
                return (int(found[0]), None) if len(found) else None
            return link
        return [(arr.field(k), Place(place, member(code)))
                for k, code in enumerate(t.type_codes)]
    return []


def _leaves(arr: Any, place: Place, plan: _Node) -> Iterator[tuple[Any, Place]]:
    """Every array inside ``arr`` (``arr`` too) at a place of ``plan`` that is a leaf, with
    the place of each of its values, in the order of a walk from the top (without
    recursion)."""
    todo = [(arr, place, plan)]
    while todo:
        arr, place, node = todo.pop()
        if not node.holds:
            continue
        if node.wanted:
            yield arr, place
        else:
            below = _below(arr, place)
            todo.extend(reversed([(a, p, n) for (a, p), n in zip(below, node.below,
                                                                 strict=True)]))


def _row_link(start: int) -> Callable[[int], tuple[int, Step | None] | None]:
    return lambda i: (i, (start + i, start + i))


def _top(arr: Any, name: str, want: Callable[[Any], bool]) -> Iterator[tuple[Any, Place]]:
    """The leaves of a column (an Array, or a ChunkedArray whose rows run on over its chunks)."""
    chunks = arr.chunks if hasattr(arr, "chunks") else [arr]
    plan = _plan(arr.type, want)
    start = 0
    for chunk in chunks:
        row = Place(None, _row_link(start))
        yield from _leaves(chunk, row, plan)
        start += len(chunk)


# ---------------------------------------------------------------------------------------------
# UTF-8


def _is_text(t: Any) -> bool:
    pa = require_pyarrow()
    return bool(pa.types.is_string(t) or pa.types.is_large_string(t)
                or pa.types.is_string_view(t))


def _first_bad_string(leaf: Any, place: Place) -> tuple[tuple[Step, ...], str] | None:
    """The first string of ``leaf`` that is not UTF-8 and is a value of a row: its place and
    what is wrong with it."""

    pa = require_pyarrow()
    if pa.types.is_string_view(leaf.type):
        leaf = leaf.cast(pa.large_string())  # the same bytes, in one buffer
    data, offs = string_buffers(leaf)
    try:
        _kernel.utf8_validate(data, offs)  # every string's bytes, nulls' too, at once
        return None
    except _kernel.Utf8Error:
        pass
    nulls = null_mask(leaf) if leaf.null_count else None
    start = 0
    while start < len(leaf):
        try:
            _kernel.utf8_validate(data, offs[start:],
                                  None if nulls is None else nulls[start:])
            return None
        except _kernel.Utf8Error as exc:
            j = start + exc.index
            steps = place(j)
            if steps is None:
                start = j + 1
                continue
            raw = bytes(memoryview(data)[int(offs[j]):int(offs[j + 1])])
            at = exc.byte - int(offs[j])
            try:
                raw.decode("utf-8")
                reason = "not UTF-8"
            except UnicodeDecodeError as decoded:
                reason = decoded.reason
            return steps, f"0x{raw[at]:02x} at byte {at} of the string: {reason}"
    return None


def check_utf8(arr: Any, name: str, skip: Callable[[Any], bool] | None = None) -> None:
    """Raise a ``ContextPlanError`` (code ``invalid-utf8``) naming the first string of ``arr``
    (an Array or ChunkedArray, the column ``name``) that is not UTF-8: its row, and the
    message, the field and the byte below it. ``skip(leaf)``: a string array whose strings
    were checked already (counted by the kernel, which checks as it counts)."""
    first: tuple[tuple[Step, ...], str] | None = None
    for leaf, place in _top(arr, name, _is_text):
        if skip is not None and skip(leaf):
            continue
        found = _first_bad_string(leaf, place)
        if found is not None and (first is None or _order(found[0]) < _order(first[0])):
            first = found
    if first is not None:
        raise ContextPlanError(f"holds bytes that are not UTF-8 ({first[1]})",
                               path=_path(name, first[0]), code="invalid-utf8")


def _order(steps: tuple[Step, ...]) -> tuple[int, ...]:
    return tuple(order for order, _ in steps)


# ---------------------------------------------------------------------------------------------
# Numbers JSON cannot write


def _value_at(arr: Any, steps: tuple[Step, ...]) -> tuple[bool, Any]:
    """Whether the place ``steps`` of the column ``arr`` holds a value, and the value."""
    row = steps[0][1]
    assert isinstance(row, int)
    value = arr[row].as_py()
    for _, label in steps[1:]:
        if value is None:
            return False, None
        if isinstance(value, tuple):  # a map's entry
            value = value[0 if label == "key" else 1]
        else:
            value = value[label]
    return value is not None, value


def check_json_numbers(arr: Any, name: str) -> None:
    """Raise a ``ContextPlanError`` (code ``non-finite-number``) naming the first NaN or
    infinity among the values of ``arr`` (an Array or ChunkedArray, the column ``name``): JSON
    has neither, and a JSON writer would turn it into ``null``."""
    import pyarrow.compute as pc

    pa = require_pyarrow()
    first: tuple[tuple[Step, ...], Any] | None = None
    for leaf, place in _top(arr, name, pa.types.is_floating):
        numbers = leaf.cast(pa.float32()) if pa.types.is_float16(leaf.type) else leaf
        odd = np.flatnonzero(~np.asarray(pc.is_finite(numbers).fill_null(True), dtype=bool))
        for j in odd.tolist():
            steps = place(j)
            if steps is None:
                continue
            held, value = _value_at(arr, steps)
            if held:
                if first is None or _order(steps) < _order(first[0]):
                    first = steps, value
                break
    if first is not None:
        value = first[1]
        said = "NaN" if value != value else ("Infinity" if value > 0 else "-Infinity")
        raise ContextPlanError(
            f"holds {said}, which JSON cannot write (it has no NaN or infinities, and a JSON "
            "writer would make it null): write Parquet, or replace the value first",
            path=_path(name, first[0]), code="non-finite-number")
