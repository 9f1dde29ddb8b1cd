/* src/backends/cuda/shape_kernels.c — the cuda kernel of the shape family:
 * COPY (src/dispatch/kernels/shape.h), x with any strides into contiguous y
 * of the same numel, bit for bit, every dtype (elementwise.cu's strided
 * copy; one cudaMemcpyAsync when x is contiguous too). */
#include "elementwise.h"
#include "kwrap.h"

static int cuda_copy(const rm_kargs *k) {
    const remat_tensor *x = k->in[0];
    remat_tensor *y = k->out[0];
    if (remat_numel(x) == 0) return REMAT_OK;
    /* y viewed with x's shape: row-major order is the same */
    int64_t st[RMK_MAX_OPS][RMK_MAX_DIMS];
    rmk_contig_strides(x->ndim, x->shape, st[0]);
    for (int d = 0; d < x->ndim; d++) st[1][d] = x->strides[d];
    rmk_plan pl;
    rmk_plan_build(&pl, x->ndim, x->shape, 2, (const int64_t(*)[RMK_MAX_DIMS])st);
    rmk_call c;
    int rc = rmk_enter(&c, y, "cuda copy kernel");
    if (rc) return rc;
    return rmk_leave(&c, rmk_copy_strided(remat_dtype_size(x->dtype), &pl, rm_ptr(y), rm_ptr(x), c.s));
}

void rm_cuda_register_shape(int type) {
    for (int dt = REMAT_F32; dt <= REMAT_BF16; dt++) rm_kernel_register(RM_K_COPY, type, dt, cuda_copy);
}
