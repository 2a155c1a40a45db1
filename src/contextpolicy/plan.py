"""The plan: named fragments of model input, and the original fragments kept for audit.

Messages stay plain dicts in OpenAI chat shape (Anthropic content blocks included). A fragment
holds its message list as given: validating a plan never copies or walks the messages (the
kernel does that in its one measuring pass), so a plan of a million messages costs O(fragments).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Annotated, Any, Literal, cast

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    PlainValidator,
    ValidationError,
    WithJsonSchema,
    field_validator,
    model_validator,
)
from pydantic.alias_generators import to_camel

from ._build import built
from .content import same
from .errors import ContextPlanError, Issue

__all__ = [
    "PROTECTED_KINDS",
    "REDUCIBLE_KINDS",
    "ContextPlan",
    "Fragment",
    "FragmentKind",
    "as_plan",
    "changed_fields",
]

FragmentKind = Literal[
    "system", "question", "authorization", "evidence", "history", "memory", "document", "note"
]
PROTECTED_KINDS: frozenset[str] = frozenset({"system", "question", "authorization", "evidence"})
REDUCIBLE_KINDS: frozenset[str] = frozenset({"history", "memory", "document", "note"})
# The one reducible fragment ContextPlan.from_messages may leave out (a transcript's first turn
# has none): a reduce step may name it on a plan without it, and is then skipped
# (``fragment-absent``).
HISTORY = "history"


def _keep_list(value: Any) -> list[Any]:
    # Keep the caller's list object itself: no per-message validation, no copy. The kernel
    # validates every message when it measures the plan.
    if not isinstance(value, list):
        raise ValueError(f"expected a list of messages, got {type(value).__name__}")
    return value


MessageList = Annotated[
    list[dict[str, Any]],
    PlainValidator(_keep_list),
    WithJsonSchema({
        "type": "array",
        "items": {
            "type": "object",
            "required": ["role"],
            "properties": {
                "role": {"type": "string"},
                "content": {"type": ["string", "array", "null"]},
                "tool_calls": {"type": "array"},
                "tool_call_id": {"type": "string"},
                "name": {"type": "string"},
            },
        },
    }),
]


class Fragment(BaseModel):
    """One named piece of model input: exactly one of ``text`` or ``messages``."""

    model_config = ConfigDict(
        extra="forbid", frozen=True, alias_generator=to_camel, populate_by_name=True,
        strict=True,
    )

    id: str = Field(min_length=1)
    kind: FragmentKind
    text: str | None = None
    messages: MessageList | None = None
    role: Literal["system", "developer", "user", "assistant"] | None = None
    protected: bool | None = None
    metadata: dict[str, Any] | None = None

    @field_validator("id")
    @classmethod
    def _id_not_blank(cls, value: str) -> str:
        if not value.strip():
            raise ValueError("fragment id must not be blank")
        return value

    @model_validator(mode="after")
    def _shape(self) -> Fragment:
        if (self.text is None) == (self.messages is None):
            raise ValueError("a fragment holds exactly one of 'text' or 'messages'")
        if self.role is not None and self.messages is not None:
            raise ValueError("'role' applies to text fragments only")
        if self.protected is False and self.kind in PROTECTED_KINDS:
            raise ValueError(f"a {self.kind!r} fragment is always protected")
        return self

    @property
    def is_protected(self) -> bool:
        """Protected kinds always; reducible kinds when marked ``protected``."""
        return self.kind in PROTECTED_KINDS or bool(self.protected)

    @property
    def assembled_role(self) -> str:
        """The role a text fragment takes when assembled."""
        if self.role is not None:
            return self.role
        return "system" if self.kind in ("system", "authorization") else "user"

    def content(self) -> str | list[dict[str, Any]]:
        return self.text if self.text is not None else cast("list[dict[str, Any]]", self.messages)

    def with_content(self, content: str | list[dict[str, Any]]) -> Fragment:
        """A copy holding ``content`` (text or messages) instead; the original is untouched.
        Like ``model_copy(update=...)``, it does not validate ``content``."""
        values = dict(self.__dict__)
        if isinstance(content, str):
            values["text"], values["messages"] = content, None
            changed = _TEXT_KEYS
        else:
            values["messages"], values["text"], values["role"] = content, None, None
            changed = _MESSAGES_KEYS
        return built(Fragment, values, self.__pydantic_fields_set__ | changed)


_TEXT_KEYS = frozenset({"text", "messages"})
_MESSAGES_KEYS = frozenset({"messages", "text", "role"})


def changed_fields(before: Fragment, after: Fragment) -> list[str]:
    """What changed from ``before`` to ``after``, as the model sees it; empty when unchanged.

    ``kind``; ``content`` (the text, or the messages, compared by exact type and value: ``1``
    and ``True`` differ, and no ``__eq__`` of theirs is asked); ``role``, the role a text
    fragment is assembled with (so giving its default role explicitly is no change);
    ``protected``. The contract check and the audit both judge a fragment by this. Metadata is
    carried, never compared.
    """
    if before is after:
        return []
    fields: list[str] = []
    if before.kind != after.kind:
        fields.append("kind")
    # Compared as the model sees the content (content.same), never by an __eq__ of its own.
    same_content = same(before.text, after.text) and same(before.messages, after.messages)
    if not same_content:
        fields.append("content")
    if before.text is not None and after.text is not None and (
        before.assembled_role != after.assembled_role
    ):
        fields.append("role")
    if before.is_protected != after.is_protected:
        fields.append("protected")
    return fields


class ContextPlan(BaseModel):
    """Ordered fragments, and for audit the ``original`` fragments before the App's processing."""

    model_config = ConfigDict(
        extra="forbid", frozen=True, alias_generator=to_camel, populate_by_name=True,
        strict=True,
    )

    fragments: list[Fragment]
    original: list[Fragment] | None = None

    @field_validator("fragments", "original")
    @classmethod
    def _unique_ids(cls, fragments: list[Fragment] | None) -> list[Fragment] | None:
        seen: dict[str, int] = {}
        for i, fragment in enumerate(fragments or ()):
            if fragment.id in seen:
                raise ValueError(
                    f"duplicate fragment id {fragment.id!r} (at {seen[fragment.id]} and {i})"
                )
            seen[fragment.id] = i
        return fragments

    def fragment(self, fragment_id: str) -> Fragment:
        for fragment in self.fragments:
            if fragment.id == fragment_id:
                return fragment
        raise KeyError(fragment_id)

    @classmethod
    def from_messages(cls, messages: Sequence[Mapping[str, Any]]) -> ContextPlan:
        """Split a chat transcript into ``system``, ``history`` and ``question`` fragments.

        Leading ``system``/``developer`` messages become fragment ``system``; a final ``user``
        message that is not a tool-result carrier becomes ``question``; everything between is
        ``history``. Missing parts are simply absent (a reduce step on the absent history is
        skipped, ``fragment-absent``). The message dicts are not copied.
        """
        if not isinstance(messages, list):
            if isinstance(messages, (str, bytes, Mapping)) or not isinstance(messages, Iterable):
                raise ContextPlanError(
                    f"expected a list of messages, got {type(messages).__name__}",
                    path="messages", code="invalid-messages",
                )
            messages = list(messages)
        msgs = cast("list[dict[str, Any]]", messages)
        n = list.__len__(msgs)
        from . import _kernel  # loaded once a transcript is split, never by policy validation

        head, tail = _kernel.split_transcript(msgs)
        # Built without validating again: ids, kinds and message lists are right by construction.
        fragments: list[Fragment] = []
        if head:
            fragments.append(built(Fragment, {"id": "system", "kind": "system", "messages":
                                              list.__getitem__(msgs, slice(None, head))},
                                   _SPLIT_KEYS))
        if tail > head:
            fragments.append(built(Fragment, {"id": "history", "kind": "history", "messages":
                                              list.__getitem__(msgs, slice(head, tail))},
                                   _SPLIT_KEYS))
        if tail < n:
            fragments.append(built(Fragment, {"id": "question", "kind": "question", "messages":
                                              list.__getitem__(msgs, slice(tail, None))},
                                   _SPLIT_KEYS))
        return built(cls, {"fragments": fragments}, _PLAN_KEYS)


