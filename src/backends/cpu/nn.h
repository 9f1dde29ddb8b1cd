/* src/backends/cpu/nn.h — the cpu kernels of the nn family
 * (src/dispatch/kernels/nn.h), their table rows, and the row kernels
 * other cpu kernels share (cross_entropy, attention). */
#ifndef REMAT_CPU_NN_H
#define REMAT_CPU_NN_H
#include "../../dispatch/kernels.h"
/* nn.c */
int rm_cpu_softmax_f32(const rm_kargs *k);
int rm_cpu_softmax_f64(const rm_kargs *k);
int rm_cpu_softmax_bwd_f32(const rm_kargs *k);
int rm_cpu_softmax_bwd_f64(const rm_kargs *k);
int rm_cpu_layer_norm_f32(const rm_kargs *k);
int rm_cpu_layer_norm_f64(const rm_kargs *k);
int rm_cpu_layer_norm_bwd_f32(const rm_kargs *k);
int rm_cpu_layer_norm_bwd_f64(const rm_kargs *k);
int rm_cpu_dropout_f32(const rm_kargs *k);
int rm_cpu_dropout_f64(const rm_kargs *k);
int rm_cpu_dropout_bwd_f32(const rm_kargs *k);
int rm_cpu_dropout_bwd_f64(const rm_kargs *k);
#define RM_CPU_KERNELS_NN                                                                    \
    [RM_K_SOFTMAX] = RM_CPU_F32_F64(softmax),                                                \
    [RM_K_SOFTMAX_BWD] = RM_CPU_F32_F64(softmax_bwd),                                        \
    [RM_K_LAYER_NORM] = RM_CPU_F32_F64(layer_norm),                                          \
    [RM_K_LAYER_NORM_BWD] = RM_CPU_F32_F64(layer_norm_bwd),                                  \
    [RM_K_DROPOUT] = RM_CPU_F32_F64(dropout),                                                \
    [RM_K_DROPOUT_BWD] = RM_CPU_F32_F64(dropout_bwd),
#endif /* REMAT_CPU_NN_H */
