"""``reduce_table``: a whole Arrow table of transcripts reduced at once.

Each row of the ``messages`` column is one transcript, and each row means exactly what
``process_context(ContextPlan.from_messages(row), policy)`` means. The columnar path measures
every message straight from the Arrow buffers (code points from the content buffers, roles from
the role buffers, tool call ids as dictionary codes), splits, groups and cuts all rows in one
kernel call, and builds the output by offset arithmetic and one ``take``. A row the columnar
path cannot measure (content it does not know, tool blocks whose input must be serialised, a
value the object path rejects) goes through the object path on its own; so do all rows when
the policy needs objects (compress handlers, a token counter, custom implementations).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from itertools import pairwise
from typing import TYPE_CHECKING, Any, NamedTuple

import numpy as np
import orjson

from .. import _kernel
from .._tables import (
    FLAG_OPENS_TURN,
    FLAG_TOOL_CALLS,
    FLAG_TOOL_RESULT,
    MAX_JSON_DEPTH,
    MISSED_REASONS,
    ROLE_FUNCTION,
    ROLE_OTHER,
    ROLE_TOOL,
    ROLE_USER,
    TEXT_PART_TYPES,
    THINKING_PART,
    TOOL_RESULT_PART,
    TOOL_USE_PART,
)
from ..core import fused_missed_reason, process_context
from ..errors import ContextPlanError, ContextPolicyError, Issue
from ..plan import ContextPlan
from ..policy import ReducePolicy
from ..prepared import PreparedPolicy, prepare_policy
from .checks import check_utf8
from .exact import first_difference

if TYPE_CHECKING:
    import pyarrow as pa

__all__ = ["FIGURE_COLUMNS", "Reduced", "reduce_table"]

# The figures' columns, in order (tokens_before / tokens_after follow when a counter is given).
FIGURE_COLUMNS = (
    "chars_before", "chars_after", "messages_before", "messages_after", "groups_removed",
    "triggered", "target_reached", "missed_reason", "warnings", "path",
)
FAST, OBJECT = "columnar", "object"
# How deep the functions here follow an Arrow type by recursion. A deeper type (a tool input
# nested deeply) is left to Arrow's own functions and to the values, which the kernel measures
# without recursion: what a table can hold is handled whatever the interpreter's stack allows.
_TYPE_DEPTH = 64
_FRAGMENTS = ("system", "history", "question")
_WARNING_CODES = ("orphan-tool-result", "unanswered-tool-call")  # reduce_rows' codes


class Reduced(NamedTuple):
    """What :func:`reduce_table` returns: the reduced ``table`` (every column kept, rows in
    input order) and its ``figures``, one row per input row."""

    table: Any
    figures: Any


def _pa() -> Any:
    try:
        import pyarrow as pa
    except ImportError as exc:  # pragma: no cover - the extra is installed in the test suite
        raise ImportError(
            "contextpolicy.batch needs pyarrow: pip install 'contextpolicy[arrow]'"
        ) from exc
    return pa


def warning_type() -> pa.DataType:
    """The Arrow type of a figures row's ``warnings``."""
    pa = _pa()
    return pa.list_(pa.struct([
        ("code", pa.string()), ("fragment_id", pa.string()), ("index", pa.int64()),
        ("tool_call_id", pa.string()),
    ]))


# ---------------------------------------------------------------------------------------------
# The policy


class _Run:
    """What one ``reduce_table`` call needs of its policy, checked once."""

    def __init__(self, policy: Any, counter: Any, handlers: Mapping[str, Callable[..., Any]] | None,
                 implementations: Mapping[str, Any] | None) -> None:
        if isinstance(policy, PreparedPolicy) and (counter is not None or handlers is not None):
            raise ContextPolicyError(
                "a prepared policy carries its handlers and counter; pass them to "
                "prepare_policy(...)", path="handlers" if handlers is not None else "counter",
                code="invalid-option",
            )
        prepared = policy if isinstance(policy, PreparedPolicy) else prepare_policy(
            policy, handlers=handlers, counter=counter)
        if prepared.mode == "audit":
            raise ContextPolicyError(
                "an audit compares a plan with its original; a table of transcripts has no "
                "original (use a validate or reduce policy)", path="mode",
                code="invalid-option",
            )
        self.prepared = prepared
        self.implementations = implementations
        self.reduces = type(prepared.policy) is ReducePolicy
        self.counted = prepared.counter is not None
        # One kernel call for all rows when the policy is one the kernel runs (validate, or
        # trims by chars) and it names no fragment but the history.
        fused = prepared._fused
        self.steps: tuple[tuple[int, int, int], ...] | None = None
        if fused is not None and implementations is None and all(
            ref.name == "history" for ref in prepared._refs
        ):
            self.steps = tuple((g, k, t) for _fid, g, k, t in fused)
        self.fused = fused if self.steps is not None else None


# ---------------------------------------------------------------------------------------------
# Reading the column


def _is_string(t: Any) -> bool:
    pa = _pa()
    return bool(pa.types.is_string(t) or pa.types.is_large_string(t)
                or pa.types.is_string_view(t))


def _is_list(t: Any) -> bool:
    pa = _pa()
    return bool(pa.types.is_list(t) or pa.types.is_large_list(t))


def _strings(arr: Any) -> Any:
    """``arr`` as a string or large_string array (views and dictionaries decoded)."""
    pa = _pa()
    if pa.types.is_dictionary(arr.type):
        arr = arr.dictionary_decode()
    if pa.types.is_string_view(arr.type):
        arr = arr.cast(pa.large_string())
    return arr


def _text_type(t: Any) -> bool:
    pa = _pa()
    return _is_string(t) or (pa.types.is_dictionary(t) and _is_string(t.value_type))


def _buffers(arr: Any) -> tuple[Any, Any]:
    """(data, offsets) of a string or large_string array, offsets for its own slice."""
    _validity, offsets, data = arr.buffers()
    dtype = np.int64 if _pa().types.is_large_string(arr.type) else np.int32
    offs = np.frombuffer(offsets, dtype=dtype)[arr.offset: arr.offset + len(arr) + 1]
    return (data if data is not None else b""), offs


class _Counted:
    """The string arrays whose strings the kernel has read while it counted them (it checks
    UTF-8 as it counts), so that the check of the whole column does not read them again. An
    array is known by its buffers and its slice, and where the count skipped nulls, by its
    validity too; each is held until the column is checked, so no address is used again."""

    def __init__(self) -> None:
        self._held: dict[tuple[int, ...], Any] = {}

    @staticmethod
    def _key(arr: Any, validity: bool) -> tuple[int, ...]:
        bits, offsets, data = arr.buffers()[:3]
        return (data.address if data is not None else 0, offsets.address, arr.offset, len(arr),
                (bits.address if bits is not None else 0) if validity else -1)

    def add(self, arr: Any, *, nulls_skipped: bool) -> None:
        if _pa().types.is_string(arr.type) or _pa().types.is_large_string(arr.type):
            self._held[self._key(arr, nulls_skipped)] = arr

    def __call__(self, arr: Any) -> bool:
        """Whether the strings of ``arr`` that are not null were read already."""
        pa = _pa()
        if not (pa.types.is_string(arr.type) or pa.types.is_large_string(arr.type)):
            return False
        return self._key(arr, False) in self._held or self._key(arr, True) in self._held


