"""``truncate_messages``: long texts cut to a head, a marker naming the cut, and a tail.

Every text a message carries that an agent's model reads as prose or output is cut when it is
longer than ``max_chars``: a str ``content``, text parts (``text``, ``input_text``,
``output_text``), the content of ``tool_result`` blocks (at any depth) and the ``output`` of
Responses ``*_call_output`` items. Tool call arguments and ``tool_use`` inputs (JSON, which a
cut would break), thinking blocks (signed, byte-exact) and reasoning items are never cut.

Lengths are code points, as the report counts them. A cut never splits a surrogate pair (a str
may hold one as two code points) and never separates a character from the combining marks,
joiners, emoji modifiers and tags that follow it, a flag's two regional indicators, or a CRLF:
the head ends, and the tail starts, on a character that begins a new one.

With ``min_gain``, the handler cuts nothing unless at least that many chars (tokens, when the
run has a counter) would go at once, so that it does not rewrite one more old message at every
model call (each rewrite changes the history a provider's prompt cache holds).
"""

from __future__ import annotations

import unicodedata
from typing import TYPE_CHECKING, Any

from .._tables import ITEM_MESSAGE, ITEM_OUTPUT, MAX_NESTING, TEXT_PART_TYPES, TOOL_RESULT_PART
from ..content import plain_copy
from ._base import BuiltinHandler, batched
from ._parts import item_of, part_type
from .params import DEFAULT_MARKER, TRUNCATE_MESSAGES, TruncateMessagesParams, checked

if TYPE_CHECKING:
    from ..implementations.base import CompressRequest

__all__ = ["TruncateMessages", "cut_text", "truncate_messages"]

_TEXT_PARTS = frozenset(TEXT_PART_TYPES[:3])  # text, input_text, output_text
_ZWJ = 0x200D
_MARKS = frozenset({"Mn", "Mc", "Me"})
_REGIONAL, _REGIONAL_END = 0x1F1E6, 0x1F1FF


def joins_previous(text: str, i: int) -> bool:
    """``text[i]`` belongs to the character before it: the low half of a surrogate pair, a
    combining mark, a zero-width joiner or the character one joins, an emoji modifier or tag,
    the second regional indicator of a flag, the line feed of a CRLF."""
    if i <= 0:
        return False
    code, before = ord(text[i]), ord(text[i - 1])
    if 0xDC00 <= code <= 0xDFFF:
        return 0xD800 <= before <= 0xDBFF
    if code == _ZWJ or before == _ZWJ or 0x1F3FB <= code <= 0x1F3FF or 0xE0020 <= code <= 0xE007F:
        return True
    if code == 0x0A:
        return before == 0x0D
    if _REGIONAL <= code <= _REGIONAL_END:
        # Flags pair regional indicators from the start of their run: the second of a pair.
        run = 0
        while i - run - 1 >= 0 and _REGIONAL <= ord(text[i - run - 1]) <= _REGIONAL_END:
            run += 1
        return run % 2 == 1
    char = text[i]
    return unicodedata.combining(char) != 0 or unicodedata.category(char) in _MARKS


def cut_text(text: str, head: int, tail: int, marker: str = DEFAULT_MARKER) -> str | None:
    """``text`` as its first ``head`` and last ``tail`` code points around ``marker``
    (``{chars}``: how many were cut), both ends moved inwards to character boundaries; ``None``
    when that would not be shorter."""
    n = len(text)
    h = min(head, n)
    while 0 < h < n and joins_previous(text, h):
        h -= 1
    t = max(n - tail, h)
    while t < n and joins_previous(text, t):
        t += 1
    if t <= h:
        return None
    out = text[:h] + marker.replace("{chars}", str(t - h)) + text[t:]
    return out if len(out) < n else None


class TruncateMessages(BuiltinHandler):
    """The handler :func:`truncate_messages` returns."""

    kind = TRUNCATE_MESSAGES
    factory = "truncate_messages"
    params: TruncateMessagesParams

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), (self.params, self.handler_id))

    def cut(self, text: str) -> str | None:
        """``text`` cut, or ``None`` when it is not longer than ``max_chars`` (or a cut would
        not make it shorter)."""
        p = self.params
        if len(text) <= p.max_chars:
            return None
        return cut_text(text, p.head_chars, p.tail_chars, p.marker)

    def __call__(self, request: CompressRequest) -> str | list[dict[str, Any]]:
        content = request.content
        if isinstance(content, str):
            cut = self.cut(content)
            out: str | list[dict[str, Any]] = content if cut is None else cut
        else:
            out = self.truncate(content)
        return batched(request, content, out, self.params.min_gain)

    def truncate(self, messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """``messages`` with their long texts cut (a new list; ``messages`` is not changed)."""
        out = list(messages)
        for i, message in enumerate(messages):
            item = item_of(message)
            key = "output" if item == ITEM_OUTPUT else "content" if item == ITEM_MESSAGE else None
            if key is None or not self._needs_cut(message.get(key), 0):
                continue
            copy = plain_copy(message)
            copy[key] = self._cut_value(copy[key], 0)
            out[i] = copy
        return out

    def _needs_cut(self, value: Any, depth: int) -> bool:
        limit = self.params.max_chars
        if isinstance(value, str):
            return len(value) > limit and self.cut(value) is not None
        if not isinstance(value, list) or depth > _MAX_DEPTH:
            return False
        for part in value:
            if isinstance(part, str):
                if self._needs_cut(part, depth):
                    return True
            elif isinstance(part, dict):
                kind = part_type(part)
                if kind in _TEXT_PARTS and self._needs_cut(part.get("text"), depth):
                    return True
                if kind == TOOL_RESULT_PART and self._needs_cut(part.get("content"), depth + 1):
                    return True
        return False

    def _cut_value(self, value: Any, depth: int) -> Any:
        """``value`` (an owned copy) with its long texts cut."""
        if isinstance(value, str):
            cut = self.cut(value)
            return value if cut is None else cut
        if not isinstance(value, list) or depth > _MAX_DEPTH:
            return value
        for j, part in enumerate(value):
            if isinstance(part, str):
                value[j] = self._cut_value(part, depth)
            elif isinstance(part, dict):
                kind = part_type(part)
                if kind in _TEXT_PARTS and isinstance(part.get("text"), str):
                    part["text"] = self._cut_value(part["text"], depth)
                elif kind == TOOL_RESULT_PART and "content" in part:
                    part["content"] = self._cut_value(part["content"], depth + 1)
        return value


# tool_result blocks nest at most this deep in a measured message (the kernels' limit).
_MAX_DEPTH = MAX_NESTING


def truncate_messages(
    *,
    max_chars: int = 2000,
    head: int | None = None,
    tail: int | None = None,
    marker: str = DEFAULT_MARKER,
    min_gain: int = 0,
    handler_id: str | None = None,
) -> TruncateMessages:
    """A compress handler that cuts long texts (see the module's docstring); its id is
    ``"truncate-messages"`` unless ``handler_id`` says otherwise. ``head`` defaults to half of
    ``max_chars`` and ``tail`` to a quarter; ``head + tail`` may not exceed ``max_chars``.

    Raises :class:`~contextpolicy.ContextPolicyError` naming every bad parameter.
    """
    params = checked(TRUNCATE_MESSAGES, {
        "max_chars": max_chars, "head": head, "tail": tail, "marker": marker,
        "min_gain": min_gain,
    })
    assert isinstance(params, TruncateMessagesParams)
    return TruncateMessages(params, handler_id)
