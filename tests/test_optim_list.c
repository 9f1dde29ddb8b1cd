/*
 * tests/test_optim_list.c — the cpu optimizer step over all parameters at once (the list
 * kernels ADAMW_LIST / SGD_LIST and the sums of squares of all host gradients in one
 * region, src/optim/optim.c) gives the bits of the per-parameter kernels.
 *
 * The reference is the same optimizer on "fenced" (tests/support/fenced.h): the cpu's
 * per-tensor kernels, one call per parameter (the fenced device has no list kernels), a
 * SCALE pass over the gradients where the step scales them, one SUM_SQUARES
 * kernel per gradient for the global norm. Parameters of many sizes (empty, single
 * elements, blocks' edges, larger than a thread's share), f32 and f64 in one optimizer,
 * two weight-decay groups, a parameter without a gradient in one update, AdamW and SGD
 * variants with clipping, accumulation and a schedule, on 1, 2 and 3 threads. (Cuda's list
 * kernels against its per-parameter ones: tests/test_optim_device.c.)
 */
#include <criterion/criterion.h>
#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <string.h>

#include "support/fenced.h"
#include "support/rt.h"

#define NP 10

static const int64_t k_sizes[NP] = {1, 383, 0, 16384, 16385, 7, 70001, 200003, 2, 65536};

static remat_dtype dtype_of(int i) { return i % 3 == 1 ? REMAT_F64 : REMAT_F32; }

static void run(const remat_optim_options *o, int threads, const char *name) {
    const remat_device dev = {rt_fenced_type(), 0};
    cr_assert(dev.type > 0, "fenced device: %s", remat_last_error());
    remat_tensor *pc[NP], *pd[NP];
    for (int i = 0; i < NP; i++) {
        pc[i] = rt_leaf(rt_rand(1, &k_sizes[i], dtype_of(i), -1, 1, 10 + (unsigned)i));
        pd[i] = rt_leaf_on(pc[i], dev, true);
    }
    /* groups: decay on the even ones, none on the odd ones */
    remat_optimizer *oc = NULL, *od = NULL;
    rt_optim_pair(o, pc, pd, NP, &oc, &od);
    const int micro = o->accum_steps > 1 ? o->accum_steps : 1;
    const bool adamw = o->kind == REMAT_OPTIM_ADAMW;
    const char *one = adamw ? "adamw update" : "sgd update";
    const char *list = adamw ? "adamw update, many tensors" : "sgd update, many tensors";
    const int saved = omp_get_max_threads();
    omp_set_num_threads(threads);
    for (int s = 0; s < 3; s++) {
        for (int j = 0; j < micro; j++) {
            for (int i = 0; i < NP; i++) {
                if (s == 1 && i == 3) continue; /* no gradient: skipped, its state kept */
                remat_tensor *g =
                    rt_rand(1, &k_sizes[i], dtype_of(i), -2, 2,
                            500u + 31u * (unsigned)s + 7u * (unsigned)j + (unsigned)i);
                remat_tensor *gd = rt_leaf_on(g, dev, false);
                RT_OK(remat_set_grad(pc[i], g));
                RT_OK(remat_set_grad(pd[i], gd));
                if (j > 0) { /* accumulate a second micro-batch as backward would */
                    remat_release(g), remat_release(gd);
                    g = rt_rand(1, &k_sizes[i], dtype_of(i), -2, 2, 900u + (unsigned)i);
                    gd = rt_leaf_on(g, dev, false);
                    remat_tensor *a = NULL, *b = NULL;
                    RT_OK(remat_add(&a, remat_tensor_grad(pc[i]), g));
                    RT_OK(remat_add(&b, remat_tensor_grad(pd[i]), gd));
                    RT_OK(remat_set_grad(pc[i], a));
                    RT_OK(remat_set_grad(pd[i], b));
                    remat_release(a), remat_release(b);
                }
                remat_release(g), remat_release(gd);
            }
            remat_timing *t = NULL;
            RT_OK(remat_timing_begin());
            RT_OK(remat_optim_step(oc, NULL));
            RT_OK(remat_optim_step(od, NULL));
            RT_OK(remat_timing_end(&t));
            if (j + 1 == micro) { /* an update: one list kernel per dtype on cpu */
                cr_assert_eq(rt_kernel_calls(t, list), 2, "%s: list kernel calls", name);
                cr_assert_geq(rt_kernel_calls(t, one), NP - 2, "%s: per-tensor calls (fenced's)",
                              name);
            }
            remat_timing_free(t);
        }
        char what[128];
        snprintf(what, sizeof what, "%s (%d threads): update %d", name, threads, s);
        rt_assert_optim_pair_same(oc, od, pc, pd, NP, what);
    }
    omp_set_num_threads(saved);
    remat_optim_free(oc), remat_optim_free(od);
    for (int i = 0; i < NP; i++) remat_release(pc[i]), remat_release(pd[i]);
}

