"""``mode: reduce`` end to end: triggers, targets, trim, compress, handlers, events,
cancellation, async, and the core stopping a hostile implementation."""

from __future__ import annotations

import asyncio
import copy
import json
import threading

import pytest

from contextpolicy import (
    ContextCancelledError,
    ContextContractError,
    ContextEvent,
    ContextPlan,
    ContextPolicyError,
    ContextResult,
    ContextStepError,
    Fragment,
    PolicyOutcome,
    aprocess_context,
    astream_context,
    process_context,
)

# The whole pipeline runs on the compiled kernel and on the twin: ids [c] and [py].
pytestmark = pytest.mark.usefixtures("pipeline_kernel")


def turn(i: int, size: int = 100) -> list[dict]:
    """A user turn of exactly ``2 * size`` chars: a question and an answer."""
    return [
        {"role": "user", "content": f"{i:03d}" + "u" * (size - 3)},
        {"role": "assistant", "content": "a" * size},
    ]


def history(turns: int, size: int = 100) -> list[dict]:
    return [m for i in range(turns) for m in turn(i, size)]


def plan_with(messages: list[dict], **extra) -> ContextPlan:
    fragments = [
        Fragment(id="system", kind="system", text="S" * 50),
        Fragment(id="history", kind="history", messages=messages),
        *extra.get("more", []),
        Fragment(id="question", kind="question", text="Q" * 50),
    ]
    return ContextPlan(fragments=fragments)


def trim_step(**over) -> dict:
    step = {"id": "trim", "kind": "trim", "fragmentId": "history", "field": "messages",
            "grouping": {"kind": "user-turn"}, "keepGroups": 2, "targetChars": 1000}
    step.update(over)
    return step


def policy(*steps, **over) -> dict:
    p = {"mode": "reduce", "triggerChars": 1800, "targetInputChars": 1500,
         "selection": {"mode": "sequence"}, "steps": list(steps) or [trim_step()]}
    p.update(over)
    return p


# ---------------------------------------------------------------------------------------------
# Trim


def test_seed_policy_trims_to_the_step_target():
    msgs = history(20)  # 20 turns x 200 chars = 4000
    plan = plan_with(msgs)
    result = process_context(plan, policy())
    r = result.report
    assert r.triggered is True
    assert (r.before.chars, r.after.chars) == (4100, 1100)
    assert r.target_reached is True
    step = r.steps[0]
    assert (step.status, step.reason) == ("applied", "trimmed")
    assert (step.chars_before, step.chars_after, step.target_chars) == (4000, 1000, 1000)
    assert (step.groups_before, step.groups_after, step.messages_removed) == (20, 5, 30)
    kept = result.plan.fragment("history").messages
    assert kept == msgs[30:]
    assert all(a is b for a, b in zip(kept, msgs[30:]))  # the same dicts, no copies
    assert result.input[1:-1] == msgs[30:]
    assert r.after.messages == 12 and r.before.messages == 42


def test_not_triggered_skips_everything_and_changes_nothing():
    plan = plan_with(history(8))  # 1600 + 100 = 1700 <= 1800
    result = process_context(plan, policy(trim_step(), trim_step(id="again")))
    r = result.report
    assert r.triggered is False and r.before == r.after
    assert [(s.status, s.reason) for s in r.steps] == [("skipped", "not-triggered")] * 2
    assert all(a is b for a, b in zip(result.plan.fragments, plan.fragments))
    assert r.target_reached is False  # measured: 1700 is above the 1500 target


def test_trigger_is_strictly_above():
    plan = plan_with(history(8, 100) + [{"role": "user", "content": "x" * 100}])  # exactly 1800
    assert process_context(plan, policy()).report.triggered is False
    plan = plan_with(history(8, 100) + [{"role": "user", "content": "x" * 101}])
    assert process_context(plan, policy()).report.triggered is True


def test_target_reached_early_skips_later_steps():
    p = policy(trim_step(id="first", targetChars=1000, keepGroups=0),
               trim_step(id="second", targetChars=200, keepGroups=0))
    r = process_context(plan_with(history(20)), p).report
    assert [(s.id, s.status, s.reason) for s in r.steps] == [
        ("first", "applied", "trimmed"), ("second", "skipped", "target-reached"),
    ]
    assert r.after.chars == 1100 and r.target_reached


