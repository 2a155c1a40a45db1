# The columnar path: tool ids and content parts of Arrow columns (string_ids, arrange_ids,
# part_chars; the twin: contextpolicy/_column_parts_py.py). Included by _kernel_c.pyx.

cdef extern from *:
    """
    /* A 64-bit hash of n bytes, eight at a time, from a state keyed per process: ids come
     * from the data, and with a known start state strings that all collide can be computed
     * (each round can be undone), which would make a hash table quadratic. */
    static uint64_t cp_hash_key = 0x243F6A8885A308D3ULL;

    static inline uint64_t cp_hash_bytes(const uint8_t *p, int64_t n)
    {
        uint64_t h = cp_hash_key ^ ((uint64_t)n * 0xD6E8FEB86659FD93ULL);
        int64_t i = 0;
        for (; i + 8 <= n; i += 8) {
            uint64_t w;
            memcpy(&w, p + i, 8);
            h = (h ^ w) * 0x9E3779B97F4A7C15ULL;
            h ^= h >> 29;
        }
        if (i < n) {
            uint64_t w = 0;
            memcpy(&w, p + i, (size_t)(n - i));
            h = (h ^ w) * 0x9E3779B97F4A7C15ULL;
            h ^= h >> 29;
        }
        h *= 0xBF58476D1CE4E5B9ULL;
        return h ^ (h >> 31);
    }
    """
    uint64_t cp_hash_bytes(const uint8_t* p, int64_t n) noexcept nogil
    uint64_t cp_hash_key


cp_hash_key = int.from_bytes(os.urandom(8), "little")  # the hash's key, one per process


cdef struct _IdSource:
    const uint8_t* data
    int64_t size
    _Offs offs
    Py_ssize_t n
    const uint8_t* nulls
    const int64_t* at
    Py_ssize_t count
    int64_t* codes


cdef int _bind_id_source(_IdSource* src, Py_ssize_t s, object item, list keep,
                         list codes) except -1:
    # Source s of string_ids, checked and bound to src: its buffers and private copies kept
    # alive in keep, its (empty) codes array appended to codes.
    cdef const uint8_t[::1] buf
    cdef const uint8_t[::1] nul
    cdef const int64_t[::1] at
    cdef int64_t[::1] out
    cdef Py_ssize_t j
    if type(item) is not tuple or len(item) != 4:
        raise TypeError(f"string_ids: source {s} must be a tuple of "
                        f"(data, offsets, nulls, at)")
    data, offsets, nulls, positions = item
    buf_a = np.frombuffer(data, dtype=np.uint8)
    buf = buf_a
    o_a = _offsets_array(offsets, -1, "string_ids", "offsets")
    keep += [buf_a, o_a]
    _bind_offsets(&src.offs, o_a)
    src.data = &buf[0] if buf.shape[0] else NULL
    src.size = buf.shape[0]
    src.n = o_a.shape[0] - 1
    if nulls is not None:
        nulls_a = _flags_array(nulls, src.n, "string_ids", "nulls")
        nul = nulls_a
        keep.append(nulls_a)
        src.nulls = &nul[0] if nul.shape[0] else NULL
    if positions is not None:
        at_a = _as_positions(positions, "string_ids", "positions")
        at = at_a
        keep.append(at_a)
        for j in range(at.shape[0]):
            if at[j] < 0 or at[j] >= src.n:
                raise ValueError(f"string_ids: position {at[j]} of source {s} is "
                                 f"outside 0..{src.n - 1}")
        src.at = &at[0] if at.shape[0] else NULL
        src.count = at.shape[0]
    else:
        src.count = src.n
    code_a = np.empty(src.count, dtype=np.int64)
    codes.append(code_a)
    out = code_a
    src.codes = &out[0] if out.shape[0] else NULL
    return 0


cdef struct _IdTable:
    # The distinct strings seen so far: an open-addressing table of code + 1 (0: empty), and
    # each code's first string (where, how long, its hash) and its source and position.
    int64_t* slots
    uint64_t mask
    const uint8_t** first_ptr
    int64_t* first_len
    uint64_t* first_hash
    int64_t* first_src
    int64_t* first_idx
    int64_t ncodes


