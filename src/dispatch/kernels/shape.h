/* src/dispatch/kernels/shape.h — kernels of the shape family (src/ops/shape.c, select.c, concat.c, copy.c):
 * ids (RM_KERNELS_SHAPE, each with its operands in a comment) and their
 * parameter structs. */
#ifndef REMAT_KERNELS_SHAPE_H
#define REMAT_KERNELS_SHAPE_H

#define RM_KERNELS_SHAPE(X)

#endif /* REMAT_KERNELS_SHAPE_H */
