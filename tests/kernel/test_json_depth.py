"""Values measured by their compact JSON (``tool_use`` inputs, non-string arguments) at and around
the JSON depth limit, on every path: ``process_context`` and its token counts, the built-in
handlers, ``reduce_table`` (columnar and per row, Arrow lists and Arrow's JSON type) and the
command line's runner (byte path on and off, one and two jobs). One rule everywhere, on the
compiled kernel and on the twin: up to ``MAX_JSON_DEPTH`` levels of arrays and objects a value is
measured exactly, deeper (or containing itself) it is a ``too-deep`` ContextPlanError naming
where, whatever the interpreter's stack allows."""

from __future__ import annotations

import json
import sys
from typing import Any

import orjson
import pyarrow as pa
import pytest

from contextpolicy import ContextPlan, ContextPlanError, process_context
from contextpolicy._tables import MAX_JSON_DEPTH
from contextpolicy.batch import reduce_table
from contextpolicy.handlers import clear_tool_results, summarize, truncate_messages
from contextpolicy.jsonl import runner
from contextpolicy.jsonl.files import InputFile, dumps_exactly
from contextpolicy.jsonl.worker import LineWorker
from tests.support.hostile_objects import deep_dict
from tests.support.tables import expected, filled

pytestmark = pytest.mark.usefixtures("pipeline_kernel")

LIMIT = MAX_JSON_DEPTH
AROUND = [LIMIT - 1, LIMIT, LIMIT + 1]
TOO_DEEP = (f"the JSON value nests arrays and objects deeper than {LIMIT} levels (or contains "
            "itself)")


def deep_list(levels: int) -> Any:
    value: Any = 1
    for _ in range(levels):
        value = [value]
    return value


def same(a: Any, b: Any) -> bool:
    # Deep values compared by their JSON (== recurses as deep as they nest).
    return dumps_exactly(a) == dumps_exactly(b)


def json_chars(value: Any) -> int:
    # The compact JSON of deep_list / deep_dict, counted by its shape (json.dumps cannot write
    # them within the interpreter's default stack).
    levels, inner = 0, value
    while isinstance(inner, (list, dict)):
        inner = inner[0] if isinstance(inner, list) else inner["k"]
        levels += 1
    return levels * (2 if isinstance(value, list) else len('{"k":}')) + 1


# Each place a value is measured by its JSON: the messages around it, the value's chars beside
# it (a tool's name, counted too), and the field the error names.
def tool_use(value: Any) -> tuple[list[dict[str, Any]], int, str]:
    return ([{"role": "assistant", "content": [
        {"type": "tool_use", "id": "t1", "name": "lookup", "input": value}]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t1",
                                      "content": "found"}]}],
            len("lookup") + len("found"), "content[0].input")


def tool_call(value: Any) -> tuple[list[dict[str, Any]], int, str]:
    return ([{"role": "assistant", "content": None, "tool_calls": [
        {"id": "c1", "type": "function", "function": {"name": "lookup", "arguments": value}}]},
        {"role": "tool", "tool_call_id": "c1", "content": "found"}],
            len("lookup") + len("found"), "tool_calls[0].function.arguments")


def function_call(value: Any) -> tuple[list[dict[str, Any]], int, str]:
    return ([{"type": "function_call", "call_id": "c1", "name": "lookup", "arguments": value},
             {"type": "function_call_output", "call_id": "c1", "output": "found"}],
            len("lookup") + len("found"), "arguments")


def custom_call(value: Any) -> tuple[list[dict[str, Any]], int, str]:
    return ([{"type": "custom_tool_call", "call_id": "c1", "name": "lookup", "input": value},
             {"type": "custom_tool_call_output", "call_id": "c1", "output": "found"}],
            len("lookup") + len("found"), "input")


PLACES = {"tool_use": tool_use, "tool_call": tool_call, "function_call": function_call,
          "custom_call": custom_call}
SHAPES = {"lists": deep_list, "objects": deep_dict}


def transcript(place: str, value: Any) -> tuple[list[dict[str, Any]], int, str]:
    calls, chars, field = PLACES[place](value)
    messages = [{"role": "user", "content": "look it up"}, *calls,
                {"role": "user", "content": "and now?"}]
    return messages, len("look it up") + chars, field


