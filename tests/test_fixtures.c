/*
 * tests/test_fixtures.c — remat's ops against PyTorch golden values.
 *
 * Every case in tests/fixtures/index.txt (written by scripts/gen_fixtures.py
 * with PyTorch, committed because CI has none) is loaded, its inputs are
 * built (requires_grad on exactly the inputs the fixture has a `grad` line
 * for), the recorded views are applied, the op is run through the
 * dispatcher below, every output is compared, remat_backward runs with the
 * recorded upstream gradients and the gradient of every stored input is
 * compared. One parameterized Criterion test per op family; each case runs
 * in its own process, so a crash names its case.
 *
 * Tolerances (|remat - torch| <= atol + rtol * |torch|, elementwise):
 *   f64: atol 1e-10, rtol 1e-9
 *   f32: atol 1e-5,  rtol 1e-4
 *   i64 outputs (max indices): exact.
 * They are the same for every op; docs/fixtures.md explains them. A
 * mismatch is a bug in the op (or in the fixture), not a reason to widen
 * them.
 *
 * With REMAT_TEST_DEVICE=cuda (make test-cuda) the inputs and upstream gradients are put
 * on the GPU and the results read back (tests/support/rt.h); without a GPU every case is
 * reported skipped with the reason.
 *
 * A missing fixture file, a malformed one, an index entry whose op the
 * dispatcher does not know, or an op without an f32 and an f64 case all
 * fail (they never skip).
 */
#include <criterion/criterion.h>
#include <criterion/parameterized.h>
#include <dirent.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/core.h"
#include "ops/registry.h"
#include "support/fixtures.h"
#include "support/rt.h"

/* REMAT_TEST_DEVICE=cuda runs every case on the GPU (tests/support/rt.h) */
RT_ON_TEST_DEVICE

#define F64_ATOL 1e-10
#define F64_RTOL 1e-9
#define F32_ATOL 1e-5
#define F32_RTOL 1e-4

#define MAX_IN 8
#define MAX_OUT 16

/* ------------------------------------------------------------------------------------------
 * One case being run: the fixture, the stored (leaf) inputs and the viewed inputs.
 * ------------------------------------------------------------------------------------------ */
typedef struct run {
    const fx_case *c;
    int n_in;
    const fx_tensor *fin[MAX_IN];
    remat_tensor *base[MAX_IN]; /* leaves (requires_grad where the fixture has a grad) */
    remat_tensor *in[MAX_IN];   /* after the fixture's views */
    char err[1024];
} run;

static remat_tensor *input_or_null(run *r, const char *name) {
    for (int i = 0; i < r->n_in; i++)
        if (strcmp(r->fin[i]->name, name) == 0) return r->in[i];
    return NULL;
}

/* The viewed input `name`; fails (REMAT_EFORMAT) if the fixture lacks it. */
static int need(run *r, const char *name, remat_tensor **t) {
    *t = input_or_null(r, name);
    if (!*t)
        return remat_set_error(REMAT_EFORMAT, "%s: op %s needs an input named '%s'", r->c->path,
                               r->c->op, name);
    return REMAT_OK;
}

#define NEED(name, var)                                                                            \
    remat_tensor *var;                                                                             \
    do {                                                                                           \
        int need_rc_ = need(r, name, &var);                                                        \
        if (need_rc_) return need_rc_;                                                             \
    } while (0)
#define PARAM_FAIL() remat_set_error(REMAT_EFORMAT, "%s", r->err)
#define PINT(name, var)                                                                            \
    int64_t var;                                                                                   \
    if (!fx_param_int(r->c, name, &var, r->err, sizeof r->err)) return PARAM_FAIL()
#define PDBL(name, var)                                                                            \
    double var;                                                                                    \
    if (!fx_param_double(r->c, name, &var, r->err, sizeof r->err)) return PARAM_FAIL()
#define PINTS(name, arr, cnt)                                                                      \
    int64_t arr[REMAT_MAX_DIMS];                                                                   \
    int cnt;                                                                                       \
    if (!fx_param_ints(r->c, name, arr, REMAT_MAX_DIMS, &cnt, r->err, sizeof r->err))              \
    return PARAM_FAIL()

/* Dispatcher entry: runs the op on r's inputs, writes new references to
 * outs[0..*n_out). */
typedef int (*op_fn)(run *r, remat_tensor **outs, int *n_out);

/* ---- elementwise ---- */
typedef int (*bin_fn)(remat_tensor **, remat_tensor *, remat_tensor *);
static int binary(run *r, remat_tensor **o, int *n, bin_fn f) {
    NEED("a", a);
    NEED("b", b);
    *n = 1;
    return f(&o[0], a, b);
}
static int op_add(run *r, remat_tensor **o, int *n) { return binary(r, o, n, remat_add); }
static int op_sub(run *r, remat_tensor **o, int *n) { return binary(r, o, n, remat_sub); }
static int op_mul(run *r, remat_tensor **o, int *n) { return binary(r, o, n, remat_mul); }
static int op_div(run *r, remat_tensor **o, int *n) { return binary(r, o, n, remat_div); }
static int op_pow(run *r, remat_tensor **o, int *n) { return binary(r, o, n, remat_pow); }
static int op_matmul(run *r, remat_tensor **o, int *n) { return binary(r, o, n, remat_matmul); }
static int op_mse_loss(run *r, remat_tensor **o, int *n) { return binary(r, o, n, remat_mse_loss); }

typedef int (*scal_fn)(remat_tensor **, remat_tensor *, double);
static int scalar(run *r, remat_tensor **o, int *n, scal_fn f, const char *pname) {
    NEED("a", a);
    PDBL(pname, s);
    *n = 1;
    return f(&o[0], a, s);
}
static int op_add_scalar(run *r, remat_tensor **o, int *n) {
    return scalar(r, o, n, remat_add_scalar, "s");
}
static int op_sub_scalar(run *r, remat_tensor **o, int *n) {
    return scalar(r, o, n, remat_sub_scalar, "s");
}
static int op_rsub_scalar(run *r, remat_tensor **o, int *n) {
    return scalar(r, o, n, remat_rsub_scalar, "s");
}
static int op_mul_scalar(run *r, remat_tensor **o, int *n) {
    return scalar(r, o, n, remat_mul_scalar, "s");
}
static int op_div_scalar(run *r, remat_tensor **o, int *n) {
    return scalar(r, o, n, remat_div_scalar, "s");
}
static int op_pow_scalar(run *r, remat_tensor **o, int *n) {
    return scalar(r, o, n, remat_pow_scalar, "exponent");
}

typedef int (*un_fn)(remat_tensor **, remat_tensor *);
static int unary(run *r, remat_tensor **o, int *n, un_fn f) {
    NEED("a", a);
    *n = 1;
    return f(&o[0], a);
}
static int op_neg(run *r, remat_tensor **o, int *n) { return unary(r, o, n, remat_neg); }
static int op_exp(run *r, remat_tensor **o, int *n) { return unary(r, o, n, remat_exp); }
static int op_log(run *r, remat_tensor **o, int *n) { return unary(r, o, n, remat_log); }
static int op_sqrt(run *r, remat_tensor **o, int *n) { return unary(r, o, n, remat_sqrt); }
static int op_tanh(run *r, remat_tensor **o, int *n) { return unary(r, o, n, remat_tanh); }
static int op_sigmoid(run *r, remat_tensor **o, int *n) { return unary(r, o, n, remat_sigmoid); }
static int op_relu(run *r, remat_tensor **o, int *n) { return unary(r, o, n, remat_relu); }
static int op_silu(run *r, remat_tensor **o, int *n) { return unary(r, o, n, remat_silu); }
static int op_contiguous(run *r, remat_tensor **o, int *n) {
    return unary(r, o, n, remat_contiguous);
}
static int op_sum_all(run *r, remat_tensor **o, int *n) { return unary(r, o, n, remat_sum_all); }

