"""MkDocs hooks of the documentation site (``mkdocs.yml``): the JSON Schemas of a policy, a plan
and a report, generated at build time by ``contextpolicy schema``, so that the pages can never
show a schema other than the one the installed package prints.

A block fenced ```` ```python extras ```` (an example the test suite runs with the optional
extras) is shown as a Python block.

The docstrings the API reference renders are written with Sphinx's roles
(``:class:`~contextpolicy.errors.Issue```); their role prefixes are dropped from the page, and a
``~``-qualified name shows its last part, as Sphinx shows it.

A line ``<!-- schema: policy -->`` in a page (indented, inside a collapsible block) becomes the
schema as a JSON block at that indentation, and each schema is also published as a file beside
the reference pages (``reference/policy.schema.json``) for editors.
"""

from __future__ import annotations

import re
import subprocess
import sys
from functools import cache
from typing import Any

from mkdocs.structure.files import File, Files

SCHEMAS = ("policy", "plan", "report")
MARKER = re.compile(r"^( *)<!-- schema: (\w+) -->$", re.M)
EXTRAS_FENCE = re.compile(r"^```python extras$", re.M)
ROLE = re.compile(r":(?:class|func|meth|attr|mod|data|exc|obj):(?=<code>)")
TILDE = re.compile(r"<code>~(?:\w+\.)*(\w+)</code>")


@cache
def schema(what: str) -> str:
    """What ``contextpolicy schema WHAT`` prints."""
    if what not in SCHEMAS:
        raise ValueError(f"unknown schema {what!r} in a page; expected one of {SCHEMAS}")
    done = subprocess.run([sys.executable, "-m", "contextpolicy", "schema", what],
                          capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"contextpolicy schema {what} failed:\n{done.stderr}")
    return done.stdout


def on_files(files: Files, config: Any) -> Files:
    for what in SCHEMAS:
        files.append(File.generated(config, f"reference/{what}.schema.json",
                                    content=schema(what)))
    return files


def _block(match: re.Match[str]) -> str:
    indent, what = match.groups()
    lines = ["```json", *schema(what).rstrip().splitlines(), "```"]
    return "\n".join(indent + line if line else line for line in lines)


def on_page_markdown(markdown: str, page: Any, config: Any, files: Files) -> str:
    return MARKER.sub(_block, EXTRAS_FENCE.sub("```python", markdown))


def on_page_content(html: str, page: Any, config: Any, files: Files) -> str:
    return TILDE.sub(r"<code>\1</code>", ROLE.sub("", html))
