/* src/backends/cuda/attention_mma.cu — bf16 fused attention on the tensor cores
 * (mma.sync m16n8k16, bf16 operands, f32 accumulation; sm_80 and later), forward
 * and backward, for head sizes up to 128. attention.cu's tiled CUDA-core kernels
 * stay for f32, f64, head sizes up to 256 and GPUs before sm_80; the math and
 * the tiling are theirs (FlashAttention-2: online softmax forward keeping the
 * rows' lse; backward without atomics: dQ by query tiles, dK and dV by key
 * tiles), only the products run on the tensor cores:
 *
 *   forward   S = Q·Kᵀ (f32), P = exp(scale·S − m) in f32, rounded to bf16 for
 *             O += P·V; l sums the unrounded P; y = O / l rounded once.
 *   backward  P = exp(scale·S − lse), dP = dO·Vᵀ, dS = P ∘ (dP − delta) · scale
 *             in f32, P and dS rounded to bf16 for dV += Pᵀ·dO, dK += dSᵀ·Q,
 *             dQ += dS·K; delta = rowsum(dO ∘ y) in f32.
 * This is what cpu's bf16 attention does with oneDNN's bf16 GEMMs (P and dS
 * rounded to bf16 as GEMM operands, src/backends/cpu/attention.c) and what
 * FlashAttention does; results are deterministic (fixed order, no atomics).
 *
 * A block has 4 warps; a warp owns 16 rows of its tile (query rows forward and
 * for dQ, key rows for dK/dV), so the row statistics of the online softmax are
 * reductions over the 4 threads of an mma quad. Tiles are bf16 in shared memory,
 * rows padded by 8 elements (16 bytes: the fragments' 32-bit loads and
 * ldmatrix's rows hit 32 different banks), zero-filled past the operands' ends.
 * A-operands (rows of the warp's tile) and B-operands read along a row of the
 * stored tile (Kᵀ, Vᵀ, Qᵀ, dOᵀ) are 32-bit loads; B-operands read down the
 * stored tile's columns (V in P·V, K in dS·K, dO in Pᵀ·dO, Q in dSᵀ·Q) come from
 * ldmatrix.trans. Accumulator fragments of S, P and dS become the next product's
 * A-operand in registers (the m16n8 C layout is the m16k16 A layout, two n-tiles
 * per k-step).
 *
 * Fragment layouts (PTX ISA, mma.m16n8k16 .bf16), lane = 4·g + t:
 *   A (16×16, row):  a[0] = (g, 2t..2t+1), a[1] = (g+8, 2t..), a[2] = (g, 2t+8..),
 *                    a[3] = (g+8, 2t+8..)
 *   B (16×8, col):   b[0] = (k 2t..2t+1, n g), b[1] = (k 2t+8.., n g)
 *   C (16×8, f32):   c[0], c[1] = (g, 2t), (g, 2t+1); c[2], c[3] = (g+8, 2t), (g+8, 2t+1) */
#include <cuda_bf16.h>
#include <string.h>

#include "kcommon.cuh"
#include "nn.h"

namespace {

/* Tiles of a head-size class: BR rows per block (4 warps × 16), BC columns of the other
 * operand per step (keys forward and for dQ, queries for dK/dV). dK/dV at 128 takes 32
 * queries a step, so that its two 16×128 accumulators and the step's scores stay in
 * registers. */
template <int HD> struct tc_cfg {
    static constexpr int NW = 4, NT = 32 * NW, BR = 16 * NW;
    static constexpr int BC = 64;                   /* keys per step (forward, dQ) */
    static constexpr int BCQ = HD >= 128 ? 32 : 64; /* queries per step (dK, dV) */
    static constexpr int LD = HD + 8;               /* smem row stride, elements */
    static constexpr int KS = HD / 16;              /* k-steps over the head dims */
    static constexpr int NDT = HD / 8;              /* n-tiles over the head dims */
    static_assert(HD % 16 == 0 && HD <= 128, "head class 32, 64 or 128");
    /* dynamic shared memory of each kernel, bytes */
    static constexpr size_t SM_FWD = 2 * (size_t)(BR + 2 * BC) * LD;
    static constexpr size_t SM_DQ = 2 * (size_t)(2 * BR + 2 * BC) * LD;
    static constexpr size_t SM_DKDV = 2 * (size_t)(2 * BR + 2 * BCQ) * LD + 4 * 2 * BCQ;
};

typedef unsigned short bf16_t;

/* ---- the tensor-core instructions ------------------------------------------------------ */
__device__ __forceinline__ void mma_bf16(float (&c)[4], const uint32_t (&a)[4], uint32_t b0,
                                         uint32_t b1) {
#if defined(RMK_EMU) /* tests/cuda_emu: the instruction carried out on the CPU */
    RMK_EMU_MMA(c, a, b0, b1);
#elif !defined(__CUDA_ARCH__) || __CUDA_ARCH__ >= 800
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 "
                 "{%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
                 : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
#else
    __trap(); /* the host launches these kernels on sm_80 and later only */
#endif
}

/* Four 8×8 bf16 matrices, transposed as they load: lane l gives the address of row l % 8
 * of matrix l / 8; register i gets matrix i's elements (2t, g) and (2t + 1, g). */
__device__ __forceinline__ void ldsm_x4_t(uint32_t (&r)[4], const bf16_t *row) {
#if defined(RMK_EMU)
    RMK_EMU_LDSM_X4_T(r, row);
#elif !defined(__CUDA_ARCH__) || __CUDA_ARCH__ >= 800
    const unsigned a = (unsigned)__cvta_generic_to_shared(row);
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(a));
#else
    (void)row;
    r[0] = r[1] = r[2] = r[3] = 0;
    __trap();
#endif
}

