/* bench/bench_checkpoint.c — what activation checkpointing costs and saves
 * on a deep MLP: L blocks of  y = layer_norm(gelu(linear(x)))  (W → W,
 * layer norm with weight and bias), batch B, MSE loss against a fixed
 * random target, one plain SGD step.
 *
 * Strategies (one training step each):
 *   none       every activation kept for backward
 *   block-nr   remat_checkpoint around every block, non-reentrant
 *   block-r    remat_checkpoint around every block, reentrant
 *   seq-nr     remat_checkpoint_sequential, segments = round(sqrt(L)), non-reentrant
 *   seq-r      the same, reentrant
 * Checkpoint options are the defaults otherwise (RNG state preserved,
 * determinism check "default", early stop on).
 *
 * Per strategy and step it measures
 *   - the step time (forward + backward + SGD; median and minimum over
 *     --reps), split into forward, backward and SGD, plus the recomputation
 *     inside the backward and per-op times (linear / gelu / layer_norm) of
 *     the forward and of the recomputation (timed inside the block
 *     function). Every time is taken on two clocks: wall (CLOCK_MONOTONIC)
 *     and process CPU time (CLOCK_PROCESS_CPUTIME_ID). With --threads 1 the
 *     CPU clock is immune to preemption by other processes and is the one
 *     the tables use (--clock overrides); with more threads it also counts
 *     OpenMP threads spinning, so the tables use wall time;
 *   - the allocator peak of the step (remat_alloc_reset_peak before,
 *     remat_cpu_peak_bytes after: exact bytes of live tensor storage);
 *   - the activation peak: max over every allocation of the step of
 *       current_bytes - base - grads_live
 *     where base = remat_cpu_current_bytes() at the start of the step
 *     (= parameters + input + target, checked) and grads_live = bytes of
 *     the leaf gradients (parameters and input) stored so far in the step
 *     (counted by a hook on each leaf, which runs when its gradient reaches
 *     AccumulateGrad). That is "peak minus parameters, gradients and
 *     input", with the gradients that exist at that moment; the simpler
 *     bound peak - base - all gradients is in the CSV too;
 *   - the RSS that training adds, measured in a fresh child process per
 *     strategy (forked before this process allocates anything, glibc's
 *     default malloc policy): VmHWM after --rss-steps steps (default 2)
 *     minus VmRSS once the model, input and target exist. Also, in the
 *     CSV/table as "in-process": VmHWM - VmRSS over a warm-up step of this
 *     process started after malloc_trim(0), with VmHWM reset by writing
 *     "5" to /proc/self/clear_refs (getrusage's process-wide ru_maxrss,
 *     marked, when the reset is not allowed); that one inherits the heap
 *     left by the strategies run before it. How the timed steps get their
 *     memory (--heap):
 *       steady  (default) after the warm-up, glibc keeps freed memory
 *               (mallopt: no trimming, tensors up to 32 MiB from the
 *               heap) and one more untimed rep touches it, so no timed
 *               step pays page faults, as in a long training loop with a
 *               caching allocator;
 *       trim    malloc_trim(0) before every step: every step pays
 *               first-touch page faults for its whole footprint;
 *       default glibc's own policy (big tensors mmap'ed or trimmed
 *               partly; what a plain remat program gets): in between;
 *   - whether the gradients of every parameter and of the input, and the
 *     loss, are bitwise equal to those of "none" in the same repetition
 *     (every strategy of a repetition starts from the same parameters:
 *     they are restored from a snapshot before each strategy's step).
 *
 * Repetitions are interleaved (rep 1 of every strategy, then rep 2, ...) so
 * that load from other processes hits every strategy alike. The warm-up
 * rep is not timed; its "none" step also times the backward of each op
 * with tensor hooks for the per-op profile.
 *
 *   bench_checkpoint [--layers L] [--width W] [--batch B] [--reps N]
 *                    [--threads T] [--segments S] [--warmup N]
 *                    [--gelu erf|tanh] [--clock wall|cpu]
 *                    [--heap steady|trim|default] [--rss-steps N]
 *                    [--csv]
 * Defaults: L=32, W=1024, B=2048, 3 reps, 1 warm-up, gelu erf (PyTorch's
 * nn.GELU default), OpenMP's default thread count. One un-checkpointed
 * step at the defaults is ~0.4 TFLOP (6·L·B·W²); see
 * docs/bench-checkpoint.md for run times and results. Exit status 1 if
 * some gradients differ (or tensors leak). --csv prints one CSV row per
 * strategy (both clocks) instead of the tables; progress goes to stderr. */
#include <limits.h>
#include <malloc.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "bench_util.h"
#include "cli/util.h"
#include "remat/remat.h"

#ifdef _OPENMP
#include <omp.h>
#endif

/* Every time is taken on both clocks: [CLK_WALL] and [CLK_CPU]. */
enum { CLK_WALL, CLK_CPU, N_CLK };
static const char *k_clk_name[N_CLK] = {"wall", "cpu"};
typedef struct stamp {
    double t[N_CLK];
} stamp;

static stamp stamp_now(void) {
    stamp s;
    s.t[CLK_WALL] = now();
    s.t[CLK_CPU] = cpu_now();
    return s;
}

static const double MiB = 1024.0 * 1024.0;

/* ---- model ------------------------------------------------------------------ */

typedef struct block {
    int index;
    remat_tensor *w, *b;       /* linear: w (W, W), b (W) */
    remat_tensor *ln_w, *ln_b; /* layer norm over the last dim: (W) each */
} block;

typedef struct model {
    int n_layers, width;
    block *blocks;
    int n_params;
    remat_tensor **params; /* borrowed views of the block fields, in order */
} model;

static remat_tensor *param_uniform(int64_t n0, int64_t n1, double bound) {
    remat_tensor *t;
    int64_t shape[2] = {n0, n1};
    CHECK(remat_rand_uniform(&t, n1 ? 2 : 1, shape, -bound, bound, REMAT_F32, REMAT_DEVICE_CPU));
    CHECK(remat_set_requires_grad(t, true));
    return t;
}

