# Many transcripts at once: reduce_rows, the columnar form of reduce_transcript (the twin:
# contextpolicy/_rows_py.py). Included by _kernel_c.pyx.

cdef struct _Rows:
    # The arrays of reduce_rows and the scratch state of its pairing pass.
    const int8_t* roles
    const uint8_t* flags
    const int64_t* chars
    const int64_t* call_off
    const int64_t* call_codes
    const int64_t* res_off
    const int64_t* result_codes
    int64_t* called      # stamp: the id was called in the current range
    int64_t* pend_stamp  # stamp: the id is pending in the current range ...
    int64_t* pend_at     # ... at this message
    int64_t* orphan      # stamp, per result: an orphan in the current range
    int64_t* starts      # group starts of the history being cut, and its end
    int64_t* gchars      # chars per group
    int64_t stamp
    # warnings written so far
    int64_t* w_row
    int64_t* w_frag
    int64_t* w_index
    int64_t* w_code
    int64_t* w_id
    Py_ssize_t nwarn


cdef void _rows_orphans(_Rows* s, Py_ssize_t lo, Py_ssize_t hi) noexcept nogil:
    # The pairing pass over messages lo:hi: s.orphan[j] is stamped for each result j that is an
    # orphan; pending calls stay stamped.
    cdef Py_ssize_t i, j
    cdef int64_t cid
    cdef uint8_t f
    s.stamp += 1
    for i in range(lo, hi):
        f = s.flags[i]
        if f & F_RESULT and s.res_off != NULL:
            for j in range(s.res_off[i], s.res_off[i + 1]):
                cid = s.result_codes[j]
                if cid >= 0 and s.pend_stamp[cid] == s.stamp:
                    s.pend_stamp[cid] = 0
                elif cid < 0 or s.called[cid] != s.stamp:
                    s.orphan[j] = s.stamp
        if f & F_CALLS and s.call_off != NULL:
            for j in range(s.call_off[i], s.call_off[i + 1]):
                cid = s.call_codes[j]
                if cid < 0:
                    continue
                s.called[cid] = s.stamp
                if s.pend_stamp[cid] != s.stamp:
                    s.pend_stamp[cid] = s.stamp
                    s.pend_at[cid] = i


cdef void _rows_warnings(_Rows* s, Py_ssize_t row, int frag, Py_ssize_t lo,
                         Py_ssize_t hi) noexcept nogil:
    # Every warning of lo:hi in message order: a message's orphans, then its unanswered calls.
    cdef Py_ssize_t i, j, k
    cdef int64_t cid
    _rows_orphans(s, lo, hi)
    for i in range(lo, hi):
        if s.flags[i] & F_RESULT and s.res_off != NULL:
            for j in range(s.res_off[i], s.res_off[i + 1]):
                if s.orphan[j] == s.stamp:
                    k = s.nwarn
                    s.w_row[k], s.w_frag[k], s.w_index[k] = row, frag, i - lo
                    s.w_code[k], s.w_id[k] = 0, s.result_codes[j]
                    s.nwarn += 1
        if s.flags[i] & F_CALLS and s.call_off != NULL:
            for j in range(s.call_off[i], s.call_off[i + 1]):
                cid = s.call_codes[j]
                if cid >= 0 and s.pend_stamp[cid] == s.stamp and s.pend_at[cid] == i:
                    s.pend_stamp[cid] = 0
                    k = s.nwarn
                    s.w_row[k], s.w_frag[k], s.w_index[k] = row, frag, i - lo
                    s.w_code[k], s.w_id[k] = 1, cid
                    s.nwarn += 1


