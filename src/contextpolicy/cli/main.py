"""The ``contextpolicy`` command line: validate, reduce, audit, schema, bench, examples.

Exit status, the same in every command and however a policy arrives (a file, standard input,
inline JSON, YAML, the shipped example): 0 success; 1 a policy (or a handlers file) that does not
validate, an audit violation or a worker process that failed; 2 bad input or output (a file that
cannot be read or written, a document or line that is not JSON or not UTF-8, a line that is not a
conversation, a plan that is not valid, a bad argument); 128 + the signal's number when a signal
stops the run (130 for Ctrl-C, 143 for SIGTERM, 141 when the reader of standard output has gone).
Errors are one line that names the file (``FILE:LINE:COLUMN`` where a byte is at fault, the
column counting bytes) and says what was expected.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import signal
import sys
import time
from typing import Any, NoReturn

from .. import __version__
from .common import CliError, Interrupted, Signals, example_path, signal_name, stderr
from .documents import document_name, is_inline, load_json

__all__ = ["main"]

EXAMPLE_CORPUS = "transcripts.jsonl"
EXAMPLE_POLICY = "policy-reduce.json"
REFRESH_SECONDS = 0.1  # of the progress bar


def _load_policy(path: str) -> Any:
    from ..errors import ContextPolicyError
    from ..policy import validate_context_policy

    doc = load_json(path, "policy")
    try:
        validate_context_policy(doc)
    except ContextPolicyError as exc:
        lines = [f"{document_name(path)}: invalid policy ({len(exc.issues)} problem(s)):"]
        lines += [f"  {issue}" for issue in exc.issues]
        raise CliError("\n".join(lines), code=1) from None
    return doc


# ---------------------------------------------------------------------------------------------
# handlers


def _handler_specs(path: str) -> list[Any]:
    """The entries of a ``--handlers`` file, or a :class:`CliError` listing every problem."""
    from ..errors import ContextPolicyError
    from ..handlers.params import parse_handlers

    try:
        return parse_handlers(load_json(path, "handlers file"))
    except ContextPolicyError as exc:
        lines = [f"{document_name(path)}: invalid handlers ({len(exc.issues)} problem(s)):"]
        lines += [f"  {issue}" for issue in exc.issues]
        raise CliError("\n".join(lines), code=1) from None


def _named_handlers(policy: Any) -> list[tuple[str, str]]:
    """(path, id) of every ``handlerId`` of a policy document (read tolerantly)."""
    from ..policy.validation import references

    if not isinstance(policy, dict):
        return []
    try:
        refs = references(policy)
    except Exception:  # a document too broken to read: validation says what is wrong
        return []
    return [(ref.path, ref.name) for ref in refs if ref.what == "handler"
            and isinstance(ref.name, str)]


def _handlers(args: argparse.Namespace, policy: Any) -> dict[str, Any] | None:
    """The handlers of ``reduce``: built-in ones by ``--handler ID`` (with their defaults) and
    from ``--handlers FILE``; ``None`` when neither is given. A built-in id the policy names
    without registering it is an error here, before any work."""
    from ..handlers.params import BUILTIN_IDS, FROM_FILES, SUMMARIZE

    handlers: dict[str, Any] = {}
    for handler_id in args.handler or ():
        if handler_id == SUMMARIZE:
            raise CliError(
                "--handler summarize: summarize needs a summariser function, which the command "
                "line cannot give; register contextpolicy.handlers.summarize(fn) from Python"
            )
        if handler_id not in FROM_FILES:
            raise CliError(f"--handler {handler_id}: not a built-in handler; expected one of "
                           f"{', '.join(FROM_FILES)} (give parameters with --handlers FILE)")
        if handler_id in handlers:
            raise CliError(f"--handler {handler_id} is given twice")
        from ..handlers import with_defaults

        handlers[handler_id] = with_defaults(handler_id)
    if args.handlers is not None:
        from ..handlers import from_spec

        for spec in _handler_specs(args.handlers):
            if spec.handler_id in handlers:
                raise CliError(f"{document_name(args.handlers)}: handler {spec.handler_id!r} "
                               f"is also given by "
                               f"--handler {spec.handler_id}: give it once")
            handlers[spec.handler_id] = from_spec(spec)
    for path, name in _named_handlers(policy):
        if name in BUILTIN_IDS and name not in handlers:
            how = ("register summarize(fn) from Python: the command line cannot give a "
                   "summariser function" if name == SUMMARIZE else
                   f"add --handler {name} (its defaults) or give its parameters in "
                   "--handlers FILE")
            raise CliError(f"--policy: {path}: the built-in handler {name!r} is not "
                           f"registered: {how}")
    return handlers or None


# ---------------------------------------------------------------------------------------------
# validate


def cmd_validate(args: argparse.Namespace) -> int:
    from ..errors import ContextPlanError, ContextPolicyError
    from ..handlers.params import BUILTIN_IDS
    from ..policy import validate_context_policy
    from .documents import plan_document

    doc = load_json(args.policy, "policy")
    policy_name = document_name(args.policy)
    fragments: list[Any] = []
    if args.plan:
        # A transcript is split as reduce splits its lines.
        try:
            fragments = list(plan_document(load_json(args.plan, "plan")).fragments)
        except ContextPlanError as exc:
            raise CliError(f"{document_name(args.plan)}: {exc}") from None
    given = list(args.handler or ())
    handler_issues: list[Any] = []
    if args.handlers is not None:
        from ..handlers.params import parse_handlers

        try:
            given += [spec.handler_id for spec in parse_handlers(
                load_json(args.handlers, "handlers file"))]
        except ContextPolicyError as exc:
            handler_issues = exc.issues
    # The built-in ids are known without being given (reduce registers them, summarize comes
    # from Python).
    builtin = sorted({name for _, name in _named_handlers(doc) if name in BUILTIN_IDS
                      and name not in given})
    try:
        typed = validate_context_policy(doc, fragments, [*given, *builtin] if given else ())
    except ContextPolicyError as exc:
        print(f"{policy_name}: invalid ({len(exc.issues)} problem(s))")
        for issue in exc.issues:
            print(f"  {issue}")
        typed = None
    if handler_issues:
        print(f"{document_name(args.handlers)}: invalid ({len(handler_issues)} problem(s))")
        for issue in handler_issues:
            print(f"  {issue}")
    if typed is None or handler_issues:
        return 1
    what = f"a valid {typed.mode} policy"
    if typed.mode == "reduce":
        what += f" ({len(typed.steps)} step{'s' if len(typed.steps) != 1 else ''})"  # type: ignore[union-attr]
    checked = []
    if args.plan:
        checked.append(f"references checked against {document_name(args.plan)}")
    if given:
        checked.append(f"handlers {', '.join(given)}")
    if builtin:
        checked.append(f"built-in handler{'s' if len(builtin) != 1 else ''} "
                       f"{', '.join(builtin)}")
    print(f"ok: {policy_name} is {what}" + (f"; {'; '.join(checked)}" if checked else ""))
    return 0


# ---------------------------------------------------------------------------------------------
# reduce


def _summary_table(summary: dict[str, Any], title: str) -> Any:
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


def _jobs(args: argparse.Namespace, console: Any) -> int:
    """The number of processes to use: ``--jobs``, at most one for each CPU this process may
    run on (never less than two, so that ``--jobs 2`` means the same everywhere). The reduction
    is CPU-bound: a worker beyond one per CPU only adds its memory and start-up time. Fewer are
    started still when the input has less work than that (see ``process_lines``)."""
    if args.jobs < 1:
        raise CliError(f"--jobs: expected a number >= 1, got {args.jobs}")
    try:
        cpus = len(os.sched_getaffinity(0))  # type: ignore[attr-defined,unused-ignore]
    except (AttributeError, OSError):
        cpus = os.cpu_count() or 1
    limit = max(2, cpus)
    if args.jobs <= limit:
        return int(args.jobs)
    if not args.quiet:
        console.print(f"contextpolicy: --jobs {args.jobs} lowered to {limit}: this process can "
                      f"use {cpus} CPU{'s' if cpus != 1 else ''}, and the work is CPU-bound")
    return limit


def _refuse_overlaps(outputs: list[tuple[str, Any]], reads: list[tuple[str, str]]) -> None:
    """Two outputs that are one file (one would end up holding the other), or an output that is
    a file the run reads: refused, whatever their spelling (symbolic links, hard links,
    ``./``, ``/dev/stdout``)."""
    from ..jsonl.files import conflicting_files, input_identity

    named = [(label, out.identity()) for label, out in outputs if out.kind != "discard"]
    read = [(label, input_identity(path)) for label, path in reads]
    for i, (label, identity) in enumerate(named):
        for other, other_identity in named[i + 1:]:
            if conflicting_files(identity, other_identity):
                raise CliError(f"{label} and {other} are the same file: give each its own")
        for other, other_identity in read:
            if conflicting_files(identity, other_identity):
                raise CliError(
                    f"{label} is {other}: the run would write over what it reads; "
                    "write to another file"
                )


def _outcome(outputs: list[Any], complete: bool) -> str:
    """What an interrupted run leaves, for its last message."""
    if complete:
        return "the output was complete and in place first"
    files = [o for o in outputs if o.kind == "file"]
    streams = [o for o in outputs if o.streaming]
    parts = []
    if files or not streams:
        parts.append("no output file was written")
    if streams:
        parts.append(f"what went to {' and '.join(o.name for o in streams)} is incomplete")
    return "; ".join(parts)


def cmd_reduce(args: argparse.Namespace) -> int:
    from ..jsonl.files import FileError
    from ..jsonl.runner import WorkerError

    outputs: list[Any] = []
    try:
        return _reduce(args, outputs)
    except FileError as exc:
        raise CliError(str(exc)) from None
    except WorkerError as exc:
        raise CliError(f"{exc}; {_outcome(outputs, False)}", code=1) from None
    except KeyboardInterrupt as exc:
        exc.outcome = _outcome(outputs, getattr(exc, "complete", False))  # type: ignore[attr-defined]
        raise


def _reduce(args: argparse.Namespace, outputs: list[Any]) -> int:
    from ..jsonl.files import AtomicOutput, InputFile, batched_lines
    from ..jsonl.runner import BATCH_BYTES, BATCH_LINES, Summary, process_lines, start_method

    console = stderr()
    example = args.input is None and args.policy is None
    if example:
        input_path = str(example_path(EXAMPLE_CORPUS))
        policy_path = str(example_path(EXAMPLE_POLICY))
        console.print(
            "contextpolicy: no input and no policy given: running the example corpus shipped "
            f"in the package ({EXAMPLE_CORPUS}) with the seed's reduce policy ({EXAMPLE_POLICY})."
            + ("" if args.output else " Add -o OUT.jsonl to keep the reduced conversations.")
        )
    else:
        if args.policy is None:
            raise CliError(
                "--policy POLICY.json is required (give neither INPUT nor --policy to run the "
                "example corpus shipped in the package)"
            )
        input_path, policy_path = args.input or "-", args.policy
    jobs = _jobs(args, console)
    try:
        start_method()  # CONTEXTPOLICY_START_METHOD, checked before any file is opened
    except ValueError as exc:
        raise CliError(str(exc)) from None
    policy = _load_policy(policy_path)
    handlers = _handlers(args, policy)
    from .tables import ParquetFromLines, is_parquet, reduce_parquet

    table_input = is_parquet(input_path, reading=True)
    # Every output checked before anything is opened or any work done: a missing folder, a
    # folder where a file should be, one file named twice, a file the run reads.
    out: Any = AtomicOutput(args.output, discard=example and not args.output)
    if is_parquet(args.output) and not table_input:
        out = ParquetFromLines(out)  # the line runner's output, converted at the end
    if is_parquet(args.report) and not table_input:
        raise CliError(f"--report {args.report}: a Parquet report holds the figures of a "
                       "Parquet input; for JSONL input the report is JSON")
    report_out = AtomicOutput(args.report) if args.report is not None else None
    named = [("-o " + args.output if args.output not in (None, "-") else "standard output", out)]
    if report_out is not None:
        named.append((f"--report {args.report}", report_out))
    _refuse_overlaps(named, [(f"the input {input_path}", input_path)] + (
        [] if is_inline(policy_path) else [(f"the policy {policy_path}", policy_path)]))
    outputs += [o for _, o in named]
    if table_input:
        if args.jobs > 1 and not args.quiet:
            console.print("contextpolicy: Parquet is reduced in one process, a record batch at "
                          "a time (--jobs applies to JSONL input)")
        data, name = reduce_parquet(args, console, policy, input_path, out, report_out,
                                    handlers)
        _said(args, console, data, name)
        return 0
    summary = Summary()
    started = time.perf_counter()
    source = InputFile(input_path)
    if example:
        source.name = f"example corpus ({EXAMPLE_CORPUS})"
    # Into Parquet, each line's output is known by its input line (an error names it): a
    # line in a run of lines is found in the file again, and a stream is read line by line.
    numbered = isinstance(out, ParquetFromLines)
    if numbered:
        out.source, out.reread = source.name, input_path if source.seekable else None
    show_progress = console.is_terminal and not args.quiet
    with source, out, _ReportFile(report_out) as report:
        progress = _Progress(console, source) if show_progress else None
        batches: Any
        if source.seekable:
            batches = source.ranges(BATCH_BYTES, workers=jobs)  # read in place, in ranges
        elif jobs == 1:
            batches = batched_lines(source.lines(), 1, BATCH_BYTES)  # a pipe streams through
        else:
            batches = batched_lines(source.lines(), BATCH_LINES, BATCH_BYTES)
        live = not source.seekable and out.streaming  # a stream to a stream: every line flushed
        # Closed on the way out: the workers are stopped before an error is reported.
        results = process_lines(
            batches, policy, jobs=jobs, with_reports=report.enabled,
            on_batch=progress.update if progress else None, handlers=handlers,
            runs=not numbered or source.seekable,
        )
        try:
            for result in results:
                if result.error is not None:
                    where = f"{source.name}:{result.line}" + (
                        f":{result.column}" if result.column else "")
                    if args.on_error == "fail":
                        raise CliError(f"{where}: {result.error}")
                    console.print(f"contextpolicy: skipped {where}: {result.error}",
                                  markup=False)
                summary.add(result)
                if result.output is not None:
                    if numbered:
                        out.write_result(result.line, result.lines, result.output)
                    else:
                        out.write(result.output)
                    if live:
                        out.flush()
                if result.report is not None:
                    report.add(result.report)
        finally:
            results.close()
            if progress:
                progress.stop()
        data = _finish(args, summary, source.position, started, out, report)
    _said(args, console, data, source.name)
    return 1 if summary.audit_violations else 0


def _finish(args: argparse.Namespace, summary: Any, bytes_in: int, started: float, out: Any,
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


def _said(args: argparse.Namespace, console: Any, data: dict[str, Any], name: str) -> None:
    if not args.quiet:
        if data["conversations"] == data["skipped"] == 0:
            # Nothing was read: a table of zeros would say nothing more, and less clearly.
            what = "row" if "columnarRows" in data else "line (blank lines aside)"
            console.print(f"contextpolicy reduce: no conversation was read from {name}: it "
                          f"holds no {what}", markup=False)
        else:
            console.print(_summary_table(data, f"contextpolicy reduce: {name}"))
        if args.output:
            console.print(f"wrote {args.output}" + (f" and {args.report}" if args.report else ""))
        elif args.report:
            console.print(f"wrote {args.report}")


class _Progress:
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
            TransferSpeedColumn(), TimeRemainingColumn(), console=console, transient=True,
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


class _ReportFile:
    """The per-conversation reports and the summary, streamed into one JSON document."""

    def __init__(self, out: Any) -> None:
        self.enabled = out is not None
        self.out = out
        self.first = True

    def __enter__(self) -> _ReportFile:
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


# ---------------------------------------------------------------------------------------------
# audit


def cmd_audit(args: argparse.Namespace) -> int:
    import orjson
    from rich.console import Console
    from rich.table import Table

    from ..core import process_context
    from ..errors import ContextAuditError, ContextPlanError, ContextPolicyError
    from ..plan import as_plan

    policy = _load_policy(args.policy)
    policy_name, plan_name = document_name(args.policy), document_name(args.plan)
    if policy.get("mode") != "audit":
        raise CliError(f"{policy_name}: expected an audit policy, got mode "
                       f"{policy.get('mode')!r}")
    try:
        plan = as_plan(load_json(args.plan, "plan"))
        result = process_context(plan, policy)
        report, passed = result.report, True
    except ContextAuditError as exc:
        report, passed = exc.report, False
    except ContextPlanError as exc:
        raise CliError(f"{plan_name}: {exc}") from None
    except ContextPolicyError as exc:  # its references do not fit the plan
        raise CliError(f"{policy_name}: {exc}", code=1) from None
    assert report.audit is not None
    if args.json:
        sys.stdout.buffer.write(orjson.dumps(report.model_dump(by_alias=True, mode="json"),
                                             option=orjson.OPT_INDENT_2) + b"\n")
        return 0 if passed else 1
    console = Console(highlight=False, soft_wrap=True)
    table = Table(title=f"audit of {plan_name} (mutable: "
                  f"{', '.join(report.audit.mutable_fragment_ids) or 'none'})",
                  title_justify="left")
    for column in ("fragment", "change", "fields", "chars before", "chars after", "allowed",
                   "reason"):
        table.add_column(column, justify="right" if column.startswith("chars") else "left")
    for c in report.audit.changes:
        table.add_row(
            c.fragment_id, c.change, ", ".join(c.fields),
            "" if c.chars_before is None else f"{c.chars_before:,}",
            "" if c.chars_after is None else f"{c.chars_after:,}",
            "yes" if c.allowed else "NO", c.reason,
        )
    if report.audit.changes:
        console.print(table)
    verdict = ("passed: every change is inside the mutable range" if passed else
               f"failed: {report.audit.violations} disallowed change(s)")
    console.print(f"{len(report.audit.changes)} change(s); audit {verdict}")
    return 0 if passed else 1


# ---------------------------------------------------------------------------------------------
# schema


def cmd_schema(args: argparse.Namespace) -> int:
    import orjson

    schema = json_schema(args.what)
    sys.stdout.buffer.write(orjson.dumps(schema, option=orjson.OPT_INDENT_2) + b"\n")
    return 0


def json_schema(what: str) -> dict[str, Any]:
    """The JSON Schema of a policy, a plan or a report (camelCase keys)."""
    from pydantic import TypeAdapter

    from ..plan import ContextPlan
    from ..policy import ContextPolicy
    from ..report import ContextReport

    if what == "policy":
        schema = TypeAdapter(ContextPolicy).json_schema(by_alias=True)
        schema["title"] = "ContextPolicy"
    elif what == "plan":
        schema = ContextPlan.model_json_schema(by_alias=True)
    else:
        schema = ContextReport.model_json_schema(by_alias=True, mode="serialization")
    schema["$schema"] = "https://json-schema.org/draft/2020-12/schema"
    return schema


# ---------------------------------------------------------------------------------------------


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        self.print_usage(sys.stderr)
        self.exit(2, f"{self.prog}: error: {message}\n")


def _parser() -> argparse.ArgumentParser:
    fmt = argparse.RawDescriptionHelpFormatter
    parser = _Parser(
        prog="contextpolicy",
        description="Validate, reduce and audit what an LLM agent sends to its model.",
        epilog="Run `contextpolicy reduce` with no arguments to try it on the example corpus.",
        formatter_class=fmt,
    )
    parser.add_argument("--version", action="version", version=f"contextpolicy {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND",
                                parser_class=_Parser)

    p = sub.add_parser(
        "validate", help="check a policy (and its references to a plan and handlers)",
        formatter_class=fmt, description="Check a policy file: every problem at once, each "
        "with its JSON path. Exit 0 when valid, 1 when not, 2 when a file cannot be read. "
        "A policy, plan or handlers file may be JSON, YAML (.yaml/.yml, with PyYAML), - for "
        "standard input, or inline JSON.",
        epilog="example:\n"
        "  contextpolicy validate policy.json --plan plan.json --handler summarise",
    )
    p.add_argument("policy", metavar="POLICY.json",
                   help="a file, - for standard input, or inline JSON ('{\"mode\": ...}')")
    p.add_argument("--plan", metavar="PLAN.json",
                   help="check fragmentId/mutableFragmentIds against this plan's fragments (a "
                   'plan {"fragments"}, or a transcript {"messages"} split as reduce splits it)')
    p.add_argument("--handler", action="append", metavar="ID",
                   help="a registered compress handler id (repeatable); the built-in ids "
                   "(clear-tool-results, truncate-messages, summarize) are known without it")
    p.add_argument("--handlers", metavar="HANDLERS.json",
                   help="check this handlers file; its ids count as registered")
    p.set_defaults(func=cmd_validate)

    p = sub.add_parser(
        "reduce", help="apply a policy to every conversation of a JSONL file",
        formatter_class=fmt,
        description="Apply a policy to every line of a JSONL file: a transcript "
        '{"id", "messages"} or a plan {"fragments"}. Output lines keep the input\'s shape and '
        "order; a summary table goes to stderr. Output files are written to a temporary file "
        "beside them and renamed at the end, so a failed or interrupted run leaves no half "
        "file; what is not a regular file (a device, a FIFO, /dev/stdout) is written to as it "
        "is. INPUT may be a pipe or a FIFO (<(...) too).",
        epilog="examples:\n"
        "  contextpolicy reduce                      # the example corpus shipped in the package\n"
        "  contextpolicy reduce chats.jsonl.gz --policy policy.json -o reduced.jsonl \\\n"
        "      --report report.json --jobs 2\n"
        "  cat chats.jsonl | contextpolicy reduce - --policy policy.json > reduced.jsonl\n"
        "  contextpolicy reduce traces.jsonl --policy policy.json --handler clear-tool-results "
        "-o out.jsonl",
    )
    p.add_argument("input", nargs="?", metavar="INPUT",
                   help="JSONL file (.gz too), - for standard input, or a Parquet file with a "
                        "messages column")
    p.add_argument("--policy", metavar="POLICY.json",
                   help="the policy to apply: a file (JSON, or YAML named .yaml/.yml), - for "
                   "standard input, or inline JSON ('{\"mode\": ...}')")
    p.add_argument("-o", "--output", metavar="OUT",
                   help="write here (default: stdout); a .parquet name writes Parquet")
    p.add_argument("--report", metavar="REPORT.json",
                   help="write every conversation's report and the summary here")
    p.add_argument("--jobs", type=int, default=1, metavar="N",
                   help="processes (default 1; lowered to the CPUs this process can use, and "
                   "never more than the input has work for); output order is kept")
    p.add_argument("--on-error", choices=("fail", "skip"), default="fail",
                   help="a bad line stops the run (fail, default) or is counted and skipped")
    p.add_argument("--handler", action="append", metavar="ID",
                   help="register a built-in compress handler with its defaults "
                   "(clear-tool-results, truncate-messages; repeatable)")
    p.add_argument("--handlers", metavar="HANDLERS.json",
                   help='built-in handlers with parameters: {"clear-tool-results": {"keep": 2}, '
                   '"short": {"handler": "truncate-messages", "maxChars": 1500}}')
    p.add_argument("-q", "--quiet", action="store_true", help="no progress bar, no summary")
    p.set_defaults(func=cmd_reduce)

    p = sub.add_parser(
        "audit", help="check an App's edits of a plan against an audit policy",
        formatter_class=fmt,
        description="Compare a plan's fragments with its original fragments. Exit 1 when a "
        "change falls outside the mutable range.",
        epilog="example:\n  contextpolicy audit plan.json --policy audit-policy.json",
    )
    p.add_argument("plan", metavar="PLAN.json")
    p.add_argument("--policy", required=True, metavar="POLICY.json")
    p.add_argument("--json", action="store_true", help="print the report as JSON")
    p.set_defaults(func=cmd_audit)

    p = sub.add_parser(
        "schema", help="print the JSON Schema of a policy, a plan or a report",
        formatter_class=fmt, epilog="example:\n  contextpolicy schema policy > policy.schema.json",
    )
    p.add_argument("what", choices=("policy", "plan", "report"))
    p.set_defaults(func=cmd_schema)

    p = sub.add_parser(
        "examples", help="copy the example policies, plans and corpus into a folder",
        formatter_class=fmt,
        description="Copy the example files shipped in the package (a corpus of transcripts, "
        "policies, plans and a handlers file) into FOLDER, created if needed, to try every "
        "command of the documentation on them.",
        epilog="example:\n  contextpolicy examples try && cd try && "
        "contextpolicy reduce transcripts.jsonl --policy policy-reduce.json -o out.jsonl",
    )
    p.add_argument("folder", metavar="FOLDER")
    p.add_argument("--force", action="store_true", help="write over files already there")
    p.set_defaults(func=_cmd_examples)

    p = sub.add_parser(
        "bench", help="benchmark the reduction: compiled kernel vs pure twin (vs LangChain)",
        formatter_class=fmt,
        description="Time measure + group + cut and the whole process_context pipeline on "
        "seeded histories of each size and on seeded corpora shaped like real ones (many short "
        "chats, tool-heavy agent traces, long transcripts), or on --input, for the compiled "
        "kernel and the pure twin, and LangChain's trim_messages when it is installed. Ratios "
        "are the claim.",
        epilog="example:\n  contextpolicy bench --sizes 10000,100000 --plot bench.png",
    )
    p.add_argument("--sizes", default="1000,10000,100000", metavar="N,N,...",
                   help="history sizes in messages (default 1000,10000,100000)")
    p.add_argument("--input", metavar="INPUT.jsonl",
                   help="benchmark on the transcripts of this JSONL file instead")
    p.add_argument("--corpora", default="chats,agent-traces,long-transcripts",
                   metavar="NAME,...",
                   help="seeded corpora timed beside the sizes, or 'none' (default chats,"
                   "agent-traces,long-transcripts)")
    p.add_argument("--conversations", type=int, default=100, metavar="N",
                   help="conversations drawn from each corpus (default 100)")
    p.add_argument("--repeat", type=int, default=5, metavar="N",
                   help="timed runs per measurement; the fastest counts (default 5)")
    p.add_argument("--no-langchain", action="store_true", help="leave LangChain out")
    p.add_argument("--json", action="store_true", help="print the results as JSON")
    p.add_argument("--plot", metavar="FILE.png",
                   help="draw time per message against history size (needs matplotlib)")
    p.set_defaults(func=_cmd_bench)
    return parser


def _cmd_bench(args: argparse.Namespace) -> int:
    from .bench import cmd_bench

    return cmd_bench(args)


def _cmd_examples(args: argparse.Namespace) -> int:
    from .examples import cmd_examples

    return cmd_examples(args)


def _say(message: str) -> None:
    """A last message on standard error, if there is one to write it to."""
    if sys.stderr is not None:
        with contextlib.suppress(OSError):  # a terminal that hung up, a closed pipe
            print(message, file=sys.stderr, flush=True)


def _hold_closed_standard_streams() -> None:
    """Standard input, output or error closed when the command started: the descriptor is held
    (on the null device) so that no file this run opens takes its number; ``sys.stdin``,
    ``sys.stdout`` or ``sys.stderr`` stays ``None``, so that writing there is still an error."""
    for fd, stream in enumerate((sys.stdin, sys.stdout, sys.stderr)):
        if stream is not None:
            continue
        try:
            os.fstat(fd)
        except OSError:
            held = os.open(os.devnull, os.O_RDWR)
            if held != fd:
                os.dup2(held, fd)
                os.close(held)


def _silence_stdout() -> None:
    """Standard output cannot take what is left in its buffer (a full disk, a reader that has
    gone): send it to the null device, so that Python's last flush does not fail again."""
    if sys.stdout is None:
        return
    with contextlib.suppress(OSError, ValueError):
        null = os.open(os.devnull, os.O_WRONLY)
        os.dup2(null, sys.stdout.fileno())
        os.close(null)


