/* src/ops/concat.c — cat and split along a dim.
 *
 * cat copies each input into a strided window of the output (a view of
 * the output with the input's extent along dim); its backward hands every
 * input the matching slice (a view) of the output grad.
 * split makes views: piece k is a[..., k*s : (k+1)*s, ...] sharing a's
 * storage. All pieces are outputs of ONE SplitBackward node (as PyTorch's
 * SplitBackward0), whose backward allocates a's gradient once and copies
 * each piece's gradient into its window; a window whose piece got no
 * gradient is zero-filled. (One slice node per piece would build a
 * zero-padded full-size gradient per piece and leave the engine to sum
 * them: 3x the memory and traffic for the (B, T, 3C) qkv split of a GPT
 * block.) */
#include <stdlib.h>
#include <string.h>

#include "../internal.h"

typedef struct cat_ctx {
    int dim;
    int n;
    int64_t sizes[]; /* extent of each input along dim */
} cat_ctx;

/* y is (..., sum sizes, ...); input i gets y[..., off_i : off_i + size_i, ...]. */
static int cat_backward(remat_node *node, remat_tensor *const *gout, remat_tensor **gin) {
    cat_ctx *c = node->ctx;
    int64_t off = 0;
    for (int i = 0; i < c->n; i++) {
        if (node->next[i].node) {
            int rc = remat_slice(&gin[i], gout[0], c->dim, off, off + c->sizes[i], 1);
            if (rc) return rc; /* the engine releases the grads already written */
        }
        off += c->sizes[i];
    }
    return REMAT_OK;
}

static int cat_impl(remat_tensor **out, int n, remat_tensor *const *tensors, int dim) {
    const char *call = "remat_cat";
    rm_op_enter(call);
    if (!out) return rm_err(REMAT_EINVAL, "%s: out must not be NULL", call);
    *out = NULL;
    if (n < 1 || !tensors)
        return rm_err(REMAT_EINVAL, "%s: need at least one tensor (got n = %d%s)", call, n,
                      tensors ? "" : ", tensors NULL");
    for (int i = 0; i < n; i++)
        if (!tensors[i])
            return rm_err(REMAT_EINVAL, "%s: tensors[%d] is NULL", call, i);
    remat_tensor *t0 = tensors[0];
    char b1[200], b2[200];
    if (t0->ndim == 0)
        return rm_err(REMAT_EINVAL, "%s: zero-dimensional tensor tensors[0] %s cannot be "
                      "concatenated", call, rm_tensor_str(t0, b1, sizeof b1));
    int d;
    int rc = rm_norm_dim(call, dim, t0->ndim, &d);
    if (rc) return rc;
    int64_t shape[REMAT_MAX_DIMS];
    memcpy(shape, t0->shape, sizeof shape);
    shape[d] = 0;
    for (int i = 0; i < n; i++) {
        remat_tensor *t = tensors[i];
        if ((rc = rm_check_same_dtype(call, t0, t))) return rc;
        if ((rc = rm_check_same_device(call, t0, t))) return rc;
        bool ok = t->ndim == t0->ndim;
        for (int k = 0; ok && k < t->ndim; k++) ok = k == d || t->shape[k] == t0->shape[k];
        if (!ok)
            return rm_err(REMAT_ESHAPE, "%s: tensors[%d] %s does not match tensors[0] %s in the "
                          "dims other than dim %d", call, i, rm_tensor_str(t, b1, sizeof b1),
                          rm_tensor_str(t0, b2, sizeof b2), d);
        shape[d] += t->shape[d];
    }
    if ((rc = rm_check_host(call, t0))) return rc;
    remat_tensor *y;
    rc = rm_new_output(&y, t0->ndim, shape, t0->dtype, t0->storage->device);
    if (rc) return rm_err_prefix(rc, call);
    if (rm_ptr(y)) {
        /* window i of y: y's strides, input i's shape, offset off_i along d */
        int64_t off = 0;
        for (int i = 0; i < n && rc == REMAT_OK; i++) {
            remat_tensor *t = tensors[i];
            remat_tensor *win = rm_tensor_alloc(y->storage, y->offset + off * y->strides[d],
                                                y->ndim, t->shape, y->strides, y->dtype);
            if (!win) {
                rc = rm_err(REMAT_ENOMEM, "%s: out of memory", call);
                break;
            }
            if (!rm_copy_same_dtype(win, t)) rc = rm_copy_into(win, t);
            remat_release(win);
            off += t->shape[d];
        }
    }
    if (rc == REMAT_OK && rm_needs_grad(n, tensors)) {
        remat_node *node;
        rc = rm_node_new(&node, "CatBackward", cat_backward, n, tensors, 1, 0);
        if (rc == REMAT_OK) {
            cat_ctx *c = malloc(sizeof *c + sizeof(int64_t) * (size_t)n);
            if (!c) {
                rc = rm_err(REMAT_ENOMEM, "%s: out of memory", call);
            } else {
                c->dim = d;
                c->n = n;
                for (int i = 0; i < n; i++) c->sizes[i] = tensors[i]->shape[d];
                rm_node_set_ctx(node, c, NULL);
                rm_node_set_output(node, 0, y);
            }
            rm_node_release(node);
        }
    }
    if (rc) {
        remat_release(y);
        return rm_err_prefix(rc, call);
    }
    return rm_hand_out(out, y);
}

