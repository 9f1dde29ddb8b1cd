/*
 * remat/dist.h — data parallelism over MPI (Open MPI).
 *
 * A process group (remat_dist) wraps an MPI communicator: MPI_COMM_WORLD or
 * one the user passes. It gives rank and world size, broadcast, all-reduce
 * (sum / mean / max) of tensors and doubles, and a barrier. remat_ddp keeps
 * a model's parameters identical across ranks while each rank trains on its
 * own shard of the data (PyTorch: DistributedDataParallel); remat_zero shards the
 * AdamW state across ranks (ZeRO stage 1).
 *
 * Typical loop (every rank runs the same program, `mpirun -np N prog`):
 *
 *   remat_dist *pg;  remat_ddp *ddp;
 *   rc = remat_dist_init(&pg, NULL);                 // MPI_Init if needed
 *   remat_manual_seed(remat_dist_rank_seed(pg, seed)); // own dropout stream
 *   rc = remat_ddp_create(&ddp, pg, n, params, NULL); // params := rank 0's
 *   for each step:
 *       batch = shard `remat_dist_rank(pg)` of the global batch
 *       loss = model(batch)                          // any checkpoint mode
 *       rc = remat_ddp_backward(ddp, loss);          // .grad = mean over ranks
 *       optimizer step (identical on every rank)
 *   remat_ddp_free(ddp);
 *   remat_dist_finalize(pg);                         // MPI_Finalize if we inited
 *
 * Built when CMake finds MPI. Without it every call below fails with
 * REMAT_EUNSUPPORTED and a message naming the Debian packages to install
 * (remat_dist_available() says which build this is).
 *
 * Failures: every wait is bounded by the group's timeout (default 60 s).
 * A rank whose step failed tells the others at the end of the backward
 * (they fail with "rank R failed: <its message>"); a rank that stops
 * answering makes the others fail with REMAT_EIO naming it once the timeout
 * has passed. After such an error the group is broken: collective calls fail with
 * REMAT_ESTATE, and the program should end every rank with
 * remat_dist_abort (MPI cannot finish collectives a dead rank left open).
 * Threading: MPI is initialised with MPI_THREAD_FUNNELED; call dist
 * functions from the thread that initialised it.
 */
#ifndef REMAT_DIST_H
#define REMAT_DIST_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "remat/optim.h"
#include "remat/tensor.h"

#include "remat/export.h"

