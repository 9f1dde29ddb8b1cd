/* tests/test_cuda_bf16.c — bf16 on cuda against bf16 on cpu: every kernel an
 * autocast GPT or Llama step hands bf16 tensors to on cuda (docs/autocast.md,
 * docs/cuda.md): the GEMMs of matmul and linear over each batch plan of
 * src/backends/cuda/gemm.c (one GEMM, fold-M, fold-K, strided-batched with a
 * broadcast operand, one GEMM per entry accumulating into a broadcast
 * result), forward and backward, linear's bias and its column sums; the
 * fused attention; the unary ops of the MLPs (gelu, silu) and the
 * elementwise products and sums; rope, rms_norm and dropout; a linear → gelu →
 * linear → residual chain under autocast, f32 in, as the models run it; and one
 * autocast step of a GPT-2 and a grouped-query Llama.
 *
 * Each case makes its inputs once on the cpu (bf16 values rounded there),
 * copies them bit for bit to cuda:0, runs the same op on both devices and
 * compares outputs and the gradients of sum(f32(out) * w) for a fixed random
 * f32 w (so the gradient reaching the op is the same bf16 tensor on both).
 * Tolerances: a bf16 result is the f32 result rounded once, and the two
 * devices' f32 results differ by summation order (GEMMs, reductions) or by
 * their math libraries' last bits (gelu's erf, exp), so an element may round
 * to the neighbouring bf16 value: rtol 1e-2 (one bf16 ulp is at most 2⁻⁷
 * relative), atol for results near 0 that are sums of larger terms; the
 * attention, whose kernels round the probabilities P and dS to bf16 as
 * GEMM / tensor-core operands where they have bf16 products (cpu with
 * oneDNN's bf16 GEMMs, docs/autocast.md; cuda on sm_80 and later) and run
 * f32 on the widened values where not, against the largest value (2e-2 of
 * it: each is within 7e-3 of the f64 attention). Needs a GPU: every test reports itself skipped, with the
 * reason, on a machine without one (or a build without CUDA). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "remat/autocast.h"
#include "support/rt.h"

/* Uniform values in [lo, hi) as a cpu tensor of dtype dt (bf16: rounded once on the cpu). */
static remat_tensor *rand_dt(int nd, const int64_t *shape, remat_dtype dt, double lo, double hi,
                             unsigned seed) {
    remat_tensor *f = rt_rand(nd, shape, REMAT_F32, lo, hi, seed), *t = NULL;
    if (dt == REMAT_F32) return f;
    RT_OK(remat_to_dtype(&t, f, dt));
    remat_release(f);
    return t;
}

/* t's values as f32 on the cpu (a new tensor). */
static remat_tensor *f32_cpu(remat_tensor *t) {
    remat_tensor *c = NULL, *f = NULL;
    RT_OK(remat_to_device(&c, t, REMAT_DEVICE_CPU));
    RT_OK(remat_to_dtype(&f, c, REMAT_F32));
    remat_release(c);
    return f;
}

static double max_abs(const remat_tensor *t) {
    double *v = rt_values(t), m = 0;
    for (int64_t i = 0; i < remat_numel(t); i++) m = fabs(v[i]) > m ? fabs(v[i]) : m;
    free(v);
    return m;
}

/* How a case's results are compared: |cuda - cpu| <= atol + frac·max|cpu| + rtol·|cpu|. */
typedef struct tol {
    double atol, rtol, frac;
} tol;
static const tol k_tol = {1e-4, 1e-2, 0};
/* GEMMs: cuBLAS adds the bias inside the bf16 GEMM (one rounding of dot + bias); a cpu
 * without bf16 GEMMs (REMAT_GEMM=naive, or no AVX512_BF16) rounds the dot product, then
 * adds the bias (two). Where the sum cancels, the second rounding is a bf16 ulp of the
 * terms, not of the result (the H200 run: 0.06640625 vs 0.064453125, terms near 1): so
 * a GEMM result is compared within two bf16 ulps (2^-7) of the tensor's largest element. */
static const tol k_gemm_tol = {1e-4, 1e-2, 1.0 / 128};

