"""Roles the accounting does not know (``human``, ``ai``, ...): never rewritten, always said.

A turn opens only on role ``user``, so a transcript written with other names has no turn to
group by and a trim keeps what it cannot cut. Every run says so: an ``unknown-role`` warning per
role and fragment, at its first message, naming the role, how many messages carry it, the roles
known and what to map it to. Every path gives the object path's warnings: ``process_context``
step by step and in one kernel call, in every mode; the JSONL runner's byte path (the kernel's
scanner, its report entries and its summary figures) and object path; ``reduce_table``'s
figures, columnar and per row. Responses items other than messages carry no role and never
warn. Both kernels: the kernel functions through ``differential``, the pipeline on each kernel
as the live one (``pipeline_kernel``).
"""

from __future__ import annotations

import json
from typing import Any

import orjson
import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from contextpolicy import ContextPlan, ContextPlanError, process_context
from contextpolicy._read import fields
from contextpolicy._tables import FLAG_UNKNOWN_ROLE, ITEM_MESSAGE, ITEM_UNKNOWN, ROLE_CODES
from contextpolicy._tool_ids import item_code
from contextpolicy.batch import reduce_table
from contextpolicy.jsonl import runner
from tests.support import strategies as S
from tests.support.lines import run_lines

SETTINGS = settings(max_examples=60, deadline=None,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])

KNOWN = "system, developer, user, assistant, tool, function"

# A LangChain dump: messages_to_dict writes "human" and "ai".
LANGCHAIN = [
    {"role": "system", "content": "Be brief."},
    {"role": "human", "content": "What is the capital of France? " * 4},
    {"role": "ai", "content": "Paris. " * 10},
    {"role": "human", "content": "And of Spain? " * 4},
    {"role": "ai", "content": "Madrid. " * 10},
    {"role": "human", "content": "And of Italy?"},
]
TRIM = {"mode": "reduce", "triggerChars": 100, "targetInputChars": 60,
        "steps": [{"id": "trim", "kind": "trim", "fragmentId": "history", "field": "messages",
                   "grouping": {"kind": "user-turn"}, "keepGroups": 1, "targetChars": 40}]}
VALIDATE = {"mode": "validate"}


def listening() -> dict[str, Any]:
    """A listener: process_context then runs step by step (never in one kernel call)."""
    return {"on_event": lambda event: None}


def warnings_of(result: Any) -> list[tuple[Any, ...]]:
    return [(w.code, w.fragment_id, w.index, w.tool_call_id, w.message)
            for w in result.report.warnings]


def expected_unknown(messages: list[Any]) -> list[tuple[int, str, int]]:
    """(first index, role, messages) per role the accounting does not know, read straight
    from the messages: chat messages only (a Responses item that is no message has no role)."""
    found: dict[str, list[int]] = {}
    for i, m in enumerate(messages):
        f = fields(m)
        role = f.get("role")
        item = item_code(f)
        is_message = item == ITEM_MESSAGE or (item == ITEM_UNKNOWN and isinstance(role, str))
        if is_message and str(role) not in ROLE_CODES:
            found.setdefault(str(role), [i, 0])[1] += 1
    return [(first, role, count) for role, (first, count) in found.items()]


# ---------------------------------------------------------------------------------------------
# the kernels


class Role(str):
    """A str subclass whose methods lie: the kernels read the text it holds."""

    def __eq__(self, other):
        return True

    def __hash__(self):
        return 0


MIXED = [
    {"role": "human", "content": "a"},
    {"role": "user", "content": "b"},
    {"role": "ai", "content": "c"},
    {"type": "function_call", "call_id": "x", "name": "f", "arguments": "{}"},
    {"type": "function_call_output", "call_id": "x", "output": "ok"},
    {"type": "reasoning", "summary": []},
    {"type": "web_search_call", "id": "w"},  # an item of no known type, without a role
    {"type": "message", "role": "ai", "content": "d"},  # a typed message
    {"type": "future_item", "role": "critic", "content": "e"},  # unknown type, string role
    {"role": "other", "content": "f"},  # the code's name, never a role of its own
    {"role": "", "content": "g"},
    {"role": "User", "content": "h"},  # roles are read exactly
    {"role": "用户", "content": "i"},
    {"role": Role("human"), "content": "j"},
    {"role": "assistant", "content": "k"},
]


