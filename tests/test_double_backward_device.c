/* tests/test_double_backward_device.c — create_graph through cross_entropy, max and attention
 * on a device whose memory the host cannot touch ("fenced", tests/support/fenced.h: the
 * GPU's stand-in). Their differentiable backward rebuilds a mask (the targets' one-hot, the
 * argmax positions, the causal -inf) that used to be written on the host, refusing device
 * tensors; now it is made by kernels on the inputs' device. Second derivatives (the grad of
 * sum(grad(y) * u)) and the first-order gradients come out bitwise equal to the cpu's (the
 * fenced kernels are the cpu kernels behind the fence). */
#include <math.h>
#include <string.h>

#include "core/core.h"
#include "core/kernels.h"
#include "support/fenced.h"
#include "support/rt.h"

enum { MAXN = 3 };

typedef int (*fn)(remat_tensor *const *in, remat_tensor *targets, remat_tensor **out);

static remat_device fenced(void) {
    int type = rt_fenced_type();
    cr_assert(type > 0, "fenced device: %s", remat_last_error());
    return (remat_device){type, 0};
}

/* A copy of t on d (a leaf when t is one). */
static remat_tensor *on(remat_tensor *t, remat_device d) {
    if (!t) return NULL;
    remat_tensor *c = NULL;
    bool prev = remat_no_grad_begin();
    RT_OK(remat_to_device(&c, t, d));
    remat_grad_mode_restore(prev);
    if (remat_requires_grad(t)) RT_OK(remat_set_requires_grad(c, true));
    return c;
}

/* On d: y = f(x), G = grad(y, x, v, create_graph) for a random leaf v, S = sum_i
 * sum(G_i * u_i) and H = grad(S, (x, v)). G into g[0..n) and H into h[0..n] (new
 * references, NULL where unused). */
static void second_order(fn f, int n, remat_tensor *const *xc, remat_tensor *tc,
                         remat_tensor *const *uc, remat_device d, remat_tensor **g,
                         remat_tensor **h) {
    remat_tensor *x[MAXN], *u[MAXN], *t = on(tc, d), *y = NULL, *s = NULL;
    for (int i = 0; i < n; i++) x[i] = on(xc[i], d), u[i] = on(uc[i], d);
    RT_OK(f(x, t, &y));
    remat_tensor *vc = rt_rand(remat_ndim(y), remat_shape(y), remat_tensor_dtype(y), -1, 1, 5);
    remat_tensor *v = on(rt_leaf(vc), d), *wrt[MAXN + 1];
    const remat_backward_options o = {.create_graph = true, .allow_unused = true};
    RT_OK(remat_grad_ex(1, &y, &v, n, x, &o, g));
    for (int i = 0; i < n; i++) {
        if (!g[i]) continue;
        cr_assert(remat_requires_grad(g[i]), "gradient %d has no graph under create_graph", i);
        cr_assert_eq(remat_tensor_device(g[i]).type, d.type);
        remat_tensor *p = NULL, *q = NULL, *ns = NULL;
        RT_OK(remat_mul(&p, g[i], u[i]));
        RT_OK(remat_sum_all(&q, p));
        if (s) RT_OK(remat_add(&ns, s, q));
        else ns = remat_retain(q);
        remat_release(p), remat_release(q), remat_release(s);
        s = ns;
    }
    cr_assert(s, "no input gradient");
    for (int i = 0; i < n; i++) wrt[i] = x[i];
    wrt[n] = v;
    RT_OK(remat_grad(1, &s, NULL, n + 1, wrt, false, true, h));
    for (int i = 0; i <= n; i++)
        if (h[i]) cr_assert_eq(remat_tensor_device(h[i]).type, d.type);
    for (int i = 0; i < n; i++) remat_release(x[i]), remat_release(u[i]);
    remat_release(t), remat_release(y), remat_release(s), remat_release(vc), remat_release(v);
}

/* f's first and second derivatives on fenced equal the cpu's bit for bit. */
static void check(const char *name, fn f, int n, remat_tensor *const *xc, remat_tensor *tc) {
    remat_tensor *uc[MAXN], *gc[MAXN] = {0}, *gf[MAXN] = {0}, *hc[MAXN + 1] = {0},
                            *hf[MAXN + 1] = {0};
    for (int i = 0; i < n; i++)
        uc[i] = rt_rand(remat_ndim(xc[i]), remat_shape(xc[i]), remat_tensor_dtype(xc[i]), -1, 1,
                        11 + (unsigned)i);
    second_order(f, n, xc, tc, uc, REMAT_DEVICE_CPU, gc, hc);
    second_order(f, n, xc, tc, uc, fenced(), gf, hf);
    for (int i = 0; i <= n; i++) {
        if (i < n) {
            cr_assert(gc[i], "%s: input %d has no gradient", name, i);
            cr_assert(rt_bitwise_equal(gc[i], gf[i]), "%s: gradient %d differs from cpu's", name,
                      i);
            remat_release(uc[i]), remat_release(gc[i]), remat_release(gf[i]);
        }
        /* wrt x: max's is 0 (piecewise linear: no x there), the others' real; wrt v: all */
        bool want = i == n || strcmp(name, "max") != 0;
        cr_assert(!want || hc[i], "%s: no second derivative %d", name, i);
        cr_assert(rt_bitwise_equal(hc[i], hf[i]), "%s: second derivative %d differs from cpu's",
                  name, i);
        double *hv = hc[i] ? rt_values(hc[i]) : NULL;
        bool nonzero = false;
        for (int64_t k = 0; hv && k < remat_numel(hc[i]); k++) nonzero = nonzero || hv[k] != 0.0;
        free(hv);
        cr_assert(!want || nonzero, "%s: second derivative %d is 0", name, i);
        remat_release(hc[i]), remat_release(hf[i]);
    }
}

