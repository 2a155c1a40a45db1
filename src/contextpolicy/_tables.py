"""Every table the kernels share, written once.

The pure-Python twin imports these names; the compiled kernel is built against a C header that
``setup.py`` generates from this module (:func:`c_header`), so a role code, a part type or a
grouping code can never drift between them. The compiled module reports the tables it was built
with (``_kernel_c.TABLES``), and a test compares them with :func:`tables`.

This module imports nothing but the standard library: ``setup.py`` runs it before the package
exists.
"""

from __future__ import annotations

from typing import Final

# Role codes, one byte per message in the kernel's output arrays. Unknown roles are ROLE_OTHER.
ROLE_OTHER: Final = 0
ROLE_SYSTEM: Final = 1
ROLE_DEVELOPER: Final = 2
ROLE_USER: Final = 3
ROLE_ASSISTANT: Final = 4
ROLE_TOOL: Final = 5
ROLE_FUNCTION: Final = 6

ROLE_NAMES: Final[tuple[str, ...]] = (
    "other",
    "system",
    "developer",
    "user",
    "assistant",
    "tool",
    "function",
)
# "other" is the code of every role not listed, never a role name of its own.
ROLE_CODES: Final[dict[str, int]] = {name: code for code, name in enumerate(ROLE_NAMES) if code}
# Roles that lead a transcript and become its system fragment (ContextPlan.from_messages).
INSTRUCTION_ROLES: Final[tuple[str, ...]] = ("system", "developer")
INSTRUCTION_ROLE_CODES: Final[frozenset[int]] = frozenset({ROLE_SYSTEM, ROLE_DEVELOPER})
# Roles whose messages carry tool results.
TOOL_RESULT_ROLES: Final[frozenset[str]] = frozenset({"tool", "function"})

# Per-message flag bits.
FLAG_OPENS_TURN: Final = 1  # a user message that is not a tool-result carrier
FLAG_TOOL_RESULT: Final = 2  # role "tool"/"function", or a user message of tool_result blocks
FLAG_TOOL_CALLS: Final = 4  # carries tool_calls entries or tool_use blocks
FLAG_GLUES_NEXT: Final = 8  # a reasoning item: no group boundary between it and the next item
# A chat message whose role is none of ROLE_CODES (a Responses item that is no message is not).
FLAG_UNKNOWN_ROLE: Final = 16
FLAGS: Final[dict[str, int]] = {
    "opens_turn": FLAG_OPENS_TURN,
    "tool_result": FLAG_TOOL_RESULT,
    "tool_calls": FLAG_TOOL_CALLS,
    "glues_next": FLAG_GLUES_NEXT,
    "unknown_role": FLAG_UNKNOWN_ROLE,
}

# Content part types, by what the kernel does with them; any other type (an image, a
# redacted_thinking or compaction block, ...) is an opaque part. Text parts carry ``text``
# (Responses reasoning items hold summary_text and reasoning_text parts); an Anthropic thinking
# block carries ``thinking`` (its signature is not text).
TEXT_PART_TYPES: Final[tuple[str, ...]] = (
    "text", "input_text", "output_text", "summary_text", "reasoning_text",
)
TOOL_RESULT_PART: Final = "tool_result"
TOOL_USE_PART: Final = "tool_use"
THINKING_PART: Final = "thinking"
PART_OTHER: Final = 0
PART_TEXT: Final = 1
PART_TOOL_RESULT: Final = 2
PART_TOOL_USE: Final = 3
PART_THINKING: Final = 4
PART_CODES: Final[dict[str, int]] = {
    **dict.fromkeys(TEXT_PART_TYPES, PART_TEXT),
    TOOL_RESULT_PART: PART_TOOL_RESULT,
    TOOL_USE_PART: PART_TOOL_USE,
    THINKING_PART: PART_THINKING,
}