static remat_tensor *param_full(int64_t n, double value) {
    remat_tensor *t;
    CHECK(remat_full(&t, 1, &n, value, REMAT_F32, REMAT_DEVICE_CPU));
    CHECK(remat_set_requires_grad(t, true));
    return t;
}

static void model_init(model *m, int n_layers, int width, uint64_t seed) {
    remat_manual_seed(seed);
    m->n_layers = n_layers;
    m->width = width;
    m->blocks = calloc((size_t)n_layers, sizeof *m->blocks);
    m->n_params = 4 * n_layers;
    m->params = calloc((size_t)m->n_params, sizeof *m->params);
    if (!m->blocks || !m->params) exit(1);
    double bound = 1.0 / sqrt((double)width); /* PyTorch's nn.Linear init range */
    for (int i = 0; i < n_layers; i++) {
        block *b = &m->blocks[i];
        b->index = i;
        b->w = param_uniform(width, width, bound);
        b->b = param_uniform(width, 0, bound);
        b->ln_w = param_full(width, 1.0);
        b->ln_b = param_full(width, 0.0);
        m->params[4 * i + 0] = b->w;
        m->params[4 * i + 1] = b->b;
        m->params[4 * i + 2] = b->ln_w;
        m->params[4 * i + 3] = b->ln_b;
    }
}

static void model_free(model *m) {
    for (int i = 0; i < m->n_params; i++) remat_release(m->params[i]);
    free(m->params);
    free(m->blocks);
}

/* ---- timing of the block function ----------------------------------------------
 * The block function times its three ops and files them under "forward"
 * or "recompute" (it runs inside backward only when a checkpoint
 * recomputes it). Single-threaded: checkpoints and their backward run on
 * the calling thread. */
enum { PH_FWD, PH_REC, N_PH };
enum { OP_LINEAR, OP_GELU, OP_LN, N_OP };
static const char *k_op_name[N_OP] = {"linear", "gelu", "layer_norm"};
static double g_optime[N_CLK][N_PH][N_OP];
static remat_gelu_approx g_gelu = REMAT_GELU_ERF;

/* Backward profile (warm-up step of "none"): arrival time of the gradient
 * at each block's layer-norm output, gelu output and linear output, i.e.
 * the moment the backward of layer_norm, gelu and linear starts. */
static stamp *g_arrive; /* (L, 3) */
static bool g_profile_hooks;

static int arrive_hook(void *ud, remat_tensor *grad, remat_tensor **replacement) {
    (void)grad;
    (void)replacement;
    *(stamp *)ud = stamp_now();
    return REMAT_OK;
}

/* One block: x (B, W) → layer_norm(gelu(x·wᵀ + b)) (B, W). A
 * remat_checkpoint_fn, so it can be checkpointed as is. */
static int block_fn(void *user_data, remat_tensor *const *in, int n_in, remat_tensor **out,
                    int n_out) {
    block *bk = user_data;
    (void)n_in;
    (void)n_out;
    int ph = remat_in_backward() ? PH_REC : PH_FWD;
    remat_tensor *h = NULL, *g = NULL;
    stamp t0 = stamp_now();
    int rc = remat_linear(&h, in[0], bk->w, bk->b);
    stamp t1 = stamp_now();
    if (!rc) rc = remat_gelu(&g, h, g_gelu);
    stamp t2 = stamp_now();
    if (!rc) rc = remat_layer_norm(&out[0], g, 1, bk->ln_w, bk->ln_b, 1e-5);
    stamp t3 = stamp_now();
    for (int k = 0; k < N_CLK; k++) {
        g_optime[k][ph][OP_LINEAR] += t1.t[k] - t0.t[k];
        g_optime[k][ph][OP_GELU] += t2.t[k] - t1.t[k];
        g_optime[k][ph][OP_LN] += t3.t[k] - t2.t[k];
    }
    if (!rc && g_profile_hooks && ph == PH_FWD) {
        stamp *a = g_arrive + (ptrdiff_t)3 * bk->index;
        rc = remat_register_hook(out[0], arrive_hook, &a[0]);
        if (!rc) rc = remat_register_hook(g, arrive_hook, &a[1]);
        if (!rc) rc = remat_register_hook(h, arrive_hook, &a[2]);
    }
    remat_release(h);
    remat_release(g);
    if (rc) remat_release_p(&out[0]);
    return rc;
}

/* ---- memory accounting -------------------------------------------------------- */

static bool g_tracking;
static int64_t g_base, g_grads_live, g_act_max;

/* Leaf hook: from now on this leaf's gradient counts as a gradient, not as
 * an activation. user_data points to the leaf's byte count. */
static int leaf_grad_hook(void *ud, remat_tensor *grad, remat_tensor **replacement) {
    (void)grad;
    (void)replacement;
    g_grads_live += *(const int64_t *)ud;
    return REMAT_OK;
}

static void alloc_observer(void *ud, remat_device device, int64_t delta, size_t current) {
    (void)ud;
    (void)device;
    if (!g_tracking || delta <= 0) return;
    int64_t act = (int64_t)current - g_base - g_grads_live;
    if (act > g_act_max) g_act_max = act;
}

static long maxrss_kb(void) {
    struct rusage ru;
    return getrusage(RUSAGE_SELF, &ru) == 0 ? ru.ru_maxrss : -1;
}

/* ---- strategies ------------------------------------------------------------------ */

enum { S_NONE, S_BLOCK_NR, S_BLOCK_R, S_SEQ_NR, S_SEQ_R, N_S };
static const char *k_s_name[N_S] = {"none", "block-nr", "block-r", "seq-nr", "seq-r"};
static const char *k_s_desc[N_S] = {
    "no checkpointing",
    "remat_checkpoint per block, non-reentrant",
    "remat_checkpoint per block, reentrant",
    "checkpoint_sequential, non-reentrant",
    "checkpoint_sequential, reentrant",
};

