"""What the kernel differential suites share: their hypothesis settings, JSON values at every
edge the compiled kernel's JSON writer must get right, and conversations of Responses items."""

from __future__ import annotations

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st

from .strategies import text

SETTINGS = settings(
    max_examples=150, deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)


# What the native writer must get right: every escape, the widest character of a value in any
# place (a 1-byte key with a 4-byte value, a lone surrogate last), ints at the 64-bit edges
# (which it writes) and past them (which go to the twin's writer), floats in every form repr
# gives them and the three JSON has no number for, tuples, empty containers.
edge_chars = st.sampled_from([
    "a", "é", "\xff", "\u0100", "\u2028", "\uffff", "\ud800", "\udfff", "\ud83d", "😀",
    "\U0010ffff", "\x00", "\x01", "\x08", "\t", "\n", "\x0b", "\x0c", "\r", "\x1f", "\x7f", '"',
    "\\", "/", " ",
])
edge_text = st.lists(edge_chars, max_size=8).map("".join) | text
edge_ints = st.sampled_from([
    0, -1, 9, 10, -10, 2**31, -(2**31), 2**63 - 1, -(2**63), 2**63, -(2**63) - 1, 2**64 - 1,
    2**64, -(2**64), 10**18, 10**19, -(10**19),
]) | st.integers(-(2**70), 2**70)
edge_floats = st.sampled_from([
    0.0, -0.0, 0.1, 1.5, 1e16, 1e-7, 1e300, -1e300, 5e-324, 1.7976931348623157e308,
    123456789.125, float("nan"), float("inf"), float("-inf"),
]) | st.floats()
native_json = st.recursive(
    st.none() | st.booleans() | edge_ints | edge_floats | edge_text,
    lambda inner: st.lists(inner, max_size=4) | st.lists(inner, max_size=4).map(tuple)
    | st.dictionaries(edge_text, inner, max_size=4),
    max_leaves=24,
)


@st.composite
def responses_conversation(draw):
    """Turns of Responses items: reasoning before calls and answers, outputs that may come
    turns later (or never), calls whose ids repeat, unknown items, Anthropic thinking."""
    ids = ["a", "b", "c", "d"]
    items = []
    for _ in range(draw(st.integers(0, 6))):
        items.append({"type": "message", "role": "user", "content": draw(text)}
                     if draw(st.booleans()) else {"role": "user", "content": [
                         {"type": "input_text", "text": draw(text)}]})
        for _ in range(draw(st.integers(0, 4))):
            kind = draw(st.sampled_from(["reasoning", "call", "output", "answer", "unknown",
                                         "thinking", "tool", "reasoning"]))
            cid = draw(st.sampled_from(ids))
            if kind == "reasoning":
                items.append({"type": "reasoning", "summary": [
                    {"type": "summary_text", "text": draw(text)}],
                    "encrypted_content": draw(st.none() | text)})
            elif kind == "call":
                items.append({"type": draw(st.sampled_from(["function_call", "custom_tool_call",
                                                            "computer_call"])),
                              "call_id": cid, "name": "f", "arguments": draw(native_json)})
            elif kind == "output":
                items.append({"type": "function_call_output", "call_id": cid,
                              "output": draw(text)})
            elif kind == "answer":
                items.append({"type": "message", "role": "assistant", "content": [
                    {"type": "output_text", "text": draw(text)}]})
            elif kind == "unknown":
                items.append({"type": "web_search_call", "id": cid})
            elif kind == "thinking":
                items.append({"role": "assistant", "content": [
                    {"type": "thinking", "thinking": draw(text), "signature": "s"},
                    {"type": "tool_use", "id": cid, "name": "g", "input": draw(native_json)}]})
            else:
                items.append({"role": "user", "content": [
                    {"type": "tool_result", "tool_use_id": cid, "content": draw(text)}]})
    return items
