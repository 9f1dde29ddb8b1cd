/* tests/test_timing.c — kernel timings (remat/timing.h): the rows of a small model's
 * forward and backward (ops, kernels, phases, calls, bytes, FLOPs — never time values),
 * the recompute phase of checkpoints (non-reentrant with early stop, reentrant with its
 * nested backward), nothing recorded while off, and misuse. */
#include <stdio.h>
#include <string.h>

#include "core/timing.h"
#include "support/models.h"
#include "support/rt.h"

RT_ON_TEST_DEVICE

/* x (16, 8) -> linear (32) + bias -> gelu -> linear (4), no bias -> mse against t (the tensors:
 * rt_net2, tests/support/models.h) */
typedef rt_net2 net;

/* the first layer: h = gelu(x W1^T + b1) */
static remat_status layer1(void *ud, remat_tensor *const *in, int n_in, remat_tensor **out,
                           int n_out) {
    (void)n_in;
    (void)n_out;
    const net *n = ud;
    remat_tensor *h = NULL;
    int rc = remat_linear(&h, in[0], n->w1, n->b1);
    if (!rc) rc = remat_gelu(&out[0], h, REMAT_GELU_TANH);
    remat_release(h);
    return rc;
}

/* 0: plain; 1: layer 1 checkpointed (non-reentrant); 2: reentrant */
static void step(net *n, int ck) {
    remat_tensor *g = NULL, *y = NULL, *loss = NULL;
    if (ck) {
        remat_checkpoint_options o = {.use_reentrant = ck == 2 ? REMAT_OPT_TRUE : REMAT_OPT_FALSE};
        RT_OK(remat_checkpoint(layer1, n, 1, &n->x, 1, &g, &o));
    } else {
        RT_OK(layer1(n, &n->x, 1, &g, 1));
    }
    RT_OK(remat_linear(&y, g, n->w2, NULL));
    RT_OK(remat_mse_loss(&loss, y, n->t));
    RT_OK(remat_backward_scalar(loss));
    remat_release(g);
    remat_release(y);
    remat_release(loss);
    /* the next step starts without .grad: no accumulation */
    remat_tensor *leaves[] = {n->x, n->w1, n->b1, n->w2};
    for (int i = 0; i < 4; i++) RT_OK(remat_set_grad(leaves[i], NULL));
}

static remat_timing *record(net *n, int ck, int steps) {
    remat_timing *t = NULL;
    RT_OK(remat_timing_begin());
    cr_assert(remat_timing_active());
    for (int i = 0; i < steps; i++) step(n, ck);
    RT_OK(remat_timing_end(&t));
    cr_assert(!remat_timing_active());
    return t;
}

static const remat_timing_row *find(const remat_timing *t, const char *op, const char *kernel,
                                    remat_phase ph) {
    for (int i = 0; i < remat_timing_count(t); i++) {
        const remat_timing_row *r = remat_timing_row_at(t, i);
        if (!strcmp(r->op, op) && !strcmp(r->kernel, kernel) && r->phase == ph) return r;
    }
    return NULL;
}

static void dump(const remat_timing *t) {
    for (int i = 0; i < remat_timing_count(t); i++) {
        const remat_timing_row *r = remat_timing_row_at(t, i);
        fprintf(stderr, "  %-22s %-22s %-9s %lld calls %.0f bytes %.0f flops\n", r->op, r->kernel,
                remat_phase_name(r->phase), (long long)r->calls, r->bytes, r->flops);
    }
}

