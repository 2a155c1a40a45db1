# The fused reduce of one plan and of one transcript: reduce_plan, fused_result,
# split_transcript, reduce_transcript (the twin: contextpolicy/_fused_py.py). Included by
# _kernel_c.pyx.

# The fragment class last checked, and whether its instances' __dict__ is the plain one.
cdef object _dict_type = None
cdef bint _dict_plain = False


cdef bint _plain_dict(object cls) except -1:
    # Whether instances of cls (a class) have the __dict__ every class gets: then reading it
    # needs no attribute lookup, only PyObject_GenericGetDict.
    global _dict_type, _dict_plain
    if cls is _dict_type:
        return _dict_plain
    if not PyType_Check(cls):
        return False
    # The __dict__ attribute as lookup finds it (read from the types themselves: no Python
    # code runs).
    cdef PyObject* mro = CP_TYPE_MRO(cls)
    cdef PyObject* own
    cdef Py_ssize_t i
    found = None
    for i in range(0 if mro == NULL else PyTuple_GET_SIZE(<tuple>mro)):
        own = CP_TYPE_DICT((<tuple>mro)[i])
        if own != NULL and PyDict_CheckExact(<object>own) and "__dict__" in <dict>own:
            found = (<dict>own)["__dict__"]
            break
    _dict_type = cls
    _dict_plain = ((<PyTypeObject*>cls).tp_dictoffset != 0
                   and type(found) is _GETSET_DESCRIPTOR and found.__name__ == "__dict__")
    return _dict_plain


cdef inline dict _fields_of(object f, bint plain):
    # f.__dict__ (read as the attribute when its class has a __dict__ of its own making).
    if plain:
        return <dict>PyObject_GenericGetDict(f, NULL)
    return f.__dict__


def reduce_plan(fragments, tuple steps, int64_t trigger_chars, int64_t watermark_chars,
                fragment_type=None, protected_kinds=None):
    """The default validate, or a reduce of trims by chars, of a whole plan (see the twin).
    With ``fragment_type``, ``None`` when a fragment is not exactly of that type; with
    ``protected_kinds``, ``None`` when a step's fragment is missing, protected or text."""
    return _reduce_plan(fragments, steps, trigger_chars, watermark_chars, fragment_type,
                        protected_kinds)


cdef object _reduce_plan(object fragments, tuple steps, int64_t trigger_chars,
                         int64_t watermark_chars, object fragment_type, object protected_kinds):
    if not PyList_Check(fragments):
        raise TypeError(f"expected a list of fragments, got {type(fragments).__name__}")
    cdef Py_ssize_t i, n = PyList_GET_SIZE(fragments)
    cdef list ids = [], lists = []
    cdef list texts = None  # made at the first text fragment: (assembled role, text) there
    cdef object f, fid, messages, text
    cdef dict d
    cdef bint plain = False
    if fragment_type is not None:
        for i in range(n):
            if type(<object>PyList_GET_ITEM(fragments, i)) is not fragment_type:
                return None
        plain = _plain_dict(fragment_type)
    for i in range(n):
        if i >= PyList_GET_SIZE(fragments):
            raise ValueError("the fragment list changed while it was read")
        f = <object>PyList_GET_ITEM(fragments, i)
        if fragment_type is not None:
            d = _fields_of(f, plain)
            fid, messages, text = d["id"], d["messages"], d["text"]
        else:
            fid, messages, text = f.id, f.messages, f.text
        ids.append(fid)
        lists.append(messages)
        if messages is None:
            if texts is None:
                texts = [None] * n
            texts[i] = (f.assembled_role, text)
    if protected_kinds is not None:
        for step in steps:
            fid = step[0]
            if fid not in ids:
                if fid == "history":  # left out of a transcript: the step is skipped
                    continue
                return None
            i = ids.index(fid)
            f = <object>PyList_GET_ITEM(fragments, i) if i < PyList_GET_SIZE(fragments) else None
            if f is None or lists[i] is None:
                return None
            if fragment_type is not None:
                d = _fields_of(f, plain)
                if d["kind"] in protected_kinds or d["protected"] is True:
                    return None
            elif f.kind in protected_kinds or f.protected is True:
                return None
    return _reduce(ids, lists, texts, steps, trigger_chars, watermark_chars)


