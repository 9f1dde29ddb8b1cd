/* tests/test_grad_layout.c — gradients laid out as split pieces (src/ops/grad_layout.c): an
 * attention on q, k and v cut from one qkv tensor writes their gradients as the same pieces of
 * one buffer, and SplitBackward hands that buffer on without copying it together; the values
 * are those of the copying path. The layout test itself: which views count as pieces of one
 * split (disjoint, tiling) and which do not (the same tensor, overlapping windows, gaps). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/core.h"

#include "ops/ops_internal.h"
#include "support/rt.h"

RT_ON_TEST_DEVICE

enum { B = 2, T = 5, H = 2, D = 3, C = H * D };

/* The gradient a hook saw (retained), one slot per hook. */
static remat_status keep_grad(void *user_data, remat_tensor *grad, remat_tensor **replacement) {
    remat_tensor **slot = user_data;
    *replacement = NULL;
    remat_release(*slot);
    *slot = grad;
    remat_retain(grad);
    return REMAT_OK;
}

/* (B, T, C) piece → (B, H, T, D) heads, the GPT's to_heads */
static remat_tensor *heads(remat_tensor *piece) {
    remat_tensor *r = NULL, *t = NULL;
    RT_OK(remat_reshape(&r, piece, 4, (int64_t[]){B, T, H, D}));
    RT_OK(remat_transpose(&t, r, 1, 2));
    remat_release(r);
    return t;
}

/* sum(attention(q, k, v) * w) from qkv (B, T, 3C) = x·2 split in three; contiguous: q, k and v
 * copied out of the pieces first (the copying path). *g_qkv: qkv's gradient (a hook), *g_q:
 * q's (B, H, T, D). */
static void run(remat_tensor *x, remat_tensor *w, bool contiguous, remat_tensor **g_qkv,
                remat_tensor **g_q) {
    remat_tensor *qkv = NULL, *p[3] = {NULL}, *hq[3] = {NULL}, *att = NULL, *prod = NULL,
                 *loss = NULL;
    RT_OK(remat_mul_scalar(&qkv, x, 2.0));
    *g_qkv = *g_q = NULL;
    RT_OK(remat_register_hook(qkv, keep_grad, g_qkv));
    int n = 0;
    RT_OK(remat_split(p, 3, &n, qkv, C, -1));
    cr_assert_eq(n, 3);
    for (int i = 0; i < 3; i++) {
        hq[i] = heads(p[i]);
        if (contiguous) {
            remat_tensor *c = NULL;
            RT_OK(remat_contiguous(&c, hq[i]));
            remat_release(hq[i]);
            hq[i] = c;
        }
    }
    RT_OK(remat_register_hook(hq[0], keep_grad, g_q));
    RT_OK(remat_attention(&att, hq[0], hq[1], hq[2], true, 0.0));
    RT_OK(remat_mul(&prod, att, w));
    RT_OK(remat_sum_all(&loss, prod));
    RT_OK(remat_backward_scalar(loss));
    remat_release(loss), remat_release(prod), remat_release(att), remat_release(qkv);
    for (int i = 0; i < 3; i++) remat_release(p[i]), remat_release(hq[i]);
}