static int op_gelu(run *r, remat_tensor **o, int *n) {
    NEED("a", a);
    const char *ap = fx_param_str(r->c, "approximate");
    remat_gelu_approx mode;
    if (ap && strcmp(ap, "erf") == 0) mode = REMAT_GELU_ERF;
    else if (ap && strcmp(ap, "tanh") == 0) mode = REMAT_GELU_TANH;
    else
        return remat_set_error(REMAT_EFORMAT, "%s: gelu needs 'param approximate erf|tanh'",
                               r->c->path);
    *n = 1;
    return remat_gelu(&o[0], a, mode);
}

static int op_bias_gelu(run *r, remat_tensor **o, int *n) {
    NEED("x", x);
    NEED("bias", b);
    const char *ap = fx_param_str(r->c, "approximate");
    remat_gelu_approx mode;
    if (ap && strcmp(ap, "erf") == 0) mode = REMAT_GELU_ERF;
    else if (ap && strcmp(ap, "tanh") == 0) mode = REMAT_GELU_TANH;
    else
        return remat_set_error(REMAT_EFORMAT, "%s: bias_gelu needs 'param approximate erf|tanh'",
                               r->c->path);
    *n = 1;
    return remat_bias_gelu(&o[0], x, b, mode);
}

/* ---- linear algebra, normalisation ---- */
static int op_linear(run *r, remat_tensor **o, int *n) {
    NEED("x", x);
    NEED("weight", w);
    *n = 1;
    return remat_linear(&o[0], x, w, input_or_null(r, "bias"));
}

static int op_softmax(run *r, remat_tensor **o, int *n) {
    NEED("a", a);
    PINT("dim", dim);
    *n = 1;
    return remat_softmax(&o[0], a, (int)dim);
}

static int op_log_softmax(run *r, remat_tensor **o, int *n) {
    NEED("a", a);
    PINT("dim", dim);
    *n = 1;
    return remat_log_softmax(&o[0], a, (int)dim);
}

static int op_layer_norm(run *r, remat_tensor **o, int *n) {
    NEED("x", x);
    PINT("n_norm", n_norm);
    PDBL("eps", eps);
    *n = 1;
    return remat_layer_norm(&o[0], x, (int)n_norm, input_or_null(r, "weight"),
                            input_or_null(r, "bias"), eps);
}

static int op_rms_norm(run *r, remat_tensor **o, int *n) {
    NEED("x", x);
    PINT("n_norm", n_norm);
    PDBL("eps", eps);
    *n = 1;
    return remat_rms_norm(&o[0], x, (int)n_norm, input_or_null(r, "weight"), eps);
}

static int op_rope(run *r, remat_tensor **o, int *n) {
    NEED("x", x);
    PDBL("theta", theta);
    *n = 1;
    return remat_rope(&o[0], x, input_or_null(r, "positions"), theta);
}

static int op_attention(run *r, remat_tensor **o, int *n) {
    NEED("q", q);
    NEED("k", k);
    NEED("v", v);
    PINT("causal", causal);
    PDBL("scale", scale);
    *n = 1;
    /* the lower-right causal mask (a KV cache's): a param of the cases that have it */
    const char *lr = fx_param_str(r->c, "lower_right");
    if (lr && strcmp(lr, "1") == 0)
        return remat_attention_causal(&o[0], q, k, v, REMAT_CAUSAL_LOWER_RIGHT, scale);
    return remat_attention(&o[0], q, k, v, causal != 0, scale);
}

static int op_dropout(run *r, remat_tensor **o, int *n) {
    NEED("a", a);
    PDBL("p", p);
    PINT("train", train);
    *n = 1;
    return remat_dropout(&o[0], a, p, train != 0);
}

/* ---- embedding, losses ---- */
static int op_embedding(run *r, remat_tensor **o, int *n) {
    NEED("weight", w);
    NEED("indices", idx);
    *n = 1;
    return remat_embedding(&o[0], w, idx);
}

static int op_cross_entropy(run *r, remat_tensor **o, int *n) {
    NEED("logits", logits);
    NEED("targets", targets);
    PINT("ignore_index", ignore);
    *n = 1;
    return remat_cross_entropy(&o[0], logits, targets, ignore);
}

/* ---- reductions ---- */
typedef int (*red_fn)(remat_tensor **, remat_tensor *, int, const int *, bool);
static int reduce(run *r, remat_tensor **o, int *n, red_fn f) {
    NEED("a", a);
    PINTS("dims", d64, nd);
    PINT("keepdim", keepdim);
    int dims[REMAT_MAX_DIMS];
    for (int i = 0; i < nd; i++) dims[i] = (int)d64[i];
    *n = 1;
    return f(&o[0], a, nd, nd ? dims : NULL, keepdim != 0);
}
static int op_sum(run *r, remat_tensor **o, int *n) { return reduce(r, o, n, remat_sum); }
static int op_mean(run *r, remat_tensor **o, int *n) { return reduce(r, o, n, remat_mean); }

static int op_max(run *r, remat_tensor **o, int *n) {
    NEED("a", a);
    PINT("dim", dim);
    PINT("keepdim", keepdim);
    int rc = remat_max(&o[0], &o[1], a, (int)dim, keepdim != 0);
    *n = rc == REMAT_OK ? 2 : 0;
    return rc;
}

/* ---- views and shape ops ---- */
static int op_reshape(run *r, remat_tensor **o, int *n) {
    NEED("a", a);
    PINTS("shape", shape, nd);
    *n = 1;
    return remat_reshape(&o[0], a, nd, shape);
}

static int op_view(run *r, remat_tensor **o, int *n) {
    NEED("a", a);
    PINTS("shape", shape, nd);
    *n = 1;
    return remat_view(&o[0], a, nd, shape);
}

static int op_transpose(run *r, remat_tensor **o, int *n) {
    NEED("a", a);
    PINT("dim0", d0);
    PINT("dim1", d1);
    *n = 1;
    return remat_transpose(&o[0], a, (int)d0, (int)d1);
}

static int op_permute(run *r, remat_tensor **o, int *n) {
    NEED("a", a);
    PINTS("perm", p64, np);
    int perm[REMAT_MAX_DIMS];
    for (int i = 0; i < np; i++) perm[i] = (int)p64[i];
    *n = 1;
    return remat_permute(&o[0], a, np, perm);
}

static int op_slice(run *r, remat_tensor **o, int *n) {
    NEED("a", a);
    PINT("dim", dim);
    PINT("start", start);
    PINT("end", end);
    PINT("step", step);
    *n = 1;
    return remat_slice(&o[0], a, (int)dim, start, end, step);
}

static int op_expand(run *r, remat_tensor **o, int *n) {
    NEED("a", a);
    PINTS("shape", shape, nd);
    *n = 1;
    return remat_expand(&o[0], a, nd, shape);
}

static int op_unsqueeze(run *r, remat_tensor **o, int *n) {
    NEED("a", a);
    PINT("dim", dim);
    *n = 1;
    return remat_unsqueeze(&o[0], a, (int)dim);
}

static int op_squeeze(run *r, remat_tensor **o, int *n) {
    NEED("a", a);
    PINT("dim", dim);
    *n = 1;
    return remat_squeeze(&o[0], a, (int)dim);
}

