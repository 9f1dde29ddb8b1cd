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
#include <stddef.h>
#include <string.h>

#include "op.h"

/* ---- cat ---------------------------------------------------------------------------- */
/* The parameters (n and dim as given; d normalised by the check) and, in
 * the node's ctx, each input's extent along d. */
typedef struct cat_ctx {
    int n;
    int dim, d;
    bool no_list; /* tensors was NULL */
    int64_t sizes[];
} cat_ctx;

static remat_status cat_check(const rm_op_call *c) {
    const char *call = c->op->name;
    cat_ctx *p = (cat_ctx *)c->params; /* the public function's, writable: d */
    const int n = p->n;
    remat_tensor *const *tensors = c->in;
    if (n < 1 || p->no_list)
        return rm_err(REMAT_EINVAL, "%s: need at least one tensor (got n = %d%s)", call, n,
                      p->no_list ? ", tensors NULL" : "");
    for (int i = 0; i < n; i++)
        if (!tensors[i]) return rm_err(REMAT_EINVAL, "%s: tensors[%d] is NULL", call, i);
    remat_tensor *t0 = tensors[0];
    char b1[200], b2[200];
    if (t0->ndim == 0)
        return rm_err(REMAT_EINVAL,
                      "%s: zero-dimensional tensor tensors[0] %s cannot be "
                      "concatenated",
                      call, rm_tensor_str(t0, b1, sizeof b1));
    int rc = rm_norm_dim(call, p->dim, t0->ndim, &p->d);
    if (rc) return rc;
    for (int i = 0; i < n; i++) {
        remat_tensor *t = tensors[i];
        if ((rc = rm_check_same_dtype(call, t0, t))) return rc;
        if ((rc = rm_check_same_device(call, t0, t))) return rc;
        bool ok = t->ndim == t0->ndim;
        for (int k = 0; ok && k < t->ndim; k++) ok = k == p->d || t->shape[k] == t0->shape[k];
        if (!ok)
            return rm_err(REMAT_ESHAPE,
                          "%s: tensors[%d] %s does not match tensors[0] %s in the "
                          "dims other than dim %d",
                          call, i, rm_tensor_str(t, b1, sizeof b1),
                          rm_tensor_str(t0, b2, sizeof b2), p->d);
    }
    return REMAT_OK;
}

/* y: tensors[0]'s shape with the sum of the extents along d. */
static remat_status cat_infer(const rm_op_call *c, rm_out_spec *out) {
    const int d = ((const cat_ctx *)c->params)->d;
    out[0].ndim = c->in[0]->ndim;
    memcpy(out[0].shape, c->in[0]->shape, sizeof out[0].shape);
    out[0].shape[d] = 0;
    for (int i = 0; i < c->n_in; i++) out[0].shape[d] += c->in[i]->shape[d];
    return REMAT_OK;
}

/* The copy kernel once per input, into window i of y: y's strides, input
 * i's shape, offset off_i along d. */
static remat_status cat_run(rm_op_call *c, rm_kernel_fn copy) {
    const int d = ((const cat_ctx *)c->params)->d;
    remat_tensor *y = c->out[0];
    int64_t off = 0;
    int rc = REMAT_OK;
    for (int i = 0; i < c->n_in && rc == REMAT_OK; i++) {
        remat_tensor *t = c->in[i];
        remat_tensor *win = rm_tensor_alloc(y->storage, y->offset + off * y->strides[d], y->ndim,
                                            t->shape, y->strides, y->dtype);
        if (!win) return rm_err(REMAT_ENOMEM, "out of memory creating a window");
        rm_kargs k = {.in = {win, t}, .out = {win}};
        if (rm_kargs_have_data(&k)) rc = copy(&k);
        rm_release(win);
        off += t->shape[d];
    }
    return rc;
}

static void cat_fill_ctx(const rm_op_call *c, void *ctx) {
    cat_ctx *cx = ctx;
    for (int i = 0; i < c->n_in; i++) cx->sizes[i] = c->in[i]->shape[cx->d];
}

