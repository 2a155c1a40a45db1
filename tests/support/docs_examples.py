"""The examples of the README and of the documentation site (``docs/``), read from the Markdown
and run as a reader would run them.

- A ```` ```python ```` block runs alone, in a namespace of its own (every example is
  self-contained), in a folder holding the files of ``contextpolicy examples``. The
  ```` ```text ```` block right after it is exactly what it prints; a block with no text block
  after it prints nothing. A block fenced ```` ```python extras ```` needs an optional extra and
  runs with the extras' suites.
- A ```` ```console ```` block is a shell session: each ``$ `` line is a command, and the lines
  up to the next command are what it prints (standard output and error, as a terminal shows
  them). The commands of one block run in one shell, in a fresh folder where ``contextpolicy
  examples .`` copied the example files; ``contextpolicy`` is the package under test.
  Timings and throughput are not compared, and a table is compared cell by cell (its column
  widths follow the timings).
- A ```` ```json ```` block is valid JSON. Other blocks (``bash`` for installing, ``text``
  for a layout) are shown, not run.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
DOCS = ROOT / "docs"
FENCE = re.compile(r"^```([^\n`]*)\n(.*?)^```[ \t]*$", re.M | re.S)


@dataclass(frozen=True)
class Block:
    path: Path
    line: int  # of the opening fence, 1-based
    lang: str  # the fence's info string: "python", "python extras", "console", ...
    code: str
    expected: str | None  # the text block right after a python block

    @property
    def where(self) -> str:
        return f"{self.path.relative_to(ROOT).as_posix()}:{self.line}"


def pages() -> list[Path]:
    """The README and every page of the site."""
    return [README, *sorted(DOCS.rglob("*.md"))]


def blocks_of(path: Path) -> list[Block]:
    text = path.read_text("utf-8")
    found = [(m, m.group(1).strip(), m.group(2)) for m in FENCE.finditer(text)]
    out = []
    for i, (m, lang, code) in enumerate(found):
        expected = None
        if lang.startswith("python") and i + 1 < len(found) and found[i + 1][1] == "text":
            # the text block belongs to the python block when only blank lines stand between
            if not text[m.end():found[i + 1][0].start()].strip():
                expected = found[i + 1][2]
        out.append(Block(path, text.count("\n", 0, m.start()) + 1, lang, code, expected))
    return out


def all_blocks(*langs: str) -> list[Block]:
    return [b for page in pages() for b in blocks_of(page) if b.lang in langs]


def copy_examples(folder: Path) -> None:
    """The files ``contextpolicy examples FOLDER`` writes, from the installed package."""
    from contextpolicy.cli.common import example_path
    from contextpolicy.cli.examples import EXAMPLE_FILES

    for name in EXAMPLE_FILES:
        shutil.copyfile(example_path(name), folder / name)


def run_python(block: Block) -> str:
    """Run a python block alone; what it printed."""
    namespace: dict = {"__name__": "__main__"}
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        exec(compile(block.code, block.where, "exec"), namespace)
    return out.getvalue()


def check_python(block: Block) -> None:
    printed = run_python(block)
    expected = block.expected or ""
    assert printed == expected, (
        f"{block.where} printed:\n{printed}\nand the page shows:\n{expected}"
    )


# ---------------------------------------------------------------------------------------------
# console blocks

_SENTINEL = "@@contextpolicy-docs-command@@"
_BOX = "│┃║"
_RULE = re.compile(r"^[\s─━═┌┐└┘├┤┬┴┼┏┓┗┛┣┫┳┻╋┡┩╇╈┞┟┠┨┯┷┿╀╁╂╃╄╅╆╉╊]+$")
_TIMINGS = (
    (re.compile(r"\b[\d,]+(\.\d+)? MB in [\d,]+(\.\d+)? s\b"), "<size> MB in <time> s"),
    (re.compile(r"\b[\d,]+(\.\d+)? MB/s, [\d,]+ conversations/s"),
     "<speed> MB/s, <speed> conversations/s"),
    (re.compile(r"\b[\d,]+(\.\d+)? MB/s, [\d,]+ rows/s"), "<speed> MB/s, <speed> rows/s"),
)


def commands_of(block: Block) -> list[tuple[str, str]]:
    """The block's commands, each with what the page shows it printing."""
    pairs: list[tuple[str, list[str]]] = []
    for line in block.code.splitlines():
        if line.startswith("$ "):
            pairs.append((line[2:], []))
        else:
            assert pairs, f"{block.where}: a console block starts with a '$ ' command"
            pairs[-1][1].append(line)
    return [(cmd, "\n".join(out)) for cmd, out in pairs]


def normalise(output: str) -> str:
    """Output as compared: no trailing blanks, no timings, tables cell by cell."""
    lines = []
    for line in output.rstrip().splitlines():
        line = line.rstrip()
        for pattern, placeholder in _TIMINGS:
            line = pattern.sub(placeholder, line)
        if _RULE.match(line):
            line = re.sub(r"([─━═])\1+", r"\1", line.strip())
        elif any(c in line for c in _BOX):
            line = "│".join(cell.strip() for cell in re.split(f"[{_BOX}]", line))
        lines.append(line)
    return "\n".join(lines)


def shell_env(folder: Path, pure: bool) -> dict[str, str]:
    """The environment of a console block: ``contextpolicy`` is this interpreter's package,
    with the compiled kernel or the pure twin, and a terminal 120 columns wide."""
    bin_dir = folder / ".bin"
    bin_dir.mkdir()
    shim = bin_dir / "contextpolicy"
    shim.write_text(f'#!/bin/sh\nexec "{sys.executable}" -m contextpolicy "$@"\n')
    shim.chmod(0o755)
    env = {k: v for k, v in os.environ.items() if k != "CONTEXTPOLICY_PURE_PYTHON"}
    env.update(PATH=f"{bin_dir}{os.pathsep}{env.get('PATH', '')}", COLUMNS="120",
               NO_COLOR="1", TERM="dumb")
    if pure:
        env["CONTEXTPOLICY_PURE_PYTHON"] = "1"
    return env


def check_console(block: Block, folder: Path, pure: bool) -> None:
    copy_examples(folder)
    commands = commands_of(block)
    script = ["exec 2>&1"]
    for cmd, _ in commands:
        script += ["__status=$?", f"echo '{_SENTINEL}'", "(exit $__status)", cmd]
    done = subprocess.run(["bash", "-c", "\n".join(script)], cwd=folder, capture_output=True,
                          text=True, env=shell_env(folder, pure), timeout=600)
    outputs = done.stdout.split(_SENTINEL + "\n")[1:]
    assert len(outputs) == len(commands), (
        f"{block.where}: the session ended early:\n{done.stdout}{done.stderr}"
    )
    for (cmd, expected), printed in zip(commands, outputs, strict=True):
        assert normalise(printed) == normalise(expected), (
            f"{block.where}: `{cmd}` printed:\n{printed}\nand the page shows:\n{expected}"
        )


def check_json(block: Block) -> None:
    try:
        json.loads(block.code)
    except ValueError as exc:
        raise AssertionError(f"{block.where}: not valid JSON ({exc})") from None

