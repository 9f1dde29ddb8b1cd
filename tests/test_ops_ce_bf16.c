/* tests/test_ops_ce_bf16.c — remat_cross_entropy of bf16 logits under autocast: the logits
 * reach the bf16 kernels uncast (autocast_keep: the cpu's, and a device's that declares
 * RM_KF_AUTOCAST_KEEP, cuda's and fenced's) and the loss is f32. Values, the rows'
 * logsumexp, gradients and create_graph gradients bitwise those of the logits cast to f32
 * first (the composed path autocast used to take); widths under and over a vector, ignored
 * rows, no target left (NaN), non-finite logits, thread-count independence; the bytes the
 * node keeps (bf16 logits, no f32 copy); a bad target's error with nothing written; bf16
 * outside autocast unchanged (the f32 loss rounded). The PyTorch 2.15 autocast fixture is
 * test_autocast_fixtures' cross_entropy_bf16_in. Runs on the test device (make test-fenced,
 * make test-cuda). */
#include <math.h>
#include <omp.h>
#include <stdio.h>

#include "core/kernels.h"
#include "remat/autocast.h"
#include "support/rt.h"

RT_ON_TEST_DEVICE

static remat_autocast_state ac_on(void) {
    remat_autocast_state prev;
    RT_OK(remat_autocast_begin(&prev, rt_tensor_device().type, REMAT_BF16, true));
    return prev;
}

/* bf16 logits (N, C) from uniform values in [-s, s], row 1 holding +inf / NaN when odd */
static remat_tensor *make_logits(int64_t N, int64_t C, double s, unsigned seed, int odd) {
    int64_t sh[2] = {N, C};
    remat_tensor *x32 = rt_rand(2, sh, REMAT_F32, -s, s, seed), *x = NULL;
    if (odd && N > 1) {
        double *v = rt_values(x32);
        v[1 * C + 0] = odd == 1 ? INFINITY : NAN;
        remat_release(x32);
        x32 = rt_tensor(2, sh, REMAT_F32, v);
        free(v);
    }
    RT_OK(remat_to_dtype(&x, x32, REMAT_BF16));
    remat_release(x32);
    return rt_leaf(x);
}

static remat_tensor *make_targets(int64_t N, int64_t C, int64_t ignore, int every) {
    double *v = malloc(sizeof(double) * (size_t)N);
    for (int64_t n = 0; n < N; n++)
        v[n] = every && n % every == 0 ? (double)ignore : (double)((n * 7 + 3) % C);
    remat_tensor *t = rt_tensor(1, &N, REMAT_I64, v);
    free(v);
    return t;
}

/* loss (0: kept uncast, 1: cast first) and the logits' gradient for the loss times gl */
static void ce_pair(remat_tensor *x, remat_tensor *t, int64_t ignore, double gl,
                    remat_tensor **loss, remat_tensor **grad) {
    for (int f = 0; f < 2; f++) {
        remat_autocast_state prev = ac_on();
        remat_tensor *in = x, *x32 = NULL, *scaled = NULL;
        if (f == 1) {
            RT_OK(remat_to_dtype(&x32, x, REMAT_F32));
            in = x32;
        }
        RT_OK(remat_cross_entropy(&loss[f], in, t, ignore));
        remat_autocast_end(&prev);
        RT_OK(remat_mul_scalar(&scaled, loss[f], gl));
        RT_OK(remat_grad(1, &scaled, NULL, 1, &x, false, false, &grad[f]));
        remat_release(x32), remat_release(scaled);
    }
}

Test(ce_bf16, equals_cast_then_loss) {
    const int64_t widths[4] = {5, 16, 256, 1000}, ignore = -100;
    for (int k = 0; k < 4; k++)
        for (int every = 0; every < 3; every++)
            for (int odd = 0; odd < 3; odd++) {
                const int64_t C = widths[k], N = 37;
                remat_tensor *x = make_logits(N, C, 8, 10 + (unsigned)k, odd);
                remat_tensor *t = make_targets(N, C, ignore, every);
                remat_tensor *loss[2], *grad[2];
                ce_pair(x, t, ignore, 0.75, loss, grad);
                cr_assert_eq(remat_tensor_dtype(loss[0]), REMAT_F32, "C=%lld: the loss is f32",
                             (long long)C);
                cr_assert_eq(remat_tensor_dtype(grad[0]), REMAT_BF16);
                cr_assert(rt_bitwise_equal(loss[0], loss[1]),
                          "C=%lld every=%d odd=%d: loss %g, cast first %g", (long long)C, every,
                          odd, rt_item_at(loss[0], 0), rt_item_at(loss[1], 0));
                cr_assert(rt_bitwise_equal(grad[0], grad[1]),
                          "C=%lld every=%d odd=%d: the gradient differs", (long long)C, every, odd);
                for (int f = 0; f < 2; f++) remat_release(loss[f]), remat_release(grad[f]);
                remat_release(x), remat_release(t);
            }
    cr_assert_eq(remat_live_tensors(), 0);
}

