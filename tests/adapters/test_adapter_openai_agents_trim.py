"""What the OpenAI Agents SDK adapter's trims keep: regressions of peers' trimming (an output
whose call was cut, a reasoning item left without its item, a pop from the middle), generated
Responses histories, the turn in progress (reduced only by a step that names it), and one
policy document working unchanged in every adapter.

The fake model and the shared helpers are in ``tests/support/openai_agents.py``. Marked
``extras``: the main suite deselects it; CI runs it with ``pytest -m extras``.
"""

from __future__ import annotations

import copy
import itertools
import json
from typing import Any

import agents
import hypothesis
import pytest
from agents import Runner
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st

from contextpolicy.adapters.openai_agents import context_policy_input_filter
from tests.support.openai_agents import (
    INSTRUCTIONS,
    RecordingModel,
    Spy,
    assert_model_got_what_the_filter_kept,
    call_data,
    chars,
    identities,
    make_agent,
    old_turn,
    orphans,
    question,
    run_config,
    trim,
    with_instructions,
)

pytestmark = [pytest.mark.extras, pytest.mark.usefixtures("pipeline_kernel")]


@pytest.fixture(autouse=True)
def offline(monkeypatch: pytest.MonkeyPatch) -> None:
    """No key to reach OpenAI with, and no traces to export."""
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    agents.set_tracing_disabled(True)


def expected_turns(sizes: list[int], target: int, keep: int = 0) -> int:
    """How many of the newest turns a user-turn trim keeps: the longest suffix that fits, but at
    least ``keep``."""
    kept, total = 0, 0
    for size in reversed(sizes):
        if total + size > target:
            break
        total += size
        kept += 1
    return min(len(sizes), max(kept, keep))


# ---------------------------------------------------------------------------------------------
# Regressions of peers' trimming.


def parallel_turn(i: int, size: int = 30) -> list[dict[str, Any]]:
    """Two rounds of tools in one turn, the first round with two parallel calls."""
    a, b, c = f"call_{i}_a", f"call_{i}_b", f"call_{i}_c"
    return [
        {"role": "user", "content": f"turn {i} " + "u" * size},
        {"type": "reasoning", "id": f"rs_{i}_1", "summary": [{"type": "summary_text", "text": "r"}]},
        {"type": "function_call", "call_id": a, "name": "lookup", "arguments": "a" * size},
        {"type": "function_call", "call_id": b, "name": "lookup", "arguments": "{}"},
        {"type": "function_call_output", "call_id": a, "output": "x"},
        {"type": "function_call_output", "call_id": b, "output": "y" * size},
        {"type": "reasoning", "id": f"rs_{i}_2", "summary": [{"type": "summary_text", "text": "rr"}]},
        {"type": "function_call", "call_id": c, "name": "lookup", "arguments": "{}"},
        {"type": "function_call_output", "call_id": c, "output": "z" * (size // 2)},
        {"type": "reasoning", "id": f"rs_{i}_3", "summary": [{"type": "summary_text", "text": "rrr"}]},
        {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "done"}]},
    ]


def test_openai_agents_4322_function_call_output_whose_call_was_cut():
    # A trim by item (or by characters) drops the big function_call and keeps its small output:
    # the Responses API then rejects the input ("No tool call found for function call output").
    big_call = [
        question("old"),
        {"type": "function_call", "call_id": "call_big", "name": "lookup", "arguments": "A" * 500},
        {"type": "function_call_output", "call_id": "call_big", "output": "ok"},
        {"type": "message", "role": "assistant", "content": "small answer"},
    ]
    history = [*big_call, *parallel_turn(1), *parallel_turn(2)]
    sizes = [chars(big_call), chars(parallel_turn(1)), chars(parallel_turn(2))]
    for target in range(0, sum(sizes) + 2):
        keep = context_policy_input_filter(trim(target), cut="plain")
        out = keep(call_data([*history, question()]))
        assert orphans(out.input) == []
        assert not [w for w in keep.last_report.warnings if w.code == "orphan-tool-result"]
        kept = expected_turns(sizes, target)
        assert len(out.input) - 1 == sum(len(t) for t in (big_call, parallel_turn(1),
                                                           parallel_turn(2))[3 - kept:])

    # Inside the runner: a second run replays the first run's items, calls included, and the
    # cut falls before the newest finished turn.
    first = Runner.run_sync(make_agent(RecordingModel()), [*big_call, question("first")],
                            run_config=run_config())
    finished = first.to_input_list()
    assert [i.get("type") for i in finished].count("function_call_output") == 2
    model = RecordingModel()
    spy = Spy(context_policy_input_filter(trim(chars(finished[4:])), cut="plain"))
    Runner.run_sync(make_agent(model), [*finished, question("second")],
                    run_config=run_config(spy))
    assert_model_got_what_the_filter_kept(model, spy)
    assert "call_big" not in json.dumps(model.calls[0].snapshot)
    assert model.calls[0].snapshot == [*finished[4:], question("second")]


