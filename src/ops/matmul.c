/* src/ops/matmul.c — matmul (torch.matmul semantics) and linear: their
 * descriptors and backward. Both run on the batched GEMM kernel
 * (RM_K_MATMUL: src/backends/cpu/matmul.c on the cpu), forward and
 * backward alike; the kernel's comment says how operands of any layout
 * and broadcast batch dims are handled.
 *
 * Both save their inputs before the kernel (RM_OPF_SAVE_EARLY), each only
 * for the other's gradient: in an early-stopped recomputation the save
 * that fills the last placeholder turns skip mode on, so the last GEMM of
 * a checkpointed block is never run (PyTorch computes it and then stops). */
#include <string.h>

#include "op.h"
#include "remat/autocast.h"

/* Runs C = bias + op(A) · op(B) with the operands' flags (RM_MM_*). */
static remat_status mm_run(const char *call, remat_tensor *c, unsigned fc, remat_tensor *a,
                           unsigned fa, remat_tensor *b, unsigned fb) {
    const rm_mm_params p = {(unsigned char)fa, (unsigned char)fb, (unsigned char)fc};
    rm_kargs k = {.in = {a, b}, .out = {c}, .params = &p};
    return rm_kernel_run(RM_K_MATMUL, call, &k);
}

/* Checks that a tensor unpacked for backward still has the shape it was
 * saved with (a saved-tensor hook could hand back something else). */
static remat_status check_saved(const char *node, const char *what, const remat_tensor *t, int nd,
                                const int64_t *shape) {
    if (t->ndim == nd && memcmp(t->shape, shape, sizeof(int64_t) * (size_t)nd) == 0)
        return REMAT_OK;
    char b1[200], b2[200];
    return rm_err(REMAT_ESHAPE, "%s: saved %s came back as %s, expected %s", node, what,
                  rm_shape_str(t->ndim, t->shape, b1, sizeof b1),
                  rm_shape_str(nd, shape, b2, sizeof b2));
}

/* ---- matmul ---------------------------------------------------------------------------------- */

/* The kernel's params, then what the backward needs: the input shapes. */
typedef struct mm_ctx {
    rm_mm_params k;
    rm_two_shapes shp;
} mm_ctx;

static void mm_fill_ctx(const rm_op_call *c, void *ctx) {
    mm_ctx *cx = ctx;
    rm_two_shapes_of(&cx->shp, c->in[0], c->in[1]);
}

/* Batch shape (nb dims) and output shape of a @ b; checks the shapes. */
static remat_status mm_shapes(const char *call, int nda, const int64_t *sa, int ndb,
                              const int64_t *sb, int *nb, int64_t *bshape, int *ndo,
                              int64_t *oshape) {
    char b1[200], b2[200];
    if (nda == 0 || ndb == 0)
        return rm_err(REMAT_ESHAPE,
                      "%s: both arguments must be at least 1-D, got a %s and b %s (use remat_mul "
                      "to scale by a 0-dim tensor)",
                      call, rm_shape_str(nda, sa, b1, sizeof b1),
                      rm_shape_str(ndb, sb, b2, sizeof b2));
    int64_t ka = sa[nda - 1];
    int64_t kb = ndb == 1 ? sb[0] : sb[ndb - 2];
    if (ka != kb)
        return rm_err(REMAT_ESHAPE,
                      "%s: cannot multiply a %s by b %s (inner sizes %lld and %lld differ)", call,
                      rm_shape_str(nda, sa, b1, sizeof b1), rm_shape_str(ndb, sb, b2, sizeof b2),
                      (long long)ka, (long long)kb);
    int na = nda > 2 ? nda - 2 : 0, nbb = ndb > 2 ? ndb - 2 : 0;
    int n = na > nbb ? na : nbb;
    for (int d = 0; d < n; d++) {
        int ia = d - (n - na), ib = d - (n - nbb);
        int64_t da = ia >= 0 ? sa[ia] : 1, db = ib >= 0 ? sb[ib] : 1;
        if (da != db && da != 1 && db != 1)
            return rm_err(REMAT_ESHAPE,
                          "%s: batch dims of a %s and b %s cannot be broadcast (batch dim %d: %lld "
                          "vs %lld)",
                          call, rm_shape_str(nda, sa, b1, sizeof b1),
                          rm_shape_str(ndb, sb, b2, sizeof b2), d, (long long)da, (long long)db);
        bshape[d] = da == 1 ? db : da;
    }
    *nb = n;
    int k = 0;
    for (int d = 0; d < n; d++) oshape[k++] = bshape[d];
    if (nda > 1) oshape[k++] = sa[nda - 2];
    if (ndb > 1) oshape[k++] = sb[ndb - 1];
    *ndo = k;
    return REMAT_OK;
}

