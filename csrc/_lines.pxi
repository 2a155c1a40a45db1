# JSONL lines read as bytes: the scan of one line (the twin: contextpolicy/_lines_py.py, whose
# reduce_lines states the rules of which lines take this path), over the JSON byte reader of
# _json_bytes.pxi; _line_reducer.pxi reduces the lines it scanned. Included by _kernel_c.pyx.

@cython.final
cdef class _LineScan:
    """What the scan of one line found, in arrays that grow as lines need and are reused."""

    cdef Py_ssize_t m, cap
    cdef int64_t* m_start
    cdef int64_t* m_end
    cdef int64_t* chars
    cdef int64_t* opaque
    cdef int8_t* roles
    cdef uint8_t* flags
    # each role's string: where its text starts in the line, and its length in bytes
    cdef int64_t* role_at
    cdef int64_t* role_len
    cdef int64_t* call_off
    cdef int64_t* res_off
    # tool call ids and the ids results answer: (start, length) in the line, start -1: none
    cdef Py_ssize_t ncalls, nres, ids_cap
    cdef int64_t* call_at
    cdef int64_t* call_len
    cdef int64_t* res_at
    cdef int64_t* res_len
    # ids of the message being read, kept apart to be put in the object path's order
    cdef Py_ssize_t npc, npr, tmp_cap
    cdef int64_t* pc_at
    cdef int64_t* pc_len
    cdef int64_t* pr_at
    cdef int64_t* pr_len
    cdef Py_ssize_t array_start, array_end
    cdef Py_ssize_t id_start, id_end

    def __cinit__(self):
        self.cap = self.ids_cap = self.tmp_cap = 0
        self.m_start = self.m_end = self.chars = self.opaque = NULL
        self.call_off = self.res_off = self.call_at = self.call_len = NULL
        self.res_at = self.res_len = self.pc_at = self.pc_len = self.pr_at = self.pr_len = NULL
        self.roles = NULL
        self.flags = NULL
        self.role_at = self.role_len = NULL
        self._grow_messages()

    def __dealloc__(self):
        free(self.m_start)
        free(self.m_end)
        free(self.chars)
        free(self.opaque)
        free(self.roles)
        free(self.flags)
        free(self.role_at)
        free(self.role_len)
        free(self.call_off)
        free(self.res_off)
        free(self.call_at)
        free(self.call_len)
        free(self.res_at)
        free(self.res_len)
        free(self.pc_at)
        free(self.pc_len)
        free(self.pr_at)
        free(self.pr_len)

    cdef int _grow_messages(self) except -1 nogil:
        cdef Py_ssize_t cap = 64 if self.cap == 0 else 2 * self.cap
        self.m_start = <int64_t*>_regrow(self.m_start, cap * 8)
        self.m_end = <int64_t*>_regrow(self.m_end, cap * 8)
        self.chars = <int64_t*>_regrow(self.chars, cap * 8)
        self.opaque = <int64_t*>_regrow(self.opaque, cap * 8)
        self.roles = <int8_t*>_regrow(self.roles, cap)
        self.flags = <uint8_t*>_regrow(self.flags, cap)
        self.role_at = <int64_t*>_regrow(self.role_at, cap * 8)
        self.role_len = <int64_t*>_regrow(self.role_len, cap * 8)
        self.call_off = <int64_t*>_regrow(self.call_off, (cap + 1) * 8)
        self.res_off = <int64_t*>_regrow(self.res_off, (cap + 1) * 8)
        self.cap = cap
        return 0

    cdef int _grow_ids(self, Py_ssize_t need) except -1 nogil:
        cdef Py_ssize_t cap = self.ids_cap if self.ids_cap else 64
        while cap < need:
            cap *= 2
        self.call_at = <int64_t*>_regrow(self.call_at, cap * 8)
        self.call_len = <int64_t*>_regrow(self.call_len, cap * 8)
        self.res_at = <int64_t*>_regrow(self.res_at, cap * 8)
        self.res_len = <int64_t*>_regrow(self.res_len, cap * 8)
        self.ids_cap = cap
        return 0

    cdef int _grow_tmp(self) except -1 nogil:
        cdef Py_ssize_t cap = 16 if self.tmp_cap == 0 else 2 * self.tmp_cap
        self.pc_at = <int64_t*>_regrow(self.pc_at, cap * 8)
        self.pc_len = <int64_t*>_regrow(self.pc_len, cap * 8)
        self.pr_at = <int64_t*>_regrow(self.pr_at, cap * 8)
        self.pr_len = <int64_t*>_regrow(self.pr_len, cap * 8)
        self.tmp_cap = cap
        return 0

    cdef int _part_id(self, bint call, _Val* v) except -1 nogil:
        # A tool_use block's id or a tool_result block's tool_use_id (-1: none).
        if (self.npc if call else self.npr) >= self.tmp_cap:
            self._grow_tmp()
        if call:
            if v == NULL or v.kind != 34:
                return 0  # a call without a string id is no call id at all
            self.pc_at[self.npc] = v.start + 1
            self.pc_len[self.npc] = v.end - v.start - 2
            self.npc += 1
        else:
            if v != NULL and v.kind == 34:
                self.pr_at[self.npr] = v.start + 1
                self.pr_len[self.npr] = v.end - v.start - 2
            else:
                self.pr_at[self.npr] = -1
                self.pr_len[self.npr] = 0
            self.npr += 1
        return 0

    cdef int _parts(self, _Sc* s, int level, int nesting, bint top, int64_t* chars,
                    int64_t* opaque, uint8_t* flags) except -1 nogil:
        # A list of content parts at s.i (a bracket); top: the message's own content, whose
        # blocks carry its flags and ids.
        cdef int opened = _open(s, 91, level)
        cdef bint more = True
        if opened == 2:
            return 0
        if opened:
            return _FALLBACK
        while more:
            if s.i < s.end and s.p[s.i] == 34:
                if _str(s):
                    return _FALLBACK
                chars[0] += s.chars
            elif s.i < s.end and s.p[s.i] == 123:
                if self._part(s, level + 1, nesting, top, chars, opaque, flags):
                    return _FALLBACK
            else:
                return _FALLBACK
            if _next(s, 93, &more):
                return _FALLBACK
        return 0

    cdef int _part(self, _Sc* s, int level, int nesting, bint top, int64_t* chars,
                   int64_t* opaque, uint8_t* flags) except -1 nogil:
        cdef _Val vals[CP_KEY_COUNT]
        cdef uint32_t seen = 0
        cdef int code, ptype, opened = _open(s, 123, level)
        cdef bint more = True
        cdef _Sc inner
        cdef int64_t length
        if opened == 1:
            return _FALLBACK
        more = opened == 0
        while more:
            if _key(s, &code):
                return _FALLBACK
            if code == CP_KEY_TYPE or code == CP_KEY_TEXT or code == CP_KEY_CONTENT \
                    or code == CP_KEY_NAME or code == CP_KEY_INPUT or code == CP_KEY_THINKING \
                    or code == CP_KEY_ID or code == CP_KEY_TOOL_USE_ID:
                if _seen(&seen, code) or _take(s, &vals[code], level + 1):
                    return _FALLBACK
            elif _value(s, level + 1):
                return _FALLBACK
            if _next(s, 125, &more):
                return _FALLBACK
        cdef int checked[3]
        checked[0], checked[1], checked[2] = CP_KEY_TYPE, CP_KEY_ID, CP_KEY_TOOL_USE_ID
        for k in range(3):
            code = checked[k]
            if seen & ((<uint32_t>1) << code) and vals[code].kind == 34 and vals[code].escaped:
                return _FALLBACK
        ptype = CP_PART_OTHER
        if seen & ((<uint32_t>1) << CP_KEY_TYPE) and vals[CP_KEY_TYPE].kind == 34:
            ptype = cp_part_code(<const char*>(s.p + vals[CP_KEY_TYPE].start + 1),
                                 vals[CP_KEY_TYPE].end - vals[CP_KEY_TYPE].start - 2)
        if ptype == CP_PART_TEXT or ptype == CP_PART_THINKING:
            code = CP_KEY_TEXT if ptype == CP_PART_TEXT else CP_KEY_THINKING
            if not (seen & ((<uint32_t>1) << code)) or vals[code].kind != 34:
                return _FALLBACK
            chars[0] += vals[code].chars
        elif ptype == CP_PART_TOOL_RESULT:
            if nesting >= CP_MAX_NESTING:
                return _FALLBACK
            if seen & ((<uint32_t>1) << CP_KEY_CONTENT):
                code = vals[CP_KEY_CONTENT].kind
                if code == 34:
                    chars[0] += vals[CP_KEY_CONTENT].chars
                elif code == 91:
                    inner = s[0]
                    inner.i = vals[CP_KEY_CONTENT].start
                    if self._parts(&inner, level + 1, nesting + 1, False, chars, opaque, flags):
                        return _FALLBACK
                elif code != 110:
                    return _FALLBACK
            if top:
                flags[0] |= F_RESULT
                self._part_id(False, &vals[CP_KEY_TOOL_USE_ID] if seen & (
                    (<uint32_t>1) << CP_KEY_TOOL_USE_ID) else NULL)
        elif ptype == CP_PART_TOOL_USE:
            if seen & ((<uint32_t>1) << CP_KEY_NAME) and vals[CP_KEY_NAME].kind == 34:
                chars[0] += vals[CP_KEY_NAME].chars
            if seen & ((<uint32_t>1) << CP_KEY_INPUT):
                length = _json_chars(s.p, &vals[CP_KEY_INPUT])
                if length < 0:
                    return _FALLBACK
                chars[0] += length
            if top:
                flags[0] |= F_CALLS
                if seen & ((<uint32_t>1) << CP_KEY_ID):
                    self._part_id(True, &vals[CP_KEY_ID])
        else:
            opaque[0] += 1
        return 0

    cdef int _function(self, _Sc* s, int level, int64_t* chars) except -1 nogil:
        cdef _Val vals[CP_KEY_COUNT]
        cdef uint32_t seen = 0
        cdef int code, opened = _open(s, 123, level)
        cdef bint more
        cdef int64_t length
        if opened == 1:
            return _FALLBACK
        more = opened == 0
        while more:
            if _key(s, &code):
                return _FALLBACK
            if code == CP_KEY_NAME or code == CP_KEY_ARGUMENTS:
                if _seen(&seen, code) or _take(s, &vals[code], level + 1):
                    return _FALLBACK
            elif _value(s, level + 1):
                return _FALLBACK
            if _next(s, 125, &more):
                return _FALLBACK
        if seen & ((<uint32_t>1) << CP_KEY_NAME) and vals[CP_KEY_NAME].kind == 34:
            chars[0] += vals[CP_KEY_NAME].chars
        if seen & ((<uint32_t>1) << CP_KEY_ARGUMENTS):
            if vals[CP_KEY_ARGUMENTS].kind == 34:
                chars[0] += vals[CP_KEY_ARGUMENTS].chars
            elif vals[CP_KEY_ARGUMENTS].kind != 110:
                length = _json_chars(s.p, &vals[CP_KEY_ARGUMENTS])
                if length < 0:
                    return _FALLBACK
                chars[0] += length
        return 0

    cdef int _calls(self, _Sc* s, int level, int64_t* chars, bint* any_call) except -1 nogil:
        # tool_calls at s.i (a bracket): their ids go straight into the line's call ids.
        cdef int opened = _open(s, 91, level), code, sub
        cdef bint more, call_more
        cdef uint32_t seen
        cdef _Val cid
        if opened == 1:
            return _FALLBACK
        more = opened == 0
        any_call[0] = more
        while more:
            seen = 0
            cid.kind = 0
            sub = _open(s, 123, level + 1)
            if sub == 1:
                return _FALLBACK
            call_more = sub == 0
            while call_more:
                if _key(s, &code):
                    return _FALLBACK
                if code == CP_KEY_ID:
                    if _seen(&seen, code) or _take(s, &cid, level + 2):
                        return _FALLBACK
                    if cid.kind == 34 and cid.escaped:
                        return _FALLBACK
                elif code == CP_KEY_FUNCTION:
                    if _seen(&seen, code):
                        return _FALLBACK
                    if s.i < s.end and s.p[s.i] == 110:
                        if _literal(s):
                            return _FALLBACK
                    elif self._function(s, level + 2, chars):
                        return _FALLBACK
                elif _value(s, level + 2):
                    return _FALLBACK
                if _next(s, 125, &call_more):
                    return _FALLBACK
            if cid.kind == 34:
                if self.ncalls >= self.ids_cap:
                    self._grow_ids(self.ncalls + 1)
                self.call_at[self.ncalls] = cid.start + 1
                self.call_len[self.ncalls] = cid.end - cid.start - 2
                self.ncalls += 1
            if _next(s, 93, &more):
                return _FALLBACK
        return 0

    cdef int _message(self, _Sc* s, int level) except -1 nogil:
        cdef _Val role, result_id
        cdef uint32_t seen = 0
        cdef int code, opened, k
        cdef bint more, any_call = False
        cdef int64_t chars = 0, opaque = 0
        cdef uint8_t flags = 0
        cdef int8_t rcode
        cdef Py_ssize_t i = self.m, calls_at = self.ncalls, j
        if i >= self.cap:
            self._grow_messages()
        self.m_start[i] = s.i
        self.npc = self.npr = 0
        result_id.kind = 0
        role.kind = 0
        opened = _open(s, 123, level)
        if opened == 1:
            return _FALLBACK
        more = opened == 0
        while more:
            if _key(s, &code):
                return _FALLBACK
            if code == CP_KEY_TYPE:
                return _FALLBACK  # a Responses item, or a typed message
            if code == CP_KEY_ROLE:
                if _seen(&seen, code) or _take(s, &role, level + 1):
                    return _FALLBACK
            elif code == CP_KEY_CONTENT:
                if _seen(&seen, code) or s.i >= s.end:
                    return _FALLBACK
                k = s.p[s.i]
                if k == 34:
                    if _str(s):
                        return _FALLBACK
                    chars += s.chars
                elif k == 91:
                    if self._parts(s, level + 1, 0, True, &chars, &opaque, &flags):
                        return _FALLBACK
                elif k == 110:
                    if _literal(s):
                        return _FALLBACK
                else:
                    return _FALLBACK
            elif code == CP_KEY_TOOL_CALLS:
                if _seen(&seen, code) or s.i >= s.end:
                    return _FALLBACK
                if s.p[s.i] == 110:
                    if _literal(s):
                        return _FALLBACK
                elif self._calls(s, level + 1, &chars, &any_call):
                    return _FALLBACK
            elif code == CP_KEY_TOOL_CALL_ID:
                if _seen(&seen, code) or _take(s, &result_id, level + 1):
                    return _FALLBACK
                if result_id.kind == 34 and result_id.escaped:
                    return _FALLBACK
            elif _value(s, level + 1):
                return _FALLBACK
            if _next(s, 125, &more):
                return _FALLBACK
        if role.kind != 34 or role.escaped:
            return _FALLBACK
        rcode = <int8_t>cp_role_code(<const char*>(s.p + role.start + 1), role.end - role.start - 2)
        if rcode == R_USER and not (flags & F_RESULT):
            flags |= F_OPENS
        if rcode == R_TOOL or rcode == R_FUNCTION:
            flags |= F_RESULT
        if rcode == 0:
            flags |= F_UNKNOWN
        if any_call:
            flags |= F_CALLS
        # Ids in the object path's order: tool_calls, then tool_use blocks; a tool message's
        # tool_call_id, then tool_result blocks.
        if self.ncalls + self.npc + 1 + self.nres + self.npr + 1 > self.ids_cap:
            self._grow_ids(self.ncalls + self.npc + self.nres + self.npr + 2)
        for j in range(self.npc):
            self.call_at[self.ncalls] = self.pc_at[j]
            self.call_len[self.ncalls] = self.pc_len[j]
            self.ncalls += 1
        if rcode == R_TOOL:
            self.res_at[self.nres] = result_id.start + 1 if result_id.kind == 34 else -1
            self.res_len[self.nres] = result_id.end - result_id.start - 2 if (
                result_id.kind == 34) else 0
            self.nres += 1
        for j in range(self.npr):
            self.res_at[self.nres] = self.pr_at[j]
            self.res_len[self.nres] = self.pr_len[j]
            self.nres += 1
        self.m_end[i] = s.i
        self.chars[i] = chars
        self.opaque[i] = opaque
        self.roles[i] = rcode
        self.flags[i] = flags
        self.role_at[i] = role.start + 1
        self.role_len[i] = role.end - role.start - 2
        self.call_off[i + 1] = self.ncalls
        self.res_off[i + 1] = self.nres
        self.m = i + 1
        return 0

    cdef int scan(self, const uint8_t* p, Py_ssize_t lo, Py_ssize_t hi) except -1 nogil:
        # The whole line p[lo:hi]; 0 when it takes the byte path.
        cdef _Sc s
        cdef int code, opened, nkeys = 0
        cdef bint more, found = False, inner_more
        cdef Py_ssize_t key_at[_SCAN_KEYS]
        cdef Py_ssize_t key_len[_SCAN_KEYS]
        cdef Py_ssize_t start, length, k
        s.p = p
        s.end = hi
        s.i = lo
        self.m = self.ncalls = self.nres = 0
        self.call_off[0] = 0
        self.res_off[0] = 0
        self.id_start = -1
        _ws(&s)
        opened = _open(&s, 123, 0)
        if opened:
            return _FALLBACK
        more = True
        while more:
            if _key(&s, &code):
                return _FALLBACK
            start, length = s.key_at, s.key_len
            if nkeys == _SCAN_KEYS:
                return _FALLBACK
            for k in range(nkeys):
                if key_len[k] == length and memcmp(p + key_at[k], p + start, length) == 0:
                    return _FALLBACK
            key_at[nkeys] = start
            key_len[nkeys] = length
            nkeys += 1
            if length == 9 and memcmp(p + start, b"fragments", 9) == 0:
                return _FALLBACK
            if length == 8 and memcmp(p + start, b"messages", 8) == 0:
                found = True
                self.array_start = s.i
                opened = _open(&s, 91, 1)
                if opened == 1:
                    return _FALLBACK
                inner_more = opened == 0
                while inner_more:
                    if self._message(&s, 2):
                        return _FALLBACK
                    if _next(&s, 93, &inner_more):
                        return _FALLBACK
                self.array_end = s.i
            elif length == 2 and memcmp(p + start, b"id", 2) == 0:
                self.id_start = s.i
                if _value(&s, 1):
                    return _FALLBACK
                self.id_end = s.i
            elif _value(&s, 1):
                return _FALLBACK
            if _next(&s, 125, &more):
                return _FALLBACK
        _ws(&s)
        if s.i != hi or not found:
            return _FALLBACK
        return 0
