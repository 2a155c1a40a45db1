"""What a process loads before its first result: ``contextpolicy reduce`` of JSONL lines that
take the byte path loads neither pydantic nor numpy nor rich once its policy's facts are cached
(``jsonl.line_policy``), and ``-q`` draws nothing; the compiled kernel loads without numpy; and
a first ``process_context`` never loads numpy. Each is read in a fresh interpreter."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from contextpolicy.synthetic import corpus
from tests.support.cli import EXAMPLES

HEAVY = ("numpy", "pydantic", "pydantic_core", "rich", "multiprocessing", "yaml")

PROBE = """\
import json, sys
from contextpolicy.cli import main
code = main(sys.argv[1:])
print(json.dumps({"code": code, "modules": sorted(sys.modules)}), file=sys.stderr)
"""


def _loaded(argv: list[str], env: dict[str, str], cwd) -> tuple[int, set[str]]:
    result = subprocess.run([sys.executable, "-c", PROBE, *argv], capture_output=True,
                            env=env, cwd=cwd, text=True)
    last = result.stderr.strip().splitlines()[-1]
    found = json.loads(last)
    return found["code"], set(found["modules"])


@pytest.mark.c_extension
@pytest.mark.parametrize("quiet, report", [(True, False), (False, False), (True, True)],
                         ids=["quiet", "summary", "report"])
def test_a_byte_path_run_loads_no_heavy_module_once_its_policy_is_cached(tmp_path, quiet,
                                                                         report):
    env = {**os.environ, "CONTEXTPOLICY_CACHE_DIR": str(tmp_path / "cache"),
           "CONTEXTPOLICY_PURE_PYTHON": ""}
    # chats whose report entries the kernel writes from the policy's template (a line with a
    # warning has its entry written in full, by the report models)
    chats = corpus("chats", 30, seed=500)
    (tmp_path / "chats.jsonl").write_bytes(b"".join(
        json.dumps({"id": k, "messages": m}).encode() + b"\n" for k, m in enumerate(chats)))
    argv = ["reduce", "chats.jsonl", "--policy", str(EXAMPLES / "policy-reduce.json"), "-o",
            "out.jsonl"] + (["-q"] if quiet else []) + (["--report", "r.json"] if report else [])
    code, first = _loaded(argv, env, tmp_path)  # validates the policy, and keeps its facts
    assert code == 0 and "pydantic" in first
    code, modules = _loaded(argv, env, tmp_path)
    assert code == 0
    if quiet:
        assert not [m for m in modules if m.split(".")[0] in HEAVY], sorted(modules)
    else:  # the summary table is drawn with rich, and only that
        assert "rich.table" in modules
        assert not [m for m in modules if m.split(".")[0] in HEAVY[:2]]
    assert not {"contextpolicy.core", "contextpolicy.policy", "contextpolicy.report",
                "contextpolicy.jsonl.objects", "contextpolicy.cli.tables"} & modules
    assert (tmp_path / "out.jsonl").read_bytes().count(b"\n") == 30
    if report:
        assert len(json.loads((tmp_path / "r.json").read_text())["conversations"]) == 30


@pytest.mark.c_extension
def test_a_line_of_the_object_path_loads_the_policy_then(tmp_path):
    lines = (EXAMPLES / "transcripts.jsonl").read_bytes().splitlines(keepends=True)
    (tmp_path / "in.jsonl").write_bytes(b"".join(lines[:3]) + b'{"fragments": []}\n')
    env = {**os.environ, "CONTEXTPOLICY_CACHE_DIR": str(tmp_path / "cache"),
           "CONTEXTPOLICY_PURE_PYTHON": ""}
    argv = ["reduce", "in.jsonl", "--policy", str(EXAMPLES / "policy-reduce.json"), "-q",
            "-o", "out.jsonl", "--on-error", "skip"]
    _loaded(argv, env, tmp_path)
    code, modules = _loaded(argv, env, tmp_path)
    assert code == 0 and "contextpolicy.jsonl.objects" in modules and "pydantic" in modules
    assert (tmp_path / "out.jsonl").read_bytes().count(b"\n") == 4


@pytest.mark.c_extension
def test_the_compiled_kernel_and_a_first_process_context_load_no_numpy():
    probe = ("import sys\nimport contextpolicy._kernel_c\nassert 'numpy' not in sys.modules\n"
             "from contextpolicy import ContextPlan, process_context\n"
             "chat = [{'role': 'system', 'content': 's'}, {'role': 'user', 'content': 'q'}]\n"
             f"policy = {json.loads((EXAMPLES / 'policy-reduce.json').read_text())!r}\n"
             "r = process_context(ContextPlan.from_messages(chat), policy)\n"
             "assert r.report.after.chars == 2\n"
             "print(sorted(m for m in sys.modules if m.split('.')[0] == 'numpy'))\n")
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                         env={**os.environ, "CONTEXTPOLICY_PURE_PYTHON": ""})
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"
