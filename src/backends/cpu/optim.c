/* src/backends/cpu/optim.c — the cpu kernels of the optimizer family
 * (src/core/kernels/optim.h): the host loops of src/core/optim_loops.h on the operands'
 * buffers, the same bits as the public flat-buffer functions (remat_adamw_update_f32 and
 * friends). */
#include "core/optim_loops.h"
#include "cpu.h"

remat_status rm_cpu_adamw(const rm_kargs *k) {
    rm_adamw_factors f;
    rm_adamw_factors_make(k->params, &f);
    const int64_t n = remat_numel(k->out[0]);
    if (k->out[0]->dtype == REMAT_F64)
        rm_adamw_loop_f64(rm_ptr(k->out[0]), rm_ptr(k->in[0]), rm_ptr(k->out[1]), rm_ptr(k->out[2]),
                          n, &f);
    else
        rm_adamw_loop_f32(rm_ptr(k->out[0]), rm_ptr(k->in[0]), rm_ptr(k->out[1]), rm_ptr(k->out[2]),
                          n, &f);
    return REMAT_OK;
}

remat_status rm_cpu_sgd(const rm_kargs *k) {
    const int64_t n = remat_numel(k->out[0]);
    void *buf = k->out[1] ? rm_ptr(k->out[1]) : NULL;
    if (k->out[0]->dtype == REMAT_F64)
        rm_sgd_loop_f64(rm_ptr(k->out[0]), rm_ptr(k->in[0]), buf, n, k->params);
    else rm_sgd_loop_f32(rm_ptr(k->out[0]), rm_ptr(k->in[0]), buf, n, k->params);
    return REMAT_OK;
}

remat_status rm_cpu_sum_squares(const rm_kargs *k) {
    const rm_sumsq_kparams *p = k->params;
    const remat_tensor *x = k->in[0];
    double *s = rm_ptr(k->out[0]);
    s[p->at] = rm_sum_squares_loop(rm_ptr(x), x->dtype == REMAT_F64, remat_numel(x));
    return REMAT_OK;
}
