"""``reduce_lines``: transcript JSONL lines read and written as bytes.

Both kernels (the compiled scanner and the twin that states its rules over byte spans) must
agree on every input, byte for byte and error for error (the ``differential`` fixture); every
line they handle must agree with the object path (``orjson.loads`` and
``_kernel_py.reduce_transcript``); and the JSONL runner must give the same outputs, figures,
reports and errors with the byte path on and off.

Lines are generated as documents (chat messages, Anthropic blocks, tool calls, Responses items,
unicode) and serialised in several ways (orjson, ``json.dumps`` ASCII and UTF-8, a writer that
puts whitespace between tokens, escapes characters and keys and repeats keys), then mutated at
the byte level (truncations, stray bytes, invalid UTF-8, control characters, trailing garbage).
"""

from __future__ import annotations

import array
import json
import mmap
import random
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from contextpolicy import _kernel, _kernel_py, check_input_budget
from contextpolicy._records import FragmentFigures
from contextpolicy._tables import LINE_FIGURE
from contextpolicy.jsonl import digits, runner
from contextpolicy.jsonl.diagnose import json_problem
from contextpolicy.jsonl.files import InputFile
from contextpolicy.jsonl.worker import LineWorker
from contextpolicy.synthetic import corpus
from tests.support.lines import (
    HYPOTHESIS,
    POLICIES,
    SEED_POLICY,
    SERIALISERS,
    VALID_UTF8,
    VALIDATE_POLICY,
    Writer,
    expected_figures,
    expected_records,
    frame,
    generated_lines,
    json_value,
    message,
    mutate,
    run_lines,
    serialise,
    trim_policy,
)

SCAN_FIGURES = _kernel_py.SCAN_FIGURES
SCAN_DEPTH = _kernel_py.SCAN_DEPTH
SCAN_KEYS = _kernel_py.SCAN_KEYS
SCAN_NUMBER = _kernel_py.SCAN_NUMBER
ROOT = Path(__file__).resolve().parents[2]

# ---------------------------------------------------------------------------------------------
# the object path, and checks of one call against it


# Where a line's figures are (LINE_FIGURES).
HANDLED, CHARS = LINE_FIGURE["handled"], LINE_FIGURE["chars_before"]
ORPHANS, UNANSWERED = LINE_FIGURE["orphan_results"], LINE_FIGURE["unanswered_calls"]


def strict_equal(a: Any, b: Any) -> bool:
    """Equal, and of the same types all the way down (a list is not a tuple, True is not 1)."""
    if isinstance(a, (tuple, list)) or isinstance(b, (tuple, list)):
        return (type(a) is type(b) and len(a) == len(b)
                and all(strict_equal(x, y) for x, y in zip(a, b)))
    return type(a) is type(b) and a == b


def exact_loads(b: bytes) -> Any:
    # Python's json reads integers exactly (orjson reads those beyond 64 bits as floats).
    return json.loads(b.decode("utf-8"))


def rows(figures: Any) -> Any:
    """reduce_lines' figures (flat, SCAN_FIGURES a line) as a numpy array of one row a line."""
    return np.asarray(figures).reshape(-1, SCAN_FIGURES)


def run_both(differential, data, starts, stops, steps, trig, wm):
    """reduce_lines on every kernel, with and without raw records (the same out, ends and
    figures either way)."""
    result = differential("reduce_lines", data, starts, stops, steps, trig, wm, True)
    plain = differential("reduce_lines", data, starts, stops, steps, trig, wm, False)
    assert bytes(plain[0]) == bytes(result[0])
    assert np.array_equal(plain[1], result[1]) and np.array_equal(plain[2], result[2])
    assert plain[3] is None
    return result


def check_call(differential, data: bytes, starts: list[int], stops: list[int], steps: Any,
               trig: int, wm: int) -> list[int]:
    """Both kernels agree, and every handled line agrees with the object path; returns which
    lines were handled."""
    out, ends, figures, raws = run_both(differential, data, starts, stops, steps, trig, wm)
    out = bytes(out)
    n = len(starts)
    # array.array("q"), numpy not needed; the figures flat, SCAN_FIGURES a line
    assert isinstance(ends, array.array) and ends.typecode == "q" and len(ends) == n
    assert isinstance(figures, array.array) and figures.typecode == "q"
    assert len(figures) == n * SCAN_FIGURES
    figures = rows(figures)
    assert isinstance(raws, list) and len(raws) == n
    assert (n == 0 and out == b"") or ends[-1] == len(out)
    handled = []
    at = 0
    for k in range(n):
        line = bytes(data[starts[k]:stops[k]])
        piece = out[at:ends[k]]
        at = int(ends[k])
        if not figures[k, 0]:
            assert piece == b"" and raws[k] is None and not figures[k].any(), k
            handled.append(0)
            continue
        handled.append(1)
        assert figures[k, 0] == 1
        check_handled(line, piece, figures[k].tolist(), raws[k], starts[k], data, steps, trig,
                      wm)
    return handled


def check_handled(line: bytes, piece: bytes, row: list[int], raw: Any, start: int, data: bytes,
                  steps: Any, trig: int, wm: int) -> None:
    doc = orjson.loads(line)  # a handled line is JSON orjson reads ...
    assert type(doc) is dict and type(doc.get("messages")) is list and "fragments" not in doc
    messages = doc["messages"]
    records = expected_records(messages, steps, trig, wm)
    assert raw is not None
    got_records, id_span = raw
    assert strict_equal(got_records, records), (line, got_records, records)
    expected = expected_figures(records, steps, wm)
    assert row == expected, (line, row, expected)
    # the id: where its value lies in data
    if "id" in doc:
        assert id_span is not None
        assert orjson.loads(bytes(data[id_span[0]:id_span[1]])) == doc["id"]
        assert start <= id_span[0] < id_span[1] <= start + len(line)
    else:
        assert id_span is None
    # the output line: the document with the kept messages
    assert piece[-1:] == b"\n"
    body = piece[:-1]
    head, tail = _kernel_py.split_transcript(messages)
    ids, after = records.ids, records.after
    n_after = after[ids.index("history")].messages if "history" in ids else tail - head
    exact = exact_loads(line)
    jm = exact["messages"]
    exact["messages"] = jm[:head] + jm[tail - n_after:tail] + jm[tail:]
    assert exact_loads(body) == exact, (line, body)
    stripped = line.strip(b" \t\r\n")
    if n_after == tail - head:  # nothing removed: the line as it is
        assert body == stripped
        return
    assert row[LINE_FIGURE["messages_removed"]] == tail - head - n_after
    # the kept messages byte for byte, and everything around the array as it was
    text, out_text = stripped.decode(), body.decode()
    (lo, hi), spans = message_spans(text)
    (out_lo, out_hi), out_spans = message_spans(out_text)
    kept = spans[:head] + spans[tail - n_after:]
    assert out_text[:out_lo] == text[:lo] and out_text[out_hi:] == text[hi:]
    assert out_text[out_lo:out_hi] == "[" + ",".join(text[a:b] for a, b in kept) + "]"
    assert [out_text[a:b] for a, b in out_spans] == [text[a:b] for a, b in kept]


_DECODER = json.JSONDecoder()


def _skip(text: str, i: int) -> int:
    while i < len(text) and text[i] in " \t\n\r":
        i += 1
    return i


def message_spans(text: str) -> tuple[tuple[int, int], list[tuple[int, int]]]:
    """Where the ``messages`` array of a JSON object text lies, and each message in it (found
    with Python's own JSON scanner, independently of the kernels)."""
    i = _skip(text, 0)
    assert text[i] == "{"
    i = _skip(text, i + 1)
    while True:
        key, i = _DECODER.raw_decode(text, i)
        i = _skip(text, i)
        assert text[i] == ":"
        i = _skip(text, i + 1)
        if key == "messages":
            start, spans = i, []
            j = _skip(text, i + 1)
            while text[j] != "]":
                _, end = _DECODER.raw_decode(text, j)
                spans.append((j, end))
                j = _skip(text, end)
                if text[j] == ",":
                    j = _skip(text, j + 1)
            return (start, j + 1), spans
        _, i = _DECODER.raw_decode(text, i)
        i = _skip(text, i)
        assert text[i] == ","
        i = _skip(text, i + 1)


# ---------------------------------------------------------------------------------------------
# documents


# mostly text that serialises, sometimes with lone surrogates (the shared strategy)
# now and then a message of the shared strategies: Responses items (the object path), invalid
# messages (the object path's errors), every role
# ---------------------------------------------------------------------------------------------
# serialisers


steps_st = st.lists(
    st.tuples(st.just("history"), st.sampled_from([0, 1]), st.integers(0, 4),
              st.integers(0, 400) | st.just(0)),
    max_size=3,
).map(tuple)
limits = st.sampled_from([-1, 0, 1, 10, 40, 100, 300, 10**6]) | st.integers(-1, 600)


@st.composite
def calls(draw) -> tuple[Any, ...]:
    return draw(steps_st), draw(limits), draw(limits)


# ---------------------------------------------------------------------------------------------
# 1. generated lines: both kernels agree, and agree with the object path


@HYPOTHESIS
@given(generated_lines(), calls(), st.randoms(use_true_random=False))
def test_generated_lines_agree_with_the_object_path(differential, lines, call, rnd):
    steps, trig, wm = call
    data, starts, stops = frame(lines, rnd)
    check_call(differential, data, starts, stops, steps, trig, wm)


def _with_inputs(values: list[Any], written: list[bytes]) -> bytes:
    """A plainly written line whose tool inputs and non-string arguments are ``written`` (the
    JSON text of ``values``, written any way): each value a ``tool_use`` input and a tool call's
    arguments."""
    messages: list[Any] = [{"role": "user", "content": "go"}]
    for i in range(len(values)):
        messages.append({"role": "assistant", "content": [
            {"type": "tool_use", "id": f"t{i}", "name": "f", "input": f"@{i}@"}]})
        messages.append({"role": "assistant", "content": None, "tool_calls": [{
            "id": f"c{i}", "type": "function", "function": {"name": "f", "arguments": f"@{i}@"}}]})
    line = orjson.dumps({"id": "x", "messages": messages})
    for i, text in enumerate(written):
        line = line.replace(b'"@%d@"' % i, text)
    return line


