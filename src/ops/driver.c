/* src/ops/driver.c — rm_dispatch, the one driver of every op (the
 * steps are listed in op.h). */
#include <stdlib.h>
#include <string.h>

#include "autograd/accumulate.h"
#include "core/timing.h"
#include "op.h"

/* Autograd's recorded sums (create_graph) are ops: handed down when the
 * library loads. This file is in every link that runs an op, so every
 * graph that can need them has them. */
#if defined(__GNUC__)
__attribute__((constructor))
#endif
static void
install_graph_ops(void) {
    rm_set_graph_ops(&rm_ops_graph_ops);
}

remat_status rm_op_save(remat_node *n, int slot, remat_tensor *t) {
    void *self;
    rm_saver_fn saver = rm_saver_current(&self);
    return saver ? saver(self, n, slot, t) : rm_node_save(n, slot, t);
}

static const char *const k_arg_names[RM_OP_MAX_IN] = {"a", "b", "c", "d", "e", "f"};

static remat_status check_inputs(const rm_op_call *c) {
    const rm_op_desc *op = c->op;
    remat_tensor *const *in = c->in;
    const char *const *names = op->arg_names ? op->arg_names : k_arg_names;
    int rc = REMAT_OK;
    for (int i = 0; i < c->n_in && !rc && !(op->flags & RM_OPF_OWN_CHECKS); i++) {
        if (!in[i] && (op->optional_in >> i & 1u)) continue;
        bool is_float = (op->flags & RM_OPF_FLOAT) || (i == 0 && (op->flags & RM_OPF_FLOAT_IN0));
        bool is_index = i == 1 && (op->flags & RM_OPF_INDEX_IN1);
        rc = is_float ? rm_check_float_dtype(op->name, names[i], in[i])
             : is_index
                 ? rm_check_dtype_in(op->name, names[i], in[i], RM_DTYPE_BIT(REMAT_I64), "i64")
                 : rm_check_tensor(op->name, names[i], in[i]);
        if (!rc && i > 0 && in[0] && (op->flags & RM_OPF_SAME_DTYPE))
            rc = rm_check_same_dtype(op->name, in[0], in[i]);
        if (!rc && i > 0 && in[0] && ((op->flags & RM_OPF_SAME_DEVICE) || is_index))
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
 * inputs and custom slots of an RM_OPF_SAVE_EARLY op, after it (late)
 * every other slot.
 * Slot order is the order the ops saved in before the driver, which the
 * saved-tensor hooks see. */
static remat_status save_slots(rm_op_call *c, bool early) {
    const rm_op_desc *op = c->op;
    const bool early_op = op->flags & RM_OPF_SAVE_EARLY;
    for (int s = 0; s < op->n_saved; s++) {
        const rm_save_spec *sp = &op->saves[s];
        rm_save_kind kind = (rm_save_kind)sp->kind;
        if (kind == RM_SAVE_NONE || (kind != RM_SAVE_OUTPUT && early_op) != early ||
            !slot_wanted(c, sp))
            continue;
        int rc;
        if (kind == RM_SAVE_CUSTOM) {
            remat_tensor *t = NULL;
            rc = op->save_custom(c, s, &t);
            if (!rc) rc = rm_op_save(c->node, s, t);
            rm_release(t);
        } else {
            rc = rm_op_save(c->node, s,
                            kind == RM_SAVE_INPUT ? c->in[sp->index] : c->out[sp->index]);
        }
        if (rc) return rc;
    }
    return REMAT_OK;
}

static void release_call(rm_op_call *c) {
    rm_node_release(c->node);
    for (int i = 0; i < RM_KERNEL_MAX_IN; i++) rm_release(c->k.in[i]);
    for (int i = 0; i < c->n_out; i++) rm_release(c->out[i]);
}

/* Outputs handed to the caller (none in place; a variadic op's are all). */
static int n_ret(const rm_op_desc *op) {
    if (op->flags & RM_OPF_INPLACE) return 0;
    return op->n_ret ? op->n_ret : op->n_out;
}

/* out = a view of in's storage with the spec's geometry. */
static remat_status make_view(remat_tensor **out, remat_tensor *in, const rm_out_spec *sp) {
    remat_tensor *v =
        rm_tensor_alloc(in->storage, sp->offset, sp->ndim, sp->shape, sp->strides, in->dtype);
    if (!v) return rm_err(REMAT_ENOMEM, "out of memory creating a view");
    v->is_view = true;
    *out = v;
    return REMAT_OK;
}

/* One run of the driver: the call and what infer decided. */
typedef struct run_state {
    rm_op_call c;
    int nr;            /* outputs handed out */
    rm_out_spec *spec; /* c.n_out of them: fixed below, or allocated (variadic outputs) */
    rm_out_spec fixed[RM_OP_MAX_OUT];
    bool any_new;    /* some output is made new (or written in place): the kernel runs */
    bool all_inputs; /* every handed-out output is in[0] itself: no node, no kernel */
    remat_device device;
    rm_kernel_fn kernel;
} run_state;

/* Outputs the node differentiates (an in-place op's: its target). */
static int n_grad_out(const run_state *r) {
    const rm_op_desc *op = r->c.op;
    if (op->n_grad_out) return op->n_grad_out;
    return op->flags & RM_OPF_INPLACE ? r->c.n_out : r->nr;
}

/* Step 2: output specs (infer, or one new output like in[0]; in place:
 * in[0] itself) and the kernel. */
static remat_status infer_outputs(run_state *r) {
    const rm_op_desc *op = r->c.op;
    remat_tensor *const *in = r->c.in;
    rm_out_spec *spec = r->spec;
    const remat_tensor *kin = in[op->dtype_in];
    r->any_new = true;
    r->all_inputs = false;
    spec[0].node_name = NULL;
    spec[0].other_device = false;
    if (op->infer) {
        for (int i = 0; i < r->c.n_out; i++) {
            spec[i].kind = RM_OUT_NEW;
            spec[i].dtype = kin->dtype;
            spec[i].other_device = false;
        }
        int rc = op->infer(&r->c, spec);
        if (rc) return rc;
        r->all_inputs = true;
        for (int i = 0; i < r->nr; i++) r->all_inputs &= spec[i].kind == RM_OUT_INPUT;
        r->any_new = false;
        for (int i = 0; i < (r->all_inputs ? r->nr : r->c.n_out); i++)
            r->any_new |= spec[i].kind == RM_OUT_NEW;
    } else {
        spec[0].ndim = kin->ndim;
        memcpy(spec[0].shape, kin->shape, sizeof spec[0].shape);
        spec[0].dtype = kin->dtype;
        spec[0].kind = (op->flags & RM_OPF_INPLACE) ? RM_OUT_INPUT : RM_OUT_NEW;
    }
    r->device = in[0]->storage->device;
    r->kernel = op->direct;
    if (!r->any_new || r->kernel) return REMAT_OK;
    return rm_kernel_find(op->kernel, r->device, kin->dtype, op->name, &r->kernel);
}

/* Integer outputs have no gradient (to_dtype to i64 records no node). */
static bool differentiable(remat_dtype dt) { return dt != REMAT_I64 && dt != REMAT_U8; }

/* The node with the inputs that get edges (gin) and its ctx: a copy of the
 * params, with ctx_per_in bytes per input after them for fill_ctx. */
static remat_status new_node(run_state *r, int ngi, remat_tensor *const *gin) {
    rm_op_call *c = &r->c;
    const rm_op_desc *op = c->op;
    const char *node_name = r->spec[0].node_name ? r->spec[0].node_name : op->node_name;
    if (!op->ctx_per_in)
        return rm_node_new_ctx(&c->node, node_name, op->backward, ngi, gin, n_grad_out(r),
                               op->n_saved, c->params, op->params_size);
    int rc = rm_node_new(&c->node, node_name, op->backward, ngi, gin, n_grad_out(r), op->n_saved);
    if (rc) return rc;
    char *ctx = malloc(op->params_size + (size_t)op->ctx_per_in * (size_t)c->n_in);
    if (!ctx) return rm_err(REMAT_ENOMEM, "%s: out of memory for the node's parameters", node_name);
    memcpy(ctx, c->params, op->params_size);
    rm_node_set_ctx(c->node, ctx, NULL);
    return REMAT_OK;
}

/* Step 3: the node, unless no differentiated input needs a gradient, the
 * output is not a float (a copy to i64), or every handed-out output is an
 * input itself (dropout in eval mode, contiguous of a contiguous tensor);
 * then the early saves. */
static remat_status make_node(run_state *r) {
    rm_op_call *c = &r->c;
    const rm_op_desc *op = c->op;
    remat_tensor *fixed[RM_OP_MAX_IN];
    remat_tensor *const *gin = c->in;
    int ngi = c->n_in;
    if (op->no_grad_in) {
        gin = fixed;
        ngi = 0;
        for (int i = 0; i < c->n_in; i++)
            if (!(op->no_grad_in >> i & 1u)) fixed[ngi++] = c->in[i];
    }
    if (r->all_inputs || !(op->n_saved || op->backward) || !differentiable(r->spec[0].dtype) ||
        !rm_needs_grad(ngi, gin))
        return REMAT_OK;
    int rc = new_node(r, ngi, gin);
    if (rc) return rc;
    c->node->backward_diff = op->backward_diff;
    if (op->fill_ctx) op->fill_ctx(c, c->node->ctx);
    return op->flags & RM_OPF_SAVE_EARLY ? save_slots(c, true) : REMAT_OK;
}

/* Whether b and a are the very same view (same storage, offset, geometry). */
static bool same_view(const remat_tensor *a, const remat_tensor *b) {
    size_t nb = sizeof(int64_t) * (size_t)a->ndim;
    return a->storage == b->storage && b->offset == a->offset && b->ndim == a->ndim &&
           b->dtype == a->dtype && memcmp(b->shape, a->shape, nb) == 0 &&
           memcmp(b->strides, a->strides, nb) == 0;
}

/* An in-place op's operand b: b itself, or a copy when it shares memory
 * with the target a other than as the same view (reading b while writing a
 * could read values already updated). */
static remat_status inplace_operand(remat_tensor **out, remat_tensor *a, remat_tensor *b) {
    if (!remat_shares_storage(a, b) || same_view(a, b)) {
        *out = rm_retain(b);
        return REMAT_OK;
    }
    return rm_copy_new(out, b);
}

/* Step 4a: the kernel's inputs (contiguous copies when it wants them; an
 * in-place op's target as it is; none for a variadic op, whose run hook
 * reads c->in). */
static remat_status take_inputs(run_state *r) {
    const rm_op_desc *op = r->c.op;
    remat_tensor *const *in = r->c.in;
    const bool inplace = op->flags & RM_OPF_INPLACE;
    if (op->flags & RM_OPF_VARIADIC) return REMAT_OK;
    for (int i = 0; i < op->n_in; i++) {
        int rc = REMAT_OK;
        if (!in[i]) continue; /* an optional input not given */
        if (inplace && i > 0) rc = inplace_operand(&r->c.k.in[i], in[0], in[i]);
        else if (r->any_new && !inplace && (op->flags & RM_OPF_CONTIGUOUS))
            rc = rm_contig(&r->c.k.in[i], in[i]);
        else r->c.k.in[i] = rm_retain(in[i]);
        if (rc) return rc;
    }
    return REMAT_OK;
}

/* Step 4b: the outputs, each as its spec says. By-products only the node
 * reads, and those of an identity call, are not made. */
static remat_status make_outputs(run_state *r) {
    rm_op_call *c = &r->c;
    const rm_op_desc *op = c->op;
    for (int i = 0; i < c->n_out; i++) {
        const rm_out_spec *sp = &r->spec[i];
        if (((op->grad_only_out >> i & 1u) && !c->node) || (r->all_inputs && i >= r->nr)) continue;
        const remat_device dev = sp->other_device ? sp->device : r->device;
        int rc = REMAT_OK;
        switch (sp->kind) {
        case RM_OUT_NEW:
            rc = op->new_output ? op->new_output(c, i, sp, dev, &c->out[i])
                                : rm_new_output(&c->out[i], sp->ndim, sp->shape, sp->dtype, dev);
            break;
        case RM_OUT_VIEW: rc = make_view(&c->out[i], c->in[0], sp); break;
        case RM_OUT_INPUT: c->out[i] = rm_retain(c->in[0]); break;
        }
        if (rc) return rc;
    }
    return REMAT_OK;
}

/* Step 4c: the kernel, unless an operand has no data (skip mode); an
 * in-place op's version bump. */
static remat_status run_kernel(run_state *r) {
    rm_op_call *c = &r->c;
    c->k.params = c->params;
    int rc = REMAT_OK;
    if (r->any_new && rm_kargs_have_data(&c->k)) {
        rm_timing_span sp;
        const bool timed =
            rm_timing_on() && rm_timing_begin(&sp, c->op->kernel, c->op->name, &c->k);
        rc = c->op->run ? c->op->run(c, r->kernel) : r->kernel(&c->k);
        if (timed) rm_timing_end(&sp);
    }
    /* the target's version moves in skip mode too */
    if (!rc && (c->op->flags & RM_OPF_INPLACE)) rm_bump_version(c->in[0]);
    return rc;
}

/* Step 5: the node's outputs and the late saves (an in-place op saves
 * first: its output is the target, whose history the node takes over). */
static remat_status finish_node(run_state *r) {
    rm_op_call *c = &r->c;
    if (!c->node) return REMAT_OK;
    const bool inplace = c->op->flags & RM_OPF_INPLACE;
    int rc = inplace ? save_slots(c, false) : REMAT_OK;
    if (rc) return rc;
    for (int i = 0; i < n_grad_out(r); i++) rm_node_set_output(c->node, i, c->out[i]);
    return inplace ? REMAT_OK : save_slots(c, false);
}

/* Steps 3-5, each failure leaving the call to be released by the caller.
 * An in-place op takes its operands first: a copy of an overlapping
 * operand is what it reads and saves. */
static remat_status run_steps(run_state *r) {
    int rc;
    if (r->c.op->flags & RM_OPF_INPLACE) {
        rc = take_inputs(r);
        if (!rc) rc = make_node(r);
    } else {
        rc = make_node(r);
        if (!rc) rc = take_inputs(r);
    }
    if (!rc) rc = make_outputs(r);
    if (!rc) rc = run_kernel(r);
    if (!rc && r->c.op->finish) rc = r->c.op->finish(&r->c);
    if (!rc) rc = finish_node(r);
    return rc;
}

/* The output count of a variadic-output op (after its checks) and room
 * for its specs and outputs beyond the fixed arrays. */
static remat_status size_outputs(run_state *r) {
    rm_op_call *c = &r->c;
    if (!c->op->n_outputs) return REMAT_OK;
    c->n_out = r->nr = c->op->n_outputs(c);
    if (c->n_out <= RM_OP_MAX_OUT) return REMAT_OK;
    r->spec = malloc(sizeof *r->spec * (size_t)c->n_out);
    c->out = calloc((size_t)c->n_out, sizeof *c->out);
    if (r->spec && c->out) return REMAT_OK;
    return rm_err(REMAT_ENOMEM, "%s: out of memory", c->op->name);
}

static void free_outputs(run_state *r) {
    if (r->spec != r->fixed) free(r->spec);
    if (r->c.out != r->c.k.out) free(r->c.out);
}

/* Steps 1-6 without the interception bracket; *n_out gets the number of
 * outputs handed out. */
static remat_status run(const rm_op_desc *op, remat_tensor **outs, int *n_out, int n_in,
                        remat_tensor *const *in, const void *params) {
    const char *call = op->name;
    rm_op_enter(call);
    /* a variadic-output op's check checks outs itself, and clears it */
    if (!outs && !(op->flags & RM_OPF_INPLACE) && !op->n_outputs)
        return rm_err(REMAT_EINVAL, "%s: out must not be NULL", call);
    run_state r = {.c = {.op = op, .in = in, .params = params, .n_in = n_in, .n_out = op->n_out},
                   .nr = n_ret(op)};
    r.c.out = r.c.k.out;
    r.spec = r.fixed;
    for (int i = 0; i < r.nr && !op->n_outputs; i++) outs[i] = NULL;
    /* check and infer failures name the call themselves */
    int rc = check_inputs(&r.c);
    if (!rc) rc = size_outputs(&r);
    if (!rc) rc = infer_outputs(&r);
    if (!rc) {
        rc = run_steps(&r);
        if (rc) rc = rm_err_prefix(rc, call);
    }
    if (rc) {
        release_call(&r.c);
        free_outputs(&r);
        return rc;
    }
    for (int i = 0; i < r.nr; i++) {
        outs[i] = r.c.out[i];
        r.c.out[i] = NULL;
        if (outs[i] && !outs[i]->origin) outs[i]->origin = call;
    }
    release_call(&r.c);
    free_outputs(&r);
    /* all registered with the open scope, or (ENOMEM) all released and NULL */
    rc = rm_hand_out_n(outs, r.nr);
    *n_out = rc ? 0 : r.nr;
    return rc;
}

remat_status rm_dispatch_n(const rm_op_desc *op, remat_tensor **outs, int *n_out, int n_in,
                           remat_tensor *const *in, const void *params, void *site) {
    rm_op_frame f;
    int nr = 0;
    /* a released input is reported before anything reads it (its struct is
     * type-stable: reading `dead` is safe whatever happened since) */
    for (int i = 0; i < n_in && in; i++) {
        if (!in[i] || !rm_dead(in[i])) continue;
        if (outs && !op->n_outputs)
            for (int k = 0; k < n_ret(op); k++) outs[k] = NULL;
        const char *const *names = op->arg_names ? op->arg_names : k_arg_names;
        bool listed = (op->flags & RM_OPF_VARIADIC) || i >= RM_OP_MAX_IN;
        return rm_released_err(op->name, listed ? "tensors" : names[i], in[i]);
    }
    rm_note_leaf_reads(n_in, in); /* a reentrant checkpoint's forward records them */
    /* autocast: the op (and its bracket: policies, traces) sees the cast inputs */
    remat_tensor *use[RM_OP_MAX_IN], *cast[RM_OP_MAX_IN] = {0};
    const bool ac = op->autocast && n_in <= RM_OP_MAX_IN;
    int rc = ac ? rm_autocast_inputs(op, n_in, in, use, cast) : REMAT_OK;
    if (!rc && ac) in = use;
    if (!rc) rc = rm_op_begin(&f, op->name, n_in, in, site, op->tag ? op->tag(params) : NULL);
    if (rc) {
        if (outs && !op->n_outputs)
            for (int i = 0; i < n_ret(op); i++) outs[i] = NULL;
    } else {
        rc = run(op, outs, &nr, n_in, in, params);
        rm_op_end(&f, rc, nr, outs);
    }
    for (int i = 0; ac && i < n_in; i++) rm_release(cast[i]);
    if (n_out) *n_out = nr;
    return rc;
}

remat_status rm_dispatch(const rm_op_desc *op, remat_tensor **outs, remat_tensor *const *in,
                         const void *params, void *site) {
    return rm_dispatch_n(op, outs, NULL, op->n_in, in, params, site);
}

remat_status rm_saved_contig(remat_node *node, int slot, const char *missing, remat_tensor **out) {
    *out = NULL;
    remat_tensor *t = NULL;
    int rc = rm_node_unpack(node, slot, &t);
    if (rc) return rc;
    if (!t) return missing ? rm_err(REMAT_ESTATE, "%s: %s", node->name, missing) : REMAT_OK;
    rc = rm_contig(out, t);
    rm_release(t);
    return rc;
}

remat_status rm_grad_kernel(const remat_node *node, rm_kernel_id kid, remat_tensor *g,
                            remat_tensor *s, int ndim, const int64_t *shape, const void *params,
                            remat_tensor **gin) {
    remat_tensor *dx = NULL;
    int rc = shape ? rm_new_output(&dx, ndim, shape, g->dtype, g->storage->device)
                   : rm_new_output(&dx, g->ndim, g->shape, g->dtype, g->storage->device);
    if (!rc) {
        rm_kargs k = {.in = {g, s}, .out = {dx}, .params = params};
        rc = rm_kernel_run(kid, node->name, &k);
    }
    if (rc) rm_release(dx);
    else *gin = dx;
    return rc;
}

remat_status rm_backward_kernel(remat_node *node, remat_tensor *const *gout, remat_tensor **gin,
                                rm_kernel_id kid, int slot, const char *missing, int ndim,
                                const int64_t *shape, const void *params) {
    if (!node->next[0].node) return REMAT_OK;
    remat_tensor *s = NULL, *g = NULL;
    int rc = slot >= 0 ? rm_saved_contig(node, slot, missing, &s) : REMAT_OK;
    if (!rc) rc = rm_contig(&g, gout[0]);
    if (!rc) rc = rm_grad_kernel(node, kid, g, s, ndim, shape, params, &gin[0]);
    rm_release(s);
    rm_release(g);
    return rc;
}
