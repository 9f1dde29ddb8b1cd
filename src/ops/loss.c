/* src/ops/loss.c — embedding, cross_entropy and mse_loss.
 *
 * embedding gathers rows of weight (num, dim); its backward scatter-adds
 * the output gradient back into a (num, dim) gradient. Repeated indices
 * accumulate. The scatter runs in index order within each block of
 * columns and is parallel over column blocks, so it is deterministic.
 *
 * cross_entropy fuses log_softmax and the NLL: per row n,
 *   loss_n = logsumexp(x[n, :]) - x[n, t_n],
 * averaged over rows whose target is not ignore_index. The per-row
 * logsumexp is saved (N values) so the backward
 *   dx[n, c] = g * (exp(x[n, c] - lse_n) - [c == t_n]) / count
 * needs no second pass for the max and the sum.
 *
 * The scalar losses sum their per-row / per-element terms in double over
 * fixed chunks, so the value does not depend on the thread count. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "../internal.h"

#define LOSS_CHUNK 4096 /* elements per partial sum of a scalar loss */
#define EMB_COL_BLOCK 64

typedef float f32;
typedef double f64;

/* Row kernels (rm_row_*) are declared in internal.h. */

/* ---- embedding ------------------------------------------------------------------------- */
#define EMBEDDING_KERNELS(T)                                                                  \
    /* y (P, D) = w[idx[p], :] */                                                             \
    static void embedding_fwd_##T(const T *restrict w, const int64_t *restrict idx,           \
                                  T *restrict y, int64_t P, int64_t D) {                      \
        _Pragma("omp parallel for if (P * D > RM_OMP_MIN)")                                   \
        for (int64_t p = 0; p < P; p++) memcpy(y + p * D, w + idx[p] * D, (size_t)D * sizeof(T)); \
    }                                                                                         \
    /* dw (num, D) = 0; dw[idx[p], :] += g[p, :] */                                           \
    static void embedding_bwd_##T(const T *restrict g, const int64_t *restrict idx,           \
                                  T *restrict dw, int64_t num, int64_t P, int64_t D) {        \
        int64_t nb = (D + EMB_COL_BLOCK - 1) / EMB_COL_BLOCK;                                 \
        _Pragma("omp parallel for if ((num + P) * D > RM_OMP_MIN)")                           \
        for (int64_t b = 0; b < nb; b++) {                                                    \
            int64_t c0 = b * EMB_COL_BLOCK;                                                   \
            int w = (int)(D - c0 < EMB_COL_BLOCK ? D - c0 : EMB_COL_BLOCK);                   \
            for (int64_t r = 0; r < num; r++)                                                 \
                for (int j = 0; j < w; j++) dw[r * D + c0 + j] = 0;                           \
            for (int64_t p = 0; p < P; p++) {                                                 \
                T *d = dw + idx[p] * D + c0;                                                  \
                const T *gp = g + p * D + c0;                                                 \
                for (int j = 0; j < w; j++) d[j] += gp[j];                                    \
            }                                                                                 \
        }                                                                                     \
    }

EMBEDDING_KERNELS(f32)
EMBEDDING_KERNELS(f64)

typedef struct emb_ctx {
    int64_t num, dim;
} emb_ctx;

/* saved: 0 = indices */
static int embedding_backward(remat_node *node, remat_tensor *const *gout, remat_tensor **gin) {
    emb_ctx *c = node->ctx;
    if (!node->next[0].node) return REMAT_OK;
    remat_tensor *is = NULL, *ic = NULL, *g = NULL, *dw = NULL;
    int rc = rm_node_unpack(node, 0, &is);
    if (rc) return rc;
    if (!is) {
        rc = rm_err(REMAT_ESTATE, "%s: indices were not saved", node->name);
        goto out;
    }
    rc = rm_contig(&ic, is);
    if (!rc) rc = rm_contig(&g, gout[0]);
    int64_t wshape[2] = {c->num, c->dim};
    if (!rc) rc = rm_new_output(&dw, 2, wshape, g->dtype, g->storage->device);
    if (rc) goto out;
    if (rm_ptr(dw) && rm_ptr(g) && rm_ptr(ic)) {
        int64_t P = remat_numel(ic);
        if (g->dtype == REMAT_F32)
            embedding_bwd_f32(rm_ptr(g), rm_ptr(ic), rm_ptr(dw), c->num, P, c->dim);
        else
            embedding_bwd_f64(rm_ptr(g), rm_ptr(ic), rm_ptr(dw), c->num, P, c->dim);
    }
    gin[0] = dw;
    dw = NULL;
out:
    remat_release(is);
    remat_release(ic);
    remat_release(g);
    remat_release(dw);
    return rc;
}

