"""The cache of validated policies (``jsonl.line_policy``): what it keeps is what validation
gives, every time; a policy or a contextpolicy that changes misses; a file that is broken,
tampered with or unreadable, or a folder that cannot be written, is validation again and never
an error; an invalid policy is never kept. And the command line gives the same bytes, cache on
or off."""

from __future__ import annotations

import datetime
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from contextpolicy.errors import ContextPolicyError
from contextpolicy.jsonl import line_policy as lp
from contextpolicy.jsonl.files import FileError
from tests.support.cli import EXAMPLES, SEED_POLICY

POLICIES = {
    "seed": SEED_POLICY,
    "validate": {"mode": "validate"},
    "trigger-and-target": {
        "mode": "reduce", "triggerChars": 500, "targetInputChars": 300,
        "steps": [{"id": "t", "kind": "trim", "fragmentId": "history", "field": "messages",
                   "grouping": {"kind": "message"}, "keepGroups": 1, "targetChars": 100}]},
    "compress": json.loads((EXAMPLES / "policy-compress.json").read_text()),
    "agent": json.loads((EXAMPLES / "policy-agent.json").read_text()),
    "audit": json.loads((EXAMPLES / "policy-audit.json").read_text()),
}


@pytest.fixture
def cache(tmp_path, monkeypatch) -> Path:
    monkeypatch.setenv(lp.CACHE_VARIABLE, str(tmp_path))
    return tmp_path / "policies"


def files(folder: Path) -> list[Path]:
    return sorted(folder.glob("*.json")) if folder.is_dir() else []


@pytest.mark.parametrize("name", list(POLICIES))
def test_the_cache_gives_what_validation_gives(cache, name):
    policy = POLICIES[name]
    expected, prepared = lp.validated_facts(policy, None)
    first, first_prepared = lp.line_policy(policy)
    assert first == expected and first_prepared is not None  # validated, then kept
    assert len(files(cache)) == 1
    again, again_prepared = lp.line_policy(json.loads(json.dumps(policy)))
    assert again == expected and again_prepared is None  # from the file
    assert (expected.steps is not None) == (name in ("seed", "validate", "trigger-and-target"))


def test_the_seed_policys_facts():
    from contextpolicy.jsonl.worker import LineWorker

    facts, _ = lp.validated_facts(SEED_POLICY, None)
    assert facts[:5] == ((("history", 0, 2, 1000),), 1800, 1500, True, ())
    # the kernel's report template, kept too: a --report run needs no pydantic either
    assert facts.entry is not None
    assert facts.entry == LineWorker(SEED_POLICY, True).reports.entry_template()
    compress, _ = lp.validated_facts(POLICIES["compress"], None)
    assert compress.steps is None and compress.reduces and compress.entry is None
    assert [name for _, name in compress.handlers] == ["clear-tool-results", "short-texts"]


def test_another_policy_misses_and_key_order_does_not(cache):
    lp.line_policy(SEED_POLICY)
    reordered = dict(reversed(list(SEED_POLICY.items())))
    assert lp.line_policy(reordered)[1] is None  # the same policy: a hit
    changed = {**SEED_POLICY, "triggerChars": 1801}
    facts, prepared = lp.line_policy(changed)
    assert prepared is not None and facts.trigger == 1801
    as_float = {**SEED_POLICY, "triggerChars": 1800.0}  # another document: validated on its own
    with pytest.raises(ContextPolicyError):
        lp.line_policy(as_float)
    assert len(files(cache)) == 2


def test_an_invalid_policy_is_never_kept(cache):
    bad = {"mode": "reduce", "steps": [{"kind": "trim"}]}
    for _ in range(2):
        with pytest.raises(ContextPolicyError) as info:
            lp.line_policy(bad)
        assert info.value.issues
    assert files(cache) == []


