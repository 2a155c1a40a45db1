"""Seeded synthetic chat histories and the reference workload, for examples, tests and benchmarks.

The histories look like agent transcripts: user turns of 5-8 messages on average, assistant tool
calls (OpenAI ``tool_calls`` and Anthropic ``tool_use`` blocks) with their results, long-tailed
content lengths (median about 300 characters, some 20,000-character tool outputs) and some CJK
and emoji text. The same seed always gives the same history.
"""

from __future__ import annotations

import itertools
import json
import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from ._tables import TEXT_PART_TYPES, TOOL_RESULT_PART, TOOL_USE_PART

__all__ = [
    "CORPORA",
    "KEEP_GROUPS",
    "SEED_POLICY",
    "TARGET_CHARS",
    "agent_trace_corpus",
    "chat_corpus",
    "corpus",
    "langchain_char_counter",
    "long_transcript_corpus",
    "make_agent_trace",
    "make_chat",
    "make_history",
    "make_transcript",
    "measure_group_cut",
]

_WORDS = (
    "order refund shipping invoice account password reset delivery tracking warehouse "
    "customer ticket status pending approved declined payment card address update cancel "
    "subscription plan upgrade downgrade billing cycle receipt discount coupon return label "
    "carrier estimate weekend holiday support agent escalate manager policy warranty device "
    "serial firmware version battery screen replacement appointment store inventory stock"
).split()
_ACCENTED = "café naïve résumé Zürich Ångström façade São Paulo Kraków Dvořák señor Øresund "
_CJK = "订单退款发货发票账户密码重置物流仓库客户状态付款地址取消订阅升级账单收据优惠退货承运预计"
_EMOJI = "😀🚚📦💳✅❌🔁🧾📮🛠️"
_TOOLS = ("lookup_order", "search_kb", "get_invoice", "track_parcel", "update_address")


class _Rand:
    """Random numbers drawn from numpy in blocks: a million messages in seconds, not minutes."""

    BLOCK = 1 << 16

    def __init__(self, seed: int) -> None:
        self.rng = np.random.default_rng(seed)
        self._u: list[float] = []
        self._z: list[float] = []

    def random(self) -> float:
        if not self._u:
            self._u = self.rng.random(self.BLOCK).tolist()
        return self._u.pop()

    def normal(self) -> float:
        if not self._z:
            self._z = self.rng.standard_normal(self.BLOCK).tolist()
        return self._z.pop()

    def integers(self, low: int, high: int) -> int:
        return low + int(self.random() * (high - low))

    def lognormal(self, median: float, sigma: float) -> float:
        return median * math.exp(sigma * self.normal())


class _Text:
    """Cheap slices of a large, fixed pool of text (no per-message random word joins)."""

    def __init__(self, rng: np.random.Generator) -> None:
        words = rng.choice(np.array(_WORDS), size=60_000)
        self.latin = " ".join(words.tolist())
        cjk = rng.choice(list(_CJK), size=20_000)
        self.cjk = "".join(cjk.tolist())
        emo = rng.choice(list(_EMOJI), size=2_000)
        self.emoji = " ".join(emo.tolist())

        self.mixed = self.emoji + self.latin
        accented = rng.choice(np.array(_ACCENTED.split()), size=10_000)
        self.accented = " ".join(accented.tolist())

    def take(self, rng: _Rand, length: int, kind: int) -> str:
        pool = (self.latin, self.cjk, self.mixed, self.accented)[kind]
        length = max(1, min(length, len(pool) - 1))
        start = rng.integers(0, len(pool) - length)
        return pool[start : start + length]


def _length(rng: _Rand, median: float = 300.0) -> int:
    # Log-normal body with a heavy tail of 20k-character tool outputs.
    if rng.random() < 0.01:
        return 20_000
    return max(1, int(rng.lognormal(median, 0.9)))