static int check_i64(const char *call, const char *arg, const remat_tensor *t) {
    int rc = rm_check_tensor(call, arg, t);
    if (rc) return rc;
    if (t->dtype != REMAT_I64) {
        char b[200];
        return rm_err(REMAT_EDTYPE, "%s: '%s' must be i64, got %s", call, arg,
                      rm_tensor_str(t, b, sizeof b));
    }
    return rm_check_host(call, t);
}

static int embedding_impl(remat_tensor **out, remat_tensor *weight, remat_tensor *indices) {
    const char *call = "remat_embedding";
    rm_op_enter(call);
    if (!out) return rm_err(REMAT_EINVAL, "%s: out must not be NULL", call);
    *out = NULL;
    int rc = rm_check_float(call, "weight", weight);
    if (!rc) rc = check_i64(call, "indices", indices);
    if (!rc) rc = rm_check_same_device(call, weight, indices);
    if (rc) return rc;
    char bw[200], bi[200];
    if (weight->ndim != 2)
        return rm_err(REMAT_ESHAPE, "%s: weight must be 2-dim (num, dim), got %s", call,
                      rm_tensor_str(weight, bw, sizeof bw));
    if (indices->ndim + 1 > REMAT_MAX_DIMS)
        return rm_err(REMAT_EINVAL, "%s: indices %s has too many dims (the output would have %d, "
                      "the maximum is %d)", call, rm_tensor_str(indices, bi, sizeof bi),
                      indices->ndim + 1, REMAT_MAX_DIMS);
    int64_t num = weight->shape[0], D = weight->shape[1];
    remat_tensor *ic = NULL, *wc = NULL, *y = NULL;
    rc = rm_contig(&ic, indices);
    if (rc) return rm_err_prefix(rc, call);
    int64_t P = remat_numel(ic);
    const int64_t *ip = rm_ptr(ic);
    if (ip) { /* no data in skip mode: nothing to check */
        for (int64_t p = 0; p < P; p++) {
            if (ip[p] < 0 || ip[p] >= num) {
                long long v = (long long)ip[p];
                remat_release(ic);
                return rm_err(REMAT_EINVAL,
                              "%s: index out of range: indices[%lld] (flat) = %lld, weight %s "
                              "has %lld rows (valid: 0 to %lld)",
                              call, (long long)p, v, rm_tensor_str(weight, bw, sizeof bw),
                              (long long)num, (long long)num - 1);
            }
        }
    }
    int64_t oshape[REMAT_MAX_DIMS];
    memcpy(oshape, indices->shape, sizeof(int64_t) * (size_t)indices->ndim);
    oshape[indices->ndim] = D;
    rc = rm_contig(&wc, weight);
    if (!rc) rc = rm_new_output(&y, indices->ndim + 1, oshape, weight->dtype,
                                weight->storage->device);
    if (rc) goto fail;
    if (rm_ptr(y) && rm_ptr(wc) && ip) {
        if (weight->dtype == REMAT_F32) embedding_fwd_f32(rm_ptr(wc), ip, rm_ptr(y), P, D);
        else embedding_fwd_f64(rm_ptr(wc), ip, rm_ptr(y), P, D);
    }
    if (rm_needs_grad(1, &weight)) {
        remat_node *node;
        rc = rm_node_new(&node, "EmbeddingBackward", embedding_backward, 1, &weight, 1, 1);
        if (rc == REMAT_OK) {
            emb_ctx *c = malloc(sizeof *c);
            if (!c) {
                rc = rm_err(REMAT_ENOMEM, "%s: out of memory", call);
            } else {
                c->num = num;
                c->dim = D;
                rm_node_set_ctx(node, c, NULL);
                rm_node_set_output(node, 0, y);
                rc = rm_op_save(node, 0, indices);
            }
            rm_node_release(node);
        }
        if (rc) goto fail;
    }
    remat_release(ic);
    remat_release(wc);
    return rm_hand_out(out, y);
fail:
    remat_release(ic);
    remat_release(wc);
    remat_release(y);
    return rm_err_prefix(rc, call);
}

