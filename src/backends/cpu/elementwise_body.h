/* src/backends/cpu/elementwise_body.h — the elementwise engine's loops (see
 * elementwise.c), written once and compiled once per dtype: elementwise.c
 * includes this file with T defined as f32 or f64 and EW_POW, EW_LOG as that
 * dtype's pow and log. Every function is named TFN(name), name_f32 or
 * name_f64 (tmpl.h), so gdb steps through the element expressions. No
 * include guard: included once per dtype. */
#include "tmpl.h"

/* Element f(a[ia], b[ib], c[ic]; p) of op, reading only the operands op
 * uses (the others may be NULL). Always inlined with a constant op, so each
 * op's loops below are code of their own. */
static inline __attribute__((always_inline)) T
TFN(ew_at)(ewop op, const T *a, int64_t ia, const T *b, int64_t ib, const T *c, int64_t ic, T p) {
    switch (op) {
    case RM_EW_FILL: return p;
    case RM_EW_SCALE: return a[ia] * p;
    case RM_EW_RELU: return !(a[ia] <= 0) ? a[ia] : 0; /* NaN stays NaN */
    case RM_EW_ADD: return a[ia] + b[ib];
    case RM_EW_SUB: return a[ia] - b[ib];
    case RM_EW_MUL: return a[ia] * b[ib];
    case RM_EW_DIV: return a[ia] / b[ib];
    case RM_EW_POW: return EW_POW(a[ia], b[ib]);
    case RM_EW_AXPY: return a[ia] + p * b[ib];
    case RM_EW_RELU_BWD: return b[ib] > 0 ? a[ia] : 0;
    case RM_EW_DIV_GB: return -a[ia] * b[ib] / (c[ic] * c[ic]);
    /* d(x^e)/dx = e * x^(e-1); defined as 0 where e == 0 (as PyTorch does), so
     * that x = 0, e = 0 gives 0 rather than 0 * inf = nan. */
    case RM_EW_POW_GA: return c[ic] == 0 ? 0 : a[ia] * c[ic] * EW_POW(b[ib], c[ic] - 1);
    /* d(x^e)/de = x^e * log(x); 0 where x == 0 and e >= 0 (the limit), as PyTorch. */
    case RM_EW_POW_GB:
        return (b[ib] == 0 && c[ic] >= 0) ? 0 : a[ia] * EW_POW(b[ib], c[ic]) * EW_LOG(b[ib]);
    case RM_EW_N_OPS: break;
    }
    return 0;
}

/* y[i * sy] = f(a[i * sa], b[i * sb], c[i * sc]) for i < n: any strides. */
static inline __attribute__((always_inline)) void
TFN(ew_strided)(ewop op, T *y, int64_t sy, const T *a, int64_t sa, const T *b, int64_t sb,
                const T *c, int64_t sc, int64_t n, T p) {
    for (int64_t i = 0; i < n; i++) y[i * sy] = TFN(ew_at)(op, a, i * sa, b, i * sb, c, i * sc, p);
}

/* The same for a cheap op, with the common cases vectorised: every operand
 * unit-stride (contiguous), b a scalar, a a scalar. `omp simd` is valid
 * because y never partially overlaps an input: out-of-place outputs are
 * fresh and inplace.c copies a partially overlapping operand first. */
static inline __attribute__((always_inline)) void TFN(ew_fast)(ewop op, T *y, int64_t sy,
                                                               const T *a, int64_t sa, const T *b,
                                                               int64_t sb, const T *c, int64_t sc,
                                                               int64_t n, T p) {
    if (sy == 1 && sa == 1 && sb == 1 && sc == 1) {
#pragma omp simd
        for (int64_t i = 0; i < n; i++) y[i] = TFN(ew_at)(op, a, i, b, i, c, i, p);
    } else if (sy == 1 && sa == 1 && sb == 0 && sc == 1) {
        const T bv = b[0];
#pragma omp simd
        for (int64_t i = 0; i < n; i++) y[i] = TFN(ew_at)(op, a, i, &bv, 0, c, i, p);
    } else if (sy == 1 && sa == 0 && sb == 1 && sc == 1) {
        const T av = a[0];
#pragma omp simd
        for (int64_t i = 0; i < n; i++) y[i] = TFN(ew_at)(op, &av, 0, b, i, c, i, p);
    } else {
        TFN(ew_strided)(op, y, sy, a, sa, b, sb, c, sc, n, p);
    }
}

