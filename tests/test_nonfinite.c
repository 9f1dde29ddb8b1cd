/* tests/test_nonfinite.c — issue 14 item 2: NaN and infinities through
 * every op, forward and backward, f32 and f64. Run under the sanitizer
 * suite (make test-asan) this is the check that no kernel reaches undefined
 * behaviour on non-finite values (the vectorised exp shifted a negative int
 * for a NaN; float-to-int conversions of NaN). Without sanitizers it checks
 * that the calls succeed and NaN propagates where it must. */
#include <math.h>
#include <string.h>

#include "support/rt.h"

typedef int (*op_fn)(remat_tensor **out, remat_tensor *x, remat_tensor *w);

/* x (2, 3, 4) with NaN, +Inf, -Inf and ordinary values; w the same shape. */
static remat_tensor *nonfinite(remat_dtype dt, unsigned seed) {
    int64_t sh[] = {2, 3, 4};
    double v[24];
    for (int i = 0; i < 24; i++) v[i] = (double)((i * 7 + (int)seed) % 11) - 5.0;
    v[1] = NAN;
    v[5] = INFINITY;
    v[6] = -INFINITY;
    v[13] = -NAN;
    v[17] = 1e300; /* inf in f32 */
    v[22] = -1e30;
    return rt_tensor(3, sh, dt, v);
}

