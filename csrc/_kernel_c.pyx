# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True
# cython: initializedcheck=False, embedsignature=True
"""Compiled kernel of contextpolicy: the twin of ``contextpolicy/_kernel_py.py``.

Same functions, same results, same errors; the pure twin is the documentation and the type
surface. Message dicts are read in place with borrowed references: nothing is copied and no
Python object is created per message on the hot path.
"""

cimport cython
from cpython.dict cimport PyDict_Check
from cpython.list cimport PyList_Check
from cpython.ref cimport PyObject
from cpython.unicode cimport PyUnicode_Check
from libc.stdint cimport int8_t, int32_t, int64_t, uint8_t
from libc.string cimport memcmp, memset

import json

import numpy as np

from contextpolicy import _kernel_py

from contextpolicy._constants import (
    FLAG_OPENS_TURN as _FLAG_OPENS_TURN,
    FLAG_TOOL_CALLS as _FLAG_TOOL_CALLS,
    FLAG_TOOL_RESULT as _FLAG_TOOL_RESULT,
    ROLE_CODES,
)
from contextpolicy.errors import ContextPlanError

cdef extern from "Python.h":
    PyObject* PyDict_GetItemWithError(object d, object key) except? NULL
    int PyDict_Next(object d, Py_ssize_t* pos, PyObject** key, PyObject** value)
    void Py_INCREF(PyObject* o)
    void Py_XDECREF(PyObject* o)
    bint PyUnicode_Check_ptr "PyUnicode_Check"(PyObject* o)
    Py_ssize_t PyList_GET_SIZE(object lst)
    PyObject* PyList_GET_ITEM(object lst, Py_ssize_t i)
    Py_ssize_t PyUnicode_GET_LENGTH(object s)
    int PyUnicode_KIND(object s)
    void* PyUnicode_DATA(object s)
    Py_UCS4 PyUnicode_READ(int kind, void* data, Py_ssize_t index)
    int PyUnicode_1BYTE_KIND
    long long PyLong_AsLongLongAndOverflow(object v, int* overflow) except? -1

cdef extern from "utf8.h":
    int64_t cp_utf8_count(const uint8_t *p, int64_t n, int64_t *bad) nogil

__all__ = [
    "GROUP_MESSAGE",
    "dict_lookup_floor",
    "GROUP_USER_TURN",
    "IMPLEMENTATION",
    "group_offsets",
    "measure_messages",
    "message_text_pieces",
    "role_codes_utf8",
    "tool_pairing",
    "trim_cut",
    "trim_cut_many",
    "utf8_lengths",
]

IMPLEMENTATION = "cython"
GROUP_USER_TURN = 0
GROUP_MESSAGE = 1

cdef uint8_t F_OPENS = _FLAG_OPENS_TURN
cdef uint8_t F_RESULT = _FLAG_TOOL_RESULT
cdef uint8_t F_CALLS = _FLAG_TOOL_CALLS
cdef int8_t R_USER = ROLE_CODES["user"]
cdef int8_t R_TOOL = ROLE_CODES["tool"]
cdef int8_t R_FUNCTION = ROLE_CODES["function"]
cdef int8_t R_SYSTEM = ROLE_CODES["system"]
cdef int8_t R_DEVELOPER = ROLE_CODES["developer"]
cdef int8_t R_ASSISTANT = ROLE_CODES["assistant"]

# Part types, by small code.
cdef enum:
    P_OTHER = 0
    P_TEXT = 1
    P_TOOL_RESULT = 2
    P_TOOL_USE = 3

cdef object K_ROLE = "role"
cdef object K_CONTENT = "content"
cdef object K_TOOL_CALLS = "tool_calls"
cdef object K_TYPE = "type"
cdef object K_ID = "id"
cdef object K_TOOL_CALL_ID = "tool_call_id"
cdef object K_TOOL_USE_ID = "tool_use_id"


cdef inline bint _eq1(object s, Py_ssize_t n, const char* lit):
    # s is a str of length n; compare against an ASCII literal without creating objects.
    return PyUnicode_KIND(s) == PyUnicode_1BYTE_KIND and memcmp(PyUnicode_DATA(s), lit, n) == 0


