# cython: language_level=3, boundscheck=False, wraparound=False
"""The floor of any one pass over message dicts: look up ``role``, ``content`` and ``tool_calls``
in every message, in C, and do nothing else. A benchmark calibration, compiled on first use
(pyximport); it is no part of the kernel."""

from cpython.dict cimport PyDict_Check
from cpython.ref cimport PyObject

cdef extern from "Python.h":
    PyObject* PyDict_GetItemWithError(object d, object key) except? NULL
    Py_ssize_t PyList_GET_SIZE(object lst)
    PyObject* PyList_GET_ITEM(object lst, Py_ssize_t i)

cdef object K_ROLE = "role"
cdef object K_CONTENT = "content"
cdef object K_TOOL_CALLS = "tool_calls"


def dict_lookup_floor(list messages):
    """How many of the three keys the messages hold."""
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
