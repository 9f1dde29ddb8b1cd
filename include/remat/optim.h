/*
 * remat/optim.h — the training loop: optimizers (SGD, AdamW), zero_grad,
 * gradient clipping by global norm, learning-rate schedules and gradient
 * accumulation over micro-batches.
 *
 * The numbers follow PyTorch 1.13 (torch.optim.SGD, torch.optim.AdamW,
 * torch.nn.utils.clip_grad_norm_; tests/test_optim.c compares several steps
 * against fixtures PyTorch wrote). A training loop:
 *
 *   remat_optim_options o;
 *   remat_optim_options_init(&o, REMAT_OPTIM_ADAMW);   // PyTorch's defaults
 *   o.lr = 3e-3;
 *   o.schedule = (remat_lr_schedule){REMAT_LR_WARMUP_COSINE, 100, 3000, 3e-4};
 *   o.clip_norm = 1.0;                                 // clip_grad_norm_(params, 1.0)
 *   o.accum_steps = 4;                                 // 4 micro-batches per update
 *   remat_optimizer *opt;
 *   int rc = remat_optim_create(&opt, &o, params, n_params);
 *   for (long i = 0; !rc && i < 4 * 3000; i++) {
 *       rc = my_forward_backward(i);                   // grads accumulate into .grad
 *       bool updated;
 *       if (!rc) rc = remat_optim_step(opt, &updated); // every 4th call: scale by 1/4,
 *   }                                                  // clip, update, zero the grads
 *   remat_optim_free(opt);
 *
 * Building blocks for loops of one's own (and for sharded optimizers, which
 * update slices of flat buffers: remat_adamw_update_f32 and friends) are
 * below the optimizer object.
 *
 * Parameters: leaf tensors, contiguous, f32 or f64, on a device type with the
 * optimizer's kernels (cpu, cuda: the update, the global norm's sums of
 * squares and the gradient scaling run there, the state lives there; on cuda
 * an update gives the cpu's bits, a clipped one agrees to rounding since the
 * norm is summed in another order); the optimizer retains them. A gradient
 * must be on its parameter's device. Their .grad (remat_tensor_grad) is what a step
 * reads; a parameter without a gradient is skipped, its state untouched (as
 * PyTorch does). Updates write the parameters' data in place and bump their
 * version counters (a saved tensor that is a parameter is then stale, as in
 * PyTorch).
 *
 * Memory: the state is allocated at creation through remat's allocator (so
 * it shows in remat_alloc_stats like PyTorch's optimizer state does in
 * memory_allocated), zero-filled: AdamW holds exp_avg and exp_avg_sq (two
 * tensors the shape and dtype of each parameter), SGD with momentum one
 * momentum buffer, plain SGD nothing. remat_optim_state_bytes gives the
 * exact allocator bytes before or after creation.
 */
#ifndef REMAT_OPTIM_H
#define REMAT_OPTIM_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "remat/tensor.h"

#include "remat/export.h"

