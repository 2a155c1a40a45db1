"""``contextpolicy audit``: a plan compared with its original under an audit policy."""

from __future__ import annotations

import argparse
import sys

from .common import CliError
from .documents import document_name, load_json
from .policies import load_policy

__all__ = ["cmd_audit"]

def cmd_audit(args: argparse.Namespace) -> int:
    import orjson
    from rich.console import Console
    from rich.table import Table

    from ..core import process_context
    from ..errors import ContextAuditError, ContextPlanError, ContextPolicyError
    from ..plan import as_plan

    policy = load_policy(args.policy)
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
