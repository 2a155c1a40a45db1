"""``contextpolicy.handlers``: the built-in compress handlers end to end, on the compiled kernel
and on the twin, for chat messages, Anthropic blocks and Responses items.

Every case holds the handler to the policy model: pairing warnings identical before and after,
protected fragments untouched (exact type and value), the caller's data unchanged (a deep copy
compared), and the report's figures recounted here by a counter of the test's own. A property
test draws histories of every shape and checks that no handler ever returns more than it was
given, nor touches an id.
"""

from __future__ import annotations

import asyncio
import copy
import json
import pickle
import threading

import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from contextpolicy import (
    CompressRequest,
    ContextCancelledError,
    ContextPlan,
    ContextPlanError,
    ContextPolicyError,
    ContextStepError,
    Fragment,
    PolicyOutcome,
    aprocess_context,
    check_input_budget,
    process_context,
)
from contextpolicy.batch import reduce_table
from contextpolicy.content import snapshot
from contextpolicy.handlers import (
    BUILTIN_IDS,
    AsyncSummarize,
    ClearToolResults,
    Summarize,
    TruncateMessages,
    clear_tool_results,
    cut_text,
    defaults,
    from_config,
    is_summary,
    registry,
    render_transcript,
    summarize,
    truncate_messages,
)
from contextpolicy.implementations import reduce as default_reduce
from contextpolicy.report import CompressFigures
from tests.support import strategies
from tests.support.hostile import LyingStr

# The whole pipeline runs on the compiled kernel and on the twin: ids [c] and [py].
pytestmark = pytest.mark.usefixtures("pipeline_kernel")

FORMATS = ["chat", "anthropic", "responses"]
TOOLS = ("search", "lookup", "memory")
PLACEHOLDER = "[tool result cleared: {chars} chars]"


# ---------------------------------------------------------------------------------------------
# Histories in three formats, and a char counter of the test's own


def result_text(k: int) -> str:
    """Tool output number ``k``: a distinct length, astral and combining characters in it."""
    return f"result {k}: " + "wé\u0301 😀 " * (40 + 7 * k)


def turn_messages(fmt: str, i: int, calls: list[tuple[str, str, str]]) -> list[dict]:
    """One user turn: a question, the calls (id, tool, output), their results, an answer."""
    args = {"q": i, "pad": "p" * 30}
    if fmt == "chat":
        out = [{"role": "user", "content": f"question {i}"},
               {"role": "assistant", "content": None, "tool_calls": [
                   {"id": cid, "type": "function",
                    "function": {"name": tool, "arguments": json.dumps(args)}}
                   for cid, tool, _ in calls]}]
        # Every other result names its tool; the others are named by their call.
        out += [{"role": "tool", "tool_call_id": cid, "content": text,
                 **({"name": tool} if j % 2 else {})} for j, (cid, tool, text) in enumerate(calls)]
        out.append({"role": "assistant", "content": f"answer {i}"})
    elif fmt == "anthropic":
        out = [{"role": "user", "content": [{"type": "text", "text": f"question {i}"}]},
               {"role": "assistant", "content": [
                   {"type": "thinking", "thinking": f"plan {i}", "signature": "c2lnbmVk"},
                   {"type": "text", "text": "let me look"},
                   *[{"type": "tool_use", "id": cid, "name": tool, "input": args}
                     for cid, tool, _ in calls]]},
               # Results as text and as text parts, several in one user message.
               {"role": "user", "content": [
                   {"type": "tool_result", "tool_use_id": cid,
                    "content": text if j % 2 == 0 else [{"type": "text", "text": text}]}
                   for j, (cid, tool, text) in enumerate(calls)]},
               {"role": "assistant", "content": [{"type": "text", "text": f"answer {i}"}]}]
    else:
        out = [{"type": "message", "role": "user",
                "content": [{"type": "input_text", "text": f"question {i}"}]}]
        for cid, tool, text in calls:
            out += [{"type": "reasoning", "id": f"rs_{cid}", "encrypted_content": "gAAA",
                     "summary": [{"type": "summary_text", "text": "thinking"}]},
                    {"type": "function_call", "call_id": cid, "name": tool,
                     "arguments": json.dumps(args)},
                    {"type": "function_call_output", "call_id": cid, "output": text}]
        out.append({"type": "message", "role": "assistant",
                    "content": [{"type": "output_text", "text": f"answer {i}"}]})
    return out