# OpenAI Responses input items, by the ``type`` of a message-level dict. A dict whose type is
# one of these is that item whatever else it holds; ``message`` (or no type) is a chat message
# read by its role; a dict with any other string type and no role is an unknown item, passed
# through as one opaque part inside its turn. Calls count their name and arguments (or input)
# and are paired with their outputs by ``call_id``; an output counts its ``output``; a
# reasoning item counts its summary and content text and is glued to the item after it.
ITEM_MESSAGE: Final = 0
ITEM_CALL: Final = 1
ITEM_OUTPUT: Final = 2
ITEM_REASONING: Final = 3
ITEM_UNKNOWN: Final = 4
CALL_ITEM_TYPES: Final[tuple[str, ...]] = (
    "function_call", "custom_tool_call", "computer_call", "local_shell_call", "shell_call",
    "apply_patch_call",
)
ITEM_CODES: Final[dict[str, int]] = {
    "message": ITEM_MESSAGE,
    **dict.fromkeys(CALL_ITEM_TYPES, ITEM_CALL),
    **dict.fromkeys((t + "_output" for t in CALL_ITEM_TYPES), ITEM_OUTPUT),
    "reasoning": ITEM_REASONING,
}

# Grouping codes of the kernel's group functions, by the policy's grouping kind.
GROUP_USER_TURN: Final = 0
GROUP_MESSAGE: Final = 1
GROUPING_CODES: Final[dict[str, int]] = {"user-turn": GROUP_USER_TURN, "message": GROUP_MESSAGE}

# How deep tool_result blocks may nest (a block in the content of a block ...). Deeper nesting,
# and a content list that contains itself, is a ContextPlanError on both kernels.
MAX_NESTING: Final = 100

# Why a triggered reduce missed its target (a report's ``missedReason``), in order of
# precedence: when several hold, a run's reason is the first of them. A kernel's code for a
# reason is its index + 1, and 0 is none.
MISSED_REASONS: Final[tuple[str, ...]] = (
    "protected-over-target", "step-failed", "keep-groups-floor", "no-step-could-act",
)
MISSED_NONE: Final = 0
MISSED_PROTECTED_OVER_TARGET: Final = 1
MISSED_STEP_FAILED: Final = 2
MISSED_KEEP_GROUPS_FLOOR: Final = 3
MISSED_NO_STEP_COULD_ACT: Final = 4


# reduce_lines' figures of a line, one int64 column each, in this order: whether the line was
# handled (read as bytes), triggered, reached its target; chars and messages before and after;
# the messages and groups removed; its orphan tool results and unanswered calls; whether it was
# reduced (chars or messages went down); one column per missed reason (1 for the line's, if it
# missed its target); its unknown-role warnings. Both kernels write by these names' places (the
# compiled one through CP_FIGURE_* of the generated header) and the JSONL engine reads by them.
LINE_FIGURES: Final[tuple[str, ...]] = (
    "handled", "triggered", "reached", "chars_before", "chars_after", "messages_before",
    "messages_after", "messages_removed", "groups_removed", "orphan_results",
    "unanswered_calls", "reduced",
    *(f"missed_{reason.replace('-', '_')}" for reason in MISSED_REASONS),
    "unknown_roles",
)
LINE_FIGURE: Final[dict[str, int]] = {name: i for i, name in enumerate(LINE_FIGURES)}
# Where the missed reasons' columns are.
LINE_MISSED: Final = slice(LINE_FIGURE["reduced"] + 1, LINE_FIGURE["unknown_roles"])


def missed_code(over_target: bool, failed: bool, floor: bool) -> int:
    """The code of a missed target's reason: what no step may reduce is over a target
    (``over_target``), else a step failed, else a trim's ``keepGroups`` floor kept its fragment
    above its target (``floor``), else no step could act."""
    return (over_target, failed, floor, True).index(True) + 1


# How deep a value measured by its compact JSON (a tool_use input, non-string arguments) may
# nest arrays and objects: 1,024 levels, the most orjson reads, so that every value a JSONL line
# can hold is measured exactly. A deeper value, and one that contains itself, is a
# ContextPlanError (too-deep) on both kernels, whatever the interpreter's stack allows.
MAX_JSON_DEPTH: Final = 1024

