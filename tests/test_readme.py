"""The README's Python examples run as written, and print what the README shows.

Every ```python block runs in order in one namespace; a ```text block right after it is the
exact output it must print.
"""

from __future__ import annotations

import contextlib
import io
import re
from pathlib import Path

README = Path(__file__).resolve().parent.parent / "README.md"
BLOCK = re.compile(r"```(python|text)\n(.*?)```", re.S)


def blocks():
    found = BLOCK.findall(README.read_text("utf-8"))
    pairs = []
    for i, (lang, body) in enumerate(found):
        if lang == "python":
            expected = found[i + 1][1] if i + 1 < len(found) and found[i + 1][0] == "text" else None
            pairs.append((body, expected))
    return pairs


def test_readme_examples_print_what_they_show():
    pairs = blocks()
    assert len(pairs) >= 8
    namespace: dict = {"__name__": "readme"}
    for code, expected in pairs:
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            exec(compile(code, str(README), "exec"), namespace)
        if expected is not None:
            assert out.getvalue() == expected, f"README block printed:\n{out.getvalue()}\n{code}"
