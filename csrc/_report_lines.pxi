# Report entries (report_lines): programs of bytes and slots, checked as the twin does (the
# twin: contextpolicy/_report_lines_py.py). Included by _kernel_c.pyx.

cdef enum:
    _SLOT_ID = 0
    _SLOT_TRIGGERED = 1
    _SLOT_TARGET_REACHED = 9
    _SLOT_STEPS = 10
    _SLOT_FRAGMENTS = 11
    _SLOT_MISSED = 12
    _SLOT_STATUS = 13
    _SLOT_REASON = 14
    _SLOT_MESSAGES_REMOVED = 19
    _SLOT_FRAGMENT_CHARS_BEFORE = 20
    _SLOT_CHANGED = 24
    _SLOTS = 25

assert len(ENTRY_SLOTS) == _SLOTS
assert ENTRY_SLOTS[_SLOT_STEPS] == "steps"
assert ENTRY_SLOTS[_SLOT_MISSED] == "missed-reason"
assert ENTRY_SLOTS[_SLOT_STATUS] == "status"
assert ENTRY_SLOTS[_SLOT_FRAGMENT_CHARS_BEFORE] == "fragment-chars-before"
assert ENTRY_SLOTS[_SLOT_CHANGED] == "fragment-changed"

cdef struct _Program:
    Py_ssize_t n  # slots; n + 1 pieces
    const char** piece
    Py_ssize_t* size
    int* slot

cdef struct _Template:
    _Program head
    _Program* steps
    Py_ssize_t nsteps
    _Program fragments[3]
    Py_ssize_t bound  # the most an entry writes but its id
    Py_ssize_t ids  # how many times it writes its id

cdef struct _Buf:
    char* p
    Py_ssize_t n, cap


cdef tuple _entry_template(object template, Py_ssize_t nsteps):
    # The twin's checks, in its order and words.
    if type(template) is not tuple or len(template) != 3:
        raise TypeError("template: expected a tuple (head, steps, fragments)")
    head, steps, fragments = template
    if type(steps) is not tuple or len(steps) != nsteps:
        raise ValueError(f"template: expected a tuple of a program for each of the {nsteps} "
                         "steps")
    if type(fragments) is not tuple or len(fragments) != 3:
        raise ValueError("template: expected a tuple of a program for each of the 3 fragments")
    _entry_program(head, 0, _SLOT_STATUS, "template head")
    for i, program in enumerate(steps):
        _entry_program(program, _SLOT_STATUS, _SLOT_FRAGMENT_CHARS_BEFORE,
                       f"template steps[{i}]")
    for i, program in enumerate(fragments):
        _entry_program(program, _SLOT_FRAGMENT_CHARS_BEFORE, _SLOTS,
                       f"template fragments[{i}]")
    return template


cdef int _entry_program(object program, int lo, int hi, str where) except -1:
    if type(program) is not tuple or len(program) % 2 == 0:
        raise TypeError(f"{where}: expected a tuple of bytes with a slot code between each two")
    for i, item in enumerate(program):
        if i % 2 == 0:
            if type(item) is not bytes:
                raise TypeError(f"{where}[{i}]: expected bytes, got {type(item).__name__}")
        elif type(item) is not int or not lo <= item < hi:
            raise ValueError(f"{where}[{i}]: expected a slot code from {lo} to {hi - 1}")
    return 0


cdef int _program_of(tuple program, _Program* out, Py_ssize_t* bound) except -1:
    # A checked program's pieces and slots (pointers into its bytes, which the caller holds).
    cdef Py_ssize_t n = len(program) // 2, i
    out.piece = <const char**>calloc(n + 1, sizeof(char*))
    out.size = <Py_ssize_t*>calloc(n + 1, sizeof(Py_ssize_t))
    out.slot = <int*>calloc(n + 1, sizeof(int))
    if out.piece == NULL or out.size == NULL or out.slot == NULL:
        raise MemoryError()
    out.n = n
    for i in range(n + 1):
        piece = <bytes>program[2 * i]
        out.piece[i] = piece
        out.size[i] = len(piece)
        bound[0] += len(piece)
        if i < n:
            out.slot[i] = <int>program[2 * i + 1]
            # the longest value a slot writes: 20 digits, a status, a reason, a missed reason
            bound[0] += 24
    return 0