/* Two consecutive bf16 of a shared tile as one register (the lower column in the low half). */
__device__ __forceinline__ uint32_t ld_pair(const bf16_t *p) { return *(const uint32_t *)p; }

/* Two f32 rounded to bf16 (nearest, ties to even) and packed, lo in the low half. */
__device__ __forceinline__ uint32_t pack_bf16(float lo, float hi) {
    const __nv_bfloat162 h = __floats2bfloat162_rn(lo, hi);
    uint32_t u;
    memcpy(&u, &h, sizeof u); /* a register move on the GPU */
    return u;
}

/* The A-operand of k-step ks (columns 16ks..16ks+15) of the 16 rows at `rows` (stride ld). */
__device__ __forceinline__ void ld_a(uint32_t (&a)[4], const bf16_t *rows, int ld, int ks, int g,
                                     int t) {
    const bf16_t *p = rows + g * ld + ks * 16 + 2 * t;
    a[0] = ld_pair(p);
    a[1] = ld_pair(p + 8 * ld);
    a[2] = ld_pair(p + 8);
    a[3] = ld_pair(p + 8 * ld + 8);
}

/* c[n][..] += A(16 rows of `arows`, all HD columns) · Bᵀ where B is the 8·NN rows at `brows`
 * (the product of the warp's rows with NN·8 rows of another tile, over the head dims). */
template <int KS, int NN>
__device__ __forceinline__ void mma_rows_rowsT(float (&c)[NN][4], const bf16_t *arows,
                                               const bf16_t *brows, int ld, int g, int t) {
#pragma unroll
    for (int ks = 0; ks < KS; ks++) {
        uint32_t a[4];
        ld_a(a, arows, ld, ks, g, t);
#pragma unroll
        for (int n = 0; n < NN; n++) {
            const bf16_t *p = brows + (n * 8 + g) * ld + ks * 16 + 2 * t;
            mma_bf16(c[n], a, ld_pair(p), ld_pair(p + 8));
        }
    }
}

/* o[nd][..] += P · M where P (16 × 16·KK) is in accumulator fragments s[2kk], s[2kk+1]
 * (rounded to bf16 here) and M (16·KK rows × HD) is a shared tile read down its columns. */
template <int KK, int NDT>
__device__ __forceinline__ void mma_frag_rows(float (&o)[NDT][4], const float (&s)[2 * KK][4],
                                              const bf16_t *m, int ld, int lane) {
#pragma unroll
    for (int kk = 0; kk < KK; kk++) {
        uint32_t a[4];
        a[0] = pack_bf16(s[2 * kk][0], s[2 * kk][1]);
        a[1] = pack_bf16(s[2 * kk][2], s[2 * kk][3]);
        a[2] = pack_bf16(s[2 * kk + 1][0], s[2 * kk + 1][1]);
        a[3] = pack_bf16(s[2 * kk + 1][2], s[2 * kk + 1][3]);
        /* lane's row of the four 8×8 matrices: rows kk·16 + (lane & 15), columns
         * 8·(lane >> 4) of each pair of n-tiles */
        const bf16_t *row =
            m + (kk * 16 + (lane & 7) + ((lane >> 3) & 1) * 8) * ld + (lane >> 4) * 8;
#pragma unroll
        for (int nd = 0; nd < NDT; nd += 2) {
            uint32_t b[4];
            ldsm_x4_t(b, row + nd * 8);
            mma_bf16(o[nd], a, b[0], b[1]);
            mma_bf16(o[nd + 1], a, b[2], b[3]);
        }
    }
}

