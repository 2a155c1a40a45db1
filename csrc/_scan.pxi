# JSONL lines read as bytes: the scanner of ``contextpolicy reduce`` (see the twin's
# reduce_lines for the rules of which lines take this path). Included by _kernel_c.pyx.
#
# A line is read once, left to right: every value is validated as JSON (UTF-8, escapes,
# surrogate pairs, numbers, nesting), and the values a trim needs are measured on the way
# (each message's byte range, role, chars with escapes decoded, flags, opaque parts and the
# byte ranges of its tool call ids). Anything outside the rules returns 1 ("the object path")
# from the function that meets it; nothing is ever written before a line is known to be good.

from libc.math cimport isinf

from libc.string cimport memchr, strlen

cdef extern from "scan.h":
    int64_t cp_plain_end(const uint8_t* p, int64_t i, int64_t n, int* ascii) nogil

cdef extern from "Python.h":
    # overflow_exception NULL: a value beyond range is +-inf (HUGE_VAL), never an exception
    double PyOS_string_to_double(const char* s, char** endptr, PyObject* overflow_exception) except? -1.0
    object PyBytes_FromStringAndSize(const char* v, Py_ssize_t n)
    object PyUnicode_DecodeUTF8(const char* s, Py_ssize_t size, const char* errors)
    object PyByteArray_FromStringAndSize(const char* v, Py_ssize_t n)
    char* PyByteArray_AS_STRING(object b)
    int PyByteArray_Resize(object b, Py_ssize_t n) except -1

import orjson as _orjson

cdef object _loads = _orjson.loads

SCAN_DEPTH = _kernel_py.SCAN_DEPTH
SCAN_NUMBER = _kernel_py.SCAN_NUMBER
SCAN_FIGURES = _kernel_py.SCAN_FIGURES
# _reduce_core's row: ..., reduced (11), one flag per missed reason, the unknown-role warnings
cdef Py_ssize_t _ROW_UNKNOWN = 12 + CP_MISSED_COUNT  # the unknown-role warnings' slot
assert SCAN_FIGURES == 13 + CP_MISSED_COUNT
assert _kernel_py.SCAN_UNKNOWN_ROLES == _ROW_UNKNOWN
cdef int _SCAN_DEPTH = _kernel_py.SCAN_DEPTH
cdef int _SCAN_NUMBER = _kernel_py.SCAN_NUMBER

cdef enum:
    _FALLBACK = 1
    _SCAN_KEYS = 64  # keys of a line's object, at most (each compared with the others)

SCAN_KEYS = _kernel_py.SCAN_KEYS
assert SCAN_KEYS == _SCAN_KEYS


cdef void* _regrow(void* p, size_t size) except NULL nogil:
    cdef void* q = realloc(p, size)
    if q == NULL:
        with gil:
            raise MemoryError()
    return q

cdef inline int _hex4(const uint8_t* p, Py_ssize_t i, Py_ssize_t end) noexcept nogil:
    cdef int v = 0, k, c
    if i + 4 > end:
        return -1
    for k in range(4):
        c = p[i + k]
        if 48 <= c <= 57:
            v = v * 16 + c - 48
        elif 97 <= c <= 102:
            v = v * 16 + c - 87
        elif 65 <= c <= 70:
            v = v * 16 + c - 55
        else:
            return -1
    return v


cdef struct _Sc:
    const uint8_t* p
    Py_ssize_t end
    Py_ssize_t i
    # the string just scanned: its code points and whether it holds an escape
    int64_t chars
    bint escaped
    # the key just read
    Py_ssize_t key_at
    Py_ssize_t key_len


cdef inline void _ws(_Sc* s) noexcept nogil:
    while s.i < s.end and CP_JSON_WHITESPACE(s.p[s.i]):
        s.i += 1


cdef int _str(_Sc* s) noexcept nogil:
    # The string at s.i (a quote): s.i moves past it, s.chars and s.escaped describe it. Runs of
    # plain bytes are found and counted (with their UTF-8 validated) a word or a vector at a
    # time; an escape is decoded in the count.
    cdef const uint8_t* p = s.p
    cdef Py_ssize_t i = s.i + 1, end = s.end, j
    cdef int64_t n = 0, count, bad = 0
    cdef int cp, low, ascii = 0
    cdef uint8_t c
    s.escaped = False
    while True:
        j = cp_plain_end(p, i, end, &ascii)
        if ascii:
            n += j - i
        elif j > i:
            count = cp_utf8_count(p + i, j - i, &bad)
            if count < 0:
                return _FALLBACK
            n += count
        if j >= end:
            return _FALLBACK
        c = p[j]
        if c == 34:
            break
        if c != 92:  # a control byte
            return _FALLBACK
        s.escaped = True
        i = j
        if i + 1 >= end:
            return _FALLBACK
        c = p[i + 1]
        if c == 117:  # \uXXXX, a surrogate pair as one code point
            cp = _hex4(p, i + 2, end)
            if cp < 0:
                return _FALLBACK
            i += 6
            if 0xD800 <= cp <= 0xDBFF:
                if i + 1 >= end or p[i] != 92 or p[i + 1] != 117:
                    return _FALLBACK
                low = _hex4(p, i + 2, end)
                if low < 0xDC00 or low > 0xDFFF:
                    return _FALLBACK
                i += 6
            elif 0xDC00 <= cp <= 0xDFFF:
                return _FALLBACK
        elif c == 34 or c == 92 or c == 47 or c == 98 or c == 102 or c == 110 or c == 114 \
                or c == 116:
            i += 2
        else:
            return _FALLBACK
        n += 1
    s.i = j + 1
    s.chars = n
    return 0


cdef int _number(_Sc* s) except -1 nogil:
    # A number as RFC 8259 writes it, at most _SCAN_NUMBER bytes, finite as a double.
    cdef const uint8_t* p = s.p
    cdef Py_ssize_t i = s.i, start = s.i, end = s.end
    cdef bint exponent = False
    cdef char text[80]
    cdef double value
    if i < end and p[i] == 45:
        i += 1
    if i >= end:
        return _FALLBACK
    if p[i] == 48:
        i += 1
    elif 49 <= p[i] <= 57:
        while i < end and 48 <= p[i] <= 57:
            i += 1
    else:
        return _FALLBACK
    if i < end and p[i] == 46:
        i += 1
        if i >= end or not (48 <= p[i] <= 57):
            return _FALLBACK
        while i < end and 48 <= p[i] <= 57:
            i += 1
    if i < end and (p[i] == 101 or p[i] == 69):
        exponent = True
        i += 1
        if i < end and (p[i] == 43 or p[i] == 45):
            i += 1
        if i >= end or not (48 <= p[i] <= 57):
            return _FALLBACK
        while i < end and 48 <= p[i] <= 57:
            i += 1
    if i - start > _SCAN_NUMBER:
        return _FALLBACK
    if exponent:  # a double beyond range is an error of orjson's
        memcpy(text, p + start, i - start)
        text[i - start] = 0
        with gil:
            value = PyOS_string_to_double(text, NULL, NULL)
        if isinf(value):
            return _FALLBACK
    s.i = i
    return 0


cdef int _literal(_Sc* s) noexcept nogil:
    cdef const uint8_t* p = s.p + s.i
    cdef Py_ssize_t left = s.end - s.i
    if left >= 4 and memcmp(p, b"true", 4) == 0:
        s.i += 4
    elif left >= 4 and memcmp(p, b"null", 4) == 0:
        s.i += 4
    elif left >= 5 and memcmp(p, b"false", 5) == 0:
        s.i += 5
    else:
        return _FALLBACK
    return 0


cdef int _value(_Sc* s, int level) except -1 nogil:
    # Any JSON value at s.i, validated; level: how deep a container here would nest.
    cdef uint8_t c
    if s.i >= s.end:
        return _FALLBACK
    c = s.p[s.i]
    if c == 34:
        return _str(s)
    if c == 123 or c == 91:
        if level >= _SCAN_DEPTH:
            return _FALLBACK
        s.i += 1
        _ws(s)
        if s.i < s.end and s.p[s.i] == (125 if c == 123 else 93):
            s.i += 1
            return 0
        while True:
            if c == 123:
                if s.i >= s.end or s.p[s.i] != 34 or _str(s):
                    return _FALLBACK
                _ws(s)
                if s.i >= s.end or s.p[s.i] != 58:
                    return _FALLBACK
                s.i += 1
                _ws(s)
            if _value(s, level + 1):
                return _FALLBACK
            _ws(s)
            if s.i >= s.end:
                return _FALLBACK
            if s.p[s.i] == 44:
                s.i += 1
                _ws(s)
                continue
            if s.p[s.i] == (125 if c == 123 else 93):
                s.i += 1
                return 0
            return _FALLBACK
    if c == 116 or c == 102 or c == 110:
        return _literal(s)
    return _number(s)


# One object's keys, one at a time: _key reads the key and the colon after it, leaving s.i at
# the value; _next reads the comma or the closing brace after a value.
cdef int _open(_Sc* s, uint8_t bracket, int level) noexcept nogil:
    # 0: the container is open and s.i at its first entry; 2: it was empty; 1: not one.
    if s.i >= s.end or s.p[s.i] != bracket or level >= _SCAN_DEPTH:
        return _FALLBACK
    s.i += 1
    _ws(s)
    if s.i < s.end and s.p[s.i] == bracket + 2:  # } or ]
        s.i += 1
        return 2
    return 0


