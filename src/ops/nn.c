/* src/ops/nn.c — softmax, log_softmax, layer_norm and dropout: descriptors
 * over the nn kernels (src/backends/cpu/nn.c on the cpu, which describes
 * the maths, the vectorised rows and the thread-count independent sums).
 *
 * softmax and log_softmax save their output; layer_norm saves x, weight
 * and the per-row mean and rstd its kernel writes as by-products.
 *
 * dropout draws its Philox offset from the generator of x's device in its
 * check, before the driver makes outputs: the draw happens in skip mode
 * too, so the generator advances exactly as in a real run and a
 * recomputation after an RNG-state restore reproduces the mask bitwise.
 * Eval mode and p == 0 return x itself (RM_OUT_INPUT: a new reference, as
 * PyTorch returns its input); p == 1 zeroes everything without drawing. The mask
 * kept for backward is one bit per element (made only when a node is
 * recorded), plus p in the node's context.
 *
 * The public functions hand the driver a writable parameter struct: the
 * op's check completes it (the normalised dim, the draw) once the
 * arguments are known to be valid. */
#include <math.h>
#include <string.h>

#include "op.h"
#include "ops_internal.h"
#include "remat/autograd.h"

/* ---- softmax / log_softmax ---------------------------------------------------------------- */
typedef struct softmax_params {
    rm_softmax_params k; /* first: the kernels read it (normalised dim, log) */
    int dim;             /* the call's */
} softmax_params;

static remat_status softmax_check(const rm_op_call *c) {
    softmax_params *p = (softmax_params *)c->params; /* writable: see the top of the file */
    return rm_norm_dim(c->op->name, p->dim, c->in[0]->ndim, &p->k.dim);
}

/* saved: 0 = output y */
static remat_status softmax_backward(remat_node *node, remat_tensor *const *gout,
                                     remat_tensor **gin) {
    const softmax_params *p = node->ctx;
    return rm_backward_kernel(node, gout, gin, RM_K_SOFTMAX_BWD, 0, "output was not saved", 0, NULL,
                              &p->k);
}

/* create_graph: softmax dx = y (g - sum(g y)); log_softmax dx = g - exp(y) sum(g),
 * sums over dim, kept; public ops on g and the saved y. */
static remat_status softmax_backward_diff(remat_node *node, remat_tensor *const *gout,
                                          remat_tensor **gin) {
    const softmax_params *p = node->ctx;
    if (!node->next[0].node) return REMAT_OK;
    remat_tensor *y = NULL, *g = gout[0], *t = NULL, *s = NULL, *u = NULL;
    const int dim = p->k.dim;
    int rc = rm_node_unpack(node, 0, &y);
    if (rc) return rc;
    if (p->k.log) {
        rc = remat_sum(&s, g, 1, &dim, true);
        if (!rc) rc = remat_exp(&t, y);
        if (!rc) rc = remat_mul(&u, t, s);
        if (!rc) rc = remat_sub(&gin[0], g, u);
    } else {
        rc = remat_mul(&t, g, y);
        if (!rc) rc = remat_sum(&s, t, 1, &dim, true);
        if (!rc) rc = remat_sub(&u, g, s);
        if (!rc) rc = remat_mul(&gin[0], y, u);
    }
    rm_release(y), rm_release(t), rm_release(s), rm_release(u);
    return rc;
}

#define SOFTMAX_OP(sym, call, node)                                                                \
    const rm_op_desc sym =                                                                         \
        RM_OP_DESC(call, node, .n_in = 1, .n_out = 1, .n_saved = 1,                                \
                   .flags = RM_OPF_FLOAT | RM_OPF_CONTIGUOUS, .kernel = RM_K_SOFTMAX,              \
                   .autocast = RM_AC_F32, .params_size = sizeof(softmax_params),                   \
                   .check = softmax_check, .saves = {{RM_SAVE_OUTPUT, 0, 0}},                      \
                   .backward = softmax_backward, .backward_diff = softmax_backward_diff)
SOFTMAX_OP(rm_op_softmax, "remat_softmax", "SoftmaxBackward");
SOFTMAX_OP(rm_op_log_softmax, "remat_log_softmax", "LogSoftmaxBackward");

