/*
 * remat/checkpoint.h — activation checkpointing with PyTorch's semantics
 * (PyTorch: torch.utils.checkpoint.checkpoint / checkpoint_sequential).
 *
 * A checkpointed function keeps only its inputs alive after the forward;
 * everything it would have saved for backward is recomputed by running it
 * again during backward. Two implementations, chosen with use_reentrant:
 *
 *  - non-reentrant (use_reentrant = REMAT_OPT_FALSE, recommended): built on
 *    saved-tensor hooks. The forward records the graph as usual, but every
 *    tensor saved for backward is replaced by a placeholder. The first
 *    unpack in a backward pass re-runs the function once (per pass) and
 *    fills every placeholder; each recomputed tensor is freed as soon as it
 *    is unpacked. Works with remat_grad, with backward of part of the graph,
 *    with nested checkpoints, with inputs that do not require grad. By
 *    default recomputation stops early, as soon as every placeholder is
 *    filled (see "early stop" below).
 *  - reentrant (use_reentrant = REMAT_OPT_TRUE): the forward runs under
 *    no_grad; the backward re-runs the function with grad enabled on
 *    detached inputs and calls remat_backward on it (the engine is
 *    re-entrant). Does not work with remat_grad or backward(inputs=...).
 *
 * Leaving use_reentrant unset warns (as PyTorch does) and then uses reentrant.
 *
 * Example (non-reentrant, one block of an MLP; user_data carries the
 * parameters, which may require grad and receive gradients):
 *
 *   static int block(void *ud, remat_tensor *const *in, int n_in,
 *                    remat_tensor **out, int n_out) {
 *       block_params *p = ud;
 *       remat_tensor *h = NULL;
 *       int rc = remat_linear(&h, in[0], p->w1, p->b1);
 *       if (!rc) rc = remat_gelu(&out[0], h, REMAT_GELU_TANH); // out[0] is a new reference
 *       remat_release(h);
 *       return rc;
 *   }
 *   remat_checkpoint_options o = {.use_reentrant = REMAT_OPT_FALSE};
 *   remat_tensor *y;
 *   int rc = remat_checkpoint(block, &params, 1, &x, 1, &y, &o);
 *
 * Limits: the reentrant variant takes at most 64 inputs and 64 outputs
 * (REMAT_EINVAL beyond); the non-reentrant one has no limit.
 *
 * See docs/checkpoint.md for the mechanics and the differences from PyTorch.
 *
 * Writing the function (the contract of remat_checkpoint_fn):
 *  - It is called once in forward and again for every recomputation, with
 *    the same inputs (tensor inputs are re-unpacked; non-tensor arguments
 *    travel in user_data) and must do the same computation each time.
 *  - It must write a new reference (or NULL for a non-tensor/None result)
 *    to each of outputs[0..n_outputs) and return REMAT_OK, or return an
 *    error status (set a message with remat_set_error). Non-tensor results
 *    can be written into user_data.
 *  - It follows the ownership rule of remat/tensor.h, so it behaves the
 *    same called directly or through remat_checkpoint, with or without a
 *    scope open: release its temporaries (or open a scope inside it and
 *    remat_scope_keep() the outputs; remat_checkpoint runs it with no scope
 *    open). An output that is one of its inputs must be a new reference,
 *    remat_retain(inputs[i]); handing back an input as it is, or a tensor it
 *    released, fails the call with REMAT_ECALLBACK naming the output.
 *  - Early stop: in a non-reentrant recomputation, once the last saved
 *    tensor has been recomputed the rest of the function runs in "skip
 *    mode": ops only compute shapes and return data-less tensors
 *    (remat_data() returns NULL). Functions that read tensor values
 *    themselves must check for NULL (or disable early stop). Errors the
 *    function returns after that point are ignored.
 *  - Side effects (counters, prints) happen once per run: twice for a
 *    checkpointed segment whose backward runs.
 *  - user_data must stay valid while the graph may still recompute (until
 *    the backward that needs it ran, or the outputs' graph is released),
 *    or be handed over with options.user_data_destroy.
 *
 * Threading: a checkpoint and its backward must run on one thread (hooks
 * and grad mode are thread-local). The global overrides below are
 * process-wide; set them while no other thread runs checkpoints.
 */