typedef struct sample {
    double fwd[N_CLK], bwd[N_CLK], sgd[N_CLK], step[N_CLK], rec[N_CLK];
    double optime[N_CLK][N_PH][N_OP];
    size_t peak;        /* allocator peak (absolute) */
    int64_t act;        /* activation peak (tracked) */
    int64_t act_simple; /* peak - base - all gradients */
    long rss_growth_kb;
    bool grads_equal, loss_equal;
    double loss;
} sample;

enum { HEAP_STEADY, HEAP_TRIM, HEAP_DEFAULT };
static const char *k_heap_name[] = {"steady", "trim", "default"};

typedef struct config {
    int layers, width, batch, reps, threads, segments, warmup, clock;
    int heap;      /* HEAP_* */
    int rss_steps; /* steps of each fresh-process RSS measurement; 0: none */
    bool csv;
} config;

static remat_tensor *forward(const config *c, model *m, remat_stage *stages, int s, remat_tensor *x,
                             remat_tensor *target) {
    remat_checkpoint_options o = {0};
    o.use_reentrant = (s == S_BLOCK_R || s == S_SEQ_R) ? REMAT_OPT_TRUE : REMAT_OPT_FALSE;
    remat_tensor *h = NULL;
    if (s == S_SEQ_NR || s == S_SEQ_R) {
        CHECK(remat_checkpoint_sequential(&h, m->n_layers, stages, c->segments, x, &o));
    } else {
        h = remat_retain(x);
        for (int i = 0; i < m->n_layers; i++) {
            remat_tensor *y;
            if (s == S_NONE) CHECK(block_fn(&m->blocks[i], &h, 1, &y, 1));
            else CHECK(remat_checkpoint(block_fn, &m->blocks[i], 1, &h, 1, &y, &o));
            remat_release(h); /* the graph keeps whatever backward needs */
            h = y;
        }
    }
    remat_tensor *loss;
    CHECK(remat_mse_loss(&loss, h, target));
    remat_release(h);
    return loss;
}

/* ---- RSS of a fresh process ---------------------------------------------------
 * The RSS a step adds depends on the heap's history: measured inside this
 * process, a strategy that runs after "none" inherits none's big, partly
 * fragmented heap, and glibc places its tensors all over it (see
 * docs/bench-checkpoint.md). So each strategy's RSS is measured in a child
 * forked before the parent allocates anything: it builds the same model,
 * trains rss_steps steps with glibc's default malloc policy, and reports
 * VmHWM at the end minus VmRSS after building the model (parameters,
 * input and target touched): the memory training adds, as `ps` sees it. */
typedef struct rss_result {
    long init_kb, hwm_kb;
    size_t alloc_peak;
    int ok;
} rss_result;

static void child_step(const config *c, model *m, remat_stage *stages, int s, remat_tensor *x,
                       remat_tensor *target) {
    remat_tensor *loss = forward(c, m, stages, s, x, target);
    CHECK(remat_backward_scalar(loss));
    remat_release(loss);
    bool prev = remat_no_grad_begin();
    for (int i = 0; i < m->n_params; i++) {
        CHECK(remat_add_(m->params[i], remat_tensor_grad(m->params[i]), -0.01));
        CHECK(remat_set_grad(m->params[i], NULL));
    }
    remat_grad_mode_restore(prev);
    CHECK(remat_set_grad(x, NULL));
}

static rss_result measure_rss_fresh(const config *c, int s) {
    rss_result res = {0};
    int fd[2];
    if (pipe(fd)) return res;
    fflush(NULL);
    pid_t pid = fork();
    if (pid < 0) {
        close(fd[0]);
        close(fd[1]);
        return res;
    }
    if (pid == 0) {
        close(fd[0]);
        model m;
        model_init(&m, c->layers, c->width, 42);
        remat_stage *stages = calloc((size_t)c->layers, sizeof *stages);
        if (!stages) _exit(1);
        for (int i = 0; i < c->layers; i++) stages[i] = (remat_stage){block_fn, &m.blocks[i]};
        remat_tensor *x, *target;
        int64_t xs[2] = {c->batch, c->width};
        CHECK(remat_rand_normal(&x, 2, xs, 0, 1, REMAT_F32, REMAT_DEVICE_CPU));
        CHECK(remat_rand_normal(&target, 2, xs, 0, 1, REMAT_F32, REMAT_DEVICE_CPU));
        CHECK(remat_set_requires_grad(x, true));
        rss_result r = {.ok = 1};
        r.init_kb = util_proc_status_kb("VmRSS");
        CHECK(remat_alloc_reset_peak(REMAT_DEVICE_CPU));
        for (int k = 0; k < c->rss_steps; k++) child_step(c, &m, stages, s, x, target);
        r.hwm_kb = util_proc_status_kb("VmHWM");
        r.alloc_peak = remat_cpu_peak_bytes();
        ssize_t n = write(fd[1], &r, sizeof r);
        _exit(n == (ssize_t)sizeof r ? 0 : 1);
    }
    close(fd[1]);
    ssize_t n = read(fd[0], &res, sizeof res);
    close(fd[0]);
    int status = 0;
    waitpid(pid, &status, 0);
    if (n != (ssize_t)sizeof res || !WIFEXITED(status) || WEXITSTATUS(status) != 0) res.ok = 0;
    return res;
}

/* Leaves whose gradients are compared: every parameter, then the input. */
typedef struct leaves {
    int n;
    remat_tensor **t;
    int64_t *bytes;
    int64_t total;
} leaves;

/* ---- the command line ------------------------------------------------------------ */

