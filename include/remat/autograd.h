/*
 * remat/autograd.h — reverse-mode automatic differentiation.
 *
 * Define-by-run: when grad mode is on and an op's input requires grad, the
 * op records a node (remat_node) with the tensors it needs for backward.
 * remat_backward() walks the graph from its roots and accumulates into the
 * `.grad` of leaves; remat_grad() returns gradients without touching
 * `.grad`.
 *
 * Every tensor an op saves for backward goes through the innermost pair of
 * saved-tensor hooks on this thread (remat_saved_hooks_push): pack runs
 * when the tensor is saved, unpack when backward needs it. Non-reentrant
 * checkpointing, offloading and compression are built on these hooks.
 *
 * Custom functions (remat_function_apply) pair a user forward with a user
 * backward, as PyTorch's autograd.Function.
 */
#ifndef REMAT_AUTOGRAD_H
#define REMAT_AUTOGRAD_H

#include <stdbool.h>
#include <stdint.h>

#include "remat/tensor.h"

#include "remat/export.h"

#ifdef __cplusplus
extern "C" {
#endif
REMAT_BEGIN_PUBLIC

/* ---- grad mode (thread-local) -------------------------------------------- */
bool remat_is_grad_enabled(void);
/* Sets grad mode; returns the previous mode (restore it with another call). */
bool remat_set_grad_enabled(bool enabled);
/* Helpers: `bool prev = remat_no_grad_begin(); ...; remat_grad_mode_restore(prev);` */
bool remat_no_grad_begin(void);
bool remat_enable_grad_begin(void);
void remat_grad_mode_restore(bool prev);

/* ---- backward ---------------------------------------------------------------
 * Runs backward from roots[0..n). grad_outputs may be NULL (every root must
 * then be a one-element tensor; its gradient is 1) or have NULL entries.
 * inputs/n_inputs: if non-NULL, only these tensors' .grad are accumulated
 * (PyTorch: backward(inputs=...)); otherwise every leaf that requires grad.
 * Unless retain_graph, the graph's saved tensors are freed as it is
 * walked; walking it again then fails with REMAT_ESTATE. Some are freed
 * even within their node, which lowers the pass's peak below PyTorch's: linear
 * lets go of its input once dW is computed, before dx is allocated, and
 * mse_loss writes the prediction's gradient over the saved prediction when
 * nothing else holds it (tensors you still hold are never written).
 * Errors: REMAT_ENOGRAD if a root does not require grad; REMAT_ESHAPE if a
 * grad_output does not match its root. */
remat_status remat_backward(int n, remat_tensor *const *roots, remat_tensor *const *grad_outputs,
                            bool retain_graph, int n_inputs, remat_tensor *const *inputs);
/* remat_backward of one scalar root with retain_graph off. */
remat_status remat_backward_scalar(remat_tensor *root);

/* Computes d(outputs)/d(inputs) weighted by grad_outputs (may be NULL as
 * above) and writes new references to grads[0..n_inputs): NULL where an
 * input is unreachable from the outputs if allow_unused, else REMAT_EINVAL.
 * Leaves `.grad` of every tensor untouched. Every input must require grad
 * (REMAT_ENOGRAD). As in PyTorch, the pass stops at a non-leaf input: the input's
 * own backward node is neither run nor freed (unless another input lies
 * beyond it), so grad of z wrt y and then of y wrt x both work without
 * retain_graph. */
remat_status remat_grad(int n_outputs, remat_tensor *const *outputs,
                        remat_tensor *const *grad_outputs, int n_inputs,
                        remat_tensor *const *inputs, bool retain_graph, bool allow_unused,
                        remat_tensor **grads);

/* ---- options: create_graph (double backward) ----------------------------------
 * A zero-initialised struct gives PyTorch's defaults (create_graph false,
 * retain_graph = create_graph, allow_unused false).
 *
 * create_graph (PyTorch: create_graph=True): backward runs with grad mode on and
 * records a differentiable graph of the gradient computation, so the
 * gradients it returns (remat_grad_ex) or accumulates into .grad
 * (remat_backward_ex: .grad then has a grad_fn) can be differentiated
 * again, to any order: Hessian-vector products, gradient penalties. Saved
 * tensors unpack as the tensors they were (with their grad_fn and
 * requires_grad), gradients are summed with differentiable adds, and each
 * node whose gradient depends on something that requires grad runs its
 * op's differentiable backward. An op remat has no such backward for fails
 * the pass with REMAT_EUNSUPPORTED naming the op, never a silently
 * detached gradient (docs/double_backward.md lists the ops). Nodes whose
 * gradients are constants run today's kernels. Custom functions: the user
 * backward runs with grad mode on, so one written with remat ops is
 * differentiable. Non-reentrant checkpoints support it (nested, selective,
 * planned); the reentrant variant refuses it (REMAT_EUNSUPPORTED). With
 * create_graph off, backward is exactly remat_backward / remat_grad. */
typedef struct remat_backward_options {
    bool create_graph;
    remat_tristate retain_graph; /* REMAT_OPT_DEFAULT: create_graph */
    bool allow_unused;           /* remat_grad_ex only, as remat_grad's */
} remat_backward_options;

/* remat_backward with options (opts NULL: the zero struct). With
 * create_graph, a leaf's .grad has a graph that refers to the leaf: a
 * reference cycle that keeps both alive until .grad is reset
 * (remat_set_grad(leaf, NULL)); remat_backward_ex warns of it (once, as
 * PyTorch does). remat_grad_ex returns the gradients with no cycle. */
remat_status remat_backward_ex(int n, remat_tensor *const *roots, remat_tensor *const *grad_outputs,
                               int n_inputs, remat_tensor *const *inputs,
                               const remat_backward_options *opts);
/* remat_grad with options (opts NULL: the zero struct). With create_graph
 * the gradients written to grads have a grad_fn where they depend on
 * something that requires grad. */
remat_status remat_grad_ex(int n_outputs, remat_tensor *const *outputs,
                           remat_tensor *const *grad_outputs, int n_inputs,
                           remat_tensor *const *inputs, const remat_backward_options *opts,
                           remat_tensor **grads);

/* True while this thread runs a backward pass (inside node backward
 * functions and hooks). */
bool remat_in_backward(void);
/* Id of the backward pass this thread is running (0 outside backward).
 * Every remat_backward/remat_grad call gets a new id. */
uint64_t remat_current_backward_id(void);
/* True if the running backward pass was asked for specific inputs
 * (remat_grad or remat_backward with inputs); reentrant checkpoint uses it. */
bool remat_current_backward_is_partial(void);

/* ---- graph nodes ------------------------------------------------------------ */
/* Name of the op that recorded the node ("MulBackward", "AccumulateGrad"). */
const char *remat_node_name(const remat_node *node);
int remat_node_num_next(const remat_node *node);
/* Borrowed pointer to the node behind edge i (NULL for an input that needs no grad). */
remat_node *remat_node_next(const remat_node *node, int i);

/* ---- tensor hooks -------------------------------------------------------------
 * Called with the gradient flowing into t during backward. Return REMAT_OK
 * and leave *replacement NULL to keep the gradient, or set it to a new
 * reference to use instead. Non-zero return aborts backward with that
 * status. */
typedef remat_status (*remat_grad_hook_fn)(void *user_data, remat_tensor *grad,
                                           remat_tensor **replacement);
/* Registers a hook on t (which must require grad). */
remat_status remat_register_hook(remat_tensor *t, remat_grad_hook_fn fn, void *user_data);

/* ---- saved-tensor hooks ----------------------------------------------------
 * pack(user_data, t) → opaque handle (may retain t, copy it, offload it...);
 * returns NULL on failure, after remat_set_error(status, ...): the op that
 * saved fails with that status (e.g. REMAT_ENOMEM), or REMAT_ECALLBACK when
 * the hook set no error.
 * unpack(user_data, handle, &out) → a new reference to the tensor for
 * backward.
 * free_handle(user_data, handle) drops the handle (when the graph is freed
 * or the node destroyed). May be NULL if handles need no freeing.
 * The pair in force when a tensor is saved stays attached to it; pushing or
 * popping hooks later does not change how it is unpacked. */
typedef struct remat_saved_hooks {
    void *(*pack)(void *user_data, remat_tensor *t);
    remat_status (*unpack)(void *user_data, void *handle, remat_tensor **out);
    void (*free_handle)(void *user_data, void *handle);
    void *user_data;
} remat_saved_hooks;
/* Pushes a hook pair on this thread's stack (copied). The stack has no
 * depth limit (it grows on the heap past 64 entries and gives that memory
 * back when it empties); REMAT_ENOMEM only when growing fails. */
remat_status remat_saved_hooks_push(const remat_saved_hooks *hooks);
/* Pops the innermost pair. REMAT_ESTATE if the stack is empty. */
remat_status remat_saved_hooks_pop(void);
/* Pushes an entry that disables hooks (tensors saved directly) until popped. */
remat_status remat_saved_hooks_push_disabled(void);
int remat_saved_hooks_depth(void);

/* Observer of every tensor saved for backward (used by reports/debug traces):
 * called with the op name and the tensor before packing. NULL removes it. */
typedef void (*remat_save_observer_fn)(void *user_data, const char *op, remat_tensor *t);
void remat_set_save_observer(remat_save_observer_fn fn, void *user_data);

/* Observer of the gradients the engine holds for leaves (memory tools that
 * tell parameter gradients from activations: `remat bench`'s activation
 * bytes). Called with the leaf (requiring grad) and each gradient meant for
 * it: as a backward node hands it over (and its copy, when it is converted
 * to the leaf's dtype or summed to its shape), and the running sum when
 * several arrive (the leaf's accumulator waits for all of them); so before
 * the leaf's hooks and before .grad. Must not fail, keep grad or run
 * backward. Process-wide setting; NULL removes it. */
typedef void (*remat_leaf_grad_observer_fn)(void *user_data, const remat_tensor *leaf,
                                            const remat_tensor *grad);
void remat_set_leaf_grad_observer(remat_leaf_grad_observer_fn fn, void *user_data);

/* ---- custom functions ---------------------------------------------------------- */
typedef struct remat_function_ctx remat_function_ctx;

typedef struct remat_function_def {
    const char *name; /* node name, e.g. "MyOpBackward"; copied */
    /* Forward, run with grad mode off. Fill outputs[0..n_outputs) with new
     * references. Save tensors with remat_ctx_save_for_backward. */
    remat_status (*forward)(remat_function_ctx *ctx, void *user_data, remat_tensor *const *inputs,
                            int n_inputs, remat_tensor **outputs, int n_outputs);
    /* Backward: grad_outputs[i] may be NULL (zero). Write new references to
     * grad_inputs[0..n_inputs) (NULL = no gradient). Each gradient is
     * checked against its input, as PyTorch's validate_outputs: another dtype is
     * converted to the input's, a shape the input broadcasts to is summed
     * down to it, any other shape fails the pass with REMAT_ESHAPE, another
     * device with REMAT_EDEVICE. */
    remat_status (*backward)(remat_function_ctx *ctx, void *user_data,
                             remat_tensor *const *grad_outputs, int n_outputs,
                             remat_tensor **grad_inputs, int n_inputs);
    /* Called when the node is destroyed, to free user_data; may be NULL. */
    void (*destroy)(void *user_data);
} remat_function_def;

/* Runs def->forward on inputs (NULL entries allowed: non-tensor slots) and,
 * if grad mode is on and an input requires grad, records a node so that
 * backward calls def->backward. n_outputs new references are written to
 * outputs. user_data is owned by the node afterwards if def->destroy is set
 * (also freed on failure). */
remat_status remat_function_apply(const remat_function_def *def, void *user_data, int n_inputs,
                                  remat_tensor *const *inputs, int n_outputs,
                                  remat_tensor **outputs);
/* Saves tensors for backward (through the saved-tensor hooks). NULL entries
 * allowed. Call once from forward. */
remat_status remat_ctx_save_for_backward(remat_function_ctx *ctx, int n,
                                         remat_tensor *const *tensors);
/* Number of saved tensors. */
int remat_ctx_num_saved(const remat_function_ctx *ctx);
/* New reference to saved tensor i (unpacked through its hooks; version
 * checked). REMAT_ESTATE once the graph was freed. */
remat_status remat_ctx_saved(remat_function_ctx *ctx, int i, remat_tensor **out);
/* Whether input i needs a gradient. */
bool remat_ctx_needs_input_grad(const remat_function_ctx *ctx, int i);
/* Marks output i as not differentiable. Call from forward. */
remat_status remat_ctx_mark_non_differentiable(remat_function_ctx *ctx, int i);

REMAT_END_PUBLIC
#ifdef __cplusplus
}
#endif
#endif /* REMAT_AUTOGRAD_H */
