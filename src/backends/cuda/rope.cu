/* src/backends/cuda/rope.cu — CUDA kernel of rope (src/core/kernels/nn.h; cpu:
 * src/backends/cpu/rope.c): one thread per (row, t, i < D/2) pair; the angle pos[t] ·
 * theta^(-2i/D), its cosine and sine in double, rounded to the type as the cpu's table; the
 * backward is the rotation by the opposite angle (inverse). */
#include "nn.h"

#include "kcommon.cuh"

/* ---- rope ---------------------------------------------------------------------------------- */
/* x, y (R, Tn, 2h); pos (Tn) or NULL (0..Tn-1). S the storage type, T what it computes in
 * (bf16: f32, the cosines and sines rounded to f32 and each result rounded once, as the
 * cpu's bf16 rope through f32) */
template <typename S, typename T = typename rmk_compute<S>::type>
__global__ void rope_k(const S *__restrict__ x, const int64_t *__restrict__ pos, S *__restrict__ y,
                       int64_t R, int64_t Tn, int64_t h, double theta, bool inverse) {
    RMK_GRID_LOOP(e, R * Tn * h) {
        const int64_t i = e % h, rt = e / h, t = rt % Tn;
        const double inv = 1.0 / pow(theta, (double)(2 * i) / (double)(2 * h));
        const double a = (double)(pos ? pos[t] : t) * inv;
        const T c = (T)cos(a), sn = (T)sin(a), s = inverse ? -sn : sn;
        const T u = rmk_ld(x[rt * 2 * h + i]), v = rmk_ld(x[rt * 2 * h + i + h]);
        rmk_put(y + rt * 2 * h + i, u * c - v * s);
        rmk_put(y + rt * 2 * h + i + h, v * c + u * s);
    }
}

extern "C" cudaError_t rmk_rope(int dt, const void *x, const int64_t *pos, void *y, int64_t R,
                                int64_t Tn, int64_t h, double theta, bool inverse, cudaStream_t s) {
    unsigned nb = rmk_blocks(R * Tn * h, 256);
    if (nb == 0) return cudaSuccess;
    if (dt == 0)
        rope_k<float>
            <<<nb, 256, 0, s>>>((const float *)x, pos, (float *)y, R, Tn, h, theta, inverse);
    else if (dt == 1)
        rope_k<double>
            <<<nb, 256, 0, s>>>((const double *)x, pos, (double *)y, R, Tn, h, theta, inverse);
    else if (dt == 4)
        rope_k<rmk_bf16>
            <<<nb, 256, 0, s>>>((const rmk_bf16 *)x, pos, (rmk_bf16 *)y, R, Tn, h, theta, inverse);
    else return cudaErrorInvalidValue;
    return cudaGetLastError();
}
