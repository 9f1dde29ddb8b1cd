/*
 * tests/test_cli_hf.c — the remat program on Hugging Face model directories:
 * `remat eval`, `remat sample --init-from` and `remat train --init-from ...
 * --export`, against what transformers computes on the same directories.
 *
 * tests/fixtures/hf_cli/ (scripts/gen_cli_fixtures.py, transformers 5.24 and
 * torch 2.15, offline): a GPT-2 (tied) and a Llama (grouped-query heads,
 * untied, rope_theta 500000), each with its tokenizer.json, data.txt, and
 * expected.json: transformers' eval loss, greedy generate() ids and text,
 * and the eval loss after the same SGD fine-tuning replayed in PyTorch.
 */
#include <cjson/cJSON.h>
#include <criterion/criterion.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "remat/remat.h"
#include "support/program.h"
#include "support/tmpdir.h"

#define FIX REMAT_FIXTURE_DIR "/hf_cli"

static char g_bin[4096];
static cJSON *g_expected;

static void setup(void) {
    snprintf(g_bin, sizeof g_bin, "%s", rt_program_path("remat"));
    rt_tmpdir_make("remat_cli_hf");
    FILE *f = fopen(FIX "/expected.json", "rb");
    cr_assert(f, "cannot open " FIX "/expected.json");
    char buf[16384];
    size_t len = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[len] = '\0';
    g_expected = cJSON_Parse(buf);
    cr_assert(g_expected, "expected.json is not JSON");
}

static void teardown(void) {
    rt_tmpdir_remove();
    cJSON_Delete(g_expected);
}

TestSuite(cli_hf, .init = setup, .fini = teardown, .timeout = 300);

/* Runs `remat ARGS` with stderr merged into the output; returns the exit
 * status and the output (caller frees). */
static int run(char **out, const char *fmt, ...) {
    char args[4096], cmd[8300];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(args, sizeof args, fmt, ap);
    va_end(ap);
    snprintf(cmd, sizeof cmd, "'%s' %s 2>&1", g_bin, args);
    return rt_program_run(out, cmd);
}

static const char *path(const char *name) { return rt_tmpdir_path(name); }

/* The JSON object on the output's last line (the caller deletes it). */
static cJSON *last_json(const char *out) {
    const char *end = out + strlen(out);
    while (end > out && end[-1] == '\n') end--;
    const char *line = end;
    while (line > out && line[-1] != '\n') line--;
    cJSON *j = cJSON_ParseWithLength(line, (size_t)(end - line));
    cr_assert(j && cJSON_IsObject(j), "the last line is not a JSON object:\n%s", out);
    return j;
}

static double num(const cJSON *o, const char *key) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    cr_assert(cJSON_IsNumber(v), "no number '%s'", key);
    return v->valuedouble;
}

static const cJSON *expected(const char *model, const char *key) {
    const cJSON *v =
        cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(g_expected, model), key);
    cr_assert(v, "expected.json has no %s.%s", model, key);
    return v;
}

static void assert_close(double got, double want, double rel, const char *what) {
    cr_assert(fabs(got - want) <= rel * fabs(want), "%s: %.9g, transformers %.9g (rel %.2e)", what,
              got, want, fabs(got - want) / fabs(want));
}

/* `remat eval` on dir (a fixture's or an export) and data: the JSON line. */
static cJSON *eval_json(const char *dir, const char *data) {
    char *o;
    cr_assert_eq(run(&o, "eval --init-from %s --data %s --context 16 --json", dir, data), 0, "%s",
                 o);
    cJSON *j = last_json(o);
    free(o);
    return j;
}

static void eval_equals_transformers(const char *model) {
    char dir[512];
    snprintf(dir, sizeof dir, FIX "/%s", model);
    cJSON *j = eval_json(dir, FIX "/data.txt");
    assert_close(num(j, "loss"), expected(model, "eval_loss")->valuedouble, 1e-5, model);
    cr_assert_eq(num(j, "tokens"), expected(model, "eval_tokens")->valuedouble);
    cJSON_Delete(j);
    /* the same tokens as an llm.c token file (remat tokenize) */
    char *o;
    cr_assert_eq(run(&o, "tokenize --tokenizer %s/tokenizer.json --data %s --out %s", dir,
                     FIX "/data.txt", path("data.bin")),
                 0, "%s", o);
    free(o);
    j = eval_json(dir, path("data.bin"));
    assert_close(num(j, "loss"), expected(model, "eval_loss")->valuedouble, 1e-5, model);
    cJSON_Delete(j);
}

