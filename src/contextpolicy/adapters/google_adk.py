"""A context policy inside Google's Agent Development Kit (extra ``[google-adk]``).

:func:`context_policy_callback` is a ``before_model_callback`` for an ``LlmAgent``: before every
model call ADK hands it the request it built from the session, and the model receives the
contents the policy keeps::

    from google.adk.agents import LlmAgent
    from contextpolicy.adapters.google_adk import context_policy_callback

    keep = context_policy_callback(policy)
    agent = LlmAgent(name="agent", model="gemini-2.5-flash", before_model_callback=keep, ...)
    keep.last_report  # what the last model call was reduced by, measured

It is the ephemeral mode: ``llm_request.contents`` is replaced for that call only, and the
session's events (the agent's history) stay whole. The default cut is the stable one
(:class:`~contextpolicy.StableCut`), so a prompt cache keeps its prefix from call to call.

Each ``Content`` is one message to the policy: a ``user`` content with text is a user message;
one with ``function_response`` parts carries tool results (Anthropic-style ``tool_result``
blocks, paired with their calls by id), and is never the question; a ``model`` content is an
assistant message whose ``function_call`` parts are ``tool_use`` blocks and whose thoughts are
``thinking`` blocks; inline data and files are opaque parts (0 chars). A trim therefore never
leaves a ``function_response`` without its ``function_call``. The request's system instruction
is the protected ``instructions`` fragment and its tools' declarations the protected ``tools``
fragment, so one policy file works here as in every adapter. A content the policy kept is the
very object ADK built; one a compress handler changed is a new ``Content``.

With ``counter=usage_anchored(...)`` (:func:`~contextpolicy.counters.usage_anchored`) each
model call's reported input tokens (its response's ``usage_metadata.prompt_token_count``) are
recorded for the input the policy assembled for it, so later figures start from the provider's
count: the callback finds the previous call's response among the session's events
(``callback_context.session``) the next time it runs, in the same session for the same agent.

Importing this module does not import ADK; the callback's first call does, through the
objects it is given.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from ..content import same
from ..core import aprocess_context, process_context
from ..errors import ContextPlanError
from ..prepared import is_async_callable
from ..stable import StableCut, StableResult, checked_cut
from ._agent import agent_plan, prepare_agent_policy, tools_text
from ._items import LastResult
from ._returned import origins
from ._usage import anchored_counter
from ._usage_frameworks import SessionCalls

if TYPE_CHECKING:
    from ..prepared import PreparedPolicy
    from ..report import ContextResult

__all__ = ["ContextPolicyCallback", "content_dicts", "context_policy_callback"]


# ---------------------------------------------------------------------------------------------
# Contents as chat dicts, and back


def _part_block(part: Any, ids: _CallIds) -> dict[str, Any]:
    call, response = getattr(part, "function_call", None), getattr(part, "function_response",
                                                                    None)
    if call is not None:
        return {"type": "tool_use", "id": ids.call(call.id, call.name), "name": call.name,
                "input": dict(call.args or {})}
    if response is not None:
        return {"type": "tool_result", "tool_use_id": ids.response(response.id, response.name),
                "content": json.dumps(response.response, ensure_ascii=False, default=str,
                                      separators=(",", ":"))}  # compact, as every adapter
    text = getattr(part, "text", None)
    if text is not None:
        if getattr(part, "thought", None):
            return {"type": "thinking", "thinking": text}
        return {"type": "text", "text": text}
    # inline data, files, executable code and the rest: an opaque part
    return {"type": "file"}


class _CallIds:
    """The ids that pair calls with responses. ADK strips its own call ids before a Gemini
    request, and Gemini pairs a response with the earliest unanswered call of its name: a call
    without an id gets ``name#k`` (its order among the calls of that name), a response without
    one the id of the earliest unanswered call of its name. They live only in the dicts."""

    def __init__(self) -> None:
        self.counts: dict[Any, int] = {}
        self.pending: dict[Any, list[str]] = {}

    def call(self, cid: Any, name: Any) -> Any:
        if cid is not None:
            return cid
        k = self.counts.get(name, 0)
        self.counts[name] = k + 1
        made = f"{name}#{k}"
        self.pending.setdefault(name, []).append(made)
        return made

    def response(self, cid: Any, name: Any) -> Any:
        if cid is not None:
            return cid
        waiting = self.pending.get(name)
        return waiting.pop(0) if waiting else None


def content_dict(content: Any, index: int, path: str = "contents",
                 ids: _CallIds | None = None) -> dict[str, Any]:
    """One ``Content`` as the chat dict the policy measures: ``model`` an assistant message,
    any other role a user message, its parts as blocks (see the module docstring)."""
    ids = ids if ids is not None else _CallIds()
    parts = getattr(content, "parts", None)
    role = getattr(content, "role", None)
    if parts is None and role is None:
        raise ContextPlanError(
            f"expected a google.genai Content, got {type(content).__name__}",
            path=f"{path}[{index}]", code="invalid-message")
    return {"role": "assistant" if role == "model" else "user",
            "content": [_part_block(p, ids) for p in parts or ()]}


def content_dicts(contents: Sequence[Any], path: str = "contents") -> list[dict[str, Any]]:
    """The chat dicts of ``contents``, one per ``Content``, in order."""
    ids = _CallIds()
    return [content_dict(c, i, path, ids) for i, c in enumerate(contents)]


# ADK's fences around an agent's dynamic instruction when it also has a static one: ADK then
# sends the instruction as a ``user`` content of the request (``_label_dynamic_instruction`` in
# google.adk.flows.llm_flows.prompt), its text between these markers and any marker inside it
# elided, so only ADK writes a text that ends with the end marker after the begin marker.
INSTRUCTION_BEGIN = "<<<BEGIN_SYSTEM_INSTRUCTION>>>"
INSTRUCTION_END = "<<<END_SYSTEM_INSTRUCTION>>>"


def is_instruction(content: Any) -> bool:
    """``content`` is an instruction ADK placed among the contents (see above): a ``user``
    content of text parts whose text is fenced by ADK's instruction markers."""
    parts = getattr(content, "parts", None)
    if getattr(content, "role", None) != "user" or not parts:
        return False
    texts: list[str] = [t for p in parts if type(t := getattr(p, "text", None)) is str]
    if len(texts) != len(parts) or any(
            getattr(p, "function_call", None) is not None or getattr(p, "thought", None)
            or getattr(p, "function_response", None) is not None for p in parts):
        return False
    text = "".join(texts).rstrip()
    return text.endswith(INSTRUCTION_END) and INSTRUCTION_BEGIN in text


