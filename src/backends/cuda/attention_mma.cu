/* src/backends/cuda/attention_mma.cu — f32 and bf16 fused attention on the tensor
 * cores (mma.sync; sm_80 and later), forward and backward, for head sizes up to
 * 128. attention.cu's tiled CUDA-core kernels stay for f64, head sizes up to 256
 * and GPUs before sm_80; the math and the tiling are theirs (FlashAttention-2:
 * online softmax forward keeping the rows' lse; backward without atomics: dQ by
 * query tiles, dK and dV by key tiles), only the products run on the tensor cores:
 *
 *   forward   S = Q·Kᵀ, P = exp(scale·S − m) in f32; O += P·V; l sums P; y = O / l.
 *   backward  P = exp(scale·S − lse), dP = dO·Vᵀ, dS = P ∘ (dP − delta) · scale in
 *             f32; dV += Pᵀ·dO, dK += dSᵀ·Q, dQ += dS·K; delta = rowsum(dO ∘ y).
 * bf16 operands: mma.m16n8k16 (bf16 × bf16, f32 accumulation), P and dS rounded
 * to bf16 as operands (l sums the unrounded P), outputs rounded once — what cpu's
 * bf16 attention does with oneDNN's bf16 GEMMs (src/backends/cpu/attention.c) and
 * what FlashAttention does. f32 operands: 3xTF32 on mma.m16n8k8 (each operand
 * split into two tf32 parts, three products: f32 accuracy, as CUTLASS's
 * OpMultiplyAddFastF32 that PyTorch's f32 memory-efficient attention uses on
 * sm_80 and later). Results are deterministic (fixed order, no atomics).
 *
 * A block has 4 warps; a warp owns 16 rows of its tile (query rows forward and
 * for dQ, key rows for dK/dV; the forward's RMK_TC_FWD_MT=2: 32 query rows, two
 * m-tiles), so the row statistics of the online softmax are reductions over the 4
 * threads of an mma quad. Tiles are in shared memory in the
 * operands' type, rows padded (tr_bf16, tr_f32: so that fragment loads hit 32
 * different banks), zero-filled past the operands' ends. A-operands (rows of the
 * warp's tile) and B-operands read along a row of the stored tile (Kᵀ, Vᵀ, Qᵀ,
 * dOᵀ) are plain loads; B-operands read down the stored tile's columns (V in P·V,
 * K in dS·K, dO in Pᵀ·dO, Q in dSᵀ·Q) come from ldmatrix.trans (bf16) or from
 * loads in a permuted k order (f32, tr_f32). Accumulator fragments of S, P and dS
 * become the next product's A-operand in registers.
 *
 * Fragment layouts (PTX ISA), lane = 4·g + t; C (16×8, f32) for both:
 *   c[0], c[1] = (g, 2t), (g, 2t+1); c[2], c[3] = (g+8, 2t), (g+8, 2t+1)
 *   m16n8k16 .bf16  A (16×16): a[0] = (g, 2t..2t+1), a[1] = (g+8, 2t..),
 *                   a[2] = (g, 2t+8..), a[3] = (g+8, 2t+8..);
 *                   B (16×8): b[0] = (k 2t..2t+1, n g), b[1] = (k 2t+8.., n g)
 *   m16n8k8 .tf32   A (16×8): a[0] = (g, t), a[1] = (g+8, t), a[2] = (g, t+4),
 *                   a[3] = (g+8, t+4); B (8×8): b[0] = (k t, n g), b[1] = (k t+4, n g)
 * tests/cuda_emu runs these kernels on the CPU with the instructions carried out as
 * written here. */
#include <cuda_bf16.h>
#include <string.h>

#include "kcommon.cuh"
#include "nn.h"

/* The block's dynamic shared memory as tiles of E (at namespace scope: the extern array is
 * the global one). */
template <typename E> static __device__ __forceinline__ E *tc_shared() {
#if defined(RMK_EMU) /* tests/cuda_emu: the running block's own buffer */
    return (E *)RMK_EMU_SMEM();
#else
    extern __shared__ __align__(16) unsigned char smem_raw[];
    return (E *)smem_raw;
#endif
}

namespace {

typedef unsigned short bf16_t;

/* ---- the tensor-core instructions ------------------------------------------------------ */
/* mma.sync with f32 accumulators: m16n8k16 bf16 × bf16 (TF32 false) or m16n8k8 tf32 × tf32
 * (TF32 true; f32 registers whose low 13 mantissa bits are 0). tf32 fragments: A (16×8)
 * a[r] = (g + 8·(r % 2), t + 4·(r / 2)); B (8×8) b0 = (t, g), b1 = (t + 4, g). */
template <bool TF32>
__device__ __forceinline__ void mma(float (&c)[4], const uint32_t (&a)[4], uint32_t b0,
                                    uint32_t b1) {
#if defined(RMK_EMU) /* tests/cuda_emu: the instruction carried out on the CPU */
    if constexpr (TF32) RMK_EMU_MMA_TF32(c, a, b0, b1);
    else RMK_EMU_MMA(c, a, b0, b1);
#elif !defined(__CUDA_ARCH__) || __CUDA_ARCH__ >= 800
    if constexpr (TF32)
        asm volatile("mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {%0,%1,%2,%3}, "
                     "{%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
                     : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                     : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
    else
        asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, "
                     "{%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
                     : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                     : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
#else
    __trap(); /* the host launches these kernels on sm_80 and later only */
#endif
}

/* x rounded to tf32 (nearest, ties away from zero: cvt.rna), as f32 bits. */
__device__ __forceinline__ uint32_t to_tf32(float x) {
#if defined(RMK_EMU)
    return RMK_EMU_TF32(x);
#elif !defined(__CUDA_ARCH__) || __CUDA_ARCH__ >= 800
    uint32_t r;
    asm("cvt.rna.tf32.f32 %0, %1;\n" : "=r"(r) : "f"(x));
    return r;
#else
    __trap();
    return 0;
#endif
}

/* 3xTF32: x = big + small, both tf32; a product of two split operands is summed from the
 * three terms that matter (small·small, 2⁻²² relative, is left out), small terms first. The
 * error is that of f32 arithmetic: what CUTLASS's OpMultiplyAddFastF32 does, and what
 * PyTorch's f32 memory-efficient attention runs on sm_80 and later. */
__device__ __forceinline__ void split_tf32(float x, uint32_t &big, uint32_t &small) {
    big = to_tf32(x);
    small = to_tf32(x - __uint_as_float(big));
}
__device__ __forceinline__ void mma_3xtf32(float (&c)[4], const uint32_t (&ab)[4],
                                           const uint32_t (&as)[4], const uint32_t (&bb)[2],
                                           const uint32_t (&bs)[2]) {
    mma<true>(c, as, bb[0], bb[1]);
    mma<true>(c, ab, bs[0], bs[1]);
    mma<true>(c, ab, bb[0], bb[1]);
}

/* Four 8×8 bf16 matrices (ldmatrix.x4): lane l gives the address of row l % 8 of matrix
 * l / 8; register i gets matrix i's elements (g, 2t) and (g, 2t + 1) as stored — A and B
 * fragments of mma.m16n8k16, one instruction where 32-bit loads take four — or, TRANS,
 * (2t, g) and (2t + 1, g): B fragments of a tile read down its columns. */
template <bool TRANS>
__device__ __forceinline__ void ldsm_x4_any(uint32_t (&r)[4], const bf16_t *row) {
#if defined(RMK_EMU)
    if (TRANS) RMK_EMU_LDSM_X4_T(r, row);
    else RMK_EMU_LDSM_X4(r, row);
#elif !defined(__CUDA_ARCH__) || __CUDA_ARCH__ >= 800
    const unsigned a = (unsigned)__cvta_generic_to_shared(row);
    if (TRANS)
        asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                     : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                     : "r"(a));
    else
        asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                     : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                     : "r"(a));
#else
    (void)row;
    r[0] = r[1] = r[2] = r[3] = 0;
    __trap();
#endif
}
__device__ __forceinline__ void ldsm_x4(uint32_t (&r)[4], const bf16_t *row) {
    ldsm_x4_any<false>(r, row);
}
__device__ __forceinline__ void ldsm_x4_t(uint32_t (&r)[4], const bf16_t *row) {
    ldsm_x4_any<true>(r, row);
}

/* Two f32 rounded to bf16 (nearest, ties to even) and packed, lo in the low half. */
__device__ __forceinline__ uint32_t pack_bf16(float lo, float hi) {
    const __nv_bfloat162 h = __floats2bfloat162_rn(lo, hi);
    uint32_t u;
    memcpy(&u, &h, sizeof u); /* a register move on the GPU */
    return u;
}

/* ---- ordering between blocks (the fused backward's dQ, RMK_TC_BWD_FUSED) ----------------- *
 * A ticket: the next work item, in the order blocks ask for it (atomicAdd on a counter), so
 * that an item is only ever made to wait for items taken earlier, by blocks already running
 * (CUB's single-pass scan takes its tile ids so; blockIdx order is not a promise). A block
 * waits for a counter to reach a value (one thread spins with an acquire load, then the
 * block's barrier) and releases it (the block's barrier, then one thread's release store):
 * CUTLASS's Semaphore. Partial sums other blocks wrote are read past L1 (ld.global.cg). */
/* (a template: the default build, which does not use them, is not warned) */
template <int = 0> struct tc_order_t {
    __device__ static __forceinline__ unsigned ticket(unsigned *c) {
#if defined(RMK_EMU)
        return RMK_EMU_ATOMIC_INC(c);
#else
        return atomicAdd(c, 1u);
#endif
    }
    __device__ static __forceinline__ void wait_eq(const unsigned *c, unsigned v) {
#if defined(RMK_EMU)
        RMK_EMU_WAIT_EQ(c, v);
#elif !defined(__CUDA_ARCH__) || __CUDA_ARCH__ >= 700
        for (;;) {
            unsigned x;
            asm volatile("ld.global.acquire.gpu.b32 %0, [%1];\n" : "=r"(x) : "l"(c) : "memory");
            if (x == v) break;
            __nanosleep(40);
        }
#else
        (void)c, (void)v;
        __trap();
#endif
    }
    __device__ static __forceinline__ void release(unsigned *c, unsigned v) {
#if defined(RMK_EMU)
        RMK_EMU_STORE_REL(c, v);
#elif !defined(__CUDA_ARCH__) || __CUDA_ARCH__ >= 700
        asm volatile("st.global.release.gpu.b32 [%0], %1;\n" ::"l"(c), "r"(v) : "memory");
#else
        (void)c, (void)v;
        __trap();
#endif
    }
    __device__ static __forceinline__ float4 ldcg(const float4 *p) {
#if defined(RMK_EMU)
        return *p;
#else
        return __ldcg(p);
#endif
    }
    __device__ static __forceinline__ void stcg(float4 *p, float4 v) {
#if defined(RMK_EMU)
        *p = v;
#else
        __stcg(p, v);
#endif
    }
    /* The last key tile that query tile i0 (bq rows) sees, as tc_tile_vis decides at the block's
     * tile sizes (its key tiles 0 .. that one all see some of it), or -1 for none. */
    __device__ static __forceinline__ int64_t last_kv(const rmk_att_dims &d, int64_t i0, int64_t bq,
                                                      int64_t br) {
        if (i0 >= d.Tq || d.Tk <= 0) return -1;
        const int64_t nkb = (d.Tk + br - 1) / br;
        if (!d.causal) return nkb - 1;
        const int64_t last = i0 + bq - 1 + d.off; /* the tile's last row's last key */
        if (last < 0) return -1;
        return last / br < nkb ? last / br : nkb - 1;
    }
};
typedef tc_order_t<> tc_order;

/* ---- the two element types ------------------------------------------------------------- *
 * The kernels below are written once over a traits type: its element (storage and shared
 * tiles), the rows' padding in shared memory, and the two products they are made of:
 *   rows_rowsT<HD, NN>(c, A, B):  c[n] += A · Bᵀ over HD columns, A the warp's 16 rows and
 *                                 B 8·NN rows of another tile (S = Q·Kᵀ, dP = dO·Vᵀ, ...);
 *   frag_rows<NS, NDT>(o, s, M):  o[nd] += s · M, s (16 × 8·NS) in accumulator fragments
 *                                 (P, dS) and M (8·NS rows × HD) a tile read down its
 *                                 columns (P·V, dS·K, Pᵀ·dO, dSᵀ·Q);
 *   rows_cols<K, ND>(o, A, M):    o[nd] += A · M, A the warp's 16 rows of a shared tile (K
 *                                 columns) and M (K rows) read down its columns (the fused
 *                                 backward's dQ = dS·K, dS from shared memory);
 *   rows_rowsT_mt, frag_rows_mt:  rows_rowsT and frag_rows over MT m-tiles of 16 rows, each
 *                                 B fragment loaded once for all of them (the forward's
 *                                 RMK_TC_FWD_MT); tr_bf16's frags_rowsT takes A's fragments
 *                                 from registers (rows_frags). */

