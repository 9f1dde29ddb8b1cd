/* src/models/blocks.h — what the model blocks of src/models/ share: the
 * goto-on-error macro, releasing a scope-owned temporary early, optional
 * tags and dropout, attention over a KV cache; and the Llama block
 * (remat/models.h has the GPT-2 one). */
#ifndef REMAT_MODELS_BLOCKS_H
#define REMAT_MODELS_BLOCKS_H

#include <stdbool.h>
#include <stdint.h>

#include "remat/error.h"
#include "remat/models.h"
#include "remat/tensor.h"

#define MB_TRY(expr)                                                                               \
    do {                                                                                           \
        if ((rc = (expr)) != REMAT_OK) goto done;                                                  \
    } while (0)

#define mb_err remat_set_error

/* REMAT_EINVAL naming `block` unless part is the whole block, or a half (remat_block_part)
 * without a KV cache; REMAT_OK otherwise. The GPT-2 and Llama blocks' shared check. */
static inline int mb_check_part(const char *block, remat_block_part part, bool kv) {
    if (part == REMAT_BLOCK_WHOLE || (!kv && (part == REMAT_BLOCK_ATTN || part == REMAT_BLOCK_MLP)))
        return REMAT_OK;
    return mb_err(REMAT_EINVAL,
                  "%s: part %d (expected REMAT_BLOCK_WHOLE, _ATTN or _MLP; whole with a KV cache)",
                  block, (int)part);
}

/* Releases the open scope's reference to *t now; *t = NULL. */
void mb_drop(remat_tensor **t);
/* When on: replaces the scope-owned *t by a remat_tag view named `name`. */
int mb_maybe_tag(bool on, remat_tensor **t, const char *name);
/* When p > 0: replaces the scope-owned *t by dropout(*t, p) (train mode). */
int mb_dropout(double p, remat_tensor **t);

/* Attention's heads back together: *y (B, T, C) from the scope-owned *att
 * (B, H, T, D), H * D = C, which is tagged "attn" first when tags is on and
 * dropped. */
int mb_merge_heads(bool tags, remat_tensor **att, int64_t B, int64_t T, int64_t C,
                   remat_tensor **y);

/* *out = an i64 tensor of `shape` holding host[] (malloc'd; freed here,
 * whatever happens), on device. *out NULL on failure. */
int mb_i64_tensor(remat_tensor **out, int ndim, const int64_t *shape, int64_t *host,
                  remat_device device);

/* ---- inference with a KV cache ----
 * One layer's cache: k, v (B, Hkv, capacity, D), the first `len`
 * positions filled. */
typedef struct mb_kv {
    remat_tensor *k, *v;
    int64_t len;
} mb_kv;

/* q (B, H, T, D) at positions len..len+T-1, k and v (B, Hkv, T, D) the new
 * keys and values (written into the cache at len): *att (B, H, T, D) =
 * attention of q over the cache's first len + T positions, query i seeing
 * keys j <= len + i (remat_attention_causal, lower-right). Hkv divides H.
 * Does not change kv->len. */
int mb_cached_attention(const mb_kv *kv, remat_tensor *q, remat_tensor *k, remat_tensor *v,
                        double scale, remat_tensor **att);

/* The GPT-2 block (remat_gpt2_block), with a KV cache when kv is not NULL. */
int mb_gpt2_block(remat_tensor **out, const remat_gpt2_block_weights *w,
                  const remat_gpt2_block_options *o, remat_tensor *x, const mb_kv *kv);

/* ---- the Llama block ----
 * x (B, T, C) → x1 = x + o_proj(attn(rope(q_proj(h)), rope(k_proj(h)), v_proj(h))),
 *                   h = rms_norm(x) · input_layernorm
 *               y  = x1 + down_proj(silu(gate_proj(h2)) * up_proj(h2)),
 *                   h2 = rms_norm(x1) · post_attention_layernorm
 * Weights (out, in) as nn.Linear stores them; biases may be NULL. */
typedef struct mb_llama_weights {
    remat_tensor *input_norm;                        /* (C) */
    remat_tensor *q_w, *q_b, *k_w, *k_b, *v_w, *v_b; /* (H·D, C), (Hkv·D, C) */
    remat_tensor *o_w, *o_b;                         /* (C, H·D) */
    remat_tensor *post_norm;                         /* (C) */
    remat_tensor *gate_w, *gate_b, *up_w, *up_b;     /* (I, C) */
    remat_tensor *down_w, *down_b;                   /* (C, I) */
} mb_llama_weights;

typedef struct mb_llama_options {
    int heads, kv_heads;
    int64_t head_dim;
    double eps, rope_theta;
    remat_tensor *positions; /* (T) i64, or NULL: 0..T-1 */
    bool tags;
    remat_block_part part; /* 0: whole; a half (remat/models.h), without a KV cache */
} mb_llama_options;

/* The Llama block, with a KV cache when kv is not NULL (then positions
 * must be the new tokens' positions). */
int mb_llama_block(remat_tensor **out, const mb_llama_weights *w, const mb_llama_options *o,
                   remat_tensor *x, const mb_kv *kv);

const char *const *mb_llama_tags(int *n);

#endif /* REMAT_MODELS_BLOCKS_H */
