/* src/backends/cpu/loss.c — cpu kernels of embedding, cross_entropy and
 * mse_loss (src/ops/loss.c).
 *
 * embedding gathers rows of weight (num, dim); its backward scatter-adds
 * the output gradient back into a (num, dim) gradient. Repeated indices
 * accumulate. The scatter runs in index order within each block of
 * columns and is parallel over column blocks, so it is deterministic.
 *
 * cross_entropy fuses log_softmax and the NLL: per row n,
 *   loss_n = logsumexp(x[n, :]) - x[n, t_n],
 * averaged over rows whose target is not ignore_index. The per-row
 * logsumexp is an output the op saves (N values), so the backward
 *   dx[n, c] = g * (exp(x[n, c] - lse_n) - [c == t_n]) / count
 * needs no second pass for the max and the sum.
 *
 * The scalar losses sum their per-row / per-element terms in double over
 * fixed chunks, so the value does not depend on the thread count.
 *
 * The index and target range checks read the data, so they are the
 * kernels' (skipped, with the kernels, in skip mode); their messages are
 * named after the call by the driver. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "cpu.h"

#define LOSS_CHUNK 4096 /* elements per partial sum of a scalar loss */
#define EMB_COL_BLOCK 64

typedef float f32;
typedef double f64;

/* The value of a 0-dim f32 or f64 tensor (a loss's gradient), as double. */
static double scalar_of(const remat_tensor *g) {
    const void *p = rm_ptr(g);
    return g->dtype == REMAT_F32 ? (double)*(const float *)p : *(const double *)p;
}

/* ---- embedding ------------------------------------------------------------------------- */
#define EMBEDDING_KERNELS(T)                                                                       \
    /* y (P, D) = w[idx[p], :] */                                                                  \
    static void embedding_fwd_##T(const T *restrict w, const int64_t *restrict idx, T *restrict y, \
                                  int64_t P, int64_t D) {                                          \
        _Pragma("omp parallel for if (P * D > RM_OMP_MIN)") for (int64_t p = 0; p < P; p++)        \
            memcpy(y + p * D, w + idx[p] * D, (size_t)D * sizeof(T));                              \
    }                                                                                              \
    /* dw (num, D) = 0; dw[idx[p], :] += g[p, :] */                                                \
    static void embedding_bwd_##T(const T *restrict g, const int64_t *restrict idx,                \
                                  T *restrict dw, int64_t num, int64_t P, int64_t D) {             \
        int64_t nb = (D + EMB_COL_BLOCK - 1) / EMB_COL_BLOCK;                                      \
        _Pragma("omp parallel for if ((num + P) * D > RM_OMP_MIN)") for (int64_t b = 0; b < nb;    \
                                                                         b++) {                    \
            int64_t c0 = b * EMB_COL_BLOCK;                                                        \
            int w = (int)(D - c0 < EMB_COL_BLOCK ? D - c0 : EMB_COL_BLOCK);                        \
            for (int64_t r = 0; r < num; r++)                                                      \
                for (int j = 0; j < w; j++) dw[r * D + c0 + j] = 0;                                \
            for (int64_t p = 0; p < P; p++) {                                                      \
                T *d = dw + idx[p] * D + c0;                                                       \
                const T *gp = g + p * D + c0;                                                      \
                for (int j = 0; j < w; j++) d[j] += gp[j];                                         \
            }                                                                                      \
        }                                                                                          \
    }

EMBEDDING_KERNELS(f32)
EMBEDDING_KERNELS(f64)

/* The first index out of [0, num) as an error (REMAT_OK if none). */
static remat_status check_indices(const remat_tensor *w, const int64_t *ip, int64_t P) {
    const int64_t num = w->shape[0];
    for (int64_t p = 0; p < P; p++) {
        if (ip[p] < 0 || ip[p] >= num) {
            char bw[200];
            return rm_err(REMAT_EINVAL,
                          "index out of range: indices[%lld] (flat) = %lld, weight %s has %lld "
                          "rows (valid: 0 to %lld)",
                          (long long)p, (long long)ip[p], rm_tensor_str(w, bw, sizeof bw),
                          (long long)num, (long long)num - 1);
        }
    }
    return REMAT_OK;
}

