"""``batch.reduce_table`` of a Polars DataFrame or a DuckDB relation, on the compiled kernel and
on the twin: the same rows and figures as the Arrow path, given back as the input's kind (a
relation on the input's connection), the input untouched, and the errors of the Arrow path."""

from __future__ import annotations

import gc
import subprocess
import sys

import duckdb
import polars as pl
import pyarrow as pa
import pytest

from contextpolicy import ContextPlanError, ContextPolicyError
from contextpolicy.batch import reduce_table
from tests.support.tables import MESSAGE

pytestmark = pytest.mark.usefixtures("pipeline_kernel")

POLICY = {"mode": "reduce", "triggerChars": 500, "targetInputChars": 400, "steps": [
    {"id": "t", "kind": "trim", "fragmentId": "history", "targetChars": 400, "keepGroups": 1,
     "grouping": {"kind": "user-turn"}}]}

CALL = {"id": "k1", "type": "function", "function": {"name": "f", "arguments": "{}"}}
ROWS = [
    [{"role": "system", "content": "be brief"},
     {"role": "user", "content": "a" * 300}, {"role": "assistant", "content": "b" * 300},
     {"role": "user", "content": "c" * 300},
     {"role": "assistant", "content": None, "tool_calls": [CALL]},
     {"role": "tool", "tool_call_id": "k1", "content": "r" * 200},
     {"role": "assistant", "content": "d" * 100},
     {"role": "user", "content": "question?"}],
    [{"role": "user", "content": "short"}],
    [],
    [{"role": "user", "content": "订单 " * 200},
     {"role": "assistant", "content": None, "tool_calls": [CALL, {**CALL, "id": "k2"}]},
     {"role": "tool", "tool_call_id": "k1", "content": "😀" * 90},
     {"role": "tool", "tool_call_id": "k2", "content": "x" * 90},
     {"role": "user", "content": "and now?"}, {"role": "assistant", "content": "fine"}],
]


def arrow_table(rows: list = ROWS) -> pa.Table:
    return pa.table({"id": list(range(len(rows))), "name": [f"chat {i}" for i in range(len(rows))],
                     "messages": pa.array(rows, type=pa.list_(MESSAGE))})


def assert_same_as_arrow(out_table: pa.Table, out_figures: pa.Table, table: pa.Table) -> None:
    """The Arrow tables of a frame's output equal the Arrow path's on the same rows."""
    want = reduce_table(table, POLICY)
    assert out_table.column_names == table.column_names
    for name in table.column_names:
        assert out_table.column(name).to_pylist() == want.table.column(name).to_pylist(), name
    assert out_figures.column_names == want.figures.column_names
    assert out_figures.to_pylist() == want.figures.to_pylist()


def catalog(con: duckdb.DuckDBPyConnection) -> list:
    return con.sql("SELECT table_name FROM duckdb_tables() UNION ALL "
                   "SELECT view_name FROM duckdb_views() WHERE NOT internal").fetchall()


# ---------------------------------------------------------------------------------------------
# Polars


def test_polars_in_polars_out_equal_to_the_arrow_path():
    frame = pl.from_arrow(arrow_table())
    out = reduce_table(frame, POLICY)
    assert isinstance(out.table, pl.DataFrame) and isinstance(out.figures, pl.DataFrame)
    assert out.table.schema == frame.schema  # the same dtypes: it goes back into Polars as is
    assert out.table["id"].to_list() == [0, 1, 2, 3]
    assert out.table["name"].to_list() == frame["name"].to_list()
    assert_same_as_arrow(out.table.to_arrow(), out.figures.to_arrow(), arrow_table())
    # The rows were reduced: the last one's tool calls went with their results.
    assert out.figures["messages_after"].to_list() == [6, 1, 0, 2]
    assert [m["role"] for m in out.table["messages"][3]] == ["user", "assistant"]


