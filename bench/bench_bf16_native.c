/* bench/bench_bf16_native.c — the bf16 unary kernels, native (one loop that
 * widens, computes in f32 and rounds: src/backends/cpu/unary.c), and add's
 * f32 + bf16 (the residual stream's add, widened in registers:
 * src/backends/cpu/elementwise.c), against the path they replace (the f32 kernel on 16 K-element chunks widened into f32
 * buffers, outputs rounded back: rm_cpu_bf16_via_f32, src/backends/cpu/bf16.c),
 * called directly on the kernel ABI, interleaved rep by rep in one process.
 *
 * Times are CPU time of the process (CLOCK_PROCESS_CPUTIME_ID: all threads,
 * robust to other load on a shared machine) and wall time, per call, median
 * [min-max] over the reps; the ratio is native / via f32 of the CPU-time medians.
 * Shape (2048, 1536): a GPT block's MLP activation at B*T = 2048, D = 384;
 * the add's (2048, 384), its residual stream.
 *
 *   bench_bf16_native [reps]   (default 15; threads 1 and 2, or $BENCH_THREADS) */
#include <stdint.h>

#include "backends/cpu/cpu.h"
#include "bench_util.h"
#include "core/core.h"
#include "core/kernels.h"

#ifdef _OPENMP
#include <omp.h>
#endif

#define MAX_REPS 64

/* A bf16 tensor of n values over [-6, 6]. */
static remat_tensor *bf16_rand(int64_t n, uint32_t seed) {
    remat_tensor *t = NULL;
    CHECK(remat_empty(&t, 1, &n, REMAT_BF16, REMAT_DEVICE_CPU));
    uint16_t *v = remat_data(t);
    for (int64_t i = 0; i < n; i++) {
        seed = seed * 1664525u + 1013904223u;
        v[i] = rm_f32_to_bf16((float)(seed >> 8) / 16777216.0f * 12.0f - 6.0f);
    }
    return t;
}

typedef struct row {
    const char *name;
    rm_unary_op op;
    int pass; /* 0 forward, 1 backward, 2 backward over the dying gradient, 3 f32 + bf16 add */
} row;

static const row k_rows[] = {
    {"gelu fwd", RM_U_GELU_ERF, 0},
    {"gelu bwd", RM_U_GELU_ERF, 1},
    {"gelu bwd in place", RM_U_GELU_ERF, 2},
    {"gelu_tanh fwd", RM_U_GELU_TANH, 0},
    {"gelu_tanh bwd", RM_U_GELU_TANH, 1},
    {"silu fwd", RM_U_SILU, 0},
    {"silu bwd", RM_U_SILU, 1},
    {"tanh fwd", RM_U_TANH, 0},
    {"tanh bwd", RM_U_TANH, 1},
    {"exp fwd", RM_U_EXP, 0},
    {"mul fwd", RM_U_MUL, 0},
    {"add f32+bf16", RM_U_ADD, 3},
};

/* One call of row r through kernel f; g is overwritten by the in-place pass
 * (its values stay finite: a gradient of the same range). */
static double run(rm_kernel_fn f, const row *r, remat_tensor *x, remat_tensor *g, remat_tensor *y,
                  double *wall) {
    rm_unary_params p = {r->op, 0.5};
    rm_kargs k = {.params = &p};
    rm_ew_params ep = {.op = RM_EW_ADD};
    if (r->pass == 3) k.in[0] = y, k.in[1] = x, k.out[0] = g, k.params = &ep;
    else if (r->pass == 0) k.in[0] = x, k.out[0] = y;
    else if (r->pass == 1) k.in[0] = g, k.in[1] = x, k.out[0] = y;
    else k.in[0] = g, k.in[1] = x, k.out[0] = g;
    double w0 = now(), c0 = cpu_now();
    CHECK(f(&k));
    double c = cpu_now() - c0;
    *wall = now() - w0;
    return c;
}

