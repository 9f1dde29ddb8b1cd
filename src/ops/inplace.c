/* src/ops/inplace.c — in-place ops: add_, mul_, mul_scalar_, relu_, zero_, copy_.
 *
 * Each op checks rm_check_inplace first (a leaf that requires grad cannot be
 * modified while grad mode is on), writes through the target's strides (it
 * may be a non-contiguous view), and bumps the storage version counter, so
 * that backward detects saved tensors that were changed afterwards.
 *
 * Autograd: when grad mode is on and the target or the other operand
 * requires grad, a node is recorded whose input 0 is the target's OLD
 * history (rm_node_new captures the edge before rm_node_set_output rebases
 * the target onto the new node) and input 1 the other operand. In-place on
 * a view is refused then: its base would keep the old history and silently
 * get wrong gradients (remat does not track view relations). */
#include <stdlib.h>
#include <string.h>

#include "../internal.h"


typedef enum ipop { IP_ADD, IP_MUL, IP_MUL_SCALAR, IP_RELU, IP_ZERO, IP_COPY } ipop;

typedef struct ipinfo {
    const char *call;
    const char *node;
} ipinfo;

static const ipinfo k_ip[] = {
    [IP_ADD] = {"remat_add_", "AddBackward"},
    [IP_MUL] = {"remat_mul_", "MulBackward"},
    [IP_MUL_SCALAR] = {"remat_mul_scalar_", "MulBackward"},
    [IP_RELU] = {"remat_relu_", "ReluBackward"},
    [IP_ZERO] = {"remat_zero_", "ZeroBackward"},
    [IP_COPY] = {"remat_copy_", "CopyBackward"},
};

typedef struct ipctx {
    ipop op;
    double p;                      /* alpha or scalar */
    int ndb;                       /* shape / dtype of operand b (for sum_to) */
    int64_t sb[REMAT_MAX_DIMS];
    remat_dtype db;
} ipctx;

/* ---- validation ------------------------------------------------------------------ */
/* Writing through a view whose elements share memory (an expanded view)
 * would make the result depend on the iteration order. */
static int check_no_internal_overlap(const char *call, const remat_tensor *a) {
    for (int d = 0; d < a->ndim; d++)
        if (a->strides[d] == 0 && a->shape[d] > 1) {
            char b[200];
            return rm_err(REMAT_EUNSUPPORTED,
                          "%s: %s is an expanded view in which several elements share one "
                          "memory location; in-place writes to it are not supported (make it "
                          "contiguous first)", call, rm_tensor_str(a, b, sizeof b));
        }
    return REMAT_OK;
}

/* b must broadcast to a's shape without changing it. */
static int check_broadcast_to(const char *call, const remat_tensor *a, const remat_tensor *b) {
    int nd;
    int64_t shape[REMAT_MAX_DIMS];
    int rc = rm_broadcast_shape(call, a->ndim, a->shape, b->ndim, b->shape, &nd, shape);
    if (rc) return rc;
    if (nd != a->ndim || memcmp(shape, a->shape, sizeof(int64_t) * (size_t)nd)) {
        char b1[160], b2[160];
        return rm_err(REMAT_ESHAPE,
                      "%s: %s cannot be broadcast to the shape %s of the tensor modified in "
                      "place (an in-place op cannot change its shape)", call,
                      rm_tensor_str(b, b1, sizeof b1), rm_shape_str(a->ndim, a->shape, b2, sizeof b2));
    }
    return REMAT_OK;
}

/* Common checks for the target a and (optional) operand b. */
static int check_args(ipop op, remat_tensor *a, remat_tensor *b, bool b_required) {
    const char *call = k_ip[op].call;
    int rc;
    bool any_dtype = op == IP_ZERO || op == IP_COPY; /* plain data movement */
    if (any_dtype) {
        rc = rm_check_tensor(call, "a", a);
        if (!rc) rc = rm_check_host(call, a);
    } else {
        rc = rm_check_float(call, "a", a);
    }
    if (rc) return rc;
    if (b_required) {
        rc = op == IP_COPY ? rm_check_tensor(call, "src", b) : rm_check_float(call, "b", b);
        if (!rc && op != IP_COPY) rc = rm_check_same_dtype(call, a, b);
        if (!rc) rc = rm_check_same_device(call, a, b);
        if (!rc) rc = check_broadcast_to(call, a, b);
        if (rc) return rc;
    }
    rc = rm_check_inplace(call, a);
    if (!rc) rc = check_no_internal_overlap(call, a);
    return rc;
}

