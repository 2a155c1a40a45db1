"""Pydantic AI messages as the plain chat dicts the core measures, and the way back.

A ``ModelRequest`` holds several parts (a system prompt and the user's prompt; the returns of
several tool calls), each of which a chat API sends as a message of its own, so a request
becomes **one dict per part**; a ``ModelResponse`` is one model output, so it becomes **one
assistant dict**:

- ``SystemPromptPart``: ``{"role": "system", "content": text}``;
- ``UserPromptPart``: ``{"role": "user", "content": text}``, or a list of parts: text
  (``str``, ``TextContent``) as ``text`` parts, images, audio, documents and files as opaque
  parts of their ``kind`` (counted 0, and in ``opaqueParts``); a ``CachePoint`` is a marker,
  not content, and has no part;
- ``ToolReturnPart`` (and its typed kinds): ``{"role": "tool", "tool_call_id": id, "content":
  text}``, the text being the return as the model reads it (``model_response_str``: a str as
  it is, anything else as its compact JSON), then its files as opaque parts;
- ``RetryPromptPart`` naming a tool: a ``tool`` dict answering that call; a retry that answers
  no call (``RetryPromptPart`` without a tool, ``RetryFeedbackPart``): ``{"role": "system",
  "content": text}``, so that it never opens a turn (it is the framework's feedback on the
  agent's work, not the user's question);
- any other request part (deltas, baselines, compactions, speech): an opaque item
  (``{"type": "pydantic-ai-<part_kind>"}``) inside its turn; a request without parts:
  ``{"role": "system", "content": ""}``;
- ``ModelResponse``: ``{"role": "assistant", "content": [...], "tool_calls": [...]}`` with one
  content part per part that is not a tool call, in order (``TextPart`` as ``text``,
  ``ThinkingPart`` as ``thinking``, any other part opaque) and one ``tool_calls`` entry per
  ``ToolCallPart`` (its name and ``args_as_json_str()``, the arguments as they are sent).

Only the text a part carries counts: framing the framework adds when it sends a part (the
``{"error": ...}`` wrapper of a failed tool return on providers without an error channel, a
retry's closing line or fence) counts 0, like roles and keys.

:meth:`Dicts.back` maps the dicts of a result's input to messages: a dict the policy kept, or a
handler left as it was, is its original part; a request all of whose parts are kept unchanged
is the original ``ModelRequest``, and one some of whose parts were dropped or changed is a copy
(``dataclasses.replace``) holding the kept parts, every other field the original's; a response
a handler changed is a copy with only the changed parts replaced (a ``TextPart`` whose text
changed loses its provider ``id``, so a provider never resends its stored copy instead); a dict
no original stands behind (a summary) becomes a new message. Nothing given is mutated.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace
from typing import Any, TypeGuard

from pydantic_ai.messages import (
    CachePoint,
    ModelRequest,
    ModelResponse,
    NativeToolCallPart,
    RetryFeedbackPart,
    RetryPromptPart,
    SystemPromptPart,
    TextContent,
    TextPart,
    ThinkingPart,
    ToolCallPart,
    ToolReturnPart,
    UserPromptPart,
)

from .._tables import TEXT_PART_TYPES
from ..content import same
from ..errors import ContextPlanError, Issue

__all__ = ["WHOLE", "Dicts", "chat_dicts", "from_chat_dict"]

# The part index of a dict that stands for its whole message (a response, an empty request).
WHOLE = -1
_OPAQUE = "pydantic-ai-"
_TEXTS = frozenset(TEXT_PART_TYPES[:3])  # text, input_text, output_text


def _user_content(part: UserPromptPart) -> Any:
    content = part.content
    if isinstance(content, str):
        return content
    return [_user_item(item) for item in content if not isinstance(item, CachePoint)]


def _user_item(item: Any) -> dict[str, Any]:
    if isinstance(item, str):
        return {"type": "text", "text": item}
    if isinstance(item, TextContent):
        return {"type": "text", "text": item.content}
    return _opaque(item)


def _opaque(item: Any) -> dict[str, Any]:
    kind = getattr(item, "kind", None) or getattr(item, "part_kind", None)
    return {"type": _OPAQUE + (kind if isinstance(kind, str) else type(item).__name__)}


def _tool_content(part: ToolReturnPart) -> Any:
    if type(part.content) is str:  # what model_response_str returns for it, without the walk
        return part.content
    text = part.model_response_str(wrap_if_error=False)
    files = part.files
    if not files:
        return text
    return ([{"type": "text", "text": text}] if text else []) + [_opaque(f) for f in files]


def _retry_text(content: Any) -> str:
    if isinstance(content, str):
        return content
    return json.dumps(content, ensure_ascii=False, separators=(",", ":"), default=str)


def _request_dict(part: Any) -> dict[str, Any]:
    if isinstance(part, SystemPromptPart):
        return {"role": "system", "content": part.content}
    if isinstance(part, UserPromptPart):
        return {"role": "user", "content": _user_content(part)}
    if isinstance(part, ToolReturnPart):
        return {"role": "tool", "tool_call_id": part.tool_call_id, "content": _tool_content(part)}
    if isinstance(part, RetryPromptPart):
        if part.tool_name is not None:
            return {"role": "tool", "tool_call_id": part.tool_call_id,
                    "content": _retry_text(part.content)}
        return {"role": "system", "content": _retry_text(part.content)}
    if isinstance(part, RetryFeedbackPart):
        return {"role": "system", "content": _retry_text(part.content)}
    return _opaque(part)


def _is_call(part: Any) -> TypeGuard[ToolCallPart[Any]]:
    return isinstance(part, ToolCallPart) and not isinstance(part, NativeToolCallPart)


def _response_dict(message: ModelResponse) -> dict[str, Any]:
    content: list[dict[str, Any]] = []
    calls: list[dict[str, Any]] = []
    for part in message.parts:
        if _is_call(part):
            calls.append({"id": part.tool_call_id, "type": "function", "function": {
                "name": part.tool_name, "arguments": part.args_as_json_str()}})
        elif isinstance(part, TextPart):
            content.append({"type": "text", "text": part.content})
        elif isinstance(part, ThinkingPart):
            content.append({"type": "thinking", "thinking": part.content})
        else:
            content.append(_opaque(part))
    out: dict[str, Any] = {"role": "assistant", "content": content}
    if calls:
        out["tool_calls"] = calls
    return out


@dataclass(frozen=True)
class Dicts:
    """The chat dicts of a message list (the plan holds them, so no id is reused while this
    lives) and, for each, where it comes from: ``(message index, part index)``, the part index
    being :data:`WHOLE` for a dict that stands for its whole message."""

    messages: Sequence[Any]
    dicts: list[dict[str, Any]]
    where: list[tuple[int, int]]
    path: str

    def located(self, exc: ContextPlanError) -> ContextPlanError:
        """``exc`` (whose paths name dicts, ``messages[k]...``) naming messages and parts."""
        issues = []
        for issue in exc.issues:
            path = issue.path
            if path.startswith("messages["):
                k, _, rest = path[len("messages["):].partition("]")
                if k.isdigit() and int(k) < len(self.where):
                    m, p = self.where[int(k)]
                    part = f".parts[{p}]" if p != WHOLE else ""
                    path = f"{self.path}[{m}]{part}{rest}"
            issues.append(Issue(path, issue.message, issue.code))
        return ContextPlanError(issues)

    def back(self, kept: Iterable[tuple[int, bool, dict[str, Any]]],
             first: int = 0) -> list[Any]:
        """The messages of a result's input, given for each of its dicts (``first`` being the
        index of the first in the input) the index of the given dict it stands for (``-1``:
        none), whether it is that dict unchanged, and the dict itself (see the module
        docstring)."""
        out: list[Any] = []
        run: list[Any] = []  # [message index, part indices, parts, changed]

        def flush() -> None:
            if run:
                m, indices, parts, changed = run
                message = self.messages[m]
                whole = not changed and indices == list(range(len(message.parts)))
                out.append(message if whole else replace(message, parts=parts))
                run.clear()

        for j, (s, unchanged, d) in enumerate(kept, first):
            if s < 0:
                flush()
                out.append(from_chat_dict(d, j))
                continue
            m, p = self.where[s]
            message = self.messages[m]
            if p == WHOLE:
                flush()
                out.append(message if unchanged or isinstance(message, ModelRequest)
                           else _edited_response(message, self.dicts[s], d, j))
                continue
            if not run or run[0] != m or p <= run[1][-1]:
                flush()
                run.extend((m, [], [], False))
            part = message.parts[p]
            new = part if unchanged else _edited_part(part, self.dicts[s], d, j)
            run[1].append(p)
            run[2].append(new)
            run[3] = run[3] or new is not part
        flush()
        return out


def chat_dicts(messages: Sequence[Any], path: str = "messages") -> Dicts:
    """The chat dicts of ``messages`` (see the module docstring); anything that is not a
    ``ModelRequest`` or ``ModelResponse`` is a :class:`ContextPlanError` naming its index under
    ``path``, and so is a part Pydantic AI could not render for a model (arguments or a return
    that JSON cannot hold)."""
    dicts: list[dict[str, Any]] = []
    where: list[tuple[int, int]] = []
    i = p = WHOLE
    try:
        for i, message in enumerate(messages):
            p = WHOLE
            if isinstance(message, ModelResponse):
                dicts.append(_response_dict(message))
                where.append((i, WHOLE))
            elif isinstance(message, ModelRequest):
                if not message.parts:
                    dicts.append({"role": "system", "content": ""})
                    where.append((i, WHOLE))
                for p, part in enumerate(message.parts):
                    dicts.append(_request_dict(part))
                    where.append((i, p))
            else:
                raise ContextPlanError(
                    "expected a Pydantic AI message (ModelRequest or ModelResponse), got "
                    f"{type(message).__name__}", path=f"{path}[{i}]", code="invalid-message")
    except (ValueError, TypeError) as exc:
        if isinstance(exc, ContextPlanError):
            raise
        where_ = f"{path}[{i}]" + (f".parts[{p}]" if p != WHOLE else "")
        raise ContextPlanError(
            f"cannot be read as a model is sent it: {exc}".split("\n")[0], path=where_,
            code="invalid-message") from exc
    return Dicts(messages, dicts, where, path)


def _unreadable(index: int, what: str) -> ContextPlanError:
    return ContextPlanError(
        f"a compress handler wrote {what}, which a Pydantic AI message cannot hold",
        path=f"input[{index}]", code="unsupported-message")


def _text(content: Any, index: int) -> str:
    """The text of a content a handler wrote: a str, or a list of text parts (their texts
    joined, which counts what the list counts)."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        texts = []
        for part in content:
            if not (isinstance(part, dict) and part.get("type") in _TEXTS
                    and isinstance(part.get("text"), str)):
                raise _unreadable(index, "a content part that is not text where only text goes")
            texts.append(part["text"])
        return "".join(texts)
    raise _unreadable(index, f"content of type {type(content).__name__}")


