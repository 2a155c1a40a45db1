"""The stable codes the package can emit, read from its source: every error and warning code
(``Issue.code``, ``PlanWarning.code``), found where the code is written rather than listed by
hand, so that a new code cannot be added without the reference page knowing.

A code is a string literal in one of these places: the ``code=`` argument of any call; the third
argument of ``Issue(path, message, code)``; the fourth of ``duplicate_ids(ids, path, what,
code)``; the second of ``_fail(message, code, segment)`` in the Cython kernel; an assignment to
a name ``code`` (alone or in a tuple); the values of a dict, or the items of a tuple, bound to a
name that ends in ``CODES``, and the default of such a dict's ``get``; the default of a
parameter named ``code``; and the code of a pairing warning as the twin kernel appends it. A
code built by an f-string (``f"invalid-{name}-argument"``) is a pattern.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import contextpolicy

PACKAGE = Path(contextpolicy.__file__).resolve().parent
CSRC = PACKAGE.parent.parent / "csrc"
_POSITIONAL = {"Issue": 2, "duplicate_ids": 3, "_fail": 1, "KernelWarning": 2}


def _name(node: ast.expr) -> str | None:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return node.attr
    return None


def _strings(node: ast.expr | None) -> list[str]:
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return [node.value]
    if isinstance(node, ast.IfExp):  # code = "a" if ... else "b"
        return _strings(node.body) + _strings(node.orelse)
    return []


def _pattern(node: ast.expr) -> str | None:
    """An f-string code (``f"invalid-{name}-argument"``) as a regular expression."""
    if not isinstance(node, ast.JoinedStr):
        return None
    return "".join(re.escape(v.value) if isinstance(v, ast.Constant) else "[a-z0-9-]+"
                   for v in node.values)


def codes_in_python(source: str) -> tuple[set[str], set[str]]:
    """The codes written in ``source``, and the patterns of the codes it builds."""
    found: set[str] = set()
    patterns: set[str] = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            # a parameter code="invalid": the code of an issue made without one
            args = node.args
            for arg, default in zip(args.kwonlyargs, args.kw_defaults, strict=True):
                if arg.arg == "code":
                    found.update(_strings(default))
            positional = args.posonlyargs + args.args
            for arg, default in zip(positional[len(positional) - len(args.defaults):],
                                    args.defaults, strict=True):
                if arg.arg == "code":
                    found.update(_strings(default))
        elif isinstance(node, ast.Call):
            # _CODES.get(etype, "invalid"): the code of an error type the table lacks
            func = node.func
            if (isinstance(func, ast.Attribute) and func.attr == "get"
                    and (_name(func.value) or "").endswith("CODES") and len(node.args) == 2):
                found.update(_strings(node.args[1]))
            for kw in node.keywords:
                if kw.arg == "code":
                    found.update(_strings(kw.value))
            at = _POSITIONAL.get(_name(node.func) or "")
            if at is not None and len(node.args) > at:
                found.update(_strings(node.args[at]))
                pattern = _pattern(node.args[at])
                if pattern:
                    patterns.add(pattern)
            # the twin's pairing warnings: found.append((index, "orphan-tool-result", id))
            if _name(node.func) == "append" and node.args and isinstance(node.args[0], ast.Tuple):
                items = node.args[0].elts
                if len(items) == 3:
                    found.update(s for s in _strings(items[1]) if s.endswith(
                        ("-tool-result", "-tool-call")))
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            for target in targets:
                if isinstance(target, ast.Name) and target.id == "code":
                    found.update(_strings(node.value))
                elif isinstance(target, ast.Tuple) and isinstance(node.value, ast.Tuple):
                    for t, v in zip(target.elts, node.value.elts, strict=False):
                        if isinstance(t, ast.Name) and t.id == "code":
                            found.update(_strings(v))
                elif isinstance(target, ast.Name) and target.id.endswith("CODES"):
                    value = node.value
                    if isinstance(value, ast.Dict):
                        for v in value.values:
                            found.update(_strings(v))
                    elif isinstance(value, (ast.Tuple, ast.List)):
                        for v in value.elts:
                            found.update(_strings(v))
    return found, patterns


def codes_in_cython(source: str) -> set[str]:
    found = set(re.findall(r'\bcode="([a-z0-9-]+)"', source))
    for call in re.finditer(r"\b_fail\(", source):
        # the second argument of _fail(message, "code", segment): the first string literal
        # that is a whole argument, after the message
        args = source[call.end():call.end() + 400]
        found.update(re.findall(r',\s*"([a-z][a-z0-9-]*)",', args)[:1])
    return found


def emitted_codes() -> tuple[set[str], set[str]]:
    """Every code the package writes, and the patterns of the codes it builds."""
    codes: set[str] = set()
    patterns: set[str] = set()
    for path in PACKAGE.rglob("*.py"):
        found, built = codes_in_python(path.read_text("utf-8"))
        codes |= found
        patterns |= built
    if CSRC.is_dir():  # a source tree: the compiled kernel's own codes (the twin's, by test)
        for path in [*CSRC.glob("*.pyx"), *CSRC.glob("*.pxi")]:
            codes |= codes_in_cython(path.read_text("utf-8"))
    return codes, patterns
