"""``contextpolicy bench``: the reduction timed on the compiled kernel, the pure twin, the whole
pipeline and LangChain's ``trim_messages``, as ratios in one run."""

from __future__ import annotations

import argparse
import json
import time
from collections.abc import Callable
from typing import Any

from .. import _kernel
from ..core import process_context
from ..plan import ContextPlan
from ..policy import validate_context_policy
from ..synthetic import (
    CORPORA,
    SEED_POLICY,
    TARGET_CHARS,
    corpus,
    langchain_char_counter,
    make_history,
    measure_group_cut,
)
from .common import CliError
from .plots import PlotFile, pyplot

__all__ = ["cmd_bench", "run_bench"]

def _best(fn: Callable[[], Any], repeat: int) -> float:
    best = float("inf")
    for _ in range(max(1, repeat)):
        start = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - start)
    return best


_JSON_TYPES = {list: "an array", str: "a string", int: "a number", float: "a number",
               bool: "true or false", type(None): "null"}
MIN_SIZE = 2  # messages: a history needs a question and a reply


def sizes(text: str) -> list[int]:
    """The history sizes of ``--sizes``: whole numbers of at least ``MIN_SIZE``, by commas."""
    found = []
    for part in str(text).split(","):
        part = part.strip()
        if not part:
            continue
        try:
            n = int(part)
        except ValueError:
            raise CliError(
                "--sizes: expected whole numbers of messages separated by commas "
                f"(e.g. 1000,10000), got {part!r}"
            ) from None
        if n < MIN_SIZE:
            raise CliError(
                f"--sizes: expected histories of at least {MIN_SIZE} messages (a question and "
                f"a reply), got {n}"
            )
        found.append(n)
    if not found:
        raise CliError(f"--sizes: expected at least one size, got {text!r}")
    return found


def _read_input(path: str) -> list[list[dict[str, Any]]]:
    """The histories of the transcripts of a JSONL file; every problem a one-line error that
    says where."""
    import orjson

    from ..errors import ContextPlanError
    from ..jsonl.diagnose import json_problem, top_level_hint
    from ..jsonl.files import FileError, InputFile

    conversations = []
    try:
        with InputFile(path) as source:
            for number, raw in source.lines():
                where = f"{path}:{number}"
                try:
                    doc = orjson.loads(raw)
                except orjson.JSONDecodeError as exc:
                    raise CliError(json_problem(raw, exc, jsonl=True).at(path, number)) from None
                if not isinstance(doc, dict) or "messages" not in doc:
                    got = (f"an object with keys: {', '.join(sorted(map(str, doc))) or 'none'}"
                           if isinstance(doc, dict) else _JSON_TYPES.get(type(doc), "a value"))
                    hint = f": {top_level_hint(doc)}" if isinstance(doc, list) else ""
                    raise CliError(f'{where}: expected a transcript {{"id", "messages"}}, '
                                   f"got {got}{hint}")
                try:
                    conversations.extend(_timed_histories([doc["messages"]]))
                except ContextPlanError as exc:
                    raise CliError(f"{where}: {exc}") from None
    except FileError as exc:
        raise CliError(str(exc)) from None
    if not conversations:
        raise CliError(
            f'{path}: no transcript with a history to time (expected lines {{"id", "messages"}} '
            "with replies before the last question)"
        )
    return conversations


def _timed_histories(transcripts: list[Any]) -> list[list[dict[str, Any]]]:
    """The histories of transcripts, each timed as a conversation of its own: so it must have
    a history itself (replies before its last question)."""
    found = []
    for messages in transcripts:
        plan = ContextPlan.from_messages(messages)
        history = next((f.messages for f in plan.fragments if f.id == "history"), None)
        if history and any(f.id == "history" for f in
                           ContextPlan.from_messages(history).fragments):
            found.append(history)
    return found


def corpora(text: str) -> list[str]:
    """The corpus names of ``--corpora`` (``none`` for none)."""
    names = [part.strip() for part in str(text).split(",") if part.strip()]
    if names == ["none"]:
        return []
    unknown = [n for n in names if n not in CORPORA]
    if unknown or not names:
        raise CliError(f"--corpora: expected names from {', '.join(CORPORA)} (or none), got "
                       f"{text!r}")
    return names