def _counts(count: Callable[[Any, Any], Any], arr: Any, counted: _Counted | None) -> Any:
    """``count(data, offsets)`` of a string or large_string array: the kernel's figure of each
    string. A null holds no string: bytes that are not UTF-8 under a null (Arrow leaves them
    as a writer left them) are not counted, and no error."""
    data, offs = _buffers(arr)
    try:
        out = count(data, offs)
    except _kernel.Utf8Error as exc:
        if not (arr.null_count and _nulls(arr)[exc.index]):
            raise
        out = count(*_buffers(arr.fill_null("")))
        if counted is not None:
            counted.add(arr, nulls_skipped=True)
        return out
    if counted is not None:
        counted.add(arr, nulls_skipped=False)
    return out


def _lengths(arr: Any, counted: _Counted | None = None) -> Any:
    """Code points of each string of ``arr`` (0 where null), straight from its UTF-8."""
    arr = _strings(arr)
    counts = _counts(_kernel.utf8_lengths, arr, counted)
    if arr.null_count:
        counts[_nulls(arr)] = 0
    return counts


def _nulls(arr: Any) -> Any:
    """Where ``arr`` is null, as a numpy bool array (from its validity bitmap)."""
    n = len(arr)
    validity = arr.buffers()[0] if arr.null_count else None
    if validity is None:
        if arr.null_count == n and n:  # a null-typed array has no bitmap
            return np.ones(n, dtype=bool)
        return np.zeros(n, dtype=bool)
    bits = np.unpackbits(np.frombuffer(validity, dtype=np.uint8), bitorder="little")
    return ~bits[arr.offset: arr.offset + n].astype(bool)


def _ints(arr: Any) -> Any:
    """An integer array without nulls as a numpy array (its data buffer, no copy)."""
    dtype = np.dtype(arr.type.to_pandas_dtype())
    return np.frombuffer(arr.buffers()[1], dtype=dtype)[arr.offset: arr.offset + len(arr)]


def _offsets(arr: Any) -> Any:
    """List offsets of ``arr`` as int64, starting at 0, and its values sliced to match."""
    offs = _ints(arr.offsets).astype(np.int64)
    base = int(offs[0])
    values = arr.values.slice(base, int(offs[-1]) - base)
    if base:
        offs -= base
    return offs, values


def _field(struct: Any, name: str) -> Any:
    """The child ``name`` of a struct array, null where the struct is (``None`` without it)."""
    import pyarrow.compute as pc

    at = struct.type.get_field_index(name)
    if at < 0:
        return None
    # Without null structs the child is as it is (no validity to combine, nothing copied).
    return struct.field(at) if struct.null_count == 0 else pc.struct_field(struct, name)


def _rows_of(per_message: Any, offs: Any) -> Any:
    """Rows holding at least one message where ``per_message`` is set."""
    if not per_message.any():
        return np.zeros(len(offs) - 1, dtype=bool)
    counts = np.concatenate([[0], np.cumsum(per_message, dtype=np.int64)])
    return counts[offs[1:]] > counts[offs[:-1]]


def _sums(values: Any, offs: Any) -> Any:
    """Per list of ``offs``, the sum of its ``values``."""
    csum = np.concatenate([[0], np.cumsum(values, dtype=np.int64)])
    return csum[offs[1:]] - csum[offs[:-1]]


_POWERS = np.array([10**k for k in range(1, 20)], dtype=np.uint64)


def _digits(arr: Any) -> Any:
    """Chars of each integer of ``arr`` as JSON writes it (nulls: any figure, set apart)."""
    values = arr.fill_null(0).to_numpy(zero_copy_only=False)
    if values.dtype.kind == "i":
        negative = values < 0
        wide = values.astype(np.int64)
        magnitude = np.where(negative, (-(wide + 1)).astype(np.uint64) + np.uint64(1),
                             wide.astype(np.uint64))
    else:
        negative = np.zeros(len(values), dtype=bool)
        magnitude = values.astype(np.uint64)
    return 1 + negative + np.searchsorted(_POWERS, magnitude, side="right")


def _json_lengths(arr: Any, depth: int = 0) -> Any | None:
    """Chars of the compact JSON of each value of ``arr`` as the object path writes it (the
    value Arrow gives back, ``null`` for a null), from the buffers: strings, integers, booleans
    and nulls, structs and lists of them. ``None`` for any other type (floats, whose shortest
    form only Python writes, dates, binaries, maps, ...) and for a type nested deeper than
    ``_TYPE_DEPTH``: the caller asks the values."""
    pa = _pa()
    t = arr.type
    n = len(arr)
    if depth > _TYPE_DEPTH:
        return None
    if pa.types.is_null(t):
        return np.full(n, 4, dtype=np.int64)
    if pa.types.is_boolean(t):
        out = 5 - arr.fill_null(True).to_numpy(zero_copy_only=False).astype(np.int64)
    elif pa.types.is_integer(t):
        out = _digits(arr)
    elif _text_type(t):
        # Decoded first: a dictionary's own values may be null where its indices are not.
        arr = _strings(arr)
        out = _counts(_kernel.json_string_lengths, arr, None)
    elif pa.types.is_struct(t):
        names = [f.name for f in t]
        if len(set(names)) != len(names):  # a dict keeps one of each: the values say which
            return None
        out = np.full(n, 2 + max(len(names) - 1, 0), dtype=np.int64)
        for name in names:
            # A null struct's children are null (Arrow may leave them holding anything: a
            # dictionary index into an empty dictionary, say).
            child = _json_lengths(_field(arr, name), depth + 1)
            if child is None:
                return None
            out += child + _kernel.compact_json_length(name) + 1
    elif _is_list(t):
        offs, values = _offsets(arr)
        child = _json_lengths(values, depth + 1)
        if child is None:
            return None
        count = np.diff(offs)
        out = 2 + np.maximum(count - 1, 0) + _sums(child, offs)
    else:
        return None
    out = np.asarray(out, dtype=np.int64)
    if arr.null_count:
        out[_nulls(arr)] = 4
    return out


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
    arr = _strings(arr)
    data, offs = _buffers(arr)
    return data, offs, (_nulls(arr) if arr.null_count else None)


def _text_chars(parts: Any, is_text: Any, unreadable: Any, counted: _Counted) -> Any:
    """Chars of the text parts (0 for the others); a text part without text is marked in
    ``unreadable`` (the object path says what it holds)."""
    text = _field(parts, "text")
    if text is None or not _text_type(text.type):
        unreadable |= is_text
        return np.zeros(len(parts), dtype=np.int64)
    text = _strings(text)  # a dictionary's null values are nulls too
    if text.null_count:
        unreadable |= is_text & _nulls(text)
    return np.where(is_text, _lengths(text, counted), 0)


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


def pa_concat(arrays: list[Any]) -> Any:
    return arrays[0] if len(arrays) == 1 else _pa().concat_arrays(arrays)