cdef int _template_of(tuple template, Py_ssize_t nsteps, _Template* t) except -1:
    # The programs, and the most an entry can write: the head once, the steps and the
    # fragments (with brackets and commas) once for each slot that writes them, the id for
    # each slot that writes it (t.ids times its length).
    cdef Py_ssize_t head = 0, steps = 2 + nsteps, fragments = 5, k
    _program_of(template[0], &t.head, &head)
    t.steps = <_Program*>calloc(nsteps + 1, sizeof(_Program))
    if t.steps == NULL:
        raise MemoryError()
    t.nsteps = nsteps
    for k in range(nsteps):
        _program_of(template[1][k], &t.steps[k], &steps)
    for k in range(3):
        _program_of(template[2][k], &t.fragments[k], &fragments)
    t.bound = head
    t.ids = 0
    for k in range(t.head.n):
        if t.head.slot[k] == _SLOT_STEPS:
            t.bound += steps
        elif t.head.slot[k] == _SLOT_FRAGMENTS:
            t.bound += fragments
        elif t.head.slot[k] == _SLOT_ID:
            t.ids += 1
    return 0


cdef void _program_free(_Program* p) noexcept:
    free(p.piece)
    free(p.size)
    free(p.slot)


cdef void _template_free(_Template* t) noexcept:
    cdef Py_ssize_t k
    _program_free(&t.head)
    if t.steps != NULL:
        for k in range(t.nsteps):
            _program_free(&t.steps[k])
        free(t.steps)
    for k in range(3):
        _program_free(&t.fragments[k])


cdef inline Py_ssize_t _put_int(char* out, int64_t v) noexcept nogil:
    cdef char tmp[24]
    cdef int i = 0, j = 0
    cdef uint64_t u = <uint64_t>v
    if v < 0:
        out[0] = 45
        j = 1
        u = (~u) + 1
    while True:
        tmp[i] = <char>(48 + u % 10)
        i += 1
        u //= 10
        if u == 0:
            break
    while i:
        i -= 1
        out[j] = tmp[i]
        j += 1
    return j


cdef inline Py_ssize_t _put_bytes(char* out, const char* text, Py_ssize_t n) noexcept nogil:
    memcpy(out, text, n)
    return n


cdef const char* _STATUS_JSON[3]
_STATUS_JSON[0] = b'"skipped"'
_STATUS_JSON[1] = b'"unchanged"'
_STATUS_JSON[2] = b'"applied"'
cdef const char* _REASON_JSON[7]
_REASON_JSON[0] = b'"not-triggered"'
_REASON_JSON[1] = b'"target-reached"'
_REASON_JSON[2] = b'"within-target"'
_REASON_JSON[3] = b'"keep-groups-floor"'
_REASON_JSON[4] = b'"trimmed"'
_REASON_JSON[5] = b'"fragment-absent"'
_REASON_JSON[6] = b'"fragment-empty"'
# A missed reason's JSON by its code (0: none), as the twin writes it; the texts are held here.
cdef list _MISSED_TEXT = []
cdef const char* _MISSED_JSON[8]


cdef int _missed_json() except -1:
    cdef int i
    assert CP_MISSED_COUNT < 8
    _MISSED_TEXT.append(b"null")
    for i in range(CP_MISSED_COUNT):
        _MISSED_TEXT.append(b'"' + <bytes>cp_missed_names[i] + b'"')
    for i in range(CP_MISSED_COUNT + 1):
        assert len(_MISSED_TEXT[i]) <= 24  # the most _program_of allows a slot
        _MISSED_JSON[i] = _MISSED_TEXT[i]
    return 0


_missed_json()


