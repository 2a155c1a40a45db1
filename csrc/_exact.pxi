# Exact sameness of a value and a snapshot of it (the twin: contextpolicy/_exact_py.py).
# Included by _kernel_c.pyx.
#
# A memo keyed by content must never answer for content that merely compares equal: 1, True and
# 1.0 are equal, a str subclass can say it equals anything, and dicts compare without their key
# order, yet each is different input to a model. The walk reads exact types only (a subclass,
# an object or anything else is not the same unless it is the very object), so no code of the
# value's runs and the value cannot change while it is read.

cdef enum:
    EXACT_DEPTH = 300  # deeper than any snapshot (_snapshots: 256); deeper is "not the same"


cdef bint _exactly(object copy, object value, int depth) except -1:
    cdef Py_ssize_t i, n, at_copy = 0, at_value = 0
    cdef PyObject* key_c
    cdef PyObject* item_c
    cdef PyObject* key_v
    cdef PyObject* item_v
    cdef double a, b
    if copy is value:
        return True
    kind = type(copy)
    if type(value) is not kind or depth > EXACT_DEPTH:
        return False
    if kind is str or kind is int or kind is bytes:
        # exact built-in types: their comparison is C code of the interpreter's own
        return copy == value
    if kind is float:
        a, b = PyFloat_AS_DOUBLE(copy), PyFloat_AS_DOUBLE(value)
        return memcmp(&a, &b, sizeof(double)) == 0  # -0.0 is not 0.0; a NaN is its bits
    if kind is list or kind is tuple:
        n = len(copy)
        if len(value) != n:
            return False
        for i in range(n):
            if not _exactly(copy[i], value[i], depth + 1):
                return False
        return True
    if kind is dict:
        if PyDict_Size(copy) != PyDict_Size(value):
            return False
        while PyDict_Next(copy, &at_copy, &key_c, &item_c):
            if not PyDict_Next(value, &at_value, &key_v, &item_v):
                return False
            if not _exactly(<object>key_c, <object>key_v, depth + 1):
                return False
            if not _exactly(<object>item_c, <object>item_v, depth + 1):
                return False
        return True
    return False  # bool and None are singletons; any other type is never the same


def exact_same(copy, value):
    """``value`` is ``copy`` exactly: the same built-in types (dict, list, tuple, str, int,
    float, bool, None, bytes; no subclass), values, dict key order and float bits, or the very
    same object. Anything else, or nesting deeper than 300, is not the same."""
    return _exactly(copy, value, 0)