def _items(before: list[Any], after: list[Any], originals: list[Any], index: int) -> list[Any]:
    """The items of a list content whose parts a handler changed: a changed text part as its
    text, an unchanged part as its original item (``originals``, one per part of ``before``)."""
    if len(after) != len(before):
        if all(isinstance(p, dict) and p.get("type") in _TEXTS for p in after):
            return [_text([p], index) for p in after]
        raise _unreadable(index, "another number of parts beside parts that are not text")
    out = []
    for was, now, original in zip(before, after, originals, strict=True):
        if same(was, now):
            out.append(original)
        elif isinstance(now, dict) and now.get("type") in _TEXTS:
            text = _text([now], index)
            out.append(replace(original, content=text) if isinstance(original, TextContent)
                       else text)
        else:
            raise _unreadable(index, "a changed part that is not text")
    return out


def _edited_part(part: Any, before: dict[str, Any], after: Any, index: int) -> Any:
    """``part`` with the content a handler wrote into its dict (``before`` became ``after``)."""
    if not isinstance(after, dict):
        raise _unreadable(index, f"a {type(after).__name__} in place of a message")
    content = after.get("content")
    if same(content, before.get("content")):
        return part
    if isinstance(part, UserPromptPart):
        if isinstance(content, list) and isinstance(part.content, list):
            originals = [item for item in part.content if not isinstance(item, CachePoint)]
            return replace(part, content=_items(before["content"], content, originals, index))
        return replace(part, content=_text(content, index))
    if isinstance(part, ToolReturnPart):
        if isinstance(content, list):
            entries, files = before["content"], part.files
            if not isinstance(entries, list):  # a text content became parts: text only
                return replace(part, content=_text(content, index))
            # The parts are the return's text (when it has any), then its files.
            text = part.model_response_str(wrap_if_error=False)
            originals = ([text] if len(entries) > len(files) else []) + list(files)
            items = _items(entries, content, originals, index)
            texts = "".join(x for x in items if isinstance(x, str))
            kept = [x for x in items if not isinstance(x, str)]
            return replace(part, content=[texts, *kept] if kept else texts)
        return replace(part, content=_text(content, index))
    if isinstance(part, (SystemPromptPart, RetryPromptPart, RetryFeedbackPart)):
        return replace(part, content=_text(content, index))
    raise _unreadable(index, f"a change to a {type(part).__name__}, which carries no text")


