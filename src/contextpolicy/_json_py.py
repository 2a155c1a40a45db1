"""Compact JSON of tool inputs, without recursion (the pure twin of ``csrc/_json.pxi``).

``compact_json`` writes ``json.dumps(value, separators=(",", ":"), ensure_ascii=False)`` with a
stack of its own; the compiled kernel writes values of exact built-in types itself and hands
every other value to :func:`_json_text`.
"""

from __future__ import annotations

import json
import math
from typing import Any

from ._c_args import c_type_name
from ._kernel_names import JSON_TOO_DEEP, JsonTooDeep
from ._tables import (
    MAX_JSON_DEPTH,
)
from .errors import ContextPlanError

# ``json.dumps(x, separators=(",", ":"), ensure_ascii=False)``, built once.
COMPACT_JSON = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False)

# What ``COMPACT_JSON.encode(value)`` writes, character for character and with the same errors,
# read the way its C encoder reads (a subclass of dict through its ``items()``, of list or tuple
# through its iterator, every scalar through its real storage), but walked with a stack of its
# own: a value nested up to MAX_JSON_DEPTH levels of arrays and objects is written whatever the
# interpreter's stack allows, and a deeper one (a value that contains itself among them) is
# JsonTooDeep at the first container past the limit, before anything of it is read. The
# compiled kernel writes values of exact built-in types itself and hands every other value to
# _json_text.


_encode_str = json.encoder.encode_basestring  # the encoder's own (ensure_ascii=False)
_float_repr = float.__repr__
_isfinite = math.isfinite
_int_repr = int.__repr__
_dict_len = dict.__len__
_dict_items = dict.items
_tuple_len = tuple.__len__
_END = object()


def _float_text(value: float) -> str:
    # math reads a float subclass's own value, never a method of it.
    if math.isfinite(value):
        return _float_repr(value)
    if math.isnan(value):
        return "NaN"
    return "Infinity" if math.copysign(1.0, value) > 0 else "-Infinity"


def _key_text(key: Any) -> str:
    """A dict key as the encoder writes it (a str; numbers and constants as their JSON)."""
    kind = type(key)
    if issubclass(kind, str):
        return _encode_str(key)
    if issubclass(kind, float):
        return _encode_str(_float_text(key))
    if key is True or key is False or key is None:
        return '"true"' if key is True else '"false"' if key is False else '"null"'
    if issubclass(kind, int):
        return _encode_str(_int_repr(key))
    raise TypeError(f"keys must be str, int, float, bool or None, not "
                    f"{c_type_name(kind)[:100]}")


def _pairs(value: dict[Any, Any]) -> Any:
    """An iterator over the items of a dict subclass as the encoder reads them: as its
    ``items()`` returns them (an exact dict's are read as they are when it is reached)."""
    got: Any = value.items()
    if type(got) is not list:
        try:
            it = iter(got)
        except TypeError:
            raise TypeError(f"{c_type_name(type(value))[:200]}.items() returned a "
                            f"non-iterable (type {c_type_name(type(got))[:200]})") from None
        got = list(it)
    return iter(got)


def _as_list(value: Any) -> list[Any]:
    """The items of a list or tuple subclass as the encoder reads them: as its iterator gives
    them (an exact list is read as it is at each item, an exact tuple as it is)."""
    try:
        it = iter(value)
    except TypeError:
        raise TypeError("_iterencode_list needs a sequence") from None
    return list(it)


def _json_text(value: Any) -> str:
    """``COMPACT_JSON.encode(value)``, without recursion (see above)."""
    if type(value) is str:
        return _encode_str(value)  # type: ignore[no-any-return]
    out: list[str] = []
    put = out.append
    # The container being written: its items, its closing bracket, how its items are read
    # (0: values, 1: an exact dict's pairs, 2: pairs a subclass's items() returned) and whether
    # nothing of it is written yet; the root is the one value of a container without brackets.
    # The containers around it wait on the stack.
    stack: list[tuple[Any, str, int]] = []
    it: Any = iter((value,))
    closer, mode, first = "", 0, True
    while True:
        for item in it:
            if first:
                first = False
            else:
                put(",")
            if mode:
                if mode == 2 and (not issubclass(type(item), tuple) or _tuple_len(item) != 2):
                    raise ValueError("items must return 2-tuples")
                key = tuple.__getitem__(item, 0)
                put(_encode_str(key) if type(key) is str else _key_text(key))
                put(":")
                item = tuple.__getitem__(item, 1)
            kind = type(item)
            if kind is str:
                put(_encode_str(item))
            elif item is None:
                put("null")
            elif item is True:
                put("true")
            elif item is False:
                put("false")
            elif kind is int:
                put(_int_repr(item))
            elif kind is float:
                put(_float_repr(item) if _isfinite(item) else _float_text(item))
            elif issubclass(kind, (list, tuple, dict)):
                if len(stack) >= MAX_JSON_DEPTH:
                    raise JsonTooDeep
                if kind is dict or issubclass(kind, dict):
                    if not _dict_len(item):
                        put("{}")
                        continue
                    put("{")
                    stack.append((it, closer, mode))
                    closer = "}"
                    if kind is dict:
                        it, mode = iter(list(_dict_items(item))), 1
                    else:
                        it, mode = _pairs(item), 2
                else:
                    seq = item if kind is list or kind is tuple else _as_list(item)
                    if not len(seq):
                        put("[]")
                        continue
                    put("[")
                    stack.append((it, closer, mode))
                    it = iter(seq)
                    closer, mode = "]", 0
                first = True
                break
            elif issubclass(kind, str):
                put(_encode_str(item))
            elif issubclass(kind, int):
                put(_int_repr(item))
            elif issubclass(kind, float):
                put(_float_text(item))
            else:
                COMPACT_JSON.default(item)  # raises the encoder's TypeError
        else:
            put(closer)
            if not stack:
                return "".join(out)
            it, closer, mode = stack.pop()
            first = False


def compact_json(value: Any) -> str:
    """The compact JSON of ``value`` (``json.dumps(value, separators=(",", ":"),
    ensure_ascii=False)``), as the kernels measure a tool input, without recursion: a value
    nested deeper than ``MAX_JSON_DEPTH`` levels of arrays and objects, or one that contains
    itself, is a :class:`ContextPlanError` ``too-deep``; one JSON cannot hold, ``invalid-json``.
    """
    try:
        return _json_text(value)
    except JsonTooDeep:
        raise ContextPlanError(JSON_TOO_DEEP, code="too-deep") from None
    except (TypeError, ValueError, RecursionError) as exc:
        raise ContextPlanError(f"expected JSON-serialisable data ({exc})",
                               code="invalid-json") from None


def compact_json_length(value: Any) -> int:
    """``len(compact_json(value))`` (the compiled kernel counts it without writing it)."""
    return len(compact_json(value))


def _compact_json(value: Any, index: int, fragment_id: str | None, field: str) -> str:
    try:
        return _json_text(value)
    except JsonTooDeep:
        raise ContextPlanError.for_message(
            index, JSON_TOO_DEEP, fragment_id=fragment_id, field=field, code="too-deep",
        ) from None
    except (TypeError, ValueError, RecursionError) as exc:
        raise ContextPlanError.for_message(
            index, f"expected JSON-serialisable data ({exc})", fragment_id=fragment_id,
            field=field, code="invalid-json",
        ) from None
