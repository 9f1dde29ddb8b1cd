/* src/backends/cpu/cpu.h — the cpu backend's kernels (rm_kernel_fn, the
 * ABI in src/core/kernels.h): one list, RM_CPU_KERNELS, of
 * X(ID, name, dtypes) (dtypes: F32_F64, F32_F64_BF16, FLOAT, FLOAT_BF16 or ALL; RM_CPU_DECL in
 * kernels.h says what they mean), from which come the kernels'
 * declarations here and the cpu row of the table (table.c). The nn
 * family's header also declares the row kernels other cpu kernels share. */
#ifndef REMAT_BACKENDS_CPU_H
#define REMAT_BACKENDS_CPU_H

#include "core/kernels.h"
#include "nn.h"

#define RM_CPU_KERNELS(X)                                                                          \
    /* elementwise: unary.c, elementwise.c (the engine switches on y's dtype) */                   \
    X(UNARY, unary, F32_F64_BF16)                                                                  \
    X(UNARY_BWD, unary_bwd, F32_F64_BF16)                                                          \
    X(RELU_MASK, relu_mask, F32_F64_BF16)                                                          \
    X(RELU_MASK_BWD, relu_mask_bwd, F32_F64_BF16)                                                  \
    X(ELEMENTWISE, elementwise, FLOAT)                                                             \
    /* reduce: reduce.c (sum, max), loss.c (embedding, cross_entropy, mse) */                      \
    X(SUM, sum, F32_F64)                                                                           \
    X(SUM_BWD, sum_bwd, F32_F64)                                                                   \
    X(MAX, max, F32_F64)                                                                           \
    X(MAX_BWD, max_bwd, F32_F64)                                                                   \
    X(EMBEDDING, embedding, F32_F64)                                                               \
    X(EMBEDDING_BWD, embedding_bwd, F32_F64)                                                       \
    X(CROSS_ENTROPY, cross_entropy, F32_F64)                                                       \
    X(CROSS_ENTROPY_BWD, cross_entropy_bwd, F32_F64)                                               \
    X(MSE, mse, F32_F64)                                                                           \
    X(MSE_BWD, mse_bwd, F32_F64)                                                                   \
    /* nn: nn.c */                                                                                 \
    X(SOFTMAX, softmax, F32_F64)                                                                   \
    X(SOFTMAX_BWD, softmax_bwd, F32_F64)                                                           \
    X(LAYER_NORM, layer_norm, F32_F64)                                                             \
    X(LAYER_NORM_BWD, layer_norm_bwd, F32_F64)                                                     \
    X(DROPOUT, dropout, F32_F64)                                                                   \
    X(DROPOUT_BWD, dropout_bwd, F32_F64)                                                           \
    /* rms_norm.c (bf16 through f32: rm_cpu_bf16_via_f32) */                                       \
    X(RMS_NORM, rms_norm, F32_F64)                                                                 \
    X(RMS_NORM_BWD, rms_norm_bwd, F32_F64)                                                         \
    /* rope.c (bf16 through f32) */                                                                \
    X(ROPE, rope, F32_F64)                                                                         \
    /* matmul: matmul.c (bf16 too: oneDNN's bf16 GEMM), attention.c (they switch on the   \
     * operands' dtype) */        \
    X(MATMUL, matmul, FLOAT_BF16)                                                                  \
    X(COLSUM, colsum, FLOAT_BF16)                                                                  \
    X(ATTENTION, attention, FLOAT_BF16)                                                            \
    X(ATTENTION_BWD, attention_bwd, FLOAT_BF16)                                                    \
    /* shape: copy.c (copies, any dtype), select.c (switches on y's dtype) */                      \
    X(COPY, copy, ALL)                                                                             \
    X(SELECT, select, FLOAT)                                                                       \
    X(ZERO, zero, ALL)                                                                             \
    X(COPY_INTO, copy_into, ALL)
RM_CPU_KERNELS(RM_CPU_DECL)

/* t's contiguous shape as (O, R, I) around `dim` (rm_outer_reduce_inner):
 * softmax and max work on this 3-D view. */
typedef struct rm_cpu_ori {
    int64_t O, R, I;
} rm_cpu_ori;
static inline rm_cpu_ori rm_cpu_ori_of(const remat_tensor *t, int dim) {
    rm_cpu_ori v;
    rm_outer_reduce_inner(t->ndim, t->shape, dim, &v.O, &v.R, &v.I);
    return v;
}

#endif /* REMAT_BACKENDS_CPU_H */