cdef int _key(_Sc* s, int* code) noexcept nogil:
    # The key at s.i and its colon; code: its CP_KEY code; a key with an escape: the object
    # path (the keys the kernels recognise are matched by their text). s.key_at and
    # s.key_len: where its text lies.
    cdef Py_ssize_t start = s.i + 1
    if s.i >= s.end or s.p[s.i] != 34 or _str(s) or s.escaped:
        return _FALLBACK
    s.key_at = start
    s.key_len = s.i - 1 - start
    code[0] = cp_key_code(<const char*>(s.p + start), s.key_len)
    _ws(s)
    if s.i >= s.end or s.p[s.i] != 58:
        return _FALLBACK
    s.i += 1
    _ws(s)
    return 0


cdef int _next(_Sc* s, uint8_t close, bint* more) noexcept nogil:
    _ws(s)
    if s.i >= s.end:
        return _FALLBACK
    if s.p[s.i] == 44:
        s.i += 1
        _ws(s)
        more[0] = True
        return 0
    if s.p[s.i] == close:
        s.i += 1
        more[0] = False
        return 0
    return _FALLBACK


cdef inline int _seen(uint32_t* seen, int code) noexcept nogil:
    # A known key met a second time: the object path (orjson keeps the last one).
    cdef uint32_t bit = (<uint32_t>1) << code
    if seen[0] & bit:
        return _FALLBACK
    seen[0] |= bit
    return 0


cdef struct _Val:
    # A value's kind (its first byte), where it lies, and for a string its chars and escapes.
    uint8_t kind
    Py_ssize_t start
    Py_ssize_t end
    int64_t chars
    bint escaped


cdef inline int _take(_Sc* s, _Val* v, int level) except -1 nogil:
    v.kind = s.p[s.i] if s.i < s.end else 0
    v.start = s.i
    if _value(s, level):
        return _FALLBACK
    v.end = s.i
    v.chars = s.chars if v.kind == 34 else 0
    v.escaped = s.escaped if v.kind == 34 else False
    return 0


cdef int64_t _json_chars(const uint8_t* p, _Val* v) except -2 nogil:
    # The compact JSON length of a value (a tool input, non-string arguments), or -1: the
    # object path, for a value holding a run of 19 digits (an integer orjson may read inexactly).
    cdef Py_ssize_t i, run = 0
    if v.kind == 110 or v.kind == 116:
        return 4
    if v.kind == 102:
        return 5
    for i in range(v.start, v.end):
        if 48 <= p[i] <= 57:
            run += 1
            if run >= 19:
                return -1
        else:
            run = 0
    cdef int64_t length
    with gil:
        value = _loads(PyBytes_FromStringAndSize(<const char*>(p + v.start), v.end - v.start))
        length = _compact_json_len(value)
    return -1 if length < 0 else length


