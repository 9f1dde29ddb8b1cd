/*
 * tests/test_double_backward.c — create_graph: gradients of gradients.
 *
 * gradgradcheck (f64): for an op f with inputs X and a random output
 * weight v (a leaf too), G = grad(f(X), X, grad_outputs v, create_graph)
 * and S = sum_i <G_i, u_i> for fixed random u_i; remat_grad of S with
 * respect to X and v is compared with central differences of S computed
 * with first-order gradients only. Like tests/test_fixtures.c it is driven
 * by the op registry: every registered op has a case here or is listed as
 * refusing create_graph, with a test that it refuses with
 * REMAT_EUNSUPPORTED naming it — a new op cannot skip both.
 */
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/core.h"
#include "ops/registry.h"
#include "support/rt.h"

#define MAXN 4

static const remat_backward_options k_create = {.create_graph = true, .allow_unused = true};

/* ---- the check ------------------------------------------------------------------------- */
typedef int (*gg_fn)(remat_tensor *const *in, remat_tensor **out);

static double *data(remat_tensor *t) { return rm_ptr(t); }

/* S = sum_i <grad_i f(X) . v, u_i>, with first-order gradients (or, with
 * create_graph, as a differentiable tensor in *S_t). */
static int eval_s(gg_fn f, int n, remat_tensor *const *x, remat_tensor *v, remat_tensor *const *u,
                  bool create, double *s, remat_tensor **S_t) {
    remat_tensor *y = NULL, *g[MAXN] = {NULL}, *acc = NULL;
    remat_manual_seed(1234); /* dropout draws the same mask every time */
    int rc = f(x, &y);
    remat_backward_options o = {.create_graph = create, .allow_unused = true};
    if (!rc) rc = remat_grad_ex(1, &y, &v, n, x, &o, g);
    for (int i = 0; !rc && i < n; i++) {
        if (!g[i]) continue;
        remat_tensor *p = NULL, *q = NULL, *nacc = NULL;
        rc = remat_mul(&p, g[i], u[i]);
        if (!rc) rc = remat_sum_all(&q, p);
        if (!rc) {
            if (acc) rc = remat_add(&nacc, acc, q);
            else nacc = remat_retain(q);
        }
        remat_release(p), remat_release(q), remat_release(acc);
        acc = nacc;
    }
    if (!rc && !acc) rc = remat_zeros(&acc, 0, NULL, REMAT_F64, REMAT_DEVICE_CPU);
    if (!rc) *s = data(acc)[0];
    if (!rc && S_t) *S_t = remat_retain(acc);
    remat_release(acc), remat_release(y);
    for (int i = 0; i < n; i++) remat_release(g[i]);
    return rc;
}

/* Checks the second derivatives of f at the f64 leaves x[0..n). */
static void gradgradcheck(const char *name, gg_fn f, int n, remat_tensor *const *x) {
    remat_tensor *y = NULL, *u[MAXN] = {NULL}, *wrt[MAXN + 1], *h[MAXN + 1] = {NULL}, *S = NULL;
    remat_manual_seed(1234);
    RT_OK(f(x, &y));
    remat_tensor *v = rt_leaf(rt_rand(y->ndim, y->shape, REMAT_F64, -1, 1, 7));
    for (int i = 0; i < n; i++) u[i] = rt_rand(x[i]->ndim, x[i]->shape, REMAT_F64, -1, 1, 11 + i);
    double s0;
    RT_OK(eval_s(f, n, x, v, u, true, &s0, &S));
    for (int i = 0; i < n; i++) wrt[i] = x[i];
    wrt[n] = v;
    cr_assert(S->requires_grad, "%s: the gradient has no graph under create_graph", name);
    RT_OK(remat_grad(1, &S, NULL, n + 1, wrt, false, true, h));
    const double eps = 1e-6;
    for (int i = 0; i <= n; i++) {
        remat_tensor *t = wrt[i];
        double *hv = h[i] ? rt_values(h[i]) : NULL; /* row-major (h may be a strided view) */
        for (int64_t k = 0; k < remat_numel(t); k++) {
            double *p = &data(t)[k], keep = *p, sp, sm;
            *p = keep + eps;
            RT_OK(eval_s(f, n, x, v, u, false, &sp, NULL));
            *p = keep - eps;
            RT_OK(eval_s(f, n, x, v, u, false, &sm, NULL));
            *p = keep;
            double num = (sp - sm) / (2 * eps), ana = hv ? hv[k] : 0.0;
            cr_assert(fabs(num - ana) <= 1e-5 + 1e-4 * fabs(num),
                      "%s: d2 wrt %s %d element %lld: analytic %.10g, numeric %.10g", name,
                      i < n ? "input" : "grad_output", i, (long long)k, ana, num);
        }
        free(hv);
    }
    remat_release(y), remat_release(v), remat_release(S);
    for (int i = 0; i < n; i++) remat_release(u[i]);
    for (int i = 0; i <= n; i++) remat_release(h[i]);
}

