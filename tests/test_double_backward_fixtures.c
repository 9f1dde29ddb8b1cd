/*
 * tests/test_double_backward_fixtures.c — second-order quantities against
 * PyTorch (tests/fixtures/double/, written by scripts/gen_double_fixtures.py
 * with `make fixtures`, committed): Hessian-vector products of an MLP and
 * of a GPT block (plain and checkpointed: bitwise equal), a WGAN-GP
 * gradient-penalty step, third-order derivatives. f64, the op fixtures'
 * tolerances (atol 1e-10, rtol 1e-9).
 */
#include <criterion/criterion.h>
#include <stdio.h>
#include <string.h>

#include "core/core.h"
#include "gpt_block.h"
#include "support/fixtures.h"
#include "support/rt.h"

#define ATOL 1e-10
#define RTOL 1e-9

static fx_case *load(const char *name) {
    char path[600], err[1024];
    snprintf(path, sizeof path, "%s/double/%s.txt", REMAT_FIXTURE_DIR, name);
    fx_case *c = fx_load_file(path, err, sizeof err);
    cr_assert(c, "%s", err);
    return c;
}

static remat_tensor *in(const fx_case *c, const char *name, bool grad) {
    const fx_tensor *t = fx_get(c, FX_INPUT, name);
    cr_assert(t, "%s: no input %s", c->path, name);
    remat_tensor *x = NULL;
    RT_OK(fx_make_tensor(t, &x));
    if (grad) RT_OK(remat_set_requires_grad(x, true));
    return x;
}

static void expect(const fx_case *c, const char *name, const remat_tensor *got) {
    const fx_tensor *t = fx_get(c, FX_OUTPUT, name);
    cr_assert(t, "%s: no output %s", c->path, name);
    char msg[2048];
    int64_t bad = fx_compare(got, t, ATOL, RTOL, msg, sizeof msg);
    cr_assert_eq(bad, 0, "%s: %s: %lld elements differ from PyTorch: %s", c->path, name,
                 (long long)bad, msg);
}

static const remat_backward_options k_cg = {.create_graph = true};

/* Hv = d(sum_i <dL/dp_i, v_i>)/dp for loss(); NULL entries are zeros. */
typedef int (*loss_fn)(void *ud, remat_tensor **loss);
static void hvp(loss_fn f, void *ud, int n, remat_tensor *const *p, remat_tensor *const *v,
                remat_tensor **hv) {
    remat_tensor *l = NULL, *g[16] = {NULL}, *dot = NULL;
    RT_OK(f(ud, &l));
    RT_OK(remat_grad_ex(1, &l, NULL, n, p, &k_cg, g));
    for (int i = 0; i < n; i++) {
        remat_tensor *m = NULL, *s = NULL, *sum = NULL;
        RT_OK(remat_mul(&m, g[i], v[i]));
        RT_OK(remat_sum_all(&s, m));
        if (dot) RT_OK(remat_add(&sum, dot, s));
        else sum = remat_retain(s);
        remat_release(m), remat_release(s), remat_release(dot), remat_release(g[i]);
        dot = sum;
    }
    RT_OK(remat_grad(1, &dot, NULL, n, p, false, true, hv));
    for (int i = 0; i < n; i++)
        if (!hv[i])
            RT_OK(remat_zeros(&hv[i], p[i]->ndim, p[i]->shape, REMAT_F64, REMAT_DEVICE_CPU));
    remat_release(l), remat_release(dot);
}

static remat_status run_maybe_checkpointed(remat_checkpoint_fn fn, void *ud, bool ck,
                                           remat_tensor *x, remat_tensor **out) {
    if (!ck) return fn(ud, &x, 1, out, 1);
    remat_checkpoint_options o = {.use_reentrant = REMAT_OPT_FALSE};
    return remat_checkpoint(fn, ud, 1, &x, 1, out, &o);
}

/* ---- MLP --------------------------------------------------------------------------------- */
typedef struct mlp {
    remat_tensor *x, *y, *p[4];
    bool ck;
} mlp;

static remat_status mlp_hidden(void *ud, remat_tensor *const *x, int n_in, remat_tensor **out,
                               int n_out) {
    (void)n_in, (void)n_out;
    mlp *m = ud;
    remat_tensor *l = NULL;
    int rc = remat_linear(&l, x[0], m->p[0], m->p[1]);
    if (!rc) rc = remat_gelu(out, l, REMAT_GELU_ERF);
    remat_release(l);
    return rc;
}

static int mlp_loss(void *ud, remat_tensor **loss) {
    mlp *m = ud;
    remat_tensor *h = NULL, *o = NULL;
    int rc = run_maybe_checkpointed(mlp_hidden, m, m->ck, m->x, &h);
    if (!rc) rc = remat_linear(&o, h, m->p[2], m->p[3]);
    if (!rc) rc = remat_mse_loss(loss, o, m->y);
    remat_release(h), remat_release(o);
    return rc;
}

