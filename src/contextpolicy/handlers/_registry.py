"""Handlers by id: the mapping ``process_context(..., handlers=...)`` takes, built from handler
objects (:func:`registry`), from the built-in defaults (:func:`defaults`) or from a handlers
document (:func:`from_config`, the ``--handlers HANDLERS.json`` of the command line)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ..errors import ContextPolicyError, Issue
from ._base import BuiltinHandler
from .clear import ClearToolResults, clear_tool_results
from .params import CLEAR_TOOL_RESULTS, FROM_FILES, TRUNCATE_MESSAGES, HandlerSpec, parse_handlers
from .truncate import TruncateMessages, truncate_messages

__all__ = ["defaults", "from_config", "from_spec", "registry", "with_defaults"]

_CLASSES: dict[str, type[BuiltinHandler]] = {
    CLEAR_TOOL_RESULTS: ClearToolResults,
    TRUNCATE_MESSAGES: TruncateMessages,
}


def registry(*handlers: BuiltinHandler) -> dict[str, BuiltinHandler]:
    """``{handler.handler_id: handler}`` for ``process_context(..., handlers=...)``; two
    handlers with one id are a :class:`ContextPolicyError`."""
    out: dict[str, BuiltinHandler] = {}
    issues = []
    for i, handler in enumerate(handlers):
        if not isinstance(handler, BuiltinHandler):
            issues.append(Issue(f"handlers[{i}]", f"expected a built-in handler, got "
                                f"{type(handler).__name__} (register your own by id: "
                                "handlers={'id': fn})", "invalid-handler"))
        elif handler.handler_id in out:
            issues.append(Issue(f"handlers[{i}]", f"two handlers have the id "
                                f"{handler.handler_id!r}: give one a handler_id of its own",
                                "duplicate-id"))
        else:
            out[handler.handler_id] = handler
    if issues:
        raise ContextPolicyError(issues)
    return out


def with_defaults(kind: str) -> BuiltinHandler:
    """The built-in handler ``kind`` with its defaults (``clear-tool-results`` or
    ``truncate-messages``: ``summarize`` needs a function)."""
    if kind == CLEAR_TOOL_RESULTS:
        return clear_tool_results()
    if kind == TRUNCATE_MESSAGES:
        return truncate_messages()
    raise ContextPolicyError(
        f"no built-in handler {kind!r} works with its defaults alone; expected one of "
        f"{', '.join(FROM_FILES)}", path="handler", code="unknown-handler",
    )


def defaults() -> dict[str, BuiltinHandler]:
    """Every built-in handler that needs no function, with its defaults, by its id:
    ``clear-tool-results`` and ``truncate-messages``."""
    return {kind: with_defaults(kind) for kind in FROM_FILES}


def from_spec(spec: HandlerSpec) -> BuiltinHandler:
    """The handler an entry of a handlers document describes."""
    return _CLASSES[spec.kind](spec.params, spec.handler_id)


def from_config(doc: Mapping[str, Any]) -> dict[str, BuiltinHandler]:
    """The handlers of a handlers document (``{"id": {parameters}, ...}``, see
    :mod:`contextpolicy.handlers.params`), by id; every problem at once as a
    :class:`ContextPolicyError` with its path (``clear-tool-results.keep``)."""
    return {spec.handler_id: from_spec(spec) for spec in parse_handlers(doc)}
