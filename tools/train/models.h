/*
 * tools/train/models.h — the two models of the remat program, written on the
 * public remat API.
 *
 * GPT (byte-level, vocab 256):
 *   x = wte[idx] + wpe                                  (B, T, C)
 *   block: x = x + proj(attn(ln1(x)))                   causal multi-head attention
 *          x = x + fc2(gelu(fc(ln2(x))))                MLP 4x
 *   logits = ln_f(x) · head^T (head = wte when tied)    (B, T, 256)
 *   loss = cross_entropy(logits, targets, ignore -100)
 *
 * MLP (deep, width W):
 *   x = linear_in(input)                                W → W
 *   block: x = x + gelu(linear(layer_norm(x)))          W → W
 *   out = head(ln_f(x)); loss = mse(out, y)
 *   (the input layer makes the first block's input require grad, as the GPT's
 *   embedding does, so reentrant checkpointing gets gradients there too)
 *
 * Llama (--model llama): the library's Llama (remat/models.h) built from the
 * flags, byte-level like the GPT and on the same tasks; its tags the
 * library's (q, k, v, attn, attn_out, mlp_gate, mlp_up, mlp_act, mlp_out).
 *
 * HF (remat train --init-from DIR): a Hugging Face GPT-2 or Llama, the
 * library's model object (remat/models.h) read from DIR (tools/io/hf_dir.h):
 * its parameters under transformers' names, its blocks the library's stages,
 * its tags the library's (remat_model_tags); dropout as its config says, off
 * in evaluation (model_set_training).
 *
 * Every block is a block_fn (strategy.h) taking one tensor and returning one,
 * so the strategies can wrap it in remat_checkpoint.
 *
 * Named residuals (remat_tag; what selective=names:... policies save):
 *   GPT  qkv         linear(ln1(x)), (B, T, 3C)
 *        attn        the attention's output before the projection, (B, H, T, D)
 *        attn_probs  softmax of the masked scores, (B, H, T, T); only with
 *                    --attention ops (the fused op never stores them)
 *        attn_out    the attention projection's output, (B, T, C)
 *        mlp_up      fc(ln2(x)), (B, T, 4C)
 *        mlp_act     gelu(mlp_up), (B, T, 4C)
 *        mlp_out     fc2(mlp_act), (B, T, C)
 *   MLP  linear      linear(layer_norm(x)), (B, W)
 *        gelu        gelu(linear), (B, W)
 * A tag is an identity view: values, gradients and memory are unchanged.
 */
#ifndef REMAT_TOOLS_MODELS_H
#define REMAT_TOOLS_MODELS_H

#include <stdbool.h>
#include <stdint.h>

#include "cli/args.h"
#include "gpt_block.h"
#include "io/json.h"
#include "remat/remat.h"
#include "strategy.h"

#define GPT_VOCAB 256
#define MODEL_MAX_NAME 96 /* transformers' names: model.layers.N.post_attention_layernorm.weight */

typedef struct param {
    char name[MODEL_MAX_NAME];
    remat_tensor *t; /* leaf, f32, contiguous, requires grad */
    bool decay;      /* AdamW weight decay applies (matrices) */
} param;

typedef struct model model;

/* user_data of one block, or of one of its halves (part: remat/models.h) */
typedef struct block_ctx {
    model *m;
    int layer;
    remat_block_part part;
} block_ctx;

typedef struct mlp_block {
    remat_tensor *ln_w, *ln_b, *w, *b;
} mlp_block;

struct model {
    model_kind kind;
    remat_device device; /* of the parameters; batches are moved there */
    int layers, width, heads, context, vocab;
    bool untied;
    bool attn_ops; /* attention composed of ops instead of remat_attention */
    bool autocast; /* forward (and the planner's profile) under bf16 autocast */
    param *params;
    int n_params;
    int64_t n_weights; /* total number of parameter elements */
    /* GPT */
    remat_tensor *wte, *wpe, *lnf_w, *lnf_b, *head; /* head == wte when tied */
    gpt_block_weights *gblocks;                     /* borrowed from params */
    remat_tensor *mask;                             /* (T, T) i64, 1 above the diagonal */
    /* HF */
    remat_model *lib;          /* the library's model (owns the parameters too) */
    const remat_stage *stages; /* its blocks (borrowed from lib) */
    /* MLP */
    mlp_block *mblocks;
    remat_tensor *min_w, *min_b, *mhead_w, *mhead_b;
    /* blocks as the strategies see them: ud[0..layers) the whole blocks; for the models
     * with halves (model_has_halves), ud[layers + 2l] block l's attention half and
     * ud[layers + 2l + 1] its MLP half */
    block_ctx *ctx;
    void **ud;
    const remat_stage *halves; /* HF/Llama: the library's half stages (borrowed from lib) */
};

