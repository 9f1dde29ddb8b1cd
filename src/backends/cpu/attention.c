/* src/backends/cpu/attention.c — cpu kernels of fused scaled dot-product
 * attention (src/ops/attention.c): the forward (RM_K_ATTENTION) and the
 * backward from the saved row log-sum-exp (RM_K_ATTENTION_BWD).
 *
 *   out = softmax(scale · q·kᵀ, causal mask) · v        over the last two dims
 *
 * The composed version (matmul, scale, masked_fill, softmax, matmul)
 * writes and reads the (Tq, Tk) score matrix of every batch entry several
 * times and computes the half of it a causal mask throws away. Here the work
 * is cut into blocks of ATT_QB query rows; a block's scores live in a small
 * per-thread buffer that stays in cache, and with the causal mask a block
 * only multiplies against the keys its rows can see (row i sees keys
 * j ≤ i + off: off 0 top-left aligned as torch's is_causal, Tk − Tq for the
 * lower-right mask of a KV cache), which skips about half the GEMM work of
 * the two products.
 *
 * Backward recomputes each block's probabilities from the saved lse (one
 * more GEMM of a block). With P the probabilities of a block and dO its
 * output gradient:
 *   dV += Pᵀ·dO,  dP = dO·Vᵀ,  dS = P ∘ (dP − rowsum(dO ∘ O)) · scale,
 *   dQ = dS·K,    dK += dSᵀ·Q.
 *
 * Layout: operands may be any views whose last dim is contiguous (the GPT's
 * per-head views of one packed qkv projection are read in place, their row
 * stride passed to the GEMM); others are copied first. Outputs may be any
 * such views too (the op stores 4-D ones as (B, T, H, D)).
 *
 * Grouped-query heads (k and v with `group` times fewer heads than q): each
 * query entry's k and v matrices are those of its kv head, through the
 * batch offsets (att_view) — the repeat is never made; the backward's item
 * is a kv entry, whose query heads add to its dK and dV in turn.
 *
 * Threads: forward splits (batch, query block) items over OpenMP threads,
 * backward splits kv entries (each owns its dK, dV). Every item is
 * computed by one thread in a fixed order with single-threaded GEMMs, so the
 * results do not depend on the thread count or the schedule. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "bf16.h"
#include "clones.h"
#include "cpu.h" /* nn.h: rm_row_max */
#include "gemm.h"
#include "tmpl.h"
#include "vmath.h"
#include "workspace.h"

/* Query rows per block: small enough that a block's scores (ATT_QB × Tk)
 * stay in L2, large enough for efficient GEMMs. */
#define ATT_QB 64

/* A (..., T, C) operand seen as nb matrices of T rows: element (b, t, c) is
 * at base[off[b] + t * ld + c]. */
typedef struct att_mat {
    void *base;
    const int64_t *off; /* nb batch offsets (elements, relative to base) */
    int64_t ld;         /* row stride */
} att_mat;

typedef rm_attention_dims att_dims;

/* Keys visible to query rows [i0, i1): with the causal mask row i sees
 * keys 0..i + off, so the block needs keys [0, min(Tk, i1 + off)) (none
 * when that is below 0: rows of a lower-right mask with Tq > Tk). */
static inline int64_t att_keys(const att_dims *d, int64_t i1) {
    if (!d->causal) return d->Tk;
    int64_t n = i1 + d->off;
    return n < 0 ? 0 : n < d->Tk ? n : d->Tk;
}
/* Keys visible to query row i. */
static inline int64_t att_row_keys(const att_dims *d, int64_t i) { return att_keys(d, i + 1); }
/* The same, at most kn (a block's rows see the keys [0, kn) it holds). */
static inline int64_t att_row_lim(const att_dims *d, int64_t i, int64_t kn) {
    int64_t lim = att_row_keys(d, i);
    return lim > kn ? kn : lim;
}

/* A backward query block whose rows see no keys (a lower-right causal mask with Tq > Tk):
 * its dQ rows (m of D elements of es bytes, row stride ld; dqi NULL: dQ not wanted) are 0
 * and the block has nothing else to do. True for such a block. */
