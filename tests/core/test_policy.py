"""Policy models and ``validate_context_policy``: the seed's examples and every way to get one
wrong, each with its path and stable code."""

from __future__ import annotations

import copy

import pytest
from pydantic import ValidationError

from contextpolicy import (
    AuditPolicy,
    CompressStep,
    ContextPolicyError,
    Fragment,
    Grouping,
    ReducePolicy,
    Selection,
    TrimStep,
    ValidatePolicy,
    validate_context_policy,
)

SEED_REDUCE = {
    "mode": "reduce", "triggerChars": 1800, "targetInputChars": 1500,
    "selection": {"mode": "sequence"},
    "steps": [{
        "id": "recent-history", "kind": "trim", "fragmentId": "history", "field": "messages",
        "grouping": {"kind": "user-turn"}, "keepGroups": 2, "targetChars": 1000,
    }],
}
FRAGMENTS = [
    Fragment(id="system", kind="system", text="Be brief."),
    Fragment(id="history", kind="history", messages=[{"role": "user", "content": "hi"}]),
    Fragment(id="notes", kind="note", text="n"),
    Fragment(id="pinned", kind="memory", text="m", protected=True),
    Fragment(id="question", kind="question", text="why?"),
]


# ---------------------------------------------------------------------------------------------
# The seed's three examples, with plain dicts and with the typed models


def test_seed_validate_only_dict():
    policy = {"mode": "validate"}
    typed = validate_context_policy(policy, [], [])
    assert policy == {"mode": "validate"}
    assert isinstance(typed, ValidatePolicy) and typed.mode == "validate"


def test_seed_validate_only_typed():
    typed = validate_context_policy(ValidatePolicy(), [], [])
    assert typed.mode == "validate"


def test_seed_reduce_dict():
    policy = copy.deepcopy(SEED_REDUCE)
    typed = validate_context_policy(policy, [], [])
    assert policy == SEED_REDUCE  # never changed
    assert isinstance(typed, ReducePolicy)
    step = typed.steps[0]
    assert isinstance(step, TrimStep)
    assert (step.id, step.fragment_id, step.keep_groups, step.target_chars) == (
        "recent-history", "history", 2, 1000
    )
    assert step.grouping.kind == "user-turn" and step.field == "messages"
    assert typed.to_json_dict() == SEED_REDUCE


def test_seed_reduce_typed():
    typed = ReducePolicy(
        trigger_chars=1800, target_input_chars=1500, selection=Selection(mode="sequence"),
        steps=[TrimStep(id="recent-history", fragment_id="history", field="messages",
                        grouping=Grouping(kind="user-turn"), keep_groups=2, target_chars=1000)],
    )
    assert validate_context_policy(typed, [], []) == typed
    assert typed.to_json_dict() == SEED_REDUCE


def test_seed_audit_dict_and_typed():
    policy = {"mode": "audit", "mutableFragmentIds": ["history"]}
    typed = validate_context_policy(policy, [], [])
    assert isinstance(typed, AuditPolicy) and typed.mutable_fragment_ids == ["history"]
    assert validate_context_policy(AuditPolicy(mutable_fragment_ids=["history"])) == typed


def test_reference_checks_pass_with_real_fragments():
    policy = {
        "mode": "reduce", "triggerChars": 100,
        "steps": [
            {"id": "t", "kind": "trim", "fragmentId": "history", "keepGroups": 1, "targetChars": 10},
            {"id": "c", "kind": "compress", "fragmentId": "notes", "handlerId": "sum", "targetChars": 0},
        ],
    }
    typed = validate_context_policy(policy, FRAGMENTS, {"sum": lambda r: r})
    assert isinstance(typed.steps[1], CompressStep) and typed.steps[1].handler_id == "sum"
    # fragment dicts and ids work too
    validate_context_policy(policy, [f.model_dump() for f in FRAGMENTS], ["sum"])
    validate_context_policy(policy, ["history", "notes"], ["sum"])


