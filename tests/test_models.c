/* tests/test_models.c — the library's GPT-2 and Llama (remat/models.h):
 *  - against Hugging Face transformers (tests/fixtures/hf/, made by
 *    scripts/gen_hf_fixtures.py): parameter names, shapes and order as
 *    named_parameters(), logits, loss and every parameter's gradient within
 *    1e-5 of the largest value of each tensor (f32); the KV cache's logits
 *    as the full forward's, and greedy tokens as transformers';
 *  - every strategy (none, block in both modes, sequential, selective with
 *    named residuals, a budget plan) gives gradients bitwise equal to none,
 *    dropout included, in f32 and under bf16 autocast; so do the half-block
 *    stages (remat_model_half_stages), alone, after whole blocks and under an
 *    op-level plan over them;
 *  - configs and inputs that are refused, with messages naming the field. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "support/fixtures.h"
#include "support/rt.h"

#include "remat/autocast.h"
#include "remat/models.h"
#include "remat/safetensors.h"

/* REMAT_TEST_DEVICE=fenced|cuda runs the models on that device (tests/support/rt.h) */
RT_ON_TEST_DEVICE

/* ---- Hugging Face fixtures ------------------------------------------------------------------ */
static int64_t pint(const fx_case *c, const char *name) {
    int64_t v = 0;
    char err[256];
    cr_assert(fx_param_int(c, name, &v, err, sizeof err), "%s", err);
    return v;
}

static double pdouble(const fx_case *c, const char *name) {
    double v = 0;
    char err[256];
    cr_assert(fx_param_double(c, name, &v, err, sizeof err), "%s", err);
    return v;
}

/* The fixture's config.json values as a remat_model_config. */
static void fixture_config(const fx_case *c, remat_model_config *cfg) {
    if (!strcmp(c->op, "gpt2")) {
        RT_OK(remat_model_config_default(cfg, REMAT_MODEL_GPT2));
        cfg->n_layers = (int)pint(c, "n_layer");
        cfg->n_heads = cfg->n_kv_heads = (int)pint(c, "n_head");
        cfg->hidden = pint(c, "n_embd");
        cfg->intermediate = pint(c, "n_inner");
        cfg->vocab = pint(c, "vocab_size");
        cfg->max_positions = pint(c, "n_positions");
        cfg->norm_eps = pdouble(c, "layer_norm_epsilon");
        const char *act = fx_param_str(c, "activation_function");
        cr_assert(act);
        cfg->gelu = !strcmp(act, "gelu") ? REMAT_GELU_ERF : REMAT_GELU_TANH;
        cfg->tie_word_embeddings = pint(c, "tie_word_embeddings") != 0;
    } else {
        cr_assert_str_eq(c->op, "llama");
        RT_OK(remat_model_config_default(cfg, REMAT_MODEL_LLAMA));
        cfg->n_layers = (int)pint(c, "num_hidden_layers");
        cfg->n_heads = (int)pint(c, "num_attention_heads");
        cfg->n_kv_heads = (int)pint(c, "num_key_value_heads");
        cfg->hidden = pint(c, "hidden_size");
        cfg->intermediate = pint(c, "intermediate_size");
        cfg->head_dim = pint(c, "head_dim");
        cfg->vocab = pint(c, "vocab_size");
        cfg->max_positions = pint(c, "max_position_embeddings");
        cfg->norm_eps = pdouble(c, "rms_norm_eps");
        cfg->rope_theta = pdouble(c, "rope_theta");
        cfg->tie_word_embeddings = pint(c, "tie_word_embeddings") != 0;
        cfg->attention_bias = pint(c, "attention_bias") != 0;
        cfg->mlp_bias = pint(c, "mlp_bias") != 0;
    }
    cfg->embd_pdrop = cfg->attn_pdrop = cfg->resid_pdrop = 0;
}