def test_polars_rows_keep_their_order_across_pieces(monkeypatch):
    import contextpolicy.batch.table as table_module

    rows = ROWS * 30
    frame = pl.from_arrow(arrow_table(rows))
    monkeypatch.setattr(table_module, "MIN_PIECE_MESSAGES", 7)
    out = reduce_table(frame, POLICY, threads=3)
    assert out.table["id"].to_list() == list(range(len(rows)))
    assert_same_as_arrow(out.table.to_arrow(), out.figures.to_arrow(), arrow_table(rows))


def test_polars_buffers_are_shared_not_copied():
    frame = pl.from_arrow(arrow_table())
    out = reduce_table(frame, {"mode": "validate"})
    level = pl.CompatLevel.newest()

    def addresses(df: pl.DataFrame, name: str) -> list:
        chunk = df.to_arrow(compat_level=level).column(name).chunk(0)
        return [b.address for b in chunk.buffers() if b is not None]

    for name in ("id", "name", "messages"):  # nothing reduced: every buffer the input's
        assert addresses(out.table, name) == addresses(frame, name), name
    reduced = reduce_table(frame, POLICY).table
    assert addresses(reduced, "name") == addresses(frame, "name")


def test_polars_empty_frame():
    frame = pl.from_arrow(arrow_table([]))
    assert frame.height == 0
    out = reduce_table(frame, POLICY)
    assert out.table.schema == frame.schema and out.table.height == 0
    assert out.figures.height == 0
    assert out.figures.columns == reduce_table(arrow_table([]), POLICY).figures.column_names


def test_polars_input_is_left_as_it_was():
    frame = pl.from_arrow(arrow_table())
    before = frame.clone()
    out = reduce_table(frame, POLICY)
    assert frame.equals(before) and not out.table.equals(before)


def test_polars_null_row_is_an_error_naming_it():
    frame = pl.from_arrow(arrow_table()).with_columns(
        messages=pl.when(pl.col("id") == 2).then(None).otherwise(pl.col("messages")))
    with pytest.raises(ContextPlanError, match=r"messages\[2\].*got null"):
        reduce_table(frame, POLICY)


def test_a_lazy_frame_is_told_to_collect():
    lazy = pl.from_arrow(arrow_table()).lazy()
    with pytest.raises(TypeError, match=r"got a LazyFrame.*frame\.collect\(\)"):
        reduce_table(lazy, POLICY)


# ---------------------------------------------------------------------------------------------
# DuckDB


@pytest.fixture
def con():
    connection = duckdb.connect()
    yield connection
    connection.close()


def test_duckdb_in_duckdb_out_equal_to_the_arrow_path(con):
    relation = con.from_arrow(arrow_table())
    out = reduce_table(relation, POLICY)
    assert isinstance(out.table, duckdb.DuckDBPyRelation)
    assert isinstance(out.figures, duckdb.DuckDBPyRelation)
    assert out.table.columns == relation.columns and out.table.types == relation.types
    assert_same_as_arrow(out.table.to_arrow_table(), out.figures.to_arrow_table(), arrow_table())


def test_duckdb_relation_of_a_query_with_where_and_order(con):
    con.from_arrow(arrow_table()).create("chats")
    relation = con.sql("SELECT name, messages, id FROM chats WHERE id <> 1 ORDER BY id DESC")
    out = reduce_table(relation, POLICY)
    assert out.table.columns == ["name", "messages", "id"]
    assert [r[0] for r in out.table.select("id").fetchall()] == [3, 2, 0]
    picked = arrow_table().take([3, 2, 0]).select(["name", "messages", "id"])
    assert_same_as_arrow(out.table.to_arrow_table(), out.figures.to_arrow_table(), picked)