def test_measures_flag_and_list_unknown_roles(differential):
    roles = differential(lambda k, m: k.measure(m).unknown_roles(m), MIXED)
    assert roles == [(0, "human", 2), (2, "ai", 2), (8, "critic", 1), (9, "other", 1),
                     (10, "", 1), (11, "User", 1), (12, "用户", 1)]
    assert roles == expected_unknown(MIXED)
    flags = differential("measure_messages", MIXED)[2]
    assert [i for i, f in enumerate(flags) if f & FLAG_UNKNOWN_ROLE] == [
        0, 2, 7, 8, 9, 10, 11, 12, 13]
    assert differential(lambda k, m: k.measure(m).unknown_role, MIXED) is True
    known = [m for m in MIXED if "role" not in m or (
        type(m["role"]) is str and m["role"] in ("user", "assistant"))]
    assert differential(lambda k, m: (k.measure(m).unknown_role, k.measure(m).unknown_roles(m)),
                        known) == (False, [])
    # from a start, indices relative to it
    assert differential(lambda k, m: k.measure(m).unknown_roles(m, 3), MIXED)[:2] == [
        (4, "ai", 1), (5, "critic", 1)]


def test_unknown_roles_refuse_a_list_that_is_not_theirs(differential):
    with pytest.raises(ValueError, match="differ in length"):
        differential(lambda k, m: k.measure(m).unknown_roles(m[:1]), MIXED)
    # A flagged message with no string role now: it changed since it was measured.
    with pytest.raises(ContextPlanError, match=r"messages\[0\]\.role: the message changed while "
                       r"it was measured") as info:
        differential(lambda k, m: k.measure(m).unknown_roles(
            [{"role": 5}] + m[1:]), MIXED)
    assert info.value.codes == ["changed-while-measured"]
    with pytest.raises(ContextPlanError, match=r"fragments\[history\]\.messages\[0\]\.role"):
        differential(lambda k, m: k.measure(m).unknown_roles(
            [{"role": 5}] + m[1:], 0, "history"), MIXED)
    with pytest.raises(ValueError, match="outside"):
        differential(lambda k, m: k.measure(m).unknown_roles(m, 99), MIXED)


@SETTINGS
@given(S.histories())
def test_unknown_roles_agree_with_the_messages(differential, history):
    got = differential(lambda k, m: k.measure(m).unknown_roles(m), history)
    assert got == expected_unknown(history)


def test_reductions_in_one_call_carry_them_first(differential):
    raw = differential("reduce_transcript", LANGCHAIN + [
        {"role": "assistant", "tool_calls": [{"id": "c", "function": {"name": "f"}}]},
        {"role": "user", "content": "q"}], (("history", 0, 1, 40),), 100, 60)
    assert raw.warnings == [(1, 0, "unknown-role", ("human", 3)), (1, 1, "unknown-role", ("ai", 2)),
                      (1, 5, "unanswered-tool-call", "c")]
    # nothing trimmed: without a user turn the history is one group
    assert raw.steps == [("unchanged", "keep-groups-floor", 344, 344, 1, 1, 0)]


# ---------------------------------------------------------------------------------------------
# process_context, every mode, on each kernel


@pytest.mark.parametrize("options", [{}, listening()], ids=["one-call", "step-by-step"])
def test_a_langchain_dump_says_why_nothing_is_trimmed(pipeline_kernel, options):
    result = process_context(ContextPlan.from_messages(LANGCHAIN), TRIM, **options)
    report = result.report
    assert report.triggered and not report.target_reached
    assert [(s.status, s.reason) for s in report.steps] == [("unchanged", "keep-groups-floor")]
    assert [w[:4] for w in warnings_of(result)] == [
        ("unknown-role", "history", 0, None), ("unknown-role", "history", 1, None)]
    human, ai = (w.message for w in report.warnings)
    assert human == (
        f"role 'human' (3 messages, the first at index 0) is not one the accounting knows "
        f"({KNOWN}): roles are read as written, so no turn opens on these messages and none "
        "is paired as a tool result; map 'human' to 'user' before reducing")
    assert "role 'ai' (2 messages, the first at index 1)" in ai
    assert ai.endswith("map 'ai' to 'assistant' before reducing")
    # the roles as they were written
    assert [m["role"] for m in result.input] == [m["role"] for m in LANGCHAIN]


