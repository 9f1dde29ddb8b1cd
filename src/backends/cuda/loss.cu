/* src/backends/cuda/loss.cu — CUDA kernels of embedding and mse_loss
 * (src/core/kernels/reduce.h; cpu: src/backends/cpu/loss.c).
 *
 * embedding's backward is deterministic without floating-point atomics:
 * the (index, position) pairs are radix-sorted by index (stable, so
 * positions stay increasing within an index), and the first position of
 * each run of equal indices sums the run's gradient rows in order, one
 * block per run, threads across the columns. dw rows no index names are
 * zero.
 *
 * cross_entropy's kernels are cross_entropy.cu's.
 *
 * mse: fixed chunks of RMK_LOSS_CHUNK elements each summed by a block in
 * double, then the chunks in order by one block. */
#include <cub/device/device_radix_sort.cuh>

#include "reduce.h"

#include "kcommon.cuh"

#define RMK_THREADS 256
#define RMK_LOSS_CHUNK 4096

/* ---- index checks -------------------------------------------------------------------------- */
__global__ void init_i64(int64_t *p, int64_t v) { *p = v; }

__global__ void first_bad_kernel(const int64_t *__restrict__ idx, int64_t P, int64_t lo, int64_t hi,
                                 bool has_skip, int64_t skip, int64_t *first) {
    RMK_GRID_LOOP(p, P) {
        int64_t v = idx[p];
        if (!(has_skip && v == skip) && (v < lo || v >= hi))
            atomicMin((unsigned long long *)first, (unsigned long long)p); /* p >= 0 */
    }
}

extern "C" cudaError_t rmk_first_bad_index(const int64_t *idx, int64_t P, int64_t lo, int64_t hi,
                                           bool has_skip, int64_t skip, int64_t *first,
                                           cudaStream_t s) {
    init_i64<<<1, 1, 0, s>>>(first, P);
    unsigned nb = rmk_blocks(P, RMK_THREADS);
    if (nb) first_bad_kernel<<<nb, RMK_THREADS, 0, s>>>(idx, P, lo, hi, has_skip, skip, first);
    return cudaGetLastError();
}

/* ---- embedding ----------------------------------------------------------------------------- */
/* y (P, D) = w[idx[p], :] */
template <typename T>
__global__ void embedding_kernel(const T *__restrict__ w, const int64_t *__restrict__ idx,
                                 T *__restrict__ y, int64_t P, int64_t D) {
    RMK_GRID_LOOP(e, P * D) {
        int64_t p = e / D, c = e % D;
        y[e] = w[idx[p] * D + c];
    }
}

extern "C" cudaError_t rmk_embedding(int dt, const void *w, const int64_t *idx, void *y, int64_t P,
                                     int64_t D, cudaStream_t s) {
    unsigned nb = rmk_blocks(P * D, RMK_THREADS);
    if (nb == 0) return cudaSuccess;
    if (dt == 0)
        embedding_kernel<float><<<nb, RMK_THREADS, 0, s>>>((const float *)w, idx, (float *)y, P, D);
    else if (dt == 1)
        embedding_kernel<double>
            <<<nb, RMK_THREADS, 0, s>>>((const double *)w, idx, (double *)y, P, D);
    else return cudaErrorInvalidValue;
    return cudaGetLastError();
}

__global__ void iota_kernel(int64_t *v, int64_t n) { RMK_GRID_LOOP(i, n) v[i] = i; }

/* One block per sorted position j that starts a run of equal keys: sums
 * g[pos[j'], :] for the run, in order, into dw[key, :]. */
template <typename T>
__global__ void embedding_bwd_runs(const T *__restrict__ g, const uint64_t *__restrict__ keys,
                                   const int64_t *__restrict__ pos, T *__restrict__ dw, int64_t P,
                                   int64_t D) {
    for (int64_t j = blockIdx.x; j < P; j += gridDim.x) {
        uint64_t key = keys[j];
        if (j > 0 && keys[j - 1] == key) continue; /* not the start of a run */
        int64_t end = j + 1;
        while (end < P && keys[end] == key) end++;
        for (int64_t c = threadIdx.x; c < D; c += blockDim.x) {
            T acc = 0;
            for (int64_t q = j; q < end; q++) acc += g[pos[q] * D + c];
            dw[(int64_t)key * D + c] = acc;
        }
    }
}

/* Bits that hold indices 0..num-1. */
static int key_bits(int64_t num) {
    int b = 1;
    while (b < 63 && ((int64_t)1 << b) < num) b++;
    return b;
}

/* scratch: sorted keys, positions in, positions out, then CUB's temp */
static size_t align16(size_t n) { return (n + 15) & ~(size_t)15; }

extern "C" size_t rmk_embedding_bwd_ws(int64_t P, int64_t num) {
    size_t temp = 0;
    cub::DeviceRadixSort::SortPairs(NULL, temp, (const uint64_t *)NULL, (uint64_t *)NULL,
                                    (const int64_t *)NULL, (int64_t *)NULL, (int)P, 0,
                                    key_bits(num));
    return 3 * align16((size_t)P * 8) + align16(temp);
}

