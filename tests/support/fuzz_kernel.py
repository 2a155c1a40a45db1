"""Fuzz the kernels with hostile histories and insist that they agree (and never crash).

``python -m tests.support.fuzz_kernel N`` (from the project root) draws N histories with hypothesis,
turns each into a hostile one (subclasses whose methods lie, str-subclass keys, tool inputs
whose ``items()`` changes the history while it is measured, cycles, deep nesting, tool inputs
and arguments nested at and around the JSON depth limit), builds it
afresh for each kernel, measures it, takes its text pieces and checks its tool pairing, measures
it into a ``Measure`` and cuts, tails and pairs that, and splits and reduces it as a transcript
(``reduce_transcript``) on every kernel, and exits non-zero at the first disagreement. It prints the number of cases run and the
time taken. The test suite runs it in a subprocess, so a crash fails a test.

Every other history that Arrow holds as a column is also reduced by ``batch.reduce_table`` with
one of its strings (any field, any depth, any string type) made bytes that are not UTF-8: every kernel
must raise the same ``invalid-utf8`` error, naming that string.
"""

from __future__ import annotations

import random
import sys
import time
from typing import Any

from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from contextpolicy._tables import MAX_JSON_DEPTH

from .hostile_objects import (
    LyingDict,
    LyingList,
    LyingStr,
    OnItems,
    SubDict,
    SubList,
    deep_tool_result,
    outcome,
)
from .strategies import bad_message
from .strategies import message as chat_message

# Short histories: what a hostile case needs is the shape of each message, not their number.
histories = st.lists(chat_message, max_size=24) | st.lists(
    chat_message | bad_message, max_size=8
)


class Key(str):
    """A str-subclass key with a hash and equality of its own."""

    def __hash__(self) -> int:
        return 7

    def __eq__(self, other: object) -> bool:
        return False


def deep_json(rng: random.Random) -> Any:
    """A value nested at or around the JSON depth limit (or without end): lists, dicts, tuples
    and their subclasses in turn, with a scalar, a float, an int beyond 64 bits or a value JSON
    cannot hold at the bottom, or a container that holds itself."""
    levels = rng.choice([MAX_JSON_DEPTH - 1, MAX_JSON_DEPTH, MAX_JSON_DEPTH + 1, 5000])
    value: Any = rng.choice(["end", 1.5, 2**70, None, {1, 2}, float("nan")])
    if rng.random() < 0.1:
        loop: list[Any] = []
        list.append(loop, loop)
        value = loop
    kinds = rng.choice([[list], [dict], [list, dict, tuple], [SubList, SubDict, list]])
    for k in range(levels):
        kind = kinds[k % len(kinds)]
        if issubclass(kind, dict):
            value = kind({"k": value, "n": k} if rng.random() < 0.5 else {"k": value})
        else:
            value = kind([value] if rng.random() < 0.8 else ["x", value])
    return value


def hostile(history: list[Any], seed: int) -> list[Any]:
    """A hostile copy of ``history``: the same seed always builds the same one."""
    rng = random.Random(seed)
    out: list[Any] = []

    def actions(message: Any, parts: list[Any] | None) -> list[Any]:
        return [
            lambda: out.pop() if out else None,
            lambda: out.append({"role": "user", "content": "late"}),
            lambda: parts.clear() if parts is not None else None,
            lambda: parts.insert(0, {"type": "text", "text": "new"}) if parts is not None else None,
            lambda: message.clear() if isinstance(message, dict) else None,
            lambda: message.__setitem__("content", 5) if isinstance(message, dict) else None,
        ]

    def walk(value: Any, message: Any, parts: list[Any] | None, depth: int) -> Any:
        if isinstance(value, str):
            return LyingStr(value) if rng.random() < 0.1 else value
        if isinstance(value, list):
            items: list[Any] = LyingList() if rng.random() < 0.05 else []
            for item in value:
                list.append(items, walk(item, message, items, depth + 1))
            if rng.random() < 0.02:
                list.append(items, {"type": "tool_result", "tool_use_id": "x", "content": items})
            return items
        if isinstance(value, dict):
            new: dict[Any, Any] = LyingDict() if rng.random() < 0.05 else {}
            target = new if message is None else message
            for k, v in value.items():
                key = Key(k) if isinstance(k, str) and rng.random() < 0.05 else k
                if k in ("input", "arguments") and rng.random() < 0.1:
                    dict.__setitem__(new, key, deep_json(rng))
                elif k == "input" and rng.random() < 0.3:
                    action = rng.choice(actions(target, parts))
                    dict.__setitem__(new, key, OnItems(action, {"v": walk(v, target, parts, 0)}))
                else:
                    dict.__setitem__(new, key, walk(v, target, parts, depth + 1))
            return new
        return value

    for message in history:
        if isinstance(message, dict) and rng.random() < 0.02:
            out.append(deep_tool_result(rng.choice([99, 100, 101, 400])))
            continue
        shell: dict[Any, Any] = LyingDict() if rng.random() < 0.05 else {}
        if isinstance(message, dict):
            for k, v in message.items():
                key = Key(k) if rng.random() < 0.05 else k
                deep = k in ("input", "arguments") and rng.random() < 0.1
                dict.__setitem__(shell, key, deep_json(rng) if deep else walk(v, shell, None, 0))
            out.append(shell)
        else:
            out.append(message)
    return LyingList(out) if rng.random() < 0.05 else out


