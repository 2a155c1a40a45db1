"""The input contract, enforced on whatever a policy implementation returns: protected fragments
byte-identical and in their order, no fragment invented; a custom implementation works on copies
(``copied_plan``), may yield nothing but handler calls (``checked_calls``), and its claims are
checked against what the core measured (``checked_claims``)."""

from __future__ import annotations

from collections.abc import Callable, Generator, Mapping, Sequence
from typing import Any

from .accounting import (
    FragmentMeasure,
    TokenCounter,
    measure_fragment,
)
from .content import plain_copy
from .content import snapshot as content_snapshot
from .errors import (
    ContextContractError,
)
from .implementations.audit import audit_report
from .implementations.base import (
    HandlerCall,
    PolicyOutcome,
)
from .plan import HISTORY, ContextPlan, Fragment, changed_fields
from .policy import AuditPolicy, ReducePolicy, TypedPolicy
from .policy.watermark import triggered as policy_triggered
from .report import (
    AuditReport,
    PlanWarning,
    StepReport,
    Totals,
)

__all__ = ["checked_calls", "checked_claims", "copied_plan", "enforce_contract", "measured_outcome"]

def enforce_contract(
    before: Sequence[Fragment],
    after: Sequence[Fragment],
    snapshot: Mapping[str, Any] | None = None,
) -> None:
    """Raise :class:`ContextContractError` unless ``after`` keeps the input contract.

    Protected fragments of ``before`` are all present, byte-identical and in the same order;
    every fragment of ``after`` exists in ``before`` with the same kind; nothing is duplicated.
    ``snapshot`` (:func:`~contextpolicy.content.snapshot` of each protected fragment's content,
    taken before an implementation ran) also catches content changed in place. Content is
    compared as the model sees it, by exact type and value, never by an ``__eq__`` of its own.
    """
    problems: list[str] = []
    if not isinstance(after, (list, tuple)):
        raise ContextContractError(
            f"the policy implementation returned fragments as {type(after).__name__}, not a list"
        )
    by_id = {f.id: f for f in before}
    protected_before = [f.id for f in before if f.is_protected]
    guarded = set(protected_before)
    seen: set[str] = set()
    for i, f in enumerate(after):
        if not isinstance(f, Fragment):
            problems.append(f"fragments[{i}] is a {type(f).__name__}, not a Fragment")
            continue
        if f.id in seen:
            problems.append(f"fragment {f.id!r} appears twice")
        seen.add(f.id)
        old = by_id.get(f.id)
        if old is None:
            problems.append(f"fragment {f.id!r} was invented (it is not in the plan)")
        elif old.kind != f.kind:
            problems.append(f"fragment {f.id!r} changed kind from {old.kind!r} to {f.kind!r}")
        elif f is old:
            continue
        elif f.id in guarded and changed_fields(old, f):
            problems.append(f"protected fragment {f.id!r} was rewritten")
        elif (f.id in guarded) != f.is_protected:
            problems.append(f"fragment {f.id!r} changed its protection")
    protected_after = [f.id for f in after if isinstance(f, Fragment) and f.id in guarded]
    missing = [fid for fid in protected_before if fid not in seen]
    if missing:
        problems.append(f"protected fragment(s) removed: {', '.join(map(repr, missing))}")
    elif protected_after != protected_before:
        problems.append(
            f"protected fragments out of order: {protected_after} (expected {protected_before})"
        )
    for fid, taken in (snapshot or {}).items():
        if content_snapshot(by_id[fid].content()) != taken:
            problems.append(f"protected fragment {fid!r} was changed in place")
    if problems:
        raise ContextContractError(
            "the policy implementation broke the input contract:\n  - " + "\n  - ".join(problems)
        )