# Dict keys are matched by one pass of PyDict_Next rather than a hash lookup per key: the key
# objects of a transcript are few (json.loads shares them), so a pointer cache answers almost
# every key without touching it. Cached keys are owned (a reference is held), so a cached
# pointer can never be reused by another object.
cdef enum:
    KC_OTHER = 0
    KC_ROLE = 1
    KC_CONTENT = 2
    KC_TOOL_CALLS = 3
    KC_TYPE = 4
    KC_TEXT = 5
    KC_NAME = 6
    KC_INPUT = 7
    KC_FUNCTION = 8
    KC_ARGUMENTS = 9
    KC_COUNT = 10
    KEY_CACHE = 256

cdef PyObject* _cache_key[KEY_CACHE]
cdef int _cache_code[KEY_CACHE]
memset(_cache_key, 0, sizeof(_cache_key))


cdef int _key_code_slow(PyObject* key, size_t slot) noexcept:
    cdef int code = KC_OTHER
    cdef object k = <object>key
    cdef Py_ssize_t n
    if PyUnicode_Check_ptr(key) and PyUnicode_KIND(k) == PyUnicode_1BYTE_KIND:
        n = PyUnicode_GET_LENGTH(k)
        if n == 4:
            if _eq1(k, 4, b"role"):
                code = KC_ROLE
            elif _eq1(k, 4, b"type"):
                code = KC_TYPE
            elif _eq1(k, 4, b"text"):
                code = KC_TEXT
            elif _eq1(k, 4, b"name"):
                code = KC_NAME
        elif n == 7 and _eq1(k, 7, b"content"):
            code = KC_CONTENT
        elif n == 10 and _eq1(k, 10, b"tool_calls"):
            code = KC_TOOL_CALLS
        elif n == 5 and _eq1(k, 5, b"input"):
            code = KC_INPUT
        elif n == 8 and _eq1(k, 8, b"function"):
            code = KC_FUNCTION
        elif n == 9 and _eq1(k, 9, b"arguments"):
            code = KC_ARGUMENTS
    Py_INCREF(key)
    Py_XDECREF(_cache_key[slot])
    _cache_key[slot] = key
    _cache_code[slot] = code
    return code


cdef inline int _key_code(PyObject* key) noexcept:
    cdef size_t slot = (<size_t>key >> 4) & (KEY_CACHE - 1)
    if _cache_key[slot] == key:
        return _cache_code[slot]
    return _key_code_slow(key, slot)


cdef inline void _scan(object d, PyObject** slots) noexcept:
    # slots[code] = borrowed value of the key with that code, or NULL.
    cdef Py_ssize_t pos = 0
    cdef PyObject* k
    cdef PyObject* v
    memset(slots, 0, KC_COUNT * sizeof(PyObject*))
    while PyDict_Next(d, &pos, &k, &v):
        slots[_key_code(k)] = v
cdef object _ENCODER = _kernel_py.COMPACT_JSON


cdef inline int8_t _role_code(object role):
    cdef Py_ssize_t n = PyUnicode_GET_LENGTH(role)
    if n == 4:
        if _eq1(role, 4, b"user"):
            return R_USER
        if _eq1(role, 4, b"tool"):
            return R_TOOL
    elif n == 9:
        if _eq1(role, 9, b"assistant"):
            return R_ASSISTANT
        if _eq1(role, 9, b"developer"):
            return R_DEVELOPER
    elif n == 6:
        if _eq1(role, 6, b"system"):
            return R_SYSTEM
    elif n == 8:
        if _eq1(role, 8, b"function"):
            return R_FUNCTION
    return 0


cdef inline int _part_type(object ptype):
    if ptype is None or not PyUnicode_Check(ptype):
        return P_OTHER
    cdef Py_ssize_t n = PyUnicode_GET_LENGTH(ptype)
    if n == 4 and _eq1(ptype, 4, b"text"):
        return P_TEXT
    if n == 8 and _eq1(ptype, 8, b"tool_use"):
        return P_TOOL_USE
    if n == 10 and (_eq1(ptype, 10, b"input_text")):
        return P_TEXT
    if n == 11:
        if _eq1(ptype, 11, b"tool_result"):
            return P_TOOL_RESULT
        if _eq1(ptype, 11, b"output_text"):
            return P_TEXT
    return P_OTHER


