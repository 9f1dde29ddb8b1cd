/* tools/step.c — one training step (see step.h). */
#include "step.h"

#include <malloc.h>
#include <omp.h>

int step_run(model *m, const strategy *s, const batch *b, optim *o, trace *tr, double *loss) {
    remat_tensor *l = NULL;
    if (tr) trace_phase(tr, PH_FORWARD, true);
    int rc = model_loss(m, s, b, &l);
    if (tr) trace_phase(tr, PH_FORWARD, false);
    if (!rc) rc = remat_item(l, loss);
    if (!rc) {
        if (tr) trace_phase(tr, PH_BACKWARD, true);
        rc = remat_backward_scalar(l);
        if (tr) trace_phase(tr, PH_BACKWARD, false);
    }
    remat_release(l);
    if (!rc && o) {
        if (tr) trace_phase(tr, PH_OPTIMIZER, true);
        rc = optim_step(o, m);
        if (tr) trace_phase(tr, PH_OPTIMIZER, false);
    }
    return rc;
}

void step_malloc_mode(bool track_rss) {
    /* Setting the mmap threshold also turns glibc's dynamic threshold off. */
    if (track_rss) {
        mallopt(M_MMAP_THRESHOLD, 64 * 1024);
        mallopt(M_TRIM_THRESHOLD, 128 * 1024);
    } else {
        /* glibc's dynamic threshold would settle at most here */
        mallopt(M_MMAP_THRESHOLD, 32 * 1024 * 1024);
        mallopt(M_TRIM_THRESHOLD, 64 * 1024 * 1024);
    }
}

int step_setup_process(int threads) {
    /* remat's GEMM runs OpenBLAS single-threaded inside OpenMP teams
     * (src/ops/gemm.c), so OpenMP's thread count is the only knob */
    if (threads > 0) omp_set_num_threads(threads);
    return omp_get_max_threads();
}