# fused_result's instances: the class last given, and where its slots are (_result_fast:
# each is known; otherwise they are set by name).
cdef object _result_type = None
cdef bint _result_fast = False
cdef Py_ssize_t _result_at[5]
cdef tuple _NO_ARGS = ()
_RESULT_SLOTS = ("_input", "_make", "_plan", "_records", "_report")


cdef bint _slots_known(object cls) except -1:
    # Whether each slot of _RESULT_SLOTS is a writable object slot of cls's own (a member
    # descriptor of cls, in its __dict__), which is what setattr would set; _result_at holds
    # their offsets then.
    global _result_type, _result_fast
    if cls is _result_type:
        return _result_fast
    cdef PyMemberDef* member
    cdef Py_ssize_t i
    own = CP_TYPE_DICT(cls)
    _result_type, _result_fast = cls, False
    for i in range(5):
        descr = None if own == NULL else (<dict>own).get(_RESULT_SLOTS[i])
        if type(descr) is not _MEMBER_DESCRIPTOR or CP_DESCR_TYPE(descr) != <PyObject*>cls:
            return False
        member = (<PyMemberDescrObject*><PyObject*>descr).d_member
        if member.type != CP_T_OBJECT_EX or member.flags & CP_READONLY:
            return False
        _result_at[i] = member.offset
    _result_fast = True
    return True


cdef inline void _put_slot(object result, Py_ssize_t i, object value) noexcept:
    # What the slot's descriptor does: result is new, so the slot is empty.
    cdef PyObject** field = <PyObject**>(<char*><PyObject*>result + _result_at[i])
    cdef PyObject* old = field[0]
    Py_INCREF(<PyObject*>value)
    field[0] = <PyObject*>value
    Py_XDECREF(old)


def fused_result(result_type, make, plan, prepared, fragments, tuple steps,
                 int64_t trigger_chars, int64_t watermark_chars, fragment_type=None,
                 protected_kinds=None):
    """:func:`reduce_plan` as a result whose records are made when first read (see the
    twin): ``None`` when it declines."""
    raw = _reduce_plan(fragments, steps, trigger_chars, watermark_chars, fragment_type,
                       protected_kinds)
    if raw is None:
        return None
    if not PyType_Check(result_type) or (<PyTypeObject*>result_type).tp_new == NULL:
        raise TypeError(f"expected a class, got {type(result_type).__name__}")
    # result_type.__new__(result_type), without the wrapper's argument tuples.
    result = (<PyTypeObject*>result_type).tp_new(<type>result_type, <PyObject*>_NO_ARGS, NULL)
    lazy = (make, plan, prepared, raw)
    if type(result) is result_type and _slots_known(result_type):
        _put_slot(result, 0, (<tuple>raw)[_RECORD_INPUT])
        _put_slot(result, 1, lazy)
        _put_slot(result, 2, None)
        _put_slot(result, 3, None)
        _put_slot(result, 4, None)
    else:
        result._input = (<tuple>raw)[_RECORD_INPUT]
        result._make = lazy
        result._plan = result._records = result._report = None
    return result


cdef int _role_at(object messages, Py_ssize_t i) except -2:
    # The role code of message i for the split, -1 for a Responses item that is no message.
    cdef object m = <object>PyList_GET_ITEM(messages, i)
    cdef PyObject* slots[CP_KEY_COUNT]
    if not PyDict_Check(m):
        raise ContextPlanError.for_message(
            i, f"expected a message object (dict), got {_type_name(m)}")
    _scan(m, slots)
    if _item_kind(slots) != CP_ITEM_MESSAGE:
        return -1
    if slots[CP_KEY_ROLE] == NULL or not PyUnicode_Check(<object>slots[CP_KEY_ROLE]):
        raise ContextPlanError.for_message(
            i, "expected a string role", field="role", code="invalid-role")
    return _role_code(<object>slots[CP_KEY_ROLE])


