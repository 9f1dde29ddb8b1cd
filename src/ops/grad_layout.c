/* src/ops/grad_layout.c — gradients laid out as their inputs were: when an op's inputs are the
 * pieces of one split (q, k and v cut from one qkv projection), its input gradients are made the
 * same pieces of one new buffer, and the split's backward hands that buffer on whole instead of
 * copying the pieces together (concat.c). A GPT block's attention gradients then reach the qkv
 * linear without a copy: 3 copies of (B, T, C) a layer a step fewer (on a GPU 36 kernel launches
 * and ~1.2 ms a step of the 124M model, window 7's profile). */
#include <string.h>

#include "ops_internal.h"

/* The span of t's view in elements (1 + the offset of its last element), its strides all >= 0. */
static int64_t view_span(const remat_tensor *t) {
    int64_t span = 1;
    for (int d = 0; d < t->ndim; d++) {
        if (t->shape[d] == 0) return 0;
        span += (t->shape[d] - 1) * t->strides[d];
    }
    return span;
}

/* Whether distinct indices of the view (shape, strides >= 0) reach distinct elements: taken by
 * increasing stride, every stride passes the span of the dims below it. */
static bool non_overlapping(int ndim, const int64_t *shape, const int64_t *strides) {
    int order[REMAT_MAX_DIMS], n = 0;
    for (int d = 0; d < ndim; d++)
        if (shape[d] > 1) order[n++] = d;
    for (int i = 1; i < n; i++) /* insertion sort by stride: at most REMAT_MAX_DIMS dims */
        for (int j = i; j > 0 && strides[order[j]] < strides[order[j - 1]]; j--) {
            int t = order[j];
            order[j] = order[j - 1];
            order[j - 1] = t;
        }
    int64_t below = 0; /* the largest offset the dims so far reach */
    for (int i = 0; i < n; i++) {
        int d = order[i];
        if (strides[d] <= below) return false;
        below += (shape[d] - 1) * strides[d];
    }
    return true;
}

/* Whether like[0..n) are disjoint pieces of one storage at offsets o + i·delta with equal shapes,
 * dtypes and non-negative strides: every dim either stays inside one piece's window [0, delta)
 * ("inner": the dims of the split one) or steps by multiples of n·delta ("outer": the dims
 * around it), so piece i's elements are exactly those at o + i·delta + [0, delta) modulo
 * n·delta. *delta: the step between pieces (> 0). */
static bool split_pieces(int n, remat_tensor *const *like, int64_t *delta) {
    const remat_tensor *a = like[0];
    if (n < 2 || !a || a->ndim == 0) return false;
    for (int i = 1; i < n; i++) {
        const remat_tensor *b = like[i];
        if (!b || b->storage != a->storage || b->dtype != a->dtype || b->ndim != a->ndim ||
            memcmp(b->shape, a->shape, sizeof(int64_t) * (size_t)a->ndim) != 0 ||
            memcmp(b->strides, a->strides, sizeof(int64_t) * (size_t)a->ndim) != 0)
            return false;
    }
    int64_t d0 = like[1]->offset - a->offset;
    if (d0 <= 0) return false;
    for (int i = 2; i < n; i++)
        if (like[i]->offset - like[i - 1]->offset != d0) return false;
    if (!non_overlapping(a->ndim, a->shape, a->strides)) return false;
    int64_t inner = 0, period = (int64_t)n * d0;
    for (int d = 0; d < a->ndim; d++) {
        if (a->strides[d] < 0) return false;
        if (a->shape[d] <= 1) continue;
        if (a->strides[d] % period == 0) continue;  /* outer */
        inner += (a->shape[d] - 1) * a->strides[d]; /* inner: must stay below delta */
    }
    if (inner >= d0) return false;
    *delta = d0;
    return true;
}

remat_status rm_new_grads_like_pieces(remat_tensor **outs, int n, remat_tensor *const *like,
                                      remat_dtype dtype, remat_device device, bool *shared) {
    *shared = false;
    int64_t delta = 0;
    if (!split_pieces(n, like, &delta) || view_span(like[0]) == 0) return REMAT_OK;
    const remat_tensor *a = like[0];
    int64_t span = (int64_t)(n - 1) * delta + view_span(a);
    remat_tensor *buf = NULL;
    int rc = rm_new_output(&buf, 1, &span, dtype, device);
    if (rc) return rc;
    for (int i = 0; i < n && !rc; i++) {
        outs[i] =
            rm_tensor_alloc(buf->storage, (int64_t)i * delta, a->ndim, a->shape, a->strides, dtype);
        if (!outs[i]) rc = rm_err(REMAT_ENOMEM, "out of host memory for a tensor header");
        else outs[i]->is_view = true;
    }
    rm_release(buf);
    if (rc) {
        for (int i = 0; i < n; i++) rm_release_p(&outs[i]);
        return rc;
    }
    *shared = true;
    return REMAT_OK;
}

remat_status rm_pieces_whole(remat_tensor **out, int n, remat_tensor *const *pieces, int ndim,
                             const int64_t *shape, int dim, int64_t split_size) {
    *out = NULL;
    if (n < 1 || !pieces[0] || !rm_ptr(pieces[0])) return REMAT_OK;
    int64_t strides[REMAT_MAX_DIMS];
    rm_contiguous_strides(ndim, shape, strides);
    const remat_tensor *a = pieces[0];
    const int64_t base = a->offset;
    for (int k = 0; k < n; k++) {
        const remat_tensor *p = pieces[k];
        if (!p || p->storage != a->storage || p->dtype != a->dtype || p->ndim != ndim)
            return REMAT_OK;
        int64_t lo = (int64_t)k * split_size;
        int64_t len = shape[dim] - lo < split_size ? shape[dim] - lo : split_size;
        for (int d = 0; d < ndim; d++) {
            if (p->shape[d] != (d == dim ? len : shape[d])) return REMAT_OK;
            if (p->shape[d] > 1 && p->strides[d] != strides[d]) return REMAT_OK;
        }
        if (p->offset != base + lo * strides[dim]) return REMAT_OK;
    }
    /* the pieces tile [base, base + numel): the whole is inside the storage they share */
    remat_tensor *w = rm_tensor_alloc(a->storage, base, ndim, shape, strides, a->dtype);
    if (!w) return rm_err(REMAT_ENOMEM, "out of host memory for a tensor header");
    w->is_view = true;
    *out = w;
    return REMAT_OK;
}
