"""The layout keeps its promises: every table once and both kernels built from it, the public
names where the contract puts them, a cheap start for the command line, one rule for "this fragment
changed" in the contract and the audit."""

from __future__ import annotations

import os
import subprocess
import sys
from importlib import resources

import pytest

import contextpolicy
from contextpolicy import (
    AuditPolicy,
    ContextAuditError,
    ContextContractError,
    ContextPlan,
    ContextPolicyError,
    Fragment,
    PolicyOutcome,
    process_context,
    validate_context_policy,
)
from contextpolicy import _tables as tables
from contextpolicy.plan import changed_fields

# ---------------------------------------------------------------------------------------------
# Tables


def test_each_kernel_was_built_with_the_tables_of_the_pure_module(kernel):
    # The compiled module reports the tables its generated header held: a module built from an
    # older _tables.py (or a header edited by hand) fails here.
    assert kernel.TABLES == tables.tables()
    assert (kernel.GROUP_USER_TURN, kernel.GROUP_MESSAGE) == (
        tables.GROUPING_CODES["user-turn"], tables.GROUPING_CODES["message"],
    )


@pytest.mark.parametrize("role", [*tables.ROLE_CODES, "other", "User", "tools", "", "usér"])
def test_every_role_of_the_table_gets_its_code_on_both_kernels(differential, role):
    roles, _chars, flags, _opaque = differential("measure_messages", [{"role": role}])
    assert int(roles[0]) == tables.ROLE_CODES.get(role, tables.ROLE_OTHER)
    assert bool(flags[0] & tables.FLAG_OPENS_TURN) == (role == "user")
    assert bool(flags[0] & tables.FLAG_TOOL_RESULT) == (role in tables.TOOL_RESULT_ROLES)


@pytest.mark.parametrize("ptype", [*tables.PART_CODES, "image_url", "Text", "text ", "têxt"])
def test_every_part_type_of_the_table_is_read_alike_on_both_kernels(differential, ptype):
    part = {"type": ptype, "text": "abc", "content": "de", "name": "f", "input": {},
            "thinking": "ghij"}
    _roles, chars, flags, opaque = differential(
        "measure_messages", [{"role": "assistant", "content": [part]}]
    )
    code = tables.PART_CODES.get(ptype, tables.PART_OTHER)
    expected = {
        tables.PART_TEXT: 3, tables.PART_TOOL_RESULT: 2, tables.PART_TOOL_USE: 3,
        tables.PART_THINKING: 4, tables.PART_OTHER: 0,
    }[code]
    assert int(chars[0]) == expected
    assert int(opaque[0]) == (code == tables.PART_OTHER)
    assert bool(flags[0] & tables.FLAG_TOOL_CALLS) == (code == tables.PART_TOOL_USE)


@pytest.mark.parametrize("itype", [*tables.ITEM_CODES, "web_search_call", "Message", "réasoning"])
def test_every_item_type_of_the_table_is_read_alike_on_both_kernels(differential, itype):
    item = {"type": itype, "call_id": "c", "name": "f", "arguments": "{}", "output": "out",
            "summary": [{"type": "summary_text", "text": "why"}], "content": "hello"}
    code = tables.ITEM_CODES.get(itype, tables.ITEM_UNKNOWN)
    # chars, flag, opaque parts (a message without a role is invalid: it gets one).
    expected = {
        tables.ITEM_CALL: (3, tables.FLAG_TOOL_CALLS, 0),
        tables.ITEM_OUTPUT: (3, tables.FLAG_TOOL_RESULT, 0),
        tables.ITEM_REASONING: (8, tables.FLAG_GLUES_NEXT, 0),
        tables.ITEM_UNKNOWN: (0, 0, 1),
    }
    if code == tables.ITEM_MESSAGE:
        roles, chars, flags, opaque = differential(
            "measure_messages", [{**item, "role": "assistant"}])
        assert (int(roles[0]), int(chars[0]), int(flags[0]), int(opaque[0])) == (
            tables.ROLE_ASSISTANT, 5, 0, 0)
        return
    roles, chars, flags, opaque = differential("measure_messages", [item])
    assert (int(roles[0]), int(chars[0]), int(flags[0]), int(opaque[0])) == (
        tables.ROLE_OTHER, *expected[code])
    # An unknown type next to a role is a chat message; a known item type wins over a role.
    roles, chars, _flags, _opaque = differential(
        "measure_messages", [{**item, "role": "user"}])
    if code == tables.ITEM_UNKNOWN:
        assert (int(roles[0]), int(chars[0])) == (tables.ROLE_USER, 5)
    else:
        assert (int(roles[0]), int(chars[0])) == (tables.ROLE_OTHER, expected[code][0])