REDUCE_UNTRIGGERED = {"mode": "reduce", "triggerChars": 10**9, "steps": [
    {"id": "trim", "kind": "trim", "fragmentId": "history", "targetChars": 0, "keepGroups": 0,
     "grouping": {"kind": "user-turn"}}]}


@pytest.mark.parametrize("shape", list(SHAPES))
@pytest.mark.parametrize("place", list(PLACES))
@pytest.mark.parametrize("levels", AROUND)
def test_process_context_measures_to_the_limit_and_refuses_past_it(levels, place, shape):
    value = SHAPES[shape](levels)
    messages, chars, field = transcript(place, value)
    plan = ContextPlan.from_messages(messages)
    if levels > LIMIT:
        with pytest.raises(ContextPlanError) as info:
            process_context(plan, REDUCE_UNTRIGGERED)
        (issue,) = info.value.issues
        assert (issue.path, issue.message, issue.code) == (
            f"fragments[history].messages[1].{field}", TOO_DEEP, "too-deep")
        return
    # Tokens come from the same text pieces as chars: a counter of code points agrees.
    result = process_context(plan, REDUCE_UNTRIGGERED, counter=len)
    expected = chars + json_chars(value) + len("and now?")
    assert result.report.before.chars == expected
    assert result.report.before.tokens == expected


def test_the_limit_holds_whatever_the_interpreter_allows():
    value = deep_list(LIMIT)
    messages, chars, _ = transcript("tool_use", value)
    before = sys.getrecursionlimit()
    frame, depth = sys._getframe(), 0
    while frame is not None:
        frame, depth = frame.f_back, depth + 1
    try:
        sys.setrecursionlimit(depth + 150)  # far less than the value's depth
        low = process_context(ContextPlan.from_messages(messages), REDUCE_UNTRIGGERED)
        sys.setrecursionlimit(100_000)  # far more than the limit
        with pytest.raises(ContextPlanError, match="too-deep"):
            process_context(ContextPlan.from_messages(transcript("tool_use", [value])[0]),
                            REDUCE_UNTRIGGERED)
    finally:
        sys.setrecursionlimit(before)
    assert low.report.before.chars == chars + json_chars(value) + len("and now?")


def compress(handler_id: str) -> dict[str, Any]:
    return {"mode": "reduce", "triggerChars": 10, "steps": [
        {"id": "c", "kind": "compress", "fragmentId": "history", "handlerId": handler_id,
         "targetChars": 0}]}


@pytest.mark.parametrize("levels", AROUND)
def test_every_builtin_handler_keeps_a_deep_input_as_it_is(levels):
    value = deep_list(levels)
    messages, _, _ = transcript("tool_use", value)
    messages[2]["content"][0]["content"] = "found " * 50
    seen: list[str] = []

    def summariser(text: str, target: int) -> str:
        seen.append(text)
        return "short"

    handlers = {"truncate-messages": truncate_messages(max_chars=20),
                "clear-tool-results": clear_tool_results(keep=0, min_chars=1),
                "summarize": summarize(summariser)}
    for handler_id, handler in handlers.items():
        plan = ContextPlan.from_messages(messages)
        if levels > LIMIT:
            with pytest.raises(ContextPlanError, match="too-deep"):
                process_context(plan, compress(handler_id), handlers={handler_id: handler})
            continue
        result = process_context(plan, compress(handler_id), handlers={handler_id: handler},
                                 on_step_error="raise")
        step = result.report.steps[0]
        assert step.status == "applied", (handler_id, step)
        if handler_id == "summarize":
            # The summariser read the input as its JSON, at its full depth.
            assert dumps_exactly(value).decode() in seen[-1]
        else:
            (kept,) = [m for m in result.input if m.get("role") == "assistant"]
            assert same(kept["content"][0]["input"], value)  # left as it was
    assert messages[1]["content"][0]["input"] is value and same(value, deep_list(levels))


