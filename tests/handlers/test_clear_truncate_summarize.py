"""``contextpolicy.handlers``: ``clear_tool_results``, ``truncate_messages`` and ``summarize`` end
to end, on the compiled kernel and on the twin, for chat messages, Anthropic blocks and Responses
items.

Every case holds the handler to the policy model: pairing warnings identical before and after,
protected fragments untouched (exact type and value), the caller's data unchanged (a deep copy
compared), and the report's figures recounted here by a counter of the test's own.
"""

from __future__ import annotations

import asyncio
import threading

import pytest

from contextpolicy import (
    CompressRequest,
    ContextCancelledError,
    ContextPlan,
    ContextPolicyError,
    ContextStepError,
    Fragment,
    aprocess_context,
    process_context,
)
from contextpolicy.content import snapshot
from contextpolicy.handlers import (
    AsyncSummarize,
    Summarize,
    clear_tool_results,
    cut_text,
    defaults,
    is_summary,
    registry,
    render_transcript,
    summarize,
    truncate_messages,
)
from contextpolicy.report import CompressFigures
from tests.support.handlers import (
    PLACEHOLDER,
    FakeSummariser,
    chars,
    compress_policy,
    make_history,
    plan_of,
    results,
    run_checked,
    text_chars,
    texts,
    warnings_of,
)

# The whole pipeline runs on the compiled kernel and on the twin: ids [c] and [py].
pytestmark = pytest.mark.usefixtures("pipeline_kernel")

FORMATS = ["chat", "anthropic", "responses"]


def longest_text(message: dict) -> int:
    if message.get("type") in ("function_call", "reasoning"):
        return 0
    return max(map(len, texts(message.get("output", message.get("content")))), default=0)


def tool_of(messages: list[dict], call_id: str) -> str | None:
    for m in messages:
        if m.get("type") == "function_call" and m["call_id"] == call_id:
            return m["name"]
        for call in m.get("tool_calls") or []:
            if call["id"] == call_id:
                return call["function"]["name"]
        if isinstance(m.get("content"), list):
            for b in m["content"]:
                if b.get("type") == "tool_use" and b["id"] == call_id:
                    return b["name"]
    return None


# ---------------------------------------------------------------------------------------------
# clear_tool_results


def expected_clear(history: list[dict], keep: int, min_chars: int = 100,
                   exclude: tuple[str, ...] = (), kept_results: int = 0) -> list[str]:
    """The ids clear_tool_results clears, worked out here from the rules."""
    found = results(history)
    clearable = len(found) - max(0, keep - kept_results)
    out = []
    for cid, content in found[:max(0, clearable)]:
        n = text_chars(content)
        name = tool_of(history, cid)
        if exclude and (name is None or name in exclude):
            continue
        if n >= min_chars and len(PLACEHOLDER.replace("{chars}", str(n))) < n:
            out.append(cid)
    return out


@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("keep", [0, 2, 3, 20])
def test_clear_tool_results_clears_all_but_the_newest(fmt, keep):
    history = make_history(fmt)
    plan = plan_of(history)
    handler = clear_tool_results(keep=keep)
    result, before = run_checked(plan, compress_policy("clear-tool-results"),
                                 registry(handler))
    assert warnings_of(result) == before  # one orphan, one unanswered call: still there
    assert {w[0] for w in before} == {"orphan-tool-result", "unanswered-tool-call"}
    cleared = expected_clear(history, keep)
    new_history = result.plan.fragment("history").messages
    got = dict(results(new_history))
    removed = 0
    for cid, content in results(history):
        n = text_chars(content)
        if cid in cleared:
            text = got[cid] if isinstance(got[cid], str) else got[cid][0]["text"]
            assert text == f"[tool result cleared: {n} chars]"
            assert type(got[cid]) is type(content)  # a str for a str, a part for parts
            removed += n - len(text)
        else:
            assert got[cid] == content
    # Everything but the results' content is as it was: roles, ids, order, calls, thinking.
    assert len(new_history) == len(history)
    for old, new in zip(history, new_history, strict=True):
        strip = {"content", "output"}
        assert {k: v for k, v in old.items() if k not in strip} == {
            k: v for k, v in new.items() if k not in strip}
    step = result.report.steps[0]
    if not cleared:
        assert (step.status, step.reason, step.handler_figures) == (
            "unchanged", "nothing-to-compress", None)
        assert new_history is history
        return
    assert (step.status, step.reason) == ("applied", "compressed")
    assert step.handler_figures == CompressFigures(
        handler="clear-tool-results", chars_removed=removed, results_cleared=len(cleared),
        inputs_cleared=0)
    assert step.chars_before - step.chars_after == removed == chars(history) - chars(new_history)
    assert step.messages_removed == 0 and step.groups_before == step.groups_after == 6


