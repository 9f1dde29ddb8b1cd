/*
 * src/optim/optim.c — the optimizer object (remat/optim.h): parameters,
 * groups, state tensors, and the step that runs accumulation, clipping,
 * the schedule and the update. The per-element work runs through the kernel
 * table on the parameters' device (src/core/kernels/optim.h: the update, the
 * sums of squares of global norms; gradients are scaled by the elementwise
 * engine), so parameters may live on any device type with those kernels
 * (cpu, cuda); their state lives there too.
 *
 * A step is two passes over the parameters at most, each one parallel region on the cpu:
 * with clipping, the sums of squares of all host gradients together (rm_sum_squares_list),
 * then the update of all parameters of a device and dtype by one list kernel
 * (ADAMW_LIST / SGD_LIST: the elements of every parameter end to end, one contiguous
 * share per thread). Not one flat buffer of parameters: the model owns its tensors (and
 * their views, savefiles, device copies), so the optimizer takes them as a list; what a
 * flat buffer would save beyond this is the walk over ~100 descriptors a step. On cuda the
 * list kernels are a few launches a step (up to 96 parameters each, src/backends/cuda/
 * optim.cu). Per parameter kernels (update_param) remain for device types without list
 * kernels (fenced). Every element's result is the same bits on either path.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/core.h"
#include "core/kernels.h"
#include "core/optim_loops.h"
#include "remat/optim.h"

typedef struct opt_param {
    remat_tensor *p;     /* retained */
    remat_tensor *s[2];  /* state slots (remat_optim_slot), NULL where none */
    int64_t steps;       /* updates this parameter had (PyTorch's state['step']) */
    double weight_decay; /* its group's */
} opt_param;

struct remat_optimizer {
    remat_optim_options opts;
    opt_param *ps;
    int n, cap;
    int64_t updates;  /* updates applied (the schedule's k) */
    int micro;        /* micro-batches counted since the last update */
    double last_norm; /* before the last update's clipping */
};

static int n_slots(const remat_optim_options *o) {
    if (o->kind == REMAT_OPTIM_ADAMW) return 2;
    return o->momentum != 0 ? 1 : 0;
}

