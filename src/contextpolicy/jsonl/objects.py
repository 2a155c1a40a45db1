"""The object path of the line runner: a line parsed (orjson) and run with the validated policy
(``process_context``, or one kernel call for a transcript when the policy allows), into its
result and report entry. Loaded by the line worker when the first line needs it, so that a run
whose lines all take the byte path never imports the policy's models or the core."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import orjson

from .. import _kernel
from .._records import FusedRecord
from ..core import process_context
from ..errors import ContextAuditError, ContextError, ContextPlanError, ContextPolicyError
from ..fused import fused_missed_reason, fused_report_json
from ..plan import PROTECTED_KINDS, ContextPlan, as_plan
from ..policy import ReducePolicy
from ..prepared import PreparedPolicy
from ..report import ContextReport
from .diagnose import json_problem, top_level_hint
from .digits import long_digit_runs
from .files import dumps, reread_exactly
from .line_policy import transcript_kinds
from .results import Figures, LineError, LineResult
from .templates import FusedReports

__all__ = ["ObjectLines", "fused_figures", "report_figures"]


class ObjectLines:
    """A validated policy, its prepared form and report templates: turns a parsed line into its
    result. What it holds never changes, so the copies of a worker share it."""

    def __init__(self, prepared: PreparedPolicy, with_reports: bool,
                 handlers: dict[str, Callable[..., Any]]) -> None:
        self.prepared = prepared
        self.policy = prepared.policy
        self.handlers = handlers
        self.with_reports = with_reports
        path = prepared.transcript_path
        # A transcript in one kernel call (_kernel.reduce_transcript) when the policy is one the
        # kernel runs and names no fragment but the history, which may change and holds messages.
        self.fused = path.steps if path is not None else None
        self.trigger, self.watermark = (path.trigger_chars, path.watermark_chars) if (
            path is not None) else (-1, -1)
        self.reduces = type(self.policy) is ReducePolicy
        self.transcript_kinds = transcript_kinds(PROTECTED_KINDS)
        self.reports = FusedReports(prepared, self.transcript_kinds)

    def line(self, number: int, raw: bytes | memoryview, exact: bool | None) -> LineResult:
        """The result of line ``number``; ``exact``: it holds an integer orjson may read as a
        float (``None``: look)."""
        if exact is None:
            exact = bool(long_digit_runs(raw))
        try:
            doc = orjson.loads(raw)
        except orjson.JSONDecodeError as exc:
            problem = json_problem(raw, exc, jsonl=True)
            return LineResult(number, error=problem.message, column=problem.column)
        if exact:  # orjson may have read an integer beyond 64 bits as a float: read it exactly
            try:
                doc = reread_exactly(raw)
            except ValueError as exc:
                return LineResult(number, error=str(exc))
        try:
            return self._process(number, doc)
        except LineError as exc:
            return LineResult(number, error=str(exc))
        except (ContextPlanError, ContextPolicyError) as exc:
            return LineResult(number, error=str(exc))
        except ContextError as exc:
            return LineResult(number, error=f"{type(exc).__name__}: {exc}")
        except RecursionError:
            return LineResult(number, error="the line is nested too deeply to be processed")

    def _process(self, number: int, doc: Any) -> LineResult:
        if not isinstance(doc, dict):
            raise LineError(
                'expected a JSON object (a transcript {"id", "messages"} or a plan '
                f'{{"fragments"}}), got {type(doc).__name__}'
                + (f": {top_level_hint(doc)}" if isinstance(doc, list) else "")
            )
        if "fragments" in doc:
            plan_doc = {k: doc[k] for k in ("fragments", "original") if k in doc}
            plan = as_plan(plan_doc)
            transcript = False
        elif "messages" in doc:
            messages = doc["messages"]
            if self.fused is not None and type(messages) is list:
                return self._fused(number, doc, messages, self.fused)
            plan = ContextPlan.from_messages(messages)
            transcript = True
        else:
            keys = ", ".join(sorted(map(str, doc))) or "none"
            raise LineError(
                'expected a transcript {"id", "messages"} or a plan {"fragments"}; '
                f"the object has keys: {keys}"
            )
        violation = False
        try:
            result = process_context(plan, self.policy, handlers=self.handlers or None)
            report = result.report
            out = dict(doc)
            if transcript:
                out["messages"] = result.input
            else:
                out["fragments"] = [
                    f.model_dump(by_alias=True, exclude_none=True) for f in result.plan.fragments
                ]
        except ContextAuditError as exc:
            report = exc.report
            violation = True
            out = doc
        # dumps: orjson's bytes, also for what orjson reads but will not write (nesting deeper
        # than 254 levels, integers beyond 64 bits).
        line = LineResult(
            number, output=dumps(out) + b"\n", figures=report_figures(report), violation=violation,
        )
        if self.with_reports:
            # The line number is put in front by the caller, who knows where the batch began.
            entry = {"id": doc.get("id"), "report": report.model_dump(by_alias=True, mode="json")}
            line.report = dumps(entry)
        return line

    def _fused(
        self, number: int, doc: dict[str, Any], messages: list[Any],
        steps: tuple[tuple[str, int, int, int], ...],
    ) -> LineResult:
        prepared = self.prepared
        raw = _kernel.reduce_transcript(messages, steps, self.trigger, self.watermark)
        out = dict(doc)
        out["messages"] = raw.input
        # A validate reaches no target (report.targetReached is null).
        line = LineResult(number, output=dumps(out) + b"\n", figures=fused_figures(
            raw, self.reduces and raw.watermark_met, prepared))
        if self.with_reports:
            kinds = self.transcript_kinds
            line.report = dumps({"id": doc.get("id"), "report": fused_report_json(
                prepared, raw, [kinds[fid] for fid in raw.ids])})
        return line


def report_figures(report: ContextReport) -> Figures:
    removed = sum(s.messages_removed for s in report.steps if s.status == "applied")
    groups = sum(
        (s.groups_before or 0) - (s.groups_after or 0)
        for s in report.steps if s.status == "applied" and s.kind == "trim"
    )
    before, after = report.before, report.after
    return Figures(report.triggered, bool(report.target_reached), before.chars, after.chars,
                   before.messages, after.messages, removed, groups,
                   [w.code for w in report.warnings],
                   after.chars < before.chars or after.messages < before.messages,
                   [report.missed_reason] if report.missed_reason is not None else [])


def fused_figures(raw: FusedRecord, target_reached: bool,
                   prepared: PreparedPolicy) -> Figures:
    """:func:`report_figures` of a run the kernel did in one call
    (``_kernel.reduce_transcript``), from its records (a test holds the two to each other)."""
    missed = fused_missed_reason(prepared, raw)
    return Figures(raw.triggered, target_reached, raw.chars_before, raw.chars_after,
                   raw.messages_before, raw.messages_after, raw.messages_removed,
                   raw.groups_removed,
                   [w.code for w in raw.warnings] if raw.warnings else [],
                   raw.chars_after < raw.chars_before or raw.messages_after < raw.messages_before,
                   [missed] if missed is not None else [])
