"""``report_lines``: ``reduce_lines`` that also writes each line's report entry from a template
of the policy's report (what ``contextpolicy reduce --report`` writes for lines read as bytes).

Both kernels must agree on every input (the ``differential`` fixture), and every entry a kernel
writes must be byte for byte the entry the JSONL runner renders in Python from the line's
records (``fused_report_json``); a line gets no entry, and its records instead, exactly when it
has pairing warnings or an ``id`` whose JSON is not written back as it was read. The runner
with the byte path on and off gives the same report, on each kernel as the live one.
"""

from __future__ import annotations

import json
from typing import Any

import numpy as np
import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from contextpolicy import _kernel, _report_lines_py
from contextpolicy.jsonl.templates import FusedReports
from contextpolicy.jsonl.worker import LineWorker
from contextpolicy.synthetic import corpus
from tests.support.lines import (
    HYPOTHESIS,
    POLICIES,
    SEED_POLICY,
    VALIDATE_POLICY,
    frame,
    generated_lines,
    run_lines,
    trim_policy,
)

MORE_POLICIES = [
    *POLICIES,
    trim_policy(5000, 3000, [("message", 2, 2000)]),
    trim_policy(1, 1, [("message", 0, 0), ("user-turn", 3, 0)]),
]


def worker_of(policy: dict[str, Any]) -> LineWorker:
    worker = LineWorker(policy, True, runs=True)
    assert worker.fused is not None
    return worker


_OWN = object()


def call(worker: LineWorker, data: bytes, starts: list[int], stops: list[int],
         template: Any = _OWN) -> tuple[Any, ...]:
    return (data, starts, stops, worker.fused, worker.trigger,
            worker.watermark,
            worker.reports.entry_template() if template is _OWN else template)


def check_entries(differential, worker: LineWorker, lines: list[bytes]) -> list[bool]:
    """Both kernels agree; out, ends and figures are reduce_lines'; every line of the byte path
    has its entry or its records. Returns, per line, whether the kernel wrote its entry."""
    data, starts, stops = frame(lines)
    args = call(worker, data, starts, stops)
    out, ends, figures, entries, entry_ends, raws = differential("report_lines", *args)
    plain = _kernel.reduce_lines(*args[:-1], True)
    assert bytes(out) == bytes(plain[0])
    assert np.array_equal(ends, plain[1]) and np.array_equal(figures, plain[2])
    assert len(raws) == len(entry_ends) == len(lines)
    written = []
    at = 0
    for k, record in enumerate(plain[3]):
        entry = bytes(entries[at:entry_ends[k]])
        at = int(entry_ends[k])
        if record is None:  # the object path: nothing
            assert entry == b"" and raws[k] is None
            written.append(False)
            continue
        assert worker.scanned is not None
        expected = worker.scanned.report_entry(record, data)[1:]
        if raws[k] is None:
            assert entry == expected, (lines[k], entry, expected)
            written.append(True)
        else:
            assert entry == b""
            assert raws[k] == record
            records, span = record
            ident = None if span is None else data[span[0]:span[1]]
            assert records.warnings or not _report_lines_py._written_back(ident), ident
            written.append(False)
    assert at == len(entries)
    return written


@settings(HYPOTHESIS, max_examples=200)
@given(generated_lines(), st.sampled_from(MORE_POLICIES))
def test_generated_lines(differential, lines, policy):
    check_entries(differential, worker_of(policy), lines)


@pytest.fixture(scope="module")
def corpora() -> dict[str, list[bytes]]:
    sizes = {"chats": 60, "agent-traces": 10, "long-transcripts": 3}
    return {name: [orjson.dumps({"id": f"{name}-{k}", "messages": m}) if k % 2 else
                   json.dumps({"id": k, "messages": m}, ensure_ascii=False).encode()
                   for k, m in enumerate(corpus(name, n, seed=11))]
            for name, n in sizes.items()}


@pytest.mark.parametrize("name", ["chats", "agent-traces", "long-transcripts"])
@pytest.mark.parametrize("policy", MORE_POLICIES, ids=range(len(MORE_POLICIES)))
def test_corpora(differential, corpora, name, policy):
    written = check_entries(differential, worker_of(policy), corpora[name])
    if name == "chats":  # no tool traffic: no warnings, and every id written back
        assert all(written)