@settings(HYPOTHESIS, max_examples=300)
@given(st.lists(json_value.filter(lambda v: isinstance(v, (dict, list))), min_size=1,
                max_size=3), st.randoms(use_true_random=False))
def test_tool_inputs_are_counted_as_their_compact_json(differential, values, rnd):
    # A tool input (and a tool call's arguments that are not a string) counts as the compact
    # JSON of its value: written with whitespace, escapes, escaped and repeated keys (the last
    # one wins) and numbers in other forms, it counts what the object path counts.
    writer = Writer(rnd, ws=0.3, escape=0.3, key_escape=0.2, dup=0.3, numbers=0.3)
    line = _with_inputs(values, [writer.dumps(v) for v in values])
    data, starts, stops = frame([line])
    handled = check_call(differential, data, starts, stops, (), -1, -1)
    try:
        orjson.loads(line)
    except orjson.JSONDecodeError:
        return
    if not digits.long_digit_runs(line):  # only a run of 19 digits sends it to the objects
        assert handled == [1], line


@pytest.mark.parametrize("text", [
    rb'{"a":1,"a":2}', rb'{"a":{"b":1,"b":[1,2]},"c":0}', rb'{"a\u0062":1,"ab":2}',
    rb'{"k":-0,"l":[-0,0,-1]}', rb'{"x":"\u0000\u001f\b\t\n\f\r\"\\\/"}',
    rb'{"e":"\ud83d\ude00\u00e9\u20ac"}', rb'{"f":1.0,"g":1e5,"h":-0.0}',
    b'{' + b",".join(b'"k%d":%d' % (i, i) for i in range(17)) + b'}',
    b'[ {"a" : [ 1 , "x" , null , true , false ] } , [ ] , { } ]',
    '{"\u00e9":1,"\\u00e9":2}'.encode(), rb'{"a":"\u0041","b":"\u005c\u0022"}',
])
def test_tool_inputs_that_need_care_are_counted_as_the_objects_are(differential, text):
    line = _with_inputs([orjson.loads(text)], [text])
    data, starts, stops = frame([line])
    assert check_call(differential, data, starts, stops, (), -1, -1) == [1]
    messages = orjson.loads(line)["messages"]
    assert rows(differential("reduce_lines", data, starts, stops, (), -1, -1, False)[2])[
        0, CHARS] == check_input_budget(messages).chars


@settings(HYPOTHESIS, max_examples=150)
@given(st.lists(message, min_size=1, max_size=8), calls(), st.sampled_from(SERIALISERS),
       st.randoms(use_true_random=False))
def test_chat_transcripts_in_every_serialisation(differential, messages, call, how, rnd):
    # Chat messages only (every one of the byte path's shapes), under every serialiser: what
    # serialises to JSON orjson reads, with no key repeated or escaped, is handled.
    steps, trig, wm = call
    doc = {"id": "x", "messages": [{"role": "system", "content": "be brief"}, *messages]}
    line = serialise(doc, how, rnd)
    data, starts, stops = frame([line])
    handled = check_call(differential, data, starts, stops, steps, trig, wm)
    if how in ("orjson", "utf-8", "whitespace") and plainly_written(line):
        assert handled == [1], line


def _escaped(value: Any) -> bool:
    # a str that JSON without ensure_ascii writes with an escape
    return isinstance(value, str) and any(c in '"\\' or ord(c) < 0x20 for c in value)


def plainly_written(line: bytes) -> bool:
    """Whether a line of chat messages written without needless escapes must take the byte
    path: JSON orjson reads, no lone surrogate, no run of 19 digits, no id that needs an escape,
    and messages the object path measures without an error."""
    try:
        doc = orjson.loads(line)
    except orjson.JSONDecodeError:
        return False
    if "\\ud" in json.dumps(doc) or digits.long_digit_runs(line):
        return False
    for m in doc["messages"]:
        ids = [m.get("tool_call_id")]
        ids += [c.get("id") for c in m.get("tool_calls") or []]
        parts = list(m["content"]) if isinstance(m.get("content"), list) else []
        while parts:
            p = parts.pop()
            if isinstance(p, dict):
                ids += [p.get("id"), p.get("tool_use_id")]
                if isinstance(p.get("content"), list):
                    parts += p["content"]
        if any(map(_escaped, ids)):
            return False
    try:
        _kernel_py.reduce_transcript(doc["messages"], (), -1, -1)
    except ValueError:  # ContextPlanError
        return False
    return True


TOOL_IDS = st.sampled_from(['"a"', '"b"', '"c"', '"é"', '"a b"', "null", "7", None])


@st.composite
def tool_message(draw) -> str:
    """One message of tool traffic, as JSON text: calls (tool_calls, tool_use blocks) and
    results (tool messages, tool_result blocks) by a few ids, some without one."""
    words = '"' + "w" * draw(st.integers(0, 30)) + '"'
    ids = draw(st.lists(TOOL_IDS, max_size=3))

    def field(name: str, value: str | None) -> str:
        return "" if value is None else f',"{name}":{value}'

    kind = draw(st.integers(0, 8))
    if kind == 0:
        return '{"role":"user","content":' + words + "}"
    if kind == 1:
        return '{"role":"assistant","content":' + words + "}"
    if kind == 2:
        calls_ = ",".join('{"type":"function"' + field("id", i) + ',"function":{"name":"f",'
                          '"arguments":' + words + "}}" for i in ids)
        return '{"role":"assistant","content":null,"tool_calls":[' + calls_ + "]}"
    if kind == 3:
        blocks = ",".join('{"type":"tool_use"' + field("id", i) + ',"name":"g","input":{}}'
                          for i in ids)
        return '{"role":"assistant","content":[{"type":"text","text":' + words + "}" + (
            "," + blocks if blocks else "") + "]}"
    if kind == 4:
        return ('{"role":"tool"' + field("tool_call_id", ids[0] if ids else None)
                + ',"content":' + words + "}")
    if kind == 5:
        blocks = ",".join('{"type":"tool_result"' + field("tool_use_id", i) + ',"content":'
                          + words + "}" for i in ids)
        return '{"role":"user","content":[' + blocks + "]}"
    if kind == 6:
        return '{"role":"function","name":"f","content":' + words + "}"
    if kind == 7:
        return '{"role":"system","content":' + words + "}"
    both = ",".join('{"type":"tool_use"' + field("id", i) + "}" for i in ids)
    results = ",".join('{"type":"tool_result"' + field("tool_use_id", i) + "}" for i in ids)
    return ('{"role":"' + draw(st.sampled_from(["assistant", "user", "tool"])) + '","content":['
            + ",".join(x for x in (both, results) if x) + '],"tool_calls":[{"id":"c"}]'
            + field("tool_call_id", ids[-1] if ids else None) + "}")


@settings(HYPOTHESIS, max_examples=300)
@given(st.lists(st.lists(tool_message(), max_size=14), min_size=1, max_size=3),
       st.lists(st.tuples(st.just("history"), st.sampled_from([0, 1]), st.integers(0, 3),
                          st.integers(0, 120)), min_size=1, max_size=3).map(tuple),
       st.integers(-1, 150), st.integers(-1, 150))
def test_tool_traffic_and_trims(differential, transcripts_, steps, trig, wm):
    # The trim's cut and its pairing guard (a call kept with its results), and the pairing
    # warnings of each fragment, against the object path; several lines in one call, so that
    # the scanner's state is carried from line to line.
    lines = [('{"messages":[' + ",".join(t) + "]}").encode() for t in transcripts_]
    data, starts, stops = frame(lines)
    assert all(check_call(differential, data, starts, stops, steps, trig, wm))


@settings(HYPOTHESIS, max_examples=150)
@given(st.lists(message, min_size=1, max_size=6), st.randoms(use_true_random=False),
       st.integers(0, 10**6))
def test_every_truncation_and_every_stray_byte(differential, messages, rnd, seed):
    # One line, then that line truncated, with a byte dropped, added or replaced at a random
    # place and with invalid UTF-8 in a string, all in one buffer: where a truncated line
    # stops, the rest of it still follows in the buffer (a scanner must never read past stop).
    line = orjson.dumps({"id": seed, "messages": messages}, option=orjson.OPT_NON_STR_KEYS) \
        if _orjson_ok(messages) else json.dumps({"messages": messages}).encode()
    variants = [line] + [mutate(line, rnd) for _ in range(6)]
    data = b"\n".join(variants)
    starts, stops, at = [], [], 0
    for v in variants:
        starts.append(at)
        stops.append(at + len(v))
        at += len(v) + 1
    # the truncations: each a prefix of the full line, in the buffer of the full line
    cuts = sorted({rnd.randrange(len(line)) for _ in range(8)})
    starts += [0] * len(cuts)
    stops += cuts
    handled = check_call(differential, data, starts, stops, (("history", 0, 1, 10),), 5, 3)
    assert not any(handled[len(variants):]), "a proper prefix of an object is never JSON"


def _orjson_ok(value: Any) -> bool:
    try:
        orjson.dumps(value, option=orjson.OPT_NON_STR_KEYS)
    except (TypeError, orjson.JSONEncodeError):
        return False
    return True


@settings(HYPOTHESIS, max_examples=150)
@given(st.lists(st.sampled_from([
    # numbers of every form, at the top level, in a message and in measured JSON
    "0", "-0", "1", "-1", "0.5", "-0.0", "1e5", "1E+5", "1e-5", "1.5e308", "1e308", "-1e308",
    "1e400", "-1E+309", "1.797693134862315808e308", "0.1797693134862315808e309",
    "1e-400", "1.7976931348623157e308", "1.7976931348623158e308", "1.797693134862315807e308",
    "179769313486231580793728971405301e276", "2.4703282292062328e-324", "-2.47e-324",
    "4.9e-324", "2.4e-324", "123456789012345678", "1234567890123456789", "12345678901234567890",
    "18446744073709551615", "18446744073709551616", "-9223372036854775808",
    "-9223372036854775809", "123456789012345678901234567890", "1" * SCAN_NUMBER,
    "1" * (SCAN_NUMBER + 1), "-" + "1" * (SCAN_NUMBER - 1), "-" + "1" * SCAN_NUMBER,
    "0." + "1" * 18, "0." + "1" * 19, "1.0" + "0" * 60, "1e" + "0" * 61, "1e" + "0" * 62,
    "01", "1.", ".5", "+1", "-", "1e", "1e+", "0x10", "NaN", "Infinity", "-Infinity", "1_0",
    "\u0661", "１",
]), min_size=1, max_size=4), st.sampled_from(["top", "message", "input", "arguments", "id",
                                               "part", "result"]), calls())
