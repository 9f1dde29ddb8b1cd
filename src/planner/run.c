/*
 * src/planner/run.c — executing a plan with nested non-reentrant
 * checkpoints, plus the one-call conveniences and byte-size parsing.
 *
 * A plan level (the children of a CHECKPOINT node, or the top level) runs
 * its nodes in order: a STORE node calls its stage; a CHECKPOINT node calls
 * remat_checkpoint with a function that runs the node's own children. In
 * the first forward every stage under a checkpoint keeps nothing (the
 * checkpoint replaces what it saves by placeholders, inner checkpoints'
 * inputs included); when backward reaches the segment, its recomputation
 * runs the children again: stored children now keep their tensors and
 * inner checkpoints keep only their inputs, to be recomputed in turn when
 * backward reaches them. That is exactly the rotor schedule of the plan.
 *
 * A checkpointed function may run long after remat_plan_run returned (in
 * backward), so each checkpoint call gets a heap closure (freed by the
 * checkpoint through user_data_destroy) pointing to a refcounted copy of
 * the plan's tree and the stage list.
 */
#include <ctype.h>
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "core/core.h"
#include "planner_internal.h"
#include "remat/compress.h"
#include "remat/selective.h"

/* Everything a segment needs to run its children, shared by the segments
 * of one remat_plan_run call and kept alive by them (refcounted): the
 * segments of a step may recompute long after the call returned, and even
 * after the plan was freed. */
typedef struct pl_runctx {
    atomic_int ref;
    int n_nodes;
    remat_plan_node *nodes; /* copy of the plan's tree */
    int *next;              /* subtree ends */
    remat_stage *stages;    /* copy of the caller's list */
    remat_checkpoint_options opts;
    remat_policy **keep; /* op-level plans: per stage, the policy of its selective
                               checkpoint (NULL: a plain one); NULL for block plans */
    uint8_t *offloads;   /* with keep: per stage, whether it offloads some op */
    uint8_t *store_bf16; /* per stage, stored under the bf16 hooks (NULL: none is) */
    int n_stages;
} pl_runctx;

/* user_data of one checkpoint call (owned by it: user_data_destroy). */
typedef struct pl_seg {
    pl_runctx *rc;
    int node;
} pl_seg;

static void runctx_unref(pl_runctx *c) {
    if (!c || atomic_fetch_sub(&c->ref, 1) != 1) return;
    free(c->nodes);
    free(c->next);
    free(c->stages);
    if (c->keep)
        for (int k = 0; k < c->n_stages; k++) remat_policy_release(c->keep[k]);
    free(c->keep);
    free(c->offloads);
    free(c->store_bf16);
    free(c);
}

/* ---- op-level plans: a stage's kept ops as a policy ------------------------------------- */
typedef struct keep_state {
    int n;
    uint8_t keep[]; /* n entries */
} keep_state;

/* Keeps the ops the plan marks (by their index in the stage, as profiled), recomputes the rest. */
static remat_checkpoint_policy keep_policy(const remat_sac_context *ctx, const char *op,
                                           int n_inputs, remat_tensor *const *inputs,
                                           void *user_state) {
    (void)op;
    (void)n_inputs;
    (void)inputs;
    const keep_state *ks = user_state;
    int i = ctx->op_index;
    if (i < 0 || i >= ks->n) return REMAT_PREFER_RECOMPUTE;
    return ks->keep[i] == REMAT_OP_KEEP        ? REMAT_MUST_SAVE
           : ks->keep[i] == REMAT_OP_OFFLOAD   ? REMAT_MUST_CPU_OFFLOAD
           : ks->keep[i] == REMAT_OP_KEEP_BF16 ? REMAT_MUST_SAVE_BF16
                                               : REMAT_PREFER_RECOMPUTE;
}