cdef inline int64_t _id_code(_IdTable* t, const uint8_t* p, int64_t length, int64_t s,
                             int64_t r) noexcept nogil:
    # The code of the string p[:length] (string r of source s), a new one if it is new.
    cdef uint64_t h = cp_hash_bytes(p, length)
    cdef uint64_t pos = h & t.mask
    cdef int64_t code
    while True:
        code = t.slots[pos] - 1
        if code < 0:
            code = t.ncodes
            t.ncodes += 1
            t.slots[pos] = code + 1
            t.first_ptr[code] = p
            t.first_len[code] = length
            t.first_hash[code] = h
            t.first_src[code] = s
            t.first_idx[code] = r
            return code
        if (t.first_hash[code] == h and t.first_len[code] == length and (
                length == 0 or memcmp(t.first_ptr[code], p, <size_t>length) == 0)):
            return code
        pos = (pos + 1) & t.mask


cdef Py_ssize_t _code_sources(_IdSource* src, Py_ssize_t ns, _IdTable* t) noexcept nogil:
    # Every string of the sources coded in turn (-1 for a null); the index of the first source
    # whose offsets are out of order or outside its data, or -1.
    cdef Py_ssize_t s, j, r
    cdef int64_t a, b
    for s in range(ns):
        for j in range(src[s].count):
            r = src[s].at[j] if src[s].at != NULL else j
            if src[s].nulls != NULL and src[s].nulls[r]:
                src[s].codes[j] = -1
                continue
            a = _off(&src[s].offs, r)
            b = _off(&src[s].offs, r + 1)
            if a < 0 or a > b or b > src[s].size:
                return s
            src[s].codes[j] = _id_code(
                t, src[s].data + a if b > a else <const uint8_t*>"", b - a, s, r)
    return -1


def string_ids(sources):
    """Codes for the strings of several Arrow string arrays, equal strings one code: in order
    of first appearance over the sources in turn, -1 for a null. ``sources``: a tuple of
    ``(data, offsets, nulls or None, at or None)``, ``at`` the positions of the strings to code
    (all of them for None). Returns ``(codes, first_source, first_index)``: a tuple of int64
    arrays, one per source, and for each code the source and the position in it of its first
    string."""
    if type(sources) is not tuple:
        raise TypeError("string_ids: sources must be a tuple of (data, offsets, nulls, at)")
    cdef Py_ssize_t ns = len(sources), s, total = 0, bad_source
    keep = []  # every buffer and private copy the coding reads
    codes = []
    cdef _IdSource* src = <_IdSource*>calloc(ns if ns else 1, sizeof(_IdSource))
    if src == NULL:
        raise MemoryError()
    cdef _IdTable t
    memset(&t, 0, sizeof(t))
    cdef uint64_t cap = 1
    cdef int64_t[::1] fsrc
    cdef int64_t[::1] fidx
    try:
        for s in range(ns):
            _bind_id_source(&src[s], s, sources[s], keep, codes)
            total += src[s].count
        while cap < <uint64_t>(2 * total + 2):
            cap <<= 1
        t.mask = cap - 1
        t.slots = <int64_t*>calloc(cap, sizeof(int64_t))
        t.first_ptr = <const uint8_t**>malloc((total + 1) * sizeof(uint8_t*))
        t.first_len = <int64_t*>malloc((total + 1) * sizeof(int64_t))
        t.first_hash = <uint64_t*>malloc((total + 1) * sizeof(uint64_t))
        first_src_a = np.empty(total + 1, dtype=np.int64)
        first_idx_a = np.empty(total + 1, dtype=np.int64)
        if (t.slots == NULL or t.first_ptr == NULL or t.first_len == NULL
                or t.first_hash == NULL):
            raise MemoryError()
        fsrc = first_src_a
        fidx = first_idx_a
        t.first_src = &fsrc[0]
        t.first_idx = &fidx[0]
        with nogil:
            bad_source = _code_sources(src, ns, &t)
        if bad_source >= 0:
            raise ValueError(f"string_ids: the offsets of source {bad_source} must be "
                             f"non-decreasing and within its data")
        return tuple(codes), first_src_a[:t.ncodes].copy(), first_idx_a[:t.ncodes].copy()
    finally:
        free(src)
        free(t.slots)
        free(<void*>t.first_ptr)
        free(t.first_len)
        free(t.first_hash)


