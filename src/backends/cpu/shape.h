/* src/backends/cpu/shape.h — the cpu kernels of the shape family
 * (src/dispatch/kernels/shape.h) and their table rows. */
#ifndef REMAT_CPU_SHAPE_H
#define REMAT_CPU_SHAPE_H

#include "../../dispatch/kernels.h"

#define RM_CPU_KERNELS_SHAPE

#endif /* REMAT_CPU_SHAPE_H */
