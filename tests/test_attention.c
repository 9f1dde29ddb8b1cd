/* tests/test_attention.c — remat_attention (fused scaled dot-product
 * attention): values and gradients against the same attention composed of
 * matmul / mul_scalar / masked_fill / softmax / matmul, finite-difference
 * gradchecks in f64 (causal and not, several query blocks, views as
 * inputs), output layout, checkpoint bitwise equality and bad input. */
#include <math.h>
#include <string.h>

#include "support/rt.h"

/* REMAT_TEST_DEVICE=fenced|cuda (make test-fenced, make test-cuda) puts the tensors that the
 * rt helpers make on that device (tests/support/rt.h) */
RT_ON_TEST_DEVICE

/* The attention composed of ops (what the GPT did before remat_attention):
 * softmax(q·kᵀ·scale, masked above the diagonal when causal) · v. */
static int composed(remat_tensor **out, remat_tensor *q, remat_tensor *k, remat_tensor *v,
                    bool causal, double scale) {
    int n = remat_ndim(q);
    int64_t Tq = remat_size(q, n - 2), Tk = remat_size(k, n - 2);
    remat_tensor *kt = NULL, *s = NULL, *t = NULL, *p = NULL, *mask = NULL;
    int rc = remat_transpose(&kt, k, -2, -1);
    if (!rc) rc = remat_matmul(&s, q, kt);
    if (!rc) rc = remat_mul_scalar(&t, s, scale);
    if (!rc && causal) {
        double *m = calloc((size_t)(Tq * Tk), sizeof *m);
        for (int64_t i = 0; i < Tq; i++)
            for (int64_t j = 0; j < Tk; j++) m[i * Tk + j] = j > i;
        mask = rt_tensor(2, (int64_t[]){Tq, Tk}, REMAT_I64, m);
        free(m);
        remat_release(s);
        s = NULL;
        rc = remat_masked_fill(&s, t, mask, -INFINITY);
        remat_release(t);
        t = s;
        s = NULL;
    }
    if (!rc) rc = remat_softmax(&p, t, -1);
    if (!rc) rc = remat_matmul(out, p, v);
    remat_release(kt);
    remat_release(s);
    remat_release(t);
    remat_release(p);
    remat_release(mask);
    return rc;
}

typedef struct att_case {
    bool causal;
    double scale;
} att_case;

static int fused_fn(void *ud, remat_tensor *const *in, int n, remat_tensor **out) {
    (void)n;
    const att_case *c = ud;
    return remat_attention(out, in[0], in[1], in[2], c->causal, c->scale);
}

static int composed_fn(void *ud, remat_tensor *const *in, int n, remat_tensor **out) {
    (void)n;
    const att_case *c = ud;
    double scale = c->scale != 0 ? c->scale : 1.0 / sqrt((double)remat_size(in[0], -1));
    return composed(out, in[0], in[1], in[2], c->causal, scale);
}

/* Fused against composed: values and the gradients of sum(out * w). */
static void compare(int ndim, const int64_t *qs, const int64_t *ks, const int64_t *vs,
                    remat_dtype dt, bool causal, double scale, double tol) {
    att_case c = {causal, scale};
    remat_tensor *in[3] = {rt_leaf(rt_rand(ndim, qs, dt, -2, 2, 1)),
                           rt_leaf(rt_rand(ndim, ks, dt, -2, 2, 2)),
                           rt_leaf(rt_rand(ndim, vs, dt, -2, 2, 3))};
    remat_tensor *a = NULL, *b = NULL, *ga[3] = {0}, *gb[3] = {0};
    RT_OK(fused_fn(&c, in, 3, &a));
    RT_OK(composed_fn(&c, in, 3, &b));
    rt_assert_close(a, b, tol, tol, "attention output");
    remat_tensor *w = rt_rand(remat_ndim(a), remat_shape(a), dt, -1, 1, 4);
    RT_OK(remat_grad(1, &a, &w, 3, in, false, false, ga));
    RT_OK(remat_grad(1, &b, &w, 3, in, false, false, gb));
    const char *what[3] = {"dq", "dk", "dv"};
    for (int i = 0; i < 3; i++) {
        rt_assert_close(ga[i], gb[i], tol, tol, what[i]);
        remat_release(ga[i]);
        remat_release(gb[i]);
        remat_release(in[i]);
    }
    remat_release(a);
    remat_release(b);
    remat_release(w);
    cr_assert_eq(remat_live_tensors(), 0);
}

