"""The cache-stable cut (``contextpolicy.stable``): each call's input equals what a persisted
reduction would hold, on both kernels, cold and through the memo, whatever the messages are."""

from __future__ import annotations

import copy
from itertools import pairwise
from typing import Any
from unittest import mock

import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from contextpolicy import ContextPlanError, ContextPolicyError, _kernel, check_input_budget, stable
from contextpolicy._trim_replay import TrimRuns
from contextpolicy.handlers import clear_tool_results, registry, summarize, truncate_messages
from contextpolicy.stable import StableCut, StableResult
from contextpolicy.stores import MemoryStore
from tests.support.replays import call_points, persisted, shipped_agent_policy, tool_session

pytestmark = pytest.mark.usefixtures("pipeline_kernel")

HANDLERS = registry(clear_tool_results(keep=1, min_chars=50), truncate_messages(max_chars=300))


def trim(trigger: int = 60_000, target: int = 30_000, keep: int = 1,
         grouping: str = "user-turn", fragment: str = "history") -> dict[str, Any]:
    return {"mode": "reduce", "triggerChars": trigger, "targetInputChars": target, "steps": [
        {"id": "trim", "kind": "trim", "fragmentId": fragment, "targetChars": target,
         "keepGroups": keep, "grouping": {"kind": grouping}}]}


def clear_then_trim(trigger: int = 60_000, target: int = 30_000) -> dict[str, Any]:
    policy = trim(trigger, target)
    policy["steps"].insert(0, {"id": "clear", "kind": "compress", "fragmentId": "history",
                               "targetChars": target, "handlerId": "clear-tool-results"})
    return policy


def calls_of(messages: list[Any]) -> list[int]:
    """The length of the history at every model call, the last one the whole list."""
    return [*call_points(messages), len(messages)]


# ---------------------------------------------------------------------------------------------
# Sessions and policies, drawn.

def _turn(draw: Any, t: int) -> list[dict[str, Any]]:
    size = st.integers(0, 400)
    out = [{"role": "user", "content": f"q{t}" + "q" * draw(size)}]
    for r in range(draw(st.integers(0, 3))):
        cid = f"c{t}.{r}"
        if draw(st.booleans()):
            out += [{"role": "assistant", "content": None, "tool_calls": [{
                "id": cid, "type": "function", "function": {"name": "f", "arguments": "{}"}}]},
                {"role": "tool", "tool_call_id": cid, "content": "r" * draw(size)}]
        else:  # Responses items: a reasoning item glued to its call, then the output
            out += [{"type": "reasoning", "summary": [{"type": "summary_text", "text": "t"}]},
                    {"type": "function_call", "call_id": cid, "name": "f", "arguments": "{}"},
                    {"type": "function_call_output", "call_id": cid,
                     "output": "o" * draw(size)}]
    if draw(st.booleans()):
        out.append({"role": "assistant", "content": "a" * draw(size)})
        if draw(st.integers(0, 5)) == 0:  # two model outputs in a row
            out.append({"role": "assistant", "content": "b"})
    return out


@st.composite
def sessions(draw: Any) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    if draw(st.booleans()):
        out.append({"role": "system", "content": "be brief"})
    for t in range(draw(st.integers(0, 12))):
        out += _turn(draw, t)
    return out


@st.composite
def policies(draw: Any) -> dict[str, Any]:
    trigger = draw(st.integers(100, 4_000))
    target = draw(st.integers(0, trigger))
    steps: list[dict[str, Any]] = []
    for i in range(draw(st.integers(1, 3))):
        fragment = draw(st.sampled_from(["history", "history", "turn"]))
        if draw(st.booleans()):
            steps.append({"id": f"s{i}", "kind": "trim", "fragmentId": fragment,
                          "targetChars": draw(st.integers(0, target)),
                          "keepGroups": draw(st.integers(0, 2)),
                          "grouping": {"kind": draw(st.sampled_from(["user-turn", "message"]))}})
        else:
            steps.append({"id": f"s{i}", "kind": "compress", "fragmentId": fragment,
                          "targetChars": draw(st.integers(0, target)),
                          "handlerId": draw(st.sampled_from(list(HANDLERS)))})
    policy: dict[str, Any] = {"mode": "reduce", "triggerChars": trigger, "steps": steps}
    if draw(st.booleans()):
        policy["targetInputChars"] = max(1, target)
    return policy


# ---------------------------------------------------------------------------------------------
# The property: equal to the persisted reduction, cold and warm.

@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(sessions(), policies(), st.sampled_from([None, "You are terse."]),
       st.booleans(), st.booleans())
