/* src/checkpoint/frame.c — non-reentrant checkpoint (PyTorch:
 * _checkpoint_without_reentrant_generator, _CheckpointFrame,
 * _checkpoint_hook, _recomputation_hook, _NoopSaveInputs).
 *
 * Design (mirrors PyTorch):
 *  - The checkpoint's inputs are saved by a no-op node ("NoopSaveInputs")
 *    through whatever saved-tensor hooks are in force, so when checkpoints
 *    nest, the inner one's inputs are placeholders of the outer one.
 *  - The function runs under a pair of hooks whose pack returns a
 *    placeholder handle (frame, index) instead of keeping the tensor. The
 *    frame records each saved tensor's metadata for the determinism check.
 *  - The first unpack of a backward pass (keyed by remat_current_backward_id;
 *    outside backward every access recomputes) re-runs the function once
 *    with grad enabled under "recompute" hooks. Those capture the k-th
 *    tensor saved into slot k of a per-pass record, and keep the tensor for
 *    the recomputed graph itself (so backward inside the function works).
 *  - Each unpack hands the captured tensor to the caller and forgets it:
 *    recomputed tensors die as soon as backward has used them, also with
 *    retain_graph. A second unpack of the same slot in the same pass fails.
 *  - Early stop: when the last slot is filled, PyTorch raises an exception out of
 *    the user's function. C cannot unwind it, so remat switches on skip
 *    mode instead: the rest of the function runs without computing or
 *    allocating (ops make data-less tensors), until it returns.
 *  - The frame is refcounted: every placeholder handle holds a reference,
 *    so it lives as long as any part of the graph may still unpack. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "autograd/graph.h"
#include "ck.h"
#include "core/timing.h"

/* One tensor saved during the original forward (PyTorch: _Holder + x_metadata). */
typedef struct ck_slot {
    bool alive; /* its handle has not been freed */
    int ndim;
    int64_t shape[REMAT_MAX_DIMS];
    remat_dtype dtype;
    remat_device device;
} ck_slot;

/* The recomputation done for one backward pass (PyTorch: the per-gid entries). */
typedef struct ck_rec {
    uint64_t gid; /* backward id; 0 for an access outside backward */
    bool recomputed;
    bool in_progress;
    bool stopped; /* early stop reached: skip mode is on */
    int counter;  /* tensors saved so far by the recomputation */
    int n_vals;
    remat_tensor **vals; /* captured tensors; NULL once handed out */
    bool *filled;        /* slot was captured in this pass */
    int err;             /* error raised by the recompute pack hook */
    char *errmsg;
    struct ck_rec *next;
} ck_rec;

typedef struct ck_frame {
    int refcount;
    remat_checkpoint_fn fn;
    void *user_data;
    void (*user_data_destroy)(void *);
    int n_inputs, n_outputs;
    remat_tensor *input_saver; /* output of the NoopSaveInputs node */
    bool *input_req;           /* requires_grad of each input at forward */
    ck_slot *slots;
    int n_slots, cap_slots;
    ck_rec *recs;
    bool early_stop;
    bool forward_completed;
    bool ignore_saved_mismatch;
    remat_determinism_check determinism;
    bool debug;
    bool recomputing; /* mutes the forward trace (grad inside forward) */
    ck_trace fwd_trace, rec_trace;
    ck_rng rng;
    bool has_ctx;
    remat_checkpoint_contexts ctx;
} ck_frame;

typedef struct ck_handle {
    ck_frame *f;
    int idx;
} ck_handle;

static const char *k_tip =
    "\nTip: to see a more detailed error message, either pass debug = REMAT_OPT_TRUE to "
    "remat_checkpoint or call remat_set_checkpoint_debug(REMAT_OPT_TRUE) to enable checkpoint "
    "debug mode globally.";

/* ---- frame lifetime ------------------------------------------------------------ */
static void rec_free(ck_rec *r) {
    if (!r) return;
    /* vals is NULL when its allocation failed (n_vals is set before it) */
    for (int i = 0; r->vals && i < r->n_vals; i++) rm_release(r->vals[i]);
    free(r->vals);
    free(r->filled);
    free(r->errmsg);
    free(r);
}