static remat_status softmax(const rm_op_desc *d, bool log_out, remat_tensor **out, remat_tensor *a,
                            int dim, void *site) {
    softmax_params p = {.k = {.log = log_out}, .dim = dim};
    remat_tensor *in[1] = {a};
    return rm_dispatch(d, out, in, &p, site);
}

remat_status remat_softmax(remat_tensor **out, remat_tensor *a, int dim) {
    return softmax(&rm_op_softmax, false, out, a, dim, RM_OP_SITE());
}
remat_status remat_log_softmax(remat_tensor **out, remat_tensor *a, int dim) {
    return softmax(&rm_op_log_softmax, true, out, a, dim, RM_OP_SITE());
}

/* ---- layer_norm ------------------------------------------------------------------------- */
typedef struct ln_params {
    rm_layer_norm_params k;             /* first: the kernels read it (n_norm, eps) */
    int64_t norm_shape[REMAT_MAX_DIMS]; /* shape of weight, bias and their grads (fill_ctx) */
    bool to_bf16;    /* y rounded to bf16 as it is written (remat_layer_norm_to; an f32 x) */
    remat_dtype xdt; /* x's (fill_ctx) */
} ln_params;

static const char *const k_ln_args[] = {"x", "weight", "bias"};

static remat_status check_param(const char *call, const char *arg, remat_tensor *p, remat_tensor *x,
                                int n_norm) {
    int rc = rm_check_float_dtype(call, arg, p);
    if (rc) return rc;
    rc = rm_check_same_dtype(call, x, p);
    if (rc) return rc;
    rc = rm_check_same_device(call, x, p);
    if (rc) return rc;
    bool ok = p->ndim == n_norm;
    for (int d = 0; ok && d < n_norm; d++) ok = p->shape[d] == x->shape[x->ndim - n_norm + d];
    if (!ok) {
        char bp[200], bx[200], bn[160];
        return rm_err(REMAT_ESHAPE,
                      "%s: %s %s must have the normalised shape %s (last %d dims of x %s)", call,
                      arg, rm_tensor_str(p, bp, sizeof bp),
                      rm_shape_str(n_norm, x->shape + x->ndim - n_norm, bn, sizeof bn), n_norm,
                      rm_tensor_str(x, bx, sizeof bx));
    }
    return REMAT_OK;
}

/* All of layer_norm's checks, in their order before the driver (the driver
 * only rejects a NULL x first, with the same message). */
static remat_status layer_norm_check(const rm_op_call *c) {
    const char *call = c->op->name;
    const ln_params *p = c->params;
    remat_tensor *x = c->in[0], *weight = c->in[1], *bias = c->in[2];
    const int n_norm = p->k.n_norm;
    int rc = rm_check_float_dtype(call, "x", x);
    if (!rc) rc = rm_check_norm_params(call, x, n_norm, p->k.eps);
    if (rc) return rc;
    if (p->to_bf16 && x->dtype != REMAT_F32)
        return rm_err(REMAT_EDTYPE, "%s: a bf16 output needs an f32 x, got %s", call,
                      remat_dtype_name(x->dtype));
    if (weight && (rc = check_param(call, "weight", weight, x, n_norm))) return rc;
    if (bias && (rc = check_param(call, "bias", bias, x, n_norm))) return rc;
    return REMAT_OK;
}

/* y like x; the rows' mean and rstd (x's leading dims), by-products for the backward */
static remat_status layer_norm_infer(const rm_op_call *c, rm_out_spec *out) {
    const ln_params *p = c->params;
    const remat_tensor *x = c->in[0];
    const int lead = x->ndim - p->k.n_norm;
    out[0].ndim = x->ndim;
    memcpy(out[0].shape, x->shape, sizeof out[0].shape);
    out[0].dtype = p->to_bf16 ? REMAT_BF16 : x->dtype;
    out[1].ndim = lead;
    memcpy(out[1].shape, x->shape, sizeof(int64_t) * (size_t)lead);
    out[1].dtype = x->dtype;
    out[2] = out[1];
    return REMAT_OK;
}