/* rows [r0, r0 + rows) × HD of a bf16 operand into a shared tile (row stride LD), zero past
 * rmax rows and `cols` columns. vec: the operand's columns are contiguous and every row
 * starts 16-byte aligned, with cols % 8 == 0 (8 elements a load). */
template <int HD, int NT>
__device__ __forceinline__ void tc_load(bf16_t *sm, int rows, const bf16_t *base, int64_t boff,
                                        const rmk_att_operand &op, int64_t r0, int64_t rmax,
                                        int64_t cols, bool vec) {
    constexpr int LD = HD + 8;
    if (vec) {
        constexpr int CPR = HD / 8;
        for (int e = threadIdx.x; e < rows * CPR; e += NT) {
            const int rr = e / CPR, c = (e % CPR) * 8;
            const int64_t r = r0 + rr;
            uint4 v = make_uint4(0, 0, 0, 0);
            if (r < rmax && c < cols) v = *(const uint4 *)(base + boff + r * op.rs + c);
            *(uint4 *)(sm + rr * LD + c) = v;
        }
        return;
    }
    for (int e = threadIdx.x; e < rows * HD; e += NT) {
        const int rr = e / HD, c = e % HD;
        const int64_t r = r0 + rr;
        sm[rr * LD + c] = (r < rmax && c < cols) ? base[boff + r * op.rs + c * op.cs] : (bf16_t)0;
    }
}

/* Rows ra (the fragment's g rows) and ra + 8 of a warp's 16 × HD accumulators, scaled by
 * sc[0] / sc[1], rounded once into the operand (columns < cols, rows < rmax). */
template <int NDT>
__device__ __forceinline__ void tc_store(bf16_t *out, int64_t bo, const rmk_att_operand &o,
                                         int64_t ra, int64_t rmax, int64_t cols,
                                         const float (&acc)[NDT][4], const float (&sc)[2], int t) {
#pragma unroll
    for (int h = 0; h < 2; h++) {
        const int64_t r = ra + 8 * h;
        if (r >= rmax) continue;
#pragma unroll
        for (int nd = 0; nd < NDT; nd++)
#pragma unroll
            for (int e = 0; e < 2; e++) {
                const int c = nd * 8 + 2 * t + e;
                if (c < cols)
                    out[bo + r * o.rs + c * o.cs] = rmk_f32_to_bf16(acc[nd][2 * h + e] * sc[h]);
            }
    }
}

__device__ __forceinline__ bool tc_visible(const rmk_att_dims &d, int64_t i, int64_t j) {
    return i < d.Tq && j < d.Tk && (!d.causal || j <= i + d.off);
}

/* Max / sum over the 4 lanes of an mma quad (the lanes holding one accumulator row). */
__device__ __forceinline__ float quad_max(float v) {
    v = rmk_nanmax(v, __shfl_xor_sync(0xffffffffu, v, 1));
    return rmk_nanmax(v, __shfl_xor_sync(0xffffffffu, v, 2));
}
__device__ __forceinline__ float quad_sum(float v) {
    v += __shfl_xor_sync(0xffffffffu, v, 1);
    return v + __shfl_xor_sync(0xffffffffu, v, 2);
}

/* Operand flags: bit i set when operand i may be loaded 8 elements at a time. */
struct tc_ops {
    unsigned vec;
};

/* Whether operand o of pointer p (cols wide, over `lead`) may be loaded 8 elements at a
 * time: contiguous columns, 16-byte aligned rows in every batch entry. */
bool tc_vec(const void *p, const rmk_att_operand &o, const rmk_att_lead &lead, int64_t cols) {
    if (!p || ((uintptr_t)p & 15) || cols % 8 || (o.cs != 1 && cols > 1) || o.rs % 8) return false;
    for (int i = 0; i < lead.nlead; i++)
        if (o.bst[i] % 8) return false;
    return true;
}

} // namespace

