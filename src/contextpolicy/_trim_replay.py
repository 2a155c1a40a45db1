"""The earlier calls of a stable cut's replay, for a policy that only trims the history by
chars, run from one measure of the messages instead of a plan each.

A stable cut replays its policy at every earlier call above the trigger (see
:mod:`contextpolicy.stable`). When every step is a trim of ``history`` by chars (the policy's
:attr:`~contextpolicy.prepared.PreparedPolicy.fast_path`, history only), such a run keeps the
plan's protected messages and drops the oldest of the history: the kept state is the leading
system messages and a contiguous run of the given messages. A run then needs no plan, no
result and no new measure: the history is a range of the messages measured once
(``Measure.tail(start, stop)``), and each trim cuts it with the kernel's own ``Measure.cut``, as
the fused reduce runs a trim (``_trim_step``): skipped unless the trigger fired and the plan is
above the policy's target, a history without messages skipped. The final call, whose result
the caller gets, runs the policy as any call does. A property test holds every call equal to
the persisted reduction either way.
"""

from __future__ import annotations

from bisect import bisect_right
from typing import Any

import numpy as np

from . import _kernel
from ._tables import FLAG_OPENS_TURN
from .prepared import PreparedPolicy

__all__ = ["TrimRuns"]


class TrimRuns:
    """The runs of one replay: ``whole`` is the measure of ``items`` (the given messages),
    ``cum`` their chars summed (``cum[i]``: the chars of ``items[:i]``), ``fixed`` the chars of
    what the plan holds beside them (instructions, tools, lead messages)."""

    __slots__ = ("cum", "fixed", "items", "openers", "steps", "trigger", "watermark", "whole")

    def __init__(self, prepared: PreparedPolicy, whole: Any, items: list[Any], flags: Any,
                 cum: list[int], fixed: int, question: bool) -> None:
        fast = prepared.fast_path
        assert fast is not None
        self.steps, self.trigger, self.watermark = fast.steps, fast.trigger_chars, \
            fast.watermark_chars
        self.whole, self.items, self.cum, self.fixed = whole, items, cum, fixed
        # The messages that open a turn: the question is the last of them after the head.
        self.openers: list[int] = (
            np.flatnonzero(flags & FLAG_OPENS_TURN).tolist() if question else [])

    @staticmethod
    def applies(prepared: PreparedPolicy) -> bool:
        """``prepared`` is a reduce whose steps are all trims of the history by chars."""
        fast = prepared.fast_path
        return fast is not None and fast.history_only and bool(fast.steps)

    def run(self, src: list[int], chars: int, upto: int, p: int,
            ) -> tuple[list[int], int, bool] | None:
        """The run at the call before ``items[p]`` on the kept state ``src`` (the index of each
        kept message, none changed) of ``chars`` chars, which covers ``items[:upto]``: the
        state after it, its chars and whether the run cut anything. ``None`` when the history
        is not one range of the messages (the caller runs the plan)."""
        items, cum = self.items, self.cum
        given = [*src, *range(upto, p)]
        head = _head(items, given)
        lo = given[head] if head < len(given) else p
        if len(given) - head != p - lo:
            return None
        hi = p  # the history ends at the question, the last message after the head opening one
        k = bisect_right(self.openers, p - 1) - 1
        if k >= 0 and self.openers[k] >= lo:
            hi = self.openers[k]
        total = self.fixed + chars + cum[p] - cum[upto]
        fired = 0 <= self.trigger < total
        start = lo
        for _fid, grouping, keep, target in self.steps:
            if not fired or not 0 <= self.watermark < total or start == hi:
                continue
            cut = self.whole.tail(start, hi).cut(items[start:hi], grouping, keep, target)[1]
            total -= cum[start + cut] - cum[start]
            start += cut
        return [*given[:head], *range(start, p)], total - self.fixed, start != lo


def _head(items: list[Any], given: list[int]) -> int:
    """How many of the messages ``given`` (indices into ``items``) lead as system messages, as
    ``agent_plan`` splits them (reading a few more each time, not all)."""
    n = len(given)
    m = min(n, 4)
    while True:
        head = _kernel.split_transcript(list(map(items.__getitem__, given[:m])))[0]
        if head < m or m == n:
            return int(head)
        m = min(n, m * 4)