def _edited_response(message: ModelResponse, before: dict[str, Any], after: Any,
                     index: int) -> ModelResponse:
    """``message`` with the parts a handler changed in its dict replaced."""
    if not isinstance(after, dict):
        raise _unreadable(index, f"a {type(after).__name__} in place of a message")
    parts: list[Any] = list(message.parts)
    others = [k for k, p in enumerate(parts) if not _is_call(p)]
    calls = [k for k, p in enumerate(parts) if _is_call(p)]
    content = after.get("content")
    if not same(content, before.get("content")):
        if isinstance(content, str):
            content = [{"type": "text", "text": content}]
        elif content is None:
            content = []
        if not isinstance(content, list) or len(content) != len(others):
            raise _unreadable(index, "another number of parts in a model response it kept")
        for k, was, now in zip(others, before["content"], content, strict=True):
            if same(was, now):
                continue
            part, kind = parts[k], now.get("type") if isinstance(now, dict) else None
            if isinstance(part, TextPart) and kind in _TEXTS:
                parts[k] = replace(part, content=_text([now], index), id=None)
            elif (isinstance(part, ThinkingPart) and kind == "thinking"
                  and isinstance(now.get("thinking"), str)):
                parts[k] = replace(part, content=now["thinking"])
            else:
                raise _unreadable(index, f"a change to a {type(part).__name__} it cannot hold")
    old, new = before.get("tool_calls") or [], after.get("tool_calls") or []
    if not same(old, new):
        if not isinstance(new, list) or len(new) != len(calls):
            raise _unreadable(index, "another list of tool calls in a model response it kept")
        for k, was, now in zip(calls, old, new, strict=True):
            if not same(was, now):
                parts[k] = _edited_call(parts[k], now, index)
    if all(a is b for a, b in zip(parts, message.parts, strict=True)):
        return message
    return replace(message, parts=parts)


