"""``reduce_lines`` on named lines and the synthetic corpora, and the JSONL runner.

Named examples with their figures (surrogate pairs, escapes, tool inputs and arguments,
Anthropic blocks, a trim's kept bytes, the pairing guard), the lines that take the object path
and those that take the byte path, numbers beyond a double, ``figure_sums``; every line of the
synthetic corpora takes the byte path and agrees with the object path; and the JSONL runner
gives the same outputs, figures, reports and errors with the byte path on and off.
"""

from __future__ import annotations

import array
import json
from pathlib import Path
from typing import Any

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from contextpolicy import _kernel
from contextpolicy._records import FragmentFigures
from contextpolicy._tables import LINE_FIGURE
from contextpolicy.jsonl import runner
from contextpolicy.jsonl.diagnose import json_problem
from contextpolicy.jsonl.files import InputFile
from contextpolicy.jsonl.worker import LineWorker
from contextpolicy.synthetic import corpus
from tests.support.lines import (
    HYPOTHESIS,
    POLICIES,
    SEED_POLICY,
    VALIDATE_POLICY,
    frame,
    generated_lines,
    run_lines,
    trim_policy,
)
from tests.support.scan import (
    CHARS,
    HANDLED,
    ORPHANS,
    SCAN_FIGURES,
    SCAN_NUMBER,
    UNANSWERED,
    check_call,
    exact_loads,
    rows,
)

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
# the synthetic corpora: every line takes the byte path, and agrees with the object path


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
# named examples with their figures


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
