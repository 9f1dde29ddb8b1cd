/* tools/train/strategy.c — parsing strategies and running a chain of blocks under one. */
#include "strategy.h"

#include <ctype.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/util.h"

#include "remat/checkpoint.h"
#include "remat/planner.h"
#include "remat/strategy.h"

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
        snprintf(s->name, sizeof s->name, "selective=%s", s->policy);
        return; /* selective-checkpoint contexts need non-reentrant checkpoints */
    case STRAT_BUDGET:
        /* the size as the user wrote it reads better than a byte count */
        if (s->budget_text[0])
            snprintf(s->name, sizeof s->name, "%s=%s%s",
                     s->blocks_only ? "blocks-budget" : "budget", s->budget_text,
                     s->block_level ? ":blocks-only"
                     : s->no_halves ? ":whole-blocks"
                     : s->halves    ? ":halves"
                                    : "");
        else
            snprintf(s->name, sizeof s->name, "%s=%llu%s",
                     s->blocks_only ? "blocks-budget" : "budget", (unsigned long long)s->budget,
                     s->block_level ? ":blocks-only"
                     : s->no_halves ? ":whole-blocks"
                     : s->halves    ? ":halves"
                                    : "");
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

/* selective=POLICY (val NULL: the default, dots). Fills s->sac_* and the
 * canonical s->policy. */
static bool parse_policy(const char *val, strategy *s, char *err, size_t n) {
    static const struct {
        const char *word;
        sac_policy_kind kind;
        bool names;
    } kinds[] = {{"dots", SAC_DOTS, false},
                 {"nothing", SAC_NOTHING, false},
                 {"everything", SAC_EVERYTHING, false},
                 {"names", SAC_NAMES, true},
                 {"all-but", SAC_ALL_BUT, true},
                 {"except", SAC_EXCEPT, true}};
    char msg[512];
    if (!val) val = "dots";
    if (!*val) {
        snprintf(msg, sizeof msg, "selective=POLICY needs a policy: %s", SAC_POLICY_HELP);
        return perr(err, n, msg);
    }
    size_t wl = strcspn(val, ":=");
    int k = -1;
    for (int i = 0; i < (int)(sizeof kinds / sizeof *kinds); i++)
        if (strlen(kinds[i].word) == wl && !strncmp(val, kinds[i].word, wl)) k = i;
    if (k < 0) {
        snprintf(msg, sizeof msg, "unknown policy '%.*s': expected %s", (int)(wl < 64 ? wl : 64),
                 val, SAC_POLICY_HELP);
        return perr(err, n, msg);
    }
    s->sac_kind = kinds[k].kind;
    s->n_sac_names = 0;
    if (!kinds[k].names) {
        if (val[wl]) {
            snprintf(msg, sizeof msg, "policy %s takes no names", kinds[k].word);
            return perr(err, n, msg);
        }
        snprintf(s->policy, sizeof s->policy, "%s", kinds[k].word);
        return true;
    }
    const char *p = val + wl;
    if (!*p || !p[1]) {
        snprintf(msg, sizeof msg,
                 "policy %s needs tag names: %s:A+B (e.g. selective=%s:qkv+attn_out)",
                 kinds[k].word, kinds[k].word, kinds[k].word);
        return perr(err, n, msg);
    }
    p++;
    util_str canon = {0};
    util_str_printf(&canon, "%s:", kinds[k].word);
    bool ok = true;
    while (ok) {
        size_t l = strcspn(p, "+,");
        bool good = l > 0 && l < SAC_NAME_LEN;
        for (size_t i = 0; good && i < l; i++)
            good = isalnum((unsigned char)p[i]) || strchr("_.-", p[i]);
        if (!good) {
            snprintf(msg, sizeof msg,
                     "bad tag name '%.*s' in selective=%s (letters, digits, '_', '.', '-'; "
                     "names joined by '+')",
                     (int)(l < 64 ? l : 64), p, val);
            ok = perr(err, n, msg);
            break;
        }
        if (s->n_sac_names == SAC_MAX_NAMES) {
            snprintf(msg, sizeof msg, "too many names in selective=%s (at most %d)", val,
                     SAC_MAX_NAMES);
            ok = perr(err, n, msg);
            break;
        }
        memcpy(s->sac_names[s->n_sac_names], p, l);
        s->sac_names[s->n_sac_names][l] = '\0';
        util_str_printf(&canon, "%s%s", s->n_sac_names ? "+" : "", s->sac_names[s->n_sac_names]);
        s->n_sac_names++;
        if (!p[l]) break;
        p += l + 1;
    }
    if (ok && (canon.oom || !canon.s || canon.len >= sizeof s->policy)) {
        snprintf(msg, sizeof msg, "selective=%s is too long", val);
        ok = perr(err, n, msg);
    }
    if (ok) snprintf(s->policy, sizeof s->policy, "%s", canon.s);
    util_str_free(&canon);
    return ok;
}