@pytest.mark.parametrize("content", [
    b"", b"{", b"[]", b"null", b'{"format": 1}',
    b'{"format":1,"steps":[["history",0,2,"1000"]],"trigger":1800,"watermark":1500,'
    b'"reduces":true,"handlers":[]}',  # a string where an int was written
    b'{"format":1,"steps":null,"trigger":1800,"watermark":1500,"reduces":1,"handlers":[]}',
    b'{"format":2,"steps":null,"trigger":1800,"watermark":1500,"reduces":true,"handlers":[]}',
    b"\xff\xfe",
], ids=["empty", "truncated", "list", "null", "partial", "str-int", "int-bool", "format",
        "bytes"])
def test_a_broken_file_is_validation_again_and_is_mended(cache, content):
    expected, _ = lp.line_policy(SEED_POLICY)
    (path,) = files(cache)
    path.write_bytes(content)
    facts, prepared = lp.line_policy(SEED_POLICY)
    assert facts == expected and prepared is not None
    assert lp.line_policy(SEED_POLICY) == (expected, None)  # written again


def test_a_folder_that_cannot_be_written_is_no_error(tmp_path, monkeypatch):
    blocker = tmp_path / "file"
    blocker.write_text("not a folder")
    monkeypatch.setenv(lp.CACHE_VARIABLE, str(blocker))
    facts, prepared = lp.line_policy(SEED_POLICY)
    assert prepared is not None and facts.trigger == 1800
    assert blocker.read_text() == "not a folder"
    monkeypatch.setenv(lp.CACHE_VARIABLE, os.devnull)  # a folder inside a device
    assert lp.line_policy(SEED_POLICY)[0] == facts


@pytest.mark.parametrize("value", ["off", "", "  "])
def test_the_cache_can_be_turned_off(tmp_path, monkeypatch, value):
    monkeypatch.setenv(lp.CACHE_VARIABLE, value)
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    assert lp.cache_folder() is None
    for _ in range(2):
        assert lp.line_policy(SEED_POLICY)[1] is not None
    assert list(tmp_path.iterdir()) == []


@pytest.mark.skipif(sys.platform in ("win32", "darwin"), reason="the XDG folders of Linux")
def test_the_default_folder_is_the_users_cache(tmp_path, monkeypatch):
    monkeypatch.delenv(lp.CACHE_VARIABLE)
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert lp.cache_folder() == str(tmp_path / "xdg" / "contextpolicy" / "policies")
    monkeypatch.setenv("XDG_CACHE_HOME", "relative")  # not absolute: ignored, as XDG says
    assert lp.cache_folder() == str(tmp_path / ".cache" / "contextpolicy" / "policies")


@pytest.mark.parametrize("odd", [
    datetime.date(2026, 1, 1),  # what YAML may give; JSON would write "2026-01-01"
    type("S", (str,), {})("history"),  # a subclass writes what its base writes
    type("I", (int,), {})(2),
    float("nan"),  # JSON would write null
    2**70,  # beyond 64 bits
    {1: "a"},  # a key that is not a string
    (1, 2),  # JSON would write a list
    {"a": [set()]},
], ids=["date", "str-subclass", "int-subclass", "nan", "big-int", "int-key", "tuple", "set"])
def test_a_document_that_is_not_plain_json_is_never_kept(cache, odd):
    policy = {**SEED_POLICY, "steps": [{**SEED_POLICY["steps"][0], "id": odd}]}
    assert lp._key(policy) is None
    try:
        facts, prepared = lp.line_policy(policy)
    except ContextPolicyError:
        pass  # validation's answer, whatever a cached plain twin would have said
    else:
        assert prepared is not None
    assert files(cache) == []


def test_a_change_of_the_code_that_validates_is_a_miss(cache, monkeypatch):
    before = lp._key(SEED_POLICY)
    stamp = lp._code_stamp()
    assert b"models.py" in stamp and b"prepared.py" in stamp and b"line_policy.py" in stamp
    monkeypatch.setattr(lp, "_code_stamp", lambda: stamp + b";changed")
    assert lp._key(SEED_POLICY) != before


