/* src/backends/cpu/select_body.h — the selection loops (see select.c), written once and
 * compiled once per dtype of y: select.c includes this file with T defined as f32 or f64.
 * Every function is named TFN(name), name_f32 or name_f64 (tmpl.h). No include guard:
 * included once per dtype. */
#include "tmpl.h"

/* One row of len elements: y = c ? a : b, c of dtype ct at cc (sel_true). Always inlined
 * with a constant ct, so each cond dtype's unit-stride loops vectorise. */
static inline __attribute__((always_inline)) void
TFN(sel_row)(const sel_plan *pl, remat_dtype ct, T *restrict yy, const void *restrict cc,
             const T *restrict aa, const T *restrict bb, int64_t len) {
    if (pl->kind == SEL_SCALAR_A) {
        const T av = aa[0];
        for (int64_t i = 0; i < len; i++) yy[i] = sel_true(ct, cc, i) ? av : bb[i];
    } else if (pl->kind == SEL_SCALAR_B) {
        const T bv = bb[0];
        for (int64_t i = 0; i < len; i++) yy[i] = sel_true(ct, cc, i) ? aa[i] : bv;
    } else if (pl->kind == SEL_UNIT) {
        for (int64_t i = 0; i < len; i++) yy[i] = sel_true(ct, cc, i) ? aa[i] : bb[i];
    } else {
        const int64_t *s = pl->s;
        for (int64_t i = 0; i < len; i++)
            yy[i * s[0]] = sel_true(ct, cc, i * s[1]) ? aa[i * s[2]] : bb[i * s[3]];
    }
}

/* Flat elements [lo, hi) of the plan: the outer dims walked with rm_iter, the last one
 * by sel_row. pa, pb: a and b, or their scalar. */
static inline __attribute__((always_inline)) void TFN(sel_walk)(const sel_plan *pl, remat_dtype ct,
                                                                T *py, const T *pa, const T *pb,
                                                                int64_t lo, int64_t hi) {
    const int nd = pl->base.ndim;
    const int64_t inner = pl->base.shape[nd - 1], *s = pl->s;
    const size_t cs = remat_dtype_size(ct);
    rm_iter it;
    rm_iter_init(&it, nd - 1, pl->base.shape, 4);
    for (int k = 0; k < 4; k++)
        memcpy(it.strides[k], pl->base.strides[k], sizeof(int64_t) * (size_t)(nd - 1));
    rm_iter_seek(&it, lo / inner);
    int64_t col = lo % inner, pos = lo;
    while (pos < hi) {
        int64_t len = inner - col < hi - pos ? inner - col : hi - pos;
        const char *cc = (const char *)pl->cbase + (size_t)(it.off[1] + col * s[1]) * cs;
        TFN(sel_row)
        (pl, ct, py + it.off[0] + col * s[0], cc, pa + it.off[2] + col * s[2],
         pb + it.off[3] + col * s[3], len);
        pos += len;
        col = 0;
        rm_iter_next(&it);
    }
}

/* sel_walk for y's dtype T, a cond of any dtype (u8: the packed mask). */
static void TFN(sel_range)(const sel_plan *pl, remat_tensor *y, const remat_tensor *a, double va,
                           const remat_tensor *b, double vb, int64_t lo, int64_t hi) {
    T sa = (T)va, sb = (T)vb;
    const T *pa = a ? (const T *)rm_ptr(a) : &sa;
    const T *pb = b ? (const T *)rm_ptr(b) : &sb;
    T *py = rm_ptr(y);
    switch (pl->ct) {
    case REMAT_U8: TFN(sel_walk)(pl, REMAT_U8, py, pa, pb, lo, hi); break;
    case REMAT_I64: TFN(sel_walk)(pl, REMAT_I64, py, pa, pb, lo, hi); break;
    case REMAT_F32: TFN(sel_walk)(pl, REMAT_F32, py, pa, pb, lo, hi); break;
    case REMAT_F64: TFN(sel_walk)(pl, REMAT_F64, py, pa, pb, lo, hi); break;
    default: /* storage-only dtypes never get here (rejected by the checks) */ break;
    }
}

#undef T
