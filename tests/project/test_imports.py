"""How the package's modules import each other, read from their source: no cycle, and no module
reaching into another module's private names (the kernel trio aside: the chooser and its two
kernels are one concern split in three)."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

import contextpolicy

PACKAGE = Path(contextpolicy.__file__).resolve().parent
# The chooser, the kernels it chooses between (the twin's modules, one per concern, are
# ``_<concern>_py``), and what both kernels share.
KERNEL_MODULES = {"contextpolicy._kernel", "contextpolicy._kernel_py", "contextpolicy._kernel_c",
                  "contextpolicy._tables", "contextpolicy._kernel_names",
                  "contextpolicy._c_args", "contextpolicy._records"}


def in_kernel(name: str) -> bool:
    return name in KERNEL_MODULES or re.fullmatch(r"contextpolicy\._[a-z_]+_py", name) is not None


def modules() -> dict[str, tuple[Path, bool]]:
    """Every module of the package: its dotted name, its file and whether it is a package."""
    found = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
        is_package = path.name == "__init__.py"
        name = ".".join(parts[:-1] if is_package else parts)
        found[name] = (path, is_package)
    return found


MODULES = modules()


def imports(name: str) -> list[tuple[str, str | None, int]]:
    """``(module, imported name or None, line)`` of every import statement of ``name`` that
    runs (at import time or in a function), resolved to absolute names; those under
    ``if TYPE_CHECKING:`` never run, and are left out."""
    path, is_package = MODULES[name]
    package = name if is_package else name.rpartition(".")[0]
    found: list[tuple[str, str | None, int]] = []

    def visit(node: ast.AST) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.If) and "TYPE_CHECKING" in ast.unparse(child.test):
                for other in child.orelse:
                    visit_one(other)
                continue
            visit_one(child)

    def visit_one(node: ast.AST) -> None:
        if isinstance(node, ast.Import):
            found.extend((alias.name, None, node.lineno) for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[:len(base) - (node.level - 1)]
                module = ".".join(base + ([node.module] if node.module else []))
            else:
                module = node.module or ""
            found.extend((module, alias.name, node.lineno) for alias in node.names)
        visit(node)

    visit(ast.parse(path.read_text("utf-8")))
    return found


def edges(name: str) -> set[str]:
    """The package's modules ``name`` imports (a name imported from a package that is one of
    its modules counts as that module)."""
    out = set()
    for module, imported, _ in imports(name):
        if imported is not None and f"{module}.{imported}" in MODULES:
            out.add(f"{module}.{imported}")
        elif module in MODULES:
            out.add(module)
    out.discard(name)
    return out


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan's, without
    recursion)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    counter = 0
    for root in graph:
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = counter
                    counter += 1
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph[child]))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return found


def test_the_walk_sees_the_package():
    assert len(MODULES) >= 60
    assert "contextpolicy.jsonl.runner" in MODULES and MODULES["contextpolicy.batch"][1]
    # a lazy import inside a function counts; one under TYPE_CHECKING does not
    assert "contextpolicy.cli.tables" in edges("contextpolicy.cli.reduce")
    assert "contextpolicy.batch.table" in edges("contextpolicy.batch")


def test_cycles_are_found():
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}, "e": {"e"}}
    assert cycles(graph) == [["a", "b", "c"]]
    assert cycles({"a": {"b"}, "b": set()}) == []


def test_no_import_cycle_in_the_package():
    graph = {name: edges(name) for name in MODULES}
    assert cycles(graph) == []


def private_imports() -> list[str]:
    found = []
    for name in MODULES:
        for module, imported, line in imports(name):
            if imported is None or not imported.startswith("_") or imported.startswith("__"):
                continue
            if not module.startswith("contextpolicy") or f"{module}.{imported}" in MODULES:
                continue  # another library's name, or a module of the package
            if in_kernel(name) and (in_kernel(module) or in_kernel(f"{module}.{imported}")):
                continue  # within the kernel trio (the compiled kernel is no .py file)
            found.append(f"{name}:{line} imports {imported} from {module}")
    return found


def test_no_module_imports_another_modules_private_name():
    assert private_imports() == []


@pytest.mark.parametrize("source, expected", [
    ("from .prepared import _items\n", ["imports _items from contextpolicy.prepared"]),
    ("from . import _kernel\n", []),  # a module of the package
    ("if TYPE_CHECKING:\n    from .report import _x\n", []),
    ("def f():\n    from ..report import _lazy\n", []),  # resolves above the package: not ours
])
def test_private_imports_are_found(tmp_path, monkeypatch, source, expected):
    # (a kernel module may take another kernel module's private names: see the next test)
    path = tmp_path / "probe.py"
    path.write_text(source, "utf-8")
    monkeypatch.setitem(MODULES, "contextpolicy.probe", (path, False))
    found = [f.split(" ", 1)[1] for f in private_imports() if f.startswith("contextpolicy.probe:")]
    assert found == expected


def test_the_kernel_trio_is_the_only_exception():
    assert in_kernel("contextpolicy._messages_py") and in_kernel("contextpolicy._kernel_c")
    assert not in_kernel("contextpolicy.core") and not in_kernel("contextpolicy.jsonl.worker")