Test(attention, matches_composed_f64) {
    /* one query block, several blocks with a partial last one, Tq != Tk */
    compare(4, (int64_t[]){2, 3, 5, 4}, (int64_t[]){2, 3, 5, 4}, (int64_t[]){2, 3, 5, 6}, REMAT_F64,
            true, 0, 1e-12);
    compare(4, (int64_t[]){1, 2, 150, 8}, (int64_t[]){1, 2, 150, 8}, (int64_t[]){1, 2, 150, 3},
            REMAT_F64, true, 0, 1e-12);
    compare(4, (int64_t[]){1, 2, 150, 8}, (int64_t[]){1, 2, 150, 8}, (int64_t[]){1, 2, 150, 3},
            REMAT_F64, false, 0.3, 1e-12);
    compare(3, (int64_t[]){2, 70, 4}, (int64_t[]){2, 9, 4}, (int64_t[]){2, 9, 5}, REMAT_F64, true,
            0, 1e-12); /* more queries than keys: rows past Tk see every key */
    compare(3, (int64_t[]){2, 9, 4}, (int64_t[]){2, 130, 4}, (int64_t[]){2, 130, 5}, REMAT_F64,
            true, 0, 1e-12);
    compare(2, (int64_t[]){7, 3}, (int64_t[]){11, 3}, (int64_t[]){11, 2}, REMAT_F64, false, 0,
            1e-12);
}

Test(attention, matches_composed_f32) {
    compare(4, (int64_t[]){2, 3, 100, 16}, (int64_t[]){2, 3, 100, 16}, (int64_t[]){2, 3, 100, 16},
            REMAT_F32, true, 0, 2e-5);
    compare(3, (int64_t[]){4, 33, 8}, (int64_t[]){4, 40, 8}, (int64_t[]){4, 40, 8}, REMAT_F32,
            false, 0, 2e-5);
}

Test(attention, gradcheck_f64) {
    att_case causal = {true, 0}, full = {false, 0.7};
    remat_tensor *in[3] = {rt_leaf(rt_rand(4, (int64_t[]){1, 2, 67, 3}, REMAT_F64, -1, 1, 5)),
                           rt_leaf(rt_rand(4, (int64_t[]){1, 2, 67, 3}, REMAT_F64, -1, 1, 6)),
                           rt_leaf(rt_rand(4, (int64_t[]){1, 2, 67, 2}, REMAT_F64, -1, 1, 7))};
    RT_GRADCHECK(fused_fn, &causal, 3, in);
    RT_GRADCHECK(fused_fn, &full, 3, in);
    for (int i = 0; i < 3; i++) remat_release(in[i]);
    cr_assert_eq(remat_live_tensors(), 0);
}

/* q, k, v as per-head views of one packed (B, T, 3·H·D) tensor, the GPT's
 * layout: read in place through their row stride. */
Test(attention, gradcheck_packed_views) {
    const int64_t B = 2, T = 5, H = 2, D = 3;
    remat_tensor *qkv = rt_leaf(rt_rand(3, (int64_t[]){B, T, 3 * H * D}, REMAT_F64, -1, 1, 8));
    remat_tensor *parts[3], *r = NULL, *in[3];
    int np = 0;
    RT_OK(remat_split(parts, 3, &np, qkv, H * D, -1));
    for (int i = 0; i < 3; i++) {
        RT_OK(remat_reshape(&r, parts[i], 4, (int64_t[]){B, T, H, D}));
        RT_OK(remat_transpose(&in[i], r, 1, 2));
        cr_assert(!remat_is_contiguous(in[i]));
        remat_release(r);
        remat_release(parts[i]);
    }
    att_case c = {true, 0};
    RT_GRADCHECK(fused_fn, &c, 3, in);
    RT_GRADCHECK(composed_fn, &c, 3, in);
    /* a last dim that is not contiguous (copied internally) */
    remat_tensor *qt = NULL;
    RT_OK(remat_transpose(&qt, in[0], -2, -1)); /* (B, H, D, T): D = 3 keys of width T */
    remat_tensor *in2[3] = {qt, qt, qt};
    RT_GRADCHECK(fused_fn, &c, 3, in2);
    remat_release(qt);
    for (int i = 0; i < 3; i++) remat_release(in[i]);
    remat_release(qkv);
    cr_assert_eq(remat_live_tensors(), 0);
}