/* bf16: mma.m16n8k16; s rounded to bf16; M through ldmatrix.trans. Row padding 8 (16 bytes:
 * the 32-bit fragment loads and ldmatrix's 8 rows hit 32 different banks). */
struct tr_bf16 {
    typedef bf16_t elem;
    static constexpr int PAD = 8;
    __device__ static __forceinline__ float widen(elem x) { return rmk_bf16_to_f32(x); }
    __device__ static __forceinline__ elem narrow(float x) { return rmk_f32_to_bf16(x); }

    /* A's fragment is one ldmatrix.x4 a k-step (its matrices: rows 0-7 / 8-15 × columns
     * 0-7 / 8-15, in a[] order), B's one per two n-tiles (tile n columns 0-7, 8-15, tile
     * n + 1 the same). NN is even. */
    template <int HD, int NN>
    __device__ static __forceinline__ void rows_rowsT(float (&c)[NN][4], const elem *arows,
                                                      const elem *brows, int ld, int g, int t) {
        static_assert(NN % 2 == 0, "n-tiles in pairs");
        const int lane = 4 * g + t, lr = lane & 7, m1 = (lane >> 3) & 1, m2 = lane >> 4;
#pragma unroll
        for (int ks = 0; ks < HD / 16; ks++) {
            uint32_t a[4];
            ldsm_x4(a, arows + (lr + 8 * m1) * ld + ks * 16 + 8 * m2);
#pragma unroll
            for (int n = 0; n < NN; n += 2) {
                uint32_t b[4];
                ldsm_x4(b, brows + (n * 8 + lr + 8 * m2) * ld + ks * 16 + 8 * m1);
                mma<false>(c[n], a, b[0], b[1]);
                mma<false>(c[n + 1], a, b[2], b[3]);
            }
        }
    }

    template <int NS, int NDT>
    __device__ static __forceinline__ void frag_rows(float (&o)[NDT][4], const float (&s)[NS][4],
                                                     const elem *m, int ld, int lane) {
#pragma unroll
        for (int kk = 0; kk < NS / 2; kk++) { /* 16 columns of s: two n-tiles */
            const uint32_t a[4] = {pack_bf16(s[2 * kk][0], s[2 * kk][1]),
                                   pack_bf16(s[2 * kk][2], s[2 * kk][3]),
                                   pack_bf16(s[2 * kk + 1][0], s[2 * kk + 1][1]),
                                   pack_bf16(s[2 * kk + 1][2], s[2 * kk + 1][3])};
            /* lane's row of the four 8×8 matrices: rows kk·16 + (lane & 15), columns
             * 8·(lane >> 4) of each pair of n-tiles */
            const elem *row =
                m + (kk * 16 + (lane & 7) + ((lane >> 3) & 1) * 8) * ld + (lane >> 4) * 8;
#pragma unroll
            for (int nd = 0; nd < NDT; nd += 2) {
                uint32_t b[4];
                ldsm_x4_t(b, row + nd * 8);
                mma<false>(o[nd], a, b[0], b[1]);
                mma<false>(o[nd + 1], a, b[2], b[3]);
            }
        }
    }

    /* A's fragment as in rows_rowsT, M's as in frag_rows: one ldmatrix.x4 each. */
    template <int K, int ND>
    __device__ static __forceinline__ void rows_cols(float (&o)[ND][4], const elem *arows, int lda,
                                                     const elem *m, int ldm, int lane) {
        static_assert(ND % 2 == 0 && K % 16 == 0, "n-tiles in pairs, k-steps of 16");
        const int lr = lane & 7, m1 = (lane >> 3) & 1, m2 = lane >> 4;
#pragma unroll
        for (int ks = 0; ks < K / 16; ks++) {
            uint32_t a[4];
            ldsm_x4(a, arows + (lr + 8 * m1) * lda + ks * 16 + 8 * m2);
            const elem *row = m + (ks * 16 + lr + 8 * m1) * ldm + 8 * m2;
#pragma unroll
            for (int nd = 0; nd < ND; nd += 2) {
                uint32_t b[4];
                ldsm_x4_t(b, row + nd * 8);
                mma<false>(o[nd], a, b[0], b[1]);
                mma<false>(o[nd + 1], a, b[2], b[3]);
            }
        }
    }

    /* The forward's MT m-tiles a warp (RMK_TC_FWD_MT): MT consecutive 16-row tiles of the
     * warp's rows, and each B fragment (K in S = Q·Kᵀ, V in P·V) loaded from shared memory
     * once for all MT of them: at MT 2 half the ldmatrix a product. c[mt], o[mt], s[mt]: m-tile
     * mt's. At MT 1 the instructions and their order are rows_rowsT's and frag_rows'. */
    /* a[mt][ks]: A fragments of the MT m-tiles from arows, rows_rowsT's k-steps, to be kept
     * in registers over the key tiles (frags_rowsT) */
    template <int HD, int MT>
    __device__ static __forceinline__ void rows_frags(uint32_t (&a)[MT][HD / 16][4],
                                                      const elem *arows, int ld, int lane) {
        const int lr = lane & 7, m1 = (lane >> 3) & 1, m2 = lane >> 4;
#pragma unroll
        for (int mt = 0; mt < MT; mt++)
#pragma unroll
            for (int ks = 0; ks < HD / 16; ks++)
                ldsm_x4(a[mt][ks], arows + (mt * 16 + lr + 8 * m1) * ld + ks * 16 + 8 * m2);
    }
    /* rows_rowsT with A's fragments from registers (rows_frags) */
    template <int HD, int NN, int MT>
    __device__ static __forceinline__ void frags_rowsT(float (&c)[MT][NN][4],
                                                       const uint32_t (&a)[MT][HD / 16][4],
                                                       const elem *brows, int ld, int lane) {
        static_assert(NN % 2 == 0, "n-tiles in pairs");
        const int lr = lane & 7, m1 = (lane >> 3) & 1, m2 = lane >> 4;
#pragma unroll
        for (int ks = 0; ks < HD / 16; ks++)
#pragma unroll
            for (int n = 0; n < NN; n += 2) {
                uint32_t b[4];
                ldsm_x4(b, brows + (n * 8 + lr + 8 * m2) * ld + ks * 16 + 8 * m1);
#pragma unroll
                for (int mt = 0; mt < MT; mt++) {
                    mma<false>(c[mt][n], a[mt][ks], b[0], b[1]);
                    mma<false>(c[mt][n + 1], a[mt][ks], b[2], b[3]);
                }
            }
    }
    /* rows_rowsT over MT m-tiles of arows (A from shared memory at each k-step) */
    template <int HD, int NN, int MT>
    __device__ static __forceinline__ void rows_rowsT_mt(float (&c)[MT][NN][4], const elem *arows,
                                                         const elem *brows, int ld, int lane) {
        static_assert(NN % 2 == 0, "n-tiles in pairs");
        const int lr = lane & 7, m1 = (lane >> 3) & 1, m2 = lane >> 4;
#pragma unroll
        for (int ks = 0; ks < HD / 16; ks++) {
            uint32_t a[MT][4];
#pragma unroll
            for (int mt = 0; mt < MT; mt++)
                ldsm_x4(a[mt], arows + (mt * 16 + lr + 8 * m1) * ld + ks * 16 + 8 * m2);
#pragma unroll
            for (int n = 0; n < NN; n += 2) {
                uint32_t b[4];
                ldsm_x4(b, brows + (n * 8 + lr + 8 * m2) * ld + ks * 16 + 8 * m1);
#pragma unroll
                for (int mt = 0; mt < MT; mt++) {
                    mma<false>(c[mt][n], a[mt], b[0], b[1]);
                    mma<false>(c[mt][n + 1], a[mt], b[2], b[3]);
                }
            }
        }
    }
    /* frag_rows over MT m-tiles of s */
    template <int NS, int NDT, int MT>
    __device__ static __forceinline__ void frag_rows_mt(float (&o)[MT][NDT][4],
                                                        const float (&s)[MT][NS][4], const elem *m,
                                                        int ld, int lane) {
#pragma unroll
        for (int kk = 0; kk < NS / 2; kk++) {
            uint32_t a[MT][4];
#pragma unroll
            for (int mt = 0; mt < MT; mt++) {
                a[mt][0] = pack_bf16(s[mt][2 * kk][0], s[mt][2 * kk][1]);
                a[mt][1] = pack_bf16(s[mt][2 * kk][2], s[mt][2 * kk][3]);
                a[mt][2] = pack_bf16(s[mt][2 * kk + 1][0], s[mt][2 * kk + 1][1]);
                a[mt][3] = pack_bf16(s[mt][2 * kk + 1][2], s[mt][2 * kk + 1][3]);
            }
            const elem *row =
                m + (kk * 16 + (lane & 7) + ((lane >> 3) & 1) * 8) * ld + (lane >> 4) * 8;
#pragma unroll
            for (int nd = 0; nd < NDT; nd += 2) {
                uint32_t b[4];
                ldsm_x4_t(b, row + nd * 8);
#pragma unroll
                for (int mt = 0; mt < MT; mt++) {
                    mma<false>(o[mt][nd], a[mt], b[0], b[1]);
                    mma<false>(o[mt][nd + 1], a[mt], b[2], b[3]);
                }
            }
        }
    }
};

/* f32: 3xTF32 on mma.m16n8k8. In frag_rows an n-tile of s is one k-step, its columns taken
 * in the order 0, 2, 4, 6, 1, 3, 5, 7 (k = t holds column 2t, k = t + 4 column 2t + 1), so
 * the accumulator registers are the A-operand as they are, and M's rows are read in the
 * same order. Row padding 4 (rows 4 banks apart: the fragment loads, 8 rows × 4 columns or
 * 4 rows × 8, hit 32 different banks). */
struct tr_f32 {
    typedef float elem;
    static constexpr int PAD = 4;
    __device__ static __forceinline__ float widen(elem x) { return x; }
    __device__ static __forceinline__ elem narrow(float x) { return x; }

    template <int HD, int NN>
    __device__ static __forceinline__ void rows_rowsT(float (&c)[NN][4], const elem *arows,
                                                      const elem *brows, int ld, int g, int t) {
#pragma unroll
        for (int ks = 0; ks < HD / 8; ks++) {
            const elem *pa = arows + g * ld + ks * 8 + t;
            const float av[4] = {pa[0], pa[8 * ld], pa[4], pa[8 * ld + 4]};
            uint32_t ab[4], as[4];
#pragma unroll
            for (int r = 0; r < 4; r++) split_tf32(av[r], ab[r], as[r]);
#pragma unroll
            for (int n = 0; n < NN; n++) {
                const elem *pb = brows + (n * 8 + g) * ld + ks * 8 + t;
                uint32_t bb[2], bs[2];
                split_tf32(pb[0], bb[0], bs[0]);
                split_tf32(pb[4], bb[1], bs[1]);
                mma_3xtf32(c[n], ab, as, bb, bs);
            }
        }
    }

    template <int NS, int NDT>
    __device__ static __forceinline__ void frag_rows(float (&o)[NDT][4], const float (&s)[NS][4],
                                                     const elem *m, int ld, int lane) {
        const int g = lane >> 2, t = lane & 3;
#pragma unroll
        for (int ns = 0; ns < NS; ns++) {
            const float av[4] = {s[ns][0], s[ns][2], s[ns][1], s[ns][3]};
            uint32_t ab[4], as[4];
#pragma unroll
            for (int r = 0; r < 4; r++) split_tf32(av[r], ab[r], as[r]);
            const elem *row = m + (ns * 8 + 2 * t) * ld + g;
#pragma unroll
            for (int nd = 0; nd < NDT; nd++) {
                uint32_t bb[2], bs[2];
                split_tf32(row[nd * 8], bb[0], bs[0]);
                split_tf32(row[ld + nd * 8], bb[1], bs[1]);
                mma_3xtf32(o[nd], ab, as, bb, bs);
            }
        }
    }

    /* frag_rows with s read from the shared rows (A's columns in frag_rows' permuted order:
     * k = t is column 2t, k = t + 4 column 2t + 1 of each 8). */
    template <int K, int ND>
    __device__ static __forceinline__ void rows_cols(float (&o)[ND][4], const elem *arows, int lda,
                                                     const elem *m, int ldm, int lane) {
        const int g = lane >> 2, t = lane & 3;
#pragma unroll
        for (int ns = 0; ns < K / 8; ns++) {
            const elem *pa = arows + g * lda + ns * 8 + 2 * t;
            const float av[4] = {pa[0], pa[8 * lda], pa[1], pa[8 * lda + 1]};
            uint32_t ab[4], as[4];
#pragma unroll
            for (int r = 0; r < 4; r++) split_tf32(av[r], ab[r], as[r]);
            const elem *row = m + (ns * 8 + 2 * t) * ldm + g;
#pragma unroll
            for (int nd = 0; nd < ND; nd++) {
                uint32_t bb[2], bs[2];
                split_tf32(row[nd * 8], bb[0], bs[0]);
                split_tf32(row[ldm + nd * 8], bb[1], bs[1]);
                mma_3xtf32(o[nd], ab, as, bb, bs);
            }
        }
    }