cdef Py_ssize_t _put_value(char* out, int slot, const int64_t* v, const char* text,
                           Py_ssize_t size) noexcept nogil:
    # One slot's value: v[slot], as the slot writes it (text: the id's JSON).
    if slot == _SLOT_ID:
        return _put_bytes(out, text, size)
    if slot == _SLOT_TRIGGERED or slot == _SLOT_TARGET_REACHED or slot == _SLOT_CHANGED:
        return _put_bytes(out, b"true", 4) if v[slot] else _put_bytes(out, b"false", 5)
    if slot == _SLOT_STATUS:
        return _put_bytes(out, _STATUS_JSON[v[slot]], strlen(_STATUS_JSON[v[slot]]))
    if slot == _SLOT_REASON:
        return _put_bytes(out, _REASON_JSON[v[slot]], strlen(_REASON_JSON[v[slot]]))
    if slot == _SLOT_MISSED:
        return _put_bytes(out, _MISSED_JSON[v[slot]], strlen(_MISSED_JSON[v[slot]]))
    if _SLOT_STATUS < slot < _SLOT_MESSAGES_REMOVED and v[_SLOT_STATUS] == _STEP_SKIPPED:
        return _put_bytes(out, b"null", 4)
    return _put_int(out, v[slot])


cdef Py_ssize_t _put_program(char* out, const _Program* g, int64_t* v, const char* text,
                             Py_ssize_t size, const _Template* t, _LineScan sc,
                             const int64_t* steps_rec, const bint* present,
                             const Py_ssize_t* bounds, Py_ssize_t h0) noexcept nogil:
    cdef Py_ssize_t at = _put_bytes(out, g.piece[0], g.size[0]), i, k, f, lo, kept_lo
    cdef bint first
    cdef const int64_t* rec
    for i in range(g.n):
        if g.slot[i] == _SLOT_STEPS:
            out[at] = 91
            at += 1
            for k in range(t.nsteps):
                if k:
                    out[at] = 44
                    at += 1
                rec = steps_rec + 7 * k
                v[_SLOT_STATUS] = rec[0]
                v[_SLOT_REASON] = rec[1]
                for f in range(2, 7):
                    v[_SLOT_STATUS + f] = rec[f] if rec[0] != _STEP_SKIPPED or f == 6 else 0
                at += _put_program(out + at, &t.steps[k], v, text, size, t, sc, steps_rec,
                                   present, bounds, h0)
            out[at] = 93
            at += 1
        elif g.slot[i] == _SLOT_FRAGMENTS:
            out[at] = 91
            at += 1
            first = True
            for f in range(3):
                if not present[f]:
                    continue
                if not first:
                    out[at] = 44
                    at += 1
                first = False
                lo = bounds[f]
                kept_lo = h0 if f == 1 else lo
                v[_SLOT_FRAGMENT_CHARS_BEFORE] = _sum(sc.chars, lo, bounds[f + 1])
                v[_SLOT_FRAGMENT_CHARS_BEFORE + 1] = _sum(sc.chars, kept_lo, bounds[f + 1])
                v[_SLOT_FRAGMENT_CHARS_BEFORE + 2] = bounds[f + 1] - lo
                v[_SLOT_FRAGMENT_CHARS_BEFORE + 3] = bounds[f + 1] - kept_lo
                v[_SLOT_CHANGED] = f == 1 and h0 != bounds[1]
                at += _put_program(out + at, &t.fragments[f], v, text, size, t, sc, steps_rec,
                                   present, bounds, h0)
            out[at] = 93
            at += 1
        else:
            at += _put_value(out + at, g.slot[i], v, text, size)
        at += _put_bytes(out + at, g.piece[i + 1], g.size[i + 1])
    return at


