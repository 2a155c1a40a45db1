/* Code point counting with strict UTF-8 validation, for the columnar kernel.
 *
 * cp_utf8_count(p, n, &bad) returns the number of code points in p[0..n), or -1 with *bad set
 * to the offset of the first byte of the first invalid sequence (RFC 3629: no overlongs, no
 * surrogates, nothing above U+10FFFF, no truncated sequence). cp_utf8_count_in(p, n, avail,
 * &bad) is the same where avail bytes from p may be read: a string in the middle of a buffer
 * has its last block loaded in place (the bytes past it masked off) instead of copied out.
 *
 * Two implementations give identical results:
 * - scalar: ASCII runs eight bytes at a time, a strict decoder for everything else;
 * - AVX2 (x86-64 with GCC or Clang, chosen at run time): 128 bytes per step while no byte is
 *   high, 32-byte blocks checked without a branch otherwise. Validation follows
 *   Keiser & Lemire, "Validating UTF-8 in less than one instruction per byte" (2021): three
 *   nibble lookups classify every pair of adjacent bytes, and a saturating subtraction marks
 *   the bytes that must be the 2nd or 3rd continuation of a 3- or 4-byte sequence. Code points
 *   are the bytes that are not continuation bytes. On an error the scalar decoder finds the
 *   exact byte.
 */
#ifndef CONTEXTPOLICY_UTF8_H
#define CONTEXTPOLICY_UTF8_H

#include <stdint.h>
#include <string.h>

#define CP_ASCII_MASK 0x8080808080808080ULL

static inline int64_t cp_utf8_count_scalar(const uint8_t *p, int64_t n, int64_t *bad)
{
    int64_t i = 0, count = 0;
    while (i < n) {
        while (i + 8 <= n) { /* ASCII fast path */
            uint64_t w;
            memcpy(&w, p + i, 8);
            if (w & CP_ASCII_MASK)
                break;
            i += 8;
            count += 8;
        }
        if (i >= n)
            break;
        uint8_t b = p[i];
        if (b < 0x80) {
            i += 1;
            count += 1;
            continue;
        }
        int need;
        uint8_t lo = 0x80, hi = 0xBF;
        if (b >= 0xC2 && b <= 0xDF) {
            need = 1;
        } else if (b >= 0xE0 && b <= 0xEF) {
            need = 2;
            if (b == 0xE0) lo = 0xA0;
            else if (b == 0xED) hi = 0x9F;
        } else if (b >= 0xF0 && b <= 0xF4) {
            need = 3;
            if (b == 0xF0) lo = 0x90;
            else if (b == 0xF4) hi = 0x8F;
        } else {
            *bad = i;
            return -1;
        }
        if (i + need >= n) { /* truncated sequence */
            *bad = i;
            return -1;
        }
        uint8_t c = p[i + 1];
        if (c < lo || c > hi) {
            *bad = i;
            return -1;
        }
        for (int k = 2; k <= need; k++) {
            if ((p[i + k] & 0xC0) != 0x80) {
                *bad = i;
                return -1;
            }
        }
        i += need + 1;
        count += 1;
    }
    return count;
}

#if (defined(__GNUC__) || defined(__clang__)) && (defined(__x86_64__) || defined(_M_X64))
#define CP_HAVE_AVX2_PATH 1
#include <immintrin.h>

/* Error classes of a pair of adjacent bytes (byte 1, byte 2). */
#define CP_TOO_SHORT (1 << 0)      /* 11______ then 0_______ or 11______ */
#define CP_TOO_LONG (1 << 1)       /* 0_______ then 10______ */
#define CP_OVERLONG_3 (1 << 2)     /* 11100000 100_____ */
#define CP_TOO_LARGE (1 << 3)      /* 11110100 1001____, 11110100 101_____, 11110101+ 10______ */
#define CP_SURROGATE (1 << 4)      /* 11101101 101_____ */
#define CP_OVERLONG_2 (1 << 5)     /* 1100000_ 10______ */
#define CP_TOO_LARGE_1000 (1 << 6) /* 11110101+ 1000____ */
#define CP_OVERLONG_4 (1 << 6)     /* 11110000 1000____ */
#define CP_TWO_CONTS (1 << 7)      /* 10______ 10______ (valid only inside a 3/4-byte sequence) */
#define CP_CARRY (CP_TOO_SHORT | CP_TOO_LONG | CP_TWO_CONTS)