/* y is (..., sum sizes, ...); input i gets y[..., off_i : off_i + size_i, ...]. */
static remat_status cat_backward(remat_node *node, remat_tensor *const *gout, remat_tensor **gin) {
    cat_ctx *c = node->ctx;
    int64_t off = 0;
    for (int i = 0; i < c->n; i++) {
        if (node->next[i].node) {
            int rc = remat_slice(&gin[i], gout[0], c->d, off, off + c->sizes[i], 1);
            if (rc) return rc; /* the engine releases the grads already written */
        }
        off += c->sizes[i];
    }
    return REMAT_OK;
}

const rm_op_desc rm_op_cat = RM_OP_DESC(
    "remat_cat", "CatBackward", .n_in = 1 /* at least */, .n_out = 1,
    .flags = RM_OPF_OWN_CHECKS | RM_OPF_VARIADIC, .kernel = RM_K_COPY_INTO,
    .params_size = sizeof(cat_ctx), .ctx_per_in = sizeof(int64_t), .fill_ctx = cat_fill_ctx,
    .check = cat_check, .infer = cat_infer, .run = cat_run, .backward = cat_backward,
    .backward_diff = cat_backward /* slices of g: public ops */);

remat_status remat_cat(remat_tensor **out, int n, remat_tensor *const *tensors, int dim) {
    cat_ctx p = {.n = n, .dim = dim, .no_list = !tensors};
    /* the policy sees the tensors themselves as the inputs */
    return rm_dispatch_n(&rm_op_cat, out, NULL, n > 0 && tensors ? n : 0, tensors, &p,
                         RM_OP_SITE());
}

/* ---- split -------------------------------------------------------------------------- */
/* The parameters (dim as given, normalised by the check, and the piece
 * count it computes) and, in the node's ctx, a's shape, dtype and device
 * (SplitBackward saves no tensor). */