def make_history(fmt: str, turns: int = 6, broken: bool = True) -> list[dict]:
    """``turns`` turns of one or two tool calls each (the tools in turn: search, lookup,
    memory); with ``broken``, turn 2 also holds a result no call made and a call no result
    answers, so that the pairing warnings are not empty."""
    out: list[dict] = []
    k = 0
    for i in range(turns):
        calls = []
        for _ in range(1 + i % 2):
            calls.append((f"call_{k}", TOOLS[k % 3], result_text(k)))
            k += 1
        out += turn_messages(fmt, i, calls)
        if broken and i == 2:
            out[-1:-1] = strays(fmt)
    return out


def strays(fmt: str) -> list[dict]:
    ghost = "ghost output " * 30
    if fmt == "chat":
        return [{"role": "tool", "tool_call_id": "ghost", "content": ghost},
                {"role": "assistant", "content": None, "tool_calls": [
                    {"id": "dangling", "type": "function",
                     "function": {"name": "search", "arguments": "{}"}}]}]
    if fmt == "anthropic":
        return [{"role": "user", "content": [
                    {"type": "tool_result", "tool_use_id": "ghost", "content": ghost}]},
                {"role": "assistant", "content": [
                    {"type": "tool_use", "id": "dangling", "name": "search", "input": {}}]}]
    return [{"type": "function_call_output", "call_id": "ghost", "output": ghost},
            {"type": "function_call", "call_id": "dangling", "name": "search",
             "arguments": "{}"}]


def compact(value) -> str:
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)


def text_chars(value) -> int:
    if value is None:
        return 0
    if isinstance(value, str):
        return len(value)
    total = 0
    for part in value:
        if isinstance(part, str):
            total += len(part)
        elif part.get("type") in ("text", "input_text", "output_text", "summary_text"):
            total += len(part["text"])
        elif part.get("type") == "tool_use":
            total += len(part["name"]) + len(compact(part["input"]))
        elif part.get("type") == "tool_result":
            total += text_chars(part.get("content"))
        elif part.get("type") == "thinking":
            total += len(part["thinking"])
    return total


def chars(messages: list[dict]) -> int:
    """The chars of ``messages`` by the accounting rules, counted here (not by the kernel)."""
    total = 0
    for m in messages:
        kind = m.get("type")
        if kind == "function_call":
            total += len(m["name"]) + len(m["arguments"])
        elif kind == "function_call_output":
            total += text_chars(m["output"])
        elif kind == "reasoning":
            total += text_chars(m.get("summary"))
        else:
            total += text_chars(m.get("content"))
            for call in m.get("tool_calls") or []:
                total += len(call["function"]["name"]) + len(call["function"]["arguments"])
    return total


def texts(value) -> list[str]:
    """The texts a cut may shorten in a content value (strs, text parts, tool results)."""
    if isinstance(value, str):
        return [value]
    out = []
    for part in value or []:
        if isinstance(part, str):
            out.append(part)
        elif part.get("type") in ("text", "input_text", "output_text"):
            out.append(part["text"])
        elif part.get("type") == "tool_result":
            out += texts(part.get("content"))
    return out


def longest_text(message: dict) -> int:
    if message.get("type") in ("function_call", "reasoning"):
        return 0
    return max(map(len, texts(message.get("output", message.get("content")))), default=0)


def results(messages: list[dict]) -> list[tuple[str, object]]:
    """(id, content) of every tool result, in order, read here (not by the handlers)."""
    out = []
    for m in messages:
        if m.get("type") == "function_call_output":
            out.append((m["call_id"], m["output"]))
        elif m.get("role") == "tool":
            out.append((m["tool_call_id"], m["content"]))
        elif isinstance(m.get("content"), list):
            out += [(b["tool_use_id"], b["content"]) for b in m["content"]
                    if b.get("type") == "tool_result"]
    return out


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