/* ---- cross_entropy: a row ignored, the ignore index inside [0, C) or outside ---------- */
static int64_t g_ignore;
static int ce(remat_tensor *const *in, remat_tensor *t, remat_tensor **out) {
    return remat_cross_entropy(out, in[0], t, g_ignore);
}

static void check_ce(remat_dtype dt, int64_t ignore) {
    const int64_t sx[2] = {5, 4}, n = 5, tv[5] = {2, 1, 0, 3, 1};
    remat_tensor *x = rt_leaf(rt_rand(2, sx, dt, -2, 2, 3)), *t = NULL;
    RT_OK(remat_from_data(&t, 1, &n, REMAT_I64, tv));
    g_ignore = ignore;
    check("cross_entropy", ce, 1, &x, t);
    remat_release(x), remat_release(t);
}

Test(double_backward_device, cross_entropy) {
    check_ce(REMAT_F64, 1);    /* rows 1 and 4 ignored */
    check_ce(REMAT_F64, -100); /* none ignored */
    check_ce(REMAT_F32, 3);
}

/* every row ignored: the loss is NaN (0 / 0, as PyTorch) and so are its derivatives, on both */
Test(double_backward_device, cross_entropy_all_rows_ignored) {
    const int64_t sx[2] = {2, 3}, n = 2, tv[2] = {1, 1};
    remat_tensor *xc = rt_leaf(rt_rand(2, sx, REMAT_F64, -1, 1, 4)), *tc = NULL;
    RT_OK(remat_from_data(&tc, 1, &n, REMAT_I64, tv));
    remat_tensor *x = on(xc, fenced()), *t = on(tc, fenced()), *y = NULL, *g = NULL;
    RT_OK(remat_cross_entropy(&y, x, t, 1));
    const remat_backward_options o = {.create_graph = true};
    RT_OK(remat_grad_ex(1, &y, NULL, 1, &x, &o, &g));
    double *gv = rt_values(g);
    for (int k = 0; k < 6; k++) cr_assert(isnan(gv[k]), "element %d is %g", k, gv[k]);
    free(gv);
    remat_release(xc), remat_release(tc), remat_release(x), remat_release(t);
    remat_release(y), remat_release(g);
}

/* ---- max over a middle dim (keepdim or not) and over the only dim of a vector --------- */
static int g_dim;
static bool g_keep;
static int max_fn(remat_tensor *const *in, remat_tensor *t, remat_tensor **out) {
    (void)t;
    return remat_max(out, NULL, in[0], g_dim, g_keep);
}

Test(double_backward_device, max) {
    const int64_t s3[3] = {2, 3, 4}, s1[1] = {5};
    for (int k = 0; k < 3; k++) {
        remat_tensor *x = rt_leaf(k < 2 ? rt_rand(3, s3, REMAT_F64, -1, 1, 7)
                                        : rt_rand(1, s1, REMAT_F32, -1, 1, 8));
        g_dim = k < 2 ? 1 : 0;
        g_keep = k == 1;
        long runs = rt_fenced_kernel_runs(RM_K_MAX_BWD);
        check("max", max_fn, 1, &x, NULL);
        /* the argmax mask came from the device's kernel */
        cr_assert_geq(rt_fenced_kernel_runs(RM_K_MAX_BWD), runs + 1);
        remat_release(x);
    }
}

/* ---- attention: causal (Tq = Tk and Tq < Tk) and not ---------------------------------- */
static bool g_causal;
static int att(remat_tensor *const *in, remat_tensor *t, remat_tensor **out) {
    (void)t;
    return remat_attention(out, in[0], in[1], in[2], g_causal, 0);
}

static void check_att(remat_dtype dt, int64_t tq, int64_t tk, bool causal) {
    const int64_t sq[4] = {1, 2, tq, 3}, sk[4] = {1, 2, tk, 3};
    remat_tensor *x[3] = {rt_leaf(rt_rand(4, sq, dt, -1, 1, 21)),
                          rt_leaf(rt_rand(4, sk, dt, -1, 1, 22)),
                          rt_leaf(rt_rand(4, sk, dt, -1, 1, 23))};
    g_causal = causal;
    check("attention", att, 3, x, NULL);
    for (int i = 0; i < 3; i++) remat_release(x[i]);
}

Test(double_backward_device, attention) {
    check_att(REMAT_F64, 4, 4, true);
    check_att(REMAT_F64, 3, 5, true);
    check_att(REMAT_F32, 4, 4, true);
    check_att(REMAT_F64, 4, 4, false);
}
