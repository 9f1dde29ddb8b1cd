/*
 * tests/test_optim.c — remat/optim.h: SGD, AdamW, groups, clipping, the
 * warm-up + cosine schedule and gradient accumulation against PyTorch
 * (tests/fixtures/optim, scripts/gen_optim_fixtures.py), over several
 * updates; then what PyTorch cannot check: exact state bytes, slices of
 * flat buffers updating like the whole, thread-count-independent norms,
 * errors that leave everything as it was.
 *
 * Tolerances as tests/test_fixtures.c: f64 atol 1e-10 rtol 1e-9, f32 atol
 * 1e-5 rtol 1e-4.
 */
#include <criterion/criterion.h>
#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "support/fixtures.h"
#include "support/rt.h"

#define OPTIM_FIXTURES REMAT_FIXTURE_DIR "/optim"
#define MAXP 4

static void tol(remat_dtype dt, double *atol, double *rtol) {
    if (dt == REMAT_F64) *atol = 1e-10, *rtol = 1e-9;
    else *atol = 1e-5, *rtol = 1e-4;
}

static void expect_close(const fx_case *c, const remat_tensor *got, const char *name) {
    const fx_tensor *e = fx_get(c, FX_OUTPUT, name);
    cr_assert(e, "%s: no output %s", c->name, name);
    double atol, rtol;
    tol(c->dtype, &atol, &rtol);
    if (e->dtype == REMAT_F64 && c->dtype == REMAT_F32 &&
        (!strcmp(name, "lr") || !strcmp(name, "norm")))
        atol = 1e-6, rtol = 1e-5; /* a norm of f32 gradients */
    char msg[1024];
    int64_t bad = fx_compare(got, e, atol, rtol, msg, sizeof msg);
    cr_assert_eq(bad, 0, "%s: %s: %s", c->name, name, msg);
}

static double param_d(const fx_case *c, const char *name) {
    double v = 0;
    char err[256];
    cr_assert(fx_param_double(c, name, &v, err, sizeof err), "%s", err);
    return v;
}

