/* src/backends/cuda/reduce_kernels.c — the cuda kernels (rm_kernel_fn) of
 * sum, mean and max over dims (src/core/kernels/reduce.h). As the cpu
 * (src/backends/cpu/reduce.c), a sum over several separate groups of dims
 * runs one (O, R, I) pass per group, innermost first, through scratch; the
 * mean divides in its last pass. sum's backward is the elementwise engine
 * (g * scale broadcast over the reduced dims). */
#include "elementwise.h"
#include "kwrap.h"
#include "reduce.h"

/* y = sum of x over the mask's dims (mean: / count); x, y contiguous. */
static remat_status sum_passes(rmk_call *c, const remat_tensor *x, const rm_reduce_params *p,
                               remat_tensor *y) {
    const int dt = rmk_dt(x);
    const size_t es = remat_dtype_size(x->dtype);
    int64_t n_in = remat_numel(x), n_out = remat_numel(y), count = 1;
    for (int d = 0; d < x->ndim; d++)
        if (p->mask[d]) count *= x->shape[d];
    if (n_out == 0) return REMAT_OK;
    if (n_in == 0) { /* an empty sum: 0; the mean then 0 / 0 */
        rmk_plan pl;
        rmk_plan_flat(&pl, n_out, 1);
        return rm_cuda_check(rmk_elementwise(dt, RM_EW_FILL, p->mean ? NAN : 0.0, &pl, rm_ptr(y),
                                             NULL, NULL, NULL, c->s),
                             c->what);
    }
    rm_groups g;
    rm_groups_make(x->ndim, x->shape, p->mask, &g);
    int n_red = rm_groups_nred(&g);
    if (n_red == 0) /* only size-1 dims reduced: a copy (count 1) */
        return rm_cuda_check(cudaMemcpyAsync(rm_ptr(y), rm_ptr(x), (size_t)n_out * es,
                                             cudaMemcpyDeviceToDevice, c->s),
                             c->what);
    const void *src = rm_ptr(x);
    void *held[2] = {NULL, NULL}; /* intermediate results, alternating */
    int which = 0, rc = REMAT_OK;
    int64_t O, R, I;
    while (!rc && rm_groups_next_pass(&g, &O, &R, &I)) {
        bool last = --n_red == 0;
        void *dst = rm_ptr(y);
        if (!last) {
            rmk_scratch_free(c, held[which]);
            held[which] = dst = rmk_scratch(c, (size_t)(O * I) * es);
            if (!dst) {
                rc = rm_last_status();
                break;
            }
        }
        size_t wsb = rmk_sum_ori_ws(O, R, I);
        void *ws = wsb ? rmk_scratch(c, wsb) : NULL;
        if (wsb && !ws) {
            rc = rm_last_status();
            break;
        }
        double div = last && p->mean ? (double)count : 1.0;
        rc = rm_cuda_check(rmk_sum_ori(dt, src, O, R, I, div, dst, ws, c->s), c->what);
        rmk_scratch_free(c, ws); /* stream-ordered: safe right after the enqueue */
        src = dst;
        which ^= 1;
    }
    rmk_scratch_free(c, held[0]);
    rmk_scratch_free(c, held[1]);
    return rc;
}

static remat_status cuda_sum(const rm_kargs *k) {
    RMK_ENTER(c, k->in[0], "cuda sum kernel");
    return rmk_leave_rc(&c, sum_passes(&c, k->in[0], k->params, k->out[0]));
}

/* dx (input shape, contiguous) = g * scale, g read through its keepdim
 * strides with 0 along the reduced dims. */
static remat_status cuda_sum_bwd(const rm_kargs *k) {
    const rm_reduce_params *p = k->params;
    remat_tensor *dx = k->out[0];
    if (remat_numel(dx) == 0) return REMAT_OK;
    int64_t ks[RMK_MAX_DIMS], st[RMK_MAX_OPS][RMK_MAX_DIMS];
    for (int d = 0; d < dx->ndim; d++) ks[d] = p->mask[d] ? 1 : dx->shape[d];
    rmk_contig_strides(dx->ndim, dx->shape, st[0]);
    rmk_contig_strides(dx->ndim, ks, st[1]);
    for (int d = 0; d < dx->ndim; d++)
        if (p->mask[d]) st[1][d] = 0;
    rmk_plan pl;
    rmk_plan_build(&pl, dx->ndim, dx->shape, 2, (const int64_t(*)[RMK_MAX_DIMS])st);
    RMK_ENTER(c, dx, "cuda sum backward kernel");
    return rmk_leave(&c, rmk_elementwise(rmk_dt(dx), RM_EW_SCALE, p->scale, &pl, rm_ptr(dx),
                                         rm_ptr(k->in[0]), NULL, NULL, c.s));
}

static remat_status cuda_max(const rm_kargs *k) {
    const rm_dim_params *p = k->params;
    const remat_tensor *x = k->in[0];
    int64_t O, R, I;
    rm_outer_reduce_inner(x->ndim, x->shape, p->dim, &O, &R, &I);
    RMK_ENTER(c, x, "cuda max kernel");
    return rmk_leave(
        &c, rmk_max_ori(rmk_dt(x), rm_ptr(x), O, R, I, rm_ptr(k->out[0]), rm_ptr(k->out[1]), c.s));
}

static remat_status cuda_max_bwd(const rm_kargs *k) {
    const rm_dim_params *p = k->params;
    remat_tensor *dx = k->out[0];
    int64_t O, R, I;
    rm_outer_reduce_inner(dx->ndim, dx->shape, p->dim, &O, &R, &I);
    RMK_ENTER(c, dx, "cuda max backward kernel");
    return rmk_leave(&c, rmk_max_bwd_ori(rmk_dt(dx), rm_ptr(k->in[0]), rm_ptr(k->in[1]), O, R, I,
                                         rm_ptr(dx), c.s));
}

void rm_cuda_register_reduce(int type) {
    static const rmk_row rows[] = {
        {RM_K_SUM, cuda_sum},
        {RM_K_SUM_BWD, cuda_sum_bwd},
        {RM_K_MAX, cuda_max},
        {RM_K_MAX_BWD, cuda_max_bwd},
    };
    RMK_REGISTER_ROWS(type, rows);
}