/* ---- forward --------------------------------------------------------------------------- */
template <int HD>
__global__ void __launch_bounds__(tc_cfg<HD>::NT)
    tc_att_fwd(const __grid_constant__ rmk_att_dims d, const __grid_constant__ rmk_att_lead lead,
               const __grid_constant__ rmk_att_operand oq, const bf16_t *q,
               const __grid_constant__ rmk_att_operand ok, const bf16_t *k,
               const __grid_constant__ rmk_att_operand ov, const bf16_t *v,
               const __grid_constant__ rmk_att_operand oy, bf16_t *y, float *lse, tc_ops f) {
    typedef tc_cfg<HD> C;
    extern __shared__ __align__(16) unsigned char smem_raw[];
    bf16_t *Qs = (bf16_t *)smem_raw; /* BR × LD */
    bf16_t *Ks = Qs + C::BR * C::LD; /* BC × LD */
    bf16_t *Vs = Ks + C::BC * C::LD; /* BC × LD */
    const int lane = threadIdx.x & 31, w = threadIdx.x >> 5, g = lane >> 2, t = lane & 3;
    const int64_t nqb = (d.Tq + C::BR - 1) / C::BR;
    const float sl2 = (float)d.scale * 1.4426950408889634f; /* scale · log2(e) */
    for (int64_t item = blockIdx.x; item < d.nb * nqb; item += gridDim.x) {
        /* heaviest (last, under the causal mask) query tiles first */
        const int64_t b = item / nqb, i0 = (nqb - 1 - item % nqb) * C::BR;
        const int64_t ra = i0 + w * 16 + g; /* this thread's rows: ra, ra + 8 */
        const int64_t bq = rmk_att_boff(&lead, &oq, b), bk = rmk_att_boff(&lead, &ok, b),
                      bv = rmk_att_boff(&lead, &ov, b);
        int64_t kn = d.Tk; /* the keys the tile's last row sees */
        if (d.causal) {
            const int64_t n = i0 + C::BR + d.off;
            kn = n < 0 ? 0 : n < d.Tk ? n : d.Tk;
        }
        __syncthreads(); /* the previous item is done with the tiles */
        tc_load<HD, C::NT>(Qs, C::BR, q, bq, oq, i0, d.Tq, d.D, f.vec & 1);
        float o[C::NDT][4];
#pragma unroll
        for (int n = 0; n < C::NDT; n++) o[n][0] = o[n][1] = o[n][2] = o[n][3] = 0.f;
        float m2[2] = {-INFINITY, -INFINITY}, l[2] = {0.f, 0.f}; /* m2: max in log2 units */
        for (int64_t j0 = 0; j0 < kn; j0 += C::BC) {
            __syncthreads();
            tc_load<HD, C::NT>(Ks, C::BC, k, bk, ok, j0, d.Tk, d.D, f.vec & 2);
            tc_load<HD, C::NT>(Vs, C::BC, v, bv, ov, j0, d.Tk, d.Dv, f.vec & 4);
            __syncthreads();
            float s[C::BC / 8][4];
#pragma unroll
            for (int n = 0; n < C::BC / 8; n++) s[n][0] = s[n][1] = s[n][2] = s[n][3] = 0.f;
            mma_rows_rowsT<C::KS, C::BC / 8>(s, Qs + w * 16 * C::LD, Ks, C::LD, g, t);
            /* scaled to log2 units, masked; the rows' maxima */
            float mx[2] = {-INFINITY, -INFINITY};
#pragma unroll
            for (int n = 0; n < C::BC / 8; n++)
#pragma unroll
                for (int e = 0; e < 4; e++) {
                    const int64_t i = ra + (e >> 1) * 8, j = j0 + n * 8 + 2 * t + (e & 1);
                    const float sv = tc_visible(d, i, j) ? s[n][e] * sl2 : -INFINITY;
                    s[n][e] = sv;
                    mx[e >> 1] = rmk_nanmax(mx[e >> 1], sv);
                }
            float sub[2], corr[2], ls[2] = {0.f, 0.f};
#pragma unroll
            for (int h = 0; h < 2; h++) {
                const float mnew = rmk_nanmax(m2[h], quad_max(mx[h]));
                sub[h] = mnew == -INFINITY ? 0.f : mnew; /* nothing seen yet: no inf - inf */
                corr[h] = exp2f(m2[h] - sub[h]);
                m2[h] = mnew;
            }
#pragma unroll
            for (int n = 0; n < C::BC / 8; n++)
#pragma unroll
                for (int e = 0; e < 4; e++) {
                    const float p = exp2f(s[n][e] - sub[e >> 1]);
                    s[n][e] = p;
                    ls[e >> 1] += p;
                }
#pragma unroll
            for (int h = 0; h < 2; h++) l[h] = l[h] * corr[h] + quad_sum(ls[h]);
#pragma unroll
            for (int n = 0; n < C::NDT; n++) {
                o[n][0] *= corr[0];
                o[n][1] *= corr[0];
                o[n][2] *= corr[1];
                o[n][3] *= corr[1];
            }
            mma_frag_rows<C::BC / 16, C::NDT>(o, s, Vs, C::LD, lane);
        }
        float inv[2];
#pragma unroll
        for (int h = 0; h < 2; h++) inv[h] = l[h] > 0.f ? 1.f / l[h] : 0.f; /* no keys: y = 0 */
        tc_store<C::NDT>(y, rmk_att_boff(&lead, &oy, b), oy, ra, d.Tq, d.Dv, o, inv, t);
        if (t == 0)
#pragma unroll
            for (int h = 0; h < 2; h++) {
                const int64_t i = ra + 8 * h;
                const float m = m2[h] == -INFINITY ? 0.f : m2[h];
                if (i < d.Tq)
                    lse[b * d.Tq + i] =
                        l[h] > 0.f ? (m + log2f(l[h])) * 0.6931471805599453f : -INFINITY;
            }
    }
}