def test_openai_agents_2503_reasoning_item_never_left_without_its_following_item():
    # A reasoning item and the item after it travel together: the Responses API rejects a
    # function_call whose reasoning item was dropped ("provided without its required
    # 'reasoning' item") and a reasoning item left without what followed it.
    history = [*parallel_turn(0), *parallel_turn(1), *parallel_turn(2)]
    items = [*history, question()]
    glued = [i for i, item in enumerate(history) if item.get("type") == "reasoning"]
    assert glued
    total = chars(history)
    for grouping in ("user-turn", "message"):
        for target in range(0, total + 2, 3):
            keep = context_policy_input_filter(trim(target, grouping=grouping), cut="plain")
            out = keep(call_data(items))
            kept = {id(item) for item in out.input}
            for i in glued:
                assert (id(history[i]) in kept) == (id(history[i + 1]) in kept), (
                    grouping, target, i)
            assert orphans(out.input) == []
            at = {id(item): i for i, item in enumerate(items)}
            positions = [at[id(item)] for item in out.input]
            for a, b in itertools.pairwise(positions):
                if items[a].get("type") == "reasoning":
                    assert b == a + 1

    # Inside the runner: the reasoning item of the turn in progress reaches the model with the
    # function_call it preceded.
    model = RecordingModel()
    spy = Spy(context_policy_input_filter(trim(0), cut="plain"))
    Runner.run_sync(make_agent(model), items, run_config=run_config(spy))
    assert [i.get("type", "message") for i in model.calls[1].snapshot] == [
        "message", "reasoning", "function_call", "function_call_output"]
    assert_model_got_what_the_filter_kept(model, spy)


def test_autogen_7955_no_middle_pop_orphans_function_results():
    # AutoGen's buffered context popped messages from the middle of a history and left function
    # results without their calls. A trim only ever drops whole oldest turns.
    turns = [parallel_turn(0), old_turn(1), parallel_turn(2), old_turn(3, size=5)]
    history = [item for turn in turns for item in turn]
    sizes = [chars(turn) for turn in turns]
    starts = [0]
    for turn in turns:
        starts.append(starts[-1] + len(turn))
    for keep_groups in (0, 1, 2):
        for target in range(0, sum(sizes) + 2, 2):
            keep = context_policy_input_filter(trim(target, keep=keep_groups), cut="plain")
            items = [*history, question()]
            out = keep(call_data(items))
            kept_history = out.input[:-1]
            assert out.input[-1] is items[-1]
            # A suffix of the history, nothing taken from its middle, starting at a turn.
            n = len(kept_history)
            assert identities(kept_history) == identities(history[len(history) - n:])
            assert len(history) - n in starts
            assert orphans(out.input) == []
            expected = expected_turns(sizes, target, keep_groups)
            assert n == starts[-1] - starts[len(turns) - expected]
            step = keep.last_report.steps[0]
            assert step.chars_after == sum(sizes[len(turns) - expected:])
            assert step.messages_removed == len(history) - n


@st.composite
def responses_turn(draw: Any, i: int) -> list[dict[str, Any]]:
    """A finished turn of Responses items: rounds of (reasoning?, parallel calls, outputs), an
    unknown item now and then, a final answer that may be preceded by reasoning."""
    words = st.text("ab 😀", max_size=draw(st.sampled_from([3, 40])))
    turn: list[dict[str, Any]] = [{"role": "user", "content": draw(words)}]
    for r in range(draw(st.integers(0, 3))):
        if draw(st.booleans()):
            turn.append({"type": "reasoning", "id": f"rs_{i}_{r}",
                         "summary": [{"type": "summary_text", "text": draw(words)}]})
        ids = [f"call_{i}_{r}_{c}" for c in range(draw(st.integers(1, 3)))]
        turn += [{"type": "function_call", "call_id": cid, "name": "lookup",
                  "arguments": draw(words)} for cid in ids]
        if draw(st.booleans()):
            turn.append({"type": "web_search_call", "id": f"ws_{i}_{r}", "status": "completed"})
        turn += [{"type": "function_call_output", "call_id": cid, "output": draw(words)}
                 for cid in draw(st.permutations(ids))]
    if draw(st.booleans()):
        turn.append({"type": "reasoning", "id": f"rs_{i}_end", "summary": []})
    turn.append({"type": "message", "role": "assistant",
                 "content": [{"type": "output_text", "text": draw(words)}]})
    return turn