def test_duckdb_output_lives_on_the_input_connection_and_leaves_no_name(con):
    con.from_arrow(arrow_table()).create("chats")
    con.execute("CREATE TABLE owners AS SELECT range AS id, 'owner ' || range AS owner "
                "FROM range(4)")
    before = catalog(con)
    out = reduce_table(con.table("chats"), POLICY)
    assert catalog(con) == before
    # A join with a table of the connection: a relation of another connection would be refused.
    joined = out.table.join(con.table("owners"), "id").order("id").select("owner, messages")
    assert [(o, len(m)) for o, m in joined.fetchall()] == [
        ("owner 0", 6), ("owner 1", 1), ("owner 2", 0), ("owner 3", 2)]
    assert con.sql("SELECT count(*) FROM owners").fetchall() == [(4,)]
    # The output reads its own rows, never the input's query again, and outlives the input.
    con.execute("INSERT INTO chats SELECT 9, 'new', []")
    assert out.figures.count("*").fetchall() == [(4,)]
    assert [r[0] for r in out.table.select("id").fetchall()] == [0, 1, 2, 3]


def test_duckdb_output_outlives_the_input_relation(con):
    relation = con.from_arrow(arrow_table())
    out = reduce_table(relation, POLICY)
    del relation
    gc.collect()
    assert_same_as_arrow(out.table.to_arrow_table(), out.figures.to_arrow_table(), arrow_table())


def test_duckdb_input_is_left_as_it_was(con):
    con.from_arrow(arrow_table()).create("chats")
    relation = con.sql("SELECT * FROM chats WHERE id >= 0")
    rows = relation.fetchall()
    reduce_table(relation, POLICY)
    assert relation.fetchall() == rows == con.table("chats").fetchall()


def test_duckdb_empty_relation(con):
    relation = con.from_arrow(arrow_table()).filter("id < 0")
    out = reduce_table(relation, POLICY)
    assert out.table.fetchall() == [] and out.figures.fetchall() == []
    assert out.table.columns == relation.columns
    assert out.figures.columns == reduce_table(arrow_table([]), POLICY).figures.column_names


def test_duckdb_null_row_is_an_error_naming_it(con):
    relation = con.from_arrow(arrow_table()).project(
        "id, name, CASE WHEN id = 1 THEN NULL ELSE messages END AS messages")
    with pytest.raises(ContextPlanError, match=r"messages\[1\].*got null"):
        reduce_table(relation, POLICY)


def test_duckdb_without_python_scans_is_a_clear_error(con):
    relation = con.from_arrow(arrow_table())
    con.execute("SET python_enable_replacements = false")
    with pytest.raises(ValueError, match="python_enable_replacements"):
        reduce_table(relation, POLICY)


# ---------------------------------------------------------------------------------------------
# Errors as the Arrow path gives them


def test_a_missing_column_is_named_for_every_kind(con):
    for table in (pl.from_arrow(arrow_table()), con.from_arrow(arrow_table())):
        with pytest.raises(ContextPlanError, match="no column 'msgs'") as exc:
            reduce_table(table, POLICY, column="msgs")
        assert exc.value.codes == ["missing-column"]


def test_other_kinds_are_a_type_error_listing_the_accepted_ones():
    accepted = "a pyarrow Table or RecordBatch, a Polars DataFrame or a DuckDB relation"
    for wrong in (ROWS, {"messages": ROWS}, pl.Series([1]), arrow_table().column(0)):
        with pytest.raises(TypeError, match=f"expected {accepted}, got {type(wrong).__name__}"):
            reduce_table(wrong, POLICY)


def test_a_bad_policy_is_an_error_before_a_relation_runs(con):
    relation = con.sql("SELECT error('the relation ran') AS messages")
    with pytest.raises(ContextPolicyError):
        reduce_table(relation, {"mode": "reduce", "steps": [{"kind": "trim"}]})