    /* The forward's MT m-tiles a warp, as tr_bf16's: each K and V element split into its
     * tf32 parts once for all MT m-tiles (the split, two cvt and a subtraction, costs what a
     * load does). Q's A fragments come from shared memory at each k-step: in registers they
     * would take HD registers an m-tile (both parts), 128 at head 64 and MT 2. */
    template <int HD, int NN, int MT>
    __device__ static __forceinline__ void rows_rowsT_mt(float (&c)[MT][NN][4], const elem *arows,
                                                         const elem *brows, int ld, int lane) {
        const int g = lane >> 2, t = lane & 3;
#pragma unroll
        for (int ks = 0; ks < HD / 8; ks++) {
            uint32_t ab[MT][4], as[MT][4];
#pragma unroll
            for (int mt = 0; mt < MT; mt++) {
                const elem *pa = arows + (mt * 16 + g) * ld + ks * 8 + t;
                const float av[4] = {pa[0], pa[8 * ld], pa[4], pa[8 * ld + 4]};
#pragma unroll
                for (int r = 0; r < 4; r++) split_tf32(av[r], ab[mt][r], as[mt][r]);
            }
#pragma unroll
            for (int n = 0; n < NN; n++) {
                const elem *pb = brows + (n * 8 + g) * ld + ks * 8 + t;
                uint32_t bb[2], bs[2];
                split_tf32(pb[0], bb[0], bs[0]);
                split_tf32(pb[4], bb[1], bs[1]);
#pragma unroll
                for (int mt = 0; mt < MT; mt++) mma_3xtf32(c[mt][n], ab[mt], as[mt], bb, bs);
            }
        }
    }

    template <int NS, int NDT, int MT>
    __device__ static __forceinline__ void frag_rows_mt(float (&o)[MT][NDT][4],
                                                        const float (&s)[MT][NS][4], const elem *m,
                                                        int ld, int lane) {
        const int g = lane >> 2, t = lane & 3;
#pragma unroll
        for (int ns = 0; ns < NS; ns++) {
            uint32_t ab[MT][4], as[MT][4];
#pragma unroll
            for (int mt = 0; mt < MT; mt++) {
                const float av[4] = {s[mt][ns][0], s[mt][ns][2], s[mt][ns][1], s[mt][ns][3]};
#pragma unroll
                for (int r = 0; r < 4; r++) split_tf32(av[r], ab[mt][r], as[mt][r]);
            }
            const elem *row = m + (ns * 8 + 2 * t) * ld + g;
#pragma unroll
            for (int nd = 0; nd < NDT; nd++) {
                uint32_t bb[2], bs[2];
                split_tf32(row[nd * 8], bb[0], bs[0]);
                split_tf32(row[ld + nd * 8], bb[1], bs[1]);
#pragma unroll
                for (int mt = 0; mt < MT; mt++) mma_3xtf32(o[mt][nd], ab[mt], as[mt], bb, bs);
            }
        }
    }
};

/* Tiles of an element type and head-size class: BR rows per block (4 warps × 16), BC
 * columns of the other operand per step (keys forward and for dQ, queries for dK/dV). dK/dV
 * at 128 takes 32 queries a step, so that its two 16×128 accumulators and the step's scores
 * stay in registers. */
/* Tuning for head sizes <= 64, measured on an H200 (window 6, GPT-2 shapes: head 64, T 1024,
 * bench/results/2026-11-27-h200-window6): the blocks per SM each kernel's __launch_bounds__
 * asks the register allocator for (1 left bf16 dK/dV at 243 registers, 2 blocks an SM;
 * 4 / 3 / 3 took the bf16 backward from 8.5 to 7.3 ms, f32's from 29.9 to 23.2), and the
 * queries dK/dV takes a step (f32: 32, bf16: 64). Build-time knobs so that
 * bench/cuda/gpu_variants.sh can build variants with other values. */
#ifndef RMK_TC_FWD_MT /* before RMK_TC_MINB_FWD, whose default follows it (below) */
#define RMK_TC_FWD_MT 1
#endif
#ifndef RMK_TC_FWD_WARPS
#define RMK_TC_FWD_WARPS 4
#endif
#ifndef RMK_TC_MINB_FWD /* 2 m-tiles a warp: at most 8 warps an SM (255 registers a thread) */
#define RMK_TC_MINB_FWD (RMK_TC_FWD_MT > 1 ? 8 / RMK_TC_FWD_WARPS : 4)
#endif
#ifndef RMK_TC_MINB_DQ
#define RMK_TC_MINB_DQ 3
#endif
#ifndef RMK_TC_MINB_DKDV
#define RMK_TC_MINB_DKDV 3
#endif
#ifndef RMK_TC_BCQ64
#define RMK_TC_BCQ64 64
#endif
#ifndef RMK_TC_BCQ64_F32
#define RMK_TC_BCQ64_F32 32
#endif
/* Restructured kernels, variants until a GPU window times them beside the default
 * (bench/cuda/gpu_variants.sh, docs/cuda.md "Attention variants"):
 *   RMK_TC_FWD_WARPS  warps of a forward block (4: 64 query rows a block; 8: 128, each K/V
 *                     tile loaded once for twice the rows);
 *   RMK_TC_FWD_MT     m-tiles (16 query rows) a forward warp (1 or 2; head sizes <= 64, 128
 *                     keeps 1). At 2 a warp owns 32 rows, and each K and V fragment it loads
 *                     from shared memory feeds 4 mma instead of 2 — at 1 a warp issues ~0.56
 *                     ldmatrix.x4 an mma, which bounds it near half of mma.sync's rate;
 *                     FlashAttention-2's sm80 forward gives a warp 32 rows for this. Costs
 *                     twice the accumulator and score registers (128 at head 64), hence
 *                     8 warps an SM (RMK_TC_MINB_FWD's default follows it);
 *   RMK_TC_FWD_QREG   with RMK_TC_FWD_MT 2 (bf16): 1 keeps Q's A fragments in registers over
 *                     the key tiles (HD / 16 ldmatrix.x4 an m-tile: 16 registers at head 64)
 *                     instead of loading them again at every key tile; 0 loads them;
 *   RMK_TC_FWD_LEAN   1: the forward's softmax in fewer instructions a score (Nsight Compute,
 *                     window 9: ~40 a score, cuDNN's ~10): no mask test in wholly visible
 *                     tiles and 32-bit ones in the others, fmaxf, the scale folded into the
 *                     subtraction (one FFMA), ex2.approx.ftz (tc_softmax_step_lean);
 *   RMK_TC_BWD_FUSED  1: one backward pass by key tiles that also adds dQ = dS·K (dS through
 *                     shared memory) instead of a dQ pass recomputing S and dP: 5 products a
 *                     tile instead of 7. The adds to a query tile's f32 partial sum go in a
 *                     fixed order (key tiles from the last visible down to 0, each waiting
 *                     for the one before it: tc_order), so results are the same bit for
 *                     bit from run to run; the last writes dq. Scratch: an f32 sum per dq
 *                     element and a counter per query tile (tc_fused_ws).
 *   RMK_TC_LEAN       1: the backward's per-score code lean (window 9's Nsight Compute: the
 *                     kernels issue ~40 instructions a score, cuDNN ~10): the mask only in
 *                     tiles it cuts, as 32-bit bounds relative to the tile (tc_lean_cols),
 *                     wholly visible tiles without index arithmetic; 2^x as MUFU.EX2 alone
 *                     (tc_ex2: a result below 2^-126 is 0, where exp2f keeps a subnormal);
 *                     P = 2^(S·scale·log2 e − lse) as one FFMA; dS without the scale, which
 *                     multiplies dQ and dK once where they are written (tc_lean_ds_rows,
 *                     tc_lean_p_ds); the step's tiles loaded with a pointer that steps a
 *                     thread's rows, 32-bit bounds (tc_load_lean); the fused kernel's dq
 *                     offset (64-bit divisions) only in the tile that writes dq. The forward
 *                     is unchanged. */
#ifndef RMK_TC_FWD_QREG
#define RMK_TC_FWD_QREG 1
#endif
#ifndef RMK_TC_FWD_LEAN
#define RMK_TC_FWD_LEAN 0
#endif
#ifndef RMK_TC_BWD_FUSED
#define RMK_TC_BWD_FUSED 0
#endif
#ifndef RMK_TC_LEAN
#define RMK_TC_LEAN 0
#endif
template <typename TR, int HD> struct tc_cfg {
    static constexpr int NW = 4, NT = 32 * NW, BR = 16 * NW;
    static constexpr int BC = 64; /* keys per step (forward, dQ) */
    static constexpr int BCQ = HD >= 128                                    ? 32
                               : sizeof(typename TR::elem) == sizeof(float) ? RMK_TC_BCQ64_F32
                                                                            : RMK_TC_BCQ64;
    static constexpr int MINB_FWD = HD <= 64 ? RMK_TC_MINB_FWD : 1;
    static constexpr int MINB_DQ = HD <= 64 ? RMK_TC_MINB_DQ : 1;
    static constexpr int MINB_DKDV = HD <= 64 ? RMK_TC_MINB_DKDV : 1;
    /* forward: NWF warps of MTF m-tiles, BRF query rows a block. Head 128 keeps 1 m-tile:
     * at 2 a warp's output and scores alone take 128 + 64 registers */
    static constexpr int MTF = HD <= 64 ? RMK_TC_FWD_MT : 1;
    static_assert(RMK_TC_FWD_MT == 1 || RMK_TC_FWD_MT == 2, "RMK_TC_FWD_MT: 1 or 2");
    static constexpr int NWF = RMK_TC_FWD_WARPS, NTF = 32 * NWF, BRF = 16 * MTF * NWF;
    static_assert(NWF == 4 || NWF == 8, "RMK_TC_FWD_WARPS: 4 or 8");
    /* Q's A fragments in registers over the key tiles (bf16, 2 m-tiles) */
    static constexpr bool QREG = RMK_TC_FWD_QREG && MTF > 1 &&
                                 sizeof(typename TR::elem) == sizeof(bf16_t);
    static constexpr bool LEAN = RMK_TC_FWD_LEAN != 0;
    static constexpr int LD = HD + TR::PAD; /* smem row stride, elements */
    static constexpr int NDT = HD / 8;      /* n-tiles over the head dims */
    static_assert(HD % 16 == 0 && HD <= 128, "head class 32, 64 or 128");
    /* dynamic shared memory of each kernel, bytes */
    static constexpr size_t ES = sizeof(typename TR::elem);
    static constexpr size_t SM_FWD = ES * (size_t)(BRF + 2 * BC) * LD;
    static constexpr size_t SM_DQ = ES * (size_t)(2 * BR + 2 * BC) * LD;
    static constexpr size_t SM_DKDV = ES * (size_t)(2 * BR + 2 * BCQ) * LD + 4 * 2 * BCQ;
    /* fused backward: dK/dV's tiles, then dS (BCQ queries × BR keys, rows padded as the
     * others) and the block's work item */
    static constexpr int LDS = BR + TR::PAD;
    static constexpr size_t SM_FUSED = SM_DKDV + ES * (size_t)BCQ * LDS + 16;
};

/* rows [r0, r0 + rows) × HD of an operand into a shared tile (row stride LD), zero past rmax
 * rows and `cols` columns. vec: the operand's columns are contiguous and every row starts
 * 16-byte aligned, with cols a multiple of a 16-byte load's elements. */