@pytest.mark.parametrize("role", [*tables.ROLE_CODES, "critic", "Assistant"])
def test_columnar_role_codes_follow_the_table(differential, role):
    import numpy as np

    data = role.encode()
    codes = differential("role_codes_utf8", data, np.array([0, len(data)], dtype=np.int64))
    assert codes.tolist() == [tables.ROLE_CODES.get(role, tables.ROLE_OTHER)]


def test_the_generated_header_spells_every_table_entry():
    header = tables.c_header()
    for name in [*tables.ROLE_CODES, *tables.PART_CODES, *tables.ITEM_CODES, *tables.KEYS]:
        assert f'"{name}"' in header, name
    assert header.count("#define CP_ROLE_") == len(tables.ROLE_NAMES) + 1  # + CP_ROLE_COUNT


# ---------------------------------------------------------------------------------------------
# Kernel trios: one chooser, two kernels held to each other, each concern in both halves


def test_each_kernel_exports_the_names_of_the_other(two_kernels):
    # Each kernel lists its own names: a name one of them adds, drops or leaves undefined
    # fails here, whichever side it is on.
    compiled, twin = two_kernels
    assert compiled.__all__ is not twin.__all__
    for kernel, other in ((compiled, twin), (twin, compiled)):
        assert len(set(kernel.__all__)) == len(kernel.__all__), kernel.IMPLEMENTATION
        missing = sorted(set(other.__all__) - set(kernel.__all__))
        assert missing == [], f"{kernel.IMPLEMENTATION} does not export {missing}"
        for name in kernel.__all__:
            assert hasattr(kernel, name), f"{kernel.IMPLEMENTATION}.{name} is not defined"
            assert callable(getattr(kernel, name)) == callable(getattr(other, name)), name


def test_constants_codes_and_errors_are_one_object_on_both_kernels(two_kernels):
    from contextpolicy import _kernel_names

    compiled, twin = two_kernels
    shared = [n for n in vars(_kernel_names) if not n.startswith("_") and n in twin.__all__]
    assert {"Utf8Error", "ENTRY_SLOTS", "SCAN_FIGURES", "ORPHAN_CODE", "PART_FIELDS"} <= set(shared)
    for name in shared:
        assert getattr(compiled, name) is getattr(twin, name) is getattr(_kernel_names, name), name


@pytest.mark.c_extension
def test_the_compiled_kernel_does_not_import_the_twin():
    probe = ("import sys; import contextpolicy._kernel_c as c; "
             "print(sorted(m for m in sys.modules if m.startswith('contextpolicy.')))")
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                         check=True, env={**os.environ, "CONTEXTPOLICY_PURE_PYTHON": ""})
    loaded = eval(out.stdout)
    assert "contextpolicy._kernel_c" in loaded
    assert "contextpolicy._kernel_py" not in loaded, loaded
    assert "contextpolicy._kernel" not in loaded, loaded  # nor the chooser