cdef object _invalid(object message, Py_ssize_t index, object fid):
    # The hot path only detects that a message is bad; the twin, which walks the message with
    # full paths, raises the identical ContextPlanError. One source of every error message.
    _kernel_py.message_text_pieces(message, index, fid)
    raise AssertionError(f"message {index} was rejected by the compiled kernel only")


# Compact JSON length, without building the string, for the common exact types.
cdef int _JSON_MAX_DEPTH = 64


cdef inline int64_t _json_str_len(object s) except -1:
    cdef Py_ssize_t i, n = PyUnicode_GET_LENGTH(s)
    cdef int64_t extra = 0
    cdef int kind = PyUnicode_KIND(s)
    cdef void* data = PyUnicode_DATA(s)
    cdef Py_UCS4 ch
    for i in range(n):
        ch = PyUnicode_READ(kind, data, i)
        if ch < 0x20:
            if ch == 8 or ch == 9 or ch == 10 or ch == 12 or ch == 13:
                extra += 1
            else:
                extra += 5
        elif ch == 34 or ch == 92:
            extra += 1
    return 2 + n + extra


cdef inline int64_t _int_len(object value) except -1:
    cdef int overflow = 0
    cdef long long v = PyLong_AsLongLongAndOverflow(value, &overflow)
    cdef unsigned long long u
    cdef int64_t digits = 1
    if overflow:
        return len(int.__repr__(value))
    if v < 0:
        digits += 1
        u = <unsigned long long>(-(v + 1)) + 1
    else:
        u = <unsigned long long>v
    while u >= 10:
        u //= 10
        digits += 1
    return digits


cdef int64_t _json_len(object value, int depth) except -1:
    cdef int64_t total
    cdef Py_ssize_t i, n
    cdef object key
    cdef type t = type(value)
    if depth > _JSON_MAX_DEPTH:
        return len(_ENCODER.encode(value))
    if t is str:
        return _json_str_len(value)
    if value is None:
        return 4
    if value is True:
        return 4
    if value is False:
        return 5
    if t is int:
        return _int_len(value)
    if t is dict:
        n = len(<dict>value)
        total = 2 + (n - 1 if n > 0 else 0)
        for key, item in (<dict>value).items():
            if type(key) is str:
                total += _json_str_len(key)
            else:
                return len(_ENCODER.encode(value))
            total += 1 + _json_len(item, depth + 1)
        return total
    if t is list or t is tuple:
        n = len(value)
        total = 2 + (n - 1 if n > 0 else 0)
        for i in range(n):
            total += _json_len(value[i], depth + 1)
        return total
    return len(_ENCODER.encode(value))


cdef int64_t _compact_json_len(object value) except -1:
    try:
        return _json_len(value, 0)
    except (TypeError, ValueError, RecursionError):
        return -2


@cython.final
cdef class _Acc:
    cdef int64_t chars
    cdef int32_t opaque
    cdef list pieces

    cdef inline void add(self, object text):
        self.chars += PyUnicode_GET_LENGTH(text)
        if self.pieces is not None:
            self.pieces.append(text)


cdef int _add_json(_Acc acc, object value) except -2:
    try:
        acc.add(_ENCODER.encode(value))
    except (TypeError, ValueError, RecursionError):
        return -1
    return 0


