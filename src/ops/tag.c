/* src/ops/tag.c — remat_tag: the named-residual identity op (JAX:
 * checkpoint_name). The output is a view of the input (no copy) carrying
 * the name; the gradient passes through unchanged. Its only purpose is to
 * be seen by selective-checkpoint policies as op "remat_tag" with the name
 * in ctx->tag (and to name the tensor in residual reports). */
#include <string.h>

#include "op.h"
#include "remat/selective.h"

typedef struct tag_params {
    const char *name;
} tag_params;

static remat_status tag_backward(remat_node *node, remat_tensor *const *gout, remat_tensor **gin) {
    if (!node->next[0].node) return REMAT_OK;
    gin[0] = rm_retain(gout[0]);
    return REMAT_OK;
}

/* The backward hands g on as it is: an f32 gradient for a bf16 tagged
 * tensor is rounded by the next node, or taken as it is by one whose kernel
 * reads it (linear under cpu autocast; buffer donation, rm_donation_read_wide). */
static void tag_fill_ctx(const rm_op_call *c, void *ctx) {
    (void)ctx;
    rm_donation_read_wide(c->node, RM_DONATION_PASS);
}

static remat_status tag_check(const rm_op_call *c) {
    const char *name = ((const tag_params *)c->params)->name;
    if (!name || !name[0])
        return rm_err(REMAT_EINVAL, "%s: name must be a non-empty string, got %s", c->op->name,
                      name ? "\"\"" : "NULL");
    return REMAT_OK;
}

/* y: a view of t with t's geometry. */
static remat_status tag_infer(const rm_op_call *c, rm_out_spec *out) {
    const remat_tensor *t = c->in[0];
    out[0].kind = RM_OUT_VIEW;
    out[0].ndim = t->ndim;
    memcpy(out[0].shape, t->shape, sizeof out[0].shape);
    memcpy(out[0].strides, t->strides, sizeof out[0].strides);
    out[0].offset = t->offset;
    out[0].dtype = t->dtype;
    return REMAT_OK;
}

static remat_status tag_finish(rm_op_call *c) {
    return remat_set_name(c->out[0], ((const tag_params *)c->params)->name);
}

/* An empty or NULL name reaches the policy as no tag (the check rejects it). */
static const char *tag_of(const void *params) {
    const char *name = ((const tag_params *)params)->name;
    return name && name[0] ? name : NULL;
}

static const char *const k_t_name[] = {"t"};

const rm_op_desc rm_op_tag = RM_OP_DESC(
    "remat_tag", "TagBackward", .n_in = 1, .n_out = 1, .arg_names = k_t_name,
    .fill_ctx = tag_fill_ctx, .check = tag_check, .infer = tag_infer, .finish = tag_finish,
    .tag = tag_of, .backward = tag_backward, .backward_diff = tag_backward);

remat_status remat_tag(remat_tensor **out, remat_tensor *t, const char *name) {
    const tag_params p = {name};
    remat_tensor *in[1] = {t};
    return rm_dispatch(&rm_op_tag, out, in, &p, RM_OP_SITE());
}
