"""Characters and tokens: what a fragment, a plan or an assembled input actually carries.

Characters are Unicode code points of the text a message carries (the kernel's one pass).
Tokens come only from a counter the caller supplies; without one every token figure is ``None``.
The two are never derived from each other.
"""

from __future__ import annotations

import inspect
import sys
from collections.abc import Callable, Iterable, Sequence
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from . import _kernel
from ._read import exact_str
from .content import plain_copy
from .errors import ContextPolicyError
from .plan import Fragment

if TYPE_CHECKING:  # numpy is imported where an array is made, never with this module
    import numpy as np
    import numpy.typing as npt

__all__ = [
    "FragmentMeasure",
    "TokenCounter",
    "as_counter",
    "input_count",
    "input_tokens",
    "measure_fragment",
    "measure_messages",
]


def _is_numpy_integer(value: Any) -> bool:
    # A numpy integer (np.int64, ...): none can exist before numpy is imported.
    numpy = sys.modules.get("numpy")
    return numpy is not None and isinstance(value, numpy.integer)


@runtime_checkable
class TextCounter(Protocol):
    def count_text(self, text: str) -> int: ...


class TokenCounter:
    """A caller's token counter, normalised.

    Accepts a callable ``str -> int`` or an object with ``count_text(str) -> int`` and
    optionally ``count_messages(list) -> int`` for exact chat framing. ``name`` is the
    counter's own ``name`` (else the name of its function or type), the one a report gives;
    ``exact`` its own ``exact`` (``None`` when it does not say).
    """

    __slots__ = ("_count_input", "_count_messages", "_count_text", "_count_texts", "exact", "name",
                 "source")

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
        count_texts = getattr(counter, "count_texts", None)
        self._count_texts = count_texts if callable(count_texts) else None
        count_input = getattr(counter, "count_input", None)
        self._count_input = (count_input if callable(count_input)
                             and self._count_messages is not None else None)
        name = getattr(counter, "name", None)
        if not isinstance(name, str) or not name:
            name = getattr(counter, "__qualname__", None) or type(counter).__qualname__
        self.name: str = str(name)
        exact = getattr(counter, "exact", None)
        self.exact: bool | None = exact if isinstance(exact, bool) else None
        if inspect.iscoroutinefunction(self._count_text):
            raise ContextPolicyError(
                "count_text must be synchronous", path="counter", code="invalid-counter"
            )

    @property
    def counts_messages(self) -> bool:
        return self._count_messages is not None

    @staticmethod
    def _checked(value: Any, what: str) -> int:
        if type(value) is not int and not _is_numpy_integer(value):
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
        return int(self.message_tokens(messages, fragment_id).sum())

    def count_input(self, messages: list[dict[str, Any]]) -> tuple[int, bool, int | None]:
        """Tokens of an assembled model input, whether the figure is measured, and the part of it
        a provider reported: a counter's own ``count_input`` (:func:`~contextpolicy.counters.
        usage_anchored`) says so per figure; any other counter's figure is exact when the
        counter says it is (``exact``), and none of it is reported."""
        if self._count_input is None:
            return self.count_messages(messages), self.exact is True, None
        figure = self._count_input(plain_copy(messages))
        if not isinstance(figure, tuple) or tuple.__len__(figure) != 3:
            raise ContextPolicyError(
                f"count_input returned {type(figure).__name__}; expected (tokens, exact, "
                f"reported)", path="counter", code="invalid-counter-result",
            )
        tokens, exact, reported = tuple.__iter__(figure)
        tokens = self._checked(tokens, "count_input")
        if reported is not None:
            reported = self._checked(reported, "count_input")
        return tokens, exact is True, reported

    def count_pieces(self, pieces: list[str]) -> list[int]:
        """Tokens of each text piece: one ``count_texts`` call when the counter has it (a
        whole fragment at once), else ``count_text`` piece by piece."""
        if self._count_texts is None:
            count = self.count_text
            return [count(piece) for piece in pieces]
        # A copy: whatever the counter does to its argument, the pieces stay.
        figures = self._count_texts(list(pieces))
        if type(figures) is not list or len(figures) != len(pieces):
            raise ContextPolicyError(
                f"count_texts returned {type(figures).__name__} for {len(pieces)} texts; "
                f"expected a list of {len(pieces)} ints",
                path="counter", code="invalid-counter-result",
            )
        if not set(map(type, figures)) <= {int}:
            return [self._checked(v, "count_texts") for v in figures]
        if figures and min(figures) < 0:
            self._checked(min(figures), "count_texts")
        return figures

    def message_tokens(
        self, messages: list[dict[str, Any]], fragment_id: str | None = None
    ) -> npt.NDArray[np.int64]:
        """Tokens of each message: the sum of the counter over its text pieces (the text that
        chars counts), all of a fragment's pieces counted in one :meth:`count_pieces`."""
        pieces, ends = _kernel.text_pieces(messages, fragment_id)
        figures = self.count_pieces(pieces)
        if sum(figures) > 2**63 - 1:  # exact in Python: numpy would wrap
            raise ContextPolicyError(
                "the counter's figures add up past 64 bits", path="counter",
                code="invalid-counter-result",
            )
        import numpy as np

        sums = np.zeros(len(pieces) + 1, dtype=np.int64)
        np.cumsum(np.asarray(figures, dtype=np.int64), out=sums[1:])
        at = np.asarray(ends, dtype=np.int64)
        return sums[at] - sums[np.concatenate((np.zeros(1, np.int64), at[:-1]))]