cdef uint8_t _parts(object parts, _Acc acc) except? 255:
    # Returns the flags the parts imply, or 255 when a part is invalid.
    cdef Py_ssize_t j, n = PyList_GET_SIZE(parts)
    cdef uint8_t flags = 0
    cdef PyObject* slots[KC_COUNT]
    cdef PyObject* v
    cdef int ptype
    cdef int64_t length
    cdef object part
    for j in range(n):
        part = <object>PyList_GET_ITEM(parts, j)
        if PyUnicode_Check(part):
            acc.add(part)
            continue
        if not PyDict_Check(part):
            return 255
        _scan(part, slots)
        ptype = P_OTHER if slots[KC_TYPE] == NULL else _part_type(<object>slots[KC_TYPE])
        if ptype == P_TEXT:
            v = slots[KC_TEXT]
            if v == NULL or not PyUnicode_Check(<object>v):
                return 255
            acc.add(<object>v)
        elif ptype == P_TOOL_RESULT:
            flags |= F_RESULT
            v = slots[KC_CONTENT]
            if v != NULL and _content(<object>v, acc) < 0:
                return 255
        elif ptype == P_TOOL_USE:
            v = slots[KC_NAME]
            if v != NULL and PyUnicode_Check(<object>v):
                acc.add(<object>v)
            v = slots[KC_INPUT]
            if v != NULL:
                if acc.pieces is not None:
                    if _add_json(acc, <object>v) < 0:
                        return 255
                else:
                    length = _compact_json_len(<object>v)
                    if length < 0:
                        return 255
                    acc.chars += length
            flags |= F_CALLS
        else:
            acc.opaque += 1
    return flags


cdef int _content(object content, _Acc acc) except -2:
    if PyUnicode_Check(content):
        acc.add(content)
    elif PyList_Check(content):
        if _parts(content, acc) == 255:
            return -1
    elif content is not None:
        return -1
    return 0


cdef int _tool_calls(object calls, _Acc acc) except -2:
    cdef Py_ssize_t j, n = PyList_GET_SIZE(calls)
    cdef PyObject* slots[KC_COUNT]
    cdef PyObject* f
    cdef PyObject* v
    cdef int64_t length
    cdef object call, fn, args
    for j in range(n):
        call = <object>PyList_GET_ITEM(calls, j)
        if not PyDict_Check(call):
            return -1
        _scan(call, slots)
        f = slots[KC_FUNCTION]
        if f == NULL or <object>f is None:
            continue
        fn = <object>f
        if not PyDict_Check(fn):
            return -1
        _scan(fn, slots)
        v = slots[KC_NAME]
        if v != NULL and PyUnicode_Check(<object>v):
            acc.add(<object>v)
        v = slots[KC_ARGUMENTS]
        if v != NULL:
            args = <object>v
            if PyUnicode_Check(args):
                acc.add(args)
            elif args is not None:
                if acc.pieces is not None:
                    if _add_json(acc, args) < 0:
                        return -1
                else:
                    length = _compact_json_len(args)
                    if length < 0:
                        return -1
                    acc.chars += length
    return 0


cdef uint8_t _message(object message, _Acc acc, Py_ssize_t index, object fid,
                      int8_t* role_out) except? 255:
    cdef PyObject* slots[KC_COUNT]
    cdef PyObject* r
    cdef PyObject* c
    cdef PyObject* t
    cdef object content, calls
    cdef int8_t code
    cdef uint8_t flags = 0
    if not PyDict_Check(message):
        _invalid(message, index, fid)
    _scan(message, slots)
    r = slots[KC_ROLE]
    if r == NULL or not PyUnicode_Check(<object>r):
        _invalid(message, index, fid)
    code = _role_code(<object>r)
    c = slots[KC_CONTENT]
    if c != NULL:
        content = <object>c
        if PyUnicode_Check(content):
            acc.add(content)
        elif PyList_Check(content):
            flags = _parts(content, acc)
            if flags == 255:
                _invalid(message, index, fid)
        elif content is not None:
            _invalid(message, index, fid)
    # A user message that carries tool_result blocks belongs to the turn that called the tool.
    if code == R_USER and not (flags & F_RESULT):
        flags |= F_OPENS
    if code == R_TOOL or code == R_FUNCTION:
        flags |= F_RESULT
    t = slots[KC_TOOL_CALLS]
    if t != NULL and <object>t is not None:
        calls = <object>t
        if not PyList_Check(calls):
            _invalid(message, index, fid)
        if PyList_GET_SIZE(calls) > 0:
            flags |= F_CALLS
            if _tool_calls(calls, acc) < 0:
                _invalid(message, index, fid)
    role_out[0] = code
    return flags


