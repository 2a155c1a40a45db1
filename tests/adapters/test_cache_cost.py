"""What the agent adapters cost with a prompt cache: the 60-turn tool agent of the figures
(``tests/support/cache_agents``), every model call priced as a cache bills it. Deterministic
figures (sizes and prices, no timing): the claims of the cache-stable cut."""

from __future__ import annotations

import pytest

pytestmark = [pytest.mark.extras, pytest.mark.usefixtures("pipeline_kernel")]

from contextpolicy.adapters.langchain import ContextPolicyMiddleware  # noqa: E402
from contextpolicy.adapters.openai_agents import context_policy_input_filter  # noqa: E402
from tests.support.cache_agents import (  # noqa: E402
    TRIGGER,
    TRIM_POLICY,
    TURNS,
    langchain_run,
    langchain_trim_messages,
    openai_agents_run,
)
from tests.support.replays import shipped_agent_policy  # noqa: E402

# One call adds at most a question, a tool call, its ~3,300-char result and an answer.
GROWTH = 4_500


def test_the_middleware_at_its_defaults_keeps_the_cache_and_costs_what_persist_does():
    none = langchain_run([]).priced("none")
    stable = langchain_run([ContextPolicyMiddleware(TRIM_POLICY)])
    persist = langchain_run([ContextPolicyMiddleware(TRIM_POLICY, mode="persist")]).priced("p")
    trimmed = langchain_run([langchain_trim_messages()]).priced("trim_messages")
    row = stable.priced("stable")
    assert row.calls == none.calls == 2 * TURNS
    assert row.cache_hit >= 0.90
    assert row.cost <= 1.05 * persist.cost
    assert row.cost <= 0.5 * trimmed.cost
    assert row.cost < none.cost
    assert row.peak_chars <= TRIGGER + GROWTH < none.peak_chars
    assert stable.state == 4 * TURNS  # the agent's history keeps every message


def test_the_plain_cut_is_what_made_an_ephemeral_reduction_dear():
    none = langchain_run([]).priced("none")
    plain = langchain_run([ContextPolicyMiddleware(TRIM_POLICY, cut="plain")]).priced("plain")
    assert plain.cache_hit < 0.7 and plain.cost > none.cost


def test_the_shipped_agent_policy_costs_at_most_053_of_no_reduction():
    policy, handlers = shipped_agent_policy()
    none = langchain_run([]).priced("none")
    run = langchain_run([ContextPolicyMiddleware(policy, handlers=handlers)])
    row = run.priced("agent")
    assert row.cost <= 0.53 * none.cost
    assert row.peak_chars <= TRIGGER + GROWTH
    assert run.state == 4 * TURNS


def test_the_openai_agents_filter_at_its_defaults_does_the_same():
    policy, handlers = shipped_agent_policy()
    none = openai_agents_run(None).priced("none")
    stable = openai_agents_run(context_policy_input_filter(TRIM_POLICY))
    plain = openai_agents_run(context_policy_input_filter(TRIM_POLICY, cut="plain")).priced("p")
    agent = openai_agents_run(context_policy_input_filter(policy, handlers=handlers))
    row = stable.priced("stable")
    assert row.cache_hit >= 0.90 and row.cost <= 0.5 * plain.cost
    assert row.peak_chars <= TRIGGER + GROWTH
    assert agent.priced("agent").cost <= 0.53 * none.cost
    assert stable.state == agent.state == 4 * TURNS