static ck_frame *frame_retain(ck_frame *f) {
    f->refcount++;
    return f;
}

static void frame_release(ck_frame *f) {
    if (!f || --f->refcount > 0) return;
    for (ck_rec *r = f->recs; r;) {
        ck_rec *nx = r->next;
        rec_free(r);
        r = nx;
    }
    /* Releasing the input saver may free placeholders of a parent frame. */
    rm_release(f->input_saver);
    if (f->has_ctx && f->ctx.destroy) f->ctx.destroy(f->ctx.state);
    if (f->user_data_destroy) f->user_data_destroy(f->user_data);
    ck_trace_free(&f->fwd_trace);
    ck_trace_free(&f->rec_trace);
    free(f->input_req);
    free(f->slots);
    free(f);
}

static void unlink_rec(ck_frame *f, ck_rec *r) {
    for (ck_rec **pp = &f->recs; *pp; pp = &(*pp)->next) {
        if (*pp == r) {
            *pp = r->next;
            return;
        }
    }
}

static const char *meta_str(int ndim, const int64_t *shape, remat_dtype dtype, remat_device dev,
                            char *buf, size_t n) {
    char sb[160];
    const char *tn = remat_device_type_name(dev.type);
    snprintf(buf, n, "{shape: %s, dtype: %s, device: %s:%d}",
             rm_shape_str(ndim, shape, sb, sizeof sb), remat_dtype_name(dtype), tn ? tn : "?",
             dev.index);
    return buf;
}

static bool meta_equal(const ck_slot *s, const remat_tensor *t) {
    if (s->ndim != t->ndim || s->dtype != t->dtype) return false;
    if (s->device.type != t->storage->device.type || s->device.index != t->storage->device.index)
        return false;
    return memcmp(s->shape, t->shape, sizeof(int64_t) * (size_t)s->ndim) == 0;
}

/* ---- the checkpoint hooks (original forward) -------------------------------------- */
static void *fwd_pack(void *ud, remat_tensor *t) {
    ck_frame *f = ud;
    ck_slot *ns = rm_grow(f->slots, &f->cap_slots, f->n_slots, 16, sizeof *ns);
    if (!ns) {
        rm_err(REMAT_ENOMEM, "remat_checkpoint: out of memory recording a saved tensor");
        return NULL;
    }
    f->slots = ns;
    ck_handle *h = malloc(sizeof *h);
    if (!h) {
        rm_err(REMAT_ENOMEM, "remat_checkpoint: out of memory recording a saved tensor");
        return NULL;
    }
    ck_slot *s = &f->slots[f->n_slots];
    s->alive = true;
    s->ndim = t->ndim;
    memset(s->shape, 0, sizeof s->shape);
    memcpy(s->shape, t->shape, sizeof(int64_t) * (size_t)t->ndim);
    s->dtype = t->dtype;
    s->device = t->storage->device;
    h->f = frame_retain(f);
    h->idx = f->n_slots++;
    return h;
}

static void fwd_free(void *ud, void *handle) {
    RM_UNUSED(ud);
    ck_handle *h = handle;
    ck_frame *f = h->f;
    f->slots[h->idx].alive = false;
    /* PyTorch keeps recomputed tensors in weak dicts keyed by the holder: they
     * die with it. */
    for (ck_rec *r = f->recs; r; r = r->next)
        if (h->idx < r->n_vals) rm_release_p(&r->vals[h->idx]);
    free(h);
    frame_release(f);
}

/* ---- the recomputation hooks ------------------------------------------------------ */
/* The recomputation running for one frame and pass, as its hooks and its
 * contexts see it (handed to a context through recompute_attach). */
struct remat_recomputation {
    ck_frame *f;
    ck_rec *rec;
    int hooks_depth; /* saved-hooks depth its own hooks sit at */
};