def plan_of(history: list[dict]) -> ContextPlan:
    return ContextPlan(fragments=[
        Fragment(id="system", kind="system", text="You are an agent with tools."),
        Fragment(id="evidence", kind="evidence", text="Order 7 shipped on Monday."),
        Fragment(id="history", kind="history", messages=history),
        Fragment(id="question", kind="question", text="Where is order 7?"),
    ])


def compress_policy(handler_id: str, target: int = 0, keep_groups: int | None = None,
                    **over) -> dict:
    step = {"id": "squeeze", "kind": "compress", "fragmentId": "history",
            "handlerId": handler_id, "targetChars": target}
    if keep_groups is not None:
        step["keepGroups"] = keep_groups
    return {"mode": "reduce", "triggerChars": 1, "steps": [step], **over}


def warnings_of(result) -> list[tuple]:
    return [(w.code, w.fragment_id, w.index, w.tool_call_id) for w in result.report.warnings]


def run_checked(plan: ContextPlan, policy: dict, handlers: dict, *, aio: bool = False):
    """Run the policy and check what every handler must keep: the caller's plan unchanged (a
    deep copy compared, by value and by exact JSON), protected fragments the same content,
    pairing warnings identical to the plan's own, the report's chars recounted here."""
    given_copy = copy.deepcopy(plan.fragments)
    given_snap = [snapshot(f.content()) for f in plan.fragments]
    before = process_context(plan, {"mode": "validate"})
    if aio:
        result = asyncio.run(aprocess_context(plan, policy, handlers=handlers))
    else:
        result = process_context(plan, policy, handlers=handlers)
    assert plan.fragments == given_copy
    assert [snapshot(f.content()) for f in plan.fragments] == given_snap
    for old, new in zip(plan.fragments, result.plan.fragments, strict=True):
        if old.is_protected:
            assert type(new.text) is str and new.text == old.text
    history = result.plan.fragment("history").messages
    assert result.report.after.chars == chars(result.input) - 0 == sum(
        len(f.text) for f in result.plan.fragments if f.text is not None) + chars(history)
    assert check_input_budget(result).chars == result.report.after.chars
    assert result.report.before.chars == before.report.before.chars
    return result, warnings_of(before)


# ---------------------------------------------------------------------------------------------
# Types, roles and ids read as the kernels read them: the text of a str, and nothing else

# A part type that is not a str (a list or an object cannot even be hashed): an opaque part.
ODD_TYPES = [["text"], {"type": "text"}, ["tool_result"], 7, None, 1.5]
LONG = "x" * 400


def odd_history(odd: object) -> list[dict]:
    """A tool call and its result, with a part of type ``odd`` beside every text, each holding
    the keys of the part it would be if its type were a str."""
    return [
        {"role": "user", "content": [{"type": odd, "text": LONG},
                                     {"type": "text", "text": "question " + LONG}]},
        {"role": "assistant", "content": [
            {"type": "tool_use", "id": "c1", "name": "search", "input": {"q": 1}},
            {"type": odd, "id": "c2", "name": "search", "input": {"q": LONG}}]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "c1", "content": [
            {"type": odd, "text": LONG, "tool_use_id": "c2"},
            {"type": "text", "text": "result " + LONG}]}]},
        {"role": "assistant", "content": [{"type": "text", "text": "answer " + LONG},
                                          {"type": odd, "content": LONG}]},
        {"role": "user", "content": "next"},
        {"role": "assistant", "content": "ok"},
    ]


def odd_parts(messages: list[dict], odd: object) -> list[tuple[int, int, object]]:
    """Every part whose type is ``odd``, where it is, read here."""
    out = []
    for i, m in enumerate(messages):
        content = m.get("content")
        parts = content if isinstance(content, list) else []
        for j, part in enumerate(parts):
            inner = part.get("content") if part.get("type") == "tool_result" else None
            for k, p in enumerate(inner if isinstance(inner, list) else [part]):
                if type(p.get("type")) is type(odd) and p.get("type") == odd:
                    out.append((i, j * 10 + k, snapshot(p)))
    return out