/* budget=SIZE[:blocks-only] or blocks-budget=SIZE (r->blocks_only says which): val is
 * what follows the '='. */
static bool parse_budget(const char *val, strategy *r, char *err, size_t n_err) {
    if (!val || !*val)
        return perr(err, n_err,
                    r->blocks_only ? "blocks-budget needs a size: blocks-budget=SIZE (e.g. "
                                     "blocks-budget=32MiB, blocks-budget=40%)"
                                   : "budget needs a size: budget=SIZE (e.g. budget=64MiB, "
                                     "budget=40%)");
    const char *key = r->blocks_only ? "blocks-budget" : "budget";
    char msg[160];
    if (strlen(val) >= sizeof r->budget_text) {
        snprintf(msg, sizeof msg, "bad size in %s=SIZE (too long)", key);
        return perr(err, n_err, msg);
    }
    /* budget=SIZE:blocks-only: whole blocks (rotor's schedules), no per-op choices;
     * budget=SIZE:whole-blocks: per op over whole blocks, no half-block stages;
     * budget=SIZE:halves: per op, every split into halves tried whatever the budget */
    char vbuf[sizeof r->budget_text];
    const char *colon = strchr(val, ':');
    if (colon) {
        const bool bo = !strcmp(colon + 1, "blocks-only"), wb = !strcmp(colon + 1, "whole-blocks"),
                   hv = !strcmp(colon + 1, "halves");
        if (r->blocks_only || (!bo && !wb && !hv))
            return perr(err, n_err,
                        r->blocks_only ? "blocks-budget=SIZE takes no ':' option"
                                       : "budget=SIZE takes one option, ':blocks-only', "
                                         "':whole-blocks' or ':halves' (e.g. "
                                         "budget=64MiB:blocks-only)");
        snprintf(vbuf, sizeof vbuf, "%.*s", (int)(colon - val), val);
        val = vbuf;
        r->block_level = bo;
        r->no_halves = wb;
        r->halves = hv;
    }
    if (strchr(val, '%')) {
        if (!parse_percent(val, &r->budget_pct)) {
            snprintf(msg, sizeof msg,
                     "bad size in %s=P%%: P must be a number in (0, 100], e.g. %s=40%%", key, key);
            return perr(err, n_err, msg);
        }
    } else {
        /* strict: digits first, no spaces (remat_parse_bytes would allow them) */
        size_t bytes = 0;
        if (!(isdigit((unsigned char)val[0]) || val[0] == '.') || strpbrk(val, " \t") ||
            remat_parse_bytes(val, &bytes) != REMAT_OK || bytes == 0) {
            snprintf(msg, sizeof msg,
                     "bad size in %s=SIZE (examples: 500000, 64K, 200MiB, 1.5GiB, 2GB, 40%%)", key);
            return perr(err, n_err, msg);
        }
        r->budget = bytes;
    }
    snprintf(r->budget_text, sizeof r->budget_text, "%s", val);
    r->kind = STRAT_BUDGET;
    r->reentrant = false;
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
        if (!parse_policy(val, &r, err, n_err)) return false;
        r.kind = STRAT_SELECTIVE;
        r.reentrant = false;
    } else if ((klen == 6 && !strncmp(text, "budget", 6)) ||
               (klen == 13 && !strncmp(text, "blocks-budget", 13))) {
        r.blocks_only = klen == 13;
        if (!parse_budget(val, &r, err, n_err)) return false;
    } else {
        return perr(err, n_err,
                    "expected none, block, sequential=N, selective[=POLICY], "
                    "budget=SIZE[:blocks-only] or blocks-budget=SIZE");
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
    case STRAT_BUDGET:
    case STRAT_SELECTIVE: return true;
    }
    return perr(err, n_err, "unknown strategy");
}

