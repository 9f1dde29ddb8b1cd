/*
 * tools/train/strategy.h — the checkpointing strategies of the remat program and
 * how a chain of blocks runs under each.
 *
 *   none            every block runs normally; all activations stay alive
 *   block           every block wrapped in remat_checkpoint (non-reentrant
 *                   unless --reentrant): only block inputs are kept
 *   sequential=N    remat_checkpoint_sequential over the blocks, N segments
 *   selective[=P]   every block in a non-reentrant remat_checkpoint whose
 *                   context_fn is the selective-checkpoint pair
 *                   (remat_sac_context_fn): policy P decides which op outputs
 *                   are kept from the forward; the rest is recomputed.
 *                   PyTorch: dots (default) | names:A+B | all-but:A+B | except:A+B
 *                      | nothing | everything  (A, B: the model's tags)
 *   budget=SIZE     the budget planner (remat/planner.h) for the whole step:
 *                   the blocks (op by op), the head and the embedding are
 *                   profiled once, remat_plan_create_ops picks the fastest
 *                   plan — per block store, or checkpoint keeping the ops it
 *                   chooses — whose predicted step peak (parameters,
 *                   optimizer state, gradients, activations) fits SIZE bytes
 *                   (or P% of the step's un-checkpointed peak),
 *                   remat_plan_run runs it
 *                   over the blocks; below the smallest plan over whole blocks,
 *                   with the last N blocks run as their two halves (attention,
 *                   MLP: remat_model_half_stages), the N predicted fastest
 *                   (strategy.split = N)
 *   budget=SIZE:halves  the same with every split into halves tried at any SIZE
 *   budget=SIZE:whole-blocks  per op over whole blocks only (no halves)
 *   budget=SIZE:blocks-only  rotor's block schedules only
 *                   (remat_plan_create_step: rotor's block schedules)
 *   blocks-budget=SIZE  the same with SIZE bounding only what the blocks add
 *                   (remat_plan_create; P%: of the blocks' store-all peak)
 */
#ifndef REMAT_TOOLS_STRATEGY_H
#define REMAT_TOOLS_STRATEGY_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "remat/remat.h"

typedef enum strategy_kind {
    STRAT_NONE = 0,
    STRAT_BLOCK = 1,
    STRAT_SEQUENTIAL = 2,
    STRAT_SELECTIVE = 3,
    STRAT_BUDGET = 4
} strategy_kind;

/* selective=POLICY: which remat_policy preset runs */
typedef enum sac_policy_kind {
    SAC_DOTS = 0,  /* remat_policy_dots_saveable: matmul/linear outputs */
    SAC_NAMES,     /* remat_policy_save_only_these_names */
    SAC_ALL_BUT,   /* remat_policy_save_any_names_but_these: every tag but these */
    SAC_EXCEPT,    /* remat_policy_save_anything_except_these_names: every op but these tags */
    SAC_NOTHING,   /* remat_policy_nothing_saveable: a plain checkpoint */
    SAC_EVERYTHING /* remat_policy_everything_saveable: no recomputation */
} sac_policy_kind;

#define SAC_MAX_NAMES 16
#define SAC_NAME_LEN 32

