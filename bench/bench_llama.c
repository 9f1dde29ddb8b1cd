/* bench/bench_llama.c — remat's side of the Llama fine-tune and sampling
 * benchmark against PyTorch + transformers (bench/llama_vs_torch.py runs
 * both, interleaved; bench/pytorch/llama_torch.py is the other side).
 *
 *   bench_llama --export DIR [model flags]
 *       writes the model (seeded init, HF's _init_weights) as a Hugging Face
 *       directory, so that both sides start from the same weights
 *   bench_llama --dir DIR --step none|block|budget[=F] [--batch B] [--reps N] [--threads T]
 *       fine-tune steps (forward, cross-entropy, backward, AdamW) on fixed
 *       token ids; prints one JSON line: every step's seconds (after a
 *       warm-up step), the first step's loss, the step's peak allocator bytes
 *       above the level before it (remat_alloc_stats), the C heap's (when
 *       build/libremat_heap_peak.so is preloaded), RSS growth, and for a
 *       budget the plan: which layers are checkpointed. budget=F: the budget
 *       is min + F x (store-all - min) of the planner's profile (F 0.5 by
 *       default)
 *   bench_llama --dir DIR --sample N [--prompt P] [--reps R] [--threads T]
 *       greedy generation of N tokens after a P-token prompt with the KV
 *       cache (remat_model_generate); prints the seconds of each run and the
 *       generated ids (JSON)
 *
 * Model flags (for --export): --layers 8 --hidden 512 --heads 8 --kv-heads 2
 * --intermediate 1376 --vocab 32000 --positions 1024. The token ids are a
 * fixed formula both sides share: ids[b][t] = ((b * (T + 1) + t) * 7919 + 13)
 * mod vocab for t in [0, T], inputs the first T, targets the last T. */
#define _GNU_SOURCE /* RTLD_DEFAULT */
#include <dlfcn.h>
#include <omp.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench_util.h"
#include "remat/remat.h"

typedef struct args {
    const char *dir, *export_dir, *step;
    int layers, heads, kv_heads, threads, reps, sample, prompt;
    int64_t hidden, intermediate, vocab, positions, batch, context;
} args;

static int64_t (*g_heap_reset)(void), (*g_heap_peak)(void);

static long rss_kib(void) {
    FILE *f = fopen("/proc/self/status", "r");
    char line[256];
    long v = -1;
    while (f && fgets(line, sizeof line, f))
        if (sscanf(line, "VmRSS: %ld", &v) == 1) break;
    if (f) fclose(f);
    return v;
}

static remat_tensor *token_ids(int64_t b, int64_t t, int64_t vocab, int64_t shift) {
    int64_t shape[2] = {b, t};
    int64_t *v = malloc((size_t)(b * t) * sizeof *v);
    for (int64_t i = 0; i < b; i++)
        for (int64_t j = 0; j < t; j++)
            v[i * t + j] = ((i * (t + 1) + j + shift) * 7919 + 13) % vocab;
    remat_tensor *x = NULL;
    CHECK(remat_from_data(&x, 2, shape, REMAT_I64, v));
    free(v);
    return x;
}

static void export_model(const args *a) {
    remat_model_config c;
    CHECK(remat_model_config_default(&c, REMAT_MODEL_LLAMA));
    c.n_layers = a->layers, c.n_heads = a->heads, c.n_kv_heads = a->kv_heads;
    c.hidden = a->hidden, c.intermediate = a->intermediate, c.vocab = a->vocab;
    c.max_positions = a->positions;
    remat_manual_seed(1234);
    remat_model *m = NULL;
    remat_params *p = NULL;
    CHECK(remat_model_create(&m, &c, REMAT_DEVICE_CPU));
    CHECK(remat_model_params(m, false, &p));
    remat_hf_extra x = {.dtype = REMAT_F32, .bos_token_id = 1, .n_eos = 0};
    CHECK(remat_hf_export(a->export_dir, &c, &x, p));
    fprintf(stderr, "bench_llama: wrote %s (%lld parameters)\n", a->export_dir,
            (long long)remat_model_numel(m));
    remat_params_free(p);
    remat_model_free(m);
}

static remat_model *load_model(const char *dir) {
    remat_model_config c;
    CHECK(remat_hf_config_read(&c, NULL, dir));
    remat_model *m = NULL;
    remat_params *p = NULL;
    CHECK(remat_model_create(&m, &c, REMAT_DEVICE_CPU));
    CHECK(remat_model_params(m, false, &p));
    CHECK(remat_hf_load_weights(p, dir, NULL));
    remat_params_free(p);
    return m;
}

/* The budget plan: profile the layers on the embedding of the batch, then
 * the fastest plan within min + frac x (store-all - min). */