static int op_add(remat_tensor **o, remat_tensor *x, remat_tensor *w) { return remat_add(o, x, w); }
static int op_sub(remat_tensor **o, remat_tensor *x, remat_tensor *w) { return remat_sub(o, x, w); }
static int op_mul(remat_tensor **o, remat_tensor *x, remat_tensor *w) { return remat_mul(o, x, w); }
static int op_div(remat_tensor **o, remat_tensor *x, remat_tensor *w) { return remat_div(o, x, w); }
static int op_pow(remat_tensor **o, remat_tensor *x, remat_tensor *w) { return remat_pow(o, x, w); }
static int op_adds(remat_tensor **o, remat_tensor *x, remat_tensor *w) {
    (void)w;
    return remat_add_scalar(o, x, NAN);
}
static int op_subs(remat_tensor **o, remat_tensor *x, remat_tensor *w) {
    (void)w;
    return remat_sub_scalar(o, x, INFINITY);
}
static int op_rsubs(remat_tensor **o, remat_tensor *x, remat_tensor *w) {
    (void)w;
    return remat_rsub_scalar(o, x, -INFINITY);
}
static int op_muls(remat_tensor **o, remat_tensor *x, remat_tensor *w) {
    (void)w;
    return remat_mul_scalar(o, x, INFINITY);
}
static int op_divs(remat_tensor **o, remat_tensor *x, remat_tensor *w) {
    (void)w;
    return remat_div_scalar(o, x, 0.0);
}
static int op_pows(remat_tensor **o, remat_tensor *x, remat_tensor *w) {
    (void)w;
    return remat_pow_scalar(o, x, NAN);
}
static int op_pows2(remat_tensor **o, remat_tensor *x, remat_tensor *w) {
    (void)w;
    return remat_pow_scalar(o, x, 0.5);
}
static int op_neg(remat_tensor **o, remat_tensor *x, remat_tensor *w) {
    (void)w;
    return remat_neg(o, x);
}
static int op_exp(remat_tensor **o, remat_tensor *x, remat_tensor *w) {
    (void)w;
    return remat_exp(o, x);
}
static int op_log(remat_tensor **o, remat_tensor *x, remat_tensor *w) {
    (void)w;
    return remat_log(o, x);
}
static int op_sqrt(remat_tensor **o, remat_tensor *x, remat_tensor *w) {
    (void)w;
    return remat_sqrt(o, x);
}
static int op_tanh(remat_tensor **o, remat_tensor *x, remat_tensor *w) {
    (void)w;
    return remat_tanh(o, x);
}
static int op_sigmoid(remat_tensor **o, remat_tensor *x, remat_tensor *w) {
    (void)w;
    return remat_sigmoid(o, x);
}
static int op_relu(remat_tensor **o, remat_tensor *x, remat_tensor *w) {
    (void)w;
    return remat_relu(o, x);
}
static int op_gelu(remat_tensor **o, remat_tensor *x, remat_tensor *w) {
    (void)w;
    return remat_gelu(o, x, REMAT_GELU_ERF);
}
static int op_gelu_t(remat_tensor **o, remat_tensor *x, remat_tensor *w) {
    (void)w;
    return remat_gelu(o, x, REMAT_GELU_TANH);
}
static int op_matmul(remat_tensor **o, remat_tensor *x, remat_tensor *w) {
    remat_tensor *wt = NULL;
    int rc = remat_transpose(&wt, w, 1, 2);
    if (!rc) rc = remat_matmul(o, x, wt);
    remat_release(wt);
    return rc;
}
static int op_linear(remat_tensor **o, remat_tensor *x, remat_tensor *w) {
    remat_tensor *w2 = NULL, *b = NULL;
    int rc = remat_sum(&w2, w, 1, (int[]){0}, false);      /* (3, 4) */
    if (!rc) rc = remat_sum(&b, w2, 1, (int[]){1}, false); /* (3) */
    if (!rc) rc = remat_linear(o, x, w2, b);
    remat_release(w2);
    remat_release(b);
    return rc;
}
static int op_softmax(remat_tensor **o, remat_tensor *x, remat_tensor *w) {
    (void)w;
    return remat_softmax(o, x, -1);
}
static int op_lsm(remat_tensor **o, remat_tensor *x, remat_tensor *w) {
    (void)w;
    return remat_log_softmax(o, x, 1);
}
static int op_ln(remat_tensor **o, remat_tensor *x, remat_tensor *w) {
    remat_tensor *g = NULL;
    int rc = remat_slice(&g, w, 0, 0, 1, 1);
    remat_tensor *g2 = NULL;
    if (!rc) rc = remat_reshape(&g2, g, 2, (int64_t[]){3, 4});
    if (!rc) rc = remat_layer_norm(o, x, 2, g2, g2, 1e-5);
    remat_release(g);
    remat_release(g2);
    return rc;
}
static int op_attn(remat_tensor **o, remat_tensor *x, remat_tensor *w) {
    return remat_attention(o, x, w, x, true, 0);
}
static int op_attn_nc(remat_tensor **o, remat_tensor *x, remat_tensor *w) {
    return remat_attention(o, w, x, w, false, 0.5);
}
static int op_dropout(remat_tensor **o, remat_tensor *x, remat_tensor *w) {
    (void)w;
    return remat_dropout(o, x, 0.5, true);
}
static int op_embedding(remat_tensor **o, remat_tensor *x, remat_tensor *w) {
    (void)w;
    remat_tensor *x2 = NULL,
                 *idx = rt_tensor(1, (int64_t[]){5}, REMAT_I64, (double[]){0, 5, 1, 5, 3});
    int rc = remat_reshape(&x2, x, 2, (int64_t[]){6, 4});
    if (!rc) rc = remat_embedding(o, x2, idx);
    remat_release(x2);
    remat_release(idx);
    return rc;
}
static int op_ce(remat_tensor **o, remat_tensor *x, remat_tensor *w) {
    (void)w;
    remat_tensor *x2 = NULL,
                 *t = rt_tensor(1, (int64_t[]){6}, REMAT_I64, (double[]){0, 1, 2, 3, -100, 1});
    int rc = remat_reshape(&x2, x, 2, (int64_t[]){6, 4});
    if (!rc) rc = remat_cross_entropy(o, x2, t, -100);
    remat_release(x2);
    remat_release(t);
    return rc;
}
static int op_mse(remat_tensor **o, remat_tensor *x, remat_tensor *w) {
    return remat_mse_loss(o, x, w);
}
static int op_sum(remat_tensor **o, remat_tensor *x, remat_tensor *w) {
    (void)w;
    return remat_sum(o, x, 1, (int[]){1}, true);
}
static int op_mean(remat_tensor **o, remat_tensor *x, remat_tensor *w) {
    (void)w;
    return remat_mean(o, x, 0, NULL, false);
}
static int op_max(remat_tensor **o, remat_tensor *x, remat_tensor *w) {
    (void)w;
    remat_tensor *idx = NULL;
    int rc = remat_max(o, &idx, x, 2, false);
    remat_release(idx);
    return rc;
}
static int op_sum_all(remat_tensor **o, remat_tensor *x, remat_tensor *w) {
    (void)w;
    return remat_sum_all(o, x);
}
static int op_view(remat_tensor **o, remat_tensor *x, remat_tensor *w) {
    (void)w;
    return remat_view(o, x, 2, (int64_t[]){-1, 4});
}
static int op_permute(remat_tensor **o, remat_tensor *x, remat_tensor *w) {
    (void)w;
    remat_tensor *p = NULL;
    int rc = remat_permute(&p, x, 3, (int[]){2, 0, 1});
    if (!rc) rc = remat_reshape(o, p, 1, (int64_t[]){-1});
    remat_release(p);
    return rc;
}
static int op_slice(remat_tensor **o, remat_tensor *x, remat_tensor *w) {
    (void)w;
    return remat_slice(o, x, 2, 1, 4, 2);
}
static int op_expand(remat_tensor **o, remat_tensor *x, remat_tensor *w) {
    (void)w;
    remat_tensor *u = NULL, *e = NULL;
    int rc = remat_unsqueeze(&u, x, 0);
    if (!rc) rc = remat_expand(&e, u, 4, (int64_t[]){2, -1, -1, -1});
    if (!rc) rc = remat_contiguous(o, e);
    remat_release(u);
    remat_release(e);
    return rc;
}
static int op_squeeze(remat_tensor **o, remat_tensor *x, remat_tensor *w) {
    (void)w;
    remat_tensor *s = NULL;
    int rc = remat_slice(&s, x, 1, 0, 1, 1);
    if (!rc) rc = remat_squeeze(o, s, 1);
    remat_release(s);
    return rc;
}
static int op_cat(remat_tensor **o, remat_tensor *x, remat_tensor *w) {
    return remat_cat(o, 2, (remat_tensor *[]){x, w}, 1);
}
static int op_split(remat_tensor **o, remat_tensor *x, remat_tensor *w) {
    (void)w;
    remat_tensor *parts[4] = {0};
    int n = 0;
    int rc = remat_split(parts, 4, &n, x, 3, 2);
    if (!rc) rc = remat_mul(o, parts[0], parts[0]);
    for (int i = 0; i < n; i++) remat_release(parts[i]);
    return rc;
}
static int op_masked_fill(remat_tensor **o, remat_tensor *x, remat_tensor *w) {
    return remat_masked_fill(o, x, w, NAN);
}
static int op_where(remat_tensor **o, remat_tensor *x, remat_tensor *w) {
    return remat_where(o, w, x, w);
}
/* in-place ops on a copy (the leaf itself may not be modified in place) */
static int op_inplace(remat_tensor **o, remat_tensor *x, remat_tensor *w) {
    int rc = remat_mul_scalar(o, x, 1.0);
    if (!rc) rc = remat_copy_(*o, w);
    if (!rc) rc = remat_add_(*o, x, INFINITY);
    if (!rc) rc = remat_mul_(*o, w);
    if (!rc) rc = remat_mul_scalar_(*o, NAN);
    if (!rc) rc = remat_relu_(*o);
    return rc;
}

