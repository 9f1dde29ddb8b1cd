/* src/ops/shape.c — views and shape ops: reshape/view, transpose/permute,
 * slice, expand, (un)squeeze, contiguous.
 *
 * Views allocate nothing: the output is a new tensor header over the
 * input's storage (rm_tensor_alloc retains it) with its own shape, strides
 * and offset, so writes through one are seen through the other and the
 * version counter (which lives in the storage) is shared. Views are fine
 * in skip mode for that reason: a meta input gives a meta view.
 *
 * Backward of a view op is another shape op on the gradient (reshape back,
 * transpose back, sum over expanded dims, scatter into zeros for slice).
 * Backward functions run with scopes suspended and grad mode off, so they
 * may call the public ops and get plain references. */
#include <stdlib.h>
#include <string.h>

#include "../internal.h"

/* Parameters a shape op's backward needs (no tensors: those go through
 * rm_node_save, and none of these ops needs one). */
typedef struct shape_ctx {
    int ndim;                     /* input ndim */
    int64_t shape[REMAT_MAX_DIMS]; /* input shape */
    int perm[REMAT_MAX_DIMS];     /* permute: the forward permutation */
    int dim0, dim1;               /* transpose dims; slice dim */
    int64_t start, step;          /* slice */
} shape_ctx;

static void ctx_from_input(shape_ctx *c, const remat_tensor *a) {
    memset(c, 0, sizeof *c);
    c->ndim = a->ndim;
    memcpy(c->shape, a->shape, sizeof(int64_t) * (size_t)a->ndim);
}

/* A view of a's storage: new header, shared (retained) storage. */
static int make_view(remat_tensor **out, const remat_tensor *a, int64_t offset, int ndim,
                     const int64_t *shape, const int64_t *strides, const char *call) {
    remat_tensor *v = rm_tensor_alloc(a->storage, offset, ndim, shape, strides, a->dtype);
    if (!v) return rm_err(REMAT_ENOMEM, "%s: out of memory creating a view", call);
    v->is_view = true;
    *out = v;
    return REMAT_OK;
}

/* Records the graph node of a single-input shape op when a needs grad.
 * On failure y is left alone (the caller releases it). */
static int attach_node(remat_tensor *y, remat_tensor *a, const char *node_name,
                       rm_backward_fn backward, const shape_ctx *c, const char *call) {
    if (!rm_needs_grad(1, &a)) return REMAT_OK;
    remat_node *node;
    int rc = rm_node_new(&node, node_name, backward, 1, &a, 1, 0);
    if (rc) return rm_err_prefix(rc, call);
    shape_ctx *cc = malloc(sizeof *cc);
    if (!cc) {
        rm_node_release(node);
        return rm_err(REMAT_ENOMEM, "%s: out of memory", call);
    }
    *cc = *c;
    rm_node_set_ctx(node, cc, NULL);
    rm_node_set_output(node, 0, y);
    rm_node_release(node);
    return REMAT_OK;
}

/* Finishes a public op: attach the node, hand out (or clean up). */
static int finish(remat_tensor **out, remat_tensor *y, remat_tensor *a, const char *node_name,
                  rm_backward_fn backward, const shape_ctx *c, const char *call) {
    int rc = attach_node(y, a, node_name, backward, c, call);
    if (rc) {
        remat_release(y);
        return rc;
    }
    return rm_hand_out(out, y);
}

/* ---- backward functions ---------------------------------------------------------- */
/* view / reshape / squeeze / unsqueeze: the grad reshaped to the input shape. */
static int reshape_backward(remat_node *node, remat_tensor *const *gout, remat_tensor **gin) {
    shape_ctx *c = node->ctx;
    if (!node->next[0].node) return REMAT_OK;
    return remat_reshape(&gin[0], gout[0], c->ndim, c->shape);
}

static int transpose_backward(remat_node *node, remat_tensor *const *gout, remat_tensor **gin) {
    shape_ctx *c = node->ctx;
    if (!node->next[0].node) return REMAT_OK;
    return remat_transpose(&gin[0], gout[0], c->dim0, c->dim1);
}