def test_defaults_fill_in():
    typed = validate_context_policy({
        "mode": "reduce", "triggerTokens": 10,
        "steps": [{"id": "t", "kind": "trim", "fragmentId": "h", "keepGroups": 0, "targetChars": 0}],
    })
    assert typed.selection.mode == "sequence"
    assert typed.steps[0].grouping.kind == "user-turn"
    assert typed.watermark_tokens == 10 and typed.watermark_chars is None


# ---------------------------------------------------------------------------------------------
# Bad policies: error type, path and code


def trim(**over):
    step = {"id": "t", "kind": "trim", "fragmentId": "history", "keepGroups": 1, "targetChars": 10}
    step.update(over)
    return {k: v for k, v in step.items() if v is not DROP}


def reduce_(*steps, **over):
    policy = {"mode": "reduce", "triggerChars": 100, "steps": list(steps) or [trim()]}
    policy.update(over)
    return {k: v for k, v in policy.items() if v is not DROP}


DROP = object()

BAD_POLICIES = [
    # (policy, [(path, code), ...])
    ("not a dict", [("", "expected-object")]),
    ({}, [("mode", "missing")]),
    ({"mode": "shrink"}, [("mode", "unknown-mode")]),
    ({"mode": 3}, [("mode", "unknown-mode")]),
    ({"mode": "validate", "extra": 1}, [("extra", "unknown-key")]),
    (reduce_(triggerChar=1800), [("triggerChar", "unknown-key")]),
    (reduce_(triggerChars=True), [("triggerChars", "expected-integer")]),
    (reduce_(triggerChars=1800.0), [("triggerChars", "expected-integer")]),
    (reduce_(triggerChars="1800"), [("triggerChars", "expected-integer")]),
    (reduce_(triggerChars=0), [("triggerChars", "must-be-positive")]),
    (reduce_(triggerChars=-5), [("triggerChars", "must-be-positive")]),
    (reduce_(triggerChars=DROP), [("", "missing-trigger")]),
    (reduce_(triggerChars=None), [("", "missing-trigger")]),
    (reduce_(targetInputChars=200), [("targetInputChars", "target-above-trigger")]),
    (reduce_(targetInputTokens=50), [("targetInputTokens", "target-without-trigger")]),
    (reduce_(triggerChars=DROP, triggerTokens=100, targetInputChars=50),
     [("targetInputChars", "target-without-trigger")]),
    (reduce_(triggerTokens=100, targetInputTokens=101),
     [("targetInputTokens", "target-above-trigger")]),
    (reduce_(targetInputChars=0), [("targetInputChars", "must-be-positive")]),
    (reduce_(selection={"mode": "priority"}), [("selection.mode", "invalid-value")]),
    (reduce_(selection={"mode": "sequence", "order": 1}), [("selection.order", "unknown-key")]),
    (reduce_(steps=[]), [("steps", "empty")]),
    (reduce_(steps="trim"), [("steps", "expected-list")]),
    (reduce_(trim(), trim()), [("steps[1].id", "duplicate-step-id")]),
    (reduce_(trim(kind="squash")), [("steps[0].kind", "unknown-step-kind")]),
    (reduce_(trim(kind=DROP)), [("steps[0].kind", "missing")]),
    (reduce_(trim(keepGroups=-1)), [("steps[0].keepGroups", "must-be-non-negative")]),
    (reduce_(trim(keepGroups=1.5)), [("steps[0].keepGroups", "expected-integer")]),
    (reduce_(trim(keepGroups=DROP)), [("steps[0].keepGroups", "missing")]),
    (reduce_(trim(targetChars=False)), [("steps[0].targetChars", "expected-integer")]),
    (reduce_(trim(targetChars=DROP)), [("steps[0].targetChars", "missing")]),
    (reduce_(trim(fragmentId="")), [("steps[0].fragmentId", "empty")]),
    (reduce_(trim(fragmentId=7)), [("steps[0].fragmentId", "expected-string")]),
    (reduce_(trim(id=DROP)), [("steps[0].id", "missing")]),
    (reduce_(trim(field="text")), [("steps[0].field", "invalid-value")]),
    (reduce_(trim(grouping={"kind": "paragraph"})), [("steps[0].grouping.kind", "invalid-value")]),
    (reduce_(trim(grouping={"kind": "user-turn", "size": 2})),
     [("steps[0].grouping.size", "unknown-key")]),
    (reduce_(trim(keep_group=2)), [("steps[0].keep_group", "unknown-key")]),
    (reduce_({"id": "c", "kind": "compress", "fragmentId": "history", "targetChars": 5}),
     [("steps[0].handlerId", "missing")]),
    (reduce_({"id": "c", "kind": "compress", "fragmentId": "history", "targetChars": 5,
              "handlerId": "h", "keepGroups": "2"}), [("steps[0].keepGroups", "expected-integer")]),
    ({"mode": "audit"}, [("mutableFragmentIds", "missing")]),
    ({"mode": "audit", "mutableFragmentIds": "history"}, [("mutableFragmentIds", "expected-list")]),
    ({"mode": "audit", "mutableFragmentIds": ["history", "history"]},
     [("mutableFragmentIds[1]", "duplicate-id")]),
    ({"mode": "audit", "mutableFragmentIds": [""]}, [("mutableFragmentIds[0]", "empty")]),
]


