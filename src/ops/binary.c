/* src/ops/binary.c — broadcasting elementwise binary ops (add, sub, mul,
 * div, pow): y = f(a, b) over the broadcast shape of a and b, on the
 * elementwise kernel (src/backends/cpu/elementwise.c on the cpu), and
 * rm_ew_run, through which the in-place ops and the backward formulas run
 * the same kernel. */
#include <string.h>

#include "op.h"

remat_status rm_ew_run(const char *call, int op, remat_tensor *y, remat_tensor *a, remat_tensor *b,
                       remat_tensor *c, double p) {
    const rm_ew_params params = {(rm_ew_op)op, p};
    rm_kargs k = {.in = {a, b, c}, .out = {y}, .params = &params};
    return rm_kernel_run(RM_K_ELEMENTWISE, call, &k);
}

/* New contiguous tensor of shape_of's shape = f(a, b, c) (backward helper). */
static remat_status ew_new(const char *call, remat_tensor **out, rm_ew_op op,
                           remat_tensor *shape_of, remat_tensor *a, remat_tensor *b,
                           remat_tensor *c, double p) {
    int rc = rm_new_output(out, shape_of->ndim, shape_of->shape, shape_of->dtype,
                           shape_of->storage->device);
    if (!rc) rc = rm_ew_run(call, op, *out, a, b, c, p);
    return rc;
}

/* What the backward needs: the formula and the input shapes (gradients are
 * summed back down to them, undoing the broadcast). */
typedef struct bctx {
    rm_ew_params ew;
    rm_two_shapes shp;
    remat_dtype dt[2]; /* the inputs' dtypes: each gradient is brought back to its input's */
} bctx;

static void fill_ctx(const rm_op_call *c, void *ctx) {
    bctx *cx = ctx;
    rm_two_shapes_of(&cx->shp, c->in[0], c->in[1]);
    cx->dt[0] = c->in[0]->dtype;
    cx->dt[1] = c->in[1]->dtype;
}

/* add's f32 + bf16 on the cpu, which autocast leaves uncast (autocast_keep): the
 * f32 kernel widens the bf16 operand chunk by chunk instead of the driver making a
 * whole f32 copy of it (the residual stream's f32 x + a bf16 block output). */
static bool kept_mixed(const remat_tensor *a, const remat_tensor *b) {
    bool pair = (a->dtype == REMAT_F32 && b->dtype == REMAT_BF16) ||
                (a->dtype == REMAT_BF16 && b->dtype == REMAT_F32);
    return pair && a->storage->device.type == REMAT_CPU && b->storage->device.type == REMAT_CPU;
}

static remat_status add_check(const rm_op_call *c) {
    remat_tensor *a = c->in[0], *b = c->in[1];
    return kept_mixed(a, b) ? REMAT_OK : rm_check_same_dtype(c->op->name, a, b);
}

static remat_status infer_broadcast(const rm_op_call *c, rm_out_spec *out) {
    remat_tensor *a = c->in[0], *b = c->in[1];
    out[0].dtype = a->dtype == REMAT_BF16 ? b->dtype : a->dtype; /* f32 when mixed */
    return rm_broadcast_shape(c->op->name, a->ndim, a->shape, b->ndim, b->shape, &out[0].ndim,
                              out[0].shape);
}

/* The two input gradients before the broadcast is undone: *ta, *tb (new
 * references; each only when need_a / need_b) from g, a and b. add's and
 * sub's gradient of a are g itself, set before (these see need_a false). */
typedef remat_status (*binary_grads_fn)(const char *nm, rm_ew_op op, remat_tensor *g,
                                        remat_tensor *a, remat_tensor *b, bool need_a, bool need_b,
                                        remat_tensor **ta, remat_tensor **tb);

/* First order: the formulas on the elementwise kernel (g is the output
 * gradient, of the broadcast shape). */
static remat_status binary_grads(const char *nm, rm_ew_op op, remat_tensor *g, remat_tensor *a,
                                 remat_tensor *b, bool need_a, bool need_b, remat_tensor **ta,
                                 remat_tensor **tb) {
    int rc = REMAT_OK;
    switch (op) {
    case RM_EW_SUB:
        if (need_b) rc = ew_new(nm, tb, RM_EW_SCALE, g, g, NULL, NULL, -1.0);
        break;
    case RM_EW_MUL:
        if (need_a) rc = ew_new(nm, ta, RM_EW_MUL, g, g, b, NULL, 0);
        if (!rc && need_b) rc = ew_new(nm, tb, RM_EW_MUL, g, g, a, NULL, 0);
        break;
    case RM_EW_DIV:
        if (need_a) rc = ew_new(nm, ta, RM_EW_DIV, g, g, b, NULL, 0);
        if (!rc && need_b) rc = ew_new(nm, tb, RM_EW_DIV_GB, g, g, a, b, 0);
        break;
    case RM_EW_POW:
        if (need_a) rc = ew_new(nm, ta, RM_EW_POW_GA, g, g, a, b, 0);
        if (!rc && need_b) rc = ew_new(nm, tb, RM_EW_POW_GB, g, g, a, b, 0);
        break;
    case RM_EW_ADD: break;
    default: rc = rm_err(REMAT_ESTATE, "%s: bad op", nm); break;
    }
    return rc;
}

