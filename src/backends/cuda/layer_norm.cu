/* src/backends/cuda/layer_norm.cu — CUDA kernels of layer_norm, forward and backward
 * (src/core/kernels/nn.h; cpu: src/backends/cpu/nn.c).
 *
 * x seen as (N, C): one warp per row with the row in registers when C <= 1024, else one
 * block per row, for the statistics (mean of the data shifted by its first element, then
 * the centred variance, both in the type as the cpu; rstd through double) and for dx
 * (llm.c's formula, the cpu's fma order). dweight / dbias: column sums per fixed chunk of
 * RMK_LN_CHUNK rows, then the chunks in double in order: deterministic, no atomics.
 *
 * add_layer_norm's residual add runs in front in the same kernels (sum = x + r written as
 * the row is read, the norm of the sum from registers): one pass over x and r, and the
 * engine's add's bits.
 *
 * Storage types: y is x's type, or bf16 for an f32 x (Y = rmk_bf16: remat_layer_norm_to,
 * the cast folded into the norm): each element computed in f32 by the same expression,
 * then rounded as it is stored (rmk_put: the converting copy's rounding), so the bits are
 * those of the f32 norm then the cast. Likewise the backward reads g in x's type or, for
 * an f32 x, as bf16 (G = rmk_bf16), widened exactly as the cast's backward would widen it.
 * tests/cuda_emu/layer_norm_emu.cc runs these kernels on the CPU (RMK_EMU: without the
 * launchers). */
#include "nn.h"

#include "kcommon.cuh"

#define RMK_LN_THREADS 256
#define RMK_LN_CHUNK 64

/* y[c] = (x[c] - m) * s scaled by w[c] and shifted by b[c] (each NULL if absent), in T:
 * one expression for every storage type of y (the cpu's ln_out). */
template <typename T>
__device__ __forceinline__ T ln_out(T xv, T m, T s, const T *__restrict__ w,
                                    const T *__restrict__ b, int64_t c) {
    if (w && b) return rmk_fma((xv - m) * s, w[c], b[c]);
    if (w) return (xv - m) * s * w[c];
    if (b) return rmk_fma(xv - m, s, b[c]);
    return (xv - m) * s;
}

/* The row element the norm reads: x, or x + r (add_layer_norm: the residual add fused in
 * front, r in x's type or bf16 widened; the engine's add, bitwise). */
template <typename T, typename R>
__device__ __forceinline__ T ln_in(const T *__restrict__ xn, const R *__restrict__ rn, int64_t c) {
    return rn ? xn[c] + (T)rmk_ld(rn[c]) : xn[c];
}

/* x (N, C) (plus r, the sum written to sum, when r is not NULL) -> y, mean, rstd: one block
 * per row. Each pass reads x (and r) again: the sum is recomputed, the same bits, rather
 * than read back. */
template <typename T, typename R, typename Y>
__global__ void ln_fwd(const T *__restrict__ x, const R *__restrict__ r, T *__restrict__ sum,
                       const T *__restrict__ w, const T *__restrict__ b, Y *__restrict__ y,
                       T *__restrict__ mean, T *__restrict__ rstd, int64_t N, int64_t C,
                       double eps) {
    __shared__ T sh[32];
    for (int64_t n = blockIdx.x; n < N; n += gridDim.x) {
        const T *xn = x + n * C;
        const R *rn = r ? r + n * C : nullptr;
        Y *yn = y + n * C;
        const T shift = C > 0 ? ln_in(xn, rn, 0) : (T)0;
        T a = 0;
        for (int64_t c = threadIdx.x; c < C; c += blockDim.x) {
            const T v = ln_in(xn, rn, c);
            if (rn) sum[n * C + c] = v;
            a += v - shift;
        }
        a = rmk_block_sum(a, sh);
        const T m = shift + a / (T)C;
        T v = 0;
        for (int64_t c = threadIdx.x; c < C; c += blockDim.x) {
            T d = ln_in(xn, rn, c) - m;
            v += d * d;
        }
        v = rmk_block_sum(v, sh);
        const T s = (T)(1.0 / sqrt((double)(v / (T)C) + eps));
        for (int64_t c = threadIdx.x; c < C; c += blockDim.x)
            rmk_put(yn + c, ln_out(ln_in(xn, rn, c), m, s, w, b, c));
        if (threadIdx.x == 0) {
            mean[n] = m;
            rstd[n] = s;
        }
    }
}

/* dx rows: one block per row.
 *   norm = (x - mean) * rstd, wg = w * g (g without w)
 *   dx = (wg - mean_c(wg) - norm * mean_c(wg * norm)) * rstd */
