/* tests/test_threads.c — issue 14 item 6: remat_profile_stages measures
 * the allocations of its own thread only, so another thread allocating at
 * the same time changes neither its byte figures nor the process-wide
 * counters that thread may be reading (the profile no longer resets the
 * process-wide peak). */
#include <pthread.h>
#include <stdatomic.h>
#include <string.h>

#include "support/models.h"
#include "support/rt.h"

static atomic_bool g_stop;

/* Allocates and frees 4 MiB tensors until told to stop. */
static void *churn(void *arg) {
    (void)arg;
    int64_t sh[] = {1 << 20};
    while (!atomic_load(&g_stop)) {
        remat_tensor *t = NULL;
        if (remat_empty(&t, 1, sh, REMAT_F32, REMAT_DEVICE_CPU) == REMAT_OK) {
            for (volatile int i = 0; i < 200; i++) {}
            remat_release(t);
        }
    }
    return NULL;
}

static remat_profile *profile_blocks(rt_mlp_block *b, int n, remat_tensor *x) {
    remat_stage st[4];
    for (int i = 0; i < n; i++) st[i] = (remat_stage){rt_mlp_block_fn, &b[i]};
    remat_profile_options po = {.runs = 3};
    remat_profile *p = NULL;
    RT_OK(remat_profile_stages(&p, n, st, x, &po));
    return p;
}

Test(threads, profile_ignores_other_threads_allocations) {
    enum { N = 3 };
    rt_mlp_block b[N];
    for (int i = 0; i < N; i++) rt_mlp_block_init(&b[i], 64, 256, 0.0, REMAT_F32, 10 + (unsigned)i);
    int64_t sh[] = {32, 64};
    remat_tensor *x = rt_rand(2, sh, REMAT_F32, -1, 1, 3);
    remat_profile *alone = profile_blocks(b, N, x);
    atomic_store(&g_stop, false);
    pthread_t th;
    cr_assert_eq(pthread_create(&th, NULL, churn, NULL), 0);
    remat_profile *busy[3];
    for (int k = 0; k < 3; k++) busy[k] = profile_blocks(b, N, x);
    atomic_store(&g_stop, true);
    pthread_join(th, NULL);
    for (int k = 0; k < 3; k++) {
        for (int i = 0; i < N; i++) {
            const remat_stage_profile *a = &alone->stages[i], *c = &busy[k]->stages[i];
            cr_assert_eq(c->saved_bytes, a->saved_bytes, "run %d stage %d saved", k, i);
            cr_assert_eq(c->fwd_peak, a->fwd_peak, "run %d stage %d fwd_peak %zu vs %zu alone", k,
                         i, c->fwd_peak, a->fwd_peak);
            cr_assert_eq(c->fwd_peak_nosave, a->fwd_peak_nosave, "run %d stage %d", k, i);
            cr_assert_eq(c->bwd_peak, a->bwd_peak, "run %d stage %d bwd_peak %zu vs %zu alone", k,
                         i, c->bwd_peak, a->bwd_peak);
        }
        remat_profile_free(busy[k]);
    }
    remat_profile_free(alone);
    remat_release(x);
    for (int i = 0; i < N; i++) rt_mlp_block_free(&b[i]);
}

/* The process-wide peak belongs to the user: profiling does not reset it. */
Test(threads, profile_leaves_the_process_peak_alone) {
    rt_mlp_block b[1];
    rt_mlp_block_init(&b[0], 16, 32, 0.0, REMAT_F32, 1);
    int64_t big[] = {1 << 22}, sh[] = {4, 16};
    remat_tensor *t = NULL, *x = rt_rand(2, sh, REMAT_F32, -1, 1, 2);
    RT_OK(remat_empty(&t, 1, big, REMAT_F32, REMAT_DEVICE_CPU));
    remat_release(t);
    remat_alloc_stats s0, s1;
    RT_OK(remat_alloc_stats_get(REMAT_DEVICE_CPU, &s0));
    cr_assert_geq(s0.peak_bytes, (size_t)(16 << 20));
    remat_profile_free(profile_blocks(b, 1, x));
    RT_OK(remat_alloc_stats_get(REMAT_DEVICE_CPU, &s1));
    cr_assert_geq(s1.peak_bytes, s0.peak_bytes, "the profile reset the process peak");
    remat_release(x);
    rt_mlp_block_free(&b[0]);
}
