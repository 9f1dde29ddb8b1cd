/* src/backends/cpu/attention_tile_body.h — the bf16 and f32 attention items on dense tiles
 * (see attention.c "Tiles"), written once and compiled once per operand type: attention.c
 * includes this file with T defined as bf16 or f32, ATT_TO_F32 / ATT_OF_F32 as T's
 * conversions from and to f32 (bf16: widen and round to nearest even; f32: none),
 * ATT_GEMM_F32 as the GEMM of two T matrices into an f32 C and ATT_GEMM_T as the one into
 * a T C (rounded once), both (ta, tb, M, N, K, A, lda, B, ldb, beta, C, ldc), and
 * ATT_STORE_ROW(src, dst, n) as an f32 row stored as T, and ATT_DENSE 1 where the
 * GEMMs want dense copies of strided operands (bf16's brgemm), 0 where they read them in
 * place. Where T is f32 (ATT_DENSE 0) P and dS are made in place over the f32 scores
 * and dP they come from (no T copies of a block). Each function is named
 * TFN(name): name_bf16 or name_f32 (tmpl.h). No include guard: included once per type. */
#include "tmpl.h"

/* rows × cols from src (row stride sld) to dst (row stride dld). Rows are short (a head's
 * 64 elements): the compilers turn the plain loop into a memcpy call per row, so a head's
 * width gets a copy of a constant size, which they inline (two or four vector moves). */
RM_CPU_CLONES static void TFN(att_copy_rows)(T *restrict dst, int64_t dld, const T *restrict src,
                                             int64_t sld, int64_t rows, int64_t cols) {
    if (cols == 64) {
        for (int64_t r = 0; r < rows; r++) memcpy(dst + r * dld, src + r * sld, sizeof(T) * 64);
        return;
    }
    for (int64_t r = 0; r < rows; r++)
        for (int64_t c = 0; c < cols; c++) dst[r * dld + c] = src[r * sld + c];
}

/* rows × cols of matrix src (row stride ld) as the GEMMs read it, its row stride in
 * *ldo: with ATT_DENSE a dense matrix, src itself when its rows are contiguous, else
 * copied into buf; without, src in place. oneDNN 2.6 runs a bf16 matmul on strided
 * operands (the GPT's per-head views) through its gemm-based implementation, which packs
 * both operands at every call; on dense ones it takes brgemm, 15-25% faster per call at
 * these sizes even counting the copy. (f32's brgemm on dense tiles gained ~9% in place,
 * less than the copies cost: its sgemm's packing reads the views as cheaply.) */
static const T *TFN(att_dense)(const T *src, int64_t ld, int64_t rows, int64_t cols, T *buf,
                               int64_t *ldo) {
    *ldo = ATT_DENSE && rows > 1 ? cols : ld;
    if (!ATT_DENSE || ld == cols || rows <= 1) return src;
    TFN(att_copy_rows)(buf, cols, src, ld, rows, cols);
    return buf;
}

/* dst (m, n; row stride ld) = A (m, kn) · B (kn, n), dense operands, rounded once (bf16):
 * written straight into dst when its rows are contiguous, else made dense in buf and
 * copied out (att_dense's reverse). */
static void TFN(att_gemm_rows)(int64_t m, int64_t n, int64_t kn, const T *a, const T *b,
                               int64_t ldb, T *dst, int64_t ld, T *buf) {
    bool direct = !ATT_DENSE || ld == n || m == 1;
    ATT_GEMM_T(false, false, m, n, kn, a, kn, b, ldb, 0.0f, direct ? dst : buf, direct ? ld : n);
    if (!direct) TFN(att_copy_rows)(dst, ld, buf, n, m, n);
}

/* f32 rows (dense, cols wide) stored as T rows of dst (row stride ld). */
static void TFN(att_store_rows)(const f32 *src, int64_t rows, int64_t cols, T *dst, int64_t ld) {
    for (int64_t r = 0; r < rows; r++) ATT_STORE_ROW(src + r * cols, dst + r * ld, cols);
}

/* Forward probabilities of query rows [i0, i0 + m) against keys [0, kn)
 * from dense q rows qd (m, D) and keys kd (kn, D): s (m, kn) gets the
 * unscaled f32 scores, then per row the max of the scaled scores, their
 * exps (unnormalised, in s) and P = exp · (1 / sum) (rounded to bf16) into
 * pb (m, kn; masked entries 0; f32: in s itself, pb unused); the row lse goes to lse_out.
 * Three passes over a row: the scaling is done where the scores are read (bitwise
 * scaling them in place first). */
