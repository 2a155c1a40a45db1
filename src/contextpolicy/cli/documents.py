"""The documents the commands read: policies, plans and handlers files.

An argument that names one is a file, ``-`` for standard input, or the JSON itself (starting
with ``{`` or ``[``: ``--policy '{"mode": "validate"}'``). JSON is read exactly (integers of any
size); a file named ``.yaml`` or ``.yml`` is read as YAML when PyYAML is installed (the core
never needs it), with the types JSON has and no others, so that a policy means the same in
either. A UTF-8 byte order mark at the start is dropped. Every problem is one
:class:`CliError` that names the document, the line and byte column, and says what was
expected.
"""

from __future__ import annotations

import os
import re
import sys
from typing import Any, ClassVar

from .common import CliError

__all__ = [
    "PARQUET_SUFFIXES", "document_name", "is_inline", "is_parquet", "load_json", "load_yaml",
    "plan_document",
]

YAML_SUFFIXES = (".yaml", ".yml")
# What an argument that names a document may be.
DOCUMENT_ARGUMENT = ("a file (JSON, or YAML named .yaml/.yml), - for standard input, or inline "
                     "JSON starting with { or [")


def is_inline(argument: str) -> bool:
    """An argument that is the JSON document itself: its first character that is not a space is
    ``{`` or ``[`` (a file whose name starts so is given as ``./{...}``)."""
    return argument.lstrip()[:1] in ("{", "[")


def document_name(argument: str) -> str:
    """How messages name the document an argument gives."""
    if is_inline(argument):
        return "<inline JSON>"
    return "<stdin>" if argument == "-" else argument


def load_json(path: str, what: str) -> Any:
    """The document ``path`` gives (see the module's docstring), ``what`` naming it in
    messages (``"policy"``)."""
    from ..jsonl.diagnose import BOM

    name = document_name(path)
    try:
        if is_inline(path):
            data = path.encode("utf-8", "surrogateescape")  # the bytes the shell passed
        elif path != "-":
            with open(_as_path(path), "rb") as f:
                data = f.read()
        elif sys.stdin is None:
            raise CliError(f"<stdin>: cannot read the {what}: standard input is closed")
        else:
            data = sys.stdin.buffer.read()
    except FileNotFoundError as exc:
        raise CliError(f"{path}: cannot read the {what} ({exc.strerror or exc}); expected "
                       f"{DOCUMENT_ARGUMENT}") from None
    except OSError as exc:
        raise CliError(f"{path}: cannot read the {what} ({exc.strerror or exc})") from None
    if data.startswith(BOM):
        data = data[len(BOM):]
    if not is_inline(path) and path.lower().endswith(YAML_SUFFIXES):
        return load_yaml(data, name, what)
    return _loads(data, name, what)


def _loads(data: bytes, name: str, what: str) -> Any:
    import orjson

    from ..jsonl.diagnose import json_problem
    from ..jsonl.files import loads_exactly  # neither numpy nor the kernel

    try:
        return loads_exactly(data)
    except orjson.JSONDecodeError as exc:
        problem = json_problem(data, exc, subject=f"the {what} is not valid JSON")
        raise CliError(problem.at(name)) from None
    except ValueError as exc:  # nested too deeply to read its long numbers exactly
        raise CliError(f"{name}: cannot read the {what}: {exc}") from None


# ---------------------------------------------------------------------------------------------
# YAML

# The plain scalars that are not strings: those of JSON (YAML 1.2's JSON schema) and the other
# spellings of null, true and false of its core schema. PyYAML's defaults are YAML 1.1's, where
# `010` is 8, `1:30` is 90, `no` is false and `2024-01-01` a date: values a policy would then
# hold without anyone having written them.
_YAML_SCALARS = (
    ("tag:yaml.org,2002:null", r"^(?:~|null|Null|NULL|)$", ["~", "n", "N", ""]),
    ("tag:yaml.org,2002:bool", r"^(?:true|True|TRUE|false|False|FALSE)$", list("tTfF")),
    ("tag:yaml.org,2002:int", r"^-?(?:0|[1-9][0-9]*)$", list("-0123456789")),
    ("tag:yaml.org,2002:float", r"^-?(?:0|[1-9][0-9]*)(?:\.[0-9]+)?(?:[eE][-+]?[0-9]+)?$",
     list("-0123456789")),
    ("tag:yaml.org,2002:merge", r"^(?:<<)$", ["<"]),
)


