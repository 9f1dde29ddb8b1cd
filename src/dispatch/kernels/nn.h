/* src/dispatch/kernels/nn.h — kernels of the nn family (src/ops/nn.c):
 * ids (RM_KERNELS_NN, each with its operands in a comment) and their
 * parameter structs. */
#ifndef REMAT_KERNELS_NN_H
#define REMAT_KERNELS_NN_H

#define RM_KERNELS_NN(X)

#endif /* REMAT_KERNELS_NN_H */