static inline bool att_keyless(int64_t kn, void *dqi, int64_t ld, int64_t m, int64_t D, size_t es) {
    if (kn != 0) return false;
    for (int64_t r = 0; dqi && r < m; r++)
        memset((char *)dqi + (size_t)(r * ld) * es, 0, es * (size_t)D);
    return true;
}

#ifdef _OPENMP
#include <omp.h>
#define ATT_IN_PARALLEL() omp_in_parallel()
#define ATT_MAX_THREADS() omp_get_max_threads()
#define ATT_THREAD_NUM() omp_get_thread_num()
#else
#define ATT_IN_PARALLEL() 0
#define ATT_MAX_THREADS() 1
#define ATT_THREAD_NUM() 0
#endif

/* What an item of the attention loops (att_for) reads: the dims, the operands' matrices
 * (q, k, v, y and, backward, gy; mats points at them), lse, the gradients wanted (dq, dk,
 * dv: NULL when not) and the bf16 GEMMs' per-thread scratch. */
typedef struct att_run {
    const att_dims *d;
    const att_mat *m;
    const att_mat *const *mats;
    void *lse;
    const att_mat *dq, *dk, *dv;
    struct att_scratch *scr;
} att_run;
/* Item `it` of a loop; nonzero when it failed (out of memory). */
typedef int (*att_item_fn)(const att_run *r, int64_t it);

/* Runs fn(r, i) for i in [0, n) on OpenMP's team when there is enough work
 * and more than one item, else on the calling thread; 1 if an item failed.
 * Two separate loops on purpose: an `omp parallel if(false)` region still
 * counts as a nesting level, and the GEMMs called in it would then start
 * nested teams. */
static int att_for(int64_t n, double work, att_item_fn fn, const att_run *r) {
    int fail = 0;
    if (n > 1 && work > RM_OMP_MIN && !ATT_IN_PARALLEL()) {
#pragma omp parallel for schedule(dynamic, 1)
        for (int64_t it = 0; it < n; it++)
            if (fn(r, it)) {
#pragma omp atomic write
                fail = 1;
            }
    } else {
        for (int64_t it = 0; it < n; it++)
            if (fn(r, it)) fail = 1;
    }
    return fail;
}

#define ATT_LANES 16

/* ---- f64: attention_body.h (written for any float type; f32 takes the tiles below) ---- */
#define T f64
#define ATT_GEMM rm_dgemm
#define ATT_EXPF exp
#define ATT_LOGF log
#include "attention_body.h"

/* ---- layout helpers ------------------------------------------------------------------- */

/* Batch offsets (relative to rm_ptr(t)) of the nb matrices of t (..., R, C). */
static int64_t *batch_offsets(const remat_tensor *t, int64_t nb) {
    int64_t *off = malloc(sizeof *off * (size_t)(nb > 0 ? nb : 1));
    if (!off) return NULL;
    int lead = t->ndim - 2;
    int64_t idx[REMAT_MAX_DIMS] = {0};
    for (int64_t b = 0; b < nb; b++) {
        int64_t o = 0;
        for (int i = 0; i < lead; i++) o += idx[i] * t->strides[i];
        off[b] = o;
        for (int i = lead - 1; i >= 0; i--) { /* odometer over the leading dims */
            if (++idx[i] < t->shape[i]) break;
            idx[i] = 0;
        }
    }
    return off;
}

/* True if the GEMMs can read t (..., R, C) in place: unit column stride and
 * rows that do not overlap. */
static bool gemm_readable(const remat_tensor *t) {
    int64_t R = t->shape[t->ndim - 2], C = t->shape[t->ndim - 1];
    if (C > 1 && t->strides[t->ndim - 1] != 1) return false;
    return R <= 1 || t->strides[t->ndim - 2] >= C;
}

