/* tests/test_fenced_device.c — nothing outside the kernels and copies touches device memory:
 * the paths that used to write tensor data on the host (the scalar root's implicit gradient,
 * the zeros of missing output gradients, zeros_like in the in-place backward, remat_zeros /
 * remat_full) run on the "fenced" device (tests/support/fenced.h), whose memory faults on
 * any host access, and give the cpu's results through its kernels. */
#include <signal.h>
#include <string.h>

#include "core/core.h"
#include "core/kernels.h"
#include "support/fenced.h"
#include "support/rt.h"

static remat_device fenced(void) {
    int type = rt_fenced_type();
    cr_assert(type > 0, "fenced device: %s", remat_last_error());
    return (remat_device){type, 0};
}

/* A leaf on d holding t's values (t itself stays a cpu leaf). */
static remat_tensor *leaf_on(remat_tensor *t, remat_device d) {
    remat_tensor *c = NULL;
    bool prev = remat_no_grad_begin();
    RT_OK(remat_to_device(&c, t, d));
    remat_grad_mode_restore(prev);
    RT_OK(remat_set_requires_grad(c, true));
    return c;
}

/* The fence is real: a host write into its memory is a fault (SIGSEGV), so a host write
 * that comes back in the paths below makes their tests crash. */
Test(fenced_device, host_write_faults, .signal = SIGSEGV) {
    remat_tensor *t = NULL;
    RT_OK(remat_empty(&t, 1, (int64_t[]){4}, REMAT_F32, fenced()));
    ((volatile float *)rm_ptr(t))[0] = 1.0f;
    remat_release(t);
}

/* Under a test's crash report (rt_report_crash, installed before the device's handler) a
 * fault in device memory still ends the process with the signal, also under ASan (whose own
 * SEGV handler exits with a report instead). */
Test(fenced_device, fault_under_a_crash_report_still_dies_of_it, .signal = SIGSEGV, .timeout = 30) {
    rt_report_crash("fenced_device: the expected fault");
    remat_tensor *t = NULL;
    RT_OK(remat_empty(&t, 1, (int64_t[]){4}, REMAT_F32, fenced()));
    ((volatile float *)rm_ptr(t))[0] = 1.0f;
    remat_release(t);
}

Test(fenced_device, zeros_and_full_use_the_device_kernels) {
    remat_device d = fenced();
    long zero0 = rt_fenced_kernel_runs(RM_K_ZERO), ew0 = rt_fenced_kernel_runs(RM_K_ELEMENTWISE);
    remat_tensor *z = NULL, *f = NULL;
    int64_t sh[] = {3, 5};
    RT_OK(remat_zeros(&z, 2, sh, REMAT_F64, d));
    RT_OK(remat_full(&f, 2, sh, 2.5, REMAT_F32, d));
    cr_assert_eq(rt_fenced_kernel_runs(RM_K_ZERO), zero0 + 1);
    cr_assert_eq(rt_fenced_kernel_runs(RM_K_ELEMENTWISE), ew0 + 1);
    double *vz = rt_values(z), *vf = rt_values(f);
    for (int i = 0; i < 15; i++) cr_assert(vz[i] == 0.0 && vf[i] == 2.5, "element %d", i);
    free(vz), free(vf);
    remat_release(z), remat_release(f);
}

/* backward(sum(x * x)) without grad_outputs: the root's gradient 1 is filled by the
 * device's kernel; the gradient equals the cpu's bit for bit. */
Test(fenced_device, scalar_root_gradient_one_is_a_kernel_fill) {
    remat_device d = fenced();
    int64_t sh[] = {2, 3};
    for (int dt = 0; dt < 2; dt++) {
        remat_dtype dtype = dt ? REMAT_F64 : REMAT_F32;
        remat_tensor *xc = rt_leaf(rt_rand(2, sh, dtype, -1, 1, 7)), *xd = leaf_on(xc, d);
        remat_tensor *grads[2] = {0};
        for (int k = 0; k < 2; k++) {
            remat_tensor *x = k ? xd : xc, *sq = NULL, *s = NULL;
            RT_OK(remat_mul(&sq, x, x));
            RT_OK(remat_sum_all(&s, sq));
            long ew0 = rt_fenced_kernel_runs(RM_K_ELEMENTWISE);
            RT_OK(remat_backward(1, &s, NULL, false, 0, NULL));
            if (k) cr_assert_gt(rt_fenced_kernel_runs(RM_K_ELEMENTWISE), ew0);
            grads[k] = remat_retain(remat_tensor_grad(x));
            remat_release(sq), remat_release(s);
        }
        cr_assert_eq(remat_tensor_device(grads[1]).type, d.type);
        cr_assert(rt_bitwise_equal(grads[0], grads[1]), "fenced gradient differs from cpu's");
        remat_release(grads[0]), remat_release(grads[1]), remat_release(xc), remat_release(xd);
    }
}

