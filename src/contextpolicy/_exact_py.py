"""Exact sameness of a value and a snapshot of it (the compiled half: csrc/_exact.pxi).

A memo keyed by content must never answer for content that merely compares equal: ``1``,
``True`` and ``1.0`` are equal, a str subclass can say it equals anything, and dicts compare
without their key order, yet each is different input to a model. The walk reads exact types only
(a subclass, an object or anything else is not the same unless it is the very object), so no
code of the value's runs and the value cannot change while it is read.
"""

from __future__ import annotations

import struct
from typing import Any

__all__ = ["exact_same"]

EXACT_DEPTH = 300  # deeper than any snapshot (_snapshots: 256); deeper is "not the same"
_PLAIN = (str, int, bytes)  # exact built-in types: their comparison is the interpreter's own
_DOUBLE = struct.Struct("d")


def exact_same(copy: Any, value: Any) -> bool:
    """``value`` is ``copy`` exactly: the same built-in types (dict, list, tuple, str, int,
    float, bool, None, bytes; no subclass), values, dict key order and float bits, or the very
    same object. Anything else, or nesting deeper than 300, is not the same."""
    # Iterative, so the interpreter's recursion limit is no limit; each container is read at
    # once (list() of an exact list or dict view runs no code of the value's).
    stack: list[tuple[Any, Any, int]] = [(copy, value, 0)]
    while stack:
        a, b, depth = stack.pop()
        if a is b:
            continue
        kind = type(a)
        if type(b) is not kind or depth > EXACT_DEPTH:
            return False
        if kind in _PLAIN:
            if not a == b:
                return False
        elif kind is float:  # -0.0 is not 0.0; a NaN is its bits
            if _DOUBLE.pack(a) != _DOUBLE.pack(b):
                return False
        elif kind is list or kind is tuple:
            items_a, items_b = list(a), list(b)
            if len(items_a) != len(items_b):
                return False
            stack.extend((x, y, depth + 1) for x, y in zip(items_a, items_b, strict=True))
        elif kind is dict:
            pairs_a, pairs_b = list(dict.items(a)), list(dict.items(b))
            if len(pairs_a) != len(pairs_b):
                return False
            for (key_a, item_a), (key_b, item_b) in zip(pairs_a, pairs_b, strict=True):
                stack.append((key_a, key_b, depth + 1))
                stack.append((item_a, item_b, depth + 1))
        else:  # bool and None are singletons; any other type is never the same
            return False
    return True
