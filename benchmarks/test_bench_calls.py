"""Microseconds per conversation: one call on each conversation of a corpus shaped like real
ones, against ``orjson.loads`` of its JSONL line and against LangChain doing the same trim.

Each benchmark times one pass over the corpus (its mean per conversation is the time over
``conversations``); ``extra_info["median_us"]`` is the median over conversations of each one's
best of ``REPEAT`` calls in a row (the objects hot, as when an agent has just built or loaded
its history); ``extra_info["ratios"]`` holds the median over conversations of each one's call
against ``orjson.loads`` of its own line, the two timed one right after the other.
``benchmarks/ratios.py`` prints them all.

- ``process-prepared``: ``process_context(plan, prepare_policy(SEED_POLICY))``;
- ``process-typed``: the policy typed by ``validate_context_policy``;
- ``process-dict``: the policy as a plain dict;
- ``validate``: ``{"mode": "validate"}``, prepared;
- ``from-messages``: ``ContextPlan.from_messages``;
- ``langchain``: ``convert_to_messages`` + ``trim_messages`` with a content + tool-arguments
  char counter (``synthetic.langchain_char_counter``), the same target as the seed policy.
"""

from __future__ import annotations

import statistics
import time

import orjson
import pytest

from contextpolicy import (
    ContextPlan,
    Fragment,
    prepare_policy,
    process_context,
    validate_context_policy,
)
from contextpolicy.synthetic import (
    SEED_POLICY,
    TARGET_CHARS,
    agent_trace_corpus,
    chat_corpus,
    langchain_char_counter,
)

from .conftest import cached, measuring

REPEAT = 5
VALIDATE = {"mode": "validate"}


def _plan(messages):
    # As the JSONL runner does: a transcript too short for a history gets an empty one, so
    # that the seed policy (which trims the history) applies to every conversation.
    plan = ContextPlan.from_messages(messages)
    if any(f.id == "history" for f in plan.fragments):
        return plan
    fragments = list(plan.fragments)
    at = 1 if fragments and fragments[0].id == "system" else 0
    fragments.insert(at, Fragment(id="history", kind="history", messages=[]))
    return ContextPlan(fragments=fragments)


@pytest.fixture(scope="session", params=["chats", "agent-traces"])
def conversations(request):
    """The corpus as JSONL lines, the messages parsed from them (a fresh parse per corpus, as
    an application holds them) and their plans."""
    name = request.param
    size = {"chats": 2000, "agent-traces": 60} if measuring(request.config) else {
        "chats": 40, "agent-traces": 3}

    def make():
        corpus = chat_corpus(size[name], seed=21) if name == "chats" else agent_trace_corpus(
            size[name], seed=22)
        lines = [orjson.dumps({"id": f"c{i}", "messages": m}) for i, m in enumerate(corpus)]
        messages = [orjson.loads(line)["messages"] for line in lines]
        return name, lines, messages, [_plan(m) for m in messages]

    return cached(("calls", name), make)


def median_us(fn, items):
    best = []
    for item in items:
        fastest = float("inf")
        for _ in range(REPEAT):
            start = time.perf_counter()
            fn(item)
            fastest = min(fastest, time.perf_counter() - start)
        best.append(fastest)
    return statistics.median(best) * 1e6


def median_vs_loads(fn, items, lines):
    """The median over conversations of each one's best call against the best
    ``orjson.loads`` of its own line, timed one right after the other (so that the machine's
    swings hit both alike)."""
    ratios = []
    for item, line in zip(items, lines, strict=True):
        ours = theirs = float("inf")
        for _ in range(REPEAT):
            start = time.perf_counter()
            orjson.loads(line)
            middle = time.perf_counter()
            fn(item)
            end = time.perf_counter()
            theirs, ours = min(theirs, middle - start), min(ours, end - middle)
        ratios.append(ours / theirs)
    return statistics.median(ratios)


def run(benchmark, conversations, kind, fn, items):
    name, lines, _messages, _plans = conversations

    def one_pass():
        for item in items:
            fn(item)

    benchmark.group = f"per conversation: {name}"
    benchmark.extra_info.update(kind=kind, conversations=len(lines),
                                bytes=sum(map(len, lines)), median_us=median_us(fn, items),
                                ratios={"median per conversation / orjson.loads of its line":
                                        median_vs_loads(fn, items, lines)})
    benchmark.pedantic(one_pass, rounds=7, iterations=1, warmup_rounds=1)


def test_orjson_loads(benchmark, conversations):
    run(benchmark, conversations, "orjson-loads", orjson.loads, conversations[1])


def test_from_messages(benchmark, conversations):
    run(benchmark, conversations, "from-messages", ContextPlan.from_messages, conversations[2])


@pytest.mark.parametrize("form", ["prepared", "typed", "dict"])
def test_process_context(benchmark, conversations, pipeline_kernel, form):
    policy = {"prepared": prepare_policy(SEED_POLICY), "typed": validate_context_policy(
        SEED_POLICY), "dict": SEED_POLICY}[form]
    plans = conversations[3]
    result = process_context(plans[0], policy)
    assert result.report.mode == "reduce"
    run(benchmark, conversations, f"process-{form}-{pipeline_kernel.IMPLEMENTATION}",
        lambda plan: process_context(plan, policy), plans)


def test_validate_mode(benchmark, conversations, pipeline_kernel):
    policy = prepare_policy(VALIDATE)
    run(benchmark, conversations, f"validate-{pipeline_kernel.IMPLEMENTATION}",
        lambda plan: process_context(plan, policy), conversations[3])


def test_langchain_convert_and_trim(benchmark, conversations):
    from langchain_core.messages import convert_to_messages, trim_messages

    def trim(messages):
        return trim_messages(convert_to_messages(messages), max_tokens=TARGET_CHARS,
                             token_counter=langchain_char_counter, strategy="last",
                             start_on="human", include_system=True, allow_partial=False)

    # Conversations LangChain can convert (its converter takes chat and Anthropic blocks).
    run(benchmark, conversations, "langchain", trim, conversations[2])
