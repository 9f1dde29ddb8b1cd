/*
 * src/optim/update.c — the per-element work of SGD and AdamW on flat
 * buffers, and sums of squares for global norms (remat/optim.h): the
 * arguments checked, then the host loops every host kernel runs
 * (src/core/optim_loops.h). Sharded optimizers call them on slices; the
 * optimizer object (optim.c) goes through the kernel table, whose cpu rows
 * run the same loops.
 */
#include <math.h>
#include <stdlib.h>

#include "core/core.h"
#include "core/optim_loops.h"
#include "remat/optim.h"

static remat_status check_buffers(const char *call, const void *p, const void *g, const void *s1,
                                  const void *s2, int64_t n) {
    if (n < 0) return rm_err(REMAT_EINVAL, "%s: n is %lld (must be >= 0)", call, (long long)n);
    if (n > 0 && (!p || !g || !s1 || !s2))
        return rm_err(REMAT_EINVAL, "%s: a buffer is NULL", call);
    return REMAT_OK;
}

/* The checks of remat_adamw_update_*. */
static remat_status adamw_begin(const char *call, const void *p, const void *g, const void *m,
                                const void *v, int64_t n, const remat_adamw_hparams *h) {
    if (!h) return rm_err(REMAT_EINVAL, "%s: hparams is NULL", call);
    if (h->step < 1)
        return rm_err(REMAT_EINVAL, "%s: step is %lld (the first update is step 1)", call,
                      (long long)h->step);
    return check_buffers(call, p, g, m, v, n);
}

static rm_adamw_kparams adamw_kparams(const remat_adamw_hparams *h) {
    rm_adamw_kparams k = {h->lr, h->beta1, h->beta2, h->eps, h->weight_decay, h->step, 0};
    return k;
}

remat_status remat_adamw_update_f32(float *p, const float *g, float *m, float *v, int64_t n,
                                    const remat_adamw_hparams *h) {
    int rc = adamw_begin("remat_adamw_update_f32", p, g, m, v, n, h);
    if (rc) return rc;
    const rm_adamw_kparams k = adamw_kparams(h);
    rm_adamw_factors f;
    rm_adamw_factors_make(&k, &f);
    rm_adamw_loop_f32(p, g, m, v, n, &f);
    return REMAT_OK;
}

remat_status remat_adamw_update_f64(double *p, const double *g, double *m, double *v, int64_t n,
                                    const remat_adamw_hparams *h) {
    int rc = adamw_begin("remat_adamw_update_f64", p, g, m, v, n, h);
    if (rc) return rc;
    const rm_adamw_kparams k = adamw_kparams(h);
    rm_adamw_factors f;
    rm_adamw_factors_make(&k, &f);
    rm_adamw_loop_f64(p, g, m, v, n, &f);
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

/* torch.optim.SGD's single-tensor loop (src/core/optim_loops.h). */
#define SGD_UPDATE(T, sfx)                                                                         \
    remat_status remat_sgd_update_##sfx(T *p, const T *g, T *buf, int64_t n,                       \
                                        const remat_sgd_hparams *h) {                              \
        int rc = check_sgd("remat_sgd_update_" #sfx, p, g, buf, n, h);                             \
        if (rc) return rc;                                                                         \
        const rm_sgd_kparams k = {                                                                 \
            h->lr, h->momentum, h->dampening, h->weight_decay, h->nesterov, h->first, 0};          \
        rm_sgd_loop_##sfx(p, g, buf, n, &k);                                                       \
        return REMAT_OK;                                                                           \
    }
SGD_UPDATE(float, f32)
SGD_UPDATE(double, f64)

double remat_sum_squares_f32(const float *x, int64_t n) { return rm_sum_squares_loop(x, false, n); }
double remat_sum_squares_f64(const double *x, int64_t n) { return rm_sum_squares_loop(x, true, n); }

double remat_clip_factor(double total_norm, double max_norm) {
    double f = max_norm / (total_norm + 1e-6);
    return f < 1.0 ? f : 1.0;
}
