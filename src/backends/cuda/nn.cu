/* src/backends/cuda/nn.cu — CUDA kernels of softmax, log_softmax and
 * layer_norm (src/core/kernels/nn.h; cpu: src/backends/cpu/nn.c).
 *
 * softmax over R of x (O, R, I): rows (I == 1) one block per row (32, 128
 * or 256 threads by the row's length), columns (I > 1) one thread per
 * (o, i) walking R, coalesced along i. Numerically stable as the cpu: the
 * row max (NaN-propagating) is subtracted, an all -inf row uses 0.
 *
 * layer_norm over the last dims, x seen as (N, C): one warp per row with the
 * row in registers when C <= 1024, else one block per row, for the statistics (mean of the data shifted by its first element, then the
 * centred variance, both in the type as the cpu; rstd through double) and
 * for dx (llm.c's formula, the cpu's fma order). dweight / dbias: column
 * sums per fixed chunk of RMK_LN_CHUNK rows, then the chunks in double in
 * order: deterministic, no atomics. */
#include "nn.h"

#include "kcommon.cuh"

#define RMK_LN_THREADS 256
#define RMK_LN_CHUNK 64
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

/* ---- layer_norm ---------------------------------------------------------------------------- */
/* x (N, C) -> y, mean, rstd: one block per row */
template <typename T>
__global__ void ln_fwd(const T *__restrict__ x, const T *__restrict__ w, const T *__restrict__ b,
                       T *__restrict__ y, T *__restrict__ mean, T *__restrict__ rstd, int64_t N,
                       int64_t C, double eps) {
    __shared__ T sh[32];
    for (int64_t n = blockIdx.x; n < N; n += gridDim.x) {
        const T *xn = x + n * C;
        T *yn = y + n * C;
        const T shift = C > 0 ? xn[0] : (T)0;
        T a = 0;
        for (int64_t c = threadIdx.x; c < C; c += blockDim.x) a += xn[c] - shift;
        a = rmk_block_sum(a, sh);
        const T m = shift + a / (T)C;
        T v = 0;
        for (int64_t c = threadIdx.x; c < C; c += blockDim.x) {
            T d = xn[c] - m;
            v += d * d;
        }
        v = rmk_block_sum(v, sh);
        const T s = (T)(1.0 / sqrt((double)(v / (T)C) + eps));
        for (int64_t c = threadIdx.x; c < C; c += blockDim.x) {
            T xv = xn[c];
            if (w && b) yn[c] = rmk_fma((xv - m) * s, w[c], b[c]);
            else if (w) yn[c] = (xv - m) * s * w[c];
            else if (b) yn[c] = rmk_fma(xv - m, s, b[c]);
            else yn[c] = (xv - m) * s;
        }
        if (threadIdx.x == 0) {
            mean[n] = m;
            rstd[n] = s;
        }
    }
}

/* dx rows: one block per row.
 *   norm = (x - mean) * rstd, wg = w * g (g without w)
 *   dx = (wg - mean_c(wg) - norm * mean_c(wg * norm)) * rstd */
template <typename T>
__global__ void ln_bwd_dx(const T *__restrict__ g, const T *__restrict__ x, const T *__restrict__ w,
                          const T *__restrict__ mean, const T *__restrict__ rstd,
                          T *__restrict__ dx, int64_t N, int64_t C) {
    __shared__ T sh[32];
    for (int64_t n = blockIdx.x; n < N; n += gridDim.x) {
        const T *gn = g + n * C, *xn = x + n * C;
        const T mn = mean[n], rs = rstd[n];
        T a = 0, bb = 0;
        for (int64_t c = threadIdx.x; c < C; c += blockDim.x) {
            T wg = w ? w[c] * gn[c] : gn[c];
            a += wg;
            bb += wg * ((xn[c] - mn) * rs);
        }
        const T m1 = rmk_block_sum(a, sh) / (T)C;
        const T m2 = rmk_block_sum(bb, sh) / (T)C;
        T *d = dx + n * C;
        for (int64_t c = threadIdx.x; c < C; c += blockDim.x) {
            T wg = w ? w[c] * gn[c] : gn[c];
            d[c] = rmk_fma(-(xn[c] - mn) * rs, m2, wg - m1) * rs;
        }
    }
}

