"""Content compared and copied the way the model sees it, never the way an object says it is.

A protected fragment must reach the model unchanged, and the caller's data must survive any
handler, counter or custom implementation. Neither can rest on ``==`` or on ``copy.deepcopy``:
a str subclass can say it equals anything, a dict subclass can lie about its items, and both run
code of their own. So:

- :func:`snapshot` is the content as bytes of its JSON serialisation (orjson, which reads the
  real storage of every str, dict and list and runs no method of theirs), or, for content JSON
  cannot hold (a cycle, a non-str key, an integer beyond 64 bits, an object), a token list of
  exact types and values read the same way. Two contents are the same when their snapshots are:
  ``1`` and ``True``, or a str subclass whose text differs, are different content.
- :func:`plain_copy` copies message content into plain dicts, lists and exact strs (read from
  the real storage, cycles kept), so that whatever a callback does to its copy, the caller's
  objects are untouched, and what was measured is what is assembled.

Both walk iteratively: nesting depth is no limit.
"""

from __future__ import annotations

from typing import Any

import orjson

__all__ = ["plain_copy", "same", "snapshot"]

_SCALARS = (str, int, float, bool, type(None))


def snapshot(value: Any) -> bytes | tuple[Any, ...]:
    """The content as the model sees it: comparable with ``==``, and no code of the value's
    runs while it is taken or compared."""
    try:
        return orjson.dumps(value)
    except (TypeError, orjson.JSONEncodeError):
        return _tokens(value)


def same(a: Any, b: Any) -> bool:
    """``a`` and ``b`` are the same content (identical objects always are)."""
    if a is b:
        return True
    if type(a) is str and type(b) is str:
        return str.__eq__(a, b)  # type: ignore[no-any-return]
    return snapshot(a) == snapshot(b)


def _tokens(value: Any) -> tuple[Any, ...]:
    # Depth-first, iterative: a container becomes (type, length) followed by its items; one seen
    # before becomes ("ref", its position), so cycles end and shared objects read alike. Types
    # are read with type(), never isinstance(), which an object's __class__ can fool.
    out: list[Any] = []
    seen: dict[int, int] = {}
    stack: list[Any] = [value]
    while stack:
        item = stack.pop()
        kind = type(item)
        if kind in _SCALARS:
            out.append((kind.__name__, item))
        elif issubclass(kind, (str, int, float)):
            base = str if issubclass(kind, str) else int if issubclass(kind, int) else float
            out.append((f"{base.__name__}:{kind.__qualname__}", base.__repr__(item)))
        elif issubclass(kind, (dict, list, tuple)):
            if id(item) in seen:
                out.append(("ref", seen[id(item)]))
                continue
            seen[id(item)] = len(out)
            if issubclass(kind, dict):
                pairs = list(dict.items(item))
                out.append((f"dict:{kind.__qualname__}", len(pairs)))
                for key, child in reversed(pairs):
                    stack.append(child)
                    stack.append(key)
            else:
                children = list.copy(item) if issubclass(kind, list) else list(
                    tuple.__iter__(item)
                )
                out.append((f"seq:{kind.__qualname__}", len(children)))
                stack.extend(reversed(children))
        else:  # an object JSON cannot hold: the same object, or different content
            out.append(("object", id(item)))
    return tuple(out)


def plain_copy(value: Any) -> Any:
    """A copy made of plain dicts, lists and exact strs, read from the real storage (a dict or
    list subclass becomes a plain one, cycles and shared objects stay so; other objects, tuples
    included, are shared, not copied)."""
    copies: dict[int, Any] = {}
    pending: list[tuple[Any, Any]] = []

    def shell(item: Any) -> Any:
        kind = type(item)
        if kind in _SCALARS:
            return item
        if issubclass(kind, str):
            return str.__str__(item)
        if issubclass(kind, (dict, list)):
            found = copies.get(id(item))
            if found is None:
                found = {} if issubclass(kind, dict) else []
                copies[id(item)] = found
                pending.append((item, found))
            return found
        return item

    root = shell(value)
    while pending:
        source, target = pending.pop()
        if isinstance(target, dict):
            for key, child in list(dict.items(source)):
                target[shell(key)] = shell(child)
        else:
            target.extend([shell(child) for child in list.copy(source)])
    return root