/* The gradient of y in x's dtype: a bf16 y's gradient widened (what the backward of
 * remat_to_dtype does, the same ops on the graph under create_graph), else g itself. */
remat_status rm_norm_grad_as_x(remat_tensor **out, remat_tensor *g, remat_dtype xdt) {
    if (g->dtype == xdt) {
        *out = rm_retain(g);
        return REMAT_OK;
    }
    return remat_to_dtype(out, g, xdt);
}

/* create_graph: a bias's gradient, y's gradient g summed over the leading dims (all but
 * the last n_norm). */
static remat_status bias_grad(remat_tensor **out, remat_tensor *g, int n_norm) {
    int dims[REMAT_MAX_DIMS], lead = g->ndim - n_norm;
    for (int i = 0; i < lead; i++) dims[i] = i;
    return lead ? remat_sum(out, g, lead, dims, false) : remat_contiguous(out, g);
}

static void layer_norm_fill_ctx(const rm_op_call *c, void *ctx) {
    ln_params *p = ctx;
    const remat_tensor *x = c->in[0];
    memcpy(p->norm_shape, x->shape + x->ndim - p->k.n_norm, sizeof(int64_t) * (size_t)p->k.n_norm);
    p->xdt = x->dtype;
}

/* saved: 0 = x, 1 = weight (or NULL), 2 = mean (N), 3 = rstd (N) */
static remat_status layer_norm_backward(remat_node *node, remat_tensor *const *gout,
                                        remat_tensor **gin) {
    const ln_params *p = node->ctx;
    const int n_norm = p->k.n_norm;
    remat_tensor *sv[4] = {NULL, NULL, NULL, NULL}, *g = NULL;
    int rc = REMAT_OK;
    for (int i = 0; i < 4 && rc == REMAT_OK; i++) /* the weight (1) may be absent */
        rc = rm_saved_contig(node, i, i == 1 ? NULL : "saved tensors are missing", &sv[i]);
    if (!rc) rc = rm_contig(&g, gout[0]);
    if (rc) goto out;
    remat_tensor *x = sv[0], *w = sv[1];
    remat_device dev = x->storage->device;
    if (node->next[0].node) rc = rm_new_output(&gin[0], x->ndim, x->shape, x->dtype, dev);
    /* inputs are (x, weight, bias): the node always has 3 edges */
    if (!rc && node->next[1].node && w)
        rc = rm_new_output(&gin[1], n_norm, p->norm_shape, x->dtype, dev);
    if (!rc && node->next[2].node)
        rc = rm_new_output(&gin[2], n_norm, p->norm_shape, x->dtype, dev);
    if (!rc) {
        rm_kargs k = {
            .in = {g, x, w, sv[2], sv[3]}, .out = {gin[0], gin[1], gin[2]}, .params = &p->k};
        rc = rm_kernel_run(RM_K_LAYER_NORM_BWD, node->name, &k);
    }
out:
    for (int i = 0; i < 4; i++) rm_release(sv[i]);
    rm_release(g);
    return rc;
}

/* create_graph: layer_norm rebuilt from public ops (xs: x, weight, bias):
 * xc = x - mean(x), y = xc (mean(xc^2) + eps)^-1/2 * w over the last n_norm
 * dims (rm_rms_scale). The bias is not saved: its gradient is a sum of g,
 * which needs no input. */
static remat_status layer_norm_recompose(remat_node *node, remat_tensor *const *xs,
                                         remat_tensor **y) {
    const ln_params *p = node->ctx;
    remat_tensor *x = xs[0], *mu = NULL, *xc = NULL;
    int dims[REMAT_MAX_DIMS];
    for (int i = 0; i < p->k.n_norm; i++) dims[i] = x->ndim - p->k.n_norm + i;
    int rc = remat_mean(&mu, x, p->k.n_norm, dims, true);
    if (!rc) rc = remat_sub(&xc, x, mu);
    *y = NULL;
    if (!rc) rc = rm_rms_scale(y, xc, p->k.n_norm, p->k.eps, xs[1]);
    rm_release(mu), rm_release(xc);
    return rc;
}

/* create_graph: the norm's y in x's dtype rebuilt (layer_norm_recompose) and its gradient
 * g widened first when y is bf16, once for both uses, as the cast's node would. */
