"""Hostile Python objects and the cases that feed them to the kernels.

Run as a script (``python -m tests.support.hostile CASE...``, from the project root) it runs each named
case on every kernel that imports, in this fresh interpreter, and prints one JSON line per case:
what each kernel returned or raised. The tests run it in a subprocess, so that a kernel that
crashes fails a test instead of killing the test runner.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from typing import Any

import numpy as np

# ---------------------------------------------------------------------------------------------
# Objects that lie


class LyingStr(str):
    """A str whose length, equality and hash lie."""

    def __len__(self) -> int:
        return 1

    def __eq__(self, other: object) -> bool:
        return True

    def __ne__(self, other: object) -> bool:
        return False

    def __hash__(self) -> int:
        return 0

    def __str__(self) -> str:
        return "lie"


class LyingList(list):
    """A list whose length and iteration lie (it says it is empty)."""

    def __len__(self) -> int:
        return 0

    def __iter__(self):  # type: ignore[no-untyped-def]
        return iter(())

    def __getitem__(self, index: Any) -> Any:
        raise IndexError("lying list")


class LyingDict(dict):
    """A dict whose accessors lie about every key."""

    def get(self, key: Any, default: Any = None) -> Any:
        return "lie"

    def __getitem__(self, key: Any) -> Any:
        return "lie"

    def items(self):  # type: ignore[no-untyped-def]
        return [("lie", "lie")]

    def keys(self):  # type: ignore[no-untyped-def]
        return ["lie"]

    def __contains__(self, key: object) -> bool:
        return False


class OnItems(dict):
    """A dict that runs ``action`` each time its items are read (as json.dumps does)."""

    def __init__(self, action: Callable[[], None], *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.action = action

    def items(self):  # type: ignore[no-untyped-def]
        self.action()
        return super().items()


def deep_tool_result(levels: int) -> dict[str, Any]:
    content: Any = "bottom"
    for _ in range(levels):
        content = [{"type": "tool_result", "tool_use_id": "t", "content": content}]
    return {"role": "user", "content": content}


def deep_list(levels: int) -> Any:
    value: Any = 1
    for _ in range(levels):
        value = [value]
    return value


def deep_dict(levels: int, bottom: Any = 1) -> Any:
    value: Any = bottom
    for _ in range(levels):
        value = {"k": value}
    return value


class SubList(list):  # type: ignore[type-arg]
    """A list subclass (the compiled kernel hands values holding one to the twin's writer)."""


class SubDict(dict):  # type: ignore[type-arg]
    """A dict subclass, read through its items() as json.dumps reads it."""


def deep_subclasses(levels: int) -> Any:
    # Levels of a list subclass, a dict subclass and a tuple in turn, ending in a str.
    value: Any = "end"
    for k in range(levels):
        value = (SubList([value]), SubDict(k=value), (value,))[k % 3]
    return value


def deep_list_ending_in(levels: int, bottom: Any) -> Any:
    value: Any = bottom
    for _ in range(levels):
        value = [value]
    return value


def tool_use(value: Any) -> dict[str, Any]:
    return {"role": "assistant", "content": [{"type": "tool_use", "id": "t", "name": "f",
                                               "input": value}]}


# ---------------------------------------------------------------------------------------------
# Cases: name -> a function of a kernel module that returns a JSON-able figure (or raises).


def _measure(kernel: Any, messages: list[Any]) -> list[list[int]]:
    roles, chars, flags, opaque = kernel.measure_messages(messages, "h")
    return [roles.tolist(), chars.tolist(), flags.tolist(), opaque.tolist()]


def _shrinking_history() -> list[Any]:
    msgs: list[Any] = [{"role": "user", "content": "hi"} for _ in range(6)]
    msgs[1] = tool_use(OnItems(lambda: msgs.clear(), {"q": 1}))
    return msgs


def _growing_history() -> list[Any]:
    msgs: list[Any] = [{"role": "user", "content": "hi"}]
    msgs.append(tool_use(OnItems(lambda: msgs.append({"role": "user", "content": "x" * 9}),
                                 {"q": 1})))
    msgs.append({"role": "user", "content": "end"})
    return msgs


def _clearing_parts() -> list[Any]:
    parts: list[Any] = []
    parts += [{"type": "tool_use", "id": "a", "name": "f",
               "input": OnItems(lambda: parts.clear(), {"q": 1})},
              {"type": "text", "text": "never read"}, {"type": "text", "text": "nor this"}]
    return [{"role": "assistant", "content": parts}]


def _dropping_keys() -> list[Any]:
    message: dict[str, Any] = {"role": "assistant", "tool_calls": [
        {"id": "c", "type": "function", "function": {"name": "g", "arguments": "{}"}},
    ]}

    def drop() -> None:
        message.clear()

    message["content"] = [{"type": "tool_use", "id": "a", "name": "f",
                           "input": OnItems(drop, {"q": [1, 2]})}]
    return [message, {"role": "tool", "tool_call_id": "c", "content": "r"}]


def _replacing_parts() -> list[Any]:
    # items() puts other objects in the parts list (its length unchanged) while it is read.
    parts: list[Any] = []

    def swap() -> None:
        parts[1:] = ["texts"]

    parts += [{"type": "tool_use", "id": "a", "name": "f", "input": OnItems(swap, {"k": 1})},
              {"type": "text", "text": "gone"}]
    return [{"role": "assistant", "content": parts}]


def _growing_parts() -> list[Any]:
    # items() adds a part before the one being read, every time: read live, this would never end.
    parts: list[Any] = []

    def grow() -> None:
        parts.insert(0, {"type": "text", "text": "again"})

    parts.append({"type": "tool_use", "id": "a", "name": "f", "input": OnItems(grow, {"k": 1})})
    return [{"role": "assistant", "content": parts}]


def _self_containing() -> list[Any]:
    content: list[Any] = []
    content.append({"type": "tool_result", "tool_use_id": "t", "content": content})
    return [{"role": "user", "content": content}]


def _mutually_recursive() -> list[Any]:
    a: list[Any] = []
    b: list[Any] = [{"type": "tool_result", "tool_use_id": "b", "content": a}]
    a.append({"type": "tool_result", "tool_use_id": "a", "content": b})
    return [{"role": "user", "content": a}]


def _cyclic_input() -> list[Any]:
    value: dict[str, Any] = {}
    value["self"] = value
    return [tool_use(value)]


def _pairing_after_change(kernel: Any) -> Any:
    # Measure Responses items, then change what they are: pairing reads them as they are now.
    msgs: list[Any] = [
        {"type": "function_call", "call_id": "a", "name": "f"},
        {"type": "function_call_output", "call_id": "a", "output": "r"},
        {"type": "reasoning", "summary": []},
    ]
    flags = kernel.measure_messages(msgs)[2]
    msgs[0]["type"] = "web_search_call"
    msgs[1]["type"] = 5
    msgs[1]["role"] = "tool"
    return kernel.tool_pairing(msgs, flags)


def _stale_pairing(kernel: Any) -> Any:
    # Measure, then strip every role and swap tool calls for junk: the flags no longer belong.
    msgs: list[Any] = [
        {"role": "assistant", "tool_calls": [{"id": "c1", "function": {"name": "f"}}]},
        {"role": "tool", "tool_call_id": "c1", "content": "r"},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "c2",
                                      "content": "x"}]},
        {"role": "assistant", "content": [{"type": "tool_use", "id": "c3", "name": "g"}]},
    ]
    flags = kernel.measure_messages(msgs)[2]
    for m in msgs:
        m.pop("role", None)
    msgs[0]["tool_calls"] = [5, None, {"id": 7}, {"id": LyingStr("c1")}]
    msgs[2]["content"] = [3, {"type": LyingStr("tool_result"), "tool_use_id": 9}]
    msgs[3]["content"] = "no longer parts"
    return kernel.tool_pairing(msgs, flags)


