# Shared by every concern of the compiled kernel: the flag and role constants, the tables it
# was built with, the scan of a dict's keys, and the error helpers of bad messages.
# Included by _kernel_c.pyx.

cdef object _MEMBER_DESCRIPTOR = types.MemberDescriptorType
cdef object _GETSET_DESCRIPTOR = types.GetSetDescriptorType
GROUP_USER_TURN = CP_GROUP_USER_TURN
GROUP_MESSAGE = CP_GROUP_MESSAGE

cdef uint8_t F_OPENS = CP_FLAG_OPENS_TURN
cdef uint8_t F_RESULT = CP_FLAG_TOOL_RESULT
cdef uint8_t F_CALLS = CP_FLAG_TOOL_CALLS
cdef uint8_t F_GLUE = CP_FLAG_GLUES_NEXT
cdef uint8_t F_UNKNOWN = CP_FLAG_UNKNOWN_ROLE
cdef int8_t R_USER = CP_ROLE_USER
cdef int8_t R_TOOL = CP_ROLE_TOOL
cdef int8_t R_FUNCTION = CP_ROLE_FUNCTION


def _built_tables():
    # The tables this module was compiled with, as _tables.tables() spells them.
    cdef int i
    return {
        "roles": {cp_role_names[i].decode(): i for i in range(1, CP_ROLE_COUNT)},
        "flags": {cp_flag_names[i].decode(): cp_flag_bits[i] for i in range(CP_FLAG_COUNT)},
        "parts": {cp_part_names[i].decode(): cp_part_codes[i] for i in range(CP_PART_COUNT)},
        "items": {cp_item_names[i].decode(): cp_item_codes[i] for i in range(CP_ITEM_COUNT)},
        "groups": {cp_group_names[i].decode(): cp_group_codes[i] for i in range(CP_GROUP_COUNT)},
        "keys": [cp_key_names[i].decode() for i in range(CP_KEY_COUNT - 1)],
        "max_nesting": CP_MAX_NESTING,
        "missed": [cp_missed_names[i].decode() for i in range(CP_MISSED_COUNT)],
        "line_figures": [cp_figure_names[i].decode() for i in range(CP_FIGURE_COUNT)],
        "max_json_depth": CP_MAX_JSON_DEPTH,
        "json_whitespace": bytes([cp_json_whitespace[i] for i in range(CP_JSON_WHITESPACE_COUNT)]),
    }


TABLES = _built_tables()

# Dict keys are matched by one pass of PyDict_Next rather than a hash lookup per key: the key
# objects of a transcript are few (json.loads shares them), so a pointer cache answers almost
# every key without touching it. Cached keys are owned (a reference is held), so a cached
# pointer can never be reused by another object.
#
# Only exact str keys are cached. Releasing a cached key (when another key takes its slot) may
# free it, and freeing an exact str runs no Python code; freeing a str subclass with a __del__,
# an object key with one, or a tuple key holding one would run that code in the middle of a
# _scan, which could change the dict being scanned and free the values it has found but not
# yet taken (a use after free). Other keys are matched by their text each time.
cdef enum:
    KEY_CACHE = 256

cdef PyObject* _cache_key[KEY_CACHE]
cdef int _cache_code[KEY_CACHE]
memset(_cache_key, 0, sizeof(_cache_key))


cdef int _key_code_slow(PyObject* key, size_t slot) noexcept:
    cdef int code = CP_KEY_OTHER
    cdef PyObject* old
    if PyUnicode_Check_ptr(key) and PyUnicode_KIND(<object>key) == PyUnicode_1BYTE_KIND:
        code = cp_key_code(<const char*>PyUnicode_DATA(<object>key),
                           PyUnicode_GET_LENGTH(<object>key))
    if PyUnicode_CheckExact_ptr(key):
        # The slot holds the new key before the old one is released.
        old = _cache_key[slot]
        Py_INCREF(key)
        _cache_key[slot] = key
        _cache_code[slot] = code
        Py_XDECREF(old)
    return code


cdef inline int _key_code(PyObject* key) noexcept:
    cdef size_t slot = (<size_t>key >> 4) & (KEY_CACHE - 1)
    if _cache_key[slot] == key:
        return _cache_code[slot]
    return _key_code_slow(key, slot)


# The slots of a scan are cleared by copying a zeroed struct of their size: compilers write a
# memset of this size as `rep stos`, whose start-up costs more than scanning a short message
# and whose stores the reads of the slots right after it must wait for.
cdef extern from *:
    """
    static inline void cp_clear_slots(PyObject** slots) {
        PyObject* volatile* s = (PyObject* volatile*)slots;
        for (int i = 0; i < CP_KEY_COUNT; i++) s[i] = NULL;
    }
    """
    void cp_clear_slots(PyObject** slots) noexcept nogil


