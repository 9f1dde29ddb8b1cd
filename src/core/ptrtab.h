/* src/core/ptrtab.h — open-addressing hash tables keyed by a pointer (the backward
 * pass's node table, src/autograd/engine.c; the leaf and node sets of
 * src/autograd/leaves.c).
 *
 * A table is an array of `cap` entries of `elem` bytes, cap a power of two
 * (or 0); an entry's first member is its key, a pointer, NULL in a free
 * slot. Linear probing; the owner keeps the load at most 1/2 (so a probe
 * always ends on a free slot) and owns the array (free()). */
#ifndef REMAT_PTRTAB_H
#define REMAT_PTRTAB_H

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

static inline size_t rm_ptr_hash(const void *p) {
    uintptr_t x = (uintptr_t)p;
    x ^= x >> 33;
    x *= 0xff51afd7ed558ccdULL;
    return (size_t)(x ^ (x >> 33));
}

/* The key of entry i. */
static inline const void *rm_ptrtab_key(const void *tab, size_t elem, size_t i) {
    const void *k;
    memcpy(&k, (const char *)tab + i * elem, sizeof k);
    return k;
}

/* The index of key's entry in tab (cap > 0), or of the free slot where it
 * goes when it is absent. */
static inline size_t rm_ptrtab_slot(const void *tab, size_t cap, size_t elem, const void *key) {
    size_t j = rm_ptr_hash(key) & (cap - 1);
    for (const void *k; (k = rm_ptrtab_key(tab, elem, j)) && k != key;) j = (j + 1) & (cap - 1);
    return j;
}

/* A new array of new_cap (a power of two, room for every entry) entries
 * holding tab's, rehashed; tab is freed. NULL when out of memory: tab is
 * then untouched. */
static inline void *rm_ptrtab_grow(void *tab, size_t cap, size_t new_cap, size_t elem) {
    char *nt = calloc(new_cap, elem);
    if (!nt) return NULL;
    for (size_t i = 0; i < cap; i++) {
        const void *k = rm_ptrtab_key(tab, elem, i);
        if (k)
            memcpy(nt + rm_ptrtab_slot(nt, new_cap, elem, k) * elem, (char *)tab + i * elem, elem);
    }
    free(tab);
    return nt;
}

#endif /* REMAT_PTRTAB_H */