def measure_messages(messages, fragment_id=None):
    """One pass over ``messages``: (role codes, chars, flags, opaque parts), one entry each."""
    if not PyList_Check(messages):
        raise ContextPlanError(
            f"expected a list of messages, got {type(messages).__name__}",
            path=f"fragments[{fragment_id}].messages" if fragment_id is not None else "messages",
            code="invalid-messages",
        )
    cdef Py_ssize_t i, n = PyList_GET_SIZE(messages)
    roles_a = np.empty(n, dtype=np.int8)
    chars_a = np.empty(n, dtype=np.int64)
    flags_a = np.empty(n, dtype=np.uint8)
    opaque_a = np.empty(n, dtype=np.int32)
    cdef int8_t[::1] roles = roles_a
    cdef int64_t[::1] chars = chars_a
    cdef uint8_t[::1] flags = flags_a
    cdef int32_t[::1] opaque = opaque_a
    cdef _Acc acc = _Acc()
    cdef int8_t code = 0
    for i in range(n):
        acc.chars = 0
        acc.opaque = 0
        flags[i] = _message(<object>PyList_GET_ITEM(messages, i), acc, i, fragment_id, &code)
        roles[i] = code
        chars[i] = acc.chars
        opaque[i] = acc.opaque
    return roles_a, chars_a, flags_a, opaque_a


def dict_lookup_floor(list messages):
    """Calibration only: look up ``role``, ``content`` and ``tool_calls`` in every message and
    do nothing else. What it costs is the floor of any one pass over message dicts."""
    cdef Py_ssize_t i, n = PyList_GET_SIZE(messages)
    cdef Py_ssize_t found = 0
    cdef object m
    for i in range(n):
        m = <object>PyList_GET_ITEM(messages, i)
        if not PyDict_Check(m):
            raise TypeError(f"message {i} is not a dict")
        found += (PyDict_GetItemWithError(m, K_ROLE) != NULL)
        found += (PyDict_GetItemWithError(m, K_CONTENT) != NULL)
        found += (PyDict_GetItemWithError(m, K_TOOL_CALLS) != NULL)
    return found


def message_text_pieces(message, Py_ssize_t index=0, fragment_id=None):
    """The text pieces whose code points :func:`measure_messages` counts, in order."""
    cdef _Acc acc = _Acc()
    cdef int8_t code = 0
    acc.pieces = []
    _message(message, acc, index, fragment_id, &code)
    return acc.pieces


def group_offsets(flags_in, chars_in, int grouping=GROUP_USER_TURN):
    """Group messages; return (offsets, chars per group), ``len(offsets) == groups + 1``."""
    cdef const uint8_t[::1] flags = np.ascontiguousarray(flags_in, dtype=np.uint8)
    cdef const int64_t[::1] chars = np.ascontiguousarray(chars_in, dtype=np.int64)
    cdef Py_ssize_t i, g = 0, n = flags.shape[0], ngroups = 0
    cdef uint8_t mask
    cdef bint invert
    if chars.shape[0] != n:
        raise ValueError(f"flags and chars differ in length ({n} != {chars.shape[0]})")
    if grouping == GROUP_USER_TURN:
        mask, invert = F_OPENS, False
    elif grouping == GROUP_MESSAGE:
        mask, invert = F_RESULT, True
    else:
        raise ValueError(f"unknown grouping code {grouping}")
    for i in range(n):
        if i == 0 or (((flags[i] & mask) != 0) != invert):
            ngroups += 1
    offsets_a = np.empty(ngroups + 1, dtype=np.int64)
    group_chars_a = np.zeros(ngroups, dtype=np.int64)
    cdef int64_t[::1] offsets = offsets_a
    cdef int64_t[::1] group_chars = group_chars_a
    g = -1
    with nogil:
        for i in range(n):
            if i == 0 or (((flags[i] & mask) != 0) != invert):
                g += 1
                offsets[g] = i
            group_chars[g] += chars[i]
        offsets[ngroups] = n
    return offsets_a, group_chars_a


cdef inline Py_ssize_t _cut(const int64_t* group_chars, Py_ssize_t n, int64_t keep_groups,
                            int64_t target_chars) noexcept nogil:
    cdef int64_t total = 0
    cdef Py_ssize_t g, kept = 0
    for g in range(n - 1, -1, -1):
        total += group_chars[g]
        if total > target_chars:
            break
        kept += 1
    if kept < keep_groups:
        kept = keep_groups if keep_groups < n else n
    return n - kept


