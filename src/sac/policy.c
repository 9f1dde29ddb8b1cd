/* src/sac/policy.c — selective-checkpoint policy objects: callbacks, PyTorch's op
 * lists, JAX's presets (nothing/everything/dots saveable, name lists) and
 * the OR combinator. A policy is immutable after construction and
 * refcounted, so regions can share it with the caller. */
#include <stdlib.h>
#include <string.h>

#include "ops/registry.h"
#include "sac.h"

typedef enum pol_kind {
    POL_FN,
    POL_OPS,
    POL_NOTHING,
    POL_EVERYTHING,
    POL_DOTS,
    POL_ONLY_NAMES,
    POL_EXCEPT_NAMES,
    POL_ANY_NAMES_BUT,
    POL_OFFLOAD_NAMES,
    POL_OR
} pol_kind;

struct remat_policy {
    atomic_int refcount;
    pol_kind kind;
    remat_sac_policy_fn fn;
    void *state;
    void (*destroy)(void *);
    int n;
    char **names; /* op names (POL_OPS) or tag names */
    remat_policy *a, *b;
};

const char *remat_checkpoint_policy_name(int policy) {
    switch (policy) {
    case REMAT_MUST_SAVE: return "MUST_SAVE";
    case REMAT_PREFER_SAVE: return "PREFER_SAVE";
    case REMAT_MUST_RECOMPUTE: return "MUST_RECOMPUTE";
    case REMAT_PREFER_RECOMPUTE: return "PREFER_RECOMPUTE";
    case REMAT_MUST_CPU_OFFLOAD: return "MUST_CPU_OFFLOAD";
    case REMAT_PREFER_CPU_OFFLOAD: return "PREFER_CPU_OFFLOAD";
    case REMAT_MUST_SAVE_BF16: return "MUST_SAVE_BF16";
    case REMAT_PREFER_SAVE_BF16: return "PREFER_SAVE_BF16";
    }
    return "?";
}

static remat_status new_policy(remat_policy **out, pol_kind kind, const char *call) {
    remat_policy *p = calloc(1, sizeof *p);
    if (!p) return rm_err(REMAT_ENOMEM, "%s: out of memory", call);
    atomic_init(&p->refcount, 1);
    p->kind = kind;
    *out = p;
    return REMAT_OK;
}

static remat_status check_out(remat_policy **out, const char *call) {
    if (!out) return rm_err(REMAT_EINVAL, "%s: out must not be NULL", call);
    *out = NULL;
    return REMAT_OK;
}

/* Copies names[0..n) into p (validated: no NULL or empty entries). */
static remat_status copy_names(remat_policy *p, int n, const char *const *names, const char *call,
                               const char *what) {
    if (n < 0) return rm_err(REMAT_EINVAL, "%s: n must be >= 0, got %d", call, n);
    if (n > 0 && !names) return rm_err(REMAT_EINVAL, "%s: %s is NULL with n = %d", call, what, n);
    for (int i = 0; i < n; i++)
        if (!names[i] || !names[i][0])
            return rm_err(REMAT_EINVAL, "%s: %s[%d] is %s", call, what, i,
                          names[i] ? "an empty string" : "NULL");
    if (n == 0) return REMAT_OK;
    p->names = calloc((size_t)n, sizeof *p->names);
    if (!p->names) return rm_err(REMAT_ENOMEM, "%s: out of memory", call);
    p->n = n;
    for (int i = 0; i < n; i++) {
        p->names[i] = strdup(names[i]);
        if (!p->names[i]) return rm_err(REMAT_ENOMEM, "%s: out of memory", call);
    }
    return REMAT_OK;
}

remat_policy *remat_policy_retain(remat_policy *p) {
    if (p) atomic_fetch_add(&p->refcount, 1);
    return p;
}

void remat_policy_release(remat_policy *p) {
    if (!p || atomic_fetch_sub(&p->refcount, 1) != 1) return;
    if (p->destroy) p->destroy(p->state);
    for (int i = 0; i < p->n; i++) free(p->names[i]);
    free(p->names);
    remat_policy_release(p->a);
    remat_policy_release(p->b);
    free(p);
}

remat_status remat_policy_from_fn(remat_policy **out, remat_sac_policy_fn fn, void *user_state,
                                  void (*destroy_state)(void *)) {
    const char *call = "remat_policy_from_fn";
    int rc = check_out(out, call);
    if (rc) return rc;
    if (!fn) return rm_err(REMAT_EINVAL, "%s: the policy callback fn must not be NULL", call);
    rc = new_policy(out, POL_FN, call);
    if (rc) return rc;
    (*out)->fn = fn;
    (*out)->state = user_state;
    (*out)->destroy = destroy_state;
    return REMAT_OK;
}

/* Every name must be a registered op: a typo would otherwise save nothing. */
static remat_status check_op_names(int n, const char *const *names, const char *call) {
    for (int i = 0; i < n; i++) {
        if (rm_op_find(names[i]) >= 0) continue;
        char close[256];
        rm_op_closest(names[i], 3, close, sizeof close);
        return rm_err(REMAT_EINVAL, "%s: ops[%d] = '%s' is not an op name; the closest are %s",
                      call, i, names[i], close);
    }
    return REMAT_OK;
}

static remat_status named(remat_policy **out, pol_kind kind, int n, const char *const *names,
                          const char *call, const char *what) {
    int rc = check_out(out, call);
    if (rc) return rc;
    remat_policy *p = NULL;
    rc = new_policy(&p, kind, call);
    if (rc) return rc;
    rc = copy_names(p, n, names, call, what);
    if (!rc && kind == POL_OPS) rc = check_op_names(n, names, call);
    if (rc) {
        remat_policy_release(p);
        return rc;
    }
    *out = p;
    return REMAT_OK;
}