/* Fills c from argv; 0, or 2 after printing the usage or the error. */
static int parse_args(int argc, char **argv, config *c) {
    *c = (config){.layers = 32,
                  .width = 1024,
                  .batch = 2048,
                  .reps = 3,
                  .threads = 0,
                  .segments = 0,
                  .warmup = 1,
                  .clock = -1,
                  .csv = false,
                  .heap = HEAP_STEADY,
                  .rss_steps = 2};
    struct {
        const char *flag;
        int *field;
    } ints[] = {{"--layers", &c->layers},   {"--width", &c->width},
                {"--batch", &c->batch},     {"--reps", &c->reps},
                {"--threads", &c->threads}, {"--segments", &c->segments},
                {"--warmup", &c->warmup},   {"--rss-steps", &c->rss_steps}};
    const int n_ints = (int)(sizeof ints / sizeof ints[0]);
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        int j = 0;
        while (j < n_ints && !(v && !strcmp(a, ints[j].flag))) j++;
        bool ok = true;
        if (j < n_ints) *ints[j].field = atoi(v);
        else if (!strcmp(a, "--gelu") && v && !strcmp(v, "erf")) g_gelu = REMAT_GELU_ERF;
        else if (!strcmp(a, "--gelu") && v && !strcmp(v, "tanh")) g_gelu = REMAT_GELU_TANH;
        else if (!strcmp(a, "--clock") && v && !strcmp(v, "wall")) c->clock = CLK_WALL;
        else if (!strcmp(a, "--clock") && v && !strcmp(v, "cpu")) c->clock = CLK_CPU;
        else if (!strcmp(a, "--heap") && v && !strcmp(v, "steady")) c->heap = HEAP_STEADY;
        else if (!strcmp(a, "--heap") && v && !strcmp(v, "trim")) c->heap = HEAP_TRIM;
        else if (!strcmp(a, "--heap") && v && !strcmp(v, "default")) c->heap = HEAP_DEFAULT;
        else if (!strcmp(a, "--csv")) {
            c->csv = true;
            continue;
        } else ok = false;
        if (!ok) {
            fprintf(stderr,
                    "usage: %s [--layers L] [--width W] [--batch B] [--reps N] [--threads T]\n"
                    "          [--segments S] [--warmup N] [--gelu erf|tanh] [--clock wall|cpu]\n"
                    "          [--heap steady|trim|default] [--rss-steps N] [--csv]\n"
                    "defaults: L=32 W=1024 B=2048 N=3 T=OpenMP default S=round(sqrt(L)) "
                    "warmup=1,\n"
                    "          clock cpu with 1 thread, wall otherwise\n",
                    argv[0]);
            return 2;
        }
        i++; /* every flag but --csv takes a value */
    }
    if (c->layers < 1 || c->width < 1 || c->batch < 1 || c->reps < 1 || c->threads < 0 ||
        c->segments < 0 || c->warmup < 1 || c->rss_steps < 0) {
        fprintf(stderr, "bad arguments (all sizes >= 1, --warmup >= 1, --rss-steps >= 0)\n");
        return 2;
    }
    if (c->segments == 0) c->segments = (int)lround(sqrt((double)c->layers));
#ifdef _OPENMP
    if (c->threads > 0) omp_set_num_threads(c->threads);
    c->threads = omp_get_max_threads();
#else
    c->threads = 1;
#endif
    if (c->clock < 0) c->clock = c->threads == 1 ? CLK_CPU : CLK_WALL;
    return 0;
}

/* ---- the run: model, data, reference gradients ---------------------------------- */

typedef struct bench {
    const config *c;
    model m;
    remat_stage *stages;
    remat_tensor *x, *target;
    leaves lv;
    int64_t param_bytes, input_bytes;
    /* parameters at the start of a repetition; gradients (and loss) of
     * "none" in the current repetition */
    float **snap, **ref;
    double ref_loss;
    bool hwm_ok, base_warned;
    long warm_rss[N_S]; /* max RSS growth over the warm-up steps, -1: none */
    /* backward of none by op (warm-up step, tensor hooks) */
    double bwd_profile[N_CLK][N_OP], bwd_loss[N_CLK];
    bool all_equal[N_S];
} bench;

/* The model, the stages, input and target (requiring grad), the leaves'
 * hooks and the snapshot buffers; 1 when out of memory. */
static int bench_init(bench *b, const config *c) {
    *b = (bench){.c = c};
    const int L = c->layers;
    model_init(&b->m, L, c->width, 42);
    b->stages = calloc((size_t)L, sizeof *b->stages);
    g_arrive = calloc((size_t)L * 3, sizeof *g_arrive);
    if (!b->stages || !g_arrive) return 1;
    for (int i = 0; i < L; i++) b->stages[i] = (remat_stage){block_fn, &b->m.blocks[i]};

    int64_t xs[2] = {c->batch, c->width};
    CHECK(remat_rand_normal(&b->x, 2, xs, 0, 1, REMAT_F32, REMAT_DEVICE_CPU));
    CHECK(remat_rand_normal(&b->target, 2, xs, 0, 1, REMAT_F32, REMAT_DEVICE_CPU));
    /* The reentrant variant produces gradients only if an input of the
     * checkpoint requires grad (PyTorch's rule); the first block's input is the
     * data, so it requires grad in every strategy (same work for all). */
    CHECK(remat_set_requires_grad(b->x, true));

    leaves *lv = &b->lv;
    const int np = b->m.n_params;
    lv->n = np + 1;
    lv->t = calloc((size_t)lv->n, sizeof *lv->t);
    lv->bytes = calloc((size_t)lv->n, sizeof *lv->bytes);
    if (!lv->t || !lv->bytes) return 1;
    for (int i = 0; i < np; i++) lv->t[i] = b->m.params[i];
    lv->t[np] = b->x;
    for (int i = 0; i < lv->n; i++) {
        lv->bytes[i] = (int64_t)remat_storage_nbytes(lv->t[i]);
        lv->total += lv->bytes[i];
        CHECK(remat_register_hook(lv->t[i], leaf_grad_hook, &lv->bytes[i]));
    }
    b->param_bytes = lv->total - lv->bytes[np];
    b->input_bytes = (int64_t)(remat_storage_nbytes(b->x) + remat_storage_nbytes(b->target));

    b->snap = calloc((size_t)np, sizeof *b->snap);
    b->ref = calloc((size_t)lv->n, sizeof *b->ref);
    if (!b->snap || !b->ref) return 1;
    for (int i = 0; i < np; i++) b->snap[i] = malloc((size_t)lv->bytes[i]);
    for (int i = 0; i < lv->n; i++) b->ref[i] = malloc((size_t)lv->bytes[i]);
    for (int s = 0; s < N_S; s++) {
        b->warm_rss[s] = -1;
        b->all_equal[s] = true;
    }
    return 0;
}

