/* src/dispatch/kernels/matmul.h — kernels of the matmul family (src/ops/matmul.c, gemm.c, attention.c):
 * ids (RM_KERNELS_MATMUL, each with its operands in a comment) and their
 * parameter structs. */
#ifndef REMAT_KERNELS_MATMUL_H
#define REMAT_KERNELS_MATMUL_H

#define RM_KERNELS_MATMUL(X)

#endif /* REMAT_KERNELS_MATMUL_H */
