/* src/ops/shape.c — views and shape ops: reshape/view, transpose/permute,
 * slice, expand, (un)squeeze, contiguous.
 *
 * Views allocate nothing: infer describes the output as a view of the
 * input's storage (RM_OUT_VIEW: shape, strides, offset) and the driver
 * makes the header, so writes through one are seen through the other and
 * the version counter (which lives in the storage) is shared. Views are
 * fine in skip mode for that reason: a meta input gives a meta view, and
 * they need no kernel on any device. reshape and contiguous copy when no
 * view can do (the COPY kernel).
 *
 * Backward of a view op is another shape op on the gradient (reshape back,
 * transpose back, sum over expanded dims, scatter into zeros for slice).
 * Backward functions run with scopes suspended and grad mode off, so they
 * may call the public ops and get plain references. */
#include <stdlib.h>
#include <string.h>

#include "op.h"

/* How a shape op's gradient goes back to its input's shape (shape_backward). */
typedef enum shape_undo {
    UNDO_RESHAPE,   /* reshape, view, (un)squeeze: reshaped to the input's shape */
    UNDO_TRANSPOSE, /* transpose: the same transpose */
    UNDO_PERMUTE,   /* permute: the inverse permutation */
    UNDO_SUM,       /* expand: summed over the expanded dims */
    UNDO_NONE,      /* contiguous (when it copied): g itself */
} shape_undo;

/* A shape op's parameters: the call's arguments, then what its backward
 * needs (fill_ctx records the input's shape and the normalised dims; no
 * tensor is saved). */
typedef struct shape_args {
    int ndim;                      /* reshape/view/expand: target dims; permute: perm's length */
    bool given;                    /* the shape / perm argument was not NULL */
    int64_t shape[REMAT_MAX_DIMS]; /* reshape, view, expand */
    int perm[REMAT_MAX_DIMS];      /* permute */
    int dim0, dim1;                /* transpose; slice, (un)squeeze: dim0 */
    int64_t start, end, step;      /* slice */
    bool allow_copy;               /* reshape (view: false) */
    shape_undo undo;               /* set by the entry point (slice has its own backward) */
    /* recorded for backward */
    int in_ndim;
    int64_t in_shape[REMAT_MAX_DIMS];
} shape_args;

#define ARGS(c) ((const shape_args *)(c)->params)

/* A dim of an n-dim tensor that infer has validated, in [0, n). */
static int wrap_dim(int dim, int n) { return dim < 0 ? dim + n : dim; }

static void record_input(const rm_op_call *c, shape_args *ctx) {
    ctx->in_ndim = c->in[0]->ndim;
    memcpy(ctx->in_shape, c->in[0]->shape, sizeof ctx->in_shape);
}

/* An output viewing a's storage with a's offset (views that keep it). */
static void view_spec(rm_out_spec *o, const remat_tensor *a, int ndim) {
    o->kind = RM_OUT_VIEW;
    o->ndim = ndim;
    o->dtype = a->dtype;
    o->offset = a->offset;
}

/* ---- backward functions ---------------------------------------------------------- */
/* Every shape op's but slice's: the grad brought back to the input's shape
 * by the op that undoes this one (c->undo). */
static remat_status shape_backward(remat_node *node, remat_tensor *const *gout,
                                   remat_tensor **gin) {
    const shape_args *c = node->ctx;
    if (!node->next[0].node) return REMAT_OK;
    int inv[REMAT_MAX_DIMS];
    switch (c->undo) {
    case UNDO_RESHAPE: return remat_reshape(&gin[0], gout[0], c->in_ndim, c->in_shape);
    case UNDO_TRANSPOSE: return remat_transpose(&gin[0], gout[0], c->dim0, c->dim1);
    case UNDO_PERMUTE:
        for (int d = 0; d < c->in_ndim; d++) inv[c->perm[d]] = d;
        return remat_permute(&gin[0], gout[0], c->in_ndim, inv);
    case UNDO_SUM: return rm_sum_to(&gin[0], gout[0], c->in_ndim, c->in_shape);
    case UNDO_NONE: gin[0] = rm_retain(gout[0]); return REMAT_OK;
    }
    return rm_err(REMAT_ESTATE, "%s: bad shape op", node->name);
}

