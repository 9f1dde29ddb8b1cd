/* tests/support/by_hand.c — see by_hand.h. */
#include "by_hand.h"

static remat_status by_hand_forward(remat_function_ctx *ctx, void *ud, remat_tensor *const *in,
                                    int n_in, remat_tensor **out, int n_out) {
    (void)n_in;
    (void)n_out;
    remat_status rc = remat_ctx_save_for_backward(ctx, 1, in);
    return rc ? rc : remat_mul(&out[0], in[0], ud);
}

static remat_status by_hand_backward(remat_function_ctx *ctx, void *ud, remat_tensor *const *gout,
                                     int n_out, remat_tensor **gin, int n_in) {
    (void)n_out;
    (void)n_in;
    remat_tensor *x = NULL, *d = NULL, *y = NULL;
    remat_status rc = remat_ctx_saved(ctx, 0, &x);
    if (!rc) rc = remat_detach(&d, x);
    if (!rc) rc = remat_set_requires_grad(d, true);
    bool prev = remat_set_grad_enabled(true);
    if (!rc) rc = remat_mul(&y, d, ud);
    remat_set_grad_enabled(prev);
    if (!rc) rc = remat_backward(1, &y, gout, false, 0, NULL);
    if (!rc) gin[0] = remat_retain(remat_tensor_grad(d));
    remat_release(x);
    remat_release(d);
    remat_release(y);
    return rc;
}

const remat_function_def rt_by_hand_mul = {"ByHandMul", by_hand_forward, by_hand_backward, NULL};
