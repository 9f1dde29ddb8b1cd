/* src/models/blocks.h — what the model blocks of src/models/ share: the
 * goto-on-error macro, releasing a scope-owned temporary early, optional
 * tags and dropout. */
#ifndef REMAT_MODELS_BLOCKS_H
#define REMAT_MODELS_BLOCKS_H

#include <stdbool.h>

#include "remat/error.h"
#include "remat/models.h"
#include "remat/tensor.h"

#define MB_TRY(expr)                                                                               \
    do {                                                                                           \
        if ((rc = (expr)) != REMAT_OK) goto done;                                                  \
    } while (0)

#define mb_err remat_set_error

/* Releases the open scope's reference to *t now; *t = NULL. */
void mb_drop(remat_tensor **t);
/* When on: replaces the scope-owned *t by a remat_tag view named `name`. */
int mb_maybe_tag(bool on, remat_tensor **t, const char *name);
/* When p > 0: replaces the scope-owned *t by dropout(*t, p) (train mode). */
int mb_dropout(double p, remat_tensor **t);

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
 * keys j <= len + i. Hkv divides H. Does not change kv->len. */
int mb_cached_attention(const mb_kv *kv, remat_tensor *q, remat_tensor *k, remat_tensor *v,
                        double scale, remat_tensor **att);

/* The GPT-2 block (remat_gpt2_block), with a KV cache when kv is not NULL. */
int mb_gpt2_block(remat_tensor **out, const remat_gpt2_block_weights *w,
                  const remat_gpt2_block_options *o, remat_tensor *x, const mb_kv *kv);

#endif /* REMAT_MODELS_BLOCKS_H */