/* ---- copies and names ---- */
static int op_clone(run *r, remat_tensor **o, int *n) {
    NEED("a", a);
    *n = 1;
    return remat_clone(&o[0], a);
}

static int op_to_dtype(run *r, remat_tensor **o, int *n) {
    NEED("a", a);
    const char *name = fx_param_str(r->c, "dtype");
    remat_dtype dt = REMAT_F32;
    if (!name || (strcmp(name, "f32") != 0 && strcmp(name, "f64") != 0))
        return remat_set_error(REMAT_EFORMAT, "%s: param dtype must be f32 or f64", r->c->path);
    if (strcmp(name, "f64") == 0) dt = REMAT_F64;
    *n = 1;
    return remat_to_dtype(&o[0], a, dt);
}

static int op_to_device(run *r, remat_tensor **o, int *n) {
    NEED("a", a);
    const char *name = fx_param_str(r->c, "device");
    int type = name ? remat_device_type_id(name) : -1;
    if (type < 0)
        return remat_set_error(REMAT_EFORMAT, "%s: param device names no device type", r->c->path);
    *n = 1;
    return remat_to_device(&o[0], a, (remat_device){type, 0});
}

static int op_tag(run *r, remat_tensor **o, int *n) {
    NEED("a", a);
    const char *name = fx_param_str(r->c, "name");
    if (!name) return remat_set_error(REMAT_EFORMAT, "%s: tag needs a param name", r->c->path);
    *n = 1;
    return remat_tag(&o[0], a, name);
}

/* cat takes every input, in file order (t0, t1, ...). */
static int op_cat(run *r, remat_tensor **o, int *n) {
    PINT("dim", dim);
    *n = 1;
    return remat_cat(&o[0], r->n_in, r->in, (int)dim);
}

static int op_split(run *r, remat_tensor **o, int *n) {
    NEED("a", a);
    PINT("split_size", size);
    PINT("dim", dim);
    return remat_split(o, MAX_OUT, n, a, size, (int)dim);
}

/* ---- selection ---- */
static int op_masked_fill(run *r, remat_tensor **o, int *n) {
    NEED("a", a);
    NEED("mask", mask);
    PDBL("value", value);
    *n = 1;
    return remat_masked_fill(&o[0], a, mask, value);
}

static int op_where(run *r, remat_tensor **o, int *n) {
    NEED("cond", cond);
    NEED("a", a);
    NEED("b", b);
    *n = 1;
    return remat_where(&o[0], cond, a, b);
}

/* ---- in-place: applied to a clone of input a (as the generator does), so
 * the leaf stays untouched and gradients flow through the in-place node. */
static int inplace(run *r, remat_tensor **o, int *n, int which) {
    NEED("a", a);
    remat_tensor *b = input_or_null(r, "b");
    if ((which <= 1 || which == 5) && !b)
        return remat_set_error(REMAT_EFORMAT, "%s: op %s needs an input named 'b'", r->c->path,
                               r->c->op);
    double s = 0;
    if (which == 0 && !fx_param_double(r->c, "alpha", &s, r->err, sizeof r->err))
        return PARAM_FAIL();
    if (which == 2 && !fx_param_double(r->c, "s", &s, r->err, sizeof r->err)) return PARAM_FAIL();
    remat_tensor *y = NULL;
    int rc = remat_clone(&y, a);
    if (rc) return rc;
    switch (which) {
    case 0: rc = remat_add_(y, b, s); break;
    case 1: rc = remat_mul_(y, b); break;
    case 2: rc = remat_mul_scalar_(y, s); break;
    case 3: rc = remat_relu_(y); break;
    case 4: rc = remat_zero_(y); break;
    default: rc = remat_copy_(y, b); break;
    }
    if (rc) {
        remat_release(y);
        return rc;
    }
    o[0] = y;
    *n = 1;
    return REMAT_OK;
}
static int op_add_(run *r, remat_tensor **o, int *n) { return inplace(r, o, n, 0); }
static int op_mul_(run *r, remat_tensor **o, int *n) { return inplace(r, o, n, 1); }
static int op_mul_scalar_(run *r, remat_tensor **o, int *n) { return inplace(r, o, n, 2); }
static int op_relu_(run *r, remat_tensor **o, int *n) { return inplace(r, o, n, 3); }
static int op_zero_(run *r, remat_tensor **o, int *n) { return inplace(r, o, n, 4); }
static int op_copy_(run *r, remat_tensor **o, int *n) { return inplace(r, o, n, 5); }

/* ------------------------------------------------------------------------------------------
 * The dispatcher: op name (as written by the generator) → call, and its family
 * (one Criterion test per family).
 * ------------------------------------------------------------------------------------------ */
typedef struct op_entry {
    const char *op;
    const char *family;
    op_fn fn;
} op_entry;

static const op_entry k_ops[] = {
    {"add", "binary", op_add},
    {"sub", "binary", op_sub},
    {"mul", "binary", op_mul},
    {"div", "binary", op_div},
    {"pow", "binary", op_pow},
    {"add_scalar", "scalar", op_add_scalar},
    {"sub_scalar", "scalar", op_sub_scalar},
    {"rsub_scalar", "scalar", op_rsub_scalar},
    {"mul_scalar", "scalar", op_mul_scalar},
    {"div_scalar", "scalar", op_div_scalar},
    {"pow_scalar", "scalar", op_pow_scalar},
    {"neg", "unary", op_neg},
    {"exp", "unary", op_exp},
    {"log", "unary", op_log},
    {"sqrt", "unary", op_sqrt},
    {"tanh", "unary", op_tanh},
    {"sigmoid", "unary", op_sigmoid},
    {"relu", "unary", op_relu},
    {"gelu", "unary", op_gelu},
    {"bias_gelu", "unary", op_bias_gelu},
    {"silu", "unary", op_silu},
    {"matmul", "matmul", op_matmul},
    {"linear", "linear", op_linear},
    {"softmax", "softmax", op_softmax},
    {"log_softmax", "softmax", op_log_softmax},
    {"layer_norm", "layer_norm", op_layer_norm},
    {"rms_norm", "rms_norm", op_rms_norm},
    {"rope", "rope", op_rope},
    {"attention", "attention", op_attention},
    {"dropout", "dropout", op_dropout},
    {"embedding", "embedding", op_embedding},
    {"cross_entropy", "losses", op_cross_entropy},
    {"mse_loss", "losses", op_mse_loss},
    {"sum", "reductions", op_sum},
    {"mean", "reductions", op_mean},
    {"sum_all", "reductions", op_sum_all},
    {"max", "max", op_max},
    {"reshape", "views", op_reshape},
    {"view", "views", op_view},
    {"transpose", "views", op_transpose},
    {"permute", "views", op_permute},
    {"slice", "views", op_slice},
    {"expand", "views", op_expand},
    {"contiguous", "views", op_contiguous},
    {"unsqueeze", "views", op_unsqueeze},
    {"squeeze", "views", op_squeeze},
    {"clone", "copies", op_clone},
    {"to_dtype", "copies", op_to_dtype},
    {"to_device", "copies", op_to_device},
    {"tag", "copies", op_tag},
    {"cat", "cat_split", op_cat},
    {"split", "cat_split", op_split},
    {"masked_fill", "selection", op_masked_fill},
    {"where", "selection", op_where},
    {"add_", "inplace", op_add_},
    {"mul_", "inplace", op_mul_},
    {"mul_scalar_", "inplace", op_mul_scalar_},
    {"relu_", "inplace", op_relu_},
    {"zero_", "inplace", op_zero_},
    {"copy_", "inplace", op_copy_},
};
#define N_OPS ((int)(sizeof k_ops / sizeof k_ops[0]))

