"""The policy and handlers a command is given: read, checked, and every problem listed."""

from __future__ import annotations

import argparse
from typing import Any

from .common import CliError
from .documents import document_name, load_json

__all__ = [
    "command_handlers", "handler_specs", "load_line_policy", "load_policy", "named_handlers",
]

def _invalid(path: str, exc: Any) -> CliError:
    lines = [f"{document_name(path)}: invalid policy ({len(exc.issues)} problem(s)):"]
    lines += [f"  {issue}" for issue in exc.issues]
    return CliError("\n".join(lines), code=1)


def load_policy(path: str) -> Any:
    """The policy document of ``path``, validated (a :class:`CliError` listing every problem
    when it is not valid)."""
    from ..errors import ContextPolicyError
    from ..policy import validate_context_policy

    doc = load_json(path, "policy")
    try:
        validate_context_policy(doc)
    except ContextPolicyError as exc:
        raise _invalid(path, exc) from None
    return doc


def load_line_policy(path: str) -> tuple[Any, Any]:
    """The policy document of ``path`` and what the line runner needs of it
    (:class:`~contextpolicy.jsonl.line_policy.LinePolicy`): from the cache of validated
    policies when this policy was validated before, by validating it otherwise (the same
    :class:`CliError` as :func:`load_policy` when it is not valid)."""
    from ..errors import ContextPolicyError
    from ..jsonl.line_policy import line_policy

    doc = load_json(path, "policy")
    try:
        facts, _ = line_policy(doc)
    except ContextPolicyError as exc:
        raise _invalid(path, exc) from None
    return doc, facts


def handler_specs(path: str) -> list[Any]:
    """The entries of a ``--handlers`` file, or a :class:`CliError` listing every problem."""
    from ..errors import ContextPolicyError
    from ..handlers.params import parse_handlers

    try:
        return parse_handlers(load_json(path, "handlers file"))
    except ContextPolicyError as exc:
        lines = [f"{document_name(path)}: invalid handlers ({len(exc.issues)} problem(s)):"]
        lines += [f"  {issue}" for issue in exc.issues]
        raise CliError("\n".join(lines), code=1) from None


def named_handlers(policy: Any) -> list[tuple[str, str]]:
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


def command_handlers(args: argparse.Namespace, policy: Any,
                     named: tuple[tuple[str, str], ...] | None = None) -> dict[str, Any] | None:
    """The handlers of ``reduce``: built-in ones by ``--handler ID`` (with their defaults) and
    from ``--handlers FILE``; ``None`` when neither is given. A built-in id the policy names
    (``named``, (path, id) pairs, when the caller has them) without registering it is an error
    here, before any work."""
    if named is None:
        named = tuple(named_handlers(policy))
    if not args.handler and args.handlers is None and not named:
        return None
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

        for spec in handler_specs(args.handlers):
            if spec.handler_id in handlers:
                raise CliError(f"{document_name(args.handlers)}: handler {spec.handler_id!r} "
                               f"is also given by "
                               f"--handler {spec.handler_id}: give it once")
            handlers[spec.handler_id] = from_spec(spec)
    for path, name in named:
        if name in BUILTIN_IDS and name not in handlers:
            how = ("register summarize(fn) from Python: the command line cannot give a "
                   "summariser function" if name == SUMMARIZE else
                   f"add --handler {name} (its defaults) or give its parameters in "
                   "--handlers FILE")
            raise CliError(f"--policy: {path}: the built-in handler {name!r} is not "
                           f"registered: {how}")
    return handlers or None
