/* src/backends/cpu/rms_norm_body.h — the rms_norm kernels (see rms_norm.c), written once
 * and compiled once per dtype: rms_norm.c includes this file with T defined as f32 or
 * f64. Each function is named TFN(name): name_f32 or name_f64 (tmpl.h).
 * No include guard: included once per dtype. */
#include "tmpl.h"

/* pairwise combine of the lanes into acc[0] */
static inline __attribute__((always_inline)) void TFN(rms_reduce)(T acc[RMS_LANES]) {
    for (int w = RMS_LANES / 2; w > 0; w /= 2)
        for (int j = 0; j < w; j++) acc[j] += acc[j + w];
}

/* 1 / sqrt(mean(x²) + eps) of one row */
RM_CPU_CLONES static T TFN(rms_rstd)(const T *restrict xn, int64_t C, double eps) {
    T a[RMS_LANES];
    for (int j = 0; j < RMS_LANES; j++) a[j] = 0;
    int64_t c = 0;
    for (; c + RMS_LANES <= C; c += RMS_LANES)
        for (int j = 0; j < RMS_LANES; j++) a[j] += xn[c + j] * xn[c + j];
    for (; c < C; c++) a[0] += xn[c] * xn[c];
    TFN(rms_reduce)(a);
    return (T)(1.0 / sqrt((double)(a[0] / (T)C) + eps));
}

/* yn[c] = xn[c] · r (· w[c]), c < len: the one expression of both outputs (T, or bf16
 * through a block), so a bf16 y is bitwise the T y rounded. */
static inline __attribute__((always_inline)) void
TFN(rms_out)(const T *restrict xn, const T *restrict w, T *restrict yn, int64_t len, T r) {
    if (w)
        for (int64_t c = 0; c < len; c++) yn[c] = xn[c] * r * w[c];
    else
        for (int64_t c = 0; c < len; c++) yn[c] = xn[c] * r;
}

/* x (N, C) -> y (N, C), or yh (bf16) when y is NULL; rstd (N). w (C) or NULL. */
RM_CPU_CLONES static void TFN(rms_fwd)(const T *restrict x, const T *restrict w, T *restrict y,
                                       uint16_t *restrict yh, T *restrict rstd, int64_t N,
                                       int64_t C, double eps) {
#pragma omp parallel for if (N * C > RM_OMP_MIN / 4)
    for (int64_t n = 0; n < N; n++) {
        const T *restrict xn = x + n * C;
        const T r = TFN(rms_rstd)(xn, C, eps);
        if (yh) {
            T blk[RMS_BF16_BLOCK];
            for (int64_t c0 = 0; c0 < C; c0 += RMS_BF16_BLOCK) {
                const int64_t len = C - c0 < RMS_BF16_BLOCK ? C - c0 : RMS_BF16_BLOCK;
                TFN(rms_out)(xn + c0, w ? w + c0 : NULL, blk, len, r);
                RMS_ROUND_BF16(blk, yh + n * C + c0, len);
            }
        } else {
            TFN(rms_out)(xn, w, y + n * C, C, r);
        }
        rstd[n] = r;
    }
}

/* Rows [r0, r1) of the backward: dx rows (dx may be NULL) and, when pw is not NULL,
 * this chunk's column sums pw[c] = Σ_n g · x̂. g in T, or gh (bf16, g NULL) widened row by
 * row into grow (C). */
RM_CPU_CLONES static void TFN(rms_bwd_rows)(const T *restrict g, const uint16_t *restrict gh,
                                            T *restrict grow, const T *restrict x,
                                            const T *restrict w, const T *restrict rstd,
                                            T *restrict dx, T *restrict pw, int64_t r0, int64_t r1,
                                            int64_t C) {
    if (pw)
        for (int64_t c = 0; c < C; c++) pw[c] = 0;
    for (int64_t n = r0; n < r1; n++) {
        if (gh) /* a bf16 g (g NULL): the row widened, exact */
            for (int64_t c = 0; c < C; c++) grow[c] = (T)rm_bf16_to_f32(gh[n * C + c]);
        const T *restrict gn = gh ? grow : g + n * C, *restrict xn = x + n * C;
        const T rs = rstd[n];
        if (pw)
            for (int64_t c = 0; c < C; c++) pw[c] += xn[c] * rs * gn[c];
        if (!dx) continue;
        T a[RMS_LANES];
        for (int j = 0; j < RMS_LANES; j++) a[j] = 0;
        int64_t c = 0;
        for (; c + RMS_LANES <= C; c += RMS_LANES)
            for (int j = 0; j < RMS_LANES; j++) {
                T wg = w ? w[c + j] * gn[c + j] : gn[c + j];
                a[j] += wg * (xn[c + j] * rs);
            }
        for (; c < C; c++) a[0] += (w ? w[c] * gn[c] : gn[c]) * (xn[c] * rs);
        TFN(rms_reduce)(a);
        const T m = a[0] / (T)C;
        T *restrict d = dx + n * C;
        for (c = 0; c < C; c++) {
            T wg = w ? w[c] * gn[c] : gn[c];
            d[c] = (wg - xn[c] * rs * m) * rs;
        }
    }
}

