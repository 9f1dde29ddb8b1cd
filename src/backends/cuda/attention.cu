/* src/backends/cuda/attention.cu — fused scaled dot-product attention on
 * CUDA, forward and backward, keeping only the rows' log-sum-exp
 * (src/core/kernels/matmul.h; cpu: src/backends/cpu/attention.c).
 *
 *   y = softmax(scale · q·kᵀ, causal mask) · v      q (nb, Tq, D), k (nb, Tk, D),
 *   lse = the rows' log-sum-exp of the scores        v (nb, Tk, Dv), y (nb, Tq, Dv)
 *
 * Tiled as FlashAttention-2: a block owns BQ query rows of one batch entry
 * and walks the key tiles (BK keys) its rows can see (causal: keys
 * j <= i, top-left aligned, so a block stops at its last row), with the Q,
 * K and V tiles and the tile's scores in shared memory and an online
 * softmax (running max and sum, the output rescaled once per tile). The
 * (Tq, Tk) score matrix never exists in global memory.
 *
 * Threads: TPR = HD / 16 threads per row (HD = the head-size class, the
 * smallest of 32, 64, 128, 256 holding D and Dv; tiles are zero-padded to
 * HD). In a row's group, thread t computes the scores of keys jj ≡ t
 * (mod TPR) as whole dot products from shared memory, all of a tile's at
 * once (the row's element read once for them: dot_rows), and owns the output
 * columns c ≡ t (mod TPR) (16 of them, in registers). Row groups are
 * aligned inside a warp, so the group's max and sum are shuffles and its
 * shared-memory hand-offs need only __syncwarp. Rows are padded by one
 * element in shared memory (no bank conflicts between rows).
 *
 * Backward, from the saved lse (P = exp(S - lse) recomputed per tile), with
 * dO = gy and delta = rowsum(dO ∘ y):
 *   dS = P ∘ (dO·Vᵀ − delta) · scale,  dQ = dS·K,  dK = dSᵀ·Q,  dV = Pᵀ·dO.
 * Two kernels and no atomics, so results are deterministic: the first owns
 * query tiles (writes delta to scratch, and dQ), the second owns key tiles
 * (dK, dV: a key row's group loops over the query tiles that can see it).
 *
 * Operands are views with any strides (rmk_att_operand): the per-head views
 * of a packed qkv projection are read in place. Grouped-query k and v (fewer
 * heads than q) are read through their own strides (hdiv); the dK/dV kernel's
 * item is a kv entry's key tile, its query heads added in turn (no atomics).
 * The causal mask may be lower-right aligned (off = Tk - Tq: j <= i + off). */
#include <stdlib.h>
#include <string.h>

#include "nn.h"

#include "kcommon.cuh"

/* Tile sizes of a (type, head class): chosen so that every kernel's shared
 * memory fits the 227 KiB an H100 block may opt into, and 16 accumulators
 * per thread (32 in dK/dV) stay in registers. */
template <typename T, int HD> struct att_cfg {
    static constexpr int TPR = HD / 16; /* threads per row */
    static constexpr int BQ = (HD == 256 || (HD == 128 && sizeof(T) == 8)) ? 32 : 64; /* rows */
    static constexpr int BK = (HD == 256 && sizeof(T) == 8) ? 16 : 32; /* keys per tile */
    static constexpr int NT = BQ * TPR;                                /* threads */
    static constexpr int LD = HD + 1;                                  /* smem row stride */
    static constexpr int PER = HD / TPR;                               /* columns per thread */
    static constexpr int NKT = BK / TPR; /* a thread's keys (queries in dK/dV) of a tile */
    static_assert(BK % TPR == 0, "a tile's keys split evenly over a row's threads");
};

/* rows [r0, r0 + rows) x cols of an operand (storage S) into a zero-padded (rows, HD)
 * tile of T with row stride HD + 1 */