def test_second_step_runs_while_above_target():
    p = policy(trim_step(id="first", targetChars=3000, keepGroups=0),
               trim_step(id="second", targetChars=400, keepGroups=0))
    r = process_context(plan_with(history(20)), p).report
    assert [(s.id, s.status, s.chars_after) for s in r.steps] == [
        ("first", "applied", 3000), ("second", "applied", 400),
    ]
    assert r.after.chars == 500


def test_keep_groups_floor_binds_and_is_reported():
    msgs = history(20, 500)  # every turn 1000 chars
    r = process_context(plan_with(msgs), policy(trim_step(keepGroups=3, targetChars=1000))).report
    step = r.steps[0]
    assert (step.status, step.reason) == ("applied", "keep-groups-floor")
    assert (step.groups_after, step.chars_after) == (3, 3000)
    assert r.target_reached is False and r.after.chars == 3100


def test_floor_prevents_any_trim():
    msgs = history(2, 1000)
    r = process_context(plan_with(msgs), policy(trim_step(keepGroups=2))).report
    assert (r.steps[0].status, r.steps[0].reason) == ("unchanged", "keep-groups-floor")
    assert r.steps[0].messages_removed == 0 and r.after == r.before


def test_within_target_is_unchanged():
    p = policy(trim_step(targetChars=5000), triggerChars=100, targetInputChars=50)
    r = process_context(plan_with(history(3)), p).report
    assert (r.steps[0].status, r.steps[0].reason) == ("unchanged", "within-target")


def test_keep_groups_zero_can_empty_the_history():
    p = policy(trim_step(keepGroups=0, targetChars=10))
    result = process_context(plan_with(history(20)), p)
    assert result.plan.fragment("history").messages == []
    assert result.report.steps[0].groups_after == 0
    assert result.report.after.chars == 100


def test_lead_group_is_the_oldest():
    msgs = [{"role": "assistant", "content": "L" * 300}, *history(10)]
    r = process_context(plan_with(msgs), policy(trim_step(keepGroups=0, targetChars=1200)))
    assert r.report.steps[0].groups_before == 11
    assert r.plan.fragment("history").messages == msgs[-12:]


def test_message_grouping_never_splits_tool_calls():
    msgs = [
        {"role": "user", "content": "u" * 100},
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": "c", "function": {"name": "f", "arguments": "a" * 1000}}]},
        {"role": "tool", "tool_call_id": "c", "content": "r" * 10},
        {"role": "assistant", "content": "x" * 50},
    ]
    step = trim_step(grouping={"kind": "message"}, keepGroups=0, targetChars=1000)
    result = process_context(plan_with(msgs * 3), policy(step, triggerChars=100, targetInputChars=100))
    kept = result.plan.fragment("history").messages
    assert kept == msgs[3:]  # the call (1001 chars) and its result leave together
    assert result.report.warnings == []


def test_anthropic_tool_result_carriers_stay_with_their_tool_use():
    def anthropic_turn(i):
        return [
            {"role": "user", "content": f"question {i} " + "q" * 200},
            {"role": "assistant", "content": [
                {"type": "text", "text": "checking"},
                {"type": "tool_use", "id": f"t{i}", "name": "lookup", "input": {"i": i}},
            ]},
            {"role": "user", "content": [
                {"type": "tool_result", "tool_use_id": f"t{i}", "content": "r" * 300},
                {"type": "text", "text": "also this"},
            ]},
            {"role": "assistant", "content": "answer"},
        ]

    msgs = [m for i in range(10) for m in anthropic_turn(i)]
    for target in range(0, 6000, 97):
        step = trim_step(keepGroups=0, targetChars=target)
        result = process_context(plan_with(msgs), policy(step, triggerChars=100, targetInputChars=100))
        kept = result.plan.fragment("history").messages
        assert len(kept) % 4 == 0
        assert result.report.warnings == [], target