static void run_case(const char *name) {
    char path[600], err[512];
    snprintf(path, sizeof path, "%s/%s.txt", OPTIM_FIXTURES, name);
    fx_case *c = fx_load_file(path, err, sizeof err);
    cr_assert(c, "%s", err);
    const fx_param *kindp = fx_param_get(c, "kind");
    cr_assert(kindp && kindp->n == 1, "%s: param kind", name);
    const bool adamw = !strcmp(kindp->tok[0], "adamw");

    remat_optim_options o;
    RT_OK(remat_optim_options_init(&o, adamw ? REMAT_OPTIM_ADAMW : REMAT_OPTIM_SGD));
    o.lr = param_d(c, "lr");
    o.clip_norm = param_d(c, "clip");
    int64_t steps = 0, micro = 0;
    cr_assert(fx_param_int(c, "steps", &steps, err, sizeof err), "%s", err);
    cr_assert(fx_param_int(c, "micro", &micro, err, sizeof err), "%s", err);
    o.accum_steps = (int)micro;
    if (adamw) {
        const fx_param *b = fx_param_get(c, "betas");
        cr_assert(b && b->n == 2);
        o.beta1 = strtod(b->tok[0], NULL);
        o.beta2 = strtod(b->tok[1], NULL);
        o.eps = param_d(c, "eps");
    } else {
        int64_t nest = 0;
        o.momentum = param_d(c, "momentum");
        o.dampening = param_d(c, "dampening");
        cr_assert(fx_param_int(c, "nesterov", &nest, err, sizeof err), "%s", err);
        o.nesterov = nest != 0;
    }
    const fx_param *sp = fx_param_get(c, "schedule");
    if (sp) {
        cr_assert(sp->n == 3);
        o.schedule = (remat_lr_schedule){REMAT_LR_WARMUP_COSINE, strtoll(sp->tok[0], NULL, 10),
                                         strtoll(sp->tok[1], NULL, 10), strtod(sp->tok[2], NULL)};
    }
    const fx_param *dp = fx_param_get(c, "decay");
    cr_assert(dp && dp->n >= 1 && dp->n <= MAXP);
    const int np = dp->n;

    remat_tensor *p[MAXP] = {0};
    for (int i = 0; i < np; i++) {
        char key[16];
        snprintf(key, sizeof key, "p%d", i);
        const fx_tensor *t = fx_get(c, FX_INPUT, key);
        cr_assert(t, "%s: no input %s", name, key);
        RT_OK(fx_make_tensor(t, &p[i]));
        RT_OK(remat_set_requires_grad(p[i], true));
    }
    /* one group per parameter: group 0 through create, the rest added */
    o.weight_decay = strtod(dp->tok[0], NULL);
    remat_optimizer *opt = NULL;
    RT_OK(remat_optim_create(&opt, &o, p, 1));
    for (int i = 1; i < np; i++)
        RT_OK(remat_optim_add_group(opt, &p[i], 1, strtod(dp->tok[i], NULL)));

    double lrs[64], norms[64];
    cr_assert(steps <= 64);
    for (int64_t s = 0; s < steps; s++) {
        for (int64_t j = 0; j < micro; j++) {
            remat_scope *sc = NULL;
            RT_OK(remat_scope_begin(&sc));
            remat_tensor *loss = NULL;
            for (int i = 0; i < np; i++) {
                char key[32];
                snprintf(key, sizeof key, "g%lld_%lld_%d", (long long)s, (long long)j, i);
                const fx_tensor *gt = fx_get(c, FX_INPUT, key);
                if (!gt) continue; /* no gradient for p[i] in this update */
                remat_tensor *g = NULL, *prod = NULL, *term = NULL;
                RT_OK(fx_make_tensor(gt, &g));
                RT_OK(remat_mul(&prod, p[i], g));
                RT_OK(remat_sum_all(&term, prod));
                if (loss) RT_OK(remat_add(&loss, loss, term));
                else loss = term;
                (void)g;
            }
            RT_OK(remat_backward_scalar(loss));
            RT_OK(remat_scope_end(sc));
            if (j == micro - 1) lrs[s] = remat_optim_lr(opt);
            bool updated = false;
            RT_OK(remat_optim_step(opt, &updated));
            cr_assert_eq(updated, j == micro - 1, "%s: update %lld micro %lld: updated=%d", name,
                         (long long)s, (long long)j, updated);
        }
        norms[s] = remat_optim_last_grad_norm(opt);
        for (int i = 0; i < np; i++) {
            char key[32];
            snprintf(key, sizeof key, "p%d_%lld", i, (long long)s + 1);
            expect_close(c, p[i], key);
            cr_assert_null(remat_tensor_grad(p[i]), "%s: grads are dropped after an update", name);
        }
    }
    cr_assert_eq(remat_optim_updates(opt), steps);
    for (int i = 0; i < np; i++) {
        char key[32];
        snprintf(key, sizeof key, "exp_avg%d", i);
        remat_tensor *m = remat_optim_state(opt, i, REMAT_OPTIM_EXP_AVG);
        if (fx_get(c, FX_OUTPUT, key)) {
            cr_assert(m, "%s: no state %s", name, key);
            expect_close(c, m, key);
        }
        snprintf(key, sizeof key, "exp_avg_sq%d", i);
        if (fx_get(c, FX_OUTPUT, key))
            expect_close(c, remat_optim_state(opt, i, REMAT_OPTIM_EXP_AVG_SQ), key);
    }
    int64_t n = steps;
    remat_tensor *tl = NULL, *tn = NULL;
    RT_OK(remat_from_data(&tl, 1, &n, REMAT_F64, lrs));
    expect_close(c, tl, "lr");
    if (fx_get(c, FX_OUTPUT, "norm")) {
        RT_OK(remat_from_data(&tn, 1, &n, REMAT_F64, norms));
        expect_close(c, tn, "norm");
    }
    remat_release(tl);
    remat_release(tn);
    remat_optim_free(opt);
    for (int i = 0; i < np; i++) remat_release(p[i]);
    fx_free(c);
}