static remat_status keep_policies(pl_runctx *c, const remat_plan *plan, const char *call) {
    bool any = false;
    for (int k = 0; k < plan->n_stages; k++) any = any || plan->stages[k].keep;
    if (!any) return REMAT_OK;
    c->keep = calloc((size_t)plan->n_stages, sizeof *c->keep);
    c->offloads = calloc((size_t)plan->n_stages, 1);
    if (!c->keep || !c->offloads) return rm_err(REMAT_ENOMEM, "%s: out of memory", call);
    for (int k = 0; k < plan->n_stages; k++) {
        const remat_plan_stage *st = &plan->stages[k];
        if (!st->keep || st->n_ops <= 0) continue;
        keep_state *ks = malloc(sizeof *ks + (size_t)st->n_ops);
        if (!ks) return rm_err(REMAT_ENOMEM, "%s: out of memory", call);
        ks->n = st->n_ops;
        memcpy(ks->keep, st->keep, (size_t)st->n_ops);
        for (int i = 0; i < st->n_ops; i++) c->offloads[k] |= st->keep[i] == REMAT_OP_OFFLOAD;
        int rc = remat_policy_from_fn(&c->keep[k], keep_policy, ks, free);
        if (rc) {
            free(ks);
            return rc;
        }
    }
    return REMAT_OK;
}

/* Stored stages kept as bf16 (op-level lossy plans; pl_validate allowed them at the top
 * level only). */
static remat_status store_bf16_flags(pl_runctx *c, const remat_plan *plan, const char *call) {
    bool any = false;
    for (int k = 0; k < plan->n_stages; k++) any = any || plan->stages[k].store_bf16;
    if (!any) return REMAT_OK;
    c->store_bf16 = calloc((size_t)plan->n_stages, 1);
    if (!c->store_bf16) return rm_err(REMAT_ENOMEM, "%s: out of memory", call);
    for (int k = 0; k < plan->n_stages; k++) c->store_bf16[k] = plan->stages[k].store_bf16;
    return REMAT_OK;
}

/* A stored stage: its forward, under the bf16 hooks when the plan keeps it as bf16. */
static remat_status run_stored(const pl_runctx *c, int k, remat_tensor *in, remat_tensor **y) {
    const remat_stage *st = &c->stages[k];
    const bool z = c->store_bf16 && c->store_bf16[k];
    pl_store_bf16 ctx;
    int rc = REMAT_OK;
    if (z) {
        remat_saved_hooks h = pl_store_bf16_hooks(&ctx, in);
        rc = remat_saved_hooks_push(&h);
        if (rc) return rc;
    }
    rc = st->fn(st->user_data, &in, 1, y, 1);
    if (z) remat_saved_hooks_pop();
    return rc;
}

static void seg_destroy(void *user_data) {
    pl_seg *sg = user_data;
    runctx_unref(sg->rc);
    free(sg);
}

static remat_status runctx_new(const remat_plan *plan, const remat_stage *stages,
                               const remat_checkpoint_options *opts, pl_runctx **out,
                               const char *call) {
    *out = NULL;
    int rc = pl_validate(plan, call);
    if (rc) return rc;
    size_t n = (size_t)plan->n_stages, nn = (size_t)plan->n_nodes;
    pl_runctx *c = calloc(1, sizeof *c);
    if (c) {
        c->nodes = malloc(nn * sizeof *c->nodes);
        c->next = malloc(nn * sizeof *c->next);
        c->stages = malloc(n * sizeof *c->stages);
    }
    if (!c || !c->nodes || !c->next || !c->stages) {
        if (c) {
            free(c->nodes);
            free(c->next);
            free(c->stages);
        }
        free(c);
        return rm_err(REMAT_ENOMEM, "%s: out of memory", call);
    }
    atomic_init(&c->ref, 1);
    c->n_nodes = plan->n_nodes;
    c->n_stages = plan->n_stages;
    memcpy(c->nodes, plan->nodes, nn * sizeof *c->nodes);
    memcpy(c->stages, stages, n * sizeof *c->stages);
    c->opts = *opts;
    for (int i = plan->n_nodes - 1; i >= 0; i--) {
        int j = i + 1;
        if (c->nodes[i].op == REMAT_PLAN_CHECKPOINT)
            while (j < plan->n_nodes && c->nodes[j].parent == i) j = c->next[j];
        c->next[i] = j;
    }
    rc = keep_policies(c, plan, call);
    if (!rc) rc = store_bf16_flags(c, plan, call);
    if (rc) {
        runctx_unref(c);
        return rc;
    }
    *out = c;
    return REMAT_OK;
}

static remat_status run_level(pl_runctx *c, int i, int end, remat_tensor *in, remat_tensor **out);

