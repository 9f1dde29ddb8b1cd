/* bench/bench_ops.c — memory bandwidth of the non-GEMM kernels: elementwise
 * (add, bias add, mul, gelu, relu), reductions (sum over the last / the
 * leading dim), layer_norm (f32; then cast to bf16; written in bf16 by
 * remat_layer_norm_to) and softmax, forward and backward, next to a
 * copy-bandwidth ceiling measured in the same run (memcpy on one thread and
 * an OpenMP-split memcpy).
 *
 * GB/s counts the minimum traffic of each op in full-size tensors (e.g. add
 * forward: read a, read b, write y = 3; mul backward: read g, a, b, write
 * da, db = 5; small vectors such as a bias or row statistics are ignored),
 * divided by the median time of the call, output allocation included.
 * Backward is timed with remat_grad on a retained graph, so it measures the
 * backward kernels alone (plus allocating the gradients).
 *
 *   bench_ops [reps]      (default 9; threads 1 and 2, or $BENCH_THREADS) */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "bench_util.h"
#include "core/core.h"

#ifdef _OPENMP
#include <omp.h>
#endif

#define MAX_REPS 64

/* ---- the ops -------------------------------------------------------------------------------- */

enum { FULL, ROW }; /* input shapes: (R, C) or (C) */

typedef int (*opfn)(remat_tensor **out, remat_tensor *const *in);

static int op_add(remat_tensor **o, remat_tensor *const *in) { return remat_add(o, in[0], in[1]); }
static int op_mul(remat_tensor **o, remat_tensor *const *in) { return remat_mul(o, in[0], in[1]); }
static int op_gelu(remat_tensor **o, remat_tensor *const *in) {
    return remat_gelu(o, in[0], REMAT_GELU_ERF);
}
static int op_gelu_tanh(remat_tensor **o, remat_tensor *const *in) {
    return remat_gelu(o, in[0], REMAT_GELU_TANH);
}
static int op_relu(remat_tensor **o, remat_tensor *const *in) { return remat_relu(o, in[0]); }
static int op_sum_last(remat_tensor **o, remat_tensor *const *in) {
    return remat_sum(o, in[0], 1, (int[]){-1}, false);
}
static int op_sum_lead(remat_tensor **o, remat_tensor *const *in) {
    return remat_sum(o, in[0], 1, (int[]){0}, false);
}
static int op_layer_norm(remat_tensor **o, remat_tensor *const *in) {
    return remat_layer_norm(o, in[0], 1, in[1], in[2], 1e-5);
}
/* the norm before a bf16 linear: then a cast, or rounded by the norm (remat_layer_norm_to) */
static int op_layer_norm_cast(remat_tensor **o, remat_tensor *const *in) {
    remat_tensor *y = NULL;
    int rc = remat_layer_norm(&y, in[0], 1, in[1], in[2], 1e-5);
    if (!rc) rc = remat_to_dtype(o, y, REMAT_BF16);
    remat_release(y);
    return rc;
}
static int op_layer_norm_to(remat_tensor **o, remat_tensor *const *in) {
    return remat_layer_norm_to(o, in[0], 1, in[1], in[2], 1e-5, REMAT_BF16);
}
static int op_softmax(remat_tensor **o, remat_tensor *const *in) {
    return remat_softmax(o, in[0], -1);
}

typedef struct opdef {
    const char *name;
    opfn f;
    int n_in;
    int kind[3];
    double fwd_bytes, bwd_bytes; /* in full-size tensors */
} opdef;