@pytest.mark.parametrize("levels", AROUND)
def test_clearing_a_deep_input_counts_what_was_there(levels):
    # an object (clear_inputs empties only inputs that are JSON objects), as deep as ``levels``
    value = {"k": deep_list(levels - 1)}
    messages, _, _ = transcript("tool_use", value)
    messages[2]["content"][0]["content"] = "found " * 50
    handler = clear_tool_results(keep=0, min_chars=1, clear_inputs=True)
    plan = ContextPlan.from_messages(messages)
    if levels > LIMIT:
        with pytest.raises(ContextPlanError, match="too-deep"):
            process_context(plan, compress("clear-tool-results"),
                            handlers={"clear-tool-results": handler})
        return
    result = process_context(plan, compress("clear-tool-results"),
                             handlers={"clear-tool-results": handler})
    call, answer = result.input[1:3]
    assert call["content"][0]["input"] == {}
    placeholder = answer["content"][0]["content"]
    assert placeholder == "[tool result cleared: 300 chars]"
    assert result.report.before.chars - result.report.after.chars == (
        len('{"k":}') + json_chars(deep_list(levels - 1)) - len("{}") + len("found " * 50) - len(placeholder))
    assert same(messages[1]["content"][0]["input"], {"k": deep_list(levels - 1)})  # kept


def figures_of(out: Any) -> list[int]:
    return out.figures.column("chars_before").to_pylist()


# ---------------------------------------------------------------------------------------------
# reduce_table: the columnar path (Arrow buffers, then the values) and the object path per row


def table_rows(levels: int) -> list[list[dict[str, Any]]]:
    # Every content a list of parts, so that Arrow infers one struct type for them all.
    def text(role: str, words: str) -> dict[str, Any]:
        return {"role": role, "content": [{"type": "text", "text": words}]}

    deep = [{"role": "assistant", "content": [
        {"type": "tool_use", "id": "t1", "name": "lookup", "input": deep_list(levels)}]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t1",
                                      "content": "found " * 40}]}]
    return [[text("user", "an older question"), text("assistant", "an older answer"),
             text("user", "look it up"), *deep, text("user", "and now?")],
            [text("user", "a row without a deep input"), text("assistant", "fine")]]


TRIM = {"mode": "reduce", "triggerChars": 10, "steps": [
    {"id": "trim", "kind": "trim", "fragmentId": "history", "targetChars": 0, "keepGroups": 1,
     "grouping": {"kind": "user-turn"}}]}


@pytest.mark.parametrize("policy", ["trim", "compress"])
@pytest.mark.parametrize("levels", AROUND)
def test_reduce_table_measures_to_the_limit_and_refuses_past_it(levels, policy):
    table = pa.table({"messages": table_rows(levels)})
    doc = TRIM if policy == "trim" else compress("truncate-messages")
    kwargs: dict[str, Any] = {} if policy == "trim" else {
        "handlers": {"truncate-messages": truncate_messages(max_chars=20)}}
    if levels > LIMIT:
        with pytest.raises(ContextPlanError) as info:
            reduce_table(table, doc, **kwargs)
        (issue,) = info.value.issues
        assert (issue.path, issue.message, issue.code) == (
            "messages[0][3].content[0].input", TOO_DEEP, "too-deep")
        return
    out = reduce_table(table, doc, **kwargs)
    assert out.figures.column("path").to_pylist() == (
        ["columnar", "columnar"] if policy == "trim" else ["object", "object"])
    # Each row as process_context has it, the deep input kept in the output as it was.
    rows = table.column("messages").to_pylist()
    names = [f.name for f in table.schema.field("messages").type.value_type]
    got = out.table.column("messages").to_pylist()
    for row, figures, messages in zip(rows, out.figures.to_pylist(), got, strict=True):
        result = expected(row, doc, **kwargs)
        report = result.report
        assert same(messages, filled(result.input, names))
        assert (figures["chars_before"], figures["chars_after"], figures["messages_after"]) == (
            report.before.chars, report.after.chars, report.after.messages)
    (call,) = [m for m in got[0] if m["role"] == "assistant" and m["content"][0]["input"]]
    assert same(call["content"][0]["input"], deep_list(levels))
    words = ("an older question", "an older answer", "look it up", "lookup", "found " * 40,
             "and now?")
    assert figures_of(out)[0] == sum(map(len, words)) + json_chars(deep_list(levels))