/* every target ignored: NaN, as the f32 loss (and PyTorch); the gradient NaN too */
Test(ce_bf16, no_target_left_is_nan) {
    const int64_t N = 6, C = 9;
    remat_tensor *x = make_logits(N, C, 2, 3, 0), *t = make_targets(N, C, -100, 1);
    remat_tensor *loss[2], *grad[2];
    ce_pair(x, t, -100, 1.0, loss, grad);
    cr_assert(isnan(rt_item_at(loss[0], 0)));
    cr_assert(rt_bitwise_equal(loss[0], loss[1]));
    cr_assert(rt_bitwise_equal(grad[0], grad[1]));
    for (int f = 0; f < 2; f++) remat_release(loss[f]), remat_release(grad[f]);
    remat_release(x), remat_release(t);
    cr_assert_eq(remat_live_tensors(), 0);
}

/* rows split among threads: the same bits with 1 and 2 threads */
Test(ce_bf16, thread_count_independent) {
    const int64_t N = 300, C = 700;
    remat_tensor *x = make_logits(N, C, 4, 5, 0), *t = make_targets(N, C, -100, 5);
    remat_tensor *l1[2], *g1[2], *l2[2], *g2[2];
    const int threads = omp_get_max_threads();
    omp_set_num_threads(1);
    ce_pair(x, t, -100, 1.0, l1, g1);
    omp_set_num_threads(2);
    ce_pair(x, t, -100, 1.0, l2, g2);
    omp_set_num_threads(threads);
    cr_assert(rt_bitwise_equal(l1[0], l2[0]) && rt_bitwise_equal(g1[0], g2[0]));
    cr_assert(rt_bitwise_equal(l1[0], l1[1]) && rt_bitwise_equal(g1[0], g1[1]));
    for (int f = 0; f < 2; f++)
        remat_release(l1[f]), remat_release(g1[f]), remat_release(l2[f]), remat_release(g2[f]);
    remat_release(x), remat_release(t);
    cr_assert_eq(remat_live_tensors(), 0);
}

/* create_graph: the gradient and the gradient of sum(dx * v) bitwise the cast path's */
Test(ce_bf16, double_backward_equals_cast_then_loss) {
    const int64_t N = 7, C = 11, sh[2] = {N, C};
    remat_tensor *x = make_logits(N, C, 3, 7, 0), *t = make_targets(N, C, -100, 3);
    remat_tensor *v = NULL, *v32 = rt_rand(2, sh, REMAT_F32, -1, 1, 8);
    RT_OK(remat_to_dtype(&v, v32, REMAT_BF16));
    remat_tensor *gg[2];
    for (int f = 0; f < 2; f++) {
        remat_autocast_state prev = ac_on();
        remat_tensor *in = x, *x32 = NULL, *loss = NULL, *dx = NULL, *p = NULL, *s = NULL;
        if (f == 1) {
            RT_OK(remat_to_dtype(&x32, x, REMAT_F32));
            in = x32;
        }
        RT_OK(remat_cross_entropy(&loss, in, t, -100));
        remat_autocast_end(&prev);
        const remat_backward_options o = {.create_graph = true};
        RT_OK(remat_grad_ex(1, &loss, NULL, 1, &x, &o, &dx));
        cr_assert_eq(remat_tensor_dtype(dx), REMAT_BF16);
        RT_OK(remat_mul(&p, dx, v));
        RT_OK(remat_sum_all(&s, p));
        RT_OK(remat_grad(1, &s, NULL, 1, &x, false, false, &gg[f]));
        remat_release(x32), remat_release(loss), remat_release(dx), remat_release(p);
        remat_release(s);
    }
    cr_assert(rt_bitwise_equal(gg[0], gg[1]), "the second derivative differs");
    remat_release(gg[0]), remat_release(gg[1]), remat_release(v), remat_release(v32);
    remat_release(x), remat_release(t);
    cr_assert_eq(remat_live_tensors(), 0);
}