/* In-place readable t, or a contiguous copy (a new reference either way). */
static remat_status readable(remat_tensor **out, remat_tensor *t) {
    if (gemm_readable(t)) {
        *out = rm_retain(t);
        return REMAT_OK;
    }
    return rm_contig(out, t);
}

typedef struct att_views {
    att_mat m[8];
    int64_t *off[8];
} att_views;

/* t as slot's matrices, one per query entry b < nb: entry b of a kv operand (k, v and their
 * gradients, `group` query heads per kv head) is t's own entry b / group. */
static remat_status att_view(att_views *w, int slot, remat_tensor *t, int64_t nb, int64_t group) {
    int64_t *own = batch_offsets(t, nb / group);
    if (own && group > 1) {
        int64_t *off = malloc(sizeof *off * (size_t)(nb > 0 ? nb : 1));
        for (int64_t b = 0; off && b < nb; b++) off[b] = own[b / group];
        free(own);
        own = off;
    }
    w->off[slot] = own;
    if (!w->off[slot]) return REMAT_ENOMEM;
    w->m[slot] = (att_mat){rm_ptr(t), w->off[slot], t->strides[t->ndim - 2]};
    return REMAT_OK;
}

static void att_views_free(att_views *w) {
    for (int i = 0; i < 8; i++) free(w->off[i]);
}

/* Operands the GEMMs read, in place where they can. */
static remat_status readable_all(remat_tensor **out, remat_tensor *const *in, int n) {
    int rc = REMAT_OK;
    for (int i = 0; i < n && !rc; i++) rc = readable(&out[i], in[i]);
    return rc;
}

static att_dims dims_of(const rm_attention_params *p, const remat_tensor *q, const remat_tensor *k,
                        const remat_tensor *v) {
    return rm_attention_dims_of(p, q->ndim, q->shape, k->shape, v->shape);
}

/* ---- bf16 ------------------------------------------------------------------------------ */
/* bf16 q, k, v (autocast). Where rm_bgemm runs oneDNN's bf16 GEMM
 * (rm_bgemm_native) the six GEMMs run on the bf16 operands (per-head views
 * copied into dense tiles, att_dense), as PyTorch's cpu flash attention
 * does for bf16: products accumulated in f32; the scores S, the softmax /
 * log-sum-exp, dP and dS = P ∘ (dP − δ) in f32; P and dS rounded to bf16
 * as the left operands of P·V, Pᵀ·dO, dS·K and dSᵀ·Q; dK and dV summed
 * over the query blocks in f32 and rounded once; O and dQ rounded once by
 * the GEMM that makes them. One item is still one thread in a fixed order
 * (the GEMMs split no sums), so the results do not depend on the thread
 * count.
 *
 * Otherwise (no AVX512_BF16/AMX, REMAT_NO_BF16, no oneDNN) each batch
 * entry's matrices are widened into small per-item f32 buffers, the f32
 * items run on them (nb = 1 views) and the outputs are rounded back once:
 * bitwise the f32 kernel on the widened values, rounded, without f32
 * copies of whole operands (for the GPT's per-head views of a packed qkv
 * those would be three copies of the whole projection, at the peak of a
 * checkpointed backward). The lse is f32 either way (src/ops/attention.c). */

typedef uint16_t bf16;

/* rows x cols of bf16 matrix src (row stride ld) into dense f32 dst, and back. */
static void att_widen(const uint16_t *src, int64_t ld, int64_t rows, int64_t cols, f32 *dst) {
    for (int64_t r = 0; r < rows; r++) rm_bf16_widen_run(src + r * ld, dst + r * cols, cols);
}
static void att_round(const f32 *src, int64_t rows, int64_t cols, uint16_t *dst, int64_t ld) {
    for (int64_t r = 0; r < rows; r++) rm_bf16_round_run(src + r * cols, dst + r * ld, cols);
}

