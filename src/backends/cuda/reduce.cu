/* src/backends/cuda/reduce.cu — CUDA kernels of sum, mean and max over dims
 * (src/core/kernels/reduce.h; cpu: src/backends/cpu/reduce.c).
 *
 * The wrapper (reduce_kernels.c) brings a reduction to (O, R, I) passes as
 * the cpu does (kplan.h's rmk_groups); here are the passes:
 *   rows (I == 1): R <= 32, one thread per row; else one block per row,
 *     or, for few long rows, fixed chunks (rmk_sum_split, kplan.h) summed by one
 *     block each and the chunks' partials then summed in order;
 *   columns (I > 1): one thread per (o, i) walks R (coalesced along i),
 *     the rows split into chunks when O * I alone gives too few threads.
 * Sums accumulate in double (f32 included) and combine in a fixed tree, so
 * a result depends on the shape only: bitwise reproducible.
 *
 * max: the first index of the maximum, a NaN being the maximum (the first
 * NaN wins), as the cpu; y is the element at that index (it keeps the
 * sign of a zero). */
#include "reduce.h"

#include "kcommon.cuh"

#define RMK_THREADS 256

/* ---- sum ----------------------------------------------------------------------------------- */
/* rows, one thread each: y[o] = sum_r x[o, r] / div (short rows) */
template <typename T>
__global__ void sum_rows_thread(const T *__restrict__ x, int64_t O, int64_t R, T div,
                                T *__restrict__ y) {
    RMK_GRID_LOOP(o, O) {
        double acc = 0;
        for (int64_t r = 0; r < R; r++) acc += (double)x[o * R + r];
        y[o] = (T)acc / div;
    }
}

/* Blocks over (row o, chunk c) items: part[item] = sum of x[o, c*chunk ...]
 * (nch = 1: the whole row, straight into y with the division). */
template <typename T>
__global__ void sum_rows_block(const T *__restrict__ x, int64_t O, int64_t R, int64_t chunk,
                               int64_t nch, T div, T *__restrict__ y, double *__restrict__ part) {
    __shared__ double sh[32];
    for (int64_t item = blockIdx.x; item < O * nch; item += gridDim.x) {
        int64_t o = item / nch, c = item % nch;
        int64_t lo = c * chunk, hi = lo + chunk < R ? lo + chunk : R;
        const T *xo = x + o * R;
        double acc = 0;
        for (int64_t r = lo + threadIdx.x; r < hi; r += blockDim.x) acc += (double)xo[r];
        acc = rmk_block_sum(acc, sh);
        if (threadIdx.x == 0) {
            if (part) part[item] = acc;
            else y[o] = (T)acc / div;
        }
    }
}

/* y[o] = (sum_c part[o, c]) / div, in a fixed tree per row */
template <typename T>
__global__ void sum_parts_rows(const double *__restrict__ part, int64_t O, int64_t nch, T div,
                               T *__restrict__ y) {
    __shared__ double sh[32];
    for (int64_t o = blockIdx.x; o < O; o += gridDim.x) {
        double acc = 0;
        for (int64_t c = threadIdx.x; c < nch; c += blockDim.x) acc += part[o * nch + c];
        acc = rmk_block_sum(acc, sh);
        if (threadIdx.x == 0) y[o] = (T)acc / div;
    }
}

/* Columns: thread per (chunk c, o, i) sums rows [c*rows, ...) of column
 * (o, i); nch = 1 writes y directly, else part[c][o*I + i]. */
template <typename T>
__global__ void sum_cols(const T *__restrict__ x, int64_t O, int64_t R, int64_t I, int64_t rows,
                         int64_t nch, T div, T *__restrict__ y, double *__restrict__ part) {
    const int64_t OI = O * I;
    RMK_GRID_LOOP(t, OI * nch) {
        int64_t c = t / OI, oi = t % OI, o = oi / I, i = oi % I;
        int64_t lo = c * rows, hi = lo + rows < R ? lo + rows : R;
        const T *xo = x + o * R * I + i;
        double acc = 0;
        for (int64_t r = lo; r < hi; r++) acc += (double)xo[r * I];
        if (nch == 1) y[oi] = (T)acc / div;
        else part[c * OI + oi] = acc;
    }
}
template <typename T>
__global__ void sum_parts_cols(const double *__restrict__ part, int64_t OI, int64_t nch, T div,
                               T *__restrict__ y) {
    RMK_GRID_LOOP(oi, OI) {
        double acc = 0;
        for (int64_t c = 0; c < nch; c++) acc += part[c * OI + oi];
        y[oi] = (T)acc / div;
    }
}