/* 4-D output stored as (B, T, H, D): transposing back is contiguous, and
 * the values are those of a contiguous result. */
Test(attention, layout_4d) {
    remat_tensor *q = rt_rand(4, (int64_t[]){2, 3, 4, 5}, REMAT_F32, -1, 1, 9), *y = NULL,
                 *t = NULL, *ref = NULL;
    RT_OK(remat_attention(&y, q, q, q, true, 0));
    cr_assert_eq(remat_ndim(y), 4);
    cr_assert_eq(remat_size(y, 1), 3);
    cr_assert_eq(remat_size(y, 2), 4);
    RT_OK(remat_transpose(&t, y, 1, 2));
    cr_assert(remat_is_contiguous(t));
    RT_OK(composed(&ref, q, q, q, true, 1.0 / sqrt(5.0)));
    rt_assert_close(y, ref, 1e-6, 1e-5, "4-D output");
    /* the first query sees only the first key: its output is v's first row */
    double *yv = rt_values(y), *qv = rt_values(q);
    for (int c = 0; c < 5; c++) cr_assert_float_eq(yv[c], qv[c], 1e-6);
    free(yv);
    free(qv);
    remat_release(q);
    remat_release(y);
    remat_release(t);
    remat_release(ref);
    cr_assert_eq(remat_live_tensors(), 0);
}

/* Rows that would overflow exp without the max subtraction. */
Test(attention, large_scores_are_stable) {
    remat_tensor *q = rt_rand(3, (int64_t[]){1, 6, 4}, REMAT_F32, 30, 40, 10), *y = NULL,
                 *ref = NULL;
    RT_OK(remat_attention(&y, q, q, q, false, 1.0));
    RT_OK(composed(&ref, q, q, q, false, 1.0));
    double *v = rt_values(y);
    for (int i = 0; i < 24; i++) cr_assert(isfinite(v[i]));
    free(v);
    rt_assert_close(y, ref, 1e-4, 1e-5, "large scores");
    remat_release(q);
    remat_release(y);
    remat_release(ref);
}

Test(attention, empty_keys_give_zeros) {
    remat_tensor *q = rt_rand(3, (int64_t[]){2, 3, 4}, REMAT_F64, -1, 1, 11);
    remat_tensor *k = rt_rand(3, (int64_t[]){2, 0, 4}, REMAT_F64, -1, 1, 12);
    remat_tensor *v = rt_rand(3, (int64_t[]){2, 0, 5}, REMAT_F64, -1, 1, 13), *y = NULL;
    RT_OK(remat_attention(&y, q, k, v, false, 0));
    cr_assert_eq(remat_size(y, 2), 5);
    double *yv = rt_values(y);
    for (int i = 0; i < 30; i++) cr_assert_eq(yv[i], 0.0);
    free(yv);
    remat_release(q);
    remat_release(k);
    remat_release(v);
    remat_release(y);
}

/* ---- under checkpoint: recomputation gives bitwise the same gradients ------------ */
static int att_block(void *ud, remat_tensor *const *in, int n_in, remat_tensor **out, int n_out) {
    (void)ud;
    (void)n_in;
    (void)n_out;
    remat_tensor *h = NULL, *y = NULL;
    int rc = remat_tanh(&h, in[0]);
    if (!rc) rc = remat_attention(&y, h, in[0], h, true, 0);
    remat_release(h);
    out[0] = y;
    return rc;
}

static void att_grads(bool ckpt, remat_tensor **g) {
    remat_tensor *x = rt_leaf(rt_rand(4, (int64_t[]){2, 2, 90, 8}, REMAT_F32, -1, 1, 14));
    remat_tensor *y = NULL, *s = NULL;
    remat_checkpoint_options o = {.use_reentrant = REMAT_OPT_FALSE};
    if (ckpt) RT_OK(remat_checkpoint(att_block, NULL, 1, &x, 1, &y, &o));
    else RT_OK(att_block(NULL, &x, 1, &y, 1));
    RT_OK(remat_sum_all(&s, y));
    RT_OK(remat_grad(1, &s, NULL, 1, &x, false, false, g));
    remat_release(x);
    remat_release(y);
    remat_release(s);
}

