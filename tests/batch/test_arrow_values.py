"""Values crossing between Arrow and Python as ``batch.reduce_table`` reads and writes them, on
the compiled kernel and on the twin: a string that is not UTF-8 anywhere in the column, in any
string type, is an ``invalid-utf8`` error naming the row, the message and the field (never
bytes passed into the output or the figures); JSON-typed fields are read exactly; the new
messages of a handler are held exactly or refused."""

from __future__ import annotations

import copy
import decimal
from typing import Any

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from contextpolicy import ContextPlan, ContextPlanError, process_context
from contextpolicy.batch import reduce_table

pytestmark = pytest.mark.usefixtures("pipeline_kernel")

SETTINGS = settings(max_examples=60, deadline=None,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])

# Six ASCII bytes no row holds otherwise: replaced, in the bytes of an IPC stream, by bytes
# that are not UTF-8 (padded with "_"), as a reader that skips validation hands them over.
TOKEN = "QZJXQZ"
BAD = [b"\xff", b"\xc3(", b"\xe2\x82", b"\xed\xa0\x80", b"\xc0\x80", b"\xf4\x90\x80\x80"]

VALIDATE = {"mode": "validate"}
TRIM = {"mode": "reduce", "triggerChars": 50, "targetInputChars": 40, "steps": [
    {"id": "t", "kind": "trim", "fragmentId": "history", "targetChars": 10, "keepGroups": 0,
     "grouping": {"kind": "user-turn"}}]}
COMPRESS = {"mode": "reduce", "triggerChars": 50, "steps": [
    {"id": "c", "kind": "compress", "fragmentId": "history", "handlerId": "sum",
     "targetChars": 10}]}


def summarise(request: Any) -> list[dict[str, Any]]:
    return [{"role": "assistant", "content": "s"}]


def reduce(table: pa.Table, policy: dict[str, Any]) -> Any:
    return reduce_table(table, policy, handlers={"sum": summarise} if policy is COMPRESS
                        else None)


def with_bytes(table: pa.Table, bad: bytes) -> pa.Table:
    """``table`` with ``TOKEN`` replaced by ``bad`` in its bytes (through IPC)."""
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, table.schema) as writer:
        writer.write_table(table)
    raw = sink.getvalue().to_pybytes()
    assert TOKEN.encode() in raw
    return pa.ipc.open_stream(raw.replace(TOKEN.encode(), bad.ljust(len(TOKEN), b"_")))\
        .read_all()


def strings_as(t: pa.DataType, strings: pa.DataType) -> pa.DataType:
    """``t`` with every string type in it replaced by ``strings``."""
    if pa.types.is_struct(t):
        return pa.struct([f.with_type(strings_as(f.type, strings)) for f in t])
    if pa.types.is_list(t):
        return pa.list_(t.value_field.with_type(strings_as(t.value_type, strings)))
    return strings if pa.types.is_string(t) else t


STRINGS = {"string": pa.string(), "large_string": pa.large_string(),
           "string_view": pa.string_view(), "dictionary": pa.dictionary(pa.int32(), pa.string())}

FUNCTION = pa.struct([("name", pa.string()), ("arguments", pa.string())])
CALL = pa.struct([("id", pa.string()), ("type", pa.string()), ("function", FUNCTION)])
META = pa.struct([("source", pa.string()), ("tags", pa.list_(pa.string()))])
CHAT = pa.struct([("role", pa.string()), ("content", pa.string()),
                  ("tool_calls", pa.list_(CALL)), ("tool_call_id", pa.string()),
                  ("name", pa.string()), ("metadata", META)])
PART = pa.struct([("type", pa.string()), ("text", pa.string()), ("id", pa.string()),
                  ("name", pa.string()), ("input", pa.struct([("query", pa.string())])),
                  ("tool_use_id", pa.string()), ("content", pa.string()),
                  ("thinking", pa.string())])
BLOCKS = pa.struct([("role", pa.string()), ("content", pa.list_(PART))])


def chat_rows() -> list[Any]:
    row = [
        {"role": "system", "content": "be brief"},
        {"role": "user", "content": "hello " * 10, "name": "ann"},
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": "c1", "type": "function", "function": {"name": "find", "arguments": "{}"}}]},
        {"role": "tool", "tool_call_id": "c1", "content": "found " * 10},
        {"role": "user", "content": "and?", "metadata": {"source": "web", "tags": ["a", "b"]}},
    ]
    return [row, copy.deepcopy(row)]