static int permute_backward(remat_node *node, remat_tensor *const *gout, remat_tensor **gin) {
    shape_ctx *c = node->ctx;
    if (!node->next[0].node) return REMAT_OK;
    int inv[REMAT_MAX_DIMS];
    for (int d = 0; d < c->ndim; d++) inv[c->perm[d]] = d;
    return remat_permute(&gin[0], gout[0], c->ndim, inv);
}

static int expand_backward(remat_node *node, remat_tensor *const *gout, remat_tensor **gin) {
    shape_ctx *c = node->ctx;
    if (!node->next[0].node) return REMAT_OK;
    return rm_sum_to(&gin[0], gout[0], c->ndim, c->shape);
}

/* contiguous (when it copied): the copy's grad is the input's grad. */
static int identity_backward(remat_node *node, remat_tensor *const *gout, remat_tensor **gin) {
    if (!node->next[0].node) return REMAT_OK;
    gin[0] = remat_retain(gout[0]);
    return REMAT_OK;
}

/* slice: a tensor of the input shape holding g at the sliced positions
 * (through a strided view with the forward's slicing) and zeros elsewhere.
 * Only the complement of the slice is zeroed, so every element is written
 * once: the rows before start, the gaps between steps, the rows after the
 * last taken one. */
static int slice_backward(remat_node *node, remat_tensor *const *gout, remat_tensor **gin) {
    shape_ctx *c = node->ctx;
    if (!node->next[0].node) return REMAT_OK;
    remat_tensor *g = gout[0];
    int rc = rm_check_host("SliceBackward", g);
    if (rc) return rc;
    remat_tensor *z = NULL, *v = NULL;
    rc = rm_new_output(&z, c->ndim, c->shape, g->dtype, g->storage->device);
    if (rc) return rc;
    if (!rm_ptr(z)) { /* skip mode: shapes only */
        gin[0] = z;
        return REMAT_OK;
    }
    int d = c->dim0;
    int64_t size = c->shape[d], len = g->shape[d], step = c->step, start = c->start;
    if (len == 0 || !rm_ptr(g)) { /* nothing to scatter (a meta g: as zeros) */
        rm_zero_dim_range(z, d, 0, size);
        gin[0] = z;
        return REMAT_OK;
    }
    rm_zero_dim_range(z, d, 0, start);
    for (int64_t k = 0; k < len; k++) {
        int64_t lo = start + k * step + 1;
        int64_t hi = k + 1 < len ? start + (k + 1) * step : size;
        rm_zero_dim_range(z, d, lo, hi);
    }
    int64_t strides[REMAT_MAX_DIMS];
    memcpy(strides, z->strides, sizeof strides);
    int64_t offset = z->offset + start * strides[d];
    strides[d] *= step;
    rc = make_view(&v, z, offset, g->ndim, g->shape, strides, "SliceBackward");
    if (rc == REMAT_OK && !rm_copy_same_dtype(v, g)) rc = rm_copy_into(v, g);
    remat_release(v);
    if (rc) {
        remat_release(z);
        return rc;
    }
    gin[0] = z;
    return REMAT_OK;
}

/* A contiguous copy of t (new reference; t itself when already contiguous),
 * through the fast same-dtype kernel. */
static int contig_copy(remat_tensor **out, remat_tensor *t) {
    *out = NULL;
    if (remat_is_contiguous(t)) {
        *out = remat_retain(t);
        return REMAT_OK;
    }
    remat_tensor *y = NULL;
    int rc = rm_new_output(&y, t->ndim, t->shape, t->dtype, t->storage->device);
    if (rc) return rc;
    if (!rm_copy_same_dtype(y, t)) rc = rm_copy_into(y, t);
    if (rc) {
        remat_release(y);
        return rc;
    }
    *out = y;
    return REMAT_OK;
}

/* ---- reshape / view ---------------------------------------------------------------- */
/* Validates a requested shape (one -1 allowed) against numel and writes the
 * resolved shape. */
