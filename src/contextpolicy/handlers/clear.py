"""``clear_tool_results``: old tool outputs replaced by a placeholder that says what was there.

The newest ``keep`` tool results of the fragment stay as they are (results in the step's
verbatim ``kept`` groups count among them); every older one whose content is at least
``min_chars`` chars gets the placeholder instead, when the placeholder is shorter. A result is
a chat ``tool`` message, an Anthropic ``tool_result`` block or a Responses ``*_call_output``
item; its ids, its name, its place and every other key stay, so pairing is what it was. With
``clear_inputs``, the arguments of each cleared result's call are emptied too (``"{}"`` for
chat and Responses arguments, ``{}`` for a ``tool_use`` input, ``""`` for a custom call's text
input), but only arguments that are a JSON object: anything else (text that does not parse, as
an invalid tool call carries) is left as it is, so that clearing never turns a call the model
botched into a well-formed call with no arguments. A tool named in
``exclude_tools`` is never cleared (a result whose tool cannot be named is left alone when
``exclude_tools`` is given), a result already holding the placeholder is not cleared again, and
a result whose content holds tool blocks of its own (ids the pairing reads) is left whole.

With ``clear_at_least``, the handler clears nothing unless at least that many chars (tokens,
when the run has a counter) would go at once: old results are then cleared in batches, at a few
model calls, rather than one more at each call, which would change the history the provider's
prompt cache holds every time (Anthropic's ``clear_at_least`` and LangChain's
``ClearToolUsesEdit`` batch the same way).
"""

from __future__ import annotations

import json
import re
from typing import TYPE_CHECKING, Any

from .._tables import TOOL_RESULT_PART, TOOL_USE_PART
from ..content import plain_copy
from ._base import BuiltinHandler, batched
from ._parts import (
    CallSlot,
    ResultSlot,
    call_slots,
    part_type,
    result_slots,
    text_part_type,
    value_chars,
)
from .params import CLEAR_TOOL_RESULTS, DEFAULT_PLACEHOLDER, ClearToolResultsParams, checked

if TYPE_CHECKING:
    from ..implementations.base import CompressRequest

__all__ = ["ClearToolResults", "clear_tool_results"]

_EMPTY_ARGUMENTS = "{}"


class ClearToolResults(BuiltinHandler):
    """The handler :func:`clear_tool_results` returns."""

    kind = CLEAR_TOOL_RESULTS
    factory = "clear_tool_results"
    params: ClearToolResultsParams

    def __init__(self, params: ClearToolResultsParams, handler_id: str | None = None) -> None:
        super().__init__(params, handler_id)
        self._cleared = _placeholder_pattern(params.placeholder)
        self._excluded = frozenset(params.exclude_tools)

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), (self.params, self.handler_id))

    def placeholder(self, chars: int) -> str:
        return self.params.placeholder.replace("{chars}", str(chars))

    def __call__(self, request: CompressRequest) -> list[dict[str, Any]]:
        if isinstance(request.content, str):
            raise TypeError(
                f"{self.handler_id} clears the tool results of a messages fragment; fragment "
                f"{request.fragment.id!r} holds text"
            )
        cleared = self.clear(request.content, request.kept or [])
        return batched(request, request.content, cleared, self.params.clear_at_least)

    def clear(self, messages: list[dict[str, Any]],
              kept: list[dict[str, Any]] | None = None) -> list[dict[str, Any]]:
        """``messages`` with their old tool results cleared (a new list; ``messages`` is not
        changed). ``kept``: newer messages that stay verbatim, whose results count among the
        newest ``keep``."""
        p = self.params
        slots = result_slots(messages)
        newer = len(result_slots(kept)) if kept else 0
        clearable = len(slots) - max(0, p.keep - newer)
        if clearable <= 0:
            return list(messages)
        calls = _calls_before(messages, slots) if (self._excluded or p.clear_inputs) else {}
        out = list(messages)
        copied: set[int] = set()

        def own(index: int) -> dict[str, Any]:
            if index not in copied:
                out[index] = plain_copy(out[index])
                copied.add(index)
            return out[index]

        for n, slot in enumerate(slots[:clearable]):
            call = calls.get(n)
            if self._excluded:
                name = slot.name if slot.name is not None else (call.name if call else None)
                if name is None or name in self._excluded:
                    continue
            value = slot.value(out)
            if self._is_cleared(value) or _holds_tool_blocks(value):
                continue
            chars = value_chars(value, slot.key, slot.item_type(out))
            if chars < p.min_chars:
                continue
            text = self.placeholder(chars)
            if len(text) >= chars:
                continue
            own(slot.index)
            _put(out, slot, _shaped(text, value, slot))
            if p.clear_inputs and call is not None:
                _clear_input(own(call.index), call)
        return out

    def _is_cleared(self, value: Any) -> bool:
        if isinstance(value, list) and len(value) == 1 and isinstance(value[0], dict):
            value = value[0].get("text")
        return isinstance(value, str) and self._cleared.fullmatch(value) is not None