def block_rows() -> list[Any]:
    row = [
        {"role": "user", "content": [{"type": "text", "text": "hello " * 10}]},
        {"role": "assistant", "content": [
            {"type": "thinking", "thinking": "hmm"},
            {"type": "tool_use", "id": "t1", "name": "find", "input": {"query": "x"}}]},
        {"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": "t1", "content": "found " * 10}]},
        {"role": "user", "content": [{"type": "text", "text": "and?"}]},
    ]
    return [row, copy.deepcopy(row)]


# The string slots of the second row, and how an error names them.
CHAT_SLOTS = {
    (0, "role"): "messages[1][0].role",
    (1, "content"): "messages[1][1].content",
    (1, "name"): "messages[1][1].name",
    (2, "tool_calls", 0, "id"): "messages[1][2].tool_calls[0].id",
    (2, "tool_calls", 0, "type"): "messages[1][2].tool_calls[0].type",
    (2, "tool_calls", 0, "function", "name"): "messages[1][2].tool_calls[0].function.name",
    (2, "tool_calls", 0, "function", "arguments"):
        "messages[1][2].tool_calls[0].function.arguments",
    (3, "tool_call_id"): "messages[1][3].tool_call_id",
    (4, "metadata", "source"): "messages[1][4].metadata.source",
    (4, "metadata", "tags", 1): "messages[1][4].metadata.tags[1]",
}
BLOCK_SLOTS = {
    (0, "content", 0, "type"): "messages[1][0].content[0].type",
    (0, "content", 0, "text"): "messages[1][0].content[0].text",
    (1, "content", 0, "thinking"): "messages[1][1].content[0].thinking",
    (1, "content", 1, "id"): "messages[1][1].content[1].id",
    (1, "content", 1, "name"): "messages[1][1].content[1].name",
    (1, "content", 1, "input", "query"): "messages[1][1].content[1].input.query",
    (2, "content", 0, "tool_use_id"): "messages[1][2].content[0].tool_use_id",
    (2, "content", 0, "content"): "messages[1][2].content[0].content",
    (3, "role"): "messages[1][3].role",
}
SLOTS = [("chat", slot, path) for slot, path in CHAT_SLOTS.items()] + [
    ("blocks", slot, path) for slot, path in BLOCK_SLOTS.items()]


def put(rows: list[Any], row: int, slot: tuple[Any, ...], value: Any) -> None:
    holder: Any = rows[row]
    for step in slot[:-1]:
        holder = holder[step]
    holder[slot[-1]] = value


@pytest.mark.parametrize("strings", list(STRINGS))
@pytest.mark.parametrize(("layout", "slot", "path"), SLOTS,
                         ids=[path.split("]", 2)[-1] for _, _, path in SLOTS])
def test_bytes_that_are_not_utf8_in_any_string_field_are_named(layout, slot, path, strings):
    rows, message = (chat_rows(), CHAT) if layout == "chat" else (block_rows(), BLOCKS)
    put(rows, 1, slot, "ok" + TOKEN)
    column_type = pa.list_(strings_as(message, STRINGS[strings]))
    clean = pa.table({"id": [0, 1], "messages": pa.array(rows, type=pa.list_(message))
                      .cast(column_type)})
    for k, policy in enumerate((VALIDATE, TRIM, COMPRESS)):
        bad = BAD[(len(path) + k) % len(BAD)]
        table = with_bytes(clean, bad)
        with pytest.raises(ContextPlanError) as info:
            reduce(table, policy)
        assert info.value.codes == ["invalid-utf8"], policy
        issue = info.value.issues[0]
        assert issue.path == path, policy
        assert f"0x{bad[0]:02x} at byte 2 of the string" in issue.message
        assert "not UTF-8" in issue.message


def test_the_first_string_at_fault_is_named_and_rows_count_on_over_chunks():
    rows = chat_rows()
    put(rows, 1, (0, "role"), TOKEN)
    put(rows, 0, (3, "tool_call_id"), TOKEN)
    first = pa.array(chat_rows(), type=pa.list_(CHAT))
    second = pa.array(rows, type=pa.list_(CHAT))
    table = with_bytes(pa.table({"messages": pa.chunked_array([first, second])}), b"\xff")
    for policy in (VALIDATE, TRIM, COMPRESS):
        with pytest.raises(ContextPlanError) as info:
            reduce(table, policy)
        # Row 2 (the first of the second chunk), message 3, before row 3's role.
        assert [i.path for i in info.value.issues] == ["messages[2][3].tool_call_id"]