/* ---- cases ---------------------------------------------------------------------------------
 * Each builds its inputs (small f64 leaves) and its function. */
static remat_tensor *R(int nd, const int64_t *shape, double lo, double hi, unsigned seed) {
    return rt_leaf(rt_rand(nd, shape, REMAT_F64, lo, hi, seed));
}
static const int64_t S23[2] = {2, 3}, S34[2] = {3, 4}, S3[1] = {3}, S223[3] = {2, 2, 3};

#define U1(nm, expr)                                                                               \
    static int f_##nm(remat_tensor *const *in, remat_tensor **out) { return (expr); }
U1(neg, remat_neg(out, in[0]))
U1(exp, remat_exp(out, in[0]))
U1(log, remat_log(out, in[0]))
U1(sqrt, remat_sqrt(out, in[0]))
U1(tanh, remat_tanh(out, in[0]))
U1(sigmoid, remat_sigmoid(out, in[0]))
U1(relu, remat_relu(out, in[0]))
U1(gelu_erf, remat_gelu(out, in[0], REMAT_GELU_ERF))
U1(gelu_tanh, remat_gelu(out, in[0], REMAT_GELU_TANH))
U1(silu, remat_silu(out, in[0]))
U1(bias_gelu_erf, remat_bias_gelu(out, in[0], in[1], REMAT_GELU_ERF))
U1(bias_gelu_tanh, remat_bias_gelu(out, in[0], in[1], REMAT_GELU_TANH))
U1(pow_scalar, remat_pow_scalar(out, in[0], 2.5))
U1(add_scalar, remat_add_scalar(out, in[0], 0.5))
U1(sub_scalar, remat_sub_scalar(out, in[0], 0.5))
U1(mul_scalar, remat_mul_scalar(out, in[0], -1.5))
U1(div_scalar, remat_div_scalar(out, in[0], 3.0))
U1(rsub_scalar, remat_rsub_scalar(out, in[0], 2.0))
U1(add, remat_add(out, in[0], in[1]))
U1(sub, remat_sub(out, in[0], in[1]))
U1(mul, remat_mul(out, in[0], in[1]))
U1(div, remat_div(out, in[0], in[1]))
U1(pow, remat_pow(out, in[0], in[1]))
U1(sum, remat_sum(out, in[0], 1, (const int[]){1}, false))
U1(sum_all, remat_sum_all(out, in[0]))
U1(mean, remat_mean(out, in[0], 1, (const int[]){0}, true))
U1(softmax, remat_softmax(out, in[0], 1))
U1(log_softmax, remat_log_softmax(out, in[0], 0))
U1(layer_norm, remat_layer_norm(out, in[0], 1, in[1], in[2], 1e-5))
U1(rms_norm, remat_rms_norm(out, in[0], 1, in[1], 1e-5))
U1(rms_norm_plain, remat_rms_norm(out, in[0], 2, NULL, 1e-3))
static remat_tensor *g_pos;
U1(rope, remat_rope(out, in[0], g_pos, 50.0))
U1(rope_default, remat_rope(out, in[0], NULL, 1e4))
U1(dropout, remat_dropout(out, in[0], 0.5, true))
U1(matmul, remat_matmul(out, in[0], in[1]))
U1(linear, remat_linear(out, in[0], in[1], in[2]))
U1(attention, remat_attention(out, in[0], in[1], in[2], true, 0))
U1(attention_gqa, remat_attention_causal(out, in[0], in[1], in[2], REMAT_CAUSAL_LOWER_RIGHT, 0))
U1(mse_loss, remat_mse_loss(out, in[0], in[1]))
U1(reshape, remat_reshape(out, in[0], 2, (const int64_t[]){3, 2}))
U1(view, remat_view(out, in[0], 1, (const int64_t[]){6}))
U1(transpose, remat_transpose(out, in[0], 0, 1))
U1(permute, remat_permute(out, in[0], 3, (const int[]){2, 0, 1}))
U1(slice, remat_slice(out, in[0], 1, 1, 4, 2))
U1(expand, remat_expand(out, in[0], 2, (const int64_t[]){2, 3}))
U1(unsqueeze, remat_unsqueeze(out, in[0], 1))
U1(squeeze, remat_squeeze(out, in[0], 0))
U1(contiguous, remat_contiguous(out, in[0]))