RM_CPU_CLONES static void TFN(att_probs_tile)(const att_dims *d, const T *qd, int64_t ldq,
                                              const T *kd, int64_t ldk, int64_t i0, int64_t m,
                                              int64_t kn, f32 *restrict s, T *restrict pb,
                                              f32 *lse_out) {
    ATT_GEMM_F32(false, true, m, kn, d->D, qd, ldq, kd, ldk, 0.0f, s, kn);
    const f32 sc = (f32)d->scale;
    for (int64_t r = 0; r < m; r++) {
        f32 *sr = s + r * kn;
        int64_t lim = att_row_lim(d, i0 + r, kn);
        f32 mx = lim > 0 ? att_scaled_max(sr, sc, lim) : -INFINITY;
        f32 sub = mx == -INFINITY ? 0.0f : mx; /* all -inf: avoid inf - inf */
        f32 sum = att_exp_scaled(sr, sc, sub, lim);
        f32 inv = 1.0f / sum;
#if ATT_DENSE
        T *pr = pb + r * kn;
        for (int64_t j = 0; j < lim; j++) pr[j] = ATT_OF_F32(sr[j] * inv);
        memset(pr + lim, 0, sizeof(T) * (size_t)(kn - lim));
#else
        (void)pb;
        for (int64_t j = 0; j < lim; j++) sr[j] *= inv;
        memset(sr + lim, 0, sizeof(f32) * (size_t)(kn - lim));
#endif
        lse_out[i0 + r] = lim > 0 ? sub + logf(sum) : -INFINITY;
    }
}

/* Rows [0, kn) of src (batch entry b, cols wide, row stride ld) dense: src
 * itself when it is, else buf after copying the rows past *have. */
static const T *TFN(att_dense_cached)(const T *src, int64_t ld, int64_t kn, int64_t cols, T *buf,
                                      int64_t *have, int64_t *ldo) {
    *ldo = ATT_DENSE && kn > 1 ? cols : ld;
    if (!ATT_DENSE || ld == cols || kn <= 1) return src;
    if (kn > *have) {
        TFN(att_copy_rows)(buf + *have * cols, cols, src + *have * ld, ld, kn - *have, cols);
        *have = kn;
    }
    return buf;
}

/* Forward scratch per thread: the header, a block's scores (f32), and with ATT_DENSE its
 * P (T), the dense keys and values of one entry and a block's q and output rows. */
static size_t TFN(att_fwd_scratch)(const att_dims *d) {
    int64_t kmax = att_keys(d, d->Tq);
    size_t dense =
        ATT_DENSE
            ? sizeof(T) * (size_t)(ATT_QB * kmax + ATT_QB * (d->D + d->Dv) + kmax * (d->D + d->Dv))
            : 0;
    return ATT_HEADER + sizeof(f32) * (size_t)(ATT_QB * kmax) + dense;
}

/* Forward of one (batch entry, query block) item. */
static void TFN(att_fwd_item_tile)(const att_dims *d, const att_mat *q, const att_mat *k,
                                   const att_mat *v, const att_mat *o, f32 *lse,
                                   const att_scratch *scr, int64_t item) {
    int64_t nqb = (d->Tq + ATT_QB - 1) / ATT_QB;
    int64_t b = item / nqb, i0 = (item % nqb) * ATT_QB;
    int64_t m = d->Tq - i0 < ATT_QB ? d->Tq - i0 : ATT_QB;
    int64_t kn = att_keys(d, i0 + m), kmax = att_keys(d, d->Tq);
    T *ob = (T *)o->base + o->off[b] + i0 * o->ld;
    if (kn == 0) { /* no keys: an empty sum, as matmul with an empty inner dim */
        for (int64_t r = 0; r < m; r++) {
            memset(ob + r * o->ld, 0, sizeof(T) * (size_t)d->Dv);
            lse[b * d->Tq + i0 + r] = -INFINITY;
        }
        return;
    }
    char *mine = att_scratch_mine(scr);
    att_kv_cache *kv = (att_kv_cache *)(void *)mine;
    f32 *s = (f32 *)(void *)(mine + ATT_HEADER);
    const int64_t dn = ATT_DENSE; /* the T buffers' sizes are 0 without (f32: P in s) */
    T *pb = (T *)(void *)(s + dn * ATT_QB * kmax), *kbuf = pb + dn * ATT_QB * kmax;
    T *vbuf = kbuf + dn * kmax * d->D, *qbuf = vbuf + dn * kmax * d->Dv;
    T *obuf = qbuf + dn * ATT_QB * d->D;
    if (kv->b != b) *kv = (att_kv_cache){b, 0, 0};
    int64_t ldq, ldk, ldv;
    const T *qd =
        TFN(att_dense)((const T *)q->base + q->off[b] + i0 * q->ld, q->ld, m, d->D, qbuf, &ldq);
    const T *kd = TFN(att_dense_cached)((const T *)k->base + k->off[b], k->ld, kn, d->D, kbuf,
                                        &kv->krows, &ldk);
    const T *vd = TFN(att_dense_cached)((const T *)v->base + v->off[b], v->ld, kn, d->Dv, vbuf,
                                        &kv->vrows, &ldv);
    TFN(att_probs_tile)(d, qd, ldq, kd, ldk, i0, m, kn, s, pb, lse + b * d->Tq);
    TFN(att_gemm_rows)(m, d->Dv, kn, pb, vd, ldv, ob, o->ld, obuf); /* O = P·V */
}

