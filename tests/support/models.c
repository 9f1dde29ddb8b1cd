/* tests/support/models.c — see models.h. */
#include "models.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "rt.h"

static remat_tensor *param(int ndim, const int64_t *shape, double bound, remat_dtype dtype,
                           unsigned seed) {
    remat_tensor *t = rt_rand(ndim, shape, dtype, -bound, bound, seed);
    int rc = remat_set_requires_grad(t, true);
    cr_assert_eq(rc, REMAT_OK, "param: %s", remat_last_error());
    return t;
}

static remat_tensor *constant(int ndim, const int64_t *shape, double v, remat_dtype dtype) {
    remat_tensor *t = NULL;
    int rc = remat_full(&t, ndim, shape, v, dtype, REMAT_DEVICE_CPU);
    cr_assert_eq(rc, REMAT_OK, "constant: %s", remat_last_error());
    t = rt_to_test_device(t);
    rc = remat_set_requires_grad(t, true);
    cr_assert_eq(rc, REMAT_OK, "constant: %s", remat_last_error());
    return t;
}

/* ---- MLP block -------------------------------------------------------------------- */
void rt_mlp_block_init(rt_mlp_block *b, int dim, int hidden, double p_drop, remat_dtype dtype,
                       unsigned seed) {
    b->dim = dim;
    b->hidden = hidden;
    b->p_drop = p_drop;
    b->gelu = REMAT_GELU_TANH;
    b->calls = 0;
    int64_t s1[] = {hidden, dim}, s2[] = {dim, hidden}, sh[] = {hidden}, sd[] = {dim};
    b->w1 = param(2, s1, 1.0 / sqrt(dim), dtype, seed * 4 + 1);
    b->b1 = param(1, sh, 1.0 / sqrt(dim), dtype, seed * 4 + 2);
    b->w2 = param(2, s2, 1.0 / sqrt(hidden), dtype, seed * 4 + 3);
    b->b2 = param(1, sd, 1.0 / sqrt(hidden), dtype, seed * 4 + 4);
}

void rt_mlp_block_free(rt_mlp_block *b) {
    remat_release_p(&b->w1);
    remat_release_p(&b->b1);
    remat_release_p(&b->w2);
    remat_release_p(&b->b2);
}

int rt_mlp_block_params(rt_mlp_block *b, remat_tensor **p) {
    p[0] = b->w1;
    p[1] = b->b1;
    p[2] = b->w2;
    p[3] = b->b2;
    return 4;
}

int rt_mlp_block_fn(void *ud, remat_tensor *const *in, int n_in, remat_tensor **out, int n_out) {
    rt_mlp_block *b = ud;
    if (n_in != 1 || n_out != 1 || !in[0])
        return remat_set_error(REMAT_EINVAL, "rt_mlp_block_fn: one input, one output");
    b->calls++;
    remat_scope *s;
    int rc = remat_scope_begin(&s);
    if (rc) return rc;
    remat_tensor *h = NULL, *g = NULL, *d = NULL, *y = NULL, *r = NULL;
    rc = remat_linear(&h, in[0], b->w1, b->b1);
    if (!rc) rc = remat_gelu(&g, h, b->gelu);
    d = g;
    if (!rc && b->p_drop > 0) rc = remat_dropout(&d, g, b->p_drop, true);
    if (!rc) rc = remat_linear(&y, d, b->w2, b->b2);
    if (!rc) rc = remat_add(&r, in[0], y);
    if (!rc) out[0] = remat_scope_keep(r);
    remat_scope_end(s);
    return rc;
}

