"""JSONL lines for the byte scan's tests: documents drawn and serialised every way JSON allows,
framed into buffers, run through both kernels and the runner, and the figures and records a line
must have."""

from __future__ import annotations

import json
import math
import random
from typing import Any

import orjson
import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st

from contextpolicy import _kernel_py
from contextpolicy._records import FusedRecord
from contextpolicy._tables import MISSED_REASONS, TEXT_PART_TYPES
from contextpolicy.jsonl import runner
from contextpolicy.jsonl.worker import LineWorker

from . import strategies as S

HYPOTHESIS = settings(
    max_examples=150, deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large,
                           HealthCheck.filter_too_much],
)


SEED_POLICY = {
    "mode": "reduce", "triggerChars": 1800, "targetInputChars": 1500,
    "selection": {"mode": "sequence"},
    "steps": [{"id": "t", "kind": "trim", "fragmentId": "history", "field": "messages",
               "grouping": {"kind": "user-turn"}, "keepGroups": 2, "targetChars": 1000}],
}


VALIDATE_POLICY = {"mode": "validate"}


def trim_policy(trigger: int, target: int, steps: list[tuple[str, int, int]]) -> dict[str, Any]:
    return {
        "mode": "reduce", "triggerChars": trigger, "targetInputChars": target,
        "selection": {"mode": "sequence"},
        "steps": [{"id": f"t{k}", "kind": "trim", "fragmentId": "history", "field": "messages",
                   "grouping": {"kind": grouping}, "keepGroups": keep, "targetChars": chars}
                  for k, (grouping, keep, chars) in enumerate(steps)],
    }


POLICIES = [
    SEED_POLICY,
    VALIDATE_POLICY,
    trim_policy(40, 20, [("message", 1, 15)]),
    trim_policy(1, 1, [("user-turn", 0, 0)]),
    trim_policy(30, 10, [("user-turn", 1, 25), ("message", 0, 5)]),
]


def expected_records(messages: list[Any], steps: Any, trig: int, wm: int) -> FusedRecord:
    """What ``raws[i][0]`` must be: the object path's records, kept lists as ``True``/``None``
    and no assembled input."""
    records = _kernel_py.reduce_transcript(messages, steps, trig, wm)
    return records._replace(kept=[None if k is None else True for k in records.kept],
                            input=None)


def expected_missed(records: FusedRecord, steps: Any, wm: int) -> str | None:
    """A report's missedReason from a reduce's records: only when it triggered and missed its
    target; the fragments no trim names over the target, else a trim held by its keepGroups
    floor, else nothing a trim could do."""
    if not records.triggered or records.watermark_met:
        return None
    named = {step[0] for step in steps}
    if wm >= 0 and sum(a.chars for fid, a in zip(records.ids, records.after)
                       if fid not in named) > wm:
        return "protected-over-target"
    if any(d.reason == "keep-groups-floor" for d in records.steps):
        return "keep-groups-floor"
    return "no-step-could-act"


def expected_figures(records: FusedRecord, steps: Any, wm: int) -> list[int]:
    """A line's figures, in the order of LINE_FIGURES, written out here one by one."""
    t = records
    codes = [w.code for w in records.warnings]
    missed = expected_missed(records, steps, wm)
    return [1, int(records.triggered), int(t.watermark_met), t.chars_before, t.chars_after,
            t.messages_before, t.messages_after, t.messages_removed, t.groups_removed,
            codes.count("orphan-tool-result"), codes.count("unanswered-tool-call"),
            int(t.chars_after < t.chars_before or t.messages_after < t.messages_before),
            *(int(missed == reason) for reason in MISSED_REASONS),
            codes.count("unknown-role")]