/* f32 sum of x[i]·y[i] over T rows (δ = rowsum(dO ∘ O)), in ATT_LANES
 * partial sums as att_exp_scaled. */
RM_CPU_CLONES static f32 TFN(att_dot)(const T *x, const T *y, int64_t n) {
    f32 acc[ATT_LANES] = {0};
    int64_t i = 0;
    for (; i + ATT_LANES <= n; i += ATT_LANES)
        for (int j = 0; j < ATT_LANES; j++) acc[j] += ATT_TO_F32(x[i + j]) * ATT_TO_F32(y[i + j]);
    for (; i < n; i++) acc[0] += ATT_TO_F32(x[i]) * ATT_TO_F32(y[i]);
    for (int w = ATT_LANES / 2; w > 0; w /= 2)
        for (int j = 0; j < w; j++) acc[j] += acc[j + w];
    return acc[0];
}

/* Backward probabilities of an (m, kn) block from its f32 scores s (as the
 * forward's GEMM gives them) and the saved lse: P = exp(s · sc − lse)
 * (rounded) into pb (masked entries 0); with dp (dP = dO · Vᵀ, computed
 * before) also dS = P ∘ (dP − δ) · sc from the f32 P (rounded) into dsb,
 * row by row while the row is in L1 (P is kept in s only for that): one
 * pass over the block where P and dS took two, between which the whole
 * f32 P went through memory. (P and dS in a single loop measured slower
 * than these three short loops per row.) f32 makes P in s and dS in dp
 * (pb and dsb unused). */
RM_CPU_CLONES static void TFN(att_bwd_probs)(const att_dims *d, int64_t i0, int64_t m, int64_t kn,
                                             f32 *restrict s, const f32 *lse, f32 *restrict dp,
                                             const f32 *restrict delta, T *restrict pb,
                                             T *restrict dsb) {
    const f32 sc = (f32)d->scale;
    (void)pb, (void)dsb;
    for (int64_t r = 0; r < m; r++) {
        f32 *sr = s + r * kn;
        int64_t lim = att_row_lim(d, i0 + r, kn);
        f32 l = lse[i0 + r];
        if (l == -INFINITY) l = 0; /* no keys: every p is 0 anyway */
#if ATT_DENSE
        T *pr = pb + r * kn;
        if (!dp) {
            for (int64_t j = 0; j < lim; j++) pr[j] = ATT_OF_F32(ATT_EXP(sr[j] * sc - l));
            memset(pr + lim, 0, sizeof(T) * (size_t)(kn - lim));
            continue;
        }
#else
        if (!dp) {
            for (int64_t j = 0; j < lim; j++) sr[j] = ATT_EXP(sr[j] * sc - l);
            memset(sr + lim, 0, sizeof(f32) * (size_t)(kn - lim));
            continue;
        }
#endif
        f32 *dpr = dp + r * kn;
        const f32 dl = delta[r];
        for (int64_t j = 0; j < lim; j++) {
            f32 e = ATT_EXP(sr[j] * sc - l);
            sr[j] = e;
#if ATT_DENSE
            pr[j] = ATT_OF_F32(e);
#endif
        }
        memset(sr + lim, 0, sizeof(f32) * (size_t)(kn - lim));
#if ATT_DENSE
        memset(pr + lim, 0, sizeof(T) * (size_t)(kn - lim));
        T *dsr = dsb + r * kn;
        for (int64_t j = 0; j < kn; j++) dsr[j] = ATT_OF_F32(sr[j] * (dpr[j] - dl) * sc);
#else
        for (int64_t j = 0; j < kn; j++) dpr[j] = sr[j] * (dpr[j] - dl) * sc;
#endif
    }
}

