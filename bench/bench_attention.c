/* bench/bench_attention.c — the fused attention kernels (src/backends/cpu/attention.c)
 * at one GPT layer's shape, f32 against bf16 (autocast's path: oneDNN's bf16 GEMMs
 * where the CPU has them), forward and backward, called directly on the kernel ABI and
 * interleaved rep by rep in one process.
 *
 * Shape: B = 8, H = 6, T = 256, D = 64, causal (bench/autocast.sh's model); q, k and v
 * are the per-head views of one packed (B, T, 3·H·D) projection and the outputs are
 * stored (B, T, H, D), as the op makes them; the bf16 values are the f32 ones rounded.
 * Times are CPU time of the process (CLOCK_PROCESS_CPUTIME_ID, robust to other load
 * on a shared machine; with 2 threads it also counts OpenMP threads spinning: run with
 * OMP_WAIT_POLICY=passive to count only work), ms per call, median [min-max].
 * Each rep also times an n = 1024 square GEMM of each dtype (rm_sgemm, rm_bgemm), the
 * yardstick of `remat bench --profile`: a pass's floor is its FLOPs (the causal mask's
 * visible query-key pairs; forward S and P·V, backward S, dP, dV, dQ and dK) at the
 * median rate, and "x floor" is its median time over that.
 *
 *   bench_attention [reps]   (default 15; threads 1 and 2, or $BENCH_THREADS)
 *
 * For profilers: BENCH_ONLY=f32 (or bf16) runs that dtype's kernels alone and no yardstick. */
#include <stdint.h>

#include "backends/cpu/cpu.h"
#include "backends/cpu/gemm.h"
#include "bench_util.h"
#include "core/core.h"
#include "core/kernels.h"

#ifdef _OPENMP
#include <omp.h>
#endif

#define MAX_REPS 64
enum { B = 8, H = 6, T = 256, D = 64 };

/* q, k, v, the output gradient, and the outputs of one dtype. */
typedef struct att_set {
    remat_tensor *in[4];   /* q, k, v, gy: views */
    remat_tensor *out[5];  /* y, lse, dq, dk, dv */
    remat_tensor *keep[2]; /* the packed projection and gy's base */
} att_set;

/* (B, T, H, D) stored, seen as (B, H, T, D) (the op's 4-D layout). */
static remat_tensor *heads_of(remat_tensor *base, int64_t slot) {
    remat_tensor *r = NULL, *s = NULL, *u = NULL, *t = NULL;
    CHECK(remat_view(&r, base, 5, (const int64_t[]){B, T, slot < 0 ? 1 : 3, H, D}));
    CHECK(remat_slice(&s, r, 2, slot < 0 ? 0 : slot, (slot < 0 ? 0 : slot) + 1, 1));
    CHECK(remat_view(&u, s, 4, (const int64_t[]){B, T, H, D}));
    CHECK(remat_transpose(&t, u, 1, 2));
    remat_release(r), remat_release(s), remat_release(u);
    return t;
}

static remat_tensor *zeros_heads(remat_dtype dt) {
    remat_tensor *z = NULL;
    CHECK(remat_zeros(&z, 1, (const int64_t[]){(int64_t)B * T * H * D}, dt, REMAT_DEVICE_CPU));
    remat_tensor *t = heads_of(z, -1);
    remat_release(z);
    return t;
}

/* The set of dtype dt from the f32 projection qkv and gradient g. */
static att_set make_set(remat_tensor *qkv, remat_tensor *g, remat_dtype dt) {
    att_set s = {0};
    CHECK(remat_to_dtype(&s.keep[0], qkv, dt));
    CHECK(remat_to_dtype(&s.keep[1], g, dt));
    for (int i = 0; i < 3; i++) s.in[i] = heads_of(s.keep[0], i);
    s.in[3] = heads_of(s.keep[1], -1);
    s.out[0] = zeros_heads(dt);
    CHECK(remat_zeros(&s.out[1], 3, (const int64_t[]){B, H, T}, REMAT_F32, REMAT_DEVICE_CPU));
    for (int i = 2; i < 5; i++) s.out[i] = zeros_heads(dt);
    return s;
}

static void free_set(att_set *s) {
    for (int i = 0; i < 4; i++) remat_release(s->in[i]);
    for (int i = 0; i < 5; i++) remat_release(s->out[i]);
    for (int i = 0; i < 2; i++) remat_release(s->keep[i]);
}

/* One forward and one backward of set s; CPU seconds of each into fwd, bwd. */
static void run(att_set *s, remat_dtype dt, double *fwd, double *bwd) {
    static const rm_attention_params p = {.causal = true, .scale = 0.125};
    rm_kargs kf = {
        .in = {s->in[0], s->in[1], s->in[2]}, .out = {s->out[0], s->out[1]}, .params = &p};
    rm_kargs kb = {.in = {s->in[0], s->in[1], s->in[2], s->out[0], s->in[3], s->out[1]},
                   .out = {s->out[2], s->out[3], s->out[4]},
                   .params = &p};
    double c0 = cpu_now();
    CHECK(rm_cpu_kernels[RM_K_ATTENTION][dt](&kf));
    double c1 = cpu_now();
    CHECK(rm_cpu_kernels[RM_K_ATTENTION_BWD][dt](&kb));
    *fwd = c1 - c0, *bwd = cpu_now() - c1;
}