typedef struct strategy {
    strategy_kind kind;
    int segments;      /* sequential=N */
    uint64_t budget;   /* budget=SIZE, in bytes (budget=P%: set by strategy_plan) */
    double budget_pct; /* budget=P%: P, a share of the chain's un-checkpointed peak; 0 else */
    bool reentrant;    /* --reentrant (never for budget: plans run non-reentrant) */
    bool blocks_only;  /* blocks-budget=SIZE: the budget bounds the blocks' share only */
    bool block_level;  /* budget=SIZE:blocks-only: whole blocks, no per-op choices */
    bool no_halves;    /* budget=SIZE:whole-blocks: per op, never half-block stages */
    bool halves;       /* budget=SIZE:halves: per op, every split tried whatever the budget
                          (default: halves only below the whole blocks' smallest plan) */
    bool covers_all;   /* budget: set by strategy_plan when SIZE is at or above what the
                           step (blocks) needs without checkpointing: nothing is checkpointed */
    char policy[192];  /* selective: canonical POLICY, e.g. "dots", "names:qkv+attn_out" */
    sac_policy_kind sac_kind; /* selective */
    int n_sac_names;          /* selective names/all-but/except */
    char sac_names[SAC_MAX_NAMES][SAC_NAME_LEN];
    char budget_text[40]; /* budget=SIZE: SIZE as given ("64MiB", "40%") */
    char name[224];   /* canonical text, e.g. "sequential=2", "block(reentrant)", "budget=64MiB",
                         * "selective=names:qkv+attn_out" */
    remat_plan *plan; /* budget: made by strategy_plan, freed by strategy_free */
    int split;        /* budget: the plan runs the last `split` blocks as their halves
                         (plan->n_stages = blocks + split); 0: whole blocks */
    remat_op_profile *ops; /* budget with split > 0: the op profile of the plan's chain
                              (spliced; for remat_plan_explain), freed by strategy_free */
    /* selective: counters the regions add to while this is non-NULL (the
     * caller's storage, which must outlive the step's backward) */
    remat_sac_stats *sac_stats;
} strategy;

/* A block of the model: the signature remat_checkpoint wraps. One input
 * tensor, one output tensor (a new reference). */
typedef int (*block_fn)(void *user_data, remat_tensor *const *inputs, int n_inputs,
                        remat_tensor **outputs, int n_outputs);

/* Parses "none", "block", "sequential=N", "selective[=POLICY]",
 * "budget=SIZE" (SIZE: bytes, K/M/G/T with optional i/B, or P% with
 * 0 < P <= 100) into s (err may be NULL). Does not judge availability.
 * POLICY: dots | nothing | everything | names:LIST | all-but:LIST |
 * except:LIST, where LIST is tag names joined by '+' (',' also accepted:
 * only --checkpoint can pass one, --strategies splits at commas) and ':'
 * may be '='. The name is canonical: "selective" → "selective=dots",
 * "selective=names=qkv,attn_out" → "selective=names:qkv+attn_out". Tag
 * names are checked for their spelling only (see strategy_check_tags). */
bool strategy_parse(const char *text, bool reentrant, strategy *s, char *err, size_t n_err);
/* Rewrites s->name from its fields (budget=SIZE keeps the text it was parsed from). */
void strategy_name(strategy *s);
/* Whether this build can run s; if not, err says why. */
bool strategy_available(const strategy *s, char *err, size_t n_err);
/* selective with names: whether every listed name is one of the n tags
 * the model puts on its tensors; if not, err names the stranger and lists
 * the tags. Other strategies: true. */
bool strategy_check_tags(const strategy *s, int n, const char *const *tags, const char *model,
                         char *err, size_t n_err);
/* The valid selective policies, for messages. */
#define SAC_POLICY_HELP                                                                            \
    "dots (matmul/linear outputs, the default), names:A+B (only these tags), all-but:A+B "         \
    "(every tag but these), except:A+B (every op but these tags), nothing, everything"
/* selective: a new reference to the policy s names. */
int strategy_make_policy(const strategy *s, remat_policy **out);

/* The predicted peak of the chain without checkpointing (store-all), from
 * a profile: what budget=P% is a share of. */
int strategy_store_all_bytes(const remat_profile *prof, size_t *bytes);
/* The predicted whole-step peak without checkpointing and the smallest
 * feasible whole-step budget, from a step profile. */
int strategy_step_range(const remat_profile *prof, const remat_step_profile *step,
                        size_t *store_all, size_t *min_budget);
/* budget=SIZE / blocks-budget=SIZE: plans s->plan from a profile of the
 * chain (the model's blocks) and, for budget=, of the step around it (see
 * model_profile_step). A budget below the smallest feasible one fails with
 * the planner's message, which states that minimum, followed by what to type
 * (budget=SIZE and budget=P%). po (may be NULL): the planner's options for
 * budget= (op level): --plan-offload, --plan-lossy. Sets s->covers_all when nothing needs
 * checkpointing (see strategy_budget_warning). Other kinds: nothing to do. */
