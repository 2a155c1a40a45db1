"""Exact copies of message content, and content keys, for a memo that must never be wrong.

A snapshot is a copy made only of Python's own types (dict, list, tuple, str, int, float, bool,
None, bytes), read without running any code of the value's: anything else (a subclass, an
object) has no snapshot, and what holds one is not memoised. Its containers are new and its
leaves (immutable) are the value's own, so comparing it with the value it was taken from again
costs little. A content key is a digest of ``marshal``'s bytes: ``marshal`` writes those types in
C and refuses every other, subclasses included, which is exactly that rule; no Python code runs
while it reads, so a value cannot change under it.
"""

from __future__ import annotations

import hashlib
import marshal
from typing import Any

from . import _kernel

__all__ = ["content_key", "same", "snapshot"]

# marshal's own format version: stable within one Python, which is all a memo needs.
_VERSION = marshal.version


_LEAVES = frozenset({str, int, float, bool, type(None), bytes})
# Deeper than any message the kernels measure (their nesting limit is far lower).
_DEPTH = 256


class _Foreign(Exception):
    """Raised inside :func:`snapshot` for a value that is not of Python's own types."""


def snapshot(value: Any) -> Any | None:
    """An exact copy of ``value`` (see the module docstring), or ``None`` when it holds anything
    but Python's own types or nests deeper than 256."""
    try:
        return _copy(value, 0)
    except _Foreign:
        return None


def _copy(value: Any, depth: int) -> Any:
    kind = type(value)
    if kind in _LEAVES:
        return value
    if depth > _DEPTH:
        raise _Foreign
    depth += 1
    if kind is dict:
        out = {}
        for key, item in dict.items(value):
            if type(key) not in _LEAVES:
                raise _Foreign
            out[key] = item if type(item) in _LEAVES else _copy(item, depth)
        return out
    if kind is list:
        return [item if type(item) in _LEAVES else _copy(item, depth) for item in value]
    if kind is tuple:
        return tuple([item if type(item) in _LEAVES else _copy(item, depth) for item in value])
    raise _Foreign


def content_key(*values: Any) -> str | None:
    """A digest of ``values``' content (see the module docstring), or ``None`` when one holds
    anything but Python's own types."""
    data = _dumps(values)
    return None if data is None else hashlib.blake2b(data, digest_size=20).hexdigest()


def same(copy: Any, value: Any) -> bool:
    """``value`` is exactly ``copy`` (a snapshot): the same types, values and key order, never
    what ``==`` says (``1``, ``True`` and ``1.0`` are equal; a str subclass can say it equals
    anything). No code of the value's runs, so nothing can raise."""
    return bool(_kernel.exact_same(copy, value))


def _dumps(value: Any) -> bytes | None:
    try:
        return marshal.dumps(value, _VERSION)
    except (ValueError, RecursionError):
        return None