@st.composite
def responses_histories(draw: Any) -> list[list[dict[str, Any]]]:
    return [draw(responses_turn(i)) for i in range(draw(st.integers(0, 6)))]


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@hypothesis.given(turns=responses_histories(), target=st.integers(0, 400), keep_groups=st.integers(0, 2),
       grouping=st.sampled_from(["user-turn", "message"]))
def test_any_history_trims_to_whole_oldest_groups_with_figures_as_measured(
    turns, target, keep_groups, grouping,
):
    history = [item for turn in turns for item in turn]
    current = [question(), {"type": "function_call", "call_id": "now", "name": "f",
                            "arguments": "{}"},
               {"type": "function_call_output", "call_id": "now", "output": "o"}]
    items = [*history, *current]
    keep = context_policy_input_filter(trim(target, keep=keep_groups, grouping=grouping), cut="plain")
    out = keep(call_data(items))
    n = len(out.input) - len(current)
    # A suffix of the history, then the turn in progress, all as the SDK's objects.
    assert identities(out.input) == identities(items[len(history) - n:])
    assert orphans(out.input) == []
    kept = {id(item) for item in out.input}
    for i, item in enumerate(items[:-1]):
        if item.get("type") == "reasoning":
            assert (id(item) in kept) == (id(items[i + 1]) in kept)
    if grouping == "user-turn":
        sizes = [chars(turn) for turn in turns]
        expected = expected_turns(sizes, target, keep_groups)
        assert n == sum(len(turn) for turn in turns[len(turns) - expected:])
    report = keep.last_report
    assert report.before.chars == chars(with_instructions(items))
    assert report.after.chars == chars(with_instructions(out.input))
    assert report.after.opaque_parts == sum(
        1 for item in out.input if item.get("type") == "web_search_call")
    step = report.steps[0]
    if history:
        assert step.chars_after == chars(out.input[:n])
    else:  # the adapter's history is there, and holds no message: the step is skipped
        assert (step.status, step.reason, step.chars_after) == ("skipped", "fragment-empty", None)


# ---------------------------------------------------------------------------------------------
# The turn in progress, and one policy for both adapters.


def turn_in_progress(size: int = 2_000) -> list[dict[str, Any]]:
    """Two rounds of tool work after the question, each a reasoning item, a call and its
    (large) output: what the input ends with between two model calls of one turn."""
    out: list[dict[str, Any]] = []
    for r in range(2):
        out += [
            {"type": "reasoning", "id": f"rs_now_{r}",
             "summary": [{"type": "summary_text", "text": f"round {r}"}]},
            {"type": "function_call", "call_id": f"call_now_{r}", "name": "lookup",
             "arguments": json.dumps({"round": r})},
            {"type": "function_call_output", "call_id": f"call_now_{r}", "output": "o" * size},
        ]
    return out


def summary_of(request: Any) -> list[dict[str, Any]]:
    return [{"role": "assistant", "content": "(summary)"}]


@pytest.mark.parametrize("policy", [
    trim(0),
    trim(0, grouping="message"),
    {**trim(0), "targetInputChars": 1},  # a watermark no history trim can reach
    {"mode": "reduce", "triggerChars": 1, "targetInputChars": 1, "steps": [{
        "id": "summary", "kind": "compress", "fragmentId": "history", "handlerId": "summary",
        "targetChars": 0}]},
    {"mode": "validate"},
], ids=["trim", "trim-by-message", "unreachable-target", "compress", "validate"])
def test_the_turn_is_reduced_only_by_a_step_that_names_it(policy):
    items = [*old_turn(0), *old_turn(1), question(), *turn_in_progress()]
    keep = context_policy_input_filter(policy, handlers={"summary": summary_of}
                                       if policy["mode"] == "reduce" else None, cut="plain")
    out = keep(call_data(items))
    # The question and every item after it are sent, as the SDK's objects, in order.
    assert identities(out.input[-7:]) == identities(items[-7:])
    report = keep.last_report
    turn = next(f for f in report.fragments if f.id == "turn")
    assert (turn.messages_before, turn.messages_after) == (6, 6)
    assert turn.chars_before == turn.chars_after == chars(turn_in_progress()) > 4_000
    if policy["mode"] == "reduce":
        assert report.triggered and report.steps[0].status == "applied"
        assert len(out.input) < len(items)  # the history was reduced, the turn was not
    if policy.get("targetInputChars"):
        assert report.target_reached is False  # the turn is over the watermark, and stays


def test_a_step_that_names_the_turn_trims_its_oldest_tool_rounds():
    policy = {"mode": "reduce", "triggerChars": 1, "steps": [{
        "id": "tools", "kind": "trim", "fragmentId": "turn", "grouping": {"kind": "message"},
        "keepGroups": 1, "targetChars": 0}]}
    items = [*old_turn(0), question(), *turn_in_progress()]
    keep = context_policy_input_filter(policy, cut="plain")
    out = keep(call_data(items))
    # The history and the question stay; the turn keeps its newest round, reasoning included.
    assert identities(out.input) == identities([*items[:6], *items[-3:]])
    assert orphans(out.input) == []
    step = keep.last_report.steps[0]
    assert (step.fragment_id, step.groups_before, step.groups_after, step.messages_removed) == (
        "turn", 2, 1, 3)


