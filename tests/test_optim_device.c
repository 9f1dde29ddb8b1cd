/*
 * tests/test_optim_device.c — remat/optim.h with parameters on a device the host cannot
 * address: the same optimizer run on cpu and on the device, from the same parameters and
 * gradients, over several updates (AdamW and SGD, f32 and f64, weight-decay groups, a
 * parameter without a gradient, gradient accumulation, clipping by the global norm, the
 * warm-up + cosine schedule; remat_clip_grad_norm, remat_optim_grad_norm,
 * remat_optim_scale_grads), its state on the device.
 *
 * On "fenced" (tests/support/fenced.h: the cpu kernels behind memory the host cannot touch)
 * every parameter, state tensor and norm is the cpu's bit for bit. On cuda (skipped without
 * a GPU) the updates are the cpu loops' operations in their order (src/backends/cuda/optim.cu)
 * and agree to rounding; the global norm is summed in another order, so clipped runs agree
 * to a few ulps. Cuda's list kernels (one call a step for all parameters of a dtype) give
 * the bits of its per-parameter kernels.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/kernels.h"

#include "support/fenced.h"
#include "support/rt.h"

#define NP 3

static remat_device fenced(void) {
    int type = rt_fenced_type();
    cr_assert(type > 0, "fenced device: %s", remat_last_error());
    return (remat_device){type, 0};
}

/* p.grad += g through a backward of sum(p * g) (g copied to p's device). */
static void add_grad(remat_tensor *p, remat_tensor *g) {
    remat_tensor *gd = NULL, *prod = NULL, *l = NULL;
    RT_OK(remat_to_device(&gd, g, remat_tensor_device(p)));
    RT_OK(remat_mul(&prod, p, gd));
    RT_OK(remat_sum_all(&l, prod));
    RT_OK(remat_backward_scalar(l));
    remat_release(l);
    remat_release(prod);
    remat_release(gd);
}

/* How closely the device must follow cpu: bitwise (atol = rtol = 0) or to rounding. */
typedef struct agree {
    double atol, rtol;
} agree;

static void expect(const remat_tensor *dev, const remat_tensor *cpu, agree a, const char *what) {
    cr_assert_not_null(dev, "%s: missing on the device", what);
    cr_assert_not_null(cpu, "%s: missing on cpu", what);
    cr_assert(remat_tensor_device(dev).type != REMAT_CPU, "%s: not on the device", what);
    if (a.atol == 0 && a.rtol == 0)
        cr_assert(rt_bitwise_equal(dev, cpu), "%s: differs from cpu (max |d| %g)", what,
                  rt_max_abs_diff(dev, cpu));
    else rt_assert_close(dev, cpu, a.atol, a.rtol, what);
}

/* The same run on cpu and on dev: NP parameters in two weight-decay groups, `updates`
 * updates of o's accumulation steps each, parameter 2 without a gradient in update 1. */
