"""How the kernels read the Python objects a message is made of.

The real storage of a str, list or dict, never a method a subclass overrides (``__len__``,
``__iter__``, ``get``, ``items``, ``__eq__``, ``__hash__``): dict keys are matched by their text,
lists are read index by index with their length read again each time, and text comes out as an
exact str. The compiled kernel reads the same storage in C; the pure twin and the tool-id
readers read it through these functions, so both kernels see the same message whatever
subclass holds it.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from ._tables import KEYS

__all__ = ["ListChanged", "exact_str", "fields", "items"]

KEY_SET = frozenset(KEYS)
_dict_items = dict.items
_list_len = list.__len__
_list_get = list.__getitem__
_str_copy = str.__str__


def exact_str(value: str) -> str:
    """``value`` as an exact str: the text a str subclass holds, whatever its methods say."""
    return value if type(value) is str else _str_copy(value)


def fields(d: dict[Any, Any]) -> dict[str, Any]:
    """The values of the keys the kernels read (``_tables.KEYS``), from the dict's real storage,
    keys matched by their text (a key repeated under str subclasses: the last one wins)."""
    out: dict[str, Any] = {}
    for key, value in _dict_items(d):
        if type(key) is str:
            if key in KEY_SET:
                out[key] = value
        elif isinstance(key, str):
            name = _str_copy(key)
            if name in KEY_SET:
                out[name] = value
    return out


class ListChanged(Exception):
    """A list changed its length while it was read (Python code an item ran changed it)."""


def items(value: list[Any]) -> Iterator[tuple[int, Any]]:
    """``(index, item)`` of a list's real storage. Its length is read again before each item
    and after the last: a list that grows or shrinks while it is read raises
    :class:`ListChanged` (as the compiled kernel does at the same points), so that a list that
    keeps growing can never keep the reader going."""
    n = _list_len(value)
    for j in range(n):
        if _list_len(value) != n:
            raise ListChanged
        yield j, _list_get(value, j)
    if _list_len(value) != n:
        raise ListChanged