Test(cli_hf, eval_loss_equals_transformers_gpt2) { eval_equals_transformers("gpt2"); }
Test(cli_hf, eval_loss_equals_transformers_llama) { eval_equals_transformers("llama"); }

static void greedy_equals_transformers(const char *model) {
    char *o;
    const cJSON *prompt = cJSON_GetObjectItemCaseSensitive(g_expected, "prompt");
    cr_assert_eq(run(&o,
                     "sample --init-from " FIX "/%s --prompt '%s' --tokens %d --temperature 0 "
                     "--json",
                     model, prompt->valuestring,
                     cJSON_GetObjectItemCaseSensitive(g_expected, "sample_tokens")->valueint),
                 0, "%s", o);
    cr_assert(strstr(o, "tokens/s"), "%s", o);
    cJSON *j = last_json(o);
    const cJSON *ids = cJSON_GetObjectItemCaseSensitive(j, "ids");
    const cJSON *want = expected(model, "sample_ids");
    cr_assert_eq(cJSON_GetArraySize(ids), cJSON_GetArraySize(want), "%s", o);
    for (int i = 0; i < cJSON_GetArraySize(want); i++)
        cr_assert_eq(cJSON_GetArrayItem(ids, i)->valueint, cJSON_GetArrayItem(want, i)->valueint,
                     "%s: token %d: %s", model, i, o);
    cr_assert_str_eq(cJSON_GetObjectItemCaseSensitive(j, "text")->valuestring,
                     expected(model, "sample_text")->valuestring);
    cr_assert(num(j, "tokens_per_s") > 0);
    cJSON_Delete(j);
    free(o);
}

Test(cli_hf, greedy_sample_equals_transformers_gpt2) { greedy_equals_transformers("gpt2"); }
Test(cli_hf, greedy_sample_equals_transformers_llama) { greedy_equals_transformers("llama"); }

Test(cli_hf, sampling_is_reproducible_by_seed) {
    char *a, *b;
    const char *args = "sample --init-from " FIX "/llama --prompt 'Once' --tokens 20 --top-k 50 "
                       "--temperature 0.8 --json";
    cr_assert_eq(run(&a, "%s --seed 7", args), 0, "%s", a);
    cr_assert_eq(run(&b, "%s --seed 7", args), 0, "%s", b);
    cJSON *ja = last_json(a), *jb = last_json(b);
    char *ia = cJSON_PrintUnformatted(cJSON_GetObjectItemCaseSensitive(ja, "ids"));
    char *ib = cJSON_PrintUnformatted(cJSON_GetObjectItemCaseSensitive(jb, "ids"));
    cr_assert_str_eq(ia, ib);
    cr_assert_eq(num(ja, "tokens"), 20);
    free(ia);
    free(ib);
    cJSON_Delete(ja);
    cJSON_Delete(jb);
    free(a);
    free(b);
}

/* train --init-from ... --export name (extra flags), exit status 0. */
static void train_export(const char *model, const char *name, const char *extra) {
    char *o;
    const cJSON *tr = cJSON_GetObjectItemCaseSensitive(g_expected, "train");
    cr_assert_eq(run(&o,
                     "train --init-from " FIX "/%s --data " FIX "/data.txt --context 16 --batch "
                     "%d --optim sgd --lr %g --steps %d --quiet --export %s %s",
                     model, cJSON_GetObjectItemCaseSensitive(tr, "batch")->valueint,
                     cJSON_GetObjectItemCaseSensitive(tr, "lr")->valuedouble,
                     cJSON_GetObjectItemCaseSensitive(tr, "steps")->valueint, path(name), extra),
                 0, "%s", o);
    free(o);
}

/* Whether two files hold the same bytes. */
static bool same_bytes(const char *a, const char *b) {
    char cmd[2048];
    snprintf(cmd, sizeof cmd, "cmp -s '%s' '%s'", a, b);
    return system(cmd) == 0;
}