cdef Py_ssize_t _rows_cut(_Rows* s, Py_ssize_t h0, Py_ssize_t tail, int grouping,
                          int64_t keep, int64_t target, int64_t* removed,
                          int64_t* groups) noexcept nogil:
    # One trim of the history h0:tail: the first message it keeps (h0 when nothing goes), with
    # the pairing guard of Measure.cut; removed[0] gets the groups it removes, groups[0] the
    # groups the history forms.
    cdef Py_ssize_t i, j, g, ngroups = 0, first, cut, earliest, missing
    cdef uint8_t mask = F_OPENS if grouping == CP_GROUP_USER_TURN else F_RESULT
    cdef bint invert = grouping != CP_GROUP_USER_TURN
    cdef int64_t total, cid, kept_fit, floor
    removed[0] = 0
    for i in range(h0, tail):
        if _opens(s.flags, i, h0, mask, invert):
            s.starts[ngroups] = i
            s.gchars[ngroups] = 0
            ngroups += 1
        s.gchars[ngroups - 1] += s.chars[i]
    groups[0] = ngroups
    if ngroups == 0:
        return h0
    s.starts[ngroups] = tail  # the end of the last group
    # The longest suffix of whole groups within the target, never fewer than keep groups.
    total = 0
    kept_fit = 0
    for g in range(ngroups - 1, -1, -1):
        total += s.gchars[g]
        if total > target:
            break
        kept_fit += 1
    floor = keep if keep < ngroups else ngroups
    first = ngroups - (kept_fit if kept_fit > floor else floor)
    while first > 0:
        cut = s.starts[first]
        _rows_orphans(s, cut, tail)
        # The ids still missing their call, marked in called[] as -stamp.
        missing = 0
        if s.res_off == NULL:  # no result has an id: nothing can be missing
            break
        for j in range(s.res_off[cut], s.res_off[tail]):
            cid = s.result_codes[j]
            if s.orphan[j] == s.stamp and cid >= 0 and s.called[cid] != -s.stamp:
                s.called[cid] = -s.stamp
                missing += 1
        if missing == 0:
            break
        earliest = cut
        i = cut - 1
        while i >= h0 and missing > 0:
            if s.flags[i] & F_CALLS and s.call_off != NULL:
                for j in range(s.call_off[i], s.call_off[i + 1]):
                    cid = s.call_codes[j]
                    if cid >= 0 and s.called[cid] == -s.stamp:
                        s.called[cid] = 0
                        missing -= 1
                        earliest = i
            i -= 1
        if earliest == cut:
            break
        # the group that holds the earliest call
        g = first - 1
        while s.starts[g] > earliest:
            g -= 1
        first = g
    removed[0] = first
    return s.starts[first]


cdef int64_t _codes_used(const int64_t[::1] call_codes, const int64_t[::1] result_codes,
                         int64_t ncodes) except -1:
    # 1 + the highest code in use (0 for none), every code checked against ncodes.
    cdef int64_t used = 0
    cdef Py_ssize_t i
    if ncodes < 0:
        raise ValueError("ncodes must be >= 0")
    for i in range(call_codes.shape[0]):
        if call_codes[i] < -1 or call_codes[i] >= ncodes:
            raise ValueError(f"call_codes must lie in -1..{ncodes - 1}")
        if call_codes[i] >= used:
            used = call_codes[i] + 1
    for i in range(result_codes.shape[0]):
        if result_codes[i] < -1 or result_codes[i] >= ncodes:
            raise ValueError(f"result_codes must lie in -1..{ncodes - 1}")
        if result_codes[i] >= used:
            used = result_codes[i] + 1
    return used


cdef int _check_row_chars(const int64_t[::1] chars, const int64_t[::1] off,
                          Py_ssize_t n) except -1:
    # Chars are >= 0 and each row's add up within 64 bits.
    cdef Py_ssize_t i, r
    cdef int64_t row_total
    for i in range(chars.shape[0]):
        if chars[i] < 0:
            raise ValueError("chars must be >= 0")
    for r in range(n):
        row_total = 0
        for i in range(off[r], off[r + 1]):
            if chars[i] > INT64_MAX - row_total:
                raise ValueError(f"the chars of row {r} add up to more than 64 bits hold")
            row_total += chars[i]
    return 0


cdef int64_t* _trim_specs(tuple steps, Py_ssize_t nsteps) except NULL:
    # The trims as (grouping, keep_groups, target_chars) triples in a block the caller frees.
    cdef Py_ssize_t i
    cdef int64_t* spec = <int64_t*>malloc(sizeof(int64_t) * (3 * nsteps + 1))
    if spec == NULL:
        raise MemoryError()
    try:
        for i in range(nsteps):
            grouping, keep, target = steps[i]
            if grouping != CP_GROUP_USER_TURN and grouping != CP_GROUP_MESSAGE:
                raise ValueError(f"unknown grouping code {grouping}")
            if keep < 0 or target < 0:
                raise ValueError("keep_groups and target_chars must be >= 0")
            spec[3 * i], spec[3 * i + 1], spec[3 * i + 2] = grouping, keep, target
    except BaseException:
        free(spec)
        raise
    return spec


cdef struct _RowOut:
    # What one row became (the values of reduce_rows' arrays at its index).
    int64_t head, cut, tail, before, after, groups
    uint8_t fired, missed