extern "C" size_t rmk_sum_ori_ws(int64_t O, int64_t R, int64_t I) {
    int64_t chunk, nch;
    rmk_sum_split(O, R, I, &chunk, &nch);
    return nch > 1 ? (size_t)(O * I * nch) * sizeof(double) : 0;
}

template <typename T>
static cudaError_t sum_ori_t(const T *x, int64_t O, int64_t R, int64_t I, T div, T *y, double *ws,
                             cudaStream_t s) {
    int64_t chunk, nch;
    rmk_sum_split(O, R, I, &chunk, &nch);
    if (O * I == 0) return cudaSuccess;
    if (I == 1) {
        if (R <= 32 && nch == 1) {
            sum_rows_thread<T><<<rmk_blocks(O, RMK_THREADS), RMK_THREADS, 0, s>>>(x, O, R, div, y);
        } else {
            unsigned nb = rmk_blocks(O * nch, 1);
            sum_rows_block<T>
                <<<nb, RMK_THREADS, 0, s>>>(x, O, R, chunk, nch, div, y, nch > 1 ? ws : NULL);
            if (nch > 1)
                sum_parts_rows<T><<<rmk_blocks(O, 1), RMK_THREADS, 0, s>>>(ws, O, nch, div, y);
        }
        return cudaGetLastError();
    }
    sum_cols<T><<<rmk_blocks(O * I * nch, RMK_THREADS), RMK_THREADS, 0, s>>>(x, O, R, I, chunk, nch,
                                                                             div, y, ws);
    if (nch > 1)
        sum_parts_cols<T>
            <<<rmk_blocks(O * I, RMK_THREADS), RMK_THREADS, 0, s>>>(ws, O * I, nch, div, y);
    return cudaGetLastError();
}

extern "C" cudaError_t rmk_sum_ori(int dt, const void *x, int64_t O, int64_t R, int64_t I,
                                   double div, void *y, void *ws, cudaStream_t s) {
    if (dt == 0)
        return sum_ori_t<float>((const float *)x, O, R, I, (float)div, (float *)y, (double *)ws, s);
    if (dt == 1)
        return sum_ori_t<double>((const double *)x, O, R, I, div, (double *)y, (double *)ws, s);
    return cudaErrorInvalidValue;
}

/* ---- max ----------------------------------------------------------------------------------- */
/* Whether (v, i) beats (b, j): a NaN beats a number, a larger value a
 * smaller one, and among equals (or NaNs) the smaller index wins. */
template <typename T> __device__ __forceinline__ bool max_better(T v, int64_t i, T b, int64_t j) {
    bool vn = v != v, bn = b != b;
    if (vn != bn) return vn;
    if (!vn && v != b) return v > b;
    return i < j;
}

