/* src/ops/attention.c — fused scaled dot-product attention: the
 * descriptor and the backward. The kernels (src/backends/cpu/attention.c
 * on the cpu) say how the work is cut into blocks.
 *
 *   out = softmax(scale · q·kᵀ, causal mask) · v        over the last two dims
 *
 * q is (..., Tq, D), k (..., Tk, D), v (..., Tk, Dv), out (..., Tq, Dv); the
 * leading dims ("batch": B·H for multi-head attention) are equal for all
 * three, but for dim -3 (the heads) of k and v, which may divide q's:
 * grouped-query (and multi-query) attention, where query head h reads kv
 * head h / (Hq / Hkv) through the kernels' batch offsets and k's and v's
 * gradients sum over their query group — the repeat is never made. The
 * causal mask is top-left aligned (torch's is_causal: row i sees keys
 * j <= i) for remat_attention, and may be bottom-right aligned (j <= i +
 * Tk - Tq, torch's causal_lower_right: a KV cache) through
 * remat_attention_causal. As FlashAttention, only the per-row log-sum-exp of the scores is
 * saved (besides q, k, v and out, after the kernel): backward recomputes
 * each block's probabilities from it instead of keeping the (Tq, Tk) matrix
 * alive between forward and backward, so the memory saved for backward is
 * O(Tq) per batch entry, not O(Tq·Tk). The lse is an output the caller
 * does not see (n_ret). q, k and v are saved as they are (views are
 * saved as views: no copies kept).
 *
 * Layout: for 4-D inputs (B, H, T, D) the output and the input gradients
 * are stored as (B, T, H, D), as PyTorch's CPU flash kernel does:
 * transposing dims 1 and 2 back then gives a contiguous (B, T, H·D) without
 * a copy. */
#include <math.h>
#include <string.h>

#include "op.h"

/* A new tensor of `shape` (ndim dims). 4-D shapes (B, H, T, C) are stored
 * as (B, T, H, C) — see the file comment. */
static remat_status new_attn_tensor(remat_tensor **out, int ndim, const int64_t *shape,
                                    remat_dtype dtype, remat_device device) {
    if (ndim != 4) return rm_new_output(out, ndim, shape, dtype, device);
    int64_t st[4] = {shape[0], shape[2], shape[1], shape[3]};
    int rc = rm_new_output(out, 4, st, dtype, device);
    if (rc) return rc;
    remat_tensor *t = *out; /* fresh and not handed out yet: relabel dims 1 and 2 */
    int64_t s1 = t->strides[1];
    t->shape[1] = shape[1];
    t->shape[2] = shape[2];
    t->strides[1] = t->strides[2];
    t->strides[2] = s1;
    return REMAT_OK;
}

enum { SAVED_Q, SAVED_K, SAVED_V, SAVED_OUT, SAVED_LSE, N_SAVED };

/* The node's ctx is the params with the scale resolved (never 0). */
static void att_fill_ctx(const rm_op_call *c, void *ctx) {
    rm_attention_params *p = ctx;
    const remat_tensor *q = c->in[0];
    p->scale = rm_attention_scale(p, q->shape[q->ndim - 1]);
}