bool strategy_check_tags(const strategy *s, int n, const char *const *tags, const char *model,
                         char *err, size_t n_err) {
    if (s->kind != STRAT_SELECTIVE) return true;
    for (int i = 0; i < s->n_sac_names; i++) {
        bool known = false;
        for (int k = 0; k < n && !known; k++) known = !strcmp(s->sac_names[i], tags[k]);
        if (known) continue;
        util_str o = {0};
        util_str_printf(&o, "the %s tags no tensor '%s' (its tags: ", model, s->sac_names[i]);
        for (int k = 0; k < n; k++) util_str_printf(&o, "%s%s", k ? ", " : "", tags[k]);
        util_str_printf(&o, ")");
        perr(err, n_err, o.oom || !o.s ? "unknown tag name" : o.s);
        util_str_free(&o);
        return false;
    }
    return true;
}

int strategy_make_policy(const strategy *s, remat_policy **out) {
    *out = NULL;
    if (s->kind != STRAT_SELECTIVE)
        return remat_set_error(REMAT_EINVAL, "remat: strategy %s has no policy", s->name);
    const char *names[SAC_MAX_NAMES];
    for (int i = 0; i < s->n_sac_names; i++) names[i] = s->sac_names[i];
    switch (s->sac_kind) {
    case SAC_DOTS: return remat_policy_dots_saveable(out);
    case SAC_NOTHING: return remat_policy_nothing_saveable(out);
    case SAC_EVERYTHING: return remat_policy_everything_saveable(out);
    case SAC_NAMES: return remat_policy_save_only_these_names(out, s->n_sac_names, names);
    case SAC_ALL_BUT: return remat_policy_save_any_names_but_these(out, s->n_sac_names, names);
    case SAC_EXCEPT:
        return remat_policy_save_anything_except_these_names(out, s->n_sac_names, names);
    }
    return remat_set_error(REMAT_EINVAL, "remat: strategy %s: unknown policy", s->name);
}