static void assert_agree(remat_tensor *cpu_t, remat_tensor *cuda_t, tol t, const char *what) {
    cr_assert_not_null(cpu_t, "%s: no cpu tensor", what);
    cr_assert_not_null(cuda_t, "%s: no cuda tensor", what);
    cr_assert_eq(remat_tensor_dtype(cuda_t), remat_tensor_dtype(cpu_t), "%s: cuda gives %s, cpu %s",
                 what, remat_dtype_name(remat_tensor_dtype(cuda_t)),
                 remat_dtype_name(remat_tensor_dtype(cpu_t)));
    remat_device d = remat_tensor_device(cuda_t);
    cr_assert_eq(d.type, rt_cuda0().type, "%s: the cuda result is not on cuda", what);
    remat_tensor *a = f32_cpu(cuda_t), *b = f32_cpu(cpu_t);
    rt_assert_close(a, b, t.atol + t.frac * max_abs(b), t.rtol, what);
    remat_release(a);
    remat_release(b);
}

/* build(in, n, &out, user) makes the op's output from inputs in[0..n). */
typedef int (*build_fn)(remat_tensor *const *in, int n, remat_tensor **out, const void *user);

#define MAX_IN 6
/* Runs build on cpu and cuda copies of in (cpu tensors; the inputs with grad[i] get their
 * gradients compared), under bf16 autocast on each device when autocast. */
static void run_case(const char *name, build_fn build, const void *user, int n,
                     remat_tensor *const *in, const bool *grad, bool autocast, tol t) {
    remat_scope *scope;
    RT_OK(remat_scope_begin(&scope));
    remat_tensor *ic[MAX_IN], *ig[MAX_IN], *y[2], *loss[2];
    for (int i = 0; i < n; i++) {
        ic[i] = rt_leaf_on(in[i], REMAT_DEVICE_CPU, grad[i]);
        ig[i] = rt_leaf_on(in[i], rt_cuda0(), grad[i]);
    }
    for (int dev = 0; dev < 2; dev++) {
        remat_autocast_state prev;
        int type = dev ? rt_cuda0().type : REMAT_CPU;
        RT_OK(remat_autocast_begin(&prev, type, REMAT_BF16, autocast));
        int rc = build(dev ? ig : ic, n, &y[dev], user);
        remat_autocast_end(&prev);
        cr_assert_eq(rc, REMAT_OK, "%s on %s: %s", name, dev ? "cuda" : "cpu", remat_last_error());
    }
    char what[200];
    snprintf(what, sizeof what, "%s: output", name);
    assert_agree(y[0], y[1], t, what);
    bool any = false;
    for (int i = 0; i < n; i++) any |= grad[i];
    if (any && remat_requires_grad(y[0])) {
        int64_t shape[8];
        int nd = remat_ndim(y[0]);
        for (int d = 0; d < nd; d++) shape[d] = remat_size(y[0], d);
        remat_tensor *w = rt_rand(nd, shape, REMAT_F32, -1, 1, 77);
        for (int dev = 0; dev < 2; dev++) {
            remat_tensor *wd = rt_leaf_on(w, dev ? rt_cuda0() : REMAT_DEVICE_CPU, false), *yf, *p;
            RT_OK(remat_to_dtype(&yf, y[dev], REMAT_F32));
            RT_OK(remat_mul(&p, yf, wd));
            RT_OK(remat_sum_all(&loss[dev], p));
            RT_OK(remat_backward_scalar(loss[dev]));
        }
        for (int i = 0; i < n; i++) {
            if (!grad[i]) continue;
            snprintf(what, sizeof what, "%s: gradient of input %d", name, i);
            assert_agree(remat_tensor_grad(ic[i]), remat_tensor_grad(ig[i]), t, what);
        }
    }
    RT_OK(remat_scope_end(scope)); /* releases what the case made */
}

/* ---- GEMMs: matmul over every batch plan, linear with and without bias ------------------- */
static int build_matmul(remat_tensor *const *in, int n, remat_tensor **out, const void *user) {
    (void)n;
    int kind = *(const int *)user;
    if (kind == 0) return remat_matmul(out, in[0], in[1]);
    remat_tensor *bt = NULL; /* b stored (…, n, k): a transposed view */
    int rc = remat_transpose(&bt, in[1], -2, -1);
    if (!rc) rc = remat_matmul(out, in[0], bt);
    remat_release(bt);
    return rc;
}

