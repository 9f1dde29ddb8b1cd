/* src/autograd/function.c — user-defined differentiable functions
 * (PyTorch: torch.autograd.Function): user forward + backward, save_for_backward
 * through the saved-tensor hooks, non-differentiable outputs. */
#include <stdlib.h>
#include <string.h>

#include "accumulate.h"
#include "graph.h"

#define RM_FN_MAX_SAVED 64

struct remat_function_ctx {
    remat_function_def def;
    void *user_data;
    remat_node *node; /* weak: the node that owns this ctx (NULL in forward) */
    int n_inputs;
    bool needs_grad[64];
    bool non_diff[64];
    /* Tensors given to save_for_backward during forward, packed once the
     * node exists (PyTorch packs at the end of apply as well). */
    int n_pending;
    remat_tensor *pending[RM_FN_MAX_SAVED];
    bool in_forward;
    /* the leaves backward's nested passes accumulate into, if the function
     * recorded them (rm_ctx_set_nested_leaves; owned) */
    rm_leaf_tally *nested;
};

static void ctx_free(void *p) {
    remat_function_ctx *c = p;
    if (!c) return;
    for (int i = 0; i < c->n_pending; i++) rm_release(c->pending[i]);
    if (c->def.destroy) c->def.destroy(c->user_data);
    rm_leaf_tally_free(c->nested);
    free((char *)c->def.name);
    free(c);
}

static remat_status fn_backward(remat_node *node, remat_tensor *const *grad_outputs,
                                remat_tensor **grad_inputs) {
    remat_function_ctx *c = node->ctx;
    remat_clear_error();
    int rc =
        c->def.backward(c, c->user_data, grad_outputs, node->n_outputs, grad_inputs, node->n_next);
    if (rc) {
        for (int i = 0; i < node->n_next; i++) rm_release_p(&grad_inputs[i]);
        if (!remat_last_error()[0])
            return rm_err(rc, "%s: backward callback failed (%s)", remat_node_name(node),
                          remat_err_name(rc));
        return rc;
    }
    for (int i = 0; i < node->n_next; i++) rm_adopt(grad_inputs[i]);
    /* gradients for inputs that need none are dropped */
    for (int i = 0; i < node->n_next; i++)
        if (!node->next[i].node) rm_release_p(&grad_inputs[i]);
    return REMAT_OK;
}

bool rm_node_runs_backward(const remat_node *n) { return n && n->backward == fn_backward; }

void rm_ctx_set_nested_leaves(remat_function_ctx *ctx, rm_leaf_tally *t) {
    if (!ctx) {
        rm_leaf_tally_free(t);
        return;
    }
    rm_leaf_tally_free(ctx->nested);
    ctx->nested = t;
}

bool rm_node_nested_leaves(const remat_node *n, rm_accumulate_observer_fn fn, void *user_data) {
    if (!rm_node_runs_backward(n)) return false;
    const remat_function_ctx *c = n->ctx;
    return rm_leaf_tally_report(c->nested, fn, user_data);
}

remat_status remat_ctx_save_for_backward(remat_function_ctx *ctx, int n,
                                         remat_tensor *const *tensors) {
    if (!ctx) return rm_err(REMAT_EINVAL, "remat_ctx_save_for_backward: ctx is NULL");
    if (!ctx->in_forward)
        return rm_err(REMAT_ESTATE, "remat_ctx_save_for_backward: call it from forward only");
    if (n < 0 || (n && !tensors) || ctx->n_pending + n > RM_FN_MAX_SAVED)
        return rm_err(REMAT_EINVAL, "remat_ctx_save_for_backward: bad count %d (at most %d saved)",
                      n, RM_FN_MAX_SAVED);
    for (int i = 0; i < n; i++) ctx->pending[ctx->n_pending++] = rm_retain(tensors[i]);
    return REMAT_OK;
}

int remat_ctx_num_saved(const remat_function_ctx *ctx) {
    if (!ctx) return 0;
    return ctx->node ? ctx->node->n_saved : ctx->n_pending;
}

remat_status remat_ctx_saved(remat_function_ctx *ctx, int i, remat_tensor **out) {
    if (!ctx || !out) return rm_err(REMAT_EINVAL, "remat_ctx_saved: ctx and out must not be NULL");
    *out = NULL;
    if (!ctx->node)
        return rm_err(REMAT_ESTATE, "remat_ctx_saved: saved tensors are available in backward");
    if (i < 0 || i >= ctx->node->n_saved)
        return rm_err(REMAT_EINVAL, "remat_ctx_saved: index %d out of range (%d saved)", i,
                      ctx->node->n_saved);
    int rc = rm_node_unpack(ctx->node, i, out);
    if (rc) return rc;
    return REMAT_OK;
}

bool remat_ctx_needs_input_grad(const remat_function_ctx *ctx, int i) {
    if (!ctx || i < 0 || i >= ctx->n_inputs || i >= 64) return false;
    return ctx->needs_grad[i];
}

remat_status remat_ctx_mark_non_differentiable(remat_function_ctx *ctx, int i) {
    if (!ctx || i < 0 || i >= 64)
        return rm_err(REMAT_EINVAL, "remat_ctx_mark_non_differentiable: bad output index %d", i);
    ctx->non_diff[i] = true;
    return REMAT_OK;
}

/* Runs the user's forward with grad mode off and scopes suspended (the
 * outputs are plain references) and checks that it filled every output. */
