/* src/ops/copy.c — copies: clone, dtype conversion, device moves.
 *
 * All three produce a new contiguous tensor with its own storage. The
 * gradient of a copy is the copy's gradient brought back to the source's
 * dtype and device (for clone: passed through unchanged).
 *
 * Copies within host memory go through rm_copy_into (src/core/tensor.c), whose
 * strided kernel is backend 0's (src/core/backend.h).
 *
 * Device moves must work for device types whose memory the CPU cannot
 * read: such memory is only ever touched through rm_device_copy, with a
 * contiguous source. A strided source on such a device is first staged
 * (the span of storage it addresses) into host memory and compacted there. */
#include <string.h>

#include "op.h"

static bool same_device(remat_device a, remat_device b) {
    return a.type == b.type && a.index == b.index;
}

/* Stages the part of t's storage that t addresses into a new cpu storage and
 * returns a cpu view of it with t's shape and strides (strides are never
 * negative, so the span is [offset, offset + sum((size-1)*stride)]). */
static remat_status stage_to_host(remat_tensor **out, const remat_tensor *t) {
    size_t es = remat_dtype_size(t->dtype);
    int64_t span = 1;
    for (int d = 0; d < t->ndim; d++) span += (t->shape[d] - 1) * t->strides[d];
    rm_storage *st;
    int rc = rm_storage_new(&st, (size_t)span * es, REMAT_DEVICE_CPU, false);
    if (rc) return rc;
    rc = rm_device_copy(REMAT_DEVICE_CPU, st->data, t->storage->device, rm_ptr(t),
                        (size_t)span * es);
    if (rc == REMAT_OK) {
        *out = rm_tensor_alloc(st, 0, t->ndim, t->shape, t->strides, t->dtype);
        if (!*out) rc = rm_err(REMAT_ENOMEM, "out of memory staging a tensor on the host");
    }
    rm_storage_release(st); /* the view holds its own reference */
    return rc;
}

/* y := t's values (no autograd), y contiguous, of t's shape, already made
 * with its dtype on its device. A dtype change needs CPU-readable memory on
 * both sides, or one device (its conversion kernel); a pure move works for
 * any device type. */
static remat_status copy_fill(remat_tensor *y, remat_tensor *t) {
    remat_tensor *src = NULL;
    const remat_dtype dtype = y->dtype;
    const remat_device device = y->storage->device;
    int64_t n = remat_numel(t);
    if (n == 0) return REMAT_OK;
    remat_device sd = t->storage->device;
    bool src_host = remat_device_host_addressable(sd.type);
    if (dtype != t->dtype || (same_device(sd, device) && src_host)) {
        /* conversion or same-device copy: the strided copy kernel of the device (the
         * CPU's, or the device's COPY_INTO through rm_copy_into) */
        if (same_device(sd, device) && !src_host) return rm_copy_into(y, t);
        if (!src_host || !remat_device_host_addressable(device.type))
            return rm_check_host("copy", src_host ? y : t);
        return rm_copy_into(y, t);
    }
    /* a move between devices (or a copy within a device the CPU cannot
     * read): one contiguous block through the device copy functions */
    int rc = REMAT_OK;
    if (remat_is_contiguous(t)) {
        src = rm_retain(t);
    } else if (src_host) {
        rc = rm_contig(&src, t);
    } else {
        remat_tensor *staged;
        rc = stage_to_host(&staged, t);
        if (rc == REMAT_OK) {
            rc = rm_contig(&src, staged);
            rm_release(staged);
        }
    }
    if (rc == REMAT_OK)
        rc = rm_device_copy(device, rm_ptr(y), src->storage->device, rm_ptr(src),
                            (size_t)n * remat_dtype_size(dtype));
    rm_release(src);
    return rc;
}

/* The ops' kernel: out[0] := in[0]. Not looked up in the kernel table:
 * every device type can copy through its registered functions. */
static remat_status copy_kernel(const rm_kargs *k) { return copy_fill(k->out[0], k->in[0]); }

/* A new contiguous tensor on `device` with `dtype` holding t's values (no
 * autograd; skip mode or a meta source: no data moved). */
static remat_status copy_to(remat_tensor **out, remat_tensor *t, remat_dtype dtype,
                            remat_device device) {
    *out = NULL;
    remat_tensor *y = NULL;
    int rc = rm_new_output(&y, t->ndim, t->shape, dtype, device);
    if (rc) return rc;
    if (rm_ptr(y) && t->storage->data) rc = copy_fill(y, t);
    if (rc) {
        rm_release(y);
        return rc;
    }
    *out = y;
    return REMAT_OK;
}

/* The ops' parameters (the target) and, in the node's ctx, the source's
 * dtype and device, to which the gradient is brought back. */
typedef struct copy_ctx {
    remat_dtype dtype;       /* target dtype (to_dtype) */
    remat_device device;     /* target device (to_device) */
    remat_dtype src_dtype;   /* source dtype */
    remat_device src_device; /* source device */
} copy_ctx;

