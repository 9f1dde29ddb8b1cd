/* tests/test_cuda_kernels.c — cpu/cuda agreement of every op whose kernel
 * is CUDA C (the .cu files of src/backends/cuda: elementwise, reduce, loss, nn,
 * attention, copy), forward and backward, f32 and f64, with broadcasting,
 * strided (transposed, sliced) inputs and the edge cases of the cpu kernels
 * (ignore_index, NaN max, causal attention with Tq != Tk, head sizes of
 * every tile class). Each case runs the same op on the same inputs on cpu
 * and on cuda:0, then compares the outputs and the gradients of
 * sum(out * w) for a fixed random w.
 *
 * Needs a GPU: every test reports itself skipped, with the reason, on a
 * machine without one (or a build without CUDA). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/kernels.h"
#include "support/rt.h"

static remat_tensor *on_cpu(remat_tensor *t) {
    remat_tensor *c;
    RT_OK(remat_to_device(&c, t, REMAT_DEVICE_CPU));
    return c;
}

static void assert_agree(remat_tensor *cpu_t, remat_tensor *cuda_t, double tol, const char *what) {
    cr_assert_not_null(cpu_t, "%s: no cpu tensor", what);
    cr_assert_not_null(cuda_t, "%s: no cuda tensor", what);
    rt_assert_close(on_cpu(cuda_t), cpu_t, tol, tol, what);
}

/* ---- the generic case ---------------------------------------------------------------------
 * build(in, n, &out, user) makes the op's output from inputs in[0..n); inputs
 * with grad[i] get gradients compared. Runs on cpu and cuda and compares. */
typedef int (*build_fn)(remat_tensor *const *in, int n, remat_tensor **out, const void *user);

#define MAX_IN 6
static void run_case(const char *name, build_fn build, const void *user, int n,
                     remat_tensor *const *in, const bool *grad, double tol) {
    remat_scope *scope;
    RT_OK(remat_scope_begin(&scope));
    remat_tensor *ic[MAX_IN], *ig[MAX_IN];
    for (int i = 0; i < n; i++) {
        ic[i] = rt_leaf_on(in[i], REMAT_DEVICE_CPU, grad[i]);
        ig[i] = rt_leaf_on(in[i], rt_cuda0(), grad[i]);
    }
    remat_tensor *yc, *yg;
    RT_OK(build(ic, n, &yc, user));
    RT_OK(build(ig, n, &yg, user));
    char what[160];
    snprintf(what, sizeof what, "%s: output", name);
    assert_agree(yc, yg, tol, what);
    bool any = false;
    for (int i = 0; i < n; i++) any |= grad[i];
    if (any && remat_requires_grad(yc)) {
        int64_t shape[8];
        int nd = remat_ndim(yc);
        for (int d = 0; d < nd; d++) shape[d] = remat_size(yc, d);
        remat_tensor *w = rt_rand(nd, shape, remat_tensor_dtype(yc), -1, 1, 77),
                     *wg = rt_leaf_on(w, rt_cuda0(), false);
        remat_tensor *pc, *pg, *lc, *lg;
        RT_OK(remat_mul(&pc, yc, w));
        RT_OK(remat_mul(&pg, yg, wg));
        RT_OK(remat_sum_all(&lc, pc));
        RT_OK(remat_sum_all(&lg, pg));
        RT_OK(remat_backward_scalar(lc));
        RT_OK(remat_backward_scalar(lg));
        for (int i = 0; i < n; i++) {
            if (!grad[i]) continue;
            snprintf(what, sizeof what, "%s: gradient of input %d", name, i);
            assert_agree(remat_tensor_grad(ic[i]), remat_tensor_grad(ig[i]), tol, what);
        }
    }
    RT_OK(remat_scope_end(scope));
}

static double tol_of(remat_dtype dt) { return dt == REMAT_F64 ? 1e-10 : 2e-5; }

/* ---- unary --------------------------------------------------------------------------------- */
typedef struct unary_case {
    const char *name;
    int kind; /* index into the switch below */
    double p;
} unary_case;