Test(cuda_bf16, matmul_every_batch_plan_forward_and_backward) {
    rt_need_cuda();
    /* a broadcast a's gradient sums the batch entries into one bf16 result, rounded after
     * each entry on both devices (as the cpu's GEMMs do): up to two ulps apart */
    const tol mm_tol = {1e-4, 2e-2, 0};
    const struct {
        const char *name;
        int na, nb, kind;
        int64_t a[3], b[3];
    } cases[] = {
        {"2-D", 2, 2, 0, {33, 70}, {70, 45}},
        {"vector times matrix", 1, 2, 0, {70}, {70, 45}},
        {"matrix times vector", 2, 1, 0, {33, 70}, {70}},
        {"batched, strided", 3, 3, 0, {3, 33, 70}, {3, 70, 45}},
        {"batched, b broadcast (fold-M; dB by fold-K)", 3, 2, 0, {3, 33, 70}, {70, 45}},
        {"batched, a broadcast (dA accumulates)", 2, 3, 0, {33, 70}, {3, 70, 45}},
        {"batched, b transposed", 3, 3, 1, {3, 33, 70}, {3, 45, 70}},
        {"batch broadcast both ways", 3, 3, 0, {1, 17, 24}, {4, 24, 9}},
        {"empty inner dim", 2, 2, 0, {5, 0}, {0, 6}},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        remat_tensor *in[2] = {
            rand_dt(cases[i].na, cases[i].a, REMAT_BF16, -1, 1, 1 + (unsigned)i),
            rand_dt(cases[i].nb, cases[i].b, REMAT_BF16, -1, 1, 9 + (unsigned)i)};
        bool g[2] = {true, true};
        run_case(cases[i].name, build_matmul, &cases[i].kind, 2, in, g, false, mm_tol);
        remat_release(in[0]);
        remat_release(in[1]);
    }
}

static int build_linear(remat_tensor *const *in, int n, remat_tensor **out, const void *user) {
    (void)user;
    return remat_linear(out, in[0], in[1], n > 2 ? in[2] : NULL);
}

Test(cuda_bf16, linear_with_bias_forward_and_backward) {
    rt_need_cuda();
    const int64_t xs[3] = {2, 19, 48}, ws[2] = {40, 48}, bs[1] = {40}, x1[1] = {48};
    remat_tensor *in[3] = {rand_dt(3, xs, REMAT_BF16, -1, 1, 1),
                           rand_dt(2, ws, REMAT_BF16, -0.5, 0.5, 2),
                           rand_dt(1, bs, REMAT_BF16, -1, 1, 3)};
    bool g[3] = {true, true, true};
    run_case("linear bf16, bias", build_linear, NULL, 3, in, g, false, k_gemm_tol);
    run_case("linear bf16, no bias", build_linear, NULL, 2, in, g, false, k_gemm_tol);
    remat_release(in[0]);
    in[0] = rand_dt(1, x1, REMAT_BF16, -1, 1, 4); /* a 1-D x */
    run_case("linear bf16, 1-D x", build_linear, NULL, 3, in, g, false, k_gemm_tol);
    /* autocast, f32 in: cuda casts x, weight and bias; the cpu keeps the weight f32 and
     * computes dW in f32 (docs/autocast.md), one rounding fewer: within one bf16 ulp */
    for (int i = 0; i < 3; i++) remat_release(in[i]);
    in[0] = rand_dt(3, xs, REMAT_F32, -1, 1, 5);
    in[1] = rand_dt(2, ws, REMAT_F32, -0.5, 0.5, 6);
    in[2] = rand_dt(1, bs, REMAT_F32, -1, 1, 7);
    run_case("linear under autocast, f32 parameters", build_linear, NULL, 3, in, g, true,
             k_gemm_tol);
    for (int i = 0; i < 3; i++) remat_release(in[i]);
}

/* ---- attention ------------------------------------------------------------------------- */
typedef struct attn_case {
    bool causal;
    bool lower_right; /* the causal mask anchored lower-right (remat_attention_causal) */
} attn_case;

