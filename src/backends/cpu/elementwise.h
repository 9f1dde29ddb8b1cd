/* src/backends/cpu/elementwise.h — the cpu kernels of the elementwise
 * family (src/dispatch/kernels/elementwise.h) and their table rows. */
#ifndef REMAT_CPU_ELEMENTWISE_H
#define REMAT_CPU_ELEMENTWISE_H

#include "../../dispatch/kernels.h"

/* unary.c */
int rm_cpu_unary_f32(const rm_kargs *k);
int rm_cpu_unary_f64(const rm_kargs *k);
int rm_cpu_unary_bwd_f32(const rm_kargs *k);
int rm_cpu_unary_bwd_f64(const rm_kargs *k);
int rm_cpu_relu_mask_f32(const rm_kargs *k);
int rm_cpu_relu_mask_f64(const rm_kargs *k);
int rm_cpu_relu_mask_bwd_f32(const rm_kargs *k);
int rm_cpu_relu_mask_bwd_f64(const rm_kargs *k);

/* elementwise.c (f32 and f64 alike: the engine switches on y's dtype) */
int rm_cpu_elementwise(const rm_kargs *k);

#define RM_CPU_KERNELS_ELEMENTWISE                                                           \
    [RM_K_UNARY] = RM_CPU_F32_F64(unary),                                                    \
    [RM_K_UNARY_BWD] = RM_CPU_F32_F64(unary_bwd),                                            \
    [RM_K_RELU_MASK] = RM_CPU_F32_F64(relu_mask),                                            \
    [RM_K_RELU_MASK_BWD] = RM_CPU_F32_F64(relu_mask_bwd),                                    \
    [RM_K_ELEMENTWISE] = {[REMAT_F32] = rm_cpu_elementwise, [REMAT_F64] = rm_cpu_elementwise},

#endif /* REMAT_CPU_ELEMENTWISE_H */