/* |got - exp| <= 1e-5 · max|exp| + 1e-5 · |exp| elementwise. */
static void expect_close(const remat_tensor *got, const fx_tensor *exp, const char *what) {
    double scale = 0;
    for (int64_t i = 0; i < exp->n_values; i++) scale = fmax(scale, fabs(exp->values[i]));
    char msg[1024];
    int64_t bad = fx_compare(got, exp, 1e-5 * scale, 1e-5, msg, sizeof msg);
    cr_expect_eq(bad, 0, "%s: %lld elements differ from transformers: %s", what, (long long)bad,
                 msg);
}

/* ---- the KV cache ---- */
/* Logits of ids[:, a:b] through the cache. */
static remat_tensor *cached_chunk(remat_model *m, remat_model_cache *c, remat_tensor *ids,
                                  int64_t a, int64_t b) {
    remat_tensor *part = NULL, *logits = NULL;
    RT_OK(remat_slice(&part, ids, 1, a, b, 1));
    RT_OK(remat_model_forward_cached(&logits, m, c, part));
    remat_release(part);
    return logits;
}

/* Prefill, then one token at a time, then a chunk after cached positions
 * (the lower-right causal mask): the logits of the full
 * forward, within 1e-5 of their largest. */
static void cached_matches_full(remat_model *m, remat_tensor *ids) {
    const int64_t T = remat_size(ids, 1);
    cr_assert(T >= 7);
    remat_tensor *full = NULL;
    bool prev = remat_no_grad_begin();
    RT_OK(remat_model_forward(&full, m, ids, NULL));
    remat_grad_mode_restore(prev);
    double *fv = rt_values(full), scale = 0;
    for (int64_t i = 0; i < remat_numel(full); i++) scale = fmax(scale, fabs(fv[i]));
    free(fv);
    remat_model_cache *c = NULL;
    RT_OK(remat_model_cache_create(&c, m, remat_size(ids, 0), T));
    const int64_t cuts[] = {0, 3, 4, 5, T};
    for (int k = 0; k + 1 < (int)(sizeof cuts / sizeof *cuts); k++) {
        remat_tensor *got = cached_chunk(m, c, ids, cuts[k], cuts[k + 1]), *want = NULL;
        cr_assert_eq(remat_model_cache_length(c), cuts[k + 1]);
        cr_assert(!remat_requires_grad(got), "the cached forward runs without grad");
        RT_OK(remat_slice(&want, full, 1, cuts[k], cuts[k + 1], 1));
        double d = rt_max_abs_diff(got, want);
        cr_expect(d <= 1e-5 * scale,
                  "positions %lld..%lld through the cache: max diff %g (scale %g)",
                  (long long)cuts[k], (long long)cuts[k + 1], d, scale);
        remat_release(got);
        remat_release(want);
    }
    /* full: one more position is refused, the cache unchanged */
    remat_tensor *one = NULL, *l = NULL;
    RT_OK(remat_slice(&one, ids, 1, 0, 1, 1));
    RT_FAILS(remat_model_forward_cached(&l, m, c, one), REMAT_EINVAL, "cache holds");
    cr_assert_eq(remat_model_cache_length(c), T);
    remat_model_cache_reset(c);
    cr_assert_eq(remat_model_cache_length(c), 0);
    remat_release(one);
    remat_model_cache_free(c);
    remat_release(full);
}

/* Greedy decoding (remat_model_generate, temperature 0) of the first
 * sequence's first 3 ids gives transformers' tokens. */
static void expect_greedy(remat_model *m, remat_tensor *ids, const fx_tensor *want) {
    cr_assert(want, "no greedy tokens in the fixture");
    remat_tensor *row = NULL, *prompt = NULL, *got = NULL;
    RT_OK(remat_slice(&row, ids, 0, 0, 1, 1));
    RT_OK(remat_slice(&prompt, row, 1, 0, 3, 1));
    RT_OK(remat_model_generate(&got, m, prompt, want->numel, 0.0, 0));
    cr_assert_eq(remat_size(got, 1), want->numel);
    for (int64_t i = 0; i < want->numel; i++)
        cr_expect_eq((int64_t)rt_item_at(got, i), (int64_t)want->values[i],
                     "greedy token %lld: %lld, transformers %lld", (long long)i,
                     (long long)rt_item_at(got, i), (long long)want->values[i]);
    remat_release(got);
    remat_release(prompt);
    remat_release(row);
}

