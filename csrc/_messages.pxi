# Measuring message objects: measure_messages, Measure, text pieces (the twin:
# contextpolicy/_messages_py.py). Included by _kernel_c.pyx.

# What one measuring pass adds up: a C struct on the caller's stack, so that measuring
# allocates nothing of its own. pieces: a list the caller holds (the text pieces, for
# text_pieces), or NULL.
cdef struct _Acc:
    int64_t chars
    int64_t opaque
    PyObject* pieces


cdef inline int _add(_Acc* acc, object text) except -1:
    acc.chars += PyUnicode_GET_LENGTH(text)
    if acc.pieces != NULL:
        (<list>acc.pieces).append(_exact(text))
    return 0


cdef int _add_json(_Acc* acc, object value) except -2:
    text = _compact_json(value)
    if text is None:
        return -1
    _add(acc, text)
    return 0


cdef int _json_into(_Acc* acc, object value) except -2:
    # Count the compact JSON of value; -1 (and _fail) when it cannot be encoded.
    cdef int64_t length
    if acc.pieces != NULL:
        return _add_json(acc, value)
    length = _compact_json_len(value)
    if length < 0:
        return -1
    acc.chars += length
    return 0


cdef uint8_t _parts(object parts, _Acc* acc, int depth) except? 255:
    # Returns the flags the parts imply, or 255 (and _fail) when a part is invalid. The list is
    # read index by index, its length read again each time (a part's JSON may run Python code
    # that changes it), and every value is held as a reference of this function's own.
    cdef Py_ssize_t j = 0, n = PyList_GET_SIZE(parts)
    cdef uint8_t flags = 0
    cdef PyObject* slots[CP_KEY_COUNT]
    cdef int ptype
    cdef object part, text, inner, name, inp
    while j < n:
        if PyList_GET_SIZE(parts) != n:
            return _list_changed()
        part = <object>PyList_GET_ITEM(parts, j)
        j += 1
        if PyUnicode_Check(part):
            _add(acc, part)
            continue
        if not PyDict_Check(part):
            _fail(f"expected a content part object or string, got {_type_name(part)}",
                  "invalid-content", "")
            _at(f"[{j - 1}]")
            return 255
        _scan(part, slots)
        ptype = CP_PART_OTHER if slots[CP_KEY_TYPE] == NULL else _part_type(
            <object>slots[CP_KEY_TYPE]
        )
        if ptype == CP_PART_TEXT:
            text = None if slots[CP_KEY_TEXT] == NULL else <object>slots[CP_KEY_TEXT]
            if text is None or not PyUnicode_Check(text):
                _fail(f"expected a string text, got {_type_name(text)}", "invalid-content",
                      ".text")
                _at(f"[{j - 1}]")
                return 255
            _add(acc, text)
        elif ptype == CP_PART_TOOL_RESULT:
            flags |= F_RESULT
            inner = None if slots[CP_KEY_CONTENT] == NULL else <object>slots[CP_KEY_CONTENT]
            if depth >= CP_MAX_NESTING:
                _fail(f"tool_result blocks nest deeper than {CP_MAX_NESTING} levels (or a "
                      "content list contains itself)", "too-deep", ".content")
                _at(f"[{j - 1}]")
                return 255
            if inner is not None and _content(inner, acc, depth + 1) < 0:
                _at(".content")
                _at(f"[{j - 1}]")
                return 255
        elif ptype == CP_PART_TOOL_USE:
            name = None if slots[CP_KEY_NAME] == NULL else <object>slots[CP_KEY_NAME]
            inp = None if slots[CP_KEY_INPUT] == NULL else <object>slots[CP_KEY_INPUT]
            if name is not None and PyUnicode_Check(name):
                _add(acc, name)
            if slots[CP_KEY_INPUT] != NULL and _json_into(acc, inp) < 0:
                _at(".input")
                _at(f"[{j - 1}]")
                return 255
            flags |= F_CALLS
        elif ptype == CP_PART_THINKING:
            text = None if slots[CP_KEY_THINKING] == NULL else <object>slots[CP_KEY_THINKING]
            if text is None or not PyUnicode_Check(text):
                _fail(f"expected a string thinking, got {_type_name(text)}", "invalid-content",
                      ".thinking")
                _at(f"[{j - 1}]")
                return 255
            _add(acc, text)
        else:
            acc.opaque += 1
    if PyList_GET_SIZE(parts) != n:
        return _list_changed()
    return flags


