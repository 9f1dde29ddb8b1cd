/* tests/test_grad_partial.c — issue 14 item 11: remat_grad with a non-leaf
 * input stops at that input, as PyTorch does: the input's own backward node is
 * neither run nor freed, so two grad calls over consecutive parts of one
 * graph both work without retain_graph (z -> y, then y -> x). */
#include <string.h>

#include "support/rt.h"

Test(grad_partial, consecutive_parts_of_one_graph) {
    int64_t sh[] = {5};
    remat_tensor *x = rt_leaf(rt_rand(1, sh, REMAT_F64, 0.5, 1.5, 1));
    remat_tensor *y = NULL, *z = NULL, *gy = NULL, *gx = NULL;
    RT_OK(remat_exp(&y, x)); /* y = exp(x): ExpBackward saves y */
    RT_OK(remat_log(&z, y)); /* z = log(y) */
    remat_tensor *zs = NULL;
    RT_OK(remat_sum_all(&zs, z));
    RT_OK(remat_grad(1, &zs, NULL, 1, &y, false, false, &gy)); /* dz/dy = 1/y */
    RT_OK(remat_grad(1, &y, &gy, 1, &x, false, false, &gx));   /* (1/y) * exp(x) = 1 */
    for (int i = 0; i < 5; i++) {
        double v;
        RT_OK(remat_item_at(gx, i, &v));
        cr_assert_float_eq(v, 1.0, 1e-12);
    }
    /* the second pass freed y's graph: a third one fails as in PyTorch */
    remat_tensor *g2 = NULL;
    RT_FAILS(remat_grad(1, &y, &gy, 1, &x, false, false, &g2), REMAT_ESTATE, NULL);
    remat_release(gx);
    remat_release(gy);
    remat_release(zs);
    remat_release(z);
    remat_release(y);
    remat_release(x);
}

/* The same through remat_backward(inputs=) of a non-leaf (into y's .grad):
 * x's part of the graph is still there for a later backward. */
Test(grad_partial, backward_inputs_non_leaf_keeps_the_rest) {
    int64_t sh[] = {3};
    remat_tensor *x = rt_leaf(rt_rand(1, sh, REMAT_F64, 0.5, 1.5, 2));
    remat_tensor *y = NULL, *z = NULL, *zs = NULL;
    RT_OK(remat_exp(&y, x));
    RT_OK(remat_mul(&z, y, y));
    RT_OK(remat_sum_all(&zs, z));
    RT_OK(remat_backward(1, &zs, NULL, false, 1, &y));
    cr_assert_null(remat_tensor_grad(x), "x's gradient was computed past the requested input");
    remat_tensor *ys = NULL;
    RT_OK(remat_sum_all(&ys, y));
    RT_OK(remat_backward_scalar(ys)); /* y's own graph was not freed */
    cr_assert_not_null(remat_tensor_grad(x));
    remat_release(ys);
    remat_release(zs);
    remat_release(z);
    remat_release(y);
    remat_release(x);
}
