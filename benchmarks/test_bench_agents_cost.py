"""What an agent's input costs with a prompt cache: the 60-turn tool agent
(``tests/support/cache_agents``: each turn a question, a tool call, a ~3,000-char result and an
answer; 120 model calls) in LangChain's ``create_agent`` and the OpenAI Agents SDK, each call
priced as a cache bills it (the leading messages equal to the previous call's at 0.1x the
input price, the rest at 1.25x). Costs are ratios to no reduction in
``extra_info["ratios"]``; the time is one whole agent run with the variant's middleware."""

from __future__ import annotations

import json
from importlib import resources

import pytest

pytestmark = pytest.mark.extras

from contextpolicy.adapters.langchain import ContextPolicyMiddleware  # noqa: E402
from contextpolicy.adapters.openai_agents import context_policy_input_filter  # noqa: E402
from contextpolicy.handlers import from_config  # noqa: E402
from tests.support.cache_agents import (  # noqa: E402
    TRIM_POLICY,
    langchain_run,
    langchain_summarization,
    langchain_trim_messages,
    openai_agents_run,
)

EXAMPLES = resources.files("contextpolicy").joinpath("examples")


def _agent_policy():
    return (json.loads(EXAMPLES.joinpath("policy-agent.json").read_text("utf-8")),
            from_config(json.loads(EXAMPLES.joinpath("handlers-agent.json").read_text("utf-8"))))


LANGCHAIN = {
    "none": lambda: [],
    "trim_messages per call": lambda: [langchain_trim_messages()],
    "SummarizationMiddleware": lambda: [langchain_summarization()],
    "ours plain": lambda: [ContextPolicyMiddleware(TRIM_POLICY, cut="plain")],
    "ours stable (default)": lambda: [ContextPolicyMiddleware(TRIM_POLICY)],
    "ours persist": lambda: [ContextPolicyMiddleware(TRIM_POLICY, mode="persist")],
    "agent policy stable (default)": lambda: [
        ContextPolicyMiddleware(_agent_policy()[0], handlers=_agent_policy()[1])],
}
OPENAI = {
    "none": lambda: None,
    "ours plain": lambda: context_policy_input_filter(TRIM_POLICY, cut="plain"),
    "ours stable (default)": lambda: context_policy_input_filter(TRIM_POLICY),
    "agent policy stable (default)": lambda: context_policy_input_filter(
        _agent_policy()[0], handlers=_agent_policy()[1]),
}


@pytest.mark.parametrize("framework", ["langchain", "openai-agents"])
def test_the_60_turn_agent_priced(benchmark, framework):
    variants, run = (LANGCHAIN, langchain_run) if framework == "langchain" else (
        OPENAI, openai_agents_run)
    rows = {name: run(make()).priced(name) for name, make in variants.items()}
    none = rows["none"]
    ratios = {}
    for name, row in rows.items():
        ratios[f"{name}: cost / none"] = row.cost / none.cost
        ratios[f"{name}: cache hit"] = row.cache_hit
        ratios[f"{name}: peak chars"] = row.peak_chars
    stable = rows["ours stable (default)"]
    assert stable.cache_hit >= 0.9 and stable.cost < rows["ours plain"].cost
    benchmark.group = f"the 60-turn agent with a prompt cache ({framework})"
    benchmark.extra_info.update(kind=framework, ratios=ratios)
    default = variants["ours stable (default)"]
    benchmark.pedantic(lambda: run(default()), rounds=1, iterations=1)
