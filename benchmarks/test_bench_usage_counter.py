"""The usage-anchored counter: does its trigger fire where an exact count does, and what does a
count cost.

Group ``usage: agent traces`` replays 40 traces of the agent-trace corpus call by call
(``tests/support/usage_replay.py``) with a stand-in provider that counts ``o200k_base`` tokens of
every text piece, 4 tokens of framing a message and 300 tokens of tool schemas; the trigger is
12,000 tokens. ``extra_info`` has, per local counter (``text``: ``tiktoken_counter("o200k_base")``,
which sees neither framing nor schemas; ``estimate``: ``estimate(4)``, a model with no offline
tokenizer), the share of calls whose trigger decision is the exact count's, anchored on the
reported usages and alone, and the traces whose first firing call is the exact one.

Group ``usage: count of the longest trace's input`` times one count of the input of the
longest of 60 traces (399 messages): ``local`` by ``tiktoken_counter`` (every message
tokenized), ``anchored`` by ``usage_anchored(tiktoken_counter)`` with all but its last three
messages reported (the prefix keyed, the three new messages tokenized); ``ratios`` has
anchored / local, each the best of 5 timed in the same run.

Measure with ``pytest benchmarks/test_bench_usage_counter.py -m extras --benchmark-enable
--benchmark-only -s`` (needs the ``[tiktoken]`` extra).
"""

from __future__ import annotations

from typing import Any

import pytest

from benchmarks.conftest import best_of, measuring
from contextpolicy import synthetic
from contextpolicy.accounting import TokenCounter
from contextpolicy.counters import estimate, tiktoken_counter, usage_anchored
from tests.support.usage_replay import Provider, agreement

pytestmark = pytest.mark.extras


def test_usage_anchored_trigger_on_agent_traces(benchmark: Any, request: Any) -> None:
    o200k = tiktoken_counter("o200k_base")
    sessions = synthetic.agent_trace_corpus(40 if measuring(request.config) else 3, seed=1)
    local = {"text": o200k, "estimate": estimate(4)}
    found = benchmark.pedantic(agreement, args=(sessions, Provider(o200k.count_text, "o200k"),
                                                12_000, local), rounds=1, iterations=1)
    calls = found["calls"]
    benchmark.group = "usage: agent traces"
    benchmark.extra_info.update(kind="agreement", calls=calls, fired=found["fired"])
    for key in local:
        figures = found[key]
        benchmark.extra_info[key] = {
            "anchored": figures["anchored"] / calls, "alone": figures["alone"] / calls,
            "first": f"{figures['first']}/{found['sessions']}",
            "first_alone": f"{figures['first_alone']}/{found['sessions']}"}
    print(benchmark.extra_info)
    assert found["text"]["anchored"] > found["text"]["alone"]
    assert found["estimate"]["anchored"] > found["estimate"]["alone"]


def test_usage_anchored_count_cost(benchmark: Any) -> None:
    trace = max(synthetic.agent_trace_corpus(60, seed=2), key=len)
    o200k = tiktoken_counter("o200k_base")
    anchored = usage_anchored(o200k)
    anchored.record(trace[:-3], 123_456)
    local = TokenCounter(o200k)
    count = TokenCounter(anchored)
    assert count.count_input(trace)[2] == 123_456
    local_s = best_of(lambda: local.count_messages(trace), 5)
    anchored_s = best_of(lambda: count.count_input(trace), 5)
    benchmark.group = "usage: count of the longest trace's input"
    benchmark.extra_info.update(kind="anchored", messages=len(trace))
    benchmark(count.count_input, trace)
    benchmark.extra_info["ratios"] = {"anchored / local": anchored_s / local_s}
    benchmark.extra_info["local_ms"] = local_s * 1e3
    print(benchmark.extra_info)
