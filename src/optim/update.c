/*
 * src/optim/update.c — the per-element work of SGD and AdamW on flat
 * buffers, and sums of squares for global norms (remat/optim.h). These are
 * the only loops over optimizer state; the optimizer object (optim.c) and
 * sharded optimizers call them on whole tensors or on slices.
 *
 * f32: the recurrences run in float as PyTorch's f32 kernels do, with the
 * scalar factors (bias corrections, decay) formed in double and rounded
 * once. Every element's result depends only on its own inputs, so a buffer
 * may be split anywhere (threads, ZeRO shards) without changing a bit.
 */
#include <math.h>
#include <stdlib.h>

#include "core/core.h"
#include "remat/optim.h"

#define OPTIM_OMP_MIN 65536 /* below this, a parallel region costs more than it saves */

static remat_status check_buffers(const char *call, const void *p, const void *g, const void *s1,
                                  const void *s2, int64_t n) {
    if (n < 0) return rm_err(REMAT_EINVAL, "%s: n is %lld (must be >= 0)", call, (long long)n);
    if (n > 0 && (!p || !g || !s1 || !s2))
        return rm_err(REMAT_EINVAL, "%s: a buffer is NULL", call);
    return REMAT_OK;
}

/* The checks of remat_adamw_update_*, then step's bias corrections
 * 1 - beta^step in double. */
static remat_status adamw_begin(const char *call, const void *p, const void *g, const void *m,
                                const void *v, int64_t n, const remat_adamw_hparams *h, double *bc1,
                                double *bc2) {
    if (!h) return rm_err(REMAT_EINVAL, "%s: hparams is NULL", call);
    if (h->step < 1)
        return rm_err(REMAT_EINVAL, "%s: step is %lld (the first update is step 1)", call,
                      (long long)h->step);
    int rc = check_buffers(call, p, g, m, v, n);
    if (rc) return rc;
    *bc1 = 1.0 - pow(h->beta1, (double)h->step);
    *bc2 = 1.0 - pow(h->beta2, (double)h->step);
    return REMAT_OK;
}

remat_status remat_adamw_update_f32(float *p, const float *g, float *m, float *v, int64_t n,
                                    const remat_adamw_hparams *h) {
    double bc1 = 1, bc2 = 1;
    int rc = adamw_begin("remat_adamw_update_f32", p, g, m, v, n, h, &bc1, &bc2);
    if (rc) return rc;
    const float b1 = (float)h->beta1, b2 = (float)h->beta2, eps = (float)h->eps;
    const float decay = (float)(1.0 - h->lr * h->weight_decay);
    const float step_size = (float)(h->lr / bc1), inv_sqrt_bc2 = (float)(1.0 / sqrt(bc2));
#pragma omp parallel for if (n > OPTIM_OMP_MIN)
    for (int64_t i = 0; i < n; i++) {
        float gi = g[i];
        float mi = b1 * m[i] + (1.0f - b1) * gi;
        float vi = b2 * v[i] + (1.0f - b2) * gi * gi;
        m[i] = mi;
        v[i] = vi;
        float denom = sqrtf(vi) * inv_sqrt_bc2 + eps;
        p[i] = p[i] * decay - step_size * mi / denom;
    }
    return REMAT_OK;
}

remat_status remat_adamw_update_f64(double *p, const double *g, double *m, double *v, int64_t n,
                                    const remat_adamw_hparams *h) {
    double bc1 = 1, bc2 = 1;
    int rc = adamw_begin("remat_adamw_update_f64", p, g, m, v, n, h, &bc1, &bc2);
    if (rc) return rc;
    const double b1 = h->beta1, b2 = h->beta2, eps = h->eps;
    const double decay = 1.0 - h->lr * h->weight_decay, step_size = h->lr / bc1;
    const double sqrt_bc2 = sqrt(bc2);
#pragma omp parallel for if (n > OPTIM_OMP_MIN)
    for (int64_t i = 0; i < n; i++) {
        double gi = g[i];
        double mi = b1 * m[i] + (1.0 - b1) * gi;
        double vi = b2 * v[i] + (1.0 - b2) * gi * gi;
        m[i] = mi;
        v[i] = vi;
        p[i] = p[i] * decay - step_size * mi / (sqrt(vi) / sqrt_bc2 + eps);
    }
    return REMAT_OK;
}

