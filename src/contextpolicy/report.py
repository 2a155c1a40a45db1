"""The report of a run: measured figures, one entry per step, warnings and the audit.

``report.model_dump(by_alias=True, mode="json")`` is the camelCase JSON document. Every figure
is measured after the fact; a token figure is ``null`` when no counter was given.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict
from pydantic.alias_generators import to_camel

from ._build import built
from .plan import ContextPlan

_new = object.__new__

__all__ = [
    "AuditChange",
    "AuditReport",
    "CompressFigures",
    "ContextEvent",
    "ContextReport",
    "ContextResult",
    "FragmentUsage",
    "PlanWarning",
    "StepReport",
    "Usage",
    "Watermark",
]


class ReportModel(BaseModel):
    """The base of the report models: camelCase JSON keys, no unknown fields."""

    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, extra="forbid")

    def to_json_dict(self) -> dict[str, Any]:
        return self.model_dump(mode="json", by_alias=True)


class Usage(ReportModel):
    """What a plan or an input carries: chars, tokens (``None`` without a counter), messages,
    fragments, and parts that carry no text (images, audio, files), which chars count as 0.

    ``tokens_exact``: whether ``tokens`` is measured (an exact counter's figure, or a provider's
    reported usage plus what came after counted exactly) rather than partly estimated;
    ``tokens_reported``: the part of ``tokens`` a provider reported for an earlier input this
    one starts with (:func:`contextpolicy.counters.usage_anchored`). Both ``None`` without
    tokens; ``tokens_reported`` ``None`` when no report covers the input."""

    chars: int
    tokens: int | None
    messages: int
    fragments: int
    opaque_parts: int
    tokens_exact: bool | None = None
    tokens_reported: int | None = None


class Watermark(ReportModel):
    chars: int | None = None
    tokens: int | None = None


StepStatus = Literal["applied", "unchanged", "skipped", "failed"]
MissedReason = Literal[
    "protected-over-target", "step-failed", "keep-groups-floor", "no-step-could-act"
]


class CompressFigures(ReportModel):
    """What an applied compress step by a built-in handler (``contextpolicy.handlers``) did,
    measured by the core from the content the handler was given and the content it returned.

    ``handler``: the built-in handler (``clear-tool-results``, ``truncate-messages``,
    ``summarize``); ``charsRemoved``: the step's ``charsBefore - charsAfter``. Then, by
    handler: ``resultsCleared`` (tool results whose content was replaced) and ``inputsCleared``
    (tool calls whose arguments were emptied); ``messagesTruncated`` (messages whose text was
    cut); ``messagesSummarized`` (messages replaced by the summary) and ``summaryChars``. A
    figure that does not apply to the handler is ``null``.
    """

    handler: str
    chars_removed: int | None = None
    results_cleared: int | None = None
    inputs_cleared: int | None = None
    messages_truncated: int | None = None
    messages_summarized: int | None = None
    summary_chars: int | None = None


class StepReport(ReportModel):
    """What one reduction step did. ``reason`` is a stable code:

    applied: ``trimmed``, ``keep-groups-floor`` (the floor kept the fragment above its target),
    ``compressed``; unchanged: ``within-target``, ``keep-groups-floor``, ``nothing-to-compress``
    (every group kept verbatim, or a built-in handler gave its input back: nothing to do, or
    less than its batch);
    skipped: ``not-triggered``, ``target-reached``, ``fragment-absent`` (the step names the
    history and the plan has none: ``ContextPlan.from_messages`` leaves it out of a first turn),
    ``fragment-empty`` (the step's messages fragment holds no message); failed:
    ``handler-error``, ``wrong-shape``, ``invalid-output``, ``not-smaller``.
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
    handler_figures: CompressFigures | None = None
    """For a compress step a built-in handler applied: what it did, measured."""


class FragmentUsage(ReportModel):
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


class PlanWarning(ReportModel):
    """A problem in the input that this library reports and never silently drops.

    ``orphan-tool-result``: a tool result no earlier call in its fragment made.
    ``unanswered-tool-call``: a tool call without a later result.
    ``unknown-role``: messages whose role the accounting does not know (``human``, ``ai``, ...);
    roles are never rewritten, and a turn opens only on ``user``. One warning per role and
    fragment, at its first message; the message names the role, how many messages carry it,
    the roles known and what to map it to.
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


class AuditChange(ReportModel):
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


class AuditReport(ReportModel):
    mutable_fragment_ids: list[str]
    changes: list[AuditChange]
    violations: int
    passed: bool


class ContextReport(ReportModel):
    """The report of one ``process_context`` run.

    ``missedReason`` says why a triggered reduce missed its target (``targetReached`` false);
    it is ``null`` otherwise. When several reasons hold, the first of these is given:

    - ``protected-over-target``: what no step may reduce (the protected fragments, and every
      fragment no step names) is alone above a target, chars or tokens: no policy step could
      reach it;
    - ``step-failed``: a step failed (its fragment stayed as it was);
    - ``keep-groups-floor``: a trim's ``keepGroups`` floor kept its fragment above the step's
      ``targetChars``;
    - ``no-step-could-act``: every step did what it could and that was not enough: each ended
      within its own ``targetChars`` (set above what the target needs), had nothing to
      compress, or its fragment was absent or empty.
    """

    mode: Literal["validate", "reduce", "audit"]
    kernel: str
    implementation: str
    triggered: bool
    trigger: Watermark | None
    target: Watermark | None
    before: Usage
    after: Usage
    target_reached: bool | None
    missed_reason: MissedReason | None = None
    steps: list[StepReport]
    fragments: list[FragmentUsage]
    warnings: list[PlanWarning]
    audit: AuditReport | None = None
    counter: str | None = None
    """The name of the token counter the figures were counted with (``None``: no tokens)."""
    counter_exact: bool | None = None
    """Whether that counter's own figures (each fragment's and step's tokens) are the
    tokenizer's, not an estimate (``None``: no tokens). The totals say their own:
    ``before.tokens_exact``, ``after.tokens_exact``."""


@dataclass(frozen=True)
class ContextEvent:
    """A progress event: ``type`` (``context.started``, ``step.completed``, ...) and the
    figures known at that point."""

    type: str
    data: dict[str, Any]


class ContextResult:
    """``plan``: the new plan (unchanged fragments share objects with the input);
    ``input``: the assembled model input; ``report``: what happened, measured.

    A run keeps its measured figures as plain records: ``plan`` and ``report`` become models
    when they are first read, so a caller that only needs ``input`` never pays for them.
    """

    __slots__ = ("_input", "_make", "_plan", "_records", "_report")
    _input: list[dict[str, Any]]
    # (make, *args): make(*args) gives the records (fragments, original, report data).
    _make: tuple[Any, ...] | None
    _plan: ContextPlan | None
    _records: tuple[list[Any], list[Any] | None, ReportData] | None
    _report: ContextReport | None

    def __init__(
        self, plan: ContextPlan, input: list[dict[str, Any]], report: ContextReport
    ) -> None:
        self._plan, self._input, self._report = plan, input, report
        self._make = self._records = None

    def _made(self) -> tuple[list[Any], list[Any] | None, ReportData]:
        """The records (fragments, original, report data), made on first use."""
        records = self._records
        if records is None:
            lazy = self._make
            assert lazy is not None
            records = self._records = lazy[0](*lazy[1:])
            self._make = None
        return records

    @property
    def plan(self) -> ContextPlan:
        if self._plan is None:
            fragments, original, _ = self._made()
            self._plan = built(ContextPlan, {"fragments": list(fragments),
                                             "original": original})
        return self._plan

    @property
    def input(self) -> list[dict[str, Any]]:
        return self._input

    @property
    def report(self) -> ContextReport:
        if self._report is None:
            self._report = self._made()[2].model()
        return self._report

    def report_json(self) -> dict[str, Any]:
        """The report's JSON document (``report.to_json_dict()``), built straight from the
        measured records when the report was not read as a model."""
        if self._report is not None:
            return self._report.to_json_dict()
        return self._made()[2].json()

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, ContextResult):
            return NotImplemented
        return (self.plan, self.input, self.report) == (other.plan, other.input, other.report)

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"ContextResult(plan={self.plan!r}, input={self.input!r}, report={self.report!r})"


def lazy_result(
    cls: type[ContextResult], input: list[dict[str, Any]],
    make: Callable[..., tuple[list[Any], list[Any] | None, ReportData]], args: tuple[Any, ...],
) -> ContextResult:
    """A result whose plan and report records ``make(*args)`` gives when they are first read."""
    result = _new(cls)
    result._input = input
    result._make = (make, *args)
    result._plan = result._report = result._records = None
    return result


def given_records(*records: Any) -> Any:
    """The records themselves (for a run that has them at hand)."""
    return records


# ---------------------------------------------------------------------------------------------
# The records a run measures, and the report's models and JSON built from them.


class Totals:
    """What a plan or an input carries, as measured (the fields of :class:`Usage`)."""

    __slots__ = ("chars", "fragments", "messages", "opaque_parts", "tokens", "tokens_exact",
                 "tokens_reported")

    def __init__(self, chars: int, tokens: int | None, messages: int, fragments: int,
                 opaque_parts: int, tokens_exact: bool | None = None,
                 tokens_reported: int | None = None) -> None:
        self.chars, self.tokens, self.messages = chars, tokens, messages
        self.fragments, self.opaque_parts = fragments, opaque_parts
        self.tokens_exact, self.tokens_reported = tokens_exact, tokens_reported

    def json(self) -> dict[str, Any]:
        return {"chars": self.chars, "tokens": self.tokens, "messages": self.messages,
                "fragments": self.fragments, "opaqueParts": self.opaque_parts,
                "tokensExact": self.tokens_exact, "tokensReported": self.tokens_reported}

    def model(self) -> Usage:
        return built(Usage, {"chars": self.chars, "tokens": self.tokens,
                             "messages": self.messages, "fragments": self.fragments,
                             "opaque_parts": self.opaque_parts,
                             "tokens_exact": self.tokens_exact,
                             "tokens_reported": self.tokens_reported})


def _aliases(cls: type[ReportModel]) -> list[tuple[str, str]]:
    return [(name, field.alias or name) for name, field in cls.model_fields.items()]


_STEP_KEYS = _aliases(StepReport)
_WARNING_KEYS = _aliases(PlanWarning)


def flat_json(model: StepReport | PlanWarning) -> dict[str, Any]:
    """``model.to_json_dict()`` of a report entry whose fields are all JSON scalars (a step's
    ``handlerFigures`` aside, which is its own document)."""
    kind = type(model)
    keys = _STEP_KEYS if kind is StepReport else _WARNING_KEYS if kind is PlanWarning else None
    if keys is None:  # a subclass of the caller's: its own serialisation
        return model.to_json_dict()
    values = model.__dict__
    out = {alias: values[name] for name, alias in keys}
    figures = out.get("handlerFigures")
    if figures is not None:
        out["handlerFigures"] = figures.to_json_dict()
    return out


# FragmentUsage records: its fields in order (id, kind, protected, chars_before, chars_after,
# tokens_before, tokens_after, messages_before, messages_after, changed).
_USAGE_FIELDS = tuple(name for name, _ in _aliases(FragmentUsage))
_USAGE_ALIASES = tuple(alias for _, alias in _aliases(FragmentUsage))


class ReportData:
    """A :class:`ContextReport` as plain measured records (the same attributes, with
    :class:`Totals` for ``before``/``after`` and tuples for ``fragments``)."""

    __slots__ = ("after", "audit", "before", "counter", "counter_exact", "fragments",
                 "implementation", "kernel", "missed_reason", "mode", "steps", "target",
                 "target_reached", "trigger", "triggered", "warnings")

    def __init__(
        self, *, mode: str, kernel: str, implementation: str, triggered: bool,
        trigger: tuple[int | None, int | None] | None,
        target: tuple[int | None, int | None] | None, before: Totals, after: Totals,
        target_reached: bool | None, steps: list[StepReport], fragments: list[tuple[Any, ...]],
        warnings: list[PlanWarning], audit: AuditReport | None, counter: str | None = None,
        missed_reason: str | None = None, counter_exact: bool | None = None,
    ) -> None:
        self.mode, self.kernel, self.implementation = mode, kernel, implementation
        self.triggered, self.trigger, self.target = triggered, trigger, target
        self.before, self.after, self.target_reached = before, after, target_reached
        self.steps, self.fragments, self.warnings, self.audit = steps, fragments, warnings, audit
        self.counter, self.missed_reason = counter, missed_reason
        self.counter_exact = counter_exact

    def model(self) -> ContextReport:
        def mark(w: tuple[int | None, int | None] | None) -> Watermark | None:
            return None if w is None else built(Watermark, {"chars": w[0], "tokens": w[1]})

        return built(ContextReport, {
            "mode": self.mode, "kernel": self.kernel, "implementation": self.implementation,
            "triggered": self.triggered, "trigger": mark(self.trigger),
            "target": mark(self.target), "before": self.before.model(),
            "after": self.after.model(), "target_reached": self.target_reached,
            "missed_reason": self.missed_reason, "steps": list(self.steps),
            "fragments": [built(FragmentUsage, dict(zip(_USAGE_FIELDS, f, strict=True)))
                          for f in self.fragments],
            "warnings": list(self.warnings), "audit": self.audit, "counter": self.counter,
            "counter_exact": self.counter_exact,
        })

    def json(self) -> dict[str, Any]:
        def mark(w: tuple[int | None, int | None] | None) -> dict[str, Any] | None:
            return None if w is None else {"chars": w[0], "tokens": w[1]}

        return {
            "mode": self.mode, "kernel": self.kernel, "implementation": self.implementation,
            "triggered": self.triggered, "trigger": mark(self.trigger),
            "target": mark(self.target), "before": self.before.json(),
            "after": self.after.json(), "targetReached": self.target_reached,
            "missedReason": self.missed_reason, "steps": [flat_json(s) for s in self.steps],
            "fragments": [dict(zip(_USAGE_ALIASES, f, strict=True)) for f in self.fragments],
            "warnings": [flat_json(w) for w in self.warnings],
            "audit": None if self.audit is None else self.audit.to_json_dict(),
            "counter": self.counter,
            "counterExact": self.counter_exact,
        }
