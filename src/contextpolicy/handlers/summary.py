"""``summarize``: the messages a step hands over, replaced by one message carrying a summary.

The handler renders the messages as a plain transcript (:func:`render_transcript`), asks the
summariser for a summary of at most ``target_chars`` chars, and returns one message: ``prefix``
and the summary, with ``role``, marked in its ``metadata`` (``{"contextpolicy": {"kind":
"summary", "messages": n}}``, :func:`is_summary`) so that a later run recognises it; its
transcript then reads it as the earlier summary it is. For a text fragment it returns the
prefixed summary as text.

It summarises whole groups: everything the step hands it, which is the fragment or, with the
step's ``keepGroups``, its groups older than the newest ones, split where a trim would cut, so
no tool call or result is ever left without its other half.

The summariser is a function ``fn(text, target_chars) -> str``, sync or async, or a chat model
(anything with ``invoke``/``ainvoke``, a LangChain chat model through the ``[langchain]``
extra; nothing is imported from LangChain), which is sent ``prompt``. A coroutine function, or
a model with ``use_async=True``, makes an async handler for ``aprocess_context``.
``target_chars`` asked for is the step's ``targetChars`` less the verbatim messages and the
prefix, but never less than ``min_target_chars``.
"""

from __future__ import annotations

import inspect
import json
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from .. import _kernel
from .._tables import (
    ITEM_CALL,
    ITEM_MESSAGE,
    ITEM_OUTPUT,
    ITEM_REASONING,
    MAX_JSON_DEPTH,
    TEXT_PART_TYPES,
    TOOL_RESULT_PART,
    TOOL_RESULT_ROLES,
    TOOL_USE_PART,
)
from ..errors import ContextCancelledError, ContextPlanError
from ._base import BuiltinHandler
from ._parts import item_of, part_type, text_of
from .params import DEFAULT_PREFIX, DEFAULT_PROMPT, SUMMARIZE, SummarizeParams, checked

if TYPE_CHECKING:
    from ..implementations.base import CompressRequest

__all__ = ["AsyncSummarize", "Summarize", "is_summary", "render_transcript", "summarize"]

MARK_KEY = "contextpolicy"
_TEXT_PARTS = frozenset(TEXT_PART_TYPES[:3])


def is_summary(message: Any) -> bool:
    """Whether ``message`` is a summary message :func:`summarize` wrote."""
    if not isinstance(message, dict):
        return False
    meta = message.get("metadata")
    mark = meta.get(MARK_KEY) if isinstance(meta, dict) else None
    return isinstance(mark, dict) and mark.get("kind") == "summary"


def _json(value: Any) -> str:
    """A tool input or arguments as a summariser reads them: the compact JSON the kernels
    measure (at any depth they measure, without recursion); for a value JSON cannot hold, its
    JSON with ``str()`` of what JSON cannot hold, or its ``str()``."""
    if isinstance(value, str):
        return value
    try:
        return _kernel.compact_json(value)
    except ContextPlanError as exc:
        if "too-deep" in exc.codes:
            return f"[{type(value).__name__} nested deeper than {MAX_JSON_DEPTH} levels]"
    try:
        return json.dumps(value, ensure_ascii=False, separators=(",", ":"), default=str)
    except (TypeError, ValueError, RecursionError):
        pass
    try:
        return str(value)
    except RecursionError:
        return f"[{type(value).__name__}]"


def _text(value: Any, depth: int = 0) -> str:
    """The readable text of a content value: strs and text parts, tool blocks in words."""
    if value is None:
        return ""
    if isinstance(value, str):
        return value
    if not isinstance(value, list) or depth > 100:
        return f"[{type(value).__name__}]"
    pieces: list[str] = []
    for part in value:
        if isinstance(part, str):
            pieces.append(part)
            continue
        if not isinstance(part, dict):
            continue
        kind = part_type(part)
        if kind in _TEXT_PARTS and isinstance(part.get("text"), str):
            pieces.append(part["text"])
        elif kind == TOOL_USE_PART:
            pieces.append(f"[called {part.get('name')}({_json(part.get('input', {}))})]")
        elif kind == TOOL_RESULT_PART:
            pieces.append(f"[tool result: {_text(part.get('content'), depth + 1)}]")
        elif kind in ("thinking", "redacted_thinking"):
            continue  # the model's private reasoning: not the conversation
        else:
            pieces.append(f"[{kind if kind is not None else 'part'}]")
    return "\n".join(p for p in pieces if p)


