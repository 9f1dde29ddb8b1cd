/* tools/train/sample.c — `remat sample` (sample.h). */
#include "sample.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/util.h"
#include "hf_run.h"
#include "io/json.h"
#include "io/training_save.h"
#include "models.h"
#include "step.h"

int sample_pick(const float *logits, int v, double temperature, int top_k, int *out) {
    if (v < 1 || v > GPT_VOCAB) return remat_set_error(REMAT_EINVAL, "sample: %d logits", v);
    int64_t pick = 0;
    int rc = remat_sample_logits(logits, v, temperature, top_k, &pick);
    if (!rc) *out = (int)pick;
    return rc;
}

/* The GPT of the file, with its parameters. */
static int load_gpt(config *c, model *m) {
    saved_state s;
    int rc = savefile_read(c->resume, &s);
    if (!rc && s.model != MODEL_GPT)
        rc = remat_set_error(REMAT_EINVAL,
                             "--resume %s: the file holds %s; remat sample "
                             "needs a GPT (remat train --model gpt)",
                             c->resume, s.model == MODEL_LLAMA ? "a Llama" : "an MLP");
    if (!rc) {
        savefile_model_config(&s, c);
        if (c->width % c->heads != 0 || s.vocab != GPT_VOCAB)
            rc = remat_set_error(REMAT_EFORMAT, "--resume %s: corrupt header (model shape)",
                                 c->resume);
    }
    if (!rc) rc = model_init(m, c, s.seed);
    if (!rc) rc = savefile_load_params(&s, c->resume, m);
    savefile_free(&s);
    return rc;
}

/* The logits of the next byte after text[0..n): the model reads the last
 * --context bytes; `next` gets the byte sample_pick chooses. */
static int next_byte(model *m, const config *c, const unsigned char *text, size_t n, int *next) {
    int64_t T = (int64_t)n < m->context ? (int64_t)n : m->context;
    int64_t idx[ARGS_MAX_CONTEXT];
    for (int64_t t = 0; t < T; t++) idx[t] = text[n - (size_t)T + (size_t)t];
    batch b;
    memset(&b, 0, sizeof b);
    remat_tensor *logits = NULL;
    /* the logits read back (the model may be on a device the host cannot address) */
    float *host = malloc(sizeof(float) * (size_t)T * GPT_VOCAB);
    int rc = host ? remat_from_data(&b.idx, 2, (int64_t[]){1, T}, REMAT_I64, idx)
                  : remat_set_error(REMAT_ENOMEM, "remat sample: out of memory");
    if (!rc) rc = model_outputs(m, &b, &logits); /* (1, T, 256) */
    if (!rc) rc = remat_copy_to_buffer(logits, REMAT_F32, host, T * GPT_VOCAB);
    if (!rc)
        rc = sample_pick(host + (T - 1) * GPT_VOCAB, GPT_VOCAB, c->temperature, c->top_k, next);
    free(host);
    remat_release(logits);
    batch_free(&b);
    return rc;
}

static int print_json(const config *c, const unsigned char *text, size_t prompt_len, size_t n,
                      double seconds) {
    util_str out = {0};
    json j;
    json_start(&j, &out);
    json_object(&j, NULL);
    json_str(&j, "command", "sample");
    json_str(&j, "file", c->resume);
    json_bytes(&j, "prompt", c->prompt, prompt_len);
    json_bytes(&j, "text", text + prompt_len, n - prompt_len);
    json_int(&j, "tokens", (int64_t)(n - prompt_len));
    json_num(&j, "temperature", c->temperature);
    json_int(&j, "top_k", c->top_k);
    json_uint(&j, "seed", c->seed);
    json_int(&j, "context", c->context);
    json_fixed(&j, "tokens_per_s", seconds > 0 ? (double)(n - prompt_len) / seconds : 0, 2);
    json_end(&j);
    if (out.oom) {
        util_str_free(&out);
        return remat_set_error(REMAT_ENOMEM, "remat: out of memory");
    }
    puts(out.s);
    util_str_free(&out);
    return REMAT_OK;
}

int cmd_sample(config *c) {
    saved_state peek; /* a Hugging Face run's file samples as its model */
    if (savefile_read(c->resume, &peek) == REMAT_OK && peek.model == MODEL_HF) {
        savefile_free(&peek);
        return cmd_sample_hf(c);
    }
    savefile_free(&peek);
    step_setup_process(c->threads);
    const uint64_t seed = c->seed; /* the sampling's; the file's own seed made the model */
    model m;
    memset(&m, 0, sizeof m);
    size_t prompt_len = strlen(c->prompt);
    /* an empty prompt starts after a newline (which is not printed) */
    size_t lead = prompt_len ? 0 : 1, n = lead + prompt_len;
    unsigned char *text = malloc(n + (size_t)c->tokens + 1);
    int rc = text ? load_gpt(c, &m) : remat_set_error(REMAT_ENOMEM, "remat: out of memory");
    if (!rc) {
        text[0] = '\n';
        memcpy(text + lead, c->prompt, prompt_len);
        remat_manual_seed(seed);
        bool prev = remat_no_grad_begin();
        double t0 = util_now();
        for (long i = 0; !rc && i < c->tokens; i++) {
            int next = 0;
            rc = next_byte(&m, c, text, n, &next);
            if (!rc) text[n++] = (unsigned char)next;
        }
        double seconds = util_now() - t0;
        remat_grad_mode_restore(prev);
        c->seed = seed;
        if (!rc && c->json) {
            rc = print_json(c, text + lead, prompt_len, n - lead, seconds);
        } else if (!rc) {
            fwrite(text + lead, 1, n - lead, stdout);
            fputc('\n', stdout);
        }
    }
    free(text);
    model_free(&m);
    if (rc) {
        fprintf(stderr, "remat sample: %s\n", remat_last_error());
        return 1;
    }
    return fflush(stdout) == 0 ? 0 : 1;
}