/* Per-thread scratch of the items: one allocation per kernel call instead of
 * one per item (those were large enough for glibc to map and unmap them, and
 * fault their pages in, item after item), taken on the calling thread before
 * the parallel loop from the cpu device's allocator (workspace.h), so that the
 * allocator's counters and the planner's meter see every thread's part (at
 * T = 1024, 64-wide heads: 0.25-0.5 MiB a thread for the f32 tiles, ~3 MiB
 * with the bf16 fallback's widened operands). A thread's part holds its tiles'
 * scratch, then from wide_at the bf16 fallback's widened q, k, v (and, backward,
 * o, dO and the f32 gradients) of the entry it works on. */
typedef struct att_scratch {
    char *base;
    size_t per;     /* bytes per thread */
    size_t wide_at; /* where a part's widened operands start */
    size_t bytes;   /* taken */
    int n;          /* threads */
} att_scratch;

static remat_status att_scratch_init(att_scratch *s, size_t tiles, size_t wide) {
    s->n = ATT_IN_PARALLEL() ? 1 : ATT_MAX_THREADS();
    s->wide_at = rm_cpu_ws_round(tiles);
    s->per = s->wide_at + rm_cpu_ws_round(wide);
    s->bytes = s->per * (size_t)s->n + 64;
    s->base = rm_cpu_ws_take(s->bytes);
    return s->base ? REMAT_OK : REMAT_ENOMEM;
}
static void att_scratch_free(att_scratch *s) {
    rm_cpu_ws_give(s->base, s->bytes);
    s->base = NULL;
}

/* The calling thread's part (att_for's team numbers its threads from 0). */
static void *att_scratch_mine(const att_scratch *s) {
    return s->base + s->per * (size_t)(s->n > 1 ? ATT_THREAD_NUM() : 0);
}

/* x · sc as its own f32 product: never fused with what follows into one FMA
 * (the scores are scaled, then the max subtracted, each rounded). */
static inline f32 att_scaled(f32 x, f32 sc) { return x * sc; }

/* max over j < n of x[j] · sc, as rm_row_max_f32 on the scaled values would
 * give it (NaN if one is NaN; n ≥ 1), without storing them: the integer-key
 * max of nn.h. */
RM_CPU_CLONES static f32 att_scaled_max(const f32 *restrict x, f32 sc, int64_t n) {
    int32_t m = INT32_MIN, nan = 0;
    for (int64_t j = 0; j < n; j++) {
        f32 y = att_scaled(x[j], sc);
        int32_t b;
        memcpy(&b, &y, sizeof b);
        int32_t key = b ^ ((b >> 31) & INT32_C(0x7FFFFFFF));
        m = key > m ? key : m;
        nan |= (b & INT32_C(0x7FFFFFFF)) > INT32_C(0x7F800000);
    }
    if (nan) return NAN;
    int32_t b = m ^ ((m >> 31) & INT32_C(0x7FFFFFFF));
    f32 best;
    memcpy(&best, &b, sizeof best);
    return best;
}

/* The tiles' exp: its argument is never above 0 (a scaled score less the row's max, or
 * less the row's lse, which is at least the max), so the non-positive exp serves: no
 * overflow or subnormal cases (results below exp(-87) flush to 0), about half the
 * instructions of rm_expf_v, which took ~10% of the f32 kernels' time at the GPT's shape.
 * rm_expf_neg_cl_v: fused multiply-adds in the clones (RM_FMAF, decided at the library's
 * baseline target, left the clones a multiply and an add a step). */
#define ATT_EXP rm_expf_neg_cl_v

/* x[j] = exp(x[j] · sc − sub) for j < n, returns their sum: att_exp_inplace_f32
 * on the scaled scores (the same ATT_LANES partial sums), scaling in the same pass. */
