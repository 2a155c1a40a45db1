"""The compiled kernel and the twin agree on every output and every error (hypothesis), on
bytes and Arrow buffers: UTF-8 lengths and validation, role codes, gathers of bytes, offsets and
bits, string codes and ids, ``arrange_ids``, part chars and JSON string lengths."""

from __future__ import annotations

import json
from itertools import pairwise
from typing import Any

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from contextpolicy._tables import FLAG_TOOL_CALLS, FLAG_TOOL_RESULT, ROLE_NAMES
from tests.support.differential import SETTINGS
from tests.support.strategies import text

# Every test here compares the kernels: with only the twin present they are skipped.
pytestmark = [pytest.mark.filterwarnings("ignore::DeprecationWarning"),
              pytest.mark.usefixtures("two_kernels")]


@SETTINGS
@given(st.lists(text, max_size=40), st.sampled_from([np.int32, np.int64]))
def test_utf8_lengths_agree(differential, strings, dtype):
    encoded = [s.encode("utf-8", "surrogatepass") for s in strings]
    data = b"".join(encoded)
    offsets = np.cumsum([0] + [len(e) for e in encoded]).astype(dtype)
    try:
        counts = differential("utf8_lengths", data, offsets)
    except ValueError:
        # Lone surrogates encode to invalid UTF-8: both twins refuse them alike.
        assert any("\ud800" <= ch <= "\udfff" for s in strings for ch in s)
        return
    assert counts.tolist() == [len(s) for s in strings]


@SETTINGS
@given(st.binary(max_size=200), st.lists(st.integers(0, 200), max_size=10))
def test_utf8_lengths_agree_on_arbitrary_bytes(differential, data, cuts):
    offsets = np.array(sorted({0, len(data), *[c for c in cuts if c <= len(data)]}), dtype=np.int64)
    try:
        counts = differential("utf8_lengths", data, offsets)
    except ValueError:
        return
    for r in range(len(offsets) - 1):
        assert counts[r] == len(data[offsets[r]:offsets[r + 1]].decode("utf-8"))


# Bytes of strings: mostly UTF-8 (ASCII runs long enough for the kernel's blocks, multi-byte
# characters, sequences that are not UTF-8), cut anywhere (inside a character too).
utf8_pieces = st.lists(st.sampled_from([
    b"a" * 40, b"hello", "é".encode(), "😀".encode(), "€".encode(), b"\xff", b"\xc3(",
    b"\xed\xa0\x80", b"\xf4\x90\x80\x80", b"\xe2\x82", b"\x80", b""]), max_size=30)


@SETTINGS
@given(utf8_pieces, st.lists(st.integers(0, 2000), max_size=12), st.data())
def test_utf8_validate_agrees_and_checks_every_string_not_null(differential, pieces, cuts,
                                                                data):
    buf = b"".join(pieces)
    offsets = np.array(sorted({0, len(buf), *[c for c in cuts if c <= len(buf)]}),
                       dtype=data.draw(st.sampled_from([np.int32, np.int64])))
    n = len(offsets) - 1
    nulls = data.draw(st.none() | st.lists(st.booleans(), min_size=n, max_size=n).map(
        lambda v: np.array(v, dtype=bool)))
    strings = [buf[offsets[r]:offsets[r + 1]] for r in range(n)]

    def valid(raw: bytes) -> bool:
        try:
            raw.decode("utf-8")
        except UnicodeDecodeError:
            return False
        return True

    at_fault = [r for r in range(n) if not (nulls is not None and nulls[r])
                and not valid(strings[r])]
    try:
        differential("utf8_validate", buf, offsets, nulls)
    except ValueError as exc:
        assert at_fault and exc.index == at_fault[0]
        raw = strings[exc.index]
        with pytest.raises(UnicodeDecodeError) as decoded:
            raw.decode("utf-8")
        assert exc.byte == int(offsets[exc.index]) + decoded.value.start
        return
    assert not at_fault


@SETTINGS
@given(st.lists(st.sampled_from([*ROLE_NAMES, "User", "toolx", ""]) | text, max_size=30))
def test_role_codes_agree(differential, roles):
    encoded = [r.encode("utf-8", "surrogatepass") for r in roles]
    offsets = np.cumsum([0] + [len(e) for e in encoded]).astype(np.int32)
    differential("role_codes_utf8", b"".join(encoded), offsets)


long_text = st.lists(
    st.sampled_from(["a", "hello ", "é", "订单", "😀", "\x00", "\x7f", "ß" * 3, "z" * 40]),
    max_size=120,
).map("".join)


