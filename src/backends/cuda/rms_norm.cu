/* src/backends/cuda/rms_norm.cu — CUDA kernels of rms_norm (src/core/kernels/nn.h; cpu:
 * src/backends/cpu/rms_norm.c).
 *
 * rms_norm over the last dims, x seen as (N, C): one block per row for
 * rstd (the sum of squares in the type, 1 / sqrt through double as the cpu)
 * and for dx; dweight as column sums per fixed chunk of RMK_RMS_CHUNK rows,
 * then the chunks in double in order: deterministic, no atomics. */
#include "nn.h"

#include "kcommon.cuh"

#define RMK_RMS_THREADS 256
#define RMK_RMS_CHUNK 64

/* ---- rms_norm ------------------------------------------------------------------------------ */
template <typename T>
__global__ void rms_fwd(const T *__restrict__ x, const T *__restrict__ w, T *__restrict__ y,
                        T *__restrict__ rstd, int64_t N, int64_t C, double eps) {
    __shared__ T sh[32];
    for (int64_t n = blockIdx.x; n < N; n += gridDim.x) {
        const T *xn = x + n * C;
        T *yn = y + n * C;
        T a = 0;
        for (int64_t c = threadIdx.x; c < C; c += blockDim.x) a += xn[c] * xn[c];
        a = rmk_block_sum(a, sh);
        const T r = (T)(1.0 / sqrt((double)(a / (T)C) + eps));
        for (int64_t c = threadIdx.x; c < C; c += blockDim.x)
            yn[c] = w ? xn[c] * r * w[c] : xn[c] * r;
        if (threadIdx.x == 0) rstd[n] = r;
    }
}

/* dx = (wg − x̂ · mean_c(wg · x̂)) · rstd, x̂ = x · rstd, wg = w · g (g without w) */
template <typename T>
__global__ void rms_bwd_dx(const T *__restrict__ g, const T *__restrict__ x,
                           const T *__restrict__ w, const T *__restrict__ rstd, T *__restrict__ dx,
                           int64_t N, int64_t C) {
    __shared__ T sh[32];
    for (int64_t n = blockIdx.x; n < N; n += gridDim.x) {
        const T *gn = g + n * C, *xn = x + n * C;
        const T rs = rstd[n];
        T a = 0;
        for (int64_t c = threadIdx.x; c < C; c += blockDim.x)
            a += (w ? w[c] * gn[c] : gn[c]) * (xn[c] * rs);
        const T m = rmk_block_sum(a, sh) / (T)C;
        T *d = dx + n * C;
        for (int64_t c = threadIdx.x; c < C; c += blockDim.x) {
            T wg = w ? w[c] * gn[c] : gn[c];
            d[c] = (wg - xn[c] * rs * m) * rs;
        }
    }
}

/* part[k][c] = Σ over the rows of chunk k of x̂ · g */
template <typename T>
__global__ void rms_bwd_cols(const T *__restrict__ g, const T *__restrict__ x,
                             const T *__restrict__ rstd, T *__restrict__ part, int64_t N, int64_t C,
                             int64_t nch) {
    RMK_GRID_LOOP(t, nch * C) {
        int64_t k = t / C, c = t % C;
        int64_t r0 = k * RMK_RMS_CHUNK, r1 = r0 + RMK_RMS_CHUNK < N ? r0 + RMK_RMS_CHUNK : N;
        T pw = 0;
        for (int64_t n = r0; n < r1; n++) pw += x[n * C + c] * rstd[n] * g[n * C + c];
        part[k * C + c] = pw;
    }
}
template <typename T>
__global__ void rms_bwd_cols_total(const T *__restrict__ part, int64_t C, int64_t nch, T *dw) {
    RMK_GRID_LOOP(c, C) {
        double sw = 0;
        for (int64_t k = 0; k < nch; k++) sw += (double)part[k * C + c];
        dw[c] = (T)sw;
    }
}

static int64_t rms_chunks(int64_t N) { return (N + RMK_RMS_CHUNK - 1) / RMK_RMS_CHUNK; }

extern "C" size_t rmk_rms_norm_bwd_ws(int dt, int64_t N, int64_t C) {
    size_t es = dt == 0 ? sizeof(float) : sizeof(double);
    return (size_t)(rms_chunks(N) * C) * es;
}

template <typename T>
static cudaError_t rms_t(const T *x, const T *w, T *y, T *rstd, int64_t N, int64_t C, double eps,
                         cudaStream_t s) {
    if (N == 0) return cudaSuccess;
    rms_fwd<T><<<rmk_blocks(N, 1), RMK_RMS_THREADS, 0, s>>>(x, w, y, rstd, N, C, eps);
    return cudaGetLastError();
}

template <typename T>
static cudaError_t rms_bwd_t(const T *g, const T *x, const T *w, const T *rstd, T *dx, T *dw,
                             int64_t N, int64_t C, T *ws, cudaStream_t s) {
    if (dx && N * C > 0)
        rms_bwd_dx<T><<<rmk_blocks(N, 1), RMK_RMS_THREADS, 0, s>>>(g, x, w, rstd, dx, N, C);
    if (dw && C > 0) {
        int64_t nch = rms_chunks(N);
        if (nch > 0)
            rms_bwd_cols<T><<<rmk_blocks(nch * C, 256), 256, 0, s>>>(g, x, rstd, ws, N, C, nch);
        rms_bwd_cols_total<T><<<rmk_blocks(C, 256), 256, 0, s>>>(ws, C, nch, dw);
    }
    return cudaGetLastError();
}

extern "C" cudaError_t rmk_rms_norm(int dt, const void *x, const void *w, void *y, void *rstd,
                                    int64_t N, int64_t C, double eps, cudaStream_t s) {
    if (dt == 0)
        return rms_t<float>((const float *)x, (const float *)w, (float *)y, (float *)rstd, N, C,
                            eps, s);
    if (dt == 1)
        return rms_t<double>((const double *)x, (const double *)w, (double *)y, (double *)rstd, N,
                             C, eps, s);
    return cudaErrorInvalidValue;
}

extern "C" cudaError_t rmk_rms_norm_bwd(int dt, const void *g, const void *x, const void *w,
                                        const void *rstd, void *dx, void *dw, int64_t N, int64_t C,
                                        void *ws, cudaStream_t s) {
    if (dt == 0)
        return rms_bwd_t<float>((const float *)g, (const float *)x, (const float *)w,
                                (const float *)rstd, (float *)dx, (float *)dw, N, C, (float *)ws,
                                s);
    if (dt == 1)
        return rms_bwd_t<double>((const double *)g, (const double *)x, (const double *)w,
                                 (const double *)rstd, (double *)dx, (double *)dw, N, C,
                                 (double *)ws, s);
    return cudaErrorInvalidValue;
}
