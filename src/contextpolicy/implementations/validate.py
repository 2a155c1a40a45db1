"""The default ``validate`` implementation: the plan goes through unchanged.

Plan and policy validation, assembly, usage and the tool-pairing warnings are the core's work
(they apply to every mode); this mode adds nothing to it and changes nothing.
"""

from __future__ import annotations

from .base import PolicyContext, PolicyOutcome

__all__ = ["validate"]


def validate(ctx: PolicyContext) -> PolicyOutcome:
    return PolicyOutcome(fragments=list(ctx.plan.fragments))