template <typename T, int HD, int NT, typename S>
__device__ __forceinline__ void load_tile(T *sm, int rows, const S *base, int64_t boff,
                                          const rmk_att_operand &op, int64_t r0, int64_t rmax,
                                          int64_t cols) {
    for (int e = threadIdx.x; e < rows * HD; e += NT) {
        int rr = e / HD, c = e % HD;
        int64_t r = r0 + rr;
        sm[rr * (HD + 1) + c] =
            (r < rmax && c < cols) ? (T)rmk_ld(base[boff + r * op.rs + c * op.cs]) : (T)0;
    }
}

/* s[u] = the dot product of row a with row (t + TPR·u) of b (row stride LD), u < N, each
 * summed over c = 0, 1, ... with fma (acc = fma(a[c], b[c], acc)), all N together: a[c] is
 * read from shared memory once for the N of them (N + 1 loads for N FMAs, where one dot at
 * a time read 2N), and the N independent sums keep the FMA pipe busy. */
template <typename T, int HD, int LD, int TPR, int N>
__device__ __forceinline__ void dot_rows(T (&s)[N], const T *a, const T *b, int t) {
#pragma unroll
    for (int u = 0; u < N; u++) s[u] = 0;
    const T *bt = b + t * LD;
#pragma unroll 8
    for (int c = 0; c < HD; c++) {
        const T av = a[c];
#pragma unroll
        for (int u = 0; u < N; u++) s[u] = rmk_fma(av, bt[TPR * u * LD + c], s[u]);
    }
}

/* Whether query i sees key j (both in range; causal: j <= i + off, off 0 top-left aligned,
 * Tk - Tq lower-right). */
__device__ __forceinline__ bool att_visible(const rmk_att_dims &d, int64_t i, int64_t j) {
    return i < d.Tq && j < d.Tk && (!d.causal || j <= i + d.off);
}

/* The end of the keys a query tile starting at i0 sees (causal: up to its last row's). */
template <int BQ>
__device__ __forceinline__ int64_t att_key_end(const rmk_att_dims &d, int64_t i0) {
    if (!d.causal) return d.Tk;
    const int64_t n = i0 + BQ + d.off;
    return n < 0 ? 0 : n < d.Tk ? n : d.Tk;
}

/* A row's lse, 0 for a row without keys (-inf: every p is 0 anyway) or out of range. */
template <typename T>
__device__ __forceinline__ T att_row_lse(const rmk_att_dims &d, const T *lse, int64_t b,
                                         int64_t i) {
    const T li = i < d.Tq ? lse[b * d.Tq + i] : (T)0;
    return li == (T)-INFINITY ? (T)0 : li;
}

/* The next key tile (rows j0.. of k and v) into Ks and Vs, between barriers: the previous
 * tile's readers are done before, every thread sees the new one after. */
template <typename T, int HD, int NT, typename S>
__device__ __forceinline__ void load_kv(T *Ks, T *Vs, int rows, const rmk_att_dims &d, const S *k,
                                        int64_t bk, const rmk_att_operand &ok, const S *v,
                                        int64_t bv, const rmk_att_operand &ov, int64_t j0) {
    __syncthreads();
    load_tile<T, HD, NT>(Ks, rows, k, bk, ok, j0, d.Tk, d.D);
    load_tile<T, HD, NT>(Vs, rows, v, bv, ov, j0, d.Tk, d.Dv);
    __syncthreads();
}

/* A row's columns c = t + TPR * m (< cols) of batch entry b, row i, from acc[m] (rounded
 * once to a bf16 S). */
template <typename T, int TPR, int PER, typename S>
__device__ __forceinline__ void store_row(S *out, const rmk_att_lead &lead,
                                          const rmk_att_operand &o, int64_t b, int64_t i, int t,
                                          int64_t cols, const T *acc) {
    const int64_t bo = rmk_att_boff(&lead, &o, b);
#pragma unroll
    for (int m = 0; m < PER; m++) {
        const int c = t + TPR * m;
        if (c < cols) rmk_put(out + bo + i * o.rs + c * o.cs, acc[m]);
    }
}

