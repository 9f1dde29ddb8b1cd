/* src/backends/cpu/cpu.h — the cpu backend's kernels (rm_kernel_fn, the
 * ABI in src/dispatch/kernels.h). Each family's header declares its
 * kernels and RM_CPU_KERNELS_<FAMILY>, its rows of the table that
 * table.c puts together as rm_cpu_kernels. */
#ifndef REMAT_BACKENDS_CPU_H
#define REMAT_BACKENDS_CPU_H

#include "../../dispatch/kernels.h"

#include "elementwise.h"
#include "matmul.h"
#include "nn.h"
#include "reduce.h"
#include "shape.h"

#endif /* REMAT_BACKENDS_CPU_H */