static void export_reloads_the_trained_model(const char *model) {
    train_export(model, "out", "");
    char f[600];
    static const char *const files[] = {"config.json", "model.safetensors", "tokenizer.json"};
    for (int i = 0; i < 3; i++) {
        snprintf(f, sizeof f, "%s/%s", path("out"), files[i]);
        cr_assert(access(f, R_OK) == 0, "no %s", f);
    }
    /* the exported model's loss: PyTorch's after the same SGD steps */
    cJSON *j = eval_json(path("out"), FIX "/data.txt");
    assert_close(num(j, "loss"), expected(model, "trained_eval_loss")->valuedouble, 1e-5, model);
    cJSON_Delete(j);
    /* every strategy trains the same model, bitwise */
    static const char *const strategies[] = {"block", "sequential=2", "selective=dots",
                                             "block --reentrant", "budget=99%"};
    char other[600], out_w[600];
    snprintf(out_w, sizeof out_w, "%s/model.safetensors", path("out"));
    for (int i = 0; i < 5; i++) {
        char flag[64];
        snprintf(flag, sizeof flag, "--checkpoint %s", strategies[i]);
        train_export(model, "other", flag);
        snprintf(other, sizeof other, "%s/model.safetensors", path("other"));
        cr_assert(same_bytes(out_w, other), "%s: --checkpoint %s trained other weights", model,
                  strategies[i]);
    }
}

Test(cli_hf, train_export_reloads_the_trained_model_gpt2) {
    export_reloads_the_trained_model("gpt2");
}
Test(cli_hf, train_export_reloads_the_trained_model_llama) {
    export_reloads_the_trained_model("llama");
}

Test(cli_hf, resume_continues_bitwise_and_selects_llama_tags) {
    char *o;
    const char *common = "--data " FIX "/data.txt --context 16 --batch 2 --quiet "
                         "--checkpoint selective=names:q+k+mlp_act";
    cr_assert_eq(
        run(&o, "train --init-from " FIX "/llama %s --steps 4 --export %s", common, path("full")),
        0, "%s", o);
    free(o);
    cr_assert_eq(
        run(&o, "train --init-from " FIX "/llama %s --steps 2 --save %s", common, path("run.bin")),
        0, "%s", o);
    free(o);
    /* no --init-from: the file keeps the model's config.json and its directory */
    cr_assert_eq(run(&o, "train --resume %s %s --steps 4 --save %s --export %s", path("run.bin"),
                     common, path("run4.bin"), path("resumed")),
                 0, "%s", o);
    free(o);
    /* sample reads the save file as the model it holds: the export's tokens */
    char *a_out, *b_out;
    cr_assert_eq(run(&a_out, "sample --resume %s --prompt Once --tokens 8 --temperature 0 --json",
                     path("run4.bin")),
                 0, "%s", a_out);
    cr_assert_eq(run(&b_out,
                     "sample --init-from %s --prompt Once --tokens 8 --temperature 0 --json",
                     path("resumed")),
                 0, "%s", b_out);
    cJSON *ja = last_json(a_out), *jb = last_json(b_out);
    char *ia = cJSON_PrintUnformatted(cJSON_GetObjectItemCaseSensitive(ja, "ids"));
    char *ib = cJSON_PrintUnformatted(cJSON_GetObjectItemCaseSensitive(jb, "ids"));
    cr_assert_str_eq(ia, ib);
    free(ia);
    free(ib);
    cJSON_Delete(ja);
    cJSON_Delete(jb);
    free(a_out);
    free(b_out);
    char a[600], b[600];
    snprintf(a, sizeof a, "%s/model.safetensors", path("full"));
    snprintf(b, sizeof b, "%s/model.safetensors", path("resumed"));
    cr_assert(same_bytes(a, b), "the resumed run's weights differ");
    /* another model's directory is refused */
    cr_assert_eq(
        run(&o, "train --resume %s --init-from " FIX "/gpt2 %s --steps 4", path("run.bin"), common),
        1, "%s", o);
    cr_assert(strstr(o, "is another model than the one --resume"), "%s", o);
    free(o);
    /* GPT-2 has no tag 'q': the message lists its tags */
    cr_assert_eq(run(&o, "train --init-from " FIX "/gpt2 %s --steps 1", common), 1, "%s", o);
    cr_assert(strstr(o, "GPT-2") && strstr(o, "'q'") && strstr(o, "qkv"), "%s", o);
    free(o);
}

