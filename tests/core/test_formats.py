"""Message formats beyond chat dicts, end to end on both kernels: OpenAI Responses input items
(messages with a type, calls and outputs paired by ``call_id``, reasoning glued to the item after
it, unknown items opaque inside their turn) and Anthropic blocks (thinking kept byte-exact,
system messages, ``is_error`` results, compaction). The named tests reproduce bugs from other
projects' trackers; each asserts that ours cannot happen here."""

from __future__ import annotations

import copy

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from contextpolicy import ContextPlan, TokenCounter, check_input_budget, process_context
from tests.support.strategies import text
from tests.support.tables import responses_turn

# The whole pipeline runs on the compiled kernel and on the twin: ids [c] and [py].
pytestmark = pytest.mark.usefixtures("pipeline_kernel")


def trim_policy(target: int, grouping: str = "user-turn", keep: int = 0) -> dict:
    return {"mode": "reduce", "triggerChars": 1, "steps": [{
        "id": "trim", "kind": "trim", "fragmentId": "history", "field": "messages",
        "grouping": {"kind": grouping}, "keepGroups": keep, "targetChars": target}]}


def orphans(result) -> list[tuple[str, int | None, str | None]]:
    return [(w.fragment_id, w.index, w.tool_call_id) for w in result.report.warnings
            if w.code == "orphan-tool-result"]


def kept_history(result) -> list[dict]:
    return result.plan.fragment("history").messages


# ----------------------------------------------------------------------------------------------
# Accounting


def test_responses_items_count_by_the_chat_rules():
    items = [
        {"type": "function_call", "call_id": "c1", "name": "get", "arguments": '{"a":1}'},
        {"type": "function_call_output", "call_id": "c1", "output": "four"},
        {"type": "function_call_output", "call_id": "c1",
         "output": [{"type": "input_text", "text": "ab"}, {"type": "input_image"}]},
        {"type": "reasoning", "summary": [{"type": "summary_text", "text": "why"}],
         "encrypted_content": "opaque bytes"},
        {"type": "reasoning", "summary": [], "content": [{"type": "reasoning_text", "text": "hm"}]},
        {"type": "web_search_call", "id": "ws_1", "status": "completed"},
        {"role": "user", "content": "hello"},  # a message item without a type
    ]
    usage = check_input_budget(items)
    # 3 + 7, 4, 2 (+ an opaque image), 3 (+ opaque encrypted content), 2, 0 (opaque), 5
    assert usage.chars == 10 + 4 + 2 + 3 + 2 + 0 + 5
    assert usage.opaque_parts == 3
    assert usage.messages == 7


def test_anthropic_thinking_counts_its_text_and_redacted_thinking_is_opaque():
    message = {"role": "assistant", "content": [
        {"type": "thinking", "thinking": "let me see", "signature": "EqQBCgIYAh"},
        {"type": "redacted_thinking", "data": "EmwKAhgBEgy3va3pzix"},
        {"type": "compaction", "content": "a summary the API wrote"},
        {"type": "text", "text": "done"},
    ]}
    usage = check_input_budget([message])
    assert (usage.chars, usage.opaque_parts) == (len("let me see") + 4, 2)


def test_llama_index_21950_thinking_and_tool_calls_are_counted_as_tokens():
    # llama_index counted thinking and tool-call blocks as zero tokens. A counter here counts
    # every text piece that chars counts: thinking text, tool names and their arguments.
    words = TokenCounter(lambda s: len(s.split()))
    messages = [
        {"role": "assistant", "content": [
            {"type": "thinking", "thinking": "one two three", "signature": "sig"},
            {"type": "tool_use", "id": "t1", "name": "search", "input": {"q": "four five"}},
        ]},
        {"type": "function_call", "call_id": "c", "name": "lookup", "arguments": '{"q": "six"}'},
        {"type": "reasoning", "summary": [{"type": "summary_text", "text": "seven eight"}]},
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": "x", "type": "function", "function": {"name": "f", "arguments": "nine ten"}}]},
    ]
    assert check_input_budget(messages, counter=words).tokens == 3 + 1 + 2 + 1 + 2 + 2 + 1 + 2


def test_bad_items_are_errors_that_name_the_field():
    from contextpolicy import ContextPlanError

    for item, field in [
        ({"type": "function_call_output", "call_id": "a", "output": 5}, "output"),
        ({"type": "function_call_output", "output": [{"type": "text"}]}, "output[0].text"),
        ({"type": "reasoning", "summary": "text"}, "summary"),
        ({"type": "reasoning", "summary": [{"type": "summary_text", "text": 1}]},
         "summary[0].text"),
        ({"type": "function_call", "arguments": {1j: 1}}, "arguments"),
        ({"type": "message", "content": "no role"}, "role"),
        ({"role": "assistant", "content": [{"type": "thinking"}]}, "content[0].thinking"),
    ]:
        with pytest.raises(ContextPlanError) as caught:
            check_input_budget([{"role": "user", "content": "ok"}, item])
        assert caught.value.issues[0].path == f"messages[1].{field}", item


