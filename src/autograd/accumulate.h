/* src/autograd/accumulate.h — an observer of leaf gradient accumulation.
 *
 * The engine calls the observer installed on the running thread right
 * after it has added a gradient into a leaf's .grad (P: a post-accumulate
 * grad hook, seen for every leaf). Under reentrant checkpointing a leaf used
 * in several recomputed regions is accumulated once per nested backward
 * pass: the observer sees each of them. Data parallelism (src/dist/ddp.c)
 * turns these into one gradient-ready event per parameter per backward.
 * Not installed; thread-local, like grad mode. */
#ifndef REMAT_AUTOGRAD_ACCUMULATE_H
#define REMAT_AUTOGRAD_ACCUMULATE_H

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

/* Calls the observer with leaf NULL, if one is installed on this thread. */
void rm_progress_point(void);

/* Walks the graph behind root before a backward pass over it and calls fn
 * once per leaf accumulator reachable from root (a pass runs each such node
 * once, after summing its incoming gradients, so this is how many times it
 * will accumulate into that leaf, or fewer where no gradient reaches it).
 * *opaque is set when a reachable node is a custom function
 * (remat_function_apply, e.g. a reentrant checkpoint): its backward may run
 * backward passes of its own, whose accumulations this walk cannot see.
 * REMAT_ENOMEM (the counts are then incomplete). */
remat_status rm_graph_leaf_accumulators(remat_tensor *root, rm_accumulate_observer_fn fn, void *user_data,
                               bool *opaque /* OUT */);

/* True for a custom function's node (src/autograd/function.c). */
bool rm_node_runs_backward(const remat_node *n);

#endif