@SETTINGS
@given(long_text, st.lists(st.integers(0, 2000), max_size=8))
def test_utf8_lengths_agree_on_strings_cut_anywhere_in_a_buffer(differential, text, cuts):
    # Long text cut at any byte, inside a sequence too: each string ends where the buffer goes
    # on, so its last block is read in place with the bytes after it masked off. The string
    # that ends in a sequence the next one finishes is invalid, as Python says.
    data = (text * 3).encode()
    bounds = sorted({0, len(data), *[c for c in cuts if c <= len(data)]})
    offsets = np.array(bounds, dtype=np.int64)
    pieces = [data[a:b] for a, b in pairwise(bounds)]
    try:
        counts = differential("utf8_lengths", data, offsets)
    except ValueError as exc:
        row = int(str(exc).split("string ")[1].split(" ")[0])
        with pytest.raises(UnicodeDecodeError):
            pieces[row].decode("utf-8")
        assert all(len(p.decode("utf-8")) >= 0 for p in pieces[:row])
        return
    assert counts.tolist() == [len(p.decode("utf-8")) for p in pieces]


@SETTINGS
@given(st.lists(long_text, max_size=12), st.data())
def test_utf8_lengths_agree_on_long_strings(differential, strings, data):
    encoded = [s.encode() for s in strings]
    if encoded and data.draw(st.booleans()):
        # Corrupt one byte somewhere: both twins must name the same string and byte.
        r = data.draw(st.integers(0, len(encoded) - 1))
        if encoded[r]:
            pos = data.draw(st.integers(0, len(encoded[r]) - 1))
            value = data.draw(st.integers(0x80, 0xFF))
            encoded[r] = encoded[r][:pos] + bytes([value]) + encoded[r][pos + 1:]
    offsets = np.cumsum([0] + [len(e) for e in encoded]).astype(np.int64)
    try:
        counts = differential("utf8_lengths", b"".join(encoded), offsets)
    except ValueError as exc:
        row = int(str(exc).split("string ")[1].split(" ")[0])
        with pytest.raises(UnicodeDecodeError):
            encoded[row].decode("utf-8")
        return
    assert counts.tolist() == [len(e.decode("utf-8")) for e in encoded]


@SETTINGS
@given(st.binary(max_size=300), st.data())
def test_gather_bytes_agrees(differential, src, data):
    # Ranges in any order, repeated and empty, mostly within the source, now and then backwards
    # or past it; an output of the right size, mostly: the same bytes, or the same error.
    edge = st.integers(0, len(src)) | st.integers(-3, len(src) + 3)
    ranges = data.draw(st.lists(st.tuples(edge, edge).map(
        lambda r: tuple(sorted(r)) if data.draw(st.integers(0, 9)) else r), max_size=20))
    starts = np.array([a for a, _ in ranges], dtype=np.int64)
    stops = np.array([b for _, b in ranges], dtype=np.int64)
    size = max(0, sum(b - a for a, b in ranges) + data.draw(st.sampled_from([0, 0, 0, -1, 1])))

    def gather(kernel):
        out = bytearray(size)
        kernel.gather_bytes(src, starts, stops, out)
        return bytes(out)

    try:
        got = differential(gather)
    except ValueError:
        assert not all(0 <= a <= b <= len(src) for a, b in ranges) or size != sum(
            b - a for a, b in ranges)
        return
    assert got == b"".join(src[a:b] for a, b in ranges)


# The columnar gather and measuring functions, on Arrow-layout arrays drawn at random: mostly
# well-formed, now and then out of range, decreasing, or of the wrong length.

def _offsets_of(sizes: list[int], dtype: Any) -> Any:
    return np.concatenate([[0], np.cumsum(sizes, dtype=np.int64)]).astype(dtype)


@SETTINGS
@given(st.lists(st.integers(0, 6), max_size=12), st.sampled_from([np.int32, np.int64]),
       st.data())
def test_gather_offsets_agrees(differential, sizes, dtype, data):
    offs = _offsets_of(sizes, dtype)
    if sizes and data.draw(st.integers(0, 9)) == 0:  # a decrease, or a negative first offset
        offs[data.draw(st.integers(0, len(sizes)))] = data.draw(st.sampled_from([-3, 2, 10]))
    n = len(sizes)
    ranges = data.draw(st.lists(st.tuples(st.integers(-1, n + 1), st.integers(-1, n + 1)),
                                max_size=6))
    starts = np.array([a for a, _ in ranges], dtype=np.int64)
    lengths = np.array([b for _, b in ranges], dtype=np.int64)
    try:
        got, lo, hi = differential("gather_offsets", offs, starts, lengths)
    except ValueError:
        return
    assert got.dtype == offs.dtype
    # The reference: the sizes of the elements taken, laid end to end.
    taken = [int(offs[a + i + 1] - offs[a + i]) for a, length in ranges for i in range(length)]
    assert got.tolist() == [0, *np.cumsum(taken, dtype=np.int64).tolist()]
    assert lo.tolist() == [int(offs[a]) for a, _ in ranges]
    assert hi.tolist() == [int(offs[a + length]) for a, length in ranges]