static const struct {
    const char *name;
    op_fn fn;
} k_ops[] = {
    {"add", op_add},          {"sub", op_sub},
    {"mul", op_mul},          {"div", op_div},
    {"pow", op_pow},          {"add_scalar", op_adds},
    {"sub_scalar", op_subs},  {"rsub_scalar", op_rsubs},
    {"mul_scalar", op_muls},  {"div_scalar", op_divs},
    {"pow_scalar", op_pows},  {"pow_scalar_half", op_pows2},
    {"neg", op_neg},          {"exp", op_exp},
    {"log", op_log},          {"sqrt", op_sqrt},
    {"tanh", op_tanh},        {"sigmoid", op_sigmoid},
    {"relu", op_relu},        {"gelu", op_gelu},
    {"gelu_tanh", op_gelu_t}, {"matmul", op_matmul},
    {"linear", op_linear},    {"softmax", op_softmax},
    {"log_softmax", op_lsm},  {"layer_norm", op_ln},
    {"attention", op_attn},   {"attention_noncausal", op_attn_nc},
    {"dropout", op_dropout},  {"embedding", op_embedding},
    {"cross_entropy", op_ce}, {"mse_loss", op_mse},
    {"sum", op_sum},          {"mean", op_mean},
    {"max", op_max},          {"sum_all", op_sum_all},
    {"view", op_view},        {"permute", op_permute},
    {"slice", op_slice},      {"expand", op_expand},
    {"squeeze", op_squeeze},  {"cat", op_cat},
    {"split", op_split},      {"masked_fill", op_masked_fill},
    {"where", op_where},      {"inplace", op_inplace},
};