/* Frees what bench_init made; true when no tensor is left alive. */
static bool bench_free(bench *b) {
    for (int i = 0; i < b->m.n_params; i++) free(b->snap[i]);
    for (int i = 0; i < b->lv.n; i++) free(b->ref[i]);
    free(b->snap);
    free(b->ref);
    free(b->lv.t);
    free(b->lv.bytes);
    free(b->stages);
    free(g_arrive);
    remat_release(b->x);
    remat_release(b->target);
    model_free(&b->m);
    int live = (int)remat_live_tensors();
    if (live) fprintf(stderr, "leak: %d tensors alive at exit\n", live);
    return live == 0;
}

static void print_header(const bench *b, FILE *info) {
    const config *c = b->c;
    double flops = 6.0 * (double)c->layers * (double)c->batch * (double)c->width * (double)c->width;
    fprintf(info,
            "deep MLP: %d blocks of linear %d->%d + gelu(%s) + layer_norm, batch %d, f32, MSE, "
            "SGD\n",
            c->layers, c->width, c->width, g_gelu == REMAT_GELU_ERF ? "erf" : "tanh", c->batch);
    fprintf(info,
            "threads %d, gemm %s, segments %d, reps %d (+%d warm-up), interleaved, clock %s, "
            "heap %s; ~%.0f GFLOP per un-checkpointed step\n",
            c->threads, remat_gemm_backend(), c->segments, c->reps,
            c->warmup + (c->heap == HEAP_STEADY), k_clk_name[c->clock], k_heap_name[c->heap],
            flops * 1e-9);
    fprintf(info, "parameters %.1f MiB, input+target %.1f MiB, all gradients %.1f MiB\n",
            (double)b->param_bytes / MiB, (double)b->input_bytes / MiB, (double)b->lv.total / MiB);
}

/* ---- one step of one strategy ------------------------------------------------------ */

/* Copies none's gradients as the reference (s == S_NONE) or compares them
 * bitwise with it; fills grads_equal and loss_equal. */
static void compare_gradients(bench *b, int s, sample *sm) {
    sm->grads_equal = true;
    for (int i = 0; i < b->lv.n; i++) {
        remat_tensor *g = remat_tensor_grad(b->lv.t[i]);
        if (!g) {
            fprintf(stderr, "%s: leaf %d has no gradient\n", k_s_name[s], i);
            sm->grads_equal = false;
            continue;
        }
        if (s == S_NONE) memcpy(b->ref[i], remat_data(g), (size_t)b->lv.bytes[i]);
        else if (memcmp(b->ref[i], remat_data(g), (size_t)b->lv.bytes[i]) != 0)
            sm->grads_equal = false;
    }
    if (s == S_NONE) b->ref_loss = sm->loss;
    sm->loss_equal = sm->loss == b->ref_loss;
}

/* SGD: p -= lr * grad, then drop the gradients (the input's too). */
static void sgd_step(bench *b) {
    bool prev = remat_no_grad_begin();
    for (int i = 0; i < b->m.n_params; i++) {
        CHECK(remat_add_(b->m.params[i], remat_tensor_grad(b->m.params[i]), -0.01));
        CHECK(remat_set_grad(b->m.params[i], NULL));
    }
    remat_grad_mode_restore(prev);
    CHECK(remat_set_grad(b->x, NULL));
}

/* The backward of block l: layer_norm from a[0] to a[1], gelu from a[1] to
 * a[2], linear from a[2] to the next arrival (block l-1's a[0]; the end of
 * backward for block 0). t1: end of forward, t2: end of backward. */
static void profile_backward_by_op(bench *b, stamp t1, stamp t2) {
    const int L = b->c->layers;
    for (int k = 0; k < N_CLK; k++) {
        b->bwd_loss[k] = g_arrive[(ptrdiff_t)3 * (L - 1)].t[k] - t1.t[k];
        for (int l = 0; l < L; l++) {
            const stamp *a = g_arrive + (ptrdiff_t)3 * l;
            double end = l > 0 ? g_arrive[(ptrdiff_t)3 * (l - 1)].t[k] : t2.t[k];
            b->bwd_profile[k][OP_LN] += a[1].t[k] - a[0].t[k];
            b->bwd_profile[k][OP_GELU] += a[2].t[k] - a[1].t[k];
            b->bwd_profile[k][OP_LINEAR] += end - a[2].t[k];
        }
    }
}

/* Repetition r (warm-ups first), strategy s: one timed training step from
 * the repetition's parameters, with its memory, its gradients compared
 * with none's and a progress line on stderr. */
