"""What a line became, and the totals of a run: the records the line worker gives and the command
line adds up and prints (the figures of a line of the object path are ``objects``'s)."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from .._tables import LINE_FIGURE, LINE_MISSED, MISSED_REASONS

__all__ = ["Figures", "LineError", "LineResult", "Summary", "line_run_figures"]


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


# The warnings _kernel.reduce_lines counts, and the figures (LINE_FIGURES) that count them.
LINE_WARNINGS = (("orphan-tool-result", LINE_FIGURE["orphan_results"]),
                 ("unanswered-tool-call", LINE_FIGURE["unanswered_calls"]),
                 ("unknown-role", LINE_FIGURE["unknown_roles"]))


def line_run_figures(sums: list[int], reduces: bool) -> Figures:
    """The :class:`Figures` of a run of lines read as bytes, from the sums of their
    ``reduce_lines`` figures (``LINE_FIGURES``); a validate reaches no target."""
    def at(name: str) -> int:
        return sums[LINE_FIGURE[name]]

    warnings = {code: sums[i] for code, i in LINE_WARNINGS if sums[i]}
    missed = {reason: n for reason, n in zip(MISSED_REASONS, sums[LINE_MISSED], strict=True)
              if n}
    return Figures(at("triggered"), at("reached") if reduces else 0, at("chars_before"),
                   at("chars_after"), at("messages_before"), at("messages_after"),
                   at("messages_removed"), at("groups_removed"), warnings, at("reduced"),
                   missed)


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
        f = result.figures
        assert f is not None
        self.conversations += result.lines
        self.scanned += result.scanned
        self.triggered += f.triggered
        self.target_reached += f.reached
        self.reduced += f.reduced
        self.audit_violations += result.violation
        self.chars_before += f.chars_before
        self.chars_after += f.chars_after
        self.messages_before += f.messages_before
        self.messages_after += f.messages_after
        self.messages_removed += f.messages_removed
        self.groups_removed += f.groups_removed
        if f.warnings:
            self.warnings.update(f.warnings)
        if f.missed:
            self.missed.update(f.missed)

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