/* Every case of the index runs; a family's test fails if its index has none. */
static void run_family(const char *prefix) {
    FILE *f = fopen(OPTIM_FIXTURES "/index.txt", "r");
    cr_assert(f, "cannot open %s/index.txt (make fixtures)", OPTIM_FIXTURES);
    char line[256];
    int ran = 0;
    while (fgets(line, sizeof line, f)) {
        if (line[0] == '#' || line[0] == '\n') continue;
        line[strcspn(line, " \r\n")] = '\0';
        if (strncmp(line, prefix, strlen(prefix)) != 0) continue;
        run_case(line);
        ran++;
    }
    fclose(f);
    cr_assert_geq(ran, 2, "family %s: only %d cases (f32 and f64 expected)", prefix, ran);
}

Test(optim_pytorch, adamw) { run_family("adamw_"); }
Test(optim_pytorch, sgd) { run_family("sgd_"); }
Test(optim_pytorch, clip_grad_norm) { run_family("clip_"); }
Test(optim_pytorch, warmup_cosine_schedule) { run_family("schedule_"); }
Test(optim_pytorch, accumulation_with_clipping) { run_family("accum_"); }

/* ---- what PyTorch does not check ---------------------------------------------------- */

static remat_tensor *leaf(int64_t rows, int64_t cols, remat_dtype dt, unsigned seed) {
    int64_t shape[2] = {rows, cols};
    return rt_leaf(rt_rand(cols ? 2 : 1, shape, dt, -1, 1, seed));
}

static void set_grad_rand(remat_tensor *p, unsigned seed) {
    remat_tensor *g = rt_rand(remat_ndim(p), remat_shape(p), remat_tensor_dtype(p), -1, 1, seed);
    RT_OK(remat_set_grad(p, g));
    remat_release(g);
}

Test(optim, state_bytes_are_exact_and_predicted) {
    remat_tensor *p[3] = {leaf(30, 7, REMAT_F32, 1), leaf(7, 0, REMAT_F32, 2),
                          leaf(5, 3, REMAT_F64, 3)};
    const int64_t numels[3] = {210, 7, 15};
    const remat_dtype dts[3] = {REMAT_F32, REMAT_F32, REMAT_F64};
    const size_t dense = 210 * 4 + 7 * 4 + 15 * 8;
    struct {
        remat_optim_kind kind;
        double momentum;
        size_t slots;
    } k[3] = {{REMAT_OPTIM_ADAMW, 0, 2}, {REMAT_OPTIM_SGD, 0.9, 1}, {REMAT_OPTIM_SGD, 0, 0}};
    for (int t = 0; t < 3; t++) {
        remat_optim_options o;
        RT_OK(remat_optim_options_init(&o, k[t].kind));
        o.momentum = k[t].momentum;
        remat_alloc_stats before, after;
        RT_OK(remat_alloc_stats_get(REMAT_DEVICE_CPU, &before));
        remat_optimizer *opt = NULL;
        RT_OK(remat_optim_create(&opt, &o, p, 3));
        RT_OK(remat_alloc_stats_get(REMAT_DEVICE_CPU, &after));
        cr_assert_eq(remat_optim_state_bytes(opt), k[t].slots * dense);
        cr_assert_eq(remat_optim_state_bytes_for(&o, numels, dts, 3), k[t].slots * dense);
        cr_assert_eq(after.current_bytes - before.current_bytes, k[t].slots * dense,
                     "allocator grew by %zu, state is %zu",
                     (size_t)(after.current_bytes - before.current_bytes), k[t].slots * dense);
        remat_optim_free(opt);
        RT_OK(remat_alloc_stats_get(REMAT_DEVICE_CPU, &after));
        cr_assert_eq(after.current_bytes, before.current_bytes);
    }
    for (int i = 0; i < 3; i++) remat_release(p[i]);
}

