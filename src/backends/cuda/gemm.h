/* src/backends/cuda/gemm.h — launchers of the matmul family's own kernels
 * (gemm.cu); the GEMMs themselves are cuBLAS calls (gemm.c). */
#ifndef REMAT_CUDA_GEMM_H
#define REMAT_CUDA_GEMM_H

#include "launch.h"

RM_CUDA_BEGIN_DECLS
/* y (rows, n) = bias (n) in every row (before a GEMM adds to it). es: the
 * element size (2, 4 or 8): a plain copy. */
cudaError_t rm_cuda_fill_rows(void *y, const void *bias, int64_t rows, int64_t n, int es,
                              cudaStream_t s);
/* db (n) = column sums of g (rows, n), contiguous, in the order fixed by
 * the shape: chunks of rm_cuda_colsum_chunk(rows) rows summed in double into
 * part (ceil(rows / chunk) · n doubles of scratch), then the chunks in
 * order, in double. */
int64_t rm_cuda_colsum_chunk(int64_t rows);
cudaError_t rm_cuda_colsum_f32(const float *g, float *db, int64_t rows, int64_t n, double *part,
                               cudaStream_t s);
cudaError_t rm_cuda_colsum_f64(const double *g, double *db, int64_t rows, int64_t n, double *part,
                               cudaStream_t s);
/* bf16 g and db (autocast's bias gradient): the same double sums, db rounded to f32 and
 * then to bf16 (the cpu's bf16 db: f32 sums rounded once) */
cudaError_t rm_cuda_colsum_bf16(const void *g, void *db, int64_t rows, int64_t n, double *part,
                                cudaStream_t s);
/* bf16 g, f32 db (remat_bias_gelu's f32 master bias under autocast): the double sums
 * rounded to f32 */
cudaError_t rm_cuda_colsum_bf16_f32(const void *g, float *db, int64_t rows, int64_t n, double *part,
                                    cudaStream_t s);
RM_CUDA_END_DECLS

#endif /* REMAT_CUDA_GEMM_H */
