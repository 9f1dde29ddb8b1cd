/* src/backends/cuda/optim_kernels.c — the cuda kernels (rm_kernel_fn) of the optimizer
 * family (src/core/kernels/optim.h): unpack rm_kargs, launch optim.cu's kernels on the
 * operands' device. The AdamW factors are formed on the host by the cpu kernels' code
 * (rm_adamw_factors_make), so both devices start from the same scalars. */
#include <stdlib.h>

#include "kwrap.h"
#include "optim.h"

static remat_status cuda_adamw(const rm_kargs *k) {
    rm_adamw_factors f;
    rm_adamw_factors_make(k->params, &f);
    remat_tensor *p = k->out[0];
    RMK_ENTER(c, p, "cuda adamw kernel");
    return rmk_leave(&c, rmk_adamw(rmk_dt(p), rm_ptr(p), rm_ptr(k->in[0]), rm_ptr(k->out[1]),
                                   rm_ptr(k->out[2]), remat_numel(p), &f, c.s));
}

static remat_status cuda_sgd(const rm_kargs *k) {
    remat_tensor *p = k->out[0];
    RMK_ENTER(c, p, "cuda sgd kernel");
    return rmk_leave(&c,
                     rmk_sgd(rmk_dt(p), rm_ptr(p), rm_ptr(k->in[0]),
                             k->out[1] ? rm_ptr(k->out[1]) : NULL, remat_numel(p), k->params, c.s));
}

static remat_status cuda_sum_squares(const rm_kargs *k) {
    const rm_sumsq_kparams *sp = k->params;
    const remat_tensor *x = k->in[0];
    const int64_t n = remat_numel(x);
    RMK_ENTER(c, x, "cuda sum of squares kernel");
    double *part = rmk_scratch(&c, sizeof(double) * (size_t)rmk_sum_squares_parts(n));
    if (!part) return rmk_leave_rc(&c, rm_last_status() ? rm_last_status() : REMAT_ENOMEM);
    cudaError_t e =
        rmk_sum_squares(rmk_dt(x), rm_ptr(x), n, part, (double *)rm_ptr(k->out[0]) + sp->at, c.s);
    rmk_scratch_free(&c, part);
    return rmk_leave(&c, e);
}

/* ---- the list kernels (ADAMW_LIST, SGD_LIST): the optimizer's step over all parameters of
 * a device and dtype in a few launches (optim.cu) ----------------------------------------- */

/* t[i]: tensor i of l (its p, g and state; `what` names a bad list). A list is the
 * optimizer's parameters of p0's dtype (f32, f64) and device, each with its gradient and
 * state of its size, contiguous: checked, since the tensors come from params, not from the
 * operands the dispatcher checked. Empty tensors are not looked at (nothing is read). */
static remat_status list_tensors(const rm_optim_list *l, bool adamw, const remat_tensor *p0,
                                 rmk_optim_tensor *t, const char *what) {
    for (int i = 0; i < l->n; i++) {
        const remat_tensor *p = l->p[i], *g = l->g[i];
        const remat_tensor *s0 = l->s0 ? l->s0[i] : NULL, *s1 = l->s1 ? l->s1[i] : NULL;
        const int64_t n = remat_numel(p);
        const bool mom = adamw || l->sgd[i].momentum != 0;
        t[i] = (rmk_optim_tensor){NULL, NULL, NULL, NULL, 0};
        if (n == 0) continue; /* nothing read: it may have no data */
        const remat_tensor *ops[4] = {p, g, s0, s1};
        const bool need[4] = {true, true, mom, adamw};
        for (int j = 0; j < 4; j++) {
            const remat_tensor *x = ops[j];
            if (!need[j]) continue;
            if (!x) return rm_err(REMAT_EINVAL, "%s: tensor %d lacks an operand", what, i);
            if (x->dtype != p0->dtype || (x->dtype != REMAT_F32 && x->dtype != REMAT_F64))
                return rm_err(REMAT_EDTYPE, "%s: tensor %d: dtype %s in a list of %s", what, i,
                              remat_dtype_name(x->dtype), remat_dtype_name(p0->dtype));
            if (remat_numel(x) != n || !remat_is_contiguous(x))
                return rm_err(REMAT_EINVAL,
                              "%s: tensor %d: operands of other sizes or not contiguous", what, i);
            if (x->storage->device.type != p0->storage->device.type ||
                x->storage->device.index != p0->storage->device.index)
                return rm_err(REMAT_EDEVICE, "%s: tensor %d on another device", what, i);
        }
        t[i] = (rmk_optim_tensor){rm_ptr(p), rm_ptr(g), mom ? rm_ptr(s0) : NULL,
                                  adamw ? rm_ptr(s1) : NULL, n};
    }
    return REMAT_OK;
}

static remat_status cuda_optim_list(const rm_kargs *k, bool adamw) {
    const char *what = adamw ? "cuda adamw kernel, many tensors" : "cuda sgd kernel, many tensors";
    const rm_optim_list *l = k->params;
    if (l->n <= 0) return REMAT_OK;
    const size_t cnt = (size_t)l->n;
    rmk_optim_tensor *t = malloc(sizeof *t * cnt);
    rm_adamw_factors *f = adamw ? malloc(sizeof *f * cnt) : NULL;
    if (!t || (adamw && !f)) {
        free(t), free(f);
        return rm_err(REMAT_ENOMEM, "%s: out of memory", what);
    }
    const remat_tensor *p0 = k->out[0]; /* the lookup's operand: a parameter with elements */
    remat_status rc = list_tensors(l, adamw, p0, t, what);
    for (int i = 0; !rc && adamw && i < l->n; i++) rm_adamw_factors_make(&l->adamw[i], &f[i]);
    rmk_call c;
    if (!rc && !(rc = rmk_enter(&c, p0, what))) {
        const int dt = rmk_dt(p0);
        rc = rmk_leave(&c, adamw ? rmk_adamw_list(dt, t, l->n, l->adamw, f, c.s)
                                 : rmk_sgd_list(dt, t, l->n, l->sgd, c.s));
    }
    free(t), free(f);
    return rc;
}

static remat_status cuda_adamw_list(const rm_kargs *k) { return cuda_optim_list(k, true); }
static remat_status cuda_sgd_list(const rm_kargs *k) { return cuda_optim_list(k, false); }

void rm_cuda_register_optim(int type) {
    static const rmk_row rows[] = {
        {RM_K_ADAMW, cuda_adamw},
        {RM_K_SGD, cuda_sgd},
        {RM_K_SUM_SQUARES, cuda_sum_squares},
        {RM_K_ADAMW_LIST, cuda_adamw_list},
        {RM_K_SGD_LIST, cuda_sgd_list},
    };
    RMK_REGISTER_ROWS(type, rows);
}
