"""A line's report written from a template: the JSON of a one-call reduce's report, byte for byte
what ``dumps(fused_report_json(...))`` writes, from a template per shape of report in which only the
figures change; and the programs the kernel's ``report_lines`` fills in for a run of lines."""

from __future__ import annotations

import re
from typing import Any

from .. import _kernel
from .._records import FragmentFigures, FusedRecord, StepRecord
from ..fused import fused_missed_reason, fused_report_json
from ..prepared import PreparedPolicy
from .files import (
    dumps,
)

__all__ = ["FusedReports"]

_OWN = object()  # a report's missedReason as its records give it
# A template's records hold a sentinel figure in every slot, strings and flags included.
_Step: Any = StepRecord
_Figures: Any = FragmentFigures
_Record: Any = FusedRecord


class FusedReports:
    """The JSON of a line's report from the records of a one-call reduce: what
    ``dumps(fused_report_json(...))`` writes, byte for byte, from a template per shape of
    report (its fragments, the statuses and reasons of its steps, what is null) in which only
    the figures change; a report with warnings is written in full."""

    SENTINEL = 7_319_000_000_000_000_000  # figures no line can have
    LIMIT = 256  # shapes kept

    def __init__(self, prepared: PreparedPolicy, kinds: dict[str, tuple[str, bool]]) -> None:
        self.prepared = prepared
        self.kinds = kinds
        self.templates: dict[Any, tuple[bytes, list[int]]] = {}
        self._entry_template: Any = False  # not made yet
        # Templates need sentinels no figure of the policy's own could pass for.
        self.plain = b"%d" % (self.SENTINEL // 10**9) not in dumps(
            prepared.policy.to_json_dict())

    @staticmethod
    def _figures(raw: FusedRecord) -> list[Any]:
        figures: list[Any] = [raw.chars_before, raw.messages_before, raw.opaque_before,
                              raw.chars_after, raw.messages_after, raw.opaque_after]
        for d in raw.steps:
            figures += (d.chars_before, d.chars_after, d.groups_before, d.groups_after,
                        d.messages_removed)
        for b, a in zip(raw.before, raw.after, strict=True):
            figures += (b.chars, a.chars, b.messages, a.messages)
        return figures

    def _json(self, raw: FusedRecord, missed: Any = _OWN) -> bytes:
        """The report's JSON; ``missed``: its missedReason, when not what the records give (a
        template's records hold sentinels)."""
        kinds = self.kinds
        doc = fused_report_json(self.prepared, raw, [kinds[fid] for fid in raw.ids])
        if missed is not _OWN:
            doc["missedReason"] = missed
        return dumps(doc)

    def render(self, raw: FusedRecord) -> bytes:
        if raw.warnings or not self.plain:
            return self._json(raw)
        figures = self._figures(raw)
        missed = fused_missed_reason(self.prepared, raw)
        key = (tuple(raw.ids), raw.triggered, raw.watermark_met, missed,
               tuple((d.status, d.reason) for d in raw.steps),
               tuple(k is not None for k in raw.kept), tuple(f is None for f in figures))
        template = self.templates.get(key)
        if template is None:
            template = self._template(raw, figures, missed)
            if len(self.templates) < self.LIMIT:
                self.templates[key] = template
        text, order = template
        return text % tuple([figures[i] for i in order])

    def entry_template(self) -> tuple[Any, ...] | None:
        """The template of ``_kernel.report_lines`` for this policy: the programs of a line's
        report entry (without its opening brace) cut from what :func:`fused_report_json` writes
        with every figure a sentinel of its slot; None where a sentinel would be ambiguous
        (``plain`` false)."""
        if self._entry_template is False:
            self._entry_template = self._make_entry_template()
        return self._entry_template  # type: ignore[return-value]

    def _make_entry_template(self) -> tuple[Any, ...] | None:
        if not self.plain:
            return None
        slot = {name: self.SENTINEL + i for i, name in enumerate(_kernel.ENTRY_SLOTS)}
        ids = ["system", "history", "question"]
        fast = self.prepared.fast_path
        nsteps = len(fast.steps) if fast is not None else 0
        done = [_Step(*(slot[k] for k in (
            "status", "reason", "chars-before", "chars-after", "groups-before", "groups-after",
            "messages-removed")))] * nsteps
        side = _Figures(slot["fragment-chars-before"], slot["fragment-messages-before"], 0)
        after = _Figures(slot["fragment-chars-after"], slot["fragment-messages-after"], 0)
        raw = _Record(slot["triggered"], [side] * 3, [after] * 3, [True] * 3, done, [], None,
                      ids, slot["before-chars"], slot["before-messages"], slot["before-opaque"],
                      slot["after-chars"], slot["after-messages"], slot["after-opaque"], 0, 0,
                      slot["target-reached"])
        doc = fused_report_json(self.prepared, raw, [self.kinds[fid] for fid in ids])
        doc["missedReason"] = slot["missed-reason"]
        for side_doc in (doc["before"], doc["after"]):
            side_doc["fragments"] = slot["fragments-count"]
        steps = doc["steps"]
        fragments = doc["fragments"]
        for fragment in fragments:
            fragment["changed"] = slot["fragment-changed"]
        doc["steps"], doc["fragments"] = slot["steps"], slot["fragments"]
        entry = dumps({"id": slot["id"], "report": doc})[1:]
        programs = (self._program(entry, slot["id"], slot["status"]),
                    tuple(self._program(dumps(s), slot["status"], slot["fragment-chars-before"])
                          for s in steps),
                    tuple(self._program(dumps(f), slot["fragment-chars-before"],
                                        self.SENTINEL + len(_kernel.ENTRY_SLOTS))
                          for f in fragments))
        if None in programs[:1] + programs[1] + programs[2]:
            return None
        return programs

    def _program(self, text: bytes, lo: int, hi: int) -> tuple[Any, ...] | None:
        # bytes with the slot code of each sentinel between them (the sentinels from lo to hi)
        pieces = re.split(rb"(?<![0-9])(%d[0-9]{3})(?![0-9])" % (self.SENTINEL // 1000), text)
        program: list[Any] = []
        for i, piece in enumerate(pieces):
            if i % 2:
                if not lo <= int(piece) < hi:
                    return None
                program.append(int(piece) - self.SENTINEL)
            else:
                program.append(piece)
        return tuple(program)

    def _template(self, raw: FusedRecord, figures: list[Any], missed: str | None,
                  ) -> tuple[bytes, list[int]]:
        # The report of this shape with every figure a sentinel of its own (in the order
        # _figures reads them), the sentinels then made %d slots in the order they appear.
        marks = [None if f is None else self.SENTINEL + i for i, f in enumerate(figures)]
        at: Any = iter(marks)
        totals = {name: next(at) for name in (
            "chars_before", "messages_before", "opaque_before", "chars_after", "messages_after",
            "opaque_after")}
        steps = [d._replace(**{name: next(at) for name in (
            "chars_before", "chars_after", "groups_before", "groups_after", "messages_removed")})
            for d in raw.steps]
        before, after = [], []
        for b, a in zip(raw.before, raw.after, strict=True):
            b_chars, a_chars, b_messages, a_messages = (next(at) for _ in range(4))
            before.append(b._replace(chars=b_chars, messages=b_messages))
            after.append(a._replace(chars=a_chars, messages=a_messages))
        fake = raw._replace(before=before, after=after, steps=steps, **totals)
        text = self._json(fake, missed).replace(b"%", b"%%")
        found_at = sorted((text.index(b"%d" % m), m, i) for i, m in enumerate(marks)
                          if m is not None)
        for _, mark, _ in found_at:
            text = text.replace(b"%d" % mark, b"%d", 1)
        return text, [i for _, _, i in found_at]

