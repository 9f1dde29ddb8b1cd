/* tests/test_hf.c — issue 31 part 3: Hugging Face model directories
 * (remat/hf.h). Directories written by transformers' save_pretrained
 * (tests/fixtures/hf_dirs, scripts/gen_hf_dir_fixtures.py: GPT-2 with tied
 * embeddings, a grouped-query Llama, the same Llama sharded) read their
 * config and weights; configs remat does not implement are refused naming
 * the key; configs and directories written by remat read back the same
 * (the script checks that transformers loads them). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "remat/hf.h"
#include "support/rt.h"
#include "support/tmpdir.h"

#define FIX REMAT_FIXTURE_DIR "/hf_dirs"

static void setup(void) { rt_tmpdir_make("remat_hf_test"); }

TestSuite(hf, .init = setup, .fini = rt_tmpdir_remove);

/* What scripts/gen_hf_dir_fixtures.py's EXPECTED says each fixture's config holds. */
Test(hf, reads_transformers_configs) {
    remat_model_config g, l;
    remat_hf_extra gx, lx;
    RT_OK(remat_hf_config_read(&g, &gx, FIX "/gpt2-tiny"));
    cr_assert_eq(g.family, REMAT_MODEL_GPT2);
    cr_assert_eq(g.n_layers, 2);
    cr_assert_eq(g.n_heads, 2);
    cr_assert_eq(g.n_kv_heads, 2);
    cr_assert_eq(g.hidden, 16);
    cr_assert_eq(g.head_dim, 0, "GPT-2: hidden / heads");
    cr_assert_eq(g.intermediate, 0, "n_inner null: 4 * n_embd");
    cr_assert_eq(g.vocab, 64);
    cr_assert_eq(g.max_positions, 32);
    cr_assert_eq(g.norm_eps, 1e-5);
    cr_assert_eq(g.rope_theta, 0);
    cr_assert(g.tie_word_embeddings);
    cr_assert_eq(gx.bos_token_id, 0);
    cr_assert_eq(gx.n_eos, 1);
    cr_assert_eq(gx.eos_token_id[0], 0);
    cr_assert_eq(gx.dtype, REMAT_F32);
    cr_assert_eq(g.gelu, REMAT_GELU_TANH);
    cr_assert_eq(g.attn_pdrop, 0.1);
    RT_OK(remat_hf_config_read(&l, &lx, FIX "/llama-tiny/config.json"));
    cr_assert_eq(l.family, REMAT_MODEL_LLAMA);
    cr_assert_eq(l.n_layers, 2);
    cr_assert_eq(l.n_heads, 4);
    cr_assert_eq(l.n_kv_heads, 2);
    cr_assert_eq(l.hidden, 16);
    cr_assert_eq(l.head_dim, 4);
    cr_assert_eq(l.intermediate, 24);
    cr_assert_eq(l.vocab, 64);
    cr_assert_eq(l.max_positions, 64);
    cr_assert_eq(l.norm_eps, 1e-5);
    cr_assert_eq(l.rope_theta, 500000.0);
    cr_assert(!l.tie_word_embeddings);
    cr_assert_eq(lx.bos_token_id, 1);
    cr_assert_eq(lx.n_eos, 2);
    cr_assert_eq(lx.eos_token_id[0], 2);
    cr_assert_eq(lx.eos_token_id[1], 3);
}

static remat_hf_extra g_x;
static remat_model_config parse(const char *json) {
    remat_model_config c;
    memset(&c, 0xAB, sizeof c);
    RT_OK(remat_hf_config_parse(&c, &g_x, json, strlen(json), "cfg.json"));
    return c;
}

