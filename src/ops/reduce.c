/* src/ops/reduce.c — sum, mean, sum_all and max over dims: descriptors
 * over the reduce kernels (src/backends/cpu/reduce.c on the cpu, where the
 * canonical (O, R, I) form, the pairwise sums and the thread-count
 * independent order are described).
 *
 * The public functions hand the driver a writable parameter struct: the
 * op's check completes it (the reduction mask, the normalised dim) once the
 * arguments are known to be valid, and the kernels, the node's ctx (a copy)
 * and the backward read it from there. */
#include <string.h>

#include "op.h"

/* Parses (n_dims, dims) into mask[] over a's dims. */
static remat_status parse_dims(const char *call, const remat_tensor *a, int n_dims, const int *dims,
                               bool *mask) {
    for (int d = 0; d < REMAT_MAX_DIMS; d++) mask[d] = false;
    if (n_dims < 0) return rm_err(REMAT_EINVAL, "%s: n_dims must be >= 0, got %d", call, n_dims);
    if (n_dims == 0 || !dims) {
        for (int d = 0; d < a->ndim; d++) mask[d] = true;
        return REMAT_OK;
    }
    if (n_dims > REMAT_MAX_DIMS)
        return rm_err(REMAT_EINVAL, "%s: n_dims %d exceeds the maximum of %d dims", call, n_dims,
                      REMAT_MAX_DIMS);
    bool seen[REMAT_MAX_DIMS + 1] = {false};
    for (int k = 0; k < n_dims; k++) {
        int d;
        int rc = rm_norm_dim(call, dims[k], a->ndim, &d);
        if (rc) return rc;
        if (seen[d]) {
            char b[200];
            return rm_err(REMAT_EINVAL, "%s: dim %d appears more than once in dims (input %s)",
                          call, dims[k], rm_tensor_str(a, b, sizeof b));
        }
        seen[d] = true;
        if (d < a->ndim) mask[d] = true; /* a 0-dim tensor has nothing to reduce */
    }
    return REMAT_OK;
}

static void out_shape(const remat_tensor *a, const bool *mask, bool keepdim, int *ndim,
                      int64_t *shape) {
    int n = 0;
    for (int d = 0; d < a->ndim; d++) {
        if (!mask[d]) shape[n++] = a->shape[d];
        else if (keepdim) shape[n++] = 1;
    }
    *ndim = n;
}

/* ---- sum / mean ------------------------------------------------------------------------------ */
typedef struct sum_params {
    rm_reduce_params k; /* first: the kernels read it (mask, mean, scale) */
    int ndim;           /* the input's shape (fill_ctx): the gradient's */
    int64_t shape[REMAT_MAX_DIMS];
    /* the call's arguments */
    int n_dims;
    const int *dims;
    bool keepdim;
} sum_params;

static remat_status sum_check(const rm_op_call *c) {
    sum_params *p = (sum_params *)c->params; /* writable: see the top of the file */
    const remat_tensor *a = c->in[0];
    int rc = parse_dims(c->op->name, a, p->n_dims, p->dims, p->k.mask);
    if (rc) return rc;
    int64_t count = 1;
    for (int d = 0; d < a->ndim; d++)
        if (p->k.mask[d]) count *= a->shape[d];
    p->k.scale = p->k.mean ? 1.0 / (double)count : 1.0; /* count 0: inf, the mean is NaN */
    return REMAT_OK;
}

static remat_status sum_infer(const rm_op_call *c, rm_out_spec *out) {
    const sum_params *p = c->params;
    out_shape(c->in[0], p->k.mask, p->keepdim, &out[0].ndim, out[0].shape);
    out[0].dtype = c->in[0]->dtype;
    return REMAT_OK;
}

static void sum_fill_ctx(const rm_op_call *c, void *ctx) {
    sum_params *p = ctx;
    p->ndim = c->in[0]->ndim;
    memcpy(p->shape, c->in[0]->shape, sizeof p->shape);
    p->dims = NULL; /* the caller's array: not kept */
}

