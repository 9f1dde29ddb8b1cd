/* tools/train/hf_run.c — `remat eval` and `remat sample --init-from` on a Hugging
 * Face model directory, run on the library's model object (remat/models.h). */
#include "hf_run.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/util.h"
#include "io/hf_dir.h"
#include "io/json.h"
#include "io/training_save.h"
#include "models.h"
#include "remat/autocast.h"
#include "step.h"

/* The config.json key of the model's longest sequence. */
static const char *positions_key(const remat_model_config *cfg) {
    return cfg->family == REMAT_MODEL_GPT2 ? "n_positions" : "max_position_embeddings";
}

static int print_json_line(util_str *out) {
    if (out->oom) return remat_set_error(REMAT_ENOMEM, "remat: out of memory");
    puts(out->s);
    return REMAT_OK;
}

int hf_apply_config(config *c, const hf_dir *d) {
    const remat_model_config *cfg = &d->cfg;
    c->hf = d;
    c->layers = cfg->n_layers;
    c->width = (int)cfg->hidden;
    c->heads = cfg->n_heads;
    c->untied = !cfg->tie_word_embeddings;
    if (c->context > cfg->max_positions) {
        if (c->set_context || c->resume)
            return remat_set_error(REMAT_EINVAL,
                                   "--context %d is longer than the model's %lld positions "
                                   "(config.json: %s)",
                                   c->context, (long long)cfg->max_positions, positions_key(cfg));
        c->context = (int)cfg->max_positions; /* the default, shortened to fit */
    }
    return REMAT_OK;
}

int hf_check_flags(config *c, const remat_model *m, bool bench) {
    char err[512];
    c->hf_tags = remat_model_tags(m, &c->n_hf_tags);
    if (args_check_model(c, bench, err, sizeof err))
        return remat_set_error(REMAT_EINVAL, "%s", err);
    return REMAT_OK;
}

/* ---- eval ------------------------------------------------------------------------------ */

/* The loss summed over windows [w0, w0 + nb) (window k: tokens kT .. kT + T). */
static int eval_batch(remat_model *m, const uint32_t *ids, int64_t T, int64_t w0, int64_t nb,
                      int64_t *x, int64_t *y, double *sum) {
    for (int64_t r = 0; r < nb; r++)
        for (int64_t t = 0; t < T; t++) {
            x[r * T + t] = ids[(w0 + r) * T + t];
            y[r * T + t] = ids[(w0 + r) * T + t + 1];
        }
    remat_tensor *xt = NULL, *yt = NULL, *loss = NULL;
    double l = 0;
    int rc = remat_from_data(&xt, 2, (int64_t[]){nb, T}, REMAT_I64, x);
    if (!rc) rc = remat_from_data(&yt, 2, (int64_t[]){nb, T}, REMAT_I64, y);
    if (!rc) rc = remat_model_loss(&loss, m, xt, yt, NULL);
    if (!rc) rc = remat_item(loss, &l);
    if (!rc) *sum += l * (double)(nb * T); /* the mean over this batch's tokens */
    remat_release(loss);
    remat_release(xt);
    remat_release(yt);
    return rc;
}