/* the ops whose gradient does not depend on their input (linear ones)
 * still get a graph through g: the check covers the grad_output */
static remat_tensor *g_idx, *g_targets;
static int f_embedding(remat_tensor *const *in, remat_tensor **out) {
    remat_tensor *e = NULL, *sq = NULL;
    int rc = remat_embedding(&e, in[0], g_idx);
    if (!rc) rc = remat_mul(&sq, e, e); /* makes the weight's second derivative non-zero */
    if (!rc) rc = remat_add(out, sq, e);
    remat_release(e), remat_release(sq);
    return rc;
}
static int f_cross_entropy(remat_tensor *const *in, remat_tensor **out) {
    return remat_cross_entropy(out, in[0], g_targets, 1);
}
/* transposed operands and a broadcast batch */
static int f_matmul_batched(remat_tensor *const *in, remat_tensor **out) {
    remat_tensor *bt = NULL;
    int rc = remat_transpose(&bt, in[1], 0, 1);
    if (!rc) rc = remat_matmul(out, in[0], bt);
    remat_release(bt);
    return rc;
}

/* in-place ops on a non-leaf copy y = x * 1, then y * y */
#define IP_CASE(nm, call)                                                                          \
    static int f_##nm(remat_tensor *const *in, remat_tensor **out) {                               \
        remat_tensor *y = NULL;                                                                    \
        int rc = remat_mul_scalar(&y, in[0], 1.0);                                                 \
        if (!rc) rc = (call);                                                                      \
        if (!rc) rc = remat_mul(out, y, y);                                                        \
        remat_release(y);                                                                          \
        return rc;                                                                                 \
    }
IP_CASE(add_, remat_add_(y, in[1], 2.0))
IP_CASE(mul_scalar_, remat_mul_scalar_(y, 3.0))
IP_CASE(relu_, remat_relu_(y))
/* mul_ with only b requiring grad (a's old value is a constant) */
static int f_mul_(remat_tensor *const *in, remat_tensor **out) {
    static const double av[6] = {0.5, -1.0, 1.5, 2.0, -0.5, 1.0};
    remat_tensor *y = rt_tensor(2, (const int64_t[]){2, 3}, REMAT_F64, av);
    int rc = remat_mul_(y, in[0]);
    if (!rc) rc = remat_mul(out, y, y);
    remat_release(y);
    return rc;
}
static int f_zero_(remat_tensor *const *in, remat_tensor **out) {
    remat_tensor *y = NULL, *z = NULL;
    int rc = remat_mul(&y, in[0], in[0]);
    if (!rc) rc = remat_zero_(y);
    if (!rc) rc = remat_add(&z, y, in[0]);
    if (!rc) rc = remat_mul(out, z, z);
    remat_release(y), remat_release(z);
    return rc;
}
static int f_copy_(remat_tensor *const *in, remat_tensor **out) {
    remat_tensor *y = NULL, *z = NULL;
    int rc = remat_mul_scalar(&y, in[0], 1.0);
    if (!rc) rc = remat_copy_(y, in[1]); /* in[1] broadcast into y */
    if (!rc) rc = remat_mul(&z, y, y);
    if (!rc) rc = remat_mul(out, z, in[0]);
    remat_release(y), remat_release(z);
    return rc;
}
#define SQ_CASE(nm, call)                                                                          \
    static int f_##nm(remat_tensor *const *in, remat_tensor **out) {                               \
        remat_tensor *y = NULL;                                                                    \
        int rc = (call);                                                                           \
        if (!rc) rc = remat_mul(out, y, y);                                                        \
        remat_release(y);                                                                          \
        return rc;                                                                                 \
    }
