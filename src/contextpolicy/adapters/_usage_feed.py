"""Each framework's per-call usage, fed to a usage-anchored counter (:mod:`._usage`).

What an adapter needs to tie a reported figure to the input it was reported for:

- :class:`StateFeed` (LangChain's persisting middleware and node): the messages a run left in
  the state were sent to the model, whose answer is the message right after them at the next
  run;
- :class:`CallFeed` (the OpenAI Agents SDK): the SDK hands ``on_llm_start`` the very items the
  filter returned, and ``on_llm_end`` the response of that run's call;
- :class:`Pending` (LiteLLM's proxy): a bounded map from a request's id to its result.

None of this is built unless the adapter was given a usage-anchored counter.
"""

from __future__ import annotations

import functools
from collections import OrderedDict
from collections.abc import Hashable, Sequence
from typing import Any

from ..counters._usage import UsageAnchoredCounter
from ..report import ContextResult
from ._usage import record_usage

__all__ = ["CallFeed", "Pending", "StateFeed", "langchain_input_tokens", "run_hooks_class"]


class Pending:
    """A bounded map (the oldest entries go first): what was sent, until its usage comes. A key
    put twice before it is taken pairs nothing (two requests in flight under one id: which
    answer is whose cannot be known)."""

    __slots__ = ("_items", "size")

    def __init__(self, size: int = 256) -> None:
        self.size = size
        self._items: OrderedDict[Hashable, Any] = OrderedDict()

    def put(self, key: Hashable, value: Any) -> None:
        self._items[key] = _CLASH if key in self._items else value
        while len(self._items) > self.size:
            self._items.popitem(last=False)

    def pop(self, key: Hashable) -> Any:
        value = self._items.pop(key, None)
        return None if value is _CLASH else value


_CLASH = object()  # a key two requests were put under


def langchain_input_tokens(response: Any) -> Any:
    """The input tokens a LangChain model call's response reports: ``usage_metadata`` of its
    AI message (the response is a ``ModelResponse``, an ``ExtendedModelResponse`` or an
    ``AIMessage``); ``None`` when it reports none."""
    inner = getattr(response, "model_response", response)
    messages = getattr(inner, "result", None)
    for message in messages if isinstance(messages, list) else (inner,):
        usage = getattr(message, "usage_metadata", None)
        if usage:
            return usage.get("input_tokens")
    return None


class StateFeed:
    """A persisted reduction's model calls: the messages a run left in the state (``sent``) are
    what the model was sent, and the message right after them at the next run (``answered``)
    is its answer, whose ``usage_metadata`` is recorded for that run's result. Anything else
    there (another thread's state, a rewritten one) records nothing."""

    __slots__ = ("_sent", "counter")

    def __init__(self, counter: UsageAnchoredCounter) -> None:
        self.counter = counter
        self._sent: tuple[list[Any], ContextResult] | None = None

    def sent(self, messages: Sequence[Any], result: ContextResult) -> None:
        # The objects, not their ids: the graph gives a new message its id when it stores it.
        self._sent = (list(messages), result)

    def answered(self, messages: Sequence[Any]) -> bool:
        sent = self._sent
        if sent is None:
            return False
        given, result = sent
        n = len(given)
        if len(messages) <= n or any(getattr(a, "id", None) is None
                                     or a.id != getattr(b, "id", None)
                                     for a, b in zip(given, messages[:n], strict=True)):
            return False
        self._sent = None
        usage = getattr(messages[n], "usage_metadata", None)
        return usage is not None and record_usage(self.counter, result,
                                                  usage.get("input_tokens"))


class CallFeed:
    """The OpenAI Agents SDK's model calls: the filter's result for the items it returned
    (``given``); the call whose input is exactly those items (``started``, the run's context
    then names it); the usage of that call's response (``ended``), recorded for that result
    when it is one request's."""

    __slots__ = ("_calls", "_given", "counter")

    def __init__(self, counter: UsageAnchoredCounter) -> None:
        self.counter = counter
        self._given = Pending(64)  # ids of the items -> (the items, result)
        self._calls = Pending(256)  # id of a run's context -> (the context, result)

    def given(self, items: list[Any], result: ContextResult | None) -> None:
        if items and result is not None:  # the items are kept: their ids stay theirs
            self._given.put(tuple(map(id, items)), (items, result))

    def started(self, context: Any, items: Sequence[Any]) -> None:
        entry = self._given.pop(tuple(map(id, items)))
        if entry is not None:
            self._calls.put(id(context), (context, entry[1]))

    def ended(self, context: Any, response: Any) -> bool:
        entry = self._calls.pop(id(context))
        if entry is None or entry[0] is not context:
            return False
        usage = getattr(response, "usage", None)
        requests = getattr(usage, "requests", 1)
        if isinstance(requests, int) and requests != 1:  # several requests' sum, or none
            return False
        return record_usage(self.counter, entry[1], getattr(usage, "input_tokens", None))


@functools.cache
def run_hooks_class() -> type[Any]:
    """A ``RunHooks`` of the SDK whose model-call hooks feed a :class:`CallFeed`."""
    from agents import RunHooks

    class UsageHooks(RunHooks[Any]):
        """``Runner.run(..., hooks=keep.hooks)``: feeds each model call's reported input tokens
        to the filter's usage-anchored counter (does nothing without one)."""

        def __init__(self, feed: CallFeed | None) -> None:
            self.feed = feed

        async def on_llm_start(self, context: Any, agent: Any, system_prompt: Any,
                               input_items: list[Any]) -> None:
            if self.feed is not None:
                self.feed.started(context, input_items)

        async def on_llm_end(self, context: Any, agent: Any, response: Any) -> None:
            if self.feed is not None:
                self.feed.ended(context, response)

    return UsageHooks
