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

#include "../dispatch/dispatch.h"

/* Input is (any shape); dx has g's shape. Slot 0 holds s (or the mask). */
static int unary_backward(remat_node *node, remat_tensor *const *gout, remat_tensor **gin) {
    const rm_unary_params *p = node->ctx;
    const bool relu = p->op == RM_U_RELU;
    remat_tensor *s = NULL, *g = NULL, *dx = NULL;
    int rc = REMAT_OK;
    if (node->n_saved && (rc = rm_saved_contig(node, 0, NULL, &s))) goto out;
    rc = rm_contig(&g, gout[0]);
    if (!rc) rc = rm_new_output(&dx, g->ndim, g->shape, g->dtype, g->storage->device);
    if (rc) goto out;
    if (relu && (!s || s->dtype != REMAT_U8 || remat_numel(s) != (remat_numel(g) + 7) / 8)) {
        rc = rm_err(REMAT_ESTATE, "%s: the saved relu mask does not match the gradient",
                    node->name);
        goto out;
    }
    rm_kargs k = {.in = {g, s}, .out = {dx}, .params = p};
    rc = rm_kernel_run(relu ? RM_K_RELU_MASK_BWD : RM_K_UNARY_BWD, node->name, &k);
    if (rc) goto out;
    gin[0] = dx;
    dx = NULL;
out:
    remat_release(s);
    remat_release(g);
    remat_release(dx);
    return rc;
}

/* relu's saved slot: the bit mask of y > 0 (data-less in skip mode). */
static int save_relu_mask(rm_op_call *c, int slot, remat_tensor **out) {
    RM_UNUSED(slot);
    remat_tensor *y = c->k.out[0];
    int64_t nb = (remat_numel(y) + 7) / 8;
    int rc = rm_new_output(out, 1, &nb, REMAT_U8, y->storage->device);
    if (rc) return rc;
    rm_kargs k = {.in = {y}, .out = {*out}};
    return rm_kernel_run(RM_K_RELU_MASK, c->op->name, &k);
}

#define SAVES_NOTHING 0, 0, {{0}}
#define SAVES_X RM_OPF_SAVE_EARLY, 1, {{RM_SAVE_INPUT, 0, 0}}
#define SAVES_Y 0, 1, {{RM_SAVE_OUTPUT, 0, 0}}
#define SAVES_MASK 0, 1, {{RM_SAVE_CUSTOM, 0, 0}}
#define UNARY_OP_(sym, call, node, save_flags, n_saved_, ...)                               \
    const rm_op_desc sym = {                                                                 \
        .name = call, .node_name = node, .n_in = 1, .n_out = 1, .n_saved = n_saved_,         \
        .flags = RM_OPF_FLOAT | RM_OPF_CONTIGUOUS | save_flags, .kernel = RM_K_UNARY,        \
        .params_size = sizeof(rm_unary_params), .saves = __VA_ARGS__,                        \
        .save_custom = save_relu_mask, .backward = unary_backward}
#define UNARY_OP(sym, call, node, plan) UNARY_OP_(sym, call, node, plan)

UNARY_OP(rm_op_neg, "remat_neg", "NegBackward", SAVES_NOTHING);
UNARY_OP(rm_op_exp, "remat_exp", "ExpBackward", SAVES_Y);
UNARY_OP(rm_op_log, "remat_log", "LogBackward", SAVES_X);
UNARY_OP(rm_op_sqrt, "remat_sqrt", "SqrtBackward", SAVES_Y);
UNARY_OP(rm_op_tanh, "remat_tanh", "TanhBackward", SAVES_Y);
UNARY_OP(rm_op_sigmoid, "remat_sigmoid", "SigmoidBackward", SAVES_Y);
UNARY_OP(rm_op_relu, "remat_relu", "ReluBackward", SAVES_MASK);
UNARY_OP(rm_op_gelu, "remat_gelu", "GeluBackward", SAVES_X);
UNARY_OP(rm_op_pow_scalar, "remat_pow_scalar", "PowBackward", SAVES_X);
UNARY_OP(rm_op_add_scalar, "remat_add_scalar", "AddBackward", SAVES_NOTHING);
UNARY_OP(rm_op_sub_scalar, "remat_sub_scalar", "AddBackward", SAVES_NOTHING);
UNARY_OP(rm_op_mul_scalar, "remat_mul_scalar", "MulBackward", SAVES_NOTHING);
UNARY_OP(rm_op_div_scalar, "remat_div_scalar", "MulBackward", SAVES_NOTHING);
UNARY_OP(rm_op_rsub_scalar, "remat_rsub_scalar", "RsubBackward", SAVES_NOTHING);

