"""Tokens as the provider counts them: a counter anchored on the usage a provider reported.

A provider returns, with every response, how many input tokens the request had (``usage``):
the one exact count there is for a model without an offline tokenizer (Claude, Gemini), and
for every model the count with the provider's own framing of messages, tools and system prompt.
:func:`usage_anchored` keeps those figures, keyed by the content of the input each was reported
for. An input that starts with an input already reported is counted as that report plus what
came after it, counted by a local counter; an input that starts with none is counted by the
local counter alone. :meth:`UsageAnchoredCounter.count_input` says, per figure, what measured
it (:class:`InputCount`), and the report carries it (``tokensExact``, ``tokensReported``).

The key of an input is a digest of each message's content in order (``marshal``'s bytes,
written in C, of Python's own types only; the core hands counters plain copies): a message
holding anything else ends the prefix an anchor can cover, never an error.
"""

from __future__ import annotations

import hashlib
import marshal
import numbers
import threading
from collections import OrderedDict
from collections.abc import Sequence
from typing import Any, NamedTuple

from ..errors import ContextPolicyError
from ._base import exact_text

__all__ = ["InputCount", "UsageAnchoredCounter", "estimate", "usage_anchored"]

# Version 2: no references between objects (version 3 on marks an object met twice, which
# depends on how many references it has: a string held by one dict and the same string shared
# with a copy write different bytes), so equal content always writes equal bytes.
_VERSION = 2


class InputCount(NamedTuple):
    """Tokens of a model input and what measured them.

    ``tokens``: the figure; ``reported``: the part of it a provider reported for an earlier
    input this one starts with (``None``: no report covers any of it); ``exact``: whether the
    whole figure is measured (the provider's report, plus what came after counted by an exact
    counter that frames messages) rather than partly estimated.
    """

    tokens: int
    exact: bool
    reported: int | None