Test(grad_layout, attention_gradients_reach_the_split_as_one_buffer) {
    remat_tensor *x = rt_leaf(rt_rand(3, (int64_t[]){B, T, 3 * C}, REMAT_F64, -1, 1, 11));
    remat_tensor *w = rt_rand(4, (int64_t[]){B, H, T, D}, REMAT_F64, -1, 1, 12);
    remat_tensor *gqkv = NULL, *gq = NULL, *gqkv_ref = NULL, *gq_ref = NULL;
    run(x, w, false, &gqkv, &gq);
    cr_assert_not_null(gqkv);
    cr_assert_not_null(gq);
    /* the split's gradient is the buffer the attention wrote q's gradient into: no copy */
    cr_assert(remat_shares_storage(gqkv, gq), "qkv's gradient is a copy of the pieces");
    cr_assert(remat_is_contiguous(gqkv));
    run(x, w, true, &gqkv_ref, &gq_ref);
    cr_assert(!remat_shares_storage(gqkv_ref, gq_ref), "the copying path shares (test is vacuous)");
    rt_assert_close(gqkv, gqkv_ref, 1e-13, 1e-13, "qkv's gradient");
    rt_assert_close(gq, gq_ref, 1e-13, 1e-13, "q's gradient");
    remat_release(gqkv), remat_release(gq), remat_release(gqkv_ref), remat_release(gq_ref);
    remat_release(x), remat_release(w);
    cr_assert_eq(remat_live_tensors(), 0, "%lld tensors leaked", (long long)remat_live_tensors());
}

/* ---- which views are pieces of one split --------------------------------------------- */
/* A view of base's storage (not counted as a live tensor of the user's). */
static remat_tensor *view_of(remat_tensor *base, int64_t offset, int ndim, const int64_t *shape,
                             const int64_t *strides) {
    remat_tensor *v = rm_tensor_alloc(base->storage, offset, ndim, shape, strides, base->dtype);
    cr_assert_not_null(v);
    v->is_view = true;
    return v;
}

/* rm_new_grads_like_pieces on like[0..n): whether it shared, and (when it did) that each
 * gradient has its piece's shape and strides at offset i * delta of one storage. */
static bool shares(int n, remat_tensor *const *like, int64_t delta) {
    remat_tensor *g[4] = {NULL};
    bool shared = false;
    RT_OK(rm_new_grads_like_pieces(g, n, like, like[0]->dtype, like[0]->storage->device, &shared));
    for (int i = 0; shared && i < n; i++) {
        cr_assert_not_null(g[i]);
        cr_assert_eq(g[i]->storage, g[0]->storage);
        cr_assert_eq(g[i]->offset, i * delta, "piece %d at %lld", i, (long long)g[i]->offset);
        cr_assert_eq(
            memcmp(g[i]->strides, like[i]->strides, sizeof(int64_t) * (size_t)like[i]->ndim), 0);
        cr_assert_eq(memcmp(g[i]->shape, like[i]->shape, sizeof(int64_t) * (size_t)like[i]->ndim),
                     0);
    }
    for (int i = 0; i < n; i++) {
        if (!shared) cr_assert_null(g[i], "untouched when not shared");
        rm_release(g[i]);
    }
    return shared;
}