@pytest.mark.parametrize("role, hint", [
    ("gpt", "map 'gpt' to 'assistant'"), ("model", "map 'model' to 'assistant'"),
    ("USER", "map 'USER' to 'user'"), (" Assistant ", "map ' Assistant ' to 'assistant'"),
    ("ipython", "map 'ipython' to 'tool'"), ("critic", "map it to one of those"),
    ("", "map it to one of those"),
])
def test_the_hint_names_what_to_map_a_role_to(pipeline_kernel, role, hint):
    plan = ContextPlan.from_messages([{"role": role, "content": "x"}])
    (warning,) = process_context(plan, VALIDATE).report.warnings
    assert warning.message.startswith(f"role {role!r} (1 message, the first at index 0)")
    assert warning.message.endswith(hint + " before reducing")


def test_every_mode_warns(pipeline_kernel):
    plan = ContextPlan.from_messages(LANGCHAIN)
    fragments = [f.model_dump(by_alias=True, exclude_none=True) for f in plan.fragments]
    audit = {"fragments": fragments, "original": fragments}
    seen = []
    for doc, policy in ((plan, VALIDATE), (plan, TRIM), (audit, {
            "mode": "audit", "mutableFragmentIds": ["history"]})):
        one = warnings_of(process_context(doc, policy))
        assert one == warnings_of(process_context(doc, policy, **listening()))
        seen.append(one)
    assert seen[0] == seen[1] == seen[2] and len(seen[0]) == 2


def test_warnings_follow_the_result_and_come_before_the_pairing(pipeline_kernel):
    # A trim that removes the first "human" turn-less messages: the warning counts what is
    # left, at its index in the result; the pairing warnings come after.
    messages = [
        {"role": "human", "content": "old " * 20},
        {"role": "ai", "content": "old " * 20},
        {"role": "user", "content": "turn"},
        {"role": "ai", "content": "reply", "tool_calls": [{"id": "c1", "function": {
            "name": "f", "arguments": "{}"}}]},
        {"role": "human", "content": "later"},
        {"role": "user", "content": "question"},
    ]
    for options in ({}, listening()):
        result = process_context(ContextPlan.from_messages(messages), TRIM, **options)
        assert [(s.status, s.messages_removed) for s in result.report.steps] == [("applied", 2)]
        assert [w[:4] for w in warnings_of(result)] == [
            ("unknown-role", "history", 1, None), ("unknown-role", "history", 2, None),
            ("unanswered-tool-call", "history", 1, "c1")]
        assert "role 'ai' (1 message, the first at index 1)" in result.report.warnings[0].message


def test_responses_items_never_warn(pipeline_kernel):
    items = [{"type": "message", "role": "user", "content": "q"},
             {"type": "reasoning", "summary": []},
             {"type": "function_call", "call_id": "a", "name": "f", "arguments": "{}"},
             {"type": "function_call_output", "call_id": "a", "output": "ok"},
             {"type": "web_search_call", "id": "w"},
             {"type": "message", "role": "user", "content": "next"}]
    for options in ({}, listening()):
        assert process_context(ContextPlan.from_messages(items), TRIM, **options
                               ).report.warnings == []


@pytest.mark.parametrize("role", [5, None, ["user"]])
def test_a_role_that_is_not_a_string_is_still_an_error(pipeline_kernel, role):
    plan = {"fragments": [{"id": "history", "kind": "history",
                           "messages": [{"role": "user", "content": "a"},
                                        {"role": role, "content": "b"}]}]}
    for options in ({}, listening()):
        with pytest.raises(ContextPlanError) as info:
            process_context(plan, TRIM, **options)
        assert info.value.issues[0].code == "invalid-role"
        assert info.value.issues[0].path == "fragments[history].messages[1].role"


