/* src/autograd/graph.h — the autograd layer's private declarations: graph
 * nodes, their saved tensors and edges, and what backward functions may
 * call. Not installed. */
#ifndef REMAT_AUTOGRAD_GRAPH_H
#define REMAT_AUTOGRAD_GRAPH_H

#include "core/core.h"
#include "core/kernels.h"

/* ---- autograd graph --------------------------------------------------------- */
typedef struct rm_saved {
    bool defined;
    bool was_output;    /* saved tensor is an output of the node (informational) */
    remat_tensor *data; /* saved directly (no hooks): detached alias */
    void *handle;       /* packed by hooks */
    remat_saved_hooks hooks;
    bool has_hooks;
    bool freed;
    uint64_t saved_version;
    /* The saved tensor's place in the graph (PyTorch: SavedVariable's grad_fn,
     * output_nr, requires_grad, grad_accumulator): under create_graph the
     * unpacked tensor is rebuilt with it, so a backward written with
     * differentiable ops records a graph that reaches the forward graph.
     * grad_node is an owned reference to the tensor's grad_fn (a non-leaf
     * that is not an output of this node) or to its AccumulateGrad node (a
     * leaf that requires grad); NULL for an output of this node (its
     * grad_fn is the node itself: a reference would be a cycle) and for a
     * tensor that does not require grad. */
    remat_node *grad_node;
    int output_nr;
    bool requires_grad;
    bool leaf; /* grad_node is an AccumulateGrad node */
    /* metadata kept for error messages */
    int ndim;
    int64_t shape[REMAT_MAX_DIMS];
    remat_dtype dtype;
    remat_device device;
} rm_saved;

typedef struct rm_edge {
    remat_node *node; /* owned reference (NULL: no grad needed) */
    int input_nr;
} rm_edge;

/* A node's backward: grad_inputs[i] (NULL on entry) gets a new reference to
 * the gradient of input i, or stays NULL (none). The caller owns what was
 * written there whether or not the call succeeds (so a backward may build
 * its gradients in place and simply return a failure). */
typedef remat_status (*rm_backward_fn)(remat_node *node, remat_tensor *const *grad_outputs,
                                       remat_tensor **grad_inputs);

typedef struct rm_node_hook {
    int output_nr;
    remat_grad_hook_fn fn;
    void *user_data;
    struct rm_node_hook *next;
} rm_node_hook;

typedef struct rm_out_meta {
    int ndim;
    int64_t shape[REMAT_MAX_DIMS];
    remat_dtype dtype;
    remat_device device;
} rm_out_meta;

struct remat_node {
    rm_node_head head;   /* refcount, release (src/core/core.h) */
    const char *name;    /* static string */
    char *owned_name;    /* for custom functions */
    const char *op_name; /* the public op that recorded it (NULL: name) */
    rm_backward_fn backward;
    /* The backward create_graph runs when the node's gradient must itself
     * be differentiable (a gradient or a saved tensor requires grad): one
     * written with differentiable ops (it runs with grad mode on). NULL:
     * the op has no second derivative in remat; create_graph through it
     * fails with REMAT_EUNSUPPORTED naming the op. */
    rm_backward_fn backward_diff;
    uint64_t seq;
    int n_next; /* one per differentiable input of the op */
    rm_edge *next;
    int n_outputs;
    rm_out_meta *out_meta;
    int n_saved;
    rm_saved *saved;
    void *ctx; /* op-specific parameters */
    void (*ctx_free)(void *ctx);
    remat_tensor *leaf; /* AccumulateGrad: the leaf (owned) */
    rm_node_hook *hooks;
    bool released; /* saved tensors freed by a backward pass */
    /* Buffer donation, the gradient side: the kernel its backward reads an f32 gradient for
     * a bf16 output with, as the engine holds it (rm_donation_read_wide); RM_DONATION_PASS:
     * it hands that gradient on as it is; -1 (node_alloc's): none, the engine rounds it. */
    int wide_grad_reader;
};

/* True if grad mode is on and any of the n inputs (NULL allowed) requires grad. */
bool rm_needs_grad(int n, remat_tensor *const *inputs);
/* Creates a node for an op with n_inputs inputs (NULL or non-grad inputs get
 * empty edges), n_outputs outputs and room for n_saved saved tensors. */
remat_status rm_node_new(remat_node **out, const char *name, rm_backward_fn backward, int n_inputs,
                         remat_tensor *const *inputs, int n_outputs, int n_saved);
/* rm_node_new, then a copy of ctx_size bytes of ctx as the node's ctx
 * (freed with the node); ctx_size 0: no ctx. */
