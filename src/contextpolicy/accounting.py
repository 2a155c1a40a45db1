"""Characters and tokens: what a fragment, a plan or an assembled input actually carries.

Characters are Unicode code points of the text a message carries (the kernel's one pass).
Tokens come only from a counter the caller supplies; without one every token figure is ``None``.
The two are never derived from each other.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

import numpy as np
import numpy.typing as npt

from . import _kernel
from ._read import exact_str
from ._tables import FLAG_TOOL_CALLS, FLAG_TOOL_RESULT
from .content import plain_copy
from .errors import ContextPolicyError
from .plan import Fragment

__all__ = [
    "FragmentMeasure",
    "TokenCounter",
    "as_counter",
    "measure_fragment",
    "measure_messages",
]


@runtime_checkable
class TextCounter(Protocol):
    def count_text(self, text: str) -> int: ...


class TokenCounter:
    """A caller's token counter, normalised.

    Accepts a callable ``str -> int`` or an object with ``count_text(str) -> int`` and
    optionally ``count_messages(list) -> int`` for exact chat framing.
    """

    __slots__ = ("_count_messages", "_count_text", "source")

    def __init__(self, counter: Callable[[str], int] | TextCounter | TokenCounter) -> None:
        if isinstance(counter, TokenCounter):
            counter = counter.source
        self.source: Any = counter
        count_text = getattr(counter, "count_text", None)
        if callable(count_text):
            self._count_text = count_text
        elif callable(counter):
            self._count_text = counter
        else:
            raise ContextPolicyError(
                f"expected a callable str -> int or an object with count_text(), "
                f"got {type(counter).__name__}",
                path="counter", code="invalid-counter",
            )
        count_messages = getattr(counter, "count_messages", None)
        self._count_messages = count_messages if callable(count_messages) else None
        if inspect.iscoroutinefunction(self._count_text):
            raise ContextPolicyError(
                "count_text must be synchronous", path="counter", code="invalid-counter"
            )

    @property
    def counts_messages(self) -> bool:
        return self._count_messages is not None

    @staticmethod
    def _checked(value: Any, what: str) -> int:
        if type(value) is not int and not isinstance(value, np.integer):
            raise ContextPolicyError(
                f"{what} returned {type(value).__name__} {value!r}; expected an int",
                path="counter", code="invalid-counter-result",
            )
        if value < 0:
            raise ContextPolicyError(
                f"{what} returned {value}; expected an int >= 0",
                path="counter", code="invalid-counter-result",
            )
        return int(value)

    def count_text(self, text: str) -> int:
        return self._checked(self._count_text(text), "count_text")

    def count_messages(self, messages: list[dict[str, Any]], fragment_id: str | None = None) -> int:
        """Tokens of a message list: ``count_messages`` when the counter has it, else the sum of
        ``count_text`` over every text piece that chars counts (so both cover the same text)."""
        if self._count_messages is not None:
            # A copy: whatever the counter does to its argument, the caller's messages stay.
            return self._checked(self._count_messages(plain_copy(messages)), "count_messages")
        total = 0
        for i, message in enumerate(messages):
            for piece in _kernel.message_text_pieces(message, i, fragment_id):
                total += self.count_text(piece)
        return total


def as_counter(counter: Any) -> TokenCounter | None:
    return None if counter is None else TokenCounter(counter)


TOOL_TRAFFIC = FLAG_TOOL_CALLS | FLAG_TOOL_RESULT


@dataclass
class FragmentMeasure:
    """The measured content of one fragment: per-message arrays for a messages fragment."""

    chars: int
    messages: int
    opaque_parts: int
    tokens: int | None
    roles: npt.NDArray[np.int8] | None = None
    message_chars: npt.NDArray[np.int64] | None = None
    flags: npt.NDArray[np.uint8] | None = None
    opaque: npt.NDArray[np.int32] | None = None
    groups: dict[int, tuple[npt.NDArray[np.int64], npt.NDArray[np.int64]]] = field(
        default_factory=dict
    )

    @property
    def has_tool_traffic(self) -> bool:
        """Some message calls a tool or carries a tool result (worth a pairing check)."""
        if self.flags is None:
            return False
        if len(self.flags) < 64:
            return any(f & TOOL_TRAFFIC for f in self.flags.tolist())
        return bool(np.any(self.flags & TOOL_TRAFFIC))

    def group(self, grouping: int) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.int64]]:
        """Group offsets and chars per group (cached per grouping)."""
        if grouping not in self.groups:
            assert self.flags is not None and self.message_chars is not None
            self.groups[grouping] = _kernel.group_offsets(self.flags, self.message_chars, grouping)
        return self.groups[grouping]

    def tail(self, start: int, tokens: int | None) -> FragmentMeasure:
        """The measure of ``messages[start:]``: the same message objects, so the same figures."""
        assert self.message_chars is not None and self.flags is not None
        assert self.roles is not None and self.opaque is not None
        chars = self.message_chars[start:]
        opaque = self.opaque[start:]
        return FragmentMeasure(
            chars=_total(chars), messages=len(chars), opaque_parts=_total(opaque),
            tokens=tokens, roles=self.roles[start:], message_chars=chars,
            flags=self.flags[start:], opaque=opaque,
        )


def _total(values: npt.NDArray[Any]) -> int:
    # numpy's reduction has a fixed cost of a microsecond or two: small arrays add up faster
    # as Python ints.
    return sum(values.tolist()) if len(values) < 64 else int(values.sum())


def measure_messages(
    messages: list[dict[str, Any]], counter: TokenCounter | None = None,
    fragment_id: str | None = None,
) -> FragmentMeasure:
    """Measure a message list in one kernel pass (and count its tokens with ``counter``)."""
    roles, chars, flags, opaque = _kernel.measure_messages(messages, fragment_id)
    tokens = counter.count_messages(messages, fragment_id) if counter is not None else None
    return FragmentMeasure(
        chars=_total(chars), messages=len(chars), opaque_parts=_total(opaque),
        tokens=tokens, roles=roles, message_chars=chars, flags=flags, opaque=opaque,
    )


def measure_fragment(fragment: Fragment, counter: TokenCounter | None = None) -> FragmentMeasure:
    if fragment.text is not None:
        text = exact_str(fragment.text)
        tokens = counter.count_text(text) if counter is not None else None
        return FragmentMeasure(chars=len(text), messages=1, opaque_parts=0, tokens=tokens)
    assert fragment.messages is not None
    return measure_messages(fragment.messages, counter, fragment.id)


def sum_tokens(values: Iterable[int | None]) -> int | None:
    total = 0
    for value in values:
        if value is None:
            return None
        total += value
    return total


def assemble(fragments: Sequence[Fragment]) -> list[dict[str, Any]]:
    """The model input: a text fragment becomes one message with its role; a messages fragment
    contributes its messages (the same dict objects)."""
    out: list[dict[str, Any]] = []
    for fragment in fragments:
        if fragment.text is not None:
            out.append({"role": fragment.assembled_role, "content": fragment.text})
        else:
            assert fragment.messages is not None
            # The real storage, as the kernel measured it (a list subclass's __iter__ may lie).
            messages = fragment.messages
            out.extend(messages if type(messages) is list else list.copy(messages))
    return out
