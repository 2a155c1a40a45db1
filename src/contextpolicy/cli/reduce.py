"""``contextpolicy reduce``: conversations (JSONL or Parquet) reduced with one policy, in this
process, its threads or worker processes, with a progress bar, a summary and a report."""

from __future__ import annotations

import argparse
import os
import time
from typing import Any

from .common import CliError, example_path, stderr
from .documents import is_inline, is_parquet
from .policies import command_handlers, load_line_policy, load_policy
from .summary import Progress, ReportFile, finish_run, print_summary

__all__ = ["EXAMPLE_CORPUS", "EXAMPLE_POLICY", "cmd_reduce"]

EXAMPLE_CORPUS = "transcripts.jsonl"
EXAMPLE_POLICY = "policy-reduce.json"


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
    from ..jsonl.runner import start_method

    console = stderr()
    example, input_path, policy_path = _paths(args, console)
    jobs = _jobs(args, console)
    try:
        start_method()  # CONTEXTPOLICY_START_METHOD, checked before any file is opened
    except ValueError as exc:
        raise CliError(str(exc)) from None
    table_input = is_parquet(input_path, reading=True)
    # JSONL: what lines read as bytes need of the policy, kept from its last validation.
    policy, facts = (load_policy(policy_path), None) if table_input else load_line_policy(
        policy_path)
    handlers = command_handlers(args, policy, facts.handlers if facts is not None else None)
    out, report_out = _outputs(args, example, table_input, input_path, policy_path, outputs)
    if table_input:
        from .tables import reduce_parquet

        data, name = reduce_parquet(args, console, policy, input_path, out, report_out,
                                    handlers, readers=jobs)
        print_summary(args, console, data, name)
        return 0
    return _reduce_lines(args, console, policy, facts, handlers, jobs, input_path, example, out,
                         report_out)


def _paths(args: argparse.Namespace, console: Any) -> tuple[bool, str, str]:
    """Whether this is the example run (neither input nor policy given), the input and the
    policy."""
    example = args.input is None and args.policy is None
    if example:
        console.print(
            "contextpolicy: no input and no policy given: running the example corpus shipped "
            f"in the package ({EXAMPLE_CORPUS}) with the seed's reduce policy ({EXAMPLE_POLICY})."
            + ("" if args.output else " Add -o OUT.jsonl to keep the reduced conversations.")
        )
        return True, str(example_path(EXAMPLE_CORPUS)), str(example_path(EXAMPLE_POLICY))
    if args.policy is None:
        raise CliError(
            "--policy POLICY.json is required (give neither INPUT nor --policy to run the "
            "example corpus shipped in the package)"
        )
    return False, args.input or "-", args.policy


def _outputs(args: argparse.Namespace, example: bool, table_input: bool, input_path: str,
             policy_path: str, outputs: list[Any]) -> tuple[Any, Any]:
    """The output and the report, every one checked before anything is opened or any work
    done: a missing folder, a folder where a file should be, one file named twice, a file the
    run reads. ``outputs`` gets them (for the last message of an interrupted run)."""
    from ..jsonl.files import AtomicOutput
    out: Any = AtomicOutput(args.output, discard=example and not args.output)
    if is_parquet(args.output) and not table_input:
        from .tables import ParquetFromLines

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
    return out, report_out


def _reduce_lines(args: argparse.Namespace, console: Any, policy: Any, facts: Any, handlers: Any,
                  jobs: int, input_path: str, example: bool, out: Any, report_out: Any) -> int:
    """JSONL in: the lines reduced by the line runner, written in input order."""
    from ..jsonl.files import InputFile, batched_lines
    from ..jsonl.runner import BATCH_BYTES, BATCH_LINES, Summary, process_lines
    summary = Summary()
    started = time.perf_counter()
    source = InputFile(input_path)
    if example:
        source.name = f"example corpus ({EXAMPLE_CORPUS})"
    # Into Parquet, each line's output is known by its input line (an error names it): a
    # line in a run of lines is found in the file again, and a stream is read line by line.
    numbered = is_parquet(args.output)  # (out is then a ParquetFromLines)
    if numbered:
        out.source, out.reread = source.name, input_path if source.seekable else None
    show_progress = not args.quiet and console.is_terminal
    with source, out, ReportFile(report_out) as report:
        progress = Progress(console, source) if show_progress else None
        batches: Any
        if source.seekable:
            batches = source.ranges(BATCH_BYTES, workers=jobs)  # read in place, in ranges
        elif jobs == 1:
            batches = batched_lines(source.lines(), 1, BATCH_BYTES)  # a pipe streams through
        else:
            batches = batched_lines(source.lines(), BATCH_LINES, BATCH_BYTES)
        # Closed on the way out: the workers are stopped before an error is reported.
        results = process_lines(
            batches, policy, jobs=jobs, with_reports=report.enabled,
            on_batch=progress.update if progress else None, handlers=handlers,
            runs=not numbered or source.seekable, facts=facts,
        )
        try:
            _write(args, console, results, source, summary, out, report, numbered)
        finally:
            results.close()
            if progress:
                progress.stop()
        data = finish_run(args, summary, source.position, started, out, report)
    print_summary(args, console, data, source.name)
    return 1 if summary.audit_violations else 0


def _write(args: argparse.Namespace, console: Any, results: Any, source: Any, summary: Any,
           out: Any, report: Any, numbered: bool) -> None:
    """Every result added up, its output and report entry written; a bad line stops the run
    (``--on-error fail``) or is said and skipped."""
    live = not source.seekable and out.streaming  # a stream to a stream: every line flushed
    for result in results:
        if result.error is not None:
            where = f"{source.name}:{result.line}" + (
                f":{result.column}" if result.column else "")
            if args.on_error == "fail":
                raise CliError(f"{where}: {result.error}")
            console.print(f"contextpolicy: skipped {where}: {result.error}", markup=False)
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
