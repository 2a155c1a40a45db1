# The columnar path: Arrow-layout buffers, UTF-8 lengths and validation, role codes, gathers,
# the memory pool and trim cuts of many lists (the twin: contextpolicy/_columns_py.py).
# Included by _kernel_c.pyx.

cdef object _as_offsets(object offsets, Py_ssize_t limit, str what, bint private=False):
    # ``private``: a copy of its own, for a caller that reads the offsets again without the GIL
    # (and so must not see them change after they were checked).
    offsets = np.asarray(offsets)
    if offsets.ndim != 1 or len(offsets) == 0:
        raise ValueError(f"{what}: expected a 1-d offsets array with at least one entry")
    if offsets.dtype != np.int32 and offsets.dtype != np.int64:
        raise TypeError(f"{what}: expected int32 or int64 offsets, got {offsets.dtype}")
    if private:
        offsets = np.array(offsets, dtype=np.int64, order="C", copy=True)
    else:
        offsets = np.ascontiguousarray(offsets, dtype=np.int64)
    cdef const int64_t[::1] o = offsets
    cdef Py_ssize_t i, n = o.shape[0]
    cdef bint ok = o[0] >= 0 and o[n - 1] <= limit
    for i in range(1, n):
        if o[i] < o[i - 1]:
            ok = False
            break
    if not ok:
        raise ValueError(f"{what}: offsets must be non-decreasing and within 0..{limit}")
    return offsets


cdef struct _Offs:
    const int32_t* narrow
    const int64_t* wide


cdef int _bind_offsets(_Offs* o, object arr) except -1:
    cdef const int32_t[::1] n32
    cdef const int64_t[::1] n64
    if arr.dtype == np.int64:
        n64 = arr
        o.wide, o.narrow = &n64[0], NULL
    else:
        n32 = arr
        o.narrow, o.wide = &n32[0], NULL
    return 0


cdef inline int64_t _off(const _Offs* o, Py_ssize_t i) noexcept nogil:
    return o.wide[i] if o.wide != NULL else <int64_t>o.narrow[i]


cdef object _string_offsets(object offsets, Py_ssize_t limit, str what, _Offs* o):
    # The offsets of a string array as they are (int32 or int64, no copy), checked like
    # _as_offsets; ``o`` is bound to them. Callers read each offset again as they use it.
    offsets = np.asarray(offsets)
    if offsets.ndim != 1 or len(offsets) == 0:
        raise ValueError(f"{what}: expected a 1-d offsets array with at least one entry")
    if offsets.dtype != np.int32 and offsets.dtype != np.int64:
        raise TypeError(f"{what}: expected int32 or int64 offsets, got {offsets.dtype}")
    offsets = np.ascontiguousarray(offsets)
    _bind_offsets(o, offsets)
    cdef Py_ssize_t i, n = offsets.shape[0]
    cdef bint ok
    with nogil:
        ok = _off(o, 0) >= 0 and _off(o, n - 1) <= limit
        for i in range(1, n):
            if _off(o, i) < _off(o, i - 1):
                ok = False
                break
    if not ok:
        raise ValueError(f"{what}: offsets must be non-decreasing and within 0..{limit}")
    return offsets


# What the compact JSON of a string adds to its code points, per byte: '"' and '\\' and the
# five named controls take two chars, other controls six (\u00XX); nothing else is escaped.
cdef uint8_t _JSON_EXTRA[256]
_JSON_EXTRA[:] = [5 if b < 0x20 else 0 for b in range(256)]
for _b in (0x22, 0x5C, 0x08, 0x0C, 0x0A, 0x0D, 0x09):  # " \\ \b \f \n \r \t
    _JSON_EXTRA[_b] = 1