def _pairing_on(messages: list[Any]) -> Callable[[Any], Any]:
    def run(kernel: Any) -> Any:
        flags = kernel.measure_messages(messages)[2]
        return kernel.tool_pairing(messages, flags)

    return run


def _unknown_roles_on(messages: list[Any]) -> Callable[[Any], Any]:
    def run(kernel: Any) -> Any:
        m = kernel.measure(messages)
        return [m.unknown_role, m.unknown_roles(messages)]

    return run


def _unknown_roles_after_change(kernel: Any) -> Any:
    # Measure, then change the roles: they are read as they are now (by the text a str
    # subclass holds); a message that is no longer one is an error, never a guess.
    msgs: list[Any] = [{"role": "human", "content": "a"}, {"role": "ai", "content": "b"},
                       {"role": "human", "content": "c"}]
    m = kernel.measure(msgs)
    msgs[0]["role"] = LyingStr("critic")
    now = _caught(lambda: m.unknown_roles(msgs))
    msgs[2] = "junk"
    return [now, _caught(lambda: m.unknown_roles(msgs)), _caught(lambda: m.unknown_roles([]))]


def _pieces(message: Any) -> Callable[[Any], Any]:
    def run(kernel: Any) -> Any:
        pieces = kernel.message_text_pieces(message, 0, "h")
        return [[type(p).__name__, str.__str__(p)] for p in pieces]

    return run