cdef int _content(object content, _Acc* acc, int depth) except -2:
    # -1 (and _fail) when the content is invalid; the caller adds the field's name.
    if PyUnicode_Check(content):
        _add(acc, content)
    elif PyList_Check(content):
        if _parts(content, acc, depth) == 255:
            return -1
    elif content is not None:
        _fail(f"expected a string, a list of parts or null, got {_type_name(content)}",
              "invalid-content", "")
        return -1
    return 0


cdef int _tool_calls(object calls, _Acc* acc) except -2:
    cdef Py_ssize_t j = 0, n = PyList_GET_SIZE(calls)
    cdef PyObject* slots[CP_KEY_COUNT]
    cdef object call, fn, name, args
    while j < n:
        if PyList_GET_SIZE(calls) != n:
            _list_changed()
            return -1
        call = <object>PyList_GET_ITEM(calls, j)
        j += 1
        if not PyDict_Check(call):
            _fail(f"expected a tool call object, got {_type_name(call)}", "invalid-tool-calls",
                  "")
            _at(f"[{j - 1}]")
            return -1
        _scan(call, slots)
        if slots[CP_KEY_FUNCTION] == NULL or <object>slots[CP_KEY_FUNCTION] is None:
            continue
        fn = <object>slots[CP_KEY_FUNCTION]
        if not PyDict_Check(fn):
            _fail(f"expected a function object, got {_type_name(fn)}", "invalid-tool-calls",
                  ".function")
            _at(f"[{j - 1}]")
            return -1
        _scan(fn, slots)
        name = None if slots[CP_KEY_NAME] == NULL else <object>slots[CP_KEY_NAME]
        args = None if slots[CP_KEY_ARGUMENTS] == NULL else <object>slots[CP_KEY_ARGUMENTS]
        if name is not None and PyUnicode_Check(name):
            _add(acc, name)
        if args is not None:
            if PyUnicode_Check(args):
                _add(acc, args)
            elif _json_into(acc, args) < 0:
                _at(".function.arguments")
                _at(f"[{j - 1}]")
                return -1
    if PyList_GET_SIZE(calls) != n:
        _list_changed()
        return -1
    return 0


cdef inline object _slot(PyObject** slots, int key):
    # The value under a key the last _scan found (a reference of our own), or None.
    return None if slots[key] == NULL else <object>slots[key]


cdef uint8_t _item(int item, PyObject** slots, _Acc* acc, Py_ssize_t index,
                   object fid) except? 255:
    # One Responses item that is not a chat message (see the twin's _item): its flags.
    cdef object value, output, summary, content, encrypted
    cdef bint counted = False
    cdef uint8_t flags
    cdef int key
    if item == CP_ITEM_CALL:
        # Every value is taken before the JSON of one of them can run Python code.
        values = (_slot(slots, CP_KEY_NAME), _slot(slots, CP_KEY_ARGUMENTS),
                  _slot(slots, CP_KEY_INPUT))
        for key, value in enumerate(values):
            if value is None:
                continue
            counted = True
            if PyUnicode_Check(value):
                _add(acc, value)
            elif key and _json_into(acc, value) < 0:
                _at("arguments" if key == 1 else "input")
                _invalid(index, fid)
        if not counted:
            acc.opaque += 1
        return F_CALLS
    if item == CP_ITEM_OUTPUT:
        output = _slot(slots, CP_KEY_OUTPUT)
        flags = F_RESULT
        if PyUnicode_Check(output):
            _add(acc, output)
        elif PyList_Check(output):
            flags = _parts(output, acc, 0)
            if flags == 255:
                _at("output")
                _invalid(index, fid)
            flags |= F_RESULT
        elif PyDict_Check(output):
            acc.opaque += 1
        elif output is not None:
            _fail("expected a string, a list of parts, an object or null, got "
                  f"{_type_name(output)}", "invalid-content", "output")
            _invalid(index, fid)
        return flags
    if item == CP_ITEM_REASONING:
        summary = _slot(slots, CP_KEY_SUMMARY)
        content = _slot(slots, CP_KEY_CONTENT)
        encrypted = _slot(slots, CP_KEY_ENCRYPTED_CONTENT)
        if PyList_Check(summary):
            if _parts(summary, acc, 0) == 255:
                _at("summary")
                _invalid(index, fid)
        elif summary is not None:
            _fail(f"expected a list of summary parts or null, got {_type_name(summary)}",
                  "invalid-content", "summary")
            _invalid(index, fid)
        if _content(content, acc, 0) < 0:
            _at("content")
            _invalid(index, fid)
        if encrypted is not None:
            acc.opaque += 1
        return F_GLUE
    acc.opaque += 1
    return 0