cdef bint _put_entry(const _Template* t, _Buf* b, _LineReducer r, _LineScan sc,
                     const uint8_t* p, Py_ssize_t nsteps, const int64_t* row,
                     const int64_t* steps_rec, const int64_t* cuts) except -1 nogil:
    # The report entry of a line _reduce_core took, as the twin's _entry writes it from its
    # records; False (nothing written) where the twin gives none.
    if r.s.nwarn or row[CP_FIGURE_UNKNOWN_ROLES]:
        return False
    cdef const char* text = b"null"
    cdef Py_ssize_t size = 4, i
    if sc.id_start >= 0:
        text = <const char*>(p + sc.id_start)
        size = sc.id_end - sc.id_start
        if not _written_back(<const uint8_t*>text, size):
            return False
    cdef Py_ssize_t m = sc.m, head = cuts[_HEAD], tail = cuts[_TAIL], h0 = cuts[_KEPT]
    cdef Py_ssize_t bounds[4]
    bounds[0], bounds[1], bounds[2], bounds[3] = 0, head, tail, m
    cdef bint present[3]
    present[0] = head > 0
    present[1] = tail > head
    present[2] = tail < m
    cdef int64_t v[_SLOTS]
    memset(v, 0, sizeof(v))
    v[1] = cuts[_FIRED]
    v[2] = row[CP_FIGURE_CHARS_BEFORE]
    v[3] = row[CP_FIGURE_MESSAGES_BEFORE]
    v[4] = present[0] + present[1] + present[2]
    v[5] = _sum(sc.opaque, 0, m)
    v[6] = row[CP_FIGURE_CHARS_AFTER]
    v[7] = row[CP_FIGURE_MESSAGES_AFTER]
    v[8] = _sum(sc.opaque, 0, head) + _sum(sc.opaque, h0, m)
    v[9] = cuts[_REACHED]
    v[_SLOT_MISSED] = cuts[_MISSED]
    cdef Py_ssize_t need = b.n + t.bound + t.ids * size
    if need > b.cap:
        b.cap = max(need, 2 * b.cap, 4096)
        b.p = <char*>_regrow(b.p, b.cap)
    b.n += _put_program(b.p + b.n, &t.head, v, text, size, t, sc, steps_rec, present, bounds,
                        h0)
    return True


cdef bint _written_back(const uint8_t* s, Py_ssize_t n) noexcept nogil:
    # Whether dumps(loads(s)) is s, for a JSON value the scan validated (as the twin says).
    cdef Py_ssize_t i = 0
    if n >= 1 and s[0] == 34:
        return memchr(s, 92, n) == NULL
    if (n == 4 and (memcmp(s, b"null", 4) == 0 or memcmp(s, b"true", 4) == 0)) or (
            n == 5 and memcmp(s, b"false", 5) == 0):
        return True
    if n >= 1 and s[0] == 45:
        i = 1
    if n - i < 1 or n - i > 18:
        return False
    if s[i] == 48:
        return n - i == 1 and i == 0
    while i < n:
        if not (48 <= s[i] <= 57):
            return False
        i += 1
    return True


cdef enum:
    _STEP_SKIPPED = 0
    _STEP_UNCHANGED = 1
    _STEP_APPLIED = 2
    # reasons
    _NOT_TRIGGERED = 0
    _TARGET_REACHED = 1
    _WITHIN_TARGET = 2
    _KEEP_GROUPS_FLOOR = 3
    _TRIMMED = 4
    _FRAGMENT_ABSENT = 5
    _FRAGMENT_EMPTY = 6
    # what _reduce_core leaves in cut[] for the records
    _HEAD = 0
    _TAIL = 1
    _KEPT = 2
    _FIRED = 3
    _REACHED = 4
    _MISSED = 5
    _CUTS = 6