static remat_status attention_backward(remat_node *node, remat_tensor *const *gout,
                                       remat_tensor **gin) {
    bool want[3];
    for (int i = 0; i < 3; i++) want[i] = node->next[i].node != NULL;
    if (!want[0] && !want[1] && !want[2]) return REMAT_OK;
    remat_tensor *sv[N_SAVED] = {NULL}, *g[3] = {NULL};
    int rc = REMAT_OK;
    for (int i = 0; i < N_SAVED && !rc; i++) {
        rc = rm_node_unpack(node, i, &sv[i]);
        if (!rc && !sv[i])
            rc = rm_err(REMAT_ESTATE, "%s: saved tensor %d was not saved", node->name, i);
    }
    /* the gradient arrives from outside the op: the kernel runs on q's device */
    if (!rc) rc = rm_check_same_device(node->name, sv[SAVED_Q], gout[0]);
    const remat_tensor *q = sv[SAVED_Q];
    /* q, k and v cut from one projection (a GPT's qkv): their gradients the same pieces of one
     * buffer, which the split's backward then takes whole (grad_layout.c) */
    bool shared = false;
    if (!rc && want[0] && want[1] && want[2])
        rc = rm_new_grads_like_pieces(g, 3, sv, q->dtype, q->storage->device, &shared);
    for (int i = 0; i < 3 && !rc && !shared; i++)
        if (want[i])
            rc = new_attn_tensor(&g[i], sv[i]->ndim, sv[i]->shape, q->dtype, q->storage->device);
    if (rc) goto out;
    rm_kargs k = {
        .in = {sv[SAVED_Q], sv[SAVED_K], sv[SAVED_V], sv[SAVED_OUT], gout[0], sv[SAVED_LSE]},
        .out = {g[0], g[1], g[2]},
        .params = node->ctx};
    rc = rm_kernel_run(RM_K_ATTENTION_BWD, node->name, &k);
    if (rc) goto out;
    for (int i = 0; i < 3; i++) {
        gin[i] = g[i];
        g[i] = NULL;
    }
out:
    for (int i = 0; i < N_SAVED; i++) rm_release(sv[i]);
    for (int i = 0; i < 3; i++) rm_release(g[i]);
    return rc;
}

/* ---- forward ------------------------------------------------------------------------------ */

/* After the flags' float checks of q, k and v (in that order, as before). */
static remat_status att_check(const rm_op_call *c) {
    const char *call = c->op->name;
    remat_tensor *q = c->in[0], *k = c->in[1], *v = c->in[2];
    const double scale = ((const rm_attention_params *)c->params)->scale;
    int rc;
    if ((rc = rm_check_same_dtype(call, q, k)) || (rc = rm_check_same_dtype(call, q, v)) ||
        (rc = rm_check_same_device(call, q, k)) || (rc = rm_check_same_device(call, q, v)))
        return rc;
    char bq[160], bk[160], bv[160];
    rm_tensor_str(q, bq, sizeof bq);
    rm_tensor_str(k, bk, sizeof bk);
    rm_tensor_str(v, bv, sizeof bv);
    if (q->ndim < 2 || k->ndim != q->ndim || v->ndim != q->ndim)
        return rm_err(REMAT_ESHAPE,
                      "%s: q, k and v must have the same number of dims (at "
                      "least 2: (..., T, D)), got q %s, k %s, v %s",
                      call, bq, bk, bv);
    int n = q->ndim;
    for (int i = 0; i < n - 2; i++) {
        if (i == n - 3 && (k->shape[i] != q->shape[i] || v->shape[i] != q->shape[i])) {
            /* grouped-query heads: dim -3 of k and v divides q's */
            if (k->shape[i] != v->shape[i])
                return rm_err(REMAT_ESHAPE,
                              "%s: the leading (batch) dims of q, k and v must be equal, but for "
                              "dim -3 (heads), where k and v must have the same number of heads, "
                              "a divisor of q's (grouped-query attention); got q %s, k %s, v %s",
                              call, bq, bk, bv);
            if (k->shape[i] == 0 ? q->shape[i] != 0 : q->shape[i] % k->shape[i] != 0)
                return rm_err(REMAT_ESHAPE,
                              "%s: the leading (batch) dims of q, k and v must be equal, but for "
                              "dim -3 (heads), where q's (%lld) must be a multiple of k's and v's "
                              "(%lld) for grouped-query attention; got q %s, k %s, v %s",
                              call, (long long)q->shape[i], (long long)k->shape[i], bq, bk, bv);
            continue;
        }
        if (k->shape[i] != q->shape[i] || v->shape[i] != q->shape[i])
            return rm_err(REMAT_ESHAPE,
                          "%s: the leading (batch) dims of q, k and v must be "
                          "equal, got q %s, k %s, v %s (dim %d differs)",
                          call, bq, bk, bv, i);
    }
    if (k->shape[n - 1] != q->shape[n - 1])
        return rm_err(REMAT_ESHAPE,
                      "%s: q and k must have the same last dim (D), got q %s and "
                      "k %s",
                      call, bq, bk);
    if (v->shape[n - 2] != k->shape[n - 2])
        return rm_err(REMAT_ESHAPE,
                      "%s: k and v must have the same number of keys (dim -2), "
                      "got k %s and v %s",
                      call, bk, bv);
    if (!isfinite(scale))
        return rm_err(REMAT_EINVAL, "%s: scale must be finite (0 selects 1/sqrt(D)), got %g", call,
                      scale);
    return REMAT_OK;
}

