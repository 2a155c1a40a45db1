"""What every built-in compress handler is: a small object holding its parameters.

A handler is called with a :class:`~contextpolicy.CompressRequest` and returns content of the
same shape. The built-in ones are instances of classes, never closures, so that they pickle (the
command line's worker processes receive them that way) and compare and print by their
parameters. The core recognises them (``isinstance(handler, BuiltinHandler)``) to measure what
their step did in figures (:class:`~contextpolicy.report.CompressFigures`), from the step's
input and output, never from anything the handler says about itself.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, ClassVar

from pydantic import BaseModel

if TYPE_CHECKING:
    from ..implementations.base import CompressRequest

__all__ = ["BuiltinHandler", "batched"]


class BuiltinHandler:
    """Base class of the built-in handlers: ``kind`` names what it does (one of
    ``BUILTIN_IDS``), ``handler_id`` is the id a policy's ``handlerId`` names it by (its kind
    unless given), ``params`` its validated parameters."""

    kind: ClassVar[str]
    factory: ClassVar[str]  # the name of the function that makes one, for repr

    def __init__(self, params: BaseModel, handler_id: str | None = None) -> None:
        if handler_id is not None and (type(handler_id) is not str or not handler_id):
            raise TypeError(f"handler_id: expected a non-empty str, got {handler_id!r}")
        self.params = params
        self.handler_id = handler_id if handler_id is not None else self.kind

    def _arguments(self) -> dict[str, Any]:
        return {name: getattr(self.params, name) for name in type(self.params).model_fields}

    def __repr__(self) -> str:
        args = [f"{k}={v!r}" for k, v in self._arguments().items()]
        if self.handler_id != self.kind:
            args.append(f"handler_id={self.handler_id!r}")
        return f"{self.factory}({', '.join(args)})"

    def __eq__(self, other: object) -> bool:
        if type(other) is not type(self):
            return NotImplemented
        assert isinstance(other, BuiltinHandler)
        return (self.handler_id, self.params) == (other.handler_id, other.params)

    def __hash__(self) -> int:
        return hash((type(self), self.handler_id, self.params))


def batched(request: CompressRequest, before: Any, after: Any, least: int) -> Any:
    """``after`` (what a handler made of ``before``, the request's content) when it is at
    least ``least`` smaller than ``before`` (tokens with the request's counter, chars
    otherwise), else ``before`` as it was (a new list of its messages): a handler that waits
    until it can take a batch at once rewrites the history at a few calls, not at each one."""
    if least <= 0 or after is before:
        return after
    counter = request.counter
    if isinstance(before, str):
        gain = (counter.count_text(before) - counter.count_text(after)) if counter is not None \
            else len(before) - len(after)
        return after if gain >= least else before
    from ..accounting import measure_messages

    if counter is not None:
        gain = counter.count_messages(before) - counter.count_messages(after)
    else:
        gain = measure_messages(before).chars - measure_messages(after).chars
    return after if gain >= least else list(before)