/* part[k][0][c] = sum over rows of chunk k of norm * g, part[k][1][c] = of g */
template <typename T>
__global__ void ln_bwd_cols(const T *__restrict__ g, const T *__restrict__ x,
                            const T *__restrict__ mean, const T *__restrict__ rstd,
                            T *__restrict__ part, int64_t N, int64_t C, int64_t nch) {
    RMK_GRID_LOOP(t, nch * C) {
        int64_t k = t / C, c = t % C;
        int64_t r0 = k * RMK_LN_CHUNK, r1 = r0 + RMK_LN_CHUNK < N ? r0 + RMK_LN_CHUNK : N;
        T pw = 0, pb = 0;
        for (int64_t n = r0; n < r1; n++) {
            T gv = g[n * C + c];
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
template <typename T, int NPL>
__global__ void ln_fwd_warp(const T *__restrict__ x, const T *__restrict__ w,
                            const T *__restrict__ b, T *__restrict__ y, T *__restrict__ mean,
                            T *__restrict__ rstd, int64_t N, int64_t C, double eps) {
    const int lane = threadIdx.x & 31;
    const int64_t nw = (int64_t)gridDim.x * (blockDim.x >> 5);
    for (int64_t n = (int64_t)blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5); n < N; n += nw) {
        const T *xn = x + n * C;
        T *yn = y + n * C;
        const T shift = xn[0];
        T v[NPL], a = 0;
#pragma unroll
        for (int k = 0; k < NPL; k++) {
            const int64_t c = lane + 32 * k;
            v[k] = c < C ? xn[c] : shift;
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
            if (c >= C) continue;
            const T xv = v[k];
            if (w && b) yn[c] = rmk_fma((xv - m) * sd, w[c], b[c]);
            else if (w) yn[c] = (xv - m) * sd * w[c];
            else if (b) yn[c] = rmk_fma(xv - m, sd, b[c]);
            else yn[c] = (xv - m) * sd;
        }
        if (lane == 0) {
            mean[n] = m;
            rstd[n] = sd;
        }
    }
}

template <typename T, int NPL>
__global__ void ln_bwd_dx_warp(const T *__restrict__ g, const T *__restrict__ x,
                               const T *__restrict__ w, const T *__restrict__ mean,
                               const T *__restrict__ rstd, T *__restrict__ dx, int64_t N,
                               int64_t C) {
    const int lane = threadIdx.x & 31;
    const int64_t nw = (int64_t)gridDim.x * (blockDim.x >> 5);
    for (int64_t n = (int64_t)blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5); n < N; n += nw) {
        const T *gn = g + n * C, *xn = x + n * C;
        const T mn = mean[n], rs = rstd[n];
        T wg[NPL], nx[NPL], a = 0, bb = 0;
#pragma unroll
        for (int k = 0; k < NPL; k++) {
            const int64_t c = lane + 32 * k;
            wg[k] = nx[k] = 0;
            if (c < C) {
                wg[k] = w ? w[c] * gn[c] : gn[c];
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
/* Calls F(NPL) with npl (8, 16, 24 or 32) as a constant. */
#define RMK_LN_BY_NPL(npl, F)                                                                      \
    switch (npl) {                                                                                 \
    case 8: F(8); break;                                                                           \
    case 16: F(16); break;                                                                         \
    case 24: F(24); break;                                                                         \
    default: F(32); break;                                                                         \
    }

static int64_t ln_chunks(int64_t N) { return (N + RMK_LN_CHUNK - 1) / RMK_LN_CHUNK; }

extern "C" size_t rmk_layer_norm_bwd_ws(int dt, int64_t N, int64_t C) {
    size_t es = dt == 0 ? sizeof(float) : sizeof(double);
    return (size_t)(2 * ln_chunks(N) * C) * es;
}

template <typename T>
static cudaError_t ln_t(const T *x, const T *w, const T *b, T *y, T *mean, T *rstd, int64_t N,
                        int64_t C, double eps, cudaStream_t s) {
    if (N == 0) return cudaSuccess;
    const int npl = C > 0 ? ln_npl(C) : 0;
    if (npl) {
#define F(P)                                                                                       \
    ln_fwd_warp<T, P>                                                                              \
        <<<ln_warp_blocks(N), 32 * RMK_LN_WARP_ROWS, 0, s>>>(x, w, b, y, mean, rstd, N, C, eps)
        RMK_LN_BY_NPL(npl, F);
#undef F
    } else {
        ln_fwd<T><<<rmk_blocks(N, 1), RMK_LN_THREADS, 0, s>>>(x, w, b, y, mean, rstd, N, C, eps);
    }
    return cudaGetLastError();
}

template <typename T>
static cudaError_t ln_bwd_t(const T *g, const T *x, const T *w, const T *mean, const T *rstd, T *dx,
                            T *dw, T *db, int64_t N, int64_t C, T *ws, cudaStream_t s) {
    if (dx && N * C > 0) {
        const int npl = ln_npl(C);
        if (npl) {
#define F(P)                                                                                       \
    ln_bwd_dx_warp<T, P>                                                                           \
        <<<ln_warp_blocks(N), 32 * RMK_LN_WARP_ROWS, 0, s>>>(g, x, w, mean, rstd, dx, N, C)
            RMK_LN_BY_NPL(npl, F);
#undef F
        } else {
            ln_bwd_dx<T><<<rmk_blocks(N, 1), RMK_LN_THREADS, 0, s>>>(g, x, w, mean, rstd, dx, N, C);
        }
    }
    if ((dw || db) && C > 0) {
        int64_t nch = ln_chunks(N);
        if (nch > 0)
            ln_bwd_cols<T>
                <<<rmk_blocks(nch * C, 256), 256, 0, s>>>(g, x, mean, rstd, ws, N, C, nch);
        ln_bwd_cols_total<T><<<rmk_blocks(C, 256), 256, 0, s>>>(ws, C, nch, dw, db);
    }
    return cudaGetLastError();
}

extern "C" cudaError_t rmk_layer_norm(int dt, const void *x, const void *w, const void *b, void *y,
                                      void *mean, void *rstd, int64_t N, int64_t C, double eps,
                                      cudaStream_t s) {
    if (dt == 0)
        return ln_t<float>((const float *)x, (const float *)w, (const float *)b, (float *)y,
                           (float *)mean, (float *)rstd, N, C, eps, s);
    if (dt == 1)
        return ln_t<double>((const double *)x, (const double *)w, (const double *)b, (double *)y,
                            (double *)mean, (double *)rstd, N, C, eps, s);
    return cudaErrorInvalidValue;
}

extern "C" cudaError_t rmk_layer_norm_bwd(int dt, const void *g, const void *x, const void *w,
                                          const void *mean, const void *rstd, void *dx, void *dw,
                                          void *db, int64_t N, int64_t C, void *ws,
                                          cudaStream_t s) {
    if (dt == 0)
        return ln_bwd_t<float>((const float *)g, (const float *)x, (const float *)w,
                               (const float *)mean, (const float *)rstd, (float *)dx, (float *)dw,
                               (float *)db, N, C, (float *)ws, s);
    if (dt == 1)
        return ln_bwd_t<double>((const double *)g, (const double *)x, (const double *)w,
                                (const double *)mean, (const double *)rstd, (double *)dx,
                                (double *)dw, (double *)db, N, C, (double *)ws, s);
    return cudaErrorInvalidValue;
}