@pytest.mark.parametrize("levels", AROUND)
def test_reduce_table_reads_json_content_to_the_limit(levels):
    # Content held as Arrow's JSON type: the text of a field nests at most the limit, as a JSONL
    # line does (here a list of one tool_use part whose input fills the rest).
    content = [{"type": "tool_use", "id": "t1", "name": "f", "input": deep_list(levels - 2)}]
    storage = pa.struct([("role", pa.string()), ("content", pa.string())])
    typed = pa.list_(pa.struct([("role", pa.string()), ("content", pa.json_())]))
    rows = [[{"role": "user", "content": '"q"'},
             {"role": "assistant", "content": dumps_exactly(content).decode()},
             {"role": "user", "content": '"again"'}]]
    table = pa.table({"messages": pa.array(rows, type=pa.list_(storage)).cast(typed)})
    if levels > LIMIT:
        with pytest.raises(ContextPlanError) as info:
            reduce_table(table, TRIM)
        (issue,) = info.value.issues
        assert (issue.path, issue.code) == ("messages[0][1].content", "too-deep")
        assert f"deeper than {LIMIT} levels" in issue.message
        return
    out = reduce_table(table, TRIM)
    assert out.figures.column("chars_before").to_pylist() == [
        len("q") + len("f") + json_chars(deep_list(levels - 2)) + len("again")]


# ---------------------------------------------------------------------------------------------
# The command line's runner: a line nests at most the limit (what orjson reads), and every value
# in a line that reads is measured exactly, with the byte path on (lines deeper than its own
# scan depth go to the object path) and off, in this process and in a worker


LINE_DEPTH = 5  # a transcript line, its messages, a message, its content, a part


def runner_outcome(path: Any, policy: dict[str, Any], byte_path: bool,
                   jobs: int) -> list[tuple[Any, ...]]:
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(LineWorker, "byte_path", byte_path)
        with InputFile(str(path)) as source:
            return [(r.line, r.output, r.report, r.error, r.scanned)
                    for r in runner.process_lines(source.ranges(1 << 20, workers=jobs),
                                                  policy, jobs=jobs, with_reports=True)]


@pytest.mark.parametrize("jobs", [1, 2])
def test_runner_measures_every_line_that_reads_and_names_the_one_too_deep(tmp_path, jobs):
    depths = [58, 59, 60, LIMIT - LINE_DEPTH - 1, LIMIT - LINE_DEPTH, LIMIT - LINE_DEPTH + 1]
    docs = []
    for levels in depths:
        messages, _, _ = transcript("tool_use", deep_list(levels))
        docs.append({"id": f"depth-{levels}", "messages": messages})
    path = tmp_path / "deep.jsonl"
    path.write_bytes(b"".join(dumps_exactly(doc) + b"\n" for doc in docs))
    on = runner_outcome(path, REDUCE_UNTRIGGERED, True, jobs)
    off = runner_outcome(path, REDUCE_UNTRIGGERED, False, jobs)
    assert [r[:4] for r in on] == [r[:4] for r in off]
    assert [r[0] for r in on] == [1, 2, 3, 4, 5, 6]
    # Lines of up to the byte path's scan depth are read as bytes, deeper ones as objects.
    assert [r[4] for r in on] == [1, 1, 0, 0, 0, 0]
    for (line, output, report, error, _), levels, doc in zip(on, depths, docs, strict=True):
        if levels + LINE_DEPTH > LIMIT:
            assert output is None and "invalid JSON: depth limit exceeded" in error, error
            continue
        assert error is None, (line, error)
        assert bytes(output) == dumps_exactly(doc) + b"\n"  # untouched, written back whole
        _, chars, _ = transcript("tool_use", deep_list(levels))
        assert json.loads(report)["report"]["before"]["chars"] == (
            chars + json_chars(deep_list(levels)) + len("and now?"))


def test_the_limit_is_the_depth_orjson_reads():
    # A line, or a JSON field, holds nothing deeper than the kernels measure, and everything it
    # can hold they measure.
    orjson.loads(b"[" * LIMIT + b"]" * LIMIT)
    with pytest.raises(orjson.JSONDecodeError, match="depth"):
        orjson.loads(b"[" * (LIMIT + 1) + b"]" * (LIMIT + 1))
