/* tools/strategy.c — parsing strategies and running a chain of blocks under one. */
#include "strategy.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "util.h"

#include "remat/checkpoint.h"

static bool perr(char *err, size_t n, const char *msg) {
    if (err && n) snprintf(err, n, "%s", msg);
    return false;
}

void strategy_name(strategy *s) {
    switch (s->kind) {
    case STRAT_NONE: snprintf(s->name, sizeof s->name, "none"); return;
    case STRAT_BLOCK: snprintf(s->name, sizeof s->name, "block"); break;
    case STRAT_SEQUENTIAL: snprintf(s->name, sizeof s->name, "sequential=%d", s->segments); break;
    case STRAT_SELECTIVE:
        snprintf(s->name, sizeof s->name, "selective%s%s", s->policy[0] ? "=" : "", s->policy);
        break;
    case STRAT_BUDGET:
        snprintf(s->name, sizeof s->name, "budget=%llu", (unsigned long long)s->budget);
        break;
    }
    if (s->reentrant) {
        size_t n = strlen(s->name);
        snprintf(s->name + n, sizeof s->name - n, "(reentrant)");
    }
}

bool strategy_parse(const char *text, bool reentrant, strategy *s, char *err, size_t n_err) {
    strategy r;
    memset(&r, 0, sizeof r);
    r.reentrant = reentrant;
    const char *eq = strchr(text, '=');
    size_t klen = eq ? (size_t)(eq - text) : strlen(text);
    const char *val = eq ? eq + 1 : NULL;
    if (klen == 4 && !strncmp(text, "none", 4) && !val) {
        r.kind = STRAT_NONE;
        r.reentrant = false;
    } else if (klen == 5 && !strncmp(text, "block", 5) && !val) {
        r.kind = STRAT_BLOCK;
    } else if (klen == 10 && !strncmp(text, "sequential", 10)) {
        long n;
        if (!val) return perr(err, n_err, "sequential needs a number of segments: sequential=N");
        if (!util_parse_long(val, 1, 1 << 20, &n))
            return perr(err, n_err, "sequential=N needs an integer N >= 1");
        r.kind = STRAT_SEQUENTIAL;
        r.segments = (int)n;
    } else if (klen == 9 && !strncmp(text, "selective", 9)) {
        r.kind = STRAT_SELECTIVE;
        if (val) {
            if (!*val || strlen(val) >= sizeof r.policy)
                return perr(err, n_err, "selective=POLICY needs a policy name");
            strcpy(r.policy, val);
        }
    } else if (klen == 6 && !strncmp(text, "budget", 6)) {
        if (!val) return perr(err, n_err, "budget needs a size: budget=SIZE (e.g. budget=64M)");
        if (!util_parse_size(val, &r.budget) || r.budget == 0)
            return perr(err, n_err, "bad size in budget=SIZE (examples: 64M, 1.5GiB, 500000)");
        r.kind = STRAT_BUDGET;
    } else {
        return perr(err, n_err,
                    "expected none, block, sequential=N, selective[=POLICY] or budget=SIZE");
    }
    strategy_name(&r);
    *s = r;
    return true;
}

bool strategy_available(const strategy *s, char *err, size_t n_err) {
    switch (s->kind) {
    case STRAT_NONE: return true;
    case STRAT_BLOCK:
    case STRAT_SEQUENTIAL: return true;
    case STRAT_SELECTIVE:
        return perr(err, n_err,
                    "not available yet: selective activation checkpointing is not in this build");
    case STRAT_BUDGET:
        return perr(err, n_err, "not available yet: the budget planner is not in this build");
    }
    return perr(err, n_err, "unknown strategy");
}

static int run_plain(int n, block_fn fn, void *const *ud, remat_tensor *x, remat_tensor **out) {
    remat_tensor *cur = remat_retain(x);
    for (int i = 0; i < n; i++) {
        remat_tensor *next = NULL;
        int rc = fn(ud[i], &cur, 1, &next, 1);
        remat_release(cur);
        if (rc) return rc;
        cur = next;
    }
    *out = cur;
    return REMAT_OK;
}

/* Each block its own checkpoint: only block inputs stay alive. */
static int run_block(const remat_checkpoint_options *o, int n, block_fn fn, void *const *ud,
                     remat_tensor *x, remat_tensor **out) {
    remat_tensor *cur = remat_retain(x);
    for (int i = 0; i < n; i++) {
        remat_tensor *next = NULL;
        int rc = remat_checkpoint(fn, ud[i], 1, &cur, 1, &next, o);
        remat_release(cur);
        if (rc) return rc;
        cur = next;
    }
    *out = cur;
    return REMAT_OK;
}

static int run_sequential(const remat_checkpoint_options *o, int segments, int n, block_fn fn,
                          void *const *ud, remat_tensor *x, remat_tensor **out) {
    remat_stage *st = malloc(sizeof *st * (size_t)(n > 0 ? n : 1));
    if (!st) return remat_set_error(REMAT_ENOMEM, "remat: out of memory");
    for (int i = 0; i < n; i++) st[i] = (remat_stage){fn, ud[i]};
    int rc = remat_checkpoint_sequential(out, n, st, segments, x, o);
    free(st);
    return rc;
}

int strategy_run_chain(const strategy *s, int n, block_fn fn, void *const *user_data,
                       remat_tensor *x, remat_tensor **out) {
    *out = NULL;
    remat_checkpoint_options o;
    memset(&o, 0, sizeof o);
    o.use_reentrant = s->reentrant ? REMAT_OPT_TRUE : REMAT_OPT_FALSE;
    switch (s->kind) {
    case STRAT_NONE: return run_plain(n, fn, user_data, x, out);
    case STRAT_BLOCK: return run_block(&o, n, fn, user_data, x, out);
    case STRAT_SEQUENTIAL:
        if (s->segments > n)
            return remat_set_error(REMAT_EINVAL,
                                   "remat: --checkpoint %s: more segments than the model's %d "
                                   "blocks",
                                   s->name, n);
        return run_sequential(&o, s->segments, n, fn, user_data, x, out);
    default: break;
    }
    char err[160];
    strategy_available(s, err, sizeof err);
    return remat_set_error(REMAT_EUNSUPPORTED, "remat: strategy %s: %s", s->name, err);
}