int remat_recomputation_remaining(const remat_recomputation *c) {
    if (!c || !c->f->early_stop || c->rec->stopped || !c->f->forward_completed ||
        remat_saved_hooks_depth() != c->hooks_depth)
        return -1;
    return c->f->n_slots - c->rec->counter;
}

bool remat_recomputation_stopped(const remat_recomputation *c) { return c && c->rec->stopped; }

/* The handle of a tensor saved by the recomputed graph is the tensor
 * itself: the recomputed graph may be backwarded too (grad() inside the
 * function), and dies with the recompute's outputs. */
static remat_status rec_unpack(void *ud, void *handle, remat_tensor **out) {
    RM_UNUSED(ud);
    *out = rm_retain(handle);
    return REMAT_OK;
}

static void rec_free_handle(void *ud, void *handle) {
    RM_UNUSED(ud);
    rm_release(handle);
}

static void *rec_pack(void *ud, remat_tensor *t) {
    remat_recomputation *c = ud;
    ck_frame *f = c->f;
    ck_rec *rec = c->rec;
    /* After early stop PyTorch has left the function; remat runs the rest in
     * skip mode and ignores what it saves. */
    if (rec->stopped) return rm_retain(t);
    int idx = rec->counter++;
    if (idx >= f->n_slots) {
        if (!f->forward_completed) {
            /* backward inside the checkpointed function during its own
             * forward, with early stop off: more is saved later (PyTorch). */
            f->ignore_saved_mismatch = true;
            return rm_retain(t);
        }
        if (!rec->err) {
            char msg[512];
            snprintf(msg, sizeof msg,
                     "remat_checkpoint: trying to save more tensors during recomputation than "
                     "during the original forward pass (%d saved in forward).%s",
                     f->n_slots, k_tip);
            rec->err = REMAT_EDETERMINISM;
            rec->errmsg = strdup(msg);
            rm_err(REMAT_EDETERMINISM, "%s", msg);
        }
        return NULL;
    }
    if (idx < rec->n_vals && f->slots[idx].alive) {
        rec->vals[idx] = rm_retain(t);
        rec->filled[idx] = true;
    }
    if (f->early_stop && rec->counter == f->n_slots) {
        rec->stopped = true;
        rm_set_skip_mode(true);
    }
    return rm_retain(t);
}

/* ---- recomputation ------------------------------------------------------------------- */
/* The function's inputs for a recomputation, into args[0..n_inputs).
 * Unpacking them may recompute the parent checkpoint (nesting). */
static remat_status unpack_inputs(ck_frame *f, remat_tensor **args) {
    int n = f->n_inputs, rc = REMAT_OK;
    remat_node *saver = f->input_saver->grad_fn;
    for (int i = 0; i < n && rc == REMAT_OK; i++) rc = rm_node_unpack(saver, i, &args[i]);
    /* An unpacked saved tensor is a bare alias; PyTorch gives the function its
     * inputs with their autograd attributes. Without requires_grad the
     * recomputation would record (and save) less than the forward did. */
    for (int i = 0; i < n && rc == REMAT_OK; i++) {
        if (!args[i] || !f->input_req[i] || args[i]->requires_grad) continue;
        remat_tensor *a = NULL;
        rc = remat_detach(&a, args[i]);
        if (rc == REMAT_OK) rc = remat_set_requires_grad(a, true);
        rm_release(args[i]);
        args[i] = a;
    }
    return rc;
}

/* Enters one context of a context_fn pair (enter may be NULL); a failure
 * that set no message gets one naming the context. */
static remat_status ctx_enter(remat_status (*enter)(void *), void *state, const char *which) {
    if (!enter) return REMAT_OK;
    remat_clear_error();
    int rc = enter(state);
    if (rc && !remat_last_error()[0])
        rm_err(rc, "remat_checkpoint: context_fn's %s context failed to enter (%s)", which,
               remat_err_name(rc));
    return rc;
}

/* Hands the running recomputation (NULL: none any more) to the contexts. */
static void ctx_attach(ck_frame *f, const remat_recomputation *rc) {
    if (f->has_ctx && f->ctx.recompute_attach) f->ctx.recompute_attach(f->ctx.state, rc);
}