/* div with public ops: da = g / b; db = -(g / b) (a / b). */
static remat_status div_grads_diff(remat_tensor *g, remat_tensor *a, remat_tensor *b, bool need_a,
                                   bool need_b, remat_tensor **ta, remat_tensor **tb) {
    remat_tensor *u = NULL, *v = NULL, *w = NULL;
    int rc = remat_div(&u, g, b);
    if (!rc && need_b) rc = remat_div(&v, a, b);
    if (!rc && need_b) rc = remat_mul(&w, u, v);
    if (!rc && need_b) rc = remat_neg(tb, w);
    if (!rc && need_a) *ta = rm_retain(u);
    rm_release(u), rm_release(v), rm_release(w);
    return rc;
}

/* pow with public ops: da = g b a^(b - 1); db = g a^b log(a). */
static remat_status pow_grads_diff(remat_tensor *g, remat_tensor *a, remat_tensor *b, bool need_a,
                                   bool need_b, remat_tensor **ta, remat_tensor **tb) {
    remat_tensor *u = NULL, *v = NULL, *w = NULL;
    int rc = REMAT_OK;
    if (need_a) {
        rc = remat_sub_scalar(&u, b, 1.0);
        if (!rc) rc = remat_pow(&v, a, u);
        if (!rc) rc = remat_mul(&w, v, b);
        if (!rc) rc = remat_mul(ta, w, g);
        rm_release_p(&u), rm_release_p(&v), rm_release_p(&w);
    }
    if (!rc && need_b) {
        rc = remat_pow(&u, a, b);
        if (!rc) rc = remat_log(&v, a);
        if (!rc) rc = remat_mul(&w, u, v);
        if (!rc) rc = remat_mul(tb, w, g);
        rm_release(u), rm_release(v), rm_release(w);
    }
    return rc;
}

/* The same gradients with public ops (create_graph): they record a graph
 * reaching g, a and b. pow at a == 0: the first-order kernels take the
 * limits (0); these formulas give NaN there (0 * inf), never a silent 0. */
static remat_status binary_grads_diff(const char *nm, rm_ew_op op, remat_tensor *g, remat_tensor *a,
                                      remat_tensor *b, bool need_a, bool need_b, remat_tensor **ta,
                                      remat_tensor **tb) {
    int rc = REMAT_OK;
    switch (op) {
    case RM_EW_SUB: rc = need_b ? remat_neg(tb, g) : REMAT_OK; break;
    case RM_EW_MUL:
        if (need_a) rc = remat_mul(ta, g, b);
        if (!rc && need_b) rc = remat_mul(tb, g, a);
        break;
    case RM_EW_DIV: rc = div_grads_diff(g, a, b, need_a, need_b, ta, tb); break;
    case RM_EW_POW: rc = pow_grads_diff(g, a, b, need_a, need_b, ta, tb); break;
    case RM_EW_ADD: break;
    default: rc = rm_err(REMAT_ESTATE, "%s: bad op", nm); break;
    }
    return rc;
}

/* Either order's backward: the saved a and b, the gradients by `grads`,
 * each summed back down to its input's shape (undoing the broadcast). */
static remat_status binary_backward_with(binary_grads_fn grads, remat_node *node,
                                         remat_tensor *const *gout, remat_tensor **gin) {
    const bctx *cx = node->ctx;
    bool need_a = node->next[0].node != NULL, need_b = node->next[1].node != NULL;
    remat_tensor *a = NULL, *b = NULL, *ta = NULL, *tb = NULL;
    rm_ew_op op = cx->ew.op;
    if (op == RM_EW_ADD || op == RM_EW_SUB) { /* g passes through unchanged */
        if (need_a) ta = rm_retain(gout[0]);
        if (need_b && op == RM_EW_ADD) tb = rm_retain(gout[0]);
        need_a = false;
        need_b = need_b && op == RM_EW_SUB;
    }
    int rc = rm_node_unpack(node, 0, &a);
    if (!rc) rc = rm_node_unpack(node, 1, &b);
    if (!rc) rc = grads(node->name, op, gout[0], a, b, need_a, need_b, &ta, &tb);
    if (!rc && ta) rc = rm_two_shapes_sum_to(&gin[0], ta, &cx->shp, 0);
    if (!rc && tb) rc = rm_two_shapes_sum_to(&gin[1], tb, &cx->shp, 1);
    /* a kept bf16 input of a mixed add: its gradient rounded, as the cast's backward did,
     * here under create_graph (a differentiable cast); otherwise by the engine, which can
     * hand it over unrounded to a node that rounds it as it reads it (linear under autocast) */
    for (int i = 0; i < 2 && !rc && grads == binary_grads_diff; i++)
        if (gin[i] && gin[i]->dtype != cx->dt[i]) {
            remat_tensor *w = gin[i];
            gin[i] = NULL;
            rc = remat_to_dtype(&gin[i], w, cx->dt[i]);
            rm_release(w);
        }
    rm_release(a), rm_release(b), rm_release(ta), rm_release(tb);
    return rc;
}

