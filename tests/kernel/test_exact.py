"""``exact_same``: a value and a snapshot of it compared by exact types, values, key order and
float bits, never by ``==`` (a memo keyed by content must not answer for content that only
compares equal); both kernels alike, on hostile objects too, and never a crash."""

from __future__ import annotations

import copy
import struct
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from contextpolicy._snapshots import snapshot
from tests.support.differential import SETTINGS, native_json


class Text(str):
    def __eq__(self, other: object) -> bool:  # claims to equal everything
        return True

    __hash__ = str.__hash__


class Loud(dict):
    """A dict subclass whose every read raises: exact_same must read none of it."""

    def items(self):  # type: ignore[override]
        raise AssertionError("read")

    def __iter__(self):
        raise AssertionError("read")

    def __eq__(self, other: object) -> bool:
        raise AssertionError("read")

    __hash__ = None  # type: ignore[assignment]


def _cycle() -> list[Any]:
    a: list[Any] = []
    a.append(a)
    return a


def _deep(n: int) -> list[Any]:
    out: list[Any] = []
    for _ in range(n):
        out = [out]
    return out


CASES = [
    # (copy, value, same?)
    ({"a": 1, "b": [1.5, None, "x"]}, {"a": 1, "b": [1.5, None, "x"]}, True),
    (1, True, False),
    (1, 1.0, False),
    (True, 1, False),
    (0.0, -0.0, False),
    (float("nan"), float("nan"), True),  # the same bits
    ({"a": 1, "b": 2}, {"b": 2, "a": 1}, False),  # key order is part of what is sent
    ({"a": 1}, {"a": 1, "b": 2}, False),
    ("x", Text("x"), False),
    ("x", Text("y"), False),
    ([1], (1,), False),
    ((1, 2), (1, 2), True),
    (b"ab", b"ab", True),
    (b"ab", bytearray(b"ab"), False),
    (2**100, 2**100, True),
    (2**100, 2**100 + 1, False),
    ({"a": 1}, Loud(a=1), False),
    ([{"k": "v"}], [Loud(k="v")], False),
    (None, None, True),
    (None, False, False),
    (_deep(299), _deep(299), True),
    (_deep(305), _deep(305), False),  # deeper than any snapshot: not the same
    (_cycle(), _cycle(), False),
]


@pytest.mark.parametrize(("copy_", "value", "expected"), CASES)
def test_exact_same_reads_types_values_order_and_bits(differential, copy_, value, expected):
    assert differential("exact_same", copy_, value) is expected


def test_the_very_same_object_is_the_same_whatever_it_is(differential):
    for value in (Loud(a=1), Text("x"), _cycle(), object()):
        assert differential("exact_same", value, value) is True


def _oracle(value: Any) -> Any:
    """Everything that tells two values apart as a model receives them: types (exact), values,
    key order, float bits."""
    kind = type(value)
    if kind is float:
        return ("float", struct.pack("d", value))
    if kind in (list, tuple):
        return (kind.__name__, tuple(_oracle(v) for v in value))
    if kind is dict:
        return ("dict", tuple((_oracle(k), _oracle(v)) for k, v in value.items()))
    return (kind.__name__, value)


@SETTINGS
@given(native_json)
def test_a_value_is_exactly_its_snapshot_and_its_deep_copy(differential, value):
    assert differential("exact_same", snapshot(value), value) is True
    assert differential("exact_same", copy.deepcopy(value), value) is True


@SETTINGS
@given(native_json, native_json)
def test_two_values_are_the_same_exactly_when_nothing_tells_them_apart(differential, a, b):
    assert differential("exact_same", a, b) is (_oracle(a) == _oracle(b))


@SETTINGS
@given(native_json, st.data())
def test_a_value_changed_anywhere_is_not_the_same(differential, value, data):
    # one leaf swapped for an equal value of another type, or a dict's keys reordered
    changed = _change(copy.deepcopy(value), data)
    assert differential("exact_same", value, changed) is (_oracle(value) == _oracle(changed))


def _change(value: Any, data: Any) -> Any:
    kind = type(value)
    if kind is bool:
        return int(value)
    if kind is int:
        return float(value) if abs(value) < 2**53 else value + 1
    if kind is float:
        return -value if value == 0 else value
    if kind is str:
        return Text(value)
    if kind in (list, tuple) and value:
        k = data.draw(st.integers(0, len(value) - 1))
        items = list(value)
        items[k] = _change(items[k], data)
        return kind(items)
    if kind is dict and value:
        if len(value) > 1 and data.draw(st.booleans()):
            return dict(reversed(list(value.items())))
        key = data.draw(st.sampled_from(list(value)))
        return {**value, key: _change(value[key], data)}
    return value