/* CPU seconds of one n x n x n GEMM of dtype dt (f32: rm_sgemm, bf16: rm_bgemm) on a, b, c. */
static double gemm_seconds(remat_dtype dt, int64_t n, void *a, void *b, void *c) {
    double c0 = cpu_now();
    if (dt == REMAT_F32) rm_sgemm(false, false, n, n, n, 1.0f, a, n, b, n, 0.0f, c, n);
    else rm_bgemm(false, false, n, n, n, a, n, b, n, 0.0f, c, n);
    return cpu_now() - c0;
}

/* "median [min-max]" of v[0..n) in ms */
static const char *stat_str(char *buf, size_t size, const double *v, int n) {
    double lo = v[0], hi = v[0];
    for (int i = 1; i < n; i++) lo = v[i] < lo ? v[i] : lo, hi = v[i] > hi ? v[i] : hi;
    snprintf(buf, size, "%.3f [%.3f-%.3f]", median(v, n) * 1e3, lo * 1e3, hi * 1e3);
    return buf;
}

int main(int argc, char **argv) {
    int reps = argc > 1 ? atoi(argv[1]) : 15;
    if (reps < 1 || reps > MAX_REPS) reps = 15;
    int threads[2] = {1, 2}, nthreads = 2;
    const char *env = getenv("BENCH_THREADS"), *only = getenv("BENCH_ONLY");
    if (env) threads[0] = atoi(env), nthreads = 1;
    remat_tensor *qkv = NULL, *g = NULL;
    CHECK(remat_rand_normal(&qkv, 1, (const int64_t[]){(int64_t)B * T * 3 * H * D}, 0, 1, REMAT_F32,
                            REMAT_DEVICE_CPU));
    CHECK(remat_rand_normal(&g, 1, (const int64_t[]){(int64_t)B * T * H * D}, 0, 0.01, REMAT_F32,
                            REMAT_DEVICE_CPU));
    att_set s32 = make_set(qkv, g, REMAT_F32), s16 = make_set(qkv, g, REMAT_BF16);
    const int64_t GN = 1024, GN2 = GN * GN;
    float *ga = calloc((size_t)GN2, sizeof(float) * 3); /* the yardstick's operands */
    if (!ga) return 1;
    /* visible pairs of a causal head, and the FLOPs of a forward and a backward */
    const double pairs = (double)T * (T + 1) / 2, nb = (double)B * H;
    const double flops[2] = {nb * pairs * 2.0 * (2 * D), nb * pairs * 2.0 * (5 * D)};
    printf("fused causal attention, B %d H %d T %d D %d (per-head views of a packed qkv), "
           "%d reps interleaved; CPU ms per call, median [min-max]\n",
           B, H, T, D, reps);
    printf("%-7s %-8s %-26s %-9s %-26s %-9s %s\n", "threads", "pass", "f32", "x floor", "bf16",
           "x floor", "bf16/f32");
    for (int ti = 0; ti < nthreads; ti++) {
#ifdef _OPENMP
        omp_set_num_threads(threads[ti]);
#endif
        double t[2][2][MAX_REPS], w;  /* [f32, bf16][fwd, bwd] */
        double gt[2][MAX_REPS];       /* [f32, bf16] the yardstick GEMM */
        run(&s32, REMAT_F32, &w, &w); /* warm-up: pages, primitives, thread team */
        run(&s16, REMAT_BF16, &w, &w);
        for (int i = 0; i < reps; i++) {
            if (only && strcmp(only, "f32") != 0) t[0][0][i] = t[0][1][i] = 0;
            else run(&s32, REMAT_F32, &t[0][0][i], &t[0][1][i]);
            if (only && strcmp(only, "bf16") != 0) t[1][0][i] = t[1][1][i] = 0;
            else run(&s16, REMAT_BF16, &t[1][0][i], &t[1][1][i]);
            if (only) {
                gt[0][i] = gt[1][i] = 1;
                continue;
            }
            gt[0][i] = gemm_seconds(REMAT_F32, GN, ga, ga + GN2, ga + 2 * GN2);
            gt[1][i] = gemm_seconds(REMAT_BF16, GN, ga, ga + GN2, ga + 2 * GN2);
        }
        double rate[2]; /* FLOP/s */
        for (int dt = 0; dt < 2; dt++)
            rate[dt] = 2.0 * (double)GN2 * (double)GN / median(gt[dt], reps);
        printf("%-7d GEMM n=%lld: f32 %.1f GFLOP/s, bf16 %.1f GFLOP/s (median)\n", threads[ti],
               (long long)GN, rate[0] * 1e-9, rate[1] * 1e-9);
        for (int p = 0; p < 2; p++) {
            char a[64], b[64];
            printf("%-7d %-8s %-26s %-9.2f %-26s %-9.2f %.3f\n", threads[ti],
                   p ? "backward" : "forward", stat_str(a, sizeof a, t[0][p], reps),
                   median(t[0][p], reps) * rate[0] / flops[p], stat_str(b, sizeof b, t[1][p], reps),
                   median(t[1][p], reps) * rate[1] / flops[p],
                   median(t[1][p], reps) / median(t[0][p], reps));
        }
    }
    free(ga);
    free_set(&s32), free_set(&s16);
    remat_release(qkv), remat_release(g);
    return 0;
}