@pytest.mark.parametrize("odd", ODD_TYPES, ids=repr)
@pytest.mark.parametrize("handler_id", ["truncate-messages", "clear-tool-results", "summarize"])
def test_a_part_whose_type_is_not_a_str_is_opaque_to_every_handler(handler_id, odd):
    seen: list[str] = []

    def summariser(text: str, target: int) -> str:
        seen.append(text)
        return "short"

    handlers = {"truncate-messages": truncate_messages(max_chars=100),
                "clear-tool-results": clear_tool_results(keep=0, min_chars=1, clear_inputs=True),
                "summarize": summarize(summariser, min_target_chars=1)}
    history = odd_history(odd)
    result, warnings = run_checked(plan_of(history), compress_policy(handler_id, keep_groups=1),
                                   {handler_id: handlers[handler_id]})
    step = result.report.steps[0]
    assert step.status == "applied", step
    assert warnings_of(result) == warnings  # the pairing reads no id of an opaque part
    out = result.plan.fragment("history").messages
    if handler_id == "summarize":
        assert "[part]" in seen[0] and "[called search(" in seen[0]
        return
    # Every text was handled, every opaque part left as it was, with all its keys.
    assert odd_parts(out, odd) == (odd_parts(history, odd) if handler_id == "truncate-messages"
                                   else [p for p in odd_parts(history, odd) if p[0] != 2])
    if handler_id == "truncate-messages":
        cut = [cut_text(t, 50, 25) if len(t) > 100 else t
               for m in history for t in texts(m.get("content"))]
        assert [t for m in out for t in texts(m.get("content"))] == cut
        assert [len(t) for t in cut] == [len(cut_text(LONG, 50, 25))] * 3 + [4, 2]
    else:  # the result (odd part and all) cleared, its call's input emptied
        assert out[2]["content"][0]["content"] == [
            {"type": "text", "text": PLACEHOLDER.format(chars=len("result " + LONG))}]
        assert out[1]["content"][0]["input"] == {}


def test_handlers_read_types_roles_and_ids_by_their_text():
    # Called directly (not through process_context, which hands them plain copies): a str
    # subclass that says it equals anything and a role that is not a str change nothing.
    lying = LyingStr("image")
    messages = [
        {"role": "user", "content": [{"type": lying, "text": LONG},
                                     {"type": LyingStr("text"), "text": LONG}]},
        {"role": "assistant", "content": [
            {"type": "tool_use", "id": LyingStr("c1"), "name": "search", "input": {}}]},
        {"role": "user", "content": [{"type": LyingStr("tool_result"), "tool_use_id": "c1",
                                      "content": LONG}]},
        {"role": ["tool"], "tool_call_id": "c1", "content": LONG},
        {"role": {"name": "tool"}, "content": [{"type": ["tool_result"], "content": LONG}]},
    ]
    given_copy = snapshot(messages)
    cut = truncate_messages(max_chars=100).truncate(messages)
    short = cut_text(LONG, 50, 25)
    assert [p["text"] for p in cut[0]["content"]] == [LONG, short]  # an image, a text part
    assert cut[2]["content"][0]["content"] == short  # a tool result's content
    assert cut[4] is messages[4]  # its part is opaque
    cleared = clear_tool_results(keep=0, min_chars=1, exclude_tools=("lookup",)).clear(messages)
    # The one result answers the call by the id's text, so its tool is known and not excluded.
    assert cleared[2]["content"][0]["content"] == PLACEHOLDER.format(chars=len(LONG))
    assert [m is o for m, o in zip(cleared, messages, strict=True)] == [
        True, True, False, True, True]
    transcript = render_transcript(messages)
    assert "[image]" in transcript and "['tool']: " in transcript
    assert snapshot(messages) == given_copy


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
        assert (step.status, step.reason, step.handler_figures) == ("failed", "not-smaller", None)
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
        "failed", "not-smaller")
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


class FakeSummariser:
    """A summariser that records what it is asked and answers with the first words."""

    def __init__(self) -> None:
        self.asked: list[tuple[str, int]] = []

    def __call__(self, text: str, target: int) -> str:
        self.asked.append((text, target))
        return f"  {len(text)} chars about {text.split()[1]}  "


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


# ---------------------------------------------------------------------------------------------
# Ids, registries, pickling, handlers files


