/* bench/bench_ce_bf16.c — cross_entropy of bf16 logits under autocast: the logits read
 * uncast by the cpu's bf16 kernels (what remat_cross_entropy does now) against the cast to
 * f32 first (what autocast did before: an f32 (N, V) copy kept for the backward, an f32
 * gradient and its cast back). One forward and backward per rep; reports the allocator's
 * bytes exactly (held after the forward, peak over forward + backward, above the logits)
 * and the median CPU time per rep of each mode, the two modes interleaved rep by rep.
 *
 *   bench_ce_bf16 [N V reps [mode]]   (default 2048 50257 7; mode fused or cast: only that
 *                                      one, for callgrind's instruction counts) */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench_util.h"
#include "remat/autocast.h"

#define MAX_REPS 64

typedef struct result {
    size_t held, peak;
    double cpu_s;
} result;

static result one(remat_tensor *x, remat_tensor *t, bool cast) {
    const remat_device cpu = REMAT_DEVICE_CPU;
    remat_alloc_stats s0, s1, s2;
    CHECK(remat_alloc_reset_peak(cpu));
    CHECK(remat_alloc_stats_get(cpu, &s0));
    const double c0 = cpu_now();
    remat_autocast_state prev;
    CHECK(remat_autocast_begin(&prev, REMAT_CPU, REMAT_BF16, true));
    remat_tensor *in = x, *x32 = NULL, *loss = NULL, *gx = NULL;
    if (cast) {
        CHECK(remat_to_dtype(&x32, x, REMAT_F32));
        in = x32;
    }
    CHECK(remat_cross_entropy(&loss, in, t, -100));
    remat_autocast_end(&prev);
    remat_release(x32);
    CHECK(remat_alloc_stats_get(cpu, &s1));
    CHECK(remat_grad(1, &loss, NULL, 1, &x, false, false, &gx));
    const double c1 = cpu_now();
    CHECK(remat_alloc_stats_get(cpu, &s2));
    remat_release(gx), remat_release(loss);
    return (result){s1.current_bytes - s0.current_bytes, s2.peak_bytes - s0.current_bytes, c1 - c0};
}

int main(int argc, char **argv) {
    const int64_t N = argc > 2 ? atoll(argv[1]) : 2048, V = argc > 2 ? atoll(argv[2]) : 50257;
    int reps = argc > 3 ? atoi(argv[3]) : 7;
    const char *only = argc > 4 ? argv[4] : NULL;
    if (reps < 1) reps = 1;
    if (reps > MAX_REPS) reps = MAX_REPS;
    remat_manual_seed(1);
    remat_tensor *x32 = NULL, *x = NULL, *t = NULL, *tf = NULL;
    CHECK(remat_rand_uniform(&x32, 2, (int64_t[]){N, V}, -4, 4, REMAT_F32, REMAT_DEVICE_CPU));
    CHECK(remat_to_dtype(&x, x32, REMAT_BF16));
    remat_release(x32);
    CHECK(remat_set_requires_grad(x, true));
    CHECK(remat_rand_uniform(&tf, 1, &N, 0, (double)V - 1, REMAT_F64, REMAT_DEVICE_CPU));
    CHECK(remat_to_dtype(&t, tf, REMAT_I64));
    remat_release(tf);
    double tm[2][MAX_REPS];
    result r[2];
    for (int rep = -1; rep < reps; rep++)
        for (int m = 0; m < 2; m++) {
            if (only && strcmp(only, m ? "cast" : "fused") != 0) continue;
            r[m] = one(x, t, m == 1);
            if (rep >= 0) tm[m][rep] = r[m].cpu_s;
        }
    printf("cross_entropy, bf16 logits (%lld, %lld) under autocast, forward + backward; bytes "
           "above the logits; CPU ms, median of %d (interleaved)\n",
           (long long)N, (long long)V, reps);
    printf("| mode  | held after forward | peak | CPU ms |\n|---|---|---|---|\n");
    for (int m = 0; m < 2; m++) {
        if (only && strcmp(only, m ? "cast" : "fused") != 0) continue;
        printf("| %-5s | %zu | %zu | %.2f |\n", m ? "cast" : "fused", r[m].held, r[m].peak,
               median(tm[m], reps) * 1e3);
    }
    remat_release(x), remat_release(t);
    return 0;
}