static int eval_run(config *c, hf_dir *d, remat_model **m, double *loss, int64_t *tokens,
                    int64_t *windows, double *seconds) {
    uint32_t *ids = NULL;
    size_t n = 0;
    int rc = hf_dir_open(d, c->init_from, "--init-from");
    if (!rc) rc = hf_model_create(m, d, c->device, true);
    if (!rc) rc = hf_read_tokens(d, c->data, "--data", &ids, &n);
    if (rc) return rc;
    remat_model_set_training(*m, false);
    const remat_model_config *cfg = &d->cfg;
    int64_t T = c->set_context ? c->context : cfg->max_positions;
    if (T > cfg->max_positions) {
        free(ids);
        return remat_set_error(REMAT_EINVAL,
                               "--context %lld is longer than the model's %lld positions "
                               "(%s/config.json: %s)",
                               (long long)T, (long long)cfg->max_positions, c->init_from,
                               positions_key(cfg));
    }
    c->context = (int)T;
    const int64_t W = n > 0 ? (int64_t)(n - 1) / T : 0;
    if (W < 1) {
        free(ids);
        return remat_set_error(REMAT_EINVAL,
                               "--data %s: %zu tokens, fewer than the %lld of one window "
                               "(--context + 1)",
                               c->data, n, (long long)T + 1);
    }
    const int64_t B = c->batch < W ? c->batch : W;
    int64_t *x = malloc(sizeof *x * (size_t)(B * T)), *y = malloc(sizeof *y * (size_t)(B * T));
    if (!x || !y) rc = remat_set_error(REMAT_ENOMEM, "remat eval: out of memory");
    double sum = 0, t0 = util_now();
    bool prev = remat_no_grad_begin();
    remat_autocast_state ac;
    if (!rc) rc = remat_autocast_begin(&ac, c->device.type, REMAT_BF16, c->autocast);
    for (int64_t w = 0; !rc && w < W; w += B)
        rc = eval_batch(*m, ids, T, w, W - w < B ? W - w : B, x, y, &sum);
    remat_autocast_end(&ac);
    remat_grad_mode_restore(prev);
    *seconds = util_now() - t0;
    *tokens = W * T;
    *windows = W;
    *loss = sum / (double)(W * T);
    free(x);
    free(y);
    free(ids);
    return rc;
}

int cmd_eval(config *c) {
    int threads = step_setup_process(c->threads);
    hf_dir d;
    memset(&d, 0, sizeof d);
    remat_model *m = NULL;
    double loss = 0, seconds = 0;
    int64_t tokens = 0, windows = 0;
    int rc = eval_run(c, &d, &m, &loss, &tokens, &windows, &seconds);
    if (!rc) {
        fprintf(stderr,
                "remat eval: %s model from %s, %lld windows of %d + 1 tokens, %d threads, "
                "%.2f s (%.0f tokens/s)\n",
                hf_family_name(d.cfg.family), c->init_from, (long long)windows, c->context, threads,
                seconds, seconds > 0 ? (double)tokens / seconds : 0.0);
        if (c->json) {
            util_str out = {0};
            json j;
            json_start(&j, &out);
            json_object(&j, NULL);
            json_str(&j, "command", "eval");
            json_str(&j, "init_from", c->init_from);
            json_str(&j, "data", c->data);
            json_str(&j, "model", d.cfg.family == REMAT_MODEL_GPT2 ? "gpt2" : "llama");
            json_int(&j, "context", c->context);
            json_int(&j, "windows", windows);
            json_int(&j, "tokens", tokens);
            json_num(&j, "loss", loss);
            json_num(&j, "perplexity", exp(loss));
            json_bool(&j, "autocast_bf16", c->autocast);
            json_fixed(&j, "seconds", seconds, 3);
            json_fixed(&j, "tokens_per_s", seconds > 0 ? (double)tokens / seconds : 0, 1);
            json_end(&j);
            rc = print_json_line(&out);
            util_str_free(&out);
        } else {
            printf("loss %.6f (perplexity %.3f) over %lld tokens of %s\n", loss, exp(loss),
                   (long long)tokens, c->data);
        }
    }
    remat_model_free(m);
    hf_dir_free(&d);
    if (rc) {
        fprintf(stderr, "remat eval: %s\n", remat_last_error());
        return 1;
    }
    return fflush(stdout) == 0 ? 0 : 1;
}

/* ---- sample ---------------------------------------------------------------------------- */

typedef struct sampled {
    uint32_t *prompt;
    size_t n_prompt;
    int64_t *ids; /* generated */
    int64_t n;
    bool eos; /* stopped at an end-of-sequence token */
    double seconds;
} sampled;

static bool is_eos(const remat_hf_extra *x, int64_t id) {
    for (int i = 0; i < x->n_eos; i++)
        if (x->eos_token_id[i] == id) return true;
    return false;
}

/* Runs ids (1, T) through the cache; *next = the token picked after the last. */
static int step_cached(remat_model *m, remat_model_cache *cache, const int64_t *ids, int64_t T,
                       const config *c, float *buf, int64_t V, int64_t *next) {
    remat_tensor *x = NULL, *logits = NULL;
    int rc = remat_from_data(&x, 2, (int64_t[]){1, T}, REMAT_I64, ids);
    if (!rc) rc = remat_model_forward_cached(&logits, m, cache, x);
    if (!rc) rc = remat_copy_to_buffer(logits, REMAT_F32, buf, T * V);
    if (!rc) rc = remat_sample_logits(buf + (T - 1) * V, V, c->temperature, c->top_k, next);
    remat_release(logits);
    remat_release(x);
    return rc;
}