def test_ids_registry_and_defaults():
    assert BUILTIN_IDS == ("clear-tool-results", "truncate-messages", "summarize")
    assert sorted(defaults()) == ["clear-tool-results", "truncate-messages"]
    assert defaults()["clear-tool-results"] == clear_tool_results()
    two = registry(clear_tool_results(), clear_tool_results(keep=0, handler_id="clear-all"))
    assert sorted(two) == ["clear-all", "clear-tool-results"]
    with pytest.raises(ContextPolicyError) as exc:
        registry(clear_tool_results(), clear_tool_results(keep=1), lambda r: r)
    assert exc.value.codes == ["duplicate-id", "invalid-handler"]
    assert repr(clear_tool_results(keep=1, handler_id="x")) == (
        "clear_tool_results(keep=1, placeholder='[tool result cleared: {chars} chars]', "
        "exclude_tools=(), clear_inputs=False, min_chars=100, clear_at_least=0, "
        "handler_id='x')")


def _summary_fn(text: str, target: int) -> str:
    return text[:10]


@pytest.mark.parametrize("handler", [
    clear_tool_results(keep=1, exclude_tools=("memory",), clear_inputs=True),
    truncate_messages(max_chars=50, head=10, tail=5, marker="<{chars}>", handler_id="cut"),
    summarize(_summary_fn, prefix="S: "),
], ids=["clear", "truncate", "summarize"])
def test_handlers_pickle_with_their_parameters(handler):
    copy_ = pickle.loads(pickle.dumps(handler))
    assert type(copy_) is type(handler) and copy_ == handler
    history = make_history("chat", broken=False)
    request = CompressRequest(fragment=Fragment(id="history", kind="history", messages=history),
                              content=history, kept=None, target_chars=0, step_id="s",
                              counter=None, cancel=None)
    assert copy_(request) == handler(request)


def test_handlers_from_a_config_document():
    handlers = from_config({
        "clear-tool-results": {"keep": 1, "excludeTools": ["memory"], "clearInputs": True},
        "short": {"handler": "truncate-messages", "maxChars": 300, "head": 100},
    })
    assert handlers == {
        "clear-tool-results": clear_tool_results(keep=1, exclude_tools=("memory",),
                                                 clear_inputs=True),
        "short": truncate_messages(max_chars=300, head=100, handler_id="short"),
    }
    assert isinstance(handlers["short"], TruncateMessages) and handlers["short"].handler_id == "short"
    with pytest.raises(ContextPolicyError) as exc:
        from_config({"clear-tool-results": {"keeep": 1, "keep": "1"}, "mine": {"maxChars": 5},
                     "summarize": {}, "other": {"handler": "nope"}, "bad": 3})
    assert sorted((i.path, i.code) for i in exc.value.issues) == [
        ("bad", "expected-object"), ("clear-tool-results.keeep", "unknown-key"),
        ("clear-tool-results.keep", "expected-integer"), ("mine.handler", "missing"),
        ("other.handler", "unknown-handler"), ("summarize", "needs-function")]
    assert "did you mean 'keep'?" in str(exc.value)


def test_a_policy_by_id_with_its_handlers_once_prepared():
    from contextpolicy import prepare_policy

    history = make_history("chat", broken=False)
    policy = {"mode": "reduce", "triggerChars": 1000, "targetInputChars": 900, "steps": [
        {"id": "old-outputs", "kind": "compress", "fragmentId": "history",
         "handlerId": "clear-tool-results", "targetChars": 1200},
        {"id": "recent", "kind": "trim", "fragmentId": "history", "keepGroups": 1,
         "targetChars": 1200}]}
    prepared = prepare_policy(policy, handlers=defaults())
    a = process_context(plan_of(history), prepared)
    b = process_context(plan_of(history), policy, handlers=defaults())
    assert a.report == b.report and a.input == b.input
    assert a.report.steps[0].handler_figures.results_cleared == 6


# ---------------------------------------------------------------------------------------------
# Figures are measured by the core, never claimed