/* The kernels are templated on the operands' storage S (float, double, rmk_bf16) and
 * compute in T = rmk_compute<S> (bf16: f32 tiles, scores, softmax, accumulators, the lse and
 * delta in f32; q, k, v, dO widened as they are loaded, y, dq, dk, dv rounded once as they
 * are stored — the cpu's bf16 attention without bf16 GEMMs, docs/autocast.md). */
#define RMK_ATT_T typename rmk_compute<S>::type

/* ---- forward ------------------------------------------------------------------------------- */
template <typename S, int HD, typename T = RMK_ATT_T>
__global__ void __launch_bounds__(att_cfg<RMK_ATT_T, HD>::NT)
    att_fwd(const __grid_constant__ rmk_att_dims d, const __grid_constant__ rmk_att_lead lead,
            const __grid_constant__ rmk_att_operand oq, const S *q,
            const __grid_constant__ rmk_att_operand ok, const S *k,
            const __grid_constant__ rmk_att_operand ov, const S *v,
            const __grid_constant__ rmk_att_operand oy, S *y, T *lse) {
    typedef att_cfg<T, HD> C;
    extern __shared__ __align__(16) unsigned char smem_raw[];
    T *Qs = (T *)smem_raw;      /* BQ x LD */
    T *Ks = Qs + C::BQ * C::LD; /* BK x LD */
    T *Vs = Ks + C::BK * C::LD; /* BK x LD */
    T *Ss = Vs + C::BK * C::LD; /* BQ x (BK + 1): scores, then probabilities */
    const int r = threadIdx.x / C::TPR, t = threadIdx.x % C::TPR;
    const int64_t nqb = (d.Tq + C::BQ - 1) / C::BQ;
    const T scale = (T)d.scale;
    for (int64_t item = blockIdx.x; item < d.nb * nqb; item += gridDim.x) {
        /* heaviest (last, under the causal mask) query tiles first */
        const int64_t b = item / nqb, i0 = (nqb - 1 - item % nqb) * C::BQ, i = i0 + r;
        const int64_t bq = rmk_att_boff(&lead, &oq, b), bk = rmk_att_boff(&lead, &ok, b),
                      bv = rmk_att_boff(&lead, &ov, b);
        const int64_t kn = att_key_end<C::BQ>(d, i0);
        __syncthreads(); /* the previous item is done with the tiles */
        load_tile<T, HD, C::NT>(Qs, C::BQ, q, bq, oq, i0, d.Tq, d.D);
        T o[C::PER];
#pragma unroll
        for (int m = 0; m < C::PER; m++) o[m] = 0;
        T mrun = (T)-INFINITY, l = 0, sub = 0;
        for (int64_t j0 = 0; j0 < kn; j0 += C::BK) {
            load_kv<T, HD, C::NT>(Ks, Vs, C::BK, d, k, bk, ok, v, bv, ov, j0);
            T *sr = Ss + r * (C::BK + 1);
            T qk[C::NKT]; /* this thread's keys jj = t + TPR·u */
            dot_rows<T, HD, C::LD, C::TPR, C::NKT>(qk, Qs + r * C::LD, Ks, t);
            T mloc = (T)-INFINITY;
#pragma unroll
            for (int u = 0; u < C::NKT; u++) {
                const int jj = t + C::TPR * u;
                const T sv = att_visible(d, i, j0 + jj) ? scale * qk[u] : (T)-INFINITY;
                sr[jj] = sv;
                mloc = rmk_nanmax(mloc, sv);
            }
            const T mnew = rmk_nanmax(mrun, rmk_group_max(mloc, C::TPR));
            const T nsub =
                mnew == (T)-INFINITY ? (T)0 : mnew; /* nothing seen yet: avoid inf - inf */
            const T corr = rmk_exp(mrun - nsub);
            T lloc = 0;
            for (int jj = t; jj < C::BK; jj += C::TPR) {
                T p = rmk_exp(sr[jj] - nsub);
                sr[jj] = p;
                lloc += p;
            }
            l = l * corr + rmk_group_sum(lloc, C::TPR);
            __syncwarp();
#pragma unroll
            for (int m = 0; m < C::PER; m++) o[m] *= corr;
            for (int jj = 0; jj < C::BK; jj++) {
                const T p = sr[jj];
#pragma unroll
                for (int m = 0; m < C::PER; m++)
                    o[m] = rmk_fma(p, Vs[jj * C::LD + t + C::TPR * m], o[m]);
            }
            __syncwarp(); /* the group is done reading sr before the next tile writes it */
            mrun = mnew;
            sub = nsub;
        }
        if (i < d.Tq) {
            const T inv = l > 0 ? (T)1 / l : (T)0; /* no keys: an empty sum, y = 0 */
#pragma unroll
            for (int m = 0; m < C::PER; m++) o[m] *= inv;
            store_row<T, C::TPR, C::PER>(y, lead, oy, b, i, t, d.Dv, o);
            if (t == 0) lse[b * d.Tq + i] = l > 0 ? sub + rmk_log(l) : (T)-INFINITY;
        }
    }
}

