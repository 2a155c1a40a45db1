"""Fragments and plans: shapes, protection, ``from_messages``, and every bad plan's path."""

from __future__ import annotations

import copy

import pytest

from contextpolicy import ContextPlan, ContextPlanError, Fragment, process_context
from contextpolicy.plan import as_plan

HISTORY = [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello"}]


def frag(**over):
    f = {"id": "h", "kind": "history", "messages": HISTORY}
    f.update(over)
    return {k: v for k, v in f.items() if v is not DROP}


DROP = object()

BAD_PLANS = [
    ({"fragments": [frag(kind="chat")]}, [("fragments[h].kind", "unknown-kind")]),
    ({"fragments": [frag(kind=DROP)]}, [("fragments[h].kind", "missing")]),
    ({"fragments": [frag(id="")]}, [("fragments[0].id", "empty")]),
    ({"fragments": [frag(id="   ")]}, [("fragments[0].id", "empty")]),
    ({"fragments": [frag(id=5)]}, [("fragments[0].id", "expected-string")]),
    ({"fragments": [frag(id=DROP)]}, [("fragments[0].id", "missing")]),
    ({"fragments": [frag(text="also text")]}, [("fragments[h]", "content-shape")]),
    ({"fragments": [frag(messages=DROP)]}, [("fragments[h]", "content-shape")]),
    ({"fragments": [frag(messages="hi")]}, [("fragments[h].messages", "invalid-messages")]),
    ({"fragments": [frag(messages={"role": "user"})]}, [("fragments[h].messages", "invalid-messages")]),
    ({"fragments": [frag(role="user")]}, [("fragments[h]", "role-on-messages")]),
    ({"fragments": [frag(messages=DROP, text="t", role="tool")]}, [("fragments[h].role", "invalid-value")]),
    ({"fragments": [frag(messages=DROP, text=3)]}, [("fragments[h].text", "expected-string")]),
    ({"fragments": [frag(kind="system", protected=False)]}, [("fragments[h]", "protected-kind")]),
    ({"fragments": [frag(protected="yes")]}, [("fragments[h].protected", "expected-boolean")]),
    ({"fragments": [frag(metadata=[1])]}, [("fragments[h].metadata", "expected-object")]),
    ({"fragments": [frag(tokens=5)]}, [("fragments[h].tokens", "unknown-key")]),
    ({"fragments": [frag(), frag()]}, [("fragments", "duplicate-fragment-id")]),
    ({"fragments": "h"}, [("fragments", "expected-list")]),
    ({"fragments": [3]}, [("fragments[0]", "expected-object")]),
    ({}, [("fragments", "missing")]),
    ({"fragments": [], "originals": []}, [("originals", "unknown-key")]),
    ({"fragments": [], "original": [frag(kind="x")]}, [("original[h].kind", "unknown-kind")]),
]


@pytest.mark.parametrize(("plan", "expected"), BAD_PLANS)
def test_bad_plan(plan, expected):
    before = copy.deepcopy(plan)
    with pytest.raises(ContextPlanError) as info:
        as_plan(plan)
    assert [(i.path, i.code) for i in info.value.issues] == expected
    assert plan == before


BAD_MESSAGES = [
    ([{"role": "user", "content": "a"}, 42], "fragments[h].messages[1]", "invalid-message"),
    ([{"content": "a"}], "fragments[h].messages[0].role", "invalid-role"),
    ([{"role": "user", "content": {"text": "a"}}], "fragments[h].messages[0].content", "invalid-content"),
    ([{"role": "assistant", "tool_calls": [{"function": 1}]}],
     "fragments[h].messages[0].tool_calls[0].function", "invalid-tool-calls"),
]


@pytest.mark.parametrize(("messages", "path", "code"), BAD_MESSAGES)
def test_bad_messages_are_plan_errors_when_processed(messages, path, code):
    plan = {"fragments": [frag(messages=messages)]}
    with pytest.raises(ContextPlanError) as info:
        process_context(plan, {"mode": "validate"})
    assert [(i.path, i.code) for i in info.value.issues] == [(path, code)]


def test_plan_keeps_the_callers_list_without_copying():
    messages = list(HISTORY)
    plan = as_plan({"fragments": [frag(messages=messages)]})
    assert plan.fragments[0].messages is messages
    assert as_plan(plan) is plan


def test_fragment_defaults_and_protection():
    assert Fragment(id="s", kind="system", text="x").assembled_role == "system"
    assert Fragment(id="a", kind="authorization", text="x").assembled_role == "system"
    assert Fragment(id="e", kind="evidence", text="x").assembled_role == "user"
    assert Fragment(id="n", kind="note", text="x", role="assistant").assembled_role == "assistant"
    for kind in ("system", "question", "authorization", "evidence"):
        assert Fragment(id="p", kind=kind, text="x").is_protected
    assert not Fragment(id="n", kind="note", text="x").is_protected
    assert Fragment(id="n", kind="memory", text="x", protected=True).is_protected
    assert Fragment(id="s", kind="system", text="x", protected=True).is_protected


def test_fragments_are_frozen():
    f = Fragment(id="n", kind="note", text="x")
    with pytest.raises(ValueError):
        f.text = "changed"


# ---------------------------------------------------------------------------------------------
# from_messages


def ids_and_sizes(plan):
    return [(f.id, f.kind, len(f.messages)) for f in plan.fragments]


def test_from_messages_full_transcript():
    msgs = [
        {"role": "system", "content": "s"},
        {"role": "developer", "content": "d"},
        {"role": "user", "content": "a"},
        {"role": "assistant", "content": "b"},
        {"role": "user", "content": "question?"},
    ]
    plan = ContextPlan.from_messages(msgs)
    assert ids_and_sizes(plan) == [("system", "system", 2), ("history", "history", 2),
                                   ("question", "question", 1)]
    assert plan.fragments[2].messages[0] is msgs[4]  # the same dicts, not copies


@pytest.mark.parametrize(
    ("msgs", "expected"),
    [
        ([], []),
        ([{"role": "system", "content": "s"}], [("system", "system", 1)]),
        ([{"role": "user", "content": "q"}], [("question", "question", 1)]),
        ([{"role": "system", "content": "s"}, {"role": "user", "content": "q"}],
         [("system", "system", 1), ("question", "question", 1)]),
        ([{"role": "user", "content": "a"}, {"role": "assistant", "content": "b"}],
         [("history", "history", 2)]),
        # A final tool-result carrier is not a question: it belongs to the history.
        ([{"role": "user", "content": "a"},
          {"role": "assistant", "content": [{"type": "tool_use", "id": "t", "name": "f", "input": {}}]},
          {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t", "content": "r"}]}],
         [("history", "history", 3)]),
        # A system message after the first turn stays in the history.
        ([{"role": "user", "content": "a"}, {"role": "system", "content": "late"},
          {"role": "user", "content": "q"}],
         [("history", "history", 2), ("question", "question", 1)]),
    ],
)
def test_from_messages_parts(msgs, expected):
    assert ids_and_sizes(ContextPlan.from_messages(msgs)) == expected


def test_from_messages_errors_name_the_index():
    with pytest.raises(ContextPlanError) as info:
        ContextPlan.from_messages([{"role": "system", "content": "s"}, "oops"])
    assert info.value.issues[0].path == "messages[1]"
    with pytest.raises(ContextPlanError) as info:
        ContextPlan.from_messages({"role": "user"})
    assert info.value.codes == ["invalid-messages"]