def test_gather_offsets_never_wrap(differential):
    offs = np.array([0, 2**30], dtype=np.int32)  # one element of 2**30 bytes, taken twice
    wide, lo, hi = differential("gather_offsets", offs.astype(np.int64), [0, 0], [1, 1])
    assert wide.tolist() == [0, 2**30, 2**31] and hi.tolist() == [2**30, 2**30]
    with pytest.raises(ValueError, match="more than offsets of int32 can address"):
        differential("gather_offsets", offs, [0, 0], [1, 1])


@SETTINGS
@given(st.binary(max_size=8), st.integers(-1, 20), st.data())
def test_gather_bits_agrees(differential, bitmap, bit_offset, data):
    limit = len(bitmap) * 8 - bit_offset
    edge = st.integers(-1, max(limit, 0) + 1)
    ranges = data.draw(st.lists(st.tuples(edge, edge), max_size=6))
    starts = np.array([a for a, _ in ranges], dtype=np.int64)
    lengths = np.array([b for _, b in ranges], dtype=np.int64)
    try:
        packed, count = differential("gather_bits", bitmap, bit_offset, starts, lengths)
    except ValueError:
        assert bit_offset < 0 or not all(0 <= a and 0 <= b and a + b <= limit for a, b in ranges)
        return
    bits = np.unpackbits(np.frombuffer(bitmap, dtype=np.uint8), bitorder="little")
    want = [int(bits[bit_offset + a + i]) for a, length in ranges for i in range(length)]
    assert np.unpackbits(packed, bitorder="little")[:len(want)].tolist() == want
    assert count == sum(want) and len(packed) == (len(want) + 7) // 8


_KIND_WORDS = ["text", "input_text", "tool_result", "tool_use", "thinking", "", "Text", "text ",
               "tool_use_", "é"]


@SETTINGS
@given(st.lists(st.sampled_from(_KIND_WORDS) | st.none(), max_size=12), st.data())
def test_string_codes_agrees(differential, values, data):
    import pyarrow as pa

    arr = pa.array(values, type=data.draw(st.sampled_from([pa.string(), pa.large_string()])))
    _, offs, raw = arr.buffers()
    dtype = np.int64 if pa.types.is_large_string(arr.type) else np.int32
    offsets = np.frombuffer(offs, dtype=dtype)[: len(arr) + 1]
    names = tuple(w.encode() for w in data.draw(
        st.lists(st.sampled_from(_KIND_WORDS), min_size=1, max_size=5)))
    nulls = np.array([v is None for v in values], dtype=bool)
    got = differential("string_codes", raw if raw is not None else b"", offsets, names, nulls)
    assert got.tolist() == [-1 if v is None or v.encode() not in names
                            else names.index(v.encode()) for v in values]


_ID_WORDS = ["", "a", "call_1", "call_12", "toolu_01Ab", "é", "x" * 17, "x" * 16 + "y",
             "😀" * 3]


@SETTINGS
@given(st.lists(st.tuples(st.lists(st.sampled_from(_ID_WORDS) | st.none(), max_size=10),
                          st.booleans(), st.booleans()), max_size=4), st.data())
def test_string_ids_agrees(differential, sources, data):
    # Several string arrays (narrow or wide offsets), all their strings or some positions:
    # equal strings one code, in order of first sight source by source, -1 for a null; and
    # the first sight of each code. Against a plain Python reference.
    import pyarrow as pa

    given, chosen = [], []
    for values, wide, pick in sources:
        arr = pa.array(values, type=pa.large_string() if wide else pa.string())
        _, offs, raw = arr.buffers()
        offsets = np.frombuffer(offs, dtype=np.int64 if wide else np.int32)[: len(arr) + 1]
        at = None
        if pick and values:
            at = np.array(data.draw(st.lists(st.integers(0, len(values) - 1), max_size=8)),
                          dtype=np.int64)
        nulls = np.array([v is None for v in values], dtype=bool) if any(
            v is None for v in values) else None
        given.append((raw if raw is not None else b"", offsets, nulls, at))
        chosen.append([(i, values[i]) for i in (range(len(values)) if at is None
                                               else at.tolist())])
    codes, first_source, first_index = differential("string_ids", tuple(given))
    seen: dict[str, int] = {}
    want, firsts = [], []
    for s, items in enumerate(chosen):
        row = []
        for i, v in items:
            if v is None:
                row.append(-1)
                continue
            if v not in seen:
                seen[v] = len(seen)
                firsts.append((s, i))
            row.append(seen[v])
        want.append(row)
    assert [c.tolist() for c in codes] == want
    assert list(zip(first_source.tolist(), first_index.tolist(), strict=True)) == firsts


