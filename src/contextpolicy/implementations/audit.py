"""The default ``audit`` implementation: what did the App change, and was it allowed?

The plan's ``fragments`` are compared with its ``original``. A fragment whose content, role,
kind or protection changed is ``modified``; one missing is ``removed``; a new id is ``added``;
immutable fragments out of their original relative order are ``moved``. A change is allowed
only for ids in ``mutableFragmentIds``, and never for a protected fragment or a change of kind.
The plan itself goes through unchanged; the core raises :class:`ContextAuditError` on any
disallowed change. Metadata is never interpreted, so a metadata change is no change.
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Callable

from ..plan import ContextPlan, Fragment, changed_fields
from ..policy import AuditPolicy
from ..report import AuditChange, AuditReport
from .base import PolicyContext, PolicyOutcome

__all__ = ["audit", "audit_report", "diff_fragments"]


def _stable(sequence: list[int]) -> set[int]:
    """Positions (in ``sequence``) of one longest increasing subsequence: what did not move."""
    tails: list[int] = []
    tail_pos: list[int] = []
    parent = [-1] * len(sequence)
    for i, value in enumerate(sequence):
        k = bisect_left(tails, value)
        if k == len(tails):
            tails.append(value)
            tail_pos.append(i)
        else:
            tails[k] = value
            tail_pos[k] = i
        parent[i] = tail_pos[k - 1] if k else -1
    keep: set[int] = set()
    i = tail_pos[-1] if tail_pos else -1
    while i >= 0:
        keep.add(i)
        i = parent[i]
    return keep


def diff_fragments(
    original: list[Fragment],
    fragments: list[Fragment],
    mutable: set[str],
    chars_of: Callable[[Fragment], int] | None = None,
) -> list[AuditChange]:
    """Every change from ``original`` to ``fragments``, each judged against ``mutable``.

    ``chars_of`` measures a fragment for the ``charsBefore``/``charsAfter`` of a change."""
    before = {f.id: f for f in original}
    after = {f.id: f for f in fragments}
    changes: list[AuditChange] = []

    def judge(fid: str, protected: bool, kind_changed: bool) -> tuple[bool, str]:
        if protected:
            return False, "protected"
        if kind_changed:
            return False, "kind-changed"
        if fid in mutable:
            return True, "mutable"
        return False, "not-mutable"

    def size(f: Fragment) -> int | None:
        return chars_of(f) if chars_of is not None else None

    for f in original:
        if f.id not in after:
            allowed, reason = judge(f.id, f.is_protected, False)
            changes.append(AuditChange(
                fragment_id=f.id, change="removed", allowed=allowed, reason=reason, kind=f.kind,
                chars_before=size(f),
            ))
            continue
        new = after[f.id]
        fields = changed_fields(f, new)
        if fields:
            allowed, reason = judge(f.id, f.is_protected or new.is_protected, "kind" in fields)
            changes.append(AuditChange(
                fragment_id=f.id, change="modified", allowed=allowed, reason=reason,
                kind=new.kind, fields=fields,
                chars_before=size(f), chars_after=size(new),
            ))
    for f in fragments:
        if f.id not in before:
            allowed, reason = judge(f.id, f.is_protected, False)
            changes.append(AuditChange(
                fragment_id=f.id, change="added", allowed=allowed, reason=reason, kind=f.kind,
                chars_after=size(f),
            ))
    # Immutable fragments keep their relative order; anything outside one longest increasing
    # run of original positions has moved.
    order = {f.id: i for i, f in enumerate(original)}
    fixed = [f for f in fragments if f.id in order and f.id not in mutable]
    stable = _stable([order[f.id] for f in fixed])
    for i, f in enumerate(fixed):
        if i not in stable:
            changes.append(AuditChange(
                fragment_id=f.id, change="moved", allowed=False,
                reason="protected" if f.is_protected else "not-mutable", kind=f.kind,
            ))
    return changes


def audit_report(
    policy: AuditPolicy,
    original: list[Fragment],
    fragments: list[Fragment],
    chars_of: Callable[[Fragment], int] | None = None,
) -> AuditReport:
    """The audit of ``fragments`` against ``original``: every change, judged."""
    changes = diff_fragments(original, fragments, set(policy.mutable_fragment_ids), chars_of)
    violations = sum(not c.allowed for c in changes)
    return AuditReport(
        mutable_fragment_ids=list(policy.mutable_fragment_ids), changes=changes,
        violations=violations, passed=violations == 0,
    )


def audit(ctx: PolicyContext) -> PolicyOutcome:
    policy = ctx.policy
    assert isinstance(policy, AuditPolicy)
    plan: ContextPlan = ctx.plan
    assert plan.original is not None
    report = audit_report(policy, plan.original, plan.fragments,
                          chars_of=lambda f: ctx.measure(f).chars)
    for change in report.changes:
        ctx.emit("audit.change", change=change)
    return PolicyOutcome(fragments=list(plan.fragments), audit=report)