static void run_all(remat_dtype dt) {
    for (size_t i = 0; i < sizeof k_ops / sizeof k_ops[0]; i++) {
        remat_tensor *x = rt_leaf(nonfinite(dt, 1)), *w = rt_leaf(nonfinite(dt, 4));
        remat_tensor *y = NULL, *s = NULL;
        int rc = k_ops[i].fn(&y, x, w);
        cr_assert_eq(rc, REMAT_OK, "%s %s: %s", k_ops[i].name, remat_dtype_name(dt),
                     remat_last_error());
        RT_OK(remat_sum_all(&s, y));
        RT_OK(remat_backward_scalar(s));
        double v;
        RT_OK(remat_item(s, &v));
        cr_assert(isnan(v) || isinf(v) || k_ops[i].fn == op_max || k_ops[i].fn == op_relu ||
                      k_ops[i].fn == op_slice || k_ops[i].fn == op_squeeze ||
                      k_ops[i].fn == op_embedding || k_ops[i].fn == op_split ||
                      k_ops[i].fn == op_inplace /* may sum to a finite value */,
                  "%s %s: sum of outputs %g is finite", k_ops[i].name, remat_dtype_name(dt), v);
        remat_release(s);
        remat_release(y);
        remat_release(x);
        remat_release(w);
    }
}

Test(nonfinite, every_op_f32_forward_and_backward) { run_all(REMAT_F32); }
Test(nonfinite, every_op_f64_forward_and_backward) { run_all(REMAT_F64); }

/* exp and its users at the special values, f32 (the vectorised kernel) */
Test(nonfinite, vectorised_exp_special_values) {
    int64_t sh[] = {6};
    double in[] = {NAN, INFINITY, -INFINITY, 100.0, -200.0, 0.0};
    remat_tensor *x = rt_tensor(1, sh, REMAT_F32, in), *y = NULL;
    RT_OK(remat_exp(&y, x));
    double v;
    RT_OK(remat_item_at(y, 0, &v));
    cr_assert(isnan(v));
    RT_OK(remat_item_at(y, 1, &v));
    cr_assert(isinf(v) && v > 0);
    RT_OK(remat_item_at(y, 2, &v));
    cr_assert_eq(v, 0.0);
    RT_OK(remat_item_at(y, 3, &v));
    cr_assert(isinf(v));
    RT_OK(remat_item_at(y, 4, &v));
    cr_assert_eq(v, 0.0);
    RT_OK(remat_item_at(y, 5, &v));
    cr_assert_eq(v, 1.0);
    remat_release(y);
    RT_OK(remat_tanh(&y, x));
    RT_OK(remat_item_at(y, 0, &v));
    cr_assert(isnan(v));
    RT_OK(remat_item_at(y, 1, &v));
    cr_assert_eq(v, 1.0);
    RT_OK(remat_item_at(y, 2, &v));
    cr_assert_eq(v, -1.0);
    remat_release(y);
    remat_release(x);
}