def frame(lines: list[bytes], rnd: random.Random | None = None) -> tuple[bytes, list[int],
                                                                          list[int]]:
    """The lines one after another in one buffer, with newlines (and random bytes that belong
    to no line) between them."""
    data = bytearray()
    starts, stops = [], []
    for line in lines:
        if rnd is not None and rnd.random() < 0.3:
            data += rnd.choice([b"", b"\n", b"  \n", b"{", b"garbage", b'"', b"\\"])
        starts.append(len(data))
        data += line
        stops.append(len(data))
        data += b"\n"
    if rnd is not None and rnd.random() < 0.5:
        data = data[:-1]  # the last line at the very end of the buffer
    return bytes(data), starts, stops


plain_text = st.text(st.characters(codec="utf-8"), max_size=20) | st.sampled_from(
    ["", "😀", "订单", "a\nb", 'q"\\', "\x00\x1f", "🏽" * 5, "\u2028\u2029", "/", "\x7f"])


text = plain_text | plain_text | plain_text | S.text


IDS = st.sampled_from(["a", "b", "c", "call_1"]) | st.sampled_from(["é", "a b", ""]) | text


numbers = (st.integers(-(2**63), 2**63 - 1) | st.integers() | st.sampled_from(
    [0, -1, 10**19, 10**20, -(10**25), 2**64 - 1, 2**64]) | st.floats(allow_nan=False)
    | st.sampled_from([0.0, -0.0, 1e-300, 1e300, 1.5, 2.5e-8, 1e22, 5e-324]))


json_value = st.recursive(
    st.none() | st.booleans() | numbers | text,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(text, inner, max_size=4),
    max_leaves=10,
)


text_part = st.fixed_dictionaries({"type": st.sampled_from(TEXT_PART_TYPES), "text": text})


image_part = st.sampled_from([
    {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "iVBO"}},
    {"type": "image_url", "image_url": {"url": "https://example.com/a.png"}},
    {"type": "input_audio", "input_audio": {"data": "AAAA", "format": "wav"}},
    {"type": "redacted_thinking", "data": "xyz"}, {"no_type": 1}, {"type": 7}, {},
    {"type": None}, {"type": "text", "text": None}, {"type": "text"},
    {"type": "thinking", "thinking": 5},
])


thinking_part = st.fixed_dictionaries({"type": st.just("thinking"), "thinking": text},
                                      optional={"signature": text})


tool_use_part = st.fixed_dictionaries(
    {"type": st.just("tool_use")},
    optional={"id": IDS | st.none() | st.integers(), "name": text | st.none(),
              "input": json_value},
)


tool_result_part = st.recursive(
    st.fixed_dictionaries(
        {"type": st.just("tool_result")},
        optional={"tool_use_id": IDS | st.none() | st.integers(), "is_error": st.booleans(),
                  "content": st.none() | text | st.lists(text_part | image_part | text,
                                                         max_size=3)}),
    lambda inner: st.fixed_dictionaries(
        {"type": st.just("tool_result"), "tool_use_id": IDS,
         "content": st.lists(inner | text_part | text, max_size=2)}),
    max_leaves=3,
)


part = text_part | image_part | thinking_part | tool_use_part | tool_result_part | text


content = st.none() | text | st.lists(part, max_size=4)


tool_call = st.fixed_dictionaries(
    {}, optional={
        "id": IDS | st.none() | st.integers(), "type": st.just("function"),
        "function": st.none() | st.fixed_dictionaries(
            {}, optional={"name": text | st.none(),
                          "arguments": st.none() | text | json_value}),
    })


extra = st.dictionaries(st.sampled_from(["name", "meta", "x", "ts", "weight"]), json_value,
                        max_size=2)


chat_message = st.one_of(
    st.fixed_dictionaries({"role": st.just("user"), "content": content}),
    st.fixed_dictionaries({"role": st.just("assistant")},
                          optional={"content": content,
                                    "tool_calls": st.none() | st.lists(tool_call, max_size=3)}),
    st.fixed_dictionaries({"role": st.sampled_from(["tool", "function"]), "content": content},
                          optional={"tool_call_id": IDS | st.none() | st.integers()}),
    st.fixed_dictionaries({"role": st.sampled_from(["system", "developer", "critic", ""]),
                           "content": content}),
)


