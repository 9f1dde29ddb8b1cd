/* src/ops/copy.c — copies: clone, dtype conversion, device moves.
 *
 * All three produce a new contiguous tensor with its own storage. The
 * gradient of a copy is the copy's gradient brought back to the source's
 * dtype and device (for clone: passed through unchanged).
 *
 * The strided copy kernel behind the internal copies (rm_copy_same_dtype)
 * and the zero fill of gradient scatters (rm_zero_dim_range) are cpu
 * kernels: src/backends/cpu/copy.c.
 *
 * Device moves must work for device types whose memory the CPU cannot
 * read: such memory is only ever touched through rm_device_copy, with a
 * contiguous source. A strided source on such a device is first staged
 * (the span of storage it addresses) into host memory and compacted there. */
#include <stdlib.h>
#include <string.h>

#include "../internal.h"

static bool same_device(remat_device a, remat_device b) {
    return a.type == b.type && a.index == b.index;
}

/* Stages the part of t's storage that t addresses into a new cpu storage and
 * returns a cpu view of it with t's shape and strides (strides are never
 * negative, so the span is [offset, offset + sum((size-1)*stride)]). */
static int stage_to_host(remat_tensor **out, const remat_tensor *t) {
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

/* A new contiguous tensor on `device` with `dtype` holding t's values (no
 * autograd). A dtype change needs CPU-readable memory on both sides (it
 * runs the conversion kernel); a pure move works for any device type. */
static int copy_to(remat_tensor **out, remat_tensor *t, remat_dtype dtype, remat_device device) {
    *out = NULL;
    remat_tensor *y = NULL, *src = NULL;
    int rc = rm_new_output(&y, t->ndim, t->shape, dtype, device);
    if (rc) return rc;
    int64_t n = remat_numel(t);
    /* skip mode (meta output) or a meta source: nothing to move */
    if (!rm_ptr(y) || !t->storage->data || n == 0) goto done;
    remat_device sd = t->storage->device;
    bool src_host = remat_device_host_addressable(sd.type);
    if (dtype != t->dtype || (same_device(sd, device) && src_host)) {
        /* conversion or same-device copy: strided CPU kernel */
        if (!src_host || !remat_device_host_addressable(device.type)) {
            rc = rm_check_host("copy", src_host ? y : t);
            goto done;
        }
        if (!rm_copy_same_dtype(y, t)) rc = rm_copy_into(y, t);
        goto done;
    }
    /* a move between devices (or a copy within a device the CPU cannot
     * read): one contiguous block through the device copy functions */
    if (remat_is_contiguous(t)) {
        src = remat_retain(t);
    } else if (src_host) {
        rc = rm_contig(&src, t);
    } else {
        remat_tensor *staged;
        rc = stage_to_host(&staged, t);
        if (rc == REMAT_OK) {
            rc = rm_contig(&src, staged);
            remat_release(staged);
        }
    }
    if (rc == REMAT_OK)
        rc = rm_device_copy(device, rm_ptr(y), src->storage->device, rm_ptr(src),
                            (size_t)n * remat_dtype_size(dtype));
done:
    remat_release(src);
    if (rc) {
        remat_release(y);
        return rc;
    }
    *out = y;
    return REMAT_OK;
}

typedef struct copy_ctx {
    remat_dtype dtype;   /* source dtype */
    remat_device device; /* source device */
} copy_ctx;

/* The grad of the copy, brought back to the source's dtype and device. */
static int copy_backward(remat_node *node, remat_tensor *const *gout, remat_tensor **gin) {
    copy_ctx *c = node->ctx;
    if (!node->next[0].node) return REMAT_OK;
    remat_tensor *g = gout[0];
    if (g->dtype == c->dtype && same_device(g->storage->device, c->device)) {
        gin[0] = remat_retain(g);
        return REMAT_OK;
    }
    return copy_to(&gin[0], g, c->dtype, c->device);
}

/* Shared body of the three public calls. */
static int copy_op(const char *call, const char *node_name, remat_tensor **out, remat_tensor *t,
                   remat_dtype dtype, remat_device device) {
    remat_tensor *y;
    int rc = copy_to(&y, t, dtype, device);
    if (rc) return rm_err_prefix(rc, call);
    /* only float -> float copies are differentiable (i64 has no grad) */
    bool float_out = dtype == REMAT_F32 || dtype == REMAT_F64 || dtype == REMAT_BF16;
    if (float_out && rm_needs_grad(1, &t)) {
        remat_node *node;
        rc = rm_node_new(&node, node_name, copy_backward, 1, &t, 1, 0);
        if (rc == REMAT_OK) {
            copy_ctx *c = malloc(sizeof *c);
            if (!c) {
                rc = rm_err(REMAT_ENOMEM, "%s: out of memory", call);
            } else {
                c->dtype = t->dtype;
                c->device = t->storage->device;
                rm_node_set_ctx(node, c, NULL);
                rm_node_set_output(node, 0, y);
            }
            rm_node_release(node);
        }
        if (rc) {
            remat_release(y);
            return rm_err_prefix(rc, call);
        }
    }
    return rm_hand_out(out, y);
}

static int clone_impl(remat_tensor **out, remat_tensor *t) {
    const char *call = "remat_clone";
    rm_op_enter(call);
    if (!out) return rm_err(REMAT_EINVAL, "%s: out must not be NULL", call);
    *out = NULL;
    int rc = rm_check_tensor(call, "t", t);
    if (rc) return rc;
    return copy_op(call, "CloneBackward", out, t, t->dtype, t->storage->device);
}

static int to_dtype_impl(remat_tensor **out, remat_tensor *t, remat_dtype dtype) {
    const char *call = "remat_to_dtype";
    rm_op_enter(call);
    if (!out) return rm_err(REMAT_EINVAL, "%s: out must not be NULL", call);
    *out = NULL;
    int rc = rm_check_tensor(call, "t", t);
    if (rc) return rc;
    if (dtype != REMAT_F32 && dtype != REMAT_F64 && dtype != REMAT_I64 && dtype != REMAT_BF16)
        return rm_err(REMAT_EDTYPE, "%s: unknown dtype %d", call, (int)dtype);
    rc = rm_check_host(call, t);
    if (rc) return rc;
    return copy_op(call, "ToCopyBackward", out, t, dtype, t->storage->device);
}

static int to_device_impl(remat_tensor **out, remat_tensor *t, remat_device device) {
    const char *call = "remat_to_device";
    rm_op_enter(call);
    if (!out) return rm_err(REMAT_EINVAL, "%s: out must not be NULL", call);
    *out = NULL;
    int rc = rm_check_tensor(call, "t", t);
    if (rc) return rc;
    rc = remat_device_check(device);
    if (rc) return rm_err_prefix(rc, call);
    if (same_device(t->storage->device, device)) return rm_hand_out(out, remat_retain(t));
    return copy_op(call, "ToCopyBackward", out, t, t->dtype, device);
}

/* ---- public entries: interception brackets (src/dispatch/intercept.c) ---------------------- */
int remat_clone(remat_tensor **out, remat_tensor *t) {
    remat_tensor *in_[] = {t};
    RM_OP_RUN1("remat_clone", out, 1, in_, NULL, clone_impl(out, t));
}

int remat_to_dtype(remat_tensor **out, remat_tensor *t, remat_dtype dtype) {
    remat_tensor *in_[] = {t};
    RM_OP_RUN1("remat_to_dtype", out, 1, in_, NULL, to_dtype_impl(out, t, dtype));
}

int remat_to_device(remat_tensor **out, remat_tensor *t, remat_device device) {
    remat_tensor *in_[] = {t};
    RM_OP_RUN1("remat_to_device", out, 1, in_, NULL, to_device_impl(out, t, device));
}