/* Split parameters (no tensors: SplitBackward saves nothing). */
typedef struct split_ctx {
    int dim;
    int64_t split_size;
    int ndim;
    int64_t shape[REMAT_MAX_DIMS]; /* a's shape */
    remat_dtype dtype;
    remat_device device;
} split_ctx;

/* a is (..., size, ...) along dim; piece k is [k*s, min((k+1)*s, size)).
 * gout[k] is piece k's gradient, or NULL when it got none: its window is
 * zero-filled. (The engine today materialises zeros for a piece without a
 * gradient instead; those are copied like any other gradient.) Every
 * element of the result is written once. */
static int split_backward(remat_node *node, remat_tensor *const *gout, remat_tensor **gin) {
    split_ctx *c = node->ctx;
    if (!node->next[0].node) return REMAT_OK;
    int rc = REMAT_OK;
    remat_dtype dt = c->dtype;
    remat_device dev = c->device;
    bool found = false;
    for (int k = 0; k < node->n_outputs; k++) {
        if (!gout[k]) continue;
        if ((rc = rm_check_host("SplitBackward", gout[k]))) return rc;
        if (!found) {
            dt = gout[k]->dtype;
            dev = gout[k]->storage->device;
            found = true;
        }
    }
    remat_tensor *z = NULL;
    rc = rm_new_output(&z, c->ndim, c->shape, dt, dev);
    if (rc) return rc;
    if (rm_ptr(z)) { /* a meta z (skip mode): nothing to compute */
        int d = c->dim;
        int64_t size = c->shape[d];
        int64_t sh[REMAT_MAX_DIMS];
        memcpy(sh, z->shape, sizeof sh);
        for (int k = 0; k < node->n_outputs && rc == REMAT_OK; k++) {
            int64_t lo = k * c->split_size;
            int64_t hi = lo + c->split_size < size ? lo + c->split_size : size;
            if (!gout[k] || !rm_ptr(gout[k])) { /* missing (or meta: as zeros) */
                rm_zero_dim_range(z, d, lo, hi);
                continue;
            }
            if (hi <= lo) continue;
            /* window k of z: z's strides, the piece's extent along d */
            sh[d] = hi - lo;
            remat_tensor *win = rm_tensor_alloc(z->storage, z->offset + lo * z->strides[d],
                                                z->ndim, sh, z->strides, z->dtype);
            if (!win) {
                rc = rm_err(REMAT_ENOMEM, "SplitBackward: out of memory");
                break;
            }
            if (!rm_copy_same_dtype(win, gout[k])) rc = rm_copy_into(win, gout[k]);
            remat_release(win);
        }
    }
    if (rc) {
        remat_release(z);
        return rc;
    }
    gin[0] = z;
    return REMAT_OK;
}