cdef bint _carries_tool_results(object message):
    cdef PyObject* slots[CP_KEY_COUNT]
    _scan(message, slots)
    if slots[CP_KEY_CONTENT] == NULL:
        return False
    return len(_typed_parts(<object>slots[CP_KEY_CONTENT], CP_PART_TOOL_RESULT)) > 0


def split_transcript(messages):
    """Where ``ContextPlan.from_messages`` splits a transcript (see the twin)."""
    if not PyList_Check(messages):
        raise ContextPlanError(
            f"expected a list of messages, got {type(messages).__name__}",
            path="messages", code="invalid-messages",
        )
    cdef Py_ssize_t head = 0, tail, n = PyList_GET_SIZE(messages)
    cdef int code
    while head < PyList_GET_SIZE(messages):
        code = _role_at(messages, head)
        if code != CP_ROLE_SYSTEM and code != CP_ROLE_DEVELOPER:
            break
        head += 1
    n = PyList_GET_SIZE(messages)
    tail = n
    if tail > head and _role_at(messages, tail - 1) == R_USER and not (
        _carries_tool_results(<object>PyList_GET_ITEM(messages, tail - 1))
    ):
        tail -= 1
    return head, tail


def reduce_transcript(messages, tuple steps, int64_t trigger_chars, int64_t watermark_chars):
    """:func:`reduce_plan` of ``ContextPlan.from_messages(messages)`` (see the twin)."""
    head, tail = split_transcript(messages)
    cdef Py_ssize_t n = PyList_GET_SIZE(messages)
    cdef list ids = [], lists = []
    if head:
        ids.append("system")
        lists.append(messages[:head] if PyList_CheckExact(messages)
                     else list.__getitem__(messages, slice(None, head)))
    if tail > head:
        ids.append("history")
        lists.append(messages[head:tail] if PyList_CheckExact(messages)
                     else list.__getitem__(messages, slice(head, tail)))
    if tail < n:
        ids.append("question")
        lists.append(messages[tail:] if PyList_CheckExact(messages)
                     else list.__getitem__(messages, slice(tail, None)))
    return _reduce(ids, lists, None, steps, trigger_chars, watermark_chars)


cdef int _fill_flags(object messages, object fragment_id, Py_ssize_t n, uint8_t* flags,
                     _Acc* acc) except -1:
    # _fill for the figures alone: each message's flags into n entries, and the chars and
    # opaque parts of all of them added up in acc. Returns every message's flags or-ed.
    cdef int8_t code = 0
    cdef Py_ssize_t i
    cdef uint8_t seen = 0
    for i in range(n):
        # The list is read again at each message: Python code a message runs may change it.
        if i >= PyList_GET_SIZE(messages):
            raise _changed(fragment_id)
        flags[i] = _message(<object>PyList_GET_ITEM(messages, i), acc, i, fragment_id, &code)
        seen |= flags[i]
    if PyList_GET_SIZE(messages) != n:
        raise _changed(fragment_id)
    return seen


cdef enum:
    # Flags of a fragment this short are kept on the stack while it is measured.
    SMALL_FRAGMENT = 256


cdef int64_t _text_length(list ids, list texts, Py_ssize_t i) except -1:
    # The chars of text fragment i: its text's code points.
    text = texts[i][1]
    if not PyUnicode_Check(text):
        raise TypeError(f"fragment {ids[i]!r}: expected a str text")
    return PyUnicode_GET_LENGTH(text)