def _script_kind(rng: _Rand) -> int:
    r = rng.random()
    return 1 if r < 0.05 else 2 if r < 0.08 else 0


_CALLS = (0, 1, 1, 1, 2, 2, 2, 3, 3, 3)  # about 1.8 tool calls per turn


def _tool_pair(
    out: list[dict[str, Any]], call_id: str, tool: str, args: dict[str, Any], result: str,
    lead: Any,
) -> None:
    """A tool call and its result: Anthropic blocks (``lead()`` draws the text before the call)
    or OpenAI ``tool_calls`` and a ``tool`` message (``lead`` is ``None``)."""
    if lead is not None:
        out.append({"role": "assistant", "content": [
            {"type": "text", "text": lead()},
            {"type": "tool_use", "id": call_id, "name": tool, "input": args},
        ]})
        out.append({"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": call_id, "content": result},
        ]})
    else:
        out.append({"role": "assistant", "content": None, "tool_calls": [{
            "id": call_id, "type": "function",
            "function": {"name": tool, "arguments": json.dumps(args, ensure_ascii=False)},
        }]})
        out.append({"role": "tool", "tool_call_id": call_id, "content": result})


def _turn(rng: _Rand, text: _Text, turn: int, out: list[dict[str, Any]]) -> None:
    out.append({"role": "user", "content": text.take(rng, _length(rng, 300), _script_kind(rng))})
    calls = _CALLS[rng.integers(0, len(_CALLS))]
    anthropic = rng.random() < 0.25
    for c in range(calls):
        call_id = f"call_{turn}_{c}"
        tool = _TOOLS[rng.integers(0, len(_TOOLS))]
        args = {"id": rng.integers(1000, 99999), "query": text.take(rng, 24, 0)}
        result = text.take(rng, _length(rng, 450), _script_kind(rng))
        _tool_pair(out, call_id, tool, args, result,
                   (lambda: text.take(rng, _length(rng, 120), 0)) if anthropic else None)
    answer = text.take(rng, _length(rng, 400), _script_kind(rng))
    out.append({"role": "assistant", "content": answer})
    if rng.random() < 0.02:
        out.append({"role": "user", "content": [
            {"type": "text", "text": "see attached"},
            {"type": "image_url", "image_url": {"url": "https://example.invalid/receipt.png"}},
        ]})
        out.append({"role": "assistant", "content": text.take(rng, _length(rng, 200), 0)})


def make_history(n_messages: int, seed: int = 0) -> list[dict[str, Any]]:
    """A history of exactly ``n_messages`` messages, starting with a user turn."""
    rng = _Rand(seed)
    text = _Text(rng.rng)
    out: list[dict[str, Any]] = []
    turn = 0
    while len(out) < n_messages:
        _turn(rng, text, turn, out)
        turn += 1
    del out[n_messages:]
    return out


def make_transcript(
    n_messages: int, seed: int = 0, system: str | None = None
) -> list[dict[str, Any]]:
    """A full transcript: a system prompt, ``n_messages`` of history and a final question."""
    rng = _Rand(seed + 1)
    text = _Text(rng.rng)
    head = [{"role": "system", "content": system or "You are a careful support agent. " * 4}]
    question = {"role": "user", "content": text.take(rng, _length(rng, 200), 0) + "?"}
    return head + make_history(n_messages, seed) + [question]


# ---------------------------------------------------------------------------------------------
# The reference workload: the seed's policy, the kernel's whole job for one trim, and the
# character counter a LangChain user writes for trim_messages.

SEED_POLICY = {
    "mode": "reduce", "triggerChars": 1800, "targetInputChars": 1500,
    "selection": {"mode": "sequence"},
    "steps": [{"id": "recent-history", "kind": "trim", "fragmentId": "history",
               "field": "messages", "grouping": {"kind": "user-turn"}, "keepGroups": 2,
               "targetChars": 1000}],
}
KEEP_GROUPS = 2
TARGET_CHARS = 1000


