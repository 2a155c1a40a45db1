"""What a line became, and the totals of a run: the records the line worker gives and the command
line adds up and prints."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from .._tables import MISSED_REASONS
from ..fused import fused_missed_reason
from ..prepared import PreparedPolicy
from ..report import ContextReport

__all__ = ["Figures", "LineError", "LineResult", "Summary", "fused_figures", "report_figures"]

class Figures(NamedTuple):
    """A line's figures; for a run of lines, the counts of lines triggered, reaching the target
    and reduced, the sums, and the warnings and missed reasons as a count per code."""

    triggered: int
    reached: int
    chars_before: int
    chars_after: int
    messages_before: int
    messages_after: int
    messages_removed: int
    groups_removed: int
    warnings: list[str] | dict[str, int]  # the codes of a line's warnings
    reduced: int  # chars or messages went down
    missed: list[str] | dict[str, int]  # a line's missedReason, if it has one


# _kernel.reduce_lines' figures: where "reduced", the missed reasons (MISSED_REASONS) and the
# warnings of each code are.
REDUCED_FIGURE = 11
MISSED_FIGURES = slice(12, 12 + len(MISSED_REASONS))
WARNING_CODES = ("orphan-tool-result", "unanswered-tool-call", "unknown-role")
WARNING_FIGURES = (9, 10, 12 + len(MISSED_REASONS))


@dataclass(slots=True)
class LineResult:
    """What one input line became, or a run of ``lines`` consecutive lines that took the byte
    path (their outputs one after another, their figures added up, warnings by code)."""

    line: int
    # bytes; a run's may be a bytearray, or a view of what a worker process sent
    output: bytes | bytearray | memoryview | None = None
    report: bytes | None = None
    figures: Figures | None = None
    error: str | None = None
    # The byte of the line (from 1) where ``error`` is, when it is at one (invalid JSON).
    column: int = 0
    violation: bool = False
    lines: int = 1
    scanned: int = 0  # how many of the lines took the byte path
    # A run's reports, (line number, report entry without its opening brace) per line, until
    # they are numbered.
    reports: list[tuple[int, bytes]] | None = None


class LineError(Exception):
    """A line that cannot be processed; ``str()`` says what was expected."""


@dataclass
class Summary:
    """Totals over a run, all counted from the per-line reports."""

    conversations: int = 0
    skipped: int = 0
    triggered: int = 0
    target_reached: int = 0
    reduced: int = 0
    audit_violations: int = 0
    chars_before: int = 0
    chars_after: int = 0
    messages_before: int = 0
    messages_after: int = 0
    messages_removed: int = 0
    groups_removed: int = 0
    bytes_in: int = 0
    scanned: int = 0
    seconds: float = 0.0
    warnings: Counter[str] = field(default_factory=Counter)
    missed: Counter[str] = field(default_factory=Counter)  # triggered runs that missed, by reason
    skipped_lines: list[dict[str, Any]] = field(default_factory=list)

    def add(self, result: LineResult) -> None:
        if result.error is not None:
            self.skipped += 1
            entry: dict[str, Any] = {"line": result.line, "error": result.error}
            if result.column:
                entry["column"] = result.column
            self.skipped_lines.append(entry)
            return
        assert result.figures is not None
        (triggered, reached, c_before, c_after, m_before, m_after, removed, groups, warnings,
         reduced, missed) = result.figures
        self.conversations += result.lines
        self.scanned += result.scanned
        self.triggered += triggered
        self.target_reached += reached
        self.reduced += reduced
        self.audit_violations += result.violation
        self.chars_before += c_before
        self.chars_after += c_after
        self.messages_before += m_before
        self.messages_after += m_after
        self.messages_removed += removed
        self.groups_removed += groups
        if warnings:
            self.warnings.update(warnings)
        if missed:
            self.missed.update(missed)

    def to_json_dict(self) -> dict[str, Any]:
        seconds = max(self.seconds, 1e-9)
        return {
            "conversations": self.conversations,
            "skipped": self.skipped,
            "triggered": self.triggered,
            # Over every conversation: one that did not trigger is within its target.
            "targetReached": self.target_reached,
            # Conversations whose chars or messages went down; triggered ones that missed their
            # target, and the count of each reason (every reason, in precedence order).
            "reduced": self.reduced,
            "missedTarget": sum(self.missed.values()),
            "missedReasons": {reason: self.missed[reason] for reason in MISSED_REASONS},
            "auditViolations": self.audit_violations,
            "charsBefore": self.chars_before,
            "charsAfter": self.chars_after,
            "messagesBefore": self.messages_before,
            "messagesAfter": self.messages_after,
            "messagesRemoved": self.messages_removed,
            "groupsRemoved": self.groups_removed,
            "warnings": dict(sorted(self.warnings.items())),
            "bytesIn": self.bytes_in,
            # Lines read as bytes (the kernel's scanner) and lines parsed into objects.
            "paths": {"bytes": self.scanned,
                      "objects": self.conversations + self.skipped - self.scanned},
            "seconds": round(self.seconds, 6),
            "megabytesPerSecond": round(self.bytes_in / seconds / 1e6, 3),
            "conversationsPerSecond": round(self.conversations / seconds, 3),
            "skippedLines": self.skipped_lines,
        }


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


def fused_figures(raw: tuple[Any, ...], target_reached: bool,
                   prepared: PreparedPolicy) -> Figures:
    """:func:`report_figures` of a run the kernel did in one call
    (``_kernel.reduce_transcript``), from its records (a test holds the two to each other)."""
    totals = raw[8]
    missed = fused_missed_reason(prepared, raw)
    return Figures(raw[0], target_reached, totals[0], totals[3], totals[1], totals[4], totals[6],
                   totals[7], [w[2] for w in raw[5]] if raw[5] else [],
                   totals[3] < totals[0] or totals[4] < totals[1],
                   [missed] if missed is not None else [])
