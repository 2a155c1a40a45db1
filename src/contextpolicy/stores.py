"""Where a cache-stable cut keeps what it cannot replay: the output of a handler that costs a
model call or is not deterministic (``summarize``, any handler of the caller's).

A stable cut replays the policy as it would have run before every earlier model call. A
deterministic handler (``clear_tool_results``, ``truncate_messages``, a caller's handler marked
``deterministic = True``) is simply run again. Any other is run once per content: its output is
put in a store keyed by the content it replaced (with the handler and its parameters, the step,
its target and the newer messages the step keeps), and a replay that hands it the same content
again takes the stored output instead of calling it. :class:`MemoryStore` (the default) keeps
the newest outputs in memory; a process that restarts passes a store of its own: any object
with ``get(key)`` and ``put(key, value)`` (``key`` a str, ``value`` what the handler returned,
made only of Python's own types).
"""

from __future__ import annotations

import threading
import warnings
from collections import OrderedDict
from collections.abc import Callable
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

from ._snapshots import content_key, snapshot
from .handlers._base import BuiltinHandler
from .handlers.params import SUMMARIZE
from .prepared import is_async_callable

__all__ = ["MemoryStore", "SummaryStore", "replayable"]

STORE_SIZE = 4096


@runtime_checkable
class SummaryStore(Protocol):
    """What a stable cut keeps stored handler outputs in."""

    def get(self, key: str) -> Any | None: ...

    def put(self, key: str, value: Any) -> None: ...


class MemoryStore:
    """The newest ``size`` handler outputs, in memory (thread-safe)."""

    def __init__(self, size: int = STORE_SIZE) -> None:
        if type(size) is not int or size < 1:
            raise ValueError(f"size: expected an integer >= 1, got {size!r}")
        self.size = size
        self._items: OrderedDict[str, Any] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, key: str) -> Any | None:
        with self._lock:
            value = self._items.get(key)
            if value is not None:
                self._items.move_to_end(key)
            return value

    def put(self, key: str, value: Any) -> None:
        with self._lock:
            self._items[key] = value
            self._items.move_to_end(key)
            while len(self._items) > self.size:
                self._items.popitem(last=False)

    def __len__(self) -> int:
        return len(self._items)


def replayable(handler: Any) -> bool:
    """``handler`` may be run again on every replay: a built-in handler other than
    ``summarize``, or any handler whose ``deterministic`` attribute is ``True``."""
    if isinstance(handler, BuiltinHandler):
        return handler.kind != SUMMARIZE
    return getattr(handler, "deterministic", False) is True


@dataclass
class Tally:
    """What stored handlers did during one stable cut: outputs taken from the store, and calls
    made (whose outputs were stored when they could be)."""

    hits: int = 0
    calls: int = 0


TALLY: ContextVar[Tally | None] = ContextVar("contextpolicy_store_tally", default=None)


def _key(handler: Any, handler_id: str, request: Any) -> str | None:
    # A built-in handler's parameters (a summary's prompt, prefix, role) are part of what it
    # writes; so are the newer messages it is told it keeps (its target is what they leave).
    params = handler.params.model_dump(mode="json") if isinstance(
        handler, BuiltinHandler) else None
    return content_key(handler_id, params, request.step_id, request.target_chars,
                       request.content, request.kept)


def _count(hit: bool) -> None:
    tally = TALLY.get()
    if tally is not None:
        if hit:
            tally.hits += 1
        else:
            tally.calls += 1


class _Stored:
    """A handler whose output is stored by the content it replaced (a sync handler)."""

    def __init__(self, handler: Callable[..., Any], handler_id: str, store: SummaryStore) -> None:
        self.handler, self.handler_id, self.store = handler, handler_id, store

    def _stored(self, key: str | None) -> Any | None:
        # A store is a cache: one that fails is a miss (said), never the step's failure.
        try:
            value = self.store.get(key) if key is not None else None
        except Exception as exc:
            self._failed("get", exc, "the handler is called instead")
            return None
        if value is not None:
            _count(True)
            return snapshot(value)
        return None

    def _keep(self, key: str | None, value: Any) -> None:
        _count(False)
        if key is not None:
            copy = snapshot(value)
            if copy is not None:
                try:
                    self.store.put(key, copy)
                except Exception as exc:
                    self._failed("put", exc, "its output is used but not kept, so a later "
                                 "call pays for it again")

    def _failed(self, method: str, exc: Exception, then: str) -> None:
        warnings.warn(f"the summary store's {method} raised {type(exc).__name__}: {exc}; "
                      f"handler {self.handler_id!r}: {then}", RuntimeWarning, stacklevel=4)

    def __call__(self, request: Any) -> Any:
        key = _key(self.handler, self.handler_id, request)
        hit = self._stored(key)
        if hit is not None:
            return hit
        value = self.handler(request)
        self._keep(key, value)
        return value


class _AStored(_Stored):
    """A coroutine handler whose output is stored by the content it replaced."""

    async def __call__(self, request: Any) -> Any:  # type: ignore[override]
        key = _key(self.handler, self.handler_id, request)
        hit = self._stored(key)
        if hit is not None:
            return hit
        value = await self.handler(request)
        self._keep(key, value)
        return value


def stored_handlers(handlers: dict[str, Callable[..., Any]],
                    store: SummaryStore) -> dict[str, Callable[..., Any]]:
    """``handlers`` with each that is not :func:`replayable` wrapped to use ``store``."""
    out: dict[str, Callable[..., Any]] = {}
    for hid, handler in handlers.items():
        if replayable(handler):
            out[hid] = handler
        else:
            wrap = _AStored if is_async_callable(handler) else _Stored
            out[hid] = wrap(handler, hid, store)
    return out