Test(hf, defaults_and_both_rope_spellings) {
    remat_model_config c = parse("{\"model_type\": \"llama\"}");
    cr_assert_eq(c.family, REMAT_MODEL_LLAMA);
    cr_assert_eq(c.n_layers, 32);
    cr_assert_eq(c.n_kv_heads, 32, "num_key_value_heads defaults to the heads");
    cr_assert_eq(c.hidden, 4096);
    cr_assert_eq(c.intermediate, 11008);
    cr_assert_eq(c.rope_theta, 10000.0);
    cr_assert_eq(c.norm_eps, 1e-6);
    cr_assert_eq(g_x.bos_token_id, 1);
    c = parse("{\"model_type\": \"llama\", \"rope_theta\": 1e6, \"torch_dtype\": \"bfloat16\", "
              "\"rope_scaling\": null, \"num_key_value_heads\": 1, \"eos_token_id\": null, "
              "\"attention_bias\": true, \"head_dim\": 64, \"num_attention_heads\": 8, "
              "\"hidden_size\": 256}");
    cr_assert_eq(c.rope_theta, 1e6);
    cr_assert_eq(g_x.dtype, REMAT_BF16);
    cr_assert_eq(c.n_kv_heads, 1, "multi-query");
    cr_assert_eq(g_x.n_eos, 0);
    cr_assert(c.attention_bias);
    cr_assert_eq(c.head_dim, 64);
    c = parse("{\"model_type\": \"llama\", \"rope_parameters\": {\"rope_type\": \"default\", "
              "\"rope_theta\": 250000.0}, \"dtype\": \"float32\"}");
    cr_assert_eq(c.rope_theta, 250000.0);
    c = parse("{\"model_type\": \"gpt2\", \"n_embd\": 48, \"n_head\": 3, \"n_inner\": 100, "
              "\"activation_function\": \"gelu\", \"unknown_key\": [1, {}]}");
    cr_assert_eq(c.intermediate, 100);
    cr_assert_eq(c.gelu, REMAT_GELU_ERF);
    cr_assert_eq(c.n_kv_heads, 3);
    cr_assert_eq(g_x.bos_token_id, 50256);
}