__attribute__((target("avx2"))) static inline __m256i cp_prev(__m256i input, __m256i prev, int n)
{
    /* The 32 bytes ending n bytes before the end of `input`, continuing from `prev`. */
    __m256i joined = _mm256_permute2x128_si256(prev, input, 0x21);
    switch (n) {
    case 1: return _mm256_alignr_epi8(input, joined, 15);
    case 2: return _mm256_alignr_epi8(input, joined, 14);
    default: return _mm256_alignr_epi8(input, joined, 13);
    }
}

__attribute__((target("avx2"))) static inline __m256i cp_block_errors(__m256i input, __m256i prev)
{
    const __m256i low4 = _mm256_set1_epi8(0x0F);
    const __m256i byte_1_high_table = _mm256_setr_epi8(
        CP_TOO_LONG, CP_TOO_LONG, CP_TOO_LONG, CP_TOO_LONG,
        CP_TOO_LONG, CP_TOO_LONG, CP_TOO_LONG, CP_TOO_LONG,
        CP_TWO_CONTS, CP_TWO_CONTS, CP_TWO_CONTS, CP_TWO_CONTS,
        CP_TOO_SHORT | CP_OVERLONG_2,
        CP_TOO_SHORT,
        CP_TOO_SHORT | CP_OVERLONG_3 | CP_SURROGATE,
        CP_TOO_SHORT | CP_TOO_LARGE | CP_TOO_LARGE_1000 | CP_OVERLONG_4,
        CP_TOO_LONG, CP_TOO_LONG, CP_TOO_LONG, CP_TOO_LONG,
        CP_TOO_LONG, CP_TOO_LONG, CP_TOO_LONG, CP_TOO_LONG,
        CP_TWO_CONTS, CP_TWO_CONTS, CP_TWO_CONTS, CP_TWO_CONTS,
        CP_TOO_SHORT | CP_OVERLONG_2,
        CP_TOO_SHORT,
        CP_TOO_SHORT | CP_OVERLONG_3 | CP_SURROGATE,
        CP_TOO_SHORT | CP_TOO_LARGE | CP_TOO_LARGE_1000 | CP_OVERLONG_4);
#define CP_LARGE (CP_CARRY | CP_TOO_LARGE | CP_TOO_LARGE_1000)
    const __m256i byte_1_low_table = _mm256_setr_epi8(
        CP_CARRY | CP_OVERLONG_3 | CP_OVERLONG_2 | CP_OVERLONG_4,
        CP_CARRY | CP_OVERLONG_2,
        CP_CARRY, CP_CARRY,
        CP_CARRY | CP_TOO_LARGE,
        CP_LARGE, CP_LARGE, CP_LARGE,
        CP_LARGE, CP_LARGE, CP_LARGE, CP_LARGE, CP_LARGE,
        CP_LARGE | CP_SURROGATE,
        CP_LARGE, CP_LARGE,
        CP_CARRY | CP_OVERLONG_3 | CP_OVERLONG_2 | CP_OVERLONG_4,
        CP_CARRY | CP_OVERLONG_2,
        CP_CARRY, CP_CARRY,
        CP_CARRY | CP_TOO_LARGE,
        CP_LARGE, CP_LARGE, CP_LARGE,
        CP_LARGE, CP_LARGE, CP_LARGE, CP_LARGE, CP_LARGE,
        CP_LARGE | CP_SURROGATE,
        CP_LARGE, CP_LARGE);
#undef CP_LARGE
#define CP_CONT_1000 (CP_TOO_LONG | CP_OVERLONG_2 | CP_TWO_CONTS | CP_OVERLONG_3 | CP_TOO_LARGE_1000 | CP_OVERLONG_4)
#define CP_CONT_1001 (CP_TOO_LONG | CP_OVERLONG_2 | CP_TWO_CONTS | CP_OVERLONG_3 | CP_TOO_LARGE)
#define CP_CONT_101 (CP_TOO_LONG | CP_OVERLONG_2 | CP_TWO_CONTS | CP_SURROGATE | CP_TOO_LARGE)
    const __m256i byte_2_high_table = _mm256_setr_epi8(
        CP_TOO_SHORT, CP_TOO_SHORT, CP_TOO_SHORT, CP_TOO_SHORT,
        CP_TOO_SHORT, CP_TOO_SHORT, CP_TOO_SHORT, CP_TOO_SHORT,
        CP_CONT_1000, CP_CONT_1001, CP_CONT_101, CP_CONT_101,
        CP_TOO_SHORT, CP_TOO_SHORT, CP_TOO_SHORT, CP_TOO_SHORT,
        CP_TOO_SHORT, CP_TOO_SHORT, CP_TOO_SHORT, CP_TOO_SHORT,
        CP_TOO_SHORT, CP_TOO_SHORT, CP_TOO_SHORT, CP_TOO_SHORT,
        CP_CONT_1000, CP_CONT_1001, CP_CONT_101, CP_CONT_101,
        CP_TOO_SHORT, CP_TOO_SHORT, CP_TOO_SHORT, CP_TOO_SHORT);
#undef CP_CONT_1000
#undef CP_CONT_1001
#undef CP_CONT_101
    __m256i prev1 = cp_prev(input, prev, 1);
    __m256i b1h = _mm256_shuffle_epi8(byte_1_high_table,
                                      _mm256_and_si256(_mm256_srli_epi16(prev1, 4), low4));
    __m256i b1l = _mm256_shuffle_epi8(byte_1_low_table, _mm256_and_si256(prev1, low4));
    __m256i b2h = _mm256_shuffle_epi8(byte_2_high_table,
                                      _mm256_and_si256(_mm256_srli_epi16(input, 4), low4));
    __m256i special = _mm256_and_si256(_mm256_and_si256(b1h, b1l), b2h);
    /* Bytes that must be the 2nd continuation of a 3-byte lead or the 3rd of a 4-byte lead. */
    __m256i prev2 = cp_prev(input, prev, 2);
    __m256i prev3 = cp_prev(input, prev, 3);
    __m256i third = _mm256_subs_epu8(prev2, _mm256_set1_epi8((char)(0xE0 - 0x80)));
    __m256i fourth = _mm256_subs_epu8(prev3, _mm256_set1_epi8((char)(0xF0 - 0x80)));
    __m256i must23 = _mm256_and_si256(_mm256_or_si256(third, fourth), _mm256_set1_epi8((char)0x80));
    return _mm256_xor_si256(must23, special);
}

