/* src/sac/tag.c — remat_tag: the named-residual identity op (JAX:
 * checkpoint_name). The output is a view of the input (no copy) carrying
 * the name; the gradient passes through unchanged. Its only purpose is to
 * be seen by selective-checkpoint policies as op "remat_tag" with the name
 * in ctx->tag (and to name the tensor in residual reports). */
#include <stdlib.h>
#include <string.h>

#include "sac.h"

static int tag_backward(remat_node *node, remat_tensor *const *gout, remat_tensor **gin) {
    if (!node->next[0].node) return REMAT_OK;
    gin[0] = remat_retain(gout[0]);
    return REMAT_OK;
}

static int tag_impl(remat_tensor **out, remat_tensor *t, const char *name) {
    const char *call = "remat_tag";
    rm_op_enter(call);
    if (!out) return rm_err(REMAT_EINVAL, "%s: out must not be NULL", call);
    *out = NULL;
    int rc = rm_check_tensor(call, "t", t);
    if (rc) return rc;
    if (!name || !name[0])
        return rm_err(REMAT_EINVAL, "%s: name must be a non-empty string, got %s", call,
                      name ? "\"\"" : "NULL");
    remat_tensor *y = rm_tensor_alloc(t->storage, t->offset, t->ndim, t->shape, t->strides,
                                      t->dtype);
    if (!y) return rm_err(REMAT_ENOMEM, "%s: out of memory", call);
    y->is_view = true;
    rc = remat_set_name(y, name);
    if (rc) {
        remat_release(y);
        return rm_err_prefix(rc, call);
    }
    if (rm_needs_grad(1, &t)) {
        remat_node *node;
        rc = rm_node_new(&node, "TagBackward", tag_backward, 1, &t, 1, 0);
        if (rc == REMAT_OK) {
            rm_node_set_output(node, 0, y);
            rm_node_release(node);
        }
        if (rc) {
            remat_release(y);
            return rm_err_prefix(rc, call);
        }
    }
    return rm_hand_out(out, y);
}

int remat_tag(remat_tensor **out, remat_tensor *t, const char *name) {
    remat_tensor *in[1] = {t};
    /* an empty or NULL name reaches the policy as no tag: tag_impl rejects it */
    RM_OP_RUN1("remat_tag", out, 1, in, name && name[0] ? name : NULL, tag_impl(out, t, name));
}