Test(hf, refuses_what_remat_does_not_implement_naming_the_key) {
    struct {
        const char *json, *key;
        int status;
    } bad[] = {
        {"{\"model_type\": \"llama\", \"rope_scaling\": {\"rope_type\": \"llama3\", \"factor\": "
         "8.0}}",
         "\"rope_scaling\"", REMAT_EUNSUPPORTED},
        {"{\"model_type\": \"llama\", \"rope_parameters\": {\"rope_type\": \"yarn\"}}",
         "\"rope_parameters.rope_type\"", REMAT_EUNSUPPORTED},
        {"{\"model_type\": \"llama\", \"rope_parameters\": {\"rope_theta\": -1}}",
         "\"rope_parameters.rope_theta\"", REMAT_EFORMAT},
        {"{\"model_type\": \"mistral\"}", "\"model_type\"", REMAT_EUNSUPPORTED},
        {"{\"n_layer\": 2}", "\"model_type\"", REMAT_EFORMAT},
        {"{\"model_type\": \"llama\", \"hidden_act\": \"gelu\"}", "\"hidden_act\"",
         REMAT_EUNSUPPORTED},
        {"{\"model_type\": \"gpt2\", \"activation_function\": \"relu\"}", "\"activation_function\"",
         REMAT_EUNSUPPORTED},
        {"{\"model_type\": \"gpt2\", \"scale_attn_by_inverse_layer_idx\": true}",
         "\"scale_attn_by_inverse_layer_idx\"", REMAT_EUNSUPPORTED},
        {"{\"model_type\": \"gpt2\", \"add_cross_attention\": true}", "\"add_cross_attention\"",
         REMAT_EUNSUPPORTED},
        {"{\"model_type\": \"llama\", \"num_attention_heads\": 8, \"num_key_value_heads\": 3, "
         "\"hidden_size\": 64}",
         "num_key_value_heads", REMAT_EFORMAT},
        {"{\"model_type\": \"gpt2\", \"n_head\": 5}", "n_head", REMAT_EFORMAT},
        {"{\"model_type\": \"gpt2\", \"n_layer\": \"2\"}", "\"n_layer\"", REMAT_EFORMAT},
        {"{\"model_type\": \"gpt2\", \"n_layer\": 2.5}", "\"n_layer\"", REMAT_EFORMAT},
        {"{\"model_type\": \"gpt2\", \"n_layer\": 0}", "\"n_layer\"", REMAT_EFORMAT},
        {"{\"model_type\": \"gpt2\", \"layer_norm_epsilon\": 0}", "\"layer_norm_epsilon\"",
         REMAT_EFORMAT},
        {"{\"model_type\": \"gpt2\", \"tie_word_embeddings\": 1}", "\"tie_word_embeddings\"",
         REMAT_EFORMAT},
        {"{\"model_type\": \"gpt2\", \"dtype\": \"int8\"}", "\"dtype\"", REMAT_EUNSUPPORTED},
        {"{\"model_type\": \"llama\", \"eos_token_id\": [1, -2]}", "\"eos_token_id\"",
         REMAT_EFORMAT},
        {"{\"model_type\": \"gpt2\",}", "not valid JSON", REMAT_EFORMAT},
        {"[\"model_type\"]", "not a JSON object", REMAT_EFORMAT},
        {"{\"model_type\": \"gpt\xff\"}", "UTF-8", REMAT_EFORMAT},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        remat_model_config c;
        memset(&c, 0x5A, sizeof c);
        remat_model_config before = c;
        int rc = remat_hf_config_parse(&c, NULL, bad[i].json, strlen(bad[i].json), "cfg.json");
        cr_assert_eq(rc, bad[i].status, "%s: %s, expected %s (%s)", bad[i].json,
                     remat_status_name(rc), remat_status_name(bad[i].status), remat_last_error());
        cr_assert(strstr(remat_last_error(), bad[i].key), "%s: message lacks %s: %s", bad[i].json,
                  bad[i].key, remat_last_error());
        cr_assert(strstr(remat_last_error(), "cfg.json"), "the file is named: %s",
                  remat_last_error());
        cr_assert(memcmp(&c, &before, sizeof c) == 0, "%s: *out changed", bad[i].json);
    }
    RT_FAILS(remat_hf_config_read(&(remat_model_config){0}, NULL, rt_tmpdir_path("none")),
             REMAT_EIO, "none");
}

/* Each fixture's config written by remat reads back the same. */
Test(hf, config_written_reads_back_the_same) {
    const char *dirs[] = {FIX "/gpt2-tiny", FIX "/llama-tiny"};
    for (int i = 0; i < 2; i++) {
        remat_model_config a, b;
        remat_hf_extra ax, bx;
        memset(&a, 0, sizeof a);
        memset(&b, 0, sizeof b);
        memset(&ax, 0, sizeof ax);
        memset(&bx, 0, sizeof bx);
        RT_OK(remat_hf_config_read(&a, &ax, dirs[i]));
        if (i) a.rope_theta = 1.0 / 3.0 * 1e6; /* a value that needs 17 digits */
        else a.gelu = REMAT_GELU_ERF;
        a.initializer_range = 0.1;
        ax.dtype = REMAT_BF16;
        RT_OK(remat_hf_config_write(&a, &ax, rt_tmpdir_path("config.json")));
        RT_OK(remat_hf_config_read(&b, &bx, rt_tmpdir_path("config.json")));
        cr_assert(memcmp(&a, &b, sizeof a) == 0, "%s: the config changed on the way", dirs[i]);
        cr_assert(memcmp(&ax, &bx, sizeof ax) == 0, "%s: the extras changed on the way", dirs[i]);
    }
    remat_model_config bad;
    RT_OK(remat_hf_config_read(&bad, NULL, dirs[1]));
    bad.n_kv_heads = 3;
    RT_FAILS(remat_hf_config_write(&bad, NULL, rt_tmpdir_path("bad.json")), REMAT_EINVAL,
             "n_kv_heads");
    cr_assert_neq(access(rt_tmpdir_path("bad.json"), F_OK), 0);
}

