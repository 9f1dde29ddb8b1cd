/*
 * src/planner/planner_internal.h — shared pieces of the budget planner:
 * the cost/memory model built from a profile, plan construction and
 * evaluation. See include/remat/planner.h for the model in words.
 *
 * Stages are 0-based. x[k] is the size of stage k's input (x[0] the chain's
 * input, x[k+1] = stage k's output); a sub-chain [s..t] is processed with
 * its input a_{s-1} kept outside its share of memory and, unless t is the
 * last stage, the gradient of its output (x[t+1] bytes) live throughout.
 */
#ifndef REMAT_PLANNER_INTERNAL_H
#define REMAT_PLANNER_INTERNAL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "remat/planner.h"

/* The model in bytes (exact) derived from a profile. */
typedef struct pl_model {
    int L;
    uint64_t *x;    /* L + 1: x[k] = input bytes of stage k, x[L] = output of the chain */
    uint64_t *abar; /* bytes a stored stage keeps: output + saved */
    uint64_t *fpa;  /* forward peak when storing (>= abar) */
    uint64_t *fpn;  /* forward peak when keeping nothing (>= output) */
    uint64_t *bp;   /* backward peak above grad + kept bytes */
    uint64_t *gp;   /* L + 1 prefix sums of the parameter-gradient bytes: gp[k] = g[0..k) */
    double *uf, *ub;
    double *ufree; /* of uf, what a recomputation never runs when the stage is the last one it
                      recomputes (recompute_free: early stop); 0 when unknown */
    /* Whole-step model (pl_model_init_step): stage L-1 is the head, always
     * stored; n_chain = L - 1 stages are the user's chain. Otherwise
     * n_chain = L, gp all zero (parameter gradients outside the budget),
     * fixed = tail = 0. */
    int n_chain;
    bool step;
    uint64_t fixed, tail;
} pl_model;

/* The count a plan of a fixed shape is asked for ("segments", ...), its
 * note in the message when it is below 1 (" (the input is one)" or ""). */
typedef struct pl_count {
    const char *name, *note;
    int value;
} pl_count;
/* The checks every plan of a fixed shape starts with: out not NULL (*out =
 * NULL), *L = the stages of a plan for `call` over profile (when not NULL:
 * n_stages must be 0 or its stage count) or n_stages (>= 1), and count at
 * least 1. REMAT_EINVAL naming call otherwise. */
remat_status pl_plan_begin(remat_plan **out, const remat_profile *profile, int n_stages,
                           const pl_count *count, const char *call, int *L);
remat_status pl_model_init(pl_model *m, const remat_profile *p, const char *call);
/* The chain of p followed by the step's head, with gradients, fixed bytes and tail. */
remat_status pl_model_init_step(pl_model *m, const remat_profile *p, const remat_step_profile *st,
                                const char *call);
void pl_model_free(pl_model *m);
/* Gradient of the output of a sub-chain ending at t, live while it runs. */
static inline uint64_t pl_dout(const pl_model *m, int t) { return t < m->L - 1 ? m->x[t + 1] : 0; }
/* Parameter-gradient bytes of stages a..b (0 when a > b): live while the
 * stages before a recompute and run backward. */
static inline uint64_t pl_grads(const pl_model *m, int a, int b) {
    return a <= b ? m->gp[b + 1] - m->gp[a] : 0;
}
/* Index of sub-chain [s..t] (s <= t) in a triangular table of the L stages' sub-chains
 * (pl_tri(0, L) entries). */
static inline size_t pl_tri(int s, int t) { return (size_t)t * (size_t)(t + 1) / 2 + (size_t)s; }
/* Predicted peak of the store-all plan over the model's L stages (chain share). */
uint64_t pl_store_all_peak(const pl_model *m);
/* A chain-share peak as the budget counts it: for a whole-step model,
 * fixed + max(peak, every gradient + the input's gradient + tail); else peak. */
uint64_t pl_total(const pl_model *m, uint64_t chain_peak);

/* Growable plan under construction. */
typedef struct pl_builder {
    remat_plan_node *nodes;
    int n, cap;
    int failed; /* ENOMEM seen */
} pl_builder;

/* Appends a node; returns its index (or -1 after an allocation failure). */
int pl_push(pl_builder *b, remat_plan_op op, int first, int last, int depth, int parent);
/* Turns the builder into a plan (derives per-stage actions); on success the
 * builder's nodes belong to the plan. Evaluates it with `model` if given. */
remat_status pl_finish(remat_plan **out, pl_builder *b, int n_stages, remat_plan_kind kind,
                       const pl_model *model, const char *call);

/* pl_finish for a plan of a fixed shape over L stages: evaluated with
 * profile's model when profile is not NULL, its checkpoints set. The
 * builder's nodes are the plan's, or freed on failure. */
remat_status pl_finish_shaped(remat_plan **out, pl_builder *b, int L, remat_plan_kind kind,
                              const remat_profile *profile, int checkpoints, const char *call);

/* Predicted peak (bytes above the step's start) and time of a plan tree.
 * Returns -1 if the tree is malformed. */
int pl_eval(const remat_plan *plan, const pl_model *m, uint64_t *peak, double *time);
/* Checks that the nodes form a valid tree covering stages [0, n_stages). */
remat_status pl_validate(const remat_plan *plan, const char *call);

/* Minimal predicted peak over all plans (exact, bytes) and a plan that
 * reaches it (with the least time among those the recursion sees). */
remat_status pl_min_peak(const pl_model *m, uint64_t *peak, pl_builder *b, const char *call);

