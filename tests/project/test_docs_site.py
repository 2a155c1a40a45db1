"""The documentation site holds together: every error and warning code the package can emit is
documented (and nothing else is), every page is in the navigation, every relative link of the
README and the pages leads to a file, and ``contextpolicy examples`` copies every example the
pages use."""

from __future__ import annotations

import re
import subprocess
import sys
from importlib import resources

import pytest

from tests.support.docs_examples import DOCS, README, ROOT, pages
from tests.support.emitted_codes import codes_in_python, emitted_codes

ERRORS_PAGE = DOCS / "reference" / "errors.md"


def documented_codes() -> set[str]:
    """The codes in the first cell of the tables under "Error codes" and "Warning codes"."""
    text = ERRORS_PAGE.read_text("utf-8")
    section = text.split("## Error codes", 1)[1].split("\n## Exit statuses", 1)[0]
    codes: set[str] = set()
    for line in section.splitlines():
        if line.startswith("| `"):
            codes.update(re.findall(r"`([a-z0-9-]+)`", line.split(" | ", 1)[0]))
    return codes


def test_every_code_the_package_emits_is_documented():
    emitted, patterns = emitted_codes()
    documented = documented_codes()
    assert len(emitted) >= 60
    assert sorted(emitted - documented) == [], "codes the error reference does not document"
    for pattern in patterns:
        assert any(re.fullmatch(pattern, code) for code in documented), pattern
    stale = {code for code in documented - emitted
             if not any(re.fullmatch(p, code) for p in patterns)}
    assert sorted(stale) == [], "documented codes the package no longer emits"


def test_the_code_reader_finds_codes_in_each_place_they_are_written():
    source = '''
def f(x, *, code: str = "default-code"):
    Issue("path", "message", "positional-code")
    raise ContextPlanError("message", code="keyword-code")
    code = "assigned-code"
    message, code = "m", "tuple-code"
    duplicate_ids(ids, "steps", "step", "duplicate-code")
    Issue(name, "message", f"built-{name}-code")
    return _CODES.get(kind, "fallback-code")
_CODES = {"a": "table-code"}
WARNING_CODES = ("listed-code",)
'''
    found, patterns = codes_in_python(source)
    assert found == {"default-code", "positional-code", "keyword-code", "assigned-code",
                     "tuple-code", "duplicate-code", "fallback-code", "table-code",
                     "listed-code"}
    assert patterns == {r"built\-[a-z0-9-]+\-code"}


def test_every_page_is_in_the_navigation_and_every_entry_is_a_page():
    config = (ROOT / "mkdocs.yml").read_text("utf-8")
    nav = config.split("\nnav:\n", 1)[1].split("\n\n", 1)[0]
    entries = re.findall(r":\s+\"?([\w/.-]+\.md)\"?\s*$", nav, re.M)
    on_disk = sorted(p.relative_to(DOCS).as_posix() for p in DOCS.rglob("*.md"))
    assert sorted(entries) == on_disk


LINK = re.compile(r"\]\(([^)\s]+)\)")


@pytest.mark.parametrize("page", pages(), ids=[p.relative_to(ROOT).as_posix() for p in pages()])
def test_relative_links_lead_to_files(page):
    generated = {"policy.schema.json", "plan.schema.json", "report.schema.json"}
    text = re.sub(r"^```.*?^```", "", page.read_text("utf-8"), flags=re.M | re.S)
    for target in LINK.findall(text):
        if re.match(r"[a-z]+:", target) or target.startswith("#"):
            continue
        path = target.split("#", 1)[0]
        if path in generated:  # written by the docs hook at build time
            continue
        assert (page.parent / path).exists(), f"{page.name}: {target}"


# ---------------------------------------------------------------------------------------------
# contextpolicy examples


def examples(*args, cwd):
    return subprocess.run([sys.executable, "-m", "contextpolicy", "examples", *map(str, args)],
                          capture_output=True, text=True, cwd=cwd, timeout=120)


def test_examples_copies_every_shipped_example_byte_for_byte(tmp_path):
    from contextpolicy.cli.examples import EXAMPLE_FILES

    shipped = resources.files("contextpolicy").joinpath("examples")
    names = sorted(p.name for p in shipped.iterdir() if p.name.endswith((".json", ".jsonl")))
    assert sorted(EXAMPLE_FILES) == names
    done = examples("here/there", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines()[0] == f"copied {len(names)} files into here/there:"
    for name in names:
        assert (tmp_path / "here" / "there" / name).read_bytes() == (
            shipped.joinpath(name).read_bytes())


def test_examples_writes_over_nothing_unless_forced(tmp_path):
    (tmp_path / "plan.json").write_text("mine")
    done = examples(".", cwd=tmp_path)
    assert done.returncode == 2
    assert done.stderr == ("contextpolicy examples: error: .: plan.json already there; give "
                           "another folder, or --force to write over them\n")
    assert (tmp_path / "plan.json").read_text() == "mine"
    assert not (tmp_path / "transcripts.jsonl").exists()
    assert examples(".", "--force", cwd=tmp_path).returncode == 0
    assert (tmp_path / "plan.json").read_text() != "mine"


def test_examples_into_a_file_is_a_one_line_error(tmp_path):
    (tmp_path / "taken").write_text("")
    done = examples("taken", cwd=tmp_path)
    assert done.returncode == 2
    assert done.stderr == ("contextpolicy examples: error: taken: not a folder; name a folder "
                           "to copy the examples into\n")


def test_the_shipped_policies_are_valid_and_the_handlers_file_fits_the_compress_policy():
    from contextpolicy import validate_context_policy
    from contextpolicy.cli.demo import example
    from contextpolicy.handlers import from_config

    for name in ("policy-reduce.json", "policy-compress.json", "policy-validate.json",
                 "policy-audit.json"):
        validate_context_policy(example(name))
    handlers = from_config(example("handlers.json"))
    plan = example("plan.json")
    validate_context_policy(example("policy-compress.json"), plan["fragments"], handlers)


@pytest.mark.packaging  # reads .ci/run, which an installed wheel's suite does not have
def test_the_readme_runs_the_commands_ci_runs():
    ci = ROOT / ".ci" / "run"
    readme = README.read_text("utf-8")
    for command in ('pip install . && contextpolicy reduce',
                    'pip install -e ".[test]" && pytest -n auto'):
        assert command in readme and f"\n{command}\n" in ci.read_text("utf-8"), command
