/* src/backends/cpu/table.c — the cpu row of the kernel table, from the
 * list of cpu kernels (RM_CPU_KERNELS, cpu.h). */
#include "cpu.h"

const rm_kernel_fn rm_cpu_kernels[RM_K_COUNT][RM_N_DTYPES] = {RM_CPU_KERNELS(RM_CPU_ROW)};
