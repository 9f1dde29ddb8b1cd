/* src/backends/cuda/nn_kernels.c — the cuda kernels (rm_kernel_fn) of
 * softmax, log_softmax, layer_norm, rms_norm and rope (src/core/kernels/nn.h),
 * launching nn.cu's, layer_norm.cu's, rms_norm.cu's and rope.cu's kernels. layer_norm
 * and add_layer_norm write a bf16 y for an f32 x, and layer_norm's backward reads a bf16
 * g for one (RM_KF_BF16_Y, device.c: remat_layer_norm_to's cast folded in). dropout
 * (Philox) is rng.c's. */
#include "elementwise.h"
#include "kwrap.h"
#include "nn.h"

static remat_status cuda_softmax(const rm_kargs *k) {
    const rm_softmax_params *p = k->params;
    const remat_tensor *x = k->in[0];
    int64_t O, R, I;
    rm_outer_reduce_inner(x->ndim, x->shape, p->dim, &O, &R, &I);
    RMK_ENTER(c, x, "cuda softmax kernel");
    return rmk_leave(&c,
                     rmk_softmax(rmk_dt(x), rm_ptr(x), rm_ptr(k->out[0]), O, R, I, p->log, c.s));
}

static remat_status cuda_softmax_bwd(const rm_kargs *k) {
    const rm_softmax_params *p = k->params;
    const remat_tensor *y = k->in[1];
    int64_t O, R, I;
    rm_outer_reduce_inner(y->ndim, y->shape, p->dim, &O, &R, &I);
    RMK_ENTER(c, y, "cuda softmax backward kernel");
    return rmk_leave(&c, rmk_softmax_bwd(rmk_dt(y), rm_ptr(k->in[0]), rm_ptr(y), rm_ptr(k->out[0]),
                                         O, R, I, p->log, c.s));
}

/* x's shape as (N, C): C the product of the last n_norm dims. */
static void ln_rows(const remat_tensor *x, int n_norm, int64_t *N, int64_t *C) {
    int lead = x->ndim - n_norm;
    *N = rm_shape_numel(lead, x->shape);
    *C = rm_shape_numel(n_norm, x->shape + lead);
}

static void *ptr_or_null(const remat_tensor *t) { return t ? rm_ptr(t) : NULL; }

/* *ydt: the launcher's dtype code of y (layer_norm's output, or its gradient): x's, or bf16
 * next to an f32 x (remat_layer_norm_to, RM_KF_BF16_Y); else REMAT_EDTYPE naming what. */
static remat_status ln_y_dt(const remat_tensor *x, const remat_tensor *y, const char *what,
                            int *ydt) {
    *ydt = rmk_dt(y);
    if (y->dtype == x->dtype || (y->dtype == REMAT_BF16 && x->dtype == REMAT_F32)) return REMAT_OK;
    return rm_err(REMAT_EDTYPE, "%s: a %s y (or gradient) with a %s x", what,
                  remat_dtype_name(y->dtype), remat_dtype_name(x->dtype));
}

static remat_status cuda_layer_norm(const rm_kargs *k) {
    const rm_layer_norm_params *p = k->params;
    const char *what = "cuda layer_norm kernel";
    int64_t N, C;
    int ydt;
    int rc = ln_y_dt(k->in[0], k->out[0], what, &ydt);
    if (rc) return rc;
    ln_rows(k->in[0], p->n_norm, &N, &C);
    RMK_ENTER(c, k->in[0], what);
    return rmk_leave(&c,
                     rmk_layer_norm(rmk_dt(k->in[0]), ydt, rm_ptr(k->in[0]), ptr_or_null(k->in[1]),
                                    ptr_or_null(k->in[2]), rm_ptr(k->out[0]), rm_ptr(k->out[1]),
                                    rm_ptr(k->out[2]), N, C, p->eps, c.s));
}

/* in: g (x's dtype, or bf16 for an f32 x), x, w, mean, rstd, gres (x's dtype, or NULL);
 * out: dx, dw, db (x's dtype; each may be NULL) */
static remat_status cuda_layer_norm_bwd(const rm_kargs *k) {
    const rm_layer_norm_params *p = k->params;
    const char *what = "cuda layer_norm backward kernel";
    const remat_tensor *x = k->in[1];
    remat_tensor *dx = k->out[0], *dw = k->out[1], *db = k->out[2];
    int gdt;
    int rc = ln_y_dt(x, k->in[0], what, &gdt);
    if (rc) return rc;
    int64_t N, C;
    ln_rows(x, p->n_norm, &N, &C);
    RMK_ENTER(c, x, what);
    void *ws = NULL;
    if (dw || db) {
        ws = rmk_scratch(&c, rmk_layer_norm_bwd_ws(rmk_dt(x), N, C));
        if (!ws) return rmk_leave_rc(&c, rm_last_status());
    }
    cudaError_t e = rmk_layer_norm_bwd(
        rmk_dt(x), gdt, rm_ptr(k->in[0]), rm_ptr(x), ptr_or_null(k->in[2]), rm_ptr(k->in[3]),
        rm_ptr(k->in[4]), ptr_or_null(dx), ptr_or_null(dw), ptr_or_null(db), N, C, ws, c.s);
    rmk_scratch_free(&c, ws);
    if (e == cudaSuccess && dx && k->in[5]) { /* dx += gres (add_layer_norm's sum gradient) */
        rmk_plan pl;
        rmk_plan_flat(&pl, N * C, 3);
        e = rmk_elementwise(rmk_dt(x), RM_EW_ADD, 0.0, &pl, rm_ptr(dx), rm_ptr(dx),
                            rm_ptr(k->in[5]), NULL, c.s);
    }
    return rmk_leave(&c, e);
}

