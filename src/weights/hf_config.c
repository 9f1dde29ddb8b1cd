/* src/weights/hf_config.c — config.json of GPT-2 and Llama models
 * (remat/hf.h) into and out of remat_model_config (remat/models.h): read
 * with transformers' defaults for absent keys, refused key by key where
 * remat does not implement what the key asks for, and written back in each
 * family's own key names. */
#include <cjson/cJSON.h>
#include <errno.h>
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "core/core.h"
#include "io/text.h"
#include "remat/hf.h"
#include "remat/models.h"
#include "weights/st.h"

#define MAX_CONFIG_BYTES ((size_t)16 << 20)
#define MAX_SIZE (INT64_C(1) << 40) /* (remat_model_config_check has the real limits) */

typedef struct reader {
    const cJSON *root;
    const char *name;   /* the file */
    const char *prefix; /* "" or "rope_parameters.": what messages put before a key */
} reader;

/* The value of key, or NULL when absent or JSON null (transformers treats
 * both as "use the default"). */
static const cJSON *get(const reader *r, const char *key) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(r->root, key);
    return v && !cJSON_IsNull(v) ? v : NULL;
}

static remat_status must_be(const reader *r, const char *key, const char *what) {
    return rm_err(REMAT_EFORMAT, "%s: \"%s%s\" must be %s", r->name, r->prefix, key, what);
}

/* A size: an integer in [lo, MAX_SIZE], or the default when absent. */
static remat_status size_of(const reader *r, const char *key, int64_t dflt, int64_t lo,
                            int64_t *out) {
    const cJSON *v = get(r, key);
    double d = v && cJSON_IsNumber(v) ? v->valuedouble : -1;
    if (v && (!(d >= (double)lo && d <= (double)MAX_SIZE) || d != floor(d)))
        return rm_err(REMAT_EFORMAT, "%s: \"%s%s\" must be an integer >= %lld", r->name, r->prefix,
                      key, (long long)lo);
    *out = v ? (int64_t)d : dflt;
    return REMAT_OK;
}

/* A finite number >= 0 (and > 0 when positive), or the default. */
static remat_status number_of(const reader *r, const char *key, double dflt, bool positive,
                              double *out) {
    const cJSON *v = get(r, key);
    double d = v && cJSON_IsNumber(v) ? v->valuedouble : -1;
    if (v && (!isfinite(d) || d < 0 || (positive && d == 0)))
        return must_be(r, key, positive ? "a positive number" : "a non-negative number");
    *out = v ? d : dflt;
    return REMAT_OK;
}

static remat_status bool_of(const reader *r, const char *key, bool dflt, bool *out) {
    const cJSON *v = get(r, key);
    if (v && !cJSON_IsBool(v)) return must_be(r, key, "true or false");
    *out = v ? cJSON_IsTrue(v) : dflt;
    return REMAT_OK;
}

/* A string, or dflt when absent. */
static remat_status string_of(const reader *r, const char *key, const char *dflt,
                              const char **out) {
    const cJSON *v = get(r, key);
    if (v && !cJSON_IsString(v)) return must_be(r, key, "a string");
    *out = v ? v->valuestring : dflt;
    return REMAT_OK;
}

/* A boolean option remat implements only at `supported`. */
static remat_status only(const reader *r, const char *key, bool dflt, bool supported) {
    bool v = dflt;
    remat_status rc = bool_of(r, key, dflt, &v);
    if (!rc && v != supported)
        rc = rm_err(REMAT_EUNSUPPORTED, "%s: \"%s%s\": %s is not supported (remat implements %s)",
                    r->name, r->prefix, key, v ? "true" : "false", supported ? "true" : "false");
    return rc;
}

static remat_status token_ids(const reader *r, int64_t bos, int64_t eos, remat_hf_extra *x) {
    int64_t v = 0;
    remat_status rc = size_of(r, "bos_token_id", bos, 0, &v);
    if (rc) return rc;
    /* an explicit null is "no such token" (None), not the default */
    x->bos_token_id =
        cJSON_IsNull(cJSON_GetObjectItemCaseSensitive(r->root, "bos_token_id")) ? -1 : v;
    const cJSON *e = get(r, "eos_token_id");
    x->n_eos = 0;
    if (!e) {
        if (!cJSON_GetObjectItemCaseSensitive(r->root, "eos_token_id"))
            x->eos_token_id[x->n_eos++] = eos;
        return REMAT_OK;
    }
    if (cJSON_IsNumber(e)) return size_of(r, "eos_token_id", 0, 0, &x->eos_token_id[x->n_eos++]);
    if (!cJSON_IsArray(e) || cJSON_GetArraySize(e) > REMAT_HF_MAX_EOS)
        return rm_err(REMAT_EFORMAT,
                      "%s: \"eos_token_id\" must be a token id or a list of at most %d", r->name,
                      REMAT_HF_MAX_EOS);
    for (const cJSON *t = e->child; t; t = t->next) {
        double d = cJSON_IsNumber(t) ? t->valuedouble : -1;
        if (!(d >= 0 && d <= (double)MAX_SIZE) || d != floor(d))
            return rm_err(REMAT_EFORMAT, "%s: \"eos_token_id\" has an entry that is not a token id",
                          r->name);
        x->eos_token_id[x->n_eos++] = (int64_t)d;
    }
    return REMAT_OK;
}