/* ---- backward: delta and dQ, by query tiles ------------------------------------------------ */
template <typename S, int HD, typename T = RMK_ATT_T>
__global__ void __launch_bounds__(att_cfg<RMK_ATT_T, HD>::NT)
    att_bwd_dq(const __grid_constant__ rmk_att_dims d, const __grid_constant__ rmk_att_lead lead,
               const __grid_constant__ rmk_att_operand oq, const S *q,
               const __grid_constant__ rmk_att_operand ok, const S *k,
               const __grid_constant__ rmk_att_operand ov, const S *v,
               const __grid_constant__ rmk_att_operand oy, const S *y,
               const __grid_constant__ rmk_att_operand og, const S *gy,
               const __grid_constant__ rmk_att_operand odq, S *dq, const T *lse, T *delta) {
    typedef att_cfg<T, HD> C;
    extern __shared__ __align__(16) unsigned char smem_raw[];
    T *Qs = (T *)smem_raw;      /* BQ x LD */
    T *Gs = Qs + C::BQ * C::LD; /* BQ x LD: dO */
    T *Ks = Gs + C::BQ * C::LD; /* BK x LD */
    T *Vs = Ks + C::BK * C::LD; /* BK x LD */
    T *Ss = Vs + C::BK * C::LD; /* BQ x (BK + 1): dS */
    const int r = threadIdx.x / C::TPR, t = threadIdx.x % C::TPR;
    const int64_t nqb = (d.Tq + C::BQ - 1) / C::BQ;
    const T scale = (T)d.scale;
    for (int64_t item = blockIdx.x; item < d.nb * nqb; item += gridDim.x) {
        const int64_t b = item / nqb, i0 = (nqb - 1 - item % nqb) * C::BQ, i = i0 + r;
        const int64_t bq = rmk_att_boff(&lead, &oq, b), bk = rmk_att_boff(&lead, &ok, b),
                      bv = rmk_att_boff(&lead, &ov, b), bg = rmk_att_boff(&lead, &og, b),
                      by = rmk_att_boff(&lead, &oy, b);
        const int64_t kn = att_key_end<C::BQ>(d, i0);
        __syncthreads();
        load_tile<T, HD, C::NT>(Qs, C::BQ, q, bq, oq, i0, d.Tq, d.D);
        load_tile<T, HD, C::NT>(Gs, C::BQ, gy, bg, og, i0, d.Tq, d.Dv);
        __syncthreads();
        /* delta_i = sum_c dO[i, c] * y[i, c] */
        T dl = 0;
        if (i < d.Tq)
            for (int c = t; c < d.Dv; c += C::TPR)
                dl += Gs[r * C::LD + c] * (T)rmk_ld(y[by + i * oy.rs + c * oy.cs]);
        dl = rmk_group_sum(dl, C::TPR);
        if (i < d.Tq && t == 0) delta[b * d.Tq + i] = dl;
        if (!dq) continue; /* uniform: every thread of the block skips */
        const T li = att_row_lse(d, lse, b, i);
        T acc[C::PER];
#pragma unroll
        for (int m = 0; m < C::PER; m++) acc[m] = 0;
        for (int64_t j0 = 0; j0 < kn; j0 += C::BK) {
            load_kv<T, HD, C::NT>(Ks, Vs, C::BK, d, k, bk, ok, v, bv, ov, j0);
            T *sr = Ss + r * (C::BK + 1);
            T qk[C::NKT], dp[C::NKT]; /* this thread's keys jj = t + TPR·u */
            dot_rows<T, HD, C::LD, C::TPR, C::NKT>(qk, Qs + r * C::LD, Ks, t);
            dot_rows<T, HD, C::LD, C::TPR, C::NKT>(dp, Gs + r * C::LD, Vs, t);
#pragma unroll
            for (int u = 0; u < C::NKT; u++) {
                const int jj = t + C::TPR * u;
                T ds = 0;
                if (att_visible(d, i, j0 + jj)) {
                    const T p = rmk_exp(scale * qk[u] - li);
                    ds = p * (dp[u] - dl) * scale;
                }
                sr[jj] = ds;
            }
            __syncwarp();
            for (int jj = 0; jj < C::BK; jj++) {
                const T ds = sr[jj];
#pragma unroll
                for (int m = 0; m < C::PER; m++)
                    acc[m] = rmk_fma(ds, Ks[jj * C::LD + t + C::TPR * m], acc[m]);
            }
            __syncwarp();
        }
        if (i < d.Tq) store_row<T, C::TPR, C::PER>(dq, lead, odq, b, i, t, d.D, acc);
    }
}