cdef int _line_warnings(_LineReducer r, _LineScan sc, const uint8_t* p, _Rows* s,
                       Py_ssize_t head, Py_ssize_t h0, Py_ssize_t tail,
                       int64_t* counts) except -1 nogil:
    # The pairing warnings of a line's result, fragment by fragment (in s), and its unknown
    # roles (a warning per role and fragment): counts gets the orphans, the unanswered calls
    # and the unknown-role warnings.
    cdef Py_ssize_t f, i, a_lo, a_hi
    cdef Py_ssize_t bounds[4]
    bounds[0], bounds[1], bounds[2], bounds[3] = 0, head, tail, sc.m
    cdef uint8_t any_tool
    counts[0] = counts[1] = counts[2] = 0
    for f in range(3):
        a_lo = h0 if f == 1 else bounds[f]
        a_hi = bounds[f + 1]
        any_tool = 0
        for i in range(a_lo, a_hi):
            any_tool |= sc.flags[i]
        if any_tool & (F_RESULT | F_CALLS):
            _rows_warnings(s, 0, f, a_lo, a_hi)
        if any_tool & F_UNKNOWN:
            counts[2] += r.unknown_roles(sc, p, a_lo, a_hi)
    r.stamp = s.stamp
    for i in range(s.nwarn):
        if s.w_code[i] == 0:
            counts[0] += 1
        else:
            counts[1] += 1
    return 0


cdef inline bint _json_space(uint8_t c) noexcept nogil:
    return c == 32 or c == 9 or c == 10 or c == 13


cdef Py_ssize_t _write_line(_LineScan sc, const uint8_t* p, Py_ssize_t lo, Py_ssize_t hi,
                            Py_ssize_t head, Py_ssize_t h0, char* out,
                            Py_ssize_t at) noexcept nogil:
    # The line without the whitespace around it, written at out + at, its messages head:h0
    # left out (the others copied byte for byte), and a newline; returns where it ends.
    cdef Py_ssize_t i, j = 0, start = lo, stop = hi
    while start < stop and _json_space(p[start]):
        start += 1
    while stop > start and _json_space(p[stop - 1]):
        stop -= 1
    if h0 == head:
        memcpy(out + at, p + start, stop - start)
        at += stop - start
    else:
        memcpy(out + at, p + start, sc.array_start - start)
        at += sc.array_start - start
        out[at] = 91  # [
        at += 1
        for i in range(sc.m):
            if head <= i < h0:
                continue
            if j:
                out[at] = 44  # ,
                at += 1
            j += 1
            memcpy(out + at, p + sc.m_start[i], sc.m_end[i] - sc.m_start[i])
            at += sc.m_end[i] - sc.m_start[i]
        out[at] = 93  # ]
        at += 1
        memcpy(out + at, p + sc.array_end, stop - sc.array_end)
        at += stop - sc.array_end
    out[at] = 10
    return at + 1


