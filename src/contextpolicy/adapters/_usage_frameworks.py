"""Which sent input a framework's reported usage answers, for Pydantic AI and Google ADK.

An adapter given a :func:`~contextpolicy.counters.usage_anchored` counter remembers what it sent
(:meth:`SentInputs.sent`, :meth:`SessionCalls.sent`) and records the input tokens of the
response that answered exactly that (``_usage.record_usage``):

- Pydantic AI: a capability is handed the response with the very messages it was sent
  (``after_model_request``): :meth:`SentInputs.answered`. A history processor finds it in the
  next call's history: the messages it returned, then the ``ModelResponse`` that answered them
  (:meth:`SentInputs.answered_in_history`). A ``ModelResponse`` carries its request's usage.
- Google ADK: the session's events of the call's agent after the last event the previous call
  saw: the first with ``usage_metadata`` is its answer (:class:`SessionCalls`).

Neither is built without such a counter: the adapters check ``is None`` and nothing more.
"""

from __future__ import annotations

import threading
from collections import OrderedDict, deque
from collections.abc import Sequence
from typing import Any

from ..counters._usage import UsageAnchoredCounter
from ..report import ContextResult
from ._usage import record_usage

__all__ = ["SentInputs", "SessionCalls", "adk_prompt_tokens", "pydantic_input_tokens"]


def pydantic_input_tokens(response: Any) -> int | None:
    """The input tokens a Pydantic AI ``ModelResponse`` reports (``usage.input_tokens``, cached
    reads included); ``None`` when it reports none (0: a request has some)."""
    tokens = getattr(getattr(response, "usage", None), "input_tokens", None)
    return tokens if isinstance(tokens, int) and tokens > 0 else None


def adk_prompt_tokens(event: Any) -> int | None:
    """The input tokens of an ADK ``LlmResponse`` or ``Event``
    (``usage_metadata.prompt_token_count``), ``None`` when it has none."""
    if getattr(event, "partial", None):
        return None
    tokens = getattr(getattr(event, "usage_metadata", None), "prompt_token_count", None)
    return tokens if isinstance(tokens, int) and tokens >= 0 else None


def _same(kept: Sequence[Any], messages: Sequence[Any]) -> bool:
    return all(a is b for a, b in zip(kept, messages, strict=False))


class SentInputs:
    """The latest messages a Pydantic AI adapter sent and their results (a few, for runs that
    share it), until the response that answered them is recorded."""

    def __init__(self, counter: UsageAnchoredCounter, size: int = 16) -> None:
        self.counter = counter
        self._sent: deque[tuple[list[Any], ContextResult]] = deque(maxlen=size)
        self._lock = threading.Lock()

    def sent(self, messages: Sequence[Any], result: ContextResult) -> None:
        with self._lock:
            self._sent.append((list(messages), result))

    def _take(self, history: Sequence[Any], answer: bool) -> tuple[int, ContextResult] | None:
        """The newest input sent that is ``history`` (``answer``: that ``history`` starts with,
        followed by a response), forgotten once found, with its length."""
        with self._lock:
            for entry in reversed(self._sent):
                kept, n = entry[0], len(entry[0])
                fits = (n < len(history) and getattr(history[n], "kind", None) == "response"
                        ) if answer else n == len(history)
                if fits and _same(kept, history):
                    self._sent.remove(entry)
                    return n, entry[1]
        return None

    def answered(self, messages: Sequence[Any], response: Any) -> None:
        """Record ``response``'s usage for the input that was ``messages`` (these very
        objects), when it was one this remembers."""
        tokens = pydantic_input_tokens(response)
        taken = self._take(messages, answer=False) if tokens is not None else None
        if taken is not None:
            record_usage(self.counter, taken[1], tokens)

    def answered_in_history(self, history: Any) -> None:
        """Record the usage of the response in ``history`` that answered messages this
        remembers: the ``ModelResponse`` right after them (they being a prefix of it)."""
        taken = self._take(history, answer=True) if isinstance(history, (list, tuple)) else None
        if taken is not None:
            record_usage(self.counter, taken[1], pydantic_input_tokens(history[taken[0]]))


class SessionCalls:
    """ADK: for each session and agent, the last model call's result and the id of the last
    session event it saw; the call's answer is the first event of that agent after it that
    carries usage (each model call runs the callback once, so no other call comes between)."""

    def __init__(self, counter: UsageAnchoredCounter, size: int = 256) -> None:
        self.counter = counter
        self.size = size
        self._calls: OrderedDict[tuple[Any, Any], tuple[Any, ContextResult]] = OrderedDict()
        self._lock = threading.Lock()

    @staticmethod
    def _where(callback_context: Any) -> tuple[tuple[Any, Any], list[Any]] | None:
        session = getattr(callback_context, "session", None)
        events = getattr(session, "events", None)
        if not isinstance(events, list):
            return None
        return (getattr(session, "id", None), getattr(callback_context, "agent_name", None)), \
            events

    def answered(self, callback_context: Any) -> None:
        """Record the previous call's reported input tokens, when they have come since."""
        where = self._where(callback_context)
        if where is None:
            return
        key, events = where
        with self._lock:
            call = self._calls.pop(key, None)
        if call is None:
            return
        seen, result = call
        tokens = None
        for event in reversed(events):
            if seen is not None and getattr(event, "id", None) == seen:
                break
            if getattr(event, "author", None) == key[1]:  # the earliest is the answer
                found = adk_prompt_tokens(event)
                tokens = found if found is not None else tokens
        else:
            if seen is not None:  # the event it saw is gone: no pairing to trust
                return
        record_usage(self.counter, result, tokens)

    def sent(self, callback_context: Any, result: ContextResult) -> None:
        where = self._where(callback_context)
        if where is None:
            return
        key, events = where
        with self._lock:
            self._calls[key] = (getattr(events[-1], "id", None) if events else None, result)
            self._calls.move_to_end(key)
            while len(self._calls) > self.size:
                self._calls.popitem(last=False)