static remat_status dtype_of(const reader *r, remat_hf_extra *x) {
    const char *key = get(r, "dtype") ? "dtype" : "torch_dtype", *s = NULL;
    remat_status rc = string_of(r, key, "float32", &s);
    if (rc) return rc;
    if (!strcmp(s, "float32") || !strcmp(s, "float16")) x->dtype = REMAT_F32;
    else if (!strcmp(s, "bfloat16")) x->dtype = REMAT_BF16;
    else if (!strcmp(s, "float64")) x->dtype = REMAT_F64;
    else
        return rm_err(
            REMAT_EUNSUPPORTED,
            "%s: \"%s\": \"%.64s\" is not supported (float32, bfloat16, float16, float64)", r->name,
            key, s);
    return REMAT_OK;
}

/* An int-sized count (layers, heads). */
static remat_status count_of(const reader *r, const char *key, int dflt, int *out) {
    int64_t v = 0;
    remat_status rc = size_of(r, key, dflt, 1, &v);
    if (!rc && v > INT32_MAX) rc = rm_err(REMAT_EFORMAT, "%s: \"%s\" is too large", r->name, key);
    if (!rc) *out = (int)v;
    return rc;
}

/* The keys that map onto one field of remat_model_config, read in order,
 * each defaulting to the field's value before it is read (the family's
 * defaults, remat_model_config_default). */
typedef enum key_type {
    KEY_COUNT,    /* an int >= 1 (layers, heads) */
    KEY_SIZE,     /* an int64 >= 1 */
    KEY_RATE,     /* a finite double >= 0 */
    KEY_POSITIVE, /* a finite double > 0 */
    KEY_BOOL,
} key_type;

typedef struct key_field {
    const char *key;
    key_type type;
    size_t offset; /* of the field in remat_model_config */
} key_field;

#define FIELD(key, type, field)                                                                    \
    { key, type, offsetof(remat_model_config, field) }

static remat_status read_keys(const reader *r, const key_field *keys, size_t n,
                              remat_model_config *c) {
    remat_status rc = REMAT_OK;
    for (size_t i = 0; i < n && !rc; i++) {
        const key_field *k = &keys[i];
        void *f = (char *)c + k->offset;
        switch (k->type) {
        case KEY_COUNT: rc = count_of(r, k->key, *(int *)f, f); break;
        case KEY_SIZE: rc = size_of(r, k->key, *(int64_t *)f, 1, f); break;
        case KEY_RATE:
        case KEY_POSITIVE:
            rc = number_of(r, k->key, *(double *)f, k->type == KEY_POSITIVE, f);
            break;
        case KEY_BOOL: rc = bool_of(r, k->key, *(bool *)f, f); break;
        }
    }
    return rc;
}

static const key_field k_gpt2_keys[] = {
    FIELD("n_layer", KEY_COUNT, n_layers),
    FIELD("n_head", KEY_COUNT, n_heads),
    FIELD("n_embd", KEY_SIZE, hidden),
    FIELD("n_inner", KEY_SIZE, intermediate), /* default 0: 4 x n_embd */
    FIELD("vocab_size", KEY_SIZE, vocab),
    FIELD("n_positions", KEY_SIZE, max_positions),
    FIELD("layer_norm_epsilon", KEY_POSITIVE, norm_eps),
    FIELD("tie_word_embeddings", KEY_BOOL, tie_word_embeddings), /* default true */
    FIELD("attn_pdrop", KEY_RATE, attn_pdrop),
    FIELD("resid_pdrop", KEY_RATE, resid_pdrop),
    FIELD("embd_pdrop", KEY_RATE, embd_pdrop),
    FIELD("initializer_range", KEY_RATE, initializer_range),
};

