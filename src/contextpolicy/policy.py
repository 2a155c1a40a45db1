"""Policy models and ``validate_context_policy``.

A policy is a JSON document with the camelCase keys of the original TypeScript SDK, so one
policy file serves both. The models are pydantic v2, strict (``true``, ``1800.0`` and ``"1800"``
are not integers), closed (a typo such as ``triggerChar`` is an error), with snake_case
attributes in Python. Every problem in a policy is reported at once, each with a JSON path and a
stable code.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable, Mapping
from typing import Annotated, Any, Literal, Union

from pydantic import BaseModel, ConfigDict, Field, PrivateAttr, TypeAdapter, ValidationError
from pydantic.alias_generators import to_camel

from .errors import ContextPolicyError, Issue
from .plan import PROTECTED_KINDS, Fragment

__all__ = [
    "AuditPolicy",
    "CompressStep",
    "ContextPolicy",
    "Grouping",
    "ReducePolicy",
    "Selection",
    "Step",
    "TrimStep",
    "ValidatePolicy",
    "validate_context_policy",
]

PositiveInt = Annotated[int, Field(gt=0)]
NonNegativeInt = Annotated[int, Field(ge=0)]
Id = Annotated[str, Field(min_length=1)]


class _Model(BaseModel):
    model_config = ConfigDict(
        extra="forbid", frozen=True, strict=True, alias_generator=to_camel,
        populate_by_name=True,
    )

    # Set on a policy that passed every field and cross-field check: its JSON document, so that
    # processing the same typed policy again only repeats the reference checks.
    _checked_document: dict[str, Any] | None = PrivateAttr(default=None)

    def to_json_dict(self) -> dict[str, Any]:
        """The JSON document (camelCase keys, unset options left out)."""
        return self.model_dump(mode="json", by_alias=True, exclude_none=True)

    def __eq__(self, other: object) -> bool:
        # Equal when the fields are: the private "already checked" cache is no part of a policy.
        if not isinstance(other, BaseModel):
            return NotImplemented
        return type(self) is type(other) and self.__dict__ == other.__dict__

    __hash__ = BaseModel.__hash__


class Selection(_Model):
    """How steps are chosen. ``sequence``: in the listed order, checking the watermark first."""

    mode: Literal["sequence"] = "sequence"


class Grouping(_Model):
    """``user-turn``: a group per user turn (tool calls stay with their results).
    ``message``: a group per message, widened so a tool call never leaves its results."""

    kind: Literal["user-turn", "message"] = "user-turn"


class TrimStep(_Model):
    """Drop the oldest whole groups of a messages fragment down to ``target_chars``, keeping at
    least ``keep_groups`` groups."""

    id: Id
    kind: Literal["trim"] = "trim"
    fragment_id: Id
    target_chars: NonNegativeInt
    field: Literal["messages"] = "messages"
    grouping: Grouping = Grouping()
    keep_groups: NonNegativeInt


class CompressStep(_Model):
    """Hand a fragment (or the part older than its newest ``keep_groups`` groups) to a
    registered handler that returns smaller content of the same shape."""

    id: Id
    kind: Literal["compress"] = "compress"
    fragment_id: Id
    target_chars: NonNegativeInt
    handler_id: Id
    keep_groups: NonNegativeInt | None = None
    grouping: Grouping = Grouping()


Step = Annotated[Union[TrimStep, CompressStep], Field(discriminator="kind")]  # noqa: UP007


class ValidatePolicy(_Model):
    """Validate plan and policy, assemble the input, report usage. Changes nothing."""

    mode: Literal["validate"] = "validate"


class ReducePolicy(_Model):
    """Reduce reducible fragments, step by step, once usage is above a trigger."""

    mode: Literal["reduce"] = "reduce"
    trigger_chars: PositiveInt | None = None
    trigger_tokens: PositiveInt | None = None
    target_input_chars: PositiveInt | None = None
    target_input_tokens: PositiveInt | None = None
    selection: Selection = Selection()
    steps: Annotated[list[Step], Field(min_length=1)]

    @property
    def uses_tokens(self) -> bool:
        return self.trigger_tokens is not None or self.target_input_tokens is not None

    @property
    def watermark_chars(self) -> int | None:
        """The chars level reduction aims for: the target, or the trigger when no target."""
        if self.target_input_chars is not None:
            return self.target_input_chars
        return self.trigger_chars

    @property
    def watermark_tokens(self) -> int | None:
        if self.target_input_tokens is not None:
            return self.target_input_tokens
        return self.trigger_tokens


class AuditPolicy(_Model):
    """Check that the App's own changes stay inside ``mutable_fragment_ids``."""

    mode: Literal["audit"] = "audit"
    mutable_fragment_ids: list[Id]


