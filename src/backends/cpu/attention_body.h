/* src/backends/cpu/attention_body.h — the f64 attention items (see attention.c; f32 and
 * bf16 take the dense tiles of attention_tile_body.h), written for any float type:
 * attention.c includes this file with T defined as f64 and ATT_GEMM, ATT_EXPF, ATT_LOGF as that dtype's GEMM, exp and log. Each
 * function is named TFN(name): name_f32 or name_f64 (tmpl.h). No include guard: included
 * once per dtype. */
#include "tmpl.h"

/* x[i] = exp(x[i] - sub), returns their sum (ATT_LANES partial sums, so the
 * loop vectorises without reassociation flags). */
RM_CPU_CLONES static T TFN(att_exp_inplace)(T *x, T sub, int64_t n) {
    T acc[ATT_LANES] = {0};
    int64_t i = 0;
    for (; i + ATT_LANES <= n; i += ATT_LANES)
        for (int j = 0; j < ATT_LANES; j++) {
            T e = ATT_EXPF(x[i + j] - sub);
            x[i + j] = e;
            acc[j] += e;
        }
    for (; i < n; i++) {
        x[i] = ATT_EXPF(x[i] - sub);
        acc[0] += x[i];
    }
    for (int w = ATT_LANES / 2; w > 0; w /= 2)
        for (int j = 0; j < w; j++) acc[j] += acc[j + w];
    return acc[0];
}

/* Scores of query rows [i0, i0 + m) of batch entry b against keys [0, kn),
 * turned into probabilities in place: s is (m, kn). With lse == NULL they
 * are normalised and the row log-sum-exp is stored in lse_out; otherwise
 * P = exp(S - lse) from the saved lse. Masked entries are 0. */
RM_CPU_CLONES static void TFN(att_probs)(const att_dims *d, const att_mat *q, const att_mat *k,
                                         int64_t b, int64_t i0, int64_t m, int64_t kn,
                                         T *restrict s, const T *lse, T *lse_out) {
    const T *qb = (const T *)q->base + q->off[b] + i0 * q->ld;
    const T *kb = (const T *)k->base + k->off[b];
    ATT_GEMM(false, true, m, kn, d->D, (T)d->scale, qb, q->ld, kb, k->ld, (T)0, s, kn);
    for (int64_t r = 0; r < m; r++) {
        T *sr = s + r * kn;
        int64_t lim = att_row_lim(d, i0 + r, kn);
        if (lse) {
            T l = lse[i0 + r];
            if (l == (T)-INFINITY) l = 0; /* no keys: every p is 0 anyway */
            for (int64_t j = 0; j < lim; j++) sr[j] = ATT_EXPF(sr[j] - l);
        } else {
            T mx = lim > 0 ? TFN(rm_row_max)(sr, lim) : (T)-INFINITY;
            T sub = mx == (T)-INFINITY ? (T)0 : mx; /* all -inf: avoid inf - inf */
            T sum = TFN(att_exp_inplace)(sr, sub, lim);
            T inv = (T)1 / sum;
            for (int64_t j = 0; j < lim; j++) sr[j] *= inv;
            lse_out[i0 + r] = lim > 0 ? sub + ATT_LOGF(sum) : (T)-INFINITY;
        }
        for (int64_t j = lim; j < kn; j++) sr[j] = 0;
    }
}

/* Forward of one (batch entry, query block) item. lse is (nb, Tq). */
static int TFN(att_fwd_item)(const att_dims *d, const att_mat *q, const att_mat *k,
                             const att_mat *v, const att_mat *o, T *lse, int64_t item) {
    int64_t nqb = (d->Tq + ATT_QB - 1) / ATT_QB;
    int64_t b = item / nqb, i0 = (item % nqb) * ATT_QB;
    int64_t m = d->Tq - i0 < ATT_QB ? d->Tq - i0 : ATT_QB;
    int64_t kn = att_keys(d, i0 + m);
    T *ob = (T *)o->base + o->off[b] + i0 * o->ld;
    if (kn == 0) { /* no keys: an empty sum, as matmul with an empty inner dim */
        for (int64_t r = 0; r < m; r++) {
            memset(ob + r * o->ld, 0, sizeof(T) * (size_t)d->Dv);
            lse[b * d->Tq + i0 + r] = (T)-INFINITY;
        }
        return REMAT_OK;
    }
    T *s = malloc(sizeof(T) * (size_t)(m * kn));
    if (!s) return REMAT_ENOMEM;
    TFN(att_probs)(d, q, k, b, i0, m, kn, s, NULL, lse + b * d->Tq);
    const T *vb = (const T *)v->base + v->off[b];
    ATT_GEMM(false, false, m, d->Dv, kn, (T)1, s, kn, vb, v->ld, (T)0, ob, o->ld);
    free(s);
    return REMAT_OK;
}

