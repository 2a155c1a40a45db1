"""``mode: audit``: every change classified, allowed only inside the mutable range."""

from __future__ import annotations

import pytest

from contextpolicy import (
    ContextAuditError,
    ContextPlan,
    ContextPlanError,
    ContextPolicyError,
    Fragment,
    process_context,
)

# The whole pipeline runs on the compiled kernel and on the twin: ids [c] and [py].
pytestmark = pytest.mark.usefixtures("pipeline_kernel")

HISTORY = [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello"}]
ORIGINAL = [
    Fragment(id="system", kind="system", text="Be brief."),
    Fragment(id="memory", kind="memory", text="likes tea"),
    Fragment(id="history", kind="history", messages=HISTORY),
    Fragment(id="notes", kind="note", text="n1"),
    Fragment(id="question", kind="question", text="why?"),
]
AUDIT = {"mode": "audit", "mutableFragmentIds": ["history"]}


def audit(fragments, policy=AUDIT):
    return process_context(ContextPlan(fragments=fragments, original=ORIGINAL), policy)


def changes(report):
    return [(c.fragment_id, c.change, c.allowed, c.reason) for c in report.audit.changes]


def test_no_change_passes():
    result = audit(list(ORIGINAL))
    assert result.report.audit.passed and result.report.audit.changes == []
    assert result.report.audit.mutable_fragment_ids == ["history"]


def test_allowed_modification_of_a_mutable_fragment():
    trimmed = ORIGINAL[2].with_content(HISTORY[1:])
    result = audit([*ORIGINAL[:2], trimmed, *ORIGINAL[3:]])
    assert changes(result.report) == [("history", "modified", True, "mutable")]
    change = result.report.audit.changes[0]
    assert change.fields == ["content"]
    assert (change.chars_before, change.chars_after) == (7, 5)
    assert result.input[2:3] == HISTORY[1:]


def test_listing_an_id_changes_nothing_by_itself():
    result = audit(list(ORIGINAL), {"mode": "audit", "mutableFragmentIds": ["history", "notes"]})
    assert result.report.audit.changes == []
    assert result.plan.fragments == ORIGINAL


def test_disallowed_modification_raises_with_the_full_report():
    edited = ORIGINAL[3].with_content("n2")
    with pytest.raises(ContextAuditError) as info:
        audit([*ORIGINAL[:3], edited, ORIGINAL[4]])
    report = info.value.report
    assert changes(report) == [("notes", "modified", False, "not-mutable")]
    assert report.audit.violations == 1 and not report.audit.passed
    assert "notes: modified (not-mutable)" in str(info.value)


def test_protected_fragment_change_is_never_allowed():
    rewritten = Fragment(id="question", kind="question", text="why not?")
    with pytest.raises(ContextAuditError) as info:
        audit([*ORIGINAL[:4], rewritten])
    assert changes(info.value.report) == [("question", "modified", False, "protected")]


def test_role_change_is_a_modification():
    with pytest.raises(ContextAuditError) as info:
        audit([ORIGINAL[0], ORIGINAL[1].model_copy(update={"role": "assistant"}), *ORIGINAL[2:]])
    assert info.value.report.audit.changes[0].fields == ["role"]


def test_kind_change_is_never_allowed_even_when_mutable():
    policy = {"mode": "audit", "mutableFragmentIds": ["notes"]}
    renamed = Fragment(id="notes", kind="document", text="n1")
    with pytest.raises(ContextAuditError) as info:
        audit([*ORIGINAL[:3], renamed, ORIGINAL[4]], policy)
    assert changes(info.value.report) == [("notes", "modified", False, "kind-changed")]
    assert info.value.report.audit.changes[0].fields == ["kind"]


def test_protecting_flag_change_is_a_modification():
    policy = {"mode": "audit", "mutableFragmentIds": ["notes"]}
    pinned = Fragment(id="notes", kind="note", text="n1", protected=True)
    with pytest.raises(ContextAuditError) as info:
        audit([*ORIGINAL[:3], pinned, ORIGINAL[4]], policy)
    assert changes(info.value.report) == [("notes", "modified", False, "protected")]


def test_metadata_is_never_interpreted():
    tagged = ORIGINAL[3].model_copy(update={"metadata": {"seen": True}})
    assert audit([*ORIGINAL[:3], tagged, ORIGINAL[4]]).report.audit.changes == []


def test_removed_and_added():
    policy = {"mode": "audit", "mutableFragmentIds": ["history"]}
    extra = Fragment(id="scratch", kind="note", text="tmp")
    with pytest.raises(ContextAuditError) as info:
        audit([ORIGINAL[0], ORIGINAL[1], ORIGINAL[3], extra, ORIGINAL[4]], policy)
    assert changes(info.value.report) == [
        ("history", "removed", True, "mutable"),
        ("scratch", "added", False, "not-mutable"),
    ]


def test_removing_a_mutable_fragment_alone_is_allowed():
    result = audit([ORIGINAL[0], ORIGINAL[1], ORIGINAL[3], ORIGINAL[4]])
    assert changes(result.report) == [("history", "removed", True, "mutable")]


def test_moved_immutable_fragments():
    reordered = [ORIGINAL[0], ORIGINAL[3], ORIGINAL[2], ORIGINAL[1], ORIGINAL[4]]
    with pytest.raises(ContextAuditError) as info:
        audit(reordered)
    # memory and notes swapped: one of them is out of the others' relative order.
    moved = [c for c in info.value.report.audit.changes if c.change == "moved"]
    assert len(moved) == 1 and moved[0].fragment_id in ("memory", "notes")
    assert not moved[0].allowed


def test_moving_a_mutable_fragment_is_allowed():
    reordered = [ORIGINAL[0], ORIGINAL[2], ORIGINAL[1], ORIGINAL[3], ORIGINAL[4]]
    assert audit(reordered).report.audit.changes == []


def test_moved_protected_fragment():
    reordered = [ORIGINAL[4], *ORIGINAL[1:4], ORIGINAL[0]]
    with pytest.raises(ContextAuditError) as info:
        audit(reordered)
    moved = [c for c in info.value.report.audit.changes if c.change == "moved"]
    assert sorted((c.fragment_id, c.reason) for c in moved) == [
        ("question", "protected"), ("system", "protected"),
    ]


def test_audit_needs_the_original():
    with pytest.raises(ContextPlanError) as info:
        process_context(ContextPlan(fragments=ORIGINAL), AUDIT)
    assert info.value.codes == ["missing-original"]


def test_mutable_ids_are_checked_against_the_plan():
    with pytest.raises(ContextPolicyError) as info:
        audit(list(ORIGINAL), {"mode": "audit", "mutableFragmentIds": ["system", "ghost"]})
    assert info.value.codes == ["protected-fragment", "unknown-fragment"]


def test_audit_report_json():
    trimmed = ORIGINAL[2].with_content(HISTORY[1:])
    data = audit([*ORIGINAL[:2], trimmed, *ORIGINAL[3:]]).report.model_dump(
        by_alias=True, mode="json"
    )
    assert data["audit"]["changes"][0] == {
        "fragmentId": "history", "change": "modified", "allowed": True, "reason": "mutable",
        "kind": "history", "fields": ["content"], "charsBefore": 7, "charsAfter": 5,
    }
    assert data["audit"]["passed"] is True and data["audit"]["violations"] == 0