/* slice: a tensor of the input shape holding g at the sliced positions
 * (through a strided view with the forward's slicing) and zeros elsewhere.
 * Only the complement of the slice is zeroed, so every element is written
 * once: the rows before start, the gaps between steps, the rows after the
 * last taken one. */
static remat_status slice_scatter(const shape_args *c, remat_tensor *g, remat_tensor **gin) {
    remat_tensor *z = NULL;
    int rc = rm_new_output(&z, c->in_ndim, c->in_shape, g->dtype, g->storage->device);
    if (rc) return rc;
    if (!rm_ptr(z)) { /* skip mode: shapes only */
        gin[0] = z;
        return REMAT_OK;
    }
    int d = c->dim0;
    int64_t size = c->in_shape[d], len = g->shape[d], step = c->step, start = c->start;
    if (len == 0 || !rm_ptr(g)) { /* nothing to scatter (a meta g: as zeros) */
        rc = rm_zero_window(z, d, 0, size);
        if (rc) rm_release(z);
        else gin[0] = z;
        return rc;
    }
    rc = rm_zero_window(z, d, 0, start);
    for (int64_t k = 0; k < len && !rc; k++) {
        int64_t lo = start + k * step + 1;
        int64_t hi = k + 1 < len ? start + (k + 1) * step : size;
        rc = rm_zero_window(z, d, lo, hi);
    }
    if (!rc) {
        int64_t strides[REMAT_MAX_DIMS];
        memcpy(strides, z->strides, sizeof strides);
        int64_t offset = z->offset + start * strides[d];
        strides[d] *= step;
        rc = rm_copy_to_window(z, offset, strides, g, "SliceBackward");
    }
    if (rc) {
        rm_release(z);
        return rc;
    }
    gin[0] = z;
    return REMAT_OK;
}

static remat_status slice_backward(remat_node *node, remat_tensor *const *gout,
                                   remat_tensor **gin) {
    if (!node->next[0].node) return REMAT_OK;
    return slice_scatter(node->ctx, gout[0], gin);
}

/* slice's differentiable backward (create_graph): the same scatter as a
 * custom function whose backward is the forward slice of the incoming
 * gradient (the scatter is linear; slice is its adjoint), so it can be
 * differentiated to any order. */
static remat_status scatter_forward(remat_function_ctx *ctx, void *ud, remat_tensor *const *in,
                                    int n_in, remat_tensor **out, int n_out) {
    RM_UNUSED(ctx), RM_UNUSED(n_in), RM_UNUSED(n_out);
    return slice_scatter(ud, in[0], out);
}

static remat_status scatter_backward(remat_function_ctx *ctx, void *ud, remat_tensor *const *gout,
                                     int n_out, remat_tensor **gin, int n_in) {
    RM_UNUSED(ctx), RM_UNUSED(n_out), RM_UNUSED(n_in);
    const shape_args *c = ud;
    if (!gout[0]) return REMAT_OK;
    const int64_t len = c->end; /* the slice's length along dim0 (slice_backward_diff) */
    return remat_slice(&gin[0], gout[0], c->dim0, c->start, c->start + (len - 1) * c->step + 1,
                       c->step);
}

static remat_status slice_backward_diff(remat_node *node, remat_tensor *const *gout,
                                        remat_tensor **gin) {
    if (!node->next[0].node) return REMAT_OK;
    shape_args *ud = malloc(sizeof *ud);
    if (!ud) return rm_err(REMAT_ENOMEM, "SliceBackward: out of memory");
    *ud = *(const shape_args *)node->ctx;
    ud->end = gout[0]->shape[ud->dim0]; /* reused: the slice's length */
    static const remat_function_def def = {.name = "SliceBackwardBackward",
                                           .forward = scatter_forward,
                                           .backward = scatter_backward,
                                           .destroy = free};
    return remat_function_apply(&def, ud, 1, gout, 1, gin);
}

/* ---- reshape / view ---------------------------------------------------------------- */
/* Validates a requested shape (one -1 allowed) against numel and writes the
 * resolved shape. */