__attribute__((target("avx2"))) static inline __m256i cp_incomplete(__m256i input)
{
    /* A sequence begun in the last three bytes that the block does not finish. */
    const __m256i max = _mm256_setr_epi8(
        -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1,
        -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1,
        (char)(0xF0 - 1), (char)(0xE0 - 1), (char)(0xC0 - 1));
    return _mm256_subs_epu8(input, max);
}

/* Continuation bytes: 0x80..0xBF, i.e. signed bytes below (int8_t)0xC0; as 0xFF lanes. */
#define CP_CONTS(input) _mm256_cmpgt_epi8(cont_limit, (input))

__attribute__((target("avx2"))) static inline int64_t cp_sum_epi64(__m256i v)
{
    __m128i s = _mm_add_epi64(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
    return (int64_t)_mm_cvtsi128_si64(s) + (int64_t)_mm_extract_epi64(s, 1);
}

__attribute__((target("avx2"))) static int64_t cp_utf8_count_avx2(const uint8_t *p, int64_t n,
                                                                 int64_t avail, int64_t *bad)
{
    /* Blocks with a high byte are checked without a branch per 32 bytes (text that mixes
     * scripts would mispredict it block by block); their continuation bytes are counted in
     * byte lanes, summed once per 128 bytes. */
    __m256i prev = _mm256_setzero_si256();
    __m256i error = _mm256_setzero_si256();
    __m256i pending = _mm256_setzero_si256();
    __m256i conts = _mm256_setzero_si256(); /* four 64-bit counts */
    const __m256i zero = _mm256_setzero_si256();
    const __m256i cont_limit = _mm256_set1_epi8((char)0xC0); /* bytes < 0xC0 as signed: < -64 */
    int64_t i = 0;
    uint8_t tail[32];
    /* 128 bytes per step: text is mostly ASCII, and four blocks without a high byte need
     * nothing but the check that no sequence was left pending before them. */
    for (; i + 128 <= n; i += 128) {
        __m256i a = _mm256_loadu_si256((const __m256i *)(p + i));
        __m256i b = _mm256_loadu_si256((const __m256i *)(p + i + 32));
        __m256i c = _mm256_loadu_si256((const __m256i *)(p + i + 64));
        __m256i d = _mm256_loadu_si256((const __m256i *)(p + i + 96));
        if (_mm256_movemask_epi8(_mm256_or_si256(_mm256_or_si256(a, b), _mm256_or_si256(c, d))) == 0) {
            error = _mm256_or_si256(error, pending);
            pending = zero;
            prev = d;
            continue;
        }
        error = _mm256_or_si256(error, cp_block_errors(a, prev));
        error = _mm256_or_si256(error, cp_block_errors(b, a));
        error = _mm256_or_si256(error, cp_block_errors(c, b));
        error = _mm256_or_si256(error, cp_block_errors(d, c));
        pending = cp_incomplete(d);
        prev = d;
        /* Each lane is 0 or -1 per block: the negated sum of four fits a byte. */
        __m256i lanes = _mm256_add_epi8(_mm256_add_epi8(CP_CONTS(a), CP_CONTS(b)),
                                        _mm256_add_epi8(CP_CONTS(c), CP_CONTS(d)));
        conts = _mm256_add_epi64(conts, _mm256_sad_epu8(_mm256_sub_epi8(zero, lanes), zero));
    }
    for (; i < n; i += 32) {
        __m256i input;
        if (i + 32 <= n) {
            input = _mm256_loadu_si256((const __m256i *)(p + i));
        } else if (i + 32 <= avail) {
            /* The bytes after the string are readable (the rest of its buffer): one load,
             * the lanes past the end cleared. */
            const __m256i iota = _mm256_setr_epi8(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13,
                                                  14, 15, 16, 17, 18, 19, 20, 21, 22, 23, 24,
                                                  25, 26, 27, 28, 29, 30, 31);
            __m256i keep = _mm256_cmpgt_epi8(_mm256_set1_epi8((char)(n - i)), iota);
            input = _mm256_and_si256(_mm256_loadu_si256((const __m256i *)(p + i)), keep);
        } else {
            /* Zero padding is ASCII: a sequence cut off by the end shows up as too short. */
            memset(tail, 0, sizeof(tail));
            memcpy(tail, p + i, (size_t)(n - i));
            input = _mm256_loadu_si256((const __m256i *)tail);
        }
        error = _mm256_or_si256(error, cp_block_errors(input, prev));
        pending = cp_incomplete(input);
        prev = input;
        conts = _mm256_add_epi64(conts, _mm256_sad_epu8(_mm256_sub_epi8(zero, CP_CONTS(input)),
                                                        zero));
    }
    error = _mm256_or_si256(error, pending);
    if (!_mm256_testz_si256(error, error))
        return cp_utf8_count_scalar(p, n, bad); /* finds the first bad byte */
    return n - cp_sum_epi64(conts);
}
#undef CP_CONTS

static int cp_avx2_state = -1; /* -1 unknown, 0 no, 1 yes */

static inline int cp_have_avx2(void)
{
    if (cp_avx2_state < 0) {
        __builtin_cpu_init();
        cp_avx2_state = __builtin_cpu_supports("avx2");
    }
    return cp_avx2_state;
}
#endif

/* Strings shorter than this go to the scalar path: the vector setup does not pay off. */
#define CP_VECTOR_MIN 64

/* As cp_utf8_count, where the avail >= n bytes from p may be read (the string's buffer goes on
 * past it): the last block of a string is then loaded in place rather than copied out. */
static inline int64_t cp_utf8_count_in(const uint8_t *p, int64_t n, int64_t avail, int64_t *bad)
{
#ifdef CP_HAVE_AVX2_PATH
    if (n >= CP_VECTOR_MIN && cp_have_avx2())
        return cp_utf8_count_avx2(p, n, avail < n ? n : avail, bad);
#endif
    (void)avail;
    return cp_utf8_count_scalar(p, n, bad);
}

static inline int64_t cp_utf8_count(const uint8_t *p, int64_t n, int64_t *bad)
{
    return cp_utf8_count_in(p, n, n, bad);
}

#endif
