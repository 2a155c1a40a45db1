"""Object path: measure + group + cut over a history, compiled kernel vs pure twin, against the
bare dict-lookup floor and LangChain's ``trim_messages`` doing the same trim.

Read ratios from one run: ``pytest benchmarks --benchmark-enable --benchmark-only``, then
``python benchmarks/ratios.py`` on the saved JSON.
"""

from __future__ import annotations

import pytest

from contextpolicy.synthetic import TARGET_CHARS, langchain_char_counter, measure_group_cut

from .conftest import lookup_floor, rounds


def test_measure_group_cut(benchmark, kernel, history, size):
    benchmark.group = f"object path {size // 1000}k"
    benchmark.extra_info.update(messages=size, kind=f"kernel-{kernel.IMPLEMENTATION}")
    cut = benchmark.pedantic(measure_group_cut, (kernel, history), rounds=rounds(size), iterations=1)
    assert 0 < cut < size


def test_dict_lookup_floor(benchmark, history, size):
    floor = lookup_floor()
    benchmark.group = f"object path {size // 1000}k"
    benchmark.extra_info.update(messages=size, kind="floor-c")
    found = benchmark.pedantic(floor.dict_lookup_floor, (history,), rounds=rounds(size),
                               iterations=1)
    assert found == sum(("role" in m) + ("content" in m) + ("tool_calls" in m) for m in history)


@pytest.fixture(scope="session")
def langchain_history(history, size):
    from langchain_core.messages import convert_to_messages

    from .conftest import cached

    return cached(("langchain", size), lambda: convert_to_messages(history))


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
