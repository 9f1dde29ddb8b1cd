/* src/backends/cpu/matmul.h — the cpu kernels of the matmul family
 * (src/dispatch/kernels/matmul.h) and their table rows. */
#ifndef REMAT_CPU_MATMUL_H
#define REMAT_CPU_MATMUL_H

#include "../../dispatch/kernels.h"

#define RM_CPU_KERNELS_MATMUL

#endif /* REMAT_CPU_MATMUL_H */