/* A --resume file of a Hugging Face run: its config.json, the tokenizer of the
 * directory it started from, the weights of the file (pm owns the model). */
static int resumed_model(config *c, hf_dir *d, model *pm, remat_model **m) {
    saved_state s;
    int rc = savefile_read(c->resume, &s);
    size_t n = 0, dn = 0;
    const char *text = rc ? NULL : savefile_record(&s, "hf.config", &n);
    const char *dir = rc ? NULL : savefile_record(&s, "hf.dir", &dn);
    char dir_path[4096] = "", name[4200];
    if (dir && dn < sizeof dir_path) snprintf(dir_path, sizeof dir_path, "%.*s", (int)dn, dir);
    snprintf(name, sizeof name, "%s (its config.json)", c->resume);
    if (!rc && !text)
        rc = remat_set_error(REMAT_EFORMAT, "--resume %s: the file has no hf.config record",
                             c->resume);
    if (!rc) rc = hf_dir_from_config(d, text, n, name, dir_path[0] ? dir_path : NULL, "--resume");
    config mc = *c;
    mc.model = MODEL_HF;
    mc.hf = d;
    mc.context = (int)d->cfg.max_positions;
    if (!rc) rc = model_init(pm, &mc, s.seed); /* resume: the weights come from the file */
    if (!rc) rc = savefile_load_params(&s, c->resume, pm);
    savefile_free(&s);
    if (!rc) *m = pm->lib;
    return rc;
}

static int sample_run(config *c, hf_dir *d, model *pm, remat_model **m, sampled *s) {
    const char *src = c->init_from ? c->init_from : c->resume;
    int rc =
        c->init_from ? hf_dir_open(d, c->init_from, "--init-from") : resumed_model(c, d, pm, m);
    if (!rc && !d->tok)
        rc = remat_set_error(REMAT_EINVAL,
                             "%s %s: %s has no tokenizer.json (remat sample encodes the prompt "
                             "and decodes the tokens with it)",
                             c->init_from ? "--init-from" : "--resume", src,
                             c->init_from ? "the directory" : "the directory the run started from");
    if (!rc && c->init_from) rc = hf_model_create(m, d, c->device, true);
    if (!rc)
        rc = remat_tokenizer_encode(d->tok, c->prompt, strlen(c->prompt), true, &s->prompt,
                                    &s->n_prompt);
    if (rc) return rc;
    remat_model_set_training(*m, false);
    const remat_model_config *cfg = &d->cfg;
    if (s->n_prompt == 0 && d->extra.bos_token_id < 0)
        return remat_set_error(REMAT_EINVAL,
                               "--prompt is empty and %s's config.json has no bos_token_id to "
                               "start from",
                               src);
    if (s->n_prompt == 0) { /* start from the beginning-of-sequence token */
        free(s->prompt);
        if (!(s->prompt = malloc(sizeof *s->prompt)))
            return remat_set_error(REMAT_ENOMEM, "remat sample: out of memory");
        s->prompt[0] = (uint32_t)d->extra.bos_token_id;
        s->n_prompt = 1;
    }
    const int64_t P = (int64_t)s->n_prompt, N = c->tokens;
    if (P + N > cfg->max_positions)
        return remat_set_error(REMAT_EINVAL,
                               "a prompt of %lld tokens and --tokens %lld need %lld positions; the "
                               "model has %lld (%s: config.json: %s)",
                               (long long)P, (long long)N, (long long)P + (long long)N,
                               (long long)cfg->max_positions, src, positions_key(cfg));
    const int64_t V = cfg->vocab;
    int64_t *prompt = malloc(sizeof *prompt * (size_t)P);
    float *buf = malloc(sizeof *buf * (size_t)(P * V));
    s->ids = malloc(sizeof *s->ids * (size_t)(N ? N : 1));
    remat_model_cache *cache = NULL;
    if (!prompt || !buf || !s->ids)
        rc = remat_set_error(REMAT_ENOMEM, "remat sample: out of memory");
    for (int64_t i = 0; !rc && i < P; i++) prompt[i] = (int64_t)s->prompt[i];
    if (!rc && N > 0) rc = remat_model_cache_create(&cache, *m, 1, P + N);
    remat_manual_seed(c->seed);
    bool prev = remat_no_grad_begin();
    double t0 = util_now();
    int64_t next = 0;
    /* the prompt in one forward, then one token at a time through the cache */
    if (!rc && N > 0) rc = step_cached(*m, cache, prompt, P, c, buf, V, &next);
    while (!rc && s->n < N) {
        s->ids[s->n++] = next;
        if (is_eos(&d->extra, next)) {
            s->eos = true;
            break;
        }
        if (s->n < N) rc = step_cached(*m, cache, &next, 1, c, buf, V, &next);
    }
    s->seconds = util_now() - t0;
    remat_grad_mode_restore(prev);
    remat_model_cache_free(cache);
    free(prompt);
    free(buf);
    return rc;
}

