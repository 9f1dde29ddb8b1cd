/* src/ops/unary.c — elementwise unary ops and scalar variants: y = f(x; p).
 *
 * Each op is a descriptor over the unary kernel (src/backends/cpu/unary.c
 * on the cpu) and one backward, dx = g * f'(s), where s is the saved x or
 * y, whichever f' needs (y is preferred: it is often kept anyway). Ops
 * that save their input save it before the kernel (RM_OPF_SAVE_EARLY), so
 * an early-stopped recomputation that ends on them skips their kernel.
 *
 * Lean saves: relu keeps a 1-bit mask (y > 0, packed 8 per byte into a u8
 * tensor) instead of y, so its saved bytes are 1/32 of an f32 output (1/64
 * of f64); the gradient g * [y > 0] is bitwise the same. */
#include <math.h>

#include "op.h"

/* Input is (any shape); dx has g's shape. Slot 0 holds s (or the mask). */
static remat_status unary_backward(remat_node *node, remat_tensor *const *gout,
                                   remat_tensor **gin) {
    const rm_unary_params *p = node->ctx;
    const bool relu = p->op == RM_U_RELU;
    remat_tensor *s = NULL;
    /* g dying after this backward (buffer donation): dx is written over it. Asked before
     * anything takes a reference of its own. */
    remat_tensor *g = relu ? NULL : rm_donation_take(node, gout, RM_BUF_GRAD, 0, RM_K_UNARY_BWD);
    const bool in_place = g != NULL;
    int rc = REMAT_OK;
    if (node->n_saved && (rc = rm_saved_contig(node, 0, NULL, &s))) goto out;
    if (!in_place) rc = rm_contig(&g, gout[0]);
    if (rc) goto out;
    if (relu && (!s || s->dtype != REMAT_U8 || remat_numel(s) != (remat_numel(g) + 7) / 8)) {
        rc =
            rm_err(REMAT_ESTATE, "%s: the saved relu mask does not match the gradient", node->name);
        goto out;
    }
    if (in_place) {
        /* dx over the dying g (the engine frees it after this backward): no
         * second gradient-sized buffer; each element is read before it is
         * written, and the values are the out-of-place kernel's */
        rm_kargs k = {.in = {g, s}, .out = {g}, .params = p};
        rc = rm_kernel_run(RM_K_UNARY_BWD, node->name, &k);
        if (!rc) gin[0] = rm_retain(g);
        goto out;
    }
    rc =
        rm_grad_kernel(node, relu ? RM_K_RELU_MASK_BWD : RM_K_UNARY_BWD, g, s, 0, NULL, p, &gin[0]);
out:
    rm_release(s);
    rm_release(g);
    return rc;
}

/* relu's saved slot: the bit mask of y > 0 (data-less in skip mode). */
static remat_status save_relu_mask(rm_op_call *c, int slot, remat_tensor **out) {
    RM_UNUSED(slot);
    remat_tensor *y = c->k.out[0];
    int64_t nb = (remat_numel(y) + 7) / 8;
    int rc = rm_new_output(out, 1, &nb, REMAT_U8, y->storage->device);
    if (rc) return rc;
    rm_kargs k = {.in = {y}, .out = {*out}};
    return rm_kernel_run(RM_K_RELU_MASK, c->op->name, &k);
}

/* ---- double backward (create_graph) -------------------------------------------------
 * The differentiable backward: the same formulas written with public ops
 * (grad mode is on, so they record a graph reaching g and the saved x or
 * y). Two formulas have no public-op form and run as registered ops with
 * a backward of their own: relu's g * mask (linear in g: its backward is
 * itself on the incoming gradient) and GELU's g * gelu'(x), whose
 * derivative in x, gelu''(x), is again written with public ops. */
extern const rm_op_desc rm_op_relu_mask_grad, rm_op_gelu_grad;