static remat_status layer_norm_backward_diff(remat_node *node, remat_tensor *const *gout,
                                             remat_tensor **gin) {
    const ln_params *p = node->ctx;
    static const int slots[3] = {0, 1, -1};
    remat_tensor *g = NULL;
    int rc = rm_norm_grad_as_x(&g, gout[0], p->xdt);
    if (!rc) rc = rm_backward_recompose(node, slots, layer_norm_recompose, &g, gin);
    if (!rc && node->next[2].node) /* db = g summed over the leading dims */
        rc = bias_grad(&gin[2], g, p->k.n_norm);
    rm_release(g);
    return rc;
}

/* Outputs: y (handed out), mean and rstd (saved); weight and bias optional. */
const rm_op_desc rm_op_layer_norm = RM_OP_DESC(
    "remat_layer_norm", "LayerNormBackward", .n_in = 3, .n_out = 3, .n_ret = 1, .n_saved = 4,
    .optional_in = 2u | 4u, .flags = RM_OPF_CONTIGUOUS, .autocast = RM_AC_F32,
    .arg_names = k_ln_args, .kernel = RM_K_LAYER_NORM, .params_size = sizeof(ln_params),
    .fill_ctx = layer_norm_fill_ctx, .check = layer_norm_check, .infer = layer_norm_infer,
    .saves = {{RM_SAVE_INPUT, 0, 0},
              {RM_SAVE_INPUT, 1, 0},
              {RM_SAVE_OUTPUT, 1, 0},
              {RM_SAVE_OUTPUT, 2, 0}},
    .backward = layer_norm_backward, .backward_diff = layer_norm_backward_diff);

remat_status remat_layer_norm(remat_tensor **out, remat_tensor *x, int n_norm, remat_tensor *weight,
                              remat_tensor *bias, double eps) {
    const ln_params params = {.k = {n_norm, eps}};
    remat_tensor *in[3] = {x, weight, bias};
    return rm_dispatch(&rm_op_layer_norm, out, in, &params, RM_OP_SITE());
}

/* Whether a remat_*_to call rounds in the norm's kernel `kid` (dtype bf16, an f32 x on a
 * device whose kernel writes a bf16 y: RM_KF_BF16_Y, the cpu's and cuda's), or is the norm
 * then remat_to_dtype (other dtypes, devices); -1: dtype is not f32, f64 or bf16 (an
 * error). */
int rm_norm_fused_to(const char *call, rm_kernel_id kid, const remat_tensor *x, remat_dtype dtype) {
    if (dtype == REMAT_BF16)
        return x && x->dtype == REMAT_F32 &&
               rm_kernel_allows(kid, x->storage->device.type, RM_KF_BF16_Y);
    if (dtype == REMAT_F32 || dtype == REMAT_F64) return 0;
    rm_err(REMAT_EDTYPE, "%s: dtype must be f32, f64 or bf16, got %s", call,
           remat_dtype_name(dtype));
    return -1;
}

/* *y = remat_to_dtype(*y, dtype) for the composed path (a no-op when y has it already);
 * on failure *y is released and NULL. */
remat_status rm_norm_round_output(remat_tensor **y, remat_dtype dtype) {
    if ((*y)->dtype == dtype) return REMAT_OK;
    remat_tensor *t = NULL;
    int rc = remat_to_dtype(&t, *y, dtype);
    remat_release(*y);
    *y = t;
    return rc;
}

remat_status remat_layer_norm_to(remat_tensor **out, remat_tensor *x, int n_norm,
                                 remat_tensor *weight, remat_tensor *bias, double eps,
                                 remat_dtype dtype) {
    const char *call = "remat_layer_norm_to";
    if (!out) return rm_err(REMAT_EINVAL, "%s: out must not be NULL", call);
    *out = NULL;
    int fused = rm_norm_fused_to(call, RM_K_LAYER_NORM, x, dtype);
    if (fused < 0) return REMAT_EDTYPE;
    if (!fused) {
        int rc = remat_layer_norm(out, x, n_norm, weight, bias, eps);
        return rc ? rc : rm_norm_round_output(out, dtype);
    }
    const ln_params params = {.k = {n_norm, eps}, .to_bf16 = true};
    remat_tensor *in[3] = {x, weight, bias};
    return rm_dispatch(&rm_op_layer_norm, out, in, &params, RM_OP_SITE());
}

