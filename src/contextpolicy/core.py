"""The core: run a policy implementation, then enforce the input contract and measure.

Whichever implementation runs (the default ``validate``/``reduce``/``audit`` or the caller's),
the core checks afterwards that protected fragments are byte-identical and in their order and
that no fragment was invented, measures the result itself, and assembles the model input. The
final hard budget is a separate core call, :func:`check_input_budget`.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import AsyncIterator, Callable, Generator, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from . import _kernel
from ._build import built
from ._unknown_roles import unknown_role_message
from .accounting import (
    FragmentMeasure,
    TokenCounter,
    as_counter,
    assemble,
    input_tokens,
    measure_fragment,
    measure_messages,
)
from .content import plain_copy
from .content import snapshot as content_snapshot
from .errors import (
    ContextAuditError,
    ContextCancelledError,
    ContextContractError,
    ContextPlanError,
    ContextPolicyError,
    InputBudgetError,
    Issue,
)
from .handlers._base import BuiltinHandler
from .implementations import DEFAULT_IMPLEMENTATIONS, Implementation
from .implementations.audit import audit_report
from .implementations.base import (
    CancelLike,
    CompressRequest,
    HandlerCall,
    HandlerReply,
    PolicyContext,
    PolicyOutcome,
)
from .plan import HISTORY, PROTECTED_KINDS, ContextPlan, Fragment, as_plan, changed_fields
from .policy import AuditPolicy, ReducePolicy, TypedPolicy
from .policy.validation import dedupe, policy_issues, references, uses_tokens
from .policy.watermark import missed_reason, targets_met
from .policy.watermark import triggered as policy_triggered
from .prepared import (
    PreparedPolicy,
    check_arguments,
    is_async_callable,
    plan_refs,
    prepared_for_call,
    tokens_without_counter,
)
from .report import (
    AuditReport,
    CompressFigures,
    ContextEvent,
    ContextResult,
    PlanWarning,
    ReportData,
    ReportModel,
    StepReport,
    Totals,
    Usage,
    flat_json,
    given_records,
    lazy_result,
)

__all__ = [
    "aprocess_context",
    "astream_context",
    "check_input_budget",
    "enforce_contract",
    "process_context",
]

_PAIRING_MESSAGES = {
    "orphan-tool-result": "tool result {id} has no earlier call in this fragment",
    "unanswered-tool-call": "tool call {id} has no later result in this fragment",
}


class _Await:
    """Yielded by the run when a custom implementation returned an awaitable."""

    def __init__(self, awaitable: Any) -> None:
        self.awaitable = awaitable


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


def _copied(plan: ContextPlan) -> ContextPlan:
    """The plan with every message list copied (plain dicts, lists and strs): what a custom
    implementation receives, so that nothing it does reaches the caller's objects."""

    def copy_of(fragments: list[Fragment]) -> list[Fragment]:
        return [f if f.messages is None else f.with_content(plain_copy(f.messages))
                for f in fragments]

    return ContextPlan(
        fragments=copy_of(plan.fragments),
        original=copy_of(plan.original) if plan.original is not None else None,
    )


def _usage(fragments: Sequence[Fragment], measures: Sequence[FragmentMeasure],
           counter: TokenCounter | None) -> Totals:
    chars = messages = opaque = 0
    for m in measures:
        chars += m.chars
        messages += m.messages
        opaque += m.opaque_parts
    return Totals(chars, input_tokens(fragments, measures, counter), messages, len(measures),
                  opaque)