static remat_status mm_infer(const rm_op_call *c, rm_out_spec *out) {
    const remat_tensor *a = c->in[0], *b = c->in[1];
    int nb;
    int64_t bshape[REMAT_MAX_DIMS];
    out[0].dtype = a->dtype;
    return mm_shapes(c->op->name, a->ndim, a->shape, b->ndim, b->shape, &nb, bshape, &out[0].ndim,
                     out[0].shape);
}

/* dA = g · B^T and dB = A^T · g (batched), each reduced over the batch dims
 * its input was broadcast along (the kernel accumulates into them). */
static remat_status mm_backward(remat_node *node, remat_tensor *const *gout, remat_tensor **gin) {
    const mm_ctx *c = node->ctx;
    const char *nm = node->name;
    bool ga = node->next[0].node != NULL, gb = node->next[1].node != NULL;
    remat_tensor *a = NULL, *b = NULL, *g = gout[0];
    unsigned row = c->shp.nda > 1 ? RM_MM_ROW : 0, col = c->shp.ndb > 1 ? RM_MM_COL : 0;
    remat_dtype dt = g->dtype;
    remat_device dev = g->storage->device;
    int rc = REMAT_OK;
    if (ga) {
        rc = rm_node_unpack(node, 1, &b);
        if (!rc) rc = check_saved(nm, "b", b, c->shp.ndb, c->shp.sb);
        if (!rc) rc = rm_new_output(&gin[0], c->shp.nda, c->shp.sa, dt, dev);
        if (!rc)
            rc = mm_run(nm, gin[0], row | RM_MM_COL, g, row | col, b, RM_MM_ROW | col | RM_MM_T);
    }
    if (!rc && gb) {
        rc = rm_node_unpack(node, 0, &a);
        if (!rc) rc = check_saved(nm, "a", a, c->shp.nda, c->shp.sa);
        if (!rc) rc = rm_new_output(&gin[1], c->shp.ndb, c->shp.sb, dt, dev);
        if (!rc)
            rc = mm_run(nm, gin[1], RM_MM_ROW | col, a, row | RM_MM_COL | RM_MM_T, g, row | col);
    }
    rm_release(a);
    rm_release(b);
    return rc;
}

/* create_graph: the same products with public ops. A 1-D operand is
 * promoted to a matrix (a: (1, K), b: (K, 1)) and g to the promoted
 * product's shape; the results are summed back down to the (promoted)
 * input shapes and reshaped to the inputs'. */
/* One input's gradient under create_graph: the other operand (saved slot
 * `slot`, promoted shape (ndo, po)) transposed, times g (g on the left:
 * dA = g B^T; on the right: dB = A^T g), summed down to the input's
 * promoted shape (nd, ps) and reshaped to its shape (ndi, si). */
