"""What every counter of this layer shares: the :class:`Counter` protocol, the check of the
text it is given and of the figure an inner counter returns, and the import of an extra."""

from __future__ import annotations

import importlib
import numbers
from types import ModuleType
from typing import Any, Protocol, runtime_checkable

from .._read import exact_str
from ..errors import ContextPolicyError

__all__ = ["Counter", "checked_count", "exact_text", "import_extra", "well_formed"]


@runtime_checkable
class Counter(Protocol):
    """A token counter: ``count_text(str) -> int``, a ``name`` the report can show
    (``"tiktoken:o200k_base"``) and ``exact``, whether its figures are the tokenizer's own.

    Counters may also have ``count_texts(list[str]) -> list[int]`` (one call for many texts) and
    ``count_messages(list[dict]) -> int`` (exact chat framing); the core uses the latter for a
    messages fragment when it is there.
    """

    name: str
    exact: bool

    def count_text(self, text: str) -> int: ...


def exact_text(text: Any) -> str:
    """``text`` as an exact str (the text a str subclass holds, whatever its methods say), or a
    :class:`ContextPolicyError` saying what was given instead."""
    if type(text) is str:
        return text
    if isinstance(text, str):
        return exact_str(text)
    raise ContextPolicyError(
        f"count_text expects a str, got {type(text).__name__}", path="text",
        code="expected-string",
    )


def well_formed(text: str) -> str:
    """``text`` with each lone surrogate replaced by U+FFFD (a surrogate pair joined into its
    character), as tiktoken does before encoding: UTF-8 cannot carry a lone surrogate."""
    return text.encode("utf-16", "surrogatepass").decode("utf-16", "replace")


def checked_count(value: Any, what: str) -> int:
    """An inner counter's figure as an int >= 0, or a :class:`ContextPolicyError` (a float, a
    bool or a negative figure is never taken)."""
    if type(value) is not int:
        if isinstance(value, bool) or not isinstance(value, numbers.Integral):
            raise ContextPolicyError(
                f"{what} returned {type(value).__name__} {value!r}; expected an int",
                path="counter", code="invalid-counter-result",
            )
        value = int(value)  # a numpy integer
    if value < 0:
        raise ContextPolicyError(
            f"{what} returned {value}; expected an int >= 0", path="counter",
            code="invalid-counter-result",
        )
    return value


def import_extra(module: str, *, package: str, extra: str, what: str) -> ModuleType:
    """Import ``module`` of an optional extra, or raise an :class:`ImportError` that says which
    extra to install."""
    try:
        return importlib.import_module(module)
    except ImportError as exc:
        raise ImportError(
            f"{what} needs {package}: pip install \"contextpolicy[{extra}]\""
        ) from exc
