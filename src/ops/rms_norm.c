/* src/ops/rms_norm.c — rms_norm: the descriptor over the rms_norm kernels
 * (src/backends/cpu/rms_norm.c on the cpu, which describes the maths).
 *
 *   y = x · rsqrt(mean(x²) + eps) · weight      over the last n_norm dims
 *
 * as torch.nn.functional.rms_norm and Llama's RMSNorm. The node saves x,
 * the weight and the per-row rstd the kernel writes as a by-product (f32
 * for a bf16 x, as attention's lse). Under autocast it is in the f32
 * category with layer_norm (Hugging Face's LlamaRMSNorm computes in f32
 * whatever its input). */
#include <math.h>
#include <string.h>

#include "op.h"
#include "ops_internal.h"

typedef struct rms_params {
    rm_layer_norm_params k;             /* first: the kernels read it (n_norm, eps) */
    int64_t norm_shape[REMAT_MAX_DIMS]; /* the weight's shape and its gradient's (fill_ctx) */
    bool to_bf16;    /* y rounded to bf16 as it is written (remat_rms_norm_to; an f32 x) */
    remat_dtype xdt; /* x's (fill_ctx) */
} rms_params;

static const char *const k_rms_args[] = {"x", "weight"};

remat_status rm_check_norm_params(const char *call, const remat_tensor *x, int n_norm, double eps) {
    if (n_norm < 1 || n_norm > x->ndim) {
        char b[200];
        return rm_err(REMAT_EINVAL, "%s: n_norm %d out of range for x %s (expected 1 to %d)", call,
                      n_norm, rm_tensor_str(x, b, sizeof b), x->ndim);
    }
    if (!(eps >= 0) || isinf(eps))
        return rm_err(REMAT_EINVAL, "%s: eps must be finite and >= 0, got %g", call, eps);
    return REMAT_OK;
}

static remat_status rms_check(const rm_op_call *c) {
    const char *call = c->op->name;
    const rms_params *p = c->params;
    remat_tensor *x = c->in[0], *w = c->in[1];
    const int n_norm = p->k.n_norm;
    int rc = rm_check_norm_params(call, x, n_norm, p->k.eps);
    if (!rc && p->to_bf16 && x->dtype != REMAT_F32)
        rc = rm_err(REMAT_EDTYPE, "%s: a bf16 output needs an f32 x, got %s", call,
                    remat_dtype_name(x->dtype));
    if (rc || !w) return rc;
    if ((rc = rm_check_same_dtype(call, x, w)) || (rc = rm_check_same_device(call, x, w)))
        return rc;
    bool ok = w->ndim == n_norm;
    for (int d = 0; ok && d < n_norm; d++) ok = w->shape[d] == x->shape[x->ndim - n_norm + d];
    if (!ok) {
        char bw[200], bx[200], bn[160];
        return rm_err(REMAT_ESHAPE,
                      "%s: weight %s must have the normalised shape %s (last %d dims of x %s)",
                      call, rm_tensor_str(w, bw, sizeof bw),
                      rm_shape_str(n_norm, x->shape + x->ndim - n_norm, bn, sizeof bn), n_norm,
                      rm_tensor_str(x, bx, sizeof bx));
    }
    return REMAT_OK;
}

/* y like x; rstd over x's leading dims (f32 for bf16 x) */
static remat_status rms_infer(const rm_op_call *c, rm_out_spec *out) {
    const rms_params *p = c->params;
    const remat_tensor *x = c->in[0];
    out[0].ndim = x->ndim;
    memcpy(out[0].shape, x->shape, sizeof out[0].shape);
    out[0].dtype = p->to_bf16 ? REMAT_BF16 : x->dtype;
    out[1].ndim = x->ndim - p->k.n_norm;
    memcpy(out[1].shape, x->shape, sizeof(int64_t) * (size_t)out[1].ndim);
    out[1].dtype = x->dtype == REMAT_BF16 ? REMAT_F32 : x->dtype;
    return REMAT_OK;
}

static void rms_fill_ctx(const rm_op_call *c, void *ctx) {
    rms_params *p = ctx;
    const remat_tensor *x = c->in[0];
    memcpy(p->norm_shape, x->shape + x->ndim - p->k.n_norm, sizeof(int64_t) * (size_t)p->k.n_norm);
    p->xdt = x->dtype;
}

enum { SAVED_X, SAVED_W, SAVED_RSTD, N_SAVED };

/* one kernel: dx and dw (each only when wanted) from g, x, w, rstd; g is bf16 for
 * remat_rms_norm_to's bf16 y (the kernel widens it as the cast's backward would) */