def arrange_ids(messages, codes):
    """Items of several sources merged by message: ``messages[s][j]`` is the message of item
    ``j`` of source ``s`` (non-decreasing in each source) and ``codes[s][j]`` its code. Within
    a message the items of the first source come first, each source's in their order (a
    stable sort by message of the sources in turn). Returns ``(messages, codes)``, merged."""
    if type(messages) is not tuple or type(codes) is not tuple or len(messages) != len(codes):
        raise TypeError("arrange_ids: messages and codes must be tuples of one length")
    cdef Py_ssize_t ns = len(messages), s, j, best, total = 0
    private = []
    cdef const int64_t[::1] mv
    for s in range(ns):
        msg_a = _as_positions(messages[s], "arrange_ids", "messages")
        code_a = _as_positions(codes[s], "arrange_ids", "codes")
        if msg_a.shape[0] != code_a.shape[0]:
            raise ValueError(f"arrange_ids: source {s} has {msg_a.shape[0]} messages but "
                             f"{code_a.shape[0]} codes")
        mv = msg_a
        for j in range(mv.shape[0]):
            if mv[j] < 0 or (j and mv[j] < mv[j - 1]):
                raise ValueError(f"arrange_ids: the messages of source {s} must be >= 0 and "
                                 f"non-decreasing")
        private.append((msg_a, code_a))
        total += msg_a.shape[0]
    out_msg_a = np.empty(total, dtype=np.int64)
    out_code_a = np.empty(total, dtype=np.int64)
    if ns == 0 or total == 0:
        return out_msg_a, out_code_a
    cdef int64_t[::1] out_msg = out_msg_a
    cdef int64_t[::1] out_code = out_code_a
    cdef const int64_t** msg = <const int64_t**>calloc(ns, sizeof(int64_t*))
    cdef const int64_t** code = <const int64_t**>calloc(ns, sizeof(int64_t*))
    cdef Py_ssize_t* at = <Py_ssize_t*>calloc(ns, sizeof(Py_ssize_t))
    cdef Py_ssize_t* size = <Py_ssize_t*>calloc(ns, sizeof(Py_ssize_t))
    cdef const int64_t[::1] cv
    try:
        if msg == NULL or code == NULL or at == NULL or size == NULL:
            raise MemoryError()
        for s in range(ns):
            mv = private[s][0]
            cv = private[s][1]
            size[s] = mv.shape[0]
            if size[s]:
                msg[s] = &mv[0]
                code[s] = &cv[0]
        with nogil:
            for j in range(total):
                best = -1
                for s in range(ns):
                    if at[s] < size[s] and (best < 0 or msg[s][at[s]] < msg[best][at[best]]):
                        best = s
                out_msg[j] = msg[best][at[best]]
                out_code[j] = code[best][at[best]]
                at[best] += 1
        return out_msg_a, out_code_a
    finally:
        free(<void*>msg)
        free(<void*>code)
        free(at)
        free(size)


cdef struct _Field:
    const uint8_t* data
    int64_t size
    _Offs offs
    const uint8_t* nulls
    bint given


# part_chars reads the fields of PART_FIELDS, in order. A part whose field is missing or null is
# one only the object path can measure for text and thinking, and counts 0 for a result's content
# and a tool_use's name.


cdef inline bint _field_needed(int x) noexcept nogil:
    return x == 0 or x == 3