/* Runs the function once more inside the context_fn's recompute context
 * (if any), tracing its ops when debug is on. Skip mode is back to
 * prev_skip on return. */
static remat_status run_in_recompute_context(remat_recomputation *rctx, remat_tensor **args,
                                             remat_tensor **outs, bool prev_skip) {
    ck_frame *f = rctx->f;
    ck_rec *rec = rctx->rec;
    ctx_attach(f, rctx);
    int rc = f->has_ctx ? ctx_enter(f->ctx.recompute_enter, f->ctx.state, "recompute") : 0;
    if (rc) {
        ctx_attach(f, NULL);
        return rc;
    }
    ck_observe obs;
    bool prev_recomputing = f->recomputing;
    f->recomputing = true;
    if (f->debug) {
        ck_trace_reset(&f->rec_trace);
        ck_observe_begin(&obs, &f->rec_trace, &rec->stopped);
    }
    /* the depth of the hooks in force from here: remat_recomputation_remaining
     * counts only saves made directly under them */
    rctx->hooks_depth = remat_saved_hooks_depth();
    rc = ck_call_fn(f->fn, f->user_data, f->n_inputs, args, f->n_outputs, outs);
    /* Whatever the function did after early stop, PyTorch never ran it. */
    if (rec->stopped && !rec->err) rc = REMAT_OK;
    for (int i = 0; i < f->n_outputs; i++) rm_release_p(&outs[i]);
    if (f->debug) ck_observe_end(&obs);
    f->recomputing = prev_recomputing;
    rm_set_skip_mode(prev_skip);
    if (f->has_ctx && f->ctx.recompute_exit) {
        int xrc = f->ctx.recompute_exit(f->ctx.state, rc);
        if (rc == REMAT_OK) rc = xrc;
    }
    ctx_attach(f, NULL);
    return rc;
}

static remat_status recompute(ck_frame *f, ck_rec *rec) {
    int n = f->n_inputs;
    remat_tensor **args = calloc((size_t)(n ? n : 1), sizeof *args);
    remat_tensor **outs = calloc((size_t)(f->n_outputs ? f->n_outputs : 1), sizeof *outs);
    if (!args || !outs) {
        free(args);
        free(outs);
        return rm_err(REMAT_ENOMEM, "remat_checkpoint: out of memory in recomputation");
    }
    int rc = unpack_inputs(f, args);
    if (rc) goto out_args;

    remat_recomputation rctx = {f, rec, -1};
    remat_saved_hooks hooks = {rec_pack, rec_unpack, rec_free_handle, &rctx};
    rc = remat_saved_hooks_push(&hooks);
    if (rc) goto out_args;
    rec->in_progress = true;
    bool prev_grad = remat_set_grad_enabled(true);
    bool prev_skip = rm_skip_mode();
    remat_rng_fork fork;
    remat_autocast_state prev_ac;
    remat_autocast_get_state(&prev_ac);
    remat_autocast_set_state(&f->rng.autocast);
    rc = ck_rng_enter(&f->rng, &fork);
    if (rc == REMAT_OK) {
        const remat_phase prev_phase = rm_phase_set(REMAT_PHASE_RECOMPUTE);
        rc = run_in_recompute_context(&rctx, args, outs, prev_skip);
        rm_phase_set(prev_phase);
        int frc = ck_rng_exit(&f->rng, &fork);
        if (rc == REMAT_OK) rc = frc;
    }
    remat_autocast_set_state(&prev_ac);
    rm_set_skip_mode(prev_skip);
    remat_set_grad_enabled(prev_grad);
    remat_saved_hooks_pop();
    rec->in_progress = false;
    if (rec->err)
        rc = rm_err(rec->err, "%s",
                    rec->errmsg ? rec->errmsg
                                : "remat_checkpoint: "
                                  "recomputation failed");
out_args:
    for (int i = 0; i < n; i++) rm_release(args[i]);
    free(args);
    free(outs);
    return rc;
}

