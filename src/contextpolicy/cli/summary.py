"""What a ``reduce`` run shows and leaves: the summary table, the progress bar, the report file,
and the outputs put in place together."""

from __future__ import annotations

import argparse
import time
from typing import Any

__all__ = ["Progress", "ReportFile", "finish_run", "print_summary", "summary_table"]

REFRESH_SECONDS = 0.1  # of the progress bar


def summary_table(summary: dict[str, Any], title: str) -> Any:
    """The run's figures, read as an answer to "did the policy work?": how many conversations
    triggered, how many were reduced, how many missed their target and why; then the chars and
    messages, what went through which path, the warnings and the throughput."""
    from rich.table import Table

    table = Table(title=title, show_header=False, title_justify="left")
    table.add_column("figure")
    table.add_column("value", justify="right")
    rows = [
        ("conversations", f"{summary['conversations']:,}"),
        ("skipped lines" if "columnarRows" not in summary else "skipped rows",
         f"{summary['skipped']:,}"),
        ("triggered", f"{summary['triggered']:,}"),
        ("reduced", f"{summary['reduced']:,}"),
        ("missed target", f"{summary['missedTarget']:,}"),
    ]
    rows += [(f"missed target: {reason}", f"{count:,}")
             for reason, count in summary["missedReasons"].items() if count]
    rows += [
        ("chars before", f"{summary['charsBefore']:,}"),
        ("chars after", f"{summary['charsAfter']:,}"),
        ("messages before", f"{summary['messagesBefore']:,}"),
        ("messages after", f"{summary['messagesAfter']:,}"),
        ("messages removed", f"{summary['messagesRemoved']:,}"),
        ("groups removed", f"{summary['groupsRemoved']:,}"),
    ]
    # The paths the input took, as rows (Parquet) or lines (JSONL): only those some took.
    if "columnarRows" in summary:
        paths = [("rows: columnar path", summary["columnarRows"]),
                 ("rows: object path", summary["objectRows"])]
    else:
        paths = [("lines read as bytes", summary["paths"]["bytes"]),
                 ("lines parsed", summary["paths"]["objects"])]
    rows += [(label, f"{count:,}") for label, count in paths if count]
    if summary["auditViolations"]:
        rows.append(("audit violations", f"{summary['auditViolations']:,}"))
    for code, count in summary["warnings"].items():
        rows.append((f"warnings: {code}", f"{count:,}"))
    rows += [
        ("input", f"{summary['bytesIn'] / 1e6:,.1f} MB in {summary['seconds']:.2f} s"),
        ("throughput", f"{summary['megabytesPerSecond']:,.1f} MB/s, "
                       f"{summary['conversationsPerSecond']:,.0f} conversations/s"),
    ]
    for row in rows:
        table.add_row(*row)
    return table


def finish_run(args: argparse.Namespace, summary: Any, bytes_in: int, started: float, out: Any,
            report: Any) -> dict[str, Any]:
    """The run's summary, the end of the report, and both outputs put in place together (a
    signal now waits until they are)."""
    summary.bytes_in = bytes_in
    summary.seconds = time.perf_counter() - started
    data: dict[str, Any] = summary.to_json_dict()
    report.finish(data)
    out.flush()
    with args.signals.deferred():
        out.commit()
        report.commit()
    return data


def print_summary(args: argparse.Namespace, console: Any, data: dict[str, Any], name: str) -> None:
    if not args.quiet:
        if data["conversations"] == data["skipped"] == 0:
            # Nothing was read: a table of zeros would say nothing more, and less clearly.
            what = "row" if "columnarRows" in data else "line (blank lines aside)"
            console.print(f"contextpolicy reduce: no conversation was read from {name}: it "
                          f"holds no {what}", markup=False)
        else:
            console.print(summary_table(data, f"contextpolicy reduce: {name}"))
        if args.output:
            console.print(f"wrote {args.output}" + (f" and {args.report}" if args.report else ""))
        elif args.report:
            console.print(f"wrote {args.report}")


class Progress:
    """A progress bar over the input's bytes (on a terminal only)."""

    def __init__(self, console: Any, source: Any) -> None:
        from rich.progress import (
            BarColumn,
            DownloadColumn,
            Progress,
            TimeRemainingColumn,
            TransferSpeedColumn,
        )

        self.source = source
        # Refreshed from here rather than by a thread of rich's: worker processes are forked
        # while the bar shows, and a fork is safe only while this is the one thread.
        self.progress = Progress(
            "[progress.description]{task.description}", BarColumn(), DownloadColumn(),
            TransferSpeedColumn(), TimeRemainingColumn(), console=getattr(console, "rich", console),
            transient=True,
            auto_refresh=False,
        )
        self.task = self.progress.add_task("reducing", total=source.size)
        self.progress.start()
        self.progress.refresh()
        self.shown = time.monotonic()

    def update(self) -> None:
        self.progress.update(self.task, completed=self.source.position)
        now = time.monotonic()
        if now - self.shown >= REFRESH_SECONDS:
            self.progress.refresh()
            self.shown = now

    def stop(self) -> None:
        self.progress.stop()


class ReportFile:
    """The per-conversation reports and the summary, streamed into one JSON document."""

    def __init__(self, out: Any) -> None:
        self.enabled = out is not None
        self.out = out
        self.first = True

    def __enter__(self) -> ReportFile:
        if self.out is not None:
            self.out.__enter__()
            self.out.write(b'{"conversations":[\n')
        return self

    def add(self, entry: bytes) -> None:
        assert self.out is not None
        self.out.write(entry if self.first else b",\n" + entry)
        self.first = False

    def finish(self, summary: dict[str, Any]) -> None:
        """The summary, the end of the document, and everything written out (a full disk
        shows here, before any output is put in place)."""
        import orjson

        if self.out is not None:
            self.out.write(b'\n],"summary":' + orjson.dumps(summary) + b"}\n")
            self.out.flush()

    def commit(self) -> None:
        if self.out is not None:
            self.out.commit()

    def __exit__(self, *exc: object) -> None:
        if self.out is not None:
            self.out.__exit__(*exc)
