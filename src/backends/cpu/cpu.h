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
    X(BIAS_GELU, bias_gelu, F32_F64_BF16)                                                          \
    X(BIAS_GELU_BWD, bias_gelu_bwd, F32_F64_BF16)                                                  \
    X(ELEMENTWISE, elementwise, FLOAT)                                                             \
    /* reduce: reduce.c (sum, max), loss.c (embedding, cross_entropy, mse) */                      \
    X(SUM, sum, F32_F64)                                                                           \
    X(SUM_BWD, sum_bwd, F32_F64)                                                                   \
    X(MAX, max, F32_F64)                                                                           \
    X(MAX_BWD, max_bwd, F32_F64)                                                                   \
    X(EMBEDDING, embedding, F32_F64)                                                               \
    X(EMBEDDING_BWD, embedding_bwd, F32_F64)                                                       \
    X(CROSS_ENTROPY, cross_entropy, F32_F64_BF16)                                                  \
    X(CROSS_ENTROPY_BWD, cross_entropy_bwd, F32_F64_BF16)                                          \
    X(MSE, mse, F32_F64)                                                                           \
    X(MSE_BWD, mse_bwd, F32_F64)                                                                   \
    /* nn: nn.c */                                                                                 \
    X(SOFTMAX, softmax, F32_F64)                                                                   \
    X(SOFTMAX_BWD, softmax_bwd, F32_F64)                                                           \
    X(LAYER_NORM, layer_norm, F32_F64)                                                             \
    X(LAYER_NORM_BWD, layer_norm_bwd, F32_F64_BF16)                                                \
    X(ADD_LAYER_NORM, add_layer_norm, F32_F64)                                                     \
    X(DROPOUT, dropout, F32_F64)                                                                   \
    X(DROPOUT_BWD, dropout_bwd, F32_F64)                                                           \
    /* rms_norm.c (bf16 through f32: rm_cpu_bf16_via_f32; the backward's bf16 g of an f32 x \
     * read by the f32 kernel) */      \
    X(RMS_NORM, rms_norm, F32_F64)                                                                 \
    X(RMS_NORM_BWD, rms_norm_bwd, F32_F64_BF16)                                                    \
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
    X(COPY_INTO, copy_into, ALL)                                                                   \
    /* optim: optim.c (the loops of src/core/optim_loops.h; they switch on the dtype) */           \
    X(ADAMW, adamw, FLOAT)                                                                         \
    X(SGD, sgd, FLOAT)                                                                             \
    X(SUM_SQUARES, sum_squares, FLOAT)                                                             \
    X(ADAMW_LIST, adamw_list, FLOAT)                                                               \
    X(SGD_LIST, sgd_list, FLOAT)
RM_CPU_KERNELS(RM_CPU_DECL)

/* ---- what the cpu backend's record (device.c) lends the core ------------------------- */
/* The cpu row of the kernel table (table.c), indexed [kernel][dtype]. */
extern const rm_kernel_fn rm_cpu_kernels[RM_K_COUNT][RM_N_DTYPES];
/* (bf16.c) For every kernel, its f32 kernel run on f32 copies of the bf16 operands, the
 * bf16 outputs rounded back (to nearest even): the cpu's bf16 kernel where it has no
 * native one (the record's bf16_fallback). */
extern const rm_kernel_fn rm_cpu_bf16_via_f32[RM_K_COUNT];
/* (unary.c) Whether the bf16 unary kernel's lookup table of op is built: its forward
 * results, or (backward) its f'(s) factors (the GELUs only). For tests. */
bool rm_cpu_unary_bf16_table_ready(rm_unary_op op, bool backward);
/* (unary.c) The GELU op's (RM_U_GELU_ERF, _TANH) bf16 lookup tables for a call of n
 * elements: its results by bf16 input, and its f32 factors f'(s); NULL where the unary
 * kernel would not use them (n small) or while another thread builds them. */
const uint16_t *rm_cpu_gelu_bf16_fwd_table(rm_unary_op op, int64_t n);
const float *rm_cpu_gelu_bf16_grad_table(rm_unary_op op, int64_t n);
/* (matmul.c) db (n) = the column sums of src (rows, n) in double, by blocks of 64 columns:
 * the last step of the column sum kernel (RM_K_COLSUM), for kernels that make its per-chunk
 * partial sums themselves (rm_cpu_chunk_rows, nn.h) while they write the rows. */
void rm_cpu_colsum_blocks_f32(const float *src, int64_t rows, int64_t n, float *db);
void rm_cpu_colsum_blocks_f64(const double *src, int64_t rows, int64_t n, double *db);
/* (bf16.c) n contiguous elements f32 -> bf16 (rounded as rm_f32_to_bf16) and back,
 * vectorised and split over OpenMP. */
void rm_cpu_f32_to_bf16(const float *restrict x, uint16_t *restrict y, int64_t n);
void rm_cpu_bf16_to_f32(const uint16_t *restrict x, float *restrict y, int64_t n);
/* (copy.c) rm_copy_into's fast kernel for dst and src of the same dtype: bit-for-bit, row
 * memcpy / tiled transpose / strided rows, OpenMP split. Returns false, doing nothing,
 * when the dtypes differ (meta tensors: true, nothing to do). Cannot fail. */
bool rm_copy_same_dtype(remat_tensor *dst, const remat_tensor *src);
/* (copy.c) t contiguous: zeroes t[..., lo:hi, ...] along dim d (no-op for a meta t). */
void rm_zero_dim_range(remat_tensor *t, int d, int64_t lo, int64_t hi);

/* ---- the cpu allocator's buffer cache (cache.c) ----------------------------------------
 * take: a cached buffer of exactly `size` (64-byte rounded) bytes, or NULL.
 * put: keeps p if it may (size large enough, cache on, and in_use + cached +
 * size <= peak, the device's counters after this free); false: free it. */
#define RM_CPU_CACHE_MIN (64 * 1024) /* smaller buffers go straight to malloc */
void *rm_cpu_cache_take(size_t size);
bool rm_cpu_cache_put(void *p, size_t size, size_t in_use, size_t peak);

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