RM_CPU_CLONES static f32 att_exp_scaled(f32 *restrict x, f32 sc, f32 sub, int64_t n) {
    f32 acc[ATT_LANES] = {0};
    int64_t i = 0;
    for (; i + ATT_LANES <= n; i += ATT_LANES)
        for (int j = 0; j < ATT_LANES; j++) {
            f32 e = ATT_EXP(att_scaled(x[i + j], sc) - sub);
            x[i + j] = e;
            acc[j] += e;
        }
    if (i < n) { /* the tail's exps as one vector (a row of a causal block ends anywhere) */
        f32 t[ATT_LANES];
        int64_t rem = n - i;
        for (int j = 0; j < ATT_LANES; j++)
            t[j] = ATT_EXP(att_scaled(j < rem ? x[i + j] : 0.0f, sc) - sub);
        for (int64_t j = 0; j < rem; j++) { /* summed into acc[0] in order, as one by one */
            x[i + j] = t[j];
            acc[0] += t[j];
        }
    }
    for (int w = ATT_LANES / 2; w > 0; w /= 2)
        for (int j = 0; j < w; j++) acc[j] += acc[j + w];
    return acc[0];
}

/* The forward's per-thread scratch starts with which batch entry's keys and
 * values its dense tiles hold, and how many rows of each: the query blocks
 * of one entry need the keys [0, kn) with kn growing block by block, so a
 * thread copies only the rows it has not copied yet. Dense operands are
 * read in place and never cached. */
typedef struct att_kv_cache {
    int64_t b, krows, vrows;
} att_kv_cache;
#define ATT_HEADER 64 /* bytes before the buffers: the cache, and f32 alignment */

/* Marks every thread's key/value cache empty. */
static void att_fwd_scratch_clear(const att_scratch *scr) {
    for (int t = 0; t < scr->n; t++)
        *(att_kv_cache *)(void *)(scr->base + scr->per * (size_t)t) = (att_kv_cache){-1, 0, 0};
}

/* The output rows O that δ reads were last written in the forward: one
 * short row (a head's Dv values) every H·Dv elements, from memory. A loop
 * that spends a few cycles per row outruns the hardware prefetcher, so it
 * asks for the row ATT_AHEAD rows on: the backward of a GPT layer's
 * attention took about 5% less CPU time (bench_attention's shape). The
 * same for the rows att_copy_rows reads or writes, and for att_round's
 * rows, measured no gain or a loss. */
#define ATT_AHEAD 8
static inline void att_prefetch_row(const void *row, size_t bytes) {
    for (size_t c = 0; c < bytes; c += 64) __builtin_prefetch((const char *)row + c);
}

/* f32 rows stored as f32 (the f32 tiles' dK and dV sums). */
static inline void att_copy_f32_row(const f32 *src, f32 *dst, int64_t n) {
    memcpy(dst, src, sizeof(f32) * (size_t)n);
}
static inline void att_sgemm(bool ta, bool tb, int64_t M, int64_t N, int64_t K, const f32 *A,
                             int64_t lda, const f32 *B, int64_t ldb, float beta, f32 *C,
                             int64_t ldc) {
    rm_sgemm(ta, tb, M, N, K, 1.0f, A, lda, B, ldb, beta, C, ldc);
}

/* ---- the tiles, once per operand type: attention_tile_body.h --------------------------- */
#define T bf16
#define ATT_TO_F32 rm_bf16_to_f32
#define ATT_OF_F32 rm_f32_to_bf16
#define ATT_GEMM_F32 rm_bgemm_f32
#define ATT_GEMM_T rm_bgemm
#define ATT_STORE_ROW rm_bf16_round_run
#define ATT_DENSE 1
#include "attention_tile_body.h"

#define T f32
#define ATT_TO_F32(x) (x)
#define ATT_OF_F32(x) (x)
#define ATT_GEMM_F32 att_sgemm
#define ATT_GEMM_T att_sgemm
#define ATT_STORE_ROW att_copy_f32_row
#define ATT_DENSE 0
#include "attention_tile_body.h"

/* ---- bf16 without native bf16 GEMMs: widened per batch entry --------------------------- */

/* Batch entry b of m as a dense f32 matrix of `rows` x `cols` at buf: its one-entry view. */
static att_mat att_widened(const att_mat *m, int64_t b, int64_t rows, int64_t cols, f32 *buf,
                           const int64_t *zero) {
    att_widen((const uint16_t *)m->base + m->off[b], m->ld, rows, cols, buf);
    return (att_mat){buf, zero, cols};
}

