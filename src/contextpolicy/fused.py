"""The fused path's records: what one kernel call (``_kernel.reduce_plan``, ``reduce_transcript``,
``reduce_lines``) measured, made into the report (``fused_report``) or straight into its JSON
(``fused_report_json``); and the warnings and watermarks every report shares."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from . import _kernel
from ._build import built
from ._records import FusedRecord
from ._unknown_roles import unknown_role_message
from .plan import PROTECTED_KINDS, ContextPlan, Fragment
from .policy import ReducePolicy, TypedPolicy
from .policy.watermark import missed_reason, targets_met
from .prepared import (
    PreparedPolicy,
)
from .report import (
    PlanWarning,
    ReportData,
    StepReport,
    Totals,
    flat_json,
)

__all__ = [
    "fused_missed_reason", "fused_records", "fused_report", "fused_report_json",
    "kernel_warning", "pairing_warning", "unknown_role_warning", "watermarks",
]

PAIRING_MESSAGES = {
    "orphan-tool-result": "tool result {id} has no earlier call in this fragment",
    "unanswered-tool-call": "tool call {id} has no later result in this fragment",
}


def pairing_warning(fid: str, index: int, code: str, cid: str | None) -> PlanWarning:
    return built(PlanWarning, {
        "code": code, "fragment_id": fid, "index": index, "tool_call_id": cid,
        "message": PAIRING_MESSAGES[code].format(id=repr(cid) if cid else "(no id)"),
    })


def unknown_role_warning(fid: str, index: int, role: str, count: int) -> PlanWarning:
    return built(PlanWarning, {
        "code": "unknown-role", "fragment_id": fid, "index": index, "tool_call_id": None,
        "message": unknown_role_message(role, index, count),
    })


def kernel_warning(fid: str, index: int, code: str, detail: Any) -> PlanWarning:
    """A warning of the kernel's records: ``detail`` is ``(role, messages)`` for an
    ``unknown-role``, the tool call id for a pairing warning."""
    if code == "unknown-role":
        return unknown_role_warning(fid, index, *detail)
    return pairing_warning(fid, index, code, detail)


def watermarks(policy: TypedPolicy, after: Totals) -> tuple[Any, Any, bool | None]:
    """A report's ``trigger``, ``target`` and ``targetReached``."""
    if type(policy) is not ReducePolicy:
        return None, None, None
    return ((policy.trigger_chars, policy.trigger_tokens),
            (policy.watermark_chars, policy.watermark_tokens),
            targets_met(policy, after.chars, after.tokens))


def fused_missed_reason(prepared: PreparedPolicy, raw: FusedRecord) -> str | None:
    """The ``missedReason`` of a :func:`_kernel.reduce_plan` (or ``reduce_transcript``) run,
    from its records."""
    policy = prepared.policy
    if type(policy) is not ReducePolicy or not raw.triggered or raw.watermark_met:
        return None
    named = {step.fragment_id for step in policy.steps}
    fixed = sum(a.chars for fid, a in zip(raw.ids, raw.after, strict=True) if fid not in named)
    return missed_reason(policy, fixed, None, ((d.status, d.reason) for d in raw.steps))


def fused_records(
    plan: ContextPlan, prepared: PreparedPolicy, raw: FusedRecord
) -> tuple[list[Fragment], list[Fragment] | None, ReportData]:
    olds = plan.fragments
    fragments = [f if k is None else f.with_content(k)
                 for f, k in zip(olds, raw.kept, strict=True)]
    kinds = [(f.kind, f.kind in PROTECTED_KINDS or bool(f.protected)) for f in olds]
    return fragments, plan.original, fused_report(prepared, raw, kinds)


