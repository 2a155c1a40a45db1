# The kernel's records, made in C (records.h) as the classes of contextpolicy/_records.py,
# which the twin calls. Included by _kernel_c.pyx.

from contextpolicy._records import (
    RECORDS,
    FragmentFigures,
    FusedRecord,
    KernelWarning,
    RowsRecord,
    RowWarnings,
    StepRecord,
)

cdef extern from "records.h":
    object cp_record(object type, Py_ssize_t n, PyObject** items, bint track)


def _check_records():
    # records.h fills a record as a tuple: each class must be a tuple with nothing of its own.
    for cls in RECORDS:
        if not (issubclass(cls, tuple) and cls.__basicsize__ == tuple.__basicsize__
                and cls.__itemsize__ == tuple.__itemsize__ and cls.__dictoffset__ == 0
                and cls.__weakrefoffset__ == 0):
            raise ImportError(f"{cls.__name__} is not a plain named tuple")


_check_records()

# Where a FusedRecord holds the assembled input.
cdef Py_ssize_t _RECORD_INPUT = FusedRecord._fields.index("input")


cdef inline object _figures(object chars, object messages, object opaque_parts):
    cdef PyObject* items[3]
    items[0], items[1], items[2] = <PyObject*>chars, <PyObject*>messages, <PyObject*>opaque_parts
    return cp_record(FragmentFigures, 3, items, False)


cdef inline object _warning(object fragment, object index, object code, object detail):
    cdef PyObject* items[4]
    items[0], items[1] = <PyObject*>fragment, <PyObject*>index
    items[2], items[3] = <PyObject*>code, <PyObject*>detail
    return cp_record(KernelWarning, 4, items, True)


cdef inline object _step(object status, object reason, object chars_before, object chars_after,
                         object groups_before, object groups_after, object messages_removed):
    cdef PyObject* items[7]
    items[0], items[1] = <PyObject*>status, <PyObject*>reason
    items[2], items[3] = <PyObject*>chars_before, <PyObject*>chars_after
    items[4], items[5] = <PyObject*>groups_before, <PyObject*>groups_after
    items[6] = <PyObject*>messages_removed
    return cp_record(StepRecord, 7, items, False)


cdef inline object _skipped(object reason):
    return _step("skipped", reason, None, None, None, None, 0)


cdef inline object _record(object triggered, object before, object after, object kept,
                           object steps, object warnings, object input, object ids,
                           int64_t chars_before, int64_t messages_before, int64_t opaque_before,
                           int64_t chars_after, int64_t messages_after, int64_t opaque_after,
                           int64_t messages_removed, int64_t groups_removed, bint met):
    cdef PyObject* items[17]
    items[0], items[1], items[2] = <PyObject*>triggered, <PyObject*>before, <PyObject*>after
    items[3], items[4], items[5] = <PyObject*>kept, <PyObject*>steps, <PyObject*>warnings
    items[6], items[7] = <PyObject*>input, <PyObject*>ids
    # One object per figure where figures are equal before and after (as the twin gives).
    cdef object b_chars = chars_before, b_messages = messages_before, b_opaque = opaque_before
    cdef object a_chars = b_chars if chars_after == chars_before else chars_after
    cdef object a_messages = b_messages if messages_after == messages_before else messages_after
    cdef object a_opaque = b_opaque if opaque_after == opaque_before else opaque_after
    cdef object removed = messages_removed, groups = groups_removed, reached = met
    items[8], items[9], items[10] = <PyObject*>b_chars, <PyObject*>b_messages, <PyObject*>b_opaque
    items[11], items[12], items[13] = (<PyObject*>a_chars, <PyObject*>a_messages,
                                       <PyObject*>a_opaque)
    items[14], items[15], items[16] = <PyObject*>removed, <PyObject*>groups, <PyObject*>reached
    return cp_record(FusedRecord, 17, items, True)
