/* src/backends/cuda/random.h — launchers of the random family (rng.cu):
 * dropout on Philox, the same bits as the cpu kernel (src/core/philox.h). */
#ifndef REMAT_CUDA_RANDOM_H
#define REMAT_CUDA_RANDOM_H

#include "launch.h"

RM_CUDA_BEGIN_DECLS
/* y[i] = x[i] * (kept ? scale : 0) for i < n; bits (NULL: not written) gets
 * ceil(n / 8) bytes of keep bits. thr, key, counter: src/core/philox.h. */
cudaError_t rm_cuda_dropout_f32(const float *x, float *y, uint8_t *bits, int64_t n, uint32_t thr,
                                float scale, uint32_t k0, uint32_t k1, uint64_t counter,
                                cudaStream_t s);
cudaError_t rm_cuda_dropout_f64(const double *x, double *y, uint8_t *bits, int64_t n, uint32_t thr,
                                double scale, uint32_t k0, uint32_t k1, uint64_t counter,
                                cudaStream_t s);
/* dx[i] = g[i] * (bit i of bits ? scale : 0) */
cudaError_t rm_cuda_dropout_bwd_f32(const float *g, const uint8_t *bits, float scale, float *dx,
                                    int64_t n, cudaStream_t s);
cudaError_t rm_cuda_dropout_bwd_f64(const double *g, const uint8_t *bits, double scale, double *dx,
                                    int64_t n, cudaStream_t s);
/* bf16 x, y, g, dx (autocast's dropouts on bf16 outputs): the f32 products, rounded once */
cudaError_t rm_cuda_dropout_bf16(const void *x, void *y, uint8_t *bits, int64_t n, uint32_t thr,
                                 float scale, uint32_t k0, uint32_t k1, uint64_t counter,
                                 cudaStream_t s);
cudaError_t rm_cuda_dropout_bwd_bf16(const void *g, const uint8_t *bits, float scale, void *dx,
                                     int64_t n, cudaStream_t s);
RM_CUDA_END_DECLS

#endif /* REMAT_CUDA_RANDOM_H */