/* Bytes of a forward entry's widened q, k, v and f32 output (in the thread's scratch). */
static size_t att_fwd_wide_bytes(const att_dims *d) {
    return sizeof(f32) * (size_t)(d->Tq * (d->D + d->Dv) + d->Tk * (d->D + d->Dv));
}

/* The widened operands' place in the calling thread's part of scr. */
static f32 *att_wide_mine(const att_scratch *scr) {
    return (f32 *)(void *)((char *)att_scratch_mine(scr) + scr->wide_at);
}

/* Forward of batch entry b: every query block of it, in order, through the f32 tiles. */
static remat_status att_fwd_entry_widened(const att_dims *d, const att_mat *q, const att_mat *k,
                                          const att_mat *v, const att_mat *o, f32 *lse,
                                          const att_scratch *scr, int64_t b) {
    static const int64_t zero = 0;
    att_dims d1 = *d;
    d1.nb = 1;
    d1.group = 1;
    f32 *buf = att_wide_mine(scr);
    f32 *qf = buf, *kf = qf + d->Tq * d->D, *vf = kf + d->Tk * d->D, *of = vf + d->Tk * d->Dv;
    att_mat mq = att_widened(q, b, d->Tq, d->D, qf, &zero);
    att_mat mk = att_widened(k, b, d->Tk, d->D, kf, &zero);
    att_mat mv = att_widened(v, b, d->Tk, d->Dv, vf, &zero);
    att_mat mo = {of, &zero, d->Dv};
    *(att_kv_cache *)att_scratch_mine(scr) = (att_kv_cache){-1, 0, 0}; /* new buffers */
    int64_t nqb = (d->Tq + ATT_QB - 1) / ATT_QB;
    for (int64_t it = 0; it < nqb; it++)
        att_fwd_item_tile_f32(&d1, &mq, &mk, &mv, &mo, lse + b * d->Tq, scr, it);
    att_round(of, d->Tq, d->Dv, (uint16_t *)o->base + o->off[b], o->ld);
    return REMAT_OK;
}

/* A backward kv entry's operands and gradients, widened: q, k, v, o, go, dq, dk, dv's
 * rows per entry, columns, and entries (a kv entry's `group` query entries). */
typedef struct att_bwd_shapes {
    int64_t rows[8], cols[8], ents[8];
} att_bwd_shapes;
static att_bwd_shapes att_bwd_shapes_of(const att_dims *d) {
    const int64_t g = d->group;
    return (att_bwd_shapes){{d->Tq, d->Tk, d->Tk, d->Tq, d->Tq, d->Tq, d->Tk, d->Tk},
                            {d->D, d->D, d->Dv, d->Dv, d->Dv, d->D, d->D, d->Dv},
                            {g, 1, 1, g, g, g, 1, 1}};
}
/* Bytes of them (in the thread's scratch). */
static size_t att_bwd_wide_bytes(const att_dims *d) {
    att_bwd_shapes sh = att_bwd_shapes_of(d);
    size_t n = 0;
    for (int i = 0; i < 8; i++) n += (size_t)(sh.ents[i] * sh.rows[i] * sh.cols[i]);
    return sizeof(f32) * n;
}

/* Backward of kv entry bk (dq, dk, dv may be NULL): its keys and values and its query
 * entries b = bk·group + j widened (one group's worth, never whole operands), then the
 * f32 tiles' entry on them, and the gradients rounded once. */
