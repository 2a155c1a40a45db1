"""The hostile cases of the kernels: hostile Python objects fed to them, case by case.

Run as a script (``python -m tests.support.hostile CASE...``, from the project root) it runs each named
case on every kernel that imports, in this fresh interpreter, and prints one JSON line per case:
what each kernel returned or raised. The tests run it in a subprocess, so that a kernel that
crashes fails a test instead of killing the test runner.

The cases of messages and items are here; the objects they are made of are in
``hostile_objects.py``, the cases of compact JSON in ``hostile_json.py`` and those of the array
functions in ``hostile_arrays.py``.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from typing import Any

from .hostile_arrays import ARRAY_CASES, TRIM_CUT_CASES
from .hostile_json import JSON_DEPTH_CASES, JSON_VALUES, _json_pieces, compact_json, json_cases_at
from .hostile_objects import (
    LyingDict,
    LyingList,
    LyingStr,
    OnItems,
    SubDict,
    SubList,
    _caught,
    _measure,
    _measure_case,
    deep_dict,
    deep_list,
    deep_list_ending_in,
    deep_subclasses,
    deep_tool_result,
    outcome,
    tool_use,
)

# The cases and their runner; and, still importable from here, the public names this module held
# before its objects and its JSON and array cases moved out (import them from where they are).
__all__ = [
    "CASES", "main",
    "LyingDict", "LyingList", "LyingStr", "OnItems", "SubDict", "SubList", "deep_dict",
    "deep_list", "deep_list_ending_in", "deep_subclasses", "deep_tool_result", "outcome",
    "tool_use", "JSON_DEPTH_CASES", "JSON_VALUES", "compact_json", "json_cases_at",
]


# ---------------------------------------------------------------------------------------------
# Cases: name -> a function of a kernel module that returns a JSON-able figure (or raises).


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


CASES: dict[str, Callable[[Any], Any]] = {
    "key-released-mid-scan-str-subclass": _key_released_mid_scan(True),
    "key-released-mid-scan-object": _key_released_mid_scan(False),
    **TRIM_CUT_CASES,
    **{name: _json_pieces(value) for name, value in JSON_VALUES.items()},
    **ARRAY_CASES,
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