static remat_status infer_shape(const char *call, const remat_tensor *a, int ndim,
                                const int64_t *shape, int64_t *resolved) {
    char b1[200], b2[160];
    if (ndim < 0 || ndim > REMAT_MAX_DIMS)
        return rm_err(REMAT_EINVAL, "%s: ndim %d out of range (0 to %d)", call, ndim,
                      REMAT_MAX_DIMS);
    if (ndim > 0 && !shape)
        return rm_err(REMAT_EINVAL, "%s: shape is NULL with ndim %d", call, ndim);
    int infer = -1;
    int64_t known = 1;
    for (int d = 0; d < ndim; d++) {
        if (shape[d] == -1) {
            if (infer >= 0)
                return rm_err(REMAT_EINVAL, "%s: only one dimension can be -1, got shape %s", call,
                              rm_shape_str(ndim, shape, b2, sizeof b2));
            infer = d;
        } else if (shape[d] < 0) {
            return rm_err(REMAT_EINVAL, "%s: invalid size %lld in dim %d of shape %s", call,
                          (long long)shape[d], d, rm_shape_str(ndim, shape, b2, sizeof b2));
        }
        resolved[d] = infer == d ? 1 : shape[d];
    }
    int rc = rm_check_size(call, ndim, resolved, a->dtype, &known); /* known dims only */
    if (rc) return rc;
    if (infer >= 0) resolved[infer] = -1;
    int64_t numel = remat_numel(a);
    if (infer >= 0) {
        if (known == 0) {
            return rm_err(REMAT_ESHAPE,
                          "%s: cannot reshape %s into shape %s: the -1 dimension could be any "
                          "size because the other dims have 0 elements",
                          call, rm_tensor_str(a, b1, sizeof b1),
                          rm_shape_str(ndim, shape, b2, sizeof b2));
        }
        if (numel % known == 0) resolved[infer] = numel / known;
        else known = -1; /* forces the mismatch error below */
    }
    if ((infer >= 0 && known < 0) || (infer < 0 && known != numel))
        return rm_err(REMAT_ESHAPE, "%s: shape %s is invalid for input %s of %lld elements", call,
                      rm_shape_str(ndim, shape, b2, sizeof b2), rm_tensor_str(a, b1, sizeof b1),
                      (long long)numel);
    return REMAT_OK;
}

/* Strides that let (ndim, shape) view memory laid out as (a->shape,
 * a->strides), or false when the new dims would straddle non-mergeable old
 * dims (PyTorch's computeStride): old dims are grouped into maximal chunks
 * that are contiguous with each other; each chunk must be split exactly by
 * consecutive new dims, which then get strides derived from the chunk's
 * innermost stride. */
static bool compute_view_strides(const remat_tensor *a, int ndim, const int64_t *shape,
                                 int64_t *strides) {
    const int64_t *os = a->shape, *ost = a->strides;
    int ond = a->ndim;
    if (ond == 0) {
        for (int d = 0; d < ndim; d++) strides[d] = 1;
        return true;
    }
    int64_t numel = remat_numel(a);
    if (numel == 0) {
        if (ond == ndim && memcmp(os, shape, sizeof(int64_t) * (size_t)ndim) == 0) {
            memcpy(strides, ost, sizeof(int64_t) * (size_t)ndim);
            return true;
        }
        /* nothing is addressed: any strides do; use contiguous ones */
        rm_contiguous_strides(ndim, shape, strides);
        return true;
    }
    int view_d = ndim - 1;
    int64_t chunk_base_stride = ost[ond - 1];
    int64_t tensor_numel = 1, view_numel = 1;
    for (int td = ond - 1; td >= 0; td--) {
        tensor_numel *= os[td];
        /* end of a chunk: first dim, or the next-outer dim is not contiguous
         * with this chunk */
        if (td == 0 || (os[td - 1] != 1 && ost[td - 1] != tensor_numel * chunk_base_stride)) {
            while (view_d >= 0 && (view_numel < tensor_numel || shape[view_d] == 1)) {
                strides[view_d] = view_numel * chunk_base_stride;
                view_numel *= shape[view_d];
                view_d--;
            }
            if (view_numel != tensor_numel) return false;
            if (td > 0) {
                chunk_base_stride = ost[td - 1];
                tensor_numel = 1;
                view_numel = 1;
            }
        }
    }
    return view_d == -1;
}