cdef uint8_t _message(object message, _Acc* acc, Py_ssize_t index, object fid,
                      int8_t* role_out) except? 255:
    cdef PyObject* slots[CP_KEY_COUNT]
    cdef PyObject* role_p
    cdef PyObject* content_p
    cdef object role, content, calls = None
    cdef int8_t code
    cdef uint8_t flags = 0
    if not PyDict_Check(message):
        _fail(f"expected a message object (dict), got {_type_name(message)}",
              "invalid-message", "")
        _invalid(index, fid)
    _scan(message, slots)
    cdef int item = _item_kind(slots)
    if item != CP_ITEM_MESSAGE:
        role_out[0] = 0
        return _item(item, slots, acc, index, fid)
    role_p = slots[CP_KEY_ROLE]
    content_p = slots[CP_KEY_CONTENT]
    if role_p == NULL or not PyUnicode_Check_ptr(role_p):
        role = None if role_p == NULL else <object>role_p
        _fail("expected a string role, got " + (
            "missing" if role is None else f"a {_type_name(role)}"
        ), "invalid-role", "role")
        _invalid(index, fid)
    code = _role_code_ptr(role_p)
    if content_p != NULL and PyUnicode_Check_ptr(content_p) and acc.pieces == NULL:
        # The common message: a string content, counted where it is (no Python code runs
        # until the tool calls, so nothing can take the string away).
        acc.chars += PyUnicode_GET_LENGTH_ptr(content_p)
        if slots[CP_KEY_TOOL_CALLS] != NULL:
            calls = <object>slots[CP_KEY_TOOL_CALLS]
    else:
        # Every value is taken (a reference of our own) before any Python code can run.
        content = None if content_p == NULL else <object>content_p
        if slots[CP_KEY_TOOL_CALLS] != NULL:
            calls = <object>slots[CP_KEY_TOOL_CALLS]
        if PyList_Check(content):
            flags = _parts(content, acc, 0)
            if flags == 255:
                _at("content")
                _invalid(index, fid)
        elif _content(content, acc, 0) < 0:
            _at("content")
            _invalid(index, fid)
    # A user message that carries tool_result blocks belongs to the turn that called the tool.
    if code == R_USER and not (flags & F_RESULT):
        flags |= F_OPENS
    if code == R_TOOL or code == R_FUNCTION:
        flags |= F_RESULT
    if code == 0:
        flags |= F_UNKNOWN
    if calls is not None:
        if not PyList_Check(calls):
            _fail(f"expected a list of tool calls, got {_type_name(calls)}",
                  "invalid-tool-calls", "tool_calls")
            _invalid(index, fid)
        if PyList_GET_SIZE(calls) > 0:
            flags |= F_CALLS
        if _tool_calls(calls, acc) < 0:
            _at("tool_calls")
            _invalid(index, fid)
    role_out[0] = code
    return flags


cdef object _changed(object fragment_id):
    return ContextPlanError(
        "the message list changed while it was measured",
        path=f"fragments[{fragment_id}].messages" if fragment_id is not None else "messages",
        code="changed-while-measured",
    )


cdef int _check_list(object messages, object fragment_id) except -1:
    if not PyList_Check(messages):
        raise ContextPlanError(
            f"expected a list of messages, got {type(messages).__name__}",
            path=f"fragments[{fragment_id}].messages" if fragment_id is not None else "messages",
            code="invalid-messages",
        )
    return 0


