"""Run the three policies on the example corpus shipped in the package and print the reports.

    python -m contextpolicy.cli.demo            # summary tables
    python -m contextpolicy.cli.demo --json     # the reduce report as JSON
"""

from __future__ import annotations

import argparse
import json
import sys
from importlib import resources
from typing import Any

from .. import ContextAuditError, ContextPlan, kernel_info, process_context
from ..report import ContextReport

__all__ = ["example", "main"]


def example(name: str) -> Any:
    """A JSON document of the shipped example corpus (``plan.json``, ``policy-reduce.json``...)."""
    path = resources.files("contextpolicy").joinpath("examples").joinpath(name)
    return json.loads(path.read_text("utf-8"))


def _usage_line(label: str, usage: Any) -> str:
    tokens = "n/a (no counter)" if usage.tokens is None else str(usage.tokens)
    return (f"  {label:<7} {usage.chars:>7} chars  {usage.messages:>4} messages  "
            f"{usage.fragments} fragments  {usage.opaque_parts} opaque parts  tokens {tokens}")


def _print_report(title: str, report: ContextReport) -> None:
    print(f"\n== {title} (mode {report.mode}, kernel {report.kernel})")
    print(_usage_line("before", report.before))
    print(_usage_line("after", report.after))
    if report.mode == "reduce" and report.trigger and report.target:
        print(f"  triggered {report.triggered} (above {report.trigger.chars} chars), "
              f"target {report.target.chars} chars reached: {report.target_reached}")
    for step in report.steps:
        print(f"  step {step.id!r} {step.kind} on {step.fragment_id!r}: {step.status} "
              f"({step.reason}); chars {step.chars_before} -> {step.chars_after} "
              f"(target {step.target_chars}); groups {step.groups_before} -> {step.groups_after}; "
              f"{step.messages_removed} messages removed")
    for w in report.warnings:
        print(f"  warning {w.code}: {w.fragment_id}[{w.index}] {w.message}")
    if report.audit is not None:
        for c in report.audit.changes:
            verdict = "allowed" if c.allowed else "NOT ALLOWED"
            fields = f" {c.fields}" if c.fields else ""
            print(f"  audit {c.fragment_id!r}: {c.change}{fields} -> {verdict} ({c.reason})")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m contextpolicy.cli.demo", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--json", action="store_true", help="print the reduce report as JSON")
    args = parser.parse_args(argv)
    plan = ContextPlan.model_validate(example("plan.json"))
    reduce_policy = example("policy-reduce.json")
    reduced = process_context(plan, reduce_policy)
    if args.json:
        json.dump(reduced.report.model_dump(by_alias=True, mode="json"), sys.stdout, indent=2)
        print()
        return 0
    info = kernel_info()
    print("contextpolicy demo: the example corpus shipped in the package "
          f"(a support conversation; kernel: {info['implementation']})")
    validated = process_context(plan, example("policy-validate.json"))
    _print_report("validate", validated.report)
    _print_report("reduce with the seed policy", reduced.report)
    print(f"  model input: {len(reduced.input)} messages, roles "
          f"{[m['role'] for m in reduced.input]}")
    try:
        process_context(ContextPlan.model_validate(example("audit-plan.json")),
                        example("policy-audit.json"))
    except ContextAuditError as exc:
        _print_report("audit of the App's edits", exc.report)
        print("  -> ContextAuditError: the evidence was edited outside the mutable range")
    return 0


if __name__ == "__main__":
    try:
        raise SystemExit(main())
    except BrokenPipeError:  # piped into `head`: stop quietly
        sys.stderr.close()
        raise SystemExit(0) from None