/* A node with two outputs of which backward reaches only one (split, the second piece
 * unused): the missing gradient is zeros made by the device's ZERO kernel. */
Test(fenced_device, missing_output_gradient_is_a_kernel_zero) {
    remat_device d = fenced();
    int64_t sh[] = {4, 3};
    remat_tensor *xc = rt_leaf(rt_rand(2, sh, REMAT_F64, -1, 1, 3)), *xd = leaf_on(xc, d);
    remat_tensor *grads[2] = {0};
    for (int k = 0; k < 2; k++) {
        remat_tensor *x = k ? xd : xc, *parts[2] = {0}, *s = NULL;
        int n_out = 0;
        RT_OK(remat_split(parts, 2, &n_out, x, 2, 0));
        cr_assert_eq(n_out, 2);
        RT_OK(remat_sum_all(&s, parts[0]));
        long zero0 = rt_fenced_kernel_runs(RM_K_ZERO);
        RT_OK(remat_backward(1, &s, NULL, false, 0, NULL));
        if (k) cr_assert_gt(rt_fenced_kernel_runs(RM_K_ZERO), zero0);
        grads[k] = remat_retain(remat_tensor_grad(x));
        remat_release(parts[0]), remat_release(parts[1]), remat_release(s);
    }
    cr_assert(rt_bitwise_equal(grads[0], grads[1]));
    remat_release(grads[0]), remat_release(grads[1]), remat_release(xc), remat_release(xd);
}

/* zero_ on a tensor in the graph: its backward gives a zero gradient made by the kernel. */
Test(fenced_device, inplace_zero_backward_is_a_kernel_zero) {
    remat_device d = fenced();
    int64_t sh[] = {5};
    remat_tensor *xc = rt_leaf(rt_rand(1, sh, REMAT_F32, -1, 1, 5)), *xd = leaf_on(xc, d);
    remat_tensor *grads[2] = {0};
    for (int k = 0; k < 2; k++) {
        remat_tensor *x = k ? xd : xc, *y = NULL, *s = NULL;
        RT_OK(remat_mul_scalar(&y, x, 3.0));
        RT_OK(remat_zero_(y));
        RT_OK(remat_sum_all(&s, y));
        long zero0 = rt_fenced_kernel_runs(RM_K_ZERO);
        RT_OK(remat_backward(1, &s, NULL, false, 0, NULL));
        if (k) cr_assert_gt(rt_fenced_kernel_runs(RM_K_ZERO), zero0);
        grads[k] = remat_retain(remat_tensor_grad(x));
        remat_release(y), remat_release(s);
    }
    cr_assert(rt_bitwise_equal(grads[0], grads[1]));
    double *v = rt_values(grads[1]);
    for (int i = 0; i < 5; i++) cr_assert_eq(v[i], 0.0);
    free(v);
    remat_release(grads[0]), remat_release(grads[1]), remat_release(xc), remat_release(xd);
}

/* ---- ops whose checks used to refuse memory the host cannot read -------------------------
 * masked_fill / where read their condition in the SELECT kernel only (non-zero = true, as
 * documented in src/ops/select.c; nothing is read on the host), layer_norm, the in-place
 * ops, embedding, cat, slice/split backward and to_dtype run the device's kernels. Each
 * runs on cpu and on fenced with the same inputs; outputs and gradients agree bit for bit. */
typedef struct op_run {
    remat_tensor *x, *w, *cond, *idx; /* x, w: leaves; cond (f64 0/1), idx (i64) */
} op_run;

