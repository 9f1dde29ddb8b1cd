/* src/ops/select.c — selection: masked_fill and where.
 *
 * Both are y = cond ? A : B over a broadcast shape, where A and B are each
 * a tensor or a scalar; cond may be i64, f32 or f64 (non-zero = true, so a
 * NaN counts as true). The kernel (RM_K_SELECT; src/backends/cpu/select.c)
 * computes in the value dtype, not the condition's. Their backward passes
 * are the same selection applied to the output gradient with 0 in place of
 * the other branch, reduced to each input's shape with rm_sum_to. */
#include <string.h>

#include "op.h"

/* New tensor of g's shape: cond ? g : 0 (g_when_true) or cond ? 0 : g. */
static remat_status masked_grad(const char *call, remat_tensor **out, remat_tensor *g,
                                remat_tensor *cond, bool g_when_true) {
    int rc = rm_new_output(out, g->ndim, g->shape, g->dtype, g->storage->device);
    if (rc) return rc;
    const rm_select_params p = {.cond = 1, .a = g_when_true ? 0 : -1, .b = g_when_true ? -1 : 0};
    rm_kargs k = {.in = {g, cond}, .out = {*out}, .params = &p};
    rc = rm_kernel_run(RM_K_SELECT, call, &k);
    if (rc) rm_release_p(out);
    return rc;
}

/* A condition operand; its values are read by the kernel only. */
static remat_status check_cond(const char *call, const char *arg, const remat_tensor *c) {
    return rm_check_dtype_in(
        call, arg, c, RM_DTYPE_BIT(REMAT_I64) | RM_DTYPE_BIT(REMAT_F32) | RM_DTYPE_BIT(REMAT_F64),
        "i64, f32 or f64");
}

/* ---- masked_fill ------------------------------------------------------------------- */
/* a (any shape), mask (broadcast to a's shape without changing it). */
static remat_status masked_fill_check(const rm_op_call *c) {
    const char *call = c->op->name;
    remat_tensor *a = c->in[0], *mask = c->in[1];
    int rc = rm_check_float_dtype(call, "a", a);
    if (!rc) rc = check_cond(call, "mask", mask);
    if (!rc) rc = rm_check_same_device(call, a, mask);
    if (rc) return rc;
    int nd;
    int64_t shape[REMAT_MAX_DIMS];
    rc = rm_broadcast_shape(call, a->ndim, a->shape, mask->ndim, mask->shape, &nd, shape);
    if (rc) return rc;
    if (nd != a->ndim || memcmp(shape, a->shape, sizeof(int64_t) * (size_t)nd) != 0) {
        char b1[200], b2[200];
        return rm_err(REMAT_ESHAPE, "%s: mask %s cannot be broadcast to the shape of a %s", call,
                      rm_tensor_str(mask, b1, sizeof b1), rm_tensor_str(a, b2, sizeof b2));
    }
    return REMAT_OK;
}

/* Saved slot 0: the mask. da = mask ? 0 : g. */
static remat_status masked_fill_backward(remat_node *node, remat_tensor *const *gout,
                                         remat_tensor **gin) {
    remat_tensor *mask = NULL;
    int rc = rm_node_unpack(node, 0, &mask);
    if (rc) return rc;
    if (node->next[0].node) rc = masked_grad(node->name, &gin[0], gout[0], mask, false);
    rm_release(mask);
    return rc;
}

/* create_graph: da = masked_fill(g, mask, 0), itself differentiable. */
static remat_status masked_fill_backward_diff(remat_node *node, remat_tensor *const *gout,
                                              remat_tensor **gin) {
    remat_tensor *mask = NULL;
    int rc = rm_node_unpack(node, 0, &mask);
    if (!rc && node->next[0].node) rc = remat_masked_fill(&gin[0], gout[0], mask, 0.0);
    rm_release(mask);
    return rc;
}

const rm_op_desc rm_op_masked_fill =
    RM_OP_DESC("remat_masked_fill", "MaskedFillBackward", .n_in = 2, .n_out = 1, .n_saved = 1,
               .no_grad_in = 2u, .flags = RM_OPF_OWN_CHECKS, .kernel = RM_K_SELECT,
               .check = masked_fill_check, .saves = {{RM_SAVE_INPUT, 1, 0}},
               .backward = masked_fill_backward, .backward_diff = masked_fill_backward_diff);

remat_status remat_masked_fill(remat_tensor **out, remat_tensor *a, remat_tensor *mask,
                               double value) {
    const rm_select_params p = {.cond = 1, .a = -1, .b = 0, .va = value};
    remat_tensor *in[2] = {a, mask};
    return rm_dispatch(&rm_op_masked_fill, out, in, &p, RM_OP_SITE());
}

