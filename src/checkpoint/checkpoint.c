/* src/checkpoint/checkpoint.c — remat_checkpoint and
 * remat_checkpoint_sequential: argument checks, option resolution (zero
 * means PyTorch's default), the global overrides, and the sequential driver.
 * The two implementations live in frame.c (non-reentrant) and reentrant.c. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ck.h"

/* PyTorch keeps these as module globals too (set_checkpoint_early_stop,
 * set_checkpoint_debug_enabled). */
static remat_tristate g_early_stop_override;
static remat_tristate g_debug_override;

static remat_tristate norm_tri(remat_tristate v) {
    return v == REMAT_OPT_TRUE || v == REMAT_OPT_FALSE ? v : REMAT_OPT_DEFAULT;
}

remat_tristate remat_set_checkpoint_early_stop(remat_tristate value) {
    remat_tristate prev = g_early_stop_override;
    g_early_stop_override = norm_tri(value);
    return prev;
}
remat_tristate remat_set_checkpoint_debug(remat_tristate value) {
    remat_tristate prev = g_debug_override;
    g_debug_override = norm_tri(value);
    return prev;
}
remat_tristate remat_get_checkpoint_early_stop(void) { return g_early_stop_override; }
remat_tristate remat_get_checkpoint_debug(void) { return g_debug_override; }

remat_status remat_determinism_check_parse(const char *text, remat_determinism_check *out) {
    if (!text || !out)
        return rm_err(REMAT_EINVAL, "remat_determinism_check_parse: text and out must not be NULL");
    if (strcmp(text, "default") == 0) *out = REMAT_DETERMINISM_DEFAULT;
    else if (strcmp(text, "none") == 0) *out = REMAT_DETERMINISM_NONE;
    else
        return rm_err(REMAT_EINVAL,
                      "determinism_check should be one of ['default', 'none'], "
                      "but got '%.64s'",
                      text);
    return REMAT_OK;
}

static remat_status check_tri(const char *call, const char *name, remat_tristate v) {
    if (v == REMAT_OPT_DEFAULT || v == REMAT_OPT_TRUE || v == REMAT_OPT_FALSE) return REMAT_OK;
    return rm_err(REMAT_EINVAL,
                  "%s: option %s must be REMAT_OPT_DEFAULT (0), REMAT_OPT_TRUE (1) "
                  "or REMAT_OPT_FALSE (-1), got %d",
                  call, name, (int)v);
}

static remat_status check_determinism(const char *call, remat_determinism_check v) {
    if (v == REMAT_DETERMINISM_DEFAULT || v == REMAT_DETERMINISM_NONE) return REMAT_OK;
    return rm_err(REMAT_EINVAL,
                  "%s: option determinism_check must be REMAT_DETERMINISM_DEFAULT "
                  "(0) or REMAT_DETERMINISM_NONE (1), got %d",
                  call, (int)v);
}

/* Resolves the options into *o. warn_text: the warning for an unset
 * use_reentrant (PyTorch words it differently for checkpoint_sequential). */
static remat_status resolve(const char *call, const remat_checkpoint_options *opts, ck_opts *o,
                            const char *warn_text) {
    static const remat_checkpoint_options k_defaults;
    if (!opts) opts = &k_defaults;
    int rc = check_tri(call, "use_reentrant", opts->use_reentrant);
    if (!rc) rc = check_tri(call, "preserve_rng_state", opts->preserve_rng_state);
    if (!rc) rc = check_tri(call, "debug", opts->debug);
    if (!rc) rc = check_tri(call, "early_stop", opts->early_stop);
    if (!rc) rc = check_determinism(call, opts->determinism_check);
    if (rc) return rc;
    memset(o, 0, sizeof *o);
    if (opts->use_reentrant == REMAT_OPT_DEFAULT) {
        rm_warn("%s", warn_text);
        o->reentrant = true;
    } else {
        o->reentrant = opts->use_reentrant == REMAT_OPT_TRUE;
    }
    o->preserve_rng = opts->preserve_rng_state != REMAT_OPT_FALSE;
    o->determinism = opts->determinism_check;
    o->debug_explicit = opts->debug == REMAT_OPT_TRUE;
    o->debug = g_debug_override ? g_debug_override == REMAT_OPT_TRUE : o->debug_explicit;
    o->early_stop = g_early_stop_override ? g_early_stop_override == REMAT_OPT_TRUE
                                          : opts->early_stop != REMAT_OPT_FALSE;
    o->context_fn = opts->context_fn;
    o->context_fn_data = opts->context_fn_data;
    if (o->reentrant) {
        /* PyTorch looks at the explicit debug argument only, not the override */
        if (o->context_fn || o->debug_explicit)
            return rm_err(REMAT_EINVAL,
                          "%s: passing context_fn or debug is only supported when "
                          "use_reentrant = REMAT_OPT_FALSE",
                          call);
    }
    /* PyTorch rejects debug with a non-default context_fn; remat allows it, so
     * that debug traces cover selective-checkpointing regions too (ops
     * served from the selective cache still report to the op observer, so
     * forward and recompute traces line up op for op). */
    return REMAT_OK;
}