def _line(message: Any) -> str | None:
    item = item_of(message)
    if item == ITEM_CALL:
        args = message.get("arguments", message.get("input", ""))
        return f"assistant: [called {message.get('name')}({_json(args)})]"
    if item == ITEM_OUTPUT:
        return f"tool: [result of {message.get('call_id')}: {_text(message.get('output'))}]"
    if item == ITEM_REASONING:
        return None
    if item != ITEM_MESSAGE:
        kind = text_of(message.get("type")) if isinstance(message, dict) else None
        return f"[{kind}]" if kind is not None else None
    role = message.get("role")
    name = text_of(role)
    text = _text(message.get("content"))
    if is_summary(message):
        return f"(summary of earlier messages) {text}"
    calls = message.get("tool_calls")
    if isinstance(calls, list):
        for call in calls:
            fn = call.get("function") if isinstance(call, dict) else None
            if isinstance(fn, dict):
                text += ("\n" if text else "") + (
                    f"[called {fn.get('name')}({_json(fn.get('arguments', ''))})]")
    if name in TOOL_RESULT_ROLES:
        tool = text_of(message.get("name"))
        return f"tool: [result{' of ' + tool if tool is not None else ''}: {text}]"
    return f"{role if name is None else name}: {text}"


def render_transcript(messages: list[Any]) -> str:
    """``messages`` as a plain transcript, one ``role: text`` entry per message (tool calls and
    results in brackets; thinking and reasoning left out), what a summariser reads."""
    lines = [_line(m) for m in messages]
    return "\n\n".join(line for line in lines if line)


def _is_model(fn: Any) -> bool:
    return callable(getattr(fn, "invoke", None)) or callable(getattr(fn, "ainvoke", None))


def _is_coroutine_fn(fn: Any) -> bool:
    return inspect.iscoroutinefunction(fn) or inspect.iscoroutinefunction(
        getattr(fn, "__call__", None)  # noqa: B004
    )


def _reply_text(reply: Any) -> Any:
    """The text of a chat model's reply (a message with ``content`` or ``text``, or a str)."""
    if isinstance(reply, str):
        return reply
    content = getattr(reply, "content", None)
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return _text(content)
    text = getattr(reply, "text", None)
    text = text() if callable(text) else text
    return text if isinstance(text, str) else reply


class Summarize(BuiltinHandler):
    """The handler :func:`summarize` returns for a sync summariser."""

    kind = SUMMARIZE
    factory = "summarize"
    params: SummarizeParams

    def __init__(self, fn: Any, params: SummarizeParams, handler_id: str | None = None) -> None:
        super().__init__(params, handler_id)
        self.fn = fn

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), (self.fn, self.params, self.handler_id))

    def __repr__(self) -> str:
        return super().__repr__().replace("summarize(", f"summarize({self.fn!r}, ", 1)

    def __eq__(self, other: object) -> bool:
        same = super().__eq__(other)
        return same if same is NotImplemented else bool(same and self.fn == other.fn)  # type: ignore[attr-defined]

    def __hash__(self) -> int:
        return hash((super().__hash__(), id(self.fn)))

    # The work around the summariser's call, shared by the sync and the async handler.

    def prepare(self, request: CompressRequest) -> tuple[str, int]:
        """The transcript to summarise and the target chars to ask for."""
        if request.cancel is not None and request.cancel.is_set():
            raise ContextCancelledError("context processing was cancelled")
        p = self.params
        if isinstance(request.content, str):
            text, budget = request.content, request.target_chars - len(p.prefix)
        else:
            from ..accounting import measure_messages

            text = render_transcript(request.content)
            kept = measure_messages(request.kept).chars if request.kept else 0
            budget = request.target_chars - kept - len(p.prefix)
        return text, max(budget, p.min_target_chars)

    def prompt(self, text: str, target: int) -> str:
        """What a chat model is sent."""
        return self.params.prompt.replace("{target_chars}", str(target)).replace(
            "{transcript}", text)

    def finish(self, request: CompressRequest, summary: Any) -> str | list[dict[str, Any]]:
        """The handler's answer: the summary message (or text)."""
        if not isinstance(summary, str):
            raise TypeError(f"the summariser returned {type(summary).__name__}, not a str")
        p = self.params
        text = p.prefix + summary.strip()
        messages = request.content
        if isinstance(messages, str):
            replaced = len(messages)
        else:
            from ..accounting import measure_messages

            replaced = measure_messages(messages).chars
        if len(text) >= replaced:
            raise ValueError(
                f"the summary ({len(text)} chars with its prefix) is not shorter than the "
                f"{'text' if isinstance(messages, str) else 'messages'} it replaces "
                f"({replaced} chars)"
            )
        if isinstance(messages, str):
            return text
        message: dict[str, Any] = {"role": p.role, "content": text}
        if any(isinstance(m.get("type"), str) for m in [*messages, *(request.kept or [])]):
            message = {"type": "message", **message}  # a history of Responses items
        if p.mark:
            message["metadata"] = {MARK_KEY: {"kind": "summary", "messages": len(messages)}}
        return [message]

    def __call__(self, request: CompressRequest) -> str | list[dict[str, Any]]:
        text, target = self.prepare(request)
        fn = self.fn
        if _is_model(fn):
            summary = _reply_text(fn.invoke(self.prompt(text, target)))
        else:
            summary = fn(text, target)
        if inspect.isawaitable(summary):
            close = getattr(summary, "close", None)
            if close is not None:
                close()
            raise TypeError("the summariser returned an awaitable: pass an async summariser "
                            "to summarize() for an async handler (aprocess_context)")
        return self.finish(request, summary)


