"""Hostile cases of the kernels' array functions: ranges, offsets and figures out of range,
negative, past 64 bits or wrapping; buffers of the wrong kind or size; starts and offsets that
another thread flips while they are read. Each call gives what it read as one whole, or a clear
error.

Part of the cases that ``tests/support/hostile.py`` runs.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from .hostile_objects import _caught


def _cut_case(call: Callable[[Any], Any]) -> Callable[[Any], Any]:
    def listed(value: Any) -> Any:
        return [a.tolist() for a in value] if isinstance(value, tuple) else value

    return lambda kernel: _caught(lambda: listed(call(kernel)))


def _gathered(src: Any, starts: Any, stops: Any, size: int | None = None,
              out: Any = None) -> Callable[[Any], Any]:
    # gather_bytes on what a caller could hand it: the bytes it wrote, or the error it raised.
    def run(kernel: Any) -> Any:
        def call() -> Any:
            buf = bytearray(size if size is not None else 0) if out is None else out
            kernel.gather_bytes(src, starts() if callable(starts) else starts, stops, buf)
            return bytes(buf).decode("latin-1")
        return _caught(call)
    return run


class _ShiftingStarts:
    """Starts that move out of range each time they are read as an array: read once, they
    are good."""

    def __init__(self, values: list[int]) -> None:
        self.values = np.array(values, dtype=np.int64)

    def __array__(self, dtype: Any = None, copy: Any = None) -> Any:
        snapshot = self.values.copy()
        self.values += 10**12
        return snapshot


def _flipped_by_a_thread(kernel: Any) -> Any:
    # Another thread flips the starts between good and far out of range while the kernel
    # checks and copies: each call copies what it checked, or says which range is bad.
    import threading

    starts = np.array([0, 6], dtype=np.int64)
    stop = threading.Event()

    def flip() -> None:
        while not stop.is_set():
            starts[1] = 6 if starts[1] != 6 else 10**12

    thread = threading.Thread(target=flip)
    thread.start()
    seen = set()
    try:
        for _ in range(2000):
            out = bytearray(5)
            try:
                kernel.gather_bytes(b"hello world", starts, [2, 9], out)
                seen.add(bytes(out).decode())
            except ValueError as exc:
                seen.add(str(exc).split(",")[0])
    finally:
        stop.set()
        thread.join()
    return sorted(seen - {"hewor", "gather_bytes: range 1 is 1000000000000..9"})


def _flipping(call: Callable[[Any, Any], Any], values: Any, at: int, good: int, bad: int,
              allowed: set[str]) -> Callable[[Any], Any]:
    # Another thread flips ``values[at]`` between good and bad while ``call(kernel, values)``
    # reads it (offsets, starts, ...): each call gives what it read as one whole, or names
    # what is wrong; the outcomes other than ``allowed`` are returned (none, as expected).
    def run(kernel: Any) -> Any:
        import threading

        arr = np.array(values)
        stop = threading.Event()

        def flip() -> None:
            while not stop.is_set():
                arr[at] = good if arr[at] != good else bad

        thread = threading.Thread(target=flip)
        thread.start()
        seen = set()
        try:
            for _ in range(2000):
                try:
                    seen.add(repr(call(kernel, arr)))
                except ValueError as exc:
                    seen.add(str(exc))
        finally:
            stop.set()
            thread.join()
        return sorted(seen - allowed)
    return run


def _flag(name: str) -> int:
    from contextpolicy import _tables

    return int(getattr(_tables, name))


def _rows_cut(kernel: Any, offsets: Any) -> Any:
    # Two rows of two user turns each, trimmed to one turn: the cut of each row.
    opens = _flag("FLAG_OPENS_TURN")
    roles = np.full(4, _user_code(), dtype=np.int8)
    flags = np.full(4, opens, dtype=np.uint8)
    none = np.zeros(5, dtype=np.int64)
    return kernel.reduce_rows(offsets, roles, flags, np.ones(4, dtype=np.int64), none,
                              np.zeros(0, dtype=np.int64), none, np.zeros(0, dtype=np.int64), 0,
                              ((_flag("GROUP_USER_TURN"), 1, 1),), 0, 0)[1].tolist()


def _user_code() -> int:
    from contextpolicy._tables import ROLE_CODES

    return ROLE_CODES["user"]


_LINES = b'{"messages":[{"role":"user","content":"hi"}]}\n'
_WORDS = "héllo wörld"  # 11 code points, 13 bytes: offsets 0, 6, 13


def _tuples(result: Any) -> Any:
    return tuple(a.tolist() if isinstance(a, np.ndarray) else a for a in result)


def _id_codes(result: Any) -> Any:
    codes, first_source, first_index = result
    return ([c.tolist() for c in codes], first_source.tolist(), first_index.tolist())


def _part_chars_text(kernel: Any, text_offsets: Any) -> Any:
    # Two text parts in one message, their text read through offsets that may move.
    data = _WORDS.encode()
    return _tuples(kernel.part_chars(np.array([0, 2]), np.array([0, 0], dtype=np.int8), 4,
                                     ((data, text_offsets, None), None, None, None)))


def _part_chars(kinds: Any, fields: Any, offsets: Any = (0, 2), extra: Any = None,
                unreadable: Any = None, ntext: Any = 4) -> Callable[[Any], Any]:
    def run(kernel: Any) -> Any:
        try:
            return _caught(lambda: _tuples(kernel.part_chars(
                np.array(offsets), kinds, ntext, fields, extra, unreadable)))
        except OverflowError as exc:  # a C integer argument out of range
            return ["OverflowError", str(exc)]
    return run


def _kernel_call(name: str, *args: Any) -> Callable[[Any], Any]:
    def run(kernel: Any) -> Any:
        def call() -> Any:
            out = getattr(kernel, name)(*args)
            return _tuples(out) if isinstance(out, tuple) else out.tolist()
        return _caught(call)
    return run


# Cuts of group figures that are negative or past 64 bits.
TRIM_CUT_CASES: dict[str, Callable[[Any], Any]] = {
    "trim-cut-of-negative-group-chars": _cut_case(
        lambda k: k.trim_cut(np.array([5, -10, 3]), 0, 0)),
    "trim-cut-of-group-chars-past-64-bits": _cut_case(
        lambda k: k.trim_cut(np.array([2**63 - 1, 1]), 0, 5)),
    "trim-cut-many-of-negative-chars": _cut_case(lambda k: k.trim_cut_many(
        np.array([0, 3]), np.array([1, 1, 1], dtype=np.uint8), np.array([5, -10, 3]), 0, 0)),
    "trim-cut-many-of-chars-past-64-bits": _cut_case(lambda k: k.trim_cut_many(
        np.array([0, 1, 3]), np.array([1, 1, 1], dtype=np.uint8),
        np.array([2**63 - 1, 2**62, 2**62]), 0, 5)),
}


# The array functions on what a caller could hand them, and on what changes while they read it.
ARRAY_CASES: dict[str, Callable[[Any], Any]] = {
    "gather-bytes-past-the-source": _gathered(b"hello", [0, 3], [2, 9], 8),
    "gather-bytes-backwards": _gathered(b"hello", [4], [1], 0),
    "gather-bytes-negative": _gathered(b"hello", [-1], [2], 3),
    "gather-bytes-wrapped-uint64": _gathered(b"hello", np.array([2**64 - 1], dtype=np.uint64),
                                             np.array([2], dtype=np.uint64), 3),
    "gather-bytes-more-than-out": _gathered(b"hello", [0, 0], [5, 5], 9),
    "gather-bytes-less-than-out": _gathered(b"hello", [0], [5], 6),
    "gather-bytes-repeated-past-out": _gathered(b"x" * 8, np.zeros(10, dtype=np.int64),
                                                np.full(10, 8), 3),
    "gather-bytes-read-only-out": _gathered(b"hello", [0], [2], out=b"xx"),
    "gather-bytes-float-starts": _gathered(b"hello", np.array([0.0]), [2], 2),
    "gather-bytes-object-starts": _gathered(b"hello", np.array([0, "a"], dtype=object),
                                            [1, 2], 2),
    "gather-bytes-2d-starts": _gathered(b"hello", np.zeros((1, 1), dtype=np.int64),
                                        np.ones((1, 1), dtype=np.int64), 1),
    "gather-bytes-uneven": _gathered(b"hello", [0, 1], [1], 1),
    "gather-bytes-not-a-buffer": _gathered("hello", [0], [1], 1),
    "gather-bytes-starts-shift-when-read": _gathered(
        b"hello world", lambda: _ShiftingStarts([0, 6]), [2, 9], 5),
    "gather-bytes-starts-flipped-by-a-thread": _flipped_by_a_thread,
    "gather-bytes-out-of-a-slice": _gathered(b"hello world", [6, 0], [11, 5],
                                             out=memoryview(bytearray(12))[1:11]),
    "gather-offsets-past-the-end": _kernel_call(
        "gather_offsets", np.array([0, 2, 5], dtype=np.int32), [1], [2]),
    "gather-offsets-negative-length": _kernel_call(
        "gather_offsets", np.array([0, 2, 5]), [1], [-1]),
    "gather-offsets-that-decrease": _kernel_call(
        "gather_offsets", np.array([0, 4, 2, 6]), [0], [3]),
    "gather-offsets-past-int32": _kernel_call(
        "gather_offsets", np.array([0, 2**30], dtype=np.int32), [0, 0], [1, 1]),
    "gather-offsets-float": _kernel_call("gather_offsets", np.array([0.0, 1.0]), [0], [1]),
    "gather-offsets-2d": _kernel_call("gather_offsets", np.zeros((2, 2), dtype=np.int64),
                                      [0], [1]),
    "gather-offsets-flipped-by-a-thread": _flipping(
        lambda k, offs: _tuples(k.gather_offsets(offs, [0], [3])), [0, 2, 4, 9], 2, 4, -5,
        {repr(([0, 2, 4, 9], [0], [9])),
         "gather_offsets: the offsets of range 0 are negative or decrease"}),
    "gather-bits-past-the-bitmap": _kernel_call("gather_bits", b"\xff", 3, [2], [4]),
    "gather-bits-negative-offset": _kernel_call("gather_bits", b"\xff", -1, [0], [1]),
    "gather-bits-across-bytes": _kernel_call("gather_bits", b"\x0f\xf0", 2, [1, 5], [4, 3]),
    "utf8-lengths-offsets-flipped-by-a-thread": _flipping(
        lambda k, offs: k.utf8_lengths(_WORDS.encode(), offs).tolist(), [0, 6, 13], 1, 6,
        10**12, {repr([5, 6]), "utf8_lengths: offsets must be non-decreasing and within 0..13"}),
    "role-codes-offsets-flipped-by-a-thread": _flipping(
        lambda k, offs: k.role_codes_utf8(b"useruser", offs).tolist(), [0, 4, 8], 1, 4,
        10**12, {repr([_user_code()] * 2),
                 "role_codes_utf8: offsets must be non-decreasing and within 0..8"}),
    "string-codes-offsets-flipped-by-a-thread": _flipping(
        lambda k, offs: k.string_codes(b"texttool_use", offs, (b"text", b"tool_use")).tolist(),
        [0, 4, 12], 1, 4, 10**12,
        {repr([0, 1]), "string_codes: offsets must be non-decreasing and within 0..12"}),
    "string-ids-offsets-flipped-by-a-thread": _flipping(
        lambda k, offs: _id_codes(k.string_ids(((_WORDS.encode(), offs, None, None),
                                                 (_WORDS.encode(), offs, None, [1, 0])))),
        [0, 6, 13], 1, 6, 10**12,
        # Both sources read the one array, each at its own moment: either may see it bad.
        {repr(([[0, 1], [1, 0]], [0, 0], [0, 1])),
         "string_ids: the offsets of source 0 must be non-decreasing and within its data",
         "string_ids: the offsets of source 1 must be non-decreasing and within its data"}),
    "string-ids-position-past-the-strings": _kernel_call(
        "string_ids", ((b"ab", np.array([0, 1, 2]), None, np.array([0, 2])),)),
    "string-ids-negative-position": _kernel_call(
        "string_ids", ((b"ab", np.array([0, 1, 2]), None, np.array([-1])),)),
    "string-ids-offsets-past-the-data": _kernel_call(
        "string_ids", ((b"ab", np.array([0, 1, 9]), None, None),)),
    "string-ids-source-not-a-tuple": _kernel_call("string_ids", ([b"ab", [0, 2], None, None],)),
    "string-ids-nulls-of-another-length": _kernel_call(
        "string_ids", ((b"ab", np.array([0, 1, 2]), np.zeros(3, dtype=bool), None),)),
    "arrange-ids-messages-flipped-by-a-thread": _flipping(
        lambda k, msg: _tuples(k.arrange_ids((msg,), (np.array([7, 8]),))),
        [0, 1], 1, 1, -10**12,
        {repr(([0, 1], [7, 8])), "arrange_ids: the messages of source 0 must be >= 0 and "
         "non-decreasing"}),
    "arrange-ids-messages-that-decrease": _kernel_call(
        "arrange_ids", (np.array([0, 2]), np.array([1, 0])), (np.array([1, 1]), np.array([2, 3]))),
    "arrange-ids-uneven": _kernel_call("arrange_ids", (np.array([0, 1]),), (np.array([1]),)),
    "arrange-ids-no-messages": _kernel_call("arrange_ids", (np.zeros(0, dtype=np.int64),),
                                            (np.zeros(0, dtype=np.int64),)),
    "arrange-ids-merged": _kernel_call(
        "arrange_ids", (np.array([1, 3]), np.array([0, 1, 1, 3])),
        (np.array([10, 11]), np.array([20, 21, 22, 23]))),
    "string-codes-names-not-bytes": _kernel_call(
        "string_codes", b"text", np.array([0, 4]), ("text",)),
    "string-codes-no-names": _kernel_call("string_codes", b"text", np.array([0, 4]), ()),
    "part-chars-text-offsets-flipped-by-a-thread": _flipping(
        _part_chars_text, [0, 6, 13], 1, 6, 10**12,
        {repr(([11], [0], [False])),
         "part_chars: text offsets must be non-decreasing and within 0..13"}),
    "part-chars-message-offsets-past-the-parts": _part_chars(
        np.array([0, 0], dtype=np.int8), (None,) * 4, offsets=(0, 3)),
    "part-chars-text-offsets-past-the-data": _part_chars(
        np.array([0, 0], dtype=np.int8), ((b"abc", np.array([0, 2, 9]), None), None, None,
                                          None)),
    "part-chars-short-text-offsets": _part_chars(
        np.array([0, 0], dtype=np.int8), ((b"abc", np.array([0, 2]), None), None, None, None)),
    "part-chars-invalid-utf-8": _part_chars(
        np.array([0, 0], dtype=np.int8), ((b"ab\xff", np.array([0, 1, 3]), None), None, None,
                                          None)),
    "part-chars-int64-kinds": _part_chars(np.array([0, 0]), (None,) * 4),
    "part-chars-kinds-out-of-range": _part_chars(
        np.array([-128, 127], dtype=np.int8), ((b"ab", np.array([0, 1, 2]), None),) * 4),
    "part-chars-nulls-of-a-wrong-length": _part_chars(
        np.array([0, 0], dtype=np.int8), ((b"ab", np.array([0, 1, 2]), np.array([True])),
                                          None, None, None)),
    "part-chars-negative-extra": _part_chars(
        np.array([0, 0], dtype=np.int8), (None,) * 4, extra=np.array([1, -2])),
    "part-chars-extra-past-64-bits": _part_chars(
        np.array([-1, -1], dtype=np.int8), (None,) * 4, extra=np.array([2**62, 2**62])),
    "part-chars-fields-not-a-tuple": _part_chars(np.array([0, 0], dtype=np.int8), [None] * 4),
    "part-chars-huge-ntext": _part_chars(np.array([0, 0], dtype=np.int8), (None,) * 4,
                                         ntext=2**63),
    "reduce-rows-offsets-flipped-by-a-thread": _flipping(
        _rows_cut, [0, 2, 4], 1, 2, 10**12,
        {repr([0, 2]), "reduce_rows: offsets must be non-decreasing and within 0..4"}),
    "group-offsets-flags-flipped-by-a-thread": _flipping(
        lambda k, flags: _tuples(k.group_offsets(flags, np.ones(4, dtype=np.int64))),
        np.array([1, 0, 0, 0], dtype=np.uint8) * _flag("FLAG_OPENS_TURN"), 2, 0,
        _flag("FLAG_OPENS_TURN"), {repr(([0, 4], [4])), repr(([0, 2, 4], [2, 2]))}),
    "json-string-lengths-offsets-flipped-by-a-thread": _flipping(
        lambda k, offs: k.json_string_lengths(b'a"b\n', offs).tolist(), [0, 2, 4], 1, 2,
        10**12, {repr([5, 5]),
                 "json_string_lengths: offsets must be non-decreasing and within 0..4"}),
    "json-string-lengths-invalid-utf-8": _kernel_call(
        "json_string_lengths", b"ok\xc3(", np.array([0, 2, 4])),
    # A drop to the lowest int32 or int64, which a subtraction of offsets would wrap past.
    "utf8-lengths-offsets-that-wrap": _kernel_call(
        "utf8_lengths", b"ab", np.array([0, 2, -2**31], dtype=np.int32)),
    "json-string-lengths-offsets-that-wrap": _kernel_call(
        "json_string_lengths", b"ab", np.array([0, 2, -2**63], dtype=np.int64)),
    "utf8-validate-offsets-flipped-by-a-thread": _flipping(
        lambda k, offs: k.utf8_validate(_WORDS.encode(), offs), [0, 6, 13], 1, 6, 10**12,
        {repr(None), "utf8_validate: offsets must be non-decreasing and within 0..13"}),
    "utf8-validate-offsets-that-wrap": lambda kernel: _caught(lambda: kernel.utf8_validate(
        b"ab", np.array([0, 2, -2**31], dtype=np.int32))),
    # Offsets that decrease are named before a string that is not UTF-8 (both kernels check
    # every offset before they look for the string at fault).
    "utf8-validate-offsets-that-decrease-after-a-bad-string": lambda kernel: _caught(
        lambda: kernel.utf8_validate(b"\xffab", np.array([0, 2, 1, 3]))),
    "utf8-validate-nulls-of-a-wrong-length": lambda kernel: _caught(
        lambda: kernel.utf8_validate(b"ab", np.array([0, 1, 2]), np.array([True]))),
    # Every byte is UTF-8 taken together, but "é" is cut in two: both strings are at fault.
    "utf8-validate-a-character-cut-between-strings": lambda kernel: _caught(
        lambda: kernel.utf8_validate("é".encode(), np.array([0, 1, 2]))),
    # A null holds no string: what its bytes are is no fault; the next string's is.
    "utf8-validate-bytes-under-a-null": lambda kernel: [_caught(
        lambda: kernel.utf8_validate(b"ok\xff\xfe", np.array([0, 2, 3, 4]), nulls))
        for nulls in (np.array([False, True, True]), np.array([False, True, False]))],
    # A text part's name is checked too, though only a tool_use's name is counted.
    "part-chars-invalid-utf-8-in-a-field-its-kind-does-not-count": _part_chars(
        np.array([0, 0], dtype=np.int8), ((b"ab", np.array([0, 1, 2]), None), None,
                                          (b"f\xc3", np.array([0, 1, 2]), None), None)),
    "trim-cut-many-offsets-that-wrap": _kernel_call(
        "trim_cut_many", np.array([0, 2, -2**31], dtype=np.int32), np.ones(2, dtype=np.uint8),
        np.ones(2, dtype=np.int64), 0, 0),
    "reduce-lines-starts-flipped-by-a-thread": _flipping(
        lambda k, starts: k.reduce_lines(_LINES, starts, [len(_LINES) - 1], (), -1, -1)[0]
        .decode(), [0], 0, 0, 10**12,
        {repr(_LINES.decode()), f"line 1000000000000..{len(_LINES) - 1} lies outside the "
         f"buffer of {len(_LINES)} bytes"}),
}
