/* src/backends/cpu/rms_norm.c — cpu kernels of rms_norm (src/ops/rms_norm.c).
 *
 *   y = x · rstd · w,   rstd = 1 / sqrt(mean_c(x²) + eps)   over the last n_norm dims
 *
 * x is seen as (N, C), C the product of the normalised dims, one row at a
 * time as layer_norm's kernels (cpu/nn.c): a row comes from memory once,
 * its sum of squares is RMS_LANES independent accumulators in the input's
 * type combined pairwise (vectorised without reassociation flags; the
 * order depends only on C), and rstd goes through a double sqrt. rstd is
 * the by-product the op saves (f32 for bf16 x: the bf16 path runs this f32
 * kernel on widened rows and rounds y alone).
 *
 * Backward, with x̂ = x · rstd and wg = w · g (g without a weight):
 *   dx = (wg − x̂ · mean_c(wg · x̂)) · rstd
 *   dw = Σ_n g · x̂
 * dx one sweep over the rows; dw as column sums per fixed chunk of rows
 * (rm_cpu_chunk_rows), the chunks then summed in double in order: results
 * never depend on the thread count. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "clones.h"
#include "cpu.h"

#define RMS_LANES 16
#define RMS_COL_BLOCK 64

#define RMS_REDUCE(acc) /* pairwise combine of the lanes into acc[0] */                            \
    for (int w_ = RMS_LANES / 2; w_ > 0; w_ /= 2)                                                  \
        for (int j_ = 0; j_ < w_; j_++) acc[j_] += acc[j_ + w_]

typedef float f32;
typedef double f64;

#define RMS_KERNELS(T)                                                                             \
    /* 1 / sqrt(mean(x²) + eps) of one row */                                                     \
    RM_CPU_CLONES static T rms_rstd_##T(const T *restrict xn, int64_t C, double eps) {             \
        T a[RMS_LANES];                                                                            \
        for (int j = 0; j < RMS_LANES; j++) a[j] = 0;                                              \
        int64_t c = 0;                                                                             \
        for (; c + RMS_LANES <= C; c += RMS_LANES)                                                 \
            for (int j = 0; j < RMS_LANES; j++) a[j] += xn[c + j] * xn[c + j];                     \
        for (; c < C; c++) a[0] += xn[c] * xn[c];                                                  \
        RMS_REDUCE(a);                                                                             \
        return (T)(1.0 / sqrt((double)(a[0] / (T)C) + eps));                                       \
    }                                                                                              \
                                                                                                   \
    /* x (N, C) -> y (N, C), rstd (N). w (C) or NULL. */                                           \
    RM_CPU_CLONES static void rms_fwd_##T(const T *restrict x, const T *restrict w, T *restrict y, \
                                          T *restrict rstd, int64_t N, int64_t C, double eps) {    \
        _Pragma("omp parallel for if (N * C > RM_OMP_MIN / 4)") for (int64_t n = 0; n < N; n++) {  \
            const T *restrict xn = x + n * C;                                                      \
            T *restrict yn = y + n * C;                                                            \
            const T r = rms_rstd_##T(xn, C, eps);                                                  \
            if (w)                                                                                 \
                for (int64_t c = 0; c < C; c++) yn[c] = xn[c] * r * w[c];                          \
            else                                                                                   \
                for (int64_t c = 0; c < C; c++) yn[c] = xn[c] * r;                                 \
            rstd[n] = r;                                                                           \
        }                                                                                          \
    }                                                                                              \
                                                                                                   \
    /* Rows [r0, r1) of the backward: dx rows (dx may be NULL) and, when pw is not NULL,      \
     * this chunk's column sums pw[c] = Σ_n g · x̂. */    \
    RM_CPU_CLONES static void rms_bwd_rows_##T(                                                    \
        const T *restrict g, const T *restrict x, const T *restrict w, const T *restrict rstd,     \
        T *restrict dx, T *restrict pw, int64_t r0, int64_t r1, int64_t C) {                       \
        if (pw)                                                                                    \
            for (int64_t c = 0; c < C; c++) pw[c] = 0;                                             \
        for (int64_t n = r0; n < r1; n++) {                                                        \
            const T *restrict gn = g + n * C, *restrict xn = x + n * C;                            \
            const T rs = rstd[n];                                                                  \
            if (pw)                                                                                \
                for (int64_t c = 0; c < C; c++) pw[c] += xn[c] * rs * gn[c];                       \
            if (!dx) continue;                                                                     \
            T a[RMS_LANES];                                                                        \
            for (int j = 0; j < RMS_LANES; j++) a[j] = 0;                                          \
            int64_t c = 0;                                                                         \
            for (; c + RMS_LANES <= C; c += RMS_LANES)                                             \
                for (int j = 0; j < RMS_LANES; j++) {                                              \
                    T wg = w ? w[c + j] * gn[c + j] : gn[c + j];                                   \
                    a[j] += wg * (xn[c + j] * rs);                                                 \
                }                                                                                  \
            for (; c < C; c++) a[0] += (w ? w[c] * gn[c] : gn[c]) * (xn[c] * rs);                  \
            RMS_REDUCE(a);                                                                         \
            const T m = a[0] / (T)C;                                                               \
            T *restrict d = dx + n * C;                                                            \
            for (c = 0; c < C; c++) {                                                              \
                T wg = w ? w[c] * gn[c] : gn[c];                                                   \
                d[c] = (wg - xn[c] * rs * m) * rs;                                                 \
            }                                                                                      \
        }                                                                                          \
    }                                                                                              \
                                                                                                   \
    /* dx (N, C) and dw (C) from g (N, C) (either may be NULL; part, scratch of C *           \
     * ceil(N / rm_cpu_chunk_rows(N, C)) elements, when dw is wanted). */    \
    RM_CPU_CLONES static void rms_bwd_##T(                                                         \
        const T *restrict g, const T *restrict x, const T *restrict w, const T *restrict rstd,     \
        T *restrict dx, T *restrict dw, T *restrict part, int64_t N, int64_t C) {                  \
        if (!dx && !dw) return;                                                                    \
        int64_t rb = rm_cpu_chunk_rows(N, C), nch = (N + rb - 1) / rb;                             \
        _Pragma("omp parallel for if (N * C > RM_OMP_MIN / 4)") for (int64_t k = 0; k < nch;       \
                                                                     k++) {                        \
            int64_t r0 = k * rb, r1 = r0 + rb < N ? r0 + rb : N;                                   \
            rms_bwd_rows_##T(g, x, w, rstd, dx, dw ? part + k *C : NULL, r0, r1, C);               \
        }                                                                                          \
        if (!dw) return;                                                                           \
        int64_t nb = (C + RMS_COL_BLOCK - 1) / RMS_COL_BLOCK;                                      \
        _Pragma("omp parallel for if (nch * C > RM_OMP_MIN)") for (int64_t bk = 0; bk < nb;        \
                                                                   bk++) {                         \
            int64_t c0 = bk * RMS_COL_BLOCK;                                                       \
            int wd = (int)(C - c0 < RMS_COL_BLOCK ? C - c0 : RMS_COL_BLOCK);                       \
            double s[RMS_COL_BLOCK];                                                               \
            for (int j = 0; j < wd; j++) s[j] = 0;                                                 \
            for (int64_t k = 0; k < nch; k++)                                                      \
                for (int j = 0; j < wd; j++) s[j] += (double)part[k * C + c0 + j];                 \
            for (int j = 0; j < wd; j++) dw[c0 + j] = (T)s[j];                                     \
        }                                                                                          \
    }

