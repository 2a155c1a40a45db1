# Groups, trim cuts, tool pairing and unknown roles of measured messages (the twin:
# contextpolicy/_pairing_py.py). Included by _kernel_c.pyx.

def group_offsets(flags_in, chars_in, int grouping=GROUP_USER_TURN):
    """Group messages; return (offsets, chars per group), ``len(offsets) == groups + 1``."""
    # Flags are read twice (count, then fill without the GIL): a copy no other thread changes.
    cdef const uint8_t[::1] flags = np.array(np.ascontiguousarray(flags_in, dtype=np.uint8),
                                             copy=True)
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
        if _opens(&flags[0], i, 0, mask, invert):
            ngroups += 1
    offsets_a = np.empty(ngroups + 1, dtype=np.int64)
    group_chars_a = np.zeros(ngroups, dtype=np.int64)
    cdef int64_t[::1] offsets = offsets_a
    cdef int64_t[::1] group_chars = group_chars_a
    g = -1
    with nogil:
        for i in range(n):
            if _opens(&flags[0], i, 0, mask, invert):
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


cdef inline bint _any_negative(const int64_t* values, Py_ssize_t lo,
                               Py_ssize_t hi) noexcept nogil:
    cdef Py_ssize_t i
    for i in range(lo, hi):
        if values[i] < 0:
            return True
    return False


cdef inline bint _sum_overflows(const int64_t* values, Py_ssize_t lo,
                                Py_ssize_t hi) noexcept nogil:
    # Whether values[lo:hi] (each >= 0) add up to more than 64 bits hold.
    cdef int64_t total = 0
    cdef Py_ssize_t i
    for i in range(lo, hi):
        if values[i] > INT64_MAX - total:
            return True
        total += values[i]
    return False


def trim_cut(group_chars_in, int64_t keep_groups, int64_t target_chars):
    """First group kept by a trim (see the twin)."""
    if keep_groups < 0 or target_chars < 0:
        raise ValueError("keep_groups and target_chars must be >= 0")
    cdef const int64_t[::1] group_chars = np.ascontiguousarray(group_chars_in, dtype=np.int64)
    cdef Py_ssize_t n = group_chars.shape[0]
    if n == 0:
        return 0
    # A sum that wrapped (or chars below zero) would cut in the wrong place.
    if _any_negative(&group_chars[0], 0, n):
        raise ValueError("group_chars must be >= 0")
    if _sum_overflows(&group_chars[0], 0, n):
        raise ValueError("group_chars add up to more than 64 bits hold")
    return _cut(&group_chars[0], n, keep_groups, target_chars)


# Pairing reads messages the way measuring does (keys by their text, ids as exact str, lists
# index by index), and trusts nothing the flags say about them: a message may have changed since
# it was measured.

cdef inline object _str_slot(PyObject** slots, int key):
    # The exact str under a key the last _scan found, or None.
    cdef PyObject* v = slots[key]
    if v == NULL or not PyUnicode_Check(<object>v):
        return None
    return _exact(<object>v)


cdef list _typed_parts(object content, int wanted):
    # The (type-matching) part dicts of a content list.
    cdef list found = []
    cdef Py_ssize_t j = 0
    cdef PyObject* slots[CP_KEY_COUNT]
    cdef object part
    if not PyList_Check(content):
        return found
    while j < PyList_GET_SIZE(content):
        part = <object>PyList_GET_ITEM(content, j)
        j += 1
        if not PyDict_Check(part):
            continue
        _scan(part, slots)
        if slots[CP_KEY_TYPE] != NULL and _part_type(<object>slots[CP_KEY_TYPE]) == wanted:
            found.append(part)
    return found


cdef list _call_ids(object message):
    # Ids of the tool calls a message makes: tool_calls[].id and tool_use blocks (see _tool_ids).
    cdef list ids = []
    cdef Py_ssize_t j = 0
    cdef PyObject* slots[CP_KEY_COUNT]
    cdef object calls, content, call, cid
    _scan(message, slots)
    cdef int item = _item_kind(slots)
    if item != CP_ITEM_MESSAGE:
        cid = _str_slot(slots, CP_KEY_CALL_ID) if item == CP_ITEM_CALL else None
        return [cid] if cid is not None else ids
    calls = None if slots[CP_KEY_TOOL_CALLS] == NULL else <object>slots[CP_KEY_TOOL_CALLS]
    content = None if slots[CP_KEY_CONTENT] == NULL else <object>slots[CP_KEY_CONTENT]
    if calls is not None and PyList_Check(calls):
        while j < PyList_GET_SIZE(calls):
            call = <object>PyList_GET_ITEM(calls, j)
            j += 1
            if PyDict_Check(call):
                _scan(call, slots)
                cid = _str_slot(slots, CP_KEY_ID)
                if cid is not None:
                    ids.append(cid)
    if content is not None:
        for part in _typed_parts(content, CP_PART_TOOL_USE):
            _scan(part, slots)
            cid = _str_slot(slots, CP_KEY_ID)
            if cid is not None:
                ids.append(cid)
    return ids


