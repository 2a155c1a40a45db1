"""``batch.reduce_table`` on Arrow tables of the chat and agent-trace corpora, against the same
trim written in DuckDB SQL over the same in-memory table (``duckdb-sql``, whose table it must
equal; the issue's shorter sketch of it, ``duckdb-sql-sketch``, keeps other messages and is
measured beside it) and against ``table.to_pylist()`` + ``process_context`` per row (whose
results it must equal, row by row); and ``contextpolicy reduce`` Parquet to Parquet against
reading and writing the same file with pyarrow alone.

Measured: 100,000 chats and 2,000 agent traces; in the test suite (unmeasured) 2,000 and 60.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from contextpolicy import ContextPlan, process_context, synthetic
from contextpolicy.batch import reduce_table

from .conftest import cached, measuring

POLICY = {"mode": "reduce", "triggerChars": 2000, "targetInputChars": 1500, "steps": [
    {"id": "t", "kind": "trim", "fragmentId": "history", "targetChars": 1000,
     "grouping": {"kind": "user-turn"}, "keepGroups": 1}]}
TRACE_POLICY = {"mode": "reduce", "triggerChars": 40_000, "targetInputChars": 30_000, "steps": [
    {"id": "t", "kind": "trim", "fragmentId": "history", "targetChars": 20_000,
     "grouping": {"kind": "user-turn"}, "keepGroups": 1}]}


def _as_parts(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    # One Arrow column holds one type: text content as a text part, as tools that store
    # chat and block messages side by side do.
    return [dict(m, content=[{"type": "text", "text": m["content"]}])
            if isinstance(m.get("content"), str) else m for m in messages]


@pytest.fixture(scope="session")
def tables(request) -> dict[str, Any]:
    import pyarrow as pa

    full = measuring(request.config)

    def build() -> dict[str, Any]:
        chats = synthetic.corpus("chats", 100_000 if full else 2_000, 41)
        traces = synthetic.corpus("agent-traces", 2_000 if full else 60, 41)
        return {
            "chats": (pa.table({"id": list(range(len(chats))), "messages": chats}), POLICY),
            "agent-traces": (pa.table({"id": list(range(len(traces))),
                                       "messages": [_as_parts(t) for t in traces]}),
                             TRACE_POLICY),
        }

    return cached(("tables", int(full)), build)


CORPORA = ["chats", "agent-traces"]


def label(benchmark, table, corpus: str, kind: str) -> None:
    import pyarrow.compute as pc

    benchmark.group = f"reduce a table: {corpus}"
    benchmark.extra_info.update(
        kind=kind, conversations=table.num_rows,
        messages=int(pc.sum(pc.list_value_length(table.column("messages"))).as_py()))


def rounds(request, n: int) -> int:
    return n if measuring(request.config) else 1


@pytest.mark.parametrize("corpus", CORPORA)
def test_reduce_table(benchmark, request, tables, corpus):
    table, policy = tables[corpus]
    label(benchmark, table, corpus, "reduce-table")
    out = benchmark.pedantic(reduce_table, (table, policy), rounds=rounds(request, 20),
                             iterations=1, warmup_rounds=1)
    paths = out.figures.column("path").to_pylist()
    benchmark.extra_info["columnar_share"] = paths.count("columnar") / len(paths)


def _trim(policy: dict[str, Any]) -> tuple[int, int, int]:
    step = policy["steps"][0]
    return policy["triggerChars"], step["targetChars"], step["keepGroups"]


def _message_fields(table) -> tuple[list[str], list[str] | None]:
    """The message struct's field names, and its content parts' (None: content is a string)."""
    import pyarrow as pa

    message = table.schema.field("messages").type.value_type
    content = message.field("content").type
    parts = [f.name for f in content.value_type] if pa.types.is_list(content) else None
    return [f.name for f in message], parts


def _calls_sql(fields: list[str]) -> str:
    if "tool_calls" not in fields:
        return ""
    return (" + coalesce(list_sum(list_transform(m.tool_calls, lambda c: coalesce(length("
            "c.function.name), 0) + coalesce(length(c.function.arguments), 0))), 0)")


def _kept_turns_sql(target: int, keep: int) -> str:
    """From the turns ``g`` (``id``, ``i``, ``chars``, ``turn``): ``cut``, each conversation's
    first kept message, that of the longest suffix of turns within ``target`` but at least
    ``keep`` turns."""
    return f"""s AS (
      SELECT id, turn, min(i) AS first, sum(chars) AS gchars FROM g GROUP BY id, turn
    ), k AS (
      SELECT id, first,
             sum(gchars) OVER (PARTITION BY id ORDER BY turn DESC) AS suffix,
             row_number() OVER (PARTITION BY id ORDER BY turn DESC) AS rk
      FROM s
    ), cut AS (
      SELECT id, min(first) AS first FROM k WHERE suffix <= {target} OR rk <= {keep}
      GROUP BY id
    )"""


def _duckdb_sketch_sql(table, policy) -> str:
    """The issue's sketch of the trim: unnest, a running count of user messages per
    conversation, suffix sums of group chars, a filter, ``list_slice``. It is not the same
    trim: no system head or question tail, no trigger, and of the parts only the text of text
    parts is counted (not a result's content or a call's input), so it keeps other messages
    than ``reduce_table`` does."""
    fields, parts = _message_fields(table)
    _trigger, target, keep = _trim(policy)
    chars = ("coalesce(list_sum(list_transform(m.content, lambda p: length(p.text))), 0)"
             if parts is not None else "coalesce(length(m.content), 0)")
    return f"""
    WITH m AS (
      SELECT id, i, m.role AS role, {chars}{_calls_sql(fields)} AS chars,
             len(messages) AS n
      FROM (SELECT id, messages, unnest(messages) AS m,
                   generate_subscripts(messages, 1) AS i FROM t)
    ), g AS (
      SELECT *, sum(CASE WHEN role = 'user' THEN 1 ELSE 0 END)
                  OVER (PARTITION BY id ORDER BY i) AS turn
      FROM m
    ), {_kept_turns_sql(target, keep)}
    SELECT t.id, list_slice(t.messages, cut.first, len(t.messages)) AS messages
    FROM t JOIN cut USING (id) ORDER BY t.id
    """


def _duckdb_same_sql(table, policy) -> str:
    """The trim ``reduce_table`` does, in SQL, giving the same table: a message's chars as the
    accounting rules count them (text parts, a ``tool_result``'s content, a ``tool_use``'s
    name and the compact JSON of its input, thinking, tool calls' names and arguments); the
    leading system messages kept, and a final user message that carries no tool result; only
    rows above the trigger cut; the history's user turns (a user message carrying a tool
    result opens none), of which the longest suffix within the target is kept, and at least
    ``keepGroups``. (Pairing warnings are not computed.)"""
    fields, parts = _message_fields(table)
    trigger, target, keep = _trim(policy)
    if parts is None:
        chars, carrier = "coalesce(length(m.content), 0)", "false"
    else:
        kinds = ["WHEN 'text' THEN length(p.text) WHEN 'input_text' THEN length(p.text) "
                 "WHEN 'output_text' THEN length(p.text)"]
        if "content" in parts:
            kinds.append("WHEN 'tool_result' THEN length(p.content)")
        if "input" in parts:
            kinds.append("WHEN 'tool_use' THEN coalesce(length(p.name), 0) + "
                         "length(coalesce(to_json(p.input), 'null'))")
        if "thinking" in parts:
            kinds.append("WHEN 'thinking' THEN length(p.thinking)")
        chars = ("coalesce(list_sum(list_transform(m.content, lambda p: coalesce(CASE p.type "
                 + " ".join(kinds) + " ELSE 0 END, 0))), 0)")
        carrier = ("coalesce(list_bool_or(list_transform(m.content, "
                   "lambda p: p.type = 'tool_result')), false)")
    return f"""
    WITH m AS (
      SELECT id, i, n, m.role AS role, {chars}{_calls_sql(fields)} AS chars,
             m.role = 'user' AND NOT {carrier} AS opens
      FROM (SELECT id, len(messages) AS n, unnest(messages) AS m,
                   generate_subscripts(messages, 1) AS i FROM t)
    ), h AS (
      SELECT id, any_value(n) AS n, sum(chars) AS total,
             coalesce(min(i) FILTER (WHERE role NOT IN ('system', 'developer')),
                      any_value(n) + 1) - 1 AS head,
             bool_or(opens) FILTER (WHERE i = n) AS last_opens
      FROM m GROUP BY id
    ), q AS (
      SELECT id, head, CASE WHEN last_opens AND n > head THEN n - 1 ELSE n END AS tail
      FROM h WHERE total > {trigger}
    ), g AS (
      SELECT m.id, m.i, m.chars,
             sum(m.opens::INTEGER) OVER (PARTITION BY m.id ORDER BY m.i) AS turn
      FROM m JOIN q USING (id) WHERE m.i > q.head AND m.i <= q.tail
    ), {_kept_turns_sql(target, keep)}
    SELECT t.id, CASE WHEN cut.first IS NULL THEN t.messages
                      ELSE list_concat(list_slice(t.messages, 1, q.head),
                                       list_slice(t.messages, cut.first, len(t.messages)))
                 END AS messages
    FROM t LEFT JOIN cut USING (id) LEFT JOIN q USING (id) ORDER BY t.id
    """


DUCKDB_SQL = {"duckdb-sql": _duckdb_same_sql, "duckdb-sql-sketch": _duckdb_sketch_sql}


@pytest.mark.parametrize("kind", list(DUCKDB_SQL))
@pytest.mark.parametrize("corpus", CORPORA)
def test_duckdb_sql_trim(benchmark, request, tables, corpus, kind):
    import duckdb
    import pyarrow.compute as pc

    table, policy = tables[corpus]
    label(benchmark, table, corpus, kind)
    con = duckdb.connect()
    con.execute("SET threads TO 2")
    con.register("t", table)
    sql = DUCKDB_SQL[kind](table, policy)
    out = benchmark.pedantic(lambda: con.sql(sql).to_arrow_table(),
                             rounds=rounds(request, 5),
                             iterations=1, warmup_rounds=1)
    assert out.column("id").to_pylist() == table.column("id").to_pylist()
    reduced = reduce_table(table, policy).table.column("messages").combine_chunks()
    if kind == "duckdb-sql":
        # The same trim: the same table, message for message.
        assert out.column("messages").combine_chunks().equals(reduced)
    else:
        # The sketch keeps other messages (no head or tail, no trigger, fewer chars counted).
        got = out.column("messages").combine_chunks()
        assert pc.list_value_length(got).to_pylist() != pc.list_value_length(reduced).to_pylist()


def _per_row(table, policy) -> list[Any]:
    results = []
    for row in table.column("messages").to_pylist():
        plan = ContextPlan.from_messages(row)
        results.append(process_context(plan, policy).input)
    return results


@pytest.mark.parametrize("corpus", CORPORA)
def test_to_pylist_and_process_context(benchmark, request, tables, corpus):
    table, policy = tables[corpus]
    label(benchmark, table, corpus, "to-pylist+process-context")
    got = benchmark.pedantic(_per_row, (table, policy), rounds=rounds(request, 2), iterations=1)
    # The same messages, row by row (Arrow holds every field: null where a key is missing).
    names = [f.name for f in table.schema.field("messages").type.value_type]
    reduced = reduce_table(table, policy).table.column("messages").to_pylist()
    assert reduced == [[{k: m.get(k) for k in names} for m in row] for row in got]


# ---------------------------------------------------------------------------------------------
# Parquet to Parquet through the command line

SCRIPT = Path(sys.executable).with_name("contextpolicy")


@pytest.fixture(scope="session")
def parquet_file(tables, tmp_path_factory) -> tuple[Path, Path]:
    import json

    import pyarrow.parquet as pq

    root = tmp_path_factory.mktemp("bench-parquet")
    table, policy = tables["chats"]
    pq.write_table(table, root / "chats.parquet", row_group_size=10_000)
    (root / "policy.json").write_text(json.dumps(policy))
    return root / "chats.parquet", root / "policy.json"


def test_cli_parquet_to_parquet(benchmark, request, tables, parquet_file, tmp_path):
    source, policy = parquet_file
    label(benchmark, tables["chats"][0], "chats parquet file", "cli-reduce")
    out = tmp_path / "out.parquet"
    args = [str(SCRIPT), "reduce", str(source), "--policy", str(policy), "-o", str(out), "-q"]
    benchmark.pedantic(subprocess.run, (args,), {"check": True}, rounds=rounds(request, 5),
                       iterations=1)
    assert out.exists()


def test_pyarrow_read_and_write(benchmark, request, tables, parquet_file, tmp_path):
    source, _policy = parquet_file
    label(benchmark, tables["chats"][0], "chats parquet file", "pyarrow-read-write")
    out = tmp_path / "copy.parquet"
    code = ("import sys, pyarrow.parquet as pq; "
            "pq.write_table(pq.read_table(sys.argv[1]), sys.argv[2])")
    benchmark.pedantic(subprocess.run, ([sys.executable, "-c", code, str(source), str(out)],),
                       {"check": True}, rounds=rounds(request, 5), iterations=1)
    assert out.exists()
