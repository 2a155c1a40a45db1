"""A first turn: a reduce step on a history that is absent or holds no message is skipped.

``ContextPlan.from_messages`` leaves out what a transcript does not have: a first turn is a
system prompt and a question, with no history. A reduce step whose ``fragmentId`` is
``history`` on a plan without one is ``skipped`` with reason ``fragment-absent``; a step on a
messages fragment that holds no message (an empty history, or one an earlier step emptied) is
``skipped`` with ``fragment-empty``; any other fragment a step names must be there (a typo is
still ``unknown-fragment``). One rule on every path, so one input gives one report everywhere:
``process_context`` in one kernel call and step by step (sync and async), the JSONL runner's
byte path (its report entries from the kernel's template and from Python) and object path,
the command line, and ``reduce_table``. Both kernels, each as the live one.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

import orjson
import pyarrow as pa
import pytest

from contextpolicy import (
    ContextContractError,
    ContextPlan,
    ContextPolicyError,
    aprocess_context,
    process_context,
    validate_context_policy,
)
from contextpolicy.batch import reduce_table
from contextpolicy.handlers import truncate_messages
from contextpolicy.implementations.base import PolicyOutcome
from contextpolicy.jsonl import runner
from contextpolicy.report import StepReport
from tests.support.cli import run
from tests.support.lines import run_lines

pytestmark = pytest.mark.usefixtures("pipeline_kernel")

SYSTEM = {"role": "system", "content": "You are a careful assistant. " * 4}
QUESTION = {"role": "user", "content": "How do I reset my password? " * 3}
FIRST_TURNS = [[SYSTEM, QUESTION], [QUESTION], [SYSTEM], []]


def trim(sid: str = "trim", fid: str = "history", target: int = 40, keep: int = 1,
         grouping: str = "user-turn") -> dict[str, Any]:
    return {"id": sid, "kind": "trim", "fragmentId": fid, "field": "messages",
            "grouping": {"kind": grouping}, "keepGroups": keep, "targetChars": target}


def reduce_policy(*steps: dict[str, Any], trigger: int = 50, target: int = 30) -> dict[str, Any]:
    return {"mode": "reduce", "triggerChars": trigger, "targetInputChars": target,
            "steps": list(steps)}


TRIM = reduce_policy(trim())
COMPRESS = reduce_policy({"id": "cut", "kind": "compress", "fragmentId": "history",
                          "handlerId": "truncate", "targetChars": 10})
HANDLERS = {"truncate": truncate_messages(max_chars=20)}


def listening(events: list[Any] | None = None) -> dict[str, Any]:
    """A listener: process_context then runs step by step (never in one kernel call)."""
    return {"on_event": (events.append if events is not None else lambda e: None)}


def steps_of(result: Any) -> list[tuple[Any, ...]]:
    return [(s.id, s.status, s.reason, s.chars_before, s.chars_after, s.groups_before,
             s.messages_removed) for s in result.report.steps]


# ---------------------------------------------------------------------------------------------
# process_context


@pytest.mark.parametrize("messages", FIRST_TURNS[:2], ids=["system+question", "question"])
def test_a_first_turn_skips_the_steps_on_its_history(messages):
    plan = ContextPlan.from_messages(messages)
    assert "history" not in [f.id for f in plan.fragments]
    events: list[Any] = []
    results = [process_context(plan, TRIM), process_context(plan, TRIM, **listening(events)),
               asyncio.run(aprocess_context(plan, TRIM))]
    for result in results:
        report = result.report
        assert report.triggered and not report.target_reached
        assert steps_of(result) == [("trim", "skipped", "fragment-absent", None, None, None, 0)]
        assert [f.id for f in report.fragments] == [f.id for f in plan.fragments]
        assert result.input == messages
        assert report == results[0].report
    skipped = [e.data["step"] for e in events if e.type == "step.skipped"]
    assert [(s["id"], s["status"], s["reason"]) for s in skipped] == [
        ("trim", "skipped", "fragment-absent")]


def test_a_compress_step_too():
    plan = ContextPlan.from_messages([SYSTEM, QUESTION])
    result = process_context(plan, COMPRESS, handlers=HANDLERS)
    (step,) = result.report.steps
    assert (step.status, step.reason, step.handler_id, step.chars_before) == (
        "skipped", "fragment-absent", "truncate", None)


def test_not_triggered_and_target_reached_come_first():
    plan = ContextPlan.from_messages([SYSTEM, QUESTION])
    policy = reduce_policy(trim(), trigger=10_000, target=10_000)
    for options in ({}, listening()):
        assert steps_of(process_context(plan, policy, **options))[0][1:3] == (
            "skipped", "not-triggered")
    # an emptied history after the target is met: target-reached
    emptied = ContextPlan.from_messages([SYSTEM, {"role": "assistant", "content": "x" * 200},
                                         QUESTION])
    two = reduce_policy(trim("all", target=0, keep=0), trim("again"), trigger=300, target=250)
    for options in ({}, listening()):
        assert [s[1:3] for s in steps_of(process_context(emptied, two, **options))] == [
            ("applied", "trimmed"), ("skipped", "target-reached")]


@pytest.mark.parametrize("fid", ["histroy", "memory", "History"])
def test_any_other_missing_fragment_is_still_an_error(fid):
    plan = ContextPlan.from_messages([SYSTEM, QUESTION])
    policy = reduce_policy(trim(fid=fid))
    for options in ({}, listening()):
        with pytest.raises(ContextPolicyError) as info:
            process_context(plan, policy, **options)
        assert [(i.path, i.code) for i in info.value.issues] == [
            ("steps[0].fragmentId", "unknown-fragment")]
        assert f"no fragment {fid!r} in the plan (fragments: question, system)" in str(
            info.value)


def test_validate_context_policy_takes_the_same_rule():
    assert validate_context_policy(TRIM, fragments=["system", "question"]).mode == "reduce"
    with pytest.raises(ContextPolicyError) as info:
        validate_context_policy(reduce_policy(trim(fid="histroy")),
                                fragments=["system", "question"])
    assert info.value.codes == ["unknown-fragment"]
    # an audit's mutable ids are no reduce steps: every one must be there
    with pytest.raises(ContextPolicyError) as info:
        validate_context_policy({"mode": "audit", "mutableFragmentIds": ["history"]},
                                fragments=["system", "question"])
    assert info.value.codes == ["unknown-fragment"]


def empty_history_plan() -> ContextPlan:
    return ContextPlan(fragments=[
        {"id": "system", "kind": "system", "messages": [SYSTEM]},
        {"id": "history", "kind": "history", "messages": []},
        {"id": "question", "kind": "question", "messages": [QUESTION]},
    ])


def test_a_history_without_messages_is_skipped_as_empty():
    plan = empty_history_plan()
    results = [process_context(plan, TRIM), process_context(plan, TRIM, **listening())]
    for result in results:
        assert steps_of(result) == [("trim", "skipped", "fragment-empty", None, None, None, 0)]
        assert [f.id for f in result.report.fragments] == ["system", "history", "question"]
    assert results[0].report == results[1].report
    (step,) = process_context(plan, COMPRESS, handlers=HANDLERS).report.steps
    assert (step.status, step.reason) == ("skipped", "fragment-empty")


def test_a_history_an_earlier_step_emptied_is_skipped_as_empty():
    plan = ContextPlan.from_messages([SYSTEM, {"role": "assistant", "content": "x" * 200},
                                      QUESTION])
    policy = reduce_policy(trim("all", target=0, keep=0), trim("again"), trigger=50, target=1)
    results = [process_context(plan, policy), process_context(plan, policy, **listening())]
    for result in results:
        assert steps_of(result) == [
            ("all", "applied", "trimmed", 200, 0, 1, 1),
            ("again", "skipped", "fragment-empty", None, None, None, 0)]
    assert results[0].report == results[1].report


def test_a_custom_implementation_may_skip_the_absent_history():
    plan = ContextPlan.from_messages([SYSTEM, QUESTION])

    def skipping(ctx):
        return PolicyOutcome(fragments=list(ctx.plan.fragments), triggered=True, steps=[
            StepReport(id="trim", kind="trim", fragment_id="history", status="skipped",
                       reason="fragment-absent", target_chars=40)])

    result = process_context(plan, TRIM, implementations={"reduce": skipping})
    assert steps_of(result) == [("trim", "skipped", "fragment-absent", None, None, None, 0)]
    assert result.report.warnings == []

    def claiming(ctx):  # a step that ran on a fragment the plan does not hold
        return PolicyOutcome(fragments=list(ctx.plan.fragments), triggered=True, steps=[
            StepReport(id="trim", kind="trim", fragment_id="history", status="unchanged",
                       reason="within-target", target_chars=40)])

    with pytest.raises(ContextContractError, match="names fragment 'history'"):
        process_context(plan, TRIM, implementations={"reduce": claiming})


# ---------------------------------------------------------------------------------------------
# the JSONL runner and the command line: the object path's report, no history invented


def object_entry(line: bytes, policy: dict[str, Any], handlers: Any = None) -> dict[str, Any]:
    doc = orjson.loads(line)
    result = process_context(ContextPlan.from_messages(doc["messages"]), policy,
                             handlers=handlers, **listening())
    return {"id": doc.get("id"), "report": result.report.to_json_dict()}


def entries(results: list[runner.LineResult]) -> list[dict[str, Any]]:
    text = b"[" + b",\n".join(r.report for r in results if r.report is not None) + b"]"
    return [{k: v for k, v in e.items() if k != "line"} for e in json.loads(text)]


LINES = [orjson.dumps({"id": k, "messages": m}) for k, m in enumerate(FIRST_TURNS)] + [
    # a history the first step empties: the second finds it empty
    orjson.dumps({"id": "emptied", "messages": [SYSTEM, {"role": "assistant", "content": "x" * 90},
                                                QUESTION]}),
    # a longer conversation, trimmed
    orjson.dumps({"id": "long", "messages": [
        SYSTEM, {"role": "user", "content": "a" * 80}, {"role": "assistant", "content": "b" * 80},
        {"role": "user", "content": "c" * 10}, {"role": "assistant", "content": "d"}, QUESTION]}),
]
RUNNER_POLICIES = [TRIM, reduce_policy(trim("all", target=0, keep=0), trim("again")),
                   reduce_policy(trim(), trigger=10_000, target=10_000), {"mode": "validate"}]


@pytest.mark.parametrize("policy", RUNNER_POLICIES, ids=range(len(RUNNER_POLICIES)))
@pytest.mark.parametrize("runs", [False, True], ids=["per-line", "runs"])
def test_the_runner_reports_what_process_context_does(policy, runs):
    expected = [object_entry(line, policy) for line in LINES]
    on = run_lines(LINES, policy, True, runs=runs)
    off = run_lines(LINES, policy, False, runs=runs)
    assert sum(r.scanned for r in on) == len(LINES)
    assert entries(on) == entries(off) == expected
    if policy is TRIM:
        assert [[(s["status"], s["reason"]) for s in e["report"]["steps"]]
                for e in expected[:2]] == [[("skipped", "fragment-absent")]] * 2
        assert [[f["id"] for f in e["report"]["fragments"]] for e in expected[:4]] == [
            ["system", "question"], ["question"], ["system"], []]


def test_the_runner_with_a_handler_reports_what_process_context_does():
    expected = [object_entry(line, COMPRESS, HANDLERS) for line in LINES]
    results = list(runner.process_lines([[(k + 1, line) for k, line in enumerate(LINES)]],
                                        COMPRESS, with_reports=True, handlers=HANDLERS))
    assert entries(results) == expected
    assert expected[0]["report"]["steps"][0]["reason"] == "fragment-absent"


def test_the_command_line_invents_no_history(tmp_path):
    (tmp_path / "policy.json").write_text(json.dumps(TRIM))
    (tmp_path / "in.jsonl").write_bytes(b"\n".join(LINES) + b"\n")
    result = run("reduce", "in.jsonl", "--policy", "policy.json", "-o", "out.jsonl",
                 "--report", "report.json", "-q", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    report = json.loads((tmp_path / "report.json").read_text())
    conversations = report["conversations"]
    expected = [object_entry(line, TRIM) for line in LINES]
    for got, want in zip(conversations, expected, strict=True):
        # the console script's live kernel is the default one
        want["report"]["kernel"] = got["report"]["kernel"]
        assert {k: v for k, v in got.items() if k != "line"} == want
    assert [json.loads(x)["messages"] for x in (tmp_path / "out.jsonl").read_text().splitlines()
            ] == [process_context(ContextPlan.from_messages(orjson.loads(line)["messages"]),
                                  TRIM).input for line in LINES]


# ---------------------------------------------------------------------------------------------
# reduce_table


MESSAGE = pa.struct([("role", pa.string()), ("content", pa.string())])
ROWS = [orjson.loads(line)["messages"] for line in LINES]


def figures_of(out: Any) -> list[tuple[Any, ...]]:
    return [(f["chars_before"], f["chars_after"], f["messages_before"], f["messages_after"],
             f["groups_removed"], f["triggered"], f["target_reached"], f["warnings"])
            for f in out.figures.to_pylist()]


def expected_figures(policy: dict[str, Any], **options: Any) -> list[tuple[Any, ...]]:
    out = []
    for row in ROWS:
        report = process_context(ContextPlan.from_messages(row), policy, **options).report
        groups = sum((s.groups_before or 0) - (s.groups_after or 0) for s in report.steps
                     if s.status == "applied" and s.kind == "trim")
        out.append((report.before.chars, report.after.chars, report.before.messages,
                    report.after.messages, groups, report.triggered, report.target_reached,
                    []))
    return out


@pytest.mark.parametrize("policy", RUNNER_POLICIES[:3], ids=range(3))
def test_reduce_table_rows_mean_what_process_context_means(policy):
    table = pa.table({"messages": pa.array(ROWS, type=pa.list_(MESSAGE))})
    out = reduce_table(table, policy)
    assert out.figures.column("path").to_pylist() == ["columnar"] * len(ROWS)
    assert figures_of(out) == expected_figures(policy)
    assert out.table.column("messages").to_pylist() == [
        process_context(ContextPlan.from_messages(row), policy).input for row in ROWS]


def test_reduce_table_row_by_row_too():
    table = pa.table({"messages": pa.array(ROWS, type=pa.list_(MESSAGE))})
    out = reduce_table(table, COMPRESS, handlers=HANDLERS)
    assert out.figures.column("path").to_pylist() == ["object"] * len(ROWS)
    assert figures_of(out) == expected_figures(COMPRESS, handlers=HANDLERS)
