/* tests/test_cuda_rng.c — the cuda backend's random numbers are the cpu
 * generator's. On the CPU: the host-and-device Philox of
 * src/core/philox.h (the very code the GPU kernels run) against
 * remat_philox4x32_10, and its dropout keep bits against the cpu dropout
 * kernel's mask, bit for bit. On a GPU (skipped without one, with the
 * reason): remat_dropout on cuda and on cpu, same seed, identical outputs
 * and gradients; the cuda generator's state advances like cpu's. */
#include <stdlib.h>
#include <string.h>

#include "core/core.h"

#include "backends/cpu/cpu.h"
#include "core/kernels.h"
#include "core/philox.h"
#include "support/rt.h"

Test(cuda_rng, philox_matches_the_cpu_generator) {
    uint32_t x = 7;
    for (int t = 0; t < 2000; t++) {
        x = x * 1664525u + 1013904223u;
        uint32_t key[2] = {x, x * 2654435761u};
        uint64_t ctr = ((uint64_t)(x ^ 0x5bd1e995u) << 32 | (x * 40503u)) >> (t % 40);
        uint32_t c[4] = {(uint32_t)ctr, (uint32_t)(ctr >> 32), 0, 0}, want[4], got[4];
        remat_philox4x32_10(c, key, want);
        rm_philox_hd(key[0], key[1], ctr, got);
        cr_assert(memcmp(want, got, sizeof want) == 0, "block %d differs", t);
    }
}

/* The keep bits the cpu dropout kernel writes for n elements. */
static void cpu_bits(int64_t n, double p, const uint32_t key[2], uint64_t counter, uint8_t *bits) {
    remat_tensor *x = NULL, *y = NULL, *b = NULL;
    int64_t nb = (n + 7) / 8;
    RT_OK(remat_full(&x, 1, &n, 1.0, REMAT_F32, REMAT_DEVICE_CPU));
    RT_OK(remat_zeros(&y, 1, &n, REMAT_F32, REMAT_DEVICE_CPU));
    RT_OK(remat_zeros(&b, 1, &nb, REMAT_U8, REMAT_DEVICE_CPU));
    rm_dropout_params dp = {.p = p, .key = {key[0], key[1]}, .counter = counter};
    rm_kargs k = {.in = {x}, .out = {y, b}, .params = &dp};
    RT_OK(rm_cpu_kernels[RM_K_DROPOUT][REMAT_F32](&k));
    memcpy(bits, rm_ptr(b), (size_t)nb);
    remat_release(x), remat_release(y), remat_release(b);
}

Test(cuda_rng, dropout_keep_bits_match_the_cpu_kernel) {
    static const int64_t sizes[] = {1, 3, 4, 5, 7, 8, 9, 15, 16, 17, 1000, 4097 * 4 + 3};
    static const double ps[] = {0.1, 0.5, 0.9, 1e-9};
    for (size_t si = 0; si < sizeof sizes / sizeof sizes[0]; si++) {
        for (size_t pi = 0; pi < sizeof ps / sizeof ps[0]; pi++) {
            int64_t n = sizes[si], nb = (n + 7) / 8;
            uint32_t key[2] = {0x12345678u + (uint32_t)si, 0x9abcdef0u - (uint32_t)pi};
            uint64_t counter = (uint64_t)si * 977 + ((uint64_t)pi << 33);
            uint8_t *want = malloc((size_t)nb);
            cr_assert(want);
            cpu_bits(n, ps[pi], key, counter, want);
            double t = ceil(ps[pi] * 16777216.0);
            uint32_t thr = (uint32_t)t;
            for (int64_t b = 0; b < nb; b++)
                cr_assert_eq(rm_dropout_keep_byte(b, n, thr, key[0], key[1], counter), want[b],
                             "n %lld p %g byte %lld", (long long)n, ps[pi], (long long)b);
            free(want);
        }
    }
}

/* ---- on a GPU ------------------------------------------------------------------------------ */
Test(cuda_rng, dropout_on_cuda_equals_cpu) {
    remat_device cu = rt_cuda0();
    const int64_t shape[2] = {37, 129};
    remat_tensor *x = rt_rand(2, shape, REMAT_F32, -1, 1, 3),
                 *g = rt_rand(2, shape, REMAT_F32, -1, 1, 4);
    remat_tensor *xc = NULL, *gcu = NULL, *y = NULL, *yc = NULL, *yb = NULL, *gxb = NULL;
    RT_OK(remat_to_device(&xc, x, cu));
    RT_OK(remat_to_device(&gcu, g, cu));
    rt_leaf(x);
    rt_leaf(xc);
    /* each device seeded on its own: remat_manual_seed seeds every device, so a second
     * call before the cuda draw would rewind the cpu generator the first draw advanced */
    RT_OK(remat_device_manual_seed(REMAT_DEVICE_CPU, 1234));
    RT_OK(remat_device_manual_seed(cu, 1234));
    RT_OK(remat_dropout(&y, x, 0.3, true));
    RT_OK(remat_dropout(&yc, xc, 0.3, true));
    RT_OK(remat_to_device(&yb, yc, REMAT_DEVICE_CPU));
    cr_assert(rt_bitwise_equal(y, yb), "the mask and the products are the cpu ones");
    /* the state advanced alike: the next draw agrees too */
    uint8_t s_cpu[REMAT_RNG_STATE_BYTES], s_cu[REMAT_RNG_STATE_BYTES];
    RT_OK(remat_rng_get_state(REMAT_DEVICE_CPU, s_cpu));
    RT_OK(remat_rng_get_state(cu, s_cu));
    cr_assert(memcmp(s_cpu, s_cu, sizeof s_cpu) == 0);
    /* backward: the same gradient of sum(y * g) */
    RT_OK(remat_backward(1, &y, &g, false, 0, NULL));
    RT_OK(remat_backward(1, &yc, &gcu, false, 0, NULL));
    RT_OK(remat_to_device(&gxb, remat_tensor_grad(xc), REMAT_DEVICE_CPU));
    cr_assert(rt_bitwise_equal(remat_tensor_grad(x), gxb));
    remat_release(x), remat_release(xc), remat_release(y), remat_release(yc);
    remat_release(yb), remat_release(g), remat_release(gcu), remat_release(gxb);
    cr_assert_eq(remat_live_tensors(), 0);
}