/* ---- backward: delta and dQ, by query tiles -------------------------------------------- */
template <int HD>
__global__ void __launch_bounds__(tc_cfg<HD>::NT)
    tc_att_bwd_dq(const __grid_constant__ rmk_att_dims d, const __grid_constant__ rmk_att_lead lead,
                  const __grid_constant__ rmk_att_operand oq, const bf16_t *q,
                  const __grid_constant__ rmk_att_operand ok, const bf16_t *k,
                  const __grid_constant__ rmk_att_operand ov, const bf16_t *v,
                  const __grid_constant__ rmk_att_operand oy, const bf16_t *y,
                  const __grid_constant__ rmk_att_operand og, const bf16_t *gy,
                  const __grid_constant__ rmk_att_operand odq, bf16_t *dq, const float *lse,
                  float *delta, tc_ops f) {
    typedef tc_cfg<HD> C;
    extern __shared__ __align__(16) unsigned char smem_raw[];
    bf16_t *Qs = (bf16_t *)smem_raw; /* BR × LD */
    bf16_t *Gs = Qs + C::BR * C::LD; /* BR × LD: dO */
    bf16_t *Ks = Gs + C::BR * C::LD; /* BC × LD */
    bf16_t *Vs = Ks + C::BC * C::LD; /* BC × LD */
    const int lane = threadIdx.x & 31, w = threadIdx.x >> 5, g = lane >> 2, t = lane & 3;
    const int64_t nqb = (d.Tq + C::BR - 1) / C::BR;
    const float sl2 = (float)d.scale * 1.4426950408889634f, scale = (float)d.scale;
    for (int64_t item = blockIdx.x; item < d.nb * nqb; item += gridDim.x) {
        const int64_t b = item / nqb, i0 = (nqb - 1 - item % nqb) * C::BR;
        const int64_t ra = i0 + w * 16 + g;
        const int64_t bq = rmk_att_boff(&lead, &oq, b), bk = rmk_att_boff(&lead, &ok, b),
                      bv = rmk_att_boff(&lead, &ov, b), bg = rmk_att_boff(&lead, &og, b),
                      by = rmk_att_boff(&lead, &oy, b);
        int64_t kn = d.Tk;
        if (d.causal) {
            const int64_t n = i0 + C::BR + d.off;
            kn = n < 0 ? 0 : n < d.Tk ? n : d.Tk;
        }
        __syncthreads();
        tc_load<HD, C::NT>(Qs, C::BR, q, bq, oq, i0, d.Tq, d.D, f.vec & 1);
        tc_load<HD, C::NT>(Gs, C::BR, gy, bg, og, i0, d.Tq, d.Dv, f.vec & 8);
        __syncthreads();
        /* delta_i = sum_c dO[i, c] · y[i, c] in f32: two threads a row, columns by parity
         * of 8-element chunks, then one shuffle */
        {
            const int rr = threadIdx.x >> 1, half = threadIdx.x & 1;
            const int64_t i = i0 + rr;
            float dl = 0.f;
            if (i < d.Tq)
                for (int64_t c = half; c < d.Dv; c += 2)
                    dl += rmk_bf16_to_f32(Gs[rr * C::LD + c]) *
                          rmk_bf16_to_f32(y[by + i * oy.rs + c * oy.cs]);
            dl += __shfl_xor_sync(0xffffffffu, dl, 1);
            if (i < d.Tq && half == 0) delta[b * d.Tq + i] = dl;
        }
        if (!dq) continue;  /* uniform: every thread of the block skips */
        __syncthreads();    /* delta written by the block's threads is read below */
        float lr[2], dr[2]; /* the rows' lse (log2 units) and delta */
#pragma unroll
        for (int h = 0; h < 2; h++) {
            const int64_t i = ra + 8 * h;
            const float li = i < d.Tq ? lse[b * d.Tq + i] : 0.f;
            lr[h] = li == -INFINITY ? 0.f : li * 1.4426950408889634f;
            dr[h] = i < d.Tq ? delta[b * d.Tq + i] : 0.f;
        }
        float acc[C::NDT][4];
#pragma unroll
        for (int n = 0; n < C::NDT; n++) acc[n][0] = acc[n][1] = acc[n][2] = acc[n][3] = 0.f;
        for (int64_t j0 = 0; j0 < kn; j0 += C::BC) {
            __syncthreads();
            tc_load<HD, C::NT>(Ks, C::BC, k, bk, ok, j0, d.Tk, d.D, f.vec & 2);
            tc_load<HD, C::NT>(Vs, C::BC, v, bv, ov, j0, d.Tk, d.Dv, f.vec & 4);
            __syncthreads();
            float s[C::BC / 8][4], dp[C::BC / 8][4];
#pragma unroll
            for (int n = 0; n < C::BC / 8; n++)
#pragma unroll
                for (int e = 0; e < 4; e++) s[n][e] = dp[n][e] = 0.f;
            mma_rows_rowsT<C::KS, C::BC / 8>(s, Qs + w * 16 * C::LD, Ks, C::LD, g, t);
            mma_rows_rowsT<C::KS, C::BC / 8>(dp, Gs + w * 16 * C::LD, Vs, C::LD, g, t);
#pragma unroll
            for (int n = 0; n < C::BC / 8; n++)
#pragma unroll
                for (int e = 0; e < 4; e++) {
                    const int h = e >> 1;
                    const int64_t i = ra + h * 8, j = j0 + n * 8 + 2 * t + (e & 1);
                    float ds = 0.f;
                    if (tc_visible(d, i, j)) {
                        const float p = exp2f(s[n][e] * sl2 - lr[h]);
                        ds = p * (dp[n][e] - dr[h]) * scale;
                    }
                    s[n][e] = ds;
                }
            mma_frag_rows<C::BC / 16, C::NDT>(acc, s, Ks, C::LD, lane);
        }
        const float one[2] = {1.f, 1.f};
        tc_store<C::NDT>(dq, rmk_att_boff(&lead, &odq, b), odq, ra, d.Tq, d.D, acc, one, t);
    }
}