def _edited_call(part: ToolCallPart, entry: Any, index: int) -> ToolCallPart:
    fn = entry.get("function") if isinstance(entry, dict) else None
    name = fn.get("name") if isinstance(fn, dict) else None
    arguments = fn.get("arguments") if isinstance(fn, dict) else None
    if not isinstance(name, str) or not isinstance(arguments, str):
        raise _unreadable(index, "a tool call without a name and arguments")
    args: Any = arguments
    if not isinstance(part.args, str):  # held as a dict: the arguments stay a JSON object
        try:
            args = json.loads(arguments) if arguments else {}
        except ValueError:
            args = None
        if not isinstance(args, dict):
            raise _unreadable(index, "tool call arguments that are not a JSON object")
    return replace(part, tool_name=name, args=args, id=None)


def from_chat_dict(message: Any, index: int) -> Any:
    """A new Pydantic AI message for a dict no given message stands behind (a summary), at
    ``index`` of the model input: a ``user``, ``system``/``developer`` or ``tool`` dict as a
    ``ModelRequest`` of one part, an ``assistant`` dict as a ``ModelResponse``."""
    if not isinstance(message, dict):
        raise _unreadable(index, f"a {type(message).__name__} in place of a message")
    role, content = message.get("role"), message.get("content")
    metadata = message.get("metadata")
    meta = dict(metadata) if isinstance(metadata, dict) else None  # a summary's mark
    if role == "user":
        if isinstance(content, list) and any(
                isinstance(p, dict) and p.get("type") not in _TEXTS for p in content):
            raise _unreadable(index, "a new user message with parts that are not text")
        return ModelRequest(parts=[UserPromptPart(_text(content, index))], metadata=meta)
    if role in ("system", "developer"):
        return ModelRequest(parts=[SystemPromptPart(_text(content, index))], metadata=meta)
    if role == "tool":
        call_id, name = message.get("tool_call_id"), message.get("name")
        if not isinstance(call_id, str):
            raise _unreadable(index, "a new tool message without a tool_call_id")
        return ModelRequest(parts=[ToolReturnPart(
            tool_name=name if isinstance(name, str) else "", content=_text(content, index),
            tool_call_id=call_id)], metadata=meta)
    if role == "assistant":
        text = _text(content, index)
        parts: list[Any] = [TextPart(text)] if text else []
        for entry in message.get("tool_calls") or []:
            fn = entry.get("function") if isinstance(entry, dict) else None
            if not (isinstance(fn, dict) and isinstance(fn.get("name"), str)
                    and isinstance(entry.get("id"), str)):
                raise _unreadable(index, "a tool call without an id, a name and arguments")
            parts.append(ToolCallPart(fn["name"], fn.get("arguments") or None,
                                      tool_call_id=entry["id"]))
        return ModelResponse(parts=parts, metadata=meta)
    raise _unreadable(index, f"a new message of role {role!r}")