def test_a_custom_implementation_cannot_claim_handler_figures():
    history = make_history("chat", broken=False)
    lie = CompressFigures(handler="clear-tool-results", chars_removed=10**6, results_cleared=99)

    def claiming(ctx):
        outcome = yield from default_reduce(ctx)
        steps = [s.model_copy(update={"handler_figures": lie}) for s in outcome.steps]
        return PolicyOutcome(fragments=outcome.fragments, steps=steps,
                             triggered=outcome.triggered)

    honest = process_context(plan_of(history), compress_policy("clear-tool-results"),
                             handlers=defaults())
    claimed = process_context(plan_of(history), compress_policy("clear-tool-results"),
                              handlers=defaults(), implementations={"reduce": claiming})
    assert claimed.report.steps[0].handler_figures == honest.report.steps[0].handler_figures
    assert honest.report.steps[0].handler_figures.results_cleared == 6
    assert [w.code for w in claimed.report.warnings] == ["figure-replaced"]
    # A handler of the caller's own, which is no built-in: no figures, whatever it does.
    mine = process_context(plan_of(history), compress_policy("mine"),
                           handlers={"mine": clear_tool_results()})
    assert mine.report.steps[0].status == "applied"
    assert mine.report.steps[0].handler_figures is not None  # a built-in under any id
    own = process_context(plan_of(history), compress_policy("mine"),
                          handlers={"mine": lambda r: clear_tool_results()(r)})
    assert own.report.steps[0].handler_figures is None
    assert own.input == mine.input


def test_a_subclass_is_measured_for_what_it_did():
    class Sneaky(ClearToolResults):
        def __call__(self, request):
            out = super().__call__(request)
            return out[:-1]  # drops the last message too

    history = make_history("chat", broken=False)
    sneaky = Sneaky(clear_tool_results().params)
    result = process_context(plan_of(history), compress_policy("clear-tool-results"),
                             handlers=registry(sneaky))
    step = result.report.steps[0]
    assert step.status == "applied" and step.messages_removed == 1
    # Not aligned with its input any more: no count is claimed for it.
    assert step.handler_figures.results_cleared is None
    assert step.handler_figures.chars_removed == step.chars_before - step.chars_after


def test_events_carry_the_figures_the_report_has():
    history = make_history("anthropic")
    events = []
    policy = {"mode": "reduce", "triggerChars": 1, "steps": [
        {"id": "clear", "kind": "compress", "fragmentId": "history",
         "handlerId": "clear-tool-results", "targetChars": 0},
        {"id": "cut", "kind": "compress", "fragmentId": "history",
         "handlerId": "truncate-messages", "targetChars": 0}]}
    result = process_context(plan_of(history), policy, on_event=events.append,
                             handlers=registry(clear_tool_results(keep=1),
                                               truncate_messages(max_chars=100)))
    done = [e.data["step"] for e in events if e.type == "step.completed"]
    assert [d["handlerFigures"] for d in done] == [
        s.handler_figures.to_json_dict() for s in result.report.steps]
    assert done[0]["handlerFigures"]["resultsCleared"] == 9  # 9 calls and the ghost, one kept
    assert done[1]["handlerFigures"]["messagesTruncated"] > 0


def test_report_json_carries_the_figures():
    history = make_history("responses", broken=False)
    result = process_context(plan_of(history), compress_policy("clear-tool-results"),
                             handlers=defaults())
    doc = result.report_json()
    assert doc == result.report.model_dump(by_alias=True, mode="json")
    assert doc["steps"][0]["handlerFigures"] == {
        "handler": "clear-tool-results", "charsRemoved": doc["steps"][0]["charsBefore"]
        - doc["steps"][0]["charsAfter"], "resultsCleared": 6, "inputsCleared": 0,
        "messagesTruncated": None, "messagesSummarized": None, "summaryChars": None}


# ---------------------------------------------------------------------------------------------
# The three in sequence, and reduce_table per row