def _flush_stdout() -> OSError | None:
    if sys.stdout is None:
        return None
    try:
        sys.stdout.flush()
    except OSError as exc:
        _silence_stdout()
        return exc
    return None


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    _hold_closed_standard_streams()
    args.signals = Signals()
    code: int
    try:
        with args.signals:
            if args.command != "reduce" and sys.stdout is None:
                raise CliError("standard output is closed: there is nowhere to write the result")
            try:
                code = int(args.func(args))
            except Exception:
                if args.signals.received is None:
                    raise
                # What the signal broke on its way out (an import it cut short, say): the run
                # was interrupted, whatever failed after.
                raise Interrupted(args.signals.received) from None
            failure = _flush_stdout()
            if isinstance(failure, BrokenPipeError):
                raise failure
            if failure is not None:
                raise CliError(f"standard output: cannot write ({failure.strerror or failure})")
    except CliError as exc:
        _say(f"contextpolicy {args.command}: error: {exc}")
        code = exc.code
    except KeyboardInterrupt as exc:
        # What is still buffered for standard output goes nowhere: it is incomplete anyway,
        # and a reader that has stopped reading would keep the run from ending.
        _silence_stdout()
        signum = getattr(exc, "signum", signal.SIGINT)
        how = "interrupted" if signum == signal.SIGINT else f"stopped by {signal_name(signum)}"
        outcome = getattr(exc, "outcome", "no output file was written")
        _say(f"contextpolicy {args.command}: {how}; {outcome}")
        code = 128 + signum
    except BrokenPipeError:  # the reader of standard output has gone (`| head`): quietly
        _silence_stdout()
        code = 128 + getattr(signal, "SIGPIPE", 13)
    except OSError as exc:  # writing a command's result (the files it reads say so themselves)
        _silence_stdout()
        where = exc.filename or "standard output"
        _say(f"contextpolicy {args.command}: error: {where}: cannot write "
             f"({exc.strerror or exc})")
        code = 2
    if _flush_stdout() is not None:  # what an error left in the buffer
        _silence_stdout()
    return code
