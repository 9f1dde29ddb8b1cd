/*
 * remat/models.h — GPT-2 and Llama as library models, with Hugging Face
 * transformers' parameter names, shapes and arithmetic (GPT2LMHeadModel,
 * LlamaForCausalLM), runnable under every checkpointing strategy
 * (remat/strategy.h).
 *
 *   GPT-2   x = wte[ids] + wpe[positions]; dropout(embd_pdrop)
 *           block: x = x + c_proj(attn(c_attn(ln_1(x))))    causal, n_heads heads
 *                  x = x + mlp.c_proj(gelu(mlp.c_fc(ln_2(x))))
 *           logits = ln_f(x) · lm_headᵀ                      (lm_head = wte when tied)
 *           LayerNorm with bias, GELU (tanh form: "gelu_new"), a bias on every
 *           linear; the linears' weights are stored (in, out) as HF's Conv1D
 *           stores them, so the names and shapes are those of HF's files.
 *   Llama   x = embed_tokens[ids]
 *           block: x = x + o_proj(attn(rope(q_proj(h)), rope(k_proj(h)), v_proj(h))),
 *                      h = input_layernorm(x)               RMSNorm
 *                  x = x + down_proj(silu(gate_proj(h)) * up_proj(h)),
 *                      h = post_attention_layernorm(x)
 *           logits = norm(x) · lm_headᵀ
 *           RoPE (rope_theta, HF's rotate_half convention) on q and k;
 *           grouped-query attention (n_kv_heads divides n_heads; 1: multi-query)
 *           without materialising the repeated K/V heads; no biases unless
 *           attention_bias / mlp_bias; lm_head tied or not.
 *
 * Parameters (remat_model_param): the names of HF's named_parameters(), in
 * its order, e.g. "transformer.h.0.attn.c_attn.weight" (hidden, 3·hidden),
 * "model.layers.0.self_attn.k_proj.weight" (n_kv_heads·head_dim, hidden).
 * A tied lm_head is no parameter of its own (HF lists it once too).
 *
 * The model's blocks are a chain of remat_stage (remat_model_stages): the
 * strategies, the planner's profiles and plans run them as they are. Every
 * block names its residuals with remat_tag (remat_model_tags), which is
 * what selective=names policies select:
 *   GPT-2  qkv, attn, attn_probs (attention composed of ops only), attn_out,
 *          mlp_up, mlp_act, mlp_out
 *   Llama  q, k, v (after RoPE for q and k), attn, attn_out, mlp_gate,
 *          mlp_up, mlp_act (silu(gate) * up), mlp_out
 *
 * Example: one training step of a pretrained model under block checkpointing.
 *
 *   remat_model_config cfg;
 *   remat_model_config_default(&cfg, REMAT_MODEL_LLAMA);
 *   cfg.n_layers = 8; ...                         // or from a config.json
 *   remat_model *m = NULL;
 *   int rc = remat_model_create(&m, &cfg, REMAT_DEVICE_CPU);
 *   // load weights by name: remat_model_find_param(m, "model.norm.weight") ...
 *   remat_strategy s = {.kind = REMAT_STRATEGY_BLOCK};
 *   remat_tensor *loss = NULL;
 *   if (!rc) rc = remat_model_loss(&loss, m, ids, targets, &s);
 *   if (!rc) rc = remat_backward_scalar(loss);     // fills every parameter's .grad
 *   remat_release(loss);
 *   remat_model_free(m);
 */
#ifndef REMAT_MODELS_H
#define REMAT_MODELS_H

#include <stdbool.h>
#include <stdint.h>

#include "remat/checkpoint.h"
#include "remat/device.h"
#include "remat/ops.h"
#include "remat/params.h"
#include "remat/strategy.h"
#include "remat/tensor.h"

#include "remat/export.h"