@pytest.mark.packaging  # reads the source tree, which an installed wheel's suite does not have
def test_every_kernel_concern_has_both_halves():
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    package, csrc = root / "src" / "contextpolicy", root / "csrc"
    unit = (csrc / "_kernel_c.pyx").read_text("utf-8")
    twins = sorted(p for p in package.glob("_*_py.py") if p.name != "_kernel_py.py")
    assert len(twins) >= 5
    for twin in twins:
        half = csrc / (twin.name[: -len("_py.py")] + ".pxi")
        assert half.exists(), f"{twin.name} has no compiled half {half.name}"
        assert f"csrc/{half.name}" in twin.read_text("utf-8"), f"{twin.name} names its half"
        assert f"contextpolicy/{twin.name}" in half.read_text("utf-8"), f"{half.name} names its twin"
    included = [line.split('"')[1] for line in unit.splitlines() if line.startswith("include ")]
    assert sorted(included) == sorted(p.name for p in csrc.glob("*.pxi")), "every .pxi, once"
    for path in [csrc / "_kernel_c.pyx", *csrc.glob("*.pxi")]:
        assert "_kernel_py" not in path.read_text("utf-8").replace("contextpolicy/_kernel_py.py", ""), path.name


# ---------------------------------------------------------------------------------------------
# Public names


DESIGN_NAMES = [
    "ContextPlan", "Fragment", "ContextReport", "ContextResult", "ContextEvent", "StepReport",
    "Usage", "ContextPolicyError", "ContextPlanError", "ContextAuditError",
    "ContextCancelledError", "ContextContractError", "InputBudgetError", "ValidatePolicy",
    "ReducePolicy", "AuditPolicy", "TrimStep", "CompressStep", "validate_context_policy",
    "process_context", "aprocess_context", "astream_context", "check_input_budget",
    "kernel_info", "PolicyContext", "PolicyOutcome", "CompressRequest",
]


@pytest.mark.parametrize("name", DESIGN_NAMES)
def test_design_names_work_from_the_package(name):
    assert name in contextpolicy.__all__
    assert getattr(contextpolicy, name) is not None
    assert name in dir(contextpolicy)


def test_all_lists_exactly_the_exported_names():
    assert contextpolicy.__all__ == sorted(contextpolicy._EXPORTS)
    for name in contextpolicy.__all__:
        value = getattr(contextpolicy, name)
        module = contextpolicy._EXPORTS[name]
        assert getattr(__import__(f"contextpolicy{module}", fromlist=[name]), name) is value
    with pytest.raises(AttributeError, match="no attribute 'nope'"):
        contextpolicy.nope  # noqa: B018


def test_layers_have_their_homes():
    import contextpolicy.adapters
    import contextpolicy.batch
    import contextpolicy.cli
    import contextpolicy.counters
    import contextpolicy.implementations
    import contextpolicy.jsonl
    import contextpolicy.policy

    assert contextpolicy.implementations.DEFAULT_IMPLEMENTATIONS.keys() == {
        "validate", "reduce", "audit",
    }
    assert callable(contextpolicy.jsonl.process_lines)
    assert callable(contextpolicy.cli.main)


# ---------------------------------------------------------------------------------------------
# A cheap start: the command line loads neither numpy nor the kernel until a command needs them.

EXAMPLES = resources.files("contextpolicy").joinpath("examples")


