"""The policy models.

A policy is a JSON document with the camelCase keys of the original TypeScript SDK, so one
policy file serves both. The models are pydantic v2, strict (``true``, ``1800.0`` and ``"1800"``
are not integers), closed (a typo such as ``triggerChar`` is an error), frozen, with snake_case
attributes in Python. The cross-field rules of :mod:`.rules` are model validators, so a typed
policy is always a valid one: building or copying an invalid one raises.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Annotated, Any, Literal, Union

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, model_validator
from pydantic.alias_generators import to_camel
from pydantic_core import PydanticCustomError
from typing_extensions import Self

from ..errors import Issue
from .rules import duplicate_ids, watermark_issues

__all__ = [
    "MAX_INT",
    "AuditPolicy",
    "CompressStep",
    "ContextPolicy",
    "Grouping",
    "ReducePolicy",
    "Selection",
    "Step",
    "TrimStep",
    "ValidatePolicy",
]

# Every figure fits the kernel's 64-bit integers: larger ones are a clear issue ("too-large"),
# on both kernels alike, never an OverflowError.
MAX_INT = 2**63 - 1
PositiveInt = Annotated[int, Field(gt=0, le=MAX_INT)]
NonNegativeInt = Annotated[int, Field(ge=0, le=MAX_INT)]
Id = Annotated[str, Field(min_length=1)]


class _Model(BaseModel):
    model_config = ConfigDict(
        extra="forbid", frozen=True, strict=True, alias_generator=to_camel,
        populate_by_name=True,
    )

    def to_json_dict(self) -> dict[str, Any]:
        """The JSON document (camelCase keys, unset options left out)."""
        return self.model_dump(mode="json", by_alias=True, exclude_none=True)

    def model_copy(self, *, update: Mapping[str, Any] | None = None, deep: bool = False) -> Self:
        """A copy; with ``update``, validated like a new policy (pydantic's own copy is not)."""
        copy = super().model_copy(update=update, deep=deep)
        if update:
            return type(self).model_validate(
                {name: getattr(copy, name) for name in type(self).model_fields}
            )
        return copy


RULE_ERROR = "policy-rule"


def _raise_rule_issues(issues: list[Issue]) -> None:
    # One error for all the rules a model breaks, typed "policy-rule" so that the collect-all
    # pass (which runs the same rules on the document, with paths) can leave it out.
    if issues:
        raise PydanticCustomError(
            RULE_ERROR, "{message}", {"message": "; ".join(map(str, issues)),
                                      "codes": [issue.code for issue in issues]},
        )


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

    @model_validator(mode="after")
    def _rules(self) -> Self:
        _raise_rule_issues(
            watermark_issues(self.trigger_chars, self.trigger_tokens, self.target_input_chars,
                             self.target_input_tokens)
            + duplicate_ids([s.id for s in self.steps], "steps", "step", "duplicate-step-id",
                            key=".id")
        )
        return self

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

    @model_validator(mode="after")
    def _rules(self) -> Self:
        _raise_rule_issues(duplicate_ids(
            self.mutable_fragment_ids, "mutableFragmentIds", "fragment", "duplicate-id"
        ))
        return self


ContextPolicy = Annotated[
    Union[ValidatePolicy, ReducePolicy, AuditPolicy],  # noqa: UP007
    Field(discriminator="mode"),
]
POLICY_ADAPTER: TypeAdapter[Any] = TypeAdapter(ContextPolicy)
MODES: dict[str, type[_Model]] = {
    "validate": ValidatePolicy,
    "reduce": ReducePolicy,
    "audit": AuditPolicy,
}
STEP_KINDS: dict[str, type[BaseModel]] = {"trim": TrimStep, "compress": CompressStep}
