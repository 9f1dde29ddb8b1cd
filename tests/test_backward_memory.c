/* tests/test_backward_memory.c — backward passes let go of saved tensors as
 * early as they can: linear frees its saved input between dW and dx, and
 * mse_loss writes the prediction's gradient over the saved prediction when
 * nothing else holds it; the elementwise unary backwards (gelu's at a
 * checkpointed MLP's peak) write dx over their incoming gradient when the
 * engine's buffer is its only holder. Checked through the allocator's event
 * sequence and exact peak; with retain_graph, or while the user holds the
 * tensor, nothing changes. */
#include <criterion/criterion.h>
#include <stdlib.h>
#include <string.h>

#include "backends/cpu/gemm.h"
#include "remat/autocast.h"
#include "support/models.h"
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

/* ---- unary backward over the dying gradient ------------------------------------------ */
static remat_tensor *g_hooked; /* the gradient a hook kept (a second holder) */

static remat_status keep_grad(void *ud, remat_tensor *grad, remat_tensor **replacement) {
    (void)ud;
    *replacement = NULL;
    remat_release(g_hooked);
    g_hooked = remat_retain(grad);
    return REMAT_OK;
}

/* z = 3 gelu(2 x) (approx a) backwarded with a gradient of ones the test
 * holds; with hook, the gradient reaching gelu is also held by a hook. Returns
 * x's gradient; *allocs: allocations of x's size during the backward. */
static remat_tensor *gelu_chain(remat_tensor *x, remat_gelu_approx a, bool hook, int *allocs) {
    remat_tensor *h = NULL, *y = NULL, *z = NULL, *ones = NULL;
    RT_OK(remat_mul_scalar(&h, x, 2.0));
    RT_OK(remat_gelu(&y, h, a));
    RT_OK(remat_mul_scalar(&z, y, 3.0));
    if (hook) RT_OK(remat_register_hook(y, keep_grad, NULL));
    RT_OK(remat_full(&ones, remat_ndim(x), remat_shape(x), 1.0, remat_tensor_dtype(x),
                     REMAT_DEVICE_CPU));
    remat_release(h);
    remat_release(y);
    const int64_t bytes = remat_numel(x) * (int64_t)remat_dtype_size(remat_tensor_dtype(x));
    observe(true);
    RT_OK(remat_backward(1, &z, &ones, false, 0, NULL));
    observe(false);
    *allocs = count_events(bytes);
    remat_release(z);
    remat_release(ones);
    return take_grad(x);
}

Test(backward_memory, unary_backward_writes_over_the_dying_gradient) {
    /* a tail past whole blocks, and one size past the threaded kernels' threshold */
    const int64_t sizes[] = {4096 * 3 + 37, 40000 + 13};
    const remat_dtype dtypes[] = {REMAT_F32, REMAT_F64, REMAT_BF16};
    const remat_gelu_approx approx[] = {REMAT_GELU_TANH, REMAT_GELU_ERF};
    for (int si = 0; si < 2; si++)
        for (int di = 0; di < 3; di++)
            for (int ai = 0; ai < 2; ai++) {
                remat_tensor *x = leaf(1, &sizes[si], 7 + (unsigned)si, true);
                if (dtypes[di] != REMAT_F32) {
                    remat_tensor *c = NULL;
                    RT_OK(remat_to_dtype(&c, x, dtypes[di]));
                    remat_release(x);
                    x = rt_leaf(c);
                }
                int held_allocs, lean_allocs;
                remat_tensor *held = gelu_chain(x, approx[ai], true, &held_allocs);
                /* what the hook kept is the gradient gelu received, untouched: 3 */
                cr_assert(g_hooked && rt_item_at(g_hooked, 0) == 3.0 &&
                          rt_item_at(g_hooked, sizes[si] - 1) == 3.0);
                remat_release_p(&g_hooked);
                remat_tensor *lean = gelu_chain(x, approx[ai], false, &lean_allocs);
                /* ones are held by the test: mul's backward allocates; then gelu's and the
                 * other mul's write over it, and x's .grad takes it */
                cr_assert_eq(lean_allocs, 1, "%s n=%lld: %d gradient buffers",
                             remat_dtype_name(dtypes[di]), (long long)sizes[si], lean_allocs);
                cr_assert_eq(held_allocs, 2, "hooked: gelu's dx is a new buffer (%d)", held_allocs);
                cr_assert(rt_bitwise_equal(lean, held), "%s n=%lld: same gradient in place",
                          remat_dtype_name(dtypes[di]), (long long)sizes[si]);
                remat_release(lean);
                remat_release(held);
                remat_release(x);
            }
    cr_assert_eq(remat_live_tensors(), 0);
}

/* The MLP block y = x + w2 gelu(w1 x + b1) + b2 on x (sx: rows, D) backwarded
 * once plain and once checkpointed (non-reentrant), under cpu autocast when
 * `autocast`, each from the same gradient the test holds. The gradients of
 * the n tensors `of` must be bitwise equal between the two; returns the bytes
 * the checkpointed backward added at its peak. */