@SETTINGS
@given(st.lists(st.lists(st.tuples(st.integers(0, 6), st.integers(-1, 50)), max_size=10),
                max_size=4))
def test_arrange_ids_agrees(differential, sources):
    # Items of a few sources, each in message order, merged by message: each source's in their
    # order, the first source's first within a message, as a stable sort of the sources in turn.
    sources = [sorted(s, key=lambda item: item[0]) for s in sources]
    messages = tuple(np.array([a for a, _ in s], dtype=np.int64) for s in sources)
    codes = tuple(np.array([b for _, b in s], dtype=np.int64) for s in sources)
    merged, placed = differential("arrange_ids", messages, codes)
    ordered = sorted([item for s in sources for item in s], key=lambda item: item[0])
    assert merged.tolist() == [msg for msg, _ in ordered]
    assert placed.tolist() == [code for _, code in ordered]


_PART_WORDS = ["", "a", "héllo", "日本語", "x" * 100, "é" * 70, "😀" * 20]


@SETTINGS
@given(st.integers(0, 14), st.data())
def test_part_chars_agrees(differential, k, data):
    # Parts of every kind in random messages, each field present or not, with nulls or not,
    # narrow or wide offsets; extra chars and unreadable parts from the caller: the same chars,
    # flags and unmeasured messages, and those of a plain Python reference.
    import pyarrow as pa

    ntext = 4
    kinds = np.array(data.draw(st.lists(st.integers(-2, ntext + 4), min_size=k, max_size=k)),
                     dtype=np.int8)
    fields, values = [], []
    for _ in range(4):
        if data.draw(st.integers(0, 4)) == 0:
            fields.append(None)
            values.append(None)
            continue
        vals = data.draw(st.lists(st.sampled_from(_PART_WORDS) | st.none(), min_size=k,
                                  max_size=k))
        arr = pa.array(vals, type=data.draw(st.sampled_from([pa.string(), pa.large_string()])))
        _, offs, raw = arr.buffers()
        dtype = np.int64 if pa.types.is_large_string(arr.type) else np.int32
        given_nulls = data.draw(st.booleans())
        nulls = np.array([v is None for v in vals], dtype=bool) if given_nulls else None
        fields.append((raw if raw is not None else b"", np.frombuffer(offs, dtype=dtype)[:k + 1],
                       nulls))
        values.append([v if given_nulls else (v or "") for v in vals])
    cuts = sorted(data.draw(st.lists(st.integers(0, k), max_size=4)))
    part_offsets = np.array([0, *cuts, k], dtype=np.int64)
    extra = (np.array(data.draw(st.lists(st.integers(0, 50), min_size=k, max_size=k)),
                      dtype=np.int64) if data.draw(st.booleans()) else None)
    unreadable = (np.array(data.draw(st.lists(st.booleans(), min_size=k, max_size=k)),
                           dtype=bool) if data.draw(st.booleans()) else None)
    chars, flags, bad = differential("part_chars", part_offsets, kinds, ntext, tuple(fields),
                                     extra, unreadable)
    for r in range(len(part_offsets) - 1):
        total, fl, unmeasured = 0, 0, False
        for p in range(int(part_offsets[r]), int(part_offsets[r + 1])):
            unmeasured |= bool(unreadable is not None and unreadable[p])
            total += int(extra[p]) if extra is not None else 0
            kind = int(kinds[p])
            if not 0 <= kind <= ntext + 2:
                continue
            x = 0 if kind < ntext else kind - ntext + 1
            fl |= {1: FLAG_TOOL_RESULT, 2: FLAG_TOOL_CALLS}.get(x, 0)
            value = None if values[x] is None else values[x][p]
            if value is None:
                unmeasured |= x in (0, 3)
            else:
                total += len(value)
        assert (int(chars[r]), int(flags[r]), bool(bad[r])) == (total, fl, unmeasured)


@SETTINGS
@given(st.lists(st.text(st.characters(codec="utf-8")) | st.sampled_from(
    ['"', "\\", "\b\f\n\r\t", "\x00\x1f\x7f", "\u2028\u2029", "é" * 40 + '"' * 40]),
    max_size=10), st.booleans())
def test_json_string_lengths_agree(differential, values, wide):
    import pyarrow as pa

    arr = pa.array(values, type=pa.large_string() if wide else pa.string())
    _, offs, raw = arr.buffers()
    offsets = np.frombuffer(offs, dtype=np.int64 if wide else np.int32)[: len(arr) + 1]
    got = differential("json_string_lengths", raw if raw is not None else b"", offsets)
    assert got.tolist() == [len(json.dumps(v, ensure_ascii=False, separators=(",", ":")))
                            for v in values]