@pytest.mark.parametrize(("policy", "expected"), BAD_POLICIES)
def test_bad_policy(policy, expected):
    before = copy.deepcopy(policy)
    with pytest.raises(ContextPolicyError) as info:
        validate_context_policy(policy)
    err = info.value
    assert isinstance(err, ValueError)
    assert [(i.path, i.code) for i in err.issues] == expected
    assert policy == before
    assert all(i.message for i in err.issues)


# With fragments and handlers given, references are checked too.
BAD_REFERENCES = [
    (reduce_(trim(fragmentId="histroy")), [("steps[0].fragmentId", "unknown-fragment")]),
    (reduce_(trim(fragmentId="system")), [("steps[0].fragmentId", "protected-fragment")]),
    (reduce_(trim(fragmentId="question")), [("steps[0].fragmentId", "protected-fragment")]),
    (reduce_(trim(fragmentId="pinned")), [("steps[0].fragmentId", "protected-fragment")]),
    (reduce_(trim(fragmentId="notes")), [("steps[0].fragmentId", "not-messages")]),
    (reduce_({"id": "c", "kind": "compress", "fragmentId": "history", "targetChars": 5,
              "handlerId": "nope"}), [("steps[0].handlerId", "unknown-handler")]),
    ({"mode": "audit", "mutableFragmentIds": ["history", "system", "ghost"]},
     [("mutableFragmentIds[1]", "protected-fragment"),
      ("mutableFragmentIds[2]", "unknown-fragment")]),
]


@pytest.mark.parametrize(("policy", "expected"), BAD_REFERENCES)
def test_bad_references(policy, expected):
    with pytest.raises(ContextPolicyError) as info:
        validate_context_policy(policy, FRAGMENTS, {"sum": print})
    assert [(i.path, i.code) for i in info.value.issues] == expected
    # Without fragments and handlers the same policy passes: the checks wait for processing.
    validate_context_policy(policy)


def test_all_problems_at_once():
    policy = reduce_(
        trim(keepGroups=True, targetChars=-1), trim(fragmentId="system"),
        triggerChar=5, targetInputChars=1.5,
    )
    with pytest.raises(ContextPolicyError) as info:
        validate_context_policy(policy, FRAGMENTS)
    got = {(i.path, i.code) for i in info.value.issues}
    assert got == {
        ("steps[0].keepGroups", "expected-integer"),
        ("steps[0].targetChars", "must-be-non-negative"),
        ("steps[1].id", "duplicate-step-id"),
        ("steps[1].fragmentId", "protected-fragment"),
        ("triggerChar", "unknown-key"),
        ("targetInputChars", "expected-integer"),
    }
    text = str(info.value)
    assert text.startswith("invalid context policy: 6 problems")
    assert "steps[0].keepGroups: expected an integer, got bool True [expected-integer]" in text


