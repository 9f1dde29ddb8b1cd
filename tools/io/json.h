/*
 * tools/io/json.h — the one JSON writer of the remat program (train --json and
 * --log, bench --json, sample --json, Chrome traces).
 *
 * Appends to a util_str; keeps the commas and nesting itself, so a caller
 * only says what comes next:
 *
 *   util_str s = {0};
 *   json j;
 *   json_start(&j, &s);
 *   json_object(&j, NULL);              {
 *   json_int(&j, "step", 3);              "step":3,
 *   json_array(&j, "losses");             "losses":[
 *   json_num(&j, NULL, 0.5);                0.5
 *   json_end(&j);                         ]
 *   json_end(&j);                       }
 *
 * Keys are given inside an object and NULL inside an array (or at the top).
 * Numbers that are not finite are written as null (JSON has no NaN/Inf).
 * Strings are escaped: '"', '\\', control characters as \u00XX; json_bytes
 * also writes bytes >= 0x80 as \u00XX (each byte one code point, so any
 * byte string gives valid JSON). Out of memory sets s->oom and the rest is
 * dropped (util_str). Nesting deeper than JSON_MAX_DEPTH is dropped too.
 */
#ifndef REMAT_TOOLS_JSON_H
#define REMAT_TOOLS_JSON_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "cli/util.h"

#define JSON_MAX_DEPTH 16

typedef struct json {
    util_str *out;
    int depth;
    bool has_items[JSON_MAX_DEPTH + 1]; /* a comma goes before the next item at this depth */
    char closers[JSON_MAX_DEPTH + 1];   /* '}' or ']' of each open level */
} json;

void json_start(json *j, util_str *out);
void json_object(json *j, const char *key); /* { */
void json_array(json *j, const char *key);  /* [ */
void json_end(json *j);                     /* } or ], whichever is open */

void json_str(json *j, const char *key, const char *v); /* NULL: null */
void json_bytes(json *j, const char *key, const void *p, size_t n);
/* Text: valid UTF-8 is written as it is (a JSON reader gets the same
 * characters back); anything else as json_bytes writes it. */
void json_text(json *j, const char *key, const char *v);
void json_int(json *j, const char *key, int64_t v);
void json_uint(json *j, const char *key, uint64_t v);
void json_num(json *j, const char *key, double v);                 /* %.9g */
void json_fixed(json *j, const char *key, double v, int decimals); /* %.<decimals>f */
void json_bool(json *j, const char *key, bool v);
void json_null(json *j, const char *key);

#endif /* REMAT_TOOLS_JSON_H */