cdef int _bind_fields(object fields, _Field* f, Py_ssize_t k, list keep) except -1:
    # part_chars' fields, checked and bound; the arrays read stay alive in keep.
    if type(fields) is not tuple or len(fields) != 4:
        raise TypeError(f"part_chars: fields must be a tuple of 4 (one per {PART_FIELDS})")
    cdef const uint8_t[::1] fbuf
    cdef const uint8_t[::1] fnul
    cdef int x
    for x in range(4):
        f[x].given = False
        spec = fields[x]
        if spec is None:
            continue
        if type(spec) is not tuple or len(spec) != 3:
            raise TypeError(f"part_chars: {PART_FIELDS[x]}: expected (data, offsets, nulls) "
                            f"or None")
        fdata = np.frombuffer(spec[0], dtype=np.uint8)
        foffs = _offsets_array(spec[1], k + 1, "part_chars", f"{PART_FIELDS[x]} offsets")
        keep += [fdata, foffs]
        f[x].given = True
        f[x].size = fdata.shape[0]
        fbuf = fdata
        f[x].data = &fbuf[0] if fdata.shape[0] else NULL
        _bind_offsets(&f[x].offs, foffs)
        f[x].nulls = NULL
        if spec[2] is not None:
            fn = _flags_array(spec[2], k, "part_chars", f"{PART_FIELDS[x]} nulls")
            keep.append(fn)
            fnul = fn
            f[x].nulls = &fnul[0] if k else NULL
    return 0


cdef inline int _kind_field(int8_t kd, Py_ssize_t ntext, uint8_t* fl) noexcept nogil:
    # The field a part of kind kd counts (-1: none, an opaque part); sets the flag it carries.
    if kd < 0 or kd > ntext + 2:
        return -1
    if kd < ntext:
        return 0
    if kd == ntext:
        fl[0] |= F_RESULT
        return 1
    if kd == ntext + 1:
        fl[0] |= F_CALLS
        return 2
    return 3


cdef inline int _field_chars(const _Field* f, Py_ssize_t p, int x, int64_t* total,
                             bint* unreadable, int* which, Py_ssize_t* err_part,
                             int64_t* ubad) noexcept nogil:
    # Adds part p's chars of field x to total; 0, or part_chars' fault code. Every string the
    # part holds in a field given is UTF-8, whatever its kind; only its kind's field is counted.
    cdef int y
    cdef int64_t lo, hi, count
    for y in range(4):
        if not f[y].given or (f[y].nulls != NULL and f[y].nulls[p]):
            if y == x and _field_needed(x):
                unreadable[0] = True
            continue
        lo = _off(&f[y].offs, p)  # each offset read once: it may change meanwhile
        hi = _off(&f[y].offs, p + 1)
        if lo < 0 or lo > hi or hi > f[y].size:
            which[0] = y
            return 2
        if lo == hi:
            continue
        count = cp_utf8_count_in(f[y].data + lo, hi - lo, f[y].size - lo, ubad)
        if count < 0:
            which[0] = y
            err_part[0] = p
            ubad[0] = lo + ubad[0]
            return 3
        if y != x:
            continue
        if count > INT64_MAX - total[0]:
            return 4
        total[0] += count
    return 0


