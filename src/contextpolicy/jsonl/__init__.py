"""The streaming JSONL engine behind ``contextpolicy reduce``, usable without the command line.

``files`` reads input (plain files in ranges, gzip, pipes, FIFOs), reads and writes JSON exactly
and writes output atomically; ``runner`` processes the lines with one policy, in this process,
its threads or worker processes (``processes``), and returns every line's result in input order;
``worker`` turns lines into results (``results``), as bytes in the kernel where the policy allows,
with reports written from templates (``templates``); ``digits`` finds the integers beyond 64
bits that must be read again exactly; ``diagnose`` names what is wrong with a line.

The names load on first use: ``files`` alone costs neither numpy nor the kernel.
"""

from __future__ import annotations

from .._lazy import lazy_exports

_EXPORTS = {
    **dict.fromkeys(("AtomicOutput", "FileError", "FileRange", "InputFile", "batched_lines"),
                    ".files"),
    **dict.fromkeys(("LineError", "LineResult", "Summary"), ".results"),
    "LineWorker": ".worker",
    "WorkerError": ".processes",
    "process_lines": ".runner",
}

__all__ = sorted(_EXPORTS)


__getattr__, __dir__ = lazy_exports(__name__, globals(), _EXPORTS)
