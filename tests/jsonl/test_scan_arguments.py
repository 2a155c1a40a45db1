"""``reduce_lines``' arguments and limits: both kernels refuse the same arguments the same way
(the ``differential`` fixture), read every bytes-like buffer alike, release it, and draw the
byte path's limits (top-level keys, many messages and ids, truncation at every position) at the
same place; and the compiled scanner never reads past the end of its buffer (a guard page).
"""

from __future__ import annotations

import array
import mmap
import random
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from contextpolicy import _kernel_py
from tests.support.lines import SERIALISERS, frame, mutate, serialise
from tests.support.scan import check_call, nested_results

SCAN_KEYS = _kernel_py.SCAN_KEYS
ROOT = Path(__file__).resolve().parents[2]

# ---------------------------------------------------------------------------------------------
# arguments: both kernels refuse the same way


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
