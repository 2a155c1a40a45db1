"""A memo in front of any counter: each distinct text is counted once.

An agent loop calls ``process_context`` on a history that grows by a few messages a turn;
behind :func:`cached`, the messages it has already seen cost a dict lookup, not a tokenizer
pass. The memo is keyed by the exact text (a str subclass is read as the text it holds, so its
``__hash__`` and ``__eq__`` cannot lie), bounded (least recently used texts go first) and safe
to share between threads (``functools.lru_cache``: two threads missing the same text may both
count it, and agree).
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable, Sequence
from typing import Any

from ..errors import ContextPolicyError
from ._base import checked_count, exact_text

__all__ = ["CachedChatCounter", "CachedCounter", "cached"]


class CachedCounter:
    """A counter whose ``count_text`` is memoised by text: ``name`` is ``"cached(<inner>)"``,
    ``exact`` the inner counter's, ``hits``/``misses``/``cache_info()`` say how the memo did.

    Built by :func:`cached`. It pickles as its inner counter and bound; the copy starts with an
    empty memo. The memo keeps up to ``max_entries`` texts alive (the messages of a history hold
    most of them anyway).
    """

    __slots__ = ("_memo", "exact", "inner", "max_entries", "name")

    def __init__(self, inner: Any, count_text: Callable[[str], Any], max_entries: int) -> None:
        self.inner = inner
        self.max_entries = max_entries
        self.name = f"cached({_name_of(inner)})"
        self.exact = getattr(inner, "exact", False) is True
        what = f"{_name_of(inner)}: count_text"

        def count(text: str) -> int:
            return checked_count(count_text(text), what)

        self._memo = functools.lru_cache(maxsize=max_entries)(count)

    def count_text(self, text: str) -> int:
        """Tokens of ``text``: from the memo, or counted by the inner counter once."""
        if type(text) is not str:
            text = exact_text(text)
        return self._memo(text)  # type: ignore[no-any-return]

    def count_texts(self, texts: Sequence[str]) -> list[int]:
        """Tokens of each text, in order, each through the memo (one call for a whole history:
        a hit costs one lookup)."""
        memo = self._memo
        return [memo(t if type(t) is str else exact_text(t)) for t in texts]

    def cache_info(self) -> Any:
        """``functools.lru_cache``'s figures: ``hits``, ``misses``, ``maxsize``, ``currsize``."""
        return self._memo.cache_info()

    @property
    def hits(self) -> int:
        """Texts answered from the memo so far."""
        return int(self._memo.cache_info().hits)

    @property
    def misses(self) -> int:
        """Texts the inner counter counted so far."""
        return int(self._memo.cache_info().misses)

    def clear(self) -> None:
        """Forget every text and reset the figures."""
        self._memo.cache_clear()

    def __repr__(self) -> str:
        info = self._memo.cache_info()
        return (f"<{self.name} {info.currsize}/{self.max_entries} texts, {info.hits} hits, "
                f"{info.misses} misses>")

    def __reduce__(self) -> tuple[Any, ...]:
        return (_unpickled, (self.inner, self.max_entries))


class CachedChatCounter(CachedCounter):
    """A :class:`CachedCounter` over a counter with ``count_messages``: ``count_text`` is
    memoised, ``count_messages`` is not. A conversation's framing depends on every message and
    on what the template makes of them, so it is counted afresh each time, by the inner
    counter."""

    __slots__ = ("_count_messages",)

    def __init__(
        self, inner: Any, count_text: Callable[[str], Any],
        count_messages: Callable[[list[dict[str, Any]]], Any], max_entries: int,
    ) -> None:
        super().__init__(inner, count_text, max_entries)
        self._count_messages = count_messages

    def count_messages(self, messages: list[dict[str, Any]]) -> int:
        """Tokens of the conversation, as the inner counter counts it (never memoised)."""
        return checked_count(self._count_messages(messages),
                             f"{_name_of(self.inner)}: count_messages")


class CachedInputCounter(CachedChatCounter):
    """A :class:`CachedChatCounter` over a counter that says what measured each input figure
    (``count_input``: :func:`~contextpolicy.counters.usage_anchored`), which it passes on."""

    __slots__ = ("count_input",)

    def __init__(self, inner: Any, count_text: Callable[[str], Any],
                 count_messages: Callable[[list[dict[str, Any]]], Any], max_entries: int,
                 ) -> None:
        super().__init__(inner, count_text, count_messages, max_entries)
        self.count_input = inner.count_input


def _unpickled(inner: Any, max_entries: int) -> CachedCounter:
    return cached(inner, max_entries=max_entries)


def _name_of(counter: Any) -> str:
    name = getattr(counter, "name", None)
    if isinstance(name, str) and name:
        return name
    return str(getattr(counter, "__qualname__", None) or type(counter).__name__)


def cached(counter: Any, *, max_entries: int = 65536) -> CachedCounter:
    """``counter`` with ``count_text`` memoised by the exact text, for at most ``max_entries``
    distinct texts (the least recently used go first).

    ``counter`` is any counter of this layer, any object with ``count_text(str) -> int``, or a
    callable ``str -> int``. The result carries ``name = "cached(<inner name>)"`` and the inner
    ``exact``; when the inner counter has ``count_messages``, so does the result, delegating
    without a memo (framing depends on the whole conversation).
    """
    if type(max_entries) is not int or max_entries < 1:
        raise ContextPolicyError(
            f"expected an integer >= 1, got {max_entries!r}", path="max_entries",
            code="expected-integer",
        )
    from ..accounting import TokenCounter

    if isinstance(counter, TokenCounter):
        counter = counter.source
    count_text = getattr(counter, "count_text", None)
    if not callable(count_text):
        if not callable(counter):
            raise ContextPolicyError(
                f"expected a counter (an object with count_text(str) -> int, or a callable "
                f"str -> int), got {type(counter).__name__}", path="counter",
                code="invalid-counter",
            )
        count_text = counter
    if inspect.iscoroutinefunction(count_text):
        raise ContextPolicyError(
            "count_text must be synchronous", path="counter", code="invalid-counter"
        )
    count_messages = getattr(counter, "count_messages", None)
    if callable(count_messages) and callable(getattr(counter, "count_input", None)):
        return CachedInputCounter(counter, count_text, count_messages, max_entries)
    if callable(count_messages):
        return CachedChatCounter(counter, count_text, count_messages, max_entries)
    return CachedCounter(counter, count_text, max_entries)