/* dx (N, C) and dw (C) from g (N, C), or gh (bf16, g NULL) (either output may be NULL;
 * part, scratch of C * ceil(N / rm_cpu_chunk_rows(N, C)) elements, when dw is wanted;
 * wide, as many for gh's rows). */
RM_CPU_CLONES static void TFN(rms_bwd)(const T *restrict g, const uint16_t *restrict gh,
                                       T *restrict wide, const T *restrict x, const T *restrict w,
                                       const T *restrict rstd, T *restrict dx, T *restrict dw,
                                       T *restrict part, int64_t N, int64_t C) {
    if (!dx && !dw) return;
    int64_t rb = rm_cpu_chunk_rows(N, C), nch = (N + rb - 1) / rb;
#pragma omp parallel for if (N * C > RM_OMP_MIN / 4)
    for (int64_t k = 0; k < nch; k++) {
        int64_t r0 = k * rb, r1 = r0 + rb < N ? r0 + rb : N;
        TFN(rms_bwd_rows)
        (g, gh, gh ? wide + k * C : NULL, x, w, rstd, dx, dw ? part + k * C : NULL, r0, r1, C);
    }
    if (!dw) return;
    int64_t nb = (C + RMS_COL_BLOCK - 1) / RMS_COL_BLOCK;
#pragma omp parallel for if (nch * C > RM_OMP_MIN)
    for (int64_t bk = 0; bk < nb; bk++) {
        int64_t c0 = bk * RMS_COL_BLOCK;
        int wd = (int)(C - c0 < RMS_COL_BLOCK ? C - c0 : RMS_COL_BLOCK);
        double s[RMS_COL_BLOCK];
        for (int j = 0; j < wd; j++) s[j] = 0;
        for (int64_t k = 0; k < nch; k++)
            for (int j = 0; j < wd; j++) s[j] += (double)part[k * C + c0 + j];
        for (int j = 0; j < wd; j++) dw[c0 + j] = (T)s[j];
    }
}

/* y in x's dtype, or bf16 for an f32 x (rms_half) */
remat_status TFN(rm_cpu_rms_norm)(const rm_kargs *k) {
    const rm_layer_norm_params *p = k->params;
    int64_t N, C;
    rms_rows(k->in[0], p->n_norm, &N, &C);
    bool half;
    int rc = rms_half(k->in[0], k->out[0], &half);
    if (rc) return rc;
    TFN(rms_fwd)
    (rm_ptr(k->in[0]), ptr_or_null(k->in[1]), half ? NULL : rm_ptr(k->out[0]),
     half ? rm_ptr(k->out[0]) : NULL, rm_ptr(k->out[1]), N, C, p->eps);
    return REMAT_OK;
}
/* g in x's dtype, or bf16 (widened row by row) for an f32 x: the kernel of both the f32 and
 * the bf16 row (rm_cpu_rms_norm_bwd_bf16, rms_norm.c) */
remat_status TFN(rm_cpu_rms_norm_bwd)(const rm_kargs *k) {
    const rm_layer_norm_params *p = k->params;
    int64_t N, C;
    rms_rows(k->in[1], p->n_norm, &N, &C);
    remat_tensor *dx = k->out[0], *dw = k->out[1];
    bool gh;
    int rc = rms_half(k->in[1], k->in[0], &gh);
    if (rc) return rc;
    if (dw && N == 0) { /* no rows: a zero gradient */
        memset(rm_ptr(dw), 0, (size_t)C * sizeof(T));
        dw = NULL;
    }
    const int64_t rb = N > 0 ? rm_cpu_chunk_rows(N, C) : 1, nch = (N + rb - 1) / rb;
    /* per-chunk column sums for dw, then a widened row of g per chunk */
    const int64_t n_part = dw ? nch * C : 0, n_wide = gh && (dx || dw) ? nch * C : 0;
    /* up to 2 x 2^24 elements (rm_cpu_chunk_rows): counted scratch (workspace.h) */
    const size_t bytes = (size_t)(n_part + n_wide) * sizeof(T);
    T *part = NULL;
    if (n_part + n_wide > 0) {
        part = rm_cpu_ws_take(bytes);
        if (!part) return rm_err(REMAT_ENOMEM, "out of memory");
    }
    TFN(rms_bwd)
    (gh ? NULL : rm_ptr(k->in[0]), gh ? rm_ptr(k->in[0]) : NULL, gh ? part + n_part : NULL,
     rm_ptr(k->in[1]), ptr_or_null(k->in[2]), rm_ptr(k->in[3]), ptr_or_null(dx), ptr_or_null(dw),
     part, N, C);
    rm_cpu_ws_give(part, bytes);
    return REMAT_OK;
}

#undef RMS_ROUND_BF16
#undef T
