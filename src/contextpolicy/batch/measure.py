"""Every message of an Arrow column of transcripts measured from its buffers: code points of the
content, roles, flags, tool call ids as dictionary codes; a message the columnar path cannot
measure is marked for the object path."""

from __future__ import annotations

from typing import Any

import numpy as np

from .. import _kernel
from .._tables import (
    FLAG_OPENS_TURN,
    FLAG_TOOL_CALLS,
    FLAG_TOOL_RESULT,
    ROLE_FUNCTION,
    ROLE_TOOL,
    ROLE_USER,
    TEXT_PART_TYPES,
    THINKING_PART,
    TOOL_RESULT_PART,
    TOOL_USE_PART,
)
from .arrow import (
    Counted,
    as_strings,
    code_point_lengths,
    field_of,
    is_list_type,
    is_text_type,
    json_lengths,
    null_mask,
    offsets_of,
    pa_concat,
    require_pyarrow,
    row_sums,
    rows_of,
    string_buffers,
)
from .assemble import take_values

# Part kinds by index: the text types, then tool_result, tool_use and thinking.
_PART_KINDS = (*TEXT_PART_TYPES, TOOL_RESULT_PART, TOOL_USE_PART, THINKING_PART)


_PART_KIND_NAMES = tuple(kind.encode() for kind in _PART_KINDS)


def _part_kinds(ptype: Any) -> Any:
    """Each part's kind, its index in ``_PART_KINDS`` (-1 for any other type or none)."""
    data, offs, nulls = _string_field(ptype)
    return _kernel.string_codes(data, offs, _PART_KIND_NAMES, nulls)


def _string_field(arr: Any) -> tuple[Any, Any, Any]:
    """(data, offsets, nulls or None) of a text array, as the kernel reads a string child
    (a dictionary's null values are nulls too)."""
    arr = as_strings(arr)
    data, offs = string_buffers(arr)
    return data, offs, (null_mask(arr) if arr.null_count else None)


def _text_chars(parts: Any, is_text: Any, unreadable: Any, counted: Counted) -> Any:
    """Chars of the text parts (0 for the others); a text part without text is marked in
    ``unreadable`` (the object path says what it holds)."""
    text = field_of(parts, "text")
    if text is None or not is_text_type(text.type):
        unreadable |= is_text
        return np.zeros(len(parts), dtype=np.int64)
    text = as_strings(text)  # a dictionary's null values are nulls too
    if text.null_count:
        unreadable |= is_text & null_mask(text)
    return np.where(is_text, code_point_lengths(text, counted), 0)


class _Ids:
    """Tool call ids (or the ids results answer) as they are found: the message of each, and
    where its string is (a string array and the positions in it, or none: no id). Within a
    message the sources added ``first`` come before the others (a message's ``tool_calls``
    before its blocks' ids, a tool message's ``tool_call_id`` before its results')."""

    def __init__(self) -> None:
        self.head: list[tuple[Any, Any, Any]] = []
        self.tail: list[tuple[Any, Any, Any]] = []

    def add(self, messages: Any, strings: Any, at: Any = None, *, first: bool = False) -> None:
        """``strings``: a text array (None: the items have no id); ``at``: the positions in it
        of the items' ids (None: all of them, one per item)."""
        if len(messages):
            (self.head if first else self.tail).append((messages, strings, at))

    def sources(self) -> list[tuple[Any, Any, Any]]:
        return self.head + self.tail