/* dx = relu_mask_grad(g, mask) = g * [mask bit], as a differentiable op. */
static remat_status relu_mask_grad(remat_tensor **out, remat_tensor *g, remat_tensor *mask) {
    const rm_unary_params p = {RM_U_RELU, 0};
    remat_tensor *gc = NULL, *in[2] = {NULL, mask};
    int rc = remat_contiguous(&gc, g);
    in[0] = gc;
    if (!rc) rc = rm_dispatch(&rm_op_relu_mask_grad, out, in, &p, NULL);
    rm_release(gc);
    return rc;
}

static remat_status gelu_grad(remat_tensor **out, rm_unary_op op, remat_tensor *g,
                              remat_tensor *x) {
    const rm_unary_params p = {op, 0};
    remat_tensor *in[2] = {g, x};
    return rm_dispatch(&rm_op_gelu_grad, out, in, &p, NULL);
}

/* A chain of public ops on temporaries: each step's result replaces `cur`
 * (the previous one released), stopping at the first failure. */
#define STEP(call)                                                                                 \
    do {                                                                                           \
        remat_tensor *nx_ = NULL;                                                                  \
        if (!rc) rc = (call);                                                                      \
        rm_release(cur);                                                                           \
        cur = rc ? NULL : nx_;                                                                     \
    } while (0)

/* gelu''(x). erf form: pdf(x) * (2 - x^2). tanh form, with
 * u = c (x + a x^3), t = tanh(u), u' = c (1 + 3 a x^2), u'' = 6 c a x:
 * (1 - t^2) (u' - x t u'^2 + x u'' / 2). */
static remat_status gelu_second(remat_tensor **out, rm_unary_op op, remat_tensor *x) {
    int rc = REMAT_OK;
    remat_tensor *cur = NULL, *x2 = NULL, *a = NULL, *t = NULL, *du = NULL;
    rc = remat_mul(&x2, x, x);
    if (op == RM_U_GELU_ERF) {
        cur = rm_retain(x2);
        STEP(remat_mul_scalar(&nx_, cur, -0.5));
        STEP(remat_exp(&nx_, cur));
        STEP(remat_mul_scalar(&nx_, cur, 0.3989422804014327)); /* 1/sqrt(2 pi) */
        if (!rc) rc = remat_rsub_scalar(&a, x2, 2.0);
        STEP(remat_mul(&nx_, cur, a));
    } else {
        const double c = 0.7978845608028654, k = 0.044715; /* sqrt(2/pi) */
        /* u = c x (1 + k x^2); t = tanh(u) */
        if (!rc) rc = remat_mul_scalar(&a, x2, k);
        cur = rm_retain(a);
        STEP(remat_add_scalar(&nx_, cur, 1.0));
        STEP(remat_mul(&nx_, cur, x));
        STEP(remat_mul_scalar(&nx_, cur, c));
        STEP(remat_tanh(&nx_, cur));
        t = cur, cur = NULL;
        /* u' = c (1 + 3 k x^2) */
        if (!rc) rc = remat_mul_scalar(&du, x2, 3.0 * c * k);
        if (!rc) {
            cur = du, du = NULL;
        }
        STEP(remat_add_scalar(&nx_, cur, c));
        du = cur, cur = NULL;
        /* inner = u' - x t u'^2 + 3 c k x^2 (x u''/2 = 3 c k x^2) */
        if (!rc) rc = remat_mul(&cur, du, du);
        STEP(remat_mul(&nx_, cur, t));
        STEP(remat_mul(&nx_, cur, x));
        STEP(remat_sub(&nx_, du, cur));
        rm_release_p(&a);
        if (!rc) rc = remat_mul_scalar(&a, x2, 3.0 * c * k);
        STEP(remat_add(&nx_, cur, a));
        /* times 1 - t^2 */
        rm_release_p(&a);
        if (!rc) rc = remat_mul(&a, t, t);
        remat_tensor *b = NULL;
        if (!rc) rc = remat_rsub_scalar(&b, a, 1.0);
        STEP(remat_mul(&nx_, cur, b));
        rm_release(b);
    }
    rm_release(x2), rm_release(a), rm_release(t), rm_release(du);
    *out = cur;
    return rc;
}