remat_status rm_node_new_ctx(remat_node **out, const char *name, rm_backward_fn backward,
                             int n_inputs, remat_tensor *const *inputs, int n_outputs, int n_saved,
                             const void *ctx, size_t ctx_size);
/* Drops a reference to the node. */
void rm_node_release(remat_node *n);
remat_node *rm_node_retain(remat_node *n);
/* Saves t (may be NULL) into slot i, through the saved-tensor hooks. */
remat_status rm_node_save(remat_node *n, int slot, remat_tensor *t);
/* Unpacks saved slot i: a new reference (NULL if the slot was saved NULL). */
remat_status rm_node_unpack(remat_node *n, int slot, remat_tensor **out);
/* Attaches output `t` as output i of the node (sets grad_fn, requires_grad). */
void rm_node_set_output(remat_node *n, int i, remat_tensor *t);
/* Convenience: set ctx (freed with free() unless ctx_free given). */
void rm_node_set_ctx(remat_node *n, void *ctx, void (*ctx_free)(void *));
/* Edge to the gradient sink of t (grad_fn or the leaf accumulator). */
remat_status rm_gradient_edge(remat_tensor *t, rm_edge *edge);
/* In-place ops: fails on a leaf that requires grad while grad mode is on.
 * (The rebase onto the new node happens in rm_node_set_output.) */
remat_status rm_check_inplace(const char *call, remat_tensor *t);
/* Frees saved tensors of a node (graph release). */
void rm_node_release_saved(remat_node *n);

/* ---- buffer donation (src/autograd/engine.c) ----------------------------------------------
 * "This buffer dies after you; you may reuse it." A node's backward is handed buffers: its
 * output gradients gout[i] (the engine's) and its node's saved tensors (slot i). When nothing
 * else holds one it dies as the backward returns: an output gradient unless the pass creates
 * a graph (create_graph), a saved tensor unless the pass retains the graph (retain_graph). The backward may then take it over as the buffer of a result
 * (rm_donation_take: gelu's dx over its dying g, mse's da over its saved prediction) or let
 * it die early (rm_donation_drop: linear lets x go after dW, before dx is allocated). The
 * gradient that arrives for an output may itself outlive the node (the residual stream's,
 * which add hands to both its inputs): a node whose kernel reads it as it is, f32 for a bf16
 * output, is handed that buffer rather than a rounded copy (rm_donation_read_wide: linear's
 * GEMMs round it panel by panel; tag hands it on). Whether a kernel may write over its input,
 * or read a wide gradient, is its device's call: the backend's kernel flags (RM_KF_IN_PLACE,
 * RM_KF_WIDE_GRAD, src/core/kernels.h); the engine asks them and decides. */
typedef enum rm_buf { RM_BUF_GRAD, RM_BUF_SAVED } rm_buf;
/* Buffer i of kind buf of n's running backward (RM_BUF_GRAD: gout[i], gout as the engine
 * handed it; RM_BUF_SAVED: saved slot i, saved without hooks), for kernel `kernel` to write
 * its out[0] over element for element: a new reference when the buffer dies after this
 * backward, is the sole holder of a contiguous storage it spans exactly (no hook, capture
 * or other consumer kept it) and its device's kernel allows it (RM_KF_IN_PLACE);
 * a saved slot then counts as freed, an output gradient's engine reference goes as the
 * backward returns. NULL otherwise (outside the engine's own call too): nothing changes,
 * the backward allocates as usual. */
remat_tensor *rm_donation_take(remat_node *n, remat_tensor *const *gout, rm_buf buf, int i,
                               rm_kernel_id kernel);
/* n's running backward has read buffer i of kind buf for the last time: if it dies after
 * this backward, it dies now, before the backward allocates its next result (a saved slot
 * is freed as the graph release after the node would; an output gradient dies as the
 * backward returns anyway: nothing). */
void rm_donation_drop(remat_node *n, rm_buf buf, int i);
/* rm_donation_read_wide's kernel for a node that reads no kernel of its own: an identity that
 * hands the gradient on as it is (the node it reaches decides again). */
#define RM_DONATION_PASS ((int)RM_K_COUNT)
/* Said as n is recorded: n's backward reads its output gradients with kernel `reader` (or
 * hands them on: RM_DONATION_PASS). The engine may then keep an f32 gradient that arrives
 * for a bf16 output of n as it is, instead of rounding it to the output's dtype, when that
 * buffer outlives n anyway (something else holds it), it is the output's only contribution,
 * nothing sees it before n's backward (no hook on the output, no capture at n, not
 * create_graph), and the output's device's `reader` reads one (RM_KF_WIDE_GRAD). It rounds a
 * kept gradient before hooks or captures see it, or when a second contribution arrives. */
