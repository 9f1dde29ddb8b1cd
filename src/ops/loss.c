/* src/ops/loss.c — embedding, cross_entropy and mse_loss: descriptors over
 * the loss kernels (src/backends/cpu/loss.c on the cpu, which describes
 * the maths and the thread-count independent sums).
 *
 * embedding and cross_entropy take an i64 tensor second (indices,
 * targets; RM_OPF_INDEX_IN1): in[0] alone must be float, and only in[0]
 * is differentiated (the node has one edge, as before the driver).
 * cross_entropy's kernel also writes the per-row logsumexp, a by-product
 * the node saves. */
#include <string.h>

#include "op.h"
#include "remat/autocast.h"

/* ---- embedding ------------------------------------------------------------------------- */
static const char *const k_emb_args[] = {"weight", "indices"};

static remat_status embedding_check(const rm_op_call *c) {
    const char *call = c->op->name;
    remat_tensor *weight = c->in[0], *indices = c->in[1]; /* i64 (RM_OPF_INDEX_IN1) */
    char bw[200], bi[200];
    if (weight->ndim != 2)
        return rm_err(REMAT_ESHAPE, "%s: weight must be 2-dim (num, dim), got %s", call,
                      rm_tensor_str(weight, bw, sizeof bw));
    if (indices->ndim + 1 > REMAT_MAX_DIMS)
        return rm_err(REMAT_EINVAL,
                      "%s: indices %s has too many dims (the output would have %d, "
                      "the maximum is %d)",
                      call, rm_tensor_str(indices, bi, sizeof bi), indices->ndim + 1,
                      REMAT_MAX_DIMS);
    return REMAT_OK;
}

/* y: indices' shape + (dim) */
static remat_status embedding_infer(const rm_op_call *c, rm_out_spec *out) {
    const remat_tensor *weight = c->in[0], *indices = c->in[1];
    out[0].ndim = indices->ndim + 1;
    memcpy(out[0].shape, indices->shape, sizeof(int64_t) * (size_t)indices->ndim);
    out[0].shape[indices->ndim] = weight->shape[1];
    out[0].dtype = weight->dtype;
    return REMAT_OK;
}

typedef struct emb_ctx {
    int64_t num, dim; /* weight's shape */
} emb_ctx;

static void embedding_fill_ctx(const rm_op_call *c, void *ctx) {
    emb_ctx *e = ctx;
    e->num = c->in[0]->shape[0];
    e->dim = c->in[0]->shape[1];
}

/* saved: 0 = indices */
static remat_status embedding_backward(remat_node *node, remat_tensor *const *gout,
                                       remat_tensor **gin) {
    const emb_ctx *c = node->ctx;
    const int64_t wshape[2] = {c->num, c->dim};
    return rm_backward_kernel(node, gout, gin, RM_K_EMBEDDING_BWD, 0, "indices were not saved", 2,
                              wshape, NULL);
}

/* create_graph: the scatter of g into the weight rows is linear in g; its
 * adjoint gathers the rows back, which is embedding itself. */
static remat_status embedding_gather(remat_node *node, remat_tensor *gg, remat_tensor **out) {
    remat_tensor *idx = NULL;
    int rc = rm_node_unpack(node, 0, &idx);
    if (!rc) rc = remat_embedding(out, gg, idx);
    rm_release(idx);
    return rc;
}

static remat_status embedding_backward_diff(remat_node *node, remat_tensor *const *gout,
                                            remat_tensor **gin) {
    return rm_backward_linear(node, gout, gin, embedding_gather);
}

const rm_op_desc rm_op_embedding = RM_OP_DESC(
    "remat_embedding", "EmbeddingBackward", .n_in = 2, .no_grad_in = 2u, .n_out = 1, .n_saved = 1,
    .flags = RM_OPF_FLOAT_IN0 | RM_OPF_INDEX_IN1 | RM_OPF_CONTIGUOUS, .arg_names = k_emb_args,
    .kernel = RM_K_EMBEDDING, .params_size = sizeof(emb_ctx), .fill_ctx = embedding_fill_ctx,
    .check = embedding_check, .infer = embedding_infer, .saves = {{RM_SAVE_INPUT, 1, 0}},
    .backward = embedding_backward, .backward_diff = embedding_backward_diff);