ContextPolicy = Annotated[
    Union[ValidatePolicy, ReducePolicy, AuditPolicy],  # noqa: UP007
    Field(discriminator="mode"),
]
POLICY_ADAPTER: TypeAdapter[Any] = TypeAdapter(ContextPolicy)
_MODES: dict[str, type[_Model]] = {
    "validate": ValidatePolicy,
    "reduce": ReducePolicy,
    "audit": AuditPolicy,
}
_STEP_KINDS: dict[str, type[BaseModel]] = {"trim": TrimStep, "compress": CompressStep}

# ---------------------------------------------------------------------------------------------
# Issues

_CODES = {
    "missing": "missing",
    "extra_forbidden": "unknown-key",
    "int_type": "expected-integer",
    "int_parsing": "expected-integer",
    "greater_than": "must-be-positive",
    "greater_than_equal": "must-be-non-negative",
    "string_type": "expected-string",
    "string_too_short": "empty",
    "too_short": "empty",
    "list_type": "expected-list",
    "literal_error": "invalid-value",
    "union_tag_invalid": "unknown-step-kind",
    "union_tag_not_found": "missing",
    "model_type": "expected-object",
    "model_attributes_type": "expected-object",
    "dict_type": "expected-object",
}


def _format_path(loc: Iterable[Any]) -> str:
    out = ""
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            out += ("." if out else "") + str(part)
    return out


def _known_keys(model: type[BaseModel]) -> list[str]:
    return [f.alias or name for name, f in model.model_fields.items()]


def _model_at(cls: type[_Model], loc: list[Any], data: Any) -> type[BaseModel] | None:
    """The model class the location ``loc`` points into (for "did you mean" hints)."""
    model: type[BaseModel] | None = cls
    node = data
    for part in loc:
        if isinstance(part, int):
            node = node[part] if isinstance(node, list) and part < len(node) else None
            if model is None and isinstance(node, Mapping):
                model = _STEP_KINDS.get(str(node.get("kind")))
            continue
        node = node.get(part) if isinstance(node, Mapping) else None
        if model is ReducePolicy and part == "steps":
            model = None
        elif model is not None and part in ("selection", "grouping"):
            model = Selection if part == "selection" else Grouping
        else:
            model = None
    return model


def _issue_from_pydantic(error: Mapping[str, Any], cls: type[_Model], data: Any) -> Issue:
    loc = list(error["loc"])
    # Drop the discriminator tag pydantic puts after a step index: steps[0].trim.keepGroups.
    loc = [
        part for i, part in enumerate(loc)
        if not (i > 0 and isinstance(loc[i - 1], int) and part in _STEP_KINDS)
    ]
    etype = error["type"]
    code = _CODES.get(etype, "invalid")
    path = _format_path(loc)
    message = str(error["msg"])
    if etype == "extra_forbidden":
        key = str(loc[-1])
        message = f"unknown key {key!r}"
        model = _model_at(cls, loc[:-1], data)
        if model is not None:
            close = difflib.get_close_matches(key, _known_keys(model), n=1)
            message += f" (did you mean {close[0]!r}?)" if close else ""
            message += f"; expected one of: {', '.join(_known_keys(model))}"
    elif etype in ("int_type", "int_parsing"):
        got = error.get("input")
        message = f"expected an integer, got {type(got).__name__} {got!r}"
    elif etype == "greater_than":
        message = f"expected an integer > 0, got {error.get('input')!r}"
    elif etype == "greater_than_equal":
        message = f"expected an integer >= 0, got {error.get('input')!r}"
    elif etype == "literal_error":
        expected = error.get("ctx", {}).get("expected", "")
        message = f"expected {expected}, got {error.get('input')!r}"
    elif etype == "union_tag_invalid":
        path = f"{path}.kind"
        message = (
            f"unknown step kind {error.get('ctx', {}).get('tag')!r}; expected 'trim' or 'compress'"
        )
    elif etype == "union_tag_not_found":
        message = "missing step 'kind'; expected 'trim' or 'compress'"
        path = f"{path}.kind" if path else "kind"
    return Issue(path, message, code)


def _ints(data: Mapping[str, Any], *keys: str) -> list[int | None]:
    out: list[int | None] = []
    for key in keys:
        value = data.get(key)
        if value is None:
            value = data.get(_SNAKE.get(key, key))
        out.append(value if type(value) is int else None)
    return out


_SNAKE = {
    "triggerChars": "trigger_chars",
    "triggerTokens": "trigger_tokens",
    "targetInputChars": "target_input_chars",
    "targetInputTokens": "target_input_tokens",
    "fragmentId": "fragment_id",
    "handlerId": "handler_id",
    "mutableFragmentIds": "mutable_fragment_ids",
}