cdef inline int64_t _json_extra(const uint8_t* p, int64_t n) noexcept nogil:
    # What escaping adds to p[0..n): eight bytes at a time while none is a control, '"' or '\\'
    # (a word is looked at byte by byte only when one of them may be in it).
    cdef int64_t i = 0, extra = 0, k
    cdef uint64_t w, ones = 0x0101010101010101ULL, highs = 0x8080808080808080ULL
    while i + 8 <= n:
        memcpy(&w, p + i, 8)
        if (((w - ones * 0x20) & ~w)
                | ((w ^ (ones * 0x22)) - ones) & ~(w ^ (ones * 0x22))
                | ((w ^ (ones * 0x5C)) - ones) & ~(w ^ (ones * 0x5C))) & highs:
            for k in range(8):
                extra += _JSON_EXTRA[p[i + k]]
        i += 8
    while i < n:
        extra += _JSON_EXTRA[p[i]]
        i += 1
    return extra


cdef object _string_counts(object data, object offsets, str what, bint json):
    # Per string: its code points (strict UTF-8), or with ``json`` its compact JSON's chars
    # (code points, the two quotes and what escaping adds).
    cdef const uint8_t[::1] buf = np.frombuffer(data, dtype=np.uint8)
    cdef _Offs off
    off_a = _string_offsets(offsets, buf.shape[0], what, &off)
    cdef Py_ssize_t r, n = off_a.shape[0] - 1
    out_a = np.empty(n, dtype=np.int64)
    cdef int64_t[::1] out = out_a
    cdef int64_t bad = 0, count
    cdef Py_ssize_t bad_row = -1
    cdef const uint8_t* base = &buf[0] if buf.shape[0] > 0 else NULL
    cdef int64_t a, b, limit = buf.shape[0], at = 0
    cdef bint moved = False
    with nogil:
        for r in range(n):
            # Each offset read once and checked again: the array may change while this runs.
            a = _off(&off, r)
            b = _off(&off, r + 1)
            if a < 0 or a > b or b > limit:
                moved = True
                break
            if a == b:
                out[r] = 2 if json else 0
                continue
            count = cp_utf8_count_in(base + a, b - a, limit - a, &bad)
            if count < 0:
                bad_row = r
                at = a
                break
            out[r] = 2 + count + _json_extra(base + a, b - a) if json else count
    if moved:
        raise ValueError(f"{what}: offsets must be non-decreasing and within 0..{limit}")
    if bad_row >= 0:
        raise Utf8Error(f"invalid UTF-8 in string {bad_row} at byte {at + bad}", bad_row,
                        at + bad)
    return out_a


def utf8_lengths(data, offsets):
    """Code points of each string of an Arrow string array (UTF-8 ``data`` + ``offsets``)."""
    return _string_counts(data, offsets, "utf8_lengths", False)


def json_string_lengths(data, offsets):
    """Chars of each string of an Arrow string array as compact JSON writes it: its code points,
    the two quotes and what escaping adds (``json.dumps(s, ensure_ascii=False)``)."""
    return _string_counts(data, offsets, "json_string_lengths", True)


cdef object _as_positions(object values, str what, str name):
    # A private int64 copy: the checks below stay true while the copy runs without the GIL.
    values = np.asarray(values)
    if values.ndim != 1:
        raise ValueError(f"{what}: expected a 1-d array of {name}")
    if values.dtype.kind not in "iu":
        raise TypeError(f"{what}: expected integer {name}, got {values.dtype}")
    if values.dtype.kind == "u" and values.size and int(values.max()) >= 1 << 63:
        raise ValueError(f"{what}: {name} must be below 2**63")
    return np.array(values, dtype=np.int64, order="C", copy=True)


# numpy's memory handler for the columnar path (pool.h): found in numpy's C API table, as
# numpy's own import_array() finds it (PyDataMem_SetHandler, numpy >= 1.22).
ctypedef object (*_set_handler_t)(object)
ctypedef object (*_get_handler_t)()
cdef _set_handler_t _numpy_set_handler = NULL
cdef _get_handler_t _numpy_get_handler = NULL
cdef object _POOL_CAPSULE = None
cdef object _numpy_hugepages = None  # numpy's _get_madvise_hugepage, where it has one


