"""``contextpolicy replay``: policies priced on recorded agent sessions, as a prompt cache bills
them (:mod:`contextpolicy.replay`)."""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path
from typing import Any

from .common import CliError, example_path, stderr
from .documents import document_name
from .plots import PlotFile, pyplot
from .policies import command_handlers, load_policy

__all__ = ["cmd_replay"]



def _sessions(args: argparse.Namespace) -> tuple[str, list[list[Any]], list[str]]:
    """The sessions to replay, what to call them, and where each is (``FILE:LINE``): INPUT's
    transcripts, or a seeded corpus."""
    if args.input is None:
        from ..synthetic import CORPORA, corpus

        if args.corpus not in CORPORA:
            raise CliError(f"--corpus: expected one of {', '.join(CORPORA)}, got "
                           f"{args.corpus!r}")
        if args.sessions < 1:
            raise CliError(f"--sessions: expected a number >= 1, got {args.sessions}")
        name = f"{args.sessions} seeded {args.corpus} sessions"
        return (name, corpus(args.corpus, args.sessions),
                [f"{name}: session {i + 1}" for i in range(args.sessions)])
    sessions, lines = _read_sessions(args.input)
    return args.input, sessions, [f"{args.input}:{line}" for line in lines]


def _read_sessions(path: str) -> tuple[list[list[Any]], list[int]]:
    import orjson

    from ..jsonl.diagnose import json_problem
    from ..jsonl.files import FileError, InputFile

    found: list[list[Any]] = []
    lines: list[int] = []
    try:
        with InputFile(path) as source:
            for number, raw in source.lines():
                try:
                    doc = orjson.loads(raw)
                except orjson.JSONDecodeError as exc:
                    raise CliError(json_problem(raw, exc, jsonl=True).at(path, number)) from None
                if not isinstance(doc, dict) or not isinstance(doc.get("messages"), list):
                    raise CliError(f'{path}:{number}: expected a session {{"id", "messages"}} '
                                   "whose messages are an array")
                found.append(doc["messages"])
                lines.append(number)
    except FileError as exc:
        raise CliError(str(exc)) from None
    if not found:
        raise CliError(f'{path}: no session in it (expected lines {{"id", "messages"}})')
    return found, lines


def _policies(args: argparse.Namespace, counter: Any) -> list[tuple[str, Any]]:
    from ..adapters._agent import prepare_agent_policy
    from ..errors import ContextPolicyError

    paths = args.policy or [str(example_path("policy-agent.json"))]
    if args.policy is None and args.handler is None and args.handlers is None:
        args.handlers = str(example_path("handlers-agent.json"))
    out = []
    seen: dict[str, str] = {}
    for path in paths:
        key = path if path == "-" else os.path.realpath(path)
        if key in seen:
            raise CliError(f"--policy {path}: given twice (as {seen[key]} before); each "
                           "policy is replayed once")
        seen[key] = path
        doc = load_policy(path)
        if isinstance(doc, dict) and doc.get("mode") == "validate":
            raise CliError(f"{document_name(path)}: a validate policy changes nothing, so its "
                           "cuts cost what no reduction does (the 'none' row); replay prices "
                           "reduce policies", code=1)
        handlers = command_handlers(args, doc)
        try:
            prepared = prepare_agent_policy(doc, handlers, counter)
        except ContextPolicyError as exc:
            lines = [f"{document_name(path)}: this policy cannot run on an agent's messages "
                     f"({len(exc.issues)} problem(s)):"]
            lines += [f"  {issue}".replace(  # the command's spelling of the library's option
                "(pass counter=...)", "(give --counter tiktoken:ENCODING or hf:TOKENIZER.json)")
                for issue in exc.issues]
            raise CliError("\n".join(lines), code=1) from None
        shown = document_name(path)
        out.append((Path(shown).name if args.policy is None else shown, prepared))
    return out


def _counter(name: str | None) -> Any:
    if name is None:
        return None
    from ..counters import cached, hf_counter, tiktoken_counter

    kind, _, value = name.partition(":")
    try:
        if kind == "tiktoken" and value:
            return cached(tiktoken_counter(value))
        if kind == "hf" and value:
            return cached(hf_counter(value))
    except ImportError as exc:
        raise CliError(f"--counter {name}: {exc}") from None
    except (ValueError, OSError) as exc:
        raise CliError(f"--counter {name}: {exc}") from None
    raise CliError(f"--counter: expected tiktoken:ENCODING (o200k_base, cl100k_base) or "
                   f"hf:TOKENIZER.json, got {name!r}")


def _prices(args: argparse.Namespace) -> Any:
    from ..replay import Prices, price_problem

    for flag, value in (("--input-price", args.input_price),
                        ("--cache-write-price", args.cache_write_price),
                        ("--cache-read-price", args.cache_read_price)):
        problem = price_problem(value) if value is not None else None
        if problem is not None:
            raise CliError(f"{flag}: {problem}")
    base = Prices()
    price = base.input if args.input_price is None else args.input_price
    try:
        return Prices(
            input=price,
            cache_write=(price * base.cache_write / base.input if args.cache_write_price is None
                         else args.cache_write_price),
            cache_read=(price * base.cache_read / base.input if args.cache_read_price is None
                        else args.cache_read_price))
    except ValueError as exc:  # a cache price derived from --input-price
        raise CliError(f"--input-price {price}: {exc}") from None


