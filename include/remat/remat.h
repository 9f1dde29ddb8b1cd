/*
 * remat.h — train neural networks in C with activation checkpointing.
 *
 * remat is an eager tensor library with reverse-mode autograd whose
 * centrepiece is activation checkpointing with PyTorch's semantics
 * (remat/checkpoint.h). This umbrella header includes every public area:
 *
 *   remat/error.h       status codes, thread-local error messages, warnings
 *   remat/tensor.h      tensors, views, ownership, scopes
 *   remat/device.h      device types, the accounting allocator, RNG
 *   remat/ops.h         differentiable operations
 *   remat/autograd.h    backward, grad, hooks, saved-tensor hooks, custom functions
 *   remat/selective.h   selective checkpointing policies, named residuals (remat_tag)
 *   remat/report.h      residual reports: what is saved for backward, and where
 *   remat/compress.h    bf16 and host-offload saved-tensor hooks
 *   remat/optim.h       SGD, AdamW, clipping, lr schedules, gradient accumulation
 *   remat/dist.h        data parallelism over MPI: process groups, DDP, ZeRO-1
 *
 * Example: one SGD step of y = relu(x W^T + b), loss = mse(y, t).
 *
 *   #include <remat/remat.h>
 *
 *   int step(remat_tensor *x, remat_tensor *t, remat_tensor *W, remat_tensor *b) {
 *       remat_scope *s;
 *       remat_tensor *h, *y, *loss;
 *       int rc = remat_scope_begin(&s);              // collects temporaries
 *       if (!rc) rc = remat_linear(&h, x, W, b);
 *       if (!rc) rc = remat_relu(&y, h);
 *       if (!rc) rc = remat_mse_loss(&loss, y, t);
 *       if (!rc) rc = remat_backward_scalar(loss);   // fills W.grad, b.grad
 *       if (!rc) {
 *           bool prev = remat_no_grad_begin();
 *           rc = remat_add_(W, remat_tensor_grad(W), -0.1);
 *           if (!rc) rc = remat_add_(b, remat_tensor_grad(b), -0.1);
 *           remat_grad_mode_restore(prev);
 *       }
 *       remat_scope_end(s);                          // releases h, y, loss
 *       if (rc) fprintf(stderr, "%s\n", remat_last_error());
 *       return rc;
 *   }
 *
 * Conventions: every fallible call returns an int status (REMAT_OK == 0);
 * outputs come first; inputs are borrowed; destructors accept NULL.
 *
 * Linking: pkg-config --cflags --libs remat, or CMake find_package(remat)
 * and the target remat::remat (README.md, "Using remat in your project").
 *
 * Threads: the kernels run on OpenMP's team (omp_set_num_threads sets its
 * size). OpenMP's default wait policy lets idle threads spin between
 * parallel regions; where other work shares the cores, a training step
 * then measured up to 2x slower. Run programs with OMP_WAIT_POLICY=passive
 * (the remat program sets it for itself): OpenMP reads the variable once at
 * start-up, before any library code runs, so remat cannot set it for you.
 */
#ifndef REMAT_REMAT_H
#define REMAT_REMAT_H

#include "remat/error.h"
#include "remat/tensor.h"
#include "remat/device.h"
#include "remat/ops.h"
#include "remat/autograd.h"
#include "remat/checkpoint.h"
#include "remat/planner.h"
#include "remat/selective.h"
#include "remat/report.h"
#include "remat/compress.h"
#include "remat/optim.h"
#include "remat/dist.h"

#define REMAT_VERSION_MAJOR 0
#define REMAT_VERSION_MINOR 1
#define REMAT_VERSION_PATCH 0

#endif /* REMAT_REMAT_H */