static int infer_shape(const char *call, const remat_tensor *a, int ndim, const int64_t *shape,
                       int64_t *resolved) {
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
                return rm_err(REMAT_EINVAL, "%s: only one dimension can be -1, got shape %s",
                              call, rm_shape_str(ndim, shape, b2, sizeof b2));
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
                          "size because the other dims have 0 elements", call,
                          rm_tensor_str(a, b1, sizeof b1), rm_shape_str(ndim, shape, b2, sizeof b2));
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

/* allow_copy: reshape semantics (copy when no view is possible). */
static int reshape_impl(remat_tensor **out, remat_tensor *a, int ndim, const int64_t *shape,
                        bool allow_copy, const char *call) {
    rm_op_enter(call);
    if (!out) return rm_err(REMAT_EINVAL, "%s: out must not be NULL", call);
    *out = NULL;
    int rc = rm_check_tensor(call, "a", a);
    if (rc) return rc;
    int64_t rs[REMAT_MAX_DIMS] = {0};
    rc = infer_shape(call, a, ndim, shape, rs);
    if (rc) return rc;
    shape_ctx c;
    ctx_from_input(&c, a);
    int64_t st[REMAT_MAX_DIMS];
    remat_tensor *y = NULL;
    if (compute_view_strides(a, ndim, rs, st)) {
        rc = make_view(&y, a, a->offset, ndim, rs, st, call);
        if (rc) return rc;
        return finish(out, y, a, "ViewBackward", reshape_backward, &c, call);
    }
    if (!allow_copy) {
        char b1[200], b2[160], b3[160];
        return rm_err(REMAT_ESHAPE,
                      "%s: cannot view %s (strides %s) as shape %s: the view size is not "
                      "compatible with the input's size and stride (at least one dimension spans "
                      "across two contiguous subspaces); use remat_reshape instead (it copies)",
                      call, rm_tensor_str(a, b1, sizeof b1),
                      rm_shape_str(a->ndim, a->strides, b3, sizeof b3),
                      rm_shape_str(ndim, rs, b2, sizeof b2));
    }
    /* Copy to a contiguous tensor of the new shape: row-major order is
     * preserved, so a contiguous copy of a viewed with the new shape. */
    rc = rm_check_host(call, a);
    if (rc) return rc;
    remat_tensor *tmp = NULL;
    rc = contig_copy(&tmp, a);
    if (rc) return rm_err_prefix(rc, call);
    rm_contiguous_strides(ndim, rs, st);
    rc = make_view(&y, tmp, tmp->offset, ndim, rs, st, call);
    remat_release(tmp);
    if (rc) return rc;
    y->is_view = false; /* owns the only reference to its (fresh) storage */
    return finish(out, y, a, "UnsafeViewBackward", reshape_backward, &c, call);
}

int remat_reshape(remat_tensor **out, remat_tensor *a, int ndim, const int64_t *shape) {
    remat_tensor *in[1] = {a};
    RM_OP_RUN1("remat_reshape", out, 1, in, NULL,
               reshape_impl(out, a, ndim, shape, true, "remat_reshape"));
}

int remat_view(remat_tensor **out, remat_tensor *a, int ndim, const int64_t *shape) {
    remat_tensor *in[1] = {a};
    RM_OP_RUN1("remat_view", out, 1, in, NULL,
               reshape_impl(out, a, ndim, shape, false, "remat_view"));
}

/* ---- transpose / permute ------------------------------------------------------------- */
static int transpose_impl(remat_tensor **out, remat_tensor *a, int dim0, int dim1) {
    const char *call = "remat_transpose";
    rm_op_enter(call);
    if (!out) return rm_err(REMAT_EINVAL, "%s: out must not be NULL", call);
    *out = NULL;
    int rc = rm_check_tensor(call, "a", a);
    if (rc) return rc;
    int d0, d1;
    if ((rc = rm_norm_dim(call, dim0, a->ndim, &d0))) return rc;
    if ((rc = rm_norm_dim(call, dim1, a->ndim, &d1))) return rc;
    int64_t sh[REMAT_MAX_DIMS], st[REMAT_MAX_DIMS];
    memcpy(sh, a->shape, sizeof sh);
    memcpy(st, a->strides, sizeof st);
    if (a->ndim > 0) {
        sh[d0] = a->shape[d1];
        sh[d1] = a->shape[d0];
        st[d0] = a->strides[d1];
        st[d1] = a->strides[d0];
    }
    remat_tensor *y = NULL;
    rc = make_view(&y, a, a->offset, a->ndim, sh, st, call);
    if (rc) return rc;
    shape_ctx c;
    ctx_from_input(&c, a);
    c.dim0 = d0;
    c.dim1 = d1;
    return finish(out, y, a, "TransposeBackward", transpose_backward, &c, call);
}

