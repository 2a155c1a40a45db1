"""``validate_context_policy``: a policy document (or model) in, a typed policy out, every
problem reported at once.

Field errors come from the models (pydantic), translated to issues with JSON paths and stable
codes; the cross-field and reference rules come from :mod:`.rules`, run on the document read
tolerantly so that they are reported together with the field errors. A typed policy is valid by
construction, so for one only the reference rules run.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable, Mapping
from typing import Any

from pydantic import BaseModel, ValidationError

from ..errors import ContextPolicyError, Issue
from ..plan import Fragment
from .models import (
    MAX_INT,
    MODES,
    RULE_ERROR,
    STEP_KINDS,
    AuditPolicy,
    Grouping,
    ReducePolicy,
    Selection,
    TrimStep,
    ValidatePolicy,
)
from .rules import (
    FragmentRef,
    Reference,
    duplicate_ids,
    fragment_refs,
    reference_issues,
    watermark_issues,
)

__all__ = [
    "TypedPolicy",
    "dedupe",
    "parse_policy",
    "policy_issues",
    "references",
    "uses_tokens",
    "validate_context_policy",
]

TypedPolicy = ValidatePolicy | ReducePolicy | AuditPolicy

_CODES = {
    "missing": "missing",
    "extra_forbidden": "unknown-key",
    "int_type": "expected-integer",
    "int_parsing": "expected-integer",
    "greater_than": "must-be-positive",
    "greater_than_equal": "must-be-non-negative",
    "less_than_equal": "too-large",
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


def _model_at(cls: type[BaseModel], loc: list[Any], data: Any) -> type[BaseModel] | None:
    """The model class the location ``loc`` points into (for "did you mean" hints)."""
    model: type[BaseModel] | None = cls
    node = data
    for part in loc:
        if isinstance(part, int):
            node = node[part] if isinstance(node, list) and part < len(node) else None
            if model is None and isinstance(node, Mapping):
                model = STEP_KINDS.get(str(node.get("kind")))
            continue
        node = node.get(part) if isinstance(node, Mapping) else None
        if model is ReducePolicy and part == "steps":
            model = None
        elif model is not None and part in ("selection", "grouping"):
            model = Selection if part == "selection" else Grouping
        else:
            model = None
    return model


def issue_from_pydantic(error: Mapping[str, Any], cls: type[BaseModel], data: Any) -> Issue:
    loc = list(error["loc"])
    # Drop the discriminator tag pydantic puts after a step index: steps[0].trim.keepGroups.
    loc = [
        part for i, part in enumerate(loc)
        if not (i > 0 and isinstance(loc[i - 1], int) and part in STEP_KINDS)
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
    elif etype == "less_than_equal":
        message = f"expected an integer <= {MAX_INT} (64 bits), got {error.get('input')!r}"
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


def _rule_issues(data: Mapping[str, Any], mode: str) -> list[Issue]:
    """The rules of :mod:`.rules` on the document, read tolerantly: values of the wrong type are
    the field checks' to report."""
    if mode == "reduce":
        issues = watermark_issues(
            _get(data, "triggerChars"), _get(data, "triggerTokens"),
            _get(data, "targetInputChars"), _get(data, "targetInputTokens"),
        )
        steps = data.get("steps")
        if isinstance(steps, list):
            ids = [step.get("id") if isinstance(step, Mapping) else None for step in steps]
            issues += duplicate_ids(ids, "steps", "step", "duplicate-step-id", key=".id")
        return issues
    if mode == "audit":
        ids = _get(data, "mutableFragmentIds")
        if isinstance(ids, list):
            return duplicate_ids(ids, "mutableFragmentIds", "fragment", "duplicate-id")
    return []


def references(policy: Mapping[str, Any] | TypedPolicy) -> list[Reference]:
    """Every place in a policy (a typed one, or a document read tolerantly) that names a
    fragment or a handler."""
    refs: list[Reference] = []
    if isinstance(policy, ReducePolicy):
        for i, step in enumerate(policy.steps):
            if isinstance(step, TrimStep):
                refs.append(Reference(f"steps[{i}].fragmentId", "trim", step.fragment_id))
                continue
            refs.append(Reference(f"steps[{i}].fragmentId", "fragment", step.fragment_id))
            refs.append(Reference(f"steps[{i}].handlerId", "handler", step.handler_id))
            if step.keep_groups is not None:
                refs.append(Reference(f"steps[{i}].keepGroups", "keep-groups", step.fragment_id))
        return refs
    if isinstance(policy, AuditPolicy):
        return [
            Reference(f"mutableFragmentIds[{i}]", "mutable", fid)
            for i, fid in enumerate(policy.mutable_fragment_ids)
        ]
    if not isinstance(policy, Mapping):
        return refs
    mode = policy.get("mode")
    if mode == "reduce" and isinstance(policy.get("steps"), list):
        for i, step in enumerate(policy["steps"]):
            if not isinstance(step, Mapping):
                continue
            kind = step.get("kind")
            fid = _get(step, "fragmentId")
            if isinstance(fid, str) and fid:
                what = "trim" if kind == "trim" else "fragment"
                refs.append(Reference(f"steps[{i}].fragmentId", what, fid))
                if kind == "compress" and type(_get(step, "keepGroups")) is int:
                    refs.append(Reference(f"steps[{i}].keepGroups", "keep-groups", fid))
            handler_id = _get(step, "handlerId")
            if kind == "compress" and isinstance(handler_id, str) and handler_id:
                refs.append(Reference(f"steps[{i}].handlerId", "handler", handler_id))
    elif mode == "audit" and isinstance(_get(policy, "mutableFragmentIds"), list):
        for i, fid in enumerate(_get(policy, "mutableFragmentIds")):
            if isinstance(fid, str) and fid:
                refs.append(Reference(f"mutableFragmentIds[{i}]", "mutable", fid))
    return refs


