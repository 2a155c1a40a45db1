"""The compiled kernel and the twin agree on every output and every error (hypothesis)."""

from __future__ import annotations

import itertools
import json
import sys
from itertools import pairwise
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from contextpolicy._tables import (
    FLAG_GLUES_NEXT,
    FLAG_OPENS_TURN,
    FLAG_TOOL_CALLS,
    FLAG_TOOL_RESULT,
    MAX_JSON_DEPTH,
    ROLE_NAMES,
)
from contextpolicy.errors import ContextPlanError
from tests.support.lines import MISSED_REASONS, expected_missed
from tests.support.strategies import bad_message, histories, json_value, message, text

# Every test here compares the kernels: with only the twin present they are skipped.
pytestmark = [pytest.mark.filterwarnings("ignore::DeprecationWarning"),
              pytest.mark.usefixtures("two_kernels")]

SETTINGS = settings(
    max_examples=150, deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)


@SETTINGS
@given(histories(allow_bad=True), st.sampled_from([None, "history", "f"]))
def test_measure_agrees(differential, history, fragment_id):
    try:
        differential("measure_messages", history, fragment_id)
    except ContextPlanError:  # the same error from both, which is what is asserted
        pass


@SETTINGS
@given(message | bad_message, st.integers(0, 99))
def test_text_pieces_agree(differential, msg, index):
    try:
        pieces = differential("message_text_pieces", msg, index, "h")
    except ContextPlanError:
        return
    chars = differential("measure_messages", [msg])[1]
    assert sum(len(p) for p in pieces) == int(chars[0])


@SETTINGS
@given(histories(), st.integers(0, 8), st.integers(0, 50_000))
def test_group_and_cut_agree(differential, history, keep, target):
    roles, chars, flags, opaque = differential("measure_messages", history)
    for grouping in (0, 1):
        offsets, group_chars = differential("group_offsets", flags, chars, grouping)
        assert int(group_chars.sum()) == int(chars.sum())
        first = differential("trim_cut", group_chars, keep, target)
        kept = int(group_chars[first:].sum())
        assert kept <= target or len(group_chars) - first <= keep
        many = differential(
            "trim_cut_many", np.array([0, len(history)]), flags, chars, keep, target, grouping
        )
        assert many[0].tolist() == [int(offsets[first])]
        assert many[3].tolist() == [kept]


@SETTINGS
@given(histories())
def test_tool_pairing_agrees(differential, history):
    flags = differential("measure_messages", history)[2]
    differential("tool_pairing", history, flags)


@SETTINGS
@given(st.lists(histories(), max_size=6), st.integers(0, 4), st.integers(0, 5_000))
def test_trim_cut_many_agrees(differential, conversations, keep, target):
    flat = [m for conv in conversations for m in conv]
    _, chars, flags, _ = differential("measure_messages", flat)
    offsets = np.cumsum([0] + [len(c) for c in conversations]).astype(np.int64)
    differential("trim_cut_many", offsets, flags, chars, keep, target)


@SETTINGS
@given(st.lists(text, max_size=40), st.sampled_from([np.int32, np.int64]))
def test_utf8_lengths_agree(differential, strings, dtype):
    encoded = [s.encode("utf-8", "surrogatepass") for s in strings]
    data = b"".join(encoded)
    offsets = np.cumsum([0] + [len(e) for e in encoded]).astype(dtype)
    try:
        counts = differential("utf8_lengths", data, offsets)
    except ValueError:
        # Lone surrogates encode to invalid UTF-8: both twins refuse them alike.
        assert any("\ud800" <= ch <= "\udfff" for s in strings for ch in s)
        return
    assert counts.tolist() == [len(s) for s in strings]


@SETTINGS
@given(st.binary(max_size=200), st.lists(st.integers(0, 200), max_size=10))
def test_utf8_lengths_agree_on_arbitrary_bytes(differential, data, cuts):
    offsets = np.array(sorted({0, len(data), *[c for c in cuts if c <= len(data)]}), dtype=np.int64)
    try:
        counts = differential("utf8_lengths", data, offsets)
    except ValueError:
        return
    for r in range(len(offsets) - 1):
        assert counts[r] == len(data[offsets[r]:offsets[r + 1]].decode("utf-8"))


# Bytes of strings: mostly UTF-8 (ASCII runs long enough for the kernel's blocks, multi-byte
# characters, sequences that are not UTF-8), cut anywhere (inside a character too).
utf8_pieces = st.lists(st.sampled_from([
    b"a" * 40, b"hello", "é".encode(), "😀".encode(), "€".encode(), b"\xff", b"\xc3(",
    b"\xed\xa0\x80", b"\xf4\x90\x80\x80", b"\xe2\x82", b"\x80", b""]), max_size=30)


@SETTINGS
@given(utf8_pieces, st.lists(st.integers(0, 2000), max_size=12), st.data())
def test_utf8_validate_agrees_and_checks_every_string_not_null(differential, pieces, cuts,
                                                                data):
    buf = b"".join(pieces)
    offsets = np.array(sorted({0, len(buf), *[c for c in cuts if c <= len(buf)]}),
                       dtype=data.draw(st.sampled_from([np.int32, np.int64])))
    n = len(offsets) - 1
    nulls = data.draw(st.none() | st.lists(st.booleans(), min_size=n, max_size=n).map(
        lambda v: np.array(v, dtype=bool)))
    strings = [buf[offsets[r]:offsets[r + 1]] for r in range(n)]

    def valid(raw: bytes) -> bool:
        try:
            raw.decode("utf-8")
        except UnicodeDecodeError:
            return False
        return True

    at_fault = [r for r in range(n) if not (nulls is not None and nulls[r])
                and not valid(strings[r])]
    try:
        differential("utf8_validate", buf, offsets, nulls)
    except ValueError as exc:
        assert at_fault and exc.index == at_fault[0]
        raw = strings[exc.index]
        with pytest.raises(UnicodeDecodeError) as decoded:
            raw.decode("utf-8")
        assert exc.byte == int(offsets[exc.index]) + decoded.value.start
        return
    assert not at_fault


@SETTINGS
@given(st.lists(st.sampled_from([*ROLE_NAMES, "User", "toolx", ""]) | text, max_size=30))
def test_role_codes_agree(differential, roles):
    encoded = [r.encode("utf-8", "surrogatepass") for r in roles]
    offsets = np.cumsum([0] + [len(e) for e in encoded]).astype(np.int32)
    differential("role_codes_utf8", b"".join(encoded), offsets)


long_text = st.lists(
    st.sampled_from(["a", "hello ", "é", "订单", "😀", "\x00", "\x7f", "ß" * 3, "z" * 40]),
    max_size=120,
).map("".join)


