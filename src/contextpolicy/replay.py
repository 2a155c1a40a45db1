"""What a policy costs an agent whose provider caches the prompt's prefix, priced on recorded
sessions (``contextpolicy replay``).

A session is an agent's whole history; each model call it made is the messages before an
assistant message (the first of a run of model outputs). Every call is sent as a cut gives it:
``none`` (the history as it is), ``plain`` (the policy run on the call's whole history, as
:func:`~contextpolicy.process_context` runs it) or ``stable`` (:class:`~contextpolicy.stable
.StableCut`: what a persisted reduction would hold). A call is priced as a prompt cache bills
it: its leading messages equal to the previous call's are read from the cache (``cache_read``
per million), the rest is written to it (``cache_write``); sizes are chars, or tokens with a
counter (each message counted on its own). Every figure is measured from the inputs the cuts
produced; nothing is estimated.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from . import _kernel
from .accounting import TokenCounter, as_counter
from .adapters._agent import agent_plan
from .core import process_context
from .prepared import PreparedPolicy
from .stable import StableCut, call_starts

__all__ = ["Prices", "ReplayRow", "price_calls", "price_policies", "session_calls"]


@dataclass(frozen=True)
class Prices:
    """Prices per million units (tokens, or chars without a counter): ``input`` is the base
    price (what a provider without a cache bills), ``cache_write`` what input written to the
    cache costs and ``cache_read`` what input read from it costs. The defaults are Anthropic's
    list prices for Claude Sonnet (USD 3, 3.75 and 0.30: a write 1.25x the base, a read 0.1x);
    OpenAI's automatic cache has no write premium (``cache_write`` = ``input``)."""

    input: float = 3.0
    cache_write: float = 3.75
    cache_read: float = 0.30

    def __post_init__(self) -> None:
        for name in ("input", "cache_write", "cache_read"):
            problem = price_problem(getattr(self, name))
            if problem is not None:
                raise ValueError(f"{name}: {problem}")


# A price per million units above this is no provider's; it also keeps every cost finite.
MAX_PRICE = 1_000_000


def price_problem(value: Any) -> str | None:
    """What is wrong with ``value`` as a price per million units (``None``: nothing)."""
    if type(value) not in (int, float) or not 0 <= value <= MAX_PRICE:  # NaN, infinity too
        return f"expected a price from 0 to {MAX_PRICE:,} per million, got {value!r}"
    return None


@dataclass
class ReplayRow:
    """The figures of one cut over every call of every session: ``calls``; ``input_chars``,
    ``cached_chars`` (the part read from the cache) and ``peak_chars`` (the largest call);
    the token figures with a counter (``None`` without); ``cost``; and, per call in order,
    ``sizes`` (chars, or tokens with a counter) and ``costs`` (cumulative), for a plot."""

    policy: str | None
    cut: str
    calls: int = 0
    input_chars: int = 0
    cached_chars: int = 0
    peak_chars: int = 0
    input_tokens: int | None = None
    cached_tokens: int | None = None
    peak_tokens: int | None = None
    cost: float = 0.0
    sizes: list[int] = field(default_factory=list, repr=False)
    costs: list[float] = field(default_factory=list, repr=False)

    @property
    def cache_hit(self) -> float:
        """The share of input read from the cache (tokens with a counter, chars without)."""
        if self.input_tokens is not None and self.cached_tokens is not None:
            return self.cached_tokens / self.input_tokens if self.input_tokens else 0.0
        return self.cached_chars / self.input_chars if self.input_chars else 0.0

    def to_json(self) -> dict[str, Any]:
        return {
            "policy": self.policy, "cut": self.cut, "calls": self.calls,
            "inputChars": self.input_chars, "cachedChars": self.cached_chars,
            "cacheHit": round(self.cache_hit, 6), "peakChars": self.peak_chars,
            "cost": round(self.cost, 6), "inputTokens": self.input_tokens,
            "cachedTokens": self.cached_tokens, "peakTokens": self.peak_tokens,
        }