static void copy_fill_ctx(const rm_op_call *c, void *ctx) {
    copy_ctx *cx = ctx;
    cx->src_dtype = c->in[0]->dtype;
    cx->src_device = c->in[0]->storage->device;
}

/* The grad of the copy, brought back to the source's dtype and device. */
static remat_status copy_backward(remat_node *node, remat_tensor *const *gout, remat_tensor **gin) {
    copy_ctx *c = node->ctx;
    if (!node->next[0].node) return REMAT_OK;
    remat_tensor *g = gout[0];
    if (g->dtype == c->src_dtype && same_device(g->storage->device, c->src_device)) {
        gin[0] = rm_retain(g);
        return REMAT_OK;
    }
    return copy_to(&gin[0], g, c->src_dtype, c->src_device);
}

/* create_graph: the same, with the public (differentiable) copies. */
static remat_status copy_backward_diff(remat_node *node, remat_tensor *const *gout,
                                       remat_tensor **gin) {
    copy_ctx *c = node->ctx;
    if (!node->next[0].node) return REMAT_OK;
    remat_tensor *t = NULL;
    int rc = remat_to_device(&t, gout[0], c->src_device);
    if (!rc) rc = remat_to_dtype(&gin[0], t, c->src_dtype);
    rm_release(t);
    return rc;
}

static const char *const k_t_name[] = {"t"};

/* Every copy: one tensor t, a new contiguous output; only float -> float
 * copies are differentiable (the driver records no node for an i64 output). */
#define COPY_OP(sym, call, node, ...)                                                              \
    const rm_op_desc sym = RM_OP_DESC(call, node, .n_in = 1, .n_out = 1, .arg_names = k_t_name,    \
                                      .direct = copy_kernel, .params_size = sizeof(copy_ctx),      \
                                      .fill_ctx = copy_fill_ctx, .backward = copy_backward,        \
                                      .backward_diff = copy_backward_diff, __VA_ARGS__)

COPY_OP(rm_op_clone, "remat_clone", "CloneBackward", .check = NULL);

/* The public calls: t and the target (p). */
static remat_status copy_call(const rm_op_desc *d, remat_tensor **out, remat_tensor *t, copy_ctx p,
                              void *site) {
    remat_tensor *in[1] = {t};
    return rm_dispatch(d, out, in, &p, site);
}

/* out[0] shaped like t (its dtype and device are the driver's defaults). */
static void shape_of_t(const rm_op_call *c, rm_out_spec *out) {
    out[0].ndim = c->in[0]->ndim;
    memcpy(out[0].shape, c->in[0]->shape, sizeof out[0].shape);
}

remat_status remat_clone(remat_tensor **out, remat_tensor *t) {
    return copy_call(&rm_op_clone, out, t, (copy_ctx){0}, RM_OP_SITE());
}

static remat_status to_dtype_check(const rm_op_call *c) {
    const copy_ctx *p = c->params;
    if (p->dtype != REMAT_F32 && p->dtype != REMAT_F64 && p->dtype != REMAT_I64 &&
        p->dtype != REMAT_BF16)
        return rm_err(REMAT_EDTYPE, "%s: unknown dtype %d", c->op->name, (int)p->dtype);
    return REMAT_OK;
}

static remat_status to_dtype_infer(const rm_op_call *c, rm_out_spec *out) {
    shape_of_t(c, out);
    out[0].dtype = ((const copy_ctx *)c->params)->dtype;
    return REMAT_OK;
}

COPY_OP(rm_op_to_dtype, "remat_to_dtype", "ToCopyBackward", .check = to_dtype_check,
        .infer = to_dtype_infer);

remat_status remat_to_dtype(remat_tensor **out, remat_tensor *t, remat_dtype dtype) {
    return copy_call(&rm_op_to_dtype, out, t, (copy_ctx){.dtype = dtype}, RM_OP_SITE());
}

static remat_status to_device_check(const rm_op_call *c) {
    int rc = remat_device_check(((const copy_ctx *)c->params)->device);
    return rc ? rm_err_prefix(rc, c->op->name) : REMAT_OK;
}

/* t itself when it is already there, else a new tensor on the device. */
static remat_status to_device_infer(const rm_op_call *c, rm_out_spec *out) {
    const remat_device device = ((const copy_ctx *)c->params)->device;
    shape_of_t(c, out);
    if (same_device(c->in[0]->storage->device, device)) {
        out[0].kind = RM_OUT_INPUT;
    } else {
        out[0].other_device = true;
        out[0].device = device;
    }
    return REMAT_OK;
}

COPY_OP(rm_op_to_device, "remat_to_device", "ToCopyBackward", .check = to_device_check,
        .infer = to_device_infer);

remat_status remat_to_device(remat_tensor **out, remat_tensor *t, remat_device device) {
    return copy_call(&rm_op_to_device, out, t, (copy_ctx){.device = device}, RM_OP_SITE());
}