/* dx for a unary op, with public ops. Slot 0: s (or relu's mask). */
static remat_status unary_backward_diff(remat_node *node, remat_tensor *const *gout,
                                        remat_tensor **gin) {
    const rm_unary_params *p = node->ctx;
    remat_tensor *s = NULL, *g = gout[0], *cur = NULL, *a = NULL;
    int rc = node->n_saved ? rm_node_unpack(node, 0, &s) : REMAT_OK;
    if (rc) return rc;
    switch (p->op) {
    case RM_U_NEG:
    case RM_U_RSUB: rc = remat_neg(&cur, g); break;
    case RM_U_ADD: cur = rm_retain(g); break;
    case RM_U_MUL: rc = remat_mul_scalar(&cur, g, p->p); break;
    case RM_U_EXP: rc = remat_mul(&cur, g, s); break; /* g y */
    case RM_U_LOG: rc = remat_div(&cur, g, s); break; /* g / x */
    case RM_U_SQRT:                                   /* g / (2 y) */
        rc = remat_div(&cur, g, s);
        STEP(remat_mul_scalar(&nx_, cur, 0.5));
        break;
    case RM_U_TANH: /* g (1 - y^2) */
        rc = remat_mul(&a, s, s);
        if (!rc) rc = remat_rsub_scalar(&cur, a, 1.0);
        STEP(remat_mul(&nx_, g, cur));
        break;
    case RM_U_SIGMOID: /* g y (1 - y) */
        rc = remat_rsub_scalar(&a, s, 1.0);
        if (!rc) rc = remat_mul(&cur, s, a);
        STEP(remat_mul(&nx_, g, cur));
        break;
    case RM_U_POW: /* g p x^(p-1) */
        if (p->p == 0.0) {
            rc = remat_mul_scalar(&cur, g, 0.0);
            break;
        }
        rc = remat_pow_scalar(&cur, s, p->p - 1.0);
        STEP(remat_mul_scalar(&nx_, cur, p->p));
        STEP(remat_mul(&nx_, g, cur));
        break;
    case RM_U_RELU: rc = relu_mask_grad(&cur, g, s); break;
    case RM_U_GELU_ERF:
    case RM_U_GELU_TANH: rc = gelu_grad(&cur, p->op, g, s); break;
    case RM_U_SILU: /* g sigmoid(x) (1 + x (1 - sigmoid(x))): sigmoid and products, to any order */
        rc = remat_sigmoid(&a, s);
        if (!rc) rc = remat_rsub_scalar(&cur, a, 1.0);
        STEP(remat_mul(&nx_, cur, s));
        STEP(remat_add_scalar(&nx_, cur, 1.0));
        STEP(remat_mul(&nx_, cur, a));
        STEP(remat_mul(&nx_, g, cur));
        break;
    default: rc = rm_no_double_backward(node, NULL); break;
    }
    rm_release(s);
    rm_release(a);
    if (!rc) gin[0] = cur;
    else rm_release(cur);
    return rc;
}

/* relu_mask_grad: y = g * [mask bit]; linear in g, so its gradient is the
 * same op on the incoming gradient. Slot 0: the mask. */
static remat_status relu_mask_grad_backward(remat_node *node, remat_tensor *const *gout,
                                            remat_tensor **gin) {
    remat_tensor *mask = NULL;
    int rc = rm_node_unpack(node, 0, &mask);
    if (!rc) rc = relu_mask_grad(&gin[0], gout[0], mask);
    rm_release(mask);
    return rc;
}

const rm_op_desc rm_op_relu_mask_grad = RM_OP_DESC(
    "ReluBackward", "ReluBackwardBackward", .n_in = 2, .n_out = 1, .n_saved = 1, .no_grad_in = 2u,
    .flags = RM_OPF_FLOAT_IN0 | RM_OPF_CONTIGUOUS | RM_OPF_SAVE_EARLY, .kernel = RM_K_RELU_MASK_BWD,
    .params_size = sizeof(rm_unary_params), .saves = {{RM_SAVE_INPUT, 1, 0}},
    .backward = relu_mask_grad_backward, .backward_diff = relu_mask_grad_backward);