/* rows (I == 1): one block per row */
template <typename T>
__global__ void max_rows(const T *__restrict__ x, int64_t O, int64_t R, T *__restrict__ y,
                         int64_t *__restrict__ idx) {
    __shared__ T shv[RMK_THREADS];
    __shared__ int64_t shi[RMK_THREADS];
    for (int64_t o = blockIdx.x; o < O; o += gridDim.x) {
        const T *xo = x + o * R;
        T best = (T)0;
        int64_t at = INT64_MAX; /* no element yet: loses to any */
        for (int64_t r = threadIdx.x; r < R; r += blockDim.x) {
            T v = xo[r];
            if (at == INT64_MAX || max_better(v, r, best, at)) {
                best = v;
                at = r;
            }
        }
        shv[threadIdx.x] = best;
        shi[threadIdx.x] = at;
        __syncthreads();
        for (int w = blockDim.x / 2; w > 0; w >>= 1) {
            if ((int)threadIdx.x < w) {
                T v = shv[threadIdx.x + w];
                int64_t j = shi[threadIdx.x + w];
                if (j != INT64_MAX && (shi[threadIdx.x] == INT64_MAX ||
                                       max_better(v, j, shv[threadIdx.x], shi[threadIdx.x]))) {
                    shv[threadIdx.x] = v;
                    shi[threadIdx.x] = j;
                }
            }
            __syncthreads();
        }
        if (threadIdx.x == 0) {
            y[o] = xo[shi[0]];
            idx[o] = shi[0];
        }
        __syncthreads();
    }
}

/* columns (I > 1): one thread per (o, i), rows in order (strict >: the
 * first maximum stays) */
template <typename T>
__global__ void max_cols(const T *__restrict__ x, int64_t O, int64_t R, int64_t I,
                         T *__restrict__ y, int64_t *__restrict__ idx) {
    RMK_GRID_LOOP(oi, O * I) {
        int64_t o = oi / I, i = oi % I;
        const T *xo = x + o * R * I + i;
        T b = xo[0];
        int64_t at = 0;
        for (int64_t r = 1; r < R; r++) {
            T v = xo[r * I];
            if (v > b || (v != v && b == b)) {
                b = v;
                at = r;
            }
        }
        y[oi] = b;
        idx[oi] = at;
    }
}

template <typename T>
__global__ void max_bwd_scatter(const T *__restrict__ g, const int64_t *__restrict__ idx, int64_t O,
                                int64_t R, int64_t I, T *__restrict__ dx) {
    RMK_GRID_LOOP(oi, O * I) {
        int64_t o = oi / I, i = oi % I, r = idx[oi];
        if (r >= 0 && r < R) dx[(o * R + r) * I + i] = g[oi];
    }
}

template <typename T>
static cudaError_t max_ori_t(const T *x, int64_t O, int64_t R, int64_t I, T *y, int64_t *idx,
                             cudaStream_t s) {
    if (O * I == 0 || R == 0) return cudaSuccess;
    if (I == 1) max_rows<T><<<rmk_blocks(O, 1), RMK_THREADS, 0, s>>>(x, O, R, y, idx);
    else max_cols<T><<<rmk_blocks(O * I, RMK_THREADS), RMK_THREADS, 0, s>>>(x, O, R, I, y, idx);
    return cudaGetLastError();
}

extern "C" cudaError_t rmk_max_ori(int dt, const void *x, int64_t O, int64_t R, int64_t I, void *y,
                                   int64_t *idx, cudaStream_t s) {
    if (dt == 0) return max_ori_t<float>((const float *)x, O, R, I, (float *)y, idx, s);
    if (dt == 1) return max_ori_t<double>((const double *)x, O, R, I, (double *)y, idx, s);
    return cudaErrorInvalidValue;
}

extern "C" cudaError_t rmk_max_bwd_ori(int dt, const void *g, const int64_t *idx, int64_t O,
                                       int64_t R, int64_t I, void *dx, cudaStream_t s) {
    if (dt != 0 && dt != 1) return cudaErrorInvalidValue;
    size_t es = dt == 0 ? sizeof(float) : sizeof(double);
    int64_t n = O * R * I;
    if (n == 0) return cudaSuccess;
    cudaError_t e = cudaMemsetAsync(dx, 0, (size_t)n * es, s);
    if (e != cudaSuccess) return e;
    unsigned nb = rmk_blocks(O * I, RMK_THREADS);
    if (dt == 0)
        max_bwd_scatter<float>
            <<<nb, RMK_THREADS, 0, s>>>((const float *)g, idx, O, R, I, (float *)dx);
    else
        max_bwd_scatter<double>
            <<<nb, RMK_THREADS, 0, s>>>((const double *)g, idx, O, R, I, (double *)dx);
    return cudaGetLastError();
}
