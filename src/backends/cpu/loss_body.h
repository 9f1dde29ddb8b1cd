/* src/backends/cpu/loss_body.h — the embedding, cross_entropy and mse kernels (see
 * loss.c), written once and compiled once per dtype: loss.c includes this file with T
 * defined as f32 or f64 and LOSS_LOGF as its log. Each function is named TFN(name):
 * name_f32 or name_f64 (tmpl.h). No include guard: included once per dtype. */
#include "tmpl.h"

/* ---- embedding ------------------------------------------------------------------------- */
/* y (P, D) = w[idx[p], :] */
static void TFN(embedding_fwd)(const T *restrict w, const int64_t *restrict idx, T *restrict y,
                               int64_t P, int64_t D) {
#pragma omp parallel for if (P * D > RM_OMP_MIN)
    for (int64_t p = 0; p < P; p++) memcpy(y + p * D, w + idx[p] * D, (size_t)D * sizeof(T));
}
/* dw (num, D) = 0; dw[idx[p], :] += g[p, :] */
static void TFN(embedding_bwd)(const T *restrict g, const int64_t *restrict idx, T *restrict dw,
                               int64_t num, int64_t P, int64_t D) {
    int64_t nb = (D + EMB_COL_BLOCK - 1) / EMB_COL_BLOCK;
#pragma omp parallel for if ((num + P) * D > RM_OMP_MIN)
    for (int64_t b = 0; b < nb; b++) {
        int64_t c0 = b * EMB_COL_BLOCK;
        int w = (int)(D - c0 < EMB_COL_BLOCK ? D - c0 : EMB_COL_BLOCK);
        for (int64_t r = 0; r < num; r++)
            for (int j = 0; j < w; j++) dw[r * D + c0 + j] = 0;
        for (int64_t p = 0; p < P; p++) {
            T *d = dw + idx[p] * D + c0;
            const T *gp = g + p * D + c0;
            for (int j = 0; j < w; j++) d[j] += gp[j];
        }
    }
}

/* ---- cross_entropy --------------------------------------------------------------------- */
/* One row: xn (C), target tn -> *lse, *loss (0 for an ignored row). */
static inline void TFN(ce_row_fwd)(const T *restrict xn, int64_t tn, int64_t ignore, int64_t C,
                                   T *lse, double *loss) {
    T mx = TFN(rm_row_max)(xn, C);
    if (mx == -INFINITY) mx = 0;
    T l = mx + LOSS_LOGF(TFN(rm_row_expsum)(xn, mx, NULL, C));
    *lse = l;
    *loss = tn == ignore ? 0.0 : (double)(l - xn[tn]);
}
/* x (N, C), t (N) -> loss[n] (0 for ignored rows), lse (N) */
static void TFN(ce_fwd)(const T *restrict x, const int64_t *restrict t, int64_t ignore,
                        T *restrict lse, double *restrict loss, int64_t N, int64_t C) {
#pragma omp parallel for if (N * C > RM_OMP_MIN / 4)
    for (int64_t n = 0; n < N; n++) TFN(ce_row_fwd)(x + n * C, t[n], ignore, C, &lse[n], &loss[n]);
}
/* One row of the backward, not ignored: d (C) = scale * (softmax(xn) - onehot(tn)). */
static inline void TFN(ce_row_bwd)(const T *restrict xn, int64_t tn, T lse, T scale, T *restrict d,
                                   int64_t C) {
    TFN(rm_row_exp_scale)(xn, lse, scale, d, C);
    d[tn] -= scale;
}
/* dx (N, C) = scale * (softmax - onehot), 0 on ignored rows; scale = g / count */
static void TFN(ce_bwd)(const T *restrict x, const int64_t *restrict t, int64_t ignore,
                        const T *restrict lse, T scale, T *restrict dx, int64_t N, int64_t C) {
#pragma omp parallel for if (N * C > RM_OMP_MIN / 4)
    for (int64_t n = 0; n < N; n++) {
        T *d = dx + n * C;
        if (t[n] == ignore) {
            memset(d, 0, (size_t)C * sizeof(T));
            continue;
        }
        TFN(ce_row_bwd)(x + n * C, t[n], lse[n], scale, d, C);
    }
}