static int build_unary(remat_tensor *const *in, int n, remat_tensor **out, const void *user) {
    (void)n;
    const unary_case *c = user;
    switch (c->kind) {
    case 0: return remat_neg(out, in[0]);
    case 1: return remat_exp(out, in[0]);
    case 2: return remat_log(out, in[0]);
    case 3: return remat_sqrt(out, in[0]);
    case 4: return remat_tanh(out, in[0]);
    case 5: return remat_sigmoid(out, in[0]);
    case 6: return remat_relu(out, in[0]);
    case 7: return remat_gelu(out, in[0], REMAT_GELU_ERF);
    case 8: return remat_gelu(out, in[0], REMAT_GELU_TANH);
    case 9: return remat_pow_scalar(out, in[0], c->p);
    case 10: return remat_add_scalar(out, in[0], c->p);
    case 11: return remat_mul_scalar(out, in[0], c->p);
    default: return remat_rsub_scalar(out, in[0], c->p);
    }
}

Test(cuda_kernels, unary_ops_forward_and_backward) {
    rt_need_cuda();
    const unary_case cases[] = {{"neg", 0, 0},   {"exp", 1, 0},      {"log", 2, 0},
                                {"sqrt", 3, 0},  {"tanh", 4, 0},     {"sigmoid", 5, 0},
                                {"relu", 6, 0},  {"gelu erf", 7, 0}, {"gelu tanh", 8, 0},
                                {"pow", 9, 3},   {"pow 0", 9, 0},    {"add", 10, 2.5},
                                {"mul", 11, -3}, {"rsub", 12, 1.5}};
    const int64_t shape[3] = {3, 37, 11}; /* odd sizes: partial mask bytes, grid tails */
    for (int dt = REMAT_F32; dt <= REMAT_F64; dt++)
        for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
            bool positive = cases[i].kind == 2 || cases[i].kind == 3;
            remat_tensor *x = rt_rand(3, shape, dt, positive ? 0.1 : -4, 4, 10 + (unsigned)i);
            bool g = true;
            char name[64];
            snprintf(name, sizeof name, "%s %s", cases[i].name, dt == REMAT_F32 ? "f32" : "f64");
            run_case(name, build_unary, &cases[i], 1, &x, &g, tol_of(dt));
            remat_release(x);
        }
}

/* ---- binary, broadcasting, strided, in place ----------------------------------------------- */
static int build_binary(remat_tensor *const *in, int n, remat_tensor **out, const void *user) {
    (void)n;
    switch (*(const int *)user) {
    case 0: return remat_add(out, in[0], in[1]);
    case 1: return remat_sub(out, in[0], in[1]);
    case 2: return remat_mul(out, in[0], in[1]);
    case 3: return remat_div(out, in[0], in[1]);
    default: return remat_pow(out, in[0], in[1]);
    }
}

/* a (transposed view) op b, b broadcast */
static int build_binary_strided(remat_tensor *const *in, int n, remat_tensor **out,
                                const void *user) {
    remat_tensor *at;
    int rc = remat_transpose(&at, in[0], 0, 1);
    if (rc) return rc;
    rc = build_binary((remat_tensor *const[]){at, in[1]}, n, out, user);
    remat_release(at);
    return rc;
}

Test(cuda_kernels, binary_ops_with_broadcasting_and_strides) {
    rt_need_cuda();
    const char *names[] = {"add", "sub", "mul", "div", "pow"};
    const int64_t sa[3] = {4, 1, 33}, sb[2] = {6, 33}, st[3] = {6, 4, 33};
    for (int dt = REMAT_F32; dt <= REMAT_F64; dt++)
        for (int op = 0; op < 5; op++) {
            char name[64];
            double lo = op >= 3 ? 0.5 : -2; /* div and pow: positive operands */
            remat_tensor *in[2] = {rt_rand(3, sa, dt, lo, 2, 1), rt_rand(2, sb, dt, lo, 2, 2)};
            bool g[2] = {true, true};
            snprintf(name, sizeof name, "%s broadcast %s", names[op],
                     dt == REMAT_F32 ? "f32" : "f64");
            run_case(name, build_binary, &op, 2, in, g, tol_of(dt) * 10);
            remat_release(in[0]);
            in[0] = rt_rand(3, st, dt, lo, 2, 3); /* (6, 4, 33) seen as (4, 6, 33) */
            remat_release(in[1]);
            int64_t sb1[1] = {33};
            in[1] = rt_rand(1, sb1, dt, lo, 2, 4);
            snprintf(name, sizeof name, "%s strided %s", names[op],
                     dt == REMAT_F32 ? "f32" : "f64");
            run_case(name, build_binary_strided, &op, 2, in, g, tol_of(dt) * 10);
            remat_release(in[0]);
            remat_release(in[1]);
        }
}