def test_typo_suggests_the_key():
    with pytest.raises(ContextPolicyError) as info:
        validate_context_policy(reduce_(trim(keepGroup=2, keepGroups=DROP)))
    messages = {i.path: i.message for i in info.value.issues}
    assert "did you mean 'keepGroups'?" in messages["steps[0].keepGroup"]


def test_typed_models_are_strict_and_closed():
    with pytest.raises(ValueError):
        TrimStep(id="t", fragment_id="h", target_chars=1.0, keep_groups=1)
    with pytest.raises(ValueError):
        ReducePolicy(trigger_chars=10, steps=[], bogus=1)


def _rule_codes(info: pytest.ExceptionInfo[ValidationError]) -> list[str]:
    return [code for e in info.value.errors() for code in e["ctx"]["codes"]]


TRIM = TrimStep(id="t", fragment_id="h", target_chars=1, keep_groups=1)


@pytest.mark.parametrize(
    ("fields", "codes"),
    [
        ({"trigger_chars": 10, "target_input_chars": 20}, ["target-above-trigger"]),
        ({"trigger_tokens": 10, "target_input_tokens": 11}, ["target-above-trigger"]),
        ({"target_input_chars": 20}, ["missing-trigger", "target-without-trigger"]),
        ({"trigger_chars": 10, "target_input_tokens": 5}, ["target-without-trigger"]),
        ({"trigger_chars": 10, "steps": [TRIM, TRIM]}, ["duplicate-step-id"]),
    ],
)
def test_a_typed_reduce_policy_cannot_be_built_invalid(fields, codes):
    fields = {"steps": [TRIM], **fields}
    with pytest.raises(ValidationError) as info:
        ReducePolicy(**fields)
    assert _rule_codes(info) == codes
    with pytest.raises(ValidationError) as info:
        ReducePolicy.model_validate(fields)
    assert _rule_codes(info) == codes


def test_a_typed_policy_cannot_be_copied_into_an_invalid_one():
    typed = ReducePolicy(trigger_chars=100, target_input_chars=50, steps=[TRIM])
    with pytest.raises(ValidationError) as info:
        typed.model_copy(update={"target_input_chars": 200})
    assert _rule_codes(info) == ["target-above-trigger"]
    assert typed.model_copy(update={"target_input_chars": 80}).target_input_chars == 80
    assert typed.model_copy() == typed
    with pytest.raises(ValidationError) as info:
        AuditPolicy(mutable_fragment_ids=["h", "n", "h"])
    assert _rule_codes(info) == ["duplicate-id"]


def test_the_document_pass_reports_the_same_rules_with_paths():
    # The same rule functions, read from the document, report each problem with its path, once.
    with pytest.raises(ContextPolicyError) as info:
        validate_context_policy({
            "mode": "reduce", "triggerChars": 10, "targetInputChars": 20,
            "steps": [trim(), trim()],
        })
    assert [(i.path, i.code) for i in info.value.issues] == [
        ("targetInputChars", "target-above-trigger"), ("steps[1].id", "duplicate-step-id"),
    ]


def test_typed_policies_compare_by_their_fields():
    a = validate_context_policy(reduce_(trim()))
    b = validate_context_policy(reduce_(trim()))
    assert a == b and a is not b
    assert validate_context_policy(a) is a


def test_bad_arguments():
    with pytest.raises(ContextPolicyError) as info:
        validate_context_policy({"mode": "validate"}, fragments=[3])
    assert info.value.codes == ["invalid-fragments-argument"]
    with pytest.raises(ContextPolicyError):
        validate_context_policy({"mode": "validate"}, handlers="sum")