static remat_status att_bwd_entry_widened(const att_dims *d, const att_mat *const *m,
                                          const f32 *lse, const att_mat *dq, const att_mat *dk,
                                          const att_mat *dv, const att_scratch *scr, int64_t bk) {
    static const int64_t zero[1] = {0};
    const int64_t g = d->group, b0 = bk * g;
    att_dims d1 = *d;
    d1.nb = g;
    const att_bwd_shapes sh = att_bwd_shapes_of(d);
    const int64_t *rows = sh.rows, *cols = sh.cols, *ents = sh.ents;
    f32 *buf = att_wide_mine(scr);
    /* entry offsets, D and Dv wide: 16 bytes a query head of the group, malloc's */
    int64_t *off = malloc(sizeof(int64_t) * (size_t)(2 * g));
    if (!off) return REMAT_ENOMEM;
    for (int64_t j = 0; j < g; j++) off[j] = j * d->Tq * d->D, off[g + j] = j * d->Tq * d->Dv;
    att_mat f[8];
    f32 *p = buf;
    for (int i = 0; i < 8; i++) {
        const int64_t *o = ents[i] == 1 ? zero : cols[i] == d->D ? off : off + g;
        f[i] = (att_mat){p, o, cols[i]};
        for (int64_t j = 0; j < ents[i] && i < 5; j++)
            att_widen((const uint16_t *)m[i]->base + m[i]->off[b0 + j], m[i]->ld, rows[i], cols[i],
                      p + j * rows[i] * cols[i]);
        p += ents[i] * rows[i] * cols[i];
    }
    const att_mat *mats[5] = {&f[0], &f[1], &f[2], &f[3], &f[4]};
    att_bwd_entry_tile_f32(&d1, mats, lse + b0 * d->Tq, dq ? &f[5] : NULL, dk ? &f[6] : NULL,
                           dv ? &f[7] : NULL, scr, 0);
    const att_mat *gr[3] = {dq, dk, dv};
    for (int i = 0; i < 3; i++)
        for (int64_t j = 0; gr[i] && j < ents[5 + i]; j++)
            att_round((f32 *)f[5 + i].base + j * rows[5 + i] * cols[5 + i], rows[5 + i],
                      cols[5 + i], (uint16_t *)gr[i]->base + gr[i]->off[b0 + j], gr[i]->ld);
    free(off);
    return REMAT_OK;
}

/* The widened items, for att_for (the tiles' own and f64's are in the bodies). */
static int att_fwd_run_widened(const att_run *r, int64_t b) {
    return att_fwd_entry_widened(r->d, &r->m[0], &r->m[1], &r->m[2], &r->m[3], r->lse, r->scr, b) !=
           0;
}
static int att_bwd_run_widened(const att_run *r, int64_t b) {
    return att_bwd_entry_widened(r->d, r->mats, r->lse, r->dq, r->dk, r->dv, r->scr, b) != 0;
}

remat_status rm_cpu_attention(const rm_kargs *k) {
    remat_tensor *in[3] = {NULL, NULL, NULL}, *y = k->out[0], *lse = k->out[1];
    att_views w = {0};
    int rc = readable_all(in, k->in, 3);
    if (rc) goto out;
    const att_dims d = dims_of(k->params, in[0], in[1], in[2]);
    int64_t nqb = (d.Tq + ATT_QB - 1) / ATT_QB;
    if (d.nb > 0 && d.Tq > 0) {
        for (int i = 0; i < 3 && !rc; i++) rc = att_view(&w, i, in[i], d.nb, i ? d.group : 1);
        if (!rc) rc = att_view(&w, 3, y, d.nb, 1);
        if (rc) {
            rc = rm_err(REMAT_ENOMEM, "out of memory");
            goto out;
        }
        int fail = 0;
        double work = (double)d.Tq * (double)d.Tk * (double)(d.D + d.Dv) * (double)d.nb;
        att_scratch scr = {0};
        att_run r = {.d = &d, .m = w.m, .lse = rm_ptr(lse), .scr = &scr};
        bool tiles = y->dtype == REMAT_F32 || (y->dtype == REMAT_BF16 && rm_bgemm_native());
        if (y->dtype == REMAT_F64) fail = att_for(d.nb * nqb, work, att_fwd_run_f64, &r);
        else if (!(fail =
                       att_scratch_init(&scr,
                                        tiles && y->dtype == REMAT_BF16 ? att_fwd_scratch_bf16(&d)
                                                                        : att_fwd_scratch_f32(&d),
                                        tiles ? 0 : att_fwd_wide_bytes(&d)))) {
            att_fwd_scratch_clear(&scr);
            if (!tiles) fail = att_for(d.nb, work, att_fwd_run_widened, &r);
            else if (y->dtype == REMAT_F32)
                fail = att_for(d.nb * nqb, work, att_fwd_run_tile_f32, &r);
            else fail = att_for(d.nb * nqb, work, att_fwd_run_tile_bf16, &r);
        }
        att_scratch_free(&scr);
        if (fail) rc = rm_err(REMAT_ENOMEM, "out of memory");
    }
out:
    att_views_free(&w);
    for (int i = 0; i < 3; i++) rm_release(in[i]);
    return rc;
}