class Measured:
    """The arrays ``_kernel.reduce_rows`` needs for one chunk, and the rows it cannot take."""

    def __init__(self, arr: Any, column: str) -> None:
        pa = require_pyarrow()
        n = len(arr)
        offs, values = offsets_of(arr)
        m = len(values)
        self.offsets = offs
        self.values = values
        self.slow = np.zeros(n, dtype=bool)  # rows the object path measures
        self.counted = Counted()  # the string arrays whose UTF-8 the counts have checked
        self.ncodes = 0
        self._id_strings: tuple[list[Any], Any, Any] = ([], None, None)
        self.call_codes = self.result_codes = np.zeros(0, dtype=np.int64)
        if arr.null_count:
            self.slow |= null_mask(arr)
        if values.null_count:
            self.slow |= rows_of(null_mask(values), offs)
        role = field_of(values, "role")
        self.role_strings: Any = None
        if role is None or not is_text_type(role.type):
            # No row can be measured here: the object path says what is wrong with each.
            self.slow[:] = True
            self.roles = np.zeros(m, dtype=np.int8)
            self.chars = np.zeros(m, dtype=np.int64)
            self.flags = np.zeros(m, dtype=np.uint8)
            self.call_offsets = self.result_offsets = np.zeros(m + 1, dtype=np.int64)
            return
        role = self.role_strings = as_strings(role)
        if role.null_count:
            self.slow |= rows_of(null_mask(role), offs)
        data, roffs = string_buffers(role)
        roles = _kernel.role_codes_utf8(data, roffs)
        chars = np.zeros(m, dtype=np.int64)
        flags = np.zeros(m, dtype=np.uint8)
        bad = np.zeros(m, dtype=bool)  # messages the object path must measure
        item = field_of(values, "type")
        if item is not None and not pa.types.is_null(item.type):
            # Responses items other than messages (calls, outputs, reasoning, ...): objects.
            import pyarrow.compute as pc

            given = ~null_mask(item)
            if is_text_type(item.type):
                is_message = pc.equal(as_strings(item), "message").fill_null(False)
                given &= ~is_message.to_numpy(zero_copy_only=False)
            bad |= given
        calls, results = _Ids(), _Ids()
        content = field_of(values, "content")
        if content is not None:
            self._content(content, chars, flags, bad, calls, results)
        # Tool calls: names and arguments counted, ids coded (before a message's tool_use ids).
        tool_calls = field_of(values, "tool_calls")
        if tool_calls is not None and tool_calls.null_count < len(tool_calls):
            self._calls(tool_calls, chars, flags, bad, calls)
        is_user = roles == ROLE_USER
        # Flags set by arithmetic on whole arrays (a masked assignment costs more).
        opens = is_user & ((flags & FLAG_TOOL_RESULT) == 0)
        flags |= opens.view(np.uint8) * np.uint8(FLAG_OPENS_TURN)
        answers_call = (roles == ROLE_TOOL) | (roles == ROLE_FUNCTION)
        flags |= answers_call.view(np.uint8) * np.uint8(FLAG_TOOL_RESULT)
        # What a tool message answers (before the ids of its tool_result blocks).
        is_tool = np.flatnonzero(roles == ROLE_TOOL)
        if len(is_tool):
            tcid = field_of(values, "tool_call_id")
            answers = None
            if tcid is not None and is_text_type(tcid.type):
                answers = tcid
            elif tcid is not None and not pa.types.is_null(tcid.type):
                bad[is_tool] |= ~null_mask(tcid)[is_tool]
            results.add(is_tool, answers, is_tool, first=True)
        self._codes(calls, results, m)
        self.slow |= rows_of(bad, offs)
        self.roles, self.chars, self.flags = roles, chars, flags

    def _content(self, content: Any, chars: Any, flags: Any, bad: Any, calls: _Ids,
                 results: _Ids) -> None:
        pa = require_pyarrow()
        t = content.type
        if is_text_type(t):
            chars += code_point_lengths(content, self.counted)
        elif is_list_type(t) and (is_text_type(t.value_type) or pa.types.is_struct(t.value_type)):
            offs, parts = offsets_of(content)
            present = ~null_mask(content) if content.null_count else None
            if present is not None:
                # A null list holds no parts, whatever range Arrow left it.
                odd = ~present & (np.diff(offs) > 0)
                bad |= odd
            if is_text_type(t.value_type):  # parts that are plain strings
                per = row_sums(code_point_lengths(parts, self.counted), offs)
                if parts.null_count:
                    bad |= rows_of(null_mask(parts), offs)
            else:
                per = self._parts(parts, offs, flags, bad, calls, results)
            chars += per if present is None else np.where(present, per, 0)
        elif not pa.types.is_null(t):
            # JSON text, a struct, numbers ...: the object path reads each message's content.
            bad |= ~null_mask(content)

    def _parts(self, parts: Any, offs: Any, flags: Any, bad: Any, calls: _Ids,
               results: _Ids) -> Any:
        """Chars of each message's content parts: text parts, ``tool_result`` blocks (their
        content), ``tool_use`` blocks (name and the compact JSON of the input), thinking
        blocks; other parts are opaque. Sets the messages' flags, collects the blocks' ids and
        marks the messages only objects can measure. Strings are counted, and flags set, by
        one kernel call over all parts (``_kernel.part_chars``)."""

        pa = require_pyarrow()
        k, m = len(parts), len(offs) - 1
        ptype = field_of(parts, "type")
        if ptype is None or pa.types.is_null(ptype.type):
            return np.zeros(m, dtype=np.int64)
        if not is_text_type(ptype.type):
            bad |= rows_of(~null_mask(ptype), offs)
            return np.zeros(m, dtype=np.int64)
        code = _part_kinds(ptype)
        unreadable = null_mask(parts) if parts.null_count else np.zeros(k, dtype=bool)
        extra = None  # chars measured here, per part: a result's list content, a call's input

        def part_message(at: Any) -> Any:  # the message each of the parts ``at`` is in
            return np.searchsorted(offs, at, side="right") - 1

        read: list[Any] = []  # the string arrays part_chars reads (and checks)

        def text_field(name: str) -> Any:
            value = field_of(parts, name)
            if value is None or not is_text_type(value.type):
                return None
            read.append(as_strings(value))
            return _string_field(read[-1])

        result = None
        at = np.flatnonzero(code == len(TEXT_PART_TYPES))
        if len(at):
            content = field_of(parts, "content")
            if content is not None and is_text_type(content.type):
                read.append(as_strings(content))
                result = _string_field(read[-1])
            elif content is not None and not pa.types.is_null(content.type):
                extra = np.zeros(k, dtype=np.int64)
                extra[at] = self._result_chars(content, at, unreadable)
            results.add(part_message(at), self._ids(parts, "tool_use_id"), at)
        name = None
        at = np.flatnonzero(code == len(TEXT_PART_TYPES) + 1)
        if len(at):
            name = text_field("name")
            given = field_of(parts, "input")
            if given is not None:
                # The compact JSON of each input, as the object path counts it (the value
                # read back from Arrow, null for a missing one): from the buffers where the
                # type allows, else from the values.
                inputs = take_values(given, pa.array(at))
                try:
                    lengths = json_lengths(inputs)
                except pa.ArrowException:  # buffers Arrow cannot read as they are: the values
                    lengths = None
                if lengths is None:
                    try:
                        lengths = [_kernel.compact_json_length(v) for v in inputs.to_pylist()]
                    except (TypeError, ValueError, RecursionError, pa.ArrowException):
                        unreadable[at] = True
                if lengths is not None:
                    if extra is None:
                        extra = np.zeros(k, dtype=np.int64)
                    extra[at] += lengths
            calls.add(part_message(at), self._ids(parts, "id"), at)
        fields = (text_field("text"), result, name, text_field("thinking"))
        chars, set_flags, unmeasured = _kernel.part_chars(offs, code, len(TEXT_PART_TYPES),
                                                          fields, extra, unreadable)
        flags |= set_flags
        bad |= unmeasured
        for value in read:
            self.counted.add(value, nulls_skipped=True)
        return chars

    @staticmethod
    def _ids(parts: Any, key: str) -> Any:
        ids = field_of(parts, key)  # not text: the object path reads no id either
        return ids if ids is not None and is_text_type(ids.type) else None

    def _result_chars(self, content: Any, at: Any, unreadable: Any) -> Any:
        """Chars of the content of the ``tool_result`` blocks at ``at``: a string, a list of
        strings or of text parts; anything else is read by the object path."""

        pa = require_pyarrow()
        if content is None or pa.types.is_null(content.type):
            return np.zeros(len(at), dtype=np.int64)
        t = content.type
        if is_text_type(t):
            return code_point_lengths(content, self.counted)[at]
        present = ~null_mask(content)
        if not (is_list_type(t)
                and (is_text_type(t.value_type) or pa.types.is_struct(t.value_type))):
            unreadable[at] |= present[at]
            return np.zeros(len(at), dtype=np.int64)
        offs, inner = offsets_of(content)
        if content.null_count:
            unreadable[at] |= (~present & (np.diff(offs) > 0))[at]
        if is_text_type(t.value_type):
            counted = code_point_lengths(inner, self.counted)
            if inner.null_count:
                unreadable[at] |= rows_of(null_mask(inner), offs)[at]
        else:
            counted = np.zeros(len(inner), dtype=np.int64)
            ptype = field_of(inner, "type")
            if ptype is not None and is_text_type(ptype.type):
                kinds = _part_kinds(ptype)
                is_text = (kinds >= 0) & (kinds < len(TEXT_PART_TYPES))
                deeper = kinds >= len(TEXT_PART_TYPES)  # nested blocks: the object path
                if inner.null_count:
                    deeper |= null_mask(inner)
                if is_text.any():
                    counted = _text_chars(inner, is_text, deeper, self.counted)
                unreadable[at] |= rows_of(deeper, offs)[at]
            elif ptype is not None and not pa.types.is_null(ptype.type):
                unreadable[at] |= rows_of(~null_mask(ptype), offs)[at]
        per = row_sums(counted, offs)
        return np.where(present, per, 0)[at]

    def _calls(self, tool_calls: Any, chars: Any, flags: Any, bad: Any, calls: _Ids) -> None:
        pa = require_pyarrow()
        t = tool_calls.type
        if not (is_list_type(t) and pa.types.is_struct(t.value_type)):
            bad |= ~null_mask(tool_calls)
            return
        offs, entries = offsets_of(tool_calls)
        per_message = np.diff(offs)
        if tool_calls.null_count:
            # A null list holds no calls, whatever range Arrow left it: the object path reads
            # a message whose null list spans entries.
            odd = null_mask(tool_calls) & (per_message > 0)
            bad |= odd
        flags[per_message > 0] |= FLAG_TOOL_CALLS
        k = len(entries)
        unreadable = null_mask(entries) if entries.null_count else np.zeros(k, dtype=bool)
        counted = np.zeros(k, dtype=np.int64)
        fn = field_of(entries, "function")
        if fn is not None and pa.types.is_struct(fn.type):
            for key in ("name", "arguments"):
                value = field_of(fn, key)
                if value is None or pa.types.is_null(value.type):
                    continue
                if is_text_type(value.type):
                    lengths = code_point_lengths(value, self.counted)
                    if fn.null_count:
                        lengths[null_mask(fn)] = 0
                    counted += lengths
                elif key == "arguments":  # arguments as JSON: their compact text is counted
                    unreadable |= ~null_mask(value)
        elif fn is not None and not pa.types.is_null(fn.type):
            unreadable |= ~null_mask(fn)
        chars += row_sums(counted, offs)
        if unreadable.any():
            bad |= rows_of(unreadable, offs)
        message = np.repeat(np.arange(len(offs) - 1, dtype=np.int64), per_message)
        ids = field_of(entries, "id")
        if ids is None or not is_text_type(ids.type):
            if ids is not None and not pa.types.is_null(ids.type):
                bad |= rows_of(~null_mask(ids), offs)
            ids = None
        calls.add(message, ids, first=True)  # a message's tool_calls before its blocks

    def _codes(self, calls: _Ids, results: _Ids, m: int) -> None:
        """Call ids and the ids results answer, as codes of one dictionary (equal strings one
        code, ``_kernel.string_ids``), merged in message order (``_kernel.arrange_ids``)."""
        if not calls.head and not calls.tail and not results.head and not results.tail:
            # No message calls a tool or answers one (a chat): no id to read.
            self.call_offsets = self.result_offsets = np.zeros(m + 1, dtype=np.int64)
            return
        strings: list[Any] = []  # the text arrays the kernel reads
        given: list[tuple[Any, ...]] = []
        for ids in (calls, results):
            for _messages, text, at in ids.sources():
                if text is not None:
                    text = as_strings(text)
                    strings.append(text)
                    given.append((*_string_field(text), at))
        codes, first_source, first_index = _kernel.string_ids(tuple(given))
        it = iter(codes)
        for ids, name in ((calls, "call"), (results, "result")):
            sources = ids.sources()
            found = tuple(next(it) if text is not None else np.full(len(msg), -1, np.int64)
                          for msg, text, _at in sources)
            at, placed = _kernel.arrange_ids(tuple(msg for msg, _t, _a in sources), found)
            offsets = np.zeros(m + 1, dtype=np.int64)
            np.cumsum(np.bincount(at, minlength=m), out=offsets[1:])
            setattr(self, f"{name}_offsets", offsets)
            setattr(self, f"{name}_codes", placed)
        self.ncodes = len(first_source)
        self._id_strings = (strings, first_source, first_index)

    def id_strings(self, codes: Any) -> Any:
        """The id string of each code (null for -1), as a large_string array."""
        pa = require_pyarrow()
        mask = codes < 0
        if not self.ncodes or mask.all():
            return pa.nulls(len(codes), type=pa.large_string())
        strings, first_source, first_index = self._id_strings
        # Codes are numbered in order of first sight, source by source: the dictionary is
        # each source's first strings in turn.
        dictionary = pa_concat([
            strings[k].take(pa.array(first_index[first_source == k])).cast(pa.large_string())
            for k in range(len(strings))])
        return dictionary.take(pa.array(np.where(mask, 0, codes), mask=mask))


