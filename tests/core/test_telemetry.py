"""OpenTelemetry spans (``contextpolicy.telemetry``), recorded by the SDK's in-memory exporter:
one span per call carrying the report's figures exactly, a span event per step, errors on the
span, the stable cut's replay inside one span, nothing when switched off. Both kernels."""

from __future__ import annotations

import asyncio
import subprocess
import sys

import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import StatusCode

from contextpolicy import (
    ContextPlan,
    ContextPolicyError,
    ContextStepError,
    StableCut,
    aprocess_context,
    astream_context,
    process_context,
    telemetry,
)
from contextpolicy.accounting import measure_messages
from contextpolicy.counters import estimate, usage_anchored
from tests.support.replays import tool_session

pytestmark = pytest.mark.usefixtures("pipeline_kernel")

POLICY = {"mode": "reduce", "triggerChars": 500, "targetInputChars": 400, "steps": [
    {"id": "recent", "kind": "trim", "fragmentId": "history", "keepGroups": 1,
     "targetChars": 300}]}


def _chat(turns: int = 6) -> list[dict]:
    history = []
    for i in range(turns):
        history += [{"role": "user", "content": f"Question {i} " * 10},
                    {"role": "assistant", "content": f"Answer {i} " * 10}]
    return [{"role": "system", "content": "Be brief."}, *history,
            {"role": "user", "content": "And now?"}]


@pytest.fixture
def spans():
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    telemetry.instrument(provider)
    try:
        yield exporter
    finally:
        telemetry.uninstrument()


def _figures(report) -> dict:
    out = {
        "contextpolicy.mode": report.mode,
        "contextpolicy.triggered": report.triggered,
        "contextpolicy.chars.before": report.before.chars,
        "contextpolicy.chars.after": report.after.chars,
        "contextpolicy.messages.removed": report.before.messages - report.after.messages,
        "contextpolicy.kernel": report.kernel,
    }
    for key, value in (("contextpolicy.target_reached", report.target_reached),
                       ("contextpolicy.tokens.before", report.before.tokens),
                       ("contextpolicy.tokens.after", report.after.tokens),
                       ("contextpolicy.tokens.before_exact", report.before.tokens_exact),
                       ("contextpolicy.tokens.after_exact", report.after.tokens_exact),
                       ("contextpolicy.tokens.reported", report.before.tokens_reported),
                       ("contextpolicy.missed_reason", report.missed_reason),
                       ("contextpolicy.counter", report.counter)):
        if value is not None:
            out[key] = value
    return out


def _step_events(span) -> list[dict]:
    return [dict(e.attributes) for e in span.events if e.name == "contextpolicy.step"]


def test_one_span_per_call_with_the_reports_figures(spans):
    plan = ContextPlan.from_messages(_chat())
    result = process_context(plan, POLICY)
    (span,) = spans.get_finished_spans()
    report = result.report
    assert span.name == "contextpolicy reduce"
    assert dict(span.attributes) == _figures(report)
    # The figures recounted from what the model gets, not only taken from the report.
    assert span.attributes["contextpolicy.chars.after"] == measure_messages(result.input).chars
    assert span.attributes["contextpolicy.chars.before"] == measure_messages(_chat()).chars
    assert span.attributes["contextpolicy.messages.removed"] == len(_chat()) - len(result.input)
    assert span.attributes["contextpolicy.messages.removed"] > 0
    assert "contextpolicy.tokens.before" not in span.attributes  # never measured
    (step,) = report.steps
    assert _step_events(span) == [{
        "contextpolicy.step.id": "recent", "contextpolicy.step.kind": "trim",
        "contextpolicy.step.fragment_id": "history", "contextpolicy.step.status": "applied",
        "contextpolicy.step.reason": step.reason,
        "contextpolicy.step.chars.before": step.chars_before,
        "contextpolicy.step.chars.after": step.chars_after,
        "contextpolicy.step.messages.removed": step.messages_removed,
        "contextpolicy.step.target_chars": 300}]
    assert span.status.status_code is StatusCode.UNSET