# JSON's whitespace (RFC 8259: space, tab, line feed, carriage return): what may surround a
# value, and all a blank JSONL line may hold (empty, or only these; its line feed ends it). No
# other byte is whitespace to JSON (a vertical tab, a form feed, U+0085 or U+00A0 in UTF-8):
# a line holding one is a line, read as JSON like any other.
JSON_WHITESPACE: Final = b" \t\n\r"

# Message and part keys the kernels recognise, by their text, in one pass over a dict.
KEYS: Final[tuple[str, ...]] = (
    "role", "content", "tool_calls", "type", "text", "name", "input", "function", "arguments",
    "id", "tool_call_id", "tool_use_id", "call_id", "output", "summary", "thinking",
    "encrypted_content",
)


def tables() -> dict[str, object]:
    """The tables as plain data: what the compiled kernel's ``TABLES`` must equal."""
    return {
        "roles": dict(ROLE_CODES),
        "flags": dict(FLAGS),
        "parts": dict(PART_CODES),
        "items": dict(ITEM_CODES),
        "groups": dict(GROUPING_CODES),
        "keys": list(KEYS),
        "max_nesting": MAX_NESTING,
        "missed": list(MISSED_REASONS),
        "line_figures": list(LINE_FIGURES),
        "max_json_depth": MAX_JSON_DEPTH,
        "json_whitespace": JSON_WHITESPACE,
    }


def _c_name(name: str) -> str:
    return name.upper().replace("-", "_")


def _matcher(function: str, codes: dict[str, int], default: str) -> list[str]:
    """A C function from (chars, length) to a code: a switch on the length, then memcmp."""
    lines = [
        f"static inline int {function}(const char *s, Py_ssize_t n) {{",
        "    switch (n) {",
    ]
    by_length: dict[int, list[tuple[str, int]]] = {}
    for name, code in codes.items():
        by_length.setdefault(len(name), []).append((name, code))
    for length in sorted(by_length):
        lines.append(f"    case {length}:")
        for name, code in by_length[length]:
            lines.append(f'        if (memcmp(s, "{name}", {length}) == 0) return {code};')
        lines.append("        break;")
    lines += ["    }", f"    return {default};", "}"]
    return lines