class _Measured:
    """The arrays ``_kernel.reduce_rows`` needs for one chunk, and the rows it cannot take."""

    def __init__(self, arr: Any, column: str) -> None:
        pa = _pa()
        n = len(arr)
        offs, values = _offsets(arr)
        m = len(values)
        self.offsets = offs
        self.values = values
        self.slow = np.zeros(n, dtype=bool)  # rows the object path measures
        self.counted = _Counted()  # the string arrays whose UTF-8 the counts have checked
        self.ncodes = 0
        self._id_strings: tuple[list[Any], Any, Any] = ([], None, None)
        self.call_codes = self.result_codes = np.zeros(0, dtype=np.int64)
        if arr.null_count:
            self.slow |= _nulls(arr)
        if values.null_count:
            self.slow |= _rows_of(_nulls(values), offs)
        role = _field(values, "role")
        self.role_strings: Any = None
        if role is None or not _text_type(role.type):
            # No row can be measured here: the object path says what is wrong with each.
            self.slow[:] = True
            self.roles = np.zeros(m, dtype=np.int8)
            self.chars = np.zeros(m, dtype=np.int64)
            self.flags = np.zeros(m, dtype=np.uint8)
            self.call_offsets = self.result_offsets = np.zeros(m + 1, dtype=np.int64)
            return
        role = self.role_strings = _strings(role)
        if role.null_count:
            self.slow |= _rows_of(_nulls(role), offs)
        data, roffs = _buffers(role)
        roles = _kernel.role_codes_utf8(data, roffs)
        chars = np.zeros(m, dtype=np.int64)
        flags = np.zeros(m, dtype=np.uint8)
        bad = np.zeros(m, dtype=bool)  # messages the object path must measure
        item = _field(values, "type")
        if item is not None and not pa.types.is_null(item.type):
            # Responses items other than messages (calls, outputs, reasoning, ...): objects.
            import pyarrow.compute as pc

            given = ~_nulls(item)
            if _text_type(item.type):
                is_message = pc.equal(_strings(item), "message").fill_null(False)
                given &= ~is_message.to_numpy(zero_copy_only=False)
            bad |= given
        calls, results = _Ids(), _Ids()
        content = _field(values, "content")
        if content is not None:
            self._content(content, chars, flags, bad, calls, results)
        # Tool calls: names and arguments counted, ids coded (before a message's tool_use ids).
        tool_calls = _field(values, "tool_calls")
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
            tcid = _field(values, "tool_call_id")
            answers = None
            if tcid is not None and _text_type(tcid.type):
                answers = tcid
            elif tcid is not None and not pa.types.is_null(tcid.type):
                bad[is_tool] |= ~_nulls(tcid)[is_tool]
            results.add(is_tool, answers, is_tool, first=True)
        self._codes(calls, results, m)
        self.slow |= _rows_of(bad, offs)
        self.roles, self.chars, self.flags = roles, chars, flags

    def _content(self, content: Any, chars: Any, flags: Any, bad: Any, calls: _Ids,
                 results: _Ids) -> None:
        pa = _pa()
        t = content.type
        if _text_type(t):
            chars += _lengths(content, self.counted)
        elif _is_list(t) and (_text_type(t.value_type) or pa.types.is_struct(t.value_type)):
            offs, parts = _offsets(content)
            present = ~_nulls(content) if content.null_count else None
            if present is not None:
                # A null list holds no parts, whatever range Arrow left it.
                odd = ~present & (np.diff(offs) > 0)
                bad |= odd
            if _text_type(t.value_type):  # parts that are plain strings
                per = _sums(_lengths(parts, self.counted), offs)
                if parts.null_count:
                    bad |= _rows_of(_nulls(parts), offs)
            else:
                per = self._parts(parts, offs, flags, bad, calls, results)
            chars += per if present is None else np.where(present, per, 0)
        elif not pa.types.is_null(t):
            # JSON text, a struct, numbers ...: the object path reads each message's content.
            bad |= ~_nulls(content)

    def _parts(self, parts: Any, offs: Any, flags: Any, bad: Any, calls: _Ids,
               results: _Ids) -> Any:
        """Chars of each message's content parts: text parts, ``tool_result`` blocks (their
        content), ``tool_use`` blocks (name and the compact JSON of the input), thinking
        blocks; other parts are opaque. Sets the messages' flags, collects the blocks' ids and
        marks the messages only objects can measure. Strings are counted, and flags set, by
        one kernel call over all parts (``_kernel.part_chars``)."""

        pa = _pa()
        k, m = len(parts), len(offs) - 1
        ptype = _field(parts, "type")
        if ptype is None or pa.types.is_null(ptype.type):
            return np.zeros(m, dtype=np.int64)
        if not _text_type(ptype.type):
            bad |= _rows_of(~_nulls(ptype), offs)
            return np.zeros(m, dtype=np.int64)
        code = _part_kinds(ptype)
        unreadable = _nulls(parts) if parts.null_count else np.zeros(k, dtype=bool)
        extra = None  # chars measured here, per part: a result's list content, a call's input

        def part_message(at: Any) -> Any:  # the message each of the parts ``at`` is in
            return np.searchsorted(offs, at, side="right") - 1

        read: list[Any] = []  # the string arrays part_chars reads (and checks)

        def text_field(name: str) -> Any:
            value = _field(parts, name)
            if value is None or not _text_type(value.type):
                return None
            read.append(_strings(value))
            return _string_field(read[-1])

        result = None
        at = np.flatnonzero(code == len(TEXT_PART_TYPES))
        if len(at):
            content = _field(parts, "content")
            if content is not None and _text_type(content.type):
                read.append(_strings(content))
                result = _string_field(read[-1])
            elif content is not None and not pa.types.is_null(content.type):
                extra = np.zeros(k, dtype=np.int64)
                extra[at] = self._result_chars(content, at, unreadable)
            results.add(part_message(at), self._ids(parts, "tool_use_id"), at)
        name = None
        at = np.flatnonzero(code == len(TEXT_PART_TYPES) + 1)
        if len(at):
            name = text_field("name")
            given = _field(parts, "input")
            if given is not None:
                # The compact JSON of each input, as the object path counts it (the value
                # read back from Arrow, null for a missing one): from the buffers where the
                # type allows, else from the values.
                inputs = _take(given, pa.array(at))
                try:
                    lengths = _json_lengths(inputs)
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
        ids = _field(parts, key)  # not text: the object path reads no id either
        return ids if ids is not None and _text_type(ids.type) else None

    def _result_chars(self, content: Any, at: Any, unreadable: Any) -> Any:
        """Chars of the content of the ``tool_result`` blocks at ``at``: a string, a list of
        strings or of text parts; anything else is read by the object path."""

        pa = _pa()
        if content is None or pa.types.is_null(content.type):
            return np.zeros(len(at), dtype=np.int64)
        t = content.type
        if _text_type(t):
            return _lengths(content, self.counted)[at]
        present = ~_nulls(content)
        if not (_is_list(t) and (_text_type(t.value_type) or pa.types.is_struct(t.value_type))):
            unreadable[at] |= present[at]
            return np.zeros(len(at), dtype=np.int64)
        offs, inner = _offsets(content)
        if content.null_count:
            unreadable[at] |= (~present & (np.diff(offs) > 0))[at]
        if _text_type(t.value_type):
            counted = _lengths(inner, self.counted)
            if inner.null_count:
                unreadable[at] |= _rows_of(_nulls(inner), offs)[at]
        else:
            counted = np.zeros(len(inner), dtype=np.int64)
            ptype = _field(inner, "type")
            if ptype is not None and _text_type(ptype.type):
                kinds = _part_kinds(ptype)
                is_text = (kinds >= 0) & (kinds < len(TEXT_PART_TYPES))
                deeper = kinds >= len(TEXT_PART_TYPES)  # nested blocks: the object path
                if inner.null_count:
                    deeper |= _nulls(inner)
                if is_text.any():
                    counted = _text_chars(inner, is_text, deeper, self.counted)
                unreadable[at] |= _rows_of(deeper, offs)[at]
            elif ptype is not None and not pa.types.is_null(ptype.type):
                unreadable[at] |= _rows_of(~_nulls(ptype), offs)[at]
        per = _sums(counted, offs)
        return np.where(present, per, 0)[at]

    def _calls(self, tool_calls: Any, chars: Any, flags: Any, bad: Any, calls: _Ids) -> None:
        pa = _pa()
        t = tool_calls.type
        if not (_is_list(t) and pa.types.is_struct(t.value_type)):
            bad |= ~_nulls(tool_calls)
            return
        offs, entries = _offsets(tool_calls)
        per_message = np.diff(offs)
        if tool_calls.null_count:
            # A null list holds no calls, whatever range Arrow left it: the object path reads
            # a message whose null list spans entries.
            odd = _nulls(tool_calls) & (per_message > 0)
            bad |= odd
        flags[per_message > 0] |= FLAG_TOOL_CALLS
        k = len(entries)
        unreadable = _nulls(entries) if entries.null_count else np.zeros(k, dtype=bool)
        counted = np.zeros(k, dtype=np.int64)
        fn = _field(entries, "function")
        if fn is not None and pa.types.is_struct(fn.type):
            for key in ("name", "arguments"):
                value = _field(fn, key)
                if value is None or pa.types.is_null(value.type):
                    continue
                if _text_type(value.type):
                    lengths = _lengths(value, self.counted)
                    if fn.null_count:
                        lengths[_nulls(fn)] = 0
                    counted += lengths
                elif key == "arguments":  # arguments as JSON: their compact text is counted
                    unreadable |= ~_nulls(value)
        elif fn is not None and not pa.types.is_null(fn.type):
            unreadable |= ~_nulls(fn)
        chars += _sums(counted, offs)
        if unreadable.any():
            bad |= _rows_of(unreadable, offs)
        message = np.repeat(np.arange(len(offs) - 1, dtype=np.int64), per_message)
        ids = _field(entries, "id")
        if ids is None or not _text_type(ids.type):
            if ids is not None and not pa.types.is_null(ids.type):
                bad |= _rows_of(~_nulls(ids), offs)
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
                    text = _strings(text)
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
        pa = _pa()
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