Test(grad_layout, pieces_of_one_split_and_what_is_not) {
    remat_tensor *base = NULL;
    RT_OK(remat_zeros(&base, 1, (int64_t[]){B * T * 4 * C}, REMAT_F64, REMAT_DEVICE_CPU));
    remat_tensor *v[3];
    /* a GPT's q, k, v heads: (B, H, T, D) of (B, T, 3C), strides (3TC, D, 3C, 1) */
    const int64_t hs[4] = {B, H, T, D}, hst[4] = {3 * T * C, D, 3 * C, 1};
    for (int i = 0; i < 3; i++) v[i] = view_of(base, i * C, 4, hs, hst);
    cr_assert(shares(3, v, C), "q, k, v heads of one qkv");
    for (int i = 0; i < 3; i++) rm_release(v[i]);
    /* rows of a (3N, M) matrix split along dim 0: the pieces are contiguous */
    const int64_t rs[2] = {4, 6}, rst[2] = {6, 1};
    for (int i = 0; i < 3; i++) v[i] = view_of(base, i * 24, 2, rs, rst);
    cr_assert(shares(3, v, 24), "rows split along dim 0");
    for (int i = 0; i < 3; i++) rm_release(v[i]);
    /* the same tensor three times (delta 0) */
    for (int i = 0; i < 3; i++) v[i] = view_of(base, 0, 2, rs, rst);
    cr_assert(!shares(3, v, 0), "one tensor thrice");
    for (int i = 0; i < 3; i++) rm_release(v[i]);
    /* overlapping windows: rows shifted by one (offsets 0, 6, 12 of a (4, 6) window) */
    for (int i = 0; i < 3; i++) v[i] = view_of(base, i * 6, 2, rs, rst);
    cr_assert(!shares(3, v, 6), "shifted rows overlap");
    for (int i = 0; i < 3; i++) rm_release(v[i]);
    /* three of four column pieces of (B, T, 4C): the rows step by 4C, not by 3C */
    const int64_t cs[3] = {B, T, C}, cst[3] = {T * 4 * C, 4 * C, 1};
    for (int i = 0; i < 3; i++) v[i] = view_of(base, i * C, 3, cs, cst);
    cr_assert(!shares(3, v, C), "a gap between the pieces' rows");
    for (int i = 0; i < 3; i++) rm_release(v[i]);
    /* pieces wider than their step: columns [0, 2C), [C, 3C), [2C, 4C) of rows 3C apart */
    const int64_t ws[2] = {T, 2 * C}, wst[2] = {3 * C, 1};
    for (int i = 0; i < 3; i++) v[i] = view_of(base, i * C, 2, ws, wst);
    cr_assert(!shares(3, v, C), "overlapping column windows");
    for (int i = 0; i < 3; i++) rm_release(v[i]);
    /* a view overlapping itself (a stride 0 dim) */
    const int64_t es[2] = {4, 6}, est[2] = {0, 1};
    for (int i = 0; i < 3; i++) v[i] = view_of(base, i * 6, 2, es, est);
    cr_assert(!shares(3, v, 6), "an expanded view");
    for (int i = 0; i < 3; i++) rm_release(v[i]);
    remat_release(base);
}

Test(grad_layout, whole_only_when_the_pieces_tile_it) {
    remat_tensor *buf = NULL, *w = NULL;
    RT_OK(remat_zeros(&buf, 1, (int64_t[]){2 * 3 * 7}, REMAT_F64, REMAT_DEVICE_CPU));
    const int64_t whole[2] = {2, 7}, st[2] = {7, 1};
    /* split_size 3 along dim 1: widths 3, 3, 1 at offsets 0, 3, 6 with the whole's strides */
    remat_tensor *p[3] = {view_of(buf, 0, 2, (int64_t[]){2, 3}, st),
                          view_of(buf, 3, 2, (int64_t[]){2, 3}, st),
                          view_of(buf, 6, 2, (int64_t[]){2, 1}, st)};
    RT_OK(rm_pieces_whole(&w, 3, p, 2, whole, 1, 3));
    cr_assert_not_null(w);
    cr_assert_eq(w->storage, buf->storage);
    cr_assert_eq(w->offset, 0);
    cr_assert(remat_is_contiguous(w));
    rm_release(w);
    /* a piece missing, a piece moved, a piece of another storage: copied together instead */
    remat_tensor *missing[3] = {p[0], NULL, p[2]};
    RT_OK(rm_pieces_whole(&w, 3, missing, 2, whole, 1, 3));
    cr_assert_null(w);
    remat_tensor *moved = view_of(buf, 4, 2, (int64_t[]){2, 3}, st);
    remat_tensor *shifted[3] = {p[0], moved, p[2]};
    RT_OK(rm_pieces_whole(&w, 3, shifted, 2, whole, 1, 3));
    cr_assert_null(w);
    remat_tensor *other = rt_rand(2, (int64_t[]){2, 3}, REMAT_F64, -1, 1, 3);
    remat_tensor *foreign[3] = {p[0], other, p[2]};
    RT_OK(rm_pieces_whole(&w, 3, foreign, 2, whole, 1, 3));
    cr_assert_null(w);
    rm_release(moved), remat_release(other);
    for (int i = 0; i < 3; i++) rm_release(p[i]);
    remat_release(buf);
}
