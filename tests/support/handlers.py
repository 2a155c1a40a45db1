"""Histories in three formats for the handlers' suites (chat messages, Anthropic blocks and
Responses items), a char counter of the tests' own, a summariser that records what it is asked,
and the run that holds a handler to the policy model: the caller's plan unchanged, protected
fragments untouched, pairing warnings identical before and after, the report's chars recounted.
"""

from __future__ import annotations

import asyncio
import copy
import json

from contextpolicy import (
    ContextPlan,
    Fragment,
    aprocess_context,
    check_input_budget,
    process_context,
)
from contextpolicy.content import snapshot

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


class FakeSummariser:
    """A summariser that records what it is asked and answers with the first words."""

    def __init__(self) -> None:
        self.asked: list[tuple[str, int]] = []

    def __call__(self, text: str, target: int) -> str:
        self.asked.append((text, target))
        return f"  {len(text)} chars about {text.split()[1]}  "