/* The function of a checkpointed segment: runs the node's children. */
static remat_status segment_fn(void *user_data, remat_tensor *const *inputs, int n_inputs,
                               remat_tensor **outputs, int n_outputs) {
    const pl_seg *sg = user_data;
    if (n_inputs != 1 || n_outputs != 1 || !inputs[0])
        return rm_err(REMAT_EINVAL, "remat_plan_run: internal: segment called with %d inputs",
                      n_inputs);
    return run_level(sg->rc, sg->node + 1, sg->rc->next[sg->node], inputs[0], &outputs[0]);
}

static remat_status run_level(pl_runctx *c, int i, int end, remat_tensor *in, remat_tensor **out) {
    remat_tensor *cur = in;
    bool own = false;
    *out = NULL;
    for (; i < end; i = c->next[i]) {
        const remat_plan_node *nd = &c->nodes[i];
        remat_tensor *y = NULL;
        int rc;
        if (nd->op == REMAT_PLAN_STORE) {
            rc = run_stored(c, nd->first, cur, &y);
            if (!rc && !y) rc = rm_err(REMAT_EINVAL, "the stage returned no tensor");
            if (!rc) rm_adopt(y);
            if (rc) {
                char where[32];
                snprintf(where, sizeof where, "stage %d", nd->first);
                rm_err_prefix(rc, where);
            }
        } else {
            pl_seg *sg = malloc(sizeof *sg);
            if (!sg) {
                rc = rm_err(REMAT_ENOMEM, "out of memory");
            } else {
                atomic_fetch_add(&c->ref, 1);
                *sg = (pl_seg){c, i};
                /* an op-level plan's stage: a selective checkpoint keeping its planned ops
                 * (the config is read by this call only; regions hold the policy) */
                remat_checkpoint_options o = c->opts;
                remat_sac_config cfg = {0};
                if (c->keep && nd->first == nd->last && c->keep[nd->first]) {
                    cfg.policy = c->keep[nd->first];
                    o.context_fn = remat_sac_context_fn;
                    o.context_fn_data = &cfg;
                }
                /* the checkpoint owns sg from here on, failure included */
                rc = remat_checkpoint(segment_fn, sg, 1, &cur, 1, &y, &o);
                /* offloaded ops: their device memory goes back before the next stage
                 * (the planner's model counts it in this stage's forward only) */
                if (!rc && cfg.policy && c->offloads[nd->first]) remat_offload_wait();
            }
        }
        if (own) rm_release(cur);
        if (rc) {
            rm_release(y);
            return rc;
        }
        cur = y;
        own = true;
    }
    *out = cur;
    return REMAT_OK;
}

remat_status remat_plan_run_ex(const remat_plan *plan, const remat_stage *stages,
                               remat_tensor *input, remat_tensor **output,
                               const remat_checkpoint_options *base) {
    static const char *call = "remat_plan_run";
    if (!output) return rm_err(REMAT_EINVAL, "%s: output is NULL", call);
    *output = NULL;
    if (!plan) return rm_err(REMAT_EINVAL, "%s: plan is NULL", call);
    if (!stages) return rm_err(REMAT_EINVAL, "%s: stages is NULL", call);
    if (!input) return rm_err(REMAT_EINVAL, "%s: input is NULL", call);
    if (rm_dead(input)) return rm_released_err(call, "input", input);
    if (plan->n_stages < 1 || !plan->nodes || plan->n_nodes < 1)
        return rm_err(REMAT_EINVAL, "%s: plan is empty", call);
    for (int k = 0; k < plan->n_stages; k++)
        if (!stages[k].fn) return rm_err(REMAT_EINVAL, "%s: stages[%d].fn is NULL", call, k);
    remat_checkpoint_options o = {0};
    if (base) o = *base;
    o.use_reentrant = REMAT_OPT_FALSE; /* the nesting relies on saved-tensor hooks */
    o.user_data_destroy = seg_destroy; /* our closures, not the caller's */
    pl_runctx *c = NULL;
    int rc = runctx_new(plan, stages, &o, &c, call);
    if (rc) return rc;
    /* References made here are plain ones: the output alone goes to the
     * caller's scope. */
    void *scope = rm_scope_suspend();
    remat_tensor *y = NULL;
    rc = run_level(c, 0, c->n_nodes, input, &y);
    rm_scope_resume(scope);
    runctx_unref(c);
    if (rc) return rm_err_prefix(rc, call);
    return rm_hand_out(output, y);
}

