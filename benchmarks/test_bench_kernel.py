"""Object path: measure + group + cut over a history, compiled kernel vs pure twin, against the
bare dict-lookup floor and LangChain's ``trim_messages`` doing the same trim.

Read ratios from one run: ``pytest benchmarks --benchmark-enable --benchmark-only``, then
``python benchmarks/ratios.py`` on the saved JSON.
"""

from __future__ import annotations

import json

import pytest

from .conftest import rounds

TARGET_CHARS = 1000
KEEP_GROUPS = 2


def measure_group_cut(kernel, messages):
    roles, chars, flags, opaque = kernel.measure_messages(messages)
    offsets, group_chars = kernel.group_offsets(flags, chars, kernel.GROUP_USER_TURN)
    first = kernel.trim_cut(group_chars, KEEP_GROUPS, TARGET_CHARS)
    return int(offsets[first])


def test_measure_group_cut(benchmark, impl, history, size):
    benchmark.group = f"object path {size // 1000}k"
    benchmark.extra_info.update(messages=size, kind=f"kernel-{impl.IMPLEMENTATION}")
    cut = benchmark.pedantic(measure_group_cut, (impl, history), rounds=rounds(size), iterations=1)
    assert 0 < cut < size


def test_dict_lookup_floor(benchmark, impl, history, size):
    benchmark.group = f"object path {size // 1000}k"
    benchmark.extra_info.update(messages=size, kind=f"floor-{impl.IMPLEMENTATION}")
    found = benchmark.pedantic(impl.dict_lookup_floor, (history,), rounds=rounds(size), iterations=1)
    assert found >= 2 * size


@pytest.fixture(scope="session")
def langchain_history(history, size):
    from langchain_core.messages import convert_to_messages

    from .conftest import cached

    return cached(("langchain", size), lambda: convert_to_messages(history))


def _compact(value):
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)


def _part_chars(parts):
    total = 0
    for part in parts:
        if isinstance(part, str):
            total += len(part)
            continue
        kind = part.get("type")
        if kind in ("text", "input_text", "output_text"):
            total += len(part.get("text") or "")
        elif kind == "tool_result":
            inner = part.get("content")
            total += len(inner) if isinstance(inner, str) else _part_chars(inner or [])
        elif kind == "tool_use":
            total += len(part.get("name") or "") + len(_compact(part.get("input")))
    return total


def langchain_char_counter(messages):
    """A character counter for LangChain messages, as a LangChain user writes one: the text
    each message carries, its tool calls' names and arguments (the same rules as ours)."""
    total = 0
    for m in messages:
        content = m.content
        total += len(content) if isinstance(content, str) else _part_chars(content)
        for call in getattr(m, "tool_calls", None) or ():
            total += len(call["name"]) + len(_compact(call["args"]))
    return total


def test_langchain_trim_messages(benchmark, langchain_history, history, size):
    from langchain_core.messages import trim_messages

    def run():
        return trim_messages(langchain_history, max_tokens=TARGET_CHARS,
                             token_counter=langchain_char_counter, strategy="last",
                             start_on="human", include_system=False)

    benchmark.group = f"object path {size // 1000}k"
    benchmark.extra_info.update(messages=size, kind="langchain")
    kept = benchmark.pedantic(run, rounds=max(1, rounds(size, 3)), iterations=1)
    assert len(kept) < size