/* Zeroed parameters named and shaped as the tensors of `file`. */
static remat_params *zeros_like(const char *file) {
    remat_params *f = NULL, *p = NULL;
    RT_OK(remat_safetensors_read(&f, file, REMAT_F32));
    RT_OK(remat_params_new(&p));
    for (int64_t i = 0; i < remat_params_count(f); i++) {
        remat_tensor *t = remat_params_tensor(f, i), *z = NULL;
        RT_OK(remat_zeros(&z, remat_ndim(t), remat_shape(t), REMAT_F32, REMAT_DEVICE_CPU));
        RT_OK(remat_params_add(p, remat_params_name(f, i), z));
        remat_release(z);
    }
    remat_params_free(f);
    return p;
}

static void assert_same_params(const remat_params *a, const remat_params *b) {
    cr_assert_eq(remat_params_count(a), remat_params_count(b));
    for (int64_t i = 0; i < remat_params_count(a); i++) {
        const char *name = remat_params_name(a, i);
        remat_tensor *x = remat_params_tensor(a, i), *y = remat_params_get(b, name);
        cr_assert(y, "no %s", name);
        int64_t n = remat_numel(x);
        cr_assert_eq(n, remat_numel(y), "%s", name);
        float *u = malloc((size_t)n * 4), *v = malloc((size_t)n * 4);
        RT_OK(remat_copy_to_buffer(x, REMAT_F32, u, n));
        RT_OK(remat_copy_to_buffer(y, REMAT_F32, v, n));
        cr_assert(memcmp(u, v, (size_t)n * 4) == 0, "%s differs", name);
        free(u);
        free(v);
    }
}

Test(hf, loads_weights_single_and_sharded_by_name) {
    remat_params *want = NULL;
    RT_OK(remat_safetensors_read(&want, FIX "/llama-tiny/model.safetensors", REMAT_F32));
    cr_assert_geq(remat_params_count(want), 2 + 2 * 9, "embeddings, norm, lm_head, 9 per layer");
    cr_assert_geq(remat_params_find(want, "model.layers.1.self_attn.k_proj.weight"), 0);
    cr_assert_eq(remat_size(remat_params_get(want, "model.layers.1.self_attn.k_proj.weight"), 0), 8,
                 "2 kv heads of 4");
    remat_params *single = zeros_like(FIX "/llama-tiny/model.safetensors");
    remat_params *sharded = zeros_like(FIX "/llama-tiny/model.safetensors");
    RT_OK(remat_hf_load_weights(single, FIX "/llama-tiny", NULL));
    RT_OK(remat_hf_load_weights(sharded, FIX "/llama-sharded", NULL));
    assert_same_params(single, want);
    assert_same_params(sharded, want);
    /* GPT-2 with tied embeddings: transformers saves no lm_head */
    remat_params *g = zeros_like(FIX "/gpt2-tiny/model.safetensors");
    cr_assert_lt(remat_params_find(g, "lm_head.weight"), 0);
    RT_OK(remat_hf_load_weights(g, FIX "/gpt2-tiny", NULL));
    remat_params_free(g);
    remat_params_free(want);
    remat_params_free(single);
    remat_params_free(sharded);
}

Test(hf, directories_without_weights_are_named) {
    remat_params *p = NULL;
    RT_OK(remat_params_new(&p));
    RT_FAILS(remat_hf_load_weights(p, rt_tmpdir_path("nowhere"), NULL), REMAT_EIO,
             "is not a directory");
    RT_FAILS(remat_hf_load_weights(p, rt_tmpdir(), NULL), REMAT_EIO,
             "has neither model.safetensors nor model.safetensors.index.json");
    FILE *fp = fopen(rt_tmpdir_path("pytorch_model.bin"), "w");
    fclose(fp);
    RT_FAILS(remat_hf_load_weights(p, rt_tmpdir(), NULL), REMAT_EIO, "pytorch_model.bin");
    remat_params_free(p);
}

