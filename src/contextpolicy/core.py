"""The core: run a policy implementation, then enforce the input contract and measure.

Whichever implementation runs (the default ``validate``/``reduce``/``audit`` or the caller's),
the core checks afterwards that protected fragments are byte-identical and in their order and
that no fragment was invented, measures the result itself, and assembles the model input. The
final hard budget is a separate core call, :func:`check_input_budget`.
"""


from __future__ import annotations

import functools
import inspect
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from contextlib import aclosing
from typing import TYPE_CHECKING, Any

from . import _kernel, _tracing
from .accounting import (
    as_counter,
    measure_messages,
)
from .contract import enforce_contract
from .errors import (
    ContextPolicyError,
    InputBudgetError,
)
from .fused import fused_records
from .implementations import Implementation
from .implementations.base import (
    CancelLike,
    CompressRequest,
)
from .plan import PROTECTED_KINDS, ContextPlan, Fragment, as_plan
from .prepared import PreparedPolicy, prepared_for_call
from .report import (
    ContextEvent,
    ContextResult,
    Usage,
)
from .run import PolicyRun, drive_async, step_by_step

__all__ = [
    "aprocess_context",
    "astream_context",
    "check_input_budget",
    "enforce_contract",
    "process_context",
]


def _options(
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
    # process_context's signature and documentation: a call that names an option has its
    # arguments bound here (Python's own errors for a bad call, naming process_context).
    return (handlers, counter, cancel, on_event, on_step_error,  # type: ignore[return-value]
            implementations)


_options.__name__ = _options.__qualname__ = "process_context"

if TYPE_CHECKING:
    process_context = _options
else:
    def process_context(plan, policy, *args, **options):
        # One implementation. Its options are taken as *args and **options, bound by _options
        # only when a call names one: keyword-only parameters cost every call a lookup each for
        # their defaults, and CPython does not specialise such a call (a tenth of a
        # six-message chat's call). Options given as their defaults, or on_step_error="raise"
        # alone, take the one kernel call too.
        if _tracing.hook is not None and not _tracing.QUIET.get():  # telemetry.instrument()
            return _tracing.hook.call(process_context, policy, plan, policy, *args, **options)
        on_step_error = "continue"
        if args or options:
            handlers, counter, cancel, on_event, on_step_error, implementations = _options(
                plan, policy, *args, **options)
            if (handlers is not None or counter is not None or cancel is not None
                    or on_event is not None or implementations is not None
                    or (on_step_error != "continue" and on_step_error != "raise")):
                return step_by_step(plan, policy, handlers, counter, cancel, on_event,
                                    on_step_error, implementations, None)
        # Validate, or a reduce of trims by chars (PreparedPolicy.fast_path), with no counter,
        # listener, cancel or custom implementation: one kernel call (_kernel.reduce_plan),
        # whose records become the plan and the report when they are read (fused_records).
        # The same figures as the step-by-step run (a test holds the two to each other). The
        # kernel checks the steps' fragments itself (None: the full check says why).
        plan = plan if type(plan) is ContextPlan else as_plan(plan)
        prepared = policy if type(policy) is PreparedPolicy and policy.current() else (
            prepared_for_call(policy, None, None))
        fast = prepared.fast_path if prepared is not None else None
        if fast is not None:
            steps, trigger, watermark, _ = fast
            result = _kernel.fused_result(
                ContextResult, fused_records, plan, prepared, plan.fragments, steps, trigger,
                watermark, Fragment, PROTECTED_KINDS)
            if result is not None:
                return result
        return step_by_step(plan, policy, None, None, None, None, on_step_error, None, prepared)

    functools.update_wrapper(process_context, _options)
    process_context.__signature__ = inspect.signature(_options)


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
    run = PolicyRun(
        plan, policy, handlers=handlers, counter=counter, cancel=cancel,
        on_step_error=on_step_error, implementations=implementations, is_async=True,
        sink=queue.append,
    )
    spans = _tracing.active()
    if spans is None:
        async for item in drive_async(run, queue):
            yield item
        return
    # Closed with the caller's stream, so that its span ends when the caller stops reading.
    async with aclosing(spans.stream(drive_async(run, queue), policy)) as items:
        async for item in items:
            yield item


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
    spans = _tracing.active()
    if spans is not None:  # telemetry.instrument()
        return await spans.acall(
            aprocess_context, policy, plan, policy, handlers=handlers, counter=counter,
            cancel=cancel, on_event=on_event, on_step_error=on_step_error,
            implementations=implementations)
    queue: list[ContextEvent] = []
    run = PolicyRun(
        plan, policy, handlers=handlers, counter=counter, cancel=cancel,
        on_step_error=on_step_error, implementations=implementations, is_async=True,
        # Events are built only for a listener.
        sink=queue.append if on_event is not None else None, on_event=on_event,
    )
    result: ContextResult | None = None
    async for item in drive_async(run, queue):
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
    tokens: int | None
    exact: bool | None
    if tc is not None and tc.counts_messages:
        m = measure_messages(messages)
        tokens, exact, reported = tc.count_input(messages)
    else:
        m = measure_messages(messages, tc)
        tokens, exact, reported = m.tokens, None if tc is None else tc.exact is True, None
    usage = Usage(chars=m.chars, tokens=tokens, messages=m.messages, fragments=0,
                  opaque_parts=m.opaque_parts, tokens_exact=exact, tokens_reported=reported)
    if max_chars is not None and usage.chars > max_chars:
        raise InputBudgetError("chars", usage.chars, max_chars, usage)
    if max_tokens is not None and usage.tokens is not None and usage.tokens > max_tokens:
        raise InputBudgetError("tokens", usage.tokens, max_tokens, usage)
    return usage