Test(double_backward_fixtures, hvp_mlp_plain_and_checkpointed) {
    fx_case *c = load("hvp_mlp");
    static const char *names[4] = {"w1", "b1", "w2", "b2"};
    mlp m = {.x = in(c, "x", false), .y = in(c, "y", false)};
    remat_tensor *v[4], *hv[2][4];
    for (int i = 0; i < 4; i++) {
        char vn[16];
        snprintf(vn, sizeof vn, "v_%s", names[i]);
        m.p[i] = in(c, names[i], true);
        v[i] = in(c, vn, false);
    }
    for (int k = 0; k < 2; k++) {
        m.ck = k == 1;
        hvp(mlp_loss, &m, 4, m.p, v, hv[k]);
    }
    for (int i = 0; i < 4; i++) {
        char hn[16];
        snprintf(hn, sizeof hn, "hv_%s", names[i]);
        expect(c, hn, hv[0][i]);
        cr_assert(rt_bitwise_equal(hv[0][i], hv[1][i]), "%s: checkpointed differs", hn);
        remat_release(m.p[i]), remat_release(v[i]), remat_release(hv[0][i]),
            remat_release(hv[1][i]);
    }
    remat_release(m.x), remat_release(m.y);
    fx_free(c);
}

/* ---- GPT block ------------------------------------------------------------------------------ */
enum { GB = 2, GT = 4, GC = 8, GH = 2, NG = 12 };
static const char *const k_gpt[NG] = {"ln1_w", "ln1_b", "qkv_w", "qkv_b", "proj_w", "proj_b",
                                      "ln2_w", "ln2_b", "fc_w",  "fc_b",  "out_w",  "out_b"};
typedef struct gpt {
    remat_tensor *x, *r, *p[NG];
    bool ck;
} gpt;

#define T_(x) remat_tensor *x = NULL
/* The shared block (models/gpt_block.h): fused attention, tanh GELU, no
 * dropout; the weights in k_gpt's order, which is gpt_block_weights'. */
static remat_status gpt_block(void *ud, remat_tensor *const *xin, int n_in, remat_tensor **out,
                              int n_out) {
    (void)n_in, (void)n_out;
    remat_tensor *const *p = ((gpt *)ud)->p;
    gpt_block_weights w = {p[0], p[1], p[2], p[3], p[4],  p[5],
                           p[6], p[7], p[8], p[9], p[10], p[11]};
    gpt_block_config cfg = {.heads = GH, .gelu = REMAT_GELU_TANH};
    return gpt_block_forward(&w, &cfg, xin[0], out);
}

static int gpt_loss(void *ud, remat_tensor **loss) {
    gpt *g = ud;
    remat_tensor *y = NULL, *m = NULL;
    int rc = run_maybe_checkpointed(gpt_block, g, g->ck, g->x, &y);
    if (!rc) rc = remat_mul(&m, y, g->r);
    if (!rc) rc = remat_sum_all(loss, m);
    remat_release(y), remat_release(m);
    return rc;
}

Test(double_backward_fixtures, hvp_gpt_block_plain_and_checkpointed) {
    fx_case *c = load("hvp_gpt_block");
    gpt g = {.x = in(c, "x", false), .r = in(c, "r", false)};
    remat_tensor *v[NG], *hv[2][NG];
    for (int i = 0; i < NG; i++) {
        char vn[32];
        snprintf(vn, sizeof vn, "v_%s", k_gpt[i]);
        g.p[i] = in(c, k_gpt[i], true);
        v[i] = in(c, vn, false);
    }
    for (int k = 0; k < 2; k++) {
        g.ck = k == 1;
        hvp(gpt_loss, &g, NG, g.p, v, hv[k]);
    }
    for (int i = 0; i < NG; i++) {
        char hn[32];
        snprintf(hn, sizeof hn, "hv_%s", k_gpt[i]);
        expect(c, hn, hv[0][i]);
        cr_assert(rt_bitwise_equal(hv[0][i], hv[1][i]), "%s: checkpointed differs", hn);
        remat_release(g.p[i]), remat_release(v[i]), remat_release(hv[0][i]);
        remat_release(hv[1][i]);
    }
    remat_release(g.x), remat_release(g.r);
    fx_free(c);
}

/* ---- gradient penalty ------------------------------------------------------------------------ */
static remat_tensor *critic(remat_tensor *x, remat_tensor *const *p) {
    remat_tensor *h = remat_retain(x);
    for (int i = 0; i < 2; i++) {
        remat_tensor *l = NULL, *a = NULL;
        RT_OK(remat_linear(&l, h, p[2 * i], p[2 * i + 1]));
        RT_OK(remat_gelu(&a, l, REMAT_GELU_TANH));
        remat_release(l), remat_release(h);
        h = a;
    }
    remat_tensor *o = NULL;
    RT_OK(remat_linear(&o, h, p[4], p[5]));
    remat_release(h);
    return o;
}