/* ---- backward: dK and dV, by key tiles ----------------------------------------------------- */
template <typename S, int HD, typename T = RMK_ATT_T>
__global__ void __launch_bounds__(att_cfg<RMK_ATT_T, HD>::NT)
    att_bwd_dkdv(const __grid_constant__ rmk_att_dims d, const __grid_constant__ rmk_att_lead lead,
                 const __grid_constant__ rmk_att_operand oq, const S *q,
                 const __grid_constant__ rmk_att_operand ok, const S *k,
                 const __grid_constant__ rmk_att_operand ov, const S *v,
                 const __grid_constant__ rmk_att_operand og, const S *gy,
                 const __grid_constant__ rmk_att_operand odk, S *dk,
                 const __grid_constant__ rmk_att_operand odv, S *dv, const T *lse, const T *delta) {
    typedef att_cfg<T, HD> C;
    constexpr int BKV = C::BQ, BQ2 = C::BK; /* keys per block, queries per tile */
    extern __shared__ __align__(16) unsigned char smem_raw[];
    T *Ks = (T *)smem_raw;        /* BKV x LD */
    T *Vs = Ks + BKV * C::LD;     /* BKV x LD */
    T *Qs = Vs + BKV * C::LD;     /* BQ2 x LD */
    T *Gs = Qs + BQ2 * C::LD;     /* BQ2 x LD */
    T *Ps = Gs + BQ2 * C::LD;     /* BKV x (BQ2 + 1) */
    T *Ds = Ps + BKV * (BQ2 + 1); /* BKV x (BQ2 + 1) */
    T *Ls = Ds + BKV * (BQ2 + 1); /* BQ2: lse */
    T *Dl = Ls + BQ2;             /* BQ2: delta */
    const int r = threadIdx.x / C::TPR, t = threadIdx.x % C::TPR;
    const int64_t nkb = (d.Tk + BKV - 1) / BKV, nkv = d.nb / d.group;
    const T scale = (T)d.scale;
    for (int64_t item = blockIdx.x; item < nkv * nkb; item += gridDim.x) {
        /* causal: the first key tiles see the most queries: heaviest first. The item is a
         * kv entry's key tile; its query heads b0 .. b0 + group - 1 add to it in turn. */
        const int64_t b0 = (item / nkb) * d.group, j0 = (item % nkb) * BKV, j = j0 + r;
        const int64_t bk = rmk_att_boff(&lead, &ok, b0), bv = rmk_att_boff(&lead, &ov, b0);
        __syncthreads();
        load_tile<T, HD, C::NT>(Ks, BKV, k, bk, ok, j0, d.Tk, d.D);
        load_tile<T, HD, C::NT>(Vs, BKV, v, bv, ov, j0, d.Tk, d.Dv);
        T ak[C::PER], av[C::PER];
#pragma unroll
        for (int m = 0; m < C::PER; m++) ak[m] = av[m] = 0;
        /* the first query that sees key j0 is j0 - off */
        const int64_t qfirst = d.causal ? j0 - d.off : 0;
        const int64_t qstart = qfirst > 0 ? (qfirst / BQ2) * BQ2 : 0;
        for (int64_t b = b0; b < b0 + d.group; b++) {
            const int64_t bq = rmk_att_boff(&lead, &oq, b), bg = rmk_att_boff(&lead, &og, b);
            for (int64_t i0 = qstart; i0 < d.Tq; i0 += BQ2) {
                __syncthreads();
                load_tile<T, HD, C::NT>(Qs, BQ2, q, bq, oq, i0, d.Tq, d.D);
                load_tile<T, HD, C::NT>(Gs, BQ2, gy, bg, og, i0, d.Tq, d.Dv);
                for (int e = threadIdx.x; e < BQ2; e += C::NT) {
                    const int64_t i = i0 + e;
                    Ls[e] = att_row_lse(d, lse, b, i);
                    Dl[e] = i < d.Tq ? delta[b * d.Tq + i] : (T)0;
                }
                __syncthreads();
                T *pr = Ps + r * (BQ2 + 1), *dr = Ds + r * (BQ2 + 1);
                T qk[C::NKT], dp[C::NKT]; /* this thread's queries ii = t + TPR·u */
                dot_rows<T, HD, C::LD, C::TPR, C::NKT>(qk, Ks + r * C::LD, Qs, t);
                dot_rows<T, HD, C::LD, C::TPR, C::NKT>(dp, Vs + r * C::LD, Gs, t);
#pragma unroll
                for (int u = 0; u < C::NKT; u++) {
                    const int ii = t + C::TPR * u;
                    T p = 0, ds = 0;
                    if (att_visible(d, i0 + ii, j)) {
                        p = rmk_exp(scale * qk[u] - Ls[ii]);
                        ds = p * (dp[u] - Dl[ii]) * scale;
                    }
                    pr[ii] = p;
                    dr[ii] = ds;
                }
                __syncwarp();
                for (int ii = 0; ii < BQ2; ii++) {
                    const T p = pr[ii], ds = dr[ii];
#pragma unroll
                    for (int m = 0; m < C::PER; m++) {
                        const int c = t + C::TPR * m;
                        av[m] = rmk_fma(p, Gs[ii * C::LD + c], av[m]);
                        ak[m] = rmk_fma(ds, Qs[ii * C::LD + c], ak[m]);
                    }
                }
                __syncwarp();
            }
        }
        if (j < d.Tk && dk) store_row<T, C::TPR, C::PER>(dk, lead, odk, b0, j, t, d.D, ak);
        if (j < d.Tk && dv) store_row<T, C::TPR, C::PER>(dv, lead, odv, b0, j, t, d.Dv, av);
    }
}

