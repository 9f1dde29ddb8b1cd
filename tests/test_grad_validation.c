/* tests/test_grad_validation.c — issue 14 item 4: every gradient a
 * backward function returns is validated against the input it is for
 * (PyTorch: validate_outputs): a different dtype is converted to the input's, a
 * shape the input expands to is summed down to it, any other shape is
 * REMAT_ESHAPE and another device REMAT_EDEVICE. remat_set_grad checks
 * dtype and device as well as the shape; remat_set_requires_grad on an
 * i64 tensor is REMAT_EINVAL as its header says. */
#include <string.h>

#include "support/rt.h"

typedef enum { BAD_DTYPE, BAD_SHAPE, BIG_SHAPE, BAD_DEVICE, INT_DTYPE } bad_kind;

/* out = 2 * in[0]; backward returns a gradient that is wrong in one way */
static int twice_fwd(remat_function_ctx *ctx, void *ud, remat_tensor *const *in, int n_in,
                     remat_tensor **out, int n_out) {
    (void)ctx, (void)ud, (void)n_in, (void)n_out;
    return remat_mul_scalar(&out[0], in[0], 2.0);
}

static int twice_bwd(remat_function_ctx *ctx, void *ud, remat_tensor *const *gout, int n_out,
                     remat_tensor **gin, int n_in) {
    (void)ctx, (void)n_out, (void)n_in;
    bad_kind k = *(bad_kind *)ud;
    remat_tensor *g2 = NULL;
    int rc = remat_mul_scalar(&g2, gout[0], 2.0);
    if (rc) return rc;
    int64_t n = remat_size(g2, 0);
    switch (k) {
    case BAD_DTYPE: rc = remat_empty(&gin[0], 1, &n, REMAT_F64, REMAT_DEVICE_CPU); break;
    case INT_DTYPE: rc = remat_empty(&gin[0], 1, &n, REMAT_I64, REMAT_DEVICE_CPU); break;
    case BAD_SHAPE: {
        int64_t sh[] = {n + 1};
        rc = remat_zeros(&gin[0], 1, sh, REMAT_F32, REMAT_DEVICE_CPU);
        break;
    }
    case BIG_SHAPE: {
        int64_t sh[] = {2, n};
        rc = remat_expand(&gin[0], g2, 2, sh);
        break;
    }
    case BAD_DEVICE: {
        remat_device d = {rt_testdev_register(), 0};
        rc = remat_zeros(&gin[0], 1, &n, REMAT_F32, d);
        break;
    }
    }
    if (!rc && (k == BAD_DTYPE || k == INT_DTYPE)) rc = remat_copy_(gin[0], g2);
    remat_release(g2);
    return rc;
}

static remat_status run_twice(bad_kind k, remat_tensor *x) {
    remat_function_def def = {"TwiceBackward", twice_fwd, twice_bwd, NULL};
    remat_tensor *y = NULL, *s = NULL;
    remat_status rc = remat_function_apply(&def, &k, 1, &x, 1, &y);
    if (!rc) rc = remat_sum_all(&s, y);
    if (!rc) rc = remat_backward_scalar(s);
    remat_release(s);
    remat_release(y);
    return rc;
}

Test(grad_validation, backward_dtype_is_converted_to_the_inputs) {
    int64_t sh[] = {3};
    remat_tensor *x = rt_leaf(rt_rand(1, sh, REMAT_F32, -1, 1, 1));
    RT_OK(run_twice(BAD_DTYPE, x));
    remat_tensor *g = remat_tensor_grad(x);
    cr_assert_not_null(g);
    cr_assert_eq(remat_tensor_dtype(g), REMAT_F32, "leaf of f32 got an %s gradient",
                 remat_dtype_name(remat_tensor_dtype(g)));
    double v;
    RT_OK(remat_item_at(g, 1, &v));
    cr_assert_eq(v, 2.0);
    RT_OK(remat_set_grad(x, NULL));
    RT_OK(run_twice(INT_DTYPE, x));
    cr_assert_eq(remat_tensor_dtype(remat_tensor_grad(x)), REMAT_F32);
    remat_release(x);
}

Test(grad_validation, backward_shape_summed_or_refused) {
    int64_t sh[] = {3};
    remat_tensor *x = rt_leaf(rt_rand(1, sh, REMAT_F32, -1, 1, 1));
    RT_OK(run_twice(BIG_SHAPE, x)); /* (2, 3) for a (3) input: summed as PyTorch does */
    double v;
    RT_OK(remat_item_at(remat_tensor_grad(x), 0, &v));
    cr_assert_eq(v, 4.0);
    RT_FAILS(run_twice(BAD_SHAPE, x), REMAT_ESHAPE, "TwiceBackward");
    remat_release(x);
}

Test(grad_validation, backward_device_refused) {
    int64_t sh[] = {3};
    remat_tensor *x = rt_leaf(rt_rand(1, sh, REMAT_F32, -1, 1, 1));
    RT_FAILS(run_twice(BAD_DEVICE, x), REMAT_EDEVICE, "TwiceBackward");
    cr_assert_null(remat_tensor_grad(x));
    remat_release(x);
}

Test(grad_validation, set_grad_checks_dtype_and_device) {
    int64_t sh[] = {3};
    remat_tensor *x = rt_rand(1, sh, REMAT_F32, -1, 1, 1);
    remat_tensor *g64 = rt_rand(1, sh, REMAT_F64, -1, 1, 2), *gdev = NULL;
    RT_FAILS(remat_set_grad(x, g64), REMAT_EDTYPE, "f64");
    remat_device d = {rt_testdev_register(), 0};
    RT_OK(remat_zeros(&gdev, 1, sh, REMAT_F32, d));
    RT_FAILS(remat_set_grad(x, gdev), REMAT_EDEVICE, NULL);
    cr_assert_null(remat_tensor_grad(x));
    remat_release(gdev);
    remat_release(g64);
    remat_release(x);
}

Test(grad_validation, set_requires_grad_on_i64_is_einval) {
    remat_tensor *i = NULL;
    RT_OK(remat_arange(&i, 4));
    RT_FAILS(remat_set_requires_grad(i, true), REMAT_EINVAL, "floating point");
    remat_release(i);
}

/* A root's gradient on another device than its root: the message names it as the caller's
 * (it read "function the gradient given for a root returned a gradient [3] f32 on testdev:0
 * on testdev:0 for a tensor on cpu:0"). */
Test(grad_validation, root_gradient_on_another_device_is_named_as_such) {
    int64_t sh[] = {3};
    remat_tensor *x = rt_leaf(rt_rand(1, sh, REMAT_F32, -1, 1, 1)), *y = NULL, *go = NULL;
    RT_OK(remat_mul_scalar(&y, x, 2.0));
    RT_OK(remat_zeros(&go, 1, sh, REMAT_F32, (remat_device){rt_testdev_register(), 0}));
    RT_FAILS(remat_backward(1, &y, &go, false, 0, NULL), REMAT_EDEVICE,
             "backward: the gradient given for a root is [3] f32 on testdev:0 for a tensor on "
             "cpu:0");
    remat_release(go);
    remat_release(y);
    remat_release(x);
    cr_assert_eq(remat_live_tensors(), 0);
}