def c_header() -> str:
    """The C header of these tables, for the compiled kernel (generated by ``setup.py``)."""
    out = [
        "/* Generated from contextpolicy/_tables.py by setup.py; edit that module instead. */",
        "#ifndef CONTEXTPOLICY_TABLES_H",
        "#define CONTEXTPOLICY_TABLES_H",
        "#include <Python.h>",
        "#include <string.h>",
        "",
    ]
    out += [f"#define CP_ROLE_{_c_name(name)} {code}" for code, name in enumerate(ROLE_NAMES)]
    out += [f"#define CP_FLAG_{_c_name(name)} {bit}" for name, bit in FLAGS.items()]
    out += [
        f"#define CP_PART_OTHER {PART_OTHER}",
        f"#define CP_PART_TEXT {PART_TEXT}",
        f"#define CP_PART_TOOL_RESULT {PART_TOOL_RESULT}",
        f"#define CP_PART_TOOL_USE {PART_TOOL_USE}",
        f"#define CP_PART_THINKING {PART_THINKING}",
        f"#define CP_ITEM_MESSAGE {ITEM_MESSAGE}",
        f"#define CP_ITEM_CALL {ITEM_CALL}",
        f"#define CP_ITEM_OUTPUT {ITEM_OUTPUT}",
        f"#define CP_ITEM_REASONING {ITEM_REASONING}",
        f"#define CP_ITEM_UNKNOWN {ITEM_UNKNOWN}",
    ]
    out += [f"#define CP_GROUP_{_c_name(kind)} {code}" for kind, code in GROUPING_CODES.items()]
    out += [f"#define CP_MAX_NESTING {MAX_NESTING}",
            f"#define CP_MAX_JSON_DEPTH {MAX_JSON_DEPTH}"]
    space = " || ".join(f"(c) == {byte}" for byte in JSON_WHITESPACE)
    out += [f"#define CP_JSON_WHITESPACE(c) ({space})",
            f"#define CP_JSON_WHITESPACE_COUNT {len(JSON_WHITESPACE)}",
            "static const unsigned char cp_json_whitespace[] = "
            f"{{{', '.join(map(str, JSON_WHITESPACE))}}};"]
    out += [f"#define CP_MISSED_{_c_name(reason)} {code + 1}"
            for code, reason in enumerate(MISSED_REASONS)]
    out += ["#define CP_MISSED_NONE 0"]
    out += [f"#define CP_FIGURE_{_c_name(name)} {i}" for i, name in enumerate(LINE_FIGURES)]
    out += [f"#define CP_FIGURE_COUNT {len(LINE_FIGURES)}",
            f"#define CP_FIGURE_MISSED {LINE_MISSED.start}"]
    out += [f"#define CP_KEY_{_c_name(key)} {i + 1}" for i, key in enumerate(KEYS)]
    out += ["#define CP_KEY_OTHER 0", f"#define CP_KEY_COUNT {len(KEYS) + 1}", ""]
    out += [*_matcher("cp_role_code", ROLE_CODES, "CP_ROLE_OTHER"), ""]
    out += [*_matcher("cp_part_code", PART_CODES, "CP_PART_OTHER"), ""]
    out += [*_matcher("cp_item_code", ITEM_CODES, "CP_ITEM_UNKNOWN"), ""]
    out += [*_matcher("cp_key_code", {k: i + 1 for i, k in enumerate(KEYS)}, "CP_KEY_OTHER"), ""]
    # The tables as data, so the compiled module can report what it was built with.
    names = ", ".join(f'"{name}"' for name in ROLE_NAMES)
    parts = ", ".join(f'"{name}"' for name in PART_CODES)
    part_codes = ", ".join(str(code) for code in PART_CODES.values())
    flag_names = ", ".join(f'"{name}"' for name in FLAGS)
    flag_bits = ", ".join(str(bit) for bit in FLAGS.values())
    groups = ", ".join(f'"{kind}"' for kind in GROUPING_CODES)
    group_codes = ", ".join(str(code) for code in GROUPING_CODES.values())
    keys = ", ".join(f'"{key}"' for key in KEYS)
    items = ", ".join(f'"{name}"' for name in ITEM_CODES)
    missed = ", ".join(f'"{reason}"' for reason in MISSED_REASONS)
    figure_names = ", ".join(f'"{name}"' for name in LINE_FIGURES)
    item_codes = ", ".join(str(code) for code in ITEM_CODES.values())
    out += [
        f"#define CP_ROLE_COUNT {len(ROLE_NAMES)}",
        f"static const char *const cp_role_names[] = {{{names}}};",
        f"#define CP_PART_COUNT {len(PART_CODES)}",
        f"static const char *const cp_part_names[] = {{{parts}}};",
        f"static const int cp_part_codes[] = {{{part_codes}}};",
        f"#define CP_ITEM_COUNT {len(ITEM_CODES)}",
        f"static const char *const cp_item_names[] = {{{items}}};",
        f"static const int cp_item_codes[] = {{{item_codes}}};",
        f"#define CP_FLAG_COUNT {len(FLAGS)}",
        f"static const char *const cp_flag_names[] = {{{flag_names}}};",
        f"static const int cp_flag_bits[] = {{{flag_bits}}};",
        f"#define CP_GROUP_COUNT {len(GROUPING_CODES)}",
        f"static const char *const cp_group_names[] = {{{groups}}};",
        f"static const int cp_group_codes[] = {{{group_codes}}};",
        f"static const char *const cp_key_names[] = {{{keys}}};",
        f"#define CP_MISSED_COUNT {len(MISSED_REASONS)}",
        f"static const char *const cp_missed_names[] = {{{missed}}};",
        f"static const char *const cp_figure_names[] = {{{figure_names}}};",
        "",
        "#endif",
        "",
    ]
    return "\n".join(out)
