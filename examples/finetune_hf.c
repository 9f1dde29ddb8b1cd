/* examples/finetune_hf.c — fine-tune a Hugging Face GPT-2 or Llama from C: what
 * `remat train --init-from DIR --data FILE --checkpoint block --export OUT` does,
 * with the library's calls alone (README: "Fine-tune a Hugging Face model in C").
 *
 *     example_finetune_hf DIR TEXT OUT [STEPS]
 *
 * Reads DIR (config.json, model.safetensors, tokenizer.json), encodes TEXT with
 * the model's tokenizer, trains on windows of T+1 tokens with every block
 * checkpointed and AdamW, and writes OUT, a directory that
 * transformers.AutoModelForCausalLM.from_pretrained loads. Exits 1 when a call
 * fails or the loss did not go down. */
#include <stdio.h>
#include <stdlib.h>

#include <remat/remat.h>

#define T 16 /* tokens per window */
#define B 4  /* windows per step */

#define CHECK(call)                                                                                \
    do {                                                                                           \
        if ((rc = (call)) != REMAT_OK) goto done;                                                  \
    } while (0)

static char *read_text(const char *path, size_t *n) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    char *buf = malloc(1 << 20);
    *n = buf ? fread(buf, 1, 1 << 20, f) : 0;
    fclose(f);
    return buf;
}

int main(int argc, char **argv) {
    if (argc < 4) {
        fprintf(stderr, "usage: %s DIR TEXT OUT [STEPS]\n", argv[0]);
        return 2;
    }
    const int steps = argc > 4 ? atoi(argv[4]) : 20;
    char path[4096];
    remat_model_config cfg;
    remat_hf_extra extra;
    remat_model *m = NULL;
    remat_params *params = NULL;
    remat_tokenizer *tok = NULL;
    remat_optimizer *opt = NULL;
    uint32_t *ids = NULL;
    size_t n_ids = 0, n_text = 0;
    char *text = read_text(argv[2], &n_text);
    double first = 0, last = 0;
    int rc = text ? REMAT_OK : remat_set_error(REMAT_EIO, "cannot read %s", argv[2]);
    if (rc) goto done;

    /* the model: config.json, then its weights by transformers' names */
    CHECK(remat_hf_config_read(&cfg, &extra, argv[1]));
    CHECK(remat_model_create(&m, &cfg, REMAT_DEVICE_CPU));
    CHECK(remat_model_params(m, false, &params));
    CHECK(remat_hf_load_weights(params, argv[1], NULL));
    /* the data: the text in the model's tokens */
    snprintf(path, sizeof path, "%s/tokenizer.json", argv[1]);
    CHECK(remat_tokenizer_load(path, &tok));
    CHECK(remat_tokenizer_encode(tok, text, n_text, true, &ids, &n_ids));
    const size_t windows = (n_ids - 1) / T;
    if (n_ids < T + 1) {
        rc = remat_set_error(REMAT_EINVAL, "%s: %zu tokens, fewer than a window", argv[2], n_ids);
        goto done;
    }
    /* AdamW over every parameter */
    remat_optim_options oo;
    remat_optim_options_init(&oo, REMAT_OPTIM_ADAMW);
    oo.lr = 1e-3;
    remat_tensor *ps[1024];
    const int np = remat_model_n_params(m);
    for (int i = 0; i < np && i < 1024; i++) ps[i] = remat_model_param(m, i, NULL);
    CHECK(remat_optim_create(&opt, &oo, ps, np));

    remat_strategy block = {.kind = REMAT_STRATEGY_BLOCK}; /* every block checkpointed */
    for (int s = 0; s < steps; s++) {
        int64_t x[B * T], y[B * T];
        for (int r = 0; r < B; r++) /* window k: tokens kT .. kT + T */
            for (int t = 0; t < T; t++) {
                size_t k = ((size_t)s * B + (size_t)r) % windows;
                x[r * T + t] = ids[k * T + (size_t)t];
                y[r * T + t] = ids[k * T + (size_t)t + 1];
            }
        remat_tensor *xt = NULL, *yt = NULL, *loss = NULL;
        double l = 0;
        rc = remat_from_data(&xt, 2, (int64_t[]){B, T}, REMAT_I64, x);
        if (!rc) rc = remat_from_data(&yt, 2, (int64_t[]){B, T}, REMAT_I64, y);
        remat_model_zero_grad(m);
        if (!rc) rc = remat_model_loss(&loss, m, xt, yt, &block);
        if (!rc) rc = remat_item(loss, &l);
        if (!rc) rc = remat_backward_scalar(loss); /* each block recomputed once here */
        if (!rc) rc = remat_optim_step(opt, NULL);
        remat_release(loss);
        remat_release(xt);
        remat_release(yt);
        if (rc) goto done;
        if (s == 0) first = l;
        last = l;
        printf("step %d  loss %.4f\n", s + 1, l);
    }
    /* OUT: config.json + model.safetensors (then copy tokenizer.json beside them) */
    CHECK(remat_hf_export(argv[3], &cfg, &extra, params));
    printf("wrote %s: loss %.4f -> %.4f\n", argv[3], first, last);
    if (steps > 1 && !(last < first))
        rc = remat_set_error(REMAT_EINVAL, "the loss did not go down");
done:
    if (rc) fprintf(stderr, "%s: %s\n", remat_status_name(rc), remat_last_error());
    remat_optim_free(opt);
    free(ids);
    free(text);
    remat_tokenizer_free(tok);
    remat_params_free(params);
    remat_model_free(m);
    return rc ? 1 : 0;
}
