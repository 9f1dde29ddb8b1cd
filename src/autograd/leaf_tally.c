/* src/autograd/leaf_tally.c — the leaves a reentrant checkpoint's region
 * reads in its forward, counted for the nested backward passes it will run
 * (rm_leaf_tally, accumulate.h). The graph walk that reports them lives in
 * leaves.c; custom functions keep a region's tally (function.c). */
#include <stdlib.h>

#include "accumulate.h"
#include "core/core.h"
#include "core/ptrtab.h"

/* ---- the leaves a region reads (a reentrant checkpoint's forward) ------------------------ */
typedef struct tally_entry {
    remat_tensor *leaf; /* retained; NULL: free slot */
    int nested;         /* accumulations in nested passes of regions inside this one */
    bool direct;        /* read by an op of this region: its pass accumulates once */
} tally_entry;

struct rm_leaf_tally {
    tally_entry *slot; /* open addressing over cap slots (a power of two) */
    size_t cap, n;
    bool failed;           /* out of memory: the counts are incomplete */
    rm_leaf_tally *parent; /* the recording this one interrupted */
};

static RM_TLS rm_leaf_tally *tls_tally;

/* The entry of leaf, added if absent; NULL (and t->failed) out of memory. */
static tally_entry *tally_find(rm_leaf_tally *t, remat_tensor *leaf) {
    if (2 * (t->n + 1) > t->cap) {
        size_t cap = t->cap ? 2 * t->cap : 32;
        tally_entry *slot = rm_ptrtab_grow(t->slot, t->cap, cap, sizeof *slot);
        if (!slot) {
            t->failed = true;
            return NULL;
        }
        t->slot = slot;
        t->cap = cap;
    }
    size_t j = rm_ptrtab_slot(t->slot, t->cap, sizeof *t->slot, leaf);
    if (!t->slot[j].leaf) {
        t->slot[j].leaf = rm_retain(leaf);
        t->n++;
    }
    return &t->slot[j];
}

static bool is_grad_leaf(const remat_tensor *x) { return x && x->requires_grad && !x->grad_fn; }

void rm_note_leaf_reads(int n, remat_tensor *const *inputs) {
    rm_leaf_tally *t = tls_tally;
    if (!t || t->failed) return;
    for (int i = 0; i < n; i++) {
        if (!is_grad_leaf(inputs[i])) continue;
        tally_entry *e = tally_find(t, inputs[i]);
        if (!e) return;
        e->direct = true;
    }
}

void rm_leaf_tally_unknown(void) {
    if (tls_tally) tls_tally->failed = true;
}

rm_leaf_tally *rm_leaf_tally_begin(void) {
    rm_leaf_tally *t = calloc(1, sizeof *t);
    if (!t) {
        /* the enclosing recording would take this region's reads as its own */
        if (tls_tally) tls_tally->failed = true;
        return NULL;
    }
    t->parent = tls_tally;
    tls_tally = t;
    return t;
}

void rm_leaf_tally_end(rm_leaf_tally *t, int n_inputs, remat_tensor *const *inputs) {
    if (!t) return;
    tls_tally = t->parent;
    /* the region's inputs are not leaves of its nested pass (it runs on
     * detached copies); the custom function's edges reach them instead */
    for (int i = 0; i < n_inputs && t->cap; i++) {
        if (!is_grad_leaf(inputs[i])) continue;
        size_t j = rm_ptrtab_slot(t->slot, t->cap, sizeof *t->slot, inputs[i]);
        if (t->slot[j].leaf) t->slot[j].direct = false;
    }
    rm_leaf_tally *p = t->parent;
    if (!p || p->failed) return;
    if (t->failed) {
        p->failed = true;
        return;
    }
    /* the enclosing region will run this one's nested pass inside its own */
    for (size_t i = 0; i < t->cap; i++) {
        const tally_entry *e = &t->slot[i];
        int k = e->nested + e->direct;
        if (!e->leaf || !k) continue;
        tally_entry *pe = tally_find(p, e->leaf);
        if (!pe) return;
        pe->nested += k;
    }
}

void rm_leaf_tally_free(rm_leaf_tally *t) {
    if (!t) return;
    for (size_t i = 0; i < t->cap; i++) rm_release(t->slot[i].leaf);
    free(t->slot);
    free(t);
}

bool rm_leaf_tally_report(const rm_leaf_tally *t, rm_accumulate_observer_fn fn, void *user_data) {
    if (!t || t->failed) return false;
    for (size_t i = 0; i < t->cap; i++) {
        const tally_entry *e = &t->slot[i];
        for (int k = 0; e->leaf && k < e->nested + e->direct; k++) fn(user_data, e->leaf);
    }
    return true;
}