/* A ZeRO-1 shard updates a slice: any split gives the bits of the whole. */
Test(optim, flat_updates_split_anywhere_give_the_same_bits) {
    const int64_t n = 200003; /* above the OpenMP threshold, odd */
    float *buf[2][4];
    for (int c = 0; c < 2; c++)
        for (int b = 0; b < 4; b++) cr_assert_not_null(buf[c][b] = malloc(sizeof(float) * n));
    uint64_t st = 7;
    for (int64_t i = 0; i < n; i++)
        for (int b = 0; b < 4; b++) {
            float v = (float)((fx_splitmix64(&st) >> 11) * 0x1.0p-53) - 0.5f;
            buf[0][b][i] = buf[1][b][i] = b == 3 ? v * v : v; /* v (exp_avg_sq) >= 0 */
        }
    remat_adamw_hparams h = {1e-3, 0.9, 0.95, 1e-8, 0.1, 1};
    for (h.step = 1; h.step <= 3; h.step++) {
        RT_OK(remat_adamw_update_f32(buf[0][0], buf[0][1], buf[0][2], buf[0][3], n, &h));
        const int64_t cut[3] = {0, 12345, n};
        for (int k = 0; k < 2; k++) {
            int64_t a = cut[k], len = cut[k + 1] - a;
            RT_OK(remat_adamw_update_f32(buf[1][0] + a, buf[1][1] + a, buf[1][2] + a, buf[1][3] + a,
                                         len, &h));
        }
    }
    remat_sgd_hparams sh = {0.1, 0.9, 0, 0.01, true, true};
    for (int s = 0; s < 2; s++, sh.first = false) {
        RT_OK(remat_sgd_update_f32(buf[0][0], buf[0][1], buf[0][2], n, &sh));
        RT_OK(remat_sgd_update_f32(buf[1][0], buf[1][1], buf[1][2], 777, &sh));
        RT_OK(
            remat_sgd_update_f32(buf[1][0] + 777, buf[1][1] + 777, buf[1][2] + 777, n - 777, &sh));
    }
    for (int b = 0; b < 4; b++)
        cr_assert(!memcmp(buf[0][b], buf[1][b], sizeof(float) * (size_t)n), "buffer %d differs", b);
    for (int c = 0; c < 2; c++)
        for (int b = 0; b < 4; b++) free(buf[c][b]);
}

Test(optim, flat_update_errors) {
    float x = 1;
    remat_adamw_hparams h = {1e-3, 0.9, 0.999, 1e-8, 0, 0};
    RT_FAILS(remat_adamw_update_f32(&x, &x, &x, &x, 1, &h), REMAT_EINVAL, "step is 0");
    h.step = 1;
    RT_FAILS(remat_adamw_update_f32(&x, NULL, &x, &x, 1, &h), REMAT_EINVAL, "NULL");
    RT_FAILS(remat_adamw_update_f32(&x, &x, &x, &x, -1, &h), REMAT_EINVAL, "n is -1");
    RT_OK(remat_adamw_update_f32(NULL, NULL, NULL, NULL, 0, &h));
    remat_sgd_hparams s = {0.1, 0.9, 0, 0, false, true};
    RT_FAILS(remat_sgd_update_f32(&x, &x, NULL, 1, &s), REMAT_EINVAL, "momentum buffer");
}

Test(optim, global_norm_is_the_same_for_any_thread_count) {
    const int64_t n = 1000003;
    float *x = malloc(sizeof(float) * n);
    cr_assert_not_null(x);
    uint64_t st = 3;
    for (int64_t i = 0; i < n; i++) x[i] = (float)((fx_splitmix64(&st) >> 11) * 0x1.0p-53);
    int prev = omp_get_max_threads();
    omp_set_num_threads(1);
    double a = remat_sum_squares_f32(x, n);
    omp_set_num_threads(2);
    double b = remat_sum_squares_f32(x, n);
    omp_set_num_threads(prev);
    cr_assert(memcmp(&a, &b, sizeof a) == 0, "1 thread %.17g, 2 threads %.17g", a, b);
    double serial = 0;
    for (int64_t i = 0; i < n; i++) serial += (double)x[i] * x[i];
    cr_assert(fabs(a - serial) <= 1e-9 * serial);
    free(x);
}

