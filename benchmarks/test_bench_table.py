"""``batch.reduce_table`` on Arrow tables of the chat and agent-trace corpora, against the same
user-turn trim in DuckDB SQL over the same in-memory table and against ``table.to_pylist()`` +
``process_context`` per row (whose results it must equal, row by row); and ``contextpolicy
reduce`` Parquet to Parquet against reading and writing the same file with pyarrow alone.

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
from contextpolicy.plan import with_empty_history

from .conftest import cached, measuring

TARGET = 1000
POLICY = {"mode": "reduce", "triggerChars": 2000, "targetInputChars": 1500, "steps": [
    {"id": "t", "kind": "trim", "fragmentId": "history", "targetChars": TARGET,
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


def _duckdb_sql(parts: bool, calls_too: bool) -> str:
    chars = ("coalesce(list_sum(list_transform(m.content, lambda p: length(p.text))), 0)" if parts
             else "coalesce(length(m.content), 0)")
    calls = ("coalesce(list_sum(list_transform(m.tool_calls, lambda c: coalesce(length("
             "c.function.name), 0) + coalesce(length(c.function.arguments), 0))), 0)")
    # Per conversation: system head, question tail, user turns of the history; keep the longest
    # suffix of whole turns within the target (at least one), as the trim does.
    total = f"{chars} + {calls}" if calls_too else chars
    return f"""
    WITH m AS (
      SELECT id, i, m.role AS role, {total} AS chars,
             len(messages) AS n
      FROM (SELECT id, messages, unnest(messages) AS m,
                   generate_subscripts(messages, 1) AS i FROM t)
    ), g AS (
      SELECT *, sum(CASE WHEN role = 'user' THEN 1 ELSE 0 END)
                  OVER (PARTITION BY id ORDER BY i) AS turn
      FROM m
    ), s AS (
      SELECT id, turn, min(i) AS first, sum(chars) AS gchars FROM g GROUP BY id, turn
    ), k AS (
      SELECT id, turn, first,
             sum(gchars) OVER (PARTITION BY id ORDER BY turn DESC) AS suffix,
             row_number() OVER (PARTITION BY id ORDER BY turn DESC) AS rk
      FROM s
    ), cut AS (
      SELECT id, min(first) AS first FROM k WHERE suffix <= {TARGET} OR rk = 1 GROUP BY id
    )
    SELECT t.id, list_slice(t.messages, cut.first, len(t.messages)) AS messages
    FROM t JOIN cut USING (id) ORDER BY t.id
    """


@pytest.mark.parametrize("corpus", CORPORA)
def test_duckdb_sql_trim(benchmark, request, tables, corpus):
    import duckdb

    table, _policy = tables[corpus]
    label(benchmark, table, corpus, "duckdb-sql")
    con = duckdb.connect()
    con.execute("SET threads TO 2")
    con.register("t", table)
    names = [f.name for f in table.schema.field("messages").type.value_type]
    sql = _duckdb_sql(corpus != "chats", "tool_calls" in names)
    out = benchmark.pedantic(lambda: con.sql(sql).to_arrow_table(),
                             rounds=rounds(request, 5),
                             iterations=1, warmup_rounds=1)
    assert out.num_rows == table.num_rows


def _per_row(table, policy) -> list[Any]:
    results = []
    for row in table.column("messages").to_pylist():
        plan = ContextPlan.from_messages(row)
        if not any(f.id == "history" for f in plan.fragments):
            plan = with_empty_history(plan)
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