@cython.final
cdef class _LineScan:
    """What the scan of one line found, in arrays that grow as lines need and are reused."""

    cdef Py_ssize_t m, cap
    cdef int64_t* m_start
    cdef int64_t* m_end
    cdef int64_t* chars
    cdef int64_t* opaque
    cdef int8_t* roles
    cdef uint8_t* flags
    # each role's string: where its text starts in the line, and its length in bytes
    cdef int64_t* role_at
    cdef int64_t* role_len
    cdef int64_t* call_off
    cdef int64_t* res_off
    # tool call ids and the ids results answer: (start, length) in the line, start -1: none
    cdef Py_ssize_t ncalls, nres, ids_cap
    cdef int64_t* call_at
    cdef int64_t* call_len
    cdef int64_t* res_at
    cdef int64_t* res_len
    # ids of the message being read, kept apart to be put in the object path's order
    cdef Py_ssize_t npc, npr, tmp_cap
    cdef int64_t* pc_at
    cdef int64_t* pc_len
    cdef int64_t* pr_at
    cdef int64_t* pr_len
    cdef Py_ssize_t array_start, array_end
    cdef Py_ssize_t id_start, id_end

    def __cinit__(self):
        self.cap = self.ids_cap = self.tmp_cap = 0
        self.m_start = self.m_end = self.chars = self.opaque = NULL
        self.call_off = self.res_off = self.call_at = self.call_len = NULL
        self.res_at = self.res_len = self.pc_at = self.pc_len = self.pr_at = self.pr_len = NULL
        self.roles = NULL
        self.flags = NULL
        self.role_at = self.role_len = NULL
        self._grow_messages()

    def __dealloc__(self):
        free(self.m_start)
        free(self.m_end)
        free(self.chars)
        free(self.opaque)
        free(self.roles)
        free(self.flags)
        free(self.role_at)
        free(self.role_len)
        free(self.call_off)
        free(self.res_off)
        free(self.call_at)
        free(self.call_len)
        free(self.res_at)
        free(self.res_len)
        free(self.pc_at)
        free(self.pc_len)
        free(self.pr_at)
        free(self.pr_len)

    cdef int _grow_messages(self) except -1 nogil:
        cdef Py_ssize_t cap = 64 if self.cap == 0 else 2 * self.cap
        self.m_start = <int64_t*>_regrow(self.m_start, cap * 8)
        self.m_end = <int64_t*>_regrow(self.m_end, cap * 8)
        self.chars = <int64_t*>_regrow(self.chars, cap * 8)
        self.opaque = <int64_t*>_regrow(self.opaque, cap * 8)
        self.roles = <int8_t*>_regrow(self.roles, cap)
        self.flags = <uint8_t*>_regrow(self.flags, cap)
        self.role_at = <int64_t*>_regrow(self.role_at, cap * 8)
        self.role_len = <int64_t*>_regrow(self.role_len, cap * 8)
        self.call_off = <int64_t*>_regrow(self.call_off, (cap + 1) * 8)
        self.res_off = <int64_t*>_regrow(self.res_off, (cap + 1) * 8)
        self.cap = cap
        return 0

    cdef int _grow_ids(self, Py_ssize_t need) except -1 nogil:
        cdef Py_ssize_t cap = self.ids_cap if self.ids_cap else 64
        while cap < need:
            cap *= 2
        self.call_at = <int64_t*>_regrow(self.call_at, cap * 8)
        self.call_len = <int64_t*>_regrow(self.call_len, cap * 8)
        self.res_at = <int64_t*>_regrow(self.res_at, cap * 8)
        self.res_len = <int64_t*>_regrow(self.res_len, cap * 8)
        self.ids_cap = cap
        return 0

    cdef int _grow_tmp(self) except -1 nogil:
        cdef Py_ssize_t cap = 16 if self.tmp_cap == 0 else 2 * self.tmp_cap
        self.pc_at = <int64_t*>_regrow(self.pc_at, cap * 8)
        self.pc_len = <int64_t*>_regrow(self.pc_len, cap * 8)
        self.pr_at = <int64_t*>_regrow(self.pr_at, cap * 8)
        self.pr_len = <int64_t*>_regrow(self.pr_len, cap * 8)
        self.tmp_cap = cap
        return 0

    cdef int _part_id(self, bint call, _Val* v) except -1 nogil:
        # A tool_use block's id or a tool_result block's tool_use_id (-1: none).
        if (self.npc if call else self.npr) >= self.tmp_cap:
            self._grow_tmp()
        if call:
            if v == NULL or v.kind != 34:
                return 0  # a call without a string id is no call id at all
            self.pc_at[self.npc] = v.start + 1
            self.pc_len[self.npc] = v.end - v.start - 2
            self.npc += 1
        else:
            if v != NULL and v.kind == 34:
                self.pr_at[self.npr] = v.start + 1
                self.pr_len[self.npr] = v.end - v.start - 2
            else:
                self.pr_at[self.npr] = -1
                self.pr_len[self.npr] = 0
            self.npr += 1
        return 0

    cdef int _parts(self, _Sc* s, int level, int nesting, bint top, int64_t* chars,
                    int64_t* opaque, uint8_t* flags) except -1 nogil:
        # A list of content parts at s.i (a bracket); top: the message's own content, whose
        # blocks carry its flags and ids.
        cdef int opened = _open(s, 91, level)
        cdef bint more = True
        if opened == 2:
            return 0
        if opened:
            return _FALLBACK
        while more:
            if s.i < s.end and s.p[s.i] == 34:
                if _str(s):
                    return _FALLBACK
                chars[0] += s.chars
            elif s.i < s.end and s.p[s.i] == 123:
                if self._part(s, level + 1, nesting, top, chars, opaque, flags):
                    return _FALLBACK
            else:
                return _FALLBACK
            if _next(s, 93, &more):
                return _FALLBACK
        return 0

    cdef int _part(self, _Sc* s, int level, int nesting, bint top, int64_t* chars,
                   int64_t* opaque, uint8_t* flags) except -1 nogil:
        cdef _Val vals[CP_KEY_COUNT]
        cdef uint32_t seen = 0
        cdef int code, ptype, opened = _open(s, 123, level)
        cdef bint more = True
        cdef _Sc inner
        cdef int64_t length
        if opened == 1:
            return _FALLBACK
        more = opened == 0
        while more:
            if _key(s, &code):
                return _FALLBACK
            if code == CP_KEY_TYPE or code == CP_KEY_TEXT or code == CP_KEY_CONTENT \
                    or code == CP_KEY_NAME or code == CP_KEY_INPUT or code == CP_KEY_THINKING \
                    or code == CP_KEY_ID or code == CP_KEY_TOOL_USE_ID:
                if _seen(&seen, code) or _take(s, &vals[code], level + 1):
                    return _FALLBACK
            elif _value(s, level + 1):
                return _FALLBACK
            if _next(s, 125, &more):
                return _FALLBACK
        cdef int checked[3]
        checked[0], checked[1], checked[2] = CP_KEY_TYPE, CP_KEY_ID, CP_KEY_TOOL_USE_ID
        for k in range(3):
            code = checked[k]
            if seen & ((<uint32_t>1) << code) and vals[code].kind == 34 and vals[code].escaped:
                return _FALLBACK
        ptype = CP_PART_OTHER
        if seen & ((<uint32_t>1) << CP_KEY_TYPE) and vals[CP_KEY_TYPE].kind == 34:
            ptype = cp_part_code(<const char*>(s.p + vals[CP_KEY_TYPE].start + 1),
                                 vals[CP_KEY_TYPE].end - vals[CP_KEY_TYPE].start - 2)
        if ptype == CP_PART_TEXT or ptype == CP_PART_THINKING:
            code = CP_KEY_TEXT if ptype == CP_PART_TEXT else CP_KEY_THINKING
            if not (seen & ((<uint32_t>1) << code)) or vals[code].kind != 34:
                return _FALLBACK
            chars[0] += vals[code].chars
        elif ptype == CP_PART_TOOL_RESULT:
            if nesting >= CP_MAX_NESTING:
                return _FALLBACK
            if seen & ((<uint32_t>1) << CP_KEY_CONTENT):
                code = vals[CP_KEY_CONTENT].kind
                if code == 34:
                    chars[0] += vals[CP_KEY_CONTENT].chars
                elif code == 91:
                    inner = s[0]
                    inner.i = vals[CP_KEY_CONTENT].start
                    if self._parts(&inner, level + 1, nesting + 1, False, chars, opaque, flags):
                        return _FALLBACK
                elif code != 110:
                    return _FALLBACK
            if top:
                flags[0] |= F_RESULT
                self._part_id(False, &vals[CP_KEY_TOOL_USE_ID] if seen & (
                    (<uint32_t>1) << CP_KEY_TOOL_USE_ID) else NULL)
        elif ptype == CP_PART_TOOL_USE:
            if seen & ((<uint32_t>1) << CP_KEY_NAME) and vals[CP_KEY_NAME].kind == 34:
                chars[0] += vals[CP_KEY_NAME].chars
            if seen & ((<uint32_t>1) << CP_KEY_INPUT):
                length = _json_chars(s.p, &vals[CP_KEY_INPUT])
                if length < 0:
                    return _FALLBACK
                chars[0] += length
            if top:
                flags[0] |= F_CALLS
                if seen & ((<uint32_t>1) << CP_KEY_ID):
                    self._part_id(True, &vals[CP_KEY_ID])
        else:
            opaque[0] += 1
        return 0

    cdef int _function(self, _Sc* s, int level, int64_t* chars) except -1 nogil:
        cdef _Val vals[CP_KEY_COUNT]
        cdef uint32_t seen = 0
        cdef int code, opened = _open(s, 123, level)
        cdef bint more
        cdef int64_t length
        if opened == 1:
            return _FALLBACK
        more = opened == 0
        while more:
            if _key(s, &code):
                return _FALLBACK
            if code == CP_KEY_NAME or code == CP_KEY_ARGUMENTS:
                if _seen(&seen, code) or _take(s, &vals[code], level + 1):
                    return _FALLBACK
            elif _value(s, level + 1):
                return _FALLBACK
            if _next(s, 125, &more):
                return _FALLBACK
        if seen & ((<uint32_t>1) << CP_KEY_NAME) and vals[CP_KEY_NAME].kind == 34:
            chars[0] += vals[CP_KEY_NAME].chars
        if seen & ((<uint32_t>1) << CP_KEY_ARGUMENTS):
            if vals[CP_KEY_ARGUMENTS].kind == 34:
                chars[0] += vals[CP_KEY_ARGUMENTS].chars
            elif vals[CP_KEY_ARGUMENTS].kind != 110:
                length = _json_chars(s.p, &vals[CP_KEY_ARGUMENTS])
                if length < 0:
                    return _FALLBACK
                chars[0] += length
        return 0

    cdef int _calls(self, _Sc* s, int level, int64_t* chars, bint* any_call) except -1 nogil:
        # tool_calls at s.i (a bracket): their ids go straight into the line's call ids.
        cdef int opened = _open(s, 91, level), code, sub
        cdef bint more, call_more
        cdef uint32_t seen
        cdef _Val cid
        if opened == 1:
            return _FALLBACK
        more = opened == 0
        any_call[0] = more
        while more:
            seen = 0
            cid.kind = 0
            sub = _open(s, 123, level + 1)
            if sub == 1:
                return _FALLBACK
            call_more = sub == 0
            while call_more:
                if _key(s, &code):
                    return _FALLBACK
                if code == CP_KEY_ID:
                    if _seen(&seen, code) or _take(s, &cid, level + 2):
                        return _FALLBACK
                    if cid.kind == 34 and cid.escaped:
                        return _FALLBACK
                elif code == CP_KEY_FUNCTION:
                    if _seen(&seen, code):
                        return _FALLBACK
                    if s.i < s.end and s.p[s.i] == 110:
                        if _literal(s):
                            return _FALLBACK
                    elif self._function(s, level + 2, chars):
                        return _FALLBACK
                elif _value(s, level + 2):
                    return _FALLBACK
                if _next(s, 125, &call_more):
                    return _FALLBACK
            if cid.kind == 34:
                if self.ncalls >= self.ids_cap:
                    self._grow_ids(self.ncalls + 1)
                self.call_at[self.ncalls] = cid.start + 1
                self.call_len[self.ncalls] = cid.end - cid.start - 2
                self.ncalls += 1
            if _next(s, 93, &more):
                return _FALLBACK
        return 0

    cdef int _message(self, _Sc* s, int level) except -1 nogil:
        cdef _Val role, result_id
        cdef uint32_t seen = 0
        cdef int code, opened, k
        cdef bint more, any_call = False
        cdef int64_t chars = 0, opaque = 0
        cdef uint8_t flags = 0
        cdef int8_t rcode
        cdef Py_ssize_t i = self.m, calls_at = self.ncalls, j
        if i >= self.cap:
            self._grow_messages()
        self.m_start[i] = s.i
        self.npc = self.npr = 0
        result_id.kind = 0
        role.kind = 0
        opened = _open(s, 123, level)
        if opened == 1:
            return _FALLBACK
        more = opened == 0
        while more:
            if _key(s, &code):
                return _FALLBACK
            if code == CP_KEY_TYPE:
                return _FALLBACK  # a Responses item, or a typed message
            if code == CP_KEY_ROLE:
                if _seen(&seen, code) or _take(s, &role, level + 1):
                    return _FALLBACK
            elif code == CP_KEY_CONTENT:
                if _seen(&seen, code) or s.i >= s.end:
                    return _FALLBACK
                k = s.p[s.i]
                if k == 34:
                    if _str(s):
                        return _FALLBACK
                    chars += s.chars
                elif k == 91:
                    if self._parts(s, level + 1, 0, True, &chars, &opaque, &flags):
                        return _FALLBACK
                elif k == 110:
                    if _literal(s):
                        return _FALLBACK
                else:
                    return _FALLBACK
            elif code == CP_KEY_TOOL_CALLS:
                if _seen(&seen, code) or s.i >= s.end:
                    return _FALLBACK
                if s.p[s.i] == 110:
                    if _literal(s):
                        return _FALLBACK
                elif self._calls(s, level + 1, &chars, &any_call):
                    return _FALLBACK
            elif code == CP_KEY_TOOL_CALL_ID:
                if _seen(&seen, code) or _take(s, &result_id, level + 1):
                    return _FALLBACK
                if result_id.kind == 34 and result_id.escaped:
                    return _FALLBACK
            elif _value(s, level + 1):
                return _FALLBACK
            if _next(s, 125, &more):
                return _FALLBACK
        if role.kind != 34 or role.escaped:
            return _FALLBACK
        rcode = <int8_t>cp_role_code(<const char*>(s.p + role.start + 1), role.end - role.start - 2)
        if rcode == R_USER and not (flags & F_RESULT):
            flags |= F_OPENS
        if rcode == R_TOOL or rcode == R_FUNCTION:
            flags |= F_RESULT
        if rcode == 0:
            flags |= F_UNKNOWN
        if any_call:
            flags |= F_CALLS
        # Ids in the object path's order: tool_calls, then tool_use blocks; a tool message's
        # tool_call_id, then tool_result blocks.
        if self.ncalls + self.npc + 1 + self.nres + self.npr + 1 > self.ids_cap:
            self._grow_ids(self.ncalls + self.npc + self.nres + self.npr + 2)
        for j in range(self.npc):
            self.call_at[self.ncalls] = self.pc_at[j]
            self.call_len[self.ncalls] = self.pc_len[j]
            self.ncalls += 1
        if rcode == R_TOOL:
            self.res_at[self.nres] = result_id.start + 1 if result_id.kind == 34 else -1
            self.res_len[self.nres] = result_id.end - result_id.start - 2 if (
                result_id.kind == 34) else 0
            self.nres += 1
        for j in range(self.npr):
            self.res_at[self.nres] = self.pr_at[j]
            self.res_len[self.nres] = self.pr_len[j]
            self.nres += 1
        self.m_end[i] = s.i
        self.chars[i] = chars
        self.opaque[i] = opaque
        self.roles[i] = rcode
        self.flags[i] = flags
        self.role_at[i] = role.start + 1
        self.role_len[i] = role.end - role.start - 2
        self.call_off[i + 1] = self.ncalls
        self.res_off[i + 1] = self.nres
        self.m = i + 1
        return 0

    cdef int scan(self, const uint8_t* p, Py_ssize_t lo, Py_ssize_t hi) except -1 nogil:
        # The whole line p[lo:hi]; 0 when it takes the byte path.
        cdef _Sc s
        cdef int code, opened, nkeys = 0
        cdef bint more, found = False, inner_more
        cdef Py_ssize_t key_at[_SCAN_KEYS]
        cdef Py_ssize_t key_len[_SCAN_KEYS]
        cdef Py_ssize_t start, length, k
        s.p = p
        s.end = hi
        s.i = lo
        self.m = self.ncalls = self.nres = 0
        self.call_off[0] = 0
        self.res_off[0] = 0
        self.id_start = -1
        _ws(&s)
        opened = _open(&s, 123, 0)
        if opened:
            return _FALLBACK
        more = True
        while more:
            if _key(&s, &code):
                return _FALLBACK
            start, length = s.key_at, s.key_len
            if nkeys == _SCAN_KEYS:
                return _FALLBACK
            for k in range(nkeys):
                if key_len[k] == length and memcmp(p + key_at[k], p + start, length) == 0:
                    return _FALLBACK
            key_at[nkeys] = start
            key_len[nkeys] = length
            nkeys += 1
            if length == 9 and memcmp(p + start, b"fragments", 9) == 0:
                return _FALLBACK
            if length == 8 and memcmp(p + start, b"messages", 8) == 0:
                found = True
                self.array_start = s.i
                opened = _open(&s, 91, 1)
                if opened == 1:
                    return _FALLBACK
                inner_more = opened == 0
                while inner_more:
                    if self._message(&s, 2):
                        return _FALLBACK
                    if _next(&s, 93, &inner_more):
                        return _FALLBACK
                self.array_end = s.i
            elif length == 2 and memcmp(p + start, b"id", 2) == 0:
                self.id_start = s.i
                if _value(&s, 1):
                    return _FALLBACK
                self.id_end = s.i
            elif _value(&s, 1):
                return _FALLBACK
            if _next(&s, 125, &more):
                return _FALLBACK
        _ws(&s)
        if s.i != hi or not found:
            return _FALLBACK
        return 0