def test_clear_then_trim_then_summarise():
    history = make_history("anthropic", turns=10)
    policy = {"mode": "reduce", "triggerChars": 4000, "targetInputChars": 2000, "steps": [
        {"id": "clear", "kind": "compress", "fragmentId": "history",
         "handlerId": "clear-tool-results", "targetChars": 1500},
        {"id": "trim", "kind": "trim", "fragmentId": "history", "keepGroups": 5,
         "targetChars": 2500},
        {"id": "summary", "kind": "compress", "fragmentId": "history", "handlerId": "summarize",
         "keepGroups": 2, "targetChars": 1500}]}
    handlers = registry(clear_tool_results(keep=2), summarize(FakeSummariser()))
    result, before = run_checked(plan_of(history), policy, handlers)
    steps = result.report.steps
    assert [s.status for s in steps] == ["applied", "applied", "applied"]
    assert [(s.groups_before, s.groups_after) for s in steps] == [(10, 10), (10, 5), (5, 3)]
    assert [s.handler_figures.handler if s.handler_figures else None for s in steps] == [
        "clear-tool-results", None, "summarize"]
    assert steps[1].handler_figures is None  # a trim says its figures itself
    assert result.report.after.chars < result.report.before.chars
    # The trim cut away turn 2's stray result and call; nothing else is left unpaired.
    assert before and warnings_of(result) == []
    assert is_summary(result.plan.fragment("history").messages[0])


CHAT_MESSAGE = pa.struct([
    ("role", pa.string()), ("content", pa.string()), ("name", pa.string()),
    ("tool_calls", pa.list_(pa.struct([("id", pa.string()), ("type", pa.string()), (
        "function", pa.struct([("name", pa.string()), ("arguments", pa.string())]))]))),
    ("tool_call_id", pa.string())])


def filled(messages: list[dict], names: list[str]) -> list[dict]:
    return [{name: m.get(name) for name in names} for m in messages]


def test_reduce_table_clears_and_truncates_per_row():
    rows = [[{"role": "system", "content": "sys"}, *make_history("chat", turns=t),
             {"role": "user", "content": "now?"}] for t in (1, 3, 6)]
    table = pa.table({"id": ["a", "b", "c"],
                      "messages": pa.array(rows, type=pa.list_(CHAT_MESSAGE))})
    policy = {"mode": "reduce", "triggerChars": 3000, "steps": [
        {"id": "clear", "kind": "compress", "fragmentId": "history",
         "handlerId": "clear-tool-results", "targetChars": 0},
        {"id": "cut", "kind": "compress", "fragmentId": "history",
         "handlerId": "truncate-messages", "targetChars": 0}]}
    handlers = registry(clear_tool_results(keep=1), truncate_messages(max_chars=80))
    out = reduce_table(table, policy, handlers=handlers)
    names = [f.name for f in CHAT_MESSAGE]
    got = out.table.column("messages").to_pylist()
    figures = out.figures.to_pylist()
    for i, row in enumerate(table.column("messages").to_pylist()):
        expected = process_context(ContextPlan.from_messages(row), policy, handlers=handlers)
        assert got[i] == filled(expected.input, names)
        assert (figures[i]["chars_before"], figures[i]["chars_after"]) == (
            expected.report.before.chars, expected.report.after.chars)
        assert [(w["code"], w["tool_call_id"]) for w in figures[i]["warnings"]] == [
            (w.code, w.tool_call_id) for w in expected.report.warnings]
    assert figures[0]["chars_after"] == figures[0]["chars_before"]  # below the trigger
    assert figures[2]["chars_after"] < figures[2]["chars_before"] // 3
    assert out.table.column("id").to_pylist() == ["a", "b", "c"]
    # Messages the handlers left as they were are the table's own values, taken, not rebuilt.
    assert got[2][1] == rows[2][1] | {"name": None, "tool_call_id": None, "tool_calls": None}


def test_reduce_table_with_blocks_and_an_input_a_struct_cannot_empty():
    # Tool results as text throughout (an Arrow column holds one type).
    rows = [[{**m, "content": [{**b, "content": texts(b["content"])[0]}
                               if b["type"] == "tool_result" else b for b in m["content"]]}
             for m in make_history("anthropic", turns=4, broken=False)]]
    table = pa.table({"messages": rows})
    out = reduce_table(table, compress_policy("clear-tool-results"), handlers=defaults())
    expected = process_context(ContextPlan.from_messages(table.column("messages").to_pylist()[0]),
                               compress_policy("clear-tool-results"), handlers=defaults())
    assert out.figures.column("chars_after").to_pylist() == [expected.report.after.chars]
    assert [c for _, c in results(out.table.column("messages").to_pylist()[0])][:2] == [
        c for _, c in results(expected.input)][:2]
    # tool_use inputs are structs here: an emptied input would read back with null fields, so
    # the figures would not say what the table holds.
    with pytest.raises(ContextPlanError) as exc:
        reduce_table(table, compress_policy("clear-tool-results"),
                     handlers=registry(clear_tool_results(clear_inputs=True)))
    assert exc.value.codes == ["schema-mismatch"]
    assert "Arrow structs cannot hold an empty tool input" in str(exc.value)


