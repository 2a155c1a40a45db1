"""Memory: measuring, grouping and cutting a history costs at most 24 bytes per message, and
no message dict is copied (tracemalloc sees numpy's buffers too)."""

from __future__ import annotations

import json
import tracemalloc

import pytest

from contextpolicy import ContextPlan, process_context
from contextpolicy.synthetic import SEED_POLICY, make_transcript

N = 50_000


@pytest.fixture(scope="module")
def transcript():
    # Loaded from JSON, as an application would hold it.
    return json.loads(json.dumps(make_transcript(N, seed=5)))


def extra_bytes_per_message(fn, n):
    tracemalloc.start()
    try:
        base = tracemalloc.get_traced_memory()[0]
        tracemalloc.reset_peak()
        kept = fn()
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    del kept
    return (peak - base) / n


def test_kernel_pass_memory(kernel, transcript):
    def run():
        roles, chars, flags, opaque = kernel.measure_messages(transcript)
        offsets, group_chars = kernel.group_offsets(flags, chars, kernel.GROUP_USER_TURN)
        return kernel.trim_cut(group_chars, 2, 1000), roles, chars, flags, opaque, offsets

    per_message = extra_bytes_per_message(run, len(transcript))
    assert 14 <= per_message <= 24  # 1 + 8 + 1 + 4 bytes of arrays, plus group offsets


def test_process_context_memory_and_no_copies(transcript):
    plan = ContextPlan.from_messages(transcript)
    holder = {}

    def run():
        holder["result"] = process_context(plan, SEED_POLICY)
        return holder["result"]

    per_message = extra_bytes_per_message(run, len(transcript))
    assert per_message <= 24
    kept = holder["result"].plan.fragment("history").messages
    history = plan.fragment("history").messages
    assert all(a is b for a, b in zip(kept, history[len(history) - len(kept):]))