remat_status remat_embedding(remat_tensor **out, remat_tensor *weight, remat_tensor *indices) {
    emb_ctx params = {0, 0};
    remat_tensor *in[2] = {weight, indices};
    return rm_dispatch(&rm_op_embedding, out, in, &params, RM_OP_SITE());
}

/* ---- cross_entropy ------------------------------------------------------------------------ */
static const char *const k_ce_args[] = {"logits", "targets"};

static remat_status cross_entropy_check(const rm_op_call *c) {
    const char *call = c->op->name;
    remat_tensor *logits = c->in[0], *targets = c->in[1]; /* i64 (RM_OPF_INDEX_IN1) */
    char bl[200], bt[200];
    if (logits->ndim != 2 || targets->ndim != 1 || targets->shape[0] != logits->shape[0])
        return rm_err(REMAT_ESHAPE,
                      "%s: expected logits (N, C) and targets (N), got logits %s "
                      "and targets %s",
                      call, rm_tensor_str(logits, bl, sizeof bl),
                      rm_tensor_str(targets, bt, sizeof bt));
    return REMAT_OK;
}

/* The dtype of the loss and the logsumexp: the logits', f32 for bf16 logits under autocast
 * (its f32 category: the logits reach the kernel uncast, autocast_keep, where the cpu's bf16
 * kernel reads them; another device casts them first). */
static remat_dtype ce_out_dtype(const remat_tensor *logits) {
    if (logits->dtype == REMAT_BF16 && remat_autocast_enabled(logits->storage->device.type))
        return REMAT_F32;
    return logits->dtype;
}

/* the loss (0-dim) and the rows' logsumexp (N), a by-product for the backward */
static remat_status cross_entropy_infer(const rm_op_call *c, rm_out_spec *out) {
    out[0].ndim = 0;
    out[0].dtype = ce_out_dtype(c->in[0]);
    out[1].ndim = 1;
    out[1].shape[0] = c->in[0]->shape[0];
    out[1].dtype = out[0].dtype;
    return REMAT_OK;
}

/* saved: 0 = logits, 1 = targets, 2 = lse (N) */
static remat_status cross_entropy_backward(remat_node *node, remat_tensor *const *gout,
                                           remat_tensor **gin) {
    if (!node->next[0].node) return REMAT_OK;
    remat_tensor *sv[3] = {NULL, NULL, NULL};
    int rc = REMAT_OK;
    for (int i = 0; i < 3 && rc == REMAT_OK; i++)
        rc = rm_saved_contig(node, i, "saved tensors are missing", &sv[i]);
    remat_tensor *x = sv[0];
    if (!rc) rc = rm_new_output(&gin[0], x->ndim, x->shape, x->dtype, x->storage->device);
    if (!rc) {
        rm_kargs k = {.in = {x, sv[1], sv[2], gout[0]}, .out = {gin[0]}, .params = node->ctx};
        rc = rm_kernel_run(RM_K_CROSS_ENTROPY_BWD, node->name, &k);
    }
    for (int i = 0; i < 3; i++) rm_release(sv[i]);
    return rc;
}

/* w (N, C), x's dtype and device: 1 at each row's target, 0 elsewhere and on the rows
 * whose target is the ignore index — built on the device from the saved targets t (N, i64),
 * never read on the host: d = t - iota(C) in f64 (exact: targets are in [0, C), checked by
 * the forward's kernel) is 0 at the target; t - ignore is 0 on an ignored row. */
