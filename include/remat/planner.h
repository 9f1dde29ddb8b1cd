/*
 * remat/planner.h — the budget planner: optimal checkpoint schedules for a
 * memory budget (PyTorch offers only uniform segments, checkpoint_sequential).
 *
 * Three steps, each usable on its own:
 *
 *   1. profile   remat_profile_stages measures every stage of a chain (the
 *                remat_stage list checkpoint_sequential takes): forward and
 *                backward time (median of a few runs), input/output bytes,
 *                the bytes it keeps for backward and its temporary peaks,
 *                all from the allocator's counters.
 *   2. plan      remat_plan_create runs a dynamic program in the style of
 *                rotor (Beaumont, Eyraud-Dubois, Herrmann, Joly, Shilova,
 *                "Optimal checkpointing for heterogeneous chains", 2019):
 *                for every stage it decides whether to keep everything the
 *                stage saves ("store"), to keep only the stage's input
 *                (start of a checkpointed segment) or to recompute it, so
 *                that the predicted step time (forward + backward +
 *                recomputation) is minimal and the predicted peak fits the
 *                budget. remat_plan_revolve builds Revolve's binomial
 *                schedule for uniform chains (Griewank & Walther) and
 *                remat_plan_sequential PyTorch's uniform segments, for comparison.
 *   3. run       remat_plan_run executes a plan with nested non-reentrant
 *                remat_checkpoint calls: a checkpointed segment's function
 *                runs its own sub-plan, so its recomputation is itself
 *                checkpointed.
 *
 * Example (the `--checkpoint budget=SIZE` strategy of the remat program):
 *
 *   remat_plan *plan = NULL;
 *   size_t budget;
 *   int rc = remat_parse_bytes("96MiB", &budget);
 *   if (!rc) rc = remat_plan_auto(&plan, n, stages, x, budget, NULL); // once; per op
 *   remat_plan_print(plan, stderr);
 *   for (step = 0; !rc && step < steps; step++) {
 *       remat_tensor *y = NULL, *loss = NULL;
 *       rc = remat_plan_run(plan, stages, x, &y);       // every step
 *       if (!rc) rc = remat_mse_loss(&loss, y, target);
 *       if (!rc) rc = remat_backward_scalar(loss);
 *       ...
 *   }
 *   remat_plan_free(plan);
 *
 * The memory model (what "budget" means). The budget bounds the allocator
 * bytes a step adds above what is live when remat_plan_run is called (the
 * input, the parameters and their existing .grad are therefore outside it):
 * activations kept for backward, checkpoints, recomputed activations,
 * gradients flowing down the chain and the stages' temporaries. With
 * a_k the output of stage k (a_{-1} = the input), |a_k| its bytes,
 * abar_k = |a_k| + saved_k what a stored stage keeps, and peaks measured
 * above the bytes live just before the stage runs:
 *   - a stored stage k keeps its input and abar_k until its backward;
 *     its forward peaks at fwd_peak_k, its backward at
 *     |a_k| (the incoming gradient) + abar_k + bwd_peak_k;
 *   - in a checkpointed segment's first forward nothing is kept but its
 *     input; stage k peaks at |a_{k-1}| + fwd_peak_nosave_k (the input of
 *     the segment's first stage is the checkpoint and already counted);
 *   - while a segment [s..t] is processed (its recomputation and backward),
 *     the gradient of its output (|a_t|) is live, except for the last stage
 *     of the chain, whose output gradient appears with the loss.
 * Sizes are rounded up to "slots" (budget / mem_slots bytes) for the
 * dynamic program, so the predicted peak of a plan never exceeds the
 * budget. The loss computed from the output and parameter gradients are not
 * modelled. Measured peaks match the prediction to within about one
 * activation (the output gradient is counted in full even when the loss
 * makes it a broadcast view), plus, at present, the parameter-gradient
 * buffers the autograd engine keeps until the end of backward; see
 * docs/planner.md for the figures.
 */
#ifndef REMAT_PLANNER_H
#define REMAT_PLANNER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "remat/checkpoint.h"
#include "remat/tensor.h"

#include "remat/export.h"

