"""The plan of an agent's model input and the policy checked against it, for every adapter.

An adapter converts its framework's messages to plain dicts (chat dicts, or OpenAI Responses
input items as they are) and :func:`agent_plan` splits them into the same fragments, in order,
whatever the framework, so one policy file works in all of them:

- ``instructions`` (text, kind ``system``, protected): instructions the framework keeps apart
  from the messages (the OpenAI Agents SDK does); present when given.
- ``tools`` (text, kind ``system``, protected): the schemas of the tools the model is offered,
  as one compact JSON text (:func:`tools_text`); present when there are any. The model reads
  them with every call, so they count against the trigger like the system prompt.
- ``system`` (kind ``system``, protected): messages given apart (LangChain's system prompt),
  then the list's leading ``system``/``developer`` messages; present when there are any.
- ``history`` (kind ``history``, always present, maybe empty): everything between those and
  the question; the fragment a policy's steps usually reduce.
- ``question`` (kind ``question``, protected): the last message that opens a turn, as the kernel
  decides: a user message that carries no tool results (an Anthropic ``tool_result`` carrier or
  a ``function_call_output`` never is one); present when one does.
- ``turn`` (kind ``history``, always present, maybe empty): everything after the question, the
  agent's work on it so far: reasoning, tool calls and their results.

Tool results are not the user's question, and they are the biggest thing an agent carries, so
they are never protected; but ``turn`` is reduced only by a step that names it (a step names one
fragment; none names ``turn`` by default), so without one the turn in progress reaches the model
whole. A message list is measured once here (one kernel pass) to find the question.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from .. import _kernel
from .._build import built
from .._tables import FLAG_OPENS_TURN
from ..errors import ContextPlanError, ContextPolicyError, Issue
from ..plan import ContextPlan, Fragment
from ..policy import AuditPolicy, validate_context_policy
from ..policy.validation import dedupe
from ..prepared import PreparedPolicy, carried_options, prepare_policy

__all__ = ["FRAGMENT_IDS", "REDUCIBLE_IDS", "agent_plan", "prepare_agent_policy", "tools_text",
           "under"]

FRAGMENT_IDS = ("instructions", "tools", "system", "history", "question", "turn")
# The fragments a step may name: the others are protected.
REDUCIBLE_IDS = ("history", "turn")

# Every fragment an agent's plan may hold, as the reference rules see them (the content is
# irrelevant): a policy checked against these once names only fragments an adapter makes.
_SHAPES = (
    Fragment(id="instructions", kind="system", text=""),
    Fragment(id="tools", kind="system", text=""),
    Fragment(id="system", kind="system", messages=[]),
    Fragment(id="history", kind="history", messages=[]),
    Fragment(id="question", kind="question", messages=[]),
    Fragment(id="turn", kind="history", messages=[]),
)


def agent_plan(
    messages: list[Any],
    *,
    lead: Sequence[dict[str, Any]] = (),
    instructions: str | None = None,
    question: bool = True,
    path: str = "messages",
    tools: str | None = None,
) -> ContextPlan:
    """The plan of ``messages`` (see the module docstring): ``lead`` are the dicts given apart
    that open the ``system`` fragment, ``instructions`` the text of ``instructions``, ``tools``
    the text of ``tools`` (:func:`tools_text`).

    With ``question=False`` no message is the question (a stored history, whose question
    arrives with the next run): ``history`` holds everything after the leading system
    messages and ``turn`` is empty. The fragments hold slices of ``messages``, whose dicts
    are never copied. A message the kernel cannot read is a :class:`ContextPlanError` whose
    path starts with ``path`` (``input[3].content``).
    """
    for name, text in (("instructions", instructions), ("tools", tools)):
        if text is not None and not isinstance(text, str):
            raise ContextPlanError(f"expected a string, got {type(text).__name__}", path=name,
                                   code="expected-string")
    n = len(messages)
    try:
        flags = _kernel.measure_messages(messages)[2]
        head = _kernel.split_transcript(messages)[0]
    except ContextPlanError as exc:
        raise under(exc, path) from None
    at = n
    if question:
        openers = np.flatnonzero(flags[head:] & FLAG_OPENS_TURN)
        if len(openers):
            at = head + int(openers[-1])
    # The fragments of measured messages are built without validating them again (the kernel
    # read every message; ids and kinds are fixed); instructions and lead messages are checked.
    fragments: list[Fragment] = []
    if instructions is not None:
        fragments.append(Fragment(id="instructions", kind="system", text=instructions))
    if tools is not None:
        fragments.append(Fragment(id="tools", kind="system", text=tools))
    if lead:
        fragments.append(Fragment(id="system", kind="system", messages=[*lead, *messages[:head]]))
    elif head:
        fragments.append(_fragment("system", "system", messages[:head]))
    fragments.append(_fragment("history", "history", messages[head:at]))
    if at < n:
        fragments.append(_fragment("question", "question", messages[at:at + 1]))
    fragments.append(_fragment("turn", "history", messages[at + 1:]))
    return built(ContextPlan, {"fragments": fragments}, _PLAN_KEYS)


_KEYS = frozenset({"id", "kind", "messages"})
_PLAN_KEYS = frozenset({"fragments"})


def _fragment(fid: str, kind: str, messages: list[Any]) -> Fragment:
    return built(Fragment, {"id": fid, "kind": kind, "messages": messages}, _KEYS)


def tools_text(schemas: Sequence[Any] | None) -> str | None:
    """The ``tools`` fragment's text: the tool schemas (JSON-like dicts, as the framework sends
    them to the provider) as one compact JSON array, in their order; ``None`` for none. A value
    JSON cannot hold is written as its ``str``."""
    if schemas is None:
        return None
    if not isinstance(schemas, (list, tuple)):
        raise TypeError(f"tools: expected a list of tool schemas, got {type(schemas).__name__}")
    if not schemas:
        return None
    return json.dumps(list(schemas), ensure_ascii=False, separators=(",", ":"), default=str)


def under(exc: ContextPlanError, path: str) -> ContextPlanError:
    """``exc`` (whose paths start ``messages[...]``) with its paths under ``path``."""
    issues = [Issue(path + issue.path[len("messages"):], issue.message, issue.code)
              if issue.path.startswith("messages") else issue for issue in exc.issues]
    out = ContextPlanError(issues)
    out.index = exc.index
    return out


def prepare_agent_policy(
    policy: Any, handlers: Mapping[str, Callable[..., Any]] | None = None, counter: Any = None
) -> PreparedPolicy:
    """``policy`` (a document, a typed policy or a :class:`PreparedPolicy`), its handlers and
    its counter checked once for the plans :func:`agent_plan` makes.

    Raises :class:`ContextPolicyError` with every problem at once: the policy's own (as
    :func:`prepare_policy` finds them), a step naming a fragment other than ``history`` or
    ``turn`` (``unknown-fragment``, ``protected-fragment``), an audit (``unsupported-mode``: a
    model call's input has no original plan to compare with), and handlers or a counter passed
    beside a prepared policy, which carries its own (``invalid-option``). A prepared policy that
    passes is returned as it is.
    """
    issues: list[Issue] = []
    prepared: PreparedPolicy | None = None
    if isinstance(policy, PreparedPolicy):
        carried = carried_options(handlers, counter)
        if carried is not None:
            issues.append(carried)
        prepared = policy
    else:
        try:
            prepared = prepare_policy(policy, handlers=handlers, counter=counter)
        except ContextPolicyError as exc:
            issues += exc.issues
    typed = prepared.policy if prepared is not None else policy
    try:  # handler references were checked above, with the handlers themselves
        validate_context_policy(typed, fragments=_SHAPES)
    except ContextPolicyError as exc:
        issues += exc.issues
    if isinstance(typed, AuditPolicy) or (isinstance(typed, Mapping)
                                          and typed.get("mode") == "audit"):
        issues.append(Issue(
            "mode", "an audit compares a plan with its original, which a model call's input "
            "does not have; expected 'validate' or 'reduce'", "unsupported-mode",
        ))
    if issues:
        raise ContextPolicyError(dedupe(issues))
    assert prepared is not None
    return prepared
