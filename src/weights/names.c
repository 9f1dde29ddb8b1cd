/* src/weights/names.c — the name table (names.h). */
#include "names.h"

#include <stdlib.h>
#include <string.h>

static uint64_t hash(const char *s, size_t n) { /* FNV-1a */
    uint64_t h = 1469598103934665603u;
    for (size_t i = 0; i < n; i++) h = (h ^ (unsigned char)s[i]) * 1099511628211u;
    return h;
}

static int same(const char *stored, const char *name, size_t len) {
    return strncmp(stored, name, len) == 0 && stored[len] == '\0';
}

int64_t rm_name_table_find(const rm_name_table *t, const char *name, size_t len, rm_name_of of,
                           const void *ctx) {
    if (!t->cap) return -1;
    for (size_t k = (size_t)hash(name, len) & (t->cap - 1);; k = (k + 1) & (t->cap - 1)) {
        int64_t s = t->slots[k];
        if (!s) return -1;
        if (same(of(ctx, s - 1), name, len)) return s - 1;
    }
}

static void place(int64_t *slots, size_t cap, int64_t i, const char *name, size_t len) {
    size_t k = (size_t)hash(name, len) & (cap - 1);
    while (slots[k]) k = (k + 1) & (cap - 1);
    slots[k] = i + 1;
}

int rm_name_table_insert(rm_name_table *t, int64_t i, const char *name, size_t len, rm_name_of of,
                         const void *ctx) {
    if (2 * (t->n + 1) > t->cap) {
        size_t nc = t->cap ? 2 * t->cap : 32;
        int64_t *ns = calloc(nc, sizeof *ns);
        if (!ns) return 1;
        for (size_t k = 0; k < t->cap; k++)
            if (t->slots[k]) {
                const char *nm = of(ctx, t->slots[k] - 1);
                place(ns, nc, t->slots[k] - 1, nm, strlen(nm));
            }
        free(t->slots);
        t->slots = ns;
        t->cap = nc;
    }
    place(t->slots, t->cap, i, name, len);
    t->n++;
    return 0;
}

void rm_name_table_free(rm_name_table *t) {
    free(t->slots);
    memset(t, 0, sizeof *t);
}