static void run_hf_case(const char *name) {
    char err[512];
    fx_case *c = fx_load(name, err, sizeof err);
    cr_assert(c, "%s", err);
    remat_model_config cfg;
    fixture_config(c, &cfg);
    remat_model *m = NULL;
    RT_OK(remat_model_create(&m, &cfg, rt_tensor_device()));
    remat_model_set_training(m, false);
    /* the parameters: HF's named_parameters(), in order, with its shapes */
    int n_inputs = fx_count(c, FX_INPUT);
    cr_assert_eq(remat_model_n_params(m), n_inputs - 2, "%s: %d parameters, transformers has %d",
                 name, remat_model_n_params(m), n_inputs - 2);
    bool prev = remat_no_grad_begin();
    for (int i = 0; i < remat_model_n_params(m); i++) {
        const fx_tensor *ft = fx_nth(c, FX_INPUT, i + 2);
        const char *pname = NULL;
        remat_tensor *p = remat_model_param(m, i, &pname);
        cr_assert_str_eq(pname, ft->name, "%s: parameter %d", name, i);
        cr_assert_eq(remat_model_find_param(m, ft->name), p);
        cr_assert_eq(remat_ndim(p), ft->ndim, "%s", ft->name);
        for (int d = 0; d < ft->ndim; d++)
            cr_assert_eq(remat_size(p, d), ft->shape[d], "%s dim %d", ft->name, d);
        remat_tensor *v = NULL;
        RT_OK(fx_make_tensor(ft, &v));
        v = rt_to_test_device(v);
        RT_OK(remat_copy_(p, v));
        remat_release(v);
    }
    remat_grad_mode_restore(prev);
    remat_tensor *ids = NULL, *targets = NULL, *logits = NULL, *loss = NULL;
    RT_OK(fx_make_tensor(fx_get(c, FX_INPUT, "ids"), &ids));
    RT_OK(fx_make_tensor(fx_get(c, FX_INPUT, "targets"), &targets));
    RT_OK(remat_model_forward(&logits, m, ids, NULL));
    expect_close(logits, fx_get(c, FX_OUTPUT, "logits"), "logits");
    RT_OK(remat_model_loss(&loss, m, ids, targets, NULL));
    expect_close(loss, fx_get(c, FX_OUTPUT, "loss"), "loss");
    RT_OK(remat_backward_scalar(loss));
    for (int i = 0; i < remat_model_n_params(m); i++) {
        const char *pname = NULL;
        remat_tensor *p = remat_model_param(m, i, &pname);
        const fx_tensor *g = fx_get(c, FX_GRAD, pname);
        cr_assert(g, "%s: no gradient of %s in the fixture", name, pname);
        remat_tensor *pg = remat_tensor_grad(p);
        cr_assert(pg, "%s: no gradient", pname);
        expect_close(pg, g, pname);
    }
    cached_matches_full(m, ids);
    expect_greedy(m, ids, fx_get(c, FX_OUTPUT, "greedy"));
    remat_release(logits);
    remat_release(loss);
    remat_release(ids);
    remat_release(targets);
    remat_model_free(m);
    fx_free(c);
    cr_assert_eq(remat_live_tensors(), 0);
}

Test(models_hf, gpt2_tied) { run_hf_case("hf/gpt2_tied"); }
Test(models_hf, gpt2_untied_odd_widths_erf_gelu) { run_hf_case("hf/gpt2_untied_odd"); }
Test(models_hf, llama_gqa_tied) { run_hf_case("hf/llama_gqa_tied"); }
Test(models_hf, llama_mqa_untied_large_theta) { run_hf_case("hf/llama_mqa_untied"); }
Test(models_hf, llama_odd_width_biases_small_theta) { run_hf_case("hf/llama_odd_bias"); }
Test(models_hf, llama_head_dim_not_width_over_heads) { run_hf_case("hf/llama_head_dim"); }