/* A clone of in[0] changed in place. user NULL: in[1] added through a transposed view
 * of the clone (a target view: only without grad, as on cpu, where in-place on a view of
 * a tensor that requires grad is refused); else the clone itself the target and in[1]
 * read through a transposed view (strided source), with gradients. */
static int build_inplace(remat_tensor *const *in, int n, remat_tensor **out, const void *user) {
    (void)n;
    remat_tensor *c, *ct = NULL;
    int rc = remat_clone(&c, in[0]);
    if (rc) return rc;
    if (!user) {
        rc = remat_transpose(&ct, c, 0, 1);
        if (!rc) rc = remat_add_(ct, in[1], -0.5);
        if (!rc) rc = remat_mul_scalar_(ct, 3);
    } else {
        rc = remat_transpose(&ct, in[1], 0, 1);
        if (!rc) rc = remat_add_(c, ct, -0.5);
        if (!rc) rc = remat_mul_scalar_(c, 3);
    }
    if (ct) remat_release(ct);
    if (rc) {
        remat_release(c);
        return rc;
    }
    *out = c;
    return REMAT_OK;
}

Test(cuda_kernels, in_place_ops_through_views) {
    rt_need_cuda();
    const int64_t sa[2] = {9, 5}, sb[2] = {5, 9};
    for (int dt = REMAT_F32; dt <= REMAT_F64; dt++) {
        remat_tensor *in[2] = {rt_rand(2, sa, dt, -1, 1, 5), rt_rand(2, sb, dt, -1, 1, 6)};
        const bool f32 = dt == REMAT_F32;
        bool no_grad[2] = {false, false}, grad[2] = {true, true};
        run_case(f32 ? "in place through a view f32" : "in place through a view f64", build_inplace,
                 NULL, 2, in, no_grad, tol_of(dt));
        static const int strided_source = 1;
        run_case(f32 ? "in place, strided source f32" : "in place, strided source f64",
                 build_inplace, &strided_source, 2, in, grad, tol_of(dt));
        remat_release(in[0]);
        remat_release(in[1]);
    }
}

/* ---- reductions ---------------------------------------------------------------------------- */
typedef struct red_case {
    int kind; /* 0 sum, 1 mean, 2 sum_all, 3 max */
    int n_dims;
    int dims[4];
    bool keepdim;
} red_case;

static int build_reduce(remat_tensor *const *in, int n, remat_tensor **out, const void *user) {
    (void)n;
    const red_case *c = user;
    switch (c->kind) {
    case 0: return remat_sum(out, in[0], c->n_dims, c->dims, c->keepdim);
    case 1: return remat_mean(out, in[0], c->n_dims, c->dims, c->keepdim);
    case 2: return remat_sum_all(out, in[0]);
    default: {
        remat_tensor *idx = NULL;
        int rc = remat_max(out, &idx, in[0], c->dims[0], c->keepdim);
        if (idx) remat_release(idx);
        return rc;
    }
    }
}

Test(cuda_kernels, sums_means_and_max_over_dims) {
    rt_need_cuda();
    const red_case cases[] = {{0, 1, {3}, false},   {0, 1, {0}, true},        {0, 2, {0, 2}, false},
                              {0, 2, {1, 3}, true}, {0, 3, {0, 1, 3}, false}, {1, 1, {2}, false},
                              {1, 2, {0, 3}, true}, {2, 0, {0}, false},       {3, 1, {3}, false},
                              {3, 1, {1}, true},    {3, 1, {0}, false}};
    const int64_t shape[4] = {5, 7, 3, 129};
    for (int dt = REMAT_F32; dt <= REMAT_F64; dt++)
        for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
            remat_tensor *x = rt_rand(4, shape, dt, -3, 3, 20 + (unsigned)i);
            bool g = true;
            char name[64];
            snprintf(name, sizeof name, "reduce case %zu %s", i, dt == REMAT_F32 ? "f32" : "f64");
            run_case(name, build_reduce, &cases[i], 1, &x, &g, tol_of(dt) * 10);
            remat_release(x);
        }
}

