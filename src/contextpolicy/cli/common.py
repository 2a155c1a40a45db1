"""What every command shares: the error that ends a command with a message, stderr, JSON files
and the examples shipped in the package."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

__all__ = ["CliError", "example_path", "load_json", "stderr"]


class CliError(Exception):
    """A problem with the command's input: printed as one message, exit status ``code``."""

    def __init__(self, message: str, code: int = 2) -> None:
        super().__init__(message)
        self.code = code


def stderr() -> Any:
    from rich.console import Console

    return Console(stderr=True, highlight=False, soft_wrap=True)


def load_json(path: str, what: str) -> Any:
    import orjson

    try:
        data = Path(path).read_bytes() if path != "-" else sys.stdin.buffer.read()
    except OSError as exc:
        raise CliError(f"{path}: cannot read the {what} ({exc.strerror})") from None
    try:
        return orjson.loads(data)
    except orjson.JSONDecodeError as exc:
        raise CliError(f"{path}: the {what} is not valid JSON ({exc})") from None


def example_path(name: str) -> Path:
    """A file of the example corpus and policies shipped in the package."""
    from importlib import resources

    return Path(str(resources.files("contextpolicy").joinpath("examples").joinpath(name)))
