/* src/ops/driver.c — rm_dispatch, the one driver of every op (the
 * steps are listed in dispatch.h). */
#include <string.h>

#include "../dispatch/dispatch.h"

int rm_op_save(remat_node *n, int slot, remat_tensor *t) {
    void *self;
    rm_saver_fn saver = rm_saver_current(&self);
    return saver ? saver(self, n, slot, t) : rm_node_save(n, slot, t);
}

static const char *const k_arg_names[RM_OP_MAX_IN] = {"a", "b", "c", "d", "e", "f"};

static int check_inputs(const rm_op_call *c) {
    const rm_op_desc *op = c->op;
    remat_tensor *const *in = c->in;
    const char *const *names = op->arg_names ? op->arg_names : k_arg_names;
    int rc = REMAT_OK;
    for (int i = 0; i < op->n_in && !rc; i++) {
        if (!in[i] && (op->optional_in >> i & 1u)) continue;
        bool is_float = (op->flags & RM_OPF_FLOAT) || (i == 0 && (op->flags & RM_OPF_FLOAT_IN0));
        rc = is_float ? rm_check_float_dtype(op->name, names[i], in[i])
                      : rm_check_tensor(op->name, names[i], in[i]);
        if (!rc && i > 0 && in[0] && (op->flags & RM_OPF_SAME_DTYPE))
            rc = rm_check_same_dtype(op->name, in[0], in[i]);
        if (!rc && i > 0 && in[0] && (op->flags & RM_OPF_SAME_DEVICE))
            rc = rm_check_same_device(op->name, in[0], in[i]);
    }
    if (!rc && op->check) rc = op->check(c);
    return rc;
}

/* Whether slot s of the plan is to be saved, given which inputs need a
 * gradient (the node's edges). */
static bool slot_wanted(const rm_op_call *c, const rm_save_spec *s) {
    if (!s->for_grads) return true;
    for (int i = 0; i < c->node->n_next; i++)
        if ((s->for_grads >> i & 1u) && c->node->next[i].node) return true;
    return false;
}

/* Saves the plan's slots, in slot order: before the kernel (early) the
 * inputs of an RM_OPF_SAVE_EARLY op, after it (late) every other slot.
 * Slot order is the order the ops saved in before the driver, which the
 * saved-tensor hooks see. */
static int save_slots(rm_op_call *c, bool early) {
    const rm_op_desc *op = c->op;
    const bool early_inputs = op->flags & RM_OPF_SAVE_EARLY;
    for (int s = 0; s < op->n_saved; s++) {
        const rm_save_spec *sp = &op->saves[s];
        rm_save_kind kind = (rm_save_kind)sp->kind;
        if (kind == RM_SAVE_NONE || (kind == RM_SAVE_INPUT && early_inputs) != early ||
            !slot_wanted(c, sp))
            continue;
        int rc;
        if (kind == RM_SAVE_CUSTOM) {
            remat_tensor *t = NULL;
            rc = op->save_custom(c, s, &t);
            if (!rc) rc = rm_op_save(c->node, s, t);
            remat_release(t);
        } else {
            rc = rm_op_save(c->node, s, kind == RM_SAVE_INPUT ? c->in[sp->index] : c->k.out[sp->index]);
        }
        if (rc) return rc;
    }
    return REMAT_OK;
}

static void release_call(rm_op_call *c) {
    rm_node_release(c->node);
    for (int i = 0; i < c->op->n_in; i++) remat_release(c->k.in[i]);
    for (int i = 0; i < c->op->n_out; i++) remat_release(c->k.out[i]);
}

static int n_ret(const rm_op_desc *op) { return op->n_ret ? op->n_ret : op->n_out; }

/* out = a view of in's storage with the spec's geometry. */
static int make_view(remat_tensor **out, remat_tensor *in, const rm_out_spec *sp) {
    remat_tensor *v = rm_tensor_alloc(in->storage, sp->offset, sp->ndim, sp->shape, sp->strides,
                                      in->dtype);
    if (!v) return rm_err(REMAT_ENOMEM, "out of memory creating a view");
    v->is_view = true;
    *out = v;
    return REMAT_OK;
}

