"""What every command shares: the error that ends a command with a message, stderr, the signals
that stop a run (cleanly) and the examples shipped in the package (the documents the commands
read are ``documents``'s)."""

from __future__ import annotations

import contextlib
import os
import signal
import threading
from collections.abc import Iterator
from types import FrameType
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from pathlib import Path

__all__ = ["CliError", "Interrupted", "LazyConsole", "Signals", "example_path", "stderr"]


class CliError(Exception):
    """A problem with the command's input: printed as one message, exit status ``code``."""

    def __init__(self, message: str, code: int = 2) -> None:
        super().__init__(message)
        self.code = code


class LazyConsole:
    """rich's console on standard error, made when something is first shown (or asked of it):
    a run that shows nothing (``-q``) never imports rich. ``rich`` is the console itself."""

    __slots__ = ("_console",)

    def __init__(self) -> None:
        self._console: Any = None

    @property
    def rich(self) -> Any:
        if self._console is None:
            from rich.console import Console

            self._console = Console(stderr=True, highlight=False, soft_wrap=True)
        return self._console

    def __getattr__(self, name: str) -> Any:
        return getattr(self.rich, name)


def stderr() -> Any:
    return LazyConsole()


def example_path(name: str) -> Path:
    """A file of the example corpus and policies shipped in the package."""
    from importlib import resources
    from pathlib import Path

    return Path(str(resources.files("contextpolicy").joinpath("examples").joinpath(name)))


# ---------------------------------------------------------------------------------------------
# signals

# Every signal whose default is to end the process and that a handler can catch. SIGPIPE is
# Python's own (a BrokenPipeError); SIGBUS, SIGSEGV, SIGFPE and SIGILL are faults that a Python
# handler cannot return from (the command line maps no file, so a truncated input is no fault).
TERMINATING = tuple(sorted({
    getattr(signal, name) for name in (
        "SIGINT", "SIGHUP", "SIGTERM", "SIGQUIT", "SIGUSR1", "SIGUSR2", "SIGALRM", "SIGVTALRM",
        "SIGPROF", "SIGXCPU", "SIGPOLL", "SIGPWR", "SIGSTKFLT", "SIGBREAK",
    ) if hasattr(signal, name)
}))


class Interrupted(KeyboardInterrupt):
    """Ctrl-C (``SIGINT``) or another signal that ends the run: raised where the run is, so that
    every temporary file is removed and every worker stopped on the way out, as for Ctrl-C.
    ``complete``: the signal came while the outputs were being put in place, which was
    finished first."""

    def __init__(self, signum: int, *, complete: bool = False) -> None:
        super().__init__(signum)
        self.signum = signum
        self.complete = complete


def signal_name(signum: int) -> str:
    try:
        return signal.Signals(signum).name
    except ValueError:
        return f"signal {signum}"


class Signals:
    """While entered, a terminating signal raises ``Interrupted`` in the main thread (once: the
    clean-up it starts is not interrupted again). A signal that was ignored when the command
    started (``nohup``, a background job's SIGINT) stays ignored. ``SIGXFSZ`` is ignored, so
    that writing past the file size limit is an error naming the file."""

    def __init__(self) -> None:
        self.owner = os.getpid()
        self.received: int | None = None
        self.deferring = False
        self.previous: dict[int, Any] = {}

    def _handle(self, signum: int, frame: FrameType | None) -> None:
        if os.getpid() != self.owner:  # a forked worker, before it set its own handlers
            signal.signal(signum, signal.SIG_DFL)
            os.kill(os.getpid(), signum)
            return
        if self.received is not None:  # already stopping
            return
        self.received = signum
        if not self.deferring:
            raise Interrupted(signum)

    def __enter__(self) -> Signals:
        if threading.current_thread() is not threading.main_thread():
            return self  # only the main thread can set handlers
        for signum in TERMINATING:
            current = signal.getsignal(signum)
            usual = signal.default_int_handler if signum == signal.SIGINT else signal.SIG_DFL
            if current is not usual and current != usual:
                continue
            self.previous[signum] = current
            signal.signal(signum, self._handle)
        xfsz = getattr(signal, "SIGXFSZ", None)
        if xfsz is not None and signal.getsignal(xfsz) == signal.SIG_DFL:
            self.previous[xfsz] = signal.SIG_DFL
            signal.signal(xfsz, signal.SIG_IGN)
        return self

    def __exit__(self, *exc: object) -> None:
        for signum, handler in self.previous.items():
            signal.signal(signum, handler)
        self.previous.clear()

    @contextlib.contextmanager
    def deferred(self) -> Iterator[None]:
        """A signal that comes in here waits until the block is done (the outputs put in
        place), and is raised then, as ``Interrupted(complete=True)``."""
        self.deferring = True
        try:
            yield
        finally:
            self.deferring = False
        if self.received is not None:
            raise Interrupted(self.received, complete=True)
