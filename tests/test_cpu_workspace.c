/* tests/test_cpu_workspace.c — the cpu kernels' large scratch is memory remat counts
 * (src/backends/cpu/workspace.h): the bf16 GEMM's widened operands on the route through
 * f32 (REMAT_NO_BF16 forces it on any CPU), taken by the GEMM or, for a batch of GEMMs
 * on several threads, by the calling thread for all of them; the bf16 attention
 * fallback's widened per-entry operands; and the budget the op-level planner promises
 * holds with them counted: the allocator's peak covers them, the calling thread's
 * allocation meter (what the planner's profile reads) sees what the counters see, and
 * every byte comes back. */
#include <omp.h>
#include <stdlib.h>
#include <string.h>

#include "backends/cpu/gemm.h"
#include "core/core.h"
#include "remat/autocast.h"
#include "remat/planner.h"
#include "support/models.h"
#include "support/rt.h"

/* Forces the bf16 GEMMs through f32 (read at every GEMM). */
static void widening_route(void) {
    setenv("REMAT_NO_BF16", "1", 1);
    cr_assert(!rm_bgemm_native(), "REMAT_NO_BF16 set, yet the bf16 GEMM is native");
}

/* bf16 tensor of `shape` with values in [-1, 1) from seed. */
static remat_tensor *bf16_rand(int ndim, const int64_t *shape, unsigned seed) {
    remat_tensor *f = rt_rand(ndim, shape, REMAT_F32, -1, 1, seed), *b = NULL;
    RT_OK(remat_to_dtype(&b, f, REMAT_BF16));
    remat_release(f);
    return b;
}

/* One GEMM through f32: the widened A (M x K), B (K x N) and C (M x N) are in the
 * allocator's peak while it runs, and given back after. */
Test(cpu_workspace, bf16_gemm_peak_covers_its_widened_operands) {
    widening_route();
    omp_set_num_threads(2);
    const int64_t M = 256, N = 192, K = 128;
    uint16_t *a = calloc((size_t)(M * K), 2), *b = calloc((size_t)(K * N), 2);
    uint16_t *c = calloc((size_t)(M * N), 2);
    cr_assert(a && b && c);
    const size_t widened = sizeof(float) * (size_t)(M * K + K * N + M * N);
    for (int rep = 0; rep < 2; rep++) { /* the second from the allocator's cache */
        size_t before = rt_device_current_bytes();
        RT_OK(remat_alloc_reset_peak(REMAT_DEVICE_CPU));
        rm_bgemm(false, false, M, N, K, a, K, b, N, 0.0f, c, N);
        remat_alloc_stats s = rt_device_stats();
        cr_assert_geq(s.peak_bytes - before, widened,
                      "run %d: the GEMM raised the allocator's peak by %zu bytes, its widened "
                      "operands are %zu",
                      rep, s.peak_bytes - before, widened);
        cr_assert_eq(s.current_bytes, before, "run %d: %zu bytes not given back", rep,
                     s.current_bytes - before);
    }
    free(a), free(b), free(c);
}

/* A batch of small bf16 GEMMs, which matmul.c runs one per thread at once: the widened
 * operands of both threads are in the peak, and in the calling thread's meter (the
 * planner's measure) exactly as in the allocator's counters. */
Test(cpu_workspace, batched_matmul_scratch_is_in_the_calling_threads_meter) {
    widening_route();
    omp_set_num_threads(2);
    const int64_t B = 4, M = 64, K = 96, N = 80;
    int64_t as[3] = {B, M, K}, bs[3] = {B, K, N};
    remat_tensor *a = bf16_rand(3, as, 1), *b = bf16_rand(3, bs, 2), *y = NULL;
    const size_t out = sizeof(uint16_t) * (size_t)(B * M * N);
    const size_t per = sizeof(float) * (size_t)(M * K + K * N + M * N); /* one GEMM's */
    for (int rep = 0; rep < 2; rep++) {
        rm_meter prev;
        size_t before = rt_device_current_bytes();
        RT_OK(remat_alloc_reset_peak(REMAT_DEVICE_CPU));
        rm_meter_start(REMAT_DEVICE_CPU, &prev);
        RT_OK(remat_matmul(&y, a, b));
        int64_t meter_peak = rm_meter_peak();
        rm_meter_stop(&prev);
        size_t peak = rt_device_stats().peak_bytes - before;
        cr_assert_geq(peak, out + 2 * per,
                      "run %d: peak %zu above the start, the output is %zu and each thread's "
                      "widened operands %zu",
                      rep, peak, out, per);
        cr_assert_eq((size_t)meter_peak, peak,
                     "run %d: this thread's meter saw a peak of %lld bytes, the allocator %zu", rep,
                     (long long)meter_peak, peak);
        remat_release(y);
        cr_assert_eq(rt_device_current_bytes(), before);
    }
    remat_release(a);
    remat_release(b);
}

/* bf16 attention without bf16 GEMMs widens each batch entry's q, k, v into its thread's
 * scratch: counted, in this thread's meter too, and given back. */
