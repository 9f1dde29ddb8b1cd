/* tests/test_lean_saves.c — compact saved activations: relu and dropout keep
 * 1-bit masks (bitwise-identical gradients, saved bytes cut 32x for f32 and
 * 64x for f64), the bf16 saved-tensor hooks (round to nearest even,
 * relative error <= 2^-8, half the saved bytes) and the host-offload hooks
 * (exact, device memory freed), plus the storage-only dtypes u8/bf16. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "support/models.h"
#include "support/rt.h"

/* ---- relu ------------------------------------------------------------------------------ */
static void check_relu(remat_dtype dt, int64_t n) {
    int64_t sh[] = {n};
    remat_tensor *x = rt_rand(1, sh, dt, -1, 1, 11), *g = rt_rand(1, sh, dt, -2, 2, 12);
    /* exact zeros and negative zeros: relu' is 0 there */
    double z = 0.0;
    remat_tensor *zero = NULL, *nz = NULL, *xs = NULL;
    RT_OK(remat_scalar(&zero, z, dt));
    RT_OK(remat_scalar(&nz, -z, dt));
    RT_OK(remat_slice(&xs, x, 0, 0, n, 7));
    RT_OK(remat_copy_(xs, zero));
    RT_OK(remat_set_requires_grad(x, true));
    remat_tensor *y = NULL;
    RT_OK(remat_relu(&y, x));
    RT_OK(remat_backward(1, &y, &g, false, 0, NULL));
    const remat_tensor *dx = remat_tensor_grad(x);
    cr_assert_not_null(dx);
    for (int64_t i = 0; i < n; i++) {
        double xv, gv, dv;
        RT_OK(remat_item_at(x, i, &xv));
        RT_OK(remat_item_at(g, i, &gv));
        RT_OK(remat_item_at(dx, i, &dv));
        double expect = xv > 0 ? gv : 0.0;
        cr_assert(memcmp(&dv, &expect, sizeof dv) == 0, "relu grad %lld: %g vs %g", (long long)i,
                  dv, expect);
    }
    remat_release(y);
    remat_release(xs);
    remat_release(zero);
    remat_release(nz);
    remat_release(x);
    remat_release(g);
}

Test(lean, relu_bitmask_gradient_is_exact) {
    int64_t sizes[] = {1, 7, 8, 9, 64, 1001, 70001};
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
        check_relu(REMAT_F32, sizes[i]);
        check_relu(REMAT_F64, sizes[i]);
    }
    cr_assert_eq(remat_live_tensors(), 0);
}

Test(lean, relu_gradcheck_and_views) {
    int64_t sh[] = {5, 6};
    remat_tensor *a = rt_rand(2, sh, REMAT_F64, -1, 1, 3), *t = NULL;
    RT_OK(remat_transpose(&t, a, 0, 1)); /* strided input */
    RT_OK(remat_set_requires_grad(a, true));
    remat_tensor *tt = NULL;
    RT_OK(remat_transpose(&tt, a, 0, 1));
    remat_tensor *y = NULL, *s = NULL;
    RT_OK(remat_relu(&y, tt));
    RT_OK(remat_sum_all(&s, y));
    RT_OK(remat_backward_scalar(s));
    for (int64_t i = 0; i < 30; i++) {
        double av, gv;
        RT_OK(remat_item_at(a, i, &av));
        RT_OK(remat_item_at(remat_tensor_grad(a), i, &gv));
        cr_assert_eq(gv, av > 0 ? 1.0 : 0.0);
    }
    remat_release(s);
    remat_release(y);
    remat_release(tt);
    remat_release(t);
    remat_release(a);
    cr_assert_eq(remat_live_tensors(), 0);
}

