/*
 * tools/strategy.h — the checkpointing strategies of the remat program and
 * how a chain of blocks runs under each.
 *
 *   none            every block runs normally; all activations stay alive
 *   block           every block wrapped in remat_checkpoint (non-reentrant
 *                   unless --reentrant): only block inputs are kept
 *   sequential=N    remat_checkpoint_sequential over the blocks, N segments
 *   selective[=P]   selective activation checkpointing   (not available yet)
 *   budget=SIZE     budget planner                        (not available yet)
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

typedef struct strategy {
    strategy_kind kind;
    int segments;     /* sequential=N */
    uint64_t budget;  /* budget=SIZE, in bytes */
    bool reentrant;   /* --reentrant */
    char policy[64];  /* selective=POLICY */
    char name[96];    /* canonical text, e.g. "sequential=2", "block(reentrant)" */
} strategy;

/* A block of the model: the signature remat_checkpoint wraps. One input
 * tensor, one output tensor (a new reference). */
typedef int (*block_fn)(void *user_data, remat_tensor *const *inputs, int n_inputs,
                        remat_tensor **outputs, int n_outputs);

/* Parses "none", "block", "sequential=N", "selective[=POLICY]",
 * "budget=SIZE" into s (err may be NULL). Does not judge availability. */
bool strategy_parse(const char *text, bool reentrant, strategy *s, char *err, size_t n_err);
/* Rewrites s->name from its fields. */
void strategy_name(strategy *s);
/* Whether this build can run s; if not, err says why. */
bool strategy_available(const strategy *s, char *err, size_t n_err);

/* Runs x through blocks fn(user_data[0]) ... fn(user_data[n-1]) under s;
 * *out receives a new (plain, not scope-owned) reference. */
int strategy_run_chain(const strategy *s, int n, block_fn fn, void *const *user_data,
                       remat_tensor *x, remat_tensor **out);

#endif /* REMAT_TOOLS_STRATEGY_H */