message = st.tuples(chat_message, extra).map(lambda t: {**t[0], **t[1]})


any_message = message | message | message | S.chat_message | S.responses_item | S.bad_message


@st.composite
def transcripts(draw) -> list[Any]:
    head = draw(st.lists(st.fixed_dictionaries(
        {"role": st.sampled_from(["system", "developer"]), "content": content}), max_size=2))
    # one transcript in four mixes in the shared strategies' messages
    body = draw(st.lists(any_message if draw(st.integers(0, 3)) == 0 else message,
                         max_size=10))
    if draw(st.booleans()):
        body = body * draw(st.integers(1, 4))  # longer histories, ids repeated
    question = draw(st.lists(st.fixed_dictionaries(
        {"role": st.just("user"), "content": text | st.lists(text_part, max_size=2)}),
        max_size=1))
    return head + body + question


id_value = (st.none() | text | st.integers() | st.floats(allow_nan=False)
            | st.sampled_from([10**20, -(10**22), "c-1", [1, 2], {"a": "b"}]))


@st.composite
def documents(draw) -> Any:
    kind = draw(st.integers(0, 19))
    if kind == 0:  # something that is not a transcript
        return draw(st.sampled_from([
            [], {}, "x", 5, None, [{"messages": []}], {"id": 1}, {"messages": None},
            {"messages": {"a": 1}}, {"messages": "x"},
            {"fragments": [], "messages": []},
            {"messages": [], "fragments": [{"id": "a", "kind": "system", "text": "x"}]},
        ]))
    doc: dict[str, Any] = {"messages": draw(transcripts())}
    if draw(st.booleans()):
        doc["id"] = draw(id_value)
    doc.update(draw(st.dictionaries(st.sampled_from(["meta", "source", "n", "tags", "score"]),
                                    json_value, max_size=2)))
    items = list(doc.items())
    draw(st.randoms(use_true_random=False)).shuffle(items)
    return dict(items)


WS = [" ", "\t", "\r", "  ", " \r\t", "\t\t"]