static remat_status check_sgd(const char *call, const void *p, const void *g, const void *buf,
                              int64_t n, const remat_sgd_hparams *h) {
    if (!h) return rm_err(REMAT_EINVAL, "%s: hparams is NULL", call);
    if (h->momentum != 0 && n > 0 && !buf)
        return rm_err(REMAT_EINVAL, "%s: momentum %g needs a momentum buffer (buf is NULL)", call,
                      h->momentum);
    return check_buffers(call, p, g, p, g, n);
}

/* As torch.optim.SGD's single-tensor loop, in T (float: f32, double:
 * f64). It keeps PyTorch's order of operations; every scalar is rounded to
 * T once. */
#define SGD_UPDATE(T, sfx)                                                                         \
    remat_status remat_sgd_update_##sfx(T *p, const T *g, T *buf, int64_t n,                       \
                                        const remat_sgd_hparams *h) {                              \
        int rc = check_sgd("remat_sgd_update_" #sfx, p, g, buf, n, h);                             \
        if (rc) return rc;                                                                         \
        const T lr = (T)h->lr, mom = (T)h->momentum, wd = (T)h->weight_decay;                      \
        const T damp = (T)(1.0 - h->dampening);                                                    \
        const bool use_buf = h->momentum != 0, first = h->first, nesterov = h->nesterov;           \
        const bool decay = h->weight_decay != 0;                                                   \
        _Pragma("omp parallel for if (n > OPTIM_OMP_MIN)") for (int64_t i = 0; i < n; i++) {       \
            T d = g[i];                                                                            \
            if (decay) d = d + wd * p[i];                                                          \
            if (use_buf) {                                                                         \
                T b = first ? d : mom * buf[i] + damp * d;                                         \
                buf[i] = b;                                                                        \
                d = nesterov ? d + mom * b : b;                                                    \
            }                                                                                      \
            p[i] -= lr * d;                                                                        \
        }                                                                                          \
        return REMAT_OK;                                                                           \
    }
SGD_UPDATE(float, f32)
SGD_UPDATE(double, f64)

/* Sums of squares in fixed chunks whose partial sums are added in order:
 * the result is the same bits for any number of threads (a clipped run
 * resumes bitwise whatever OMP_NUM_THREADS says). */
#define SUMSQ_CHUNK 16384

static double chunk_sumsq(const void *x, bool f64, int64_t lo, int64_t hi) {
    double s = 0;
    if (f64)
        for (int64_t i = lo; i < hi; i++) s += ((const double *)x)[i] * ((const double *)x)[i];
    else
        for (int64_t i = lo; i < hi; i++)
            s += (double)((const float *)x)[i] * (double)((const float *)x)[i];
    return s;
}

static double sum_squares(const void *x, bool f64, int64_t n) {
    if (!x || n <= 0) return 0;
    const int64_t nc = (n + SUMSQ_CHUNK - 1) / SUMSQ_CHUNK;
    double small[64], *part = nc <= 64 ? small : malloc(sizeof(double) * (size_t)nc);
    double s = 0;
    if (!part) { /* no room for the partial sums: the same chunks, one thread */
        for (int64_t c = 0; c < nc; c++)
            s += chunk_sumsq(x, f64, c * SUMSQ_CHUNK, c + 1 < nc ? (c + 1) * SUMSQ_CHUNK : n);
        return s;
    }
#pragma omp parallel for if (nc > 4)
    for (int64_t c = 0; c < nc; c++)
        part[c] = chunk_sumsq(x, f64, c * SUMSQ_CHUNK, c + 1 < nc ? (c + 1) * SUMSQ_CHUNK : n);
    for (int64_t c = 0; c < nc; c++) s += part[c];
    if (part != small) free(part);
    return s;
}

double remat_sum_squares_f32(const float *x, int64_t n) { return sum_squares(x, false, n); }
double remat_sum_squares_f64(const double *x, int64_t n) { return sum_squares(x, true, n); }

double remat_clip_factor(double total_norm, double max_norm) {
    double f = max_norm / (total_norm + 1e-6);
    return f < 1.0 ? f : 1.0;
}
