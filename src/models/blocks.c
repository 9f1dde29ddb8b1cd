/* src/models/blocks.c — helpers the model blocks share (blocks.h). */
#include "blocks.h"

#include <math.h>
#include <stdlib.h>

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

/* (Tq, Tk) i64 on device: 1 where key j > query i + offset. */
static int offset_mask(remat_tensor **out, int64_t Tq, int64_t Tk, int64_t offset,
                       remat_device device) {
    int64_t *m = malloc(sizeof(int64_t) * (size_t)(Tq * Tk));
    if (!m) return mb_err(REMAT_ENOMEM, "remat_model: out of memory");
    for (int64_t i = 0; i < Tq; i++)
        for (int64_t j = 0; j < Tk; j++) m[i * Tk + j] = j > i + offset;
    remat_tensor *t = NULL;
    int rc = remat_from_data(&t, 2, (int64_t[]){Tq, Tk}, REMAT_I64, m);
    free(m);
    if (!rc && device.type != REMAT_CPU) {
        remat_tensor *d = NULL;
        rc = remat_to_device(&d, t, device);
        mb_drop(&t);
        t = d;
    }
    *out = t;
    return rc;
}

/* (B, Hkv, Tk, D) → (B, Hkv·G, Tk, D), each kv head repeated G times
 * (HF's repeat_kv; only the composed path needs it). */
static int repeat_kv(remat_tensor **out, remat_tensor *t, int64_t G) {
    const int64_t B = remat_size(t, 0), Hkv = remat_size(t, 1), Tk = remat_size(t, 2),
                  D = remat_size(t, 3);
    remat_tensor *u = NULL, *e = NULL;
    int rc = remat_unsqueeze(&u, t, 2);
    if (!rc) rc = remat_expand(&e, u, 5, (int64_t[]){B, Hkv, G, Tk, D});
    if (!rc) rc = remat_reshape(out, e, 4, (int64_t[]){B, Hkv * G, Tk, D});
    mb_drop(&u);
    mb_drop(&e);
    return rc;
}

int mb_cached_attention(const mb_kv *kv, remat_tensor *q, remat_tensor *k, remat_tensor *v,
                        double scale, remat_tensor **att) {
    const int64_t H = remat_size(q, 1), T = remat_size(q, 2), Hkv = remat_size(k, 1), len = kv->len,
                  end = len + T;
    remat_tensor *dst = NULL, *ka = NULL, *va = NULL, *kt = NULL, *s = NULL, *t = NULL,
                 *mask = NULL;
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
    if (len == 0 || T == 1) { /* causal from the start, or one query seeing every key */
        MB_TRY(remat_attention(att, q, ka, va, len == 0, scale));
        goto done;
    }
    /* a chunk after cached positions: softmax(mask(q·kᵀ·scale))·v, query i
     * seeing keys j <= len + i */
    if (Hkv != H) {
        MB_TRY(repeat_kv(&t, ka, H / Hkv));
        mb_drop(&ka);
        ka = t, t = NULL;
        MB_TRY(repeat_kv(&t, va, H / Hkv));
        mb_drop(&va);
        va = t, t = NULL;
    }
    MB_TRY(remat_transpose(&kt, ka, -2, -1));
    MB_TRY(remat_matmul(&s, q, kt)); /* (B, H, T, len + T) */
    MB_TRY(remat_mul_scalar(&t, s, scale));
    mb_drop(&s);
    MB_TRY(offset_mask(&mask, T, end, len, remat_tensor_device(q)));
    MB_TRY(remat_masked_fill(&s, t, mask, -INFINITY));
    mb_drop(&t);
    MB_TRY(remat_softmax(&t, s, -1));
    MB_TRY(remat_matmul(att, t, va));
done:
    mb_drop(&dst), mb_drop(&ka), mb_drop(&va), mb_drop(&kt), mb_drop(&s), mb_drop(&t);
    mb_drop(&mask);
    return rc;
}