cdef _find_numpy_handler():
    global _numpy_set_handler, _numpy_get_handler, _POOL_CAPSULE, _numpy_hugepages
    try:
        from numpy._core import _multiarray_umath as umath
    except ImportError:
        from numpy.core import _multiarray_umath as umath
    _numpy_hugepages = getattr(umath, "_get_madvise_hugepage", None)
    cdef void **table = <void **>PyCapsule_GetPointer(umath._ARRAY_API, NULL)
    if (<unsigned int (*)() noexcept>table[211])() < 0xf:  # the C API of numpy 1.22
        return
    if _POOL_CAPSULE is None:  # one capsule, whichever thread looks first
        _POOL_CAPSULE = PyCapsule_New(<void *>&cp_pool_the_handler, "mem_handler", NULL)
    _numpy_get_handler = <_get_handler_t>table[305]
    _numpy_set_handler = <_set_handler_t>table[304]


cdef bint _handler_sought = False


cdef _numpy_handler():
    # Looked for once, when first needed (numpy is imported then, not with the kernel).
    # Marked sought only once found: a thread that comes meanwhile (numpy's import lets others
    # run) looks too, and finds the same handler.
    global _handler_sought, _numpy_set_handler
    if _handler_sought:
        return
    try:
        _find_numpy_handler()
    except Exception:  # no handler API: arrays are numpy's own, as on the twin
        _numpy_set_handler = NULL
    _handler_sought = True


@cython.final
cdef class pooled_arrays:
    """``with pooled_arrays():`` numpy's arrays of 64 KiB or more created in this context
    take their memory from a pool that keeps freed blocks (up to 512 MiB) for the next array,
    so the columnar path does not fault every page of its temporaries in again; blocks that
    have waited two seconds are given back when a pooled section begins or ends, all of them
    when an allocation fails. Arrays keep working after the section (their blocks return to
    the pool when freed). A section is left in the context that entered it; one left out of
    order, or elsewhere, restores nothing it did not set. Not reentrant per object; the twin's
    does nothing."""

    cdef object _previous
    cdef bint _entered

    def __enter__(self):
        global cp_pool_hugepages
        if self._entered:
            raise RuntimeError("pooled_arrays: this section is already entered")
        _numpy_handler()
        if _numpy_set_handler != NULL:
            if _numpy_hugepages is not None:
                cp_pool_hugepages = 1 if _numpy_hugepages() else 0
            cp_pool_trim(CP_POOL_IDLE)
            self._previous = _numpy_set_handler(_POOL_CAPSULE)
        self._entered = True
        return self

    def __exit__(self, exc_type, exc, tb):
        if not self._entered:
            return False
        self._entered = False
        if self._previous is not None:
            previous, self._previous = self._previous, None
            # Only where the pool is still this context's handler: a section left out of
            # order, or in another thread or context, changes nothing it did not set.
            if _numpy_get_handler() is _POOL_CAPSULE:
                _numpy_set_handler(previous)
            cp_pool_trim(CP_POOL_IDLE)
        return False


def pool_stats():
    """The pool's state: ``{"active": bool, "blocks", "bytes", "hits", "misses", "limit"}``
    (blocks and bytes held now; hits and misses: requests of 64 KiB or more since import)."""
    _numpy_handler()
    return {"active": _numpy_set_handler != NULL, "blocks": cp_pool_count,
            "bytes": cp_pool_bytes, "hits": cp_pool_hits, "misses": cp_pool_misses,
            "limit": CP_POOL_LIMIT}


def release_pool():
    """Give back every block the pool holds."""
    cp_pool_trim(-1.0)