/* ---- reshape / view ------------------------------------------------------------------------ */
static remat_status infer_reshape(const rm_op_call *c, rm_out_spec *o) {
    const shape_args *p = ARGS(c);
    const char *call = c->op->name;
    remat_tensor *a = c->in[0];
    int64_t rs[REMAT_MAX_DIMS] = {0};
    int rc = infer_shape(call, a, p->ndim, p->given ? p->shape : NULL, rs);
    if (rc) return rc;
    view_spec(o, a, p->ndim);
    memcpy(o->shape, rs, sizeof rs);
    if (compute_view_strides(a, p->ndim, rs, o->strides)) return REMAT_OK;
    if (!p->allow_copy) {
        char b1[200], b2[160], b3[160];
        return rm_err(REMAT_ESHAPE,
                      "%s: cannot view %s (strides %s) as shape %s: the view size is not "
                      "compatible with the input's size and stride (at least one dimension spans "
                      "across two contiguous subspaces); use remat_reshape instead (it copies)",
                      call, rm_tensor_str(a, b1, sizeof b1),
                      rm_shape_str(a->ndim, a->strides, b3, sizeof b3),
                      rm_shape_str(p->ndim, rs, b2, sizeof b2));
    }
    /* a contiguous copy with the new shape: row-major order is preserved */
    if (!rm_kernel_lookup(RM_K_COPY, a->storage->device.type, a->dtype))
        return rm_check_host(call, a);
    o->kind = RM_OUT_NEW;
    o->node_name = "UnsafeViewBackward";
    return REMAT_OK;
}

static void fill_input_shape(const rm_op_call *c, void *ctx) { record_input(c, ctx); }

/* ---- transpose / permute ------------------------------------------------------------------------ */
/* The view of a whose dim d is a's dim perm[d] (a permutation of 0..ndim-1). */
static void permuted_view(rm_out_spec *o, const remat_tensor *a, const int *perm, int ndim) {
    view_spec(o, a, ndim);
    for (int d = 0; d < ndim; d++) {
        o->shape[d] = a->shape[perm[d]];
        o->strides[d] = a->strides[perm[d]];
    }
}

static remat_status infer_transpose(const rm_op_call *c, rm_out_spec *o) {
    const shape_args *p = ARGS(c);
    remat_tensor *a = c->in[0];
    int d0, d1, rc;
    if ((rc = rm_norm_dim(c->op->name, p->dim0, a->ndim, &d0))) return rc;
    if ((rc = rm_norm_dim(c->op->name, p->dim1, a->ndim, &d1))) return rc;
    int perm[REMAT_MAX_DIMS];
    for (int d = 0; d < a->ndim; d++) perm[d] = d;
    if (a->ndim > 0) {
        perm[d0] = d1;
        perm[d1] = d0;
    }
    permuted_view(o, a, perm, a->ndim);
    return REMAT_OK;
}

static void fill_transpose(const rm_op_call *c, void *ctx) {
    shape_args *p = ctx;
    record_input(c, p);
    int n = c->in[0]->ndim == 0 ? 1 : c->in[0]->ndim; /* validated by infer */
    p->dim0 = wrap_dim(p->dim0, n);
    p->dim1 = wrap_dim(p->dim1, n);
}

static remat_status infer_permute(const rm_op_call *c, rm_out_spec *o) {
    const shape_args *p = ARGS(c);
    const char *call = c->op->name;
    remat_tensor *a = c->in[0];
    char b[200];
    int ndim = p->ndim;
    if (ndim != a->ndim)
        return rm_err(REMAT_EINVAL, "%s: perm has %d dims but input %s has %d", call, ndim,
                      rm_tensor_str(a, b, sizeof b), a->ndim);
    if (ndim > 0 && !p->given) return rm_err(REMAT_EINVAL, "%s: perm is NULL", call);
    bool seen[REMAT_MAX_DIMS] = {false};
    int perm[REMAT_MAX_DIMS];
    for (int d = 0; d < ndim; d++) {
        int rc = rm_norm_dim(call, p->perm[d], ndim, &perm[d]);
        if (rc) return rc;
        if (seen[perm[d]])
            return rm_err(REMAT_EINVAL,
                          "%s: perm is not a permutation: dim %d appears twice "
                          "(input %s)",
                          call, perm[d], rm_tensor_str(a, b, sizeof b));
        seen[perm[d]] = true;
    }
    permuted_view(o, a, perm, ndim);
    return REMAT_OK;
}