cdef Py_ssize_t _reduce_core(_LineReducer r, _LineScan sc, const uint8_t* p, Py_ssize_t lo,
                             Py_ssize_t hi, const int64_t* specs, Py_ssize_t nsteps,
                             int64_t trigger_chars, int64_t watermark_chars, char* out,
                             Py_ssize_t at, int64_t* row, int64_t* steps_out,
                             int64_t* cut_out) except -2 nogil:
    # One line: -1 when it takes the object path; otherwise its output is written at out + at
    # (the return value: where it ends), its figures in row, per step (status, reason, chars
    # before, chars after, groups before, groups after, messages removed) in steps_out (7
    # entries a step), where it split and cut in cut_out, its warnings in r.s.
    if sc.scan(p, lo, hi):
        return -1
    cdef Py_ssize_t m = sc.m, head = 0, tail, h0, cut, k
    cdef Py_ssize_t ncodes = r.codes(sc, p)
    cdef _Rows* s = &r.s
    r.rows(sc, s, ncodes)
    while head < m and (sc.roles[head] == CP_ROLE_SYSTEM or sc.roles[head] == CP_ROLE_DEVELOPER):
        head += 1
    tail = m
    if tail > head and sc.roles[m - 1] == R_USER and not (sc.flags[m - 1] & F_RESULT):
        tail -= 1
    cdef int64_t total = _sum(sc.chars, 0, m), hist, kept_chars, removed, ngroups
    cdef bint fired = trigger_chars >= 0 and total > trigger_chars
    cdef int64_t b_chars = total
    cdef int64_t messages_removed = 0, groups_removed = 0
    cdef int64_t* rec
    cdef bint floor = False
    h0 = head
    hist = _sum(sc.chars, head, tail)
    for k in range(nsteps):
        rec = steps_out + 7 * k
        if not fired or not (watermark_chars >= 0 and total > watermark_chars):
            rec[0] = _STEP_SKIPPED
            rec[1] = _NOT_TRIGGERED if not fired else _TARGET_REACHED
            rec[6] = 0
            continue
        if h0 == tail:  # no history, or an earlier step left none
            rec[0] = _STEP_SKIPPED
            rec[1] = _FRAGMENT_ABSENT if tail == head else _FRAGMENT_EMPTY
            rec[6] = 0
            continue
        cut = _rows_cut(s, h0, tail, <int>specs[3 * k], specs[3 * k + 1], specs[3 * k + 2],
                        &removed, &ngroups)
        rec[4] = ngroups
        if cut == h0:
            rec[0] = _STEP_UNCHANGED
            rec[1] = _WITHIN_TARGET if hist <= specs[3 * k + 2] else _KEEP_GROUPS_FLOOR
            floor = floor or rec[1] == _KEEP_GROUPS_FLOOR
            rec[2] = rec[3] = hist
            rec[5] = ngroups
            rec[6] = 0
            continue
        kept_chars = hist - _sum(sc.chars, h0, cut)
        rec[0] = _STEP_APPLIED
        rec[1] = _TRIMMED if kept_chars <= specs[3 * k + 2] else _KEEP_GROUPS_FLOOR
        floor = floor or rec[1] == _KEEP_GROUPS_FLOOR
        rec[2] = hist
        rec[3] = kept_chars
        rec[5] = ngroups - removed
        rec[6] = cut - h0
        total -= hist - kept_chars
        hist = kept_chars
        messages_removed += cut - h0
        groups_removed += removed
        h0 = cut
    cdef int64_t counts[3]  # orphans, unanswered calls, unknown roles
    _line_warnings(r, sc, p, s, head, h0, tail, counts)
    at = _write_line(sc, p, lo, hi, head, h0, out, at)
    cdef bint reached = not (watermark_chars >= 0 and total > watermark_chars)
    # Why a triggered line missed its target: what no trim may reduce (all but the history, and
    # the history too without a trim) over the target, else a keepGroups floor, else nothing
    # more a trim could do.
    cdef int64_t missed = CP_MISSED_NONE
    if fired and not reached:
        missed = _missed_code((total - hist if nsteps else total) > watermark_chars, False,
                              floor)
    row[CP_FIGURE_HANDLED] = 1
    row[CP_FIGURE_TRIGGERED] = fired
    row[CP_FIGURE_REACHED] = reached
    row[CP_FIGURE_CHARS_BEFORE] = b_chars
    row[CP_FIGURE_CHARS_AFTER] = total
    row[CP_FIGURE_MESSAGES_BEFORE] = m
    row[CP_FIGURE_MESSAGES_AFTER] = m - messages_removed
    row[CP_FIGURE_MESSAGES_REMOVED] = messages_removed
    row[CP_FIGURE_GROUPS_REMOVED] = groups_removed
    row[CP_FIGURE_ORPHAN_RESULTS] = counts[0]
    row[CP_FIGURE_UNANSWERED_CALLS] = counts[1]
    row[CP_FIGURE_REDUCED] = total < b_chars or messages_removed > 0
    for k in range(CP_MISSED_COUNT):
        row[CP_FIGURE_MISSED + k] = missed == k + 1
    row[CP_FIGURE_UNKNOWN_ROLES] = counts[2]
    cut_out[_HEAD] = head
    cut_out[_TAIL] = tail
    cut_out[_KEPT] = h0
    cut_out[_FIRED] = fired
    cut_out[_REACHED] = reached
    cut_out[_MISSED] = missed
    return at


cdef tuple _STATUSES = ("skipped", "unchanged", "applied")
cdef tuple _REASONS = ("not-triggered", "target-reached", "within-target", "keep-groups-floor",
                       "trimmed", "fragment-absent", "fragment-empty")