def gather_bytes(src, starts, stops, out):
    """Copy ``src[starts[i]:stops[i]]`` for each ``i``, one after the other, into ``out`` (a
    writable buffer of exactly their total size)."""
    cdef const uint8_t[::1] buf = np.frombuffer(src, dtype=np.uint8)
    dst_a = np.frombuffer(out, dtype=np.uint8)
    if not dst_a.flags.writeable:
        raise ValueError("gather_bytes: out must be a writable buffer")
    a_a = _as_positions(starts, "gather_bytes", "starts")
    b_a = _as_positions(stops, "gather_bytes", "stops")
    if a_a.shape[0] != b_a.shape[0]:
        raise ValueError(f"gather_bytes: {a_a.shape[0]} starts but {b_a.shape[0]} stops")
    cdef const int64_t[::1] a = a_a
    cdef const int64_t[::1] b = b_a
    cdef Py_ssize_t i, n = a.shape[0], limit = buf.shape[0], size = dst_a.shape[0]
    cdef int64_t total = 0
    for i in range(n):
        if a[i] < 0 or a[i] > b[i] or b[i] > limit:
            raise ValueError(f"gather_bytes: range {i} is {a[i]}..{b[i]}, expected "
                             f"0 <= start <= stop <= {limit}")
        total += b[i] - a[i]
        if total > size:  # (and so never past INT64_MAX)
            break
    if total != size:
        raise ValueError(f"gather_bytes: the ranges hold {total} bytes, out holds "
                         f"{dst_a.shape[0]}")
    if total == 0:
        return
    cdef uint8_t[::1] dst = dst_a
    with nogil:
        cp_gather(&dst[0], &buf[0], &a[0], &b[0], n)


cdef object _offsets_array(object offsets, Py_ssize_t entries, str what, str name):
    # A 1-d int32 or int64 array as it is: its values are read once each, and checked as read.
    offsets = np.asarray(offsets)
    if offsets.ndim != 1:
        raise ValueError(f"{what}: expected a 1-d array of {name}")
    if offsets.dtype != np.int32 and offsets.dtype != np.int64:
        raise TypeError(f"{what}: expected int32 or int64 {name}, got {offsets.dtype}")
    if offsets.shape[0] < 1 or (entries >= 0 and offsets.shape[0] != entries):
        want = "at least 1" if entries < 0 else str(entries)
        raise ValueError(f"{what}: expected {want} {name}, got {offsets.shape[0]}")
    return np.ascontiguousarray(offsets)


cdef object _ranges_checked(object starts, object lengths, Py_ssize_t limit, str what):
    # (starts, lengths) as private int64 copies, each range within 0..limit.
    s_a = _as_positions(starts, what, "starts")
    l_a = _as_positions(lengths, what, "lengths")
    if s_a.shape[0] != l_a.shape[0]:
        raise ValueError(f"{what}: {s_a.shape[0]} starts but {l_a.shape[0]} lengths")
    cdef const int64_t[::1] s = s_a
    cdef const int64_t[::1] l = l_a
    cdef Py_ssize_t j
    cdef int64_t total = 0
    for j in range(s.shape[0]):
        if s[j] < 0 or l[j] < 0 or s[j] > limit - l[j]:
            raise ValueError(f"{what}: range {j} is {s[j]}+{l[j]}, expected within 0..{limit}")
        if l[j] > INT64_MAX - total:
            raise ValueError(f"{what}: the ranges hold more than 2**63 elements")
        total += l[j]
    return s_a, l_a, total


cdef extern from *:
    void __builtin_prefetch(const void* p) nogil


ctypedef fused _off_t:
    int32_t
    int64_t