def _imported(*args: str) -> set[str]:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPROFILEIMPORTTIME"}
    proc = subprocess.run(
        [sys.executable, "-X", "importtime", "-m", "contextpolicy", *args],
        capture_output=True, text=True, env=env, timeout=60,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    return {
        line.rsplit("|", 1)[1].strip() for line in proc.stderr.splitlines()
        if line.startswith("import time:") and "|" in line
    }


@pytest.mark.parametrize(
    "args",
    [
        ["--help"],
        ["validate", str(EXAMPLES.joinpath("policy-reduce.json"))],
        ["validate", str(EXAMPLES.joinpath("policy-audit.json")),
         "--plan", str(EXAMPLES.joinpath("audit-plan.json"))],
        ["schema", "policy"],
        ["schema", "plan"],
        ["schema", "report"],
    ],
    ids=["help", "validate", "validate-plan", "schema-policy", "schema-plan", "schema-report"],
)
def test_the_command_line_starts_without_numpy_or_the_kernel(args):
    modules = _imported(*args)
    assert "contextpolicy.cli.main" in modules  # the probe sees the package's own imports
    heavy = sorted(m for m in modules if m.split(".")[0] == "numpy" or "_kernel" in m)
    assert heavy == []


def test_reduce_does_load_the_kernel():
    # The probe can fail: a command that needs the kernel is seen loading it; lines read as
    # bytes need no numpy from the compiled kernel (the twin's modules import it).
    from contextpolicy import kernel_info

    modules = _imported("reduce")
    assert "contextpolicy._kernel" in modules
    assert ("numpy" in modules) is not kernel_info()["compiled"]


# ---------------------------------------------------------------------------------------------
# "This fragment changed", one rule for the contract and the audit: as the model sees it.

QUESTION = Fragment(id="question", kind="question", text="Where is my order?")
SYSTEM = Fragment(id="system", kind="system", text="Be brief.")
HISTORY = Fragment(id="history", kind="history", messages=[{"role": "user", "content": "hi"}])


def _replacing(fid: str, new: Fragment):
    def impl(ctx):
        return PolicyOutcome(fragments=[new if f.id == fid else f for f in ctx.plan.fragments])

    return impl


@pytest.mark.usefixtures("pipeline_kernel")
@pytest.mark.parametrize(
    ("old", "new", "fields"),
    [
        (QUESTION, QUESTION.model_copy(update={"role": "user"}), []),
        (SYSTEM, SYSTEM.model_copy(update={"role": "system"}), []),
        (QUESTION, QUESTION.model_copy(update={"metadata": {"seen": 1}}), []),
        (QUESTION, QUESTION.model_copy(update={"role": "assistant"}), ["role"]),
        (SYSTEM, SYSTEM.model_copy(update={"role": "developer"}), ["role"]),
        (QUESTION, QUESTION.with_content("Where is my refund?"), ["content"]),
        (QUESTION, QUESTION.with_content([{"role": "user", "content": "Where is my order?"}]),
         ["content"]),
        (HISTORY, HISTORY.with_content([{"role": "user", "content": "hi"}]), []),
        (HISTORY, HISTORY.with_content([{"role": "assistant", "content": "hi"}]), ["content"]),
    ],
    ids=["explicit-default-role", "explicit-system-role", "metadata", "role", "system-role",
         "text", "text-to-messages", "equal-messages", "changed-messages"],
)
def test_contract_and_audit_judge_a_change_alike(old, new, fields):
    assert changed_fields(old, new) == fields
    others = [f for f in (SYSTEM, HISTORY, QUESTION) if f.id != old.id]
    fragments = sorted([old, *others], key=lambda f: ["system", "history", "question"].index(f.id))
    plan = ContextPlan(fragments=fragments)
    edited = [new if f.id == old.id else f for f in fragments]

    # The contract: a custom implementation may hand back a protected fragment only unchanged.
    impl = {"validate": _replacing(old.id, new)}
    if old.is_protected and fields:
        with pytest.raises(ContextContractError, match=f"protected fragment '{old.id}'"):
            process_context(plan, {"mode": "validate"}, implementations=impl)
    else:
        result = process_context(plan, {"mode": "validate"}, implementations=impl)
        assert result.input == [m for f in edited for m in (
            f.messages if f.messages is not None
            else [{"role": f.assembled_role, "content": f.text}]
        )]

    # The audit: the same pair is a change exactly when the contract says so.
    audited = ContextPlan(fragments=edited, original=fragments)
    policy = AuditPolicy(mutable_fragment_ids=[] if old.is_protected else [old.id])
    if fields and old.is_protected:
        with pytest.raises(ContextAuditError) as info:
            process_context(audited, policy)
        report = info.value.report
    else:
        report = process_context(audited, policy).report
    assert report.audit is not None
    changes = [(c.fragment_id, c.change, c.fields) for c in report.audit.changes]
    assert changes == ([(old.id, "modified", fields)] if fields else [])


@pytest.mark.usefixtures("pipeline_kernel")
def test_keep_groups_on_a_text_fragment_is_one_rule_everywhere():
    policy = {
        "mode": "reduce", "triggerChars": 10,
        "steps": [{"id": "c", "kind": "compress", "fragmentId": "notes", "handlerId": "h",
                   "targetChars": 1, "keepGroups": 1}],
    }
    notes = Fragment(id="notes", kind="note", text="a long note")
    with pytest.raises(ContextPolicyError) as info:
        validate_context_policy(policy, fragments=[notes], handlers=["h"])
    assert [(i.path, i.code) for i in info.value.issues] == [("steps[0].keepGroups", "not-messages")]
    with pytest.raises(ContextPolicyError) as info:
        process_context(ContextPlan(fragments=[notes]), policy, handlers={"h": lambda r: "x"})
    assert [(i.path, i.code) for i in info.value.issues] == [("steps[0].keepGroups", "not-messages")]
    typed = validate_context_policy(policy)  # no fragments known: the rule waits
    with pytest.raises(ContextPolicyError) as info:
        process_context(ContextPlan(fragments=[notes]), typed, handlers={"h": lambda r: "x"})
    assert info.value.codes == ["not-messages"]


@pytest.mark.packaging  # reads the source tree, which an installed wheel's suite does not have
def test_the_architecture_tree_names_every_module_and_only_real_ones():
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    page = (root / "docs" / "contributing" / "architecture.md").read_text("utf-8")
    tree = page.split("```text\n", 1)[1].split("```", 1)[0]
    named: set[Path] = set()
    stack: list[Path] = []
    for line in tree.splitlines():
        start = next(i for i, c in enumerate(line) if c.isalnum() or c in "_.")
        name = line[start:].split()[0]
        depth = start // 4  # "├── " is one level
        base = stack[depth - 1] if depth else root
        path = base / name.rstrip("/")
        assert path.exists(), f"{name} (at {path.relative_to(root)}) does not exist"
        del stack[depth:]
        if name.endswith("/"):
            stack.append(path)
        else:
            named.add(path)
    package = root / "src" / "contextpolicy"
    # a subpackage's __init__.py is named by its folder
    modules = {p for p in package.rglob("*.py")
               if p.name != "__init__.py" or p.parent == package}
    kernel = {p for p in (root / "csrc").iterdir() if p.suffix in (".pyx", ".pxi", ".pxd", ".h")}
    unnamed = sorted(str(p.relative_to(root)) for p in (modules | kernel) - named)
    assert unnamed == [], f"the architecture page does not name {unnamed}"
    assert len(named) >= 50


def test_every_test_the_guarantees_name_exists():
    import re
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    page = (root / "docs" / "concepts" / "guarantees.md").read_text("utf-8")
    section = page.split("## Guarantees under hostile input", 1)[1].split("\n## ", 1)[0]
    current = None
    named = 0
    for file, name in re.findall(r"`(tests/[\w/]+\.py)?::(\w+)`", section):
        current = file or current
        assert current is not None, name
        source = (root / current).read_text("utf-8")
        assert f"def {name}(" in source, f"{current}::{name}"
        named += 1
    assert named >= 15


def test_the_tests_mirror_the_package_and_share_only_through_support():
    import ast
    import re
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    tests = root / "tests"
    package = Path(contextpolicy.__file__).resolve().parent  # the source's, or the installed one
    folders = {p.name for p in tests.iterdir() if (p / "__init__.py").exists()}
    layers = {p.name for p in package.iterdir() if (p / "__init__.py").exists()}
    # a folder per layer of the package; the kernel and the core are its top-level modules;
    # the project's own checks and the shared helpers beside them
    assert folders - {"kernel", "core", "project", "support"} <= layers, folders - layers
    assert {"jsonl", "batch", "cli", "adapters", "handlers", "counters"} <= folders
    assert sorted(p.name for p in tests.glob("test_*.py")) == []  # every test in a folder
    assert not list((tests / "support").glob("test_*.py"))
    borrowed = []
    for path in sorted(tests.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text("utf-8"))):
            if isinstance(node, ast.ImportFrom):
                module = "." * node.level + (node.module or "")
                names = [a.name for a in node.names]
                if re.search(r"(^|\.)test_\w+$", module) or any(n.startswith("test_")
                                                                for n in names):
                    borrowed.append(f"{path.relative_to(root)}:{node.lineno} {module}")
    assert borrowed == [], "a test module imports another: share it through tests/support"
