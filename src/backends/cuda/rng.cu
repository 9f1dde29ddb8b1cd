/* src/backends/cuda/rng.cu — dropout on the GPU: each thread makes one byte
 * of the keep mask (two Philox blocks, 8 elements) with src/core/philox.h's code, the
 * cpu kernel's bits exactly, and applies it. */
#include "core/philox.h"
#include "kcommon.cuh"
#include "random.h"

/* S: the storage type, T what it computes in (bf16: f32, each result rounded once, as the
 * cpu's bf16 dropout through f32) */
template <typename S, typename T = typename rmk_compute<S>::type>
__global__ void dropout_fwd(const S *__restrict__ x, S *__restrict__ y, uint8_t *__restrict__ bits,
                            int64_t n, uint32_t thr, T scale, uint32_t k0, uint32_t k1,
                            uint64_t counter) {
    int64_t nbytes = (n + 7) / 8;
    for (int64_t t = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; t < nbytes;
         t += (int64_t)gridDim.x * blockDim.x) {
        unsigned byte = rm_dropout_keep_byte(t, n, thr, k0, k1, counter);
        for (int k = 0; k < 8 && 8 * t + k < n; k++) {
            int64_t i = 8 * t + k;
            rmk_put(y + i, rmk_ld(x[i]) * (((byte >> k) & 1u) ? scale : (T)0));
        }
        if (bits) bits[t] = (uint8_t)byte;
    }
}

template <typename S, typename T = typename rmk_compute<S>::type>
__global__ void dropout_bwd(const S *__restrict__ g, const uint8_t *__restrict__ bits, T scale,
                            S *__restrict__ dx, int64_t n) {
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
         i += (int64_t)gridDim.x * blockDim.x)
        rmk_put(dx + i, rmk_ld(g[i]) * (((bits[i >> 3] >> (i & 7)) & 1u) ? scale : (T)0));
}

template <typename S, typename T>
static cudaError_t launch_fwd(const S *x, S *y, uint8_t *bits, int64_t n, uint32_t thr, T scale,
                              uint32_t k0, uint32_t k1, uint64_t counter, cudaStream_t s) {
    if (n > 0)
        dropout_fwd<S><<<rm_cuda_blocks((n + 7) / 8, 256), 256, 0, s>>>(x, y, bits, n, thr, scale,
                                                                        k0, k1, counter);
    return cudaGetLastError();
}

template <typename S, typename T>
static cudaError_t launch_bwd(const S *g, const uint8_t *bits, T scale, S *dx, int64_t n,
                              cudaStream_t s) {
    if (n > 0) dropout_bwd<S><<<rm_cuda_blocks(n, 256), 256, 0, s>>>(g, bits, scale, dx, n);
    return cudaGetLastError();
}

extern "C" {
cudaError_t rm_cuda_dropout_f32(const float *x, float *y, uint8_t *bits, int64_t n, uint32_t thr,
                                float scale, uint32_t k0, uint32_t k1, uint64_t counter,
                                cudaStream_t s) {
    return launch_fwd(x, y, bits, n, thr, scale, k0, k1, counter, s);
}
cudaError_t rm_cuda_dropout_f64(const double *x, double *y, uint8_t *bits, int64_t n, uint32_t thr,
                                double scale, uint32_t k0, uint32_t k1, uint64_t counter,
                                cudaStream_t s) {
    return launch_fwd(x, y, bits, n, thr, scale, k0, k1, counter, s);
}
cudaError_t rm_cuda_dropout_bwd_f32(const float *g, const uint8_t *bits, float scale, float *dx,
                                    int64_t n, cudaStream_t s) {
    return launch_bwd(g, bits, scale, dx, n, s);
}
cudaError_t rm_cuda_dropout_bwd_f64(const double *g, const uint8_t *bits, double scale, double *dx,
                                    int64_t n, cudaStream_t s) {
    return launch_bwd(g, bits, scale, dx, n, s);
}
cudaError_t rm_cuda_dropout_bf16(const void *x, void *y, uint8_t *bits, int64_t n, uint32_t thr,
                                 float scale, uint32_t k0, uint32_t k1, uint64_t counter,
                                 cudaStream_t s) {
    return launch_fwd((const rmk_bf16 *)x, (rmk_bf16 *)y, bits, n, thr, scale, k0, k1, counter, s);
}
cudaError_t rm_cuda_dropout_bwd_bf16(const void *g, const uint8_t *bits, float scale, void *dx,
                                     int64_t n, cudaStream_t s) {
    return launch_bwd((const rmk_bf16 *)g, bits, scale, (rmk_bf16 *)dx, n, s);
}
}