/* grad (reduced shape) -> dx (input shape): broadcast back and scale. */
static remat_status sum_backward(remat_node *node, remat_tensor *const *gout, remat_tensor **gin) {
    const sum_params *p = node->ctx;
    return rm_backward_kernel(node, gout, gin, RM_K_SUM_BWD, -1, NULL, p->ndim, p->shape, &p->k);
}

/* create_graph: g reshaped to the kept-dims shape, expanded to the input's
 * (a view) and scaled for mean, with public ops. */
static remat_status sum_backward_diff(remat_node *node, remat_tensor *const *gout,
                                      remat_tensor **gin) {
    const sum_params *p = node->ctx;
    if (!node->next[0].node) return REMAT_OK;
    int64_t kept[REMAT_MAX_DIMS];
    for (int d = 0; d < p->ndim; d++) kept[d] = p->k.mask[d] ? 1 : p->shape[d];
    remat_tensor *r = NULL, *e = NULL;
    int rc = remat_reshape(&r, gout[0], p->ndim, kept);
    if (!rc) rc = remat_expand(&e, r, p->ndim, p->shape);
    if (!rc && p->k.mean) rc = remat_mul_scalar(&gin[0], e, p->k.scale);
    else if (!rc) gin[0] = rm_retain(e);
    rm_release(r), rm_release(e);
    return rc;
}

#define SUM_OP(sym, call, node)                                                                    \
    const rm_op_desc sym =                                                                         \
        RM_OP_DESC(call, node, .n_in = 1, .n_out = 1, .flags = RM_OPF_FLOAT | RM_OPF_CONTIGUOUS,   \
                   .kernel = RM_K_SUM, .autocast = RM_AC_F32, .params_size = sizeof(sum_params),   \
                   .fill_ctx = sum_fill_ctx, .check = sum_check, .infer = sum_infer,               \
                   .backward = sum_backward, .backward_diff = sum_backward_diff)
SUM_OP(rm_op_sum, "remat_sum", "SumBackward");
SUM_OP(rm_op_mean, "remat_mean", "MeanBackward");
SUM_OP(rm_op_sum_all, "remat_sum_all", "SumBackward");

static remat_status sum(const rm_op_desc *d, bool mean, remat_tensor **out, remat_tensor *a,
                        int n_dims, const int *dims, bool keepdim, void *site) {
    sum_params p = {.k = {.mean = mean}, .n_dims = n_dims, .dims = dims, .keepdim = keepdim};
    remat_tensor *in[1] = {a};
    return rm_dispatch(d, out, in, &p, site);
}

remat_status remat_sum(remat_tensor **out, remat_tensor *a, int n_dims, const int *dims,
                       bool keepdim) {
    return sum(&rm_op_sum, false, out, a, n_dims, dims, keepdim, RM_OP_SITE());
}
remat_status remat_mean(remat_tensor **out, remat_tensor *a, int n_dims, const int *dims,
                        bool keepdim) {
    return sum(&rm_op_mean, true, out, a, n_dims, dims, keepdim, RM_OP_SITE());
}
remat_status remat_sum_all(remat_tensor **out, remat_tensor *a) {
    return sum(&rm_op_sum_all, false, out, a, 0, NULL, false, RM_OP_SITE());
}

/* ---- max ------------------------------------------------------------------------------------- */
typedef struct max_params {
    rm_dim_params k; /* first: the kernels read it (the normalised dim) */
    int ndim;        /* the input's shape (fill_ctx): the gradient's */
    int64_t shape[REMAT_MAX_DIMS];
    int dim; /* the call's arguments */
    bool keepdim;
} max_params;

static remat_status max_check(const rm_op_call *c) {
    max_params *p = (max_params *)c->params; /* writable: see the top of the file */
    const remat_tensor *a = c->in[0];
    const char *call = c->op->name;
    int rc = rm_norm_dim(call, p->dim, a->ndim, &p->k.dim);
    if (rc) return rc;
    if (a->ndim > 0 && a->shape[p->k.dim] == 0) {
        char b[200];
        return rm_err(REMAT_ESHAPE, "%s: cannot take the max over dim %d of size 0 (a is %s)", call,
                      p->dim, rm_tensor_str(a, b, sizeof b));
    }
    return REMAT_OK;
}

