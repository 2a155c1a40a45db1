"""OpenTelemetry spans for every run (the ``[otel]`` extra: ``opentelemetry-api`` only).

Two ways to switch them on:

- :func:`instrument` (and :func:`uninstrument`): every :func:`~contextpolicy.process_context`,
  :func:`~contextpolicy.aprocess_context`, :func:`~contextpolicy.astream_context` and
  :class:`~contextpolicy.StableCut` call, and so every adapter's call, makes one span. What a
  call runs inside it (the stable cut's replayed runs, a summariser's own run) is part of its
  span, not a span of its own.
- :func:`listener`: one call's span, made from its events (``on_event=``); as a context
  manager it also records the call's error.

A span is named ``contextpolicy <mode>`` and carries ``contextpolicy.mode``,
``contextpolicy.triggered``, ``contextpolicy.target_reached``, ``contextpolicy.chars.before``,
``contextpolicy.chars.after``, ``contextpolicy.tokens.before``, ``contextpolicy.tokens.after``
(absent when no counter measured them) with ``contextpolicy.tokens.before_exact``/``after_exact``
(whether each is measured, not estimated) and ``contextpolicy.tokens.reported`` (the part a
provider reported), ``contextpolicy.messages.removed`` and, when they apply,
``contextpolicy.missed_reason`` and ``contextpolicy.counter``; a stable cut adds
``contextpolicy.cut.*`` (its :class:`~contextpolicy.stable.CutReport`). Each step is a span
event ``contextpolicy.step`` with its figures. An error is recorded on the span (its status
``ERROR``, ``error.type``) and raised as it was. The GenAI semantic conventions define no
compaction event yet (semantic conventions 0.66b2): when they do, it is emitted beside ours.

With no tracer provider set, OpenTelemetry's default makes spans that record nothing, and the
figures are not even read. Tracing off costs a call one attribute load.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Iterator, Mapping
from contextlib import contextmanager
from typing import Any

from . import _tracing
from .errors import ContextPolicyError

__all__ = ["SpanListener", "instrument", "instrumented", "listener", "uninstrument"]

SCOPE = "contextpolicy"
STEP_EVENT = "contextpolicy.step"
# A step's figures on its span event: the report's key, the attribute's name.
_STEP_KEYS = (
    ("id", "id"), ("kind", "kind"), ("fragmentId", "fragment_id"), ("status", "status"),
    ("reason", "reason"), ("charsBefore", "chars.before"), ("charsAfter", "chars.after"),
    ("tokensBefore", "tokens.before"), ("tokensAfter", "tokens.after"),
    ("messagesRemoved", "messages.removed"), ("targetChars", "target_chars"),
    ("handlerId", "handler_id"),
)
_CUT_KEYS = ("calls", "replayed", "runs", "cutThisCall", "heldMessages", "heldChars",
             "lastCut", "storeHits", "handlerCalls")


def _tracer(tracer_provider: Any) -> Any:
    try:
        from opentelemetry import trace
    except ImportError:  # pragma: no cover - the message is tested with the module hidden
        raise ImportError(
            "contextpolicy.telemetry needs OpenTelemetry's API: "
            "pip install 'contextpolicy[otel]'") from None
    from . import __version__
    return trace.get_tracer(SCOPE, __version__, tracer_provider=tracer_provider)


def instrument(tracer_provider: Any = None) -> None:
    """Make a span of every call from now on (see the module docstring), with the tracer of
    ``tracer_provider`` (OpenTelemetry's global provider by default). Calling it again
    replaces the provider."""
    _tracing.hook = _Spans(_tracer(tracer_provider))


def uninstrument() -> None:
    """Make no more spans."""
    _tracing.hook = None


def instrumented() -> bool:
    """Whether :func:`instrument` is in effect."""
    return _tracing.hook is not None


def listener(tracer_provider: Any = None,
             on_event: Callable[[Any], None] | None = None) -> SpanListener:
    """One call's span, made from its events: pass it as the call's ``on_event``. ``on_event``
    (your own listener) gets every event too. As a context manager (``with listener() as
    events: process_context(..., on_event=events)``) it also ends the span when the call
    raises, with the error recorded."""
    if on_event is not None and not callable(on_event):
        raise ContextPolicyError(f"expected a callable, got {type(on_event).__name__}",
                                 path="on_event", code="invalid-option")
    return SpanListener(_tracer(tracer_provider), on_event)


# ---------------------------------------------------------------------------------------------
# Figures to attributes


def _set_figures(span: Any, mode: str, report: Mapping[str, Any]) -> None:
    """The span's name and attributes from a report's JSON (or a completed event's data)."""
    span.update_name(f"{SCOPE} {mode}")
    before, after = report["before"], report["after"]
    attributes: dict[str, Any] = {
        "contextpolicy.mode": mode,
        "contextpolicy.triggered": bool(report["triggered"]),
        "contextpolicy.chars.before": before["chars"],
        "contextpolicy.chars.after": after["chars"],
        "contextpolicy.messages.removed": before["messages"] - after["messages"],
    }
    optional = (("contextpolicy.target_reached", report.get("targetReached")),
                ("contextpolicy.tokens.before", before.get("tokens")),
                ("contextpolicy.tokens.after", after.get("tokens")),
                ("contextpolicy.tokens.before_exact", before.get("tokensExact")),
                ("contextpolicy.tokens.after_exact", after.get("tokensExact")),
                ("contextpolicy.tokens.reported", before.get("tokensReported")),
                ("contextpolicy.missed_reason", report.get("missedReason")),
                ("contextpolicy.counter", report.get("counter")),
                ("contextpolicy.kernel", report.get("kernel")))
    attributes.update((k, v) for k, v in optional if v is not None)
    span.set_attributes(attributes)


def _step_event(span: Any, step: Mapping[str, Any]) -> None:
    attributes = {f"contextpolicy.step.{name}": step[key] for key, name in _STEP_KEYS
                  if step.get(key) is not None}
    span.add_event(STEP_EVENT, attributes)


def _set_result(span: Any, result: Any) -> None:
    report = result.report
    data = report.to_json_dict()
    _set_figures(span, report.mode, data)
    for step in data["steps"]:
        _step_event(span, step)
    cut = getattr(result, "cut", None)
    if cut is not None:
        figures = cut.to_json_dict()
        span.set_attributes({f"contextpolicy.cut.{_snake(k)}": figures[k] for k in _CUT_KEYS
                             if figures[k] is not None} | {"contextpolicy.cut": figures["kind"]})


def _snake(name: str) -> str:
    return "".join("_" + c.lower() if c.isupper() else c for c in name)


def _mode_of(policy: Any) -> str | None:
    """The mode a call's policy names, for the span of a call that failed before its report."""
    typed = getattr(policy, "policy", policy)  # a PreparedPolicy's typed policy
    mode = typed.get("mode") if isinstance(typed, Mapping) else getattr(typed, "mode", None)
    return mode if mode in ("validate", "reduce", "audit") else None


def _failed(span: Any, exc: BaseException, policy: Any) -> None:
    from opentelemetry.trace import Status, StatusCode

    mode = _mode_of(policy)
    if mode is not None:
        span.update_name(f"{SCOPE} {mode}")
        span.set_attribute("contextpolicy.mode", mode)
    span.record_exception(exc)
    span.set_attribute("error.type", type(exc).__qualname__)
    span.set_status(Status(StatusCode.ERROR, f"{type(exc).__name__}: {exc}"))


# ---------------------------------------------------------------------------------------------
# The spans of instrument()


class _Spans:
    """The span maker :func:`instrument` installs (``_tracing.hook``)."""

    def __init__(self, tracer: Any) -> None:
        self.tracer = tracer

    def _start(self) -> Any:
        return self.tracer.start_as_current_span(
            SCOPE, record_exception=False, set_status_on_exception=False)

    @contextmanager
    def _spanned(self, policy: Any) -> Iterator[Any]:
        """A current span for one call, its error recorded; the calls made inside it quiet."""
        token = _tracing.QUIET.set(True)
        try:
            with self._start() as span:
                try:
                    yield span
                except BaseException as exc:
                    if span.is_recording():
                        _failed(span, exc, policy)
                    raise
        finally:
            _tracing.QUIET.reset(token)

    def call(self, fn: Callable[..., Any], policy: Any, *args: Any, **kwargs: Any) -> Any:
        """``fn(*args, **kwargs)`` inside a span; the calls it makes make none."""
        with self._spanned(policy) as span:
            result = fn(*args, **kwargs)
            if span.is_recording():
                _set_result(span, result)
            return result

    async def acall(self, fn: Callable[..., Any], policy: Any, *args: Any,
                    **kwargs: Any) -> Any:
        """:meth:`call` of a coroutine function."""
        with self._spanned(policy) as span:
            result = await fn(*args, **kwargs)
            if span.is_recording():
                _set_result(span, result)
            return result

    async def stream(self, items: AsyncIterator[Any], policy: Any) -> AsyncIterator[Any]:
        """The items of a stream (events, then the result) inside a span. The span is current,
        and the calls made inside it quiet, only while the stream works, never while the
        caller's code runs between the items."""
        from opentelemetry import trace

        span = self.tracer.start_span(SCOPE)
        try:
            while True:
                token = _tracing.QUIET.set(True)
                try:
                    with trace.use_span(span, end_on_exit=False, record_exception=False,
                                        set_status_on_exception=False):
                        item = await items.__anext__()
                except StopAsyncIteration:
                    break
                finally:
                    _tracing.QUIET.reset(token)
                if span.is_recording() and hasattr(item, "report"):
                    _set_result(span, item)
                yield item
        except GeneratorExit:  # the caller stopped reading: no error of the call's
            raise
        except BaseException as exc:
            if span.is_recording():
                _failed(span, exc, policy)
            raise
        finally:
            span.end()


# ---------------------------------------------------------------------------------------------
# One call's span from its events


class SpanListener:
    """An ``on_event`` listener that makes one span of the call it listens to (see
    :func:`listener`): opened at ``context.started``, a ``contextpolicy.step`` event per step,
    its figures set and the span ended at ``context.completed``. One listener serves one call
    at a time; a later call opens a new span."""

    def __init__(self, tracer: Any, on_event: Callable[[Any], None] | None = None) -> None:
        self.tracer = tracer
        self.on_event = on_event
        self.span: Any = None
        self.mode: str | None = None

    def __call__(self, event: Any) -> None:
        kind, data = event.type, event.data
        if kind == "context.started":
            self._end()
            self.mode = data.get("mode")
            self.span = self.tracer.start_span(f"{SCOPE} {self.mode}")
        elif self.span is not None and self.span.is_recording():
            step = data.get("step")
            if kind.startswith("step.") and kind != "step.started" and step is not None:
                _step_event(self.span, step)
            elif kind == "context.completed":
                _set_figures(self.span, self.mode or "", data)
                self._end()
        if self.on_event is not None:
            self.on_event(event)

    def _end(self) -> None:
        if self.span is not None:
            self.span.end()
            self.span = None

    def __enter__(self) -> SpanListener:
        return self

    def __exit__(self, kind: Any, exc: BaseException | None, tb: Any) -> None:
        if self.span is not None and exc is not None:
            _failed(self.span, exc, {"mode": self.mode})
        self._end()
