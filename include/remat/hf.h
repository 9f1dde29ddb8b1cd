/*
 * remat/hf.h — Hugging Face model directories in and out: config.json
 * (GPT2Config, LlamaConfig) into a remat_model_config (remat/models.h), and
 * the weights beside it (model.safetensors, or a sharded checkpoint's
 * model.safetensors.index.json) into a parameter collection by name.
 *
 * A directory that transformers writes with save_pretrained() reads here,
 * and one remat writes with remat_hf_export loads in
 * transformers.AutoModelForCausalLM.from_pretrained (checked by
 * scripts/gen_hf_dir_fixtures.py). Parameters go by transformers' names
 * ("transformer.h.0.attn.c_attn.weight", "model.layers.0.self_attn.q_proj.weight",
 * ...), the names the library's models give them (remat_model_param).
 *
 * Reading config.json: absent keys (and JSON null) take transformers'
 * defaults (remat_model_config_default); keys remat has no use for are
 * ignored, as transformers ignores unknown keys. What remat does not
 * implement is REMAT_EUNSUPPORTED with a message naming the key: any
 * "rope_scaling", a rope_parameters.rope_type other than "default", a
 * model_type other than "gpt2" and "llama", an activation other than
 * GPT-2's "gelu_new" / "gelu_pytorch_tanh" / "gelu" and Llama's "silu",
 * GPT-2's cross-attention, scale_attn_by_inverse_layer_idx and
 * reorder_and_upcast_attn, scale_attn_weights false, a dtype other than
 * float32, bfloat16, float16 and float64. A key of the wrong JSON type, a
 * value out of range, or a config remat_model_config_check refuses is
 * REMAT_EFORMAT naming the key. Every message names the file.
 */
#ifndef REMAT_HF_H
#define REMAT_HF_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "remat/error.h"
#include "remat/models.h"
#include "remat/params.h"
#include "remat/safetensors.h"
#include "remat/tensor.h"

#include "remat/export.h"

#ifdef __cplusplus
extern "C" {
#endif
REMAT_BEGIN_PUBLIC

#define REMAT_HF_MAX_EOS 8
/* The largest shard remat_hf_export writes: transformers' save_pretrained
 * default (max_shard_size="50GB"). */
#define REMAT_HF_MAX_SHARD_BYTES INT64_C(50000000000)

/* What config.json says besides the model's shape. */
typedef struct remat_hf_extra {
    /* [dtype] ([torch_dtype] before transformers 5): the dtype the weights
     * were saved in: f32 (float32, the default; float16 reads as f32:
     * remat has no f16), bf16 (bfloat16) or f64 (float64) */
    remat_dtype dtype;
    int64_t bos_token_id; /* [bos_token_id]; -1 when null */
    int n_eos;            /* [eos_token_id]: a token id, a list of them, or null (0) */
    int64_t eos_token_id[REMAT_HF_MAX_EOS];
} remat_hf_extra;

/* Parses config.json text (n bytes; `name`, may be NULL, is what messages
 * call it) into *cfg and, when extra is not NULL, *extra. Errors (see
 * above) leave both unchanged. */
remat_status remat_hf_config_parse(remat_model_config *cfg /* OUT */,
                                   remat_hf_extra *extra /* OUT, may be NULL */, const char *text,
                                   size_t n, const char *name);

/* remat_hf_config_parse of the file at `path`: a config.json, or a
 * directory holding one. REMAT_EIO when it cannot be read. */
remat_status remat_hf_config_read(remat_model_config *cfg /* OUT */,
                                  remat_hf_extra *extra /* OUT, may be NULL */, const char *path);

/* Writes cfg (and extra; NULL: float32, no token ids) as a config.json
 * that transformers reads (architectures GPT2LMHeadModel /
 * LlamaForCausalLM, each family's own key names, rope_theta both at the
 * top, as transformers 4 reads it, and in rope_parameters, as 5 does) to
 * `path`, through a temporary file renamed over it. REMAT_EINVAL for a
 * config remat_model_config_check refuses (nothing written), REMAT_EIO. */
remat_status remat_hf_config_write(const remat_model_config *cfg, const remat_hf_extra *extra,
                                   const char *path);

/* Loads directory `dir`'s weights into `params` by name: its
 * model.safetensors, else its model.safetensors.index.json and shards
 * (remat_safetensors_load: all or nothing; `opts` may be NULL).
 * Names are matched as transformers' from_pretrained matches them: a
 * parameter no tensor names exactly takes the tensor named as it is
 * without, or with, the base-model prefix ("transformer." for GPT-2,
 * "model." for Llama), so that a base model's checkpoint, such as the GPT-2
 * files of the Hugging Face hub ("wte.weight", "h.0.attn.c_attn.weight"),
 * loads into remat's GPT-2; and the buffers such files carry beside the
 * parameters (GPT-2's causal masks "h.N.attn.bias", "h.N.attn.masked_bias";
 * Llama's "rotary_emb.inv_freq") are skipped, not unexpected.
 * REMAT_EIO naming the directory when it has neither (one with only
 * pytorch_model.bin: the message says how to convert it). */
remat_status remat_hf_load_weights(remat_params *params, const char *dir,
                                   const remat_load_options *opts);

/* Writes a Hugging Face model directory: creates `dir` if needed (not its
 * parents), then config.json (remat_hf_config_write) and the weights from
 * `params` (metadata {"format": "pt"}, which transformers asks for) as
 * save_pretrained writes them: model.safetensors, or, above
 * REMAT_HF_MAX_SHARD_BYTES, shards and model.safetensors.index.json
 * (remat_safetensors_save_sharded, which also removes the weights files of
 * an earlier export that the new ones do not replace); each file complete
 * or not at all. Other files in `dir` (a tokenizer) are left as they are.
 * REMAT_EIO, REMAT_EINVAL (as remat_hf_config_write and
 * remat_safetensors_save). */
remat_status remat_hf_export(const char *dir, const remat_model_config *cfg,
                             const remat_hf_extra *extra, const remat_params *params);

/* remat_hf_export with shards of at most max_shard_bytes (> 0; as
 * save_pretrained's max_shard_size). */
remat_status remat_hf_export_sharded(const char *dir, const remat_model_config *cfg,
                                     const remat_hf_extra *extra, const remat_params *params,
                                     int64_t max_shard_bytes);

REMAT_END_PUBLIC
#ifdef __cplusplus
}
#endif
#endif /* REMAT_HF_H */
