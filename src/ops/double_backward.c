/* src/ops/double_backward.c — two ways an op's backward is made
 * differentiable for create_graph (docs/double_backward.md), shared by the
 * op files:
 *
 *  - rm_backward_linear: the backward is linear in the incoming gradient g
 *    alone (dropout's and relu's masks, embedding's scatter into the weight
 *    rows): it runs as a custom function whose forward is the op's
 *    first-order backward kernel and whose backward is the adjoint map
 *    (the same map again for the masks, embedding's gather for its
 *    scatter), itself differentiable, so any order works.
 *  - rm_backward_recompose: the op's forward is rebuilt from public ops on
 *    the saved inputs (layer_norm, attention, cross_entropy) and a nested
 *    create_graph grad of it with g as the output gradient gives the input
 *    gradients, with a graph reaching g and the inputs.
 * Both run only under create_graph: first-order backward keeps its kernels.
 *
 * And the recorded sums autograd needs under create_graph (rm_graph_ops,
 * src/autograd/graph.h): accumulation, summing down to a shape, the copy a
 * leaf's first gradient gets. */
#include <stdlib.h>

#include "op.h"

/* ---- linear in g --------------------------------------------------------------------- */
typedef struct lin_ud {
    remat_node *node;
    rm_adjoint_fn adjoint;
} lin_ud;

static void lin_destroy(void *p) {
    lin_ud *u = p;
    rm_node_release(u->node);
    free(u);
}

/* The op's own (first-order) backward on g; grad mode is off here. */
static remat_status lin_forward(remat_function_ctx *ctx, void *ud, remat_tensor *const *in,
                                int n_in, remat_tensor **out, int n_out) {
    RM_UNUSED(ctx), RM_UNUSED(n_in), RM_UNUSED(n_out);
    lin_ud *u = ud;
    remat_node *n = u->node;
    remat_tensor **gin = calloc((size_t)n->n_next, sizeof *gin);
    if (!gin) return rm_err(REMAT_ENOMEM, "%s: out of memory", n->name);
    int rc = n->backward(n, in, gin);
    out[0] = gin[0];
    for (int i = 1; i < n->n_next; i++) rm_release(gin[i]);
    free(gin);
    if (!rc && !out[0]) rc = rm_err(REMAT_ESTATE, "%s: no gradient computed", n->name);
    return rc;
}

static remat_status lin_backward(remat_function_ctx *ctx, void *ud, remat_tensor *const *gout,
                                 int n_out, remat_tensor **gin, int n_in) {
    RM_UNUSED(ctx), RM_UNUSED(n_out), RM_UNUSED(n_in);
    lin_ud *u = ud;
    if (!gout[0]) return REMAT_OK;
    return u->adjoint(u->node, gout[0], &gin[0]);
}

remat_status rm_backward_linear(remat_node *node, remat_tensor *const *gout, remat_tensor **gin,
                                rm_adjoint_fn adjoint) {
    if (!node->next[0].node) return REMAT_OK;
    lin_ud *u = malloc(sizeof *u);
    if (!u) return rm_err(REMAT_ENOMEM, "%s: out of memory", node->name);
    u->node = rm_node_retain(node);
    u->adjoint = adjoint;
    const remat_function_def def = {.name = node->name,
                                    .forward = lin_forward,
                                    .backward = lin_backward,
                                    .destroy = lin_destroy};
    return remat_function_apply(&def, u, 1, gout, 1, gin);
}

remat_status rm_adjoint_self(remat_node *node, remat_tensor *gg, remat_tensor **out) {
    remat_tensor *gout[1] = {gg};
    return rm_backward_linear(node, gout, out, rm_adjoint_self);
}

/* ---- recomposed forward ------------------------------------------------------------------ */
remat_status rm_backward_recompose(remat_node *node, const int *slots, rm_recompose_fn forward,
                                   remat_tensor *const *gout, remat_tensor **gin) {
    const int n = node->n_next;
    remat_tensor *xs[RM_OP_MAX_IN] = {NULL}, *leaves[RM_OP_MAX_IN] = {NULL};
    remat_tensor *grads[RM_OP_MAX_IN] = {NULL}, *y = NULL;
    int idx[RM_OP_MAX_IN], k = 0, rc = REMAT_OK;
    for (int i = 0; i < n && !rc; i++) {
        remat_tensor *s = NULL;
        if (slots[i] >= 0) rc = rm_node_unpack(node, slots[i], &s);
        if (rc || !s) continue;
        if (node->next[i].node && s->requires_grad) {
            /* a view of its own per input: an input passed twice (q = k = v)
             * gets one gradient per use, where the nested grad stops */
            rc = remat_view(&xs[i], s, s->ndim, s->shape);
            leaves[k] = xs[i];
            idx[k++] = i;
            rm_release(s);
        } else {
            xs[i] = s;
        }
    }
    if (!rc) rc = forward(node, xs, &y);
    if (!rc && k > 0 && y->requires_grad) {
        const remat_backward_options o = {.create_graph = true, .allow_unused = true};
        remat_tensor *g = gout[0];
        rc = remat_grad_ex(1, &y, &g, k, leaves, &o, grads);
        for (int j = 0; j < k && !rc; j++) gin[idx[j]] = grads[j], grads[j] = NULL;
        for (int j = 0; j < k; j++) rm_release(grads[j]);
    }
    for (int i = 0; i < n; i++) rm_release(xs[i]);
    rm_release(y);
    return rc;
}

/* ---- autograd's recorded sums (rm_graph_ops) ------------------------------------------------
 * Each runs in a suspended scope: its result belongs to the engine, never
 * to a scope the user has open. */
static remat_status graph_add(remat_tensor **out, remat_tensor *a, remat_tensor *b) {
    void *sc = rm_scope_suspend();
    int rc = remat_add(out, a, b);
    rm_scope_resume(sc);
    return rc;
}

/* sum over the leading dims shape lacks and the dims it broadcast from 1
 * (kept), then reshaped to shape */
static remat_status graph_sum_to(remat_tensor **out, remat_tensor *grad, int ndim,
                                 const int64_t *shape) {
    int dims[REMAT_MAX_DIMS], nd = 0;
    int lead = grad->ndim - ndim;
    for (int d = 0; d < grad->ndim; d++)
        if (d < lead || (shape[d - lead] == 1 && grad->shape[d] != 1)) dims[nd++] = d;
    void *sc = rm_scope_suspend();
    remat_tensor *s = NULL;
    int rc = REMAT_OK;
    if (nd > 0) rc = remat_sum(&s, grad, nd, dims, true);
    else s = rm_retain(grad);
    if (rc == REMAT_OK) {
        rc = remat_reshape(out, s, ndim, shape);
        rm_release(s);
    }
    rm_scope_resume(sc);
    return rc;
}

/* g * 1 is exact (PyTorch: clone_obey_contract under grad mode) */
static remat_status graph_copy(remat_tensor **out, remat_tensor *g) {
    void *sc = rm_scope_suspend();
    int rc = remat_mul_scalar(out, g, 1.0);
    rm_scope_resume(sc);
    return rc;
}

const rm_graph_ops rm_ops_graph_ops = {graph_add, graph_sum_to, graph_copy};