def policy_issues(
    policy: Any,
    fragments: Mapping[str, FragmentRef] | None = None,
    handlers: Iterable[str] | None = None,
) -> tuple[TypedPolicy | None, list[Issue]]:
    """The typed policy (``None`` when its fields or rules fail) and every problem found:
    field errors, rule violations and, where ``fragments`` / ``handlers`` are known,
    references. Raises only when the policy is no policy at all (not an object, no mode)."""
    if isinstance(policy, (ValidatePolicy, ReducePolicy, AuditPolicy)):
        return policy, reference_issues(references(policy), fragments, handlers)
    if not isinstance(policy, Mapping):
        raise ContextPolicyError(
            f"expected a policy object (dict or model), got {type(policy).__name__}",
            code="expected-object",
        )
    mode = policy.get("mode")
    if mode is None:
        raise ContextPolicyError(
            "missing 'mode'; expected 'validate', 'reduce' or 'audit'", path="mode", code="missing"
        )
    cls = MODES.get(mode) if isinstance(mode, str) else None
    if cls is None:
        raise ContextPolicyError(
            f"unknown mode {mode!r}; expected 'validate', 'reduce' or 'audit'",
            path="mode", code="unknown-mode",
        )
    issues: list[Issue] = []
    model = None
    try:
        model = cls.model_validate(dict(policy))
    except ValidationError as exc:
        issues += [
            issue_from_pydantic(e, cls, policy) for e in exc.errors() if e["type"] != RULE_ERROR
        ]
    issues += _rule_issues(policy, mode)
    issues += reference_issues(references(policy), fragments, handlers)
    return model, issues  # type: ignore[return-value]


def parse_policy(
    policy: Any,
    fragments: Mapping[str, FragmentRef] | None = None,
    handlers: Iterable[str] | None = None,
) -> TypedPolicy:
    """The typed policy, or :class:`ContextPolicyError` with every problem (see
    :func:`policy_issues`)."""
    model, issues = policy_issues(policy, fragments, handlers)
    if issues:
        raise ContextPolicyError(dedupe(issues))
    assert model is not None
    return model


def uses_tokens(policy: Mapping[str, Any] | TypedPolicy) -> str | None:
    """The key of the first token watermark a policy (typed, or a document) sets, or None."""
    if isinstance(policy, ReducePolicy):
        if policy.trigger_tokens is not None:
            return "triggerTokens"
        return "targetInputTokens" if policy.target_input_tokens is not None else None
    if isinstance(policy, Mapping) and policy.get("mode") == "reduce":
        for key in ("triggerTokens", "targetInputTokens"):
            if _get(policy, key) is not None:
                return key
    return None


def dedupe(issues: list[Issue]) -> list[Issue]:
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
) -> TypedPolicy:
    """Check a policy and return it typed; the caller's policy is never changed.

    ``fragments`` (Fragment objects, fragment dicts or ids) and ``handlers`` (ids, or a mapping
    of id to handler): when given, every ``fragmentId``/``mutableFragmentIds`` entry must name
    one of them and not a protected one, and every ``handlerId`` must be registered. When empty
    those reference checks wait for ``process_context``, which always does them.

    Raises :class:`ContextPolicyError` with every problem at once.
    """
    if isinstance(handlers, str) or not isinstance(handlers, Iterable):
        what = "a single string" if isinstance(handlers, str) else type(handlers).__name__
        raise ContextPolicyError(
            f"expected ids or a mapping of id to handler, got {what}",
            path="handlers", code="invalid-handlers-argument",
        )
    if isinstance(fragments, (str, Mapping)) or not isinstance(fragments, Iterable):
        what = "a single " + ("string" if isinstance(fragments, str) else "fragment dict") if (
            isinstance(fragments, (str, Mapping))
        ) else type(fragments).__name__
        raise ContextPolicyError(
            f"expected Fragment objects, fragment dicts or ids, got {what}",
            path="fragments", code="invalid-fragments-argument",
        )
    if not isinstance(handlers, Mapping):
        handlers = list(handlers)
        bad = [h for h in handlers if not isinstance(h, str)]
        if bad:
            raise ContextPolicyError(
                f"expected handler ids (strings), got {type(bad[0]).__name__} {bad[0]!r}",
                path="handlers", code="invalid-handlers-argument",
            )
    refs = fragment_refs(fragments)
    handler_ids = set(handlers.keys() if isinstance(handlers, Mapping) else handlers)
    return parse_policy(policy, refs or None, handler_ids or None)