class _Run:
    """One ``process_context`` run, as a generator that both the sync and async drivers step."""

    def __init__(
        self,
        plan: Any,
        policy: Any,
        *,
        handlers: Mapping[str, Callable[[CompressRequest], Any]] | None,
        counter: Any,
        cancel: CancelLike | None,
        on_step_error: str,
        implementations: Mapping[str, Implementation] | None,
        is_async: bool,
        sink: Callable[[ContextEvent], None] | None,
        on_event: Any = None,
        prepared: PreparedPolicy | None = None,
    ) -> None:
        # on_event: the caller's listener, checked here with the other arguments (the sink may
        # be a queue in front of it).
        if (handlers is not None or cancel is not None or on_event is not None
                or implementations is not None or on_step_error != "continue"):
            check_arguments(handlers, cancel, on_step_error, implementations, on_event)
        self.plan = plan if type(plan) is ContextPlan else as_plan(plan)
        if prepared is None:
            prepared = prepared_for_call(policy, handlers, counter)
        if prepared is None or not prepared.fits(self.plan, is_async):
            prepared = self._check_policy(policy, handlers, counter, is_async)
        self.prepared = prepared
        self.policy: TypedPolicy = prepared.policy
        self.counter: TokenCounter | None = prepared.counter
        self.handlers = prepared.handlers
        mode = self.policy.mode
        self.custom = implementations is not None and mode in implementations
        self.impl = (implementations[mode] if implementations is not None and self.custom
                     else DEFAULT_IMPLEMENTATIONS[mode])
        self.is_async = is_async
        self.sink = sink
        self.cancel = cancel
        self.on_step_error = on_step_error
        # The calls of built-in handlers, by step id: (handler, content given, value returned),
        # so that their steps' figures are measured from what went in and came out.
        self.calls: dict[str, tuple[BuiltinHandler, Any, Any]] = {}
        self._figures: dict[tuple[str, int | None], CompressFigures] = {}

    def _check_policy(
        self, policy: Any, handlers: Any, counter: Any, is_async: bool
    ) -> PreparedPolicy:
        """Every problem of the policy against this plan, these handlers and this counter at
        once (raised), or the prepared policy."""
        if isinstance(policy, PreparedPolicy):
            policy, handlers, counter = policy.policy, policy.handlers, policy.counter
        tc = as_counter(counter)
        given = dict(handlers or {})
        audit = (isinstance(policy, Mapping) and policy.get("mode") == "audit") or isinstance(
            policy, AuditPolicy
        )
        typed, issues = policy_issues(policy, plan_refs(self.plan, audit), given)
        token_key = uses_tokens(policy)
        if token_key is not None and tc is None:
            issues.append(tokens_without_counter(token_key))
        if not is_async:
            for ref in references(typed if typed is not None else policy):
                handler = given.get(ref.name) if ref.what == "handler" else None
                if handler is not None and is_async_callable(handler):
                    issues.append(Issue(
                        ref.path, f"handler {ref.name!r} is a coroutine function; use "
                        "aprocess_context or astream_context", "async-handler",
                    ))
        if issues:
            raise ContextPolicyError(dedupe(issues))
        assert typed is not None
        if isinstance(typed, AuditPolicy) and self.plan.original is None:
            raise ContextPlanError(
                "an audit needs the plan's original fragments (ContextPlan(original=...))",
                path="original", code="missing-original",
            )
        return PreparedPolicy.of_valid(typed, given, tc)

    def emit(self, event: str, data: dict[str, Any]) -> None:
        # Event payloads are JSON figures; they are only built when someone listens.
        if self.sink is not None:
            step = data.get("step")
            if self.calls and not self.custom and isinstance(step, StepReport):
                # A built-in handler's step says what it did in its event as in the report.
                figures = self._handler_figures(step)
                if figures is not None:
                    data = {**data, "step": step.model_copy(update={"handler_figures": figures})}
            self.sink(ContextEvent(event, {k: _json_of(v) for k, v in data.items()}))

    def steps(self) -> Generator[Any, Any, ContextResult]:
        plan, policy = self.plan, self.policy
        listening = self.sink is not None
        ctx = PolicyContext(
            plan, policy, self.handlers, self.counter, self.cancel, self.on_step_error, self.emit,
            listening,
        )
        ctx.check_cancel()
        if listening:
            self.emit("context.started", {"mode": policy.mode, "fragments": len(plan.fragments),
                                          "kernel": _kernel.IMPLEMENTATION})
        measures_before = [ctx.measure(f) for f in plan.fragments]
        before = _usage(plan.fragments, measures_before, self.counter)
        if listening:
            self.emit("context.measured", {"usage": before})
        snapshot = None
        if self.custom:
            # A custom implementation works on copies: whatever it does to them, the caller's
            # plan is untouched, and protected content is checked against a snapshot.
            snapshot = {f.id: content_snapshot(f.content()) for f in plan.fragments
                        if f.is_protected}
            ctx = PolicyContext(
                _copied(plan), policy, self.handlers, self.counter, self.cancel,
                self.on_step_error, self.emit, listening,
            )
        outcome = yield from self._run_impl(ctx)
        if not isinstance(outcome, PolicyOutcome):
            raise ContextContractError(
                f"the {policy.mode} implementation returned {type(outcome).__name__}, "
                "not a PolicyOutcome"
            )
        ctx.check_cancel()
        enforce_contract(plan.fragments, outcome.fragments, snapshot)
        warnings: list[PlanWarning] = []
        if self.custom:
            outcome = self._measured_outcome(ctx.plan, outcome)
            # Figures are measured, never taken from an implementation: only fragments the core
            # measured itself are reused.
            known = {id(f): m for f, m in zip(plan.fragments, measures_before, strict=True)}
            measures_after = [
                known[id(f)] if id(f) in known else measure_fragment(f, self.counter)
                for f in outcome.fragments
            ]
            after = _usage(outcome.fragments, measures_after, self.counter)
            outcome, warnings = self._checked_claims(
                plan, outcome, before, measures_before, measures_after
            )
        else:
            measures_after = [ctx.measure(f) for f in outcome.fragments]
            after = _usage(outcome.fragments, measures_after, self.counter)
        if self.calls or self.custom:
            outcome = self._with_handler_figures(outcome, warnings)
        data = self._report(plan, outcome, before, after, measures_before, measures_after,
                            warnings)
        fragments = list(outcome.fragments)
        result = lazy_result(ContextResult, assemble(fragments), given_records,
                       (fragments, plan.original, data))
        if listening:
            self.emit("context.completed", {"before": before, "after": after,
                                            "triggered": data.triggered,
                                            "targetReached": data.target_reached,
                                            "missedReason": data.missed_reason})
        if data.audit is not None and not data.audit.passed:
            raise ContextAuditError(result.report)
        return result

    def _measured_outcome(self, given: ContextPlan, outcome: PolicyOutcome) -> PolicyOutcome:
        """The outcome with every copy the implementation handed back unchanged replaced by the
        caller's own fragment (so unchanged fragments share the caller's objects)."""
        originals = {id(c): f for c, f in zip(given.fragments, self.plan.fragments, strict=True)}
        fragments = []
        for f in outcome.fragments:
            original = originals.get(id(f))
            fragments.append(original if original is not None and not changed_fields(original, f)
                             else f)
        return PolicyOutcome(
            fragments=fragments, steps=outcome.steps, triggered=outcome.triggered,
            audit=outcome.audit,
        )

    def _checked_claims(
        self,
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
                f"the {self.policy.mode} implementation returned steps that are not StepReport "
                f"objects ({got})"
            )
        if not isinstance(outcome.triggered, bool):
            raise ContextContractError(
                f"the {self.policy.mode} implementation returned triggered="
                f"{outcome.triggered!r}, not a bool"
            )
        policy = self.policy
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
            fix: dict[str, Any] = {}
            if step.status == "skipped":
                fix = {k: None for k in ("chars_before", "chars_after", "tokens_before",
                                         "tokens_after", "groups_before", "groups_after")}
                fix["messages_removed"] = 0
            else:
                old, m_old = was[step.fragment_id]
                new, m_new = now.get(step.fragment_id, (None, None))
                later = [s for s in steps[i + 1:] if s.fragment_id == step.fragment_id
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
            diffs = {k: v for k, v in fix.items() if getattr(step, k) != v}
            if diffs:
                for key, value in diffs.items():
                    replaced(step.fragment_id, f"step {step.id!r}: {key} {getattr(step, key)!r} "
                             f"claimed, {value!r} measured")
                step = step.model_copy(update=diffs)
            checked.append(step)
        audit = outcome.audit
        if isinstance(policy, AuditPolicy):
            assert plan.original is not None
            counter = self.counter
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
            audit = measured
        return PolicyOutcome(fragments=outcome.fragments, steps=checked, triggered=triggered,
                             audit=audit), warnings

    def _with_handler_figures(
        self, outcome: PolicyOutcome, warnings: list[PlanWarning]
    ) -> PolicyOutcome:
        """The outcome with each applied compress step by a built-in handler carrying its
        figures, measured from the handler's input and output; a figure an implementation
        claimed is replaced by the measurement (``figure-replaced``)."""
        steps: list[StepReport] = []
        for step in outcome.steps:
            measured = self._handler_figures(step)
            if step.handler_figures != measured:
                if step.handler_figures is not None:
                    warnings.append(PlanWarning(
                        code="figure-replaced", fragment_id=step.fragment_id, index=None,
                        tool_call_id=None, message=f"step {step.id!r}: handlerFigures "
                        f"{step.handler_figures!r} claimed, {measured!r} measured",
                    ))
                step = step.model_copy(update={"handler_figures": measured})
            steps.append(step)
        return PolicyOutcome(fragments=outcome.fragments, steps=steps,
                             triggered=outcome.triggered, audit=outcome.audit)

    def _handler_figures(self, step: StepReport) -> CompressFigures | None:
        """The figures of an applied compress step by a built-in handler, measured from what
        the handler was given and returned (once per step); ``None`` for any other step."""
        call = self.calls.get(step.id)
        if call is None or step.kind != "compress" or step.status != "applied":
            return None
        removed = (step.chars_before - step.chars_after
                   if step.chars_before is not None and step.chars_after is not None else None)
        key = (step.id, removed)
        found = self._figures.get(key)
        if found is None:
            from .handlers._figures import measure_figures

            handler, given, returned = call
            found = self._figures[key] = measure_figures(handler, given, returned, removed)
        return found

    def _run_impl(self, ctx: PolicyContext) -> Generator[Any, Any, Any]:
        value = self.impl(ctx)
        if inspect.isgenerator(value):
            gen = _checked_calls(value, self.policy.mode) if self.custom else value
            if any(isinstance(h, BuiltinHandler) for h in self.handlers.values()):
                gen = _recorded(gen, self.calls)
            value = yield from gen
        elif inspect.isawaitable(value):
            if not self.is_async:
                close = getattr(value, "close", None)
                if close is not None:
                    close()
                raise ContextPolicyError(
                    f"the {self.policy.mode} implementation is async; use aprocess_context",
                    path="implementations", code="async-implementation",
                )
            value = yield _Await(value)
        return value

    def _report(
        self,
        plan: ContextPlan,
        outcome: PolicyOutcome,
        before: Totals,
        after: Totals,
        measures_before: list[FragmentMeasure],
        measures_after: list[FragmentMeasure],
        warnings: list[PlanWarning],
    ) -> ReportData:
        policy = self.policy
        olds, news = plan.fragments, outcome.fragments
        fragments = []
        aligned = len(olds) == len(news) and all(
            a is b or a.id == b.id for a, b in zip(olds, news, strict=True)
        )
        if aligned:  # every fragment kept, in order (validate and reduce never remove one)
            pairs: Any = zip(olds, measures_before, news, measures_after, strict=True)
        else:
            after_by_id = {f.id: (f, m) for f, m in zip(news, measures_after, strict=True)}
            pairs = ((f, m, *after_by_id.get(f.id, (None, None)))
                     for f, m in zip(olds, measures_before, strict=True))
        for f, m, new, a in pairs:
            fragments.append((
                f.id, f.kind, f.kind in PROTECTED_KINDS or bool(f.protected), m.chars,
                a.chars if a else None, m.tokens, a.tokens if a else None, m.messages,
                a.messages if a else None, new is not f,
            ))
        # Roles the accounting does not know first (they explain what a trim could not do), then
        # the tool pairing, then what the core replaced.
        found: list[PlanWarning] = []
        for f, m in zip(news, measures_after, strict=True):
            if f.messages is not None and m.kernel is not None and m.kernel.unknown_role:
                for index, role, count in m.kernel.unknown_roles(f.messages, 0, f.id):
                    found.append(_unknown_role_warning(f.id, index, role, count))
        for f, m in zip(news, measures_after, strict=True):
            if f.messages is None or not m.has_tool_traffic:
                continue
            for index, code, cid in m.kernel.pairing(f.messages):
                found.append(_pairing_warning(f.id, index, code, cid))
        found.extend(warnings)
        trigger, target, target_reached = _watermarks(policy, after)
        missed = None
        if type(policy) is ReducePolicy and outcome.triggered and target_reached is False:
            named = {step.fragment_id for step in policy.steps}
            rest = [(f, m) for f, m in zip(news, measures_after, strict=True)
                    if f.id not in named]
            fixed_tokens = None if policy.watermark_tokens is None else input_tokens(
                [f for f, _ in rest], [m for _, m in rest], self.counter)
            missed = missed_reason(policy, sum(m.chars for _, m in rest), fixed_tokens,
                                   ((s.status, s.reason) for s in outcome.steps))
        return ReportData(
            mode=policy.mode,
            kernel=_kernel.IMPLEMENTATION,
            implementation=(
                f"custom:{getattr(self.impl, '__qualname__', type(self.impl).__name__)}"
                if self.custom else "default"
            ),
            triggered=outcome.triggered,
            trigger=trigger,
            target=target,
            before=before,
            after=after,
            target_reached=target_reached,
            steps=outcome.steps,
            fragments=fragments,
            warnings=found,
            audit=outcome.audit,
            counter=self.counter.name if self.counter is not None else None,
            missed_reason=missed,
        )


def _pairing_warning(fid: str, index: int, code: str, cid: str | None) -> PlanWarning:
    return built(PlanWarning, {
        "code": code, "fragment_id": fid, "index": index, "tool_call_id": cid,
        "message": _PAIRING_MESSAGES[code].format(id=repr(cid) if cid else "(no id)"),
    })


def _unknown_role_warning(fid: str, index: int, role: str, count: int) -> PlanWarning:
    return built(PlanWarning, {
        "code": "unknown-role", "fragment_id": fid, "index": index, "tool_call_id": None,
        "message": unknown_role_message(role, index, count),
    })


def _kernel_warning(fid: str, index: int, code: str, detail: Any) -> PlanWarning:
    """A warning of the kernel's records: ``detail`` is ``(role, messages)`` for an
    ``unknown-role``, the tool call id for a pairing warning."""
    if code == "unknown-role":
        return _unknown_role_warning(fid, index, *detail)
    return _pairing_warning(fid, index, code, detail)


def _watermarks(policy: TypedPolicy, after: Totals) -> tuple[Any, Any, bool | None]:
    """A report's ``trigger``, ``target`` and ``targetReached``."""
    if type(policy) is not ReducePolicy:
        return None, None, None
    return ((policy.trigger_chars, policy.trigger_tokens),
            (policy.watermark_chars, policy.watermark_tokens),
            targets_met(policy, after.chars, after.tokens))


def fused_missed_reason(prepared: PreparedPolicy, raw: tuple[Any, ...]) -> str | None:
    """The ``missedReason`` of a :func:`_kernel.reduce_plan` (or ``reduce_transcript``) run,
    from its records."""
    policy = prepared.policy
    fired, _, after, _, done, _, _, ids, totals = raw
    if type(policy) is not ReducePolicy or not fired or totals[8]:
        return None
    named = {step.fragment_id for step in policy.steps}
    fixed = sum(a[0] for fid, a in zip(ids, after, strict=True) if fid not in named)
    return missed_reason(policy, fixed, None, ((d[0], d[1]) for d in done))


def _fused_records(
    plan: ContextPlan, prepared: PreparedPolicy, raw: tuple[Any, ...]
) -> tuple[list[Fragment], list[Fragment] | None, ReportData]:
    olds = plan.fragments
    kept = raw[3]
    fragments = [f if k is None else f.with_content(k) for f, k in zip(olds, kept, strict=True)]
    kinds = [(f.kind, f.kind in PROTECTED_KINDS or bool(f.protected)) for f in olds]
    return fragments, plan.original, fused_report(prepared, raw, kinds)


def fused_report(
    prepared: PreparedPolicy, raw: tuple[Any, ...], kinds: Sequence[tuple[str, bool]]
) -> ReportData:
    """The report records of a :func:`_kernel.reduce_plan` (or ``reduce_transcript``) run:
    ``kinds`` gives each fragment's kind and protection."""
    fired, before, after, kept, done, found, _input, ids, totals = raw
    policy = prepared.policy
    records = [
        (fid, kind, protected, b[0], a[0], None, None, b[1], a[1], k is not None)
        for fid, (kind, protected), b, a, k in zip(ids, kinds, before, after, kept, strict=True)
    ]
    steps = [
        built(StepReport, {
            "id": step.id, "kind": "trim", "fragment_id": step.fragment_id,
            "target_chars": step.target_chars, "status": d[0], "reason": d[1],
            "chars_before": d[2], "chars_after": d[3], "groups_before": d[4],
            "groups_after": d[5], "messages_removed": d[6],
        })
        for step, d in zip(policy.steps if type(policy) is ReducePolicy else (), done,
                           strict=True)
    ]
    n = len(ids)
    before_t = Totals(totals[0], None, totals[1], n, totals[2])
    after_t = Totals(totals[3], None, totals[4], n, totals[5])
    trigger, target, target_reached = _watermarks(policy, after_t)
    return ReportData(
        mode=policy.mode, kernel=_kernel.IMPLEMENTATION, implementation="default",
        triggered=fired, trigger=trigger, target=target, before=before_t, after=after_t,
        target_reached=target_reached, steps=steps, fragments=records,
        warnings=[_kernel_warning(ids[i], index, code, detail)
                  for i, index, code, detail in found],
        audit=None, missed_reason=fused_missed_reason(prepared, raw),
    )


def fused_report_json(
    prepared: PreparedPolicy, raw: tuple[Any, ...], kinds: Sequence[tuple[str, bool]]
) -> dict[str, Any]:
    """``fused_report(prepared, raw, kinds).json()``, built straight from the kernel's records
    (what the JSONL runner writes for ``--report``; a test holds the two to each other)."""
    fired, before, after, kept, done, found, _input, ids, totals = raw
    policy = prepared.policy
    n = len(ids)
    if type(policy) is ReducePolicy:
        trigger: Any = {"chars": policy.trigger_chars, "tokens": policy.trigger_tokens}
        target: Any = {"chars": policy.watermark_chars, "tokens": policy.watermark_tokens}
        reached: Any = totals[8]
        steps = [
            {"id": step.id, "kind": "trim", "fragmentId": step.fragment_id, "status": d[0],
             "reason": d[1], "message": None, "charsBefore": d[2], "charsAfter": d[3],
             "tokensBefore": None, "tokensAfter": None, "targetChars": step.target_chars,
             "groupsBefore": d[4], "groupsAfter": d[5], "messagesRemoved": d[6],
             "handlerId": None, "handlerFigures": None}
            for step, d in zip(policy.steps, done, strict=True)
        ]
    else:
        trigger = target = reached = None
        steps = []
    return {
        "mode": policy.mode, "kernel": _kernel.IMPLEMENTATION, "implementation": "default",
        "triggered": fired, "trigger": trigger, "target": target,
        "before": {"chars": totals[0], "tokens": None, "messages": totals[1], "fragments": n,
                   "opaqueParts": totals[2]},
        "after": {"chars": totals[3], "tokens": None, "messages": totals[4], "fragments": n,
                  "opaqueParts": totals[5]},
        "targetReached": reached,
        "missedReason": fused_missed_reason(prepared, raw),
        "steps": steps,
        "fragments": [
            {"id": fid, "kind": kind, "protected": protected, "charsBefore": b[0],
             "charsAfter": a[0], "tokensBefore": None, "tokensAfter": None,
             "messagesBefore": b[1], "messagesAfter": a[1], "changed": k is not None}
            for fid, (kind, protected), b, a, k in zip(ids, kinds, before, after, kept,
                                                       strict=True)
        ],
        "warnings": [flat_json(_kernel_warning(ids[i], index, code, detail))
                     for i, index, code, detail in found],
        "audit": None,
        "counter": None,
    }


def _json_of(value: Any) -> Any:
    """An event's value as JSON: figures and report entries by their JSON documents."""
    if isinstance(value, Totals):
        return value.json()
    if isinstance(value, (StepReport, PlanWarning)):
        return flat_json(value)
    if isinstance(value, ReportModel):
        return value.to_json_dict()
    return value


def _checked_calls(gen: Generator[Any, Any, Any], mode: str) -> Generator[Any, Any, Any]:
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


def _recorded(
    gen: Generator[Any, Any, Any], calls: dict[str, tuple[BuiltinHandler, Any, Any]]
) -> Generator[Any, Any, Any]:
    """An implementation's generator, passed through, with every call of a built-in handler
    that returned recorded in ``calls`` by step id."""
    reply: Any = None
    while True:
        try:
            item = gen.send(reply)
        except StopIteration as stop:
            return stop.value
        reply = yield item
        if (isinstance(item, HandlerCall) and isinstance(item.handler, BuiltinHandler)
                and isinstance(reply, HandlerReply) and reply.error is None):
            calls[item.request.step_id] = (item.handler, item.request.content, reply.value)


def _call_sync(call: HandlerCall) -> HandlerReply:
    try:
        value = call.handler(call.request)
    except ContextCancelledError:
        raise
    except Exception as exc:
        return HandlerReply(error=exc)
    if inspect.isawaitable(value):
        close = getattr(value, "close", None)
        if close is not None:
            close()
        raise ContextPolicyError(
            f"handler for step {call.request.step_id!r} returned an awaitable; use "
            "aprocess_context or astream_context for async handlers",
            code="async-handler",
        )
    return HandlerReply(value=value)


async def _call_async(call: HandlerCall) -> HandlerReply:
    try:
        value = call.handler(call.request)
        if inspect.isawaitable(value):
            value = await value
    except ContextCancelledError:
        raise
    except Exception as exc:
        return HandlerReply(error=exc)
    return HandlerReply(value=value)


def _process_context(
    plan: ContextPlan | Mapping[str, Any],
    policy: Any,
    *,
    handlers: Mapping[str, Callable[[CompressRequest], Any]] | None = None,
    counter: Any = None,
    cancel: CancelLike | None = None,
    on_event: Callable[[ContextEvent], None] | None = None,
    on_step_error: str = "continue",
    implementations: Mapping[str, Implementation] | None = None,
) -> ContextResult:
    """Validate the plan and policy, run the policy, enforce the contract, measure, assemble.

    Never mutates ``plan``, its fragments or their message lists. Raises
    :class:`ContextPolicyError`, :class:`ContextPlanError`, :class:`ContextAuditError`
    (audit violations, with the report), :class:`ContextCancelledError`,
    :class:`ContextStepError` (``on_step_error="raise"``) or :class:`ContextContractError`.
    """
    prepared = None
    if (handlers is None and counter is None and cancel is None and on_event is None
            and implementations is None):
        # One kernel pass when the policy allows it (process_context runs a call that names no
        # option so without coming here).
        plan = plan if type(plan) is ContextPlan else as_plan(plan)
        prepared = prepared_for_call(policy, None, None)
        fast = prepared.fast_path if prepared is not None else None
        if fast is not None and on_step_error in ("continue", "raise"):
            steps, trigger, watermark, _ = fast
            result = _kernel.fused_result(
                ContextResult, _fused_records, plan, prepared, plan.fragments, steps,
                trigger, watermark, Fragment, PROTECTED_KINDS)
            if result is not None:
                return result  # type: ignore[no-any-return]
    return _step_by_step(plan, policy, handlers, counter, cancel, on_event, on_step_error,
                         implementations, prepared)


def _step_by_step(
    plan: Any, policy: Any, handlers: Any, counter: Any, cancel: Any, on_event: Any,
    on_step_error: str, implementations: Any, prepared: PreparedPolicy | None,
) -> ContextResult:
    """A sync run, step by step (``prepared``: the policy as the call prepared it, if it
    did)."""
    run = _Run(
        plan, policy, handlers=handlers, counter=counter, cancel=cancel,
        on_step_error=on_step_error, implementations=implementations, is_async=False,
        sink=on_event, on_event=on_event, prepared=prepared,
    )
    gen = run.steps()
    reply: Any = None
    while True:
        try:
            item = gen.send(reply)
        except StopIteration as stop:
            return stop.value  # type: ignore[no-any-return]
        if isinstance(item, HandlerCall):
            reply = _call_sync(item)
        else:  # pragma: no cover - _Run only yields _Await in async mode
            raise AssertionError(f"unexpected {item!r}")


if TYPE_CHECKING:
    process_context = _process_context
else:
    def process_context(plan, policy, *args, **options):
        # The signature, the documentation and the errors are _process_context's: a call that
        # names any option, or passes too many arguments, is its. Keyword-only parameters cost
        # a call a dict lookup each for their defaults (and CPython does not specialise such a
        # call): taking none, a call that names no option (the common one) costs a tenth less.
        if args or options:
            return _process_context(plan, policy, *args, **options)
        # _process_context's one kernel pass, written out for the defaults.
        plan = plan if type(plan) is ContextPlan else as_plan(plan)
        # prepared_for_call's first case, written out.
        prepared = policy if type(policy) is PreparedPolicy and policy.current() else (
            prepared_for_call(policy, None, None))
        fast = prepared.fast_path if prepared is not None else None
        if fast is not None:
            steps, trigger, watermark, _ = fast
            # Validate, or a reduce of trims by chars, with no counter, listener, cancel or
            # custom implementation: one kernel call (_kernel.reduce_plan), whose records
            # become the plan and the report when they are read (_fused_records). The same
            # figures as the step-by-step run (a test holds the two to each other). The
            # kernel checks the steps' fragments itself (None: the full check says why).
            result = _kernel.fused_result(
                ContextResult, _fused_records, plan, prepared, plan.fragments, steps,
                trigger, watermark, Fragment, PROTECTED_KINDS)
            if result is not None:
                return result
        return _step_by_step(plan, policy, None, None, None, None, "continue", None, prepared)

    # The errors of a bad call name process_context, as they did when it took the options.
    _process_context.__name__ = _process_context.__qualname__ = "process_context"
    functools.update_wrapper(process_context, _process_context)
    process_context.__signature__ = inspect.signature(_process_context)


async def astream_context(
    plan: ContextPlan | Mapping[str, Any],
    policy: Any,
    *,
    handlers: Mapping[str, Callable[[CompressRequest], Any]] | None = None,
    counter: Any = None,
    cancel: CancelLike | None = None,
    on_step_error: str = "continue",
    implementations: Mapping[str, Implementation] | None = None,
) -> AsyncIterator[ContextEvent | ContextResult]:
    """Yield every :class:`ContextEvent` as it happens, then the :class:`ContextResult`.

    Handlers may be coroutine functions. Cancelling the task cancels the run (the
    ``asyncio.CancelledError`` propagates) and nothing partial escapes.
    """
    queue: list[ContextEvent] = []
    run = _Run(
        plan, policy, handlers=handlers, counter=counter, cancel=cancel,
        on_step_error=on_step_error, implementations=implementations, is_async=True,
        sink=queue.append,
    )
    async for item in _drive_async(run, queue):
        yield item


async def _drive_async(
    run: _Run, queue: list[ContextEvent]
) -> AsyncIterator[ContextEvent | ContextResult]:
    """Step a run in async code: the events its sink put in ``queue`` as they happen, then the
    result; handlers and awaitables are awaited."""
    gen = run.steps()
    reply: Any = None
    while True:
        try:
            item = gen.send(reply)
        except StopIteration as stop:
            for event in queue:
                yield event
            queue.clear()
            yield stop.value
            return
        except BaseException:
            queue.clear()
            raise
        for event in queue:
            yield event
        queue.clear()
        if isinstance(item, HandlerCall):
            reply = await _call_async(item)
        else:
            reply = await item.awaitable


async def aprocess_context(
    plan: ContextPlan | Mapping[str, Any],
    policy: Any,
    *,
    handlers: Mapping[str, Callable[[CompressRequest], Any]] | None = None,
    counter: Any = None,
    cancel: CancelLike | None = None,
    on_event: Callable[[ContextEvent], None] | None = None,
    on_step_error: str = "continue",
    implementations: Mapping[str, Implementation] | None = None,
) -> ContextResult:
    """:func:`process_context` for async code: handlers may be coroutine functions."""
    queue: list[ContextEvent] = []
    run = _Run(
        plan, policy, handlers=handlers, counter=counter, cancel=cancel,
        on_step_error=on_step_error, implementations=implementations, is_async=True,
        # Events are built only for a listener.
        sink=queue.append if on_event is not None else None, on_event=on_event,
    )
    result: ContextResult | None = None
    async for item in _drive_async(run, queue):
        if isinstance(item, ContextEvent):
            if on_event is not None:
                on_event(item)
        else:
            result = item
    assert result is not None
    return result


def check_input_budget(
    result_or_input: ContextResult | Sequence[Mapping[str, Any]],
    *,
    max_chars: int | None = None,
    max_tokens: int | None = None,
    counter: Any = None,
) -> Usage:
    """The final hard budget: measure the assembled input and raise :class:`InputBudgetError`
    (with both figures) when it is over ``max_chars`` or ``max_tokens``.

    A ``max_tokens`` without a counter is an error, never a guess.
    """
    for name, value in (("max_chars", max_chars), ("max_tokens", max_tokens)):
        if value is not None and (type(value) is not int or value < 0):
            raise ContextPolicyError(
                f"expected an integer >= 0, got {value!r}", path=name, code="expected-integer",
            )
    tc = as_counter(counter)
    if max_tokens is not None and tc is None:
        raise ContextPolicyError(
            "max_tokens needs a token counter (pass counter=...); tokens are never guessed",
            path="max_tokens", code="tokens-without-counter",
        )
    if isinstance(result_or_input, ContextResult):
        source: Any = result_or_input.input
    else:
        source = result_or_input
    if isinstance(source, Mapping):
        raise ContextPolicyError(
            "expected a ContextResult or a list of messages, got a single message dict (wrap "
            "it in a list)", path="result_or_input", code="invalid-input",
        )
    if isinstance(source, (str, bytes)) or not isinstance(source, (list, tuple)):
        raise ContextPolicyError(
            f"expected a ContextResult or a list of messages, got {type(source).__name__}",
            path="result_or_input", code="invalid-input",
        )
    messages: list[dict[str, Any]] = source if isinstance(source, list) else list(source)
    m = measure_messages(messages, tc)
    usage = Usage(chars=m.chars, tokens=m.tokens, messages=m.messages, fragments=0,
                  opaque_parts=m.opaque_parts)
    if max_chars is not None and usage.chars > max_chars:
        raise InputBudgetError("chars", usage.chars, max_chars, usage)
    if max_tokens is not None and usage.tokens is not None and usage.tokens > max_tokens:
        raise InputBudgetError("tokens", usage.tokens, max_tokens, usage)
    return usage
