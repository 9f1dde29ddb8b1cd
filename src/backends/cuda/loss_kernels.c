/* src/backends/cuda/loss_kernels.c — the cuda kernels (rm_kernel_fn) of
 * embedding, cross_entropy and mse_loss (src/core/kernels/reduce.h),
 * launching loss.cu's and cross_entropy.cu's kernels. cross_entropy takes autocast's bf16
 * logits uncast (RM_KF_AUTOCAST_KEEP, device.c) next to an f32 loss and logsumexp.
 *
 * The index and target range checks read the data, so they are the
 * kernels' as on the cpu: the first bad position is found on the device
 * and read back (one synchronisation of the stream per embedding forward and
 * cross_entropy forward), and the call fails with the cpu's message. */
#include "kwrap.h"
#include "reduce.h"

/* Reads the int64 at dev back to the host. */
static remat_status read_i64(rmk_call *c, const int64_t *dev, int64_t *host) {
    return rm_cuda_check(rmk_read_back(c, host, dev, sizeof *host), c->what);
}

/* After a launch (its error e) that wrote the first bad position of vals[0..n) to the
 * device int64 at badp (n: none): *bad that position and, when there is one, *val =
 * vals[*bad], read back. Returns the launch's or a read's status. */
static remat_status find_bad(rmk_call *c, cudaError_t e, const int64_t *badp, const int64_t *vals,
                             int64_t n, int64_t *bad, int64_t *val) {
    *bad = n;
    *val = 0;
    int rc = rm_cuda_check(e, c->what);
    if (!rc) rc = read_i64(c, badp, bad);
    if (!rc && *bad < n) rc = read_i64(c, vals + *bad, val);
    return rc;
}

static remat_status cuda_embedding(const rm_kargs *k) {
    const remat_tensor *w = k->in[0], *ix = k->in[1];
    const int64_t P = remat_numel(ix), num = w->shape[0], D = w->shape[1];
    const int64_t *idx = rm_ptr(ix);
    RMK_ENTER(c, w, "cuda embedding kernel");
    int64_t *first = rmk_scratch(&c, sizeof(int64_t));
    if (!first) return rmk_leave_rc(&c, rm_last_status());
    int64_t bad, val;
    int rc = find_bad(&c, rmk_first_bad_index(idx, P, 0, num, false, 0, first, c.s), first, idx, P,
                      &bad, &val);
    if (!rc && bad < P) {
        char bw[200];
        rc = rm_err(REMAT_EINVAL,
                    "index out of range: indices[%lld] (flat) = %lld, weight %s has %lld rows "
                    "(valid: 0 to %lld)",
                    (long long)bad, (long long)val, rm_tensor_str(w, bw, sizeof bw), (long long)num,
                    (long long)num - 1);
    }
    rmk_scratch_free(&c, first);
    if (rc) return rmk_leave_rc(&c, rc);
    return rmk_leave(&c, rmk_embedding(rmk_dt(w), rm_ptr(w), idx, rm_ptr(k->out[0]), P, D, c.s));
}

static remat_status cuda_embedding_bwd(const rm_kargs *k) {
    remat_tensor *dw = k->out[0];
    const int64_t P = remat_numel(k->in[1]), num = dw->shape[0], D = dw->shape[1];
    RMK_ENTER(c, dw, "cuda embedding backward kernel");
    size_t wsb = rmk_embedding_bwd_ws(P, num);
    void *ws = rmk_scratch(&c, wsb);
    if (!ws) return rmk_leave_rc(&c, rm_last_status());
    cudaError_t e = rmk_embedding_bwd(rmk_dt(dw), rm_ptr(k->in[0]), rm_ptr(k->in[1]), rm_ptr(dw),
                                      num, P, D, ws, wsb, c.s);
    rmk_scratch_free(&c, ws);
    return rmk_leave(&c, e);
}

/* in: x (N, C), t; out: loss, lse (x's dtype, or f32 for bf16 x: autocast's) */
static remat_status cuda_cross_entropy(const rm_kargs *k) {
    const rm_ce_params *p = k->params;
    const remat_tensor *x = k->in[0];
    const int64_t N = x->shape[0], C = x->shape[1];
    const int64_t *t = rm_ptr(k->in[1]);
    RMK_ENTER(c, x, "cuda cross_entropy kernel");
    int64_t *badp = rmk_scratch(&c, sizeof(int64_t));
    if (!badp) return rmk_leave_rc(&c, rm_last_status());
    int64_t bad, val;
    int rc = find_bad(&c,
                      rmk_cross_entropy(rmk_dt(k->out[0]), rmk_dt(x), rm_ptr(x), t, p->ignore_index,
                                        rm_ptr(k->out[1]), rm_ptr(k->out[0]), badp, N, C, c.s),
                      badp, t, N, &bad, &val);
    if (!rc && bad < N) {
        char bl[200];
        rc = rm_err(REMAT_EINVAL,
                    "target out of range: targets[%lld] = %lld, logits %s has %lld classes "
                    "(valid: 0 to %lld, or ignore_index %lld)",
                    (long long)bad, (long long)val, rm_tensor_str(x, bl, sizeof bl), (long long)C,
                    (long long)C - 1, (long long)p->ignore_index);
    }
    rmk_scratch_free(&c, badp);
    return rmk_leave_rc(&c, rc);
}