Test(attention, checkpoint_bitwise) {
    remat_tensor *a = NULL, *b = NULL;
    att_grads(false, &a);
    att_grads(true, &b);
    cr_assert(rt_bitwise_equal(a, b), "checkpointed attention gradient differs");
    remat_release(a);
    remat_release(b);
    cr_assert_eq(remat_live_tensors(), 0);
}

Test(attention, bad_input) {
    remat_tensor *q = rt_rand(3, (int64_t[]){2, 3, 4}, REMAT_F32, -1, 1, 1);
    remat_tensor *k5 = rt_rand(3, (int64_t[]){2, 3, 5}, REMAT_F32, -1, 1, 2);
    remat_tensor *kb = rt_rand(3, (int64_t[]){3, 3, 4}, REMAT_F32, -1, 1, 3);
    remat_tensor *v2 = rt_rand(3, (int64_t[]){2, 2, 4}, REMAT_F32, -1, 1, 4);
    remat_tensor *qd = rt_rand(3, (int64_t[]){2, 3, 4}, REMAT_F64, -1, 1, 5);
    remat_tensor *q1 = rt_rand(1, (int64_t[]){4}, REMAT_F32, -1, 1, 6);
    remat_tensor *qi = rt_tensor(3, (int64_t[]){1, 1, 1}, REMAT_I64, (double[]){1});
    remat_tensor *y = (remat_tensor *)&y; /* must be reset to NULL on failure */
    RT_FAILS(remat_attention(&y, q, k5, q, false, 0), REMAT_ESHAPE, "remat_attention");
    cr_assert_null(y);
    RT_FAILS(remat_attention(&y, q, kb, kb, false, 0), REMAT_ESHAPE, "batch");
    RT_FAILS(remat_attention(&y, q, q, v2, false, 0), REMAT_ESHAPE, "keys");
    RT_FAILS(remat_attention(&y, q, qd, qd, false, 0), REMAT_EDTYPE, "remat_attention");
    RT_FAILS(remat_attention(&y, q1, q1, q1, false, 0), REMAT_ESHAPE, "dims");
    RT_FAILS(remat_attention(&y, qi, qi, qi, false, 0), REMAT_EDTYPE, "remat_attention");
    RT_FAILS(remat_attention(&y, q, q, q, false, NAN), REMAT_EINVAL, "scale");
    RT_FAILS(remat_attention(&y, NULL, q, q, false, 0), REMAT_EINVAL, "remat_attention");
    RT_FAILS(remat_attention(NULL, q, q, q, false, 0), REMAT_EINVAL, "out");
    remat_tensor *all[] = {q, k5, kb, v2, qd, q1, qi};
    for (int i = 0; i < 7; i++) remat_release(all[i]);
    cr_assert_eq(remat_live_tensors(), 0);
}

/* ---- grouped-query heads and the lower-right causal mask ------------------------------------
 * The reference repeats each kv head over its query group with public ops (unsqueeze, expand,
 * reshape: the repeat PyTorch's repeat_interleave makes, whose backward sums the group's
 * gradients) and masks row i to keys j <= i + off (off = Tk - Tq for the lower-right mask,
 * 0 for the upper-left one). */
static remat_tensor *repeat_heads(remat_tensor *t, int64_t g) {
    int n = remat_ndim(t);
    const int64_t *s = remat_shape(t);
    int64_t ex[REMAT_MAX_DIMS + 1], sh[REMAT_MAX_DIMS];
    remat_tensor *u = NULL, *e = NULL, *r = NULL;
    for (int i = 0; i < n; i++) sh[i] = s[i];
    sh[n - 3] = s[n - 3] * g;
    for (int i = 0, j = 0; i <= n; i++) ex[i] = i == n - 2 ? g : s[j++];
    RT_OK(remat_unsqueeze(&u, t, n - 2));
    RT_OK(remat_expand(&e, u, n + 1, ex));
    RT_OK(remat_reshape(&r, e, n, sh));
    remat_release(u), remat_release(e);
    return r;
}