static void run(remat_device dev, const remat_optim_options *o, remat_dtype dt, agree a,
                const char *name) {
    const int64_t shapes[NP][2] = {{37, 129}, {100003, 1}, {3, 7}};
    remat_tensor *pc[NP], *pd[NP];
    for (int i = 0; i < NP; i++) {
        pc[i] = rt_leaf(rt_rand(2, shapes[i], dt, -1, 1, 100 + (unsigned)i));
        pd[i] = rt_leaf_on(pc[i], dev, true);
    }
    remat_optimizer *oc = NULL, *od = NULL;
    RT_OK(remat_optim_create(&oc, o, pc, 2));
    RT_OK(remat_optim_add_group(oc, &pc[2], 1, 0.0));
    RT_OK(remat_optim_create(&od, o, pd, 2));
    RT_OK(remat_optim_add_group(od, &pd[2], 1, 0.0));
    const int micro = o->accum_steps > 1 ? o->accum_steps : 1;
    char what[160];
    for (int s = 0; s < 4; s++) {
        for (int j = 0; j < micro; j++) {
            for (int i = 0; i < NP; i++) {
                if (s == 1 && i == 2) continue;
                remat_tensor *g =
                    rt_rand(2, shapes[i], dt, -2, 2,
                            1000u + 37u * (unsigned)s + 7u * (unsigned)j + (unsigned)i);
                add_grad(pc[i], g);
                add_grad(pd[i], g);
                remat_release(g);
            }
            bool uc = false, ud = false;
            RT_OK(remat_optim_step(oc, &uc));
            RT_OK(remat_optim_step(od, &ud));
            cr_assert_eq(uc, ud);
        }
        const double nc = remat_optim_last_grad_norm(oc), nd = remat_optim_last_grad_norm(od);
        if (a.atol == 0 && a.rtol == 0)
            cr_assert(nc == nd, "%s: update %d: global norm %.17g on the device, %.17g on cpu",
                      name, s, nd, nc);
        else
            cr_assert(fabs(nc - nd) <= 1e-12 * fabs(nc) + 1e-300,
                      "%s: update %d: global norm %.17g on the device, %.17g on cpu", name, s, nd,
                      nc);
        for (int i = 0; i < NP; i++) {
            snprintf(what, sizeof what, "%s: update %d: parameter %d", name, s, i);
            expect(pd[i], pc[i], a, what);
            cr_assert_null(remat_tensor_grad(pd[i]), "%s: grads are dropped after an update", name);
        }
    }
    for (int i = 0; i < NP; i++)
        for (int slot = 0; slot < 2; slot++) {
            remat_tensor *sc = remat_optim_state(oc, i, (remat_optim_slot)slot);
            remat_tensor *sd = remat_optim_state(od, i, (remat_optim_slot)slot);
            cr_assert_eq(sc == NULL, sd == NULL, "%s: state %d of parameter %d", name, slot, i);
            if (!sc) continue;
            snprintf(what, sizeof what, "%s: state %d of parameter %d", name, slot, i);
            expect(sd, sc, a, what);
        }
    cr_assert_eq(remat_optim_state_bytes(oc), remat_optim_state_bytes(od));
    cr_assert_eq(remat_optim_param_steps(od, 2), 3);
    remat_optim_free(oc);
    remat_optim_free(od);
    for (int i = 0; i < NP; i++) {
        remat_release(pc[i]);
        remat_release(pd[i]);
    }
}

static void run_all(remat_device dev, bool bitwise) {
    for (int dt = REMAT_F32; dt <= REMAT_F64; dt++) {
        const bool f32 = dt == REMAT_F32;
        /* the updates alone: on cuda too the cpu's operations in its order */
        const agree upd = bitwise ? (agree){0, 0}
                          : f32   ? (agree){1e-6, 1e-6}
                                  : (agree){1e-14, 1e-13};
        /* with clipping: the global norm is summed in another order on cuda */
        const agree clip = bitwise ? (agree){0, 0}
                           : f32   ? (agree){1e-5, 1e-5}
                                   : (agree){1e-12, 1e-11};
        remat_optim_options o;
        char name[96];
        RT_OK(remat_optim_options_init(&o, REMAT_OPTIM_ADAMW));
        o.weight_decay = 0.1;
        snprintf(name, sizeof name, "AdamW %s", f32 ? "f32" : "f64");
        run(dev, &o, (remat_dtype)dt, upd, name);
        o.clip_norm = 5.0;
        o.accum_steps = 2;
        o.schedule = (remat_lr_schedule){REMAT_LR_WARMUP_COSINE, 1, 4, 1e-4};
        snprintf(name, sizeof name, "AdamW clipped, accumulated, scheduled %s",
                 f32 ? "f32" : "f64");
        run(dev, &o, (remat_dtype)dt, clip, name);
        RT_OK(remat_optim_options_init(&o, REMAT_OPTIM_SGD));
        o.lr = 0.05;
        snprintf(name, sizeof name, "SGD %s", f32 ? "f32" : "f64");
        run(dev, &o, (remat_dtype)dt, upd, name);
        o.momentum = 0.9;
        o.nesterov = true;
        o.weight_decay = 0.01;
        snprintf(name, sizeof name, "SGD nesterov %s", f32 ? "f32" : "f64");
        run(dev, &o, (remat_dtype)dt, upd, name);
        o.nesterov = false;
        o.dampening = 0.25;
        o.clip_norm = 1.0;
        snprintf(name, sizeof name, "SGD momentum, clipped %s", f32 ? "f32" : "f64");
        run(dev, &o, (remat_dtype)dt, clip, name);
    }
}