Test(hf, export_reads_back) {
    remat_model_config c, back;
    remat_hf_extra x, xback;
    RT_OK(remat_hf_config_read(&c, &x, FIX "/llama-tiny"));
    remat_params *p = zeros_like(FIX "/llama-tiny/model.safetensors");
    RT_OK(remat_hf_load_weights(p, FIX "/llama-sharded", NULL));
    RT_OK(remat_hf_export(rt_tmpdir_path("out"), &c, &x, p));
    RT_OK(remat_hf_export(rt_tmpdir_path("out"), &c, &x, p)); /* over an existing export */
    RT_OK(remat_hf_config_read(&back, &xback, rt_tmpdir_path("out")));
    cr_assert(memcmp(&c, &back, sizeof c) == 0);
    cr_assert(memcmp(&x, &xback, sizeof x) == 0);
    remat_params *q = zeros_like(FIX "/llama-tiny/model.safetensors");
    RT_OK(remat_hf_load_weights(q, rt_tmpdir_path("out"), NULL));
    assert_same_params(p, q);
    remat_safetensors *f = NULL;
    RT_OK(remat_safetensors_open(&f, rt_tmpdir_path("out/model.safetensors")));
    cr_assert_str_eq(remat_safetensors_metadata(f, "format"), "pt");
    remat_safetensors_close(f);
    RT_FAILS(remat_hf_export(rt_tmpdir_path("a/b"), &c, &x, p), REMAT_EIO,
             "cannot create the directory");
    FILE *fp = fopen(rt_tmpdir_path("file"), "w");
    fclose(fp);
    RT_FAILS(remat_hf_export(rt_tmpdir_path("file"), &c, &x, p), REMAT_EIO, "Not a directory");
    remat_params_free(p);
    remat_params_free(q);
}

/* The collection p with each name's prefix `pre` removed (names without it
 * kept), on new zeroed tensors. */
static remat_params *zeros_without_prefix(const remat_params *p, const char *pre) {
    remat_params *q = NULL;
    RT_OK(remat_params_new(&q));
    for (int64_t i = 0; i < remat_params_count(p); i++) {
        const char *name = remat_params_name(p, i);
        remat_tensor *t = remat_params_tensor(p, i), *z = NULL;
        if (!strncmp(name, pre, strlen(pre))) name += strlen(pre);
        RT_OK(remat_zeros(&z, remat_ndim(t), remat_shape(t), REMAT_F32, REMAT_DEVICE_CPU));
        RT_OK(remat_params_add(q, name, z));
        remat_release(z);
    }
    return q;
}

/* As transformers' from_pretrained: the hub's GPT-2 files name the base
 * model's tensors ("wte.weight", "h.0.attn.c_attn.weight") and carry the
 * causal masks "h.N.attn.bias" and "h.N.attn.masked_bias" (gpt2-hub:
 * gpt2-tiny's weights laid out so, which transformers loads with
 * gpt2-tiny's logits); they load into the model's "transformer." names, and
 * a base model's names load from a file with the prefix. A tensor that is
 * no parameter's, and no known buffer, is still refused. */