/* float -> i64 conversions of non-finite values are defined: NaN -> 0,
 * infinities and out-of-range values saturate */
Test(nonfinite, conversions_to_i64) {
    int64_t sh[] = {4};
    remat_tensor *t = NULL;
    RT_OK(remat_full(&t, 1, sh, NAN, REMAT_I64, REMAT_DEVICE_CPU));
    double v;
    RT_OK(remat_item_at(t, 0, &v));
    cr_assert_eq(v, 0.0);
    remat_tensor *src = rt_tensor(1, sh, REMAT_F32, (double[]){NAN, INFINITY, -INFINITY, 1e30});
    RT_OK(remat_copy_(t, src));
    remat_release(src);
    int64_t out[4];
    RT_OK(remat_copy_to_buffer(t, REMAT_I64, out, 4));
    cr_assert_eq(out[0], 0);
    cr_assert_eq(out[1], INT64_MAX);
    cr_assert_eq(out[2], INT64_MIN);
    cr_assert_eq(out[3], INT64_MAX);
    remat_tensor *f = rt_tensor(1, sh, REMAT_F64, (double[]){NAN, INFINITY, -1e300, 3.7});
    RT_OK(remat_copy_to_buffer(f, REMAT_I64, out, 4));
    cr_assert_eq(out[0], 0);
    cr_assert_eq(out[1], INT64_MAX);
    cr_assert_eq(out[2], INT64_MIN);
    cr_assert_eq(out[3], 3);
    remat_release(f);
    remat_release(t);
}

/* relu at NaN follows PyTorch (issue 32): relu(NaN) is NaN, not 0, and relu_
 * too, in every float dtype; the gradient there is 0 (PyTorch's
 * threshold_backward passes the gradient where the output is > 0). */
Test(nonfinite, relu_passes_nan_on_as_pytorch) {
    const double in[6] = {NAN, -1.0, 2.0, -INFINITY, INFINITY, -0.0};
    const double want[6] = {NAN, 0.0, 2.0, 0.0, INFINITY, 0.0};
    const remat_dtype dts[3] = {REMAT_F32, REMAT_F64, REMAT_BF16};
    for (int k = 0; k < 3; k++) {
        remat_tensor *x64 = NULL, *x = NULL, *y = NULL, *s = NULL, *z = NULL;
        RT_OK(remat_from_data(&x64, 1, (int64_t[]){6}, REMAT_F64, in));
        RT_OK(remat_to_dtype(&x, x64, dts[k]));
        RT_OK(remat_set_requires_grad(x, true));
        RT_OK(remat_relu(&y, x));
        RT_OK(remat_sum_all(&s, y));
        RT_OK(remat_backward_scalar(s));
        RT_OK(remat_clone(&z, x64));
        RT_OK(remat_relu_(z));
        for (int i = 0; i < 6; i++) {
            double v = rt_item_at(y, i), vi = rt_item_at(z, i);
            double g = rt_item_at(remat_tensor_grad(x), i);
            if (isnan(want[i])) {
                cr_assert(isnan(v) && isnan(vi), "%s relu(NaN) = %g, relu_ %g",
                          remat_dtype_name(dts[k]), v, vi);
            } else {
                cr_assert_eq(v, want[i], "%s relu(%g) = %g", remat_dtype_name(dts[k]), in[i], v);
                cr_assert_eq(vi, want[i], "relu_(%g) = %g", in[i], vi);
            }
            cr_assert_eq(g, in[i] > 0 ? 1.0 : 0.0, "%s relu'(%g) = %g", remat_dtype_name(dts[k]),
                         in[i], g);
        }
        remat_release(z);
        remat_release(s);
        remat_release(y);
        remat_release(x);
        remat_release(x64);
    }
}