# ---------------------------------------------------------------------------------------------
# The object path, one row


def _json_fields(t: Any) -> set[str]:
    """Fields of a message struct held as Arrow's JSON extension type (parsed for the object
    path)."""
    pa = _pa()
    found = set()
    for f in t:
        if isinstance(f.type, pa.BaseExtensionType) and f.type.extension_name == "arrow.json":
            found.add(f.name)
    return found


def _rows_messages(arr: Any, rows: Any, column: str, json_fields: set[str]) -> list[Any]:
    """The messages of ``rows`` as Python objects (one conversion), JSON-typed fields parsed."""
    if not len(rows):
        return []
    # Row by row: a take of the rows first would copy their (often long) values once more.
    out = [arr[row].as_py() for row in rows.tolist()]  # the column's UTF-8 is checked
    if json_fields:
        for row, messages in zip(rows.tolist(), out, strict=True):
            _parse_json_fields(messages, row, column, json_fields)
    return out


def _parse_json_fields(messages: Any, row: int, column: str, json_fields: set[str]) -> None:
    if isinstance(messages, list):
        for i, message in enumerate(messages):
            if not isinstance(message, dict):
                continue
            for key in json_fields & message.keys():
                if isinstance(message[key], str):
                    message[key] = _json(message[key], f"{column}[{row}][{i}].{key}")


def _json(text: str, path: str) -> Any:
    """``text`` parsed by orjson, which reads arrays and objects nested up to
    ``MAX_JSON_DEPTH`` levels (a JSONL line's limit too); deeper is ``too-deep``; integers
    exact however large (orjson alone makes a float of one beyond 64 bits)."""
    from ..jsonl.files import loads_exactly

    try:
        return loads_exactly(text.encode())
    except orjson.JSONDecodeError as exc:
        if "depth" in str(exc):
            raise ContextPlanError(
                f"the JSON text nests arrays and objects deeper than {MAX_JSON_DEPTH} levels",
                path=path, code="too-deep") from None
        raise ContextPlanError(f"expected JSON text ({exc})", path=path,
                               code="invalid-json") from None
    except ValueError:  # a long number nested too deeply to be read exactly
        raise ContextPlanError(
            f"the JSON text nests arrays and objects deeper than {MAX_JSON_DEPTH} levels",
            path=path, code="too-deep") from None


def _row_error(exc: ContextPlanError, column: str, row: int) -> ContextPlanError:
    def where(path: str) -> str:
        rest = path[len("messages"):] if path.startswith("messages") else (
            "." + path if path else "")
        return f"{column}[{row}]{rest}"

    return ContextPlanError([Issue(where(i.path), i.message, i.code) for i in exc.issues])


class _ObjectRow(NamedTuple):
    kept: list[int | dict[str, Any]]  # message index in the row, or a new message
    figures: tuple[Any, ...]
    warnings: list[tuple[str, str, int | None, str | None]]


def _object_row(run: _Run, messages: Any, column: str, row: int) -> _ObjectRow:
    if messages is None:
        raise ContextPlanError("expected a list of messages, got null", path=f"{column}[{row}]",
                               code="invalid-messages")
    try:
        _kernel.measure(messages)  # errors named by the message's index in the row
        if run.fused is not None:
            return _fused_row(run, messages)
        plan = ContextPlan.from_messages(messages)
        result = process_context(plan, run.prepared, implementations=run.implementations)
    except ContextPlanError as exc:
        raise _row_error(exc, column, row) from None
    report = result.report
    groups = sum((s.groups_before or 0) - (s.groups_after or 0)
                 for s in report.steps if s.status == "applied" and s.kind == "trim")
    figures = (report.before.chars, report.after.chars, report.before.messages,
               report.after.messages, groups, report.triggered, report.target_reached,
               report.before.tokens, report.after.tokens, report.missed_reason)
    warnings = [(w.code, w.fragment_id, w.index, w.tool_call_id) for w in report.warnings]
    return _ObjectRow(_kept(messages, result.input), figures, warnings)


def _fused_row(run: _Run, messages: list[Any]) -> _ObjectRow:
    prepared = run.prepared
    assert run.fused is not None
    raw = _kernel.reduce_transcript(messages, run.fused, prepared._trigger, prepared._watermark)
    totals = raw[8]
    figures = (totals[0], totals[3], totals[1], totals[4], totals[7], raw[0],
               bool(totals[8]) if run.reduces else None, None, None,
               fused_missed_reason(prepared, raw))
    ids = raw[7]
    # (the detail of an unknown-role is its role and count, which the figures leave out)
    warnings = [(code, ids[f], index, None if code == "unknown-role" else detail)
                for f, index, code, detail in raw[5]]
    return _ObjectRow(_kept(messages, raw[6]), figures, warnings)


def _kept(messages: list[Any], output: list[Any]) -> list[int | dict[str, Any]]:
    """The output as indices of the row's messages where it holds them (in order), new
    messages as they are.

    A compress handler answers with copies: a message it left as it was (same content, as the
    model sees it) is the row's own message again, in order, so that its Arrow value is taken
    as it was rather than built anew; only the messages a handler changed or wrote are new."""
    at = {id(m): i for i, m in enumerate(messages)}
    kept: list[int | dict[str, Any]] = [at.get(id(m), m) if type(m) is dict else m
                                        for m in output]
    if all(isinstance(k, int) for k in kept):
        return kept
    from ..content import snapshot

    by_content: dict[Any, list[int]] = {}
    for i in reversed(range(len(messages))):
        by_content.setdefault(snapshot(messages[i]), []).append(i)
    last = -1
    for j, item in enumerate(kept):
        if isinstance(item, int):
            last = item
            continue
        found = by_content.get(snapshot(item))
        while found and found[-1] <= last:  # only a later message keeps the order
            found.pop()
        if found:
            last = found.pop()
            kept[j] = last
    return kept


# ---------------------------------------------------------------------------------------------
# Assembly


