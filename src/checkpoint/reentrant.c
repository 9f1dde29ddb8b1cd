/* src/checkpoint/reentrant.c — reentrant checkpoint (PyTorch: CheckpointFunction),
 * a custom function (remat_function_apply):
 *  - forward: saves the tensor inputs, runs the function with grad off;
 *  - backward: restores the forward's RNG state (forked), runs the function
 *    again with grad on, on detached inputs that require grad as the
 *    originals did, calls remat_backward on the outputs with the incoming
 *    gradients (the engine is re-entrant) and returns the inputs' .grad.
 * Parameters captured in user_data get their .grad from that inner
 * backward, as in PyTorch. */
#include <stdlib.h>
#include <string.h>

#include "autograd/accumulate.h"
#include "autograd/graph.h"
#include "ck.h"
#include "core/timing.h"

typedef struct reent {
    remat_checkpoint_fn fn;
    void *user_data;
    void (*user_data_destroy)(void *);
    int n_inputs, n_outputs; /* the user's counts */
    bool *requires_grad;     /* of each input at forward */
    bool *placeholder;       /* caller-owned: outputs the function left NULL */
    ck_rng rng;
} reent;

static void reent_destroy(void *p) {
    reent *r = p;
    if (!r) return;
    if (r->user_data_destroy) r->user_data_destroy(r->user_data);
    free(r->requires_grad);
    free(r);
}

static remat_status reent_forward(remat_function_ctx *ctx, void *ud, remat_tensor *const *inputs,
                                  int n_inputs, remat_tensor **outputs, int n_outputs) {
    reent *r = ud;
    int rc = remat_ctx_save_for_backward(ctx, n_inputs, inputs);
    if (rc) return rc;
    /* the leaves backward's nested pass will accumulate into, known before
     * it runs (data parallelism, src/autograd/accumulate.h); the inputs are
     * read here by the enclosing region, if this runs inside one */
    rm_note_leaf_reads(n_inputs, inputs);
    rm_leaf_tally *t = rm_leaf_tally_begin();
    rc = ck_call_fn(r->fn, r->user_data, n_inputs, inputs, r->n_outputs, outputs);
    rm_leaf_tally_end(t, n_inputs, inputs);
    rm_ctx_set_nested_leaves(ctx, t);
    if (rc) return rc;
    /* A custom function's outputs are tensors; None outputs become empty
     * non-differentiable stand-ins that remat_checkpoint drops again. */
    for (int i = 0; i < n_outputs; i++) {
        if (outputs[i]) continue;
        int64_t zero = 0;
        rc = remat_empty(&outputs[i], 1, &zero, REMAT_F32, REMAT_DEVICE_CPU);
        if (rc) return rm_err_prefix(rc, CK_CALL);
        remat_ctx_mark_non_differentiable(ctx, i);
        r->placeholder[i] = true;
    }
    return ck_rng_check_initialized(&r->rng);
}