static const char *k_warn_checkpoint =
    "remat_checkpoint: the use_reentrant option should be passed explicitly. use_reentrant = "
    "REMAT_OPT_FALSE is recommended, but if you need to preserve the current default behavior, "
    "you can pass use_reentrant = REMAT_OPT_TRUE. Refer to docs/checkpoint.md for details on the "
    "differences between the two variants.";

static const char *k_warn_sequential =
    "remat_checkpoint_sequential: the use_reentrant option should be passed explicitly. "
    "use_reentrant = REMAT_OPT_FALSE is recommended, but if you need to preserve the current "
    "default behavior, you can pass use_reentrant = REMAT_OPT_TRUE. Refer to docs/checkpoint.md "
    "for details on the differences between the two variants.";

/* remat_checkpoint with a destructor for user_data (used by sequential). */
static remat_status checkpoint_impl(remat_checkpoint_fn fn, void *user_data,
                                    void (*user_data_destroy)(void *), int n_inputs,
                                    remat_tensor *const *inputs, int n_outputs,
                                    remat_tensor **outputs, const remat_checkpoint_options *opts,
                                    const char *warn_text) {
    if (outputs)
        for (int i = 0; i < n_outputs; i++) outputs[i] = NULL;
    int rc = REMAT_OK;
    if (!fn) rc = rm_err(REMAT_EINVAL, "remat_checkpoint: fn must not be NULL");
    else if (n_inputs < 0 || (n_inputs > 0 && !inputs))
        rc = rm_err(REMAT_EINVAL, "remat_checkpoint: inputs is NULL or n_inputs (%d) is negative",
                    n_inputs);
    else if (n_outputs < 0 || (n_outputs > 0 && !outputs))
        rc = rm_err(REMAT_EINVAL,
                    "remat_checkpoint: outputs is NULL or n_outputs (%d) is "
                    "negative",
                    n_outputs);
    for (int i = 0; rc == REMAT_OK && i < n_inputs; i++)
        if (inputs[i] && rm_dead(inputs[i])) {
            char arg[32];
            snprintf(arg, sizeof arg, "inputs[%d]", i);
            rc = rm_released_err("remat_checkpoint", arg, inputs[i]);
        }
    ck_opts o;
    if (rc == REMAT_OK) rc = resolve("remat_checkpoint", opts, &o, warn_text);
    if (rc) {
        if (user_data_destroy) user_data_destroy(user_data);
        return rc;
    }
    /* Outputs are handed to the caller's scope once, here. */
    void *scope = rm_scope_suspend();
    if (o.reentrant)
        rc = ck_run_reentrant(fn, user_data, n_inputs, inputs, n_outputs, outputs, &o,
                              user_data_destroy);
    else
        rc = ck_run_nonreentrant(fn, user_data, n_inputs, inputs, n_outputs, outputs, &o,
                                 user_data_destroy);
    rm_scope_resume(scope);
    if (rc) {
        for (int i = 0; i < n_outputs; i++) rm_release_p(&outputs[i]);
        return rc;
    }
    return rm_hand_out_n(outputs, n_outputs);
}

remat_status remat_checkpoint(remat_checkpoint_fn fn, void *user_data, int n_inputs,
                              remat_tensor *const *inputs, int n_outputs, remat_tensor **outputs,
                              const remat_checkpoint_options *opts) {
    return checkpoint_impl(fn, user_data, opts ? opts->user_data_destroy : NULL, n_inputs, inputs,
                           n_outputs, outputs, opts, k_warn_checkpoint);
}

/* ---- checkpoint_sequential ---------------------------------------------------------- */
typedef struct seq_chunk {
    int n;
    int first;            /* index of the first stage, for messages */
    remat_stage stages[]; /* copied: the caller's array may go away */
} seq_chunk;

