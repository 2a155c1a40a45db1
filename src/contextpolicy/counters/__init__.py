"""The counters layer: token counters a policy's token watermarks can use.

A counter is any object with ``count_text(str) -> int`` (and optionally ``count_messages``); the
core normalises it (:class:`contextpolicy.TokenCounter`). Counters backed by a tokenizer library
import that library only when built.
"""

__all__: list[str] = []