def trim_cut(group_chars_in, int64_t keep_groups, int64_t target_chars):
    """First group kept by a trim (see the twin)."""
    if keep_groups < 0 or target_chars < 0:
        raise ValueError("keep_groups and target_chars must be >= 0")
    cdef const int64_t[::1] group_chars = np.ascontiguousarray(group_chars_in, dtype=np.int64)
    cdef Py_ssize_t n = group_chars.shape[0]
    if n == 0:
        return 0
    return _cut(&group_chars[0], n, keep_groups, target_chars)


cdef inline object _str_item(object d, object key):
    cdef PyObject* v = PyDict_GetItemWithError(d, key)
    if v == NULL or not PyUnicode_Check(<object>v):
        return None
    return <object>v


cdef inline object _part_of_type(object part, int wanted):
    cdef PyObject* p
    if not PyDict_Check(part):
        return False
    p = PyDict_GetItemWithError(part, K_TYPE)
    return p != NULL and _part_type(<object>p) == wanted


cdef set _called_before(list messages, const uint8_t[::1] flags, Py_ssize_t stop):
    # Every call id made by messages[:stop]; built only once a result misses the pending calls.
    cdef set called = set()
    cdef Py_ssize_t i
    for i in range(stop):
        if flags[i] & F_CALLS:
            _collect_calls(<object>PyList_GET_ITEM(messages, i), i, None, called)
    return called


cdef int _collect_calls(object message, Py_ssize_t i, dict pending, set called) except -1:
    cdef PyObject* v
    cdef Py_ssize_t j
    cdef object cid, content, tool_calls, part
    v = PyDict_GetItemWithError(message, K_TOOL_CALLS)
    if v != NULL and PyList_Check(<object>v):
        tool_calls = <object>v
        for j in range(PyList_GET_SIZE(tool_calls)):
            cid = _str_item(<object>PyList_GET_ITEM(tool_calls, j), K_ID)
            if cid is not None:
                _add_call(cid, i, pending, called)
    v = PyDict_GetItemWithError(message, K_CONTENT)
    if v != NULL and PyList_Check(<object>v):
        content = <object>v
        for j in range(PyList_GET_SIZE(content)):
            part = <object>PyList_GET_ITEM(content, j)
            if _part_of_type(part, P_TOOL_USE):
                cid = _str_item(part, K_ID)
                if cid is not None:
                    _add_call(cid, i, pending, called)
    return 0


cdef inline int _add_call(object cid, Py_ssize_t i, dict pending, set called) except -1:
    if called is not None:
        called.add(cid)
    if pending is not None and cid not in pending:
        pending[cid] = i
    return 0


def tool_pairing(list messages, flags_in):
    """Tool results without an earlier call and calls without a later result (see the twin)."""
    cdef const uint8_t[::1] flags = np.ascontiguousarray(flags_in, dtype=np.uint8)
    cdef Py_ssize_t i, j, n = flags.shape[0]
    cdef uint8_t f
    cdef dict pending = {}
    cdef set called = None
    cdef list found = []
    cdef PyObject* v
    cdef object message, content, part, cid
    if n > len(messages):
        raise ValueError(f"flags and messages differ in length ({n} != {len(messages)})")
    for i in range(n):
        f = flags[i]
        if not (f & (F_CALLS | F_RESULT)):
            continue
        message = <object>PyList_GET_ITEM(messages, i)
        if not PyDict_Check(message):
            raise TypeError(f"message {i} is not a dict: flags do not belong to these messages")
        if f & F_RESULT:
            v = PyDict_GetItemWithError(message, K_ROLE)
            if _role_code(<object>v) == R_TOOL:
                cid = _str_item(message, K_TOOL_CALL_ID)
                if cid is not None and cid in pending:
                    del pending[cid]
                else:
                    if called is None and cid is not None:
                        called = _called_before(messages, flags, i)
                    if cid is None or cid not in called:
                        found.append((i, "orphan-tool-result", cid))
            v = PyDict_GetItemWithError(message, K_CONTENT)
            if v != NULL and PyList_Check(<object>v):
                content = <object>v
                for j in range(PyList_GET_SIZE(content)):
                    part = <object>PyList_GET_ITEM(content, j)
                    if _part_of_type(part, P_TOOL_RESULT):
                        cid = _str_item(part, K_TOOL_USE_ID)
                        if cid is not None and cid in pending:
                            del pending[cid]
                        else:
                            if called is None and cid is not None:
                                called = _called_before(messages, flags, i)
                            if cid is None or cid not in called:
                                found.append((i, "orphan-tool-result", cid))
        if f & F_CALLS:
            _collect_calls(message, i, pending, called)
    for cid, i in pending.items():
        found.append((i, "unanswered-tool-call", cid))
    found.sort(key=_first)
    return found