/* ---- cross_entropy ------------------------------------------------------------------------ */
#define CE_KERNELS(T, LOGF)                                                                        \
    /* x (N, C), t (N) -> loss[n] (0 for ignored rows), lse (N) */                                 \
    static void ce_fwd_##T(const T *restrict x, const int64_t *restrict t, int64_t ignore,         \
                           T *restrict lse, double *restrict loss, int64_t N, int64_t C) {         \
        _Pragma("omp parallel for if (N * C > RM_OMP_MIN / 4)") for (int64_t n = 0; n < N; n++) {  \
            const T *xn = x + n * C;                                                               \
            T mx = rm_row_max_##T(xn, C);                                                          \
            if (mx == -INFINITY) mx = 0;                                                           \
            T l = mx + LOGF(rm_row_expsum_##T(xn, mx, NULL, C));                                   \
            lse[n] = l;                                                                            \
            loss[n] = t[n] == ignore ? 0.0 : (double)(l - xn[t[n]]);                               \
        }                                                                                          \
    }                                                                                              \
    /* dx (N, C) = scale * (softmax - onehot), 0 on ignored rows; scale = g / count */             \
    static void ce_bwd_##T(const T *restrict x, const int64_t *restrict t, int64_t ignore,         \
                           const T *restrict lse, T scale, T *restrict dx, int64_t N, int64_t C) { \
        _Pragma("omp parallel for if (N * C > RM_OMP_MIN / 4)") for (int64_t n = 0; n < N; n++) {  \
            T *d = dx + n * C;                                                                     \
            if (t[n] == ignore) {                                                                  \
                memset(d, 0, (size_t)C * sizeof(T));                                               \
                continue;                                                                          \
            }                                                                                      \
            rm_row_exp_scale_##T(x + n * C, lse[n], scale, d, C);                                  \
            d[t[n]] -= scale;                                                                      \
        }                                                                                          \
    }

CE_KERNELS(f32, logf)
CE_KERNELS(f64, log)

/* Sum of n doubles over fixed chunks (thread-count independent). */
static double sum_fixed_chunks(const double *v, int64_t n) {
    int64_t nch = (n + LOSS_CHUNK - 1) / LOSS_CHUNK;
    double total = 0;
    for (int64_t c = 0; c < nch; c++) {
        int64_t lo = c * LOSS_CHUNK, hi = lo + LOSS_CHUNK < n ? lo + LOSS_CHUNK : n;
        double s = 0;
        for (int64_t i = lo; i < hi; i++) s += v[i];
        total += s;
    }
    return total;
}

/* Rows whose target is not ignore_index; with check, the first target out of
 * [0, C) that is not ignore_index as an error (*count then unset). */
static remat_status count_targets(const remat_tensor *x, const int64_t *tp, int64_t ignore_index,
                                  bool check, int64_t *count) {
    const int64_t N = x->shape[0], C = x->shape[1];
    int64_t n_kept = 0;
    for (int64_t n = 0; n < N; n++) {
        if (tp[n] == ignore_index) continue;
        if (check && (tp[n] < 0 || tp[n] >= C)) {
            char bl[200];
            return rm_err(REMAT_EINVAL,
                          "target out of range: targets[%lld] = %lld, logits %s "
                          "has %lld classes (valid: 0 to %lld, or ignore_index %lld)",
                          (long long)n, (long long)tp[n], rm_tensor_str(x, bl, sizeof bl),
                          (long long)C, (long long)C - 1, (long long)ignore_index);
        }
        n_kept++;
    }
    *count = n_kept;
    return REMAT_OK;
}

/* ---- mse_loss ------------------------------------------------------------------------------- */
#define MSE_KERNELS(T)                                                                             \
    static double mse_fwd_##T(const T *restrict a, const T *restrict b, int64_t n,                 \
                              double *restrict part) {                                             \
        int64_t nch = (n + LOSS_CHUNK - 1) / LOSS_CHUNK;                                           \
        _Pragma("omp parallel for if (n > RM_OMP_MIN)") for (int64_t c = 0; c < nch; c++) {        \
            int64_t lo = c * LOSS_CHUNK, hi = lo + LOSS_CHUNK < n ? lo + LOSS_CHUNK : n;           \
            double s = 0;                                                                          \
            for (int64_t i = lo; i < hi; i++) {                                                    \
                double d = (double)a[i] - (double)b[i];                                            \
                s += d * d;                                                                        \
            }                                                                                      \
            part[c] = s;                                                                           \
        }                                                                                          \
        double total = 0;                                                                          \
        for (int64_t c = 0; c < nch; c++) total += part[c];                                        \
        return total;                                                                              \
    }                                                                                              \
    /* da = s * (a - b), db = -da (each may be NULL); da may be a (in place) */                    \
    static void mse_bwd_##T(const T *a, const T *restrict b, T s, T *da, T *restrict db,           \
                            int64_t n) {                                                           \
        _Pragma("omp parallel for if (n > RM_OMP_MIN)") for (int64_t i = 0; i < n; i++) {          \
            T v = s * (a[i] - b[i]);                                                               \
            if (da) da[i] = v;                                                                     \
            if (db) db[i] = -v;                                                                    \
        }                                                                                          \
    }