#ifdef __cplusplus
extern "C" {
#endif
REMAT_BEGIN_PUBLIC

/* ---- profiles ------------------------------------------------------------------- */
/* Measurements of one stage (bytes from the allocator, seconds). Bytes are
 * those the profiling thread allocates (other threads allocating meanwhile
 * do not count, and the process-wide peak is not reset); peaks are relative
 * to that thread's bytes just before the step they measure. */
typedef struct remat_stage_profile {
    double fwd_time;        /* forward with grad mode on (median) */
    double bwd_time;        /* backward of the stage: input and parameter grads (median) */
    size_t input_bytes;     /* storage bytes of the stage's input */
    size_t output_bytes;    /* storage bytes of the stage's output */
    size_t saved_bytes;     /* bytes kept for backward besides input and output */
    size_t fwd_peak;        /* peak of a storing forward (>= output + saved) */
    size_t fwd_peak_nosave; /* peak of a forward that keeps nothing (>= output) */
    size_t bwd_peak;        /* peak of the backward above output grad + kept bytes */
    size_t grad_bytes;      /* parameter gradients its backward makes (they become .grad and
                               stay until the optimizer drops them; whole-step budgets only) */
    /* Of fwd_time, the seconds a recomputation never runs: the ops after the
     * stage's last save, which a checkpoint's early stop skips (a GPT block's
     * MLP down projection and residual add). remat_profile_stages leaves it 0
     * (every op counted as recomputed); remat_profile_apply_ops fills it from
     * an op profile. The planners charge a checkpoint's recomputation its
     * forward less this, for the last stage it recomputes. */
    double recompute_free_time;
} remat_stage_profile;

typedef struct remat_profile {
    int n_stages;
    remat_stage_profile *stages; /* n_stages entries */
    int runs;                    /* timed runs per stage (0 for a hand-made profile) */
} remat_profile;

typedef struct remat_profile_options {
    int runs;       /* timed runs per stage; 0 → 3. Times are medians. */
    bool no_warmup; /* skip the untimed warm-up run of every stage */
    /* remat_plan_auto and remat_checkpoint_budget_ex only (the profilers
     * ignore it): true plans whole blocks — remat_profile_stages then
     * remat_plan_create, no op profile — as they did before op-level
     * planning (the `remat` program's budget=SIZE:blocks-only). Default
     * false: per op (see remat_plan_auto). */
    bool blocks_only;
} remat_profile_options;

/* A zero-filled profile of n_stages stages, to fill by hand (n_stages >= 1). */
remat_status remat_profile_create(remat_profile **out, int n_stages);

/* Measures stages[0..n_stages) on `input` (the tensor the chain will be run
 * on; its values are not modified). Each stage runs on the output of the
 * previous one: forward with grad, backward (through remat_grad, so no
 * .grad is touched), forward keeping nothing — warm-up + opts->runs times.
 * opts NULL → defaults. Grad mode is restored; the RNG state is stashed
 * and put back (stages with dropout draw the same numbers afterwards).
 * Errors: REMAT_EINVAL (NULL arguments, n_stages < 1, a stage without fn
 * or returning no tensor), anything a stage returns (message prefixed with
 * the stage index). */
remat_status remat_profile_stages(remat_profile **out, int n_stages, const remat_stage *stages,
                                  remat_tensor *input, const remat_profile_options *opts);

/* NULL-safe. */
void remat_profile_free(remat_profile *profile);

/* One line per stage: times in ms, sizes in MiB. NULL profile/f → nothing. */
void remat_profile_print(const remat_profile *profile, FILE *f);

/* ---- plans ---------------------------------------------------------------------------
 * A plan is a tree of nodes listed in pre-order. A STORE node runs one
 * stage normally; a CHECKPOINT node runs stages [first..last] as one
 * remat_checkpoint call whose function executes the node's children (the
 * nodes that follow it with parent == its index), so a checkpoint's
 * recomputation follows the sub-plan. A stage inside d checkpoints runs its
 * forward 1 + d times per step. */
typedef enum remat_plan_op {
    REMAT_PLAN_STORE = 0,     /* run stage `first` keeping what it saves (rotor's F_all) */
    REMAT_PLAN_CHECKPOINT = 1 /* checkpointed segment [first..last] */
} remat_plan_op;

typedef struct remat_plan_node {
    remat_plan_op op;
    int first, last; /* stage range, inclusive (first == last for STORE) */
    int depth;       /* enclosing checkpoints */
    int parent;      /* index of the enclosing CHECKPOINT node, -1 at top level */
} remat_plan_node;

/* What a stage does in the step's first forward pass. */
typedef enum remat_stage_action {
    REMAT_STAGE_STORE = 0,      /* keep everything it saves; never recomputed */
    REMAT_STAGE_CHECKPOINT = 1, /* first stage of a checkpointed segment: keep its input only */
    REMAT_STAGE_RECOMPUTE = 2   /* inside a segment: keep nothing, recompute in backward */
} remat_stage_action;

/* What an op-level plan does with one op of a checkpointed stage (remat_plan_stage.keep). */
enum { REMAT_OP_RECOMPUTE = 0, REMAT_OP_KEEP = 1, REMAT_OP_OFFLOAD = 2, REMAT_OP_KEEP_BF16 = 3 };

typedef struct remat_plan_stage {
    remat_stage_action action;
    int n_forward; /* forward runs per step: 1 + number of enclosing checkpoints */
    /* Op-level plans (REMAT_PLAN_OPS) only, for a CHECKPOINT stage: keep[i]
     * (n_ops entries, owned by the plan) says what the selective checkpoint
     * does with the stage's i-th op (remat_stage_ops order):
     * REMAT_OP_RECOMPUTE, REMAT_OP_KEEP (MUST_SAVE: its outputs stay on the
     * device from the forward to the recomputation) or REMAT_OP_OFFLOAD
     * (MUST_CPU_OFFLOAD: they go to host memory and come back for the
     * recomputation; only ops the profile marks offloadable) or
     * REMAT_OP_KEEP_BF16 (MUST_SAVE_BF16, lossy, only when
     * remat_plan_options.lossy allows it: kept like KEEP, its f32 tensors
     * stored as bf16 until the recomputation). keep NULL: the whole stage
     * is recomputed (a plain checkpoint). A keep set that keeps some op
     * belongs to a stage checkpointed alone at the top level of the plan:
     * remat_plan_run refuses it anywhere else (REMAT_EINVAL: nested in a
     * checkpointed segment, or on a stored stage). */
    int n_ops;
    uint8_t *keep;
    size_t keep_bytes;     /* device storage the kept ops hold from forward to recomputation
                              (KEEP_BF16 ops: as bf16) */
    double recompute_time; /* predicted seconds of the stage's recomputation */
    size_t offload_bytes;  /* storage the offloaded ops move to host memory and back */
    double offload_time;   /* predicted seconds of those copies not hidden behind compute */
    size_t bf16_bytes;     /* f32 bytes the KEEP_BF16 ops store as bf16 (half of them saved);
                              of a store_bf16 stage, the f32 bytes of its saves stored as bf16 */
    double cast_time;      /* predicted seconds of those conversions, to bf16 and back */
    /* A STORE stage of an op-level plan kept as bf16 (remat_plan_options.lossy only, LOSSY):
     * remat_plan_run runs its forward under saved-tensor hooks that store each saved f32
     * tensor the graph made (contiguous, alone on its storage, not the stage's input) as
     * bf16 until its backward converts it back (remat_stage_ops.store_bf16_bytes). Only on a
     * stage stored at the top level of the plan: remat_plan_run refuses it anywhere else.
     * Saved-tensor hooks of the caller's in force around remat_plan_run (offload,
     * compression, a checkpoint around the step) still see every save of such a stage, as
     * they see a stage stored in f32: what these hooks store (the bf16 copy, or the save as
     * it is) goes through the caller's pack, and comes back through its unpack before the
     * conversion to f32. */
    bool store_bf16;
} remat_plan_stage;

typedef enum remat_plan_kind {
    REMAT_PLAN_OPTIMAL = 0,    /* remat_plan_create: minimal predicted time under the budget */
    REMAT_PLAN_MIN_MEMORY = 1, /* remat_plan_create fell back to the minimal-peak plan (the
                                  budget is feasible but too tight for the slot grid) */
    REMAT_PLAN_SEQUENTIAL = 2, /* remat_plan_sequential: PyTorch's checkpoint_sequential */
    REMAT_PLAN_REVOLVE = 3,    /* remat_plan_revolve: binomial schedule */
    REMAT_PLAN_OPS = 4         /* remat_plan_create_ops: per-op keep/recompute inside blocks */
} remat_plan_kind;

typedef struct remat_plan {
    remat_plan_kind kind;
    int n_stages;
    remat_plan_stage *stages; /* n_stages entries */
    int n_nodes;
    remat_plan_node *nodes;  /* pre-order */
    bool has_profile;        /* the predictions below come from a profile */
    size_t budget_bytes;     /* REMAT_PLAN_OPTIMAL/MIN_MEMORY: the budget asked for */
    size_t min_budget_bytes; /* with a profile: smallest budget any plan fits */
    size_t peak_bytes;       /* with a profile: predicted peak of this plan */
    size_t peak_store_all;   /* with a profile: predicted peak without checkpointing */
    double time;             /* predicted step time, seconds (without a profile:
                                 forward runs + stages, in units of one stage forward) */
    double time_store_all;   /* the same without checkpointing */
    int64_t n_recomputed;    /* stage forwards run again in backward */
    size_t slot_bytes;       /* remat_plan_create: bytes per memory slot */
    int checkpoints;         /* remat_plan_revolve: c; remat_plan_sequential: segments */
    bool whole_step;         /* remat_plan_create_step: budget_bytes, min_budget_bytes,
                                 peak_bytes and peak_store_all are the whole step's allocator
                                 bytes (step profile's fixed bytes included); time includes
                                 the head */
} remat_plan;

typedef struct remat_plan_options {
    /* Memory slots of the dynamic program (the budget is cut into this many
     * equal slots; sizes are rounded up to whole slots). More slots: less
     * of the budget lost to rounding, more time (n_stages^3/6 * slots
     * steps) and memory (n_stages^2/2 * slots * 12 bytes). 0 → automatic:
     * 500 to 4000 (tables under 64 MiB, ~2e8 steps at most; 32 stages get
     * 4000, 96 stages ~1300). When no plan fits the grid (a budget just
     * above the minimum), remat_plan_create tries 4 and then 16 times the
     * slots while the tables stay under 64 MiB and ~2e8 steps. */
    int mem_slots;
    /* Offload (remat_plan_create_ops only; the other planners ignore it):
     * true lets the solver move the outputs of a checkpointed stage's ops to
     * host memory in the forward and back for the recomputation
     * (REMAT_OP_OFFLOAD), for the ops the op profile marks offloadable
     * (saves on a device with real offload: cuda; never on cpu). Exact:
     * gradients stay bitwise those of no checkpointing. Default false:
     * keep or recompute only (offload is opt-in: its cost depends on the
     * host link, ops->host_bytes_per_s, which the profile does not measure). */
    bool offload;
    /* Lossy compression (remat_plan_create_ops only; the other planners
     * ignore it): true lets the solver keep an op's outputs with their f32
     * tensors stored as bf16 from the forward to the recomputation
     * (REMAT_OP_KEEP_BF16: half their bytes, for two conversions' time,
     * ops->cast_bytes_per_s), for the ops whose profile shows such bytes
     * (bf16_bytes: on any device). LOSSY: each stored value comes back
     * rounded to 8 significant bits (relative error <= 2^-8), the
     * recomputation runs on the rounded values, and gradients differ from
     * those of no checkpointing (docs/planner.md "Lossy compression" gives
     * the tolerance the tests hold). It may also keep a stored stage's saved
     * f32 tensors as bf16 (remat_plan_stage.store_bf16), where the op profile
     * measured that (remat_stage_ops.store_bf16_*). The solver picks either
     * only where it makes the plan faster under the budget. Default false:
     * plans and gradients are exactly those without the field. */
    bool lossy;
} remat_plan_options;

/* The plan with minimal predicted step time whose predicted peak fits
 * budget_bytes (see "memory model" above). Errors: REMAT_EINVAL for NULL
 * arguments, an empty profile, or a budget below the smallest feasible one
 * (the message states that minimum in bytes and MiB); REMAT_ENOMEM when
 * the tables do not fit (use fewer slots). */
remat_status remat_plan_create(remat_plan **out, const remat_profile *profile, size_t budget_bytes);
remat_status remat_plan_create_ex(remat_plan **out, const remat_profile *profile,
                                  size_t budget_bytes, const remat_plan_options *opts);

/* The smallest budget any plan fits (the minimal predicted peak). */
remat_status remat_plan_min_budget(const remat_profile *profile, size_t *bytes);

/* ---- whole-step budgets ------------------------------------------------------------
 * A chain is usually the middle of a training step: something makes its input
 * (an embedding), something consumes its output (a head and the loss), and the
 * step also holds parameters, optimizer state, the batch and the parameter
 * gradients. Someone with a memory limit means all of it. A step profile
 * describes what lies outside the chain, so that the budget bounds the whole
 * step's allocator peak:
 *   - fixed_bytes are live for the whole step (the level when the chain starts);
 *   - the head is one more stage after the chain, always stored (never
 *     checkpointed), whose output is the loss: its backward makes the chain
 *     output's gradient;
 *   - every stage's grad_bytes (and the head's) become .grad in its backward
 *     and stay to the end of the step (accumulated, the model counts them
 *     where they appear: a segment's recomputation and backward run with the
 *     gradients of every later stage live);
 *   - after the chain's backward, the part before the chain runs its backward
 *     with the chain input's gradient and every parameter gradient live,
 *     peaking tail_peak above them.
 * A step peak = fixed_bytes + max(the chain's and head's peak, all gradients +
 * the input gradient + tail_peak). When the .grad buffers already exist at the
 * step's start (gradient accumulation over micro-batches), count them in
 * fixed_bytes and set grad_bytes to 0. */
typedef struct remat_step_profile {
    size_t fixed_bytes;       /* live from the chain's start to the step's end: parameters,
                                 optimizer state, existing .grad, the batch, the chain's input and
                                 what the part before the chain keeps for its backward */
    remat_stage_profile head; /* the part after the chain up to the loss, measured as a stage on
                                 the chain's output (remat_profile_stages with one stage) */
    size_t tail_peak;         /* peak of the backward before the chain, above the bytes live
                                 when it starts */
} remat_step_profile;

/* remat_plan_create_ex with a budget for the whole step (see above): the
 * fastest plan of the chain whose predicted step peak fits budget_bytes. The
 * plan covers the chain's stages only (profile->n_stages); its byte fields
 * are whole-step figures (plan->whole_step). A budget at or above
 * plan->peak_store_all stores everything. Errors as remat_plan_create_ex;
 * an infeasible budget's message states the smallest feasible one. */
remat_status remat_plan_create_step(remat_plan **out, const remat_profile *profile,
                                    const remat_step_profile *step, size_t budget_bytes,
                                    const remat_plan_options *opts);

/* PyTorch's checkpoint_sequential(stages, segments) as a plan: n_stages/segments
 * stages per chunk, the first segments-1 chunks checkpointed, the rest
 * stored. profile may be NULL (n_stages is then used; with a profile
 * n_stages must match or be 0). */
remat_status remat_plan_sequential(remat_plan **out, const remat_profile *profile, int n_stages,
                                   int segments);

/* Revolve's binomial schedule for a uniform chain of n_stages stages with
 * `checkpoints` stored states (the input counts as one; Griewank's c).
 * Recomputes exactly remat_revolve_cost(n_stages, checkpoints) stage
 * forwards. profile may be NULL (as for remat_plan_sequential). */
remat_status remat_plan_revolve(remat_plan **out, const remat_profile *profile, int n_stages,
                                int checkpoints);

/* Griewank's closed form: the minimal number of forward steps recomputed to
 * reverse `steps` steps with `checkpoints` checkpoints,
 * t(l, c) = r*l - beta(c+1, r-1), r the smallest with beta(c, r) >= l,
 * beta(c, r) = (c+r)!/(c! r!). REMAT_EINVAL for steps < 1, checkpoints < 1
 * (unless steps == 1), REMAT_EUNSUPPORTED if the result overflows. */
remat_status remat_revolve_cost(int64_t steps, int64_t checkpoints, int64_t *recomputations);

/* NULL-safe. */
void remat_plan_free(remat_plan *plan);

/* ---- op-level planning -------------------------------------------------------------
 * Inside a checkpointed stage every op is recomputed; a selective checkpoint
 * (remat/selective.h) can keep some ops' outputs instead. The op-level
 * planner decides, for each saved tensor of each stage, keep or recompute
 * (or offload to host memory, on a device with transfer ops, and keep as
 * bf16, lossy, when remat_plan_options allow them), together with
 * which stages to checkpoint, from a profile of every op:
 *
 *   remat_op_profile *ops;  remat_profile *prof;  remat_plan *plan;
 *   remat_profile_stages(&prof, n, stages, x, NULL);
 *   remat_profile_ops(&ops, n, stages, x, NULL);
 *   remat_plan_create_ops(&plan, prof, ops, &step, budget, NULL);
 *   remat_plan_run(plan, stages, x, &y);   // every step, as any plan
 *
 * See docs/planner.md ("Op-level plans") for the model and its guarantees. */
typedef struct remat_op_profile_entry {
    char name[40];       /* the public op ("remat_linear"), as policies see it */
    double time;         /* forward seconds, median over the runs */
    size_t cache_bytes;  /* storage a selective checkpoint holds when it keeps this op: its
                            fresh outputs and the tensors it saves that are neither inputs nor
                            views of its outputs (0 for an op whose output is a view) */
    bool cacheable;      /* a policy can keep it (in-place ops and remat_tag cannot) */
    int n_saved;         /* tensors the op saves for its own backward */
    int n_saved_views;   /* of which views of an input or of a larger storage (no new bytes) */
    size_t saved_bytes;  /* bytes of the tensors it saves (view bytes) */
    size_t lean_bytes;   /* of those, stored lean exactly: 1-bit masks (u8), indices (i64) */
    size_t lossy_bytes;  /* of those, f32 activations bf16 saved-tensor hooks would halve
                            (remat_bf16_saved_hooks; informational) */
    size_t bf16_bytes;   /* of cache_bytes, the f32 storage a lossy keep (REMAT_OP_KEEP_BF16,
                           selective MUST_SAVE_BF16) stores as bf16, saving half of it:
                           contiguous f32 tensors alone on their storage, on any device
                           (the conversion is the device's converting copy) */
    bool offloadable;    /* its saves live on a device with real offload (cuda; never on cpu):
                           the planner may move them to host memory (REMAT_OP_OFFLOAD) when
                           remat_plan_options.offload allows it */
    bool recompute_free; /* a recomputation never runs it: the checkpoint's early stop
                            (remat_checkpoint_options.early_stop, on by default) ends the
                            recomputation at the stage's last save, so the ops after the
                            last op that saves anything, and that op too when it saves only
                            before its kernel runs (a linear saving its input and weight),
                            cost nothing to recompute and gain nothing kept (e.g. a
                            transformer block's MLP down projection and residual add) */
    size_t run_peak;     /* the allocator's peak while the op ran in the profiling forward
                            (which keeps every op), above the bytes live before the stage:
                            what a recomputation holds at this op, at most, besides the kept
                            ops it has not reached yet (the planner's recomputation bound,
                            docs/planner.md "The model"); 0 in every op of a stage: not
                            measured (a hand-made profile), the planner then counts the
                            stage's forward peak plus everything it keeps */
} remat_op_profile_entry;

typedef struct remat_stage_ops {
    int n_ops;
    remat_op_profile_entry *ops; /* in the order the stage calls them (a policy's op_index) */
    int same_as; /* the stage whose runs gave the times: this one, or an earlier stage calling
                    the same ops with the same bytes (measured once per distinct block) */
    /* The stage stored as bf16 (remat_plan_options.lossy: remat_plan_stage.store_bf16):
     * remat_profile_ops runs it once more as a stored stage, under the saved-tensor hooks
     * remat_plan_run puts around such a stage's forward (each saved f32 tensor the graph
     * made, contiguous and alone on its storage, not the stage's input, stored as bf16;
     * docs/planner.md "Lossy compression"), and its backward, and measures, as
     * remat_profile_stages does for a stored stage: */
    size_t store_bf16_bytes;    /* f32 bytes of the saves the hooks stored as bf16 (each
                                   converted to bf16 in the forward and back in the backward);
                                   0: nothing to convert or not measured (a hand-made profile):
                                   the planner does not offer the variant */
    size_t store_bf16_saved;    /* bytes kept for backward besides input and output (the
                                   stage's saved_bytes, with those tensors in bf16) */
    size_t store_bf16_fwd_peak; /* peak of that forward (conversions included) */
    size_t store_bf16_bwd_peak; /* peak of its backward above output grad + kept bytes (the
                                   conversions back to f32 included) */
} remat_stage_ops;

typedef struct remat_op_profile {
    int n_stages;
    remat_stage_ops *stages;
    int runs; /* timed runs per distinct stage */
    /* Bytes per second the host link moves one way (device to host or back)
     * while compute runs, for the cost of offloaded ops; 0: the default,
     * REMAT_HOST_LINK_BYTES_PER_S. remat_profile_ops leaves it 0: set it to
     * what your machine measures (e.g. cudaMemcpyAsync of pinned memory). */
    double host_bytes_per_s;
    /* f32 bytes per second one conversion to bf16 (or back) processes, for
     * the cost of lossy keeps; remat_profile_ops measures it where some op
     * has bf16_bytes (median of `runs` conversions of the largest such
     * tensor's size, at most 16 MiB); 0: REMAT_CAST_BYTES_PER_S. */
    double cast_bytes_per_s;
} remat_op_profile;

/* 2 GB/s of f32 each way: a conservative figure for one core's f32 <-> bf16
 * conversion (4 bytes read and 2 written per value), for hand-made profiles. */
#define REMAT_CAST_BYTES_PER_S 2e9

/* 12 GB/s: what pinned copies reach one way over PCIe 4.0 x16 in practice
 * (about half of the link's 32 GB/s peak is conservative for a copy that
 * shares the link with the other direction's prefetch). */
#define REMAT_HOST_LINK_BYTES_PER_S 12e9

/* Runs every stage (on the previous stage's output, as remat_profile_stages)
 * inside a selective checkpoint that keeps every op, and records per op its
 * name, its time (between the policy calls that open it and the next op),
 * the bytes keeping it costs (the region's remat_sac_stats.bytes_cached as it
 * grows) and what it saves for backward (through the save observer, chained
 * to one already installed). A stage whose first run calls the same ops with
 * the same bytes as an earlier measured one reuses that stage's times
 * (same_as). Grad mode, the RNG state and the input are left as they were.
 * Errors as remat_profile_stages. */
remat_status remat_profile_ops(remat_op_profile **out, int n_stages, const remat_stage *stages,
                               remat_tensor *input, const remat_profile_options *opts);
/* NULL-safe. */
void remat_op_profile_free(remat_op_profile *ops);
/* What an op profile tells the block-level planners (remat_plan_create,
 * remat_plan_create_step), written into profile (same stage count):
 *   - stages that repeat an earlier one (ops->stages[k].same_as: the same
 *     ops with the same bytes) and that stage get the median of their
 *     fwd_time and of their bwd_time: one computation measured once per
 *     stage, which a loaded machine makes look up to 2x cheaper or dearer
 *     from one block to the next (GPT L=12, load ~5: 82-114 ms forwards);
 *   - each stage's recompute_free_time: the forward time of its
 *     recompute_free ops, the op times scaled to add up to fwd_time, so that
 *     a checkpoint's recomputation is charged what it runs.
 * remat_plan_create_ops does the same on its own model (the profile it is
 * given is left as it is). REMAT_EINVAL on NULL or a stage count that
 * differs, REMAT_ENOMEM. */
remat_status remat_profile_apply_ops(remat_profile *profile, const remat_op_profile *ops);
/* One block per distinct stage: each op, its time, cache bytes and saves. */
void remat_op_profile_print(const remat_op_profile *ops, FILE *f);

/* Profiles of a chain made of two others' stages, without running it:
 * *out's stages are a's [a_first, a_first + a_count) followed by b's
 * [b_first, b_first + b_count) (either count may be 0, not both). What for:
 * a model whose blocks also run as half-block stages (remat_model_half_stages)
 * profiles both chains once, and the planner compares every mix — the first
 * blocks whole, the last ones in halves — on spliced profiles. A stage's
 * numbers do not depend on where it sits, so the splice is what profiling the
 * mixed chain would measure, up to the noise of the times. The op profile's
 * same_as links are renumbered (a stage repeats the first spliced stage from
 * the same part that repeats the same measured one); runs is the larger.
 * *out (OUT) is the caller's to free; NULL on failure. Errors: REMAT_EINVAL
 * (NULL arguments, a range outside its chain, no stage at all; for the block
 * profile, a's last output bytes differing from b's first input bytes; a
 * malformed same_as), REMAT_ENOMEM. */
remat_status remat_profile_splice(remat_profile **out, const remat_profile *a, int a_first,
                                  int a_count, const remat_profile *b, int b_first, int b_count);
remat_status remat_op_profile_splice(remat_op_profile **out, const remat_op_profile *a, int a_first,
                                     int a_count, const remat_op_profile *b, int b_first,
                                     int b_count);

/* The op-level plan with the least predicted step time whose predicted
 * peak fits budget_bytes. step non-NULL: a whole-step budget (as
 * remat_plan_create_step; plan->whole_step); NULL: the chain's share (as
 * remat_plan_create). The plans considered are (a) every stage stored or
 * checkpointed on its own, a checkpointed stage keeping any subset of its
 * cacheable ops (solved exactly: the Pareto set of each stage's subsets,
 * then a dynamic program over the stages on a memory grid fixed by the
 * profile; with opts->offload, where ops are offloadable, once more with offload as a
 * third choice, see docs/planner.md "Offload"), and (b) rotor's nested block
 * schedules (rotor on that grid and on each of remat_plan_create's own
 * grids, the minimal-peak plan); the fastest wins. Guarantees: the
 * predicted peak never exceeds the budget; a larger budget never gives a
 * slower plan (each grid's feasible plans only grow with the budget); and
 * the plan is never slower than what remat_plan_create (step NULL) or
 * remat_plan_create_step gives at the same budget and mem_slots on the
 * profile remat_profile_apply_ops(profile, ops) makes (the same model).
 * kind is REMAT_PLAN_OPS for (a), REMAT_PLAN_OPTIMAL or
 * REMAT_PLAN_MIN_MEMORY for (b). Errors as remat_plan_create_step, and
 * REMAT_EINVAL when ops does not match the profile's stages. */
remat_status remat_plan_create_ops(remat_plan **out, const remat_profile *profile,
                                   const remat_op_profile *ops, const remat_step_profile *step,
                                   size_t budget_bytes, const remat_plan_options *opts);

/* Per stage: stored / checkpointed, the ops kept and recomputed (by name,
 * with counts for repeats), kept bytes and predicted recompute time. With
 * measured_peak/measured_time > 0, a last line sets them beside the
 * prediction. Nothing for NULL plan/f; ops may be NULL (indices instead of
 * names). */
void remat_plan_explain(const remat_plan *plan, const remat_op_profile *ops, size_t measured_peak,
                        double measured_time, FILE *f);

/* Summary, per-stage table and the nested structure (remat_plan_structure's
 * text, e.g. "structure: [ckpt 0-5: [ckpt 0-2: 0-2] 3-5] 6-7").
 * NULL plan/f → nothing. */
void remat_plan_print(const remat_plan *plan, FILE *f);

/* The plan's nesting as one line of text, as remat_plan_print shows it:
 * runs of stored stages as "a-b" (one stage as "a"), each checkpointed
 * segment as "[ckpt FIRST-LAST: what it holds]", a checkpointed stage of an
 * op-level plan with the ops it keeps ("[ckpt 3-3: 3 keeps 5/25 ops]"), e.g.
 *   [ckpt 0-5: [ckpt 0-2: 0-2] 3-5] 6-7
 * Writes it into buf (n bytes; terminated whenever n > 0): a text of n bytes
 * or more is cut and ends in "..." (when n > 4). *len (OUT, may be NULL) gets
 * the whole text's length without the terminator, so a buf of *len + 1 bytes
 * holds it all (buf may be NULL with n 0 to ask only the length). A plan
 * without nodes gives "". Errors: REMAT_EINVAL for a NULL plan, or a NULL buf
 * with n > 0; REMAT_ENOMEM. On error buf holds "" (when n > 0), *len 0. */
remat_status remat_plan_structure(const remat_plan *plan, char *buf, size_t n, size_t *len);

/* Runs the plan's forward on input: stages[0..plan->n_stages) in order,
 * checkpointed segments through non-reentrant remat_checkpoint (nested as
 * the plan says). *output receives the last stage's output (new reference,
 * held by the open scope if a scope is open); backward through it as usual. The call
 * copies the plan's tree and the stage list for the recomputations, so the
 * plan and the array may go right after it; the stages' user_data must
 * stay valid until the backward has run. Errors: REMAT_EINVAL (NULL
 * arguments, a NULL stage fn, a malformed plan, an op-level keep set on a
 * stage that is not checkpointed alone at the top level, a stage returning
 * no tensor; nothing has run then), anything a stage or remat_checkpoint returns (message prefixed
 * with "stage k"). */
remat_status remat_plan_run(const remat_plan *plan, const remat_stage *stages, remat_tensor *input,
                            remat_tensor **output);
/* Same with checkpoint options for every segment (use_reentrant is forced
 * to REMAT_OPT_FALSE; base NULL → defaults). */
remat_status remat_plan_run_ex(const remat_plan *plan, const remat_stage *stages,
                               remat_tensor *input, remat_tensor **output,
                               const remat_checkpoint_options *base);

/* Profile + plan in one call, for a budget of the chain's share (the
 * memory model above, as remat_plan_create). By default per op:
 * remat_profile_stages and remat_profile_ops measure the chain on input
 * (each stage runs about twice as often as for the block profile alone),
 * then remat_plan_create_ops(out, prof, ops, NULL, budget_bytes, NULL)
 * plans it: exact keep/recompute choices (no offload, nothing lossy), the
 * fastest of the op-level plans (kind REMAT_PLAN_OPS, a checkpointed stage
 * keeping some of its ops) and rotor's block-level ones on the same model,
 * which knows what early stop skips and gives identical stages their
 * median times: never slower than remat_plan_create's plan on that model,
 * and never slower at a larger budget. remat_plan_run runs either kind. profile_opts (NULL →
 * defaults) sets both profilers' runs and warm-up; its blocks_only gives
 * the block-level plan of remat_profile_stages + remat_plan_create alone.
 * *out (OUT) receives a plan the caller frees with remat_plan_free; NULL
 * on failure. The profiles are freed. Errors: those of remat_profile_stages,
 * remat_profile_ops (a stage a selective checkpoint cannot run; blocks_only
 * avoids it) and the planner (REMAT_EINVAL with the minimum for a budget
 * below it), prefixed "remat_plan_auto: ". */
remat_status remat_plan_auto(remat_plan **out, int n_stages, const remat_stage *stages,
                             remat_tensor *input, size_t budget_bytes,
                             const remat_profile_options *profile_opts);

/* checkpoint_sequential with a budget instead of a segment count: profiles,
 * plans (remat_plan_auto with default options: per op) and runs in one call.
 * The plan is cached (keyed by the stage list, the budget, the options and
 * the input's shape/dtype/device), so calling it every step profiles once
 * and then runs the same plan, op-level keep sets included;
 * remat_checkpoint_budget_clear() drops the cache (not while another
 * thread is inside remat_checkpoint_budget; pending backward passes are
 * fine). *out (OUT): the chain's output, a new reference (held by the open
 * scope if one is open); NULL on failure. Errors as remat_plan_auto and
 * remat_plan_run (prefixed "remat_checkpoint_budget: "); a failed plan is
 * not cached. */
remat_status remat_checkpoint_budget(remat_tensor **out, int n_stages, const remat_stage *stages,
                                     size_t budget_bytes, remat_tensor *input);
/* The same with profile options (NULL → defaults; blocks_only: whole blocks,
 * as remat_plan_auto). Plans made with different options are cached apart. */
remat_status remat_checkpoint_budget_ex(remat_tensor **out, int n_stages, const remat_stage *stages,
                                        size_t budget_bytes, remat_tensor *input,
                                        const remat_profile_options *opts);
void remat_checkpoint_budget_clear(void);

/* Parses a byte size: "1048576", "512K", "96MiB", "1.5G", "2GB" (K/M/G/T;
 * both KB and KiB mean 1024, as PyTorch's memory stats do). REMAT_EFORMAT on
 * anything else. */
remat_status remat_parse_bytes(const char *text, size_t *bytes);

REMAT_END_PUBLIC
#ifdef __cplusplus
}
#endif
#endif /* REMAT_PLANNER_H */