def _loader(yaml: Any) -> Any:
    class JSONTypesLoader(yaml.SafeLoader):  # type: ignore[misc,name-defined]
        yaml_implicit_resolvers: ClassVar[dict[Any, Any]] = {}

    for tag, pattern, first in _YAML_SCALARS:
        JSONTypesLoader.add_implicit_resolver(tag, re.compile(pattern), first)
    return JSONTypesLoader


def load_yaml(data: bytes, name: str, what: str) -> Any:
    """A YAML document (PyYAML), its plain scalars typed as JSON types them."""
    try:
        import yaml
    except ImportError:
        raise CliError(f"{name}: reading a YAML {what} needs PyYAML (pip install "
                       "contextpolicy[yaml]); or give it as JSON") from None
    from ..jsonl.diagnose import utf8_problem

    problem = utf8_problem(data)
    if problem is not None:
        raise CliError(problem.at(name))
    text = data.decode("utf-8")
    try:
        return yaml.load(text, Loader=_loader(yaml))  # a SafeLoader
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        what_went_wrong = getattr(exc, "problem", None) or str(exc)
        if mark is None:
            raise CliError(f"{name}: the {what} is not valid YAML: {what_went_wrong}") from None
        lines = text.split("\n")
        line_text = lines[mark.line] if mark.line < len(lines) else ""
        column = len(line_text[:mark.column].encode("utf-8")) + 1
        raise CliError(f"{name}:{mark.line + 1}:{column}: the {what} is not valid YAML: "
                       f"{what_went_wrong}") from None


# ---------------------------------------------------------------------------------------------
# plans


def plan_document(doc: Any) -> Any:
    """The :class:`ContextPlan` of a plan document (``{"fragments": [...]}``) or of a transcript
    (``{"messages": [...]}``, or the bare list of messages), which is split as ``reduce`` splits
    its lines (``ContextPlan.from_messages``: a step on a history a first turn does not have is
    skipped, ``fragment-absent``). ``ContextPlanError`` when it is neither."""
    from ..errors import ContextPlanError
    from ..plan import ContextPlan, as_plan

    if isinstance(doc, dict) and "fragments" not in doc:
        if "messages" not in doc:
            keys = ", ".join(sorted(map(str, doc))) or "none"
            raise ContextPlanError(
                'expected a plan {"fragments": [...]} or a transcript {"messages": [...]} (or '
                f"its list of messages); the object has keys: {keys}", code="invalid-plan")
        doc = doc["messages"]
    if not isinstance(doc, list):
        return as_plan(doc)
    return ContextPlan.from_messages(doc)


PARQUET_SUFFIXES = (".parquet", ".pq", ".parq")


def is_parquet(path: str | None, *, reading: bool = False) -> bool:
    """Whether ``path`` names Parquet: by its suffix, or (a file being read) by its magic."""
    if path in (None, "-"):
        return False
    assert path is not None
    if path.lower().endswith(PARQUET_SUFFIXES):
        return True
    if reading and os.path.isfile(path):
        try:
            with open(path, "rb") as f:
                return f.read(4) == b"PAR1"
        except OSError:
            return False
    return False


def _as_path(path: str) -> str:
    """``path`` as ``pathlib.Path`` spells it (without importing pathlib): trailing separators
    dropped (``policy.json/`` names the file), the empty path the current folder."""
    seps = os.sep + (os.altsep or "")
    stripped = path.rstrip(seps)
    if not stripped:
        return path[:1] if path else "."  # the root, or the current folder
    return stripped
