"""OpenAI's encodings, exact and offline: ``o200k_base`` and ``cl100k_base`` through bpe-openai
(extra ``[tiktoken]``), whose wheel carries both encodings' ranks, so no counter ever downloads.

A counter counts as tiktoken's ``encode_ordinary`` does: special-token text such as
``<|endoftext|>`` in a message is ordinary text (counted, never an error), and a lone surrogate
is read as U+FFFD. Any object with tiktoken's ``encode_ordinary`` (a ``tiktoken.Encoding`` the
caller built) is counted through that instead.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from ..errors import ContextPolicyError
from ._base import exact_text, import_extra, well_formed

__all__ = ["ENCODINGS", "TiktokenCounter", "tiktoken_counter"]

ENCODINGS = ("o200k_base", "cl100k_base")

# A text whose count checks, once per process and encoding, that bpe-openai's private count
# still means len(encode_ordinary): punctuation, special-token text, runs of whitespace,
# digits, accents, CJK, an emoji and a contraction (figures of tiktoken 0.14).
_PROBE = "Hello, world! <|endoftext|>  \n\n\t 12345 naïve 漢字 🙂 it's"
_PROBE_TOKENS = {"o200k_base": 23, "cl100k_base": 24}

# One native tokenizer per encoding and process: counters built later share it.
_BACKENDS: dict[str, Callable[[str], int]] = {}


def _bpe_openai_count(encoding: str) -> Callable[[str], int]:
    """A function ``str -> tokens`` of ``encoding`` from bpe-openai: its native ``count`` (no
    token list is built) when the private binding has it, else
    ``len(get_encoding(encoding).encode_ordinary(text))``."""
    count = _BACKENDS.get(encoding)
    if count is not None:
        return count
    bpe_openai = import_extra(
        "bpe_openai", package="bpe-openai", extra="tiktoken", what="tiktoken_counter"
    )
    count = _native_count(encoding)
    if count is None:
        count = _length_of(bpe_openai.get_encoding(encoding).encode_ordinary)
    _BACKENDS[encoding] = count
    return count


class TiktokenCounter:
    """Tokens of an OpenAI encoding: ``count_text``, ``count_texts``, ``name``
    (``"tiktoken:o200k_base"``) and ``exact`` (always true).

    Built by :func:`tiktoken_counter`. It pickles by its encoding's name (a counter over a
    caller's encoding object, by that object) and rebuilds its tokenizer on first use, so it
    ships cheaply to worker processes.
    """

    __slots__ = ("_count", "_encoding", "encoding", "name")

    exact = True

    def __init__(self, encoding: str, source: Any = None) -> None:
        self.encoding = encoding
        self.name = f"tiktoken:{encoding}"
        # None for a named encoding of bpe-openai, else the caller's encoding object.
        self._encoding = source
        self._count: Callable[[str], int] = self._load

    def _load(self, text: str) -> int:
        if self._encoding is None:
            self._count = _bpe_openai_count(self.encoding)
        else:
            self._count = _object_count(self._encoding)
        return self._count(text)

    def count_text(self, text: str) -> int:
        """Tokens of ``text`` (``encode_ordinary`` semantics)."""
        if type(text) is not str:
            text = exact_text(text)
        try:
            return self._count(text)
        except UnicodeEncodeError:
            return self._count(well_formed(text))

    def count_texts(self, texts: Sequence[str]) -> list[int]:
        """Tokens of each text, in order."""
        count = self.count_text
        return [count(text) for text in texts]

    def __repr__(self) -> str:
        return f"tiktoken_counter({self.encoding!r})" if self._encoding is None else (
            f"tiktoken_counter({self._encoding!r})")

    def __reduce__(self) -> tuple[Any, ...]:
        if self._encoding is None:
            return (TiktokenCounter, (self.encoding,))
        return (TiktokenCounter, (self.encoding, self._encoding))


def _native_count(encoding: str) -> Callable[[str], int] | None:
    """bpe-openai's private native ``count``, when it is there and still counts the probe as
    ``encode_ordinary`` does; else ``None`` (a private API may change under us)."""
    try:
        from bpe_openai import _bindings

        count: Callable[[str], int] = _bindings.tokenizer_for_encoding(encoding).count
        if count(_PROBE) == _PROBE_TOKENS[encoding]:
            return count
    except Exception:
        pass
    return None


def _length_of(encode: Callable[[str], Sequence[int]]) -> Callable[[str], int]:
    def count(text: str) -> int:
        return len(encode(text))
    return count


def _object_count(encoding: Any) -> Callable[[str], int]:
    """``len(encoding.encode_ordinary(text))``, or of ``encode(text, disallowed_special=())``
    for an object with tiktoken's ``encode`` only."""
    encode_ordinary = getattr(encoding, "encode_ordinary", None)
    if callable(encode_ordinary):
        return _length_of(encode_ordinary)
    encode = encoding.encode
    return _length_of(lambda text: encode(text, disallowed_special=()))


def tiktoken_counter(encoding: Any = "o200k_base") -> TiktokenCounter:
    """An exact, offline counter of an OpenAI encoding.

    ``encoding`` is ``"o200k_base"`` (GPT-4o, GPT-4.1, o-series) or ``"cl100k_base"`` (GPT-4,
    GPT-3.5), counted by bpe-openai (extra ``[tiktoken]``) from the ranks its wheel carries; or
    an object with tiktoken's ``encode_ordinary`` (or ``encode``), such as a
    ``tiktoken.Encoding``, counted through that object and named by its ``.name``.

    Special-token text in a message (``<|endoftext|>``) is counted as ordinary text, as
    ``encode_ordinary`` does, never refused.
    """
    if isinstance(encoding, str):
        name = exact_text(encoding)
        if name not in ENCODINGS:
            raise ContextPolicyError(
                f"unknown encoding {name!r}; expected one of {', '.join(ENCODINGS)} (or a "
                "tiktoken Encoding object)", path="encoding", code="unknown-encoding",
            )
        counter = TiktokenCounter(name)
        # Build now: a missing extra is an error here, not at the first count.
        counter._count = _bpe_openai_count(name)
        return counter
    if callable(getattr(encoding, "encode_ordinary", None)) or callable(
        getattr(encoding, "encode", None)
    ):
        given = getattr(encoding, "name", None)
        label = exact_text(given) if isinstance(given, str) and given else type(encoding).__name__
        counter = TiktokenCounter(label, encoding)
        counter._count = _object_count(encoding)
        return counter
    raise ContextPolicyError(
        f"expected an encoding name ({', '.join(ENCODINGS)}) or an object with tiktoken's "
        f"encode_ordinary(), got {type(encoding).__name__}", path="encoding",
        code="invalid-encoding",
    )