/* ---- transformer block -------------------------------------------------------------- */
void rt_tblock_init(rt_tblock *b, int dim, int heads, int seq, double p_drop, remat_dtype dtype,
                    unsigned seed) {
    b->dim = dim;
    b->heads = heads;
    b->seq = seq;
    b->p_drop = p_drop;
    b->tagged = false;
    b->calls = 0;
    int64_t d[] = {dim}, d3[] = {3 * dim}, d4[] = {4 * dim};
    int64_t qkv[] = {3 * dim, dim}, o[] = {dim, dim}, f1[] = {4 * dim, dim}, f2[] = {dim, 4 * dim};
    double bd = 1.0 / sqrt(dim), bh = 1.0 / sqrt(4.0 * dim);
    unsigned k = seed * 16;
    b->ln1_w = constant(1, d, 1.0, dtype);
    b->ln1_b = constant(1, d, 0.0, dtype);
    b->wqkv = param(2, qkv, bd, dtype, k + 1);
    b->bqkv = param(1, d3, bd, dtype, k + 2);
    b->wo = param(2, o, bd, dtype, k + 3);
    b->bo = param(1, d, bd, dtype, k + 4);
    b->ln2_w = constant(1, d, 1.0, dtype);
    b->ln2_b = constant(1, d, 0.0, dtype);
    b->w1 = param(2, f1, bd, dtype, k + 5);
    b->b1 = param(1, d4, bd, dtype, k + 6);
    b->w2 = param(2, f2, bh, dtype, k + 7);
    b->b2 = param(1, d, bh, dtype, k + 8);
    double *m = malloc(sizeof(double) * (size_t)(seq * seq));
    for (int i = 0; i < seq; i++)
        for (int j = 0; j < seq; j++) m[i * seq + j] = j > i ? 1 : 0;
    int64_t ms[] = {seq, seq};
    b->mask = rt_tensor(2, ms, REMAT_I64, m);
    free(m);
}

void rt_tblock_free(rt_tblock *b) {
    remat_tensor **ps[] = {&b->ln1_w, &b->ln1_b, &b->wqkv, &b->bqkv, &b->wo, &b->bo, &b->ln2_w,
                           &b->ln2_b, &b->w1, &b->b1, &b->w2, &b->b2, &b->mask};
    for (size_t i = 0; i < sizeof ps / sizeof ps[0]; i++) remat_release_p(ps[i]);
}

int rt_tblock_params(rt_tblock *b, remat_tensor **p) {
    remat_tensor *ps[] = {b->ln1_w, b->ln1_b, b->wqkv, b->bqkv, b->wo, b->bo,
                          b->ln2_w, b->ln2_b, b->w1,   b->b1,   b->w2, b->b2};
    for (int i = 0; i < 12; i++) p[i] = ps[i];
    return 12;
}

#define TRY(expr)                                                                          \
    do {                                                                                   \
        if (!rc) rc = (expr);                                                              \
    } while (0)

/* (B, T, D) → (B, H, T, D/H) */
static int heads_view(int *prc, remat_tensor **out, remat_tensor *x, int64_t B, int64_t T,
                      int64_t H, int64_t hd) {
    int rc = *prc;
    remat_tensor *r = NULL;
    int64_t sh[] = {B, T, H, hd};
    TRY(remat_reshape(&r, x, 4, sh));
    TRY(remat_transpose(out, r, 1, 2));
    *prc = rc;
    return rc;
}

/* With b->tagged, *t becomes a remat_tag view of itself named `name`, so
 * selective-checkpoint name policies can match it (scope-owned). */
static void tag(const rt_tblock *b, int *prc, remat_tensor **t, const char *name) {
    if (*prc || !b->tagged) return;
    remat_tensor *named = NULL;
    *prc = remat_tag(&named, *t, name);
    if (!*prc) *t = named;
}