def as_counter(counter: Any) -> TokenCounter | None:
    return None if counter is None else TokenCounter(counter)


class FragmentMeasure:
    """The measured content of one fragment: ``chars``, ``messages``, ``opaque_parts``,
    ``tokens``, and for a messages fragment ``kernel``, the kernel's :class:`Measure` of its
    messages (per message role, chars, flags and opaque parts; ``roles``, ``message_chars``,
    ``flags`` and ``opaque`` give them as numpy arrays)."""

    __slots__ = ("_arrays", "chars", "kernel", "message_tokens", "messages", "opaque_parts",
                 "tokens")

    def __init__(
        self, chars: int, messages: int, opaque_parts: int, tokens: int | None,
        kernel: Any = None,
    ) -> None:
        self.chars = chars
        self.messages = messages
        self.opaque_parts = opaque_parts
        self.tokens = tokens
        self.kernel = kernel
        # Tokens per message, for a counter without framing: a tail's tokens without recounting.
        self.message_tokens: npt.NDArray[np.int64] | None = None
        self._arrays: tuple[Any, ...] | None = None

    @classmethod
    def of(cls, kernel: Any, tokens: int | None) -> FragmentMeasure:
        """The figures of a kernel measure."""
        return cls(kernel.chars, kernel.messages, kernel.opaque_parts, tokens, kernel)

    def __repr__(self) -> str:
        return (f"FragmentMeasure(chars={self.chars}, messages={self.messages}, "
                f"opaque_parts={self.opaque_parts}, tokens={self.tokens})")

    @property
    def has_tool_traffic(self) -> bool:
        """Some message calls a tool or carries a tool result (worth a pairing check)."""
        return self.kernel is not None and bool(self.kernel.tool_traffic)

    def _array(self, i: int) -> Any:
        if self.kernel is None:
            return None
        if self._arrays is None:
            self._arrays = self.kernel.arrays()
        return self._arrays[i]

    @property
    def roles(self) -> npt.NDArray[np.int8] | None:
        return self._array(0)  # type: ignore[no-any-return]

    @property
    def message_chars(self) -> npt.NDArray[np.int64] | None:
        return self._array(1)  # type: ignore[no-any-return]

    @property
    def flags(self) -> npt.NDArray[np.uint8] | None:
        return self._array(2)  # type: ignore[no-any-return]

    @property
    def opaque(self) -> npt.NDArray[np.int32] | None:
        return self._array(3)  # type: ignore[no-any-return]

    def tail(self, start: int, tokens: int | None = None) -> FragmentMeasure:
        """The measure of ``messages[start:]``: the same message objects, so the same figures
        (its tokens from the per-message figures when they were counted, else ``tokens``)."""
        assert self.kernel is not None
        per = self.message_tokens
        if per is not None:
            tokens = int(per[start:].sum())
        out = FragmentMeasure.of(self.kernel.tail(start), tokens)
        out.message_tokens = None if per is None else per[start:]
        return out


def measure_messages(
    messages: list[dict[str, Any]], counter: TokenCounter | None = None,
    fragment_id: str | None = None,
) -> FragmentMeasure:
    """Measure a message list in one kernel pass (and count its tokens with ``counter``)."""
    kernel = _kernel.measure(messages, fragment_id)
    if counter is None or counter.counts_messages:
        tokens = counter.count_messages(messages, fragment_id) if counter is not None else None
        return FragmentMeasure.of(kernel, tokens)
    per = counter.message_tokens(messages, fragment_id)
    out = FragmentMeasure.of(kernel, int(per.sum()))
    out.message_tokens = per
    return out


def measure_fragment(fragment: Fragment, counter: TokenCounter | None = None) -> FragmentMeasure:
    if fragment.text is not None:
        text = exact_str(fragment.text)
        tokens = counter.count_text(text) if counter is not None else None
        return FragmentMeasure(len(text), 1, 0, tokens)
    assert fragment.messages is not None
    return measure_messages(fragment.messages, counter, fragment.id)


def input_tokens(fragments: Sequence[Fragment], measures: Sequence[FragmentMeasure],
                 counter: TokenCounter | None) -> int | None:
    """The tokens of a plan: the sum of its fragments' tokens, or, for a counter that frames
    chat messages (``count_messages``), the count of the input the fragments assemble to, so
    that framing is counted once, as the model sees it (``check_input_budget`` counts the
    same). ``None`` without a counter."""
    if counter is None:
        return None
    if counter.counts_messages:
        return counter.count_messages(assemble(fragments))
    return sum_tokens(m.tokens for m in measures)


def input_count(fragments: Sequence[Fragment], measures: Sequence[FragmentMeasure],
                counter: TokenCounter | None) -> tuple[int | None, bool | None, int | None]:
    """:func:`input_tokens`, with whether the figure is measured and the part of it a provider
    reported (:meth:`TokenCounter.count_input`); ``(None, None, None)`` without a counter."""
    if counter is None:
        return None, None, None
    if counter.counts_messages:
        return counter.count_input(assemble(fragments))
    return sum_tokens(m.tokens for m in measures), counter.exact is True, None


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