static remat_status run_forward(remat_function_ctx *c, void *user_data, const char *name,
                                int n_inputs, remat_tensor *const *inputs, int n_outputs,
                                remat_tensor **outputs) {
    c->in_forward = true;
    bool prev = remat_set_grad_enabled(false);
    void *scope = rm_scope_suspend();
    remat_clear_error();
    int rc = c->def.forward(c, user_data, inputs, n_inputs, outputs, n_outputs);
    rm_scope_resume(scope);
    remat_set_grad_enabled(prev);
    c->in_forward = false;
    if (rc != REMAT_OK) {
        if (!remat_last_error()[0])
            rm_err(rc, "remat_function_apply(%s): forward callback failed (%s)", name,
                   remat_err_name(rc));
        return rc;
    }
    for (int i = 0; i < n_outputs; i++)
        if (!outputs[i])
            return rm_err(REMAT_ECALLBACK, "remat_function_apply(%s): forward left output %d NULL",
                          name, i);
    for (int i = 0; i < n_outputs; i++) rm_adopt(outputs[i]);
    return REMAT_OK;
}

/* An output that is an input (or already in a graph) is replaced by a
 * fresh alias, so the input's own history stays as it was. */
static remat_status alias_outputs(const char *name, int n_inputs, remat_tensor *const *inputs,
                                  int n_outputs, remat_tensor **outputs) {
    for (int i = 0; i < n_outputs; i++) {
        remat_tensor *o = outputs[i];
        bool is_input = false;
        for (int k = 0; k < n_inputs; k++) is_input |= inputs[k] == o;
        if (!is_input && !o->grad_fn && !o->requires_grad && !o->scope_owner) continue;
        remat_tensor *a =
            rm_tensor_alloc(o->storage, o->offset, o->ndim, o->shape, o->strides, o->dtype);
        if (!a) return rm_err(REMAT_ENOMEM, "remat_function_apply(%s): out of memory", name);
        a->is_view = true;
        if (!o->scope_owner) rm_release(o);
        outputs[i] = a;
    }
    return REMAT_OK;
}

/* Records the graph node: the tensors saved by forward, the
 * differentiable outputs. On success the node owns c (*c_owned set). */
static remat_status record_node(remat_function_ctx *c, bool *c_owned, const char *name,
                                int n_inputs, remat_tensor *const *inputs, int n_outputs,
                                remat_tensor **outputs) {
    remat_node *node;
    int rc = rm_node_new(&node, "CustomFunction", fn_backward, n_inputs, inputs, n_outputs,
                         c->n_pending);
    if (rc) return rc;
    node->owned_name = strdup(name);
    /* the user's backward runs with grad mode on under create_graph: made
     * of remat ops, it is differentiable (PyTorch: autograd.Function) */
    node->backward_diff = fn_backward;
    rm_node_set_ctx(node, c, ctx_free);
    *c_owned = true;
    c->node = node;
    for (int i = 0; i < c->n_pending && rc == REMAT_OK; i++)
        rc = rm_node_save(node, i, c->pending[i]);
    for (int i = 0; i < c->n_pending; i++) rm_release(c->pending[i]);
    c->n_pending = 0;
    for (int i = 0; i < n_outputs && rc == REMAT_OK; i++)
        if (!c->non_diff[i] && outputs[i]->dtype != REMAT_I64)
            rm_node_set_output(node, i, outputs[i]);
    rm_node_release(node); /* outputs hold it now (or it dies here) */
    return rc;
}

remat_status remat_function_apply(const remat_function_def *def, void *user_data, int n_inputs,
                                  remat_tensor *const *inputs, int n_outputs,
                                  remat_tensor **outputs) {
    if (!def || !def->forward || !def->backward) {
        if (def && def->destroy) def->destroy(user_data);
        return rm_err(REMAT_EINVAL, "remat_function_apply: def must supply forward and backward");
    }
    const char *name = def->name ? def->name : "CustomFunction";
    if (!outputs || n_outputs <= 0 || n_outputs > 64 || n_inputs < 0 || n_inputs > 64 ||
        (n_inputs && !inputs)) {
        if (def->destroy) def->destroy(user_data);
        return rm_err(REMAT_EINVAL,
                      "remat_function_apply(%s): bad arguments (n_inputs %d, "
                      "n_outputs %d; both at most 64, outputs non-NULL)",
                      name, n_inputs, n_outputs);
    }
    for (int i = 0; i < n_outputs; i++) outputs[i] = NULL;
    remat_function_ctx *c = calloc(1, sizeof *c);
    char *name_copy = strdup(name);
    if (!c || !name_copy) {
        free(c);
        free(name_copy);
        if (def->destroy) def->destroy(user_data);
        return rm_err(REMAT_ENOMEM, "remat_function_apply(%s): out of memory", name);
    }
    c->def = *def;
    c->def.name = name_copy;
    c->user_data = user_data;
    c->n_inputs = n_inputs;
    bool needs = rm_needs_grad(n_inputs, inputs);
    for (int i = 0; i < n_inputs; i++)
        c->needs_grad[i] = needs && inputs[i] && inputs[i]->requires_grad;

    bool c_owned = false; /* by the graph node */
    int rc = run_forward(c, user_data, name, n_inputs, inputs, n_outputs, outputs);
    /* inside a region being recorded: this function's backward may run
     * passes of its own that nothing recorded (a reentrant checkpoint's did) */
    if (!c->nested) rm_leaf_tally_unknown();
    if (rc == REMAT_OK) rc = alias_outputs(name, n_inputs, inputs, n_outputs, outputs);
    if (rc == REMAT_OK && needs)
        rc = record_node(c, &c_owned, name, n_inputs, inputs, n_outputs, outputs);
    if (rc)
        for (int i = 0; i < n_outputs; i++) rm_release_p(&outputs[i]);
    if (!c_owned) ctx_free(c);
    if (rc) return rc;
    return rm_hand_out_n(outputs, n_outputs);
}
