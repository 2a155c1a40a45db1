"""Every kernel behaviour, on the compiled kernel and on the twin (the ``kernel`` fixture)."""

from __future__ import annotations

import json

import numpy as np
import pytest

from contextpolicy import ContextPlanError
from contextpolicy._tables import (
    FLAG_OPENS_TURN,
    FLAG_TOOL_CALLS,
    FLAG_TOOL_RESULT,
    FLAG_UNKNOWN_ROLE,
)

U, R, C = FLAG_OPENS_TURN, FLAG_TOOL_RESULT, FLAG_TOOL_CALLS


def chars_of(kernel, messages):
    return kernel.measure_messages(messages)[1].tolist()


# ---------------------------------------------------------------------------------------------
# Character accounting (DESIGN §2)


@pytest.mark.parametrize(
    ("message", "chars", "opaque"),
    [
        ({"role": "user", "content": "hello"}, 5, 0),
        ({"role": "user", "content": ""}, 0, 0),
        ({"role": "assistant", "content": None}, 0, 0),
        ({"role": "assistant"}, 0, 0),
        ({"role": "user", "content": "😀👍🏽"}, 3, 0),  # astral code points count one each
        ({"role": "user", "content": "订单状态"}, 4, 0),
        ({"role": "user", "content": [{"type": "text", "text": "ab"}, {"type": "text", "text": "c"}]}, 3, 0),
        ({"role": "user", "content": [{"type": "input_text", "text": "abcd"}]}, 4, 0),
        ({"role": "assistant", "content": [{"type": "output_text", "text": "xyz"}]}, 3, 0),
        ({"role": "user", "content": ["plain", "str"]}, 8, 0),
        ({"role": "user", "content": [
            {"type": "text", "text": "look"},
            {"type": "image_url", "image_url": {"url": "https://x.invalid/a.png"}},
            {"type": "input_audio", "input_audio": {"data": "AAAA"}},
        ]}, 4, 2),
        ({"role": "user", "content": [{"type": "image", "source": {"data": "xx"}}]}, 0, 1),
        ({"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t", "content": "42"}]}, 2, 0),
        ({"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t", "content": [
            {"type": "text", "text": "abc"}, {"type": "image", "source": {}},
            {"type": "tool_result", "content": "deep"},
        ]}]}, 7, 1),
        ({"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t"}]}, 0, 0),
        ({"role": "assistant", "content": [
            {"type": "tool_use", "id": "t1", "name": "lookup", "input": {"q": "ü", "n": [1, 2.5]}},
        ]}, len("lookup") + len('{"q":"ü","n":[1,2.5]}'), 0),
        ({"role": "assistant", "content": [
            {"type": "tool_use", "id": "t1", "name": "x", "input": {"s": 'a"b\\c\n\x01', "t": True, "z": None}},
        ]}, 1 + len(json.dumps({"s": 'a"b\\c\n\x01', "t": True, "z": None}, separators=(",", ":"), ensure_ascii=False)), 0),
        ({"role": "assistant", "content": [
            {"type": "tool_use", "id": "t1", "name": "x", "input": {1: [True, False], "k": -12345678901234567890}},
        ]}, 1 + len(json.dumps({1: [True, False], "k": -12345678901234567890}, separators=(",", ":"))), 0),
        ({"role": "assistant", "content": None, "tool_calls": [
            {"id": "c1", "type": "function", "function": {"name": "get", "arguments": '{"id": 7}'}},
            {"id": "c2", "type": "function", "function": {"name": "put", "arguments": ""}},
        ]}, 3 + 9 + 3, 0),
        ({"role": "assistant", "content": "ok", "tool_calls": [
            {"id": "c1", "function": {"name": "get", "arguments": {"id": 7}}},
        ]}, 2 + 3 + len('{"id":7}'), 0),
        ({"role": "tool", "tool_call_id": "c1", "name": "get", "content": "result"}, 6, 0),
        ({"role": "user", "content": "hi", "name": "alice", "id": "m1"}, 2, 0),  # keys count 0
    ],
)
def test_chars_rules(kernel, message, chars, opaque):
    roles, counted, flags, opaque_parts = kernel.measure_messages([message])
    assert counted.tolist() == [chars]
    assert opaque_parts.tolist() == [opaque]
    assert "".join(kernel.message_text_pieces(message)).__len__() == chars


