/*
 * models/gpt_block.h — the remat program's GPT block as the program, the
 * benchmarks (bench/bench_selective.c) and the tests (tests/support/models.c,
 * tests/test_double_backward_fixtures.c) build it: the library's GPT-2 block
 * (remat_gpt2_block, remat/models.h) with its weights stored (out, in) as
 * remat_linear takes them, layer-norm eps 1e-5, plus the helpers that make
 * and initialise those weights. Not part of the library.
 *
 *   x (B, T, C) → x1 = x + drop(proj(attn(ln1(x))))      causal, `heads` heads
 *                 y  = x1 + drop(fc2(gelu(fc(ln2(x1)))))  MLP 4x
 *
 * attn is the fused remat_attention, or with cfg->mask the composed
 * softmax(mask(q·kᵀ/√D))·v, as bench/pytorch/models.py writes it for
 * PyTorch 1.13, with dropout on the probabilities.
 *
 * Named residuals (remat_tag, with cfg->tags; what name policies select):
 *   qkv         fc of ln1(x), (B, T, 3C)
 *   attn        attention output before the projection, (B, H, T, D)
 *   attn_probs  softmax of the masked scores, (B, H, T, T) (composed only)
 *   attn_out    the projection's output, (B, T, C)
 *   mlp_up      fc(ln2(x1)), (B, T, 4C)
 *   mlp_act     gelu(mlp_up), (B, T, 4C)
 *   mlp_out     fc2(mlp_act), (B, T, C)
 * A tag is an identity view: values, gradients and memory are unchanged.
 */
#ifndef REMAT_MODELS_GPT_BLOCK_H
#define REMAT_MODELS_GPT_BLOCK_H

#include <stdbool.h>
#include <stdint.h>

#include "remat/models.h"
#include "remat/remat.h"

/* The block's weights (borrowed; the caller makes and owns them), in the
 * library's struct, stored (out, in). For width C: ln_1_*, attn_proj_bias,
 * ln_2_*, mlp_proj_bias (C); attn_weight (3C, C), attn_bias (3C);
 * attn_proj_weight (C, C); fc_weight (4C, C), fc_bias (4C); mlp_proj_weight
 * (C, 4C). The program's save files name them ln1_w, ln1_b, attn_w, attn_b,
 * proj_w, proj_b, ln2_w, ln2_b, fc_w, fc_b, fc2_w, fc2_b, in this order. */
typedef remat_gpt2_block_weights gpt_block_weights;

#define GPT_BLOCK_N_WEIGHTS 12

typedef struct gpt_block_config {
    int heads;          /* divides C */
    remat_tensor *mask; /* (T, T) i64, 1 above the diagonal (gpt_causal_mask):
                             * attention composed of ops; NULL: fused remat_attention */
    double p_drop;      /* dropout after the probabilities (composed only), the
                             * projection and fc2; 0: no dropout op at all */
    remat_gelu_approx gelu;
    bool tags;             /* name the residuals above */
    remat_block_part part; /* 0: the whole block; REMAT_BLOCK_ATTN x → x1, REMAT_BLOCK_MLP
                            * x1 → y: the halves, bitwise the block composed */
} gpt_block_config;

/* OUT: *out = the block applied to x (B, T, C), a new reference. Runs inside
 * its own scope; on failure *out is untouched and nothing is leaked. */
int gpt_block_forward(const gpt_block_weights *w, const gpt_block_config *cfg, remat_tensor *x,
                      remat_tensor **out);

/* What each weight is, for the caller's initialisation (each draws its own
 * values: the program GPT-2's normal, the tests and benches uniform). */
typedef enum gpt_weight_kind {
    GPT_W_GAIN,   /* a layer norm's weight (starts at 1) */
    GPT_W_SHIFT,  /* a layer norm's bias (starts at 0) */
    GPT_W_MATRIX, /* a linear's weight */
    GPT_W_BIAS    /* a linear's bias */
} gpt_weight_kind;

typedef struct gpt_weight_spec {
    const char *name; /* the field's name, "attn_w" (the program's save files use it) */
    int ndim;
    int64_t shape[2];
    gpt_weight_kind kind;
    int64_t fan_in;    /* inputs of the linear it belongs to (C or 4C; C for norms) */
    bool residual_out; /* proj and fc2: write into the residual stream (GPT-2 scales
                        * their matrices' init by 1/sqrt(2 layers)) */
} gpt_weight_spec;

/* The names above, in the block's order; OUT: *n their count. */
const char *const *gpt_block_tags(int *n);

/* OUT: spec[0..12) for width C, in the order of the struct; returns
 * GPT_BLOCK_N_WEIGHTS. */
int gpt_block_weight_specs(int64_t C, gpt_weight_spec *spec);
/* The slot of the i-th weight (the struct's order), for initialising it. */
remat_tensor **gpt_block_weight_slot(gpt_block_weights *w, int i);

/* Writes the 12 weights' borrowed pointers in the order of the struct;
 * returns GPT_BLOCK_N_WEIGHTS. */
int gpt_block_weights_list(const gpt_block_weights *w, remat_tensor **out);
/* Releases the weights and sets them to NULL (NULL ones are skipped). */
void gpt_block_weights_release(gpt_block_weights *w);

/* OUT: *out = (T, T) i64 on `device`, 1 where j > i (the future). */
int gpt_causal_mask(remat_tensor **out, int64_t T, remat_device device);

/* ---- for writing other blocks the same way ----
 * block_drop: releases a temporary now, scope-held or not (*t = NULL). */
void block_drop(remat_tensor **t);
/* block_tag: replaces the scope-owned *t by a remat_tag view of it named
 * `name`; the untagged reference goes. */
int block_tag(remat_tensor **t, const char *name);

#endif /* REMAT_MODELS_GPT_BLOCK_H */
