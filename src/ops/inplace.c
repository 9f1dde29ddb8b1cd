/* src/ops/inplace.c — in-place ops: add_, mul_, mul_scalar_, relu_, zero_, copy_.
 *
 * Each op checks rm_check_inplace first (a leaf that requires grad cannot be
 * modified while grad mode is on), writes through the target's strides (it
 * may be a non-contiguous view), and bumps the storage version counter, so
 * that backward detects saved tensors that were changed afterwards. The
 * driver does the in-place part (RM_OPF_INPLACE, src/ops/op.h):
 * the operand read from a copy when it overlaps the target, the version
 * bump, the save before the rebase.
 *
 * Autograd: when grad mode is on and the target or the other operand
 * requires grad, a node is recorded whose input 0 is the target's OLD
 * history (rm_node_new captures the edge before rm_node_set_output rebases
 * the target onto the new node) and input 1 the other operand. In-place on
 * a view is refused then: its base would keep the old history and silently
 * get wrong gradients (remat does not track view relations). */
#include <string.h>

#include "op.h"

typedef enum ipop { IP_ADD, IP_MUL, IP_MUL_SCALAR, IP_RELU, IP_ZERO, IP_COPY } ipop;

/* The parameters (the elementwise kernel reads ew) and, in the node's ctx,
 * operand b's shape and dtype (its gradient is summed and converted back). */
typedef struct ipctx {
    rm_ew_params ew; /* formula and alpha / scalar */
    ipop op;
    int ndb;
    int64_t sb[REMAT_MAX_DIMS];
    remat_dtype db;
} ipctx;

/* ---- validation ------------------------------------------------------------------ */
/* Writing through a view whose elements share memory (an expanded view)
 * would make the result depend on the iteration order. */
static remat_status check_no_internal_overlap(const char *call, const remat_tensor *a) {
    for (int d = 0; d < a->ndim; d++)
        if (a->strides[d] == 0 && a->shape[d] > 1) {
            char b[200];
            return rm_err(REMAT_EUNSUPPORTED,
                          "%s: %s is an expanded view in which several elements share one "
                          "memory location; in-place writes to it are not supported (make it "
                          "contiguous first)",
                          call, rm_tensor_str(a, b, sizeof b));
        }
    return REMAT_OK;
}

/* b must broadcast to a's shape without changing it. */
static remat_status check_broadcast_to(const char *call, const remat_tensor *a,
                                       const remat_tensor *b) {
    int nd;
    int64_t shape[REMAT_MAX_DIMS];
    int rc = rm_broadcast_shape(call, a->ndim, a->shape, b->ndim, b->shape, &nd, shape);
    if (rc) return rc;
    if (nd != a->ndim || memcmp(shape, a->shape, sizeof(int64_t) * (size_t)nd) != 0) {
        char b1[160], b2[160];
        return rm_err(REMAT_ESHAPE,
                      "%s: %s cannot be broadcast to the shape %s of the tensor modified in "
                      "place (an in-place op cannot change its shape)",
                      call, rm_tensor_str(b, b1, sizeof b1),
                      rm_shape_str(a->ndim, a->shape, b2, sizeof b2));
    }
    return REMAT_OK;
}

/* The operand b (add_, mul_: float of a's dtype; copy_: any) on a's device,
 * broadcasting to a's shape. */
static remat_status check_operand(const char *call, ipop op, const remat_tensor *a,
                                  const remat_tensor *b) {
    int rc = op == IP_COPY ? rm_check_tensor(call, "src", b) : rm_check_float_dtype(call, "b", b);
    if (!rc && op != IP_COPY) rc = rm_check_same_dtype(call, a, b);
    if (!rc) rc = rm_check_same_device(call, a, b);
    if (!rc) rc = check_broadcast_to(call, a, b);
    return rc;
}

/* What a recorded node cannot follow: a gradient into i64 (copy_ of a
 * tensor requiring grad), in place on a view. */