/* The layout of OpenAI's GPT-2 checkpoints: names without "transformer.", and
 * the attention's causal-mask buffers saved beside the weights. */
Test(cli_hf, openai_style_gpt2_checkpoint_loads) {
    char cmd[1024];
    snprintf(cmd, sizeof cmd, "cp -r " FIX "/gpt2 '%s'", path("openai"));
    cr_assert_eq(system(cmd), 0);
    remat_params *file = NULL, *renamed = NULL;
    remat_tensor *mask = NULL;
    cr_assert_eq(remat_safetensors_read(&file, FIX "/gpt2/model.safetensors", REMAT_F32), 0, "%s",
                 remat_last_error());
    cr_assert_eq(remat_params_new(&renamed), 0);
    for (int64_t i = 0; i < remat_params_count(file); i++) {
        const char *name = remat_params_name(file, i);
        cr_assert(!strncmp(name, "transformer.", 12) || !strncmp(name, "lm_head", 7), "%s", name);
        if (!strncmp(name, "transformer.", 12))
            cr_assert_eq(remat_params_add(renamed, name + 12, remat_params_tensor(file, i)), 0);
    }
    cr_assert_eq(remat_full(&mask, 4, (int64_t[]){1, 1, 64, 64}, 1.0, REMAT_F32, REMAT_DEVICE_CPU),
                 0);
    cr_assert_eq(remat_params_add(renamed, "h.0.attn.bias", mask), 0);
    cr_assert_eq(remat_params_add(renamed, "h.1.attn.bias", mask), 0);
    char st[600];
    snprintf(st, sizeof st, "%s/model.safetensors", path("openai"));
    static const char *const meta[] = {"format", "pt"};
    cr_assert_eq(remat_safetensors_save(st, renamed, 1, meta), 0, "%s", remat_last_error());
    remat_release(mask);
    remat_params_free(renamed);
    remat_params_free(file);
    cJSON *j = eval_json(path("openai"), FIX "/data.txt");
    assert_close(num(j, "loss"), expected("gpt2", "eval_loss")->valuedouble, 1e-5, "openai");
    cJSON_Delete(j);
}

/* A sharded checkpoint (model.safetensors.index.json) evaluates as the same
 * model saved whole; --data a token file (these directories have no
 * tokenizer). */
Test(cli_hf, a_sharded_checkpoint_evaluates_as_the_whole_one) {
    uint32_t ids[200];
    for (int i = 0; i < 200; i++) ids[i] = (uint32_t)((i * 37 + i / 7) % 64); /* vocab 64 */
    cr_assert_eq(remat_token_shard_write(path("t.bin"), ids, 200), 0, "%s", remat_last_error());
    cJSON *whole = eval_json(REMAT_FIXTURE_DIR "/hf_dirs/llama-tiny", path("t.bin"));
    cJSON *shards = eval_json(REMAT_FIXTURE_DIR "/hf_dirs/llama-sharded", path("t.bin"));
    cr_assert_eq(num(whole, "tokens"), 192); /* 12 windows of 16 + 1 in 200 tokens */
    cr_assert_eq(num(whole, "loss"), num(shards, "loss"));
    cJSON_Delete(whole);
    cJSON_Delete(shards);
}

/* remat bench on a Hugging Face model: every strategy's gradients bitwise
 * those of none, selective names from the model's tags. */
Test(cli_hf, bench_measures_a_hugging_face_model) {
    char *o;
    cr_assert_eq(run(&o, "bench --init-from " FIX "/llama --data " FIX "/data.txt --context 32 "
                         "--batch 2 --reps 1 --quiet --json --strategies "
                         "none,block,sequential=2,selective=names:q+k+mlp_act,budget=99%%"),
                 0, "%s", o);
    cJSON *j = last_json(o);
    cr_assert_str_eq(cJSON_GetObjectItemCaseSensitive(j, "model")->valuestring, "llama", "%s", o);
    const cJSON *rows = cJSON_GetObjectItemCaseSensitive(j, "strategies");
    cr_assert_eq(cJSON_GetArraySize(rows), 5, "%s", o);
    for (int i = 0; i < cJSON_GetArraySize(rows); i++)
        cr_assert(cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(cJSON_GetArrayItem(rows, i),
                                                                "grads_bitwise_equal")),
                  "%s", o);
    cJSON_Delete(j);
    free(o);
    cr_assert_eq(run(&o, "bench --init-from " FIX "/llama"), 2);
    cr_assert(strstr(o, "--init-from needs --data"), "%s", o);
    free(o);
}

