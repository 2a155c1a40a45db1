# JSONL lines read as bytes: reduce_lines and line_bounds, the reduction of the lines
# _lines.pxi scans (the twin: contextpolicy/_lines_py.py). Included by _kernel_c.pyx.

cdef inline uint64_t _hash(const uint8_t* p, Py_ssize_t n) noexcept nogil:
    cdef uint64_t h = 14695981039346656037ULL
    cdef Py_ssize_t i
    for i in range(n):
        h = (h ^ p[i]) * 1099511628211ULL
    return h


@cython.final
cdef class _LineReducer:
    """reduce_lines' state: the scan, the ids as codes and the scratch of the pairing pass,
    reused from line to line (the pairing stamps only ever grow)."""

    cdef _LineScan scan
    cdef Py_ssize_t codes_cap, table_cap, state_cap, group_cap, warn_cap, roles_cap
    cdef int64_t* call_codes
    cdef int64_t* res_codes
    cdef int64_t* code_at
    cdef int64_t* code_len
    cdef int64_t* table  # code + 1 per slot, 0: empty
    cdef int64_t* roles_table  # message + 1 per slot (the first with its role), 0: empty
    cdef int64_t* called
    cdef int64_t* pend_stamp
    cdef int64_t* pend_at
    cdef int64_t* orphan
    cdef int64_t* starts
    cdef int64_t* w
    cdef int64_t stamp
    cdef _Rows s  # the pairing pass's state for the line at hand, and its warnings

    def __cinit__(self):
        self.scan = _LineScan()
        self.codes_cap = self.table_cap = self.state_cap = self.group_cap = self.warn_cap = 0
        self.roles_cap = 0
        self.roles_table = NULL
        self.call_codes = self.res_codes = self.code_at = self.code_len = self.table = NULL
        self.called = self.pend_stamp = self.pend_at = self.orphan = self.starts = NULL
        self.w = NULL
        self.stamp = 0

    def __dealloc__(self):
        free(self.call_codes)
        free(self.res_codes)
        free(self.code_at)
        free(self.code_len)
        free(self.table)
        free(self.roles_table)
        free(self.called)
        free(self.pend_stamp)
        free(self.pend_at)
        free(self.orphan)
        free(self.starts)
        free(self.w)

    cdef int _zeroed(self, int64_t** p, Py_ssize_t n) except -1 nogil:
        # A fresh zeroed block of n entries in place of *p.
        free(p[0])
        p[0] = <int64_t*>calloc(n if n > 0 else 1, 8)
        if p[0] == NULL:
            with gil:
                raise MemoryError()
        return 0

    cdef Py_ssize_t codes(self, _LineScan sc, const uint8_t* p) except -1 nogil:
        # Dense codes for the line's ids, by their bytes: call_codes, res_codes (-1: none).
        cdef Py_ssize_t total = sc.ncalls + sc.nres, size = 16, j, slot, ncodes = 0
        cdef int64_t at, n, code
        cdef uint64_t mask
        if total > self.codes_cap:
            self.call_codes = <int64_t*>_regrow(self.call_codes, total * 8)
            self.res_codes = <int64_t*>_regrow(self.res_codes, total * 8)
            self.code_at = <int64_t*>_regrow(self.code_at, total * 8)
            self.code_len = <int64_t*>_regrow(self.code_len, total * 8)
            self.codes_cap = total
        while size < 2 * total:
            size *= 2
        if size > self.table_cap:
            free(self.table)
            self.table = <int64_t*>malloc(size * 8)
            if self.table == NULL:
                self.table_cap = 0
                with gil:
                    raise MemoryError()
            self.table_cap = size
        memset(self.table, 0, size * 8)
        mask = <uint64_t>(size - 1)
        for j in range(total):
            if j < sc.ncalls:
                at, n = sc.call_at[j], sc.call_len[j]
            else:
                at, n = sc.res_at[j - sc.ncalls], sc.res_len[j - sc.ncalls]
            if at < 0:
                code = -1
            else:
                slot = <Py_ssize_t>(_hash(p + at, n) & mask)
                while True:
                    code = self.table[slot] - 1
                    if code < 0:
                        code = ncodes
                        self.code_at[code] = at
                        self.code_len[code] = n
                        self.table[slot] = code + 1
                        ncodes += 1
                        break
                    if self.code_len[code] == n and memcmp(p + self.code_at[code], p + at,
                                                           n) == 0:
                        break
                    slot = (slot + 1) & (size - 1)
            if j < sc.ncalls:
                self.call_codes[j] = code
            else:
                self.res_codes[j - sc.ncalls] = code
        return ncodes

    cdef Py_ssize_t unknown_roles(self, _LineScan sc, const uint8_t* p, Py_ssize_t lo,
                                  Py_ssize_t hi) except -1 nogil:
        # How many roles the accounting does not know messages lo:hi carry, each counted once
        # (by its bytes): the unknown-role warnings of a fragment.
        cdef Py_ssize_t count = 0, size = 16, i, slot, distinct = 0
        cdef int64_t held
        cdef uint64_t mask
        for i in range(lo, hi):
            if sc.flags[i] & F_UNKNOWN:
                count += 1
        if count == 0:
            return 0
        while size < 2 * count:
            size *= 2
        if size > self.roles_cap:
            free(self.roles_table)
            self.roles_table = <int64_t*>malloc(size * 8)
            if self.roles_table == NULL:
                self.roles_cap = 0
                with gil:
                    raise MemoryError()
            self.roles_cap = size
        memset(self.roles_table, 0, size * 8)
        mask = <uint64_t>(size - 1)
        for i in range(lo, hi):
            if not (sc.flags[i] & F_UNKNOWN):
                continue
            slot = <Py_ssize_t>(_hash(p + sc.role_at[i], sc.role_len[i]) & mask)
            while True:
                held = self.roles_table[slot] - 1
                if held < 0:
                    self.roles_table[slot] = i + 1
                    distinct += 1
                    break
                if sc.role_len[held] == sc.role_len[i] and memcmp(
                        p + sc.role_at[held], p + sc.role_at[i], sc.role_len[i]) == 0:
                    break
                slot = (slot + 1) & (size - 1)
        return distinct

    cdef int rows(self, _LineScan sc, _Rows* s, Py_ssize_t ncodes) except -1 nogil:
        # The pairing pass's scratch for this line, in s.
        cdef Py_ssize_t m = sc.m
        if ncodes + 1 > self.state_cap:
            self._zeroed(&self.called, ncodes + 1)
            self._zeroed(&self.pend_stamp, ncodes + 1)
            self._zeroed(&self.pend_at, ncodes + 1)
            self.state_cap = ncodes + 1
        if 2 * m + 1 > self.group_cap or sc.nres + 1 > self.group_cap:
            self.group_cap = 2 * m + 1 if 2 * m + 1 > sc.nres + 1 else sc.nres + 1
            self._zeroed(&self.starts, self.group_cap)
            self._zeroed(&self.orphan, self.group_cap)
        if 5 * (sc.ncalls + sc.nres) + 5 > self.warn_cap:
            self.warn_cap = 5 * (sc.ncalls + sc.nres) + 5
            self._zeroed(&self.w, self.warn_cap)
        cdef Py_ssize_t cap = sc.ncalls + sc.nres + 1
        s.roles = sc.roles
        s.flags = sc.flags
        s.chars = sc.chars
        s.call_off = sc.call_off
        s.call_codes = self.call_codes
        s.res_off = sc.res_off
        s.result_codes = self.res_codes
        s.called = self.called
        s.pend_stamp = self.pend_stamp
        s.pend_at = self.pend_at
        s.orphan = self.orphan
        s.starts = self.starts
        s.gchars = self.starts + m + 1
        s.stamp = self.stamp
        s.w_row = self.w
        s.w_frag = self.w + cap
        s.w_index = self.w + 2 * cap
        s.w_code = self.w + 3 * cap
        s.w_id = self.w + 4 * cap
        s.nwarn = 0
        return 0