Test(optim, clip_grad_norm_scales_to_max_norm) {
    remat_tensor *p[2] = {leaf(4, 5, REMAT_F64, 11), leaf(3, 0, REMAT_F64, 12)};
    set_grad_rand(p[0], 13);
    set_grad_rand(p[1], 14);
    double want = sqrt(remat_sum_squares_f64(remat_data(remat_tensor_grad(p[0])), 20) +
                       remat_sum_squares_f64(remat_data(remat_tensor_grad(p[1])), 3));
    double norm = 0, after = 0;
    RT_OK(remat_clip_grad_norm(p, 2, 0.25, &norm));
    cr_assert(fabs(norm - want) < 1e-12, "norm %.17g, want %.17g", norm, want);
    RT_OK(remat_clip_grad_norm(p, 2, 1e9, &after)); /* no change above the norm */
    cr_assert(fabs(after - 0.25 * want / (want + 1e-6)) < 1e-12, "after clipping %.17g", after);
    for (int i = 0; i < 2; i++) remat_release(p[i]);
}

Test(optim, bad_input_is_refused_and_leaves_everything_intact) {
    remat_tensor *p = leaf(3, 2, REMAT_F32, 21), *q = leaf(2, 0, REMAT_F32, 22);
    remat_tensor *two[2] = {p, p};
    remat_optim_options o;
    remat_optimizer *opt = (remat_optimizer *)&o; /* must become NULL on failure */
    RT_OK(remat_optim_options_init(&o, REMAT_OPTIM_ADAMW));
    RT_FAILS(remat_optim_create(&opt, &o, two, 2), REMAT_EINVAL, "params[1] repeats params[0]");
    cr_assert_null(opt);
    o.beta1 = 1.0;
    RT_FAILS(remat_optim_create(&opt, &o, &p, 1), REMAT_EINVAL, "betas");
    RT_OK(remat_optim_options_init(&o, REMAT_OPTIM_SGD));
    o.nesterov = true;
    RT_FAILS(remat_optim_create(&opt, &o, &p, 1), REMAT_EINVAL, "nesterov");
    o.nesterov = false;
    o.schedule = (remat_lr_schedule){REMAT_LR_WARMUP_COSINE, 10, 10, 0};
    RT_FAILS(remat_optim_create(&opt, &o, &p, 1), REMAT_EINVAL, "warm-up 10 and total 10");
    o.schedule.kind = REMAT_LR_CONSTANT;
    remat_tensor *i64 = NULL, *nonleaf = NULL;
    int64_t n = 3;
    RT_OK(remat_zeros(&i64, 1, &n, REMAT_I64, REMAT_DEVICE_CPU));
    RT_FAILS(remat_optim_create(&opt, &o, &i64, 1), REMAT_EDTYPE, "i64");
    RT_OK(remat_mul_scalar(&nonleaf, p, 2.0));
    RT_FAILS(remat_optim_create(&opt, &o, &nonleaf, 1), REMAT_EINVAL, "not a leaf");
    o.momentum = 0.9;
    RT_OK(remat_optim_create(&opt, &o, &p, 1));
    RT_FAILS(remat_optim_add_group(opt, &p, 1, 0), REMAT_EINVAL, "already added");
    cr_assert_eq(remat_optim_n_params(opt), 1);
    RT_FAILS(remat_optim_add_group(opt, &q, 1, -1), REMAT_EINVAL, "weight_decay is -1");
    cr_assert_eq(remat_optim_n_params(opt), 1);
    remat_optim_free(opt);
    remat_optim_free(NULL);
    remat_release(i64);
    remat_release(nonleaf);
    remat_release(p);
    remat_release(q);
}