/* ---- backward: dK and dV, by key tiles ------------------------------------------------- */
template <int HD>
__global__ void __launch_bounds__(tc_cfg<HD>::NT)
    tc_att_bwd_dkdv(const __grid_constant__ rmk_att_dims d,
                    const __grid_constant__ rmk_att_lead lead,
                    const __grid_constant__ rmk_att_operand oq, const bf16_t *q,
                    const __grid_constant__ rmk_att_operand ok, const bf16_t *k,
                    const __grid_constant__ rmk_att_operand ov, const bf16_t *v,
                    const __grid_constant__ rmk_att_operand og, const bf16_t *gy,
                    const __grid_constant__ rmk_att_operand odk, bf16_t *dk,
                    const __grid_constant__ rmk_att_operand odv, bf16_t *dv, const float *lse,
                    const float *delta, tc_ops f) {
    typedef tc_cfg<HD> C;
    constexpr int BQ = C::BCQ; /* queries per step */
    extern __shared__ __align__(16) unsigned char smem_raw[];
    bf16_t *Ks = (bf16_t *)smem_raw;        /* BR × LD: the block's keys */
    bf16_t *Vs = Ks + C::BR * C::LD;        /* BR × LD */
    bf16_t *Qs = Vs + C::BR * C::LD;        /* BQ × LD */
    bf16_t *Gs = Qs + BQ * C::LD;           /* BQ × LD: dO */
    float *Ls = (float *)(Gs + BQ * C::LD); /* BQ: lse, log2 units */
    float *Dl = Ls + BQ;                    /* BQ: delta */
    const int lane = threadIdx.x & 31, w = threadIdx.x >> 5, g = lane >> 2, t = lane & 3;
    const int64_t nkb = (d.Tk + C::BR - 1) / C::BR, nkv = d.nb / d.group;
    const float sl2 = (float)d.scale * 1.4426950408889634f, scale = (float)d.scale;
    for (int64_t item = blockIdx.x; item < nkv * nkb; item += gridDim.x) {
        /* causal: the first key tiles see the most queries: heaviest first. The item is a
         * kv entry's key tile; its query heads b0 .. b0 + group - 1 add to it in turn. */
        const int64_t b0 = (item / nkb) * d.group, j0 = (item % nkb) * C::BR;
        const int64_t ja = j0 + w * 16 + g; /* this thread's keys: ja, ja + 8 */
        const int64_t bk = rmk_att_boff(&lead, &ok, b0), bv = rmk_att_boff(&lead, &ov, b0);
        __syncthreads();
        tc_load<HD, C::NT>(Ks, C::BR, k, bk, ok, j0, d.Tk, d.D, f.vec & 2);
        tc_load<HD, C::NT>(Vs, C::BR, v, bv, ov, j0, d.Tk, d.Dv, f.vec & 4);
        float ak[C::NDT][4], av[C::NDT][4];
#pragma unroll
        for (int n = 0; n < C::NDT; n++)
#pragma unroll
            for (int e = 0; e < 4; e++) ak[n][e] = av[n][e] = 0.f;
        /* the first query that sees key j0 is j0 - off */
        const int64_t qfirst = d.causal ? j0 - d.off : 0;
        const int64_t qstart = qfirst > 0 ? (qfirst / BQ) * BQ : 0;
        for (int64_t b = b0; b < b0 + d.group; b++) {
            const int64_t bq = rmk_att_boff(&lead, &oq, b), bg = rmk_att_boff(&lead, &og, b);
            for (int64_t i0 = qstart; i0 < d.Tq; i0 += BQ) {
                __syncthreads();
                tc_load<HD, C::NT>(Qs, BQ, q, bq, oq, i0, d.Tq, d.D, f.vec & 1);
                tc_load<HD, C::NT>(Gs, BQ, gy, bg, og, i0, d.Tq, d.Dv, f.vec & 8);
                for (int e = threadIdx.x; e < BQ; e += C::NT) {
                    const int64_t i = i0 + e;
                    const float li = i < d.Tq ? lse[b * d.Tq + i] : 0.f;
                    Ls[e] = li == -INFINITY ? 0.f : li * 1.4426950408889634f;
                    Dl[e] = i < d.Tq ? delta[b * d.Tq + i] : 0.f;
                }
                __syncthreads();
                float s[BQ / 8][4], dp[BQ / 8][4]; /* Sᵀ and dPᵀ: the warp's keys × queries */
#pragma unroll
                for (int n = 0; n < BQ / 8; n++)
#pragma unroll
                    for (int e = 0; e < 4; e++) s[n][e] = dp[n][e] = 0.f;
                mma_rows_rowsT<C::KS, BQ / 8>(s, Ks + w * 16 * C::LD, Qs, C::LD, g, t);
                mma_rows_rowsT<C::KS, BQ / 8>(dp, Vs + w * 16 * C::LD, Gs, C::LD, g, t);
#pragma unroll
                for (int n = 0; n < BQ / 8; n++)
#pragma unroll
                    for (int e = 0; e < 4; e++) {
                        const int ii = n * 8 + 2 * t + (e & 1);
                        const int64_t j = ja + (e >> 1) * 8, i = i0 + ii;
                        float p = 0.f, ds = 0.f;
                        if (tc_visible(d, i, j)) {
                            p = exp2f(s[n][e] * sl2 - Ls[ii]);
                            ds = p * (dp[n][e] - Dl[ii]) * scale;
                        }
                        s[n][e] = p;
                        dp[n][e] = ds;
                    }
                mma_frag_rows<BQ / 16, C::NDT>(av, s, Gs, C::LD, lane);
                mma_frag_rows<BQ / 16, C::NDT>(ak, dp, Qs, C::LD, lane);
            }
        }
        const float one[2] = {1.f, 1.f};
        if (dk) tc_store<C::NDT>(dk, rmk_att_boff(&lead, &odk, b0), odk, ja, d.Tk, d.D, ak, one, t);
        if (dv)
            tc_store<C::NDT>(dv, rmk_att_boff(&lead, &odv, b0), odv, ja, d.Tk, d.Dv, av, one, t);
    }
}

