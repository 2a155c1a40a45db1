"""The ``--plot FILE`` of ``replay`` and ``bench``: matplotlib loaded only for a plot, and the
file checked before any work (a name whose extension is an image format matplotlib writes, in a
folder that exists), written through a temporary file and put in place when it is whole."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from .common import CliError

__all__ = ["PlotFile", "pyplot"]


def pyplot() -> Any:
    """matplotlib's pyplot on its file-only backend, or a one-line error saying how to get it."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        raise CliError("--plot needs matplotlib: pip install 'contextpolicy[plot]'") from None
    return plt


class PlotFile:
    """A ``--plot`` file, checked when it is made; :meth:`save` writes a figure to it."""

    def __init__(self, path: str) -> None:
        from ..jsonl.files import AtomicOutput, FileError

        pyplot()
        from matplotlib.backend_bases import FigureCanvasBase

        formats = sorted(FigureCanvasBase.get_supported_filetypes())
        self.format = Path(path).suffix.lower().lstrip(".")
        if self.format not in formats:
            raise CliError(f"--plot {path!r}: expected a file name ending in an image format "
                           f"({', '.join('.' + f for f in formats)})")
        try:
            self.output = AtomicOutput(path)
        except FileError as exc:
            raise CliError(f"--plot {exc}") from None
        self.path = path

    def save(self, fig: Any) -> None:
        """Write ``fig`` (and close it)."""
        from ..jsonl.files import FileError

        plt = pyplot()
        try:
            with self.output as out:
                fig.savefig(out.stream, dpi=120, format=self.format)
                out.commit()
        except FileError as exc:
            raise CliError(f"--plot {exc}") from None
        except OSError as exc:
            raise CliError(f"--plot {self.path}: cannot write ({exc.strerror or exc})") from None
        finally:
            plt.close(fig)
