"""The cache-stable cut: what it costs per call, and what it saves an agent.

- ``per call``: the last call of a 1,000-turn tool session (4,000 messages; each turn a
  question, a tool call, a ~3,000-char result and an answer; the trim policy of the 60-turn
  agent, 60,000 chars down to 30,000): ``plain`` (``process_context`` on the whole history),
  ``stable-warm`` (``StableCut.process`` with the memo holding the call before, as an agent's
  next call finds it) and ``stable-cold`` (no memo: every earlier call replayed). Ratios to
  ``plain`` in ``extra_info["ratios"]``, the fastest pass of each timed one after the other.
- ``replay``: the shipped agent policy (``policy-agent.json`` with ``handlers-agent.json``)
  priced on 200 traces of the agent-trace corpus (12,701 model calls; ``contextpolicy replay
  --sessions 200`` gives the same rows): the stable cut's cost against the plain cut's and
  against no reduction. Sizes and prices, not time: the same on
  every machine.
"""

from __future__ import annotations

import json

import pytest

from contextpolicy import process_context
from contextpolicy.adapters._agent import agent_plan, prepare_agent_policy
from contextpolicy.replay import price_policies
from contextpolicy.stable import StableCut
from contextpolicy.synthetic import agent_trace_corpus
from tests.support.cache_agents import TRIGGER, TRIM_POLICY
from tests.support.replays import persisted, shipped_agent_policy, tool_session

from .conftest import best_of, cached, measuring

PASSES = 5



def _best(fn, passes: int = PASSES) -> float:
    return best_of(fn, passes)


@pytest.fixture(scope="session")
def long_session(request):
    turns = 1_000 if measuring(request.config) else 40
    return cached(("stable-session", turns),
                  lambda: json.loads(json.dumps(tool_session(turns, seed=5))))


@pytest.mark.parametrize("kind", ["plain", "stable-warm", "stable-cold"])
def test_stable_cut_per_call_against_the_plain_cut(benchmark, pipeline_kernel, long_session,
                                                   kind):
    messages = long_session
    impl = pipeline_kernel.IMPLEMENTATION
    prepared = prepare_agent_policy(TRIM_POLICY)
    warm = StableCut(prepared)
    warm.process(messages[:-1])  # the call before the answer: the memo the next call finds

    def plain():
        return process_context(agent_plan(messages), prepared)

    def stable_warm():
        return warm.process(messages)

    def stable_cold():
        return StableCut(prepared, memo_size=0).process(messages)

    fns = {"plain": plain, "stable-warm": stable_warm, "stable-cold": stable_cold}
    expected = persisted(messages, prepared)
    assert stable_warm().input == stable_cold().input == expected
    assert plain().report.after.chars <= TRIGGER < stable_warm().report.before.chars + \
        stable_warm().cut.held_chars
    ratios = {}
    if kind != "plain":
        ratios[f"{kind} / plain (in run)"] = _best(fns[kind]) / _best(plain)
    benchmark.group = f"stable cut per call, {len(messages):,} messages ({impl})"
    benchmark.extra_info.update(kind=f"{kind}-{impl}", messages=len(messages), ratios=ratios)
    benchmark.pedantic(fns[kind], rounds=7 if kind != "stable-cold" else 3, iterations=1,
                       warmup_rounds=1)


def test_replay_prices_the_shipped_agent_policy_on_agent_traces(benchmark, request):
    n = 200 if measuring(request.config) else 4
    sessions = cached(("replay-traces", n),
                      lambda: json.loads(json.dumps(agent_trace_corpus(n, seed=0))))
    prepared = prepare_agent_policy(*shipped_agent_policy())
    rows = price_policies(sessions, [("agent", prepared)])
    none, plain, stable = rows
    assert stable.cost < plain.cost and stable.cache_hit > plain.cache_hit
    benchmark.group = "replay: the shipped agent policy on agent traces (cost, not time)"
    benchmark.extra_info.update(
        kind="replay", conversations=len(sessions),
        ratios={"stable / plain (cost)": stable.cost / plain.cost,
                "stable / none (cost)": stable.cost / none.cost,
                "plain / none (cost)": plain.cost / none.cost,
                "stable cache hit": stable.cache_hit, "plain cache hit": plain.cache_hit,
                "stable peak chars": stable.peak_chars, "none peak chars": none.peak_chars})
    benchmark.pedantic(lambda: price_policies(sessions[:1], [("agent", prepared)]), rounds=1,
                       iterations=1)