static const op_entry *find_op(const char *op) {
    for (int i = 0; i < N_OPS; i++)
        if (strcmp(k_ops[i].op, op) == 0) return &k_ops[i];
    return NULL;
}

/* ------------------------------------------------------------------------------------------
 * Running one case.
 * ------------------------------------------------------------------------------------------ */
#define REPORT_LEN 8192

typedef struct report {
    char text[REPORT_LEN];
    size_t len;
    int failures;
} report;

static void note(report *rep, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 2, 3)))
#endif
    ;

static void note(report *rep, const char *fmt, ...) {
    rep->failures++;
    if (rep->len >= REPORT_LEN - 1) return;
    va_list ap;
    va_start(ap, fmt);
    int k = vsnprintf(rep->text + rep->len, REPORT_LEN - rep->len, fmt, ap);
    va_end(ap);
    if (k > 0) rep->len += (size_t)k;
    if (rep->len >= REPORT_LEN - 1) rep->len = REPORT_LEN - 1;
    else rep->text[rep->len++] = '\n', rep->text[rep->len] = '\0';
}

static void tolerances(remat_dtype dt, double *atol, double *rtol) {
    if (dt == REMAT_F64) *atol = F64_ATOL, *rtol = F64_RTOL;
    else *atol = F32_ATOL, *rtol = F32_RTOL;
}

static void check(report *rep, const fx_case *c, const char *what, const remat_tensor *got,
                  const fx_tensor *exp) {
    double atol, rtol;
    tolerances(c->dtype, &atol, &rtol);
    char msg[2048];
    if (fx_compare(got, exp, atol, rtol, msg, sizeof msg) > 0)
        note(rep, "case %s (op %s, %s): %s: %s", c->name, c->op, remat_dtype_name(c->dtype), what,
             msg);
}

/* Runs case `name` and records every disagreement with the fixture in rep. */
static void run_case(const char *name, report *rep) {
    char err[2048];
    fx_case *c = fx_load(name, err, sizeof err);
    if (!c) {
        note(rep, "case %s: %s", name, err);
        return;
    }
    const op_entry *e = find_op(c->op);
    if (!e) {
        note(rep, "case %s: op '%s' is unknown to the dispatcher in tests/test_fixtures.c", c->name,
             c->op);
        fx_free(c);
        return;
    }
    int64_t live0 = remat_live_tensors();
    run r;
    memset(&r, 0, sizeof r);
    r.c = c;
    remat_tensor *outs[MAX_OUT] = {0};
    remat_tensor *roots[MAX_OUT] = {0}, *gouts[MAX_OUT] = {0};
    int n_out = 0, n_roots = 0;

    /* inputs: stored tensor → leaf (requires_grad iff there is a grad line) → views */
    for (int i = 0; i < c->n_tensors && r.n_in < MAX_IN; i++) {
        const fx_tensor *t = &c->tensors[i];
        if (t->kind != FX_INPUT) continue;
        int k = r.n_in++;
        r.fin[k] = t;
        int rc = fx_make_tensor(t, &r.base[k]);
        if (rc == REMAT_OK) r.base[k] = rt_to_test_device(r.base[k]);
        if (rc == REMAT_OK && fx_get(c, FX_GRAD, t->name))
            rc = remat_set_requires_grad(r.base[k], true);
        if (rc == REMAT_OK) rc = fx_apply_views(c, t->name, r.base[k], &r.in[k]);
        if (rc != REMAT_OK) {
            note(rep, "case %s: building input %s: %s: %s", c->name, t->name, remat_err_name(rc),
                 remat_last_error());
            goto done;
        }
    }

    /* forward */
    int rc = e->fn(&r, outs, &n_out);
    if (rc != REMAT_OK) {
        note(rep, "case %s (op %s, %s): the op failed: %s: %s", c->name, c->op,
             remat_dtype_name(c->dtype), remat_err_name(rc), remat_last_error());
        goto done;
    }
    int want_out = fx_count(c, FX_OUTPUT);
    if (n_out != want_out) {
        note(rep, "case %s: the op gave %d outputs, the fixture has %d", c->name, n_out, want_out);
        goto done;
    }
    for (int i = 0; i < n_out; i++) {
        const fx_tensor *ex = fx_nth(c, FX_OUTPUT, i);
        char what[128];
        snprintf(what, sizeof what, "forward output %d (%s)", i, ex->name);
        check(rep, c, what, outs[i], ex);
    }

    /* backward with the recorded upstream gradients */
    if (fx_count(c, FX_GRAD) > 0) {
        for (int i = 0; i < fx_count(c, FX_GRAD_OUTPUT); i++) {
            const fx_tensor *go = fx_nth(c, FX_GRAD_OUTPUT, i);
            int oi = -1;
            for (int k = 0; k < n_out; k++)
                if (strcmp(fx_nth(c, FX_OUTPUT, k)->name, go->name) == 0) oi = k;
            if (oi < 0) { /* the parser checks this; keep the guard */
                note(rep, "case %s: grad_output %s matches no output", c->name, go->name);
                goto done;
            }
            roots[n_roots] = outs[oi];
            rc = fx_make_tensor(go, &gouts[n_roots]);
            /* on the output's device (to_device's output is on cpu whatever the test device) */
            if (rc == REMAT_OK)
                gouts[n_roots] = rt_to_device(gouts[n_roots], remat_tensor_device(outs[oi]));
            n_roots++;
            if (rc != REMAT_OK) {
                note(rep, "case %s: building grad_output: %s", c->name, remat_last_error());
                goto done;
            }
        }
        rc = remat_backward(n_roots, roots, gouts, false, 0, NULL);
        if (rc != REMAT_OK) {
            note(rep, "case %s (op %s, %s): remat_backward failed: %s: %s", c->name, c->op,
                 remat_dtype_name(c->dtype), remat_err_name(rc), remat_last_error());
            goto done;
        }
        for (int k = 0; k < r.n_in; k++) {
            const fx_tensor *ex = fx_get(c, FX_GRAD, r.fin[k]->name);
            if (!ex) continue;
            const remat_tensor *g = remat_tensor_grad(r.base[k]);
            char what[128];
            snprintf(what, sizeof what, "gradient of input %s", ex->name);
            /* An input the output does not depend on (zero_, copy_) may get
             * no .grad at all in remat where PyTorch materialises zeros. */
            if (!g && fx_all_zero(ex)) continue;
            check(rep, c, what, g, ex);
        }
    }

done:
    for (int i = 0; i < MAX_OUT; i++) {
        remat_release(outs[i]);
        remat_release(gouts[i]);
    }
    for (int i = 0; i < r.n_in; i++) {
        remat_release(r.in[i]);
        remat_release(r.base[i]);
    }
    int64_t live1 = remat_live_tensors();
    if (live1 != live0)
        note(rep, "case %s (op %s, %s): %lld tensor(s) leaked", c->name, c->op,
             remat_dtype_name(c->dtype), (long long)(live1 - live0));
    fx_free(c);
}

/* ------------------------------------------------------------------------------------------
 * One parameterized test per family; the parameters are the index's cases.
 * ------------------------------------------------------------------------------------------ */
typedef struct case_param {
    char name[FX_NAME_MAX];
} case_param;

static void free_params(struct criterion_test_params *crp) { cr_free(crp->params); }

