"""The ``contextpolicy`` command line: validate, reduce, audit, replay, schema, bench, examples.

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
from typing import Any, NoReturn

from .. import __version__
from .common import CliError, Interrupted, Signals, signal_name

__all__ = ["main"]


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        self.print_usage(sys.stderr)
        self.exit(2, f"{self.prog}: error: {message}\n")


FORMAT = argparse.RawDescriptionHelpFormatter


def _command(name: str) -> Any:
    """The function of command ``name`` (``cmd_<name>`` of module ``<name>``), its module
    imported when the command runs: a run loads only its own command."""

    def run(args: argparse.Namespace) -> int:
        import importlib

        module = importlib.import_module(f".{name}", __package__)
        return int(getattr(module, f"cmd_{name}")(args))

    run.__name__ = f"cmd_{name}"
    return run


def _parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="contextpolicy",
        description="Validate, reduce and audit what an LLM agent sends to its model.",
        epilog="Run `contextpolicy reduce` with no arguments to try it on the example corpus.",
        formatter_class=FORMAT,
    )
    parser.add_argument("--version", action="version", version=f"contextpolicy {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND",
                                parser_class=_Parser)
    for add in (_validate_args, _reduce_args, _audit_args, _replay_args, _schema_args,
                _examples_args, _bench_args):
        add(sub)
    return parser


def _validate_args(sub: Any) -> None:
    p = sub.add_parser(
        "validate", help="check a policy (and its references to a plan and handlers)",
        formatter_class=FORMAT, description="Check a policy file: every problem at once, each "
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
    p.set_defaults(func=_command("validate"))


def _reduce_args(sub: Any) -> None:
    p = sub.add_parser(
        "reduce", help="apply a policy to every conversation of a JSONL file",
        formatter_class=FORMAT,
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
                   help="processes, or for Parquet threads decoding row groups (default 1; "
                   "lowered to the CPUs this process can use, and never more than the input "
                   "has work for); output order is kept")
    p.add_argument("--on-error", choices=("fail", "skip"), default="fail",
                   help="a bad line stops the run (fail, default) or is counted and skipped")
    p.add_argument("--handler", action="append", metavar="ID",
                   help="register a built-in compress handler with its defaults "
                   "(clear-tool-results, truncate-messages; repeatable)")
    p.add_argument("--handlers", metavar="HANDLERS.json",
                   help='built-in handlers with parameters: {"clear-tool-results": {"keep": 2}, '
                   '"short": {"handler": "truncate-messages", "maxChars": 1500}}')
    p.add_argument("-q", "--quiet", action="store_true", help="no progress bar, no summary")
    p.set_defaults(func=_command("reduce"))


def _audit_args(sub: Any) -> None:
    p = sub.add_parser(
        "audit", help="check an App's edits of a plan against an audit policy",
        formatter_class=FORMAT,
        description="Compare a plan's fragments with its original fragments. Exit 1 when a "
        "change falls outside the mutable range.",
        epilog="example:\n  contextpolicy audit plan.json --policy audit-policy.json",
    )
    p.add_argument("plan", metavar="PLAN.json")
    p.add_argument("--policy", required=True, metavar="POLICY.json")
    p.add_argument("--json", action="store_true", help="print the report as JSON")
    p.set_defaults(func=_command("audit"))


def _replay_args(sub: Any) -> None:
    p = sub.add_parser(
        "replay", help="price policies on recorded agent sessions, prompt cache included",
        formatter_class=FORMAT,
        description="Replay every model call of recorded agent sessions (JSONL lines "
        '{"id", "messages"}; a call is the messages before each assistant message) as each '
        "policy sends it, with the plain cut (each call reduced afresh) and the stable cut (what "
        "a persisted reduction would hold), beside no reduction, and price the calls as a "
        "prompt cache bills them: the leading messages equal to the previous call's at the "
        "cache-read price, the rest at the cache-write price. Sizes are chars, or tokens with "
        "--counter. With no INPUT, seeded sessions of --corpus; with no --policy, the shipped "
        "agent policy (policy-agent.json with handlers-agent.json).",
        epilog="examples:\n"
        "  contextpolicy replay                       # the shipped agent policy, seeded traces\n"
        "  contextpolicy replay sessions.jsonl --policy a.json --policy b.json \\\n"
        "      --handlers handlers.json --plot cost.png\n"
        "  contextpolicy replay sessions.jsonl --policy a.json --counter tiktoken:o200k_base "
        "--json",
    )
    p.add_argument("input", nargs="?", metavar="INPUT",
                   help="JSONL sessions (.gz too), - for standard input")
    p.add_argument("--policy", action="append", metavar="POLICY.json",
                   help="a policy to price (repeatable): a file, - or inline JSON")
    p.add_argument("--handler", action="append", metavar="ID",
                   help="register a built-in compress handler with its defaults (repeatable)")
    p.add_argument("--handlers", metavar="HANDLERS.json",
                   help="built-in handlers with parameters, as reduce takes them")
    p.add_argument("--counter", metavar="NAME",
                   help="count tokens: tiktoken:o200k_base, tiktoken:cl100k_base or "
                   "hf:TOKENIZER.json (default: chars)")
    p.add_argument("--input-price", type=float, metavar="USD",
                   help="base input price per million (default 3.00)")
    p.add_argument("--cache-write-price", type=float, metavar="USD",
                   help="cache write price per million (default 1.25x the input price)")
    p.add_argument("--cache-read-price", type=float, metavar="USD",
                   help="cache read price per million (default 0.1x the input price)")
    p.add_argument("--corpus", default="agent-traces", metavar="NAME",
                   help="the seeded corpus replayed without INPUT (default agent-traces)")
    p.add_argument("--sessions", type=int, default=40, metavar="N",
                   help="seeded sessions without INPUT (default 40)")
    p.add_argument("--json", action="store_true", help="print the rows as JSON")
    p.add_argument("--plot", metavar="FILE.png",
                   help="draw input per call and cumulative cost (needs matplotlib)")
    p.add_argument("-q", "--quiet", action="store_true", help="no progress bar")
    p.set_defaults(func=_command("replay"))


def _schema_args(sub: Any) -> None:
    p = sub.add_parser(
        "schema", help="print the JSON Schema of a policy, a plan or a report",
        formatter_class=FORMAT,
        epilog="example:\n  contextpolicy schema policy > policy.schema.json",
    )
    p.add_argument("what", choices=("policy", "plan", "report"))
    p.set_defaults(func=_command("schema"))


def _examples_args(sub: Any) -> None:
    p = sub.add_parser(
        "examples", help="copy the example policies, plans and corpus into a folder",
        formatter_class=FORMAT,
        description="Copy the example files shipped in the package (a corpus of transcripts, "
        "policies, plans and a handlers file) into FOLDER, created if needed, to try every "
        "command of the documentation on them.",
        epilog="example:\n  contextpolicy examples try && cd try && "
        "contextpolicy reduce transcripts.jsonl --policy policy-reduce.json -o out.jsonl",
    )
    p.add_argument("folder", metavar="FOLDER")
    p.add_argument("--force", action="store_true", help="write over files already there")
    p.set_defaults(func=_command("examples"))


def _bench_args(sub: Any) -> None:
    p = sub.add_parser(
        "bench", help="benchmark the reduction: compiled kernel vs pure twin (vs LangChain)",
        formatter_class=FORMAT,
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
    p.set_defaults(func=_command("bench"))


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


def _stdin_once(args: argparse.Namespace) -> None:
    """Standard input can be read once: a run that names it (``-``) for two documents would
    read the second from what the first left (nothing), and say something confusing."""
    named = []
    given = getattr(args, "input", None)
    if args.command == "reduce" and given is None and args.policy is not None:
        given = "-"  # reduce's INPUT left out: standard input
    plan = "--plan" if args.command == "validate" else "PLAN"
    for flag, value in (("INPUT", given), (plan, getattr(args, "plan", None)),
                        ("--handlers", getattr(args, "handlers", None))):
        if value == "-":
            named.append(flag)
    policies = getattr(args, "policy", None)
    for value in policies if isinstance(policies, list) else [policies]:
        if value == "-":
            named.append("--policy" if args.command != "validate" else "POLICY")
    if len(named) > 1:
        raise CliError(f"standard input can be read once, but {' and '.join(named)} both name "
                       "it (-): give all but one of them as a file")


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    _hold_closed_standard_streams()
    args.signals = Signals()
    code: int
    try:
        with args.signals:
            if args.command != "reduce" and sys.stdout is None:
                raise CliError("standard output is closed: there is nowhere to write the result")
            _stdin_once(args)
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
