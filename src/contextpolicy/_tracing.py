"""Where :func:`contextpolicy.telemetry.instrument` hangs its span maker.

The core reads :data:`hook` on every call (one attribute load when tracing is off) and never
imports OpenTelemetry: :mod:`contextpolicy.telemetry` does, when it is switched on. A span
covers a whole call: what the call runs inside it (the stable cut's replayed runs, a handler's
own ``process_context``) sets :data:`QUIET` and makes no span of its own.
"""

from __future__ import annotations

from contextvars import ContextVar
from typing import Any

# The span maker (a telemetry._Spans), or None: tracing is off.
hook: Any = None
# Set inside a traced call: the calls it makes are parts of its span, not spans of their own.
QUIET: ContextVar[bool] = ContextVar("contextpolicy_quiet", default=False)


def active() -> Any:
    """The span maker when this call is to be traced, ``None`` otherwise."""
    found = hook
    if found is None or QUIET.get():
        return None
    return found