static int sample_print(const config *c, const hf_dir *d, const sampled *s) {
    uint32_t *ids = malloc(sizeof *ids * (size_t)(s->n ? s->n : 1));
    char *text = NULL;
    size_t len = 0;
    int rc = ids ? REMAT_OK : remat_set_error(REMAT_ENOMEM, "remat sample: out of memory");
    for (int64_t i = 0; !rc && i < s->n; i++) ids[i] = (uint32_t)s->ids[i];
    if (!rc) rc = remat_tokenizer_decode(d->tok, ids, (size_t)s->n, true, &text, &len);
    free(ids);
    if (rc) return rc;
    const double tps = s->seconds > 0 ? (double)s->n / s->seconds : 0;
    fprintf(stderr,
            "remat sample: %lld tokens after a prompt of %zu in %.3f s (%.1f tokens/s, KV "
            "cache)%s\n",
            (long long)s->n, s->n_prompt, s->seconds, tps,
            s->eos ? "; stopped at the end-of-sequence token" : "");
    if (c->json) {
        util_str out = {0};
        json j;
        json_start(&j, &out);
        json_object(&j, NULL);
        json_str(&j, "command", "sample");
        json_str(&j, c->init_from ? "init_from" : "file", c->init_from ? c->init_from : c->resume);
        json_text(&j, "prompt", c->prompt);
        json_array(&j, "prompt_ids");
        for (size_t i = 0; i < s->n_prompt; i++) json_int(&j, NULL, s->prompt[i]);
        json_end(&j);
        json_array(&j, "ids");
        for (int64_t i = 0; i < s->n; i++) json_int(&j, NULL, s->ids[i]);
        json_end(&j);
        json_text(&j, "text", text);
        json_int(&j, "tokens", s->n);
        json_bool(&j, "eos", s->eos);
        json_num(&j, "temperature", c->temperature);
        json_int(&j, "top_k", c->top_k);
        json_uint(&j, "seed", c->seed);
        json_fixed(&j, "seconds", s->seconds, 4);
        json_fixed(&j, "tokens_per_s", tps, 2);
        json_end(&j);
        rc = print_json_line(&out);
        util_str_free(&out);
    } else {
        printf("%s%s\n", c->prompt, text);
    }
    free(text);
    return rc;
}

int cmd_sample_hf(config *c) {
    step_setup_process(c->threads);
    hf_dir d;
    memset(&d, 0, sizeof d);
    remat_model *m = NULL;
    model pm; /* a --resume file's model (owns m then) */
    memset(&pm, 0, sizeof pm);
    sampled s;
    memset(&s, 0, sizeof s);
    int rc = sample_run(c, &d, &pm, &m, &s);
    if (!rc) rc = sample_print(c, &d, &s);
    free(s.prompt);
    free(s.ids);
    if (pm.lib) model_free(&pm);
    else remat_model_free(m);
    hf_dir_free(&d);
    if (rc) {
        fprintf(stderr, "remat sample: %s\n", remat_last_error());
        return 1;
    }
    return fflush(stdout) == 0 ? 0 : 1;
}