/* If b shares memory with a other than as the very same view, reading b
 * while writing a could read already-updated values; work from a copy. */
static int operand_snapshot(remat_tensor **out, remat_tensor *a, remat_tensor *b) {
    bool same_view = b->offset == a->offset && b->ndim == a->ndim && b->dtype == a->dtype &&
                     !memcmp(b->shape, a->shape, sizeof(int64_t) * (size_t)a->ndim) &&
                     !memcmp(b->strides, a->strides, sizeof(int64_t) * (size_t)a->ndim);
    if (!remat_shares_storage(a, b) || same_view) {
        *out = remat_retain(b);
        return REMAT_OK;
    }
    int rc = rm_new_output(out, b->ndim, b->shape, b->dtype, b->storage->device);
    if (rc) return rc;
    rc = rm_copy_into(*out, b);
    if (rc) remat_release_p(out);
    return rc;
}

/* Contiguous copy with its own storage (the pre-op value of a for mul_). */
static int snapshot_copy(remat_tensor **out, remat_tensor *t) {
    int rc = rm_new_output(out, t->ndim, t->shape, t->dtype, t->storage->device);
    if (rc) return rc;
    rc = rm_copy_into(*out, t);
    if (rc) remat_release_p(out);
    return rc;
}

/* Zeroes a strided i64 view (the float case goes through the engine). */
static void zero_strided_i64(remat_tensor *a) {
    int64_t *p = rm_ptr(a), n = remat_numel(a);
    rm_iter it;
    rm_iter_init(&it, a->ndim, a->shape, 1);
    memcpy(it.strides[0], a->strides, sizeof(int64_t) * (size_t)a->ndim);
    for (int64_t i = 0; i < n; i++) {
        p[it.off[0]] = 0;
        rm_iter_next(&it);
    }
}

/* ---- backward ---------------------------------------------------------------------- */
static int zeros_like(remat_tensor **out, const remat_tensor *t) {
    int rc = rm_new_output(out, t->ndim, t->shape, t->dtype, t->storage->device);
    if (rc) return rc;
    if (rm_ptr(*out)) memset(rm_ptr(*out), 0, (*out)->storage->nbytes);
    return REMAT_OK;
}

/* New tensor of g's shape = f(g, x). */
static int ew_new(remat_tensor **out, int op, remat_tensor *g, remat_tensor *x, double p) {
    int rc = rm_new_output(out, g->ndim, g->shape, g->dtype, g->storage->device);
    if (rc) return rc;
    return rm_ew_run("in-place backward", op, *out, g, x, NULL, p);
}

/* Reduces a gradient of a's shape to operand b's shape and dtype. */
static int grad_for_b(remat_tensor **out, remat_tensor *t, const ipctx *cx) {
    remat_tensor *s = NULL;
    int rc = rm_sum_to(&s, t, cx->ndb, cx->sb);
    if (rc) return rc;
    if (s->dtype == cx->db) {
        *out = s;
        return REMAT_OK;
    }
    rc = rm_new_output(out, s->ndim, s->shape, cx->db, s->storage->device);
    if (!rc) rc = rm_copy_into(*out, s);
    if (rc) remat_release_p(out);
    remat_release(s);
    return rc;
}

/* Saved slots: add_ none; mul_ 0 = original a (for db), 1 = b (for da);
 * relu_ 0 = result. */
