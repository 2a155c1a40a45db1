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
    SEED_POLICY,
    TARGET_CHARS,
    langchain_char_counter,
    make_history,
    measure_group_cut,
)

__all__ = ["cmd_bench", "run_bench"]

def _best(fn: Callable[[], Any], repeat: int) -> float:
    best = float("inf")
    for _ in range(max(1, repeat)):
        start = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - start)
    return best


def _histories(args: argparse.Namespace) -> list[tuple[str, list[list[dict[str, Any]]]]]:
    if args.input:
        from ..jsonl.files import InputFile

        conversations = []
        with InputFile(args.input) as source:
            for _, raw in source.lines():
                doc = json.loads(raw)
                plan = ContextPlan.from_messages(doc["messages"])
                history = [f for f in plan.fragments if f.id == "history"]
                if history and history[0].messages:
                    conversations.append(history[0].messages)
        return [(args.input, conversations)]
    sizes = [int(s) for s in str(args.sizes).split(",") if s.strip()]
    # Round-tripped through JSON: laid out in memory as an application holds a transcript.
    return [(f"{n:,}", [json.loads(json.dumps(make_history(n, seed=7)))]) for n in sizes]


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


def _plot(rows: list[dict[str, Any]], path: str) -> None:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        from .common import CliError

        raise CliError("--plot needs matplotlib: pip install 'contextpolicy[plot]'") from None
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
    fig.savefig(path, dpi=120)
    plt.close(fig)


def cmd_bench(args: argparse.Namespace) -> int:
    from rich.console import Console
    from rich.table import Table

    if args.repeat < 1:
        from .common import CliError

        raise CliError(f"--repeat: expected a number >= 1, got {args.repeat}")
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
    if args.plot:
        _plot(rows, args.plot)
        if not args.json:
            print(f"wrote {args.plot}")
    return 0
