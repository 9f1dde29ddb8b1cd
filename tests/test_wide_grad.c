/* tests/test_wide_grad.c — an f32 gradient handed unrounded to linear's bf16
 * output under cpu autocast (buffer donation, rm_donation_read_wide,
 * src/autograd/engine.c keep_wide; linear rounds it panel by panel as its GEMMs read it):
 * gradients bitwise what they were when the engine rounded it first (a hook
 * on the output keeps the old path), at 1, 2 and 3 threads and odd sizes; hooks
 * and captures see bf16; a second contribution is summed in bf16 as before;
 * create_graph is unchanged. The memory it saves: test_backward_memory's
 * checkpointed_mlp_autocast_peak_is_exact.
 *
 * What "the same" means: h's gradient (g as it is) and b's (the column sums of g
 * rounded, the library's own loop) are bitwise the rounded path's. x's and w's come
 * from bf16 GEMMs of the same rounded operands, but the wide path cuts them into
 * panels (M, N) where the rounded path runs one GEMM, and the order in which a GEMM
 * sums its f32 products is the kernel's: it depends on the ISA and on M and N
 * (oneDNN's AMX kernels; the f32 fallback's sgemm under AVX2 or AVX-512 without bf16).
 * So they are asserted equal up to f32 summation order (rt_assert_same_gemm), which
 * still fails by far when g is rounded differently from rm_f32_to_bf16 or a panel
 * lands in the wrong place. */
#include <criterion/criterion.h>
#include <omp.h>

#include "autograd/graph.h"
#include "backends/cpu/gemm.h"
#include "core/core.h"
#include "remat/autocast.h"
#include "support/fenced.h"
#include "support/rt.h"

/* A hook that records the dtype it saw and changes nothing. */
static remat_dtype g_seen;
static int g_calls;
static remat_status see_dtype(void *ud, remat_tensor *grad, remat_tensor **rep) {
    (void)ud;
    g_seen = grad->dtype;
    g_calls++;
    *rep = NULL;
    return REMAT_OK;
}

typedef struct net {
    remat_tensor *h, *x, *w, *b; /* h (R, O) f32: the residual stream; x (R, I) f32 */
} net;

static void net_init(net *n, int64_t R, int64_t O, int64_t I, unsigned seed) {
    int64_t sh[] = {R, O}, sx[] = {R, I}, sw[] = {O, I}, sb[] = {O};
    n->h = rt_leaf(rt_rand(2, sh, REMAT_F32, -1, 1, seed));
    n->x = rt_leaf(rt_rand(2, sx, REMAT_F32, -1, 1, seed + 1));
    n->w = rt_leaf(rt_rand(2, sw, REMAT_F32, -1, 1, seed + 2));
    n->b = rt_leaf(rt_rand(1, sb, REMAT_F32, -1, 1, seed + 3));
}

/* The gradient every run starts backward from: r's shape (R, O), f32. */
static remat_tensor *grad_of_r(int64_t R, int64_t O) {
    return rt_rand(2, (int64_t[]){R, O}, REMAT_F32, -1, 1, 99);
}

static void net_free(net *n) {
    remat_release(n->h), remat_release(n->x), remat_release(n->w), remat_release(n->b);
}

/* Under autocast: y = linear(x, w, b) (bf16), r = h + y (f32; uses y `uses`
 * times: r = 3 (h + y) + y for 2; uses -1: r = h + tag(y), as the GPT block
 * names its tensors), backward from r with gradient gr (f32); hook: a hook on
 * y. The gradients of h, x, w, b go to grads[0..4). */