def _get(data: Mapping[str, Any], key: str) -> Any:
    return data[key] if key in data else data.get(_SNAKE.get(key, key))


def _present(data: Mapping[str, Any], key: str) -> bool:
    return _get(data, key) is not None


def _cross_field_issues(data: Mapping[str, Any], mode: str) -> list[Issue]:
    issues: list[Issue] = []
    if mode == "reduce":
        if not _present(data, "triggerChars") and not _present(data, "triggerTokens"):
            issues.append(Issue(
                "", "a reduce policy needs triggerChars or triggerTokens (or both)",
                "missing-trigger",
            ))
        for unit in ("Chars", "Tokens"):
            trigger_key, target_key = f"trigger{unit}", f"targetInput{unit}"
            other = "Tokens" if unit == "Chars" else "Chars"
            if _present(data, target_key) and not _present(data, trigger_key):
                issues.append(Issue(
                    target_key,
                    f"{target_key} needs {trigger_key} (a {unit.lower()} target never pairs "
                    f"with a {other.lower()} trigger)",
                    "target-without-trigger",
                ))
            trigger, target = _ints(data, trigger_key, target_key)
            if trigger is not None and target is not None and target > trigger:
                issues.append(Issue(
                    target_key, f"{target_key} ({target}) must be <= {trigger_key} ({trigger})",
                    "target-above-trigger",
                ))
        steps = data.get("steps")
        if isinstance(steps, list):
            seen: dict[str, int] = {}
            for i, step in enumerate(steps):
                sid = step.get("id") if isinstance(step, Mapping) else None
                if isinstance(sid, str) and sid:
                    if sid in seen:
                        issues.append(Issue(
                            f"steps[{i}].id",
                            f"duplicate step id {sid!r} (first at steps[{seen[sid]}])",
                            "duplicate-step-id",
                        ))
                    else:
                        seen[sid] = i
    elif mode == "audit":
        ids = _get(data, "mutableFragmentIds")
        if isinstance(ids, list):
            seen_ids: set[str] = set()
            for i, fid in enumerate(ids):
                if isinstance(fid, str) and fid in seen_ids:
                    issues.append(Issue(
                        f"mutableFragmentIds[{i}]", f"duplicate fragment id {fid!r}",
                        "duplicate-id",
                    ))
                if isinstance(fid, str):
                    seen_ids.add(fid)
    return issues


# ---------------------------------------------------------------------------------------------
# Reference checks against fragments and handlers


class FragmentRef:
    """What the policy checks need to know of a fragment: kind, protection, content shape."""

    __slots__ = ("has_messages", "id", "kind", "protected")

    def __init__(self, fid: str, kind: str | None, protected: bool, has_messages: bool | None):
        self.id = fid
        self.kind = kind
        self.protected = protected
        self.has_messages = has_messages


def _fragment_refs(fragments: Iterable[Any]) -> dict[str, FragmentRef]:
    refs: dict[str, FragmentRef] = {}
    for i, item in enumerate(fragments):
        if isinstance(item, str):
            refs[item] = FragmentRef(item, None, False, None)
        elif isinstance(item, Fragment):
            refs[item.id] = FragmentRef(
                item.id, item.kind, item.is_protected, item.messages is not None
            )
        elif isinstance(item, Mapping) and isinstance(item.get("id"), str):
            kind = item.get("kind")
            protected = kind in PROTECTED_KINDS or item.get("protected") is True
            has_messages = item.get("messages") is not None if (
                "messages" in item or "text" in item
            ) else None
            refs[item["id"]] = FragmentRef(
                item["id"], kind if isinstance(kind, str) else None, protected, has_messages
            )
        else:
            raise ContextPolicyError(
                f"fragments[{i}]: expected a Fragment, a fragment dict or an id, "
                f"got {type(item).__name__}",
                code="invalid-fragments-argument",
            )
    return refs