static remat_status target_weights(remat_tensor *t, const remat_tensor *x, int64_t ignore,
                                   remat_tensor **w) {
    const remat_device dev = x->storage->device;
    const int64_t n = x->shape[0], ncls = x->shape[1];
    remat_tensor *tf = NULL, *tcol = NULL, *ic = NULL, *icf = NULL, *irow = NULL, *iota = NULL,
                 *d = NULL, *ones = NULL, *hit = NULL, *kept = NULL, *zero = NULL;
    int rc = remat_to_dtype(&tf, t, REMAT_F64);
    if (!rc) rc = remat_reshape(&tcol, tf, 2, (const int64_t[]){n, 1});
    if (!rc) rc = remat_arange(&ic, ncls); /* on the host: a constant of the shape */
    if (!rc) rc = remat_to_dtype(&icf, ic, REMAT_F64);
    if (!rc) rc = remat_reshape(&irow, icf, 2, (const int64_t[]){1, ncls});
    if (!rc) rc = remat_to_device(&iota, irow, dev);
    if (!rc) rc = remat_sub(&d, tcol, iota);
    if (!rc) rc = remat_full(&ones, 2, x->shape, 1.0, x->dtype, dev);
    if (!rc) rc = remat_masked_fill(&hit, ones, d, 0.0);
    if (!rc) rc = remat_sub_scalar(&kept, tcol, (double)ignore);
    if (!rc) rc = remat_zeros(&zero, 0, NULL, x->dtype, dev);
    if (!rc) rc = remat_where(w, kept, hit, zero);
    rm_release(tf), rm_release(tcol), rm_release(ic), rm_release(icf);
    rm_release(irow), rm_release(iota), rm_release(d), rm_release(ones);
    rm_release(hit), rm_release(kept), rm_release(zero);
    return rc;
}

/* create_graph: the loss rebuilt from public ops, -sum(log_softmax(x) * w) / sum(w), where
 * w (target_weights) is 1 at each row's target and 0 on ignored rows: sum(w) counts the
 * rows not ignored (0: NaN, as PyTorch). Every step runs on x's device. */
static remat_status cross_entropy_recompose(remat_node *node, remat_tensor *const *xs,
                                            remat_tensor **y) {
    const rm_ce_params *p = node->ctx;
    remat_tensor *x = NULL, *t = NULL, *w = NULL, *count = NULL, *ls = NULL, *prod = NULL,
                 *sum = NULL, *mean = NULL, *lse = NULL;
    /* bf16 logits with an f32 loss (autocast's, read uncast): widened first, the graph the
     * cast then the f32 loss would have made */
    int rc = rm_saved_contig(node, 2, "the logsumexp was not saved", &lse);
    if (!rc)
        rc = lse->dtype != xs[0]->dtype ? remat_to_dtype(&x, xs[0], lse->dtype)
                                        : (x = rm_retain(xs[0]), REMAT_OK);
    rm_release(lse);
    if (!rc) rc = rm_saved_contig(node, 1, "targets were not saved", &t);
    if (!rc) rc = target_weights(t, x, p->ignore_index, &w);
    if (!rc) rc = remat_sum_all(&count, w);
    if (!rc) rc = remat_log_softmax(&ls, x, 1);
    if (!rc) rc = remat_mul(&prod, ls, w);
    if (!rc) rc = remat_sum_all(&sum, prod);
    if (!rc) rc = remat_div(&mean, sum, count);
    if (!rc) rc = remat_neg(y, mean);
    rm_release(x), rm_release(t), rm_release(w), rm_release(count), rm_release(ls);
    rm_release(prod), rm_release(sum), rm_release(mean);
    return rc;
}

static remat_status cross_entropy_backward_diff(remat_node *node, remat_tensor *const *gout,
                                                remat_tensor **gin) {
    static const int slots[1] = {0};
    return rm_backward_recompose(node, slots, cross_entropy_recompose, gout, gin);
}

const rm_op_desc rm_op_cross_entropy = RM_OP_DESC(
    "remat_cross_entropy", "CrossEntropyBackward", .n_in = 2, .no_grad_in = 2u, .n_out = 2,
    .n_ret = 1, .n_saved = 3, .flags = RM_OPF_FLOAT_IN0 | RM_OPF_INDEX_IN1 | RM_OPF_CONTIGUOUS,
    .arg_names = k_ce_args, .autocast = RM_AC_F32, .autocast_keep = 1u,
    .kernel = RM_K_CROSS_ENTROPY, .params_size = sizeof(rm_ce_params), .check = cross_entropy_check,
    .infer = cross_entropy_infer,
    .saves = {{RM_SAVE_INPUT, 0, 0}, {RM_SAVE_INPUT, 1, 0}, {RM_SAVE_OUTPUT, 1, 0}},
    .backward = cross_entropy_backward, .backward_diff = cross_entropy_backward_diff);

