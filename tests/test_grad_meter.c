/* tests/test_grad_meter.c — the program's parameter-gradient meter
 * (tools/train/grad_meter.c), behind `remat bench`'s activation bytes: on a
 * checkpointed MLP block whose backward peak is known by hand, the bytes of
 * parameter gradients live at the peak are exact, whether the gradients
 * become .grad (first backward) or are added into an existing .grad and
 * freed (second backward: seen only through the engine's leaf-gradient
 * observer), and when a parameter's first gradient waits in the engine for
 * its second (a tied weight). */
#include <criterion/criterion.h>

#include "support/models.h"
#include "support/rt.h"
#include "train/grad_meter.h"

/* x (R, D) -> x + w2 gelu(w1 x + b1) + b2, checkpointed (non-reentrant),
 * f32. The backward's allocator peak (tests/test_backward_memory.c,
 * checkpointed_mlp_backward_peak_is_exact) is in the second linear's
 * backward: the recomputed h (R H), gelu's dx (R H, written over the linear's
 * dx), dW2 (H D) and db2 (D). Gradients at the peak: dW2 and db2; the rest,
 * 2 R H floats, is activations. */
Test(grad_meter, checkpointed_mlp_gradients_at_the_peak_to_the_byte) {
    const int R = 128, D = 32, H = 256;
    rt_mlp_block b;
    rt_mlp_block_init(&b, D, H, 0.0, REMAT_F32, 3);
    int64_t sx[] = {R, D};
    remat_tensor *x = rt_rand(2, sx, REMAT_F32, -1, 1, 11), *params[4];
    RT_OK(remat_set_requires_grad(x, true));
    int np = rt_mlp_block_params(&b, params);
    const size_t act = (size_t)4 * 2 * R * H, grads = (size_t)4 * (H * D + D);
    /* pass 0: the gradients become .grad; pass 1: they are added into the
     * .grad of pass 0 and freed, so only the hooks see them */
    for (int pass = 0; pass < 2; pass++) {
        remat_tensor *y = NULL, *gy = rt_rand(2, sx, REMAT_F32, -1, 1, 12);
        const remat_checkpoint_options o = {.use_reentrant = REMAT_OPT_FALSE};
        RT_OK(remat_checkpoint(rt_mlp_block_fn, &b, 1, &x, 1, &y, &o));
        RT_OK(remat_alloc_reset_peak(REMAT_DEVICE_CPU));
        grad_meter m;
        grad_meter_begin(&m, REMAT_DEVICE_CPU, params, np);
        RT_OK(remat_backward(1, &y, &gy, false, 0, NULL));
        grad_meter_end(&m);
        cr_assert(!m.oom);
        cr_assert_eq(m.peak_bytes, remat_cpu_peak_bytes(), "the meter's peak is the allocator's");
        size_t step = m.peak_bytes - m.start_bytes;
        cr_assert_eq(step, act + grads, "pass %d: backward peak %zu bytes", pass, step);
        cr_assert_eq(m.grad_at_peak, grads, "pass %d: %zu gradient bytes at the peak, want %zu",
                     pass, m.grad_at_peak, grads);
        cr_assert_eq(step - m.grad_at_peak, act, "pass %d: activation bytes", pass);
        grad_meter_free(&m);
        remat_release(y);
        remat_release(gy);
    }
    remat_release(x);
    rt_mlp_block_free(&b);
    cr_assert_eq(remat_live_tensors(), 0);
}

/* y1 = x w, y2 = x w (x (R, D) needs no grad, w (D, D) does), backward from
 * both with gradients the test holds: each matmul's backward makes its dW
 * (D D), which waits for the other in w's accumulator; their sum (D D) is
 * the peak, and .grad. Everything the backward adds at its peak is w's
 * gradient: activation bytes 0 (12 D^2 if the gradients were not subtracted,
 * 4 D^2 if only w's hooks or .grad were seen). */
static void shared_weight_case(remat_device dev) {
    const int R = 64, D = 48;
    int64_t sx[] = {R, D}, sw[] = {D, D};
    remat_tensor *x = rt_to_device(rt_rand(2, sx, REMAT_F32, -1, 1, 1), dev),
                 *w = rt_to_device(rt_rand(2, sw, REMAT_F32, -1, 1, 2), dev);
    RT_OK(remat_set_requires_grad(w, true));
    remat_tensor *y[2] = {NULL, NULL}, *gy[2];
    for (int i = 0; i < 2; i++) {
        RT_OK(remat_matmul(&y[i], x, w));
        gy[i] = rt_to_device(rt_rand(2, sx, REMAT_F32, -1, 1, 3 + (unsigned)i), dev);
    }
    RT_OK(remat_alloc_reset_peak(dev));
    grad_meter m;
    grad_meter_begin(&m, dev, &w, 1);
    RT_OK(remat_backward(2, y, gy, false, 0, NULL));
    grad_meter_end(&m);
    const size_t dw = (size_t)4 * D * D;
    cr_assert(!m.oom);
    cr_assert_eq(m.peak_bytes - m.start_bytes, 3 * dw, "backward peak %zu bytes",
                 m.peak_bytes - m.start_bytes);
    cr_assert_eq(m.grad_at_peak, 3 * dw, "%zu gradient bytes at the peak", m.grad_at_peak);
    grad_meter_free(&m);
    for (int i = 0; i < 2; i++) {
        remat_release(y[i]);
        remat_release(gy[i]);
    }
    remat_release(x);
    remat_release(w);
    cr_assert_eq(remat_live_tensors(), 0);
}

Test(grad_meter, gradients_waiting_for_a_shared_weight_are_gradients) {
    shared_weight_case(REMAT_DEVICE_CPU);
}

/* The same on the device REMAT_TEST_DEVICE names (make test-fenced: a device the host cannot
 * read, as a GPU; cpu without it): the gradients are found by their device addresses
 * (remat_data_ptr), where remat_data is NULL, so `remat bench --device cuda` can report
 * activation bytes. */
Test(grad_meter, gradients_are_found_on_a_device_the_host_cannot_read) {
    shared_weight_case(rt_test_device());
}