def _calls_before(messages: list[Any], slots: list[ResultSlot]) -> dict[int, CallSlot]:
    """The call each result answers, by the result's number: the latest call of its id made in
    an earlier message (or in its own)."""
    calls = sorted(call_slots(messages), key=lambda found: found[1].index)
    latest: dict[str, CallSlot] = {}
    out: dict[int, CallSlot] = {}
    at = 0
    for n, slot in enumerate(slots):
        while at < len(calls) and calls[at][1].index <= slot.index:
            cid, call = calls[at]
            if cid is not None:
                latest[cid] = call
            at += 1
        if slot.call_id is not None and slot.call_id in latest:
            out[n] = latest[slot.call_id]
    return out


def _holds_tool_blocks(value: Any) -> bool:
    """Content with ``tool_use`` or ``tool_result`` blocks of its own (only those nest): clearing
    it would take their ids, and so the pairing, with it."""
    return isinstance(value, list) and any(
        isinstance(part, dict) and part_type(part) in (TOOL_USE_PART, TOOL_RESULT_PART)
        for part in value)


def _placeholder_pattern(placeholder: str) -> re.Pattern[str]:
    return re.compile(re.escape(placeholder).replace(re.escape("{chars}"), r"[0-9]+"), re.S)


def _shaped(text: str, value: Any, slot: ResultSlot) -> Any:
    """The placeholder in the shape of the content it replaces: a str for a str (or for no
    content), one text part for a list of parts."""
    if isinstance(value, list):
        default = "input_text" if slot.key == "output" else "text"
        return [{"type": text_part_type(value, default), "text": text}]
    return text


def _put(messages: list[Any], slot: ResultSlot, value: Any) -> None:
    holder = messages[slot.index]
    if slot.block is not None:
        holder = holder["content"][slot.block]
    holder[slot.key] = value


def _clear_input(message: dict[str, Any], call: CallSlot) -> bool:
    """Empty the arguments of ``call`` in ``message`` (an owned copy) when that makes them
    shorter; whether it did."""
    if call.where == "tool_calls":
        holder, key = message["tool_calls"][call.position].get("function"), "arguments"
    elif call.where == "content":
        holder, key = message["content"][call.position], "input"
    else:  # a Responses call item: its arguments (function_call) or its input (custom calls)
        holder, key = message, "arguments" if "arguments" in message else "input"
    if not isinstance(holder, dict):
        return False
    value = holder.get(key)
    # Only a JSON object is emptied: arguments that are not one are a call the model botched
    # (LangChain keeps it in invalid_tool_calls), and {} would make it a well-formed call.
    if call.where == "content":  # a tool_use input: an object, emptied to {}
        empty: Any = {}
        shorter = isinstance(value, dict) and bool(value)
    elif key == "arguments":  # an object, as JSON text or as itself, emptied to "{}"
        empty = _EMPTY_ARGUMENTS
        shorter = (len(value) > len(empty) and _is_json_object(value)) if isinstance(
            value, str) else isinstance(value, dict) and bool(value)
    elif isinstance(value, str):  # a custom call's input: free text
        empty = ""
        shorter = bool(value)
    else:
        empty = {}
        shorter = isinstance(value, (dict, list)) and bool(value)
    if shorter:
        holder[key] = empty
    return shorter


def _is_json_object(text: str) -> bool:
    try:
        return isinstance(json.loads(text), dict)
    except (ValueError, RecursionError):
        return False


def clear_tool_results(
    *,
    keep: int = 3,
    placeholder: str = DEFAULT_PLACEHOLDER,
    exclude_tools: tuple[str, ...] | list[str] = (),
    clear_inputs: bool = False,
    min_chars: int = 100,
    clear_at_least: int = 0,
    handler_id: str | None = None,
) -> ClearToolResults:
    """A compress handler that clears old tool results (see the module's docstring); its id is
    ``"clear-tool-results"`` unless ``handler_id`` says otherwise.

    Raises :class:`~contextpolicy.ContextPolicyError` naming every bad parameter.
    """
    params = checked(CLEAR_TOOL_RESULTS, {
        "keep": keep, "placeholder": placeholder, "exclude_tools": exclude_tools,
        "clear_inputs": clear_inputs, "min_chars": min_chars, "clear_at_least": clear_at_least,
    })
    assert isinstance(params, ClearToolResultsParams)
    return ClearToolResults(params, handler_id)
