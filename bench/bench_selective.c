/* bench/bench_selective.c — selective activation checkpointing on a stack of
 * pre-norm transformer blocks: allocator peak, bytes held after the
 * forward and step time (forward + backward) for
 *   none        no checkpoint
 *   full        every block checkpointed (non-reentrant), everything recomputed
 *   dots        checkpointed, matmul/linear outputs saved (dots_saveable)
 *   names       checkpointed, the tagged attention projections "qkv" and
 *               "attn_out" saved (save_only_these_names)
 *   names+mlp   names plus the MLP's first linear ("mlp_up")
 *   everything  checkpointed, every op saved (the cost of the machinery)
 *
 * usage: bench_selective [--batch B] [--seq T] [--dim D] [--heads H]
 *                        [--layers L] [--iters N] [--dropout P] [--csv]
 * Times are the median of N steps after one warm-up step, the modes
 * interleaved step by step. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "bench_util.h"
#include "gpt_block.h"
#include "remat/remat.h"

/* The shared transformer block (models/gpt_block.h): attention composed of
 * ops, tanh GELU, every residual named. */
typedef struct block {
    gpt_block_weights w;
    gpt_block_config cfg;
    remat_tensor *mask;
} block;

static remat_tensor *param(int nd, const int64_t *sh, double bound, bool grad) {
    remat_tensor *t;
    if (bound > 0)
        CHECK(remat_rand_uniform(&t, nd, sh, -bound, bound, REMAT_F32, REMAT_DEVICE_CPU));
    else CHECK(remat_full(&t, nd, sh, bound < 0 ? 0.0 : 1.0, REMAT_F32, REMAT_DEVICE_CPU));
    if (grad) CHECK(remat_set_requires_grad(t, true));
    return t;
}

static void block_init(block *b, int64_t D, int64_t H, int64_t T, double p) {
    gpt_weight_spec sp[GPT_BLOCK_N_WEIGHTS];
    gpt_block_weight_specs(D, sp);
    for (int i = 0; i < GPT_BLOCK_N_WEIGHTS; i++) /* bound 0: ones, -1: zeros */
        *gpt_block_weight_slot(&b->w, i) =
            param(sp[i].ndim, sp[i].shape,
                  sp[i].kind == GPT_W_GAIN    ? 0
                  : sp[i].kind == GPT_W_SHIFT ? -1
                                              : 1.0 / sqrt((double)sp[i].fan_in),
                  true);
    CHECK(gpt_causal_mask(&b->mask, T, REMAT_DEVICE_CPU));
    b->cfg = (gpt_block_config){
        .heads = (int)H, .mask = b->mask, .p_drop = p, .gelu = REMAT_GELU_TANH, .tags = true};
}

static remat_tensor **block_params(block *b) {
    static remat_tensor *p[GPT_BLOCK_N_WEIGHTS];
    gpt_block_weights_list(&b->w, p);
    return p;
}

static void block_free(block *b) {
    gpt_block_weights_release(&b->w);
    remat_release(b->mask);
}

static int block_fn(void *ud, remat_tensor *const *in, int n_in, remat_tensor **out, int n_out) {
    block *b = ud;
    (void)n_in, (void)n_out;
    return gpt_block_forward(&b->w, &b->cfg, in[0], &out[0]);
}

/* ---- the benchmark --------------------------------------------------------------------- */
typedef struct mode {
    const char *name;
    bool ckpt;
    remat_policy *policy; /* NULL: plain checkpoint */
} mode;

typedef struct result {
    double ms;
    size_t peak, held;
    remat_sac_stats st;
} result;

static double now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

/* One training step (forward + backward, grads dropped); returns ms. */
static double step(block *blocks, int L, remat_tensor *x, const mode *m, remat_sac_stats *st,
                   size_t *peak, size_t *held) {
    remat_sac_config cfg = {.policy = m->policy, .stats = st};
    remat_checkpoint_options o = {.use_reentrant = REMAT_OPT_FALSE};
    if (m->policy) {
        o.context_fn = remat_sac_context_fn;
        o.context_fn_data = &cfg;
    }
    size_t base = remat_cpu_current_bytes();
    CHECK(remat_alloc_reset_peak(REMAT_DEVICE_CPU));
    double t0 = now_ms();
    remat_tensor *h = remat_retain(x);
    for (int i = 0; i < L; i++) {
        remat_tensor *y = NULL;
        if (m->ckpt) CHECK(remat_checkpoint(block_fn, &blocks[i], 1, &h, 1, &y, &o));
        else CHECK(block_fn(&blocks[i], &h, 1, &y, 1));
        remat_release(h);
        h = y;
    }
    remat_tensor *l;
    CHECK(remat_mean(&l, h, 0, NULL, false));
    remat_release(h);
    *held = remat_cpu_current_bytes() - base;
    CHECK(remat_backward_scalar(l));
    double t1 = now_ms();
    remat_release(l);
    *peak = remat_cpu_peak_bytes() - base;
    for (int i = 0; i < L; i++) {
        remat_tensor **p = block_params(&blocks[i]);
        for (int k = 0; k < GPT_BLOCK_N_WEIGHTS; k++) remat_set_grad(p[k], NULL);
    }
    return t1 - t0;
}

