"""The byte scan's checks, shared by its test modules (``tests/jsonl/test_scan_*.py``): one
``reduce_lines`` call on every kernel, with and without raw records, held line by line to the
object path (``orjson.loads`` and ``_kernel_py.reduce_transcript``); the figures as rows; and
lines of nested tool results."""

from __future__ import annotations

import array
import json
from typing import Any

import numpy as np
import orjson

from contextpolicy import _kernel_py
from contextpolicy._tables import LINE_FIGURE

from .lines import expected_figures, expected_records

SCAN_FIGURES = _kernel_py.SCAN_FIGURES
SCAN_NUMBER = _kernel_py.SCAN_NUMBER

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


def nested_results(levels: int) -> bytes:
    inner = '"leaf"'
    for _ in range(levels):
        inner = f'[{{"type":"tool_result","tool_use_id":"a","content":{inner}}}]'
    return ('{"messages":[{"role":"assistant","content":[{"type":"tool_use","id":"a"}]},'
            f'{{"role":"user","content":{inner}}},{{"role":"user","content":"q"}}]}}').encode()