@SETTINGS
@given(long_text, st.lists(st.integers(0, 2000), max_size=8))
def test_utf8_lengths_agree_on_strings_cut_anywhere_in_a_buffer(differential, text, cuts):
    # Long text cut at any byte, inside a sequence too: each string ends where the buffer goes
    # on, so its last block is read in place with the bytes after it masked off. The string
    # that ends in a sequence the next one finishes is invalid, as Python says.
    data = (text * 3).encode()
    bounds = sorted({0, len(data), *[c for c in cuts if c <= len(data)]})
    offsets = np.array(bounds, dtype=np.int64)
    pieces = [data[a:b] for a, b in pairwise(bounds)]
    try:
        counts = differential("utf8_lengths", data, offsets)
    except ValueError as exc:
        row = int(str(exc).split("string ")[1].split(" ")[0])
        with pytest.raises(UnicodeDecodeError):
            pieces[row].decode("utf-8")
        assert all(len(p.decode("utf-8")) >= 0 for p in pieces[:row])
        return
    assert counts.tolist() == [len(p.decode("utf-8")) for p in pieces]


@SETTINGS
@given(st.lists(long_text, max_size=12), st.data())
def test_utf8_lengths_agree_on_long_strings(differential, strings, data):
    encoded = [s.encode() for s in strings]
    if encoded and data.draw(st.booleans()):
        # Corrupt one byte somewhere: both twins must name the same string and byte.
        r = data.draw(st.integers(0, len(encoded) - 1))
        if encoded[r]:
            pos = data.draw(st.integers(0, len(encoded[r]) - 1))
            value = data.draw(st.integers(0x80, 0xFF))
            encoded[r] = encoded[r][:pos] + bytes([value]) + encoded[r][pos + 1:]
    offsets = np.cumsum([0] + [len(e) for e in encoded]).astype(np.int64)
    try:
        counts = differential("utf8_lengths", b"".join(encoded), offsets)
    except ValueError as exc:
        row = int(str(exc).split("string ")[1].split(" ")[0])
        with pytest.raises(UnicodeDecodeError):
            encoded[row].decode("utf-8")
        return
    assert counts.tolist() == [len(e.decode("utf-8")) for e in encoded]


def _measured(k, history, keep, target, start):
    # What a Measure gives: figures, arrays, cuts, tails and pairing.
    m = k.measure(history, "h")
    out = [m.chars, m.messages, m.opaque_parts, m.tool_traffic, m.arrays()]
    for grouping in (0, 1):
        out += [m.groups(grouping), m.cut(history, grouping, keep, target),
                m.cut(history, grouping, keep, None)]
    start = min(start, m.messages)
    tail = m.tail(start)
    out += [tail.chars, tail.messages, tail.opaque_parts, tail.tool_traffic, tail.arrays(),
            m.pairing(history, start)]
    # A range: the measure of messages[start:stop], as if measured alone.
    stop = start + (m.messages - start) // 2
    part = m.tail(start, stop)
    alone = k.measure(history[start:stop], "h")
    assert [part.chars, part.messages, part.opaque_parts, part.tool_traffic] == [
        alone.chars, alone.messages, alone.opaque_parts, alone.tool_traffic]
    assert all((a == b).all() for a, b in zip(part.arrays(), alone.arrays(), strict=True))
    out += [part.chars, part.messages, part.arrays(),
            part.cut(history[start:stop], 0, keep, target)]
    return out


@SETTINGS
@given(histories(allow_bad=True), st.integers(0, 6), st.integers(0, 20_000), st.integers(0, 30))
def test_measure_objects_agree(differential, history, keep, target, start):
    try:
        out = differential(_measured, history, keep, target, start)
    except ContextPlanError:
        return
    # The same figures as the array path.
    roles, chars, flags, opaque = differential("measure_messages", history, "h")
    assert out[:3] == [int(chars.sum()), len(chars), int(opaque.sum())]
    for grouping, cut in ((0, out[6]), (1, out[9])):
        offsets, group_chars = differential("group_offsets", flags, chars, grouping)
        assert cut[2] == len(group_chars) and cut[1] == int(offsets[cut[0]])
        # Never an orphaned result that the uncut history had answered.
        kept = history[cut[1]:]
        orphans = {cid for _, code, cid in differential("tool_pairing", kept, flags[cut[1]:])
                   if code == "orphan-tool-result"}
        before = {cid for _, code, cid in differential("tool_pairing", history, flags)
                  if code == "orphan-tool-result"}
        assert orphans <= before | {None}


def _split(k, history):
    return k.split_transcript(history)


@SETTINGS
@given(histories(allow_bad=True) | st.lists(st.sampled_from(
    [{"role": "system", "content": "s"}, {"role": "developer", "content": "d"},
     {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "a", "content": "r"}]},
     {"role": "user", "content": "q"}, {"role": 3}, "x"]), max_size=6))
def test_transcript_split_agrees_with_from_messages(differential, history):
    from contextpolicy import ContextPlan

    try:
        head, tail = differential("split_transcript", history)
    except ContextPlanError:
        return
    plan = ContextPlan.from_messages(history)
    sizes = {f.id: len(f.messages) for f in plan.fragments}
    assert (sizes.get("system", 0), sizes.get("system", 0) + sizes.get("history", 0)) == (
        head, tail)


@SETTINGS
@given(histories(allow_bad=True), st.lists(st.tuples(
    st.sampled_from([0, 1]), st.integers(0, 5), st.integers(0, 8_000)), max_size=3),
    st.integers(-1, 6_000), st.integers(-1, 6_000))
def test_one_call_reductions_agree(differential, history, trims, trigger, watermark):
    from contextpolicy import PROTECTED_KINDS, ContextPlan, Fragment

    steps = tuple(("history", g, keep, target) for g, keep, target in trims)
    system = [{"role": "system", "content": "rules"}]
    transcript = [*system, *history, {"role": "user", "content": "question?"}]
    try:
        raw = differential("reduce_transcript", transcript, steps, trigger, watermark)
    except ContextPlanError:
        return
    plan = ContextPlan.from_messages(transcript)
    # A transcript without a history skips the steps on it, as a plan without one does.
    assert differential("reduce_plan", plan.fragments, steps, trigger, watermark) == raw
    checked = differential("reduce_plan", plan.fragments, steps, trigger, watermark,
                           Fragment, PROTECTED_KINDS)
    assert checked == raw
    if not any(f.id == "history" for f in plan.fragments):
        assert all((d.status, d.reason) in (
            ("skipped", "fragment-absent"), ("skipped", "not-triggered"),
            ("skipped", "target-reached")) for d in raw.steps)
    # A step on a protected fragment, or one the plan lacks (but the history), is declined.
    for fid in ("system", "question", "nowhere"):
        assert differential("reduce_plan", plan.fragments, (*steps, (fid, 0, 0, 0)), trigger,
                            watermark, Fragment, PROTECTED_KINDS) is None
    assert (raw.chars_before, raw.messages_before, raw.opaque_before) == tuple(
        sum(f[k] for f in raw.before) for k in range(3))
    assert (raw.chars_after, raw.messages_after, raw.opaque_after) == tuple(
        sum(f[k] for f in raw.after) for k in range(3))
    applied = [d for d in raw.steps if d.status == "applied"]
    assert raw.messages_removed == sum(d.messages_removed for d in applied)
    assert raw.groups_removed == sum(d.groups_before - d.groups_after for d in applied)
    assert raw.watermark_met == (watermark < 0 or raw.chars_after <= watermark)
    assert len(raw.steps) == len(steps)
    # The assembled input is the fragments as they ended, and its measure is the figures.
    roles, chars, flags, opaque = differential("measure_messages", raw.input)
    assert (int(chars.sum()), len(chars), int(opaque.sum())) == (
        raw.chars_after, raw.messages_after, raw.opaque_after)