static int composed_off(remat_tensor **out, remat_tensor *q, remat_tensor *k, remat_tensor *v,
                        bool lower_right, double scale) {
    int n = remat_ndim(q);
    int64_t Tq = remat_size(q, n - 2), Tk = remat_size(k, n - 2), off = lower_right ? Tk - Tq : 0;
    int64_t g = remat_size(q, n - 3) / remat_size(k, n - 3);
    remat_tensor *kr = repeat_heads(k, g), *vr = repeat_heads(v, g);
    remat_tensor *kt = NULL, *s = NULL, *t = NULL, *p = NULL;
    double *m = calloc((size_t)(Tq * Tk), sizeof *m);
    for (int64_t i = 0; i < Tq; i++)
        for (int64_t j = 0; j < Tk; j++) m[i * Tk + j] = j > i + off;
    remat_tensor *mask = rt_tensor(2, (int64_t[]){Tq, Tk}, REMAT_I64, m);
    free(m);
    int rc = remat_transpose(&kt, kr, -2, -1);
    if (!rc) rc = remat_matmul(&s, q, kt);
    if (!rc) rc = remat_mul_scalar(&t, s, scale);
    remat_release_p(&s);
    if (!rc) rc = remat_masked_fill(&s, t, mask, -INFINITY);
    if (!rc) rc = remat_softmax(&p, s, -1);
    if (!rc) rc = remat_matmul(out, p, vr);
    remat_release(kr), remat_release(vr), remat_release(kt), remat_release(s), remat_release(t);
    remat_release(p), remat_release(mask);
    return rc;
}

typedef struct gqa_case {
    bool lower_right;
    double scale;
} gqa_case;

static int gqa_fused_fn(void *ud, remat_tensor *const *in, int n, remat_tensor **out) {
    (void)n;
    const gqa_case *c = ud;
    return c->lower_right ? remat_attention_causal(out, in[0], in[1], in[2],
                                                   REMAT_CAUSAL_LOWER_RIGHT, c->scale)
                          : remat_attention(out, in[0], in[1], in[2], true, c->scale);
}

/* Fused (causal, upper-left or lower-right) against the composed reference: values and the
 * gradients of sum(out * w). */
static void compare_gqa(const int64_t *qs, const int64_t *ks, remat_dtype dt, bool lower_right,
                        double tol) {
    gqa_case c = {lower_right, 0};
    int64_t vs[4] = {ks[0], ks[1], ks[2], ks[3] + 1};
    remat_tensor *in[3] = {rt_leaf(rt_rand(4, qs, dt, -2, 2, 11)),
                           rt_leaf(rt_rand(4, ks, dt, -2, 2, 12)),
                           rt_leaf(rt_rand(4, vs, dt, -2, 2, 13))};
    remat_tensor *a = NULL, *b = NULL, *ga[3] = {0}, *gb[3] = {0};
    RT_OK(gqa_fused_fn(&c, in, 3, &a));
    RT_OK(composed_off(&b, in[0], in[1], in[2], lower_right, 1.0 / sqrt((double)qs[3])));
    rt_assert_close(a, b, tol, tol, "gqa attention output");
    remat_tensor *w = rt_rand(remat_ndim(a), remat_shape(a), dt, -1, 1, 14);
    RT_OK(remat_grad(1, &a, &w, 3, in, false, false, ga));
    RT_OK(remat_grad(1, &b, &w, 3, in, false, false, gb));
    const char *what[3] = {"dq", "dk", "dv"};
    for (int i = 0; i < 3; i++) {
        cr_assert_eq(remat_ndim(ga[i]), 4);
        for (int d = 0; d < 4; d++)
            cr_assert_eq(remat_size(ga[i], d), remat_size(in[i], d), "%s: dim %d", what[i], d);
        rt_assert_close(ga[i], gb[i], tol, tol, what[i]);
        remat_release(ga[i]), remat_release(gb[i]), remat_release(in[i]);
    }
    remat_release(a), remat_release(b), remat_release(w);
    cr_assert_eq(remat_live_tensors(), 0);
}

Test(attention, grouped_query_heads_match_repeated_kv) {
    /* GQA (4 query heads over 2 kv heads), MQA (1 kv head), several query blocks */
    compare_gqa((int64_t[]){2, 4, 5, 3}, (int64_t[]){2, 2, 5, 3}, REMAT_F64, false, 1e-12);
    compare_gqa((int64_t[]){1, 6, 3, 4}, (int64_t[]){1, 1, 3, 4}, REMAT_F64, false, 1e-12);
    compare_gqa((int64_t[]){1, 6, 130, 8}, (int64_t[]){1, 3, 130, 8}, REMAT_F64, false, 1e-12);
    compare_gqa((int64_t[]){2, 8, 70, 16}, (int64_t[]){2, 2, 70, 16}, REMAT_F32, false, 2e-5);
}