Test(cpu_workspace, bf16_attention_fallback_scratch_is_counted) {
    widening_route();
    omp_set_num_threads(2);
    const int64_t B = 2, H = 2, T = 128, D = 64;
    int64_t s[4] = {B, H, T, D};
    remat_tensor *q = bf16_rand(4, s, 3), *k = bf16_rand(4, s, 4), *v = bf16_rand(4, s, 5);
    remat_tensor *y = NULL;
    const size_t widened = sizeof(float) * (size_t)(4 * T * D); /* q, k, v, o of one entry */
    rm_meter prev;
    size_t before = rt_device_current_bytes();
    RT_OK(remat_alloc_reset_peak(REMAT_DEVICE_CPU));
    rm_meter_start(REMAT_DEVICE_CPU, &prev);
    RT_OK(remat_attention(&y, q, k, v, true, 0.125));
    int64_t meter_peak = rm_meter_peak(), meter_now = rm_meter_current();
    rm_meter_stop(&prev);
    size_t peak = rt_device_stats().peak_bytes - before, kept = rt_device_current_bytes() - before;
    cr_assert_geq(peak, kept + widened,
                  "peak %zu above the start, %zu kept (y, lse), a thread's widened entry %zu", peak,
                  kept, widened);
    cr_assert_eq((size_t)meter_peak, peak, "meter %lld, allocator %zu", (long long)meter_peak,
                 peak);
    cr_assert_eq((size_t)meter_now, kept);
    remat_release(y);
    cr_assert_eq(rt_device_current_bytes(), before);
    remat_release(q);
    remat_release(k);
    remat_release(v);
}

/* ---- the op-level planner's budget under bf16 autocast through f32 ------------------------ */
#define WS_N 3
#define WS_DIM 64
#define WS_HEADS 2
#define WS_SEQ 32
#define WS_BATCH 4

typedef struct wchain {
    rt_tblock blk[WS_N];
    remat_stage stages[WS_N];
    remat_tensor *params[WS_N * RT_MAX_PARAMS];
    int n_params;
    remat_tensor *x;
} wchain;

/* One step under plan (NULL: none), .grad cleared first; the allocator's step peak. */
static size_t wstep(wchain *c, const remat_plan *plan) {
    rt_zero_grads(c->n_params, c->params);
    RT_OK(remat_set_grad(c->x, NULL));
    remat_manual_seed(5);
    RT_OK(remat_alloc_reset_peak(REMAT_DEVICE_CPU));
    remat_tensor *y = NULL, *loss = NULL;
    if (plan) RT_OK(remat_plan_run(plan, c->stages, c->x, &y));
    else {
        y = rt_stages_run(c->stages, WS_N, c->x);
    }
    RT_OK(rt_sum_sq_loss(NULL, &y, 1, &loss, 1));
    remat_release(y);
    RT_OK(remat_backward_scalar(loss));
    remat_release(loss);
    return rt_device_stats().peak_bytes;
}

/* Transformer blocks (f32 weights, D 64: every linear's widened operands are counted
 * scratch of 180-230 KB) under bf16 autocast on the route through f32, one or two
 * threads: the whole-step and op profiles, then plans for budgets from the planner's
 * least to store-all, run: measured step peak <= predicted <= budget. Without the
 * widened operands in the profile (or taken where the meter does not see them) the
 * measured peak is above the prediction. */
static void budgets_hold_through_f32(int threads) {
    widening_route();
    omp_set_num_threads(threads);
    remat_autocast_state prev;
    RT_OK(remat_autocast_begin(&prev, REMAT_CPU, REMAT_BF16, true));
    wchain c = {0};
    for (int k = 0; k < WS_N; k++) {
        rt_tblock_init(&c.blk[k], WS_DIM, WS_HEADS, WS_SEQ, 0.0, REMAT_F32, 20u + (unsigned)k);
        c.stages[k] = (remat_stage){rt_tblock_fn, &c.blk[k]};
        c.n_params += rt_tblock_params(&c.blk[k], c.params + c.n_params);
    }
    int64_t xs[3] = {WS_BATCH, WS_SEQ, WS_DIM};
    c.x = rt_rand(3, xs, REMAT_F32, -1, 1, 9);
    RT_OK(remat_set_requires_grad(c.x, true));
    wstep(&c, NULL); /* warm-up: .grad, caches */
    size_t peak_none = wstep(&c, NULL);
    rt_zero_grads(c.n_params, c.params);
    RT_OK(remat_set_grad(c.x, NULL));
    remat_step_profile step = {.fixed_bytes = rt_device_current_bytes()};
    remat_profile *prof = NULL;
    remat_op_profile *ops = NULL;
    rt_profile_chain(&prof, &ops, &step, WS_N, c.stages, c.x, rt_sum_sq_loss);
    size_t lo, top;
    rt_plan_budget_range(prof, ops, &step, NULL, &lo, &top);
    cr_assert_geq(top, peak_none, "%d threads: store-all predicted %zu, none measured %zu", threads,
                  top, peak_none);
    for (int b = 0; b <= 6; b++) {
        size_t budget = lo + (top - lo) * (size_t)b / 6;
        remat_plan *plan = NULL;
        RT_OK(remat_plan_create_ops(&plan, prof, ops, &step, budget, NULL));
        size_t peak = wstep(&c, plan);
        cr_assert(peak <= plan->peak_bytes && plan->peak_bytes <= budget,
                  "%d threads, budget %zu: measured step peak %zu, predicted %zu", threads, budget,
                  peak, plan->peak_bytes);
        remat_plan_free(plan);
    }
    remat_profile_free(prof);
    remat_op_profile_free(ops);
    for (int k = 0; k < WS_N; k++) rt_tblock_free(&c.blk[k]);
    rt_zero_grads(c.n_params, c.params);
    remat_release(c.x);
    remat_autocast_end(&prev);
    cr_assert_eq(remat_live_tensors(), 0);
}

Test(cpu_workspace, bf16_budgets_hold_through_f32_on_one_thread) { budgets_hold_through_f32(1); }
Test(cpu_workspace, bf16_budgets_hold_through_f32_on_two_threads) { budgets_hold_through_f32(2); }
