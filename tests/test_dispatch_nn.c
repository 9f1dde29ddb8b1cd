/* tests/test_dispatch_nn.c — what the reduce, loss and nn ops ask of the
 * driver (src/core/driver.c) and keep from before it: outputs handed
 * out but not differentiated (max's indices), by-product outputs that are
 * only saved (layer_norm's mean and rstd), outputs made only for the node
 * (dropout's keep bits), optional inputs, i64 inputs without an edge,
 * saves in slot order, dropout handing out its input itself, and the
 * argument checks in their old order. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "support/rt.h"

/* REMAT_TEST_DEVICE=fenced|cuda (make test-fenced, make test-cuda) puts the tensors that the
 * rt helpers make on that device (tests/support/rt.h) */
RT_ON_TEST_DEVICE

/* max: values and indices handed out; only the values are differentiable. */
Test(dispatch_nn, max_indices_are_handed_out_but_not_differentiated) {
    int64_t s[2] = {3, 5};
    remat_tensor *x = rt_leaf(rt_rand(2, s, REMAT_F32, -1, 1, 3)), *v = NULL, *ix = NULL;
    RT_OK(remat_max(&v, &ix, x, 1, false));
    cr_assert(remat_requires_grad(v));
    cr_assert_not(remat_requires_grad(ix), "indices must not require grad");
    cr_assert_null(remat_grad_fn(ix));
    cr_assert_eq(remat_tensor_dtype(ix), REMAT_I64);
    remat_node *n = remat_grad_fn(v);
    cr_assert_str_eq(remat_node_name(n), "MaxBackward");
    cr_assert_eq(remat_node_num_next(n), 1);
    remat_release(v);
    remat_release(ix);
    /* indices not asked for: released, also inside a scope */
    remat_scope *sc = NULL;
    RT_OK(remat_scope_begin(&sc));
    RT_OK(remat_max(&v, NULL, x, 0, true));
    RT_OK(remat_scope_end(sc));
    remat_release(x);
    cr_assert_eq(remat_live_tensors(), 0);
}

/* embedding and cross_entropy: the i64 input gets no edge. */
Test(dispatch_nn, index_inputs_get_no_edge) {
    int64_t ws[2] = {4, 3}, is[1] = {2};
    remat_tensor *w = rt_leaf(rt_rand(2, ws, REMAT_F64, -1, 1, 4));
    remat_tensor *idx = rt_tensor(1, is, REMAT_I64, (double[]){3, 1}), *y = NULL, *l = NULL;
    RT_OK(remat_embedding(&y, w, idx));
    cr_assert_eq(remat_node_num_next(remat_grad_fn(y)), 1);
    int64_t ls[2] = {2, 4};
    remat_tensor *logits = rt_leaf(rt_rand(2, ls, REMAT_F64, -1, 1, 5));
    RT_OK(remat_cross_entropy(&l, logits, idx, -100));
    cr_assert_eq(remat_node_num_next(remat_grad_fn(l)), 1);
    remat_release(y);
    remat_release(l);
    remat_release(logits);
    remat_release(idx);
    remat_release(w);
    cr_assert_eq(remat_live_tensors(), 0);
}

/* Saved-tensor hooks see layer_norm's saves in slot order: x, weight (NULL
 * is saved as an empty slot), mean, rstd; cross_entropy's: logits, targets, lse. */
typedef struct pack_log {
    int n;
    int ndim[8];
    int64_t numel[8];
    remat_dtype dtype[8];
} pack_log;

static void *log_pack(void *ud, remat_tensor *t) {
    pack_log *lg = ud;
    if (lg->n < 8) {
        lg->ndim[lg->n] = remat_ndim(t);
        lg->numel[lg->n] = remat_numel(t);
        lg->dtype[lg->n] = remat_tensor_dtype(t);
        lg->n++;
    }
    return remat_retain(t);
}
static remat_status log_unpack(void *ud, void *h, remat_tensor **out) {
    (void)ud;
    *out = remat_retain(h);
    return REMAT_OK;
}
static void log_free(void *ud, void *h) {
    (void)ud;
    remat_release(h);
}

