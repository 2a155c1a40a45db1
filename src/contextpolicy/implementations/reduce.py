"""The default ``reduce`` implementation: steps in sequence once a watermark triggers.

Before each step the watermark is checked; once every configured target is met, the remaining
steps are skipped (``target-reached``). A step on a fragment that holds no message is skipped
(``fragment-empty``), and so is one on the history a plan does not hold (``fragment-absent``:
``ContextPlan.from_messages`` leaves it out of a first turn; the policy check lets no other
fragment be missing). A ``trim`` keeps the longest suffix of whole groups that
fits the step's ``targetChars``, but never fewer than ``keepGroups`` groups. A ``compress``
hands content to a registered handler and keeps the result only if it has the same shape and is
smaller; otherwise the step fails, the fragment stays as it was, and the sequence goes on (or
stops with :class:`ContextStepError` under ``on_step_error="raise"``).
"""

from __future__ import annotations

from collections.abc import Callable, Generator
from typing import Any

from .. import _kernel
from .._build import built
from .._read import exact_str
from .._tables import GROUPING_CODES
from ..accounting import FragmentMeasure, input_tokens, measure_messages
from ..content import plain_copy
from ..errors import ContextCancelledError, ContextPlanError, ContextStepError
from ..handlers._base import BuiltinHandler
from ..plan import Fragment
from ..policy import CompressStep, ReducePolicy, TrimStep
from ..policy.watermark import targets_met, triggered
from ..report import StepReport
from .base import CompressRequest, HandlerCall, HandlerReply, PolicyContext, PolicyOutcome

__all__ = ["reduce"]




def reduce(ctx: PolicyContext) -> Generator[HandlerCall, HandlerReply, PolicyOutcome]:
    policy = ctx.policy
    assert isinstance(policy, ReducePolicy)
    fragments = list(ctx.plan.fragments)
    position = {f.id: i for i, f in enumerate(fragments)}
    measures = [ctx.measure(f) for f in fragments]
    chars = sum(m.chars for m in measures)
    tokens = input_tokens(fragments, measures, ctx.counter)
    fired = triggered(policy, chars, tokens)
    if fired and ctx.listening:
        ctx.emit("context.triggered", chars=chars, tokens=tokens,
                 trigger={"chars": policy.trigger_chars, "tokens": policy.trigger_tokens})
    steps: list[StepReport] = []
    for step in policy.steps:
        i = position.get(step.fragment_id)
        reason = None
        if not fired:
            reason = "not-triggered"
        elif targets_met(policy, chars, tokens):
            reason = "target-reached"
        elif i is None:
            reason = "fragment-absent"
        elif fragments[i].messages is not None and measures[i].messages == 0:
            reason = "fragment-empty"
        if reason is not None:
            report = built(StepReport, dict(
                id=step.id, kind=step.kind, fragment_id=step.fragment_id, status="skipped",
                reason=reason, target_chars=step.target_chars,
                handler_id=step.handler_id if isinstance(step, CompressStep) else None,
            ))
            steps.append(report)
            if ctx.listening:
                ctx.emit("step.skipped", step=report)
            continue
        ctx.check_cancel()
        assert i is not None
        fragment, before = fragments[i], measures[i]
        if ctx.listening:
            ctx.emit("step.started", stepId=step.id, kind=step.kind, fragmentId=step.fragment_id,
                     chars=chars, tokens=tokens)
        if isinstance(step, TrimStep):
            new, after, report = _trim(ctx, step, fragment, before)
        else:
            new, after, report = yield from _compress(ctx, step, fragment, before)
        steps.append(report)
        if report.status == "failed":
            if ctx.listening:
                ctx.emit("step.failed", step=report)
            if ctx.on_step_error == "raise":
                raise ContextStepError(report)
            continue
        if new is not fragment:
            fragments[i], measures[i] = new, after
            ctx.remember(new, after)
            chars += after.chars - before.chars
            if ctx.counter is not None and ctx.counter.counts_messages:
                tokens = input_tokens(fragments, measures, ctx.counter)  # framing: recounted
            elif tokens is not None:
                tokens += (after.tokens or 0) - (before.tokens or 0)
        if ctx.listening:
            ctx.emit("step.completed", step=report, chars=chars, tokens=tokens)
    return PolicyOutcome(fragments=fragments, steps=steps, triggered=fired)