/* The bf16 row of the backward: a bf16 g of an f32 x (remat_layer_norm_to's y) read by the
 * kernel above; a bf16 x's through f32, as every bf16 kernel without one of its own. */
static remat_status cuda_layer_norm_bwd_bf16(const rm_kargs *k) {
    if (k->in[1]->dtype == REMAT_F32) return cuda_layer_norm_bwd(k);
    return rm_cuda_bf16_via_f32(RM_K_LAYER_NORM_BWD, k);
}

/* remat_add_layer_norm: sum = x + r and layer_norm of sum, one kernel (layer_norm.cu).
 * in: x, r (x's dtype, or bf16 for an f32 x: read uncast, autocast's residual branch), w,
 * b; out: sum, y (x's dtype, or bf16 for an f32 x: remat_add_layer_norm_to), mean, rstd. */
static remat_status cuda_add_layer_norm(const rm_kargs *k) {
    const rm_layer_norm_params *p = k->params;
    const char *what = "cuda add_layer_norm kernel";
    remat_tensor *x = k->in[0], *r = k->in[1];
    if (r->dtype != x->dtype && !(r->dtype == REMAT_BF16 && x->dtype == REMAT_F32))
        return rm_err(REMAT_EDTYPE, "%s: x %s with r %s (x's dtype, or bf16 for an f32 x)", what,
                      remat_dtype_name(x->dtype), remat_dtype_name(r->dtype));
    int ydt;
    int rc = ln_y_dt(x, k->out[1], what, &ydt);
    if (rc) return rc;
    int64_t N, C;
    ln_rows(x, p->n_norm, &N, &C);
    RMK_ENTER(c, x, what);
    return rmk_leave(
        &c, rmk_add_layer_norm(rmk_dt(x), rmk_dt(r), ydt, rm_ptr(x), rm_ptr(r), rm_ptr(k->out[0]),
                               ptr_or_null(k->in[2]), ptr_or_null(k->in[3]), rm_ptr(k->out[1]),
                               rm_ptr(k->out[2]), rm_ptr(k->out[3]), N, C, p->eps, c.s));
}

static remat_status cuda_rms_norm(const rm_kargs *k) {
    const rm_layer_norm_params *p = k->params;
    int64_t N, C;
    ln_rows(k->in[0], p->n_norm, &N, &C);
    RMK_ENTER(c, k->in[0], "cuda rms_norm kernel");
    return rmk_leave(&c, rmk_rms_norm(rmk_dt(k->in[0]), rm_ptr(k->in[0]), ptr_or_null(k->in[1]),
                                      rm_ptr(k->out[0]), rm_ptr(k->out[1]), N, C, p->eps, c.s));
}

static remat_status cuda_rms_norm_bwd(const rm_kargs *k) {
    const rm_layer_norm_params *p = k->params;
    const remat_tensor *x = k->in[1];
    remat_tensor *dx = k->out[0], *dw = k->out[1];
    int64_t N, C;
    ln_rows(x, p->n_norm, &N, &C);
    RMK_ENTER(c, x, "cuda rms_norm backward kernel");
    void *ws = NULL;
    if (dw) {
        ws = rmk_scratch(&c, rmk_rms_norm_bwd_ws(rmk_dt(x), N, C));
        if (!ws) return rmk_leave_rc(&c, rm_last_status());
    }
    cudaError_t e =
        rmk_rms_norm_bwd(rmk_dt(x), rm_ptr(k->in[0]), rm_ptr(x), ptr_or_null(k->in[2]),
                         rm_ptr(k->in[3]), ptr_or_null(dx), ptr_or_null(dw), N, C, ws, c.s);
    rmk_scratch_free(&c, ws);
    return rmk_leave(&c, e);
}

static remat_status cuda_rope(const rm_kargs *k) {
    const rm_rope_params *p = k->params;
    const remat_tensor *x = k->in[0];
    const int n = x->ndim;
    const int64_t Tn = x->shape[n - 2], D = x->shape[n - 1];
    const int64_t R = Tn * D > 0 ? remat_numel(x) / (Tn * D) : 0;
    if (k->out[0]->dtype != x->dtype)
        return rm_err(REMAT_EDTYPE, "cuda rope kernel: a %s result of %s x",
                      remat_dtype_name(k->out[0]->dtype), remat_dtype_name(x->dtype));
    RMK_ENTER(c, x, "cuda rope kernel");
    return rmk_leave(&c, rmk_rope(rmk_dt(x), rm_ptr(x), k->in[1] ? rm_ptr(k->in[1]) : NULL,
                                  rm_ptr(k->out[0]), R, Tn, D / 2, p->theta, p->inverse, c.s));
}

void rm_cuda_register_nn(int type) {
    static const rmk_row rows[] = {
        {RM_K_SOFTMAX, cuda_softmax},
        {RM_K_SOFTMAX_BWD, cuda_softmax_bwd},
        {RM_K_LAYER_NORM, cuda_layer_norm},
        {RM_K_LAYER_NORM_BWD, cuda_layer_norm_bwd},
        {RM_K_ADD_LAYER_NORM, cuda_add_layer_norm},
        {RM_K_RMS_NORM, cuda_rms_norm},
        {RM_K_RMS_NORM_BWD, cuda_rms_norm_bwd},
        {RM_K_ROPE, cuda_rope},
    };
    RMK_REGISTER_ROWS(type, rows);
    rm_kernel_register(RM_K_ROPE, type, REMAT_BF16, cuda_rope); /* f32 arithmetic (rope.cu) */
    rm_kernel_register(RM_K_LAYER_NORM_BWD, type, REMAT_BF16, cuda_layer_norm_bwd_bf16);
}