Test(cuda_kernels, long_sums_split_into_chunks) {
    rt_need_cuda();
    /* sum_all of 3M elements (row chunks) and a column sum with few columns (row splits) */
    const int64_t big[1] = {3000001}, tall[2] = {200000, 3};
    const red_case all = {2, 0, {0}, false}, cols = {0, 1, {0}, false};
    for (int dt = REMAT_F32; dt <= REMAT_F64; dt++) {
        remat_tensor *x = rt_rand(1, big, dt, -1, 1, 31), *y = rt_rand(2, tall, dt, -1, 1, 32);
        bool g = true;
        run_case("sum_all 3M", build_reduce, &all, 1, &x, &g, dt == REMAT_F64 ? 1e-9 : 1e-4);
        run_case("column sum 200000 x 3", build_reduce, &cols, 1, &y, &g,
                 dt == REMAT_F64 ? 1e-9 : 1e-4);
        remat_release(x);
        remat_release(y);
    }
}

Test(cuda_kernels, max_picks_the_first_maximum_and_nan) {
    rt_need_cuda();
    const double v[8] = {1, 3, 3, -1, 2, NAN, 5, NAN};
    const int64_t shape[2] = {2, 4};
    remat_tensor *x = rt_tensor(2, shape, REMAT_F64, v);
    remat_tensor *xg = rt_leaf_on(x, rt_cuda0(), false), *y, *idx;
    RT_OK(remat_max(&y, &idx, xg, 1, false));
    remat_tensor *ic = on_cpu(idx), *yc = on_cpu(y);
    double i0, i1, y0, y1;
    RT_OK(remat_item_at(ic, 0, &i0));
    RT_OK(remat_item_at(ic, 1, &i1));
    RT_OK(remat_item_at(yc, 0, &y0));
    RT_OK(remat_item_at(yc, 1, &y1));
    cr_assert_eq(i0, 1, "first maximum of row 0 at %g", i0);
    cr_assert_eq(y0, 3);
    cr_assert_eq(i1, 1, "the first NaN of row 1 at %g", i1);
    cr_assert(isnan(y1));
    remat_release(x);
    remat_release(xg);
    remat_release(y);
    remat_release(idx);
    remat_release(ic);
    remat_release(yc);
}

/* ---- nn ------------------------------------------------------------------------------------ */
typedef struct nn_case {
    int kind; /* 0 softmax, 1 log_softmax, 2 layer_norm (w, b as given) */
    int dim;
    int n_norm;
} nn_case;

static int build_nn(remat_tensor *const *in, int n, remat_tensor **out, const void *user) {
    const nn_case *c = user;
    switch (c->kind) {
    case 0: return remat_softmax(out, in[0], c->dim);
    case 1: return remat_log_softmax(out, in[0], c->dim);
    default:
        return remat_layer_norm(out, in[0], c->n_norm, n > 1 ? in[1] : NULL, n > 2 ? in[2] : NULL,
                                1e-5);
    }
}

Test(cuda_kernels, softmax_log_softmax_over_any_dim) {
    rt_need_cuda();
    const int64_t shape[3] = {4, 50, 300}; /* rows of 300 and of 50, columns of 4 */
    for (int dt = REMAT_F32; dt <= REMAT_F64; dt++)
        for (int kind = 0; kind < 2; kind++)
            for (int dim = 0; dim < 3; dim++) {
                nn_case c = {kind, dim, 0};
                remat_tensor *x = rt_rand(3, shape, dt, -5, 5, 40 + (unsigned)dim);
                bool g = true;
                char name[64];
                snprintf(name, sizeof name, "%s dim %d %s", kind ? "log_softmax" : "softmax", dim,
                         dt == REMAT_F32 ? "f32" : "f64");
                run_case(name, build_nn, &c, 1, &x, &g, tol_of(dt) * 10);
                remat_release(x);
            }
}