/* ---- every strategy bitwise equal to none --------------------------------------------------- */
#define B 2
#define T 6

typedef struct run_out {
    remat_tensor *loss;
    int n;
    remat_tensor *grads[128];
} run_out;

static void run_out_free(run_out *r) {
    remat_release(r->loss);
    for (int i = 0; i < r->n; i++) remat_release(r->grads[i]);
    memset(r, 0, sizeof *r);
}

static remat_tensor *random_ids(int64_t vocab, uint64_t seed) {
    int64_t v[B * T];
    uint64_t s = seed;
    for (int i = 0; i < B * T; i++) v[i] = (int64_t)(fx_splitmix64(&s) % (uint64_t)vocab);
    remat_tensor *t = NULL;
    RT_OK(remat_from_data(&t, 2, (int64_t[]){B, T}, REMAT_I64, v));
    return t;
}

/* One step: seed, loss under s (and autocast), backward; the loss and a
 * copy of every .grad. */
static void step(remat_model *m, remat_tensor *ids, remat_tensor *targets, const remat_strategy *s,
                 bool bf16, run_out *out) {
    memset(out, 0, sizeof *out);
    remat_model_zero_grad(m);
    remat_manual_seed(4242);
    remat_autocast_state prev;
    RT_OK(remat_autocast_begin(&prev, rt_tensor_device().type, REMAT_BF16, bf16));
    int rc = remat_model_loss(&out->loss, m, ids, targets, s);
    remat_autocast_end(&prev);
    RT_OK(rc);
    RT_OK(remat_backward_scalar(out->loss));
    out->n = remat_model_n_params(m);
    cr_assert(out->n <= 128);
    for (int i = 0; i < out->n; i++) {
        remat_tensor *g = remat_tensor_grad(remat_model_param(m, i, NULL));
        cr_assert(g, "parameter %d has no gradient", i);
        out->grads[i] = remat_retain(g);
    }
    remat_model_zero_grad(m);
}

static void expect_same(const run_out *a, const run_out *b, const remat_model *m,
                        const char *what) {
    cr_expect(rt_bitwise_equal(a->loss, b->loss), "%s: loss differs from none", what);
    for (int i = 0; i < a->n; i++) {
        const char *name = NULL;
        remat_model_param(m, i, &name);
        cr_expect(rt_bitwise_equal(a->grads[i], b->grads[i]),
                  "%s: gradient of %s differs from none (max diff %g)", what, name,
                  rt_max_abs_diff(a->grads[i], b->grads[i]));
    }
}

/* One step as step() does it, with the chain written out: embed, the n stages under s
 * (remat_run_chain), head and loss, backward. */
static void step_chain(remat_model *m, remat_tensor *ids, remat_tensor *targets, int n,
                       const remat_stage *stages, const remat_strategy *s, bool bf16,
                       run_out *out) {
    memset(out, 0, sizeof *out);
    remat_model_zero_grad(m);
    remat_manual_seed(4242);
    remat_autocast_state prev;
    RT_OK(remat_autocast_begin(&prev, rt_tensor_device().type, REMAT_BF16, bf16));
    remat_tensor *x = NULL, *y = NULL;
    int rc = remat_model_embed(&x, m, ids);
    if (!rc) rc = remat_run_chain(&y, n, stages, x, s);
    if (!rc) rc = remat_model_head(&out->loss, m, y, targets);
    remat_autocast_end(&prev);
    remat_release(x);
    remat_release(y);
    RT_OK(rc);
    RT_OK(remat_backward_scalar(out->loss));
    out->n = remat_model_n_params(m);
    for (int i = 0; i < out->n; i++)
        out->grads[i] = remat_retain(remat_tensor_grad(remat_model_param(m, i, NULL)));
    remat_model_zero_grad(m);
}

