"""When a reduce policy starts and when it is done: its triggers and its targets.

A trigger fires when usage is strictly above it; a target is met when usage is at or below it
(a trigger with no target of its unit is its own target). Token figures exist only with a
counter: a token watermark without a token figure is never met.
"""

from __future__ import annotations

from .models import ReducePolicy

__all__ = ["targets_met", "triggered"]


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
