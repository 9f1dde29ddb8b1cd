/* src/backends/cuda/cross_entropy.cu — CUDA kernels of cross_entropy, forward and backward
 * (src/core/kernels/reduce.h; cpu: src/backends/cpu/loss.c).
 *
 * One block per row computes the row's log-sum-exp (the max subtracted first; a NaN
 * anywhere makes it NaN), then one block sums the kept rows' losses in double in a fixed
 * tree and finds the first bad target, which the wrapper reads back. The backward counts
 * the kept rows on the device (no read-back) and writes each row as the cpu does:
 * exp(x - lse) * scale, minus scale at the target.
 *
 * Storage types: the logits x (and their gradient dx) are in T, or bf16 next to f32 loss
 * and lse (X = rmk_bf16: autocast's bf16 logits read uncast, RM_KF_AUTOCAST_KEEP): each
 * element widened as it is loaded, each of dx computed in f32 and rounded as it is stored
 * (the converting copy's rounding), so the bits are those of the logits cast to f32, the
 * f32 kernels, and dx cast back. tests/cuda_emu/cross_entropy_emu.cc runs these kernels on
 * the CPU (RMK_EMU: without the launchers). */
#include "reduce.h"

#include "kcommon.cuh"

#define RMK_CE_THREADS 256

/* lse[n] = logsumexp(x[n, :]), one block per row */
template <typename T, typename X>
__global__ void row_lse(const X *__restrict__ x, int64_t N, int64_t C, T *__restrict__ lse) {
    __shared__ T sh[32];
    for (int64_t n = blockIdx.x; n < N; n += gridDim.x) {
        const X *xn = x + n * C;
        T mx = (T)-INFINITY;
        for (int64_t c = threadIdx.x; c < C; c += blockDim.x) mx = rmk_nanmax(mx, (T)rmk_ld(xn[c]));
        mx = rmk_block_max(mx, sh);
        if (mx == (T)-INFINITY) mx = 0; /* all -inf: avoid inf - inf */
        T acc = 0;
        for (int64_t c = threadIdx.x; c < C; c += blockDim.x) acc += rmk_exp((T)rmk_ld(xn[c]) - mx);
        acc = rmk_block_sum(acc, sh);
        if (threadIdx.x == 0) lse[n] = mx + rmk_log(acc);
    }
}

/* One block: loss = mean over kept rows of lse - x[n, t]; *bad = the first
 * row with a target out of range (N if none). */
template <typename T, typename X>
__global__ void ce_loss(const X *__restrict__ x, const int64_t *__restrict__ t, int64_t ignore,
                        const T *__restrict__ lse, int64_t N, int64_t C, T *__restrict__ loss,
                        int64_t *__restrict__ bad) {
    __shared__ double shd[32];
    __shared__ double shc[32];
    __shared__ unsigned long long first;
    if (threadIdx.x == 0) first = (unsigned long long)N;
    __syncthreads();
    double acc = 0, cnt = 0;
    for (int64_t n = threadIdx.x; n < N; n += blockDim.x) {
        int64_t tn = t[n];
        if (tn == ignore) continue;
        if (tn < 0 || tn >= C) {
            atomicMin(&first, (unsigned long long)n);
            continue;
        }
        acc += (double)(lse[n] - (T)rmk_ld(x[n * C + tn]));
        cnt += 1;
    }
    acc = rmk_block_sum(acc, shd);
    cnt = rmk_block_sum(cnt, shc);
    if (threadIdx.x == 0) {
        *loss = cnt > 0 ? (T)(acc / cnt) : (T)NAN;
        *bad = (int64_t)first;
    }
}

/* *count = rows whose target is not ignore (one block) */
__global__ void ce_count(const int64_t *__restrict__ t, int64_t N, int64_t ignore, int64_t *count) {
    __shared__ double sh[32];
    double cnt = 0;
    for (int64_t n = threadIdx.x; n < N; n += blockDim.x) cnt += t[n] != ignore;
    cnt = rmk_block_sum(cnt, sh);
    if (threadIdx.x == 0) *count = (int64_t)cnt;
}