#define MAX_OF 5
static size_t checkpointed_block_peak(rt_mlp_block *b, remat_tensor *x, const int64_t *sx,
                                      bool autocast, remat_tensor *const *of, int n) {
    remat_tensor *grads[2][MAX_OF];
    size_t peak = 0;
    cr_assert(n <= MAX_OF);
    for (int ck = 0; ck < 2; ck++) {
        remat_tensor *y = NULL, *gy = NULL;
        const remat_checkpoint_options o = {.use_reentrant = REMAT_OPT_FALSE};
        remat_autocast_state prev;
        if (autocast) RT_OK(remat_autocast_begin(&prev, REMAT_CPU, REMAT_BF16, true));
        if (ck) RT_OK(remat_checkpoint(rt_mlp_block_fn, b, 1, &x, 1, &y, &o));
        else RT_OK(rt_mlp_block_fn(b, &x, 1, &y, 1));
        if (autocast) remat_autocast_end(&prev);
        gy = rt_rand(2, sx, REMAT_F32, -1, 1, 12);
        size_t base = remat_cpu_current_bytes();
        RT_OK(remat_alloc_reset_peak(REMAT_DEVICE_CPU));
        RT_OK(remat_backward(1, &y, &gy, false, 0, NULL));
        if (ck) peak = remat_cpu_peak_bytes() - base;
        for (int i = 0; i < n; i++) grads[ck][i] = take_grad(of[i]);
        remat_release(y);
        remat_release(gy);
    }
    for (int i = 0; i < n; i++) {
        cr_assert(rt_bitwise_equal(grads[0][i], grads[1][i]), "gradient %d: checkpointed = plain",
                  i);
        remat_release(grads[0][i]);
        remat_release(grads[1][i]);
    }
    return peak;
}

/* The block in f32, rows R, width D, hidden H. Exact bytes the checkpointed
 * backward adds at its peak: in the second linear's backward, the recomputed
 * h and a = gelu(h) (R H each), dW2 (H D) and db2 (D), then a goes before
 * its dx (R H) is made. gelu's dx is written over that dx instead of a third
 * R H buffer (which made the peak 3 R H + H D + D). */
Test(backward_memory, checkpointed_mlp_backward_peak_is_exact) {
    const int R = 128, D = 32, H = 256;
    rt_mlp_block b;
    rt_mlp_block_init(&b, D, H, 0.0, REMAT_F32, 3);
    int64_t sx[] = {R, D};
    remat_tensor *x = leaf(2, sx, 11, true), *of[1 + 4] = {x};
    int np = rt_mlp_block_params(&b, of + 1);
    size_t peak = checkpointed_block_peak(&b, x, sx, false, of, 1 + np);
    cr_assert_eq(peak, (size_t)4 * (2 * R * H + H * D + D), "checkpointed backward peak %zu bytes",
                 peak);
    remat_release(x);
    rt_mlp_block_free(&b);
    cr_assert_eq(remat_live_tensors(), 0);
}

/* The same block under cpu autocast (bf16 GEMMs, f32 weights kept; x + y is
 * autocast's uncast f32 + bf16 add), R 1024, D 256, H 2048, w1 and b1 frozen
 * (so the first linear's backward, which would add dW1, is small). The
 * backward's peak is in the second linear's backward: the recomputed h = w1 x
 * + b1 (R H bf16, gelu's saved input), dW2 (D H f32), dx2 (R H bf16; in the
 * dW2 GEMM before it, a = gelu(h), as large) and 512 KiB of rounded panels:
 * in dx2's GEMM, of W2 and of y's gradient gy (f32, handed over unrounded:
 * the add's other input holds it anyway); in dW2's, of gy. Before, add's
 * backward rounded gy into a bf16 copy (R D, 512 KiB more) and dx2's GEMM
 * rounded W2 whole (D H bf16, 1 MiB, where its panels took 512 KiB alone).
 * oneDNN's scratchpads of 64 KiB or more are counted too (gemm_bf16.c): the
 * peak is that plus at most what they held at once (rm_bgemm_scratchpad_most).
 * Where the bf16 GEMMs run through f32 (no AVX512_BF16/AMX: rm_bgemm_native
 * false) there are no panels: the f32 operands are rounded as the GEMM widens
 * them into its scratch, which the allocator counts (src/backends/cpu/
 * workspace.h): the peak is in dx2's GEMM, the same three plus its widened
 * gy, W2 and f32 dx2, 4 (R D + D H + R H) bytes.
 * Gradients equal checkpointed and plain. */
Test(backward_memory, checkpointed_mlp_autocast_peak_is_exact) {
    const size_t R = 1024, D = 256, H = 2048;
    rt_mlp_block b;
    rt_mlp_block_init(&b, (int)D, (int)H, 0.0, REMAT_F32, 3);
    RT_OK(remat_set_requires_grad(b.w1, false));
    RT_OK(remat_set_requires_grad(b.b1, false));
    int64_t sx[] = {(int64_t)R, (int64_t)D};
    remat_tensor *x = leaf(2, sx, 11, true), *of[] = {x, b.w2, b.b2};
    rm_bgemm_scratchpad_most(true);
    size_t peak = checkpointed_block_peak(&b, x, sx, true, of, 3);
    size_t pads = rm_bgemm_scratchpad_most(false);
    size_t last = rm_bgemm_native() ? 512 * 1024 : 4 * (R * D + D * H + R * H);
    size_t exact = 2 * R * H + 4 * D * H + 2 * R * H + last;
    cr_assert(peak >= exact && peak <= exact + pads,
              "checkpointed backward peak under autocast %zu bytes, %zu expected (+ at most %zu "
              "of oneDNN's scratchpads)",
              peak, exact, pads);
    remat_release(x);
    rt_mlp_block_free(&b);
    cr_assert_eq(remat_live_tensors(), 0);
}
