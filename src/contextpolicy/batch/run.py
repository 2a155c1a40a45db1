"""What one ``reduce_table`` call needs of its policy, checked once."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from ..errors import ContextPolicyError
from ..policy import ReducePolicy
from ..prepared import PreparedPolicy, carried_options, prepare_policy
from .arrow import require_pyarrow

if TYPE_CHECKING:
    import pyarrow as pa


FAST, OBJECT = "columnar", "object"
FRAGMENTS = ("system", "history", "question")
ROW_WARNING_CODES = ("orphan-tool-result", "unanswered-tool-call")  # reduce_rows' codes


class TableRun:
    """What one ``reduce_table`` call needs of its policy, checked once."""

    def __init__(self, policy: Any, counter: Any, handlers: Mapping[str, Callable[..., Any]] | None,
                 implementations: Mapping[str, Any] | None) -> None:
        carried = carried_options(handlers, counter)
        if isinstance(policy, PreparedPolicy) and carried is not None:
            raise ContextPolicyError(carried)
        prepared = policy if isinstance(policy, PreparedPolicy) else prepare_policy(
            policy, handlers=handlers, counter=counter)
        if prepared.mode == "audit":
            raise ContextPolicyError(
                "an audit compares a plan with its original; a table of transcripts has no "
                "original (use a validate or reduce policy)", path="mode",
                code="invalid-option",
            )
        self.prepared = prepared
        self.implementations = implementations
        self.reduces = type(prepared.policy) is ReducePolicy
        self.counted = prepared.counter is not None
        # One kernel call for all rows when the policy is one the kernel runs (validate, or
        # trims by chars) and it names no fragment but the history.
        path = prepared.transcript_path if implementations is None else None
        self.steps: tuple[tuple[int, int, int], ...] | None = None
        self.fused: tuple[tuple[str, int, int, int], ...] | None = None
        self.trigger = self.watermark = -1
        if path is not None:
            self.fused = path.steps
            self.steps = tuple((g, k, t) for _fid, g, k, t in path.steps)
            self.trigger, self.watermark = path.trigger_chars, path.watermark_chars


def warning_type() -> pa.DataType:
    """The Arrow type of a figures row's ``warnings``."""
    pa = require_pyarrow()
    return pa.list_(pa.struct([
        ("code", pa.string()), ("fragment_id", pa.string()), ("index", pa.int64()),
        ("tool_call_id", pa.string()),
    ]))