def cmd_replay(args: argparse.Namespace) -> int:
    from ..errors import ContextPlanError
    from ..replay import price_policies

    prices = _prices(args)
    # before any work: a missing matplotlib, a file name of no image format, a file that
    # cannot be written
    plot = PlotFile(args.plot) if args.plot is not None else None
    counter = _counter(args.counter)
    policies = _policies(args, counter)
    name, sessions, where = _sessions(args)
    total = sum(len(_calls(s, at)) for s, at in zip(sessions, where, strict=True))
    if total == 0:
        raise CliError(f"{name}: no model call in it (a call is the messages before an "
                       "assistant message; no session has one)")
    bar = _Progress(total, show=not args.quiet and not args.json)
    try:
        rows = price_policies(sessions, policies, prices=prices, counter=counter,
                              progress=bar.advance)
    except ContextPlanError as exc:
        raise CliError(f"{name}: {exc}") from None
    finally:
        bar.stop()
    unit = "tokens" if counter is not None else "chars"
    if args.json:
        print(json.dumps({"sessions": len(sessions), "unit": unit, "prices": {
            "input": prices.input, "cacheWrite": prices.cache_write,
            "cacheRead": prices.cache_read}, "rows": [r.to_json() for r in rows]}, indent=2,
            allow_nan=False))
    else:
        _table(rows, name, unit, prices)
    if plot is not None:
        _plot(rows, plot, unit)
        if not args.json:
            print(f"wrote {args.plot}")
    return 0


def _calls(messages: list[Any], where: str) -> list[int]:
    from ..errors import ContextPlanError
    from ..replay import session_calls

    try:
        return session_calls(messages)
    except ContextPlanError as exc:
        raise CliError(f"{where}: {exc}") from None


class _Progress:
    """A progress bar over model calls, on standard error when it is a terminal."""

    def __init__(self, total: int, show: bool) -> None:
        self.progress = None
        if not show or sys.stderr is None or not sys.stderr.isatty():
            return
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TimeRemainingColumn

        self.progress = Progress("[progress.description]{task.description}", BarColumn(),
                                 MofNCompleteColumn(), TimeRemainingColumn(),
                                 console=stderr().rich, transient=True)
        self.task = self.progress.add_task("replaying calls", total=total)
        self.progress.start()

    def advance(self, calls: int) -> None:
        if self.progress is not None:
            self.progress.advance(self.task, calls)

    def stop(self) -> None:
        if self.progress is not None:
            self.progress.stop()


def _table(rows: list[Any], name: str, unit: str, prices: Any) -> None:
    from rich.console import Console
    from rich.table import Table

    none = rows[0]
    table = Table(title=f"contextpolicy replay: {name}, {none.calls:,} model calls",
                  title_justify="left", caption_justify="left",
                  caption=f"{unit}; per million: cache read {prices.cache_read:g}, cache write "
                  f"{prices.cache_write:g}")
    cells = []
    for r in rows:
        tokens = r.input_tokens is not None
        cells.append((
            r.policy or "-", r.cut, f"{r.calls:,}",
            f"{(r.input_tokens if tokens else r.input_chars):,}", f"{r.cache_hit:.1%}",
            f"{(r.peak_tokens if tokens else r.peak_chars):,}", f"{r.cost:,.4f}",
            f"{r.cost / none.cost:.2f}x" if none.cost else "-"))
    columns = ("policy", "cut", "calls", f"input {unit}", "cache hit", f"peak {unit}", "cost",
               "vs none")
    for k, column in enumerate(columns):
        # On a narrow terminal the headers wrap and a policy's name folds onto more lines; a
        # figure is never cut short.
        widest = max(len(row[k]) for row in cells)
        table.add_column(column, justify="left" if k < 2 else "right", overflow="fold",
                         min_width=min(widest, 8) if k == 0 else widest)
    for row in cells:
        table.add_row(*row)
    # A file or a pipe gets the table whole, at a width no terminal imposes; a terminal too
    # narrow for it gets its lines whole too (wrapped by the terminal, never cropped).
    Console(highlight=False, width=None if sys.stdout.isatty() else 160).print(table,
                                                                                 crop=False)


def _plot(rows: list[Any], plot: PlotFile, unit: str) -> None:
    plt = pyplot()
    fig, (size, cost) = plt.subplots(1, 2, figsize=(11, 4.5))
    for r in rows:
        label = "no reduction" if r.cut == "none" else f"{r.policy}: {r.cut}"
        calls = range(1, len(r.sizes) + 1)
        size.plot(calls, r.sizes, label=label, linewidth=1)
        cost.plot(calls, r.costs, label=label)
    size.set_xlabel("model call")
    size.set_ylabel(f"input ({unit})")
    size.set_title("input per call")
    cost.set_xlabel("model call")
    cost.set_ylabel("cumulative cost")
    cost.set_title("what the calls cost, cached prefix priced")
    for ax in (size, cost):
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize=8)
    fig.tight_layout()
    plot.save(fig)