/* ---- cross_entropy ------------------------------------------------------------------------ */
#define CE_KERNELS(T, LOGF)                                                                   \
    /* x (N, C), t (N) -> loss[n] (0 for ignored rows), lse (N) */                            \
    static void ce_fwd_##T(const T *restrict x, const int64_t *restrict t, int64_t ignore,    \
                           T *restrict lse, double *restrict loss, int64_t N, int64_t C) {    \
        _Pragma("omp parallel for if (N * C > RM_OMP_MIN / 4)")                               \
        for (int64_t n = 0; n < N; n++) {                                                     \
            const T *xn = x + n * C;                                                          \
            T mx = rm_row_max_##T(xn, C);                                                     \
            if (mx == -INFINITY) mx = 0;                                                      \
            T l = mx + LOGF(rm_row_expsum_##T(xn, mx, NULL, C));                              \
            lse[n] = l;                                                                       \
            loss[n] = t[n] == ignore ? 0.0 : (double)(l - xn[t[n]]);                          \
        }                                                                                     \
    }                                                                                         \
    /* dx (N, C) = scale * (softmax - onehot), 0 on ignored rows; scale = g / count */        \
    static void ce_bwd_##T(const T *restrict x, const int64_t *restrict t, int64_t ignore,    \
                           const T *restrict lse, T scale, T *restrict dx, int64_t N,         \
                           int64_t C) {                                                       \
        _Pragma("omp parallel for if (N * C > RM_OMP_MIN / 4)")                               \
        for (int64_t n = 0; n < N; n++) {                                                     \
            T *d = dx + n * C;                                                                \
            if (t[n] == ignore) {                                                             \
                memset(d, 0, (size_t)C * sizeof(T));                                          \
                continue;                                                                     \
            }                                                                                 \
            rm_row_exp_scale_##T(x + n * C, lse[n], scale, d, C);                             \
            d[t[n]] -= scale;                                                                 \
        }                                                                                     \
    }

CE_KERNELS(f32, logf)
CE_KERNELS(f64, log)

/* Sum of n doubles over fixed chunks (thread-count independent). */
static double sum_fixed_chunks(const double *v, int64_t n) {
    int64_t nch = (n + LOSS_CHUNK - 1) / LOSS_CHUNK;
    double total = 0;
    for (int64_t c = 0; c < nch; c++) {
        int64_t lo = c * LOSS_CHUNK, hi = lo + LOSS_CHUNK < n ? lo + LOSS_CHUNK : n;
        double s = 0;
        for (int64_t i = lo; i < hi; i++) s += v[i];
        total += s;
    }
    return total;
}

typedef struct ce_ctx {
    int64_t ignore_index;
    int64_t count;
} ce_ctx;

/* saved: 0 = logits, 1 = targets, 2 = lse (N) */
static int cross_entropy_backward(remat_node *node, remat_tensor *const *gout,
                                  remat_tensor **gin) {
    ce_ctx *c = node->ctx;
    if (!node->next[0].node) return REMAT_OK;
    remat_tensor *sv[3] = {NULL, NULL, NULL}, *cv[3] = {NULL, NULL, NULL}, *dx = NULL;
    int rc = REMAT_OK;
    for (int i = 0; i < 3 && rc == REMAT_OK; i++) {
        rc = rm_node_unpack(node, i, &sv[i]);
        if (!rc && sv[i]) rc = rm_contig(&cv[i], sv[i]);
    }
    if (rc) goto out;
    if (!cv[0] || !cv[1] || !cv[2]) {
        rc = rm_err(REMAT_ESTATE, "%s: saved tensors are missing", node->name);
        goto out;
    }
    remat_tensor *x = cv[0];
    rc = rm_new_output(&dx, x->ndim, x->shape, x->dtype, x->storage->device);
    if (rc) goto out;
    double g = 0;
    if (rm_ptr(gout[0])) {
        rc = remat_item(gout[0], &g);
        if (rc) goto out;
    }
    if (rm_ptr(dx) && rm_ptr(x) && rm_ptr(cv[1]) && rm_ptr(cv[2])) {
        int64_t N = x->shape[0], C = x->shape[1];
        double scale = g / (double)c->count; /* count 0: NaN, as the forward */
        if (x->dtype == REMAT_F32)
            ce_bwd_f32(rm_ptr(x), rm_ptr(cv[1]), c->ignore_index, rm_ptr(cv[2]), (f32)scale,
                       rm_ptr(dx), N, C);
        else
            ce_bwd_f64(rm_ptr(x), rm_ptr(cv[1]), c->ignore_index, rm_ptr(cv[2]), scale,
                       rm_ptr(dx), N, C);
    }
    gin[0] = dx;
    dx = NULL;
out:
    for (int i = 0; i < 3; i++) {
        remat_release(sv[i]);
        remat_release(cv[i]);
    }
    remat_release(dx);
    return rc;
}