/* the node keeps the bf16 logits and an f32 logsumexp: no f32 (N, C) copy is held, none is
 * made for a moment (the peak), forward or backward (the bf16 gradient only) */
Test(ce_bf16, keeps_no_f32_copy_of_the_logits) {
    const int64_t N = 64, C = 512;
    remat_tensor *x = make_logits(N, C, 2, 9, 0), *t = make_targets(N, C, -100, 0);
    const int type = rt_tensor_device().type;
    if (type != REMAT_CPU && !rm_kernel_allows(RM_K_CROSS_ENTROPY, type, RM_KF_AUTOCAST_KEEP))
        cr_skip_test("%s casts the logits (no RM_KF_AUTOCAST_KEEP)", rt_tensor_device_str());
    remat_alloc_stats before, after, b1;
    rt_device_reset_peak();
    before = rt_device_stats();
    remat_autocast_state prev = ac_on();
    remat_tensor *loss = NULL, *gx = NULL;
    RT_OK(remat_cross_entropy(&loss, x, t, -100));
    remat_autocast_end(&prev);
    after = rt_device_stats();
    const size_t held = after.current_bytes - before.current_bytes;
    const size_t expect = 4 + (size_t)N * 4; /* the loss and the logsumexp */
    cr_assert_eq(held, expect, "the forward holds %zu bytes, expected %zu", held, expect);
    cr_assert_eq(after.peak_bytes, after.current_bytes, "the forward's peak: %zu more bytes",
                 after.peak_bytes - after.current_bytes);
    rt_device_reset_peak();
    RT_OK(remat_grad(1, &loss, NULL, 1, &x, false, false, &gx));
    b1 = rt_device_stats();
    const size_t grad = (size_t)(N * C) * 2; /* dx in bf16 */
    cr_assert_leq(b1.peak_bytes - after.current_bytes, grad + 16,
                  "the backward's peak: %zu bytes over the forward's, expected dx's %zu",
                  b1.peak_bytes - after.current_bytes, grad);
    remat_release(gx), remat_release(loss), remat_release(x), remat_release(t);
    cr_assert_eq(remat_live_tensors(), 0);
}

/* a target out of range: REMAT_EINVAL naming it, no loss */
Test(ce_bf16, target_out_of_range) {
    const int64_t N = 4, C = 6;
    remat_tensor *x = make_logits(N, C, 1, 4, 0);
    const double tv[4] = {0, 6, 2, 1};
    remat_tensor *t = rt_tensor(1, &N, REMAT_I64, tv), *loss = NULL;
    remat_autocast_state prev = ac_on();
    RT_FAILS(remat_cross_entropy(&loss, x, t, -100), REMAT_EINVAL, "targets[1] = 6");
    remat_autocast_end(&prev);
    cr_assert_null(loss);
    remat_release(x), remat_release(t);
    cr_assert_eq(remat_live_tensors(), 0);
}

/* outside autocast a bf16 loss stays bf16: the f32 loss of the widened logits, rounded */
Test(ce_bf16, outside_autocast_stays_bf16) {
    const int64_t N = 9, C = 13;
    remat_tensor *x = make_logits(N, C, 3, 6, 0), *t = make_targets(N, C, -100, 4);
    remat_tensor *loss = NULL, *x32 = NULL, *l32 = NULL, *lr = NULL;
    RT_OK(remat_cross_entropy(&loss, x, t, -100));
    cr_assert_eq(remat_tensor_dtype(loss), REMAT_BF16);
    RT_OK(remat_to_dtype(&x32, x, REMAT_F32));
    RT_OK(remat_cross_entropy(&l32, x32, t, -100));
    RT_OK(remat_to_dtype(&lr, l32, REMAT_BF16));
    cr_assert(rt_bitwise_equal(loss, lr));
    remat_release(loss), remat_release(x32), remat_release(l32), remat_release(lr);
    remat_release(x), remat_release(t);
    cr_assert_eq(remat_live_tensors(), 0);
}
