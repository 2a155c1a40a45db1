"""Hostile cases of the kernels' compact JSON: values nested at and around the depth limit
(lists, dicts, subclasses, under low and high recursion limits), values that contain themselves
or deepen forever, and tool inputs of exact types that the compiled kernel writes itself.

Part of the cases that ``tests/support/hostile.py`` runs.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from typing import Any

from .hostile_objects import (
    SubDict,
    _measure_case,
    deep_dict,
    deep_list,
    deep_list_ending_in,
    deep_subclasses,
    tool_use,
)


def _json_pieces(value: Any) -> Callable[[Any], Any]:
    # The compact JSON of a tool_use input, a function_call's arguments and a tool call's
    # arguments, as each kernel writes it (the compiled one natively, for exact types).
    def run(kernel: Any) -> Any:
        msgs = [tool_use(value), {"type": "function_call", "call_id": "c", "arguments": value},
                {"role": "assistant", "tool_calls": [{"id": "c", "function": {
                    "arguments": value}}]}]
        pieces, ends = kernel.text_pieces(msgs, "h")
        # ascii(): lone surrogates survive the trip through this process's JSON output.
        return [[type(p).__name__, ascii(p)] for p in pieces] + [ends]

    return run


def compact_json(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)


def _under_recursion_limit(limit: Callable[[int], int],
                           case: Callable[[Any], Any]) -> Callable[[Any], Any]:
    # The case run with the interpreter's recursion limit set to limit(frames on the stack):
    # the JSON depth rule holds whatever the stack allows.
    def run(kernel: Any) -> Any:
        frame, depth = sys._getframe(), 0
        while frame is not None:
            frame, depth = frame.f_back, depth + 1  # type: ignore[assignment]
        before = sys.getrecursionlimit()
        sys.setrecursionlimit(limit(depth))
        try:
            return case(kernel)
        finally:
            sys.setrecursionlimit(before)

    return run


def _items_deepen_forever() -> list[Any]:
    # A dict subclass whose items() hands out a new one of its kind every time it is read.
    class Deeper(dict):  # type: ignore[type-arg]
        def items(self):  # type: ignore[no-untyped-def]
            return [("k", Deeper(k=1))]

    return [tool_use(Deeper(k=1))]


def _contains_itself(kind: type) -> list[Any]:
    value: Any = kind()
    if isinstance(value, dict):
        dict.__setitem__(value, "self", value)
    else:
        list.append(value, value)
    return [tool_use(value)]


def json_cases_at(levels: int) -> dict[str, Callable[[Any], Any]]:
    # Every place a kernel measures a value by its compact JSON, at one depth.
    value = deep_list(levels)
    return {
        f"json-deep-{levels}": _measure_case(lambda: [tool_use(deep_list(levels))]),
        f"json-deep-objects-{levels}": _measure_case(lambda: [tool_use(deep_dict(levels))]),
        f"json-deep-subclasses-{levels}": _measure_case(
            lambda: [tool_use(deep_subclasses(levels))]),
        f"json-deep-{levels}-with-a-big-int-at-the-bottom": _measure_case(
            lambda: [tool_use(deep_list_ending_in(levels, 2**70))]),
        f"item-arguments-deep-{levels}": _measure_case(lambda: [
            {"type": "function_call", "call_id": "c", "arguments": deep_list(levels)}]),
        f"item-input-deep-{levels}": _measure_case(lambda: [
            {"type": "custom_tool_call", "call_id": "c", "input": deep_list(levels)}]),
        f"tool-call-arguments-deep-{levels}": _measure_case(lambda: [
            {"role": "assistant", "tool_calls": [{"id": "c", "function": {
                "name": "f", "arguments": deep_list(levels)}}]}]),
        f"json-pieces-deep-{levels}": _json_pieces(value),
    }


JSON_DEPTH_CASES: dict[str, Callable[[Any], Any]] = {
    **json_cases_at(1023), **json_cases_at(1024), **json_cases_at(1025),
    "json-list-contains-itself": _measure_case(lambda: _contains_itself(list)),
    "json-subclass-contains-itself": _measure_case(lambda: _contains_itself(SubDict)),
    "json-items-deepen-forever": _measure_case(_items_deepen_forever),
    # The first problem in document order is the one reported.
    "json-invalid-before-too-deep": _measure_case(lambda: [tool_use([{1, 2},
                                                                     deep_list(1025)])]),
    "json-too-deep-before-invalid": _measure_case(lambda: [tool_use([deep_list(1025),
                                                                     {1, 2}])]),
    "json-deep-1024-under-a-low-recursion-limit": _under_recursion_limit(
        lambda frames: frames + 60,
        _measure_case(lambda: [tool_use(deep_list(1024)), tool_use(deep_subclasses(1024))])),
    "json-deep-1025-under-a-high-recursion-limit": _under_recursion_limit(
        lambda frames: 200_000, _measure_case(lambda: [tool_use(deep_list(1025))])),
    "json-subclasses-1025-under-a-high-recursion-limit": _under_recursion_limit(
        lambda frames: 200_000, _measure_case(lambda: [tool_use(deep_subclasses(1025))])),
    "compact-json-deep-1024": lambda kernel: len(kernel.compact_json(deep_list(1024))),
    "compact-json-deep-1025": lambda kernel: kernel.compact_json(deep_list(1025)),
    "compact-json-length-deep-1024": lambda kernel: kernel.compact_json_length(deep_dict(1024)),
    "compact-json-length-deep-1025": lambda kernel: kernel.compact_json_length(deep_dict(1025)),
}


# Tool inputs of exact types, which the compiled kernel writes as JSON itself.
JSON_VALUES: dict[str, Any] = {
    "json-int64-boundaries": [2**63 - 1, -(2**63), 2**63, -(2**63) - 1, 0, -1, 2**64,
                              (2**31, -(2**31)), {"k": -(2**63)}],
    "json-every-control-char": {"".join(map(chr, range(32))): "".join(map(chr, range(32)))
                                + '"\\\x7f/'},
    "json-widest-char-in-a-key": {"\U0001f600": "a", "b": ["é", "\u0100"]},
    "json-widest-char-last": ["a", {"k": "é"}, ["\u0100", ("\U0010ffff",)]],
    "json-one-byte-key-four-byte-value": {"a": "\U0001f600", "é": 1},
    "json-lone-surrogates": {"\ud800": ["\udfff", "\ud83d\ude00", "\udbff"]},
    "json-empty-containers": [[], {}, (), [[]], {"": {}}, "", [()]],
    "json-huge-string": ["\x00\"\\é😀" * 20_000],
}