cdef object _plain(list ids, list lists, list texts, int64_t trigger_chars,
                   int64_t watermark_chars):
    # _reduce without steps (validate): nothing changes, so the figures before are the figures
    # after (one list, one set of totals) and no Measure is made; a fragment with tool traffic
    # or an unknown role keeps its flags (as bytes) for the warnings, the others nothing.
    cdef Py_ssize_t i, count, n = len(ids)
    cdef list before = [], warnings = [], pairing = [], assembled = []
    cdef list flagged = None
    cdef int64_t chars = 0, messages = 0, opaque = 0, length
    cdef uint8_t small[SMALL_FRAGMENT]
    cdef uint8_t* flags
    cdef int seen
    cdef _Acc acc
    cdef object held, fid, kept_flags, role
    for i in range(n):
        held = lists[i]
        if held is None:
            length = _text_length(ids, texts, i)
            before.append(_figures(length, 1, 0))
            chars += length
            messages += 1
            continue
        fid = ids[i]
        _check_list(held, fid)
        count = PyList_GET_SIZE(held)
        acc.chars = acc.opaque = 0
        acc.pieces = NULL
        if count:
            if count <= SMALL_FRAGMENT:
                flags = &small[0]
            else:
                flags = <uint8_t*>malloc(count)
                if flags == NULL:
                    raise MemoryError()
            try:
                seen = _fill_flags(held, fid, count, flags, &acc)
                if seen & (F_CALLS | F_RESULT | F_UNKNOWN):
                    if flagged is None:
                        flagged = [None] * n
                    flagged[i] = PyBytes_FromStringAndSize(<char*>flags, count)
            finally:
                if flags != &small[0]:
                    free(flags)
        elif PyList_GET_SIZE(held) != 0:
            raise _changed(fid)
        before.append(_figures(acc.chars, count, acc.opaque))
        chars += acc.chars
        messages += count
        opaque += acc.opaque
    for i in range(n):
        held = lists[i]
        if held is None:
            role, text = texts[i]
            assembled.append({"role": role, "content": text})
            continue
        if flagged is not None:
            kept_flags = flagged[i]
            if kept_flags is not None:
                for index, role, count in _unknown_roles(
                        held, <const uint8_t*>PyBytes_AS_STRING(kept_flags), 0,
                        PyBytes_GET_SIZE(kept_flags), ids[i]):
                    warnings.append(_warning(i, index, "unknown-role", (role, count)))
                for index, code, cid in _pairing(
                        held, <const uint8_t*>PyBytes_AS_STRING(kept_flags), 0,
                        PyBytes_GET_SIZE(kept_flags)):
                    pairing.append(_warning(i, index, code, cid))
        assembled.extend(held if PyList_CheckExact(held) else list.copy(held))
    # Unknown roles first, then the pairing warnings (as _reduce gives them).
    warnings += pairing
    fired = trigger_chars >= 0 and chars > trigger_chars
    # (one object per figure: the totals after are the totals before)
    return _record(fired, before, before, [None] * n, [], warnings, assembled, ids, chars,
                   messages, opaque, chars, messages, opaque, 0, 0,
                   not (watermark_chars >= 0 and chars > watermark_chars))


cdef int _trim_step(object step, list ids, list lists, list measures, list kept, list done,
                    bint fired, int64_t watermark_chars, int64_t* totals) except -1:
    # One trim of _reduce: its record appended to done; a fragment it cut has its new list
    # (in lists and kept) and measure; totals (the plan's chars, the messages and groups trims
    # removed) follow.
    cdef object fid
    cdef int grouping
    cdef int64_t keep_groups, target
    cdef Py_ssize_t i, first = 0, cut = 0, ngroups = 0
    cdef Measure m, tail
    fid, grouping, keep_groups, target = step
    if keep_groups < 0:
        raise ValueError("keep_groups must be >= 0")
    if target < 0:
        raise ValueError("target_chars must be >= 0")
    if not fired or not (watermark_chars >= 0 and totals[0] > watermark_chars):
        done.append(_skipped("not-triggered" if not fired else "target-reached"))
        return 0
    if fid not in ids:
        if fid != "history":
            raise ValueError(f"a step names fragment {fid!r}, which the plan does not hold")
        done.append(_skipped("fragment-absent"))
        return 0
    i = ids.index(fid)
    messages = lists[i]
    if measures[i] is None or not PyList_Check(messages):
        raise TypeError(f"expected a list of messages, got {type(messages).__name__}")
    m = <Measure>measures[i]
    if m.messages == 0:
        done.append(_skipped("fragment-empty"))
        return 0
    m._cut_into(messages, grouping, keep_groups, target, &first, &cut, &ngroups)
    if cut == 0:
        done.append(_step("unchanged", "within-target" if m.chars <= target
                          else "keep-groups-floor", m.chars, m.chars, ngroups, ngroups, 0))
        return 0
    tail = m._tail(cut, m.messages)
    messages = messages[cut:] if PyList_CheckExact(messages) else list.__getitem__(
        messages, slice(cut, None))
    lists[i] = messages
    kept[i] = messages
    measures[i] = tail
    done.append(_step("applied", "trimmed" if tail.chars <= target else "keep-groups-floor",
                      m.chars, tail.chars, ngroups, ngroups - first, cut))
    totals[0] += tail.chars - m.chars
    totals[1] += cut
    totals[2] += first
    return 0


