"""The ``contextpolicy`` command line: argument parsing, commands and their rendering.

``main`` parses and dispatches to a module per command (``validate``, ``reduce``, ``audit``,
``schema``, ``bench``, ``examples``); ``policies`` reads the policy and handlers a command is
given, ``documents`` the files, inline JSON or YAML they come in, ``summary`` what a reduce run
shows and leaves, ``tables`` Parquet in and out, ``common`` what the commands share, and ``demo``
runs the three modes through the Python API. Importing this package loads
neither numpy nor the kernel: each command imports what it needs when it runs.
"""

from .main import main

__all__ = ["main"]