Test(cuda_kernels, layer_norm_with_and_without_affine) {
    rt_need_cuda();
    const int64_t xs[3] = {6, 17, 768}, ws[1] = {768}, xs2[3] = {3, 5, 7}, ws2[2] = {5, 7};
    for (int dt = REMAT_F32; dt <= REMAT_F64; dt++) {
        remat_tensor *in[3] = {rt_rand(3, xs, dt, 2, 5, 50), rt_rand(1, ws, dt, 0.5, 1.5, 51),
                               rt_rand(1, ws, dt, -1, 1, 52)};
        bool g[3] = {true, true, true};
        nn_case c = {2, 0, 1};
        run_case("layer_norm affine", build_nn, &c, 3, in, g, tol_of(dt) * 100);
        run_case("layer_norm plain", build_nn, &c, 1, in, g, tol_of(dt) * 100);
        for (int i = 0; i < 3; i++) remat_release(in[i]);
        remat_tensor *in2[3] = {rt_rand(3, xs2, dt, -1, 1, 53), rt_rand(2, ws2, dt, 0.5, 1.5, 54),
                                rt_rand(2, ws2, dt, -1, 1, 55)};
        nn_case c2 = {2, 0, 2};
        run_case("layer_norm over 2 dims", build_nn, &c2, 3, in2, g, tol_of(dt) * 100);
        for (int i = 0; i < 3; i++) remat_release(in2[i]);
    }
}

/* layer_norm's kernels take a bf16 y (and its backward a bf16 g) next to an f32 x only
 * (remat_layer_norm_to); next to an f64 x: REMAT_EDTYPE, nothing launched. The fused
 * values themselves: test_ops_layer_norm_to on cuda (make test-cuda), and the emulator. */
Test(cuda_kernels, layer_norm_bf16_y_only_next_to_an_f32_x) {
    rt_need_cuda();
    const int64_t sh[2] = {3, 8}, n1 = 3;
    const remat_device d = rt_cuda0();
    remat_tensor *x = rt_leaf_on(rt_rand(2, sh, REMAT_F64, -1, 1, 1), d, false);
    remat_tensor *y = NULL, *m = NULL, *s = NULL, *dx = NULL, *g = NULL;
    RT_OK(remat_zeros(&y, 2, sh, REMAT_BF16, d));
    RT_OK(remat_zeros(&g, 2, sh, REMAT_BF16, d));
    RT_OK(remat_zeros(&dx, 2, sh, REMAT_F64, d));
    RT_OK(remat_zeros(&m, 1, &n1, REMAT_F64, d));
    RT_OK(remat_zeros(&s, 1, &n1, REMAT_F64, d));
    const rm_layer_norm_params p = {1, 1e-5};
    rm_kargs k = {.in = {x}, .out = {y, m, s}, .params = &p};
    RT_FAILS(rm_kernel_run(RM_K_LAYER_NORM, "layer_norm", &k), REMAT_EDTYPE, "a bf16 y");
    rm_kargs a = {.in = {x, x}, .out = {dx, y, m, s}, .params = &p};
    RT_FAILS(rm_kernel_run(RM_K_ADD_LAYER_NORM, "add_layer_norm", &a), REMAT_EDTYPE, "a bf16 y");
    rm_kargs b = {.in = {g, x, NULL, m, s}, .out = {dx}, .params = &p};
    RT_FAILS(rm_kernel_run(RM_K_LAYER_NORM_BWD, "layer_norm backward", &b), REMAT_EDTYPE,
             "(or gradient) with a f64 x");
    remat_release(x), remat_release(y), remat_release(g), remat_release(dx);
    remat_release(m), remat_release(s);
}

/* ---- attention ----------------------------------------------------------------------------- */
typedef struct att_case {
    int64_t B, H, Tq, Tk, D, Dv;
    bool causal;
    bool strided; /* q, k, v as per-head views of packed (B, T, H, D) tensors */
} att_case;

static int build_att(remat_tensor *const *in, int n, remat_tensor **out, const void *user) {
    (void)n;
    const att_case *c = user;
    if (!c->strided) return remat_attention(out, in[0], in[1], in[2], c->causal, 0);
    remat_tensor *v[3] = {NULL, NULL, NULL};
    int rc = REMAT_OK;
    for (int i = 0; i < 3 && !rc; i++) rc = remat_transpose(&v[i], in[i], 1, 2);
    if (!rc) rc = remat_attention(out, v[0], v[1], v[2], c->causal, 0);
    for (int i = 0; i < 3; i++)
        if (v[i]) remat_release(v[i]);
    return rc;
}