/* A strided gradient (a transposed view) updates like a dense one. */
Test(optim, strided_gradients_update_like_dense_ones) {
    remat_tensor *a = leaf(3, 2, REMAT_F32, 51), *b = leaf(3, 2, REMAT_F32, 51);
    int64_t shape[2] = {2, 3};
    remat_tensor *gt = rt_rand(2, shape, REMAT_F32, -1, 1, 52), *g = NULL, *gd = NULL;
    RT_OK(remat_transpose(&g, gt, 0, 1));
    RT_OK(remat_contiguous(&gd, g));
    cr_assert(!remat_is_contiguous(g));
    RT_OK(remat_set_grad(a, g));
    RT_OK(remat_set_grad(b, gd));
    remat_optim_options o;
    RT_OK(remat_optim_options_init(&o, REMAT_OPTIM_ADAMW));
    o.clip_norm = 0.1;
    remat_optimizer *oa = NULL, *ob = NULL;
    RT_OK(remat_optim_create(&oa, &o, &a, 1));
    RT_OK(remat_optim_create(&ob, &o, &b, 1));
    RT_OK(remat_optim_step(oa, NULL));
    RT_OK(remat_optim_step(ob, NULL));
    cr_assert(rt_bitwise_equal(a, b));
    remat_optim_free(oa);
    remat_optim_free(ob);
    remat_release(g);
    remat_release(gd);
    remat_release(gt);
    remat_release(a);
    remat_release(b);
}

/* The mean over micro-batches and the clip are one factor the update's kernel reads the
 * gradient with: the bits of scaling the gradients first (remat_optim_scale_grads) and
 * updating them unclipped, over three updates, for AdamW and SGD (momentum, nesterov,
 * weight decay), f32 and f64. */
Test(optim, clip_and_accumulation_give_the_bits_of_scaled_gradients) {
    for (int kind = 0; kind < 2; kind++)
        for (int d = 0; d < 2; d++) {
            const remat_dtype dt = d ? REMAT_F64 : REMAT_F32;
            remat_tensor *a[2] = {leaf(70, 1000, dt, 61), leaf(33, 0, dt, 62)};
            remat_tensor *b[2] = {leaf(70, 1000, dt, 61), leaf(33, 0, dt, 62)};
            remat_optim_options o;
            RT_OK(remat_optim_options_init(&o, kind ? REMAT_OPTIM_SGD : REMAT_OPTIM_ADAMW));
            if (kind) o.momentum = 0.9, o.nesterov = true, o.weight_decay = 0.01;
            remat_optim_options oc = o;
            oc.clip_norm = 3.0;
            oc.accum_steps = 2;
            remat_optimizer *oa = NULL, *ob = NULL;
            RT_OK(remat_optim_create(&oa, &oc, a, 2));
            RT_OK(remat_optim_create(&ob, &o, b, 2));
            for (int step = 0; step < 3; step++) {
                for (int i = 0; i < 2; i++) { /* two micro-batches' gradients, summed */
                    remat_tensor *g0 = rt_rand(remat_ndim(a[i]), remat_shape(a[i]), dt, -1, 1,
                                               (unsigned)(100 + 10 * step + i)),
                                 *g1 = rt_rand(remat_ndim(a[i]), remat_shape(a[i]), dt, -1, 1,
                                               (unsigned)(200 + 10 * step + i)),
                                 *gs = NULL;
                    RT_OK(remat_add(&gs, g0, g1));
                    RT_OK(remat_set_grad(b[i], gs));
                    RT_OK(remat_set_grad(a[i], g0));
                    remat_release(g0), remat_release(gs);
                    g0 = remat_tensor_grad(a[i]); /* accumulate as backward would: g0 + g1 */
                    RT_OK(remat_add(&gs, g0, g1));
                    RT_OK(remat_set_grad(a[i], gs));
                    remat_release(g1), remat_release(gs);
                }
                bool up = true;
                RT_OK(remat_optim_step(oa, &up)); /* the first micro-batch: counted */
                cr_assert(!up);
                RT_OK(remat_optim_step(oa, &up));
                cr_assert(up);
                double norm = 0;
                RT_OK(remat_optim_grad_norm(ob, &norm));
                const double mean = norm * 0.5;
                RT_OK(remat_optim_scale_grads(ob, 0.5 * remat_clip_factor(mean, 3.0)));
                RT_OK(remat_optim_step(ob, NULL));
                cr_assert(fabs(remat_optim_last_grad_norm(oa) - mean) <= 1e-12 * mean);
                for (int i = 0; i < 2; i++)
                    cr_assert(rt_bitwise_equal(a[i], b[i]), "%s %s step %d: parameter %d differs",
                              kind ? "sgd" : "adamw", remat_dtype_name(dt), step, i);
            }
            remat_optim_free(oa), remat_optim_free(ob);
            for (int i = 0; i < 2; i++) remat_release(a[i]), remat_release(b[i]);
        }
    cr_assert_eq(remat_live_tensors(), 0);
}

