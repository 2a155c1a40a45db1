/* A pool of numpy's large data blocks, for the columnar path.
 *
 * reduce_table builds many temporary arrays of one size per message (hundreds of thousands of
 * elements each), and its output buffers are as large as the kept text. glibc gives such
 * blocks back to the system when they are freed (they are mmapped, or at the top of a
 * thread's heap), so the next array faults every page in again; numpy asks for huge pages on
 * the largest, and the kernel zeroes 2 MiB at each fault. On the agent-trace corpus that was
 * about 7,000 faults per call; on the chats a quarter of the CPU time went to clearing pages.
 *
 * This is a numpy memory handler (NEP 49, numpy >= 1.22) that keeps freed blocks of 64 KiB or
 * more, up to CP_POOL_LIMIT bytes in CP_POOL_SLOTS blocks, and hands them out again for a
 * request of at least half their size. It is set in a context variable only while a table is
 * reduced (pooled_arrays in the kernel), so numpy's other arrays never see it; an array
 * allocated by it returns its block here whenever it is freed.
 *
 * - Every block carries a header (its malloc pointer and capacity) just below the data, which
 *   is 64-byte aligned.
 * - The cache is read and written only with the GIL held, which is how numpy calls a handler
 *   (its own small-block cache relies on the same). Called without it, or on a build without
 *   a GIL, the handler does plain malloc and free, so it is never unsafe.
 * - A new block of 4 MiB or more is advised to use huge pages, as numpy's allocator does
 *   (unless numpy's own setting says not to).
 * - Blocks that have waited longer than CP_POOL_IDLE seconds since they were freed are given
 *   back when a pooled section begins or ends (cp_pool_trim), all of them when an allocation
 *   fails (then tried again) and when asked (release_pool). Nothing runs between calls: after
 *   the last one the pool keeps what it holds until the process ends or it is released.
 * - A realloc that shrinks a block below half its capacity moves it to a smaller one.
 */
#ifndef CONTEXTPOLICY_POOL_H
#define CONTEXTPOLICY_POOL_H

#include <Python.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#if defined(__linux__)
#include <sys/mman.h>
#endif
#if defined(_WIN32)
#include <windows.h>
#else
#include <time.h>
#endif

typedef struct {
    void *ctx;
    void *(*malloc)(void *ctx, size_t size);
    void *(*calloc)(void *ctx, size_t nelem, size_t elsize);
    void *(*realloc)(void *ctx, void *ptr, size_t new_size);
    void (*free)(void *ctx, void *ptr, size_t size);
} cp_pool_allocator;

/* numpy's PyDataMem_Handler, version 1 (numpy/ndarraytypes.h). */
typedef struct {
    char name[127];
    uint8_t version;
    cp_pool_allocator allocator;
} cp_pool_handler;

#define CP_POOL_ALIGN 64
#define CP_POOL_HEAD 16
#define CP_POOL_EXTRA (CP_POOL_ALIGN + CP_POOL_HEAD)
#define CP_POOL_MIN ((size_t)1 << 16)
#define CP_POOL_SLOTS 256
#define CP_POOL_LIMIT ((size_t)512 << 20)
#define CP_POOL_IDLE 2.0
#define CP_POOL_HUGE ((size_t)1 << 22)

typedef struct {
    void *raw;
    size_t cap;
} cp_pool_head;

static void *cp_pool_block[CP_POOL_SLOTS];
static size_t cp_pool_cap[CP_POOL_SLOTS];
static double cp_pool_since[CP_POOL_SLOTS];
static int cp_pool_count = 0;
static size_t cp_pool_bytes = 0;
static int64_t cp_pool_hits = 0, cp_pool_misses = 0;
static int cp_pool_hugepages = 1; /* numpy's own setting (_set_madvise_hugepage), as last read */

/* Whether this thread holds the GIL (the cache is touched only then). PyGILState_Check alone
 * says yes for every thread once a subinterpreter exists: the thread state is asked too. */
static inline int cp_pool_may_cache(void)
{
#if defined(Py_GIL_DISABLED)
    return 0;
#elif PY_VERSION_HEX >= 0x030D0000
    return PyThreadState_GetUnchecked() != NULL;
#elif PY_VERSION_HEX >= 0x030C0000
    return _PyThreadState_UncheckedGet() != NULL;
#else
    PyThreadState *t = _PyThreadState_UncheckedGet();
    return t != NULL && t == PyGILState_GetThisThreadState() && PyGILState_Check();
#endif
}

/* Monotonic seconds, for how long a block has waited. */
static double cp_pool_clock(void)
{
#if defined(_WIN32)
    return (double)GetTickCount64() / 1000.0;
#else
    struct timespec ts;
    if (clock_gettime(CLOCK_MONOTONIC, &ts) != 0)
        return 0.0;
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
#endif
}

static void cp_pool_trim(double idle);

static inline cp_pool_head *cp_pool_head_of(void *p)
{
    return (cp_pool_head *)((char *)p - CP_POOL_HEAD);
}

