"""``contextpolicy replay``: policies priced on recorded sessions, on both kernels
(``CONTEXTPOLICY_PURE_PYTHON``), every figure checked against the library's own pricing."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from contextpolicy.adapters._agent import prepare_agent_policy
from contextpolicy.replay import Prices, price_policies
from tests.support.cli import EXAMPLES, run
from tests.support.replays import tool_session

KERNEL_ENV = {"c": {"CONTEXTPOLICY_PURE_PYTHON": "0"}, "py": {"CONTEXTPOLICY_PURE_PYTHON": "1"}}
TRIM = {"mode": "reduce", "triggerChars": 20_000, "targetInputChars": 10_000, "steps": [
    {"id": "t", "kind": "trim", "fragmentId": "history", "targetChars": 10_000,
     "keepGroups": 1}]}


@pytest.fixture(params=["c", "py"])
def env(request: pytest.FixtureRequest) -> dict[str, str]:
    return KERNEL_ENV[request.param]


def sessions_file(path: Path, n: int = 3) -> list[list[dict]]:
    sessions = [tool_session(12 + 6 * i, seed=i) for i in range(n)]
    path.write_text("".join(json.dumps({"id": f"s{i}", "messages": s}) + "\n"
                            for i, s in enumerate(sessions)))
    return sessions


def test_json_rows_are_the_library_figures(tmp_path, env):
    sessions = sessions_file(tmp_path / "s.jsonl")
    (tmp_path / "trim.json").write_text(json.dumps(TRIM))
    proc = run("replay", tmp_path / "s.jsonl", "--policy", tmp_path / "trim.json", "--json",
               "--cache-read-price", "0.5", env=env)
    assert proc.returncode == 0, proc.stderr.decode()
    doc = json.loads(proc.stdout)
    assert doc["sessions"] == 3 and doc["unit"] == "chars"
    assert doc["prices"] == {"input": 3.0, "cacheWrite": 3.75, "cacheRead": 0.5}
    rows = doc["rows"]
    assert [(r["policy"], r["cut"]) for r in rows] == [
        (None, "none"), (str(tmp_path / "trim.json"), "plain"),
        (str(tmp_path / "trim.json"), "stable")]
    expected = price_policies(sessions, [("t", prepare_agent_policy(TRIM))],
                              prices=Prices(3.0, 3.75, 0.5))
    for row, want in zip(rows, expected, strict=True):
        assert set(row) == {"policy", "cut", "calls", "inputChars", "cachedChars", "cacheHit",
                            "peakChars", "cost", "inputTokens", "cachedTokens", "peakTokens"}
        assert (row["calls"], row["inputChars"], row["cachedChars"], row["peakChars"]) == (
            want.calls, want.input_chars, want.cached_chars, want.peak_chars)
        assert row["cost"] == pytest.approx(want.cost, abs=1e-6)
        assert row["inputTokens"] is row["cachedTokens"] is row["peakTokens"] is None
    none, plain, stable = rows
    assert none["calls"] == sum(2 * (12 + 6 * i) for i in range(3))
    assert stable["cost"] < plain["cost"] and stable["cacheHit"] > plain["cacheHit"]
    assert stable["peakChars"] <= 20_000 + 4_500 < none["peakChars"]


def test_with_no_arguments_it_prices_the_shipped_agent_policy_and_draws_the_plot(tmp_path, env):
    plot = tmp_path / "cost.png"
    proc = run("replay", "--sessions", "4", "--plot", plot, env=env)
    assert proc.returncode == 0, proc.stderr.decode()
    out = proc.stdout.decode()
    assert "policy-agent.json" in out and "stable" in out and "plain" in out
    assert f"wrote {plot}" in out
    assert plot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


@pytest.mark.parametrize(("args", "code", "says"), [
    (["--policy", '{"mode": "reduce"}'], 1, "invalid policy"),
    (["--policy", '{"mode": "reduce", "triggerChars": 10, "steps": [{"id": "s", "kind": "trim", '
      '"fragmentId": "question", "targetChars": 1, "keepGroups": 0}]}'], 1,
     "cannot run on an agent's messages"),
    (["--counter", "words"], 2, "--counter: expected tiktoken:ENCODING"),
    (["--cache-read-price", "-1"], 2, "--cache-read-price: expected a price from 0 to"),
    (["--input-price", "inf", "--json"], 2, "--input-price: expected a price from 0 to"),
    (["--cache-write-price", "nan"], 2, "--cache-write-price: expected a price from 0 to"),
    (["--input-price", "1e308"], 2, "--input-price: expected a price from 0 to"),
    (["--input-price", "1000000"], 2, "--input-price 1000000.0: cache_write: expected a price"),
    (["--plot", "cost.unknown"], 2, "--plot 'cost.unknown': expected a file name ending in an "
     "image format (.avif"),
    (["--plot", ""], 2, "--plot '': expected a file name ending in an image format"),
    (["--plot", "-"], 2, "--plot '-': expected a file name ending in an image format"),
    (["--plot", "/nonexistent-folder/cost.png"], 2,
     "--plot /nonexistent-folder/cost.png: cannot write: the folder"),
    (["--policy", str(EXAMPLES / "policy-validate.json")], 1,
     "a validate policy changes nothing"),
    (["--policy", json.dumps(TRIM), "--policy", json.dumps(TRIM)], 2, "given twice"),
    (["--sessions", "0"], 2, "--sessions: expected a number >= 1"),
    (["--corpus", "nope"], 2, "--corpus: expected one of"),
])
def test_bad_arguments_are_one_clear_line(args, code, says, env):
    proc = run("replay", *args, env=env)
    assert proc.returncode == code, proc.stderr.decode()
    assert says in proc.stderr.decode()
    assert proc.stdout == b""  # refused before any work: nothing printed
    if code == 2:  # one line, no traceback (a policy's problems are listed one a line)
        assert len(proc.stderr.decode().strip().splitlines()) == 1


def test_bad_sessions_say_where(tmp_path, env):
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"id": 1, "messages": []}\n{"id": 2}\n')
    proc = run("replay", bad, env=env)
    assert proc.returncode == 2
    assert f"{bad}:2: expected a session" in proc.stderr.decode()
    good = json.dumps({"id": 1, "messages": tool_session(3)})
    bad.write_text(f'{good}\n\n\n{{"id": 2, "messages": [{{"role": "user"}}, 7]}}\n')
    proc = run("replay", bad, env=env)
    assert proc.returncode == 2  # the line the session is on, blank lines counted
    assert f"{bad}:4: invalid context plan: messages[1]" in proc.stderr.decode()
    for empty in ('{"id": 1, "messages": []}\n',
                  '{"id": 1, "messages": [{"role": "user", "content": "hi"}]}\n'):
        bad.write_text(empty)
        proc = run("replay", bad, env=env)
        assert proc.returncode == 2 and proc.stdout == b""
        assert f"{bad}: no model call in it" in proc.stderr.decode()
    proc = run("replay", tmp_path / "missing.jsonl", env=env)
    assert proc.returncode == 2 and "missing.jsonl" in proc.stderr.decode()


def test_the_shipped_example_files_are_there():
    assert (EXAMPLES / "policy-agent.json").exists() and (EXAMPLES / "handlers-agent.json").exists()


def test_a_token_policy_replays_with_a_counter_only(tmp_path, env):
    # no tokenizer here: --counter names one that does not exist, and the policy says why it
    # needs one when none is given
    tokens = {"mode": "reduce", "triggerTokens": 5_000, "steps": [
        {"id": "t", "kind": "trim", "fragmentId": "history", "targetChars": 10_000,
         "keepGroups": 1}]}
    (tmp_path / "tokens.json").write_text(json.dumps(tokens))
    proc = run("replay", "--sessions", "1", "--policy", tmp_path / "tokens.json", env=env)
    assert proc.returncode == 1, proc.stderr.decode()
    assert "(give --counter tiktoken:ENCODING or hf:TOKENIZER.json)" in proc.stderr.decode()


def test_a_narrow_terminal_never_cuts_a_figure_short(monkeypatch, capsys):
    from contextpolicy.cli.replay import _table
    from contextpolicy.replay import ReplayRow

    rows = [ReplayRow(None, "none", calls=48, input_chars=192_584, cached_chars=176_600,
                      peak_chars=8_012, cost=113.058),
            ReplayRow("/a/long/folder/of/policies/policy-reduce.json", "stable", calls=48,
                      input_chars=72_164, cached_chars=32_474, peak_chars=1_991, cost=158.6142)]
    monkeypatch.setenv("COLUMNS", "60")
    monkeypatch.setattr("sys.stdout.isatty", lambda: True)
    _table(rows, "s.jsonl", "chars", Prices())
    out = capsys.readouterr().out
    assert "…" not in out
    for figure in ("192,584", "72,164", "113.0580", "158.6142", "1.40x", "91.7%", "45.0%"):
        assert figure in out
