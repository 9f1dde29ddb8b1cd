/* src/backends/cuda/elementwise_kernels.c — the cuda kernels (rm_kernel_fn)
 * of the elementwise family: unpack rm_kargs, launch elementwise.cu's
 * kernels on the operands' device. Operand conventions are the ABI's
 * (src/core/kernels/elementwise.h); semantics are the cpu kernels'. */
#include "elementwise.h"
#include "gemm.h"
#include "kwrap.h"

static remat_status cuda_unary(const rm_kargs *k) {
    const rm_unary_params *p = k->params;
    int rc = rmk_one_dtype(k, k->out[0]->dtype, "cuda unary kernel");
    if (rc) return rc;
    RMK_ENTER(c, k->out[0], "cuda unary kernel");
    return rmk_leave(&c, rmk_unary(rmk_dt(k->out[0]), (int)p->op, p->p, rm_ptr(k->in[0]),
                                   rm_ptr(k->out[0]), remat_numel(k->out[0]), c.s));
}

static remat_status cuda_unary_bwd(const rm_kargs *k) {
    const rm_unary_params *p = k->params;
    int rc = rmk_one_dtype(k, k->out[0]->dtype, "cuda unary backward kernel");
    if (rc) return rc;
    RMK_ENTER(c, k->out[0], "cuda unary backward kernel");
    return rmk_leave(&c, rmk_unary_bwd(rmk_dt(k->out[0]), (int)p->op, p->p, rm_ptr(k->in[0]),
                                       k->in[1] ? rm_ptr(k->in[1]) : NULL, rm_ptr(k->out[0]),
                                       remat_numel(k->out[0]), c.s));
}

static remat_status cuda_relu_mask(const rm_kargs *k) {
    RMK_ENTER(c, k->in[0], "cuda relu mask kernel");
    return rmk_leave(&c, rmk_relu_mask(rmk_dt(k->in[0]), rm_ptr(k->in[0]), rm_ptr(k->out[0]),
                                       remat_numel(k->in[0]), c.s));
}

static remat_status cuda_relu_mask_bwd(const rm_kargs *k) {
    RMK_ENTER(c, k->out[0], "cuda relu mask backward kernel");
    return rmk_leave(&c, rmk_relu_mask_bwd(rmk_dt(k->out[0]), rm_ptr(k->in[0]), rm_ptr(k->in[1]),
                                           rm_ptr(k->out[0]), remat_numel(k->out[0]), c.s));
}

/* remat_bias_gelu (cpu: src/backends/cpu/bias_gelu.c). in: x, b; out: y. */
static remat_status cuda_bias_gelu(const rm_kargs *k) {
    const rm_unary_params *p = k->params;
    remat_tensor *x = k->in[0], *b = k->in[1];
    int64_t n = remat_numel(b), rows = n ? remat_numel(x) / n : 0;
    RMK_ENTER(c, x, "cuda bias gelu kernel");
    return rmk_leave(&c, rmk_bias_gelu(rmk_dt(x), rmk_dt(b), (int)p->op, rm_ptr(x), rm_ptr(b),
                                       rm_ptr(k->out[0]), rows, n, c.s));
}

/* in: g, x, b; out: dx, db (b's dtype; NULL: not wanted): dx, then db = the column sums of
 * dx as linear's bias gradient (gemm.cu's deterministic sums). */