class AsyncSummarize(Summarize):
    """The handler :func:`summarize` returns for an async summariser (``aprocess_context``)."""

    async def __call__(  # type: ignore[override]
        self, request: CompressRequest
    ) -> str | list[dict[str, Any]]:
        text, target = self.prepare(request)
        fn = self.fn
        if _is_model(fn):
            reply = fn.ainvoke(self.prompt(text, target))
            summary = _reply_text(await reply)
        else:
            summary = fn(text, target)
            if inspect.isawaitable(summary):
                summary = await summary
        return self.finish(request, summary)


def summarize(
    fn: Callable[[str, int], Any] | Any,
    *,
    role: str = "user",
    prefix: str = DEFAULT_PREFIX,
    prompt: str = DEFAULT_PROMPT,
    min_target_chars: int = 200,
    mark: bool = True,
    use_async: bool | None = None,
    handler_id: str | None = None,
) -> Summarize:
    """A compress handler that replaces the messages it is handed by a summary (see the
    module's docstring); its id is ``"summarize"`` unless ``handler_id`` says otherwise.

    ``fn``: ``fn(text, target_chars) -> str`` (or a coroutine function), or a chat model with
    ``invoke`` / ``ainvoke``. ``use_async``: for a model, ``True`` makes an async handler that
    awaits ``ainvoke`` (default: sync, ``invoke``); for a function it must agree with it.

    Raises :class:`~contextpolicy.ContextPolicyError` naming every bad parameter, and
    ``TypeError`` for a summariser that is neither.
    """
    params = checked(SUMMARIZE, {
        "role": role, "prefix": prefix, "prompt": prompt, "min_target_chars": min_target_chars,
        "mark": mark,
    })
    assert isinstance(params, SummarizeParams)
    if use_async is not None and type(use_async) is not bool:
        raise TypeError(f"use_async: expected True, False or None, got {use_async!r}")
    if _is_model(fn):
        has_sync = callable(getattr(fn, "invoke", None))
        has_async = callable(getattr(fn, "ainvoke", None))
        is_async = use_async if use_async is not None else not has_sync
        if (is_async and not has_async) or (not is_async and not has_sync):
            raise TypeError(f"the chat model has no {'ainvoke' if is_async else 'invoke'}()")
    elif callable(fn):
        is_async = _is_coroutine_fn(fn)
        if use_async is not None and use_async != is_async:
            raise TypeError(
                f"use_async={use_async} for a {'coroutine ' if is_async else ''}function: "
                "an async handler needs an async summariser"
                if use_async else "an async summariser makes an async handler")
    else:
        raise TypeError(
            f"expected a function fn(text, target_chars) -> str or a chat model, got "
            f"{type(fn).__name__}"
        )
    cls = AsyncSummarize if is_async else Summarize
    return cls(fn, params, handler_id)