/* Every op above in one function: returns the scalar loss. */
static remat_tensor *all_ops(op_run *r) {
    remat_tensor *t[16] = {0}, *loss = NULL;
    RT_OK(remat_masked_fill(&t[0], r->x, r->cond, -2.5));
    RT_OK(remat_where(&t[1], r->cond, r->x, t[0]));
    RT_OK(remat_layer_norm(&t[2], t[1], 1, r->w, NULL, 1e-5));
    RT_OK(remat_mul_scalar(&t[3], t[2], 1.0));
    RT_OK(remat_add_(t[3], r->x, 0.5)); /* in place on a non-leaf */
    remat_tensor *pair[2] = {t[3], t[2]};
    RT_OK(remat_cat(&t[4], 2, pair, 1));          /* [4, 12] */
    RT_OK(remat_slice(&t[5], t[4], 1, 2, 10, 3)); /* [4, 3], step 3 */
    int n_out = 0;
    remat_tensor *parts[3] = {0};
    RT_OK(remat_split(parts, 3, &n_out, t[4], 5, 1)); /* 5, 5, 2: the last one unused */
    RT_OK(remat_embedding(&t[6], t[5], r->idx));      /* rows of t[5]: [2, 3] */
    RT_OK(remat_to_dtype(&t[7], t[6], REMAT_F32));
    RT_OK(remat_to_dtype(&t[8], t[7], REMAT_F64));
    RT_OK(remat_sum_all(&t[9], t[8]));
    RT_OK(remat_sum_all(&t[10], parts[0]));
    RT_OK(remat_mul(&t[11], parts[1], parts[1]));
    RT_OK(remat_sum_all(&t[12], t[11]));
    RT_OK(remat_add(&t[13], t[9], t[10]));
    RT_OK(remat_add(&loss, t[13], t[12]));
    for (int i = 0; i < 16; i++) remat_release(t[i]);
    for (int i = 0; i < 3; i++) remat_release(parts[i]);
    return loss;
}

Test(fenced_device, select_layer_norm_inplace_cat_slice_split_embedding_to_dtype) {
    remat_device d = fenced();
    int64_t sx[] = {4, 6}, sw[] = {6}, si[] = {2};
    double cv[24], iv[] = {3, 1};
    for (int i = 0; i < 24; i++) cv[i] = (i * 7) % 3 == 0;
    remat_tensor *x = rt_rand(2, sx, REMAT_F64, -1, 1, 11),
                 *w = rt_rand(1, sw, REMAT_F64, 0.5, 2, 12);
    remat_tensor *cond = rt_tensor(2, sx, REMAT_F64, cv), *idx = rt_tensor(1, si, REMAT_I64, iv);
    op_run runs[2];
    remat_tensor *loss[2], *gx[2], *gw[2];
    for (int k = 0; k < 2; k++) {
        if (k == 0) {
            runs[0] =
                (op_run){remat_retain(x), remat_retain(w), remat_retain(cond), remat_retain(idx)};
            RT_OK(remat_set_requires_grad(runs[0].x, true));
            RT_OK(remat_set_requires_grad(runs[0].w, true));
        } else {
            runs[1] = (op_run){leaf_on(x, d), leaf_on(w, d), NULL, NULL};
            RT_OK(remat_to_device(&runs[1].cond, cond, d));
            RT_OK(remat_to_device(&runs[1].idx, idx, d));
        }
        loss[k] = all_ops(&runs[k]);
        RT_OK(remat_backward(1, &loss[k], NULL, false, 0, NULL));
        gx[k] = remat_tensor_grad(runs[k].x);
        gw[k] = remat_tensor_grad(runs[k].w);
    }
    cr_assert_eq(remat_tensor_device(loss[1]).type, d.type);
    cr_assert(rt_bitwise_equal(loss[0], loss[1]), "loss differs");
    cr_assert(rt_bitwise_equal(gx[0], gx[1]), "dx differs");
    cr_assert(rt_bitwise_equal(gw[0], gw[1]), "dw differs");
    for (int k = 0; k < 2; k++) {
        remat_release(loss[k]), remat_release(runs[k].x), remat_release(runs[k].w);
        remat_release(runs[k].cond), remat_release(runs[k].idx);
    }
    remat_release(x), remat_release(w), remat_release(cond), remat_release(idx);
}