/* Every row of t is one of want[] (op, kernel, phase, calls per step) and each is there. */
typedef struct want {
    const char *op, *kernel;
    remat_phase ph;
    int calls;
} want;
static void expect_rows(const remat_timing *t, const want *w, int n, int steps) {
    bool bad = remat_timing_count(t) != n;
    for (int i = 0; i < n && !bad; i++) {
        const remat_timing_row *r = find(t, w[i].op, w[i].kernel, w[i].ph);
        bad = !r || r->calls != (int64_t)w[i].calls * steps;
    }
    if (bad) dump(t);
    cr_assert_eq(remat_timing_count(t), n, "%d rows, want %d", remat_timing_count(t), n);
    for (int i = 0; i < n; i++) {
        const remat_timing_row *r = find(t, w[i].op, w[i].kernel, w[i].ph);
        cr_assert(r, "no row %s / %s / %s", w[i].op, w[i].kernel, remat_phase_name(w[i].ph));
        cr_assert_eq(r->calls, (int64_t)w[i].calls * steps, "%s / %s / %s: %lld calls, want %d",
                     w[i].op, w[i].kernel, remat_phase_name(w[i].ph), (long long)r->calls,
                     w[i].calls * steps);
        cr_assert(r->ms >= 0);
        cr_assert_eq(r->device_type, rt_tensor_device().type);
    }
    for (int i = 1; i < remat_timing_count(t); i++) /* longest first */
        cr_assert(remat_timing_row_at(t, i - 1)->ms >= remat_timing_row_at(t, i)->ms);
}

#define F REMAT_PHASE_FORWARD
#define B REMAT_PHASE_BACKWARD
#define R REMAT_PHASE_RECOMPUTE

/* The rows of the plain step, per step. Backward: the seed's fill (the engine's "backward"),
 * mse's backward, dW2 and dg, gelu's backward, dW1 and dx, db1's column sum. */
static const want k_plain[] = {
    {"remat_linear", "matmul", F, 2},
    {"remat_gelu", "unary", F, 1},
    {"remat_mse_loss", "mse_loss", F, 1},
    {"backward", "elementwise", B, 1},
    {"MseLossBackward", "mse_loss backward", B, 1},
    {"LinearBackward", "matmul", B, 4},
    {"LinearBackward", "column sum", B, 1},
    {"GeluBackward", "unary backward", B, 1},
};
#define N_PLAIN (int)(sizeof k_plain / sizeof k_plain[0])

Test(timing, rows_of_a_small_models_steps) {
    net n = rt_net2_make();
    remat_timing *t = record(&n, 0, 3);
    expect_rows(t, k_plain, N_PLAIN, 3);
    /* bytes: every operand once per call; flops: 2·M·N·K per product */
    const double fl = 4.0; /* f32 */
    const remat_timing_row *r = find(t, "remat_linear", "matmul", F);
    double lin1 = (16 * 8 + 32 * 8 + 32 + 16 * 32) * fl, lin2 = (16 * 32 + 4 * 32 + 16 * 4) * fl;
    cr_assert_eq(r->bytes, 3 * (lin1 + lin2), "%.0f bytes", r->bytes);
    cr_assert_eq(r->flops, 3 * 2.0 * (16 * 32 * 8 + 16 * 4 * 32), "%.0f flops", r->flops);
    r = find(t, "LinearBackward", "matmul", B);
    /* dg = gy W2, dW2 = gyᵀ g, dx = gh W1, dW1 = ghᵀ x */
    cr_assert_eq(r->flops, 3 * 2.0 * (16 * 32 * 4 + 4 * 32 * 16 + 16 * 8 * 32 + 32 * 8 * 16));
    r = find(t, "remat_gelu", "unary", F);
    cr_assert_eq(r->bytes, 3 * 2 * 16 * 32 * fl);
    cr_assert_eq(r->flops, 0);
    /* the totals are the rows' sums, by phase too */
    int64_t calls, cf, cb, cr;
    double ms, bytes, flops, b0 = 0;
    remat_timing_totals(t, -1, &calls, &ms, &bytes, &flops);
    remat_timing_totals(t, F, &cf, NULL, NULL, NULL);
    remat_timing_totals(t, B, &cb, NULL, NULL, NULL);
    remat_timing_totals(t, R, &cr, NULL, NULL, NULL);
    for (int i = 0; i < remat_timing_count(t); i++) b0 += remat_timing_row_at(t, i)->bytes;
    cr_assert_eq(calls, 3 * 12);
    cr_assert_eq(cf, 3 * 4);
    cr_assert_eq(cb, 3 * 8);
    cr_assert_eq(cr, 0);
    cr_assert_eq(bytes, b0);
    cr_assert(ms >= 0 && flops > 0);
    remat_timing_free(t);
    rt_net2_free(&n);
}