template <typename T, typename G>
__global__ void ln_bwd_dx(const G *__restrict__ g, const T *__restrict__ x, const T *__restrict__ w,
                          const T *__restrict__ mean, const T *__restrict__ rstd,
                          T *__restrict__ dx, int64_t N, int64_t C) {
    __shared__ T sh[32];
    for (int64_t n = blockIdx.x; n < N; n += gridDim.x) {
        const G *gn = g + n * C;
        const T *xn = x + n * C;
        const T mn = mean[n], rs = rstd[n];
        T a = 0, bb = 0;
        for (int64_t c = threadIdx.x; c < C; c += blockDim.x) {
            const T gv = rmk_ld(gn[c]);
            T wg = w ? w[c] * gv : gv;
            a += wg;
            bb += wg * ((xn[c] - mn) * rs);
        }
        const T m1 = rmk_block_sum(a, sh) / (T)C;
        const T m2 = rmk_block_sum(bb, sh) / (T)C;
        T *d = dx + n * C;
        for (int64_t c = threadIdx.x; c < C; c += blockDim.x) {
            const T gv = rmk_ld(gn[c]);
            T wg = w ? w[c] * gv : gv;
            d[c] = rmk_fma(-(xn[c] - mn) * rs, m2, wg - m1) * rs;
        }
    }
}

/* part[k][0][c] = sum over rows of chunk k of norm * g, part[k][1][c] = of g */
template <typename T, typename G>
__global__ void ln_bwd_cols(const G *__restrict__ g, const T *__restrict__ x,
                            const T *__restrict__ mean, const T *__restrict__ rstd,
                            T *__restrict__ part, int64_t N, int64_t C, int64_t nch) {
    RMK_GRID_LOOP(t, nch * C) {
        int64_t k = t / C, c = t % C;
        int64_t r0 = k * RMK_LN_CHUNK, r1 = r0 + RMK_LN_CHUNK < N ? r0 + RMK_LN_CHUNK : N;
        T pw = 0, pb = 0;
        for (int64_t n = r0; n < r1; n++) {
            const T gv = rmk_ld(g[n * C + c]);
            pw += (x[n * C + c] - mean[n]) * rstd[n] * gv;
            pb += gv;
        }
        part[(k * 2) * C + c] = pw;
        part[(k * 2 + 1) * C + c] = pb;
    }
}
template <typename T>
__global__ void ln_bwd_cols_total(const T *__restrict__ part, int64_t C, int64_t nch, T *dw,
                                  T *db) {
    RMK_GRID_LOOP(c, C) {
        double sw = 0, sb = 0;
        for (int64_t k = 0; k < nch; k++) {
            sw += (double)part[(k * 2) * C + c];
            sb += (double)part[(k * 2 + 1) * C + c];
        }
        if (dw) dw[c] = (T)sw;
        if (db) db[c] = (T)sb;
    }
}

/* Rows of C <= 32 * NPL (GPT widths up to 1024): one warp a row, the row in registers, so
 * x is read once and the sums are warp shuffles, without the block's barriers (a block a
 * row of 768 measured ~1 TB/s on an H200, window 4). The same formulas as above, summed in
 * a fixed order (lane partials over k, then the shuffle tree): deterministic. */
#define RMK_LN_WARP_ROWS 8 /* warps (rows in flight) a block */
template <typename T, typename R, typename Y, int NPL>
__global__ void ln_fwd_warp(const T *__restrict__ x, const R *__restrict__ r, T *__restrict__ sum,
                            const T *__restrict__ w, const T *__restrict__ b, Y *__restrict__ y,
                            T *__restrict__ mean, T *__restrict__ rstd, int64_t N, int64_t C,
                            double eps) {
    const int lane = threadIdx.x & 31;
    const int64_t nw = (int64_t)gridDim.x * (blockDim.x >> 5);
    for (int64_t n = (int64_t)blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5); n < N; n += nw) {
        const T *xn = x + n * C;
        const R *rn = r ? r + n * C : nullptr;
        Y *yn = y + n * C;
        const T shift = ln_in(xn, rn, 0);
        T v[NPL], a = 0;
#pragma unroll
        for (int k = 0; k < NPL; k++) {
            const int64_t c = lane + 32 * k;
            v[k] = shift;
            if (c < C) {
                v[k] = ln_in(xn, rn, c);
                if (rn) sum[n * C + c] = v[k];
            }
            a += v[k] - shift;
        }
        const T m = shift + rmk_warp_sum(a) / (T)C;
        T q = 0;
#pragma unroll
        for (int k = 0; k < NPL; k++) {
            const T d = lane + 32 * k < C ? v[k] - m : (T)0;
            q += d * d;
        }
        const T sd = (T)(1.0 / sqrt((double)(rmk_warp_sum(q) / (T)C) + eps));
#pragma unroll
        for (int k = 0; k < NPL; k++) {
            const int64_t c = lane + 32 * k;
            if (c < C) rmk_put(yn + c, ln_out(v[k], m, sd, w, b, c));
        }
        if (lane == 0) {
            mean[n] = m;
            rstd[n] = sd;
        }
    }
}