/* in: x, t, lse, g (lse's dtype); out: dx (x's) */
static remat_status cuda_cross_entropy_bwd(const rm_kargs *k) {
    const rm_ce_params *p = k->params;
    const remat_tensor *x = k->in[0];
    RMK_ENTER(c, x, "cuda cross_entropy backward kernel");
    void *ws = rmk_scratch(&c, rmk_cross_entropy_bwd_ws());
    if (!ws) return rmk_leave_rc(&c, rm_last_status());
    cudaError_t e = rmk_cross_entropy_bwd(rmk_dt(k->in[2]), rmk_dt(x), rm_ptr(x), rm_ptr(k->in[1]),
                                          p->ignore_index, rm_ptr(k->in[2]), rm_ptr(k->in[3]),
                                          rm_ptr(k->out[0]), x->shape[0], x->shape[1], ws, c.s);
    rmk_scratch_free(&c, ws);
    return rmk_leave(&c, e);
}

/* The bf16 rows: bf16 logits next to an f32 loss and logsumexp (autocast's, read uncast)
 * by the kernels above; a bf16 loss (a bf16 call outside autocast) through f32, as every
 * bf16 kernel without one of its own. */
static remat_status cuda_cross_entropy_bf16(const rm_kargs *k) {
    if (k->out[0]->dtype == REMAT_F32 && k->out[1]->dtype == REMAT_F32)
        return cuda_cross_entropy(k);
    return rm_cuda_bf16_via_f32(RM_K_CROSS_ENTROPY, k);
}
static remat_status cuda_cross_entropy_bwd_bf16(const rm_kargs *k) {
    if (k->in[2]->dtype == REMAT_F32 && k->in[3]->dtype == REMAT_F32 &&
        k->out[0]->dtype == REMAT_BF16)
        return cuda_cross_entropy_bwd(k);
    return rm_cuda_bf16_via_f32(RM_K_CROSS_ENTROPY_BWD, k);
}

static remat_status cuda_mse(const rm_kargs *k) {
    const int64_t n = remat_numel(k->in[0]);
    RMK_ENTER(c, k->in[0], "cuda mse_loss kernel");
    void *ws = rmk_scratch(&c, rmk_mse_ws(n));
    if (!ws) return rmk_leave_rc(&c, rm_last_status());
    cudaError_t e = rmk_mse(rmk_dt(k->in[0]), rm_ptr(k->in[0]), rm_ptr(k->in[1]), rm_ptr(k->out[0]),
                            n, ws, c.s);
    rmk_scratch_free(&c, ws);
    return rmk_leave(&c, e);
}

static remat_status cuda_mse_bwd(const rm_kargs *k) {
    remat_tensor *da = k->out[0], *db = k->out[1];
    RMK_ENTER(c, k->in[0], "cuda mse_loss backward kernel");
    return rmk_leave(&c, rmk_mse_bwd(rmk_dt(k->in[0]), rm_ptr(k->in[0]), rm_ptr(k->in[1]),
                                     rm_ptr(k->in[2]), da ? rm_ptr(da) : NULL,
                                     db ? rm_ptr(db) : NULL, remat_numel(k->in[0]), c.s));
}

void rm_cuda_register_loss(int type) {
    static const rmk_row rows[] = {
        {RM_K_EMBEDDING, cuda_embedding},
        {RM_K_EMBEDDING_BWD, cuda_embedding_bwd},
        {RM_K_CROSS_ENTROPY, cuda_cross_entropy},
        {RM_K_CROSS_ENTROPY_BWD, cuda_cross_entropy_bwd},
        {RM_K_MSE, cuda_mse},
        {RM_K_MSE_BWD, cuda_mse_bwd},
    };
    RMK_REGISTER_ROWS(type, rows);
    rm_kernel_register(RM_K_CROSS_ENTROPY, type, REMAT_BF16, cuda_cross_entropy_bf16);
    rm_kernel_register(RM_K_CROSS_ENTROPY_BWD, type, REMAT_BF16, cuda_cross_entropy_bwd_bf16);
}