def _new_part(block: Any, was: Any, types: Any) -> Any:
    """The part for a changed block; ``was``: the original part at its place (``None``: the
    handler wrote it). A changed part is the original with that change, so its other fields
    (a thought signature, metadata) survive."""
    kind = block.get("type") if isinstance(block, Mapping) else None
    if kind == "tool_result":
        text = block.get("content")
        text = text if isinstance(text, str) else json.dumps(text, ensure_ascii=False,
                                                              default=str)
        old = getattr(was, "function_response", None)
        if old is None:
            return types.Part(function_response=types.FunctionResponse(response={"result": text}))
        if json.dumps(old.response, ensure_ascii=False, default=str) == text:
            return was
        return was.model_copy(update={"function_response": old.model_copy(
            update={"response": {"result": text}})})
    if kind == "tool_use":
        old = getattr(was, "function_call", None)
        args = dict(block.get("input") or {})
        if old is None:
            return types.Part(function_call=types.FunctionCall(name=block.get("name"),
                                                               args=args))
        return was.model_copy(update={"function_call": old.model_copy(update={"args": args})})
    if kind == "file" and was is not None:
        return was  # an opaque part: nothing of it was measured, nothing of it changes
    if kind == "thinking":
        text, thought = block.get("thinking", ""), True
    else:
        text = block if isinstance(block, str) else (
            block.get("text", "") if isinstance(block, Mapping) else str(block))
        thought = None
    if was is not None and getattr(was, "text", None) is not None:
        return was.model_copy(update={"text": text})
    return types.Part(text=text, thought=thought)


def content_of(d: Mapping[str, Any], original: Any, given: Mapping[str, Any] | None,
               types: Any) -> Any:
    """A new ``Content`` for a dict a compress handler changed (``original``: the content it
    stands for, ``given``: its dict) or wrote (both ``None``): each block as it was is the
    original part itself, a changed one the original part with the change."""
    role = "model" if d.get("role") == "assistant" else "user"
    body = d.get("content")
    blocks = body if isinstance(body, list) else [body if body is not None else ""]
    parts = list(getattr(original, "parts", None) or ())
    before = given.get("content") if given is not None else None
    before = before if isinstance(before, list) else []
    out = []
    for j, block in enumerate(blocks):
        was = parts[j] if j < len(parts) else None
        if was is not None and j < len(before) and same(block, before[j]):
            out.append(was)
        else:
            out.append(_new_part(block, was, types))
    return types.Content(role=role, parts=out)