def _run(kernel: Any, history: list[Any], seed: int) -> Any:
    # Each call on a hostile history of its own, built afresh from the seed: what one call's
    # Python code did to its history never reaches the next.
    def measure(k: Any) -> Any:
        msgs = hostile(history, seed)
        roles, chars, flags, opaque = k.measure_messages(msgs, "h")
        pieces = [[str.__str__(p) for p in k.message_text_pieces(m, i, "h")]
                  for i, m in enumerate(list.copy(msgs)[: len(flags)])]
        pairing = k.tool_pairing(msgs, flags)
        return [roles.tolist(), chars.tolist(), flags.tolist(), opaque.tolist(), pieces, pairing]

    def measured(k: Any) -> Any:
        msgs = hostile(history, seed)
        m = k.measure(msgs, "h")
        figures = [m.chars, m.messages, m.opaque_parts, m.tool_traffic, m.groups(0), m.groups(1)]
        figures += [m.cut(msgs, 0, 1, 200), m.cut(msgs, 1, 0, None), m.cut(msgs, 0, 0, 0)]
        tail = m.tail(min(1, m.messages))
        return figures + [tail.chars, tail.messages, m.pairing(msgs), m.pairing(msgs, 1)
                          if m.messages else [], m.unknown_role, m.unknown_roles(msgs)]

    def reduced(k: Any) -> Any:
        msgs = hostile(history, seed)
        head, tail = k.split_transcript(msgs)
        raw = k.reduce_transcript(hostile(history, seed), (("history", 0, 1, 300),
                                                           ("history", 1, 0, 100)), 200, 50)
        # Figures only: the kept and assembled messages are hostile objects (each call's own),
        # compared by their count.
        return [head, tail, raw._replace(input=len(raw.input),
                                         kept=[k if k is None else len(k) for k in raw.kept])]

    return [outcome(fn, kernel) for fn in (measure, measured, reduced)]


# Six ASCII bytes replaced, in the bytes of an IPC stream, by bytes that are not UTF-8.
TOKEN = "QZJXQZ"
BAD_BYTES = [b"\xff", b"\xc3(", b"\xe2\x82", b"\xed\xa0\x80", b"\xc0\x80"]
ARROW_POLICIES = [
    {"mode": "validate"},
    {"mode": "reduce", "triggerChars": 10, "targetInputChars": 5, "steps": [
        {"id": "t", "kind": "trim", "fragmentId": "history", "targetChars": 0,
         "keepGroups": 0, "grouping": {"kind": "user-turn"}}]},
]


def _string_slots(value: Any, path: str, steps: tuple[Any, ...]) -> list[tuple[str, Any]]:
    if isinstance(value, str):
        return [(path, steps)]
    out: list[tuple[str, Any]] = []
    if isinstance(value, dict):
        for key, child in value.items():
            if isinstance(key, str):
                out += _string_slots(child, f"{path}.{key}", (*steps, key))
    elif isinstance(value, list):
        for i, child in enumerate(value):
            out += _string_slots(child, f"{path}[{i}]", (*steps, i))
    return out