int rt_tblock_fn(void *ud, remat_tensor *const *in, int n_in, remat_tensor **out, int n_out) {
    rt_tblock *b = ud;
    if (n_in != 1 || n_out != 1 || !in[0] || remat_ndim(in[0]) != 3)
        return remat_set_error(REMAT_EINVAL, "rt_tblock_fn: one (B, T, D) input, one output");
    b->calls++;
    remat_tensor *x = in[0];
    int64_t B = remat_size(x, 0), T = remat_size(x, 1), D = b->dim, H = b->heads, hd = D / H;
    remat_scope *s;
    int rc = remat_scope_begin(&s);
    if (rc) return rc;
    remat_tensor *h = NULL, *qkv = NULL, *parts[3] = {NULL, NULL, NULL}, *q = NULL, *k = NULL,
                 *v = NULL, *kt = NULL, *att = NULL, *att2 = NULL, *att3 = NULL, *p = NULL,
                 *pd = NULL, *y = NULL, *yt = NULL, *yr = NULL, *proj = NULL, *pdrop = NULL,
                 *x1 = NULL, *h2 = NULL, *f1 = NULL, *f2 = NULL, *f3 = NULL, *f4 = NULL, *r = NULL;
    int n_parts = 0;
    /* attention */
    TRY(remat_layer_norm(&h, x, 1, b->ln1_w, b->ln1_b, 1e-5));
    TRY(remat_linear(&qkv, h, b->wqkv, b->bqkv));
    tag(b, &rc, &qkv, "qkv");
    TRY(remat_split(parts, 3, &n_parts, qkv, D, -1));
    heads_view(&rc, &q, parts[0], B, T, H, hd);
    heads_view(&rc, &k, parts[1], B, T, H, hd);
    heads_view(&rc, &v, parts[2], B, T, H, hd);
    TRY(remat_transpose(&kt, k, -2, -1));
    TRY(remat_matmul(&att, q, kt));                       /* (B, H, T, T) */
    TRY(remat_mul_scalar(&att2, att, 1.0 / sqrt((double)hd)));
    TRY(remat_masked_fill(&att3, att2, b->mask, -1e9));   /* causal */
    TRY(remat_softmax(&p, att3, -1));
    pd = p;
    if (b->p_drop > 0) TRY(remat_dropout(&pd, p, b->p_drop, true));
    TRY(remat_matmul(&y, pd, v));                         /* (B, H, T, hd) */
    TRY(remat_transpose(&yt, y, 1, 2));                   /* (B, T, H, hd) */
    int64_t sh3[] = {B, T, D};
    TRY(remat_reshape(&yr, yt, 3, sh3));
    TRY(remat_linear(&proj, yr, b->wo, b->bo));
    tag(b, &rc, &proj, "attn_out");
    pdrop = proj;
    if (b->p_drop > 0) TRY(remat_dropout(&pdrop, proj, b->p_drop, true));
    TRY(remat_add(&x1, x, pdrop));
    /* MLP */
    TRY(remat_layer_norm(&h2, x1, 1, b->ln2_w, b->ln2_b, 1e-5));
    TRY(remat_linear(&f1, h2, b->w1, b->b1));
    tag(b, &rc, &f1, "mlp_up");
    TRY(remat_gelu(&f2, f1, REMAT_GELU_ERF));
    TRY(remat_linear(&f3, f2, b->w2, b->b2));
    f4 = f3;
    if (b->p_drop > 0) TRY(remat_dropout(&f4, f3, b->p_drop, true));
    TRY(remat_add(&r, x1, f4));
    if (!rc) out[0] = remat_scope_keep(r);
    remat_scope_end(s);
    return rc;
}

void rt_zero_grads(int n, remat_tensor *const *params) {
    for (int i = 0; i < n; i++) remat_set_grad(params[i], NULL);
}

size_t rt_bytes(int n, remat_tensor *const *tensors) {
    size_t s = 0;
    for (int i = 0; i < n; i++) s += remat_storage_nbytes(tensors[i]);
    return s;
}

/* ---- running a stack of blocks ------------------------------------------------------------ */
void rt_grads_free(rt_grads *g) {
    for (int i = 0; i < g->n; i++) remat_release(g->g[i]);
    remat_release(g->out);
    memset(g, 0, sizeof *g);
}

void rt_run_blocks(uint64_t seed, int n, remat_checkpoint_fn fn, void **uds,
                   remat_tensor **params, int n_params, remat_tensor *x,
                   const remat_checkpoint_options *o, rt_grads *out) {
    remat_manual_seed(seed);
    rt_zero_grads(n_params, params);
    rt_zero_grads(1, &x);
    remat_tensor *h = remat_retain(x);
    for (int i = 0; i < n; i++) {
        remat_tensor *y = NULL;
        if (o) RT_OK(remat_checkpoint(fn, uds[i], 1, &h, 1, &y, o));
        else RT_OK(fn(uds[i], &h, 1, &y, 1));
        remat_release(h);
        h = y;
    }
    remat_tensor *l;
    RT_OK(remat_sum_all(&l, h));
    RT_OK(remat_backward_scalar(l));
    remat_release(l);
    out->out = h;
    out->n = 0;
    out->g[out->n++] = remat_retain(remat_tensor_grad(x));
    for (int i = 0; i < n_params; i++)
        out->g[out->n++] = remat_retain(remat_tensor_grad(params[i]));
}

void rt_assert_same_grads(const rt_grads *a, const rt_grads *b, const char *what) {
    cr_assert_eq(a->n, b->n);
    cr_assert(rt_bitwise_equal(a->out, b->out), "%s: outputs differ", what);
    for (int i = 0; i < a->n; i++) {
        cr_assert_not_null(a->g[i], "%s: gradient %d missing", what, i);
        cr_assert_not_null(b->g[i], "%s: gradient %d missing", what, i);
        cr_assert(rt_bitwise_equal(a->g[i], b->g[i]), "%s: gradient %d differs (max |d| %g)", what,
                  i, rt_max_abs_diff(a->g[i], b->g[i]));
    }
}
