/* tools/train/step.c — one training step (see step.h). */
#include "step.h"

#include <malloc.h>
#include <omp.h>

void step_report_free(step_report *r) {
    if (!r) return;
    remat_residual_report_free(r->forward);
    remat_residual_report_free(r->backward);
    r->forward = r->backward = NULL;
}

static step_backward_fn g_backward;
static void *g_backward_ud;

void step_set_backward(step_backward_fn fn, void *user_data) {
    g_backward = fn;
    g_backward_ud = user_data;
}

int step_run(model *m, const strategy *s, const batch *b, remat_optimizer *o, trace *tr,
             step_report *rep, double *loss) {
    remat_tensor *l = NULL;
    int rc = REMAT_OK;
    if (rep) {
        step_report_free(rep);
        rc = remat_residual_report_begin(&rep->forward);
        if (rc) return rc;
    }
    if (tr) trace_phase(tr, PH_FORWARD, true);
    rc = model_loss(m, s, b, &l);
    if (tr) trace_phase(tr, PH_FORWARD, false);
    if (rep) {
        /* one report records at a time: the forward's ends before the backward's */
        int rc2 = remat_residual_report_end(rep->forward);
        if (!rc) rc = rc2;
        if (!rc) rc = remat_residual_report_begin(&rep->backward);
    }
    if (!rc) rc = remat_item(l, loss);
    if (!rc) {
        if (tr) trace_phase(tr, PH_BACKWARD, true);
        rc = g_backward ? g_backward(g_backward_ud, l) : remat_backward_scalar(l);
        if (tr) trace_phase(tr, PH_BACKWARD, false);
    }
    if (rep && rep->backward) {
        int rc2 = remat_residual_report_end(rep->backward);
        if (!rc) rc = rc2;
    }
    remat_release(l);
    if (!rc && o) {
        if (tr) trace_phase(tr, PH_OPTIMIZER, true);
        rc = remat_optim_step(o, NULL);
        if (tr) trace_phase(tr, PH_OPTIMIZER, false);
    }
    /* a GPU runs behind the host: the step ends when its work has */
    if (!rc && !remat_device_host_addressable(m->device.type))
        rc = remat_cuda_synchronize(m->device.index);
    return rc;
}

void step_malloc_mode(bool track_rss) {
    static int cache_default = -1;
    if (cache_default < 0) cache_default = remat_cpu_cache_enabled();
    /* Setting the mmap threshold also turns glibc's dynamic threshold off. */
    if (track_rss) {
        mallopt(M_MMAP_THRESHOLD, 64 * 1024);
        mallopt(M_TRIM_THRESHOLD, 128 * 1024);
    } else {
        /* glibc's dynamic threshold would settle at most here */
        mallopt(M_MMAP_THRESHOLD, 32 * 1024 * 1024);
        mallopt(M_TRIM_THRESHOLD, 64 * 1024 * 1024);
    }
    /* remat's buffer cache keeps freed tensors resident, so RSS would show
     * the cache, not the step: off while RSS is tracked (unless the
     * environment turned it off for good: REMAT_CPU_CACHE=0). What it and
     * the fast setting left in malloc's heap goes back to the OS too:
     * malloc serves a request from free heap chunks before it maps new
     * memory, and reused resident chunks would hide a step's growth. */
    remat_cpu_cache_enable(!track_rss && cache_default);
    if (track_rss) malloc_trim(0);
}

int step_setup_process(int threads) {
    /* remat's GEMMs run on OpenMP's team (oneDNN shares it; OpenBLAS builds run
     * single-threaded per panel inside it: src/backends/cpu/gemm.c), so OpenMP's thread
     * count is the only knob */
    if (threads > 0) omp_set_num_threads(threads);
    return omp_get_max_threads();
}