static remat_tensor *g_mask;
SQ_CASE(masked_fill, remat_masked_fill(&y, in[0], g_mask, 0.5))
SQ_CASE(where, remat_where(&y, g_mask, in[0], in[1]))
SQ_CASE(clone, remat_clone(&y, in[0]))
SQ_CASE(tag, remat_tag(&y, in[0], "t"))
SQ_CASE(max, remat_max(&y, NULL, in[0], 1, false))
static int f_to_device(remat_tensor *const *in, remat_tensor **out) {
    remat_tensor *y = NULL, *sq = NULL;
    const remat_device dev = {rt_testdev_register(), 0};
    int rc = remat_to_device(&y, in[0], dev);
    if (!rc) rc = remat_mul(&sq, y, y);
    if (!rc) rc = remat_to_device(out, sq, REMAT_DEVICE_CPU);
    remat_release(y), remat_release(sq);
    return rc;
}
/* f64 -> f64 is the input itself (no node): through f32 and back, with the
 * tolerance of f32 round-off left to the dedicated test below */
SQ_CASE(to_dtype, remat_to_dtype(&y, in[0], REMAT_F64))

static int f_cat(remat_tensor *const *in, remat_tensor **out) {
    remat_tensor *y = NULL;
    int rc = remat_cat(&y, 2, in, 0);
    if (!rc) rc = remat_mul(out, y, y);
    remat_release(y);
    return rc;
}
/* three (2, 1) pieces: p0 * p1 + p2 */
static int f_split(remat_tensor *const *in, remat_tensor **out) {
    remat_tensor *p[3] = {NULL}, *m = NULL;
    int n = 0;
    int rc = remat_split(p, 3, &n, in[0], 1, 1);
    if (!rc) rc = remat_mul(&m, p[0], p[1]);
    if (!rc) rc = remat_add(out, m, p[2]);
    for (int i = 0; i < 3; i++) remat_release(p[i]);
    remat_release(m);
    return rc;
}

typedef struct gg_case {
    const char *op;  /* registry name */
    const char *tag; /* several cases per op */
    gg_fn f;
    int n;
    remat_tensor *(*make)(int i);
} gg_case;

static remat_tensor *mk_23(int i) { return R(2, S23, -1, 1, 100 + (unsigned)i); }
static remat_tensor *mk_pos(int i) { return R(2, S23, 0.5, 2, 200 + (unsigned)i); }
static remat_tensor *mk_3(int i) { return R(1, S3, -1, 1, 300 + (unsigned)i); }
static remat_tensor *mk_relu(int i) { /* away from the kink */
    static const double v[6] = {-0.9, 0.4, -0.3, 0.8, 0.6, -0.7};
    RM_UNUSED(i);
    return rt_leaf(rt_tensor(2, S23, REMAT_F64, v));
}
static remat_tensor *mk_bcast(int i) { return i == 0 ? mk_23(0) : R(1, S3, 0.5, 2, 7); }
static remat_tensor *mk_pow(int i) { return i == 0 ? mk_pos(0) : R(1, S3, -1, 2, 8); }
static remat_tensor *mk_sum(int i) { return R(3, S223, -1, 1, 400 + (unsigned)i); }
static remat_tensor *mk_ln(int i) {
    return i == 0 ? mk_23(0) : R(1, S3, 0.5, 1.5, 50 + (unsigned)i);
}
static remat_tensor *mk_mm(int i) { return i == 0 ? mk_23(0) : R(2, S34, -1, 1, 60); }
static remat_tensor *mk_mmb(int i) { /* (2, 2, 3) @ (4, 3)^T */
    return i == 0 ? R(3, S223, -1, 1, 61) : R(2, (const int64_t[]){4, 3}, -1, 1, 62);
}
static remat_tensor *mk_mv(int i) { return i == 0 ? mk_23(0) : mk_3(1); }
static remat_tensor *mk_lin(int i) {
    if (i == 0) return R(3, S223, -1, 1, 70);
    if (i == 1) return R(2, (const int64_t[]){2, 3}, -1, 1, 71);
    return R(1, (const int64_t[]){2}, -1, 1, 72);
}
static remat_tensor *mk_att(int i) {
    return R(3, (const int64_t[]){1, 3, 2}, -1, 1, 80 + (unsigned)i);
}
static remat_tensor *mk_rope(int i) {
    RM_UNUSED(i);
    return R(4, (const int64_t[]){1, 2, 3, 4}, -1, 1, 93);
}
static remat_tensor *mk_gqa(int i) { /* q (1, 4, 2, 2) over k, v (1, 2, 3, 2) */
    return i == 0 ? R(4, (const int64_t[]){1, 4, 2, 2}, -1, 1, 94)
                  : R(4, (const int64_t[]){1, 2, 3, 2}, -1, 1, 94 + (unsigned)i);
}
static remat_tensor *mk_emb(int i) {
    RM_UNUSED(i);
    return R(2, (const int64_t[]){4, 2}, -1, 1, 90);
}
static remat_tensor *mk_ce(int i) {
    RM_UNUSED(i);
    return R(2, (const int64_t[]){3, 4}, -2, 2, 91);
}
static remat_tensor *mk_1x3(int i) {
    RM_UNUSED(i);
    return R(2, (const int64_t[]){1, 3}, -1, 1, 92);
}
static remat_tensor *mk_perm(int i) {
    RM_UNUSED(i);
    return mk_sum(0);
}

