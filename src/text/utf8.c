/* src/text/utf8.c — UTF-8 checks, U+FFFD replacement, GPT-2's byte-level
 * alphabet (see tok.h). */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "tok.h"

size_t tok_utf8_char(const unsigned char *s, size_t n) {
    unsigned c = s[0];
    if (c < 0x80) return 1;
    /* Table 3-7 of the Unicode Standard: the well-formed byte sequences */
    size_t len;
    unsigned lo = 0x80, hi = 0xBF;
    if (c >= 0xC2 && c <= 0xDF) len = 2;
    else if (c >= 0xE0 && c <= 0xEF) {
        len = 3;
        if (c == 0xE0) lo = 0xA0;
        if (c == 0xED) hi = 0x9F;
    } else if (c >= 0xF0 && c <= 0xF4) {
        len = 4;
        if (c == 0xF0) lo = 0x90;
        if (c == 0xF4) hi = 0x8F;
    } else return 0;
    if (n < len || s[1] < lo || s[1] > hi) return 0;
    for (size_t i = 2; i < len; i++)
        if (s[i] < 0x80 || s[i] > 0xBF) return 0;
    return len;
}

size_t tok_utf8_valid_prefix(const unsigned char *s, size_t n) {
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
        size_t k = tok_utf8_char(s + i, n - i);
        if (!k) return i;
        i += k;
    }
    return n;
}

/* The length of the maximal subpart of an ill-formed sequence at s: the
 * longest prefix of a well-formed sequence (at least one byte). */
static size_t maximal_subpart(const unsigned char *s, size_t n) {
    unsigned c = s[0];
    size_t len;
    unsigned lo = 0x80, hi = 0xBF;
    if (c >= 0xC2 && c <= 0xDF) len = 2;
    else if (c >= 0xE0 && c <= 0xEF) {
        len = 3;
        if (c == 0xE0) lo = 0xA0;
        if (c == 0xED) hi = 0x9F;
    } else if (c >= 0xF0 && c <= 0xF4) {
        len = 4;
        if (c == 0xF0) lo = 0x90;
        if (c == 0xF4) hi = 0x8F;
    } else return 1;
    size_t k = 1;
    if (k < n && k < len && s[k] >= lo && s[k] <= hi) {
        k++;
        while (k < n && k < len && s[k] >= 0x80 && s[k] <= 0xBF) k++;
    }
    return k;
}

bool tok_utf8_lossy(const unsigned char *s, size_t n, char **out, size_t *len, size_t *cap) {
    size_t i = 0;
    while (i < n) {
        size_t v = tok_utf8_valid_prefix(s + i, n - i);
        size_t bad = i + v < n ? maximal_subpart(s + i + v, n - i - v) : 0;
        size_t need = *len + v + (bad ? 3 : 0) + 1;
        if (need > *cap) {
            size_t nc = *cap ? *cap : 64;
            while (nc < need) nc *= 2;
            char *p = realloc(*out, nc);
            if (!p) return false;
            *out = p;
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

/* GPT-2's bytes_to_unicode: the printable bytes ('!'..'~', 0xA1..0xAC,
 * 0xAE..0xFF) stand for themselves, the other 68 for U+0100 + their rank.
 * Tables built once (tok_tables_init): each byte's character as UTF-8 (one
 * or two bytes, the first in the high half when two) and, for the code
 * points below U+0200, the byte + 1 they stand for. */
static uint16_t g_utf8[256];
static uint8_t g_utf8_len[256];
static uint16_t g_cp_byte[512];

static bool printable(unsigned b) {
    return (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || b >= 0xAE;
}

static void build_tables(void) {
    unsigned n = 0;
    for (unsigned b = 0; b < 256; b++) {
        unsigned cp = printable(b) ? b : 256 + n++;
        g_cp_byte[cp] = (uint16_t)(b + 1);
        if (cp < 0x80) {
            g_utf8[b] = (uint16_t)cp;
            g_utf8_len[b] = 1;
        } else {
            g_utf8[b] = (uint16_t)((0xC0 | (cp >> 6)) << 8 | (0x80 | (cp & 0x3F)));
            g_utf8_len[b] = 2;
        }
    }
}

static pthread_once_t g_once = PTHREAD_ONCE_INIT;
void tok_tables_init(void) { pthread_once(&g_once, build_tables); }

int tok_char_byte(uint32_t cp) { return cp < 512 ? g_cp_byte[cp] : 0; }

size_t tok_bytes_to_chars(const unsigned char *s, size_t n, char *out) {
    size_t k = 0;
    for (size_t i = 0; i < n; i++) {
        unsigned b = s[i];
        if (g_utf8_len[b] == 1) out[k++] = (char)g_utf8[b];
        else {
            out[k++] = (char)(g_utf8[b] >> 8);
            out[k++] = (char)(g_utf8[b] & 0xFF);
        }
    }
    return k;
}