@pytest.mark.parametrize("fmt", FORMATS)
def test_clear_never_touches_an_excluded_tool_and_counts_it_among_the_kept(fmt):
    history = make_history(fmt)
    handler = clear_tool_results(keep=2, exclude_tools=["memory"])
    result, before = run_checked(plan_of(history), compress_policy("clear-tool-results"),
                                 registry(handler))
    assert warnings_of(result) == before
    cleared = expected_clear(history, 2, exclude=("memory",))
    got = dict(results(result.plan.fragment("history").messages))
    original = dict(results(history))
    memory = [cid for cid, _ in results(history) if tool_of(history, cid) == "memory"]
    assert memory and all(got[cid] == original[cid] for cid in memory)
    # The ghost result names no tool: with tools excluded, it is left alone.
    assert "ghost" not in cleared and got["ghost"] == original["ghost"]
    assert sorted(cid for cid in got if got[cid] != original[cid]) == sorted(cleared)
    assert result.report.steps[0].handler_figures.results_cleared == len(cleared)


@pytest.mark.parametrize("fmt", FORMATS)
def test_clear_inputs_empties_the_calls_of_cleared_results_only(fmt):
    history = make_history(fmt)
    handler = clear_tool_results(keep=3, clear_inputs=True)
    result, before = run_checked(plan_of(history), compress_policy("clear-tool-results"),
                                 registry(handler))
    assert warnings_of(result) == before
    new = result.plan.fragment("history").messages
    cleared = set(expected_clear(history, 3)) - {"ghost"}  # the ghost has no call to empty

    def inputs(messages):
        out = {}
        for m in messages:
            if m.get("type") == "function_call":
                out[m["call_id"]] = m["arguments"]
            for call in m.get("tool_calls") or []:
                out[call["id"]] = call["function"]["arguments"]
            for b in m.get("content") if isinstance(m.get("content"), list) else []:
                if b.get("type") == "tool_use":
                    out[b["id"]] = b["input"]
        return out

    old_inputs, new_inputs = inputs(history), inputs(new)
    empty = {} if fmt == "anthropic" else "{}"
    assert {cid for cid in old_inputs if new_inputs[cid] != old_inputs[cid]} == cleared
    assert all(new_inputs[cid] == empty for cid in cleared)
    figures = result.report.steps[0].handler_figures
    assert (figures.results_cleared, figures.inputs_cleared) == (len(cleared) + 1, len(cleared))
    assert figures.chars_removed == chars(history) - chars(new)


BOTCHED = '{"q": "parcel 7, pad ' + "p" * 40  # arguments cut off: not JSON


