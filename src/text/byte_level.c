/* src/text/byte_level.c — GPT-2's byte-level alphabet (see tok.h); UTF-8
 * itself is src/io/utf8.c's. */
#include <pthread.h>

#include "tok.h"

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
