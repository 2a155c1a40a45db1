"""Every example of the README and of the documentation site runs as written and prints what
the page shows (``tests/support/docs_examples.py`` says how each kind of block is run), on the compiled
kernel and on the twin. The examples of the optional extras run in ``test_docs_extras.py``."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from tests.support.docs_examples import (
    README,
    Block,
    all_blocks,
    blocks_of,
    check_console,
    check_json,
    check_python,
    copy_examples,
    pages,
)

PYTHON = all_blocks("python")
CONSOLE = all_blocks("console")
JSON = all_blocks("json")


@pytest.fixture
def examples_folder(tmp_path, monkeypatch):
    """A fresh folder holding the example files, as the current directory."""
    copy_examples(tmp_path)
    monkeypatch.chdir(tmp_path)
    return tmp_path


@pytest.mark.usefixtures("pipeline_kernel", "examples_folder")
@pytest.mark.parametrize("block", PYTHON, ids=[b.where for b in PYTHON])
def test_python_example(block: Block):
    check_python(block)


@pytest.mark.skipif(sys.platform == "win32", reason="the console examples are bash sessions")
@pytest.mark.parametrize("pure", [pytest.param(False, id="c", marks=pytest.mark.c_extension),
                                  pytest.param(True, id="py")])
@pytest.mark.parametrize("block", CONSOLE, ids=[b.where for b in CONSOLE])
def test_console_example(block: Block, pure: bool, tmp_path):
    check_console(block, tmp_path, pure)


@pytest.mark.parametrize("block", JSON, ids=[b.where for b in JSON])
def test_json_example_is_valid(block: Block):
    check_json(block)


def test_the_site_has_examples_of_every_kind_and_no_other():
    extras = all_blocks("python extras")
    assert len(PYTHON) >= 25 and len(CONSOLE) >= 8 and len(extras) >= 8
    every = [b for page in pages() for b in blocks_of(page)]
    unknown = {
        b.where: b.lang for b in every
        if b.lang not in ("python", "python extras", "console", "json", "text", "bash")}
    assert unknown == {}, "blocks of kinds the tests do not run or show"


# ---------------------------------------------------------------------------------------------
# the README: short, and its first example runs alone


def test_the_readme_is_short():
    lines = README.read_text("utf-8").count("\n")
    assert lines <= 200, f"README.md has {lines} lines; the manual is docs/"


@pytest.mark.parametrize("pure", [pytest.param(False, id="c", marks=pytest.mark.c_extension),
                                  pytest.param(True, id="py")])
def test_the_readme_quick_start_runs_alone_in_a_fresh_interpreter(pure, tmp_path):
    first = next(b for b in blocks_of(README) if b.lang == "python")
    assert first.expected, "the quick start shows what it prints"
    env = {k: v for k, v in os.environ.items() if k != "CONTEXTPOLICY_PURE_PYTHON"}
    if pure:
        env["CONTEXTPOLICY_PURE_PYTHON"] = "1"
    done = subprocess.run([sys.executable, "-c", first.code], capture_output=True, text=True,
                          cwd=tmp_path, env=env, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout == first.expected
