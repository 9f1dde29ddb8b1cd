/* src/backends/mm_view.h — how RM_K_MATMUL's operands are batches of
 * strided matrices (src/core/kernels/matmul.h says what the flags mean),
 * shared by every device's matmul kernel (cpu: src/backends/cpu/matmul.c,
 * cuda: src/backends/cuda/gemm.c): each operand is a row dim, a column dim
 * and batch dims aligned to the broadcast batch shape (stride 0 where the
 * operand is broadcast); a matrix is handed to a GEMM as it is when it is
 * row-major with some row stride or the transpose of that (mv_layout).
 * Host-side arithmetic on shapes and strides only: `p` is never read. */
#ifndef REMAT_BACKENDS_MM_VIEW_H
#define REMAT_BACKENDS_MM_VIEW_H

#include <string.h>

#include "core/core.h"
#include "core/kernels.h"

/* ---- batched strided matrices ------------------------------------------------------------ */

typedef struct mview {
    char *p; /* element [0, ..., 0] */
    int64_t rows, cols;
    int64_t rs, cs;               /* row / column strides (elements) */
    int64_t bstr[REMAT_MAX_DIMS]; /* batch strides, aligned to the batch shape */
} mview;

/* v = t as a batch of matrices. The matrix dims are t's trailing dims: a row
 * dim if has_row, a column dim if has_col (a missing one has size 1); the
 * leading dims are batch dims, aligned right against the nb batch dims of
 * the operation (stride 0 where t has size 1 or lacks the dim). */
static inline void view_of(mview *v, const remat_tensor *t, bool has_row, bool has_col, int nb) {
    int nm = (int)has_row + (int)has_col;
    int tb = t->ndim - nm; /* t's own batch dims */
    v->p = rm_ptr(t);
    v->rows = has_row ? t->shape[tb] : 1;
    v->rs = has_row ? t->strides[tb] : 0;
    v->cols = has_col ? t->shape[t->ndim - 1] : 1;
    v->cs = has_col ? t->strides[t->ndim - 1] : 0;
    for (int d = 0; d < nb; d++) {
        int j = d - (nb - tb);
        v->bstr[d] = (j >= 0 && t->shape[j] != 1) ? t->strides[j] : 0;
    }
}

/* it = an iterator over the nb batch dims of shape bshape whose three
 * offsets walk A, B and C's matrices (rm_iter operands 0, 1, 2). */
static inline void mv_batch_iter(rm_iter *it, int nb, const int64_t *bshape, const mview *A,
                                 const mview *B, const mview *C) {
    const mview *v[3] = {A, B, C};
    rm_iter_init(it, nb, bshape, 3);
    for (int k = 0; k < 3; k++) memcpy(it->strides[k], v[k]->bstr, sizeof(int64_t) * (size_t)nb);
}

static inline mview view_t(const mview *v) {
    mview r = *v;
    r.rows = v->cols;
    r.cols = v->rows;
    r.rs = v->cs;
    r.cs = v->rs;
    return r;
}

/* Whether the matrices of v are row-major with row stride *ld (*t false) or
 * the transpose of such a matrix (*t true, v's column stride is *ld). A
 * size-1 dim may have any stride. Empty matrices always pass (the GEMM
 * never reads them). */
static inline bool mv_layout(const mview *v, bool *t, int64_t *ld) {
    int64_t R = v->rows, C = v->cols;
    int64_t needc = C > 1 ? C : 1, needr = R > 1 ? R : 1;
    *t = false;
    *ld = needc;
    if (R == 0 || C == 0) return true;
    if (C == 1 || v->cs == 1) {
        int64_t l = R == 1 ? needc : v->rs;
        if (l >= needc) {
            *ld = l;
            return true;
        }
    }
    if (R == 1 || v->rs == 1) {
        int64_t l = C == 1 ? needr : v->cs;
        if (l >= needr) {
            *t = true;
            *ld = l;
            return true;
        }
    }
    return false;
}

/* *owned = t, or a contiguous copy of t when its matrices (as view_of sees
 * them) are not a layout the GEMM can take. New reference. */
static inline remat_status prep_operand(remat_tensor **owned, remat_tensor *t, bool has_row,
                                        bool has_col) {
    mview v;
    bool tr;
    int64_t ld;
    view_of(&v, t, has_row, has_col, 0);
    if (mv_layout(&v, &tr, &ld)) {
        *owned = rm_retain(t);
        return REMAT_OK;
    }
    return rm_contig(owned, t);
}

/* True if, over the batch dims of size > 1 (innermost first), the strides
 * continue the matrix dim that has `inner` = count · stride elements: the
 * batch then is just more rows of that dim. */
static inline bool batch_chains(int nb, const int64_t *bshape, const int64_t *bstr, int64_t inner) {
    int64_t expect = inner;
    for (int d = nb - 1; d >= 0; d--) {
        if (bshape[d] == 1) continue;
        if (bstr[d] != expect) return false;
        expect *= bshape[d];
    }
    return true;
}

static inline bool batch_broadcast_all(int nb, const int64_t *bshape, const int64_t *bstr) {
    for (int d = 0; d < nb; d++)
        if (bshape[d] != 1 && bstr[d] != 0) return false;
    return true;
}

/* The batch shape (*nb dims) of the operands t[0..3) as flags f[] sees
 * them: their leading dims aligned right, a dim of size 1 broadcast. */
static inline void batch_shape(remat_tensor *const *t, const unsigned char *f, int *nb,
                               int64_t *bshape) {
    int tb[3], n = 0;
    for (int i = 0; i < 3; i++) {
        tb[i] = t[i]->ndim - !!(f[i] & RM_MM_ROW) - !!(f[i] & RM_MM_COL);
        if (tb[i] > n) n = tb[i];
    }
    for (int d = 0; d < n; d++) {
        bshape[d] = 1;
        for (int i = 0; i < 3; i++) {
            int j = d - (n - tb[i]);
            if (j >= 0 && t[i]->shape[j] != 1) bshape[d] = t[i]->shape[j];
        }
    }
    *nb = n;
}

/* The view of operand t (flags f) against the nb batch dims. */
static inline mview operand_view(const remat_tensor *t, unsigned f, int nb) {
    mview v;
    view_of(&v, t, f & RM_MM_ROW, f & RM_MM_COL, nb);
    return (f & RM_MM_T) ? view_t(&v) : v;
}

#endif /* REMAT_BACKENDS_MM_VIEW_H */