# ----------------------------------------------------------------------------------------------
# The split, pairing and grouping


def test_from_messages_splits_responses_items():
    items = [
        {"type": "message", "role": "developer", "content": "be brief"},
        *responses_turn(0),
        {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "now?"}]},
    ]
    plan = ContextPlan.from_messages(items)
    assert [f.id for f in plan.fragments] == ["system", "history", "question"]
    assert plan.fragment("question").messages == [items[-1]]
    assert plan.fragment("history").messages == items[1:-1]
    # A function_call_output last is history: it never opens a turn nor asks a question.
    plan = ContextPlan.from_messages(items[:-1])
    assert [f.id for f in plan.fragments] == ["system", "history"]


def test_an_orphan_output_is_a_warning_and_a_trim_never_creates_one():
    history = [*responses_turn(0, calls=2), *responses_turn(1, calls=2), *responses_turn(2)]
    stray = {"type": "function_call_output", "call_id": "never_called", "output": "x"}
    messages = [*history, stray, {"role": "user", "content": "go"}]
    before = process_context(ContextPlan.from_messages(messages), trim_policy(10**9))
    assert orphans(before) == [("history", len(history), "never_called")]
    for target in range(0, 1200, 37):
        result = process_context(ContextPlan.from_messages(messages), trim_policy(target))
        kept = kept_history(result)
        # The stray output stays an orphan while its turn is kept; no other output becomes one.
        assert orphans(result) == ([("history", len(kept) - 1, "never_called")] if kept else [])
        assert not kept or kept[-1] is stray


def test_message_grouping_keeps_reasoning_with_its_call_and_the_output_with_the_call():
    history = [*responses_turn(0, calls=3), *responses_turn(1, calls=3)]
    messages = [*history, {"role": "user", "content": "go"}]
    for target in range(0, 800, 11):
        kept = kept_history(process_context(
            ContextPlan.from_messages(messages), trim_policy(target, "message")))
        cut = len(history) - len(kept)
        assert kept == history[cut:]
        if kept and cut:
            # Never the second item of a reasoning pair, never an output whose call went.
            assert history[cut - 1].get("type") != "reasoning"
            assert kept[0].get("type") != "function_call_output"


@st.composite
def responses_histories(draw):
    out: list[dict] = []
    for i in range(draw(st.integers(1, 8))):
        out += responses_turn(i, calls=draw(st.integers(0, 3)), size=draw(st.integers(0, 60)))
        if draw(st.booleans()):  # an item this library does not know, inside the turn
            out.insert(draw(st.integers(1, len(out))), {"type": "web_search_call", "id": "w"})
    return out


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(history=responses_histories(), target=st.integers(0, 3000),
       grouping=st.sampled_from(["user-turn", "message"]), keep=st.integers(0, 3))
def test_a_trim_of_responses_items_keeps_whole_pairs(history, target, grouping, keep):
    question = {"type": "message", "role": "user", "content": "go"}
    messages = [*history, question]
    frozen = copy.deepcopy(messages)
    result = process_context(ContextPlan.from_messages(messages), trim_policy(target, grouping,
                                                                              keep))
    assert messages == frozen
    kept = kept_history(result)
    cut = len(history) - len(kept)
    assert all(a is b for a, b in zip(kept, history[cut:], strict=True))  # a suffix, by identity
    assert orphans(result) == []
    called = {m["call_id"] for m in kept if m.get("type") == "function_call"}
    answered = {m["call_id"] for m in kept if m.get("type") == "function_call_output"}
    assert answered <= called
    if cut:
        assert history[cut - 1].get("type") != "reasoning"
    assert result.input[-1] is question
    assert result.report.after.chars == check_input_budget(result).chars


# ----------------------------------------------------------------------------------------------
# Anthropic


def anthropic_turn(i: int, size: int = 50) -> list[dict]:
    tid = f"toolu_{i}"
    return [
        {"role": "user", "content": [{"type": "text", "text": f"{i:02d}" + "u" * size}]},
        {"role": "assistant", "content": [
            {"type": "thinking", "thinking": "t" * size, "signature": f"sig{i}=="},
            {"type": "tool_use", "id": tid, "name": "search", "input": {"q": i}},
        ]},
        {"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": tid, "is_error": i % 2 == 0,
             "content": "r" * size}]},
        {"role": "assistant", "content": [{"type": "text", "text": "a" * size}]},
    ]


def test_thinking_blocks_are_kept_byte_exact():
    history = [m for i in range(6) for m in anthropic_turn(i)]
    messages = [*history, {"role": "user", "content": "go"}]
    frozen = copy.deepcopy(messages)
    result = process_context(ContextPlan.from_messages(messages), trim_policy(700))
    kept = kept_history(result)
    assert 0 < len(kept) < len(history)
    for message in kept:
        original = next(m for m in history if m is message)  # the same objects
        assert original == frozen[history.index(original)]
    assert messages == frozen