/* A new block of capacity cap (zeroed if zero is set), its data aligned. */
static void *cp_pool_new(size_t cap, int zero)
{
    if (cap > SIZE_MAX - CP_POOL_EXTRA)
        return NULL;
    char *raw = (char *)(zero ? calloc(1, cap + CP_POOL_EXTRA) : malloc(cap + CP_POOL_EXTRA));
    if (raw == NULL && cp_pool_count && cp_pool_may_cache()) {
        /* Out of memory while the pool holds blocks: give them back and try once more. */
        cp_pool_trim(-1.0);
        raw = (char *)(zero ? calloc(1, cap + CP_POOL_EXTRA) : malloc(cap + CP_POOL_EXTRA));
    }
    if (raw == NULL)
        return NULL;
    uintptr_t at = ((uintptr_t)raw + CP_POOL_HEAD + CP_POOL_ALIGN - 1) & ~(uintptr_t)(CP_POOL_ALIGN - 1);
    char *p = (char *)at;
    cp_pool_head *h = cp_pool_head_of(p);
    h->raw = raw;
    h->cap = cap;
#if defined(__linux__) && defined(MADV_HUGEPAGE)
    /* As numpy's own allocator does for 4 MiB or more: huge pages, 512 times fewer faults. */
    if (cap >= CP_POOL_HUGE && cp_pool_hugepages) {
        uintptr_t a = ((uintptr_t)p + 4095) & ~(uintptr_t)4095;
        uintptr_t b = ((uintptr_t)p + cap) & ~(uintptr_t)4095;
        if (b > a)
            (void)madvise((void *)a, (size_t)(b - a), MADV_HUGEPAGE);
    }
#endif
    return p;
}

/* The cached block that fits size best (capacity at most twice it), taken out; or NULL. */
static void *cp_pool_take(size_t size)
{
    int best = -1;
    for (int i = 0; i < cp_pool_count; i++) {
        size_t c = cp_pool_cap[i];
        if (c >= size && c / 2 <= size && (best < 0 || c < cp_pool_cap[best]))
            best = i;
    }
    if (best < 0)
        return NULL;
    void *p = cp_pool_block[best];
    cp_pool_bytes -= cp_pool_cap[best];
    cp_pool_count--;
    cp_pool_block[best] = cp_pool_block[cp_pool_count];
    cp_pool_cap[best] = cp_pool_cap[cp_pool_count];
    cp_pool_since[best] = cp_pool_since[cp_pool_count];
    return p;
}

static void *cp_pool_get(size_t size, int zero)
{
    size_t cap = size ? size : 1;
    if (cap >= CP_POOL_MIN && cp_pool_may_cache()) {
        void *p = cp_pool_take(cap);
        if (p != NULL) {
            cp_pool_hits++;
            if (zero)
                memset(p, 0, size);
            return p;
        }
        cp_pool_misses++;
    }
    return cp_pool_new(cap, zero);
}

static void *cp_pool_malloc(void *ctx, size_t size)
{
    (void)ctx;
    return cp_pool_get(size, 0);
}

static void *cp_pool_calloc(void *ctx, size_t nelem, size_t elsize)
{
    (void)ctx;
    if (elsize && nelem > SIZE_MAX / elsize)
        return NULL;
    return cp_pool_get(nelem * elsize, 1);
}

static void cp_pool_free(void *ctx, void *ptr, size_t size)
{
    (void)ctx;
    (void)size; /* the header knows the capacity */
    if (ptr == NULL)
        return;
    cp_pool_head *h = cp_pool_head_of(ptr);
    size_t cap = h->cap;
    if (cap >= CP_POOL_MIN && cp_pool_may_cache() && cp_pool_count < CP_POOL_SLOTS &&
        cap <= CP_POOL_LIMIT - cp_pool_bytes) {
        cp_pool_block[cp_pool_count] = ptr;
        cp_pool_cap[cp_pool_count] = cap;
        cp_pool_since[cp_pool_count] = cp_pool_clock();
        cp_pool_count++;
        cp_pool_bytes += cap;
        return;
    }
    free(h->raw);
}

static void *cp_pool_realloc(void *ctx, void *ptr, size_t size)
{
    if (ptr == NULL)
        return cp_pool_malloc(ctx, size);
    size_t cap = cp_pool_head_of(ptr)->cap;
    if (size <= cap && (cap < CP_POOL_MIN || cap / 2 <= size))
        return ptr; /* fits, and holds at most twice the size */
    void *p = cp_pool_get(size, 0);
    if (p == NULL) /* the old block stays as it was, as realloc leaves it */
        return size <= cap ? ptr : NULL;
    memcpy(p, ptr, size < cap ? size : cap);
    cp_pool_free(ctx, ptr, cap);
    return p;
}

/* Give back the blocks that have waited longer than idle seconds (all of them for idle < 0);
 * with the GIL held. */
static void cp_pool_trim(double idle)
{
    double now = idle < 0 ? 0.0 : cp_pool_clock();
    int i = 0;
    while (i < cp_pool_count) {
        if (idle < 0 || cp_pool_since[i] < now - idle) {
            free(cp_pool_head_of(cp_pool_block[i])->raw);
            cp_pool_bytes -= cp_pool_cap[i];
            cp_pool_count--;
            cp_pool_block[i] = cp_pool_block[cp_pool_count];
            cp_pool_cap[i] = cp_pool_cap[cp_pool_count];
            cp_pool_since[i] = cp_pool_since[cp_pool_count];
        } else {
            i++;
        }
    }
}

static cp_pool_handler cp_pool_the_handler = {
    "contextpolicy_pool", 1,
    {NULL, cp_pool_malloc, cp_pool_calloc, cp_pool_realloc, cp_pool_free},
};

#endif