/* ---- dropout ------------------------------------------------------------------------------ */
static void check_dropout(remat_dtype dt, int64_t n, double p) {
    int64_t sh[] = {n};
    remat_tensor *x = rt_rand(1, sh, dt, 0.5, 1.5, 21), *g = rt_rand(1, sh, dt, -2, 2, 22);
    RT_OK(remat_set_requires_grad(x, true));
    remat_manual_seed(99);
    remat_tensor *y = NULL;
    RT_OK(remat_dropout(&y, x, p, true));
    RT_OK(remat_backward(1, &y, &g, false, 0, NULL));
    const remat_tensor *dx = remat_tensor_grad(x);
    /* the full mask the old backward multiplied by: scale where kept (y != 0) */
    double scale = dt == REMAT_F32 ? (double)(float)(1.0 / (1.0 - p)) : 1.0 / (1.0 - p);
    int64_t kept = 0;
    for (int64_t i = 0; i < n; i++) {
        double yv, gv, dv;
        RT_OK(remat_item_at(y, i, &yv));
        RT_OK(remat_item_at(g, i, &gv));
        RT_OK(remat_item_at(dx, i, &dv));
        double m = yv != 0 ? scale : 0.0, expect;
        if (dt == REMAT_F32) expect = (double)((float)gv * (float)m);
        else expect = gv * m;
        kept += yv != 0;
        cr_assert(memcmp(&dv, &expect, sizeof dv) == 0, "dropout grad %lld: %.9g vs %.9g",
                  (long long)i, dv, expect);
    }
    if (p > 0 && p < 1 && n > 1000) {
        double frac = (double)kept / (double)n;
        cr_assert(fabs(frac - (1 - p)) < 0.05, "kept fraction %g for p %g", frac, p);
    }
    remat_release(y);
    remat_release(x);
    remat_release(g);
}

Test(lean, dropout_bitmask_gradient_is_exact) {
    int64_t sizes[] = {1, 3, 4, 5, 8, 13, 4096 * 4 + 5, 70003};
    double ps[] = {0.1, 0.5, 0.9, 1.0};
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++)
        for (size_t k = 0; k < sizeof ps / sizeof ps[0]; k++) {
            check_dropout(REMAT_F32, sizes[i], ps[k]);
            check_dropout(REMAT_F64, sizes[i], ps[k]);
        }
    cr_assert_eq(remat_live_tensors(), 0);
}

/* Bytes the graph holds after a forward: allocator delta with every
 * temporary released and only the loss kept. */
typedef struct mlp {
    remat_tensor *w1, *w2, *x;
} mlp;

/* loss = sum(linear2(dropout(relu(linear1(x))))) */
static size_t held_after_forward(mlp *m, remat_tensor **loss, double p) {
    size_t before = remat_cpu_current_bytes();
    remat_tensor *h = NULL, *r = NULL, *d = NULL, *y = NULL;
    RT_OK(remat_linear(&h, m->x, m->w1, NULL));
    RT_OK(remat_relu(&r, h));
    RT_OK(remat_dropout(&d, r, p, true));
    RT_OK(remat_linear(&y, d, m->w2, NULL));
    RT_OK(remat_sum_all(loss, y));
    remat_release(h);
    remat_release(r);
    remat_release(d);
    remat_release(y);
    return remat_cpu_current_bytes() - before;
}

Test(lean, relu_mlp_saved_bytes_cut_by_the_expected_factor) {
    const int64_t B = 64, D = 32, H = 256;
    for (int f64 = 0; f64 < 2; f64++) {
        remat_dtype dt = f64 ? REMAT_F64 : REMAT_F32;
        size_t es = f64 ? 8 : 4;
        int64_t sw1[] = {H, D}, sw2[] = {D, H}, sx[] = {B, D};
        mlp m = {rt_rand(2, sw1, dt, -0.3, 0.3, 1), rt_rand(2, sw2, dt, -0.3, 0.3, 2),
                 rt_rand(2, sx, dt, -1, 1, 3)};
        RT_OK(remat_set_requires_grad(m.w1, true));
        RT_OK(remat_set_requires_grad(m.w2, true));
        remat_residual_report *rep;
        RT_OK(remat_residual_report_begin(&rep));
        remat_tensor *loss = NULL;
        size_t held = held_after_forward(&m, &loss, 0.25);
        RT_OK(remat_residual_report_end(rep));
        size_t n = (size_t)(B * H), mask = (n + 7) / 8;
        /* relu and dropout each save ceil(n / 8) bytes where they used to
         * save n elements (relu: its output; dropout: a mask of x's size) */
        remat_residual_op_total relu = remat_residual_report_op_named(rep, "ReluBackward");
        remat_residual_op_total drop = remat_residual_report_op_named(rep, "DropoutBackward");
        cr_assert_eq(relu.count, 1);
        cr_assert_eq(relu.bytes, mask);
        cr_assert_eq(drop.bytes, mask);
        size_t old_bytes = 2 * n * es, new_bytes = relu.bytes + drop.bytes;
        cr_assert_eq(old_bytes / new_bytes, (size_t)(f64 ? 64 : 32), "factor %zu",
                     old_bytes / new_bytes);
        /* what the allocator holds: dropout's output (saved by linear2), the
         * two bit masks and the loss; h and r are freed */
        size_t expect = n * es + 2 * mask + es;
        cr_assert_eq(held, expect, "held %zu, expected %zu (before: %zu)", held, expect,
                     held + 2 * n * es - 2 * mask);
        RT_OK(remat_backward_scalar(loss));
        cr_assert_not_null(remat_tensor_grad(m.w1));
        remat_residual_report_free(rep);
        remat_release(loss);
        remat_release(m.w1);
        remat_release(m.w2);
        remat_release(m.x);
    }
    cr_assert_eq(remat_live_tensors(), 0);
}

