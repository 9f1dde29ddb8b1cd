/* src/optim/schedule.c — learning-rate schedules (remat/optim.h). */
#include <math.h>

#include "core/core.h"
#include "remat/optim.h"

remat_status remat_lr_schedule_check(const remat_lr_schedule *s) {
    if (!s) return rm_err(REMAT_EINVAL, "remat_lr_schedule: schedule is NULL");
    if (s->kind == REMAT_LR_CONSTANT) return REMAT_OK;
    if (s->kind != REMAT_LR_WARMUP_COSINE)
        return rm_err(REMAT_EINVAL, "remat_lr_schedule: unknown kind %d", (int)s->kind);
    if (s->warmup_steps < 0 || s->total_steps <= s->warmup_steps)
        return rm_err(REMAT_EINVAL,
                      "remat_lr_schedule: warm-up %lld and total %lld steps (need 0 <= warm-up "
                      "< total)",
                      (long long)s->warmup_steps, (long long)s->total_steps);
    if (!(s->min_lr >= 0) || !isfinite(s->min_lr))
        return rm_err(REMAT_EINVAL, "remat_lr_schedule: min_lr %g (need a finite value >= 0)",
                      s->min_lr);
    return REMAT_OK;
}

double remat_lr_at(const remat_lr_schedule *s, double lr, int64_t k) {
    if (!s || s->kind != REMAT_LR_WARMUP_COSINE) return lr;
    const int64_t w = s->warmup_steps, n = s->total_steps;
    if (k < 0) k = 0;
    if (k < w) return lr * (double)(k + 1) / (double)w;
    if (k >= n) return s->min_lr;
    const double progress = (double)(k - w) / (double)(n - w);
    return s->min_lr + (lr - s->min_lr) * 0.5 * (1.0 + cos(M_PI * progress));
}