template <typename T, typename G, int NPL>
__global__ void ln_bwd_dx_warp(const G *__restrict__ g, const T *__restrict__ x,
                               const T *__restrict__ w, const T *__restrict__ mean,
                               const T *__restrict__ rstd, T *__restrict__ dx, int64_t N,
                               int64_t C) {
    const int lane = threadIdx.x & 31;
    const int64_t nw = (int64_t)gridDim.x * (blockDim.x >> 5);
    for (int64_t n = (int64_t)blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5); n < N; n += nw) {
        const G *gn = g + n * C;
        const T *xn = x + n * C;
        const T mn = mean[n], rs = rstd[n];
        T wg[NPL], nx[NPL], a = 0, bb = 0;
#pragma unroll
        for (int k = 0; k < NPL; k++) {
            const int64_t c = lane + 32 * k;
            wg[k] = nx[k] = 0;
            if (c < C) {
                const T gv = rmk_ld(gn[c]);
                wg[k] = w ? w[c] * gv : gv;
                nx[k] = (xn[c] - mn) * rs;
            }
            a += wg[k];
            bb += wg[k] * nx[k];
        }
        const T m1 = rmk_warp_sum(a) / (T)C, m2 = rmk_warp_sum(bb) / (T)C;
        T *d = dx + n * C;
#pragma unroll
        for (int k = 0; k < NPL; k++) {
            const int64_t c = lane + 32 * k;
            if (c < C) d[c] = rmk_fma(-nx[k], m2, wg[k] - m1) * rs;
        }
    }
}

/* The warp kernels' elements per lane for C (0: C > 1024, the block kernels). */
static int ln_npl(int64_t C) {
    return C <= 256 ? 8 : C <= 512 ? 16 : C <= 768 ? 24 : C <= 1024 ? 32 : 0;
}
static unsigned ln_warp_blocks(int64_t N) { return rmk_blocks(N, RMK_LN_WARP_ROWS); }
static int64_t ln_chunks(int64_t N) { return (N + RMK_LN_CHUNK - 1) / RMK_LN_CHUNK; }

#ifndef RMK_EMU /* tests/cuda_emu launches the kernels its own way */
/* Calls F(NPL) with npl (8, 16, 24 or 32) as a constant. */
#define RMK_LN_BY_NPL(npl, F)                                                                      \
    switch (npl) {                                                                                 \
    case 8: F(8); break;                                                                           \
    case 16: F(16); break;                                                                         \
    case 24: F(24); break;                                                                         \
    default: F(32); break;                                                                         \
    }

extern "C" size_t rmk_layer_norm_bwd_ws(int dt, int64_t N, int64_t C) {
    size_t es = dt == 1 ? sizeof(double) : sizeof(float);
    return (size_t)(2 * ln_chunks(N) * C) * es;
}

template <typename T, typename R, typename Y>
static cudaError_t ln_t(const T *x, const R *r, T *sum, const T *w, const T *b, Y *y, T *mean,
                        T *rstd, int64_t N, int64_t C, double eps, cudaStream_t s) {
    if (N == 0) return cudaSuccess;
    const int npl = C > 0 ? ln_npl(C) : 0;
    if (npl) {
#define F(P)                                                                                       \
    ln_fwd_warp<T, R, Y, P><<<ln_warp_blocks(N), 32 * RMK_LN_WARP_ROWS, 0, s>>>(                   \
        x, r, sum, w, b, y, mean, rstd, N, C, eps)
        RMK_LN_BY_NPL(npl, F);
#undef F
    } else {
        ln_fwd<T, R, Y>
            <<<rmk_blocks(N, 1), RMK_LN_THREADS, 0, s>>>(x, r, sum, w, b, y, mean, rstd, N, C, eps);
    }
    return cudaGetLastError();
}