cdef int _gather_runs(const _off_t* src, _off_t* dst, const int64_t* s, const int64_t* l,
                      Py_ssize_t n, int64_t limit, int64_t* lo, int64_t* hi,
                      Py_ssize_t* bad) noexcept nogil:
    # The runs' offsets rebased one after the other (dst[0] is 0): 0, or 1 where the offsets
    # of run *bad are negative or decrease, 2 where they outgrow ``limit``. Each offset is
    # read once: the array may change meanwhile.
    cdef Py_ssize_t j, i, at = 0
    cdef int64_t first, prev, cur, base = 0
    dst[0] = 0
    for j in range(n):
        if j + 1 < n:  # the next run starts somewhere else: ask for it early
            __builtin_prefetch(src + s[j + 1])
        first = src[s[j]]
        prev = first
        if first < 0:
            bad[0] = j
            return 1
        for i in range(1, l[j] + 1):
            cur = src[s[j] + i]
            if cur < prev:
                bad[0] = j
                return 1
            if cur - first > limit - base:
                bad[0] = j
                return 2
            at += 1
            dst[at] = <_off_t>(base + cur - first)
            prev = cur
        lo[j] = first
        hi[j] = prev
        base += prev - first
    return 0


def gather_offsets(offsets, starts, lengths):
    """The offsets of the elements in the ranges ``[starts[j], starts[j] + lengths[j])`` of a
    list or string array (``offsets``: int32 or int64), laid end to end from 0 in the same
    dtype; and what each range spans of the child or data: ``(offsets, lo, hi)``."""
    o_a = _offsets_array(offsets, -1, "gather_offsets", "offsets")
    s_a, l_a, total = _ranges_checked(starts, lengths, o_a.shape[0] - 1, "gather_offsets")
    cdef const int64_t[::1] s = s_a
    cdef const int64_t[::1] l = l_a
    cdef Py_ssize_t n = s.shape[0], bad = -1
    cdef int fault = 0
    out_a = np.empty(<Py_ssize_t>total + 1, dtype=o_a.dtype)
    lo_a = np.empty(n, dtype=np.int64)
    hi_a = np.empty(n, dtype=np.int64)
    cdef int64_t[::1] lo = lo_a
    cdef int64_t[::1] hi = hi_a
    cdef const int64_t[::1] src64
    cdef const int32_t[::1] src32
    cdef int64_t[::1] out64
    cdef int32_t[::1] out32
    if o_a.dtype == np.int64:
        src64, out64 = o_a, out_a
        if n == 0:
            out64[0] = 0
        else:
            with nogil:
                fault = _gather_runs(&src64[0], &out64[0], &s[0], &l[0], n, INT64_MAX, &lo[0],
                                     &hi[0], &bad)
    else:
        src32, out32 = o_a, out_a
        if n == 0:
            out32[0] = 0
        else:
            with nogil:
                fault = _gather_runs(&src32[0], &out32[0], &s[0], &l[0], n, 2147483647,
                                     &lo[0], &hi[0], &bad)
    if fault == 1:
        raise ValueError(f"gather_offsets: the offsets of range {bad} are negative or decrease")
    if fault == 2:
        raise ValueError(f"gather_offsets: the gathered values need more than offsets of "
                         f"{o_a.dtype} can address")
    return out_a, lo_a, hi_a


