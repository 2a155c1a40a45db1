"""Arrow tables of transcripts for the columnar path's tests (their types, policies and
strategies), and what ``reduce_table`` must give for a row."""

from __future__ import annotations

from typing import TYPE_CHECKING

import pyarrow as pa
from hypothesis import strategies as st

from contextpolicy import ContextPlan, process_context

if TYPE_CHECKING:
    from contextpolicy.batch import Reduced

FUNCTION = pa.struct([("name", pa.string()), ("arguments", pa.string())])


CALL = pa.struct([("id", pa.string()), ("type", pa.string()), ("function", FUNCTION)])


MESSAGE = pa.struct([("role", pa.string()), ("content", pa.string()),
                     ("tool_calls", pa.list_(CALL)), ("tool_call_id", pa.string())])


PART = pa.struct([("type", pa.string()), ("text", pa.string()), ("id", pa.string()),
                  ("tool_use_id", pa.string())])


def expected(row: list, policy, **kwargs):
    """process_context of the row's transcript (a row without a history skips the steps on
    it)."""
    return process_context(ContextPlan.from_messages(row), policy, **kwargs)


def filled(messages: list, names: list[str]) -> list:
    """Messages as an Arrow struct holds them: every field, null where a key is missing."""
    return [{name: m.get(name) for name in names} for m in messages]


def responses_turn(i: int, calls: int = 1, size: int = 40) -> list[dict]:
    """A user message item, reasoning before each call, calls and their outputs, an answer."""
    out: list[dict] = [{"type": "message", "role": "user",
                        "content": [{"type": "input_text", "text": f"q{i:02d}" + "u" * size}]}]
    for c in range(calls):
        cid = f"call_{i}_{c}"
        out += [
            {"type": "reasoning", "id": f"rs_{i}_{c}", "encrypted_content": "gAAA",
             "summary": [{"type": "summary_text", "text": "think" * 2}]},
            {"type": "function_call", "call_id": cid, "name": "lookup",
             "arguments": f'{{"q": {i}}}'},
            {"type": "function_call_output", "call_id": cid, "output": "r" * size},
        ]
    out.append({"type": "message", "role": "assistant",
                "content": [{"type": "output_text", "text": "a" * size}]})
    return out


def corpus_rows(kind: str, n: int, seed: int) -> list[list[dict]]:
    """``n`` transcripts of a seeded corpus as one Arrow column holds them: an agent trace's
    text contents as blocks, so every content has one type (its tool calls and results are
    blocks)."""
    from contextpolicy import synthetic

    rows = synthetic.corpus(kind, n, seed)
    if kind == "agent-traces":
        rows = [[dict(m, content=[{"type": "text", "text": m["content"]}])
                 if isinstance(m.get("content"), str) else m for m in r] for r in rows]
    return rows


# The policies and the per-row check of the reduce_table suites.


def trim(target: int, keep: int = 1, grouping: str = "user-turn", fid: str = "history",
         sid: str = "t") -> dict:
    return {"id": sid, "kind": "trim", "fragmentId": fid, "targetChars": target,
            "keepGroups": keep, "grouping": {"kind": grouping}}


def reduce_policy(*steps: dict, trigger: int = 100, target: int | None = 50) -> dict:
    doc = {"mode": "reduce", "triggerChars": trigger, "steps": list(steps)}
    if target is not None:
        doc["targetInputChars"] = target
    return doc


def assert_rows_match(table, policy, out: Reduced, column: str = "messages", **kwargs):
    rows = table.column(column).to_pylist()
    names = [f.name for f in table.schema.field(column).type.value_type]
    figures = out.figures.to_pylist()
    got = out.table.column(column).to_pylist()
    assert len(figures) == len(rows) == out.table.num_rows
    for i, row in enumerate(rows):
        result = expected(row, policy, **kwargs)
        report = result.report
        f = figures[i]
        assert got[i] == filled(result.input, names), i
        assert (f["chars_before"], f["chars_after"], f["messages_before"], f["messages_after"],
                f["triggered"], f["target_reached"], f["missed_reason"]) == (
            report.before.chars, report.after.chars, report.before.messages,
            report.after.messages, report.triggered, report.target_reached,
            report.missed_reason), i
        groups = sum((s.groups_before or 0) - (s.groups_after or 0) for s in report.steps
                     if s.status == "applied" and s.kind == "trim")
        assert f["groups_removed"] == groups, i
        assert [tuple(w.values()) for w in f["warnings"]] == [
            (w.code, w.fragment_id, w.index, w.tool_call_id) for w in report.warnings], i
        if "counter" in kwargs:
            assert (f["tokens_before"], f["tokens_after"]) == (
                report.before.tokens, report.after.tokens)


POLICY = reduce_policy(trim(400), trigger=500, target=400)

# Transcripts as Arrow holds them (nulls for missing keys): the parts every strategy draws on.
ids = st.sampled_from(["a", "b", "c", "call_1"]) | st.none()
words = st.text(st.characters(codec="utf-8"), max_size=40) | st.sampled_from(
    ["", "😀" * 30, "订单 " * 40, "x" * 300])
call = st.fixed_dictionaries({
    "id": ids, "type": st.just("function"),
    "function": st.none() | st.fixed_dictionaries({"name": words | st.none(),
                                                   "arguments": words | st.none()}),
})