def measure_group_cut(kernel: Any, messages: list[dict[str, Any]]) -> int:
    """The kernel's whole job for one trim: measure, group by user turn, find the cut."""
    _roles, chars, flags, _opaque = kernel.measure_messages(messages)
    offsets, group_chars = kernel.group_offsets(flags, chars, kernel.GROUP_USER_TURN)
    return int(offsets[kernel.trim_cut(group_chars, KEEP_GROUPS, TARGET_CHARS)])


def _compact(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)


def _part_chars(parts: Sequence[Any]) -> int:
    total = 0
    for part in parts:
        if isinstance(part, str):
            total += len(part)
            continue
        kind = part.get("type")
        if kind in TEXT_PART_TYPES:
            total += len(part.get("text") or "")
        elif kind == TOOL_RESULT_PART:
            inner = part.get("content")
            total += len(inner) if isinstance(inner, str) else _part_chars(inner or [])
        elif kind == TOOL_USE_PART:
            total += len(part.get("name") or "") + len(_compact(part.get("input")))
    return total


def langchain_char_counter(messages: Sequence[Any]) -> int:
    """A character counter for LangChain messages as a LangChain user writes one: the text each
    message carries plus its tool calls' names and arguments (the same rules as ours)."""
    total = 0
    for m in messages:
        content = m.content
        total += len(content) if isinstance(content, str) else _part_chars(content)
        for call in getattr(m, "tool_calls", None) or ():
            total += len(call["name"]) + len(_compact(call["args"]))
    return total


# ---------------------------------------------------------------------------------------------
# Benchmark corpora shaped like real ones: many short chats, agent traces with heavy tool
# traffic, and the long transcripts above. Each is a list of transcripts (message lists), the
# same for the same seed.


def _quantile_draw(rng: _Rand, points: Sequence[tuple[float, float]]) -> float:
    """A draw whose distribution has exactly the given quantiles (``(p, value)`` pairs from
    p=0 to p=1): the inverse CDF interpolated log-linearly between them."""
    u = rng.random()
    for (p0, v0), (p1, v1) in itertools.pairwise(points):
        if u <= p1:
            t = (u - p0) / (p1 - p0)
            return math.exp(math.log(v0) + t * (math.log(v1) - math.log(v0)))
    return points[-1][1]


# Real chat corpora: messages per conversation p10/p50/p90/p99 = 2/6/14/26, characters per
# message p10/p50/p90/p99 = 35/433/2,223/4,075.
CHAT_MESSAGES = ((0.0, 1.0), (0.10, 2.0), (0.50, 6.0), (0.90, 14.0), (0.99, 26.0), (1.0, 40.0))
CHAT_CHARS = ((0.0, 2.0), (0.10, 35.0), (0.50, 433.0), (0.90, 2223.0), (0.99, 4075.0),
              (1.0, 8000.0))
_CHAT_SYSTEM = (
    "You are a helpful assistant. Answer briefly and ask before you assume.",
    "You are a friendly support agent for an online store. Be polite; never share account data.",
    "Reply in the user's language. Keep answers under three paragraphs.",
)


def _chat(rng: _Rand, text: _Text) -> list[dict[str, Any]]:
    n = max(1, round(_quantile_draw(rng, CHAT_MESSAGES)))
    out: list[dict[str, Any]] = []
    if rng.random() < 1 / 3:
        out.append({"role": "system", "content": _CHAT_SYSTEM[rng.integers(0, 3)]})
    for i in range(n):
        length = max(1, round(_quantile_draw(rng, CHAT_CHARS)))
        kind = 2 if rng.random() < 0.03 else 3 if rng.random() < 0.03 else 0
        out.append({"role": "user" if i % 2 == 0 else "assistant",
                    "content": text.take(rng, length, kind)})
    return out