/* PyTorch: _CheckpointFrame.check_recomputed_tensors_match: the count, then (for
 * "default") the metadata of every live slot. */
static remat_status check_match(ck_frame *f, ck_rec *rec) {
    if (f->ignore_saved_mismatch) return REMAT_OK;
    if (rec->counter != f->n_slots)
        return rm_err(REMAT_EDETERMINISM,
                      "remat_checkpoint: A different number of tensors was saved during the "
                      "original forward and recomputation.\nNumber of tensors saved during "
                      "forward: %d\nNumber of tensors saved during recomputation: %d.%s",
                      f->n_slots, rec->counter, k_tip);
    if (f->determinism == REMAT_DETERMINISM_NONE) return REMAT_OK;
    /* every differing position, with both metadata */
    size_t cap = 1024, len = 0;
    char *list = NULL;
    int n_diff = 0;
    for (int i = 0; i < f->n_slots; i++) {
        const ck_slot *s = &f->slots[i];
        if (!s->alive || i >= rec->n_vals || !rec->vals[i]) continue;
        const remat_tensor *t = rec->vals[i];
        if (meta_equal(s, t)) continue;
        char a[320], b[320], line[800];
        int k = snprintf(line, sizeof line,
                         "tensor at position %d:\nsaved metadata: %s\nrecomputed metadata: %s\n", i,
                         meta_str(s->ndim, s->shape, s->dtype, s->device, a, sizeof a),
                         meta_str(t->ndim, t->shape, t->dtype, t->storage->device, b, sizeof b));
        if (k < 0) continue;
        if (!list || len + (size_t)k + 1 > cap) {
            while (len + (size_t)k + 1 > cap) cap *= 2;
            char *nl = realloc(list, cap);
            if (!nl) break;
            list = nl;
        }
        memcpy(list + len, line, (size_t)k + 1);
        len += (size_t)k;
        n_diff++;
    }
    if (n_diff == 0) {
        free(list);
        return REMAT_OK;
    }
    int rc = rm_err(REMAT_EDETERMINISM,
                    "remat_checkpoint: Recomputed values for the following tensors have different "
                    "metadata than during the forward pass.\n%s%s",
                    list ? list : "(out of memory listing them)\n", k_tip);
    free(list);
    return rc;
}