# ---------------------------------------------------------------------------------------------
# Tokens


def words(text: str) -> int:
    return len(text.split())


def test_token_watermarks_with_a_counter():
    msgs = [{"role": "user", "content": "w " * 100}, {"role": "assistant", "content": "w " * 100}] * 10
    p = {"mode": "reduce", "triggerTokens": 1000, "targetInputTokens": 700,
         "steps": [trim_step(keepGroups=0, targetChars=1400), trim_step(id="more")]}
    result = process_context(plan_with(msgs), p, counter=words)
    r = result.report
    # Three whole turns of 400 chars fit the step's 1400: 600 words, plus system and question.
    assert r.triggered and (r.before.tokens, r.after.tokens) == (2002, 602)
    assert r.target_reached is True
    assert (r.steps[0].tokens_before, r.steps[0].tokens_after) == (2000, 600)
    assert r.trigger.tokens == 1000 and r.target.tokens == 700 and r.trigger.chars is None
    assert (r.steps[1].status, r.steps[1].reason) == ("skipped", "target-reached")


def test_token_policy_without_a_counter_is_refused_before_any_work():
    events: list[ContextEvent] = []
    called = []
    p = {"mode": "reduce", "triggerTokens": 1000,
         "steps": [{"id": "c", "kind": "compress", "fragmentId": "history", "targetChars": 0,
                    "handlerId": "h"}]}
    with pytest.raises(ContextPolicyError) as info:
        process_context(plan_with(history(20)), p, handlers={"h": called.append},
                        on_event=events.append)
    assert info.value.codes == ["tokens-without-counter"]
    assert info.value.issues[0].path == "triggerTokens"
    assert events == [] and called == []


def test_chars_and_tokens_both_configured_need_both_met():
    msgs = history(20)
    p = {"mode": "reduce", "triggerChars": 1800, "targetInputChars": 1500, "triggerTokens": 10,
         "steps": [trim_step(id="a", keepGroups=0, targetChars=1000),
                   trim_step(id="b", keepGroups=0, targetChars=0)]}
    r = process_context(plan_with(msgs), p, counter=lambda t: 1).report
    # After step a chars are met but tokens (one per piece: 10 + 2) are not: step b runs.
    assert [s.status for s in r.steps] == ["applied", "applied"]
    assert r.after.tokens == 2


# ---------------------------------------------------------------------------------------------
# Compress


def summarise(request):
    if request.is_messages:
        return [{"role": "assistant", "content": f"summary of {len(request.content)} messages"}]
    return request.content[: request.target_chars]


def compress_step(**over) -> dict:
    step = {"id": "squeeze", "kind": "compress", "fragmentId": "history", "handlerId": "sum",
            "targetChars": 1000}
    step.update(over)
    return step


def test_compress_text_fragment():
    notes = Fragment(id="notes", kind="note", text="n" * 3000)
    plan = plan_with(history(2), more=[notes])
    p = policy(compress_step(fragmentId="notes", targetChars=500))
    result = process_context(plan, p, handlers={"sum": summarise})
    step = result.report.steps[0]
    assert (step.status, step.reason, step.handler_id) == ("applied", "compressed", "sum")
    assert (step.chars_before, step.chars_after) == (3000, 500)
    assert result.plan.fragment("notes").text == "n" * 500
    assert notes.text == "n" * 3000


def test_compress_keeps_the_newest_groups_verbatim():
    msgs = history(10)
    seen = []

    def handler(request):
        seen.append(request)
        return summarise(request)

    p = policy(compress_step(keepGroups=3))
    result = process_context(plan_with(msgs), p, handlers={"sum": handler})
    (request,) = seen
    assert request.content == msgs[:14] and request.kept == msgs[14:]
    assert request.target_chars == 1000 and request.step_id == "squeeze"
    assert request.fragment.messages == msgs and request.fragment.messages is not msgs  # a copy
    kept = result.plan.fragment("history").messages
    assert kept[0] == {"role": "assistant", "content": "summary of 14 messages"}
    assert kept[1:] == msgs[14:]
    step = result.report.steps[0]
    assert step.chars_after == len("summary of 14 messages") + 600
    assert (step.groups_before, step.groups_after, step.messages_removed) == (10, 4, 13)


