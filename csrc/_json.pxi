# Compact JSON of tool inputs (the twin: contextpolicy/_json_py.py). Included by _kernel_c.pyx.

# Compact JSON (see the twin's _json_text), for values made of exact built-in types only: str,
# int of 64 bits, float, bool, None, and dicts with str keys, lists and tuples of them. They
# are measured and written here, with a stack of frames of this walk's own (never the C
# stack), in two passes that run no Python code: nothing can change the value between them, so
# the references the walk borrows stay valid. A value nested deeper than CP_MAX_JSON_DEPTH (or
# that contains itself) is TOO_DEEP at the first container past the limit. Any other value (a
# subclass, an int beyond 64 bits, an object) goes whole to the twin's writer: Python code a
# subclass runs (a dict's items()) then runs once, in the same order on both kernels, and
# never while this walk holds a value. Both stop at the same first problem: everything this
# walk reads before it is of exact types, read alike by both.
cdef int64_t NOT_NATIVE = -3
cdef int64_t TOO_DEEP = -4
# Longer than any str can be: such a value goes to the twin (which fails as it would), and no
# length sum can wrap (each part is at most this, or a str that exists).
cdef int64_t _JSON_MAX_LENGTH = (<int64_t>1) << 60
cdef object _JSON_TOO_DEEP = JSON_TOO_DEEP
cdef object _json_text = _json_py._json_text
cdef object _JsonTooDeep = JsonTooDeep

cdef enum:
    _JSON_LOCAL_FRAMES = 32  # open containers held on the caller's stack; deeper, on the heap


cdef struct _JFrame:
    PyObject* container  # borrowed: no Python code runs while the walk holds it
    Py_ssize_t pos  # PyDict_Next's position, or the index of the next item
    Py_ssize_t count  # items written so far
    bint is_dict


cdef inline _JFrame* _jframes(_JFrame* frames, _JFrame* local, int depth) except NULL:
    # frames with room for a frame at depth (< CP_MAX_JSON_DEPTH): the caller's local ones,
    # moved to the heap (room for every level) when they are full. The caller frees them.
    cdef _JFrame* heap
    if depth < _JSON_LOCAL_FRAMES or frames != local:
        return frames
    heap = <_JFrame*>PyMem_Malloc(CP_MAX_JSON_DEPTH * sizeof(_JFrame))
    if heap == NULL:
        raise MemoryError()
    memcpy(heap, local, _JSON_LOCAL_FRAMES * sizeof(_JFrame))
    return heap


cdef inline bint _json_container(PyObject* value) noexcept:
    return (PyDict_CheckExact(<object>value) or PyList_CheckExact(<object>value)
            or PyTuple_CheckExact(<object>value))


cdef inline Py_ssize_t _json_size(PyObject* value) noexcept:
    if PyDict_CheckExact(<object>value):
        return PyDict_Size(<object>value)
    if PyList_CheckExact(<object>value):
        return PyList_GET_SIZE(<object>value)
    return PyTuple_GET_SIZE(<object>value)


cdef inline bint _json_next(_JFrame* f, PyObject** item, PyObject** key) noexcept:
    # The next item of an open container (and its key, for a dict); False when none is left.
    if f.is_dict:
        return PyDict_Next(<object>f.container, &f.pos, key, item)
    if PyList_CheckExact(<object>f.container):
        if f.pos >= PyList_GET_SIZE(<object>f.container):
            return False
        item[0] = PyList_GET_ITEM(<object>f.container, f.pos)
    else:
        if f.pos >= PyTuple_GET_SIZE(<object>f.container):
            return False
        item[0] = PyTuple_GET_ITEM_ptr(<object>f.container, f.pos)
    f.pos += 1
    return True


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
    if overflow:  # beyond 64 bits: the twin writes it (or says it cannot)
        return NOT_NATIVE
    if v < 0:
        digits += 1
        u = <unsigned long long>(-(v + 1)) + 1
    else:
        u = <unsigned long long>v
    while u >= 10:
        u //= 10
        digits += 1
    return digits


cdef char* _float_repr(double d) except NULL:
    # repr(d) (float.__repr__), for a finite d; the caller frees it with PyMem_Free.
    return PyOS_double_to_string(d, 114, 0, Py_DTSF_ADD_DOT_0, NULL)  # 'r': repr's form


cdef int64_t _float_len(double d) except -1:
    cdef char* text
    cdef int64_t n
    if isnan(d):
        return 3  # NaN
    if isinf(d):
        return 8 if d > 0 else 9  # Infinity, -Infinity
    text = _float_repr(d)
    n = strlen(text)
    PyMem_Free(text)
    return n