cdef int _fill(object messages, object fragment_id, Py_ssize_t n, int8_t* roles,
               int64_t* chars, uint8_t* flags, int32_t* opaque) except -1:
    # The one measuring pass, into arrays of n entries each.
    cdef _Acc acc
    cdef int8_t code = 0
    cdef Py_ssize_t i
    cdef object message
    for i in range(n):
        # The list is read again at each message: Python code a message runs may change it.
        if i >= PyList_GET_SIZE(messages):
            raise _changed(fragment_id)
        message = <object>PyList_GET_ITEM(messages, i)
        acc.chars = 0
        acc.opaque = 0
        acc.pieces = NULL
        flags[i] = _message(message, &acc, i, fragment_id, &code)
        roles[i] = code
        chars[i] = acc.chars
        opaque[i] = acc.opaque
    if PyList_GET_SIZE(messages) != n:
        raise _changed(fragment_id)
    return 0


cdef tuple _new_arrays(Py_ssize_t n):
    # (role codes, chars, flags, opaque parts): n entries each, for the kernel to fill.
    return (np.empty(n, dtype=np.int8), np.empty(n, dtype=np.int64),
            np.empty(n, dtype=np.uint8), np.empty(n, dtype=np.int32))


def measure_messages(messages, fragment_id=None):
    """One pass over ``messages``: (role codes, chars, flags, opaque parts), one entry each."""
    _check_list(messages, fragment_id)
    cdef Py_ssize_t n = PyList_GET_SIZE(messages)
    roles_a, chars_a, flags_a, opaque_a = _new_arrays(n)
    cdef int8_t[::1] roles = roles_a
    cdef int64_t[::1] chars = chars_a
    cdef uint8_t[::1] flags = flags_a
    cdef int32_t[::1] opaque = opaque_a
    if n:
        _fill(messages, fragment_id, n, &roles[0], &chars[0], &flags[0], &opaque[0])
    elif PyList_GET_SIZE(messages) != 0:
        raise _changed(fragment_id)
    return roles_a, chars_a, flags_a, opaque_a


