"""One policy run, as a generator that the sync and async drivers step: the policy checked against
the plan (once, by the prepared policy), the implementation run, the contract enforced, the
result measured by the core itself, events emitted to a listener."""

from __future__ import annotations

import inspect
from collections.abc import AsyncIterator, Callable, Generator, Mapping, Sequence
from typing import Any

from . import _kernel
from .accounting import (
    FragmentMeasure,
    TokenCounter,
    assemble,
    input_count,
    input_tokens,
    measure_fragment,
)
from .content import snapshot as content_snapshot
from .contract import checked_calls, checked_claims, copied_plan, enforce_contract, measured_outcome
from .errors import (
    ContextAuditError,
    ContextCancelledError,
    ContextContractError,
    ContextPolicyError,
)
from .fused import pairing_warning, unknown_role_warning, watermarks
from .handlers._base import BuiltinHandler
from .implementations import DEFAULT_IMPLEMENTATIONS, Implementation
from .implementations.base import (
    CancelLike,
    CompressRequest,
    HandlerCall,
    HandlerReply,
    PolicyContext,
    PolicyOutcome,
)
from .plan import PROTECTED_KINDS, ContextPlan, Fragment, as_plan
from .policy import ReducePolicy, TypedPolicy
from .policy.watermark import missed_reason
from .prepared import PreparedPolicy, check_arguments, checked_policy, prepared_for_call
from .report import (
    CompressFigures,
    ContextEvent,
    ContextResult,
    PlanWarning,
    ReportData,
    ReportModel,
    StepReport,
    Totals,
    flat_json,
    given_records,
    lazy_result,
)

__all__ = ["Await", "PolicyRun", "call_async", "call_sync", "drive_async", "step_by_step"]

class Await:
    """Yielded by the run when a custom implementation returned an awaitable."""

    def __init__(self, awaitable: Any) -> None:
        self.awaitable = awaitable


def usage(fragments: Sequence[Fragment], measures: Sequence[FragmentMeasure],
           counter: TokenCounter | None) -> Totals:
    chars = messages = opaque = 0
    for m in measures:
        chars += m.chars
        messages += m.messages
        opaque += m.opaque_parts
    tokens, exact, reported = input_count(fragments, measures, counter)
    return Totals(chars, tokens, messages, len(measures), opaque, exact, reported)


class PolicyRun:
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
        return checked_policy(policy, handlers, counter, self.plan, is_async)

    def emit(self, event: str, data: dict[str, Any]) -> None:
        # Event payloads are JSON figures; they are only built when someone listens.
        if self.sink is not None:
            step = data.get("step")
            if self.calls and not self.custom and isinstance(step, StepReport):
                # A built-in handler's step says what it did in its event as in the report.
                figures = self._handler_figures(step)
                if figures is not None:
                    data = {**data, "step": step.model_copy(update={"handler_figures": figures})}
            self.sink(ContextEvent(event, {k: json_of(v) for k, v in data.items()}))

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
        before = usage(plan.fragments, measures_before, self.counter)
        if listening:
            self.emit("context.measured", {"usage": before})
        snapshot = None
        if self.custom:
            # A custom implementation works on copies: whatever it does to them, the caller's
            # plan is untouched, and protected content is checked against a snapshot.
            snapshot = {f.id: content_snapshot(f.content()) for f in plan.fragments
                        if f.is_protected}
            ctx = PolicyContext(
                copied_plan(plan), policy, self.handlers, self.counter, self.cancel,
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
            outcome = measured_outcome(plan, ctx.plan, outcome)
            # Figures are measured, never taken from an implementation: only fragments the core
            # measured itself are reused.
            known = {id(f): m for f, m in zip(plan.fragments, measures_before, strict=True)}
            measures_after = [
                known[id(f)] if id(f) in known else measure_fragment(f, self.counter)
                for f in outcome.fragments
            ]
            after = usage(outcome.fragments, measures_after, self.counter)
            outcome, warnings = checked_claims(
                self.policy, self.counter, plan, outcome, before, measures_before, measures_after
            )
        else:
            measures_after = [ctx.measure(f) for f in outcome.fragments]
            after = usage(outcome.fragments, measures_after, self.counter)
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
            gen = checked_calls(value, self.policy.mode) if self.custom else value
            if any(isinstance(h, BuiltinHandler) for h in self.handlers.values()):
                gen = recorded(gen, self.calls)
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
            value = yield Await(value)
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
                    found.append(unknown_role_warning(f.id, index, role, count))
        for f, m in zip(news, measures_after, strict=True):
            if f.messages is None or not m.has_tool_traffic:
                continue
            for index, code, cid in m.kernel.pairing(f.messages):
                found.append(pairing_warning(f.id, index, code, cid))
        found.extend(warnings)
        trigger, target, target_reached = watermarks(policy, after)
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
            counter_exact=None if self.counter is None else self.counter.exact is True,
            missed_reason=missed,
        )


def json_of(value: Any) -> Any:
    """An event's value as JSON: figures and report entries by their JSON documents."""
    if isinstance(value, Totals):
        return value.json()
    if isinstance(value, (StepReport, PlanWarning)):
        return flat_json(value)
    if isinstance(value, ReportModel):
        return value.to_json_dict()
    return value


def recorded(
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


def call_sync(call: HandlerCall) -> HandlerReply:
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


async def call_async(call: HandlerCall) -> HandlerReply:
    try:
        value = call.handler(call.request)
        if inspect.isawaitable(value):
            value = await value
    except ContextCancelledError:
        raise
    except Exception as exc:
        return HandlerReply(error=exc)
    return HandlerReply(value=value)


def step_by_step(
    plan: Any, policy: Any, handlers: Any, counter: Any, cancel: Any, on_event: Any,
    on_step_error: str, implementations: Any, prepared: PreparedPolicy | None,
) -> ContextResult:
    """A sync run, step by step (``prepared``: the policy as the call prepared it, if it
    did)."""
    run = PolicyRun(
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
            reply = call_sync(item)
        else:  # pragma: no cover - PolicyRun only yields Await in async mode
            raise AssertionError(f"unexpected {item!r}")


async def drive_async(
    run: PolicyRun, queue: list[ContextEvent]
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
            reply = await call_async(item)
        else:
            reply = await item.awaitable