/* ---- launchers ----------------------------------------------------------------------------- */
template <typename T, int HD> static size_t fwd_smem() {
    typedef att_cfg<T, HD> C;
    return sizeof(T) * (size_t)((C::BQ + 2 * C::BK) * C::LD + C::BQ * (C::BK + 1));
}
template <typename T, int HD> static size_t dq_smem() {
    typedef att_cfg<T, HD> C;
    return sizeof(T) * (size_t)((2 * C::BQ + 2 * C::BK) * C::LD + C::BQ * (C::BK + 1));
}
template <typename T, int HD> static size_t dkdv_smem() {
    typedef att_cfg<T, HD> C;
    return sizeof(T) *
           (size_t)((2 * C::BQ + 2 * C::BK) * C::LD + 2 * C::BQ * (C::BK + 1) + 2 * C::BK);
}

/* Lets kernel `f` use sm bytes of dynamic shared memory (beyond the default 48 KiB). */
template <typename F> static cudaError_t att_smem(F *f, size_t sm) {
    return cudaFuncSetAttribute(f, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)sm);
}

/* Blocks for n items: enough to fill the GPU several times over, capped. */
static unsigned att_grid(int64_t n) {
    if (n <= 0) return 0;
    return (unsigned)(n < 1048576 ? n : 1048576);
}