def _str_key_message() -> dict[Any, Any]:
    class Key(str):
        def __hash__(self) -> int:
            return 12345

        def __eq__(self, other: object) -> bool:
            return False

    return {Key("role"): "user", Key("content"): "seen by its text"}


def _lying_dict_message() -> dict[str, Any]:
    return LyingDict({"role": "assistant", "content": "real content, 22 chars"})


def _handler_strips_roles(kernel: Any) -> Any:
    # A compress handler strips the roles of the messages it got, then returns the wrong shape.
    from contextpolicy import ContextPlan, Fragment, _kernel, process_context

    def handler(request: Any) -> Any:
        for message in request.content:
            message.pop("role", None)
        return 5

    history = [
        {"role": "user", "content": "q" * 50},
        {"role": "assistant", "tool_calls": [{"id": "c1", "function": {"name": "f"}}]},
        {"role": "tool", "tool_call_id": "c1", "content": "r" * 50},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "x", "content": "y"}]},
    ]
    policy = {"mode": "reduce", "triggerChars": 10, "steps": [
        {"id": "c", "kind": "compress", "fragmentId": "history", "handlerId": "h",
         "targetChars": 1}]}
    previous = _kernel.use(kernel)
    try:
        result = process_context(ContextPlan(fragments=[
            Fragment(id="history", kind="history", messages=history)]), policy,
            handlers={"h": handler})
    finally:
        _kernel.use(previous)
    step = result.report.steps[0]
    return [step.status, step.reason, [w.code for w in result.report.warnings],
            [m.get("role") for m in history]]


def _measure_case(build: Callable[[], list[Any]]) -> Callable[[Any], Any]:
    return lambda kernel: _measure(kernel, build())


def _caught(fn: Callable[[], Any]) -> Any:
    # An error the kernel is to raise, as a value: its type and message (the same on both).
    try:
        return ["value", fn()]
    except (ValueError, TypeError) as exc:
        return [type(exc).__name__, str(exc)]


_TRANSCRIPT = [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "yo"},
               {"role": "user", "content": "again"}, {"role": "assistant", "content": "ok"}]


def _negative_trims(kernel: Any) -> Any:
    # Figures below zero: a clear ValueError, never a read outside the offsets.
    return [_caught(lambda: kernel.reduce_transcript(list(_TRANSCRIPT), (step,), 0, 0)[4])
            for step in (("history", 0, -(2**40), -1), ("history", 0, -3, 5),
                         ("history", 1, 1, -1))]


def _short_cut(kernel: Any) -> Any:
    m = kernel.measure(list(_TRANSCRIPT))
    return [_caught(lambda: m.cut([], 0, 10, 1000)), _caught(lambda: m.cut([], 0, 0, 0))]


def _call_turned_junk(kernel: Any) -> Any:
    msgs: list[Any] = [
        {"role": "user", "content": "q"},
        {"role": "assistant", "tool_calls": [{"id": "c1", "function": {"name": "f"}}]},
        {"role": "user", "content": "q2"},
        {"role": "tool", "tool_call_id": "c1", "content": "r"},
        {"role": "assistant", "content": "a"},
    ]
    m = kernel.measure(msgs)
    msgs[1] = 5  # the call is gone: nothing to keep for the result
    return _caught(lambda: m.cut(msgs, 0, 0, 4))