cdef inline uint64_t _hash(const uint8_t* p, Py_ssize_t n) noexcept nogil:
    cdef uint64_t h = 14695981039346656037ULL
    cdef Py_ssize_t i
    for i in range(n):
        h = (h ^ p[i]) * 1099511628211ULL
    return h


@cython.final
cdef class _LineReducer:
    """reduce_lines' state: the scan, the ids as codes and the scratch of the pairing pass,
    reused from line to line (the pairing stamps only ever grow)."""

    cdef _LineScan scan
    cdef Py_ssize_t codes_cap, table_cap, state_cap, group_cap, warn_cap, roles_cap
    cdef int64_t* call_codes
    cdef int64_t* res_codes
    cdef int64_t* code_at
    cdef int64_t* code_len
    cdef int64_t* table  # code + 1 per slot, 0: empty
    cdef int64_t* roles_table  # message + 1 per slot (the first with its role), 0: empty
    cdef int64_t* called
    cdef int64_t* pend_stamp
    cdef int64_t* pend_at
    cdef int64_t* orphan
    cdef int64_t* starts
    cdef int64_t* w
    cdef int64_t stamp
    cdef _Rows s  # the pairing pass's state for the line at hand, and its warnings

    def __cinit__(self):
        self.scan = _LineScan()
        self.codes_cap = self.table_cap = self.state_cap = self.group_cap = self.warn_cap = 0
        self.roles_cap = 0
        self.roles_table = NULL
        self.call_codes = self.res_codes = self.code_at = self.code_len = self.table = NULL
        self.called = self.pend_stamp = self.pend_at = self.orphan = self.starts = NULL
        self.w = NULL
        self.stamp = 0

    def __dealloc__(self):
        free(self.call_codes)
        free(self.res_codes)
        free(self.code_at)
        free(self.code_len)
        free(self.table)
        free(self.roles_table)
        free(self.called)
        free(self.pend_stamp)
        free(self.pend_at)
        free(self.orphan)
        free(self.starts)
        free(self.w)

    cdef int _zeroed(self, int64_t** p, Py_ssize_t n) except -1 nogil:
        # A fresh zeroed block of n entries in place of *p.
        free(p[0])
        p[0] = <int64_t*>calloc(n if n > 0 else 1, 8)
        if p[0] == NULL:
            with gil:
                raise MemoryError()
        return 0

    cdef Py_ssize_t codes(self, _LineScan sc, const uint8_t* p) except -1 nogil:
        # Dense codes for the line's ids, by their bytes: call_codes, res_codes (-1: none).
        cdef Py_ssize_t total = sc.ncalls + sc.nres, size = 16, j, slot, ncodes = 0
        cdef int64_t at, n, code
        cdef uint64_t mask
        if total > self.codes_cap:
            self.call_codes = <int64_t*>_regrow(self.call_codes, total * 8)
            self.res_codes = <int64_t*>_regrow(self.res_codes, total * 8)
            self.code_at = <int64_t*>_regrow(self.code_at, total * 8)
            self.code_len = <int64_t*>_regrow(self.code_len, total * 8)
            self.codes_cap = total
        while size < 2 * total:
            size *= 2
        if size > self.table_cap:
            free(self.table)
            self.table = <int64_t*>malloc(size * 8)
            if self.table == NULL:
                self.table_cap = 0
                with gil:
                    raise MemoryError()
            self.table_cap = size
        memset(self.table, 0, size * 8)
        mask = <uint64_t>(size - 1)
        for j in range(total):
            if j < sc.ncalls:
                at, n = sc.call_at[j], sc.call_len[j]
            else:
                at, n = sc.res_at[j - sc.ncalls], sc.res_len[j - sc.ncalls]
            if at < 0:
                code = -1
            else:
                slot = <Py_ssize_t>(_hash(p + at, n) & mask)
                while True:
                    code = self.table[slot] - 1
                    if code < 0:
                        code = ncodes
                        self.code_at[code] = at
                        self.code_len[code] = n
                        self.table[slot] = code + 1
                        ncodes += 1
                        break
                    if self.code_len[code] == n and memcmp(p + self.code_at[code], p + at,
                                                           n) == 0:
                        break
                    slot = (slot + 1) & (size - 1)
            if j < sc.ncalls:
                self.call_codes[j] = code
            else:
                self.res_codes[j - sc.ncalls] = code
        return ncodes

    cdef Py_ssize_t unknown_roles(self, _LineScan sc, const uint8_t* p, Py_ssize_t lo,
                                  Py_ssize_t hi) except -1 nogil:
        # How many roles the accounting does not know messages lo:hi carry, each counted once
        # (by its bytes): the unknown-role warnings of a fragment.
        cdef Py_ssize_t count = 0, size = 16, i, slot, distinct = 0
        cdef int64_t held
        cdef uint64_t mask
        for i in range(lo, hi):
            if sc.flags[i] & F_UNKNOWN:
                count += 1
        if count == 0:
            return 0
        while size < 2 * count:
            size *= 2
        if size > self.roles_cap:
            free(self.roles_table)
            self.roles_table = <int64_t*>malloc(size * 8)
            if self.roles_table == NULL:
                self.roles_cap = 0
                with gil:
                    raise MemoryError()
            self.roles_cap = size
        memset(self.roles_table, 0, size * 8)
        mask = <uint64_t>(size - 1)
        for i in range(lo, hi):
            if not (sc.flags[i] & F_UNKNOWN):
                continue
            slot = <Py_ssize_t>(_hash(p + sc.role_at[i], sc.role_len[i]) & mask)
            while True:
                held = self.roles_table[slot] - 1
                if held < 0:
                    self.roles_table[slot] = i + 1
                    distinct += 1
                    break
                if sc.role_len[held] == sc.role_len[i] and memcmp(
                        p + sc.role_at[held], p + sc.role_at[i], sc.role_len[i]) == 0:
                    break
                slot = (slot + 1) & (size - 1)
        return distinct

    cdef int rows(self, _LineScan sc, _Rows* s, Py_ssize_t ncodes) except -1 nogil:
        # The pairing pass's scratch for this line, in s.
        cdef Py_ssize_t m = sc.m
        if ncodes + 1 > self.state_cap:
            self._zeroed(&self.called, ncodes + 1)
            self._zeroed(&self.pend_stamp, ncodes + 1)
            self._zeroed(&self.pend_at, ncodes + 1)
            self.state_cap = ncodes + 1
        if 2 * m + 1 > self.group_cap or sc.nres + 1 > self.group_cap:
            self.group_cap = 2 * m + 1 if 2 * m + 1 > sc.nres + 1 else sc.nres + 1
            self._zeroed(&self.starts, self.group_cap)
            self._zeroed(&self.orphan, self.group_cap)
        if 5 * (sc.ncalls + sc.nres) + 5 > self.warn_cap:
            self.warn_cap = 5 * (sc.ncalls + sc.nres) + 5
            self._zeroed(&self.w, self.warn_cap)
        cdef Py_ssize_t cap = sc.ncalls + sc.nres + 1
        s.roles = sc.roles
        s.flags = sc.flags
        s.chars = sc.chars
        s.call_off = sc.call_off
        s.call_codes = self.call_codes
        s.res_off = sc.res_off
        s.result_codes = self.res_codes
        s.called = self.called
        s.pend_stamp = self.pend_stamp
        s.pend_at = self.pend_at
        s.orphan = self.orphan
        s.starts = self.starts
        s.gchars = self.starts + m + 1
        s.stamp = self.stamp
        s.w_row = self.w
        s.w_frag = self.w + cap
        s.w_index = self.w + 2 * cap
        s.w_code = self.w + 3 * cap
        s.w_id = self.w + 4 * cap
        s.nwarn = 0
        return 0