template <typename TR, int HD, int NT>
__device__ __forceinline__ void
tc_load(typename TR::elem *sm, int rows, const typename TR::elem *base, int64_t boff,
        const rmk_att_operand &op, int64_t r0, int64_t rmax, int64_t cols, bool vec) {
    typedef typename TR::elem E;
    constexpr int LD = HD + TR::PAD, VE = 16 / (int)sizeof(E);
    if (vec) {
        constexpr int CPR = HD / VE;
        for (int e = threadIdx.x; e < rows * CPR; e += NT) {
            const int rr = e / CPR, c = (e % CPR) * VE;
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
        sm[rr * LD + c] = (r < rmax && c < cols) ? base[boff + r * op.rs + c * op.cs] : (E)0;
    }
}

/* tc_load (ROWS rows) for the backward's steps (RMK_TC_LEAN): NT is a multiple of a row's
 * pieces, so a thread loads the same column of every RS-th row: one pointer that steps RS rows
 * (a 64-bit add) and a 32-bit row bound, for tc_load's 64-bit row index, bound and product
 * each piece. */
template <typename TR, int HD, int NT, int ROWS>
__device__ __forceinline__ void tc_load_lean(typename TR::elem *sm, const typename TR::elem *base,
                                             int64_t boff, const rmk_att_operand &op, int64_t r0,
                                             int64_t rmax, int64_t cols, bool vec) {
    typedef typename TR::elem E;
    constexpr int LD = HD + TR::PAD, VE = 16 / (int)sizeof(E);
    const int64_t left = rmax - r0;
    const int nr = (int)(left < 0 ? 0 : left > ROWS ? ROWS : left); /* rows there */
    const E *src = base + boff + r0 * op.rs;
    if (vec) {
        constexpr int CPR = HD / VE, RS = NT / CPR;
        static_assert(NT % CPR == 0 && ROWS % RS == 0, "a thread's pieces: one column");
        const int c = ((int)threadIdx.x % CPR) * VE;
        int rr = (int)threadIdx.x / CPR;
        const bool cin = c < cols;
        const E *gp = src + rr * op.rs + c;
        const int64_t step = RS * op.rs;
#pragma unroll
        for (int k = 0; k < ROWS / RS; k++, rr += RS, gp += step) {
            uint4 v = make_uint4(0, 0, 0, 0);
            if (rr < nr && cin) v = *(const uint4 *)gp;
            *(uint4 *)(sm + rr * LD + c) = v;
        }
        return;
    }
    constexpr int RS = NT / HD;
    static_assert(NT % HD == 0 && ROWS % RS == 0, "a thread's elements: one column");
    const int c = (int)threadIdx.x % HD;
    int rr = (int)threadIdx.x / HD;
    const bool cin = c < cols;
    const E *gp = src + rr * op.rs + c * op.cs;
    const int64_t step = RS * op.rs;
#pragma unroll 1 /* strided operands only: not worth the code of 16 to 128 copies */
    for (int k = 0; k < ROWS / RS; k++, rr += RS, gp += step)
        sm[rr * LD + c] = rr < nr && cin ? *gp : (E)0;
}

/* Rows ra (the fragment's g rows) and ra + 8 of a warp's 16 × HD accumulators, scaled by
 * sc[0] / sc[1], stored (bf16: rounded once) into the operand (columns < cols, rows <
 * rmax). */
template <typename TR, int NDT>
__device__ __forceinline__ void
tc_store(typename TR::elem *out, int64_t bo, const rmk_att_operand &o, int64_t ra, int64_t rmax,
         int64_t cols, const float (&acc)[NDT][4], const float (&sc)[2], int t) {
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
                    out[bo + r * o.rs + c * o.cs] = TR::narrow(acc[nd][2 * h + e] * sc[h]);
            }
    }
}

__device__ __forceinline__ bool tc_visible(const rmk_att_dims &d, int64_t i, int64_t j) {
    return i < d.Tq && j < d.Tk && (!d.causal || j <= i + d.off);
}

/* What queries i0 .. i0 + ni - 1 see of keys j0 .. j0 + nj - 1: 0 nothing (a warp skips
 * the products: its rows' statistics and sums are unchanged), 2 everything (no mask to
 * apply), 1 a part (mask each element with tc_visible). */
enum { TC_NONE = 0, TC_PART = 1, TC_ALL = 2 };
__device__ __forceinline__ int tc_tile_vis(const rmk_att_dims &d, int64_t i0, int64_t ni,
                                           int64_t j0, int64_t nj) {
    if (i0 >= d.Tq || j0 >= d.Tk || (d.causal && j0 > i0 + ni - 1 + d.off)) return TC_NONE;
    if (i0 + ni <= d.Tq && j0 + nj <= d.Tk && (!d.causal || j0 + nj - 1 <= i0 + d.off))
        return TC_ALL;
    return TC_PART;
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

/* ---- lean per-score code (RMK_TC_LEAN) ---------------------------------------------------- */
/* 2^x as one MUFU.EX2 (ex2.approx.ftz.f32; RMK_TC_LEAN's backward, RMK_TC_FWD_LEAN's
 * forward). exp2f is the same instruction (the CUDA Math API gives exp2f 2 ulp at most) inside
 * a range check and two multiplies that keep results below 2^-126 as subnormals; here they
 * are 0, and a subnormal x reads as 0 (2^0 either way). The forward's P is at most 1 beside
 * the row's largest, 1; the backward's P = 2^(S·sl2 − lse) is at most 1 and a row's P sum to
 * 1, so the largest is at least 1 / Tk: a P flushed is under 2^-100 of it (Tk < 2^26), below
 * f32's resolution in the sums it goes into. (A template, as those below: the default build, which does not use
 * them, is not warned.) */
template <int = 0> __device__ __forceinline__ float tc_ex2(float x) {
#if defined(RMK_EMU) /* tests/cuda_emu: exp2f, flushed as ftz does */
    return RMK_EMU_EX2_FTZ(x);
#else
    float r;
    asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(r) : "f"(x));
    return r;
#endif
}

/* What a thread's accumulator fragments see of a tile, as bounds on the column index less
 * 2t (c = 8n + (e & 1), a constant once unrolled): visible iff lo[h] <= c < hi[h] for the
 * fragment's row h (g, g + 8). Each bound is clamped to [0, nc] in 64 bits once a step, so
 * that the per-score test is two 32-bit compares against constants; tc_visible's meaning:
 *   dQ (rows: queries i; columns: keys j0 + col):  col < min(Tk − j0, i + off + 1 − j0 if
 *        causal), none where i >= Tq;
 *   dK/dV (rows: keys j; columns: queries i0 + col): i0 + col < Tq and, causal,
 *        i0 + col >= j − off; none where j >= Tk. */
template <int = 0> struct tc_lean_cols_t {
    int lo[2], hi[2];
    __device__ static __forceinline__ int clampc(int64_t x, int nc) {
        return (int)(x < 0 ? 0 : x > nc ? nc : x);
    }
    /* dQ: rows ra, ra + 8 (queries), keys from j0 */
    __device__ __forceinline__ void keys(const rmk_att_dims &d, int64_t ra, int64_t j0, int nc,
                                         int t) {
#pragma unroll
        for (int h = 0; h < 2; h++) {
            const int64_t i = ra + 8 * h;
            int64_t m = d.Tk - j0;
            if (d.causal && i + d.off + 1 - j0 < m) m = i + d.off + 1 - j0;
            lo[h] = -2 * t; /* (tc_lean_ds_rows tests hi only) */
            hi[h] = (i < d.Tq ? clampc(m, nc) : 0) - 2 * t;
        }
    }
    /* dK/dV: rows ja, ja + 8 (keys), queries from i0 */
    __device__ __forceinline__ void queries(const rmk_att_dims &d, int64_t ja, int64_t i0, int nc,
                                            int t) {
        const int q = clampc(d.Tq - i0, nc);
#pragma unroll
        for (int h = 0; h < 2; h++) {
            const int64_t j = ja + 8 * h;
            lo[h] = (j >= d.Tk ? nc : d.causal ? clampc(j - d.off - i0, nc) : 0) - 2 * t;
            hi[h] = q - 2 * t;
        }
    }
    __device__ __forceinline__ bool in(int h, int c) const { return c >= lo[h] && c < hi[h]; }
};
typedef tc_lean_cols_t<> tc_lean_cols;

/* dQ's step, rows = the thread's queries (h: g, g + 8), columns = keys: s ← dS / scale =
 * P ∘ (dP − delta), P = 2^(S·sl2 − lse), 0 outside m's bounds (MASK). lr: the rows' lse in
 * log2 units, dr their delta. */
template <bool MASK, int NN>
__device__ __forceinline__ void tc_lean_ds_rows(float (&s)[NN][4], const float (&dp)[NN][4],
                                                const float (&lr)[2], const float (&dr)[2],
                                                float sl2, const tc_lean_cols &m) {
#pragma unroll
    for (int n = 0; n < NN; n++)
#pragma unroll
        for (int e = 0; e < 4; e++) {
            const int h = e >> 1;
            const float ds = tc_ex2(fmaf(s[n][e], sl2, -lr[h])) * (dp[n][e] - dr[h]);
            s[n][e] = !MASK || n * 8 + (e & 1) < m.hi[h] ? ds : 0.f; /* keys from j0: lo <= 0 */
        }
}

/* dK/dV's step, rows = the thread's keys, columns = BQ queries (Ls, Dl as tc_stage_rows
 * leaves them; a thread's two columns 2t, 2t + 1 of an n-tile are one 8-byte load): s ← P,
 * dp ← dS / scale = P ∘ (dP − delta), 0 outside m's bounds (MASK). */
template <bool MASK, int BQ>
__device__ __forceinline__ void tc_lean_p_ds(float (&s)[BQ / 8][4], float (&dp)[BQ / 8][4], int t,
                                             float sl2, const float *Ls, const float *Dl,
                                             const tc_lean_cols &m) {
#pragma unroll
    for (int n = 0; n < BQ / 8; n++) {
        const float2 l2 = *(const float2 *)(Ls + n * 8 + 2 * t),
                     d2 = *(const float2 *)(Dl + n * 8 + 2 * t);
#pragma unroll
        for (int e = 0; e < 4; e++) {
            const float li = e & 1 ? l2.y : l2.x, di = e & 1 ? d2.y : d2.x;
            const float pr = tc_ex2(fmaf(s[n][e], sl2, -li));
            const float ds = pr * (dp[n][e] - di);
            const bool v = !MASK || m.in(e >> 1, n * 8 + (e & 1));
            s[n][e] = v ? pr : 0.f;
            dp[n][e] = v ? ds : 0.f;
        }
    }
}

/* Whether operand o of pointer p (cols wide, over `lead`; ve elements in 16 bytes) may be
 * loaded 16 bytes at a time: contiguous columns, 16-byte aligned rows in every batch entry. */
bool tc_vec(const void *p, const rmk_att_operand &o, const rmk_att_lead &lead, int64_t cols,
            int ve) {
    if (!p || ((uintptr_t)p & 15) || cols % ve || (o.cs != 1 && cols > 1) || o.rs % ve)
        return false;
    for (int i = 0; i < lead.nlead; i++)
        if (o.bst[i] % ve) return false;
    return true;
}

/* Where a thread is: lane, warp, and the mma quad's group g and thread t (lane = 4g + t). */
struct tc_where {
    int lane, w, g, t;
    __device__ __forceinline__ tc_where()
        : lane((int)threadIdx.x & 31), w((int)threadIdx.x >> 5), g(lane >> 2), t(lane & 3) {}
};

/* The end of the keys the query tile at i0 (br rows) sees: causal, up to its last row's. */
__device__ __forceinline__ int64_t tc_key_end(const rmk_att_dims &d, int64_t i0, int64_t br) {
    if (!d.causal) return d.Tk;
    const int64_t n = i0 + br + d.off;
    return n < 0 ? 0 : n < d.Tk ? n : d.Tk;
}

/* One call's operands, as the three kernels take them: q, k, v, y, dO (gy) and the
 * gradients dq, dk, dv, views of any strides over `lead` (a gradient not wanted is NULL),
 * and the rows' lse and delta (nb · Tq, f32). vec: tc_vec_bits. */
template <typename E> struct tc_params {
    rmk_att_dims d;
    rmk_att_lead lead;
    rmk_att_operand oq, ok, ov, oy, og, odq, odk, odv;
    const E *q, *k, *v, *gy;
    E *y, *dq, *dk, *dv;
    float *lse, *delta;
    float *dqa;    /* fused backward: dq's f32 partial sums (nb · Tq rows of HD) */
    unsigned *cnt; /* fused backward: a counter per query tile, then the ticket counter */
    unsigned vec;
};

/* The fused backward's scratch (rmk_attention_bwd's ws), byte offsets: delta (nb · Tq f32)
 * at 0, then dq's f32 partial sums (nb · Tq · HD), then nb · ⌈Tq / bq⌉ + 1 counters.
 * GPT-2 124M's shape (nb 96, Tq 1024, HD 64): 24.4 MiB, one caching-allocator segment. */
struct tc_ws_layout {
    size_t dqa, cnt, bytes;
};
inline tc_ws_layout tc_fused_ws(const rmk_att_dims &d, int bq, int hd) {
    const size_t nb = (size_t)(d.nb > 0 ? d.nb : 0), tq = (size_t)(d.Tq > 0 ? d.Tq : 0);
    const size_t nqb = (tq + (size_t)bq - 1) / (size_t)bq;
    tc_ws_layout w;
    w.dqa = (nb * tq * 4 + 255) & ~(size_t)255;
    w.cnt = w.dqa + ((nb * tq * (size_t)hd * 4 + 255) & ~(size_t)255);
    w.bytes = w.cnt + (nb * nqb + 1) * 4;
    return w;
}

/* The next key tile (rows j0.. of k and v) into Ks and Vs, between barriers: the previous
 * tile's readers are done before, every thread sees the new one after. */
template <typename TR, int HD, int NT, typename E>
__device__ __forceinline__ void tc_next_kv(E *Ks, E *Vs, int rows, const tc_params<E> &p,
                                           int64_t bk, int64_t bv, int64_t j0) {
    __syncthreads();
    tc_load<TR, HD, NT>(Ks, rows, p.k, bk, p.ok, j0, p.d.Tk, p.d.D, p.vec & 2);
    tc_load<TR, HD, NT>(Vs, rows, p.v, bv, p.ov, j0, p.d.Tk, p.d.Dv, p.vec & 4);
    __syncthreads();
}

