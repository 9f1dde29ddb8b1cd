/* src/core/kernels/shape.h — kernels of the shape family (src/ops/shape.c, select.c, concat.c, copy.c):
 * ids (RM_KERNELS_SHAPE, each with its operands in a comment) and their
 * parameter structs. */
#ifndef REMAT_KERNELS_SHAPE_H
#define REMAT_KERNELS_SHAPE_H

#define RM_KERNELS_SHAPE(X)                                                                        \
    /* y = x bit for bit, x any strides, y contiguous with x's numel (its shape may differ:  \
     * reshape's copy). in: x; out: y. Every dtype. No params */     \
    X(COPY, "copy")                                                                                \
    /* y = cond ? A : B over y's shape, A and B each an input (broadcast, any strides) or a  \
     * scalar, cond i64, f32 or f64 (any strides, broadcast). in: as rm_select_params says;  \
     * out: y (contiguous). Keyed by y's dtype: f32, f64 */     \
    X(SELECT, "select")                                                                            \
    /* y := 0 through y's strides (remat_zero_). in: y; out: y. Every dtype. No params */          \
    X(ZERO, "zero")                                                                                \
    /* y := x converted to y's dtype and broadcast to its shape, both any strides          \
     * (remat_copy_). in: y, x; out: y. Keyed by y's dtype: every dtype. No params */       \
    X(COPY_INTO, "copy")

/* Which k->in[] is the condition and which are A and B (-1: the scalar va / vb). */
typedef struct rm_select_params {
    signed char cond, a, b;
    double va, vb;
} rm_select_params;

#endif /* REMAT_KERNELS_SHAPE_H */