cdef inline int64_t _sum(const int64_t* a, Py_ssize_t lo, Py_ssize_t hi) noexcept nogil:
    cdef int64_t t = 0
    cdef Py_ssize_t i
    for i in range(lo, hi):
        t += a[i]
    return t


cdef object _id_text(const uint8_t* p, _LineReducer r, int64_t code):
    if code < 0:
        return None
    return PyUnicode_DecodeUTF8(<const char*>(p + r.code_at[code]), r.code_len[code], NULL)


def reduce_lines(data, starts, stops, tuple steps, int64_t trigger_chars,
                 int64_t watermark_chars, bint raw=False):
    """:func:`reduce_transcript` of transcript lines read and written as bytes (see the
    twin)."""
    return _lines(data, starts, stops, steps, trigger_chars, watermark_chars, raw, False, None)


def report_lines(data, starts, stops, tuple steps, int64_t trigger_chars,
                 int64_t watermark_chars, template):
    """:func:`reduce_lines`, and each line's report entry written from ``template`` (see the
    twin)."""
    return _lines(data, starts, stops, steps, trigger_chars, watermark_chars, False, True,
                  template)


cdef list _history_trims(tuple steps):
    # reduce_lines' steps, checked: (grouping, keep_groups, target_chars) per trim of the history.
    if steps is None:
        raise TypeError("steps: expected a tuple of trims, got None")
    cdef list checked = []
    cdef int grouping
    cdef int64_t keep, target
    for step in steps:
        fid, grouping, keep, target = step
        if fid != "history" or type(fid) is not str:
            raise ValueError(f"reduce_lines trims the history only; a step names {fid!r}")
        if grouping != CP_GROUP_USER_TURN and grouping != CP_GROUP_MESSAGE:
            raise ValueError(f"unknown grouping code {grouping}")
        if keep < 0 or target < 0:
            raise ValueError("keep_groups and target_chars must be >= 0")
        checked.append((grouping, keep, target))
    return checked


