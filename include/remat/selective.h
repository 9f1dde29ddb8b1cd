/*
 * remat/selective.h — selective activation checkpointing (PyTorch:  * torch.utils.checkpoint.CheckpointPolicy, SelectiveCheckpointContext,
 * create_selective_checkpoint_contexts) and named residuals with preset
 * policies (as JAX's checkpoint_name / jax.checkpoint_policies).
 *
 * A non-reentrant checkpoint normally recomputes every op of its function
 * during backward. With a selective-checkpoint context pair (plugged into
 * remat_checkpoint_options.context_fn) a policy decides, op by op, which
 * outputs are kept from the forward instead:
 *
 *   SAVE      the op's output (and whatever else the op saves for its own
 *             backward that is not one of its inputs) is cached during the
 *             forward; during the recomputation the op does not run — it
 *             hands back the cached tensors.
 *   RECOMPUTE the op runs again during the recomputation (the default of a
 *             plain checkpoint).
 *   CPU_OFFLOAD as SAVE, but a cached tensor living on a non-cpu device is
 *             copied to host memory during the forward and back to its
 *             device when the recomputation needs it (on cpu: as SAVE).
 *   SAVE_BF16 as SAVE, but LOSSY (remat's own, PyTorch has no such answer):
 *             each cached f32 tensor that is contiguous and owns its whole
 *             storage is stored (on its device) as bf16 from the end of the
 *             op to the recomputation (half the
 *             bytes) and converted back to f32 when the recomputation needs
 *             it (round to nearest even: a relative error of at most 2^-8
 *             per value, as remat_bf16_saved_hooks). The recomputation then
 *             runs on the rounded values, so gradients change accordingly.
 *             Other cached tensors are kept as SAVE keeps them.
 *
 * MUST_ and PREFER_ behave the same in eager mode (as in PyTorch); the
 * distinction is kept for policies that combine others (remat_policy_or).
 *
 * Example: keep the outputs of every matmul/linear of a block, recompute
 * the rest.
 *
 *   remat_policy *pol;
 *   remat_policy_dots_saveable(&pol);
 *   remat_sac_config cfg = {.policy = pol};
 *   remat_checkpoint_options o = {.use_reentrant = REMAT_OPT_FALSE,
 *                                 .context_fn = remat_sac_context_fn,
 *                                 .context_fn_data = &cfg};
 *   rc = remat_checkpoint(block_fn, &block, 1, &x, 1, &y, &o);
 *   ...
 *   remat_policy_release(pol);   // regions still alive keep their own reference
 *
 * What an "op" is: every public function of remat/ops.h, remat_clone,
 * remat_to_dtype, remat_to_device and remat_tag, identified by its name
 * ("remat_linear", "remat_relu", ...). Only ops called directly by the
 * checkpointed function (or by the user code it calls) are seen; ops that
 * remat runs inside other ops or inside backward are not. In-place ops
 * (names ending in '_') are always recomputed, whatever the policy says.
 *
 * Rules (as PyTorch):
 *  - a cached tensor that was modified in place before the recomputation
 *    → REMAT_EVERSION at recomputation, unless allow_cache_entry_mutation;
 *  - a second backward (or a second recomputation) over the same region →
 *    REMAT_ESTATE "backward an extra time": the cache is consumed by the
 *    first recomputation;
 *  - an op the policy wants served from the cache that the forward did not
 *    cache (the function or the policy behaved differently) →
 *    REMAT_EDETERMINISM naming the op and its index in the region.
 *
 * See docs/selective.md for the mechanics.
 */
#ifndef REMAT_SELECTIVE_H
#define REMAT_SELECTIVE_H

#include <stdbool.h>
#include <stdint.h>

#include "remat/checkpoint.h"
#include "remat/tensor.h"

#include "remat/export.h"

