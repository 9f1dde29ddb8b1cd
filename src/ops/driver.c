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

/* One run of the driver: the call and what infer decided. */
typedef struct run_state {
    rm_op_call c;
    rm_out_spec spec[RM_OP_MAX_OUT];
    bool any_new;    /* some output is made new: the kernel runs */
    bool all_inputs; /* every handed-out output is in[0] itself: no node, no kernel */
    remat_device device;
    rm_kernel_fn kernel;
} run_state;

static int n_grad_out(const rm_op_desc *op) { return op->n_grad_out ? op->n_grad_out : n_ret(op); }
static int n_grad_in(const rm_op_desc *op) { return op->n_grad_in ? op->n_grad_in : op->n_in; }

/* Step 2: output specs (infer, or one new output like in[0]) and the kernel. */
static int infer_outputs(run_state *r) {
    const rm_op_desc *op = r->c.op;
    remat_tensor *const *in = r->c.in;
    rm_out_spec *spec = r->spec;
    r->any_new = true;
    r->all_inputs = false;
    if (op->infer) {
        const int nr = n_ret(op);
        for (int i = 0; i < op->n_out; i++) spec[i].kind = RM_OUT_NEW;
        spec[0].node_name = NULL;
        int rc = op->infer(&r->c, spec);
        if (rc) return rc;
        r->all_inputs = true;
        for (int i = 0; i < nr; i++) r->all_inputs &= spec[i].kind == RM_OUT_INPUT;
        r->any_new = false;
        for (int i = 0; i < (r->all_inputs ? nr : op->n_out); i++)
            r->any_new |= spec[i].kind == RM_OUT_NEW;
    } else {
        spec[0].ndim = in[0]->ndim;
        memcpy(spec[0].shape, in[0]->shape, sizeof spec[0].shape);
        spec[0].dtype = in[0]->dtype;
        spec[0].kind = RM_OUT_NEW;
        spec[0].node_name = NULL;
    }
    r->device = in[0]->storage->device;
    r->kernel = NULL;
    return r->any_new ? rm_kernel_find(op->kernel, r->device, in[0]->dtype, op->name, &r->kernel)
                      : REMAT_OK;
}

/* Step 3: the node, unless no input needs a gradient or every handed-out
 * output is an input itself (dropout in eval mode, contiguous of a
 * contiguous tensor); then the early saves. */
static int make_node(run_state *r) {
    rm_op_call *c = &r->c;
    const rm_op_desc *op = c->op;
    const int ngi = n_grad_in(op);
    if (r->all_inputs || !(op->n_saved || op->backward) || !rm_needs_grad(ngi, c->in))
        return REMAT_OK;
    const char *node_name = r->spec[0].node_name ? r->spec[0].node_name : op->node_name;
    int rc = rm_node_new_ctx(&c->node, node_name, op->backward, ngi, c->in, n_grad_out(op),
                             op->n_saved, c->params, op->params_size);
    if (rc) return rc;
    if (op->fill_ctx) op->fill_ctx(c, c->node->ctx);
    return op->flags & RM_OPF_SAVE_EARLY ? save_slots(c, true) : REMAT_OK;
}

/* Step 4a: the kernel's inputs (contiguous copies when it wants them). */
static int take_inputs(run_state *r) {
    const rm_op_desc *op = r->c.op;
    remat_tensor *const *in = r->c.in;
    for (int i = 0; i < op->n_in; i++) {
        if (!in[i]) continue; /* an optional input not given */
        if (r->any_new && (op->flags & RM_OPF_CONTIGUOUS)) {
            int rc = rm_contig(&r->c.k.in[i], in[i]);
            if (rc) return rc;
        } else {
            r->c.k.in[i] = remat_retain(in[i]);
        }
    }
    return REMAT_OK;
}

/* Step 4b: the outputs, each as its spec says. By-products only the node
 * reads, and those of an identity call, are not made. */
static int make_outputs(run_state *r) {
    rm_op_call *c = &r->c;
    const rm_op_desc *op = c->op;
    const int nr = n_ret(op);
    for (int i = 0; i < op->n_out; i++) {
        const rm_out_spec *sp = &r->spec[i];
        if (((op->grad_only_out >> i & 1u) && !c->node) || (r->all_inputs && i >= nr)) continue;
        int rc = REMAT_OK;
        switch (sp->kind) {
        case RM_OUT_NEW:
            rc = op->new_output
                     ? op->new_output(c, i, sp, r->device, &c->k.out[i])
                     : rm_new_output(&c->k.out[i], sp->ndim, sp->shape, sp->dtype, r->device);
            break;
        case RM_OUT_VIEW: rc = make_view(&c->k.out[i], c->in[0], sp); break;
        case RM_OUT_INPUT: c->k.out[i] = remat_retain(c->in[0]); break;
        }
        if (rc) return rc;
    }
    return REMAT_OK;
}

/* Steps 3-5, each failure leaving the call to be released by the caller. */
static int run_steps(run_state *r) {
    rm_op_call *c = &r->c;
    int rc = make_node(r);
    if (!rc) rc = take_inputs(r);
    if (!rc) rc = make_outputs(r);
    if (rc) return rc;
    c->k.params = c->params;
    if (r->any_new && rm_kargs_have_data(&c->k) && (rc = r->kernel(&c->k))) return rc;
    if (!c->node) return REMAT_OK;
    for (int i = 0; i < n_grad_out(c->op); i++) rm_node_set_output(c->node, i, c->k.out[i]);
    return save_slots(c, false);
}

/* Steps 1-6 without the interception bracket. */
static int run(const rm_op_desc *op, remat_tensor **outs, remat_tensor *const *in,
               const void *params) {
    const char *call = op->name;
    rm_op_enter(call);
    if (!outs) return rm_err(REMAT_EINVAL, "%s: out must not be NULL", call);
    const int nr = n_ret(op);
    for (int i = 0; i < nr; i++) outs[i] = NULL;
    run_state r = {.c = {.op = op, .in = in, .params = params}};
    /* check and infer failures name the call themselves */
    int rc = check_inputs(&r.c);
    if (!rc) rc = infer_outputs(&r);
    if (rc) return rc;
    rc = run_steps(&r);
    if (rc) {
        release_call(&r.c);
        return rm_err_prefix(rc, call);
    }
    for (int i = 0; i < nr; i++) {
        outs[i] = r.c.k.out[i];
        r.c.k.out[i] = NULL;
    }
    release_call(&r.c);
    /* all registered with the open scope, or (ENOMEM) all released and NULL */
    return rm_hand_out_n(outs, nr);
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
