/* tests/test_backward_memory.c — backward passes let go of saved tensors as
 * early as they can: linear frees its saved input between dW and dx, and
 * mse_loss writes the prediction's gradient over the saved prediction when
 * nothing else holds it. Checked through the allocator's event sequence;
 * with retain_graph, or while the user holds the tensor, nothing changes. */
#include <criterion/criterion.h>
#include <stdlib.h>
#include <string.h>

#include "support/rt.h"

#define MAX_EVENTS 256
static int64_t g_events[MAX_EVENTS];
static int g_n_events;

static void record(void *ud, remat_device dev, int64_t delta, size_t current) {
    (void)ud;
    (void)dev;
    (void)current;
    if (g_n_events < MAX_EVENTS) g_events[g_n_events++] = delta;
}

static void observe(bool on) {
    if (on) g_n_events = 0;
    remat_set_alloc_observer(on ? record : NULL, NULL);
}

/* index of the first event equal to delta, or -1 */
static int first_event(int64_t delta) {
    for (int i = 0; i < g_n_events; i++)
        if (g_events[i] == delta) return i;
    return -1;
}

static int count_events(int64_t delta) {
    int n = 0;
    for (int i = 0; i < g_n_events; i++) n += g_events[i] == delta;
    return n;
}

static remat_tensor *leaf(int ndim, const int64_t *shape, unsigned seed, bool grad) {
    remat_tensor *t = rt_rand(ndim, shape, REMAT_F32, -1, 1, seed);
    RT_OK(remat_set_requires_grad(t, grad));
    return t;
}

static remat_tensor *take_grad(remat_tensor *t) {
    remat_tensor *g = remat_retain(remat_tensor_grad(t));
    RT_OK(remat_set_grad(t, NULL));
    return g;
}

/* y = linear(2 x, w); loss = sum(y). h = 2x is held by the graph alone. */
static remat_tensor *linear_loss(remat_tensor *x, remat_tensor *w) {
    remat_tensor *h = NULL, *y = NULL, *l = NULL;
    RT_OK(remat_mul_scalar(&h, x, 2.0));
    RT_OK(remat_linear(&y, h, w, NULL));
    RT_OK(remat_sum_all(&l, y));
    remat_release(h);
    remat_release(y);
    return l;
}

Test(backward_memory, linear_frees_saved_input_before_allocating_dx) {
    int64_t sx[] = {64, 96}, sw[] = {8, 96};
    const int64_t h_bytes = 64 * 96 * 4;
    remat_tensor *x = leaf(2, sx, 1, true), *w = leaf(2, sw, 2, true);

    /* retain_graph: the saved input stays through the pass */
    remat_tensor *l = linear_loss(x, w);
    observe(true);
    RT_OK(remat_backward(1, &l, NULL, true, 0, NULL));
    observe(false);
    int dx_alloc = first_event(h_bytes), h_free = first_event(-h_bytes);
    cr_assert(dx_alloc >= 0, "dx (%lld bytes) allocated", (long long)h_bytes);
    cr_assert(h_free < 0 || h_free > dx_alloc, "retain_graph: h kept until dx exists");
    remat_tensor *gx_keep = take_grad(x), *gw_keep = take_grad(w);
    /* and a second pass over the retained graph still works */
    RT_OK(remat_backward(1, &l, NULL, false, 0, NULL));
    remat_tensor *gx2 = take_grad(x), *gw2 = take_grad(w);
    cr_assert(rt_bitwise_equal(gx2, gx_keep) && rt_bitwise_equal(gw2, gw_keep));
    remat_release(l);

    /* without it, h goes between dW and dx */
    l = linear_loss(x, w);
    observe(true);
    RT_OK(remat_backward_scalar(l));
    observe(false);
    dx_alloc = first_event(h_bytes);
    h_free = first_event(-h_bytes);
    cr_assert(h_free >= 0 && dx_alloc > h_free, "h freed (event %d) before dx allocated (%d)",
              h_free, dx_alloc);
    remat_tensor *gx = take_grad(x), *gw = take_grad(w);
    cr_assert(rt_bitwise_equal(gx, gx_keep) && rt_bitwise_equal(gw, gw_keep),
              "same gradients either way");
    remat_release(l);

    remat_tensor *all[] = {gx_keep, gw_keep, gx2, gw2, gx, gw, x, w};
    for (size_t i = 0; i < sizeof all / sizeof *all; i++) remat_release(all[i]);
    cr_assert_eq(remat_live_tensors(), 0);
}

/* loss = mse(linear(x, w), target); x and target need no gradient, so the
 * backward's only tensor of the prediction's size is its gradient. */
typedef struct mse_run {
    remat_tensor *gw;
    int pred_allocs; /* allocations of pred's size during backward */
} mse_run;

static mse_run mse_step(remat_tensor *x, remat_tensor *w, remat_tensor *target, bool hold_pred,
                        bool retain) {
    const int64_t pred_bytes = 64 * 32 * 4;
    remat_tensor *pred = NULL, *l = NULL;
    RT_OK(remat_linear(&pred, x, w, NULL));
    RT_OK(remat_mse_loss(&l, pred, target));
    double *before = rt_values(pred);
    if (!hold_pred) remat_release_p(&pred);
    observe(true);
    RT_OK(remat_backward(1, &l, NULL, retain, 0, NULL));
    observe(false);
    mse_run r = {take_grad(w), count_events(pred_bytes)};
    if (retain) { /* the saved prediction is intact: a second pass agrees */
        RT_OK(remat_backward(1, &l, NULL, false, 0, NULL));
        remat_tensor *again = take_grad(w);
        cr_assert(rt_bitwise_equal(again, r.gw), "second pass over the retained graph");
        remat_release(again);
    }
    if (hold_pred) { /* the user's tensor is never written */
        double *after = rt_values(pred);
        cr_assert(memcmp(before, after, sizeof(double) * 64 * 32) == 0, "pred unchanged");
        free(after);
    }
    free(before);
    remat_release(pred);
    remat_release(l);
    return r;
}

Test(backward_memory, mse_writes_its_gradient_over_the_saved_prediction) {
    int64_t sx[] = {64, 16}, sw[] = {32, 16}, st[] = {64, 32};
    remat_tensor *x = leaf(2, sx, 3, false), *w = leaf(2, sw, 4, true);
    remat_tensor *target = leaf(2, st, 5, false);
    mse_run held = mse_step(x, w, target, true, false);
    mse_run kept = mse_step(x, w, target, false, true);
    mse_run lean = mse_step(x, w, target, false, false);
    cr_assert_eq(held.pred_allocs, 1, "the user holds pred: a new gradient buffer");
    cr_assert_eq(kept.pred_allocs, 1, "retain_graph: a new gradient buffer");
    cr_assert_eq(lean.pred_allocs, 0, "pred held by the graph alone: written in place");
    cr_assert(rt_bitwise_equal(lean.gw, held.gw) && rt_bitwise_equal(kept.gw, held.gw),
              "same gradients every way");
    remat_tensor *all[] = {held.gw, kept.gw, lean.gw, x, w, target};
    for (size_t i = 0; i < sizeof all / sizeof *all; i++) remat_release(all[i]);
    cr_assert_eq(remat_live_tensors(), 0);
}
