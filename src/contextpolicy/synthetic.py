"""Seeded synthetic chat histories and the reference workload, for examples, tests and benchmarks.

The histories look like agent transcripts: user turns of 5-8 messages on average, assistant tool
calls (OpenAI ``tool_calls`` and Anthropic ``tool_use`` blocks) with their results, long-tailed
content lengths (median about 300 characters, some 20,000-character tool outputs) and some CJK
and emoji text. The same seed always gives the same history.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from ._tables import TEXT_PART_TYPES, TOOL_RESULT_PART, TOOL_USE_PART

__all__ = [
    "KEEP_GROUPS",
    "SEED_POLICY",
    "TARGET_CHARS",
    "langchain_char_counter",
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

    def take(self, rng: _Rand, length: int, kind: int) -> str:
        pool = self.latin if kind == 0 else self.cjk if kind == 1 else self.mixed
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


def _turn(rng: _Rand, text: _Text, turn: int, out: list[dict[str, Any]]) -> None:
    out.append({"role": "user", "content": text.take(rng, _length(rng, 300), _script_kind(rng))})
    calls = _CALLS[rng.integers(0, len(_CALLS))]
    anthropic = rng.random() < 0.25
    for c in range(calls):
        call_id = f"call_{turn}_{c}"
        tool = _TOOLS[rng.integers(0, len(_TOOLS))]
        args = {"id": rng.integers(1000, 99999), "query": text.take(rng, 24, 0)}
        result = text.take(rng, _length(rng, 450), _script_kind(rng))
        if anthropic:
            out.append({"role": "assistant", "content": [
                {"type": "text", "text": text.take(rng, _length(rng, 120), 0)},
                {"type": "tool_use", "id": call_id, "name": tool, "input": args},
            ]})
            out.append({"role": "user", "content": [
                {"type": "tool_result", "tool_use_id": call_id, "content": result},
            ]})
        else:
            out.append({"role": "assistant", "content": None, "tool_calls": [{
                "id": call_id, "type": "function",
                "function": {"name": tool, "arguments": json.dumps(args)},
            }]})
            out.append({"role": "tool", "tool_call_id": call_id, "content": result})
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