@pytest.mark.parametrize(("fmt", "arguments"), [
    ("chat", BOTCHED), ("chat", '["not", "an", "object", "' + "x" * 40 + '"]'),
    ("responses", BOTCHED), ("anthropic", BOTCHED), ("anthropic", ["x" * 40]),
])
def test_clear_inputs_never_makes_a_botched_call_a_valid_one(fmt, arguments):
    # One call whose arguments are not a JSON object beside one whose are: both results are
    # cleared, only the object is emptied; the other call's arguments stay as they were (an
    # invalid tool call's text, which "{}" would turn into a well-formed call).
    history = make_history(fmt, turns=3, broken=False)
    bad_id = next(cid for cid, _ in results(history))
    for m in history:
        if m.get("type") == "function_call" and m["call_id"] == bad_id:
            m["arguments"] = arguments
        for call in m.get("tool_calls") or []:
            if call["id"] == bad_id:
                call["function"]["arguments"] = arguments
        for b in m["content"] if isinstance(m.get("content"), list) else []:
            if b.get("type") == "tool_use" and b["id"] == bad_id:
                b["input"] = arguments
    handler = clear_tool_results(keep=0, clear_inputs=True)
    result, before = run_checked(plan_of(history), compress_policy("clear-tool-results"),
                                 registry(handler))
    assert warnings_of(result) == before
    new = result.plan.fragment("history").messages

    def inputs(messages):
        out = {}
        for m in messages:
            if m.get("type") == "function_call":
                out[m["call_id"]] = m["arguments"]
            for call in m.get("tool_calls") or []:
                out[call["id"]] = call["function"]["arguments"]
            for b in m.get("content") if isinstance(m.get("content"), list) else []:
                if b.get("type") == "tool_use":
                    out[b["id"]] = b["input"]
        return out

    old_inputs, new_inputs = inputs(history), inputs(new)
    empty = {} if fmt == "anthropic" else "{}"
    assert new_inputs[bad_id] == arguments
    assert all(new_inputs[cid] == empty for cid in old_inputs if cid != bad_id)
    figures = result.report.steps[0].handler_figures
    assert figures.results_cleared == len(old_inputs)
    assert figures.inputs_cleared == len(old_inputs) - 1


def test_clear_leaves_small_results_and_never_grows_one():
    history = make_history("chat", broken=False)
    history[2] = {**history[2], "content": "ok"}  # shorter than any placeholder
    history[7] = {**history[7], "content": "x" * 60}  # longer than the placeholder, < min_chars
    plan = plan_of(history)
    result, _ = run_checked(plan, compress_policy("clear-tool-results"),
                            registry(clear_tool_results(keep=1, min_chars=0)))
    got = result.plan.fragment("history").messages
    assert got[2]["content"] == "ok"
    assert got[7]["content"] == "[tool result cleared: 60 chars]"
    result, _ = run_checked(plan, compress_policy("clear-tool-results"),
                            registry(clear_tool_results(keep=1)))
    assert result.plan.fragment("history").messages[7]["content"] == "x" * 60


def test_clear_is_not_applied_twice_and_keeps_its_first_count():
    history = make_history("anthropic")
    handlers = registry(clear_tool_results(keep=1, min_chars=0))
    once = process_context(plan_of(history), compress_policy("clear-tool-results"),
                           handlers=handlers)
    twice = process_context(once.plan, compress_policy("clear-tool-results"),
                            handlers=handlers)
    assert once.report.steps[0].status == "applied"
    # Nothing left to clear: the results already cleared keep the count of their first run.
    assert (twice.report.steps[0].status, twice.report.steps[0].reason) == (
        "unchanged", "nothing-to-compress")
    assert twice.input == once.input


def test_a_custom_placeholder_without_a_count():
    history = make_history("chat", broken=False)
    handler = clear_tool_results(keep=0, placeholder="[cleared]", min_chars=0)
    out = handler.clear(history)
    assert [c for _, c in results(out)] == ["[cleared]"] * len(results(history))
    assert handler.clear(out) == out  # "[cleared]" is recognised as cleared


