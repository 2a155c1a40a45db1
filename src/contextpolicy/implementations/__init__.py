"""The replaceable policy implementations: ``validate``, ``reduce`` and ``audit``.

``base`` is the interface they receive and return (:class:`PolicyContext`,
:class:`PolicyOutcome`, :class:`CompressRequest`); each mode's default implementation has a
module of its name. A caller replaces one with ``process_context(..., implementations={"reduce":
my_reduce})``; whichever runs, the core enforces the input contract and measures the result.
"""

from collections.abc import Callable, Mapping
from typing import Any

from .audit import audit
from .base import CompressRequest, PolicyContext, PolicyOutcome
from .reduce import reduce
from .validate import validate

__all__ = [
    "DEFAULT_IMPLEMENTATIONS",
    "CompressRequest",
    "Implementation",
    "PolicyContext",
    "PolicyOutcome",
    "audit",
    "reduce",
    "validate",
]

Implementation = Callable[[PolicyContext], Any]
DEFAULT_IMPLEMENTATIONS: Mapping[str, Implementation] = {
    "validate": validate,
    "reduce": reduce,
    "audit": audit,
}