/* tc_next_kv with tc_load_lean (RMK_TC_LEAN; the dQ pass). */
template <typename TR, int HD, int NT, int ROWS, typename E>
__device__ __forceinline__ void tc_next_kv_lean(E *Ks, E *Vs, const tc_params<E> &p, int64_t bk,
                                                int64_t bv, int64_t j0) {
    __syncthreads();
    tc_load_lean<TR, HD, NT, ROWS>(Ks, p.k, bk, p.ok, j0, p.d.Tk, p.d.D, p.vec & 2);
    tc_load_lean<TR, HD, NT, ROWS>(Vs, p.v, bv, p.ov, j0, p.d.Tk, p.d.Dv, p.vec & 4);
    __syncthreads();
}

/* Accumulator fragments set to 0. */
template <int N> __device__ __forceinline__ void tc_zero(float (&a)[N][4]) {
#pragma unroll
    for (int n = 0; n < N; n++) a[n][0] = a[n][1] = a[n][2] = a[n][3] = 0.f;
}

/* A dK/dV step's per-query values in shared memory (the default and the fused backward):
 * Ls = the lse of queries i0 .. i0 + BQ - 1 of batch entry b in log2 units (0 for a row
 * without keys and past Tq), Dl = their delta = rowsum(dO ∘ O). */
template <int BQ, int NT, typename E>
__device__ __forceinline__ void tc_stage_rows(float *Ls, float *Dl, const tc_params<E> &p,
                                              int64_t b, int64_t i0) {
    for (int e = threadIdx.x; e < BQ; e += NT) {
        const int64_t i = i0 + e;
        const float li = i < p.d.Tq ? p.lse[b * p.d.Tq + i] : 0.f;
        Ls[e] = li == -INFINITY ? 0.f : li * 1.4426950408889634f;
        Dl[e] = i < p.d.Tq ? p.delta[b * p.d.Tq + i] : 0.f;
    }
}

/* Sᵀ and dPᵀ of the warp's keys (ja, ja + 8) × BQ queries from i0, in place into P and
 * dS = P ∘ (dP − delta) · scale; 0 where the mask hides the pair (vis: the warp's keys'
 * tc_tile_vis). Ls, Dl as tc_stage_rows leaves them. */
template <int BQ>
__device__ __forceinline__ void tc_p_ds(float (&s)[BQ / 8][4], float (&dp)[BQ / 8][4], int vis,
                                        const rmk_att_dims &d, int64_t i0, int64_t ja, int t,
                                        float sl2, float scale, const float *Ls, const float *Dl) {
#pragma unroll
    for (int n = 0; n < BQ / 8; n++)
#pragma unroll
        for (int e = 0; e < 4; e++) {
            const int ii = n * 8 + 2 * t + (e & 1);
            const int64_t j = ja + (e >> 1) * 8, i = i0 + ii;
            float pr = 0.f, ds = 0.f;
            if (vis == TC_ALL || tc_visible(d, i, j)) {
                pr = exp2f(s[n][e] * sl2 - Ls[ii]);
                ds = pr * (dp[n][e] - Dl[ii]) * scale;
            }
            s[n][e] = pr;
            dp[n][e] = ds;
        }
}

/* tc_p_ds lean (RMK_TC_LEAN): dp ← dS without the scale (dK's store applies it); the mask
 * only where vis says the tile is cut. */
template <int BQ>
__device__ __forceinline__ void tc_p_ds_lean(float (&s)[BQ / 8][4], float (&dp)[BQ / 8][4], int vis,
                                             const rmk_att_dims &d, int64_t i0, int64_t ja, int t,
                                             float sl2, const float *Ls, const float *Dl) {
    tc_lean_cols m{};
    if (vis == TC_ALL) {
        tc_lean_p_ds<false, BQ>(s, dp, t, sl2, Ls, Dl, m);
        return;
    }
    m.queries(d, ja, i0, BQ, t);
    tc_lean_p_ds<true, BQ>(s, dp, t, sl2, Ls, Dl, m);
}

/* The operand flags of a call: bit 1 q, 2 k, 4 v, 8 gy (16-byte loads). */
template <typename E> unsigned tc_vec_bits(const tc_params<E> &p) {
    const int ve = 16 / (int)sizeof(E);
    return (tc_vec(p.q, p.oq, p.lead, p.d.D, ve) ? 1u : 0u) |
           (tc_vec(p.k, p.ok, p.lead, p.d.D, ve) ? 2u : 0u) |
           (tc_vec(p.v, p.ov, p.lead, p.d.Dv, ve) ? 4u : 0u) |
           (tc_vec(p.gy, p.og, p.lead, p.d.Dv, ve) ? 8u : 0u);
}

} // namespace

/* ---- forward --------------------------------------------------------------------------- */
/* One key tile's online-softmax step for one m-tile (16 rows: ra, ra + 8) of a warp: s, its
 * scores S (16 × BC from key j0), scaled to log2 units, masked (vis: the m-tile's
 * tc_tile_vis; TC_NONE masks every score, which leaves m2, l and o as they are), turned into
 * P = exp2(s − max); the rows' max m2 and sum l updated, o rescaled to the new max. */
template <int BC, int NDT>
__device__ __forceinline__ void
tc_softmax_step(float (&s)[BC / 8][4], float (&o)[NDT][4], float (&m2)[2], float (&l)[2], int vis,
                const rmk_att_dims &d, int64_t ra, int64_t j0, int t, float sl2) {
    float mx[2] = {-INFINITY, -INFINITY};
#pragma unroll
    for (int n = 0; n < BC / 8; n++)
#pragma unroll
        for (int e = 0; e < 4; e++) {
            const int64_t i = ra + (e >> 1) * 8, j = j0 + n * 8 + 2 * t + (e & 1);
            const float sv = (vis == TC_ALL || tc_visible(d, i, j)) ? s[n][e] * sl2 : -INFINITY;
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
    for (int n = 0; n < BC / 8; n++)
#pragma unroll
        for (int e = 0; e < 4; e++) {
            const float pr = exp2f(s[n][e] - sub[e >> 1]);
            s[n][e] = pr;
            ls[e >> 1] += pr;
        }
#pragma unroll
    for (int h = 0; h < 2; h++) l[h] = l[h] * corr[h] + quad_sum(ls[h]);
#pragma unroll
    for (int n = 0; n < NDT; n++) {
        o[n][0] *= corr[0];
        o[n][1] *= corr[0];
        o[n][2] *= corr[1];
        o[n][3] *= corr[1];
    }
}

/* (tc_ex2: with quad_max, one for the forward and the backward) */
__device__ __forceinline__ float quad_fmax(float v) {
    v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, 1));
    return fmaxf(v, __shfl_xor_sync(0xffffffffu, v, 2));
}
/* v clamped to ±2^20: a tile's offsets (< 128) compare with it as with v */
__device__ __forceinline__ int tc_clamp32(int64_t v) {
    return (int)(v < -(1 << 20) ? -(1 << 20) : v > (1 << 20) ? (1 << 20) : v);
}

/* tc_softmax_step (RMK_TC_FWD_LEAN) in fewer instructions a score, the same values but for
 * rounding: wholly visible tiles (TC_ALL, all but the diagonal's under the causal mask) are
 * not masked; the others compare each score's offsets in the tile (constants once unrolled)
 * with three 32-bit bounds of the thread's. The rows' max is taken over the unscaled
 * scores (sl2 > 0: the kernel negates Q for a negative scale), so that scaling and
 * subtracting it is one FFMA; fmaxf instead of rmk_nanmax (a NaN score still makes its row's
 * l, and so y, NaN, and the lse -inf, as in tc_softmax_step: through its P); tc_ex2. */
template <int BC, int NDT>
__device__ __forceinline__ void
tc_softmax_step_lean(float (&s)[BC / 8][4], float (&o)[NDT][4], float (&m2)[2], float (&l)[2],
                     int vis, const rmk_att_dims &d, int64_t ra, int64_t j0, int t, float sl2) {
    if (vis != TC_ALL) {
        /* score (n, e) is row ra + ir, key c0 + jr: ir = 8·(e / 2), jr = 8n + e % 2 */
        const int64_t c0 = j0 + 2 * t;
        const int rq = tc_clamp32(d.Tq - ra), ck = tc_clamp32(d.Tk - c0);
        const int dg = d.causal ? tc_clamp32(ra + d.off - c0) : (1 << 20);
#pragma unroll
        for (int n = 0; n < BC / 8; n++)
#pragma unroll
            for (int e = 0; e < 4; e++) {
                const int ir = 8 * (e >> 1), jr = 8 * n + (e & 1);
                if (!(ir < rq && jr < ck && jr - ir <= dg)) s[n][e] = -INFINITY;
            }
    }
    float mx[2] = {-INFINITY, -INFINITY};
#pragma unroll
    for (int n = 0; n < BC / 8; n++)
#pragma unroll
        for (int e = 0; e < 4; e++) mx[e >> 1] = fmaxf(mx[e >> 1], s[n][e]);
    float sub[2], corr[2], ls[2] = {0.f, 0.f};
#pragma unroll
    for (int h = 0; h < 2; h++) {
        const float mnew = fmaxf(m2[h], quad_fmax(mx[h]) * sl2);
        sub[h] = mnew == -INFINITY ? 0.f : mnew; /* nothing seen yet: no inf - inf */
        corr[h] = tc_ex2(m2[h] - sub[h]);
        m2[h] = mnew;
    }
#pragma unroll
    for (int n = 0; n < BC / 8; n++)
#pragma unroll
        for (int e = 0; e < 4; e++) {
            const float pr = tc_ex2(fmaf(s[n][e], sl2, -sub[e >> 1]));
            s[n][e] = pr;
            ls[e >> 1] += pr;
        }
#pragma unroll
    for (int h = 0; h < 2; h++) l[h] = l[h] * corr[h] + quad_sum(ls[h]);
#pragma unroll
    for (int n = 0; n < NDT; n++) {
        o[n][0] *= corr[0];
        o[n][1] *= corr[0];
        o[n][2] *= corr[1];
        o[n][3] *= corr[1];
    }
}

/* A block takes BRF query rows (NWF warps × MTF m-tiles of 16) and walks the key tiles they
 * see; warp w owns rows 16·MTF·w .. 16·MTF·(w + 1) − 1, m-tile mt the 16 from 16·(MTF·w + mt),
 * each with its own statistics. */
