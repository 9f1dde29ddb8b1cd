/* tests/support/models.h — small models built from remat ops, shared by the
 * checkpoint tests: an MLP block (linear → gelu → dropout → linear, plus a
 * residual) and a pre-norm transformer block (layer_norm, causal softmax
 * attention with matmul/transpose/reshape, dropout, MLP). Each block's
 * forward is a remat_checkpoint_fn (one input, one output) whose user_data
 * is the block, so it can be checkpointed directly; `calls` counts how
 * often it ran. Parameters are initialised from a private deterministic
 * stream (rt_rand), so two blocks built with the same seed are identical. */
#ifndef REMAT_TEST_MODELS_H
#define REMAT_TEST_MODELS_H

#include "gpt_block.h"
#include "remat/remat.h"

#define RT_MAX_PARAMS 16

typedef struct rt_mlp_block {
    int dim, hidden;
    double p_drop; /* dropout probability (0: no dropout op at all) */
    remat_gelu_approx gelu;
    remat_tensor *w1, *b1, *w2, *b2;
    int calls; /* forward runs (checkpointed forward + recomputations) */
} rt_mlp_block;

/* x (..., dim) → x + w2·dropout(gelu(w1·x + b1)) + b2. Parameters require grad. */
void rt_mlp_block_init(rt_mlp_block *b, int dim, int hidden, double p_drop, remat_dtype dtype,
                       unsigned seed);
void rt_mlp_block_free(rt_mlp_block *b);
int rt_mlp_block_fn(void *user_data, remat_tensor *const *inputs, int n_inputs,
                    remat_tensor **outputs, int n_outputs);
/* Writes borrowed pointers to the parameters; returns their count. */
int rt_mlp_block_params(rt_mlp_block *b, remat_tensor **params);

typedef struct rt_tblock {
    int dim, heads, seq;
    double p_drop;
    gpt_block_weights w;
    remat_tensor *mask; /* (seq, seq) i64, 1 above the diagonal (causal) */
    bool tagged;        /* name the residuals ("qkv", "attn_out", "mlp_up", ...: gpt_block.h) */
    int calls;
} rt_tblock;

/* x (B, seq, dim) → the shared pre-norm transformer block (models/gpt_block.h)
 * with `heads` heads, attention composed of ops, exact GELU, dropout p_drop. */
void rt_tblock_init(rt_tblock *b, int dim, int heads, int seq, double p_drop, remat_dtype dtype,
                    unsigned seed);
void rt_tblock_free(rt_tblock *b);
int rt_tblock_fn(void *user_data, remat_tensor *const *inputs, int n_inputs, remat_tensor **outputs,
                 int n_outputs);
int rt_tblock_params(rt_tblock *b, remat_tensor **params);

/* ---- chains of stages (the planner suites) ----------------------------------------------- */
/* The chains' head, loss = sum(y * y) of in[0] (every output element its own gradient),
 * in remat_stage form (rt_profile_chain's loss_fn). */
int rt_sum_sq_loss(void *user_data, remat_tensor *const *inputs, int n_inputs,
                   remat_tensor **outputs, int n_outputs);
/* st[0..n) applied in turn to x without checkpointing: the last output (new reference);
 * a failing stage fails the test (RT_OK). */
remat_tensor *rt_stages_run(const remat_stage *st, int n, remat_tensor *x);

/* ---- a two-layer net's tensors (test_timing, test_report) -----------------------------------
 * x (16, 8), W1 (32, 8), b1 (32), W2 (4, 32) and a target t (16, 4), uniform from seeds 1-5
 * (x and t in [-1, 1), the weights in [-0.3, 0.3), b1 in [-0.1, 0.1)); x, W1, b1 and W2
 * require grad. Each suite writes its own forward on them (x W1^T + b1 -> gelu -> W2 ...). */
typedef struct rt_net2 {
    remat_tensor *x, *w1, *b1, *w2, *t;
} rt_net2;
rt_net2 rt_net2_make(void);
void rt_net2_free(rt_net2 *n);

/* ---- running a stack of blocks --------------------------------------------------------------
 * Output and gradients of one run: out, then .grad of x and of every
 * parameter (new references). */
typedef struct rt_grads {
    int n;
    remat_tensor *g[RT_MAX_PARAMS * 8 + 1];
    remat_tensor *out;
} rt_grads;
/* Releases everything in g and empties it. */
void rt_grads_free(rt_grads *g);
/* Seeds remat with `seed`, clears the gradients, runs x through n blocks
 * (fn, uds[i]) — each under remat_checkpoint(o) unless o is NULL — then
 * backward of sum(out); collects the gradients into *out (asserts success). */
void rt_run_blocks(uint64_t seed, int n, remat_checkpoint_fn fn, void **uds, remat_tensor **params,
                   int n_params, remat_tensor *x, const remat_checkpoint_options *o, rt_grads *out);
/* Asserts a and b hold bitwise equal outputs and gradients, none missing. */
void rt_assert_same_grads(const rt_grads *a, const rt_grads *b, const char *what);

/* ---- profiles for the op-level planner (test_opplan, test_opplan_offload) -------------------
 * What remat_plan_create_ops takes for a chain of n stages run on x, each measured with one run
 * (.runs = 1): the stages' profile (*prof), their ops' (*ops), and the head (head on the
 * chain's output, as one stage) into step->head; step's other fields are left as they are.
 * Asserts success; the caller frees *prof and *ops. */
void rt_profile_chain(remat_profile **prof, remat_op_profile **ops, remat_step_profile *step, int n,
                      const remat_stage *stages, remat_tensor *x, remat_checkpoint_fn head);

/* Replaces the measured times with fixed ones, so that a plan follows from them alone:
 * every op 1 ms, a stage's forward their sum and its backward twice that, the head's 1 ms
 * and 2 ms. */
void rt_fix_op_times(remat_profile *prof, remat_op_profile *ops, remat_step_profile *step);

/* The budgets remat_plan_create_ops plans these profiles for (with opts, may be NULL): from
 * *lo, the least it accepts, to *top, the store-all plan's predicted peak. Asserts success. */
void rt_plan_budget_range(const remat_profile *prof, const remat_op_profile *ops,
                          const remat_step_profile *step, const remat_plan_options *opts,
                          size_t *lo, size_t *top);

/* Sets .grad of each parameter to NULL. */
void rt_zero_grads(int n, remat_tensor *const *params);
/* Bytes of the storages of the n tensors. */
size_t rt_bytes(int n, remat_tensor *const *tensors);

#endif