def _ranges(starts: Any, lengths: Any) -> Any:
    """Concatenated ``range(start, start + length)`` for each pair, vectorised."""
    lengths = np.asarray(lengths, dtype=np.int64)
    total = int(lengths.sum())
    if total == 0:
        return np.zeros(0, dtype=np.int64)
    ends = np.cumsum(lengths)
    shift = np.repeat(np.asarray(starts, dtype=np.int64) - (ends - lengths), lengths)
    return np.arange(total, dtype=np.int64) + shift


def _map_type(t: Any, leaf: Callable[[Any], Any]) -> Any:
    """``t`` with ``leaf`` applied to every type it holds (through structs and lists), with a
    stack of its own: a type may nest as deeply as a tool input."""
    pa = _pa()

    def children(node: Any) -> list[Any]:
        if pa.types.is_struct(node):
            return [f.type for f in node]
        if pa.types.is_list(node) or pa.types.is_large_list(node):
            return [node.value_type]
        return []

    done: list[Any] = []  # the mapped types, each waiting for its parent
    stack: list[tuple[Any, bool]] = [(t, False)]
    while stack:
        node, expanded = stack.pop()
        if not expanded:
            node = leaf(node)
            inner = children(node)
            stack.append((node, True))
            stack += [(child, False) for child in reversed(inner)]
            continue
        n = len(children(node))
        mapped, done[len(done) - n:] = done[len(done) - n:], []
        if pa.types.is_struct(node):
            node = pa.struct([f.with_type(m) for f, m in zip(node, mapped, strict=True)])
        elif pa.types.is_list(node):
            node = pa.list_(node.value_field.with_type(mapped[0]))
        elif pa.types.is_large_list(node):
            node = pa.large_list(node.value_field.with_type(mapped[0]))
        done.append(node)
    return done[0]


def _storage(t: Any) -> Any:
    """An extension type (Arrow's JSON type, say) as its storage type."""
    while isinstance(t, _pa().BaseExtensionType):
        t = t.storage_type
    return t


def _plain(t: Any) -> Any:
    """A view type as the large type ``take`` supports."""
    pa = _pa()
    if pa.types.is_string_view(t):
        return pa.large_string()
    if pa.types.is_binary_view(t):
        return pa.large_binary()
    return t


def _storage_type(t: Any) -> Any:
    """``t`` with every extension type replaced by its storage."""
    return _map_type(t, _storage)


def _new_values(struct_type: Any, messages: list[dict[str, Any]], json_fields: set[str],
                column: str) -> Any:
    """New messages (a handler's) as Arrow values of the column's message type."""
    pa = _pa()
    names = {f.name for f in struct_type}
    rows = []
    for message in messages:
        extra = set(message) - names
        if extra:
            raise ContextPlanError(
                f"a new message has fields the column's messages do not: {sorted(extra)}",
                path=column, code="schema-mismatch",
            )
        if json_fields:
            from ..jsonl.files import dumps  # orjson's bytes, deep nesting too

            message = {k: (dumps(v).decode() if k in json_fields and v is not None else v)
                       for k, v in message.items()}
        rows.append(message)
    storage = _storage_type(struct_type)
    try:
        built = pa.array(rows, type=storage)
    except (pa.ArrowInvalid, pa.ArrowTypeError, OverflowError) as exc:
        raise ContextPlanError(
            f"a new message does not fit the column's message type ({exc})", path=column,
            code="schema-mismatch",
        ) from None
    except UnicodeEncodeError as exc:  # a lone surrogate: no UTF-8 holds it
        raise ContextPlanError(
            f"a new message holds text that is not UTF-8 ({exc.reason}: "
            f"{exc.object[exc.start:exc.end]!r})", path=column, code="invalid-utf8",
        ) from None
    _check_held(messages, built, json_fields, column)
    return built.cast(struct_type) if storage != struct_type else built


def _check_held(messages: list[dict[str, Any]], built: Any, json_fields: set[str],
                column: str) -> None:
    """The new messages, as the column holds them, are the messages given: every value reads
    back as it was (Arrow would cut a fraction put into an integer field, say), and they carry
    the chars they were measured with (an emptied tool input in a struct reads back with a null
    for every field, which would make the figures say what the table does not)."""
    back = built.to_pylist()
    if json_fields:
        for message in back:
            for key in json_fields & message.keys():
                if isinstance(message[key], str):
                    message[key] = _json(message[key], column)
    for i, (given, held) in enumerate(zip(messages, back, strict=True)):
        found = first_difference(given, held)
        if found is not None:
            where, was, would_be = found
            raise ContextPlanError(
                f"a new message does not fit the column's message type as it is: new message "
                f"{i}, {where}: {was!r} would be held as {would_be!r}", path=column,
                code="schema-mismatch",
            )
    measured = _kernel.measure_messages(messages)[1]
    held = _kernel.measure_messages(back)[1]
    for i in np.flatnonzero(measured != held).tolist()[:1]:
        raise ContextPlanError(
            f"a new message does not fit the column's message type as it is: it holds "
            f"{int(measured[i])} chars, and {int(held[i])} as the column would hold it "
            f"(Arrow structs cannot hold an empty tool input, say)", path=column,
            code="schema-mismatch",
        )


def _take(values: Any, indices: Any) -> Any:
    pa = _pa()
    try:
        return values.take(indices)
    except pa.ArrowNotImplementedError:
        plain = _map_type(values.type, _plain)
        if plain == values.type:
            raise
        return values.cast(plain).take(indices).cast(values.type)


def _runs(starts: Any, lengths: Any) -> tuple[Any, Any]:
    """The ranges ``[start, start + length)`` without the empty ones, each run of adjacent
    ranges joined into one: (starts, lengths)."""
    keep = lengths > 0
    s, n = starts[keep], lengths[keep]
    if len(s) < 2:
        return s, n
    ends = s + n
    first = np.flatnonzero(np.concatenate([[True], s[1:] != ends[:-1]]))
    last = np.concatenate([first[1:] - 1, [len(s) - 1]])
    return s[first], ends[last] - s[first]


def _index_runs(indices: Any) -> tuple[Any, Any]:
    """The runs of consecutive ``indices``: (starts, lengths)."""
    if not len(indices):
        return indices, indices
    first = np.flatnonzero(np.concatenate([[True], np.diff(indices) != 1]))
    return indices[first], np.diff(np.concatenate([first, [len(indices)]]))


def _copy(data: Any, byte_starts: Any, byte_stops: Any) -> Any:
    """The byte ranges of ``data`` in one new Arrow buffer: a numpy array's, so that inside a
    pooled section (``_kernel.pooled_arrays``) its memory comes from the kernel's pool, whose
    blocks keep their pages between calls where a fresh allocation faults each one in."""
    size = int((byte_stops - byte_starts).sum())
    out = np.empty(size, dtype=np.uint8)
    if size:
        _kernel.gather_bytes(data, byte_starts, byte_stops, out)
    return _pa().py_buffer(out)


_BYTES_TYPES = ("is_string", "is_large_string", "is_binary", "is_large_binary")