def test_system_messages_inside_the_history_stay_in_their_turn():
    history = [*anthropic_turn(0), {"role": "system", "content": "mid-run note"},
               *anthropic_turn(1)]
    messages = [{"role": "system", "content": "rules"}, *history,
                {"role": "user", "content": "go"}]
    plan = ContextPlan.from_messages(messages)
    assert plan.fragment("system").messages == messages[:1]
    assert plan.fragment("history").messages == history
    result = process_context(plan, trim_policy(check_input_budget(anthropic_turn(1)).chars))
    assert kept_history(result) == history[5:]  # the note went with the turn it belongs to
    assert result.input[0] is messages[0]


def test_langchain_29637_anthropic_tool_use_and_tool_result_never_split():
    # LangChain's trim split an assistant tool_use from the user message carrying its
    # tool_result. Here a tool_result carrier never opens a turn, and the guard keeps the call.
    history = [m for i in range(8) for m in anthropic_turn(i)]
    messages = [*history, {"role": "user", "content": "go"}]
    for grouping in ("user-turn", "message"):
        for target in range(0, 2000, 23):
            result = process_context(ContextPlan.from_messages(messages),
                                     trim_policy(target, grouping))
            kept = kept_history(result)
            assert orphans(result) == []
            if kept and isinstance(kept[0]["content"], list):
                assert kept[0]["content"][0]["type"] != "tool_result"


def test_langchain_38352_a_cut_inside_results_whose_calls_partly_overlap():
    # Two assistant messages call tools; their results come back interleaved after both, so a
    # cut by message between the results would keep a result whose call it removed.
    history = [
        {"role": "user", "content": "u" * 30},
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": "a1", "type": "function", "function": {"name": "f", "arguments": "{}"}},
            {"id": "a2", "type": "function", "function": {"name": "f", "arguments": "{}"}}]},
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": "b1", "type": "function", "function": {"name": "g", "arguments": "{}"}}]},
        {"role": "tool", "tool_call_id": "a1", "content": "x" * 40},
        {"role": "tool", "tool_call_id": "b1", "content": "y" * 40},
        {"role": "tool", "tool_call_id": "a2", "content": "z" * 40},
        {"role": "assistant", "content": "w" * 30},
    ]
    messages = [*history, {"role": "user", "content": "go"}]
    for target in range(0, 300, 7):
        result = process_context(ContextPlan.from_messages(messages), trim_policy(target, "message"))
        kept = kept_history(result)
        assert orphans(result) == []
        ids = {c["id"] for m in kept for c in m.get("tool_calls") or []}
        assert {m["tool_call_id"] for m in kept if m["role"] == "tool"} <= ids


def test_openai_agents_4322_an_output_whose_call_was_cut_is_never_kept():
    history = [*responses_turn(0, calls=2), *responses_turn(1, calls=2)]
    messages = [*history, {"role": "user", "content": "go"}]
    for grouping in ("user-turn", "message"):
        for target in range(0, 700, 9):
            result = process_context(ContextPlan.from_messages(messages),
                                     trim_policy(target, grouping))
            kept = kept_history(result)
            called = {m["call_id"] for m in kept if m.get("type") == "function_call"}
            assert {m["call_id"] for m in kept if m.get("type") == "function_call_output"} <= (
                called)


def test_openai_agents_2503_reasoning_never_left_without_its_following_item():
    history = [*responses_turn(0, calls=3), *responses_turn(1, calls=3)]
    messages = [*history, {"role": "user", "content": "go"}]
    for target in range(0, 700, 5):
        result = process_context(ContextPlan.from_messages(messages), trim_policy(target, "message"))
        kept = kept_history(result)
        for i, item in enumerate(kept):
            if item.get("type") == "reasoning":
                assert i + 1 < len(kept) and kept[i + 1]["type"] == "function_call"
        cut = len(history) - len(kept)
        assert cut == 0 or history[cut - 1].get("type") != "reasoning"


def test_autogen_7955_no_middle_pop_orphans_function_results():
    # AutoGen's token-limited context popped messages from the middle. A trim here removes a
    # prefix of whole groups: what is kept is always a suffix of the history, pairs intact.
    history = [m for i in range(6) for m in responses_turn(i, calls=2)]
    messages = [*history, {"role": "user", "content": "go"}]
    for target in range(0, 2500, 61):
        result = process_context(ContextPlan.from_messages(messages), trim_policy(target))
        kept = kept_history(result)
        assert kept == history[len(history) - len(kept):]
        assert orphans(result) == []
        assert not kept or (kept[0]["type"] == "message" and kept[0]["role"] == "user")


@given(st.lists(text, min_size=1, max_size=4))
def test_unknown_items_stay_inside_their_turn(texts):
    history: list[dict] = []
    for i, t in enumerate(texts):
        history += [{"role": "user", "content": t}, {"type": "mcp_list_tools", "id": str(i)},
                    {"role": "assistant", "content": "a"}]
    messages = [*history, {"role": "user", "content": "go"}]
    kept = kept_history(process_context(ContextPlan.from_messages(messages), trim_policy(0,
                                                                                       keep=1)))
    assert kept == history[-3:]
