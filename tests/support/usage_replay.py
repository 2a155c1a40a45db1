"""Agent traces replayed with reported usages: does a usage-anchored token trigger fire at the
calls an exact counter's would?

A stand-in provider counts an input as its tokenizer's tokens of every text piece, plus a
framing of ``FRAME`` tokens a message and ``HIDDEN`` tokens the request carries beside the
messages (tool schemas, the provider's own preamble), which no local counter sees. Each trace is
replayed call by call through a :class:`StableCut` with the provider's own count as the counter
(the exact local counter, had one existed); at every call, the input before the cut (what the
previous call sent, plus the messages since) is counted by each counter under test, and its
trigger decision compared with the exact one. A usage-anchored counter is fed, after each call,
the provider's count of what that call sent, as an adapter feeds it.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from contextpolicy import StableCut
from contextpolicy.accounting import TokenCounter
from contextpolicy.counters import usage_anchored

HIDDEN, FRAME = 300, 4


class Provider:
    """The provider's own count of a model input (see the module docstring)."""

    exact = True

    def __init__(self, text_tokens: Callable[[str], int], name: str) -> None:
        self.name = f"provider:{name}"
        self.count_text = text_tokens
        self._pieces = TokenCounter(text_tokens)

    def count_messages(self, messages: list[dict[str, Any]]) -> int:
        return self._pieces.count_messages(messages) + FRAME * len(messages) + HIDDEN


class FramedCounter:
    """The adapters' tests' fake tokenizer, exact: the words of a text, and ``framed(messages)``
    plus ``overhead`` tokens for a message list. With no overhead it is the local counter; with
    the overhead a provider adds (what no local counter sees) it is the provider's own count."""

    exact = True

    def __init__(self, framed: Callable[[list[dict[str, Any]]], int], overhead: int = 0) -> None:
        self.framed, self.overhead = framed, overhead
        self.name = "provider" if overhead else "framed-words"

    def count_text(self, text: str) -> int:
        return len(text.split())

    def count_messages(self, messages: list[dict[str, Any]]) -> int:
        return self.framed(messages) + self.overhead


def token_policy(trigger: int) -> dict[str, Any]:
    """A token trigger at ``trigger``, the history trimmed by user turn."""
    return {"mode": "reduce", "triggerTokens": trigger, "targetInputTokens": trigger // 2,
            "steps": [{"id": "recent-turns", "kind": "trim", "fragmentId": "history",
                       "grouping": {"kind": "user-turn"}, "keepGroups": 1,
                       "targetChars": 20_000}]}


def calls(session: Sequence[dict[str, Any]]) -> list[int]:
    """The model calls of a recorded session: the length of its history at each (before each
    assistant message that starts a run of model output, and at its end)."""
    n = len(session)
    return [i for i in range(1, n + 1) if i == n or (
        session[i].get("role") == "assistant" and session[i - 1].get("role") != "assistant")]


def agreement(sessions: Sequence[list[dict[str, Any]]], provider: Provider, trigger: int,
              local: Mapping[str, Any]) -> dict[str, Any]:
    """Per local counter: calls whose trigger decision agrees with the exact count's, anchored on
    the reported usages (``anchored``) and by the local counter alone (``alone``), and sessions
    whose first firing call is the exact one's (``first``, ``first_alone``); ``calls`` and
    ``fired`` (calls the exact count triggers)."""
    out: dict[str, Any] = {"calls": 0, "fired": 0, "sessions": len(sessions)}
    for key in local:
        out[key] = {"anchored": 0, "alone": 0, "first": 0, "first_alone": 0}
    for session in sessions:
        cut = StableCut(token_policy(trigger), counter=provider)
        anchored = {k: usage_anchored(v) for k, v in local.items()}
        counters = {k: TokenCounter(a) for k, a in anchored.items()}
        alone = {k: TokenCounter(v) for k, v in local.items()}
        firsts: dict[str, list[int | None]] = {k: [None, None, None] for k in local}
        sent: list[dict[str, Any]] | None = None
        at = 0
        for n, i in enumerate(calls(session)):
            result = cut.process(session[:i])
            before = (sent + session[at:i]) if sent is not None else session[:i]
            exact = result.report.before.tokens
            assert exact == provider.count_messages(before)
            fires = exact > trigger
            out["calls"] += 1
            out["fired"] += fires
            for key in local:
                a = counters[key].count_input(before)[0] > trigger
                b = alone[key].count_messages(before) > trigger
                out[key]["anchored"] += a == fires
                out[key]["alone"] += b == fires
                for j, decided in enumerate((fires, a, b)):
                    if decided and firsts[key][j] is None:
                        firsts[key][j] = n
            sent, at = result.input, i
            reported = provider.count_messages(sent)
            for a in anchored.values():
                a.record(sent, reported)
        for key in local:
            exact_first, anchored_first, alone_first = firsts[key]
            out[key]["first"] += anchored_first == exact_first
            out[key]["first_alone"] += alone_first == exact_first
    return out