Test(cuda_kernels, fused_attention_every_head_class) {
    rt_need_cuda();
    const att_case cases[] = {
        {2, 3, 70, 70, 16, 16, true, false},   {1, 2, 130, 130, 64, 64, true, true},
        {2, 2, 65, 40, 80, 48, true, false},   {1, 1, 33, 97, 128, 128, false, false},
        {1, 2, 50, 50, 200, 256, true, false}, {2, 1, 1, 1, 8, 8, true, false},
        {1, 1, 40, 64, 32, 32, false, true}};
    for (int dt = REMAT_F32; dt <= REMAT_F64; dt++)
        for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
            const att_case *c = &cases[i];
            int64_t qs[4] = {c->B, c->H, c->Tq, c->D}, ks[4] = {c->B, c->H, c->Tk, c->D},
                    vs[4] = {c->B, c->H, c->Tk, c->Dv};
            if (c->strided) { /* (B, T, H, D) buffers */
                qs[1] = c->Tq, qs[2] = c->H;
                ks[1] = c->Tk, ks[2] = c->H;
                vs[1] = c->Tk, vs[2] = c->H;
            }
            remat_tensor *in[3] = {rt_rand(4, qs, dt, -1, 1, 60), rt_rand(4, ks, dt, -1, 1, 61),
                                   rt_rand(4, vs, dt, -1, 1, 62)};
            bool g[3] = {true, true, true};
            char name[96];
            snprintf(name, sizeof name, "attention case %zu (D %lld, %s) %s", i, (long long)c->D,
                     c->causal ? "causal" : "full", dt == REMAT_F32 ? "f32" : "f64");
            run_case(name, build_att, c, 3, in, g, dt == REMAT_F64 ? 1e-9 : 1e-4);
            for (int j = 0; j < 3; j++) remat_release(in[j]);
        }
}

Test(cuda_kernels, attention_head_size_over_256_is_unsupported) {
    rt_need_cuda();
    const int64_t s[3] = {1, 4, 300};
    remat_tensor *q = rt_rand(3, s, REMAT_F32, -1, 1, 1), *qg = rt_leaf_on(q, rt_cuda0(), false),
                 *y;
    RT_FAILS(remat_attention(&y, qg, qg, qg, true, 0), REMAT_EUNSUPPORTED, "head sizes up to 256");
    remat_release(q);
    remat_release(qg);
}

/* ---- losses and embedding ------------------------------------------------------------------ */
static int build_ce(remat_tensor *const *in, int n, remat_tensor **out, const void *user) {
    (void)n;
    return remat_cross_entropy(out, in[0], in[1], *(const int64_t *)user);
}
static int build_mse(remat_tensor *const *in, int n, remat_tensor **out, const void *user) {
    (void)n;
    (void)user;
    return remat_mse_loss(out, in[0], in[1]);
}
static int build_emb(remat_tensor *const *in, int n, remat_tensor **out, const void *user) {
    (void)n;
    (void)user;
    return remat_embedding(out, in[0], in[1]);
}

static remat_tensor *targets(int64_t N, int64_t C, int64_t ignore, unsigned seed) {
    double *v = malloc(sizeof(double) * (size_t)N);
    srand(seed);
    for (int64_t i = 0; i < N; i++) v[i] = i % 5 == 3 ? (double)ignore : (double)(rand() % C);
    remat_tensor *t = rt_tensor(1, &N, REMAT_I64, v);
    free(v);
    return t;
}

Test(cuda_kernels, cross_entropy_mse_and_embedding) {
    rt_need_cuda();
    for (int dt = REMAT_F32; dt <= REMAT_F64; dt++) {
        const int64_t xs[2] = {37, 1000}, ignore = -100;
        remat_tensor *ce[2] = {rt_rand(2, xs, dt, -4, 4, 70), targets(37, 1000, ignore, 71)};
        bool g[2] = {true, false};
        run_case("cross_entropy", build_ce, &ignore, 2, ce, g, tol_of(dt) * 10);
        const int64_t ms[2] = {300, 77};
        remat_tensor *m[2] = {rt_rand(2, ms, dt, -2, 2, 72), rt_rand(2, ms, dt, -2, 2, 73)};
        bool gm[2] = {true, true};
        run_case("mse_loss", build_mse, NULL, 2, m, gm, tol_of(dt) * 10);
        /* embedding with repeated indices (the backward sums them in order) */
        const int64_t ws[2] = {50, 96}, is[2] = {8, 33};
        remat_tensor *e[2] = {rt_rand(2, ws, dt, -1, 1, 74), NULL};
        double iv[8 * 33];
        for (int i = 0; i < 8 * 33; i++) iv[i] = (double)((i * 7) % 13 == 0 ? 3 : (i * 31) % 50);
        e[1] = rt_tensor(2, is, REMAT_I64, iv);
        bool ge[2] = {true, false};
        run_case("embedding", build_emb, NULL, 2, e, ge, tol_of(dt));
        for (int i = 0; i < 2; i++) {
            remat_release(ce[i]);
            remat_release(m[i]);
            remat_release(e[i]);
        }
    }
}