ID_CASES = [
    (b'"a"', True), (b'"\xc3\xbc \xf0\x9f\x98\x80"', True), (b'""', True),
    (b'"a\\nb"', False), (b'"\\u00fc"', False), (b'"\\/"', False),
    (b"0", True), (b"-5", True), (b"123456789012345678", True),
    (b"-123456789012345678", True), (b"1234567890123456789", False), (b"-0", False),
    (b"1.5", False), (b"1e3", False), (b"-0.0", False), (b"null", True), (b"true", True),
    (b"false", True), (b'{"a":1}', False), (b"[1]", False), (b"[]", False),
    (b"99999999999999999999999", False),
]


@pytest.mark.parametrize("ident, back", ID_CASES, ids=[c[0].decode("utf-8", "replace")
                                                        for c in ID_CASES])
def test_ids(differential, ident, back):
    line = (b'{"messages":[{"role":"user","content":"hi"},{"role":"assistant","content":"x"}],'
            b'"id": %b }' % ident)
    assert _report_lines_py._written_back(ident) is back
    for policy in (SEED_POLICY, VALIDATE_POLICY):
        assert check_entries(differential, worker_of(policy), [line]) == [back]


def test_a_line_without_an_id(differential):
    line = b'{"messages":[{"role":"user","content":"hi"}]}'
    assert check_entries(differential, worker_of(SEED_POLICY), [line]) == [True]


def test_warnings_leave_the_entry_to_python(differential):
    line = (b'{"id":"w","messages":[{"role":"user","content":"q"},'
            b'{"role":"tool","tool_call_id":"c1","content":"orphan"}]}')
    assert check_entries(differential, worker_of(SEED_POLICY), [line, line]) == [False, False]


def test_every_status_and_reason(differential):
    # not triggered; target already reached; within target; the keep-groups floor; trimmed
    turns = [b'{"role":"user","content":"%b"},{"role":"assistant","content":"%b"}'
             % (b"u" * n, b"a" * n) for n in (10, 20, 30, 40)]
    line = b'{"id":"s","messages":[%b,{"role":"user","content":"q"}]}' % b",".join(turns)
    seen = set()
    for trigger, target, steps in [
        (10**6, 10, [("user-turn", 0, 0)]),
        (100, 100, [("user-turn", 0, 0), ("message", 0, 0)]),
        (1, 1, [("user-turn", 0, 10**6)]),
        (1, 1, [("user-turn", 4, 0)]),
        (1, 1, [("user-turn", 1, 100), ("message", 0, 10), ("user-turn", 0, 0)]),
    ]:
        worker = worker_of(trim_policy(trigger, target, steps))
        assert check_entries(differential, worker, [line]) == [True]
        data, starts, stops = frame([line])
        *_, entries, _, _ = _kernel.report_lines(*call(worker, data, starts, stops))
        doc = orjson.loads(b"{" + bytes(entries))
        seen.update((s["status"], s["reason"]) for s in doc["report"]["steps"])
    assert {("skipped", "not-triggered"), ("skipped", "target-reached"),
            ("unchanged", "within-target"), ("unchanged", "keep-groups-floor"),
            ("applied", "trimmed")} <= seen


@pytest.mark.parametrize("slot", [0, 2, 3, 14, 19])
@pytest.mark.parametrize("runs", [True, False])
def test_a_policy_figure_like_a_sentinel_gets_no_template(slot, runs):
    # Neither template of the runner (the kernel's, or the Python renderer's per shape of
    # report) may take the policy's own figure for a slot.
    policy = trim_policy(10, 5, [("message", 0, FusedReports.SENTINEL + slot)])
    assert worker_of(policy).reports.entry_template() is None
    lines = [b'{"id":1,"messages":[{"role":"user","content":"%b"}]}' % (b"x" * 30)] * 3
    on = run_lines(lines, policy, True, runs=runs)
    off = run_lines(lines, policy, False, runs=runs)
    assert (b",\n".join(r.report for r in on if r.report)
            == b",\n".join(r.report for r in off if r.report))
    assert sum(r.scanned for r in on) == len(lines)


# ---------------------------------------------------------------------------------------------
# templates: both kernels refuse a bad one alike, and never read past one