def _reference_issues(
    data: Mapping[str, Any],
    fragments: dict[str, FragmentRef] | None,
    handlers: set[str] | None,
) -> list[Issue]:
    """Reference checks on the policy document (read tolerantly, so that they are reported
    together with any field errors)."""
    issues: list[Issue] = []
    known = ", ".join(sorted(fragments)) if fragments else ""

    def check_fragment(path: str, fid: Any, needs_messages: bool) -> None:
        if fragments is None or not isinstance(fid, str) or not fid:
            return
        ref = fragments.get(fid)
        if ref is None:
            issues.append(Issue(
                path, f"no fragment {fid!r} in the plan (fragments: {known or 'none'})",
                "unknown-fragment",
            ))
        elif ref.protected:
            what = f"a protected {ref.kind!r} fragment" if ref.kind else "a protected fragment"
            issues.append(Issue(path, f"fragment {fid!r} is {what}; it is never changed",
                                "protected-fragment"))
        elif needs_messages and ref.has_messages is False:
            issues.append(Issue(path, f"fragment {fid!r} holds text; a trim needs messages",
                                "not-messages"))

    mode = data.get("mode")
    if mode == "reduce" and isinstance(data.get("steps"), list):
        for i, step in enumerate(data["steps"]):
            if not isinstance(step, Mapping):
                continue
            kind = step.get("kind")
            check_fragment(f"steps[{i}].fragmentId", _get(step, "fragmentId"), kind == "trim")
            handler_id = _get(step, "handlerId")
            if handlers is not None and kind == "compress" and isinstance(handler_id, str) and (
                handler_id not in handlers
            ):
                registered = ", ".join(sorted(handlers)) or "none"
                issues.append(Issue(
                    f"steps[{i}].handlerId",
                    f"no handler {handler_id!r} is registered (registered: {registered})",
                    "unknown-handler",
                ))
    elif mode == "audit" and isinstance(_get(data, "mutableFragmentIds"), list):
        for i, fid in enumerate(_get(data, "mutableFragmentIds")):
            check_fragment(f"mutableFragmentIds[{i}]", fid, False)
    return issues


# ---------------------------------------------------------------------------------------------


def _parse(
    policy: Any,
    fragments: dict[str, FragmentRef] | None = None,
    handlers: set[str] | None = None,
) -> ValidatePolicy | ReducePolicy | AuditPolicy:
    if isinstance(policy, (ValidatePolicy, ReducePolicy, AuditPolicy)):
        checked = policy._checked_document
        if checked is not None:
            problems = _reference_issues(checked, fragments, handlers)
            if problems:
                raise ContextPolicyError(problems)
            return policy
        data: Any = policy.model_dump(by_alias=True, exclude_none=True)
    elif isinstance(policy, Mapping):
        data = policy
    else:
        raise ContextPolicyError(
            f"expected a policy object (dict or model), got {type(policy).__name__}",
            code="expected-object",
        )
    mode = data.get("mode")
    if mode is None:
        raise ContextPolicyError(
            "missing 'mode'; expected 'validate', 'reduce' or 'audit'", path="mode", code="missing"
        )
    cls = _MODES.get(mode) if isinstance(mode, str) else None
    if cls is None:
        raise ContextPolicyError(
            f"unknown mode {mode!r}; expected 'validate', 'reduce' or 'audit'",
            path="mode", code="unknown-mode",
        )
    issues: list[Issue] = []
    model = None
    try:
        model = cls.model_validate(dict(data))
    except ValidationError as exc:
        issues += [_issue_from_pydantic(e, cls, data) for e in exc.errors()]
    issues += _cross_field_issues(data, mode)
    issues += _reference_issues(data, fragments, handlers)
    if issues:
        raise ContextPolicyError(_dedupe(issues))
    assert model is not None
    if isinstance(policy, (ValidatePolicy, ReducePolicy, AuditPolicy)):
        model = policy  # the caller's own typed policy, now known to be valid
    model._checked_document = model.model_dump(by_alias=True, exclude_none=True)
    return model  # type: ignore[return-value]


def _dedupe(issues: list[Issue]) -> list[Issue]:
    seen: set[tuple[str, str]] = set()
    out: list[Issue] = []
    for issue in issues:
        if (issue.path, issue.code) not in seen:
            seen.add((issue.path, issue.code))
            out.append(issue)
    return out


def validate_context_policy(
    policy: Any,
    fragments: Iterable[Fragment | Mapping[str, Any] | str] = (),
    handlers: Iterable[str] | Mapping[str, Any] = (),
) -> ValidatePolicy | ReducePolicy | AuditPolicy:
    """Check a policy and return it typed; the caller's policy is never changed.

    ``fragments`` (Fragment objects, fragment dicts or ids) and ``handlers`` (ids, or a mapping
    of id to handler): when given, every ``fragmentId``/``mutableFragmentIds`` entry must name
    one of them and not a protected one, and every ``handlerId`` must be registered. When empty
    those reference checks wait for ``process_context``, which always does them.

    Raises :class:`ContextPolicyError` with every problem at once.
    """
    if isinstance(handlers, str):
        raise ContextPolicyError(
            "handlers: expected ids or a mapping of id to handler, got a single string",
            code="invalid-handlers-argument",
        )
    refs = _fragment_refs(fragments)
    handler_ids = set(handlers.keys() if isinstance(handlers, Mapping) else handlers)
    return _parse(policy, refs or None, handler_ids or None)