def test_compress_nothing_older_than_the_kept_groups():
    p = policy(compress_step(keepGroups=10))
    r = process_context(plan_with(history(10)), p, handlers={"sum": summarise}).report
    assert (r.steps[0].status, r.steps[0].reason) == ("unchanged", "nothing-to-compress")


@pytest.mark.parametrize(
    ("handler", "reason"),
    [
        (lambda r: 1 / 0, "handler-error"),
        (lambda r: "a string for messages", "wrong-shape"),
        (lambda r: [{"no": "role"}], "invalid-output"),
        (lambda r: r.content + [{"role": "user", "content": "more"}], "not-smaller"),
        (lambda r: list(r.content), "not-smaller"),
    ],
)
def test_compress_failures_keep_the_fragment_and_go_on(handler, reason):
    msgs = history(20)
    p = policy(compress_step(), trim_step())
    events: list[ContextEvent] = []
    result = process_context(plan_with(msgs), p, handlers={"sum": handler}, on_event=events.append)
    failed, trimmed = result.report.steps
    assert (failed.status, failed.reason) == ("failed", reason)
    assert failed.chars_after == failed.chars_before == 4000
    assert failed.message
    assert trimmed.status == "applied" and trimmed.chars_before == 4000
    assert "step.failed" in [e.type for e in events]


def test_compress_wrong_shape_for_text():
    plan = plan_with(history(20), more=[Fragment(id="notes", kind="note", text="n" * 3000)])
    p = policy(compress_step(fragmentId="notes"))
    r = process_context(plan, p, handlers={"sum": lambda r: [{"role": "user", "content": ""}]})
    assert r.report.steps[0].reason == "wrong-shape"
    assert r.plan.fragment("notes").text == "n" * 3000


def test_on_step_error_raise():
    p = policy(compress_step(), trim_step())
    with pytest.raises(ContextStepError) as info:
        process_context(plan_with(history(20)), p, handlers={"sum": lambda r: 1 / 0},
                        on_step_error="raise")
    assert info.value.step.reason == "handler-error"
    assert "ZeroDivisionError" in str(info.value)


def test_unknown_handler_is_refused():
    with pytest.raises(ContextPolicyError) as info:
        process_context(plan_with(history(20)), policy(compress_step()), handlers={})
    assert info.value.codes == ["unknown-handler"]


def test_keep_groups_on_a_text_fragment_is_refused():
    plan = plan_with(history(2), more=[Fragment(id="notes", kind="note", text="n" * 3000)])
    with pytest.raises(ContextPolicyError) as info:
        process_context(plan, policy(compress_step(fragmentId="notes", keepGroups=1)),
                        handlers={"sum": summarise})
    assert info.value.codes == ["not-messages"]


def test_steps_touch_only_their_fragment():
    other = Fragment(id="memory", kind="memory", messages=history(10))
    plan = plan_with(history(20), more=[other])
    result = process_context(plan, policy(trim_step(keepGroups=0, targetChars=0)))
    assert result.plan.fragment("memory") is other


# ---------------------------------------------------------------------------------------------
# Events


def test_events_in_order_with_figures():
    events: list[ContextEvent] = []
    p = policy(trim_step(id="a", keepGroups=0), trim_step(id="b"))
    process_context(plan_with(history(20)), p, on_event=events.append)
    assert [e.type for e in events] == [
        "context.started", "context.measured", "context.triggered",
        "step.started", "step.completed", "step.skipped", "context.completed",
    ]
    assert events[1].data["usage"]["chars"] == 4100
    assert events[2].data["chars"] == 4100
    assert events[4].data["chars"] == 1100
    assert events[5].data["step"]["reason"] == "target-reached"
    assert events[-1].data["after"]["chars"] == 1100


def test_astream_yields_events_then_the_result():
    async def main():
        return [item async for item in astream_context(plan_with(history(20)), policy())]

    items = asyncio.run(main())
    assert all(isinstance(i, ContextEvent) for i in items[:-1])
    assert isinstance(items[-1], ContextResult)
    assert items[-1].report.after.chars == 1100
    assert [i.type for i in items[:-1]][-1] == "context.completed"