static int build_attention(remat_tensor *const *in, int n, remat_tensor **out, const void *user) {
    (void)n;
    const attn_case *c = user;
    if (c->lower_right)
        return remat_attention_causal(out, in[0], in[1], in[2], REMAT_CAUSAL_LOWER_RIGHT, 0.0);
    return remat_attention(out, in[0], in[1], in[2], c->causal, 0.0);
}

Test(cuda_bf16, fused_attention_forward_and_backward) {
    rt_need_cuda();
    const tol t = {1e-4, 0, 2e-2};
    const struct {
        int64_t q[4], k[4];
        bool causal, lower_right;
    } cases[] = {
        {{2, 3, 17, 32}, {2, 3, 17, 32}, true, false},
        {{1, 2, 9, 64}, {1, 2, 23, 64}, false, false},
        {{2, 2, 33, 16}, {2, 2, 33, 16}, true, false},
        {{1, 4, 9, 32}, {1, 2, 9, 32}, true, false}, /* grouped-query: two q heads per kv head */
        /* several query and key tiles of the tensor-core kernels (64 rows, 64 keys; 32
         * queries a step for dK/dV at head size 128): the online softmax across tiles, the
         * diagonal tile, ragged last tiles */
        {{1, 2, 130, 64}, {1, 2, 130, 64}, true, false},
        {{1, 2, 40, 128}, {1, 2, 150, 128}, true, true},  /* lower-right, Tq < Tk */
        {{1, 2, 150, 20}, {1, 2, 70, 20}, true, true},    /* Tq > Tk: rows without keys;
                                                            * 20 columns: element loads */
        {{1, 4, 100, 48}, {1, 2, 100, 48}, false, false}, /* grouped-query, padded head */
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        remat_tensor *in[3] = {rand_dt(4, cases[i].q, REMAT_BF16, -1, 1, 1 + (unsigned)i),
                               rand_dt(4, cases[i].k, REMAT_BF16, -1, 1, 5 + (unsigned)i),
                               rand_dt(4, cases[i].k, REMAT_BF16, -1, 1, 9 + (unsigned)i)};
        bool g[3] = {true, true, true};
        attn_case c = {cases[i].causal, cases[i].lower_right};
        char name[80];
        snprintf(name, sizeof name, "attention bf16 case %zu", i);
        run_case(name, build_attention, &c, 3, in, g, false, t);
        for (int j = 0; j < 3; j++) remat_release(in[j]);
    }
}

/* ---- elementwise, rope, rms_norm --------------------------------------------------------- */
static int build_ew(remat_tensor *const *in, int n, remat_tensor **out, const void *user) {
    (void)n;
    switch (*(const int *)user) {
    case 0: return remat_gelu(out, in[0], REMAT_GELU_TANH);
    case 1: return remat_gelu(out, in[0], REMAT_GELU_ERF);
    case 2: return remat_silu(out, in[0]);
    case 3: return remat_relu(out, in[0]);
    case 4: return remat_mul(out, in[0], in[1]);
    case 5: return remat_add(out, in[0], in[1]);
    case 6: return remat_sub(out, in[0], in[1]);
    case 7: return remat_mul_scalar(out, in[0], 0.125);
    case 8: return remat_exp(out, in[0]);
    default: return remat_rms_norm(out, in[0], 1, in[1], 1e-6);
    }
}

Test(cuda_bf16, elementwise_and_norms_forward_and_backward) {
    rt_need_cuda();
    const char *names[] = {"gelu tanh", "gelu erf", "silu",       "relu", "mul",
                           "add",       "sub",      "mul_scalar", "exp",  "rms_norm"};
    const int64_t xs[3] = {3, 37, 24}, bs[1] = {24};
    for (int op = 0; op < 10; op++) {
        int nin = op >= 4 && op <= 6 ? 2 : op == 9 ? 2 : 1;
        remat_tensor *in[2] = {rand_dt(3, xs, REMAT_BF16, -3, 3, 1 + (unsigned)op),
                               op == 9 ? rand_dt(1, bs, REMAT_BF16, 0.5, 1.5, 20)
                                       : rand_dt(1, bs, REMAT_BF16, -2, 2, 21)}; /* broadcast */
        bool g[2] = {true, true};
        char name[80];
        snprintf(name, sizeof name, "%s bf16", names[op]);
        run_case(name, build_ew, &op, nin, in, g, false, k_tol);
        remat_release(in[0]);
        remat_release(in[1]);
    }
}