cdef inline int64_t _sum(const int64_t* a, Py_ssize_t lo, Py_ssize_t hi) noexcept nogil:
    cdef int64_t t = 0
    cdef Py_ssize_t i
    for i in range(lo, hi):
        t += a[i]
    return t


cdef object _id_text(const uint8_t* p, _LineReducer r, int64_t code):
    if code < 0:
        return None
    return PyUnicode_DecodeUTF8(<const char*>(p + r.code_at[code]), r.code_len[code], NULL)


def reduce_lines(data, starts, stops, tuple steps, int64_t trigger_chars,
                 int64_t watermark_chars, bint raw=False):
    """:func:`reduce_transcript` of transcript lines read and written as bytes (see the
    twin)."""
    return _lines(data, starts, stops, steps, trigger_chars, watermark_chars, raw, False, None)


def report_lines(data, starts, stops, tuple steps, int64_t trigger_chars,
                 int64_t watermark_chars, template):
    """:func:`reduce_lines`, and each line's report entry written from ``template`` (see the
    twin)."""
    return _lines(data, starts, stops, steps, trigger_chars, watermark_chars, False, True,
                  template)


cdef tuple _lines(data, starts, stops, tuple steps, int64_t trigger_chars,
                  int64_t watermark_chars, bint raw, bint reports, object template):
    if steps is None:
        raise TypeError("steps: expected a tuple of trims, got None")
    cdef list checked = []
    cdef int grouping
    cdef int64_t keep, target
    for step in steps:
        fid, grouping, keep, target = step
        if fid != "history" or type(fid) is not str:
            raise ValueError(f"reduce_lines trims the history only; a step names {fid!r}")
        if grouping != CP_GROUP_USER_TURN and grouping != CP_GROUP_MESSAGE:
            raise ValueError(f"unknown grouping code {grouping}")
        if keep < 0 or target < 0:
            raise ValueError("keep_groups and target_chars must be >= 0")
        checked.append((grouping, keep, target))
    cdef Py_ssize_t nsteps = len(checked)
    cdef _Template tp
    if reports:
        # held for the call: the pieces are pointers into template's bytes
        template = _entry_template(template, nsteps)
    try:
        view = memoryview(data)
    except TypeError:
        raise TypeError(f"expected a bytes-like object, got {type(data).__name__}") from None
    if view.ndim != 1 or view.itemsize != 1 or not view.c_contiguous:
        view.release()
        raise ValueError("expected a flat, contiguous buffer of bytes")
    cdef const uint8_t[::1] buf = view.cast("B")
    # Private copies: the bounds are checked here and read again without the GIL.
    cdef const int64_t[::1] lo_a = np.array(np.ascontiguousarray(starts, dtype=np.int64),
                                            copy=True)
    cdef const int64_t[::1] hi_a = np.array(np.ascontiguousarray(stops, dtype=np.int64),
                                            copy=True)
    cdef Py_ssize_t n = lo_a.shape[0], size = buf.shape[0], k, total = 0, longest = 0
    if hi_a.shape[0] != n:
        raise ValueError(f"starts and stops differ in length ({n} != {hi_a.shape[0]})")
    for k in range(n):
        if not (0 <= lo_a[k] <= hi_a[k] <= size):
            raise ValueError(f"line {lo_a[k]}..{hi_a[k]} lies outside the buffer of {size} "
                             "bytes")
        total += hi_a[k] - lo_a[k] + 1
        longest = max(longest, hi_a[k] - lo_a[k] + 1)
    cdef const uint8_t* p = &buf[0] if size else NULL
    cdef int64_t spec[3 * 64]
    cdef int64_t* specs = spec
    ends_a = np.zeros(n, dtype=np.int64)
    figures_a = np.zeros((n, SCAN_FIGURES), dtype=np.int64)
    entry_ends_a = np.zeros(n if reports else 0, dtype=np.int64)
    cdef int64_t[::1] ends = ends_a
    cdef int64_t[::1] entry_ends = entry_ends_a
    cdef int64_t[:, ::1] fig = figures_a
    cdef list raws = [] if raw else None
    cdef Py_ssize_t at = 0
    cdef _LineReducer r = _LineReducer()
    cdef _LineScan sc = r.scan
    # Written in place, once: no output is longer than its line and a newline.
    result = PyByteArray_FromStringAndSize(NULL, total)
    cdef char* out = PyByteArray_AS_STRING(result)
    cdef int64_t cuts[_CUTS]
    cdef int64_t* steps_rec = NULL
    cdef Py_ssize_t done_at
    cdef _Buf entries
    entries.p = NULL
    entries.n = entries.cap = 0
    cdef char* scratch = NULL
    cdef uint8_t* missing = NULL  # lines of the byte path without an entry
    cdef bint any_missing = False
    memset(&tp, 0, sizeof(tp))
    try:
        if nsteps > 64:
            specs = <int64_t*>malloc(sizeof(int64_t) * 3 * nsteps)
            if specs == NULL:
                raise MemoryError()
        for k in range(nsteps):
            specs[3 * k], specs[3 * k + 1], specs[3 * k + 2] = checked[k]
        steps_rec = <int64_t*>calloc(7 * nsteps + 1, 8)
        if steps_rec == NULL:
            raise MemoryError()
        if reports:
            _template_of(template, nsteps, &tp)
            missing = <uint8_t*>calloc(n + 1, 1)
            if missing == NULL:
                raise MemoryError()
        if raws is None:
            # Without records no Python object is made per line: other threads run meanwhile.
            with nogil:
                for k in range(n):
                    done_at = _reduce_core(r, sc, p, lo_a[k], hi_a[k], specs, nsteps,
                                           trigger_chars, watermark_chars, out, at, &fig[k, 0],
                                           steps_rec, cuts)
                    if done_at >= 0:
                        at = done_at
                        if reports and not _put_entry(&tp, &entries, r, sc, p, nsteps,
                                                      &fig[k, 0], steps_rec, cuts):
                            missing[k] = 1
                            any_missing = True
                    ends[k] = at
                    if reports:
                        entry_ends[k] = entries.n
        else:
            for k in range(n):
                done_at = _reduce_core(r, sc, p, lo_a[k], hi_a[k], specs, nsteps,
                                       trigger_chars, watermark_chars, out, at, &fig[k, 0],
                                       steps_rec, cuts)
                if done_at < 0:
                    raws.append(None)
                else:
                    at = done_at
                    raws.append(_records(r, sc, p, nsteps, &fig[k, 0], steps_rec, cuts))
                ends[k] = at
        if reports:
            # The records of the lines without an entry, from a second reading of each.
            raws = [None] * n
            if any_missing:
                scratch = <char*>malloc(longest + 1)
                if scratch == NULL:
                    raise MemoryError()
                for k in range(n):
                    if missing[k]:
                        _reduce_core(r, sc, p, lo_a[k], hi_a[k], specs, nsteps, trigger_chars,
                                     watermark_chars, scratch, 0, &fig[k, 0], steps_rec, cuts)
                        raws[k] = _records(r, sc, p, nsteps, &fig[k, 0], steps_rec, cuts)
            written = PyByteArray_FromStringAndSize(entries.p, entries.n)
    finally:
        free(steps_rec)
        if specs != spec:
            free(specs)
        free(entries.p)
        free(scratch)
        free(missing)
        _template_free(&tp)
    PyByteArray_Resize(result, at)
    if reports:
        return result, ends_a, figures_a, written, entry_ends_a, raws
    return result, ends_a, figures_a, raws


# ---------------------------------------------------------------------------------------------
# report entries (report_lines): programs of bytes and slots, checked as the twin does