/* ---- launchers ------------------------------------------------------------------------- */
#ifndef RMK_EMU /* tests/cuda_emu launches the kernels its own way */
namespace {

unsigned tc_grid(int64_t n) { return n <= 0 ? 0u : (unsigned)(n < 1048576 ? n : 1048576); }

template <typename F> cudaError_t tc_smem(F *f, size_t sm) {
    return cudaFuncSetAttribute(f, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)sm);
}

template <int HD>
cudaError_t tc_fwd(const rmk_att_dims *d, const rmk_att_lead *lead, const rmk_att_operand *oq,
                   const void *q, const rmk_att_operand *ok, const void *k,
                   const rmk_att_operand *ov, const void *v, const rmk_att_operand *oy, void *y,
                   void *lse, cudaStream_t s) {
    typedef tc_cfg<HD> C;
    const unsigned grid = tc_grid(d->nb * ((d->Tq + C::BR - 1) / C::BR));
    if (grid == 0) return cudaSuccess;
    const tc_ops f = {(tc_vec(q, *oq, *lead, d->D) ? 1u : 0u) |
                      (tc_vec(k, *ok, *lead, d->D) ? 2u : 0u) |
                      (tc_vec(v, *ov, *lead, d->Dv) ? 4u : 0u)};
    const size_t sm = C::SM_FWD;
    cudaError_t e = tc_smem(tc_att_fwd<HD>, sm);
    if (e != cudaSuccess) return e;
    tc_att_fwd<HD><<<grid, C::NT, sm, s>>>(*d, *lead, *oq, (const bf16_t *)q, *ok,
                                           (const bf16_t *)k, *ov, (const bf16_t *)v, *oy,
                                           (bf16_t *)y, (float *)lse, f);
    return cudaGetLastError();
}

