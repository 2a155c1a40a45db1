"""The counters layer: token counters a policy's token watermarks can use.

A counter is any object with ``count_text(str) -> int`` (and optionally ``count_messages``); the
core normalises it (:class:`contextpolicy.TokenCounter`). The counters built here also carry a
``name`` (``"tiktoken:o200k_base"``) and ``exact`` (the :class:`Counter` protocol):

- :func:`tiktoken_counter` -- OpenAI's ``o200k_base`` and ``cl100k_base``, exact and offline
  (extra ``[tiktoken]``);
- :func:`hf_counter` -- a Hugging Face ``tokenizer.json``, optionally with the model's chat
  template for exact framing (extra ``[hf]``);
- :func:`cached` -- any counter, each distinct text counted once;
- :func:`usage_anchored` -- tokens as the provider counts them: the input tokens it reported for
  an earlier input, plus what came after by a local counter (or by :func:`estimate`, the one
  counter that estimates, for a model with no offline tokenizer).

Nothing approximate is ever used unless asked for by name. Counters backed by a tokenizer
library import that library only when built, so importing this package costs nothing.
"""

from ._base import Counter
from ._cached import cached
from ._hf import hf_counter
from ._tiktoken import tiktoken_counter
from ._usage import InputCount, UsageAnchoredCounter, estimate, usage_anchored

__all__ = ["Counter", "InputCount", "UsageAnchoredCounter", "cached", "estimate", "hf_counter",
           "tiktoken_counter", "usage_anchored"]
