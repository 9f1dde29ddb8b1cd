/* src/backends/cpu/select.c — the cpu selection kernel behind
 * masked_fill and where (and their backward): y = cond ? A : B over y's
 * shape, A and B each a broadcast tensor or a scalar, cond i64, f32 or f64
 * (non-zero = true, so a NaN counts as true). */
#include <stdlib.h>
#include <string.h>

#include "cpu.h"
#include "tmpl.h"

#ifdef _OPENMP
#include <omp.h>
#endif

/* Operand slots of the iterator: 0 = y, 1 = cond, 2 = A, 3 = B. A missing
 * A/B tensor reads a local scalar through stride 0. Threads split the flat
 * range; each walks the outer dims with rm_iter and runs the (coalesced)
 * last dim as the inner loop. The inner loop has unit-stride versions (the
 * strides are fixed for the whole call, so the branch is predictable) that
 * the compiler vectorises: y = c ? A : b (masked_fill and its backward),
 * y = c ? a : B (where's backward), y = c ? a : b; anything else runs the
 * strided loop. */
enum { SEL_STRIDED, SEL_SCALAR_A, SEL_SCALAR_B, SEL_UNIT };

/* A selection's coalesced iteration (operands as above), the inner loop's
 * case and the cond it reads (ct REMAT_U8: the packed mask). */
typedef struct sel_plan {
    rm_iter base;
    int64_t s[4]; /* the last dim's strides */
    int kind;
    const void *cbase;
    remat_dtype ct;
} sel_plan;

/* Whether element i of a cond of dtype ct at c is true (non-zero). */
static inline __attribute__((always_inline)) bool sel_true(remat_dtype ct, const void *restrict c,
                                                           int64_t i) {
    switch (ct) {
    case REMAT_U8: return ((const uint8_t *)c)[i] != 0;
    case REMAT_I64: return ((const int64_t *)c)[i] != 0;
    case REMAT_F32: return ((const float *)c)[i] != 0;
    case REMAT_F64: return ((const double *)c)[i] != 0;
    default: return false;
    }
}

static void sel_omp_ids(int *nt, int *id) {
#ifdef _OPENMP
    *nt = omp_get_num_threads();
    *id = omp_get_thread_num();
#else
    *nt = 1;
    *id = 0;
#endif
}

/* Drops size-1 dims and merges adjacent dims that are contiguous with each
 * other in every operand, so that the inner loop is as long as possible
 * (a (B, H, T, T) fill with a (T, T) mask runs T*T-long inner loops). */
static void iter_coalesce(rm_iter *it) {
    int nd = 0;
    for (int d = 0; d < it->ndim; d++) {
        if (it->shape[d] == 1) continue;
        if (nd > 0) {
            bool merge = true;
            for (int k = 0; k < it->n_ops && merge; k++)
                merge = it->strides[k][nd - 1] == it->strides[k][d] * it->shape[d];
            if (merge) {
                it->shape[nd - 1] *= it->shape[d];
                for (int k = 0; k < it->n_ops; k++) it->strides[k][nd - 1] = it->strides[k][d];
                continue;
            }
        }
        it->shape[nd] = it->shape[d];
        for (int k = 0; k < it->n_ops; k++) it->strides[k][nd] = it->strides[k][d];
        nd++;
    }
    if (nd == 0) { /* one element */
        it->shape[0] = 1;
        for (int k = 0; k < it->n_ops; k++) it->strides[k][0] = 0;
        nd = 1;
    }
    it->ndim = nd;
}

/* Whether element `off` of cond's data p (i64, f32 or f64) is non-zero. */
static inline bool cond_at(const void *p, remat_dtype dtype, int64_t off) {
    switch (dtype) {
    case REMAT_I64: return ((const int64_t *)p)[off] != 0;
    case REMAT_F32: return ((const float *)p)[off] != 0;
    default: return ((const double *)p)[off] != 0;
    }
}

/* A broadcast cond (a (T, T) mask under (B, H, T, T) scores) is read many
 * times: it is first packed into a contiguous byte mask (1 = true), 8x
 * smaller than an i64 mask, so that it stays in cache and the selection
 * loop compares bytes. Returns NULL (use cond as it is) when cond is not
 * reused at least twice or on allocation failure. */
