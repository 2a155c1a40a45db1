"""The built-in handlers' ids and parameters, and the ``HANDLERS.json`` document that sets them.

Parameters are checked the way a policy is: strict (``3.0`` and ``"3"`` are not integers),
closed (a typo such as ``keeep`` is an error naming the keys there are), camelCase keys in JSON
and snake_case keyword arguments in Python, every problem reported at once as a
:class:`~contextpolicy.ContextPolicyError` with a path. This module imports neither numpy nor
the kernel, so ``contextpolicy validate`` can check a handlers file cheaply.

A handlers document maps the ids a policy's ``handlerId`` names to parameters::

    {
      "clear-tool-results": {"keep": 2, "excludeTools": ["memory"]},
      "short-outputs": {"handler": "truncate-messages", "maxChars": 1500}
    }

An id that is a built-in id is that handler; any other id names its built-in handler in
``"handler"``. ``summarize`` needs a summariser function, which a JSON file cannot hold: it is
registered from Python.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field, Strict, ValidationError, model_validator
from pydantic.alias_generators import to_camel
from typing_extensions import Self

from ..errors import ContextPolicyError, Issue

__all__ = [
    "BUILTIN_IDS",
    "CLEAR_TOOL_RESULTS",
    "DEFAULT_MARKER",
    "DEFAULT_PLACEHOLDER",
    "DEFAULT_PREFIX",
    "DEFAULT_PROMPT",
    "FROM_FILES",
    "SUMMARIZE",
    "TRUNCATE_MESSAGES",
    "ClearToolResultsParams",
    "HandlerSpec",
    "SummarizeParams",
    "TruncateMessagesParams",
    "parse_handlers",
]

CLEAR_TOOL_RESULTS = "clear-tool-results"
TRUNCATE_MESSAGES = "truncate-messages"
SUMMARIZE = "summarize"
BUILTIN_IDS: tuple[str, ...] = (CLEAR_TOOL_RESULTS, TRUNCATE_MESSAGES, SUMMARIZE)
# The built-in handlers a file or the command line can make (summarize needs a function).
FROM_FILES: tuple[str, ...] = (CLEAR_TOOL_RESULTS, TRUNCATE_MESSAGES)

DEFAULT_PLACEHOLDER = "[tool result cleared: {chars} chars]"
DEFAULT_MARKER = "[... {chars} chars cut ...]"
DEFAULT_PREFIX = "Summary of the earlier conversation:\n"
DEFAULT_PROMPT = (
    "Summarise the conversation below in at most {target_chars} characters. Keep what the rest "
    "of the conversation needs: facts, names, numbers, decisions, the tool results that "
    "matter, and the questions still open. Write plain text.\n\n{transcript}"
)

MAX_INT = 2**63 - 1
_Int = Annotated[int, Strict(), Field(ge=0, le=MAX_INT)]
_PositiveInt = Annotated[int, Strict(), Field(gt=0, le=MAX_INT)]
_Str = Annotated[str, Strict()]
_Bool = Annotated[bool, Strict()]


class _Params(BaseModel):
    model_config = ConfigDict(
        extra="forbid", frozen=True, alias_generator=to_camel, populate_by_name=True,
    )


class ClearToolResultsParams(_Params):
    """``clear_tool_results``: the newest ``keep`` tool results stay; older ones of at least
    ``min_chars`` chars, of tools not in ``exclude_tools``, get ``placeholder`` (``{chars}``:
    the chars cleared) in place of their content, and with ``clear_inputs`` their calls'
    arguments are emptied too (only arguments that are a JSON object). With ``clear_at_least``,
    nothing is cleared unless that much would go at once (chars, or tokens with a counter)."""

    keep: _Int = 3
    placeholder: _Str = DEFAULT_PLACEHOLDER
    exclude_tools: tuple[_Str, ...] = ()
    clear_inputs: _Bool = False
    min_chars: _Int = 100
    clear_at_least: _Int = 0


class TruncateMessagesParams(_Params):
    """``truncate_messages``: each text longer than ``max_chars`` keeps its first ``head`` and
    last ``tail`` code points around ``marker`` (``{chars}``: the chars cut). ``head`` defaults
    to half of ``max_chars``, ``tail`` to a quarter. With ``min_gain``, nothing is cut unless
    that much would go at once (chars, or tokens with a counter)."""

    max_chars: _PositiveInt = 2000
    head: _Int | None = None
    tail: _Int | None = None
    marker: _Str = DEFAULT_MARKER
    min_gain: _Int = 0

    @model_validator(mode="after")
    def _fits(self) -> Self:
        if self.head_chars + self.tail_chars > self.max_chars:
            raise ValueError(
                f"head + tail ({self.head_chars} + {self.tail_chars}) must not exceed maxChars "
                f"({self.max_chars})"
            )
        return self

    @property
    def head_chars(self) -> int:
        return self.max_chars // 2 if self.head is None else self.head

    @property
    def tail_chars(self) -> int:
        return self.max_chars // 4 if self.tail is None else self.tail


class SummarizeParams(_Params):
    """``summarize``: the role of the summary message, the ``prefix`` before the summary, the
    ``prompt`` a chat model is sent (``{target_chars}`` and ``{transcript}`` filled in), the
    least ``target_chars`` ever asked for, and whether the message is marked as a summary in
    its ``metadata``."""

    role: Annotated[str, Strict(), Field(min_length=1)] = "user"
    prefix: _Str = DEFAULT_PREFIX
    prompt: _Str = DEFAULT_PROMPT
    min_target_chars: _Int = 200
    mark: _Bool = True


PARAMS: dict[str, type[_Params]] = {
    CLEAR_TOOL_RESULTS: ClearToolResultsParams,
    TRUNCATE_MESSAGES: TruncateMessagesParams,
    SUMMARIZE: SummarizeParams,
}


def issues_of(exc: ValidationError, cls: type[BaseModel], data: Any, prefix: str) -> list[Issue]:
    """A pydantic error of a parameters model as issues with paths (``prefix.key``)."""
    from ..policy.validation import issue_from_pydantic

    out = []
    for error in exc.errors():
        issue = issue_from_pydantic(error, cls, data)
        path = f"{prefix}.{issue.path}" if prefix and issue.path else prefix or issue.path
        code = issue.code
        message = issue.message
        if error["type"] == "value_error":  # a rule of the model (head + tail)
            message = message.removeprefix("Value error, ")
            code = "invalid-value"
        elif error["type"] == "bool_type":
            message, code = f"expected true or false, got {error.get('input')!r}", "expected-bool"
        elif error["type"] == "tuple_type":
            message, code = f"expected a list, got {type(error.get('input')).__name__}", (
                "expected-list")
        out.append(Issue(path, message, code))
    return out


def checked(kind: str, values: Mapping[str, Any], prefix: str = "") -> _Params:
    """The parameters of handler ``kind`` from keyword arguments or a JSON object, or a
    :class:`ContextPolicyError` with every problem."""
    cls = PARAMS[kind]
    try:
        return cls.model_validate(values)
    except ValidationError as exc:
        raise ContextPolicyError(issues_of(exc, cls, values, prefix)) from None


class HandlerSpec(BaseModel):
    """One entry of a handlers document: the id it registers, the built-in handler it makes and
    its parameters."""

    model_config = ConfigDict(frozen=True)

    handler_id: str
    kind: str
    params: Any


def parse_handlers(doc: Any) -> list[HandlerSpec]:
    """The entries of a handlers document (see the module's docstring), every problem at once
    as a :class:`ContextPolicyError`."""
    if not isinstance(doc, Mapping):
        raise ContextPolicyError(
            f"expected an object of handler ids, got {type(doc).__name__}", path="",
            code="expected-object",
        )
    issues: list[Issue] = []
    specs: list[HandlerSpec] = []
    for handler_id, entry in doc.items():
        where = str(handler_id)
        if not isinstance(handler_id, str) or not handler_id:
            issues.append(Issue(where, "expected a non-empty handler id", "empty"))
            continue
        if not isinstance(entry, Mapping):
            issues.append(Issue(where, f"expected an object of parameters, got "
                                f"{type(entry).__name__}", "expected-object"))
            continue
        values = dict(entry)
        kind = values.pop("handler", handler_id if handler_id in BUILTIN_IDS else None)
        if kind is None:
            issues.append(Issue(
                f"{where}.handler", f"{handler_id!r} is not a built-in handler id: name the "
                f"built-in handler it is with \"handler\" (one of {', '.join(FROM_FILES)})",
                "missing",
            ))
            continue
        if kind == SUMMARIZE:
            issues.append(Issue(
                f"{where}.handler" if "handler" in entry else where,
                "summarize needs a summariser function, which a file cannot hold: register "
                "contextpolicy.handlers.summarize(fn) from Python", "needs-function",
            ))
            continue
        if kind not in FROM_FILES:
            issues.append(Issue(
                f"{where}.handler", f"unknown built-in handler {kind!r}; expected one of "
                f"{', '.join(FROM_FILES)}", "unknown-handler",
            ))
            continue
        try:
            specs.append(HandlerSpec(handler_id=handler_id, kind=kind,
                                     params=checked(kind, values, where)))
        except ContextPolicyError as exc:
            issues += exc.issues
    if issues:
        raise ContextPolicyError(issues)
    return specs
