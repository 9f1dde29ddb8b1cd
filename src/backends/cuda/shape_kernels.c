/* src/backends/cuda/shape_kernels.c — the cuda kernels (rm_kernel_fn) of
 * the shape family (src/core/kernels/shape.h):
 *   COPY       x (any strides) into contiguous y of the same numel, bit for
 *              bit, every dtype (elementwise.cu's strided copy; one
 *              cudaMemcpyAsync when x is contiguous too);
 *   SELECT     y = cond ? A : B (masked_fill, where; select.cu);
 *   ZERO       y := 0 through y's strides, every dtype;
 *   COPY_INTO  y := x broadcast and converted to y's dtype (remat_copy_):
 *              bit for bit when the dtypes agree, else the cpu's conversions.
 * Semantics are the cpu kernels' (src/backends/cpu/copy.c, select.c and
 * rm_copy_into). */
#include "elementwise.h"
#include "kwrap.h"
#include "select.h"

static remat_status cuda_copy(const rm_kargs *k) {
    const remat_tensor *x = k->in[0];
    remat_tensor *y = k->out[0];
    if (remat_numel(x) == 0) return REMAT_OK;
    /* y viewed with x's shape: row-major order is the same */
    int64_t st[RMK_MAX_OPS][RMK_MAX_DIMS];
    rmk_contig_strides(x->ndim, x->shape, st[0]);
    for (int d = 0; d < x->ndim; d++) st[1][d] = x->strides[d];
    rmk_plan pl;
    rmk_plan_build(&pl, x->ndim, x->shape, 2, (const int64_t(*)[RMK_MAX_DIMS])st);
    RMK_ENTER(c, y, "cuda copy kernel");
    return rmk_leave(&c,
                     rmk_copy_strided(remat_dtype_size(x->dtype), &pl, rm_ptr(y), rm_ptr(x), c.s));
}

static remat_status cuda_select(const rm_kargs *k) {
    const rm_select_params *p = k->params;
    remat_tensor *y = k->out[0], *cond = k->in[p->cond];
    remat_tensor *a = p->a >= 0 ? k->in[p->a] : NULL, *b = p->b >= 0 ? k->in[p->b] : NULL;
    if (remat_numel(y) == 0) return REMAT_OK;
    /* plan operands: y, cond, A, B (a scalar A / B: stride 0, never read) */
    remat_tensor *x[3] = {cond, a ? a : cond, b ? b : cond};
    rmk_plan pl;
    rmk_plan_ew(&pl, y, x, 3);
    RMK_ENTER(c, y, "cuda select kernel");
    return rmk_leave(&c, rmk_select((int)y->dtype, (int)cond->dtype, &pl, rm_ptr(y), rm_ptr(cond),
                                    a ? rm_ptr(a) : NULL, p->va, b ? rm_ptr(b) : NULL, p->vb, c.s));
}

static remat_status cuda_zero(const rm_kargs *k) {
    remat_tensor *y = k->out[0];
    if (remat_numel(y) == 0) return REMAT_OK;
    rmk_plan pl;
    rmk_plan_ew(&pl, y, NULL, 0);
    RMK_ENTER(c, y, "cuda zero kernel");
    return rmk_leave(&c, rmk_zero(remat_dtype_size(y->dtype), &pl, rm_ptr(y), c.s));
}

static remat_status cuda_copy_into(const rm_kargs *k) {
    remat_tensor *y = k->out[0], *x = k->in[1];
    int64_t n = remat_numel(y);
    if (n == 0) return REMAT_OK;
    rmk_plan pl;
    if (x->dtype == y->dtype && remat_is_contiguous(y) && remat_is_contiguous(x) &&
        remat_numel(x) == n)
        rmk_plan_flat(&pl, n, 2); /* the same numel view, whatever the shapes (as the cpu) */
    else rmk_plan_ew(&pl, y, &x, 1);
    RMK_ENTER(c, y, "cuda copy kernel");
    cudaError_t e =
        x->dtype == y->dtype
            ? rmk_copy_strided(remat_dtype_size(y->dtype), &pl, rm_ptr(y), rm_ptr(x), c.s)
            : rmk_convert((int)y->dtype, (int)x->dtype, &pl, rm_ptr(y), rm_ptr(x), c.s);
    return rmk_leave(&c, e);
}

void rm_cuda_register_shape(int type) {
    for (int dt = REMAT_F32; dt <= REMAT_BF16; dt++) {
        rm_kernel_register(RM_K_COPY, type, dt, cuda_copy);
        rm_kernel_register(RM_K_ZERO, type, dt, cuda_zero);
        rm_kernel_register(RM_K_COPY_INTO, type, dt, cuda_copy_into);
    }
    rm_kernel_register(RM_K_SELECT, type, REMAT_F32, cuda_select);
    rm_kernel_register(RM_K_SELECT, type, REMAT_F64, cuda_select);
}
