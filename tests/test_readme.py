"""The README's Python examples run as written, and print what the README shows.

Every ```python block runs in order in one namespace; a ```text block right after it is the
exact output it must print. Blocks fenced ```python extras need an optional extra (LangChain,
the OpenAI Agents SDK, the token counters): ``tests/test_readme_extras.py`` runs them, in order
in a namespace of their own, with the extras' suites.
"""

from __future__ import annotations

import contextlib
import io
import re
from pathlib import Path

README = Path(__file__).resolve().parent.parent / "README.md"
BLOCK = re.compile(r"```(python extras|python|text)\n(.*?)```", re.S)


def blocks(lang: str = "python") -> list[tuple[str, str | None]]:
    """The README's ``lang`` blocks (``python`` or ``python extras``), each with the ```text
    block right after it (``None`` when there is none)."""
    found = BLOCK.findall(README.read_text("utf-8"))
    pairs = []
    for i, (kind, body) in enumerate(found):
        if kind == lang:
            expected = found[i + 1][1] if i + 1 < len(found) and found[i + 1][0] == "text" else None
            pairs.append((body, expected))
    return pairs


def run_blocks(pairs: list[tuple[str, str | None]]) -> None:
    namespace: dict = {"__name__": "readme"}
    for code, expected in pairs:
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            exec(compile(code, str(README), "exec"), namespace)
        if expected is not None:
            assert out.getvalue() == expected, f"README block printed:\n{out.getvalue()}\n{code}"


def test_readme_examples_print_what_they_show():
    pairs = blocks()
    assert len(pairs) >= 8
    run_blocks(pairs)
