"""The compiled kernel and the twin agree on every output and every error (hypothesis), on
reductions: a transcript or a plan reduced in one call, ``reduce_rows`` on arrays (and against
``reduce_transcript`` on Responses items), and the arguments of every kernel function, which the
twin converts as the compiled kernel's typed arguments are converted."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from contextpolicy._tables import (
    FLAG_GLUES_NEXT,
    FLAG_OPENS_TURN,
    FLAG_TOOL_CALLS,
    FLAG_TOOL_RESULT,
    ROLE_NAMES,
)
from contextpolicy.errors import ContextPlanError
from tests.support.differential import SETTINGS, responses_conversation
from tests.support.lines import MISSED_REASONS, expected_missed
from tests.support.strategies import histories

# Every test here compares the kernels: with only the twin present they are skipped.
pytestmark = [pytest.mark.filterwarnings("ignore::DeprecationWarning"),
              pytest.mark.usefixtures("two_kernels")]


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
