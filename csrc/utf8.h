/* Code point counting with UTF-8 validation, for the columnar kernel.
 *
 * ASCII runs are consumed eight bytes at a time; any other byte goes through a strict
 * validator (RFC 3629: no overlongs, no surrogates, nothing above U+10FFFF).
 */
#ifndef CONTEXTPOLICY_UTF8_H
#define CONTEXTPOLICY_UTF8_H

#include <stdint.h>
#include <string.h>

#define CP_ASCII_MASK 0x8080808080808080ULL

/* Count the code points in p[0..n). Returns the count, or -1 with *bad set to the offset of the
 * first byte of the invalid sequence. */
static inline int64_t cp_utf8_count(const uint8_t *p, int64_t n, int64_t *bad)
{
    int64_t i = 0, count = 0;
    while (i < n) {
        /* ASCII fast path: 8 bytes at a time. */
        while (i + 8 <= n) {
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

#endif
