"""The tool call ids a message makes and the ids it answers.

Shared by the pure-Python kernel's pairing check and the trim's guard that keeps a call with its
results (the compiled kernel reads the same fields in C). Messages are read as the kernels read
them (``_read``): ids are exact str, and a message changed since it was measured (a part that is
no longer a dict, say) is read as far as it still holds ids, never trusted to hold them.
"""

from __future__ import annotations

from typing import Any

from ._read import exact_str, fields, items
from ._tables import (
    ITEM_CALL,
    ITEM_CODES,
    ITEM_MESSAGE,
    ITEM_OUTPUT,
    ITEM_UNKNOWN,
    ROLE_CODES,
    ROLE_TOOL,
    TOOL_RESULT_PART,
    TOOL_USE_PART,
)

__all__ = ["call_ids", "item_code", "result_ids"]


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


def item_code(f: dict[str, Any]) -> int:
    """The Responses item code of a message's fields (``_tables.ITEM_CODES``): its string
    ``type``'s, ``ITEM_UNKNOWN`` for any other string, ``ITEM_MESSAGE`` without one."""
    value = _str(f, "type")
    if value is None:
        return ITEM_MESSAGE
    return ITEM_CODES.get(value, ITEM_UNKNOWN)


def _item(f: dict[str, Any]) -> int:
    """What kind of item a message is, as measuring decides: an unknown type with a role is a
    chat message."""
    code = item_code(f)
    if code == ITEM_UNKNOWN and isinstance(f.get("role"), str):
        return ITEM_MESSAGE
    return code


def call_ids(message: dict[str, Any]) -> list[str]:
    """Ids of the tool calls a message makes: ``tool_calls[].id`` and ``tool_use`` blocks, or
    a Responses call item's ``call_id``."""
    f = fields(message)
    item = _item(f)
    if item != ITEM_MESSAGE:
        cid = _str(f, "call_id") if item == ITEM_CALL else None
        return [cid] if cid is not None else []
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
    ``tool_use_id``, or a Responses output item's ``call_id`` (``None`` where a result names
    no id)."""
    f = fields(message)
    item = _item(f)
    if item != ITEM_MESSAGE:
        return [_str(f, "call_id")] if item == ITEM_OUTPUT else []
    ids: list[str | None] = []
    role = _str(f, "role")
    if role is not None and ROLE_CODES.get(role) == ROLE_TOOL:
        ids.append(_str(f, "tool_call_id"))
    for part in _typed_parts(f.get("content"), TOOL_RESULT_PART):
        ids.append(_str(part, "tool_use_id"))
    return ids