static remat_status check_record(const char *call, remat_tensor *a, remat_tensor *const *in,
                                 int n_in) {
    if (!rm_needs_grad(n_in, in)) return REMAT_OK;
    char bb[200];
    if (a->dtype == REMAT_I64)
        return rm_err(REMAT_EDTYPE, "%s: cannot record a gradient into the i64 tensor %s", call,
                      rm_tensor_str(a, bb, sizeof bb));
    if (a->is_view)
        return rm_err(REMAT_EUNSUPPORTED,
                      "%s: in-place on a view of a tensor that requires grad is not supported "
                      "(target %s); use the out-of-place op",
                      call, rm_tensor_str(a, bb, sizeof bb));
    return REMAT_OK;
}

/* Every argument check, in the order the messages are tested in. */
static remat_status inplace_check(const rm_op_call *c) {
    const char *call = c->op->name;
    const ipop op = ((const ipctx *)c->params)->op;
    remat_tensor *a = c->in[0];
    int rc;
    if (op == IP_ZERO || op == IP_COPY) { /* plain data movement: any dtype */
        rc = rm_check_tensor(call, "a", a);
    } else {
        rc = rm_check_float_dtype(call, "a", a);
    }
    if (!rc && c->op->n_in > 1) rc = check_operand(call, op, a, c->in[1]);
    if (!rc) rc = rm_check_inplace(call, a);
    if (!rc) rc = check_no_internal_overlap(call, a);
    if (!rc) rc = check_record(call, a, c->in, c->op->n_in);
    return rc;
}

static void inplace_fill_ctx(const rm_op_call *c, void *ctx) {
    ipctx *cx = ctx;
    if (c->op->n_in < 2) return;
    const remat_tensor *b = c->in[1];
    cx->ndb = b->ndim;
    memcpy(cx->sb, b->shape, sizeof cx->sb);
    cx->db = b->dtype;
}

/* mul_'s saves, before the kernel overwrites a. Slot 0 (for db = g * a_old):
 * a copy of a. Slot 1 (for da = g * b): b as the kernel reads it, or a copy
 * of it when it is a itself (mul_(x, x)). */
static remat_status mul_save(rm_op_call *c, int slot, remat_tensor **out) {
    remat_tensor *t = slot == 0 ? c->in[0] : c->k.in[1];
    if (slot == 0 || remat_shares_storage(c->in[0], t)) return rm_copy_new(out, t);
    *out = rm_retain(t);
    return REMAT_OK;
}

/* ---- backward ---------------------------------------------------------------------- */
static remat_status zeros_like(remat_tensor **out, const remat_tensor *t) {
    int rc = rm_new_output(out, t->ndim, t->shape, t->dtype, t->storage->device);
    if (!rc) rc = rm_kernel_fill(*out, 0.0, "in-place backward");
    if (rc) rm_release_p(out);
    return rc;
}

/* New tensor of g's shape = f(g, x). */
static remat_status ew_new(remat_tensor **out, int op, remat_tensor *g, remat_tensor *x, double p) {
    int rc = rm_new_output(out, g->ndim, g->shape, g->dtype, g->storage->device);
    if (rc) return rc;
    return rm_ew_run("in-place backward", op, *out, g, x, NULL, p);
}

/* Reduces a gradient of a's shape to operand b's shape and dtype. */
static remat_status grad_for_b(remat_tensor **out, remat_tensor *t, const ipctx *cx) {
    remat_tensor *s = NULL;
    int rc = rm_sum_to(&s, t, cx->ndb, cx->sb);
    if (rc) return rc;
    if (s->dtype == cx->db) {
        *out = s;
        return REMAT_OK;
    }
    rc = rm_new_output(out, s->ndim, s->shape, cx->db, s->storage->device);
    if (!rc) rc = rm_copy_into(*out, s);
    if (rc) rm_release_p(out);
    rm_release(s);
    return rc;
}