def _gather(arr: Any, starts: Any, lengths: Any, indices: Any = None, depth: int = 0) -> Any:
    """The elements of ``arr`` in the ranges ``[start, start + length)``, one after the other:
    a take by ranges, each range of each buffer copied in one piece (nested lists and structs
    by offset arithmetic down to their leaves). Types without a plain buffer layout (booleans,
    dictionaries, views, unions), and what lies deeper than ``_TYPE_DEPTH``, are taken element
    by element. ``indices``: the ranges' elements, where the caller has them (a struct's
    children share them)."""
    pa = _pa()
    t = arr.type
    total = int(lengths.sum())
    if len(starts) == 1:
        return arr.slice(int(starts[0]), total)  # one range: no copy at all

    def elements() -> Any:
        nonlocal indices
        if indices is None:
            indices = _ranges(starts, lengths)
        return indices

    if isinstance(t, pa.BaseExtensionType):
        return pa.ExtensionArray.from_storage(t, _gather(arr.storage, starts, lengths, indices,
                                                         depth + 1))
    is_bytes = any(getattr(pa.types, name)(t) for name in _BYTES_TYPES)
    fixed = (pa.types.is_integer(t) or pa.types.is_floating(t) or pa.types.is_temporal(t)
             or pa.types.is_decimal(t) or pa.types.is_fixed_size_binary(t))
    if depth > _TYPE_DEPTH or not (is_bytes or fixed or pa.types.is_struct(t) or _is_list(t)):
        return _take(arr, pa.array(elements(), type=pa.int64()))
    validity, null_count = None, 0
    if arr.null_count:
        bits, valid = _kernel.gather_bits(arr.buffers()[0], arr.offset, starts, lengths)
        null_count = total - valid
        validity = pa.py_buffer(bits)
    at = starts + arr.offset
    if pa.types.is_struct(t):
        children = [_gather(arr.field(i), starts, lengths, indices, depth + 1)
                    for i in range(t.num_fields)]
        return pa.Array.from_buffers(t, total, [validity], null_count, children=children)
    if fixed:
        width = t.bit_width // 8
        data = _copy(arr.buffers()[1], at * width, (at + lengths) * width)
        return pa.Array.from_buffers(t, total, [validity, data], null_count)
    wide = pa.types.is_large_list(t) or pa.types.is_large_string(t) or pa.types.is_large_binary(
        t)
    dtype = np.int64 if wide else np.int32
    offs = np.frombuffer(arr.buffers()[1], dtype=dtype)[arr.offset: arr.offset + len(arr) + 1]
    gathered, lo, hi = _kernel.gather_offsets(offs, starts, lengths)
    new_offsets = pa.py_buffer(gathered)
    if is_bytes:
        data = arr.buffers()[2]
        data = _copy(data if data is not None else b"", lo, hi)
        return pa.Array.from_buffers(t, total, [validity, new_offsets, data], null_count)
    # A list: its values in the ranges its offsets give (absolute: ``values`` is unsliced).
    values = _gather(arr.values, *_runs(lo, hi - lo), depth=depth + 1)
    return pa.Array.from_buffers(t, total, [validity, new_offsets], null_count,
                                 children=[values])


def _unknown_roles(measured: _Measured, fast: Any, offs: Any, head: Any, cut: Any,
                   tail: Any) -> tuple[Any, Any, Any] | None:
    """The ``unknown-role`` warnings of the rows reduced here, as arrays ``(row, fragment,
    index)``: per row and fragment of the result (system before ``head``, the kept history
    from ``cut``, the question from ``tail``), one per role the accounting does not know, at
    its first message, in order. Roles are told apart by their bytes (dictionary codes): the
    figures name no role, so none is decoded."""
    at = np.flatnonzero(measured.roles == ROLE_OTHER)
    if not len(at):
        return None
    row = np.searchsorted(offs, at, side="right") - 1
    at, row = at[fast[row]], row[fast[row]]
    h, c, t = head[row], cut[row], tail[row]
    kept = (at < h) | (at >= c)  # messages head..cut were trimmed
    at, row, h, c, t = at[kept], row[kept], h[kept], c[kept], t[kept]
    if not len(at):
        return None
    frag = np.where(at < h, 0, np.where(at < t, 1, 2))
    start = np.where(frag == 0, offs[:-1][row], np.where(frag == 1, c, t))
    import pyarrow.compute as pc

    role = pc.dictionary_encode(measured.role_strings.take(_pa().array(at)))
    code = np.asarray(role.indices, dtype=np.int64)
    # each (row, fragment, role) at its first message, in order of rows, fragments, messages
    order = np.lexsort((at, code, frag, row))
    row, frag, code, at, start = row[order], frag[order], code[order], at[order], start[order]
    first = np.flatnonzero(np.concatenate([[True], (row[1:] != row[:-1]) | (
        frag[1:] != frag[:-1]) | (code[1:] != code[:-1])]))
    order = np.lexsort((at[first], frag[first], row[first]))
    first = first[order]
    return row[first], frag[first], at[first] - start[first]