/* gelu_grad: y = g * gelu'(x). dg = gelu_grad(gy, x); dx = gy * g * gelu''(x).
 * Slots: 0 = g (read by x's gradient), 1 = x. */
static remat_status gelu_grad_backward(remat_node *node, remat_tensor *const *gout,
                                       remat_tensor **gin) {
    const rm_unary_params *p = node->ctx;
    remat_tensor *g = NULL, *x = NULL, *cur = NULL;
    int rc = rm_node_unpack(node, 1, &x);
    if (!rc && node->next[0].node) rc = gelu_grad(&gin[0], p->op, gout[0], x);
    if (!rc && node->next[1].node) {
        rc = rm_node_unpack(node, 0, &g);
        if (!rc) rc = gelu_second(&cur, p->op, x);
        STEP(remat_mul(&nx_, cur, g));
        STEP(remat_mul(&nx_, cur, gout[0]));
        if (!rc) gin[1] = cur, cur = NULL;
    }
    rm_release(g), rm_release(x), rm_release(cur);
    return rc;
}

const rm_op_desc rm_op_gelu_grad =
    RM_OP_DESC("GeluBackward", "GeluBackwardBackward", .n_in = 2, .n_out = 1, .n_saved = 2,
               .flags = RM_OPF_FLOAT | RM_OPF_SAME_DTYPE | RM_OPF_CONTIGUOUS | RM_OPF_SAVE_EARLY,
               .kernel = RM_K_UNARY_BWD, .params_size = sizeof(rm_unary_params),
               .saves = {{RM_SAVE_INPUT, 0, 2}, {RM_SAVE_INPUT, 1, 0}},
               .backward = gelu_grad_backward, .backward_diff = gelu_grad_backward);
#undef STEP

#define SAVES_NOTHING                                                                              \
    0, 0, {                                                                                        \
        { 0 }                                                                                      \
    }
#define SAVES_X                                                                                    \
    RM_OPF_SAVE_EARLY, 1, {                                                                        \
        { RM_SAVE_INPUT, 0, 0 }                                                                    \
    }
#define SAVES_Y                                                                                    \
    0, 1, {                                                                                        \
        { RM_SAVE_OUTPUT, 0, 0 }                                                                   \
    }
#define SAVES_MASK                                                                                 \
    0, 1, {                                                                                        \
        { RM_SAVE_CUSTOM, 0, 0 }                                                                   \
    }
#define UNARY_OP_(sym, call, node, save_flags, n_saved_, ...)                                      \
    const rm_op_desc sym =                                                                         \
        RM_OP_DESC(call, node, .n_in = 1, .n_out = 1, .n_saved = n_saved_,                         \
                   .flags = RM_OPF_FLOAT | RM_OPF_CONTIGUOUS | save_flags, .kernel = RM_K_UNARY,   \
                   .params_size = sizeof(rm_unary_params), .saves = __VA_ARGS__,                   \
                   .save_custom = save_relu_mask, .backward = unary_backward,                      \
                   .backward_diff = unary_backward_diff)
#define UNARY_OP(sym, call, node, plan) UNARY_OP_(sym, call, node, plan)

