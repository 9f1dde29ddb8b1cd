/* src/models/blocks.c — helpers the model blocks share (blocks.h). */
#include <stdlib.h>

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

int mb_merge_heads(bool tags, remat_tensor **att, int64_t B, int64_t T, int64_t C,
                   remat_tensor **y) {
    remat_tensor *t = NULL;
    int rc = mb_maybe_tag(tags, att, "attn");
    if (!rc) rc = remat_transpose(&t, *att, 1, 2); /* (B, T, H, D) */
    mb_drop(att);
    if (!rc) rc = remat_reshape(y, t, 3, (int64_t[]){B, T, C}); /* a view when fused */
    mb_drop(&t);
    return rc;
}

int mb_i64_tensor(remat_tensor **out, int ndim, const int64_t *shape, int64_t *host,
                  remat_device device) {
    remat_tensor *t = NULL;
    int rc = remat_from_data(&t, ndim, shape, REMAT_I64, host);
    free(host);
    if (!rc && device.type != REMAT_CPU) {
        remat_tensor *d = NULL;
        rc = remat_to_device(&d, t, device);
        remat_release(t);
        t = d;
    }
    *out = t;
    return rc;
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