def copied_plan(plan: ContextPlan) -> ContextPlan:
    """The plan with every message list copied (plain dicts, lists and strs): what a custom
    implementation receives, so that nothing it does reaches the caller's objects."""

    def copy_of(fragments: list[Fragment]) -> list[Fragment]:
        return [f if f.messages is None else f.with_content(plain_copy(f.messages))
                for f in fragments]

    return ContextPlan(
        fragments=copy_of(plan.fragments),
        original=copy_of(plan.original) if plan.original is not None else None,
    )


def measured_outcome(caller: ContextPlan, given: ContextPlan, outcome: PolicyOutcome
                     ) -> PolicyOutcome:
    """The outcome with every copy (of ``given``) the implementation handed back unchanged
    replaced by the caller's own fragment (of ``caller``), so unchanged fragments share the
    caller's objects."""
    originals = {id(c): f for c, f in zip(given.fragments, caller.fragments, strict=True)}
    fragments = []
    for f in outcome.fragments:
        original = originals.get(id(f))
        fragments.append(original if original is not None and not changed_fields(original, f)
                         else f)
    return PolicyOutcome(
        fragments=fragments, steps=outcome.steps, triggered=outcome.triggered,
        audit=outcome.audit,
    )


def checked_claims(
    policy: TypedPolicy,
    counter: TokenCounter | None,
    plan: ContextPlan,
    outcome: PolicyOutcome,
    before: Totals,
    measures_before: list[FragmentMeasure],
    measures_after: list[FragmentMeasure],
) -> tuple[PolicyOutcome, list[PlanWarning]]:
    """A custom implementation's claims checked against what the core measured: ``triggered``,
    every step's figures and the audit. A claim the measurement contradicts is replaced by
    the measurement, and a ``figure-replaced`` warning says which; a figure that cannot be
    checked is left out (``None``)."""
    warnings: list[PlanWarning] = []

    def replaced(fid: str, message: str) -> None:
        warnings.append(PlanWarning(code="figure-replaced", fragment_id=fid, index=None,
                                    tool_call_id=None, message=message))

    steps = outcome.steps
    if not isinstance(steps, list) or not all(isinstance(s, StepReport) for s in steps):
        got = type(steps).__name__ if not isinstance(steps, list) else ", ".join(
            sorted({type(s).__name__ for s in steps if not isinstance(s, StepReport)})
        )
        raise ContextContractError(
            f"the {policy.mode} implementation returned steps that are not StepReport "
            f"objects ({got})"
        )
    if not isinstance(outcome.triggered, bool):
        raise ContextContractError(
            f"the {policy.mode} implementation returned triggered="
            f"{outcome.triggered!r}, not a bool"
        )
    triggered = (
        policy_triggered(policy, before.chars, before.tokens)
        if isinstance(policy, ReducePolicy) else False
    )
    if outcome.triggered is not triggered:
        replaced("", f"triggered: {outcome.triggered} claimed, {triggered} measured")
    was = {f.id: (f, m) for f, m in zip(plan.fragments, measures_before, strict=True)}
    now = {f.id: (f, m) for f, m in zip(outcome.fragments, measures_after, strict=True)}
    checked: list[StepReport] = []
    last_after: dict[str, tuple[int | None, int | None]] = {}
    for i, step in enumerate(steps):
        # A skipped step may name the history a plan does not hold (a transcript's first
        # turn has none).
        if step.fragment_id not in was and (step.status != "skipped"
                                            or step.fragment_id != HISTORY):
            raise ContextContractError(
                f"step {step.id!r} names fragment {step.fragment_id!r}, which is not in the "
                "plan"
            )
        fix = _measured_step(step, steps[i + 1:], was, now, last_after, checked)
        diffs = {k: v for k, v in fix.items() if getattr(step, k) != v}
        if diffs:
            for key, value in diffs.items():
                replaced(step.fragment_id, f"step {step.id!r}: {key} {getattr(step, key)!r} "
                         f"claimed, {value!r} measured")
            step = step.model_copy(update=diffs)
        checked.append(step)
    audit = outcome.audit
    if isinstance(policy, AuditPolicy):
        audit = _measured_audit(policy, counter, plan, audit, replaced)
    return PolicyOutcome(fragments=outcome.fragments, steps=checked, triggered=triggered,
                         audit=audit), warnings