/* dir/config.json with `from` replaced by `to`. */
static void edit_config(const char *dir, const char *from, const char *to) {
    char cfg[600], text[8192];
    snprintf(cfg, sizeof cfg, "%s/config.json", dir);
    FILE *f = fopen(cfg, "rb");
    size_t n = fread(text, 1, sizeof text - 1, f);
    fclose(f);
    text[n] = '\0';
    char *at = strstr(text, from);
    cr_assert(at, "no '%s' in %s", from, cfg);
    f = fopen(cfg, "wb");
    fwrite(text, 1, (size_t)(at - text), f);
    fputs(to, f);
    fputs(at + strlen(from), f);
    fclose(f);
}

/* A copy of a fixture directory, its config.json's `from` replaced by `to`. */
static const char *edited_copy(const char *model, const char *name, const char *from,
                               const char *to) {
    const char *dir = path(name);
    char cmd[2048];
    snprintf(cmd, sizeof cmd, "cp -r " FIX "/%s '%s'", model, dir);
    cr_assert_eq(system(cmd), 0);
    edit_config(dir, from, to);
    return dir;
}

/* GPT-2 with its dropouts on (attention composed of ops, dropout on the
 * probabilities): every strategy trains the same weights, bitwise, and
 * they differ from those trained without dropout. */
Test(cli_hf, dropout_fine_tuning_is_bitwise_under_every_strategy) {
    char d[512]; /* path()'s buffers are reused */
    snprintf(d, sizeof d, "%s",
             edited_copy("gpt2", "drop", "\"attn_pdrop\": 0.0", "\"attn_pdrop\": 0.1"));
    edit_config(d, "\"resid_pdrop\": 0.0", "\"resid_pdrop\": 0.1");
    edit_config(d, "\"embd_pdrop\": 0.0", "\"embd_pdrop\": 0.1");
    static const char *const strategies[] = {"none", "block", "sequential=2", "selective=dots",
                                             "budget=99%"};
    char ref[600], got[600], *o;
    for (int i = 0; i < 5; i++) {
        cr_assert_eq(run(&o,
                         "train --init-from %s --data " FIX "/data.txt --context 16 --batch 2 "
                         "--steps 3 --quiet --checkpoint %s --export %s",
                         d, strategies[i], path(i ? "s" : "ref")),
                     0, "%s", o);
        free(o);
        snprintf(ref, sizeof ref, "%s/model.safetensors", path("ref"));
        snprintf(got, sizeof got, "%s/model.safetensors", path("s"));
        if (i) cr_assert(same_bytes(ref, got), "--checkpoint %s: other weights", strategies[i]);
    }
    cr_assert_eq(run(&o,
                     "train --init-from " FIX "/gpt2 --data " FIX
                     "/data.txt --context 16 --batch 2 "
                     "--steps 3 --quiet --export %s",
                     path("s")),
                 0, "%s", o);
    free(o);
    cr_assert(!same_bytes(ref, got), "dropout changed nothing");
}

static void assert_fails(const char *needle, const char *fmt, const char *a, const char *b) {
    char *o, args[2048];
    snprintf(args, sizeof args, fmt, a, b);
    int rc = run(&o, "%s", args);
    cr_assert_eq(rc, 1, "remat %s: exit %d:\n%s", args, rc, o);
    cr_assert(strstr(o, needle), "remat %s: no '%s' in:\n%s", args, needle, o);
    free(o);
}

