"""The streaming JSONL engine behind ``contextpolicy reduce``, usable without the command line.

``files`` reads input (plain files in ranges, gzip, pipes, FIFOs), reads and writes JSON exactly
and writes output atomically; ``runner`` processes the lines with one policy, in this process or
in worker processes, and returns every line's result in input order.

The names load on first use: ``files`` alone costs neither numpy nor the kernel.
"""

from __future__ import annotations

import importlib
from typing import Any

_EXPORTS = {
    **dict.fromkeys(("AtomicOutput", "FileError", "FileRange", "InputFile", "batched_lines"),
                    ".files"),
    **dict.fromkeys(("LineError", "LineResult", "Summary", "WorkerError", "process_lines"),
                    ".runner"),
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(module, __name__), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted([*globals(), *_EXPORTS])