/* The gradients of one op (s0, s1: its saved slots). */
static remat_status inplace_grads(const ipctx *cx, remat_tensor *g, remat_tensor *s0,
                                  remat_tensor *s1, bool need_a, bool need_b, remat_tensor **gin) {
    remat_tensor *t = NULL;
    int rc = REMAT_OK;
    switch (cx->op) {
    case IP_ADD: /* a + alpha * b */
        if (need_a) gin[0] = rm_retain(g);
        if (need_b) rc = ew_new(&t, RM_EW_SCALE, g, NULL, cx->ew.p);
        break;
    case IP_MUL: /* a_old * b */
        if (need_a) rc = ew_new(&gin[0], RM_EW_MUL, g, s1, 0);
        if (!rc && need_b) rc = ew_new(&t, RM_EW_MUL, g, s0, 0);
        break;
    case IP_MUL_SCALAR:
        if (need_a) rc = ew_new(&gin[0], RM_EW_SCALE, g, NULL, cx->ew.p);
        break;
    case IP_RELU: /* s0 is the result; > 0 exactly where the input was */
        if (need_a) rc = ew_new(&gin[0], RM_EW_RELU_BWD, g, s0, 0);
        break;
    case IP_ZERO: /* the old value no longer matters */
        if (need_a) rc = zeros_like(&gin[0], g);
        break;
    case IP_COPY:
        if (need_a) rc = zeros_like(&gin[0], g);
        if (need_b) t = rm_retain(g);
        break;
    }
    if (!rc && t) rc = grad_for_b(&gin[1], t, cx);
    rm_release(t);
    return rc;
}

/* Saved slots: mul_ 0 = original a (for db), 1 = b (for da); relu_ 0 =
 * result; the others none. */
static remat_status inplace_backward(remat_node *node, remat_tensor *const *gout,
                                     remat_tensor **gin) {
    remat_tensor *s[2] = {NULL, NULL};
    bool need_a = node->next[0].node != NULL;
    bool need_b = node->n_next > 1 && node->next[1].node != NULL;
    int rc = REMAT_OK;
    for (int i = 0; !rc && i < node->n_saved && i < 2; i++) rc = rm_node_unpack(node, i, &s[i]);
    if (!rc) rc = inplace_grads(node->ctx, gout[0], s[0], s[1], need_a, need_b, gin);
    for (int i = 0; i < 2; i++) rm_release(s[i]);
    return rc;
}

/* create_graph: the same gradients with public ops. mul_'s old value of a
 * is a snapshot without a graph (as PyTorch's original_self), and so is b when it
 * shares a's storage: through them there is no second derivative, so that
 * case refuses instead of dropping the term. */
static remat_status inplace_backward_diff(remat_node *node, remat_tensor *const *gout,
                                          remat_tensor **gin) {
    const ipctx *cx = node->ctx;
    remat_tensor *g = gout[0], *s = NULL, *t = NULL, *u = NULL;
    bool need_a = node->next[0].node != NULL;
    bool need_b = node->n_next > 1 && node->next[1].node != NULL;
    int rc = REMAT_OK;
    switch (cx->op) {
    case IP_ADD: /* a + alpha * b */
        if (need_a) gin[0] = rm_retain(g);
        if (need_b) rc = remat_mul_scalar(&t, g, cx->ew.p);
        break;
    case IP_MUL_SCALAR:
        if (need_a) rc = remat_mul_scalar(&gin[0], g, cx->ew.p);
        break;
    case IP_MUL: /* a_old * b */
        if (need_a && need_b)
            return rm_no_double_backward(node, "when both operands require grad (the old "
                                               "value of a is a snapshot without a graph)");
        if (need_a && !(rc = rm_node_unpack(node, 1, &s))) rc = remat_mul(&gin[0], g, s);
        if (!rc && need_b && !(rc = rm_node_unpack(node, 0, &s))) rc = remat_mul(&t, g, s);
        break;
    case IP_RELU: /* g * [result > 0]: linear in g, its own adjoint */
        return rm_backward_linear(node, gout, gin, rm_adjoint_self);
    case IP_ZERO:
    case IP_COPY: /* a's gradient is a constant zero */
        if (need_a) rc = zeros_like(&gin[0], g);
        if (cx->op == IP_COPY && need_b) t = rm_retain(g);
        break;
    }
    if (!rc && t) rc = rm_sum_to(&u, t, cx->ndb, cx->sb);
    if (!rc && u)
        rc = u->dtype == cx->db ? (gin[1] = rm_retain(u), REMAT_OK)
                                : remat_to_dtype(&gin[1], u, cx->db);
    rm_release(s), rm_release(t), rm_release(u);
    return rc;
}

