/* src/backends/cpu/table.c — the cpu row of the kernel table: for each
 * kernel, its f32 and f64 functions (other dtypes have none). */
#include "cpu.h"

#define F32_F64(name) {[REMAT_F32] = rm_cpu_##name##_f32, [REMAT_F64] = rm_cpu_##name##_f64}

const rm_kernel_fn rm_cpu_kernels[RM_K_COUNT][RM_N_DTYPES] = {
    [RM_K_UNARY] = F32_F64(unary),
    [RM_K_UNARY_BWD] = F32_F64(unary_bwd),
    [RM_K_RELU_MASK] = F32_F64(relu_mask),
    [RM_K_RELU_MASK_BWD] = F32_F64(relu_mask_bwd),
    [RM_K_ELEMENTWISE] = {[REMAT_F32] = rm_cpu_elementwise, [REMAT_F64] = rm_cpu_elementwise},
};