static remat_status gpt2(const reader *r, remat_model_config *c, remat_hf_extra *x) {
    remat_status rc = remat_model_config_default(c, REMAT_MODEL_GPT2);
    const char *act = NULL;
    if (!rc) rc = read_keys(r, k_gpt2_keys, sizeof k_gpt2_keys / sizeof *k_gpt2_keys, c);
    c->n_kv_heads = c->n_heads;
    if (!rc) rc = string_of(r, "activation_function", "gelu_new", &act);
    if (!rc) {
        if (!strcmp(act, "gelu_new") || !strcmp(act, "gelu_pytorch_tanh"))
            c->gelu = REMAT_GELU_TANH;
        else if (!strcmp(act, "gelu")) c->gelu = REMAT_GELU_ERF;
        else
            rc = rm_err(REMAT_EUNSUPPORTED,
                        "%s: \"activation_function\": \"%.64s\" is not supported (gelu_new, "
                        "gelu_pytorch_tanh, gelu)",
                        r->name, act);
    }
    if (!rc) rc = only(r, "scale_attn_weights", true, true);
    if (!rc) rc = only(r, "scale_attn_by_inverse_layer_idx", false, false);
    if (!rc) rc = only(r, "reorder_and_upcast_attn", false, false);
    if (!rc) rc = only(r, "add_cross_attention", false, false);
    if (!rc) rc = token_ids(r, 50256, 50256, x);
    return rc;
}

/* rope_theta at the top (transformers 4) or in rope_parameters (5). */
static remat_status rope(const reader *r, remat_model_config *c) {
    if (get(r, "rope_scaling"))
        return rm_err(REMAT_EUNSUPPORTED,
                      "%s: \"rope_scaling\" is not supported (remat implements plain RoPE: "
                      "rope_scaling null)",
                      r->name);
    remat_status rc = number_of(r, "rope_theta", c->rope_theta, true, &c->rope_theta);
    const cJSON *rp = rc ? NULL : get(r, "rope_parameters");
    if (!rp) return rc;
    if (!cJSON_IsObject(rp))
        return rm_err(REMAT_EFORMAT, "%s: \"rope_parameters\" must be an object", r->name);
    reader sub = {rp, r->name, "rope_parameters."};
    const char *type = NULL;
    rc = string_of(&sub, "rope_type", "default", &type);
    if (!rc && strcmp(type, "default") != 0)
        rc = rm_err(REMAT_EUNSUPPORTED,
                    "%s: \"rope_parameters.rope_type\": \"%.64s\" is not supported (default)",
                    r->name, type);
    if (!rc) rc = number_of(&sub, "rope_theta", c->rope_theta, true, &c->rope_theta);
    return rc;
}

/* (num_key_value_heads defaults to num_attention_heads: read after it) */
static const key_field k_llama_heads[] = {
    FIELD("num_hidden_layers", KEY_COUNT, n_layers),
    FIELD("num_attention_heads", KEY_COUNT, n_heads),
};
static const key_field k_llama_keys[] = {
    FIELD("num_key_value_heads", KEY_COUNT, n_kv_heads),
    FIELD("hidden_size", KEY_SIZE, hidden),
    FIELD("intermediate_size", KEY_SIZE, intermediate),
    FIELD("head_dim", KEY_SIZE, head_dim), /* default 0: hidden / heads */
    FIELD("vocab_size", KEY_SIZE, vocab),
    FIELD("max_position_embeddings", KEY_SIZE, max_positions),
    FIELD("rms_norm_eps", KEY_POSITIVE, norm_eps),
    FIELD("tie_word_embeddings", KEY_BOOL, tie_word_embeddings), /* default false */
    FIELD("attention_bias", KEY_BOOL, attention_bias),
    FIELD("mlp_bias", KEY_BOOL, mlp_bias),
    FIELD("attention_dropout", KEY_RATE, attn_pdrop), /* default 0 */
    FIELD("initializer_range", KEY_RATE, initializer_range),
};

static remat_status llama(const reader *r, remat_model_config *c, remat_hf_extra *x) {
    remat_status rc = remat_model_config_default(c, REMAT_MODEL_LLAMA);
    const char *act = NULL;
    if (!rc) rc = read_keys(r, k_llama_heads, sizeof k_llama_heads / sizeof *k_llama_heads, c);
    c->n_kv_heads = c->n_heads;
    if (!rc) rc = read_keys(r, k_llama_keys, sizeof k_llama_keys / sizeof *k_llama_keys, c);
    if (!rc) rc = string_of(r, "hidden_act", "silu", &act);
    if (!rc && strcmp(act, "silu") != 0)
        rc = rm_err(REMAT_EUNSUPPORTED, "%s: \"hidden_act\": \"%.64s\" is not supported (silu)",
                    r->name, act);
    if (!rc) rc = rope(r, c);
    if (!rc) rc = token_ids(r, 1, 2, x);
    return rc;
}