/* One batch: GPT uses idx/targets (B, T) i64; MLP uses x/y (B, W) f32. */
typedef struct batch {
    remat_tensor *idx, *targets, *x, *y;
    int64_t tokens; /* B*T for GPT, B for MLP */
} batch;
void batch_free(batch *b);

/* Creates the model of config c with a deterministic init from `seed`
 * (remat_manual_seed then remat_rand_normal in a fixed order). HF: the model
 * of c->hf, its weights from the directory unless c->resume (the file's then). */
int model_init(model *m, const config *c, uint64_t seed);
void model_free(model *m);
/* The model's description as JSON members ("model", "layers", "width",
 * "heads", "context", "batch", "params") of the open object. */
void model_json(json *j, const model *m, int batch);

/* Forward to the loss under strategy s (grad mode as the caller set it),
 * under bf16 autocast when m->autocast (the profiles below too).
 * *loss gets a plain reference to a 0-dim tensor. */
int model_loss(model *m, const strategy *s, const batch *b, remat_tensor **loss);
/* GPT logits (B, T, V) or MLP outputs (B, W), no strategy; plain reference. */
int model_outputs(model *m, const batch *b, remat_tensor **out);
/* The planner's view of the model: profiles the chain of blocks (the
 * functions every strategy runs; embedding and head stay outside) on the
 * embedding of batch b, with remat_profile_stages (opts NULL: defaults).
 * No .grad is touched and the RNG state is put back. */
int model_profile_chain(model *m, const batch *b, const remat_profile_options *opts,
                        remat_profile **out);
/* The planner's view of a whole training step (remat_plan_create_step):
 * the chain's profile (model_profile_chain) plus what lies outside it —
 * the bytes live when the chain starts (parameters, optimizer state, the
 * batch, the embedding), the head and loss profiled as one stage, the
 * embedding's backward. grads_kept: every .grad exists before the step
 * (--accum > 1), so gradients count as fixed bytes. Run it with no .grad
 * set unless grads_kept. */
int model_profile_step(model *m, const batch *b, bool grads_kept, remat_profile **chain,
                       remat_step_profile *step);
/* The op-level planner's view of the chain: every op of every distinct
 * block (remat_profile_ops) on the embedding of batch b. No .grad is
 * touched and the RNG state is put back. */
int model_profile_ops(model *m, const batch *b, remat_op_profile **out);
/* Whether the blocks also run as half-block stages (GPT, Llama, HF: yes; MLP: no). */
bool model_has_halves(const model *m);
/* The chain of 2 x layers half-block stages (attention, MLP, ...) as the
 * planner sees it: its block profile (*prof) and op profile (*ops), the op
 * profile applied (remat_profile_apply_ops), on the embedding of batch b;
 * grads_kept as model_profile_step. No .grad is touched. */
int model_profile_halves(model *m, const batch *b, bool grads_kept, remat_profile **prof,
                         remat_op_profile **ops);
/* --model llama's configuration (the library's Llama; see --help): the
 * flags' layers, width, heads (as many kv heads), context as positions,
 * vocab 256, SwiGLU width 8/3 x width rounded up to 64, untied head.
 * REMAT_EINVAL (remat_model_config_check's message) for a shape it refuses. */
int model_llama_config(const config *c, remat_model_config *cfg);
/* Drops every parameter's .grad. */
void model_zero_grad(model *m);
/* Dropout on (training) or off (evaluation); the program's GPT and MLP have none. */
void model_set_training(model *m, bool training);

/* The tag names of a model kind's blocks (see above), n of them. */
const char *const *model_tags(model_kind kind, int *n);

/* The block function the strategies run (traced). */
block_fn model_block_fn(void);

/* Block hook for traces: called on entry and exit of every block run,
 * with recompute = remat_in_backward() (a block running inside backward is
 * being recomputed by a checkpoint). */
typedef void (*block_hook_fn)(void *user_data, int layer, bool enter, bool recompute);
void models_set_block_hook(block_hook_fn fn, void *user_data);

#endif /* REMAT_TOOLS_MODELS_H */