template <typename TR, int HD>
__global__ void __launch_bounds__(tc_cfg<TR, HD>::NTF, tc_cfg<TR, HD>::MINB_FWD)
    tc_att_fwd(const __grid_constant__ tc_params<typename TR::elem> p) {
    typedef tc_cfg<TR, HD> C;
    /* m-tiles and rows of a warp */
    constexpr int MT = C::MTF, WR = 16 * MT;
    typename TR::elem *Qs = tc_shared<typename TR::elem>(), /* BRF × LD */
        *Ks = Qs + C::BRF * C::LD,                          /* BC × LD */
            *Vs = Ks + C::BC * C::LD;                       /* BC × LD */
    const tc_where at;
    const int lane = at.lane, w = at.w, g = at.g, t = at.t;
    const int64_t nqb = (p.d.Tq + C::BRF - 1) / C::BRF;
    /* scale · log2(e); C::LEAN: |scale|, Q negated for a negative one (exactly: the products'
     * rounding is symmetric), so that the rows' max can be taken before scaling */
    const bool negq = C::LEAN && p.d.scale < 0;
    const float sl2 = (float)(negq ? -p.d.scale : p.d.scale) * 1.4426950408889634f;
    for (int64_t item = blockIdx.x; item < p.d.nb * nqb; item += gridDim.x) {
        /* heaviest (last, under the causal mask) query tiles first */
        const int64_t b = item / nqb, i0 = (nqb - 1 - item % nqb) * C::BRF;
        const int64_t ra = i0 + w * WR + g; /* m-tile mt's rows: ra + 16·mt, ra + 16·mt + 8 */
        const int64_t bq = rmk_att_boff(&p.lead, &p.oq, b), bk = rmk_att_boff(&p.lead, &p.ok, b),
                      bv = rmk_att_boff(&p.lead, &p.ov, b);
        const int64_t kn = tc_key_end(p.d, i0, C::BRF);
        __syncthreads(); /* the previous item is done with the tiles */
        tc_load<TR, HD, C::NTF>(Qs, C::BRF, p.q, bq, p.oq, i0, p.d.Tq, p.d.D, p.vec & 1);
        if (negq) { /* uniform; the barrier below or tc_next_kv's makes it seen */
            __syncthreads();
            for (int e = threadIdx.x; e < C::BRF * HD; e += C::NTF) {
                typename TR::elem &x = Qs[(e / HD) * C::LD + e % HD];
                x = TR::narrow(-TR::widen(x));
            }
        }
        /* C::QREG: the warp's Q fragments, read once (the barrier: every thread's rows in Qs) */
        uint32_t qa[C::QREG ? MT : 1][C::QREG ? HD / 16 : 1][4];
        (void)qa;
        if constexpr (C::QREG) {
            __syncthreads();
            TR::template rows_frags<HD, MT>(qa, Qs + w * WR * C::LD, C::LD, lane);
        }
        float o[MT][C::NDT][4];
        float m2[MT][2], l[MT][2]; /* m2: max in log2 units */
#pragma unroll
        for (int mt = 0; mt < MT; mt++) {
            tc_zero(o[mt]);
            m2[mt][0] = m2[mt][1] = -INFINITY;
            l[mt][0] = l[mt][1] = 0.f;
        }
        for (int64_t j0 = 0; j0 < kn; j0 += C::BC) {
            tc_next_kv<TR, HD, C::NTF>(Ks, Vs, C::BC, p, bk, bv, j0);
            int vis[MT];
            bool any = false;
#pragma unroll
            for (int mt = 0; mt < MT; mt++) {
                vis[mt] = tc_tile_vis(p.d, i0 + w * WR + mt * 16, 16, j0, C::BC);
                any = any || vis[mt] != TC_NONE;
            }
            if (!any) continue; /* the barriers above are the block's; none below */
            float s[MT][C::BC / 8][4];
#pragma unroll
            for (int mt = 0; mt < MT; mt++) tc_zero(s[mt]);
            if constexpr (C::QREG)
                TR::template frags_rowsT<HD, C::BC / 8, MT>(s, qa, Ks, C::LD, lane);
            else
                TR::template rows_rowsT_mt<HD, C::BC / 8, MT>(s, Qs + w * WR * C::LD, Ks, C::LD,
                                                              lane);
#pragma unroll
            for (int mt = 0; mt < MT; mt++)
                if constexpr (C::LEAN)
                    tc_softmax_step_lean<C::BC, C::NDT>(s[mt], o[mt], m2[mt], l[mt], vis[mt], p.d,
                                                        ra + 16 * mt, j0, t, sl2);
                else
                    tc_softmax_step<C::BC, C::NDT>(s[mt], o[mt], m2[mt], l[mt], vis[mt], p.d,
                                                   ra + 16 * mt, j0, t, sl2);
            TR::template frag_rows_mt<C::BC / 8, C::NDT, MT>(o, s, Vs, C::LD, lane);
        }
        const int64_t by = rmk_att_boff(&p.lead, &p.oy, b);
#pragma unroll
        for (int mt = 0; mt < MT; mt++) {
            float inv[2];
#pragma unroll
            for (int h = 0; h < 2; h++) /* no keys: p.y = 0 */
                inv[h] = l[mt][h] > 0.f ? 1.f / l[mt][h] : 0.f;
            tc_store<TR, C::NDT>(p.y, by, p.oy, ra + 16 * mt, p.d.Tq, p.d.Dv, o[mt], inv, t);
            if (t == 0)
#pragma unroll
                for (int h = 0; h < 2; h++) {
                    const int64_t i = ra + 16 * mt + 8 * h;
                    const float m = m2[mt][h] == -INFINITY ? 0.f : m2[mt][h];
                    if (i < p.d.Tq)
                        p.lse[b * p.d.Tq + i] = l[mt][h] > 0.f
                                                    ? (m + log2f(l[mt][h])) * 0.6931471805599453f
                                                    : -INFINITY;
                }
        }
    }
}

/* ---- backward: delta and dQ, by query tiles -------------------------------------------- */
template <typename TR, int HD>
__global__ void __launch_bounds__(tc_cfg<TR, HD>::NT, tc_cfg<TR, HD>::MINB_DQ)
    tc_att_bwd_dq(const __grid_constant__ tc_params<typename TR::elem> p) {
    typedef tc_cfg<TR, HD> C;
    typedef typename TR::elem E;
    E *Qs = tc_shared<E>();     /* BR × LD */
    E *Gs = Qs + C::BR * C::LD; /* BR × LD: dO */
    E *Ks = Gs + C::BR * C::LD; /* BC × LD */
    E *Vs = Ks + C::BC * C::LD; /* BC × LD */
    const tc_where at;
    const int lane = at.lane, w = at.w, g = at.g, t = at.t;
    const int64_t nqb = (p.d.Tq + C::BR - 1) / C::BR;
    const float sl2 = (float)p.d.scale * 1.4426950408889634f, scale = (float)p.d.scale;
    for (int64_t item = blockIdx.x; item < p.d.nb * nqb; item += gridDim.x) {
        const int64_t b = item / nqb, i0 = (nqb - 1 - item % nqb) * C::BR;
        const int64_t ra = i0 + w * 16 + g;
        const int64_t bq = rmk_att_boff(&p.lead, &p.oq, b), bk = rmk_att_boff(&p.lead, &p.ok, b),
                      bv = rmk_att_boff(&p.lead, &p.ov, b), bg = rmk_att_boff(&p.lead, &p.og, b),
                      by = rmk_att_boff(&p.lead, &p.oy, b);
        const int64_t kn = tc_key_end(p.d, i0, C::BR);
        __syncthreads();
        tc_load<TR, HD, C::NT>(Qs, C::BR, p.q, bq, p.oq, i0, p.d.Tq, p.d.D, p.vec & 1);
        tc_load<TR, HD, C::NT>(Gs, C::BR, p.gy, bg, p.og, i0, p.d.Tq, p.d.Dv, p.vec & 8);
        __syncthreads();
        /* delta_i = sum_c dO[i, c] · p.y[i, c] in f32: two threads a row, columns by parity
         * of 8-element chunks, then one shuffle */
        {
            const int rr = threadIdx.x >> 1, half = threadIdx.x & 1;
            const int64_t i = i0 + rr;
            float dl = 0.f;
            if (i < p.d.Tq)
                for (int64_t c = half; c < p.d.Dv; c += 2)
                    dl += TR::widen(Gs[rr * C::LD + c]) *
                          TR::widen(p.y[by + i * p.oy.rs + c * p.oy.cs]);
            dl += __shfl_xor_sync(0xffffffffu, dl, 1);
            if (i < p.d.Tq && half == 0) p.delta[b * p.d.Tq + i] = dl;
        }
        if (!p.dq) continue; /* uniform: every thread of the block skips */
        __syncthreads();     /* p.delta written by the block's threads is read below */
        float lr[2], dr[2];  /* the rows' lse (log2 units) and p.delta */
#pragma unroll
        for (int h = 0; h < 2; h++) {
            const int64_t i = ra + 8 * h;
            const float li = i < p.d.Tq ? p.lse[b * p.d.Tq + i] : 0.f;
            lr[h] = li == -INFINITY ? 0.f : li * 1.4426950408889634f;
            dr[h] = i < p.d.Tq ? p.delta[b * p.d.Tq + i] : 0.f;
        }
        float acc[C::NDT][4];
        tc_zero(acc);
        for (int64_t j0 = 0; j0 < kn; j0 += C::BC) {
#if RMK_TC_LEAN
            tc_next_kv_lean<TR, HD, C::NT, C::BC>(Ks, Vs, p, bk, bv, j0);
#else
            tc_next_kv<TR, HD, C::NT>(Ks, Vs, C::BC, p, bk, bv, j0);
#endif
            const int vis = tc_tile_vis(p.d, i0 + w * 16, 16, j0, C::BC);
            if (vis == TC_NONE) continue;
            float s[C::BC / 8][4], dp[C::BC / 8][4];
            tc_zero(s);
            tc_zero(dp);
            TR::template rows_rowsT<HD, C::BC / 8>(s, Qs + w * 16 * C::LD, Ks, C::LD, g, t);
            TR::template rows_rowsT<HD, C::BC / 8>(dp, Gs + w * 16 * C::LD, Vs, C::LD, g, t);
#if RMK_TC_LEAN
            tc_lean_cols m{};
            if (vis == TC_ALL) tc_lean_ds_rows<false>(s, dp, lr, dr, sl2, m);
            else {
                m.keys(p.d, ra, j0, C::BC, t);
                tc_lean_ds_rows<true>(s, dp, lr, dr, sl2, m);
            }
#else
#pragma unroll
            for (int n = 0; n < C::BC / 8; n++)
#pragma unroll
                for (int e = 0; e < 4; e++) {
                    const int h = e >> 1;
                    const int64_t i = ra + h * 8, j = j0 + n * 8 + 2 * t + (e & 1);
                    float ds = 0.f;
                    if (vis == TC_ALL || tc_visible(p.d, i, j)) {
                        const float pr = exp2f(s[n][e] * sl2 - lr[h]);
                        ds = pr * (dp[n][e] - dr[h]) * scale;
                    }
                    s[n][e] = ds;
                }
#endif
            TR::template frag_rows<C::BC / 8, C::NDT>(acc, s, Ks, C::LD, lane);
        }
#if RMK_TC_LEAN
        const float sc[2] = {scale, scale}; /* dS came without it */
        tc_store<TR, C::NDT>(p.dq, rmk_att_boff(&p.lead, &p.odq, b), p.odq, ra, p.d.Tq, p.d.D, acc,
                             sc, t);
#else
        const float one[2] = {1.f, 1.f};
        tc_store<TR, C::NDT>(p.dq, rmk_att_boff(&p.lead, &p.odq, b), p.odq, ra, p.d.Tq, p.d.D, acc,
                             one, t);
#endif
    }
}

/* ---- backward: dK and dV, by key tiles ------------------------------------------------- */
template <typename TR, int HD>
__global__ void __launch_bounds__(tc_cfg<TR, HD>::NT, tc_cfg<TR, HD>::MINB_DKDV)
    tc_att_bwd_dkdv(const __grid_constant__ tc_params<typename TR::elem> p) {
    typedef tc_cfg<TR, HD> C;
    typedef typename TR::elem E;
    constexpr int BQ = C::BCQ;              /* queries per step */
    E *Ks = tc_shared<E>();                 /* BR × LD: the block's keys */
    E *Vs = Ks + C::BR * C::LD;             /* BR × LD */
    E *Qs = Vs + C::BR * C::LD;             /* BQ × LD */
    E *Gs = Qs + BQ * C::LD;                /* BQ × LD: dO */
    float *Ls = (float *)(Gs + BQ * C::LD); /* BQ: p.lse, log2 units */
    float *Dl = Ls + BQ;                    /* BQ: p.delta */
    const tc_where at;
    const int lane = at.lane, w = at.w, g = at.g, t = at.t;
    const int64_t nkb = (p.d.Tk + C::BR - 1) / C::BR, nkv = p.d.nb / p.d.group;
    const float sl2 = (float)p.d.scale * 1.4426950408889634f, scale = (float)p.d.scale;
    for (int64_t item = blockIdx.x; item < nkv * nkb; item += gridDim.x) {
        /* causal: the first key tiles see the most queries: heaviest first. The item is a
         * kv entry's key tile; its query heads b0 .. b0 + group - 1 add to it in turn. */
        const int64_t b0 = (item / nkb) * p.d.group, j0 = (item % nkb) * C::BR;
        const int64_t ja = j0 + w * 16 + g; /* this thread's keys: ja, ja + 8 */
        const int64_t bk = rmk_att_boff(&p.lead, &p.ok, b0), bv = rmk_att_boff(&p.lead, &p.ov, b0);
        __syncthreads();
        tc_load<TR, HD, C::NT>(Ks, C::BR, p.k, bk, p.ok, j0, p.d.Tk, p.d.D, p.vec & 2);
        tc_load<TR, HD, C::NT>(Vs, C::BR, p.v, bv, p.ov, j0, p.d.Tk, p.d.Dv, p.vec & 4);
        float ak[C::NDT][4], av[C::NDT][4];
        tc_zero(ak);
        tc_zero(av);
        /* the first query that sees key j0 is j0 - off */
        const int64_t qfirst = p.d.causal ? j0 - p.d.off : 0;
        const int64_t qstart = qfirst > 0 ? (qfirst / BQ) * BQ : 0;
        for (int64_t b = b0; b < b0 + p.d.group; b++) {
            const int64_t bq = rmk_att_boff(&p.lead, &p.oq, b),
                          bg = rmk_att_boff(&p.lead, &p.og, b);
            for (int64_t i0 = qstart; i0 < p.d.Tq; i0 += BQ) {
                __syncthreads();
#if RMK_TC_LEAN
                tc_load_lean<TR, HD, C::NT, BQ>(Qs, p.q, bq, p.oq, i0, p.d.Tq, p.d.D, p.vec & 1);
                tc_load_lean<TR, HD, C::NT, BQ>(Gs, p.gy, bg, p.og, i0, p.d.Tq, p.d.Dv, p.vec & 8);
#else
                tc_load<TR, HD, C::NT>(Qs, BQ, p.q, bq, p.oq, i0, p.d.Tq, p.d.D, p.vec & 1);
                tc_load<TR, HD, C::NT>(Gs, BQ, p.gy, bg, p.og, i0, p.d.Tq, p.d.Dv, p.vec & 8);
#endif
                tc_stage_rows<BQ, C::NT>(Ls, Dl, p, b, i0);
                __syncthreads();
                const int vis = tc_tile_vis(p.d, i0, BQ, j0 + w * 16, 16);
                if (vis == TC_NONE) continue;
                float s[BQ / 8][4], dp[BQ / 8][4]; /* Sᵀ and dPᵀ: the warp's keys × queries */
                tc_zero(s);
                tc_zero(dp);
                TR::template rows_rowsT<HD, BQ / 8>(s, Ks + w * 16 * C::LD, Qs, C::LD, g, t);
                TR::template rows_rowsT<HD, BQ / 8>(dp, Vs + w * 16 * C::LD, Gs, C::LD, g, t);
#if RMK_TC_LEAN
                tc_p_ds_lean<BQ>(s, dp, vis, p.d, i0, ja, t, sl2, Ls, Dl);
#else
                tc_p_ds<BQ>(s, dp, vis, p.d, i0, ja, t, sl2, scale, Ls, Dl);
#endif
                TR::template frag_rows<BQ / 8, C::NDT>(av, s, Gs, C::LD, lane);
                TR::template frag_rows<BQ / 8, C::NDT>(ak, dp, Qs, C::LD, lane);
            }
        }
        const float one[2] = {1.f, 1.f};
#if RMK_TC_LEAN
        const float sck[2] = {scale, scale}; /* dS came without it */
        if (p.dk)
            tc_store<TR, C::NDT>(p.dk, rmk_att_boff(&p.lead, &p.odk, b0), p.odk, ja, p.d.Tk, p.d.D,
                                 ak, sck, t);
#else
        if (p.dk)
            tc_store<TR, C::NDT>(p.dk, rmk_att_boff(&p.lead, &p.odk, b0), p.odk, ja, p.d.Tk, p.d.D,
                                 ak, one, t);
#endif
        if (p.dv)
            tc_store<TR, C::NDT>(p.dv, rmk_att_boff(&p.lead, &p.odv, b0), p.odv, ja, p.d.Tk, p.d.Dv,
                                 av, one, t);
    }
}