/* dx rows, one block per row: scale = g / count as the cpu rounds it */
template <typename T, typename X>
__global__ void ce_bwd_rows(const X *__restrict__ x, const int64_t *__restrict__ t, int64_t ignore,
                            const T *__restrict__ lse, const T *__restrict__ g,
                            const int64_t *__restrict__ count, X *__restrict__ dx, int64_t N,
                            int64_t C) {
    const T scale = (T)((double)*g / (double)*count);
    for (int64_t n = blockIdx.x; n < N; n += gridDim.x) {
        X *d = dx + n * C;
        const int64_t tn = t[n];
        if (tn == ignore) {
            for (int64_t c = threadIdx.x; c < C; c += blockDim.x) rmk_put(d + c, (T)0);
            continue;
        }
        const X *xn = x + n * C;
        const T l = lse[n];
        for (int64_t c = threadIdx.x; c < C; c += blockDim.x) {
            T v = rmk_exp((T)rmk_ld(xn[c]) - l) * scale;
            if (c == tn) v -= scale;
            rmk_put(d + c, v);
        }
    }
}

#ifndef RMK_EMU /* tests/cuda_emu launches the kernels its own way */
template <typename T, typename X>
static cudaError_t ce_t(const X *x, const int64_t *t, int64_t ignore, T *lse, T *loss, int64_t *bad,
                        int64_t N, int64_t C, cudaStream_t s) {
    const unsigned nb = rmk_blocks(N, 1);
    if (nb) row_lse<T, X><<<nb, RMK_CE_THREADS, 0, s>>>(x, N, C, lse);
    ce_loss<T, X><<<1, 1024, 0, s>>>(x, t, ignore, lse, N, C, loss, bad);
    return cudaGetLastError();
}

extern "C" cudaError_t rmk_cross_entropy(int dt, int xdt, const void *x, const int64_t *t,
                                         int64_t ignore, void *lse, void *loss, int64_t *bad,
                                         int64_t N, int64_t C, cudaStream_t s) {
    if (dt == 0 && xdt == 0)
        return ce_t<float, float>((const float *)x, t, ignore, (float *)lse, (float *)loss, bad, N,
                                  C, s);
    if (dt == 0 && xdt == 4)
        return ce_t<float, rmk_bf16>((const rmk_bf16 *)x, t, ignore, (float *)lse, (float *)loss,
                                     bad, N, C, s);
    if (dt == 1 && xdt == 1)
        return ce_t<double, double>((const double *)x, t, ignore, (double *)lse, (double *)loss,
                                    bad, N, C, s);
    return cudaErrorInvalidValue;
}

extern "C" size_t rmk_cross_entropy_bwd_ws(void) { return sizeof(int64_t); }

template <typename T, typename X>
static cudaError_t ce_bwd_t(const X *x, const int64_t *t, int64_t ignore, const T *lse, const T *g,
                            X *dx, int64_t N, int64_t C, int64_t *count, cudaStream_t s) {
    ce_count<<<1, 1024, 0, s>>>(t, N, ignore, count);
    ce_bwd_rows<T, X>
        <<<rmk_blocks(N, 1), RMK_CE_THREADS, 0, s>>>(x, t, ignore, lse, g, count, dx, N, C);
    return cudaGetLastError();
}

extern "C" cudaError_t rmk_cross_entropy_bwd(int dt, int xdt, const void *x, const int64_t *t,
                                             int64_t ignore, const void *lse, const void *g,
                                             void *dx, int64_t N, int64_t C, void *ws,
                                             cudaStream_t s) {
    if (!((dt == 0 && (xdt == 0 || xdt == 4)) || (dt == 1 && xdt == 1)))
        return cudaErrorInvalidValue;
    if (rmk_blocks(N, 1) == 0 || C == 0) return cudaSuccess;
    int64_t *count = (int64_t *)ws;
    if (xdt == 4)
        return ce_bwd_t<float, rmk_bf16>((const rmk_bf16 *)x, t, ignore, (const float *)lse,
                                         (const float *)g, (rmk_bf16 *)dx, N, C, count, s);
    if (dt == 0)
        return ce_bwd_t<float, float>((const float *)x, t, ignore, (const float *)lse,
                                      (const float *)g, (float *)dx, N, C, count, s);
    return ce_bwd_t<double, double>((const double *)x, t, ignore, (const double *)lse,
                                    (const double *)g, (double *)dx, N, C, count, s);
}
#endif /* RMK_EMU */
