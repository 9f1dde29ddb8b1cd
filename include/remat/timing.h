/*
 * remat/timing.h — kernel timings: where a step's time goes, op by op (PyTorch:
 * torch.profiler's key_averages table; remat's is by op, kernel and phase).
 *
 *   remat_timing *t;
 *   remat_timing_begin();
 *   ... forward, backward (one or more steps) ...
 *   remat_timing_end(&t);
 *   for (int i = 0; i < remat_timing_count(t); i++) {
 *       const remat_timing_row *r = remat_timing_row_at(t, i);   // longest first
 *       printf("%s %s %s %lld calls %.3f ms\n", r->op, r->kernel,
 *              remat_phase_name(r->phase), (long long)r->calls, r->ms);
 *   }
 *   remat_timing_free(t);
 *
 * While a recording runs, every kernel call (every op's kernel, every backward kernel,
 * gradient accumulation, contiguous copies) is timed and summed into a row per (op, kernel,
 * phase, device type, dtype):
 *  - op: the public op that ran the kernel ("remat_linear"), or in backward the graph
 *    node's name ("LinearBackward"); a backward written with differentiable ops shows
 *    those ops' names ("GeluBackward"); gradient accumulation is "remat_add", a contiguous
 *    copy "copy".
 *  - phase: forward, backward, or recompute (a checkpoint re-running its function during
 *    backward; a backward inside that is backward again).
 *  - ms: on a device that runs behind the host (cuda) the device's own time between
 *    events recorded before and after the kernel (launch overhead and the device's idle
 *    gaps are not in it: a step's time minus the rows' sum is what the host cost); on the
 *    cpu and other host-addressable devices, wall-clock time around the call.
 *  - bytes: the elements of every operand the kernel was handed (inputs and outputs, at
 *    their dtype's size): what it reads and writes at least once, for bytes / bandwidth.
 *  - flops: where the kernel's arithmetic is known (matmul: 2·M·N·K per product;
 *    attention: the unmasked query-key pairs times 2·(D + Dv) forward and 2·(3·D + 2·Dv)
 *    backward, FlashAttention's 4·D and 10·D at D = Dv), else 0.
 *
 * Off (no recording), the kernels run with one test of a flag each: no cost.
 * Recording covers every thread; one recording at a time. Timing a device kernel waits for
 * the device only at remat_timing_end (and every 65,536 calls), not per call.
 */
#ifndef REMAT_TIMING_H
#define REMAT_TIMING_H

#include <stdint.h>

#include "remat/tensor.h"

#include "remat/export.h"

#ifdef __cplusplus
extern "C" {
#endif
REMAT_BEGIN_PUBLIC

typedef enum remat_phase {
    REMAT_PHASE_FORWARD = 0,
    REMAT_PHASE_BACKWARD = 1,
    REMAT_PHASE_RECOMPUTE = 2, /* a checkpoint's recomputation, inside backward */
} remat_phase;
#define REMAT_N_PHASES 3

/* "forward", "backward", "recompute"; "?" out of range. */
const char *remat_phase_name(remat_phase p);
/* The phase the calling thread runs in now. */
remat_phase remat_current_phase(void);

typedef struct remat_timing_row {
    const char *op;     /* see above; borrowed from the timing */
    const char *kernel; /* the kernel: "matmul", "elementwise", "layer norm backward", ... */
    remat_phase phase;
    int device_type; /* where it ran (remat_device_type_name) */
    remat_dtype dtype;
    int64_t calls;
    double ms;    /* summed over the calls */
    double bytes; /* summed operand bytes (inputs + outputs) */
    double flops; /* summed where known, else 0 */
} remat_timing_row;

typedef struct remat_timing remat_timing;

/* Starts recording. REMAT_ESTATE while another recording runs. */
remat_status remat_timing_begin(void);
/* Stops recording (waiting for the device kernels it timed) and hands the rows over,
 * longest total first, in *out (free with remat_timing_free). REMAT_ESTATE when no
 * recording runs; REMAT_EINVAL for NULL out (the recording still stops); REMAT_ENOMEM
 * (nothing handed over); a device's error when its events fail. */
remat_status remat_timing_end(remat_timing **out);
/* Whether a recording runs. */
bool remat_timing_active(void);

/* Rows (0 for NULL). */
int remat_timing_count(const remat_timing *t);
/* Row i, NULL out of range; borrowed until remat_timing_free. */
const remat_timing_row *remat_timing_row_at(const remat_timing *t, int i);
/* Calls and summed ms, bytes, flops over the rows of one phase (phase < 0: all).
 * Any pointer may be NULL. */
void remat_timing_totals(const remat_timing *t, int phase, int64_t *calls, double *ms,
                         double *bytes, double *flops);
/* NULL: no-op. */
void remat_timing_free(remat_timing *t);

REMAT_END_PUBLIC
#ifdef __cplusplus
}
#endif
#endif /* REMAT_TIMING_H */