/* A checkpointed layer 1 runs its linear again in backward as "recompute"; the
 * non-reentrant checkpoint stops early (gelu's saved input is the last it needs: gelu's
 * kernel never runs), the reentrant one recomputes all of it and backwards through it as
 * "backward". Everything else is the plain step's. */
Test(timing, recomputation_is_its_own_phase) {
    net n = rt_net2_make();
    want w[N_PLAIN + 2];
    memcpy(w, k_plain, sizeof k_plain);
    w[N_PLAIN] = (want){"remat_linear", "matmul", R, 1};
    remat_timing *t = record(&n, 1, 2);
    expect_rows(t, w, N_PLAIN + 1, 2);
    remat_timing_free(t);
    w[N_PLAIN + 1] = (want){"remat_gelu", "unary", R, 1};
    t = record(&n, 2, 2);
    expect_rows(t, w, N_PLAIN + 2, 2);
    remat_timing_free(t);
    cr_assert_eq(remat_current_phase(), F);
    rt_net2_free(&n);
}

Test(timing, nothing_is_recorded_while_off) {
    net n = rt_net2_make();
    step(&n, 1); /* off: nothing kept */
    remat_timing *t = record(&n, 0, 0);
    cr_assert_eq(remat_timing_count(t), 0);
    cr_assert_null(remat_timing_row_at(t, 0));
    remat_timing_free(t);
    /* a second recording starts from nothing */
    t = record(&n, 0, 1);
    expect_rows(t, k_plain, N_PLAIN, 1);
    remat_timing_free(t);
    rt_net2_free(&n);
}

/* A kernel that runs another inside (a device's matmul copying an operand no GEMM can read
 * through rm_kernel_run) is timed once, as the outer call, and the calls after it are timed
 * too: the driver's bracket, as src/ops/driver.c and rm_kernel_run open it. */
Test(timing, a_kernel_inside_a_kernel_counts_once) {
    int64_t sx[] = {4, 8};
    remat_tensor *x = rt_rand(2, sx, REMAT_F32, -1, 1, 6);
    rm_kargs k = {.in = {x}, .out = {x}};
    remat_timing *t = NULL;
    RT_OK(remat_timing_begin());
    rm_timing_span outer, inner, next;
    cr_assert(rm_timing_begin(&outer, RM_K_MATMUL, "remat_matmul", &k));
    cr_assert(!rm_timing_begin(&inner, RM_K_COPY, "copy", &k)); /* inside: not timed */
    rm_timing_end(&outer);
    cr_assert(rm_timing_begin(&next, RM_K_UNARY, "remat_gelu", &k));
    rm_timing_end(&next);
    RT_OK(remat_timing_end(&t));
    const want w[] = {{"remat_matmul", "matmul", F, 1}, {"remat_gelu", "unary", F, 1}};
    expect_rows(t, w, 2, 1);
    remat_timing_free(t);
    remat_release(x);
}

Test(timing, misuse) {
    remat_timing *t = (remat_timing *)&t;
    RT_FAILS(remat_timing_end(&t), REMAT_ESTATE, "no recording");
    cr_assert_null(t);
    RT_OK(remat_timing_begin());
    RT_FAILS(remat_timing_begin(), REMAT_ESTATE, "runs already");
    RT_FAILS(remat_timing_end(NULL), REMAT_EINVAL, "NULL"); /* and it stops */
    cr_assert(!remat_timing_active());
    cr_assert_eq(remat_timing_count(NULL), 0);
    cr_assert_null(remat_timing_row_at(NULL, 0));
    remat_timing_free(NULL);
    cr_assert_str_eq(remat_phase_name(REMAT_PHASE_RECOMPUTE), "recompute");
    cr_assert_str_eq(remat_phase_name((remat_phase)7), "?");
}