/* remat_clip_grad_norm, remat_optim_grad_norm and remat_optim_scale_grads on the device. */
static void norms(remat_device dev, bool bitwise) {
    const int64_t shapes[2][2] = {{70000, 1}, {5, 3}};
    remat_tensor *pc[2], *pd[2];
    for (int i = 0; i < 2; i++) {
        pc[i] = rt_leaf(rt_rand(2, shapes[i], REMAT_F32, -1, 1, 200 + (unsigned)i));
        pd[i] = rt_leaf_on(pc[i], dev, true);
        remat_tensor *g = rt_rand(2, shapes[i], REMAT_F32, -3, 3, 300 + (unsigned)i);
        add_grad(pc[i], g);
        add_grad(pd[i], g);
        remat_release(g);
    }
    const double tol = bitwise ? 0 : 1e-12;
    double nc = 0, nd = 0;
    RT_OK(remat_clip_grad_norm(pc, 2, 1.5, &nc));
    RT_OK(remat_clip_grad_norm(pd, 2, 1.5, &nd));
    cr_assert(fabs(nc - nd) <= tol * nc, "clip_grad_norm: total norm %.17g vs %.17g", nd, nc);
    for (int i = 0; i < 2; i++)
        expect(remat_tensor_grad(pd[i]), remat_tensor_grad(pc[i]),
               bitwise ? (agree){0, 0} : (agree){1e-6, 1e-6}, "a clipped gradient");
    remat_optim_options o;
    RT_OK(remat_optim_options_init(&o, REMAT_OPTIM_SGD));
    remat_optimizer *oc = NULL, *od = NULL;
    RT_OK(remat_optim_create(&oc, &o, pc, 2));
    RT_OK(remat_optim_create(&od, &o, pd, 2));
    RT_OK(remat_optim_scale_grads(oc, 0.5));
    RT_OK(remat_optim_scale_grads(od, 0.5));
    RT_OK(remat_optim_grad_norm(oc, &nc));
    RT_OK(remat_optim_grad_norm(od, &nd));
    cr_assert(fabs(nc - nd) <= tol * nc, "grad_norm after scale_grads: %.17g vs %.17g", nd, nc);
    cr_assert(fabs(nc - 0.75) < 1e-6, "clipped to 1.5, then halved: %.17g", nc);
    remat_optim_free(oc);
    remat_optim_free(od);
    for (int i = 0; i < 2; i++) {
        remat_release(pc[i]);
        remat_release(pd[i]);
    }
}

Test(optim_device, fenced_steps_are_the_cpu_bits) {
    const long adamw = rt_fenced_kernel_runs(RM_K_ADAMW), sgd = rt_fenced_kernel_runs(RM_K_SGD),
               sumsq = rt_fenced_kernel_runs(RM_K_SUM_SQUARES);
    run_all(fenced(), true);
    /* through the device's kernels (the fenced memory would have faulted otherwise) */
    cr_assert_gt(rt_fenced_kernel_runs(RM_K_ADAMW), adamw);
    cr_assert_gt(rt_fenced_kernel_runs(RM_K_SGD), sgd);
    cr_assert_gt(rt_fenced_kernel_runs(RM_K_SUM_SQUARES), sumsq);
    cr_assert_eq(remat_live_tensors(), 0);
}

Test(optim_device, fenced_norms_and_scaling_are_the_cpu_bits) {
    norms(fenced(), true);
    cr_assert_eq(remat_live_tensors(), 0);
}

Test(optim_device, cuda_steps_agree_with_cpu) {
    run_all(rt_cuda0(), false);
    cr_assert_eq(remat_live_tensors(), 0);
}

Test(optim_device, cuda_norms_and_scaling_agree_with_cpu) {
    norms(rt_cuda0(), false);
    cr_assert_eq(remat_live_tensors(), 0);
}

