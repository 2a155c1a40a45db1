"""``contextpolicy validate``: a policy checked, with its references to a plan and handlers."""

from __future__ import annotations

import argparse
from typing import Any

from .common import CliError
from .documents import document_name, load_json
from .policies import named_handlers

__all__ = ["cmd_validate"]

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
    builtin = sorted({name for _, name in named_handlers(doc) if name in BUILTIN_IDS
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