extern "C" cudaError_t rmk_embedding_bwd(int dt, const void *g, const int64_t *idx, void *dw,
                                         int64_t num, int64_t P, int64_t D, void *ws,
                                         size_t ws_bytes, cudaStream_t s) {
    if (dt != 0 && dt != 1) return cudaErrorInvalidValue;
    size_t es = dt == 0 ? sizeof(float) : sizeof(double);
    if (num * D == 0) return cudaSuccess;
    cudaError_t e = cudaMemsetAsync(dw, 0, (size_t)(num * D) * es, s);
    if (e != cudaSuccess || P == 0) return e;
    if (P > INT32_MAX) return cudaErrorInvalidValue; /* CUB's item count is an int */
    char *w = (char *)ws;
    size_t a = align16((size_t)P * 8);
    uint64_t *keys = (uint64_t *)w;
    int64_t *pos_in = (int64_t *)(w + a), *pos = (int64_t *)(w + 2 * a);
    size_t temp = ws_bytes - 3 * a;
    iota_kernel<<<rmk_blocks(P, RMK_THREADS), RMK_THREADS, 0, s>>>(pos_in, P);
    /* indices are in [0, num) (checked by the forward), so as unsigned they order the same */
    e = cub::DeviceRadixSort::SortPairs(w + 3 * a, temp, (const uint64_t *)idx, keys, pos_in, pos,
                                        (int)P, 0, key_bits(num), s);
    if (e != cudaSuccess) return e;
    unsigned nb = rmk_blocks(P, 1);
    if (dt == 0)
        embedding_bwd_runs<float>
            <<<nb, RMK_THREADS, 0, s>>>((const float *)g, keys, pos, (float *)dw, P, D);
    else
        embedding_bwd_runs<double>
            <<<nb, RMK_THREADS, 0, s>>>((const double *)g, keys, pos, (double *)dw, P, D);
    return cudaGetLastError();
}

/* ---- mse_loss ------------------------------------------------------------------------------ */
template <typename T>
__global__ void mse_chunks(const T *__restrict__ a, const T *__restrict__ b, int64_t n,
                           double *__restrict__ part) {
    __shared__ double sh[32];
    int64_t nch = (n + RMK_LOSS_CHUNK - 1) / RMK_LOSS_CHUNK;
    for (int64_t c = blockIdx.x; c < nch; c += gridDim.x) {
        int64_t lo = c * RMK_LOSS_CHUNK, hi = lo + RMK_LOSS_CHUNK < n ? lo + RMK_LOSS_CHUNK : n;
        double acc = 0;
        for (int64_t i = lo + threadIdx.x; i < hi; i += blockDim.x) {
            double d = (double)a[i] - (double)b[i];
            acc += d * d;
        }
        acc = rmk_block_sum(acc, sh);
        if (threadIdx.x == 0) part[c] = acc;
    }
}
template <typename T>
__global__ void mse_total(const double *__restrict__ part, int64_t nch, int64_t n,
                          T *__restrict__ y) {
    __shared__ double sh[32];
    double acc = 0;
    for (int64_t c = threadIdx.x; c < nch; c += blockDim.x) acc += part[c];
    acc = rmk_block_sum(acc, sh);
    if (threadIdx.x == 0) *y = n ? (T)(acc / (double)n) : (T)NAN;
}

extern "C" size_t rmk_mse_ws(int64_t n) {
    int64_t nch = (n + RMK_LOSS_CHUNK - 1) / RMK_LOSS_CHUNK;
    return (size_t)(nch > 0 ? nch : 1) * sizeof(double);
}

extern "C" cudaError_t rmk_mse(int dt, const void *a, const void *b, void *y, int64_t n, void *ws,
                               cudaStream_t s) {
    int64_t nch = (n + RMK_LOSS_CHUNK - 1) / RMK_LOSS_CHUNK;
    unsigned nb = rmk_blocks(nch, 1);
    double *part = (double *)ws;
    if (dt == 0) {
        if (nb)
            mse_chunks<float>
                <<<nb, RMK_THREADS, 0, s>>>((const float *)a, (const float *)b, n, part);
        mse_total<float><<<1, 1024, 0, s>>>(part, nch, n, (float *)y);
    } else if (dt == 1) {
        if (nb)
            mse_chunks<double>
                <<<nb, RMK_THREADS, 0, s>>>((const double *)a, (const double *)b, n, part);
        mse_total<double><<<1, 1024, 0, s>>>(part, nch, n, (double *)y);
    } else {
        return cudaErrorInvalidValue;
    }
    return cudaGetLastError();
}

/* da may be a: no __restrict__ on them */
template <typename T>
__global__ void mse_bwd_kernel(const T *a, const T *__restrict__ b, const T *__restrict__ g, T *da,
                               T *__restrict__ db, int64_t n) {
    const T sc = (T)(2.0 * (double)*g / (double)n);
    RMK_GRID_LOOP(i, n) {
        T v = sc * (a[i] - b[i]);
        if (da) da[i] = v;
        if (db) db[i] = -v;
    }
}

extern "C" cudaError_t rmk_mse_bwd(int dt, const void *a, const void *b, const void *g, void *da,
                                   void *db, int64_t n, cudaStream_t s) {
    unsigned nb = rmk_blocks(n, RMK_THREADS);
    if (nb == 0) return cudaSuccess;
    if (dt == 0)
        mse_bwd_kernel<float><<<nb, RMK_THREADS, 0, s>>>(
            (const float *)a, (const float *)b, (const float *)g, (float *)da, (float *)db, n);
    else if (dt == 1)
        mse_bwd_kernel<double><<<nb, RMK_THREADS, 0, s>>>(
            (const double *)a, (const double *)b, (const double *)g, (double *)da, (double *)db, n);
    else return cudaErrorInvalidValue;
    return cudaGetLastError();
}