SHARED_POLICY = {
    "mode": "reduce", "triggerChars": 1,
    "steps": [
        {"id": "recent-history", "kind": "trim", "fragmentId": "history",
         "grouping": {"kind": "user-turn"}, "keepGroups": 1, "targetChars": 0},
        {"id": "recent-tools", "kind": "trim", "fragmentId": "turn",
         "grouping": {"kind": "message"}, "keepGroups": 1, "targetChars": 0},
    ],
}


def test_one_policy_document_works_unchanged_in_every_adapter():
    from langchain.agents.middleware import ModelRequest, ModelResponse
    from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
    from langchain_core.messages import AIMessage, HumanMessage, SystemMessage, ToolMessage

    from contextpolicy.adapters import langchain as lc_adapter
    from contextpolicy.adapters import openai_agents as oa_adapter

    assert lc_adapter.FRAGMENT_IDS == oa_adapter.FRAGMENT_IDS == (
        "instructions", "tools", "system", "history", "question", "turn")
    document = copy.deepcopy(SHARED_POLICY)

    # The same conversation in each framework's shape: two finished turns, the question, and
    # two rounds of tool work on it.
    messages: list[Any] = []
    for i in range(2):
        messages += [
            HumanMessage(f"question {i}", id=f"h{i}"),
            AIMessage("", id=f"a{i}", tool_calls=[{"id": f"c{i}", "name": "lookup",
                                                   "args": {"q": i}}]),
            ToolMessage("o" * 40, tool_call_id=f"c{i}", id=f"t{i}"),
            AIMessage(f"answer {i}", id=f"e{i}"),
        ]
    messages.append(HumanMessage("What is new?", id="q"))
    for r in range(2):
        messages += [
            AIMessage("", id=f"now-a{r}", tool_calls=[{"id": f"now{r}", "name": "lookup",
                                                       "args": {"round": r}}]),
            ToolMessage("o" * 2_000, tool_call_id=f"now{r}", id=f"now-t{r}"),
        ]
    items = [*old_turn(0), *old_turn(1), question(), *turn_in_progress()]

    middleware = lc_adapter.ContextPolicyMiddleware(document, cut="plain")
    sent: list[Any] = []
    request = ModelRequest(model=GenericFakeChatModel(messages=iter([])), messages=messages,
                           system_message=SystemMessage(INSTRUCTIONS))
    middleware.wrap_model_call(request, lambda r: sent.append(r) or ModelResponse(result=[]))
    keep = context_policy_input_filter(document, cut="plain")
    out = keep(call_data(items))
    # LiteLLM: the same conversation as OpenAI chat dicts, the system prompt leading.
    from contextpolicy.adapters.litellm import ContextPolicyMessages

    chat = lc_adapter.to_chat_dicts([SystemMessage(INSTRUCTIONS), *messages])
    litellm_keep = ContextPolicyMessages(document, cut="plain")
    chat_sent = litellm_keep(chat)

    # Each keeps the newest finished turn, the question, and the newest round of tool work.
    assert [m.id for m in sent[0].messages] == ["h1", "a1", "t1", "e1", "q", "now-a1", "now-t1"]
    assert identities(out.input) == identities([*items[5:11], *items[-3:]])
    assert identities(chat_sent) == identities([chat[0], *chat[5:10], *chat[-2:]])
    reports = {"langchain": middleware.last_report, "openai-agents": keep.last_report,
               "litellm": litellm_keep.last_report}
    sent_chars = {
        "langchain": chars(lc_adapter.to_chat_dicts([request.system_message,
                                                     *sent[0].messages])),
        "openai-agents": chars(with_instructions(out.input)),
        "litellm": chars(chat_sent),
    }
    for name, report in reports.items():
        assert [(s.id, s.fragment_id, s.status, s.groups_before, s.groups_after)
                for s in report.steps] == [
            ("recent-history", "history", "applied", 2, 1),
            ("recent-tools", "turn", "applied", 2, 1)], name
        assert report.after.chars == sent_chars[name], name
    # The system prompt is ``system`` in LangChain, the instructions ``instructions`` here.
    assert [f.id for f in reports["langchain"].fragments] == [
        "system", "history", "question", "turn"]
    assert [f.id for f in reports["openai-agents"].fragments] == [
        "instructions", "history", "question", "turn"]
    assert [f.id for f in reports["litellm"].fragments] == [
        "system", "history", "question", "turn"]
    assert document == SHARED_POLICY  # neither adapter changed the document
