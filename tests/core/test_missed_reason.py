"""``missedReason``: why a triggered reduce missed its target, the same on every path.

Each reason is made by a plan built for it and checked on the object path, step by step and in
one kernel call; then transcripts that miss for each reason go through the JSONL runner (lines
read as bytes, with and without the report templates, against lines parsed into objects) and
through ``reduce_table`` (the columnar path and the per-row fallback), whose figures must say
what ``process_context`` says. Hypothesis drives the same comparisons over generated transcripts
and trim policies. Every test runs with each kernel as the live one.
"""

from __future__ import annotations

import json
from typing import Any

import orjson
import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from contextpolicy import ContextPlan, process_context
from contextpolicy.batch import reduce_table
from contextpolicy.cli.schema import json_schema
from contextpolicy.jsonl import runner
from contextpolicy.plan import Fragment
from tests.support.lines import run_lines
from tests.support.policies import (
    REASONS,
    SEED,
    TRANSCRIPTS,
    reduce_policy,
    transcript,
    trim,
    turns,
)
from tests.support.tables import MESSAGE, expected, filled

pytestmark = pytest.mark.usefixtures("pipeline_kernel")

SETTINGS = settings(max_examples=80, deadline=None,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
def compress(target: int, handler: str = "boom", fid: str = "history",
             sid: str = "c") -> dict[str, Any]:
    return {"id": sid, "kind": "compress", "fragmentId": fid, "handlerId": handler,
            "targetChars": target}


def plan_of(messages: list[dict[str, Any]], *extra: Fragment) -> ContextPlan:
    """The transcript's plan, with an empty history where it has none (as the command line
    gives it), and ``extra`` fragments after the system prompt."""
    plan = ContextPlan.from_messages(messages)
    fragments = list(plan.fragments)
    at = 1 if fragments and fragments[0].id == "system" else 0
    if not any(f.id == "history" for f in fragments):
        fragments.insert(at, Fragment(id="history", kind="history", messages=[]))
    fragments[at:at] = extra
    return ContextPlan(fragments=fragments)


def boom(request: Any) -> Any:
    raise RuntimeError("the model is down")


def both_runs(plan: ContextPlan, policy: dict[str, Any], **options: Any) -> Any:
    """The report of a run step by step and, when the call allows it, in one kernel call: the
    same report, byte for byte."""
    slow = process_context(plan, policy, on_event=lambda event: None, **options)
    fast = process_context(plan, policy, **options)
    assert json.dumps(fast.report_json()) == json.dumps(slow.report_json())
    assert fast.report == slow.report
    assert fast.report_json()["missedReason"] == fast.report.missed_reason
    return slow.report


# ---------------------------------------------------------------------------------------------
# the object path: one plan per reason


def test_a_protected_question_over_the_target_with_an_empty_history():
    # The newcomer's case: a 6,895-char question, nothing to trim.
    report = both_runs(plan_of([{"role": "user", "content": "x" * 6895}]),
                       reduce_policy(trim(1000, keep=2)))
    assert report.triggered and report.target_reached is False
    assert [(s.status, s.reason) for s in report.steps] == [("skipped", "fragment-empty")]
    assert report.missed_reason == "protected-over-target"


def test_a_fragment_no_step_names_counts_as_what_no_step_may_reduce():
    # A memory text of 1,600 chars (reducible, but no step names it): with the system prompt
    # and the question it is above the 1,500 target, whatever the trim does.
    memory = Fragment(id="memory", kind="memory", text="m" * 1600)
    report = both_runs(plan_of(transcript(turns(6)), memory), reduce_policy(trim(100)))
    assert report.steps[0].reason == "trimmed" and report.target_reached is False
    assert report.missed_reason == "protected-over-target"
    # Named by a step, the same fragment is the step's to reduce: the reason is the step's.
    named = reduce_policy(trim(100), compress(100, "boom", fid="memory"))
    report = both_runs(plan_of(transcript(turns(6)), memory), named, handlers={"boom": boom})
    assert report.missed_reason == "step-failed"


def test_the_keep_groups_floor():
    plan = plan_of(transcript(turns(10)))
    applied = both_runs(plan, reduce_policy(trim(500, keep=4)))
    assert [(s.status, s.reason) for s in applied.steps] == [("applied", "keep-groups-floor")]
    assert applied.missed_reason == "keep-groups-floor"
    unchanged = both_runs(plan, reduce_policy(trim(500, keep=10)))
    assert [(s.status, s.reason) for s in unchanged.steps] == [("unchanged",
                                                                "keep-groups-floor")]
    assert unchanged.missed_reason == "keep-groups-floor"


def test_steps_whose_targets_are_above_what_is_needed():
    # The trim reaches its own 3,000 chars; the input stays above 1,500.
    report = both_runs(plan_of(transcript(turns(10))), reduce_policy(trim(3000)))
    assert [(s.status, s.reason) for s in report.steps] == [("applied", "trimmed")]
    assert report.after.chars > 1500 and report.missed_reason == "no-step-could-act"


def test_nothing_to_compress():
    # keepGroups leaves every group verbatim: the handler is never called.
    policy = reduce_policy({**compress(100, "summary"), "keepGroups": 20})
    called = []
    report = process_context(plan_of(transcript(turns(10))), policy,
                             handlers={"summary": lambda r: called.append(r) or []}).report
    assert not called and report.steps[0].reason == "nothing-to-compress"
    assert report.missed_reason == "no-step-could-act"


def test_a_step_that_failed():
    events: list[Any] = []
    report = process_context(plan_of(transcript(turns(10))), reduce_policy(compress(100)),
                             handlers={"boom": boom}, on_event=events.append).report
    assert report.steps[0].status == "failed" and report.missed_reason == "step-failed"
    # The last event says it too.
    assert events[-1].type == "context.completed"
    assert events[-1].data["missedReason"] == "step-failed"


def test_precedence():
    # The floor and a failure: the failure. Protected content over the target and a failure:
    # the protected content (no step could have reached the target).
    policy = reduce_policy(trim(500, keep=4), compress(100))
    report = process_context(plan_of(transcript(turns(10))), policy,
                             handlers={"boom": boom}).report
    assert [s.reason for s in report.steps] == ["keep-groups-floor", "handler-error"]
    assert report.missed_reason == "step-failed"
    report = process_context(plan_of(transcript(turns(10), question=2000)), policy,
                             handlers={"boom": boom}).report
    assert report.missed_reason == "protected-over-target"
    report = both_runs(plan_of(transcript(turns(10), question=2000)),
                       reduce_policy(trim(500, keep=4)))
    assert report.steps[0].reason == "keep-groups-floor"
    assert report.missed_reason == "protected-over-target"


def test_tokens_and_chars_targets():
    # Two tokens a char. The chars target is met after the trim; the tokens target is not, and
    # the question alone is above it: the reason is the tokens'.
    policy = reduce_policy(trim(0), trigger=1000, target=800, triggerTokens=2000,
                           targetInputTokens=1100)
    plan = plan_of(transcript(turns(3), question=600))
    report = process_context(plan, policy, counter=lambda text: 2 * len(text)).report
    assert report.after.chars <= 800 < report.after.tokens
    assert report.missed_reason == "protected-over-target"
    # Over the chars target only: the same.
    report = process_context(plan, reduce_policy(trim(0), trigger=1000, target=500,
                                                 triggerTokens=6000, targetInputTokens=5000),
                             counter=lambda text: 2 * len(text)).report
    assert report.after.tokens <= 5000 and report.missed_reason == "protected-over-target"
    # Above the tokens target only, and not for protected content: the floor.
    report = process_context(plan_of(transcript(turns(3))),
                             reduce_policy(trim(0, keep=2), trigger=1500, target=1500,
                                           triggerTokens=2000, targetInputTokens=2000),
                             counter=lambda text: 2 * len(text)).report
    assert report.after.chars <= 1500 and report.after.tokens > 2000
    assert report.missed_reason == "keep-groups-floor"


def test_a_framing_counter_counts_what_no_step_may_reduce_as_one_input():
    class Framed:
        name = "framed"

        def count_text(self, text: str) -> int:
            return len(text)

        def count_messages(self, messages: list[dict[str, Any]], fragment_id: Any = None) -> int:
            # 500 tokens of framing for any input: alone above the 400 target.
            return 500 + sum(len(m.get("content") or "") for m in messages)

    policy = reduce_policy(trim(0), trigger=1000, target=None, triggerTokens=600,
                           targetInputTokens=400)
    report = process_context(plan_of(transcript(turns(3), question=5)), policy,
                             counter=Framed()).report
    assert report.target_reached is False and report.missed_reason == "protected-over-target"


@pytest.mark.parametrize("policy", [
    reduce_policy(trim(100), trigger=10**9, target=None),  # not triggered
    reduce_policy(trim(100, keep=0)),  # reached
    {"mode": "validate"},
])
def test_no_reason_unless_triggered_and_missed(policy):
    report = both_runs(plan_of(transcript(turns(10))), policy)
    assert report.missed_reason is None
    assert report.target_reached is not False or not report.triggered


def test_the_report_schema_names_the_reasons():
    schema = json_schema("report")
    field = schema["properties"]["missedReason"]
    choices = next(s for s in field["anyOf"] if "enum" in s)["enum"]
    assert choices == list(REASONS)
    assert {"type": "null"} in field["anyOf"]


# ---------------------------------------------------------------------------------------------
# the JSONL runner and reduce_table: transcripts that miss for each reason

POLICIES = [SEED, reduce_policy(trim(3000)),
            reduce_policy(trim(500, keep=4), trim(0, keep=1, sid="t2")),
            reduce_policy(trim(100, grouping="message"), trigger=500, target=None),
            {"mode": "validate"}]


def lines_of(transcripts: dict[str, list[dict[str, Any]]]) -> list[bytes]:
    return [orjson.dumps({"id": name, "messages": messages})
            for name, messages in transcripts.items()]


def check_runner(lines: list[bytes], policy: dict[str, Any]) -> dict[str, int]:
    """Lines read as bytes (one result a line, and runs whose reports the kernel writes from
    the policy's template), against lines parsed into objects: the same reports, figures and
    summary. Returns the summary's missed reasons."""
    objects = run_lines(lines, policy, False)
    summaries = []
    for results in (run_lines(lines, policy, True), run_lines(lines, policy, True, runs=True),
                    objects):
        summary = runner.Summary()
        for r in results:
            summary.add(r)
        doc = summary.to_json_dict()
        for key in ("seconds", "megabytesPerSecond", "conversationsPerSecond", "paths"):
            doc.pop(key)
        summaries.append((doc, b",\n".join(r.report for r in results if r.report)))
    assert summaries[0] == summaries[1] == summaries[2]
    assert sum(r.scanned for r in run_lines(lines, policy, True)) == len(lines)
    for line, result in zip(lines, objects, strict=True):
        doc = orjson.loads(line)
        report = process_context(plan_of(doc["messages"]) if policy["mode"] == "reduce"
                                 else ContextPlan.from_messages(doc["messages"]), policy).report
        entry = orjson.loads(result.report)["report"]
        assert entry["missedReason"] == report.missed_reason
        assert result.figures.missed == ([report.missed_reason] if report.missed_reason else [])
        assert result.figures.reduced == (report.after.chars < report.before.chars
                                          or report.after.messages < report.before.messages)
    doc = summaries[0][0]
    assert doc["missedTarget"] == sum(doc["missedReasons"].values())
    assert list(doc["missedReasons"]) == list(REASONS)
    return doc["missedReasons"]


def test_the_runner_gives_each_reason_as_the_object_path_does():
    counts = check_runner(lines_of(TRANSCRIPTS), SEED)
    # protected and both: the question alone is over 1,500; long: two turns kept, 1,600 chars
    assert counts == {"protected-over-target": 2, "step-failed": 0, "keep-groups-floor": 1,
                      "no-step-could-act": 0}
    # long and reached: the history trimmed to 3,000 chars or less, the input still over 1,500
    counts = check_runner(lines_of(TRANSCRIPTS), reduce_policy(trim(3000)))
    assert counts == {"protected-over-target": 2, "step-failed": 0, "keep-groups-floor": 0,
                      "no-step-could-act": 2}


@pytest.mark.parametrize("policy", POLICIES, ids=range(len(POLICIES)))
def test_the_runner_on_every_policy(policy):
    check_runner(lines_of(TRANSCRIPTS), policy)


def test_a_line_with_warnings_is_written_in_full_with_its_reason():
    # A pairing warning: no template; the report is rendered from the line's records.
    orphan = [{"role": "tool", "tool_call_id": "zz", "content": "r" * 300}]
    lines = lines_of({"orphan": transcript(orphan + turns(10, 400)),
                      "orphan-protected": [*orphan, {"role": "user", "content": "x" * 3000}]})
    counts = check_runner(lines, SEED)
    assert counts["keep-groups-floor"] == counts["protected-over-target"] == 1


def test_reduce_table_gives_each_reason_as_the_object_path_does():
    rows = list(TRANSCRIPTS.values())
    for policy in POLICIES:
        table = pa.table({"messages": pa.array([filled(r, ["role", "content"]) for r in rows],
                                               type=pa.list_(MESSAGE))})
        out = reduce_table(table, policy)
        got = out.figures.column("missed_reason").to_pylist()
        assert got == [expected(r, policy).report.missed_reason for r in rows]
        assert out.figures.schema.field("missed_reason").type == pa.string()
        assert set(out.figures.column("path").to_pylist()) == {"columnar"}
    # The per-row fallback (content as Arrow's JSON is read row by row): the same reasons.
    storage = pa.list_(pa.struct([("role", pa.string()), ("content", pa.string())]))
    typed = pa.list_(pa.struct([("role", pa.string()), ("content", pa.json_())]))
    as_json = [[{"role": m["role"], "content": json.dumps(m["content"])} for m in r]
               for r in rows]
    out = reduce_table(pa.table({"messages": pa.array(as_json, type=storage).cast(typed)}), SEED)
    assert set(out.figures.column("path").to_pylist()) == {"object"}
    assert out.figures.column("missed_reason").to_pylist() == [
        expected(r, SEED).report.missed_reason for r in rows] == [
        "protected-over-target", "keep-groups-floor", None, None, "protected-over-target"]


# ---------------------------------------------------------------------------------------------
# generated transcripts and trim policies

words = st.sampled_from(["", "ok", "订单", "😀" * 20, "x" * 300, "y" * 1200])
chat = st.lists(st.fixed_dictionaries({
    "role": st.sampled_from(["system", "user", "assistant", "user"]), "content": words,
}), max_size=16)
trims = st.lists(st.builds(trim, st.integers(0, 3000), st.integers(0, 4),
                           st.sampled_from(["user-turn", "message"])), min_size=1, max_size=3)


@st.composite
def trim_policies(draw: Any) -> dict[str, Any]:
    steps = [dict(s, id=f"t{k}") for k, s in enumerate(draw(trims))]
    trigger = draw(st.integers(1, 4000))
    target = draw(st.none() | st.integers(1, trigger))
    return reduce_policy(*steps, trigger=trigger, target=target)


@SETTINGS
@given(st.lists(chat, min_size=1, max_size=6), trim_policies())
def test_generated_transcripts_on_every_path(transcripts, policy):
    lines = lines_of({f"c{k}": m for k, m in enumerate(transcripts)})
    check_runner(lines, policy)
    rows = [filled(m, ["role", "content"]) for m in transcripts]
    out = reduce_table(pa.table({"messages": pa.array(rows, type=pa.list_(MESSAGE))}), policy)
    assert out.figures.column("missed_reason").to_pylist() == [
        expected(r, policy).report.missed_reason for r in rows]
    for messages in transcripts:
        both_runs(plan_of(messages), policy)
