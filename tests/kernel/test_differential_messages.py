"""The compiled kernel and the twin agree on every output and every error (hypothesis), on
messages: measures, text pieces and the compact JSON writer they rest on, groups and cuts
(reasoning items glued to what follows them), tool pairing, ``Measure`` objects and transcript
splits."""

from __future__ import annotations

import itertools
import json
import sys

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
)
from contextpolicy.errors import ContextPlanError
from tests.support.differential import (
    SETTINGS,
    edge_floats,
    edge_ints,
    edge_text,
    native_json,
    responses_conversation,
)
from tests.support.strategies import bad_message, histories, json_value, message, text

# Every test here compares the kernels: with only the twin present they are skipped.
pytestmark = [pytest.mark.filterwarnings("ignore::DeprecationWarning"),
              pytest.mark.usefixtures("two_kernels")]


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