static int build_rope(remat_tensor *const *in, int n, remat_tensor **out, const void *user) {
    (void)n;
    (void)user;
    return remat_rope(out, in[0], NULL, 10000.0);
}

Test(cuda_bf16, rope_forward_and_backward) {
    rt_need_cuda();
    const int64_t xs[4] = {2, 3, 11, 16}; /* (B, H, T, head_dim) */
    remat_tensor *x = rand_dt(4, xs, REMAT_BF16, -2, 2, 3);
    bool g = true;
    run_case("rope bf16", build_rope, NULL, 1, &x, &g, false, k_tol);
    remat_release(x);
}

/* dropout on bf16 (a GPT's dropouts after its bf16 projections): seeded before each run, the
 * cpu and cuda generators draw the same mask (docs/cuda.md) */
static int build_dropout(remat_tensor *const *in, int n, remat_tensor **out, const void *user) {
    (void)n;
    (void)user;
    remat_manual_seed(1234);
    return remat_dropout(out, in[0], 0.25, true);
}

Test(cuda_bf16, dropout_forward_and_backward) {
    rt_need_cuda();
    const int64_t xs[2] = {7, 129}; /* a partial mask byte */
    remat_tensor *x = rand_dt(2, xs, REMAT_BF16, -2, 2, 5);
    bool g = true;
    run_case("dropout bf16", build_dropout, NULL, 1, &x, &g, false, k_tol);
    remat_release(x);
}

/* ---- a model's chain under autocast ------------------------------------------------------- */
/* y = x + fc2(gelu(fc(layer_norm(x)))): f32 x and parameters, autocast on, as a GPT's MLP
 * half-block runs (bf16 GEMMs and gelu, f32 norm and residual stream). */
static int build_mlp(remat_tensor *const *in, int n, remat_tensor **out, const void *user) {
    (void)n;
    (void)user;
    remat_tensor *ln = NULL, *h = NULL, *a = NULL, *o = NULL;
    int rc = remat_layer_norm(&ln, in[0], 1, NULL, NULL, 1e-5);
    if (!rc) rc = remat_linear(&h, ln, in[1], in[2]);
    if (!rc) rc = remat_gelu(&a, h, REMAT_GELU_TANH);
    if (!rc) rc = remat_linear(&o, a, in[3], in[4]);
    if (!rc) rc = remat_add(out, in[0], o);
    remat_release(ln), remat_release(h), remat_release(a), remat_release(o);
    return rc;
}

Test(cuda_bf16, mlp_block_under_autocast) {
    rt_need_cuda();
    const int64_t xs[3] = {2, 16, 32}, w1[2] = {64, 32}, b1[1] = {64}, w2[2] = {32, 64},
                  b2[1] = {32};
    remat_tensor *in[5] = {
        rand_dt(3, xs, REMAT_F32, -1, 1, 1), rand_dt(2, w1, REMAT_F32, -0.3, 0.3, 2),
        rand_dt(1, b1, REMAT_F32, -0.1, 0.1, 3), rand_dt(2, w2, REMAT_F32, -0.3, 0.3, 4),
        rand_dt(1, b2, REMAT_F32, -0.1, 0.1, 5)};
    bool g[5] = {true, true, true, true, true};
    /* test_autocast's tolerance for autocast gradients (there: against f32), plus 4 % of
     * the largest element: two GEMMs and gelu between them, each rounded in other places
     * on the two devices (k_gemm_tol), and the gradients go through both again (the H200
     * run: -0.8867 vs -0.9185 in the first weight's gradient) */
    const tol t = {2e-2, 1e-2, 0.04};
    run_case("mlp under autocast", build_mlp, NULL, 5, in, g, true, t);
    for (int i = 0; i < 5; i++) remat_release(in[i]);
}

