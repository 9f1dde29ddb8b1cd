/*
 * src/planner/splice.c — profiles of a chain made of two other chains'
 * stages (remat_profile_splice, remat_op_profile_splice): the whole blocks
 * of one profile followed by the half-block stages of another, without
 * profiling every mix. A stage's measurements do not depend on where it
 * sits in the chain (its input's bytes aside, which the splice checks), so
 * the parts' numbers are the spliced chain's.
 */
#include <stdlib.h>
#include <string.h>

#include "core/core.h"
#include "planner_internal.h"

/* The ranges [a_first, a_first + a_count) of na stages and the same of b;
 * REMAT_EINVAL naming call otherwise. */
static remat_status check_ranges(const char *call, int na, int a_first, int a_count, int nb,
                                 int b_first, int b_count) {
    if (a_first < 0 || a_count < 0 || a_first > na - a_count || b_first < 0 || b_count < 0 ||
        b_first > nb - b_count || a_count > INT32_MAX - b_count || a_count + b_count < 1)
        return rm_err(REMAT_EINVAL,
                      "%s: stages %d..%d of %d and %d..%d of %d (expected ranges inside each "
                      "chain, at least one stage in all)",
                      call, a_first, a_first + a_count - 1, na, b_first, b_first + b_count - 1, nb);
    return REMAT_OK;
}

remat_status remat_profile_splice(remat_profile **out, const remat_profile *a, int a_first,
                                  int a_count, const remat_profile *b, int b_first, int b_count) {
    static const char *call = "remat_profile_splice";
    if (!out) return rm_err(REMAT_EINVAL, "%s: out is NULL", call);
    *out = NULL;
    if (!a || !b || !a->stages || !b->stages)
        return rm_err(REMAT_EINVAL, "%s: a profile is NULL", call);
    int rc = check_ranges(call, a->n_stages, a_first, a_count, b->n_stages, b_first, b_count);
    if (rc) return rc;
    if (a_count > 0 && b_count > 0 &&
        a->stages[a_first + a_count - 1].output_bytes != b->stages[b_first].input_bytes)
        return rm_err(REMAT_EINVAL,
                      "%s: stage %d's output (%zu bytes) is not stage %d's input (%zu bytes)", call,
                      a_first + a_count - 1, a->stages[a_first + a_count - 1].output_bytes, b_first,
                      b->stages[b_first].input_bytes);
    remat_profile *p = NULL;
    rc = remat_profile_create(&p, a_count + b_count);
    if (rc) return rc;
    if (a_count) memcpy(p->stages, a->stages + a_first, (size_t)a_count * sizeof *p->stages);
    if (b_count)
        memcpy(p->stages + a_count, b->stages + b_first, (size_t)b_count * sizeof *p->stages);
    p->runs = a->runs > b->runs ? a->runs : b->runs;
    *out = p;
    return REMAT_OK;
}

/* Copies src's stage i into *dst (its ops duplicated); same_as is the caller's. */
static bool copy_stage(remat_stage_ops *dst, const remat_stage_ops *src) {
    *dst = *src;
    size_t n = (size_t)(src->n_ops > 0 ? src->n_ops : 1);
    dst->ops = calloc(n, sizeof *dst->ops);
    if (!dst->ops) return false;
    if (src->n_ops > 0) memcpy(dst->ops, src->ops, (size_t)src->n_ops * sizeof *dst->ops);
    return true;
}

remat_status remat_op_profile_splice(remat_op_profile **out, const remat_op_profile *a, int a_first,
                                     int a_count, const remat_op_profile *b, int b_first,
                                     int b_count) {
    static const char *call = "remat_op_profile_splice";
    if (!out) return rm_err(REMAT_EINVAL, "%s: out is NULL", call);
    *out = NULL;
    if (!a || !b || !a->stages || !b->stages)
        return rm_err(REMAT_EINVAL, "%s: an op profile is NULL", call);
    int rc = check_ranges(call, a->n_stages, a_first, a_count, b->n_stages, b_first, b_count);
    if (rc) return rc;
    const int n = a_count + b_count;
    remat_op_profile *p = calloc(1, sizeof *p);
    if (p) p->stages = calloc((size_t)n, sizeof *p->stages);
    if (!p || !p->stages) {
        free(p);
        return rm_err(REMAT_ENOMEM, "%s: out of memory", call);
    }
    p->n_stages = n;
    p->runs = a->runs > b->runs ? a->runs : b->runs;
    p->host_bytes_per_s = a->host_bytes_per_s > 0 ? a->host_bytes_per_s : b->host_bytes_per_s;
    p->cast_bytes_per_s = a->cast_bytes_per_s > 0 ? a->cast_bytes_per_s : b->cast_bytes_per_s;
    for (int k = 0; k < n; k++) {
        const bool in_a = k < a_count;
        const remat_op_profile *src = in_a ? a : b;
        const int i = in_a ? a_first + k : b_first + (k - a_count);
        const remat_stage_ops *so = &src->stages[i];
        if (so->same_as < 0 || so->same_as > i || !copy_stage(&p->stages[k], so)) {
            remat_op_profile_free(p);
            return so->same_as < 0 || so->same_as > i
                       ? rm_err(REMAT_EINVAL, "%s: stage %d of an op profile is malformed", call, i)
                       : rm_err(REMAT_ENOMEM, "%s: out of memory", call);
        }
        /* same_as: the first spliced stage from the same part that repeats the same
         * measured stage (the one the source's same_as names), this one if none */
        const int lo = in_a ? 0 : a_count;
        p->stages[k].same_as = k;
        for (int j = lo; j < k; j++) {
            const int ij = in_a ? a_first + j : b_first + (j - a_count);
            if (src->stages[ij].same_as == so->same_as) {
                p->stages[k].same_as = j;
                break;
            }
        }
    }
    *out = p;
    return REMAT_OK;
}