static void fill_permute(const rm_op_call *c, void *ctx) {
    shape_args *p = ctx;
    record_input(c, p);
    for (int d = 0; d < p->ndim; d++) p->perm[d] = wrap_dim(p->perm[d], p->ndim);
}

/* ---- slice ------------------------------------------------------------------------------------------ */
/* Python semantics: negative counts from the end, then clamp. Returns the
 * slice's length and sets *start to its first index (0 when empty). */
static int64_t slice_range(int64_t size, int64_t *start, int64_t end, int64_t step) {
    int64_t s = *start;
    if (s < 0) s += size;
    if (end < 0) end += size;
    if (s < 0) s = 0;
    if (s > size) s = size;
    if (end < s) end = s;
    if (end > size) end = size;
    int64_t len = end > s ? 1 + (end - s - 1) / step : 0; /* no overflow for any step */
    *start = len > 0 ? s : 0;
    return len;
}

static remat_status infer_slice(const rm_op_call *c, rm_out_spec *o) {
    const shape_args *p = ARGS(c);
    const char *call = c->op->name;
    remat_tensor *a = c->in[0];
    char b[200];
    if (a->ndim == 0)
        return rm_err(REMAT_EINVAL, "%s: cannot slice a 0-dim tensor %s", call,
                      rm_tensor_str(a, b, sizeof b));
    int d, rc;
    if ((rc = rm_norm_dim(call, p->dim0, a->ndim, &d))) return rc;
    if (p->step <= 0)
        return rm_err(REMAT_EINVAL, "%s: step must be positive, got %lld", call,
                      (long long)p->step);
    int64_t start = p->start, len = slice_range(a->shape[d], &start, p->end, p->step);
    view_spec(o, a, a->ndim);
    memcpy(o->shape, a->shape, sizeof o->shape);
    memcpy(o->strides, a->strides, sizeof o->strides);
    o->shape[d] = len;
    /* with 2+ elements step < size, so the stride stays within the storage's span */
    o->strides[d] = len > 1 ? a->strides[d] * p->step : a->strides[d];
    /* an empty slice addresses nothing: keep the offset in range anyway */
    o->offset = a->offset + start * a->strides[d];
    return REMAT_OK;
}

static void fill_slice(const rm_op_call *c, void *ctx) {
    shape_args *p = ctx;
    record_input(c, p);
    p->dim0 = wrap_dim(p->dim0, c->in[0]->ndim);
    slice_range(p->in_shape[p->dim0], &p->start, p->end, p->step);
}

/* ---- expand ------------------------------------------------------------------------------------------ */
static remat_status infer_expand(const rm_op_call *c, rm_out_spec *o) {
    const shape_args *p = ARGS(c);
    const char *call = c->op->name;
    remat_tensor *a = c->in[0];
    char b1[200], b2[160];
    int ndim = p->ndim;
    if (ndim < a->ndim || ndim > REMAT_MAX_DIMS)
        return rm_err(REMAT_EINVAL, "%s: cannot expand %s to %d dims (need %d to %d)", call,
                      rm_tensor_str(a, b1, sizeof b1), ndim, a->ndim, REMAT_MAX_DIMS);
    if (ndim > 0 && !p->given) return rm_err(REMAT_EINVAL, "%s: shape is NULL", call);
    const int64_t *shape = p->shape;
    int64_t *sh = o->shape, *st = o->strides;
    int lead = ndim - a->ndim;
    for (int i = 0; i < ndim; i++) {
        int j = i - lead;
        int64_t want = shape[i];
        if (j < 0) {
            if (want < 0)
                return rm_err(REMAT_EINVAL,
                              "%s: size %lld is not allowed in new leading dim %d "
                              "(shape %s)",
                              call, (long long)want, i, rm_shape_str(ndim, shape, b2, sizeof b2));
            sh[i] = want;
            st[i] = 0;
        } else if (want == -1 || want == a->shape[j]) {
            sh[i] = a->shape[j];
            st[i] = a->strides[j];
        } else if (want < 0) {
            return rm_err(REMAT_EINVAL, "%s: invalid size %lld in dim %d (shape %s)", call,
                          (long long)want, i, rm_shape_str(ndim, shape, b2, sizeof b2));
        } else if (a->shape[j] == 1) {
            sh[i] = want;
            st[i] = 0; /* every index reads the one element */
        } else {
            return rm_err(REMAT_ESHAPE,
                          "%s: cannot expand %s to %s: dim %d has size %lld, "
                          "which is not 1",
                          call, rm_tensor_str(a, b1, sizeof b1),
                          rm_shape_str(ndim, shape, b2, sizeof b2), j, (long long)a->shape[j]);
        }
    }
    int rc = rm_check_size(call, ndim, sh, a->dtype, NULL);
    if (rc) return rc;
    view_spec(o, a, ndim);
    return REMAT_OK;
}