#ifdef __cplusplus
extern "C" {
#endif
REMAT_BEGIN_PUBLIC

/* True when remat was built with MPI. */
bool remat_dist_available(void);

/* ---- process group ---------------------------------------------------------- */
typedef struct remat_dist remat_dist;

typedef struct remat_dist_options {
    /* Address of an MPI_Comm (MPI_Comm *) to use; the group duplicates it,
     * so the caller keeps its own. NULL → MPI_COMM_WORLD. The user must have
     * initialised MPI to pass one. */
    const void *comm;
    /* Bound on every wait, in seconds; 0 → 60. */
    double timeout_s;
} remat_dist_options;

/* Creates a process group (opts may be NULL). Initialises MPI (threads:
 * FUNNELED) when the user has not; remat_dist_finalize then finalises it.
 * Errors: REMAT_EUNSUPPORTED (no MPI build), REMAT_EIO (MPI failed),
 * REMAT_EINVAL (bad timeout), REMAT_ENOMEM. */
remat_status remat_dist_init(remat_dist **out, const remat_dist_options *opts);
/* Frees the group; finalises MPI if remat_dist_init initialised it and no
 * other group is alive. NULL → REMAT_OK. */
remat_status remat_dist_finalize(remat_dist *pg);
/* Ends every process of the job now (MPI_Abort with `code`), for programs
 * that got a dist error: the only remat call that does not return. */
void remat_dist_abort(remat_dist *pg, int code);

/* Rank of this process in the group, and the group's size (0 and 1 for a
 * NULL group). */
int remat_dist_rank(const remat_dist *pg);
int remat_dist_world_size(const remat_dist *pg);
/* The timeout in force, seconds. */
double remat_dist_timeout(const remat_dist *pg);
/* A seed for this rank's generators derived from (seed, rank): pass it to
 * remat_manual_seed so that each rank draws its own dropout masks. Rank 0
 * keeps `seed` itself, so one rank reproduces a single-process run. */
uint64_t remat_dist_rank_seed(const remat_dist *pg, uint64_t seed);
/* The shard [*begin, *end) of n items that this rank owns: contiguous,
 * sizes differing by at most one, lower ranks first. */
void remat_dist_shard(const remat_dist *pg, int64_t n, int64_t *begin, int64_t *end);

/* ---- collectives (blocking, bounded by the timeout) ------------------------- */
typedef enum remat_reduce_op {
    REMAT_REDUCE_SUM = 0,
    REMAT_REDUCE_MEAN = 1,
    REMAT_REDUCE_MAX = 2
} remat_reduce_op;

/* Overwrites t on every rank with rank `root`'s values. t must be a
 * contiguous f32/f64/i64 tensor of the same shape and dtype on every rank,
 * in host memory or on a device (cuda: sent through a host copy, MPI need
 * not be CUDA-aware). Does not bump t's version (use outside of graphs). */
remat_status remat_dist_broadcast(remat_dist *pg, remat_tensor *t, int root);
/* Replaces t on every rank by the element-wise reduction over ranks
 * (MEAN = SUM / world size). Same requirements as broadcast; the result is
 * bitwise identical on every rank. */
remat_status remat_dist_all_reduce(remat_dist *pg, remat_tensor *t, remat_reduce_op op);
/* The same for n doubles in place (program statistics). */
remat_status remat_dist_all_reduce_f64(remat_dist *pg, double *values, int n, remat_reduce_op op);
/* Waits until every rank has called it. */
remat_status remat_dist_barrier(remat_dist *pg);
/* Sets *same to whether every tensor of the list holds bitwise the same
 * bytes on every rank (an FNV hash per rank, compared on all). Collective. */
remat_status remat_dist_check_identical(remat_dist *pg, int n, remat_tensor *const *tensors,
                                        bool *same);

/* ---- DDP: gradient synchronisation ------------------------------------------------
 * Parameters are grouped into buckets of about bucket_bytes, in reverse
 * registration order (the order backward usually reaches them). During
 * remat_ddp_backward a parameter is "ready" once its gradient is final
 * for this backward; the event fires exactly once per parameter per
 * backward whatever the checkpointing (none, reentrant, non-reentrant,
 * nested, selective, planner): a parameter that several reentrant
 * recomputations accumulate into is ready after the last of them. When
 * every parameter of a bucket is ready, the bucket's non-blocking
 * all-reduce starts (buckets start in order, as MPI requires), so the
 * communication overlaps the rest of the backward pass. One wait at the
 * end; .grad is then the mean over ranks, bitwise identical everywhere: a
 * contiguous view into the bucket's buffer (PyTorch: gradient_as_bucket_view),
 * which the bucket leaves to the gradients, taking a fresh one for the
 * next backward (so no later reduction writes into a .grad the user holds);
 * a device parameter's .grad is a tensor on its device holding that mean.
 *
 * How "final" is known: before the backward runs, the graph behind the
 * loss says how many times each parameter will be accumulated into (once
 * per leaf accumulator reached: the engine sums a leaf's incoming gradients
 * first), so buckets overlap the backward from the first step on.
 * A reentrant checkpoint's backward runs a nested pass that the graph does
 * not show; its forward records the parameters its function reads (nested
 * regions included), and those count as reached, so it overlaps from the
 * first step too. Where the graph holds a custom function of the user's
 * (remat_function_apply) whose backward might run passes of its own, the
 * counts of the previous backward are used, and the first such backward
 * (nothing learned yet) starts every bucket at its end.
 * If a parameter receives more than expected (the graph changed), its
 * bucket is reduced again at the end, so .grad is always right; the count
 * is relearned.
 *
 * Unused parameters: a parameter without a gradient on a rank contributes
 * zeros; if no rank produced one, its .grad stays NULL everywhere. */
typedef struct remat_ddp remat_ddp;

/* Gradient-ready observer: param is the index in the params list. */
typedef void (*remat_ddp_ready_fn)(void *user_data, int param);

typedef struct remat_ddp_options {
    size_t bucket_bytes;         /* 0 → 25 MiB */
    remat_ddp_ready_fn on_ready; /* optional: called at each ready event */
    void *on_ready_data;
    bool no_broadcast; /* keep each rank's initial values (tests) */
} remat_ddp_options;

/* Registers n parameters (f32 or f64 contiguous leaf tensors that require
 * grad, on the cpu or a device; retained until remat_ddp_free). A device
 * parameter's gradient is reduced through the bucket in host memory (copied
 * out when ready, copied into a .grad on its device after the reduction:
 * PyTorch's gloo backend does the same with CUDA tensors; no NCCL). Collective: checks that every rank
 * passes the same count, shapes and dtypes (REMAT_EINVAL naming the first
 * difference and the ranks), then copies rank 0's values into every
 * rank's parameters. opts may be NULL. */
remat_status remat_ddp_create(remat_ddp **out, remat_dist *pg, int n, remat_tensor *const *params,
                              const remat_ddp_options *opts);
void remat_ddp_free(remat_ddp *ddp);

/* remat_backward_scalar(loss) with the gradients synchronised as described
 * above. While sync is off (remat_ddp_set_sync) it is a plain local
 * backward: gradients accumulate, and the next synchronised backward
 * reduces the accumulated .grad (PyTorch: no_sync for gradient accumulation).
 * If the local backward fails, this rank still takes part in the
 * collectives and reports the failure to the others; every rank then
 * returns an error naming the failed rank(s). */
remat_status remat_ddp_backward(remat_ddp *ddp, remat_tensor *loss);
/* Turns synchronisation off (PyTorch: no_sync) or back on. */
void remat_ddp_set_sync(remat_ddp *ddp, bool sync);

typedef struct remat_ddp_stats {
    int n_buckets;
    int n_params;
    int64_t n_ready_events;     /* in the last synchronised backward */
    int64_t n_accumulations;    /* leaf accumulations seen in it */
    int n_rereduced;            /* buckets reduced again at its end */
    int n_launched_in_backward; /* buckets whose reduction started before the local
                                  * backward ended (the rest start at its end) */
    int n_done_in_backward;     /* buckets whose reduction had completed when the
                                  * local backward ended (MPI progressed meanwhile) */
    bool learning;              /* it started every bucket at the end */
    bool graph_counts;          /* the expected counts came from the graph */
    double backward_s;          /* its local backward (compute) time */
    double comm_s;              /* first bucket start → last bucket done */
    double exposed_s;           /* waited for communication after compute */
    /* counters since remat_ddp_create */
    int64_t n_sync_backwards; /* synchronised backwards */
    int64_t n_collectives;    /* bucket reductions started (re-reductions included):
                                  * n_buckets per synchronised backward, none in no_sync */
} remat_ddp_stats;
/* Statistics of the last synchronised backward. */
void remat_ddp_get_stats(const remat_ddp *ddp, remat_ddp_stats *stats);
/* Bucket index of a parameter and the number of buckets (-1 on a bad index). */
int remat_ddp_bucket_of(const remat_ddp *ddp, int param);

/* ---- ZeRO-1: AdamW state sharded across ranks ------------------------------------
 * Gradient synchronisation as remat_ddp (same buckets, ready events and
 * failure handling), but each bucket is reduce-scattered: rank r receives
 * the sums of slice r of every bucket (buckets are padded with zeros to a
 * multiple of the world size). remat_zero_step then applies the library's
 * AdamW (remat_adamw_update_f32 / _f64, remat/optim.h) to that slice only —
 * the exp_avg / exp_avg_sq state exists for the slice only, 1/world of the
 * unsharded state — and all-gathers the updated parameters, so every rank
 * ends the step with the same parameters, bitwise (each element is computed
 * on one rank). f32 and f64 parameters (a bucket holds one dtype).
 *
 * Options are remat/optim.h's AdamW options: lr, betas, eps, weight_decay
 * (per parameter through weight_decay[], NULL: opts->weight_decay for
 * every one), schedule, clip_norm (the global norm is summed over the
 * shards) and accum_steps. With accum_steps = A > 1, call
 * remat_zero_backward and remat_zero_step once per micro-batch, as with
 * remat_optim_step: the first A-1 backwards accumulate locally (no_sync,
 * no communication), the A-th reduce-scatters the accumulated gradients
 * (one collective per bucket per update), and the A-th step updates with
 * the mean over the micro-batches. A parameter no rank produced a gradient
 * for is skipped (its state and step count unchanged), as PyTorch's AdamW
 * skips a parameter without .grad. */
typedef struct remat_zero remat_zero;

/* Collective. params as for remat_ddp_create (rank 0's values are copied
 * everywhere), but in host memory (REMAT_EINVAL for a device parameter:
 * the update runs the host's AdamW on them); ddp_opts may be NULL. */
remat_status remat_zero_create(remat_zero **out, remat_dist *pg, int n, remat_tensor *const *params,
                               const double *weight_decay, const remat_optim_options *opts,
                               const remat_ddp_options *ddp_opts);
void remat_zero_free(remat_zero *z);
/* Backward with the gradients reduce-scattered (the shard holds the sums;
 * each parameter's .grad is left as this rank computed it). With
 * accum_steps > 1 it sets the synchronisation (remat_ddp_set_sync) itself:
 * on for the last micro-batch of an update only. */
remat_status remat_zero_backward(remat_zero *z, remat_tensor *loss);
/* One call per micro-batch, after remat_zero_backward. The call that
 * completes accum_steps micro-batches (every call when accum_steps <= 1):
 * mean over ranks (and micro-batches) of the shard, clipping (clip_norm),
 * AdamW on this rank's slice, all-gather of the parameters; then every
 * parameter's .grad is dropped (set to none) as remat_optim_step does, and
 * *updated (may be NULL) is set. Other calls only count. */
remat_status remat_zero_step(remat_zero *z, bool *updated /* OUT */);
/* Exact allocator bytes of this rank's optimizer state (exp_avg and
 * exp_avg_sq of its slices), and of the communication buffers (the
 * buckets), which are not optimizer state. */
size_t remat_zero_state_bytes(const remat_zero *z);
size_t remat_zero_buffer_bytes(const remat_zero *z);
/* The gradient-synchronising object inside (stats, no_sync). Borrowed. */
remat_ddp *remat_zero_ddp(remat_zero *z);
/* Updates applied so far. */
int64_t remat_zero_updates(const remat_zero *z);

/* Saving and resuming: the sharded state as a whole, in an ordinary
 * AdamW optimizer (remat_optim_create over the same parameter tensors, in
 * any order and grouping) — what a run without ZeRO saves, so that a ZeRO
 * run resumes from a plain run's state and the other way round.
 *
 * remat_zero_gather_state is collective: every rank's slices of exp_avg and
 * exp_avg_sq are gathered, bucket by bucket through the bucket buffers, into
 * o's state on rank `root`, and o's update count becomes remat_zero_updates
 * (the same for every parameter: remat_optim_set_updates). o is ignored on
 * the other ranks (pass NULL). A root whose o does not fit (not AdamW, other
 * parameters) still takes part and then fails with REMAT_EINVAL.
 * remat_zero_load_state is local: every rank copies its own slices out of
 * o (which holds the whole state, e.g. read from a file on every rank) and
 * takes o's update and per-parameter step counts. */
remat_status remat_zero_gather_state(remat_zero *z, int root, remat_optimizer *o);
remat_status remat_zero_load_state(remat_zero *z, const remat_optimizer *o);

REMAT_END_PUBLIC
#ifdef __cplusplus
}
#endif
#endif /* REMAT_DIST_H */
