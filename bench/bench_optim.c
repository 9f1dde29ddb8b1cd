/* bench/bench_optim.c — the optimizer step alone (remat_optim_step) over a GPT's parameters,
 * issue 34's "optimizer update over flat buffers":
 *
 *   bench_optim [--layers 6] [--width 384] [--heads 6] [--vocab 256] [--context 256]
 *               [--optim adamw|sgd] [--clip 1.0] [--accum 1] [--threads T] [--reps 20]
 *
 * The parameters are the GPT of `remat bench` (L=6 D=384: 10.84M), in the program's two
 * groups (weight decay 0.1 on the matrices, 0 on biases, norms and positions); every rep
 * hands each parameter the same gradient (normal, std 1, drawn once) and times one
 * remat_optim_step: CPU time of the process (all threads) and wall time, median and
 * spread (min–max). It prints one JSON line with the load average before and after, and
 * a hash of every parameter's and state's bytes after the reps: two builds that update
 * alike print the same hash (before/after a change of the step's kernels). Under
 * callgrind use --reps 2 and compare instruction counts between builds. */
#include <omp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench_util.h"
#include "remat/remat.h"

static uint64_t fnv(uint64_t h, const void *p, size_t n) {
    const unsigned char *b = p;
    for (size_t i = 0; i < n; i++) h = (h ^ b[i]) * 1099511628211ull;
    return h;
}

static double load1(void) {
    double l = -1;
    FILE *f = fopen("/proc/loadavg", "r");
    if (f && fscanf(f, "%lf", &l) != 1) l = -1;
    if (f) fclose(f);
    return l;
}

int main(int argc, char **argv) {
    int layers = 6, heads = 6, threads = 0, reps = 20, accum = 1;
    int64_t width = 384, vocab = 256, context = 256;
    double clip = 1.0;
    const char *optim = "adamw";
    for (int i = 1; i + 1 < argc; i += 2) {
        const char *k = argv[i], *v = argv[i + 1];
        if (!strcmp(k, "--layers")) layers = atoi(v);
        else if (!strcmp(k, "--width")) width = atoll(v);
        else if (!strcmp(k, "--heads")) heads = atoi(v);
        else if (!strcmp(k, "--vocab")) vocab = atoll(v);
        else if (!strcmp(k, "--context")) context = atoll(v);
        else if (!strcmp(k, "--optim")) optim = v;
        else if (!strcmp(k, "--clip")) clip = atof(v);
        else if (!strcmp(k, "--accum")) accum = atoi(v);
        else if (!strcmp(k, "--threads")) threads = atoi(v);
        else if (!strcmp(k, "--reps")) reps = atoi(v);
        else {
            fprintf(stderr, "bench_optim: unknown flag %s\n", k);
            return 2;
        }
    }
    if (reps < 1 || accum < 1 || (strcmp(optim, "adamw") != 0 && strcmp(optim, "sgd") != 0)) {
        fprintf(stderr, "bench_optim: --reps >= 1, --accum >= 1, --optim adamw|sgd\n");
        return 2;
    }
    if (threads > 0) omp_set_num_threads(threads);
    remat_model_config c;
    CHECK(remat_model_config_default(&c, REMAT_MODEL_GPT2));
    c.n_layers = layers, c.n_heads = c.n_kv_heads = heads, c.hidden = width, c.vocab = vocab;
    c.max_positions = context;
    remat_manual_seed(1234);
    remat_model *m = NULL;
    CHECK(remat_model_create(&m, &c, REMAT_DEVICE_CPU));
    const int n = remat_model_n_params(m);
    remat_tensor **decay = malloc(sizeof *decay * (size_t)n),
                 **plain = malloc(sizeof *plain * (size_t)n);
    remat_tensor **grads = calloc((size_t)n, sizeof *grads);
    if (!decay || !plain || !grads) return 1;
    int nd = 0, np = 0;
    for (int i = 0; i < n; i++) {
        const char *name = NULL;
        remat_tensor *p = remat_model_param(m, i, &name);
        if (remat_ndim(p) == 2 && !strstr(name, "wpe")) decay[nd++] = p;
        else plain[np++] = p;
        CHECK(remat_rand_normal(&grads[i], remat_ndim(p), remat_shape(p), 0, 1, REMAT_F32,
                                REMAT_DEVICE_CPU));
    }
    remat_optim_options o;
    CHECK(remat_optim_options_init(&o, strcmp(optim, "sgd") != 0 ? REMAT_OPTIM_ADAMW
                                                                 : REMAT_OPTIM_SGD));
    o.lr = 1e-4;
    o.clip_norm = clip;
    o.accum_steps = accum;
    if (o.kind == REMAT_OPTIM_ADAMW) o.weight_decay = 0.1, o.beta2 = 0.95;
    else o.momentum = 0.9;
    remat_optimizer *opt = NULL;
    CHECK(remat_optim_create(&opt, &o, decay, nd));
    CHECK(remat_optim_add_group(opt, plain, np, 0.0));
    double *cpu = malloc(sizeof *cpu * (size_t)reps), *wall = malloc(sizeof *wall * (size_t)reps);
    if (!cpu || !wall) return 1;
    const double load_before = load1();
    for (int r = 0; r < reps; r++) {
        for (int i = 0; i < n; i++) CHECK(remat_set_grad(remat_model_param(m, i, NULL), grads[i]));
        const double c0 = cpu_now(), w0 = now();
        for (int a = 0; a < accum; a++) CHECK(remat_optim_step(opt, NULL));
        cpu[r] = cpu_now() - c0;
        wall[r] = now() - w0;
    }
    const double load_after = load1();
    uint64_t h = 1469598103934665603ull;
    for (int i = 0; i < n; i++) {
        remat_tensor *p = remat_optim_param(opt, i);
        h = fnv(h, remat_data(p), (size_t)remat_numel(p) * sizeof(float));
        for (int s = 0; s < 2; s++) {
            remat_tensor *st = remat_optim_state(opt, i, (remat_optim_slot)s);
            if (st) h = fnv(h, remat_data(st), (size_t)remat_numel(st) * sizeof(float));
        }
    }
    double cmin = cpu[0], cmax = cpu[0], wmin = wall[0], wmax = wall[0];
    for (int r = 1; r < reps; r++) {
        cmin = cpu[r] < cmin ? cpu[r] : cmin, cmax = cpu[r] > cmax ? cpu[r] : cmax;
        wmin = wall[r] < wmin ? wall[r] : wmin, wmax = wall[r] > wmax ? wall[r] : wmax;
    }
    printf("{\"optim\": \"%s\", \"params\": %d, \"numel\": %lld, \"threads\": %d, \"reps\": %d, "
           "\"clip\": %g, \"accum\": %d, \"step_cpu_ms\": %.3f, \"step_cpu_ms_range\": [%.3f, "
           "%.3f], \"step_wall_ms\": %.3f, \"step_wall_ms_range\": [%.3f, %.3f], "
           "\"last_grad_norm\": %.9g, \"load\": [%.2f, %.2f], \"hash\": \"%016llx\"}\n",
           optim, n, (long long)remat_model_numel(m), omp_get_max_threads(), reps, clip, accum,
           1e3 * median(cpu, reps), 1e3 * cmin, 1e3 * cmax, 1e3 * median(wall, reps), 1e3 * wmin,
           1e3 * wmax, remat_optim_last_grad_norm(opt), load_before, load_after,
           (unsigned long long)h);
    remat_optim_free(opt);
    for (int i = 0; i < n; i++) remat_release(grads[i]);
    remat_model_free(m);
    free(decay), free(plain), free(grads), free(cpu), free(wall);
    return 0;
}