static remat_tensor *mean(remat_tensor *t) {
    remat_tensor *m = NULL;
    RT_OK(remat_mean(&m, t, 0, NULL, false));
    return m;
}

Test(double_backward_fixtures, gradient_penalty_step) {
    fx_case *c = load("gradient_penalty");
    static const char *names[6] = {"w0", "b0", "w1", "b1", "w2", "b2"};
    remat_tensor *xr = in(c, "x_real", false), *xf = in(c, "x_fake", false),
                 *eps = in(c, "eps", false), *p[6], *grads[6];
    for (int i = 0; i < 6; i++) p[i] = in(c, names[i], true);
    T_(a);
    T_(om);
    T_(b);
    T_(xh);
    T_(s);
    T_(g);
    T_(g2);
    T_(n2);
    T_(n2e);
    T_(nrm);
    T_(d);
    T_(d2);
    T_(pl);
    T_(w);
    T_(loss);
    const int dim1 = 1;
    RT_OK(remat_mul(&a, eps, xr));
    RT_OK(remat_rsub_scalar(&om, eps, 1.0));
    RT_OK(remat_mul(&b, om, xf));
    RT_OK(remat_add(&xh, a, b));
    RT_OK(remat_set_requires_grad(xh, true));
    remat_tensor *ch = critic(xh, p);
    RT_OK(remat_sum_all(&s, ch));
    RT_OK(remat_grad_ex(1, &s, NULL, 1, &xh, &k_cg, &g));
    RT_OK(remat_mul(&g2, g, g));
    RT_OK(remat_sum(&n2, g2, 1, &dim1, false));
    RT_OK(remat_add_scalar(&n2e, n2, 1e-12));
    RT_OK(remat_sqrt(&nrm, n2e));
    RT_OK(remat_sub_scalar(&d, nrm, 1.0));
    RT_OK(remat_mul(&d2, d, d));
    remat_tensor *pen = mean(d2);
    RT_OK(remat_mul_scalar(&pl, pen, 10.0));
    remat_tensor *cf = critic(xf, p), *cr = critic(xr, p), *mf = mean(cf), *mr = mean(cr);
    RT_OK(remat_sub(&w, mf, mr));
    RT_OK(remat_add(&loss, w, pl));
    expect(c, "loss", loss);
    RT_OK(remat_grad(1, &loss, NULL, 6, p, false, false, grads));
    for (int i = 0; i < 6; i++) {
        char gn[16];
        snprintf(gn, sizeof gn, "grad_%s", names[i]);
        expect(c, gn, grads[i]);
        remat_release(grads[i]), remat_release(p[i]);
    }
    remat_tensor *all[] = {xr,  xf,  eps, a,  om,  b,  xh, ch, s,  g,  g2, n2,
                           n2e, nrm, d,   d2, pen, pl, cf, cr, mf, mr, w,  loss};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) remat_release(all[i]);
    fx_free(c);
}

/* ---- third order ---------------------------------------------------------------------------- */
Test(double_backward_fixtures, third_order) {
    fx_case *c = load("third_order");
    remat_tensor *x = in(c, "x", true), *u = in(c, "u", false), *w = in(c, "w", false);
    T_(t);
    T_(e);
    T_(sg);
    T_(m);
    T_(y);
    T_(g1);
    T_(p1);
    T_(s1);
    T_(g2);
    T_(p2);
    T_(s2);
    T_(g3);
    RT_OK(remat_tanh(&t, x));
    RT_OK(remat_exp(&e, t));
    RT_OK(remat_sigmoid(&sg, x));
    RT_OK(remat_mul(&m, e, sg));
    RT_OK(remat_sum_all(&y, m));
    RT_OK(remat_grad_ex(1, &y, NULL, 1, &x, &k_cg, &g1));
    RT_OK(remat_mul(&p1, g1, u));
    RT_OK(remat_sum_all(&s1, p1));
    RT_OK(remat_grad_ex(1, &s1, NULL, 1, &x, &k_cg, &g2));
    RT_OK(remat_mul(&p2, g2, w));
    RT_OK(remat_sum_all(&s2, p2));
    RT_OK(remat_grad(1, &s2, NULL, 1, &x, false, false, &g3));
    expect(c, "g1", g1);
    expect(c, "g2", g2);
    expect(c, "g3", g3);
    remat_tensor *all[] = {x, u, w, t, e, sg, m, y, g1, p1, s1, g2, p2, s2, g3};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) remat_release(all[i]);
    fx_free(c);
}
