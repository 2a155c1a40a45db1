"""The streaming JSONL engine behind ``contextpolicy reduce``, usable without the command line.

``files`` reads input (plain files in mapped ranges, gzip, pipes) and writes output atomically;
``runner`` processes the lines with one policy, in this process or in worker processes, and
returns every line's result in input order.
"""

from .files import AtomicOutput, FileRange, InputFile, batched_lines
from .runner import LineError, LineResult, Summary, process_lines

__all__ = [
    "AtomicOutput",
    "FileRange",
    "InputFile",
    "LineError",
    "LineResult",
    "Summary",
    "batched_lines",
    "process_lines",
]