/* An update is an in-place write: a graph that saved the parameter is stale
 * afterwards, as in PyTorch. */
Test(optim, an_update_bumps_the_parameter_version) {
    remat_tensor *p = leaf(2, 3, REMAT_F32, 31), *y = NULL, *l = NULL;
    remat_optim_options o;
    RT_OK(remat_optim_options_init(&o, REMAT_OPTIM_SGD));
    remat_optimizer *opt = NULL;
    RT_OK(remat_optim_create(&opt, &o, &p, 1));
    RT_OK(remat_mul(&y, p, p)); /* saves p */
    RT_OK(remat_sum_all(&l, y));
    set_grad_rand(p, 32);
    RT_OK(remat_optim_step(opt, NULL));
    RT_FAILS(remat_backward_scalar(l), REMAT_EVERSION, NULL);
    remat_release(l);
    remat_release(y);
    remat_optim_free(opt);
    remat_release(p);
}

/* Parameters without a gradient keep their state and step count (PyTorch's
 * per-parameter state['step']); set_updates restores the counters. */
Test(optim, steps_are_counted_per_parameter) {
    remat_tensor *p[2] = {leaf(2, 2, REMAT_F64, 41), leaf(2, 0, REMAT_F64, 42)};
    remat_optim_options o;
    RT_OK(remat_optim_options_init(&o, REMAT_OPTIM_ADAMW));
    remat_optimizer *opt = NULL;
    RT_OK(remat_optim_create(&opt, &o, p, 2));
    set_grad_rand(p[0], 43);
    RT_OK(remat_optim_step(opt, NULL));
    cr_assert_eq(remat_optim_param_steps(opt, 0), 1);
    cr_assert_eq(remat_optim_param_steps(opt, 1), 0);
    double *v = remat_data(remat_optim_state(opt, 1, REMAT_OPTIM_EXP_AVG_SQ));
    cr_assert(v[0] == 0 && v[1] == 0);
    RT_OK(remat_optim_set_updates(opt, 5));
    cr_assert_eq(remat_optim_param_steps(opt, 1), 5);
    cr_assert_eq(remat_optim_updates(opt), 5);
    remat_optim_free(opt);
    remat_release(p[0]);
    remat_release(p[1]);
}

Test(optim, lr_schedule_closed_form) {
    remat_lr_schedule s = {REMAT_LR_WARMUP_COSINE, 4, 12, 0.1};
    cr_assert_float_eq(remat_lr_at(&s, 1.0, 0), 0.25, 1e-15);
    cr_assert_float_eq(remat_lr_at(&s, 1.0, 3), 1.0, 1e-15);
    cr_assert_float_eq(remat_lr_at(&s, 1.0, 4), 1.0, 1e-15);
    cr_assert_float_eq(remat_lr_at(&s, 1.0, 8), 0.55, 1e-15);
    cr_assert_float_eq(remat_lr_at(&s, 1.0, 12), 0.1, 1e-15);
    cr_assert_float_eq(remat_lr_at(&s, 1.0, 1000), 0.1, 1e-15); /* held, not periodic */
    cr_assert_float_eq(remat_lr_at(NULL, 0.5, 7), 0.5, 0);
}