static const gg_case k_cases[] = {
    {"remat_neg", "", f_neg, 1, mk_23},
    {"remat_exp", "", f_exp, 1, mk_23},
    {"remat_log", "", f_log, 1, mk_pos},
    {"remat_sqrt", "", f_sqrt, 1, mk_pos},
    {"remat_tanh", "", f_tanh, 1, mk_23},
    {"remat_sigmoid", "", f_sigmoid, 1, mk_23},
    {"remat_relu", "", f_relu, 1, mk_relu},
    {"remat_gelu", "erf", f_gelu_erf, 1, mk_23},
    {"remat_gelu", "tanh", f_gelu_tanh, 1, mk_23},
    {"remat_bias_gelu", "erf", f_bias_gelu_erf, 2, mk_bcast},
    {"remat_bias_gelu", "tanh", f_bias_gelu_tanh, 2, mk_bcast},
    {"remat_silu", "", f_silu, 1, mk_23},
    {"remat_pow_scalar", "", f_pow_scalar, 1, mk_pos},
    {"remat_add_scalar", "", f_add_scalar, 1, mk_23},
    {"remat_sub_scalar", "", f_sub_scalar, 1, mk_23},
    {"remat_mul_scalar", "", f_mul_scalar, 1, mk_23},
    {"remat_div_scalar", "", f_div_scalar, 1, mk_23},
    {"remat_rsub_scalar", "", f_rsub_scalar, 1, mk_23},
    {"remat_add", "broadcast", f_add, 2, mk_bcast},
    {"remat_sub", "broadcast", f_sub, 2, mk_bcast},
    {"remat_mul", "broadcast", f_mul, 2, mk_bcast},
    {"remat_mul", "same", f_mul, 2, mk_23},
    {"remat_div", "broadcast", f_div, 2, mk_bcast},
    {"remat_pow", "broadcast", f_pow, 2, mk_pow},
    {"remat_sum", "", f_sum, 1, mk_sum},
    {"remat_sum_all", "", f_sum_all, 1, mk_sum},
    {"remat_mean", "", f_mean, 1, mk_sum},
    {"remat_softmax", "", f_softmax, 1, mk_23},
    {"remat_log_softmax", "", f_log_softmax, 1, mk_23},
    {"remat_layer_norm", "affine", f_layer_norm, 3, mk_ln},
    {"remat_rms_norm", "weight", f_rms_norm, 2, mk_ln},
    {"remat_rms_norm", "plain 2d", f_rms_norm_plain, 1, mk_23},
    {"remat_rope", "positions", f_rope, 1, mk_rope},
    {"remat_rope", "0..T-1", f_rope_default, 1, mk_rope},
    {"remat_dropout", "train", f_dropout, 1, mk_23},
    {"remat_embedding", "", f_embedding, 1, mk_emb},
    {"remat_cross_entropy", "ignore", f_cross_entropy, 1, mk_ce},
    {"remat_matmul", "mm", f_matmul, 2, mk_mm},
    {"remat_matmul", "batched_transposed", f_matmul_batched, 2, mk_mmb},
    {"remat_matmul", "mv", f_matmul, 2, mk_mv},
    {"remat_linear", "3d_bias", f_linear, 3, mk_lin},
    {"remat_attention", "causal", f_attention, 3, mk_att},
    {"remat_attention", "gqa lower-right", f_attention_gqa, 3, mk_gqa},
    {"remat_mse_loss", "", f_mse_loss, 2, mk_23},
    {"remat_reshape", "", f_reshape, 1, mk_23},
    {"remat_view", "", f_view, 1, mk_23},
    {"remat_transpose", "", f_transpose, 1, mk_23},
    {"remat_permute", "", f_permute, 1, mk_perm},
    {"remat_slice", "step", f_slice, 1, (remat_tensor * (*)(int)) mk_mm},
    {"remat_expand", "", f_expand, 1, mk_1x3},
    {"remat_unsqueeze", "", f_unsqueeze, 1, mk_23},
    {"remat_squeeze", "", f_squeeze, 1, mk_1x3},
    {"remat_contiguous", "", f_contiguous, 1, mk_23},
    {"remat_add_", "broadcast", f_add_, 2, mk_bcast},
    {"remat_mul_", "b only", f_mul_, 1, mk_23},
    {"remat_mul_scalar_", "", f_mul_scalar_, 1, mk_23},
    {"remat_relu_", "", f_relu_, 1, mk_relu},
    {"remat_zero_", "", f_zero_, 1, mk_23},
    {"remat_copy_", "broadcast", f_copy_, 2, mk_bcast},
    {"remat_masked_fill", "", f_masked_fill, 1, mk_23},
    {"remat_where", "broadcast", f_where, 2, mk_bcast},
    {"remat_clone", "", f_clone, 1, mk_23},
    {"remat_to_device", "testdev", f_to_device, 1, mk_23},
    {"remat_to_dtype", "same", f_to_dtype, 1, mk_23},
    {"remat_tag", "", f_tag, 1, mk_23},
    {"remat_max", "dim1", f_max, 1, mk_23},
    {"remat_cat", "dim0", f_cat, 2, mk_23},
    {"remat_split", "dim1", f_split, 1, mk_23},
};
#define N_CASES ((int)(sizeof k_cases / sizeof k_cases[0]))

