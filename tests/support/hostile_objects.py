"""Hostile Python objects: a str, list and dict whose methods lie, a dict that acts each time its
items are read, subclasses and values nested deep; and the pieces every hostile case of the kernels
is built from (a measure, an error taken as a value, the outcome of a case on one kernel).

The cases themselves, and the script that runs them, are in ``tests/support/hostile.py``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

# ---------------------------------------------------------------------------------------------
# Objects that lie


class LyingStr(str):
    """A str whose length, equality and hash lie."""

    def __len__(self) -> int:
        return 1

    def __eq__(self, other: object) -> bool:
        return True

    def __ne__(self, other: object) -> bool:
        return False

    def __hash__(self) -> int:
        return 0

    def __str__(self) -> str:
        return "lie"


class LyingList(list):
    """A list whose length and iteration lie (it says it is empty)."""

    def __len__(self) -> int:
        return 0

    def __iter__(self):  # type: ignore[no-untyped-def]
        return iter(())

    def __getitem__(self, index: Any) -> Any:
        raise IndexError("lying list")


class LyingDict(dict):
    """A dict whose accessors lie about every key."""

    def get(self, key: Any, default: Any = None) -> Any:
        return "lie"

    def __getitem__(self, key: Any) -> Any:
        return "lie"

    def items(self):  # type: ignore[no-untyped-def]
        return [("lie", "lie")]

    def keys(self):  # type: ignore[no-untyped-def]
        return ["lie"]

    def __contains__(self, key: object) -> bool:
        return False


class OnItems(dict):
    """A dict that runs ``action`` each time its items are read (as json.dumps does)."""

    def __init__(self, action: Callable[[], None], *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.action = action

    def items(self):  # type: ignore[no-untyped-def]
        self.action()
        return super().items()


def deep_tool_result(levels: int) -> dict[str, Any]:
    content: Any = "bottom"
    for _ in range(levels):
        content = [{"type": "tool_result", "tool_use_id": "t", "content": content}]
    return {"role": "user", "content": content}


def deep_list(levels: int) -> Any:
    value: Any = 1
    for _ in range(levels):
        value = [value]
    return value


def deep_dict(levels: int, bottom: Any = 1) -> Any:
    value: Any = bottom
    for _ in range(levels):
        value = {"k": value}
    return value


class SubList(list):  # type: ignore[type-arg]
    """A list subclass (the compiled kernel hands values holding one to the twin's writer)."""


class SubDict(dict):  # type: ignore[type-arg]
    """A dict subclass, read through its items() as json.dumps reads it."""


def deep_subclasses(levels: int) -> Any:
    # Levels of a list subclass, a dict subclass and a tuple in turn, ending in a str.
    value: Any = "end"
    for k in range(levels):
        value = (SubList([value]), SubDict(k=value), (value,))[k % 3]
    return value


def deep_list_ending_in(levels: int, bottom: Any) -> Any:
    value: Any = bottom
    for _ in range(levels):
        value = [value]
    return value


def tool_use(value: Any) -> dict[str, Any]:
    return {"role": "assistant", "content": [{"type": "tool_use", "id": "t", "name": "f",
                                               "input": value}]}


# ---------------------------------------------------------------------------------------------
# What a case is made of: a kernel's figures, an error as a value, the outcome on one kernel


def _measure(kernel: Any, messages: list[Any]) -> list[list[int]]:
    roles, chars, flags, opaque = kernel.measure_messages(messages, "h")
    return [roles.tolist(), chars.tolist(), flags.tolist(), opaque.tolist()]


def _measure_case(build: Callable[[], list[Any]]) -> Callable[[Any], Any]:
    return lambda kernel: _measure(kernel, build())


def _caught(fn: Callable[[], Any]) -> Any:
    # An error the kernel is to raise, as a value: its type and message (the same on both).
    try:
        return ["value", fn()]
    except (ValueError, TypeError) as exc:
        return [type(exc).__name__, str(exc)]


def outcome(fn: Callable[[Any], Any], kernel: Any) -> dict[str, Any]:
    try:
        value = fn(kernel)
    except Exception as exc:  # every outcome is reported, and compared by the test
        return {"raised": type(exc).__name__, "message": str(exc),
                "codes": list(getattr(exc, "codes", []) or [])}
    return {"value": value}
