/* src/weights/params.c — the named parameter collection (remat/params.h):
 * entries in insertion order plus an open-addressing table of their
 * indices by name. */
#include <stdlib.h>
#include <string.h>

#include "core/core.h"
#include "io/utf8.h"
#include "remat/params.h"
#include "weights/names.h"

typedef struct entry {
    char *name;
    remat_tensor *t; /* one reference, owned */
} entry;

struct remat_params {
    entry *e;
    int64_t n, cap;
    rm_name_table table;
};

remat_status remat_params_new(remat_params **out) {
    if (!out) return rm_err(REMAT_EINVAL, "remat_params_new: out is NULL");
    *out = calloc(1, sizeof **out);
    if (!*out) return rm_err(REMAT_ENOMEM, "remat_params_new: out of memory");
    return REMAT_OK;
}

void remat_params_free(remat_params *p) {
    if (!p) return;
    for (int64_t i = 0; i < p->n; i++) {
        remat_release(p->e[i].t);
        free(p->e[i].name);
    }
    free(p->e);
    rm_name_table_free(&p->table);
    free(p);
}

static const char *entry_name(const void *ctx, int64_t i) {
    return ((const remat_params *)ctx)->e[i].name;
}

remat_status remat_params_add(remat_params *p, const char *name, remat_tensor *t) {
    if (!p || !name || !t)
        return rm_err(REMAT_EINVAL, "remat_params_add: %s is NULL",
                      !p      ? "params"
                      : !name ? "name"
                              : "t");
    size_t len = strnlen(name, REMAT_PARAMS_MAX_NAME + 1);
    if (len == 0 || len > REMAT_PARAMS_MAX_NAME)
        return rm_err(REMAT_EINVAL, "remat_params_add: a name must have 1 to %d bytes (got %s)",
                      REMAT_PARAMS_MAX_NAME, len ? "more" : "an empty name");
    size_t bad = rm_utf8_valid_prefix(name, len);
    if (bad < len)
        return rm_err(REMAT_EINVAL, "remat_params_add: name '%.64s' is not valid UTF-8 (byte %zu)",
                      name, bad);
    if (rm_name_table_find(&p->table, name, len, entry_name, p) >= 0)
        return rm_err(REMAT_EINVAL, "remat_params_add: '%s' is already in the collection", name);
    if (p->n == p->cap) {
        int64_t nc = p->cap ? p->cap * 2 : 16;
        entry *ne = realloc(p->e, (size_t)nc * sizeof *ne);
        if (!ne) return rm_err(REMAT_ENOMEM, "remat_params_add: out of memory");
        p->e = ne;
        p->cap = nc;
    }
    char *copy = malloc(len + 1);
    if (!copy) return rm_err(REMAT_ENOMEM, "remat_params_add: out of memory");
    memcpy(copy, name, len + 1);
    p->e[p->n].name = copy;
    if (rm_name_table_insert(&p->table, p->n, copy, len, entry_name, p)) {
        free(copy);
        return rm_err(REMAT_ENOMEM, "remat_params_add: out of memory");
    }
    p->e[p->n].t = remat_retain(t);
    p->n++;
    return REMAT_OK;
}

int64_t remat_params_count(const remat_params *p) { return p ? p->n : 0; }

const char *remat_params_name(const remat_params *p, int64_t i) {
    return p && i >= 0 && i < p->n ? p->e[i].name : NULL;
}

remat_tensor *remat_params_tensor(const remat_params *p, int64_t i) {
    return p && i >= 0 && i < p->n ? p->e[i].t : NULL;
}

int64_t remat_params_find(const remat_params *p, const char *name) {
    if (!p || !name) return -1;
    return rm_name_table_find(&p->table, name, strlen(name), entry_name, p);
}

remat_tensor *remat_params_get(const remat_params *p, const char *name) {
    int64_t i = remat_params_find(p, name);
    return i >= 0 ? p->e[i].t : NULL;
}

int64_t remat_params_numel(const remat_params *p) {
    int64_t n = 0;
    for (int64_t i = 0; p && i < p->n; i++) n += remat_numel(p->e[i].t);
    return n;
}