static int permute_impl(remat_tensor **out, remat_tensor *a, int ndim, const int *perm) {
    const char *call = "remat_permute";
    rm_op_enter(call);
    if (!out) return rm_err(REMAT_EINVAL, "%s: out must not be NULL", call);
    *out = NULL;
    int rc = rm_check_tensor(call, "a", a);
    if (rc) return rc;
    char b[200];
    if (ndim != a->ndim)
        return rm_err(REMAT_EINVAL, "%s: perm has %d dims but input %s has %d", call, ndim,
                      rm_tensor_str(a, b, sizeof b), a->ndim);
    if (ndim > 0 && !perm) return rm_err(REMAT_EINVAL, "%s: perm is NULL", call);
    shape_ctx c;
    ctx_from_input(&c, a);
    bool seen[REMAT_MAX_DIMS] = {false};
    int64_t sh[REMAT_MAX_DIMS] = {0}, st[REMAT_MAX_DIMS] = {0};
    for (int d = 0; d < ndim; d++) {
        int p;
        rc = rm_norm_dim(call, perm[d], ndim, &p);
        if (rc) return rc;
        if (seen[p])
            return rm_err(REMAT_EINVAL, "%s: perm is not a permutation: dim %d appears twice "
                          "(input %s)", call, p, rm_tensor_str(a, b, sizeof b));
        seen[p] = true;
        c.perm[d] = p;
        sh[d] = a->shape[p];
        st[d] = a->strides[p];
    }
    remat_tensor *y = NULL;
    rc = make_view(&y, a, a->offset, ndim, sh, st, call);
    if (rc) return rc;
    return finish(out, y, a, "PermuteBackward", permute_backward, &c, call);
}

/* ---- slice ------------------------------------------------------------------------------ */
static int slice_impl(remat_tensor **out, remat_tensor *a, int dim, int64_t start, int64_t end,
                      int64_t step) {
    const char *call = "remat_slice";
    rm_op_enter(call);
    if (!out) return rm_err(REMAT_EINVAL, "%s: out must not be NULL", call);
    *out = NULL;
    int rc = rm_check_tensor(call, "a", a);
    if (rc) return rc;
    char b[200];
    if (a->ndim == 0)
        return rm_err(REMAT_EINVAL, "%s: cannot slice a 0-dim tensor %s", call,
                      rm_tensor_str(a, b, sizeof b));
    int d;
    if ((rc = rm_norm_dim(call, dim, a->ndim, &d))) return rc;
    if (step <= 0)
        return rm_err(REMAT_EINVAL, "%s: step must be positive, got %lld", call, (long long)step);
    int64_t size = a->shape[d];
    /* Python semantics: negative counts from the end, then clamp */
    if (start < 0) start += size;
    if (end < 0) end += size;
    if (start < 0) start = 0;
    if (start > size) start = size;
    if (end < start) end = start;
    if (end > size) end = size;
    int64_t len = end > start ? 1 + (end - start - 1) / step : 0; /* no overflow for any step */
    int64_t sh[REMAT_MAX_DIMS], st[REMAT_MAX_DIMS];
    memcpy(sh, a->shape, sizeof sh);
    memcpy(st, a->strides, sizeof st);
    sh[d] = len;
    /* with 2+ elements step < size, so the stride stays within the storage's span */
    st[d] = len > 1 ? a->strides[d] * step : a->strides[d];
    /* an empty slice addresses nothing: keep the offset in range anyway */
    int64_t offset = a->offset + (len > 0 ? start * a->strides[d] : 0);
    remat_tensor *y = NULL;
    rc = make_view(&y, a, offset, a->ndim, sh, st, call);
    if (rc) return rc;
    shape_ctx c;
    ctx_from_input(&c, a);
    c.dim0 = d;
    c.start = len > 0 ? start : 0;
    c.step = step;
    return finish(out, y, a, "SliceBackward", slice_backward, &c, call);
}