#ifdef __cplusplus
extern "C" {
#endif
REMAT_BEGIN_PUBLIC

typedef enum remat_model_family { REMAT_MODEL_GPT2 = 1, REMAT_MODEL_LLAMA = 2 } remat_model_family;

/* The fields of HF's GPT2Config / LlamaConfig that the models read (the
 * config.json key in brackets). remat_model_config_default fills HF's
 * defaults; a zero-filled struct is not a valid config. */
typedef struct remat_model_config {
    remat_model_family family;
    int n_layers;             /* [n_layer] [num_hidden_layers] */
    int n_heads;              /* [n_head] [num_attention_heads] */
    int n_kv_heads;           /* Llama [num_key_value_heads], divides n_heads; GPT-2: n_heads */
    int64_t hidden;           /* [n_embd] [hidden_size] */
    int64_t intermediate;     /* [n_inner] (GPT-2: 0 means 4·hidden) [intermediate_size] */
    int64_t head_dim;         /* Llama [head_dim]; 0 means hidden / n_heads (GPT-2: always) */
    int64_t vocab;            /* [vocab_size] */
    int64_t max_positions;    /* [n_positions] [max_position_embeddings]: longest sequence */
    double norm_eps;          /* [layer_norm_epsilon] [rms_norm_eps] */
    double rope_theta;        /* Llama [rope_theta] */
    bool tie_word_embeddings; /* [tie_word_embeddings]: lm_head is the token embedding */
    bool attention_bias;      /* Llama [attention_bias]: biases on q/k/v/o_proj */
    bool mlp_bias;            /* Llama [mlp_bias]: biases on gate/up/down_proj */
    remat_gelu_approx gelu;   /* GPT-2 [activation_function]: "gelu_new" and
                                 "gelu_pytorch_tanh" are TANH, "gelu" is ERF */
    double embd_pdrop;        /* GPT-2 [embd_pdrop]: dropout after the embeddings */
    double attn_pdrop;        /* [attn_pdrop] [attention_dropout]: on the attention
                                 probabilities (composed attention when > 0 in training) */
    double resid_pdrop;       /* GPT-2 [resid_pdrop]: after each projection into the
                                 residual stream */
    double initializer_range; /* [initializer_range]: std of the normal init */
} remat_model_config;

/* Fills *cfg with HF's defaults for the family: GPT2Config() (12 layers,
 * 12 heads, 768 wide, vocab 50257, 1024 positions, eps 1e-5, gelu_new,
 * dropouts 0.1, tied) or LlamaConfig() (32 layers, 32 heads and kv heads,
 * 4096 wide, intermediate 11008, vocab 32000, 2048 positions, eps 1e-6,
 * rope_theta 10000, untied, no biases, no dropout). REMAT_EINVAL for a
 * NULL cfg or an unknown family. */
remat_status remat_model_config_default(remat_model_config *cfg, remat_model_family family);

/* Checks a config: sizes positive, heads dividing the width (GPT-2) and
 * n_kv_heads dividing n_heads, an even head_dim (RoPE), eps > 0 and finite,
 * rope_theta > 0, dropouts in [0, 1). REMAT_EINVAL naming the field (with
 * its config.json key) otherwise. */
remat_status remat_model_config_check(const remat_model_config *cfg);

typedef struct remat_model remat_model;

/* OUT: *out = a new model of cfg (copied) whose parameters are f32 leaves
 * on `device` that require grad, initialised as HF's _init_weights does:
 * linear and embedding weights normal(0, initializer_range), GPT-2's
 * c_proj weights normal(0, initializer_range / sqrt(2 n_layers)), biases
 * 0, norm weights 1, drawn in parameter order from the device's generator
 * (remat_manual_seed makes them reproducible). The model starts in training
 * mode (dropout active), as a PyTorch module does. Errors: REMAT_EINVAL
 * (NULL out or cfg, a config remat_model_config_check refuses),
 * REMAT_ENOMEM; *out NULL then. */
remat_status remat_model_create(remat_model **out, const remat_model_config *cfg,
                                remat_device device);
/* Releases the parameters (tensors the caller still holds stay valid).
 * NULL → no-op. */
void remat_model_free(remat_model *m);

/* The model's config (valid while m lives). */
const remat_model_config *remat_model_get_config(const remat_model *m);

/* Training mode: dropout active (PyTorch: module.train() / eval()). */
void remat_model_set_training(remat_model *m, bool training);
bool remat_model_training(const remat_model *m);

/* ---- parameters ---- */
int remat_model_n_params(const remat_model *m);
/* The i-th parameter (borrowed; NULL outside [0, n)); *name (may be NULL)
 * its HF name. */
remat_tensor *remat_model_param(const remat_model *m, int i, const char **name);
/* The parameter named `name` (borrowed), or NULL if the model has none of
 * that name. */
remat_tensor *remat_model_find_param(const remat_model *m, const char *name);
/* OUT: *out = a new collection (remat/params.h) of m's parameters under
 * their HF names, in named_parameters() order; with state_dict, a tied
 * lm_head is also listed as "lm_head.weight" (state_dict() lists both
 * names). The tensors are the model's own: remat_safetensors_load writes
 * into them, remat_safetensors_save saves them. The caller frees the
 * collection (remat_params_free); the model is unchanged. REMAT_EINVAL /
 * REMAT_ENOMEM; *out NULL then. */
remat_status remat_model_params(const remat_model *m, bool state_dict, remat_params **out);
/* Total number of parameter elements. */
int64_t remat_model_numel(const remat_model *m);
/* Sets every parameter's .grad to NULL. */
void remat_model_zero_grad(remat_model *m);

/* ---- running ----
 * ids: (B, T) i64 token ids in [0, vocab), T <= max_positions, on any
 * device (copied to the model's when elsewhere). Positions are 0..T-1.
 * Grad mode, autocast and the RNG are the caller's: under
 * remat_autocast_begin the linears and the attention run in bf16. Every
 * output is a new reference, owned by the innermost open scope if there
 * is one (as an op's); on failure it is NULL and nothing leaks. */

/* OUT: *logits = (B, T, vocab), the blocks run under s (NULL: none). */
remat_status remat_model_forward(remat_tensor **logits, remat_model *m, remat_tensor *ids,
                                 const remat_strategy *s);
/* OUT: *loss = mean cross-entropy of the logits at every position against
 * targets (B, T) i64 (the next tokens: no shift is applied; -100 is
 * ignored), a 0-dim tensor. */
remat_status remat_model_loss(remat_tensor **loss, remat_model *m, remat_tensor *ids,
                              remat_tensor *targets, const remat_strategy *s);

/* The three parts of the forward, for profiling and planning:
 *   remat_model_embed   ids → x (B, T, hidden)
 *   the stages          x → x, one per layer (remat_run_chain, remat_profile_stages)
 *   remat_model_head    x → logits, or the loss when targets is not NULL
 * remat_model_forward is remat_model_head(remat_run_chain(remat_model_embed)). */
remat_status remat_model_embed(remat_tensor **x, remat_model *m, remat_tensor *ids);
/* OUT: *stages = the model's n_layers stages (borrowed, valid while m
 * lives); returns n_layers. */
int remat_model_stages(const remat_model *m, const remat_stage **stages);
/* OUT: *stages = the same blocks as 2 · n_layers half-block stages
 * (remat_block_part): stage 2l is layer l's attention half, 2l + 1 its MLP
 * half; borrowed, valid while m lives; returns 2 · n_layers. The chain
 * computes what remat_model_stages' does, bit for bit, gradients and dropout
 * included, so any mix works too: the whole stages of layers 0..k-1, then
 * the half stages from 2k on. */
int remat_model_half_stages(const remat_model *m, const remat_stage **stages);
remat_status remat_model_head(remat_tensor **out, remat_model *m, remat_tensor *x,
                              remat_tensor *targets);

/* ---- inference with a KV cache (sampling) ----
 * A cache holds every layer's keys and values for up to `capacity`
 * positions of `batch` sequences: remat_model_forward_cached runs only the
 * new tokens, attending to the cached ones (HF: past_key_values). */
typedef struct remat_model_cache remat_model_cache;

/* OUT: *out = an empty cache for m (which must outlive it): batch >= 1,
 * 1 <= capacity <= max_positions. Its tensors are on m's device, in f32.
 * REMAT_EINVAL / REMAT_ENOMEM; *out NULL then. */
remat_status remat_model_cache_create(remat_model_cache **out, const remat_model *m, int64_t batch,
                                      int64_t capacity);
/* NULL → no-op. */
void remat_model_cache_free(remat_model_cache *c);
/* Positions filled so far. */
int64_t remat_model_cache_length(const remat_model_cache *c);
/* Empties the cache (the next forward starts at position 0). */
void remat_model_cache_reset(remat_model_cache *c);

/* OUT: *logits = (B, T, vocab) for ids (B, T) at positions len..len+T-1,
 * where len = remat_model_cache_length(c), each token attending to the
 * cached positions and the new ones up to itself; their keys and values
 * are appended (len grows by T). Runs without grad and without dropout
 * (inference), under the caller's autocast. The logits equal those of
 * remat_model_forward on the whole sequence, up to rounding. Errors:
 * REMAT_EINVAL (B other than the cache's batch, len + T beyond its
 * capacity, bad ids; the cache is then unchanged). */
remat_status remat_model_forward_cached(remat_tensor **logits, remat_model *m, remat_model_cache *c,
                                        remat_tensor *ids);

/* ---- sampling ---- */
/* OUT: *out = a token picked from v logits (host memory): temperature 0
 * takes the likeliest (the lowest index on ties); otherwise one draw
 * u ~ U[0, 1) from the cpu generator picks among the top_k likeliest (0:
 * all) by their softmax(logits / temperature). REMAT_EINVAL for NULL
 * arguments, v < 1, a negative or non-finite temperature, top_k < 0, or a
 * NaN or +inf logit. */
remat_status remat_sample_logits(const float *logits, int64_t v, double temperature, int top_k,
                                 int64_t *out);
/* OUT: *out = (1, n) i64, n tokens generated after prompt (1, P) i64 through
 * a KV cache (P + n <= max_positions), each picked by remat_sample_logits
 * from the last position's logits (HF: generate(do_sample=temperature > 0,
 * top_k=...); temperature 0 is greedy search). No grad, no dropout. */
remat_status remat_model_generate(remat_tensor **out, remat_model *m, remat_tensor *prompt,
                                  int64_t n, double temperature, int top_k);

/* The tag names the model's blocks put on their residuals; *n their count. */
const char *const *remat_model_tags(const remat_model *m, int *n);

/* ---- the GPT-2 block on its own ----
 * For models of one's own built from GPT-2 blocks (the remat program's
 * byte-level GPT is one). x (B, T, C) → x1 = x + drop(proj(attn(ln_1(x)))),
 * y = x1 + drop(mlp_proj(gelu(fc(ln_2(x1))))). Weights borrowed. */
typedef struct remat_gpt2_block_weights {
    remat_tensor *ln_1_weight, *ln_1_bias;           /* (C) */
    remat_tensor *attn_weight, *attn_bias;           /* c_attn: (C, 3C) / (3C) */
    remat_tensor *attn_proj_weight, *attn_proj_bias; /* attn.c_proj: (C, C) / (C) */
    remat_tensor *ln_2_weight, *ln_2_bias;           /* (C) */
    remat_tensor *fc_weight, *fc_bias;               /* mlp.c_fc: (C, I) / (I) */
    remat_tensor *mlp_proj_weight, *mlp_proj_bias;   /* mlp.c_proj: (I, C) / (C) */
} remat_gpt2_block_weights;

/* Which part of a transformer block a call or a stage runs. The halves split
 * the block at its first residual sum, x1:
 *   REMAT_BLOCK_ATTN  x  → x1 = x + attention branch(norm_1(x))
 *   REMAT_BLOCK_MLP   x1 → y  = x1 + MLP branch(norm_2(x1))
 * and their composition gives the whole block's values and gradients bit for
 * bit, dropout included (the halves draw the block's random numbers in the
 * block's order). What for: the planner can then store one half of a block and
 * checkpoint the other, and a recomputation reruns half a block at a time
 * (remat_model_half_stages, docs/planner.md "Half-block stages"). */
typedef enum remat_block_part {
    REMAT_BLOCK_WHOLE = 0, /* x → y, the default */
    REMAT_BLOCK_ATTN = 1,
    REMAT_BLOCK_MLP = 2
} remat_block_part;

typedef struct remat_gpt2_block_options {
    int heads;          /* divides C */
    double eps;         /* the layer norms' */
    bool linear_layout; /* weights stored (out, in) as remat_linear takes them (the
                           shapes above transposed); false: HF's Conv1D (in, out) */
    remat_tensor *mask; /* (T, T) i64, 1 where key j > query i (remat_causal_mask):
                           attention composed of ops, with dropout on the
                           probabilities; NULL: the fused remat_attention */
    double attn_pdrop;  /* on the probabilities (composed attention only) */
    double resid_pdrop; /* after attn.c_proj and mlp.c_proj; 0: no dropout op */
    remat_gelu_approx gelu;
    bool tags;             /* name the residuals (remat_model_tags' GPT-2 list) */
    remat_block_part part; /* 0: the whole block; a half (x is then x1 for the MLP half) */
} remat_gpt2_block_options;

/* OUT: *out = the block applied to x, a new reference. On failure *out is
 * NULL and nothing leaks. */
remat_status remat_gpt2_block(remat_tensor **out, const remat_gpt2_block_weights *w,
                              const remat_gpt2_block_options *o, remat_tensor *x);
/* The GPT-2 block's tag names; *n their count. */
const char *const *remat_gpt2_block_tags(int *n);

/* OUT: *out = (T, T) i64 on device, 1 where j > i (the future). */
remat_status remat_causal_mask(remat_tensor **out, int64_t T, remat_device device);

REMAT_END_PUBLIC
#ifdef __cplusplus
}
#endif
#endif /* REMAT_MODELS_H */
