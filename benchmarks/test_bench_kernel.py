"""Object path: measure + group + cut over a history, compiled kernel vs pure twin, against the
bare dict-lookup floor and LangChain's ``trim_messages`` doing the same trim.

Read ratios from one run: ``pytest benchmarks --benchmark-enable --benchmark-only``, then
``python benchmarks/ratios.py`` on the saved JSON.
"""

from __future__ import annotations

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

    def build():
        import contextpolicy._kernel as kernel

        messages = convert_to_messages(history)
        chars = kernel.measure_messages(history)[1].tolist()
        # The same character figures as ours, looked up per message object.
        by_id = {id(m): c for m, c in zip(messages, chars)}
        return messages, by_id

    return cached(("langchain", size), build)


def test_langchain_trim_messages(benchmark, langchain_history, history, size):
    from langchain_core.messages import trim_messages

    messages, by_id = langchain_history

    def count(batch):
        return sum(by_id[id(m)] for m in batch)

    def run():
        return trim_messages(messages, max_tokens=TARGET_CHARS, token_counter=count,
                             strategy="last", start_on="human", include_system=False)

    benchmark.group = f"object path {size // 1000}k"
    benchmark.extra_info.update(messages=size, kind="langchain")
    kept = benchmark.pedantic(run, rounds=max(1, rounds(size, 3)), iterations=1)
    assert len(kept) < size
