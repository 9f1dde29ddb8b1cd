/* tools/strategy.c — parsing strategies and running a chain of blocks under one. */
#include "strategy.h"

#include <ctype.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "util.h"

#include "remat/checkpoint.h"
#include "remat/planner.h"

static const double MIB = 1048576.0;

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
        /* the size as the user wrote it reads better than a byte count */
        if (s->budget_text[0])
            snprintf(s->name, sizeof s->name, "budget=%s", s->budget_text);
        else
            snprintf(s->name, sizeof s->name, "budget=%llu", (unsigned long long)s->budget);
        return; /* plans always run non-reentrant checkpoints */
    }
    if (s->reentrant) {
        size_t n = strlen(s->name);
        snprintf(s->name + n, sizeof s->name - n, "(reentrant)");
    }
}

/* budget=P%: 0 < P <= 100 (a share of the un-checkpointed peak; more than
 * all of it is a typo, not a plan). */
static bool parse_percent(const char *val, double *pct) {
    size_t l = strlen(val);
    if (l < 2 || val[l - 1] != '%' || l > 30) return false;
    char num[32];
    memcpy(num, val, l - 1);
    num[l - 1] = '\0';
    double v;
    if (!isdigit((unsigned char)num[0]) && num[0] != '.') return false;
    if (!util_parse_double(num, &v) || !(v > 0) || v > 100) return false;
    *pct = v;
    return true;
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
        if (!val || !*val)
            return perr(err, n_err, "budget needs a size: budget=SIZE (e.g. budget=64MiB, budget=40%)");
        if (strlen(val) >= sizeof r.budget_text)
            return perr(err, n_err, "bad size in budget=SIZE (too long)");
        if (strchr(val, '%')) {
            if (!parse_percent(val, &r.budget_pct))
                return perr(err, n_err,
                            "bad size in budget=P%: P must be a number in (0, 100], e.g. budget=40%");
        } else {
            /* strict: digits first, no spaces (remat_parse_bytes would allow them) */
            size_t bytes = 0;
            if (!(isdigit((unsigned char)val[0]) || val[0] == '.') || strpbrk(val, " \t") ||
                remat_parse_bytes(val, &bytes) != REMAT_OK || bytes == 0)
                return perr(err, n_err,
                            "bad size in budget=SIZE (examples: 200MiB, 64M, 1.5GiB, 500000, 40%)");
            r.budget = bytes;
        }
        snprintf(r.budget_text, sizeof r.budget_text, "%s", val);
        r.kind = STRAT_BUDGET;
        r.reentrant = false;
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
    case STRAT_NONE:
    case STRAT_BLOCK:
    case STRAT_SEQUENTIAL:
    case STRAT_BUDGET: return true;
    case STRAT_SELECTIVE:
        return perr(err, n_err,
                    "not available yet: selective activation checkpointing is not in this build");
    }
    return perr(err, n_err, "unknown strategy");
}

void strategy_budget_bytes(strategy *s, uint64_t bytes) {
    memset(s, 0, sizeof *s);
    s->kind = STRAT_BUDGET;
    s->budget = bytes;
    snprintf(s->budget_text, sizeof s->budget_text, "%.2fMiB", (double)bytes / MIB);
    strategy_name(s);
}

/* ---- the planner ------------------------------------------------------------------------ */
int strategy_store_all_bytes(const remat_profile *prof, size_t *bytes) {
    /* one segment = nothing checkpointed: the plan's peak is the store-all peak */
    remat_plan *p = NULL;
    int rc = remat_plan_sequential(&p, prof, 0, 1);
    if (rc) return rc;
    *bytes = p->peak_store_all;
    remat_plan_free(p);
    return REMAT_OK;
}

int strategy_plan(strategy *s, const remat_profile *prof) {
    if (s->kind != STRAT_BUDGET) return REMAT_OK;
    remat_plan_free(s->plan);
    s->plan = NULL;
    size_t store_all = 0, min = 0;
    int rc = strategy_store_all_bytes(prof, &store_all);
    if (!rc) rc = remat_plan_min_budget(prof, &min);
    if (rc) return rc;
    if (s->budget_pct > 0) s->budget = (uint64_t)(s->budget_pct / 100.0 * (double)store_all);
    rc = remat_plan_create(&s->plan, prof, (size_t)s->budget);
    if (rc == REMAT_EINVAL && s->budget < min) {
        /* the planner's message states the minimum in bytes; add what to type */
        char msg[512];
        snprintf(msg, sizeof msg, "%s", remat_last_error());
        /* rounded up, so that what we suggest is feasible */
        char at_least[32];
        if ((double)min < MIB)
            snprintf(at_least, sizeof at_least, "%.0fKiB", ceil((double)min / 1024.0));
        else
            snprintf(at_least, sizeof at_least, "%.2fMiB", ceil((double)min / MIB * 100.0) / 100.0);
        double pct = store_all ? ceil(100.0 * (double)min / (double)store_all) : 100.0;
        char sa[32];
        return remat_set_error(rc,
                               "%s; the blocks need %s without checkpointing, so give at least "
                               "budget=%s or budget=%.0f%%",
                               msg, util_fmt_bytes((double)store_all, sa, sizeof sa), at_least,
                               pct > 100 ? 100 : pct);
    }
    return rc;
}