static int inplace_backward(remat_node *node, remat_tensor *const *gout, remat_tensor **gin) {
    ipctx *cx = node->ctx;
    remat_tensor *g = gout[0], *s0 = NULL, *s1 = NULL, *t = NULL;
    bool need_a = node->next[0].node != NULL;
    bool need_b = node->n_next > 1 && node->next[1].node != NULL;
    int rc = REMAT_OK;
    if (node->n_saved > 0) rc = rm_node_unpack(node, 0, &s0);
    if (!rc && node->n_saved > 1) rc = rm_node_unpack(node, 1, &s1);
    if (rc) goto out;
    switch (cx->op) {
    case IP_ADD: /* a + alpha * b */
        if (need_a) gin[0] = remat_retain(g);
        if (need_b) {
            rc = ew_new(&t, RM_EW_SCALE, g, NULL, cx->p);
            if (!rc) rc = grad_for_b(&gin[1], t, cx);
        }
        break;
    case IP_MUL: /* a_old * b */
        if (need_a) rc = ew_new(&gin[0], RM_EW_MUL, g, s1, 0);
        if (!rc && need_b) {
            rc = ew_new(&t, RM_EW_MUL, g, s0, 0);
            if (!rc) rc = grad_for_b(&gin[1], t, cx);
        }
        break;
    case IP_MUL_SCALAR:
        if (need_a) rc = ew_new(&gin[0], RM_EW_SCALE, g, NULL, cx->p);
        break;
    case IP_RELU: /* s0 is the result; > 0 exactly where the input was */
        if (need_a) rc = ew_new(&gin[0], RM_EW_RELU_BWD, g, s0, 0);
        break;
    case IP_ZERO: /* the old value no longer matters */
        if (need_a) rc = zeros_like(&gin[0], g);
        break;
    case IP_COPY:
        if (need_a) rc = zeros_like(&gin[0], g);
        if (!rc && need_b) rc = grad_for_b(&gin[1], g, cx);
        break;
    }
out:
    remat_release(s0);
    remat_release(s1);
    remat_release(t);
    return rc;
}

