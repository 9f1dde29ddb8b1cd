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

#include "remat/remat.h"
#include "bench_util.h"

typedef struct block {
    int64_t dim, heads;
    double p_drop;
    remat_tensor *ln1_w, *ln1_b, *wqkv, *bqkv, *wo, *bo, *ln2_w, *ln2_b, *w1, *b1, *w2, *b2;
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
    b->dim = D;
    b->heads = H;
    b->p_drop = p;
    int64_t d[] = {D}, d3[] = {3 * D}, d4[] = {4 * D}, qkv[] = {3 * D, D}, o[] = {D, D},
            f1[] = {4 * D, D}, f2[] = {D, 4 * D};
    double bd = 1.0 / sqrt((double)D), bh = 1.0 / sqrt(4.0 * (double)D);
    b->ln1_w = param(1, d, 0, true);
    b->ln1_b = param(1, d, -1, true);
    b->wqkv = param(2, qkv, bd, true);
    b->bqkv = param(1, d3, bd, true);
    b->wo = param(2, o, bd, true);
    b->bo = param(1, d, bd, true);
    b->ln2_w = param(1, d, 0, true);
    b->ln2_b = param(1, d, -1, true);
    b->w1 = param(2, f1, bd, true);
    b->b1 = param(1, d4, bd, true);
    b->w2 = param(2, f2, bh, true);
    b->b2 = param(1, d, bh, true);
    int64_t ms[] = {T, T};
    CHECK(remat_zeros(&b->mask, 2, ms, REMAT_I64, REMAT_DEVICE_CPU));
    int64_t *m = remat_data(b->mask);
    for (int64_t i = 0; i < T; i++)
        for (int64_t j = 0; j < T; j++) m[i * T + j] = j > i;
}

static remat_tensor **block_params(block *b) {
    static remat_tensor *p[12];
    remat_tensor *ps[] = {b->ln1_w, b->ln1_b, b->wqkv, b->bqkv, b->wo, b->bo,
                          b->ln2_w, b->ln2_b, b->w1,   b->b1,   b->w2, b->b2};
    memcpy(p, ps, sizeof ps);
    return p;
}

static void block_free(block *b) {
    remat_tensor **p = block_params(b);
    for (int i = 0; i < 12; i++) remat_release(p[i]);
    remat_release(b->mask);
}

#define TRY(expr)                                                                           \
    do {                                                                                    \
        if (!rc) rc = (expr);                                                               \
    } while (0)

static int heads_view(int rc, remat_tensor **out, remat_tensor *x, int64_t B, int64_t T,
                      int64_t H, int64_t hd) {
    remat_tensor *r = NULL;
    int64_t sh[] = {B, T, H, hd};
    TRY(remat_reshape(&r, x, 4, sh));
    TRY(remat_transpose(out, r, 1, 2));
    return rc;
}

