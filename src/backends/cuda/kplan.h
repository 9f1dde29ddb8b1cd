/* src/backends/cuda/kplan.h — the host-side index plans of the CUDA
 * kernels: plain C (no CUDA, no core.h), shared by the .cu kernels (the
 * structs they are handed by value), the C wrappers that fill them from
 * tensors, and tests/test_cuda_indexing.c, which checks them on the cpu.
 *
 * Every plan is computed on the host once per launch; the kernels only
 * decompose a flat index over the plan's (coalesced) dims. */
#ifndef REMAT_CUDA_KPLAN_H
#define REMAT_CUDA_KPLAN_H

#include <stdbool.h>
#include <stdint.h>

#include "core/kernels/groups.h"

#define RMK_MAX_DIMS 8 /* REMAT_MAX_DIMS */
#define RMK_MAX_OPS 4  /* y, a, b, c */

/* A strided iteration space: `nd` dims of `shape` (row-major order of the
 * flat index), operand k at element offset sum_d idx[d] * st[k][d].
 * Size-1 dims are dropped and dims contiguous with their inner neighbour in
 * every operand merged, so a contiguous operand set is one dim.
 *
 * Decomposing a flat index costs a division per dim but the outermost; a
 * 64-bit division is a long subroutine on a GPU, slower than the memory
 * traffic of the copy it indexes. Plans of fewer than 2^31 elements (`small`)
 * divide by multiplying: q = umulhi(i, mul[d]) >> shr[d] (Granlund and
 * Montgomery's round-up method; exact for every i < 2^31 and divisor in
 * [1, 2^31)), computed once on the host. */
typedef struct rmk_plan {
    int nd;    /* >= 1 */
    int nops;  /* operands tracked */
    int small; /* numel < 2^31: the 32-bit divisions below apply */
    int64_t shape[RMK_MAX_DIMS];
    int64_t st[RMK_MAX_OPS][RMK_MAX_DIMS];
    uint32_t mul[RMK_MAX_DIMS], shr[RMK_MAX_DIMS]; /* shape[d] == 1 (never asked): 0, 0 */
} rmk_plan;

/* The multiplier and shift of a divisor d in [2, 2^31) for i / d, i < 2^31:
 * l = ceil(log2 d), mul = ceil(2^(31 + l) / d) (< 2^32), shr = l - 1. */
static inline void rmk_fastdiv_magic(uint32_t d, uint32_t *mul, uint32_t *shr) {
    uint32_t l = 0;
    while (((uint64_t)1 << l) < d) l++;
    *mul = (uint32_t)((((uint64_t)1 << (31 + l)) + d - 1) / d);
    *shr = l - 1;
}

/* Builds the plan of nops operands over (ndim, shape): st[k] are operand
 * k's element strides over those dims (0 along broadcast dims). */
static inline void rmk_plan_build(rmk_plan *p, int ndim, const int64_t *shape, int nops,
                                  const int64_t (*st)[RMK_MAX_DIMS]) {
    int nd = 0;
    p->nops = nops;
    for (int d = 0; d < ndim; d++) {
        if (shape[d] == 1) continue; /* strides of a size-1 dim never matter */
        if (nd > 0) {
            bool merge = true;
            for (int k = 0; k < nops && merge; k++) merge = p->st[k][nd - 1] == st[k][d] * shape[d];
            if (merge) {
                p->shape[nd - 1] *= shape[d];
                for (int k = 0; k < nops; k++) p->st[k][nd - 1] = st[k][d];
                continue;
            }
        }
        p->shape[nd] = shape[d];
        for (int k = 0; k < nops; k++) p->st[k][nd] = st[k][d];
        nd++;
    }
    if (nd == 0) { /* one element */
        p->shape[0] = 1;
        for (int k = 0; k < nops; k++) p->st[k][0] = 0;
        nd = 1;
    }
    for (int k = nops; k < RMK_MAX_OPS; k++)
        for (int d = 0; d < nd; d++) p->st[k][d] = 0;
    p->nd = nd;
    int64_t n = 1;
    for (int d = 0; d < nd; d++) n *= p->shape[d];
    p->small = n < ((int64_t)1 << 31);
    for (int d = 0; d < RMK_MAX_DIMS; d++) p->mul[d] = p->shr[d] = 0;
    if (p->small)
        for (int d = 1; d < nd; d++) /* dim 0 takes what is left: no division */
            if (p->shape[d] > 1) rmk_fastdiv_magic((uint32_t)p->shape[d], &p->mul[d], &p->shr[d]);
}

/* Element offsets of flat index i in each operand (what the kernels do on
 * the device, written once for both sides). */
#ifdef __CUDACC__
#define RMK_HD __host__ __device__
#else
#define RMK_HD
#endif
static inline RMK_HD uint32_t rmk_umulhi(uint32_t a, uint32_t b) {
#ifdef __CUDA_ARCH__
    return __umulhi(a, b);
#else
    return (uint32_t)(((uint64_t)a * b) >> 32);
#endif
}
static inline RMK_HD void rmk_plan_offsets(const rmk_plan *p, int64_t i, int64_t off[RMK_MAX_OPS]) {
    for (int k = 0; k < RMK_MAX_OPS; k++) off[k] = 0;
    if (p->small) {
        uint32_t r = (uint32_t)i;
        for (int d = p->nd - 1; d > 0; d--) {
            uint32_t q = rmk_umulhi(r, p->mul[d]) >> p->shr[d];
            int64_t j = (int64_t)(r - q * (uint32_t)p->shape[d]);
            r = q;
            for (int k = 0; k < RMK_MAX_OPS; k++) off[k] += j * p->st[k][d];
        }
        for (int k = 0; k < RMK_MAX_OPS; k++) off[k] += (int64_t)r * p->st[k][0];
        return;
    }
    for (int d = p->nd - 1; d > 0; d--) {
        int64_t n = p->shape[d], j = i % n;
        i /= n;
        for (int k = 0; k < RMK_MAX_OPS; k++) off[k] += j * p->st[k][d];
    }
    for (int k = 0; k < RMK_MAX_OPS; k++) off[k] += i * p->st[k][0];
}