def make_chat(seed: int = 0) -> list[dict[str, Any]]:
    """One chat conversation drawn from the chat corpus's distributions (no tools)."""
    return chat_corpus(1, seed)[0]


def chat_corpus(n: int, seed: int = 0) -> list[list[dict[str, Any]]]:
    """``n`` chat conversations: user and assistant alternating, a system message in a third of
    them, no tools, message counts and lengths with the quantiles of ``CHAT_MESSAGES`` and
    ``CHAT_CHARS``."""
    rng = _Rand(seed + 11)
    text = _Text(rng.rng)
    return [_chat(rng, text) for _ in range(n)]


def _tool_output(rng: _Rand) -> int:
    return max(1, min(50_000, int(rng.lognormal(900, 1.3))))


def _trace(rng: _Rand, text: _Text) -> list[dict[str, Any]]:
    n = int(math.exp(math.log(20) + rng.random() * (math.log(400) - math.log(20))))
    anthropic = rng.random() < 1 / 3
    tool_share = 0.3 + 0.3 * rng.random()  # of the messages: tool calls and their results
    out: list[dict[str, Any]] = [
        {"role": "system", "content": "You are an agent with tools. Think, call, answer. "
         + text.take(rng, 400, 3)},
    ]
    call = 0
    while len(out) < n:
        out.append({"role": "user",
                    "content": text.take(rng, _length(rng, 200), rng.integers(0, 4))})
        # 2k tool messages beside the user message and the answer: k = share / (1 - share) on
        # average, so the trace's tool share is about ``tool_share``.
        mean_calls = tool_share / (1 - tool_share)
        for _ in range(int(mean_calls * 2 * rng.random() + rng.random())):
            if len(out) >= n:
                break
            call_id = f"call_{call:05d}"
            call += 1
            tool = _TOOLS[rng.integers(0, len(_TOOLS))]
            args = {"id": rng.integers(1000, 99999),
                    "query": text.take(rng, 30, rng.integers(0, 4))}
            result = text.take(rng, _tool_output(rng), rng.integers(0, 4))
            _tool_pair(out, call_id, tool, args, result,
                       (lambda: text.take(rng, _length(rng, 80), 3)) if anthropic else None)
        if len(out) < n:
            out.append({"role": "assistant",
                        "content": text.take(rng, _length(rng, 350), rng.integers(0, 4))})
    out.append({"role": "user", "content": text.take(rng, _length(rng, 150), 3) + "?"})
    return out


def make_agent_trace(seed: int = 0) -> list[dict[str, Any]]:
    """One agent trace drawn from the agent-trace corpus's distributions."""
    return agent_trace_corpus(1, seed)[0]


def agent_trace_corpus(n: int, seed: int = 0) -> list[list[dict[str, Any]]]:
    """``n`` agent traces: a system prompt, 20-400 messages (log-uniform) of which 30-60% are
    tool calls and results, tool outputs log-normal up to 50,000 chars, a third of the traces
    in Anthropic blocks, CJK, emoji and accented text throughout, and a final question."""
    rng = _Rand(seed + 23)
    text = _Text(rng.rng)
    return [_trace(rng, text) for _ in range(n)]


def long_transcript_corpus(n: int, seed: int = 0) -> list[list[dict[str, Any]]]:
    """``n`` long transcripts of 200-1,000 messages (:func:`make_transcript`)."""
    rng = _Rand(seed + 37)
    return [make_transcript(rng.integers(200, 1001), seed=seed * 1000 + i) for i in range(n)]


CORPORA = {
    "chats": chat_corpus,
    "agent-traces": agent_trace_corpus,
    "long-transcripts": long_transcript_corpus,
}


def corpus(name: str, n: int, seed: int = 0) -> list[list[dict[str, Any]]]:
    """``n`` transcripts of the named corpus (``chats``, ``agent-traces`` or
    ``long-transcripts``)."""
    return CORPORA[name](n, seed)