def test_numbers_of_every_form(differential, numbers_, where, call):
    steps, trig, wm = call
    nums = "[" + ",".join(numbers_) + "]"
    messages = ['{"role":"user","content":"hello there"}']
    top = ""
    if where == "top":
        top = f',"n":{nums},"m":{numbers_[0]}'
    elif where == "id":
        top = f',"id":{numbers_[0]}'
    elif where == "message":
        messages.append(f'{{"role":"assistant","content":"ok","w":{nums},"v":{numbers_[0]}}}')
    elif where == "input":
        messages.append('{"role":"assistant","content":[{"type":"tool_use","id":"a","name":"f",'
                        f'"input":{{"a":{nums},"b":{numbers_[0]}}}}}]}}')
        messages.append('{"role":"user","content":[{"type":"tool_result","tool_use_id":"a",'
                        '"content":"r"}]}')
    elif where == "arguments":
        messages.append('{"role":"assistant","tool_calls":[{"id":"a","function":{"name":"f",'
                        f'"arguments":{{"a":{nums}}}}}}},{{"id":"b","function":{{"arguments":'
                        f'{numbers_[0]}}}}}]}}')
        messages.append('{"role":"tool","tool_call_id":"a","content":"r"}')
    elif where == "part":
        messages.append('{"role":"assistant","content":[{"type":"image","size":'
                        f'{nums}}},{{"type":"text","text":"t","n":{numbers_[0]}}}]}}')
    else:
        messages.append('{"role":"assistant","content":[{"type":"tool_use","id":"a","input":'
                        f'{numbers_[0]}}}]}}')
        messages.append('{"role":"user","content":[{"type":"tool_result","tool_use_id":"a",'
                        f'"content":[{{"type":"image","x":{nums}}}]}}]}}')
    messages.append('{"role":"user","content":"q"}')
    line = ('{"messages":[' + ",".join(messages) + "]" + top + "}").encode()
    data, starts, stops = frame([line])
    check_call(differential, data, starts, stops, steps, trig, wm)


@settings(HYPOTHESIS, max_examples=100)
@given(st.lists(st.integers(0, 2) | st.just(3), min_size=1, max_size=12), st.integers(-2, 2),
       st.sampled_from(["top", "message", "input", "arguments", "result", "part"]))
def test_deep_nesting_at_the_limit(differential, kinds, offset, where):
    # Containers nested up to SCAN_DEPTH levels take the byte path, one level more the object
    # path, wherever the nesting is; both kernels must draw the line at the same place.
    depth_at = {"top": 1, "message": 3, "part": 5, "input": 5, "arguments": 6, "result": 5}
    levels = SCAN_DEPTH - depth_at[where] + offset
    inner = "1"
    for k in range(max(levels, 0)):
        kind = kinds[k % len(kinds)]
        inner = f"[{inner}]" if kind in (0, 3) else f'{{"k":{inner}}}' if kind == 1 else (
            f'[{inner},"x"]')
    messages = ['{"role":"user","content":"hello"}']
    top = ""
    if where == "top":
        top = f',"deep":{inner}'
    elif where == "message":
        messages.append(f'{{"role":"assistant","content":"x","deep":{inner}}}')
    elif where == "part":
        messages.append(f'{{"role":"assistant","content":[{{"type":"image","deep":{inner}}}]}}')
    elif where == "input":
        messages.append('{"role":"assistant","content":[{"type":"tool_use","id":"a",'
                        f'"input":{inner}}}]}}')
    elif where == "arguments":
        messages.append('{"role":"assistant","tool_calls":[{"id":"a","function":{"name":"f",'
                        f'"arguments":{inner}}}}}]}}')
    else:
        messages.append('{"role":"user","content":[{"type":"tool_result","tool_use_id":"a",'
                        f'"content":[{{"type":"text","text":"t","deep":{inner}}}]}}]}}')
    line = ('{"messages":[' + ",".join(messages) + "]" + top + "}").encode()
    data, starts, stops = frame([line])
    check_call(differential, data, starts, stops, (("history", 1, 0, 3),), 1, 1)


def nested_results(levels: int) -> bytes:
    inner = '"leaf"'
    for _ in range(levels):
        inner = f'[{{"type":"tool_result","tool_use_id":"a","content":{inner}}}]'
    return ('{"messages":[{"role":"assistant","content":[{"type":"tool_use","id":"a"}]},'
            f'{{"role":"user","content":{inner}}},{{"role":"user","content":"q"}}]}}').encode()


@pytest.mark.parametrize("levels", [1, 2, 10, 19, 20, 21, 22, 30, 40])
def test_nested_tool_results(differential, levels):
    # Each nested tool_result takes two levels (a list, a block); past SCAN_DEPTH the object
    # path, which measures them up to MAX_NESTING.
    line = nested_results(levels)
    data, starts, stops = frame([line])
    handled = check_call(differential, data, starts, stops, (("history", 0, 0, 0),), 0, 0)
    assert handled == [int(3 + 2 * levels <= SCAN_DEPTH)]


@settings(HYPOTHESIS, max_examples=100)
@given(st.binary(max_size=300), st.lists(st.tuples(st.integers(0, 320), st.integers(0, 320)),
                                         max_size=6))
def test_random_bytes(differential, data, ranges):
    ranges = [(min(a, b, len(data)), min(max(a, b), len(data))) for a, b in ranges]
    check_call(differential, data, [a for a, _ in ranges], [b for _, b in ranges],
               (("history", 0, 1, 5),), 0, 0)


@settings(HYPOTHESIS, max_examples=150)
@given(st.lists(st.sampled_from([
    b"{", b"}", b"[", b"]", b":", b",", b'"messages"', b'"role"', b'"user"', b'"content"',
    b'"id"', b'"type"', b'"text"', b'"tool_calls"', b'"tool_call_id"', b'"a"', b'"\\u0061"',
    b'"\\ud83d\\ude00"', b'"\\ud83d"', b"null", b"true", b"1", b"-0.5e3", b" ", b"\t",
    b'"fragments"', b'"tool_result"', b'"tool_use"', b'"tool_use_id"', b'"input"', b'"x\\"y"',
]), max_size=60))
def test_token_soup(differential, tokens):
    # Random sequences of the tokens the scanner looks for: most are not JSON, a few are.
    line = b'{"messages":[' + b"".join(tokens)
    lines = [line, line + b"]}", line + b"}]}", b"".join(tokens)]
    data, starts, stops = frame(lines)
    check_call(differential, data, starts, stops, (("history", 1, 0, 1),), 0, 0)


@settings(HYPOTHESIS, max_examples=20)
@given(st.sampled_from(["content", "key", "id", "role", "tool_use_id", "input"]),
       st.integers(100_000, 160_000), st.sampled_from(["a", "é", "😀", "\\n", "\\u00e9",
                                                        "\\ud83d\\ude00", "\\/"]))
