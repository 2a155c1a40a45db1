"""The exceptions a caller can catch, each saying where the problem is and what was expected."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .report import ContextReport, Usage

__all__ = [
    "ContextAuditError",
    "ContextCancelledError",
    "ContextContractError",
    "ContextError",
    "ContextPlanError",
    "ContextPolicyError",
    "ContextStepError",
    "InputBudgetError",
    "Issue",
]


@dataclass(frozen=True)
class Issue:
    """One problem found in a policy or a plan.

    ``path`` is a JSON path into the document (``steps[0].keepGroups``), ``code`` a stable
    machine-readable name (``expected-integer``), ``message`` the sentence for a person.
    """

    path: str
    message: str
    code: str

    def __str__(self) -> str:
        where = self.path or "<root>"
        return f"{where}: {self.message} [{self.code}]"



class ContextError(Exception):
    """Base class of every error this library raises on purpose."""


class _IssueError(ContextError, ValueError):
    what = "input"

    def __init__(self, issues: list[Issue] | Issue | str, *, code: str = "invalid", path: str = ""):
        if isinstance(issues, str):
            issues = [Issue(path, issues, code)]
        elif isinstance(issues, Issue):
            issues = [issues]
        self.issues: list[Issue] = list(issues)
        super().__init__(self._render())

    def _render(self) -> str:
        if len(self.issues) == 1:
            return f"invalid {self.what}: {self.issues[0]}"
        lines = [f"invalid {self.what}: {len(self.issues)} problems"]
        lines += [f"  - {issue}" for issue in self.issues]
        return "\n".join(lines)

    @property
    def codes(self) -> list[str]:
        return [issue.code for issue in self.issues]


class ContextPolicyError(_IssueError):
    """A policy (or its use with a plan, handlers and counter) is not valid.

    ``.issues`` lists every problem at once, each with a JSON path and a stable code.
    """

    what = "context policy"


class ContextPlanError(_IssueError):
    """A plan, a fragment or a message is not valid.

    The path names the fragment and the message index: ``fragments[history].messages[12].role``.
    """

    what = "context plan"

    @classmethod
    def for_message(
        cls, index: int, message: str, *, fragment_id: str | None = None, field: str = "",
        code: str = "invalid-message",
    ) -> ContextPlanError:
        prefix = f"fragments[{fragment_id}]." if fragment_id is not None else ""
        path = f"{prefix}messages[{index}]" + (f".{field}" if field else "")
        err = cls([Issue(path, message, code)])
        err.fragment_id = fragment_id
        err.index = index
        return err

    fragment_id: str | None = None
    index: int | None = None


class ContextContractError(ContextError):
    """A policy implementation broke the input contract the core enforces.

    Protected fragments must stay byte-identical and in order, and no fragment may be invented.
    """


class ContextAuditError(ContextError):
    """The App changed fragments outside the declared mutable range. Carries the full report."""

    def __init__(self, report: ContextReport):
        self.report = report
        audit = report.audit
        violations = [c for c in (audit.changes if audit else []) if not c.allowed]
        lines = [f"audit failed: {len(violations)} disallowed change(s)"]
        lines += [f"  - {c.fragment_id}: {c.change} ({c.reason})" for c in violations]
        super().__init__("\n".join(lines))


class ContextStepError(ContextError):
    """A reduction step failed under ``on_step_error="raise"``. ``.step`` is its report."""

    def __init__(self, step: Any):
        self.step = step
        super().__init__(f"step {step.id!r} failed ({step.reason}): {step.message}")

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), (self.step,))


class ContextCancelledError(ContextError):
    """Processing was cancelled; nothing partial was returned."""


class InputBudgetError(ContextError):
    """The assembled input is over the hard budget. Carries both figures."""

    def __init__(self, unit: str, used: int, limit: int, usage: Usage | None = None):
        self.unit = unit
        self.used = used
        self.limit = limit
        self.usage = usage
        super().__init__(f"input is over budget: {used} {unit} used, {limit} {unit} allowed")

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), (self.unit, self.used, self.limit, self.usage))