class _Chunk:
    """One chunk of the column, reduced."""

    def __init__(self, run: _Run, arr: Any, column: str) -> None:
        pa = _pa()
        t = arr.type
        if not (_is_list(t) and pa.types.is_struct(t.value_type)):
            raise ContextPlanError(
                f"expected a list<struct<role, content, ...>> column, got {t}", path=column,
                code="invalid-messages",
            )
        n = len(arr)
        json_fields = _json_fields(t.value_type)
        try:
            measured = _Measured(arr, column) if run.steps is not None else None
        except _kernel.Utf8Error as exc:
            check_utf8(arr, column)  # names the first string that is not UTF-8
            raise ContextPlanError(f"holds bytes that are not UTF-8 ({exc})", path=column,
                                   code="invalid-utf8") from None
        # Every string of the column, at any depth, is UTF-8 (those the counts read are known
        # to be): what is not goes into no figure, no warning and no output.
        check_utf8(arr, column, measured.counted if measured is not None else None)
        if measured is None:
            slow = np.ones(n, dtype=bool)
            offs, values = _offsets(arr)
        else:
            slow = measured.slow
            offs, values = measured.offsets, measured.values
        figs = {name: np.zeros(n, dtype=np.int64) for name in (
            "chars_before", "chars_after", "messages_before", "messages_after",
            "groups_removed")}
        triggered = np.zeros(n, dtype=bool)
        missed = np.zeros(n, dtype=np.uint8)  # a missed reason's code (0: none)
        reached: Any = np.zeros(n, dtype=bool)
        reached_null = np.zeros(n, dtype=bool)
        tokens = [np.zeros(n, dtype=np.int64), np.zeros(n, dtype=np.int64)]
        starts = np.empty(2 * n, dtype=np.int64)
        lengths = np.zeros(2 * n, dtype=np.int64)
        changed = False
        object_rows = np.flatnonzero(slow)
        w_rows: list[Any] = []
        w_cols: list[Any] = [[], [], [], []]
        if measured is not None:
            prepared = run.prepared
            assert run.steps is not None
            head, cut, tail, before, after, groups, fired, codes, warn = _kernel.reduce_rows(
                offs, measured.roles, measured.flags, measured.chars, measured.call_offsets,
                measured.call_codes, measured.result_offsets, measured.result_codes,
                measured.ncodes, run.steps,
                prepared._trigger, prepared._watermark, slow.view(np.uint8),
            )
            fast = ~slow
            a, b = offs[:-1], offs[1:]
            watermark = prepared._watermark
            kept = (b - a) - (cut - head)
            over = (after > watermark) if watermark >= 0 else None
            if not object_rows.size:
                # Every row measured here: the kernel's arrays are the figures.
                starts[0::2], lengths[0::2] = a, head - a
                starts[1::2], lengths[1::2] = cut, b - cut
                figs.update(chars_before=before, chars_after=after, messages_before=b - a,
                            messages_after=kept, groups_removed=groups)
                triggered = fired != 0
                missed = codes
                if run.reduces:
                    reached = ~over if over is not None else np.ones(n, dtype=bool)
                else:
                    reached_null[:] = True
                changed = bool(np.any(cut != head))
            else:
                starts[0::2], lengths[0::2] = a, np.where(fast, head - a, 0)
                starts[1::2] = np.where(fast, cut, b)
                lengths[1::2] = np.where(fast, b - cut, 0)
                figs["chars_before"][fast] = before[fast]
                figs["chars_after"][fast] = after[fast]
                figs["messages_before"][fast] = (b - a)[fast]
                figs["messages_after"][fast] = kept[fast]
                figs["groups_removed"][fast] = groups[fast]
                triggered[fast] = fired[fast].astype(bool)
                missed[fast] = codes[fast]
                if run.reduces:
                    reached[fast] = True if over is None else ~over[fast]
                else:
                    reached_null[fast] = True
                changed = bool(np.any(cut[fast] != head[fast]))
            unknown = _unknown_roles(measured, fast, offs, head, cut, tail)
            if unknown is not None:  # before the pairing warnings, as a report has them
                u_row, u_frag, u_index = unknown
                w_rows.append(u_row)
                w_cols[0].append(pa.repeat(pa.scalar("unknown-role", type=pa.string()),
                                           len(u_row)))
                w_cols[1].append(pa.array(_FRAGMENTS, type=pa.string()).take(pa.array(u_frag)))
                w_cols[2].append(pa.array(u_index, type=pa.int64()))
                w_cols[3].append(pa.nulls(len(u_row), type=pa.string()))
            w_row, w_frag, w_index, w_code, w_id = warn
            if len(w_row):
                w_rows.append(w_row)
                w_cols[0].append(pa.array(np.asarray(_WARNING_CODES, dtype=object)[w_code],
                                          type=pa.string()))
                frag_names = pa.array(_FRAGMENTS, type=pa.string())
                w_cols[1].append(frag_names.take(pa.array(w_frag)))
                w_cols[2].append(pa.array(w_index, type=pa.int64()))
                w_cols[3].append(measured.id_strings(w_id).cast(pa.string()))
        # The object path, row by row.
        new: list[dict[str, Any]] = []
        pieces: dict[int, list[int]] = {}
        ow_rows: list[int] = []
        ow: list[list[Any]] = [[], [], [], []]
        rows_py = _rows_messages(arr, object_rows, column, json_fields)
        for row, messages in zip(object_rows.tolist(), rows_py, strict=True):
            done = _object_row(run, messages, column, row)
            f = done.figures
            for name, value in zip(figs, f[:5], strict=True):
                figs[name][row] = value
            triggered[row] = f[5]
            if f[9] is not None:
                missed[row] = MISSED_REASONS.index(f[9]) + 1
            if f[6] is None:
                reached_null[row] = True
            else:
                reached[row] = f[6]
            if run.counted:
                tokens[0][row] = f[7] or 0
                tokens[1][row] = f[8] or 0
            a_row = int(offs[row])
            kept_at: list[int] = []
            for item in done.kept:
                if isinstance(item, int):
                    kept_at.append(a_row + item)
                else:
                    kept_at.append(len(values) + len(new))
                    new.append(item)
            if kept_at != list(range(a_row, int(offs[row + 1]))):
                changed = True
            pieces[row] = kept_at
            for w in done.warnings:
                ow_rows.append(row)
                for k in range(4):
                    ow[k].append(w[k])
        self.path = np.where(slow, 1, 0).astype(np.int8)
        self.figs, self.triggered, self.tokens = figs, triggered, tokens
        self.missed = missed
        if not reached_null.any():
            self.reached = pa.array(reached, type=pa.bool_())
        elif reached_null.all():
            self.reached = pa.nulls(n, type=pa.bool_())
        else:
            self.reached = pa.array(reached, mask=reached_null, type=pa.bool_())
        if ow_rows:
            w_rows.append(np.asarray(ow_rows, dtype=np.int64))
            w_cols[0].append(pa.array(ow[0], type=pa.string()))
            w_cols[1].append(pa.array(ow[1], type=pa.string()))
            w_cols[2].append(pa.array(ow[2], type=pa.int64()))
            w_cols[3].append(pa.array(ow[3], type=pa.string()))
        self.warnings = self._warnings(n, w_rows, w_cols)
        if not changed:
            self.messages = arr
            return
        # Output: the kept messages of every row gathered by ranges from the column's values
        # (and the new messages after them), rows delimited by offset arithmetic.
        per_row = lengths[0::2] + lengths[1::2]
        if not pieces:
            taken = _gather(values, *_runs(starts, lengths))
        else:
            indices = _ranges(starts, lengths)
            # Object rows have no columnar ranges: their indices go where their row begins.
            rows = np.asarray(sorted(pieces), dtype=np.int64)
            fast_at = np.concatenate([[0], np.cumsum(per_row)])
            segments = np.split(indices, fast_at[rows])
            parts: list[Any] = [segments[0]]
            for k, row in enumerate(rows.tolist()):
                parts += [np.asarray(pieces[row], dtype=np.int64), segments[k + 1]]
                per_row[row] = len(pieces[row])
            indices = np.concatenate(parts)
            source = values
            if new:
                source = pa.concat_arrays([values, _new_values(t.value_type, new, json_fields,
                                                               column)])
            taken = _gather(source, *_index_runs(indices))
        list_offsets = np.concatenate([[0], np.cumsum(per_row)])
        cls = pa.LargeListArray if pa.types.is_large_list(t) else pa.ListArray
        odtype = np.int64 if pa.types.is_large_list(t) else np.int32
        mask = arr.is_null() if arr.null_count else None
        self.messages = cls.from_arrays(pa.array(list_offsets.astype(odtype)), taken,
                                        type=t, mask=mask)

    @staticmethod
    def _warnings(n: int, rows: list[Any], cols: list[list[Any]]) -> Any:
        pa = _pa()
        wtype = warning_type()
        if not rows:
            return pa.ListArray.from_arrays(pa.array(np.zeros(n + 1, dtype=np.int32)),
                                            pa.array([], type=wtype.value_type), type=wtype)
        row = np.concatenate(rows)
        order = np.argsort(row, kind="stable")
        struct = pa.StructArray.from_arrays(
            [pa.concat_arrays(c).take(pa.array(order)) for c in cols],
            fields=list(wtype.value_type),
        )
        counts = np.bincount(row, minlength=n)
        offsets = np.concatenate([[0], np.cumsum(counts)]).astype(np.int32)
        return pa.ListArray.from_arrays(pa.array(offsets), struct, type=wtype)


MIN_PIECE_MESSAGES = 32_768  # messages below which a piece is not worth a thread of its own


