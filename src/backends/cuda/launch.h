/* src/backends/cuda/launch.h — what every .cu file and its launcher header
 * include: C/C++-clean (no src/core/core.h), only the CUDA runtime and fixed-width
 * integers. Launchers are declared between RM_CUDA_BEGIN_DECLS and
 * RM_CUDA_END_DECLS (extern "C" under nvcc), take raw device pointers,
 * sizes, strides, plain parameters and the stream, enqueue their kernels
 * and return cudaGetLastError() (cuda_backend.h explains the convention). */
#ifndef REMAT_CUDA_LAUNCH_H
#define REMAT_CUDA_LAUNCH_H

#include <cuda_runtime_api.h>
#include <stdbool.h>
#include <stdint.h>

#ifdef __cplusplus
#define RM_CUDA_BEGIN_DECLS extern "C" {
#define RM_CUDA_END_DECLS }
#else
#define RM_CUDA_BEGIN_DECLS
#define RM_CUDA_END_DECLS
#endif

#ifdef __CUDACC__
/* Blocks of `threads` covering n items, capped at what a grid's x dimension
 * holds (kernels stride over the rest: for (i = ...; i < n; i += stride)). */
static inline unsigned rm_cuda_blocks(int64_t n, unsigned threads) {
    int64_t b = (n + threads - 1) / threads;
    if (b < 1) b = 1;
    return b > 2147483647 ? 2147483647u : (unsigned)b;
}
#endif

#endif /* REMAT_CUDA_LAUNCH_H */
