/* tools/io/json.c — the program's JSON writer (json.h). */
#include "json.h"

#include <inttypes.h>
#include <math.h>
#include <string.h>

void json_start(json *j, util_str *out) {
    j->out = out;
    j->depth = 0;
    j->has_items[0] = false;
}

static void escaped(util_str *s, const unsigned char *p, size_t n, bool high_bytes) {
    for (size_t i = 0; i < n; i++) {
        unsigned char c = p[i];
        if (c == '"' || c == '\\') util_str_printf(s, "\\%c", c);
        else if (c < 0x20 || (high_bytes && c >= 0x80)) util_str_printf(s, "\\u%04x", c);
        else util_str_printf(s, "%c", c);
    }
}

/* The comma and key that go before every value. */
static void item(json *j, const char *key) {
    if (j->has_items[j->depth]) util_str_printf(j->out, ",");
    j->has_items[j->depth] = true;
    if (key) {
        util_str_printf(j->out, "\"");
        escaped(j->out, (const unsigned char *)key, strlen(key), false);
        util_str_printf(j->out, "\":");
    }
}

static void open_(json *j, const char *key, char open, char close) {
    if (j->depth >= JSON_MAX_DEPTH) return;
    item(j, key);
    util_str_printf(j->out, "%c", open);
    j->closers[++j->depth] = close;
    j->has_items[j->depth] = false;
}

void json_object(json *j, const char *key) { open_(j, key, '{', '}'); }
void json_array(json *j, const char *key) { open_(j, key, '[', ']'); }

void json_end(json *j) {
    if (j->depth == 0) return;
    util_str_printf(j->out, "%c", j->closers[j->depth--]);
}

void json_str(json *j, const char *key, const char *v) {
    if (!v) {
        json_null(j, key);
        return;
    }
    json_bytes(j, key, v, strlen(v));
}

void json_bytes(json *j, const char *key, const void *p, size_t n) {
    item(j, key);
    util_str_printf(j->out, "\"");
    escaped(j->out, p, n, true);
    util_str_printf(j->out, "\"");
}

/* Whether p[0..n) is well-formed UTF-8 (no overlong forms, surrogates or
 * code points above U+10FFFF). */
static bool valid_utf8(const unsigned char *p, size_t n) {
    for (size_t i = 0; i < n;) {
        unsigned char c = p[i];
        size_t k = c < 0x80                 ? 1
                   : c >= 0xC2 && c <= 0xDF ? 2
                   : c >= 0xE0 && c <= 0xEF ? 3
                   : c >= 0xF0 && c <= 0xF4 ? 4
                                            : 0;
        if (!k || i + k > n) return false;
        for (size_t m = 1; m < k; m++)
            if ((p[i + m] & 0xC0) != 0x80) return false;
        if ((c == 0xE0 && p[i + 1] < 0xA0) || (c == 0xED && p[i + 1] > 0x9F) ||
            (c == 0xF0 && p[i + 1] < 0x90) || (c == 0xF4 && p[i + 1] > 0x8F))
            return false;
        i += k;
    }
    return true;
}

void json_text(json *j, const char *key, const char *v) {
    if (!v) {
        json_null(j, key);
        return;
    }
    size_t n = strlen(v);
    if (!valid_utf8((const unsigned char *)v, n)) {
        json_bytes(j, key, v, n);
        return;
    }
    item(j, key);
    util_str_printf(j->out, "\"");
    escaped(j->out, (const unsigned char *)v, n, false);
    util_str_printf(j->out, "\"");
}

void json_int(json *j, const char *key, int64_t v) {
    item(j, key);
    util_str_printf(j->out, "%" PRId64, v);
}

void json_uint(json *j, const char *key, uint64_t v) {
    item(j, key);
    util_str_printf(j->out, "%" PRIu64, v);
}

void json_num(json *j, const char *key, double v) {
    item(j, key);
    if (isfinite(v)) util_str_printf(j->out, "%.9g", v);
    else util_str_printf(j->out, "null");
}

void json_fixed(json *j, const char *key, double v, int decimals) {
    item(j, key);
    if (isfinite(v)) util_str_printf(j->out, "%.*f", decimals, v);
    else util_str_printf(j->out, "null");
}

void json_bool(json *j, const char *key, bool v) {
    item(j, key);
    util_str_printf(j->out, "%s", v ? "true" : "false");
}

void json_null(json *j, const char *key) {
    item(j, key);
    util_str_printf(j->out, "null");
}