/* δ = rowsum(dO ∘ O) of m rows (dO and O: row strides ldg, ldo; n columns) into delta. */
static void TFN(att_deltas)(const T *go, int64_t ldg, const T *o, int64_t ldo, int64_t m, int64_t n,
                            f32 *delta) {
    for (int64_t r = 0; r < m; r++) {
        if (r + ATT_AHEAD < m) att_prefetch_row(o + (r + ATT_AHEAD) * ldo, sizeof(T) * (size_t)n);
        delta[r] = TFN(att_dot)(go + r * ldg, o + r * ldo, n);
    }
}

/* Where the backward sums a kv entry's dK (or dV: g, rows × cols at entry b0) in f32,
 * zeroed: g's own rows when T is f32 (added to in place; *ld becomes g's row stride), else
 * the dense scratch sums (stored once at the end). NULL when g is not wanted. */
static f32 *TFN(att_sum_rows)(const att_mat *g, int64_t b0, int64_t rows, int64_t cols, f32 *sums,
                              int64_t *ld) {
    if (!g) return NULL;
    if (!ATT_DENSE) sums = (f32 *)(void *)((T *)g->base + g->off[b0]), *ld = g->ld;
    for (int64_t j = 0; j < rows; j++) memset(sums + j * *ld, 0, sizeof(f32) * (size_t)cols);
    return sums;
}

/* The scratch sums dks, dvs stored as T into dk and dv at entry b0 (each may be NULL). */
static void TFN(att_store_sums)(const att_dims *d, const att_mat *dk, const att_mat *dv, int64_t b0,
                                const f32 *dks, const f32 *dvs) {
    if (dk) TFN(att_store_rows)(dks, d->Tk, d->D, (T *)dk->base + dk->off[b0], dk->ld);
    if (dv) TFN(att_store_rows)(dvs, d->Tk, d->Dv, (T *)dv->base + dv->off[b0], dv->ld);
}

/* Backward scratch per thread: the scores and dP (f32, a block) and δ, and with ATT_DENSE
 * P and dS (T, a block), the f32 dK and dV sums of a batch entry, dense copies of the keys
 * and values, and of a block's q, dO and dQ rows (f32 makes P and dS in place, sums dK and
 * dV in its outputs and reads the views as they are). */
static size_t TFN(att_bwd_scratch)(const att_dims *d) {
    int64_t kmax = att_keys(d, d->Tq), mb = d->Tq < ATT_QB ? d->Tq : ATT_QB;
    size_t dense = ATT_DENSE ? sizeof(f32) * (size_t)(d->Tk * (d->D + d->Dv)) +
                                   sizeof(T) * (size_t)(2 * mb * kmax + kmax * (d->D + d->Dv) +
                                                        mb * (2 * d->D + d->Dv))
                             : 0;
    return sizeof(f32) * (size_t)(2 * mb * kmax + mb) + dense;
}

/* Backward of kv entry bk: its query entries b = bk·group + j in turn (dq, dk, dv may be
 * NULL); mt = q, k, v, o, go. Query entries and their query blocks in order, so dK and dV
 * sum in a fixed order (in f32, stored once). Per block: S = Q·Kᵀ and dP = dO·Vᵀ, then
 * one pass makes P and dS from them (att_bwd_probs), then dV += Pᵀ·dO, dQ = dS·K,
 * dK += dSᵀ·Q. */
