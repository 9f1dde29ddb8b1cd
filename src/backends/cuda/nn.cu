/* src/backends/cuda/nn.cu — CUDA kernels of softmax and log_softmax
 * (src/core/kernels/nn.h; cpu: src/backends/cpu/nn.c). layer_norm's are
 * layer_norm.cu's, rms_norm's rms_norm.cu's.
 *
 * softmax over R of x (O, R, I): rows (I == 1) one block per row (32, 128
 * or 256 threads by the row's length), columns (I > 1) one thread per
 * (o, i) walking R, coalesced along i. Numerically stable as the cpu: the
 * row max (NaN-propagating) is subtracted, an all -inf row uses 0. */
#include "nn.h"

#include "kcommon.cuh"

#define RMK_COL_THREADS 256

static int row_threads(int64_t R) { return R <= 128 ? 32 : R <= 1024 ? 128 : 256; }

/* ---- softmax ------------------------------------------------------------------------------- */
template <typename T>
__global__ void softmax_rows(const T *__restrict__ x, T *__restrict__ y, int64_t O, int64_t R,
                             bool log_out) {
    __shared__ T sh[32];
    for (int64_t o = blockIdx.x; o < O; o += gridDim.x) {
        const T *xo = x + o * R;
        T *yo = y + o * R;
        T mx = (T)-INFINITY;
        for (int64_t r = threadIdx.x; r < R; r += blockDim.x) mx = rmk_nanmax(mx, xo[r]);
        mx = rmk_block_max(mx, sh);
        if (mx == (T)-INFINITY) mx = 0;
        T acc = 0;
        for (int64_t r = threadIdx.x; r < R; r += blockDim.x) {
            T e = rmk_exp(xo[r] - mx);
            if (!log_out) yo[r] = e;
            acc += e;
        }
        acc = rmk_block_sum(acc, sh);
        if (log_out) {
            T lse = mx + rmk_log(acc);
            for (int64_t r = threadIdx.x; r < R; r += blockDim.x) yo[r] = xo[r] - lse;
        } else {
            T inv = (T)1 / acc;
            /* each thread rescales the elements it wrote itself: no barrier needed */
            for (int64_t r = threadIdx.x; r < R; r += blockDim.x) yo[r] *= inv;
        }
    }
}

template <typename T>
__global__ void softmax_cols(const T *__restrict__ x, T *__restrict__ y, int64_t O, int64_t R,
                             int64_t I, bool log_out) {
    RMK_GRID_LOOP(oi, O * I) {
        int64_t o = oi / I, i = oi % I;
        const T *xo = x + o * R * I + i;
        T *yo = y + o * R * I + i;
        T mx = (T)-INFINITY;
        for (int64_t r = 0; r < R; r++) mx = xo[r * I] > mx ? xo[r * I] : mx;
        if (mx == (T)-INFINITY) mx = 0;
        T acc = 0;
        for (int64_t r = 0; r < R; r++) {
            T e = rmk_exp(xo[r * I] - mx);
            if (!log_out) yo[r * I] = e;
            acc += e;
        }
        if (log_out) {
            T lse = mx + rmk_log(acc);
            for (int64_t r = 0; r < R; r++) yo[r * I] = xo[r * I] - lse;
        } else {
            T inv = (T)1 / acc;
            for (int64_t r = 0; r < R; r++) yo[r * I] *= inv;
        }
    }
}

template <typename T>
__global__ void softmax_bwd_rows(const T *__restrict__ g, const T *__restrict__ y,
                                 T *__restrict__ dx, int64_t O, int64_t R, bool log_out) {
    __shared__ T sh[32];
    for (int64_t o = blockIdx.x; o < O; o += gridDim.x) {
        const T *go = g + o * R, *yo = y + o * R;
        T *d = dx + o * R;
        T acc = 0;
        for (int64_t r = threadIdx.x; r < R; r += blockDim.x)
            acc += log_out ? go[r] : go[r] * yo[r];
        const T sm = rmk_block_sum(acc, sh);
        for (int64_t r = threadIdx.x; r < R; r += blockDim.x)
            d[r] = log_out ? go[r] - rmk_exp(yo[r]) * sm : yo[r] * (go[r] - sm);
    }
}

template <typename T>
__global__ void softmax_bwd_cols(const T *__restrict__ g, const T *__restrict__ y,
                                 T *__restrict__ dx, int64_t O, int64_t R, int64_t I,
                                 bool log_out) {
    RMK_GRID_LOOP(oi, O * I) {
        int64_t o = oi / I, i = oi % I, base = o * R * I + i;
        T acc = 0;
        for (int64_t r = 0; r < R; r++) {
            int64_t k = base + r * I;
            acc += log_out ? g[k] : g[k] * y[k];
        }
        for (int64_t r = 0; r < R; r++) {
            int64_t k = base + r * I;
            dx[k] = log_out ? g[k] - rmk_exp(y[k]) * acc : y[k] * (g[k] - acc);
        }
    }
}

template <typename T>
static cudaError_t softmax_t(const T *x, T *y, int64_t O, int64_t R, int64_t I, bool log_out,
                             cudaStream_t s) {
    if (O * R * I == 0) return cudaSuccess;
    if (I == 1) {
        int th = row_threads(R);
        softmax_rows<T><<<rmk_blocks(O, 1), th, 0, s>>>(x, y, O, R, log_out);
    } else {
        softmax_cols<T>
            <<<rmk_blocks(O * I, RMK_COL_THREADS), RMK_COL_THREADS, 0, s>>>(x, y, O, R, I, log_out);
    }
    return cudaGetLastError();
}
template <typename T>
static cudaError_t softmax_bwd_t(const T *g, const T *y, T *dx, int64_t O, int64_t R, int64_t I,
                                 bool log_out, cudaStream_t s) {
    if (O * R * I == 0) return cudaSuccess;
    if (I == 1) {
        int th = row_threads(R);
        softmax_bwd_rows<T><<<rmk_blocks(O, 1), th, 0, s>>>(g, y, dx, O, R, log_out);
    } else {
        softmax_bwd_cols<T><<<rmk_blocks(O * I, RMK_COL_THREADS), RMK_COL_THREADS, 0, s>>>(
            g, y, dx, O, R, I, log_out);
    }
    return cudaGetLastError();
}

extern "C" cudaError_t rmk_softmax(int dt, const void *x, void *y, int64_t O, int64_t R, int64_t I,
                                   bool log, cudaStream_t s) {
    if (dt == 0) return softmax_t<float>((const float *)x, (float *)y, O, R, I, log, s);
    if (dt == 1) return softmax_t<double>((const double *)x, (double *)y, O, R, I, log, s);
    return cudaErrorInvalidValue;
}
extern "C" cudaError_t rmk_softmax_bwd(int dt, const void *g, const void *y, void *dx, int64_t O,
                                       int64_t R, int64_t I, bool log, cudaStream_t s) {
    if (dt == 0)
        return softmax_bwd_t<float>((const float *)g, (const float *)y, (float *)dx, O, R, I, log,
                                    s);
    if (dt == 1)
        return softmax_bwd_t<double>((const double *)g, (const double *)y, (double *)dx, O, R, I,
                                     log, s);
    return cudaErrorInvalidValue;
}