Test(dispatch_nn, saves_in_slot_order) {
    int64_t s[3] = {2, 3, 5}, ns[1] = {5};
    remat_tensor *x = rt_leaf(rt_rand(3, s, REMAT_F32, -1, 1, 6));
    remat_tensor *w = rt_leaf(rt_rand(1, ns, REMAT_F32, -1, 1, 7)), *y = NULL;
    pack_log lg = {0};
    remat_saved_hooks h = {log_pack, log_unpack, log_free, &lg};
    RT_OK(remat_saved_hooks_push(&h));
    RT_OK(remat_layer_norm(&y, x, 1, w, NULL, 1e-5));
    RT_OK(remat_saved_hooks_pop());
    cr_assert_geq(lg.n, 3);
    cr_assert_eq(lg.numel[0], 30, "slot 0 is x");
    cr_assert_eq(lg.numel[1], 5, "slot 1 is the weight");
    cr_assert_eq(lg.ndim[lg.n - 1], 2, "mean and rstd (x's leading dims) come last");
    cr_assert_eq(lg.numel[lg.n - 1], 6);
    cr_assert_eq(lg.numel[lg.n - 2], 6);
    remat_release(y);

    int64_t ls[2] = {3, 4}, ts[1] = {3};
    remat_tensor *logits = rt_leaf(rt_rand(2, ls, REMAT_F32, -1, 1, 8));
    remat_tensor *t = rt_tensor(1, ts, REMAT_I64, (double[]){0, 3, 1}), *l = NULL;
    lg.n = 0;
    RT_OK(remat_saved_hooks_push(&h));
    RT_OK(remat_cross_entropy(&l, logits, t, -100));
    RT_OK(remat_saved_hooks_pop());
    cr_assert_eq(lg.n, 3);
    cr_assert_eq(lg.numel[0], 12, "slot 0 is the logits");
    cr_assert_eq(lg.dtype[1], REMAT_I64, "slot 1 is the targets");
    cr_assert_eq(lg.dtype[2], REMAT_F32, "slot 2 is the logsumexp");
    cr_assert_eq(lg.numel[2], 3);
    remat_release(l);
    remat_release(t);
    remat_release(logits);
    remat_release(w);
    remat_release(x);
    cr_assert_eq(remat_live_tensors(), 0);
}

/* dropout: eval mode hands out x itself; without a graph no keep bits are
 * made (only y is allocated). */
Test(dispatch_nn, dropout_identity_and_mask_only_for_the_node) {
    int64_t s[1] = {4096};
    remat_tensor *x = rt_rand(1, s, REMAT_F32, -1, 1, 9), *y = NULL;
    RT_OK(remat_dropout(&y, x, 0.5, false));
    cr_assert_eq(y, x, "eval-mode dropout returns its input itself");
    remat_release(y);
    size_t before = rt_device_current_bytes();
    rt_device_reset_peak();
    RT_OK(remat_dropout(&y, x, 0.5, true));
    cr_assert_eq(rt_device_stats().peak_bytes - before, 4096 * sizeof(float),
                 "no grad: only y is allocated");
    remat_release(y);
    RT_OK(remat_set_requires_grad(x, true));
    rt_device_reset_peak();
    RT_OK(remat_dropout(&y, x, 0.5, true));
    cr_assert_eq(rt_device_stats().peak_bytes - before, 4096 * sizeof(float) + 4096 / 8,
                 "with grad: y and one bit per element");
    remat_release(y);
    remat_release(x);
    cr_assert_eq(remat_live_tensors(), 0);
}

/* layer_norm: weight and bias optional; its checks keep their order (n_norm
 * before the weight's dtype). */
Test(dispatch_nn, layer_norm_optional_inputs_and_check_order) {
    int64_t s[2] = {2, 3}, ws[1] = {3};
    remat_tensor *x = rt_leaf(rt_rand(2, s, REMAT_F64, -1, 1, 10)), *y = NULL;
    remat_tensor *wi = rt_tensor(1, ws, REMAT_I64, (double[]){1, 2, 3});
    RT_OK(remat_layer_norm(&y, x, 1, NULL, NULL, 1e-5));
    cr_assert_eq(remat_node_num_next(remat_grad_fn(y)), 3);
    remat_release_p(&y);
    RT_FAILS(remat_layer_norm(&y, x, 3, wi, NULL, 1e-5), REMAT_EINVAL, "n_norm 3 out of range");
    RT_FAILS(remat_layer_norm(&y, x, 1, wi, NULL, 1e-5), REMAT_EDTYPE, "'weight' must be f32");
    RT_FAILS(remat_layer_norm(&y, NULL, 1, NULL, NULL, 1e-5), REMAT_EINVAL,
             "tensor argument 'x' is NULL");
    cr_assert_null(y);
    remat_release(wi);
    remat_release(x);
    cr_assert_eq(remat_live_tensors(), 0);
}

/* embedding: the weight's dtype is checked before the indices' presence, as
 * before the driver. */
Test(dispatch_nn, embedding_check_order) {
    int64_t ws[2] = {4, 3};
    remat_tensor *wi = rt_tensor(2, ws, REMAT_I64, (double[12]){0}), *y = NULL;
    RT_FAILS(remat_embedding(&y, wi, NULL), REMAT_EDTYPE, "'weight' must be f32, f64 or bf16");
    remat_release(wi);
    cr_assert_eq(remat_live_tensors(), 0);
}