int main(int argc, char **argv) {
    int reps = argc > 1 ? atoi(argv[1]) : 15;
    if (reps < 1 || reps > MAX_REPS) reps = 15;
    int threads[2] = {1, 2}, nthreads = 2;
    const char *env = getenv("BENCH_THREADS");
    if (env) threads[0] = atoi(env), nthreads = 1;
    const int64_t n = (int64_t)2048 * 1536;
    remat_tensor *x = bf16_rand(n, 1), *g = bf16_rand(n, 2), *y = bf16_rand(n, 3);
    /* the add's operands: bf16 xs, f32 fs and the f32 output ys, (2048, 384) */
    const int64_t nr = (int64_t)2048 * 384;
    remat_tensor *xs = bf16_rand(nr, 4), *fs = NULL, *ys = NULL;
    CHECK(remat_to_dtype(&fs, xs, REMAT_F32));
    CHECK(remat_empty(&ys, 1, &nr, REMAT_F32, REMAT_DEVICE_CPU));
    printf("bf16 kernels on (2048, 1536) (the add: (2048, 384)), %d reps interleaved; ms per call, "
           "median "
           "[min-max]\n",
           reps);
    printf("%-7s %-18s %-26s %-26s %-26s %s\n", "threads", "kernel", "via f32 cpu", "native cpu",
           "native wall", "native/via (cpu)");
    for (int ti = 0; ti < nthreads; ti++) {
#ifdef _OPENMP
        omp_set_num_threads(threads[ti]);
#endif
        for (size_t ri = 0; ri < sizeof k_rows / sizeof *k_rows; ri++) {
            const row *r = &k_rows[ri];
            rm_kernel_id id = r->pass == 3 ? RM_K_ELEMENTWISE
                              : r->pass    ? RM_K_UNARY_BWD
                                           : RM_K_UNARY;
            rm_kernel_fn nat = rm_cpu_kernels[id][r->pass == 3 ? REMAT_F32 : REMAT_BF16];
            rm_kernel_fn via = rm_cpu_bf16_via_f32[id];
            remat_tensor *ax = x, *ag = g, *ay = y;
            if (r->pass == 3) ax = xs, ag = ys, ay = fs; /* bf16 x + f32 y into f32 g */
            double tv[MAX_REPS], tn[MAX_REPS], wn[MAX_REPS], w;
            run(via, r, ax, ag, ay, &w); /* warm-up: pages, primitives, thread team */
            run(nat, r, ax, ag, ay, &w);
            for (int i = 0; i < reps; i++) {
                tv[i] = run(via, r, ax, ag, ay, &w);
                tn[i] = run(nat, r, ax, ag, ay, &wn[i]);
            }
            double mv = median(tv, reps), mn = median(tn, reps);
            double lo_v = tv[0], hi_v = tv[0], lo_n = tn[0], hi_n = tn[0], lo_w = wn[0],
                   hi_w = wn[0];
            for (int i = 1; i < reps; i++) {
                lo_v = tv[i] < lo_v ? tv[i] : lo_v, hi_v = tv[i] > hi_v ? tv[i] : hi_v;
                lo_n = tn[i] < lo_n ? tn[i] : lo_n, hi_n = tn[i] > hi_n ? tn[i] : hi_n;
                lo_w = wn[i] < lo_w ? wn[i] : lo_w, hi_w = wn[i] > hi_w ? wn[i] : hi_w;
            }
            char a[64], b[64], c[64];
            snprintf(a, sizeof a, "%.3f [%.3f-%.3f]", mv * 1e3, lo_v * 1e3, hi_v * 1e3);
            snprintf(b, sizeof b, "%.3f [%.3f-%.3f]", mn * 1e3, lo_n * 1e3, hi_n * 1e3);
            snprintf(c, sizeof c, "%.3f [%.3f-%.3f]", median(wn, reps) * 1e3, lo_w * 1e3,
                     hi_w * 1e3);
            printf("%-7d %-18s %-26s %-26s %-26s %.3f\n", threads[ti], r->name, a, b, c, mn / mv);
        }
    }
    remat_release(x);
    remat_release(g);
    remat_release(y);
    remat_release(xs);
    remat_release(fs);
    remat_release(ys);
    return 0;
}