cdef enum:
    _SLOT_ID = 0
    _SLOT_TRIGGERED = 1
    _SLOT_TARGET_REACHED = 9
    _SLOT_STEPS = 10
    _SLOT_FRAGMENTS = 11
    _SLOT_MISSED = 12
    _SLOT_STATUS = 13
    _SLOT_REASON = 14
    _SLOT_MESSAGES_REMOVED = 19
    _SLOT_FRAGMENT_CHARS_BEFORE = 20
    _SLOT_CHANGED = 24
    _SLOTS = 25

ENTRY_SLOTS = _kernel_py.ENTRY_SLOTS
assert len(ENTRY_SLOTS) == _SLOTS
assert _kernel_py.ENTRY_SLOTS[_SLOT_STEPS] == "steps"
assert _kernel_py.ENTRY_SLOTS[_SLOT_MISSED] == "missed-reason"
assert _kernel_py.ENTRY_SLOTS[_SLOT_STATUS] == "status"
assert _kernel_py.ENTRY_SLOTS[_SLOT_FRAGMENT_CHARS_BEFORE] == "fragment-chars-before"
assert _kernel_py.ENTRY_SLOTS[_SLOT_CHANGED] == "fragment-changed"

cdef struct _Program:
    Py_ssize_t n  # slots; n + 1 pieces
    const char** piece
    Py_ssize_t* size
    int* slot

cdef struct _Template:
    _Program head
    _Program* steps
    Py_ssize_t nsteps
    _Program fragments[3]
    Py_ssize_t bound  # the most an entry writes but its id
    Py_ssize_t ids  # how many times it writes its id

cdef struct _Buf:
    char* p
    Py_ssize_t n, cap


cdef tuple _entry_template(object template, Py_ssize_t nsteps):
    # The twin's checks, in its order and words.
    if type(template) is not tuple or len(template) != 3:
        raise TypeError("template: expected a tuple (head, steps, fragments)")
    head, steps, fragments = template
    if type(steps) is not tuple or len(steps) != nsteps:
        raise ValueError(f"template: expected a tuple of a program for each of the {nsteps} "
                         "steps")
    if type(fragments) is not tuple or len(fragments) != 3:
        raise ValueError("template: expected a tuple of a program for each of the 3 fragments")
    _entry_program(head, 0, _SLOT_STATUS, "template head")
    for i, program in enumerate(steps):
        _entry_program(program, _SLOT_STATUS, _SLOT_FRAGMENT_CHARS_BEFORE,
                       f"template steps[{i}]")
    for i, program in enumerate(fragments):
        _entry_program(program, _SLOT_FRAGMENT_CHARS_BEFORE, _SLOTS,
                       f"template fragments[{i}]")
    return template


cdef int _entry_program(object program, int lo, int hi, str where) except -1:
    if type(program) is not tuple or len(program) % 2 == 0:
        raise TypeError(f"{where}: expected a tuple of bytes with a slot code between each two")
    for i, item in enumerate(program):
        if i % 2 == 0:
            if type(item) is not bytes:
                raise TypeError(f"{where}[{i}]: expected bytes, got {type(item).__name__}")
        elif type(item) is not int or not lo <= item < hi:
            raise ValueError(f"{where}[{i}]: expected a slot code from {lo} to {hi - 1}")
    return 0


cdef int _program_of(tuple program, _Program* out, Py_ssize_t* bound) except -1:
    # A checked program's pieces and slots (pointers into its bytes, which the caller holds).
    cdef Py_ssize_t n = len(program) // 2, i
    out.piece = <const char**>calloc(n + 1, sizeof(char*))
    out.size = <Py_ssize_t*>calloc(n + 1, sizeof(Py_ssize_t))
    out.slot = <int*>calloc(n + 1, sizeof(int))
    if out.piece == NULL or out.size == NULL or out.slot == NULL:
        raise MemoryError()
    out.n = n
    for i in range(n + 1):
        piece = <bytes>program[2 * i]
        out.piece[i] = piece
        out.size[i] = len(piece)
        bound[0] += len(piece)
        if i < n:
            out.slot[i] = <int>program[2 * i + 1]
            # the longest value a slot writes: 20 digits, a status, a reason, a missed reason
            bound[0] += 24
    return 0


cdef int _template_of(tuple template, Py_ssize_t nsteps, _Template* t) except -1:
    # The programs, and the most an entry can write: the head once, the steps and the
    # fragments (with brackets and commas) once for each slot that writes them, the id for
    # each slot that writes it (t.ids times its length).
    cdef Py_ssize_t head = 0, steps = 2 + nsteps, fragments = 5, k
    _program_of(template[0], &t.head, &head)
    t.steps = <_Program*>calloc(nsteps + 1, sizeof(_Program))
    if t.steps == NULL:
        raise MemoryError()
    t.nsteps = nsteps
    for k in range(nsteps):
        _program_of(template[1][k], &t.steps[k], &steps)
    for k in range(3):
        _program_of(template[2][k], &t.fragments[k], &fragments)
    t.bound = head
    t.ids = 0
    for k in range(t.head.n):
        if t.head.slot[k] == _SLOT_STEPS:
            t.bound += steps
        elif t.head.slot[k] == _SLOT_FRAGMENTS:
            t.bound += fragments
        elif t.head.slot[k] == _SLOT_ID:
            t.ids += 1
    return 0


cdef void _program_free(_Program* p) noexcept:
    free(p.piece)
    free(p.size)
    free(p.slot)


cdef void _template_free(_Template* t) noexcept:
    cdef Py_ssize_t k
    _program_free(&t.head)
    if t.steps != NULL:
        for k in range(t.nsteps):
            _program_free(&t.steps[k])
        free(t.steps)
    for k in range(3):
        _program_free(&t.fragments[k])


cdef inline Py_ssize_t _put_int(char* out, int64_t v) noexcept nogil:
    cdef char tmp[24]
    cdef int i = 0, j = 0
    cdef uint64_t u = <uint64_t>v
    if v < 0:
        out[0] = 45
        j = 1
        u = (~u) + 1
    while True:
        tmp[i] = <char>(48 + u % 10)
        i += 1
        u //= 10
        if u == 0:
            break
    while i:
        i -= 1
        out[j] = tmp[i]
        j += 1
    return j


cdef inline Py_ssize_t _put_bytes(char* out, const char* text, Py_ssize_t n) noexcept nogil:
    memcpy(out, text, n)
    return n


cdef const char* _STATUS_JSON[3]
_STATUS_JSON[0] = b'"skipped"'
_STATUS_JSON[1] = b'"unchanged"'
_STATUS_JSON[2] = b'"applied"'
cdef const char* _REASON_JSON[7]
_REASON_JSON[0] = b'"not-triggered"'
_REASON_JSON[1] = b'"target-reached"'
_REASON_JSON[2] = b'"within-target"'
_REASON_JSON[3] = b'"keep-groups-floor"'
_REASON_JSON[4] = b'"trimmed"'
_REASON_JSON[5] = b'"fragment-absent"'
_REASON_JSON[6] = b'"fragment-empty"'
# A missed reason's JSON by its code (0: none), as the twin writes it; the texts are held here.
cdef list _MISSED_TEXT = []
cdef const char* _MISSED_JSON[8]


cdef int _missed_json() except -1:
    cdef int i
    assert CP_MISSED_COUNT < 8
    _MISSED_TEXT.append(b"null")
    for i in range(CP_MISSED_COUNT):
        _MISSED_TEXT.append(b'"' + <bytes>cp_missed_names[i] + b'"')
    for i in range(CP_MISSED_COUNT + 1):
        assert len(_MISSED_TEXT[i]) <= 24  # the most _program_of allows a slot
        _MISSED_JSON[i] = _MISSED_TEXT[i]
    return 0


_missed_json()


cdef Py_ssize_t _put_value(char* out, int slot, const int64_t* v, const char* text,
                           Py_ssize_t size) noexcept nogil:
    # One slot's value: v[slot], as the slot writes it (text: the id's JSON).
    if slot == _SLOT_ID:
        return _put_bytes(out, text, size)
    if slot == _SLOT_TRIGGERED or slot == _SLOT_TARGET_REACHED or slot == _SLOT_CHANGED:
        return _put_bytes(out, b"true", 4) if v[slot] else _put_bytes(out, b"false", 5)
    if slot == _SLOT_STATUS:
        return _put_bytes(out, _STATUS_JSON[v[slot]], strlen(_STATUS_JSON[v[slot]]))
    if slot == _SLOT_REASON:
        return _put_bytes(out, _REASON_JSON[v[slot]], strlen(_REASON_JSON[v[slot]]))
    if slot == _SLOT_MISSED:
        return _put_bytes(out, _MISSED_JSON[v[slot]], strlen(_MISSED_JSON[v[slot]]))
    if _SLOT_STATUS < slot < _SLOT_MESSAGES_REMOVED and v[_SLOT_STATUS] == _STEP_SKIPPED:
        return _put_bytes(out, b"null", 4)
    return _put_int(out, v[slot])