/* Ops that refuse create_graph (REMAT_EUNSUPPORTED naming them) and why.
 * f builds a loss whose gradient through the op depends on the input. */
typedef struct refusal {
    const char *op;
    const char *why;
    gg_fn f;
} refusal;

static int r_mul_both(remat_tensor *const *in, remat_tensor **out) {
    remat_tensor *y = NULL;
    int rc = remat_mul_scalar(&y, in[0], 1.0);
    if (!rc) rc = remat_mul_(y, in[0]);
    if (!rc) rc = remat_mul(out, y, y);
    remat_release(y);
    return rc;
}
static const refusal k_refused[] = {
    {"remat_mul_", "both operands require grad: a's old value is a snapshot without a graph",
     r_mul_both},
};
#define N_REFUSED ((int)(sizeof k_refused / sizeof k_refused[0]))

/* ---- tests ------------------------------------------------------------------------------ */
Test(double_backward, every_registered_op_has_a_case_or_refuses) {
    for (int i = 0; i < rm_op_count(); i++) {
        const char *name = rm_op_name(i);
        bool found = false;
        for (int k = 0; k < N_CASES && !found; k++) found = strcmp(k_cases[k].op, name) == 0;
        for (int k = 0; k < N_REFUSED && !found; k++) found = strcmp(k_refused[k].op, name) == 0;
        cr_assert(found,
                  "op %s has neither a gradgradcheck case nor a refusal in "
                  "tests/test_double_backward.c",
                  name);
    }
    for (int k = 0; k < N_CASES; k++)
        cr_assert(rm_op_find(k_cases[k].op) >= 0, "case op %s is not registered", k_cases[k].op);
}

static void make_globals(void) {
    const double idx[5] = {0, 3, 1, 3, 2}, tg[3] = {2, 1, 0}, m[6] = {1, 0, 1, 0, 0, 1};
    g_mask = rt_tensor(2, S23, REMAT_I64, m);
    g_idx = rt_tensor(1, (const int64_t[]){5}, REMAT_I64, idx);
    g_targets = rt_tensor(1, (const int64_t[]){3}, REMAT_I64, tg);
    g_pos = rt_tensor(1, (const int64_t[]){3}, REMAT_I64, (const double[]){4, 1, 9});
}
static void free_globals(void) {
    remat_release(g_idx);
    remat_release(g_targets);
    remat_release(g_mask);
    remat_release(g_pos);
}

Test(double_backward, gradgradcheck_every_case, .init = make_globals, .fini = free_globals) {
    for (int k = 0; k < N_CASES; k++) {
        const gg_case *c = &k_cases[k];
        remat_tensor *x[MAXN] = {NULL};
        for (int i = 0; i < c->n; i++) x[i] = c->make(i);
        char name[96];
        snprintf(name, sizeof name, "%s(%s)", c->op, c->tag);
        gradgradcheck(name, c->f, c->n, x);
        for (int i = 0; i < c->n; i++) remat_release(x[i]);
    }
}