# ---------------------------------------------------------------------------------------------
# The callback


def _instructions(config: Any) -> str | None:
    """The request's system instruction as text (``None`` when there is none): a string, a
    ``Content`` or ``Part`` (their texts), or a list of those, joined."""
    system = getattr(config, "system_instruction", None)
    if system is None or isinstance(system, str):
        return system
    items = system if isinstance(system, list) else [system]
    texts = []
    for item in items:
        if isinstance(item, str):
            texts.append(item)
        elif getattr(item, "parts", None) is not None:
            texts += [getattr(p, "text", None) or "" for p in item.parts]
        else:
            texts.append(getattr(item, "text", None) or "")
    return "".join(texts)


def request_tools(config: Any) -> str | None:
    """The ``tools`` fragment's text of a request: its tools' declarations as JSON."""
    tools = getattr(config, "tools", None)
    if not tools:
        return None
    return tools_text([t.model_dump(mode="json", exclude_none=True)
                       if hasattr(t, "model_dump") else t for t in tools])


class _Request:
    """A request's contents split into the turns the policy reduces (``picked``, their indices)
    and the instructions ADK placed among them (``held``), which the policy counts with the
    system instruction and :meth:`rebuilt` puts back where they were: before the first kept
    content that followed them, or last."""

    def __init__(self, contents: list[Any]) -> None:
        self.contents = contents
        self.held = [i for i, c in enumerate(contents) if is_instruction(c)]
        held = set(self.held)
        self.picked = [i for i in range(len(contents)) if i not in held]
        self.messages = [contents[i] for i in self.picked]

    def dicts(self) -> list[dict[str, Any]]:
        ids = _CallIds()
        return [content_dict(self.contents[i], i, "llm_request.contents", ids)
                for i in self.picked]

    def rebuilt(self, out: list[tuple[int, Any]]) -> list[Any]:
        """``out`` (each kept content with the index of the one it came from, in order) with
        the held instructions put back."""
        if not self.held:
            return [c for _, c in out]
        result: list[Any] = []
        waiting = list(self.held)
        for at, content in out:
            while waiting and waiting[0] < at:
                result.append(self.contents[waiting.pop(0)])
            result.append(content)
        result += [self.contents[h] for h in waiting]
        return result