/* ---- expand ------------------------------------------------------------------------------- */
static int expand_impl(remat_tensor **out, remat_tensor *a, int ndim, const int64_t *shape) {
    const char *call = "remat_expand";
    rm_op_enter(call);
    if (!out) return rm_err(REMAT_EINVAL, "%s: out must not be NULL", call);
    *out = NULL;
    int rc = rm_check_tensor(call, "a", a);
    if (rc) return rc;
    char b1[200], b2[160];
    if (ndim < a->ndim || ndim > REMAT_MAX_DIMS)
        return rm_err(REMAT_EINVAL, "%s: cannot expand %s to %d dims (need %d to %d)", call,
                      rm_tensor_str(a, b1, sizeof b1), ndim, a->ndim, REMAT_MAX_DIMS);
    if (ndim > 0 && !shape) return rm_err(REMAT_EINVAL, "%s: shape is NULL", call);
    int64_t sh[REMAT_MAX_DIMS], st[REMAT_MAX_DIMS];
    int lead = ndim - a->ndim;
    for (int i = 0; i < ndim; i++) {
        int j = i - lead;
        int64_t want = shape[i];
        if (j < 0) {
            if (want < 0)
                return rm_err(REMAT_EINVAL, "%s: size %lld is not allowed in new leading dim %d "
                              "(shape %s)", call, (long long)want, i,
                              rm_shape_str(ndim, shape, b2, sizeof b2));
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
            return rm_err(REMAT_ESHAPE, "%s: cannot expand %s to %s: dim %d has size %lld, "
                          "which is not 1", call, rm_tensor_str(a, b1, sizeof b1),
                          rm_shape_str(ndim, shape, b2, sizeof b2), j, (long long)a->shape[j]);
        }
    }
    if ((rc = rm_check_size(call, ndim, sh, a->dtype, NULL))) return rc;
    remat_tensor *y = NULL;
    rc = make_view(&y, a, a->offset, ndim, sh, st, call);
    if (rc) return rc;
    shape_ctx c;
    ctx_from_input(&c, a);
    return finish(out, y, a, "ExpandBackward", expand_backward, &c, call);
}

/* ---- squeeze / unsqueeze -------------------------------------------------------------------- */
static int unsqueeze_impl(remat_tensor **out, remat_tensor *a, int dim) {
    const char *call = "remat_unsqueeze";
    rm_op_enter(call);
    if (!out) return rm_err(REMAT_EINVAL, "%s: out must not be NULL", call);
    *out = NULL;
    int rc = rm_check_tensor(call, "a", a);
    if (rc) return rc;
    char b[200];
    if (a->ndim >= REMAT_MAX_DIMS)
        return rm_err(REMAT_EINVAL, "%s: %s already has the maximum of %d dims", call,
                      rm_tensor_str(a, b, sizeof b), REMAT_MAX_DIMS);
    int d;
    if ((rc = rm_norm_dim(call, dim, a->ndim + 1, &d))) return rc;
    int64_t sh[REMAT_MAX_DIMS], st[REMAT_MAX_DIMS];
    for (int i = 0, j = 0; i <= a->ndim; i++) {
        if (i == d) {
            sh[i] = 1;
            /* any stride works for a size-1 dim; this one keeps a contiguous
             * input contiguous (as PyTorch) */
            st[i] = d < a->ndim ? a->shape[d] * a->strides[d] : 1;
        } else {
            sh[i] = a->shape[j];
            st[i] = a->strides[j];
            j++;
        }
    }
    remat_tensor *y = NULL;
    rc = make_view(&y, a, a->offset, a->ndim + 1, sh, st, call);
    if (rc) return rc;
    shape_ctx c;
    ctx_from_input(&c, a);
    return finish(out, y, a, "UnsqueezeBackward", reshape_backward, &c, call);
}