def test_huge_strings(differential, where, size, unit):
    # Strings of 100k+ chars (past every word and vector loop), of one byte, two, four, or
    # escapes.
    big = unit * (size // len(unit))
    messages = ['{"role":"user","content":"hi"}']
    top = ""
    if where == "content":
        messages.append(f'{{"role":"assistant","content":"{big}"}}')
    elif where == "key":
        messages.append(f'{{"role":"assistant","content":"x","{big}":1}}')
        top = f',"{big}":2'
    elif where == "id":
        top = f',"id":"{big}"'
    elif where == "role":
        messages.append(f'{{"role":"{big}","content":"x"}}')
    elif where == "tool_use_id":
        messages.append(f'{{"role":"assistant","content":[{{"type":"tool_use","id":"{big}"}}]}}')
        messages.append('{"role":"user","content":[{"type":"tool_result","tool_use_id":'
                        f'"{big}","content":"ok"}}]}}')
    else:
        messages.append('{"role":"assistant","content":[{"type":"tool_use","id":"a","name":"n",'
                        f'"input":{{"q":"{big}"}}}}]}}')
    messages.append('{"role":"user","content":"q"}')
    line = ('{"messages":[' + ",".join(messages) + "]" + top + "}").encode()
    data, starts, stops = frame([line, line[:-1], line + b" "])
    handled = check_call(differential, data, starts, stops, (("history", 0, 0, 0),), 0, 0)
    # keys, roles and ids written with an escape take the object path
    plain = "\\" not in unit or where in ("content", "id", "input")
    assert handled == [int(plain), 0, int(plain)]


SPECIALS = ["é".encode(), "😀".encode(), "\u20ac".encode(), b"\xff", b"\x80", b"\xe2\x82",
            b"\xed\xa0\x80", b"\x01", b"\\n", b'\\"', b"\\u00e9", b"\\ud83d\\ude00",
            b"\\ud83d"]
LENGTHS = [*range(41), 63, 64, 65, 70, 71, 96, 97, 100]


@pytest.mark.parametrize("special", SPECIALS, ids=repr)
def test_one_special_byte_at_every_offset(differential, special):
    # A string of plain ASCII with one special piece at every offset, for the word-at-a-time and
    # vector-at-a-time runs (and where they hand over to each other): the vector path only where
    # 64 bytes or more of the line are left, so each string is in a short line and a long one.
    lines = []
    for length in LENGTHS:
        for k in range(length + 1):
            body = b"a" * k + special + b"a" * (length - k)
            line = b'{"messages":[{"role":"user","content":"' + body + b'"}]'
            lines += [line + b"}", line + b',"pad":"' + b"b" * 100 + b'"}']
    data, starts, stops = frame(lines)
    out, ends, figures, raws = differential("reduce_lines", data, starts, stops, (), -1, -1,
                                            False)
    figures = rows(figures)
    for k, line in enumerate(lines):
        try:
            expected = len(orjson.loads(line)["messages"][0]["content"])
        except orjson.JSONDecodeError:
            assert figures[k, 0] == 0, line
        else:
            assert figures[k, 0] == 1 and figures[k, 3] == expected, (line, figures[k])


@settings(HYPOTHESIS, max_examples=300)
@given(st.lists(st.integers(0, 80).map(lambda n: b"a" * n) | st.sampled_from(SPECIALS)
                | st.sampled_from(VALID_UTF8).map(lambda c: c.encode()), max_size=12),
       st.integers(0, 100))
def test_runs_and_specials_in_one_string(differential, pieces, pad):
    body = b"".join(pieces)
    line = (b'{"messages":[{"role":"user","content":"' + body + b'"}],"pad":"' + b"b" * pad
            + b'"}')
    data, starts, stops = frame([line])
    out, ends, figures, raws = differential("reduce_lines", data, starts, stops, (), -1, -1,
                                            False)
    figures = rows(figures)
    try:
        expected = len(orjson.loads(line)["messages"][0]["content"])
    except orjson.JSONDecodeError:
        assert figures[0, 0] == 0
    else:
        assert figures[0, 0] == 1 and figures[0, 3] == expected


# ---------------------------------------------------------------------------------------------
# the JSONL runner, byte path on and off


def compare_runner(lines: list[bytes], policy: dict[str, Any]) -> list[int]:
    """Byte path on and off: JSON-equal outputs, identical figures, reports and errors, line by
    line; returns which lines took the byte path."""
    on = run_lines(lines, policy, True)
    off = run_lines(lines, policy, False)
    assert len(on) == len(off) == len(lines)
    for k, (a, b) in enumerate(zip(on, off)):
        where = (k, lines[k])
        assert a.line == b.line == k + 1
        assert a.error == b.error, where
        assert a.figures == b.figures, where
        assert a.report == b.report, where
        assert a.violation == b.violation, where
        assert a.lines == b.lines == 1
        assert b.scanned == 0
        if b.output is None:
            assert a.output is None, where
        else:
            assert a.output is not None and a.output.endswith(b"\n"), where
            assert exact_loads(a.output) == exact_loads(b.output), where
    # what took the byte path is what the kernel handles
    worker = LineWorker(policy, True)
    data, starts, stops = frame(lines)
    if worker.fused is not None:
        _, _, figures, _ = _kernel.reduce_lines(
            data, starts, stops, worker.fused, worker.trigger,
            worker.watermark, False)
        assert [r.scanned for r in on] == rows(figures)[:, 0].tolist()
    return [r.scanned for r in on]


@settings(HYPOTHESIS, max_examples=120)
@given(generated_lines(newlines=False), st.sampled_from(POLICIES))
def test_runner_byte_path_on_and_off(lines, policy):
    lines = [line.replace(b"\n", b" ") for line in lines]
    compare_runner(lines, policy)


@settings(HYPOTHESIS, max_examples=60)
@given(generated_lines(newlines=False), st.sampled_from(POLICIES), st.booleans())
def test_runner_runs_of_lines(lines, policy, with_reports):
    # With runs, consecutive lines of the byte path come as one result: the same output lines,
    # the same totals and the same reports (a run's joined by ",\n", as the command line
    # writes them) as line by line through the object path.
    lines = [line.replace(b"\n", b" ") for line in lines] * 2
    on = run_lines(lines, policy, True, with_reports=with_reports, runs=True)
    off = run_lines(lines, policy, False, with_reports=with_reports, runs=True)
    reports = [b",\n".join(r.report for r in results if r.report is not None)
               for results in (on, off)]
    assert reports[0] == reports[1]
    assert [(r.line, r.error) for r in on if r.error] == [(r.line, r.error) for r in off
                                                          if r.error]
    totals = []
    for results in (on, off):
        summary = runner.Summary()
        for r in results:
            summary.add(r)
        doc = summary.to_json_dict()
        for key in ("seconds", "megabytesPerSecond", "conversationsPerSecond", "paths"):
            doc.pop(key)
        outputs = b"".join(r.output or b"" for r in results)
        assert outputs.endswith(b"\n") or not outputs
        totals.append((doc, [exact_loads(x) for x in outputs.split(b"\n")[:-1]]))
    assert totals[0] == totals[1]
    assert sum(r.lines for r in on) == sum(r.lines for r in off) == len(lines)
    assert sum(r.scanned for r in on) == sum(r.lines for r in on if r.scanned)


def file_outcome(path: Path, policy: dict[str, Any], byte_path: bool, jobs: int,
                 max_bytes: int) -> list[tuple[Any, ...]]:
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(LineWorker, "byte_path", byte_path)
        with InputFile(str(path)) as source:
            return [(r.line, None if r.output is None else exact_loads(r.output), r.report,
                     r.figures, r.error, r.violation, r.lines)
                    for r in runner.process_lines(source.ranges(max_bytes, workers=jobs),
                                                  policy, jobs=jobs, with_reports=True)]


@pytest.mark.parametrize("jobs, max_bytes", [(1, 1 << 20), (1, 3000), (2, 3000)])
def test_runner_file_ranges_byte_path_on_and_off(tmp_path, corpora, jobs, max_bytes):
    # A file's ranges (the lines found in each by the kernel), in this process and in a worker:
    # blank lines, lines of the object path, a last line without its newline.
    lines = [*corpora["chats"][:12], b"", b"   \t", *EDGE_LINES, *corpora["agent-traces"][:3],
             b"\r", b"\x0b", b" \x0c\t", b"\x1c", b"\xa0",
             b'{"id":"last","messages":[{"role":"user","content":"end"}]}']
    path = tmp_path / "lines.jsonl"
    path.write_bytes(b"\n".join(lines))
    for policy in (SEED_POLICY, trim_policy(300, 200, [("message", 1, 100)])):
        on = file_outcome(path, policy, True, jobs, max_bytes)
        off = file_outcome(path, policy, False, jobs, max_bytes)
        assert on == off
        # Blank: JSON whitespace only (a vertical tab, a form feed, U+00A0 make a bad line).
        assert [r[0] for r in on] == [k + 1 for k, line in enumerate(lines)
                                      if line.strip(b" \t\r")]


EDGE_LINES = [
    b'{"messages":[{"role":"user","content":"\\ud800"}]}',
    b'{"messages":[]}x', b"[1]", b'{"messages":[],"fragments":[]}',
    b'{"id":123456789012345678901234567890,"messages":[{"role":"user","content":"q"}]}',
    b'{"messages":[{"type":"message","role":"user","content":"typed"}]}',
    b' {"id" : "ws" , "messages" : [ {"role":"user" , "content":"\\u00e9"} ] } ',
    b'{"messages":[{"role":"user","content":[{"type":"text"}]}]}',
]


# ---------------------------------------------------------------------------------------------
# 2. the synthetic corpora: every line takes the byte path, and agrees with the object path


@pytest.fixture(scope="module")
def corpora() -> dict[str, list[bytes]]:
    sizes = {"chats": 40, "agent-traces": 10, "long-transcripts": 3}
    out = {}
    for name, n in sizes.items():
        lines = []
        for k, messages in enumerate(corpus(name, n, seed=7)):
            doc = {"id": f"{name}-{k}", "messages": messages}
            lines.append(orjson.dumps(doc) if k % 2 else json.dumps(doc).encode())
        out[name] = lines
    return out


@pytest.mark.parametrize("name", ["chats", "agent-traces", "long-transcripts"])
@pytest.mark.parametrize("call", [
    ((("history", 0, 2, 1000),), 1800, 1500),  # the seed policy
    ((), -1, -1),  # validate
    ((("history", 1, 3, 2000),), 100, 100),
    ((("history", 0, 0, 0), ("history", 1, 1, 10)), 0, 0),
    ((("history", 1, 0, 50_000), ("history", 0, 2, 5000)), 20_000, 10_000),
])
def test_corpora_take_the_byte_path(differential, corpora, name, call):
    steps, trig, wm = call
    lines = corpora[name]
    data, starts, stops = frame(lines)
    handled = check_call(differential, data, starts, stops, steps, trig, wm)
    assert sum(handled) / len(handled) == 1.0


@pytest.mark.parametrize("name", ["chats", "agent-traces", "long-transcripts"])
@pytest.mark.parametrize("policy", [SEED_POLICY, VALIDATE_POLICY,
                                    trim_policy(5000, 3000, [("message", 2, 2000)])])
def test_corpora_through_the_runner(corpora, name, policy):
    scanned = compare_runner(corpora[name], policy)
    assert all(scanned)


# ---------------------------------------------------------------------------------------------
# 3. arguments: both kernels refuse the same way


LINE = b'{"id":"a","messages":[{"role":"user","content":"hello"},{"role":"user","content":"q"}]}'
GOOD = (LINE, [0], [len(LINE)], (("history", 0, 1, 1),), 0, 0)


def call_with(**changes: Any) -> tuple[Any, ...]:
    names = ["data", "starts", "stops", "steps", "trig", "wm"]
    args = dict(zip(names, GOOD))
    args.update(changes)
    return tuple(args[n] for n in names)


class Seq:
    """A step that iterates but is no tuple."""

    def __iter__(self):
        return iter(("history", 0, 1, 1))


ARGUMENT_CASES = {
    "steps a list": call_with(steps=[("history", 0, 1, 1)]),
    "steps None": call_with(steps=None),
    "steps a str": call_with(steps="history"),
    "steps one flat step": call_with(steps=("history", 0, 1, 1)),
    "step not iterable": call_with(steps=(5,)),
    "step too short": call_with(steps=(("history", 0, 1),)),
    "step too long": call_with(steps=(("history", 0, 1, 1, 1),)),
    "step empty": call_with(steps=((),)),
    "step a list": call_with(steps=(["history", 0, 1, 1],)),
    "step an iterable": call_with(steps=(Seq(),)),
    "step names the system": call_with(steps=(("system", 0, 1, 1),)),
    "step names the question": call_with(steps=(("question", 0, 1, 1),)),
    "step names None": call_with(steps=((None, 0, 1, 1),)),
    "step names bytes": call_with(steps=((b"history", 0, 1, 1),)),
    "step names a str subclass": call_with(steps=((type("S", (str,), {})("history"), 0, 1, 1),)),
    "bad grouping 2": call_with(steps=(("history", 2, 1, 1),)),
    "bad grouping -1": call_with(steps=(("history", -1, 1, 1),)),
    "grouping a str": call_with(steps=(("history", "0", 1, 1),)),
    "grouping a float": call_with(steps=(("history", 1.0, 1, 1),)),
    "grouping None": call_with(steps=(("history", None, 1, 1),)),
    "grouping True": call_with(steps=(("history", True, 1, 1),)),
    "negative keep": call_with(steps=(("history", 0, -1, 1),)),
    "negative target": call_with(steps=(("history", 0, 1, -1),)),
    "keep a str": call_with(steps=(("history", 0, "1", 1),)),
    "second step bad": call_with(steps=(("history", 0, 1, 1), ("history", 0, 1, -5))),
    "bad step and bad data": call_with(steps=(("history", 0, -1, 1),), data="text"),
    "many steps": call_with(steps=tuple(("history", k % 2, k % 3, 10 * k) for k in range(70))),
    "starts and stops differ": call_with(starts=[0, 0], stops=[len(LINE)]),
    "stops longer": call_with(starts=[], stops=[1]),
    "start after stop": call_with(starts=[5], stops=[4]),
    "negative start": call_with(starts=[-1], stops=[4]),
    "stop past the end": call_with(starts=[0], stops=[len(LINE) + 1]),
    "start past the end": call_with(starts=[len(LINE) + 1], stops=[len(LINE) + 1]),
    "empty range at the end": call_with(starts=[len(LINE)], stops=[len(LINE)]),
    "2-d starts": call_with(starts=np.zeros((1, 1), np.int64), stops=[len(LINE)]),
    "2-d stops": call_with(stops=np.array([[len(LINE)]]), starts=[0]),
    "scalar starts": call_with(starts=0, stops=len(LINE)),
    "float starts": call_with(starts=[0.5], stops=[float(len(LINE))]),
    "str starts": call_with(starts=["a"]),
    "None starts": call_with(starts=None),
    "uint8 starts": call_with(starts=np.array([0], np.uint8)),
    "strided starts": call_with(starts=np.arange(4, dtype=np.int64)[::2][:1],
                                stops=np.full(3, len(LINE), np.int64)[::2][:1]),
    "data a str": call_with(data=LINE.decode()),
    "data an int": call_with(data=5),
    "data None": call_with(data=None),
    "data a list": call_with(data=list(LINE)),
    "data a non-contiguous memoryview": call_with(data=memoryview(LINE + LINE)[::2]),
    "data a 2-d memoryview": call_with(data=memoryview(LINE[:80]).cast("B", (8, 10))),
    "data int64 numbers": call_with(data=np.arange(len(LINE), dtype=np.int64)),
    "data a 2-d uint8 array": call_with(data=np.frombuffer(LINE[:80], np.uint8).reshape(8, 10)),
    "data a Fortran array": call_with(data=np.asfortranarray(
        np.frombuffer(LINE[:80], np.uint8).reshape(8, 10))),
    "data a bytearray": call_with(data=bytearray(LINE)),
    "data a memoryview": call_with(data=memoryview(LINE)),
    "data a sliced memoryview": call_with(data=memoryview(b"xx" + LINE)[2:]),
    "data of signed chars": call_with(data=memoryview(bytearray(LINE)).cast("b")),
    "data of chars": call_with(data=memoryview(LINE).cast("c")),
    "data an array": call_with(data=array.array("B", LINE)),
    "data a numpy array": call_with(data=np.frombuffer(LINE, np.uint8)),
    "data of 16-bit items": call_with(data=array.array("H", LINE[:80])),
    "data empty": call_with(data=b"", starts=[0], stops=[0]),
    "data empty, no lines": call_with(data=b"", starts=[], stops=[]),
    "trigger a str": call_with(trig="1"),
    "trigger a float": call_with(trig=1.5),
    "trigger None": call_with(trig=None),
    "watermark a bool": call_with(wm=True),
    "trigger numpy": call_with(trig=np.int64(3)),
    # which argument is refused first
    "steps a list and trigger a str": call_with(steps=[], trig="x"),
    "steps None and data an int": call_with(steps=None, data=5),
    "bad step and bad starts": call_with(steps=(("history", 9, 1, 1),), starts=[0, 1]),
    "data an int and starts 2-d": call_with(data=5, starts=np.zeros((2, 2))),
    "starts 2-d and stops 2-d": call_with(starts=np.zeros((2, 2)), stops=np.zeros((2, 2))),
    "starts differ and out of range": call_with(starts=[0, 10**6], stops=[1]),
    "trigger a str and watermark None": call_with(trig="x", wm=None),
    "steps a tuple subclass": call_with(steps=type("T", (tuple,), {})((("history", 0, 1, 1),))),
    "a step a tuple subclass": call_with(steps=(type("T", (tuple,), {})(("history", 0, 1, 1)),)),
    "data reversed": call_with(data=memoryview(LINE)[::-1]),
    "data an empty slice": call_with(data=memoryview(LINE)[5:5], starts=[0, 0], stops=[0, 0]),
    "data a bytes subclass": call_with(data=type("B", (bytes,), {})(LINE)),
}


@pytest.mark.parametrize("name", list(ARGUMENT_CASES))
def test_arguments(differential, name):
    args = ARGUMENT_CASES[name]
    try:
        result = differential("reduce_lines", *args, True)
    except (ValueError, TypeError):
        return  # the same error on both (the differential checked type and message)
    differential("reduce_lines", *args, False)
    data = bytes(memoryview(args[0]).cast("B"))
    starts = np.atleast_1d(args[1])
    if len(starts) and starts[0] == 0 and data == LINE:
        assert result[2][0] == 1  # every bytes-like object of bytes reads the same


OVERFLOW_CASES = {
    "grouping beyond int": call_with(steps=(("history", 2**31, 1, 1),)),
    "keep beyond int64": call_with(steps=(("history", 0, 2**63, 1),)),
    "target beyond int64": call_with(steps=(("history", 0, 1, -(2**63) - 1),)),
    "trigger beyond int64": call_with(trig=2**64),
    "starts beyond int64": call_with(starts=[2**64]),
}


@pytest.mark.parametrize("name", list(OVERFLOW_CASES))
def test_overflowing_arguments(kernels, name):
    # OverflowError is no error the differential fixture catches: compared here.
    seen = []
    for k in kernels:
        with pytest.raises(OverflowError) as info:
            k.reduce_lines(*OVERFLOW_CASES[name], True)
        seen.append(str(info.value))
    assert len(set(seen)) == 1, seen


class Boom:
    def __bool__(self):
        raise RuntimeError("boom")

    def __int__(self):
        raise RuntimeError("int boom")


@pytest.mark.parametrize("position", [4, 5, 6])
def test_arguments_that_raise(kernels, position):
    # the limits, raw: an argument whose conversion raises is that error.
    seen = []
    for k in kernels:
        args = list(GOOD) + [True]
        args[position] = Boom()
        with pytest.raises(RuntimeError) as info:
            k.reduce_lines(*args)
        seen.append(str(info.value))
    assert len(set(seen)) == 1, seen


def test_bytearray_is_released(kernels):
    # No export of the buffer outlives the call, nor an error of it: the caller may resize.
    for k in kernels:
        buf = bytearray(LINE)
        k.reduce_lines(buf, [0], [len(LINE)], (), 0, 0, True)
        buf += b"x"
        with pytest.raises(ValueError):
            k.reduce_lines(buf, [0], [10**6], (), 0, 0)
        buf += b"y"
        with pytest.raises(ValueError):
            k.reduce_lines(buf, [0, 1], [1], (), 0, 0)
        buf += b"z"
        assert buf.endswith(b"xyz")


@pytest.mark.parametrize("kind", ["bytes", "bytearray", "memoryview", "readonly", "mmap",
                                  "numpy", "array"])
def test_every_buffer_reads_the_same(differential, kind):
    lines = [LINE, b"  " + LINE + b"\t", b"{}", LINE[:-1], nested_results(2)]
    raw, starts, stops = frame(lines)
    if kind == "mmap":
        data: Any = mmap.mmap(-1, len(raw))
        data[:] = raw
    else:
        data = {"bytes": raw, "bytearray": bytearray(raw), "memoryview": memoryview(
            bytearray(raw)), "readonly": memoryview(raw), "numpy": np.frombuffer(raw, np.uint8),
            "array": array.array("B", raw)}[kind]
    handled = check_call(differential, data, starts, stops, (("history", 0, 0, 0),), 0, 0)
    assert handled == [1, 1, 0, 0, 1]
    if kind == "mmap":
        data.close()


def test_more_than_scan_keys_top_level_keys(differential):
    for nkeys, taken in ((SCAN_KEYS - 2, 1), (SCAN_KEYS - 1, 1), (SCAN_KEYS, 0),
                         (SCAN_KEYS + 1, 0), (500, 0)):
        # nkeys others and "messages": SCAN_KEYS keys in all is the most the byte path takes
        others = ",".join(f'"k{i}":{i}' for i in range(nkeys))
        line = ('{' + others + ',"messages":[{"role":"user","content":"x"}]}').encode()
        data, starts, stops = frame([line])
        assert check_call(differential, data, starts, stops, (), -1, -1) == [taken], nkeys
    # many keys in a message or a part are no limit
    many = ",".join(f'"k{i}":{i}' for i in range(300))
    line = ('{"messages":[{"role":"user","content":[{"type":"text","text":"t",' + many + '}],'
            + many + '}]}').encode()
    data, starts, stops = frame([line])
    assert check_call(differential, data, starts, stops, (), -1, -1) == [1]


def test_many_messages_and_ids(differential):
    # Past every buffer the scanner grows: messages, call ids, result ids, per-message ids.
    blocks = ",".join(f'{{"type":"tool_use","id":"u{i}","name":"n"}}' for i in range(40))
    results = ",".join(f'{{"type":"tool_result","tool_use_id":"u{i}"}}' for i in range(0, 40, 2))
    calls_ = ",".join(f'{{"id":"c{i}","function":{{"name":"f","arguments":"{{}}"}}}}'
                      for i in range(70))
    msgs = []
    for turn in range(40):
        msgs.append(f'{{"role":"user","content":"turn {turn}"}}')
        msgs.append(f'{{"role":"assistant","content":[{blocks}],"tool_calls":[{calls_}]}}')
        msgs.append(f'{{"role":"user","content":[{results}]}}')
        msgs += [f'{{"role":"tool","tool_call_id":"c{i}","content":"r"}}' for i in range(0, 70, 3)]
    big = ('{"messages":[' + ",".join(msgs) + "]}").encode()
    small = b'{"messages":[{"role":"user","content":"x"},{"role":"tool","tool_call_id":"c1"}]}'
    data, starts, stops = frame([small, big, small, big[:len(big) // 2] + b"]}", small])
    for call in [((("history", 0, 3, 500),), 0, 0), ((("history", 1, 50, 0),), 0, 0),
                 ((), -1, -1)]:
        check_call(differential, data, starts, stops, *call)


SEEDS_FOR_TRUNCATION = [
    b'{"messages":[{"role":"user","content":"a"}]}',
    b'{"id":"x","messages":[{"role":"system","content":"s\\u00e9\\ud83d\\ude00"},'
    b'{"role":"assistant","content":[{"type":"tool_use","id":"a","name":"f","input":'
    b'{"q":[1,-2.5e3,true,null,false]}},{"type":"thinking","thinking":"t"}],"tool_calls":'
    b'[{"id":"b","function":{"name":"g","arguments":{"x":1}}}]},{"role":"tool",'
    b'"tool_call_id":"b","content":[{"type":"text","text":"r"}]},{"role":"user","content":'
    b'[{"type":"tool_result","tool_use_id":"a","content":[{"type":"image"}]}]}],"n":-0.5E+2}',
    '{"messages": [ {"role" : "user" , "content" : "\u00e9\U0001f600 "} ] , "k" : [ ] }'.encode(),
]


def test_truncated_at_every_position(differential):
    # b'{"messages":[{"role":"user","content":"a' and every other prefix: with the rest of the
    # line after it in the buffer, and at the very end of the buffer.
    for seed in SEEDS_FOR_TRUNCATION:
        for cut in range(len(seed) + 1):
            assert check_call(differential, seed, [0], [cut], (("history", 0, 0, 0),), 0,
                              0) == [int(cut == len(seed))]
            prefix = seed[:cut]
            assert check_call(differential, prefix, [0], [cut], (), -1,
                              -1) == [int(cut == len(seed))]


GUARD_SCRIPT = r"""
import ctypes, mmap, sys
from contextpolicy import _kernel_c
seeds = eval(sys.argv[1])
PAGE = mmap.PAGESIZE
m = mmap.mmap(-1, 2 * PAGE)
addr = ctypes.addressof(ctypes.c_char.from_buffer(m))
libc = ctypes.CDLL(None, use_errno=True)
libc.mprotect.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
assert libc.mprotect(ctypes.c_void_p(addr + PAGE), PAGE, 0) == 0  # PROT_NONE after the page
view = memoryview(m)[:PAGE]
count = 0
for seed in seeds:
    for cut in range(len(seed) + 1):
        piece = seed[:cut]
        view[PAGE - len(piece):] = piece
        for steps in ((("history", 0, 0, 0),), ()):
            _kernel_c.reduce_lines(view, [PAGE - len(piece)], [PAGE], steps, 0, 0, True)
            count += 1
print(count)
"""


@pytest.mark.c_extension
@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="mprotect through ctypes")
def test_lines_at_the_end_of_the_buffer_never_read_past_it():
    # Every prefix of the seeds ends at the last byte before a page that cannot be read: a
    # read one byte too far is a crash (of the subprocess).
    seeds = [*SEEDS_FOR_TRUNCATION, b'{"messages":[{"role":"user","content":"a\\u12',
             b'{"messages":[{"role":"user","content":"\\ud83d\\ude0', b'{"messages":[1e',
             b'{"messages":[],"x":-', b'{"messages":[],"x":tru', b'{"messages":[],"x":1.5e+',
             b'{"messages":[{"role":"user","content":"' + "é😀".encode() * 40,
             b'{"messages":[{"role":"user","content":"' + b"a" * 100]
    proc = subprocess.run([sys.executable, "-c", GUARD_SCRIPT, repr(seeds)], cwd=ROOT,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, (proc.returncode, proc.stderr[-2000:])
    assert int(proc.stdout) == 2 * sum(len(s) + 1 for s in seeds)


@pytest.mark.c_extension
def test_random_lines_at_the_end_of_a_guarded_buffer():
    # The generated lines and their mutations, each ending where the readable memory ends.
    rnd = random.Random(5)
    lines = []
    for k in range(120):
        doc = {"messages": [{"role": "user", "content": "x" * (k % 17)},
                            {"role": "assistant", "content": [{"type": "tool_use", "id": "a",
                                                               "input": {"k": [k, -k / 3]}}]}]}
        line = serialise(doc, SERIALISERS[k % len(SERIALISERS)], rnd)
        lines.append(mutate(line, rnd) if k % 2 else line)
    proc = subprocess.run([sys.executable, "-c", GUARD_SCRIPT, repr(lines)], cwd=ROOT,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, (proc.returncode, proc.stderr[-2000:])


# ---------------------------------------------------------------------------------------------
# 4. named examples with their figures


def one(differential, line: bytes, steps: Any = (), trig: int = -1, wm: int = -1,
        ) -> tuple[bytes, list[int], Any]:
    data, starts, stops = frame([line])
    handled = check_call(differential, data, starts, stops, steps, trig, wm)
    out, _, figures, raws = differential("reduce_lines", data, starts, stops, steps, trig, wm,
                                         True)
    figures = rows(figures)
    assert handled == [int(figures[0, 0])]
    return bytes(out), figures[0].tolist(), raws[0]


def user(content: str) -> str:
    return '{"role":"user","content":' + content + "}"


def test_a_surrogate_pair_counts_one_char(differential):
    cases = {'"\\ud83d\\ude00"': 1, '"\\uD83D\\uDE00"': 1, '"😀"': 1,
             '"\\ud83d\\ude00\\ud83d\\ude00"': 2, '"a\\ud83d\\ude00b"': 3, '"🏽😀"': 2}
    for text_, chars in cases.items():
        line = ('{"messages":[' + user(text_) + "]}").encode()
        _, row, _ = one(differential, line)
        # handled, not triggered, target reached (no watermark), chars, messages
        assert row[:7] == [1, 0, 1, chars, chars, 1, 1], (text_, row)


def test_escapes_count_one_char_each(differential):
    cases = {'"\\n"': 1, '"a\\nb"': 3, '"\\"\\\\\\/\\b\\f\\n\\r\\t"': 8, '"\\u0000"': 1,
             '"\\u00e9"': 1, '"é"': 1, '"€"': 1, '"\\u20ac"': 1, '""': 0,
             '"\U0010ffff"': 1, '"\\udbff\\udfff"': 1}
    for text_, chars in cases.items():
        line = ('{"messages":[' + user(text_) + "]}").encode()
        _, row, _ = one(differential, line)
        assert row[HANDLED] == 1 and row[CHARS] == chars, (text_, row)


def test_a_tool_use_input_counts_its_compact_json(differential):
    for inp, length in (('{"a":1}', 7), ('{ "a" : 1 }', 7), ('{"a":[1, 2.50, true]}', 18),
                        ('"s"', 3), ("null", 4), ("-0", 1), ("1E2", 5), ('{"é":"\\u00e9"}', 9),
                        ('{"n":"\\n"}', 10), ('[]', 2), ('{"a":{"b":{}}}', 14)):
        line = ('{"messages":[{"role":"assistant","content":[{"type":"tool_use","id":"t",'
                '"name":"lookup","input":' + inp + '}]}]}').encode()
        _, row, raw = one(differential, line)
        assert row[HANDLED] == 1 and row[CHARS] == 6 + length, (inp, row)
        assert row[UNANSWERED] == 1  # the call t is unanswered
    # without a name or an input, nothing but the call
    line = b'{"messages":[{"role":"assistant","content":[{"type":"tool_use","id":"t"}]}]}'
    _, row, _ = one(differential, line)
    assert row[CHARS] == 0 and row[UNANSWERED] == 1


def test_function_arguments_count_as_text_or_compact_json(differential):
    line = (b'{"messages":[{"role":"assistant","tool_calls":[{"id":"a","type":"function",'
            b'"function":{"name":"f","arguments":"{\\"x\\": 1}"}},{"id":"b","function":'
            b'{"name":"gg","arguments":{"x": [1, 2]}}},{"function":null},{"id":"c"}]},'
            b'{"role":"tool","tool_call_id":"a","content":"ok"},'
            b'{"role":"tool","tool_call_id":"zz","content":"orphan"}]}')
    _, row, raw = one(differential, line)
    # f + {"x": 1} (8) + gg + {"x":[1,2]} (11) + ok + orphan
    assert row[CHARS] == 1 + 8 + 2 + 11 + 2 + 6
    # zz answers nothing; b and c are unanswered
    assert row[ORPHANS] == 1 and row[UNANSWERED] == 2
    assert row[LINE_FIGURE["unknown_roles"]] == 0
    records, _ = raw
    assert [(w.code, w.detail) for w in records.warnings] == [("unanswered-tool-call", "b"),
                                                ("unanswered-tool-call", "c"),
                                                ("orphan-tool-result", "zz")]


def test_anthropic_blocks(differential):
    line = ('{"id":7,"messages":[{"role":"system","content":[{"type":"text","text":"sys"}]},'
            + user('"q1"') + ','
            '{"role":"assistant","content":[{"type":"thinking","thinking":"hmm","signature":"S"},'
            '{"type":"redacted_thinking","data":"xx"},{"type":"text","text":"t"},'
            '{"type":"tool_use","id":"u1","name":"f","input":{}}]},'
            '{"role":"user","content":[{"type":"tool_result","tool_use_id":"u1","content":'
            '[{"type":"text","text":"res"},{"type":"image","source":{}},"str",'
            '{"type":"tool_result","tool_use_id":"u9","content":"in"}]}]},'
            + user('[{"type":"image_url","image_url":{"url":"u"}},"q2"]') + "]}").encode()
    out, row, raw = one(differential, line, (("history", 0, 0, 0),), 0, 0)
    records, span = raw
    # sys 3 | q1 2, hmm 3, t 1, f 1, {} 2, res 3, str 3, in 2 (the redacted thinking and the
    # image opaque) | q2 2 (the image_url opaque)
    assert records.before == [(3, 1, 0), (17, 3, 2), (2, 1, 1)]
    assert records.before[1] == FragmentFigures(chars=17, messages=3, opaque_parts=2)
    # reduced; missed the target (0) with sys and q2 alone above it: protected-over-target
    assert row == [1, 1, 0, 22, 5, 5, 2, 3, 1, 0, 0, 1, 1, 0, 0, 0, 0]
    assert out == (b'{"id":7,"messages":[{"role":"system","content":[{"type":"text",'
                   b'"text":"sys"}]},{"role":"user","content":[{"type":"image_url",'
                   b'"image_url":{"url":"u"}},"q2"]}]}\n')
    assert span is not None


def test_a_trim_copies_the_kept_messages_byte_for_byte(differential):
    kept = [b'{ "role":"user" ,"content" : "\\u00e9 new"}',
            b'{"role":"assistant","content":"a2","extra":[1,{"x":null}]}']
    line = (b'  {"messages" : [{"role":"system","content":"S"} ,\t'
            b'{"role":"user","content":"old old old"}, {"role":"assistant","content":"a1"},'
            + kept[0] + b" , " + kept[1] + b',{"role":"user","content":"Q"}\r] ,"id":"z" } ')
    out, row, raw = one(differential, line, (("history", 0, 1, 0),), 0, 0)
    assert out == (b'{"messages" : [{"role":"system","content":"S"},' + kept[0] + b"," + kept[1]
                   + b',{"role":"user","content":"Q"}] ,"id":"z" }\n')
    assert row == [1, 1, 0, 1 + 11 + 2 + 5 + 2 + 1, 1 + 5 + 2 + 1, 6, 4, 2, 1, 0, 0, 1,
                   1, 0, 0, 0, 0]
    data, _, _ = frame([line])
    _, span = raw
    assert data[span[0]:span[1]] == b'"z"'
    # nothing to trim: the line whole, without the whitespace around it
    out, row, _ = one(differential, line, (("history", 0, 5, 0),), 0, 0)
    assert out == line.strip() + b"\n" and row[LINE_FIGURE["messages_removed"]] == 0


def test_the_pairing_guard_keeps_a_call_with_its_result(differential):
    # The trim would cut between the call and its result: it keeps the call's turn too.
    line = (b'{"messages":[{"role":"user","content":"aaaaaaaaaa"},'
            b'{"role":"assistant","tool_calls":[{"id":"k","function":{"name":"f"}}]},'
            b'{"role":"user","content":"bbbbbbbbbb"},'
            b'{"role":"tool","tool_call_id":"k","content":"r"},'
            b'{"role":"user","content":"q"}]}')
    _, row, raw = one(differential, line, (("history", 1, 0, 2),), 0, 0)
    assert row[HANDLED] == 1
    assert row[ORPHANS] == row[UNANSWERED] == row[LINE_FIGURE["unknown_roles"]] == 0


@pytest.mark.parametrize("line, reason", [
    (b"", "empty"), (b"   \t\r ", "whitespace"), (b"[]", "array"), (b'"x"', "string"),
    (b"5", "number"), (b"null", "null"), (b"{}", "no messages"), (b'{"id":1}', "no messages"),
    (b'{"messages":null}', "messages null"), (b'{"messages":{}}', "messages an object"),
    (b'{"messages":"x"}', "messages a string"),
    (b'{"messages":[],"fragments":[]}', "fragments"),
    (b'{"fragments":[],"messages":[]}', "fragments first"),
    (b'{"messages":[],"messages":[]}', "messages twice"),
    (b'{"id":1,"messages":[],"id":2}', "a key twice"),
    (b'{"m\\u0065ssages":[]}', "messages with an escape"),
    (b'{"messages":[],"\\u0069d":1}', "id with an escape"),
    (b'{"messages":[],"x\\n":1}', "any top-level key with an escape"),
    (b'{"messages":[5]}', "a message a number"), (b'{"messages":["hi"]}', "a message a str"),
    (b'{"messages":[null]}', "a message null"), (b'{"messages":[[]]}', "a message a list"),
    (b'{"messages":[{}]}', "a message without role"),
    (b'{"messages":[{"role":null}]}', "role null"), (b'{"messages":[{"role":1}]}', "role int"),
    (b'{"messages":[{"r\\u006fle":"user"}]}', "a message key with an escape"),
    (b'{"messages":[{"role":"user","x\\u0041":1}]}', "an unknown message key with an escape"),
    (b'{"messages":[{"role":"us\\u0065r"}]}', "role with an escape"),
    (b'{"messages":[{"role":"user","role":"user"}]}', "role twice"),
    (b'{"messages":[{"role":"user","content":"a","content":"b"}]}', "content twice"),
    (b'{"messages":[{"role":"tool","tool_call_id":"a","tool_call_id":"a"}]}', "id twice"),
    (b'{"messages":[{"role":"assistant","tool_calls":[],"tool_calls":[]}]}', "calls twice"),
    (b'{"messages":[{"role":"tool","tool_call_id":"\\u0061"}]}', "tool_call_id escaped"),
    (b'{"messages":[{"type":"message","role":"user","content":"x"}]}', "a typed message"),
    (b'{"messages":[{"role":"user","type":null}]}', "type null"),
    (b'{"messages":[{"type":"function_call","call_id":"a","arguments":"{}"}]}', "Responses"),
    (b'{"messages":[{"type":"reasoning","summary":[]}]}', "reasoning"),
    (b'{"messages":[{"role":"user","content":5}]}', "content a number"),
    (b'{"messages":[{"role":"user","content":{}}]}', "content an object"),
    (b'{"messages":[{"role":"user","content":true}]}', "content true"),
    (b'{"messages":[{"role":"user","content":[5]}]}', "a part a number"),
    (b'{"messages":[{"role":"user","content":[null]}]}', "a part null"),
    (b'{"messages":[{"role":"user","content":[[]]}]}', "a part a list"),
    (b'{"messages":[{"role":"user","content":[{"type":"text"}]}]}', "text without text"),
    (b'{"messages":[{"role":"user","content":[{"type":"text","text":1}]}]}', "text not a str"),
    (b'{"messages":[{"role":"user","content":[{"type":"thinking","thinking":null}]}]}',
     "thinking not a str"),
    (b'{"messages":[{"role":"user","content":[{"type":"te\\u0078t","text":"a"}]}]}',
     "a part type escaped"),
    (b'{"messages":[{"role":"user","content":[{"type":"text\\u0000","text":1}]}]}',
     "an unknown part type escaped"),
    (b'{"messages":[{"role":"user","content":[{"type":"image","type":"image"}]}]}',
     "a part type twice"),
    (b'{"messages":[{"role":"user","content":[{"type":"text","text":"a","text":"b"}]}]}',
     "text twice"),
    (b'{"messages":[{"role":"user","content":[{"t\\u0079pe":"text","text":"a"}]}]}',
     "a part key escaped"),
    (b'{"messages":[{"role":"user","content":[{"type":"tool_result","content":5}]}]}',
     "tool_result content a number"),
    (b'{"messages":[{"role":"user","content":[{"type":"tool_result","content":{}}]}]}',
     "tool_result content an object"),
    (b'{"messages":[{"role":"user","content":[{"type":"tool_result","content":[7]}]}]}',
     "tool_result content a list of numbers"),
    (b'{"messages":[{"role":"user","content":[{"type":"tool_result","tool_use_id":"\\u0061"}]}]}',
     "tool_use_id escaped"),
    (b'{"messages":[{"role":"user","content":[{"type":"tool_use","id":"\\u0061"}]}]}',
     "tool_use id escaped"),
    (b'{"messages":[{"role":"user","content":[{"type":"tool_use","input":1,"input":2}]}]}',
     "input twice"),
    (b'{"messages":[{"role":"assistant","tool_calls":5}]}', "tool_calls a number"),
    (b'{"messages":[{"role":"assistant","tool_calls":{}}]}', "tool_calls an object"),
    (b'{"messages":[{"role":"assistant","tool_calls":[5]}]}', "a call a number"),
    (b'{"messages":[{"role":"assistant","tool_calls":[{"function":5}]}]}', "function a number"),
    (b'{"messages":[{"role":"assistant","tool_calls":[{"function":[]}]}]}', "function a list"),
    (b'{"messages":[{"role":"assistant","tool_calls":[{"id":"\\u0061"}]}]}', "call id escaped"),
    (b'{"messages":[{"role":"assistant","tool_calls":[{"id":"a","id":"b"}]}]}', "id twice"),
    (b'{"messages":[{"role":"assistant","tool_calls":[{"function":{},"function":{}}]}]}',
     "function twice"),
    (b'{"messages":[{"role":"assistant","tool_calls":[{"function":{"name":"a","name":"b"}}]}]}',
     "name twice"),
    (b'{"messages":[{"role":"assistant","tool_calls":[{"function":{"arguments":'
     b'{"n":1234567890123456789}}}]}]}', "19 digits in arguments"),
    (b'{"messages":[{"role":"assistant","content":[{"type":"tool_use","input":'
     b'{"n":12345678901234567890}}]}]}', "20 digits in an input"),
    (b'{"messages":[{"role":"assistant","content":[{"type":"tool_use","input":'
     b'"call 1234567890123456789"}]}]}', "19 digits in an input string"),
    (b'{"messages":[{"role":"user","content":"\\ud800"}]}', "a lone high surrogate"),
    (b'{"messages":[{"role":"user","content":"\\udc00"}]}', "a lone low surrogate"),
    (b'{"messages":[{"role":"user","content":"\\ud83d\\u0041"}]}', "a high then no low"),
    (b'{"messages":[{"role":"user","content":"\\ude00\\ud83d"}]}', "a pair reversed"),
    (b'{"messages":[],"x":"\\ud800"}', "a lone surrogate in another key"),
    (b'{"messages":[{"role":"user","content":"\xed\xa0\x80"}]}', "a surrogate in UTF-8"),
    (b'{"messages":[{"role":"user","content":"\xff"}]}', "invalid UTF-8"),
    (b'{"messages":[{"role":"user","content":"\xc0\x80"}]}', "overlong UTF-8"),
    (b'{"messages":[{"role":"user","content":"\xf4\x90\x80\x80"}]}', "beyond U+10FFFF"),
    (b'{"messages":[{"role":"user","content":"a\x01"}]}', "a control byte"),
    (b'{"messages":[{"role":"user","content":"a\tb"}]}', "a tab in a string"),
    (b'{"messages":[],"x":' + b"1" * (SCAN_NUMBER + 1) + b"}", "a number too long"),
    (b'{"messages":[],"x":1e400}', "1e400"), (b'{"messages":[],"x":-1e400}', "-1e400"),
    (b'{"messages":[],"x":NaN}', "NaN"),
    (b'{"messages":[],"x":01}', "a leading zero"),
    (b'{"messages":[]}x', "trailing garbage"), (b'{"messages":[]}{}', "two documents"),
    (b'{"messages":[]}\x00', "a trailing NUL"), (b'\xef\xbb\xbf{"messages":[]}', "a BOM"),
    (b'{"messages":[],}', "a trailing comma"), (b'{"messages":[{"role":"user",}]}', "comma"),
    (b'{"messages":[{"role":"user"},]}', "a trailing comma in the array"),
    (b"{'messages':[]}", "single quotes"), (b'{"messages":[]', "truncated"),
    (b'{"messages":[]}\x0c', "a form feed after"), (b'\x0b{"messages":[]}', "a vertical tab"),
])
def test_lines_of_the_object_path(differential, line, reason):
    _, row, raw = one(differential, line, (("history", 0, 0, 0),), 0, 0)
    assert row == [0] * SCAN_FIGURES and raw is None, reason
    # the runner: the object path's result or error, whichever path is on
    if b"\n" not in line:
        compare_runner([line], SEED_POLICY)


@pytest.mark.parametrize("line, reason", [
    (b'{"messages":[]}', "no messages"), (b' {"messages":[]} ', "whitespace around"),
    (b'\t\r{"messages" :[ ] }\r', "whitespace inside"),
    (b'{"messages":[],"fragment":1}', "a key like fragments"),
    (b'{"messages":[],"x":{"a":1,"a":2}}', "a key twice inside another value"),
    (b'{"messages":[{"role":"user","name":"a","name":"b"}]}', "an unknown message key twice"),
    (b'{"messages":[{"role":"user","content":[{"type":"image","x":1,"x":2}]}]}',
     "an unknown part key twice"),
    (b'{"messages":[{"role":"user","content":"\\u00e9"}],"x":"\\ud83d\\ude00"}', "escapes"),
    (b'{"messages":[{"role":"user","content":"a"}],"x":{"\\u0061":1}}', "an escaped inner key"),
    (b'{"messages":[{"role":"user","content":null}]}', "content null"),
    (b'{"messages":[{"role":"user"}]}', "no content"),
    (b'{"messages":[{"role":"user","content":[]}]}', "content empty"),
    (b'{"messages":[{"role":"assistant","tool_calls":null}]}', "tool_calls null"),
    (b'{"messages":[{"role":"assistant","tool_calls":[]}]}', "tool_calls empty"),
    (b'{"messages":[{"role":"assistant","tool_calls":[{}]}]}', "a call without id"),
    (b'{"messages":[{"role":"assistant","tool_calls":[{"id":5,"function":null}]}]}',
     "a call id a number"),
    (b'{"messages":[{"role":"tool","tool_call_id":null,"content":"r"}]}', "a result without id"),
    (b'{"messages":[{"role":"tool","tool_call_id":7}]}', "a result id a number"),
    (b'{"messages":[{"role":"function","content":"r"}]}', "a function result"),
    (b'{"messages":[{"role":"critic","content":"r"}]}', "an unknown role"),
    (b'{"messages":[{"role":"","content":"r"}]}', "an empty role"),
    (b'{"messages":[{"role":"user","content":[{"type":7}]}]}', "a part type a number"),
    (b'{"messages":[{"role":"user","content":[{}]}]}', "an empty part"),
    (b'{"messages":[{"role":"user","content":[{"type":"tool_result"}]}]}', "a bare result"),
    (b'{"messages":[{"role":"user","content":[{"type":"tool_use"}]}]}', "a bare use"),
    (b'{"messages":[{"role":"user","content":[{"type":"tool_use","id":3}]}]}', "use id 3"),
    (b'{"messages":[{"role":"assistant","content":[{"type":"tool_use","input":'
     b'{"n":123456789012345678}}]}]}', "18 digits in an input"),
    (b'{"id":123456789012345678901234567890,"messages":[]}', "a huge id"),
    (b'{"messages":[{"role":"user","content":"1234567890123456789012345"}],'
     b'"n":-123456789012345678901234567890}', "long digit runs elsewhere"),
    (b'{"messages":[],"x":1e308,"y":1e-400,"z":-0,"w":-0.0E-0}', "numbers"),
    (b'{"messages":[],"x":' + b"1" * SCAN_NUMBER + b"}", "a number as long as may be"),
    (b'{"messages":[{"role":"user","content":"\x7f\xf4\x8f\xbf\xbf\xef\xbf\xbf"}]}', "UTF-8"),
])
def test_lines_of_the_byte_path(differential, line, reason):
    _, row, raw = one(differential, line, (("history", 0, 0, 0),), 0, 0)
    assert row[HANDLED] == 1 and raw is not None, reason
    compare_runner([line], SEED_POLICY)


def test_the_runner_gives_orjson_errors():
    lines = [b'{"messages":[{"role":"user","content":"\\ud800"}]}', b'{"messages":[],"x":1e400}',
             b'{"messages":[]}x', b"", b"[1]", b'{"messages":[],"fragments":[{}]}',
             b'{"messages":[{"role":"user","content":"\xff"}]}']
    results = run_lines(lines, SEED_POLICY, True)
    for line, result in zip(lines, results):
        try:
            orjson.loads(line)
        except orjson.JSONDecodeError as exc:
            problem = json_problem(line, exc, jsonl=True)
            assert (result.error, result.column) == (problem.message, problem.column)
        else:
            assert result.error is not None
        assert result.scanned == 0
    compare_runner(lines, SEED_POLICY)


# Regression: the compiled scanner called PyOS_string_to_double(text, NULL, None), whose
# overflow exception was then Py_None, not NULL: a number with an exponent beyond a double
# (1e400, which orjson refuses) raised SystemError ("_PyErr_SetObject: exception None is not a
# BaseException subclass") out of the whole reduce_lines call (and out of the runner), where the
# twin takes that line to the object path (rule: "it is JSON that orjson reads").
BEYOND_A_DOUBLE = [b"1e400", b"-1E+309", b"1.797693134862315808e308"]


@pytest.mark.parametrize("number", BEYOND_A_DOUBLE)
@pytest.mark.parametrize("where", ["top", "message", "input"])
def test_numbers_beyond_a_double(differential, number, where):
    line = {
        "top": b'{"messages":[{"role":"user","content":"a"}],"x":' + number + b"}",
        "message": b'{"messages":[{"role":"user","content":"a","x":[' + number + b"]}]}",
        "input": b'{"messages":[{"role":"assistant","content":[{"type":"tool_use","id":"a",'
                 b'"input":{"x":' + number + b"}}]}]}",
    }[where]
    good = b'{"messages":[{"role":"user","content":"a"}]}'
    data, starts, stops = frame([good, line, good])
    assert check_call(differential, data, starts, stops, (), -1, -1) == [1, 0, 1]


def test_the_runner_on_a_number_beyond_a_double():
    # As above: the runner's byte path let the SystemError out of process_lines.
    lines = [b'{"id":1,"messages":[]}', b'{"messages":[],"x":1e400}']
    results = run_lines(lines, SEED_POLICY, True)
    with pytest.raises(orjson.JSONDecodeError):
        orjson.loads(lines[1])
    assert results[1].error.startswith("invalid JSON: number is infinity when parsed as double")
    assert results[1].column == lines[1].index(b"1e400") + 1  # the byte where the number starts
    compare_runner(lines, SEED_POLICY)


@settings(HYPOTHESIS, max_examples=100)
@given(st.lists(st.lists(st.integers(-(2**63), 2**63 - 1), min_size=SCAN_FIGURES,
                         max_size=SCAN_FIGURES), max_size=8), st.data())
def test_figure_sums_are_numpys_column_sums(differential, table, data):
    figures = array.array("q", [v for row in table for v in row])
    start = data.draw(st.integers(0, len(table)))
    stop = data.draw(st.integers(start, len(table)))
    sums = differential("figure_sums", figures, start, stop)
    expected = rows(figures)[start:stop].sum(axis=0).tolist() if table else [0] * SCAN_FIGURES
    assert sums == expected


@pytest.mark.parametrize("args", [
    (array.array("q", [0] * (SCAN_FIGURES + 1)), 0, 1),  # not whole lines
    (array.array("q", [0] * SCAN_FIGURES), 0, 2),  # beyond the lines
    (array.array("q", [0] * SCAN_FIGURES), 1, 0),  # stop before start
    (array.array("q", [0] * SCAN_FIGURES), -1, 1),
    (array.array("d", [0.0] * SCAN_FIGURES), 0, 1),  # not int64
    (array.array("i", [0] * SCAN_FIGURES), 0, 1),
    (b"\0" * 8 * SCAN_FIGURES, 0, 1),  # bytes, not int64
    ([0] * SCAN_FIGURES, 0, 1),  # no buffer
    (array.array("q", [0] * SCAN_FIGURES), "0", 1),
], ids=["partial", "beyond", "reversed", "negative", "float", "int32", "bytes", "list",
        "str-start"])
def test_figure_sums_refuse_what_is_not_reduce_lines_figures(differential, args):
    with pytest.raises((ValueError, TypeError)):
        differential("figure_sums", *args)