def _first(item):
    return item[0]


# ---------------------------------------------------------------------------------------------
# Columnar path (Arrow layout)


cdef object _as_offsets(object offsets, Py_ssize_t limit, str what):
    offsets = np.asarray(offsets)
    if offsets.ndim != 1 or len(offsets) == 0:
        raise ValueError(f"{what}: expected a 1-d offsets array with at least one entry")
    if offsets.dtype != np.int32 and offsets.dtype != np.int64:
        raise TypeError(f"{what}: expected int32 or int64 offsets, got {offsets.dtype}")
    offsets = np.ascontiguousarray(offsets, dtype=np.int64)
    cdef const int64_t[::1] o = offsets
    cdef Py_ssize_t i, n = o.shape[0]
    cdef bint ok = o[0] >= 0 and o[n - 1] <= limit
    for i in range(1, n):
        if o[i] < o[i - 1]:
            ok = False
            break
    if not ok:
        raise ValueError(f"{what}: offsets must be non-decreasing and within 0..{limit}")
    return offsets


def utf8_lengths(data, offsets):
    """Code points of each string of an Arrow string array (UTF-8 ``data`` + ``offsets``)."""
    cdef const uint8_t[::1] buf = np.frombuffer(data, dtype=np.uint8)
    off_a = _as_offsets(offsets, buf.shape[0], "utf8_lengths")
    cdef const int64_t[::1] off = off_a
    cdef Py_ssize_t r, n = off.shape[0] - 1
    out_a = np.empty(n, dtype=np.int64)
    cdef int64_t[::1] out = out_a
    cdef int64_t bad = 0, count
    cdef Py_ssize_t bad_row = -1
    cdef const uint8_t* base = &buf[0] if buf.shape[0] > 0 else NULL
    with nogil:
        for r in range(n):
            if off[r + 1] == off[r]:
                out[r] = 0
                continue
            count = cp_utf8_count(base + off[r], off[r + 1] - off[r], &bad)
            if count < 0:
                bad_row = r
                break
            out[r] = count
    if bad_row >= 0:
        raise ValueError(f"invalid UTF-8 in string {bad_row} at byte {off[bad_row] + bad}")
    return out_a


def role_codes_utf8(data, offsets):
    """Role code of each string of an Arrow string array, without creating Python strings."""
    cdef const uint8_t[::1] buf = np.frombuffer(data, dtype=np.uint8)
    off_a = _as_offsets(offsets, buf.shape[0], "role_codes_utf8")
    cdef const int64_t[::1] off = off_a
    cdef Py_ssize_t r, n = off.shape[0] - 1
    cdef int64_t length
    cdef const char* s
    out_a = np.zeros(n, dtype=np.int8)
    cdef int8_t[::1] out = out_a
    if buf.shape[0] == 0:
        return out_a
    with nogil:
        for r in range(n):
            length = off[r + 1] - off[r]
            s = <const char*>&buf[0] + off[r]
            if length == 4:
                if memcmp(s, b"user", 4) == 0:
                    out[r] = R_USER
                elif memcmp(s, b"tool", 4) == 0:
                    out[r] = R_TOOL
            elif length == 6 and memcmp(s, b"system", 6) == 0:
                out[r] = R_SYSTEM
            elif length == 8 and memcmp(s, b"function", 8) == 0:
                out[r] = R_FUNCTION
            elif length == 9:
                if memcmp(s, b"assistant", 9) == 0:
                    out[r] = R_ASSISTANT
                elif memcmp(s, b"developer", 9) == 0:
                    out[r] = R_DEVELOPER
    return out_a


