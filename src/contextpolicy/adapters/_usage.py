"""The usage a framework reports for a model call, fed to a usage-anchored counter.

Every adapter takes ``counter=``; when it is a :func:`~contextpolicy.counters.usage_anchored`
counter, the adapter records, for each model call, the input it sent (the result's assembled
``input``) with the input tokens the framework reports for that call, so the next call's figures
start from the provider's own count. Any other counter is left alone.
"""

from __future__ import annotations

import numbers
from typing import Any

from ..counters._cached import CachedCounter
from ..counters._usage import UsageAnchoredCounter
from ..report import ContextResult

__all__ = ["anchored_counter", "record_usage"]


def anchored_counter(prepared: Any) -> UsageAnchoredCounter | None:
    """The usage-anchored counter a prepared policy counts with (itself, or inside
    :func:`~contextpolicy.counters.cached`), or ``None``."""
    counter = getattr(prepared, "counter", None)
    source = getattr(counter, "source", counter)
    source = getattr(source, "inner", source) if isinstance(source, CachedCounter) else source
    return source if isinstance(source, UsageAnchoredCounter) else None


def record_usage(counter: UsageAnchoredCounter | None, result: ContextResult | None,
                 input_tokens: Any) -> bool:
    """Record ``input_tokens`` (a framework's reported usage; anything but an int > 0 is no
    report and is skipped: a provider that sent no usage leaves 0 or nothing) as the count of
    ``result.input``; whether it was recorded."""
    if counter is None or result is None:
        return False
    if isinstance(input_tokens, bool) or not isinstance(input_tokens, numbers.Integral):
        return False
    if int(input_tokens) <= 0:
        return False
    return counter.record(result.input, int(input_tokens))