def part_chars(part_offsets, kinds, Py_ssize_t ntext, fields, extra=None, unreadable=None):
    """Per message, the chars of its content parts, the flags its parts set and whether one of
    them only the object path can measure: ``(chars, flags, bad)``.

    ``part_offsets``: the messages' content lists (``m + 1`` offsets into the ``k`` parts).
    ``kinds``: each part's kind (int8): below ``ntext`` a text part, ``ntext`` a tool_result,
    ``ntext + 1`` a tool_use, ``ntext + 2`` a thinking block, anything else opaque. ``fields``:
    for each name of ``PART_FIELDS``, ``None`` (missing, or not text) or ``(data, offsets,
    nulls)`` of a string child (``nulls``: a bool array, or ``None``). ``extra``: chars added
    per part, measured elsewhere (int64), and ``unreadable``: parts only the object path can
    measure (bool); either may be ``None``. Every string of a field given that is not null is
    checked as UTF-8, whatever the kind of its part (a ``Utf8Error`` names the field, the part
    and the byte); only the field of the part's kind is counted."""
    if not 0 <= ntext <= 125:  # kinds are int8: up to ntext + 2
        raise ValueError(f"part_chars: ntext must lie in 0..125, got {ntext}")
    o_a = _offsets_array(part_offsets, -1, "part_chars", "part offsets")
    cdef Py_ssize_t m = o_a.shape[0] - 1
    kinds_a = np.asarray(kinds)
    if kinds_a.ndim != 1 or kinds_a.dtype != np.int8:
        raise TypeError("part_chars: expected a 1-d int8 array of kinds")
    kinds_a = np.array(kinds_a, copy=True)
    cdef Py_ssize_t k = kinds_a.shape[0]
    cdef _Field f[4]
    keep = [o_a, kinds_a]
    _bind_fields(fields, f, k, keep)
    cdef const int64_t* add = NULL
    cdef const int64_t[::1] add_v
    if extra is not None:
        extra_a = np.asarray(extra)
        if extra_a.ndim != 1 or extra_a.dtype != np.int64 or extra_a.shape[0] != k:
            raise TypeError(f"part_chars: extra must be a 1-d int64 array of {k}")
        extra_a = np.array(extra_a, copy=True)
        keep.append(extra_a)
        add_v = extra_a
        add = &add_v[0] if k else NULL
    cdef const uint8_t* unread = NULL
    cdef const uint8_t[::1] unread_v
    if unreadable is not None:
        unread_a = _flags_array(unreadable, k, "part_chars", "unreadable")
        keep.append(unread_a)
        unread_v = unread_a
        unread = &unread_v[0] if k else NULL
    cdef const int8_t[::1] kind_v = kinds_a
    cdef const int8_t* kind = &kind_v[0] if k else NULL
    cdef _Offs mo
    _bind_offsets(&mo, o_a)
    chars_a = np.zeros(m, dtype=np.int64)
    flags_a = np.zeros(m, dtype=np.uint8)
    bad_a = np.zeros(m, dtype=np.bool_)
    cdef int64_t[::1] chars = chars_a
    cdef uint8_t[::1] flags = flags_a
    cdef uint8_t[::1] bad = bad_a.view(np.uint8)
    cdef Py_ssize_t r, p, err_part = -1
    cdef int64_t a, b, total, ubad = 0
    cdef int fault = 0, which = -1, x
    cdef uint8_t fl
    cdef bint unreadable_part
    with nogil:
        for r in range(m):
            a = _off(&mo, r)
            b = _off(&mo, r + 1)
            if a < 0 or a > b or b > k:
                fault = 1
                break
            total = 0
            fl = 0
            unreadable_part = False
            for p in range(a, b):
                if unread != NULL and unread[p]:
                    unreadable_part = True
                if add != NULL:
                    if add[p] < 0 or add[p] > INT64_MAX - total:
                        fault = 4
                        break
                    total += add[p]
                x = _kind_field(kind[p], ntext, &fl)
                fault = _field_chars(f, p, x, &total, &unreadable_part, &which, &err_part, &ubad)
                if fault:
                    break
            if fault:
                break
            chars[r] = total
            flags[r] = fl
            bad[r] = unreadable_part
    if fault == 1:
        raise ValueError(f"part_chars: part offsets must be non-decreasing and within 0..{k}")
    if fault == 2:
        raise ValueError(f"part_chars: {PART_FIELDS[which]} offsets must be non-decreasing and "
                         f"within 0..{f[which].size}")
    if fault == 3:
        raise Utf8Error(f"invalid UTF-8 in {PART_FIELDS[which]} of part {err_part} at byte "
                        f"{ubad}", err_part, ubad)
    if fault == 4:
        raise ValueError("part_chars: extra must be >= 0, and a message's chars below 2**63")
    return chars_a, flags_a, bad_a
