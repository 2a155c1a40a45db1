"""The ``unknown-role`` warning: messages whose role the accounting does not know.

Roles are read as they are written and never rewritten: a turn opens only on role ``user`` (and
a tool result travels under ``tool`` or ``function``), so a transcript written with other names
(LangChain's dumps write ``human`` and ``ai``) has no turn to group by, and a trim keeps what it
cannot cut. Every such role gets one warning per fragment, at its first message, saying how
many messages carry it, which roles the accounting knows, and what to map it to.
"""

from __future__ import annotations

from ._tables import ROLE_CODES

__all__ = ["KNOWN_ROLES", "ROLE_ALIASES", "unknown_role_message"]

KNOWN_ROLES: tuple[str, ...] = tuple(ROLE_CODES)
# Names other tools write for roles the accounting knows: the hint of the warning, never a
# mapping the library applies.
ROLE_ALIASES: dict[str, str] = {
    "human": "user",  # LangChain's HumanMessage
    "ai": "assistant",  # LangChain's AIMessage
    "gpt": "assistant",  # ShareGPT
    "model": "assistant",  # Gemini
    "bot": "assistant",
    "chatbot": "assistant",  # Cohere
    "ipython": "tool",  # Llama's tool results
}


def unknown_role_message(role: str, index: int, count: int) -> str:
    """The warning's message: the role, how many messages carry it and where the first is, the
    roles the accounting knows, and the hint."""
    folded = role.strip().lower()
    target = folded if folded in ROLE_CODES else ROLE_ALIASES.get(folded)
    hint = (f"map {role!r} to {target!r} before reducing" if target is not None
            else "map it to one of those before reducing")
    carriers = "1 message" if count == 1 else f"{count} messages"
    return (
        f"role {role!r} ({carriers}, the first at index {index}) is not one the accounting "
        f"knows ({', '.join(KNOWN_ROLES)}): roles are read as written, so no turn opens on "
        f"these messages and none is paired as a tool result; {hint}"
    )