static void TFN(att_bwd_entry_tile)(const att_dims *d, const att_mat *const *mt, const f32 *lse,
                                    const att_mat *dq, const att_mat *dk, const att_mat *dv,
                                    const att_scratch *scr, int64_t bk) {
    const att_mat *q = mt[0], *k = mt[1], *v = mt[2], *o = mt[3], *go = mt[4];
    int64_t kmax = att_keys(d, d->Tq), mb = d->Tq < ATT_QB ? d->Tq : ATT_QB;
    f32 *s = att_scratch_mine(scr), *dp = s + mb * kmax, *delta = dp + mb * kmax;
    const int64_t dn = ATT_DENSE; /* the buffers past δ are 0 long without (f32) */
    f32 *dks = delta + mb, *dvs = dks + dn * d->Tk * d->D;
    T *pb = (T *)(void *)(dvs + dn * d->Tk * d->Dv), *dsb = pb + dn * mb * kmax;
    T *kbuf = dsb + dn * mb * kmax, *vbuf = kbuf + dn * kmax * d->D;
    T *qbuf = vbuf + dn * kmax * d->Dv, *gbuf = qbuf + dn * mb * d->D,
      *dqbuf = gbuf + dn * mb * d->Dv;
    if (!ATT_DENSE) pb = (T *)(void *)s, dsb = (T *)(void *)dp; /* att_bwd_probs: in place */
    const int64_t b0 = bk * d->group;  /* the kv operands' entries are read at any of the group's */
    int64_t lddk = d->D, lddv = d->Dv; /* the sums' row strides */
    dks = TFN(att_sum_rows)(dk, b0, d->Tk, d->D, dks, &lddk);
    dvs = TFN(att_sum_rows)(dv, b0, d->Tk, d->Dv, dvs, &lddv);
    int64_t ldk, ldv, ldq, ldg;
    const T *kd = TFN(att_dense)((const T *)k->base + k->off[b0], k->ld, kmax, d->D, kbuf, &ldk);
    const T *vd = TFN(att_dense)((const T *)v->base + v->off[b0], v->ld, kmax, d->Dv, vbuf, &ldv);
    for (int64_t b = b0; b < b0 + d->group; b++)
        for (int64_t i0 = 0; i0 < d->Tq; i0 += ATT_QB) {
            int64_t m = d->Tq - i0 < ATT_QB ? d->Tq - i0 : ATT_QB;
            int64_t kn = att_keys(d, i0 + m);
            const T *goi = (const T *)go->base + go->off[b] + i0 * go->ld;
            const T *oi = (const T *)o->base + o->off[b] + i0 * o->ld;
            T *dqi = dq ? (T *)dq->base + dq->off[b] + i0 * dq->ld : NULL;
            if (att_keyless(kn, dqi, dq ? dq->ld : 0, m, d->D, sizeof(T))) continue;
            const T *qd = TFN(att_dense)((const T *)q->base + q->off[b] + i0 * q->ld, q->ld, m,
                                         d->D, qbuf, &ldq);
            const T *god = TFN(att_dense)(goi, go->ld, m, d->Dv, gbuf, &ldg);
            bool grads = dqi || dk;                                                /* dS wanted */
            ATT_GEMM_F32(false, true, m, kn, d->D, qd, ldq, kd, ldk, 0.0f, s, kn); /* S */
            if (grads) {
                ATT_GEMM_F32(false, true, m, kn, d->Dv, god, ldg, vd, ldv, 0.0f, dp, kn);
                TFN(att_deltas)(god, ldg, oi, o->ld, m, d->Dv, delta); /* δ = rowsum(dO ∘ O) */
            }
            TFN(att_bwd_probs)(d, i0, m, kn, s, lse + b * d->Tq, grads ? dp : NULL, delta, pb, dsb);
            if (dv) /* dV[0:kn] += Pᵀ · dO */
                ATT_GEMM_F32(true, false, kn, d->Dv, m, pb, kn, god, ldg, 1.0f, dvs, lddv);
            if (dqi) /* dQ = dS · K */
                TFN(att_gemm_rows)(m, d->D, kn, dsb, kd, ldk, dqi, dq->ld, dqbuf);
            if (dk) /* dK[0:kn] += dSᵀ · Q */
                ATT_GEMM_F32(true, false, kn, d->D, m, dsb, kn, qd, ldq, 1.0f, dks, lddk);
        }
    if (ATT_DENSE) TFN(att_store_sums)(d, dk, dv, b0, dks, dvs);
}

/* The forward's item and the backward's kv entry, for att_for. */
static int TFN(att_fwd_run_tile)(const att_run *r, int64_t it) {
    TFN(att_fwd_item_tile)(r->d, &r->m[0], &r->m[1], &r->m[2], &r->m[3], r->lse, r->scr, it);
    return 0;
}
static int TFN(att_bwd_run_tile)(const att_run *r, int64_t b) {
    TFN(att_bwd_entry_tile)(r->d, r->mats, r->lse, r->dq, r->dk, r->dv, r->scr, b);
    return 0;
}

#undef T
#undef ATT_TO_F32
#undef ATT_OF_F32
#undef ATT_GEMM_F32
#undef ATT_GEMM_T
#undef ATT_STORE_ROW
#undef ATT_DENSE