int main(int argc, char **argv) {
    int64_t B = 4, T = 128, D = 256, H = 8;
    int L = 4, iters = 5;
    double p_drop = 0.1;
    bool csv = false;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        const char *v = i + 1 < argc ? argv[i + 1] : "0";
        if (!strcmp(a, "--batch")) B = atoll(v), i++;
        else if (!strcmp(a, "--seq")) T = atoll(v), i++;
        else if (!strcmp(a, "--dim")) D = atoll(v), i++;
        else if (!strcmp(a, "--heads")) H = atoll(v), i++;
        else if (!strcmp(a, "--layers")) L = atoi(v), i++;
        else if (!strcmp(a, "--iters")) iters = atoi(v), i++;
        else if (!strcmp(a, "--dropout")) p_drop = atof(v), i++;
        else if (!strcmp(a, "--csv")) csv = true;
        else {
            fprintf(stderr,
                    "usage: %s [--batch B] [--seq T] [--dim D] [--heads H] [--layers L] "
                    "[--iters N] [--dropout P] [--csv]\n",
                    argv[0]);
            return 2;
        }
    }
    if (iters < 1 || L < 1 || D % H) {
        fprintf(stderr, "bad sizes\n");
        return 2;
    }
    remat_manual_seed(1);
    block *blocks = calloc((size_t)L, sizeof *blocks);
    for (int i = 0; i < L; i++) block_init(&blocks[i], D, H, T, p_drop);
    int64_t sx[] = {B, T, D};
    remat_tensor *x;
    CHECK(remat_rand_normal(&x, 3, sx, 0, 1, REMAT_F32, REMAT_DEVICE_CPU));

    const char *names[] = {"qkv", "attn_out"}, *names2[] = {"qkv", "attn_out", "mlp_up"};
    mode modes[6] = {{"none", false, NULL}, {"full", true, NULL}};
    CHECK(remat_policy_dots_saveable(&modes[2].policy));
    modes[2].name = "dots", modes[2].ckpt = true;
    CHECK(remat_policy_save_only_these_names(&modes[3].policy, 2, names));
    modes[3].name = "names", modes[3].ckpt = true;
    CHECK(remat_policy_save_only_these_names(&modes[4].policy, 3, names2));
    modes[4].name = "names+mlp", modes[4].ckpt = true;
    CHECK(remat_policy_everything_saveable(&modes[5].policy));
    modes[5].name = "everything", modes[5].ckpt = true;

    printf("# transformer blocks: batch %lld, seq %lld, dim %lld, heads %lld, layers %d, "
           "dropout %g, gemm %s, %d steps (median)\n",
           (long long)B, (long long)T, (long long)D, (long long)H, L, p_drop, remat_gemm_backend(),
           iters);
    if (csv) printf("mode,step_ms,peak_bytes,held_after_forward_bytes,ops_cached,ops_recomputed\n");
    else
        printf("%-11s %10s %12s %14s %10s %12s\n", "mode", "step ms", "peak MiB", "held MiB",
               "ops cached", "recomputed");
    /* Modes are interleaved (one step of each per round) so that load from
     * other processes spreads evenly over them; the median of the rounds
     * is reported. */
    enum { NM = 6 };
    double *t = calloc((size_t)iters * NM, sizeof *t);
    result res[NM];
    memset(res, 0, sizeof res);
    for (int k = 0; k < NM; k++) { /* warm-up */
        size_t peak, held;
        remat_sac_stats st;
        memset(&st, 0, sizeof st);
        step(blocks, L, x, &modes[k], &st, &peak, &held);
    }
    for (int i = 0; i < iters; i++)
        for (int k = 0; k < NM; k++) {
            memset(&res[k].st, 0, sizeof res[k].st);
            t[k * iters + i] =
                step(blocks, L, x, &modes[k], &res[k].st, &res[k].peak, &res[k].held);
        }
    for (int k = 0; k < NM; k++) {
        result *r = &res[k];
        qsort(t + (ptrdiff_t)k * iters, (size_t)iters, sizeof *t, cmp_d);
        r->ms = t[k * iters + iters / 2];
        char cached[24] = "-", recomputed[24] = "-";
        if (modes[k].policy) {
            snprintf(cached, sizeof cached, "%lld", (long long)r->st.ops_cached);
            snprintf(recomputed, sizeof recomputed, "%lld", (long long)r->st.ops_recomputed);
        }
        if (csv)
            printf("%s,%.2f,%zu,%zu,%s,%s\n", modes[k].name, r->ms, r->peak, r->held, cached,
                   recomputed);
        else
            printf("%-11s %10.2f %12.2f %14.2f %10s %12s\n", modes[k].name, r->ms,
                   (double)r->peak / 1048576.0, (double)r->held / 1048576.0, cached, recomputed);
    }
    free(t);
    for (int k = 0; k < 6; k++) remat_policy_release(modes[k].policy);
    remat_release(x);
    for (int i = 0; i < L; i++) block_free(&blocks[i]);
    free(blocks);
    return remat_live_tensors() == 0 ? 0 : 1;
}
