"""When a reduce policy starts and when it is done: its triggers and its targets, and why a run
that started missed its target.

A trigger fires when usage is strictly above it; a target is met when usage is at or below it
(a trigger with no target of its unit is its own target). Token figures exist only with a
counter: a token watermark without a token figure is never met.
"""

from __future__ import annotations

from collections.abc import Iterable

from .._tables import MISSED_REASONS, missed_code
from .models import ReducePolicy

__all__ = ["missed_reason", "targets_met", "triggered"]


def triggered(policy: ReducePolicy, chars: int, tokens: int | None) -> bool:
    """Usage is strictly above a configured trigger."""
    if policy.trigger_chars is not None and chars > policy.trigger_chars:
        return True
    limit = policy.trigger_tokens
    return limit is not None and tokens is not None and tokens > limit


def targets_met(policy: ReducePolicy, chars: int, tokens: int | None) -> bool:
    """Every configured watermark is met (a target, or its trigger when no target is given)."""
    wc, wt = policy.watermark_chars, policy.watermark_tokens
    if wc is not None and chars > wc:
        return False
    return not (wt is not None and (tokens is None or tokens > wt))


def missed_reason(policy: ReducePolicy, fixed_chars: int, fixed_tokens: int | None,
                  steps: Iterable[tuple[str, str]]) -> str:
    """Why a triggered run missed its target (a report's ``missedReason``).

    ``fixed_chars`` and ``fixed_tokens`` measure what no step may reduce (the protected
    fragments and every fragment no step names; ``None``: not counted); ``steps`` gives each
    step's ``(status, reason)``. The reasons in order of precedence are ``MISSED_REASONS``."""
    wc, wt = policy.watermark_chars, policy.watermark_tokens
    over = (wc is not None and fixed_chars > wc) or (
        wt is not None and fixed_tokens is not None and fixed_tokens > wt)
    failed = floor = False
    for status, reason in steps:
        failed = failed or status == "failed"
        floor = floor or reason == "keep-groups-floor"
    return MISSED_REASONS[missed_code(over, failed, floor) - 1]