/* out (..., Tq, Dv) and the lse (..., Tq) */
static remat_status att_infer(const rm_op_call *c, rm_out_spec *out) {
    const remat_tensor *q = c->in[0];
    int n = q->ndim;
    out[0].ndim = n;
    memcpy(out[0].shape, q->shape, sizeof(int64_t) * (size_t)n);
    out[0].shape[n - 1] = c->in[2]->shape[n - 1];
    out[1].ndim = n - 1;
    memcpy(out[1].shape, q->shape, sizeof(int64_t) * (size_t)(n - 1));
    out[0].dtype = q->dtype;
    out[1].dtype = q->dtype == REMAT_BF16 ? REMAT_F32 : q->dtype; /* bf16 q: the lse stays f32 */
    return REMAT_OK;
}

static remat_status att_new_output(const rm_op_call *c, int i, const rm_out_spec *s,
                                   remat_device device, remat_tensor **out) {
    RM_UNUSED(c);
    return i == 0 ? new_attn_tensor(out, s->ndim, s->shape, s->dtype, device)
                  : rm_new_output(out, s->ndim, s->shape, s->dtype, device);
}

/* M (tq, tk) of dtype on `dev`: -inf where key j > i + off, 0 elsewhere. A constant of the
 * shapes: written on the host, then copied to the device. */
static remat_status causal_mask(int64_t tq, int64_t tk, int64_t off, remat_dtype dtype,
                                remat_device dev, remat_tensor **out) {
    remat_tensor *m = NULL;
    int rc = remat_zeros(&m, 2, (const int64_t[]){tq, tk}, REMAT_F64, REMAT_DEVICE_CPU);
    if (rc) return rc;
    double *mp = rm_ptr(m);
    for (int64_t i = 0; i < tq; i++)
        for (int64_t j = i + off + 1 < 0 ? 0 : i + off + 1; j < tk; j++) mp[i * tk + j] = -INFINITY;
    remat_tensor *c = NULL;
    rc = dtype == REMAT_F64 ? REMAT_OK : remat_to_dtype(&c, m, dtype);
    if (!rc) rc = remat_to_device(out, c ? c : m, dev);
    rm_release(m), rm_release(c);
    return rc;
}

/* Grouped-query heads for the recomposition: q (..., Hkv·G, T, D) as (..., Hkv, G, T, D)
 * (*qg) and k or v (..., Hkv, Tk, C) as (..., Hkv, 1, Tk, C) (*kg), so that matmul
 * broadcasts each kv head over its G query heads. */
static remat_status split_heads(remat_tensor *t, int64_t g, bool query, remat_tensor **out) {
    int n = t->ndim;
    if (!query) return remat_unsqueeze(out, t, n - 2);
    int64_t sh[REMAT_MAX_DIMS];
    for (int i = 0, j = 0; i < n; i++) {
        if (i == n - 3) {
            sh[j++] = t->shape[i] / g;
            sh[j++] = g;
        } else {
            sh[j++] = t->shape[i];
        }
    }
    return remat_reshape(out, t, n + 1, sh);
}

/* create_graph: attention rebuilt from public ops, softmax(q k^T scale + M) v,
 * M the causal mask when causal, on q's device; grouped-query heads broadcast
 * over their group (split_heads), never repeated. */