remat_status remat_plan_run(const remat_plan *plan, const remat_stage *stages, remat_tensor *input,
                            remat_tensor **output) {
    return remat_plan_run_ex(plan, stages, input, output, NULL);
}

/* ---- conveniences ---------------------------------------------------------------------- */
remat_status remat_plan_auto(remat_plan **out, int n_stages, const remat_stage *stages,
                             remat_tensor *input, size_t budget_bytes,
                             const remat_profile_options *profile_opts) {
    static const char *call = "remat_plan_auto";
    if (!out) return rm_err(REMAT_EINVAL, "%s: out is NULL", call);
    *out = NULL;
    remat_profile *prof = NULL;
    remat_op_profile *ops = NULL;
    const bool blocks = profile_opts && profile_opts->blocks_only;
    int rc = remat_profile_stages(&prof, n_stages, stages, input, profile_opts);
    if (!rc && !blocks) rc = remat_profile_ops(&ops, n_stages, stages, input, profile_opts);
    if (!rc)
        rc = blocks ? remat_plan_create(out, prof, budget_bytes)
                    : remat_plan_create_ops(out, prof, ops, NULL, budget_bytes, NULL);
    remat_op_profile_free(ops);
    remat_profile_free(prof);
    if (rc) return rm_err_prefix(rc, call);
    return REMAT_OK;
}

static bool same_stages(const remat_stage *a, const remat_stage *b, size_t n) {
    for (size_t k = 0; k < n; k++)
        if (a[k].fn != b[k].fn || a[k].user_data != b[k].user_data) return false;
    return true;
}

/* Plans made by remat_checkpoint_budget, so that a training loop calling it
 * every step profiles only once. Keyed by the stage list, the budget and
 * the input's shape, dtype and device; remat_checkpoint_budget_clear()
 * frees them. */
typedef struct pl_cached {
    struct pl_cached *next;
    int n;
    remat_stage *stages;
    size_t budget;
    int ndim;
    int64_t shape[REMAT_MAX_DIMS];
    remat_dtype dtype;
    remat_device device;
    remat_profile_options opts; /* NULL → the defaults, zeros */
    remat_plan *plan;
} pl_cached;
static pl_cached *g_cache;
static pthread_mutex_t g_cache_lock = PTHREAD_MUTEX_INITIALIZER;

static bool cache_match(const pl_cached *e, int n, const remat_stage *stages, size_t budget,
                        const remat_tensor *x, const remat_profile_options *o) {
    return e->n == n && e->budget == budget && e->opts.runs == o->runs &&
           e->opts.no_warmup == o->no_warmup && e->opts.blocks_only == o->blocks_only &&
           e->ndim == remat_ndim(x) && e->dtype == remat_tensor_dtype(x) &&
           e->device.type == remat_tensor_device(x).type &&
           e->device.index == remat_tensor_device(x).index &&
           !memcmp(e->shape, remat_shape(x), (size_t)e->ndim * sizeof(int64_t)) &&
           same_stages(e->stages, stages, (size_t)n);
}