def test_every_call_gets_what_a_persisted_reduction_holds(messages, policy, instructions,
                                                          with_lead, question):
    lead = [{"role": "system", "content": "system prompt"}] if with_lead else []
    warm = StableCut(policy, handlers=HANDLERS)
    cold = StableCut(policy, handlers=HANDLERS, memo_size=0)
    before = copy.deepcopy(messages)
    for n in calls_of(messages):
        history = messages[:n]
        expected = persisted(history, warm.replaying, lead, instructions, question)
        got = warm.process(history, lead=lead, instructions=instructions, question=question)
        assert got.input == expected
        assert cold.process(history, lead=lead, instructions=instructions,
                            question=question).input == expected
        # the same call again (a retry, a stored history read twice): the same input
        assert warm.process(history, lead=lead, instructions=instructions,
                            question=question).input == expected
        # What the call's figures add up to: this call's input before its run, and what the
        # earlier cuts hold back, are the history handed in.
        handed = check_input_budget([*([{"role": "system", "content": instructions}]
                                       if instructions is not None else []), *lead, *history])
        assert got.report.before.chars + got.cut.held_chars == handed.chars
        assert got.cut.calls == len(call_points(history)) + 1
    assert messages == before  # never changed


# ---------------------------------------------------------------------------------------------
# Policies that only trim the history: earlier calls replayed from one measure, without a plan.

@st.composite
def trim_policies(draw: Any) -> dict[str, Any]:
    trigger = draw(st.integers(100, 4_000))
    target = draw(st.integers(0, trigger))
    steps = [{"id": f"t{i}", "kind": "trim", "fragmentId": "history",
              "targetChars": draw(st.integers(0, target)), "keepGroups": draw(st.integers(0, 2)),
              "grouping": {"kind": draw(st.sampled_from(["user-turn", "message"]))}}
             for i in range(draw(st.integers(1, 3)))]
    policy: dict[str, Any] = {"mode": "reduce", "triggerChars": trigger, "steps": steps}
    if draw(st.booleans()):
        policy["targetInputChars"] = max(1, target)
    return policy


@st.composite
def sessions_with_system_messages(draw: Any) -> list[dict[str, Any]]:
    """Sessions with system and developer messages among the turns: a trim that drops what
    was before one makes it lead the kept messages, and protected from then on."""
    out = draw(sessions())
    for _ in range(draw(st.integers(0, 3))):
        at = draw(st.integers(0, len(out)))
        role = draw(st.sampled_from(["system", "developer"]))
        out.insert(at, {"role": role, "content": "note " + "n" * draw(st.integers(0, 300))})
    return out


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(sessions_with_system_messages(), trim_policies(),
       st.sampled_from([None, "You are terse."]), st.booleans(), st.booleans())
def test_trims_replayed_without_a_plan_give_what_a_persisted_reduction_holds(
        messages, policy, instructions, with_lead, question):
    lead = [{"role": "system", "content": "system prompt"}] if with_lead else []
    warm = StableCut(policy)
    cold = StableCut(policy, memo_size=0)
    assert warm.trims_only
    for n in calls_of(messages):
        history = messages[:n]
        expected = persisted(history, warm.replaying, lead, instructions, question)
        for cut in (warm, cold):
            got = cut.process(history, lead=lead, instructions=instructions, question=question)
            assert got.input == expected
            assert got.input[len(lead) + (instructions is not None):] == [
                history[s] for s in got.sources[len(lead) + (instructions is not None):]]


def test_a_trim_policy_runs_one_plan_per_call_and_other_policies_one_per_run():
    messages = tool_session(100)
    for policy, handlers, trims_only in ((trim(), None, True),
                                         (clear_then_trim(), HANDLERS, False)):
        cut = StableCut(policy, handlers=handlers, memo_size=0)
        assert cut.trims_only is trims_only
        with mock.patch("contextpolicy.stable.process_context",
                        wraps=stable.process_context) as runs:
            result = cut.process(messages)
        assert result.cut.runs >= 5
        # the final call's plan, and one per earlier run unless the trims made them
        assert runs.call_count == (1 if trims_only else result.cut.runs + 1)
        assert result.input == persisted(messages, cut.replaying)
        assert result.cut.last_cut is not None and result.cut.held_messages > 0


