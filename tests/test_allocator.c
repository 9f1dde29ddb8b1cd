/* tests/test_allocator.c — exact allocator accounting, user allocator hook,
 * injected allocation failures. */
#include <stdlib.h>
#include <string.h>

#include "support/rt.h"

static remat_alloc_stats cpu_stats(void) {
    remat_alloc_stats s;
    RT_OK(remat_alloc_stats_get(REMAT_DEVICE_CPU, &s));
    return s;
}

Test(allocator, exact_counts_after_known_sequence) {
    remat_alloc_stats s0 = cpu_stats();
    int64_t sa[] = {10}, sb[] = {3, 4};
    remat_tensor *a, *b;
    RT_OK(remat_empty(&a, 1, sa, REMAT_F32, REMAT_DEVICE_CPU)); /* 40 bytes */
    RT_OK(remat_zeros(&b, 2, sb, REMAT_F64, REMAT_DEVICE_CPU)); /* 96 bytes */
    remat_alloc_stats s1 = cpu_stats();
    cr_assert_eq(s1.current_bytes - s0.current_bytes, 136);
    cr_assert_eq(s1.n_allocs - s0.n_allocs, 2);
    cr_assert_eq(s1.n_live - s0.n_live, 2);
    remat_release(a);
    remat_alloc_stats s2 = cpu_stats();
    cr_assert_eq(s2.current_bytes - s0.current_bytes, 96);
    cr_assert_geq(s2.peak_bytes, s0.current_bytes + 136);
    RT_OK(remat_alloc_reset_peak(REMAT_DEVICE_CPU));
    cr_assert_eq(cpu_stats().peak_bytes, s2.current_bytes);
    /* a view allocates nothing */
    remat_tensor *v;
    RT_OK(remat_detach(&v, b));
    cr_assert_eq(cpu_stats().current_bytes, s2.current_bytes);
    remat_release(v);
    remat_release(b);
    cr_assert_eq(cpu_stats().current_bytes, s0.current_bytes);
    cr_assert_eq(remat_cpu_current_bytes(), s0.current_bytes);
}

Test(allocator, peak_tracks_temporaries) {
    RT_OK(remat_alloc_reset_peak(REMAT_DEVICE_CPU));
    size_t base = remat_cpu_current_bytes();
    int64_t sh[] = {256};
    remat_tensor *x, *y;
    RT_OK(remat_full(&x, 1, sh, 2.0, REMAT_F32, REMAT_DEVICE_CPU));
    RT_OK(remat_exp(&y, x)); /* 1 KiB each */
    remat_release(y);
    remat_release(x);
    cr_assert_eq(remat_cpu_current_bytes(), base);
    cr_assert_eq(remat_cpu_peak_bytes(), base + 2048);
}

/* ---- user allocator hook with failure injection ---------------------------------- */
static int g_allocs_left = -1; /* -1: never fail */
static long g_user_allocs, g_user_frees;
static void *fail_alloc(void *ud, size_t n) {
    (void)ud;
    if (g_allocs_left == 0) return NULL;
    if (g_allocs_left > 0) g_allocs_left--;
    g_user_allocs++;
    return aligned_alloc(64, (n + 63) & ~(size_t)63);
}
static void fail_free(void *ud, void *p, size_t n) {
    (void)ud;
    (void)n;
    g_user_frees++;
    free(p);
}

/* The buffer cache serves the default allocator only: with a hook, every
 * allocation reaches it (and installing it empties the cache). */
Test(allocator, user_hook_bypasses_the_buffer_cache) {
    remat_cpu_cache_enable(true);
    remat_cpu_cache_empty();
    int64_t sh[] = {1 << 18}; /* 1 MiB of f32: a size the cache keeps */
    remat_tensor *t;
    RT_OK(remat_empty(&t, 1, sh, REMAT_F32, REMAT_DEVICE_CPU));
    remat_release(t);
    cr_assert_eq(remat_cpu_cache_bytes(), (size_t)1 << 20);
    remat_allocator al = {fail_alloc, fail_free, NULL};
    remat_set_cpu_allocator(&al);
    cr_assert_eq(remat_cpu_cache_bytes(), 0, "installing an allocator empties the cache");
    for (int i = 0; i < 2; i++) {
        RT_OK(remat_empty(&t, 1, sh, REMAT_F32, REMAT_DEVICE_CPU));
        remat_release(t);
    }
    cr_assert_eq(g_user_allocs, 2);
    cr_assert_eq(g_user_frees, 2);
    cr_assert_eq(remat_cpu_cache_bytes(), 0);
    remat_set_cpu_allocator(NULL);
}