/* ---- cuda: the list launches against one kernel per parameter ----------------------------
 * The step's list kernels on cuda (ADAMW_LIST, SGD_LIST: launches of up to 96 tensors,
 * src/backends/cuda/optim.cu) against the same optimizer on cuda with them taken out of the
 * table (one kernel per parameter): bit for bit, with more parameters than a launch takes,
 * of sizes around and past a block's chunk (65536), f32 and f64, two weight-decay groups. */
#define NC 131 /* more than a launch's 96 */

static remat_dtype dtype_of(int i) { return i % 3 == 1 ? REMAT_F64 : REMAT_F32; }

static int64_t cuda_size(int i) {
    static const int64_t first[] = {1, 3, 1000, 4097, 0, 65536, 65537, 70001, 2, 131073};
    return i < 10 ? first[i] : 1 + (i * 37) % 301;
}

/* The cuda list kernels in the table (on) or taken out (off: the per-parameter path). */
static void cuda_lists(bool on) {
    static rm_kernel_fn saved[2][2];
    static bool have;
    const int type = remat_device_type_id("cuda");
    const rm_kernel_id ids[2] = {RM_K_ADAMW_LIST, RM_K_SGD_LIST};
    const remat_dtype dts[2] = {REMAT_F32, REMAT_F64};
    for (int k = 0; k < 2; k++)
        for (int d = 0; d < 2; d++) {
            if (!have) saved[k][d] = rm_kernel_lookup(ids[k], type, dts[d]);
            cr_assert_not_null(saved[k][d], "cuda registers %s for %s", rm_kernel_name(ids[k]),
                               remat_dtype_name(dts[d]));
            RT_OK(rm_kernel_register(ids[k], type, dts[d], on ? saved[k][d] : NULL));
        }
    have = true;
}

static void run_cuda(const remat_optim_options *o, const char *name) {
    const remat_device dev = rt_cuda0();
    remat_tensor *pl[NC], *pk[NC]; /* list kernels, per-parameter kernels */
    for (int i = 0; i < NC; i++) {
        const int64_t n = cuda_size(i);
        remat_tensor *h = rt_rand(1, &n, dtype_of(i), -1, 1, 40 + (unsigned)i);
        pl[i] = rt_leaf_on(h, dev, true);
        pk[i] = rt_leaf_on(h, dev, true);
        remat_release(h);
    }
    remat_optimizer *ol_ = NULL, *ok_ = NULL;
    rt_optim_pair(o, pl, pk, NC, &ol_, &ok_);
    const int micro = o->accum_steps > 1 ? o->accum_steps : 1;
    const bool adamw = o->kind == REMAT_OPTIM_ADAMW;
    const char *one = adamw ? "adamw update" : "sgd update";
    const char *list = adamw ? "adamw update, many tensors" : "sgd update, many tensors";
    for (int s = 0; s < 3; s++)
        for (int j = 0; j < micro; j++) {
            for (int i = 0; i < NC; i++) {
                if (s == 1 && i == 3) continue; /* no gradient: skipped, its state kept */
                const int64_t n = cuda_size(i);
                remat_tensor *g =
                    rt_rand(1, &n, dtype_of(i), -2, 2,
                            700u + 31u * (unsigned)s + 7u * (unsigned)j + (unsigned)i);
                remat_tensor *gl = rt_leaf_on(g, dev, false), *gk = rt_leaf_on(g, dev, false);
                if (j == 0) {
                    RT_OK(remat_set_grad(pl[i], gl));
                    RT_OK(remat_set_grad(pk[i], gk));
                } else { /* a second micro-batch, accumulated as backward would */
                    remat_tensor *a = NULL, *b = NULL;
                    RT_OK(remat_add(&a, remat_tensor_grad(pl[i]), gl));
                    RT_OK(remat_add(&b, remat_tensor_grad(pk[i]), gk));
                    RT_OK(remat_set_grad(pl[i], a));
                    RT_OK(remat_set_grad(pk[i], b));
                    remat_release(a), remat_release(b);
                }
                remat_release(g), remat_release(gl), remat_release(gk);
            }
            remat_timing *tl = NULL, *tk = NULL;
            RT_OK(remat_timing_begin());
            RT_OK(remat_optim_step(ol_, NULL));
            RT_OK(remat_timing_end(&tl));
            cuda_lists(false);
            RT_OK(remat_timing_begin());
            const int rc = remat_optim_step(ok_, NULL);
            cuda_lists(true);
            RT_OK(rc);
            RT_OK(remat_timing_end(&tk));
            if (j + 1 == micro) { /* an update: one list call per dtype, no per-tensor one */
                cr_assert_eq(rt_kernel_calls(tl, list), 2, "%s: list kernel calls", name);
                cr_assert_eq(rt_kernel_calls(tl, one), 0, "%s: per-tensor calls beside the lists",
                             name);
                cr_assert_eq(rt_kernel_calls(tk, list), 0, "%s: lists taken out", name);
                cr_assert_geq(rt_kernel_calls(tk, one), NC - 2, "%s: per-tensor calls", name);
            }
            remat_timing_free(tl), remat_timing_free(tk);
            if (j + 1 < micro) continue;
            char what[128];
            snprintf(what, sizeof what, "%s: update %d", name, s);
            rt_assert_optim_pair_same(ol_, ok_, pl, pk, NC, what);
        }
    remat_optim_free(ol_), remat_optim_free(ok_);
    for (int i = 0; i < NC; i++) remat_release(pl[i]), remat_release(pk[i]);
}