/* ---- driver ----------------------------------------------------------------------------- */
static int inplace_impl(ipop op, remat_tensor *a, remat_tensor *b_in, double p) {
    const char *call = k_ip[op].call;
    rm_op_enter(call);
    bool has_b = op == IP_ADD || op == IP_MUL || op == IP_COPY;
    int rc = check_args(op, a, b_in, has_b);
    if (rc) return rc;

    remat_tensor *in[2] = {a, has_b ? b_in : NULL};
    bool record = rm_needs_grad(has_b ? 2 : 1, in);
    if (record && a->dtype == REMAT_I64) { /* copy_ of a tensor requiring grad into i64 */
        char bb[200];
        return rm_err(REMAT_EDTYPE, "%s: cannot record a gradient into the i64 tensor %s", call,
                      rm_tensor_str(a, bb, sizeof bb));
    }
    if (record && a->is_view) {
        char bb[200];
        return rm_err(REMAT_EUNSUPPORTED,
                      "%s: in-place on a view of a tensor that requires grad is not supported "
                      "(target %s); use the out-of-place op", call, rm_tensor_str(a, bb, sizeof bb));
    }

    remat_tensor *b = NULL, *a_old = NULL, *b_old = NULL;
    remat_node *node = NULL;
    if (has_b) {
        rc = operand_snapshot(&b, a, b_in);
        if (rc) return rm_err_prefix(rc, call);
    }
    if (record) {
        int n_saved = op == IP_MUL ? 2 : op == IP_RELU ? 1 : 0;
        rc = rm_node_new(&node, k_ip[op].node, inplace_backward, has_b ? 2 : 1, in, 1, n_saved);
        if (rc) goto fail;
        ipctx *cx = calloc(1, sizeof *cx);
        if (!cx) {
            rc = rm_err(REMAT_ENOMEM, "out of memory");
            goto fail;
        }
        cx->op = op;
        cx->p = p;
        if (has_b) {
            cx->ndb = b_in->ndim;
            memcpy(cx->sb, b_in->shape, sizeof cx->sb);
            cx->db = b_in->dtype;
        }
        rm_node_set_ctx(node, cx, NULL);
        if (op == IP_MUL) {
            bool need_a = node->next[0].node != NULL, need_b = node->next[1].node != NULL;
            /* db = g * a_old: a is about to be overwritten, save a copy */
            if (need_b) {
                rc = snapshot_copy(&a_old, a);
                if (!rc) rc = rm_op_save(node, 0, a_old);
            }
            /* da = g * b: if b shares a's memory (mul_(x, x)) the write would
             * invalidate it, so save the pre-op copy instead */
            if (!rc && need_a) {
                if (remat_shares_storage(a, b) && !a_old) rc = snapshot_copy(&b_old, b);
                if (!rc) rc = rm_op_save(node, 1, remat_shares_storage(a, b)
                                                        ? (b_old ? b_old : a_old) : b);
            }
            if (rc) goto fail;
        }
    }

    /* the kernel */
    switch (op) {
    case IP_ADD: rc = rm_ew_run(call, RM_EW_AXPY, a, a, b, NULL, p); break;
    case IP_MUL: rc = rm_ew_run(call, RM_EW_MUL, a, a, b, NULL, 0); break;
    case IP_MUL_SCALAR: rc = rm_ew_run(call, RM_EW_SCALE, a, a, NULL, NULL, p); break;
    case IP_RELU: rc = rm_ew_run(call, RM_EW_RELU, a, a, NULL, NULL, 0); break;
    case IP_ZERO:
        if (!rm_ptr(a)) break;
        if (remat_is_contiguous(a))
            memset(rm_ptr(a), 0, (size_t)remat_numel(a) * remat_dtype_size(a->dtype));
        else if (a->dtype == REMAT_I64)
            zero_strided_i64(a);
        else
            rc = rm_ew_run(call, RM_EW_FILL, a, NULL, NULL, NULL, 0);
        break;
    case IP_COPY:
        rc = rm_copy_into(a, b);
        break;
    }
    if (rc) goto fail;
    rm_bump_version(a);

    if (node) {
        /* relu_ saves its result: a at its new version. Saved before the
         * rebase so that a failing pack hook leaves a's history intact
         * (a's data is modified all the same; the error is reported). */
        if (op == IP_RELU) {
            rc = rm_op_save(node, 0, a);
            if (rc) goto fail;
        }
        rm_node_set_output(node, 0, a); /* rebase a's history onto the node */
        rm_node_release(node);
    }
    remat_release(a_old);
    remat_release(b_old);
    remat_release(b);
    return REMAT_OK;
fail:
    rm_node_release(node);
    remat_release(a_old);
    remat_release(b_old);
    remat_release(b);
    return rm_err_prefix(rc, call);
}

/* The public entry: interception bracket around inplace_impl (in-place ops
 * are never served from a selective-checkpoint cache). */
static int inplace_op(ipop op, remat_tensor *a, remat_tensor *b, double p, void *site) {
    remat_tensor *in[2] = {a, b};
    RM_OP_RUN0_AT(site, k_ip[op].call, b ? 2 : 1, in, inplace_impl(op, a, b, p));
}

int remat_add_(remat_tensor *a, remat_tensor *b, double alpha) {
    return inplace_op(IP_ADD, a, b, alpha, RM_OP_SITE());
}
int remat_mul_(remat_tensor *a, remat_tensor *b) {
    return inplace_op(IP_MUL, a, b, 0, RM_OP_SITE());
}
int remat_mul_scalar_(remat_tensor *a, double s) {
    return inplace_op(IP_MUL_SCALAR, a, NULL, s, RM_OP_SITE());
}
int remat_relu_(remat_tensor *a) { return inplace_op(IP_RELU, a, NULL, 0, RM_OP_SITE()); }
int remat_zero_(remat_tensor *a) { return inplace_op(IP_ZERO, a, NULL, 0, RM_OP_SITE()); }
int remat_copy_(remat_tensor *a, remat_tensor *src) {
    return inplace_op(IP_COPY, a, src, 0, RM_OP_SITE());
}