typedef struct split_ctx {
    bool no_outs; /* outs or n_out was NULL */
    int max_out;
    int dim_arg, dim;
    int64_t split_size;
    int count;
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
static remat_status split_backward(remat_node *node, remat_tensor *const *gout,
                                   remat_tensor **gin) {
    split_ctx *c = node->ctx;
    if (!node->next[0].node) return REMAT_OK;
    remat_tensor *z = NULL;
    /* pieces of one buffer already (an attention's q, k, v gradients): that buffer, no copies */
    int rc = rm_pieces_whole(&z, node->n_outputs, gout, c->ndim, c->shape, c->dim, c->split_size);
    if (rc) return rc;
    if (z) {
        gin[0] = z;
        return REMAT_OK;
    }
    remat_dtype dt = c->dtype;
    remat_device dev = c->device;
    bool found = false;
    for (int k = 0; k < node->n_outputs; k++) {
        if (!gout[k]) continue;
        if (!found) {
            dt = gout[k]->dtype;
            dev = gout[k]->storage->device;
            found = true;
        }
    }
    rc = rm_new_output(&z, c->ndim, c->shape, dt, dev);
    if (rc) return rc;
    if (rm_ptr(z)) { /* a meta z (skip mode): nothing to compute */
        int d = c->dim;
        int64_t size = c->shape[d];
        for (int k = 0; k < node->n_outputs && rc == REMAT_OK; k++) {
            int64_t lo = k * c->split_size;
            int64_t hi = lo + c->split_size < size ? lo + c->split_size : size;
            if (!gout[k] || !rm_ptr(gout[k])) { /* missing (or meta: as zeros) */
                rc = rm_zero_window(z, d, lo, hi);
                continue;
            }
            if (hi <= lo) continue;
            /* window k of z: z's strides, the piece's extent along d */
            rc = rm_copy_to_window(z, z->offset + lo * z->strides[d], z->strides, gout[k],
                                   "SplitBackward");
        }
    }
    if (rc) {
        rm_release(z);
        return rc;
    }
    gin[0] = z;
    return REMAT_OK;
}

static remat_status split_check(const rm_op_call *c) {
    const char *call = c->op->name;
    split_ctx *p = (split_ctx *)c->params; /* the public function's, writable: d, count */
    remat_tensor *a = c->in[0];
    if (p->no_outs) return rm_err(REMAT_EINVAL, "%s: outs and n_out must not be NULL", call);
    int rc = rm_check_tensor(call, "a", a);
    if (rc) return rc;
    char b[200];
    if (a->ndim == 0)
        return rm_err(REMAT_EINVAL, "%s: cannot split a 0-dim tensor %s", call,
                      rm_tensor_str(a, b, sizeof b));
    if ((rc = rm_norm_dim(call, p->dim_arg, a->ndim, &p->dim))) return rc;
    if (p->split_size <= 0)
        return rm_err(REMAT_EINVAL, "%s: split_size must be positive, got %lld", call,
                      (long long)p->split_size);
    int64_t size = a->shape[p->dim];
    /* an empty dim still gives one (empty) piece, as PyTorch */
    int64_t count = size == 0 ? 1 : (size + p->split_size - 1) / p->split_size;
    if (count > p->max_out)
        return rm_err(REMAT_EINVAL,
                      "%s: splitting dim %d of %s into pieces of %lld gives %lld "
                      "pieces, but max_out is %d",
                      call, p->dim, rm_tensor_str(a, b, sizeof b), (long long)p->split_size,
                      (long long)count, p->max_out);
    p->count = (int)count;
    return REMAT_OK;
}

static int split_n_outputs(const rm_op_call *c) { return ((const split_ctx *)c->params)->count; }

/* Piece k: a view of a (is_view set, so that in-place ops on it are
 * refused while it requires grad), [k*s, min((k+1)*s, size)) along dim. */
static remat_status split_infer(const rm_op_call *c, rm_out_spec *out) {
    const split_ctx *p = c->params;
    const remat_tensor *a = c->in[0];
    const int d = p->dim;
    const int64_t size = a->shape[d];
    for (int k = 0; k < p->count; k++) {
        int64_t lo = k * p->split_size;
        int64_t hi = lo + p->split_size < size ? lo + p->split_size : size;
        out[k].kind = RM_OUT_VIEW;
        out[k].ndim = a->ndim;
        memcpy(out[k].shape, a->shape, sizeof out[k].shape);
        out[k].shape[d] = hi - lo;
        memcpy(out[k].strides, a->strides, sizeof out[k].strides);
        /* an empty piece addresses nothing: keep the offset in range anyway */
        out[k].offset = a->offset + (hi > lo ? lo * a->strides[d] : 0);
    }
    return REMAT_OK;
}

static void split_fill_ctx(const rm_op_call *c, void *ctx) {
    split_ctx *cx = ctx;
    const remat_tensor *a = c->in[0];
    cx->ndim = a->ndim;
    memcpy(cx->shape, a->shape, sizeof cx->shape);
    cx->dtype = a->dtype;
    cx->device = a->storage->device;
}

/* create_graph: the pieces' gradients concatenated (the engine gives every
 * piece one, zeros where none arrived), with remat_cat: differentiable. */
static remat_status split_backward_diff(remat_node *node, remat_tensor *const *gout,
                                        remat_tensor **gin) {
    split_ctx *c = node->ctx;
    if (!node->next[0].node) return REMAT_OK;
    return remat_cat(&gin[0], node->n_outputs, gout, c->dim);
}

const rm_op_desc rm_op_split = RM_OP_DESC(
    "remat_split", "SplitBackward", .n_in = 1, .n_out = 1 /* at least */,
    .flags = RM_OPF_OWN_CHECKS, .params_size = sizeof(split_ctx), .fill_ctx = split_fill_ctx,
    .check = split_check, .n_outputs = split_n_outputs, .infer = split_infer,
    .backward = split_backward, .backward_diff = split_backward_diff);

remat_status remat_split(remat_tensor **outs, int max_out, int *n_out, remat_tensor *a,
                         int64_t split_size, int dim) {
    split_ctx p = {
        .no_outs = !outs || !n_out, .max_out = max_out, .split_size = split_size, .dim_arg = dim};
    if (n_out) *n_out = 0;
    for (int i = 0; outs && i < max_out; i++) outs[i] = NULL;
    remat_tensor *in[1] = {a};
    /* the pieces are views of a: nothing to cache or substitute */
    return rm_dispatch_n(&rm_op_split, outs, n_out, 1, in, &p, RM_OP_SITE());
}