static sample run_step(bench *b, int r, int s) {
    const config *c = b->c;
    const int K = c->clock, n_warm = c->warmup + (c->heap == HEAP_STEADY ? 1 : 0);
    sample sm = {0};
    for (int i = 0; i < b->m.n_params; i++)
        memcpy(remat_data(b->m.params[i]), b->snap[i], (size_t)b->lv.bytes[i]);
    memset(g_optime, 0, sizeof g_optime);
    g_profile_hooks = (r == 0 && s == S_NONE);
    /* The first warm-up steps (and every step with --heap trim) run under
     * glibc's default policy and start from a trimmed heap, so that their
     * RSS growth is their footprint. */
    bool measure_rss = r < c->warmup || c->heap == HEAP_TRIM;
    if (measure_rss) malloc_trim(0);
    long rss0 = util_proc_status_kb("VmRSS");
    bool hwm_reset = b->hwm_ok && util_reset_rss_hwm();
    CHECK(remat_alloc_reset_peak(REMAT_DEVICE_CPU));
    g_base = (int64_t)remat_cpu_current_bytes();
    if (g_base != b->param_bytes + b->input_bytes && !b->base_warned) {
        fprintf(stderr, "note: allocator holds %lld bytes at step start, expected %lld\n",
                (long long)g_base, (long long)b->param_bytes + (long long)b->input_bytes);
        b->base_warned = true;
    }
    g_grads_live = 0;
    g_act_max = 0;
    g_tracking = true;

    stamp t0 = stamp_now();
    remat_tensor *loss = forward(c, &b->m, b->stages, s, b->x, b->target);
    stamp t1 = stamp_now();
    CHECK(remat_backward_scalar(loss));
    stamp t2 = stamp_now();
    g_tracking = false;
    sm.peak = remat_cpu_peak_bytes();
    long hwm = hwm_reset ? util_proc_status_kb("VmHWM") : maxrss_kb();
    sm.rss_growth_kb = measure_rss ? hwm - rss0 : -1;
    if (r < c->warmup && sm.rss_growth_kb > b->warm_rss[s]) b->warm_rss[s] = sm.rss_growth_kb;
    CHECK(remat_item(loss, &sm.loss));
    remat_release(loss);
    sm.act = g_act_max;
    sm.act_simple = (int64_t)sm.peak - g_base - b->lv.total;
    compare_gradients(b, s, &sm);

    stamp t3 = stamp_now();
    sgd_step(b);
    stamp t4 = stamp_now();

    for (int k = 0; k < N_CLK; k++) {
        sm.fwd[k] = t1.t[k] - t0.t[k];
        sm.bwd[k] = t2.t[k] - t1.t[k];
        sm.sgd[k] = t4.t[k] - t3.t[k];
        sm.step[k] = sm.fwd[k] + sm.bwd[k] + sm.sgd[k];
        sm.rec[k] = g_optime[k][PH_REC][0] + g_optime[k][PH_REC][1] + g_optime[k][PH_REC][2];
    }
    memcpy(sm.optime, g_optime, sizeof g_optime);
    if (!sm.grads_equal || !sm.loss_equal) b->all_equal[s] = false;
    if (g_profile_hooks) {
        g_profile_hooks = false;
        profile_backward_by_op(b, t1, t2);
    }
    char rss[48] = "";
    if (sm.rss_growth_kb >= 0)
        snprintf(rss, sizeof rss, " rss+ %.1f MiB", (double)sm.rss_growth_kb / 1024.0);
    fprintf(stderr,
            "%s %d/%d %-9s wall %7.3f s cpu %7.3f s (%s: fwd %.3f bwd %.3f rec %.3f "
            "sgd %.3f) peak %.1f MiB act %.1f MiB%s loss %.9g%s\n",
            r < n_warm ? "warm-up" : "rep", r < n_warm ? r + 1 : r - n_warm + 1,
            r < n_warm ? n_warm : c->reps, k_s_name[s], sm.step[CLK_WALL], sm.step[CLK_CPU],
            k_clk_name[K], sm.fwd[K], sm.bwd[K], sm.rec[K], sm.sgd[K], (double)sm.peak / MiB,
            (double)sm.act / MiB, rss, sm.loss,
            sm.grads_equal && sm.loss_equal ? "" : "  GRADS/LOSS DIFFER");
    return sm;
}

/* Every repetition, strategies interleaved; the timed ones into samples
 * ((N_S, reps), strategy-major). */
static void run_all(bench *b, sample *samples) {
    const config *c = b->c;
    const int n_warm = c->warmup + (c->heap == HEAP_STEADY ? 1 : 0);
    for (int r = 0; r < n_warm + c->reps; r++) {
        if (r == c->warmup && c->heap == HEAP_STEADY) {
            /* Steady-state heap from here on: tensors up to 32 MiB come from
             * the heap rather than mmap, and freed memory stays mapped, so
             * once the next (untimed) rep has touched the footprint no timed
             * step pays page faults. Larger tensors are still mmap'ed per
             * allocation. */
            mallopt(M_MMAP_THRESHOLD, 32 * 1024 * 1024);
            mallopt(M_TRIM_THRESHOLD, INT_MAX);
        }
        for (int i = 0; i < b->m.n_params; i++)
            memcpy(b->snap[i], remat_data(b->m.params[i]), (size_t)b->lv.bytes[i]);
        for (int s = 0; s < N_S; s++) {
            sample sm = run_step(b, r, s);
            if (r >= n_warm) samples[(size_t)s * (size_t)c->reps + (size_t)(r - n_warm)] = sm;
        }
    }
}

/* ---- summary ------------------------------------------------------------------------ */

typedef struct summary {
    /* per clock: medians over reps, fastest rep, median of per-rep ratios to none */
    double step[N_CLK], fwd[N_CLK], bwd[N_CLK], sgd[N_CLK], rec[N_CLK];
    double step_min[N_CLK], ratio_med[N_CLK];
    double optime[N_CLK][N_PH][N_OP];
    size_t peak;
    int64_t act, act_simple;
    long rss_kb;       /* in this process, after malloc_trim (warm-up steps) */
    long rss_fresh_kb; /* fresh process, -1 if not measured */
} summary;

/* Strategy s's summary from its samples sp (reps of them); none's samples
 * are samples[0 .. reps). tmp: room for reps doubles. */