static struct criterion_test_params family_params(const char *family) {
    fx_index_entry *idx = NULL;
    int n = 0, k = 0;
    char err[512];
    /* A missing index yields no cases here; test fixtures/index then fails. */
    if (!fx_index_load(&idx, &n, err, sizeof err))
        return cr_make_param_array(case_param, NULL, 0, NULL);
    for (int i = 0; i < n; i++) {
        const op_entry *e = find_op(idx[i].op);
        if (e && strcmp(e->family, family) == 0) k++;
    }
    if (k == 0) {
        free(idx);
        return cr_make_param_array(case_param, NULL, 0, NULL);
    }
    case_param *p = cr_malloc(sizeof *p * (size_t)k);
    k = 0;
    for (int i = 0; i < n; i++) {
        const op_entry *e = find_op(idx[i].op);
        if (e && strcmp(e->family, family) == 0)
            snprintf(p[k++].name, FX_NAME_MAX, "%s", idx[i].name);
    }
    free(idx);
    return cr_make_param_array(case_param, p, (size_t)k, free_params);
}

static void run_param(const case_param *p) {
    /* a crash ends the process before any assertion can name the case */
    char what[FX_NAME_MAX + 64];
    snprintf(what, sizeof what, "fixtures: crashed in case %s", p->name);
    rt_report_crash(what);
    report rep;
    memset(&rep, 0, sizeof rep);
    run_case(p->name, &rep);
    if (rep.failures) fprintf(stderr, "%s", rep.text);
    cr_assert_eq(rep.failures, 0, "%s", rep.text);
    cr_assert_eq(remat_live_tensors(), 0, "case %s: live tensors at the end", p->name);
}

/* The families run below, one FAMILY line each: the index test checks that
 * every dispatcher entry belongs to one of them, so no op's cases go unrun. */
static const char *const k_families[] = {
    "binary",   "scalar", "unary",     "matmul",    "linear",    "softmax", "layer_norm",
    "rms_norm", "rope",   "attention", "dropout",   "embedding", "losses",  "reductions",
    "max",      "views",  "copies",    "cat_split", "selection", "inplace"};