# ---------------------------------------------------------------------------------------------
# Never larger, never an id touched: every shape of history


SETTINGS = settings(max_examples=150, deadline=None,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


def _kernel_figures(messages):
    from contextpolicy import _kernel

    m = _kernel.measure(messages)
    return m.chars, m.messages, m.pairing(messages)


_INFLATED = {"content", "text", "output", "thinking", "arguments", "input"}


def inflate(value, k: int):
    """``value`` with every text a handler may shorten repeated ``k`` times (roles, types and
    ids as they were): the shared strategies draw short texts."""
    if isinstance(value, str):
        return value * k
    if isinstance(value, list):
        return [inflate(v, k) for v in value]
    if isinstance(value, dict):
        return {key: inflate(v, k) if key in _INFLATED else v for key, v in value.items()}
    return value


@SETTINGS
@given(st.lists(strategies.message, max_size=40), st.integers(1, 40), st.integers(0, 4),
       st.integers(0, 200), st.integers(1, 300), st.booleans(),
       st.sampled_from([PLACEHOLDER, "[x{chars}]", "[cleared]"]))
def test_no_handler_ever_returns_more_than_it_was_given(drawn, k, keep, min_chars, max_chars,
                                                       inputs, placeholder):
    messages = [{key: inflate(v, k) if key in _INFLATED else v for key, v in m.items()}
                if isinstance(m, dict) else m for m in drawn]
    try:
        chars_in, n, pairing = _kernel_figures(messages)
    except ContextPlanError:
        return  # content the kernels refuse never reaches a handler
    given_copy = copy.deepcopy(messages)
    fragment = Fragment(id="history", kind="history", messages=messages)
    request = CompressRequest(fragment=fragment, content=messages, kept=None, target_chars=0,
                              step_id="s", counter=None, cancel=None)
    for handler in (clear_tool_results(keep=keep, min_chars=min_chars, clear_inputs=inputs,
                                       placeholder=placeholder),
                    truncate_messages(max_chars=max_chars, head=max_chars // 3,
                                      tail=max_chars // 3),
                    summarize(lambda text, target: text[:target], min_target_chars=0)):
        try:
            out = handler(request)
        except ValueError as exc:  # a summary no shorter than what it replaces is refused
            assert isinstance(handler, Summarize) and "is not shorter" in str(exc)
            continue
        assert snapshot(messages) == snapshot(given_copy)  # the handler's input untouched
        chars_out, n_out, pairing_out = _kernel_figures(out)
        assert chars_out <= chars_in
        if isinstance(handler, Summarize):
            assert n_out == 1
            continue
        # Clearing and cutting keep every message, every id and so the pairing.
        assert n_out == n and pairing_out == pairing
        for a, b in zip(messages, out, strict=True):
            assert a.get("role") == b.get("role") and a.get("type") == b.get("type")
            assert a.get("tool_call_id") == b.get("tool_call_id")
            assert a.get("call_id") == b.get("call_id")


@SETTINGS
@given(strategies.text.filter(bool) | st.text(min_size=1, max_size=200),
       st.integers(0, 60), st.integers(0, 60))
def test_cut_text_is_a_head_and_a_tail_of_whole_characters(text, head, tail):
    from contextpolicy.handlers.truncate import joins_previous

    out = cut_text(text * 5, head, tail)
    text = text * 5
    if out is None:
        return
    assert len(out) < len(text)
    marker_at = out.index("[... ")
    h = out[:marker_at]
    t = out[out.index(" chars cut ...]") + len(" chars cut ...]"):]
    assert text.startswith(h) and text.endswith(t)
    assert len(h) <= head and len(t) <= tail
    if h:
        assert not joins_previous(text, len(h))
    if t and len(t) < len(text):
        assert not joins_previous(text, len(text) - len(t))