def _column(values: list[bytes], nulls: list[bool]) -> pa.Array:
    offsets = np.concatenate([[0], np.cumsum([len(v) for v in values])]).astype(np.int32)
    validity = pa.py_buffer(np.packbits(~np.array(nulls), bitorder="little"))
    return pa.Array.from_buffers(pa.string(), len(values), [
        validity, pa.py_buffer(offsets), pa.py_buffer(b"".join(values))], sum(nulls))


def test_bytes_under_a_null_are_no_string():
    # Arrow's rule: a null holds no string, whatever bytes a writer left under it.
    content = _column([b"hello " * 10, b"\xff\xfe", b"again " * 10], [False, True, False])
    names = _column([b"\xc3", b"bob", b"\xff"], [True, False, True])
    values = pa.StructArray.from_arrays([pa.array(["user", "assistant", "user"]), content,
                                         names], names=["role", "content", "name"])
    table = pa.table({"messages": pa.ListArray.from_arrays(pa.array([0, 3], pa.int32()),
                                                            values)})
    expected = [[{"role": "user", "content": "hello " * 10, "name": None},
                 {"role": "assistant", "content": None, "name": "bob"},
                 {"role": "user", "content": "again " * 10, "name": None}]]
    for policy in (VALIDATE, TRIM):
        out = reduce(table, policy)
        result = process_context(ContextPlan.from_messages(expected[0]), policy)
        assert out.figures.column("chars_before").to_pylist() == [result.report.before.chars]
        assert out.figures.column("chars_after").to_pylist() == [result.report.after.chars]
        assert out.table.column("messages").to_pylist() == [
            [{"role": m["role"], "content": m.get("content"), "name": m.get("name")}
             for m in result.input]]


def test_a_string_under_a_null_message_is_still_checked():
    # A struct's children are arrays of their own: Arrow's full validation reads them whatever
    # the struct holds, and so does this check.
    role = _column([b"user", b"as\xffsistant"], [False, False])
    values = pa.StructArray.from_arrays([role, pa.array(["hi", "yo"])],
                                        names=["role", "content"],
                                        mask=pa.array([False, True]))
    table = pa.table({"messages": pa.ListArray.from_arrays(pa.array([0, 2], pa.int32()),
                                                            values)})
    with pytest.raises(ContextPlanError) as info:
        reduce(table, VALIDATE)
    assert [i.path for i in info.value.issues] == ["messages[0][1].role"]


def test_other_columns_are_passed_through_unread():
    # reduce_table reads the messages column only; the others are the caller's, given back as
    # they are (the command line, which writes every column, checks them all).
    clean = pa.table({"note": [TOKEN, "fine"], "messages": pa.array(chat_rows(),
                                                                    type=pa.list_(CHAT))})
    table = with_bytes(clean, b"\xff")
    out = reduce(table, TRIM)
    assert out.table.column("note").chunk(0).buffers() == table.column("note").chunk(0).buffers()
    assert out.figures.num_rows == 2


# ---------------------------------------------------------------------------------------------
# Any string slot, any string type, any policy (hypothesis)

words = st.text(st.characters(codec="utf-8"), max_size=12)
ids = st.sampled_from(["a", "b", "c1"]) | st.none()
chat_message = st.fixed_dictionaries({
    "role": st.sampled_from(["system", "user", "assistant", "tool", "critic"]),
    "content": words | st.none(),
    "tool_calls": st.none() | st.lists(st.fixed_dictionaries({
        "id": ids, "type": st.just("function") | st.none(),
        "function": st.none() | st.fixed_dictionaries({"name": words | st.none(),
                                                       "arguments": words | st.none()})}),
        max_size=2),
    "tool_call_id": ids, "name": words | st.none(),
    "metadata": st.none() | st.fixed_dictionaries({"source": words | st.none(),
                                                   "tags": st.none() | st.lists(words,
                                                                                max_size=3)}),
})
block_message = st.fixed_dictionaries({
    "role": st.sampled_from(["user", "assistant", "critic"]),
    "content": st.none() | st.lists(st.fixed_dictionaries({
        "type": st.sampled_from(["text", "output_text", "image", "tool_result", "tool_use",
                                 "thinking"]) | st.none(),
        "text": words | st.none(), "id": ids, "name": words | st.none(),
        "input": st.none() | st.fixed_dictionaries({"query": words | st.none()}),
        "tool_use_id": ids, "content": words | st.none(), "thinking": words | st.none(),
    }), max_size=3),
})