typedef struct strategy_halves {
    const remat_profile *prof;   /* the chain of 2 x blocks half stages (model_profile_halves) */
    const remat_op_profile *ops; /* its op profile */
} strategy_halves;
/* Puts the half-block chain's times on the whole blocks' scale, so that plans over either
 * compare by their schedules and not by when each chain was profiled (the two profiles run
 * minutes apart, and on a loaded machine a block's time moves by more than what a split
 * changes): per block, its two halves' forward times are scaled, in their measured
 * proportion, to add up to the block's forward plus what the halves run on top of it — the
 * ops that differ, by name, from the op profiles (a GPT-2 block's fused add + layer norm
 * becomes an add and a layer norm: one op's time; a Llama block's halves run exactly its
 * ops: nothing) — and their backward times to add up to the block's backward, grown by
 * the same share. hprof/hops: 2 x the stages of prof/ops (model_profile_halves); anything
 * else is left as it is. */
void strategy_calibrate_halves(remat_profile *hprof, const remat_op_profile *hops,
                               const remat_profile *prof, const remat_op_profile *ops);
/* Whether budget= (op level) wants the half-block chain profiled (model_profile_halves):
 * with ':halves', or where SIZE is below the smallest whole-step peak of any plan over whole
 * blocks (strategy_step_range's min_budget). Why not always: the halves' profile takes as
 * long as the blocks' and, above that minimum, buys ~0.3-0.4% of predicted step time on the
 * GPT the issue measures (docs/planner.md "Half-block stages"); below it, they are the only
 * plans. prof/step: the whole blocks' (model_profile_step). */
bool strategy_wants_halves(const strategy *s, const remat_profile *prof,
                           const remat_step_profile *step);
/* halves (may be NULL: whole blocks only): for budget= (op level), the plans
 * over every mix tried — the first blocks whole, the last `split` in halves,
 * split = 0..blocks (above 16 blocks: 0-4, a quarter, half and all of them)
 * on profiles spliced from prof/ops and halves (remat_profile_splice) — and
 * the one predicted fastest (then the smaller split) is s->plan. */
int strategy_plan(strategy *s, const remat_profile *prof, const remat_step_profile *step,
                  const remat_op_profile *ops, const remat_plan_options *po,
                  const strategy_halves *halves);
/* budget= planned with --plan-lossy: whether the plan keeps some op as bf16 (its
 * gradients then differ from none's, as the user allowed). */
bool strategy_plan_lossy(const strategy *s);
/* Whether strategy_plan wants an op profile: budget=SIZE plans per op with it; the
 * block-level budgets learn from it what a recomputation skips (early stop), once the
 * caller has put it into the profile with remat_profile_apply_ops. */
bool strategy_wants_ops(const strategy *s);
/* After strategy_plan: a one-line warning when the budget is at or above
 * what no checkpointing needs (then false with buf empty otherwise). */
bool strategy_budget_warning(const strategy *s, char *buf, size_t n);
/* Releases what strategy_plan made. */
void strategy_free(strategy *s);
/* A budget=... (blocks_only: blocks-budget=...) strategy for an exact byte
 * count (the bench sweep), named "budget=12.34MiB" (the MiB figure rounded;
 * s->budget is exact). */
void strategy_budget_bytes(strategy *s, uint64_t bytes, bool blocks_only);

/* Runs x through blocks fn(user_data[0]) ... fn(user_data[n-1]) under s
 * with the library's remat_run_chain (remat/strategy.h); *out receives a
 * new reference (plain when no scope is open). */
int strategy_run_chain(const strategy *s, int n, block_fn fn, void *const *user_data,
                       remat_tensor *x, remat_tensor **out);

#endif /* REMAT_TOOLS_STRATEGY_H */