/* Rotor's DP for a chain share of chain_budget bytes on a grid of `unit`
 * bytes per slot (fixed by the caller, so that a larger budget only adds
 * slots: the op-level planner's monotonicity). *feasible: a plan was found
 * and appended to b (the head of a whole-step model stripped). */
remat_status pl_rotor_on_grid(const pl_model *m, uint64_t chain_budget, uint64_t unit,
                              pl_builder *b, bool *feasible, const char *call);
/* The automatic slot count of remat_plan_create for this model. */
int pl_auto_slots(const pl_model *m);
/* remat_plan_create's grids: level k (0 <= k < PL_GRID_LEVELS) has slots << 2k
 * slots (slots: remat_plan_options.mem_slots or pl_auto_slots) over the chain's
 * share; it tries level k only when the coarser ones fit no plan, and level k > 0
 * only when pl_level_fits. */
#define PL_GRID_LEVELS 3
/* Whether a refined grid of `slots` slots stays within the automatic grid's limits
 * (tables under 64 MiB, ~2e8 steps): a property of the model, never of the budget. */
bool pl_level_fits(const pl_model *m, int64_t slots);
/* Rotor's DP on remat_plan_create's grid of `slots` slots over chain_budget bytes;
 * *feasible: a plan was found and appended to b (the head stripped). A larger
 * budget never gives a slower plan on one slot count. */
remat_status pl_rotor_level(const pl_model *m, uint64_t chain_budget, int64_t slots, pl_builder *b,
                            bool *feasible, const char *call);
/* A lower bound on the predicted time of every block-level plan whose peak fits
 * chain_budget (on any grid): rotor's DP with sizes rounded down to `unit` bytes.
 * *feasible false: no block-level plan fits at all. */
remat_status pl_rotor_bound(const pl_model *m, uint64_t chain_budget, uint64_t unit, double *time,
                            bool *feasible, const char *call);

/* Store-everything plan. */
remat_status pl_build_store_all(pl_builder *b, int n_stages);

/* ---- the walk both profilers make (profile.c) ------------------------------------------ */
/* The argument checks of remat_profile_stages and remat_profile_ops
 * (REMAT_EINVAL naming call); then *runs (opts' or default_runs) and *warm
 * (the warm-up runs) as opts ask. */
remat_status pl_check_profile_args(const char *call, int n_stages, const remat_stage *stages,
                                   const remat_tensor *input, const remat_profile_options *opts,
                                   int default_runs, int *runs, int *warm);
/* What a profiler does with each stage of the chain. */
typedef struct pl_stage_walk {
    /* Measures stage k on a (a leaf requiring grad unless i64) and sets
     * *next to its output, detached, for the next stage (NULL on failure). */
    remat_status (*stage)(void *ud, int k, remat_tensor *a, remat_tensor **next);
    void (*begin)(void *ud, remat_device dev); /* once grad is on (may be NULL) */
    void (*end)(void *ud);                     /* before grad mode is restored (may be NULL) */
    void *ud;
} pl_stage_walk;
/* Runs input through the n_stages stages with w (the random stream forked
 * on input's device and restored after, grad on, the caller's scope set
 * aside): a failure names `call` and the stage. */
remat_status pl_walk_stages(const char *call, remat_tensor *input, int n_stages,
                            const pl_stage_walk *w);

/* The median of v[0..n), n >= 1 (sorts v; the mean of the middle two for an even n). */
double pl_median(double *v, int n);
/* What an op profile tells the block-level model of its n stages (remat_profile_apply_ops
 * and remat_plan_create_ops both use it, on the profile and on the model): the forward
 * times fwd[] and backward times bwd[] of each group of stages that repeat one another
 * (ops->stages[k].same_as, the same op count) become the group's medians (the same
 * computation, measured once per stage under whatever else the machine ran: pooled, a
 * loaded machine's noise does not make identical blocks look cheaper or dearer to
 * recompute than each other); then free_time[k] = the forward seconds of stage k's
 * recompute_free ops, the op times scaled to add up to fwd[k] (0 when they have no
 * time). REMAT_ENOMEM (no message; nothing written) or REMAT_OK. */
remat_status pl_apply_op_times(const remat_op_profile *ops, int n, double *fwd, double *bwd,
                               double *free_time);

/* ---- stored stages kept as bf16 (storebf16.c) ------------------------------------------ */
/* One stored forward's bf16 hooks: the stage input's storage, never converted (skip), what
 * the hooks stored as bf16 (f32 bytes; the largest single tensor), and the caller's hooks in
 * force when they were made (outer.pack NULL: none), which what they store passes through. */
typedef struct pl_store_bf16 {
    const void *skip;
    size_t bytes, largest;
    remat_saved_hooks outer;
} pl_store_bf16;
/* The hooks remat_plan_run pushes around the forward of a stage it stores as bf16, composed
 * with the pair in force now (push them right away; c lives until they are popped; the
 * handles they make do not need it). */
remat_saved_hooks pl_store_bf16_hooks(pl_store_bf16 *c, const remat_tensor *input);

/* ---- one storing forward and its backward, measured (profile.c) ------------------------ */
typedef struct pl_store_meas {
    double tf, tb;                           /* seconds */
    size_t out_bytes, saved, fpa, bp, grads; /* as remat_stage_profile's fields */
} pl_store_meas;
/* Runs stage st on a as a stored stage (hooks, when not NULL, pushed around its forward)
 * and its backward through remat_grad (no .grad touched), with this thread's allocation
 * meter running (rm_meter_start). */
remat_status pl_measure_store(const remat_stage *st, remat_tensor *a,
                              const remat_saved_hooks *hooks, pl_store_meas *m);

#define PL_MIB(b) ((double)(b) / (1024.0 * 1024.0))

#endif /* REMAT_PLANNER_INTERNAL_H */
