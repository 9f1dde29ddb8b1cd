/* src/backends/cuda/optim_kernels.c — the cuda kernels (rm_kernel_fn) of the optimizer
 * family (src/core/kernels/optim.h): unpack rm_kargs, launch optim.cu's kernels on the
 * operands' device. The AdamW factors are formed on the host by the cpu kernels' code
 * (rm_adamw_factors_make), so both devices start from the same scalars. */
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

void rm_cuda_register_optim(int type) {
    static const rmk_row rows[] = {
        {RM_K_ADAMW, cuda_adamw},
        {RM_K_SGD, cuda_sgd},
        {RM_K_SUM_SQUARES, cuda_sum_squares},
    };
    RMK_REGISTER_ROWS(type, rows);
}