# ---------------------------------------------------------------------------------------------
# the command line's runner: byte path, object path, report entries and summary


def object_report(line: bytes, policy: dict[str, Any]) -> dict[str, Any]:
    """The object path's report of a transcript line, step by step."""
    doc = orjson.loads(line)
    result = process_context(ContextPlan.from_messages(doc["messages"]), policy, **listening())
    return {"id": doc.get("id"), "report": result.report.to_json_dict()}


def entries(results: list[runner.LineResult]) -> list[dict[str, Any]]:
    text = b"[" + b",\n".join(r.report for r in results if r.report is not None) + b"]"
    return [{k: v for k, v in e.items() if k != "line"} for e in json.loads(text)]


def transcript_line(k: int, messages: list[Any]) -> bytes:
    return orjson.dumps({"id": f"c{k}", "messages": messages})


RUNNER_LINES = [
    transcript_line(0, LANGCHAIN),
    transcript_line(1, [{"role": "user", "content": "plain " * 40},
                        {"role": "assistant", "content": "fine " * 20},
                        {"role": "user", "content": "q"}]),
    transcript_line(2, [{"role": "human", "content": "x" * 90},
                        {"role": "user", "content": "a turn"},
                        {"role": "ai", "content": "y" * 90},
                        {"role": "critic", "content": "z"},
                        {"role": "ai", "content": "w"},
                        {"role": "user", "content": "q"}]),
    # an id the kernel's template could write: the entry still comes from the records
    b'{"id":7,"messages":[{"role":"bot","content":"hi there, how can I help you today?"},'
    b'{"role":"user","content":"' + b"u" * 200 + b'"},{"role":"user","content":"q"}]}',
]


@pytest.mark.parametrize("policy", [TRIM, VALIDATE], ids=["trim", "validate"])
@pytest.mark.parametrize("runs", [False, True], ids=["per-line", "runs"])
def test_the_runner_reports_what_the_object_path_does(pipeline_kernel, policy, runs):
    on = run_lines(RUNNER_LINES, policy, True, runs=runs)
    off = run_lines(RUNNER_LINES, policy, False, runs=runs)
    assert sum(r.scanned for r in on) == len(RUNNER_LINES)  # every line read as bytes
    expected = [object_report(line, policy) for line in RUNNER_LINES]
    assert entries(on) == entries(off) == expected
    # a trim drops the turn-less lead group, and its roles with it
    count = {id(TRIM): 2 + 0 + 2 + 0, id(VALIDATE): 2 + 0 + 3 + 1}[id(policy)]
    assert sum(len(e["report"]["warnings"]) for e in expected) == count
    for results in (on, off):
        summary = runner.Summary()
        for r in results:
            summary.add(r)
        assert summary.warnings == {"unknown-role": count}
    # the outputs: the object path's input, roles untouched
    outputs = b"".join(bytes(r.output) for r in on if r.output is not None).splitlines()
    assert [orjson.loads(o)["messages"] for o in outputs] == [
        process_context(ContextPlan.from_messages(orjson.loads(line)["messages"]), policy
                        ).input for line in RUNNER_LINES]


@pytest.mark.parametrize("policy", [TRIM, VALIDATE], ids=["trim", "validate"])
def test_the_summary_counts_them_without_reports(pipeline_kernel, policy):
    # runs without reports: the kernel's figures carry the count per line
    results = list(runner.process_lines([[(k + 1, line) for k, line in enumerate(
        RUNNER_LINES)]], policy, runs=True))
    assert sum(r.scanned for r in results) == sum(r.lines for r in results) == len(RUNNER_LINES)
    summary = runner.Summary()
    for r in results:
        summary.add(r)
    count = sum(len(object_report(line, policy)["report"]["warnings"]) for line in RUNNER_LINES)
    assert count > 0
    assert summary.warnings == {"unknown-role": count}
    assert summary.to_json_dict()["warnings"] == {"unknown-role": count}


# ---------------------------------------------------------------------------------------------
# reduce_table's figures, columnar and per row


