/* src/backends/cpu/matmul.h — the cpu kernels of the matmul family
 * (src/dispatch/kernels/matmul.h) and their table rows. */
#ifndef REMAT_CPU_MATMUL_H
#define REMAT_CPU_MATMUL_H

#include "../../dispatch/kernels.h"

/* matmul.c (f32 and f64 alike: they switch on the operands' dtype) */
int rm_cpu_matmul(const rm_kargs *k);
int rm_cpu_colsum(const rm_kargs *k);
/* attention.c */
int rm_cpu_attention(const rm_kargs *k);
int rm_cpu_attention_bwd(const rm_kargs *k);

#define RM_CPU_BOTH_(fn) {[REMAT_F32] = fn, [REMAT_F64] = fn}
#define RM_CPU_KERNELS_MATMUL                                                                \
    [RM_K_MATMUL] = {[REMAT_F32] = rm_cpu_matmul, [REMAT_F64] = rm_cpu_matmul,              \
                     [REMAT_BF16] = rm_cpu_matmul},                                          \
    [RM_K_COLSUM] = RM_CPU_BOTH_(rm_cpu_colsum),                                             \
    [RM_K_ATTENTION] = RM_CPU_BOTH_(rm_cpu_attention),                                       \
    [RM_K_ATTENTION_BWD] = RM_CPU_BOTH_(rm_cpu_attention_bwd),

#endif /* REMAT_CPU_MATMUL_H */