def test_tokens_are_attributes_when_a_counter_measured_them(spans):
    result = process_context(ContextPlan.from_messages(_chat()), POLICY,
                             counter=lambda text: len(text.split()))
    (span,) = spans.get_finished_spans()
    assert span.attributes["contextpolicy.tokens.before"] == result.report.before.tokens > 0
    assert span.attributes["contextpolicy.tokens.after"] == result.report.after.tokens
    assert dict(span.attributes) == _figures(result.report)
    assert span.attributes["contextpolicy.counter"] == result.report.counter
    assert span.attributes["contextpolicy.tokens.before_exact"] is False  # it never said so
    assert "contextpolicy.tokens.reported" not in span.attributes


def test_a_span_says_what_a_provider_reported(spans):
    counter = usage_anchored(estimate(4))
    messages = _chat()
    counter.record(messages[:-1], 4_321)
    result = process_context(ContextPlan.from_messages(messages), {"mode": "validate"},
                             counter=counter)
    (span,) = spans.get_finished_spans()
    assert span.attributes["contextpolicy.tokens.reported"] == 4_321
    assert span.attributes["contextpolicy.tokens.before"] == result.report.before.tokens > 4_321
    assert span.attributes["contextpolicy.tokens.before_exact"] is False
    assert dict(span.attributes) == _figures(result.report)


def test_a_validate_run_and_an_untriggered_reduce(spans):
    plan = ContextPlan.from_messages(_chat(1))
    process_context(plan, {"mode": "validate"})
    quiet = process_context(plan, POLICY)
    first, second = spans.get_finished_spans()
    assert first.name == "contextpolicy validate"
    assert first.attributes["contextpolicy.triggered"] is False
    assert "contextpolicy.target_reached" not in first.attributes
    assert second.attributes["contextpolicy.triggered"] is False
    assert second.attributes["contextpolicy.messages.removed"] == 0
    assert dict(second.attributes) == _figures(quiet.report)


def test_an_error_is_recorded_on_the_span_and_raised(spans):
    with pytest.raises(ContextPolicyError):
        process_context(ContextPlan.from_messages(_chat()), {**POLICY, "triggerChars": -1})
    (span,) = spans.get_finished_spans()
    assert span.name == "contextpolicy reduce"
    assert span.status.status_code is StatusCode.ERROR
    assert span.attributes["error.type"] == "ContextPolicyError"
    assert [e.name for e in span.events] == ["exception"]
    assert "contextpolicy.chars.before" not in span.attributes


def test_a_failing_handler_with_raise(spans):
    policy = {"mode": "reduce", "triggerChars": 10, "steps": [
        {"id": "squeeze", "kind": "compress", "fragmentId": "history", "handlerId": "boom",
         "targetChars": 5}]}

    def boom(request):
        raise RuntimeError("no model today")

    with pytest.raises(ContextStepError):
        process_context(ContextPlan.from_messages(_chat()), policy, handlers={"boom": boom},
                        on_step_error="raise")
    (span,) = spans.get_finished_spans()
    assert span.status.status_code is StatusCode.ERROR
    assert span.attributes["error.type"] == "ContextStepError"


def test_a_run_inside_a_handler_is_part_of_the_callers_span(spans):
    inner = {"mode": "validate"}

    def summarise(request):
        process_context(ContextPlan.from_messages([{"role": "user", "content": "x"}]), inner)
        return "short"

    policy = {"mode": "reduce", "triggerChars": 10, "steps": [
        {"id": "squeeze", "kind": "compress", "fragmentId": "history", "handlerId": "sum",
         "targetChars": 5}]}
    process_context(ContextPlan.from_messages(_chat()), policy, handlers={"sum": summarise})
    (span,) = spans.get_finished_spans()
    assert span.name == "contextpolicy reduce"


def test_async_and_streamed_calls(spans):
    plan = ContextPlan.from_messages(_chat())

    async def main():
        result = await aprocess_context(plan, POLICY)
        streamed = [item async for item in astream_context(plan, POLICY)]
        return result, streamed[-1]

    result, last = asyncio.run(main())
    first, second = spans.get_finished_spans()
    assert dict(first.attributes) == _figures(result.report)
    assert dict(second.attributes) == _figures(last.report)
    assert len(_step_events(second)) == 1