static remat_status run_stages(const remat_stage *stages, int first, int n, remat_tensor *input,
                               remat_tensor **out) {
    *out = NULL;
    remat_tensor *x = rm_retain(input);
    for (int j = 0; j < n; j++) {
        remat_tensor *y = NULL;
        remat_clear_error();
        int before = atomic_load(&x->refcount);
        int rc = stages[j].fn(stages[j].user_data, &x, 1, &y, 1);
        if (!rc && y == x && atomic_load(&x->refcount) <= before) {
            y = NULL; /* not a reference of its own: nothing to release */
            char b[300];
            rc = rm_err(REMAT_ECALLBACK,
                        "remat_checkpoint_sequential: stage %d returned its input (%s) without "
                        "a new reference: write remat_retain(inputs[0])",
                        first + j, rm_tensor_str(x, b, sizeof b));
        }
        if (!rc && y && rm_dead(y)) {
            char b[300];
            rc = rm_err(REMAT_ECALLBACK,
                        "remat_checkpoint_sequential: stage %d returned a tensor it had "
                        "released (%s)",
                        first + j, rm_tensor_str(y, b, sizeof b));
            y = NULL;
        }
        rm_adopt(y);
        rm_release(x);
        if (rc) {
            rm_release(y);
            if (!remat_last_error()[0])
                rm_err(rc, "remat_checkpoint_sequential: stage %d failed (%s)", first + j,
                       remat_err_name(rc));
            return rc;
        }
        if (!y)
            return rm_err(REMAT_EINVAL,
                          "remat_checkpoint_sequential: stage %d returned no tensor "
                          "(every stage must produce exactly one tensor)",
                          first + j);
        x = y;
    }
    *out = x;
    return REMAT_OK;
}

static remat_status chunk_fn(void *ud, remat_tensor *const *inputs, int n_inputs,
                             remat_tensor **outputs, int n_outputs) {
    seq_chunk *c = ud;
    if (n_inputs != 1 || n_outputs != 1 || !inputs[0])
        return rm_err(REMAT_EINVAL, "remat_checkpoint_sequential: a segment takes one tensor");
    return run_stages(c->stages, c->first, c->n, inputs[0], &outputs[0]);
}

remat_status remat_checkpoint_sequential(remat_tensor **out, int n_stages,
                                         const remat_stage *stages, int segments,
                                         remat_tensor *input,
                                         const remat_checkpoint_options *opts) {
    const char *call = "remat_checkpoint_sequential";
    if (!out) return rm_err(REMAT_EINVAL, "%s: out must not be NULL", call);
    *out = NULL;
    int rc = rm_check_tensor(call, "input", input);
    if (rc) return rc;
    if (n_stages < 0 || (n_stages > 0 && !stages))
        return rm_err(REMAT_EINVAL, "%s: stages is NULL or n_stages (%d) is negative", call,
                      n_stages);
    for (int i = 0; i < n_stages; i++)
        if (!stages[i].fn) return rm_err(REMAT_EINVAL, "%s: stage %d has no fn", call, i);
    if (segments < 1)
        return rm_err(REMAT_EINVAL, "%s: segments must be at least 1, got %d", call, segments);
    if (n_stages > 0 && segments > n_stages) /* PyTorch refuses it too: chunks of no stage */
        return rm_err(REMAT_EINVAL,
                      "%s: %d segments for %d stages: segments must not exceed "
                      "the number of stages",
                      call, segments, n_stages);
    remat_checkpoint_options o = {0};
    if (opts) o = *opts;
    o.user_data_destroy = NULL;
    /* validate once, warn once (PyTorch warns here and passes use_reentrant on) */
    ck_opts resolved;
    rc = resolve(call, &o, &resolved, k_warn_sequential);
    if (rc) return rc;
    o.use_reentrant = resolved.reentrant ? REMAT_OPT_TRUE : REMAT_OPT_FALSE;

    int seg = n_stages / segments;
    int end = -1;
    void *scope = rm_scope_suspend();
    remat_tensor *x = rm_retain(input);
    for (int start = 0; seg > 0 && start < seg * (segments - 1) && rc == REMAT_OK; start += seg) {
        end = start + seg - 1;
        seq_chunk *c = malloc(sizeof *c + (size_t)seg * sizeof(remat_stage));
        if (!c) {
            rc = rm_err(REMAT_ENOMEM, "%s: out of memory", call);
            break;
        }
        c->n = seg;
        c->first = start;
        memcpy(c->stages, stages + start, (size_t)seg * sizeof(remat_stage));
        remat_tensor *y = NULL;
        rc = checkpoint_impl(chunk_fn, c, free, 1, &x, 1, &y, &o, k_warn_checkpoint);
        rm_release(x);
        x = y;
    }
    remat_tensor *y = NULL;
    /* the last chunk and the remainder run normally (never empty unless
     * there are no stages: segments - 1 chunks leave at least one) */
    if (rc == REMAT_OK && n_stages == 0) y = rm_retain(x);
    else if (rc == REMAT_OK)
        rc = run_stages(stages + (end + 1), end + 1, n_stages - end - 1, x, &y);
    rm_release(x);
    rm_scope_resume(scope);
    if (rc) {
        rm_release(y);
        return rc;
    }
    return rm_hand_out(out, y);
}