static void summarize(const bench *b, const sample *samples, const rss_result *rss, int s,
                      double *tmp, summary *u) {
    const int reps = b->c->reps;
    const sample *sp = samples + (size_t)s * (size_t)reps;
#define MED(field)                                                                                 \
    do {                                                                                           \
        for (int r = 0; r < reps; r++) tmp[r] = sp[r].field;                                       \
        u->field = median(tmp, reps);                                                              \
    } while (0)
    for (int k = 0; k < N_CLK; k++) {
        MED(step[k]);
        MED(fwd[k]);
        MED(bwd[k]);
        MED(sgd[k]);
        MED(rec[k]);
        for (int p = 0; p < N_PH; p++)
            for (int o = 0; o < N_OP; o++) MED(optime[k][p][o]);
        u->step_min[k] = sp[0].step[k];
        for (int r = 1; r < reps; r++)
            if (sp[r].step[k] < u->step_min[k]) u->step_min[k] = sp[r].step[k];
        /* per-repetition ratio to none (same rep, so similar machine load) */
        for (int r = 0; r < reps; r++) tmp[r] = sp[r].step[k] / samples[(size_t)r].step[k];
        u->ratio_med[k] = median(tmp, reps);
    }
#undef MED
    /* memory is deterministic; take the maximum over reps anyway */
    u->peak = 0;
    u->act = u->act_simple = 0;
    u->rss_kb = b->warm_rss[s]; /* max over the steps that measured it */
    u->rss_fresh_kb = rss[s].ok ? rss[s].hwm_kb - rss[s].init_kb : -1;
    for (int r = 0; r < reps; r++) {
        if (sp[r].peak > u->peak) u->peak = sp[r].peak;
        if (sp[r].act > u->act) u->act = sp[r].act;
        if (sp[r].act_simple > u->act_simple) u->act_simple = sp[r].act_simple;
        if (sp[r].rss_growth_kb > u->rss_kb) u->rss_kb = sp[r].rss_growth_kb;
    }
    if (rss[s].ok && rss[s].alloc_peak != u->peak)
        fprintf(stderr, "note: %s: allocator peak %zu in the RSS child, %zu here\n", k_s_name[s],
                rss[s].alloc_peak, u->peak);
}

static void print_csv(const bench *b, const summary *sum) {
    const config *c = b->c;
    const summary *n0 = &sum[S_NONE];
    printf("strategy,layers,width,batch,threads,segments,reps,gelu");
    for (int k = 0; k < N_CLK; k++) {
        const char *cn = k_clk_name[k];
        printf(",%s_step_s,%s_step_min_s,%s_fwd_s,%s_bwd_s,%s_recompute_s,%s_sgd_s,"
               "%s_overhead,%s_overhead_per_rep_median,%s_overhead_min",
               cn, cn, cn, cn, cn, cn, cn, cn, cn);
    }
    printf(",alloc_peak_bytes,act_peak_bytes,act_peak_simple_bytes,act_reduction,"
           "rss_growth_fresh_kib,rss_growth_inproc_kib,rss_inproc_is_process_max,"
           "grads_bitwise_equal\n");
    for (int s = 0; s < N_S; s++) {
        const summary *u = &sum[s];
        printf("%s,%d,%d,%d,%d,%d,%d,%s", k_s_name[s], c->layers, c->width, c->batch, c->threads,
               c->segments, c->reps, g_gelu == REMAT_GELU_ERF ? "erf" : "tanh");
        for (int k = 0; k < N_CLK; k++)
            printf(",%.6f,%.6f,%.6f,%.6f,%.6f,%.6f,%.4f,%.4f,%.4f", u->step[k], u->step_min[k],
                   u->fwd[k], u->bwd[k], u->rec[k], u->sgd[k], u->step[k] / n0->step[k],
                   u->ratio_med[k], u->step_min[k] / n0->step_min[k]);
        printf(",%zu,%lld,%lld,%.4f,%ld,%ld,%d,%d\n", u->peak, (long long)u->act,
               (long long)u->act_simple, 1.0 - (double)u->act / (double)n0->act, u->rss_fresh_kb,
               u->rss_kb, b->hwm_ok ? 0 : 1, b->all_equal[s] ? 1 : 0);
    }
}

/* The strategy table: times, memory, gradients' equality. */
static void print_strategy_table(const bench *b, const summary *sum) {
    const config *c = b->c;
    const int K = c->clock, K2 = 1 - K; /* the tables' clock, the other one */
    const summary *n0 = &sum[S_NONE];
    printf("\ntimes: %s clock, median of %d reps (min: fastest rep); overhead = median / "
           "median of none [median of per-rep ratios] {min / min}; the %s-clock overhead "
           "for comparison\n\n",
           k_clk_name[K], c->reps, k_clk_name[K2]);
    printf("| strategy | step ms | min ms | fwd ms | bwd ms | recompute ms | sgd ms | "
           "overhead [per-rep] {min} | %s overhead | alloc peak MiB | act peak MiB | "
           "act reduction | RSS growth MiB (fresh process) | RSS growth MiB (in-process%s) | "
           "grads == none |\n",
           k_clk_name[K2], b->hwm_ok ? "" : ", ru_maxrss");
    printf("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|\n");
    for (int s = 0; s < N_S; s++) {
        const summary *u = &sum[s];
        char fresh[32] = "-", inproc[32] = "-";
        if (u->rss_fresh_kb >= 0)
            snprintf(fresh, sizeof fresh, "%.1f", (double)u->rss_fresh_kb / 1024.0);
        if (u->rss_kb >= 0) snprintf(inproc, sizeof inproc, "%.1f", (double)u->rss_kb / 1024.0);
        printf("| %-8s | %8.1f | %8.1f | %7.1f | %7.1f | %7.1f | %6.1f | %5.3fx [%5.3fx] "
               "{%5.3fx} | %5.3fx | %8.1f | %8.1f | %5.1f%% | %8s | %8s | %s |\n",
               k_s_name[s], 1e3 * u->step[K], 1e3 * u->step_min[K], 1e3 * u->fwd[K],
               1e3 * u->bwd[K], 1e3 * u->rec[K], 1e3 * u->sgd[K], u->step[K] / n0->step[K],
               u->ratio_med[K], u->step_min[K] / n0->step_min[K], u->step[K2] / n0->step[K2],
               (double)u->peak / MiB, (double)u->act / MiB,
               100.0 * (1.0 - (double)u->act / (double)n0->act), fresh, inproc,
               b->all_equal[s] ? "yes (bitwise)" : "NO");
    }
    printf("\nstrategies: ");
    for (int s = 0; s < N_S; s++)
        printf("%s = %s%s", k_s_name[s], k_s_desc[s], s + 1 < N_S ? "; " : "\n");
    printf("alloc peak: remat_cpu_peak_bytes after the step (params %.1f MiB + input/target "
           "%.1f MiB included)\n",
           (double)b->param_bytes / MiB, (double)b->input_bytes / MiB);
    printf("act peak: max over the step's allocations of current - (params + input/target) "
           "- leaf gradients stored so far\n");
    printf("RSS growth (fresh process): VmHWM after %d steps - VmRSS after building the "
           "model, one child process per strategy, glibc's default malloc; (in-process): "
           "VmHWM - VmRSS over a warm-up step started after malloc_trim(0) in this process "
           "(inherits earlier strategies' heap)\n",
           c->rss_steps);
}