static int cross_entropy_impl(remat_tensor **out, remat_tensor *logits, remat_tensor *targets,
                              int64_t ignore_index) {
    const char *call = "remat_cross_entropy";
    rm_op_enter(call);
    if (!out) return rm_err(REMAT_EINVAL, "%s: out must not be NULL", call);
    *out = NULL;
    int rc = rm_check_float(call, "logits", logits);
    if (!rc) rc = check_i64(call, "targets", targets);
    if (!rc) rc = rm_check_same_device(call, logits, targets);
    if (rc) return rc;
    char bl[200], bt[200];
    if (logits->ndim != 2 || targets->ndim != 1 || targets->shape[0] != logits->shape[0])
        return rm_err(REMAT_ESHAPE, "%s: expected logits (N, C) and targets (N), got logits %s "
                      "and targets %s", call, rm_tensor_str(logits, bl, sizeof bl),
                      rm_tensor_str(targets, bt, sizeof bt));
    int64_t N = logits->shape[0], C = logits->shape[1];
    remat_tensor *xc = NULL, *tc = NULL, *y = NULL, *lse = NULL;
    double *loss = NULL;
    rc = rm_contig(&tc, targets);
    if (rc) return rm_err_prefix(rc, call);
    const int64_t *tp = rm_ptr(tc);
    int64_t count = 0;
    if (tp) {
        for (int64_t n = 0; n < N; n++) {
            if (tp[n] == ignore_index) continue;
            if (tp[n] < 0 || tp[n] >= C) {
                long long v = (long long)tp[n];
                remat_release(tc);
                return rm_err(REMAT_EINVAL, "%s: target out of range: targets[%lld] = %lld, "
                              "logits %s has %lld classes (valid: 0 to %lld, or ignore_index "
                              "%lld)", call, (long long)n, v,
                              rm_tensor_str(logits, bl, sizeof bl), (long long)C,
                              (long long)C - 1, (long long)ignore_index);
            }
            count++;
        }
    }
    rc = rm_contig(&xc, logits);
    if (!rc) rc = rm_new_output(&y, 0, NULL, logits->dtype, logits->storage->device);
    if (!rc) rc = rm_new_output(&lse, 1, &N, logits->dtype, logits->storage->device);
    if (rc) goto fail;
    if (rm_ptr(y) && rm_ptr(xc) && rm_ptr(lse) && tp) {
        loss = malloc(sizeof(double) * (size_t)(N ? N : 1));
        if (!loss) {
            rc = rm_err(REMAT_ENOMEM, "%s: out of memory", call);
            goto fail;
        }
        if (logits->dtype == REMAT_F32)
            ce_fwd_f32(rm_ptr(xc), tp, ignore_index, rm_ptr(lse), loss, N, C);
        else
            ce_fwd_f64(rm_ptr(xc), tp, ignore_index, rm_ptr(lse), loss, N, C);
        double mean = sum_fixed_chunks(loss, N) / (double)count; /* no targets: NaN */
        if (count == 0) mean = NAN;
        if (logits->dtype == REMAT_F32) *(f32 *)rm_ptr(y) = (f32)mean;
        else *(f64 *)rm_ptr(y) = mean;
        free(loss);
        loss = NULL;
    }
    if (rm_needs_grad(1, &logits)) {
        remat_node *node;
        rc = rm_node_new(&node, "CrossEntropyBackward", cross_entropy_backward, 1, &logits, 1, 3);
        if (rc == REMAT_OK) {
            ce_ctx *c = malloc(sizeof *c);
            if (!c) {
                rc = rm_err(REMAT_ENOMEM, "%s: out of memory", call);
            } else {
                c->ignore_index = ignore_index;
                c->count = count;
                rm_node_set_ctx(node, c, NULL);
                rm_node_set_output(node, 0, y);
                rc = rm_op_save(node, 0, logits);
                if (!rc) rc = rm_op_save(node, 1, targets);
                if (!rc) rc = rm_op_save(node, 2, lse);
            }
            rm_node_release(node);
        }
        if (rc) goto fail;
    }
    remat_release(xc);
    remat_release(tc);
    remat_release(lse);
    return rm_hand_out(out, y);
fail:
    free(loss);
    remat_release(xc);
    remat_release(tc);
    remat_release(y);
    remat_release(lse);
    return rm_err_prefix(rc, call);
}