def _piece_bounds(chunk: Any, workers: int) -> list[int]:
    """Where to cut a chunk's rows into pieces of about as many messages each (a few long
    transcripts weigh as much as many short ones)."""
    n = len(chunk)
    if workers < 2 or n < 2 or not _is_list(chunk.type):
        return [0, n]
    offs = _ints(chunk.offsets)
    messages = int(offs[-1]) - int(offs[0])
    k = max(1, min(workers, messages // MIN_PIECE_MESSAGES, n))
    if k == 1:
        return [0, n]
    targets = int(offs[0]) + messages * np.arange(1, k, dtype=np.int64) // k
    cuts = np.searchsorted(offs, targets).tolist()
    return sorted({0, n, *(c for c in cuts if 0 < c < n)})


def _threads(threads: int | None) -> int:
    if threads is not None:
        if type(threads) is not int or threads < 1:
            raise ValueError(f"threads: expected an integer >= 1, got {threads!r}")
        return threads
    try:
        return max(1, len(os.sched_getaffinity(0)))  # type: ignore[attr-defined,unused-ignore]
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def reduce_table(
    table: Any,
    policy: Any,
    *,
    column: str = "messages",
    counter: Any = None,
    handlers: Mapping[str, Callable[..., Any]] | None = None,
    implementations: Mapping[str, Any] | None = None,
    threads: int | None = None,
) -> Reduced:
    """Reduce every transcript of ``table[column]`` by ``policy``.

    ``table``: a ``pyarrow.Table`` or ``RecordBatch`` whose ``column`` is a
    ``list<struct<role, content, ...>>`` (``list`` or ``large_list``, any child name; strings as
    ``string``, ``large_string`` or ``string_view``; content as a string, a list of parts or
    Arrow's JSON type; ``tool_calls``, ``tool_call_id``; nulls for missing keys). ``policy``: a
    document, a typed policy or a prepared one (validate or reduce; an audit needs an original
    plan, which a table does not have).

    Returns :class:`Reduced` ``(table, figures)``: the table with every column kept, rows in
    input order, ``column`` reduced; the figures one row per input row (``chars_before``,
    ``chars_after``, ``messages_before``, ``messages_after``, ``groups_removed``,
    ``triggered``, ``target_reached`` (null for a validate policy), ``missed_reason`` (the
    report's ``missedReason``: null unless the row triggered and missed its target),
    ``warnings`` (code, fragment_id, index, tool_call_id), ``path`` (``columnar`` or
    ``object``), and
    ``tokens_before``, ``tokens_after`` when a counter is given). A row means exactly what
    ``process_context(ContextPlan.from_messages(row), policy)`` means (a row without a history
    skips the steps on it, as ``process_context`` does).

    ``threads``: how many pieces of a table's rows are reduced side by side (default: the
    CPUs this process may use; a piece holds about as many messages as the others, at least
    32,768, and a RecordBatch is one piece). The output column is then chunked by piece.

    Raises :class:`ContextPlanError` naming the column, the row, the message and the field of
    the first row that is not a valid transcript, :class:`ContextPolicyError` for the policy.
    """
    pa = _pa()
    run = _Run(policy, counter, handlers, implementations)
    is_batch = isinstance(table, pa.RecordBatch)
    if not is_batch and not isinstance(table, pa.Table):
        raise TypeError(f"expected a pyarrow Table or RecordBatch, got {type(table).__name__}")
    names = table.schema.names
    if column not in names:
        raise ContextPlanError(
            f"the table has no column {column!r} (columns: {', '.join(names) or 'none'})",
            path=column, code="missing-column",
        )
    where = names.index(column)
    data = table.column(where)
    chunks = [data] if is_batch else list(data.chunks)
    # Pieces of rows, reduced side by side: the kernel, the UTF-8 count and Arrow's take run
    # without the GIL. A RecordBatch stays one piece (its column is one array).
    pieces: list[tuple[int, Any]] = []
    offset = 0
    workers = 1 if is_batch else _threads(threads)
    for chunk in chunks:
        bounds = _piece_bounds(chunk, workers)
        if len(bounds) == 2:
            pieces.append((offset, chunk))
        else:
            pieces += [(offset + a, chunk.slice(a, b - a)) for a, b in pairwise(bounds)]
        offset += len(chunk)

    def one(piece: tuple[int, Any]) -> _Chunk:
        at, arr = piece
        try:
            # numpy's large arrays from the kernel's pool (a context variable: per thread).
            with _kernel.pooled_arrays():
                return _Chunk(run, arr, column)
        except ContextPlanError as exc:
            raise (_shift_rows(exc, column, at) if at else exc) from None

    if len(pieces) > 1:
        from concurrent.futures import ThreadPoolExecutor

        with ThreadPoolExecutor(min(workers, len(pieces))) as pool:
            done = list(pool.map(one, pieces))
    else:
        done = [one(p) for p in pieces] if chunks else []
    chunks = [arr for _, arr in pieces]
    with _kernel.pooled_arrays():
        figures = _figures(done, run)
    if is_batch:
        arrays = list(table.columns)
        arrays[where] = done[0].messages if done else data
        out = pa.RecordBatch.from_arrays(arrays, schema=table.schema)
        combined = figures.combine_chunks()
        return Reduced(out, pa.RecordBatch.from_arrays(
            [col.chunk(0) if col.num_chunks else pa.array([], type=col.type)
             for col in combined.columns], schema=figures.schema))
    if all(c.messages is ch for c, ch in zip(done, chunks, strict=True)):
        return Reduced(table, figures)
    new = pa.chunked_array([c.messages for c in done], type=data.type)
    return Reduced(table.set_column(where, table.schema.field(where), new), figures)


def release_memory() -> None:
    """Give back the blocks the compiled kernel's pool holds for the next call.

    Inside ``reduce_table`` numpy's large arrays (the temporaries over every message, the
    output's copied buffers) take their memory from a pool that keeps freed blocks, up to 512
    MiB, so that the next call, or the next record batch of a stream, does not fault every
    page in again. Blocks that have waited two seconds since they were freed are given back
    when a call begins or ends; nothing runs between calls, so this gives back all of them now
    (after the last table of a long-running process, say)."""
    _kernel.release_pool()


def _shift_rows(exc: ContextPlanError, column: str, offset: int) -> ContextPlanError:
    import re

    pattern = re.compile(rf"^{re.escape(column)}\[(\d+)\]")
    return ContextPlanError([
        Issue(pattern.sub(lambda m: f"{column}[{int(m.group(1)) + offset}]", i.path), i.message,
              i.code) for i in exc.issues
    ])


def figures_schema(counted: bool) -> pa.Schema:
    """The schema of :func:`reduce_table`'s figures."""
    pa = _pa()
    fields = [pa.field(name, pa.int64(), nullable=False) for name in FIGURE_COLUMNS[:5]]
    fields += [pa.field("triggered", pa.bool_(), nullable=False),
               pa.field("target_reached", pa.bool_()),
               pa.field("missed_reason", pa.string()),
               pa.field("warnings", warning_type(), nullable=False),
               pa.field("path", pa.string(), nullable=False)]
    if counted:
        fields += [pa.field("tokens_before", pa.int64()), pa.field("tokens_after", pa.int64())]
    return pa.schema(fields)


def _figures(done: list[_Chunk], run: _Run) -> Any:
    pa = _pa()
    schema = figures_schema(run.counted)

    def cat(parts: list[Any], dtype: Any) -> Any:
        if len(parts) == 1:
            return parts[0].astype(dtype, copy=False)
        return np.concatenate(parts).astype(dtype, copy=False) if parts else np.zeros(
            0, dtype=dtype)

    columns: dict[str, Any] = {}
    for name in FIGURE_COLUMNS[:5]:
        columns[name] = pa.array(cat([c.figs[name] for c in done], np.int64))
    columns["triggered"] = pa.array(cat([c.triggered for c in done], bool))
    columns["target_reached"] = pa.concat_arrays([c.reached for c in done]) if done else \
        pa.array([], type=pa.bool_())
    missed = cat([c.missed for c in done], np.uint8)
    if missed.any():
        names = pa.array([None, *MISSED_REASONS], type=pa.string())
        columns["missed_reason"] = names.take(pa.array(missed))
    else:
        columns["missed_reason"] = pa.nulls(len(missed), type=pa.string())
    columns["warnings"] = pa.concat_arrays([c.warnings for c in done]) if done else \
        pa.array([], type=warning_type())
    path = cat([c.path for c in done], np.int8)
    if path.any():
        columns["path"] = pa.array([FAST, OBJECT], type=pa.string()).take(pa.array(path))
    else:  # every row on the columnar path
        columns["path"] = pa.repeat(pa.scalar(FAST, type=pa.string()), len(path))
    if run.counted:
        columns["tokens_before"] = pa.array(cat([c.tokens[0] for c in done], np.int64))
        columns["tokens_after"] = pa.array(cat([c.tokens[1] for c in done], np.int64))
    return pa.Table.from_pydict(columns, schema=schema)