static remat_status binary_backward(remat_node *node, remat_tensor *const *gout,
                                    remat_tensor **gin) {
    return binary_backward_with(binary_grads, node, gout, gin);
}

static remat_status binary_backward_diff(remat_node *node, remat_tensor *const *gout,
                                         remat_tensor **gin) {
    return binary_backward_with(binary_grads_diff, node, gout, gin);
}

/* Saved slots: 0 = a, 1 = b, each only when a gradient formula reads it
 * (the for_grads bits: 1 = a's gradient, 2 = b's). */
#define NO_SAVES                                                                                   \
    {                                                                                              \
        {RM_SAVE_NONE, 0, 0}, { RM_SAVE_NONE, 1, 0 }                                               \
    }
#define BINARY_DESC(sym, call, node, flags_, ...)                                                  \
    const rm_op_desc sym = RM_OP_DESC(                                                             \
        call, node, .n_in = 2, .n_out = 1, .n_saved = 2, .flags = (flags_),                        \
        .autocast = RM_AC_PROMOTE, .kernel = RM_K_ELEMENTWISE, .params_size = sizeof(bctx),        \
        .fill_ctx = fill_ctx, .infer = infer_broadcast, .backward = binary_backward,               \
        .backward_diff = binary_backward_diff, __VA_ARGS__)
#define BINARY_OP(sym, call, node, ...)                                                            \
    BINARY_DESC(sym, call, node, RM_OPF_FLOAT | RM_OPF_SAME_DTYPE | RM_OPF_SAME_DEVICE,            \
                .saves = __VA_ARGS__)

/* add keeps a bf16 operand next to f32 uncast on the cpu (kept_mixed): its own dtype check */
BINARY_DESC(rm_op_add, "remat_add", "AddBackward", RM_OPF_FLOAT | RM_OPF_SAME_DEVICE,
            .saves = NO_SAVES, .check = add_check, .autocast_keep = 3);
BINARY_OP(rm_op_sub, "remat_sub", "SubBackward", NO_SAVES);
/* da = g * b, db = g * a */
BINARY_OP(rm_op_mul, "remat_mul", "MulBackward", {{RM_SAVE_INPUT, 0, 2}, {RM_SAVE_INPUT, 1, 1}});
/* da = g / b, db = -g * a / b^2 */
BINARY_OP(rm_op_div, "remat_div", "DivBackward", {{RM_SAVE_INPUT, 0, 2}, {RM_SAVE_INPUT, 1, 3}});
/* both formulas read a and b */
BINARY_OP(rm_op_pow, "remat_pow", "PowBackward", {{RM_SAVE_INPUT, 0, 0}, {RM_SAVE_INPUT, 1, 0}});

static remat_status binary(const rm_op_desc *d, rm_ew_op op, remat_tensor **out, remat_tensor *a,
                           remat_tensor *b, void *site) {
    const bctx params = {.ew = {op, 0}};
    remat_tensor *in[2] = {a, b};
    return rm_dispatch(d, out, in, &params, site);
}

remat_status remat_add(remat_tensor **out, remat_tensor *a, remat_tensor *b) {
    return binary(&rm_op_add, RM_EW_ADD, out, a, b, RM_OP_SITE());
}
remat_status remat_sub(remat_tensor **out, remat_tensor *a, remat_tensor *b) {
    return binary(&rm_op_sub, RM_EW_SUB, out, a, b, RM_OP_SITE());
}
remat_status remat_mul(remat_tensor **out, remat_tensor *a, remat_tensor *b) {
    return binary(&rm_op_mul, RM_EW_MUL, out, a, b, RM_OP_SITE());
}
remat_status remat_div(remat_tensor **out, remat_tensor *a, remat_tensor *b) {
    return binary(&rm_op_div, RM_EW_DIV, out, a, b, RM_OP_SITE());
}
remat_status remat_pow(remat_tensor **out, remat_tensor *a, remat_tensor *b) {
    return binary(&rm_op_pow, RM_EW_POW, out, a, b, RM_OP_SITE());
}
