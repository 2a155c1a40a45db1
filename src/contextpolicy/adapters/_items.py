"""Items an adapter hands the kernel, and the way back to the framework's own objects.

A framework's messages may be dicts (handed to the kernel as they are), pydantic models or
other mappings (measured as their ``model_dump(exclude_unset=True)`` or ``dict``); the result
is mapped back so the framework receives the very objects it sent for every item kept, and a
handler's dict for an item it changed or wrote.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel

from ..content import same
from ._returned import origins

if TYPE_CHECKING:
    from ..report import ContextReport, ContextResult
    from ..stable import CutReport, StableResult

__all__ = ["LastResult", "as_items", "kept_items", "traced_items"]


def as_items(items: Sequence[Any]) -> tuple[list[Any], dict[int, Any]]:
    """``items`` as the kernel reads them, and the way back: the original item of every dict
    this made (by the dict's ``id``; the dicts live as long as the plan that holds them)."""
    messages: list[Any] = []
    back: dict[int, Any] = {}
    for item in items:
        if isinstance(item, dict):
            messages.append(item)
            continue
        if isinstance(item, BaseModel):
            converted: Any = item.model_dump(exclude_unset=True)
        elif isinstance(item, Mapping):
            converted = dict(item)
        else:  # not an item: the kernel names it, with its index, as a plan error
            messages.append(item)
            continue
        back[id(converted)] = item
        messages.append(converted)
    return messages, back


def traced_items(result: StableResult, skip: int, messages: list[Any],
            back: dict[int, Any]) -> list[Any]:
    """The items of a stable cut's input after its first ``skip``: the framework's own object for
    each one that is a given item as it was (``result.sources``: the item itself, or a copy a
    handler left unchanged), the cut's dict otherwise."""
    out: list[Any] = []
    for j in range(skip, len(result.input)):
        item, s = result.input[j], result.sources[j]
        if s >= 0 and (item is messages[s] or same(item, messages[s])):
            item = back.get(id(messages[s]), messages[s])
        out.append(item)
    return out


def kept_items(result: ContextResult, skip: int, messages: list[Any],
               back: dict[int, Any]) -> list[Any]:
    """The items of a result's input after its first ``skip``, as the framework's own objects
    wherever it sent them: every item the policy kept or a compress handler left as it was
    (``_returned``); an item a handler changed or wrote as the handler's dict."""
    # The instructions and tools fragments are assembled first, one system message each; they
    # are not items.
    kept = result.input[skip:]
    out: list[Any] = []
    for item, origin in zip(kept, origins(messages, kept), strict=True):
        if origin is not None and origin.unchanged:
            item = messages[origin.source]
        out.append(back.get(id(item), item))
    return out


class LastResult:
    """The latest call's result, as every adapter shows it: ``last_result``, its report and
    what the stable cut did."""

    last_result: ContextResult | None = None

    @property
    def last_report(self) -> ContextReport | None:
        """The :class:`~contextpolicy.ContextReport` of the latest call (``None`` before it)."""
        return self.last_result.report if self.last_result is not None else None

    @property
    def last_cut(self) -> CutReport | None:
        """What the stable cut did in the latest call (``None`` before it, or with
        ``cut="plain"``)."""
        return getattr(self.last_result, "cut", None)