/* ---- descriptors ----------------------------------------------------------------- */
static const char *const k_src_names[] = {"a", "src"};

#define INPLACE_OP(sym, call, node, nin, kern, flags_, ...)                                        \
    const rm_op_desc sym = RM_OP_DESC(                                                             \
        call, node, .n_in = nin, .n_out = 1,                                                       \
        .flags = RM_OPF_OWN_CHECKS | RM_OPF_INPLACE | (flags_), .kernel = kern,                    \
        .params_size = sizeof(ipctx), .fill_ctx = inplace_fill_ctx, .check = inplace_check,        \
        .backward = inplace_backward, .backward_diff = inplace_backward_diff, __VA_ARGS__)

INPLACE_OP(rm_op_add_, "remat_add_", "AddBackward", 2, RM_K_ELEMENTWISE, 0, .n_saved = 0);
/* saves a's old value and b before overwriting a */
INPLACE_OP(rm_op_mul_, "remat_mul_", "MulBackward", 2, RM_K_ELEMENTWISE, RM_OPF_SAVE_EARLY,
           .n_saved = 2, .saves = {{RM_SAVE_CUSTOM, 0, 2}, {RM_SAVE_CUSTOM, 1, 1}},
           .save_custom = mul_save);
INPLACE_OP(rm_op_mul_scalar_, "remat_mul_scalar_", "MulBackward", 1, RM_K_ELEMENTWISE, 0,
           .n_saved = 0);
/* saves its result (a at its new version) */
INPLACE_OP(rm_op_relu_, "remat_relu_", "ReluBackward", 1, RM_K_ELEMENTWISE, 0, .n_saved = 1,
           .saves = {{RM_SAVE_OUTPUT, 0, 0}});
INPLACE_OP(rm_op_zero_, "remat_zero_", "ZeroBackward", 1, RM_K_ZERO, 0, .n_saved = 0);
INPLACE_OP(rm_op_copy_, "remat_copy_", "CopyBackward", 2, RM_K_COPY_INTO, 0, .n_saved = 0,
           .arg_names = k_src_names);

/* The public entries (in-place ops are never served from a selective-checkpoint cache). */
static remat_status inplace(const rm_op_desc *d, ipop op, rm_ew_op ew, remat_tensor *a,
                            remat_tensor *b, double p, void *site) {
    const ipctx params = {.ew = {ew, p}, .op = op};
    remat_tensor *in[2] = {a, b};
    return rm_dispatch(d, NULL, in, &params, site);
}

remat_status remat_add_(remat_tensor *a, remat_tensor *b, double alpha) {
    return inplace(&rm_op_add_, IP_ADD, RM_EW_AXPY, a, b, alpha, RM_OP_SITE());
}
remat_status remat_mul_(remat_tensor *a, remat_tensor *b) {
    return inplace(&rm_op_mul_, IP_MUL, RM_EW_MUL, a, b, 0, RM_OP_SITE());
}
remat_status remat_mul_scalar_(remat_tensor *a, double s) {
    return inplace(&rm_op_mul_scalar_, IP_MUL_SCALAR, RM_EW_SCALE, a, NULL, s, RM_OP_SITE());
}
remat_status remat_relu_(remat_tensor *a) {
    return inplace(&rm_op_relu_, IP_RELU, RM_EW_RELU, a, NULL, 0, RM_OP_SITE());
}
remat_status remat_zero_(remat_tensor *a) {
    return inplace(&rm_op_zero_, IP_ZERO, RM_EW_FILL, a, NULL, 0, RM_OP_SITE());
}
remat_status remat_copy_(remat_tensor *a, remat_tensor *src) {
    return inplace(&rm_op_copy_, IP_COPY, RM_EW_FILL, a, src, 0, RM_OP_SITE());
}