/* ---- squeeze / unsqueeze ------------------------------------------------------------------------------ */
static remat_status infer_unsqueeze(const rm_op_call *c, rm_out_spec *o) {
    const char *call = c->op->name;
    remat_tensor *a = c->in[0];
    char b[200];
    if (a->ndim >= REMAT_MAX_DIMS)
        return rm_err(REMAT_EINVAL, "%s: %s already has the maximum of %d dims", call,
                      rm_tensor_str(a, b, sizeof b), REMAT_MAX_DIMS);
    int d;
    int rc = rm_norm_dim(call, ARGS(c)->dim0, a->ndim + 1, &d);
    if (rc) return rc;
    view_spec(o, a, a->ndim + 1);
    for (int i = 0, j = 0; i <= a->ndim; i++) {
        if (i == d) {
            o->shape[i] = 1;
            /* any stride works for a size-1 dim; this one keeps a contiguous
             * input contiguous (as PyTorch) */
            o->strides[i] = d < a->ndim ? a->shape[d] * a->strides[d] : 1;
        } else {
            o->shape[i] = a->shape[j];
            o->strides[i] = a->strides[j];
            j++;
        }
    }
    return REMAT_OK;
}

static remat_status infer_squeeze(const rm_op_call *c, rm_out_spec *o) {
    remat_tensor *a = c->in[0];
    int d;
    int rc = rm_norm_dim(c->op->name, ARGS(c)->dim0, a->ndim, &d);
    if (rc) return rc;
    int nd = 0;
    for (int i = 0; i < a->ndim; i++) {
        if (i == d && a->shape[i] == 1) continue; /* size != 1: unchanged, as PyTorch */
        o->shape[nd] = a->shape[i];
        o->strides[nd] = a->strides[i];
        nd++;
    }
    view_spec(o, a, nd);
    return REMAT_OK;
}

/* ---- contiguous ------------------------------------------------------------------------------------------ */
static remat_status infer_contiguous(const rm_op_call *c, rm_out_spec *o) {
    remat_tensor *a = c->in[0];
    o->ndim = a->ndim;
    memcpy(o->shape, a->shape, sizeof o->shape);
    o->dtype = a->dtype;
    if (remat_is_contiguous(a)) {
        o->kind = RM_OUT_INPUT;
        return REMAT_OK;
    }
    if (!rm_kernel_lookup(RM_K_COPY, a->storage->device.type, a->dtype))
        return rm_check_host(c->op->name, a);
    return REMAT_OK;
}

/* ---- descriptors and entry points ------------------------------------------------------------------------ */
/* The backward of every shape op but slice is made of public shape ops: it
 * is its own differentiable backward. */
#define SHAPE_OP(sym, call, node, infer_fn, fill_fn)                                               \
    const rm_op_desc sym =                                                                         \
        RM_OP_DESC(call, node, .n_in = 1, .n_out = 1, .kernel = RM_K_COPY,                         \
                   .params_size = sizeof(shape_args), .infer = infer_fn, .fill_ctx = fill_fn,      \
                   .backward = shape_backward, .backward_diff = shape_backward)

SHAPE_OP(rm_op_reshape, "remat_reshape", "ViewBackward", infer_reshape, fill_input_shape);
SHAPE_OP(rm_op_view, "remat_view", "ViewBackward", infer_reshape, fill_input_shape);
SHAPE_OP(rm_op_transpose, "remat_transpose", "TransposeBackward", infer_transpose, fill_transpose);
SHAPE_OP(rm_op_permute, "remat_permute", "PermuteBackward", infer_permute, fill_permute);
SHAPE_OP(rm_op_expand, "remat_expand", "ExpandBackward", infer_expand, fill_input_shape);
SHAPE_OP(rm_op_unsqueeze, "remat_unsqueeze", "UnsqueezeBackward", infer_unsqueeze,
         fill_input_shape);