#ifdef __cplusplus
extern "C" {
#endif
REMAT_BEGIN_PUBLIC

/* PyTorch: CheckpointPolicy (same numbering for the first four). */
typedef enum remat_checkpoint_policy {
    REMAT_MUST_SAVE = 0,
    REMAT_PREFER_SAVE = 1,
    REMAT_MUST_RECOMPUTE = 2,
    REMAT_PREFER_RECOMPUTE = 3,
    REMAT_MUST_CPU_OFFLOAD = 4,
    REMAT_PREFER_CPU_OFFLOAD = 5,
    REMAT_MUST_SAVE_BF16 = 6, /* lossy: see SAVE_BF16 above */
    REMAT_PREFER_SAVE_BF16 = 7
} remat_checkpoint_policy;

/* "MUST_SAVE", ..., or "?" for a value outside the enum. */
const char *remat_checkpoint_policy_name(int policy);

/* PyTorch: SelectiveCheckpointContext — what a policy learns about the call. */
typedef struct remat_sac_context {
    bool is_recompute; /* false during the forward, true during the recomputation */
    int op_index;      /* index of the op among the region's ops in this pass (0-based) */
    const char *tag;   /* for remat_tag: the name given to it; NULL for every other op */
} remat_sac_context;

/* A policy callback: op is the public name ("remat_matmul"), inputs the
 * op's tensor inputs (borrowed; entries may be NULL, e.g. an absent bias),
 * user_state the pointer given with the policy. Must return one of the six
 * values; anything else fails the op with REMAT_ECALLBACK. May keep state
 * (counters) in user_state: it is called once per op in the forward and
 * once per op in the recomputation (until the recomputation stops early;
 * as in PyTorch, not for the op whose saved inputs complete it). */
typedef remat_checkpoint_policy (*remat_sac_policy_fn)(const remat_sac_context *ctx, const char *op,
                                                       int n_inputs, remat_tensor *const *inputs,
                                                       void *user_state);

/* ---- policies ---------------------------------------------------------------------
 * A remat_policy is an immutable, reference-counted policy object. Every
 * constructor returns one reference (release with remat_policy_release);
 * regions using a policy hold their own reference. Constructors fail with
 * REMAT_EINVAL on bad arguments (out NULL, fn NULL, n < 0, a NULL list
 * with n > 0, a NULL or empty name) and REMAT_ENOMEM. */
typedef struct remat_policy remat_policy;

/* A callback policy. destroy_state (may be NULL) is called with user_state
 * when the last reference goes. */
remat_status remat_policy_from_fn(remat_policy **out, remat_sac_policy_fn fn, void *user_state,
                                  void (*destroy_state)(void *));
/* PyTorch's list form: ops named in ops[0..n) → MUST_SAVE, every other op →
 * PREFER_RECOMPUTE. Names are copied. n may be 0 (saves nothing). Each
 * name must be a public op's full name ("remat_linear", "remat_gelu", ...):
 * anything else is REMAT_EINVAL naming the closest op names. */
remat_status remat_policy_from_ops(remat_policy **out, int n, const char *const *ops);

/* JAX presets. "Named" values are the outputs of remat_tag. Saving a named
 * value saves the output of the op that produced the tagged tensor (the
 * producer is then not recomputed), and a MUST_RECOMPUTE answer for a tag
 * drops a producer that the policy had cached. */
/* Nothing is cached (a plain checkpoint): every op PREFER_RECOMPUTE. */
remat_status remat_policy_nothing_saveable(remat_policy **out);
/* Every op PREFER_SAVE (no recomputation at all; memory as without checkpoint). */
remat_status remat_policy_everything_saveable(remat_policy **out);
/* remat_matmul, remat_linear and remat_attention MUST_SAVE, the rest PREFER_RECOMPUTE
 * (JAX: dots_saveable / checkpoint_dots). */
remat_status remat_policy_dots_saveable(remat_policy **out);
/* Tags named in names → MUST_SAVE; every other op → PREFER_RECOMPUTE
 * (JAX: save_only_these_names). */
remat_status remat_policy_save_only_these_names(remat_policy **out, int n,
                                                const char *const *names);
/* Tags named in names → MUST_RECOMPUTE; every other op → PREFER_SAVE
 * (JAX: save_anything_except_these_names). */
remat_status remat_policy_save_anything_except_these_names(remat_policy **out, int n,
                                                           const char *const *names);
/* Tags not named in names → MUST_SAVE; every other op (and the listed tags)
 * → PREFER_RECOMPUTE (JAX: save_any_names_but_these). */
remat_status remat_policy_save_any_names_but_these(remat_policy **out, int n,
                                                   const char *const *names);
/* Tags named in names → MUST_CPU_OFFLOAD; every other op → PREFER_RECOMPUTE
 * (JAX: save_and_offload_only_these_names with no names to save). */
remat_status remat_policy_offload_these_names(remat_policy **out, int n, const char *const *names);
/* Saves what either policy saves (JAX: save_from_both_policies): the
 * answer is the first of MUST_SAVE, MUST_CPU_OFFLOAD, MUST_SAVE_BF16,
 * PREFER_SAVE, PREFER_CPU_OFFLOAD, PREFER_SAVE_BF16 that either gives (an
 * exact save wins over a lossy one); otherwise MUST_RECOMPUTE if either
 * says so, else PREFER_RECOMPUTE. Both are always called (stateful
 * policies see every op). Takes its own references to a and b. */
remat_status remat_policy_or(remat_policy **out, remat_policy *a, remat_policy *b);

remat_policy *remat_policy_retain(remat_policy *p);
void remat_policy_release(remat_policy *p); /* NULL → no-op */
/* Asks the policy (for tests and for composing policies in callbacks).
 * Returns the policy's answer (possibly an invalid value from a callback). */
int remat_policy_eval(const remat_policy *p, const remat_sac_context *ctx, const char *op,
                      int n_inputs, remat_tensor *const *inputs);

/* ---- the context pair ----------------------------------------------------------------- */
/* Counters a region adds to (all regions sharing a config add to one).
 * Updated without locks: give each thread its own. */
typedef struct remat_sac_stats {
    int64_t policy_calls_forward;
    int64_t policy_calls_recompute;
    int64_t ops_forward;       /* ops seen in forward passes */
    int64_t ops_cached;        /* ops whose outputs were cached in the forward */
    int64_t ops_offloaded;     /* of those, copied to host memory */
    int64_t ops_recomputed;    /* ops that ran again during recomputations */
    int64_t ops_from_cache;    /* ops served from the cache during recomputations */
    int64_t bytes_cached;      /* bytes of storage the caches held (new storage, counted once;
                               bf16 bytes for tensors stored as bf16) */
    int64_t ops_bf16;          /* of ops_cached, stored as bf16 (SAVE_BF16 answers) */
    int64_t bytes_cached_bf16; /* f32 bytes of the cached storages a SAVE_BF16 answer stores
                                  (or would store) as bf16, whatever the answer was: half of
                                  them is what SAVE_BF16 saves over SAVE */
} remat_sac_stats;

/* PyTorch: create_selective_checkpoint_contexts(policy_fn_or_list,
 * allow_cache_entry_mutation). Fills *pair with a fresh forward/recompute
 * pair for one checkpoint call; pair->state holds a reference to policy
 * and is freed by pair->destroy (the checkpoint does that). stats (may be
 * NULL) must stay valid while the pair lives. REMAT_EINVAL for a NULL pair
 * or policy. */
remat_status remat_create_selective_checkpoint_contexts(remat_checkpoint_contexts *pair,
                                                        remat_policy *policy,
                                                        bool allow_cache_entry_mutation,
                                                        remat_sac_stats *stats);

/* What remat_sac_context_fn reads from context_fn_data. */
typedef struct remat_sac_config {
    remat_policy *policy;            /* required */
    bool allow_cache_entry_mutation; /* default false */
    remat_sac_stats *stats;          /* optional counters */
} remat_sac_config;

/* A remat_checkpoint_context_fn: context_fn_data must point to a
 * remat_sac_config (read at every remat_checkpoint call; it may change or
 * go away afterwards, but *stats must outlive the regions). */
remat_status remat_sac_context_fn(void *config, remat_checkpoint_contexts *pair);

/* ---- named residuals (JAX: checkpoint_name) --------------------------------------------
 * An identity op: *out is a view of t (gradient passes through unchanged)
 * whose name (remat_name) is `name`. Inside a selective-checkpoint region
 * the policy sees it as op "remat_tag" with ctx->tag == name, which is how
 * the name presets find the values to save. Works anywhere (outside a
 * region it only names the view). REMAT_EINVAL for a NULL/empty name. */
remat_status remat_tag(remat_tensor **out, remat_tensor *t, const char *name);

REMAT_END_PUBLIC
#ifdef __cplusplus
}
#endif
#endif /* REMAT_SELECTIVE_H */
