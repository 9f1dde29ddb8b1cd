/*
 * remat/strategy.h — running a chain of blocks under a checkpointing
 * strategy: the five ways the remat program (and a user's training loop)
 * trades memory for recomputation, behind one call.
 *
 *   NONE        every stage runs normally; everything it saves stays alive
 *   BLOCK       each stage is its own remat_checkpoint: only the stages'
 *               inputs are kept, each stage is recomputed once in backward
 *   SEQUENTIAL  remat_checkpoint_sequential with `segments` segments
 *               (PyTorch: checkpoint_sequential)
 *   SELECTIVE   each stage its own non-reentrant checkpoint whose
 *               context_fn makes selective-checkpoint contexts from
 *               `policy` (PyTorch: context_fn=partial(
 *               create_selective_checkpoint_contexts, policy)): the ops the
 *               policy saves are cached in the forward, the rest recomputed
 *   PLAN        remat_plan_run(plan): the budget planner's schedule
 *               (remat/planner.h), made from a profile of the same stages
 *
 * Gradients are bitwise those of NONE under every strategy (dropout
 * included: checkpoints restore the RNG state for the recomputation).
 *
 * Example (the model's blocks under a 40 MiB plan):
 *
 *   remat_plan *plan = NULL;
 *   int rc = remat_plan_auto(&plan, n, stages, x, 40u << 20, NULL);  // once
 *   remat_strategy s = {.kind = REMAT_STRATEGY_PLAN, .plan = plan};
 *   if (!rc) rc = remat_run_chain(&y, n, stages, x, &s);            // every step
 */
#ifndef REMAT_STRATEGY_H
#define REMAT_STRATEGY_H

#include <stdbool.h>

#include "remat/checkpoint.h"
#include "remat/planner.h"
#include "remat/selective.h"
#include "remat/tensor.h"

#include "remat/export.h"

#ifdef __cplusplus
extern "C" {
#endif
REMAT_BEGIN_PUBLIC

typedef enum remat_strategy_kind {
    REMAT_STRATEGY_NONE = 0,
    REMAT_STRATEGY_BLOCK = 1,
    REMAT_STRATEGY_SEQUENTIAL = 2,
    REMAT_STRATEGY_SELECTIVE = 3,
    REMAT_STRATEGY_PLAN = 4
} remat_strategy_kind;

/* A zero-initialised struct (or a NULL pointer) is NONE. */
typedef struct remat_strategy {
    remat_strategy_kind kind;
    /* BLOCK, SEQUENTIAL: reentrant checkpoints (default: non-reentrant;
     * SELECTIVE and PLAN are always non-reentrant) */
    bool reentrant;
    int segments;                    /* SEQUENTIAL: 1 <= segments <= n_stages */
    remat_policy *policy;            /* SELECTIVE: borrowed; each region takes a reference */
    bool allow_cache_entry_mutation; /* SELECTIVE (remat_sac_config) */
    remat_sac_stats *sac_stats;      /* SELECTIVE: optional counters; must outlive backward */
    const remat_plan *plan;          /* PLAN: borrowed; made for n_stages stages */
} remat_strategy;

/* Runs x through stages[0..n_stages) (each with one input and one output,
 * as remat_checkpoint_sequential takes them) under s (NULL: NONE). *out
 * receives the last output, a new plain reference (not scope-owned). The
 * stages' user_data must stay valid until backward has run. Errors
 * (REMAT_EINVAL: NULL arguments, n_stages < 0, a kind outside the enum,
 * SEQUENTIAL segments outside [1, n_stages], SELECTIVE without a policy,
 * PLAN without a plan or for another number of stages; anything a stage or
 * a checkpoint returns): *out NULL, nothing leaked. */
remat_status remat_run_chain(remat_tensor **out, int n_stages, const remat_stage *stages,
                             remat_tensor *x, const remat_strategy *s);

/* "none", "block", "sequential", "selective", "plan"; "?" outside the enum. */
const char *remat_strategy_kind_name(remat_strategy_kind kind);

REMAT_END_PUBLIC
#ifdef __cplusplus
}
#endif
#endif /* REMAT_STRATEGY_H */