static size_t g_bwd_peak; /* bytes the last run's backward added at its peak */
static void run(net *n, int uses, bool hook, const remat_backward_options *opts,
                remat_tensor **grads) {
    remat_autocast_state ac;
    remat_tensor *y = NULL, *r = NULL, *r2 = NULL, *gr = NULL, *yt = NULL;
    RT_OK(remat_autocast_begin(&ac, REMAT_CPU, REMAT_BF16, true));
    RT_OK(remat_linear(&y, n->x, n->w, n->b));
    if (uses < 0) RT_OK(remat_tag(&yt, y, "y"));
    RT_OK(remat_add(&r, n->h, yt ? yt : y));
    remat_release(yt);
    if (uses == 2) { /* r2 = 3 (h + y) + y: y's gradients g and 3 g */
        remat_tensor *s = NULL;
        RT_OK(remat_mul_scalar(&s, r, 3.0));
        RT_OK(remat_add(&r2, s, y));
        remat_release(s);
        remat_release(r);
        r = r2;
    }
    remat_autocast_end(&ac);
    cr_assert_eq(y->dtype, REMAT_BF16);
    cr_assert_eq(r->dtype, REMAT_F32);
    if (hook) RT_OK(remat_register_hook(y, see_dtype, NULL));
    gr = grad_of_r(r->shape[0], r->shape[1]);
    remat_tensor *in[4] = {n->h, n->x, n->w, n->b};
    size_t base = remat_cpu_current_bytes();
    RT_OK(remat_alloc_reset_peak(REMAT_DEVICE_CPU));
    RT_OK(remat_grad_ex(1, &r, &gr, 4, in, opts, grads));
    g_bwd_peak = remat_cpu_peak_bytes() - base;
    remat_release(y), remat_release(r), remat_release(gr);
}

/* Asserts the gradients of two runs the same: h's and b's bitwise, x's and w's
 * as the same bf16 GEMMs of the same rounded operands (see the top): dx = g W
 * (rounded to bf16, then widened back to x's f32), dW = gᵀ x (f32). gscale: y's
 * gradient is at most gscale |g| (g summed from several uses). */
static void assert_same_grads(const net *n, remat_tensor **a, remat_tensor **b, double gscale,
                              const char *what) {
    remat_tensor *g = grad_of_r(n->h->shape[0], n->h->shape[1]), *gt = NULL;
    RT_OK(remat_transpose(&gt, g, 0, 1));
    remat_tensor *sx = rt_abs_product_bf16(g, gscale, n->w, 1.0);
    remat_tensor *sw = rt_abs_product_bf16(gt, gscale, n->x, 1.0);
    char m[160];
    cr_assert(rt_bitwise_equal(a[0], b[0]), "%s: h's gradient differs", what);
    cr_assert(rt_bitwise_equal(a[3], b[3]), "%s: b's gradient differs", what);
    snprintf(m, sizeof m, "%s: x's gradient", what);
    rt_assert_same_gemm(a[1], b[1], sx, true, m);
    snprintf(m, sizeof m, "%s: w's gradient", what);
    rt_assert_same_gemm(a[2], b[2], sw, false, m);
    remat_release(sx), remat_release(sw), remat_release(gt), remat_release(g);
}

static void release4(remat_tensor **g) {
    for (int i = 0; i < 4; i++) remat_release_p(&g[i]);
}

/* Kept wide (no hook) against rounded first by the engine (hook): the same
 * (assert_same_grads), with sizes that split g into several panels (R O > 256 K elements) and
 * odd ones, at 1, 2 and 3 threads (src/backends/cpu/matmul.c's
 * gemm_panels_team: several threads share B's panel, each rounds its own of A's); the hook saw bf16. */
Test(wide_grad, linear_gradients_equal_the_rounded_path) {
    const int64_t shapes[][3] = {{1000, 384, 777}, {333, 1536, 385}, {65, 17, 33}, {2048, 384, 96}};
    int prev = omp_get_max_threads();
    for (int th = 1; th <= 3; th++) {
        omp_set_num_threads(th);
        for (int s = 0; s < 4; s++) {
            net n;
            net_init(&n, shapes[s][0], shapes[s][1], shapes[s][2], 10 + (unsigned)s);
            remat_tensor *wide[4], *old[4];
            run(&n, 1, false, NULL, wide);
            g_calls = 0;
            run(&n, 1, true, NULL, old);
            cr_assert_eq(g_calls, 1);
            cr_assert_eq(g_seen, REMAT_BF16, "the hook sees y's dtype");
            char what[64];
            snprintf(what, sizeof what, "%d threads, shape %d, wide vs rounded", th, s);
            assert_same_grads(&n, wide, old, 1.0, what);
            release4(wide), release4(old);
            net_free(&n);
        }
    }
    omp_set_num_threads(prev);
    cr_assert_eq(remat_live_tensors(), 0);
}