#ifdef __cplusplus
extern "C" {
#endif
REMAT_BEGIN_PUBLIC

typedef enum remat_optim_kind {
    REMAT_OPTIM_SGD = 1,  /* torch.optim.SGD */
    REMAT_OPTIM_ADAMW = 2 /* torch.optim.AdamW */
} remat_optim_kind;

/* ---- learning-rate schedules ---------------------------------------------- */
typedef enum remat_lr_kind {
    REMAT_LR_CONSTANT = 0,     /* lr at every update */
    REMAT_LR_WARMUP_COSINE = 1 /* linear warm-up, then cosine decay to min_lr */
} remat_lr_kind;

/* The learning rate of update k (0-based) for a peak rate lr:
 *   CONSTANT:       lr
 *   WARMUP_COSINE:  k < W:          lr * (k + 1) / W
 *                   W <= k < N:     min_lr + (lr - min_lr) * (1 + cos(pi (k - W) / (N - W))) / 2
 *                   k >= N:         min_lr
 * with W = warmup_steps, N = total_steps. In PyTorch terms: SequentialLR of
 * LinearLR(start_factor=1/W, total_iters=W-1) and CosineAnnealingLR(T_max=N-W,
 * eta_min=min_lr) with milestones [W] (W = 0: only the cosine part). */
typedef struct remat_lr_schedule {
    remat_lr_kind kind;
    int64_t warmup_steps; /* W >= 0 */
    int64_t total_steps;  /* N > W (WARMUP_COSINE) */
    double min_lr;        /* floor of the decay, >= 0 */
} remat_lr_schedule;

/* The rate of update `k` under schedule s with peak rate lr (s NULL:
 * constant). Checks nothing: see remat_lr_schedule_check. */
double remat_lr_at(const remat_lr_schedule *s, double lr, int64_t k);
/* REMAT_EINVAL (with a message) if s is not a valid schedule. */
remat_status remat_lr_schedule_check(const remat_lr_schedule *s);

/* ---- options ---------------------------------------------------------------- */
typedef struct remat_optim_options {
    remat_optim_kind kind;
    double lr;           /* peak learning rate (the schedule scales it) */
    double weight_decay; /* SGD: L2 added to the gradient; AdamW: decoupled,
                            p *= 1 - lr * weight_decay. Per group: remat_optim_add_group */
    /* SGD */
    double momentum; /* 0: plain SGD (no state) */
    double dampening;
    bool nesterov; /* needs momentum > 0 and dampening == 0 */
    /* AdamW */
    double beta1, beta2, eps;
    /* the loop around the update (remat_optim_step) */
    remat_lr_schedule schedule; /* zero: constant lr */
    double clip_norm;           /* > 0: clip the gradients' global L2 norm to it first */
    int accum_steps;            /* micro-batches per update; 0 or 1: every call updates */
} remat_optim_options;

/* Fills *o with PyTorch's defaults for `kind` (AdamW: lr 1e-3, betas
 * (0.9, 0.999), eps 1e-8, weight_decay 1e-2; SGD: lr 1e-3 (PyTorch 1.13 has
 * no default), no momentum, no weight decay) and a constant schedule, no
 * clipping, no accumulation. REMAT_EINVAL for an unknown kind. */
remat_status remat_optim_options_init(remat_optim_options *o, remat_optim_kind kind);

/* ---- the optimizer ------------------------------------------------------------ */
typedef struct remat_optimizer remat_optimizer;

/* Creates an optimizer over params[0..n) (one group, weight decay
 * opts->weight_decay). params are retained; the state is allocated and
 * zeroed here. On failure *out is NULL and nothing is retained:
 * REMAT_EINVAL (bad option, NULL or duplicate parameter, not a leaf, not
 * contiguous), REMAT_EDTYPE (not f32/f64), REMAT_EUNSUPPORTED (a device type
 * without the optimizer's kernels), REMAT_ENOMEM. */
remat_status remat_optim_create(remat_optimizer **out /* OUT */, const remat_optim_options *opts,
                                remat_tensor *const *params, int n);
/* Releases the parameters and the state. NULL is a no-op. */
void remat_optim_free(remat_optimizer *o);

/* Adds a parameter group whose weight decay is `weight_decay` (PyTorch's
 * param_groups; the usual use: biases and norms with 0). Same checks as
 * create; on failure the optimizer is unchanged. */
remat_status remat_optim_add_group(remat_optimizer *o, remat_tensor *const *params, int n,
                                   double weight_decay);

/* One call per micro-batch, after its backward. With accum_steps = A, the
 * A-th call since the last update: scales the gradients by 1/A (the mean
 * over micro-batches, as a loss divided by A would give), clips them
 * (clip_norm), applies the update at the schedule's rate for this update,
 * and drops the gradients (remat_optim_zero_grad), so the next backward
 * starts from none; *updated (may be NULL) says whether it did. Other calls
 * only count. The update reads each gradient times the scale (1/A and the
 * clip's factor, one factor rounded to the gradient's dtype, then each element
 * multiplied by it: the values PyTorch's in-place clip_grad_norm_ leaves); on
 * the cpu and cuda the update's kernel does so as it reads g, without writing
 * g back; on a device whose kernels do not, the gradients are scaled in place
 * first. A strided gradient is first replaced by a dense copy. On failure
 * (REMAT_ENOMEM making a gradient dense) no parameter or state has changed. */
remat_status remat_optim_step(remat_optimizer *o, bool *updated /* OUT */);

/* Drops every parameter's .grad (PyTorch's zero_grad(set_to_none=True))
 * and restarts the micro-batch count. */
void remat_optim_zero_grad(remat_optimizer *o);

/* Global L2 norm of the gradients (as clip_grad_norm_ computes it;
 * parameters without a gradient count 0), and scaling every gradient by f.
 * The building blocks of the clipping remat_optim_step does. */
remat_status remat_optim_grad_norm(const remat_optimizer *o, double *norm /* OUT */);
remat_status remat_optim_scale_grads(remat_optimizer *o, double f);

/* The rate the next update will use, and how many updates were applied. */
double remat_optim_lr(const remat_optimizer *o);
int64_t remat_optim_updates(const remat_optimizer *o);
/* The gradients' global norm before the last update's clipping (0 if no
 * update ran or clipping is off). */
double remat_optim_last_grad_norm(const remat_optimizer *o);
/* Options in effect (groups' weight decays aside). */
const remat_optim_options *remat_optim_get_options(const remat_optimizer *o);
/* Changes the peak rate (e.g. a run resumed with another --lr). */
remat_status remat_optim_set_lr(remat_optimizer *o, double lr);

/* ---- state: saving, restoring, accounting -------------------------------------- */
typedef enum remat_optim_slot {
    REMAT_OPTIM_EXP_AVG = 0,   /* AdamW exp_avg; SGD momentum_buffer */
    REMAT_OPTIM_EXP_AVG_SQ = 1 /* AdamW exp_avg_sq */
} remat_optim_slot;

/* Parameters in the order they were added (groups in order). */
int remat_optim_n_params(const remat_optimizer *o);
remat_tensor *remat_optim_param(const remat_optimizer *o,
                                int i); /* borrowed; NULL if out of range */
/* State tensor `slot` of parameter i (borrowed; write into it to restore a
 * saved state), NULL where the optimizer keeps none. */
remat_tensor *remat_optim_state(const remat_optimizer *o, int i, remat_optim_slot slot);
/* Number of updates parameter i has had (PyTorch's state['step']). */
int64_t remat_optim_param_steps(const remat_optimizer *o, int i);
/* Restores the counters after the state was written back: every parameter's
 * step count and the number of updates become `updates`. */
remat_status remat_optim_set_updates(remat_optimizer *o, int64_t updates);

/* Exact allocator bytes of the state (what create allocated). */
size_t remat_optim_state_bytes(const remat_optimizer *o);
/* The same, predicted before creating: the state of `kind` (and momentum
 * for SGD) over n parameters of the given element counts and dtypes. */
size_t remat_optim_state_bytes_for(const remat_optim_options *opts, const int64_t *numels,
                                   const remat_dtype *dtypes, int n);

/* ---- functional updates on flat buffers --------------------------------------------
 * The per-element work of a step, for callers that hold parameters, gradients
 * and state in their own buffers (a ZeRO-1 shard updates only its slice: the
 * results do not depend on how a buffer is split). Any n >= 0; buffers must
 * not overlap each other. Run in parallel with OpenMP above 64 Ki elements. */
typedef struct remat_adamw_hparams {
    double lr; /* this update's rate */
    double beta1, beta2, eps, weight_decay;
    int64_t step; /* 1-based count of this update for these elements */
} remat_adamw_hparams;
/* p *= 1 - lr wd; m = b1 m + (1-b1) g; v = b2 v + (1-b2) g²;
 * p -= lr/(1-b1^step) * m / (sqrt(v)/sqrt(1-b2^step) + eps).
 * REMAT_EINVAL on a NULL buffer (n > 0), n < 0 or step < 1. */
remat_status remat_adamw_update_f32(float *p, const float *g, float *m, float *v, int64_t n,
                                    const remat_adamw_hparams *h);
remat_status remat_adamw_update_f64(double *p, const double *g, double *m, double *v, int64_t n,
                                    const remat_adamw_hparams *h);

typedef struct remat_sgd_hparams {
    double lr, momentum, dampening, weight_decay;
    bool nesterov;
    bool first; /* the first update of these elements: buf = g (PyTorch) */
} remat_sgd_hparams;
/* d = g + wd p; with momentum: buf = first ? d : momentum buf + (1-dampening) d,
 * d = nesterov ? d + momentum buf : buf; p -= lr d. buf may be NULL iff
 * momentum == 0. */
remat_status remat_sgd_update_f32(float *p, const float *g, float *buf, int64_t n,
                                  const remat_sgd_hparams *h);
remat_status remat_sgd_update_f64(double *p, const double *g, double *buf, int64_t n,
                                  const remat_sgd_hparams *h);

/* Sum of squares of x[0..n) in double (for a global norm over buffers). */
double remat_sum_squares_f32(const float *x, int64_t n);
double remat_sum_squares_f64(const double *x, int64_t n);
/* The factor clip_grad_norm_ multiplies gradients by: min(1, max_norm /
 * (total_norm + 1e-6)). */
double remat_clip_factor(double total_norm, double max_norm);

/* Gradient clipping over any tensors (torch.nn.utils.clip_grad_norm_ with
 * norm_type 2): the global L2 norm of the gradients of params[0..n) into
 * *total_norm (may be NULL), then every gradient scaled by
 * remat_clip_factor. Parameters without a gradient are skipped. */
remat_status remat_clip_grad_norm(remat_tensor *const *params, int n, double max_norm,
                                  double *total_norm /* OUT */);

REMAT_END_PUBLIC
#ifdef __cplusplus
}
#endif
#endif /* REMAT_OPTIM_H */