remat_status remat_policy_from_ops(remat_policy **out, int n, const char *const *ops) {
    return named(out, POL_OPS, n, ops, "remat_policy_from_ops", "ops");
}
remat_status remat_policy_nothing_saveable(remat_policy **out) {
    return named(out, POL_NOTHING, 0, NULL, "remat_policy_nothing_saveable", "names");
}
remat_status remat_policy_everything_saveable(remat_policy **out) {
    return named(out, POL_EVERYTHING, 0, NULL, "remat_policy_everything_saveable", "names");
}
remat_status remat_policy_dots_saveable(remat_policy **out) {
    return named(out, POL_DOTS, 0, NULL, "remat_policy_dots_saveable", "names");
}
remat_status remat_policy_save_only_these_names(remat_policy **out, int n,
                                                const char *const *names) {
    return named(out, POL_ONLY_NAMES, n, names, "remat_policy_save_only_these_names", "names");
}
remat_status remat_policy_save_anything_except_these_names(remat_policy **out, int n,
                                                           const char *const *names) {
    return named(out, POL_EXCEPT_NAMES, n, names, "remat_policy_save_anything_except_these_names",
                 "names");
}
remat_status remat_policy_save_any_names_but_these(remat_policy **out, int n,
                                                   const char *const *names) {
    return named(out, POL_ANY_NAMES_BUT, n, names, "remat_policy_save_any_names_but_these",
                 "names");
}
remat_status remat_policy_offload_these_names(remat_policy **out, int n, const char *const *names) {
    return named(out, POL_OFFLOAD_NAMES, n, names, "remat_policy_offload_these_names", "names");
}

remat_status remat_policy_or(remat_policy **out, remat_policy *a, remat_policy *b) {
    const char *call = "remat_policy_or";
    int rc = check_out(out, call);
    if (rc) return rc;
    if (!a || !b)
        return rm_err(REMAT_EINVAL, "%s: both policies must be given (a %s, b %s)", call,
                      a ? "ok" : "NULL", b ? "ok" : "NULL");
    rc = new_policy(out, POL_OR, call);
    if (rc) return rc;
    (*out)->a = remat_policy_retain(a);
    (*out)->b = remat_policy_retain(b);
    return REMAT_OK;
}

static bool listed(const remat_policy *p, const char *name) {
    if (!name) return false;
    for (int i = 0; i < p->n; i++)
        if (strcmp(p->names[i], name) == 0) return true;
    return false;
}

/* Strength order for OR: what either side saves wins, an exact save before a lossy one. */
static int rank(int p) {
    switch (p) {
    case REMAT_MUST_SAVE: return 0;
    case REMAT_MUST_CPU_OFFLOAD: return 1;
    case REMAT_MUST_SAVE_BF16: return 2;
    case REMAT_PREFER_SAVE: return 3;
    case REMAT_PREFER_CPU_OFFLOAD: return 4;
    case REMAT_PREFER_SAVE_BF16: return 5;
    case REMAT_MUST_RECOMPUTE: return 6;
    default: return 7; /* PREFER_RECOMPUTE */
    }
}

int remat_policy_eval(const remat_policy *p, const remat_sac_context *ctx, const char *op,
                      int n_inputs, remat_tensor *const *inputs) {
    static const remat_sac_context k_none = {false, 0, NULL};
    if (!ctx) ctx = &k_none;
    if (!p || !op) return -1;
    bool is_tag = ctx->tag != NULL;
    switch (p->kind) {
    case POL_FN: return (int)p->fn(ctx, op, n_inputs, inputs, p->state);
    case POL_OPS: return listed(p, op) ? REMAT_MUST_SAVE : REMAT_PREFER_RECOMPUTE;
    case POL_NOTHING: return REMAT_PREFER_RECOMPUTE;
    case POL_EVERYTHING: return REMAT_PREFER_SAVE;
    case POL_DOTS:
        return strcmp(op, "remat_matmul") == 0 || strcmp(op, "remat_linear") == 0 ||
                       strcmp(op, "remat_attention") == 0
                   ? REMAT_MUST_SAVE
                   : REMAT_PREFER_RECOMPUTE;
    case POL_ONLY_NAMES:
        return is_tag && listed(p, ctx->tag) ? REMAT_MUST_SAVE : REMAT_PREFER_RECOMPUTE;
    case POL_EXCEPT_NAMES:
        return is_tag && listed(p, ctx->tag) ? REMAT_MUST_RECOMPUTE : REMAT_PREFER_SAVE;
    case POL_ANY_NAMES_BUT:
        return is_tag && !listed(p, ctx->tag) ? REMAT_MUST_SAVE : REMAT_PREFER_RECOMPUTE;
    case POL_OFFLOAD_NAMES:
        return is_tag && listed(p, ctx->tag) ? REMAT_MUST_CPU_OFFLOAD : REMAT_PREFER_RECOMPUTE;
    case POL_OR: {
        int x = remat_policy_eval(p->a, ctx, op, n_inputs, inputs);
        int y = remat_policy_eval(p->b, ctx, op, n_inputs, inputs);
        if (!sac_valid_policy(x)) return x;
        if (!sac_valid_policy(y)) return y;
        return rank(x) <= rank(y) ? x : y;
    }
    }
    return -1;
}
