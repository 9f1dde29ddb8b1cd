/* src/core/timing.h — the kernel timer behind remat/timing.h, and the phase (forward,
 * backward, recompute) every thread runs in.
 *
 * The two places that call kernels (rm_kernel_run, src/core/kernels.c; the driver's
 * run_kernel, src/ops/driver.c) bracket the call with rm_timing_begin / rm_timing_end
 * when rm_timing_on() says a recording runs: off, that test is all it costs. A bracket
 * inside another (a kernel an op's own runner calls) is not timed twice: the outer one
 * counts. */
#ifndef REMAT_CORE_TIMING_H
#define REMAT_CORE_TIMING_H

#include <stdatomic.h>

#include "kernels.h"
#include "remat/timing.h"

/* ---- phase ------------------------------------------------------------------------ */
extern RM_TLS unsigned char rm_phase_;
/* Sets this thread's phase; returns the previous one (to restore). The engine sets
 * BACKWARD for a backward pass, a checkpoint's recomputation RECOMPUTE. */
static inline remat_phase rm_phase_set(remat_phase p) {
    remat_phase prev = (remat_phase)rm_phase_;
    rm_phase_ = (unsigned char)p;
    return prev;
}

/* ---- the timer -------------------------------------------------------------------- */
extern atomic_bool rm_timing_on_;
static inline bool rm_timing_on(void) {
    return atomic_load_explicit(&rm_timing_on_, memory_order_relaxed);
}

/* One timed call, begun and ended on one thread. */
typedef struct rm_timing_span {
    int row;         /* the row it adds to */
    int type, index; /* the device it ran on */
    double t0;       /* host clock at the start (no device timer) */
    void *mark;      /* the device's start mark (a device timer) */
} rm_timing_span;

/* Starts timing kernel id called by `op` on k's operands (the device of in[0], else
 * out[0]). false when it is not to be timed (nested in a timed call, the recording
 * ended, out of memory): then rm_timing_end must not be called. */
bool rm_timing_begin(rm_timing_span *s, rm_kernel_id id, const char *op, const rm_kargs *k);
void rm_timing_end(rm_timing_span *s);

#endif /* REMAT_CORE_TIMING_H */