/* ---- whole models: one autocast step on cpu and on cuda --------------------------------- */
/* The same parameters (made on the cpu, copied), ids and targets; no dropout (each device
 * draws from its own generator). The loss and every parameter's f32 gradient agree to
 * bf16 precision: each device rounds its GEMM and kernel results to bf16 once, from f32
 * sums in its own order, and a last-bit difference travels through the layers, so a
 * gradient is compared against its own largest element (8 %: on the cpu, its bf16 GEMMs
 * against its f32 route (REMAT_NO_BF16) reach 2.8 % of it), a tolerance that a layout,
 * transposition or dtype error (errors of the order of the values themselves) exceeds. */
static void model_step(remat_model *m, remat_tensor *ids, remat_tensor *targets, int type,
                       remat_tensor **loss) {
    remat_model_zero_grad(m);
    remat_autocast_state prev;
    RT_OK(remat_autocast_begin(&prev, type, REMAT_BF16, true));
    int rc = remat_model_loss(loss, m, ids, targets, NULL);
    remat_autocast_end(&prev);
    RT_OK(rc);
    RT_OK(remat_backward_scalar(*loss));
}

static void model_agrees(const remat_model_config *cfg, const char *what) {
    remat_model *mc = NULL, *mg = NULL;
    remat_manual_seed(11);
    RT_OK(remat_model_create(&mc, cfg, REMAT_DEVICE_CPU));
    RT_OK(remat_model_create(&mg, cfg, rt_cuda0()));
    bool gm = remat_no_grad_begin();
    for (int i = 0; i < remat_model_n_params(mc); i++) {
        remat_tensor *t = NULL;
        RT_OK(remat_to_device(&t, remat_model_param(mc, i, NULL), rt_cuda0()));
        RT_OK(remat_copy_(remat_model_param(mg, i, NULL), t));
        remat_release(t);
    }
    remat_grad_mode_restore(gm);
    const int64_t shape[2] = {2, 8};
    int64_t ii[16], ti[16];
    for (int i = 0; i < 16; i++) ii[i] = (i * 7 + 3) % cfg->vocab, ti[i] = (i * 5 + 1) % cfg->vocab;
    remat_tensor *ids = NULL, *targets = NULL, *lc = NULL, *lg = NULL;
    RT_OK(remat_from_data(&ids, 2, shape, REMAT_I64, ii));
    RT_OK(remat_from_data(&targets, 2, shape, REMAT_I64, ti));
    model_step(mc, ids, targets, REMAT_CPU, &lc);
    model_step(mg, ids, targets, rt_cuda0().type, &lg);
    char name[200];
    snprintf(name, sizeof name, "%s: loss", what);
    assert_agree(lc, lg, (tol){0, 1e-2, 0}, name);
    for (int i = 0; i < remat_model_n_params(mc); i++) {
        const char *pn = NULL;
        remat_model_param(mc, i, &pn);
        snprintf(name, sizeof name, "%s: gradient of %s", what, pn);
        remat_tensor *gc = remat_tensor_grad(remat_model_param(mc, i, NULL));
        remat_tensor *gg = remat_tensor_grad(remat_model_param(mg, i, NULL));
        assert_agree(gc, gg, (tol){1e-6, 0, 8e-2}, name);
    }
    remat_release(lc), remat_release(lg), remat_release(ids), remat_release(targets);
    remat_model_free(mc);
    remat_model_free(mg);
}

Test(cuda_bf16, gpt2_and_llama_autocast_steps_agree_with_cpu) {
    rt_need_cuda();
    remat_model_config c;
    RT_OK(remat_model_config_default(&c, REMAT_MODEL_GPT2));
    c.n_layers = 2, c.n_heads = 2, c.n_kv_heads = 2, c.hidden = 32, c.vocab = 37;
    c.max_positions = 8, c.initializer_range = 0.2;
    c.embd_pdrop = c.attn_pdrop = c.resid_pdrop = 0;
    model_agrees(&c, "gpt2");
    RT_OK(remat_model_config_default(&c, REMAT_MODEL_LLAMA));
    c.n_layers = 2, c.n_heads = 4, c.n_kv_heads = 2, c.hidden = 32, c.intermediate = 48;
    c.vocab = 41, c.max_positions = 8, c.initializer_range = 0.2;
    c.attention_bias = c.mlp_bias = true;
    model_agrees(&c, "llama (grouped-query)");
}