static remat_plan *make_plan(remat_model *m, remat_tensor *ids, double frac) {
    const remat_stage *stages = NULL;
    int n = remat_model_stages(m, &stages);
    remat_tensor *x = NULL;
    CHECK(remat_model_embed(&x, m, ids));
    remat_profile *prof = NULL;
    remat_profile_options po = {.runs = 1};
    CHECK(remat_profile_stages(&prof, n, stages, x, &po));
    size_t lo = 0;
    CHECK(remat_plan_min_budget(prof, &lo));
    remat_plan *all = NULL, *plan = NULL;
    CHECK(remat_plan_create(&all, prof, (size_t)1 << 50));
    size_t budget = lo + (size_t)(frac * (double)(all->peak_store_all - lo));
    CHECK(remat_plan_create(&plan, prof, budget));
    remat_plan_free(all);
    remat_profile_free(prof);
    remat_release(x);
    return plan;
}

static void step(remat_model *m, remat_optimizer *o, remat_tensor *in, remat_tensor *tg,
                 const remat_strategy *s, double *loss) {
    remat_tensor *l = NULL;
    CHECK(remat_model_loss(&l, m, in, tg, s));
    if (loss) CHECK(remat_item(l, loss));
    CHECK(remat_backward_scalar(l));
    remat_release(l);
    bool updated = false;
    CHECK(remat_optim_step(o, &updated));
}

static void run_steps(const args *a) {
    remat_model *m = load_model(a->dir);
    remat_model_set_training(m, true);
    const remat_model_config *c = remat_model_get_config(m);
    remat_tensor *in = token_ids(a->batch, a->context, c->vocab, 0);
    remat_tensor *tg = token_ids(a->batch, a->context, c->vocab, 1);
    remat_strategy s = {0};
    remat_plan *plan = NULL;
    if (!strcmp(a->step, "block")) s.kind = REMAT_STRATEGY_BLOCK;
    else if (!strncmp(a->step, "budget", 6)) {
        double frac = a->step[6] == '=' ? atof(a->step + 7) : 0.5;
        plan = make_plan(m, in, frac);
        s = (remat_strategy){.kind = REMAT_STRATEGY_PLAN, .plan = plan};
    } else if (strcmp(a->step, "none") != 0) {
        fprintf(stderr, "bench_llama: --step none, block or budget[=F]\n");
        exit(2);
    }
    int n = remat_model_n_params(m);
    remat_tensor **ps = malloc((size_t)n * sizeof *ps);
    for (int i = 0; i < n; i++) ps[i] = remat_model_param(m, i, NULL);
    remat_optim_options oo;
    CHECK(remat_optim_options_init(&oo, REMAT_OPTIM_ADAMW));
    oo.lr = 1e-4;
    remat_optimizer *o = NULL;
    CHECK(remat_optim_create(&o, &oo, ps, n));
    double loss0 = 0;
    step(m, o, in, tg, &s, &loss0); /* warm-up: the optimizer state, oneDNN's kernels */
    double *t = malloc((size_t)a->reps * sizeof *t);
    size_t alloc_peak = 0, heap_peak = 0;
    long rss0 = rss_kib(), rss_peak = rss0;
    for (int r = 0; r < a->reps; r++) {
        remat_alloc_stats st0, st1;
        CHECK(remat_alloc_reset_peak(REMAT_DEVICE_CPU));
        CHECK(remat_alloc_stats_get(REMAT_DEVICE_CPU, &st0));
        int64_t h0 = g_heap_reset ? g_heap_reset() : 0;
        double t0 = now();
        step(m, o, in, tg, &s, NULL);
        t[r] = now() - t0;
        CHECK(remat_alloc_stats_get(REMAT_DEVICE_CPU, &st1));
        size_t ap = st1.peak_bytes - st0.current_bytes;
        if (ap > alloc_peak) alloc_peak = ap;
        if (g_heap_peak && g_heap_peak() - h0 > (int64_t)heap_peak)
            heap_peak = (size_t)(g_heap_peak() - h0);
        long rss = rss_kib();
        if (rss > rss_peak) rss_peak = rss;
    }
    printf("{\"side\": \"remat\", \"strategy\": \"%s\", \"threads\": %d, \"batch\": %lld, "
           "\"context\": %lld, \"loss0\": %.9g, \"step_s\": [",
           a->step, omp_get_max_threads(), (long long)a->batch, (long long)a->context, loss0);
    for (int r = 0; r < a->reps; r++) printf("%s%.6f", r ? ", " : "", t[r]);
    printf("], \"alloc_peak_bytes\": %zu, \"heap_peak_bytes\": ", alloc_peak);
    if (g_heap_peak) printf("%zu", heap_peak);
    else printf("null");
    printf(", \"rss_growth_kib\": %ld", rss_peak - rss0);
    printf(", \"checkpointed_layers\": [");
    for (int i = 0, k = 0; plan && i < plan->n_stages; i++)
        if (plan->stages[i].action != REMAT_STAGE_STORE) printf("%s%d", k++ ? ", " : "", i);
    if (!plan && s.kind == REMAT_STRATEGY_BLOCK)
        for (int i = 0; i < c->n_layers; i++) printf("%s%d", i ? ", " : "", i);
    printf("]}\n");
    if (plan) {
        fprintf(stderr, "bench_llama: budget plan (predicted peak %.1f MiB of %.1f store-all):\n",
                (double)plan->peak_bytes / 1048576.0, (double)plan->peak_store_all / 1048576.0);
        remat_plan_print(plan, stderr);
    }
    remat_optim_free(o);
    remat_plan_free(plan);
    free(ps);
    free(t);
    remat_release(in);
    remat_release(tg);
    remat_model_free(m);
}