remat_status remat_hf_config_parse(remat_model_config *cfg, remat_hf_extra *extra, const char *text,
                                   size_t n, const char *name) {
    static const char *call = "remat_hf_config_parse";
    if (!cfg || (!text && n))
        return rm_err(REMAT_EINVAL, "%s: %s is NULL", call, !cfg ? "cfg" : "text");
    reader r = {NULL, name ? name : "config.json", ""};
    cJSON *root = NULL;
    remat_status rc = rm_json_parse(r.name, text ? text : "", n, &root);
    if (!rc && !cJSON_IsObject(root)) rc = rm_err(REMAT_EFORMAT, "%s is not a JSON object", r.name);
    r.root = root;
    remat_model_config c;
    remat_hf_extra x;
    memset(&c, 0, sizeof c);
    memset(&x, 0, sizeof x);
    const char *type = NULL;
    if (!rc) rc = string_of(&r, "model_type", NULL, &type);
    if (!rc && !type) rc = rm_err(REMAT_EFORMAT, "%s: no \"model_type\"", r.name);
    if (!rc) {
        if (strcmp(type, "gpt2") == 0) rc = gpt2(&r, &c, &x);
        else if (strcmp(type, "llama") == 0) rc = llama(&r, &c, &x);
        else
            rc = rm_err(REMAT_EUNSUPPORTED,
                        "%s: \"model_type\": \"%.64s\" is not supported (gpt2, llama)", r.name,
                        type);
    }
    if (!rc) rc = dtype_of(&r, &x);
    cJSON_Delete(root);
    /* the models' own checks (heads dividing the width, ...): their message
     * names the config.json key */
    if (!rc && (rc = remat_model_config_check(&c)) != REMAT_OK)
        rc = rm_err_prefix(REMAT_EFORMAT, r.name);
    if (rc) return rm_err_prefix(rc, call);
    *cfg = c;
    if (extra) *extra = x;
    return REMAT_OK;
}

remat_status remat_hf_config_read(remat_model_config *cfg, remat_hf_extra *extra,
                                  const char *path) {
    static const char *call = "remat_hf_config_read";
    if (!cfg || !path) return rm_err(REMAT_EINVAL, "%s: %s is NULL", call, !cfg ? "cfg" : "path");
    char file[4096];
    struct stat st;
    if (stat(path, &st) == 0 && S_ISDIR(st.st_mode))
        snprintf(file, sizeof file, "%s/config.json", path);
    else snprintf(file, sizeof file, "%s", path);
    char *text = NULL;
    size_t n = 0;
    remat_status rc = rm_read_small_file(file, MAX_CONFIG_BYTES, &text, &n);
    if (rc) return rm_err_prefix(rc, call);
    rc = remat_hf_config_parse(cfg, extra, text, n, file);
    free(text);
    return rc; /* its messages name remat_hf_config_parse and the file */
}

/* A double as JSON that reads back as the same double, with a ".0" on
 * whole numbers (so that Python reads a float). */
static void json_number(rm_text *t, double v) {
    char buf[40];
    for (int prec = 15; prec <= 17; prec++) {
        snprintf(buf, sizeof buf, "%.*g", prec, v);
        if (strtod(buf, NULL) == v) break;
    }
    rm_text_printf(t, "%s%s", buf, strpbrk(buf, ".eE") ? "" : ".0");
}

static void key_int(rm_text *t, const char *k, int64_t v) {
    rm_text_printf(t, "  \"%s\": %lld,\n", k, (long long)v);
}
static void key_num(rm_text *t, const char *k, double v) {
    rm_text_printf(t, "  \"%s\": ", k);
    json_number(t, v);
    rm_text_printf(t, ",\n");
}

static void gpt2_text(rm_text *t, const remat_model_config *c) {
    rm_text_printf(t, "  \"activation_function\": \"%s\",\n",
                   c->gelu == REMAT_GELU_ERF ? "gelu" : "gelu_new");
    key_int(t, "n_layer", c->n_layers);
    key_int(t, "n_head", c->n_heads);
    key_int(t, "n_embd", c->hidden);
    if (c->intermediate) key_int(t, "n_inner", c->intermediate);
    else rm_text_printf(t, "  \"n_inner\": null,\n");
    key_int(t, "n_positions", c->max_positions);
    key_int(t, "vocab_size", c->vocab);
    key_num(t, "layer_norm_epsilon", c->norm_eps);
    key_num(t, "attn_pdrop", c->attn_pdrop);
    key_num(t, "resid_pdrop", c->resid_pdrop);
    key_num(t, "embd_pdrop", c->embd_pdrop);
    rm_text_printf(t, "  \"scale_attn_weights\": true,\n");
}

