/* tests/test_cpu_cache.c — the default cpu allocator's buffer cache
 * (remat_cpu_cache_* in remat/device.h): reuse of same-size buffers, the
 * bound (never more than peak − in use), small buffers left alone, on/off.
 * That a user allocator bypasses it is in test_allocator.c, beside the
 * hook's other tests. Each test turns the cache on itself (it is off by
 * default under AddressSanitizer). */
#include <criterion/criterion.h>

#include "support/rt.h"

#define MIB ((int64_t)1 << 20)

static remat_tensor *buffer(int64_t bytes) {
    remat_tensor *t = NULL;
    int64_t n = bytes / 4;
    RT_OK(remat_empty(&t, 1, &n, REMAT_F32, REMAT_DEVICE_CPU));
    return t;
}

static void fresh_cache(void) {
    remat_cpu_cache_enable(true);
    remat_cpu_cache_empty();
}

Test(cpu_cache, a_freed_buffer_serves_the_next_allocation_of_its_size) {
    fresh_cache();
    remat_tensor *a = buffer(MIB);
    void *p = remat_data(a);
    size_t live = remat_cpu_current_bytes();
    remat_release(a);
    cr_assert_eq(remat_cpu_cache_bytes(), (size_t)MIB);
    cr_assert_eq(remat_cpu_current_bytes(), live - (size_t)MIB, "accounting: live tensors only");
    remat_tensor *b = buffer(MIB);
    cr_assert_eq(remat_data(b), p, "the cached buffer is handed out again");
    cr_assert_eq(remat_cpu_cache_bytes(), 0);
    remat_tensor *c = buffer(2 * MIB); /* another size: a new buffer */
    cr_assert_neq(remat_data(c), p);
    remat_release(b);
    remat_release(c);
    cr_assert_eq(remat_cpu_cache_bytes(), (size_t)3 * MIB);
    remat_cpu_cache_empty();
    cr_assert_eq(remat_cpu_cache_bytes(), 0);
}

Test(cpu_cache, never_holds_more_than_peak_minus_in_use) {
    fresh_cache();
    remat_tensor *a = buffer(MIB);
    remat_release(a);
    cr_assert_eq(remat_cpu_cache_bytes(), (size_t)MIB);
    /* the peak now is what is in use: a 2 MiB buffer raises it by 2 MiB, and
     * with 1 MiB cached there is no room to keep it as well */
    RT_OK(remat_alloc_reset_peak(REMAT_DEVICE_CPU));
    remat_tensor *b = buffer(2 * MIB);
    remat_release(b);
    cr_assert_eq(remat_cpu_cache_bytes(), (size_t)MIB, "in use + cached stays within the peak");
    cr_assert_leq(remat_cpu_current_bytes() + remat_cpu_cache_bytes(), remat_cpu_peak_bytes());
}

Test(cpu_cache, small_buffers_and_the_off_switch) {
    fresh_cache();
    remat_release(buffer(4096)); /* below 64 KiB: straight back to malloc */
    cr_assert_eq(remat_cpu_cache_bytes(), 0);
    remat_release(buffer(MIB));
    cr_assert_eq(remat_cpu_cache_bytes(), (size_t)MIB);
    remat_cpu_cache_enable(false);
    cr_assert_not(remat_cpu_cache_enabled());
    cr_assert_eq(remat_cpu_cache_bytes(), 0, "off empties it");
    remat_release(buffer(MIB));
    cr_assert_eq(remat_cpu_cache_bytes(), 0, "off keeps nothing");
}
