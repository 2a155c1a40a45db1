"""The tool call ids a message makes and the ids it answers.

Shared by the pure-Python kernel's pairing check and the trim's guard that keeps a call with its
results (the compiled kernel reads the same fields in C). Messages are read as the kernels read
them (``_read``): ids are exact str, and a message changed since it was measured (a part that is
no longer a dict, say) is read as far as it still holds ids, never trusted to hold them.
"""

from __future__ import annotations

from typing import Any

from ._read import exact_str, fields, items
from ._tables import ROLE_CODES, ROLE_TOOL, TOOL_RESULT_PART, TOOL_USE_PART

__all__ = ["call_ids", "result_ids"]


def _str(f: dict[str, Any], key: str) -> str | None:
    value = f.get(key)
    return exact_str(value) if isinstance(value, str) else None


def _typed_parts(content: Any, ptype: str) -> list[dict[str, Any]]:
    """The fields of the parts of ``content`` whose type is ``ptype``."""
    if not isinstance(content, list):
        return []
    found = []
    for _, part in items(content):
        if isinstance(part, dict):
            f = fields(part)
            if _str(f, "type") == ptype:
                found.append(f)
    return found


def call_ids(message: dict[str, Any]) -> list[str]:
    """Ids of the tool calls a message makes: ``tool_calls[].id`` and ``tool_use`` blocks."""
    f = fields(message)
    ids: list[str] = []
    calls = f.get("tool_calls")
    if isinstance(calls, list):
        for _, call in items(calls):
            cid = _str(fields(call), "id") if isinstance(call, dict) else None
            if cid is not None:
                ids.append(cid)
    for part in _typed_parts(f.get("content"), TOOL_USE_PART):
        cid = _str(part, "id")
        if cid is not None:
            ids.append(cid)
    return ids


def result_ids(message: dict[str, Any]) -> list[str | None]:
    """Ids a message answers: a ``tool`` message's ``tool_call_id`` and ``tool_result`` blocks'
    ``tool_use_id`` (``None`` where a result names no id)."""
    f = fields(message)
    ids: list[str | None] = []
    role = _str(f, "role")
    if role is not None and ROLE_CODES.get(role) == ROLE_TOOL:
        ids.append(_str(f, "tool_call_id"))
    for part in _typed_parts(f.get("content"), TOOL_RESULT_PART):
        ids.append(_str(part, "tool_use_id"))
    return ids