cdef object _flat_bytes(object data):
    # data as a flat, contiguous memoryview of bytes.
    try:
        view = memoryview(data)
    except TypeError:
        raise TypeError(f"expected a bytes-like object, got {type(data).__name__}") from None
    if view.ndim != 1 or view.itemsize != 1 or not view.c_contiguous:
        view.release()
        raise ValueError("expected a flat, contiguous buffer of bytes")
    return view.cast("B")


cdef object _int64_copy(object values):
    # A private copy of values as int64: a list as array.array does it (no numpy), anything
    # else as numpy's ascontiguousarray does (the twin's c_int64_copy, alike).
    if type(values) is list:
        return array.array("q", values)
    return np.array(np.ascontiguousarray(values, dtype=np.int64), copy=True)


cdef object _int64_zeros(Py_ssize_t n):
    # n zeros, int64, in an array.array (a buffer numpy is not needed for).
    return carray.clone(_INT64_TEMPLATE, n, True)


cdef carray.array _INT64_TEMPLATE = array.array("q")


cdef tuple _line_spans(object starts, object stops, Py_ssize_t size):
    # Where each line lies, checked against a buffer of size bytes, as private copies (read
    # again without the GIL), with the room their outputs take and the longest line's.
    lo_a = _int64_copy(starts)
    hi_a = _int64_copy(stops)
    cdef const int64_t[::1] lo = lo_a, hi = hi_a
    cdef Py_ssize_t n = lo.shape[0], k, total = 0, longest = 0
    if hi.shape[0] != n:
        raise ValueError(f"starts and stops differ in length ({n} != {hi.shape[0]})")
    for k in range(n):
        if not (0 <= lo[k] <= hi[k] <= size):
            raise ValueError(f"line {lo[k]}..{hi[k]} lies outside the buffer of {size} bytes")
        total += hi[k] - lo[k] + 1
        longest = max(longest, hi[k] - lo[k] + 1)
    return lo_a, hi_a, total, longest


cdef inline int64_t* _row(int64_t* fig, Py_ssize_t k) noexcept nogil:
    # line k's figures
    return fig + k * CP_FIGURE_COUNT


cdef int _records_again(_LineReducer r, const uint8_t* p, const int64_t[::1] lo,
                        const int64_t[::1] hi, const uint8_t* missing, Py_ssize_t longest,
                        const int64_t* specs, Py_ssize_t nsteps, int64_t trigger_chars,
                        int64_t watermark_chars, int64_t* fig, int64_t* steps_rec,
                        list raws) except -1:
    # The records of the lines of the byte path the template wrote no entry for, from a second
    # reading of each (its output written to a scratch buffer and dropped), into raws.
    cdef int64_t cuts[_CUTS]
    cdef Py_ssize_t k
    cdef char* scratch = <char*>malloc(longest + 1)
    if scratch == NULL:
        raise MemoryError()
    try:
        for k in range(lo.shape[0]):
            if missing[k]:
                _reduce_core(r, r.scan, p, lo[k], hi[k], specs, nsteps, trigger_chars,
                             watermark_chars, scratch, 0, _row(fig, k), steps_rec, cuts)
                raws[k] = _records(r, r.scan, p, nsteps, _row(fig, k), steps_rec, cuts)
    finally:
        free(scratch)
    return 0