def test_trim_runs_leave_a_history_that_is_not_one_range_to_the_plan():
    messages = tool_session(10)
    cut = StableCut(trim(trigger=5_000, target=2_000))
    whole = _kernel.measure(messages)
    _, chars, flags, _ = whole.arrays()
    cum = [0]
    for c in chars.tolist():
        cum.append(cum[-1] + c)
    runs = TrimRuns(cut.replaying, whole, messages, flags, cum, 0, True)
    # messages 8 on kept, then the call before message 25 (an answer): one range, cut
    src, chars, was_cut = runs.run(list(range(8, 20)), cum[20] - cum[8], 20, 25) or (
        [], 0, False)
    assert was_cut and src == list(range(src[0], 25)) and chars == cum[25] - cum[src[0]]
    assert src[0] == 20  # the newest turn before the question (keepGroups 1), then it
    # messages 0 and 2 kept, 1 not: not one range, so the plan runs instead
    assert runs.run([0, 2, 3], cum[1] + cum[4] - cum[2], 4, 5) is None


def test_a_session_cuts_only_when_the_trigger_fires_and_keeps_the_prefix_between():
    messages = tool_session(60)
    cut = StableCut(trim())
    inputs, cuts = [], 0
    for n in calls_of(messages):
        result = cut.process(messages[:n])
        cuts += result.cut.cut_this_call
        inputs.append(result.input)
        # Never above the trigger plus what one call adds.
        assert result.report.after.chars <= 60_000 + 4_000
    broken = sum(1 for a, b in pairwise(inputs) if b[:len(a)] != a)
    assert cuts >= 3  # the session is long enough to cut several times
    assert broken <= cuts


class _LongStr(str):
    """A str whose __len__ lies: what it holds is what counts."""

    def __len__(self) -> int:
        return 10**6


@pytest.mark.parametrize("policy", [trim(trigger=20_000, target=3_000),
                                    clear_then_trim(trigger=20_000, target=3_000)])
def test_instructions_and_tools_count_the_text_they_hold(policy):
    messages = tool_session(6)
    for texts in ({"tools": _LongStr("[]")}, {"instructions": _LongStr("be brief")}):
        for memo_size in (0, 8):
            cut = StableCut(policy, handlers=HANDLERS, memo_size=memo_size)
            for n in calls_of(messages):
                expected = persisted(messages[:n], cut.replaying, **texts)
                assert cut.process(messages[:n], **texts).input == expected


def test_the_tools_schemas_count_against_the_trigger_and_key_the_memo():
    messages = tool_session(30)
    small, big = '[{"name":"f"}]', '[{"name":"f","description":"' + "d" * 20_000 + '"}]'
    cut = StableCut(trim())
    for n in calls_of(messages):
        for tools in (small, big):
            result = cut.process(messages[:n], tools=tools)
            assert result.input == persisted(messages[:n], cut.prepared, tools=tools)
            assert result.input[0] == {"role": "system", "content": tools}
            assert result.sources[0] == -1 and result.input[1:] == [
                messages[s] for s in result.sources[1:]]
            assert result.report.after.chars <= 60_000 + 4_000
    # The schemas count: with the big ones the history is cut earlier and more often.
    with_small = cut.process(messages, tools=small)
    with_big = cut.process(messages, tools=big)
    assert len(with_big.input) < len(with_small.input)
    with pytest.raises(ContextPlanError, match="expected a string, got int") as info:
        cut.process(messages, tools=3)  # type: ignore[arg-type]
    assert info.value.issues[0].path == "tools"
    with pytest.raises(ContextPlanError) as info:
        cut.process(messages, instructions=b"rules")  # type: ignore[arg-type]
    assert info.value.issues[0].path == "instructions"


def test_the_memo_replays_only_the_calls_since_and_a_cold_cut_replays_them_all():
    messages = tool_session(40)
    cut = StableCut(clear_then_trim(), handlers=HANDLERS)
    first = cut.process(messages[:-3])  # the newest turn's first call
    assert first.cut.replayed == len(call_points(messages[:-3]))
    again = cut.process(messages)
    assert again.cut.replayed == 1  # the newest turn's second call
    # A call made again (a retry) is not the state after itself: it replays from the call
    # before, and gets what it got the first time.
    retry = cut.process(messages)
    assert retry.input == again.input and retry.cut.replayed == 1
    assert again.input == StableCut(clear_then_trim(), handlers=HANDLERS,
                                    memo_size=0).process(messages).input


def test_the_memo_sees_a_message_changed_in_place():
    messages = tool_session(30)
    cut = StableCut(trim(20_000, 10_000))
    cut.process(messages)
    messages[3]["content"] = "x" * 9_000  # an old answer rewritten in place
    messages.append({"role": "assistant", "content": "more"})
    messages.append({"role": "user", "content": "and?"})
    fresh = StableCut(trim(20_000, 10_000), memo_size=0).process(messages)
    first = cut.process(messages)
    assert first.input == fresh.input
    assert first.cut.replayed == len(call_points(messages))  # the memo's entry was not used