cdef inline void _scan(object d, PyObject** slots) noexcept:
    # slots[code] = borrowed value of the key with that code, or NULL.
    cdef Py_ssize_t pos = 0
    cdef PyObject* k
    cdef PyObject* v
    cp_clear_slots(slots)
    while PyDict_Next(d, &pos, &k, &v):
        slots[_key_code(k)] = v


cdef inline int8_t _role_code(object role):
    if PyUnicode_KIND(role) != PyUnicode_1BYTE_KIND:
        return 0
    return <int8_t>cp_role_code(<const char*>PyUnicode_DATA(role), PyUnicode_GET_LENGTH(role))


cdef inline int8_t _role_code_ptr(PyObject* role) noexcept:
    # _role_code of a str held by someone else.
    if PyUnicode_KIND_ptr(role) != PyUnicode_1BYTE_KIND:
        return 0
    return <int8_t>cp_role_code(<const char*>PyUnicode_DATA_ptr(role),
                                PyUnicode_GET_LENGTH_ptr(role))


cdef inline int _part_type(object ptype):
    if ptype is None or not PyUnicode_Check(ptype) or PyUnicode_KIND(ptype) != PyUnicode_1BYTE_KIND:
        return CP_PART_OTHER
    return cp_part_code(<const char*>PyUnicode_DATA(ptype), PyUnicode_GET_LENGTH(ptype))


cdef inline bint _opens(const uint8_t* flags, Py_ssize_t i, Py_ssize_t start, uint8_t mask,
                        bint invert) noexcept nogil:
    # Whether message i starts a group of messages start..: the first does; after that, one
    # whose flags say so (mask set, or clear when invert), unless a reasoning item precedes it.
    if i == start:
        return True
    return (((flags[i] & mask) != 0) != invert) and not (flags[i - 1] & CP_FLAG_GLUES_NEXT)


cdef inline int64_t _missed_code(bint over_target, bint failed, bint floor) noexcept nogil:
    # The code of a missed target's reason, in MISSED_REASONS' order of precedence.
    if over_target:
        return CP_MISSED_PROTECTED_OVER_TARGET
    if failed:
        return CP_MISSED_STEP_FAILED
    if floor:
        return CP_MISSED_KEEP_GROUPS_FLOOR
    return CP_MISSED_NO_STEP_COULD_ACT


cdef inline int _item_kind(PyObject** slots) noexcept:
    # What a message is, from the fields _scan found (see _tool_ids._item): a Responses item
    # by its string type, a chat message when it has none, is a "message", or is an unknown
    # type next to a string role.
    cdef PyObject* t = slots[CP_KEY_TYPE]
    cdef int code
    if t == NULL or not PyUnicode_Check_ptr(t):
        return CP_ITEM_MESSAGE
    if PyUnicode_KIND(<object>t) != PyUnicode_1BYTE_KIND:
        code = CP_ITEM_UNKNOWN
    else:
        code = cp_item_code(<const char*>PyUnicode_DATA(<object>t), PyUnicode_GET_LENGTH(<object>t))
    if code == CP_ITEM_UNKNOWN and slots[CP_KEY_ROLE] != NULL and PyUnicode_Check_ptr(
            slots[CP_KEY_ROLE]):
        return CP_ITEM_MESSAGE
    return code


# A bad message is detected on the hot path and described on the way out: the innermost check
# records what was expected (_fail) and each level adds its part of the field path (_at) as it
# returns. The messages, codes and paths are the twin's, word for word; no second walk is
# needed, so Python code a message runs (a dict subclass's items()) runs once, as in the twin.
cdef object _fail_message = None
cdef object _fail_code = None
cdef list _fail_path = []


cdef int _fail(object message, object code, object segment) except -1:
    global _fail_message, _fail_code
    _fail_message = message
    _fail_code = code
    del _fail_path[:]
    if segment:
        _fail_path.append(segment)
    return 0


cdef inline int _at(object segment) except -1:
    _fail_path.append(segment)
    return 0


cdef object _invalid(Py_ssize_t index, object fid):
    field = "".join(reversed(_fail_path))
    raise ContextPlanError.for_message(
        index, _fail_message, fragment_id=fid, field=field, code=_fail_code,
    )


cdef uint8_t _list_changed() except? 254:
    # A content or tool_calls list grew or shrank while it was read (Python code one of its
    # items ran changed it): an error, so that a list that keeps growing ends the walk.
    _fail("the list changed while it was measured", "changed-while-measured", "")
    return 255


cdef str _type_name(object value):
    return type(value).__name__


cdef inline object _exact(object s):
    # An exact str: the text a str subclass holds, whatever its methods say (no Python code).
    if PyUnicode_CheckExact(s):
        return s
    return PyUnicode_FromObject(s)