class _LyingFragments(list):  # type: ignore[type-arg]
    def __iter__(self) -> Any:
        return iter([])


def _lying_fragment_list(kernel: Any) -> Any:
    from contextpolicy import Fragment

    fragments = _LyingFragments([Fragment(id="history", kind="history", messages=[
        {"role": "user", "content": "abc"}])])
    raw = kernel.reduce_plan(fragments, (), -1, -1, Fragment)
    return None if raw is None else raw[raw._fields.index("chars_before"):]


class _SelfEmptyingFragment:
    """A fragment-like object whose ``id`` empties the fragment list that holds it, and whose
    ``protected`` must not be read (its kind already says it is protected)."""

    def __init__(self, holder: list[Any], fid: str, kind: str, empties: bool) -> None:
        self.holder, self.fid, self.kind, self.empties = holder, fid, kind, empties
        self.messages = [{"role": "user", "content": "abc"}]
        self.text = None
        self.assembled_role = "user"

    @property
    def id(self) -> str:
        if self.empties:
            self.holder.clear()
        return self.fid

    @property
    def protected(self) -> bool:
        raise RuntimeError("protected was read")


def _plan_emptied_while_read(step_on: str, emptied_by: int) -> Callable[[Any], Any]:
    # reduce_plan reads the list as it is at each point: a fragment gone since is no fragment to
    # trim (None: the caller takes the general path), never an IndexError.
    def run(kernel: Any) -> Any:
        from contextpolicy import PROTECTED_KINDS

        holder: list[Any] = []
        holder += [_SelfEmptyingFragment(holder, "history", "history", emptied_by == 0),
                   _SelfEmptyingFragment(holder, "system", "system", emptied_by == 1)]
        raw = kernel.reduce_plan(holder, ((step_on, 0, 0, 0),), 0, 0, None, PROTECTED_KINDS)
        return None if raw is None else raw[raw._fields.index("chars_before"):]

    return run


def _output_contains_itself() -> list[Any]:
    output: list[Any] = []
    output.append({"type": "tool_result", "tool_use_id": "t", "content": output})
    return [{"type": "function_call_output", "call_id": "c", "output": output}]


def _arguments_clear_the_history() -> list[Any]:
    msgs: list[Any] = [{"role": "user", "content": "hi"}]
    msgs.append({"type": "function_call", "call_id": "c", "name": "f",
                 "arguments": OnItems(lambda: msgs.clear(), {"q": 1})})
    msgs.append({"type": "function_call_output", "call_id": "c", "output": "r"})
    return msgs


def _summary_grows_forever() -> list[Any]:
    summary: list[Any] = []

    def grow() -> None:
        summary.insert(0, {"type": "summary_text", "text": "again"})

    summary.append({"type": "tool_use", "id": "a", "name": "f", "input": OnItems(grow, {"k": 1})})
    return [{"type": "reasoning", "summary": summary}]


def _item_turns_into_message() -> list[Any]:
    # Reading the arguments gives the item a role and a chat content: it was measured as a call.
    item: dict[str, Any] = {"type": "function_call", "call_id": "c", "name": "f"}

    def change() -> None:
        item["type"] = "message"
        item["role"] = "user"
        item["content"] = "x" * 50

    item["arguments"] = OnItems(change, {"q": 1})
    return [item, {"type": "function_call_output", "call_id": "c", "output": "r"}]


