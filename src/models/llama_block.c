/* src/models/llama_block.c — the Llama block (blocks.h): RMSNorm, RoPE,
 * grouped-query attention, SwiGLU MLP, as HF's LlamaDecoderLayer. */
#include <math.h>

#include "blocks.h"

#include "remat/ops.h"

static const char *const TAGS[] = {"q",        "k",      "v",       "attn",   "attn_out",
                                   "mlp_gate", "mlp_up", "mlp_act", "mlp_out"};

const char *const *mb_llama_tags(int *n) {
    if (n) *n = (int)(sizeof TAGS / sizeof *TAGS);
    return TAGS;
}

/* *out = the heads of h·Wᵀ + b, (B, heads, T, D) (a view of the projection). */
static int project_heads(remat_tensor **out, remat_tensor *h, remat_tensor *w, remat_tensor *b,
                         int64_t B, int64_t T, int64_t heads, int64_t D) {
    remat_tensor *p = NULL, *r = NULL;
    int rc = remat_linear(&p, h, w, b); /* (B, T, heads·D) */
    if (!rc) rc = remat_reshape(&r, p, 4, (int64_t[]){B, T, heads, D});
    if (!rc) rc = remat_transpose(out, r, 1, 2);
    mb_drop(&p);
    mb_drop(&r);
    return rc;
}

/* *t = rope(*t) (the input reference goes). */
static int rope(remat_tensor **t, const mb_llama_options *o) {
    remat_tensor *r = NULL;
    int rc = remat_rope(&r, *t, o->positions, o->rope_theta);
    if (rc) return rc;
    mb_drop(t);
    *t = r;
    return REMAT_OK;
}

/* *t = o_proj(attn(rope(q), rope(k), v)) of x (B, T, C), scope-owned. */
static int attention_branch(const mb_llama_weights *w, const mb_llama_options *o, remat_tensor *x,
                            const mb_kv *kv, remat_tensor **t) {
    const int64_t B = remat_size(x, 0), T = remat_size(x, 1), H = o->heads, Hkv = o->kv_heads,
                  D = o->head_dim;
    const double scale = 1.0 / sqrt((double)D);
    remat_tensor *h = NULL, *q = NULL, *k = NULL, *v = NULL, *att = NULL, *y = NULL;
    int rc;
    MB_TRY(remat_rms_norm(&h, x, 1, w->input_norm, o->eps));
    MB_TRY(project_heads(&q, h, w->q_w, w->q_b, B, T, H, D));   /* (B, H, T, D) */
    MB_TRY(project_heads(&k, h, w->k_w, w->k_b, B, T, Hkv, D)); /* (B, Hkv, T, D) */
    MB_TRY(project_heads(&v, h, w->v_w, w->v_b, B, T, Hkv, D));
    mb_drop(&h);
    MB_TRY(rope(&q, o));
    MB_TRY(rope(&k, o));
    MB_TRY(mb_maybe_tag(o->tags, &q, "q"));
    MB_TRY(mb_maybe_tag(o->tags, &k, "k"));
    MB_TRY(mb_maybe_tag(o->tags, &v, "v"));
    if (kv) MB_TRY(mb_cached_attention(kv, q, k, v, scale, &att));
    else MB_TRY(remat_attention(&att, q, k, v, true, scale)); /* grouped: K/V never repeated */
    mb_drop(&q);
    mb_drop(&k);
    mb_drop(&v);
    MB_TRY(mb_merge_heads(o->tags, &att, B, T, H * D, &y));
    MB_TRY(remat_linear(t, y, w->o_w, w->o_b)); /* (B, T, C) */
    mb_drop(&y);
    MB_TRY(mb_maybe_tag(o->tags, t, "attn_out"));
done:
    return rc;
}

/* *t = down_proj(silu(gate_proj(h2)) * up_proj(h2)), h2 = rms_norm(x1), scope-owned. */
static int mlp_branch(const mb_llama_weights *w, const mb_llama_options *o, remat_tensor *x1,
                      remat_tensor **t) {
    remat_tensor *h = NULL, *g = NULL, *u = NULL, *a = NULL, *y = NULL;
    int rc;
    MB_TRY(remat_rms_norm(&h, x1, 1, w->post_norm, o->eps));
    MB_TRY(remat_linear(&g, h, w->gate_w, w->gate_b)); /* (B, T, I) */
    MB_TRY(mb_maybe_tag(o->tags, &g, "mlp_gate"));
    MB_TRY(remat_linear(&u, h, w->up_w, w->up_b));
    mb_drop(&h);
    MB_TRY(mb_maybe_tag(o->tags, &u, "mlp_up"));
    MB_TRY(remat_silu(&a, g));
    mb_drop(&g);
    MB_TRY(remat_mul(&y, a, u));
    mb_drop(&a);
    mb_drop(&u);
    MB_TRY(mb_maybe_tag(o->tags, &y, "mlp_act"));
    MB_TRY(remat_linear(t, y, w->down_w, w->down_b)); /* (B, T, C) */
    mb_drop(&y);
    MB_TRY(mb_maybe_tag(o->tags, t, "mlp_out"));
done:
    return rc;
}

int mb_llama_block(remat_tensor **out, const mb_llama_weights *w, const mb_llama_options *o,
                   remat_tensor *x, const mb_kv *kv) {
    *out = NULL;
    int prc = mb_check_part("llama block", o->part, kv != NULL);
    if (prc) return prc;
    remat_scope *s = NULL;
    int rc = remat_scope_begin(&s);
    if (rc) return rc;
    remat_tensor *t = NULL, *y = NULL, *x1 = NULL;
    /* the halves meet at x1 = x + attention, a plain add in either form: split there, the
     * halves run exactly the whole block's ops */
    if (o->part != REMAT_BLOCK_MLP) {
        MB_TRY(attention_branch(w, o, x, kv, &t));
        MB_TRY(remat_add(&x1, x, t));
        mb_drop(&t);
    } else {
        x1 = x; /* borrowed: the MLP half's input */
    }
    if (o->part == REMAT_BLOCK_ATTN) {
        y = x1;
    } else {
        MB_TRY(mlp_branch(w, o, x1, &t));
        MB_TRY(remat_add(&y, x1, t));
    }
    *out = remat_scope_keep(y);
done:
    remat_scope_end(s);
    return rc;
}
