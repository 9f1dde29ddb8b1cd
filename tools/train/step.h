/*
 * tools/train/step.h — one training step, shared by `train` and `bench`, and
 * process-level set-up (threads, malloc behaviour).
 */
#ifndef REMAT_TOOLS_STEP_H
#define REMAT_TOOLS_STEP_H

#include "models.h"
#include "report/alloc_trace.h"
#include "strategy.h"

/* Residual reports of one step (remat/report.h): the forward's saves and
 * the backward's (what checkpoints' recomputations save). */
typedef struct step_report {
    remat_residual_report *forward, *backward;
} step_report;
void step_report_free(step_report *r);

/* Forward to the loss under s, then backward (grads accumulate into the
 * parameters' .grad; call model_zero_grad first), then, if o is non-NULL,
 * remat_optim_step (an update once o's micro-batches are complete; it
 * drops the gradients then). tr (may be NULL) gets the phase marks; rep (may be
 * NULL) gets the residual reports of the forward and of the backward.
 * *loss gets the loss value. */
int step_run(model *m, const strategy *s, const batch *b, remat_optimizer *o, trace *tr,
             step_report *rep, double *loss);

/* The backward step_run runs on the loss: fn (data parallelism: DDP's,
 * tools/train/dist.c) or, with NULL, remat_backward_scalar. */
typedef int (*step_backward_fn)(void *user_data, remat_tensor *loss);
void step_set_backward(step_backward_fn fn, void *user_data);

/* --threads (OpenMP; remat runs BLAS inside OpenMP teams). Returns the number of
 * threads in use. */
int step_setup_process(int threads);

/* track_rss: glibc malloc is set so that every tensor above 64 KiB gets its
 * own mapping, returned to the OS when freed — the process's RSS then rises
 * and falls with remat's allocator and can be measured per step (at the
 * price of page faults on every new tensor). Otherwise: large thresholds,
 * freed memory is reused from the heap (the fast setting, for timing).
 * remat's cpu buffer cache (remat/device.h) is off while RSS is tracked and
 * as it was at the first call otherwise. */
void step_malloc_mode(bool track_rss);

#endif /* REMAT_TOOLS_STEP_H */
