/* src/backends/cpu/optim.c — the cpu kernels of the optimizer family
 * (src/core/kernels/optim.h): the host loops of src/core/optim_loops.h on the operands'
 * buffers, the same bits as the public flat-buffer functions (remat_adamw_update_f32 and
 * friends); the list kernels run them over many tensors at once. */
#include <omp.h>

#include "core/optim_loops.h"
#include "cpu.h"

remat_status rm_cpu_adamw(const rm_kargs *k) {
    rm_adamw_factors f;
    rm_adamw_factors_make(k->params, &f);
    const int64_t n = remat_numel(k->out[0]);
    if (k->out[0]->dtype == REMAT_F64)
        rm_adamw_loop_f64(rm_ptr(k->out[0]), rm_ptr(k->in[0]), rm_ptr(k->out[1]), rm_ptr(k->out[2]),
                          n, &f);
    else
        rm_adamw_loop_f32(rm_ptr(k->out[0]), rm_ptr(k->in[0]), rm_ptr(k->out[1]), rm_ptr(k->out[2]),
                          n, &f);
    return REMAT_OK;
}

remat_status rm_cpu_sgd(const rm_kargs *k) {
    const int64_t n = remat_numel(k->out[0]);
    void *buf = k->out[1] ? rm_ptr(k->out[1]) : NULL;
    if (k->out[0]->dtype == REMAT_F64)
        rm_sgd_loop_f64(rm_ptr(k->out[0]), rm_ptr(k->in[0]), buf, n, k->params);
    else rm_sgd_loop_f32(rm_ptr(k->out[0]), rm_ptr(k->in[0]), buf, n, k->params);
    return REMAT_OK;
}

remat_status rm_cpu_sum_squares(const rm_kargs *k) {
    const rm_sumsq_kparams *p = k->params;
    const remat_tensor *x = k->in[0];
    double *s = rm_ptr(k->out[0]);
    s[p->at] = rm_sum_squares_loop(rm_ptr(x), x->dtype == REMAT_F64, remat_numel(x));
    return REMAT_OK;
}

/* ---- the list kernels: every parameter's update in one parallel region ----------------
 * The elements of all the list's tensors, taken end to end, are cut into one contiguous
 * share per thread of equal size; a thread runs the span loops (src/core/optim_loops.h) on
 * the pieces of the tensors its share covers. One region a step instead of one per large
 * tensor, the small tensors (biases, norms) no longer a serial tail, each thread streaming
 * long runs of memory. Every element's result depends only on its own inputs and its
 * tensor's scalars, so the bits are those of one kernel per tensor. */
static void list_piece(const rm_optim_list *l, const rm_adamw_factors *f, int i, int64_t o,
                       int64_t len) {
    const bool f64 = l->p[i]->dtype == REMAT_F64;
    const size_t es = f64 ? sizeof(double) : sizeof(float);
    char *p = (char *)rm_ptr(l->p[i]) + (size_t)o * es;
    const char *g = (const char *)rm_ptr(l->g[i]) + (size_t)o * es;
    char *s0 = l->s0 && l->s0[i] ? (char *)rm_ptr(l->s0[i]) + (size_t)o * es : NULL;
    if (f) {
        char *s1 = (char *)rm_ptr(l->s1[i]) + (size_t)o * es;
        if (f64)
            rm_adamw_span_f64((double *)p, (const double *)g, (double *)s0, (double *)s1, len,
                              &f[i]);
        else rm_adamw_span_f32((float *)p, (const float *)g, (float *)s0, (float *)s1, len, &f[i]);
    } else if (f64) {
        rm_sgd_span_f64((double *)p, (const double *)g, (double *)s0, len, &l->sgd[i]);
    } else {
        rm_sgd_span_f32((float *)p, (const float *)g, (float *)s0, len, &l->sgd[i]);
    }
}

/* f: the AdamW factors of each tensor (ADAMW_LIST), NULL for SGD_LIST. */
static void run_list(const rm_optim_list *l, const rm_adamw_factors *f) {
    int64_t total = 0;
    for (int i = 0; i < l->n; i++) total += remat_numel(l->p[i]);
#pragma omp parallel if (total > RM_OPTIM_OMP_MIN)
    {
        const int64_t nt = omp_get_num_threads(), t = omp_get_thread_num();
        const int64_t lo = total * t / nt, hi = total * (t + 1) / nt;
        int64_t base = 0;
        for (int i = 0; i < l->n && base < hi; i++) {
            const int64_t n = remat_numel(l->p[i]);
            const int64_t a = lo > base ? lo : base, b = hi < base + n ? hi : base + n;
            if (a < b) list_piece(l, f, i, a - base, b - a);
            base += n;
        }
    }
}

remat_status rm_cpu_adamw_list(const rm_kargs *k) {
    const rm_optim_list *l = k->params;
    rm_adamw_factors *f = malloc(sizeof *f * (size_t)(l->n > 0 ? l->n : 1));
    if (!f) return rm_err(REMAT_ENOMEM, "adamw update: out of memory");
    for (int i = 0; i < l->n; i++) rm_adamw_factors_make(&l->adamw[i], &f[i]);
    run_list(l, f);
    free(f);
    return REMAT_OK;
}

remat_status rm_cpu_sgd_list(const rm_kargs *k) {
    run_list(k->params, NULL);
    return REMAT_OK;
}