class EstimateCounter:
    """A counter that estimates: ``ceil(chars / chars_per_token)`` per text, ``exact`` false.

    For a model with no offline tokenizer, under :func:`usage_anchored`: the provider's report
    covers what it saw, this only the messages since. Built by :func:`estimate`."""

    __slots__ = ("chars_per_token", "exact", "name")

    def __init__(self, chars_per_token: float) -> None:
        self.chars_per_token = chars_per_token
        self.name = f"estimate:{chars_per_token:g}-chars-per-token"
        self.exact = False

    def count_text(self, text: str) -> int:
        """``ceil(len(text) / chars_per_token)``: an estimate, never presented as a count."""
        if type(text) is not str:
            text = exact_text(text)
        return -int(-len(text) // self.chars_per_token)

    def __repr__(self) -> str:
        return f"<{self.name}>"

    def __reduce__(self) -> tuple[Any, ...]:
        return (EstimateCounter, (self.chars_per_token,))


def estimate(chars_per_token: float = 4.0) -> EstimateCounter:
    """A counter that estimates tokens from characters (``exact`` false; its reports say so).

    Nothing in the library estimates unless asked by name: this is the name. Use it as the
    local counter of :func:`usage_anchored` for a model with no offline tokenizer."""
    if (isinstance(chars_per_token, bool) or not isinstance(chars_per_token, numbers.Real)
            or not 0 < float(chars_per_token) < float("inf")):
        raise ContextPolicyError(
            f"expected a number > 0, got {chars_per_token!r}", path="chars_per_token",
            code="expected-number",
        )
    return EstimateCounter(float(chars_per_token))


def _message_keys(messages: list[Any], limit: int) -> list[bytes]:
    """The key of each prefix of ``messages`` up to ``limit`` messages (``keys[i]``: the first
    ``i + 1``), stopping at the first message that holds anything but Python's own types."""
    keys: list[bytes] = []
    digest = hashlib.blake2b(digest_size=20)
    for message in list.__getitem__(messages, slice(0, limit)):
        try:
            data = marshal.dumps(message, _VERSION)
        except (ValueError, RecursionError, MemoryError):
            break
        digest.update(b"%d:" % len(data))
        digest.update(data)
        keys.append(digest.copy().digest())
    return keys


class _Anchor(NamedTuple):
    length: int  # messages of the input reported
    reported: int  # the provider's input tokens for it
    local: int | None  # the local counter's count of it, for a counter that frames messages


class UsageAnchoredCounter:
    """A counter anchored on the input tokens a provider reported (see the module docstring).

    ``count_text`` and ``count_texts`` are the local counter's (the tokens of each message, which
    trims and targets weigh); ``count_messages`` and ``count_input`` count a whole input from the
    longest reported input it starts with. ``record(messages, input_tokens)`` adds a report;
    the adapters call it with what they sent and the usage their framework gives back.
    ``name`` is ``"usage+<local name>"``; ``exact`` is true only for an exact local counter
    that frames messages (then every whole-input figure is measured); each input figure says
    its own (:class:`InputCount`). Up to ``max_anchors`` reports are kept (the least recently
    used go first); safe to share between threads.
    """

    def __init__(self, local: Any, max_anchors: int = 1024) -> None:
        from ..accounting import TokenCounter

        self.local = TokenCounter(local)
        self.name = f"usage+{self.local.name}"
        self.exact = self.local.exact is True and self.local.counts_messages
        self.max_anchors = max_anchors
        self._anchors: OrderedDict[bytes, _Anchor] = OrderedDict()
        self._lengths: dict[int, int] = {}  # message count -> anchors of that length
        self._lock = threading.Lock()
        self._framing = 0.0  # tokens the provider adds around a message, as last learned
        source_texts = getattr(self.local.source, "count_texts", None)
        if callable(source_texts):
            self.count_texts = self.local.count_pieces

    # -- what the core calls -----------------------------------------------------------------

    def count_text(self, text: str) -> int:
        """The local counter's tokens of ``text``."""
        return self.local.count_text(text)

    def count_messages(self, messages: list[dict[str, Any]]) -> int:
        """Tokens of a model input: :meth:`count_input`'s figure."""
        return self.count_input(messages).tokens

    def count_input(self, messages: list[dict[str, Any]]) -> InputCount:
        """Tokens of a model input, and what measured them: the longest reported input it starts
        with, plus what came after counted by the local counter (the difference of its counts
        of the whole and of the prefix when it frames messages, so framing is counted once)."""
        return self.count_before(messages, 0)

    def count_before(self, messages: list[dict[str, Any]], shorter: int) -> InputCount:
        """:meth:`count_input` from reports of inputs at least ``shorter`` messages shorter
        than ``messages``."""
        if not isinstance(messages, list):
            raise ContextPolicyError(
                f"expected a list of messages, got {type(messages).__name__}", path="messages",
                code="invalid-input",
            )
        if type(messages) is not list:
            messages = list.copy(messages)
        found = self._longest(messages, len(messages) - shorter)
        local = self.local
        if found is None:
            return InputCount(local.count_messages(messages), self.exact, None)
        n, reported = found.length, found.reported
        if n == len(messages):
            return InputCount(reported, True, reported)
        if found.local is not None:  # a counter that frames messages: its difference
            tokens = reported + local.count_messages(messages) - found.local
            exact = self.exact
        else:
            # An exact counter of texts sees no framing: each message since adds what the
            # provider's reports showed a message's framing to be (learned, so the figure is
            # estimated). An estimate learns nothing: what it misses is its own error.
            tokens = reported + local.count_messages(messages[n:]) + round(
                self._framing * (len(messages) - n))
            exact = False
        return InputCount(max(0, tokens), exact and tokens >= 0, reported)

    def _longest(self, messages: list[Any], below: int) -> _Anchor | None:
        """The longest reported input of at most ``below`` messages that ``messages`` starts
        with, or ``None``."""
        with self._lock:
            lengths = sorted((n for n in self._lengths if n <= below), reverse=True)
        if not lengths or lengths[-1] > len(messages):
            return None
        keys = _message_keys(messages, lengths[0])
        with self._lock:
            for n in lengths:
                if n <= len(keys):
                    anchor = self._anchors.get(keys[n - 1])
                    if anchor is not None:
                        self._anchors.move_to_end(keys[n - 1])
                        return anchor
        return None

    def as_of_each_call(self) -> _AsOfEachCall:
        """This counter as each model call of a replay saw it: an input is counted from reports
        of shorter inputs only (a report of the input itself came after its call). The stable
        cut counts with it, so an earlier call replayed decides as it did."""
        return _AsOfEachCall(self)

    # -- what the adapters call --------------------------------------------------------------

    def record(self, messages: Sequence[Any], input_tokens: Any) -> bool:
        """Keep ``input_tokens``, the input tokens a provider reported for a request whose input
        was ``messages`` (the model input as the library assembled it: ``result.input``).

        Returns whether it was kept: an input holding anything but Python's own types cannot be
        keyed and is not (its later inputs are then counted by the local counter), and 0 tokens
        for a non-empty input is no report (a provider that sent no usage). A report that is
        not an int >= 0 is a :class:`ContextPolicyError`."""
        tokens = _reported(input_tokens)
        if isinstance(messages, (str, bytes)) or not isinstance(messages, Sequence):
            raise ContextPolicyError(
                f"expected the list of messages that was sent, got {type(messages).__name__}",
                path="messages", code="invalid-input",
            )
        from ..content import plain_copy

        given = list.copy(messages) if isinstance(messages, list) else list(messages)
        if not given or tokens == 0:
            return False
        sent = plain_copy(given)
        keys = _message_keys(sent, len(sent))
        if len(keys) != len(sent):
            return False
        local = self.local
        if local.exact is True and not local.counts_messages:
            self._learn_framing(sent, tokens)
        anchor = _Anchor(len(sent), tokens,
                         local.count_messages(sent) if local.counts_messages else None)
        with self._lock:
            key = keys[-1]
            if key not in self._anchors:
                self._lengths[anchor.length] = self._lengths.get(anchor.length, 0) + 1
            self._anchors[key] = anchor
            self._anchors.move_to_end(key)
            while len(self._anchors) > self.max_anchors:
                gone = self._anchors.popitem(last=False)[1].length
                left = self._lengths[gone] - 1
                if left:
                    self._lengths[gone] = left
                else:
                    del self._lengths[gone]
        return True

    def _learn_framing(self, sent: list[Any], reported: int) -> None:
        # Two reports, one input the start of the other: their difference is what the messages
        # between them cost the provider; beyond the exact count of their texts, that is their
        # framing (what the provider adds around each message).
        found = self._longest(sent, len(sent) - 1)
        if found is None:
            return
        n = found.length
        texts = self.local.count_messages(sent[n:])
        self._framing = (reported - found.reported - texts) / (len(sent) - n)

    @property
    def anchors(self) -> int:
        """Reports kept."""
        return len(self._anchors)

    def clear(self) -> None:
        """Forget every report, and the framing learned from them."""
        with self._lock:
            self._anchors.clear()
            self._lengths = {}
            self._framing = 0.0

    def __repr__(self) -> str:
        return f"<{self.name}: {len(self._anchors)} reported inputs>"


class _AsOfEachCall:
    """A :class:`UsageAnchoredCounter` seen as each call saw it (``as_of_each_call``)."""

    def __init__(self, counter: UsageAnchoredCounter) -> None:
        self.counter = counter
        self.name, self.exact = counter.name, counter.exact
        self.count_text = counter.count_text
        if hasattr(counter, "count_texts"):
            self.count_texts = counter.count_texts

    def count_messages(self, messages: list[dict[str, Any]]) -> int:
        return self.count_input(messages).tokens

    def count_input(self, messages: list[dict[str, Any]]) -> InputCount:
        return self.counter.count_before(messages, 1)


def _reported(value: Any) -> int:
    if not isinstance(value, bool) and isinstance(value, numbers.Integral):
        try:
            tokens = int(value)
        except Exception:  # an Integral whose int() fails is no figure
            tokens = -1
        if tokens >= 0:
            return tokens
    raise ContextPolicyError(
        f"expected the reported input tokens as an int >= 0, got {value!r}",
        path="input_tokens", code="expected-integer",
    )


def usage_anchored(local: Any, *, max_anchors: int = 1024) -> UsageAnchoredCounter:
    """A counter that counts a model input as the provider did: the input tokens it reported for
    the longest earlier input this one starts with, plus the rest by ``local`` (any counter:
    :func:`tiktoken_counter`, :func:`hf_counter`, or :func:`estimate` for a model with no
    offline tokenizer). Each report's figures say what was measured (``tokensExact``,
    ``tokensReported``). Give it to an adapter as ``counter=``: the adapter records every
    model call's reported usage; elsewhere call :meth:`UsageAnchoredCounter.record`."""
    if type(max_anchors) is not int or max_anchors < 1:
        raise ContextPolicyError(
            f"expected an integer >= 1, got {max_anchors!r}", path="max_anchors",
            code="expected-integer",
        )
    return UsageAnchoredCounter(local, max_anchors)