static remat_status check_options(const remat_optim_options *o) {
    if (!o) return rm_err(REMAT_EINVAL, "remat_optim_create: options is NULL");
    if (o->kind != REMAT_OPTIM_SGD && o->kind != REMAT_OPTIM_ADAMW)
        return rm_err(REMAT_EINVAL, "remat_optim_create: unknown optimizer kind %d", (int)o->kind);
#define NONNEG(f)                                                                                  \
    if (!(o->f >= 0) || !isfinite(o->f))                                                           \
    return rm_err(REMAT_EINVAL, "remat_optim_create: " #f " is %g (need a finite value >= 0)", o->f)
    NONNEG(lr);
    NONNEG(weight_decay);
    NONNEG(clip_norm);
    if (o->kind == REMAT_OPTIM_SGD) {
        NONNEG(momentum);
        NONNEG(dampening);
        if (o->nesterov && (o->momentum <= 0 || o->dampening != 0))
            return rm_err(REMAT_EINVAL, "remat_optim_create: nesterov needs momentum > 0 and "
                                        "dampening 0 (as PyTorch)");
    } else {
        if (!(o->beta1 >= 0 && o->beta1 < 1) || !(o->beta2 >= 0 && o->beta2 < 1))
            return rm_err(REMAT_EINVAL, "remat_optim_create: betas (%g, %g) must be in [0, 1)",
                          o->beta1, o->beta2);
        if (!(o->eps >= 0) || !isfinite(o->eps))
            return rm_err(REMAT_EINVAL, "remat_optim_create: eps is %g (need >= 0)", o->eps);
    }
#undef NONNEG
    if (o->accum_steps < 0)
        return rm_err(REMAT_EINVAL, "remat_optim_create: accum_steps is %d (need >= 0)",
                      o->accum_steps);
    int rc = remat_lr_schedule_check(&o->schedule);
    return rc ? rm_err_prefix(rc, "remat_optim_create") : REMAT_OK;
}

remat_status remat_optim_options_init(remat_optim_options *o, remat_optim_kind kind) {
    if (!o) return rm_err(REMAT_EINVAL, "remat_optim_options_init: o is NULL");
    memset(o, 0, sizeof *o);
    o->kind = kind;
    o->lr = 1e-3;
    if (kind == REMAT_OPTIM_ADAMW) {
        o->weight_decay = 1e-2;
        o->beta1 = 0.9;
        o->beta2 = 0.999;
        o->eps = 1e-8;
    } else if (kind != REMAT_OPTIM_SGD) {
        return rm_err(REMAT_EINVAL, "remat_optim_options_init: unknown optimizer kind %d",
                      (int)kind);
    }
    return REMAT_OK;
}

static void param_clear(opt_param *q) {
    rm_release(q->p);
    rm_release(q->s[0]);
    rm_release(q->s[1]);
    memset(q, 0, sizeof *q);
}

void remat_optim_free(remat_optimizer *o) {
    if (!o) return;
    for (int i = 0; i < o->n; i++) param_clear(&o->ps[i]);
    free(o->ps);
    free(o);
}

static remat_status check_param(const remat_optimizer *o, remat_tensor *const *params, int i,
                                const char *call) {
    remat_tensor *p = params[i];
    if (!p) return rm_err(REMAT_EINVAL, "%s: params[%d] is NULL", call, i);
    if (rm_dead(p)) return rm_released_err(call, "params[i]", p);
    remat_dtype dt = remat_tensor_dtype(p);
    if (dt != REMAT_F32 && dt != REMAT_F64)
        return rm_err(REMAT_EDTYPE, "%s: params[%d] is %s (f32 or f64 parameters only)", call, i,
                      remat_dtype_name(dt));
    const remat_device dev = remat_tensor_device(p);
    rm_kernel_fn fn = NULL;
    const rm_kernel_id id = o->opts.kind == REMAT_OPTIM_ADAMW ? RM_K_ADAMW : RM_K_SGD;
    if (rm_kernel_find(id, dev, dt, call, &fn) ||
        rm_kernel_find(RM_K_SUM_SQUARES, dev, dt, call, &fn)) {
        const char *name = remat_device_type_name(dev.type);
        return rm_err(REMAT_EUNSUPPORTED,
                      "%s: params[%d] is on device '%s', which has no %s "
                      "optimizer kernels for %s",
                      call, i, name ? name : "?",
                      o->opts.kind == REMAT_OPTIM_ADAMW ? "AdamW" : "SGD", remat_dtype_name(dt));
    }
    if (!remat_is_leaf(p))
        return rm_err(REMAT_EINVAL, "%s: params[%d] is not a leaf (it has a grad_fn)", call, i);
    if (!remat_is_contiguous(p))
        return rm_err(REMAT_EINVAL, "%s: params[%d] is not contiguous", call, i);
    for (int j = 0; j < o->n; j++)
        if (o->ps[j].p == p)
            return rm_err(REMAT_EINVAL, "%s: params[%d] is already added", call, i);
    for (int j = 0; j < i; j++)
        if (params[j] == p)
            return rm_err(REMAT_EINVAL, "%s: params[%d] repeats params[%d]", call, i, j);
    return REMAT_OK;
}

static remat_status add_group(remat_optimizer *o, remat_tensor *const *params, int n,
                              double weight_decay, const char *call) {
    if (!o) return rm_err(REMAT_EINVAL, "%s: optimizer is NULL", call);
    if (n < 0 || (n > 0 && !params))
        return rm_err(REMAT_EINVAL, "%s: %d parameters at %p", call, n, (const void *)params);
    if (!(weight_decay >= 0) || !isfinite(weight_decay))
        return rm_err(REMAT_EINVAL, "%s: weight_decay is %g (need a finite value >= 0)", call,
                      weight_decay);
    for (int i = 0; i < n; i++) {
        int rc = check_param(o, params, i, call);
        if (rc) return rc;
    }
    if (o->n + n > o->cap) {
        int cap = o->cap ? o->cap : 16;
        while (cap < o->n + n) cap *= 2;
        opt_param *ps = realloc(o->ps, sizeof *ps * (size_t)cap);
        if (!ps) return rm_err(REMAT_ENOMEM, "%s: out of memory", call);
        o->ps = ps;
        o->cap = cap;
    }
    const int slots = n_slots(&o->opts);
    for (int i = 0; i < n; i++) {
        opt_param *q = &o->ps[o->n + i];
        memset(q, 0, sizeof *q);
        remat_tensor *p = params[i];
        q->weight_decay = weight_decay;
        for (int s = 0; s < slots; s++) {
            int rc = remat_zeros(&q->s[s], remat_ndim(p), remat_shape(p), remat_tensor_dtype(p),
                                 remat_tensor_device(p));
            if (rc) {
                for (int j = 0; j <= i; j++) param_clear(&o->ps[o->n + j]);
                return rm_err_prefix(rc, call);
            }
        }
        q->p = rm_retain(p);
    }
    o->n += n;
    return REMAT_OK;
}

remat_status remat_optim_add_group(remat_optimizer *o, remat_tensor *const *params, int n,
                                   double weight_decay) {
    return add_group(o, params, n, weight_decay, "remat_optim_add_group");
}

remat_status remat_optim_create(remat_optimizer **out, const remat_optim_options *opts,
                                remat_tensor *const *params, int n) {
    if (!out) return rm_err(REMAT_EINVAL, "remat_optim_create: out is NULL");
    *out = NULL;
    int rc = check_options(opts);
    if (rc) return rc;
    remat_optimizer *o = calloc(1, sizeof *o);
    if (!o) return rm_err(REMAT_ENOMEM, "remat_optim_create: out of memory");
    o->opts = *opts;
    rc = add_group(o, params, n, opts->weight_decay, "remat_optim_create");
    if (rc == REMAT_OK) *out = o;
    else remat_optim_free(o);
    return rc;
}

void remat_optim_zero_grad(remat_optimizer *o) {
    if (!o) return;
    for (int i = 0; i < o->n; i++)
        if (!rm_dead(o->ps[i].p)) remat_set_grad(o->ps[i].p, NULL);
    o->micro = 0;
}

/* Every gradient checked, and made dense, before anything is changed. */
static remat_status prepare_grads(remat_optimizer *o, const char *call) {
    for (int i = 0; i < o->n; i++) /* a parameter its user released once too often */
        if (rm_dead(o->ps[i].p)) {
            char arg[32];
            snprintf(arg, sizeof arg, "parameter %d", i);
            return rm_released_err(call, arg, o->ps[i].p);
        }
    for (int i = 0; i < o->n; i++) {
        remat_tensor *p = o->ps[i].p, *g = remat_tensor_grad(p);
        if (!g) continue;
        bool same =
            remat_tensor_dtype(g) == remat_tensor_dtype(p) && remat_ndim(g) == remat_ndim(p);
        for (int d = 0; same && d < remat_ndim(p); d++) same = remat_size(g, d) == remat_size(p, d);
        if (!same) {
            char a[64], b[64];
            return rm_err(REMAT_ESHAPE, "%s: parameter %d is %s but its gradient is %s", call, i,
                          remat_describe(p, a, sizeof a), remat_describe(g, b, sizeof b));
        }
        const remat_device dp = remat_tensor_device(p), dg = remat_tensor_device(g);
        if (dg.type != dp.type || dg.index != dp.index) {
            const char *np = remat_device_type_name(dp.type), *ng = remat_device_type_name(dg.type);
            return rm_err(REMAT_EDEVICE,
                          "%s: the gradient of parameter %d is on %s:%d, the "
                          "parameter on %s:%d",
                          call, i, ng ? ng : "?", dg.index, np ? np : "?", dp.index);
        }
    }
    for (int i = 0; i < o->n; i++) {
        remat_tensor *p = o->ps[i].p, *g = remat_tensor_grad(p), *dense = NULL;
        if (!g || remat_is_contiguous(g)) continue;
        bool prev = remat_no_grad_begin();
        int rc = remat_contiguous(&dense, g);
        remat_grad_mode_restore(prev);
        if (!rc) rc = remat_set_grad(p, dense);
        rm_release(dense);
        if (rc) return rm_err_prefix(rc, call);
    }
    return REMAT_OK;
}

/* The sum of the squares of every gradient, in double, the gradients' sums added in
 * parameter order. In host memory a gradient's sum is made at once; on another device one
 * SUM_SQUARES kernel per gradient writes it into element i of a vector on that device, and
 * each device's vector comes back to the host once. */
#define SUMSQ_MAX_DEVICES 8
typedef struct sumsq_vectors {
    int n;
    remat_device dev[SUMSQ_MAX_DEVICES];
    remat_tensor *vec[SUMSQ_MAX_DEVICES]; /* len f64 elements each, on dev[k] */
} sumsq_vectors;

/* The index of d's vector in v (made on first use), or -1 with the error set. */
static int sumsq_vector(sumsq_vectors *v, remat_device d, int64_t len, const char *call) {
    for (int k = 0; k < v->n; k++)
        if (v->dev[k].type == d.type && v->dev[k].index == d.index) return k;
    if (v->n == SUMSQ_MAX_DEVICES) {
        (void)rm_err(REMAT_EUNSUPPORTED, "%s: gradients on more than %d devices", call,
                     SUMSQ_MAX_DEVICES);
        return -1;
    }
    if (remat_zeros(&v->vec[v->n], 1, &len, REMAT_F64, d)) return -1; /* an empty gradient: 0 */
    v->dev[v->n] = d;
    return v->n++;
}

/* host[i] = the sum of squares of gradient i (0 without one); which[i] = 1 + the vector
 * that holds it when it is made on a device the host cannot address (0: made here). The
 * gradients in host memory are summed together (rm_sum_squares_list: one parallel region
 * over all their chunks, each one's sum the bits of remat_sum_squares_f32/_f64 on it). */
static remat_status sumsq_each(const remat_optimizer *o, sumsq_vectors *v, double *host,
                               unsigned char *which, int64_t len, const char *call) {
    const void **x = calloc((size_t)len, sizeof *x);
    bool *f64 = calloc((size_t)len, sizeof *f64);
    int64_t *n = calloc((size_t)len, sizeof *n);
    int rc = x && f64 && n ? REMAT_OK : rm_err(REMAT_ENOMEM, "%s: out of memory", call);
    for (int i = 0; !rc && i < o->n; i++) {
        remat_tensor *g = remat_tensor_grad(o->ps[i].p);
        if (!g) continue;
        const remat_device d = remat_tensor_device(g);
        if (remat_device_host_addressable(d.type)) { /* no vector to allocate (and count) */
            x[i] = remat_data(g);
            f64[i] = remat_tensor_dtype(g) == REMAT_F64;
            n[i] = remat_numel(g);
            continue;
        }
        const int k = sumsq_vector(v, d, len, call);
        if (k < 0) {
            rc = rm_last_status();
            break;
        }
        which[i] = (unsigned char)(k + 1);
        const rm_sumsq_kparams sp = {i};
        rm_kargs ka = {.in = {g}, .out = {v->vec[k]}, .params = &sp};
        rc = rm_kernel_run(RM_K_SUM_SQUARES, call, &ka);
    }
    if (!rc && !rm_sum_squares_list(o->n, x, f64, n, host))
        rc = rm_err(REMAT_ENOMEM, "%s: out of memory", call);
    free(x), free(f64), free(n);
    return rc;
}

/* The sum of the squares of every gradient, in double, the gradients' sums added in
 * parameter order. In host memory a gradient's sum is made at once; on another device one
 * SUM_SQUARES kernel per gradient writes it into element i of a vector on that device, and
 * each device's vector comes back to the host once. */
static remat_status grad_sumsq(const remat_optimizer *o, const char *call, double *out) {
    *out = 0;
    sumsq_vectors v = {0};
    const int64_t len = o->n > 0 ? o->n : 1;
    unsigned char *which = calloc((size_t)len, 1);
    double *host = calloc((size_t)len, sizeof *host), *part = calloc((size_t)len, sizeof *part);
    int rc = which && host && part ? sumsq_each(o, &v, host, which, len, call)
                                   : rm_err(REMAT_ENOMEM, "%s: out of memory", call);
    for (int k = 0; !rc && k < v.n; k++) {
        rc = remat_copy_to_buffer(v.vec[k], REMAT_F64, part, len);
        for (int i = 0; !rc && i < o->n; i++)
            if (which[i] == k + 1) host[i] = part[i];
    }
    double s = 0;
    for (int i = 0; !rc && i < o->n; i++) s += host[i];
    for (int k = 0; k < v.n; k++) rm_release(v.vec[k]);
    free(which);
    free(host);
    free(part);
    if (!rc) *out = s;
    return rc;
}

/* g *= f on g's device (the elementwise engine's SCALE: in T, as the update's scalars). */
static remat_status scale_dense(remat_tensor *g, double f, const char *call) {
    const rm_ew_params sp = {RM_EW_SCALE, f};
    rm_kargs ka = {.in = {g}, .out = {g}, .params = &sp};
    int rc = rm_kernel_run(RM_K_ELEMENTWISE, call, &ka);
    if (!rc) rm_bump_version(g);
    return rc;
}

remat_status remat_optim_grad_norm(const remat_optimizer *o, double *norm) {
    if (!o || !norm) return rm_err(REMAT_EINVAL, "remat_optim_grad_norm: NULL argument");
    int rc = prepare_grads((remat_optimizer *)o, "remat_optim_grad_norm");
    double ss = 0;
    if (!rc) rc = grad_sumsq(o, "remat_optim_grad_norm", &ss);
    if (rc) return rc;
    *norm = sqrt(ss);
    return REMAT_OK;
}

remat_status remat_optim_scale_grads(remat_optimizer *o, double f) {
    if (!o) return rm_err(REMAT_EINVAL, "remat_optim_scale_grads: optimizer is NULL");
    int rc = prepare_grads(o, "remat_optim_scale_grads");
    if (rc) return rc;
    for (int i = 0; i < o->n; i++) {
        remat_tensor *g = remat_tensor_grad(o->ps[i].p);
        if (g && (rc = scale_dense(g, f, "remat_optim_scale_grads"))) return rc;
    }
    return REMAT_OK;
}

/* q's kernel parameters for an update at rate lr, its gradient read times gscale. */
static rm_adamw_kparams adamw_kparams(const remat_optimizer *o, const opt_param *q, double lr,
                                      double gscale) {
    const remat_optim_options *op = &o->opts;
    const rm_adamw_kparams h = {lr,           op->beta1, op->beta2, op->eps, q->weight_decay,
                                q->steps + 1, gscale};
    return h;
}
static rm_sgd_kparams sgd_kparams(const remat_optimizer *o, const opt_param *q, double lr,
                                  double gscale) {
    const remat_optim_options *op = &o->opts;
    const rm_sgd_kparams h = {lr,           op->momentum,  op->dampening, q->weight_decay,
                              op->nesterov, q->steps == 0, gscale};
    return h;
}

static void updated(opt_param *q) {
    q->steps++;
    rm_bump_version(q->p);
}

/* q's update; its gradient read times gscale (1: as it is): by the kernel where it allows
 * it (RM_KF_GRAD_SCALE: the cpu's, cuda's), else by a SCALE pass over g first, the same bits. */
static remat_status update_param(remat_optimizer *o, opt_param *q, double lr, double gscale,
                                 const char *call) {
    remat_tensor *g = remat_tensor_grad(q->p);
    const bool adamw = o->opts.kind == REMAT_OPTIM_ADAMW;
    const rm_kernel_id kid = adamw ? RM_K_ADAMW : RM_K_SGD;
    int rc;
    if (gscale != 1.0 && !rm_kernel_allows(kid, remat_tensor_device(g).type, RM_KF_GRAD_SCALE)) {
        if ((rc = scale_dense(g, gscale, call))) return rc;
        gscale = 1.0;
    }
    if (adamw) {
        const rm_adamw_kparams h = adamw_kparams(o, q, lr, gscale);
        rm_kargs ka = {.in = {g}, .out = {q->p, q->s[0], q->s[1]}, .params = &h};
        rc = rm_kernel_run(RM_K_ADAMW, call, &ka);
    } else {
        const rm_sgd_kparams h = sgd_kparams(o, q, lr, gscale);
        rm_kargs ka = {.in = {g}, .out = {q->p, q->s[0]}, .params = &h};
        rc = rm_kernel_run(RM_K_SGD, call, &ka);
    }
    if (rc) return rc;
    updated(q);
    return REMAT_OK;
}

/* The update of the parameters at[0..m), all on one device and of one dtype, by one list
 * kernel (ADAMW_LIST / SGD_LIST); w: room for 4m tensors and m kernel parameters. */
typedef struct list_room {
    remat_tensor **t;
    rm_adamw_kparams *ha;
    rm_sgd_kparams *hs;
} list_room;

static remat_status update_list(remat_optimizer *o, const int *at, int m, double lr, double gscale,
                                list_room *w, const char *call) {
    const bool adamw = o->opts.kind == REMAT_OPTIM_ADAMW;
    remat_tensor **p = w->t, **g = p + m, **s0 = g + m, **s1 = s0 + m;
    for (int j = 0; j < m; j++) {
        const opt_param *q = &o->ps[at[j]];
        p[j] = q->p, g[j] = remat_tensor_grad(q->p), s0[j] = q->s[0], s1[j] = q->s[1];
        if (adamw) w->ha[j] = adamw_kparams(o, q, lr, gscale);
        else w->hs[j] = sgd_kparams(o, q, lr, gscale);
    }
    /* the lookup's operands: a parameter with elements (an empty one may have no data, which
     * rm_kernel_run takes for skip mode); none: nothing to update */
    int first = 0;
    while (first < m && remat_numel(p[first]) == 0) first++;
    const rm_optim_list l = {m, p, g, s0, s1, adamw ? w->ha : NULL, adamw ? NULL : w->hs};
    rm_kargs ka = {
        .in = {first < m ? g[first] : NULL}, .out = {first < m ? p[first] : NULL}, .params = &l};
    int rc = first < m ? rm_kernel_run(adamw ? RM_K_ADAMW_LIST : RM_K_SGD_LIST, call, &ka) : 0;
    if (rc) return rc;
    for (int j = 0; j < m; j++) updated(&o->ps[at[j]]);
    return REMAT_OK;
}

/* The update of every parameter with a gradient, at rate lr, the gradients read times
 * gscale. The parameters are taken in groups of one device and dtype (in the order of
 * their first member); a group whose device type has the list kernel (the cpu: every element
 * of every parameter in one pass and one parallel region; cuda: launches of many parameters)
 * is updated by one call of it; another by one kernel per parameter (update_param). The
 * same bits either way. */
static remat_status update_all(remat_optimizer *o, double lr, double gscale, const char *call) {
    const int n = o->n;
    const size_t cnt = n > 0 ? (size_t)n : 1;
    const bool adamw = o->opts.kind == REMAT_OPTIM_ADAMW;
    list_room w = {malloc(sizeof *w.t * 4 * cnt), adamw ? malloc(sizeof *w.ha * cnt) : NULL,
                   adamw ? NULL : malloc(sizeof *w.hs * cnt)};
    int *at = malloc(sizeof *at * cnt);
    unsigned char *done = malloc(cnt);
    int rc = w.t && (w.ha || w.hs) && at && done ? REMAT_OK
                                                 : rm_err(REMAT_ENOMEM, "%s: out of memory", call);
    for (int i = 0; !rc && i < n; i++) done[i] = remat_tensor_grad(o->ps[i].p) == NULL;
    const rm_kernel_id lid = adamw ? RM_K_ADAMW_LIST : RM_K_SGD_LIST;
    for (int i = 0; !rc && i < n; i++) {
        if (done[i]) continue;
        const remat_device d = remat_tensor_device(o->ps[i].p);
        const remat_dtype dt = remat_tensor_dtype(o->ps[i].p);
        int m = 0;
        for (int j = i; j < n; j++) {
            const remat_device dj = remat_tensor_device(o->ps[j].p);
            if (!done[j] && dj.type == d.type && dj.index == d.index &&
                remat_tensor_dtype(o->ps[j].p) == dt)
                at[m++] = j, done[j] = 1;
        }
        if (rm_kernel_lookup(lid, d.type, dt)) rc = update_list(o, at, m, lr, gscale, &w, call);
        else
            for (int j = 0; !rc && j < m; j++)
                rc = update_param(o, &o->ps[at[j]], lr, gscale, call);
    }
    free(w.t), free(w.ha), free(w.hs), free(at), free(done);
    return rc;
}

remat_status remat_optim_step(remat_optimizer *o, bool *updated) {
    const char *call = "remat_optim_step";
    if (updated) *updated = false;
    if (!o) return rm_err(REMAT_EINVAL, "%s: optimizer is NULL", call);
    const int accum = o->opts.accum_steps > 1 ? o->opts.accum_steps : 1;
    if (o->micro + 1 < accum) {
        o->micro++;
        return REMAT_OK;
    }
    int rc = prepare_grads(o, call);
    if (rc) return rc;
    /* the mean over the micro-batches, then the clip: one factor, read with the gradient by
     * the update (update_param) */
    double scale = 1.0 / (double)accum;
    o->last_norm = 0;
    if (o->opts.clip_norm > 0) {
        double ss = 0;
        if ((rc = grad_sumsq(o, call, &ss))) return rc;
        o->last_norm = sqrt(ss) * scale;
        scale *= remat_clip_factor(o->last_norm, o->opts.clip_norm);
    }
    if ((rc = update_all(o, remat_optim_lr(o), scale, call))) return rc;
    o->updates++;
    remat_optim_zero_grad(o);
    if (updated) *updated = true;
    return REMAT_OK;
}

double remat_optim_lr(const remat_optimizer *o) {
    return o ? remat_lr_at(&o->opts.schedule, o->opts.lr, o->updates) : 0;
}
int64_t remat_optim_updates(const remat_optimizer *o) { return o ? o->updates : 0; }
double remat_optim_last_grad_norm(const remat_optimizer *o) { return o ? o->last_norm : 0; }
const remat_optim_options *remat_optim_get_options(const remat_optimizer *o) {
    return o ? &o->opts : NULL;
}

remat_status remat_optim_set_lr(remat_optimizer *o, double lr) {
    if (!o) return rm_err(REMAT_EINVAL, "remat_optim_set_lr: optimizer is NULL");
    if (!(lr >= 0) || !isfinite(lr))
        return rm_err(REMAT_EINVAL, "remat_optim_set_lr: lr is %g (need a finite value >= 0)", lr);
    o->opts.lr = lr;
    return REMAT_OK;
}

int remat_optim_n_params(const remat_optimizer *o) { return o ? o->n : 0; }

remat_tensor *remat_optim_param(const remat_optimizer *o, int i) {
    return o && i >= 0 && i < o->n ? o->ps[i].p : NULL;
}

remat_tensor *remat_optim_state(const remat_optimizer *o, int i, remat_optim_slot slot) {
    if (!o || i < 0 || i >= o->n || (slot != REMAT_OPTIM_EXP_AVG && slot != REMAT_OPTIM_EXP_AVG_SQ))
        return NULL;
    return o->ps[i].s[slot];
}

int64_t remat_optim_param_steps(const remat_optimizer *o, int i) {
    return o && i >= 0 && i < o->n ? o->ps[i].steps : 0;
}

remat_status remat_optim_set_updates(remat_optimizer *o, int64_t updates) {
    if (!o || updates < 0)
        return rm_err(REMAT_EINVAL, "remat_optim_set_updates: %s",
                      o ? "updates < 0" : "optimizer is NULL");
    o->updates = updates;
    for (int i = 0; i < o->n; i++) o->ps[i].steps = updates;
    o->micro = 0;
    return REMAT_OK;
}

size_t remat_optim_state_bytes(const remat_optimizer *o) {
    size_t b = 0;
    for (int i = 0; o && i < o->n; i++)
        for (int s = 0; s < 2; s++)
            if (o->ps[i].s[s])
                b += (size_t)remat_numel(o->ps[i].s[s]) *
                     remat_dtype_size(remat_tensor_dtype(o->ps[i].s[s]));
    return b;
}

size_t remat_optim_state_bytes_for(const remat_optim_options *opts, const int64_t *numels,
                                   const remat_dtype *dtypes, int n) {
    if (!opts || !numels || !dtypes) return 0;
    size_t b = 0;
    for (int i = 0; i < n; i++) b += (size_t)numels[i] * remat_dtype_size(dtypes[i]);
    return b * (size_t)n_slots(opts);
}

remat_status remat_clip_grad_norm(remat_tensor *const *params, int n, double max_norm,
                                  double *total_norm) {
    const char *call = "remat_clip_grad_norm";
    if (n < 0 || (n > 0 && !params)) return rm_err(REMAT_EINVAL, "%s: bad parameter list", call);
    if (!(max_norm >= 0)) return rm_err(REMAT_EINVAL, "%s: max_norm is %g", call, max_norm);
    /* a temporary optimizer-like view of the parameters: plain SGD keeps no state */
    remat_optimizer o;
    memset(&o, 0, sizeof o);
    o.opts.kind = REMAT_OPTIM_SGD;
    opt_param *ps = calloc(n ? (size_t)n : 1, sizeof *ps);
    if (!ps) return rm_err(REMAT_ENOMEM, "%s: out of memory", call);
    for (int i = 0; i < n; i++) {
        if (!params[i]) {
            free(ps);
            return rm_err(REMAT_EINVAL, "%s: params[%d] is NULL", call, i);
        }
        if (rm_dead(params[i])) {
            free(ps);
            return rm_released_err(call, "params[i]", params[i]);
        }
        ps[i].p = params[i];
    }
    o.ps = ps;
    o.n = n;
    int rc = prepare_grads(&o, call);
    double ss = 0;
    if (!rc) rc = grad_sumsq(&o, call, &ss);
    if (!rc) {
        double norm = sqrt(ss), f = remat_clip_factor(norm, max_norm);
        if (total_norm) *total_norm = norm;
        for (int i = 0; !rc && f != 1.0 && i < n; i++) {
            remat_tensor *g = remat_tensor_grad(params[i]);
            if (g) rc = scale_dense(g, f, call);
        }
    }
    free(ps);
    return rc;
}
