"""The ``contextpolicy`` command line: argument parsing, commands and their rendering.

``main`` parses and dispatches, ``common`` holds what the commands share, ``bench`` times the
reduction and ``demo`` runs the three modes through the Python API. Importing this package loads
neither numpy nor the kernel: each command imports what it needs when it runs.
"""

from .main import main

__all__ = ["main"]
