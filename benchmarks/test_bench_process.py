"""``process_context`` with the seed's reduce policy, against the kernel's own
measure + group + cut on the same history (the whole pipeline should cost at most 1.5x)."""

from __future__ import annotations

from contextpolicy import ContextPlan, process_context
from contextpolicy.synthetic import measure_group_cut

from .conftest import SEED_POLICY, rounds


def test_process_context_seed_policy(benchmark, pipeline_kernel, transcript, size):
    kernel = pipeline_kernel
    plan = ContextPlan.from_messages(transcript)
    benchmark.group = f"pipeline {size // 1000}k"
    benchmark.extra_info.update(messages=size, kind=f"process-{kernel.IMPLEMENTATION}")
    result = benchmark.pedantic(process_context, (plan, SEED_POLICY), rounds=rounds(size),
                                iterations=1)
    assert result.report.steps[0].status == "applied"
    assert result.report.after.chars < result.report.before.chars


def test_kernel_on_the_same_history(benchmark, kernel, transcript, size):
    history = transcript[1:-1]
    benchmark.group = f"pipeline {size // 1000}k"
    benchmark.extra_info.update(messages=size, kind=f"kernel-{kernel.IMPLEMENTATION}")
    cut = benchmark.pedantic(measure_group_cut, (kernel, history), rounds=rounds(size),
                             iterations=1)
    assert cut > 0
