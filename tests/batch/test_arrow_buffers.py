"""``batch.reduce_table`` at the Arrow buffers, on the compiled kernel and on the twin: the
output's gather by ranges is what a take of the same indices gives, for every layout; a tool_use
input's compact JSON is counted from the buffers; bytes that are not UTF-8 are an error naming
the row, the message and the field."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from contextpolicy import ContextPlanError
from contextpolicy.batch import reduce_table
from tests.support.tables import (
    CALL,
    PART,
    POLICY,
    assert_rows_match,
    call,
    expected,
    ids,
    words,
)

pytestmark = pytest.mark.usefixtures("pipeline_kernel")

SETTINGS = settings(max_examples=60, deadline=None,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


# ---------------------------------------------------------------------------------------------
# The output's gather by ranges: what a take of the same indices gives, for every layout

GATHERED = pa.struct([
    ("role", pa.string()), ("content", pa.large_string()), ("n", pa.int64()),
    ("x", pa.float32()), ("flag", pa.bool_()), ("kind", pa.dictionary(pa.int32(), pa.string())),
    ("raw", pa.binary()), ("at", pa.timestamp("ms")), ("code", pa.binary(3)),
    ("view", pa.string_view()), ("tool_calls", pa.list_(CALL)), ("parts", pa.large_list(PART)),
    ("meta", pa.json_(pa.string())),
])
gathered_message = st.none() | st.fixed_dictionaries({
    "role": st.sampled_from(["user", "assistant"]) | st.none(), "content": words | st.none(),
    "n": st.integers(-2**63, 2**63 - 1) | st.none(), "x": st.floats(width=32, allow_nan=False) | st.none(),
    "flag": st.booleans() | st.none(), "kind": st.sampled_from(["a", "b"]) | st.none(),
    "raw": st.binary(max_size=20) | st.none(), "at": st.integers(0, 2**40) | st.none(),
    "code": st.binary(min_size=3, max_size=3) | st.none(), "view": words | st.none(),
    "tool_calls": st.none() | st.lists(call, max_size=3),
    "parts": st.none() | st.lists(st.none() | st.fixed_dictionaries({
        "type": st.just("text"), "text": words | st.none(), "id": ids, "tool_use_id": ids}),
        max_size=3),
    "meta": st.none() | st.sampled_from(['{"a": 1}', "[]", '"s"']),
})


@SETTINGS
@given(st.lists(st.none() | st.lists(gathered_message, max_size=5), min_size=1, max_size=12),
       st.booleans(), st.data())
def test_gather_by_ranges_is_a_take(rows, large, data):
    from contextpolicy.batch.assemble import (
        expand_ranges,
        gather,
        joined_runs,
        storage_type_of,
        take_values,
    )

    t = (pa.large_list if large else pa.list_)(GATHERED)
    # Built without the dictionary and the extension, then cast (Arrow builds a null struct's
    # dictionary child with an index into an empty dictionary).
    plain = storage_type_of(t.value_type)
    plain = pa.struct([f.with_type(pa.string()) if f.name == "kind" else f for f in plain])
    column = pa.array(rows, type=(pa.large_list if large else pa.list_)(plain)).cast(t)
    column.validate(full=True)
    lo = data.draw(st.integers(0, len(column)))
    arr = column.slice(lo, data.draw(st.integers(0, len(column) - lo)))
    for target in (arr, arr.values):  # the lists, and their messages (a struct)
        n = len(target)
        ranges = data.draw(st.lists(st.tuples(st.integers(0, n), st.integers(0, n)).map(sorted),
                                    max_size=6))
        starts = np.array([a for a, _ in ranges], dtype=np.int64)
        lengths = np.array([b - a for a, b in ranges], dtype=np.int64)
        want = take_values(target, pa.array(expand_ranges(starts, lengths), type=pa.int64()))
        for got in (gather(target, starts, lengths), gather(target, *joined_runs(starts, lengths))):
            got.validate(full=True)
            assert got.type == target.type
            assert got.to_pylist() == want.to_pylist()
            assert got.equals(want)


def test_gather_of_one_range_is_a_slice_and_copies_nothing():
    from contextpolicy.batch.assemble import gather

    arr = pa.array([[{"role": "user", "content": "a"}]] * 4,
                   type=pa.list_(pa.struct([("role", pa.string()), ("content", pa.string())])))
    got = gather(arr, np.array([1]), np.array([2]))
    assert got.offset == 1 and got.buffers()[1].address == arr.buffers()[1].address


# ---------------------------------------------------------------------------------------------
# A tool_use input's compact JSON, counted from the buffers

leaf_types = st.sampled_from([
    pa.int8(), pa.int64(), pa.uint64(), pa.bool_(), pa.string(), pa.large_string(),
    pa.string_view(), pa.null(), pa.dictionary(pa.int32(), pa.string()), pa.float64()])
field_names = st.sampled_from(["q", "n", 'a"b', "c\\d", "é", "😀", "\n", "\x01", ""])


def _struct_of(fields: list) -> pa.DataType:
    return pa.struct([pa.field(name, t) for name, t in fields])


arrow_types = st.recursive(leaf_types, lambda inner: st.one_of(
    st.lists(st.tuples(field_names, inner), max_size=3, unique_by=lambda f: f[0]).map(
        _struct_of),
    inner.map(pa.list_), inner.map(pa.large_list)), max_leaves=6)
json_text = st.text(st.characters(codec="utf-8"), max_size=12) | st.sampled_from(
    ['"', "\\", "\x00\x1f\b\f\n\r\t", "a\u2028b\x7f", "订单 😀"])


def values_of(t: pa.DataType) -> st.SearchStrategy:
    if pa.types.is_null(t):
        return st.none()
    if pa.types.is_struct(t):
        return st.none() | st.fixed_dictionaries({f.name: values_of(f.type) for f in t})
    if pa.types.is_list(t) or pa.types.is_large_list(t):
        return st.none() | st.lists(values_of(t.value_type), max_size=3)
    if pa.types.is_integer(t):
        info = np.iinfo(t.to_pandas_dtype())
        return st.none() | st.integers(int(info.min), int(info.max))
    if pa.types.is_boolean(t):
        return st.none() | st.booleans()
    if pa.types.is_floating(t):
        return st.none() | st.floats(allow_nan=False)
    return st.none() | json_text


@SETTINGS
@given(arrow_types, st.data())
def test_json_lengths_are_the_compact_json_of_the_values(t, data):
    from contextpolicy._kernel_py import COMPACT_JSON
    from contextpolicy.batch.arrow import json_lengths

    values = data.draw(st.lists(values_of(t), max_size=8))
    try:
        arr = pa.array(values, type=t)
    except (pa.ArrowInvalid, pa.ArrowTypeError, pa.ArrowNotImplementedError):
        return  # a type Arrow cannot build from Python values (a view in a list, say)
    lo = data.draw(st.integers(0, len(arr)))
    arr = arr.slice(lo, data.draw(st.integers(0, len(arr) - lo)))
    got = json_lengths(arr)
    if "double" in str(t):  # floats: only Python writes their shortest form, the values say
        assert got is None
        return
    assert got.tolist() == [len(COMPACT_JSON.encode(v)) for v in arr.to_pylist()]


def test_json_lengths_of_the_integer_edges():
    from contextpolicy._kernel_py import COMPACT_JSON
    from contextpolicy.batch.arrow import json_lengths

    edges = [0, -1, 9, 10, -10, 99, 100, 10**18 - 1, 10**18, 2**63 - 1, -2**63, -2**63 + 1]
    arr = pa.array(edges, type=pa.int64())
    assert json_lengths(arr).tolist() == [len(COMPACT_JSON.encode(v)) for v in edges]
    big = [0, 10**19 - 1, 10**19, 2**64 - 1]
    assert json_lengths(pa.array(big, type=pa.uint64())).tolist() == [1, 19, 20, 20]
    # A struct with a key twice reads back as a dict with one of them: the values say.
    twice = pa.StructArray.from_arrays([pa.array([1]), pa.array([22])], names=["k", "k"])
    assert json_lengths(twice) is None


def test_a_dictionarys_null_values_are_nulls():
    from contextpolicy._kernel_py import COMPACT_JSON
    from contextpolicy.batch.arrow import json_lengths

    # Indices that are valid, pointing at a null in the dictionary: null once decoded.
    codes = pa.DictionaryArray.from_arrays(pa.array([0, 1, None], type=pa.int8()),
                                           pa.array(["a", None]))
    for arr in (codes, pa.StructArray.from_arrays([codes], names=["k"]),
                pa.ListArray.from_arrays(pa.array([0, 3], type=pa.int32()), codes)):
        assert json_lengths(arr).tolist() == [len(COMPACT_JSON.encode(v))
                                               for v in arr.to_pylist()]
    # A tool input holding one, and a text part whose text is one: as the object path says.
    inputs = pa.StructArray.from_arrays([codes.slice(0, 2)], names=["q"])
    text = pa.DictionaryArray.from_arrays(pa.array([0, 1], type=pa.int8()),
                                          pa.array(["hi", None]))
    parts = pa.StructArray.from_arrays(
        [pa.array(["tool_use", "tool_use"]), pa.array(["t1", "t2"]), pa.array(["f", "f"]),
         inputs], names=["type", "id", "name", "input"])
    texts = pa.StructArray.from_arrays([pa.array(["text", "text"]), text],
                                       names=["type", "text"])
    for content in (parts, texts):
        message = pa.StructArray.from_arrays(
            [pa.array(["assistant"]), pa.ListArray.from_arrays(pa.array([0, 2], type=pa.int32()),
                                                               content)],
            names=["role", "content"])
        table = pa.table({"messages": pa.ListArray.from_arrays(pa.array([0, 1], type=pa.int32()),
                                                                message)})
        try:
            out = reduce_table(table, POLICY)
        except ContextPlanError as exc:
            with pytest.raises(ContextPlanError) as want:
                expected(table.column("messages").to_pylist()[0], POLICY)
            assert exc.codes == want.value.codes
            continue
        assert_rows_match(table, POLICY, out)




def _not_utf8(values: list[bytes]) -> pa.Array:
    # A string array over bytes Arrow was not asked to check (as an IPC or Parquet reader that
    # skips validation can hand over).
    offsets = np.concatenate([[0], np.cumsum([len(v) for v in values])]).astype(np.int32)
    return pa.Array.from_buffers(pa.string(), len(values),
                                 [None, pa.py_buffer(offsets), pa.py_buffer(b"".join(values))])


def _conversation_column(content: pa.Array, extra: dict | None = None) -> pa.Array:
    n = len(content)
    roles = pa.array(["user", "assistant"] * (n // 2) + ["user"] * (n % 2))
    fields = {"role": roles, "content": content, **(extra or {})}
    messages = pa.StructArray.from_arrays(list(fields.values()), names=list(fields))
    return messages


def test_bytes_that_are_not_utf8_are_an_error_naming_row_message_and_field():
    # Row 2, message 1: the columnar counter stops there, and the error says where, on both
    # kernels, in a chunked column (rows of later chunks are numbered in the table).
    good = _conversation_column(pa.array(["a" * 600, "b" * 600]))
    bad = _conversation_column(_not_utf8([b"ok", b"x" * 600, b"fine", b"h\xc3(i"]))
    column = pa.chunked_array([
        pa.ListArray.from_arrays(pa.array([0, 2], pa.int32()), good),
        pa.ListArray.from_arrays(pa.array([0, 2, 4], pa.int32()), bad),
    ])
    with pytest.raises(ContextPlanError) as info:
        reduce_table(pa.table({"messages": column}), POLICY)
    assert info.value.codes == ["invalid-utf8"]
    assert info.value.issues[0].path == "messages[2][1].content"
    assert "not UTF-8" in info.value.issues[0].message


def test_bytes_that_are_not_utf8_in_a_text_part_or_a_call_are_named_too():
    text = _not_utf8([b"fine", b"\xff"])
    parts = pa.StructArray.from_arrays([pa.array(["text", "text"]), text], names=["type", "text"])
    content = pa.ListArray.from_arrays(pa.array([0, 1, 2], pa.int32()), parts)
    column = pa.ListArray.from_arrays(pa.array([0, 2], pa.int32()),
                                      _conversation_column(content))
    with pytest.raises(ContextPlanError) as info:
        reduce_table(pa.table({"messages": column}), POLICY)
    assert [i.path for i in info.value.issues] == ["messages[0][1].content[0].text"]
    function = pa.StructArray.from_arrays([pa.array(["f", "g"]), _not_utf8([b"{}", b"{\xe2}"])],
                                          names=["name", "arguments"])
    calls = pa.StructArray.from_arrays([pa.array(["c1", "c2"]), function],
                                       names=["id", "function"])
    tool_calls = pa.ListArray.from_arrays(pa.array([0, 0, 2], pa.int32()), calls)
    column = pa.ListArray.from_arrays(pa.array([0, 2], pa.int32()), _conversation_column(
        pa.array(["q", "a"]), {"tool_calls": tool_calls}))
    with pytest.raises(ContextPlanError) as info:
        reduce_table(pa.table({"messages": column}), POLICY)
    assert [i.path for i in info.value.issues] == [
        "messages[0][1].tool_calls[1].function.arguments"]
