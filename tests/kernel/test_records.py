"""The records the kernels return: the named tuples of ``contextpolicy._records`` on both kernels,
read by name, behaving as the tuples they are (equality, hashing, pickling)."""

from __future__ import annotations

import pickle

import pytest

from contextpolicy._records import (
    RECORDS,
    FragmentFigures,
    FusedRecord,
    KernelWarning,
    StepRecord,
)

# system, a turn whose call has no result, a turn with an unknown role, a long turn, the question
MESSAGES = [
    {"role": "system", "content": "be brief"},
    {"role": "user", "content": "first " * 20},
    {"role": "assistant", "tool_calls": [{"id": "c1", "function": {"name": "f"}}]},
    {"role": "user", "content": "second"},
    {"role": "critic", "content": "hm"},
    {"role": "user", "content": "third " * 30},
    {"role": "assistant", "content": "done"},
    {"role": "user", "content": "and now?"},
]
STEPS = (("history", 0, 1, 50), ("history", 1, 0, 10))


def record_types(value, seen):
    if isinstance(value, tuple):
        seen.append(type(value))
    if isinstance(value, (tuple, list)):
        for item in value:
            record_types(item, seen)
    return seen


def test_every_record_class_is_a_plain_named_tuple():
    # What lets the compiled kernel fill one as a tuple (it checks the same when imported).
    for cls in RECORDS:
        assert issubclass(cls, tuple) and cls.__basicsize__ == tuple.__basicsize__
        assert cls.__dictoffset__ == 0 and cls._fields


def test_a_reduce_reads_by_name_on_both_kernels(kernels):
    for k in kernels:
        raw = k.reduce_transcript(list(MESSAGES), STEPS, 100, 80)
        assert type(raw) is FusedRecord
        assert raw.ids == ["system", "history", "question"] and raw.triggered is True
        assert all(type(f) is FragmentFigures for f in raw.before + raw.after)
        assert [type(s) for s in raw.steps] == [StepRecord, StepRecord]
        first, second = raw.steps
        # turns (first, the call), (second, the unknown role), (third, done): 313 chars, one
        # turn kept, still over 50; then message by message to 10: "done" alone
        assert (first.status, first.reason, first.chars_before, first.chars_after) == (
            "applied", "keep-groups-floor", 313, 184)
        assert (first.groups_before, first.groups_after, first.messages_removed) == (3, 1, 4)
        assert (second.status, second.reason, second.chars_before, second.chars_after) == (
            "applied", "trimmed", 184, 4)
        assert second.messages_removed == 1
        t = raw
        assert (t.chars_before, t.messages_before, t.chars_after, t.messages_after) == (
            329, 8, 20, 3)
        assert (t.messages_removed, t.groups_removed) == (5, 3) and t.watermark_met is True
        assert t.chars_after == sum(f.chars for f in raw.after)
        history = raw.kept[raw.ids.index("history")]
        assert history == [MESSAGES[6]] and history[0] is MESSAGES[6]
        assert raw.input == [MESSAGES[0], MESSAGES[6], MESSAGES[7]]
        # the unknown role is left out with its turn; the unanswered call too
        assert raw.warnings == []
        kept_all = k.reduce_transcript(list(MESSAGES), (), 100, 80)
        codes = [(type(w), w.code, w.message_index) for w in kept_all.warnings]
        assert codes == [(KernelWarning, "unknown-role", 3),
                         (KernelWarning, "unanswered-tool-call", 1)]
        assert kept_all.warnings[0].detail == ("critic", 1)
        assert kept_all.after is kept_all.before and kept_all.steps == []


def test_records_hash_compare_and_pickle_as_their_tuples(kernels):
    for k in kernels:
        raw = k.reduce_transcript(list(MESSAGES), STEPS, 100, 80)
        assert pickle.loads(pickle.dumps(raw)) == raw
        for record in [*raw.before, *raw.after, *raw.steps]:
            assert hash(record) == hash(tuple(record)) and record == tuple(record)
            assert pickle.loads(pickle.dumps(record)) == record
            assert repr(record).startswith(type(record).__name__ + "(")
        assert {raw.before[0]: 1}[tuple(raw.before[0])] == 1


@pytest.mark.parametrize("watermark", [-1, 0, 10**6])
def test_both_kernels_build_the_same_record_classes_all_the_way_down(kernels, watermark):
    found = [record_types(k.reduce_transcript(list(MESSAGES), STEPS, 0, watermark), [])
             for k in kernels]
    assert all(f == found[0] for f in found)
    assert set(found[0]) <= set(RECORDS) | {tuple}
    assert FusedRecord in found[0] and FragmentFigures in found[0]


def test_many_rows_read_by_name_on_both_kernels(kernels):
    import numpy as np

    from contextpolicy._records import RowsRecord, RowWarnings
    from contextpolicy._tables import MISSED_REASONS

    # two rows: system, a call without its result, a long turn, the question; the second
    # row a plain question
    messages = [*MESSAGES[:3], {"role": "user", "content": "long " * 40},
                {"role": "user", "content": "q?"}, {"role": "user", "content": "alone"}]
    offsets = np.array([0, 5, 6])
    for k in kernels:
        roles, chars, flags, _ = k.measure_messages(messages)
        calls = np.array([0, 0, 0, 1, 1, 1, 1])  # message 2 holds one call, code 0
        rows = k.reduce_rows(offsets, roles, flags, chars, calls, np.array([0]),
                             np.zeros(7, dtype=np.int64), np.array([], dtype=np.int64), 1,
                             ((0, 1, 10),), 50, 40)
        assert type(rows) is RowsRecord and type(rows.warnings) is RowWarnings
        assert rows.head.tolist() == [1, 5] and rows.tail.tolist() == [4, 5]  # absolute
        assert rows.cut.tolist() == [3, 5]  # the first turn (with its call) cut
        assert rows.chars_before.tolist() == [8 + 120 + 1 + 200 + 2, 5]
        assert rows.chars_after.tolist() == [8 + 200 + 2, 5]
        assert rows.groups_removed.tolist() == [1, 0] and rows.triggered.tolist() == [1, 0]
        # the kept turn alone is over its target (200 > 10), what no trim may reduce is not
        assert rows.missed.tolist() == [MISSED_REASONS.index("keep-groups-floor") + 1, 0]
        # the unanswered call is in the part cut: no warning is left
        assert [len(v) for v in rows.warnings] == [0] * 5