@cython.final
cdef class Measure:
    """A message list measured in one pass (see the twin): totals, and per message its role,
    chars, flags and opaque parts in C arrays, which ``cut``, ``tail``, ``pairing`` and
    ``unknown_roles`` use without numpy; ``arrays()`` copies them into numpy arrays."""

    cdef readonly int64_t chars
    cdef readonly Py_ssize_t messages
    cdef readonly int64_t opaque_parts
    cdef readonly bint tool_traffic
    cdef readonly bint unknown_role
    cdef int64_t* _chars
    cdef int32_t* _opaque
    cdef int8_t* _roles
    cdef uint8_t* _flags

    def __cinit__(self):
        self._chars = NULL

    def __dealloc__(self):
        free(self._chars)

    def __init__(self):
        raise TypeError("Measure objects come from measure()")

    cdef int _alloc(self, Py_ssize_t n) except -1:
        # One block: chars (8-byte aligned), opaque, roles, flags.
        self._chars = <int64_t*>malloc(n * 14 + 1)
        if self._chars == NULL:
            raise MemoryError()
        self._opaque = <int32_t*>(self._chars + n)
        self._roles = <int8_t*>(self._opaque + n)
        self._flags = <uint8_t*>(self._roles + n)
        self.messages = n
        return 0

    cdef void _totals(self) noexcept:
        cdef Py_ssize_t i
        cdef int64_t chars = 0, opaque = 0
        cdef uint8_t any_flags = 0
        for i in range(self.messages):
            chars += self._chars[i]
            opaque += self._opaque[i]
            any_flags |= self._flags[i]
        self.chars = chars
        self.opaque_parts = opaque
        self.tool_traffic = (any_flags & (F_CALLS | F_RESULT)) != 0
        self.unknown_role = (any_flags & F_UNKNOWN) != 0

    def arrays(self):
        """(role codes, chars, flags, opaque parts) as numpy arrays (copies)."""
        cdef Py_ssize_t n = self.messages
        roles_a, chars_a, flags_a, opaque_a = _new_arrays(n)
        cdef int8_t[::1] roles = roles_a
        cdef int64_t[::1] chars = chars_a
        cdef uint8_t[::1] flags = flags_a
        cdef int32_t[::1] opaque = opaque_a
        if n:
            memcpy(&roles[0], self._roles, n)
            memcpy(&chars[0], self._chars, n * 8)
            memcpy(&flags[0], self._flags, n)
            memcpy(&opaque[0], self._opaque, n * 4)
        return roles_a, chars_a, flags_a, opaque_a

    def tail(self, Py_ssize_t start, stop=None):
        """The measure of ``messages[start:stop]`` (``stop``: the end by default)."""
        return self._tail(start, self.messages if stop is None else stop)

    cdef Measure _tail(self, Py_ssize_t start, Py_ssize_t stop):
        if start < 0 or start > self.messages:
            raise ValueError(f"start {start} is outside 0..{self.messages}")
        if stop < start or stop > self.messages:
            raise ValueError(f"stop {stop} is outside {start}..{self.messages}")
        cdef Py_ssize_t n = stop - start
        cdef Measure out = Measure.__new__(Measure)
        out._alloc(n)
        if n:
            memcpy(out._chars, self._chars + start, n * 8)
            memcpy(out._opaque, self._opaque + start, n * 4)
            memcpy(out._roles, self._roles + start, n)
            memcpy(out._flags, self._flags + start, n)
        out._totals()
        return out

    cdef Py_ssize_t _groups(self, int grouping, int64_t* offsets, int64_t* group_chars) except -1:
        # Group starts (and, when given, chars per group); returns the number of groups.
        cdef uint8_t mask
        cdef bint invert
        cdef Py_ssize_t i, g = -1
        if grouping == GROUP_USER_TURN:
            mask, invert = F_OPENS, False
        elif grouping == GROUP_MESSAGE:
            mask, invert = F_RESULT, True
        else:
            raise ValueError(f"unknown grouping code {grouping}")
        for i in range(self.messages):
            if _opens(self._flags, i, 0, mask, invert):
                g += 1
                if offsets != NULL:
                    offsets[g] = i
                    group_chars[g] = 0
            if offsets != NULL:
                group_chars[g] += self._chars[i]
        if offsets != NULL:
            offsets[g + 1] = self.messages
        return g + 1

    def groups(self, int grouping):
        """How many groups the messages form."""
        return self._groups(grouping, NULL, NULL)

    def pairing(self, messages, Py_ssize_t start=0):
        """:func:`tool_pairing` of ``messages[start:]`` with these flags from ``start`` on
        (indices relative to ``start``)."""
        if not PyList_Check(messages):
            raise TypeError(f"expected a list of messages, got {type(messages).__name__}")
        if start < 0 or start > self.messages:
            raise ValueError(f"start {start} is outside 0..{self.messages}")
        return _pairing(messages, self._flags + start, start, self.messages - start)

    def unknown_roles(self, messages, Py_ssize_t start=0, fragment_id=None):
        """Each role of ``messages[start:]`` the accounting does not know: ``(first index,
        role, messages)`` in the order of first appearance (indices relative to ``start``);
        ``fragment_id`` names the list in the error a message changed since measured raises."""
        if not PyList_Check(messages):
            raise TypeError(f"expected a list of messages, got {type(messages).__name__}")
        if start < 0 or start > self.messages:
            raise ValueError(f"start {start} is outside 0..{self.messages}")
        return _unknown_roles(messages, self._flags + start, start, self.messages - start,
                              fragment_id)

    def cut(self, messages, int grouping, int64_t keep_groups, target_chars):
        """Where a trim (``target_chars``) or a compress split (``target_chars=None``: keep the
        newest ``keep_groups`` groups) cuts these messages: ``(first kept group, first kept
        message, groups)``. The cut moves back, keeping more whole groups, until no kept tool
        result has lost its call (see the twin)."""
        if not PyList_Check(messages):
            raise TypeError(f"expected a list of messages, got {type(messages).__name__}")
        if keep_groups < 0:
            raise ValueError("keep_groups must be >= 0")
        cdef int64_t target = -1
        if target_chars is not None:
            target = target_chars
            if target < 0:
                raise ValueError("target_chars must be >= 0")
        cdef Py_ssize_t first = 0, cut = 0, ngroups = 0
        self._cut_into(messages, grouping, keep_groups, target, &first, &cut, &ngroups)
        return first, cut, ngroups

    cdef int _cut_into(self, object messages, int grouping, int64_t keep_groups, int64_t target,
                       Py_ssize_t* first_out, Py_ssize_t* cut_out,
                       Py_ssize_t* groups_out) except -1:
        # target < 0: keep exactly the newest keep_groups groups.
        cdef Py_ssize_t ngroups = self._groups(grouping, NULL, NULL)
        cdef int64_t small[64]
        cdef int64_t* offsets = small
        cdef Py_ssize_t first
        groups_out[0] = ngroups
        if ngroups == 0:
            first_out[0] = cut_out[0] = 0
            return 0
        if self.messages > PyList_GET_SIZE(messages):
            raise ValueError(f"flags and messages differ in length ({self.messages} != "
                             f"{PyList_GET_SIZE(messages)})")
        if 2 * ngroups + 1 > 64:
            offsets = <int64_t*>malloc((2 * ngroups + 1) * 8)
            if offsets == NULL:
                raise MemoryError()
        cdef int64_t* group_chars = offsets + ngroups + 1
        try:
            self._groups(grouping, offsets, group_chars)
            if target >= 0:
                first = _cut(group_chars, ngroups, keep_groups, target)
            else:
                first = ngroups - (keep_groups if keep_groups < ngroups else ngroups)
            first = self._paired(messages, offsets, ngroups, first)
            first_out[0] = first
            cut_out[0] = offsets[first]
        finally:
            if offsets != small:
                free(offsets)
        return 0

    cdef Py_ssize_t _paired(self, object messages, const int64_t* offsets, Py_ssize_t ngroups,
                            Py_ssize_t first) except -1:
        cdef Py_ssize_t cut, i, earliest, lo, hi, mid
        cdef set missing
        cdef list found
        while first > 0:
            cut = offsets[first]
            missing = set()
            for _, code, cid in _pairing(messages, self._flags + cut, cut, self.messages - cut):
                if code == "orphan-tool-result" and cid is not None:
                    missing.add(cid)
            if not missing:
                return first
            earliest = cut
            i = cut - 1
            while i >= 0 and missing:
                if self._flags[i] & F_CALLS:
                    if i >= PyList_GET_SIZE(messages):
                        raise ValueError("the message list changed while its pairing was checked")
                    found = [c for c in _call_ids(<object>PyList_GET_ITEM(messages, i))
                             if c in missing]
                    if found:
                        earliest = i
                        missing.difference_update(found)
                i -= 1
            if earliest == cut:  # results whose calls never were in the plan: nothing to keep
                return first
            # The group holding message `earliest`: the last offset <= earliest.
            lo, hi = 0, ngroups
            while hi - lo > 1:
                mid = (lo + hi) // 2
                if offsets[mid] <= earliest:
                    lo = mid
                else:
                    hi = mid
            first = lo
        return first


