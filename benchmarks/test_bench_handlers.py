"""``clear_tool_results`` on the agent-trace corpus, per message, against the trim alone.

Every conversation of the corpus (a system prompt, 20-400 messages of which 30-60% are tool
calls and results, tool outputs up to 50,000 chars, a third in Anthropic blocks) goes through
``process_context`` with a policy that always triggers:

- ``process-<kernel>``: the trim alone (the seed's step: ``keepGroups`` 2, ``targetChars``
  1000), what a policy without a handler costs;
- ``clear-<kernel>``: one compress step, ``clear-tool-results`` with its defaults;
- ``clear-then-trim-<kernel>``: the compress step, then the trim;
- ``clear-handler-<kernel>``: the handler alone, called on each history (its own share).

``extra_info["ratios"]`` holds each one's best pass over the corpus against the trim alone's,
the two timed one right after the other; ``benchmarks/ratios.py`` prints them with ns/message.
"""

from __future__ import annotations

import json
import time

import pytest

from contextpolicy import CompressRequest, ContextPlan, prepare_policy, process_context
from contextpolicy.handlers import clear_tool_results, defaults
from contextpolicy.synthetic import KEEP_GROUPS, TARGET_CHARS, agent_trace_corpus

from .conftest import cached, measuring

TRIM = {"id": "recent-history", "kind": "trim", "fragmentId": "history",
        "keepGroups": KEEP_GROUPS, "targetChars": TARGET_CHARS}
CLEAR = {"id": "old-outputs", "kind": "compress", "fragmentId": "history",
         "handlerId": "clear-tool-results", "targetChars": TARGET_CHARS}
POLICIES = {
    "process": {"mode": "reduce", "triggerChars": 1, "steps": [TRIM]},
    "clear": {"mode": "reduce", "triggerChars": 1, "steps": [CLEAR]},
    "clear-then-trim": {"mode": "reduce", "triggerChars": 1, "steps": [CLEAR, TRIM]},
}
PASSES = 3  # best of, for the in-run ratio


@pytest.fixture(scope="session")
def traces(request):
    """The agent-trace corpus (JSON round-tripped, as an application holds it) and its plans."""
    n = 60 if measuring(request.config) else 3

    def make():
        corpus = json.loads(json.dumps(agent_trace_corpus(n, seed=22)))
        plans = [ContextPlan.from_messages(messages) for messages in corpus]
        return corpus, plans

    return cached(("handler-traces", n), make)


def _best(fn, items) -> float:
    best = float("inf")
    for _ in range(PASSES):
        start = time.perf_counter()
        for item in items:
            fn(item)
        best = min(best, time.perf_counter() - start)
    return best


def _requests(plans):
    out = []
    for plan in plans:
        history = plan.fragment("history")
        out.append(CompressRequest(fragment=history, content=history.messages, kept=None,
                                   target_chars=TARGET_CHARS, step_id="old-outputs",
                                   counter=None, cancel=None))
    return out


@pytest.mark.parametrize("kind", ["process", "clear", "clear-then-trim", "clear-handler"])
def test_clear_tool_results_against_the_trim(benchmark, pipeline_kernel, traces, kind):
    corpus, plans = traces
    impl = pipeline_kernel.IMPLEMENTATION
    trim = prepare_policy(POLICIES["process"])

    def trim_one(plan):
        return process_context(plan, trim)

    if kind == "clear-handler":
        handler = clear_tool_results()
        fn, items = handler, _requests(plans)
        out = [handler(r) for r in items]
        assert sum(len(o) for o in out) == sum(len(r.content) for r in items)
    else:
        prepared = prepare_policy(POLICIES[kind], handlers=defaults() if kind != "process"
                                  else None)

        def fn(plan):
            return process_context(plan, prepared)

        items = plans
        reports = [fn(plan).report for plan in plans]
        assert all(r.triggered and r.after.chars <= r.before.chars for r in reports)
        if kind != "process":
            # A trace whose results are all among the newest three has nothing to clear.
            steps = [r.steps[0] for r in reports]
            assert {s.status for s in steps} <= {"applied", "failed"}
            assert all(s.reason == "not-smaller" for s in steps if s.status == "failed")
            assert sum(s.handler_figures.results_cleared for s in steps
                       if s.status == "applied") > 0
    ratio = _best(fn, items) / _best(trim_one, plans)
    benchmark.group = f"handlers on agent traces ({impl})"
    benchmark.extra_info.update(
        kind=f"{kind}-{impl}", messages=sum(map(len, corpus)), conversations=len(corpus),
        ratios={} if kind == "process" else {f"{kind} / trim alone (in run)": ratio})

    def one_pass():
        for item in items:
            fn(item)

    benchmark.pedantic(one_pass, rounds=7, iterations=1, warmup_rounds=1)
