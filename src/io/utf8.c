/* src/io/utf8.c — UTF-8 checks and U+FFFD replacement (see utf8.h). */
#include "io/utf8.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* Matches s[0..n) (n > 0, s[0] not ASCII) against Table 3-7 of the Unicode
 * Standard, the well-formed byte sequences: *len gets the length of the
 * sequence s[0] starts (0 when s[0] starts none), and the result is how many
 * bytes of s match it (at least 1; *len when the whole sequence is there).
 * Both callers read this one match: a well-formed character is a full match,
 * and an ill-formed one's maximal subpart (what U+FFFD replaces) is the
 * matching prefix. */
static size_t match(const unsigned char *s, size_t n, size_t *len) {
    unsigned c = s[0];
    unsigned lo = 0x80, hi = 0xBF; /* the range of the second byte */
    if (c >= 0xC2 && c <= 0xDF) *len = 2;
    else if (c >= 0xE0 && c <= 0xEF) {
        *len = 3;
        if (c == 0xE0) lo = 0xA0; /* no overlong forms */
        if (c == 0xED) hi = 0x9F; /* no surrogates */
    } else if (c >= 0xF0 && c <= 0xF4) {
        *len = 4;
        if (c == 0xF0) lo = 0x90; /* no overlong forms */
        if (c == 0xF4) hi = 0x8F; /* up to U+10FFFF */
    } else {
        *len = 0;
        return 1;
    }
    size_t k = 1;
    if (k < n && s[k] >= lo && s[k] <= hi) {
        k++;
        while (k < n && k < *len && s[k] >= 0x80 && s[k] <= 0xBF) k++;
    }
    return k;
}

size_t rm_utf8_char(const void *p, size_t n) {
    const unsigned char *s = p;
    if (s[0] < 0x80) return 1;
    size_t len;
    return match(s, n, &len) == len ? len : 0;
}

size_t rm_utf8_valid_prefix(const void *p, size_t n) {
    const unsigned char *s = p;
    size_t i = 0;
    while (i < n) {
        /* ASCII eight bytes at a time */
        while (i + 8 <= n) {
            uint64_t w;
            memcpy(&w, s + i, 8);
            if (w & 0x8080808080808080ull) break;
            i += 8;
        }
        if (i >= n) break;
        if (s[i] < 0x80) {
            i++;
            continue;
        }
        size_t k = rm_utf8_char(s + i, n - i);
        if (!k) return i;
        i += k;
    }
    return n;
}

bool rm_utf8_lossy(const void *p, size_t n, char **out, size_t *len, size_t *cap) {
    const unsigned char *s = p;
    size_t i = 0;
    while (i < n) {
        size_t v = rm_utf8_valid_prefix(s + i, n - i), seq = 0;
        size_t bad = i + v < n ? match(s + i + v, n - i - v, &seq) : 0;
        size_t need = *len + v + (bad ? 3 : 0) + 1;
        if (need > *cap) {
            size_t nc = *cap ? *cap : 64;
            while (nc < need) nc *= 2;
            char *q = realloc(*out, nc);
            if (!q) return false;
            *out = q;
            *cap = nc;
        }
        memcpy(*out + *len, s + i, v);
        *len += v;
        i += v;
        if (bad) {
            memcpy(*out + *len, "\xEF\xBF\xBD", 3);
            *len += 3;
            i += bad;
        }
    }
    if (*cap == 0) {
        *out = malloc(1);
        if (!*out) return false;
        *cap = 1;
    }
    (*out)[*len] = '\0';
    return true;
}
