/* src/checkpoint/ck.h — private declarations shared by the checkpoint
 * sources: RNG juggling (rng.c), debug traces (debug_trace.c), the
 * non-reentrant frame (frame.c), the reentrant function (reentrant.c) and
 * the call of the checkpointed function both make (call.c). */
#ifndef REMAT_CK_H
#define REMAT_CK_H

#include "core/core.h"

#include "core/intercept.h"
#include "remat/autocast.h"
#include "remat/checkpoint.h"

#define CK_CALL "remat_checkpoint"

/* ---- resolved options ------------------------------------------------------------ */
typedef struct ck_opts {
    bool reentrant;
    bool preserve_rng;
    remat_determinism_check determinism;
    bool debug;
    bool debug_explicit; /* opts->debug == TRUE (reentrant rejects it) */
    bool early_stop;
    remat_checkpoint_context_fn context_fn;
    void *context_fn_data;
} ck_opts;

/* ---- RNG state stash (rng.c) ----------------------------------------------------- */
typedef struct ck_rng {
    bool preserve;
    int device_type; /* inferred type id, -1 if not registered */
    bool had_device; /* the type was initialised when the forward started */
    uint8_t cpu_state[REMAT_RNG_STATE_BYTES];
    int n_devices;
    remat_device devices[REMAT_MAX_DEVICES_PER_TYPE];
    uint8_t states[REMAT_MAX_DEVICES_PER_TYPE][REMAT_RNG_STATE_BYTES];
    /* The forward's autocast state, stashed whatever preserve says: the
     * recomputation runs under it (PyTorch: checkpoint stashes the autocast
     * state), whatever state is active during backward. */
    remat_autocast_state autocast;
} ck_rng;

/* Infers the device type of the inputs (warning for several types) and,
 * if preserve, stashes the cpu state and the states of the inputs' devices
 * of that type (when the type is initialised). */
remat_status ck_rng_stash(ck_rng *r, bool preserve, int n, remat_tensor *const *inputs);
/* Forks the generators (cpu + stashed devices) and sets the stashed
 * forward states (no-op unless preserve). */
remat_status ck_rng_enter(const ck_rng *r, remat_rng_fork *fork);
/* Puts the forked states back. */
remat_status ck_rng_exit(const ck_rng *r, const remat_rng_fork *fork);
/* Error if the device type got initialised during the forward. */
remat_status ck_rng_check_initialized(const ck_rng *r);

/* ---- debug traces (debug_trace.c) ------------------------------------------------------- */
#define CK_TRACE_DEPTH 10
typedef struct ck_trace_ent {
    char op[40];
    int n_frames;
    void *frames[CK_TRACE_DEPTH];
} ck_trace_ent;

typedef struct ck_trace {
    ck_trace_ent *e;
    int n, cap;
    bool overflow; /* out of memory: trace incomplete */
} ck_trace;

void ck_trace_reset(ck_trace *t);
void ck_trace_free(ck_trace *t);

/* Records every op entered on this thread into `trace` (chaining to the
 * observer installed before) until ck_observe_end. While *mute is true
 * (may be NULL) nothing is recorded. */
typedef struct ck_observe {
    ck_trace *trace;
    const bool *mute;
    rm_op_observer_fn prev;
    void *prev_ud;
} ck_observe;
void ck_observe_begin(ck_observe *o, ck_trace *trace, const bool *mute);
void ck_observe_end(ck_observe *o);

/* Builds the debug report for error message `err` from the two traces,
 * stores it as this thread's remat_checkpoint_debug_report() and sets the
 * error message to it (truncated to fit). Returns status. */
remat_status ck_debug_error(remat_status status, const char *err, const ck_trace *fwd,
                            const ck_trace *rec);

/* ---- entry points ------------------------------------------------------------------
 * Both fill outputs with plain references (the caller hands them out) and
 * call user_data_destroy(user_data), if set, once the checkpoint no longer
 * needs user_data (also on failure). */
remat_status ck_run_nonreentrant(remat_checkpoint_fn fn, void *user_data, int n_inputs,
                                 remat_tensor *const *inputs, int n_outputs, remat_tensor **outputs,
                                 const ck_opts *o, void (*user_data_destroy)(void *));
remat_status ck_run_reentrant(remat_checkpoint_fn fn, void *user_data, int n_inputs,
                              remat_tensor *const *inputs, int n_outputs, remat_tensor **outputs,
                              const ck_opts *o, void (*user_data_destroy)(void *));

/* Runs fn with scopes suspended and checks the result (call.c): on failure
 * every output is released and NULL, and the error message is set. */
remat_status ck_call_fn(remat_checkpoint_fn fn, void *user_data, int n_inputs,
                        remat_tensor *const *inputs, int n_outputs, remat_tensor **outputs);

#endif
