/* src/dispatch/kernels/shape.h — kernels of the shape family (src/ops/shape.c, select.c, concat.c, copy.c):
 * ids (RM_KERNELS_SHAPE, each with its operands in a comment) and their
 * parameter structs. */
#ifndef REMAT_KERNELS_SHAPE_H
#define REMAT_KERNELS_SHAPE_H

#define RM_KERNELS_SHAPE(X)                                                                  \
    /* y = x bit for bit, x any strides, y contiguous with x's numel (its shape may differ:  \
     * reshape's copy). in: x; out: y. Every dtype. No params */                            \
    X(COPY, "copy")

#endif /* REMAT_KERNELS_SHAPE_H */