static const opdef k_ops[] = {
    {"add", op_add, 2, {FULL, FULL}, 3, 3},
    {"add (bias row)", op_add, 2, {FULL, ROW}, 2, 2},
    {"mul", op_mul, 2, {FULL, FULL}, 3, 5},
    {"gelu (erf)", op_gelu, 1, {FULL}, 2, 3},
    {"gelu (tanh)", op_gelu_tanh, 1, {FULL}, 2, 3},
    {"relu", op_relu, 1, {FULL}, 2, 3},
    {"sum (last dim)", op_sum_last, 1, {FULL}, 1, 1},
    {"sum (leading dim)", op_sum_lead, 1, {FULL}, 1, 1},
    {"layer_norm", op_layer_norm, 3, {FULL, ROW, ROW}, 2, 3},
    /* both: the fused op's minimum, x read and a bf16 y written (1.5), a bf16 g and x read
     * and dx written (2.5); the cast moves 2 more forward (y32 written, read back) and 2
     * backward (g32 written, read back) */
    {"layer_norm, cast bf16", op_layer_norm_cast, 3, {FULL, ROW, ROW}, 1.5, 2.5},
    {"layer_norm_to bf16", op_layer_norm_to, 3, {FULL, ROW, ROW}, 1.5, 2.5},
    {"softmax (last dim)", op_softmax, 1, {FULL}, 2, 3},
};
#define N_OPS ((int)(sizeof k_ops / sizeof k_ops[0]))

/* ---- the copy ceiling ------------------------------------------------------------------------ */

static void par_memcpy(char *dst, const char *src, size_t n) {
#pragma omp parallel
    {
        int nt = 1, id = 0;
#ifdef _OPENMP
        nt = omp_get_num_threads();
        id = omp_get_thread_num();
#endif
        size_t lo = n * (size_t)id / (size_t)nt, hi = n * (size_t)(id + 1) / (size_t)nt;
        memcpy(dst + lo, src + lo, hi - lo);
    }
}

/* GB/s of copying n bytes (read + write = 2n), the better of memcpy and the
 * split memcpy; both printed. */
static double copy_ceiling(size_t n, int reps, int threads) {
    char *src = malloc(n), *dst = malloc(n);
    if (!src || !dst) {
        fprintf(stderr, "out of memory\n");
        exit(1);
    }
    memset(src, 1, n);
    memset(dst, 0, n);
    double t1[MAX_REPS], t2[MAX_REPS];
    for (int r = -1; r < reps; r++) {
        double t0 = now();
        memcpy(dst, src, n);
        double ta = now();
        par_memcpy(dst, src, n);
        double tb = now();
        if (r >= 0) {
            t1[r] = ta - t0;
            t2[r] = tb - ta;
        }
    }
    double g1 = 2.0 * (double)n / median(t1, reps) * 1e-9;
    double g2 = 2.0 * (double)n / median(t2, reps) * 1e-9;
    printf("| %-21s | %-10s | %d | %8.3f | %7.1f |   --   |          |         |        |\n",
           "memcpy", "", threads, (double)n / (g1 * 0.5e9) * 1e3, g1);
    printf("| %-21s | %-10s | %d | %8.3f | %7.1f |   --   |          |         |        |\n",
           "memcpy (OpenMP split)", "", threads, (double)n / (g2 * 0.5e9) * 1e3, g2);
    free(src);
    free(dst);
    return g1 > g2 ? g1 : g2;
}

/* ---- one op ------------------------------------------------------------------------------------ */