/* values (a's dtype) and indices (i64), a's shape without (or with size 1 at) dim */
static remat_status max_infer(const rm_op_call *c, rm_out_spec *out) {
    const max_params *p = c->params;
    const remat_tensor *a = c->in[0];
    bool mask[REMAT_MAX_DIMS] = {false};
    if (a->ndim > 0) mask[p->k.dim] = true;
    out_shape(a, mask, p->keepdim, &out[0].ndim, out[0].shape);
    out[0].dtype = a->dtype;
    out[1] = out[0];
    out[1].dtype = REMAT_I64;
    return REMAT_OK;
}

static void max_fill_ctx(const rm_op_call *c, void *ctx) {
    max_params *p = ctx;
    p->ndim = c->in[0]->ndim;
    memcpy(p->shape, c->in[0]->shape, sizeof p->shape);
}

/* saved: 0 = argmax indices (i64, output shape) */
static remat_status max_backward(remat_node *node, remat_tensor *const *gout, remat_tensor **gin) {
    const max_params *p = node->ctx;
    return rm_backward_kernel(node, gout, gin, RM_K_MAX_BWD, 0, "argmax indices were not saved",
                              p->ndim, p->shape, &p->k);
}

/* create_graph: dx = expand(g) * M with public ops, where M (x's shape) is 1 at each
 * argmax and 0 elsewhere (a constant: max is piecewise linear) — the first-order kernel's
 * scatter of ones at the saved indices, on x's device. */
static remat_status max_backward_diff(remat_node *node, remat_tensor *const *gout,
                                      remat_tensor **gin) {
    const max_params *p = node->ctx;
    if (!node->next[0].node) return REMAT_OK;
    remat_tensor *ones = NULL, *m = NULL, *r = NULL, *e = NULL, *g = gout[0];
    int64_t kept[REMAT_MAX_DIMS];
    for (int d = 0; d < p->ndim; d++) kept[d] = d == p->k.dim ? 1 : p->shape[d];
    int rc = remat_full(&ones, g->ndim, g->shape, 1.0, g->dtype, g->storage->device);
    if (!rc) rc = max_backward(node, &ones, &m);
    if (!rc) rc = remat_reshape(&r, g, p->ndim, kept);
    if (!rc) rc = remat_expand(&e, r, p->ndim, p->shape);
    if (!rc) rc = remat_mul(&gin[0], e, m);
    rm_release(ones), rm_release(m), rm_release(r), rm_release(e);
    return rc;
}

/* Outputs: values and indices, both handed out; only the values are
 * differentiable. The indices are saved after the kernel. */
const rm_op_desc rm_op_max =
    RM_OP_DESC("remat_max", "MaxBackward", .n_in = 1, .n_out = 2, .n_grad_out = 1, .n_saved = 1,
               .flags = RM_OPF_FLOAT | RM_OPF_CONTIGUOUS, .kernel = RM_K_MAX,
               .params_size = sizeof(max_params), .fill_ctx = max_fill_ctx, .check = max_check,
               .infer = max_infer, .saves = {{RM_SAVE_OUTPUT, 1, 0}}, .backward = max_backward,
               .backward_diff = max_backward_diff);

/* Drops an output the caller did not ask for: the driver handed it out,
 * into the open scope if there is one. */
static void drop_output(remat_tensor *t) {
    rm_scope_unhold(t);
    rm_release(t);
}

remat_status remat_max(remat_tensor **out, remat_tensor **indices, remat_tensor *a, int dim,
                       bool keepdim) {
    if (indices) *indices = NULL;
    max_params p = {.dim = dim, .keepdim = keepdim};
    remat_tensor *in[1] = {a}, *outs[2] = {NULL, NULL};
    int rc = rm_dispatch(&rm_op_max, out ? outs : NULL, in, &p, RM_OP_SITE());
    if (rc) return rc;
    *out = outs[0];
    if (indices) *indices = outs[1];
    else drop_output(outs[1]);
    return REMAT_OK;
}
