/* tests/test_split_backward.c — remat_split's single multi-output
 * SplitBackward node: one node for all pieces, gradients of pieces partly
 * unused (their windows get zeros), capture of a piece's gradient, tensor
 * hooks on pieces, in-place on pieces (refused while they require grad,
 * version counter shared with the base otherwise), and split inside
 * checkpoints (non-reentrant with and without early stop — the ops after
 * the last save then run in skip mode — and reentrant), bitwise equal to
 * the plain run. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/core.h"

#include "autograd/graph.h"
#include "support/rt.h"

/* REMAT_TEST_DEVICE=fenced|cuda (make test-fenced, make test-cuda) puts the tensors that the
 * rt helpers make on that device (tests/support/rt.h) */
RT_ON_TEST_DEVICE

static remat_tensor *leaf(int ndim, const int64_t *shape, unsigned seed) {
    remat_tensor *t = rt_rand(ndim, shape, REMAT_F64, -1, 1, seed);
    RT_OK(remat_set_requires_grad(t, true));
    return t;
}

static void end_check(void) {
    cr_assert_eq(remat_live_tensors(), 0, "%lld tensors leaked", (long long)remat_live_tensors());
}

static void expect_values(const remat_tensor *t, int64_t n, const double *want, const char *what) {
    cr_assert_eq(remat_numel(t), n, "%s: numel %lld, expected %lld", what,
                 (long long)remat_numel(t), (long long)n);
    double *v = rt_values(t);
    for (int64_t i = 0; i < n; i++)
        cr_assert(v[i] == want[i], "%s: element %lld is %g, expected %g", what, (long long)i, v[i],
                  want[i]);
    free(v);
}

/* ---- one node ------------------------------------------------------------------------- */
Test(split_node, one_node_for_all_pieces) {
    int64_t sh[] = {4, 7};
    remat_tensor *a = leaf(2, sh, 1), *p[4];
    int n = 0;
    RT_OK(remat_split(p, 4, &n, a, 3, 1)); /* widths 3, 3, 1 */
    cr_assert_eq(n, 3);
    remat_node *node = remat_grad_fn(p[0]);
    cr_assert_not_null(node);
    cr_assert_str_eq(remat_node_name(node), "SplitBackward");
    for (int i = 1; i < n; i++) cr_assert_eq(remat_grad_fn(p[i]), node, "piece %d", i);
    cr_assert_eq(remat_node_num_next(node), 1);
    for (int i = 0; i < n; i++) {
        cr_assert(remat_shares_storage(p[i], a));
        cr_assert(remat_requires_grad(p[i]));
        cr_assert(!remat_is_leaf(p[i]));
    }
    /* the node lives as long as any piece does */
    remat_release(p[0]);
    remat_release(p[1]);
    cr_assert_str_eq(remat_node_name(remat_grad_fn(p[2])), "SplitBackward");
    remat_release(p[2]);
    /* no grad needed: no node */
    remat_tensor *b = rt_rand(2, sh, REMAT_F64, -1, 1, 2);
    RT_OK(remat_split(p, 4, &n, b, 3, 1));
    for (int i = 0; i < n; i++) {
        cr_assert_null(remat_grad_fn(p[i]));
        remat_release(p[i]);
    }
    bool prev = remat_no_grad_begin();
    RT_OK(remat_split(p, 4, &n, a, 3, 1));
    remat_grad_mode_restore(prev);
    for (int i = 0; i < n; i++) {
        cr_assert_null(remat_grad_fn(p[i]));
        remat_release(p[i]);
    }
    remat_release(b);
    remat_release(a);
    end_check();
}

/* ---- gradients ------------------------------------------------------------------------ */
typedef struct split_use {
    int64_t size;
    int dim;
    unsigned used; /* bit k: piece k is used */
} split_use;

