"""The report of a run: measured figures, one entry per step, warnings and the audit.

``report.model_dump(by_alias=True, mode="json")`` is the camelCase JSON document. Every figure
is measured after the fact; a token figure is ``null`` when no counter was given.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict
from pydantic.alias_generators import to_camel

from .plan import ContextPlan

__all__ = [
    "AuditChange",
    "AuditReport",
    "ContextEvent",
    "ContextReport",
    "ContextResult",
    "FragmentUsage",
    "PlanWarning",
    "StepReport",
    "Usage",
    "Watermark",
]


class _Report(BaseModel):
    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, extra="forbid")

    def to_json_dict(self) -> dict[str, Any]:
        return self.model_dump(mode="json", by_alias=True)


class Usage(_Report):
    """What a plan or an input carries: chars, tokens (``None`` without a counter), messages,
    fragments, and parts that carry no text (images, audio, files), which chars count as 0."""

    chars: int
    tokens: int | None
    messages: int
    fragments: int
    opaque_parts: int


class Watermark(_Report):
    chars: int | None = None
    tokens: int | None = None


StepStatus = Literal["applied", "unchanged", "skipped", "failed"]


class StepReport(_Report):
    """What one reduction step did. ``reason`` is a stable code:

    applied: ``trimmed``, ``keep-groups-floor`` (the floor kept the fragment above its target),
    ``compressed``; unchanged: ``within-target``, ``keep-groups-floor``, ``nothing-to-compress``;
    skipped: ``not-triggered``, ``target-reached``; failed: ``handler-error``, ``wrong-shape``,
    ``invalid-output``, ``not-smaller``.
    """

    id: str
    kind: Literal["trim", "compress"]
    fragment_id: str
    status: StepStatus
    reason: str
    message: str | None = None
    chars_before: int | None = None
    chars_after: int | None = None
    tokens_before: int | None = None
    tokens_after: int | None = None
    target_chars: int
    groups_before: int | None = None
    groups_after: int | None = None
    messages_removed: int = 0
    handler_id: str | None = None


class FragmentUsage(_Report):
    id: str
    kind: str
    protected: bool
    chars_before: int
    chars_after: int | None
    tokens_before: int | None
    tokens_after: int | None
    messages_before: int
    messages_after: int | None
    changed: bool


class PlanWarning(_Report):
    """A problem in the input that this library reports and never silently drops.

    ``orphan-tool-result``: a tool result no earlier call in its fragment made.
    ``unanswered-tool-call``: a tool call without a later result.
    ``figure-replaced``: a custom implementation claimed a figure (``triggered``, a step's
    chars, an audit's violations) that the core's measurement contradicts; the report holds the
    measurement, and the message names both.
    """

    code: str
    fragment_id: str
    index: int | None = None
    tool_call_id: str | None = None
    message: str


AuditChangeKind = Literal["modified", "removed", "added", "moved"]


class AuditChange(_Report):
    """One change of the App's, and whether the policy allows it.

    ``reason``: ``mutable`` (allowed), ``not-mutable``, ``protected``, ``kind-changed``.
    ``fields`` names what a ``modified`` fragment changed (``content``, ``role``, ``kind``,
    ``protected``).
    """

    fragment_id: str
    change: AuditChangeKind
    allowed: bool
    reason: str
    kind: str | None
    fields: list[str] = []
    chars_before: int | None = None
    chars_after: int | None = None


class AuditReport(_Report):
    mutable_fragment_ids: list[str]
    changes: list[AuditChange]
    violations: int
    passed: bool


class ContextReport(_Report):
    """The report of one ``process_context`` run."""

    mode: Literal["validate", "reduce", "audit"]
    kernel: str
    implementation: str
    triggered: bool
    trigger: Watermark | None
    target: Watermark | None
    before: Usage
    after: Usage
    target_reached: bool | None
    steps: list[StepReport]
    fragments: list[FragmentUsage]
    warnings: list[PlanWarning]
    audit: AuditReport | None = None


@dataclass(frozen=True)
class ContextEvent:
    """A progress event: ``type`` (``context.started``, ``step.completed``, ...) and the
    figures known at that point."""

    type: str
    data: dict[str, Any]


@dataclass(frozen=True)
class ContextResult:
    """``plan``: the new plan (unchanged fragments share objects with the input);
    ``input``: the assembled model input; ``report``: what happened, measured."""

    plan: ContextPlan
    input: list[dict[str, Any]]
    report: ContextReport