template <typename S, int HD>
static cudaError_t fwd_t(const rmk_att_dims *d, const rmk_att_lead *lead, const rmk_att_operand *oq,
                         const void *q, const rmk_att_operand *ok, const void *k,
                         const rmk_att_operand *ov, const void *v, const rmk_att_operand *oy,
                         void *y, void *lse, cudaStream_t s) {
    typedef typename rmk_compute<S>::type T;
    typedef att_cfg<T, HD> C;
    unsigned grid = att_grid(d->nb * ((d->Tq + C::BQ - 1) / C::BQ));
    if (grid == 0) return cudaSuccess;
    size_t sm = fwd_smem<T, HD>();
    cudaError_t e = att_smem(att_fwd<S, HD>, sm);
    if (e != cudaSuccess) return e;
    att_fwd<S, HD><<<grid, C::NT, sm, s>>>(*d, *lead, *oq, (const S *)q, *ok, (const S *)k, *ov,
                                           (const S *)v, *oy, (S *)y, (T *)lse);
    return cudaGetLastError();
}

template <typename S, int HD>
static cudaError_t bwd_t(const rmk_att_dims *d, const rmk_att_lead *lead, const rmk_att_operand *o,
                         const void *const *p, const void *lse, void *ws, cudaStream_t s) {
    typedef typename rmk_compute<S>::type T;
    typedef att_cfg<T, HD> C;
    T *delta = (T *)ws;
    unsigned g1 = att_grid(d->nb * ((d->Tq + C::BQ - 1) / C::BQ));
    if (g1 > 0) { /* delta always (dK needs it), dQ when wanted */
        size_t sm = dq_smem<T, HD>();
        cudaError_t e = att_smem(att_bwd_dq<S, HD>, sm);
        if (e != cudaSuccess) return e;
        att_bwd_dq<S, HD><<<g1, C::NT, sm, s>>>(
            *d, *lead, o[0], (const S *)p[0], o[1], (const S *)p[1], o[2], (const S *)p[2], o[3],
            (const S *)p[3], o[4], (const S *)p[4], o[5], (S *)p[5], (const T *)lse, delta);
        e = cudaGetLastError();
        if (e != cudaSuccess) return e;
    }
    unsigned g2 = att_grid(d->nb / d->group * ((d->Tk + C::BQ - 1) / C::BQ));
    if (g2 > 0 && (p[6] || p[7])) {
        size_t sm = dkdv_smem<T, HD>();
        cudaError_t e = att_smem(att_bwd_dkdv<S, HD>, sm);
        if (e != cudaSuccess) return e;
        att_bwd_dkdv<S, HD><<<g2, C::NT, sm, s>>>(
            *d, *lead, o[0], (const S *)p[0], o[1], (const S *)p[1], o[2], (const S *)p[2], o[4],
            (const S *)p[4], o[6], (S *)p[6], o[7], (S *)p[7], (const T *)lse, delta);
    }
    return cudaGetLastError();
}