cdef void _reduce_row(_Rows* s, Py_ssize_t r, Py_ssize_t a, Py_ssize_t b, const int64_t* spec,
                      Py_ssize_t nsteps, int64_t trigger_chars, int64_t watermark_chars,
                      _RowOut* out) noexcept nogil:
    # Row r (messages a:b): split, trimmed step by step, its pairing warnings written.
    cdef const int8_t* roles = s.roles
    cdef const uint8_t* flags = s.flags
    cdef const int64_t* chars = s.chars
    cdef Py_ssize_t i, k, head = a, tail = b, h0, cut, a_lo, a_hi
    cdef int64_t total = 0, removed = 0, groups = 0, history = 0, ngroups_seen = 0
    cdef bint fired, floor = False
    cdef uint8_t any_tool
    while head < b and (roles[head] == CP_ROLE_SYSTEM or roles[head] == CP_ROLE_DEVELOPER):
        head += 1
    if tail > head and roles[b - 1] == R_USER and not (flags[b - 1] & F_RESULT):
        tail -= 1
    for i in range(a, b):
        total += chars[i]
    out.before = total
    fired = trigger_chars >= 0 and total > trigger_chars
    h0 = head
    for i in range(head, tail):
        history += chars[i]
    for k in range(nsteps):
        if not fired or not (watermark_chars >= 0 and total > watermark_chars):
            continue
        cut = _rows_cut(s, h0, tail, <int>spec[3 * k], spec[3 * k + 1], spec[3 * k + 2],
                        &removed, &ngroups_seen)
        for i in range(h0, cut):
            total -= chars[i]
            history -= chars[i]
        # The step's fragment is left above its target: the keepGroups floor.
        floor = floor or history > spec[3 * k + 2]
        if cut == h0:
            continue
        groups += removed
        h0 = cut
    for k in range(3):
        if k == 0:
            a_lo, a_hi = a, head
        elif k == 1:
            a_lo, a_hi = h0, tail
        else:
            a_lo, a_hi = tail, b
        any_tool = 0
        for i in range(a_lo, a_hi):
            any_tool |= flags[i]
        if any_tool & (F_RESULT | F_CALLS):
            _rows_warnings(s, r, <int>k, a_lo, a_hi)
    out.head, out.cut, out.tail = head, h0, tail
    out.after, out.groups, out.fired = total, groups, fired
    out.missed = CP_MISSED_NONE
    if fired and watermark_chars >= 0 and total > watermark_chars:
        # What no trim may reduce: all but the history (and the history too without one).
        out.missed = _missed_code((total - history if nsteps else total) > watermark_chars,
                                  False, floor)


cdef class _RowArrays:
    # reduce_rows' arguments, converted and checked once; the codes and offsets that bound the
    # loops are private copies no other thread can change while the rows run without the GIL.
    cdef const int8_t[::1] roles
    cdef const uint8_t[::1] flags, skip
    cdef const int64_t[::1] chars, call_codes, result_codes, off, coff, roff
    cdef Py_ssize_t m, n, longest, nsteps
    cdef int64_t used
    cdef int64_t* spec  # (grouping, keep_groups, target_chars) per step

    def __cinit__(self):
        self.spec = NULL

    def __dealloc__(self):
        free(self.spec)

    def __init__(self, list_offsets, roles_in, flags_in, chars_in, call_offsets,
                 call_codes_in, result_offsets, result_codes_in, int64_t ncodes, tuple steps,
                 skip_in):
        self.roles = np.ascontiguousarray(roles_in, dtype=np.int8)
        self.flags = np.ascontiguousarray(flags_in, dtype=np.uint8)
        self.chars = np.ascontiguousarray(chars_in, dtype=np.int64)
        self.call_codes = np.array(np.ascontiguousarray(call_codes_in, dtype=np.int64),
                                   copy=True)
        self.result_codes = np.array(np.ascontiguousarray(result_codes_in, dtype=np.int64),
                                     copy=True)
        cdef Py_ssize_t m = self.flags.shape[0]
        self.m = m
        self.off = _as_offsets(list_offsets, m, "reduce_rows", True)
        if self.roles.shape[0] != m or self.chars.shape[0] != m:
            raise ValueError("roles, flags and chars differ in length")
        if len(call_offsets) != m + 1:
            raise ValueError(f"call_offsets: expected {m + 1} entries, got {len(call_offsets)}")
        # Read without the GIL only where there are codes: then a copy of their own.
        self.coff = _as_offsets(call_offsets, self.call_codes.shape[0], "reduce_rows",
                                self.call_codes.shape[0] > 0)
        if len(result_offsets) != m + 1:
            raise ValueError(
                f"result_offsets: expected {m + 1} entries, got {len(result_offsets)}")
        self.roff = _as_offsets(result_offsets, self.result_codes.shape[0], "reduce_rows",
                                self.result_codes.shape[0] > 0)
        cdef Py_ssize_t r, n = self.off.shape[0] - 1
        self.n = n
        # The state covers the codes in use, whatever ncodes claims.
        self.used = _codes_used(self.call_codes, self.result_codes, ncodes)
        _check_row_chars(self.chars, self.off, n)
        self.nsteps = len(steps)
        self.spec = _trim_specs(steps, self.nsteps)
        skip_a = np.zeros(n, dtype=np.uint8) if skip_in is None else np.ascontiguousarray(
            skip_in, dtype=np.uint8)
        if skip_a.shape[0] != n:
            raise ValueError(f"skip: expected {n} entries, got {skip_a.shape[0]}")
        self.skip = skip_a
        self.longest = 0
        for r in range(n):
            if self.off[r + 1] - self.off[r] > self.longest:
                self.longest = self.off[r + 1] - self.off[r]