def test_a_tampered_file_is_found_out_when_the_policy_is_validated(cache):
    from contextpolicy.jsonl.worker import LineWorker

    lp.line_policy(SEED_POLICY)
    (path,) = files(cache)
    doc = json.loads(path.read_bytes())
    doc["trigger"] = 7
    path.write_text(json.dumps(doc, separators=(",", ":")))  # as the cache writes it
    worker = LineWorker(SEED_POLICY, False)
    assert worker.trigger == 7  # what the file says: the cache is trusted like the code
    with pytest.raises(FileError, match="cached facts of this policy disagree with the policy"):
        worker.objects_of()


# ---------------------------------------------------------------------------------------------
# the command line, cache on and off


def _reduce(folder: Path, cache: str, *args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, lp.CACHE_VARIABLE: cache}
    return subprocess.run(
        [sys.executable, "-m", "contextpolicy", "reduce", str(EXAMPLES / "transcripts.jsonl"),
         "--policy", str(EXAMPLES / "policy-reduce.json"), *args], capture_output=True,
        env=env, cwd=folder)


@pytest.mark.parametrize("args", [(), ("--jobs", "2"), ("--report", "r.json")],
                         ids=["plain", "jobs", "report"])
def test_the_command_gives_the_same_bytes_with_the_cache_on_or_off(tmp_path, args):
    outputs = []
    for cache in ("off", str(tmp_path / "c"), str(tmp_path / "c")):  # off, a miss, a hit
        result = _reduce(tmp_path, cache, "-q", "-o", "out.jsonl", *args)
        assert result.returncode == 0, result.stderr
        report = json.loads((tmp_path / "r.json").read_bytes()) if args[:1] == (
            "--report",) else {}
        for timing in ("seconds", "megabytesPerSecond", "conversationsPerSecond"):
            report.get("summary", {}).pop(timing, None)  # the one part that differs
        outputs.append(((tmp_path / "out.jsonl").read_bytes(), report))
    assert outputs[0] == outputs[1] == outputs[2]
    assert outputs[0][0].count(b"\n") == 30
    assert len(files(tmp_path / "c" / "policies")) == 1


# ---------------------------------------------------------------------------------------------
# what the cache never trusts


def test_a_policy_of_more_values_than_a_policy_has_is_never_keyed(cache):
    level: object = "x"
    for _ in range(4):  # what YAML's aliases make of a few lines: 10**4 values and more
        level = [level] * 10
    policy = {**SEED_POLICY, "note": level}
    assert lp._key(policy) is None
    with pytest.raises(ContextPolicyError):
        lp.line_policy(policy)
    assert files(cache) == []


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="POSIX files")
@pytest.mark.parametrize("kind", ["fifo", "symlink", "group-writable", "folder"])
def test_a_file_that_is_not_this_users_own_is_a_miss(cache, tmp_path, kind):
    expected, _ = lp.line_policy(SEED_POLICY)
    (path,) = files(cache)
    written = path.read_bytes()
    path.unlink()
    if kind == "fifo":
        os.mkfifo(path)  # never read: a pipe would wait for a writer
    elif kind == "symlink":
        (tmp_path / "elsewhere.json").write_bytes(written)
        path.symlink_to(tmp_path / "elsewhere.json")
    elif kind == "group-writable":
        path.write_bytes(written)
        path.chmod(0o664)
    else:
        path.mkdir()
    facts, prepared = lp.line_policy(SEED_POLICY)
    assert facts == expected and prepared is not None


def test_the_folder_and_its_files_are_this_users_alone(cache):
    lp.line_policy(SEED_POLICY)
    (path,) = files(cache)
    if hasattr(os, "getuid"):
        assert cache.stat().st_mode & 0o777 == 0o700
        assert path.stat().st_mode & 0o777 == 0o600
    assert [p.name for p in cache.iterdir()] == [path.name]  # no temporary file left


@pytest.mark.parametrize("value", ["0", "OFF", "None", "false", "no"])
def test_the_cache_is_off_by_any_usual_word(monkeypatch, value):
    monkeypatch.setenv(lp.CACHE_VARIABLE, value)
    assert lp.cache_folder() is None


def test_a_folder_under_the_home_folder(monkeypatch, tmp_path):
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.setenv(lp.CACHE_VARIABLE, "~/cp")
    assert lp.cache_folder() == os.path.join(str(tmp_path), "cp", "policies")