class ContextPolicyCallback(LastResult):
    """A ``before_model_callback`` that runs a context policy before every model call (see
    :func:`context_policy_callback`). It replaces ``llm_request.contents`` with the contents
    the policy keeps and returns ``None`` (ADK then calls the model); when a handler is a
    coroutine function (``is_async``) it returns an awaitable, which ADK awaits.
    ``last_report``, ``last_result`` and ``last_cut`` hold the latest call's."""

    def __init__(self, policy: Any, *, counter: Any = None,
                 handlers: Mapping[str, Callable[..., Any]] | None = None,
                 cut: str = "stable", store: Any = None,
                 on_report: Callable[[ContextResult], None] | None = None) -> None:
        checked_cut(cut)
        self.prepared = prepare_agent_policy(policy, handlers, counter)
        self.stable = StableCut(self.prepared, store=store) if cut == "stable" else None
        self.on_report = on_report
        self.is_async = any(is_async_callable(h) for h in self.prepared.handlers.values())
        self.last_result: ContextResult | None = None
        # With a usage-anchored counter, each session's last call, until its usage comes.
        usage = anchored_counter(self.prepared)
        self.calls = SessionCalls(usage) if usage is not None else None
        # ADK names these callbacks by __name__ in its traces.
        self.__name__ = "context_policy_callback"

    @property
    def policy(self) -> PreparedPolicy:
        """The policy as checked once, with its handlers and counter."""
        return self.prepared

    def __call__(self, callback_context: Any, llm_request: Any) -> Awaitable[None] | None:
        if self.calls is not None:  # the previous call's usage, from the session's events
            self.calls.answered(callback_context)
        if self.is_async:
            return self._areduce(callback_context, llm_request)
        contents, dicts, instructions, tools = self._given(llm_request)
        if self.stable is not None:
            result: ContextResult = self.stable.process(
                dicts, instructions=instructions, tools=tools, path="llm_request.contents")
        else:
            result = process_context(self._plan(dicts, instructions, tools), self.prepared)
        self._finish(llm_request, contents, dicts, instructions, tools, result)
        if self.calls is not None:
            self.calls.sent(callback_context, result)
        return None

    async def _areduce(self, callback_context: Any, llm_request: Any) -> None:
        contents, dicts, instructions, tools = self._given(llm_request)
        if self.stable is not None:
            result: ContextResult = await self.stable.aprocess(
                dicts, instructions=instructions, tools=tools, path="llm_request.contents")
        else:
            result = await aprocess_context(self._plan(dicts, instructions, tools),
                                            self.prepared)
        self._finish(llm_request, contents, dicts, instructions, tools, result)
        if self.calls is not None:
            self.calls.sent(callback_context, result)

    def _given(self, llm_request: Any) -> tuple[_Request, list[dict[str, Any]], str | None,
                                                 str | None]:
        contents = getattr(llm_request, "contents", None)
        if not isinstance(contents, list):
            raise ContextPlanError(
                f"expected a list of contents, got {type(contents).__name__}",
                path="llm_request.contents", code="invalid-messages")
        config = getattr(llm_request, "config", None)
        request = _Request(contents)
        instructions = _instructions(config)
        if request.held:  # ADK's own instructions among the contents: protected, never a turn
            texts = [instructions] if instructions is not None else []
            texts += ["".join(p.text for p in contents[h].parts) for h in request.held]
            instructions = "\n\n".join(texts)
        return request, request.dicts(), instructions, request_tools(config)

    @staticmethod
    def _plan(dicts: list[dict[str, Any]], instructions: str | None, tools: str | None) -> Any:
        return agent_plan(dicts, instructions=instructions, tools=tools,
                          path="llm_request.contents")

    def _finish(self, llm_request: Any, request: _Request, dicts: list[dict[str, Any]],
                instructions: str | None, tools: str | None, result: ContextResult) -> None:
        from google.genai import types

        contents = request.messages

        skip = (instructions is not None) + (tools is not None)
        kept = result.input[skip:]
        if isinstance(result, StableResult):
            sources: list[int | None] = [s if s >= 0 else None for s in result.sources[skip:]]
            unchanged = [s is not None and (kept[j] is dicts[s] or same(kept[j], dicts[s]))
                         for j, s in enumerate(sources)]
        else:
            traced = origins(dicts, kept)
            sources = [o.source if o is not None else None for o in traced]
            unchanged = [o is not None and o.unchanged for o in traced]
        at = -1  # a content a handler made stands where the content before it stood
        placed: list[tuple[int, Any]] = []
        for d, s, as_it_was in zip(kept, sources, unchanged, strict=True):
            at = request.picked[s] if s is not None else at
            placed.append((at, contents[s] if s is not None and as_it_was else content_of(
                d, contents[s] if s is not None else None, dicts[s] if s is not None else None,
                types)))
        out = request.rebuilt(placed)
        self.last_result = result
        given = request.contents
        if not (len(out) == len(given) and all(a is b for a, b in zip(out, given,
                                                                        strict=True))):
            llm_request.contents = out
        if self.on_report is not None:
            self.on_report(result)

    def __repr__(self) -> str:
        return f"ContextPolicyCallback({self.prepared!r})"


def context_policy_callback(
    policy: Any, *, counter: Any = None,
    handlers: Mapping[str, Callable[..., Any]] | None = None,
    cut: str = "stable", store: Any = None,
    on_report: Callable[[ContextResult], None] | None = None,
) -> ContextPolicyCallback:
    """A ``before_model_callback`` for an ADK ``LlmAgent`` that runs ``policy`` (a document, a
    typed policy or a prepared one, checked once here: :class:`ContextPolicyError` with every
    problem) before every model call. ``cut="stable"`` (the default) keeps a prompt cache's
    prefix; ``cut="plain"`` reduces each call's whole history afresh; ``store`` keeps what a
    stable cut cannot replay (summaries); ``on_report(result)`` sees every call's result."""
    return ContextPolicyCallback(policy, counter=counter, handlers=handlers, cut=cut,
                                 store=store, on_report=on_report)
