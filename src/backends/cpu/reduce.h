/* src/backends/cpu/reduce.h — the cpu kernels of the reduce family
 * (src/dispatch/kernels/reduce.h) and their table rows. */
#ifndef REMAT_CPU_REDUCE_H
#define REMAT_CPU_REDUCE_H
#include "../../dispatch/kernels.h"
#define RM_CPU_REDUCE_DECL_(name)                                                            \
    int rm_cpu_##name##_f32(const rm_kargs *k);                                              \
    int rm_cpu_##name##_f64(const rm_kargs *k);
/* reduce.c */
RM_CPU_REDUCE_DECL_(sum)
RM_CPU_REDUCE_DECL_(sum_bwd)
RM_CPU_REDUCE_DECL_(max)
RM_CPU_REDUCE_DECL_(max_bwd)
/* loss.c */
RM_CPU_REDUCE_DECL_(embedding)
RM_CPU_REDUCE_DECL_(embedding_bwd)
RM_CPU_REDUCE_DECL_(cross_entropy)
RM_CPU_REDUCE_DECL_(cross_entropy_bwd)
RM_CPU_REDUCE_DECL_(mse)
RM_CPU_REDUCE_DECL_(mse_bwd)
#undef RM_CPU_REDUCE_DECL_
#define RM_CPU_KERNELS_REDUCE                                                                \
    [RM_K_SUM] = RM_CPU_F32_F64(sum),                                                        \
    [RM_K_SUM_BWD] = RM_CPU_F32_F64(sum_bwd),                                                \
    [RM_K_MAX] = RM_CPU_F32_F64(max),                                                        \
    [RM_K_MAX_BWD] = RM_CPU_F32_F64(max_bwd),                                                \
    [RM_K_EMBEDDING] = RM_CPU_F32_F64(embedding),                                            \
    [RM_K_EMBEDDING_BWD] = RM_CPU_F32_F64(embedding_bwd),                                    \
    [RM_K_CROSS_ENTROPY] = RM_CPU_F32_F64(cross_entropy),                                    \
    [RM_K_CROSS_ENTROPY_BWD] = RM_CPU_F32_F64(cross_entropy_bwd),                            \
    [RM_K_MSE] = RM_CPU_F32_F64(mse),                                                        \
    [RM_K_MSE_BWD] = RM_CPU_F32_F64(mse_bwd),
#endif /* REMAT_CPU_REDUCE_H */