static void run_sample(const args *a) {
    remat_model *m = load_model(a->dir);
    remat_model_set_training(m, false);
    const remat_model_config *c = remat_model_get_config(m);
    remat_tensor *prompt = token_ids(1, a->prompt, c->vocab, 0);
    double *t = malloc((size_t)(a->reps + 1) * sizeof *t);
    remat_tensor *out = NULL;
    for (int r = 0; r <= a->reps; r++) { /* run 0: warm-up */
        remat_release(out);
        out = NULL;
        double t0 = now();
        CHECK(remat_model_generate(&out, m, prompt, a->sample, 0.0, 0));
        t[r] = now() - t0;
    }
    printf("{\"side\": \"remat\", \"sample\": %d, \"prompt\": %d, \"threads\": %d, \"run_s\": [",
           a->sample, a->prompt, omp_get_max_threads());
    for (int r = 1; r <= a->reps; r++) printf("%s%.6f", r > 1 ? ", " : "", t[r]);
    printf("], \"ids\": [");
    for (int i = 0; i < a->sample; i++) {
        double v = 0;
        CHECK(remat_item_at(out, i, &v));
        printf("%s%lld", i ? ", " : "", (long long)v);
    }
    printf("]}\n");
    remat_release(out);
    remat_release(prompt);
    free(t);
    remat_model_free(m);
}

int main(int argc, char **argv) {
    args a = {.layers = 8,
              .heads = 8,
              .kv_heads = 2,
              .hidden = 512,
              .intermediate = 1376,
              .vocab = 32000,
              .positions = 1024,
              .batch = 1,
              .context = 512,
              .reps = 3,
              .threads = 0,
              .prompt = 16};
    for (int i = 1; i < argc; i += 2) { /* flag, value */
        const char *f = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        struct {
            const char *name;
            int *i;
            int64_t *l;
            const char **s;
        } flags[] = {
            {"--dir", NULL, NULL, &a.dir},         {"--export", NULL, NULL, &a.export_dir},
            {"--step", NULL, NULL, &a.step},       {"--layers", &a.layers, NULL, NULL},
            {"--heads", &a.heads, NULL, NULL},     {"--kv-heads", &a.kv_heads, NULL, NULL},
            {"--threads", &a.threads, NULL, NULL}, {"--reps", &a.reps, NULL, NULL},
            {"--sample", &a.sample, NULL, NULL},   {"--prompt", &a.prompt, NULL, NULL},
            {"--hidden", NULL, &a.hidden, NULL},   {"--intermediate", NULL, &a.intermediate, NULL},
            {"--vocab", NULL, &a.vocab, NULL},     {"--positions", NULL, &a.positions, NULL},
            {"--batch", NULL, &a.batch, NULL},     {"--context", NULL, &a.context, NULL},
        };
        size_t k = 0, nf = sizeof flags / sizeof *flags;
        while (k < nf && strcmp(f, flags[k].name) != 0) k++;
        if (k == nf || !v) {
            fprintf(stderr,
                    "bench_llama: unknown flag or missing value: %s (see the comment "
                    "at the top of bench/bench_llama.c)\n",
                    f);
            return 2;
        }
        if (flags[k].s) *flags[k].s = v;
        else if (flags[k].i) *flags[k].i = atoi(v);
        else *flags[k].l = atoll(v);
    }
    if (a.threads > 0) omp_set_num_threads(a.threads);
    g_heap_reset = (int64_t(*)(void))dlsym(RTLD_DEFAULT, "remat_heap_peak_reset");
    g_heap_peak = (int64_t(*)(void))dlsym(RTLD_DEFAULT, "remat_heap_peak_bytes");
    if (a.export_dir) export_model(&a);
    else if (a.dir && a.step) run_steps(&a);
    else if (a.dir && a.sample > 0) run_sample(&a);
    else {
        fprintf(stderr, "bench_llama: --export DIR, or --dir DIR with --step S or --sample N\n");
        return 2;
    }
    return 0;
}
