/* bench/bench_linear_bf16.c — linear's backward GEMMs under autocast at the
 * GPT's shapes (rows B·T = 2048, width 384), the way linear's backward runs
 * them on the cpu matmul kernel (RM_K_MATMUL, src/backends/cpu/matmul.c),
 * against the way they ran before, interleaved rep by rep in one process:
 *   - dx = g · W with the f32 weight rounded into one whole bf16 copy
 *     ("whole") against rounded panel by panel (RM_MM_PANEL, "panels");
 *   - the whole backward (dW, dx, db) from an f32 output gradient: rounded
 *     into a bf16 copy first, as the engine did ("g rounded"), against
 *     handed to the GEMMs wide and rounded per panel ("g wide").
 *
 * Times are CPU time of the process per call (CLOCK_PROCESS_CPUTIME_ID: all
 * threads, robust to other load on a shared machine), median [min-max]
 * over the reps; ratio = new / old of the medians.
 *
 *   bench_linear_bf16 [reps]   (default 15; threads 1 and 2, or $BENCH_THREADS) */
#include <stdint.h>

#include "bench_util.h"
#include "core/core.h"
#include "core/kernels.h"
#include "remat/autocast.h"

#ifdef _OPENMP
#include <omp.h>
#endif

#define MAX_REPS 64
#define ROWS 2048

static remat_tensor *rand_t(int64_t r, int64_t c, remat_dtype dt, uint32_t seed) {
    int64_t s[2] = {r, c};
    remat_tensor *t = NULL;
    CHECK(remat_empty(&t, 2, s, REMAT_F32, REMAT_DEVICE_CPU));
    float *v = remat_data(t);
    for (int64_t i = 0; i < r * c; i++) {
        seed = seed * 1664525u + 1013904223u;
        v[i] = (float)(seed >> 8) / 16777216.0f * 2.0f - 1.0f;
    }
    if (dt == REMAT_F32) return t;
    remat_tensor *b = NULL;
    CHECK(remat_to_dtype(&b, t, dt));
    remat_release(t);
    return b;
}

static remat_tensor *empty_t(int64_t r, int64_t c, remat_dtype dt) {
    int64_t s[2] = {r, c};
    remat_tensor *t = NULL;
    CHECK(remat_empty(&t, c ? 2 : 1, c ? s : &r, dt, REMAT_DEVICE_CPU));
    return t;
}

static void mm(remat_tensor *c, unsigned fc, remat_tensor *a, unsigned fa, remat_tensor *b,
               unsigned fb) {
    const rm_mm_params p = {(unsigned char)fa, (unsigned char)fb, (unsigned char)fc};
    rm_kargs k = {.in = {a, b}, .out = {c}, .params = &p};
    CHECK(rm_kernel_run(RM_K_MATMUL, "bench", &k));
}

enum { RC = RM_MM_ROW | RM_MM_COL };

/* dx (R, I) = g (R, O) · W (O, I): g bf16, W f32, rounded whole or in panels */
static void dx_run(remat_tensor *g, remat_tensor *w, remat_tensor *dx, bool panels) {
    mm(dx, RC, g, RC, w, RC | (panels ? RM_MM_PANEL : 0));
}

/* The backward from g f32: wide (panels) or rounded into a bf16 copy first. */
static void bwd_run(remat_tensor *g, remat_tensor *x, remat_tensor *w, remat_tensor *dw,
                    remat_tensor *dx, remat_tensor *db, bool wide) {
    remat_tensor *gb = g;
    if (!wide) {
        gb = empty_t(g->shape[0], g->shape[1], REMAT_BF16);
        CHECK(rm_copy_into(gb, g));
    }
    unsigned fg = RC | (wide ? RM_MM_PANEL : 0);
    mm(dw, RC, gb, fg | RM_MM_T, x, RC);
    mm(dx, RC, gb, fg, w, RC | RM_MM_PANEL);
    rm_kargs k = {.in = {gb}, .out = {db}};
    CHECK(rm_kernel_run(RM_K_COLSUM, "bench", &k));
    if (!wide) remat_release(gb);
}

static void report(const char *name, const double *old, const double *neu, int reps) {
    double mo = median(old, reps), mn = median(neu, reps), lo[2] = {1e9, 1e9}, hi[2] = {0, 0};
    for (int i = 0; i < reps; i++) {
        lo[0] = old[i] < lo[0] ? old[i] : lo[0], hi[0] = old[i] > hi[0] ? old[i] : hi[0];
        lo[1] = neu[i] < lo[1] ? neu[i] : lo[1], hi[1] = neu[i] > hi[1] ? neu[i] : hi[1];
    }
    printf("  %-34s %7.3f [%.3f-%.3f]  %7.3f [%.3f-%.3f]  %.3f\n", name, mo * 1e3, lo[0] * 1e3,
           hi[0] * 1e3, mn * 1e3, lo[1] * 1e3, hi[1] * 1e3, mn / mo);
}

int main(int argc, char **argv) {
    int reps = argc > 1 ? atoi(argv[1]) : 15;
    if (reps < 1 || reps > MAX_REPS) reps = 15;
    if (!remat_cpu_has_bf16()) printf("note: no native bf16 GEMM on this CPU (f32 fallback)\n");
    const char *env = getenv("BENCH_THREADS");
    int t0 = env ? atoi(env) : 1, t1 = env ? t0 : 2;
    /* (out_features, in_features) of the GPT block's linears */
    const int64_t shapes[][2] = {{1152, 384}, {384, 384}, {1536, 384}, {384, 1536}};
    const char *names[] = {"qkv", "proj", "fc", "fc2"};
    for (int th = t0; th <= t1; th++) {
#ifdef _OPENMP
        omp_set_num_threads(th);
#endif
        printf("%d thread(s): CPU ms per call, median [min-max]: old, new, new/old\n", th);
        for (int s = 0; s < 4; s++) {
            int64_t O = shapes[s][0], I = shapes[s][1];
            remat_tensor *gb = rand_t(ROWS, O, REMAT_BF16, 1), *gf = rand_t(ROWS, O, REMAT_F32, 2);
            remat_tensor *x = rand_t(ROWS, I, REMAT_BF16, 3), *w = rand_t(O, I, REMAT_F32, 4);
            remat_tensor *dx = empty_t(ROWS, I, REMAT_BF16), *dw = empty_t(O, I, REMAT_F32);
            remat_tensor *db = empty_t(O, 0, REMAT_BF16);
            double t[4][MAX_REPS];
            for (int r = -1; r < reps; r++) { /* r = -1: warm-up (oneDNN's primitives) */
                for (int v = 0; v < 4; v++) {
                    double c0 = cpu_now();
                    if (v < 2) dx_run(gb, w, dx, v == 1);
                    else bwd_run(gf, x, w, dw, dx, db, v == 3);
                    if (r >= 0) t[v][r] = cpu_now() - c0;
                }
            }
            char nm[64];
            snprintf(nm, sizeof nm, "%s dx: whole -> panels", names[s]);
            report(nm, t[0], t[1], reps);
            snprintf(nm, sizeof nm, "%s backward: g rounded -> g wide", names[s]);
            report(nm, t[2], t[3], reps);
            remat_release(gb), remat_release(gf), remat_release(x), remat_release(w);
            remat_release(dx), remat_release(dw), remat_release(db);
        }
    }
    return 0;
}
