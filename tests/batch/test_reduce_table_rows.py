"""``batch.reduce_table``: each row means exactly what ``process_context`` of the row's
transcript means, on the compiled kernel and on the twin, whatever shape the table has (list and
string layouts, content parts, blocks, Responses items and thinking), with errors named by
column, row, message and field, and with handlers, counters and pieces per row."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from contextpolicy import ContextPlanError, ContextPolicyError
from contextpolicy.batch import reduce_table
from tests.support.tables import (
    MESSAGE,
    PART,
    POLICY,
    assert_rows_match,
    call,
    ids,
    reduce_policy,
    trim,
    words,
)

pytestmark = pytest.mark.usefixtures("pipeline_kernel")

SETTINGS = settings(max_examples=60, deadline=None,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])

PARTS_MESSAGE = pa.struct([("role", pa.string()), ("content", pa.list_(PART))])


# ---------------------------------------------------------------------------------------------
# Transcripts as Arrow holds them (nulls for missing keys)

chat_message = st.fixed_dictionaries({
    "role": st.sampled_from(["system", "developer", "user", "assistant", "tool", "function",
                             "critic"]),
    "content": words | st.none(),
    "tool_calls": st.none() | st.lists(call, max_size=3),
    "tool_call_id": ids,
})
transcripts = st.lists(st.lists(chat_message, max_size=14), min_size=1, max_size=12)
policies = st.one_of(
    st.just({"mode": "validate"}),
    st.builds(lambda t1, keep, g, trig, tgt, two: reduce_policy(
        trim(t1, keep, g), *([trim(t1 // 2, 0, "message", sid="t2")] if two else []),
        trigger=trig, target=None if tgt is None else min(tgt, trig)),
        st.integers(0, 600), st.integers(0, 3), st.sampled_from(["user-turn", "message"]),
        st.integers(1, 800), st.none() | st.integers(1, 800), st.booleans()),
)


@SETTINGS
@given(transcripts, policies, st.integers(1, 4))
def test_rows_mean_what_process_context_means(rows, policy, chunks):
    arr = pa.array(rows, type=pa.list_(MESSAGE))
    step = max(1, len(rows) // chunks)
    table = pa.table({"id": list(range(len(rows))),
                      "messages": pa.chunked_array([arr[i:i + step] for i in range(
                          0, len(rows), step)], type=arr.type)})
    out = reduce_table(table, policy)
    assert out.table.column("id").to_pylist() == list(range(len(rows)))
    assert out.table.schema == table.schema
    assert set(out.figures.column("path").to_pylist()) == {"columnar"}
    assert_rows_match(table, policy, out)


parts_message = st.fixed_dictionaries({
    "role": st.sampled_from(["system", "user", "assistant", "critic"]),
    "content": st.none() | st.lists(st.fixed_dictionaries({
        "type": st.sampled_from(["text", "input_text", "output_text", "image", "tool_result",
                                 "tool_use"]) | st.none(),
        "text": words | st.none(), "id": ids, "tool_use_id": ids,
    }), max_size=4),
})


@SETTINGS
@given(st.lists(st.lists(parts_message, max_size=10), min_size=1, max_size=8), policies)
def test_content_parts_columnar_or_object_per_row(rows, policy):
    table = pa.table({"messages": pa.array(rows, type=pa.list_(PARTS_MESSAGE))})
    try:
        out = reduce_table(table, policy)
    except ContextPlanError as exc:
        # A text part without text: the object path's error, named by row and message.
        bad = [(r, i) for r, row in enumerate(rows) for i, m in enumerate(row)
               for p in (m["content"] or ()) if p["type"] in ("text", "input_text",
                                                              "output_text") and p["text"] is None]
        assert bad and exc.issues[0].path.startswith(f"messages[{bad[0][0]}][{bad[0][1]}]")
        return
    # Text parts, opaque parts and tool blocks alike: all on the columnar path.
    assert set(out.figures.column("path").to_pylist()) == {"columnar"}
    assert_rows_match(table, policy, out)


# ---------------------------------------------------------------------------------------------
# Schemas as real tools write them


def chat_rows():
    return [
        [{"role": "system", "content": "be brief"},
         {"role": "user", "content": "a" * 300}, {"role": "assistant", "content": "b" * 300},
         {"role": "user", "content": "c" * 300},
         {"role": "assistant", "content": None, "tool_calls": [
             {"id": "k1", "type": "function", "function": {"name": "f", "arguments": "{}"}}]},
         {"role": "tool", "tool_call_id": "k1", "content": "r" * 200},
         {"role": "assistant", "content": "d" * 100},
         {"role": "user", "content": "question?"}],
        [{"role": "user", "content": "short"}],
        [],
    ]


@pytest.mark.parametrize("child", ["item", "element", "l"])
@pytest.mark.parametrize("large_list", [False, True])
@pytest.mark.parametrize("strings", [pa.string(), pa.large_string(), pa.string_view()])
def test_list_and_string_layouts(child, large_list, strings):
    function = pa.struct([("name", strings), ("arguments", strings)])
    calls = pa.list_(pa.struct([("id", strings), ("type", strings), ("function", function)]))
    message = pa.struct([("role", strings), ("content", strings), ("tool_calls", calls),
                         ("tool_call_id", strings)])
    field = pa.field(child, message)
    list_type = pa.large_list(field) if large_list else pa.list_(field)
    table = pa.table({"messages": pa.array(chat_rows(), type=pa.list_(MESSAGE)).cast(list_type)})
    out = reduce_table(table, POLICY)
    assert out.table.schema == table.schema
    assert out.figures.column("path").to_pylist() == ["columnar"] * 3
    assert out.figures.column("messages_after").to_pylist() == [6, 1, 0]
    assert_rows_match(table, POLICY, out)


def test_dictionary_roles_and_missing_fields():
    roles = pa.array(["system", "user", "assistant", "user"]).dictionary_encode()
    values = pa.StructArray.from_arrays([roles, pa.array(["s", "u" * 900, "a" * 900, "q"])],
                                        names=["role", "content"])
    column = pa.ListArray.from_arrays(pa.array([0, 4], pa.int32()), values)
    table = pa.table({"messages": column})
    policy = reduce_policy(trim(400, keep=0), trigger=500, target=400)
    out = reduce_table(table, policy)
    assert out.figures.column("path").to_pylist() == ["columnar"]
    assert out.table.column("messages").to_pylist()[0] == [
        {"role": "system", "content": "s"}, {"role": "user", "content": "q"}]
    assert_rows_match(table, policy, out)
    # No content field at all: every message counts 0 chars.
    bare = pa.table({"messages": pa.array([[{"role": "user"}]])})
    assert reduce_table(bare, POLICY).figures.column("chars_before").to_pylist() == [0]


def test_content_as_json_goes_through_the_object_path():
    json_type = pa.json_() if hasattr(pa, "json_") else None
    if json_type is None:  # pragma: no cover - pyarrow < 19 has no JSON type
        pytest.fail("pyarrow without the JSON extension type")
    storage = pa.struct([("role", pa.string()), ("content", pa.string())])
    rows = [[{"role": "user", "content": '"hello"'},
             {"role": "assistant", "content": '[{"type": "text", "text": "' + "x" * 700 + '"}]'},
             {"role": "user", "content": '"q"'}]]
    typed = pa.list_(pa.struct([("role", pa.string()), ("content", json_type)]))
    table = pa.table({"messages": pa.array(rows, type=pa.list_(storage)).cast(typed)})
    out = reduce_table(table, reduce_policy(trim(400, keep=0), trigger=500, target=400))
    assert out.figures.column("path").to_pylist() == ["object"]
    assert out.figures.column("chars_before").to_pylist() == [5 + 700 + 1]
    assert out.table.schema == table.schema
    # The kept messages are the input's own values, JSON text byte for byte.
    assert out.table.column("messages").to_pylist()[0] == [rows[0][2]]


def test_record_batch_sliced_and_chunked():
    arr = pa.array(chat_rows() * 3, type=pa.list_(MESSAGE))
    batch = pa.record_batch({"messages": arr, "n": pa.array(range(9))})
    out = reduce_table(batch, POLICY)
    assert isinstance(out.table, pa.RecordBatch) and isinstance(out.figures, pa.RecordBatch)
    assert out.figures.column("messages_after").to_pylist() == [6, 1, 0] * 3
    sliced = pa.table({"messages": arr}).slice(4, 4)
    out = reduce_table(sliced, POLICY)
    assert out.figures.column("messages_after").to_pylist() == [1, 0, 6, 1]
    assert_rows_match(sliced, POLICY, out)


def test_nothing_changed_is_the_same_column():
    table = pa.table({"messages": pa.array(chat_rows(), type=pa.list_(MESSAGE))})
    out = reduce_table(table, {"mode": "validate"})
    assert out.table is table
    assert out.figures.column("target_reached").to_pylist() == [None] * 3
    assert out.figures.column("triggered").to_pylist() == [False] * 3


def test_warnings_name_fragment_index_and_id():
    rows = [[{"role": "user", "content": "go"},
             {"role": "assistant", "tool_calls": [{"id": "k9", "type": "function",
                                                   "function": {"name": "f", "arguments": ""}}]},
             {"role": "tool", "tool_call_id": "zz", "content": "x"},
             {"role": "user", "content": "?"}]]
    table = pa.table({"messages": pa.array(rows, type=pa.list_(MESSAGE))})
    out = reduce_table(table, {"mode": "validate"})
    assert out.figures.column("warnings").to_pylist() == [[
        {"code": "unanswered-tool-call", "fragment_id": "history", "index": 1,
         "tool_call_id": "k9"},
        {"code": "orphan-tool-result", "fragment_id": "history", "index": 2,
         "tool_call_id": "zz"},
    ]]
    assert_rows_match(table, {"mode": "validate"}, out)


def test_a_trim_never_orphans_a_result_here_either():
    # The result comes a turn after its call: the cut moves back to keep the call.
    rows = [[{"role": "user", "content": "u" * 50},
             {"role": "assistant", "tool_calls": [{"id": "k", "type": "function",
                                                   "function": {"name": "f", "arguments": ""}}]},
             {"role": "user", "content": "v" * 500},
             {"role": "tool", "tool_call_id": "k", "content": "r"},
             {"role": "user", "content": "?"}]]
    table = pa.table({"messages": pa.array(rows, type=pa.list_(MESSAGE))})
    policy = reduce_policy(trim(10, keep=0, grouping="user-turn"), trigger=10, target=None)
    out = reduce_table(table, policy)
    assert out.figures.column("warnings").to_pylist() == [[]]
    assert_rows_match(table, policy, out)


# ---------------------------------------------------------------------------------------------
# Errors name the column, the row, the message and the field


def test_errors_name_row_message_and_field():
    rows = [[{"role": "user", "content": "fine"}],
            [{"role": "user", "content": "x"}, {"role": None, "content": "no role"}]]
    arr = pa.array(rows, type=pa.list_(MESSAGE))
    table = pa.table({"conversation": pa.chunked_array([arr[:1], arr[1:]])})
    with pytest.raises(ContextPlanError) as exc:
        reduce_table(table, POLICY, column="conversation")
    assert exc.value.issues[0].path == "conversation[1][1].role"
    assert exc.value.codes == ["invalid-role"]


def test_null_rows_and_messages_are_errors():
    table = pa.table({"messages": pa.array([chat_rows()[1], None], type=pa.list_(MESSAGE))})
    with pytest.raises(ContextPlanError, match=r"messages\[1\].*got null"):
        reduce_table(table, POLICY)
    values = pa.array([{"role": "user", "content": "a"}, None], type=MESSAGE)
    column = pa.ListArray.from_arrays(pa.array([0, 2], pa.int32()), values)
    with pytest.raises(ContextPlanError) as exc:
        reduce_table(pa.table({"messages": column}), POLICY)
    assert exc.value.issues[0].path == "messages[0][1]"


def test_table_level_errors():
    table = pa.table({"messages": pa.array(chat_rows(), type=pa.list_(MESSAGE))})
    with pytest.raises(ContextPlanError, match="no column 'msgs'"):
        reduce_table(table, POLICY, column="msgs")
    with pytest.raises(ContextPlanError, match=r"expected a list<struct"):
        reduce_table(pa.table({"messages": ["not", "lists"]}), POLICY)
    with pytest.raises(ContextPolicyError, match="original"):
        reduce_table(table, {"mode": "audit", "mutableFragmentIds": ["history"]})
    with pytest.raises(TypeError, match="Table or RecordBatch"):
        reduce_table(chat_rows(), POLICY)
    with pytest.raises(ContextPolicyError):
        reduce_table(table, {"mode": "reduce", "steps": [{"kind": "trim"}]})


# ---------------------------------------------------------------------------------------------
# What needs objects: handlers, counters, custom implementations, per row


def test_compress_handler_once_per_row_that_needs_it():
    calls = []

    def summarise(request):
        calls.append(len(request.content))
        return [{"role": "assistant", "content": f"summary of {len(request.content)}"}]

    policy = {"mode": "reduce", "triggerChars": 500, "steps": [
        {"id": "c", "kind": "compress", "fragmentId": "history", "handlerId": "sum",
         "targetChars": 100, "keepGroups": 1}]}
    table = pa.table({"messages": pa.array(chat_rows(), type=pa.list_(MESSAGE))})
    out = reduce_table(table, policy, handlers={"sum": summarise})
    assert calls == [2]  # only the first row is above the trigger
    assert out.figures.column("path").to_pylist() == ["object"] * 3
    first = out.table.column("messages").to_pylist()[0]
    assert first[1] == {"role": "assistant", "content": "summary of 2", "tool_calls": None,
                        "tool_call_id": None}
    assert_rows_match(table, policy, out, handlers={"sum": summarise})


def test_new_messages_that_do_not_fit_the_schema_are_an_error():
    policy = {"mode": "reduce", "triggerChars": 500, "steps": [
        {"id": "c", "kind": "compress", "fragmentId": "history", "handlerId": "sum",
         "targetChars": 100, "keepGroups": 1}]}
    table = pa.table({"messages": pa.array(chat_rows(), type=pa.list_(MESSAGE))})
    with pytest.raises(ContextPlanError, match="fields the column's messages do not"):
        reduce_table(table, policy, handlers={"sum": lambda r: [
            {"role": "assistant", "content": "s", "metadata": {"summary": True}}]})


def test_token_counter_per_row():
    policy = {"mode": "reduce", "triggerTokens": 20, "targetInputTokens": 10,
              "steps": [trim(100)]}
    table = pa.table({"messages": pa.array(chat_rows(), type=pa.list_(MESSAGE))})

    def words(text: str) -> int:
        return len(text.split())

    out = reduce_table(table, policy, counter=words)
    assert {"tokens_before", "tokens_after"} <= set(out.figures.column_names)
    assert_rows_match(table, policy, out, counter=words)


def test_the_input_table_is_not_changed():
    arr = pa.array(chat_rows(), type=pa.list_(MESSAGE))
    table = pa.table({"messages": arr})
    before = table.to_pylist()
    out = reduce_table(table, POLICY)
    assert table.to_pylist() == before
    assert out.table.column("messages").to_pylist() != before


def test_many_rows_match_row_by_row():
    from contextpolicy import synthetic

    rows = synthetic.corpus("agent-traces", 12, 5)
    chat = [r for r in rows if all(not isinstance(m.get("content"), list) for m in r)]
    table = pa.table({"messages": chat})
    policy = reduce_policy(trim(8000), trigger=20000, target=12000)
    out = reduce_table(table, policy)
    assert set(out.figures.column("path").to_pylist()) == {"columnar"}
    assert np.asarray(out.figures.column("messages_after")).sum() < sum(len(r) for r in chat)
    assert_rows_match(table, policy, out)


def test_the_pool_serves_the_next_call_and_is_given_back():
    from contextpolicy import _kernel
    from contextpolicy.batch import release_memory

    try:
        from numpy._core.multiarray import get_handler_name
    except ImportError:  # numpy 1.x
        from numpy.core.multiarray import get_handler_name
    rows = chat_rows() * 4000  # large enough for blocks of 64 KiB and more
    table = pa.table({"messages": pa.array(rows, type=pa.list_(MESSAGE))})
    release_memory()
    first = reduce_table(table, POLICY)
    after_first = _kernel.pool_stats()
    again = reduce_table(table, POLICY)
    after_again = _kernel.pool_stats()
    assert again.table.equals(first.table) and again.figures.equals(first.figures)
    assert get_handler_name() != "contextpolicy_pool"  # numpy's own again after a call
    if _kernel.COMPILED:
        assert after_first["blocks"] > 0  # the temporaries' blocks, kept for the next call
        assert after_again["hits"] > after_first["hits"]
        # The output's buffers are the pool's and outlive the call: freed, they return to it.
        held = after_again["bytes"]
        del first, again
        assert _kernel.pool_stats()["bytes"] > held
    else:
        assert after_first == after_again == _kernel.pool_stats()
    release_memory()
    assert _kernel.pool_stats()["bytes"] == 0 and _kernel.pool_stats()["blocks"] == 0


def test_pieces_side_by_side_mean_the_same(monkeypatch):
    import contextpolicy.batch.table as table_module

    rows = chat_rows() * 40
    arr = pa.array(rows, type=pa.list_(MESSAGE))
    table = pa.table({"n": list(range(len(rows))),
                      "messages": pa.chunked_array([arr[:50], arr[50:]])})
    one = reduce_table(table, POLICY, threads=1)
    monkeypatch.setattr(table_module, "MIN_PIECE_MESSAGES", 7)
    many = reduce_table(table, POLICY, threads=3)
    assert many.table.column("messages").num_chunks == 6
    assert many.table.column("messages").to_pylist() == one.table.column("messages").to_pylist()
    assert many.figures.to_pylist() == one.figures.to_pylist()
    # An error is named by its row in the table, whichever piece held it.
    bad = rows[:100] + [[{"role": None}]] + rows[:10]
    arr = pa.array(bad, type=pa.list_(MESSAGE))
    with pytest.raises(ContextPlanError) as exc:
        reduce_table(pa.table({"messages": arr}), POLICY, threads=3)
    assert exc.value.issues[0].path == "messages[100][0].role"
    with pytest.raises(ValueError, match="threads"):
        reduce_table(table, POLICY, threads=0)


def test_pieces_hold_about_as_many_messages(monkeypatch):
    import contextpolicy.batch.table as table_module

    monkeypatch.setattr(table_module, "MIN_PIECE_MESSAGES", 100)
    one = {"role": "user", "content": "x"}
    # Ten long transcripts, then ninety short ones: cut by messages, not rows.
    arr = pa.array([[one] * 90] * 10 + [[one]] * 90, type=pa.list_(MESSAGE))
    assert table_module._piece_bounds(arr, 2) == [0, 6, 100]
    assert table_module._piece_bounds(arr.slice(10), 2) == [0, 90]  # 90 messages: one piece
    assert table_module._piece_bounds(arr, 1) == [0, 100]
    assert table_module._piece_bounds(pa.array([1, 2, 3]), 2) == [0, 3]


INNER = pa.struct([("type", pa.string()), ("text", pa.string())])
ARGS = pa.struct([("q", pa.string()), ("n", pa.int64()), ("x", pa.float64())])
# Without the float, an input's compact JSON is counted from the buffers.
ARGS_OF_BUFFERS = pa.struct([("q", pa.string()), ("n", pa.int64()),
                             ("tags", pa.list_(pa.string())), ("ok", pa.bool_())])


def block_type(result_content, args=ARGS):
    return pa.struct([("type", pa.string()), ("text", pa.string()), ("id", pa.string()),
                      ("name", pa.string()), ("input", args), ("tool_use_id", pa.string()),
                      ("content", result_content), ("is_error", pa.bool_())])


inner_part = st.fixed_dictionaries({
    "type": st.sampled_from(["text", "image", "tool_result"]) | st.none(),
    "text": words | st.none()})
block = st.fixed_dictionaries({
    "type": st.sampled_from(["text", "tool_use", "tool_result", "thinking", "image"]),
    "text": words | st.none(), "id": ids, "name": words | st.none(),
    "input": st.none() | st.fixed_dictionaries({
        "q": words | st.none(), "n": st.none() | st.integers(-2**63, 2**63 - 1),
        "x": st.none() | st.floats(allow_nan=False),
        "tags": st.none() | st.lists(words | st.none(), max_size=3),
        "ok": st.none() | st.booleans()}),
    "tool_use_id": ids, "is_error": st.none() | st.booleans(),
})
anthropic_message = st.fixed_dictionaries({
    "role": st.sampled_from(["system", "user", "assistant", "tool", "critic"]),
    "tool_call_id": ids,
})


@SETTINGS
@given(st.lists(st.lists(st.tuples(anthropic_message, st.lists(st.tuples(
    block, words | st.none(), st.none() | st.lists(inner_part, max_size=3)), max_size=4)),
    max_size=10), min_size=1, max_size=6), st.booleans(), st.sampled_from([ARGS, ARGS_OF_BUFFERS]),
    policies)
def test_anthropic_blocks_columnar(rows, nested, args, policy):
    # Tool results' content as text or as a list of parts; tool_use inputs as structs (Arrow
    # drops the keys the struct type does not have).
    content = pa.list_(INNER) if nested else pa.string()
    message_type = pa.struct([("role", pa.string()), ("tool_call_id", pa.string()),
                              ("content", pa.list_(block_type(content, args)))])
    data = [[dict(m, content=[dict(b, content=(inner if nested else text))
                              for b, text, inner in blocks]) for m, blocks in row]
            for row in rows]
    table = pa.table({"messages": pa.array(data, type=pa.list_(message_type))})
    try:
        out = reduce_table(table, policy)
    except ContextPlanError as exc:
        # Text parts without text (the object path's error, named by row and message).
        assert exc.codes == ["invalid-content"], exc
        return
    paths = out.figures.column("path").to_pylist()
    for row, path in zip(data, paths, strict=True):
        deeper = nested and any(
            b["type"] == "tool_result" and any(p["type"] == "tool_result" or (
                p["type"] == "text" and p["text"] is None) for p in (b["content"] or ()))
            for m in row for b in m["content"])
        assert path == ("object" if deeper else "columnar"), row
    assert_rows_match(table, policy, out)


def test_corpus_agent_traces_in_blocks_match_row_by_row():
    from contextpolicy import synthetic

    rows = synthetic.corpus("agent-traces", 16, 7)
    blocks = [[dict(m, content=[{"type": "text", "text": m["content"]}])
               if isinstance(m.get("content"), str) else m for m in r] for r in rows]
    table = pa.table({"messages": blocks})
    policy = reduce_policy(trim(8000), trigger=20000, target=12000)
    out = reduce_table(table, policy)
    assert set(out.figures.column("path").to_pylist()) == {"columnar"}
    assert_rows_match(table, policy, out)


@pytest.mark.parametrize("depth", [150, 900, 200_000])
def test_json_content_nested_deeply_is_a_clear_error(depth):
    text = '[{"type":"tool_result","tool_use_id":"a","content":' * depth + '"x"' + "}]" * depth
    storage = pa.struct([("role", pa.string()), ("content", pa.string())])
    typed = pa.list_(pa.struct([("role", pa.string()), ("content", pa.json_())]))
    arr = pa.array([[{"role": "user", "content": text}, {"role": "user", "content": '"q"'}]],
                   type=pa.list_(storage)).cast(typed)
    with pytest.raises(ContextPlanError) as exc:
        reduce_table(pa.table({"messages": arr}), POLICY)
    assert exc.value.codes == ["too-deep"]
    assert exc.value.issues[0].path.startswith("messages[0][0].content")


# ---------------------------------------------------------------------------------------------
# Responses items and thinking blocks

def test_responses_items_in_a_table_go_through_the_object_path():
    from tests.support.tables import responses_turn

    rows = [[*responses_turn(0, calls=2), *responses_turn(1), {"role": "user", "content": "go"}],
            [{"role": "user", "content": "plain chat"}, {"role": "assistant", "content": "hi"},
             {"role": "user", "content": "again"}]]
    table = pa.table({"messages": [[{**m, "content": str(m["content"])} if "content" in m
                                    and not isinstance(m["content"], str) else m for m in row]
                                   for row in rows]})
    policy = reduce_policy(trim(120, 0, "message"), trigger=100, target=None)
    out = reduce_table(table, policy)
    # Typed items are read by the object path (a call is no chat message); plain chat is not.
    assert out.figures.column("path").to_pylist() == ["object", "columnar"]
    assert_rows_match(table, policy, out)


@pytest.mark.parametrize("with_thinking", [True, False])
def test_thinking_blocks_are_counted_on_the_columnar_path(with_thinking):
    part = pa.struct([("type", pa.string()), ("text", pa.string()), ("thinking", pa.string()),
                      ("signature", pa.string())])
    message = pa.struct([("role", pa.string()), ("content", pa.list_(part))])
    think = ({"type": "thinking", "text": None, "thinking": "mull it over", "signature": "s="}
             if with_thinking else
             {"type": "thinking", "text": None, "thinking": None, "signature": "s="})
    rows = [[{"role": "user", "content": [{"type": "text", "text": "q" * 40, "thinking": None,
                                           "signature": None}]},
             {"role": "assistant", "content": [think, {"type": "text", "text": "a" * 30,
                                                       "thinking": None, "signature": None}]},
             {"role": "user", "content": [{"type": "text", "text": "next", "thinking": None,
                                           "signature": None}]}]]
    table = pa.table({"messages": pa.array(rows, type=pa.list_(message))})
    policy = {"mode": "validate"}
    if not with_thinking:  # a thinking block without its text: the object path's error
        with pytest.raises(ContextPlanError) as caught:
            reduce_table(table, policy)
        assert caught.value.issues[0].path == "messages[0][1].content[0].thinking"
        return
    out = reduce_table(table, policy)
    assert out.figures.column("path").to_pylist() == ["columnar"]
    assert out.figures.column("chars_before").to_pylist() == [40 + 12 + 30 + 4]
    assert_rows_match(table, policy, out)