Test(optim_device, cuda_lists_are_the_per_tensor_bits) {
    remat_optim_options o;
    RT_OK(remat_optim_options_init(&o, REMAT_OPTIM_ADAMW));
    o.weight_decay = 0.1;
    run_cuda(&o, "cuda AdamW");
    o.clip_norm = 2.0;
    o.accum_steps = 2;
    o.schedule = (remat_lr_schedule){REMAT_LR_WARMUP_COSINE, 1, 3, 1e-4};
    run_cuda(&o, "cuda AdamW clipped, accumulated, scheduled");
    RT_OK(remat_optim_options_init(&o, REMAT_OPTIM_SGD));
    o.lr = 0.05;
    run_cuda(&o, "cuda SGD");
    o.momentum = 0.9, o.nesterov = true, o.weight_decay = 0.01;
    run_cuda(&o, "cuda SGD nesterov");
    o.nesterov = false, o.dampening = 0.25, o.clip_norm = 1.0;
    run_cuda(&o, "cuda SGD momentum, clipped");
    cr_assert_eq(remat_live_tensors(), 0);
}

/* ---- a device type with no kernels ("bare": host memory the host is told it cannot
 * address, so no cpu rows are adopted) --------------------------------------------------- */
static void *bare_alloc(void *ud, int index, size_t n) {
    (void)ud, (void)index;
    return malloc(n ? n : 1);
}
static void bare_free(void *ud, int index, void *p, size_t n) {
    (void)ud, (void)index, (void)n;
    free(p);
}
static remat_status bare_copy(void *ud, int index, void *dst, const void *src, size_t n,
                              remat_copy_kind kind) {
    (void)ud, (void)index, (void)kind;
    memmove(dst, src, n);
    return REMAT_OK;
}
static int bare_count(void *ud) {
    (void)ud;
    return 1;
}

/* A device without the optimizer's kernels is named when the optimizer is made, and
 * nothing is made. */
Test(optim_device, a_device_without_kernels_is_refused) {
    const remat_device_type_def def = {.name = "bare",
                                       .host_addressable = false,
                                       .alloc = bare_alloc,
                                       .free = bare_free,
                                       .copy = bare_copy,
                                       .device_count = bare_count};
    int type = -1;
    RT_OK(remat_register_device_type(&def, &type));
    remat_tensor *c = rt_rand(1, (int64_t[]){4}, REMAT_F32, -1, 1, 9), *p = NULL;
    RT_OK(remat_to_device(&p, c, (remat_device){type, 0}));
    RT_OK(remat_set_requires_grad(p, true));
    remat_optim_options o;
    RT_OK(remat_optim_options_init(&o, REMAT_OPTIM_ADAMW));
    remat_optimizer *opt = (remat_optimizer *)&o;
    RT_FAILS(remat_optim_create(&opt, &o, &p, 1), REMAT_EUNSUPPORTED,
             "params[0] is on device 'bare', which has no AdamW optimizer kernels for f32");
    cr_assert_null(opt);
    remat_release(p);
    remat_release(c);
}