def _one_for_true(m: dict[str, Any]) -> dict[str, Any]:
    return {**m, "meta": True}


def _reordered(m: dict[str, Any]) -> dict[str, Any]:
    return dict(reversed(list(m.items())))


def _lying_text(m: dict[str, Any]) -> dict[str, Any]:
    return {**m, "content": Text("x" * len(m["content"]))}


@pytest.mark.parametrize("change", [_one_for_true, _reordered, _lying_text],
                         ids=["1-becomes-True", "keys-reordered", "str-subclass-equal-to-all"])
def test_the_memo_never_answers_for_messages_that_only_compare_equal(change):
    # 1 == True, dicts compare without their key order, and a str subclass can say it equals
    # anything; each is different input to a model, so a memo entry taken from the messages
    # before such a change is not used: the call gets what a cold cut gives, byte for byte.
    messages = tool_session(30)
    for m in messages:
        if m["role"] == "tool":
            m["meta"] = 1
    policy = clear_then_trim(20_000, 10_000)
    cut = StableCut(policy, handlers=HANDLERS)
    for point in calls_of(messages):
        cut.process(messages[:point])
    tool = next(k for k, m in enumerate(messages) if m["role"] == "tool")
    changed = [*messages[:tool], change(messages[tool]), *messages[tool + 1:]]
    warm = cut.process(changed)
    cold = StableCut(policy, handlers=HANDLERS, memo_size=0).process(changed)
    assert warm.cut.replayed == cold.cut.replayed == len(call_points(changed))
    assert orjson.dumps(warm.input) == orjson.dumps(cold.input)  # values, types, key order


class Text(str):
    def __eq__(self, other: object) -> bool:  # claims to equal everything
        return True

    __hash__ = str.__hash__


class Message(dict):
    pass


def test_messages_of_other_types_are_cut_alike_and_never_memoised():
    messages: list[Any] = tool_session(25)
    messages[1] = Message(messages[1])
    messages[2]["content"] = Text(messages[2]["content"])
    cut = StableCut(trim(20_000, 10_000))
    expected = persisted(messages, cut.replaying)
    assert cut.process(messages).input == expected
    assert cut.process(messages).cut.replayed == len(call_points(messages))  # not memoised
    swapped = [*messages[:2], {**messages[2], "content": Text("y" * 9_000)}, *messages[3:]]
    assert cut.process(swapped).input == persisted(swapped, cut.replaying)


def test_a_summary_is_stored_by_the_content_it_replaced_and_never_asked_for_twice():
    asked: list[int] = []

    def model(text: str, target: int) -> str:
        asked.append(len(text))
        return "summary"

    policy = {"mode": "reduce", "triggerChars": 20_000, "targetInputChars": 10_000, "steps": [
        {"id": "sum", "kind": "compress", "fragmentId": "history", "handlerId": "summarize",
         "targetChars": 2_000, "keepGroups": 1}]}
    store = MemoryStore()
    handlers = registry(summarize(model))
    messages = tool_session(30)
    cut = StableCut(policy, handlers=handlers, store=store)
    results = [cut.process(messages[:n]) for n in calls_of(messages)]
    summaries = sum(r.cut.handler_calls for r in results)
    assert summaries == len(asked) >= 2 and len(store) == len(asked)
    # A cold cut (a new process, say) with the same store replays without asking again.
    again = StableCut(policy, handlers=handlers, store=store, memo_size=0).process(messages)
    assert again.cut.handler_calls == 0 and again.cut.store_hits >= 2
    assert again.input == results[-1].input and len(asked) == summaries
    assert any("Summary of the earlier conversation" in str(m.get("content"))
               for m in again.input)


class FailingStore:
    def __init__(self, fails: str) -> None:
        self.fails, self.items = fails, MemoryStore()

    def get(self, key: str) -> Any:
        if self.fails == "get":
            raise OSError("store down")
        return self.items.get(key)

    def put(self, key: str, value: Any) -> None:
        if self.fails == "put":
            raise OSError("store down")
        self.items.put(key, value)