/* ---- backward, fused (RMK_TC_BWD_FUSED): delta first, then dK, dV and dQ by key tiles -- */
/* delta = rowsum(dO ∘ y) of a query tile, its counter set to 0 (and the ticket counter by
 * block 0), and dq's rows 0 where the tile sees no key (no key tile adds to them). */
template <typename TR, int HD>
__global__ void __launch_bounds__(tc_cfg<TR, HD>::NT)
    tc_att_bwd_pre(const __grid_constant__ tc_params<typename TR::elem> p) {
    typedef tc_cfg<TR, HD> C;
    constexpr int BQ = C::BCQ, TPR = C::NT / BQ; /* threads a row: 2 or 4 */
    static_assert(TPR == 2 || TPR == 4, "2 or 4 threads a row");
    const int64_t nqb = (p.d.Tq + BQ - 1) / BQ;
    if (blockIdx.x == 0 && threadIdx.x == 0) p.cnt[p.d.nb * nqb] = 0u;
    for (int64_t item = blockIdx.x; item < p.d.nb * nqb; item += gridDim.x) {
        const int64_t b = item / nqb, qi = item % nqb, i0 = qi * BQ;
        const int rr = (int)threadIdx.x / TPR, part = (int)threadIdx.x % TPR;
        const int64_t i = i0 + rr;
        const int64_t by = rmk_att_boff(&p.lead, &p.oy, b), bg = rmk_att_boff(&p.lead, &p.og, b);
        float dl = 0.f;
        if (i < p.d.Tq)
            for (int64_t c = part; c < p.d.Dv; c += TPR)
                dl += TR::widen(p.gy[bg + i * p.og.rs + c * p.og.cs]) *
                      TR::widen(p.y[by + i * p.oy.rs + c * p.oy.cs]);
        dl += __shfl_xor_sync(0xffffffffu, dl, 1);
        if (TPR == 4) dl += __shfl_xor_sync(0xffffffffu, dl, 2);
        if (i < p.d.Tq && part == 0) p.delta[b * p.d.Tq + i] = dl;
        if (threadIdx.x == 0) p.cnt[b * nqb + qi] = 0u;
        if (p.dq && tc_order::last_kv(p.d, i0, BQ, C::BR) < 0) {
            const int64_t bo = rmk_att_boff(&p.lead, &p.odq, b);
            for (int64_t e = threadIdx.x; e < (int64_t)BQ * p.d.D; e += C::NT) {
                const int64_t r = i0 + e / p.d.D, c = e % p.d.D;
                if (r < p.d.Tq) p.dq[bo + r * p.odq.rs + c * p.odq.cs] = TR::narrow(0.f);
            }
        }
    }
}

/* A block takes key tiles by ticket, kv heads in order and each head's key tiles from the
 * last to the first, and works as tc_att_bwd_dkdv (dK, dV in registers over the query tiles
 * that see its keys), also writing each step's dS (queries × its keys) to shared memory for
 * the step's dQ part, dS·K over its keys: warp w takes query rows 16·(w % RG) and a CG-th
 * of the columns, then puts it in shared memory over Qs and Gs, from where each thread adds
 * 16-byte pieces. That part goes into the query tile's f32 sum when the tile's counter says
 * that every later key tile has added its own (key tile j of query tile i is add number
 * last(i) − j; the first stores, the last, j = 0, writes dq): one fixed order of adds,
 * whatever the blocks' timing. A key tile only waits for key tiles of its head with a
 * higher index, which took earlier tickets: no block waits for one that has not started.
 * With the causal mask, key tile j's first query tile is the one on the diagonal, where it
 * adds first: at every step it adds where tile j + 1 added one step before. */
template <typename TR, int HD>
__global__ void __launch_bounds__(tc_cfg<TR, HD>::NT, tc_cfg<TR, HD>::MINB_DKDV)
    tc_att_bwd_fused(const __grid_constant__ tc_params<typename TR::elem> p) {
    typedef tc_cfg<TR, HD> C;
    typedef typename TR::elem E;
    constexpr int BQ = C::BCQ, RG = BQ / 16, CG = C::NW / RG, NDQ = C::NDT / CG;
    static_assert(RG <= C::NW && C::NW % RG == 0 && C::NDT % CG == 0, "dQ's warp tiling");
    static_assert((size_t)BQ * HD * 4 <= 2 * C::ES * BQ * C::LD, "dQ's share fits Qs and Gs");
    E *Ks = tc_shared<E>();                        /* BR × LD: the block's keys */
    E *Vs = Ks + C::BR * C::LD;                    /* BR × LD */
    E *Qs = Vs + C::BR * C::LD;                    /* BQ × LD */
    E *Gs = Qs + BQ * C::LD;                       /* BQ × LD: dO */
    float *Ls = (float *)(Gs + BQ * C::LD);        /* BQ: p.lse, log2 units */
    float *Dl = Ls + BQ;                           /* BQ: p.delta */
    E *Ss = (E *)(Dl + BQ);                        /* BQ × LDS: dS, the step's queries × keys */
    unsigned *Is = (unsigned *)(Ss + BQ * C::LDS); /* the block's work item */
    const tc_where at;
    const int lane = at.lane, w = at.w, g = at.g, t = at.t;
    const int rg = w % RG, cg = w / RG;
    const int64_t nkb = (p.d.Tk + C::BR - 1) / C::BR, nkv = p.d.nb / p.d.group;
    const int64_t nqb = (p.d.Tq + BQ - 1) / BQ;
    const float sl2 = (float)p.d.scale * 1.4426950408889634f, scale = (float)p.d.scale;
    for (;;) {
        __syncthreads(); /* the previous item is done with the tiles and Is */
        if (threadIdx.x == 0) *Is = tc_order::ticket(p.cnt + p.d.nb * nqb);
        __syncthreads();
        const int64_t item = *Is;
        if (item >= nkv * nkb) break; /* uniform */
        const int64_t jt = nkb - 1 - item % nkb, b0 = (item / nkb) * p.d.group, j0 = jt * C::BR;
        const int64_t ja = j0 + w * 16 + g; /* this thread's keys: ja, ja + 8 */
        const int64_t bk = rmk_att_boff(&p.lead, &p.ok, b0), bv = rmk_att_boff(&p.lead, &p.ov, b0);
        tc_load<TR, HD, C::NT>(Ks, C::BR, p.k, bk, p.ok, j0, p.d.Tk, p.d.D, p.vec & 2);
        tc_load<TR, HD, C::NT>(Vs, C::BR, p.v, bv, p.ov, j0, p.d.Tk, p.d.Dv, p.vec & 4);
        float ak[C::NDT][4], av[C::NDT][4];
        tc_zero(ak);
        tc_zero(av);
        const int64_t qfirst = p.d.causal ? j0 - p.d.off : 0;
        const int64_t qstart = qfirst > 0 ? (qfirst / BQ) * BQ : 0;
        for (int64_t b = b0; b < b0 + p.d.group; b++) {
            const int64_t bq = rmk_att_boff(&p.lead, &p.oq, b),
                          bg = rmk_att_boff(&p.lead, &p.og, b);
            for (int64_t i0 = qstart; i0 < p.d.Tq; i0 += BQ) {
                __syncthreads(); /* the step before is done with Qs, Gs, Ss */
#if RMK_TC_LEAN
                tc_load_lean<TR, HD, C::NT, BQ>(Qs, p.q, bq, p.oq, i0, p.d.Tq, p.d.D, p.vec & 1);
                tc_load_lean<TR, HD, C::NT, BQ>(Gs, p.gy, bg, p.og, i0, p.d.Tq, p.d.Dv, p.vec & 8);
#else
                tc_load<TR, HD, C::NT>(Qs, BQ, p.q, bq, p.oq, i0, p.d.Tq, p.d.D, p.vec & 1);
                tc_load<TR, HD, C::NT>(Gs, BQ, p.gy, bg, p.og, i0, p.d.Tq, p.d.Dv, p.vec & 8);
#endif
                tc_stage_rows<BQ, C::NT>(Ls, Dl, p, b, i0);
                __syncthreads();
                if (tc_tile_vis(p.d, i0, BQ, j0, C::BR) == TC_NONE) continue; /* uniform */
                const int vis = tc_tile_vis(p.d, i0, BQ, j0 + w * 16, 16);
                float s[BQ / 8][4], dp[BQ / 8][4]; /* Sᵀ and dPᵀ: the warp's keys × queries */
                tc_zero(s);
                tc_zero(dp);
                if (vis != TC_NONE) {
                    TR::template rows_rowsT<HD, BQ / 8>(s, Ks + w * 16 * C::LD, Qs, C::LD, g, t);
                    TR::template rows_rowsT<HD, BQ / 8>(dp, Vs + w * 16 * C::LD, Gs, C::LD, g, t);
#if RMK_TC_LEAN
                    tc_p_ds_lean<BQ>(s, dp, vis, p.d, i0, ja, t, sl2, Ls, Dl);
#else
                    tc_p_ds<BQ>(s, dp, vis, p.d, i0, ja, t, sl2, scale, Ls, Dl);
#endif
                    TR::template frag_rows<BQ / 8, C::NDT>(av, s, Gs, C::LD, lane);
                    TR::template frag_rows<BQ / 8, C::NDT>(ak, dp, Qs, C::LD, lane);
                }
                if (!p.dq) continue; /* uniform */
                    /* dS (rounded as dK's product rounds it) into Ss, queries × keys */
#pragma unroll
                for (int n = 0; n < BQ / 8; n++)
#pragma unroll
                    for (int e = 0; e < 4; e++)
                        Ss[(n * 8 + 2 * t + (e & 1)) * C::LDS + w * 16 + g + (e >> 1) * 8] =
                            TR::narrow(dp[n][e]);
                __syncthreads();
                float o[NDQ][4];
                tc_zero(o);
                TR::template rows_cols<C::BR, NDQ>(o, Ss + rg * 16 * C::LDS, C::LDS,
                                                   Ks + cg * NDQ * 8, C::LD, lane);
                /* the share through shared memory (Qs and Gs are done with for this step),
                 * so that the adds after the wait are rows of 16 bytes a thread */
                float *Os = (float *)Qs; /* BQ × HD */
#pragma unroll
                for (int h = 0; h < 2; h++)
#pragma unroll
                    for (int nd = 0; nd < NDQ; nd++)
                        *(float2 *)(Os + (rg * 16 + g + 8 * h) * HD + (cg * NDQ + nd) * 8 + 2 * t) =
                            make_float2(o[nd][2 * h], o[nd][2 * h + 1]);
                const int64_t qi = i0 / BQ, last = tc_order::last_kv(p.d, i0, BQ, C::BR);
                const unsigned pos = (unsigned)(last - jt); /* this tile's add number */
                unsigned *cnt = p.cnt + b * nqb + qi;
                if (threadIdx.x == 0) tc_order::wait_eq(cnt, pos);
                __syncthreads(); /* every add before this one is seen, Os written */
#if RMK_TC_LEAN /* only key tile 0 writes dq: the others skip the divisions (calls) */
                const int64_t bo = jt > 0 ? 0 : rmk_att_boff(&p.lead, &p.odq, b);
#else
                const int64_t bo = rmk_att_boff(&p.lead, &p.odq, b);
#endif
#pragma unroll 2
                for (int e4 = threadIdx.x; e4 < BQ * HD / 4; e4 += C::NT) {
                    const int rr = e4 / (HD / 4), c = (e4 % (HD / 4)) * 4;
                    const int64_t r = i0 + rr;
                    if (r >= p.d.Tq) continue;
                    float4 v = *(const float4 *)(Os + rr * HD + c);
                    float4 *at = (float4 *)(p.dqa + (b * p.d.Tq + r) * HD + c);
                    if (pos > 0) {
                        const float4 a = tc_order::ldcg(at);
                        v.x = a.x + v.x;
                        v.y = a.y + v.y;
                        v.z = a.z + v.z;
                        v.w = a.w + v.w;
                    }
                    if (jt > 0) tc_order::stcg(at, v);
                    else {
                        const float vv[4] = {v.x, v.y, v.z, v.w};
                        for (int e = 0; e < 4; e++)
                            if (c + e < p.d.D)
#if RMK_TC_LEAN /* the sums are of dS without the scale */
                                p.dq[bo + r * p.odq.rs + (c + e) * p.odq.cs] =
                                    TR::narrow(vv[e] * scale);
#else
                                p.dq[bo + r * p.odq.rs + (c + e) * p.odq.cs] = TR::narrow(vv[e]);
#endif
                    }
                }
                __syncthreads(); /* every thread's add is done */
                if (threadIdx.x == 0) tc_order::release(cnt, pos + 1);
            }
        }
        const float one[2] = {1.f, 1.f};
#if RMK_TC_LEAN
        const float sck[2] = {scale, scale}; /* dS came without it */
        if (p.dk)
            tc_store<TR, C::NDT>(p.dk, rmk_att_boff(&p.lead, &p.odk, b0), p.odk, ja, p.d.Tk, p.d.D,
                                 ak, sck, t);
#else
        if (p.dk)
            tc_store<TR, C::NDT>(p.dk, rmk_att_boff(&p.lead, &p.odk, b0), p.odk, ja, p.d.Tk, p.d.D,
                                 ak, one, t);
#endif
        if (p.dv)
            tc_store<TR, C::NDT>(p.dv, rmk_att_boff(&p.lead, &p.odv, b0), p.odv, ja, p.d.Tk, p.d.Dv,
                                 av, one, t);
    }
}

