"""Arrow tables of transcripts for the columnar path's tests, and what ``reduce_table`` must give
for a row."""

from __future__ import annotations

import pyarrow as pa

from contextpolicy import ContextPlan, process_context

FUNCTION = pa.struct([("name", pa.string()), ("arguments", pa.string())])


CALL = pa.struct([("id", pa.string()), ("type", pa.string()), ("function", FUNCTION)])


MESSAGE = pa.struct([("role", pa.string()), ("content", pa.string()),
                     ("tool_calls", pa.list_(CALL)), ("tool_call_id", pa.string())])


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