cdef Py_ssize_t _put_program(char* out, const _Program* g, int64_t* v, const char* text,
                             Py_ssize_t size, const _Template* t, _LineScan sc,
                             const int64_t* steps_rec, const bint* present,
                             const Py_ssize_t* bounds, Py_ssize_t h0) noexcept nogil:
    cdef Py_ssize_t at = _put_bytes(out, g.piece[0], g.size[0]), i, k, f, lo, kept_lo
    cdef bint first
    cdef const int64_t* rec
    for i in range(g.n):
        if g.slot[i] == _SLOT_STEPS:
            out[at] = 91
            at += 1
            for k in range(t.nsteps):
                if k:
                    out[at] = 44
                    at += 1
                rec = steps_rec + 7 * k
                v[_SLOT_STATUS] = rec[0]
                v[_SLOT_REASON] = rec[1]
                for f in range(2, 7):
                    v[_SLOT_STATUS + f] = rec[f] if rec[0] != _STEP_SKIPPED or f == 6 else 0
                at += _put_program(out + at, &t.steps[k], v, text, size, t, sc, steps_rec,
                                   present, bounds, h0)
            out[at] = 93
            at += 1
        elif g.slot[i] == _SLOT_FRAGMENTS:
            out[at] = 91
            at += 1
            first = True
            for f in range(3):
                if not present[f]:
                    continue
                if not first:
                    out[at] = 44
                    at += 1
                first = False
                lo = bounds[f]
                kept_lo = h0 if f == 1 else lo
                v[_SLOT_FRAGMENT_CHARS_BEFORE] = _sum(sc.chars, lo, bounds[f + 1])
                v[_SLOT_FRAGMENT_CHARS_BEFORE + 1] = _sum(sc.chars, kept_lo, bounds[f + 1])
                v[_SLOT_FRAGMENT_CHARS_BEFORE + 2] = bounds[f + 1] - lo
                v[_SLOT_FRAGMENT_CHARS_BEFORE + 3] = bounds[f + 1] - kept_lo
                v[_SLOT_CHANGED] = f == 1 and h0 != bounds[1]
                at += _put_program(out + at, &t.fragments[f], v, text, size, t, sc, steps_rec,
                                   present, bounds, h0)
            out[at] = 93
            at += 1
        else:
            at += _put_value(out + at, g.slot[i], v, text, size)
        at += _put_bytes(out + at, g.piece[i + 1], g.size[i + 1])
    return at


cdef bint _put_entry(const _Template* t, _Buf* b, _LineReducer r, _LineScan sc,
                     const uint8_t* p, Py_ssize_t nsteps, const int64_t* row,
                     const int64_t* steps_rec, const int64_t* cuts) except -1 nogil:
    # The report entry of a line _reduce_core took, as the twin's _entry writes it from its
    # records; False (nothing written) where the twin gives none.
    if r.s.nwarn or row[_ROW_UNKNOWN]:
        return False
    cdef const char* text = b"null"
    cdef Py_ssize_t size = 4, i
    if sc.id_start >= 0:
        text = <const char*>(p + sc.id_start)
        size = sc.id_end - sc.id_start
        if not _written_back(<const uint8_t*>text, size):
            return False
    cdef Py_ssize_t m = sc.m, head = cuts[_HEAD], tail = cuts[_TAIL], h0 = cuts[_KEPT]
    cdef Py_ssize_t bounds[4]
    bounds[0], bounds[1], bounds[2], bounds[3] = 0, head, tail, m
    cdef bint present[3]
    present[0] = head > 0
    present[1] = tail > head
    present[2] = tail < m
    cdef int64_t v[_SLOTS]
    memset(v, 0, sizeof(v))
    v[1] = cuts[_FIRED]
    v[2] = row[3]
    v[3] = row[5]
    v[4] = present[0] + present[1] + present[2]
    v[5] = _sum(sc.opaque, 0, m)
    v[6] = row[4]
    v[7] = row[6]
    v[8] = _sum(sc.opaque, 0, head) + _sum(sc.opaque, h0, m)
    v[9] = cuts[_REACHED]
    v[_SLOT_MISSED] = cuts[_MISSED]
    cdef Py_ssize_t need = b.n + t.bound + t.ids * size
    if need > b.cap:
        b.cap = max(need, 2 * b.cap, 4096)
        b.p = <char*>_regrow(b.p, b.cap)
    b.n += _put_program(b.p + b.n, &t.head, v, text, size, t, sc, steps_rec, present, bounds,
                        h0)
    return True


cdef bint _written_back(const uint8_t* s, Py_ssize_t n) noexcept nogil:
    # Whether dumps(loads(s)) is s, for a JSON value the scan validated (as the twin says).
    cdef Py_ssize_t i = 0
    if n >= 1 and s[0] == 34:
        return memchr(s, 92, n) == NULL
    if (n == 4 and (memcmp(s, b"null", 4) == 0 or memcmp(s, b"true", 4) == 0)) or (
            n == 5 and memcmp(s, b"false", 5) == 0):
        return True
    if n >= 1 and s[0] == 45:
        i = 1
    if n - i < 1 or n - i > 18:
        return False
    if s[i] == 48:
        return n - i == 1 and i == 0
    while i < n:
        if not (48 <= s[i] <= 57):
            return False
        i += 1
    return True


cdef enum:
    _STEP_SKIPPED = 0
    _STEP_UNCHANGED = 1
    _STEP_APPLIED = 2
    # reasons
    _NOT_TRIGGERED = 0
    _TARGET_REACHED = 1
    _WITHIN_TARGET = 2
    _KEEP_GROUPS_FLOOR = 3
    _TRIMMED = 4
    _FRAGMENT_ABSENT = 5
    _FRAGMENT_EMPTY = 6
    # what _reduce_core leaves in cut[] for the records
    _HEAD = 0
    _TAIL = 1
    _KEPT = 2
    _FIRED = 3
    _REACHED = 4
    _MISSED = 5
    _CUTS = 6


cdef Py_ssize_t _reduce_core(_LineReducer r, _LineScan sc, const uint8_t* p, Py_ssize_t lo,
                             Py_ssize_t hi, const int64_t* specs, Py_ssize_t nsteps,
                             int64_t trigger_chars, int64_t watermark_chars, char* out,
                             Py_ssize_t at, int64_t* row, int64_t* steps_out,
                             int64_t* cut_out) except -2 nogil:
    # One line: -1 when it takes the object path; otherwise its output is written at out + at
    # (the return value: where it ends), its figures in row, per step (status, reason, chars
    # before, chars after, groups before, groups after, messages removed) in steps_out (7
    # entries a step), where it split and cut in cut_out, its warnings in r.s.
    if sc.scan(p, lo, hi):
        return -1
    cdef Py_ssize_t m = sc.m, head = 0, tail, h0, cut, i, j, f, a_lo, a_hi, k
    cdef Py_ssize_t ncodes = r.codes(sc, p)
    cdef _Rows* s = &r.s
    r.rows(sc, s, ncodes)
    while head < m and (sc.roles[head] == CP_ROLE_SYSTEM or sc.roles[head] == CP_ROLE_DEVELOPER):
        head += 1
    tail = m
    if tail > head and sc.roles[m - 1] == R_USER and not (sc.flags[m - 1] & F_RESULT):
        tail -= 1
    cdef Py_ssize_t bounds[4]
    bounds[0], bounds[1], bounds[2], bounds[3] = 0, head, tail, m
    cdef int64_t total = _sum(sc.chars, 0, m), hist, kept_chars, removed, ngroups
    cdef bint fired = trigger_chars >= 0 and total > trigger_chars
    cdef int64_t b_chars = total
    cdef int64_t messages_removed = 0, groups_removed = 0
    cdef int64_t* rec
    cdef bint floor = False
    h0 = head
    hist = _sum(sc.chars, head, tail)
    for k in range(nsteps):
        rec = steps_out + 7 * k
        if not fired or not (watermark_chars >= 0 and total > watermark_chars):
            rec[0] = _STEP_SKIPPED
            rec[1] = _NOT_TRIGGERED if not fired else _TARGET_REACHED
            rec[6] = 0
            continue
        if h0 == tail:  # no history, or an earlier step left none
            rec[0] = _STEP_SKIPPED
            rec[1] = _FRAGMENT_ABSENT if tail == head else _FRAGMENT_EMPTY
            rec[6] = 0
            continue
        cut = _rows_cut(s, h0, tail, <int>specs[3 * k], specs[3 * k + 1], specs[3 * k + 2],
                        &removed, &ngroups)
        rec[4] = ngroups
        if cut == h0:
            rec[0] = _STEP_UNCHANGED
            rec[1] = _WITHIN_TARGET if hist <= specs[3 * k + 2] else _KEEP_GROUPS_FLOOR
            floor = floor or rec[1] == _KEEP_GROUPS_FLOOR
            rec[2] = rec[3] = hist
            rec[5] = ngroups
            rec[6] = 0
            continue
        kept_chars = hist - _sum(sc.chars, h0, cut)
        rec[0] = _STEP_APPLIED
        rec[1] = _TRIMMED if kept_chars <= specs[3 * k + 2] else _KEEP_GROUPS_FLOOR
        floor = floor or rec[1] == _KEEP_GROUPS_FLOOR
        rec[2] = hist
        rec[3] = kept_chars
        rec[5] = ngroups - removed
        rec[6] = cut - h0
        total -= hist - kept_chars
        hist = kept_chars
        messages_removed += cut - h0
        groups_removed += removed
        h0 = cut
    # pairing warnings of the result, fragment by fragment, and its unknown roles (a warning
    # per role and fragment)
    cdef uint8_t any_tool
    cdef int64_t orphans = 0, unanswered = 0, unknown = 0
    for f in range(3):
        a_lo = h0 if f == 1 else bounds[f]
        a_hi = bounds[f + 1]
        any_tool = 0
        for i in range(a_lo, a_hi):
            any_tool |= sc.flags[i]
        if any_tool & (F_RESULT | F_CALLS):
            _rows_warnings(s, 0, f, a_lo, a_hi)
        if any_tool & F_UNKNOWN:
            unknown += r.unknown_roles(sc, p, a_lo, a_hi)
    r.stamp = s.stamp
    for i in range(s.nwarn):
        if s.w_code[i] == 0:
            orphans += 1
        else:
            unanswered += 1
    # the line
    cdef Py_ssize_t start = lo, stop = hi
    while start < stop and (p[start] == 32 or p[start] == 9 or p[start] == 10 or p[start] == 13):
        start += 1
    while stop > start and (p[stop - 1] == 32 or p[stop - 1] == 9 or p[stop - 1] == 10
                            or p[stop - 1] == 13):
        stop -= 1
    if h0 == head:
        memcpy(out + at, p + start, stop - start)
        at += stop - start
    else:
        memcpy(out + at, p + start, sc.array_start - start)
        at += sc.array_start - start
        out[at] = 91
        at += 1
        j = 0
        for i in range(m):
            if head <= i < h0:
                continue
            if j:
                out[at] = 44
                at += 1
            j += 1
            memcpy(out + at, p + sc.m_start[i], sc.m_end[i] - sc.m_start[i])
            at += sc.m_end[i] - sc.m_start[i]
        out[at] = 93
        at += 1
        memcpy(out + at, p + sc.array_end, stop - sc.array_end)
        at += stop - sc.array_end
    out[at] = 10
    at += 1
    cdef bint reached = not (watermark_chars >= 0 and total > watermark_chars)
    # Why a triggered line missed its target: what no trim may reduce (all but the history, and
    # the history too without a trim) over the target, else a keepGroups floor, else nothing
    # more a trim could do.
    cdef int64_t missed = CP_MISSED_NONE
    if fired and not reached:
        missed = _missed_code((total - hist if nsteps else total) > watermark_chars, False,
                              floor)
    row[0] = 1
    row[1] = fired
    row[2] = reached
    row[3] = b_chars
    row[4] = total
    row[5] = m
    row[6] = m - messages_removed
    row[7] = messages_removed
    row[8] = groups_removed
    row[9] = orphans
    row[10] = unanswered
    row[11] = total < b_chars or messages_removed > 0
    for k in range(CP_MISSED_COUNT):
        row[12 + k] = missed == k + 1
    row[_ROW_UNKNOWN] = unknown
    cut_out[_HEAD] = head
    cut_out[_TAIL] = tail
    cut_out[_KEPT] = h0
    cut_out[_FIRED] = fired
    cut_out[_REACHED] = reached
    cut_out[_MISSED] = missed
    return at