MSE_KERNELS(f32)
MSE_KERNELS(f64)

/* ---- the kernels (rm_kernel_fn) ------------------------------------------------------ */
#define LOSS_KERNEL_FNS(T)                                                                         \
    remat_status rm_cpu_embedding_##T(const rm_kargs *k) {                                         \
        const remat_tensor *w = k->in[0];                                                          \
        int64_t P = remat_numel(k->in[1]);                                                         \
        int rc = check_indices(w, rm_ptr(k->in[1]), P);                                            \
        if (rc) return rc;                                                                         \
        embedding_fwd_##T(rm_ptr(w), rm_ptr(k->in[1]), rm_ptr(k->out[0]), P, w->shape[1]);         \
        return REMAT_OK;                                                                           \
    }                                                                                              \
    remat_status rm_cpu_embedding_bwd_##T(const rm_kargs *k) {                                     \
        const remat_tensor *dw = k->out[0];                                                        \
        embedding_bwd_##T(rm_ptr(k->in[0]), rm_ptr(k->in[1]), rm_ptr(dw), dw->shape[0],            \
                          remat_numel(k->in[1]), dw->shape[1]);                                    \
        return REMAT_OK;                                                                           \
    }                                                                                              \
    remat_status rm_cpu_cross_entropy_##T(const rm_kargs *k) {                                     \
        const rm_ce_params *p = k->params;                                                         \
        const remat_tensor *x = k->in[0];                                                          \
        const int64_t *tp = rm_ptr(k->in[1]);                                                      \
        int64_t N = x->shape[0], C = x->shape[1], count = 0;                                       \
        int rc = count_targets(x, tp, p->ignore_index, true, &count);                              \
        if (rc) return rc;                                                                         \
        double *loss = malloc(sizeof(double) * (size_t)(N ? N : 1));                               \
        if (!loss) return rm_err(REMAT_ENOMEM, "out of memory");                                   \
        ce_fwd_##T(rm_ptr(x), tp, p->ignore_index, rm_ptr(k->out[1]), loss, N, C);                 \
        double mean = sum_fixed_chunks(loss, N) / (double)count; /* no targets: NaN */             \
        if (count == 0) mean = NAN;                                                                \
        *(T *)rm_ptr(k->out[0]) = (T)mean;                                                         \
        free(loss);                                                                                \
        return REMAT_OK;                                                                           \
    }                                                                                              \
    remat_status rm_cpu_cross_entropy_bwd_##T(const rm_kargs *k) {                                 \
        const rm_ce_params *p = k->params;                                                         \
        const remat_tensor *x = k->in[0];                                                          \
        int64_t N = x->shape[0], C = x->shape[1], count = 0;                                       \
        count_targets(x, rm_ptr(k->in[1]), p->ignore_index, false, &count);                        \
        double scale = scalar_of(k->in[3]) / (double)count; /* count 0: NaN, as the forward */     \
        ce_bwd_##T(rm_ptr(x), rm_ptr(k->in[1]), p->ignore_index, rm_ptr(k->in[2]), (T)scale,       \
                   rm_ptr(k->out[0]), N, C);                                                       \
        return REMAT_OK;                                                                           \
    }                                                                                              \
    remat_status rm_cpu_mse_##T(const rm_kargs *k) {                                               \
        int64_t n = remat_numel(k->in[0]);                                                         \
        int64_t nch = (n + LOSS_CHUNK - 1) / LOSS_CHUNK;                                           \
        double *part = malloc(sizeof(double) * (size_t)(nch ? nch : 1));                           \
        if (!part) return rm_err(REMAT_ENOMEM, "out of memory");                                   \
        double s = mse_fwd_##T(rm_ptr(k->in[0]), rm_ptr(k->in[1]), n, part);                       \
        free(part);                                                                                \
        double mean = n ? s / (double)n : NAN;                                                     \
        *(T *)rm_ptr(k->out[0]) = (T)mean;                                                         \
        return REMAT_OK;                                                                           \
    }                                                                                              \
    remat_status rm_cpu_mse_bwd_##T(const rm_kargs *k) {                                           \
        int64_t n = remat_numel(k->in[0]);                                                         \
        double s = 2.0 * scalar_of(k->in[2]) / (double)n;                                          \
        remat_tensor *da = k->out[0], *db = k->out[1];                                             \
        mse_bwd_##T(rm_ptr(k->in[0]), rm_ptr(k->in[1]), (T)s, da ? rm_ptr(da) : NULL,              \
                    db ? rm_ptr(db) : NULL, n);                                                    \
        return REMAT_OK;                                                                           \
    }
LOSS_KERNEL_FNS(f32)
LOSS_KERNEL_FNS(f64)