static void llama_text(rm_text *t, const remat_model_config *c) {
    rm_text_printf(t, "  \"hidden_act\": \"silu\",\n");
    key_int(t, "num_hidden_layers", c->n_layers);
    key_int(t, "num_attention_heads", c->n_heads);
    key_int(t, "num_key_value_heads", c->n_kv_heads);
    key_int(t, "hidden_size", c->hidden);
    if (c->head_dim) key_int(t, "head_dim", c->head_dim); /* else hidden / heads */
    key_int(t, "intermediate_size", c->intermediate);
    key_int(t, "max_position_embeddings", c->max_positions);
    key_int(t, "vocab_size", c->vocab);
    key_num(t, "rms_norm_eps", c->norm_eps);
    key_num(t, "rope_theta", c->rope_theta);
    rm_text_printf(t, "  \"rope_parameters\": {\"rope_type\": \"default\", \"rope_theta\": ");
    json_number(t, c->rope_theta);
    rm_text_printf(t, "},\n  \"rope_scaling\": null,\n");
    key_num(t, "attention_dropout", c->attn_pdrop);
    rm_text_printf(t, "  \"attention_bias\": %s,\n  \"mlp_bias\": %s,\n",
                   c->attention_bias ? "true" : "false", c->mlp_bias ? "true" : "false");
}

static void config_text(rm_text *t, const remat_model_config *c, const remat_hf_extra *x) {
    bool g = c->family == REMAT_MODEL_GPT2;
    rm_text_printf(t, "{\n  \"architectures\": [\"%s\"],\n  \"model_type\": \"%s\",\n",
                   g ? "GPT2LMHeadModel" : "LlamaForCausalLM", g ? "gpt2" : "llama");
    if (g) gpt2_text(t, c);
    else llama_text(t, c);
    key_num(t, "initializer_range", c->initializer_range);
    rm_text_printf(t, "  \"tie_word_embeddings\": %s,\n",
                   c->tie_word_embeddings ? "true" : "false");
    if (x && x->bos_token_id >= 0) key_int(t, "bos_token_id", x->bos_token_id);
    else rm_text_printf(t, "  \"bos_token_id\": null,\n");
    int n_eos = x ? x->n_eos : 0;
    if (n_eos == 1) key_int(t, "eos_token_id", x->eos_token_id[0]);
    else if (n_eos == 0) rm_text_printf(t, "  \"eos_token_id\": null,\n");
    else {
        rm_text_printf(t, "  \"eos_token_id\": [");
        for (int i = 0; i < n_eos; i++)
            rm_text_printf(t, "%s%lld", i ? ", " : "", (long long)x->eos_token_id[i]);
        rm_text_printf(t, "],\n");
    }
    remat_dtype d = x ? x->dtype : REMAT_F32;
    rm_text_printf(t, "  \"dtype\": \"%s\"\n}\n",
                   d == REMAT_BF16  ? "bfloat16"
                   : d == REMAT_F64 ? "float64"
                                    : "float32");
}

remat_status remat_hf_config_write(const remat_model_config *cfg, const remat_hf_extra *extra,
                                   const char *path) {
    static const char *call = "remat_hf_config_write";
    if (!cfg || !path) return rm_err(REMAT_EINVAL, "%s: %s is NULL", call, !cfg ? "cfg" : "path");
    remat_status rc = remat_model_config_check(cfg);
    if (rc) return rm_err_prefix(rc, call);
    if (extra &&
        (extra->n_eos < 0 || extra->n_eos > REMAT_HF_MAX_EOS ||
         (extra->dtype != REMAT_F32 && extra->dtype != REMAT_BF16 && extra->dtype != REMAT_F64)))
        return rm_err(REMAT_EINVAL, "%s: extra: n_eos must be 0 to %d and dtype f32, bf16 or f64",
                      call, REMAT_HF_MAX_EOS);
    rm_text t = {.grow = true};
    config_text(&t, cfg, extra);
    if (t.oom) rc = rm_err(REMAT_ENOMEM, "%s: out of memory", call);
    if (!rc) rc = rm_write_file_atomic(call, path, t.s, t.len);
    free(t.s);
    return rc;
}
