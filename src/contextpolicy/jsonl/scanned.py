"""Lines read as bytes: transcript lines reduced by the kernel without being parsed
(``_kernel.reduce_lines``, ``_kernel.report_lines``), a chunk at a time, into results; the lines the
scanner does not take go back to the line worker's object path."""

from __future__ import annotations

import bisect
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import orjson

from .. import _kernel
from .._kernel_names import SCAN_FIGURES
from .._records import FusedRecord
from .._tables import LINE_FIGURE
from .digits import long_digit_runs
from .files import dumps, reread_exactly
from .results import LineResult, line_run_figures

if TYPE_CHECKING:
    from .objects import ObjectLines

__all__ = ["POLL_BYTES", "SCAN_CHUNK_BYTES", "ScannedLines"]

# While the main process works through a range itself, it collects finished ranges from the
# workers after about this much input, so a worker is never left waiting to hand one over.
POLL_BYTES = 256 << 10
# Lines read as bytes go to the kernel in chunks of about this much input when they come back as
# runs (the kernel reads them at gigabytes a second: a chunk is a millisecond or so of work, and
# its output is one allocation), and of POLL_BYTES when every line has a result of its own.
SCAN_CHUNK_BYTES = 1 << 20

HANDLED = LINE_FIGURE["handled"]  # 1 for a line of the byte path, 0 for one of the object path

# The object path of one line: its number and bytes in, its result out.
ObjectPath = Callable[[int, Any], LineResult]


class ScannedLines:
    """Results of lines read as bytes with a policy the kernel runs in one call (its trims
    ``steps``, ``trigger`` and ``watermark``): consecutive lines of the byte path as one run
    (``runs``, without reports) or one result per line, with report entries when asked (the
    kernel's from ``entry``; a line it writes none for, from the object path's templates,
    ``objects()``, made when first needed); what it holds never changes, so copies of a
    worker share it."""

    def __init__(self, steps: tuple[tuple[str, int, int, int], ...], trigger: int,
                 watermark: int, objects: Callable[[], ObjectLines], *, runs: bool,
                 with_reports: bool, reduces: bool, entry: tuple[Any, ...] | None) -> None:
        self.steps, self.trigger, self.watermark = steps, trigger, watermark
        self.entry = entry  # the template of report entries (LinePolicy.entry)
        self.objects = objects
        self.per_line, self.with_reports, self.reduces = not runs, with_reports, reduces

    def results(
        self, data: bytes | bytearray, numbers: list[int], starts: list[int], stops: list[int],
        between: Callable[[], None] | None, object_path: ObjectPath,
    ) -> list[LineResult]:
        """The lines of ``data`` (numbered ``numbers``, from ``starts`` to ``stops``), a chunk of
        about ``POLL_BYTES`` (``SCAN_CHUNK_BYTES`` for runs) at a time; ``between`` is called
        after each chunk."""
        results: list[LineResult] = []
        chunk = POLL_BYTES if self.per_line else SCAN_CHUNK_BYTES
        n = len(starts)
        begin = 0
        while begin < n:
            # the lines up to the first that ends a chunk past where this one begins
            end = min(bisect.bisect_left(stops, starts[begin] + chunk, begin) + 1, n)
            results += self._chunk(data, numbers[begin:end], starts[begin:end],
                                   stops[begin:end], object_path)
            begin = end
            if between is not None:
                between()
        return results

    def _chunk(self, data: bytes | bytearray, numbers: list[int], starts: list[int],
               stops: list[int], object_path: ObjectPath) -> list[LineResult]:
        per_line, with_reports = self.per_line, self.with_reports
        # A run's report entries written by the kernel from the policy's template.
        template = self.entry if with_reports and not per_line else None
        entries, entry_at = b"", [0]
        raws: list[Any] | None
        if template is not None:
            out, ends, figures, written, entry_ends, raws = _kernel.report_lines(
                data, starts, stops, self.steps, self.trigger, self.watermark, template)
            entries, entry_at = bytes(written), [0, *entry_ends.tolist()]
            del written
        else:
            out, ends, figures, raws = _kernel.reduce_lines(
                data, starts, stops, self.steps, self.trigger, self.watermark,
                per_line or with_reports)
        count = len(numbers)
        if not per_line and not with_reports:
            sums = _kernel.figure_sums(figures, 0, count)
            if sums[HANDLED] == count:  # the chunk is one run: its output as it is
                return [self._run(numbers[0], out, sums, count)]
        handled = figures[HANDLED::SCAN_FIGURES].tolist()
        offsets = [0, *ends.tolist()]
        results: list[LineResult] = []
        k = 0
        while k < count:
            if not handled[k]:
                with memoryview(data) as view:
                    raw = view[starts[k]:stops[k]]
                    results.append(object_path(numbers[k], raw))
                    raw.release()
                k += 1
            elif per_line:
                assert raws is not None
                results.append(self._line(numbers[k], bytes(out[offsets[k]:offsets[k + 1]]),
                                          raws[k], data))
                k += 1
            else:
                run = k
                while k < count and handled[k]:
                    k += 1
                result = self._run(numbers[run], out[offsets[run]:offsets[k]],
                                   _kernel.figure_sums(figures, run, k), k - run)
                if with_reports:
                    assert raws is not None
                    result.reports = [
                        (numbers[j], self.report_entry(raws[j], data)[1:]
                         if raws[j] is not None else entries[entry_at[j]:entry_at[j + 1]])
                        for j in range(run, k)]
                results.append(result)
        return results

    def _run(self, number: int, output: bytes | bytearray, sums: list[int], count: int,
             ) -> LineResult:
        return LineResult(number, output=output, figures=line_run_figures(sums, self.reduces),
                          lines=count, scanned=count)

    def _line(self, number: int, output: bytes, record: tuple[FusedRecord, Any],
              data: bytes | bytearray) -> LineResult:
        raw, _ = record  # the records, and the span of the line's id
        from .objects import fused_figures

        figures = fused_figures(raw, self.reduces and raw.watermark_met, self.objects().prepared)
        line = LineResult(number, output=output, figures=figures, scanned=1)
        if self.with_reports:
            line.report = self.report_entry(record, data)
        return line

    def report_entry(self, record: tuple[FusedRecord, Any], data: bytes | bytearray) -> bytes:
        """The report entry of a line read as bytes (its line number is put in front later)."""
        raw, id_span = record
        ident = None
        if id_span is not None:
            piece = bytes(data[id_span[0]:id_span[1]])
            ident = reread_exactly(piece) if long_digit_runs(piece) else orjson.loads(piece)
        return b'{"id":%b,"report":%b}' % (dumps(ident), self.objects().reports.render(raw))
