/* The end of a run of plain JSON string bytes, for the line scanner.
 *
 * cp_plain_end(p, i, n, &ascii) returns the offset of the first byte in p[i..n) that ends a
 * run of plain string bytes: a quote, a backslash or a control byte (below 0x20), or n when
 * there is none, and whether the run is all ASCII. Bytes from 0x80 on are plain here; the UTF-8
 * they form is validated, and counted, by cp_utf8_count over the run.
 *
 * Two implementations give identical results: scalar, eight bytes at a time (a word with a hit
 * is finished byte by byte); and AVX2 (x86-64 with GCC or Clang, chosen at run time as utf8.h
 * chooses), 32 bytes per step.
 */
#ifndef CONTEXTPOLICY_SCAN_H
#define CONTEXTPOLICY_SCAN_H

#include <stdint.h>
#include <string.h>

#include "utf8.h"

#define CP_ONES 0x0101010101010101ULL
#define CP_HIGHS 0x8080808080808080ULL

static inline int cp_special_byte(uint8_t c)
{
    return c == 0x22 || c == 0x5C || c < 0x20;
}

static inline int64_t cp_plain_end_scalar(const uint8_t *p, int64_t i, int64_t n,
                                          uint64_t high, int *ascii)
{
    /* high: the high bits of the run's bytes before i (any non-ASCII byte so far). */
    while (i + 8 <= n) {
        uint64_t w, q, b, t;
        memcpy(&w, p + i, 8);
        q = w ^ 0x2222222222222222ULL;
        b = w ^ 0x5C5C5C5C5C5C5C5CULL;
        t = (((w - 0x2020202020202020ULL) & ~w) | ((q - CP_ONES) & ~q) | ((b - CP_ONES) & ~b))
            & CP_HIGHS;
        if (t)
            break;
        high |= w & CP_HIGHS;
        i += 8;
    }
    while (i < n && !cp_special_byte(p[i])) {
        high |= p[i] & 0x80;
        i++;
    }
    *ascii = high == 0;
    return i;
}

#ifdef CP_HAVE_AVX2_PATH
__attribute__((target("avx2"))) static inline int64_t cp_plain_end_avx2(const uint8_t *p,
                                                                        int64_t i, int64_t n,
                                                                        int *ascii)
{
    const __m256i quote = _mm256_set1_epi8(0x22);
    const __m256i backslash = _mm256_set1_epi8(0x5C);
    const __m256i control = _mm256_set1_epi8(0x1F);
    unsigned high = 0;
    for (; i + 32 <= n; i += 32) {
        __m256i x = _mm256_loadu_si256((const __m256i *)(p + i));
        __m256i hit = _mm256_or_si256(
            _mm256_or_si256(_mm256_cmpeq_epi8(x, quote), _mm256_cmpeq_epi8(x, backslash)),
            _mm256_cmpeq_epi8(_mm256_min_epu8(x, control), x));
        unsigned mask = (unsigned)_mm256_movemask_epi8(hit);
        unsigned top = (unsigned)_mm256_movemask_epi8(x);
        if (mask) {
            int at = __builtin_ctz(mask);
            high |= top & ((1u << at) - 1u); /* at < 32: the bytes before the hit */
            *ascii = high == 0;
            return i + at;
        }
        high |= top;
    }
    return cp_plain_end_scalar(p, i, n, high ? CP_HIGHS : 0, ascii);
}
#endif

/* Runs shorter than this go to the scalar path. */
#define CP_PLAIN_VECTOR_MIN 64

static inline int64_t cp_plain_end(const uint8_t *p, int64_t i, int64_t n, int *ascii)
{
    /* *ascii: whether the run's bytes are all ASCII (then its length is its code points). */
#ifdef CP_HAVE_AVX2_PATH
    if (n - i >= CP_PLAIN_VECTOR_MIN && cp_have_avx2())
        return cp_plain_end_avx2(p, i, n, ascii);
#endif
    return cp_plain_end_scalar(p, i, n, 0, ascii);
}

#endif