/* Row-major contiguous strides of (ndim, shape). */
static inline void rmk_contig_strides(int ndim, const int64_t *shape, int64_t *st) {
    int64_t s = 1;
    for (int d = ndim - 1; d >= 0; d--) {
        st[d] = s;
        s *= shape[d] > 0 ? shape[d] : 1;
    }
}

/* Strides of a (tndim, tshape, tstrides) operand broadcast to (ndim, shape),
 * dims aligned right: 0 where it is missing or has size 1. */
static inline void rmk_bcast_strides(int tndim, const int64_t *tshape, const int64_t *tstrides,
                                     int ndim, int64_t *out) {
    for (int d = 0; d < ndim; d++) {
        int td = d - (ndim - tndim);
        out[d] = (td < 0 || tshape[td] == 1) ? 0 : tstrides[td];
    }
}

/* ---- reductions: (O, R, I) passes over rm_groups (src/core/kernels/groups.h) ---------- */
/* How one sum pass (O, R, I) is split for parallelism: rows (I == 1) into
 * chunks of RMK_ROW_CHUNK elements when there are few rows, columns into
 * chunks of at least RMK_COL_MIN_ROWS rows when O * I threads alone are too
 * few. *chunk * *nch covers R; *nch = 1: no split (no scratch). The split
 * depends on the shape only, so the summation order does too. */
#define RMK_ROW_CHUNK 65536
#define RMK_COL_MIN_ROWS 64
#define RMK_TARGET_THREADS (1 << 17)
static inline void rmk_sum_split(int64_t O, int64_t R, int64_t I, int64_t *chunk, int64_t *nch) {
    if (I == 1) {
        *chunk = R > 0 ? R : 1;
        *nch = 1;
        if (O < 256 && R > RMK_ROW_CHUNK) {
            *chunk = RMK_ROW_CHUNK;
            *nch = (R + RMK_ROW_CHUNK - 1) / RMK_ROW_CHUNK;
        }
        return;
    }
    int64_t OI = O * I, n = 1;
    if (OI > 0 && OI < RMK_TARGET_THREADS) {
        n = RMK_TARGET_THREADS / OI;
        int64_t cap = (R + RMK_COL_MIN_ROWS - 1) / RMK_COL_MIN_ROWS;
        if (n > cap) n = cap;
        if (n < 1) n = 1;
    }
    *chunk = R > 0 ? (R + n - 1) / n : 1;
    *nch = R > 0 ? (R + *chunk - 1) / *chunk : 1;
}

/* ---- grids --------------------------------------------------------------------------------- */
/* Blocks of `threads` for n elements, capped (the kernels loop grid-stride
 * beyond the cap). 0 elements: 0 blocks (the launcher skips the launch). */
#define RMK_MAX_BLOCKS 65535 /* also gridDim.y's limit: any axis may use it */
static inline unsigned rmk_blocks(int64_t n, int threads) {
    if (n <= 0) return 0;
    int64_t b = (n + threads - 1) / threads;
    return (unsigned)(b > RMK_MAX_BLOCKS ? RMK_MAX_BLOCKS : b);
}

/* ---- attention ------------------------------------------------------------------------------
 * A (..., T, C) operand of attention: batch entry b (row-major over q's
 * leading shape) at element offset sum_d idx_d(b) * bst[d], row t and
 * column c at + t * rs + c * cs. The index of the last leading dim (the
 * heads) is divided by hdiv first: 1 for q and its kin, the query heads per
 * kv head for k, v and their gradients (grouped-query attention). */
typedef struct rmk_att_operand {
    int64_t bst[RMK_MAX_DIMS];
    int64_t rs, cs;
    int64_t hdiv;
} rmk_att_operand;

typedef struct rmk_att_lead {
    int nlead;
    int64_t shape[RMK_MAX_DIMS];
} rmk_att_lead;

static inline RMK_HD int64_t rmk_att_boff(const rmk_att_lead *l, const rmk_att_operand *o,
                                          int64_t b) {
    int64_t off = 0;
    for (int d = l->nlead - 1; d >= 0; d--) {
        int64_t n = l->shape[d], i = b % n;
        off += (d == l->nlead - 1 ? i / o->hdiv : i) * o->bst[d];
        b /= n;
    }
    return off;
}

/* Head-size class of the attention kernels: the smallest of 32, 64, 128,
 * 256 holding max(D, Dv); 0 when larger (unsupported on cuda). */
static inline int rmk_att_head_class(int64_t D, int64_t Dv) {
    int64_t m = D > Dv ? D : Dv;
    if (m <= 32) return 32;
    if (m <= 64) return 64;
    if (m <= 128) return 128;
    if (m <= 256) return 256;
    return 0;
}

#endif /* REMAT_CUDA_KPLAN_H */