RMS_KERNELS(f32)
RMS_KERNELS(f64)

/* x's shape as (N, C): C the product of the last n_norm dims. */
static void rms_rows(const remat_tensor *x, int n_norm, int64_t *N, int64_t *C) {
    int lead = x->ndim - n_norm;
    *N = rm_shape_numel(lead, x->shape);
    *C = rm_shape_numel(n_norm, x->shape + lead);
}

static void *ptr_or_null(const remat_tensor *t) { return t ? rm_ptr(t) : NULL; }

#define RMS_KERNEL_FNS(T)                                                                          \
    remat_status rm_cpu_rms_norm_##T(const rm_kargs *k) {                                          \
        const rm_layer_norm_params *p = k->params;                                                 \
        int64_t N, C;                                                                              \
        rms_rows(k->in[0], p->n_norm, &N, &C);                                                     \
        rms_fwd_##T(rm_ptr(k->in[0]), ptr_or_null(k->in[1]), rm_ptr(k->out[0]), rm_ptr(k->out[1]), \
                    N, C, p->eps);                                                                 \
        return REMAT_OK;                                                                           \
    }                                                                                              \
    remat_status rm_cpu_rms_norm_bwd_##T(const rm_kargs *k) {                                      \
        const rm_layer_norm_params *p = k->params;                                                 \
        int64_t N, C;                                                                              \
        rms_rows(k->in[1], p->n_norm, &N, &C);                                                     \
        remat_tensor *dx = k->out[0], *dw = k->out[1];                                             \
        T *part = NULL; /* per-chunk column sums for dw */                                         \
        if (dw && N > 0) {                                                                         \
            int64_t rb = rm_cpu_chunk_rows(N, C), nch = (N + rb - 1) / rb;                         \
            part = malloc((size_t)(nch * C) * sizeof(T) + 1);                                      \
            if (!part) return rm_err(REMAT_ENOMEM, "out of memory");                               \
        } else if (dw) { /* no rows: a zero gradient */                                            \
            memset(rm_ptr(dw), 0, (size_t)C * sizeof(T));                                          \
            dw = NULL;                                                                             \
        }                                                                                          \
        rms_bwd_##T(rm_ptr(k->in[0]), rm_ptr(k->in[1]), ptr_or_null(k->in[2]), rm_ptr(k->in[3]),   \
                    ptr_or_null(dx), ptr_or_null(dw), part, N, C);                                 \
        free(part);                                                                                \
        return REMAT_OK;                                                                           \
    }
RMS_KERNEL_FNS(f32)
RMS_KERNEL_FNS(f64)