/* ---- mse_loss ------------------------------------------------------------------------------- */
#define MSE_KERNELS(T)                                                                        \
    static double mse_fwd_##T(const T *restrict a, const T *restrict b, int64_t n,            \
                              double *restrict part) {                                        \
        int64_t nch = (n + LOSS_CHUNK - 1) / LOSS_CHUNK;                                      \
        _Pragma("omp parallel for if (n > RM_OMP_MIN)")                                       \
        for (int64_t c = 0; c < nch; c++) {                                                   \
            int64_t lo = c * LOSS_CHUNK, hi = lo + LOSS_CHUNK < n ? lo + LOSS_CHUNK : n;      \
            double s = 0;                                                                     \
            for (int64_t i = lo; i < hi; i++) {                                               \
                double d = (double)a[i] - (double)b[i];                                       \
                s += d * d;                                                                   \
            }                                                                                 \
            part[c] = s;                                                                      \
        }                                                                                     \
        double total = 0;                                                                     \
        for (int64_t c = 0; c < nch; c++) total += part[c];                                   \
        return total;                                                                         \
    }                                                                                         \
    /* da = s * (a - b), db = -da (each may be NULL); da may be a (in place) */              \
    static void mse_bwd_##T(const T *a, const T *restrict b, T s, T *da, T *restrict db,      \
                            int64_t n) {                                                      \
        _Pragma("omp parallel for if (n > RM_OMP_MIN)")                                       \
        for (int64_t i = 0; i < n; i++) {                                                     \
            T v = s * (a[i] - b[i]);                                                          \
            if (da) da[i] = v;                                                                \
            if (db) db[i] = -v;                                                               \
        }                                                                                     \
    }

MSE_KERNELS(f32)
MSE_KERNELS(f64)

/* saved: 0 = a, 1 = b */
static int mse_backward(remat_node *node, remat_tensor *const *gout, remat_tensor **gin) {
    remat_tensor *sv[2] = {NULL, NULL}, *cv[2] = {NULL, NULL}, *da = NULL, *db = NULL;
    int rc = REMAT_OK;
    /* The usual loss (a prediction against a target that needs no gradient)
     * writes da over the saved prediction when nothing else holds it: the
     * pass then never holds both (the kernel is elementwise). */
    if (node->next[0].node && !node->next[1].node && rm_node_take_saved(node, 0, &da))
        sv[0] = remat_retain(da);
    for (int i = 0; i < 2 && rc == REMAT_OK; i++) {
        if (!sv[i]) rc = rm_node_unpack(node, i, &sv[i]);
        if (!rc && sv[i]) rc = rm_contig(&cv[i], sv[i]);
    }
    if (rc) goto out;
    if (!cv[0] || !cv[1]) {
        rc = rm_err(REMAT_ESTATE, "%s: saved tensors are missing", node->name);
        goto out;
    }
    remat_tensor *a = cv[0], *b = cv[1];
    remat_device dev = a->storage->device;
    if (node->next[0].node && !da) rc = rm_new_output(&da, a->ndim, a->shape, a->dtype, dev);
    if (!rc && node->next[1].node) rc = rm_new_output(&db, a->ndim, a->shape, a->dtype, dev);
    if (rc) goto out;
    double g = 0;
    if (rm_ptr(gout[0])) {
        rc = remat_item(gout[0], &g);
        if (rc) goto out;
    }
    int64_t n = remat_numel(a);
    if (rm_ptr(a) && rm_ptr(b) && (!da || rm_ptr(da)) && (!db || rm_ptr(db))) {
        double s = 2.0 * g / (double)n;
        if (a->dtype == REMAT_F32)
            mse_bwd_f32(rm_ptr(a), rm_ptr(b), (f32)s, da ? rm_ptr(da) : NULL,
                        db ? rm_ptr(db) : NULL, n);
        else
            mse_bwd_f64(rm_ptr(a), rm_ptr(b), s, da ? rm_ptr(da) : NULL, db ? rm_ptr(db) : NULL,
                        n);
    }
    gin[0] = da;
    gin[1] = db;
    da = db = NULL;
out:
    for (int i = 0; i < 2; i++) {
        remat_release(sv[i]);
        remat_release(cv[i]);
    }
    remat_release(da);
    remat_release(db);
    return rc;
}

