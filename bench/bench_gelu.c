/* bench/bench_gelu.c — the GELU kernels at the GPT's MLP shape (issue 34's GPT: B x T =
 * 2048 rows of 4D = 1536): the fused bias + GELU (remat_bias_gelu, f32 and bf16 with
 * autocast's f32 bias), the plain GELU (remat_gelu, f32 and bf16: the bf16 one is what the
 * GPT runs under autocast), tanh and erf forms, forward and backward (dx, and db for the
 * fused op), next to a copy of the same bytes measured in the same run.
 *
 * Times are process CPU time per call (immune to preemption on a shared machine; with
 * more than one thread it also counts OpenMP threads waiting at barriers), median and
 * minimum over the reps, output allocation included; the backward runs remat_grad on a
 * retained graph. MB counts the minimum traffic: forward x read, y written (the bias row
 * ignored); backward g and x read, dx written. The floor is MB at the copy's rate.
 *
 *   bench_gelu [reps] [only]   (reps default 15; only: run the cases whose name contains
 *                              it; threads $BENCH_THREADS, default 1) */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench_util.h"

#ifdef _OPENMP
#include <omp.h>
#endif

#define MAX_REPS 101
#define ROWS 2048
#define COLS 1536

typedef struct gcase {
    const char *name;
    remat_dtype dt;
    bool bias;
    remat_gelu_approx form;
} gcase;

static const gcase k_cases[] = {
    {"bias+gelu tanh f32", REMAT_F32, true, REMAT_GELU_TANH},
    {"bias+gelu erf f32", REMAT_F32, true, REMAT_GELU_ERF},
    {"gelu tanh f32", REMAT_F32, false, REMAT_GELU_TANH},
    {"gelu tanh bf16", REMAT_BF16, false, REMAT_GELU_TANH},
    {"bias+gelu tanh bf16", REMAT_BF16, true, REMAT_GELU_TANH},
};
#define N_CASES ((int)(sizeof k_cases / sizeof k_cases[0]))

static int call(const gcase *c, remat_tensor **y, remat_tensor *x, remat_tensor *b) {
    return c->bias ? remat_bias_gelu(y, x, b, c->form) : remat_gelu(y, x, c->form);
}

/* ms per call: CPU time median and minimum of fn over reps (one untimed call first) */
static void stats(const double *t, int reps, double *med, double *min) {
    *med = median(t, reps) * 1e3;
    *min = t[0];
    for (int i = 1; i < reps; i++)
        if (t[i] < *min) *min = t[i];
    *min *= 1e3;
}

static void bench_case(const gcase *c, int reps, double gbs) {
    const int64_t sh[2] = {ROWS, COLS}, n = COLS;
    remat_tensor *x32 = NULL, *x = NULL, *b = NULL, *g32 = NULL, *g = NULL;
    CHECK(remat_rand_uniform(&x32, 2, sh, -4, 4, REMAT_F32, REMAT_DEVICE_CPU));
    CHECK(remat_rand_uniform(&b, 1, &n, -1, 1, REMAT_F32, REMAT_DEVICE_CPU));
    CHECK(remat_rand_uniform(&g32, 2, sh, -1, 1, REMAT_F32, REMAT_DEVICE_CPU));
    CHECK(remat_to_dtype(&x, x32, c->dt));
    CHECK(remat_to_dtype(&g, g32, c->dt));
    double tf[MAX_REPS], tb[MAX_REPS];
    for (int r = -1; r < reps; r++) {
        remat_tensor *y = NULL;
        double t0 = cpu_now();
        CHECK(call(c, &y, x, b));
        double t1 = cpu_now();
        remat_release(y);
        if (r >= 0) tf[r] = t1 - t0;
    }
    CHECK(remat_set_requires_grad(x, true));
    if (c->bias) CHECK(remat_set_requires_grad(b, true));
    remat_tensor *y = NULL, *in[2] = {x, b};
    CHECK(call(c, &y, x, b));
    for (int r = -1; r < reps; r++) {
        remat_tensor *gr[2] = {NULL, NULL};
        double t0 = cpu_now();
        CHECK(remat_grad(1, &y, &g, c->bias ? 2 : 1, in, true, true, gr));
        double t1 = cpu_now();
        remat_release(gr[0]), remat_release(gr[1]);
        if (r >= 0) tb[r] = t1 - t0;
    }
    double es = c->dt == REMAT_F32 ? 4 : 2, full = (double)ROWS * COLS * es * 1e-6;
    double fm, fmin, bm, bmin;
    stats(tf, reps, &fm, &fmin);
    stats(tb, reps, &bm, &bmin);
    double ff = 2 * full / gbs, fb = 3 * full / gbs; /* ms: MB / (GB/s) */
    printf("| %-20s | %7.3f | %7.3f | %5.1f | %5.2f | %7.3f | %7.3f | %5.1f | %5.2f |\n", c->name,
           fm, fmin, 2 * full, fm / ff, bm, bmin, 3 * full, bm / fb);
    fflush(stdout);
    remat_release(y), remat_release(x32), remat_release(x), remat_release(b);
    remat_release(g32), remat_release(g);
}

/* GB/s of a memcpy of 2 x 12.6 MB (read + write counted), CPU-time median */
static double copy_rate(int reps) {
    size_t bytes = (size_t)ROWS * COLS * sizeof(float);
    char *s = malloc(bytes), *d = malloc(bytes);
    if (!s || !d) exit(1);
    memset(s, 1, bytes), memset(d, 0, bytes);
    double t[MAX_REPS];
    for (int r = -1; r < reps; r++) {
        double t0 = cpu_now();
        memcpy(d, s, bytes);
        double t1 = cpu_now();
        if (r >= 0) t[r] = t1 - t0;
    }
    free(s), free(d);
    return 2.0 * (double)bytes / median(t, reps) * 1e-9;
}

int main(int argc, char **argv) {
    int reps = argc > 1 ? atoi(argv[1]) : 15;
    if (reps < 1) reps = 1;
    if (reps > MAX_REPS) reps = MAX_REPS;
    const char *env = getenv("BENCH_THREADS");
    int threads = env ? atoi(env) : 1;
#ifdef _OPENMP
    omp_set_num_threads(threads);
#endif
    remat_manual_seed(1);
    double gbs = copy_rate(reps);
    printf("GELU kernels at (%d, %d), %d thread(s), %d reps: CPU ms a call, median (min); "
           "copy %.1f GB/s\n",
           ROWS, COLS, threads, reps, gbs);
    printf("| case | fwd ms | fwd min | fwd MB | / floor | bwd ms | bwd min | bwd MB | / floor |\n"
           "|---|---|---|---|---|---|---|---|---|\n");
    for (int i = 0; i < N_CASES; i++)
        if (argc < 3 || strstr(k_cases[i].name, argv[2])) bench_case(&k_cases[i], reps, gbs);
    return 0;
}