def fused_report(
    prepared: PreparedPolicy, raw: FusedRecord, kinds: Sequence[tuple[str, bool]]
) -> ReportData:
    """The report records of a :func:`_kernel.reduce_plan` (or ``reduce_transcript``) run:
    ``kinds`` gives each fragment's kind and protection."""
    ids = raw.ids
    policy = prepared.policy
    records = [
        (fid, kind, protected, b.chars, a.chars, None, None, b.messages, a.messages,
         k is not None)
        for fid, (kind, protected), b, a, k in zip(ids, kinds, raw.before, raw.after, raw.kept,
                                                   strict=True)
    ]
    steps = [
        built(StepReport, {
            "id": step.id, "kind": "trim", "fragment_id": step.fragment_id,
            "target_chars": step.target_chars, "status": d.status, "reason": d.reason,
            "chars_before": d.chars_before, "chars_after": d.chars_after,
            "groups_before": d.groups_before, "groups_after": d.groups_after,
            "messages_removed": d.messages_removed,
        })
        for step, d in zip(policy.steps if type(policy) is ReducePolicy else (), raw.steps,
                           strict=True)
    ]
    n = len(ids)
    before_t = Totals(raw.chars_before, None, raw.messages_before, n, raw.opaque_before)
    after_t = Totals(raw.chars_after, None, raw.messages_after, n, raw.opaque_after)
    trigger, target, target_reached = watermarks(policy, after_t)
    return ReportData(
        mode=policy.mode, kernel=_kernel.IMPLEMENTATION, implementation="default",
        triggered=raw.triggered, trigger=trigger, target=target, before=before_t,
        after=after_t, target_reached=target_reached, steps=steps, fragments=records,
        warnings=[kernel_warning(ids[w.fragment], w.message_index, w.code, w.detail)
                  for w in raw.warnings],
        audit=None, missed_reason=fused_missed_reason(prepared, raw),
    )


def fused_report_json(
    prepared: PreparedPolicy, raw: FusedRecord, kinds: Sequence[tuple[str, bool]]
) -> dict[str, Any]:
    """``fused_report(prepared, raw, kinds).json()``, built straight from the kernel's records
    (what the JSONL runner writes for ``--report``; a test holds the two to each other)."""
    ids = raw.ids
    policy = prepared.policy
    n = len(ids)
    if type(policy) is ReducePolicy:
        trigger: Any = {"chars": policy.trigger_chars, "tokens": policy.trigger_tokens}
        target: Any = {"chars": policy.watermark_chars, "tokens": policy.watermark_tokens}
        reached: Any = raw.watermark_met
        steps = [
            {"id": step.id, "kind": "trim", "fragmentId": step.fragment_id,
             "status": d.status, "reason": d.reason, "message": None,
             "charsBefore": d.chars_before, "charsAfter": d.chars_after,
             "tokensBefore": None, "tokensAfter": None, "targetChars": step.target_chars,
             "groupsBefore": d.groups_before, "groupsAfter": d.groups_after,
             "messagesRemoved": d.messages_removed, "handlerId": None, "handlerFigures": None}
            for step, d in zip(policy.steps, raw.steps, strict=True)
        ]
    else:
        trigger = target = reached = None
        steps = []
    return {
        "mode": policy.mode, "kernel": _kernel.IMPLEMENTATION, "implementation": "default",
        "triggered": raw.triggered, "trigger": trigger, "target": target,
        "before": {"chars": raw.chars_before, "tokens": None,
                   "messages": raw.messages_before, "fragments": n,
                   "opaqueParts": raw.opaque_before, "tokensExact": None,
                   "tokensReported": None},
        "after": {"chars": raw.chars_after, "tokens": None, "messages": raw.messages_after,
                  "fragments": n, "opaqueParts": raw.opaque_after, "tokensExact": None,
                  "tokensReported": None},
        "targetReached": reached,
        "missedReason": fused_missed_reason(prepared, raw),
        "steps": steps,
        "fragments": [
            {"id": fid, "kind": kind, "protected": protected, "charsBefore": b.chars,
             "charsAfter": a.chars, "tokensBefore": None, "tokensAfter": None,
             "messagesBefore": b.messages, "messagesAfter": a.messages, "changed": k is not None}
            for fid, (kind, protected), b, a, k in zip(ids, kinds, raw.before, raw.after,
                                                       raw.kept, strict=True)
        ],
        "warnings": [flat_json(kernel_warning(ids[w.fragment], w.message_index, w.code, w.detail))
                     for w in raw.warnings],
        "audit": None,
        "counter": None,
        "counterExact": None,
    }