cdef tuple _lines(data, starts, stops, tuple steps, int64_t trigger_chars,
                  int64_t watermark_chars, bint raw, bint reports, object template):
    cdef list checked = _history_trims(steps)
    cdef Py_ssize_t nsteps = len(checked)
    cdef _Template tp
    if reports:
        # held for the call: the pieces are pointers into template's bytes
        template = _entry_template(template, nsteps)
    cdef const uint8_t[::1] buf = _flat_bytes(data)
    cdef Py_ssize_t size = buf.shape[0], k, total, longest
    spans = _line_spans(starts, stops, size)
    cdef const int64_t[::1] lo_a = spans[0], hi_a = spans[1]
    total, longest = spans[2], spans[3]
    cdef Py_ssize_t n = lo_a.shape[0]
    cdef const uint8_t* p = &buf[0] if size else NULL
    cdef int64_t spec[3 * 64]
    cdef int64_t* specs = spec
    cdef carray.array ends_a = _int64_zeros(n)
    # line k's figures at k * SCAN_FIGURES
    cdef carray.array figures_a = _int64_zeros(n * CP_FIGURE_COUNT)
    entry_ends_a = _int64_zeros(n if reports else 0)
    cdef int64_t[::1] ends = ends_a
    cdef int64_t[::1] entry_ends = entry_ends_a
    cdef int64_t* fig = <int64_t*>figures_a.data.as_longlongs
    cdef list raws = [] if raw else None
    cdef Py_ssize_t at = 0
    cdef _LineReducer r = _LineReducer()
    cdef _LineScan sc = r.scan
    # Written in place, once: no output is longer than its line and a newline.
    result = PyByteArray_FromStringAndSize(NULL, total)
    cdef char* out = PyByteArray_AS_STRING(result)
    cdef int64_t cuts[_CUTS]
    cdef int64_t* steps_rec = NULL
    cdef Py_ssize_t done_at
    cdef _Buf entries
    entries.p = NULL
    entries.n = entries.cap = 0
    cdef uint8_t* missing = NULL  # lines of the byte path without an entry
    cdef bint any_missing = False
    memset(&tp, 0, sizeof(tp))
    try:
        if nsteps > 64:
            specs = <int64_t*>malloc(sizeof(int64_t) * 3 * nsteps)
            if specs == NULL:
                raise MemoryError()
        for k in range(nsteps):
            specs[3 * k], specs[3 * k + 1], specs[3 * k + 2] = checked[k]
        steps_rec = <int64_t*>calloc(7 * nsteps + 1, 8)
        if steps_rec == NULL:
            raise MemoryError()
        if reports:
            _template_of(template, nsteps, &tp)
            missing = <uint8_t*>calloc(n + 1, 1)
            if missing == NULL:
                raise MemoryError()
        if raws is None:
            # Without records no Python object is made per line: other threads run meanwhile.
            with nogil:
                for k in range(n):
                    done_at = _reduce_core(r, sc, p, lo_a[k], hi_a[k], specs, nsteps,
                                           trigger_chars, watermark_chars, out, at, _row(fig, k),
                                           steps_rec, cuts)
                    if done_at >= 0:
                        at = done_at
                        if reports and not _put_entry(&tp, &entries, r, sc, p, nsteps,
                                                      _row(fig, k), steps_rec, cuts):
                            missing[k] = 1
                            any_missing = True
                    ends[k] = at
                    if reports:
                        entry_ends[k] = entries.n
        else:
            for k in range(n):
                done_at = _reduce_core(r, sc, p, lo_a[k], hi_a[k], specs, nsteps,
                                       trigger_chars, watermark_chars, out, at, _row(fig, k),
                                       steps_rec, cuts)
                if done_at < 0:
                    raws.append(None)
                else:
                    at = done_at
                    raws.append(_records(r, sc, p, nsteps, _row(fig, k), steps_rec, cuts))
                ends[k] = at
        if reports:
            raws = [None] * n
            if any_missing:
                _records_again(r, p, lo_a, hi_a, missing, longest, specs, nsteps,
                               trigger_chars, watermark_chars, fig, steps_rec, raws)
            written = PyByteArray_FromStringAndSize(entries.p, entries.n)
    finally:
        free(steps_rec)
        if specs != spec:
            free(specs)
        free(entries.p)
        free(missing)
        _template_free(&tp)
    PyByteArray_Resize(result, at)
    if reports:
        return result, ends_a, figures_a, written, entry_ends_a, raws
    return result, ends_a, figures_a, raws