/* Steps 1-6 without the interception bracket. */
static int run(const rm_op_desc *op, remat_tensor **outs, remat_tensor *const *in,
               const void *params) {
    const char *call = op->name;
    rm_op_enter(call);
    if (!outs) return rm_err(REMAT_EINVAL, "%s: out must not be NULL", call);
    const int nr = n_ret(op), ng = op->n_grad_out ? op->n_grad_out : nr;
    const int ngi = op->n_grad_in ? op->n_grad_in : op->n_in;
    for (int i = 0; i < nr; i++) outs[i] = NULL;
    rm_op_call c = {.op = op, .in = in, .params = params};
    int rc = check_inputs(&c);
    if (rc) return rc;
    rm_out_spec spec[RM_OP_MAX_OUT];
    bool any_new = true, all_inputs = false;
    if (op->infer) {
        for (int i = 0; i < op->n_out; i++) spec[i].kind = RM_OUT_NEW;
        spec[0].node_name = NULL;
        rc = op->infer(&c, spec);
        if (rc) return rc;
        all_inputs = true;
        for (int i = 0; i < nr; i++) all_inputs &= spec[i].kind == RM_OUT_INPUT;
        any_new = false;
        for (int i = 0; i < (all_inputs ? nr : op->n_out); i++)
            any_new |= spec[i].kind == RM_OUT_NEW;
    } else {
        spec[0].ndim = in[0]->ndim;
        memcpy(spec[0].shape, in[0]->shape, sizeof spec[0].shape);
        spec[0].dtype = in[0]->dtype;
        spec[0].kind = RM_OUT_NEW;
        spec[0].node_name = NULL;
    }
    const remat_device device = in[0]->storage->device;
    rm_kernel_fn kernel = NULL;
    if (any_new && (rc = rm_kernel_find(op->kernel, device, in[0]->dtype, call, &kernel)))
        return rc;

    /* A node unless every handed-out output is an input itself (dropout in
     * eval mode, contiguous of a contiguous tensor) */
    if (!all_inputs && (op->n_saved || op->backward) && rm_needs_grad(ngi, in)) {
        const char *node_name = spec[0].node_name ? spec[0].node_name : op->node_name;
        rc = rm_node_new_ctx(&c.node, node_name, op->backward, ngi, in, ng, op->n_saved, params,
                             op->params_size);
        if (!rc) c.node->backward_diff = op->backward_diff;
        if (!rc && op->fill_ctx) op->fill_ctx(&c, c.node->ctx);
        if (!rc && (op->flags & RM_OPF_SAVE_EARLY)) rc = save_slots(&c, true);
        if (rc) goto fail;
    }
    for (int i = 0; i < op->n_in; i++) {
        if (!in[i]) continue; /* an optional input not given */
        if (any_new && (op->flags & RM_OPF_CONTIGUOUS)) rc = rm_contig(&c.k.in[i], in[i]);
        else c.k.in[i] = remat_retain(in[i]);
        if (rc) goto fail;
    }
    for (int i = 0; i < op->n_out; i++) {
        /* by-products only the node reads, and those of an identity call: not made */
        if (((op->grad_only_out >> i & 1u) && !c.node) || (all_inputs && i >= nr)) continue;
        switch (spec[i].kind) {
        case RM_OUT_NEW:
            rc = op->new_output ? op->new_output(&c, i, &spec[i], device, &c.k.out[i])
                                : rm_new_output(&c.k.out[i], spec[i].ndim, spec[i].shape,
                                                spec[i].dtype, device);
            break;
        case RM_OUT_VIEW: rc = make_view(&c.k.out[i], in[0], &spec[i]); break;
        case RM_OUT_INPUT: c.k.out[i] = remat_retain(in[0]); break;
        }
        if (rc) goto fail;
    }
    c.k.params = params;
    if (any_new && rm_kargs_have_data(&c.k) && (rc = kernel(&c.k))) goto fail;
    if (c.node) {
        for (int i = 0; i < ng; i++) rm_node_set_output(c.node, i, c.k.out[i]);
        rc = save_slots(&c, false);
        if (rc) goto fail;
    }
    for (int i = 0; i < nr; i++) {
        outs[i] = c.k.out[i];
        c.k.out[i] = NULL;
    }
    release_call(&c);
    /* all registered with the open scope, or (ENOMEM) all released and NULL */
    return rm_hand_out_n(outs, nr);
fail:
    release_call(&c);
    return rm_err_prefix(rc, call);
}

int rm_dispatch(const rm_op_desc *op, remat_tensor **outs, remat_tensor *const *in,
                const void *params, void *site) {
    rm_op_frame f;
    int rc = rm_op_begin(&f, op->name, op->n_in, in, site, NULL);
    if (rc) {
        if (outs)
            for (int i = 0; i < n_ret(op); i++) outs[i] = NULL;
        return rc;
    }
    rc = run(op, outs, in, params);
    rm_op_end(&f, rc, outs && !rc ? n_ret(op) : 0, outs);
    return rc;
}

int rm_saved_contig(remat_node *node, int slot, const char *missing, remat_tensor **out) {
    *out = NULL;
    remat_tensor *t = NULL;
    int rc = rm_node_unpack(node, slot, &t);
    if (rc) return rc;
    if (!t) return missing ? rm_err(REMAT_ESTATE, "%s: %s", node->name, missing) : REMAT_OK;
    rc = rm_contig(out, t);
    remat_release(t);
    return rc;
}