def test_the_batch_layer_imports_neither_engine():
    probe = ("import sys, pyarrow as pa\n"
             "from contextpolicy.batch import reduce_table\n"
             "reduce_table(pa.table({'messages': [[{'role': 'user', 'content': 'hi'}]]}),"
             " {'mode': 'validate'})\n"
             "try:\n    reduce_table([], {'mode': 'validate'})\n"
             "except TypeError:\n    pass\n"
             "print(sorted(m for m in ('polars', 'duckdb') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                         check=True)
    assert out.stdout.strip() == "[]"


# ---------------------------------------------------------------------------------------------
# Only the messages column goes through Arrow: the other columns come back as they were


def test_polars_columns_arrow_cannot_hold_come_back_as_they_were():
    payloads = [{"user": i} for i in range(4)]
    frame = pl.from_arrow(arrow_table()).with_columns(
        meta=pl.Series(payloads, dtype=pl.Object),
        big=pl.Series([2**100, -(2**90), 0, 1], dtype=pl.Int128),
        ubig=pl.Series([2**120, 0, 1, 2], dtype=pl.UInt128))
    out = reduce_table(frame, POLICY)
    assert out.table.schema == frame.schema
    # The objects themselves, not their addresses as bytes.
    assert all(a is b for a, b in zip(out.table["meta"].to_list(), payloads, strict=True))
    assert out.table["big"].to_list() == [2**100, -(2**90), 0, 1]
    assert out.table["ubig"].to_list() == [2**120, 0, 1, 2]
    assert out.table.columns == frame.columns
    assert_same_as_arrow(out.table.select("id", "name", "messages").to_arrow(),
                         out.figures.to_arrow(), arrow_table())
    # Nothing reduced: the same again.
    same = reduce_table(frame, {"mode": "validate"}).table
    assert same.schema == frame.schema and same["meta"].to_list()[0] is payloads[0]


def test_polars_categorical_and_enum_roles():
    roles = pl.Enum(["system", "user", "assistant", "tool"])
    for dtype in (pl.Categorical, roles):
        frame = pl.from_arrow(arrow_table()).with_columns(pl.col("messages").list.eval(
            pl.element().struct.with_fields(pl.field("role").cast(dtype))))
        out = reduce_table(frame, POLICY)
        assert out.table.schema == frame.schema, dtype
        assert_same_as_arrow(out.table.to_arrow(), out.figures.to_arrow(), arrow_table())


DUCKDB_TYPES = ("id, '01:02:03+05'::TIMETZ AS tz, '101'::BIT AS b, 'a'::mood AS e, "
                "170141183460469231731687303715884105727::HUGEINT AS h, "
                "340282366920938463463374607431768211455::UHUGEINT AS uh, "
                "'{\"x\": 1}'::JSON AS j, 'a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11'::UUID AS u")


def test_duckdb_columns_arrow_cannot_hold_come_back_as_they_were(con):
    con.from_arrow(arrow_table()).create("chats")
    con.execute("CREATE TYPE mood AS ENUM ('a', 'b')")
    relation = con.sql(f"SELECT {DUCKDB_TYPES}, messages FROM chats ORDER BY id DESC")
    out = reduce_table(relation, POLICY)
    assert out.table.columns == relation.columns and out.table.types == relation.types
    got, want = out.table.fetchall(), relation.fetchall()
    assert [r[:-1] for r in got] == [r[:-1] for r in want]
    assert got[0][1].utcoffset().total_seconds() == 5 * 3600 and got[0][2] == "101"
    picked = arrow_table().take([3, 2, 1, 0])
    assert_same_as_arrow(out.table.project("id, messages").to_arrow_table(),
                         out.figures.to_arrow_table(), picked.select(["id", "messages"]))


def test_duckdb_query_runs_once_and_its_rows_keep_their_order(con):
    con.from_arrow(arrow_table(ROWS * 50)).create("chats")
    # The order differs on every run: the output must hold one run's rows, each row's messages
    # with its own columns, in that run's order.
    relation = con.sql("SELECT id, random() AS r, messages FROM chats ORDER BY r")
    out = reduce_table(relation, POLICY)
    rows = out.table.fetchall()
    assert rows == out.table.fetchall()  # read twice: the same rows
    assert [r for _, r, _ in rows] == sorted(r for _, r, _ in rows)
    want = reduce_table(arrow_table(ROWS * 50), POLICY).table.column("messages").to_pylist()
    assert [m for _, _, m in rows] == [want[i] for i, _, _ in rows]