SHAPE_OP(rm_op_squeeze, "remat_squeeze", "SqueezeBackward", infer_squeeze, fill_input_shape);
SHAPE_OP(rm_op_contiguous, "remat_contiguous", "CloneBackward", infer_contiguous, NULL);
const rm_op_desc rm_op_slice =
    RM_OP_DESC("remat_slice", "SliceBackward", .n_in = 1, .n_out = 1, .kernel = RM_K_COPY,
               .params_size = sizeof(shape_args), .infer = infer_slice, .fill_ctx = fill_slice,
               .backward = slice_backward, .backward_diff = slice_backward_diff);

static remat_status shape_op(const rm_op_desc *d, remat_tensor **out, remat_tensor *a,
                             const shape_args *p, void *site) {
    remat_tensor *in[1] = {a};
    return rm_dispatch(d, out, in, p, site);
}

/* A target shape argument, copied when it can be read. */
static void take_shape(shape_args *p, int ndim, const int64_t *shape) {
    p->ndim = ndim;
    p->given = shape != NULL;
    if (shape && ndim > 0 && ndim <= REMAT_MAX_DIMS)
        memcpy(p->shape, shape, sizeof(int64_t) * (size_t)ndim);
}

remat_status remat_reshape(remat_tensor **out, remat_tensor *a, int ndim, const int64_t *shape) {
    shape_args p = {.allow_copy = true, .undo = UNDO_RESHAPE};
    take_shape(&p, ndim, shape);
    return shape_op(&rm_op_reshape, out, a, &p, RM_OP_SITE());
}

remat_status remat_view(remat_tensor **out, remat_tensor *a, int ndim, const int64_t *shape) {
    shape_args p = {.allow_copy = false, .undo = UNDO_RESHAPE};
    take_shape(&p, ndim, shape);
    return shape_op(&rm_op_view, out, a, &p, RM_OP_SITE());
}

remat_status remat_transpose(remat_tensor **out, remat_tensor *a, int dim0, int dim1) {
    shape_args p = {.dim0 = dim0, .dim1 = dim1, .undo = UNDO_TRANSPOSE};
    return shape_op(&rm_op_transpose, out, a, &p, RM_OP_SITE());
}

remat_status remat_permute(remat_tensor **out, remat_tensor *a, int ndim, const int *perm) {
    shape_args p = {.ndim = ndim, .given = perm != NULL, .undo = UNDO_PERMUTE};
    if (perm && ndim > 0 && ndim <= REMAT_MAX_DIMS)
        memcpy(p.perm, perm, sizeof(int) * (size_t)ndim);
    return shape_op(&rm_op_permute, out, a, &p, RM_OP_SITE());
}

remat_status remat_slice(remat_tensor **out, remat_tensor *a, int dim, int64_t start, int64_t end,
                         int64_t step) {
    shape_args p = {.dim0 = dim, .start = start, .end = end, .step = step};
    return shape_op(&rm_op_slice, out, a, &p, RM_OP_SITE());
}

remat_status remat_expand(remat_tensor **out, remat_tensor *a, int ndim, const int64_t *shape) {
    shape_args p = {.undo = UNDO_SUM};
    take_shape(&p, ndim, shape);
    return shape_op(&rm_op_expand, out, a, &p, RM_OP_SITE());
}

remat_status remat_unsqueeze(remat_tensor **out, remat_tensor *a, int dim) {
    shape_args p = {.dim0 = dim, .undo = UNDO_RESHAPE};
    return shape_op(&rm_op_unsqueeze, out, a, &p, RM_OP_SITE());
}

remat_status remat_squeeze(remat_tensor **out, remat_tensor *a, int dim) {
    shape_args p = {.dim0 = dim, .undo = UNDO_RESHAPE};
    return shape_op(&rm_op_squeeze, out, a, &p, RM_OP_SITE());
}

remat_status remat_contiguous(remat_tensor **out, remat_tensor *a) {
    shape_args p = {.undo = UNDO_NONE};
    return shape_op(&rm_op_contiguous, out, a, &p, RM_OP_SITE());
}