/* ---- add + layer_norm -------------------------------------------------------------------
 * sum = x + r and y = layer_norm(sum), one op (RM_K_ADD_LAYER_NORM): a pre-norm block's
 * residual add and the norm after it. The sum is written and normalised while its row is
 * in cache, and the backward adds the sum's own gradient into the norm's dx as it writes
 * it (RM_K_LAYER_NORM_BWD's gres), where the engine would accumulate the two in a pass
 * of its own. Values: remat_add's sum and remat_layer_norm's y, mean, rstd; x's and r's
 * gradient the accumulated sum, bitwise. Saves sum (what layer_norm would save as its
 * input), weight, mean and rstd. */
typedef struct aln_params {
    ln_params ln;    /* first: the kernels read its rm_layer_norm_params */
    remat_dtype rdt; /* r's dtype (fill_ctx): bf16 next to an f32 x gets its gradient rounded */
} aln_params;

static const char *const k_aln_args[] = {"x", "r", "weight", "bias"};

static remat_status add_layer_norm_check(const rm_op_call *c) {
    const char *call = c->op->name;
    const aln_params *p = c->params;
    remat_tensor *x = c->in[0], *r = c->in[1], *weight = c->in[2], *bias = c->in[3];
    const int n_norm = p->ln.k.n_norm;
    int rc = rm_check_float_dtype(call, "x", x);
    if (!rc) rc = rm_check_float_dtype(call, "r", r);
    if (!rc && r->dtype != x->dtype && !(x->dtype == REMAT_F32 && r->dtype == REMAT_BF16))
        rc = rm_err(REMAT_EDTYPE, "%s: r must have x's dtype %s (or bf16 for an f32 x), got %s",
                    call, remat_dtype_name(x->dtype), remat_dtype_name(r->dtype));
    if (!rc) rc = rm_check_same_device(call, x, r);
    if (rc) return rc;
    if (r->ndim != x->ndim || memcmp(r->shape, x->shape, sizeof(int64_t) * (size_t)x->ndim) != 0) {
        char bx[200], br[200];
        return rm_err(REMAT_ESHAPE, "%s: r %s must have x's shape %s (no broadcasting)", call,
                      rm_tensor_str(r, br, sizeof br), rm_tensor_str(x, bx, sizeof bx));
    }
    rc = rm_check_norm_params(call, x, n_norm, p->ln.k.eps);
    if (rc) return rc;
    if (p->ln.to_bf16 && x->dtype != REMAT_F32)
        return rm_err(REMAT_EDTYPE, "%s: a bf16 output needs an f32 x, got %s", call,
                      remat_dtype_name(x->dtype));
    if (weight && (rc = check_param(call, "weight", weight, x, n_norm))) return rc;
    if (bias && (rc = check_param(call, "bias", bias, x, n_norm))) return rc;
    return REMAT_OK;
}

/* sum like x, y as layer_norm's; the rows' mean and rstd */
static remat_status add_layer_norm_infer(const rm_op_call *c, rm_out_spec *out) {
    int rc = layer_norm_infer(c, out + 1);
    out[0] = out[1];
    out[0].dtype = c->in[0]->dtype;
    return rc;
}

static void add_layer_norm_fill_ctx(const rm_op_call *c, void *ctx) {
    aln_params *p = ctx;
    layer_norm_fill_ctx(c, &p->ln);
    p->rdt = c->in[1]->dtype;
}

/* saved: 0 = sum, 1 = weight (or NULL), 2 = mean, 3 = rstd. gout: sum's, y's. x and r get
 * the one gradient of the sum (r's, for a bf16 r, rounded by the engine or its consumer, as
 * add's kept operand's). */