/* out = cat of (piece_k * (k + 1)) over the used pieces, along dim */
static int f_split_use(void *ud, remat_tensor *const *in, int n_in, remat_tensor **out) {
    (void)n_in;
    split_use *u = ud;
    remat_tensor *p[8] = {NULL}, *used[8] = {NULL};
    int n = 0, nu = 0;
    int rc = remat_split(p, 8, &n, in[0], u->size, u->dim);
    for (int k = 0; k < n && rc == REMAT_OK; k++)
        if (u->used & (1u << k)) rc = remat_mul_scalar(&used[nu++], p[k], (double)(k + 1));
    if (rc == REMAT_OK) rc = remat_cat(out, nu, used, u->dim);
    for (int k = 0; k < 8; k++) {
        remat_release(p[k]);
        remat_release(used[k]);
    }
    return rc;
}

Test(split_grad, gradcheck_pieces_partly_unused) {
    int64_t sh[] = {3, 8, 5};
    remat_tensor *a = leaf(3, sh, 3);
    split_use cases[] = {
        {3, 1, 0x7},  /* all pieces (3, 3, 2) */
        {3, 1, 0x5},  /* the middle one unused */
        {3, 1, 0x2},  /* only the middle one */
        {3, 1, 0x4},  /* only the short last one */
        {2, -1, 0x5}, /* last dim: (2, 2, 1), first and last */
        {1, 0, 0x6},  /* leading dim, pieces of 1 */
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        RT_GRADCHECK(f_split_use, &cases[i], 1, &a);
    remat_release(a);
    /* a non-contiguous input: the transposed view of a (5, 8) tensor */
    int64_t sb[] = {5, 8};
    remat_tensor *base = rt_rand(2, sb, REMAT_F64, -1, 1, 4), *t;
    RT_OK(remat_transpose(&t, base, 0, 1));
    remat_release(base);
    RT_OK(remat_set_requires_grad(t, true));
    split_use c2[] = {{3, 0, 0x5}, {2, 1, 0x6}};
    for (int i = 0; i < 2; i++) RT_GRADCHECK(f_split_use, &c2[i], 1, &t);
    remat_release(t);
    end_check();
}

Test(split_grad, values_with_an_unused_piece) {
    int64_t sh[] = {2, 5};
    remat_tensor *a = leaf(2, sh, 5), *p[3], *y = NULL, *l = NULL;
    int n;
    RT_OK(remat_split(p, 3, &n, a, 2, 1)); /* columns {0,1}, {2,3}, {4} */
    remat_tensor *s0, *s2;
    RT_OK(remat_mul_scalar(&s0, p[0], 2.0));
    RT_OK(remat_mul_scalar(&s2, p[2], -3.0));
    remat_tensor *parts[2] = {s0, s2};
    RT_OK(remat_cat(&y, 2, parts, 1));
    RT_OK(remat_sum_all(&l, y));
    RT_OK(remat_backward_scalar(l));
    double want[] = {2, 2, 0, 0, -3, 2, 2, 0, 0, -3};
    expect_values(remat_tensor_grad(a), 10, want, "grad of a");
    /* f32 as well */
    remat_tensor *b = rt_rand(2, sh, REMAT_F32, -1, 1, 6), *q[3], *m = NULL;
    RT_OK(remat_set_requires_grad(b, true));
    RT_OK(remat_split(q, 3, &n, b, 2, 1));
    RT_OK(remat_sum_all(&m, q[1]));
    RT_OK(remat_backward_scalar(m));
    double wb[] = {0, 0, 1, 1, 0, 0, 0, 1, 1, 0};
    expect_values(remat_tensor_grad(b), 10, wb, "grad of b");
    cr_assert_eq(remat_tensor_dtype(remat_tensor_grad(b)), REMAT_F32);
    for (int i = 0; i < 3; i++) {
        remat_release(p[i]);
        remat_release(q[i]);
    }
    remat_release(s0);
    remat_release(s2);
    remat_release(y);
    remat_release(l);
    remat_release(m);
    remat_release(a);
    remat_release(b);
    end_check();
}

/* remat_grad with respect to pieces (captures at the split node's outputs)
 * and through them to the base */
Test(split_grad, grad_of_pieces_and_base) {
    int64_t sh[] = {6};
    remat_tensor *a = leaf(1, sh, 7), *p[2], *y = NULL, *l = NULL;
    int n;
    RT_OK(remat_split(p, 2, &n, a, 3, 0));
    RT_OK(remat_mul(&y, p[0], p[1]));
    RT_OK(remat_sum_all(&l, y));
    remat_tensor *ins[3] = {p[0], p[1], a}, *g[3] = {NULL, NULL, NULL};
    RT_OK(remat_grad(1, &l, NULL, 3, ins, true, false, g));
    cr_assert(rt_bitwise_equal(g[0], p[1]), "d/dp0 = p1");
    cr_assert(rt_bitwise_equal(g[1], p[0]), "d/dp1 = p0");
    double *va = rt_values(a), *ga = rt_values(g[2]);
    for (int i = 0; i < 6; i++) cr_assert_eq(ga[i], va[(i + 3) % 6], "element %d", i);
    free(va);
    free(ga);
    for (int i = 0; i < 3; i++) remat_release(g[i]);
    /* backward twice with the retained graph gives the same */
    remat_tensor *g2 = NULL;
    RT_OK(remat_grad(1, &l, NULL, 1, &a, false, false, &g2));
    double *v2 = rt_values(g2);
    va = rt_values(a);
    for (int i = 0; i < 6; i++) cr_assert_eq(v2[i], va[(i + 3) % 6]);
    free(v2);
    free(va);
    remat_release(g2);
    for (int i = 0; i < 2; i++) remat_release(p[i]);
    remat_release(y);
    remat_release(l);
    remat_release(a);
    end_check();
}

/* ---- hooks on pieces ------------------------------------------------------------------ */
typedef struct hook_rec {
    int calls;
    double scale;
} hook_rec;

static int scale_hook(void *ud, remat_tensor *grad, remat_tensor **replacement) {
    hook_rec *h = ud;
    h->calls++;
    if (h->scale == 1.0) return REMAT_OK;
    return remat_mul_scalar(replacement, grad, h->scale);
}

Test(split_hooks, hooks_on_pieces) {
    int64_t sh[] = {2, 6};
    remat_tensor *a = leaf(2, sh, 8), *p[3], *l0 = NULL, *l2 = NULL, *l = NULL;
    int n;
    RT_OK(remat_split(p, 3, &n, a, 2, 1));
    hook_rec h0 = {0, 3.0}, h1 = {0, 1.0}, h2 = {0, 1.0}, h2b = {0, -1.0};
    RT_OK(remat_register_hook(p[0], scale_hook, &h0));
    RT_OK(remat_register_hook(p[1], scale_hook, &h1)); /* unused piece: never called */
    RT_OK(remat_register_hook(p[2], scale_hook, &h2));
    RT_OK(remat_register_hook(p[2], scale_hook, &h2b));
    RT_OK(remat_sum_all(&l0, p[0]));
    RT_OK(remat_sum_all(&l2, p[2]));
    RT_OK(remat_add(&l, l0, l2));
    RT_OK(remat_backward_scalar(l));
    cr_assert_eq(h0.calls, 1);
    cr_assert_eq(h1.calls, 0);
    cr_assert_eq(h2.calls, 1);
    cr_assert_eq(h2b.calls, 1);
    double want[] = {3, 3, 0, 0, -1, -1, 3, 3, 0, 0, -1, -1};
    expect_values(remat_tensor_grad(a), 12, want, "hooked grad");
    for (int i = 0; i < 3; i++) remat_release(p[i]);
    remat_release(l0);
    remat_release(l2);
    remat_release(l);
    remat_release(a);
    end_check();
}

/* ---- in-place on pieces --------------------------------------------------------------- */
Test(split_inplace, refused_on_pieces_that_require_grad) {
    int64_t sh[] = {4, 4};
    remat_tensor *a = leaf(2, sh, 9), *h = NULL, *p[2];
    RT_OK(remat_mul_scalar(&h, a, 2.0)); /* a non-leaf base */
    int n;
    RT_OK(remat_split(p, 2, &n, h, 2, 0));
    RT_FAILS(remat_mul_scalar_(p[0], 2.0), REMAT_EUNSUPPORTED, "view");
    RT_FAILS(remat_add_(p[1], p[0], 1.0), REMAT_EUNSUPPORTED, "remat_add_");
    RT_FAILS(remat_zero_(p[1]), REMAT_EUNSUPPORTED, "remat_zero_");
    /* the failed calls changed nothing */
    double *vh = rt_values(h), *va = rt_values(a);
    for (int i = 0; i < 16; i++) cr_assert_eq(vh[i], 2 * va[i]);
    free(vh);
    free(va);
    for (int i = 0; i < 2; i++) remat_release(p[i]);
    remat_release(h);
    remat_release(a);
    end_check();
}

/* Without grad mode an in-place write through a piece is allowed: it
 * writes into the base and bumps the version counter they share, so a
 * tensor saved for backward through another piece is detected as stale. */
Test(split_inplace, version_counter_shared_with_base) {
    int64_t sh[] = {4, 3};
    remat_tensor *a = leaf(2, sh, 10), *h = NULL, *p[2], *y = NULL, *l = NULL;
    RT_OK(remat_mul_scalar(&h, a, 1.0));
    int n;
    RT_OK(remat_split(p, 2, &n, h, 2, 0));
    RT_OK(remat_mul(&y, p[0], p[0])); /* saves p[0] */
    RT_OK(remat_sum_all(&l, y));
    uint64_t v0 = remat_version(h);
    bool prev = remat_no_grad_begin();
    RT_OK(remat_mul_scalar_(p[1], 0.5));
    remat_grad_mode_restore(prev);
    cr_assert_gt(remat_version(h), v0);
    cr_assert_eq(remat_version(p[0]), remat_version(h));
    cr_assert_eq(rt_item_at(h, 6), 0.5 * rt_item_at(a, 6), "the write went to the base");
    RT_FAILS(remat_backward_scalar(l), REMAT_EVERSION, "modified by an in-place operation");
    for (int i = 0; i < 2; i++) remat_release(p[i]);
    remat_release(y);
    remat_release(l);
    remat_release(h);
    remat_release(a);
    end_check();
}

/* ---- checkpoint --------------------------------------------------------------------------- */
/* A small attention-like block: qkv = x W^T (W saved); q, k, v = split; out
 * = sum over the pieces of q * k + exp(v) — the ops after the linear save
 * q, k (mul) and exp(v) (exp). A second variant uses the pieces only in
 * ops that save nothing (add), so that under early stop the recomputation
 * stops after the linear and split runs in skip mode. */
typedef struct blk {
    remat_tensor *w;
    int variant;
    int calls;
} blk;

static int blk_fn(void *ud, remat_tensor *const *in, int n_in, remat_tensor **out, int n_out) {
    (void)n_in;
    (void)n_out;
    blk *b = ud;
    b->calls++;
    remat_tensor *h = NULL, *p[3] = {NULL}, *t = NULL, *e = NULL;
    int n = 0;
    int rc = remat_linear(&h, in[0], b->w, NULL); /* (N, 9) */
    if (!rc) rc = remat_split(p, 3, &n, h, 3, -1);
    if (b->variant == 0) {
        if (!rc) rc = remat_mul(&t, p[0], p[1]);
        if (!rc) rc = remat_exp(&e, p[2]);
        if (!rc) rc = remat_add(&out[0], t, e);
    } else { /* p[1] unused: its window gets zeros */
        if (!rc) rc = remat_add(&out[0], p[0], p[2]);
    }
    remat_release(h);
    for (int i = 0; i < 3; i++) remat_release(p[i]);
    remat_release(t);
    remat_release(e);
    return rc;
}

static void blk_grads(blk *b, remat_tensor *x, const remat_checkpoint_options *o, remat_tensor **gx,
                      remat_tensor **gw) {
    remat_tensor *y = NULL, *l = NULL;
    if (o) RT_OK(remat_checkpoint(blk_fn, b, 1, &x, 1, &y, o));
    else RT_OK(blk_fn(b, &x, 1, &y, 1));
    RT_OK(remat_sum_all(&l, y));
    /* .grad through remat_backward (reentrant checkpoints refuse remat_grad) */
    RT_OK(remat_set_grad(x, NULL));
    RT_OK(remat_set_grad(b->w, NULL));
    RT_OK(remat_backward_scalar(l));
    *gx = remat_retain(remat_tensor_grad(x));
    *gw = remat_retain(remat_tensor_grad(b->w));
    RT_OK(remat_set_grad(x, NULL));
    RT_OK(remat_set_grad(b->w, NULL));
    remat_release(y);
    remat_release(l);
}

Test(split_checkpoint, bitwise_equal_to_plain) {
    int64_t sx[] = {5, 4}, sw[] = {9, 4};
    for (int dt = 0; dt < 2; dt++) {
        remat_dtype dtype = dt ? REMAT_F32 : REMAT_F64;
        remat_tensor *x = rt_rand(2, sx, dtype, -1, 1, 11);
        RT_OK(remat_set_requires_grad(x, true));
        blk b = {rt_rand(2, sw, dtype, -1, 1, 12), 0, 0};
        RT_OK(remat_set_requires_grad(b.w, true));
        for (int variant = 0; variant < 2; variant++) {
            b.variant = variant;
            remat_tensor *rx, *rw;
            blk_grads(&b, x, NULL, &rx, &rw);
            remat_checkpoint_options opts[4] = {{0}};
            for (int i = 0; i < 3; i++) {
                opts[i].use_reentrant = REMAT_OPT_FALSE;
                opts[i].early_stop = i == 0 ? REMAT_OPT_TRUE : REMAT_OPT_FALSE;
            }
            opts[2].determinism_check = REMAT_DETERMINISM_NONE;
            opts[3].use_reentrant = REMAT_OPT_TRUE;
            for (int i = 0; i < 4; i++) {
                b.calls = 0;
                remat_tensor *cx, *cw;
                blk_grads(&b, x, &opts[i], &cx, &cw);
                cr_assert_eq(b.calls, 2, "dtype %d variant %d options %d: forward + recompute", dt,
                             variant, i);
                cr_assert(rt_bitwise_equal(cx, rx), "dtype %d variant %d options %d: grad x", dt,
                          variant, i);
                cr_assert(rt_bitwise_equal(cw, rw), "dtype %d variant %d options %d: grad w", dt,
                          variant, i);
                remat_release(cx);
                remat_release(cw);
            }
            remat_release(rx);
            remat_release(rw);
        }
        remat_release(x);
        remat_release(b.w);
    }
    end_check();
}

/* Saved-tensor hooks that pack a piece by copying it (the way offloading
 * does): the pieces are views with an offset into the base. */
static void *copy_pack(void *ud, remat_tensor *t) {
    int *count = ud;
    (*count)++;
    remat_tensor *c = NULL;
    if (remat_clone(&c, t)) return NULL;
    return c;
}

static int copy_unpack(void *ud, void *handle, remat_tensor **out) {
    (void)ud;
    *out = remat_retain(handle);
    return REMAT_OK;
}

static void copy_free(void *ud, void *handle) {
    (void)ud;
    remat_release(handle);
}

Test(split_checkpoint, saved_tensor_hooks_see_piece_views) {
    int64_t sx[] = {5, 4}, sw[] = {9, 4};
    remat_tensor *x = leaf(2, sx, 13);
    blk b = {leaf(2, sw, 14), 0, 0};
    remat_tensor *rx, *rw;
    blk_grads(&b, x, NULL, &rx, &rw);
    int packs = 0;
    remat_saved_hooks hk = {
        .pack = copy_pack, .unpack = copy_unpack, .free_handle = copy_free, .user_data = &packs};
    RT_OK(remat_saved_hooks_push(&hk));
    remat_tensor *hx, *hw;
    blk_grads(&b, x, NULL, &hx, &hw);
    RT_OK(remat_saved_hooks_pop());
    cr_assert_gt(packs, 0);
    cr_assert(rt_bitwise_equal(hx, rx));
    cr_assert(rt_bitwise_equal(hw, rw));
    remat_release(hx);
    remat_release(hw);
    remat_release(rx);
    remat_release(rw);
    remat_release(x);
    remat_release(b.w);
    end_check();
}

/* ---- the backward function itself ------------------------------------------------------- */
/* The engine hands every output's gradient (zeros where a piece got none);
 * the function also takes NULL for a missing one and zero-fills its window,
 * and computes nothing in skip mode (a meta gradient of a's shape). */
Test(split_node, backward_with_missing_grads_and_skip_mode) {
    int64_t sh[] = {2, 7};
    remat_tensor *a = leaf(2, sh, 20), *p[3];
    int n;
    RT_OK(remat_split(p, 3, &n, a, 3, 1)); /* widths 3, 3, 1 */
    remat_node *node = remat_grad_fn(p[0]);
    bool prev = remat_set_grad_enabled(false);
    for (int round = 0; round < 4; round++) {
        /* leave garbage in freed memory, so that a missing zero fill shows */
        remat_tensor *junk;
        RT_OK(remat_full(&junk, 2, sh, 123.0, REMAT_F64, REMAT_DEVICE_CPU));
        remat_release(junk);
        remat_tensor *g0 = rt_rand(2, (int64_t[]){2, 3}, REMAT_F64, 1, 2, 21);
        remat_tensor *g2 = rt_rand(2, (int64_t[]){2, 1}, REMAT_F64, 1, 2, 22);
        remat_tensor *gout[3] = {round & 1 ? NULL : g0, NULL, round & 2 ? g2 : NULL};
        if (round == 3) gout[1] = g0; /* piece 1 is (2, 3) too */
        remat_tensor *gin[1] = {NULL};
        RT_OK(node->backward(node, gout, gin));
        cr_assert_not_null(gin[0]);
        double *v = rt_values(gin[0]), *v0 = rt_values(g0), *v2 = rt_values(g2);
        for (int r = 0; r < 2; r++) {
            for (int c = 0; c < 7; c++) {
                double want = 0;
                if (c < 3 && gout[0]) want = v0[r * 3 + c];
                else if (c >= 3 && c < 6 && gout[1]) want = v0[r * 3 + c - 3];
                else if (c == 6 && gout[2]) want = v2[r];
                cr_assert(v[r * 7 + c] == want, "round %d [%d][%d]: %g, expected %g", round, r, c,
                          v[r * 7 + c], want);
            }
        }
        free(v);
        free(v0);
        free(v2);
        remat_release(gin[0]);
        remat_release(g0);
        remat_release(g2);
    }
    /* skip mode: shapes only (a meta gradient of a's shape) */
    remat_tensor *g1 = rt_rand(2, (int64_t[]){2, 3}, REMAT_F64, 1, 2, 23);
    remat_tensor *gout[3] = {NULL, g1, NULL}, *gin[1] = {NULL};
    bool prev_skip = rm_set_skip_mode(true);
    RT_OK(node->backward(node, gout, gin));
    rm_set_skip_mode(prev_skip);
    cr_assert_not_null(gin[0]);
    cr_assert(!rt_has_data(gin[0]));
    cr_assert_eq(remat_size(gin[0], 0), 2);
    cr_assert_eq(remat_size(gin[0], 1), 7);
    remat_release(gin[0]);
    remat_release(g1);
    remat_set_grad_enabled(prev);
    for (int i = 0; i < 3; i++) remat_release(p[i]);
    remat_release(a);
    end_check();
}
