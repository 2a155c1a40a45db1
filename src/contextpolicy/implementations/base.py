"""What a policy implementation receives and returns, and how handlers are called.

The default implementations of ``validate``, ``reduce`` and ``audit`` (modules of the same
names) are replaceable: ``process_context(..., implementations={"reduce": my_reduce})``. An
implementation takes a :class:`PolicyContext` and returns a :class:`PolicyOutcome` (an async
implementation may return an awaitable under ``aprocess_context``). Whatever it returns, the
core then enforces the input contract and measures the result itself.

Implementations may also be generators that yield :class:`HandlerCall` objects: the caller's
driver runs each handler (awaiting it in the async entry points) and sends back a
:class:`HandlerReply`. The default ``reduce`` works this way, so one implementation serves the
sync and the async entry points alike.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

from ..accounting import FragmentMeasure, TokenCounter, measure_fragment
from ..errors import ContextCancelledError
from ..plan import ContextPlan, Fragment

if TYPE_CHECKING:
    from ..policy import AuditPolicy, ReducePolicy, ValidatePolicy
    from ..report import AuditReport, StepReport

__all__ = [
    "CancelLike",
    "CompressRequest",
    "HandlerCall",
    "HandlerReply",
    "PolicyContext",
    "PolicyOutcome",
]


class CancelLike(Protocol):
    def is_set(self) -> bool: ...


@dataclass(frozen=True)
class CompressRequest:
    """What a compress handler receives.

    ``content`` is what to compress: the fragment's text, or its messages older than the
    newest ``keep_groups`` groups (``kept`` holds those, left verbatim). The handler returns
    content of the same shape (a str, or a list of message dicts) that should be smaller than
    ``content`` and, ideally, within ``target_chars`` for the whole fragment.
    """

    fragment: Fragment
    content: str | list[dict[str, Any]]
    kept: list[dict[str, Any]] | None
    target_chars: int
    step_id: str
    counter: TokenCounter | None
    cancel: CancelLike | None

    @property
    def is_messages(self) -> bool:
        return not isinstance(self.content, str)


@dataclass(frozen=True)
class HandlerCall:
    handler: Callable[[CompressRequest], Any]
    request: CompressRequest


@dataclass(frozen=True)
class HandlerReply:
    value: Any = None
    error: BaseException | None = None


@dataclass
class PolicyOutcome:
    """What an implementation returns: the new fragments and what it did.

    Figures in the report are measured by the core afterwards, never taken from here.
    """

    fragments: list[Fragment]
    steps: list[StepReport] = field(default_factory=list)
    triggered: bool = False
    audit: AuditReport | None = None


class PolicyContext:
    """Everything a policy implementation may use. ``measure`` is cached per fragment object."""

    def __init__(
        self,
        plan: ContextPlan,
        policy: ValidatePolicy | ReducePolicy | AuditPolicy,
        handlers: Mapping[str, Callable[[CompressRequest], Any]],
        counter: TokenCounter | None,
        cancel: CancelLike | None,
        on_step_error: str,
        emit: Callable[..., None],
        listening: bool = True,
    ) -> None:
        self.plan = plan
        self.policy = policy
        self.handlers = handlers
        self.counter = counter
        self.cancel = cancel
        self.on_step_error = on_step_error
        self._emit = emit
        # Whether anyone listens to events: an implementation builds no payload otherwise.
        self.listening = listening
        # Keyed by id(fragment); the fragment is kept alive beside its measure so ids stay unique.
        self._measures: dict[int, tuple[Fragment, FragmentMeasure]] = {}

    def emit(self, event: str, **data: Any) -> None:
        if self.listening:
            self._emit(event, data)

    def check_cancel(self) -> None:
        if self.cancel is not None and self.cancel.is_set():
            raise ContextCancelledError("context processing was cancelled")

    def measure(self, fragment: Fragment) -> FragmentMeasure:
        entry = self._measures.get(id(fragment))
        if entry is None or entry[0] is not fragment:
            entry = (fragment, measure_fragment(fragment, self.counter))
            self._measures[id(fragment)] = entry
        return entry[1]

    def remember(self, fragment: Fragment, measure: FragmentMeasure) -> None:
        """Record the measure of a fragment an implementation derived exactly (a trimmed tail)."""
        self._measures[id(fragment)] = (fragment, measure)