def _tokens_of(ctx: PolicyContext, content: str | list[dict[str, Any]], fid: str) -> int | None:
    if ctx.counter is None:
        return None
    if isinstance(content, str):
        return ctx.counter.count_text(content)
    return ctx.counter.count_messages(content, fid)


def _trim(
    ctx: PolicyContext, step: TrimStep, fragment: Fragment, before: FragmentMeasure
) -> tuple[Fragment, FragmentMeasure, StepReport]:
    messages = fragment.messages
    assert messages is not None
    first, cut, ngroups = before.kernel.cut(
        messages, GROUPING_CODES[step.grouping.kind], step.keep_groups, step.target_chars
    )
    common: dict[str, Any] = dict(
        id=step.id, kind="trim", fragment_id=step.fragment_id, target_chars=step.target_chars,
        chars_before=before.chars, tokens_before=before.tokens, groups_before=ngroups,
    )
    if cut == 0:
        reason = "within-target" if before.chars <= step.target_chars else "keep-groups-floor"
        report = built(StepReport, dict(
            status="unchanged", reason=reason, chars_after=before.chars,
            tokens_after=before.tokens, groups_after=ngroups, **common,
        ))
        return fragment, before, report
    # The real storage, as the kernel measured it (a list subclass's __getitem__ may lie).
    kept = list.__getitem__(messages, slice(cut, None))
    # Tokens of the kept messages: from the per-message figures already counted, when the
    # counter has no framing (count_messages recounts the kept list).
    after = before.tail(cut, None if before.message_tokens is not None else _tokens_of(
        ctx, kept, fragment.id))
    new = fragment.with_content(kept)
    reason = "trimmed" if after.chars <= step.target_chars else "keep-groups-floor"
    report = built(StepReport, dict(
        status="applied", reason=reason, chars_after=after.chars, tokens_after=after.tokens,
        groups_after=ngroups - first, messages_removed=cut, **common,
    ))
    return new, after, report


def _compress(
    ctx: PolicyContext, step: CompressStep, fragment: Fragment, before: FragmentMeasure
) -> Generator[HandlerCall, HandlerReply, tuple[Fragment, FragmentMeasure, StepReport]]:
    common: dict[str, Any] = dict(
        id=step.id, kind="compress", fragment_id=step.fragment_id, handler_id=step.handler_id,
        target_chars=step.target_chars, chars_before=before.chars, tokens_before=before.tokens,
    )

    def unchanged(reason: str, groups: int | None = None, message: str | None = None
                  ) -> StepReport:
        return StepReport(
            status="unchanged", reason=reason, message=message, chars_after=before.chars,
            tokens_after=before.tokens, groups_before=groups, groups_after=groups, **common,
        )

    def failed(reason: str, message: str, groups: int | None = None) -> StepReport:
        return StepReport(
            status="failed", reason=reason, message=message, chars_after=before.chars,
            tokens_after=before.tokens, groups_before=groups, groups_after=groups, **common,
        )

    groups: int | None = None
    kept: list[dict[str, Any]] | None = None
    content: str | list[dict[str, Any]] = fragment.content()
    if fragment.messages is not None:
        grouping = GROUPING_CODES[step.grouping.kind]
        if before.chars <= step.target_chars or step.keep_groups is None:
            groups = before.kernel.groups(grouping)
        if before.chars <= step.target_chars:
            return fragment, before, unchanged("within-target", groups)
        if step.keep_groups is not None:
            _first, split, groups = before.kernel.cut(
                fragment.messages, grouping, step.keep_groups, None
            )
            content = list.__getitem__(fragment.messages, slice(None, split))
            kept = list.__getitem__(fragment.messages, slice(split, None))
            if split == 0:
                return fragment, before, unchanged("nothing-to-compress", groups)
    elif before.chars <= step.target_chars:
        return fragment, before, unchanged("within-target", groups)
    # The handler works on copies: whatever it does to them, the caller's messages are untouched.
    request = CompressRequest(
        fragment=fragment if fragment.messages is None
        else fragment.with_content(plain_copy(fragment.messages)),
        content=content if isinstance(content, str) else plain_copy(content),
        kept=None if kept is None else plain_copy(kept),
        target_chars=step.target_chars, step_id=step.id, counter=ctx.counter, cancel=ctx.cancel,
    )
    handler = ctx.handlers[step.handler_id]
    reply = yield HandlerCall(handler, request)
    ctx.check_cancel()
    if reply.error is not None:
        if isinstance(reply.error, ContextCancelledError):
            raise reply.error
        err = reply.error
        return fragment, before, failed(
            "handler-error", f"handler {step.handler_id!r} raised {type(err).__name__}: {err}",
            groups,
        )
    if isinstance(handler, BuiltinHandler) and _kernel.exact_same(request.content, reply.value):
        # A built-in handler gives its input back when it has nothing to do, or less than its
        # batch (clear_at_least, min_gain): a step that waits, not one that failed.
        return fragment, before, unchanged("nothing-to-compress", groups, (
            f"handler {step.handler_id!r} returned its input: nothing to compress, or less "
            "than its batch"))
    return _compressed(ctx, step, fragment, before, content, kept, reply.value, groups, failed,
                       common)