remat_status remat_checkpoint_budget_ex(remat_tensor **out, int n_stages, const remat_stage *stages,
                                        size_t budget_bytes, remat_tensor *input,
                                        const remat_profile_options *opts) {
    static const char *call = "remat_checkpoint_budget";
    if (!out) return rm_err(REMAT_EINVAL, "%s: out is NULL", call);
    *out = NULL;
    if (!stages || !input)
        return rm_err(REMAT_EINVAL, "%s: %s is NULL", call, !stages ? "stages" : "input");
    if (n_stages < 1)
        return rm_err(REMAT_EINVAL, "%s: n_stages must be >= 1, got %d", call, n_stages);
    const remat_profile_options o = opts ? *opts : (remat_profile_options){0};
    pthread_mutex_lock(&g_cache_lock);
    pl_cached *e = g_cache;
    while (e && !cache_match(e, n_stages, stages, budget_bytes, input, &o)) e = e->next;
    int rc = REMAT_OK;
    if (!e) {
        e = calloc(1, sizeof *e);
        if (e) e->stages = malloc((size_t)n_stages * sizeof *stages);
        if (!e || !e->stages) {
            if (e) free(e->stages);
            free(e);
            pthread_mutex_unlock(&g_cache_lock);
            return rm_err(REMAT_ENOMEM, "%s: out of memory", call);
        }
        rc = remat_plan_auto(&e->plan, n_stages, stages, input, budget_bytes, &o);
        if (rc) {
            free(e->stages);
            free(e);
            pthread_mutex_unlock(&g_cache_lock);
            return rm_err_prefix(rc, call);
        }
        e->n = n_stages;
        memcpy(e->stages, stages, (size_t)n_stages * sizeof *stages);
        e->budget = budget_bytes;
        e->opts = o;
        e->ndim = remat_ndim(input);
        memcpy(e->shape, remat_shape(input), (size_t)e->ndim * sizeof(int64_t));
        e->dtype = remat_tensor_dtype(input);
        e->device = remat_tensor_device(input);
        e->next = g_cache;
        g_cache = e;
    }
    /* Entries are only freed by remat_checkpoint_budget_clear, which must
     * not run concurrently with this call; the run copies what backward
     * needs. Not holding the lock lets stages use the planner themselves. */
    remat_plan *plan = e->plan;
    pthread_mutex_unlock(&g_cache_lock);
    rc = remat_plan_run(plan, stages, input, out);
    if (rc) return rm_err_prefix(rc, call);
    return REMAT_OK;
}

remat_status remat_checkpoint_budget(remat_tensor **out, int n_stages, const remat_stage *stages,
                                     size_t budget_bytes, remat_tensor *input) {
    return remat_checkpoint_budget_ex(out, n_stages, stages, budget_bytes, input, NULL);
}

void remat_checkpoint_budget_clear(void) {
    pthread_mutex_lock(&g_cache_lock);
    for (pl_cached *e = g_cache, *n; e; e = n) {
        n = e->next;
        remat_plan_free(e->plan);
        free(e->stages);
        free(e);
    }
    g_cache = NULL;
    pthread_mutex_unlock(&g_cache_lock);
}

/* ---- byte sizes -------------------------------------------------------------------------------- */
remat_status remat_parse_bytes(const char *text, size_t *bytes) {
    static const char *call = "remat_parse_bytes";
    if (!bytes) return rm_err(REMAT_EINVAL, "%s: bytes is NULL", call);
    *bytes = 0;
    if (!text) return rm_err(REMAT_EINVAL, "%s: text is NULL", call);
    const char *s = text;
    while (isspace((unsigned char)*s)) s++;
    if (!isdigit((unsigned char)*s) && *s != '.')
        return rm_err(REMAT_EFORMAT, "%s: \"%s\" is not a size (e.g. 512MiB, 1.5G, 1048576)", call,
                      text);
    char *end;
    double v = strtod(s, &end);
    if (end == s || !(v >= 0) || isinf(v))
        return rm_err(REMAT_EFORMAT, "%s: \"%s\" is not a size (e.g. 512MiB, 1.5G, 1048576)", call,
                      text);
    while (isspace((unsigned char)*end)) end++;
    double mul = 1;
    char u = (char)toupper((unsigned char)*end);
    if (u == 'K' || u == 'M' || u == 'G' || u == 'T') {
        mul = u == 'K' ? 1024.0 : u == 'M' ? 1048576.0 : u == 'G' ? 1073741824.0 : 1099511627776.0;
        end++;
        if (toupper((unsigned char)*end) == 'I') end++;
        if (toupper((unsigned char)*end) == 'B') end++;
    } else if (u == 'B') {
        end++;
    }
    while (isspace((unsigned char)*end)) end++;
    if (*end)
        return rm_err(REMAT_EFORMAT, "%s: \"%s\" has an unknown unit (use K, M, G, T, KiB, MB...)",
                      call, text);
    double b = v * mul;
    if (b > 9.0e18 || b > (double)SIZE_MAX)
        return rm_err(REMAT_EFORMAT, "%s: \"%s\" is too large", call, text);
    *bytes = (size_t)(b + 0.5);
    return REMAT_OK;
}