Test(cli_hf, bad_directories_get_clear_errors) {
    const char *data = FIX "/data.txt";
    assert_fails("No such file or directory", "eval --init-from %s --data %s", path("none"), data);
    mkdir(path("empty"), 0777);
    assert_fails("has no config.json", "eval --init-from %s --data %s", path("empty"), data);
    /* a tensor the file lacks: named, with the file */
    const char *g3 = edited_copy("gpt2", "g3", "\"n_layer\": 2", "\"n_layer\": 3");
    assert_fails("model.safetensors has no tensor 'transformer.h.2.ln_1.weight'",
                 "eval --init-from %s --data %s", g3, data);
    assert_fails("has no tensor 'transformer.h.2.ln_1.weight'",
                 "train --init-from %s --data %s --steps 1", g3, data);
    /* what remat does not implement: the key */
    const char *rs = edited_copy("llama", "rs", "\"rms_norm_eps\"",
                                 "\"rope_scaling\": {\"type\": \"linear\", \"factor\": 2.0}, "
                                 "\"rms_norm_eps\"");
    assert_fails("config.json: \"rope_scaling\" is not supported", "sample --init-from %s%s", rs,
                 " --prompt hi");
    const char *mt =
        edited_copy("gpt2", "mt", "\"model_type\": \"gpt2\"", "\"model_type\": \"bert\"");
    assert_fails("model_type", "eval --init-from %s --data %s", mt, data);
    /* no tokenizer.json: a text cannot be read, a token file can */
    const char *nt = edited_copy("llama", "nt", "\"llama\"", "\"llama\"");
    char f[600];
    snprintf(f, sizeof f, "%s/tokenizer.json", nt);
    cr_assert_eq(unlink(f), 0);
    assert_fails("needs the model's tokenizer.json", "eval --init-from %s --data %s", nt, data);
    assert_fails("has no tokenizer.json", "sample --init-from %s%s", nt, " --prompt hi");
    /* lengths beyond the model's positions name the key */
    assert_fails("config.json: n_positions", "eval --init-from " FIX "/gpt2 --data %s%s", data,
                 " --context 65");
    assert_fails("config.json: max_position_embeddings", "sample --init-from %s%s", FIX "/llama",
                 " --tokens 100");
    /* outputs are checked before the first step */
    assert_fails("is the --init-from directory",
                 "train --init-from %s --data %s --export " FIX "/gpt2", FIX "/gpt2", data);
    char *o;
    cr_assert_eq(run(&o, "train --init-from " FIX "/gpt2 --layers 3 --data %s", data), 2);
    cr_assert(strstr(o, "do not combine with --init-from"), "%s", o);
    free(o);
    assert_fails("is a Hugging Face model directory: start from it with --init-from",
                 "train --resume %s --data %s", FIX "/gpt2", data);
    assert_fails("is a Hugging Face model directory", "sample --resume %s%s", FIX "/gpt2", "");
    cr_assert_eq(run(&o, "train --data %s --export %s", data, path("x")), 2);
    cr_assert(strstr(o, "--export needs --init-from"), "%s", o);
    free(o);
}

/* ---- the op-level planner on these models (docs/planner.md) ------------------------ */

/* `remat bench` on a fixture model (autocast "off" or "bf16") with
 * `strategies`: the JSON object. */
static cJSON *bench_json(const char *model, const char *shape, const char *autocast,
                         const char *strategies) {
    char *o;
    cr_assert_eq(run(&o,
                     "bench --init-from " FIX "/%s --data " FIX "/data.txt %s --threads 1 "
                     "--reps 1 --quiet --json --autocast %s --strategies %s",
                     model, shape, autocast, strategies),
                 0, "%s", o);
    cJSON *j = last_json(o);
    free(o);
    return j;
}

static const cJSON *item(const cJSON *o, const char *key) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    cr_assert(v, "no '%s'", key);
    return v;
}

/* Six whole-step budgets from the planner's minimum to the step's
 * store-all peak (shape: --context and --batch): every plan's measured step
 * peak (the allocator's counters) and predicted peak within its budget,
 * gradients bitwise those of `none` under the same autocast, the predicted
 * step time never higher at a larger budget; with `partial`, some plan keeps
 * part of a block. Returns the store-all bytes. */