def measure(messages, fragment_id=None):
    """Measure ``messages`` in one pass into a :class:`Measure` (see the twin)."""
    return _measure(messages, fragment_id)


cdef Measure _measure(object messages, object fragment_id):
    _check_list(messages, fragment_id)
    cdef Py_ssize_t n = PyList_GET_SIZE(messages)
    cdef Measure out = Measure.__new__(Measure)
    out._alloc(n)
    if n:
        _fill(messages, fragment_id, n, out._roles, out._chars, out._flags, out._opaque)
    elif PyList_GET_SIZE(messages) != 0:
        raise _changed(fragment_id)
    out._totals()
    return out


def message_text_pieces(message, Py_ssize_t index=0, fragment_id=None):
    """The text pieces whose code points :func:`measure_messages` counts, in order."""
    cdef list pieces = []
    cdef _Acc acc
    cdef int8_t code = 0
    acc.chars = acc.opaque = 0
    acc.pieces = <PyObject*>pieces
    _message(message, &acc, index, fragment_id, &code)
    return pieces


def text_pieces(messages, fragment_id=None):
    """``message_text_pieces`` of every message in one pass, and where each message's pieces
    end (see the twin)."""
    _check_list(messages, fragment_id)
    cdef list pieces = []
    cdef _Acc acc
    cdef int8_t code = 0
    cdef Py_ssize_t i, n = PyList_GET_SIZE(messages)
    cdef list ends = []
    acc.chars = acc.opaque = 0
    acc.pieces = <PyObject*>pieces
    for i in range(n):
        if i >= PyList_GET_SIZE(messages):
            raise _changed(fragment_id)
        _message(<object>PyList_GET_ITEM(messages, i), &acc, i, fragment_id, &code)
        ends.append(PyList_GET_SIZE(pieces))
    if PyList_GET_SIZE(messages) != n:
        raise _changed(fragment_id)
    return pieces, ends