cdef int64_t _json_measure(object value, Py_UCS4* maxchar) except -1:
    # The compact JSON length of value and its widest character, or NOT_NATIVE, or TOO_DEEP.
    cdef _JFrame local[_JSON_LOCAL_FRAMES]
    cdef _JFrame* frames = local
    cdef _JFrame* f
    cdef int depth = 0
    cdef int64_t total = 0, n
    cdef Py_UCS4 top = 127, m
    cdef PyObject* item = <PyObject*>value
    cdef PyObject* key = NULL
    try:
        while True:
            if PyUnicode_CheckExact_ptr(item):
                total += _json_str_len(<object>item)
                m = PyUnicode_MAX_CHAR_VALUE(<object>item)
                top = m if m > top else top
            elif item == <PyObject*>None or item == <PyObject*>True:
                total += 4
            elif item == <PyObject*>False:
                total += 5
            elif PyLong_CheckExact(<object>item):
                n = _int_len(<object>item)
                if n == NOT_NATIVE:
                    return NOT_NATIVE
                total += n
            elif PyFloat_CheckExact(<object>item):
                total += _float_len(PyFloat_AS_DOUBLE(<object>item))
            elif _json_container(item):
                if depth >= CP_MAX_JSON_DEPTH:
                    return TOO_DEEP
                n = _json_size(item)
                # brackets and commas, and a colon per key
                total += 2 + (n - 1 if n else 0) + (n if PyDict_CheckExact(<object>item) else 0)
                if n:
                    frames = _jframes(frames, local, depth)
                    f = &frames[depth]
                    f.container = item
                    f.pos = 0
                    f.count = 0
                    f.is_dict = PyDict_CheckExact(<object>item)
                    depth += 1
            else:
                return NOT_NATIVE
            if total > _JSON_MAX_LENGTH:
                return NOT_NATIVE
            while depth:
                f = &frames[depth - 1]
                if _json_next(f, &item, &key):
                    if f.is_dict:
                        if not PyUnicode_CheckExact_ptr(key):
                            return NOT_NATIVE
                        total += _json_str_len(<object>key)
                        m = PyUnicode_MAX_CHAR_VALUE(<object>key)
                        top = m if m > top else top
                    break
                depth -= 1
            else:
                break
    finally:
        if frames != local:
            PyMem_Free(frames)
    maxchar[0] = top
    return total


cdef inline Py_ssize_t _put(int kind, void* data, Py_ssize_t at, const char* ascii) noexcept:
    cdef Py_ssize_t j = 0
    while ascii[j]:
        PyUnicode_WRITE(kind, data, at + j, <Py_UCS4>ascii[j])
        j += 1
    return at + j


cdef Py_ssize_t _json_str_write(object s, int kind, void* data, Py_ssize_t at) except -1:
    cdef Py_ssize_t i, n = PyUnicode_GET_LENGTH(s)
    cdef int skind = PyUnicode_KIND(s)
    cdef void* sdata = PyUnicode_DATA(s)
    cdef Py_UCS4 ch
    cdef const char* hexdigits = b"0123456789abcdef"
    PyUnicode_WRITE(kind, data, at, 34)
    at += 1
    for i in range(n):
        ch = PyUnicode_READ(skind, sdata, i)
        if ch < 0x20:
            PyUnicode_WRITE(kind, data, at, 92)
            if ch == 8:
                PyUnicode_WRITE(kind, data, at + 1, 98)
            elif ch == 9:
                PyUnicode_WRITE(kind, data, at + 1, 116)
            elif ch == 10:
                PyUnicode_WRITE(kind, data, at + 1, 110)
            elif ch == 12:
                PyUnicode_WRITE(kind, data, at + 1, 102)
            elif ch == 13:
                PyUnicode_WRITE(kind, data, at + 1, 114)
            else:
                _put(kind, data, at + 1, b"u00")  # \u00XX: six characters
                PyUnicode_WRITE(kind, data, at + 4, <Py_UCS4>hexdigits[<unsigned int>ch >> 4])
                PyUnicode_WRITE(kind, data, at + 5, <Py_UCS4>hexdigits[<unsigned int>ch & 15])
                at += 4
            at += 2
        elif ch == 34 or ch == 92:
            PyUnicode_WRITE(kind, data, at, 92)
            PyUnicode_WRITE(kind, data, at + 1, ch)
            at += 2
        else:
            PyUnicode_WRITE(kind, data, at, ch)
            at += 1
    PyUnicode_WRITE(kind, data, at, 34)
    return at + 1


cdef Py_ssize_t _int_write(object value, int kind, void* data, Py_ssize_t at) noexcept:
    # An int _int_len measured (64 bits).
    cdef int overflow = 0
    cdef long long iv = PyLong_AsLongLongAndOverflow(value, &overflow)
    cdef unsigned long long u
    cdef char digits[24]
    cdef int d = 0
    if iv < 0:
        PyUnicode_WRITE(kind, data, at, 45)
        at += 1
        u = <unsigned long long>(-(iv + 1)) + 1
    else:
        u = <unsigned long long>iv
    while True:
        digits[d] = <char>(48 + u % 10)
        d += 1
        u //= 10
        if u == 0:
            break
    while d > 0:
        d -= 1
        PyUnicode_WRITE(kind, data, at, <Py_UCS4>digits[d])
        at += 1
    return at