def string_slots(value: Any, path: str) -> list[tuple[str, list[Any]]]:
    """Every string of ``value`` (a row), as (its path as an error names it, the steps to
    it)."""
    out: list[tuple[str, list[Any]]] = []

    def walk(item: Any, where: str, steps: list[Any]) -> None:
        if isinstance(item, str):
            out.append((where, steps))
        elif isinstance(item, dict):
            for key, child in item.items():
                walk(child, f"{where}.{key}", [*steps, key])
        elif isinstance(item, list):
            for i, child in enumerate(item):
                walk(child, f"{where}[{i}]", [*steps, i])

    walk(value, path, [])
    return out


@SETTINGS
@given(st.sampled_from(["chat", "blocks"]), st.data())
def test_a_string_that_is_not_utf8_anywhere_is_named(layout, data):
    message, rows_of = (CHAT, chat_message) if layout == "chat" else (BLOCKS, block_message)
    rows = data.draw(st.lists(st.lists(rows_of, max_size=6), min_size=1, max_size=5))
    slots = [(r, path, steps) for r, row in enumerate(rows)
             for path, steps in string_slots(row, f"messages[{r}]")]
    if not slots:
        return
    r, path, steps = data.draw(st.sampled_from(slots))
    holder: Any = rows[r]
    for step in steps[:-1]:
        holder = holder[step]
    holder[steps[-1]] = data.draw(st.sampled_from(["", "x", "订单"])) + TOKEN
    strings = data.draw(st.sampled_from(list(STRINGS)))
    clean = pa.table({"messages": pa.array(rows, type=pa.list_(message)).cast(
        pa.list_(strings_as(message, STRINGS[strings])))})
    table = with_bytes(clean, data.draw(st.sampled_from(BAD)))
    policy = data.draw(st.sampled_from([VALIDATE, TRIM, COMPRESS]))
    with pytest.raises(ContextPlanError) as info:
        reduce(table, policy)
    assert info.value.codes == ["invalid-utf8"]
    assert info.value.issues[0].path == path


# ---------------------------------------------------------------------------------------------
# Values read exactly, written exactly


def test_json_typed_content_with_integers_beyond_64_bits_is_read_exactly():
    content = [{"type": "tool_use", "id": "t", "name": "f", "input": {"n": 2**70, "m": -2**65}}]
    rows = [[{"role": "user", "content": "hi"}, {"role": "assistant", "content": content}]]
    text = f'[{{"type":"tool_use","id":"t","name":"f","input":{{"n":{2**70},"m":{-2**65}}}}}]'
    message = pa.StructArray.from_arrays(
        [pa.array(["user", "assistant"]),
         pa.ExtensionArray.from_storage(pa.json_(), pa.array(['"hi"', text]))],
        names=["role", "content"])
    table = pa.table({"messages": pa.ListArray.from_arrays(pa.array([0, 2], pa.int32()),
                                                            message)})
    out = reduce(table, VALIDATE)
    report = process_context(ContextPlan.from_messages(rows[0]), VALIDATE).report
    assert out.figures.column("chars_before").to_pylist() == [report.before.chars]


META_NUMBERS = pa.struct([("role", pa.string()), ("content", pa.string()),
                          ("metadata", pa.struct([("n", pa.int64()), ("x", pa.float64()),
                                                  ("f", pa.float32()),
                                                  ("d", pa.decimal128(6, 2))]))])
LONG = [[{"role": "user", "content": "a" * 60, "metadata": None},
         {"role": "assistant", "content": "b" * 60, "metadata": None},
         {"role": "user", "content": "q", "metadata": None}]]