static int mse_loss_impl(remat_tensor **out, remat_tensor *a, remat_tensor *b) {
    const char *call = "remat_mse_loss";
    rm_op_enter(call);
    if (!out) return rm_err(REMAT_EINVAL, "%s: out must not be NULL", call);
    *out = NULL;
    int rc = rm_check_float(call, "a", a);
    if (!rc) rc = rm_check_float(call, "b", b);
    if (!rc) rc = rm_check_same_dtype(call, a, b);
    if (!rc) rc = rm_check_same_device(call, a, b);
    if (rc) return rc;
    bool same = a->ndim == b->ndim;
    for (int d = 0; same && d < a->ndim; d++) same = a->shape[d] == b->shape[d];
    if (!same) {
        char ba[200], bb[200];
        return rm_err(REMAT_ESHAPE, "%s: a %s and b %s must have the same shape (no "
                      "broadcasting)", call, rm_tensor_str(a, ba, sizeof ba),
                      rm_tensor_str(b, bb, sizeof bb));
    }
    int64_t n = remat_numel(a);
    remat_tensor *ac = NULL, *bc = NULL, *y = NULL;
    rc = rm_contig(&ac, a);
    if (!rc) rc = rm_contig(&bc, b);
    if (!rc) rc = rm_new_output(&y, 0, NULL, a->dtype, a->storage->device);
    if (rc) goto fail;
    if (rm_ptr(y) && rm_ptr(ac) && rm_ptr(bc)) {
        int64_t nch = (n + LOSS_CHUNK - 1) / LOSS_CHUNK;
        double *part = malloc(sizeof(double) * (size_t)(nch ? nch : 1));
        if (!part) {
            rc = rm_err(REMAT_ENOMEM, "%s: out of memory", call);
            goto fail;
        }
        double s = a->dtype == REMAT_F32 ? mse_fwd_f32(rm_ptr(ac), rm_ptr(bc), n, part)
                                         : mse_fwd_f64(rm_ptr(ac), rm_ptr(bc), n, part);
        free(part);
        double mean = n ? s / (double)n : NAN;
        if (a->dtype == REMAT_F32) *(f32 *)rm_ptr(y) = (f32)mean;
        else *(f64 *)rm_ptr(y) = mean;
    }
    remat_tensor *ins[2] = {a, b};
    if (rm_needs_grad(2, ins)) {
        remat_node *node;
        rc = rm_node_new(&node, "MseLossBackward", mse_backward, 2, ins, 1, 2);
        if (rc == REMAT_OK) {
            rm_node_set_output(node, 0, y);
            rc = rm_op_save(node, 0, a);
            if (!rc) rc = rm_op_save(node, 1, b);
            rm_node_release(node);
        }
        if (rc) goto fail;
    }
    remat_release(ac);
    remat_release(bc);
    return rm_hand_out(out, y);
fail:
    remat_release(ac);
    remat_release(bc);
    remat_release(y);
    return rm_err_prefix(rc, call);
}

/* ---- public entries: interception brackets (src/dispatch/intercept.c) ---------------------- */
int remat_embedding(remat_tensor **out, remat_tensor *weight, remat_tensor *indices) {
    remat_tensor *in_[] = {weight, indices};
    RM_OP_RUN1("remat_embedding", out, 2, in_, NULL, embedding_impl(out, weight, indices));
}

int remat_cross_entropy(remat_tensor **out, remat_tensor *logits, remat_tensor *targets,
                        int64_t ignore_index) {
    remat_tensor *in_[] = {logits, targets};
    RM_OP_RUN1("remat_cross_entropy", out, 2, in_, NULL,
               cross_entropy_impl(out, logits, targets, ignore_index));
}

int remat_mse_loss(remat_tensor **out, remat_tensor *a, remat_tensor *b) {
    remat_tensor *in_[] = {a, b};
    RM_OP_RUN1("remat_mse_loss", out, 2, in_, NULL, mse_loss_impl(out, a, b));
}