#define FAMILY(fam)                                                                                \
    ParameterizedTestParameters(fixtures, fam) { return family_params(#fam); }                     \
    ParameterizedTest(case_param *p, fixtures, fam) { run_param(p); }

FAMILY(binary)
FAMILY(scalar)
FAMILY(unary)
FAMILY(matmul)
FAMILY(linear)
FAMILY(softmax)
FAMILY(layer_norm)
FAMILY(rms_norm)
FAMILY(rope)
FAMILY(attention)
FAMILY(dropout)
FAMILY(embedding)
FAMILY(losses)
FAMILY(reductions)
FAMILY(max)
FAMILY(views)
FAMILY(copies)
FAMILY(cat_split)
FAMILY(selection)
FAMILY(inplace)

/* ------------------------------------------------------------------------------------------
 * The fixture set itself: complete, consistent with the directory and the dispatcher.
 * ------------------------------------------------------------------------------------------ */
Test(fixtures, index) {
    fx_index_entry *idx = NULL;
    int n = 0;
    char err[1024];
    cr_assert(fx_index_load(&idx, &n, err, sizeof err), "%s", err);
    /* every listed case has a loadable file whose op and dtype agree */
    for (int i = 0; i < n; i++) {
        fx_case *c = fx_load(idx[i].name, err, sizeof err);
        cr_assert(c, "index lists %s: %s", idx[i].name, err);
        cr_assert_str_eq(c->op, idx[i].op, "%s: op %s, index says %s", c->path, c->op, idx[i].op);
        cr_assert_eq(c->dtype, idx[i].dtype, "%s: dtype differs from the index", c->path);
        cr_assert(find_op(c->op), "%s: op '%s' is unknown to the dispatcher", c->path, c->op);
        fx_free(c);
    }
    /* every op's family is run by a FAMILY test */
    for (int i = 0; i < N_OPS; i++) {
        bool run = false;
        for (size_t f = 0; f < sizeof k_families / sizeof *k_families; f++)
            run = run || strcmp(k_ops[i].family, k_families[f]) == 0;
        cr_assert(run, "op %s: family %s has no FAMILY() test", k_ops[i].op, k_ops[i].family);
    }
    /* every fixture file is listed (so no case goes unrun) */
    DIR *d = opendir(REMAT_FIXTURE_DIR);
    cr_assert(d, "cannot open %s", REMAT_FIXTURE_DIR);
    struct dirent *de;
    int files = 0;
    while ((de = readdir(d))) {
        size_t len = strlen(de->d_name);
        if (len < 5 || strcmp(de->d_name + len - 4, ".txt") != 0) continue;
        if (strcmp(de->d_name, "index.txt") == 0) continue;
        files++;
        bool listed = false;
        for (int i = 0; i < n && !listed; i++)
            listed =
                strlen(idx[i].name) == len - 4 && strncmp(idx[i].name, de->d_name, len - 4) == 0;
        cr_assert(listed, "%s/%s is not listed in index.txt", REMAT_FIXTURE_DIR, de->d_name);
    }
    closedir(d);
    cr_assert_eq(files, n, "%d fixture files, %d index entries", files, n);
    free(idx);
}

Test(fixtures, every_op_has_f32_and_f64_cases) {
    fx_index_entry *idx = NULL;
    int n = 0;
    char err[1024];
    cr_assert(fx_index_load(&idx, &n, err, sizeof err), "%s", err);
    for (int k = 0; k < N_OPS; k++) {
        int f32 = 0, f64 = 0;
        for (int i = 0; i < n; i++)
            if (strcmp(idx[i].op, k_ops[k].op) == 0) {
                f32 += idx[i].dtype == REMAT_F32;
                f64 += idx[i].dtype == REMAT_F64;
            }
        cr_assert(f32 > 0 && f64 > 0, "op %s has %d f32 and %d f64 fixture cases (need both)",
                  k_ops[k].op, f32, f64);
    }
    for (int i = 0; i < n; i++)
        cr_assert(find_op(idx[i].op), "index: op '%s' of case %s is unknown to the dispatcher",
                  idx[i].op, idx[i].name);
    free(idx);
}

Test(fixtures, missing_file_fails) {
    char err[1024];
    fx_case *c = fx_load("no_such_case_f32", err, sizeof err);
    cr_assert_null(c);
    cr_assert(strstr(err, "no_such_case_f32.txt") && strstr(err, "cannot open"), "%s", err);
    /* and a run of it reports a failure instead of passing */
    report rep;
    memset(&rep, 0, sizeof rep);
    run_case("no_such_case_f32", &rep);
    cr_assert_eq(rep.failures, 1);
}

/* ------------------------------------------------------------------------------------------
 * The parser: malformed text fails with the line and the reason.
 * ------------------------------------------------------------------------------------------ */
#define GOOD_HEAD "case t_f64\nop add\ndtype f64\n"
#define GOOD_IN "input a f64 2 1 2 1.5 -2\ninput b f64 0 3\n"
#define GOOD_OUT "output out f64 2 1 2 4.5 1\ngrad_output out f64 2 1 2 1 1\n"

static void expect_bad(const char *text, const char *needle) {
    char err[1024];
    fx_case *c = fx_parse(text, "t.txt", err, sizeof err);
    cr_assert_null(c, "parsed a malformed fixture (expected: %s):\n%s", needle, text);
    cr_assert(strstr(err, needle), "message lacks \"%s\": %s", needle, err);
}

Test(fixtures, parser_accepts_a_good_case) {
    char err[1024];
    fx_case *c = fx_parse("# comment\n\n" GOOD_HEAD "param dims\nparam alpha 0.5\n" GOOD_IN
                          "view a transpose 0 1\n" GOOD_OUT "grad a f64 2 1 2 1 1\nend\n",
                          "t.txt", err, sizeof err);
    cr_assert(c, "%s", err);
    cr_assert_str_eq(c->name, "t_f64");
    cr_assert_str_eq(c->op, "add");
    cr_assert_eq(c->dtype, REMAT_F64);
    cr_assert_eq(fx_count(c, FX_INPUT), 2);
    const fx_tensor *b = fx_get(c, FX_INPUT, "b");
    cr_assert(b && b->ndim == 0 && b->numel == 1 && b->values[0] == 3.0);
    cr_assert_eq(c->n_views, 1);
    int64_t dims[8];
    int nd = -1;
    cr_assert(fx_param_ints(c, "dims", dims, 8, &nd, err, sizeof err) && nd == 0, "%s", err);
    double alpha;
    cr_assert(fx_param_double(c, "alpha", &alpha, err, sizeof err) && alpha == 0.5);
    int64_t v;
    cr_assert(!fx_param_int(c, "missing", &v, err, sizeof err));
    cr_assert(strstr(err, "param missing"), "%s", err);
    fx_free(c);
}

Test(fixtures, parser_f32_values_are_exact) {
    char err[1024];
    fx_case *c = fx_parse("case t\nop neg\ndtype f32\ninput a f32 1 2 0.100000001 -3.40282347e+38\n"
                          "output out f32 1 2 1 2\nend\n",
                          "t.txt", err, sizeof err);
    cr_assert(c, "%s", err);
    const fx_tensor *a = fx_get(c, FX_INPUT, "a");
    cr_assert_eq((float)a->values[0], 0.1f);
    cr_assert_eq((float)a->values[1], -3.40282347e+38f);
    fx_free(c);
}

Test(fixtures, parser_rejects_malformed) {
    expect_bad(GOOD_HEAD "input a f64 2 1 2 1.5\n" GOOD_OUT "end\n",
               "t.txt:4: input a: shape [1, 2] needs 2 values, found 1");
    expect_bad(GOOD_HEAD "input a f64 2 1 2 1.5 2 3\n" GOOD_OUT "end\n", "needs 2 values, found 3");
    expect_bad(GOOD_HEAD "input a f16 1 1 1\n" GOOD_OUT "end\n",
               "t.txt:4: input a: bad dtype 'f16'");
    expect_bad(GOOD_HEAD "input a f64 9 1 1 1 1 1 1 1 1 1 1\nend\n", "bad ndim '9'");
    expect_bad(GOOD_HEAD "input a f64 1 -2\nend\n", "bad size '-2'");
    expect_bad(GOOD_HEAD "input a f64 1 2 1.5 x7\n" GOOD_OUT "end\n",
               "value 1 'x7' is not a valid f64");
    expect_bad(GOOD_HEAD "input i i64 1 1 1.5\n" GOOD_OUT "end\n",
               "value 0 '1.5' is not a valid i64");
    expect_bad(GOOD_HEAD GOOD_IN GOOD_OUT, "no 'end' line (truncated file?)");
    expect_bad(GOOD_HEAD GOOD_IN GOOD_OUT "end\ninput c f64 0 1\n", "t.txt:9: 'input' after 'end'");
    expect_bad(GOOD_HEAD GOOD_IN "frobnicate 3\n", "t.txt:6: unknown line 'frobnicate'");
    expect_bad("op add\ndtype f64\n" GOOD_IN GOOD_OUT "end\n", "missing 'case' line");
    expect_bad("case x\ndtype f64\n" GOOD_IN GOOD_OUT "end\n", "missing 'op' line");
    expect_bad("case x\nop add\n" GOOD_IN GOOD_OUT "end\n", "missing 'dtype' line");
    expect_bad("case x\nop add\ndtype i64\n", "expected 'dtype f32' or 'dtype f64'");
    expect_bad(GOOD_HEAD GOOD_IN "end\n", "no 'output' line");
    expect_bad(GOOD_HEAD GOOD_IN GOOD_OUT "grad c f64 0 1\nend\n",
               "grad of 'c', which is not an input");
    expect_bad(GOOD_HEAD GOOD_IN GOOD_OUT "grad a f64 1 2 1 1\nend\n",
               "grad a is [2] f64 but the input is [1, 2] f64");
    expect_bad(GOOD_HEAD GOOD_IN "grad_output out f64 0 1\n" GOOD_OUT "end\n",
               "grad_output of 'out', which is not an output");
    expect_bad(GOOD_HEAD GOOD_IN "view z transpose 0 1\n" GOOD_OUT "end\n",
               "view of 'z', which is not an input");
    expect_bad(GOOD_HEAD GOOD_IN "view a rotate 0 1\n" GOOD_OUT "end\n",
               "unknown view kind 'rotate'");
    expect_bad(GOOD_HEAD GOOD_IN "view a transpose 0\n" GOOD_OUT "end\n",
               "view transpose takes 2..2 integers, found 1");
    expect_bad(GOOD_HEAD GOOD_IN "view a slice 0 1 x 1\n" GOOD_OUT "end\n",
               "'x' is not an integer");
    expect_bad(GOOD_HEAD GOOD_IN GOOD_IN GOOD_OUT "end\n", "second 'input a' line");
    expect_bad(GOOD_HEAD "param k 1\nparam k 2\n" GOOD_IN GOOD_OUT "end\n",
               "param 'k' given twice");
    expect_bad(GOOD_HEAD "case y\n" GOOD_IN GOOD_OUT "end\n", "t.txt:4: second 'case' line");
    expect_bad("", "missing 'case' line");
    /* generated and sampled data */
    expect_bad(GOOD_HEAD "input a f64 1 4 @uniform 1 -1.0 2.0\n" GOOD_OUT "end\n",
               "bad range '-1.0 2.0' (HI-LO must be a positive power of two)");
    expect_bad(GOOD_HEAD "input a f64 1 4 @uniform 1 -1.0\n" GOOD_OUT "end\n",
               "expected '@uniform SEED LO HI'");
    expect_bad(GOOD_HEAD "input a f64 1 4 @uniform -1 -1.0 1.0\n" GOOD_OUT "end\n",
               "expected '@uniform SEED LO HI'");
    expect_bad(GOOD_HEAD "input a f64 1 4 @randint 1 0 3\n" GOOD_OUT "end\n",
               "@randint does not fit dtype f64");
    expect_bad(GOOD_HEAD "input a i64 1 4 @randint 1 3 3\n" GOOD_OUT "end\n", "need LO < HI");
    expect_bad(GOOD_HEAD "input a f64 1 4 @sample 2 1 2\n" GOOD_OUT "end\n",
               "@sample is only for output and grad lines");
    expect_bad(GOOD_HEAD GOOD_IN "output out f64 1 4 @uniform 1 0.0 1.0\nend\n",
               "@uniform is only for input and grad_output lines");
    expect_bad(GOOD_HEAD GOOD_IN "output out f64 1 10 @sample 3 1 2 3\nend\n",
               "shape [10] sampled every 3 needs 4 values, found 3 (truncated line?)");
    expect_bad(GOOD_HEAD GOOD_IN "output out f64 1 10 @sample 0 1\nend\n",
               "expected '@sample STRIDE <values>...' with STRIDE >= 1");
    expect_bad(GOOD_HEAD GOOD_IN "output out f64 1 2 @frob 1 2\nend\n",
               "unknown data form '@frob'");
}

/* Values scripts/gen_fixtures.py's Recipe gives for these seeds (printed
 * by the script's own splitmix64): the C generator must match bit for bit. */
Test(fixtures, parser_generated_and_sampled_data) {
    char err[1024];
    fx_case *c = fx_parse("case t\nop add\ndtype f64\n"
                          "input a f64 1 3 @uniform 12345 -2.0 2.0\n"
                          "input f f32 1 3 @uniform 12345 -2.0 2.0\n"
                          "input i i64 1 5 @randint 7 0 10\n"
                          "output out f64 3 2 3 4 @sample 5 1 2 3 4 5\n"
                          "grad_output out f64 3 2 3 4 @uniform 1 -1.0 1.0\nend\n",
                          "t.txt", err, sizeof err);
    cr_assert(c, "%s", err);
    const fx_tensor *a = fx_get(c, FX_INPUT, "a"), *f = fx_get(c, FX_INPUT, "f");
    const fx_tensor *i = fx_get(c, FX_INPUT, "i"), *o = fx_get(c, FX_OUTPUT, "out");
    cr_assert_eq(a->values[0], -1.4676813253542909);
    cr_assert_eq(a->values[1], -1.1807334665533635);
    cr_assert_eq(a->values[2], -1.5218296679635381);
    cr_assert_eq((float)f->values[0], -1.46768129f);
    cr_assert_eq((float)f->values[2], -1.52182972f);
    double want_i[5] = {9, 0, 9, 3, 0};
    for (int k = 0; k < 5; k++) cr_assert_eq(i->values[k], want_i[k], "randint %d", k);
    cr_assert_eq(o->stride, 5);
    cr_assert_eq(o->n_values, 5, "24 elements every 5: indices 0 5 10 15 20");
    cr_assert_eq(o->values[4], 5.0);
    remat_tensor *t = NULL;
    cr_assert_neq(fx_make_tensor(o, &t), REMAT_OK, "a sampled tensor cannot be built");
    cr_assert_null(t);
    fx_free(c);
}

Test(fixtures, parser_param_errors_name_the_line) {
    char err[1024];
    fx_case *c = fx_parse(GOOD_HEAD "param dim x\nparam s 1 2\n" GOOD_IN GOOD_OUT "end\n", "t.txt",
                          err, sizeof err);
    cr_assert(c, "%s", err);
    int64_t v;
    double d;
    cr_assert(!fx_param_int(c, "dim", &v, err, sizeof err));
    cr_assert(strstr(err, "t.txt:4: param dim: 'x' is not an integer"), "%s", err);
    cr_assert(!fx_param_double(c, "s", &d, err, sizeof err));
    cr_assert(strstr(err, "t.txt:5: param s: expected 1 value(s), found 2"), "%s", err);
    fx_free(c);
}

Test(fixtures, compare_reports_element_and_values) {
    char err[1024], msg[2048];
    fx_case *c = fx_parse(GOOD_HEAD "input a f64 2 2 2 1 2 3 4\n" GOOD_OUT "end\n", "t.txt", err,
                          sizeof err);
    cr_assert(c, "%s", err);
    const fx_tensor *a = fx_get(c, FX_INPUT, "a");
    remat_tensor *t = rt_tensor(2, (int64_t[]){2, 2}, REMAT_F64, (double[]){1, 2, 3, 4.5});
    cr_assert_eq(fx_compare(t, a, 1e-10, 1e-9, msg, sizeof msg), 1);
    cr_assert(strstr(msg, "input a[1, 1]: got 4.5 expected 4"), "%s", msg);
    remat_tensor *ok = rt_tensor(2, (int64_t[]){2, 2}, REMAT_F64, (double[]){1, 2, 3, 4 + 1e-12});
    cr_assert_eq(fx_compare(ok, a, 1e-10, 1e-9, msg, sizeof msg), 0, "%s", msg);
    remat_tensor *wrong = rt_tensor(1, (int64_t[]){4}, REMAT_F64, (double[]){1, 2, 3, 4});
    cr_assert_gt(fx_compare(wrong, a, 1e-10, 1e-9, msg, sizeof msg), 0);
    cr_assert(strstr(msg, "remat gave [4] f64, expected [2, 2] f64"), "%s", msg);
    remat_tensor *f32 = rt_tensor(2, (int64_t[]){2, 2}, REMAT_F32, (double[]){1, 2, 3, 4});
    cr_assert_gt(fx_compare(f32, a, 1e-10, 1e-9, msg, sizeof msg), 0);
    cr_assert_gt(fx_compare(NULL, a, 1e-10, 1e-9, msg, sizeof msg), 0);
    /* sampled: elements 0, 3, 6 of a [2, 4] tensor; element 6 is [1, 2] */
    fx_case *cs = fx_parse(GOOD_HEAD GOOD_IN "output s f64 2 2 4 @sample 3 0 3 6\nend\n", "t.txt",
                           err, sizeof err);
    cr_assert(cs, "%s", err);
    remat_tensor *st =
        rt_tensor(2, (int64_t[]){2, 4}, REMAT_F64, (double[]){0, 9, 9, 3, 9, 9, 7, 9});
    cr_assert_eq(fx_compare(st, fx_get(cs, FX_OUTPUT, "s"), 1e-10, 1e-9, msg, sizeof msg), 1);
    cr_assert(strstr(msg, "output s[1, 2]: got 7 expected 6") && strstr(msg, "sampled elements"),
              "%s", msg);
    remat_release(st);
    fx_free(cs);
    remat_release(t);
    remat_release(ok);
    remat_release(wrong);
    remat_release(f32);
    fx_free(c);
    cr_assert_eq(remat_live_tensors(), 0);
}

/* ------------------------------------------------------------------------------------------
 * The op registry (src/ops/registry.c) drives the rest: every registered op has a fixture
 * runner above (hence its PyTorch cases, f32 and f64), and each runs, on its first f64
 * fixture case with gradients and no views, through an f64 finite-difference gradcheck, skip
 * mode (outputs without data, no allocation) and a non-reentrant checkpoint under the
 * everything-saveable selective policy (gradients bitwise equal to the plain run). A new op
 * cannot be half-registered.
 * ------------------------------------------------------------------------------------------ */
Test(registry, every_registered_op_has_a_fixture_runner) {
    for (int i = 0; i < rm_op_count(); i++) {
        const char *name = rm_op_name(i);
        cr_assert(find_op(name + strlen("remat_")),
                  "registered op %s has no fixture runner in tests/test_fixtures.c", name);
    }
    for (int k = 0; k < N_OPS; k++) {
        char full[FX_NAME_MAX + 8];
        snprintf(full, sizeof full, "remat_%s", k_ops[k].op);
        cr_assert(rm_op_find(full) >= 0, "fixture op %s is not in the op registry", full);
    }
}

/* The inputs of op's first f64 case that has gradients and no views (r->in = r->base). */
static fx_case *load_plain_f64(const char *op, run *r) {
    fx_index_entry *idx = NULL;
    int n = 0;
    char err[1024];
    cr_assert(fx_index_load(&idx, &n, err, sizeof err), "%s", err);
    fx_case *c = NULL;
    for (int i = 0; i < n && !c; i++) {
        if (strcmp(idx[i].op, op) != 0 || idx[i].dtype != REMAT_F64) continue;
        c = fx_load(idx[i].name, err, sizeof err);
        cr_assert(c, "%s", err);
        if (c->n_views || fx_count(c, FX_GRAD) == 0) {
            fx_free(c);
            c = NULL;
        }
    }
    free(idx);
    cr_assert(c, "op %s has no f64 fixture case with gradients and without views", op);
    memset(r, 0, sizeof *r);
    r->c = c;
    for (int i = 0; i < c->n_tensors && r->n_in < MAX_IN; i++) {
        const fx_tensor *t = &c->tensors[i];
        if (t->kind != FX_INPUT) continue;
        int k = r->n_in++;
        r->fin[k] = t;
        RT_OK(fx_make_tensor(t, &r->base[k]));
        r->base[k] = rt_to_test_device(r->base[k]);
        if (fx_get(c, FX_GRAD, t->name)) RT_OK(remat_set_requires_grad(r->base[k], true));
        r->in[k] = r->base[k];
    }
    return c;
}

static void free_run(run *r, fx_case *c) {
    for (int i = 0; i < r->n_in; i++) remat_release(r->base[i]);
    fx_free(c);
}

/* Runs the op on `inputs` in place of r's (dropout draws from a fixed seed, so that every
 * evaluation draws the same mask); new references in outs. */
typedef struct op_call {
    run *r;
    const op_entry *e;
} op_call;

static int call_op(op_call *oc, remat_tensor *const *inputs, remat_tensor **outs, int *n_out) {
    run *r = oc->r;
    remat_tensor *keep[MAX_IN];
    memcpy(keep, r->in, sizeof keep);
    for (int k = 0; k < r->n_in; k++) r->in[k] = inputs[k];
    remat_manual_seed(20261124);
    int rc = oc->e->fn(r, outs, n_out);
    memcpy(r->in, keep, sizeof keep);
    return rc;
}

/* rt_fn: the sum of the op's float outputs. */
static int float_outputs_sum(void *ud, remat_tensor *const *inputs, int n_inputs,
                             remat_tensor **out) {
    (void)n_inputs;
    remat_tensor *outs[MAX_OUT] = {0}, *sum = NULL;
    int n_out = 0;
    int rc = call_op(ud, inputs, outs, &n_out);
    for (int i = 0; i < n_out && !rc; i++) {
        remat_dtype dt = remat_tensor_dtype(outs[i]);
        if (dt != REMAT_F32 && dt != REMAT_F64) continue;
        remat_tensor *s = NULL, *acc = NULL;
        rc = remat_sum_all(&s, outs[i]);
        if (!rc && sum) rc = remat_add(&acc, sum, s);
        if (!rc && sum) {
            remat_release(sum);
            remat_release(s);
            sum = acc;
        } else if (!rc) {
            sum = s;
        } else {
            remat_release(s);
        }
    }
    for (int i = 0; i < MAX_OUT; i++) remat_release(outs[i]);
    if (!rc && !sum) rc = remat_set_error(REMAT_ESTATE, "the op has no float output");
    if (rc) remat_release(sum);
    else *out = sum;
    return rc;
}

/* remat_checkpoint_fn over the op: one output, the sum of its float outputs. */
static int checkpointed(void *ud, remat_tensor *const *in, int n_in, remat_tensor **out,
                        int n_out) {
    (void)n_out;
    return float_outputs_sum(ud, in, n_in, &out[0]);
}

/* Gradients of every input after backward of the op's float-output sum, run plainly or
 * under a non-reentrant checkpoint with `policy` (NULL: plain). */
static void grads_of(op_call *oc, remat_policy *policy, remat_tensor **grads) {
    run *r = oc->r;
    for (int k = 0; k < r->n_in; k++) RT_OK(remat_set_grad(r->base[k], NULL));
    remat_tensor *loss = NULL;
    if (policy) {
        remat_sac_config cfg = {.policy = policy};
        remat_checkpoint_options o = {0};
        o.use_reentrant = REMAT_OPT_FALSE;
        o.context_fn = remat_sac_context_fn;
        o.context_fn_data = &cfg;
        RT_OK(remat_checkpoint(checkpointed, oc, r->n_in, r->in, 1, &loss, &o));
    } else {
        RT_OK(float_outputs_sum(oc, r->in, r->n_in, &loss));
    }
    RT_OK(remat_backward_scalar(loss));
    remat_release(loss);
    for (int k = 0; k < r->n_in; k++) {
        remat_tensor *g = remat_tensor_grad(r->base[k]);
        grads[k] = g ? remat_retain(g) : NULL;
    }
}

static void registry_op_checks(const char *name) {
    const op_entry *e = find_op(name + strlen("remat_"));
    cr_assert(e, "%s: no fixture runner", name);
    run r;
    fx_case *c = load_plain_f64(e->op, &r);
    op_call oc = {&r, e};

    /* f64 finite differences */
    char msg[2048];
    cr_assert(rt_gradcheck(float_outputs_sum, &oc, r.n_in, r.in, 1e-6, 1e-5, 1e-4, msg, sizeof msg),
              "%s (case %s): gradcheck: %s", name, c->name, msg);

    /* skip mode: shapes, no allocation, no data unless a view of an input */
    remat_tensor *outs[MAX_OUT] = {0};
    int n_out = 0;
    size_t bytes0 = remat_cpu_current_bytes(), dev0 = rt_device_current_bytes();
    bool prev = rm_set_skip_mode(true);
    int rc = call_op(&oc, r.in, outs, &n_out);
    size_t bytes1 = remat_cpu_current_bytes(), dev1 = rt_device_current_bytes();
    rm_set_skip_mode(prev);
    cr_assert_eq(rc, REMAT_OK, "%s in skip mode: %s", name, remat_last_error());
    cr_assert_gt(n_out, 0, "%s in skip mode: no output", name);
    for (int i = 0; i < n_out; i++) {
        bool view = false;
        for (int k = 0; k < r.n_in; k++) view = view || remat_shares_storage(outs[i], r.in[k]);
        cr_assert(view || !rt_has_data(outs[i]), "%s in skip mode: output %d has data", name, i);
        remat_release(outs[i]);
    }
    cr_assert_eq(bytes1, bytes0, "%s in skip mode allocated %zu bytes", name, bytes1 - bytes0);
    cr_assert_eq(dev1, dev0, "%s in skip mode allocated %zu bytes on %s", name, dev1 - dev0,
                 rt_tensor_device_str());

    /* everything-saveable selective checkpointing: bitwise the plain gradients. An in-place
     * op's runner mutates the clone it made of its target, which that policy would cache
     * (PyTorch refuses the mutation as remat does, and allowing it makes results undefined):
     * in-place ops are checked under the nothing-saveable policy instead. */
    remat_tensor *plain[MAX_IN] = {0}, *sac[MAX_IN] = {0};
    remat_policy *everything = NULL;
    if (name[strlen(name) - 1] == '_') RT_OK(remat_policy_nothing_saveable(&everything));
    else RT_OK(remat_policy_everything_saveable(&everything));
    grads_of(&oc, NULL, plain);
    grads_of(&oc, everything, sac);
    for (int k = 0; k < r.n_in; k++) {
        cr_assert_eq(!plain[k], !sac[k], "%s: input %s has a gradient in one run only", name,
                     r.fin[k]->name);
        if (!plain[k]) continue;
        cr_assert(rt_bitwise_equal(plain[k], sac[k]),
                  "%s: gradient of %s differs under everything-saveable checkpointing", name,
                  r.fin[k]->name);
        remat_release(plain[k]);
        remat_release(sac[k]);
    }
    remat_policy_release(everything);
    free_run(&r, c);
}

static struct criterion_test_params registry_params(void) {
    int n = rm_op_count(), k = 0;
    case_param *p = cr_malloc(sizeof *p * (size_t)n);
    for (int i = 0; i < n; i++) snprintf(p[k++].name, FX_NAME_MAX, "%s", rm_op_name(i));
    return cr_make_param_array(case_param, p, (size_t)k, free_params);
}

ParameterizedTestParameters(registry, every_op) { return registry_params(); }
ParameterizedTest(case_param *p, registry, every_op) {
    char what[FX_NAME_MAX + 64];
    snprintf(what, sizeof what, "registry: crashed in op %s", p->name);
    rt_report_crash(what);
    registry_op_checks(p->name);
}
