"""The summary of ``contextpolicy reduce``: whether the policy worked (triggered, reduced,
missed target and why), the paths the input actually took, and a note instead of a table when
no conversation was read. Run as the installed console script, on the compiled kernel and on
the twin (``CONTEXTPOLICY_PURE_PYTHON=1``)."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import orjson
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from tests.support.cli import run
from tests.support.policies import REASONS, SEED, TRANSCRIPTS, reduce_policy, trim

KERNEL_ENV = {"c": {}, "py": {"CONTEXTPOLICY_PURE_PYTHON": "1"}}


@pytest.fixture(params=list(KERNEL_ENV))
def env(request: pytest.FixtureRequest) -> dict[str, str]:
    return KERNEL_ENV[request.param]


def table_rows(stderr: bytes) -> dict[str, str]:
    """The summary table's rows, figure to value."""
    rows = {}
    for line in stderr.decode().splitlines():
        cells = [c.strip() for c in line.strip("│ ").split("│")]
        if line.startswith("│") and len(cells) == 2:
            rows[cells[0]] = cells[1]
    return rows


def write_lines(path: Path, docs: list[dict[str, Any]]) -> None:
    path.write_bytes(b"".join(orjson.dumps(d) + b"\n" for d in docs))


def corpus() -> list[dict[str, Any]]:
    # Each transcript of the reasons' tests, three times over.
    return [{"id": f"{name}-{k}", "messages": messages}
            for k in range(3) for name, messages in TRANSCRIPTS.items()]


def expected_summary(report: dict[str, Any]) -> dict[str, Any]:
    """The summary's figures of whether the policy worked, counted from the conversations'
    own reports."""
    reports = [c["report"] for c in report["conversations"]]
    missed = [r["missedReason"] for r in reports if r["missedReason"] is not None]
    return {
        "triggered": sum(r["triggered"] for r in reports),
        "reduced": sum(r["after"]["chars"] < r["before"]["chars"]
                       or r["after"]["messages"] < r["before"]["messages"] for r in reports),
        "missedTarget": sum(r["triggered"] and r["targetReached"] is False for r in reports),
        "missedReasons": {reason: missed.count(reason) for reason in REASONS},
    }


@pytest.mark.parametrize("jobs", [1, 2])
def test_the_table_says_whether_the_policy_worked(tmp_path, env, jobs):
    write_lines(tmp_path / "in.jsonl", corpus())
    (tmp_path / "policy.json").write_text(json.dumps(SEED))
    done = run("reduce", "in.jsonl", "--policy", "policy.json", "--report", "report.json",
               "--jobs", jobs, cwd=tmp_path, env=env)
    assert done.returncode == 0, done.stderr
    report = json.loads((tmp_path / "report.json").read_text())
    summary = report["summary"]
    wanted = expected_summary(report)
    assert {key: summary[key] for key in wanted} == wanted
    assert wanted["missedReasons"] == {"protected-over-target": 6, "step-failed": 0,
                                       "keep-groups-floor": 3, "no-step-could-act": 0}
    assert wanted["missedTarget"] == 9 and wanted["triggered"] == 12
    rows = table_rows(done.stderr)
    assert (rows["triggered"], rows["reduced"], rows["missed target"]) == (
        "12", str(wanted["reduced"]), "9")
    assert rows["missed target: protected-over-target"] == "6"
    assert rows["missed target: keep-groups-floor"] == "3"
    # Reasons no conversation had are not rows; nor is a count over conversations that did not
    # trigger, nor a path no line took.
    assert "missed target: step-failed" not in rows and "target reached" not in rows
    assert rows["lines read as bytes"] == "15" and "lines parsed" not in rows
    assert not any(key.startswith("rows:") for key in rows)
    # the rest of the table is kept
    for key in ("conversations", "skipped lines", "chars before", "chars after",
                "messages before", "messages after", "messages removed", "groups removed",
                "input", "throughput"):
        assert key in rows, key


def test_a_step_that_could_not_act_is_counted_with_its_reason(tmp_path, env):
    handlers = tmp_path / "handlers.json"
    handlers.write_text(json.dumps({"short": {"handler": "truncate-messages",
                                              "maxChars": 10**6}}))
    policy = reduce_policy({"id": "c", "kind": "compress", "fragmentId": "history",
                            "handlerId": "short", "targetChars": 100})
    (tmp_path / "policy.json").write_text(json.dumps(policy))
    write_lines(tmp_path / "in.jsonl", corpus())
    done = run("reduce", "in.jsonl", "--policy", "policy.json", "--handlers", handlers,
               "--report", "report.json", cwd=tmp_path, env=env)
    assert done.returncode == 0, done.stderr
    report = json.loads((tmp_path / "report.json").read_text())
    wanted = expected_summary(report)
    assert {key: report["summary"][key] for key in wanted} == wanted
    # A truncation to a million chars has nothing to cut: the step waits (unchanged), it does
    # not fail, and the runs that missed their target say no step could act.
    assert wanted["missedReasons"]["step-failed"] == 0
    assert wanted["missedReasons"]["no-step-could-act"] > 0
    rows = table_rows(done.stderr)
    assert rows["missed target: no-step-could-act"] == str(
        wanted["missedReasons"]["no-step-could-act"])
    assert "missed target: step-failed" not in rows
    assert rows["lines parsed"] == "15" and "lines read as bytes" not in rows


