"""What a built-in handler's step did, in figures, measured from the step's input and output.

The core calls :func:`measure_figures` after a compress step by a built-in handler applied,
with the content the handler was given and the content it returned: the figures come from
comparing the two (content as the model sees it, :func:`~contextpolicy.content.snapshot`;
a message that is the very object the handler was given is unchanged), never from anything the
handler reports, so a subclass that does something else is measured for what it did.
"""

from __future__ import annotations

from typing import Any

from ..content import snapshot
from ..report import CompressFigures
from ._base import BuiltinHandler
from ._parts import call_slots, result_slots
from .params import CLEAR_TOOL_RESULTS, SUMMARIZE, TRUNCATE_MESSAGES

__all__ = ["measure_figures"]


def _changed(a: Any, b: Any) -> bool:
    return a is not b and snapshot(a) != snapshot(b)


def _aligned(before: Any, after: Any) -> bool:
    return isinstance(before, list) and isinstance(after, list) and len(before) == len(after)


def _pairs(before: list[Any], after: list[Any]) -> list[tuple[Any, Any]]:
    """The messages at the same place in both that are not the same object (a message a
    handler left alone is the one it was given, so only these can differ)."""
    return [(a, b) for a, b in zip(before, after, strict=True) if a is not b]


def _results_cleared(pairs: list[tuple[Any, Any]]) -> int:
    """Tool results, at the same place in both, whose content differs."""
    count = 0
    for a, b in pairs:
        found = {s.block: s for s in result_slots([b])}
        for slot in result_slots([a]):
            other = found.get(slot.block)
            if other is not None and _changed(slot.value([a]), other.value([b])):
                count += 1
    return count


def _call_input(message: dict[str, Any], where: str, position: int) -> Any:
    if where == "item":
        return (message.get("arguments"), message.get("input"))
    if where == "tool_calls":
        fn = message["tool_calls"][position].get("function")
        return fn.get("arguments") if isinstance(fn, dict) else None
    return message["content"][position].get("input")


def _inputs_cleared(pairs: list[tuple[Any, Any]]) -> int:
    """Tool calls, at the same place in both, whose arguments differ."""
    count = 0
    for a, b in pairs:
        found = {(s.where, s.position) for _, s in call_slots([b])}
        for _, slot in call_slots([a]):
            if (slot.where, slot.position) in found and _changed(
                _call_input(a, slot.where, slot.position),
                _call_input(b, slot.where, slot.position),
            ):
                count += 1
    return count


def measure_figures(
    handler: BuiltinHandler, before: Any, after: Any, chars_removed: int | None
) -> CompressFigures:
    """The figures of a step by ``handler`` that turned ``before`` into ``after`` (each the
    text, or the messages handed over and returned)."""
    kind = handler.kind
    figures: dict[str, Any] = {"handler": kind, "chars_removed": chars_removed}
    if kind == CLEAR_TOOL_RESULTS and _aligned(before, after):
        pairs = _pairs(before, after)
        figures["results_cleared"] = _results_cleared(pairs)
        figures["inputs_cleared"] = _inputs_cleared(pairs)
    elif kind == TRUNCATE_MESSAGES:
        if isinstance(before, str):
            figures["messages_truncated"] = int(before != after)
        elif _aligned(before, after):
            figures["messages_truncated"] = sum(
                _changed(a, b) for a, b in _pairs(before, after))
    elif kind == SUMMARIZE:
        if isinstance(before, str) and isinstance(after, str):
            figures["summary_chars"] = len(after)
        elif isinstance(before, list) and isinstance(after, list):
            # The messages left verbatim at the end of the handler's answer, if any.
            same = 0
            while (same < min(len(before), len(after))
                   and not _changed(before[-1 - same], after[-1 - same])):
                same += 1
            from ..accounting import measure_messages

            figures["messages_summarized"] = len(before) - same
            figures["summary_chars"] = measure_messages(after[:len(after) - same]).chars
    return CompressFigures(**figures)