/* The launcher K<S, HD>::run for storage dtype dt (0 f32, 1 f64, 4 bf16) and head class hd. */
template <typename S, template <typename, int> class K, typename... A>
static cudaError_t att_by_class(int hd, A... a) {
    switch (hd) {
    case 32: return K<S, 32>::run(a...);
    case 64: return K<S, 64>::run(a...);
    case 128: return K<S, 128>::run(a...);
    case 256: return K<S, 256>::run(a...);
    }
    return cudaErrorInvalidValue;
}
template <template <typename, int> class K, typename... A>
static cudaError_t att_dispatch(int dt, int hd, A... a) {
    switch (dt) {
    case 0: return att_by_class<float, K>(hd, a...);
    case 1: return att_by_class<double, K>(hd, a...);
    case 4: return att_by_class<rmk_bf16, K>(hd, a...);
    }
    return cudaErrorInvalidValue;
}
template <typename S, int HD> struct att_fwd_k {
    template <typename... A> static cudaError_t run(A... a) { return fwd_t<S, HD>(a...); }
};
template <typename S, int HD> struct att_bwd_k {
    template <typename... A> static cudaError_t run(A... a) { return bwd_t<S, HD>(a...); }
};

/* Whether f32 and bf16 attention run on the tensor cores (attention_mma.cu: sm_80 and later,
 * head sizes up to 128): yes unless REMAT_CUDA_ATTENTION=simt asks for these CUDA-core kernels
 * (a diagnostic: the two side by side in `remat bench --profile`). The tensor-core path passed
 * every device suite and fixture on an H200 (bench/results/2026-11-27-h200-window4). */
static bool use_tc(int dt, int hd) {
    static int simt = -1;
    if (simt < 0) {
        const char *e = getenv("REMAT_CUDA_ATTENTION");
        simt = e && strcmp(e, "simt") == 0;
    }
    return !simt && rmk_attention_tc_ok(dt, hd);
}

extern "C" cudaError_t
rmk_attention(int dt, const rmk_att_dims *d, const rmk_att_lead *lead, const rmk_att_operand *oq,
              const void *q, const rmk_att_operand *ok, const void *k, const rmk_att_operand *ov,
              const void *v, const rmk_att_operand *oy, void *y, void *lse, cudaStream_t s) {
    int hd = rmk_att_head_class(d->D, d->Dv);
    if (use_tc(dt, hd))
        return rmk_attention_tc(dt, hd, d, lead, oq, q, ok, k, ov, v, oy, y, lse, s);
    return att_dispatch<att_fwd_k>(dt, hd, d, lead, oq, q, ok, k, ov, v, oy, y, lse, s);
}

extern "C" size_t rmk_attention_bwd_ws(int dt, const rmk_att_dims *d) {
    size_t es = dt == 1 ? sizeof(double) : sizeof(float); /* delta: f32 for f32 and bf16 */
    int64_t n = d->nb * d->Tq;
    const size_t delta = (size_t)(n > 0 ? n : 1) * es;
    const int hd = rmk_att_head_class(d->D, d->Dv);
    if (!use_tc(dt, hd)) return delta;
    const size_t tc = rmk_attention_tc_bwd_ws(dt, hd, d); /* the fused variant's sums */
    return tc > delta ? tc : delta;
}

extern "C" cudaError_t rmk_attention_bwd(int dt, const rmk_att_dims *d, const rmk_att_lead *lead,
                                         const rmk_att_operand *ops, const void *const *ptrs,
                                         const void *lse, void *ws, cudaStream_t s) {
    int hd = rmk_att_head_class(d->D, d->Dv);
    if (use_tc(dt, hd)) return rmk_attention_tc_bwd(dt, hd, d, lead, ops, ptrs, lse, ws, s);
    return att_dispatch<att_bwd_k>(dt, hd, d, lead, ops, ptrs, lse, ws, s);
}