/* The half-block stages (remat_model_half_stages): alone, after whole blocks, and under an
 * op-level plan over them; every run bitwise ref. */
static void half_stages(remat_model *m, remat_tensor *ids, remat_tensor *targets, bool bf16,
                        const run_out *ref) {
    const remat_stage *whole = NULL, *halves = NULL;
    const int L = remat_model_stages(m, &whole);
    cr_assert_eq(remat_model_half_stages(m, &halves), 2 * L);
    remat_stage mix[64];
    cr_assert(2 * L <= 64);
    run_out got;
    const int splits[2] = {0, L - 1}; /* whole blocks before the halves: none; all but one */
    for (int j = 0; j < 2; j++) {
        const int w = splits[j];
        int n = 0;
        for (int k = 0; k < w; k++) mix[n++] = whole[k];
        for (int i = 2 * w; i < 2 * L; i++) mix[n++] = halves[i];
        step_chain(m, ids, targets, n, mix, NULL, bf16, &got);
        expect_same(ref, &got, m, w ? "the last block in halves" : "half stages");
        run_out_free(&got);
    }
    /* an op-level plan over the halves, a third of the way from the minimum to store-all */
    remat_tensor *x = NULL;
    remat_profile *prof = NULL;
    remat_op_profile *ops = NULL;
    remat_plan *plan = NULL;
    remat_autocast_state prev;
    RT_OK(remat_autocast_begin(&prev, rt_tensor_device().type, REMAT_BF16, bf16));
    bool gm = remat_enable_grad_begin();
    RT_OK(remat_model_embed(&x, m, ids));
    const remat_profile_options po = {.runs = 1};
    RT_OK(remat_profile_stages(&prof, 2 * L, halves, x, &po));
    RT_OK(remat_profile_ops(&ops, 2 * L, halves, x, &po));
    remat_grad_mode_restore(gm);
    remat_autocast_end(&prev);
    size_t min = 0;
    RT_OK(remat_plan_min_budget(prof, &min));
    RT_OK(remat_plan_create(&plan, prof, SIZE_MAX));
    const size_t top = plan->peak_store_all;
    remat_plan_free(plan);
    RT_OK(remat_plan_create_ops(&plan, prof, ops, NULL, min + (top - min) / 3, NULL));
    bool ckpt = false;
    for (int k = 0; k < plan->n_stages; k++) ckpt |= plan->stages[k].action != REMAT_STAGE_STORE;
    cr_assert(ckpt, "the plan checkpoints nothing");
    const remat_strategy s = {.kind = REMAT_STRATEGY_PLAN, .plan = plan};
    step_chain(m, ids, targets, 2 * L, halves, &s, bf16, &got);
    expect_same(ref, &got, m, "an op-level plan over the half stages");
    run_out_free(&got);
    remat_plan_free(plan);
    remat_profile_free(prof);
    remat_op_profile_free(ops);
    remat_release(x);
}