cdef list _unknown_records(_LineScan sc, const uint8_t* p, Py_ssize_t lo, Py_ssize_t hi,
                           object fragment):
    # The unknown-role records of messages lo:hi (fragment index ``fragment``): per role, in
    # the order of first appearance, (fragment, first index, "unknown-role", (role, messages)).
    cdef dict found = {}
    cdef list entry
    cdef Py_ssize_t i
    for i in range(lo, hi):
        if not (sc.flags[i] & F_UNKNOWN):
            continue
        key = PyBytes_FromStringAndSize(<const char*>(p + sc.role_at[i]), sc.role_len[i])
        entry = found.get(key)
        if entry is None:
            found[key] = [i - lo, 1]
        else:
            entry[1] += 1
    return [_warning(fragment, entry[0], "unknown-role", ((<bytes>key).decode("utf-8"), entry[1]))
            for key, entry in found.items()]


cdef tuple _records(_LineReducer r, _LineScan sc, const uint8_t* p, Py_ssize_t nsteps,
                    const int64_t* row, const int64_t* steps_rec, const int64_t* cuts):
    # The records of reduce_transcript for a line _reduce_core took, and its id's span.
    cdef Py_ssize_t m = sc.m, head = cuts[_HEAD], tail = cuts[_TAIL], h0 = cuts[_KEPT]
    cdef Py_ssize_t bounds[4]
    bounds[0], bounds[1], bounds[2], bounds[3] = 0, head, tail, m
    cdef bint present[3]
    present[0] = head > 0
    present[1] = tail > head
    present[2] = tail < m
    cdef list ids = [], before = [], after = [], kept = [], warnings = [], done = []
    cdef list index_of = [None, None, None]
    cdef Py_ssize_t f, a_lo, a_hi, kept_lo, i, k
    cdef int64_t a_opaque = 0
    cdef const int64_t* rec
    for k in range(nsteps):
        rec = steps_rec + 7 * k
        if rec[0] == _STEP_SKIPPED:
            done.append(_skipped(_REASONS[rec[1]]))
        else:
            done.append(_step(_STATUSES[rec[0]], _REASONS[rec[1]], rec[2], rec[3], rec[4], rec[5],
                              rec[6]))
    for f in range(3):
        if not present[f]:
            continue
        index_of[f] = len(ids)
        ids.append(("system", "history", "question")[f])
        a_lo, a_hi = bounds[f], bounds[f + 1]
        before.append(_figures(_sum(sc.chars, a_lo, a_hi), a_hi - a_lo,
                               _sum(sc.opaque, a_lo, a_hi)))
        kept_lo = h0 if f == 1 else a_lo
        a_opaque += _sum(sc.opaque, kept_lo, a_hi)
        after.append(_figures(_sum(sc.chars, kept_lo, a_hi), a_hi - kept_lo,
                              _sum(sc.opaque, kept_lo, a_hi)))
        kept.append(True if f == 1 and h0 != head else None)
        if row[CP_FIGURE_UNKNOWN_ROLES]:
            warnings += _unknown_records(sc, p, kept_lo, a_hi, index_of[f])
    cdef _Rows* s = &r.s
    for i in range(s.nwarn):
        warnings.append(_warning(
            index_of[s.w_frag[i]], s.w_index[i],
            "orphan-tool-result" if s.w_code[i] == 0 else "unanswered-tool-call",
            _id_text(p, r, s.w_id[i])))
    id_span = None if sc.id_start < 0 else (sc.id_start, sc.id_end)
    return (_record(bool(cuts[_FIRED]), before, after if nsteps else before, kept, done,
                    warnings, None, ids, row[CP_FIGURE_CHARS_BEFORE],
                    row[CP_FIGURE_MESSAGES_BEFORE], _sum(sc.opaque, 0, m),
                    row[CP_FIGURE_CHARS_AFTER], row[CP_FIGURE_MESSAGES_AFTER], a_opaque,
                    row[CP_FIGURE_MESSAGES_REMOVED], row[CP_FIGURE_GROUPS_REMOVED],
                    cuts[_REACHED] != 0), id_span)
