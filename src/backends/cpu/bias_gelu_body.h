/* src/backends/cpu/bias_gelu_body.h — the f32 and f64 kernels of the fused bias + GELU
 * (bias_gelu.c), written once and compiled once per dtype: bias_gelu.c includes this file
 * with T defined as f32 or f64 and BG_GELU / BG_GELU_GRAD / BG_GELU_T / BG_GELU_T_GRAD as
 * the type's GELUs (vmath.h: the unary kernels' own). No include guard. */
#include "tmpl.h"

/* y (rows, n) = gelu(x + b): the unary kernel's expression on the sum, element by element */
RM_CPU_CLONES static void TFN(bg_fwd)(rm_unary_op op, const T *restrict x, const T *restrict b,
                                      T *restrict y, int64_t rows, int64_t n) {
    const bool erf = op == RM_U_GELU_ERF;
#pragma omp parallel for if (rows * n > RM_OMP_MIN)
    for (int64_t r = 0; r < rows; r++) {
        const T *restrict xr = x + r * n;
        T *restrict yr = y + r * n;
        if (erf)
            for (int64_t j = 0; j < n; j++) yr[j] = BG_GELU(xr[j] + b[j]);
        else
            for (int64_t j = 0; j < n; j++) yr[j] = BG_GELU_T(xr[j] + b[j]);
    }
}

/* One row of dx = g * gelu'(x + b). g and dx may be one buffer (the dying gradient: each
 * element is read before it is written), so neither is restrict. */
static inline void TFN(bg_bwd_row)(bool erf, const T *g, const T *restrict x, const T *restrict b,
                                   T *dx, int64_t n) {
    if (erf)
        for (int64_t j = 0; j < n; j++) dx[j] = g[j] * BG_GELU_GRAD(x[j] + b[j]);
    else
        for (int64_t j = 0; j < n; j++) dx[j] = g[j] * BG_GELU_T_GRAD(x[j] + b[j]);
}

/* The same row with its partial column sums taken in the same loop: p = the row (first)
 * or p += it, element by element as a copy and an add of the stored row would (the same
 * bits), without reading the row back: a second pass over it cost ~0.9 ms of 2.7 at the
 * GPT's (2048, 1536) on 1 thread (bench/bench_gelu.c), as much as the GELU's derivative. */
static inline void TFN(bg_bwd_row_sum)(bool erf, const T *g, const T *restrict x,
                                       const T *restrict b, T *dx, T *restrict p, bool first,
                                       int64_t n) {
#define BG_ROW(GRAD, ACC)                                                                          \
    for (int64_t j = 0; j < n; j++) {                                                              \
        const T v = g[j] * GRAD(x[j] + b[j]);                                                      \
        dx[j] = v;                                                                                 \
        ACC;                                                                                       \
    }
    if (erf && first) BG_ROW(BG_GELU_GRAD, p[j] = v)
    else if (erf) BG_ROW(BG_GELU_GRAD, p[j] += v)
    else if (first) BG_ROW(BG_GELU_T_GRAD, p[j] = v)
    else BG_ROW(BG_GELU_T_GRAD, p[j] += v)
#undef BG_ROW
}

/* dx (rows, n) and, db non-NULL, db (n) = the column sums of dx, summed as RM_K_COLSUM sums
 * them (matmul.c, colsum_body.h): each fixed chunk of rows (rm_cpu_chunk_rows) into its
 * partial sums in part (a row of dx copied, the next ones added, as the row is made),
 * then the partials in double, in chunk order. part NULL (n < 64: narrow rows): dx first,
 * then the column blocks down all its rows, as the column sum's narrow path. */
RM_CPU_CLONES static void TFN(bg_bwd)(rm_unary_op op, const T *g, const T *restrict x,
                                      const T *restrict b, T *dx, T *restrict db, int64_t rows,
                                      int64_t n, T *restrict part) {
    const bool erf = op == RM_U_GELU_ERF;
    if (!db || !part) {
#pragma omp parallel for if (rows * n > RM_OMP_MIN)
        for (int64_t r = 0; r < rows; r++)
            TFN(bg_bwd_row)(erf, g + r * n, x + r * n, b, dx + r * n, n);
        if (db) TFN(rm_cpu_colsum_blocks)(dx, rows, n, db);
        return;
    }
    const int64_t rb = rm_cpu_chunk_rows(rows, n), nch = (rows + rb - 1) / rb;
#pragma omp parallel for if (rows * n > RM_OMP_MIN)
    for (int64_t k = 0; k < nch; k++) {
        T *restrict p = part + k * n;
        const int64_t r0 = k * rb, r1 = (k + 1) * rb < rows ? (k + 1) * rb : rows;
        for (int64_t r = r0; r < r1; r++)
            TFN(bg_bwd_row_sum)(erf, g + r * n, x + r * n, b, dx + r * n, p, r == r0, n);
    }
    TFN(rm_cpu_colsum_blocks)(part, nch, n, db);
}

#undef T
