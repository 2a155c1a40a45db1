"""The tool call ids a message makes and the ids it answers, read from a validated message.

Shared by the pure-Python kernel's pairing check and the trim's guard that keeps a call with its
results (the compiled kernel reads the same fields in C).
"""

from __future__ import annotations

from typing import Any

from ._tables import ROLE_CODES, ROLE_TOOL, TOOL_RESULT_PART, TOOL_USE_PART

__all__ = ["call_ids", "result_ids"]


def call_ids(message: dict[str, Any]) -> list[str]:
    """Ids of the tool calls a message makes: ``tool_calls[].id`` and ``tool_use`` blocks."""
    ids: list[str] = []
    tool_calls = message.get("tool_calls")
    if isinstance(tool_calls, list):
        ids += [c["id"] for c in tool_calls if isinstance(c.get("id"), str)]
    content = message.get("content")
    if isinstance(content, list):
        ids += [
            p["id"] for p in content
            if isinstance(p, dict) and p.get("type") == TOOL_USE_PART
            and isinstance(p.get("id"), str)
        ]
    return ids


def result_ids(message: dict[str, Any]) -> list[str | None]:
    """Ids a message answers: a ``tool`` message's ``tool_call_id`` and ``tool_result`` blocks'
    ``tool_use_id`` (``None`` where a result names no id)."""
    ids: list[str | None] = []
    role = message.get("role")
    if isinstance(role, str) and ROLE_CODES.get(role) == ROLE_TOOL:
        cid = message.get("tool_call_id")
        ids.append(cid if isinstance(cid, str) else None)
    content = message.get("content")
    if isinstance(content, list):
        for part in content:
            if isinstance(part, dict) and part.get("type") == TOOL_RESULT_PART:
                cid = part.get("tool_use_id")
                ids.append(cid if isinstance(cid, str) else None)
    return ids