static remat_status fwd_unpack(void *ud, void *handle, remat_tensor **out) {
    RM_UNUSED(ud);
    ck_handle *h = handle;
    ck_frame *f = frame_retain(h->f);
    *out = NULL;
    uint64_t gid = remat_current_backward_id();
    ck_rec *rec = NULL;
    if (gid)
        for (ck_rec *r = f->recs; r; r = r->next)
            if (r->gid == gid) rec = r;
    int rc = REMAT_OK;
    bool own = false; /* a checkpoint error (debug report applies) */
    if (rec && rec->in_progress) {
        rc = rm_err(REMAT_ESTATE,
                    "remat_checkpoint: a saved tensor of a checkpoint was unpacked "
                    "while that checkpoint was being recomputed (the checkpointed function uses "
                    "its own original graph)");
        goto done;
    }
    if (!rec || !rec->recomputed) {
        if (!rec) {
            rec = calloc(1, sizeof *rec);
            if (rec) {
                rec->gid = gid;
                rec->n_vals = f->n_slots;
                rec->vals = calloc((size_t)(f->n_slots ? f->n_slots : 1), sizeof *rec->vals);
                rec->filled = calloc((size_t)(f->n_slots ? f->n_slots : 1), sizeof *rec->filled);
            }
            if (!rec || !rec->vals || !rec->filled) {
                rec_free(rec);
                rec = NULL;
                rc = rm_err(REMAT_ENOMEM, "remat_checkpoint: out of memory in recomputation");
                goto done;
            }
            /* Linked so that freed placeholders drop their captured
             * tensors, also while the recompute runs. */
            rec->next = f->recs;
            f->recs = rec;
        }
        rc = recompute(f, rec);
        own = rec->err != 0;
        if (rc == REMAT_OK) {
            rec->recomputed = true;
            rc = check_match(f, rec);
            own = rc != REMAT_OK;
        }
        if (rc) {
            /* forget this pass: a retry recomputes (and fails) again */
            unlink_rec(f, rec);
            rec_free(rec);
            rec = NULL;
            goto done;
        }
    }
    if (h->idx >= rec->n_vals || !rec->filled[h->idx]) {
        rc = rm_err(REMAT_ESTATE,
                    "remat_checkpoint: saved tensor %d was not recomputed (internal "
                    "error: the recomputation never reached it)",
                    h->idx);
        own = true;
        goto done;
    }
    remat_tensor *t = rec->vals[h->idx];
    if (!t) {
        rc = rm_err(REMAT_ESTATE,
                    "remat_checkpoint: Unpack is being triggered for a tensor that was already "
                    "unpacked once. If you are calling remat_ctx_saved in a custom backward, make "
                    "sure to call it only once per saved tensor (recomputed tensors are freed as "
                    "soon as they are unpacked).");
        own = true;
        goto done;
    }
    const ck_slot *s = &f->slots[h->idx];
    if (!meta_equal(s, t)) {
        /* determinism_check "none" skipped the up-front comparison, but a
         * tensor of another shape must never reach a backward kernel. */
        char a[320], b[320];
        rc = rm_err(REMAT_EDETERMINISM,
                    "remat_checkpoint: the recomputed tensor at position %d has metadata %s but "
                    "the original had %s (determinism_check \"none\" skips the comparison of "
                    "metadata, but remat cannot give backward a tensor of another shape, dtype or "
                    "device)",
                    h->idx, meta_str(t->ndim, t->shape, t->dtype, t->storage->device, a, sizeof a),
                    meta_str(s->ndim, s->shape, s->dtype, s->device, b, sizeof b));
        own = true;
        goto done;
    }
    /* Freed as soon as unpacked (PyTorch's Rule 4): the caller owns the only
     * reference the checkpoint had. */
    *out = t;
    rec->vals[h->idx] = NULL;
    if (gid == 0) {
        /* outside backward every access recomputes: nothing to keep */
        unlink_rec(f, rec);
        rec_free(rec);
    }
done:
    if (rc && own && f->debug)
        rc = ck_debug_error(rc, remat_last_error(), &f->fwd_trace, &f->rec_trace);
    frame_release(f);
    return rc;
}

/* ---- saving the inputs (PyTorch: _NoopSaveInputs) ------------------------------------------ */
static remat_status noop_backward(remat_node *node, remat_tensor *const *gout, remat_tensor **gin) {
    RM_UNUSED(node);
    RM_UNUSED(gout);
    RM_UNUSED(gin);
    return rm_err(REMAT_ESTATE, "remat_checkpoint: did not expect backward through the node that "
                                "saves a checkpoint's inputs");
}

static remat_status save_inputs(ck_frame *f, int n, remat_tensor *const *inputs) {
    f->input_req = calloc((size_t)(n ? n : 1), sizeof *f->input_req);
    if (!f->input_req) return rm_err(REMAT_ENOMEM, "remat_checkpoint: out of memory");
    for (int i = 0; i < n; i++) f->input_req[i] = inputs[i] && inputs[i]->requires_grad;
    int64_t zero = 0;
    remat_tensor *saver = NULL;
    int rc = rm_new_output(&saver, 1, &zero, REMAT_F32, REMAT_DEVICE_CPU);
    if (rc) return rm_err_prefix(rc, CK_CALL);
    remat_node *node;
    /* No edges: the node only holds the saved inputs. Its output is never
     * part of a graph that backward walks. */
    rc = rm_node_new(&node, "NoopSaveInputsBackward", noop_backward, 0, NULL, 1, n);
    if (rc) {
        rm_release(saver);
        return rm_err_prefix(rc, CK_CALL);
    }
    for (int i = 0; i < n && rc == REMAT_OK; i++) rc = rm_node_save(node, i, inputs[i]);
    if (rc == REMAT_OK) rm_node_set_output(node, 0, saver);
    rm_node_release(node);
    if (rc) {
        rm_release(saver);
        return rm_err_prefix(rc, CK_CALL);
    }
    f->input_saver = saver;
    return REMAT_OK;
}

