/* src/ops/bias_gelu.c — remat_bias_gelu: y = gelu(x + bias), the bias added
 * along x's last dim, as one op (kernels: RM_K_BIAS_GELU, _BWD; on the cpu
 * src/backends/cpu/bias_gelu.c).
 *
 * Why an op: the GPT's MLP runs its first linear without a bias and this
 * after it, so the bias costs no pass of its own in the forward (the f32 GEMM
 * no longer starts from rows filled with the bias) and its gradient none in
 * the backward (the column sums of dx are taken while dx is written). The
 * values are remat_gelu(remat_add(x, bias))'s: y and dx bitwise, and db the
 * column sums of that dx in the order linear's bias gradient sums them.
 *
 * Saves x and bias before the kernel (RM_OPF_SAVE_EARLY): the backward reads
 * only its inputs, so an early-stopped recomputation that ends here skips
 * the kernel. The backward writes dx over a dying output gradient (buffer
 * donation), as gelu's does. Double backward: the op rebuilt from remat_add
 * and remat_gelu (rm_backward_recompose). */
#include "op.h"

static const char *const k_bg_args[] = {"x", "bias"};

static remat_status bias_gelu_check(const rm_op_call *c) {
    const char *call = c->op->name;
    remat_tensor *x = c->in[0], *b = c->in[1];
    const rm_unary_params *p = c->params;
    if (p->op != RM_U_GELU_ERF && p->op != RM_U_GELU_TANH)
        return rm_err(REMAT_EINVAL,
                      "%s: approximate must be REMAT_GELU_ERF or REMAT_GELU_TANH, got %d", call,
                      (int)p->p);
    if (b->dtype != x->dtype && !(x->dtype == REMAT_BF16 && b->dtype == REMAT_F32))
        return rm_err(REMAT_EDTYPE, "%s: bias must have x's dtype %s (or f32 for a bf16 x), got %s",
                      call, remat_dtype_name(x->dtype), remat_dtype_name(b->dtype));
    char bx[200], bb[200];
    if (x->ndim == 0 || b->ndim != 1 || b->shape[0] != x->shape[x->ndim - 1])
        return rm_err(REMAT_ESHAPE, "%s: bias %s must be 1-D with the size of x's last dim (x %s)",
                      call, rm_tensor_str(b, bb, sizeof bb), rm_tensor_str(x, bx, sizeof bx));
    return REMAT_OK;
}

/* saved: 0 = x, 1 = bias. dx over the dying g where it may be (buffer donation). */
static remat_status bias_gelu_backward(remat_node *node, remat_tensor *const *gout,
                                       remat_tensor **gin) {
    const bool gx = node->next[0].node != NULL, gb = node->next[1].node != NULL;
    if (!gx && !gb) return REMAT_OK;
    remat_tensor *g = rm_donation_take(node, gout, RM_BUF_GRAD, 0, RM_K_BIAS_GELU_BWD);
    remat_tensor *x = NULL, *b = NULL, *dx = g ? rm_retain(g) : NULL, *db = NULL;
    int rc = rm_saved_contig(node, 0, "x was not saved", &x);
    if (!rc) rc = rm_saved_contig(node, 1, "bias was not saved", &b);
    if (!rc && !g) rc = rm_contig(&g, gout[0]);
    if (!rc && g->dtype != x->dtype) {
        char b1[200], b2[200];
        rc = rm_err(REMAT_ESTATE, "%s: the gradient %s does not match the saved x %s", node->name,
                    rm_tensor_str(g, b1, sizeof b1), rm_tensor_str(x, b2, sizeof b2));
    }
    remat_device dev = gout[0]->storage->device;
    if (!rc && !dx) rc = rm_new_output(&dx, x->ndim, x->shape, x->dtype, dev);
    if (!rc && gb) rc = rm_new_output(&db, 1, b->shape, b->dtype, dev);
    if (!rc) {
        rm_kargs k = {.in = {g, x, b}, .out = {dx, db}, .params = node->ctx};
        rc = rm_kernel_run(RM_K_BIAS_GELU_BWD, node->name, &k);
    }
    if (!rc) {
        if (gx) gin[0] = rm_retain(dx);
        gin[1] = db, db = NULL;
    }
    rm_release(x), rm_release(b), rm_release(g), rm_release(dx), rm_release(db);
    return rc;
}

/* create_graph: y = gelu(x + bias) rebuilt from public ops */
static remat_status bias_gelu_recompose(remat_node *node, remat_tensor *const *xs,
                                        remat_tensor **y) {
    const rm_unary_params *p = node->ctx;
    remat_tensor *s = NULL;
    int rc = remat_add(&s, xs[0], xs[1]);
    *y = NULL;
    if (!rc) rc = remat_gelu(y, s, p->op == RM_U_GELU_ERF ? REMAT_GELU_ERF : REMAT_GELU_TANH);
    rm_release(s);
    return rc;
}

static remat_status bias_gelu_backward_diff(remat_node *node, remat_tensor *const *gout,
                                            remat_tensor **gin) {
    static const int slots[2] = {0, 1};
    return rm_backward_recompose(node, slots, bias_gelu_recompose, gout, gin);
}

const rm_op_desc rm_op_bias_gelu = RM_OP_DESC(
    "remat_bias_gelu", "BiasGeluBackward", .n_in = 2, .n_out = 1, .n_saved = 2,
    .flags = RM_OPF_FLOAT | RM_OPF_SAME_DEVICE | RM_OPF_CONTIGUOUS | RM_OPF_SAVE_EARLY,
    .arg_names = k_bg_args, .kernel = RM_K_BIAS_GELU, .params_size = sizeof(rm_unary_params),
    .check = bias_gelu_check, .saves = {{RM_SAVE_INPUT, 0, 0}, {RM_SAVE_INPUT, 1, 0}},
    .backward = bias_gelu_backward, .backward_diff = bias_gelu_backward_diff);

remat_status remat_bias_gelu(remat_tensor **out, remat_tensor *x, remat_tensor *bias,
                             remat_gelu_approx approximate) {
    const rm_unary_params p = {approximate == REMAT_GELU_ERF    ? RM_U_GELU_ERF
                               : approximate == REMAT_GELU_TANH ? RM_U_GELU_TANH
                                                                : RM_U_NEG,
                               (double)approximate};
    remat_tensor *in[2] = {x, bias};
    return rm_dispatch(&rm_op_bias_gelu, out, in, &p, RM_OP_SITE());
}
