"""Hypothesis strategies for chat histories: unicode (astral-plane emoji, lone surrogates),
empty and None contents, part lists, Anthropic blocks (thinking too), tool calls, OpenAI
Responses items, 0..5,000 messages."""

from __future__ import annotations

from hypothesis import strategies as st

from contextpolicy._tables import (
    CALL_ITEM_TYPES,
    ROLE_CODES,
    TEXT_PART_TYPES,
    THINKING_PART,
    TOOL_RESULT_PART,
    TOOL_USE_PART,
)

# Unicode including astral-plane emoji and lone surrogates (valid in a Python str).
text = st.text(
    st.characters(codec=None, exclude_categories=()), max_size=30
) | st.sampled_from(["", "😀", "订单", "a\nb", 'q"\\', "\x00\x1f", "🏽" * 5])
json_value = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | text,
    lambda inner: st.lists(inner, max_size=4)
    | st.dictionaries(text | st.integers() | st.booleans(), inner, max_size=4),
    max_leaves=12,
)
ids = st.sampled_from(["a", "b", "c", "call_1", "x"]) | text

text_part = st.fixed_dictionaries(
    {"type": st.sampled_from(TEXT_PART_TYPES), "text": text}
)
opaque_part = st.fixed_dictionaries(
    {"type": st.sampled_from(["image_url", "image", "input_audio", "file", "refusal"])}
) | st.just({"no_type": 1}) | st.just({"type": 7}) | st.fixed_dictionaries(
    # A type that is not a str (a list or an object, which cannot even be hashed), beside the
    # keys of the part it names: opaque all the same.
    {"type": st.sampled_from([["text"], [], {"type": "tool_result"}, {}]), "text": text},
    optional={"content": text, "tool_use_id": ids},
) | st.fixed_dictionaries(
    {"type": st.just("redacted_thinking"), "data": text}
) | st.fixed_dictionaries({"type": st.just("compaction"), "content": text})
thinking = st.fixed_dictionaries(
    {"type": st.just(THINKING_PART), "thinking": text}, optional={"signature": text},
)
tool_use = st.fixed_dictionaries(
    {"type": st.just(TOOL_USE_PART), "id": ids, "name": text},
    optional={"input": json_value},
)
tool_result = st.fixed_dictionaries(
    {"type": st.just(TOOL_RESULT_PART), "tool_use_id": ids},
    optional={"content": st.none() | text | st.lists(text_part | opaque_part | text, max_size=3)},
)
tool_result = tool_result | st.fixed_dictionaries(
    {"type": st.just(TOOL_RESULT_PART), "tool_use_id": ids, "is_error": st.booleans(),
     "content": text},
)
part = text_part | opaque_part | tool_use | tool_result | thinking | text
content = st.none() | text | st.lists(part, max_size=5)
tool_call = st.fixed_dictionaries(
    {"id": ids},
    optional={"function": st.fixed_dictionaries(
        {"name": text}, optional={"arguments": st.none() | text | json_value}
    ) | st.none(), "type": st.just("function")},
)
# Every role of the table, and ones it does not know (LangChain's dumps write human and ai).
role = st.sampled_from([*ROLE_CODES, "critic", "human", "ai"])
chat_message = st.fixed_dictionaries(
    {"role": role},
    optional={
        "content": content,
        "tool_calls": st.none() | st.lists(tool_call, max_size=3),
        "tool_call_id": ids,
        "name": text,
    },
)
# OpenAI Responses input items: messages with a type, calls and their outputs by call_id,
# reasoning items, and item types the kernels do not know.
call_id = st.sampled_from(["a", "b", "call_1"]) | text
responses_item = (
    st.fixed_dictionaries({"type": st.just("message"), "role": role, "content": content})
    | st.fixed_dictionaries(
        {"type": st.sampled_from(CALL_ITEM_TYPES), "call_id": call_id},
        optional={"name": text, "arguments": text | json_value, "input": text,
                  "id": text, "status": st.just("completed"),
                  "action": st.just({"type": "click"})},
    )
    | st.fixed_dictionaries(
        {"type": st.sampled_from([t + "_output" for t in CALL_ITEM_TYPES]), "call_id": call_id},
        optional={"output": st.none() | text | st.lists(text_part | opaque_part, max_size=3)
                  | st.just({"type": "computer_screenshot"})},
    )
    | st.fixed_dictionaries(
        {"type": st.just("reasoning")},
        optional={"id": text,
                  "summary": st.lists(st.fixed_dictionaries(
                      {"type": st.just("summary_text"), "text": text}), max_size=2),
                  "content": st.none() | st.lists(st.fixed_dictionaries(
                      {"type": st.just("reasoning_text"), "text": text}), max_size=2),
                  "encrypted_content": st.none() | text},
    )
    | st.fixed_dictionaries(
        {"type": st.sampled_from(["web_search_call", "item_reference", "mcp_list_tools"])},
        optional={"id": text},
    )
    # an item type the kernels do not know, beside a string role: a message with that role
    | st.fixed_dictionaries({"type": st.just("future_item"), "role": role, "content": content})
)
message = chat_message | responses_item
# Invalid messages, so that both twins are seen to raise the same error at the same index.
bad_message = st.sampled_from([
    "not a dict", None, {"content": "no role"}, {"role": None}, {"role": 1},
    {"role": "user", "content": 5}, {"role": "user", "content": [3]},
    {"role": "user", "content": [{"type": "text"}]},
    {"role": "assistant", "tool_calls": {}}, {"role": "assistant", "tool_calls": [[]]},
    {"role": "assistant", "tool_calls": [{"function": []}]},
    {"role": "assistant", "content": [{"type": "tool_use", "input": {(1, 2): 3}}]},
    {"role": "user", "content": [{"type": "tool_result", "content": {"nested": "dict"}}]},
    {"role": "assistant", "content": [{"type": "thinking", "thinking": 3}]},
    {"type": "function_call", "call_id": "a", "arguments": {(1, 2): 3}},
    {"type": "function_call_output", "call_id": "a", "output": 5},
    {"type": "function_call_output", "call_id": "a", "output": [{"type": "text"}]},
    {"type": "reasoning", "summary": "not a list"},
    {"type": "reasoning", "content": 5},
    {"type": "message", "content": "no role"},
])


@st.composite
def histories(draw, allow_bad: bool = False):
    """0..5,000 messages: a drawn block of messages tiled to the drawn length (fast to draw,
    still long enough to cross every buffer and block size)."""
    block = draw(st.lists(message, min_size=1, max_size=30))
    n = draw(st.integers(0, 5_000) | st.integers(0, 40))
    out = [block[i % len(block)] for i in range(n)]
    if allow_bad and n and draw(st.booleans()):
        out[draw(st.integers(0, n - 1))] = draw(bad_message)
    return out
