"""Every rule a policy keeps beyond the type of each field, written once.

Each rule is a function of plain values that returns the problems it finds as
:class:`~contextpolicy.errors.Issue` objects (a JSON path, a message, a stable code). The models'
validators call them, so a typed policy that breaks one cannot exist; the collect-all pass of
:func:`~contextpolicy.policy.validate_context_policy` calls the same functions on the document,
read tolerantly, so that every problem is reported at once, field errors included.

The reference rules need to know the plan's fragments and the registered handlers; they run
whenever those are known (``validate_context_policy(policy, fragments, handlers)`` and every
``process_context``).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ..errors import ContextPolicyError, Issue
from ..plan import HISTORY, PROTECTED_KINDS, Fragment

__all__ = [
    "FragmentRef",
    "Reference",
    "duplicate_ids",
    "fragment_refs",
    "reference_issues",
    "watermark_issues",
]


def watermark_issues(
    trigger_chars: Any, trigger_tokens: Any, target_chars: Any, target_tokens: Any
) -> list[Issue]:
    """A reduce policy has a trigger; a target pairs with the trigger of its unit and is at or
    below it. ``None`` is an absent watermark; values that are not integers count as present
    and are left to the field checks."""
    issues: list[Issue] = []
    if trigger_chars is None and trigger_tokens is None:
        issues.append(Issue(
            "", "a reduce policy needs triggerChars or triggerTokens (or both)", "missing-trigger",
        ))
    for unit, other, trigger, target in (
        ("Chars", "Tokens", trigger_chars, target_chars),
        ("Tokens", "Chars", trigger_tokens, target_tokens),
    ):
        trigger_key, target_key = f"trigger{unit}", f"targetInput{unit}"
        if target is not None and trigger is None:
            issues.append(Issue(
                target_key,
                f"{target_key} needs {trigger_key} (a {unit.lower()} target never pairs with a "
                f"{other.lower()} trigger)",
                "target-without-trigger",
            ))
        if type(trigger) is int and type(target) is int and target > trigger:
            issues.append(Issue(
                target_key, f"{target_key} ({target}) must be <= {trigger_key} ({trigger})",
                "target-above-trigger",
            ))
    return issues


def duplicate_ids(
    ids: Sequence[Any], path: str, what: str, code: str, key: str = ""
) -> list[Issue]:
    """Each id once: ``ids[i]`` repeating an earlier id is an issue at ``path[i]`` (followed by
    ``key``). Values that are not non-empty strings are left to the field checks."""
    issues: list[Issue] = []
    first: dict[str, int] = {}
    for i, value in enumerate(ids):
        if not isinstance(value, str) or not value:
            continue
        if value in first:
            issues.append(Issue(
                f"{path}[{i}]{key}",
                f"duplicate {what} id {value!r} (first at {path}[{first[value]}])", code,
            ))
        else:
            first[value] = i
    return issues


# ---------------------------------------------------------------------------------------------
# References to fragments and handlers


@dataclass(frozen=True, slots=True)
class FragmentRef:
    """What the reference rules know of a fragment: kind, protection, content shape
    (``has_messages`` is ``None`` when only the id is known)."""

    id: str
    kind: str | None
    protected: bool
    has_messages: bool | None


@dataclass(frozen=True, slots=True)
class Reference:
    """One place in a policy that names a fragment or a handler.

    ``what``: ``fragment`` (a compress step's fragment), ``trim`` (a fragment a trim cuts: it
    must hold messages), ``keep-groups`` (a compress step's ``keepGroups``: its fragment must
    hold messages), ``mutable`` (an audit's mutable id) or ``handler``."""

    path: str
    what: str
    name: str


def fragment_refs(fragments: Iterable[Any]) -> dict[str, FragmentRef]:
    """Fragments as the reference rules see them: Fragment objects, fragment dicts or ids."""
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
                f"expected a Fragment, a fragment dict or an id, got {type(item).__name__}",
                path=f"fragments[{i}]", code="invalid-fragments-argument",
            )
    return refs


def reference_issues(
    references: Iterable[Reference],
    fragments: Mapping[str, FragmentRef] | None,
    handlers: Iterable[str] | None,
) -> list[Issue]:
    """Every reference names a fragment of the plan that may change (and holds messages where
    the step needs them) or a registered handler. ``None``: not known, not checked. A step may
    name the history on a plan without one (``ContextPlan.from_messages`` leaves it out of a
    first turn): the step is skipped (``fragment-absent``)."""
    issues: list[Issue] = []
    known = ", ".join(sorted(fragments)) if fragments else ""
    registered = set(handlers) if handlers is not None else None
    for ref in references:
        if ref.what == "handler":
            if registered is not None and ref.name not in registered:
                listed = ", ".join(sorted(registered)) or "none"
                issues.append(Issue(
                    ref.path, f"no handler {ref.name!r} is registered (registered: {listed})",
                    "unknown-handler",
                ))
            continue
        if fragments is None:
            continue
        fragment = fragments.get(ref.name)
        if fragment is None:
            if ref.what in ("trim", "fragment") and ref.name == HISTORY:
                continue
            if ref.what != "keep-groups":  # its fragmentId already says so
                issues.append(Issue(
                    ref.path,
                    f"no fragment {ref.name!r} in the plan (fragments: {known or 'none'})",
                    "unknown-fragment",
                ))
        elif ref.what == "keep-groups":
            if fragment.has_messages is False and not fragment.protected:
                issues.append(Issue(
                    ref.path, f"fragment {ref.name!r} holds text; keepGroups needs messages",
                    "not-messages",
                ))
        elif fragment.protected:
            what = (f"a protected {fragment.kind!r} fragment" if fragment.kind
                    else "a protected fragment")
            issues.append(Issue(
                ref.path, f"fragment {ref.name!r} is {what}; it is never changed",
                "protected-fragment",
            ))
        elif ref.what == "trim" and fragment.has_messages is False:
            issues.append(Issue(
                ref.path, f"fragment {ref.name!r} holds text; a trim needs messages",
                "not-messages",
            ))
    return issues