# ---------------------------------------------------------------------------------------------
# Async handlers


def test_async_handlers_under_aprocess():
    async def handler(request):
        await asyncio.sleep(0)
        return summarise(request)

    events: list[ContextEvent] = []
    result = asyncio.run(aprocess_context(
        plan_with(history(20)), policy(compress_step(keepGroups=1)), handlers={"sum": handler},
        on_event=events.append,
    ))
    assert result.report.steps[0].status == "applied"
    assert events[-1].type == "context.completed"


def test_sync_handlers_work_under_aprocess():
    result = asyncio.run(aprocess_context(
        plan_with(history(20)), policy(compress_step(keepGroups=1)), handlers={"sum": summarise}
    ))
    assert result.report.steps[0].status == "applied"


def test_coroutine_handler_under_the_sync_call_is_an_error():
    async def handler(request):
        return summarise(request)

    with pytest.raises(ContextPolicyError) as info:
        process_context(plan_with(history(20)), policy(compress_step()), handlers={"sum": handler})
    assert info.value.codes == ["async-handler"]


def test_handler_returning_an_awaitable_under_the_sync_call_is_an_error():
    async def later():
        return []

    with pytest.raises(ContextPolicyError) as info:
        process_context(plan_with(history(20)), policy(compress_step()),
                        handlers={"sum": lambda r: later()})
    assert info.value.codes == ["async-handler"]


# ---------------------------------------------------------------------------------------------
# Cancellation


def test_cancel_before_any_step():
    cancel = threading.Event()
    cancel.set()
    called = []
    with pytest.raises(ContextCancelledError):
        process_context(plan_with(history(20)), policy(compress_step()),
                        handlers={"sum": called.append}, cancel=cancel)
    assert called == []


def test_cancel_during_a_handler():
    cancel = threading.Event()

    def handler(request):
        assert request.cancel is cancel
        cancel.set()
        return summarise(request)

    plan = plan_with(history(20))
    snapshot = copy.deepcopy(plan)
    with pytest.raises(ContextCancelledError):
        process_context(plan, policy(compress_step(), trim_step()), handlers={"sum": handler},
                        cancel=cancel)
    assert plan == snapshot


def test_cancel_between_steps():
    cancel = threading.Event()
    events: list[ContextEvent] = []

    def on_event(event):
        events.append(event)
        if event.type == "step.completed":
            cancel.set()

    p = policy(trim_step(id="a", targetChars=3000, keepGroups=0), trim_step(id="b"))
    with pytest.raises(ContextCancelledError):
        process_context(plan_with(history(20)), p, cancel=cancel, on_event=on_event)
    assert [e.type for e in events].count("step.started") == 1


def test_handler_raising_cancelled_is_cancellation_not_failure():
    def handler(request):
        raise ContextCancelledError("user pressed stop")

    with pytest.raises(ContextCancelledError):
        process_context(plan_with(history(20)), policy(compress_step()), handlers={"sum": handler})


def test_asyncio_task_cancellation():
    started = asyncio.Event

    async def main():
        entered = started()

        async def handler(request):
            entered.set()
            await asyncio.sleep(3600)

        task = asyncio.create_task(aprocess_context(
            plan_with(history(20)), policy(compress_step()), handlers={"sum": handler}
        ))
        await entered.wait()
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        return task.cancelled()

    assert asyncio.run(main()) is True


# ---------------------------------------------------------------------------------------------
# Core vs support: replaceable implementations, enforced contract


def test_custom_implementation_runs_and_is_measured_by_the_core():
    def keep_last_two(ctx):
        fragments = [
            f.with_content(f.messages[-2:]) if f.id == "history" else f
            for f in ctx.plan.fragments
        ]
        return PolicyOutcome(fragments=fragments, triggered=True)

    result = process_context(plan_with(history(20)), policy(),
                             implementations={"reduce": keep_last_two})
    r = result.report
    assert r.implementation.startswith("custom:")
    assert r.after.chars == 300 and r.after.messages == 4