@pytest.mark.parametrize("fails", ["get", "put"])
def test_a_store_that_fails_is_a_miss_that_is_said_never_a_lost_summary(fails):
    # A store is a cache: the summariser's output is used whatever the store does, and the
    # failure is a warning naming the store, not the step's error blamed on the handler.
    def model(text: str, target: int) -> str:
        return "summary"

    policy = {"mode": "reduce", "triggerChars": 20_000, "targetInputChars": 10_000, "steps": [
        {"id": "sum", "kind": "compress", "fragmentId": "history", "handlerId": "summarize",
         "targetChars": 2_000, "keepGroups": 1}]}
    handlers = registry(summarize(model))
    messages = tool_session(30)
    working = StableCut(policy, handlers=handlers, memo_size=0).process(messages)
    with pytest.warns(RuntimeWarning, match=f"the summary store's {fails} raised OSError: "
                                            "store down; handler 'summarize'"):
        failing = StableCut(policy, handlers=handlers, store=FailingStore(fails),
                            memo_size=0).process(messages)
    assert failing.input == working.input
    assert all(s.status != "error" for s in failing.report.steps)
    assert failing.cut.handler_calls == working.cut.handler_calls >= 2


def test_the_sources_name_the_message_each_input_message_is_or_stands_for():
    messages = tool_session(30)
    result = StableCut(clear_then_trim(20_000, 10_000), handlers=HANDLERS).process(
        messages, lead=[{"role": "system", "content": "s"}])
    assert isinstance(result, StableResult) and result.sources[0] == -1
    for message, source in zip(result.input[1:], result.sources[1:], strict=True):
        original = messages[source]
        assert message is original or (message["role"] == original["role"] == "tool"
                                        and message["tool_call_id"] == original["tool_call_id"])


def test_a_validate_policy_and_a_short_history_pass_as_they_are():
    messages = tool_session(3)
    for policy in ({"mode": "validate"}, trim()):
        result = StableCut(policy).process(messages)
        assert result.input == messages and all(
            a is b for a, b in zip(result.input, messages, strict=True))
        assert result.cut.held_messages == 0 and result.cut.last_cut is None


def test_bad_input_is_a_clear_error():
    cut = StableCut(trim())
    with pytest.raises(ContextPlanError) as exc:
        cut.process("not a list")  # type: ignore[arg-type]
    assert exc.value.issues[0].path == "messages"
    with pytest.raises(ContextPlanError) as exc:
        cut.process([{"role": "user", "content": "hi"}, 7], path="input")
    assert exc.value.issues[0].path.startswith("input[1]")
    with pytest.raises(ValueError, match="memo_size"):
        StableCut(trim(), memo_size=-1)
    with pytest.raises(ContextPolicyError):
        StableCut({"mode": "audit", "mutableFragmentIds": ["history"]})


def test_a_store_without_get_and_put_is_refused_when_the_cut_is_made():
    with pytest.raises(TypeError, match=r"store: expected an object with get\(key\) and "
                                        r"put\(key, value\) \(a SummaryStore\), got object"):
        StableCut(trim(), store=object())  # type: ignore[arg-type]


def test_async_runs_give_the_same_input():
    import asyncio

    messages = tool_session(30)
    policy = clear_then_trim(20_000, 10_000)
    sync = StableCut(policy, handlers=HANDLERS).process(messages)
    result = asyncio.run(StableCut(policy, handlers=HANDLERS).aprocess(messages))
    assert result.input == sync.input and result.cut == sync.cut


def test_every_call_of_agent_traces_stays_within_the_trigger_plus_what_it_added():
    from contextpolicy.synthetic import agent_trace_corpus

    policy, handlers = shipped_agent_policy()
    calls = 0
    for session in agent_trace_corpus(6, seed=3):
        cut, before = StableCut(policy, handlers=handlers), 0
        for n in call_points(session):
            sent = cut.process(session[:n]).report.after.chars
            added = check_input_budget(session[before:n]).chars
            assert sent <= policy["triggerChars"] + added
            before, calls = n, calls + 1
    assert calls > 100


def test_a_long_agent_run_keeps_the_memo_short_and_every_input_right():
    from contextpolicy.stable import _chain

    messages = tool_session(60)
    cut = StableCut(trim(20_000, 10_000))
    for n in calls_of(messages):
        result = cut.process(messages[:n])
        assert result.cut.replayed <= 1  # the call before is in the memo
    assert result.input == persisted(messages, cut.replaying)
    assert max(len(_chain(e)) for e in cut._memo.values()) <= 16


def test_messages_holding_other_objects_are_cut_after_an_earlier_change():
    import datetime

    messages = tool_session(30)
    for m in messages:
        if m["role"] == "tool":
            m["at"] = datetime.date(2026, 1, 2)  # a key no snapshot copies exactly
    cut = StableCut(clear_then_trim(20_000, 10_000), handlers=HANDLERS)
    for n in calls_of(messages):
        result = cut.process(messages[:n])
        assert result.input == persisted(messages[:n], cut.replaying)
    assert any(m.get("at") for m in result.input)