static void bench_op(const opdef *op, int64_t R, int64_t C, int reps, int threads, double ceil,
                     const char *size) {
    remat_tensor *in[3] = {NULL, NULL, NULL};
    for (int i = 0; i < op->n_in; i++) {
        if (op->kind[i] == FULL)
            CHECK(remat_rand_uniform(&in[i], 2, (int64_t[]){R, C}, -2, 2, REMAT_F32,
                                     REMAT_DEVICE_CPU));
        else CHECK(remat_rand_uniform(&in[i], 1, &C, -2, 2, REMAT_F32, REMAT_DEVICE_CPU));
    }
    double full = (double)(R * C) * sizeof(float);
    double tf[MAX_REPS], tb[MAX_REPS];
    /* forward without a graph */
    for (int r = -1; r < reps; r++) {
        remat_tensor *y;
        double t0 = now();
        CHECK(op->f(&y, in));
        double t1 = now();
        remat_release(y);
        if (r >= 0) tf[r] = t1 - t0;
    }
    /* backward on a retained graph */
    for (int i = 0; i < op->n_in; i++) CHECK(remat_set_requires_grad(in[i], true));
    remat_tensor *y, *g;
    CHECK(op->f(&y, in));
    CHECK(
        remat_rand_uniform(&g, remat_ndim(y), remat_shape(y), -1, 1, REMAT_F32, REMAT_DEVICE_CPU));
    if (remat_tensor_dtype(y) != REMAT_F32) { /* g in y's dtype (a bf16 y's) */
        remat_tensor *gy = NULL;
        CHECK(remat_to_dtype(&gy, g, remat_tensor_dtype(y)));
        remat_release(g);
        g = gy;
    }
    bool alias = false;
    for (int r = -1; r < reps; r++) {
        remat_tensor *grads[3] = {NULL, NULL, NULL};
        double t0 = now();
        CHECK(remat_grad(1, &y, &g, op->n_in, in, true, true, grads));
        double t1 = now();
        for (int i = 0; i < op->n_in; i++) {
            /* a gradient handed through without a copy moves no bytes */
            if (remat_shares_storage(grads[i], g)) alias = true;
            remat_release(grads[i]);
        }
        if (r >= 0) tb[r] = t1 - t0;
    }
    double mf = median(tf, reps), mb = median(tb, reps);
    double gf = op->fwd_bytes * full / mf * 1e-9, gb = op->bwd_bytes * full / mb * 1e-9;
    char bw[64];
    if (alias) /* the traffic left is the other gradients' */
        snprintf(bw, sizeof bw, "%8.3f | (g passed through) ", mb * 1e3);
    else snprintf(bw, sizeof bw, "%8.3f | %7.1f | %5.0f%%", mb * 1e3, gb, 100 * gb / ceil);
    printf("| %-21s | %-10s | %d | %8.3f | %7.1f | %5.0f%% | %s |\n", op->name, size, threads,
           mf * 1e3, gf, 100 * gf / ceil, bw);
    fflush(stdout);
    remat_release(y);
    remat_release(g);
    for (int i = 0; i < op->n_in; i++) remat_release(in[i]);
}

int main(int argc, char **argv) {
    int reps = argc > 1 ? atoi(argv[1]) : 9;
    if (reps < 1) reps = 1;
    if (reps > MAX_REPS) reps = MAX_REPS;
    int thr[2] = {1, 2}, nthr = 2;
    const char *env = getenv("BENCH_THREADS");
    if (env) {
        thr[0] = atoi(env);
        nthr = 1;
    }
    static const struct {
        const char *name;
        int64_t R, C;
    } sizes[] = {{"2048x384", 2048, 384}, {"2048x1024", 2048, 1024}, {"8192x2048", 8192, 2048}};
    remat_manual_seed(1);
    printf("f32, median of %d runs; GB/s = minimum traffic / time; %% = of the copy ceiling\n\n",
           reps);
    printf("| %-21s | %-10s | T | fwd ms   | fwd GB/s| %%ceil  | bwd ms   | bwd GB/s| %%ceil  |\n",
           "op", "size");
    printf("|-----------------------|------------|---|----------|---------|--------|----------|-"
           "--------|--------|\n");
    for (int ti = 0; ti < nthr; ti++) {
#ifdef _OPENMP
        omp_set_num_threads(thr[ti]);
#endif
        for (size_t si = 0; si < sizeof sizes / sizeof sizes[0]; si++) {
            double ceil =
                copy_ceiling((size_t)(sizes[si].R * sizes[si].C) * sizeof(float), reps, thr[ti]);
            for (int k = 0; k < N_OPS; k++)
                bench_op(&k_ops[k], sizes[si].R, sizes[si].C, reps, thr[ti], ceil, sizes[si].name);
        }
    }
    return 0;
}