cdef inline bint _blank_byte(uint8_t c) noexcept nogil:
    # A blank line holds nothing but JSON whitespace (a vertical tab or a form feed is none).
    return CP_JSON_WHITESPACE(c)


def line_bounds(data, Py_ssize_t offset, Py_ssize_t length):
    """The lines of ``data[offset:offset + length]`` and where the ones that are not blank lie
    (see the twin)."""
    try:
        view = memoryview(data)
    except TypeError:
        raise TypeError(f"expected a bytes-like object, got {type(data).__name__}") from None
    if view.ndim != 1 or view.itemsize != 1 or not view.c_contiguous:
        view.release()
        raise ValueError("expected a flat, contiguous buffer of bytes")
    cdef const uint8_t[::1] buf = view.cast("B")
    cdef Py_ssize_t size = buf.shape[0]
    if offset < 0 or length < 0 or offset > size or length > size - offset:
        raise ValueError(f"range {offset}+{length} lies outside the buffer of {size} bytes")
    cdef const uint8_t* p = &buf[0] if size else NULL
    cdef Py_ssize_t end = offset + length, at = offset, stop, i, count = 0, number = 0
    cdef const uint8_t* found
    cdef carray.array numbers_a, starts_a, stops_a
    # at most one line per newline, and one after the last
    cdef Py_ssize_t cap = 16
    cdef int64_t* lines = <int64_t*>malloc(3 * cap * 8)
    cdef int64_t* grown
    if lines == NULL:
        raise MemoryError()
    try:
        while at < end:
            found = <const uint8_t*>memchr(p + at, 10, end - at)
            stop = end if found == NULL else found - p
            number += 1
            i = at
            while i < stop and _blank_byte(p[i]):
                i += 1
            if i < stop:
                if count == cap:
                    grown = <int64_t*>realloc(lines, 6 * cap * 8)
                    if grown == NULL:
                        raise MemoryError()
                    lines = grown
                    cap *= 2
                lines[3 * count] = number
                lines[3 * count + 1] = at
                lines[3 * count + 2] = stop
                count += 1
            at = stop + 1
        numbers_a, starts_a, stops_a = _int64_zeros(count), _int64_zeros(count), _int64_zeros(
            count)
        for i in range(count):
            numbers_a.data.as_longlongs[i] = lines[3 * i]
            starts_a.data.as_longlongs[i] = lines[3 * i + 1]
            stops_a.data.as_longlongs[i] = lines[3 * i + 2]
    finally:
        free(lines)
    return number, numbers_a, starts_a, stops_a


cdef object _int64_view(object values):
    # values as a flat buffer of int64 (the twin's _int64_view, with its words)
    try:
        view = memoryview(values)
    except TypeError:
        raise TypeError("expected a flat buffer of int64, got "
                        f"{type(values).__name__}") from None
    if (view.ndim != 1 or view.itemsize != 8 or view.format not in ("q", "l")
            or not view.c_contiguous):
        message = (f"expected a flat buffer of int64, got one of format {view.format!r} and "
                   f"{view.ndim} dimension(s)")
        view.release()
        raise ValueError(message)
    return view


def figure_sums(figures, Py_ssize_t start, Py_ssize_t stop):
    """The sums of the figures of lines ``start`` to ``stop`` of a ``reduce_lines`` result (a
    list of ``SCAN_FIGURES`` ints; numpy's ``figures.reshape(-1, SCAN_FIGURES)[start:stop]
    .sum(axis=0)`` without numpy)."""
    cdef const int64_t[::1] fig = _int64_view(figures)
    if fig.shape[0] % CP_FIGURE_COUNT:
        raise ValueError(f"expected {SCAN_FIGURES} figures per line, got {fig.shape[0]} in all")
    if not 0 <= start <= stop <= fig.shape[0] // CP_FIGURE_COUNT:
        raise ValueError(f"lines {start}..{stop} lie outside the "
                         f"{fig.shape[0] // CP_FIGURE_COUNT} lines")
    # added as unsigned: beyond int64 a sum wraps, as numpy's does (the twin's too)
    cdef uint64_t sums[CP_FIGURE_COUNT]
    cdef Py_ssize_t k, j
    memset(sums, 0, sizeof(sums))
    for k in range(start, stop):
        for j in range(CP_FIGURE_COUNT):
            sums[j] += <uint64_t>fig[k * CP_FIGURE_COUNT + j]
    return [<int64_t>sums[j] for j in range(CP_FIGURE_COUNT)]