static remat_status attention_recompose(remat_node *node, remat_tensor *const *xs,
                                        remat_tensor **y) {
    const rm_attention_params *p = node->ctx;
    remat_tensor *q = xs[0], *k = xs[1], *v = xs[2];
    const int n = q->ndim;
    const int64_t g =
        n >= 3 && k->shape[n - 3] != q->shape[n - 3] ? q->shape[n - 3] / k->shape[n - 3] : 1;
    remat_tensor *qg = NULL, *kg = NULL, *vg = NULL, *kt = NULL, *s = NULL, *m = NULL, *t = NULL;
    remat_tensor *pr = NULL, *yg = NULL;
    int rc = REMAT_OK;
    if (g > 1) {
        rc = split_heads(q, g, true, &qg);
        if (!rc) rc = split_heads(k, g, false, &kg);
        if (!rc) rc = split_heads(v, g, false, &vg);
    } else {
        qg = rm_retain(q), kg = rm_retain(k), vg = rm_retain(v);
    }
    if (!rc) rc = remat_transpose(&kt, kg, -2, -1);
    if (!rc) rc = remat_matmul(&t, qg, kt);
    if (!rc) rc = remat_mul_scalar(&s, t, p->scale);
    rm_release_p(&t);
    if (!rc && p->causal) {
        const int64_t tq = q->shape[n - 2], tk = k->shape[n - 2];
        rc = causal_mask(tq, tk, p->lower_right ? tk - tq : 0, q->dtype, q->storage->device, &m);
        if (!rc) rc = remat_add(&t, s, m);
        if (!rc) rm_release(s), s = t, t = NULL;
    }
    if (!rc) rc = remat_softmax(&pr, s, -1);
    if (!rc) rc = remat_matmul(g > 1 ? &yg : y, pr, vg);
    if (!rc && g > 1) {
        int64_t sh[REMAT_MAX_DIMS];
        memcpy(sh, q->shape, sizeof(int64_t) * (size_t)n);
        sh[n - 1] = v->shape[n - 1];
        rc = remat_reshape(y, yg, n, sh);
    }
    rm_release(qg), rm_release(kg), rm_release(vg), rm_release(kt);
    rm_release(s), rm_release(m), rm_release(t), rm_release(pr), rm_release(yg);
    return rc;
}

static remat_status attention_backward_diff(remat_node *node, remat_tensor *const *gout,
                                            remat_tensor **gin) {
    static const int slots[3] = {SAVED_Q, SAVED_K, SAVED_V};
    return rm_backward_recompose(node, slots, attention_recompose, gout, gin);
}

static const char *const k_att_args[] = {"q", "k", "v"};

const rm_op_desc rm_op_attention = RM_OP_DESC(
    "remat_attention", "AttentionBackward", .n_in = 3, .n_out = 2, .n_ret = 1, .n_saved = N_SAVED,
    .flags = RM_OPF_FLOAT, .arg_names = k_att_args, .autocast = RM_AC_LOWER,
    .kernel = RM_K_ATTENTION, .params_size = sizeof(rm_attention_params), .fill_ctx = att_fill_ctx,
    .check = att_check, .infer = att_infer, .new_output = att_new_output,
    .saves = {{RM_SAVE_INPUT, 0, 0},
              {RM_SAVE_INPUT, 1, 0},
              {RM_SAVE_INPUT, 2, 0},
              {RM_SAVE_OUTPUT, 0, 0},
              {RM_SAVE_OUTPUT, 1, 0}},
    .backward = attention_backward, .backward_diff = attention_backward_diff);

remat_status remat_attention(remat_tensor **out, remat_tensor *q, remat_tensor *k, remat_tensor *v,
                             bool causal, double scale) {
    const rm_attention_params p = {.causal = causal, .scale = scale};
    remat_tensor *in[3] = {q, k, v};
    return rm_dispatch(&rm_op_attention, out, in, &p, RM_OP_SITE());
}

remat_status remat_attention_causal(remat_tensor **out, remat_tensor *q, remat_tensor *k,
                                    remat_tensor *v, remat_causal_variant variant, double scale) {
    if (variant != REMAT_CAUSAL_UPPER_LEFT && variant != REMAT_CAUSAL_LOWER_RIGHT) {
        if (out) *out = NULL;
        return rm_err(REMAT_EINVAL,
                      "remat_attention_causal: variant must be REMAT_CAUSAL_UPPER_LEFT or "
                      "REMAT_CAUSAL_LOWER_RIGHT, got %d",
                      (int)variant);
    }
    const rm_attention_params p = {
        .causal = true, .lower_right = variant == REMAT_CAUSAL_LOWER_RIGHT, .scale = scale};
    remat_tensor *in[3] = {q, k, v};
    return rm_dispatch(&rm_op_attention, out, in, &p, RM_OP_SITE());
}
