# The JSON byte reader under the scan of JSONL lines (_lines.pxi): the scanner of ``contextpolicy
# reduce`` (see the twin's reduce_lines, contextpolicy/_lines_py.py, for the rules of which lines
# take this path). Included by _kernel_c.pyx.
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

# _reduce_core's row: the figures of a line, at CP_FIGURE_* (contextpolicy._tables.LINE_FIGURES)
assert SCAN_FIGURES == CP_FIGURE_COUNT and SCAN_UNKNOWN_ROLES == CP_FIGURE_UNKNOWN_ROLES
cdef int _SCAN_DEPTH = SCAN_DEPTH
cdef int _SCAN_NUMBER = SCAN_NUMBER

cdef enum:
    _FALLBACK = 1
    _SCAN_KEYS = 64  # keys of a line's object, at most (each compared with the others)

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
    # Counted from the bytes where it can be, so that threads scanning lines run side by side;
    # otherwise parsed and measured as the object path does, under the GIL.
    cdef _Sc sub
    sub.p, sub.i, sub.end = p, v.start, v.end
    cdef int64_t length = _jc_value(&sub)
    if length >= 0 and sub.i == v.end:
        return length
    with gil:
        value = _loads(PyBytes_FromStringAndSize(<const char*>(p + v.start), v.end - v.start))
        length = _compact_json_len(value)
    return -1 if length < 0 else length


cdef enum:
    _JC_KEYS = 16  # an object of more keys is measured under the GIL


cdef int64_t _jc_value(_Sc* s) noexcept nogil:
    # The compact JSON length (as compact_json writes the parsed value) of the value at s.i,
    # which _value validated, s.i moved past it; -1 where the bytes do not say it alone: a
    # float (written again as repr writes it), a key with an escape or a repeated key (the last
    # one wins), an object of more than _JC_KEYS keys.
    cdef const uint8_t* p = s.p
    cdef uint8_t c
    cdef int64_t total, n
    cdef Py_ssize_t start, k
    cdef Py_ssize_t key_at[_JC_KEYS]
    cdef Py_ssize_t key_len[_JC_KEYS]
    cdef int keys = 0
    _ws(s)
    if s.i >= s.end:
        return -1
    c = p[s.i]
    if c == 34:
        start = s.i
        if _str(s):
            return -1
        return _jc_string(p, start, s.i, s.chars, s.escaped)
    if c == 123 or c == 91:
        total = 2  # the brackets
        s.i += 1
        _ws(s)
        if s.i < s.end and p[s.i] == c + 2:  # } or ]
            s.i += 1
            return total
        while True:
            if c == 123:
                _ws(s)
                start = s.i
                if s.i >= s.end or p[s.i] != 34 or _str(s) or s.escaped or keys == _JC_KEYS:
                    return -1
                for k in range(keys):
                    if key_len[k] == s.i - start and memcmp(p + key_at[k], p + start,
                                                             key_len[k]) == 0:
                        return -1
                key_at[keys], key_len[keys] = start, s.i - start
                keys += 1
                total += s.chars + 3  # its quotes and the colon
                _ws(s)
                if s.i >= s.end or p[s.i] != 58:
                    return -1
                s.i += 1
            n = _jc_value(s)
            if n < 0:
                return -1
            total += n
            _ws(s)
            if s.i >= s.end:
                return -1
            s.i += 1
            if p[s.i - 1] == 44:
                total += 1
                continue
            return total if p[s.i - 1] == c + 2 else -1
    if c == 116 or c == 110:
        s.i += 4
        return 4 if s.i <= s.end else -1
    if c == 102:
        s.i += 5
        return 5 if s.i <= s.end else -1
    start = s.i
    if c == 45:
        s.i += 1
    while s.i < s.end and 48 <= p[s.i] <= 57:
        s.i += 1
    if s.i == start or (s.i < s.end and (p[s.i] == 46 or p[s.i] == 101 or p[s.i] == 69)):
        return -1
    if s.i - start == 2 and c == 45 and p[start + 1] == 48:
        return 1  # -0: the integer 0
    return s.i - start


cdef int64_t _jc_string(const uint8_t* p, Py_ssize_t start, Py_ssize_t stop, int64_t chars,
                        bint escaped) noexcept nogil:
    # The compact JSON length of the validated string p[start:stop] (its quotes included) of
    # chars code points: each code point one char, but a quote, a backslash and a control
    # character, written escaped (two chars, or six for \u00XX).
    cdef int64_t extra = 0
    cdef int cp
    cdef Py_ssize_t i = start + 1
    cdef uint8_t e
    if not escaped:
        return chars + 2
    while i < stop - 1:
        if p[i] != 92:
            i += 1
            continue
        e = p[i + 1]
        if e == 117:
            cp = _hex4(p, i + 2, stop)
            i += 6
            if 0 <= cp < 0x20:
                extra += 1 if (cp == 8 or cp == 9 or cp == 10 or cp == 12 or cp == 13) else 5
            elif cp == 34 or cp == 92:
                extra += 1
            continue
        if e != 47:  # \/ is the slash, written as it is
            extra += 1
        i += 2
    return chars + 2 + extra