@pytest.mark.parametrize("fmt", FORMATS)
def test_results_in_the_kept_groups_count_among_the_newest(fmt):
    history = make_history(fmt, broken=False)
    # keepGroups 2: the last two turns (1 + 2 results) stay verbatim and count toward keep=4.
    result, before = run_checked(plan_of(history),
                                 compress_policy("clear-tool-results", keep_groups=2),
                                 registry(clear_tool_results(keep=4)))
    assert warnings_of(result) == before == []
    got = dict(results(result.plan.fragment("history").messages))
    original = results(history)
    unchanged = [cid for cid, content in original if got[cid] == content]
    assert unchanged == [cid for cid, _ in original[-4:]]
    step = result.report.steps[0]
    assert step.handler_figures.results_cleared == len(original) - 4


def test_clear_on_a_text_fragment_is_a_failed_step():
    plan = ContextPlan(fragments=[Fragment(id="notes", kind="note", text="n" * 500)])
    policy = {"mode": "reduce", "triggerChars": 1, "steps": [
        {"id": "c", "kind": "compress", "fragmentId": "notes",
         "handlerId": "clear-tool-results", "targetChars": 0}]}
    step = process_context(plan, policy, handlers=defaults()).report.steps[0]
    assert (step.status, step.reason) == ("failed", "handler-error")
    assert "fragment 'notes' holds text" in step.message
    with pytest.raises(ContextStepError):
        process_context(plan, policy, handlers=defaults(), on_step_error="raise")


# ---------------------------------------------------------------------------------------------
# truncate_messages


M = "m" * 40


@pytest.mark.parametrize("text, head, tail, expected", [
    ("abc" + M + "ij", 3, 2, "abc[... 40 chars cut ...]ij"),
    # A surrogate pair held as two code points is never split: the head gives it up whole,
    # and so does the tail.
    ("ab\ud83d\ude00" + M + "yz", 3, 2, "ab[... 42 chars cut ...]yz"),
    ("abc" + M + "y\ud83d\ude00", 3, 1, "abc[... 43 chars cut ...]"),
    # Combining marks stay with their base, at the head's end and at the tail's start.
    ("ae\u0301\u0301" + M + "stu", 2, 3, "a[... 43 chars cut ...]stu"),
    ("abc" + M + "e\u0301x", 3, 2, "abc[... 42 chars cut ...]x"),
    # A joined emoji sequence, a skin tone, a flag and a CRLF are characters too.
    ("a👩\u200d💻" + M + "yz", 3, 2, "a[... 43 chars cut ...]yz"),
    ("a👍🏽" + M + "yz", 2, 2, "a[... 42 chars cut ...]yz"),
    ("🇫🇷🇩🇪" + M + "yz", 3, 2, "🇫🇷[... 42 chars cut ...]yz"),
    ("ab\r\n" + M + "yz", 3, 2, "ab[... 42 chars cut ...]yz"),
    # Astral characters are single code points in a str; lone surrogates are characters.
    ("😀" * 30, 2, 2, "😀😀[... 26 chars cut ...]😀😀"),
    ("\ud800\ud800\ud800" + "x" * 30, 2, 2, "\ud800\ud800[... 29 chars cut ...]xx"),
    ("abc" + M + "\udc00yz", 3, 3, "abc[... 40 chars cut ...]\udc00yz"),
])
def test_cut_text_counts_code_points_and_keeps_characters_whole(text, head, tail, expected):
    out = cut_text(text, head, tail)
    assert out == expected
    assert len(out) < len(text)
    # What is kept is the text's own head and tail, exactly.
    h, t = out.split("[... ")[0], out.split(" chars cut ...]")[1]
    assert text.startswith(h) and text.endswith(t)
    cut = int(out.split("[... ")[1].split(" ")[0])
    assert len(h) + cut + len(t) == len(text)


def test_cut_text_that_would_not_be_shorter_is_left():
    assert cut_text("short", 2, 2) is None
    assert cut_text("x" * 30, 14, 14) is None  # 28 kept + a marker > 30