Test(hf, loads_base_model_names_as_transformers_does) {
    remat_params *want = NULL;
    RT_OK(remat_safetensors_read(&want, FIX "/gpt2-tiny/model.safetensors", REMAT_F32));
    cr_assert_geq(remat_params_find(want, "transformer.h.1.attn.c_attn.weight"), 0);
    remat_params *g = zeros_like(FIX "/gpt2-tiny/model.safetensors");
    RT_OK(remat_hf_load_weights(g, FIX "/gpt2-hub", NULL));
    assert_same_params(g, want);
    /* exact names only: the same file does not load */
    remat_params *exact = zeros_like(FIX "/gpt2-tiny/model.safetensors");
    RT_FAILS(remat_safetensors_load(exact, FIX "/gpt2-hub/model.safetensors", NULL), REMAT_EINVAL,
             "for its parameter");
    /* the other way: a base model's names from the prefixed file */
    remat_params *base = zeros_without_prefix(want, "transformer.");
    cr_assert_geq(remat_params_find(base, "h.1.attn.c_attn.weight"), 0);
    RT_OK(remat_hf_load_weights(base, FIX "/gpt2-tiny", NULL));
    for (int64_t i = 0; i < remat_params_count(want); i++) {
        remat_tensor *a = remat_params_tensor(want, i), *b = remat_params_tensor(base, i);
        cr_assert(rt_bitwise_equal(a, b), "%s", remat_params_name(base, i));
    }
    /* an unknown tensor beside the base names */
    remat_params *extra = zeros_without_prefix(want, "transformer.");
    remat_tensor *z = NULL;
    int64_t one = 1;
    RT_OK(remat_zeros(&z, 1, &one, REMAT_F32, REMAT_DEVICE_CPU));
    RT_OK(remat_params_add(extra, "h.0.attn.c_attn.scale", z));
    cr_assert_eq(mkdir(rt_tmpdir_path("extra"), 0777), 0);
    RT_OK(remat_safetensors_save(rt_tmpdir_path("extra/model.safetensors"), extra, 0, NULL));
    RT_FAILS(remat_hf_load_weights(g, rt_tmpdir_path("extra"), NULL), REMAT_EINVAL,
             "tensor 'h.0.attn.c_attn.scale' is no parameter's");
    remat_release(z);
    remat_params_free(extra);
    remat_params_free(base);
    remat_params_free(exact);
    remat_params_free(g);
    remat_params_free(want);
}

/* remat_hf_export_sharded writes save_pretrained's shards and index; a
 * later export in one file replaces them (and the other way), leaving the
 * directory's other files. */
Test(hf, export_in_shards_and_back) {
    remat_model_config c;
    remat_hf_extra x;
    RT_OK(remat_hf_config_read(&c, &x, FIX "/llama-tiny"));
    remat_params *p = zeros_like(FIX "/llama-tiny/model.safetensors");
    RT_OK(remat_hf_load_weights(p, FIX "/llama-tiny", NULL));
    char out[512];
    snprintf(out, sizeof out, "%s", rt_tmpdir_path("out"));
    cr_assert_eq(mkdir(out, 0777), 0);
    fclose(fopen(rt_tmpdir_path("out/tokenizer.json"), "w"));
    RT_OK(remat_hf_export_sharded(out, &c, &x, p, 4096));
    char want[1024] = "config.json";
    for (int k = 1; k <= 7; k++)
        snprintf(want + strlen(want), sizeof want - strlen(want),
                 " model-%05d-of-00007.safetensors", k);
    strcat(want, " model.safetensors.index.json tokenizer.json");
    cr_assert_str_eq(rt_tmpdir_list("out"), want);
    remat_params *q = zeros_like(FIX "/llama-tiny/model.safetensors");
    RT_OK(remat_hf_load_weights(q, out, NULL));
    assert_same_params(p, q);
    RT_OK(remat_hf_export(out, &c, &x, p));
    cr_assert_str_eq(rt_tmpdir_list("out"), "config.json model.safetensors tokenizer.json");
    RT_OK(remat_hf_export_sharded(out, &c, &x, p, 4096));
    cr_assert_str_eq(rt_tmpdir_list("out"), want);
    RT_FAILS(remat_hf_export_sharded(out, &c, &x, p, 0), REMAT_EINVAL,
             "max_shard_bytes must be positive");
    remat_params_free(p);
    remat_params_free(q);
}