template <int HD>
cudaError_t tc_bwd(const rmk_att_dims *d, const rmk_att_lead *lead, const rmk_att_operand *o,
                   const void *const *p, const void *lse, void *ws, cudaStream_t s) {
    typedef tc_cfg<HD> C;
    float *delta = (float *)ws;
    const tc_ops f = {(tc_vec(p[0], o[0], *lead, d->D) ? 1u : 0u) |
                      (tc_vec(p[1], o[1], *lead, d->D) ? 2u : 0u) |
                      (tc_vec(p[2], o[2], *lead, d->Dv) ? 4u : 0u) |
                      (tc_vec(p[4], o[4], *lead, d->Dv) ? 8u : 0u)};
    const unsigned g1 = tc_grid(d->nb * ((d->Tq + C::BR - 1) / C::BR));
    if (g1 > 0) { /* delta always (dK needs it), dQ when wanted */
        const size_t sm = C::SM_DQ;
        cudaError_t e = tc_smem(tc_att_bwd_dq<HD>, sm);
        if (e != cudaSuccess) return e;
        tc_att_bwd_dq<HD><<<g1, C::NT, sm, s>>>(
            *d, *lead, o[0], (const bf16_t *)p[0], o[1], (const bf16_t *)p[1], o[2],
            (const bf16_t *)p[2], o[3], (const bf16_t *)p[3], o[4], (const bf16_t *)p[4], o[5],
            (bf16_t *)p[5], (const float *)lse, delta, f);
        e = cudaGetLastError();
        if (e != cudaSuccess) return e;
    }
    const unsigned g2 = tc_grid(d->nb / d->group * ((d->Tk + C::BR - 1) / C::BR));
    if (g2 > 0 && (p[6] || p[7])) {
        const size_t sm = C::SM_DKDV;
        cudaError_t e = tc_smem(tc_att_bwd_dkdv<HD>, sm);
        if (e != cudaSuccess) return e;
        tc_att_bwd_dkdv<HD><<<g2, C::NT, sm, s>>>(
            *d, *lead, o[0], (const bf16_t *)p[0], o[1], (const bf16_t *)p[1], o[2],
            (const bf16_t *)p[2], o[4], (const bf16_t *)p[4], o[6], (bf16_t *)p[6], o[7],
            (bf16_t *)p[7], (const float *)lse, delta, f);
    }
    return cudaGetLastError();
}

} // namespace

extern "C" bool rmk_attention_tc_ok(int dt, int hd) {
    if (dt != 4 || hd > 128) return false;
    static int major = -1; /* the current device's; one GPU kind per process */
    if (major < 0) {
        int dev = 0, m = 0;
        if (cudaGetDevice(&dev) != cudaSuccess ||
            cudaDeviceGetAttribute(&m, cudaDevAttrComputeCapabilityMajor, dev) != cudaSuccess)
            m = 0;
        major = m;
    }
    return major >= 8;
}

extern "C" cudaError_t
rmk_attention_tc(int hd, const rmk_att_dims *d, const rmk_att_lead *lead, const rmk_att_operand *oq,
                 const void *q, const rmk_att_operand *ok, const void *k, const rmk_att_operand *ov,
                 const void *v, const rmk_att_operand *oy, void *y, void *lse, cudaStream_t s) {
    switch (hd) {
    case 32: return tc_fwd<32>(d, lead, oq, q, ok, k, ov, v, oy, y, lse, s);
    case 64: return tc_fwd<64>(d, lead, oq, q, ok, k, ov, v, oy, y, lse, s);
    case 128: return tc_fwd<128>(d, lead, oq, q, ok, k, ov, v, oy, y, lse, s);
    }
    return cudaErrorInvalidValue;
}

extern "C" cudaError_t rmk_attention_tc_bwd(int hd, const rmk_att_dims *d, const rmk_att_lead *lead,
                                            const rmk_att_operand *ops, const void *const *ptrs,
                                            const void *lse, void *ws, cudaStream_t s) {
    switch (hd) {
    case 32: return tc_bwd<32>(d, lead, ops, ptrs, lse, ws, s);
    case 64: return tc_bwd<64>(d, lead, ops, ptrs, lse, ws, s);
    case 128: return tc_bwd<128>(d, lead, ops, ptrs, lse, ws, s);
    }
    return cudaErrorInvalidValue;
}
#endif /* RMK_EMU */