def test_measure_arrays_and_dtypes(kernel):
    msgs = [
        {"role": "system", "content": "s"},
        {"role": "developer", "content": "d"},
        {"role": "user", "content": "u"},
        {"role": "assistant", "content": "a"},
        {"role": "tool", "tool_call_id": "x", "content": "t"},
        {"role": "function", "name": "f", "content": "f"},
        {"role": "critic", "content": "c"},
    ]
    roles, chars, flags, opaque = kernel.measure_messages(msgs)
    assert roles.dtype == np.int8 and chars.dtype == np.int64
    assert flags.dtype == np.uint8 and opaque.dtype == np.int32
    assert roles.tolist() == [1, 2, 3, 4, 5, 6, 0]
    assert chars.tolist() == [1] * 7
    assert flags.tolist() == [0, 0, U, 0, R, R, FLAG_UNKNOWN_ROLE]  # "critic" is no role known


def test_empty_history(kernel):
    roles, chars, flags, opaque = kernel.measure_messages([])
    assert len(roles) == len(chars) == len(flags) == len(opaque) == 0
    offsets, group_chars = kernel.group_offsets(flags, chars)
    assert offsets.tolist() == [0] and group_chars.tolist() == []
    assert kernel.trim_cut(group_chars, 2, 100) == 0


def test_flags_for_tool_traffic(kernel):
    msgs = [
        {"role": "user", "content": "q"},
        {"role": "assistant", "content": None, "tool_calls": [{"id": "a", "function": {"name": "f", "arguments": "{}"}}]},
        {"role": "tool", "tool_call_id": "a", "content": "r"},
        {"role": "assistant", "content": [{"type": "tool_use", "id": "b", "name": "g", "input": {}}]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "b", "content": "r"}]},
        # A tool_result carrier with text after it still belongs to the calling turn.
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "b", "content": "r"},
                                     {"type": "text", "text": "and then?"}]},
        {"role": "user", "content": []},
        {"role": "assistant", "content": "done", "tool_calls": []},
    ]
    flags = kernel.measure_messages(msgs)[2].tolist()
    assert flags == [U, C, R, C, R, R, U, 0]


# ---------------------------------------------------------------------------------------------
# Errors name the fragment and the index, identically in both twins


@pytest.mark.parametrize(
    ("messages", "path", "code"),
    [
        ([{"role": "user", "content": "a"}, "oops"], "fragments[h].messages[1]", "invalid-message"),
        ([{"content": "a"}], "fragments[h].messages[0].role", "invalid-role"),
        ([{"role": 3, "content": "a"}], "fragments[h].messages[0].role", "invalid-role"),
        ([{"role": "user", "content": 5}], "fragments[h].messages[0].content", "invalid-content"),
        ([{"role": "user", "content": [7]}], "fragments[h].messages[0].content[0]", "invalid-content"),
        ([{"role": "user", "content": [{"type": "text", "text": None}]}],
         "fragments[h].messages[0].content[0].text", "invalid-content"),
        ([{"role": "user", "content": [{"type": "tool_result", "content": 3.5}]}],
         "fragments[h].messages[0].content[0].content", "invalid-content"),
        ([{"role": "assistant", "tool_calls": "x"}], "fragments[h].messages[0].tool_calls", "invalid-tool-calls"),
        ([{"role": "assistant", "tool_calls": [1]}], "fragments[h].messages[0].tool_calls[0]", "invalid-tool-calls"),
        ([{"role": "assistant", "tool_calls": [{"function": "f"}]}],
         "fragments[h].messages[0].tool_calls[0].function", "invalid-tool-calls"),
        ([{"role": "assistant", "content": [{"type": "tool_use", "name": "f", "input": {"x": {1, 2}}}]}],
         "fragments[h].messages[0].content[0].input", "invalid-json"),
        ([{"role": "assistant", "tool_calls": [{"function": {"name": "f", "arguments": object()}}]}],
         "fragments[h].messages[0].tool_calls[0].function.arguments", "invalid-json"),
    ],
)
def test_bad_messages_raise_with_path(kernel, messages, path, code):
    with pytest.raises(ContextPlanError) as info:
        kernel.measure_messages(messages, "h")
    err = info.value
    assert [i.path for i in err.issues] == [path]
    assert err.codes == [code]
    assert err.fragment_id == "h"


def test_not_a_list(kernel):
    with pytest.raises(ContextPlanError) as info:
        kernel.measure_messages(({"role": "user"},), "h")
    assert info.value.issues[0].path == "fragments[h].messages"
    assert info.value.codes == ["invalid-messages"]