remat_status remat_cross_entropy(remat_tensor **out, remat_tensor *logits, remat_tensor *targets,
                                 int64_t ignore_index) {
    const rm_ce_params params = {ignore_index};
    remat_tensor *in[2] = {logits, targets};
    return rm_dispatch(&rm_op_cross_entropy, out, in, &params, RM_OP_SITE());
}

/* ---- mse_loss ------------------------------------------------------------------------------- */
static remat_status mse_check(const rm_op_call *c) {
    const remat_tensor *a = c->in[0], *b = c->in[1];
    bool same = a->ndim == b->ndim;
    for (int d = 0; same && d < a->ndim; d++) same = a->shape[d] == b->shape[d];
    if (!same) {
        char ba[200], bb[200];
        return rm_err(REMAT_ESHAPE,
                      "%s: a %s and b %s must have the same shape (no "
                      "broadcasting)",
                      c->op->name, rm_tensor_str(a, ba, sizeof ba),
                      rm_tensor_str(b, bb, sizeof bb));
    }
    return REMAT_OK;
}

static remat_status mse_infer(const rm_op_call *c, rm_out_spec *out) {
    out[0].ndim = 0;
    out[0].dtype = c->in[0]->dtype;
    return REMAT_OK;
}

/* saved: 0 = a, 1 = b */
static remat_status mse_backward(remat_node *node, remat_tensor *const *gout, remat_tensor **gin) {
    remat_tensor *sv[2] = {NULL, NULL}, *cv[2] = {NULL, NULL}, *da = NULL, *db = NULL;
    int rc = REMAT_OK;
    /* The usual loss (a prediction against a target that needs no gradient)
     * writes da over the saved prediction when nothing else holds it: the
     * pass then never holds both (the kernel is elementwise). */
    if (node->next[0].node && !node->next[1].node &&
        (da = rm_donation_take(node, NULL, RM_BUF_SAVED, 0, RM_K_MSE_BWD)))
        sv[0] = rm_retain(da);
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
    if (!rc) {
        rm_kargs k = {.in = {a, b, gout[0]}, .out = {da, db}};
        rc = rm_kernel_run(RM_K_MSE_BWD, node->name, &k);
    }
    if (rc) goto out;
    gin[0] = da;
    gin[1] = db;
    da = db = NULL;
out:
    for (int i = 0; i < 2; i++) {
        rm_release(sv[i]);
        rm_release(cv[i]);
    }
    rm_release(da);
    rm_release(db);
    return rc;
}

/* create_graph: da = g * 2 (a - b) / N, db = -da, with public ops. */
static remat_status mse_backward_diff(remat_node *node, remat_tensor *const *gout,
                                      remat_tensor **gin) {
    remat_tensor *a = NULL, *b = NULL, *d = NULL, *da = NULL;
    int rc = rm_node_unpack(node, 0, &a);
    if (!rc) rc = rm_node_unpack(node, 1, &b);
    if (!rc) rc = remat_sub(&d, a, b);
    if (!rc) rc = remat_mul(&da, d, gout[0]);
    rm_release_p(&d);
    if (!rc) rc = remat_mul_scalar(&d, da, 2.0 / (double)remat_numel(a));
    if (!rc && node->next[1].node) rc = remat_neg(&gin[1], d);
    if (!rc && node->next[0].node) gin[0] = rm_retain(d);
    rm_release(a), rm_release(b), rm_release(d), rm_release(da);
    return rc;
}

const rm_op_desc rm_op_mse_loss =
    RM_OP_DESC("remat_mse_loss", "MseLossBackward", .n_in = 2, .n_out = 1, .n_saved = 2,
               .flags = RM_OPF_FLOAT | RM_OPF_SAME_DTYPE | RM_OPF_SAME_DEVICE | RM_OPF_CONTIGUOUS,
               .autocast = RM_AC_F32, .kernel = RM_K_MSE, .check = mse_check, .infer = mse_infer,
               .saves = {{RM_SAVE_INPUT, 0, 0}, {RM_SAVE_INPUT, 1, 0}}, .backward = mse_backward,
               .backward_diff = mse_backward_diff);

remat_status remat_mse_loss(remat_tensor **out, remat_tensor *a, remat_tensor *b) {
    remat_tensor *in[2] = {a, b};
    return rm_dispatch(&rm_op_mse_loss, out, in, NULL, RM_OP_SITE());
}