@pytest.mark.parametrize("fmt", FORMATS)
def test_truncate_messages_cuts_long_texts_and_tool_outputs(fmt):
    history = make_history(fmt)
    long_answer = "an answer that goes on " * 40
    if fmt == "chat":
        history[3] = {**history[3], "content": long_answer}
    elif fmt == "anthropic":
        history[3] = {**history[3], "content": [{"type": "text", "text": long_answer}]}
    else:
        history[4] = {**history[4], "content": [{"type": "output_text", "text": long_answer}]}
    handler = truncate_messages(max_chars=300, head=100, tail=50)
    result, before = run_checked(plan_of(history), compress_policy("truncate-messages"),
                                 registry(handler))
    assert warnings_of(result) == before
    new = result.plan.fragment("history").messages
    assert len(new) == len(history)
    changed = 0
    for old, got in zip(history, new, strict=True):
        if snapshot(old) != snapshot(got):
            changed += 1
        # Calls, their inputs, thinking and reasoning items are never cut.
        assert got.get("tool_calls") == old.get("tool_calls")
        if got.get("type") in ("function_call", "reasoning"):
            assert got == old
        if isinstance(old.get("content"), list):
            for a, b in zip(old["content"], got["content"], strict=True):
                if a.get("type") in ("tool_use", "thinking"):
                    assert a == b
    texts_before = [t for _, t in results(history)]
    texts_after = [t for _, t in results(new)]
    for a, b in zip(texts_before, texts_after, strict=True):
        a = a if isinstance(a, str) else a[0]["text"]
        b = b if isinstance(b, str) else b[0]["text"]
        if len(a) <= 300:
            assert a == b
        else:
            n = len(a)
            # Keeping code points whole moves the cut by a character at most.
            assert a.startswith(b.split("[... ")[0]) and a.endswith(b.split(" cut ...]")[1])
            assert 99 <= len(b.split("[... ")[0]) <= 100 and 48 <= len(b.split(" cut ...]")[1]) <= 50
            cut = int(b.split("[... ")[1].split(" ")[0])
            assert len(b.split("[... ")[0]) + cut + len(b.split(" cut ...]")[1]) == n
    step = result.report.steps[0]
    assert step.status == "applied"
    assert step.handler_figures == CompressFigures(
        handler="truncate-messages", chars_removed=chars(history) - chars(new),
        messages_truncated=changed)
    assert changed == sum(1 for m in history if longest_text(m) > 300)


def test_truncate_a_text_fragment():
    plan = ContextPlan(fragments=[Fragment(id="notes", kind="note", text="n" * 5000)])
    policy = {"mode": "reduce", "triggerChars": 1, "steps": [
        {"id": "c", "kind": "compress", "fragmentId": "notes",
         "handlerId": "truncate-messages", "targetChars": 0}]}
    result = process_context(plan, policy, handlers=defaults())
    text = result.plan.fragment("notes").text
    assert text == "n" * 1000 + "[... 3500 chars cut ...]" + "n" * 500
    figures = result.report.steps[0].handler_figures
    assert (figures.messages_truncated, figures.chars_removed) == (1, 5000 - len(text))


def test_truncate_parameters_are_checked():
    with pytest.raises(ContextPolicyError) as exc:
        truncate_messages(max_chars=100, head=80, tail=30)
    assert exc.value.codes == ["invalid-value"]
    assert "head + tail (80 + 30) must not exceed maxChars (100)" in str(exc.value)
    with pytest.raises(ContextPolicyError) as exc:
        truncate_messages(max_chars=0, head=-1, marker=5)
    # Paths name the parameters as they were given: keyword arguments here.
    assert sorted(i.path for i in exc.value.issues) == ["head", "marker", "max_chars"]
    with pytest.raises(ContextPolicyError) as exc:
        clear_tool_results(keep=True, exclude_tools="memory", min_chars=2.0)
    assert sorted((i.path, i.code) for i in exc.value.issues) == [
        ("exclude_tools", "expected-list"), ("keep", "expected-integer"),
        ("min_chars", "expected-integer")]


# ---------------------------------------------------------------------------------------------
# summarize