void strategy_free(strategy *s) {
    if (!s) return;
    remat_plan_free(s->plan);
    s->plan = NULL;
}

/* Pre-order nodes: next[i] is the index after node i's subtree. */
static void structure_level(const remat_plan *p, const int *next, int i, int end, util_str *o) {
    bool first = true;
    while (i < end) {
        const remat_plan_node *nd = &p->nodes[i];
        if (!first) util_str_printf(o, " ");
        first = false;
        if (nd->op == REMAT_PLAN_STORE) {
            /* a run of stored stages as "a-b" */
            int j = i, lastk = nd->first;
            while (next[j] < end && p->nodes[next[j]].op == REMAT_PLAN_STORE) {
                j = next[j];
                lastk = p->nodes[j].first;
            }
            if (lastk > nd->first)
                util_str_printf(o, "%d-%d", nd->first, lastk);
            else
                util_str_printf(o, "%d", nd->first);
            i = next[j];
        } else {
            util_str_printf(o, "[ckpt %d-%d: ", nd->first, nd->last);
            structure_level(p, next, i + 1, next[i], o);
            util_str_printf(o, "]");
            i = next[i];
        }
    }
}

void strategy_plan_structure(const remat_plan *plan, char *buf, size_t n) {
    if (!n) return;
    buf[0] = '\0';
    if (!plan || plan->n_nodes < 1) return;
    int *next = malloc(sizeof *next * (size_t)plan->n_nodes);
    if (!next) return;
    for (int i = plan->n_nodes - 1; i >= 0; i--) {
        int j = i + 1;
        if (plan->nodes[i].op == REMAT_PLAN_CHECKPOINT)
            while (j < plan->n_nodes && plan->nodes[j].parent == i) j = next[j];
        next[i] = j;
    }
    util_str o = {0};
    structure_level(plan, next, 0, plan->n_nodes, &o);
    if (!o.oom && o.s) {
        snprintf(buf, n, "%s", o.s);
        if (o.len >= n && n > 4) memcpy(buf + n - 4, "...", 4); /* cut, visibly */
    }
    util_str_free(&o);
    free(next);
}

/* ---- running a chain --------------------------------------------------------------------- */
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

static remat_stage *make_stages(int n, block_fn fn, void *const *ud) {
    remat_stage *st = malloc(sizeof *st * (size_t)(n > 0 ? n : 1));
    if (!st) return NULL;
    for (int i = 0; i < n; i++) st[i] = (remat_stage){fn, ud[i]};
    return st;
}

static int run_sequential(const remat_checkpoint_options *o, int segments, int n, block_fn fn,
                          void *const *ud, remat_tensor *x, remat_tensor **out) {
    remat_stage *st = make_stages(n, fn, ud);
    if (!st) return remat_set_error(REMAT_ENOMEM, "remat: out of memory");
    int rc = remat_checkpoint_sequential(out, n, st, segments, x, o);
    free(st);
    return rc;
}

/* The plan copies the stage list for its recomputations, so it can go now. */
static int run_plan(const strategy *s, int n, block_fn fn, void *const *ud, remat_tensor *x,
                    remat_tensor **out) {
    if (!s->plan)
        return remat_set_error(REMAT_ESTATE, "remat: strategy %s: no plan was made before the step",
                               s->name);
    if (s->plan->n_stages != n)
        return remat_set_error(REMAT_EINVAL, "remat: strategy %s: plan for %d blocks, model has %d",
                               s->name, s->plan->n_stages, n);
    remat_stage *st = make_stages(n, fn, ud);
    if (!st) return remat_set_error(REMAT_ENOMEM, "remat: out of memory");
    int rc = remat_plan_run(s->plan, st, x, out);
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
    case STRAT_BUDGET: return run_plan(s, n, fn, user_data, x, out);
    default: break;
    }
    char err[160];
    strategy_available(s, err, sizeof err);
    return remat_set_error(REMAT_EUNSUPPORTED, "remat: strategy %s: %s", s->name, err);
}