static remat_status cuda_bias_gelu_bwd(const rm_kargs *k) {
    const rm_unary_params *p = k->params;
    remat_tensor *g = k->in[0], *x = k->in[1], *b = k->in[2], *dx = k->out[0], *db = k->out[1];
    int64_t n = remat_numel(b), rows = n ? remat_numel(x) / n : 0;
    RMK_ENTER(c, x, "cuda bias gelu backward kernel");
    cudaError_t e = rmk_bias_gelu_bwd(rmk_dt(x), rmk_dt(b), (int)p->op, rm_ptr(g), rm_ptr(x),
                                      rm_ptr(b), rm_ptr(dx), rows, n, c.s);
    if (e != cudaSuccess || !db || n == 0) return rmk_leave(&c, e);
    int64_t chunk = rm_cuda_colsum_chunk(rows), nch = (rows + chunk - 1) / chunk;
    double *part = rmk_scratch(&c, (size_t)(nch * n) * sizeof(double));
    if (!part) return rmk_leave_rc(&c, rm_last_status() ? rm_last_status() : REMAT_ENOMEM);
    if (x->dtype == REMAT_F32) e = rm_cuda_colsum_f32(rm_ptr(dx), rm_ptr(db), rows, n, part, c.s);
    else if (x->dtype == REMAT_F64)
        e = rm_cuda_colsum_f64(rm_ptr(dx), rm_ptr(db), rows, n, part, c.s);
    else if (db->dtype == REMAT_BF16)
        e = rm_cuda_colsum_bf16(rm_ptr(dx), rm_ptr(db), rows, n, part, c.s);
    else e = rm_cuda_colsum_bf16_f32(rm_ptr(dx), rm_ptr(db), rows, n, part, c.s);
    rmk_scratch_free(&c, part); /* stream-ordered: reusable by later work */
    return rmk_leave(&c, e);
}

/* Operands each engine op reads (cpu elementwise.c's k_arity). */
static int ew_arity(rm_ew_op op) {
    switch (op) {
    case RM_EW_FILL: return 0;
    case RM_EW_SCALE:
    case RM_EW_RELU: return 1;
    case RM_EW_DIV_GB:
    case RM_EW_POW_GA:
    case RM_EW_POW_GB: return 3;
    default: return 2;
    }
}

/* y = f(a, b, c; p): a, b, c broadcast to y's shape, y any strided view. */
static remat_status cuda_elementwise(const rm_kargs *k) {
    const rm_ew_params *p = k->params;
    remat_tensor *y = k->out[0];
    int n_in = ew_arity(p->op);
    if (remat_numel(y) == 0) return REMAT_OK;
    for (int i = 0; i < n_in; i++) /* one dtype (the engine's ABI) */
        if (k->in[i]->dtype != y->dtype)
            return rm_err(REMAT_EDTYPE,
                          "cuda elementwise kernel: operands of dtypes %s and %s (it takes one "
                          "dtype)",
                          remat_dtype_name(y->dtype), remat_dtype_name(k->in[i]->dtype));
    rmk_plan pl;
    rmk_plan_ew(&pl, y, k->in, n_in);
    RMK_ENTER(c, y, "cuda elementwise kernel");
    const void *a = n_in > 0 ? rm_ptr(k->in[0]) : NULL, *b = n_in > 1 ? rm_ptr(k->in[1]) : NULL,
               *cc = n_in > 2 ? rm_ptr(k->in[2]) : NULL;
    return rmk_leave(&c,
                     rmk_elementwise(rmk_dt(y), (int)p->op, p->p, &pl, rm_ptr(y), a, b, cc, c.s));
}

void rm_cuda_register_elementwise(int type) {
    static const rmk_row rows[] = {
        {RM_K_UNARY, cuda_unary},
        {RM_K_UNARY_BWD, cuda_unary_bwd},
        {RM_K_RELU_MASK, cuda_relu_mask},
        {RM_K_RELU_MASK_BWD, cuda_relu_mask_bwd},
        {RM_K_ELEMENTWISE, cuda_elementwise},
        {RM_K_BIAS_GELU, cuda_bias_gelu},
        {RM_K_BIAS_GELU_BWD, cuda_bias_gelu_bwd},
    };
    RMK_REGISTER_ROWS(type, rows);
    /* bf16 too (autocast's gelu, silu, SwiGLU products, gradient sums): loaded to f32,
     * computed as f32, each result rounded once (elementwise.cu's rmk_bf16 kernels) */
    for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++)
        rm_kernel_register(rows[i].id, type, REMAT_BF16, rows[i].fn);
}
