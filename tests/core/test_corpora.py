"""The benchmark corpora have the shapes they are named for, and the same seed gives the same
corpus; models built from measured records equal the models validation builds."""

from __future__ import annotations

import numpy as np
import orjson
import pytest

from contextpolicy import ContextPlan, Fragment, process_context
from contextpolicy._build import built
from contextpolicy.report import FragmentUsage, PlanWarning, StepReport, Usage, Watermark
from contextpolicy.synthetic import (
    CORPORA,
    agent_trace_corpus,
    chat_corpus,
    corpus,
    long_transcript_corpus,
    make_agent_trace,
    make_chat,
)


def test_chats_have_the_quantiles_of_real_chats():
    chats = chat_corpus(20_000, seed=1)
    sizes = [sum(1 for m in c if m["role"] != "system") for c in chats]
    p10, p50, p90, p99 = np.percentile(sizes, [10, 50, 90, 99]).round().tolist()
    assert (p10, p50, p90) == (2, 6, 14) and 25 <= p99 <= 28
    chars = [len(m["content"]) for c in chats for m in c if m["role"] != "system"]
    p10, p50, p90, p99 = np.percentile(chars, [10, 50, 90, 99]).tolist()
    assert 30 <= p10 <= 40 and 400 <= p50 <= 470 and 2050 <= p90 <= 2400 and 3800 <= p99 <= 4300
    systems = sum(c[0]["role"] == "system" for c in chats) / len(chats)
    assert 0.30 <= systems <= 0.37
    assert not any("tool_calls" in m or m["role"] == "tool" for c in chats for m in c)


def test_agent_traces_are_tool_heavy_long_and_unicode():
    traces = agent_trace_corpus(150, seed=2)
    lengths = [len(t) for t in traces]
    assert min(lengths) >= 20 and max(lengths) <= 402
    tool = [sum(1 for m in t if m["role"] == "tool" or m.get("tool_calls")
                or isinstance(m.get("content"), list)) / len(t) for t in traces]
    assert 0.3 <= float(np.median(tool)) <= 0.6
    outputs = [m["content"] if isinstance(m["content"], str) else m["content"][0]["content"]
               for t in traces for m in t if m["role"] == "tool" or (
                   isinstance(m.get("content"), list) and m["content"][0]["type"] == "tool_result")]
    assert max(map(len, outputs)) <= 50_000 and float(np.median(list(map(len, outputs)))) > 300
    anthropic = sum(any(isinstance(m.get("content"), list) for m in t) for t in traces)
    assert 0.2 <= anthropic / len(traces) <= 0.45
    assert all(any(ord(ch) > 127 for m in t for ch in orjson.dumps(m).decode()) for t in traces)


def test_long_transcripts_and_seeds():
    long = long_transcript_corpus(3, seed=4)
    assert all(202 <= len(t) <= 1002 for t in long)
    for name in CORPORA:
        assert corpus(name, 3, seed=5) == corpus(name, 3, seed=5)
        assert corpus(name, 3, seed=5) != corpus(name, 3, seed=6)


@pytest.mark.parametrize("cls, values", [
    (Fragment, {"id": "h", "kind": "history", "messages": [{"role": "user"}]}),
    (Fragment, {"id": "n", "kind": "note", "text": "t", "protected": True, "metadata": {"a": 1}}),
    (StepReport, {"id": "s", "kind": "trim", "fragment_id": "h", "status": "applied",
                  "reason": "trimmed", "target_chars": 5, "chars_before": 9, "chars_after": 4,
                  "groups_before": 3, "groups_after": 1, "messages_removed": 2}),
    (StepReport, {"id": "s", "kind": "trim", "fragment_id": "h", "status": "skipped",
                  "reason": "not-triggered", "target_chars": 5}),
    (PlanWarning, {"code": "orphan-tool-result", "fragment_id": "h", "index": 2,
                   "tool_call_id": None, "message": "m"}),
    (Usage, {"chars": 1, "tokens": None, "messages": 2, "fragments": 3, "opaque_parts": 0}),
    (Watermark, {"chars": 5, "tokens": None}),
    (FragmentUsage, {"id": "h", "kind": "history", "protected": False, "chars_before": 4,
                     "chars_after": None, "tokens_before": None, "tokens_after": None,
                     "messages_before": 1, "messages_after": None, "changed": True}),
])
def test_built_models_equal_validated_ones(cls, values):
    made, validated = built(cls, dict(values)), cls(**values)
    assert made == validated
    assert made.model_dump() == validated.model_dump()
    assert list(made.model_dump(by_alias=True)) == list(validated.model_dump(by_alias=True))
    assert made.model_dump(exclude_unset=True) == validated.model_dump(exclude_unset=True)
    assert repr(made) == repr(validated)
    assert made.model_copy(update={}) == validated


def test_split_fragments_equal_validated_ones():
    messages = chat_corpus(10, seed=3)[4]
    plan = ContextPlan.from_messages(messages)
    again = ContextPlan(fragments=[Fragment(id=f.id, kind=f.kind, messages=f.messages)
                                   for f in plan.fragments])
    assert plan == again and plan.model_dump(exclude_unset=True) == again.model_dump(
        exclude_unset=True)
    assert [f.id for f in plan.fragments] == ["system", "history", "question"][
        0 if messages[0]["role"] == "system" else 1:len(plan.fragments) + (
            0 if messages[0]["role"] == "system" else 1)]
    result = process_context(plan, {"mode": "validate"})
    assert ContextPlan.model_validate(result.plan.model_dump()) == result.plan


@pytest.mark.parametrize("seed", [0, 7])
def test_one_conversation_is_the_first_of_its_corpus(seed):
    assert make_chat(seed) == chat_corpus(1, seed)[0]
    assert make_agent_trace(seed) == agent_trace_corpus(1, seed)[0]
    assert make_chat(seed) != make_chat(seed + 1)
    trace = make_agent_trace(seed)
    assert trace[0]["role"] == "system" and trace[-1]["role"] == "user" and len(trace) >= 20
