/* The kernel's records (contextpolicy/_records.py): named tuples, filled here as cheaply as a
   tuple. A named tuple adds no field to the tuple's (the compiled kernel checks this of each
   record class when it is imported), so its instance is a tuple whose type is the class. */
#ifndef CONTEXTPOLICY_RECORDS_H
#define CONTEXTPOLICY_RECORDS_H

#include <Python.h>

/* A new instance of the named tuple `type` holding the n `items` (new references taken). A
   record of atomic values only (`track` false: numbers, strings, None) is left untracked by the
   garbage collector, as the collector leaves such a tuple once it has seen it. */
static PyObject* cp_record(PyObject* type, Py_ssize_t n, PyObject* const* items, int track)
{
#if PY_VERSION_HEX >= 0x030E0000
    /* Tuples cache their hash from Python 3.14 on: the tuple's own constructor sets the cache
       up, from a tuple of the items. */
    (void)track;
    PyObject* values = PyTuple_New(n);
    if (values == NULL)
        return NULL;
    for (Py_ssize_t i = 0; i < n; i++) {
        Py_INCREF(items[i]);
        PyTuple_SET_ITEM(values, i, items[i]);
    }
    PyObject* args = PyTuple_Pack(1, values);
    Py_DECREF(values);
    if (args == NULL)
        return NULL;
    PyObject* record = PyTuple_Type.tp_new((PyTypeObject*)type, args, NULL);
    Py_DECREF(args);
    return record;
#else
    /* What the tuple's own constructor does for a subclass, without the tuple in between. */
    PyTupleObject* record = PyObject_GC_NewVar(PyTupleObject, (PyTypeObject*)type, n);
    if (record == NULL)
        return NULL;
    for (Py_ssize_t i = 0; i < n; i++) {
        Py_INCREF(items[i]);
        record->ob_item[i] = items[i];
    }
    if (track)
        PyObject_GC_Track(record);
    return (PyObject*)record;
#endif
}

#endif