void rm_donation_read_wide(remat_node *n, int reader);
/* Frees saved slot `slot` of n now (rm_node_release_saved's, for one slot). */
void rm_node_free_saved(remat_node *n, int slot);
/* Whether the backward pass running on this thread retains the graph (true
 * outside backward). */
bool rm_backward_retains_graph(void);
/* Whether the backward pass running on this thread was asked to create a
 * graph (create_graph; false outside backward). Saved tensors then unpack
 * with their place in the graph (requires_grad, grad_fn). */
bool rm_backward_creates_graph(void);
/* The engine, as a backward pass starts (its create_graph) and ends (the
 * value returned, the enclosing pass's): kept here beside grad mode, which
 * the unpacking of saved tensors reads too. */
bool rm_set_backward_creates_graph(bool on);
/* For a backward_diff: REMAT_EUNSUPPORTED naming the node's op and `what`
 * (a case of the op whose second derivative remat does not have). */
remat_status rm_no_double_backward(const remat_node *n, const char *what);

/* ---- differentiable gradient arithmetic (create_graph) -------------------------------
 * Under create_graph a gradient that requires grad must be summed with
 * recorded ops, so that it can be differentiated again. Ops live in the
 * layer above; it hands autograd these three when the library loads
 * (rm_set_graph_ops, from src/ops/double_backward.c). Each writes a new
 * reference in *out, recorded when grad mode is on. */
typedef struct rm_graph_ops {
    /* a + b (same shape) */
    remat_status (*add)(remat_tensor **out, remat_tensor *a, remat_tensor *b);
    /* grad summed down to (ndim, shape), undoing broadcasting */
    remat_status (*sum_to)(remat_tensor **out, remat_tensor *grad, int ndim, const int64_t *shape);
    /* a copy of g sharing no storage with it (g * 1: exact) */
    remat_status (*copy)(remat_tensor **out, remat_tensor *g);
} rm_graph_ops;
/* Installs ops (static storage; NULL: none). Until then a create_graph
 * gradient that needs one is REMAT_ESTATE. */
void rm_set_graph_ops(const rm_graph_ops *ops);
/* The installed ops, or REMAT_ESTATE naming `what` when none are. */
remat_status rm_graph_ops_get(const char *what, const rm_graph_ops **ops);

/* Sums grad down to shape (undoing broadcasting) on the sum kernel: a view
 * of the sum (or of grad), or grad itself when the shapes match. New
 * reference in *out. Under create_graph (grad mode on, grad requiring
 * grad) through the graph ops' sum_to instead. */
remat_status rm_sum_to(remat_tensor **out, remat_tensor *grad, int ndim, const int64_t *shape);
/* Gradient accumulation on the kernels (no op, no node, no scope): *out =
 * a + b, a new tensor of a's shape, dtype and device (b the same shape and
 * dtype); and acc += g in place through acc's strides (its version bumped),
 * g read from a copy when it shares acc's memory. Errors name remat_add /
 * remat_add_, the ops they stand for. */
remat_status rm_grad_add(remat_tensor **out, remat_tensor *a, remat_tensor *b);
/* The same a + b, under grad mode with a or b requiring grad, recorded
 * (the graph ops' add). */
remat_status rm_grad_add_into(remat_tensor *acc, remat_tensor *g);

/* Calls the save observer (residual reports) for a tensor being saved. */
void rm_notify_save(const char *op, remat_tensor *t);
/* The save observer installed now (fn NULL: none), so that a temporary
 * one can chain to it and put it back (the op-level profile). */
void rm_save_observer_get(remat_save_observer_fn *fn, void **user_data);
/* While a pack hook runs (rm_node_save), the tensor being saved: the hook itself gets an
 * alias without its place in the graph, and the planner's bf16 hooks for stored stages
 * (src/planner/storebf16.c) convert only tensors the graph made (a grad_fn: not parameters,
 * inputs or constants). NULL outside a pack hook. */
remat_tensor *rm_node_saving(void);
/* The innermost saved-tensor hook pair on this thread into *out: true when there is one and
 * it is a pair (not a remat_saved_hooks_push_disabled entry); false otherwise (*out zeroed).
 * Hooks that store a tensor their own way and then hand it on to the hooks they were pushed
 * over use it (the planner's stored stages as bf16: the caller's own hooks still see every
 * save, src/planner/storebf16.c). */
bool rm_saved_hooks_top(remat_saved_hooks *out);

#endif /* REMAT_AUTOGRAD_GRAPH_H */