# ---------------------------------------------------------------------------------------------
# reduce_rows: many transcripts as arrays


@st.composite
def row_arrays(draw):
    """Arrays as reduce_rows takes them: roles, flags and chars per message, call and result
    codes from a small id space (so that calls, results and orphans meet), a few rows."""
    from contextpolicy._tables import ROLE_TOOL, ROLE_USER

    rows = draw(st.lists(st.integers(0, 12), min_size=0, max_size=6))
    m = sum(rows)
    roles = draw(st.lists(st.integers(0, len(ROLE_NAMES) - 1), min_size=m, max_size=m))
    ncodes = draw(st.integers(0, 4))
    chars, flags, calls, results, call_offsets, result_offsets = [], [], [], [], [0], [0]
    for r in roles:
        chars.append(draw(st.integers(0, 300)))
        f = FLAG_OPENS_TURN if r == ROLE_USER else 0
        if r == ROLE_TOOL or draw(st.integers(0, 3)) == 0:
            f |= FLAG_TOOL_RESULT
        if draw(st.integers(0, 4)) == 0:  # a reasoning item: glued to the message after it
            f |= FLAG_GLUES_NEXT
        mine = draw(st.lists(st.integers(-1, ncodes - 1), max_size=2)) if ncodes else []
        if mine:
            f |= FLAG_TOOL_CALLS
        calls += mine
        call_offsets.append(len(calls))
        answers = draw(st.lists(st.integers(-1, ncodes - 1), max_size=2)) if (
            f & FLAG_TOOL_RESULT) else []
        results += answers
        result_offsets.append(len(results))
        flags.append(f)
    offsets = np.concatenate([[0], np.cumsum(rows)]).astype(np.int64)
    steps = tuple(draw(st.lists(st.tuples(st.sampled_from([0, 1]), st.integers(0, 3),
                                          st.integers(0, 900)), max_size=2)))
    trigger = draw(st.integers(-1, 900))
    watermark = draw(st.integers(-1, 900))
    skip = draw(st.none() | st.lists(st.booleans(), min_size=len(rows), max_size=len(rows)))
    return (offsets, np.array(roles, dtype=np.int8), np.array(flags, dtype=np.uint8),
            np.array(chars, dtype=np.int64), np.array(call_offsets, dtype=np.int64),
            np.array(calls, dtype=np.int64), np.array(result_offsets, dtype=np.int64),
            np.array(results, dtype=np.int64), ncodes, steps,
            trigger, watermark, None if skip is None else np.array(skip, dtype=np.uint8))


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(row_arrays())
def test_reduce_rows_agrees(differential, args):
    head, cut, tail, before, after, groups, fired, missed, warn = differential(
        "reduce_rows", *args)
    offsets, watermark, skip = args[0], args[11], args[-1]
    done = np.ones(len(head), dtype=bool) if skip is None else skip == 0
    assert bool(np.all(((offsets[:-1] <= head) & (head <= cut) & (cut <= tail)
                        & (tail <= offsets[1:]))[done]))
    assert bool(np.all((after <= before)[done]))
    assert not np.any(np.concatenate([head, cut, tail, before, after])[np.tile(~done, 5)])
    # A reason exactly where a row triggered and missed its target: never a failed step.
    missing = done & (fired != 0) & (watermark >= 0) & (after > watermark)
    assert missed.dtype == np.uint8 and np.array_equal(missed != 0, missing)
    assert not np.any(missed == 2) and np.all(missed <= 4)


def test_reduce_rows_rejects_what_it_cannot_read(differential):
    ok = (np.array([0, 2]), np.array([3, 4], dtype=np.int8), np.array([1, 0], dtype=np.uint8),
          np.array([5, 5]), np.array([0, 0, 0]), np.array([], dtype=np.int64),
          np.array([0, 0, 0]), np.array([], dtype=np.int64), 0, ((0, 0, 0),), 1, 1)
    assert differential("reduce_rows", *ok).cut.tolist() == [2]  # the whole history cut
    bad = {
        0: np.array([0, 3]),  # offsets past the messages
        3: np.array([5, -1]),  # negative chars
        4: np.array([0, 1, 0]),  # decreasing call offsets
        6: np.array([0, 1, 1]),  # result offsets past the codes
        9: ((5, 0, 0),),  # an unknown grouping
    }
    for at, value in bad.items():
        args = list(ok)
        args[at] = value
        with pytest.raises(ValueError):
            differential("reduce_rows", *args)
    with pytest.raises(ValueError):
        differential("reduce_rows", *ok[:9], ((0, -1, 0),), 1, 1)
    with pytest.raises(ValueError):
        differential("reduce_rows", *ok, np.array([1, 0, 1], dtype=np.uint8))
    with pytest.raises(ValueError):
        differential("reduce_rows", *ok[:8], -1, *ok[9:])
    with pytest.raises(ValueError):  # a result code outside the dictionary
        differential("reduce_rows", *ok[:6], np.array([0, 1, 1]), np.array([3]), 1, *ok[9:])
    # A dictionary said to be vast costs nothing: the state covers the codes in use.
    assert differential("reduce_rows", *ok[:8], 1 << 62, *ok[9:]).cut.tolist() == [2]


@pytest.mark.c_extension
def test_compiled_reduce_rows_never_wraps_a_size():
    # Codes near the top of int64 (a state array of 3 x code entries would wrap to a few
    # bytes): the compiled kernel allocates what the codes need or fails to, never wraps.
    from contextpolicy import _kernel_c

    code = 6148914691236517206
    args = (np.array([0, 2, 4]), np.array([3, 4, 3, 4], dtype=np.int8),
            np.array([1, 4, 1, 2], dtype=np.uint8), np.array([10, 20, 30, 40]),
            np.array([0, 0, 1, 1, 1]), np.array([code]), np.array([0, 0, 0, 0, 1]),
            np.array([code]), 2**63 - 1, ((0, 0, 30),), 50, 40)
    with pytest.raises((MemoryError, ValueError)):
        _kernel_c.reduce_rows(*args)