class Writer:
    """JSON text of a document, written token by token: whitespace between tokens, characters
    written as escapes (astral ones as surrogate pairs), keys written with escapes, keys
    repeated (an earlier decoy value, the real one last), numbers in other forms."""

    def __init__(self, rnd: random.Random, *, ws: float = 0.0, escape: float = 0.0,
                 ascii_only: bool = False, key_escape: float = 0.0, dup: float = 0.0,
                 numbers: float = 0.0, protect: tuple[str, ...] = ()) -> None:
        self.rnd, self.ws_p, self.escape_p, self.ascii = rnd, ws, escape, ascii_only
        self.key_escape_p, self.dup_p, self.numbers_p = key_escape, dup, numbers
        self.protect = protect  # keys whose string values are written without needless escapes

    def dumps(self, value: Any) -> bytes:
        return (self._ws() + self.value(value) + self._ws()).encode("utf-8", "surrogatepass")

    def _ws(self) -> str:
        return self.rnd.choice(WS) if self.ws_p and self.rnd.random() < self.ws_p else ""

    def value(self, v: Any) -> str:
        if v is None:
            return "null"
        if v is True:
            return "true"
        if v is False:
            return "false"
        if isinstance(v, int):
            return self.integer(v)
        if isinstance(v, float):
            return self.real(v)
        if isinstance(v, str):
            return self.string(v, self.escape_p)
        if isinstance(v, list):
            if not v:
                return "[" + self._ws() + "]"
            inner = (self._ws() + "," + self._ws()).join(self.value(x) for x in v)
            return "[" + self._ws() + inner + self._ws() + "]"
        assert isinstance(v, dict), v
        entries = []
        for key, item in v.items():
            key = str(key) if not isinstance(key, bool) else json.dumps(key)
            if self.dup_p and self.rnd.random() < self.dup_p:
                decoy = self.rnd.choice([None, "decoy", 0, [], {}])
                entries.append(self.entry(key, decoy))
            entries.append(self.entry(key, item))
        if not entries:
            return "{" + self._ws() + "}"
        return ("{" + self._ws() + (self._ws() + "," + self._ws()).join(entries) + self._ws()
                + "}")

    def entry(self, key: str, item: Any) -> str:
        value = self.string(item, 0.0) if isinstance(item, str) and key in self.protect else (
            self.value(item))
        return (self.string(key, 1.0 if self.key_escape_p and self.rnd.random()
                            < self.key_escape_p else 0.0)
                + self._ws() + ":" + self._ws() + value)

    def integer(self, v: int) -> str:
        if self.numbers_p and self.rnd.random() < self.numbers_p:
            forms = [f"{v}.0", f"{v}e0", f"{v}E+00", f"{v}.000e-0"]
            if v == 0:
                forms += ["-0", "-0.0", "0e5", "-0E-3"]
            return self.rnd.choice(forms)
        return str(v)

    def real(self, v: float) -> str:
        if not math.isfinite(v):
            return {math.inf: "Infinity", -math.inf: "-Infinity"}.get(v, "NaN")
        if self.numbers_p and self.rnd.random() < self.numbers_p:
            return self.rnd.choice([f"{v:.17g}", f"{v:.17e}", f"{v:.17E}", repr(v)])
        return repr(v)

    def string(self, s: str, escape_p: float) -> str:
        out = ['"']
        for ch in s:
            cp = ord(ch)
            if ch == '"':
                out.append('\\"')
            elif ch == "\\":
                out.append("\\\\")
            elif cp < 0x20:
                short = {8: "\\b", 9: "\\t", 10: "\\n", 12: "\\f", 13: "\\r"}.get(cp)
                out.append(short if short and self.rnd.random() < 0.5 else f"\\u{cp:04x}")
            elif (escape_p and self.rnd.random() < escape_p) or (self.ascii and cp >= 0x80):
                out.append(self.escaped(ch))
            else:
                out.append(ch)
        out.append('"')
        return "".join(out)

    def escaped(self, ch: str) -> str:
        cp = ord(ch)
        if ch == "/" and self.rnd.random() < 0.5:
            return "\\/"
        if cp > 0xFFFF:
            cp -= 0x10000
            hexes = [f"\\u{0xD800 + (cp >> 10):04x}", f"\\u{0xDC00 + (cp & 0x3FF):04x}"]
        else:
            hexes = [f"\\u{cp:04x}"]
        return "".join(h.upper().replace("\\U", "\\u") if self.rnd.random() < 0.3 else h
                       for h in hexes)


def serialise(doc: Any, how: str, rnd: random.Random) -> bytes:
    try:
        return _serialise(doc, how, rnd)
    except (TypeError, ValueError):  # keys json will not write (a tuple): the writer's str()
        return Writer(rnd).dumps(doc)


def _serialise(doc: Any, how: str, rnd: random.Random) -> bytes:
    if how == "orjson":
        try:
            return orjson.dumps(doc, option=orjson.OPT_NON_STR_KEYS)
        except (TypeError, orjson.JSONEncodeError):
            how = "utf-8"
    if how == "ascii":  # every non-ASCII char as \\uXXXX escapes, json's default separators
        return json.dumps(doc, ensure_ascii=True).encode()
    if how == "utf-8":
        return json.dumps(doc, ensure_ascii=False, separators=(",", ":")).encode(
            "utf-8", "surrogatepass")
    if how == "whitespace":
        return Writer(rnd, ws=0.7).dumps(doc)
    if how == "escapes":
        # escapes in text (counted one char each), not where they send a line to the objects
        return Writer(rnd, escape=0.2, numbers=0.3, ascii_only=rnd.random() < 0.5,
                      protect=PROTECTED).dumps(doc)
    if how == "keys":
        return Writer(rnd, key_escape=0.02, dup=0.03, ws=0.1).dumps(doc)
    assert how == "everything"
    return Writer(rnd, ws=0.3, escape=0.1, key_escape=0.02, dup=0.03, numbers=0.2,
                  ascii_only=rnd.random() < 0.3).dumps(doc)