#ifndef REMAT_CHECKPOINT_H
#define REMAT_CHECKPOINT_H

#include <stdbool.h>

#include "remat/tensor.h"

#include "remat/export.h"

#ifdef __cplusplus
extern "C" {
#endif
REMAT_BEGIN_PUBLIC

/* remat_tristate (a yes/no option that can be left unset) is in remat/tensor.h. */

/* How a recomputation is compared with the original forward
 * (PyTorch: determinism_check). Zero is PyTorch's default. */
typedef enum remat_determinism_check {
    /* PyTorch's "default": the count, and the shape, dtype and device of every
     * recomputed saved tensor */
    REMAT_DETERMINISM_DEFAULT = 0,
    /* PyTorch's "none": the count only */
    REMAT_DETERMINISM_NONE = 1,
} remat_determinism_check;

/* Parses PyTorch's spelling of determinism_check, "default" or "none", into
 * *out (for programs and bindings that take it as text). REMAT_EINVAL for
 * NULL arguments or any other text ("determinism_check should be one of
 * ['default', 'none'], but got 'x'", as PyTorch words it); *out is then
 * unchanged. */
remat_status remat_determinism_check_parse(const char *text, remat_determinism_check *out);

/* The checkpointed function: see "Writing the function" above. inputs has
 * n_inputs entries (NULL entries are non-tensor slots), outputs n_outputs
 * slots, all NULL on entry. */
typedef remat_status (*remat_checkpoint_fn)(void *user_data, remat_tensor *const *inputs,
                                            int n_inputs, remat_tensor **outputs, int n_outputs);

/* ---- context_fn (PyTorch: context_fn returning two context managers) ---------------
 * A pair of contexts entered around the original forward and around every
 * recomputation (non-reentrant only). This is how selective checkpointing
 * plugs in. context_fn is called once per remat_checkpoint call (PyTorch calls
 * context_fn() per call too) and fills *pair; the checkpoint owns
 * pair->state from then on and calls pair->destroy(state) (if set) once no
 * recomputation can happen any more. Each enter/exit callback may be NULL.
 * enter returning non-zero fails the checkpoint (or the unpack that
 * triggered the recompute) with that status; exit receives the status of
 * the body it closes and returns the status to continue with (return
 * `status` to keep it; an exit cannot turn a failure into success). */
typedef struct remat_recomputation remat_recomputation;
typedef struct remat_checkpoint_contexts {
    remat_status (*forward_enter)(void *state);
    remat_status (*forward_exit)(void *state, remat_status status);
    remat_status (*recompute_enter)(void *state);
    remat_status (*recompute_exit)(void *state, remat_status status);
    void (*destroy)(void *state);
    void *state;
    /* May be NULL. Called with the running recomputation right before
     * recompute_enter, and with NULL once it is over (after recompute_exit,
     * or after a recompute_enter that failed): a context that wants to
     * know where the recomputation stands (remat_recomputation_remaining,
     * remat_recomputation_stopped) keeps the pointer in its state until
     * then. Selective checkpointing uses it; the recomputation is never
     * found any other way. */
    void (*recompute_attach)(void *state, const remat_recomputation *rec);
} remat_checkpoint_contexts;

/* How many more tensors the recomputation must see saved, directly under
 * its own saved-tensor hooks, before early stop ends it; -1 when rec is
 * NULL, early stop is off, the recomputation has stopped, or other hooks
 * (a nested checkpoint's) are in force. A context uses it to know which
 * op's saves will end the recomputation (PyTorch saves an op's inputs
 * before the op reaches a dispatch mode, so the stop comes first). */
int remat_recomputation_remaining(const remat_recomputation *rec);
/* Whether early stop has ended the recomputation (every saved tensor was
 * recomputed): the rest of the function runs in skip mode, data-less, and
 * nothing it does is kept. false when rec is NULL. */
bool remat_recomputation_stopped(const remat_recomputation *rec);

typedef remat_status (*remat_checkpoint_context_fn)(void *user_data,
                                                    remat_checkpoint_contexts *pair);

/* ---- options --------------------------------------------------------------------
 * A zero-initialised struct (or a NULL pointer) means PyTorch's defaults. */
typedef struct remat_checkpoint_options {
    /* REMAT_OPT_TRUE: reentrant; REMAT_OPT_FALSE: non-reentrant;
     * REMAT_OPT_DEFAULT: warns that it should be passed explicitly, then
     * reentrant (PyTorch's behaviour). */
    remat_tristate use_reentrant;
    /* Stash and restore the RNG state of cpu and of the devices of one
     * device type around the recomputation, so that dropout draws the same
     * numbers. Default on; REMAT_OPT_FALSE turns it off. */
    remat_tristate preserve_rng_state;
    /* REMAT_DETERMINISM_DEFAULT (zero): compare count, shape, dtype and
     * device of every recomputed saved tensor with the original;
     * REMAT_DETERMINISM_NONE: compare only the count. Any other value fails
     * with REMAT_EINVAL. */
    remat_determinism_check determinism_check;
    /* Record the ops (with call sites) run in forward and recompute and
     * show them in determinism errors. Default off. Non-reentrant only
     * (REMAT_OPT_TRUE with reentrant fails with REMAT_EINVAL). Overridden by
     * remat_set_checkpoint_debug. */
    remat_tristate debug;
    /* Stop recomputation as soon as every saved tensor is recomputed
     * (non-reentrant; ignored by reentrant). Default on. Overridden by
     * remat_set_checkpoint_early_stop. Read when the forward runs. */
    remat_tristate early_stop;
    /* NULL: no contexts. Non-reentrant only (REMAT_EINVAL with reentrant). */
    remat_checkpoint_context_fn context_fn;
    void *context_fn_data;
    /* If set, called with user_data once the checkpoint no longer needs it:
     * when the last part of the graph that could recompute is freed, right
     * after the forward if nothing was recorded (grad mode off, or
     * reentrant with no input requiring grad), or when remat_checkpoint
     * fails. Lets user_data be a heap closure. NULL: user_data is the
     * caller's and must stay valid until the backward that recomputes has
     * run (or the outputs' graph is released). */
    void (*user_data_destroy)(void *user_data);
} remat_checkpoint_options;

/* ---- checkpoint -----------------------------------------------------------------
 * Runs fn(user_data, inputs, n_inputs, outputs, n_outputs) as a
 * checkpointed segment and writes its outputs (new references, held by the open scope
 * if a scope is open; NULL where fn produced no tensor) to
 * outputs[0..n_outputs). fn must not be NULL; inputs may be NULL when
 * n_inputs is 0 and may contain NULL entries; n_outputs may be 0.
 * opts NULL means the defaults. Inputs are borrowed; the checkpoint keeps
 * its own references to the tensor inputs until backward no longer needs
 * them.
 *
 * When grad mode is off, fn just runs (nothing is recorded).
 *
 * Errors (every output NULL then, nothing leaked):
 *   REMAT_EINVAL   bad arguments; an option outside its enum; context_fn or
 *                  debug with reentrant. (Unlike PyTorch, debug combines with a
 *                  context_fn, so traces cover selective regions.)
 *   REMAT_ESTATE   a device type that was not initialised when the forward
 *                  started was initialised by it while preserve_rng_state
 *                  is on (its RNG state could not be stashed).
 *   anything fn returns (its message is kept).
 * Errors raised later, during backward (returned by remat_backward or
 * remat_grad, message prefixed by them):
 *   REMAT_EDETERMINISM  the recomputation saved a different number of
 *                  tensors, or tensors of different shape/dtype/device
 *                  (listing each differing position with both metadata).
 *                  With debug on the message also shows the op traces of
 *                  forward and recomputation side by side; the full report
 *                  is in remat_checkpoint_debug_report().
 *   REMAT_ESTATE   a saved tensor of a non-reentrant checkpoint unpacked
 *                  twice in one backward pass ("already unpacked once").
 *   REMAT_EUNSUPPORTED  reentrant checkpoint under remat_grad or
 *                  remat_backward with inputs.
 *   REMAT_ENOGRAD  reentrant: no recomputed output requires grad.
 * Warnings: use_reentrant not set; reentrant with no input requiring grad
 * ("Gradients will be None"); tensor inputs on several non-cpu device
 * types. */
remat_status remat_checkpoint(remat_checkpoint_fn fn, void *user_data, int n_inputs,
                              remat_tensor *const *inputs, int n_outputs, remat_tensor **outputs,
                              const remat_checkpoint_options *opts);

/* ---- checkpoint_sequential ----------------------------------------------------------
 * One stage of a sequential model: fn is called with exactly one input and
 * one output (n_inputs == n_outputs == 1) and must produce a tensor. */
typedef struct remat_stage {
    remat_checkpoint_fn fn;
    void *user_data;
} remat_stage;

/* Runs stages[0..n_stages) one after another on `input` (PyTorch:  * checkpoint_sequential). The stages are cut into `segments` chunks of
 * n_stages / segments stages; the first segments - 1 chunks are each run
 * through remat_checkpoint with opts, the rest (the last chunk and any
 * remainder) runs normally. *out receives the final output (a new
 * reference, held by the open scope if a scope is open). n_stages == 0 returns a new
 * reference to input. opts as for remat_checkpoint (use_reentrant unset →
 * one warning, then reentrant).
 * Errors: REMAT_EINVAL for NULL out/input/stages/fn, segments < 1,
 * segments > n_stages (n_stages >= 1; PyTorch refuses it too), or a stage that
 * returns no tensor; anything remat_checkpoint or a stage
 * returns. *out is NULL on error. */
remat_status remat_checkpoint_sequential(remat_tensor **out, int n_stages,
                                         const remat_stage *stages, int segments,
                                         remat_tensor *input, const remat_checkpoint_options *opts);

/* ---- global overrides (PyTorch: set_checkpoint_early_stop,
 * set_checkpoint_debug_enabled) ----------------------------------------------------
 * REMAT_OPT_TRUE / REMAT_OPT_FALSE take precedence over the per-call option
 * of every non-reentrant checkpoint whose forward runs while the override
 * is set (the value is captured at forward time, so the backward may run
 * after the override is reset); REMAT_OPT_DEFAULT removes the override.
 * Each returns the previous value, for restoring it. Other values are
 * treated as REMAT_OPT_DEFAULT. */
remat_tristate remat_set_checkpoint_early_stop(remat_tristate value);
remat_tristate remat_set_checkpoint_debug(remat_tristate value);
remat_tristate remat_get_checkpoint_early_stop(void);
remat_tristate remat_get_checkpoint_debug(void);

/* ---- device type for RNG preservation (PyTorch: DefaultDeviceType) ------------------------
 * preserve_rng_state stashes the cpu generator plus the generators of the
 * devices of one device type: the type of the non-cpu tensor inputs
 * ("cuda" if present, else the first seen; several types → a warning),
 * or, when every tensor input is on cpu, the default device type set
 * here ("cuda" unless changed; a type that is not registered stashes
 * nothing). name is copied (at most 31 characters); NULL restores "cuda".
 * REMAT_EINVAL for an empty or too long name. */
remat_status remat_set_default_device_type(const char *name);
/* The current default device type name. Never NULL. */
const char *remat_get_default_device_type(void);

/* ---- debug report ---------------------------------------------------------------------
 * The full text of the last checkpoint debug report on this thread (the
 * error message holds as much of it as fits), or "" if none. Valid until
 * the next report on this thread. */
const char *remat_checkpoint_debug_report(void);

REMAT_END_PUBLIC
#ifdef __cplusplus
}
#endif
#endif /* REMAT_CHECKPOINT_H */