def test_reduce_rows_never_trusts_sizes(differential):
    # Chars that add up past 64 bits: an error on both, not a wrapped total.
    with pytest.raises(ValueError, match="64 bits"):
        differential("reduce_rows", np.array([0, 4]), np.zeros(4, dtype=np.int8),
                     np.zeros(4, dtype=np.uint8), np.array([2**62] * 4), np.zeros(5, np.int64),
                     np.array([], dtype=np.int64), np.zeros(5, np.int64),
                     np.array([], dtype=np.int64), 0, (), 1, 1)
    # The same conversions on both: a float skip flag, unsigned chars, steps as a list.
    base = (np.array([0, 1, 2]), np.array([3, 3], dtype=np.int8),
            np.array([1, 1], dtype=np.uint8), np.array([5, 5]), np.zeros(3, np.int64),
            np.array([], dtype=np.int64), np.zeros(3, np.int64), np.array([], dtype=np.int64),
            0, ((0, 0, 0),), 1, 1)
    assert differential("reduce_rows", *base, np.array([0.5, 0])).chars_before.tolist() == [5, 5]
    with pytest.raises(ValueError):
        differential("reduce_rows", *base[:3], np.array([2**64 - 1, 0], dtype=np.uint64),
                     *base[4:])
    with pytest.raises(TypeError):
        differential("reduce_rows", *base[:9], [(0, 0, 0)], 1, 1)
    with pytest.raises(OverflowError):
        differential("reduce_rows", *base[:9], ((0, 0, 2**63),), 1, 1)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(message, max_size=30) | st.lists(message | bad_message, max_size=10))
def test_text_pieces_of_a_list_are_each_message_s_pieces(differential, messages):
    # One pass for a fragment, the same pieces as message by message, the same errors.
    try:
        pieces, ends = differential("text_pieces", messages, "h")
    except ContextPlanError:  # the same error from both, which is what is asserted
        return
    start = 0
    for i, end in enumerate(ends):
        assert pieces[start:end] == differential("message_text_pieces", messages[i], i, "h")
        start = end
    assert len(ends) == len(messages) and end_of(ends) == len(pieces)


def end_of(ends: list[int]) -> int:
    return ends[-1] if ends else 0


# ---------------------------------------------------------------------------------------------
# The compiled kernel's compact JSON writer, against both twins and json.dumps itself

def compact_json(value):
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)


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


def _argument_pieces(value):
    # A call's arguments (or input): a str as it is, anything else as its compact JSON.
    if value is None:
        return []
    return [value] if isinstance(value, str) else [compact_json(value)]


def json_places(value, name):
    """Every place a JSON value is counted, and the pieces it must give there."""
    return [
        ({"role": "assistant", "content": [{"type": "tool_use", "id": "t", "name": name,
                                             "input": value}]}, [name, compact_json(value)]),
        ({"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t", "content": [
            {"type": "text", "text": name}, {"type": "tool_use", "id": "u", "name": "",
                                             "input": value}]}]}, [name, "", compact_json(value)]),
        ({"type": "function_call", "call_id": "c", "name": name, "arguments": value},
         [name, *_argument_pieces(value)]),
        ({"type": "custom_tool_call", "call_id": "c", "name": name, "input": value},
         [name, *_argument_pieces(value)]),
        ({"type": "function_call_output", "call_id": "c", "output": [
            {"type": "tool_use", "id": "t", "name": name, "input": value}]},
         [name, compact_json(value)]),
        ({"type": "reasoning", "summary": [{"type": "tool_use", "name": name, "input": value}]},
         [name, compact_json(value)]),
        ({"role": "assistant", "tool_calls": [{"id": "c", "function": {
            "name": name, "arguments": value}}]}, [name, *_argument_pieces(value)]),
    ]