template <typename T, typename G>
static cudaError_t ln_bwd_t(const G *g, const T *x, const T *w, const T *mean, const T *rstd, T *dx,
                            T *dw, T *db, int64_t N, int64_t C, T *ws, cudaStream_t s) {
    if (dx && N * C > 0) {
        const int npl = ln_npl(C);
        if (npl) {
#define F(P)                                                                                       \
    ln_bwd_dx_warp<T, G, P>                                                                        \
        <<<ln_warp_blocks(N), 32 * RMK_LN_WARP_ROWS, 0, s>>>(g, x, w, mean, rstd, dx, N, C)
            RMK_LN_BY_NPL(npl, F);
#undef F
        } else {
            ln_bwd_dx<T, G>
                <<<rmk_blocks(N, 1), RMK_LN_THREADS, 0, s>>>(g, x, w, mean, rstd, dx, N, C);
        }
    }
    if ((dw || db) && C > 0) {
        int64_t nch = ln_chunks(N);
        if (nch > 0)
            ln_bwd_cols<T, G>
                <<<rmk_blocks(nch * C, 256), 256, 0, s>>>(g, x, mean, rstd, ws, N, C, nch);
        ln_bwd_cols_total<T><<<rmk_blocks(C, 256), 256, 0, s>>>(ws, C, nch, dw, db);
    }
    return cudaGetLastError();
}

/* T x's type, Y y's: r (NULL, or of x's type or rdt 4: bf16) picks R */
template <typename T, typename Y>
static cudaError_t ln_r(int rdt, const void *x, const void *r, void *sum, const void *w,
                        const void *b, void *y, void *mean, void *rstd, int64_t N, int64_t C,
                        double eps, cudaStream_t s) {
    if (rdt == 4 && r)
        return ln_t<T, rmk_bf16, Y>((const T *)x, (const rmk_bf16 *)r, (T *)sum, (const T *)w,
                                    (const T *)b, (Y *)y, (T *)mean, (T *)rstd, N, C, eps, s);
    return ln_t<T, T, Y>((const T *)x, (const T *)r, (T *)sum, (const T *)w, (const T *)b, (Y *)y,
                         (T *)mean, (T *)rstd, N, C, eps, s);
}

extern "C" cudaError_t rmk_add_layer_norm(int dt, int rdt, int ydt, const void *x, const void *r,
                                          void *sum, const void *w, const void *b, void *y,
                                          void *mean, void *rstd, int64_t N, int64_t C, double eps,
                                          cudaStream_t s) {
    if (r && rdt != dt && !(dt == 0 && rdt == 4)) return cudaErrorInvalidValue;
    if (dt == 0 && ydt == 0)
        return ln_r<float, float>(rdt, x, r, sum, w, b, y, mean, rstd, N, C, eps, s);
    if (dt == 0 && ydt == 4)
        return ln_r<float, rmk_bf16>(rdt, x, r, sum, w, b, y, mean, rstd, N, C, eps, s);
    if (dt == 1 && ydt == 1)
        return ln_r<double, double>(rdt, x, r, sum, w, b, y, mean, rstd, N, C, eps, s);
    return cudaErrorInvalidValue;
}

extern "C" cudaError_t rmk_layer_norm(int dt, int ydt, const void *x, const void *w, const void *b,
                                      void *y, void *mean, void *rstd, int64_t N, int64_t C,
                                      double eps, cudaStream_t s) {
    return rmk_add_layer_norm(dt, dt, ydt, x, NULL, NULL, w, b, y, mean, rstd, N, C, eps, s);
}

extern "C" cudaError_t rmk_layer_norm_bwd(int dt, int gdt, const void *g, const void *x,
                                          const void *w, const void *mean, const void *rstd,
                                          void *dx, void *dw, void *db, int64_t N, int64_t C,
                                          void *ws, cudaStream_t s) {
    if (dt == 0 && gdt == 0)
        return ln_bwd_t<float, float>((const float *)g, (const float *)x, (const float *)w,
                                      (const float *)mean, (const float *)rstd, (float *)dx,
                                      (float *)dw, (float *)db, N, C, (float *)ws, s);
    if (dt == 0 && gdt == 4)
        return ln_bwd_t<float, rmk_bf16>((const rmk_bf16 *)g, (const float *)x, (const float *)w,
                                         (const float *)mean, (const float *)rstd, (float *)dx,
                                         (float *)dw, (float *)db, N, C, (float *)ws, s);
    if (dt == 1 && gdt == 1)
        return ln_bwd_t<double, double>((const double *)g, (const double *)x, (const double *)w,
                                        (const double *)mean, (const double *)rstd, (double *)dx,
                                        (double *)dw, (double *)db, N, C, (double *)ws, s);
    return cudaErrorInvalidValue;
}
#endif /* RMK_EMU */