static int split_impl(remat_tensor **outs, int max_out, int *n_out, remat_tensor *a,
                      int64_t split_size, int dim) {
    const char *call = "remat_split";
    rm_op_enter(call);
    if (!outs || !n_out)
        return rm_err(REMAT_EINVAL, "%s: outs and n_out must not be NULL", call);
    *n_out = 0;
    for (int i = 0; i < max_out; i++) outs[i] = NULL;
    int rc = rm_check_tensor(call, "a", a);
    if (rc) return rc;
    char b[200];
    if (a->ndim == 0)
        return rm_err(REMAT_EINVAL, "%s: cannot split a 0-dim tensor %s", call,
                      rm_tensor_str(a, b, sizeof b));
    int d;
    if ((rc = rm_norm_dim(call, dim, a->ndim, &d))) return rc;
    if (split_size <= 0)
        return rm_err(REMAT_EINVAL, "%s: split_size must be positive, got %lld", call,
                      (long long)split_size);
    int64_t size = a->shape[d];
    /* an empty dim still gives one (empty) piece, as PyTorch */
    int64_t count = size == 0 ? 1 : (size + split_size - 1) / split_size;
    if (count > max_out)
        return rm_err(REMAT_EINVAL, "%s: splitting dim %d of %s into pieces of %lld gives %lld "
                      "pieces, but max_out is %d", call, d, rm_tensor_str(a, b, sizeof b),
                      (long long)split_size, (long long)count, max_out);
    /* the pieces: views of a (new headers over a's storage, is_view set, so
     * that in-place ops on them are refused while they require grad) */
    int64_t sh[REMAT_MAX_DIMS];
    memcpy(sh, a->shape, sizeof sh);
    for (int64_t k = 0; k < count && rc == REMAT_OK; k++) {
        int64_t lo = k * split_size;
        int64_t hi = lo + split_size < size ? lo + split_size : size;
        sh[d] = hi - lo;
        /* an empty piece addresses nothing: keep the offset in range anyway */
        int64_t off = a->offset + (hi > lo ? lo * a->strides[d] : 0);
        outs[k] = rm_tensor_alloc(a->storage, off, a->ndim, sh, a->strides, a->dtype);
        if (!outs[k]) rc = rm_err(REMAT_ENOMEM, "%s: out of memory creating a view", call);
        else outs[k]->is_view = true;
    }
    if (rc == REMAT_OK && rm_needs_grad(1, &a)) {
        remat_node *node;
        rc = rm_node_new(&node, "SplitBackward", split_backward, 1, &a, (int)count, 0);
        if (rc == REMAT_OK) {
            split_ctx *c = malloc(sizeof *c);
            if (!c) {
                rc = rm_err(REMAT_ENOMEM, "%s: out of memory", call);
            } else {
                c->dim = d;
                c->split_size = split_size;
                c->ndim = a->ndim;
                memcpy(c->shape, a->shape, sizeof c->shape);
                c->dtype = a->dtype;
                c->device = a->storage->device;
                rm_node_set_ctx(node, c, NULL);
                for (int64_t k = 0; k < count; k++) rm_node_set_output(node, (int)k, outs[k]);
            }
            rm_node_release(node); /* the pieces hold it now (or it dies here) */
        }
        if (rc) rc = rm_err_prefix(rc, call);
    }
    if (rc) {
        for (int64_t k = 0; k < count; k++) remat_release_p(&outs[k]);
        return rc;
    }
    rc = rm_hand_out_n(outs, (int)count);
    *n_out = rc ? 0 : (int)count;
    return rc;
}

/* ---- public entries: interception brackets (src/dispatch/intercept.c) ---------------------- */
int remat_cat(remat_tensor **out, int n, remat_tensor *const *tensors, int dim) {
    /* the policy sees the tensors themselves as the inputs */
    RM_OP_RUN1("remat_cat", out, n > 0 && tensors ? n : 0, tensors, NULL,
               cat_impl(out, n, tensors, dim));
}

int remat_split(remat_tensor **outs, int max_out, int *n_out, remat_tensor *a, int64_t split_size,
                int dim) {
    remat_tensor *in[1] = {a};
    rm_op_frame f;
    int rc = rm_op_begin(&f, "remat_split", 1, in, RM_OP_SITE(), NULL);
    if (rc) {
        if (n_out) *n_out = 0;
        for (int i = 0; outs && i < max_out; i++) outs[i] = NULL;
        return rc;
    }
    rc = split_impl(outs, max_out, n_out, a, split_size, dim);
    /* the pieces are views of a: nothing to cache or substitute */
    rm_op_end(&f, rc, rc == REMAT_OK ? *n_out : 0, outs);
    return rc;
}
