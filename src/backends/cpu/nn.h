/* src/backends/cpu/nn.h — the cpu kernels of the nn family
 * (src/dispatch/kernels/nn.h) and their table rows. */
#ifndef REMAT_CPU_NN_H
#define REMAT_CPU_NN_H

#include "../../dispatch/kernels.h"

#define RM_CPU_KERNELS_NN

#endif /* REMAT_CPU_NN_H */
