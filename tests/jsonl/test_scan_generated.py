"""``reduce_lines`` on generated lines: transcript JSONL lines read and written as bytes.

Both kernels (the compiled scanner and the twin that states its rules over byte spans) must
agree on every input, byte for byte and error for error (the ``differential`` fixture), and
every line they handle must agree with the object path (``orjson.loads`` and
``_kernel_py.reduce_transcript``).

Lines are generated as documents (chat messages, Anthropic blocks, tool calls, Responses items,
unicode) and serialised in several ways (orjson, ``json.dumps`` ASCII and UTF-8, a writer that
puts whitespace between tokens, escapes characters and keys and repeats keys), then mutated at
the byte level (truncations, stray bytes, invalid UTF-8, control characters, trailing garbage);
tool inputs counted from their bytes, numbers of every form, deep nesting, huge strings and
special bytes at every offset.
"""

from __future__ import annotations

import json
from typing import Any

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from contextpolicy import _kernel_py, check_input_budget
from contextpolicy.jsonl import digits
from tests.support.lines import (
    HYPOTHESIS,
    SERIALISERS,
    VALID_UTF8,
    Writer,
    frame,
    generated_lines,
    json_value,
    message,
    mutate,
    serialise,
)
from tests.support.scan import CHARS, SCAN_NUMBER, check_call, nested_results, rows

SCAN_DEPTH = _kernel_py.SCAN_DEPTH

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
# generated lines: both kernels agree, and agree with the object path


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
