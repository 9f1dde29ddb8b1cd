/* src/autograd/accumulate.h — an observer of leaf gradient accumulation.
 *
 * The engine calls the observer installed on the running thread right
 * after it has added a gradient into a leaf's .grad (PyTorch: a post-accumulate
 * grad hook, seen for every leaf). Under reentrant checkpointing a leaf used
 * in several recomputed regions is accumulated once per nested backward
 * pass: the observer sees each of them. Data parallelism (src/dist/ddp.c)
 * turns these into one gradient-ready event per parameter per backward.
 * Not installed; thread-local, like grad mode. */
#ifndef REMAT_AUTOGRAD_ACCUMULATE_H
#define REMAT_AUTOGRAD_ACCUMULATE_H

#include "remat/autograd.h"
#include "remat/tensor.h"

/* Called with the leaf whose .grad was just updated. Must not fail or run
 * backward; it may read the leaf's .grad. Called with leaf NULL at progress
 * points: before each node's backward runs and whenever an op records a
 * node (so also during the recomputation a checkpoint runs inside backward)
 * — where data parallelism drives MPI's progress (Open MPI moves
 * non-blocking collectives only inside MPI calls). */
typedef void (*rm_accumulate_observer_fn)(void *user_data, remat_tensor *leaf);

/* Installs fn (NULL removes) for this thread; the previous observer is
 * returned through prev_fn / prev_ud (either may be NULL) so that callers
 * can restore it. */
void rm_set_accumulate_observer(rm_accumulate_observer_fn fn, void *user_data,
                                rm_accumulate_observer_fn *prev_fn, void **prev_ud);

/* Calls the observer with leaf (the engine, after adding into its .grad),
 * if one is installed on this thread. */
void rm_accumulate_notify(remat_tensor *leaf);
/* Calls the observer with leaf NULL, if one is installed on this thread. */
void rm_progress_point(void);

/* Walks the graph behind root before a backward pass over it and calls fn
 * once per leaf accumulator reachable from root (a pass runs each such node
 * once, after summing its incoming gradients, so this is how many times it
 * will accumulate into that leaf, or fewer where no gradient reaches it).
 * A custom function (remat_function_apply) may run backward passes of its
 * own in its backward, whose accumulations the graph does not show: a
 * reentrant checkpoint records them in forward (rm_leaf_tally below) and
 * they are reported as if reached; *opaque is set when a reachable custom
 * function recorded nothing. REMAT_ENOMEM (the counts are then incomplete). */
remat_status rm_graph_leaf_accumulators(remat_tensor *root, rm_accumulate_observer_fn fn,
                                        void *user_data, bool *opaque /* OUT */);

/* True for a custom function's node (src/autograd/function.c). */
bool rm_node_runs_backward(const remat_node *n);

/* ---- the leaves a region's nested backward pass will accumulate into -------------------
 * A reentrant checkpoint runs its function with grad off in forward and,
 * in backward, again with grad on followed by a nested pass over what it
 * recorded: each leaf requiring grad that the function's ops read (the
 * parameters it captured) is accumulated once by that pass, and once more
 * per nested pass of a reentrant region inside it. To know this before the
 * pass (data parallelism starts buckets from the first backward), the
 * checkpoint records in forward:
 *   t = rm_leaf_tally_begin();  -- run the function --
 *   rm_leaf_tally_end(t, n_inputs, inputs);  rm_ctx_set_nested_leaves(ctx, t);
 * The op driver reports every op's inputs (rm_note_leaf_reads) to the
 * recording installed on the thread; a recording started inside another
 * (a reentrant region within one, whose forward runs with grad off too)
 * adds its counts to the enclosing one as one nested pass. A region's own
 * inputs are left out: it reads detached copies of them when it recomputes,
 * and the custom function's edges reach them. Counts are exact where the
 * recomputation runs the ops the forward ran; a leaf read without a
 * gradient flowing back to it is counted too (data parallelism then marks
 * it ready at the end of backward). Thread-local, strictly nested. */
typedef struct rm_leaf_tally rm_leaf_tally;
/* Starts a recording on this thread; NULL when out of memory (the
 * enclosing recording, if any, is then marked incomplete). */
rm_leaf_tally *rm_leaf_tally_begin(void);
/* Ends recording t (NULL: no-op): removes the region's inputs, hands the
 * counts on to the enclosing recording. t stays the caller's. */
void rm_leaf_tally_end(rm_leaf_tally *t, int n_inputs, remat_tensor *const *inputs);
/* Releases the recorded leaves. NULL is a no-op. */
void rm_leaf_tally_free(rm_leaf_tally *t);
/* Calls fn once per accumulation recorded (a leaf k times for k passes);
 * false (nothing called) if t is NULL or incomplete. */
bool rm_leaf_tally_report(const rm_leaf_tally *t, rm_accumulate_observer_fn fn, void *user_data);
/* The op driver: n inputs of an op about to run (leaves requiring grad
 * among them are read by the recording region, if one is installed). */
void rm_note_leaf_reads(int n, remat_tensor *const *inputs);
/* The recording installed on this thread, if any, becomes incomplete (a
 * custom function that recorded nothing ran inside the region). */
void rm_leaf_tally_unknown(void);
/* Gives t to ctx (freed with it; replaces a previous one; NULL ctx frees t). */
void rm_ctx_set_nested_leaves(remat_function_ctx *ctx, rm_leaf_tally *t);
/* For a custom function's node that recorded its nested passes: reports
 * them like rm_leaf_tally_report and returns true; false otherwise. */
bool rm_node_nested_leaves(const remat_node *n, rm_accumulate_observer_fn fn, void *user_data);

#endif