Test(double_backward, refused_ops_say_so, .init = make_globals, .fini = free_globals) {
    for (int k = 0; k < N_REFUSED; k++) {
        const refusal *r = &k_refused[k];
        remat_tensor *x = R(2, S23, 0.5, 1.5, 5), *y = NULL, *g = NULL;
        RT_OK(r->f(&x, &y));
        remat_tensor *s = NULL;
        RT_OK(remat_sum_all(&s, y));
        int rc = remat_grad_ex(1, &s, NULL, 1, &x, &k_create, &g);
        cr_assert_eq(rc, REMAT_EUNSUPPORTED, "%s: create_graph gave %s (%s), expected a refusal",
                     r->op, remat_err_name(rc), remat_last_error());
        cr_assert(strstr(remat_last_error(), r->op) != NULL,
                  "%s: the refusal does not name the op: %s", r->op, remat_last_error());
        cr_assert(strstr(remat_last_error(), "create_graph") != NULL, "%s: %s", r->op,
                  remat_last_error());
        remat_release(x), remat_release(y), remat_release(s);
    }
}

/* to_dtype across dtypes: d2/dx2 of sum(f32(x)^2) through the f32 copy and back is 2. */
Test(double_backward, to_dtype_across_dtypes) {
    remat_tensor *x = R(1, S3, -1, 1, 9), *y = NULL, *sq = NULL, *s = NULL, *g = NULL, *gs = NULL,
                 *h = NULL;
    RT_OK(remat_to_dtype(&y, x, REMAT_F32));
    RT_OK(remat_mul(&sq, y, y));
    RT_OK(remat_sum_all(&s, sq));
    RT_OK(remat_grad_ex(1, &s, NULL, 1, &x, &k_create, &g));
    cr_assert(g->dtype == REMAT_F64 && g->requires_grad);
    RT_OK(remat_sum_all(&gs, g));
    RT_OK(remat_grad(1, &gs, NULL, 1, &x, false, false, &h));
    double *hv = rt_values(h);
    for (int i = 0; i < 3; i++) cr_assert_eq(hv[i], 2.0, "element %d: %g", i, hv[i]);
    free(hv);
    remat_release(x), remat_release(y), remat_release(sq), remat_release(s), remat_release(g);
    remat_release(gs), remat_release(h);
}

/* ---- the .grad cycle (issue 32) ----------------------------------------------------------- */
static int g_warnings;
static char g_last_warning[512];
static void count_warning(void *ud, remat_log_level level, const char *msg) {
    (void)ud, (void)level;
    g_warnings++;
    snprintf(g_last_warning, sizeof g_last_warning, "%s", msg);
}

/* backward_ex with create_graph into .grad: .grad's graph refers to the
 * leaf, a cycle; it warns once (as PyTorch does), and resetting .grad
 * breaks it, leaving nothing alive. */
Test(double_backward, create_graph_into_grad_warns_of_the_cycle_that_reset_breaks) {
    remat_set_log_callback(count_warning, NULL);
    remat_tensor *x = rt_leaf(rt_rand(1, (int64_t[]){3}, REMAT_F64, -1, 1, 9));
    remat_tensor *y = NULL, *l = NULL;
    RT_OK(remat_mul(&y, x, x));
    RT_OK(remat_sum_all(&l, y));
    const remat_backward_options cg = {.create_graph = true};
    RT_OK(remat_backward_ex(1, &l, NULL, 0, NULL, &cg));
    cr_assert_not_null(remat_grad_fn(remat_tensor_grad(x)), ".grad is differentiable");
    cr_assert_eq(g_warnings, 1);
    cr_assert(strstr(g_last_warning, "reference cycle"), "%s", g_last_warning);
    RT_OK(remat_backward_ex(1, &l, NULL, 0, NULL, &cg));
    cr_assert_eq(g_warnings, 1, "once");
    remat_release(l);
    remat_release(y);
    RT_OK(remat_set_grad(x, NULL)); /* breaks the cycle */
    remat_release(x);
    cr_assert_eq(remat_live_tensors(), 0, "%lld left", (long long)remat_live_tensors());
    remat_set_log_callback(NULL, NULL);
}