def _key_released_mid_scan(str_key: bool) -> Callable[[Any], Any]:
    # A dict key with a __del__ that nothing but a key cache still holds. A kernel that released
    # it while scanning a message (another key taking its cache slot: the compiled kernel's
    # cache is indexed by address) would run that __del__ in the middle of the scan; it clears
    # the message, freeing the values the scan had found and not yet taken.
    def run(kernel: Any) -> Any:
        victim: dict[Any, Any] = {}
        measuring, during = [False], [False]

        def released() -> None:
            during[0] = during[0] or measuring[0]
            victim.clear()

        if str_key:
            class StrKey(str):
                def __del__(self) -> None:
                    released()

            key: Any = StrKey("not-a-key-the-kernel-reads")
        else:
            class ObjectKey:
                def __del__(self) -> None:
                    released()

            key = ObjectKey()
        kernel.measure_messages([{"role": "user", "content": "x", key: 1}])
        slot = (id(key) >> 4) & 255
        del key
        pool = []  # held, so that each candidate is a new object at a new address
        for n in range(1_000_000):
            other = "".join(["q" * (n % 97 + 1), str(n)])
            if (id(other) >> 4) & 255 == slot:
                break
            pool.append(other)
        victim["role"] = "user"
        victim["content"] = [{"type": "text", "text": "b" * 1000} for _ in range(50)]
        victim[other] = 0  # scanned last: the content was found before it
        measuring[0] = True
        try:
            figures = _measure(kernel, [victim])
        finally:
            measuring[0] = False
        return [figures, during[0]]

    return run


def _cut_case(call: Callable[[Any], Any]) -> Callable[[Any], Any]:
    def listed(value: Any) -> Any:
        return [a.tolist() for a in value] if isinstance(value, tuple) else value

    return lambda kernel: _caught(lambda: listed(call(kernel)))


def _json_pieces(value: Any) -> Callable[[Any], Any]:
    # The compact JSON of a tool_use input, a function_call's arguments and a tool call's
    # arguments, as each kernel writes it (the compiled one natively, for exact types).
    def run(kernel: Any) -> Any:
        msgs = [tool_use(value), {"type": "function_call", "call_id": "c", "arguments": value},
                {"role": "assistant", "tool_calls": [{"id": "c", "function": {
                    "arguments": value}}]}]
        pieces, ends = kernel.text_pieces(msgs, "h")
        # ascii(): lone surrogates survive the trip through this process's JSON output.
        return [[type(p).__name__, ascii(p)] for p in pieces] + [ends]

    return run


def compact_json(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)


def _under_recursion_limit(limit: Callable[[int], int],
                           case: Callable[[Any], Any]) -> Callable[[Any], Any]:
    # The case run with the interpreter's recursion limit set to limit(frames on the stack):
    # the JSON depth rule holds whatever the stack allows.
    def run(kernel: Any) -> Any:
        frame, depth = sys._getframe(), 0
        while frame is not None:
            frame, depth = frame.f_back, depth + 1  # type: ignore[assignment]
        before = sys.getrecursionlimit()
        sys.setrecursionlimit(limit(depth))
        try:
            return case(kernel)
        finally:
            sys.setrecursionlimit(before)

    return run


def _items_deepen_forever() -> list[Any]:
    # A dict subclass whose items() hands out a new one of its kind every time it is read.
    class Deeper(dict):  # type: ignore[type-arg]
        def items(self):  # type: ignore[no-untyped-def]
            return [("k", Deeper(k=1))]

    return [tool_use(Deeper(k=1))]


def _contains_itself(kind: type) -> list[Any]:
    value: Any = kind()
    if isinstance(value, dict):
        dict.__setitem__(value, "self", value)
    else:
        list.append(value, value)
    return [tool_use(value)]


def json_cases_at(levels: int) -> dict[str, Callable[[Any], Any]]:
    # Every place a kernel measures a value by its compact JSON, at one depth.
    value = deep_list(levels)
    return {
        f"json-deep-{levels}": _measure_case(lambda: [tool_use(deep_list(levels))]),
        f"json-deep-objects-{levels}": _measure_case(lambda: [tool_use(deep_dict(levels))]),
        f"json-deep-subclasses-{levels}": _measure_case(
            lambda: [tool_use(deep_subclasses(levels))]),
        f"json-deep-{levels}-with-a-big-int-at-the-bottom": _measure_case(
            lambda: [tool_use(deep_list_ending_in(levels, 2**70))]),
        f"item-arguments-deep-{levels}": _measure_case(lambda: [
            {"type": "function_call", "call_id": "c", "arguments": deep_list(levels)}]),
        f"item-input-deep-{levels}": _measure_case(lambda: [
            {"type": "custom_tool_call", "call_id": "c", "input": deep_list(levels)}]),
        f"tool-call-arguments-deep-{levels}": _measure_case(lambda: [
            {"role": "assistant", "tool_calls": [{"id": "c", "function": {
                "name": "f", "arguments": deep_list(levels)}}]}]),
        f"json-pieces-deep-{levels}": _json_pieces(value),
    }