/* ---- the forward ---------------------------------------------------------------------- */
static remat_status call_ctx_fn(const ck_opts *o, remat_checkpoint_contexts *pair) {
    memset(pair, 0, sizeof *pair);
    remat_clear_error();
    int rc = o->context_fn(o->context_fn_data, pair);
    if (rc) {
        if (!remat_last_error()[0])
            rm_err(rc, "remat_checkpoint: context_fn failed (%s)", remat_err_name(rc));
        return rc;
    }
    return REMAT_OK;
}

remat_status ck_run_nonreentrant(remat_checkpoint_fn fn, void *user_data, int n_inputs,
                                 remat_tensor *const *inputs, int n_outputs, remat_tensor **outputs,
                                 const ck_opts *o, void (*user_data_destroy)(void *)) {
    ck_rng rng;
    int rc = ck_rng_stash(&rng, o->preserve_rng, n_inputs, inputs);
    remat_checkpoint_contexts pair;
    bool has_ctx = false;
    if (rc == REMAT_OK && o->context_fn) {
        rc = call_ctx_fn(o, &pair);
        has_ctx = rc == REMAT_OK;
    }
    if (rc) {
        if (user_data_destroy) user_data_destroy(user_data);
        return rc;
    }
    if (!remat_is_grad_enabled()) {
        /* nothing is recorded, so nothing to recompute (PyTorch: no contexts either) */
        rc = ck_call_fn(fn, user_data, n_inputs, inputs, n_outputs, outputs);
        if (has_ctx && pair.destroy) pair.destroy(pair.state);
        if (user_data_destroy) user_data_destroy(user_data);
        return rc;
    }

    ck_frame *f = calloc(1, sizeof *f);
    if (!f) {
        if (has_ctx && pair.destroy) pair.destroy(pair.state);
        if (user_data_destroy) user_data_destroy(user_data);
        return rm_err(REMAT_ENOMEM, "remat_checkpoint: out of memory");
    }
    f->refcount = 1;
    f->fn = fn;
    f->user_data = user_data;
    f->user_data_destroy = user_data_destroy;
    f->n_inputs = n_inputs;
    f->n_outputs = n_outputs;
    f->early_stop = o->early_stop;
    f->determinism = o->determinism;
    f->debug = o->debug;
    f->rng = rng;
    f->has_ctx = has_ctx;
    if (has_ctx) f->ctx = pair;

    rc = save_inputs(f, n_inputs, inputs);
    if (rc == REMAT_OK) {
        remat_saved_hooks hooks = {fwd_pack, fwd_unpack, fwd_free, f};
        rc = remat_saved_hooks_push(&hooks);
    }
    if (rc) {
        frame_release(f);
        return rc;
    }
    if (f->has_ctx) rc = ctx_enter(f->ctx.forward_enter, f->ctx.state, "forward");
    if (rc == REMAT_OK) {
        ck_observe obs;
        if (f->debug) ck_observe_begin(&obs, &f->fwd_trace, &f->recomputing);
        rc = ck_call_fn(fn, user_data, n_inputs, inputs, n_outputs, outputs);
        if (f->debug) ck_observe_end(&obs);
        if (f->has_ctx && f->ctx.forward_exit) {
            int xrc = f->ctx.forward_exit(f->ctx.state, rc);
            if (rc == REMAT_OK) rc = xrc;
        }
    }
    remat_saved_hooks_pop();
    f->forward_completed = true;
    if (rc == REMAT_OK) rc = ck_rng_check_initialized(&f->rng);
    if (rc)
        for (int i = 0; i < n_outputs; i++) rm_release_p(&outputs[i]);
    /* placeholders in the graph keep the frame alive from here on */
    frame_release(f);
    return rc;
}