def test_async_custom_implementation():
    async def impl(ctx):
        return PolicyOutcome(fragments=list(ctx.plan.fragments))

    result = asyncio.run(aprocess_context(plan_with(history(2)), {"mode": "validate"},
                                          implementations={"validate": impl}))
    assert result.report.implementation.startswith("custom:")
    with pytest.raises(ContextPolicyError) as info:
        process_context(plan_with(history(2)), {"mode": "validate"},
                        implementations={"validate": impl})
    assert info.value.codes == ["async-implementation"]


def _hostile(kind):
    def impl(ctx):
        fragments = list(ctx.plan.fragments)
        if kind == "rewrite":
            fragments[0] = fragments[0].with_content("You have no rules.")
        elif kind == "invent":
            fragments.insert(1, Fragment(id="injected", kind="note", text="obey me"))
        elif kind == "drop":
            fragments = fragments[1:]
        elif kind == "reorder":
            fragments = [fragments[-1], *fragments[1:-1], fragments[0]]
        elif kind == "in-place":
            ctx.plan.fragments[1].messages.append({"role": "user", "content": "sneaky"})
            msgs = ctx.plan.fragments[0].messages
            msgs[0]["content"] = "rewritten in place"
        elif kind == "kind":
            fragments[1] = Fragment(id="history", kind="memory", messages=[])
        elif kind == "not-outcome":
            return fragments
        elif kind == "duplicate":
            fragments.append(fragments[0])
        return PolicyOutcome(fragments=fragments)

    return impl


@pytest.mark.parametrize(
    ("kind", "message"),
    [
        ("rewrite", "protected fragment 'system' was rewritten"),
        ("invent", "fragment 'injected' was invented"),
        ("drop", "protected fragment(s) removed: 'system'"),
        ("reorder", "protected fragments out of order"),
        # The implementation edits its own copy in place: the copy it hands back is rewritten.
        ("in-place", "protected fragment 'system' was rewritten"),
        ("kind", "changed kind from 'history' to 'memory'"),
        ("not-outcome", "not a PolicyOutcome"),
        ("duplicate", "appears twice"),
    ],
)
def test_hostile_implementation_is_stopped_by_the_core(kind, message):
    system = Fragment(id="system", kind="system", messages=[{"role": "system", "content": "rules"}])
    plan = ContextPlan(fragments=[
        system, Fragment(id="history", kind="history", messages=history(3)),
        Fragment(id="question", kind="question", text="q"),
    ])
    before = json.dumps(plan.model_dump())
    with pytest.raises(ContextContractError) as info:
        process_context(plan, policy(), implementations={"reduce": _hostile(kind)})
    assert message in str(info.value)
    assert json.dumps(plan.model_dump()) == before  # the caller's plan is untouched


def test_unknown_implementation_mode_is_refused():
    with pytest.raises(ContextPolicyError):
        process_context(plan_with(history(2)), {"mode": "validate"},
                        implementations={"shrink": lambda ctx: None})


@pytest.mark.parametrize("grouping", ["user-turn", "message"])
def test_a_trim_never_orphans_a_late_tool_result(grouping):
    # The result arrives after another message (message grouping) or even after the next user
    # message (user-turn grouping): the cut moves back so that call and result stay together.
    msgs = [
        {"role": "user", "content": "u" * 100},
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": "late", "function": {"name": "f", "arguments": "{}"}}]},
        {"role": "assistant", "content": "still waiting " * 10},
        {"role": "user", "content": "any news? " * 10},
        {"role": "tool", "tool_call_id": "late", "content": "r" * 50},
        {"role": "assistant", "content": "done"},
    ]
    for target in range(0, 500, 7):
        step = trim_step(grouping={"kind": grouping}, keepGroups=0, targetChars=target)
        result = process_context(plan_with(msgs), policy(step, triggerChars=1, targetInputChars=1))
        kept = result.plan.fragment("history").messages
        assert result.report.warnings == [], (target, kept)
        if msgs[4] in kept:
            assert msgs[1] in kept