JSON_DEPTH_CASES: dict[str, Callable[[Any], Any]] = {
    **json_cases_at(1023), **json_cases_at(1024), **json_cases_at(1025),
    "json-list-contains-itself": _measure_case(lambda: _contains_itself(list)),
    "json-subclass-contains-itself": _measure_case(lambda: _contains_itself(SubDict)),
    "json-items-deepen-forever": _measure_case(_items_deepen_forever),
    # The first problem in document order is the one reported.
    "json-invalid-before-too-deep": _measure_case(lambda: [tool_use([{1, 2},
                                                                     deep_list(1025)])]),
    "json-too-deep-before-invalid": _measure_case(lambda: [tool_use([deep_list(1025),
                                                                     {1, 2}])]),
    "json-deep-1024-under-a-low-recursion-limit": _under_recursion_limit(
        lambda frames: frames + 60,
        _measure_case(lambda: [tool_use(deep_list(1024)), tool_use(deep_subclasses(1024))])),
    "json-deep-1025-under-a-high-recursion-limit": _under_recursion_limit(
        lambda frames: 200_000, _measure_case(lambda: [tool_use(deep_list(1025))])),
    "json-subclasses-1025-under-a-high-recursion-limit": _under_recursion_limit(
        lambda frames: 200_000, _measure_case(lambda: [tool_use(deep_subclasses(1025))])),
    "compact-json-deep-1024": lambda kernel: len(kernel.compact_json(deep_list(1024))),
    "compact-json-deep-1025": lambda kernel: kernel.compact_json(deep_list(1025)),
    "compact-json-length-deep-1024": lambda kernel: kernel.compact_json_length(deep_dict(1024)),
    "compact-json-length-deep-1025": lambda kernel: kernel.compact_json_length(deep_dict(1025)),
}


# Tool inputs of exact types, which the compiled kernel writes as JSON itself.
JSON_VALUES: dict[str, Any] = {
    "json-int64-boundaries": [2**63 - 1, -(2**63), 2**63, -(2**63) - 1, 0, -1, 2**64,
                              (2**31, -(2**31)), {"k": -(2**63)}],
    "json-every-control-char": {"".join(map(chr, range(32))): "".join(map(chr, range(32)))
                                + '"\\\x7f/'},
    "json-widest-char-in-a-key": {"\U0001f600": "a", "b": ["é", "\u0100"]},
    "json-widest-char-last": ["a", {"k": "é"}, ["\u0100", ("\U0010ffff",)]],
    "json-one-byte-key-four-byte-value": {"a": "\U0001f600", "é": 1},
    "json-lone-surrogates": {"\ud800": ["\udfff", "\ud83d\ude00", "\udbff"]},
    "json-empty-containers": [[], {}, (), [[]], {"": {}}, "", [()]],
    "json-huge-string": ["\x00\"\\é😀" * 20_000],
}


def _clears_its_own_list() -> list[Any]:
    # The encoder reads a dict subclass's items(), which clears the list that holds it.
    value: list[Any] = [1, "two"]
    value.append(OnItems(lambda: value.clear(), {"k": [3]}))
    value.append("never")
    return [tool_use(value)]


def _arguments_change_the_call() -> list[Any]:
    # The encoder runs items() of the arguments, which empties the call and the parts of the
    # message after it.
    parts: list[Any] = [{"type": "thinking", "thinking": "abc", "signature": "s"}]
    call: dict[str, Any] = {"type": "function_call", "call_id": "c", "name": "f"}

    def change() -> None:
        call.clear()
        parts.clear()

    call["arguments"] = OnItems(change, {"q": "é😀"})
    return [call, {"role": "assistant", "content": parts}]


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

