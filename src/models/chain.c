/* src/models/chain.c — remat_run_chain: a chain of stages under one of the
 * checkpointing strategies (remat/strategy.h). */
#include <stdlib.h>
#include <string.h>

#include "core/core.h"

#include "remat/strategy.h"

const char *remat_strategy_kind_name(remat_strategy_kind kind) {
    switch (kind) {
    case REMAT_STRATEGY_NONE: return "none";
    case REMAT_STRATEGY_BLOCK: return "block";
    case REMAT_STRATEGY_SEQUENTIAL: return "sequential";
    case REMAT_STRATEGY_SELECTIVE: return "selective";
    case REMAT_STRATEGY_PLAN: return "plan";
    }
    return "?";
}

/* Stage after stage, each output replacing the previous one (o NULL: no
 * checkpoint). */
static remat_status run_each(const remat_checkpoint_options *o, int n, const remat_stage *st,
                             remat_tensor *x, remat_tensor **out) {
    remat_tensor *cur = remat_retain(x);
    for (int i = 0; i < n; i++) {
        remat_tensor *next = NULL;
        int rc = o ? remat_checkpoint(st[i].fn, st[i].user_data, 1, &cur, 1, &next, o)
                   : st[i].fn(st[i].user_data, &cur, 1, &next, 1);
        remat_release(cur);
        if (!rc && !next)
            rc = rm_err(REMAT_EINVAL, "remat_run_chain: stage %d returned no tensor", i);
        if (rc) {
            remat_release(next);
            return rc;
        }
        cur = next;
    }
    *out = cur;
    return REMAT_OK;
}

/* Each stage its own non-reentrant checkpoint with a fresh selective pair
 * (remat_sac_context_fn reads the config at every remat_checkpoint call). */
static remat_status run_selective(const remat_strategy *s, int n, const remat_stage *st,
                                  remat_tensor *x, remat_tensor **out) {
    remat_sac_config cfg = {.policy = s->policy,
                            .allow_cache_entry_mutation = s->allow_cache_entry_mutation,
                            .stats = s->sac_stats};
    remat_checkpoint_options o;
    memset(&o, 0, sizeof o);
    o.use_reentrant = REMAT_OPT_FALSE;
    o.context_fn = remat_sac_context_fn;
    o.context_fn_data = &cfg;
    return run_each(&o, n, st, x, out);
}

static remat_status check(int n, const remat_stage *st, remat_tensor *x, const remat_strategy *s) {
    const char *call = "remat_run_chain";
    if (!x || n < 0 || (n > 0 && !st))
        return rm_err(REMAT_EINVAL, "%s: expected an input tensor and n_stages >= 0 stages", call);
    for (int i = 0; i < n; i++)
        if (!st[i].fn) return rm_err(REMAT_EINVAL, "%s: stage %d has no function", call, i);
    switch (s->kind) {
    case REMAT_STRATEGY_NONE:
    case REMAT_STRATEGY_BLOCK: return REMAT_OK;
    case REMAT_STRATEGY_SEQUENTIAL:
        if (n > 0 && (s->segments < 1 || s->segments > n))
            return rm_err(REMAT_EINVAL,
                          "%s: sequential with %d segments over %d stages (expected 1 to %d)", call,
                          s->segments, n, n);
        return REMAT_OK;
    case REMAT_STRATEGY_SELECTIVE:
        if (!s->policy) return rm_err(REMAT_EINVAL, "%s: selective without a policy", call);
        return REMAT_OK;
    case REMAT_STRATEGY_PLAN:
        if (!s->plan) return rm_err(REMAT_EINVAL, "%s: plan strategy without a plan", call);
        if (s->plan->n_stages != n)
            return rm_err(REMAT_EINVAL, "%s: the plan is for %d stages, the chain has %d", call,
                          s->plan->n_stages, n);
        return REMAT_OK;
    }
    return rm_err(REMAT_EINVAL, "%s: unknown strategy kind %d", call, (int)s->kind);
}

remat_status remat_run_chain(remat_tensor **out, int n, const remat_stage *st, remat_tensor *x,
                             const remat_strategy *s) {
    static const remat_strategy none = {.kind = REMAT_STRATEGY_NONE};
    if (!out) return rm_err(REMAT_EINVAL, "remat_run_chain: out is NULL");
    *out = NULL;
    if (!s) s = &none;
    int rc = check(n, st, x, s);
    if (rc) return rc;
    remat_checkpoint_options o;
    memset(&o, 0, sizeof o);
    o.use_reentrant = s->reentrant ? REMAT_OPT_TRUE : REMAT_OPT_FALSE;
    /* the stages run with no scope open (remat_checkpoint_fn's contract);
     * the output is handed to the caller's scope at the end */
    void *scope = rm_scope_suspend();
    if (n == 0) {
        *out = remat_retain(x);
    } else {
        switch (s->kind) {
        case REMAT_STRATEGY_NONE: rc = run_each(NULL, n, st, x, out); break;
        case REMAT_STRATEGY_BLOCK: rc = run_each(&o, n, st, x, out); break;
        case REMAT_STRATEGY_SEQUENTIAL:
            rc = remat_checkpoint_sequential(out, n, st, s->segments, x, &o);
            break;
        case REMAT_STRATEGY_SELECTIVE: rc = run_selective(s, n, st, x, out); break;
        case REMAT_STRATEGY_PLAN: rc = remat_plan_run(s->plan, st, x, out); break;
        }
    }
    rm_scope_resume(scope);
    if (rc) {
        remat_release_p(out);
        return rc;
    }
    return rm_hand_out_n(out, 1);
}