class _Meter:
    """Prices the calls of one row, session by session (the cache starts empty in each)."""

    def __init__(self, row: ReplayRow, prices: Prices, counter: TokenCounter | None) -> None:
        self.row, self.prices, self.counter = row, prices, counter
        self.previous: list[Any] = []
        if counter is not None:
            row.input_tokens = row.cached_tokens = row.peak_tokens = 0

    def new_session(self) -> None:
        self.previous = []

    def call(self, sent: list[Any]) -> None:
        row, counter = self.row, self.counter
        same = _common_prefix(self.previous, sent)
        self.previous = sent
        chars = _kernel.measure_messages(list(sent))[1]
        total, cached = int(chars.sum()), int(chars[:same].sum())
        row.calls += 1
        row.input_chars += total
        row.cached_chars += cached
        row.peak_chars = max(row.peak_chars, total)
        units, hit = total, cached
        if counter is not None:
            tokens = [counter.count_messages([m]) for m in sent]
            units, hit = sum(tokens), sum(tokens[:same])
            row.input_tokens = (row.input_tokens or 0) + units
            row.cached_tokens = (row.cached_tokens or 0) + hit
            row.peak_tokens = max(row.peak_tokens or 0, units)
        p = self.prices
        row.cost += (hit * p.cache_read + (units - hit) * p.cache_write) / 1e6
        row.sizes.append(units)
        row.costs.append(row.cost)


def _common_prefix(a: list[Any], b: list[Any]) -> int:
    """How many leading messages ``a`` and ``b`` share exactly (types, values and key order: a
    provider's cache compares the bytes it is sent, where ``1`` and ``True`` differ; no
    message's own ``__eq__`` runs)."""
    n = min(len(a), len(b))
    if _kernel.exact_same(a[:n], b[:n]):
        return n
    i = 0
    while i < n and _kernel.exact_same(a[i], b[i]):
        i += 1
    return i


def price_calls(inputs: Iterable[list[Any]], *, prices: Prices | None = None,
                counter: Any = None, policy: str | None = None,
                cut: str = "none") -> ReplayRow:
    """The figures of one session's model calls, ``inputs`` being what each call was sent
    (message dicts, in order): the row :func:`price_policies` gives for a cut, for inputs made
    anywhere (an agent framework's model calls, recorded)."""
    row = ReplayRow(policy, cut)
    meter = _Meter(row, prices or Prices(), as_counter(counter))
    for sent in inputs:
        meter.call(sent)
    return row


def session_calls(messages: list[Any]) -> list[int]:
    """The length of the history at each model call of a session: the index of every
    assistant message that starts a run of model outputs."""
    roles, _, flags, _ = _kernel.measure_messages(messages)
    return [int(p) for p in call_starts(roles, flags)]


def price_policies(
    sessions: Iterable[list[Any]],
    policies: Sequence[tuple[str, PreparedPolicy]],
    *,
    prices: Prices | None = None,
    counter: Any = None,
    cuts: Sequence[str] = ("plain", "stable"),
    progress: Callable[[int], None] | None = None,
) -> list[ReplayRow]:
    """Every call of every session priced for ``none`` and, for each named policy, each of
    ``cuts``; rows in that order. ``progress`` is called with the calls of each session done.

    Raises what :func:`~contextpolicy.process_context` raises for a session it cannot read
    (a :class:`~contextpolicy.ContextPlanError` naming the message)."""
    prices = prices or Prices()
    tc = as_counter(counter)
    rows = [ReplayRow(None, "none")]
    runners: list[Callable[[list[Any]], list[Any]]] = [list]
    for name, prepared in policies:
        for cut in cuts:
            rows.append(ReplayRow(name, cut))
            runners.append(_runner(prepared, cut))
    meters = [_Meter(row, prices, tc) for row in rows]
    for messages in sessions:
        calls = session_calls(messages)
        for meter in meters:
            meter.new_session()
        for p in calls:
            history = messages[:p]
            for meter, run in zip(meters, runners, strict=True):
                meter.call(run(history))
        if progress is not None:
            progress(len(calls))
    return rows


def _runner(prepared: PreparedPolicy, cut: str) -> Callable[[list[Any]], list[Any]]:
    if cut == "plain":
        return lambda history: process_context(agent_plan(history), prepared).input
    if cut == "stable":
        stable = StableCut(prepared)
        return lambda history: stable.process(history).input
    raise ValueError(f"cut: expected 'plain' or 'stable', got {cut!r}")