def test_circular_tool_input_is_too_deep(kernel):
    # A value that contains itself nests without end: past the JSON depth limit.
    loop: dict = {}
    loop["self"] = loop
    msgs = [{"role": "assistant", "content": [{"type": "tool_use", "name": "f", "input": loop}]}]
    with pytest.raises(ContextPlanError) as info:
        kernel.measure_messages(msgs)
    assert info.value.codes == ["too-deep"]
    assert info.value.issues[0].path == "messages[0].content[0].input"


# ---------------------------------------------------------------------------------------------
# Grouping and the trim cut


TURNS = [
    {"role": "assistant", "content": "lead"},                        # 0 lead group
    {"role": "user", "content": "aaaa"},                             # 1 turn 1
    {"role": "assistant", "content": None, "tool_calls": [{"id": "1", "function": {"name": "f", "arguments": "xx"}}]},
    {"role": "tool", "tool_call_id": "1", "content": "yyy"},
    {"role": "assistant", "content": "zz"},
    {"role": "user", "content": "bb"},                               # 5 turn 2
    {"role": "assistant", "content": [{"type": "tool_use", "id": "2", "name": "g", "input": {}}]},
    {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "2", "content": "rr"}]},
    {"role": "assistant", "content": "c"},
    {"role": "user", "content": "dddddd"},                           # 9 turn 3
]


def test_group_user_turns(kernel):
    roles, chars, flags, _ = kernel.measure_messages(TURNS)
    offsets, group_chars = kernel.group_offsets(flags, chars, kernel.GROUP_USER_TURN)
    assert offsets.tolist() == [0, 1, 5, 9, 10]
    assert group_chars.tolist() == [4, 4 + 3 + 3 + 2, 2 + 3 + 2 + 1, 6]
    assert offsets.dtype == np.int64 and group_chars.dtype == np.int64


def test_group_messages_keeps_tool_results_with_calls(kernel):
    roles, chars, flags, _ = kernel.measure_messages(TURNS)
    offsets, group_chars = kernel.group_offsets(flags, chars, kernel.GROUP_MESSAGE)
    assert offsets.tolist() == [0, 1, 2, 4, 5, 6, 8, 9, 10]
    assert int(group_chars.sum()) == int(chars.sum())


def test_group_offsets_rejects_bad_input(kernel):
    with pytest.raises(ValueError, match="differ in length"):
        kernel.group_offsets(np.zeros(3, np.uint8), np.zeros(2, np.int64))
    with pytest.raises(ValueError, match="unknown grouping"):
        kernel.group_offsets(np.zeros(3, np.uint8), np.zeros(3, np.int64), 7)


@pytest.mark.parametrize(
    ("group_chars", "keep", "target", "first"),
    [
        ([4, 12, 8, 6], 0, 100, 0),   # everything fits
        ([4, 12, 8, 6], 0, 14, 2),    # 8 + 6 = 14 fits exactly
        ([4, 12, 8, 6], 0, 13, 3),
        ([4, 12, 8, 6], 0, 5, 4),     # not even the newest group fits: all dropped
        ([4, 12, 8, 6], 2, 5, 2),     # the floor keeps two groups
        ([4, 12, 8, 6], 9, 5, 0),     # a floor above the group count keeps all
        ([4, 12, 8, 6], 1, 26, 1),
        ([0, 0, 5], 0, 0, 3),         # the suffix stops at the first group that does not fit
        ([5, 0, 0], 0, 0, 1),
        ([], 3, 0, 0),
    ],
)
def test_trim_cut(kernel, group_chars, keep, target, first):
    assert kernel.trim_cut(np.array(group_chars, dtype=np.int64), keep, target) == first


def test_trim_cut_rejects_negative(kernel):
    with pytest.raises(ValueError):
        kernel.trim_cut(np.array([1], dtype=np.int64), -1, 5)


# ---------------------------------------------------------------------------------------------
# Tool pairing


def test_tool_pairing(kernel):
    msgs = [
        {"role": "tool", "tool_call_id": "early", "content": "orphan"},                  # 0
        {"role": "assistant", "tool_calls": [{"id": "a", "function": {"name": "f"}},
                                             {"id": "b", "function": {"name": "f"}}]},   # 1
        {"role": "tool", "tool_call_id": "a", "content": "ok"},                         # 2
        {"role": "assistant", "content": [{"type": "tool_use", "id": "u", "name": "g", "input": {}}]},  # 3
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "u"},
                                     {"type": "tool_result", "tool_use_id": "zz"}]},    # 4
        {"role": "tool", "content": "no id"},                                           # 5
        {"role": "tool", "tool_call_id": "a", "content": "second answer"},               # 6: not orphan
    ]
    flags = kernel.measure_messages(msgs)[2]
    assert kernel.tool_pairing(msgs, flags) == [
        (0, "orphan-tool-result", "early"),
        (1, "unanswered-tool-call", "b"),
        (4, "orphan-tool-result", "zz"),
        (5, "orphan-tool-result", None),
    ]


