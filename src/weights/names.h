/* src/weights/names.h — what the weights files share: a table of entry
 * indices by name (the entries keep the names; the table calls back for
 * them). The UTF-8 check every name and JSON header passes is
 * io/utf8.h's. */
#ifndef REMAT_WEIGHTS_NAMES_H
#define REMAT_WEIGHTS_NAMES_H

#include <stddef.h>
#include <stdint.h>

/* Open addressing over slots holding index + 1 (0: empty); at most half
 * full. Start with {0}. */
typedef struct rm_name_table {
    int64_t *slots;
    size_t cap; /* a power of two, or 0 */
    size_t n;
} rm_name_table;

/* The name of entry i (NUL-terminated) in the caller's entries `ctx`. */
typedef const char *(*rm_name_of)(const void *ctx, int64_t i);

/* The index of the entry named name[0..len) (no NUL needed), or -1. */
int64_t rm_name_table_find(const rm_name_table *t, const char *name, size_t len, rm_name_of of,
                           const void *ctx);
/* Records entry i, named name[0..len) (the caller checked it is not there
 * yet). Returns nonzero when the table cannot grow (nothing changed). */
int rm_name_table_insert(rm_name_table *t, int64_t i, const char *name, size_t len, rm_name_of of,
                         const void *ctx);
void rm_name_table_free(rm_name_table *t);

#endif
