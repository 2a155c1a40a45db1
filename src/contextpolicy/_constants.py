"""Tables shared by the compiled kernel and its pure-Python twin.

Both kernels import these names, so a role code or a part type can never drift between them.
"""

from __future__ import annotations

from typing import Final

# Role codes, one byte per message in the kernel's output arrays.
ROLE_OTHER: Final = 0
ROLE_SYSTEM: Final = 1
ROLE_DEVELOPER: Final = 2
ROLE_USER: Final = 3
ROLE_ASSISTANT: Final = 4
ROLE_TOOL: Final = 5
ROLE_FUNCTION: Final = 6

ROLE_CODES: Final[dict[str, int]] = {
    "system": ROLE_SYSTEM,
    "developer": ROLE_DEVELOPER,
    "user": ROLE_USER,
    "assistant": ROLE_ASSISTANT,
    "tool": ROLE_TOOL,
    "function": ROLE_FUNCTION,
}
ROLE_NAMES: Final[tuple[str, ...]] = (
    "other",
    "system",
    "developer",
    "user",
    "assistant",
    "tool",
    "function",
)

# Per-message flag bits.
FLAG_OPENS_TURN: Final = 1  # a user message that is not a tool-result carrier
FLAG_TOOL_RESULT: Final = 2  # role "tool"/"function", or a user message of tool_result blocks
FLAG_TOOL_CALLS: Final = 4  # carries tool_calls entries or tool_use blocks

# Content parts whose "text" is counted.
TEXT_PART_TYPES: Final[frozenset[str]] = frozenset({"text", "input_text", "output_text"})
TOOL_RESULT_PART: Final = "tool_result"
TOOL_USE_PART: Final = "tool_use"

# Grouping kinds understood by the kernel's group functions.
GROUP_USER_TURN: Final = FLAG_OPENS_TURN