def test_tool_pairing_reused_id_needs_its_own_result(kernel):
    call = {"role": "assistant", "tool_calls": [{"id": "x", "function": {"name": "f"}}]}
    msgs = [call, {"role": "tool", "tool_call_id": "x", "content": ""}, call]
    assert kernel.tool_pairing(msgs, kernel.measure_messages(msgs)[2]) == [
        (2, "unanswered-tool-call", "x")
    ]


def test_tool_pairing_clean_history(kernel):
    msgs = TURNS[1:]
    assert kernel.tool_pairing(msgs, kernel.measure_messages(msgs)[2]) == []


# ---------------------------------------------------------------------------------------------
# Columnar path


def _arrow_strings(strings, dtype):
    data = b"".join(s.encode("utf-8", "surrogatepass") for s in strings)
    offsets = np.zeros(len(strings) + 1, dtype=dtype)
    np.cumsum([len(s.encode("utf-8", "surrogatepass")) for s in strings], out=offsets[1:])
    return data, offsets


@pytest.mark.parametrize("dtype", [np.int32, np.int64])
def test_utf8_lengths(kernel, dtype):
    strings = ["", "a", "hello world, this is longer than eight", "é", "订单状态", "😀👍🏽",
               "mixed ascii 和 中文 and 😀 emoji" * 3, "x" * 1000 + "é"]
    data, offsets = _arrow_strings(strings, dtype)
    assert kernel.utf8_lengths(data, offsets).tolist() == [len(s) for s in strings]


def test_utf8_lengths_reads_an_arrow_array(kernel):
    import pyarrow as pa  # a test extra: never skipped
    arr = pa.array(["alpha", None, "βγ", "😀"] * 50)
    offsets = np.frombuffer(arr.buffers()[1], dtype=np.int32)[: len(arr) + 1]
    counts = kernel.utf8_lengths(arr.buffers()[2], offsets)
    assert counts.tolist() == [5, 0, 2, 1] * 50


@pytest.mark.parametrize(
    ("raw", "row", "byte"),
    [
        (b"\xff", 0, 0),
        (b"ab\xc3", 0, 2),            # truncated two-byte sequence
        (b"\xc0\xaf", 0, 0),          # overlong
        (b"\xed\xa0\x80", 0, 0),      # UTF-16 surrogate
        (b"\xf4\x90\x80\x80", 0, 0),  # above U+10FFFF
        (b"abcdefgh\xe4\xb8", 0, 8),  # truncated after an ASCII block
        (b"\xe4\xb8\xadX", 0, 0),     # bad continuation
    ],
)
def test_utf8_lengths_rejects_invalid(kernel, raw, row, byte):
    if raw == b"\xe4\xb8\xadX":
        raw = b"\xe4\x41\xad"
    data = b"ok" + raw
    offsets = np.array([0, 2, len(data)], dtype=np.int64)
    with pytest.raises(ValueError, match=f"invalid UTF-8 in string {row + 1} at byte {byte + 2}"):
        kernel.utf8_lengths(data, offsets)


@pytest.mark.parametrize(
    "offsets",
    [np.array([0, 5, 3], dtype=np.int64), np.array([0, 99], dtype=np.int64), np.array([], dtype=np.int64)],
)
def test_utf8_lengths_rejects_bad_offsets(kernel, offsets):
    with pytest.raises(ValueError, match="offsets"):
        kernel.utf8_lengths(b"hello", offsets)


def test_utf8_lengths_rejects_float_offsets(kernel):
    with pytest.raises(TypeError, match="int32 or int64"):
        kernel.utf8_lengths(b"hello", np.array([0.0, 5.0]))


def test_role_codes_utf8(kernel):
    roles = ["system", "developer", "user", "assistant", "tool", "function", "", "users", "Tool"]
    data, offsets = _arrow_strings(roles, np.int32)
    assert kernel.role_codes_utf8(data, offsets).tolist() == [1, 2, 3, 4, 5, 6, 0, 0, 0]