CASES: dict[str, Callable[[Any], Any]] = {
    "key-released-mid-scan-str-subclass": _key_released_mid_scan(True),
    "key-released-mid-scan-object": _key_released_mid_scan(False),
    "trim-cut-of-negative-group-chars": _cut_case(
        lambda k: k.trim_cut(np.array([5, -10, 3]), 0, 0)),
    "trim-cut-of-group-chars-past-64-bits": _cut_case(
        lambda k: k.trim_cut(np.array([2**63 - 1, 1]), 0, 5)),
    "trim-cut-many-of-negative-chars": _cut_case(lambda k: k.trim_cut_many(
        np.array([0, 3]), np.array([1, 1, 1], dtype=np.uint8), np.array([5, -10, 3]), 0, 0)),
    "trim-cut-many-of-chars-past-64-bits": _cut_case(lambda k: k.trim_cut_many(
        np.array([0, 1, 3]), np.array([1, 1, 1], dtype=np.uint8),
        np.array([2**63 - 1, 2**62, 2**62]), 0, 5)),
    **{name: _json_pieces(value) for name, value in JSON_VALUES.items()},
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
    "json-nesting-around-the-native-limit": lambda kernel: [
        _json_pieces(deep_list(levels))(kernel)[1][1] == ascii(compact_json(deep_list(levels)))
        for levels in range(60, 70)],
    "json-input-clears-its-own-list": _measure_case(_clears_its_own_list),
    "item-arguments-empty-the-call-and-the-parts": _measure_case(_arguments_change_the_call),
    "plan-emptied-by-its-last-fragment": _plan_emptied_while_read("history", 1),
    "plan-step-on-a-protected-kind": _plan_emptied_while_read("system", -1),
    "item-output-contains-itself": _measure_case(_output_contains_itself),
    "item-output-nesting-at-the-limit": _measure_case(lambda: [
        {"type": "function_call_output", "call_id": "c",
         "output": deep_tool_result(100)["content"]}]),
    "item-output-nesting-past-the-limit": _measure_case(lambda: [
        {"type": "function_call_output", "call_id": "c",
         "output": deep_tool_result(101)["content"]}]),
    "item-arguments-clear-the-history": _measure_case(_arguments_clear_the_history),
    "item-summary-grows-forever": _measure_case(_summary_grows_forever),
    "item-turns-into-a-message-while-read": _measure_case(_item_turns_into_message),
    "item-json-arguments-deep": _measure_case(lambda: [
        {"type": "function_call", "call_id": "c", "arguments": deep_list(100_000)}]),
    "lying-str-item-type": _measure_case(lambda: [
        {"type": LyingStr("function_call_output"), "call_id": LyingStr("c"), "output": "abc"},
        {"type": LyingStr("reasoning"), "summary": [{"type": LyingStr("summary_text"),
                                                     "text": LyingStr("de")}]},
        {"type": LyingStr("web_search_call")}]),
    "lying-dict-item": _measure_case(lambda: [
        LyingDict({"type": "function_call", "call_id": "c", "arguments": "{}"})]),
    "pairing-items-with-lying-ids": _pairing_on([
        {"type": "function_call", "call_id": LyingStr("a"), "name": "f"},
        {"type": "function_call_output", "call_id": LyingStr("b"), "output": "r"},
        {"type": "function_call_output", "call_id": "a", "output": "r"},
        {"type": "function_call_output", "output": "no id"},
    ]),
    "pairing-of-items-turned-junk": _pairing_after_change,
    **JSON_DEPTH_CASES,

    "nesting-at-the-limit": _measure_case(lambda: [deep_tool_result(100)]),
    "nesting-past-the-limit": _measure_case(lambda: [deep_tool_result(101)]),
    "nesting-100000": _measure_case(lambda: [deep_tool_result(100_000)]),
    "content-contains-itself": _measure_case(_self_containing),
    "contents-contain-each-other": _measure_case(_mutually_recursive),
    "json-deep-1000": _measure_case(lambda: [tool_use(deep_list(1_000))]),
    "json-deep-100000": _measure_case(lambda: [tool_use(deep_list(100_000))]),
    "json-cyclic": _measure_case(_cyclic_input),
    "json-huge-int": _measure_case(lambda: [tool_use({"n": 2**200, "m": -(2**64)})]),
    "json-int-beyond-the-str-limit": _measure_case(lambda: [tool_use({"n": 10**5000})]),
    "trims-with-negative-figures": _negative_trims,
    "cut-of-a-shorter-list": _short_cut,
    "cut-after-a-call-turned-junk": _call_turned_junk,
    "plan-of-a-lying-fragment-list": _lying_fragment_list,
    "json-int-and-float-subclasses": _measure_case(
        lambda: [tool_use([type("I", (int,), {})(5), type("F", (float,), {})(0.5), 1e300])]
    ),
    "items-shrinks-the-history": _measure_case(_shrinking_history),
    "items-grows-the-history": _measure_case(_growing_history),
    "items-clears-the-parts": _measure_case(_clearing_parts),
    "items-replaces-the-parts": _measure_case(_replacing_parts),
    "items-grows-the-parts-forever": _measure_case(_growing_parts),
    "items-drops-the-message-keys": _measure_case(_dropping_keys),
    "lying-str-content": _measure_case(
        lambda: [{"role": "user", "content": LyingStr("x" * 5000)}]
    ),
    "lying-str-role": _measure_case(lambda: [{"role": LyingStr("system"), "content": "a"}]),
    "lying-str-part-type": _measure_case(
        lambda: [{"role": "user", "content": [{"type": LyingStr("image"), "text": "abc"}]}]
    ),
    "lying-dict-message": _measure_case(lambda: [_lying_dict_message()]),
    "lying-dict-part": _measure_case(lambda: [{"role": "user", "content": [
        LyingDict({"type": "text", "text": "fourteen chars"})]}]),
    "lying-list-content": _measure_case(lambda: [{"role": "user", "content": LyingList(
        [{"type": "text", "text": "abc"}, "defg"])}]),
    "lying-list-messages": _measure_case(lambda: LyingList(
        [{"role": "user", "content": "abc"}, {"role": "assistant", "content": "de"}])),
    "lying-list-tool-calls": _measure_case(lambda: [{"role": "assistant", "tool_calls": LyingList(
        [{"id": "c", "function": {"name": "fn", "arguments": "{}"}}])}]),
    "str-subclass-keys": _measure_case(lambda: [_str_key_message()]),
    "pieces-of-subclasses": _pieces({"role": "user", "content": [
        LyingStr("abc"), {"type": "text", "text": LyingStr("de")}]}),
    "pairing-after-the-messages-changed": _stale_pairing,
    "pairing-with-lying-ids": _pairing_on([
        {"role": "assistant", "tool_calls": [{"id": LyingStr("a")}, {"id": "b"}]},
        {"role": "tool", "tool_call_id": LyingStr("b"), "content": "r"},
        {"role": "tool", "tool_call_id": "zzz", "content": "r"},
    ]),
    "handler-strips-roles-then-fails": _handler_strips_roles,
    "unknown-roles-of-lying-strs": _unknown_roles_on([
        {"role": LyingStr("human"), "content": "a"}, {"role": "human", "content": "b"},
        {"role": LyingStr("user"), "content": "c"}, LyingDict({"role": LyingStr("ai")}),
        {"type": LyingStr("reasoning"), "summary": []},
    ]),
    "unknown-roles-after-the-roles-changed": _unknown_roles_after_change,
    "pairing-of-a-lying-list": _pairing_on(LyingList([
        {"role": "assistant", "tool_calls": [{"id": "a"}]},
        {"role": "tool", "tool_call_id": "a", "content": "r"},
    ])),
}


def outcome(fn: Callable[[Any], Any], kernel: Any) -> dict[str, Any]:
    try:
        value = fn(kernel)
    except Exception as exc:  # every outcome is reported, and compared by the test
        return {"raised": type(exc).__name__, "message": str(exc),
                "codes": list(getattr(exc, "codes", []) or [])}
    return {"value": value}


def main(names: list[str]) -> None:
    from contextpolicy._kernel import available_kernels

    kernels = available_kernels()
    for name in names or list(CASES):
        row = {"case": name}
        for impl, module in kernels.items():
            row[impl] = outcome(CASES[name], module)
        print(json.dumps(row), flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