static void every_strategy(const remat_model_config *cfg, bool bf16) {
    remat_model *m = NULL;
    remat_manual_seed(7);
    RT_OK(remat_model_create(&m, cfg, rt_tensor_device()));
    remat_tensor *ids = random_ids(cfg->vocab, 1), *targets = random_ids(cfg->vocab, 2);
    run_out ref, got;
    step(m, ids, targets, NULL, bf16, &ref);

    remat_policy *dots = NULL, *names = NULL, *all = NULL, *nothing = NULL;
    const char *saved[] = {"qkv", "attn_out", "q", "mlp_act"};
    RT_OK(remat_policy_dots_saveable(&dots));
    RT_OK(remat_policy_save_only_these_names(&names, 4, saved));
    RT_OK(remat_policy_everything_saveable(&all));
    RT_OK(remat_policy_nothing_saveable(&nothing));
    /* a plan between the smallest budget and store-all: some blocks checkpointed */
    const remat_stage *stages = NULL;
    int n = remat_model_stages(m, &stages);
    remat_tensor *x = NULL;
    remat_profile *prof = NULL;
    remat_plan *plan = NULL;
    remat_autocast_state prev;
    RT_OK(remat_autocast_begin(&prev, rt_tensor_device().type, REMAT_BF16, bf16));
    bool gm = remat_enable_grad_begin();
    RT_OK(remat_model_embed(&x, m, ids));
    RT_OK(remat_profile_stages(&prof, n, stages, x, &(remat_profile_options){.runs = 1}));
    remat_grad_mode_restore(gm);
    remat_autocast_end(&prev);
    size_t min = 0;
    RT_OK(remat_plan_min_budget(prof, &min));
    RT_OK(remat_plan_create(&plan, prof, min + min / 8));
    cr_assert(plan->n_recomputed > 0, "the plan checkpoints nothing");

    const struct {
        const char *name;
        remat_strategy s;
    } cases[] = {
        {"block", {.kind = REMAT_STRATEGY_BLOCK}},
        {"block(reentrant)", {.kind = REMAT_STRATEGY_BLOCK, .reentrant = true}},
        {"sequential=2", {.kind = REMAT_STRATEGY_SEQUENTIAL, .segments = 2}},
        {"sequential=3(reentrant)",
         {.kind = REMAT_STRATEGY_SEQUENTIAL, .segments = 3, .reentrant = true}},
        {"selective=dots", {.kind = REMAT_STRATEGY_SELECTIVE, .policy = dots}},
        {"selective=names", {.kind = REMAT_STRATEGY_SELECTIVE, .policy = names}},
        {"selective=everything", {.kind = REMAT_STRATEGY_SELECTIVE, .policy = all}},
        {"selective=nothing", {.kind = REMAT_STRATEGY_SELECTIVE, .policy = nothing}},
        {"budget", {.kind = REMAT_STRATEGY_PLAN, .plan = plan}},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        step(m, ids, targets, &cases[i].s, bf16, &got);
        expect_same(&ref, &got, m, cases[i].name);
        run_out_free(&got);
    }
    half_stages(m, ids, targets, bf16, &ref);
    remat_plan_free(plan);
    remat_profile_free(prof);
    remat_release(x);
    remat_policy_release(dots);
    remat_policy_release(names);
    remat_policy_release(all);
    remat_policy_release(nothing);
    run_out_free(&ref);
    remat_release(ids);
    remat_release(targets);
    remat_model_free(m);
    cr_assert_eq(remat_live_tensors(), 0);
}

static remat_model_config tiny_gpt2(void) {
    remat_model_config c;
    RT_OK(remat_model_config_default(&c, REMAT_MODEL_GPT2));
    c.n_layers = 4, c.n_heads = 2, c.n_kv_heads = 2, c.hidden = 16, c.vocab = 37;
    c.max_positions = 8;
    c.initializer_range = 0.2; /* far from uniform logits */
    return c;
}

Test(models_strategies, gpt2_dropout_f32) { /* HF's dropouts, 0.1: composed attention */
    remat_model_config c = tiny_gpt2();
    every_strategy(&c, false);
}

Test(models_strategies, gpt2_fused_attention_f32) {
    remat_model_config c = tiny_gpt2();
    c.attn_pdrop = 0; /* the fused attention; dropout elsewhere */
    every_strategy(&c, false);
}

Test(models_strategies, gpt2_bf16_autocast) {
    remat_model_config c = tiny_gpt2();
    c.attn_pdrop = 0;
    every_strategy(&c, true);
}

static remat_model_config tiny_llama(int kv_heads, bool tied) {
    remat_model_config c;
    RT_OK(remat_model_config_default(&c, REMAT_MODEL_LLAMA));
    c.n_layers = 4, c.n_heads = 4, c.n_kv_heads = kv_heads, c.hidden = 24, c.intermediate = 40;
    c.vocab = 41, c.max_positions = 8, c.tie_word_embeddings = tied;
    c.initializer_range = 0.2;
    return c;
}