@settings(max_examples=300, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(native_json | json_value, text)
def test_compact_json_is_json_dumps_on_both_kernels(differential, value, name):
    try:
        compact_json(value)
    except (TypeError, ValueError):  # (an int past Python's str limit): an error on both
        for message, _ in json_places(value, name):
            with pytest.raises(ContextPlanError) as caught:
                differential("message_text_pieces", message, 0, "h")
            assert caught.value.codes == ["invalid-json"]
        return
    places = json_places(value, name)
    for message, expected in places:
        pieces = differential("message_text_pieces", message, 3, "h")
        assert pieces == expected
        assert all(type(p) is str for p in pieces)
        # Counting alone (no pieces) gives the chars of the pieces.
        chars = differential("measure_messages", [message], "h")[1]
        assert int(chars[0]) == sum(map(len, expected))
    # The one-pass form over a fragment: the same pieces, message after message.
    pieces, ends = differential("text_pieces", [m for m, _ in places], "h")
    assert pieces == [p for _, expected in places for p in expected]
    assert ends == list(itertools.accumulate(len(e) for _, e in places))


@pytest.mark.parametrize("depth", [*range(28, 38), 62, 63, 64, 65, MAX_JSON_DEPTH - 2,
                                   MAX_JSON_DEPTH - 1])  # (a tuple leaf is one level more)
@pytest.mark.parametrize("leaf", ["é", "😀", 2**63 - 1, -(2**63), 2**64, None, ("\ud800", 1.5),
                                  float("-inf")])
def test_compact_json_across_the_writers_depths(differential, depth, leaf):
    # The native writer keeps its first frames on the C stack and the others on the heap, and
    # hands a value it does not write (an int past 64 bits) to the twin's writer: the same text
    # every way, with the widest character at the bottom.
    value = leaf
    for level in range(depth):
        value = [value, "a"] if level % 2 else {"k": value, "😀" if level == 5 else "x": 1}
    pieces = differential("message_text_pieces", {"role": "assistant", "content": [
        {"type": "tool_use", "id": "t", "name": "f", "input": value}]})
    assert pieces == ["f", deep_compact_json(value)]


def deep_compact_json(value):
    # json.dumps of a value deeper than the interpreter's default stack lets it go.
    limit = sys.getrecursionlimit()
    sys.setrecursionlimit(limit + 4 * MAX_JSON_DEPTH)
    try:
        return compact_json(value)
    finally:
        sys.setrecursionlimit(limit)


class SubStr(str):
    def __eq__(self, other):  # never consulted: a value is read by its real storage
        return False

    __hash__ = str.__hash__


class SubInt(int):
    def __repr__(self):
        return "lie"


class SubFloat(float):
    def __repr__(self):
        return "lie"


class SubList(list):
    def __iter__(self):
        return iter(())


class SubTuple(tuple):
    def __len__(self):
        return 0


class SubDict(dict):
    """A dict subclass: json.dumps reads it through items()."""


any_keys = edge_text | edge_ints | edge_floats | st.booleans() | st.none() | edge_text.map(SubStr)
any_json = st.recursive(
    st.none() | st.booleans() | edge_ints | edge_floats | edge_text | edge_text.map(SubStr)
    | edge_ints.map(SubInt) | edge_floats.map(SubFloat) | st.just({1, 2}),
    lambda inner: st.lists(inner, max_size=4) | st.lists(inner, max_size=3).map(tuple)
    | st.lists(inner, max_size=3).map(SubList) | st.lists(inner, max_size=3).map(SubTuple)
    | st.dictionaries(any_keys, inner, max_size=4)
    | st.dictionaries(any_keys, inner, max_size=3).map(SubDict),
    max_leaves=24,
)


@settings(max_examples=400, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(any_json)
def test_compact_json_of_any_value_is_json_dumps_on_both_kernels(differential, value):
    # Subclasses, keys that are numbers or constants, floats JSON has no number for, and values
    # JSON cannot hold (an error naming what, as json.dumps names it), written without recursion.
    try:
        want = compact_json(value)
    except (TypeError, ValueError) as exc:
        for name in ("compact_json", "compact_json_length"):
            with pytest.raises(ContextPlanError) as caught:
                differential(name, value)
            assert caught.value.codes == ["invalid-json"]
            assert caught.value.issues[0].message == f"expected JSON-serialisable data ({exc})"
        return
    assert differential("compact_json", value) == want
    assert differential("compact_json_length", value) == len(want)


# ---------------------------------------------------------------------------------------------
# Grouping with reasoning items (FLAG_GLUES_NEXT), on crafted flags

def oracle_groups(flags, chars, grouping):
    """Group starts as DESIGN §2 and §9 say: a turn-opening message (user-turn) or any message
    that is not a tool result (message), never right after a reasoning item; the first always."""
    starts = []
    for i, f in enumerate(flags):
        opens = bool(f & FLAG_OPENS_TURN) if grouping == 0 else not f & FLAG_TOOL_RESULT
        if i == 0 or (opens and not flags[i - 1] & FLAG_GLUES_NEXT):
            starts.append(i)
    bounds = [*starts, len(flags)]
    return bounds, [sum(chars[bounds[g]:bounds[g + 1]]) for g in range(len(starts))]


any_flags = st.lists(st.integers(0, 255), max_size=40) | st.lists(
    st.sampled_from([0, FLAG_OPENS_TURN, FLAG_TOOL_RESULT, FLAG_TOOL_CALLS, FLAG_GLUES_NEXT,
                     FLAG_GLUES_NEXT | FLAG_OPENS_TURN, FLAG_GLUES_NEXT | FLAG_TOOL_RESULT]),
    max_size=40)


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(any_flags, st.data(), st.integers(0, 5), st.integers(0, 400))
def test_glued_groups_agree_on_crafted_flags(differential, flags, data, keep, target):
    n = len(flags)
    chars = data.draw(st.lists(st.integers(0, 60), min_size=n, max_size=n))
    flags_a = np.array(flags, dtype=np.uint8)
    chars_a = np.array(chars, dtype=np.int64)
    cuts = sorted(data.draw(st.lists(st.integers(0, n), max_size=4)))
    list_offsets = np.array([0, *cuts, n], dtype=np.int64)
    for grouping in (0, 1):
        offsets, group_chars = differential("group_offsets", flags_a, chars_a, grouping)
        bounds, sums = oracle_groups(flags, chars, grouping) if n else ([0], [])
        assert offsets.tolist() == bounds and group_chars.tolist() == sums
        first = differential("trim_cut", group_chars, keep, target)
        many = differential("trim_cut_many", list_offsets, flags_a, chars_a, keep, target,
                            grouping)
        if len(list_offsets) == 2:
            assert many[0].tolist() == [int(offsets[first])]
        # Each conversation is grouped on its own: its first message opens a group whatever the
        # message before it (the end of another conversation) says.
        for r in range(len(list_offsets) - 1):
            a, b = int(list_offsets[r]), int(list_offsets[r + 1])
            row_bounds, row_sums = oracle_groups(flags[a:b], chars[a:b], grouping) if b > a \
                else ([0], [])
            assert int(many[1][r]) == len(row_sums)
            g = int(np.searchsorted(row_bounds, int(many[0][r]) - a))
            assert a + row_bounds[g] == int(many[0][r])
            assert int(many[3][r]) == sum(row_sums[g:])
            # a cut never falls right after a reasoning item
            cut = int(many[0][r])
            assert cut == a or cut == b or not flags[cut - 1] & FLAG_GLUES_NEXT


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


@settings(max_examples=300, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(responses_conversation(), st.integers(0, 4), st.integers(0, 200))
def test_cuts_of_responses_items_agree_and_keep_reasoning_with_its_item(
        differential, items, keep, target):
    roles, chars, flags, opaque = differential("measure_messages", items, "h")
    for i, item in enumerate(items):
        kind = item.get("type")
        if kind == "reasoning":
            assert flags[i] == FLAG_GLUES_NEXT
        elif kind == "function_call_output":  # never opens a turn
            assert flags[i] == FLAG_TOOL_RESULT
    before = {cid for _, code, cid in differential("tool_pairing", items, flags)
              if code == "orphan-tool-result"}
    for grouping in (0, 1):
        for target_chars in (target, None):
            first, cut, ngroups = differential(
                lambda k, *a: k.measure(items, "h").cut(*a), items, grouping, keep,
                target_chars)
            # never right after a reasoning item (unless all goes), and never a new orphan
            assert cut in (0, len(items)) or not flags[cut - 1] & FLAG_GLUES_NEXT
            kept = {cid for _, code, cid in differential("tool_pairing", items[cut:],
                                                         flags[cut:])
                    if code == "orphan-tool-result"}
            assert kept <= before | {None}
        differential("reduce_transcript", items, (("history", grouping, keep, target),), 0, 0)
    differential("text_pieces", items, "h")


def rows_of(messages, kernel_measure):
    """The arrays reduce_rows takes for one transcript, from its measure and its tool ids."""
    from contextpolicy._tool_ids import call_ids, result_ids

    roles, chars, flags, _ = kernel_measure
    codes: dict[str, int] = {}
    calls, results, call_offsets, result_offsets = [], [], [0], [0]
    for i, msg in enumerate(messages):
        if flags[i] & FLAG_TOOL_CALLS:
            calls += [codes.setdefault(cid, len(codes)) for cid in call_ids(msg)]
        call_offsets.append(len(calls))
        if flags[i] & FLAG_TOOL_RESULT:
            results += [-1 if cid is None else codes.setdefault(cid, len(codes))
                        for cid in result_ids(msg)]
        result_offsets.append(len(results))
    return (np.array([0, len(messages)]), roles, flags, chars, np.array(call_offsets),
            np.array(calls, dtype=np.int64), np.array(result_offsets),
            np.array(results, dtype=np.int64), len(codes)), codes


@settings(max_examples=300, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(responses_conversation(), st.sampled_from([0, 1]), st.integers(0, 4),
       st.integers(0, 200), st.integers(-1, 150), st.integers(-1, 150))
def test_reduce_rows_of_responses_items_is_reduce_transcript(
        differential, items, grouping, keep, target, trigger, watermark):
    # The columnar form glues reasoning items as the object path does: the same cut, figures
    # and warnings from arrays as from the messages themselves.
    messages = [{"role": "system", "content": "s"}, *items, {"role": "user", "content": "q?"}]
    args, codes = rows_of(messages, differential("measure_messages", messages))
    head, cut, tail, before, after, groups, fired, missed, warn = differential(
        "reduce_rows", *args, ((grouping, keep, target),), trigger, watermark)
    steps = (("history", grouping, keep, target),)
    raw = differential("reduce_transcript", messages, steps, trigger, watermark)
    reason = expected_missed(raw, steps, watermark)
    assert int(missed[0]) == (0 if reason is None else MISSED_REASONS.index(reason) + 1)
    ids = raw.ids
    history = raw.kept[ids.index("history")] if "history" in ids else None
    kept = messages[int(cut[0]):int(tail[0])]
    if history is None:
        assert int(cut[0]) == int(head[0])
    else:
        assert [id(m) for m in history] == [id(m) for m in kept]
    assert (int(head[0]), int(tail[0])) == differential("split_transcript", messages)
    assert [int(before[0]), int(after[0]), int(groups[0]), bool(fired[0])] == [
        raw.chars_before, raw.chars_after, raw.groups_removed, raw.triggered]
    names = {code: cid for cid, code in codes.items()}
    frag = {"system": 0, "history": 1, "question": 2}
    # (reduce_rows gives the pairing warnings; reduce_table adds the unknown roles)
    assert [(frag[ids[f]], index, 0 if code == "orphan-tool-result" else 1, cid)
            for f, index, code, cid in raw.warnings if code != "unknown-role"] == [
        (int(f), int(index), int(code), None if cid < 0 else names[int(cid)])
        for f, index, code, cid in zip(*warn[1:])]


# ---------------------------------------------------------------------------------------------
# Arguments: the twin converts them as the compiled kernel's typed arguments are converted


class _OnlyIndex:
    def __index__(self):
        return 1


class _IntGivesStr:
    def __int__(self):
        return "1"


ODD_ARGUMENTS = [
    0, 1, 5, True, -1, 2**31, -(2**31) - 1, 2**63 - 1, 2**63, -(2**63), -(2**63) - 1, 2**100,
    1.5, -0.0, float("nan"), float("inf"), "3", None, b"1", (1,), np.int64(2), np.uint64(2**64 - 1),
    np.float64(1.7), _OnlyIndex(), _IntGivesStr(),
]
_MSGS = [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "yo"},
         {"role": "assistant", "content": "x"}]
_FLAGS = np.array([1, 0, 0], dtype=np.uint8)
_CHARS = np.array([2, 2, 1])
_ROWS = (np.array([0, 3]), np.array([3, 4, 4], dtype=np.int8), _FLAGS, _CHARS,
         np.zeros(4, np.int64), np.array([], dtype=np.int64), np.zeros(4, np.int64),
         np.array([], dtype=np.int64))
ARGUMENT_CALLS = {
    "message_text_pieces(index)": lambda k, v: k.message_text_pieces(_MSGS[0], v),
    "group_offsets(grouping)": lambda k, v: k.group_offsets(_FLAGS, _CHARS, v),
    "group_offsets(flags)": lambda k, v: k.group_offsets(v, _CHARS),
    "trim_cut(keep)": lambda k, v: k.trim_cut(_CHARS, v, 3),
    "trim_cut(target)": lambda k, v: k.trim_cut(_CHARS, 1, v),
    "trim_cut(group_chars)": lambda k, v: k.trim_cut(v, 0, 3),
    "trim_cut_many(keep)": lambda k, v: k.trim_cut_many(np.array([0, 3]), _FLAGS, _CHARS, v, 3),
    "trim_cut_many(grouping)": lambda k, v: k.trim_cut_many(
        np.array([0, 3]), _FLAGS, _CHARS, 1, 3, v),
    "trim_cut_many(grouping, no conversation)": lambda k, v: k.trim_cut_many(
        np.array([0]), np.zeros(0, np.uint8), np.zeros(0, np.int64), 0, 0, v),
    "group_offsets(grouping, no message)": lambda k, v: k.group_offsets([], [], v),
    "tool_pairing(flags)": lambda k, v: k.tool_pairing(_MSGS, v),
    "Measure.tail(start)": lambda k, v: k.measure(_MSGS).tail(v).messages,
    "Measure.tail(stop)": lambda k, v: k.measure(_MSGS).tail(1, v).messages,
    "Measure.tail(start, stop)": lambda k, v: k.measure(_MSGS).tail(v, 2).messages,
    "Measure.groups(grouping)": lambda k, v: k.measure(_MSGS).groups(v),
    "Measure.pairing(start)": lambda k, v: k.measure(_MSGS).pairing(_MSGS, v),
    "Measure.cut(grouping)": lambda k, v: k.measure(_MSGS).cut(_MSGS, v, 0, 1),
    "Measure.cut(keep)": lambda k, v: k.measure(_MSGS).cut(_MSGS, 0, v, 1),
    "Measure.cut(target)": lambda k, v: k.measure(_MSGS).cut(_MSGS, 0, 0, v),
    "reduce_transcript(trigger)": lambda k, v: k.reduce_transcript(_MSGS, (), v, 0)[8],
    "reduce_transcript(steps)": lambda k, v: k.reduce_transcript(_MSGS, v, 0, 0)[4],
    "reduce_transcript(step)": lambda k, v: k.reduce_transcript(_MSGS, (v,), 0, 0)[4],
    "reduce_transcript(step grouping)": lambda k, v: k.reduce_transcript(
        _MSGS, (("history", v, 0, 1),), 0, 0)[4],
    "reduce_transcript(step keep, not fired)": lambda k, v: k.reduce_transcript(
        _MSGS, (("history", 0, v, 1),), 100, 0)[4],
    "reduce_rows(ncodes)": lambda k, v: k.reduce_rows(*_ROWS, v, ((0, 0, 1),), 0, 0).cut,
    "reduce_rows(steps)": lambda k, v: k.reduce_rows(*_ROWS, 0, v, 0, 0).cut,
    "reduce_rows(step keep)": lambda k, v: k.reduce_rows(*_ROWS, 0, ((0, v, 1),), 0, 0).cut,
    "reduce_rows(step grouping)": lambda k, v: k.reduce_rows(*_ROWS, 0, ((v, 0, 1),), 0, 0).cut,
    "reduce_rows(call_codes)": lambda k, v: k.reduce_rows(*_ROWS[:5], v, *_ROWS[6:], 9,
                                                          ((0, 0, 1),), 0, 0)[1],
    "reduce_rows(skip)": lambda k, v: k.reduce_rows(*_ROWS, 0, ((0, 0, 1),), 0, 0, v).cut,
    "gather_bits(bit_offset)": lambda k, v: k.gather_bits(b"\xff\x0f", v, [0], [3]),
    "gather_bits(starts)": lambda k, v: k.gather_bits(b"\xff\x0f", 0, v, [1]),
    "gather_offsets(offsets)": lambda k, v: k.gather_offsets(v, [0], [1]),
    "gather_offsets(lengths)": lambda k, v: k.gather_offsets(np.array([0, 1, 3]), [0], v),
    "string_codes(names)": lambda k, v: k.string_codes(b"ab", np.array([0, 1, 2]), v),
    "string_codes(nulls)": lambda k, v: k.string_codes(b"ab", np.array([0, 1, 2]), (b"a",), v),
    "string_ids(sources)": lambda k, v: k.string_ids(v),
    "string_ids(source)": lambda k, v: k.string_ids((v,)),
    "string_ids(at)": lambda k, v: k.string_ids(((b"ab", np.array([0, 1, 2]), None, v),)),
    "string_ids(nulls)": lambda k, v: k.string_ids(((b"ab", np.array([0, 1, 2]), v, None),)),
    "arrange_ids(messages)": lambda k, v: k.arrange_ids((v,), (np.array([0, 1, 2]),)),
    "arrange_ids(codes)": lambda k, v: k.arrange_ids((np.array([0, 1, 2]),), v),
    "arrange_ids(code)": lambda k, v: k.arrange_ids((np.array([0, 1, 2]),), (v,)),
    "part_chars(ntext)": lambda k, v: k.part_chars(np.array([0, 1]), np.zeros(1, np.int8), v,
                                                   (None,) * 4),
    "part_chars(kinds)": lambda k, v: k.part_chars(np.array([0, 1]), v, 4, (None,) * 4),
    "part_chars(extra)": lambda k, v: k.part_chars(np.array([0, 1]), np.zeros(1, np.int8), 4,
                                                   (None,) * 4, v),
}
ODD_SEQUENCES = [None, [], [1, 0, 0], [[1, 0, 0]], np.array([[1, 0, 0]]), np.array(5), "abc",
                 (("history", 0, 0, 1),), [("history", 0, 0, 1)], ((0, 0, 1),), ((5,),),
                 (("history", 0, 0),), np.array([1.5, 0, 0]), np.array([-1, 0, 0])]


def _outcome(call, kernel, value):
    try:
        result = call(kernel, value)
    except Exception as exc:  # every outcome is compared, type and words
        return ("raised", type(exc).__name__, str(exc))
    return ("value", repr(result))


@pytest.mark.filterwarnings("ignore::DeprecationWarning")
@pytest.mark.parametrize("name", list(ARGUMENT_CALLS))
def test_odd_arguments_are_converted_alike(kernels, name):
    # Floats, huge ints, strings, None, numpy scalars, arrays of the wrong shape: both kernels
    # accept and refuse the same values, with the same errors.
    call = ARGUMENT_CALLS[name]
    for value in ODD_ARGUMENTS + ODD_SEQUENCES:
        first, *others = (_outcome(call, k, value) for k in kernels)
        for other in others:
            assert other == first, (name, value)


@SETTINGS
@given(st.binary(max_size=300), st.data())
def test_gather_bytes_agrees(differential, src, data):
    # Ranges in any order, repeated and empty, mostly within the source, now and then backwards
    # or past it; an output of the right size, mostly: the same bytes, or the same error.
    edge = st.integers(0, len(src)) | st.integers(-3, len(src) + 3)
    ranges = data.draw(st.lists(st.tuples(edge, edge).map(
        lambda r: tuple(sorted(r)) if data.draw(st.integers(0, 9)) else r), max_size=20))
    starts = np.array([a for a, _ in ranges], dtype=np.int64)
    stops = np.array([b for _, b in ranges], dtype=np.int64)
    size = max(0, sum(b - a for a, b in ranges) + data.draw(st.sampled_from([0, 0, 0, -1, 1])))

    def gather(kernel):
        out = bytearray(size)
        kernel.gather_bytes(src, starts, stops, out)
        return bytes(out)

    try:
        got = differential(gather)
    except ValueError:
        assert not all(0 <= a <= b <= len(src) for a, b in ranges) or size != sum(
            b - a for a, b in ranges)
        return
    assert got == b"".join(src[a:b] for a, b in ranges)


# The columnar gather and measuring functions, on Arrow-layout arrays drawn at random: mostly
# well-formed, now and then out of range, decreasing, or of the wrong length.

def _offsets_of(sizes: list[int], dtype: Any) -> Any:
    return np.concatenate([[0], np.cumsum(sizes, dtype=np.int64)]).astype(dtype)


@SETTINGS
@given(st.lists(st.integers(0, 6), max_size=12), st.sampled_from([np.int32, np.int64]),
       st.data())
def test_gather_offsets_agrees(differential, sizes, dtype, data):
    offs = _offsets_of(sizes, dtype)
    if sizes and data.draw(st.integers(0, 9)) == 0:  # a decrease, or a negative first offset
        offs[data.draw(st.integers(0, len(sizes)))] = data.draw(st.sampled_from([-3, 2, 10]))
    n = len(sizes)
    ranges = data.draw(st.lists(st.tuples(st.integers(-1, n + 1), st.integers(-1, n + 1)),
                                max_size=6))
    starts = np.array([a for a, _ in ranges], dtype=np.int64)
    lengths = np.array([b for _, b in ranges], dtype=np.int64)
    try:
        got, lo, hi = differential("gather_offsets", offs, starts, lengths)
    except ValueError:
        return
    assert got.dtype == offs.dtype
    # The reference: the sizes of the elements taken, laid end to end.
    taken = [int(offs[a + i + 1] - offs[a + i]) for a, length in ranges for i in range(length)]
    assert got.tolist() == [0, *np.cumsum(taken, dtype=np.int64).tolist()]
    assert lo.tolist() == [int(offs[a]) for a, _ in ranges]
    assert hi.tolist() == [int(offs[a + length]) for a, length in ranges]


def test_gather_offsets_never_wrap(differential):
    offs = np.array([0, 2**30], dtype=np.int32)  # one element of 2**30 bytes, taken twice
    wide, lo, hi = differential("gather_offsets", offs.astype(np.int64), [0, 0], [1, 1])
    assert wide.tolist() == [0, 2**30, 2**31] and hi.tolist() == [2**30, 2**30]
    with pytest.raises(ValueError, match="more than offsets of int32 can address"):
        differential("gather_offsets", offs, [0, 0], [1, 1])


@SETTINGS
@given(st.binary(max_size=8), st.integers(-1, 20), st.data())
def test_gather_bits_agrees(differential, bitmap, bit_offset, data):
    limit = len(bitmap) * 8 - bit_offset
    edge = st.integers(-1, max(limit, 0) + 1)
    ranges = data.draw(st.lists(st.tuples(edge, edge), max_size=6))
    starts = np.array([a for a, _ in ranges], dtype=np.int64)
    lengths = np.array([b for _, b in ranges], dtype=np.int64)
    try:
        packed, count = differential("gather_bits", bitmap, bit_offset, starts, lengths)
    except ValueError:
        assert bit_offset < 0 or not all(0 <= a and 0 <= b and a + b <= limit for a, b in ranges)
        return
    bits = np.unpackbits(np.frombuffer(bitmap, dtype=np.uint8), bitorder="little")
    want = [int(bits[bit_offset + a + i]) for a, length in ranges for i in range(length)]
    assert np.unpackbits(packed, bitorder="little")[:len(want)].tolist() == want
    assert count == sum(want) and len(packed) == (len(want) + 7) // 8


_KIND_WORDS = ["text", "input_text", "tool_result", "tool_use", "thinking", "", "Text", "text ",
               "tool_use_", "é"]


@SETTINGS
@given(st.lists(st.sampled_from(_KIND_WORDS) | st.none(), max_size=12), st.data())
def test_string_codes_agrees(differential, values, data):
    import pyarrow as pa

    arr = pa.array(values, type=data.draw(st.sampled_from([pa.string(), pa.large_string()])))
    _, offs, raw = arr.buffers()
    dtype = np.int64 if pa.types.is_large_string(arr.type) else np.int32
    offsets = np.frombuffer(offs, dtype=dtype)[: len(arr) + 1]
    names = tuple(w.encode() for w in data.draw(
        st.lists(st.sampled_from(_KIND_WORDS), min_size=1, max_size=5)))
    nulls = np.array([v is None for v in values], dtype=bool)
    got = differential("string_codes", raw if raw is not None else b"", offsets, names, nulls)
    assert got.tolist() == [-1 if v is None or v.encode() not in names
                            else names.index(v.encode()) for v in values]


_ID_WORDS = ["", "a", "call_1", "call_12", "toolu_01Ab", "é", "x" * 17, "x" * 16 + "y",
             "😀" * 3]


@SETTINGS
@given(st.lists(st.tuples(st.lists(st.sampled_from(_ID_WORDS) | st.none(), max_size=10),
                          st.booleans(), st.booleans()), max_size=4), st.data())
def test_string_ids_agrees(differential, sources, data):
    # Several string arrays (narrow or wide offsets), all their strings or some positions:
    # equal strings one code, in order of first sight source by source, -1 for a null; and
    # the first sight of each code. Against a plain Python reference.
    import pyarrow as pa

    given, chosen = [], []
    for values, wide, pick in sources:
        arr = pa.array(values, type=pa.large_string() if wide else pa.string())
        _, offs, raw = arr.buffers()
        offsets = np.frombuffer(offs, dtype=np.int64 if wide else np.int32)[: len(arr) + 1]
        at = None
        if pick and values:
            at = np.array(data.draw(st.lists(st.integers(0, len(values) - 1), max_size=8)),
                          dtype=np.int64)
        nulls = np.array([v is None for v in values], dtype=bool) if any(
            v is None for v in values) else None
        given.append((raw if raw is not None else b"", offsets, nulls, at))
        chosen.append([(i, values[i]) for i in (range(len(values)) if at is None
                                               else at.tolist())])
    codes, first_source, first_index = differential("string_ids", tuple(given))
    seen: dict[str, int] = {}
    want, firsts = [], []
    for s, items in enumerate(chosen):
        row = []
        for i, v in items:
            if v is None:
                row.append(-1)
                continue
            if v not in seen:
                seen[v] = len(seen)
                firsts.append((s, i))
            row.append(seen[v])
        want.append(row)
    assert [c.tolist() for c in codes] == want
    assert list(zip(first_source.tolist(), first_index.tolist(), strict=True)) == firsts


@SETTINGS
@given(st.lists(st.lists(st.tuples(st.integers(0, 6), st.integers(-1, 50)), max_size=10),
                max_size=4))
def test_arrange_ids_agrees(differential, sources):
    # Items of a few sources, each in message order, merged by message: each source's in their
    # order, the first source's first within a message, as a stable sort of the sources in turn.
    sources = [sorted(s, key=lambda item: item[0]) for s in sources]
    messages = tuple(np.array([a for a, _ in s], dtype=np.int64) for s in sources)
    codes = tuple(np.array([b for _, b in s], dtype=np.int64) for s in sources)
    merged, placed = differential("arrange_ids", messages, codes)
    ordered = sorted([item for s in sources for item in s], key=lambda item: item[0])
    assert merged.tolist() == [msg for msg, _ in ordered]
    assert placed.tolist() == [code for _, code in ordered]


_PART_WORDS = ["", "a", "héllo", "日本語", "x" * 100, "é" * 70, "😀" * 20]


@SETTINGS
@given(st.integers(0, 14), st.data())
def test_part_chars_agrees(differential, k, data):
    # Parts of every kind in random messages, each field present or not, with nulls or not,
    # narrow or wide offsets; extra chars and unreadable parts from the caller: the same chars,
    # flags and unmeasured messages, and those of a plain Python reference.
    import pyarrow as pa

    ntext = 4
    kinds = np.array(data.draw(st.lists(st.integers(-2, ntext + 4), min_size=k, max_size=k)),
                     dtype=np.int8)
    fields, values = [], []
    for _ in range(4):
        if data.draw(st.integers(0, 4)) == 0:
            fields.append(None)
            values.append(None)
            continue
        vals = data.draw(st.lists(st.sampled_from(_PART_WORDS) | st.none(), min_size=k,
                                  max_size=k))
        arr = pa.array(vals, type=data.draw(st.sampled_from([pa.string(), pa.large_string()])))
        _, offs, raw = arr.buffers()
        dtype = np.int64 if pa.types.is_large_string(arr.type) else np.int32
        given_nulls = data.draw(st.booleans())
        nulls = np.array([v is None for v in vals], dtype=bool) if given_nulls else None
        fields.append((raw if raw is not None else b"", np.frombuffer(offs, dtype=dtype)[:k + 1],
                       nulls))
        values.append([v if given_nulls else (v or "") for v in vals])
    cuts = sorted(data.draw(st.lists(st.integers(0, k), max_size=4)))
    part_offsets = np.array([0, *cuts, k], dtype=np.int64)
    extra = (np.array(data.draw(st.lists(st.integers(0, 50), min_size=k, max_size=k)),
                      dtype=np.int64) if data.draw(st.booleans()) else None)
    unreadable = (np.array(data.draw(st.lists(st.booleans(), min_size=k, max_size=k)),
                           dtype=bool) if data.draw(st.booleans()) else None)
    chars, flags, bad = differential("part_chars", part_offsets, kinds, ntext, tuple(fields),
                                     extra, unreadable)
    for r in range(len(part_offsets) - 1):
        total, fl, unmeasured = 0, 0, False
        for p in range(int(part_offsets[r]), int(part_offsets[r + 1])):
            unmeasured |= bool(unreadable is not None and unreadable[p])
            total += int(extra[p]) if extra is not None else 0
            kind = int(kinds[p])
            if not 0 <= kind <= ntext + 2:
                continue
            x = 0 if kind < ntext else kind - ntext + 1
            fl |= {1: FLAG_TOOL_RESULT, 2: FLAG_TOOL_CALLS}.get(x, 0)
            value = None if values[x] is None else values[x][p]
            if value is None:
                unmeasured |= x in (0, 3)
            else:
                total += len(value)
        assert (int(chars[r]), int(flags[r]), bool(bad[r])) == (total, fl, unmeasured)


@SETTINGS
@given(st.lists(st.text(st.characters(codec="utf-8")) | st.sampled_from(
    ['"', "\\", "\b\f\n\r\t", "\x00\x1f\x7f", "\u2028\u2029", "é" * 40 + '"' * 40]),
    max_size=10), st.booleans())
def test_json_string_lengths_agree(differential, values, wide):
    import pyarrow as pa

    arr = pa.array(values, type=pa.large_string() if wide else pa.string())
    _, offs, raw = arr.buffers()
    offsets = np.frombuffer(offs, dtype=np.int64 if wide else np.int32)[: len(arr) + 1]
    got = differential("json_string_lengths", raw if raw is not None else b"", offsets)
    assert got.tolist() == [len(json.dumps(v, ensure_ascii=False, separators=(",", ":")))
                            for v in values]