/* x (B, T, D) → pre-norm attention + MLP, with the projections tagged */
static int block_fn(void *ud, remat_tensor *const *in, int n_in, remat_tensor **out, int n_out) {
    block *b = ud;
    (void)n_in, (void)n_out;
    remat_tensor *x = in[0];
    int64_t B = remat_size(x, 0), T = remat_size(x, 1), D = b->dim, H = b->heads, hd = D / H;
    remat_scope *s;
    int rc = remat_scope_begin(&s);
    if (rc) return rc;
    remat_tensor *h = NULL, *qkv0 = NULL, *qkv = NULL, *parts[3] = {NULL, NULL, NULL}, *q = NULL,
                 *k = NULL, *v = NULL, *kt = NULL, *att = NULL, *att2 = NULL, *att3 = NULL,
                 *p = NULL, *pd = NULL, *y = NULL, *yt = NULL, *yr = NULL, *proj0 = NULL,
                 *proj = NULL, *pdrop = NULL, *x1 = NULL, *h2 = NULL, *f10 = NULL, *f1 = NULL,
                 *f2 = NULL, *f3 = NULL, *f4 = NULL, *r = NULL;
    int n_parts = 0;
    TRY(remat_layer_norm(&h, x, 1, b->ln1_w, b->ln1_b, 1e-5));
    TRY(remat_linear(&qkv0, h, b->wqkv, b->bqkv));
    TRY(remat_tag(&qkv, qkv0, "qkv"));
    TRY(remat_split(parts, 3, &n_parts, qkv, D, -1));
    rc = heads_view(rc, &q, parts[0], B, T, H, hd);
    rc = heads_view(rc, &k, parts[1], B, T, H, hd);
    rc = heads_view(rc, &v, parts[2], B, T, H, hd);
    TRY(remat_transpose(&kt, k, -2, -1));
    TRY(remat_matmul(&att, q, kt));
    TRY(remat_mul_scalar(&att2, att, 1.0 / sqrt((double)hd)));
    TRY(remat_masked_fill(&att3, att2, b->mask, -1e9));
    TRY(remat_softmax(&p, att3, -1));
    pd = p;
    if (b->p_drop > 0) TRY(remat_dropout(&pd, p, b->p_drop, true));
    TRY(remat_matmul(&y, pd, v));
    TRY(remat_transpose(&yt, y, 1, 2));
    int64_t sh3[] = {B, T, D};
    TRY(remat_reshape(&yr, yt, 3, sh3));
    TRY(remat_linear(&proj0, yr, b->wo, b->bo));
    TRY(remat_tag(&proj, proj0, "attn_out"));
    pdrop = proj;
    if (b->p_drop > 0) TRY(remat_dropout(&pdrop, proj, b->p_drop, true));
    TRY(remat_add(&x1, x, pdrop));
    TRY(remat_layer_norm(&h2, x1, 1, b->ln2_w, b->ln2_b, 1e-5));
    TRY(remat_linear(&f10, h2, b->w1, b->b1));
    TRY(remat_tag(&f1, f10, "mlp_up"));
    TRY(remat_gelu(&f2, f1, REMAT_GELU_TANH));
    TRY(remat_linear(&f3, f2, b->w2, b->b2));
    f4 = f3;
    if (b->p_drop > 0) TRY(remat_dropout(&f4, f3, b->p_drop, true));
    TRY(remat_add(&r, x1, f4));
    if (!rc) out[0] = remat_scope_keep(r);
    remat_scope_end(s);
    return rc;
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
    return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
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
        for (int k = 0; k < 12; k++) remat_set_grad(p[k], NULL);
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
            fprintf(stderr, "usage: %s [--batch B] [--seq T] [--dim D] [--heads H] [--layers L] "
                    "[--iters N] [--dropout P] [--csv]\n", argv[0]);
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
           "dropout %g, gemm %s, %d steps (median)\n", (long long)B, (long long)T, (long long)D,
           (long long)H, L, p_drop, remat_gemm_backend(), iters);
    if (csv) printf("mode,step_ms,peak_bytes,held_after_forward_bytes,ops_cached,ops_recomputed\n");
    else
        printf("%-11s %10s %12s %14s %10s %12s\n", "mode", "step ms", "peak MiB", "held MiB",
               "ops cached", "recomputed");
    /* Modes are interleaved (one step of each per round) so that load from
     * other processes spreads evenly over them; the median of the rounds
     * is reported. */
    enum { NM = 6 };
    double *t = calloc((size_t)(iters * NM), sizeof *t);
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
            t[k * iters + i] = step(blocks, L, x, &modes[k], &res[k].st, &res[k].peak,
                                    &res[k].held);
        }
    for (int k = 0; k < NM; k++) {
        result *r = &res[k];
        qsort(t + k * iters, (size_t)iters, sizeof *t, cmp_d);
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
                   r->peak / 1048576.0, r->held / 1048576.0, cached, recomputed);
    }
    free(t);
    for (int k = 0; k < 6; k++) remat_policy_release(modes[k].policy);
    remat_release(x);
    for (int i = 0; i < L; i++) block_free(&blocks[i]);
    free(blocks);
    return remat_live_tensors() == 0 ? 0 : 1;
}