static double budgets_hold(const char *model, const char *shape, const char *autocast,
                           bool partial_wanted) {
    cJSON *j = bench_json(model, shape, autocast, "none,budget=100%");
    const cJSON *pl = item(j, "planner");
    double min = num(pl, "min_budget_bytes"), all = num(pl, "store_all_bytes");
    cJSON_Delete(j);
    cr_assert(min > 0 && all > min, "%s %s: min %.0f, store-all %.0f", model, autocast, min, all);
    char strat[512] = "none";
    long b[6];
    for (int k = 0; k < 6; k++) {
        b[k] = (long)(min + (all - min) * k / 5.0);
        size_t n = strlen(strat);
        snprintf(strat + n, sizeof strat - n, ",budget=%ld", b[k]);
    }
    j = bench_json(model, shape, autocast, strat);
    const cJSON *ss = item(j, "strategies");
    cr_assert_eq(cJSON_GetArraySize(ss), 7, "%s", strat);
    double prev_ms = INFINITY;
    int partial = 0;
    for (int k = 0; k < 7; k++) {
        const cJSON *s = cJSON_GetArrayItem(ss, k);
        const char *name = item(s, "strategy")->valuestring;
        cr_assert(cJSON_IsTrue(item(s, "grads_bitwise_equal")), "%s %s %s: gradients differ", model,
                  autocast, name);
        if (k == 0) continue;
        double peak = num(s, "peak_alloc_bytes"), budget = num(s, "budget_bytes");
        double pred = num(s, "plan_peak_bytes"), ms = num(s, "plan_step_ms");
        cr_assert_eq(budget, (double)b[k - 1]);
        cr_assert(peak <= budget && pred <= budget,
                  "%s %s %s: measured step peak %.0f, predicted %.0f, budget %.0f", model, autocast,
                  name, peak, pred, budget);
        cr_assert(ms <= prev_ms, "%s %s %s: predicted %.4f ms, above the smaller budget's %.4f",
                  model, autocast, name, ms, prev_ms);
        prev_ms = ms;
        partial += strstr(item(s, "plan_structure")->valuestring, " keeps ") != NULL;
    }
    cr_assert(partial > 0 || !partial_wanted, "%s %s: no plan keeps part of a block", model,
              autocast);
    cJSON_Delete(j);
    return all;
}

Test(cli_hf, budget_plans_per_op_on_llama_and_under_bf16_autocast) {
    /* the Llama and GPT-2, f32 and bf16 */
    const char *shape = "--context 32 --batch 4";
    double llama = budgets_hold("llama", shape, "off", true);
    double llama16 = budgets_hold("llama", shape, "bf16", true);
    double gpt2 = budgets_hold("gpt2", shape, "off", true);
    double gpt216 = budgets_hold("gpt2", shape, "bf16", true);
    /* a step whose peak is the embedding's backward: GPT-2 ties its
     * embedding to the head, and the engine sums the two gradients of that
     * weight out of place (the step profile counts the sum) */
    budgets_hold("gpt2", "--context 16 --batch 2", "off", false);
    /* the profiles see bf16's bytes: the saved activations shrink */
    cr_assert(llama16 < llama && gpt216 < gpt2, "store-all: llama %.0f / %.0f, gpt2 %.0f / %.0f",
              llama, llama16, gpt2, gpt216);
    /* train: the step's peak with the optimizer's state, and the same losses as none */
    char *a, *b;
    const char *common = "--init-from " FIX "/llama --data " FIX "/data.txt --context 32 "
                         "--batch 4 --threads 1 --steps 3 --autocast bf16";
    cr_assert_eq(run(&a, "train %s --quiet --json --checkpoint budget=95%%", common), 0, "%s", a);
    cr_assert_eq(run(&b, "train %s --quiet --json", common), 0, "%s", b);
    cJSON *ja = last_json(a), *jb = last_json(b);
    double step = num(ja, "step_peak_bytes"), budget = num(ja, "budget_bytes");
    cr_assert(step > 0 && step <= budget, "train: step peak %.0f, budget %.0f", step, budget);
    cr_assert_str_eq(item(ja, "loss_bits")->valuestring, item(jb, "loss_bits")->valuestring);
    cJSON_Delete(ja);
    cJSON_Delete(jb);
    free(a);
    free(b);
    cr_assert_eq(run(&a, "train %s --checkpoint budget=95%% --explain", common), 0, "%s", a);
    /* 2 blocks, the last ones perhaps in halves (attention, MLP): 2 to 4 stages */
    const char *ex = strstr(a, "plan explained (");
    cr_assert(ex && strstr(a, "measured:  step peak") && strstr(a, "to_dtype"), "%s", a);
    const int n_ex = atoi(ex + strlen("plan explained ("));
    cr_assert(n_ex == 2 || (n_ex <= 4 && strstr(a, "in halves (stage ")), "%s", a);
    free(a);
}
