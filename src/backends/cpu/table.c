/* src/backends/cpu/table.c — the cpu row of the kernel table: each
 * family's rows (RM_CPU_KERNELS_<FAMILY>, in the family's header). */
#include "cpu.h"

const rm_kernel_fn rm_cpu_kernels[RM_K_COUNT][RM_N_DTYPES] = {
    RM_CPU_KERNELS_ELEMENTWISE
    RM_CPU_KERNELS_REDUCE
    RM_CPU_KERNELS_NN
    RM_CPU_KERNELS_MATMUL
    RM_CPU_KERNELS_SHAPE
};