static remat_status rms_backward(remat_node *node, remat_tensor *const *gout, remat_tensor **gin) {
    const rms_params *p = node->ctx;
    bool want_x = node->next[0].node != NULL, want_w = node->next[1].node != NULL;
    if (!want_x && !want_w) return REMAT_OK;
    remat_tensor *sv[N_SAVED] = {NULL}, *g = NULL, *dx = NULL, *dw = NULL;
    int rc = REMAT_OK;
    for (int i = 0; i < N_SAVED && rc == REMAT_OK; i++) /* the weight may be absent */
        rc = rm_saved_contig(node, i, i == SAVED_W ? NULL : "saved tensors are missing", &sv[i]);
    if (!rc) rc = rm_contig(&g, gout[0]);
    if (rc) goto out;
    remat_tensor *x = sv[SAVED_X], *w = sv[SAVED_W];
    remat_device dev = x->storage->device;
    if (want_x) rc = rm_new_output(&dx, x->ndim, x->shape, x->dtype, dev);
    if (!rc && want_w && w) rc = rm_new_output(&dw, p->k.n_norm, p->norm_shape, x->dtype, dev);
    if (!rc) {
        rm_kargs k = {.in = {g, x, w, sv[SAVED_RSTD]}, .out = {dx, dw}, .params = &p->k};
        rc = rm_kernel_run(RM_K_RMS_NORM_BWD, node->name, &k);
    }
    if (!rc) gin[0] = dx, gin[1] = dw, dx = dw = NULL;
out:
    for (int i = 0; i < N_SAVED; i++) rm_release(sv[i]);
    rm_release(g), rm_release(dx), rm_release(dw);
    return rc;
}

/* create_graph: x (mean(x²) + eps)^-1/2 · w over the last n_norm dims,
 * from public ops (ops_internal.h). */
remat_status rm_rms_scale(remat_tensor **y, remat_tensor *x, int n_norm, double eps,
                          remat_tensor *w) {
    remat_tensor *sq = NULL, *ms = NULL, *t = NULL, *r = NULL, *cur = NULL;
    int dims[REMAT_MAX_DIMS];
    for (int i = 0; i < n_norm; i++) dims[i] = x->ndim - n_norm + i;
    int rc = remat_mul(&sq, x, x);
    if (!rc) rc = remat_mean(&ms, sq, n_norm, dims, true);
    if (!rc) rc = remat_add_scalar(&t, ms, eps);
    if (!rc) rc = remat_pow_scalar(&r, t, -0.5);
    if (!rc) rc = remat_mul(&cur, x, r);
    if (!rc && w) {
        remat_tensor *nx = NULL;
        rc = remat_mul(&nx, cur, w);
        rm_release(cur);
        cur = nx;
    }
    rm_release(sq), rm_release(ms), rm_release(t), rm_release(r);
    if (rc) rm_release_p(&cur);
    *y = cur;
    return rc;
}

/* create_graph: rms_norm rebuilt from public ops */
static remat_status rms_recompose(remat_node *node, remat_tensor *const *xs, remat_tensor **y) {
    const rms_params *p = node->ctx;
    return rm_rms_scale(y, xs[0], p->k.n_norm, p->k.eps, xs[1]);
}

/* create_graph: y in x's dtype rebuilt, its gradient widened first when y is bf16 (as the
 * cast's node would) */
static remat_status rms_backward_diff(remat_node *node, remat_tensor *const *gout,
                                      remat_tensor **gin) {
    static const int slots[2] = {SAVED_X, SAVED_W};
    const rms_params *p = node->ctx;
    remat_tensor *g = NULL;
    int rc = rm_norm_grad_as_x(&g, gout[0], p->xdt);
    if (!rc) rc = rm_backward_recompose(node, slots, rms_recompose, &g, gin);
    rm_release(g);
    return rc;
}

/* Outputs: y (handed out) and rstd (saved). */
const rm_op_desc rm_op_rms_norm = RM_OP_DESC(
    "remat_rms_norm", "RmsNormBackward", .n_in = 2, .n_out = 2, .n_ret = 1, .n_saved = N_SAVED,
    .optional_in = 2u, .flags = RM_OPF_FLOAT | RM_OPF_CONTIGUOUS, .autocast = RM_AC_F32,
    .arg_names = k_rms_args, .kernel = RM_K_RMS_NORM, .params_size = sizeof(rms_params),
    .fill_ctx = rms_fill_ctx, .check = rms_check, .infer = rms_infer,
    .saves = {{RM_SAVE_INPUT, 0, 0}, {RM_SAVE_INPUT, 1, 0}, {RM_SAVE_OUTPUT, 1, 0}},
    .backward = rms_backward, .backward_diff = rms_backward_diff);

remat_status remat_rms_norm(remat_tensor **out, remat_tensor *x, int n_norm, remat_tensor *weight,
                            double eps) {
    const rms_params params = {.k = {n_norm, eps}};
    remat_tensor *in[2] = {x, weight};
    return rm_dispatch(&rm_op_rms_norm, out, in, &params, RM_OP_SITE());
}

remat_status remat_rms_norm_to(remat_tensor **out, remat_tensor *x, int n_norm,
                               remat_tensor *weight, double eps, remat_dtype dtype) {
    const char *call = "remat_rms_norm_to";
    if (!out) return rm_err(REMAT_EINVAL, "%s: out must not be NULL", call);
    *out = NULL;
    const int fused = rm_norm_fused_to(call, RM_K_RMS_NORM, x, dtype);
    if (fused < 0) return REMAT_EDTYPE;
    if (!fused) {
        int rc = remat_rms_norm(out, x, n_norm, weight, eps);
        return rc ? rc : rm_norm_round_output(out, dtype);
    }
    const rms_params params = {.k = {n_norm, eps}, .to_bf16 = true};
    remat_tensor *in[2] = {x, weight};
    return rm_dispatch(&rm_op_rms_norm, out, in, &params, RM_OP_SITE());
}