static remat_status mm_grad_diff(remat_node *node, int slot, int ndo, const int64_t *po,
                                 remat_tensor *g, bool g_left, int nd, const int64_t *ps, int ndi,
                                 const int64_t *si, remat_tensor **out) {
    remat_tensor *o = NULL, *t = NULL, *ot = NULL, *s = NULL;
    int rc = rm_node_unpack(node, slot, &o);
    if (!rc) rc = remat_reshape(&t, o, ndo, po);
    if (!rc) rc = remat_transpose(&ot, t, -2, -1);
    rm_release_p(&t);
    if (!rc) rc = g_left ? remat_matmul(&t, g, ot) : remat_matmul(&t, ot, g);
    if (!rc) rc = rm_sum_to(&s, t, nd, ps);
    if (!rc) rc = remat_reshape(out, s, ndi, si);
    rm_release(o), rm_release(t), rm_release(ot), rm_release(s);
    return rc;
}

static remat_status mm_backward_diff(remat_node *node, remat_tensor *const *gout,
                                     remat_tensor **gin) {
    const mm_ctx *c = node->ctx;
    remat_tensor *g = NULL;
    int64_t pa[REMAT_MAX_DIMS + 1], pb[REMAT_MAX_DIMS + 1], pg[REMAT_MAX_DIMS + 1];
    int nda = c->shp.nda, ndb = c->shp.ndb, ndg = gout[0]->ndim;
    memcpy(pa, c->shp.sa, sizeof(int64_t) * (size_t)nda);
    memcpy(pb, c->shp.sb, sizeof(int64_t) * (size_t)ndb);
    memcpy(pg, gout[0]->shape, sizeof(int64_t) * (size_t)ndg);
    if (nda == 1) { /* (K) -> (1, K); g gains the row dim */
        pa[1] = pa[0], pa[0] = 1, nda = 2;
        memmove(pg + ndg, pg + ndg - (ndb > 1 ? 1 : 0), sizeof(int64_t) * (ndb > 1 ? 1 : 0));
        pg[ndg - (ndb > 1 ? 1 : 0)] = 1;
        ndg++;
    }
    if (ndb == 1) pb[1] = 1, ndb = 2, pg[ndg++] = 1; /* (K) -> (K, 1); g gains the col dim */
    int rc = remat_reshape(&g, gout[0], ndg, pg);
    if (!rc && node->next[0].node) /* dA = g B^T */
        rc = mm_grad_diff(node, 1, ndb, pb, g, true, nda, pa, c->shp.nda, c->shp.sa, &gin[0]);
    if (!rc && node->next[1].node) /* dB = A^T g */
        rc = mm_grad_diff(node, 0, nda, pa, g, false, ndb, pb, c->shp.ndb, c->shp.sb, &gin[1]);
    rm_release(g);
    return rc;
}

/* Slot 0 = a (read by b's gradient), slot 1 = b (read by a's). */
const rm_op_desc rm_op_matmul =
    RM_OP_DESC("remat_matmul", "MmBackward", .n_in = 2, .n_out = 1, .n_saved = 2,
               .flags = RM_OPF_FLOAT | RM_OPF_SAME_DTYPE | RM_OPF_SAME_DEVICE | RM_OPF_SAVE_EARLY,
               .autocast = RM_AC_LOWER, .kernel = RM_K_MATMUL, .params_size = sizeof(mm_ctx),
               .fill_ctx = mm_fill_ctx, .infer = mm_infer,
               .saves = {{RM_SAVE_INPUT, 0, 2}, {RM_SAVE_INPUT, 1, 1}}, .backward = mm_backward,
               .backward_diff = mm_backward_diff);

remat_status remat_matmul(remat_tensor **out, remat_tensor *a, remat_tensor *b) {
    mm_ctx p = {.shp.nda = 0}; /* the flags are read by the kernel only, after the checks */
    if (a && b)
        p.k = (rm_mm_params){(a->ndim > 1 ? RM_MM_ROW : 0) | RM_MM_COL,
                             RM_MM_ROW | (b->ndim > 1 ? RM_MM_COL : 0),
                             (a->ndim > 1 ? RM_MM_ROW : 0) | (b->ndim > 1 ? RM_MM_COL : 0)};
    remat_tensor *in[2] = {a, b};
    return rm_dispatch(&rm_op_matmul, out, in, &p, RM_OP_SITE());
}