/* Backward of one batch entry: its dq rows, and its part of dk and dv (each may be NULL
 * when not wanted), which `first` zeroes before adding to them: the query heads of one
 * kv head add theirs in turn (grouped-query heads). Query blocks in order, so dk/dv sum
 * in a fixed order. */
static int TFN(att_bwd_item)(const att_dims *d, const att_mat *q, const att_mat *k,
                             const att_mat *v, const att_mat *o, const att_mat *go, const T *lse,
                             const att_mat *dq, const att_mat *dk, const att_mat *dv, int64_t b,
                             bool first) {
    const T *kb = (const T *)k->base + k->off[b];
    const T *vb = (const T *)v->base + v->off[b];
    T *dkb = dk ? (T *)dk->base + dk->off[b] : NULL;
    T *dvb = dv ? (T *)dv->base + dv->off[b] : NULL;
    for (int64_t j = 0; first && dkb && j < d->Tk; j++)
        memset(dkb + j * dk->ld, 0, sizeof(T) * (size_t)d->D);
    for (int64_t j = 0; first && dvb && j < d->Tk; j++)
        memset(dvb + j * dv->ld, 0, sizeof(T) * (size_t)d->Dv);
    int64_t kmax = att_keys(d, d->Tq);
    int64_t mb = d->Tq < ATT_QB ? d->Tq : ATT_QB;
    T *p = malloc(sizeof(T) * (size_t)(2 * mb * kmax + mb) + 1);
    if (!p) return REMAT_ENOMEM;
    T *ds = p + mb * kmax, *delta = ds + mb * kmax;
    for (int64_t i0 = 0; i0 < d->Tq; i0 += ATT_QB) {
        int64_t m = d->Tq - i0 < ATT_QB ? d->Tq - i0 : ATT_QB;
        int64_t kn = att_keys(d, i0 + m);
        const T *qi = (const T *)q->base + q->off[b] + i0 * q->ld;
        const T *goi = (const T *)go->base + go->off[b] + i0 * go->ld;
        const T *oi = (const T *)o->base + o->off[b] + i0 * o->ld;
        T *dqi = dq ? (T *)dq->base + dq->off[b] + i0 * dq->ld : NULL;
        if (att_keyless(kn, dqi, dq ? dq->ld : 0, m, d->D, sizeof(T))) continue;
        TFN(att_probs)(d, q, k, b, i0, m, kn, p, lse + b * d->Tq, NULL);
        if (dvb) /* dV[0:kn] += Pᵀ · dO */
            ATT_GEMM(true, false, kn, d->Dv, m, (T)1, p, kn, goi, go->ld, (T)1, dvb, dv->ld);
        if (!dqi && !dkb) continue;
        /* dP = dO · Vᵀ */
        ATT_GEMM(false, true, m, kn, d->Dv, (T)1, goi, go->ld, vb, v->ld, (T)0, ds, kn);
        for (int64_t r = 0; r < m; r++) { /* delta = rowsum(dO ∘ O) = rowsum(dP ∘ P) */
            T acc = 0;
            const T *g = goi + r * go->ld, *y = oi + r * o->ld;
            for (int64_t c = 0; c < d->Dv; c++) acc += g[c] * y[c];
            delta[r] = acc;
        }
        const T sc = (T)d->scale;
        for (int64_t r = 0; r < m; r++) {
            T *dsr = ds + r * kn;
            const T *pr = p + r * kn;
            const T dl = delta[r];
            for (int64_t j = 0; j < kn; j++) dsr[j] = pr[j] * (dsr[j] - dl) * sc;
        }
        if (dqi) /* dQ = dS · K */
            ATT_GEMM(false, false, m, d->D, kn, (T)1, ds, kn, kb, k->ld, (T)0, dqi, dq->ld);
        if (dkb) /* dK[0:kn] += dSᵀ · Q */
            ATT_GEMM(true, false, kn, d->D, m, (T)1, ds, kn, qi, q->ld, (T)1, dkb, dk->ld);
    }
    free(p);
    return REMAT_OK;
}

/* The forward's item and the backward's kv entry bk (its query entries bk·group + j add
 * to its dK and dV in turn, on one thread), for att_for. */
static int TFN(att_fwd_run)(const att_run *r, int64_t it) {
    return TFN(att_fwd_item)(r->d, &r->m[0], &r->m[1], &r->m[2], &r->m[3], r->lse, it);
}
static int TFN(att_bwd_run)(const att_run *r, int64_t bk) {
    const att_dims *d = r->d;
    for (int64_t j = 0; j < d->group; j++)
        if (TFN(att_bwd_item)(d, &r->m[0], &r->m[1], &r->m[2], &r->m[3], &r->m[4], r->lse, r->dq,
                              r->dk, r->dv, bk * d->group + j, j == 0))
            return 1;
    return 0;
}

#undef T
#undef ATT_GEMM
#undef ATT_EXPF
#undef ATT_LOGF