Test(models_strategies, llama_gqa_f32) {
    remat_model_config c = tiny_llama(2, false);
    every_strategy(&c, false);
}

Test(models_strategies, llama_mqa_tied_f32) {
    remat_model_config c = tiny_llama(1, true);
    every_strategy(&c, false);
}

Test(models_strategies, llama_gqa_bf16_autocast) {
    remat_model_config c = tiny_llama(2, false);
    c.attention_bias = c.mlp_bias = true;
    every_strategy(&c, true);
}

/* ---- refusals ------------------------------------------------------------------------------- */
Test(models_errors, configs_name_the_field) {
    remat_model_config c = tiny_gpt2();
    remat_model *m = NULL;
    c.n_heads = 3;
    RT_FAILS(remat_model_create(&m, &c, REMAT_DEVICE_CPU), REMAT_EINVAL, "n_head");
    cr_assert_null(m);
    c = tiny_gpt2();
    c.norm_eps = 0;
    RT_FAILS(remat_model_config_check(&c), REMAT_EINVAL, "layer_norm_epsilon");
    c = tiny_gpt2();
    c.resid_pdrop = 1;
    RT_FAILS(remat_model_config_check(&c), REMAT_EINVAL, "resid_pdrop");
    c = tiny_gpt2();
    c.vocab = 0;
    RT_FAILS(remat_model_config_check(&c), REMAT_EINVAL, "vocab_size");
    RT_FAILS(remat_model_config_default(&c, (remat_model_family)9), REMAT_EINVAL, "family");
    c = tiny_llama(3, false); /* 3 kv heads for 4 heads */
    RT_FAILS(remat_model_config_check(&c), REMAT_EINVAL, "num_key_value_heads");
    c = tiny_llama(2, false);
    c.rope_theta = 0;
    RT_FAILS(remat_model_config_check(&c), REMAT_EINVAL, "rope_theta");
    c = tiny_llama(2, false);
    c.head_dim = 5;
    RT_FAILS(remat_model_config_check(&c), REMAT_EINVAL, "even");
    c = tiny_llama(2, false);
    c.norm_eps = -1;
    RT_FAILS(remat_model_config_check(&c), REMAT_EINVAL, "rms_norm_eps");
    c = tiny_llama(2, false);
    c.attn_pdrop = 0.1;
    RT_FAILS(remat_model_config_check(&c), REMAT_EUNSUPPORTED, "attention_dropout");
    cr_assert_eq(remat_live_tensors(), 0);
}

Test(models_errors, inputs) {
    remat_model_config c = tiny_gpt2();
    remat_model *m = NULL;
    RT_OK(remat_model_create(&m, &c, REMAT_DEVICE_CPU));
    remat_tensor *logits = NULL, *long_ids = NULL, *f = NULL;
    int64_t v[9] = {0};
    RT_OK(remat_from_data(&long_ids, 2, (int64_t[]){1, 9}, REMAT_I64, v));
    RT_FAILS(remat_model_forward(&logits, m, long_ids, NULL), REMAT_EINVAL, "n_positions");
    cr_assert_null(logits);
    RT_OK(remat_zeros(&f, 2, (int64_t[]){1, 4}, REMAT_F32, REMAT_DEVICE_CPU));
    RT_FAILS(remat_model_forward(&logits, m, f, NULL), REMAT_EINVAL, "i64");
    remat_strategy bad = {.kind = REMAT_STRATEGY_SEQUENTIAL, .segments = 9};
    remat_tensor *ids = random_ids(c.vocab, 3);
    RT_FAILS(remat_model_forward(&logits, m, ids, &bad), REMAT_EINVAL, "segments");
    remat_release(ids);
    remat_release(long_ids);
    remat_release(f);
    remat_model_free(m);
    remat_model_free(NULL);
    cr_assert_eq(remat_live_tensors(), 0);
}