/* ---- linear ------------------------------------------------------------------------------------ */

typedef struct lin_ctx {
    rm_mm_params k;
    int ndx;
    int64_t sx[REMAT_MAX_DIMS];
    int64_t out_f, in_f;
    remat_dtype wdt; /* the weight's dtype: its gradient's (f32 under autocast, see lin_check) */
} lin_ctx;

static void lin_fill_ctx(const rm_op_call *c, void *ctx) {
    lin_ctx *cx = ctx;
    cx->ndx = c->in[0]->ndim;
    memcpy(cx->sx, c->in[0]->shape, sizeof cx->sx);
    cx->out_f = c->in[1]->shape[0];
    cx->in_f = c->in[1]->shape[1];
    cx->wdt = c->in[1]->dtype;
    /* an f32 gradient for a bf16 y, where the device's GEMMs round it (linear_backward) */
    rm_donation_read_wide(c->node, RM_K_MATMUL);
}

/* Under cpu autocast the f32 weight reaches the op uncast (autocast_keep):
 * the GEMM kernel rounds it into a scratch copy, so the node saves the
 * parameter itself, not a bf16 copy per linear, and dW comes out f32. */
static bool weight_kept_f32(const remat_tensor *x, const remat_tensor *weight) {
    int type = x->storage->device.type;
    return x->dtype == REMAT_BF16 && weight->dtype == REMAT_F32 && type == REMAT_CPU &&
           weight->storage->device.type == REMAT_CPU && remat_autocast_enabled(type);
}

static remat_status lin_check(const rm_op_call *c) {
    const char *call = c->op->name;
    remat_tensor *x = c->in[0], *weight = c->in[1], *bias = c->in[2];
    int rc = weight_kept_f32(x, weight) ? REMAT_OK : rm_check_same_dtype(call, x, weight);
    if (!rc) rc = rm_check_same_device(call, x, weight);
    if (!rc && bias) rc = rm_check_same_dtype(call, x, bias);
    if (!rc && bias) rc = rm_check_same_device(call, x, bias);
    if (rc) return rc;
    char b1[200], b2[200];
    if (x->ndim == 0)
        return rm_err(REMAT_ESHAPE, "%s: x must have at least 1 dim (..., in_features), got %s",
                      call, rm_tensor_str(x, b1, sizeof b1));
    if (weight->ndim != 2)
        return rm_err(REMAT_ESHAPE, "%s: weight must be 2-D (out_features, in_features), got %s",
                      call, rm_tensor_str(weight, b1, sizeof b1));
    int64_t in_f = weight->shape[1], out_f = weight->shape[0];
    if (x->shape[x->ndim - 1] != in_f)
        return rm_err(REMAT_ESHAPE,
                      "%s: cannot multiply x %s by weight %s transposed (x has %lld features, "
                      "weight expects in_features %lld)",
                      call, rm_shape_str(x->ndim, x->shape, b1, sizeof b1),
                      rm_shape_str(2, weight->shape, b2, sizeof b2),
                      (long long)x->shape[x->ndim - 1], (long long)in_f);
    if (bias && (bias->ndim != 1 || bias->shape[0] != out_f))
        return rm_err(REMAT_ESHAPE, "%s: bias %s does not match weight %s (expected [%lld])", call,
                      rm_shape_str(bias->ndim, bias->shape, b1, sizeof b1),
                      rm_shape_str(2, weight->shape, b2, sizeof b2), (long long)out_f);
    return REMAT_OK;
}