def gather_bits(bitmap, Py_ssize_t bit_offset, starts, lengths):
    """The bits of elements in the ranges ``[starts[j], starts[j] + lengths[j])`` of a bitmap
    (least significant bit first, element 0 at bit ``bit_offset``), packed from bit 0: ``(bytes
    as a uint8 array, how many bits are set)``."""
    cdef const uint8_t[::1] buf = np.frombuffer(bitmap, dtype=np.uint8)
    if bit_offset < 0:
        raise ValueError(f"gather_bits: bit_offset must be >= 0, got {bit_offset}")
    cdef Py_ssize_t limit = buf.shape[0] * 8 - bit_offset
    s_a, l_a, total = _ranges_checked(starts, lengths, max(limit, 0), "gather_bits")
    cdef const int64_t[::1] s = s_a
    cdef const int64_t[::1] l = l_a
    out_a = np.zeros((<Py_ssize_t>total + 7) // 8, dtype=np.uint8)
    if total == 0:
        return out_a, 0
    cdef uint8_t[::1] out = out_a
    cdef const uint8_t* src = &buf[0]
    cdef uint8_t* dst = &out[0]
    cdef Py_ssize_t j, n = s.shape[0]
    cdef int64_t i, p, q = 0, count = 0
    cdef uint8_t bit
    with nogil:
        for j in range(n):
            p = bit_offset + s[j]
            for i in range(l[j]):
                bit = (src[(p + i) >> 3] >> ((p + i) & 7)) & 1
                dst[q >> 3] |= <uint8_t>(bit << (q & 7))
                count += bit
                q += 1
    return out_a, count


def string_codes(data, offsets, names, nulls=None):
    """Per string of an Arrow string array, the index in ``names`` (a tuple of bytes) of the
    one it equals, else -1 (and -1 where ``nulls`` is set)."""
    cdef const uint8_t[::1] buf = np.frombuffer(data, dtype=np.uint8)
    o_a = _offsets_array(offsets, -1, "string_codes", "offsets")
    cdef Py_ssize_t r, n = o_a.shape[0] - 1, k, nn
    if type(names) is not tuple or not 0 < len(names) <= 127 or any(
            type(x) is not bytes for x in names):
        raise TypeError("string_codes: names must be a tuple of 1 to 127 bytes")
    nn = len(names)
    cdef const uint8_t[::1] nul
    cdef bint has_nulls = nulls is not None
    if has_nulls:
        nulls_a = _flags_array(nulls, n, "string_codes", "nulls")
        nul = nulls_a
    cdef _Offs o
    _bind_offsets(&o, o_a)
    cdef const char* want[127]
    cdef Py_ssize_t size[127]
    for k in range(nn):
        want[k] = PyBytes_AS_STRING(names[k])
        size[k] = PyBytes_GET_SIZE(names[k])
    out_a = np.full(n, -1, dtype=np.int8)
    cdef int8_t[::1] out = out_a
    cdef int64_t a, b, limit = buf.shape[0]
    cdef const uint8_t* base = &buf[0] if buf.shape[0] else NULL
    cdef bint moved = False
    with nogil:
        for r in range(n):
            a = _off(&o, r)
            b = _off(&o, r + 1)
            if a < 0 or a > b or b > limit:
                moved = True
                break
            if has_nulls and nul[r]:
                continue
            for k in range(nn):
                if b - a == size[k] and (size[k] == 0 or memcmp(base + a, want[k], size[k]) == 0):
                    out[r] = <int8_t>k
                    break
    if moved:
        raise ValueError(f"string_codes: offsets must be non-decreasing and within 0..{limit}")
    return out_a


cdef object _flags_array(object values, Py_ssize_t n, str what, str name):
    # A private uint8 copy of a 1-d bool array of n entries.
    values = np.asarray(values)
    if values.ndim != 1 or values.dtype != np.bool_:
        raise TypeError(f"{what}: expected a 1-d bool array of {name}")
    if values.shape[0] != n:
        raise ValueError(f"{what}: expected {n} {name}, got {values.shape[0]}")
    return np.array(values, dtype=np.uint8, copy=True)


def utf8_validate(data, offsets, nulls=None):
    """Check that every string of an Arrow string array is UTF-8 (see the twin)."""
    cdef const uint8_t[::1] buf = np.frombuffer(data, dtype=np.uint8)
    cdef _Offs off
    # Bound as they are (no pass to check them first): the loops below check each offset.
    off_a = np.asarray(offsets)
    if off_a.ndim != 1 or len(off_a) == 0:
        raise ValueError("utf8_validate: expected a 1-d offsets array with at least one entry")
    if off_a.dtype != np.int32 and off_a.dtype != np.int64:
        raise TypeError(f"utf8_validate: expected int32 or int64 offsets, got {off_a.dtype}")
    off_a = np.ascontiguousarray(off_a)
    _bind_offsets(&off, off_a)
    cdef Py_ssize_t r, n = off_a.shape[0] - 1
    cdef const uint8_t* skip = NULL
    cdef const uint8_t[::1] skip_v
    if nulls is not None:
        skip_a = _flags_array(nulls, n, "utf8_validate", "nulls")
        skip_v = skip_a
        skip = &skip_v[0] if n else NULL
    cdef const uint8_t* base = &buf[0] if buf.shape[0] > 0 else NULL
    cdef int64_t a, b, lo, hi, prev, limit = buf.shape[0], bad = 0, at = 0
    cdef Py_ssize_t bad_row = -1
    cdef bint moved = False, whole = True
    with nogil:
        # Each offset read once and checked as it is used: the array may change meanwhile.
        lo = _off(&off, 0)
        hi = _off(&off, n)
        if lo < 0 or lo > hi or hi > limit:
            moved = True
        elif hi > lo and cp_utf8_count_in(base + lo, hi - lo, limit - lo, &bad) < 0:
            whole = False
        else:
            # Valid UTF-8 cut where no continuation byte begins is valid in every piece.
            prev = lo
            for r in range(1, n):
                a = _off(&off, r)
                if a < prev or a > hi:
                    moved = True
                    break
                if a < hi and (base[a] & 0xC0) == 0x80:
                    whole = False
                    break
                prev = a
        if not whole and not moved:
            # Every offset in order first (as the twin checks them), then string by string
            # (nulls skipped) for the first one at fault.
            prev = lo
            for r in range(1, n + 1):
                a = _off(&off, r)
                if a < prev or a > limit:
                    moved = True
                    break
                prev = a
        if not whole and not moved:
            for r in range(n):
                a = _off(&off, r)
                b = _off(&off, r + 1)
                if a < 0 or a > b or b > limit:
                    moved = True
                    break
                if a == b or (skip != NULL and skip[r]):
                    continue
                if cp_utf8_count_in(base + a, b - a, limit - a, &bad) < 0:
                    bad_row = r
                    at = a
                    break
    if moved:
        raise ValueError(f"utf8_validate: offsets must be non-decreasing and within 0..{limit}")
    if bad_row >= 0:
        raise Utf8Error(f"invalid UTF-8 in string {bad_row} at byte {at + bad}", bad_row,
                        at + bad)


def role_codes_utf8(data, offsets):
    """Role code of each string of an Arrow string array, without creating Python strings."""
    cdef const uint8_t[::1] buf = np.frombuffer(data, dtype=np.uint8)
    cdef _Offs off
    off_a = _string_offsets(offsets, buf.shape[0], "role_codes_utf8", &off)
    cdef Py_ssize_t r, n = off_a.shape[0] - 1
    out_a = np.zeros(n, dtype=np.int8)
    cdef int8_t[::1] out = out_a
    if buf.shape[0] == 0:
        return out_a
    cdef int64_t a, b, limit = buf.shape[0]
    cdef bint moved = False
    with nogil:
        for r in range(n):
            a = _off(&off, r)  # read once: the array may change while this runs
            b = _off(&off, r + 1)
            if a < 0 or a > b or b > limit:
                moved = True
                break
            out[r] = cp_role_code(<const char*>&buf[0] + a, b - a)
    if moved:
        raise ValueError(f"role_codes_utf8: offsets must be non-decreasing and within "
                         f"0..{limit}")
    return out_a


cdef inline int64_t _count_starts(const uint8_t* flags, Py_ssize_t lo, Py_ssize_t hi,
                                  uint8_t mask, bint invert) noexcept nogil:
    # Group starts in flags[lo:hi]; two plain loops the compiler vectorises.
    # (lo >= 1: the message before each one is read for the glue of a reasoning item.)
    cdef int64_t count = 0
    cdef Py_ssize_t j
    if invert:
        for j in range(lo, hi):
            count += ((flags[j] & mask) == 0) & ((flags[j - 1] & CP_FLAG_GLUES_NEXT) == 0)
    else:
        for j in range(lo, hi):
            count += ((flags[j] & mask) != 0) & ((flags[j - 1] & CP_FLAG_GLUES_NEXT) == 0)
    return count


def trim_cut_many(list_offsets, flags_in, chars_in, int64_t keep_groups, int64_t target_chars,
                  int grouping=GROUP_USER_TURN):
    """Group and cut many conversations at once (see the twin)."""
    cdef const uint8_t[::1] flags = np.ascontiguousarray(flags_in, dtype=np.uint8)
    cdef const int64_t[::1] chars = np.ascontiguousarray(chars_in, dtype=np.int64)
    off_a = _as_offsets(list_offsets, flags.shape[0], "trim_cut_many", True)
    cdef const int64_t[::1] off = off_a
    if chars.shape[0] != flags.shape[0]:
        raise ValueError(f"flags and chars differ in length ({flags.shape[0]} != {chars.shape[0]})")
    if keep_groups < 0 or target_chars < 0:
        raise ValueError("keep_groups and target_chars must be >= 0")
    cdef Py_ssize_t r, i, a, b, n = off.shape[0] - 1
    if chars.shape[0]:
        # A sum that wrapped (or chars below zero) would cut in the wrong place.
        if _any_negative(&chars[0], 0, chars.shape[0]):
            raise ValueError("chars must be >= 0")
        for r in range(n):
            if _sum_overflows(&chars[0], off[r], off[r + 1]):
                raise ValueError(f"the chars of row {r} add up to more than 64 bits hold")
    cdef uint8_t mask
    cdef bint invert
    if grouping == GROUP_USER_TURN:
        mask, invert = F_OPENS, False
    elif grouping == GROUP_MESSAGE:
        mask, invert = F_RESULT, True
    else:
        raise ValueError(f"unknown grouping code {grouping}")
    first_a = np.empty(n, dtype=np.int64)
    before_a = np.empty(n, dtype=np.int64)
    after_a = np.empty(n, dtype=np.int64)
    kept_a = np.empty(n, dtype=np.int64)
    cdef int64_t[::1] first = first_a
    cdef int64_t[::1] before = before_a
    cdef int64_t[::1] after = after_a
    cdef int64_t[::1] kept_chars = kept_a
    cdef int64_t cur, total, ngroups, fit, fit_start, fit_chars, floor_start, floor_chars
    cdef Py_ssize_t stop
    cdef bint fitting
    with nogil:
        for r in range(n):
            a = off[r]
            b = off[r + 1]
            cur = 0
            total = 0
            ngroups = 0
            fit = 0
            fit_start = b
            fit_chars = 0
            floor_start = b
            floor_chars = 0
            fitting = True
            stop = a
            # Walk backwards only as far as the answer needs: a group is complete when its
            # opening message is reached; stop once the suffix no longer fits and the floor is
            # met. The groups of the untouched prefix are only counted.
            for i in range(b - 1, a - 1, -1):
                cur += chars[i]
                if _opens(&flags[0], i, a, mask, invert):
                    ngroups += 1
                    total += cur
                    cur = 0
                    if fitting and total <= target_chars:
                        fit += 1
                        fit_start = i
                        fit_chars = total
                    else:
                        fitting = False
                    if ngroups <= keep_groups:
                        floor_start = i
                        floor_chars = total
                    if not fitting and ngroups >= keep_groups:
                        stop = i
                        break
            if stop > a:
                ngroups += 1 + _count_starts(&flags[0], a + 1, stop, mask, invert)
            before[r] = ngroups
            if fit >= keep_groups or fit >= ngroups:
                first[r] = fit_start
                after[r] = fit
                kept_chars[r] = fit_chars
            else:
                first[r] = floor_start
                after[r] = keep_groups if keep_groups < ngroups else ngroups
                kept_chars[r] = floor_chars
    return first_a, before_a, after_a, kept_a
