"""What an agent's input costs with a prompt cache: the 60-turn tool agent
(``tests/support/cache_agents``: each turn a question, a tool call, a ~3,000-char result and an
answer; 120 model calls) in LangChain's ``create_agent`` and the OpenAI Agents SDK, each call
priced as a cache bills it (the leading messages equal to the previous call's at 0.1x the
input price, the rest at 1.25x). Costs are ratios to no reduction in
``extra_info["ratios"]``, beside the adapter's time per call: the whole agent run with the
default middleware or filter against the same run without it; the time is one whole agent run
with the variant's middleware."""

from __future__ import annotations

import json

import pytest

pytestmark = pytest.mark.extras

from contextpolicy.adapters.langchain import ContextPolicyMiddleware  # noqa: E402
from contextpolicy.adapters.openai_agents import context_policy_input_filter  # noqa: E402
from tests.support.cache_agents import (  # noqa: E402
    TRIM_POLICY,
    langchain_run,
    langchain_summarization,
    langchain_trim_messages,
    openai_agents_run,
)
from tests.support.replays import shipped_agent_policy  # noqa: E402

from .conftest import best_of  # noqa: E402


def _best(fn, passes: int = 3) -> float:
    return best_of(fn, passes)


def _agent_policy() -> dict:
    policy, handlers = shipped_agent_policy()
    return {"policy": policy, "handlers": handlers}


LANGCHAIN = {
    "none": lambda: [],
    "trim_messages per call": lambda: [langchain_trim_messages()],
    "SummarizationMiddleware": lambda: [langchain_summarization()],
    "ours plain": lambda: [ContextPolicyMiddleware(TRIM_POLICY, cut="plain")],
    "ours stable (default)": lambda: [ContextPolicyMiddleware(TRIM_POLICY)],
    "ours persist": lambda: [ContextPolicyMiddleware(TRIM_POLICY, mode="persist")],
    "agent policy stable (default)": lambda: [
        ContextPolicyMiddleware(**_agent_policy())],
}
OPENAI = {
    "none": lambda: None,
    "ours plain": lambda: context_policy_input_filter(TRIM_POLICY, cut="plain"),
    "ours stable (default)": lambda: context_policy_input_filter(TRIM_POLICY),
    "agent policy stable (default)": lambda: context_policy_input_filter(
        **_agent_policy()),
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
    default = variants["ours stable (default)"]
    # The adapter's cost per call: the whole agent run with it against the framework's own.
    ratios["ours stable (default): time / none (in run)"] = (
        _best(lambda: run(default())) / _best(lambda: run(variants["none"]())))
    benchmark.group = f"the 60-turn agent with a prompt cache ({framework})"
    benchmark.extra_info.update(kind=framework, ratios=ratios)
    benchmark.pedantic(lambda: run(default()), rounds=1, iterations=1)


# ---------------------------------------------------------------------------------------------
# The agent-trace corpus, each trace a recorded session: every model call (the messages before
# each assistant message) as each variant would send it, LangChain's included.

def _langchain_calls(session, variant):
    """What LangChain's ``trim_messages`` (per call) or ``SummarizationMiddleware`` (whose
    summaries the agent's state keeps) sends at each call of a recorded session."""
    from langchain_core.messages import RemoveMessage, convert_to_messages, trim_messages

    from contextpolicy.adapters.langchain import to_chat_dicts
    from contextpolicy.replay import session_calls
    from tests.support.cache_agents import TARGET, TRIGGER, langchain_summarization

    messages = convert_to_messages(session)

    def chars(ms):
        return sum(len(str(m.content)) for m in ms)

    out = []
    if variant == "trim_messages per call":
        for p in session_calls(session):
            history = messages[:p]
            if chars(history) > TRIGGER:
                history = trim_messages(history, max_tokens=TARGET, token_counter=chars,
                                        strategy="last", start_on="human", include_system=True)
            out.append(to_chat_dicts(history))
        return out
    summarization = langchain_summarization()
    state, done = [], 0
    for p in session_calls(session):
        state = state + messages[done:p]
        done = p
        update = summarization.before_model({"messages": state}, None)
        if update:
            state = [m for m in update["messages"] if not isinstance(m, RemoveMessage)]
        out.append(to_chat_dicts(state))
    return out


def test_agent_traces_priced(benchmark):
    from contextpolicy.adapters._agent import prepare_agent_policy
    from contextpolicy.replay import price_calls, price_policies
    from contextpolicy.synthetic import agent_trace_corpus
    from tests.support.replays import persisted

    sessions = json.loads(json.dumps(agent_trace_corpus(20, seed=0)))
    prepared = prepare_agent_policy(TRIM_POLICY)
    policy, handlers = shipped_agent_policy()
    agent = prepare_agent_policy(policy, handlers)
    none, plain, stable, agent_plain, agent_stable = price_policies(
        sessions, [("trim", prepared), ("agent", agent)])
    costs = {"none": none, "ours plain": plain, "ours stable": stable,
             "agent policy plain": agent_plain, "agent policy stable": agent_stable}
    from contextpolicy.replay import session_calls

    persist = [price_calls([persisted(s[:p], prepared) for p in session_calls(s)])
               for s in sessions]
    for variant in ("trim_messages per call", "SummarizationMiddleware"):
        rows = [price_calls(_langchain_calls(s, variant)) for s in sessions]
        costs[variant] = rows
    costs["ours persist"] = persist
    total = {k: (sum(r.cost for r in v) if isinstance(v, list) else v.cost)
             for k, v in costs.items()}
    hit = {k: (sum(r.cached_chars for r in v) / sum(r.input_chars for r in v)
               if isinstance(v, list) else v.cache_hit) for k, v in costs.items()}
    ratios = {}
    for name in total:
        ratios[f"{name}: cost / none"] = total[name] / total["none"]
        ratios[f"{name}: cache hit"] = hit[name]
    assert total["ours stable"] == pytest.approx(total["ours persist"])
    benchmark.group = "agent traces with a prompt cache (20 sessions)"
    benchmark.extra_info.update(kind="agent-traces", ratios=ratios)
    benchmark.pedantic(lambda: price_policies(sessions[:2], [("trim", prepared)]), rounds=1,
                       iterations=1)
