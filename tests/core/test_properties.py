"""Properties of processing, for any generated plan and valid reduce policy:

- the caller's plan (fragments, message lists, message dicts) is unchanged;
- protected fragments are byte-identical in the result;
- every trimmed history is a suffix of whole groups of the original;
- a trim never orphans a tool result;
- every figure in the report equals a recount of ``result.input``.
"""

from __future__ import annotations

import copy
import json

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from contextpolicy import (
    ContextPlan,
    ContextPolicyError,
    check_input_budget,
    process_context,
    validate_context_policy,
)
from contextpolicy import _kernel as kernel
from tests.support.plans import plans

# The whole pipeline runs on the compiled kernel and on the twin: ids [c] and [py].
pytestmark = pytest.mark.usefixtures("pipeline_kernel")

SETTINGS = settings(
    max_examples=120, deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)


def word_counter(text: str) -> int:
    return len(text.split())


def shrink(request):
    """A well-behaved handler: keeps a prefix of the text, or one summary message."""
    if isinstance(request.content, str):
        return request.content[: max(0, len(request.content) // 2)]
    return [{"role": "assistant", "content": f"[{len(request.content)} messages summarised]"}]


@st.composite
def reduce_policies(draw, plan: ContextPlan, tokens: bool):
    reducible = [f for f in plan.fragments if not f.is_protected]
    size = {f.id: check_input_budget(
        [{"role": "user", "content": f.text}] if f.text is not None else f.messages
    ).chars for f in plan.fragments}
    total = sum(size.values())
    steps = []
    for i in range(draw(st.integers(1, 4))):
        f = draw(st.sampled_from(reducible))
        # Targets and triggers around the real sizes, so that most cases do reduce something.
        target = draw(st.integers(0, max(1, size[f.id] * 5 // 4)))
        if f.messages is not None and draw(st.booleans()):
            steps.append({
                "id": f"trim{i}", "kind": "trim", "fragmentId": f.id,
                "grouping": {"kind": draw(st.sampled_from(["user-turn", "message"]))},
                "keepGroups": draw(st.integers(0, 6)), "targetChars": target,
            })
        else:
            step = {"id": f"compress{i}", "kind": "compress", "fragmentId": f.id,
                    "handlerId": "shrink", "targetChars": target}
            if f.messages is not None and draw(st.booleans()):
                step["keepGroups"] = draw(st.integers(0, 4))
            steps.append(step)
    trigger = draw(st.integers(1, max(1, total * 6 // 5)))
    if tokens:
        trigger = max(1, trigger // 8)
    policy = {"mode": "reduce", "steps": steps}
    if tokens:
        policy["triggerTokens"] = trigger
        policy["targetInputTokens"] = draw(st.integers(1, trigger))
    else:
        policy["triggerChars"] = trigger
        if draw(st.booleans()):
            policy["targetInputChars"] = draw(st.integers(1, trigger))
    return policy


@st.composite
def cases(draw):
    plan = draw(plans())
    tokens = draw(st.booleans())
    policy = draw(reduce_policies(plan, tokens))
    return plan, policy, (word_counter if tokens else None)


def recount(messages, counter=None):
    return check_input_budget(messages, counter=counter)


@SETTINGS
@given(cases())
def test_processing_properties(case):
    plan, policy, counter = case
    validate_context_policy(policy, plan.fragments, {"shrink": shrink})
    snapshot = copy.deepcopy(plan)
    policy_snapshot = copy.deepcopy(policy)
    result = process_context(plan, policy, handlers={"shrink": shrink}, counter=counter)

    # The caller's data never changes.
    assert plan == snapshot
    assert policy == policy_snapshot
    for f, s in zip(plan.fragments, snapshot.fragments):
        assert f.messages == s.messages and f.text == s.text

    out = {f.id: f for f in result.plan.fragments}
    assert [f.id for f in result.plan.fragments] == [f.id for f in plan.fragments]
    for f in plan.fragments:
        if f.is_protected:
            assert out[f.id] is f  # byte-identical: the very same fragment

    # Trimmed histories are suffixes of whole groups and orphan no tool result.
    trimmed = {s["fragmentId"] for s in policy["steps"] if s["kind"] == "trim"}
    compressed = {s["fragmentId"] for s in policy["steps"] if s["kind"] == "compress"}
    for fid in trimmed - compressed:
        before, after = plan.fragment(fid).messages, out[fid].messages
        cut = len(before) - len(after)
        assert after == before[cut:]
        assert all(a is b for a, b in zip(after, before[cut:]))
        _, chars, flags, _ = kernel.measure_messages(before)
        starts = {int(o) for g in (0, 1) for o in kernel.group_offsets(flags, chars, g)[0]}
        assert cut in starts
        orphans_before = {
            (i - cut, cid) for i, code, cid in kernel.tool_pairing(before, flags)
            if code == "orphan-tool-result" and i >= cut
        }
        flags_after = kernel.measure_messages(after)[2]
        orphans_after = {
            (i, cid) for i, code, cid in kernel.tool_pairing(after, flags_after)
            if code == "orphan-tool-result"
        }
        assert orphans_after <= orphans_before

    # Every figure is a recount of what is sent.
    report = result.report
    usage = recount(result.input, counter)
    assert (report.after.chars, report.after.messages, report.after.opaque_parts) == (
        usage.chars, usage.messages, usage.opaque_parts
    )
    before_usage = recount(
        [m for f in plan.fragments
         for m in ([{"role": f.assembled_role, "content": f.text}] if f.text is not None else f.messages)],
        counter,
    )
    assert report.before.chars == before_usage.chars
    if counter is None:
        assert report.before.tokens is None and report.after.tokens is None
    else:
        assert report.before.tokens == before_usage.tokens
        assert report.after.tokens == usage.tokens
    for fu in report.fragments:
        f = out[fu.id]
        fragment_input = (
            [{"role": f.assembled_role, "content": f.text}] if f.text is not None else f.messages
        )
        assert fu.chars_after == recount(fragment_input).chars
        assert fu.messages_after == len(fragment_input)
    # Step figures chain: each applied step starts where the fragment stood.
    state = {f.id: fu.chars_before for f, fu in zip(plan.fragments, report.fragments)}
    for step in report.steps:
        if step.status in ("applied", "unchanged", "failed"):
            assert step.chars_before == state[step.fragment_id]
            state[step.fragment_id] = step.chars_after
    for fu in report.fragments:
        assert state[fu.id] == fu.chars_after
    # The report is JSON.
    assert json.loads(json.dumps(report.model_dump(by_alias=True, mode="json")))


@SETTINGS
@given(plans())
def test_validate_never_mutates_and_recounts(plan):
    snapshot = copy.deepcopy(plan)
    policy = {"mode": "validate"}
    result = process_context(plan, policy)
    assert plan == snapshot and policy == {"mode": "validate"}
    assert result.report.after == result.report.before
    assert result.report.after.chars == recount(result.input).chars
    assert all(a is b for a, b in zip(result.plan.fragments, plan.fragments))


@SETTINGS
@given(st.dictionaries(st.sampled_from(["mode", "triggerChars", "steps", "x"]),
                       st.none() | st.integers() | st.text() | st.lists(st.integers())))
def test_policy_validation_never_mutates(policy):
    snapshot = copy.deepcopy(policy)
    try:
        validate_context_policy(policy)
    except ContextPolicyError as exc:
        assert exc.issues
    assert policy == snapshot


def test_recount_uses_the_kernel_arrays():
    # Sanity for the recount helper itself: a known figure.
    msgs = [{"role": "user", "content": "héllo"}, {"role": "assistant", "content": "😀"}]
    assert recount(msgs).chars == 6
    assert int(np.sum(kernel.measure_messages(msgs)[1])) == 6