def _with_bad_string(history: list[Any], seed: int) -> tuple[Any, str] | None:
    """The history as a one-row Arrow table whose string at one place (drawn from the seed)
    holds bytes that are not UTF-8, and that place; ``None`` where Arrow holds no such
    column (mixed types, lone surrogates, no string)."""
    import pyarrow as pa

    rng = random.Random(seed)
    if not all(type(m) is dict for m in history):
        return None
    slots = _string_slots(history, "messages[0]", ())
    if not slots:
        return None
    path, steps = rng.choice(slots)
    row = json_copy(history)
    if row is None:
        return None
    holder = row
    for step in steps[:-1]:
        holder = holder[step]
    holder[steps[-1]] = TOKEN
    try:
        column = pa.array([row])
        if not pa.types.is_struct(column.type.value_type):
            return None
        if rng.random() < 0.5:
            column = column.cast(_strings_as(column.type, rng.choice(
                [pa.large_string(), pa.string_view()])))
        table = pa.table({"messages": column})
        sink = pa.BufferOutputStream()
        with pa.ipc.new_stream(sink, table.schema) as writer:
            writer.write_table(table)
    except (pa.ArrowException, OverflowError, UnicodeEncodeError, TypeError, ValueError):
        return None
    raw = sink.getvalue().to_pybytes()
    if raw.count(TOKEN.encode()) != 1:
        return None
    bad = rng.choice(BAD_BYTES).ljust(len(TOKEN), b"_")
    return pa.ipc.open_stream(raw.replace(TOKEN.encode(), bad)).read_all(), path


def json_copy(value: Any) -> Any:
    import json

    try:
        return json.loads(json.dumps(value))
    except (TypeError, ValueError, RecursionError):
        return None


def _strings_as(t: Any, strings: Any) -> Any:
    import pyarrow as pa

    if pa.types.is_struct(t):
        return pa.struct([f.with_type(_strings_as(f.type, strings)) for f in t])
    if pa.types.is_list(t):
        return pa.list_(t.value_field.with_type(_strings_as(t.value_type, strings)))
    return strings if pa.types.is_string(t) else t


def check_arrow(history: list[Any], seed: int) -> None:
    from contextpolicy import _kernel
    from contextpolicy.batch import reduce_table

    made = _with_bad_string(history, seed)
    if made is None:
        return
    table, path = made
    ARROW[0] += 1
    policy = ARROW_POLICIES[seed % len(ARROW_POLICIES)]
    results = {}
    for name, k in _kernel.available_kernels().items():
        previous = _kernel.use(k)
        try:
            results[name] = outcome(lambda _k: reduce_table(table, policy).figures.to_pylist(),
                                    k)
        finally:
            _kernel.use(previous)
    first = next(iter(results.values()))
    assert all(r == first for r in results.values()), f"seed {seed}: {results}"
    assert first.get("codes") == ["invalid-utf8"], f"seed {seed}: {path}: {results}"
    assert first["message"].startswith(f"invalid context plan: {path}: holds bytes that are "
                                       "not UTF-8"), f"seed {seed}: {path}: {results}"


COUNT = [0]
RAISED = [0]
ARROW = [0]


def check(history: list[Any], seed: int) -> None:
    from contextpolicy._kernel import available_kernels

    COUNT[0] += 1
    results = {name: _run(k, history, seed) for name, k in available_kernels().items()}
    first = next(iter(results.values()))
    for name, result in results.items():
        assert result == first, f"seed {seed}: kernels disagree:\n{results}"
        for each in result:
            if "raised" in each:
                assert each["raised"] in ("ContextPlanError",), (name, result)
    RAISED[0] += "raised" in first[0]
    if seed % 2 == 0:  # half the histories, so the run keeps its pace
        check_arrow(history, seed)


def main(examples: int) -> None:
    started = time.perf_counter()
    test = settings(
        max_examples=examples, deadline=None, database=None,
        suppress_health_check=list(HealthCheck),
        # A disagreement is reported as drawn: shrinking hostile objects takes far longer than
        # it saves, and the seed rebuilds the case.
        phases=[Phase.explicit, Phase.generate],
    )(given(histories, st.integers(0, 2**32 - 1))(check))
    test()
    print(f"{COUNT[0]} hostile histories ({RAISED[0]} rejected with a ContextPlanError, the "
          f"same on every kernel; {ARROW[0]} as Arrow columns with a string that is not UTF-8, "
          f"named alike), {time.perf_counter() - started:.1f} s")


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 200)