/* y (..., out_features): x's shape with the last dim replaced. */
static remat_status lin_infer(const rm_op_call *c, rm_out_spec *out) {
    const remat_tensor *x = c->in[0];
    out[0].ndim = x->ndim;
    memcpy(out[0].shape, x->shape, sizeof(int64_t) * (size_t)x->ndim);
    out[0].shape[x->ndim - 1] = c->in[1]->shape[0];
    out[0].dtype = x->dtype;
    return REMAT_OK;
}

/* g as linear's backward reads it: gout[0] contiguous; *panel: RM_MM_PANEL
 * when it is an f32 gradient for a bf16 y, which the engine hands over only
 * where the device's GEMMs round it panel by panel (buffer donation,
 * rm_donation_read_wide; RM_KF_WIDE_GRAD: the cpu's), else y's dtype. */
static remat_status lin_grad(remat_tensor **g, remat_tensor *g0, remat_dtype dt, unsigned *panel) {
    *panel = g0->dtype == REMAT_F32 && dt == REMAT_BF16 ? RM_MM_PANEL : 0;
    return rm_contig(g, g0);
}

/* dx = g · W, dW = g^T · x (flattened over the leading dims: one GEMM with
 * K = rows when x and g are contiguous), db = column sums of g. Under
 * autocast the kept f32 weight is rounded for dx's GEMM panel by panel
 * (RM_MM_PANEL; up to out_features 384, see src/backends/cpu/matmul.c), and
 * so is an f32 g (the residual stream's gradient, which the engine hands over
 * unrounded): dW over panels of output features, dx over panels of rows, db
 * from the rounded values. Every element comes from the same rounded
 * operands, bitwise what whole rounded copies gave, and none of those copies
 * exists at the backward's peak. */
static remat_status linear_backward(remat_node *node, remat_tensor *const *gout,
                                    remat_tensor **gin) {
    const lin_ctx *c = node->ctx;
    const char *nm = node->name;
    bool gx = node->next[0].node != NULL, gw = node->next[1].node != NULL;
    bool gbias = node->next[2].node != NULL;
    remat_tensor *x = NULL, *w = NULL, *g = NULL;
    remat_dtype dt = node->out_meta[0].dtype; /* y's, also when g comes wide */
    remat_device dev = gout[0]->storage->device;
    unsigned row = c->ndx > 1 ? RM_MM_ROW : 0, pg;
    int64_t wshape[2] = {c->out_f, c->in_f};
    int rc = lin_grad(&g, gout[0], dt, &pg);
    if (rc) return rc;
    /* dW first: x (often the largest saved tensor) is then let go before dx
     * is allocated, so the two never coexist when the graph is not kept. */
    if (gw) {
        rc = rm_node_unpack(node, 0, &x);
        if (!rc) rc = check_saved(nm, "x", x, c->ndx, c->sx);
        if (!rc) rc = rm_new_output(&gin[1], 2, wshape, c->wdt, dev);
        if (!rc)
            rc = mm_run(nm, gin[1], RM_MM_ROW | RM_MM_COL, g, row | RM_MM_COL | RM_MM_T | pg, x,
                        row | RM_MM_COL);
        rm_release_p(&x);
        if (!rc) rm_donation_drop(node, RM_BUF_SAVED, 0);
    }
    if (!rc && gx) {
        rc = rm_node_unpack(node, 1, &w);
        if (!rc) rc = check_saved(nm, "weight", w, 2, wshape);
        if (!rc) rc = rm_new_output(&gin[0], c->ndx, c->sx, dt, dev);
        if (!rc)
            rc = mm_run(nm, gin[0], row | RM_MM_COL, g, row | RM_MM_COL | pg, w,
                        RM_MM_ROW | RM_MM_COL | RM_MM_PANEL);
    }
    if (!rc && gbias) { /* db in y's dtype (an f32 g: the sums of its rounded values) */
        rc = rm_new_output(&gin[2], 1, &c->out_f, dt, dev);
        rm_kargs k = {.in = {g}, .out = {gin[2]}};
        if (!rc) rc = rm_kernel_run(RM_K_COLSUM, nm, &k);
    }
    rm_release(w);
    rm_release(g);
    return rc;
}