# What Arrow converts without a word (what it refuses, a boolean or a float for a decimal, is
# refused as it was).
@pytest.mark.parametrize(("written", "said"), [
    ({"n": 5.5}, "metadata.n: 5.5 would be held as 5"),
    ({"x": 2.5, "f": 0.1}, "metadata.f: 0.1 would be held as 0.10000000149011612"),
])
def test_new_messages_are_held_exactly_or_refused(written, said):
    table = pa.table({"messages": pa.array(LONG, type=pa.list_(META_NUMBERS))})

    def handler(request: Any) -> list[dict[str, Any]]:
        return [{"role": "assistant", "content": "s", "metadata": written}]

    with pytest.raises(ContextPlanError) as info:
        reduce_table(table, COMPRESS, handlers={"sum": handler})
    assert info.value.codes == ["schema-mismatch"]
    assert said in info.value.issues[0].message


def test_new_messages_whose_numbers_are_the_same_numbers_are_held():
    # JSON has one kind of number: 2 into a double field is 2.0, 1.5 into a decimal 1.50.
    table = pa.table({"messages": pa.array(LONG, type=pa.list_(META_NUMBERS))})
    written = {"n": 7, "x": 2, "f": 0.5, "d": decimal.Decimal("1.5")}

    def handler(request: Any) -> list[dict[str, Any]]:
        return [{"role": "assistant", "content": "s", "metadata": written}]

    out = reduce_table(table, COMPRESS, handlers={"sum": handler})
    held = out.table.column("messages").to_pylist()[0][0]["metadata"]
    assert held == {"n": 7, "x": 2.0, "f": 0.5, "d": decimal.Decimal("1.50")}


def test_new_messages_with_text_utf8_cannot_carry_are_refused():
    table = pa.table({"messages": pa.array(LONG, type=pa.list_(META_NUMBERS))})

    def handler(request: Any) -> list[dict[str, Any]]:
        return [{"role": "assistant", "content": "lone \ud800 surrogate"}]

    with pytest.raises(ContextPlanError) as info:
        reduce_table(table, COMPRESS, handlers={"sum": handler})
    assert info.value.codes == ["invalid-utf8"]
    assert "'\\ud800'" in info.value.issues[0].message


@pytest.mark.parametrize("strings", [pa.string(), pa.large_string(), pa.string_view()])
def test_jsonl_lines_in_arrow_that_are_not_utf8_are_that_lines_error(strings):
    # Ray Data's text column, read as the bytes it holds: one line that is not UTF-8 is that
    # line's error, as on the command line, and the others are reduced.
    from contextpolicy.batch.ray import ReduceLines
    from contextpolicy.jsonl.runner import process_lines

    lines = [b'{"messages":[{"role":"user","content":"hi"}]}',
             b'{"messages":[{"role":"user","content":"' + TOKEN.encode() + b'"}]}',
             b'{"messages":[{"role":"user","content":"yo"}]}']
    table = with_bytes(pa.table({"text": pa.array([b.decode() for b in lines]).cast(strings)}),
                       b"\xff")
    out = ReduceLines(VALIDATE)(table)
    bad = lines[1].replace(TOKEN.encode(), b"\xff".ljust(len(TOKEN), b"_"))
    expected = list(process_lines([[(1, lines[0]), (2, bad), (3, lines[2])]], VALIDATE))
    assert out.column("error").to_pylist() == [r.error for r in expected]
    assert out.column("error")[1].as_py() is not None
    assert out.column("text").to_pylist() == [lines[0].decode(), None, lines[2].decode()]


def _unchecked_strings(values: list[bytes]) -> pa.Array:
    # A string array built from its buffers, which Arrow does not check: what a Parquet or IPC
    # reader can hand over.
    offsets = np.cumsum([0] + [len(v) for v in values]).astype(np.int32)
    return pa.Array.from_buffers(pa.string(), len(values), [
        None, pa.py_buffer(offsets.tobytes()), pa.py_buffer(b"".join(values))])