/* ---- where ---------------------------------------------------------------------------- */
/* The kernel's operands, and a's and b's shapes (the gradients are summed
 * back down to them). */
typedef struct wctx {
    rm_select_params sel;
    rm_two_shapes shp;
} wctx;

static remat_status where_check(const rm_op_call *c) {
    const char *call = c->op->name;
    remat_tensor *cond = c->in[0], *a = c->in[1], *b = c->in[2];
    int rc = check_cond(call, "cond", cond);
    if (!rc) rc = rm_check_float_dtype(call, "a", a);
    if (!rc) rc = rm_check_float_dtype(call, "b", b);
    if (!rc) rc = rm_check_same_dtype(call, a, b);
    if (!rc) rc = rm_check_same_device(call, a, b);
    if (!rc) rc = rm_check_same_device(call, cond, a);
    return rc;
}

/* y: the broadcast shape of cond, a and b, in a's dtype. */
static remat_status where_infer(const rm_op_call *c, rm_out_spec *out) {
    remat_tensor *cond = c->in[0], *a = c->in[1], *b = c->in[2];
    int nd1;
    int64_t s1[REMAT_MAX_DIMS];
    int rc = rm_broadcast_shape(c->op->name, cond->ndim, cond->shape, a->ndim, a->shape, &nd1, s1);
    if (!rc)
        rc =
            rm_broadcast_shape(c->op->name, nd1, s1, b->ndim, b->shape, &out[0].ndim, out[0].shape);
    out[0].dtype = a->dtype;
    return rc;
}

static void where_fill_ctx(const rm_op_call *c, void *ctx) {
    wctx *cx = ctx;
    rm_two_shapes_of(&cx->shp, c->in[1], c->in[2]);
}

/* Saved slot 0: cond. da = sum_to(cond ? g : 0), db = sum_to(cond ? 0 : g). */
static remat_status where_backward(remat_node *node, remat_tensor *const *gout,
                                   remat_tensor **gin) {
    wctx *cx = node->ctx;
    remat_tensor *cond = NULL, *t = NULL;
    int rc = rm_node_unpack(node, 0, &cond);
    if (rc) return rc;
    for (int i = 0; i < 2 && !rc; i++) {
        if (!node->next[i].node) continue;
        rc = masked_grad(node->name, &t, gout[0], cond, i == 0);
        if (!rc) rc = rm_two_shapes_sum_to(&gin[i], t, &cx->shp, i);
        rm_release_p(&t);
    }
    rm_release(cond);
    return rc;
}

/* create_graph: da = sum_to(where(cond, g, 0)), db = sum_to(where(cond, 0, g)). */
static remat_status where_backward_diff(remat_node *node, remat_tensor *const *gout,
                                        remat_tensor **gin) {
    wctx *cx = node->ctx;
    remat_tensor *g = gout[0], *cond = NULL, *z = NULL, *t = NULL;
    int rc = rm_node_unpack(node, 0, &cond);
    if (!rc) rc = remat_zeros(&z, 0, NULL, g->dtype, g->storage->device);
    for (int i = 0; i < 2 && !rc; i++) {
        if (!node->next[i].node) continue;
        rc = i == 0 ? remat_where(&t, cond, g, z) : remat_where(&t, cond, z, g);
        if (!rc) rc = rm_two_shapes_sum_to(&gin[i], t, &cx->shp, i);
        rm_release_p(&t);
    }
    rm_release(cond), rm_release(z);
    return rc;
}

const rm_op_desc rm_op_where =
    RM_OP_DESC("remat_where", "WhereBackward", .n_in = 3, .n_out = 1, .n_saved = 1,
               .no_grad_in = 1u, .dtype_in = 1, .flags = RM_OPF_OWN_CHECKS, .kernel = RM_K_SELECT,
               .params_size = sizeof(wctx), .fill_ctx = where_fill_ctx, .check = where_check,
               .infer = where_infer, .saves = {{RM_SAVE_INPUT, 0, 0}}, .backward = where_backward,
               .backward_diff = where_backward_diff);

remat_status remat_where(remat_tensor **out, remat_tensor *cond, remat_tensor *a, remat_tensor *b) {
    const wctx p = {.sel = {.cond = 0, .a = 1, .b = 2}};
    remat_tensor *in[3] = {cond, a, b};
    return rm_dispatch(&rm_op_where, out, in, &p, RM_OP_SITE());
}