def _histories(args: argparse.Namespace) -> list[tuple[str, list[list[dict[str, Any]]]]]:
    if args.input:
        return [(args.input, _read_input(args.input))]
    # Round-tripped through JSON: laid out in memory as an application holds a transcript.
    cases = [(f"{n:,}", [json.loads(json.dumps(make_history(n, seed=7)))])
             for n in sizes(args.sizes)]
    for name in corpora(args.corpora):
        found = _timed_histories(json.loads(json.dumps(corpus(name, args.conversations, 7))))
        cases.append((f"{name} ({len(found):,})", found))
    return cases


def _time_case(
    conversations: list[list[dict[str, Any]]],
    kernels: dict[str, Any],
    policy: Any,
    langchain: tuple[Any, Any] | None,
    repeat: int,
) -> dict[str, float]:
    timings: dict[str, float] = {}

    def kernel_run(kernel: Any) -> Callable[[], Any]:
        return lambda: [measure_group_cut(kernel, c) for c in conversations]

    for name, kernel in kernels.items():
        timings[f"kernel ({name})"] = _best(kernel_run(kernel), repeat)
    plans = [ContextPlan.from_messages(c) for c in conversations]
    timings[f"process_context ({_kernel.IMPLEMENTATION})"] = _best(
        lambda: [process_context(p, policy) for p in plans], repeat
    )
    if langchain is not None:
        convert, trim = langchain
        prebuilt = [convert(c) for c in conversations]
        timings["langchain trim_messages"] = _best(
            lambda: [trim(m, max_tokens=TARGET_CHARS, token_counter=langchain_char_counter,
                          strategy="last", start_on="human", include_system=False)
                     for m in prebuilt],
            max(1, min(repeat, 2)),
        )
    return timings


def run_bench(args: argparse.Namespace) -> list[dict[str, Any]]:
    kernels = _kernel.available_kernels()
    policy = validate_context_policy(SEED_POLICY)
    langchain = None
    if not args.no_langchain:
        try:
            from langchain_core.messages import convert_to_messages, trim_messages

            langchain = (convert_to_messages, trim_messages)
        except ImportError:
            langchain = None
    rows: list[dict[str, Any]] = []
    for label, conversations in _histories(args):
        n = sum(len(c) for c in conversations)
        if n == 0:
            continue
        timings = _time_case(conversations, kernels, policy, langchain, args.repeat)
        base = timings.get("kernel (cython)") or timings["kernel (python)"]
        for impl, seconds in timings.items():
            rows.append({
                "history": label, "messages": n, "implementation": impl,
                "seconds": seconds, "nsPerMessage": seconds * 1e9 / n,
                "vsCompiled": seconds / base,
            })
    return rows


def _plot(rows: list[dict[str, Any]], plot: PlotFile) -> None:
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(7, 4.5))
    for impl in dict.fromkeys(r["implementation"] for r in rows):
        points = sorted((r["messages"], r["nsPerMessage"]) for r in rows
                        if r["implementation"] == impl)
        ax.plot([p[0] for p in points], [p[1] for p in points], marker="o", label=impl)
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("messages in the history")
    ax.set_ylabel("time per message (ns)")
    ax.set_title("contextpolicy bench: trim by user turn (seed policy)")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend()
    fig.tight_layout()
    plot.save(fig)


def cmd_bench(args: argparse.Namespace) -> int:
    from rich.console import Console
    from rich.table import Table

    if args.repeat < 1:
        raise CliError(f"--repeat: expected a number >= 1, got {args.repeat}")
    if args.conversations < 1:
        raise CliError(f"--conversations: expected a number >= 1, got {args.conversations}")
    if not args.input:
        sizes(args.sizes)  # before anything is timed
        corpora(args.corpora)
    plot = PlotFile(args.plot) if args.plot is not None else None
    rows = run_bench(args)
    if args.json:
        print(json.dumps(rows, indent=2))
    else:
        table = Table(title="contextpolicy bench: measure + group + cut, and the pipeline",
                      title_justify="left")
        for column in ("history", "implementation", "ns/message", "vs compiled kernel"):
            table.add_column(column, justify="left" if column == "implementation" else "right")
        for r in rows:
            table.add_row(r["history"], r["implementation"], f"{r['nsPerMessage']:,.1f}",
                          f"{r['vsCompiled']:,.2f}x")
        Console(highlight=False).print(table)
    if plot is not None:
        _plot(rows, plot)
        if not args.json:
            print(f"wrote {args.plot}")
    return 0