def checked_calls(gen: Generator[Any, Any, Any], mode: str) -> Generator[Any, Any, Any]:
    """A custom implementation's generator, refused at the first thing it yields that is not a
    :class:`HandlerCall` (sync and async drivers alike)."""
    reply: Any = None
    while True:
        try:
            item = gen.send(reply)
        except StopIteration as stop:
            return stop.value
        if not isinstance(item, HandlerCall):
            gen.close()
            raise ContextContractError(
                f"the {mode} implementation yielded {type(item).__name__}, not a HandlerCall"
            )
        reply = yield item


def _measured_step(
    step: StepReport, rest: list[StepReport],
    was: dict[str, tuple[Fragment, FragmentMeasure]],
    now: dict[str, tuple[Fragment, FragmentMeasure]],
    last_after: dict[str, tuple[int | None, int | None]], checked: list[StepReport],
) -> dict[str, Any]:
    """What the core measured of one step's figures (``rest``: the steps after it;
    ``last_after``: each fragment's figures after the steps before, updated here)."""
    fix: dict[str, Any] = {}
    if step.status == "skipped":
        fix = {k: None for k in ("chars_before", "chars_after", "tokens_before",
                                 "tokens_after", "groups_before", "groups_after")}
        fix["messages_removed"] = 0
    else:
        old, m_old = was[step.fragment_id]
        new, m_new = now.get(step.fragment_id, (None, None))
        later = [s for s in rest if s.fragment_id == step.fragment_id
                 and s.status != "skipped"]
        first = step.fragment_id not in last_after
        b_chars, b_tokens = (m_old.chars, m_old.tokens) if first else (
            last_after[step.fragment_id]
        )
        fix["chars_before"], fix["tokens_before"] = b_chars, b_tokens
        if not later:
            fix["chars_after"] = m_new.chars if m_new is not None else None
            fix["tokens_after"] = m_new.tokens if m_new is not None else None
        elif step.status != "applied":
            fix["chars_after"], fix["tokens_after"] = b_chars, b_tokens
        else:  # between two steps on one fragment: nothing measured it
            fix["chars_after"] = fix["tokens_after"] = None
            fix["groups_before"] = fix["groups_after"] = None
        last_after[step.fragment_id] = (fix["chars_after"], fix["tokens_after"])
        changed = new is None or (new is not old and bool(changed_fields(old, new)))
        if step.status == "applied" and not later and not changed:
            fix["status"], fix["reason"] = "unchanged", "no-change-measured"
        if not later and m_new is not None and fix.get("status", step.status) == "applied":
            removed = max(0, m_old.messages - m_new.messages)
            earlier = sum(s.messages_removed for s in checked
                          if s.fragment_id == step.fragment_id)
            fix["messages_removed"] = max(0, removed - earlier)
        elif fix.get("status", step.status) != "applied":
            fix["messages_removed"] = 0
    return fix


def _measured_audit(policy: AuditPolicy, counter: TokenCounter | None, plan: ContextPlan,
                    audit: Any, replaced: Callable[[str, str], None]) -> AuditReport:
    """The audit measured by the core; a claim it contradicts is said to be replaced."""
    assert plan.original is not None
    measured = audit_report(
        policy, plan.original, plan.fragments,
        chars_of=lambda f: measure_fragment(f, counter).chars,
    )
    claimed = audit.violations if isinstance(audit, AuditReport) else None
    if claimed != measured.violations or (
        isinstance(audit, AuditReport) and audit.passed != measured.passed
    ):
        replaced("", f"audit: {claimed!r} violations claimed, {measured.violations} "
                 "measured")
    return measured