static remat_status add_layer_norm_backward(remat_node *node, remat_tensor *const *gout,
                                            remat_tensor **gin) {
    const aln_params *p = node->ctx;
    const int n_norm = p->ln.k.n_norm;
    const bool gx = node->next[0].node || node->next[1].node;
    remat_tensor *sv[4] = {NULL, NULL, NULL, NULL}, *g = NULL, *gs = NULL, *dsum = NULL;
    int rc = REMAT_OK;
    for (int i = 0; i < 4 && rc == REMAT_OK; i++) /* the weight (1) may be absent */
        rc = rm_saved_contig(node, i, i == 1 ? NULL : "saved tensors are missing", &sv[i]);
    if (!rc) rc = rm_contig(&g, gout[1]);
    if (!rc && gx) rc = rm_contig(&gs, gout[0]);
    if (rc) goto out;
    remat_tensor *x = sv[0], *w = sv[1];
    remat_device dev = x->storage->device;
    if (gx) rc = rm_new_output(&dsum, x->ndim, x->shape, x->dtype, dev);
    if (!rc && node->next[2].node && w)
        rc = rm_new_output(&gin[2], n_norm, p->ln.norm_shape, x->dtype, dev);
    if (!rc && node->next[3].node)
        rc = rm_new_output(&gin[3], n_norm, p->ln.norm_shape, x->dtype, dev);
    if (!rc) {
        rm_kargs k = {
            .in = {g, x, w, sv[2], sv[3], gs}, .out = {dsum, gin[2], gin[3]}, .params = &p->ln.k};
        rc = rm_kernel_run(RM_K_LAYER_NORM_BWD, node->name, &k);
    }
    if (!rc && node->next[0].node) gin[0] = rm_retain(dsum);
    if (!rc && node->next[1].node) gin[1] = rm_retain(dsum);
out:
    for (int i = 0; i < 4; i++) rm_release(sv[i]);
    rm_release(g), rm_release(gs), rm_release(dsum);
    return rc;
}

/* create_graph: y = layer_norm(sum) rebuilt from public ops on a leaf view of the saved sum
 * (and of the weight), its nested create_graph gradient plus the sum's own gradient for x
 * and r (r's cast to its dtype), db the sum of y's gradient over the leading dims. */
static remat_status add_layer_norm_backward_diff(remat_node *node, remat_tensor *const *gout,
                                                 remat_tensor **gin) {
    const aln_params *p = node->ctx;
    const bool gx = node->next[0].node || node->next[1].node;
    const bool gw = node->next[2].node != NULL;
    remat_tensor *s = NULL, *w = NULL, *leaves[2] = {NULL, NULL}, *xs[3] = {NULL, NULL, NULL};
    remat_tensor *y = NULL, *grads[2] = {NULL, NULL}, *total = NULL, *gy = NULL;
    int k = 0, is = -1, iw = -1;
    int rc = rm_node_unpack(node, 0, &s);
    if (!rc) rc = rm_node_unpack(node, 1, &w);
    if (!rc) rc = rm_norm_grad_as_x(&gy, gout[1], s->dtype); /* a bf16 y's: widened once */
    if (!rc && gx) rc = remat_view(&leaves[is = k++], s, s->ndim, s->shape);
    if (!rc && gw && w && w->requires_grad)
        rc = remat_view(&leaves[iw = k++], w, w->ndim, w->shape);
    xs[0] = is >= 0 ? leaves[is] : s;
    xs[1] = iw >= 0 ? leaves[iw] : w;
    if (!rc) rc = layer_norm_recompose(node, xs, &y); /* reads the ln_params at ctx's start */
    if (!rc && k > 0 && y->requires_grad) {
        const remat_backward_options o = {.create_graph = true, .allow_unused = true};
        rc = remat_grad_ex(1, &y, &gy, k, leaves, &o, grads);
    }
    if (!rc && gx)
        rc = is >= 0 && grads[is] ? remat_add(&total, grads[is], gout[0])
                                  : remat_contiguous(&total, gout[0]);
    if (!rc && node->next[0].node) gin[0] = rm_retain(total);
    if (!rc && node->next[1].node)
        rc = p->rdt != total->dtype ? remat_to_dtype(&gin[1], total, p->rdt)
                                    : (gin[1] = rm_retain(total), REMAT_OK);
    if (!rc && iw >= 0) gin[2] = grads[iw], grads[iw] = NULL;
    if (!rc && node->next[3].node) /* db = y's gradient summed over the leading dims */
        rc = bias_grad(&gin[3], gy, p->ln.k.n_norm);
    rm_release(s), rm_release(w), rm_release(y), rm_release(total), rm_release(gy);
    for (int i = 0; i < 2; i++) rm_release(leaves[i]), rm_release(grads[i]);
    return rc;
}