Test(cuda_kernels, bad_indices_and_targets_fail_as_on_cpu) {
    rt_need_cuda();
    const int64_t ws[2] = {10, 4}, n = 3;
    const double iv[3] = {1, 10, 2}, tv[3] = {0, 4, 7};
    remat_tensor *w = rt_rand(2, ws, REMAT_F32, -1, 1, 1), *wg = rt_leaf_on(w, rt_cuda0(), false);
    remat_tensor *ix = rt_tensor(1, &n, REMAT_I64, iv), *ixg = rt_leaf_on(ix, rt_cuda0(), false),
                 *y;
    RT_FAILS(remat_embedding(&y, wg, ixg), REMAT_EINVAL, "indices[1] (flat) = 10");
    const int64_t xs[2] = {3, 5};
    remat_tensor *x = rt_rand(2, xs, REMAT_F32, -1, 1, 2), *xg = rt_leaf_on(x, rt_cuda0(), false);
    remat_tensor *t = rt_tensor(1, &n, REMAT_I64, tv), *tg = rt_leaf_on(t, rt_cuda0(), false);
    RT_FAILS(remat_cross_entropy(&y, xg, tg, -100), REMAT_EINVAL, "targets[2] = 7");
    remat_tensor *all[] = {w, wg, ix, ixg, x, xg, t, tg};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) remat_release(all[i]);
}

/* ---- copies -------------------------------------------------------------------------------- */
static int build_contig(remat_tensor *const *in, int n, remat_tensor **out, const void *user) {
    (void)n;
    (void)user;
    remat_tensor *p;
    int rc = remat_permute(&p, in[0], 3, (const int[]){2, 0, 1});
    if (rc) return rc;
    rc = remat_contiguous(out, p);
    remat_release(p);
    return rc;
}

Test(cuda_kernels, contiguous_copies_of_permuted_views) {
    rt_need_cuda();
    const int64_t s[3] = {7, 9, 13};
    for (int dt = REMAT_F32; dt <= REMAT_F64; dt++) {
        remat_tensor *x = rt_rand(3, s, dt, -1, 1, 80);
        bool g = true;
        run_case("contiguous of a permutation", build_contig, NULL, 1, &x, &g, 0);
        remat_release(x);
    }
}

/* remat_zero_ through a transposed view of a clone, then remat_copy_ of the
 * other input (another dtype, broadcast) into a slice of it */
static int build_zero_copy(remat_tensor *const *in, int n, remat_tensor **out, const void *user) {
    (void)n;
    (void)user;
    remat_tensor *c = NULL, *ct = NULL, *s = NULL;
    int rc = remat_clone(&c, in[0]);
    if (!rc) rc = remat_transpose(&ct, c, 0, 1);
    if (!rc) rc = remat_slice(&s, ct, 0, 1, 4, 1);
    if (!rc) rc = remat_zero_(s);
    remat_release_p(&s);
    if (!rc) rc = remat_slice(&s, ct, 0, 4, 7, 1);
    if (!rc) rc = remat_copy_(s, in[1]);
    remat_release_p(&s);
    remat_release_p(&ct);
    if (rc) {
        remat_release_p(&c);
        return rc;
    }
    *out = c;
    return REMAT_OK;
}

Test(cuda_kernels, zero_and_converting_copy_through_views) {
    rt_need_cuda();
    const int64_t sa[2] = {5, 9}, sb[1] = {5};
    for (int dt = REMAT_F32; dt <= REMAT_F64; dt++) {
        /* the source in the other float dtype: a conversion, broadcast over the slice */
        remat_tensor *in[2] = {rt_rand(2, sa, dt, -1, 1, 90),
                               rt_rand(1, sb, dt == REMAT_F32 ? REMAT_F64 : REMAT_F32, -1, 1, 91)};
        bool g[2] = {false, false};
        run_case("zero_ and copy_", build_zero_copy, NULL, 2, in, g, 0);
        remat_release(in[0]);
        remat_release(in[1]);
    }
}