def reduce_rows(list_offsets, roles_in, flags_in, chars_in, call_offsets, call_codes_in,
                result_offsets, result_codes_in, int64_t ncodes, tuple steps,
                int64_t trigger_chars, int64_t watermark_chars, skip_in=None):
    """:func:`reduce_transcript` of many transcripts held as arrays, in one call (see the
    twin)."""
    cdef _RowArrays x = _RowArrays(list_offsets, roles_in, flags_in, chars_in, call_offsets,
                                   call_codes_in, result_offsets, result_codes_in, ncodes,
                                   steps, skip_in)
    cdef Py_ssize_t r, n = x.n, m = x.m, longest = x.longest
    cdef Py_ssize_t ncalls = x.call_codes.shape[0], nresults = x.result_codes.shape[0]
    outs = [np.zeros(n, dtype=np.int64) for _ in range(6)]
    cdef int64_t[::1] o_head = outs[0], o_cut = outs[1], o_tail = outs[2]
    cdef int64_t[::1] o_before = outs[3], o_after = outs[4], o_groups = outs[5]
    fired_a = np.zeros(n, dtype=np.uint8)
    cdef uint8_t[::1] o_fired = fired_a
    missed_a = np.zeros(n, dtype=np.uint8)
    cdef uint8_t[::1] o_missed = missed_a
    # At most one orphan per result and one unanswered call per call.
    cdef Py_ssize_t cap = nresults + ncalls
    warn = [np.empty(cap, dtype=np.int64) for _ in range(5)]
    cdef int64_t[::1] w0 = warn[0], w1 = warn[1], w2 = warn[2], w3 = warn[3], w4 = warn[4]
    # One entry per code in use, in three arrays (a size computed in Python: never a wrap).
    states = [np.zeros(<object>x.used + 1, dtype=np.int64) for _ in range(3)]
    scratch = np.zeros(2 * longest + 1, dtype=np.int64)
    orphans = np.zeros(nresults + 1, dtype=np.int64)
    cdef int64_t[::1] st0 = states[0], st1 = states[1], st2 = states[2]
    cdef int64_t[::1] sc = scratch, orph = orphans
    cdef _Rows s
    cdef int64_t dummy = 0
    s.roles = &x.roles[0] if m else NULL
    s.flags = &x.flags[0] if m else NULL
    s.chars = &x.chars[0] if m else NULL
    s.call_off = &x.coff[0] if ncalls else NULL  # (all empty ranges without codes)
    s.call_codes = &x.call_codes[0] if ncalls else NULL
    s.res_off = &x.roff[0] if nresults else NULL
    s.result_codes = &x.result_codes[0] if nresults else NULL
    s.called = &st0[0]
    s.pend_stamp = &st1[0]
    s.pend_at = &st2[0]
    s.orphan = &orph[0]
    s.starts = &sc[0]
    s.gchars = &sc[longest + 1]
    s.stamp = 0
    s.w_row = &w0[0] if cap else &dummy
    s.w_frag = &w1[0] if cap else &dummy
    s.w_index = &w2[0] if cap else &dummy
    s.w_code = &w3[0] if cap else &dummy
    s.w_id = &w4[0] if cap else &dummy
    s.nwarn = 0
    cdef const int64_t[::1] off = x.off
    cdef const uint8_t[::1] skip = x.skip
    cdef _RowOut row
    with nogil:
        for r in range(n):
            if skip[r]:
                continue
            _reduce_row(&s, r, off[r], off[r + 1], x.spec, x.nsteps, trigger_chars,
                        watermark_chars, &row)
            o_head[r], o_cut[r], o_tail[r] = row.head, row.cut, row.tail
            o_before[r], o_after[r], o_groups[r] = row.before, row.after, row.groups
            o_fired[r], o_missed[r] = row.fired, row.missed
    nwarn = s.nwarn
    return RowsRecord(*outs, fired_a, missed_a, RowWarnings(*[w[:nwarn].copy() for w in warn]))