/* create_graph: dx = g W, dW = g2^T x2 and db = the column sums of g2,
 * where g2 (R, out) and x2 (R, in) flatten the leading dims. */
static remat_status linear_backward_diff(remat_node *node, remat_tensor *const *gout,
                                         remat_tensor **gin) {
    const lin_ctx *c = node->ctx;
    remat_tensor *x = NULL, *w = NULL, *g2 = NULL, *x2 = NULL, *t = NULL;
    const int64_t rows = remat_numel(gout[0]) / (c->out_f ? c->out_f : 1);
    const int64_t sg[2] = {rows, c->out_f}, sx[2] = {rows, c->in_f};
    int rc = remat_reshape(&g2, gout[0], 2, sg);
    if (!rc && node->next[1].node) {
        rc = rm_node_unpack(node, 0, &x);
        if (!rc) rc = remat_reshape(&x2, x, 2, sx);
        if (!rc) rc = remat_transpose(&t, g2, 0, 1);
        if (!rc) rc = remat_matmul(&gin[1], t, x2);
        if (!rc && gin[1]->dtype != c->wdt) { /* the kept f32 weight's gradient: f32 */
            rm_release_p(&t);
            rc = remat_to_dtype(&t, gin[1], c->wdt);
            rm_release_p(&gin[1]);
            gin[1] = t, t = NULL;
        }
    }
    if (!rc && node->next[0].node) {
        rc = rm_node_unpack(node, 1, &w);
        if (!rc && w->dtype != gout[0]->dtype) { /* kept f32: round it as the forward did */
            remat_tensor *wc = NULL;
            rc = remat_to_dtype(&wc, w, gout[0]->dtype);
            rm_release(w);
            w = wc;
        }
        if (!rc) rc = remat_matmul(&gin[0], gout[0], w);
    }
    if (!rc && node->next[2].node) {
        const int dim0 = 0;
        rc = remat_sum(&gin[2], g2, 1, &dim0, false);
    }
    rm_release(x), rm_release(w), rm_release(g2), rm_release(x2), rm_release(t);
    return rc;
}

static const char *const k_linear_args[] = {"x", "weight", "bias"};

/* Slot 0 = x (read by weight's gradient), slot 1 = weight (read by x's);
 * the bias gradient reads neither. */
const rm_op_desc rm_op_linear = RM_OP_DESC(
    "remat_linear", "LinearBackward", .n_in = 3, .n_out = 1, .n_saved = 2,
    .flags = RM_OPF_FLOAT | RM_OPF_SAVE_EARLY, .optional_in = 1u << 2, .autocast = RM_AC_LOWER,
    .autocast_keep = 1u << 1, .arg_names = k_linear_args, .kernel = RM_K_MATMUL,
    .params_size = sizeof(lin_ctx), .fill_ctx = lin_fill_ctx, .check = lin_check,
    .infer = lin_infer, .saves = {{RM_SAVE_INPUT, 0, 2}, {RM_SAVE_INPUT, 1, 1}},
    .backward = linear_backward, .backward_diff = linear_backward_diff);

remat_status remat_linear(remat_tensor **out, remat_tensor *x, remat_tensor *weight,
                          remat_tensor *bias) {
    /* y = bias + x · weightᵀ; the flags are read by the kernel only, after the checks */
    unsigned row = x && x->ndim > 1 ? RM_MM_ROW : 0;
    lin_ctx p = {.k = {row | RM_MM_COL, RM_MM_ROW | RM_MM_COL | RM_MM_T, row | RM_MM_COL}};
    remat_tensor *in[3] = {x, weight, bias};
    return rm_dispatch(&rm_op_linear, out, in, &p, RM_OP_SITE());
}