/* One row of the plan: n elements with element strides sy, sa, sb, sc. The
 * cheap ops each get their own vectorised loops; pow and its gradients run
 * the strided loop (their math dominates, and no simd variant of pow or log
 * may exist: clang reports a forced but failed vectorisation as a warning). */
static void TFN(ew_inner)(ewop op, T *y, int64_t sy, const T *a, int64_t sa, const T *b, int64_t sb,
                          const T *c, int64_t sc, int64_t n, T p) {
    switch (op) {
    case RM_EW_FILL: TFN(ew_fast)(RM_EW_FILL, y, sy, a, sa, b, sb, c, sc, n, p); break;
    case RM_EW_SCALE: TFN(ew_fast)(RM_EW_SCALE, y, sy, a, sa, b, sb, c, sc, n, p); break;
    case RM_EW_RELU: TFN(ew_fast)(RM_EW_RELU, y, sy, a, sa, b, sb, c, sc, n, p); break;
    case RM_EW_ADD: TFN(ew_fast)(RM_EW_ADD, y, sy, a, sa, b, sb, c, sc, n, p); break;
    case RM_EW_SUB: TFN(ew_fast)(RM_EW_SUB, y, sy, a, sa, b, sb, c, sc, n, p); break;
    case RM_EW_MUL: TFN(ew_fast)(RM_EW_MUL, y, sy, a, sa, b, sb, c, sc, n, p); break;
    case RM_EW_DIV: TFN(ew_fast)(RM_EW_DIV, y, sy, a, sa, b, sb, c, sc, n, p); break;
    case RM_EW_AXPY: TFN(ew_fast)(RM_EW_AXPY, y, sy, a, sa, b, sb, c, sc, n, p); break;
    case RM_EW_RELU_BWD: TFN(ew_fast)(RM_EW_RELU_BWD, y, sy, a, sa, b, sb, c, sc, n, p); break;
    case RM_EW_DIV_GB: TFN(ew_fast)(RM_EW_DIV_GB, y, sy, a, sa, b, sb, c, sc, n, p); break;
    case RM_EW_POW:
    case RM_EW_POW_GA:
    case RM_EW_POW_GB: TFN(ew_strided)(op, y, sy, a, sa, b, sb, c, sc, n, p); break;
    case RM_EW_N_OPS: break;
    }
}

/* Runs flat elements [lo, hi) of the plan; cloned per ISA level (clones.h: AVX-512 for the
 * vectorised loops of ew_fast, the same operations in every clone, no reductions). */
RM_CPU_CLONES static void TFN(ew_range)(ewop op, const ew_plan *pl, T *y, const T *a, const T *b,
                                        const T *c, T p, int64_t lo, int64_t hi) {
    int nd = pl->nd;
    int64_t inner = pl->shape[nd - 1];
    rm_iter it;
    rm_iter_init(&it, nd - 1, pl->shape, 4);
    for (int k = 0; k < 4; k++)
        memcpy(it.strides[k], pl->st[k], sizeof(int64_t) * (size_t)(nd - 1));
    rm_iter_seek(&it, lo / inner);
    int64_t col = lo % inner, pos = lo;
    int64_t s0 = pl->st[0][nd - 1], s1 = pl->st[1][nd - 1], s2 = pl->st[2][nd - 1],
            s3 = pl->st[3][nd - 1];
    /* unused operands: unit stride so they never block the fast paths */
    if (!a) s1 = 1;
    if (!b) s2 = 1;
    if (!c) s3 = 1;
    while (pos < hi) {
        int64_t len = inner - col < hi - pos ? inner - col : hi - pos;
        TFN(ew_inner)
        (op, y + it.off[0] + col * s0, s0, a ? a + it.off[1] + col * s1 : NULL, s1,
         b ? b + it.off[2] + col * s2 : NULL, s2, c ? c + it.off[3] + col * s3 : NULL, s3, len, p);
        pos += len;
        col = 0;
        rm_iter_next(&it);
    }
}

#undef T
#undef EW_POW
#undef EW_LOG
