/* src/weights/hf_dir.c — Hugging Face model directories (remat/hf.h): the
 * weights of one read by name (as transformers matches names), and a
 * directory written whole (config.json and model.safetensors or shards). */
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

#include "core/core.h"
#include "remat/hf.h"
#include "weights/st.h"

/* The base-model prefixes transformers adds to or strips from a
 * checkpoint's names (GPT2PreTrainedModel's and LlamaPreTrainedModel's
 * base_model_prefix), and the buffers some checkpoints carry beside the
 * parameters, which transformers ignores (GPT-2's causal masks, "h.N.attn.bias"
 * and the older "h.N.attn.masked_bias"; Llama's "rotary_emb.inv_freq"). */
static const char *const k_base_prefixes[] = {"transformer.", "model."};

static bool ends_with(const char *s, const char *tail) {
    size_t n = strlen(s), k = strlen(tail);
    return n >= k && strcmp(s + n - k, tail) == 0;
}

static bool hf_buffer(const char *name) {
    return ends_with(name, ".attn.bias") || ends_with(name, ".attn.masked_bias") ||
           ends_with(name, "rotary_emb.inv_freq");
}

static const rm_st_names k_hf_names = {k_base_prefixes, 2, hf_buffer};

static bool is_file(const char *path) {
    struct stat st;
    return stat(path, &st) == 0 && S_ISREG(st.st_mode);
}

remat_status remat_hf_load_weights(remat_params *params, const char *dir,
                                   const remat_load_options *opts) {
    static const char *call = "remat_hf_load_weights";
    if (!params || !dir)
        return rm_err(REMAT_EINVAL, "%s: %s is NULL", call, !params ? "params" : "dir");
    char single[4096], index[4096], bin[4096];
    if (snprintf(single, sizeof single, "%s/model.safetensors", dir) >= (int)sizeof single ||
        snprintf(index, sizeof index, "%s/model.safetensors.index.json", dir) >= (int)sizeof index)
        return rm_err(REMAT_EINVAL, "%s: the directory's path is too long", call);
    snprintf(bin, sizeof bin, "%s/pytorch_model.bin", dir);
    const char *path = is_file(single) ? single : is_file(index) ? index : NULL;
    if (!path) {
        struct stat st;
        if (stat(dir, &st) != 0 || !S_ISDIR(st.st_mode))
            return rm_err(REMAT_EIO, "%s: '%s' is not a directory", call, dir);
        if (is_file(bin))
            return rm_err(REMAT_EIO,
                          "%s: '%s' has pytorch_model.bin but no model.safetensors: remat reads "
                          "safetensors only (convert it in Python: model.save_pretrained(dir, "
                          "safe_serialization=True))",
                          call, dir);
        return rm_err(REMAT_EIO,
                      "%s: '%s' has neither model.safetensors nor "
                      "model.safetensors.index.json",
                      call, dir);
    }
    rm_st_checkpoint c;
    remat_status rc = rm_st_checkpoint_open(&c, path);
    if (rc) return rm_err_prefix(rc, call);
    rc = rm_st_load_sources(call, path, params, c.src, c.n_src, opts, &k_hf_names);
    rm_st_checkpoint_close(&c);
    return rc;
}

remat_status remat_hf_export_sharded(const char *dir, const remat_model_config *c,
                                     const remat_hf_extra *extra, const remat_params *params,
                                     int64_t max_shard_bytes) {
    static const char *call = "remat_hf_export";
    if (!dir || !c || !params)
        return rm_err(REMAT_EINVAL, "%s: %s is NULL", call, !dir ? "dir" : !c ? "c" : "params");
    if (max_shard_bytes <= 0)
        return rm_err(REMAT_EINVAL, "%s: max_shard_bytes must be positive (got %lld)", call,
                      (long long)max_shard_bytes);
    char cfg[4096];
    if (snprintf(cfg, sizeof cfg, "%s/config.json", dir) >= (int)sizeof cfg - 64)
        return rm_err(REMAT_EINVAL, "%s: the directory's path is too long", call);
    struct stat st;
    if (mkdir(dir, 0777) != 0 && !(errno == EEXIST && stat(dir, &st) == 0 && S_ISDIR(st.st_mode)))
        return rm_err(REMAT_EIO, "%s: cannot create the directory '%s': %s", call, dir,
                      strerror(errno == EEXIST ? ENOTDIR : errno));
    remat_status rc = remat_hf_config_write(c, extra, cfg);
    static const char *const meta[] = {"format", "pt"};
    if (!rc) rc = remat_safetensors_save_sharded(dir, "model", params, max_shard_bytes, 1, meta);
    return rc ? rm_err_prefix(rc, call) : REMAT_OK;
}

remat_status remat_hf_export(const char *dir, const remat_model_config *c,
                             const remat_hf_extra *extra, const remat_params *params) {
    return remat_hf_export_sharded(dir, c, extra, params, REMAT_HF_MAX_SHARD_BYTES);
}