cdef Py_ssize_t _float_write(double d, int kind, void* data, Py_ssize_t at) except -1:
    cdef char* text
    if isnan(d):
        return _put(kind, data, at, b"NaN")
    if isinf(d) and d > 0:
        return _put(kind, data, at, b"Infinity")
    if isinf(d):
        return _put(kind, data, at, b"-Infinity")
    text = _float_repr(d)
    at = _put(kind, data, at, text)
    PyMem_Free(text)
    return at


cdef Py_ssize_t _json_write(object value, int kind, void* data) except -1:
    # Write a value _json_measure measured (so: of exact types, within the limits) at the start
    # of data; return where it ends.
    cdef _JFrame local[_JSON_LOCAL_FRAMES]
    cdef _JFrame* frames = local
    cdef _JFrame* f
    cdef int depth = 0
    cdef Py_ssize_t at = 0
    cdef PyObject* item = <PyObject*>value
    cdef PyObject* key = NULL
    try:
        while True:
            if PyUnicode_CheckExact_ptr(item):
                at = _json_str_write(<object>item, kind, data, at)
            elif item == <PyObject*>None:
                at = _put(kind, data, at, b"null")
            elif item == <PyObject*>True:
                at = _put(kind, data, at, b"true")
            elif item == <PyObject*>False:
                at = _put(kind, data, at, b"false")
            elif PyLong_CheckExact(<object>item):
                at = _int_write(<object>item, kind, data, at)
            elif PyFloat_CheckExact(<object>item):
                at = _float_write(PyFloat_AS_DOUBLE(<object>item), kind, data, at)
            else:
                PyUnicode_WRITE(kind, data, at, 123 if PyDict_CheckExact(<object>item) else 91)
                at += 1
                if _json_size(item):
                    frames = _jframes(frames, local, depth)
                    f = &frames[depth]
                    f.container = item
                    f.pos = 0
                    f.count = 0
                    f.is_dict = PyDict_CheckExact(<object>item)
                    depth += 1
                else:
                    PyUnicode_WRITE(kind, data, at, 125 if PyDict_CheckExact(<object>item)
                                    else 93)
                    at += 1
            while depth:
                f = &frames[depth - 1]
                if _json_next(f, &item, &key):
                    if f.count:
                        PyUnicode_WRITE(kind, data, at, 44)
                        at += 1
                    f.count += 1
                    if f.is_dict:
                        at = _json_str_write(<object>key, kind, data, at)
                        PyUnicode_WRITE(kind, data, at, 58)
                        at += 1
                    break
                PyUnicode_WRITE(kind, data, at, 125 if f.is_dict else 93)
                at += 1
                depth -= 1
            else:
                break
    finally:
        if frames != local:
            PyMem_Free(frames)
    return at


cdef object _json_fallback(object value):
    # The twin's compact JSON of a value this kernel does not write itself, or None (and _fail).
    try:
        return _json_text(value)
    except _JsonTooDeep:
        _fail(_JSON_TOO_DEEP, "too-deep", "")
    except (TypeError, ValueError, RecursionError) as exc:
        _fail(f"expected JSON-serialisable data ({exc})", "invalid-json", "")
    return None


cdef object _compact_json(object value):
    # The compact JSON text of value, or None (and _fail) when it cannot be written.
    cdef Py_UCS4 top = 127
    cdef int64_t length = _json_measure(value, &top)
    cdef Py_ssize_t end
    if length == TOO_DEEP:
        _fail(_JSON_TOO_DEEP, "too-deep", "")
        return None
    if length == NOT_NATIVE:
        return _json_fallback(value)
    text = PyUnicode_New(length, top)
    end = _json_write(value, PyUnicode_KIND(text), PyUnicode_DATA(text))
    if end != length:
        raise AssertionError(f"compact JSON of {length} chars written as {end}")
    return text


cdef int64_t _compact_json_len(object value) except -1:
    # The compact JSON length of value, or -2 (and _fail) when it cannot be written.
    cdef Py_UCS4 top = 127
    cdef int64_t length = _json_measure(value, &top)
    if length >= 0:
        return length
    if length == TOO_DEEP:
        _fail(_JSON_TOO_DEEP, "too-deep", "")
        return -2
    text = _json_fallback(value)
    return -2 if text is None else len(text)


def compact_json(value):
    """The compact JSON of ``value`` (see the twin)."""
    text = _compact_json(value)
    if text is None:
        raise ContextPlanError(_fail_message, code=_fail_code)
    return text


def compact_json_length(value):
    """``len(compact_json(value))``, counted without writing it where the value allows."""
    cdef int64_t length = _compact_json_len(value)
    if length < 0:
        raise ContextPlanError(_fail_message, code=_fail_code)
    return length