LINE = b'{"id":"a","messages":[{"role":"user","content":"hello"},{"role":"user","content":"q"}]}'


def good_template() -> tuple[Any, ...]:
    template = worker_of(SEED_POLICY).reports.entry_template()
    assert template is not None
    return template


class Tuple(tuple):
    pass


def bad_templates() -> list[Any]:
    head, steps, fragments = good_template()
    return [
        None, [], (), (head, steps), (head, steps, fragments, ()), list((head, steps, fragments)),
        Tuple((head, steps, fragments)),
        (head, (), fragments), (head, steps + steps, fragments), (head, steps, fragments[:2]),
        (head, list(steps), fragments), (head, steps, list(fragments)),
        (list(head), steps, fragments), (head[:-1], steps, fragments), ((), steps, fragments),
        (Tuple(head), steps, fragments),
        ((b"a", 13, b"b"), steps, fragments), ((b"a", -1, b"b"), steps, fragments),
        ((b"a", 25, b"b"), steps, fragments), ((b"a", True, b"b"), steps, fragments),
        ((b"a", 2**70, b"b"), steps, fragments), ((b"a", 1.0, b"b"), steps, fragments),
        (("a", 1, b"b"), steps, fragments), ((b"a", 1, bytearray(b"b")), steps, fragments),
        (head, ((b"x", 12, b"y"),), fragments), (head, ((b"x", 20, b"y"),), fragments),
        (head, steps, ((b"x", 19, b"y"), fragments[1], fragments[2])),
        (head, steps, (fragments[0], fragments[1], (b"x", 10, b"y"))),
    ]


@pytest.mark.parametrize("k", range(len(bad_templates())))
def test_bad_templates(differential, k):
    worker = worker_of(SEED_POLICY)
    data, starts, stops = frame([LINE])
    with pytest.raises((TypeError, ValueError)):
        differential("report_lines", *call(worker, data, starts, stops, bad_templates()[k]))


@settings(HYPOTHESIS, max_examples=150)
@given(st.lists(st.sampled_from([b"", b"x", b"{", b'"', b"\\"]) | st.binary(max_size=8),
                min_size=1, max_size=6),
       st.lists(st.integers(0, 12), min_size=0, max_size=13),
       st.lists(st.integers(13, 19), min_size=0, max_size=4),
       st.lists(st.integers(20, 24), min_size=0, max_size=4))
def test_any_valid_template(differential, pieces, head_slots, step_slots, fragment_slots):
    # Whatever programs it is given, both kernels write the same bytes.
    def program(slots: list[int]) -> tuple[Any, ...]:
        out: list[Any] = [pieces[0]]
        for i, s in enumerate(slots):
            out += [s, pieces[(i + 1) % len(pieces)]]
        return tuple(out)

    template = (program(head_slots), (program(step_slots),), (program(fragment_slots),) * 3)
    worker = worker_of(SEED_POLICY)
    lines = [LINE, b'{"id":7,"messages":[{"role":"system","content":"s"},'
             b'{"role":"user","content":"%b"},{"role":"assistant","content":"a"},'
             b'{"role":"user","content":"q"}]}' % (b"u" * 3000), b"not json",
             b'{"messages":[{"role":"user","content":"q"}],"id":"%b"}' % (b"i" * 5000)]
    data, starts, stops = frame(lines)
    differential("report_lines", *call(worker, data, starts, stops, template))


# ---------------------------------------------------------------------------------------------
# the runner, on each kernel as the live one


@pytest.mark.parametrize("policy", MORE_POLICIES, ids=range(len(MORE_POLICIES)))
def test_the_runner_on_each_kernel(pipeline_kernel, corpora, policy):
    lines = [line for name in corpora for line in corpora[name]]
    lines.insert(5, b'{"id":"bad","messages":[{"role":"user"')
    lines.insert(9, b'{"fragments":[]}')
    on = run_lines(lines, policy, True, runs=True)
    off = run_lines(lines, policy, False, runs=True)
    joined = [b",\n".join(r.report for r in results if r.report is not None)
              for results in (on, off)]
    assert joined[0] == joined[1]
    assert b'"kernel":"%b"' % pipeline_kernel.IMPLEMENTATION.encode() in joined[0]
    assert sum(r.scanned for r in on) == len(lines) - 2