def test_the_stable_cut_is_one_span_whatever_it_replays(spans):
    policy = {"mode": "reduce", "triggerChars": 20_000, "targetInputChars": 10_000, "steps": [
        {"id": "recent", "kind": "trim", "fragmentId": "history", "keepGroups": 1,
         "targetChars": 10_000, "grouping": {"kind": "user-turn"}}]}
    messages = tool_session(30, seed=1)
    result = StableCut(policy, memo_size=0).process(messages)
    assert result.cut.runs > 1  # the replay ran the policy several times
    (span,) = spans.get_finished_spans()
    assert dict(span.attributes) == {
        **_figures(result.report), "contextpolicy.cut": "stable",
        **{f"contextpolicy.cut.{k}": v for k, v in (
            ("calls", result.cut.calls), ("replayed", result.cut.replayed),
            ("runs", result.cut.runs), ("cut_this_call", result.cut.cut_this_call),
            ("held_messages", result.cut.held_messages),
            ("held_chars", result.cut.held_chars), ("last_cut", result.cut.last_cut),
            ("store_hits", 0), ("handler_calls", 0))}}


def test_uninstrument_stops_the_spans(spans):
    plan = ContextPlan.from_messages(_chat())
    assert telemetry.instrumented()
    telemetry.uninstrument()
    assert not telemetry.instrumented()
    process_context(plan, POLICY)
    assert spans.get_finished_spans() == ()


def test_without_a_provider_spans_record_nothing_and_no_figure_is_read():
    telemetry.instrument()  # OpenTelemetry's global default: a provider that records nothing
    try:
        result = process_context(ContextPlan.from_messages(_chat()), POLICY)
        assert result._report is None  # the report was never built for a span
        assert result.report.triggered
    finally:
        telemetry.uninstrument()


def test_a_listener_makes_one_calls_span_from_its_events():
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    seen = []
    events = telemetry.listener(provider, on_event=seen.append)
    result = process_context(ContextPlan.from_messages(_chat()), POLICY, on_event=events)
    (span,) = exporter.get_finished_spans()
    figures = _figures(result.report)
    del figures["contextpolicy.kernel"]  # the events' completion does not carry it
    assert dict(span.attributes) == figures
    assert len(_step_events(span)) == 1
    assert [e.type for e in seen] == ["context.started", "context.measured", "context.triggered",
                                      "step.started", "step.completed", "context.completed"]
    with pytest.raises(ContextStepError):
        with telemetry.listener(provider) as events:
            process_context(
                ContextPlan.from_messages(_chat()),
                {"mode": "reduce", "triggerChars": 10, "steps": [
                    {"id": "s", "kind": "compress", "fragmentId": "history", "handlerId": "h",
                     "targetChars": 5}]},
                handlers={"h": lambda r: 1 / 0}, on_event=events, on_step_error="raise")
    failed = exporter.get_finished_spans()[1]
    assert failed.status.status_code is StatusCode.ERROR
    assert failed.name == "contextpolicy reduce"
    with pytest.raises(ContextPolicyError, match="expected a callable"):
        telemetry.listener(provider, on_event=3)


def test_the_core_never_imports_opentelemetry():
    code = ("import sys, contextpolicy\n"
            "from contextpolicy import ContextPlan, process_context\n"
            "process_context(ContextPlan.from_messages([{'role': 'user', 'content': 'hi'}]),"
            " {'mode': 'validate'})\n"
            "assert not [m for m in sys.modules if m.startswith('opentelemetry')]\n")
    subprocess.run([sys.executable, "-c", code], check=True)


def test_a_streamed_call_is_one_span_and_ends_when_the_caller_stops_reading(spans):
    from contextpolicy import _tracing

    def summarise(request):
        process_context(ContextPlan.from_messages([{"role": "user", "content": "x"}]),
                        {"mode": "validate"})
        return "short"

    policy = {"mode": "reduce", "triggerChars": 10, "steps": [
        {"id": "squeeze", "kind": "compress", "fragmentId": "history", "handlerId": "sum",
         "targetChars": 5}]}
    plan = ContextPlan.from_messages(_chat())
    quiet_between = []

    async def read_all():
        async for _ in astream_context(plan, policy, handlers={"sum": summarise}):
            quiet_between.append(_tracing.QUIET.get())

    async def read_one():
        stream = astream_context(plan, POLICY)
        await stream.__anext__()
        await stream.aclose()

    asyncio.run(read_all())
    (span,) = spans.get_finished_spans()  # the handler's own run made none
    assert span.name == "contextpolicy reduce" and not any(quiet_between)
    asyncio.run(read_one())
    assert len(spans.get_finished_spans()) == 2  # ended at aclose, not at collection