/* ---- bf16 ------------------------------------------------------------------------------------ */
static float bits_to_f32(uint32_t u) {
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

Test(lean, bf16_conversion_rounds_to_nearest_even_within_bound) {
    /* round trip of many magnitudes: relative error <= 2^-8 */
    int64_t sh[] = {20000};
    remat_tensor *x = rt_rand(1, sh, REMAT_F32, -1, 1, 5), *b = NULL, *back = NULL;
    float *xp = remat_data(x);
    for (int64_t i = 0; i < sh[0]; i++) xp[i] = xp[i] * powf(2.0f, (float)(i % 60 - 30));
    RT_OK(remat_to_bf16(&b, x));
    cr_assert_eq(remat_tensor_dtype(b), REMAT_BF16);
    cr_assert_eq(remat_storage_nbytes(b), (size_t)sh[0] * 2);
    RT_OK(remat_bf16_to_f32(&back, b));
    const float *bp = remat_data(back);
    double worst = 0;
    for (int64_t i = 0; i < sh[0]; i++) {
        double rel = fabs((double)bp[i] - xp[i]) / fabs((double)xp[i]);
        if (rel > worst) worst = rel;
    }
    cr_assert(worst <= ldexp(1.0, -8), "worst relative error %g > 2^-8", worst);
    cr_assert(worst > ldexp(1.0, -10), "suspiciously exact: %g", worst);
    remat_release(b);
    remat_release(back);
    /* ties go to even, NaN and infinities survive */
    float vals[] = {1.0f + 0x1p-8f,            /* halfway 1 and 1+2^-7 → 1 (even) */
                    1.0f + 3 * 0x1p-8f,        /* halfway 1+2^-7 and 1+2^-6 → 1+2^-6 (even) */
                    1.0f + 0x1p-8f + 0x1p-20f, /* above halfway → up */
                    -2.5f,
                    INFINITY,
                    -INFINITY,
                    bits_to_f32(0x7FC00001u),
                    0.0f};
    float expect[] = {1.0f, 1.0f + 0x1p-6f, 1.0f + 0x1p-7f, -2.5f, INFINITY, -INFINITY, NAN, 0.0f};
    int64_t sv[] = {8};
    remat_tensor *v = NULL;
    RT_OK(remat_from_data(&v, 1, sv, REMAT_F32, vals));
    RT_OK(remat_to_bf16(&b, v));
    RT_OK(remat_bf16_to_f32(&back, b));
    bp = remat_data(back);
    for (int i = 0; i < 8; i++) {
        if (isnan(expect[i])) cr_assert(isnan(bp[i]), "NaN lost");
        else
            cr_assert_eq(bp[i], expect[i], "value %d: %.9g -> %.9g, expected %.9g", i, vals[i],
                         bp[i], expect[i]);
    }
    double item;
    RT_OK(remat_item_at(b, 3, &item)); /* storage-only dtypes can be read */
    cr_assert_eq(item, -2.5);
    remat_release_p(&back);
    RT_FAILS(remat_to_bf16(&back, b), REMAT_EDTYPE, "remat_to_bf16");
    RT_FAILS(remat_bf16_to_f32(&back, v), REMAT_EDTYPE, "must be bf16");
    remat_tensor *bad = NULL;
    /* bf16 is a compute dtype (autocast): ops take it and keep it */
    RT_OK(remat_exp(&bad, b));
    cr_assert_eq(remat_tensor_dtype(bad), REMAT_BF16);
    remat_release_p(&bad);
    remat_release(b);
    remat_release(v);
    remat_release(x);
    cr_assert_str_eq(remat_dtype_name(REMAT_BF16), "bf16");
    cr_assert_str_eq(remat_dtype_name(REMAT_U8), "u8");
    cr_assert_eq(remat_dtype_size(REMAT_U8), 1);
    cr_assert_eq(remat_live_tensors(), 0);
}

/* loss = sum(linear2(gelu(linear1(x)))) */
static size_t gelu_mlp_forward(mlp *m, remat_tensor **loss) {
    size_t before = remat_cpu_current_bytes();
    remat_tensor *h = NULL, *g = NULL, *y = NULL;
    RT_OK(remat_linear(&h, m->x, m->w1, NULL));
    RT_OK(remat_gelu(&g, h, REMAT_GELU_TANH));
    RT_OK(remat_linear(&y, g, m->w2, NULL));
    RT_OK(remat_sum_all(loss, y));
    remat_release(h);
    remat_release(g);
    remat_release(y);
    return remat_cpu_current_bytes() - before;
}

Test(lean, bf16_hooks_halve_saved_bytes_within_the_error_bound) {
    const int64_t B = 32, D = 64, H = 128;
    int64_t sw1[] = {H, D}, sw2[] = {D, H}, sx[] = {B, D};
    mlp m = {rt_rand(2, sw1, REMAT_F32, -0.2, 0.2, 1), rt_rand(2, sw2, REMAT_F32, -0.2, 0.2, 2),
             rt_rand(2, sx, REMAT_F32, -1, 1, 3)};
    RT_OK(remat_set_requires_grad(m.w1, true));
    RT_OK(remat_set_requires_grad(m.w2, true));
    remat_tensor *loss = NULL;
    size_t plain = gelu_mlp_forward(&m, &loss);
    RT_OK(remat_backward_scalar(loss));
    remat_tensor *g1 = remat_retain(remat_tensor_grad(m.w1));
    remat_tensor *g2 = remat_retain(remat_tensor_grad(m.w2));
    remat_release_p(&loss);
    rt_zero_grads(1, &m.w1);
    rt_zero_grads(1, &m.w2);

    remat_saved_hooks hk;
    remat_bf16_saved_hooks(&hk, 0);
    RT_OK(remat_saved_hooks_push(&hk));
    size_t packed = gelu_mlp_forward(&m, &loss);
    RT_OK(remat_saved_hooks_pop());
    /* plain: h (saved by gelu) and g (saved by linear2) stay, plus the
     * loss; with the hooks every saved f32 tensor is a bf16 copy: x (for
     * dW1), h, g and W2 (for dg; W1 is not saved as x needs no grad) at 2
     * bytes an element — x and W2 are alive anyway, so their copies add */
    size_t h_el = (size_t)(B * H);
    cr_assert_eq(plain, 2 * h_el * 4 + 4);
    size_t expect = (size_t)(B * D + 2 * B * H + D * H) * 2 + 4;
    cr_assert_eq(packed, expect, "bf16: %zu held, expected %zu", packed, expect);
    RT_OK(remat_backward_scalar(loss));
    /* gradients from bf16 activations: close, not equal */
    cr_assert(!rt_bitwise_equal(remat_tensor_grad(m.w2), g2), "bf16 made no difference?");
    /* each saved value is off by <= 2^-8 relative; the sums in the
     * gradients keep the error at that scale of the gradient's magnitude */
    remat_tensor *grads[2] = {g1, g2}, *got[2] = {remat_tensor_grad(m.w1), remat_tensor_grad(m.w2)};
    for (int k = 0; k < 2; k++) {
        double big = 0;
        for (int64_t i = 0; i < remat_numel(grads[k]); i++) {
            double v;
            RT_OK(remat_item_at(grads[k], i, &v));
            if (fabs(v) > big) big = fabs(v);
        }
        double d = rt_max_abs_diff(got[k], grads[k]);
        cr_assert(d <= 4 * ldexp(1.0, -8) * big, "dW%d: max |diff| %g vs max |grad| %g", k + 1, d,
                  big);
    }
    remat_release(loss);

    /* min_numel: small tensors are left alone */
    remat_bf16_saved_hooks(&hk, 1 << 30);
    RT_OK(remat_saved_hooks_push(&hk));
    size_t untouched = gelu_mlp_forward(&m, &loss);
    RT_OK(remat_saved_hooks_pop());
    cr_assert_eq(untouched, plain);
    remat_release(loss);
    remat_release(g1);
    remat_release(g2);
    remat_release(m.w1);
    remat_release(m.w2);
    remat_release(m.x);
    cr_assert_eq(remat_live_tensors(), 0);
}

/* ---- offload hooks --------------------------------------------------------------------------- */
Test(lean, offload_hooks_move_saved_device_tensors_to_host) {
    int type = rt_testdev_register();
    remat_device dev = {type, 0};
    int64_t sx[] = {64, 64};
    remat_tensor *xc = rt_rand(2, sx, REMAT_F32, -1, 1, 4), *x = NULL;
    RT_OK(remat_to_device(&x, xc, dev));
    RT_OK(remat_set_requires_grad(x, true));
    /* exp saves its output: kept on the device without hooks */
    remat_tensor *y = NULL, *l = NULL;
    remat_alloc_stats d0, d1, c0, c1;
    for (int hooks = 0; hooks < 2; hooks++) {
        remat_saved_hooks hk;
        remat_offload_saved_hooks(&hk);
        if (hooks) RT_OK(remat_saved_hooks_push(&hk));
        RT_OK(remat_alloc_stats_get(dev, &d0));
        RT_OK(remat_alloc_stats_get(REMAT_DEVICE_CPU, &c0));
        remat_tensor *e = NULL;
        RT_OK(remat_exp(&e, x));
        RT_OK(remat_sum_all(&l, e));
        remat_release(e);
        RT_OK(remat_alloc_stats_get(dev, &d1));
        RT_OK(remat_alloc_stats_get(REMAT_DEVICE_CPU, &c1));
        if (hooks) RT_OK(remat_saved_hooks_pop());
        size_t dev_held = d1.current_bytes - d0.current_bytes;
        size_t cpu_held = c1.current_bytes - c0.current_bytes;
        if (hooks) {
            cr_assert_eq(dev_held, 4u, "device keeps only the loss: %zu", dev_held);
            cr_assert_eq(cpu_held, 64u * 64 * 4, "host keeps the saved output: %zu", cpu_held);
        } else {
            cr_assert_eq(dev_held, 64u * 64 * 4 + 4);
        }
        RT_OK(remat_backward_scalar(l));
        remat_tensor *gd = NULL, *ec = NULL;
        RT_OK(remat_to_device(&gd, remat_tensor_grad(x), REMAT_DEVICE_CPU));
        RT_OK(remat_exp(&ec, xc));
        cr_assert(rt_bitwise_equal(gd, ec), "d exp(x)/dx must be exp(x) exactly");
        remat_release(gd);
        remat_release(ec);
        remat_release_p(&l);
        rt_zero_grads(1, &x);
    }
    remat_release(y);
    remat_release(x);
    remat_release(xc);
    cr_assert_eq(remat_live_tensors(), 0);
}

Test(lean, storage_dtypes_copy_and_fill) {
    int64_t sh[] = {3};
    remat_tensor *u = NULL, *f = NULL;
    RT_OK(remat_full(&u, 1, sh, 300.0, REMAT_U8, REMAT_DEVICE_CPU)); /* clamped */
    double v;
    RT_OK(remat_item_at(u, 2, &v));
    cr_assert_eq(v, 255.0);
    RT_OK(remat_full(&f, 1, sh, 1.5, REMAT_BF16, REMAT_DEVICE_CPU));
    float out[3];
    RT_OK(remat_copy_to_buffer(f, REMAT_F32, out, 3));
    cr_assert_eq(out[1], 1.5f);
    uint8_t ub[3];
    RT_OK(remat_copy_to_buffer(u, REMAT_U8, ub, 3));
    cr_assert_eq(ub[0], 255);
    remat_release(u);
    remat_release(f);
    cr_assert_eq(remat_live_tensors(), 0);
}