cdef list _result_ids(object message):
    # Ids a message answers: a tool message's tool_call_id and tool_result blocks' tool_use_id.
    cdef list ids = []
    cdef PyObject* slots[CP_KEY_COUNT]
    cdef object role, content
    _scan(message, slots)
    cdef int item = _item_kind(slots)
    if item != CP_ITEM_MESSAGE:
        return [_str_slot(slots, CP_KEY_CALL_ID)] if item == CP_ITEM_OUTPUT else ids
    role = None if slots[CP_KEY_ROLE] == NULL else <object>slots[CP_KEY_ROLE]
    content = None if slots[CP_KEY_CONTENT] == NULL else <object>slots[CP_KEY_CONTENT]
    if role is not None and PyUnicode_Check(role) and _role_code(role) == R_TOOL:
        ids.append(_str_slot(slots, CP_KEY_TOOL_CALL_ID))
    if content is not None:
        for part in _typed_parts(content, CP_PART_TOOL_RESULT):
            _scan(part, slots)
            ids.append(_str_slot(slots, CP_KEY_TOOL_USE_ID))
    return ids


cdef list _pairing(object messages, const uint8_t* flags, Py_ssize_t start, Py_ssize_t n):
    # Pairing of messages[start:start + n] with their flags; indices relative to start.
    cdef Py_ssize_t i
    cdef uint8_t f
    cdef dict pending = {}
    cdef set called = set()
    cdef list found = []
    cdef object message, cid
    if start + n > PyList_GET_SIZE(messages):
        raise ValueError(
            f"flags and messages differ in length ({start + n} != {PyList_GET_SIZE(messages)})"
        )
    for i in range(n):
        f = flags[i]
        if not (f & (F_CALLS | F_RESULT)):
            continue
        if start + i >= PyList_GET_SIZE(messages):
            raise ValueError("the message list changed while its pairing was checked")
        message = <object>PyList_GET_ITEM(messages, start + i)
        if not PyDict_Check(message):
            raise TypeError(f"message {i} is not a dict: flags do not belong to these messages")
        if f & F_RESULT:
            for cid in _result_ids(message):
                if cid is not None and cid in pending:
                    del pending[cid]
                elif cid is None or cid not in called:
                    found.append((i, "orphan-tool-result", cid))
        if f & F_CALLS:
            for cid in _call_ids(message):
                called.add(cid)
                if cid not in pending:
                    pending[cid] = i
    for cid, i in pending.items():
        found.append((i, "unanswered-tool-call", cid))
    found.sort(key=_first)
    return found


cdef list _unknown_roles(object messages, const uint8_t* flags, Py_ssize_t start,
                         Py_ssize_t n, object fragment_id):
    # (first index, role, messages) of each role the accounting does not know among
    # messages[start:start + n] (by their flags), in the order of first appearance; indices
    # relative to start.
    cdef Py_ssize_t i
    cdef dict found = {}
    cdef list entry
    cdef PyObject* slots[CP_KEY_COUNT]
    cdef object message, role
    if start + n > PyList_GET_SIZE(messages):
        raise ValueError(
            f"flags and messages differ in length ({start + n} != {PyList_GET_SIZE(messages)})"
        )
    for i in range(n):
        if not (flags[i] & F_UNKNOWN):
            continue
        if start + i >= PyList_GET_SIZE(messages):
            raise ValueError("the message list changed while its roles were read")
        message = <object>PyList_GET_ITEM(messages, start + i)
        role = None
        if PyDict_Check(message):
            _scan(message, slots)
            if slots[CP_KEY_ROLE] != NULL and PyUnicode_Check_ptr(slots[CP_KEY_ROLE]):
                role = _exact(<object>slots[CP_KEY_ROLE])
        if role is None:
            # A flagged message that no longer holds a string role changed after it was measured.
            raise ContextPlanError.for_message(
                i, "the message changed while it was measured (it no longer holds a string "
                "role)", fragment_id=fragment_id, field="role", code="changed-while-measured")
        entry = found.get(role)
        if entry is None:
            found[role] = [i, 1]
        else:
            entry[1] += 1
    return [(entry[0], role, entry[1]) for role, entry in found.items()]


def tool_pairing(messages, flags_in):
    """Tool results without an earlier call and calls without a later result (see the twin)."""
    if not PyList_Check(messages):
        raise TypeError(f"expected a list of messages, got {type(messages).__name__}")
    cdef const uint8_t[::1] flags = np.ascontiguousarray(flags_in, dtype=np.uint8)
    cdef Py_ssize_t n = flags.shape[0]
    if n == 0:
        return []
    return _pairing(messages, &flags[0], 0, n)


def _first(item):
    return item[0]