Test(models_api, outputs_belong_to_the_open_scope) {
    remat_model_config c = tiny_gpt2();
    remat_model *m = NULL;
    RT_OK(remat_model_create(&m, &c, rt_tensor_device()));
    remat_model_set_training(m, false);
    remat_tensor *ids = random_ids(c.vocab, 5), *logits = NULL, *x = NULL, *y = NULL, *h = NULL;
    const remat_stage *stages = NULL;
    const int n = remat_model_stages(m, &stages);
    cr_assert_eq(n, c.n_layers);
    const int64_t live = remat_live_tensors();
    remat_scope *s = NULL;
    RT_OK(remat_scope_begin(&s));
    RT_OK(remat_model_forward(&logits, m, ids, NULL));
    RT_OK(remat_model_embed(&x, m, ids));
    RT_OK(remat_run_chain(&y, n, stages, x, NULL));
    RT_OK(remat_model_head(&h, m, y, NULL));
    cr_assert(rt_bitwise_equal(logits, h), "head(chain(embed)) differs from forward");
    RT_OK(remat_scope_end(s)); /* releases the four outputs */
    cr_assert_eq(remat_live_tensors(), live);
    remat_release(ids);
    remat_model_free(m);
    cr_assert_eq(remat_live_tensors(), 0);
}

/* The parameters as a collection: saved with remat_safetensors_save and
 * loaded by name into another model, which then gives bitwise the same
 * logits. On the test device (make test-fenced: parameters the host
 * cannot address, loaded through the device's copies). */
static void params_round_trip(const remat_model_config *c) {
    remat_model *a = NULL, *b = NULL;
    remat_manual_seed(1);
    RT_OK(remat_model_create(&a, c, rt_tensor_device()));
    remat_manual_seed(2);
    RT_OK(remat_model_create(&b, c, rt_tensor_device()));
    remat_model_set_training(a, false);
    remat_model_set_training(b, false);
    remat_params *pa = NULL, *pb = NULL, *sd = NULL;
    RT_OK(remat_model_params(a, false, &pa));
    cr_assert_eq(remat_params_count(pa), remat_model_n_params(a));
    for (int i = 0; i < remat_model_n_params(a); i++) {
        const char *name = NULL;
        remat_tensor *t = remat_model_param(a, i, &name);
        cr_assert_str_eq(remat_params_name(pa, i), name);
        cr_assert_eq(remat_params_tensor(pa, i), t);
    }
    RT_OK(remat_model_params(a, true, &sd));
    cr_assert_eq(remat_params_count(sd),
                 remat_model_n_params(a) + (c->tie_word_embeddings ? 1 : 0));
    if (c->tie_word_embeddings)
        cr_assert_eq(remat_params_get(sd, "lm_head.weight"), remat_model_param(a, 0, NULL));
    char path[] = "/tmp/remat_test_models_XXXXXX";
    int fd = mkstemp(path);
    cr_assert(fd >= 0);
    close(fd);
    RT_OK(remat_safetensors_save(path, pa, 0, NULL));
    RT_OK(remat_model_params(b, false, &pb));
    RT_OK(remat_safetensors_load(pb, path, NULL));
    unlink(path);
    remat_tensor *ids = random_ids(c->vocab, 9), *la = NULL, *lb = NULL;
    RT_OK(remat_model_forward(&la, a, ids, NULL));
    RT_OK(remat_model_forward(&lb, b, ids, NULL));
    cr_assert(rt_bitwise_equal(la, lb), "the loaded model's logits differ");
    remat_release(la), remat_release(lb), remat_release(ids);
    remat_params_free(pa), remat_params_free(pb), remat_params_free(sd);
    remat_model_free(a), remat_model_free(b);
    cr_assert_eq(remat_live_tensors(), 0);
}

Test(models_api, gpt2_params_through_safetensors) {
    remat_model_config c = tiny_gpt2();
    params_round_trip(&c);
}

Test(models_api, llama_params_through_safetensors) {
    remat_model_config c = tiny_llama(2, true);
    params_round_trip(&c);
}