static remat_status reent_backward(remat_function_ctx *ctx, void *ud,
                                   remat_tensor *const *grad_outputs, int n_outputs,
                                   remat_tensor **grad_inputs, int n_inputs) {
    reent *r = ud;
    RM_UNUSED(n_outputs);
    if (rm_backward_creates_graph())
        return rm_err(REMAT_EUNSUPPORTED,
                      "remat_checkpoint: When use_reentrant=true, remat_checkpoint does not "
                      "support double backward (create_graph): its backward runs a nested "
                      "backward pass whose graph is not recorded. Use use_reentrant = "
                      "REMAT_OPT_FALSE, which supports create_graph.");
    if (remat_current_backward_is_partial())
        return rm_err(REMAT_EUNSUPPORTED,
                      "remat_checkpoint: When use_reentrant=true, remat_checkpoint is incompatible "
                      "with remat_grad() or passing inputs to remat_backward(). To resolve this "
                      "error, you can either set use_reentrant = REMAT_OPT_FALSE, or call "
                      "remat_backward() without passing inputs.");
    size_t ni = (size_t)(n_inputs ? n_inputs : 1), no = (size_t)(r->n_outputs ? r->n_outputs : 1);
    remat_tensor **saved = calloc(ni, sizeof *saved), **det = calloc(ni, sizeof *det);
    remat_tensor **outs = calloc(no, sizeof *outs), **roots = calloc(no, sizeof *roots);
    remat_tensor **gouts = calloc(no, sizeof *gouts);
    int rc = REMAT_OK;
    if (!saved || !det || !outs || !roots || !gouts) {
        rc = rm_err(REMAT_ENOMEM, "remat_checkpoint: out of memory in backward");
        goto out;
    }
    for (int i = 0; i < n_inputs && rc == REMAT_OK; i++) rc = remat_ctx_saved(ctx, i, &saved[i]);
    if (rc) goto out;
    /* PyTorch: detach_variable — same data, no history, requires_grad as before */
    for (int i = 0; i < n_inputs && rc == REMAT_OK; i++) {
        if (!saved[i]) continue;
        rc = remat_detach(&det[i], saved[i]);
        if (rc == REMAT_OK && r->requires_grad[i]) rc = remat_set_requires_grad(det[i], true);
    }
    if (rc) goto out;
    remat_rng_fork fork;
    rc = ck_rng_enter(&r->rng, &fork);
    if (rc) goto out;
    bool prev = remat_set_grad_enabled(true);
    remat_autocast_state prev_ac;
    remat_autocast_get_state(&prev_ac);
    remat_autocast_set_state(&r->rng.autocast);
    const remat_phase prev_phase = rm_phase_set(REMAT_PHASE_RECOMPUTE);
    rc = ck_call_fn(r->fn, r->user_data, n_inputs, det, r->n_outputs, outs);
    rm_phase_set(prev_phase);
    remat_autocast_set_state(&prev_ac);
    remat_set_grad_enabled(prev);
    int frc = ck_rng_exit(&r->rng, &fork);
    if (rc == REMAT_OK) rc = frc;
    if (rc) goto out;
    int k = 0;
    for (int i = 0; i < r->n_outputs; i++) {
        if (!outs[i] || !outs[i]->requires_grad) continue;
        roots[k] = outs[i];
        gouts[k] = grad_outputs[i];
        k++;
    }
    if (k == 0) {
        rc = rm_err(REMAT_ENOGRAD, "remat_checkpoint: none of output has requires_grad=true, this "
                                   "checkpoint is not necessary");
        goto out;
    }
    rc = remat_backward(k, roots, gouts, false, 0, NULL);
    if (rc) goto out;
    for (int i = 0; i < n_inputs; i++)
        grad_inputs[i] = det[i] ? rm_retain(remat_tensor_grad(det[i])) : NULL;
out:
    for (int i = 0; saved && det && i < n_inputs; i++) {
        rm_release(saved[i]);
        rm_release(det[i]);
    }
    for (int i = 0; outs && i < r->n_outputs; i++) rm_release(outs[i]);
    free(saved);
    free(det);
    free(outs);
    free(roots);
    free(gouts);
    return rc;
}

remat_status ck_run_reentrant(remat_checkpoint_fn fn, void *user_data, int n_inputs,
                              remat_tensor *const *inputs, int n_outputs, remat_tensor **outputs,
                              const ck_opts *o, void (*user_data_destroy)(void *)) {
    if (n_inputs > 64 || n_outputs > 64) {
        if (user_data_destroy) user_data_destroy(user_data);
        return rm_err(REMAT_EINVAL,
                      "remat_checkpoint: the reentrant variant takes at most 64 "
                      "inputs and 64 outputs (got %d and %d); use use_reentrant = REMAT_OPT_FALSE",
                      n_inputs, n_outputs);
    }
    /* PyTorch: check_backward_validity */
    bool any = false;
    for (int i = 0; i < n_inputs; i++) any |= inputs[i] && inputs[i]->requires_grad;
    if (!any)
        rm_warn("remat_checkpoint: None of the inputs have requires_grad=true. Gradients will "
                "be None");

    int n_apply = n_outputs ? n_outputs : 1;
    reent *r = calloc(1, sizeof *r);
    bool *req = calloc((size_t)(n_inputs ? n_inputs : 1), sizeof *req);
    bool *placeholder = calloc((size_t)n_apply, sizeof *placeholder);
    remat_tensor **outs = calloc((size_t)n_apply, sizeof *outs);
    if (!r || !req || !placeholder || !outs) {
        free(r);
        free(req);
        free(placeholder);
        free(outs);
        if (user_data_destroy) user_data_destroy(user_data);
        return rm_err(REMAT_ENOMEM, "remat_checkpoint: out of memory");
    }
    for (int i = 0; i < n_inputs; i++) req[i] = inputs[i] && inputs[i]->requires_grad;
    r->fn = fn, r->user_data = user_data, r->user_data_destroy = user_data_destroy;
    r->n_inputs = n_inputs, r->n_outputs = n_outputs;
    r->requires_grad = req, r->placeholder = placeholder;
    int rc = ck_rng_stash(&r->rng, o->preserve_rng, n_inputs, inputs);
    if (rc) {
        reent_destroy(r);
        free(placeholder);
        free(outs);
        return rc;
    }
    static const remat_function_def def = {"CheckpointFunctionBackward", reent_forward,
                                           reent_backward, reent_destroy};
    /* apply owns r from here on (destroyed with the node, or at once) */
    rc = remat_function_apply(&def, r, n_inputs, inputs, n_apply, outs);
    if (rc == REMAT_OK) {
        /* (scopes are suspended by remat_checkpoint: plain references) */
        for (int i = 0; i < n_apply; i++) {
            if (placeholder[i]) rm_release_p(&outs[i]);
            if (i < n_outputs) outputs[i] = outs[i];
        }
    }
    free(placeholder);
    free(outs);
    return rc;
}