/* Per-op times of the forward, the recomputation and the rest of backward. */
static void print_op_table(const bench *b, const summary *sum) {
    const int K = b->c->clock;
    const summary *n0 = &sum[S_NONE];
    printf("\nper-op times per step, %s ms (median over reps): forward | recomputation in "
           "backward | rest of backward\n\n",
           k_clk_name[K]);
    printf("| strategy | fwd linear | fwd gelu | fwd layer_norm | rec linear | rec gelu | "
           "rec layer_norm | bwd - rec |\n");
    printf("|---|---|---|---|---|---|---|---|\n");
    for (int s = 0; s < N_S; s++) {
        const summary *u = &sum[s];
        printf("| %-8s | %7.1f | %7.1f | %7.1f | %7.1f | %7.1f | %7.1f | %7.1f |\n", k_s_name[s],
               1e3 * u->optime[K][PH_FWD][0], 1e3 * u->optime[K][PH_FWD][1],
               1e3 * u->optime[K][PH_FWD][2], 1e3 * u->optime[K][PH_REC][0],
               1e3 * u->optime[K][PH_REC][1], 1e3 * u->optime[K][PH_REC][2],
               1e3 * (u->bwd[K] - u->rec[K]));
    }
    double bsum = b->bwd_loss[K];
    printf("\nbackward of none by op (warm-up step, tensor hooks), %s ms: loss %.1f", k_clk_name[K],
           1e3 * b->bwd_loss[K]);
    for (int o = 0; o < N_OP; o++) {
        printf(", %s %.1f", k_op_name[o], 1e3 * b->bwd_profile[K][o]);
        bsum += b->bwd_profile[K][o];
    }
    printf(" (sum %.1f)\n", 1e3 * bsum);
    double ideal = n0->fwd[K] / n0->step[K];
    printf("recomputing every block costs one more forward: fwd/step of none = %.3f, so "
           "per-block checkpointing costs ~%.2fx unless the recomputation (or the backward "
           "after it) runs faster than the original forward (backward)\n",
           ideal, 1.0 + ideal);
}

static void print_targets(const bench *b, const summary *sum) {
    const int K = b->c->clock;
    const summary *n0 = &sum[S_NONE];
    printf("\ntargets (issue): per-block overhead <= 1.30x, activation peak reduced by >= "
           "60%%\n");
    for (int s = S_BLOCK_NR; s < N_S; s++) {
        const summary *u = &sum[s];
        double ov = u->step[K] / n0->step[K], red = 1.0 - (double)u->act / (double)n0->act;
        double ovm = u->step_min[K] / n0->step_min[K];
        printf("  %-8s overhead %.3fx (median) %s, %.3fx (min) %s; act reduction %.1f%% %s\n",
               k_s_name[s], ov, ov <= 1.30 ? "met" : "MISSED", ovm, ovm <= 1.30 ? "met" : "MISSED",
               100.0 * red, red >= 0.60 ? "met" : "MISSED");
    }
}

int main(int argc, char **argv) {
    config c;
    int rc = parse_args(argc, argv, &c);
    if (rc) return rc;

    /* fresh-process RSS first, while this process has allocated nothing */
    rss_result rss[N_S] = {{0}};
    for (int s = 0; s < N_S && c.rss_steps > 0; s++) {
        fprintf(stderr, "RSS: %s in a fresh process (%d steps)...\n", k_s_name[s], c.rss_steps);
        rss[s] = measure_rss_fresh(&c, s);
        if (!rss[s].ok) fprintf(stderr, "RSS measurement of %s failed\n", k_s_name[s]);
    }

    bench b;
    if (bench_init(&b, &c)) return 1;
    remat_set_alloc_observer(alloc_observer, NULL);
    b.hwm_ok = util_reset_rss_hwm();
    FILE *info = c.csv ? stderr : stdout;
    print_header(&b, info);

    sample *samples = calloc((size_t)N_S * (size_t)c.reps, sizeof *samples);
    double *tmp = malloc((size_t)c.reps * sizeof *tmp);
    if (!samples || !tmp) return 1;
    run_all(&b, samples);
    remat_set_alloc_observer(NULL, NULL);

    summary sum[N_S];
    for (int s = 0; s < N_S; s++) summarize(&b, samples, rss, s, tmp, &sum[s]);
    free(tmp);
    if (c.csv) {
        print_csv(&b, sum);
    } else {
        print_strategy_table(&b, sum);
        print_op_table(&b, sum);
        print_targets(&b, sum);
    }
    long mr = maxrss_kb();
    fprintf(info, "process max RSS (getrusage ru_maxrss, whole run): %.1f MiB%s\n",
            (double)mr / 1024.0,
            b.hwm_ok ? "" : "; VmHWM reset not allowed: RSS column is ru_maxrss");

    free(samples);
    bool ok = bench_free(&b);
    for (int s = 0; s < N_S; s++) ok = ok && b.all_equal[s];
    return ok ? 0 : 1;
}