NOT_UTF8 = [b"ok", b"b\xffd", b"fine"]
NESTED_LAYOUTS = {
    "list": (lambda s: pa.ListArray.from_arrays(pa.array([0, 1, 3], pa.int32()), s), "col[1][0]"),
    "struct": (lambda s: pa.StructArray.from_arrays([s], names=["text"]), "col[1].text"),
    "map-item": (lambda s: pa.MapArray.from_arrays(pa.array([0, 1, 3], pa.int32()),
                                                   pa.array(["a", "b", "c"]), s),
                 "col[1][0].value"),
    "map-key": (lambda s: pa.MapArray.from_arrays(pa.array([0, 1, 3], pa.int32()), s,
                                                  pa.array([1, 2, 3])), "col[1][0].key"),
    "dictionary": (lambda s: pa.DictionaryArray.from_arrays(pa.array([2, 1, 0]), s), "col[1]"),
    "sparse-union": (lambda s: pa.UnionArray.from_sparse(pa.array([0, 0, 0], pa.int8()),
                                                         [s, pa.array([1, 2, 3])]), "col[1]"),
    "sparse-union-other-slot": (lambda s: pa.UnionArray.from_sparse(
        pa.array([0, 1, 0], pa.int8()), [s, pa.array([1, 2, 3])]), None),
    "dense-union": (lambda s: pa.UnionArray.from_dense(
        pa.array([0, 1, 0], pa.int8()), pa.array([0, 0, 1], pa.int32()),
        [s.slice(1, 2), pa.array([7])]), "col[0]"),
    "fixed-size-list": (lambda s: pa.FixedSizeListArray.from_arrays(
        pa.concat_arrays([s, pa.array(["x"])]), 2), "col[0][1]"),
    "list-view": (lambda s: pa.ListViewArray.from_arrays(pa.array([0, 1], pa.int32()),
                                                         pa.array([1, 2], pa.int32()), s),
                  "col[1][0]"),
    "chunked": (lambda s: pa.chunked_array([pa.array([["a"]]), pa.ListArray.from_arrays(
        pa.array([0, 1, 3], pa.int32()), s)]), "col[2][0]"),
    "deep": (lambda s: _nest(s, 1_000), "col[1]" + "[0]" * 1_000),
}


def _nest(values: pa.Array, depth: int) -> pa.Array:
    arr = pa.ListArray.from_arrays(pa.array([0, 1, 3], pa.int32()), values)
    for _ in range(depth - 1):
        arr = pa.ListArray.from_arrays(pa.array([0, 1, 2], pa.int32()), arr)
    return arr


@pytest.mark.parametrize("layout", sorted(NESTED_LAYOUTS))
def test_a_string_that_is_not_utf8_is_named_in_every_nested_layout(layout):
    from contextpolicy.batch.checks import check_utf8

    make, path = NESTED_LAYOUTS[layout]
    arr = make(_unchecked_strings(NOT_UTF8))
    if path is None:  # the bad string is a value of no slot: nothing to say
        check_utf8(arr, "col")
        return
    with pytest.raises(ContextPlanError) as info:
        check_utf8(arr, "col")
    (issue,) = info.value.issues
    assert (issue.path, issue.code) == (path, "invalid-utf8")
    assert "0xff at byte" in issue.message


def test_roles_and_content_as_dictionaries_of_string_views():
    """A dictionary of ``string_view`` values (what Polars exports a Categorical or an Enum as)
    is read as its strings: the same rows and figures as plain strings, the column given back
    in its own type (a null index is a null)."""
    rows = [[{"role": "user", "content": "a" * 40}, {"role": "assistant", "content": "b" * 40},
             {"role": "user", "content": "q"}],
            [{"role": "user", "content": None}], [],
            [{"role": "system", "content": "be brief"}, {"role": "user", "content": "a" * 40},
             {"role": "assistant", "content": "😀" * 30}, {"role": "user", "content": "a" * 40}]]
    plain = pa.table({"id": range(len(rows)), "messages": pa.array(rows, type=pa.list_(
        pa.struct([("role", pa.string()), ("content", pa.string())])))})
    views = pa.dictionary(pa.int32(), pa.string_view())
    typ = pa.list_(pa.struct([("role", views), ("content", views)]))
    table = plain.set_column(1, pa.field("messages", typ), plain.column(1).cast(typ))
    for policy in (VALIDATE, TRIM):
        want = reduce_table(plain, policy)
        for arrow_in in (table, table.to_batches()[0]):
            out = reduce_table(arrow_in, policy)
            assert out.table.schema == table.schema
            assert out.table.to_pylist() == want.table.to_pylist()
            assert out.figures.to_pylist() == want.figures.to_pylist()
    assert reduce_table(table, TRIM).figures.column("messages_after").to_pylist() == [1, 1, 0, 2]