_SPLIT_KEYS = frozenset({"id", "kind", "messages"})
_PLAN_KEYS = frozenset({"fragments"})


# ---------------------------------------------------------------------------------------------
# Turning pydantic's errors into ContextPlanError with paths that name fragments.

_PLAN_CODES = {
    "missing": "missing",
    "extra_forbidden": "unknown-key",
    "string_type": "expected-string",
    "string_too_short": "empty",
    "literal_error": "invalid-value",
    "bool_type": "expected-boolean",
    "dict_type": "expected-object",
    "list_type": "expected-list",
    "model_type": "expected-object",
    "model_attributes_type": "expected-object",
}


def _plan_issue(error: Mapping[str, Any], data: Any) -> Issue:
    loc = list(error["loc"])
    parts: list[str] = []
    node = data
    i = 0
    while i < len(loc):
        key = loc[i]
        if isinstance(key, int):
            label = str(key)
            if isinstance(node, list) and 0 <= key < len(node):
                node = node[key]
                fid = node.get("id") if isinstance(node, Mapping) else None
                named = parts and parts[-1] in ("fragments", "original")
                if isinstance(fid, str) and fid.strip() and named:
                    label = fid
            else:
                node = None
            parts[-1] = f"{parts[-1]}[{label}]" if parts else f"[{label}]"
        else:
            parts.append(to_camel(str(key)) if str(key) != "id" else "id")
            node = node.get(key) if isinstance(node, Mapping) else None
        i += 1
    etype = error["type"]
    code = _PLAN_CODES.get(etype, "invalid")
    message = str(error["msg"])
    if etype == "value_error":
        message = message.removeprefix("Value error, ")
        if "exactly one of" in message:
            code = "content-shape"
        elif "always protected" in message:
            code = "protected-kind"
        elif "duplicate fragment id" in message:
            code = "duplicate-fragment-id"
        elif "text fragments only" in message:
            code = "role-on-messages"
        elif "expected a list of messages" in message:
            code = "invalid-messages"
        elif "blank" in message:
            code = "empty"
    elif etype == "literal_error" and loc and loc[-1] == "kind":
        code = "unknown-kind"
    return Issue(".".join(parts), message, code)


def as_plan(plan: ContextPlan | Mapping[str, Any]) -> ContextPlan:
    """A :class:`ContextPlan` from a plan or its JSON-shaped dict; never mutates the input."""
    if isinstance(plan, ContextPlan):
        return plan
    if isinstance(plan, (list, tuple)):
        raise ContextPlanError(
            f"expected a ContextPlan or a mapping, got a {type(plan).__name__}: for a chat "
            "transcript (a list of messages), make the plan with "
            "ContextPlan.from_messages(messages)", code="invalid-plan",
        )
    if not isinstance(plan, Mapping):
        raise ContextPlanError(
            f"expected a ContextPlan or a mapping, got {type(plan).__name__}", code="invalid-plan"
        )
    if "messages" in plan and "fragments" not in plan:
        raise ContextPlanError(
            'expected a plan {"fragments": [...]}, got a transcript {"messages": [...]}: make '
            'the plan with ContextPlan.from_messages(transcript["messages"])',
            code="invalid-plan",
        )
    try:
        return ContextPlan.model_validate(dict(plan))
    except ValidationError as exc:
        raise ContextPlanError([_plan_issue(e, plan) for e in exc.errors()]) from None