static uint8_t *pack_cond(const remat_tensor *cond, int64_t n) {
    int64_t nc = rm_shape_numel(cond->ndim, cond->shape);
    if (nc == 0 || nc * 2 > n) return NULL;
    uint8_t *m = malloc((size_t)nc); /* an eighth of cond's own i64 bytes: malloc's */
    if (!m) return NULL;
    rm_iter it;
    rm_iter_init(&it, cond->ndim, cond->shape, 1);
    memcpy(it.strides[0], cond->strides, sizeof(int64_t) * (size_t)cond->ndim);
    const void *p = rm_ptr(cond);
    for (int64_t i = 0; i < nc; i++) {
        m[i] = cond_at(p, cond->dtype, it.off[0]);
        rm_iter_next(&it);
    }
    return m;
}

/* ---- the loops, once per dtype of y: select_body.h ------------------------------------ */
#define T f32
#include "select_body.h"

#define T f64
#include "select_body.h"

/* y = cond ? (a or va) : (b or vb), everything broadcast to y's
 * shape (y contiguous, float). */
static void sel_run(remat_tensor *y, const remat_tensor *cond, const remat_tensor *a, double va,
                    const remat_tensor *b, double vb) {
    int64_t n = rm_shape_numel(y->ndim, y->shape);
    if (n == 0) return;
    uint8_t *packed = pack_cond(cond, n);
    sel_plan pl;
    rm_iter *base = &pl.base;
    rm_iter_init(base, y->ndim, y->shape, 4);
    memcpy(base->strides[0], y->strides, sizeof(int64_t) * (size_t)y->ndim);
    if (packed) { /* the packed mask is cond made contiguous */
        int64_t cs[REMAT_MAX_DIMS];
        rm_contiguous_strides(cond->ndim, cond->shape, cs);
        for (int i = 0; i < y->ndim; i++) {
            int j = cond->ndim - y->ndim + i;
            base->strides[1][i] =
                j >= 0 && cond->shape[j] == y->shape[i] && cond->shape[j] != 1 ? cs[j] : 0;
        }
    } else {
        rm_broadcast_strides(cond, y->ndim, y->shape, base->strides[1]);
    }
    if (a) rm_broadcast_strides(a, y->ndim, y->shape, base->strides[2]);
    if (b) rm_broadcast_strides(b, y->ndim, y->shape, base->strides[3]);
    iter_coalesce(base);
    int nd = base->ndim;
    for (int k = 0; k < 4; k++) pl.s[k] = base->strides[k][nd - 1];
    const int64_t *s = pl.s;
    pl.kind = SEL_STRIDED;
    if (s[0] == 1 && s[1] == 1) {
        if (s[2] == 0 && s[3] == 1) pl.kind = SEL_SCALAR_A;
        else if (s[2] == 1 && s[3] == 0) pl.kind = SEL_SCALAR_B;
        else if (s[2] == 1 && s[3] == 1) pl.kind = SEL_UNIT;
    }
    pl.cbase = packed ? (const void *)packed : rm_ptr(cond);
    pl.ct = packed ? REMAT_U8 : cond->dtype;
    bool f32 = y->dtype == REMAT_F32;
#pragma omp parallel if (n > 32768)
    {
        int nt = 1, id = 0;
        sel_omp_ids(&nt, &id);
        int64_t lo = n * id / nt, hi = n * (id + 1) / nt;
        if (f32) sel_range_f32(&pl, y, a, va, b, vb, lo, hi);
        else sel_range_f64(&pl, y, a, va, b, vb, lo, hi);
    }
    free(packed);
}

remat_status rm_cpu_select(const rm_kargs *k) {
    const rm_select_params *p = k->params;
    const remat_tensor *a = p->a >= 0 ? k->in[p->a] : NULL;
    const remat_tensor *b = p->b >= 0 ? k->in[p->b] : NULL;
    sel_run(k->out[0], k->in[p->cond], a, p->va, b, p->vb);
    return REMAT_OK;
}
