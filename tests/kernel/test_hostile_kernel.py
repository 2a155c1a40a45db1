"""The kernels never crash and always agree, whatever Python objects they are given: deep and
cyclic nesting, subclasses whose methods lie, values that change while they are read.

Every case runs in a fresh interpreter (``tests/support/hostile.py``), so a kernel that crashes fails
these tests instead of killing the test runner.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from contextpolicy._tables import MAX_JSON_DEPTH, MAX_NESTING
from tests.support.hostile import CASES
from tests.support.hostile_json import JSON_VALUES, compact_json, json_cases_at

ROOT = Path(__file__).resolve().parents[2]

# What each case must give, on every kernel: ("value", figures) or ("raised", code).
EXPECTED: dict[str, tuple[str, Any]] = {
    "nesting-at-the-limit": ("value", [[3], [6], [2], [0]]),
    "nesting-past-the-limit": ("raised", "too-deep"),
    "nesting-100000": ("raised", "too-deep"),
    "content-contains-itself": ("raised", "too-deep"),
    "contents-contain-each-other": ("raised", "too-deep"),
    # A tool input is measured at every depth up to MAX_JSON_DEPTH; deeper, or a value that
    # contains itself, is too-deep (JSON_DEPTH_EXPECTED below: at and around the limit).
    "json-deep-1000": ("value", [[4], [1 + 2 * 1000 + 1], [4], [0]]),
    "json-deep-100000": ("raised", "too-deep"),
    "json-cyclic": ("raised", "too-deep"),
    # "f" + '{"n":<61 digits>,"m":-18446744073709551616}'
    "json-huge-int": ("value", [[4], [1 + len(f'{{"n":{2**200},"m":{-(2**64)}}}')], [4], [0]]),
    "json-int-beyond-the-str-limit": ("raised", "invalid-json"),
    "trims-with-negative-figures": ("value", [
        ["ValueError", "keep_groups must be >= 0"], ["ValueError", "keep_groups must be >= 0"],
        ["ValueError", "target_chars must be >= 0"]]),
    "cut-of-a-shorter-list": ("value", [
        ["ValueError", "flags and messages differ in length (4 != 0)"],
        ["ValueError", "flags and messages differ in length (4 != 0)"]]),
    # Two user turns; the result's call was replaced by junk after measuring: the cut stays.
    "cut-after-a-call-turned-junk": ("value", ["value", [1, 2, 2]]),
    # The real storage of a list subclass, whatever its __iter__ says.
    "plan-of-a-lying-fragment-list": ("value", [3, 1, 0, 3, 1, 0, 0, 0, True]),
    "json-int-and-float-subclasses": ("value", [[4], [1 + len("[5,0.5,1e+300]")], [4], [0]]),
    "items-shrinks-the-history": ("raised", "changed-while-measured"),
    "items-grows-the-history": ("raised", "changed-while-measured"),
    # A content list that grows or shrinks while it is read is an error, at the same point on
    # both kernels (so a list that keeps growing cannot keep the kernel going) ...
    "items-clears-the-parts": ("raised", "changed-while-measured"),
    "items-grows-the-parts-forever": ("raised", "changed-while-measured"),
    # ... one whose items are replaced is read as it is at each step: "texts" is read, not "gone".
    "items-replaces-the-parts": ("value", [[4], [1 + len('{"k":1}') + len("texts")], [4], [0]]),
    # Every key of a message is read before its parts run any Python code.
    "items-drops-the-message-keys": ("value", [[4, 5], [1 + 11 + 3, 1], [4, 2], [0, 0]]),
    "lying-str-content": ("value", [[3], [5000], [1], [0]]),
    "lying-str-role": ("value", [[1], [1], [0], [0]]),
    "lying-str-part-type": ("value", [[3], [0], [1], [1]]),
    "lying-dict-message": ("value", [[4], [22], [0], [0]]),
    "lying-dict-part": ("value", [[3], [14], [1], [0]]),
    "lying-list-content": ("value", [[3], [7], [1], [0]]),
    "lying-list-messages": ("value", [[3, 4], [3, 2], [1, 0], [0, 0]]),
    "lying-list-tool-calls": ("value", [[4], [4], [4], [0]]),
    "str-subclass-keys": ("value", [[3], [16], [1], [0]]),
    "pieces-of-subclasses": ("value", [["str", "abc"], ["str", "de"]]),
    "pairing-after-the-messages-changed": (
        "value", [[0, "unanswered-tool-call", "c1"], [2, "orphan-tool-result", None]],
    ),
    "pairing-with-lying-ids": (
        "value", [[0, "unanswered-tool-call", "a"], [2, "orphan-tool-result", "zzz"]],
    ),
    "pairing-of-a-lying-list": ("value", []),
    # Roles by the text a str subclass holds (a LyingStr("user") is the user's); read as they
    # are when asked, and an error when a flagged message is no longer one.
    "unknown-roles-of-lying-strs": ("value", [True, [[0, "human", 2], [3, "ai", 1]]]),
    "unknown-roles-after-the-roles-changed": ("value", [
        ["value", [[0, "critic", 1], [1, "ai", 1], [2, "human", 1]]],
        ["ContextPlanError", "invalid context plan: messages[2].role: the message changed while "
         "it was measured (it no longer holds a string role) [changed-while-measured]"],
        ["ValueError", "flags and messages differ in length (3 != 0)"]]),
    # Responses items: the same limits, checks and reading rules as chat messages.
    "item-output-contains-itself": ("raised", "too-deep"),
    "item-output-nesting-at-the-limit": ("value", [[0], [6], [2], [0]]),
    "item-output-nesting-past-the-limit": ("raised", "too-deep"),
    "item-arguments-clear-the-history": ("raised", "changed-while-measured"),
    "item-summary-grows-forever": ("raised", "changed-while-measured"),
    # Every key is read before the arguments run Python code: it is measured as the call it was.
    "item-turns-into-a-message-while-read": ("value", [[0, 0], [1 + len('{"q":1}'), 1], [4, 2],
                                                       [0, 0]]),
    "item-json-arguments-deep": ("raised", "too-deep"),
    # Types and ids by the text a str subclass holds.
    "lying-str-item-type": ("value", [[0, 0, 0], [3, 2, 0], [2, 8, 0], [0, 0, 1]]),
    "lying-dict-item": ("value", [[0], [2], [4], [0]]),
    "pairing-items-with-lying-ids": ("value", [[1, "orphan-tool-result", "b"],
                                               [3, "orphan-tool-result", None]]),
    # Pairing reads the items as they are now: the call is gone, the output a tool message.
    "pairing-of-items-turned-junk": ("value", [[1, "orphan-tool-result", None]]),
    # The handler's copy loses its roles; the caller's messages, and the pairing pass, do not.
    "handler-strips-roles-then-fails": ("value", [
        "failed", "wrong-shape", ["orphan-tool-result"], ["user", "assistant", "tool", "user"],
    ]),
    # A key with a __del__ (a str subclass, an object) is never released by the kernel while it
    # scans a dict: the __del__ runs when the caller drops the key, never mid-scan.
    "key-released-mid-scan-str-subclass": ("value", [[[3], [50000], [1], [0]], False]),
    "key-released-mid-scan-object": ("value", [[[3], [50000], [1], [0]], False]),
    # Chars below zero or past 64 bits: a clear error, never a cut at a wrapped sum.
    "trim-cut-of-negative-group-chars": ("value", ["ValueError", "group_chars must be >= 0"]),
    "trim-cut-of-group-chars-past-64-bits": (
        "value", ["ValueError", "group_chars add up to more than 64 bits hold"]),
    "trim-cut-many-of-negative-chars": ("value", ["ValueError", "chars must be >= 0"]),
    "trim-cut-many-of-chars-past-64-bits": (
        "value", ["ValueError", "the chars of row 1 add up to more than 64 bits hold"]),
    # The compiled kernel's own JSON writer: json.dumps(value, separators=(",", ":"),
    # ensure_ascii=False), character for character (tool_use input, function_call arguments,
    # tool_calls arguments), and at every depth around where it hands over to the encoder.
    **{name: ("value", [["str", ascii("f")], *[["str", ascii(compact_json(value))]] * 3,
                        [2, 3, 4]])
       for name, value in JSON_VALUES.items()},
    # gather_bytes: every range within the source, the total exactly the output's size, the
    # positions read once into a copy of their own (an array that shifts its values each time
    # it is read is copied as it was first read), a writable output of any contiguous kind.
    "gather-bytes-past-the-source": ("value", ["ValueError", "gather_bytes: range 1 is 3..9, "
                                               "expected 0 <= start <= stop <= 5"]),
    "gather-bytes-backwards": ("value", ["ValueError", "gather_bytes: range 0 is 4..1, "
                                         "expected 0 <= start <= stop <= 5"]),
    "gather-bytes-negative": ("value", ["ValueError", "gather_bytes: range 0 is -1..2, "
                                        "expected 0 <= start <= stop <= 5"]),
    "gather-bytes-wrapped-uint64": ("value", ["ValueError",
                                              "gather_bytes: starts must be below 2**63"]),
    "gather-bytes-more-than-out": ("value", ["ValueError", "gather_bytes: the ranges hold 10 "
                                             "bytes, out holds 9"]),
    "gather-bytes-less-than-out": ("value", ["ValueError", "gather_bytes: the ranges hold 5 "
                                             "bytes, out holds 6"]),
    "gather-bytes-repeated-past-out": ("value", ["ValueError", "gather_bytes: the ranges hold "
                                                 "8 bytes, out holds 3"]),
    "gather-bytes-read-only-out": ("value", ["ValueError",
                                             "gather_bytes: out must be a writable buffer"]),
    "gather-bytes-float-starts": ("value", ["TypeError",
                                            "gather_bytes: expected integer starts, got float64"]),
    "gather-bytes-object-starts": ("value", ["TypeError",
                                             "gather_bytes: expected integer starts, got object"]),
    "gather-bytes-2d-starts": ("value", ["ValueError",
                                         "gather_bytes: expected a 1-d array of starts"]),
    "gather-bytes-uneven": ("value", ["ValueError", "gather_bytes: 2 starts but 1 stops"]),
    "gather-bytes-not-a-buffer": ("value", ["TypeError",
                                            "a bytes-like object is required, not 'str'"]),
    "gather-bytes-starts-shift-when-read": ("value", ["value", "hewor"]),
    "gather-bytes-starts-flipped-by-a-thread": ("value", []),
    "gather-bytes-out-of-a-slice": ("value", ["value", "worldhello"]),
    # The columnar kernel's range checks: ranges within their array, offsets that never
    # decrease nor outgrow their dtype, and arrays read once each (a thread changing them
    # meanwhile gets what was read as one whole, or an error naming what is wrong).
    "gather-offsets-past-the-end": ("value", ["ValueError", "gather_offsets: range 0 is 1+2, "
                                              "expected within 0..2"]),
    "gather-offsets-negative-length": ("value", ["ValueError", "gather_offsets: range 0 is "
                                                 "1+-1, expected within 0..2"]),
    "gather-offsets-that-decrease": ("value", ["ValueError", "gather_offsets: the offsets of "
                                               "range 0 are negative or decrease"]),
    "gather-offsets-past-int32": ("value", ["ValueError", "gather_offsets: the gathered values "
                                            "need more than offsets of int32 can address"]),
    "gather-offsets-float": ("value", ["TypeError", "gather_offsets: expected int32 or int64 "
                                       "offsets, got float64"]),
    "gather-offsets-2d": ("value", ["ValueError",
                                    "gather_offsets: expected a 1-d array of offsets"]),
    "gather-offsets-flipped-by-a-thread": ("value", []),
    "gather-bits-past-the-bitmap": ("value", ["ValueError", "gather_bits: range 0 is 2+4, "
                                              "expected within 0..5"]),
    "gather-bits-negative-offset": ("value", ["ValueError",
                                              "gather_bits: bit_offset must be >= 0, got -1"]),
    # bits 3..6 and 7..9 of 0x0f 0xf0: 1,0,0,0 then 0,0,0 -> one set bit.
    "gather-bits-across-bytes": ("value", ["value", [[1], 1]]),
    "utf8-lengths-offsets-flipped-by-a-thread": ("value", []),
    "role-codes-offsets-flipped-by-a-thread": ("value", []),
    "string-codes-offsets-flipped-by-a-thread": ("value", []),
    "string-ids-offsets-flipped-by-a-thread": ("value", []),
    "string-ids-position-past-the-strings": ("value", [
        "ValueError", "string_ids: position 2 of source 0 is outside 0..1"]),
    "string-ids-negative-position": ("value", [
        "ValueError", "string_ids: position -1 of source 0 is outside 0..1"]),
    "string-ids-offsets-past-the-data": ("value", [
        "ValueError", "string_ids: the offsets of source 0 must be non-decreasing and within "
        "its data"]),
    "string-ids-source-not-a-tuple": ("value", [
        "TypeError", "string_ids: source 0 must be a tuple of (data, offsets, nulls, at)"]),
    "string-ids-nulls-of-another-length": ("value", [
        "ValueError", "string_ids: expected 2 nulls, got 3"]),
    "arrange-ids-messages-flipped-by-a-thread": ("value", []),
    "arrange-ids-messages-that-decrease": ("value", [
        "ValueError", "arrange_ids: the messages of source 1 must be >= 0 and non-decreasing"]),
    "arrange-ids-uneven": ("value", [
        "ValueError", "arrange_ids: source 0 has 2 messages but 1 codes"]),
    "arrange-ids-no-messages": ("value", ["value", [[], []]]),
    # Within message 1 the first source's item, then the second's two; message 3 likewise.
    "arrange-ids-merged": ("value", ["value", [[0, 1, 1, 1, 3, 3], [20, 10, 21, 22, 11, 23]]]),
    "string-codes-names-not-bytes": ("value", ["TypeError", "string_codes: names must be a "
                                               "tuple of 1 to 127 bytes"]),
    "string-codes-no-names": ("value", ["TypeError", "string_codes: names must be a tuple of 1 "
                                        "to 127 bytes"]),
    "part-chars-text-offsets-flipped-by-a-thread": ("value", []),
    "part-chars-message-offsets-past-the-parts": ("value", [
        "ValueError", "part_chars: part offsets must be non-decreasing and within 0..2"]),
    "part-chars-text-offsets-past-the-data": ("value", [
        "ValueError", "part_chars: text offsets must be non-decreasing and within 0..3"]),
    "part-chars-short-text-offsets": ("value", ["ValueError",
                                                "part_chars: expected 3 text offsets, got 2"]),
    "part-chars-invalid-utf-8": ("value", ["Utf8Error",
                                           "invalid UTF-8 in text of part 1 at byte 2"]),
    "part-chars-int64-kinds": ("value", ["TypeError",
                                         "part_chars: expected a 1-d int8 array of kinds"]),
    "part-chars-kinds-out-of-range": ("value", ["value", [[0], [0], [False]]]),
    "part-chars-nulls-of-a-wrong-length": ("value", ["ValueError",
                                                     "part_chars: expected 2 text nulls, got 1"]),
    "part-chars-negative-extra": ("value", ["ValueError", "part_chars: extra must be >= 0, and "
                                            "a message's chars below 2**63"]),
    "part-chars-extra-past-64-bits": ("value", ["ValueError", "part_chars: extra must be >= 0, "
                                                "and a message's chars below 2**63"]),
    "part-chars-fields-not-a-tuple": ("value", ["TypeError", "part_chars: fields must be a "
                                                "tuple of 4 (one per ('text', 'content', "
                                                "'name', 'thinking'))"]),
    "part-chars-huge-ntext": ("value", ["OverflowError",
                                        "Python int too large to convert to C ssize_t"]),
    "reduce-rows-offsets-flipped-by-a-thread": ("value", []),
    "group-offsets-flags-flipped-by-a-thread": ("value", []),
    "json-string-lengths-offsets-flipped-by-a-thread": ("value", []),
    "json-string-lengths-invalid-utf-8": ("value", ["Utf8Error",
                                                    "invalid UTF-8 in string 1 at byte 2"]),
    "utf8-lengths-offsets-that-wrap": ("value", [
        "ValueError", "utf8_lengths: offsets must be non-decreasing and within 0..2"]),
    "json-string-lengths-offsets-that-wrap": ("value", [
        "ValueError", "json_string_lengths: offsets must be non-decreasing and within 0..2"]),
    "utf8-validate-offsets-flipped-by-a-thread": ("value", []),
    "utf8-validate-offsets-that-wrap": ("value", [
        "ValueError", "utf8_validate: offsets must be non-decreasing and within 0..2"]),
    "utf8-validate-offsets-that-decrease-after-a-bad-string": ("value", [
        "ValueError", "utf8_validate: offsets must be non-decreasing and within 0..3"]),
    "utf8-validate-nulls-of-a-wrong-length": ("value", [
        "ValueError", "utf8_validate: expected 2 nulls, got 1"]),
    "utf8-validate-a-character-cut-between-strings": ("value", [
        "Utf8Error", "invalid UTF-8 in string 0 at byte 0"]),
    "utf8-validate-bytes-under-a-null": ("value", [
        ["value", None], ["Utf8Error", "invalid UTF-8 in string 2 at byte 3"]]),
    "part-chars-invalid-utf-8-in-a-field-its-kind-does-not-count": ("value", [
        "Utf8Error", "invalid UTF-8 in name of part 1 at byte 1"]),
    "trim-cut-many-offsets-that-wrap": ("value", [
        "ValueError", "trim_cut_many: offsets must be non-decreasing and within 0..2"]),
    "reduce-lines-starts-flipped-by-a-thread": ("value", []),
    "json-nesting-around-the-native-limit": ("value", [True] * 10),
    # reduce_plan reads the fragment list as it is after a fragment's Python code emptied it,
    # and a protected kind is declined before ``protected`` is read.
    "plan-emptied-by-its-last-fragment": ("value", None),
    "plan-step-on-a-protected-kind": ("value", None),
    # The encoder runs items(), which clears the list being encoded: both stop where it ends.
    "json-input-clears-its-own-list": ("value", [[4], [1 + len('[1,"two",{"k":[3]}]')], [4],
                                                 [0]]),
    # Every key of the call is read before its arguments run Python code; the next message is
    # read as it is when its turn comes.
    "item-arguments-empty-the-call-and-the-parts": (
        "value", [[0, 4], [1 + len('{"q":"é😀"}'), 0], [4, 0], [0, 0]]),
}




def _subclass_levels_chars(levels: int) -> int:
    # deep_subclasses: a list subclass, a dict subclass ({"k":...}) and a tuple in turn, around
    # "end".
    return len('"end"') + sum((2, 6, 2)[k % 3] for k in range(levels))


def _json_depth_expected(levels: int) -> dict[str, tuple[str, Any]]:
    if levels > MAX_JSON_DEPTH:
        return {name: ("raised", "too-deep") for name in json_cases_at(levels)}
    text = "[" * levels + "1" + "]" * levels

    def call(chars: int) -> list[list[int]]:  # a tool_use block named "f", or a call item
        return [[4], [1 + chars], [4], [0]]

    return {
        f"json-deep-{levels}": ("value", call(len(text))),
        f"json-deep-objects-{levels}": ("value", call(6 * levels + 1)),
        f"json-deep-subclasses-{levels}": ("value", call(_subclass_levels_chars(levels))),
        f"json-deep-{levels}-with-a-big-int-at-the-bottom": (
            "value", call(2 * levels + len(str(2**70)))),
        f"item-arguments-deep-{levels}": ("value", [[0], [len(text)], [4], [0]]),
        f"item-input-deep-{levels}": ("value", [[0], [len(text)], [4], [0]]),
        f"tool-call-arguments-deep-{levels}": ("value", call(len(text))),
        f"json-pieces-deep-{levels}": (
            "value", [["str", ascii("f")], *[["str", ascii(text)]] * 3, [2, 3, 4]]),
    }


JSON_DEPTH_EXPECTED: dict[str, tuple[str, Any]] = {
    **_json_depth_expected(MAX_JSON_DEPTH - 1), **_json_depth_expected(MAX_JSON_DEPTH),
    **_json_depth_expected(MAX_JSON_DEPTH + 1),
    "json-list-contains-itself": ("raised", "too-deep"),
    "json-subclass-contains-itself": ("raised", "too-deep"),
    "json-items-deepen-forever": ("raised", "too-deep"),
    "json-invalid-before-too-deep": ("raised", "invalid-json"),
    "json-too-deep-before-invalid": ("raised", "too-deep"),
    "json-deep-1024-under-a-low-recursion-limit": ("value", [
        [4, 4], [1 + 2 * MAX_JSON_DEPTH + 1, 1 + _subclass_levels_chars(MAX_JSON_DEPTH)],
        [4, 4], [0, 0]]),
    "json-deep-1025-under-a-high-recursion-limit": ("raised", "too-deep"),
    "json-subclasses-1025-under-a-high-recursion-limit": ("raised", "too-deep"),
    "compact-json-deep-1024": ("value", 2 * MAX_JSON_DEPTH + 1),
    "compact-json-deep-1025": ("raised", "too-deep"),
    "compact-json-length-deep-1024": ("value", 6 * MAX_JSON_DEPTH + 1),
    "compact-json-length-deep-1025": ("raised", "too-deep"),
}
EXPECTED.update(JSON_DEPTH_EXPECTED)


def run_cases(names: list[str], env: dict[str, str] | None = None) -> dict[str, dict[str, Any]]:
    proc = subprocess.run(
        [sys.executable, "-m", "tests.support.hostile", *names], cwd=ROOT, capture_output=True,
        text=True, timeout=300, env={**os.environ, **(env or {})},
    )
    rows = {}
    for line in proc.stdout.splitlines():
        row = json.loads(line)
        rows[row.pop("case")] = row
    if proc.returncode != 0:
        done = ", ".join(rows) or "none"
        rows["__crash__"] = {"returncode": proc.returncode, "stderr": proc.stderr[-3000:],
                             "after": done}
    return rows


@pytest.fixture(scope="module")
def outcomes(request: pytest.FixtureRequest) -> dict[str, dict[str, Any]]:
    return run_cases(list(EXPECTED))


def test_every_case_is_expected():
    assert set(EXPECTED) == set(CASES)


def test_no_kernel_crashed(outcomes):
    assert "__crash__" not in outcomes, outcomes.get("__crash__")


@pytest.mark.parametrize("name", list(EXPECTED))
def test_both_kernels_give_the_expected_answer(outcomes, kernels, name):
    assert name in outcomes, f"no outcome: the process died ({outcomes.get('__crash__')})"
    row = outcomes[name]
    kind, expected = EXPECTED[name]
    for kernel in kernels:
        got = row[kernel.IMPLEMENTATION]
        if kind == "value":
            assert got == {"value": expected}, (kernel.IMPLEMENTATION, got)
        else:
            assert got.get("raised") == "ContextPlanError", (kernel.IMPLEMENTATION, got)
            assert got["codes"] == [expected], (kernel.IMPLEMENTATION, got)
    first, *others = (row[k.IMPLEMENTATION] for k in kernels)
    for other in others:
        assert other == first


def test_the_nesting_limit_is_named_in_the_error(outcomes):
    message = outcomes["nesting-past-the-limit"]["python"]["message"]
    assert f"deeper than {MAX_NESTING} levels" in message
    assert "content[0]." * MAX_NESTING in message  # the path says where


@pytest.mark.parametrize("name, where", [
    ("json-deep-1025", "fragments[h].messages[0].content[0].input"),
    ("json-deep-subclasses-1025", "fragments[h].messages[0].content[0].input"),
    ("item-arguments-deep-1025", "fragments[h].messages[0].arguments"),
    ("item-input-deep-1025", "fragments[h].messages[0].input"),
    ("tool-call-arguments-deep-1025", "fragments[h].messages[0].tool_calls[0].function.arguments"),
    ("json-list-contains-itself", "fragments[h].messages[0].content[0].input"),
])
def test_the_json_depth_limit_is_named_in_the_error(outcomes, kernels, name, where):
    # Where (fragment, message, field) and the limit, word for word on both kernels.
    for kernel in kernels:
        message = outcomes[name][kernel.IMPLEMENTATION]["message"]
        assert message == (f"invalid context plan: {where}: the JSON value nests arrays and "
                           f"objects deeper than {MAX_JSON_DEPTH} levels (or contains itself) "
                           "[too-deep]")



FUZZ_EXAMPLES = 2000


@pytest.mark.usefixtures("two_kernels")
def test_fuzzed_hostile_histories_agree_and_never_crash():
    # tests/support/fuzz_kernel.py: hypothesis histories made hostile (lying subclasses, str-subclass
    # keys, tool inputs that change the history while it is measured, cycles, deep nesting),
    # measured, split into text pieces and paired on every kernel, in a fresh interpreter.
    proc = subprocess.run(
        [sys.executable, "-m", "tests.support.fuzz_kernel", str(FUZZ_EXAMPLES)], cwd=ROOT,
        capture_output=True, text=True, timeout=600,
    )
    assert proc.returncode == 0, (proc.returncode, proc.stdout[-2000:], proc.stderr[-4000:])
    ran = int(proc.stdout.split()[0])
    assert ran == FUZZ_EXAMPLES