/* y used twice (gradients g and 3 g): the first f32 gradient is kept wide,
 * the second rounds it and the two are summed in bf16, as when both were
 * rounded on arrival (the hook's path), so linear's GEMMs get the same
 * rounded operands (assert_same_grads, with |y's gradient| <= 4.1 |g|).
 * Summing them in f32 and rounding once differs here. */
Test(wide_grad, two_contributions_sum_in_bf16) {
    net n;
    net_init(&n, 256, 384, 200, 40);
    remat_tensor *wide[4], *old[4];
    run(&n, 2, false, NULL, wide);
    run(&n, 2, true, NULL, old);
    assert_same_grads(&n, wide, old, 4.1, "y used twice, wide vs rounded");
    release4(wide), release4(old);
    net_free(&n);
    cr_assert_eq(remat_live_tensors(), 0);
}

/* remat_grad with y among the inputs: the captured gradient is y's dtype. */
Test(wide_grad, a_capture_sees_bf16) {
    net n;
    net_init(&n, 64, 96, 80, 50);
    remat_autocast_state ac;
    remat_tensor *y = NULL, *r = NULL, *gr = NULL, *gy = NULL;
    RT_OK(remat_autocast_begin(&ac, REMAT_CPU, REMAT_BF16, true));
    RT_OK(remat_linear(&y, n.x, n.w, n.b));
    RT_OK(remat_add(&r, n.h, y));
    remat_autocast_end(&ac);
    gr = rt_rand(r->ndim, r->shape, REMAT_F32, -1, 1, 7);
    RT_OK(remat_grad(1, &r, &gr, 1, &y, false, false, &gy));
    cr_assert_eq(gy->dtype, REMAT_BF16);
    remat_tensor *ref = NULL;
    RT_OK(remat_to_dtype(&ref, gr, REMAT_BF16));
    cr_assert(rt_bitwise_equal(gy, ref), "y's gradient is gr rounded");
    remat_release(y), remat_release(r), remat_release(gr), remat_release(gy), remat_release(ref);
    net_free(&n);
    cr_assert_eq(remat_live_tensors(), 0);
}

/* create_graph: the add's backward rounds y's gradient itself (a
 * differentiable cast) and linear's differentiable backward runs on bf16, as
 * before: the same with and without a hook on y, and the gradients keep
 * their inputs' dtypes. */
Test(wide_grad, create_graph_is_unchanged) {
    net n;
    net_init(&n, 128, 64, 48, 60);
    const remat_backward_options o = {.create_graph = true};
    remat_tensor *a[4], *b[4], *first[4];
    run(&n, 1, false, &o, a);
    g_calls = 0;
    run(&n, 1, true, &o, b);
    cr_assert_eq(g_calls, 1);
    cr_assert_eq(g_seen, REMAT_BF16);
    run(&n, 1, false, NULL, first);
    for (int i = 0; i < 4; i++) {
        cr_assert(rt_bitwise_equal(a[i], b[i]), "gradient %d", i);
        cr_assert_eq(a[i]->dtype, REMAT_F32, "gradient %d in its input's dtype", i);
        rt_assert_close(a[i], first[i], 2e-2, 2e-2, "create_graph against first order");
    }
    release4(a), release4(b), release4(first);
    net_free(&n);
    cr_assert_eq(remat_live_tensors(), 0);
}

/* Through a tag (an identity that hands g on as it is: the GPT block tags
 * its linears' outputs) the gradient reaches the linear wide: the same
 * gradients as the rounded path, and a backward peak below the bf16 copy of
 * g (R O) that the rounded path makes (with I small, linear's backward is
 * the peak). */