cdef tuple _STATUSES = ("skipped", "unchanged", "applied")
cdef tuple _REASONS = ("not-triggered", "target-reached", "within-target", "keep-groups-floor",
                       "trimmed", "fragment-absent", "fragment-empty")


cdef list _unknown_records(_LineScan sc, const uint8_t* p, Py_ssize_t lo, Py_ssize_t hi,
                           object fragment):
    # The unknown-role records of messages lo:hi (fragment index ``fragment``): per role, in
    # the order of first appearance, (fragment, first index, "unknown-role", (role, messages)).
    cdef dict found = {}
    cdef list entry
    cdef Py_ssize_t i
    for i in range(lo, hi):
        if not (sc.flags[i] & F_UNKNOWN):
            continue
        key = PyBytes_FromStringAndSize(<const char*>(p + sc.role_at[i]), sc.role_len[i])
        entry = found.get(key)
        if entry is None:
            found[key] = [i - lo, 1]
        else:
            entry[1] += 1
    return [(fragment, entry[0], "unknown-role", ((<bytes>key).decode("utf-8"), entry[1]))
            for key, entry in found.items()]


cdef tuple _records(_LineReducer r, _LineScan sc, const uint8_t* p, Py_ssize_t nsteps,
                    const int64_t* row, const int64_t* steps_rec, const int64_t* cuts):
    # The records of reduce_transcript for a line _reduce_core took, and its id's span.
    cdef Py_ssize_t m = sc.m, head = cuts[_HEAD], tail = cuts[_TAIL], h0 = cuts[_KEPT]
    cdef Py_ssize_t bounds[4]
    bounds[0], bounds[1], bounds[2], bounds[3] = 0, head, tail, m
    cdef bint present[3]
    present[0] = head > 0
    present[1] = tail > head
    present[2] = tail < m
    cdef list ids = [], before = [], after = [], kept = [], warnings = [], done = []
    cdef list index_of = [None, None, None]
    cdef Py_ssize_t f, a_lo, a_hi, kept_lo, i, k
    cdef const int64_t* rec
    for k in range(nsteps):
        rec = steps_rec + 7 * k
        if rec[0] == _STEP_SKIPPED:
            done.append(("skipped", _REASONS[rec[1]], None, None, None, None, 0))
        else:
            done.append((_STATUSES[rec[0]], _REASONS[rec[1]], rec[2], rec[3], rec[4], rec[5],
                         rec[6]))
    for f in range(3):
        if not present[f]:
            continue
        index_of[f] = len(ids)
        ids.append(("system", "history", "question")[f])
        a_lo, a_hi = bounds[f], bounds[f + 1]
        before.append((_sum(sc.chars, a_lo, a_hi), a_hi - a_lo, _sum(sc.opaque, a_lo, a_hi)))
        kept_lo = h0 if f == 1 else a_lo
        after.append((_sum(sc.chars, kept_lo, a_hi), a_hi - kept_lo,
                      _sum(sc.opaque, kept_lo, a_hi)))
        kept.append(True if f == 1 and h0 != head else None)
        if row[_ROW_UNKNOWN]:
            warnings += _unknown_records(sc, p, kept_lo, a_hi, index_of[f])
    cdef _Rows* s = &r.s
    for i in range(s.nwarn):
        warnings.append((index_of[s.w_frag[i]], s.w_index[i],
                         "orphan-tool-result" if s.w_code[i] == 0 else "unanswered-tool-call",
                         _id_text(p, r, s.w_id[i])))
    a_opaque = sum(a[2] for a in after)
    totals = (row[3], row[5], _sum(sc.opaque, 0, m), row[4], row[6], a_opaque, row[7], row[8],
              bool(cuts[_REACHED]))
    id_span = None if sc.id_start < 0 else (sc.id_start, sc.id_end)
    return ((bool(cuts[_FIRED]), before, after if nsteps else before, kept, done, warnings,
             None, ids, totals), id_span)


cdef inline bint _blank_byte(uint8_t c) noexcept nogil:
    # A blank line holds nothing but JSON whitespace (a vertical tab or a form feed is none).
    return CP_JSON_WHITESPACE(c)


def line_bounds(data, Py_ssize_t offset, Py_ssize_t length):
    """The lines of ``data[offset:offset + length]`` and where the ones that are not blank lie
    (see the twin)."""
    try:
        view = memoryview(data)
    except TypeError:
        raise TypeError(f"expected a bytes-like object, got {type(data).__name__}") from None
    if view.ndim != 1 or view.itemsize != 1 or not view.c_contiguous:
        view.release()
        raise ValueError("expected a flat, contiguous buffer of bytes")
    cdef const uint8_t[::1] buf = view.cast("B")
    cdef Py_ssize_t size = buf.shape[0]
    if offset < 0 or length < 0 or offset > size or length > size - offset:
        raise ValueError(f"range {offset}+{length} lies outside the buffer of {size} bytes")
    cdef const uint8_t* p = &buf[0] if size else NULL
    cdef Py_ssize_t end = offset + length, at = offset, stop, i, count = 0, number = 0
    cdef const uint8_t* found
    # at most one line per newline, and one after the last
    cdef Py_ssize_t cap = 16
    cdef int64_t* lines = <int64_t*>malloc(3 * cap * 8)
    cdef int64_t* grown
    if lines == NULL:
        raise MemoryError()
    try:
        while at < end:
            found = <const uint8_t*>memchr(p + at, 10, end - at)
            stop = end if found == NULL else found - p
            number += 1
            i = at
            while i < stop and _blank_byte(p[i]):
                i += 1
            if i < stop:
                if count == cap:
                    grown = <int64_t*>realloc(lines, 6 * cap * 8)
                    if grown == NULL:
                        raise MemoryError()
                    lines = grown
                    cap *= 2
                lines[3 * count] = number
                lines[3 * count + 1] = at
                lines[3 * count + 2] = stop
                count += 1
            at = stop + 1
        table = np.empty((count, 3), dtype=np.int64)
        if count:
            memcpy(_data_of(table), lines, 24 * count)
    finally:
        free(lines)
    return number, table[:, 0].copy(), table[:, 1].copy(), table[:, 2].copy()


cdef void* _data_of(object array) except NULL:
    cdef int64_t[:, ::1] view = array
    return <void*>&view[0, 0]