cdef inline int64_t _count_starts(const uint8_t* flags, Py_ssize_t lo, Py_ssize_t hi,
                                  uint8_t mask, bint invert) noexcept nogil:
    # Group starts in flags[lo:hi]; two plain loops the compiler vectorises.
    cdef int64_t count = 0
    cdef Py_ssize_t j
    if invert:
        for j in range(lo, hi):
            count += (flags[j] & mask) == 0
    else:
        for j in range(lo, hi):
            count += (flags[j] & mask) != 0
    return count


def trim_cut_many(list_offsets, flags_in, chars_in, int64_t keep_groups, int64_t target_chars,
                  int grouping=GROUP_USER_TURN):
    """Group and cut many conversations at once (see the twin)."""
    cdef const uint8_t[::1] flags = np.ascontiguousarray(flags_in, dtype=np.uint8)
    cdef const int64_t[::1] chars = np.ascontiguousarray(chars_in, dtype=np.int64)
    off_a = _as_offsets(list_offsets, flags.shape[0], "trim_cut_many")
    cdef const int64_t[::1] off = off_a
    if chars.shape[0] != flags.shape[0]:
        raise ValueError(f"flags and chars differ in length ({flags.shape[0]} != {chars.shape[0]})")
    if keep_groups < 0 or target_chars < 0:
        raise ValueError("keep_groups and target_chars must be >= 0")
    cdef uint8_t mask
    cdef bint invert
    if grouping == GROUP_USER_TURN:
        mask, invert = F_OPENS, False
    elif grouping == GROUP_MESSAGE:
        mask, invert = F_RESULT, True
    else:
        raise ValueError(f"unknown grouping code {grouping}")
    cdef Py_ssize_t r, i, a, b, n = off.shape[0] - 1
    first_a = np.empty(n, dtype=np.int64)
    before_a = np.empty(n, dtype=np.int64)
    after_a = np.empty(n, dtype=np.int64)
    kept_a = np.empty(n, dtype=np.int64)
    cdef int64_t[::1] first = first_a
    cdef int64_t[::1] before = before_a
    cdef int64_t[::1] after = after_a
    cdef int64_t[::1] kept_chars = kept_a
    cdef int64_t cur, total, ngroups, fit, fit_start, fit_chars, floor_start, floor_chars
    cdef Py_ssize_t stop
    cdef bint fitting
    with nogil:
        for r in range(n):
            a = off[r]
            b = off[r + 1]
            cur = 0
            total = 0
            ngroups = 0
            fit = 0
            fit_start = b
            fit_chars = 0
            floor_start = b
            floor_chars = 0
            fitting = True
            stop = a
            # Walk backwards only as far as the answer needs: a group is complete when its
            # opening message is reached; stop once the suffix no longer fits and the floor is
            # met. The groups of the untouched prefix are only counted.
            for i in range(b - 1, a - 1, -1):
                cur += chars[i]
                if i == a or (((flags[i] & mask) != 0) != invert):
                    ngroups += 1
                    total += cur
                    cur = 0
                    if fitting and total <= target_chars:
                        fit += 1
                        fit_start = i
                        fit_chars = total
                    else:
                        fitting = False
                    if ngroups <= keep_groups:
                        floor_start = i
                        floor_chars = total
                    if not fitting and ngroups >= keep_groups:
                        stop = i
                        break
            if stop > a:
                ngroups += 1 + _count_starts(&flags[0], a + 1, stop, mask, invert)
            before[r] = ngroups
            if fit >= keep_groups or fit >= ngroups:
                first[r] = fit_start
                after[r] = fit
                kept_chars[r] = fit_chars
            else:
                first[r] = floor_start
                after[r] = keep_groups if keep_groups < ngroups else ngroups
                kept_chars[r] = floor_chars
    return first_a, before_a, after_a, kept_a