/* Outputs: sum and y (handed out), mean and rstd (saved); weight and bias optional. Under
 * autocast the norm's f32 category, a bf16 r next to an f32 x read uncast (autocast_keep:
 * the residual stream's f32 x plus a bf16 block output, as remat_add keeps it). */
const rm_op_desc rm_op_add_layer_norm = RM_OP_DESC(
    "remat_add_layer_norm", "AddLayerNormBackward", .n_in = 4, .n_out = 4, .n_ret = 2, .n_saved = 4,
    .optional_in = 4u | 8u, .flags = RM_OPF_CONTIGUOUS, .autocast = RM_AC_F32,
    .autocast_keep = 1u << 1, .arg_names = k_aln_args, .kernel = RM_K_ADD_LAYER_NORM,
    .params_size = sizeof(aln_params), .fill_ctx = add_layer_norm_fill_ctx,
    .check = add_layer_norm_check, .infer = add_layer_norm_infer,
    .saves = {{RM_SAVE_OUTPUT, 0, 0},
              {RM_SAVE_INPUT, 2, 0},
              {RM_SAVE_OUTPUT, 2, 0},
              {RM_SAVE_OUTPUT, 3, 0}},
    .backward = add_layer_norm_backward, .backward_diff = add_layer_norm_backward_diff);

/* remat_add_layer_norm with y rounded to bf16 in the kernel (to_bf16) or not. */
static remat_status add_layer_norm(const char *call, remat_tensor **sum, remat_tensor **out,
                                   remat_tensor *x, remat_tensor *r, int n_norm,
                                   remat_tensor *weight, remat_tensor *bias, double eps,
                                   bool to_bf16) {
    if (!sum || !out) {
        if (sum) *sum = NULL;
        if (out) *out = NULL;
        return rm_err(REMAT_EINVAL, "%s: sum and out must not be NULL", call);
    }
    const aln_params params = {.ln = {.k = {n_norm, eps}, .to_bf16 = to_bf16}};
    remat_tensor *in[4] = {x, r, weight, bias}, *outs[2] = {NULL, NULL};
    int rc = rm_dispatch(&rm_op_add_layer_norm, outs, in, &params, RM_OP_SITE());
    *sum = outs[0];
    *out = outs[1];
    return rc;
}

remat_status remat_add_layer_norm(remat_tensor **sum, remat_tensor **out, remat_tensor *x,
                                  remat_tensor *r, int n_norm, remat_tensor *weight,
                                  remat_tensor *bias, double eps) {
    return add_layer_norm("remat_add_layer_norm", sum, out, x, r, n_norm, weight, bias, eps, false);
}

remat_status remat_add_layer_norm_to(remat_tensor **sum, remat_tensor **out, remat_tensor *x,
                                     remat_tensor *r, int n_norm, remat_tensor *weight,
                                     remat_tensor *bias, double eps, remat_dtype dtype) {
    const char *call = "remat_add_layer_norm_to";
    int fused = rm_norm_fused_to(call, RM_K_ADD_LAYER_NORM, x, dtype);
    if (fused < 0) {
        if (sum) *sum = NULL;
        if (out) *out = NULL;
        return REMAT_EDTYPE;
    }
    int rc = add_layer_norm(call, sum, out, x, r, n_norm, weight, bias, eps, fused);
    if (rc || fused) return rc;
    rc = rm_norm_round_output(out, dtype);
    if (rc) remat_release_p(sum); /* both NULL on failure */
    return rc;
}

/* ---- dropout ---------------------------------------------------------------------------- */
typedef struct dropout_params {
    rm_dropout_params k; /* first: the kernels read it (p, the draw) */
    bool train;
} dropout_params;