UNARY_OP(rm_op_neg, "remat_neg", "NegBackward", SAVES_NOTHING);
UNARY_OP(rm_op_exp, "remat_exp", "ExpBackward", SAVES_Y);
UNARY_OP(rm_op_log, "remat_log", "LogBackward", SAVES_X);
UNARY_OP(rm_op_sqrt, "remat_sqrt", "SqrtBackward", SAVES_Y);
UNARY_OP(rm_op_tanh, "remat_tanh", "TanhBackward", SAVES_Y);
UNARY_OP(rm_op_sigmoid, "remat_sigmoid", "SigmoidBackward", SAVES_Y);
UNARY_OP(rm_op_relu, "remat_relu", "ReluBackward", SAVES_MASK);
UNARY_OP(rm_op_gelu, "remat_gelu", "GeluBackward", SAVES_X);
UNARY_OP(rm_op_silu, "remat_silu", "SiluBackward", SAVES_X);
UNARY_OP(rm_op_pow_scalar, "remat_pow_scalar", "PowBackward", SAVES_X);
UNARY_OP(rm_op_add_scalar, "remat_add_scalar", "AddBackward", SAVES_NOTHING);
UNARY_OP(rm_op_sub_scalar, "remat_sub_scalar", "AddBackward", SAVES_NOTHING);
UNARY_OP(rm_op_mul_scalar, "remat_mul_scalar", "MulBackward", SAVES_NOTHING);
UNARY_OP(rm_op_div_scalar, "remat_div_scalar", "MulBackward", SAVES_NOTHING);
UNARY_OP(rm_op_rsub_scalar, "remat_rsub_scalar", "RsubBackward", SAVES_NOTHING);

static remat_status unary(const rm_op_desc *d, rm_unary_op op, double p, remat_tensor **out,
                          remat_tensor *a, void *site) {
    const rm_unary_params params = {op, p};
    remat_tensor *in[1] = {a};
    return rm_dispatch(d, out, in, &params, site);
}

/* The entry points: remat_<name>(out, a) runs rm_op_<name> with kernel op
 * `uop` (no parameter); remat_<name>(out, a, s) with s as the kernel's. */
#define UNARY_ENTRY(name, uop)                                                                     \
    remat_status remat_##name(remat_tensor **out, remat_tensor *a) {                               \
        return unary(&rm_op_##name, uop, 0, out, a, RM_OP_SITE());                                 \
    }
#define SCALAR_ENTRY(name, uop)                                                                    \
    remat_status remat_##name(remat_tensor **out, remat_tensor *a, double s) {                     \
        return unary(&rm_op_##name, uop, s, out, a, RM_OP_SITE());                                 \
    }
UNARY_ENTRY(neg, RM_U_NEG)
UNARY_ENTRY(exp, RM_U_EXP)
UNARY_ENTRY(log, RM_U_LOG)
UNARY_ENTRY(sqrt, RM_U_SQRT)
UNARY_ENTRY(tanh, RM_U_TANH)
UNARY_ENTRY(sigmoid, RM_U_SIGMOID)
UNARY_ENTRY(relu, RM_U_RELU)
UNARY_ENTRY(silu, RM_U_SILU)
SCALAR_ENTRY(pow_scalar, RM_U_POW)
SCALAR_ENTRY(add_scalar, RM_U_ADD)
SCALAR_ENTRY(rsub_scalar, RM_U_RSUB)
SCALAR_ENTRY(mul_scalar, RM_U_MUL)

remat_status remat_gelu(remat_tensor **out, remat_tensor *a, remat_gelu_approx approximate) {
    if (approximate != REMAT_GELU_ERF && approximate != REMAT_GELU_TANH)
        return rm_err(REMAT_EINVAL,
                      "remat_gelu: approximate must be REMAT_GELU_ERF or "
                      "REMAT_GELU_TANH, got %d",
                      (int)approximate);
    rm_unary_op op = approximate == REMAT_GELU_ERF ? RM_U_GELU_ERF : RM_U_GELU_TANH;
    return unary(&rm_op_gelu, op, 0, out, a, RM_OP_SITE());
}
remat_status remat_sub_scalar(remat_tensor **out, remat_tensor *a, double s) {
    return unary(&rm_op_sub_scalar, RM_U_ADD, -s, out, a, RM_OP_SITE());
}
remat_status remat_div_scalar(remat_tensor **out, remat_tensor *a, double s) {
    /* as PyTorch: x / 0 = inf/nan */
    return unary(&rm_op_div_scalar, RM_U_MUL, s == 0.0 ? INFINITY : 1.0 / s, out, a, RM_OP_SITE());
}