def test_trim_cut_many_matches_the_object_path(kernel):
    conversations = [TURNS, TURNS[1:], [], TURNS[:1], TURNS[5:]]
    flat = [m for conv in conversations for m in conv]
    _, chars, flags, _ = kernel.measure_messages(flat)
    list_offsets = np.cumsum([0] + [len(c) for c in conversations]).astype(np.int32)
    for keep, target in [(0, 0), (0, 10), (1, 10), (2, 0), (0, 1000), (5, 3)]:
        first, before, after, kept = kernel.trim_cut_many(list_offsets, flags, chars, keep, target)
        for r, conv in enumerate(conversations):
            _, c, f, _ = kernel.measure_messages(conv)
            offsets, group_chars = kernel.group_offsets(f, c)
            g = kernel.trim_cut(group_chars, keep, target)
            assert first[r] == list_offsets[r] + offsets[g]
            assert before[r] == len(group_chars)
            assert after[r] == len(group_chars) - g
            assert kept[r] == int(group_chars[g:].sum())


def test_trim_cut_many_message_grouping(kernel):
    _, chars, flags, _ = kernel.measure_messages(TURNS)
    first, before, after, kept = kernel.trim_cut_many(
        np.array([0, len(TURNS)]), flags, chars, 0, 9, kernel.GROUP_MESSAGE
    )
    # Message groups from the end: [9] 6, [8] 1, [6,7] 2+... -> 6+1 = 7 fits, next group (msgs
    # 6-7: tool_use "g" + "{}" = 3, tool result 2) would make 12.
    assert first.tolist() == [8] and after.tolist() == [2] and kept.tolist() == [7]
    assert before.tolist() == [8]


# Strings long enough for the vector path, with every lead/continuation byte pair at a block
# boundary (the 32-byte step straddles offset 32 here, the 128-byte ASCII step offset 128).
# Second bytes: every continuation byte, and both edges of every other byte class.
SECOND_BYTES = [*range(0x80, 0xC0), 0x00, 0x41, 0x7F, 0xC0, 0xC2, 0xDF, 0xE0, 0xED, 0xEF, 0xF0,
                0xF4, 0xF5, 0xFF]


@pytest.mark.parametrize("where", [0, 30, 31, 32, 63, 126, 127, 128, 159, 255])
def test_utf8_lengths_every_byte_pair_at_block_boundaries(kernel, where):
    tails = [b"", b"\x80", b"\xbf", b"A", b"\x80\x80"]
    mismatches = []
    for b1 in (0x80, 0x9F, 0xA0, 0xBF, *range(0xC0, 0x100)):
        for b2 in SECOND_BYTES:
            for tail in tails:
                raw = b"a" * where + bytes((b1, b2)) + tail
                raw += b"b" * max(0, max(70, where + 160) - len(raw))
                data = b"xx" + raw
                offsets = np.array([0, 2, len(data)], dtype=np.int64)
                try:
                    expected = len(raw.decode("utf-8"))
                except UnicodeDecodeError as exc:
                    expected = ("error", 2 + exc.start)
                try:
                    got = int(kernel.utf8_lengths(data, offsets)[1])
                except ValueError as exc:
                    got = ("error", int(str(exc).rsplit(" ", 1)[1]))
                if got != expected:
                    mismatches.append((raw, got, expected))
    assert mismatches[:5] == []


def test_utf8_lengths_of_long_mixed_text(kernel):
    # Megabytes of every width, ASCII runs long and short between them: the vector path's
    # counts add up over many blocks.
    unit = "".join(["订单 😀 é" * 50, "a" * 300, "ß" * 7, "x" * 129])
    strings = ["é", unit * 400, "a" * 5 + unit * 3, unit[:77] * 1000]
    encoded = [s.encode() for s in strings]
    offsets = np.cumsum([0] + [len(e) for e in encoded]).astype(np.int64)
    got = kernel.utf8_lengths(b"".join(encoded), offsets).tolist()
    assert got == [len(s) for s in strings]


@pytest.mark.parametrize("length", [31, 32, 33, 63, 64, 65, 95, 96, 97, 127, 128, 129, 200,
                                    255, 256, 257])
@pytest.mark.parametrize("char", ["é", "订", "😀"])
def test_utf8_lengths_truncated_at_the_end_of_long_strings(kernel, length, char):
    encoded = ("a" * length + char).encode()
    for cut in range(1, len(char.encode())):
        data = encoded[:-cut]
        with pytest.raises(ValueError, match=f"at byte {length}$"):
            kernel.utf8_lengths(data, np.array([0, len(data)], dtype=np.int64))
    assert kernel.utf8_lengths(encoded, np.array([0, len(encoded)]))[0] == length + 1