static bool dropout_is_identity(const dropout_params *p) { return !p->train || p->k.p == 0.0; }

/* Checks p, then draws the mask's Philox blocks (in skip mode too). */
static remat_status dropout_check(const rm_op_call *c) {
    dropout_params *p = (dropout_params *)c->params; /* writable: see the top of the file */
    const char *call = c->op->name;
    if (!(p->k.p >= 0.0 && p->k.p <= 1.0))
        return rm_err(REMAT_EINVAL, "%s: dropout probability p must be in [0, 1], got %g", call,
                      p->k.p);
    if (dropout_is_identity(p) || p->k.p >= 1.0) return REMAT_OK; /* no draw */
    const remat_tensor *x = c->in[0];
    int rc = rm_rng_reserve(x->storage->device, (uint64_t)((remat_numel(x) + 3) / 4), p->k.key,
                            &p->k.counter);
    return rc ? rm_err_prefix(rc, call) : REMAT_OK;
}

/* y like x, or x itself (eval mode, p = 0: no node, no kernel); the keep
 * bits (u8, one bit per element), made only for the node */
static remat_status dropout_infer(const rm_op_call *c, rm_out_spec *out) {
    const remat_tensor *x = c->in[0];
    if (dropout_is_identity(c->params)) out[0].kind = RM_OUT_INPUT;
    out[0].ndim = x->ndim;
    memcpy(out[0].shape, x->shape, sizeof out[0].shape);
    out[0].dtype = x->dtype;
    out[1].ndim = 1;
    out[1].shape[0] = (remat_numel(x) + 7) / 8;
    out[1].dtype = REMAT_U8;
    return REMAT_OK;
}

/* saved: 0 = keep bits (u8, ceil(n / 8) bytes) */
static remat_status dropout_backward(remat_node *node, remat_tensor *const *gout,
                                     remat_tensor **gin) {
    if (!node->next[0].node) return REMAT_OK;
    const dropout_params *p = node->ctx;
    remat_tensor *m = NULL, *g = NULL;
    int rc = rm_saved_contig(node, 0, "mask was not saved", &m);
    if (!rc) rc = rm_contig(&g, gout[0]);
    if (rc) goto out;
    int64_t n = remat_numel(g);
    if (m->dtype != REMAT_U8 || remat_numel(m) != (n + 7) / 8) {
        char b1[200], b2[200];
        rc = rm_err(REMAT_ESTATE, "%s: the saved mask %s does not match the gradient %s",
                    node->name, rm_tensor_str(m, b1, sizeof b1), rm_tensor_str(g, b2, sizeof b2));
        goto out;
    }
    rc = rm_grad_kernel(node, RM_K_DROPOUT_BWD, g, m, 0, NULL, &p->k, &gin[0]);
out:
    rm_release(m);
    rm_release(g);
    return rc;
}

/* create_graph: g * mask / (1 - p) is linear in g and its own adjoint. */
static remat_status dropout_backward_diff(remat_node *node, remat_tensor *const *gout,
                                          remat_tensor **gin) {
    return rm_backward_linear(node, gout, gin, rm_adjoint_self);
}

static const char *const k_dropout_args[] = {"x"};

/* Outputs: y (handed out) and the keep bits (only with a node, saved). */
const rm_op_desc rm_op_dropout = RM_OP_DESC(
    "remat_dropout", "DropoutBackward", .n_in = 1, .n_out = 2, .n_ret = 1, .grad_only_out = 2u,
    .n_saved = 1, .flags = RM_OPF_FLOAT | RM_OPF_CONTIGUOUS, .arg_names = k_dropout_args,
    .kernel = RM_K_DROPOUT, .params_size = sizeof(dropout_params), .check = dropout_check,
    .infer = dropout_infer, .saves = {{RM_SAVE_OUTPUT, 1, 0}}, .backward = dropout_backward,
    .backward_diff = dropout_backward_diff);

remat_status remat_dropout(remat_tensor **out, remat_tensor *x, double p, bool train) {
    dropout_params params = {.k = {.p = p}, .train = train};
    remat_tensor *in[1] = {x};
    return rm_dispatch(&rm_op_dropout, out, in, &params, RM_OP_SITE());
}
