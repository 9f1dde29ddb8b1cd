/* src/dispatch/kernels/reduce.h — kernels of the reduce family (src/ops/reduce.c, loss.c):
 * ids (RM_KERNELS_REDUCE, each with its operands in a comment) and their
 * parameter structs. */
#ifndef REMAT_KERNELS_REDUCE_H
#define REMAT_KERNELS_REDUCE_H

#define RM_KERNELS_REDUCE(X)

#endif /* REMAT_KERNELS_REDUCE_H */
