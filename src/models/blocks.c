/* src/models/blocks.c — helpers the model blocks share (blocks.h). */
#include "blocks.h"

#include "remat/ops.h"
#include "remat/selective.h"

void mb_drop(remat_tensor **t) {
    if (*t) remat_release(remat_scope_keep(*t));
    *t = NULL;
}

int mb_maybe_tag(bool on, remat_tensor **t, const char *name) {
    if (!on) return REMAT_OK;
    remat_tensor *v = NULL;
    int rc = remat_tag(&v, *t, name);
    if (rc) return rc;
    mb_drop(t);
    *t = v;
    return REMAT_OK;
}

int mb_dropout(double p, remat_tensor **t) {
    if (p <= 0) return REMAT_OK;
    remat_tensor *d = NULL;
    int rc = remat_dropout(&d, *t, p, true);
    if (rc) return rc;
    mb_drop(t);
    *t = d;
    return REMAT_OK;
}

int mb_cached_attention(const mb_kv *kv, remat_tensor *q, remat_tensor *k, remat_tensor *v,
                        double scale, remat_tensor **att) {
    const int64_t len = kv->len, end = len + remat_size(q, 2);
    remat_tensor *dst = NULL, *ka = NULL, *va = NULL;
    int rc;
    /* append the new keys and values */
    MB_TRY(remat_slice(&dst, kv->k, 2, len, end, 1));
    MB_TRY(remat_copy_(dst, k));
    mb_drop(&dst);
    MB_TRY(remat_slice(&dst, kv->v, 2, len, end, 1));
    MB_TRY(remat_copy_(dst, v));
    mb_drop(&dst);
    MB_TRY(remat_slice(&ka, kv->k, 2, 0, end, 1)); /* (B, Hkv, len + T, D) */
    MB_TRY(remat_slice(&va, kv->v, 2, 0, end, 1));
    /* the queries are the last T of len + T positions: the lower-right mask
     * (grouped kv heads read in place, as in training) */
    MB_TRY(remat_attention_causal(att, q, ka, va, REMAT_CAUSAL_LOWER_RIGHT, scale));
done:
    mb_drop(&dst), mb_drop(&ka), mb_drop(&va);
    return rc;
}