Test(attention, lower_right_causal_mask_matches_reference) {
    /* a KV cache: fewer queries than keys (one decoding step, a chunk of a prompt), GQA too;
     * and more queries than keys, whose first rows see no key (their output is 0) */
    compare_gqa((int64_t[]){2, 2, 1, 4}, (int64_t[]){2, 2, 9, 4}, REMAT_F64, true, 1e-12);
    compare_gqa((int64_t[]){1, 4, 3, 4}, (int64_t[]){1, 2, 80, 4}, REMAT_F64, true, 1e-12);
    compare_gqa((int64_t[]){1, 2, 70, 4}, (int64_t[]){1, 1, 140, 4}, REMAT_F64, true, 1e-12);
    compare_gqa((int64_t[]){1, 2, 6, 4}, (int64_t[]){1, 2, 6, 4}, REMAT_F64, true, 1e-12);
}

Test(attention, lower_right_rows_see_every_key_when_there_are_more_queries) {
    /* Tq > Tk: the first Tq - Tk rows see no key; their output and gradients are 0 */
    remat_tensor *q = rt_leaf(rt_rand(3, (int64_t[]){1, 5, 4}, REMAT_F64, -1, 1, 21));
    remat_tensor *k = rt_leaf(rt_rand(3, (int64_t[]){1, 3, 4}, REMAT_F64, -1, 1, 22));
    remat_tensor *v = rt_leaf(rt_rand(3, (int64_t[]){1, 3, 4}, REMAT_F64, -1, 1, 23));
    remat_tensor *y = NULL, *g[3] = {NULL};
    RT_OK(remat_attention_causal(&y, q, k, v, REMAT_CAUSAL_LOWER_RIGHT, 0));
    double *yv = rt_values(y);
    for (int i = 0; i < 2 * 4; i++) cr_assert_eq(yv[i], 0.0, "row %d sees no key", i / 4);
    for (int i = 2 * 4; i < 5 * 4; i++) cr_assert(yv[i] != 0.0);
    free(yv);
    remat_tensor *in[3] = {q, k, v}, *s = NULL;
    RT_OK(remat_sum_all(&s, y));
    RT_OK(remat_grad(1, &s, NULL, 3, in, false, false, g));
    remat_release(s);
    double *gq = rt_values(g[0]);
    for (int i = 0; i < 2 * 4; i++) cr_assert_eq(gq[i], 0.0);
    free(gq);
    for (int i = 0; i < 3; i++) remat_release(g[i]), remat_release(in[i]);
    remat_release(y);
    cr_assert_eq(remat_live_tensors(), 0);
}

/* Tq - Tk >= a whole query block (64 rows): that block sees no key at all (the kernels' keyless
 * path, f32/f64 and bf16): its output and dq rows are 0, the rows after see keys. */
static void keyless_block(remat_dtype dt) {
    const int64_t Tq = 70, Tk = 3, D = 4, none = Tq - Tk;
    remat_tensor *q0 = rt_rand(3, (int64_t[]){1, Tq, D}, REMAT_F32, -1, 1, 41);
    remat_tensor *k0 = rt_rand(3, (int64_t[]){1, Tk, D}, REMAT_F32, -1, 1, 42);
    remat_tensor *v0 = rt_rand(3, (int64_t[]){1, Tk, D}, REMAT_F32, -1, 1, 43);
    remat_tensor *in[3] = {NULL}, *y = NULL, *s = NULL, *g[3] = {NULL};
    RT_OK(remat_to_dtype(&in[0], q0, dt));
    RT_OK(remat_to_dtype(&in[1], k0, dt));
    RT_OK(remat_to_dtype(&in[2], v0, dt));
    for (int i = 0; i < 3; i++) RT_OK(remat_set_requires_grad(in[i], true));
    RT_OK(remat_attention_causal(&y, in[0], in[1], in[2], REMAT_CAUSAL_LOWER_RIGHT, 0));
    double *yv = rt_values(y);
    for (int64_t i = 0; i < none * D; i++) cr_assert_eq(yv[i], 0.0, "row %ld sees no key", i / D);
    for (int64_t i = none * D; i < Tq * D; i++) cr_assert(yv[i] != 0.0);
    free(yv);
    RT_OK(remat_sum_all(&s, y));
    RT_OK(remat_grad(1, &s, NULL, 3, in, false, false, g));
    double *gq = rt_values(g[0]);
    for (int64_t i = 0; i < none * D; i++) cr_assert_eq(gq[i], 0.0, "dq row %ld", i / D);
    free(gq);
    for (int i = 0; i < 3; i++) remat_release(g[i]), remat_release(in[i]);
    remat_release(s), remat_release(y), remat_release(q0), remat_release(k0), remat_release(v0);
    cr_assert_eq(remat_live_tensors(), 0);
}