class FakeChatModel:
    """Duck-typed like a LangChain chat model: invoke / ainvoke, a reply with content."""

    class Reply:
        def __init__(self, content):
            self.content = content

    def __init__(self) -> None:
        self.prompts: list[str] = []

    def invoke(self, prompt):
        self.prompts.append(prompt)
        return self.Reply([{"type": "text", "text": "the summary"}])

    async def ainvoke(self, prompt):
        self.prompts.append(prompt)
        await asyncio.sleep(0)
        return self.Reply("the async summary")


@pytest.mark.parametrize("fmt", FORMATS)
def test_summarize_replaces_the_older_groups_by_one_marked_message(fmt):
    history = make_history(fmt, broken=False)
    fn = FakeSummariser()
    result, before = run_checked(plan_of(history),
                                 compress_policy("summarize", target=3000, keep_groups=2),
                                 registry(summarize(fn)))
    assert before == [] and warnings_of(result) == []  # whole groups: nothing orphaned
    new = result.plan.fragment("history").messages
    groups = [i for i, m in enumerate(history) if m.get("role") == "user"
              and not (isinstance(m.get("content"), list)
                       and m["content"][0].get("type") == "tool_result")]
    split = groups[-2]
    assert new[1:] == history[split:]
    summary = new[0]
    (text, target), = fn.asked
    assert text == render_transcript(history[:split])
    assert target == 3000 - chars(history[split:]) - len("Summary of the earlier conversation:\n")
    assert summary["content"] == (
        f"Summary of the earlier conversation:\n{len(text)} chars about question")
    assert summary["role"] == "user" and is_summary(summary)
    assert summary["metadata"] == {"contextpolicy": {"kind": "summary", "messages": split}}
    assert ("type" in summary) is (fmt == "responses")
    step = result.report.steps[0]
    assert (step.status, step.groups_before, step.groups_after) == ("applied", 6, 3)
    assert step.messages_removed == split - 1
    assert step.handler_figures == CompressFigures(
        handler="summarize", chars_removed=chars(history) - chars(new),
        messages_summarized=split, summary_chars=len(summary["content"]))


def test_the_transcript_reads_calls_results_and_an_earlier_summary():
    history = make_history("anthropic", turns=2, broken=False)
    text = render_transcript([{"role": "user", "content": "old news",
                               "metadata": {"contextpolicy": {"kind": "summary"}}}, *history])
    assert text.startswith("(summary of earlier messages) old news\n\nuser: question 0\n\n")
    assert "assistant: let me look\n[called search({\"q\":0,\"pad\":\"" in text
    assert "[tool result: result 0: " in text
    assert "plan 0" not in text  # thinking is not the conversation
    responses = render_transcript(make_history("responses", turns=1, broken=False))
    assert responses.splitlines()[2].startswith('assistant: [called search({"q": 0')
    assert "tool: [result of call_0: result 0:" in responses and "thinking" not in responses


def test_summarize_the_whole_fragment_and_again_later():
    history = make_history("chat", broken=False)
    fn = FakeSummariser()
    handlers = registry(summarize(fn, role="system", prefix="Earlier: "))
    once = process_context(plan_of(history), compress_policy("summarize"), handlers=handlers)
    (first,) = once.plan.fragment("history").messages
    assert first["role"] == "system" and first["content"].startswith("Earlier: ")
    assert fn.asked[0][1] == 200  # the target asked for is never below min_target_chars
    grown = [first, *make_history("chat", turns=3, broken=False)]
    twice = process_context(plan_of(grown), compress_policy("summarize"), handlers=handlers)
    assert fn.asked[1][0].startswith(f"(summary of earlier messages) {first['content']}")
    assert twice.report.steps[0].handler_figures.messages_summarized == len(grown)


def test_summarize_unmarked():
    history = make_history("chat", broken=False)
    out = process_context(plan_of(history), compress_policy("summarize"),
                          handlers=registry(summarize(FakeSummariser(), mark=False)))
    (message,) = out.plan.fragment("history").messages
    assert set(message) == {"role", "content"} and not is_summary(message)