void strategy_budget_bytes(strategy *s, uint64_t bytes, bool blocks_only) {
    memset(s, 0, sizeof *s);
    s->kind = STRAT_BUDGET;
    s->blocks_only = blocks_only;
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

int strategy_step_range(const remat_profile *prof, const remat_step_profile *step,
                        size_t *store_all, size_t *min_budget) {
    /* any budget at or above the store-all peak gives the store-all plan */
    remat_plan *p = NULL;
    int rc = remat_plan_create_step(&p, prof, step, SIZE_MAX, NULL);
    if (rc) return rc;
    *store_all = p->peak_store_all;
    *min_budget = p->min_budget_bytes;
    remat_plan_free(p);
    return REMAT_OK;
}

bool strategy_wants_halves(const strategy *s, const remat_profile *prof,
                           const remat_step_profile *step) {
    if (s->kind != STRAT_BUDGET || s->blocks_only || s->block_level || s->no_halves) return false;
    if (s->halves) return true;
    size_t store_all = 0, min = 0;
    if (!prof || !step || strategy_step_range(prof, step, &store_all, &min)) return false;
    const double budget =
        s->budget_pct > 0 ? s->budget_pct / 100.0 * (double)store_all : (double)s->budget;
    return budget < (double)min;
}

/* "budget=12.35MiB": rounded up, so that what we suggest is feasible. */
static void size_at_least(char *buf, size_t n, double bytes) {
    if (bytes < MIB) snprintf(buf, n, "%.0fKiB", ceil(bytes / 1024.0));
    else snprintf(buf, n, "%.2fMiB", ceil(bytes / MIB * 100.0) / 100.0);
}

bool strategy_plan_lossy(const strategy *s) {
    if (s->kind != STRAT_BUDGET || !s->plan) return false;
    for (int k = 0; k < s->plan->n_stages; k++) {
        if (s->plan->stages[k].store_bf16) return true; /* a stored stage kept as bf16 */
        for (int i = 0; s->plan->stages[k].keep && i < s->plan->stages[k].n_ops; i++)
            if (s->plan->stages[k].keep[i] == REMAT_OP_KEEP_BF16) return true;
    }
    return false;
}

/* budget=SIZE: per-op choices (remat_plan_create_ops). */
static bool plans_ops(const strategy *s) {
    return s->kind == STRAT_BUDGET && !s->blocks_only && !s->block_level;
}

bool strategy_wants_ops(const strategy *s) { return s->kind == STRAT_BUDGET; }

/* Of the ops of `a` and `b` together against those of `w`, the forward seconds that differ:
 * per op name, (count in a and b - count in w) x that name's mean time on the side that has
 * more. Ops both sides run cancel out, so two profiles' noise on them does not count. */
static double extra_op_time(const remat_stage_ops *a, const remat_stage_ops *b,
                            const remat_stage_ops *w) {
    const remat_stage_ops *all[3] = {a, b, w};
    double extra = 0;
    for (int s = 0; s < 3; s++)
        for (int i = 0; i < all[s]->n_ops; i++) {
            const char *name = all[s]->ops[i].name;
            bool seen = false; /* each name once: at its first appearance */
            for (int t = 0; t <= s && !seen; t++)
                for (int j = 0; j < (t < s ? all[t]->n_ops : i) && !seen; j++)
                    seen = !strcmp(all[t]->ops[j].name, name);
            if (seen) continue;
            int nh = 0, nw = 0;
            double th = 0, tw = 0;
            for (int t = 0; t < 3; t++)
                for (int j = 0; j < all[t]->n_ops; j++) {
                    if (strcmp(all[t]->ops[j].name, name) != 0) continue;
                    if (t < 2) nh++, th += all[t]->ops[j].time;
                    else nw++, tw += all[t]->ops[j].time;
                }
            if (nh > nw) extra += (nh - nw) * (th / nh);
            else if (nw > nh) extra -= (nw - nh) * (tw / nw);
        }
    return extra;
}

void strategy_calibrate_halves(remat_profile *hprof, const remat_op_profile *hops,
                               const remat_profile *prof, const remat_op_profile *ops) {
    if (!hprof || !hops || !prof || !ops || hprof->n_stages != 2 * prof->n_stages ||
        hops->n_stages != hprof->n_stages || ops->n_stages != prof->n_stages)
        return;
    for (int l = 0; l < prof->n_stages; l++) {
        const size_t ha = 2 * (size_t)l, hb = ha + 1; /* block l's attention and MLP halves */
        const remat_stage_profile *w = &prof->stages[l];
        remat_stage_profile *a = &hprof->stages[ha], *b = &hprof->stages[hb];
        const double f = a->fwd_time + b->fwd_time, g = a->bwd_time + b->bwd_time;
        if (!(f > 0 && g > 0 && w->fwd_time > 0)) continue;
        double extra = extra_op_time(&hops->stages[ha], &hops->stages[hb], &ops->stages[l]);
        if (extra < 0) extra = 0; /* the halves run at least the block's ops */
        const double rf = (w->fwd_time + extra) / f,
                     rb = w->bwd_time * (1 + extra / w->fwd_time) / g;
        remat_stage_profile *h[2] = {a, b};
        for (int i = 0; i < 2; i++) {
            h[i]->fwd_time *= rf;
            h[i]->recompute_free_time *= rf;
            h[i]->bwd_time *= rb;
        }
    }
}

/* The splits strategy_plan tries for L blocks: 0..L, or above 16 blocks 0-4, L/4, L/2, L. */
static int splits_to_try(int L, int *out) {
    int n = 0;
    if (L <= 16) {
        for (int h = 0; h <= L; h++) out[n++] = h;
        return n;
    }
    const int v[] = {0, 1, 2, 3, 4, L / 4, L / 2, L};
    for (size_t i = 0; i < sizeof v / sizeof *v; i++)
        if (i < 5 || v[i] > out[n - 1]) out[n++] = v[i];
    return n;
}

/* The op-level plan over the first L - h blocks whole and the last h in halves: *plan, and
 * *ops its chain's op profile when h > 0. */
static int plan_split(const remat_profile *prof, const remat_op_profile *ops,
                      const remat_step_profile *step, const strategy_halves *hv, int h,
                      size_t budget, const remat_plan_options *po, remat_plan **plan,
                      remat_op_profile **sops) {
    *plan = NULL;
    *sops = NULL;
    if (h == 0) return remat_plan_create_ops(plan, prof, ops, step, budget, po);
    const int L = prof->n_stages;
    remat_profile *sp = NULL;
    int rc = remat_profile_splice(&sp, prof, 0, L - h, hv->prof, 2 * (L - h), 2 * h);
    if (!rc) rc = remat_op_profile_splice(sops, ops, 0, L - h, hv->ops, 2 * (L - h), 2 * h);
    if (!rc) rc = remat_plan_create_ops(plan, sp, *sops, step, budget, po);
    remat_profile_free(sp);
    if (rc) {
        remat_op_profile_free(*sops);
        *sops = NULL;
    }
    return rc;
}

/* budget= per op: the fastest plan over the splits (strategy_plan); the first error when
 * none fits. *min: the smallest feasible budget over the splits (lowered from the whole
 * blocks' where halves reach below it). */
static int plan_ops_best(strategy *s, const remat_profile *prof, const remat_op_profile *ops,
                         const remat_step_profile *step, const remat_plan_options *po,
                         const strategy_halves *hv, size_t *min) {
    const int L = prof->n_stages;
    const bool halves = !s->no_halves && hv && hv->prof && hv->ops && hv->prof->n_stages == 2 * L &&
                        hv->ops->n_stages == 2 * L;
    int splits[24], n = halves ? splits_to_try(L, splits) : 1, first_rc = REMAT_OK;
    char first_msg[768] = "";
    splits[0] = 0;
    for (int i = 0; i < n; i++) {
        remat_plan *p = NULL;
        remat_op_profile *so = NULL;
        int rc = plan_split(prof, ops, step, hv, splits[i], (size_t)s->budget, po, &p, &so);
        if (rc == REMAT_EINVAL && splits[i] > 0) { /* below this mix's minimum: which is it? */
            remat_profile *sp = NULL;
            size_t sa = 0, mn = 0;
            const int h = splits[i];
            if (!remat_profile_splice(&sp, prof, 0, L - h, hv->prof, 2 * (L - h), 2 * h) &&
                !strategy_step_range(sp, step, &sa, &mn) && mn < *min)
                *min = mn;
            remat_profile_free(sp);
        }
        if (rc) {
            if (first_rc == REMAT_OK) {
                first_rc = rc;
                snprintf(first_msg, sizeof first_msg, "%s", remat_last_error());
            }
            if (rc != REMAT_EINVAL) break; /* only a budget below a chain's minimum is expected */
            continue;
        }
        if (!s->plan || p->time < s->plan->time) {
            remat_plan_free(s->plan);
            remat_op_profile_free(s->ops);
            s->plan = p, s->ops = so, s->split = splits[i];
        } else {
            remat_plan_free(p);
            remat_op_profile_free(so);
        }
    }
    if (s->plan) return REMAT_OK;
    if (first_rc == REMAT_EINVAL && n > 1) {
        char at_least[32];
        size_at_least(at_least, sizeof at_least, (double)*min);
        return remat_set_error(first_rc,
                               "%s; with the last blocks in halves (attention, MLP) plans reach "
                               "down to %s",
                               first_msg, at_least);
    }
    return remat_set_error(first_rc, "%s", first_msg);
}

int strategy_plan(strategy *s, const remat_profile *prof, const remat_step_profile *step,
                  const remat_op_profile *ops, const remat_plan_options *po,
                  const strategy_halves *halves) {
    if (s->kind != STRAT_BUDGET) return REMAT_OK;
    remat_plan_free(s->plan);
    remat_op_profile_free(s->ops);
    s->plan = NULL;
    s->ops = NULL;
    s->split = 0;
    s->covers_all = false;
    const bool whole = !s->blocks_only && step;
    size_t store_all = 0, min = 0;
    int rc;
    if (whole) {
        rc = strategy_step_range(prof, step, &store_all, &min);
    } else {
        rc = strategy_store_all_bytes(prof, &store_all);
        if (!rc) rc = remat_plan_min_budget(prof, &min);
    }
    if (rc) return rc;
    if (s->budget_pct > 0) s->budget = (uint64_t)(s->budget_pct / 100.0 * (double)store_all);
    if (whole && ops && plans_ops(s)) rc = plan_ops_best(s, prof, ops, step, po, halves, &min);
    else
        rc = whole ? remat_plan_create_step(&s->plan, prof, step, (size_t)s->budget, NULL)
                   : remat_plan_create(&s->plan, prof, (size_t)s->budget);
    if (rc == REMAT_EINVAL && s->budget < min) {
        /* the planner's message states the minimum in bytes; add what to type */
        char msg[512];
        snprintf(msg, sizeof msg, "%s", remat_last_error());
        char at_least[32], sa[32];
        size_at_least(at_least, sizeof at_least, (double)min);
        double pct = store_all ? ceil(100.0 * (double)min / (double)store_all) : 100.0;
        const char *key = s->blocks_only ? "blocks-budget" : "budget";
        return remat_set_error(rc,
                               "%s; %s %s without checkpointing, so the smallest feasible "
                               "budget is %s=%s (or %s=%.0f%%)",
                               msg, whole ? "the step needs" : "the blocks need",
                               util_fmt_bytes((double)store_all, sa, sizeof sa), key, at_least, key,
                               pct > 100 ? 100 : pct);
    }
    if (!rc) s->covers_all = s->budget >= store_all;
    return rc;
}

bool strategy_budget_warning(const strategy *s, char *buf, size_t n) {
    if (n) buf[0] = '\0';
    if (s->kind != STRAT_BUDGET || !s->covers_all || !s->plan) return false;
    char b[32], sa[32];
    snprintf(buf, n,
             "warning: %s (%s) is at or above what the %s needs without checkpointing (%s): "
             "nothing is checkpointed; a smaller budget trades time for memory",
             s->name, util_fmt_bytes((double)s->budget, b, sizeof b),
             s->plan->whole_step ? "step" : "blocks' share of the step",
             util_fmt_bytes((double)s->plan->peak_store_all, sa, sizeof sa));
    return true;
}

void strategy_free(strategy *s) {
    if (!s) return;
    remat_plan_free(s->plan);
    remat_op_profile_free(s->ops);
    s->plan = NULL;
    s->ops = NULL;
    s->split = 0;
}

/* ---- running a chain --------------------------------------------------------------------- */
int strategy_run_chain(const strategy *s, int n, block_fn fn, void *const *user_data,
                       remat_tensor *x, remat_tensor **out) {
    *out = NULL;
    remat_strategy rs = {.reentrant = s->reentrant};
    switch (s->kind) {
    case STRAT_NONE: rs.kind = REMAT_STRATEGY_NONE; break;
    case STRAT_BLOCK: rs.kind = REMAT_STRATEGY_BLOCK; break;
    case STRAT_SEQUENTIAL:
        if (s->segments > n)
            return remat_set_error(REMAT_EINVAL,
                                   "remat: --checkpoint %s: more segments than the model's %d "
                                   "blocks",
                                   s->name, n);
        rs.kind = REMAT_STRATEGY_SEQUENTIAL;
        rs.segments = s->segments;
        break;
    case STRAT_BUDGET:
        if (!s->plan)
            return remat_set_error(REMAT_ESTATE,
                                   "remat: strategy %s: no plan was made before the step", s->name);
        if (s->plan->n_stages != n)
            return remat_set_error(REMAT_EINVAL,
                                   "remat: strategy %s: plan for %d blocks, model has %d", s->name,
                                   s->plan->n_stages, n);
        rs.kind = REMAT_STRATEGY_PLAN;
        rs.plan = s->plan;
        break;
    case STRAT_SELECTIVE: rs.kind = REMAT_STRATEGY_SELECTIVE; break;
    default: {
        char err[160];
        strategy_available(s, err, sizeof err);
        return remat_set_error(REMAT_EUNSUPPORTED, "remat: strategy %s: %s", s->name, err);
    }
    }
    remat_stage *st = malloc(sizeof *st * (size_t)(n > 0 ? n : 1));
    if (!st) return remat_set_error(REMAT_ENOMEM, "remat: out of memory");
    for (int i = 0; i < n; i++) st[i] = (remat_stage){fn, user_data[i]};
    /* selective: the policy lives for this forward only (every region
     * takes its own reference) */
    int rc = rs.kind == REMAT_STRATEGY_SELECTIVE ? strategy_make_policy(s, &rs.policy) : REMAT_OK;
    rs.sac_stats = s->sac_stats;
    if (!rc) rc = remat_run_chain(out, n, st, x, &rs);
    remat_policy_release(rs.policy);
    free(st);
    return rc;
}