PROTECTED = ("role", "type", "id", "tool_call_id", "tool_use_id")


SERIALISERS = ["orjson", "ascii", "utf-8", "whitespace", "escapes", "keys", "everything"]


INVALID_UTF8 = [b"\xff", b"\x80", b"\xc0\x80", b"\xc1\xbf", b"\xe0\x80\x80", b"\xed\xa0\x80",
                b"\xed\xbf\xbf", b"\xf4\x90\x80\x80", b"\xf5\x80\x80\x80", b"\xe2\x82",
                b"\xf0\x9f\x98", b"\xc3", b"\xf8\x88\x80\x80\x80", b"\xfe"]


VALID_UTF8 = ["é", "€", "😀", "\U0010ffff", "\ud7ff", "\ue000", "\ufeff", "\u0800", "\x7f"]


GARBAGE = [b"x", b"}", b"]", b",", b"\x00", b" \x00", b"{}", b"\xef\xbb\xbf", b"\x0c", b"\x0b",
           b'"', b"\\", b"null", b"1"]


def mutate(line: bytes, rnd: random.Random, newlines: bool = True) -> bytes:
    """One byte-level change: a truncation, a stray, missing or replaced byte, invalid or valid
    UTF-8 or a control byte inside a string, garbage around the line, whitespace around it."""
    op = rnd.randrange(10)
    k = rnd.randrange(len(line) + 1)
    quotes = [i for i, c in enumerate(line) if c == 0x22] or [0]
    q = rnd.choice(quotes) + 1
    if op == 0:
        return line[:k]
    if op == 1:
        byte = rnd.randrange(256)
        while not newlines and byte == 10:
            byte = rnd.randrange(256)
        return line[:k] + bytes([byte]) + line[k:]
    if op == 2:
        return line[:k] + line[k + 1:]
    if op == 3 and k < len(line):
        byte = rnd.choice(b'{}[]:,"\\ 0123456789-+.eEtfnul\t\r\x00\x1f\x7f\x80')
        return line[:k] + bytes([byte]) + line[k + 1:]
    if op == 4:
        return line[:q] + rnd.choice(INVALID_UTF8) + line[q:]
    if op == 5:
        return line[:q] + rnd.choice(VALID_UTF8).encode("utf-8", "surrogatepass") + line[q:]
    if op == 6:
        control = rnd.choice([b"\x00", b"\x01", b"\x1f", b"\t", b"\r"] + ([b"\n"] if newlines
                                                                          else []))
        return line[:q] + control + line[q:]
    if op == 7:
        return line + rnd.choice(GARBAGE)
    if op == 8:
        return rnd.choice(GARBAGE) + line
    pad = [b" ", b"\t", b"\r", b"  \t\r "]
    return rnd.choice(pad) + line + rnd.choice(pad)


@st.composite
def generated_lines(draw, newlines: bool = True, mutations: bool = True) -> list[bytes]:
    rnd = draw(st.randoms(use_true_random=False))
    out = []
    for _ in range(draw(st.integers(1, 4))):
        doc = draw(documents())
        line = serialise(doc, draw(st.sampled_from(SERIALISERS)), rnd)
        if mutations and draw(st.integers(0, 4)) == 0:
            line = mutate(line, rnd, newlines)
        out.append(line)
    return out


def run_lines(lines: list[bytes], policy: dict[str, Any], byte_path: bool,
              with_reports: bool = True, runs: bool = False) -> list[runner.LineResult]:
    numbered = [(k + 1, line) for k, line in enumerate(lines)]
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(LineWorker, "byte_path", byte_path)
        return list(runner.process_lines([numbered], policy, with_reports=with_reports,
                                         runs=runs))