/* ---- launchers ------------------------------------------------------------------------- */
#ifndef RMK_EMU /* tests/cuda_emu launches the kernels its own way */
namespace {

unsigned tc_grid(int64_t n) { return n <= 0 ? 0u : (unsigned)(n < 1048576 ? n : 1048576); }

template <typename F> cudaError_t tc_smem(F *f, size_t sm) {
    return cudaFuncSetAttribute(f, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)sm);
}

template <typename TR, int HD>
cudaError_t tc_fwd(const rmk_att_dims *d, const rmk_att_lead *lead, const rmk_att_operand *oq,
                   const void *q, const rmk_att_operand *ok, const void *k,
                   const rmk_att_operand *ov, const void *v, const rmk_att_operand *oy, void *y,
                   void *lse, cudaStream_t s) {
    typedef tc_cfg<TR, HD> C;
    typedef typename TR::elem E;
    const unsigned grid = tc_grid(d->nb * ((d->Tq + C::BRF - 1) / C::BRF));
    if (grid == 0) return cudaSuccess;
    tc_params<E> p = {};
    p.d = *d;
    p.lead = *lead;
    p.oq = *oq, p.ok = *ok, p.ov = *ov, p.oy = *oy;
    p.q = (const E *)q, p.k = (const E *)k, p.v = (const E *)v, p.y = (E *)y;
    p.lse = (float *)lse;
    p.vec = tc_vec_bits(p);
    cudaError_t e = tc_smem(tc_att_fwd<TR, HD>, C::SM_FWD);
    if (e != cudaSuccess) return e;
    tc_att_fwd<TR, HD><<<grid, C::NTF, C::SM_FWD, s>>>(p);
    return cudaGetLastError();
}

/* o, ptrs: q, k, v, y, gy, dq, dk, dv (rmk_attention_bwd's order) */
template <typename TR, int HD>
cudaError_t tc_bwd(const rmk_att_dims *d, const rmk_att_lead *lead, const rmk_att_operand *o,
                   const void *const *ptrs, const void *lse, void *ws, cudaStream_t s) {
    typedef tc_cfg<TR, HD> C;
    typedef typename TR::elem E;
    tc_params<E> p = {};
    p.d = *d;
    p.lead = *lead;
    p.oq = o[0], p.ok = o[1], p.ov = o[2], p.oy = o[3], p.og = o[4];
    p.odq = o[5], p.odk = o[6], p.odv = o[7];
    p.q = (const E *)ptrs[0], p.k = (const E *)ptrs[1], p.v = (const E *)ptrs[2];
    p.y = (E *)ptrs[3], p.gy = (const E *)ptrs[4];
    p.dq = (E *)ptrs[5], p.dk = (E *)ptrs[6], p.dv = (E *)ptrs[7];
    p.lse = (float *)lse, p.delta = (float *)ws;
    p.vec = tc_vec_bits(p);
    static_assert(C::MINB_DQ > 0 && C::MINB_DKDV > 0, "blocks an SM"); /* both builds use both */
#if RMK_TC_BWD_FUSED
    const tc_ws_layout wl = tc_fused_ws(*d, C::BCQ, HD);
    p.dqa = (float *)((char *)ws + wl.dqa);
    p.cnt = (unsigned *)((char *)ws + wl.cnt);
    /* one block at least: the ticket counter is set to 0 there */
    const int64_t nqt = d->nb * ((d->Tq + C::BCQ - 1) / C::BCQ);
    tc_att_bwd_pre<TR, HD><<<tc_grid(nqt > 0 ? nqt : 1), C::NT, 0, s>>>(p);
    cudaError_t e = cudaGetLastError();
    if (e != cudaSuccess) return e;
    /* blocks past the work take a ticket and end */
    const unsigned gf = tc_grid(d->nb / d->group * ((d->Tk + C::BR - 1) / C::BR));
    if (gf > 0) {
        e = tc_smem(tc_att_bwd_fused<TR, HD>, C::SM_FUSED);
        if (e != cudaSuccess) return e;
        tc_att_bwd_fused<TR, HD><<<gf, C::NT, C::SM_FUSED, s>>>(p);
    }
#else
    const unsigned g1 = tc_grid(d->nb * ((d->Tq + C::BR - 1) / C::BR));
    if (g1 > 0) { /* delta always (dK needs it), dQ when wanted */
        cudaError_t e = tc_smem(tc_att_bwd_dq<TR, HD>, C::SM_DQ);
        if (e != cudaSuccess) return e;
        tc_att_bwd_dq<TR, HD><<<g1, C::NT, C::SM_DQ, s>>>(p);
        e = cudaGetLastError();
        if (e != cudaSuccess) return e;
    }
    const unsigned g2 = tc_grid(d->nb / d->group * ((d->Tk + C::BR - 1) / C::BR));
    if (g2 > 0 && (p.dk || p.dv)) {
        cudaError_t e = tc_smem(tc_att_bwd_dkdv<TR, HD>, C::SM_DKDV);
        if (e != cudaSuccess) return e;
        tc_att_bwd_dkdv<TR, HD><<<g2, C::NT, C::SM_DKDV, s>>>(p);
    }
#endif
    return cudaGetLastError();
}

} // namespace

/* The most dynamic shared memory any of the three kernels of (TR, HD) asks a block for. */
template <typename TR, int HD> constexpr size_t tc_smem_need() {
    typedef tc_cfg<TR, HD> C;
    const size_t bwd =
        RMK_TC_BWD_FUSED ? C::SM_FUSED : (C::SM_DQ > C::SM_DKDV ? C::SM_DQ : C::SM_DKDV);
    return C::SM_FWD > bwd ? C::SM_FWD : bwd;
}

extern "C" bool rmk_attention_tc_ok(int dt, int hd) {
    if ((dt != 0 && dt != 4) || hd > 128) return false;
    /* the current device's (one GPU kind per process): compute capability and the shared
     * memory a block may opt in to (227 KiB on sm_90, 163 on sm_80, 99 on sm_86 / sm_89) */
    static int major = -1;
    static size_t smem = 0;
    if (major < 0) {
        int dev = 0, m = 0, opt = 0;
        if (cudaGetDevice(&dev) != cudaSuccess ||
            cudaDeviceGetAttribute(&m, cudaDevAttrComputeCapabilityMajor, dev) != cudaSuccess)
            m = 0;
        if (cudaDeviceGetAttribute(&opt, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev) !=
            cudaSuccess)
            opt = 0;
        (void)cudaGetLastError(); /* a failed query is not the caller's error */
        smem = (size_t)opt;
        major = m;
    }
    if (major < 8) return false;
    /* f32 at head size 128 asks up to 135 KiB: more than sm_86 / sm_89 give a block, where
     * the CUDA-core kernels run it instead of a launch that would fail */
    const size_t need =
        hd <= 32   ? (dt == 4 ? tc_smem_need<tr_bf16, 32>() : tc_smem_need<tr_f32, 32>())
        : hd <= 64 ? (dt == 4 ? tc_smem_need<tr_bf16, 64>() : tc_smem_need<tr_f32, 64>())
                   : (dt == 4 ? tc_smem_need<tr_bf16, 128>() : tc_smem_need<tr_f32, 128>());
    return smem == 0 || need <= smem; /* 0: the attribute could not be read; try the launch */
}

/* The backward's scratch: delta, and with RMK_TC_BWD_FUSED dq's partial sums and the
 * counters (tc_fused_ws). */
template <typename TR, int HD> size_t tc_bwd_ws(const rmk_att_dims *d) {
    const size_t delta = (size_t)(d->nb * d->Tq > 0 ? d->nb * d->Tq : 1) * sizeof(float);
    if (!RMK_TC_BWD_FUSED) return delta;
    const size_t f = tc_fused_ws(*d, tc_cfg<TR, HD>::BCQ, HD).bytes;
    return f > delta ? f : delta;
}
extern "C" size_t rmk_attention_tc_bwd_ws(int dt, int hd, const rmk_att_dims *d) {
    const bool bf = dt == 4;
    switch (hd) {
    case 32: return bf ? tc_bwd_ws<tr_bf16, 32>(d) : tc_bwd_ws<tr_f32, 32>(d);
    case 64: return bf ? tc_bwd_ws<tr_bf16, 64>(d) : tc_bwd_ws<tr_f32, 64>(d);
    default: return bf ? tc_bwd_ws<tr_bf16, 128>(d) : tc_bwd_ws<tr_f32, 128>(d);
    }
}

/* The kernels' launcher for dtype dt (0 f32, 4 bf16) and head class hd: K<TR, HD>::run. */
template <template <typename, int> class K, typename... A>
cudaError_t tc_dispatch(int dt, int hd, A... a) {
    if (dt != 0 && dt != 4) return cudaErrorInvalidValue;
    const bool bf = dt == 4;
    switch (hd) {
    case 32: return bf ? K<tr_bf16, 32>::run(a...) : K<tr_f32, 32>::run(a...);
    case 64: return bf ? K<tr_bf16, 64>::run(a...) : K<tr_f32, 64>::run(a...);
    case 128: return bf ? K<tr_bf16, 128>::run(a...) : K<tr_f32, 128>::run(a...);
    }
    return cudaErrorInvalidValue;
}
template <typename TR, int HD> struct tc_fwd_k {
    template <typename... A> static cudaError_t run(A... a) { return tc_fwd<TR, HD>(a...); }
};
template <typename TR, int HD> struct tc_bwd_k {
    template <typename... A> static cudaError_t run(A... a) { return tc_bwd<TR, HD>(a...); }
};

extern "C" cudaError_t rmk_attention_tc(int dt, int hd, const rmk_att_dims *d,
                                        const rmk_att_lead *lead, const rmk_att_operand *oq,
                                        const void *q, const rmk_att_operand *ok, const void *k,
                                        const rmk_att_operand *ov, const void *v,
                                        const rmk_att_operand *oy, void *y, void *lse,
                                        cudaStream_t s) {
    return tc_dispatch<tc_fwd_k>(dt, hd, d, lead, oq, q, ok, k, ov, v, oy, y, lse, s);
}

extern "C" cudaError_t rmk_attention_tc_bwd(int dt, int hd, const rmk_att_dims *d,
                                            const rmk_att_lead *lead, const rmk_att_operand *ops,
                                            const void *const *ptrs, const void *lse, void *ws,
                                            cudaStream_t s) {
    return tc_dispatch<tc_bwd_k>(dt, hd, d, lead, ops, ptrs, lse, ws, s);
}
#endif /* RMK_EMU */