Test(wide_grad, through_a_tag) {
    const int64_t R = 1024, O = 384, I = 32;
    net n;
    net_init(&n, R, O, I, 70);
    remat_tensor *wide[4], *old[4];
    size_t peak[2];
    for (int h = 0; h < 2; h++) {
        run(&n, -1, h == 1, NULL, h ? old : wide);
        peak[h] = g_bwd_peak;
    }
    cr_assert_eq(g_seen, REMAT_BF16, "the hook sees y's dtype");
    assert_same_grads(&n, wide, old, 1.0, "through a tag, wide vs rounded");
    if (rm_bgemm_native()) {
        /* g's bf16 copy alone is 2 R O (768 KiB); wide, the whole backward stays under it
         * (panels of g in a scratch of at most 512 KiB, dW, dx; oneDNN's scratchpads of
         * 64 KiB or more are counted too) */
        size_t pads = rm_bgemm_scratchpad_most(false);
        cr_assert_lt(peak[0], (size_t)(2 * R * O) + pads,
                     "backward peak %zu bytes wide (%zu of "
                     "oneDNN's scratchpads at most)",
                     peak[0], pads);
        cr_assert_gt(peak[1], (size_t)(2 * R * O), "rounded path %zu bytes", peak[1]);
    } else {
        /* through f32 the GEMMs widen g whole into their counted scratch either way
         * (src/backends/cpu/workspace.h); the rounded path holds its bf16 copy too */
        cr_assert_geq(peak[1], peak[0] + (size_t)(2 * R * O),
                      "backward peak %zu bytes wide, %zu rounded", peak[0], peak[1]);
    }
    release4(wide), release4(old);
    net_free(&n);
    cr_assert_eq(remat_live_tensors(), 0);
}

/* The device decides (buffer donation: RM_KF_WIDE_GRAD in the backend's record): a node made
 * by hand on device d whose backward names `reader` (rm_donation_read_wide; < 0: none) sees
 * the dtype of the gradient the engine hands it for its bf16 output y, given an f32 gradient
 * for y that something else holds too (so the buffer outlives the node anyway). */
static remat_dtype g_handed;
static remat_status note_dtype(remat_node *node, remat_tensor *const *gout, remat_tensor **gin) {
    (void)node, (void)gin;
    g_handed = gout[0]->dtype;
    return REMAT_OK;
}

static remat_dtype handed(remat_device d, int reader) {
    int64_t sh[] = {8, 16};
    remat_tensor *y32 = rt_to_device(rt_rand(2, sh, REMAT_F32, -1, 1, 4), d), *y = NULL;
    RT_OK(remat_to_dtype(&y, y32, REMAT_BF16));
    remat_release(y32);
    remat_node *node = NULL;
    RT_OK(rm_node_new(&node, "Reader", note_dtype, 0, NULL, 1, 0));
    if (reader >= 0) rm_donation_read_wide(node, reader);
    rm_node_set_output(node, 0, y);
    rm_node_release(node); /* y holds it */
    remat_tensor *gy = rt_to_device(rt_rand(2, sh, REMAT_F32, -1, 1, 5), d);
    remat_tensor *other = remat_retain(gy); /* the other holder */
    g_handed = (remat_dtype)-1;
    RT_OK(remat_backward(1, &y, &gy, false, 0, NULL));
    remat_release(other), remat_release(gy), remat_release(y);
    cr_assert_eq(remat_live_tensors(), 0);
    return g_handed;
}

Test(wide_grad, the_device_decides) {
    remat_device cpu = REMAT_DEVICE_CPU;
    cr_assert_eq(handed(cpu, -1), REMAT_BF16, "a node that reads none: rounded");
    cr_assert_eq(handed(cpu, RM_K_MATMUL), REMAT_F32, "the cpu's GEMMs read it wide");
    cr_assert_eq(handed(cpu, RM_K_SUM), REMAT_BF16, "a kernel without RM_KF_WIDE_GRAD: rounded");
    cr_assert_eq(handed(cpu, RM_DONATION_PASS), REMAT_F32, "an identity hands it on");
    int fenced = rt_fenced_type();
    cr_assert_geq(fenced, 0);
    remat_device fd = {fenced, 0};
    cr_assert_eq(handed(fd, RM_K_MATMUL), REMAT_BF16, "fenced's record has no RM_KF_WIDE_GRAD");
    cr_assert_eq(handed(fd, RM_DONATION_PASS), REMAT_F32, "an identity hands it on anywhere");
}