/* The backward's nkv items of operand type dt (lse of type lt) with the scratch they need
 * (r->scr set here); 1 if out of memory. */
static int att_bwd_items(remat_dtype dt, remat_dtype lt, int64_t nkv, double work, att_run *r) {
    bool bf16 = dt == REMAT_BF16, native = bf16 && rm_bgemm_native();
    if (!bf16 && lt != REMAT_F32) return att_for(nkv, work, att_bwd_run_f64, r);
    att_scratch scr = {0};
    int fail =
        att_scratch_init(&scr, native ? att_bwd_scratch_bf16(r->d) : att_bwd_scratch_f32(r->d),
                         bf16 && !native ? att_bwd_wide_bytes(r->d) : 0);
    r->scr = &scr;
    if (!fail)
        fail = att_for(nkv, work,
                       native ? att_bwd_run_tile_bf16
                       : bf16 ? att_bwd_run_widened
                              : att_bwd_run_tile_f32,
                       r);
    att_scratch_free(&scr);
    r->scr = NULL;
    return fail;
}

remat_status rm_cpu_attention_bwd(const rm_kargs *k) {
    /* q, k, v, y and gy as the GEMMs read them; lse is the op's own, contiguous */
    remat_tensor *in[5] = {NULL}, *lse = k->in[5], *const *g = k->out;
    att_views w = {0};
    int rc = readable_all(in, k->in, 5);
    if (rc) goto out;
    const att_dims d = dims_of(k->params, in[0], in[1], in[2]);
    if (d.nb > 0 && d.Tk > 0) {
        for (int i = 0; i < 5 && !rc; i++)
            rc = att_view(&w, i, in[i], d.nb, i == 1 || i == 2 ? d.group : 1);
        for (int i = 0; i < 3 && !rc; i++)
            if (g[i]) rc = att_view(&w, 5 + i, g[i], d.nb, i ? d.group : 1);
        if (rc) {
            rc = rm_err(REMAT_ENOMEM, "out of memory");
            goto out;
        }
        const att_mat *dq = g[0] ? &w.m[5] : NULL, *dk = g[1] ? &w.m[6] : NULL,
                      *dv = g[2] ? &w.m[7] : NULL;
        double work = (double)d.Tq * (double)d.Tk * (double)(d.D + d.Dv) * (double)d.nb;
        /* one item per kv entry bk: its query entries bk·group + j add to its dK and dV in
         * turn, on one thread */
        const int64_t nkv = d.nb / d.group;
        const att_mat *mats[5] = {&w.m[0], &w.m[1], &w.m[2], &w.m[3], &w.m[4]};
        att_run r = {
            .d = &d, .m = w.m, .mats = mats, .lse = rm_ptr(lse), .dq = dq, .dk = dk, .dv = dv};
        if (att_bwd_items(in[0]->dtype, lse->dtype, nkv, work, &r))
            rc = rm_err(REMAT_ENOMEM, "out of memory");
    } else { /* nothing to multiply (no keys or no batch): zeros */
        for (int i = 0; i < 3; i++)
            if (g[i]) memset(rm_ptr(g[i]), 0, g[i]->storage->nbytes);
    }
out:
    att_views_free(&w);
    for (int i = 0; i < 5; i++) rm_release(in[i]);
    return rc;
}