Test(attention, a_query_block_that_sees_no_key) {
    keyless_block(REMAT_F64);
    keyless_block(REMAT_F32);
    keyless_block(REMAT_BF16);
}

Test(attention, gqa_gradcheck_f64) {
    gqa_case upper = {false, 0}, lower = {true, 0.6};
    remat_tensor *in[3] = {rt_leaf(rt_rand(4, (int64_t[]){1, 4, 67, 3}, REMAT_F64, -1, 1, 31)),
                           rt_leaf(rt_rand(4, (int64_t[]){1, 2, 67, 3}, REMAT_F64, -1, 1, 32)),
                           rt_leaf(rt_rand(4, (int64_t[]){1, 2, 67, 2}, REMAT_F64, -1, 1, 33))};
    RT_GRADCHECK(gqa_fused_fn, &upper, 3, in);
    for (int i = 0; i < 3; i++) remat_release(in[i]);
    remat_tensor *in2[3] = {rt_leaf(rt_rand(4, (int64_t[]){1, 3, 5, 3}, REMAT_F64, -1, 1, 34)),
                            rt_leaf(rt_rand(4, (int64_t[]){1, 1, 9, 3}, REMAT_F64, -1, 1, 35)),
                            rt_leaf(rt_rand(4, (int64_t[]){1, 1, 9, 2}, REMAT_F64, -1, 1, 36))};
    RT_GRADCHECK(gqa_fused_fn, &lower, 3, in2);
    for (int i = 0; i < 3; i++) remat_release(in2[i]);
    cr_assert_eq(remat_live_tensors(), 0);
}

/* The repeat is never made: the forward allocates its output and the saved log-sum-exp only. */
Test(attention, gqa_never_materialises_the_repeated_kv) {
    const int64_t B = 2, Hq = 8, Hkv = 2, T = 64, D = 16;
    remat_tensor *q = rt_rand(4, (int64_t[]){B, Hq, T, D}, REMAT_F32, -1, 1, 41);
    remat_tensor *k = rt_rand(4, (int64_t[]){B, Hkv, T, D}, REMAT_F32, -1, 1, 42);
    remat_tensor *v = rt_rand(4, (int64_t[]){B, Hkv, T, D}, REMAT_F32, -1, 1, 43);
    remat_tensor *y = NULL;
    size_t before = rt_device_current_bytes();
    RT_OK(remat_attention(&y, q, k, v, true, 0));
    size_t grown = rt_device_current_bytes() - before;
    cr_assert_eq(grown, (size_t)(B * Hq * T * D) * sizeof(float),
                 "the forward (no grad) kept %zu bytes, expected its output alone", grown);
    remat_release(y), remat_release(q), remat_release(k), remat_release(v);
}

Test(attention, gqa_bad_head_counts) {
    remat_tensor *q = rt_rand(4, (int64_t[]){1, 6, 3, 4}, REMAT_F32, -1, 1, 1);
    remat_tensor *k4 = rt_rand(4, (int64_t[]){1, 4, 3, 4}, REMAT_F32, -1, 1, 2);
    remat_tensor *k2 = rt_rand(4, (int64_t[]){1, 2, 3, 4}, REMAT_F32, -1, 1, 3);
    remat_tensor *v3 = rt_rand(4, (int64_t[]){1, 3, 3, 4}, REMAT_F32, -1, 1, 4);
    remat_tensor *y = NULL;
    RT_FAILS(remat_attention(&y, q, k4, k4, false, 0), REMAT_ESHAPE, "multiple");
    cr_assert_null(y);
    RT_FAILS(remat_attention(&y, q, k2, v3, false, 0), REMAT_ESHAPE, "same number of heads");
    RT_FAILS(remat_attention_causal(&y, q, k2, k2, (remat_causal_variant)7, 0), REMAT_EINVAL,
             "variant");
    remat_release(q), remat_release(k4), remat_release(k2), remat_release(v3);
}