static int unary(const rm_op_desc *d, rm_unary_op op, double p, remat_tensor **out,
                 remat_tensor *a, void *site) {
    const rm_unary_params params = {op, p};
    remat_tensor *in[1] = {a};
    return rm_dispatch(d, out, in, &params, site);
}

#define S RM_OP_SITE()
int remat_neg(remat_tensor **out, remat_tensor *a) { return unary(&rm_op_neg, RM_U_NEG, 0, out, a, S); }
int remat_exp(remat_tensor **out, remat_tensor *a) { return unary(&rm_op_exp, RM_U_EXP, 0, out, a, S); }
int remat_log(remat_tensor **out, remat_tensor *a) { return unary(&rm_op_log, RM_U_LOG, 0, out, a, S); }
int remat_sqrt(remat_tensor **out, remat_tensor *a) { return unary(&rm_op_sqrt, RM_U_SQRT, 0, out, a, S); }
int remat_tanh(remat_tensor **out, remat_tensor *a) { return unary(&rm_op_tanh, RM_U_TANH, 0, out, a, S); }
int remat_sigmoid(remat_tensor **out, remat_tensor *a) {
    return unary(&rm_op_sigmoid, RM_U_SIGMOID, 0, out, a, S);
}
int remat_relu(remat_tensor **out, remat_tensor *a) { return unary(&rm_op_relu, RM_U_RELU, 0, out, a, S); }
int remat_gelu(remat_tensor **out, remat_tensor *a, remat_gelu_approx approximate) {
    if (approximate != REMAT_GELU_ERF && approximate != REMAT_GELU_TANH)
        return rm_err(REMAT_EINVAL, "remat_gelu: approximate must be REMAT_GELU_ERF or "
                      "REMAT_GELU_TANH, got %d", (int)approximate);
    rm_unary_op op = approximate == REMAT_GELU_ERF ? RM_U_GELU_ERF : RM_U_GELU_TANH;
    return unary(&rm_op_gelu, op, 0, out, a, S);
}
int remat_pow_scalar(remat_tensor **out, remat_tensor *a, double exponent) {
    return unary(&rm_op_pow_scalar, RM_U_POW, exponent, out, a, S);
}
int remat_add_scalar(remat_tensor **out, remat_tensor *a, double s) {
    return unary(&rm_op_add_scalar, RM_U_ADD, s, out, a, S);
}
int remat_sub_scalar(remat_tensor **out, remat_tensor *a, double s) {
    return unary(&rm_op_sub_scalar, RM_U_ADD, -s, out, a, S);
}
int remat_rsub_scalar(remat_tensor **out, remat_tensor *a, double s) {
    return unary(&rm_op_rsub_scalar, RM_U_RSUB, s, out, a, S);
}
int remat_mul_scalar(remat_tensor **out, remat_tensor *a, double s) {
    return unary(&rm_op_mul_scalar, RM_U_MUL, s, out, a, S);
}
int remat_div_scalar(remat_tensor **out, remat_tensor *a, double s) {
    /* as P: x / 0 = inf/nan */
    return unary(&rm_op_div_scalar, RM_U_MUL, s == 0.0 ? INFINITY : 1.0 / s, out, a, S);
}
#undef S