Test(allocator, user_hook_is_used) {
    remat_allocator al = {fail_alloc, fail_free, NULL};
    remat_set_cpu_allocator(&al);
    int64_t sh[] = {5};
    remat_tensor *t;
    RT_OK(remat_empty(&t, 1, sh, REMAT_F32, REMAT_DEVICE_CPU));
    cr_assert_eq(g_user_allocs, 1);
    remat_release(t);
    cr_assert_eq(g_user_frees, 1);
    remat_set_cpu_allocator(NULL);
}

Test(allocator, injected_failure_is_an_error_and_leaks_nothing) {
    int64_t sh[] = {4, 4};
    remat_tensor *a = rt_rand(2, sh, REMAT_F32, -1, 1, 1);
    remat_tensor *b = rt_rand(2, sh, REMAT_F32, -1, 1, 2);
    RT_OK(remat_set_requires_grad(a, true));
    float before[16];
    memcpy(before, remat_data(a), sizeof before);
    remat_alloc_stats s0 = cpu_stats();
    int64_t live0 = remat_live_tensors();

    remat_allocator al = {fail_alloc, fail_free, NULL};
    remat_set_cpu_allocator(&al);
    g_allocs_left = 0;
    remat_tensor *c = (remat_tensor *)0x1;
    RT_FAILS(remat_mul(&c, a, b), REMAT_ENOMEM, "remat_mul");
    cr_assert_null(c, "*out must be NULL on failure");
    RT_FAILS(remat_matmul(&c, a, b), REMAT_ENOMEM, NULL);
    cr_assert_null(c);
    RT_FAILS(remat_softmax(&c, a, -1), REMAT_ENOMEM, NULL);
    RT_FAILS(remat_layer_norm(&c, a, 1, NULL, NULL, 1e-5), REMAT_ENOMEM, NULL);

    /* failure in the middle of backward: allow the forward, fail later */
    g_allocs_left = -1;
    remat_tensor *y, *l;
    RT_OK(remat_mul(&y, a, b));
    RT_OK(remat_sum_all(&l, y));
    g_allocs_left = 0;
    RT_FAILS(remat_backward_scalar(l), REMAT_ENOMEM, NULL);
    g_allocs_left = -1;
    remat_release(l);
    remat_release(y);
    remat_set_cpu_allocator(NULL);

    cr_assert_eq(remat_live_tensors(), live0, "failed calls leaked tensors");
    remat_alloc_stats s1 = cpu_stats();
    /* the partial backward may have left a.grad unset; nothing else survives */
    cr_assert_null(remat_tensor_grad(a));
    cr_assert_eq(s1.current_bytes, s0.current_bytes, "failed calls leaked storage");
    cr_assert(memcmp(before, remat_data(a), sizeof before) == 0, "input changed by failure");
    remat_release(a);
    remat_release(b);
    cr_assert_eq(remat_live_tensors(), 0);
}

Test(allocator, stats_bad_device) {
    remat_alloc_stats s;
    RT_FAILS(remat_alloc_stats_get((remat_device){7, 0}, &s), REMAT_EDEVICE,
             "remat_alloc_stats_get");
    RT_FAILS(remat_alloc_stats_get(REMAT_DEVICE_CPU, NULL), REMAT_EINVAL, NULL);
}

Test(allocator, per_device_counters) {
    int td = rt_testdev_register();
    remat_device d1 = {td, 1};
    remat_alloc_stats t0, c0 = cpu_stats();
    RT_OK(remat_alloc_stats_get(d1, &t0));
    int64_t sh[] = {8};
    remat_tensor *t;
    RT_OK(remat_zeros(&t, 1, sh, REMAT_F64, d1));
    remat_alloc_stats t1;
    RT_OK(remat_alloc_stats_get(d1, &t1));
    cr_assert_eq(t1.current_bytes - t0.current_bytes, 64);
    cr_assert_eq(cpu_stats().current_bytes, c0.current_bytes, "testdev memory counted on cpu");
    remat_release(t);
    RT_OK(remat_alloc_stats_get(d1, &t1));
    cr_assert_eq(t1.current_bytes, t0.current_bytes);
}

/* ---- observer -------------------------------------------------------------------------- */
static long g_obs_events;
static int64_t g_obs_sum;
static void obs(void *ud, remat_device d, int64_t delta, size_t cur) {
    (void)ud;
    (void)d;
    (void)cur;
    g_obs_events++;
    g_obs_sum += delta;
}

Test(allocator, observer_sees_every_event) {
    remat_set_alloc_observer(obs, NULL);
    int64_t sh[] = {3};
    remat_tensor *t;
    RT_OK(remat_empty(&t, 1, sh, REMAT_F32, REMAT_DEVICE_CPU));
    remat_release(t);
    remat_set_alloc_observer(NULL, NULL);
    cr_assert_eq(g_obs_events, 2);
    cr_assert_eq(g_obs_sum, 0);
}