MESSAGE = pa.struct([("role", pa.string()), ("content", pa.string())])


def figure_warnings(out: Any) -> list[list[tuple[Any, ...]]]:
    return [[(w["code"], w["fragment_id"], w["index"], w["tool_call_id"]) for w in row]
            for row in out.figures.column("warnings").to_pylist()]


def report_warnings(rows: list[list[dict[str, Any]]], policy: dict[str, Any]
                    ) -> list[list[tuple[Any, ...]]]:
    return [[(w.code, w.fragment_id, w.index, w.tool_call_id) for w in process_context(
        ContextPlan.from_messages(row), policy, **listening()).report.warnings] for row in rows]


TABLE_ROWS = [json.loads(line)["messages"] for line in RUNNER_LINES[:3]] + [
    [{"role": "human", "content": "only"}], []]


@pytest.mark.parametrize("policy", [TRIM, VALIDATE], ids=["trim", "validate"])
def test_reduce_table_figures_on_the_columnar_path(pipeline_kernel, policy):
    table = pa.table({"messages": pa.array(TABLE_ROWS, type=pa.list_(MESSAGE))})
    out = reduce_table(table, policy)
    assert out.figures.column("path").to_pylist() == ["columnar"] * len(TABLE_ROWS)
    got = figure_warnings(out)
    assert got == report_warnings(TABLE_ROWS, policy)
    assert got[0] == [("unknown-role", "history", 0, None), ("unknown-role", "history", 1, None)]


def test_reduce_table_figures_row_by_row(pipeline_kernel):
    # A compress step needs objects: every row takes the object path.
    policy = {**TRIM, "steps": [*TRIM["steps"], {
        "id": "cut", "kind": "compress", "fragmentId": "history", "handlerId": "truncate",
        "targetChars": 10}]}
    from contextpolicy.handlers import truncate_messages

    handlers = {"truncate": truncate_messages(max_chars=20)}
    table = pa.table({"messages": pa.array(TABLE_ROWS, type=pa.list_(MESSAGE))})
    out = reduce_table(table, policy, handlers=handlers)
    assert out.figures.column("path").to_pylist() == ["object"] * len(TABLE_ROWS)
    assert figure_warnings(out) == [
        [(w.code, w.fragment_id, w.index, w.tool_call_id) for w in process_context(
            ContextPlan.from_messages(row), policy, handlers=handlers).report.warnings]
        for row in TABLE_ROWS]
    assert [c for row in figure_warnings(out) for c, *_ in row].count("unknown-role") == 5


# ---------------------------------------------------------------------------------------------
# every path against the object path, on generated transcripts


role = st.sampled_from(["user", "assistant", "system", "tool", "human", "ai", "critic", "",
                        "User"])
chat = st.fixed_dictionaries({"role": role, "content": st.text(max_size=30)})
rows = st.lists(st.lists(chat, max_size=10), min_size=1, max_size=6)
policies = st.sampled_from([VALIDATE, TRIM, {**TRIM, "triggerChars": 1, "targetInputChars": 1},
                            {**TRIM, "steps": [{**TRIM["steps"][0], "keepGroups": 0,
                                                "targetChars": 0}]}])


@SETTINGS
@given(rows, policies)
def test_every_path_gives_the_object_paths_warnings(pipeline_kernel, transcripts, policy):
    expected = []
    for messages in transcripts:
        plan = ContextPlan.from_messages(messages)
        slow = process_context(plan, policy, **listening()).report
        assert process_context(plan, policy).report == slow
        expected.append(slow.to_json_dict())
    lines = [transcript_line(k, m) for k, m in enumerate(transcripts)]
    on = run_lines(lines, policy, True)
    assert [e["report"] for e in entries(on)] == expected
    assert [e["report"] for e in entries(run_lines(lines, policy, True, runs=True))] == expected
    table = pa.table({"messages": pa.array(transcripts, type=pa.list_(MESSAGE))})
    assert figure_warnings(reduce_table(table, policy)) == [
        [(w["code"], w["fragmentId"], w["index"], w["toolCallId"]) for w in r["warnings"]]
        for r in expected]
