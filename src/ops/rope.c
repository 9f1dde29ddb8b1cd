/* src/ops/rope.c — rotary position embedding: the descriptor over the rope
 * kernel (src/backends/cpu/rope.c on the cpu, which describes the maths).
 *
 * x (..., T, D), D even, rotated pair by pair (i, i + D/2) by the angle
 * pos[t] · theta^(-2i/D), as Hugging Face's Llama applies rotate_half;
 * positions (T) i64, or NULL for 0..T-1 (a KV cache passes the offset
 * ones). The map is a rotation, linear in x: its backward is the rotation
 * by the opposite angle (the same kernel, `inverse`), and the backward of
 * that is the forward again — so create_graph runs the op itself, with
 * the direction flipped (RopeBackward), to any order. The node saves only
 * the positions (when given), never x. */
#include <math.h>
#include <string.h>

#include "op.h"

extern const rm_op_desc rm_op_rope, rm_op_rope_grad;

static const char *const k_rope_args[] = {"x", "positions"};

static remat_status rope_check(const rm_op_call *c) {
    const char *call = c->op->name;
    const rm_rope_params *p = c->params;
    remat_tensor *x = c->in[0], *pos = c->in[1];
    char bx[200], bp[200];
    if (x->ndim < 2 || x->shape[x->ndim - 1] % 2 != 0)
        return rm_err(REMAT_ESHAPE, "%s: x must be (..., T, D) with D even, got x %s", call,
                      rm_tensor_str(x, bx, sizeof bx));
    if (!(p->theta > 0) || isinf(p->theta))
        return rm_err(REMAT_EINVAL, "%s: theta must be finite and > 0, got %g", call, p->theta);
    if (pos && (pos->ndim != 1 || pos->shape[0] != x->shape[x->ndim - 2]))
        return rm_err(REMAT_ESHAPE, "%s: positions %s must be (T) with T = %lld (dim -2 of x %s)",
                      call, rm_tensor_str(pos, bp, sizeof bp), (long long)x->shape[x->ndim - 2],
                      rm_tensor_str(x, bx, sizeof bx));
    return REMAT_OK;
}

/* dx = the rotation by the opposite angle of g (slot 0: the positions, or NULL) */
static remat_status rope_backward(remat_node *node, remat_tensor *const *gout, remat_tensor **gin) {
    if (!node->next[0].node) return REMAT_OK;
    const rm_rope_params *p = node->ctx;
    const rm_rope_params inv = {p->theta, !p->inverse};
    remat_tensor *pos = NULL, *g = NULL;
    int rc = rm_saved_contig(node, 0, NULL, &pos);
    if (!rc) rc = rm_contig(&g, gout[0]);
    if (!rc) rc = rm_grad_kernel(node, RM_K_ROPE, g, pos, 0, NULL, &inv, &gin[0]);
    rm_release(pos), rm_release(g);
    return rc;
}

/* create_graph: the same rotation, run as an op (whose backward flips it back) */
static remat_status rope_backward_diff(remat_node *node, remat_tensor *const *gout,
                                       remat_tensor **gin) {
    if (!node->next[0].node) return REMAT_OK;
    const rm_rope_params *p = node->ctx;
    const rm_rope_params inv = {p->theta, !p->inverse};
    remat_tensor *pos = NULL;
    int rc = rm_node_unpack(node, 0, &pos);
    if (rc) return rc;
    remat_tensor *in[2] = {gout[0], pos};
    rc = rm_dispatch(inv.inverse ? &rm_op_rope_grad : &rm_op_rope, &gin[0], in, &inv, NULL);
    rm_release(pos);
    return rc;
}

#define ROPE_DESC(call, node)                                                                      \
    RM_OP_DESC(                                                                                    \
        call, node, .n_in = 2, .n_out = 1, .n_saved = 1, .optional_in = 2u, .no_grad_in = 2u,      \
        .flags = RM_OPF_FLOAT_IN0 | RM_OPF_INDEX_IN1 | RM_OPF_CONTIGUOUS | RM_OPF_SAVE_EARLY,      \
        .arg_names = k_rope_args, .kernel = RM_K_ROPE, .params_size = sizeof(rm_rope_params),      \
        .check = rope_check, .saves = {{RM_SAVE_INPUT, 1, 0}}, .backward = rope_backward,          \
        .backward_diff = rope_backward_diff)
const rm_op_desc rm_op_rope = ROPE_DESC("remat_rope", "RopeBackward");
/* the rotation by the opposite angle: rope's gradient under create_graph */
const rm_op_desc rm_op_rope_grad = ROPE_DESC("RopeBackward", "RopeBackwardBackward");

remat_status remat_rope(remat_tensor **out, remat_tensor *x, remat_tensor *positions,
                        double theta) {
    const rm_rope_params p = {theta, false};
    remat_tensor *in[2] = {x, positions};
    return rm_dispatch(&rm_op_rope, out, in, &p, RM_OP_SITE());
}