def _compressed(
    ctx: PolicyContext, step: CompressStep, fragment: Fragment, before: FragmentMeasure,
    content: str | list[dict[str, Any]], kept: list[dict[str, Any]] | None, value: Any,
    groups: int | None, failed: Callable[..., StepReport], common: dict[str, Any],
) -> tuple[Fragment, FragmentMeasure, StepReport]:
    """What a handler returned (``value``) checked and measured: the new fragment and its
    step's report, or the fragment as it was and a failed step (``failed``) saying why."""
    if isinstance(content, str):
        if not isinstance(value, str):
            return fragment, before, failed(
                "wrong-shape", f"expected a str for a text fragment, got {type(value).__name__}"
            )
        # Its text as an exact str: a subclass's __len__ never speaks for it.
        new_content: str | list[dict[str, Any]] = exact_str(value)
        after_chars = len(new_content)
        after_tokens = _tokens_of(ctx, new_content, fragment.id)
        after_measure = None
    else:
        if not isinstance(value, list):
            return fragment, before, failed(
                "wrong-shape", f"expected a list of messages, got {type(value).__name__}", groups
            )
        # Plain dicts and lists from here on: what is measured is what is assembled.
        messages: list[dict[str, Any]] = plain_copy(value) + (kept or [])
        new_content = messages
        try:
            after_measure = measure_messages(messages, ctx.counter, fragment.id)
        except ContextPlanError as exc:
            return fragment, before, failed("invalid-output", str(exc), groups)
        after_chars = after_measure.chars
        after_tokens = after_measure.tokens
    if after_chars >= before.chars:
        return fragment, before, failed(
            "not-smaller",
            f"handler returned {after_chars} chars for {before.chars}; a result must be smaller",
            groups,
        )
    new = fragment.with_content(new_content)
    if after_measure is None:
        after_measure = FragmentMeasure(after_chars, 1, 0, after_tokens)
        groups_after = None
    else:
        groups_after = after_measure.kernel.groups(GROUPING_CODES[step.grouping.kind])
    report = StepReport(
        status="applied", reason="compressed", chars_after=after_chars, tokens_after=after_tokens,
        groups_before=groups, groups_after=groups_after,
        messages_removed=max(0, before.messages - after_measure.messages)
        if fragment.messages is not None else 0,
        **common,
    )
    return new, after_measure, report
