"""``contextpolicy examples DIR``: copy the example policies, plans and corpus shipped in the
package into a folder, so that every command of the documentation can be run on them."""

from __future__ import annotations

import argparse
import shutil
from pathlib import Path

from .common import CliError, example_path

__all__ = ["EXAMPLE_FILES", "cmd_examples"]

# Every file of the package's examples folder, with what it is; a test holds the two equal.
EXAMPLE_FILES: dict[str, str] = {
    "transcripts.jsonl": "30 support conversations, one JSON transcript a line",
    "policy-reduce.json": "the seed's reduce policy: trim the history by user turns",
    "policy-compress.json": "clear old tool results, shorten long texts, then trim the history",
    "handlers.json": "parameters of the built-in handlers, for reduce --handlers",
    "policy-agent.json":
        "an agent's policy: old tool results cleared, long texts cut, then a trim",
    "handlers-agent.json": "its handlers: clear-tool-results and truncate-messages, in batches",
    "policy-validate.json": "the validate policy",
    "policy-audit.json": "an audit policy: only the history may change",
    "plan.json": "one support conversation as a plan of five fragments",
    "audit-plan.json": "a plan an App edited, with its original fragments",
}


def cmd_examples(args: argparse.Namespace) -> int:
    target = Path(args.folder)
    if target.exists() and not target.is_dir():
        raise CliError(f"{args.folder}: not a folder; name a folder to copy the examples into")
    present = [name for name in EXAMPLE_FILES if (target / name).exists()]
    if present and not args.force:
        raise CliError(f"{args.folder}: {', '.join(present)} already there; "
                       "give another folder, or --force to write over them")
    try:
        target.mkdir(parents=True, exist_ok=True)
        for name in EXAMPLE_FILES:
            shutil.copyfile(example_path(name), target / name)
    except OSError as exc:
        where = exc.filename or args.folder
        raise CliError(f"{where}: cannot write ({exc.strerror or exc})") from None
    width = max(map(len, EXAMPLE_FILES))
    print(f"copied {len(EXAMPLE_FILES)} files into {args.folder}:")
    for name, what in EXAMPLE_FILES.items():
        print(f"  {name:<{width}}  {what}")
    return 0
