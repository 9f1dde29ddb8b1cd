/* src/backends/cpu/reduce.h — the cpu kernels of the reduce family
 * (src/dispatch/kernels/reduce.h) and their table rows. */
#ifndef REMAT_CPU_REDUCE_H
#define REMAT_CPU_REDUCE_H

#include "../../dispatch/kernels.h"

#define RM_CPU_KERNELS_REDUCE

#endif /* REMAT_CPU_REDUCE_H */