/* ---- mse_loss -------------------------------------------------------------------------- */
static double TFN(mse_fwd)(const T *restrict a, const T *restrict b, int64_t n,
                           double *restrict part) {
    int64_t nch = (n + LOSS_CHUNK - 1) / LOSS_CHUNK;
#pragma omp parallel for if (n > RM_OMP_MIN)
    for (int64_t c = 0; c < nch; c++) {
        int64_t lo = c * LOSS_CHUNK, hi = lo + LOSS_CHUNK < n ? lo + LOSS_CHUNK : n;
        double s = 0;
        for (int64_t i = lo; i < hi; i++) {
            double d = (double)a[i] - (double)b[i];
            s += d * d;
        }
        part[c] = s;
    }
    double total = 0;
    for (int64_t c = 0; c < nch; c++) total += part[c];
    return total;
}
/* da = s * (a - b), db = -da (each may be NULL); da may be a (in place) */
static void TFN(mse_bwd)(const T *a, const T *restrict b, T s, T *da, T *restrict db, int64_t n) {
#pragma omp parallel for if (n > RM_OMP_MIN)
    for (int64_t i = 0; i < n; i++) {
        T v = s * (a[i] - b[i]);
        if (da) da[i] = v;
        if (db) db[i] = -v;
    }
}

/* ---- the kernels (rm_kernel_fn) -------------------------------------------------------- */
remat_status TFN(rm_cpu_embedding)(const rm_kargs *k) {
    const remat_tensor *w = k->in[0];
    int64_t P = remat_numel(k->in[1]);
    int rc = check_indices(w, rm_ptr(k->in[1]), P);
    if (rc) return rc;
    TFN(embedding_fwd)(rm_ptr(w), rm_ptr(k->in[1]), rm_ptr(k->out[0]), P, w->shape[1]);
    return REMAT_OK;
}
remat_status TFN(rm_cpu_embedding_bwd)(const rm_kargs *k) {
    const remat_tensor *dw = k->out[0];
    TFN(embedding_bwd)
    (rm_ptr(k->in[0]), rm_ptr(k->in[1]), rm_ptr(dw), dw->shape[0], remat_numel(k->in[1]),
     dw->shape[1]);
    return REMAT_OK;
}
remat_status TFN(rm_cpu_cross_entropy)(const rm_kargs *k) {
    const rm_ce_params *p = k->params;
    const remat_tensor *x = k->in[0];
    const int64_t *tp = rm_ptr(k->in[1]);
    int64_t N = x->shape[0], C = x->shape[1], count = 0;
    int rc = count_targets(x, tp, p->ignore_index, true, &count);
    if (rc) return rc;
    double *loss = malloc(sizeof(double) * (size_t)(N ? N : 1));
    if (!loss) return rm_err(REMAT_ENOMEM, "out of memory");
    TFN(ce_fwd)(rm_ptr(x), tp, p->ignore_index, rm_ptr(k->out[1]), loss, N, C);
    double mean = sum_fixed_chunks(loss, N) / (double)count; /* no targets: NaN */
    if (count == 0) mean = NAN;
    *(T *)rm_ptr(k->out[0]) = (T)mean;
    free(loss);
    return REMAT_OK;
}
remat_status TFN(rm_cpu_cross_entropy_bwd)(const rm_kargs *k) {
    const rm_ce_params *p = k->params;
    const remat_tensor *x = k->in[0];
    int64_t N = x->shape[0], C = x->shape[1], count = 0;
    count_targets(x, rm_ptr(k->in[1]), p->ignore_index, false, &count);
    double scale = scalar_of(k->in[3]) / (double)count; /* count 0: NaN, as the forward */
    TFN(ce_bwd)
    (rm_ptr(x), rm_ptr(k->in[1]), p->ignore_index, rm_ptr(k->in[2]), (T)scale, rm_ptr(k->out[0]), N,
     C);
    return REMAT_OK;
}
remat_status TFN(rm_cpu_mse)(const rm_kargs *k) {
    int64_t n = remat_numel(k->in[0]);
    int64_t nch = (n + LOSS_CHUNK - 1) / LOSS_CHUNK;
    double *part = malloc(sizeof(double) * (size_t)(nch ? nch : 1));
    if (!part) return rm_err(REMAT_ENOMEM, "out of memory");
    double s = TFN(mse_fwd)(rm_ptr(k->in[0]), rm_ptr(k->in[1]), n, part);
    free(part);
    double mean = n ? s / (double)n : NAN;
    *(T *)rm_ptr(k->out[0]) = (T)mean;
    return REMAT_OK;
}
remat_status TFN(rm_cpu_mse_bwd)(const rm_kargs *k) {
    int64_t n = remat_numel(k->in[0]);
    double s = 2.0 * scalar_of(k->in[2]) / (double)n;
    remat_tensor *da = k->out[0], *db = k->out[1];
    TFN(mse_bwd)
    (rm_ptr(k->in[0]), rm_ptr(k->in[1]), (T)s, da ? rm_ptr(da) : NULL, db ? rm_ptr(db) : NULL, n);
    return REMAT_OK;
}

#undef T
#undef LOSS_LOGF
