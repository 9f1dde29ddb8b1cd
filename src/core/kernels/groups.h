/* src/core/kernels/groups.h — how every device's sum kernel sees a
 * reduction: (O, R, I) passes over a coalesced shape. Plain C and CUDA C
 * clean (no core headers): the cpu kernels (src/backends/cpu/reduce.c),
 * the cuda wrappers (src/backends/cuda/kplan.h) and their tests use it. */
#ifndef REMAT_KERNELS_GROUPS_H
#define REMAT_KERNELS_GROUPS_H

#include <stdbool.h>
#include <stdint.h>

#define RM_GROUPS_MAX_DIMS 8 /* REMAT_MAX_DIMS */

/* A contiguous shape with a mask of reduced dims, as alternating groups of
 * kept and reduced dims (size-1 dims dropped). Several reduced groups are
 * reduced one pass at a time, innermost first (rm_groups_next_pass). */
typedef struct rm_groups {
    int n;
    int64_t size[RM_GROUPS_MAX_DIMS];
    bool red[RM_GROUPS_MAX_DIMS];
} rm_groups;

static inline void rm_groups_make(int ndim, const int64_t *shape, const bool *mask, rm_groups *g) {
    g->n = 0;
    for (int d = 0; d < ndim; d++) {
        if (shape[d] == 1) continue;
        if (g->n > 0 && g->red[g->n - 1] == mask[d]) {
            g->size[g->n - 1] *= shape[d];
        } else {
            g->size[g->n] = shape[d];
            g->red[g->n] = mask[d];
            g->n++;
        }
    }
}

/* The reduced groups left. */
static inline int rm_groups_nred(const rm_groups *g) {
    int n = 0;
    for (int k = 0; k < g->n; k++) n += g->red[k];
    return n;
}

/* The next pass (the innermost reduced group) as *O, *R, *I; removes that
 * group from g, merging its kept neighbours. Returns false when no reduced
 * group is left. */
static inline bool rm_groups_next_pass(rm_groups *g, int64_t *O, int64_t *R, int64_t *I) {
    int k = g->n - 1;
    while (k >= 0 && !g->red[k]) k--;
    if (k < 0) return false;
    *O = 1;
    *I = 1;
    *R = g->size[k];
    for (int j = 0; j < k; j++) *O *= g->size[j];
    for (int j = k + 1; j < g->n; j++) *I *= g->size[j];
    if (k > 0 && k + 1 < g->n) {
        g->size[k - 1] *= g->size[k + 1];
        for (int j = k; j + 2 < g->n; j++) {
            g->size[j] = g->size[j + 2];
            g->red[j] = g->red[j + 2];
        }
        g->n -= 2;
    } else {
        for (int j = k; j + 1 < g->n; j++) {
            g->size[j] = g->size[j + 1];
            g->red[j] = g->red[j + 1];
        }
        g->n -= 1;
    }
    return true;
}

#endif /* REMAT_KERNELS_GROUPS_H */
