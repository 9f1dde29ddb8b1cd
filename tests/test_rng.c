/* tests/test_rng.c — Philox4x32-10 known answers, seeding, state blobs, fork. */
#include <string.h>

#include "support/rt.h"

/* Known-answer vectors published with Random123 (kat_vectors, philox4x32 10 rounds). */
Test(rng, philox_known_answers) {
    struct {
        uint32_t ctr[4], key[2], out[4];
    } kat[] = {
        {{0, 0, 0, 0}, {0, 0}, {0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8}},
        {{0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff},
         {0xffffffff, 0xffffffff},
         {0x408f276d, 0x41c83b0e, 0xa20bc7c6, 0x6d5451fd}},
        {{0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344},
         {0xa4093822, 0x299f31d0},
         {0xd16cfe09, 0x94fdcceb, 0x5001e420, 0x24126ea1}},
    };
    for (size_t i = 0; i < sizeof kat / sizeof kat[0]; i++) {
        uint32_t out[4];
        remat_philox4x32_10(kat[i].ctr, kat[i].key, out);
        for (int k = 0; k < 4; k++)
            cr_assert_eq(out[k], kat[i].out[k], "vector %zu word %d: %08x vs %08x", i, k, out[k],
                         kat[i].out[k]);
    }
}

Test(rng, manual_seed_reproduces) {
    int64_t shape[] = {1000};
    remat_tensor *a, *b, *c;
    remat_manual_seed(42);
    RT_OK(remat_rand_uniform(&a, 1, shape, 0, 1, REMAT_F32, REMAT_DEVICE_CPU));
    remat_manual_seed(42);
    RT_OK(remat_rand_uniform(&b, 1, shape, 0, 1, REMAT_F32, REMAT_DEVICE_CPU));
    RT_OK(remat_rand_uniform(&c, 1, shape, 0, 1, REMAT_F32, REMAT_DEVICE_CPU));
    cr_assert(rt_bitwise_equal(a, b));
    cr_assert(!rt_bitwise_equal(b, c), "the generator must advance between draws");
    const float *p = remat_data(a);
    double mean = 0;
    for (int i = 0; i < 1000; i++) {
        cr_assert(p[i] >= 0.0f && p[i] < 1.0f, "uniform value %g out of [0,1)", p[i]);
        mean += p[i];
    }
    mean /= 1000;
    cr_assert(mean > 0.45 && mean < 0.55, "uniform mean %g", mean);
    remat_release(a);
    remat_release(b);
    remat_release(c);
    cr_assert_eq(remat_live_tensors(), 0);
}

Test(rng, normal_moments) {
    int64_t shape[] = {20000};
    remat_tensor *a;
    remat_manual_seed(7);
    RT_OK(remat_rand_normal(&a, 1, shape, 2.0, 3.0, REMAT_F64, REMAT_DEVICE_CPU));
    const double *p = remat_data(a);
    double m = 0, v = 0;
    for (int i = 0; i < 20000; i++) m += p[i];
    m /= 20000;
    for (int i = 0; i < 20000; i++) v += (p[i] - m) * (p[i] - m);
    v /= 20000;
    cr_assert(m > 1.9 && m < 2.1, "normal mean %g", m);
    cr_assert(v > 8.5 && v < 9.5, "normal variance %g", v);
    remat_release(a);
}

Test(rng, state_roundtrip_and_fork) {
    uint8_t st[REMAT_RNG_STATE_BYTES];
    int64_t shape[] = {64};
    remat_tensor *a, *b, *c;
    remat_manual_seed(1);
    RT_OK(remat_rng_get_state(REMAT_DEVICE_CPU, st));
    RT_OK(remat_rand_uniform(&a, 1, shape, 0, 1, REMAT_F32, REMAT_DEVICE_CPU));
    RT_OK(remat_rng_set_state(REMAT_DEVICE_CPU, st));
    RT_OK(remat_rand_uniform(&b, 1, shape, 0, 1, REMAT_F32, REMAT_DEVICE_CPU));
    cr_assert(rt_bitwise_equal(a, b), "set_state must restore the stream");

    remat_rng_fork fork;
    RT_OK(remat_rng_fork_begin(&fork, 0, NULL));
    remat_tensor *inside;
    RT_OK(remat_rand_uniform(&inside, 1, shape, 0, 1, REMAT_F32, REMAT_DEVICE_CPU));
    RT_OK(remat_rng_fork_end(&fork));
    RT_OK(remat_rand_uniform(&c, 1, shape, 0, 1, REMAT_F32, REMAT_DEVICE_CPU));
    cr_assert(rt_bitwise_equal(inside, c), "fork_end must put the stashed state back");
    remat_release(a);
    remat_release(b);
    remat_release(c);
    remat_release(inside);
}

Test(rng, bad_state_blob_rejected) {
    uint8_t st[REMAT_RNG_STATE_BYTES] = {0};
    uint8_t before[REMAT_RNG_STATE_BYTES], after[REMAT_RNG_STATE_BYTES];
    RT_OK(remat_rng_get_state(REMAT_DEVICE_CPU, before));
    RT_FAILS(remat_rng_set_state(REMAT_DEVICE_CPU, st), REMAT_EFORMAT, "remat_rng_set_state");
    RT_OK(remat_rng_get_state(REMAT_DEVICE_CPU, after));
    cr_assert(memcmp(before, after, sizeof before) == 0, "a bad blob must leave the state alone");
    RT_FAILS(remat_rng_get_state((remat_device){REMAT_CPU, 3}, st), REMAT_EDEVICE, "cpu:3");
    RT_FAILS(remat_rng_get_state(REMAT_DEVICE_CPU, NULL), REMAT_EINVAL, NULL);
}

Test(rng, per_device_generators_are_independent) {
    int td = rt_testdev_register();
    remat_device d0 = {td, 0}, d1 = {td, 1};
    int64_t shape[] = {32};
    remat_manual_seed(5);
    remat_tensor *a, *b, *c;
    RT_OK(remat_rand_uniform(&a, 1, shape, 0, 1, REMAT_F32, d0));
    /* drawing on device 0 must not advance device 1 or cpu */
    RT_OK(remat_rand_uniform(&b, 1, shape, 0, 1, REMAT_F32, d1));
    RT_OK(remat_rand_uniform(&c, 1, shape, 0, 1, REMAT_F32, REMAT_DEVICE_CPU));
    cr_assert(rt_bitwise_equal(a, b), "same seed, same position on two devices");
    remat_tensor *a_cpu;
    RT_OK(remat_to_device(&a_cpu, a, REMAT_DEVICE_CPU));
    cr_assert(rt_bitwise_equal(a_cpu, c));
    RT_OK(remat_device_manual_seed(d1, 6));
    remat_tensor *d;
    RT_OK(remat_rand_uniform(&d, 1, shape, 0, 1, REMAT_F32, d1));
    cr_assert(!rt_bitwise_equal(a, d));
    remat_release(a);
    remat_release(b);
    remat_release(c);
    remat_release(d);
    remat_release(a_cpu);
    cr_assert_eq(remat_live_tensors(), 0);
}