def test_summarize_with_a_chat_model_sync_and_async():
    history = make_history("chat", broken=False)
    model = FakeChatModel()
    sync = summarize(model, min_target_chars=0)
    assert type(sync) is Summarize
    out = process_context(plan_of(history), compress_policy("summarize", target=1000),
                          handlers=registry(sync))
    assert out.plan.fragment("history").messages[0]["content"].endswith("\nthe summary")
    prompt = model.prompts[0]
    assert prompt.startswith("Summarise the conversation below in at most 963 characters.")
    assert prompt.endswith(render_transcript(history))
    aio = summarize(model, use_async=True)
    assert type(aio) is AsyncSummarize
    out = asyncio.run(aprocess_context(plan_of(history), compress_policy("summarize"),
                                       handlers=registry(aio)))
    assert out.plan.fragment("history").messages[0]["content"].endswith("\nthe async summary")


def test_an_async_summariser_is_an_async_handler():
    history = make_history("responses", broken=False)

    async def summarise(text, target):
        await asyncio.sleep(0)
        return "short"

    handler = summarize(summarise)
    assert isinstance(handler, AsyncSummarize)
    result, _ = run_checked(plan_of(history), compress_policy("summarize", keep_groups=1),
                            registry(handler), aio=True)
    assert result.plan.fragment("history").messages[0]["type"] == "message"
    with pytest.raises(ContextPolicyError) as exc:
        process_context(plan_of(history), compress_policy("summarize"), handlers=registry(handler))
    assert exc.value.codes == ["async-handler"]
    with pytest.raises(TypeError, match="an async summariser makes an async handler"):
        summarize(summarise, use_async=False)
    with pytest.raises(TypeError, match="expected a function"):
        summarize("not callable")


def test_a_summariser_that_fails_or_lies_fails_the_step():
    history = make_history("chat", broken=False)
    plan = plan_of(history)
    for fn, reason, words in [
        (lambda text, target: 42, "handler-error", "returned int, not a str"),
        (lambda text, target: text * 2, "handler-error",
         "is not shorter than the messages it replaces"),
        (lambda text, target: 1 / 0, "handler-error", "ZeroDivisionError"),
    ]:
        step = process_context(plan, compress_policy("summarize"),
                               handlers=registry(summarize(fn))).report.steps[0]
        assert (step.status, step.reason, step.handler_figures) == ("failed", reason, None)
        assert words in step.message


def test_summarize_a_text_fragment_and_cancel():
    plan = ContextPlan(fragments=[Fragment(id="notes", kind="note", text="n " * 1000)])
    policy = {"mode": "reduce", "triggerChars": 1, "steps": [
        {"id": "c", "kind": "compress", "fragmentId": "notes", "handlerId": "summarize",
         "targetChars": 500}]}
    fn = FakeSummariser()
    out = process_context(plan, policy, handlers=registry(summarize(fn)))
    assert out.plan.fragment("notes").text == "Summary of the earlier conversation:\n2000 chars about n"
    assert fn.asked == [("n " * 1000, 500 - 37)]
    assert out.report.steps[0].handler_figures.summary_chars == len(out.plan.fragment("notes").text)

    class CancelInside:
        def __init__(self):
            self.event = threading.Event()

        def __call__(self, text, target):
            self.event.set()
            return "s"

    # Cancelled before the summariser is called: nothing partial escapes.
    event = threading.Event()
    event.set()
    request = CompressRequest(fragment=plan.fragments[0], content="n" * 50, kept=None,
                              target_chars=0, step_id="c", counter=None, cancel=event)
    with pytest.raises(ContextCancelledError):
        summarize(fn)(request)
    inside = CancelInside()
    with pytest.raises(ContextCancelledError):
        process_context(plan, policy, handlers=registry(summarize(inside)), cancel=inside.event)