def test_parquet_input_says_its_rows_by_path(tmp_path, env):
    rows_in = [d["messages"] for d in corpus()]
    pq.write_table(pa.table({"id": [d["id"] for d in corpus()], "messages": rows_in}),
                   tmp_path / "in.parquet")
    write_lines(tmp_path / "in.jsonl", corpus())
    (tmp_path / "policy.json").write_text(json.dumps(SEED))
    done = run("reduce", "in.parquet", "--policy", "policy.json", "--report", "report.json",
               "-o", "out.parquet", cwd=tmp_path, env=env)
    assert done.returncode == 0, done.stderr
    lines = run("reduce", "in.jsonl", "--policy", "policy.json", "--report", "lines.json",
                cwd=tmp_path, env=env)
    summary = json.loads((tmp_path / "report.json").read_text())["summary"]
    from_lines = json.loads((tmp_path / "lines.json").read_text())["summary"]
    for key in ("triggered", "reduced", "missedTarget", "missedReasons", "targetReached"):
        assert summary[key] == from_lines[key], key
    assert "paths" not in summary
    assert summary["columnarRows"] == 15 and summary["objectRows"] == 0
    rows = table_rows(done.stderr)
    assert rows["rows: columnar path"] == "15" and "rows: object path" not in rows
    assert "lines parsed" not in rows and "lines read as bytes" not in rows
    assert rows["skipped rows"] == "0" and rows["missed target"] == "9"
    assert table_rows(lines.stderr)["missed target"] == "9"


def empty_inputs(tmp_path: Path) -> dict[str, Path]:
    (tmp_path / "empty.jsonl").write_bytes(b"")
    (tmp_path / "blank.jsonl").write_bytes(b"\n  \n\t\n")
    message = pa.struct([("role", pa.string()), ("content", pa.string())])
    pq.write_table(pa.table({"id": pa.array([], pa.string()),
                             "messages": pa.array([], pa.list_(message))}),
                   tmp_path / "empty.parquet")
    return {name: tmp_path / name for name in ("empty.jsonl", "blank.jsonl", "empty.parquet")}


@pytest.mark.parametrize("name", ["empty.jsonl", "blank.jsonl", "empty.parquet", "-"])
def test_no_conversation_read_is_a_note(tmp_path, env, name):
    empty_inputs(tmp_path)
    (tmp_path / "policy.json").write_text(json.dumps(SEED))
    done = run("reduce", name, "--policy", "policy.json", "--report", "report.json", "-o",
               "out.jsonl", cwd=tmp_path, env=env, stdin=b"" if name == "-" else None)
    assert done.returncode == 0, done.stderr
    text = done.stderr.decode()
    what = "row" if name.endswith(".parquet") else r"line \(blank lines aside\)"
    shown = "<stdin>" if name == "-" else name
    assert re.search(rf"no conversation was read from {re.escape(shown)}: it holds no {what}",
                     text), text
    assert table_rows(done.stderr) == {}  # no table of zeros
    assert "wrote out.jsonl and report.json" in text
    report = json.loads((tmp_path / "report.json").read_text())
    assert report["conversations"] == []
    assert report["summary"]["conversations"] == report["summary"]["missedTarget"] == 0
    assert (tmp_path / "out.jsonl").read_bytes() == b""
    # Quiet: nothing said.
    quiet = run("reduce", name, "--policy", "policy.json", "-q", cwd=tmp_path, env=env,
                stdin=b"" if name == "-" else None)
    assert quiet.returncode == 0 and quiet.stderr == b""


def test_lines_that_were_all_skipped_are_a_table(tmp_path, env):
    # Lines were read, none was a conversation: the table says how many were skipped.
    (tmp_path / "in.jsonl").write_bytes(b"not json\n[1]\n")
    (tmp_path / "policy.json").write_text(json.dumps(SEED))
    done = run("reduce", "in.jsonl", "--policy", "policy.json", "--on-error", "skip",
               cwd=tmp_path, env=env)
    assert done.returncode == 0, done.stderr
    rows = table_rows(done.stderr)
    assert rows["skipped lines"] == "2" and rows["conversations"] == "0"
    assert rows["lines parsed"] == "2"


def test_the_example_run_counts_what_it_did():
    done = run("reduce")
    assert done.returncode == 0, done.stderr
    rows = table_rows(done.stderr)
    missed = sum(int(v.replace(",", "")) for k, v in rows.items()
                 if k.startswith("missed target: "))
    assert int(rows["missed target"]) == missed
    assert int(rows["reduced"]) <= int(rows["triggered"]) <= int(rows["conversations"])


def test_the_triggered_run_that_missed_is_no_longer_counted_as_reached(tmp_path, env):
    # 2 conversations over the trigger, one missing its target; 3 below it. Before, the table
    # said "triggered 2, target reached 4".
    docs = [{"id": "over", "messages": TRANSCRIPTS["protected"]},
            {"id": "ok", "messages": TRANSCRIPTS["reached"]}]
    docs += [{"id": f"small{k}", "messages": TRANSCRIPTS["untriggered"]} for k in range(3)]
    write_lines(tmp_path / "in.jsonl", docs)
    (tmp_path / "policy.json").write_text(json.dumps(reduce_policy(trim(1000, keep=2))))
    done = run("reduce", "in.jsonl", "--policy", "policy.json", cwd=tmp_path, env=env)
    rows = table_rows(done.stderr)
    assert (rows["triggered"], rows["reduced"], rows["missed target"]) == ("2", "1", "1")
    assert rows["missed target: protected-over-target"] == "1"