static int squeeze_impl(remat_tensor **out, remat_tensor *a, int dim) {
    const char *call = "remat_squeeze";
    rm_op_enter(call);
    if (!out) return rm_err(REMAT_EINVAL, "%s: out must not be NULL", call);
    *out = NULL;
    int rc = rm_check_tensor(call, "a", a);
    if (rc) return rc;
    int d;
    if ((rc = rm_norm_dim(call, dim, a->ndim, &d))) return rc;
    int64_t sh[REMAT_MAX_DIMS], st[REMAT_MAX_DIMS];
    int nd = 0;
    for (int i = 0; i < a->ndim; i++) {
        if (i == d && a->shape[i] == 1) continue; /* size != 1: unchanged, as PyTorch */
        sh[nd] = a->shape[i];
        st[nd] = a->strides[i];
        nd++;
    }
    remat_tensor *y = NULL;
    rc = make_view(&y, a, a->offset, nd, sh, st, call);
    if (rc) return rc;
    shape_ctx c;
    ctx_from_input(&c, a);
    return finish(out, y, a, "SqueezeBackward", reshape_backward, &c, call);
}

/* ---- contiguous ------------------------------------------------------------------------------- */
static int contiguous_impl(remat_tensor **out, remat_tensor *a) {
    const char *call = "remat_contiguous";
    rm_op_enter(call);
    if (!out) return rm_err(REMAT_EINVAL, "%s: out must not be NULL", call);
    *out = NULL;
    int rc = rm_check_tensor(call, "a", a);
    if (rc) return rc;
    if (remat_is_contiguous(a)) return rm_hand_out(out, remat_retain(a));
    rc = rm_check_host(call, a);
    if (rc) return rc;
    remat_tensor *y = NULL;
    rc = contig_copy(&y, a);
    if (rc) return rm_err_prefix(rc, call);
    shape_ctx c;
    ctx_from_input(&c, a);
    return finish(out, y, a, "CloneBackward", identity_backward, &c, call);
}

/* ---- public entries: interception brackets (src/dispatch/intercept.c) ---------------------- */
int remat_transpose(remat_tensor **out, remat_tensor *a, int dim0, int dim1) {
    remat_tensor *in_[] = {a};
    RM_OP_RUN1("remat_transpose", out, 1, in_, NULL, transpose_impl(out, a, dim0, dim1));
}

int remat_permute(remat_tensor **out, remat_tensor *a, int ndim, const int *perm) {
    remat_tensor *in_[] = {a};
    RM_OP_RUN1("remat_permute", out, 1, in_, NULL, permute_impl(out, a, ndim, perm));
}

int remat_slice(remat_tensor **out, remat_tensor *a, int dim, int64_t start, int64_t end,
                int64_t step) {
    remat_tensor *in_[] = {a};
    RM_OP_RUN1("remat_slice", out, 1, in_, NULL, slice_impl(out, a, dim, start, end, step));
}

int remat_expand(remat_tensor **out, remat_tensor *a, int ndim, const int64_t *shape) {
    remat_tensor *in_[] = {a};
    RM_OP_RUN1("remat_expand", out, 1, in_, NULL, expand_impl(out, a, ndim, shape));
}

int remat_unsqueeze(remat_tensor **out, remat_tensor *a, int dim) {
    remat_tensor *in_[] = {a};
    RM_OP_RUN1("remat_unsqueeze", out, 1, in_, NULL, unsqueeze_impl(out, a, dim));
}

int remat_squeeze(remat_tensor **out, remat_tensor *a, int dim) {
    remat_tensor *in_[] = {a};
    RM_OP_RUN1("remat_squeeze", out, 1, in_, NULL, squeeze_impl(out, a, dim));
}

int remat_contiguous(remat_tensor **out, remat_tensor *a) {
    remat_tensor *in_[] = {a};
    RM_OP_RUN1("remat_contiguous", out, 1, in_, NULL, contiguous_impl(out, a));
}