cdef object _reduce(list ids, list lists, list texts, tuple steps, int64_t trigger_chars,
                    int64_t watermark_chars):
    if steps is not None and PyTuple_GET_SIZE(steps) == 0:
        return _plain(ids, lists, texts, trigger_chars, watermark_chars)
    cdef Py_ssize_t i, n = len(ids)
    cdef list measures = []
    cdef list before = [], after, kept, done = [], warnings = [], pairing = [], assembled = []
    cdef Measure m, tail
    cdef int64_t chars = 0, length
    # The plan's totals before; the chars of its text fragments (which no step changes); what
    # the applied trims removed.
    cdef int64_t b_messages = 0, b_opaque = 0, text_chars = 0, removed, groups_removed
    cdef bint fired
    cdef object messages, text, step
    for i in range(n):
        messages = lists[i]
        if messages is None:
            length = _text_length(ids, texts, i)
            measures.append(None)
            before.append(_figures(length, 1, 0))
            chars += length
            text_chars += length
            b_messages += 1
        else:
            m = _measure(messages, ids[i])
            measures.append(m)
            before.append(_figures(m.chars, m.messages, m.opaque_parts))
            chars += m.chars
            b_messages += m.messages
            b_opaque += m.opaque_parts
    cdef int64_t b_chars = chars
    fired = trigger_chars >= 0 and chars > trigger_chars
    kept = [None] * n
    cdef int64_t totals[3]  # the plan's chars now, the messages and groups trims removed
    totals[0], totals[1], totals[2] = chars, 0, 0
    for step in steps:
        _trim_step(step, ids, lists, measures, kept, done, fired, watermark_chars, totals)
    chars, removed, groups_removed = totals[0], totals[1], totals[2]
    after = before if not steps else []
    cdef int64_t a_chars = text_chars, a_messages = 0, a_opaque = 0
    for i in range(n):
        if measures[i] is None:
            if steps:
                after.append(before[i])
            a_messages += 1
            role, text = texts[i]
            assembled.append({"role": role, "content": text})
            continue
        m = <Measure>measures[i]
        a_chars += m.chars
        a_messages += m.messages
        a_opaque += m.opaque_parts
        if steps:
            after.append(_figures(m.chars, m.messages, m.opaque_parts))
        messages = lists[i]
        if m.unknown_role:
            for index, role, count in _unknown_roles(messages, m._flags, 0, m.messages, ids[i]):
                warnings.append(_warning(i, index, "unknown-role", (role, count)))
        if m.tool_traffic:
            for index, code, cid in _pairing(messages, m._flags, 0, m.messages):
                pairing.append(_warning(i, index, code, cid))
        assembled.extend(messages if PyList_CheckExact(messages) else list.copy(messages))
    # Unknown roles first, then the pairing warnings.
    warnings += pairing
    return _record(fired, before, after, kept, done, warnings, assembled, ids, b_chars,
                   b_messages, b_opaque, a_chars, a_messages, a_opaque, removed, groups_removed,
                   not (watermark_chars >= 0 and a_chars > watermark_chars))
