"""Reduce policies and transcripts for the missed-reason suites."""

from __future__ import annotations

from typing import Any

REASONS = ("protected-over-target", "step-failed", "keep-groups-floor", "no-step-could-act")


def trim(target: int, keep: int = 0, grouping: str = "user-turn", fid: str = "history",
         sid: str = "t") -> dict[str, Any]:
    return {"id": sid, "kind": "trim", "fragmentId": fid, "field": "messages",
            "grouping": {"kind": grouping}, "keepGroups": keep, "targetChars": target}


def reduce_policy(*steps: dict[str, Any], trigger: int = 1800, target: int | None = 1500,
                  **more: Any) -> dict[str, Any]:
    doc: dict[str, Any] = {"mode": "reduce", "triggerChars": trigger, "steps": list(steps)}
    if target is not None:
        doc["targetInputChars"] = target
    return {**doc, **more}


def turns(n: int, size: int = 300) -> list[dict[str, Any]]:
    """``n`` user turns: a user message and an answer of ``size`` chars each."""
    out = []
    for k in range(n):
        out += [{"role": "user", "content": chr(97 + k % 26) * size},
                {"role": "assistant", "content": chr(65 + k % 26) * size}]
    return out


SYSTEM = {"role": "system", "content": "You are the support agent."}


def transcript(history: list[dict[str, Any]], question: int = 20) -> list[dict[str, Any]]:
    return [SYSTEM, *history, {"role": "user", "content": "q" * question}]


SEED = reduce_policy(trim(1000, keep=2))


TRANSCRIPTS = {
    "protected": [{"role": "user", "content": "x" * 6895}],
    "long": transcript(turns(10, 400)),
    "reached": transcript(turns(10, 100)),
    "untriggered": transcript(turns(1)),
    "both": transcript(turns(10, 400), question=2000),
}