static void each_thread_count(const remat_optim_options *o, const char *name) {
    for (int t = 1; t <= 3; t++) run(o, t, name);
}

Test(optim_list, adamw_is_the_per_tensor_bits) {
    remat_optim_options o;
    RT_OK(remat_optim_options_init(&o, REMAT_OPTIM_ADAMW));
    o.weight_decay = 0.1;
    each_thread_count(&o, "AdamW");
    o.clip_norm = 2.0;
    o.accum_steps = 2;
    o.schedule = (remat_lr_schedule){REMAT_LR_WARMUP_COSINE, 1, 3, 1e-4};
    each_thread_count(&o, "AdamW clipped, accumulated, scheduled");
    cr_assert_eq(remat_live_tensors(), 0);
}

Test(optim_list, sgd_is_the_per_tensor_bits) {
    remat_optim_options o;
    RT_OK(remat_optim_options_init(&o, REMAT_OPTIM_SGD));
    o.lr = 0.05;
    each_thread_count(&o, "SGD");
    o.momentum = 0.9, o.nesterov = true, o.weight_decay = 0.01;
    each_thread_count(&o, "SGD nesterov");
    o.nesterov = false, o.dampening = 0.25, o.clip_norm = 1.0;
    each_thread_count(&o, "SGD momentum, clipped");
    cr_assert_eq(remat_live_tensors(), 0);
}

/* The flat functions split a buffer into blocks over the threads: any thread count gives
 * the bits of one thread (sizes around the block and the parallel threshold). */
Test(optim_list, flat_updates_are_the_same_bits_on_any_thread_count) {
    const int64_t sizes[] = {16383, 16384, 16385, 65537, 100001};
    for (int k = 0; k < 5; k++) {
        const int64_t n = sizes[k];
        float *p[3], *m[3], *v[3], *g = malloc(sizeof *g * (size_t)n);
        cr_assert_not_null(g);
        for (int64_t i = 0; i < n; i++) g[i] = (float)sin(0.37 * (double)i) * 3.0f;
        for (int t = 0; t < 3; t++) {
            p[t] = malloc(sizeof(float) * (size_t)n), m[t] = calloc((size_t)n, sizeof(float));
            v[t] = calloc((size_t)n, sizeof(float));
            cr_assert(p[t] && m[t] && v[t]);
            for (int64_t i = 0; i < n; i++) p[t][i] = (float)cos(0.11 * (double)i);
            omp_set_num_threads(t + 1);
            for (int64_t step = 1; step <= 2; step++) {
                const remat_adamw_hparams h = {1e-3, 0.9, 0.95, 1e-8, 0.1, step};
                RT_OK(remat_adamw_update_f32(p[t], g, m[t], v[t], n, &h));
                const remat_sgd_hparams sh = {0.01, 0.9, 0, 0.01, true, step == 1};
                RT_OK(remat_sgd_update_f32(p[t], g, m[t], n, &sh));
            }
        }
        omp_set_num_threads(1);
        for (int t = 1; t < 3; t++) {
            cr_assert(!memcmp(p[0], p[t], sizeof(float) * (size_t)n), "n %lld, %d threads",
                      (long long)n, t + 1);
            cr_assert(!memcmp(m[0], m[t], sizeof(float) * (size_t)n));
            cr_assert(!memcmp(v[0], v[t], sizeof(float) * (size_t)n));
        }
        for (int t = 0; t < 3; t++) free(p[t]), free(m[t]), free(v[t]);
        free(g);
    }
}
