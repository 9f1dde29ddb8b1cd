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
 *   remat/cuda.h        the cuda device: availability, caching allocator, TF32
 *   remat/ops.h         differentiable operations
 *   remat/autograd.h    backward, grad, hooks, saved-tensor hooks, custom functions
 *   remat/selective.h   selective checkpointing policies, named residuals (remat_tag)
 *   remat/report.h      residual reports: what is saved for backward, and where
 *   remat/timing.h      kernel timings: where a step's time goes, op by op
 *   remat/compress.h    bf16 and host-offload saved-tensor hooks
 *   remat/optim.h       SGD, AdamW, clipping, lr schedules, gradient accumulation
 *   remat/dist.h        data parallelism over MPI: process groups, DDP, ZeRO-1
 *   remat/savefile.h    the `remat train --save` file format, parsed from memory
 *   remat/params.h      named parameter collections (P: named_parameters, state_dict)
 *   remat/safetensors.h weights in and out as safetensors, sharded checkpoints included
 *   remat/hf.h          Hugging Face model directories: config.json and weights, in and out
 *   remat/strategy.h    a chain of blocks under a checkpointing strategy
 *   remat/models.h      GPT-2 and Llama with Hugging Face's names
 *   remat/tokenizer.h   byte-level BPE tokenizers from a Hugging Face tokenizer.json
 *   remat/tokens.h      token data: llm.c .bin shards, windows, per-rank shares
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
 * size). OpenMP's default wait policy lets an idle thread spin after every
 * parallel region before it sleeps (libgomp: 300,000 turns, GOMP_SPINCOUNT);
 * where other work shares the cores, a training step then measured up to
 * 2.4x slower. Run programs with OMP_WAIT_POLICY=passive on shared machines
 * (the remat program sets it for itself) and OMP_WAIT_POLICY=active on
 * dedicated cores: OpenMP reads the variable once at start-up, before any
 * library code runs, so remat cannot set it for you.
 *
 * Thread safety: remat may be used from several threads at once. What is
 * shared:
 *  - Per thread (each thread has its own, nothing to coordinate): the last
 *    error and its status, grad mode, the saved-tensor hook stack, open
 *    scopes, the running backward pass, checkpoint recomputation and
 *    selective-checkpoint regions, the checkpoint debug report, and the
 *    allocation meter remat_profile_stages measures with (so profiles are
 *    right while other threads allocate).
 *  - Process-wide, synchronised (safe to use from any thread at any time):
 *    the device registry, the allocator and its counters
 *    (remat_alloc_stats_get; remat_alloc_reset_peak resets them for every
 *    thread), the cpu buffer cache, each device's random generator (one
 *    stream per device shared by all threads: draws from several threads
 *    interleave, so seed and draw on one thread for reproducible runs), the
 *    planner's remat_checkpoint_budget cache, tensor and node refcounts.
 *  - Process-wide settings, not synchronised with calls in flight: set them
 *    before other threads use remat — the cpu allocator override
 *    (remat_set_cpu_allocator), the allocation observers, the log callback,
 *    the save observer, the checkpoint global overrides
 *    (remat_set_checkpoint_*), the default device type, device
 *    registration.
 *  - Objects: a tensor, its gradient and its graph may be read by several
 *    threads, but must be written (in-place ops, .grad, hooks, backward
 *    through its graph) by one thread at a time; a checkpoint and the
 *    backward that recomputes it run on one thread.
 */
#ifndef REMAT_REMAT_H
#define REMAT_REMAT_H

#include "remat/autograd.h"
#include "remat/checkpoint.h"
#include "remat/compress.h"
#include "remat/cuda.h"
#include "remat/device.h"
#include "remat/dist.h"
#include "remat/error.h"
#include "remat/hf.h"
#include "remat/models.h"
#include "remat/ops.h"
#include "remat/optim.h"
#include "remat/params.h"
#include "remat/planner.h"
#include "remat/report.h"
#include "remat/safetensors.h"
#include "remat/savefile.h"
#include "remat/selective.h"
#include "remat/strategy.h"
#include "remat/tensor.h"
#include "remat/timing.h"
#include "remat/tokenizer.h"
#include "remat/tokens.h"
#include "remat/version.h"

#endif /* REMAT_REMAT_H */
