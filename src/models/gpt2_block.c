/* src/models/gpt2_block.c — the GPT-2 block (remat/models.h): pre-norm
 * attention and MLP, each added to the residual stream.
 *
 *   x (B, T, C) → x1 = x + drop(proj(attn(ln_1(x))))      causal, `heads` heads
 *                 y  = x1 + drop(mlp_proj(gelu(fc(ln_2(x1)))))
 *
 * Outside autocast fc runs without its bias and remat_bias_gelu adds it inside
 * the GELU: the values of gelu(fc(...)) with the bias in the linear wherever
 * the f32 GEMM's sum plus the bias rounds as the bias-first GEMM did
 * (docs/models.md), one pass fewer each way. x1 = x + ... and ln_2 are one op
 * (remat_add_layer_norm).
 *
 * o->part runs one half: REMAT_BLOCK_ATTN x → x1, REMAT_BLOCK_MLP x1 → y (the
 * planner's half-block stages); there the add and ln_2 run apart, the same
 * bits as the fused op, forward and backward.
 *
 * attn is the fused remat_attention, or with o->mask the composed
 * softmax(mask(q·kᵀ/√D))·v with dropout on the probabilities (HF's eager
 * attention; what the remat program's --attention ops runs).
 *
 * Temporaries are released right after their last use (what backward needs
 * stays alive through the graph), as Python's reference counting does in
 * PyTorch: it matters under checkpointing, where nothing else holds them. */
#include <math.h>
#include <stdlib.h>

#include "blocks.h"

#include "remat/autocast.h"
#include "remat/models.h"
#include "remat/selective.h"

static const char *const TAGS[] = {"qkv",    "attn",    "attn_probs", "attn_out",
                                   "mlp_up", "mlp_act", "mlp_out"};

const char *const *remat_gpt2_block_tags(int *n) {
    if (n) *n = (int)(sizeof TAGS / sizeof *TAGS);
    return TAGS;
}

/* (B, T, C) → (B, H, T, D): a view of one third of qkv split into heads. */
static int to_heads(remat_tensor **out, remat_tensor *t, int64_t B, int64_t T, int64_t H,
                    int64_t D) {
    remat_tensor *r = NULL;
    int rc = remat_reshape(&r, t, 4, (int64_t[]){B, T, H, D});
    if (!rc) rc = remat_transpose(out, r, 1, 2);
    return rc;
}

/* q, k, v (B, H, T, D) → *out (B, H, T, D); consumes q, k (and the scores). */
static int composed_attention(const remat_gpt2_block_options *o, remat_tensor **q, remat_tensor **k,
                              remat_tensor *v, double scale, remat_tensor **out) {
    remat_tensor *kt = NULL, *att = NULL, *t = NULL;
    int rc;
    MB_TRY(remat_transpose(&kt, *k, -2, -1)); /* (B, H, D, T) */
    mb_drop(k);
    MB_TRY(remat_matmul(&att, *q, kt)); /* (B, H, T, T) */
    mb_drop(q);
    mb_drop(&kt);
    MB_TRY(remat_mul_scalar(&t, att, scale));
    mb_drop(&att);
    MB_TRY(remat_masked_fill(&att, t, o->mask, -INFINITY)); /* causal */
    mb_drop(&t);
    MB_TRY(remat_softmax(&t, att, -1));
    mb_drop(&att);
    MB_TRY(mb_maybe_tag(o->tags, &t, "attn_probs"));
    MB_TRY(mb_dropout(o->attn_pdrop, &t));
    MB_TRY(remat_matmul(out, t, v)); /* (B, H, T, D) */
    mb_drop(&t);
done:
    return rc;
}

static bool shape_is(const remat_tensor *t, int ndim, int64_t d0, int64_t d1) {
    return t && remat_ndim(t) == ndim && remat_size(t, 0) == d0 &&
           (ndim < 2 || remat_size(t, 1) == d1);
}

/* The weights' shapes for width C and MLP width I: REMAT_ESHAPE naming the
 * first that differs. */
static int check_weights(const remat_gpt2_block_weights *w, bool linear, int64_t C, int64_t I) {
    const struct {
        const char *name;
        const remat_tensor *t;
        int64_t in, out; /* a matrix maps in → out; a vector has out entries */
        bool matrix;
    } s[] = {{"ln_1.weight", w->ln_1_weight, 0, C, false},
             {"ln_1.bias", w->ln_1_bias, 0, C, false},
             {"attn.c_attn.weight", w->attn_weight, C, 3 * C, true},
             {"attn.c_attn.bias", w->attn_bias, 0, 3 * C, false},
             {"attn.c_proj.weight", w->attn_proj_weight, C, C, true},
             {"attn.c_proj.bias", w->attn_proj_bias, 0, C, false},
             {"ln_2.weight", w->ln_2_weight, 0, C, false},
             {"ln_2.bias", w->ln_2_bias, 0, C, false},
             {"mlp.c_fc.weight", w->fc_weight, C, I, true},
             {"mlp.c_fc.bias", w->fc_bias, 0, I, false},
             {"mlp.c_proj.weight", w->mlp_proj_weight, I, C, true},
             {"mlp.c_proj.bias", w->mlp_proj_bias, 0, C, false}};
    for (size_t i = 0; i < sizeof s / sizeof *s; i++) {
        bool ok = s[i].matrix ? (linear ? shape_is(s[i].t, 2, s[i].out, s[i].in)
                                        : shape_is(s[i].t, 2, s[i].in, s[i].out))
                              : shape_is(s[i].t, 1, s[i].out, 0);
        if (ok) continue;
        if (!s[i].t) return mb_err(REMAT_EINVAL, "remat_gpt2_block: %s is NULL", s[i].name);
        if (!s[i].matrix)
            return mb_err(REMAT_ESHAPE, "remat_gpt2_block: %s must be (%lld) for width %lld",
                          s[i].name, (long long)s[i].out, (long long)C);
        int64_t a = linear ? s[i].out : s[i].in, b = linear ? s[i].in : s[i].out;
        return mb_err(REMAT_ESHAPE, "remat_gpt2_block: %s must be (%lld, %lld) %s for width %lld",
                      s[i].name, (long long)a, (long long)b,
                      linear ? "(out, in)" : "(in, out), as HF's Conv1D", (long long)C);
    }
    return REMAT_OK;
}

/* *out = x · W + b with W stored (in, out) (HF's Conv1D), or remat_linear
 * with W (out, in). */
static int project(bool linear, remat_tensor **out, remat_tensor *x, remat_tensor *w,
                   remat_tensor *b) {
    if (linear) return remat_linear(out, x, w, b);
    remat_tensor *wt = NULL;
    int rc = remat_transpose(&wt, w, 0, 1); /* a view: linear reads it in place */
    if (!rc) rc = remat_linear(out, x, wt, b);
    mb_drop(&wt);
    return rc;
}

remat_status remat_gpt2_block(remat_tensor **out, const remat_gpt2_block_weights *w,
                              const remat_gpt2_block_options *o, remat_tensor *x) {
    if (!out) return mb_err(REMAT_EINVAL, "remat_gpt2_block: out is NULL");
    return mb_gpt2_block(out, w, o, x, NULL);
}

/* *t = drop(proj(attn(ln_1(x)))) (B, T, C), scope-owned: the attention branch. */
static int attention_branch(const remat_gpt2_block_weights *w, const remat_gpt2_block_options *o,
                            remat_tensor *x, const mb_kv *kv, remat_dtype hdt, remat_tensor **t) {
    const int64_t B = remat_size(x, 0), T = remat_size(x, 1), C = remat_size(x, 2), H = o->heads,
                  D = C / H;
    const bool lin = o->linear_layout;
    const double scale = 1.0 / sqrt((double)D);
    remat_tensor *h = NULL, *qkv = NULL, *parts[3] = {NULL, NULL, NULL}, *q = NULL, *k = NULL,
                 *v = NULL, *att = NULL, *y = NULL;
    int n_parts = 0, rc;
    /* under autocast the norms write bf16, what the linears after them would cast to
     * (remat_layer_norm_to: the cast folded into the norm, the same bits) */
    MB_TRY(remat_layer_norm_to(&h, x, 1, w->ln_1_weight, w->ln_1_bias, o->eps, hdt));
    MB_TRY(project(lin, &qkv, h, w->attn_weight, w->attn_bias)); /* (B, T, 3C) */
    mb_drop(&h);
    MB_TRY(mb_maybe_tag(o->tags, &qkv, "qkv"));
    MB_TRY(remat_split(parts, 3, &n_parts, qkv, C, -1)); /* 3 x (B, T, C) views */
    mb_drop(&qkv);
    MB_TRY(to_heads(&q, parts[0], B, T, H, D)); /* (B, H, T, D) */
    MB_TRY(to_heads(&k, parts[1], B, T, H, D));
    MB_TRY(to_heads(&v, parts[2], B, T, H, D));
    for (int i = 0; i < 3; i++) mb_drop(&parts[i]);
    if (kv) { /* inference with a KV cache: k and v join the cached ones */
        MB_TRY(mb_cached_attention(kv, q, k, v, scale, &att));
        mb_drop(&q);
        mb_drop(&k);
    } else if (o->mask) {
        MB_TRY(composed_attention(o, &q, &k, v, scale, &att));
    } else { /* fused; its output is stored as (B, T, H, D) */
        MB_TRY(remat_attention(&att, q, k, v, true, scale));
        mb_drop(&q);
        mb_drop(&k);
    }
    mb_drop(&v);
    MB_TRY(mb_merge_heads(o->tags, &att, B, T, C, &y));
    MB_TRY(project(lin, t, y, w->attn_proj_weight, w->attn_proj_bias));
    mb_drop(&y);
    MB_TRY(mb_maybe_tag(o->tags, t, "attn_out"));
    MB_TRY(mb_dropout(o->resid_pdrop, t));
done:
    return rc;
}

/* *f = drop(mlp_proj(gelu(fc(*h)))) (B, T, C), scope-owned: the MLP branch; *h is dropped. */
static int mlp_branch(const remat_gpt2_block_weights *w, const remat_gpt2_block_options *o,
                      remat_tensor *x, remat_tensor **h, remat_tensor **f) {
    const bool lin = o->linear_layout;
    remat_tensor *u = NULL, *t = NULL;
    int rc;
    /* f32/f64: the up projection's bias goes into the GELU (remat_bias_gelu), no pass of its
     * own over the (B, T, I) activation, forward or backward. Under autocast the bf16 GEMM
     * adds the bias for free and the bf16 GELU is a table lookup of its saved input, which
     * the fused op would have to recompute as x + bias: measured slower (docs/models.md) */
    const bool fuse_bias = !remat_autocast_enabled(remat_tensor_device(x).type);
    MB_TRY(project(lin, &u, *h, w->fc_weight, fuse_bias ? NULL : w->fc_bias)); /* (B, T, I) */
    mb_drop(h);
    MB_TRY(mb_maybe_tag(o->tags, &u, "mlp_up"));
    if (fuse_bias) MB_TRY(remat_bias_gelu(&t, u, w->fc_bias, o->gelu));
    else MB_TRY(remat_gelu(&t, u, o->gelu));
    mb_drop(&u);
    MB_TRY(mb_maybe_tag(o->tags, &t, "mlp_act"));
    MB_TRY(project(lin, f, t, w->mlp_proj_weight, w->mlp_proj_bias)); /* (B, T, C) */
    mb_drop(&t);
    MB_TRY(mb_maybe_tag(o->tags, f, "mlp_out"));
    MB_TRY(mb_dropout(o->resid_pdrop, f));
done:
    return rc;
}

int mb_gpt2_block(remat_tensor **out, const remat_gpt2_block_weights *w,
                  const remat_gpt2_block_options *o, remat_tensor *x, const mb_kv *kv) {
    *out = NULL;
    if (!w || !o || !x || remat_ndim(x) != 3 || o->heads <= 0 || remat_size(x, 2) % o->heads)
        return mb_err(REMAT_EINVAL, "remat_gpt2_block: expected x (B, T, C) with C a multiple "
                                    "of the heads");
    int prc = mb_check_part("remat_gpt2_block", o->part, kv != NULL);
    if (prc) return prc;
    const int64_t C = remat_size(x, 2);
    const int64_t I = w->fc_bias ? remat_size(w->fc_bias, 0) : 4 * C;
    int rc = check_weights(w, o->linear_layout, C, I);
    if (rc) return rc;
    remat_scope *s = NULL;
    rc = remat_scope_begin(&s);
    if (rc) return rc;
    remat_tensor *h = NULL, *t = NULL, *y = NULL, *x1 = NULL, *f = NULL;
    const remat_dtype hdt = remat_autocast_lower_dtype(x);
    if (o->part == REMAT_BLOCK_ATTN) { /* x1 = x + t, the residual add alone */
        MB_TRY(attention_branch(w, o, x, kv, hdt, &t));
        MB_TRY(remat_add(&y, x, t));
    } else if (o->part == REMAT_BLOCK_MLP) { /* x is x1: ln_2 alone, then the MLP */
        MB_TRY(remat_layer_norm_to(&h, x, 1, w->ln_2_weight, w->ln_2_bias, o->eps, hdt));
        MB_TRY(mlp_branch(w, o, x, &h, &f));
        MB_TRY(remat_add(&y, x, f));
    } else {
        MB_TRY(attention_branch(w, o, x, kv, hdt, &t));
        /* x1 = x + t and ln_2(x1) in one op (remat_add_layer_norm): x1 normalised while in
         * cache, its two gradients added as the norm's backward writes them. The halves
         * above compute the same bits with the add and the norm apart (remat_add_layer_norm
         * is promised bitwise equal to remat_add then remat_layer_norm, values and
         * gradients: tests/test_ops_add_layer_norm.c, test_ops_layer_norm_to.c) */
        MB_TRY(
            remat_add_layer_norm_to(&x1, &h, x, t, 1, w->ln_2_weight, w->ln_2_bias, o->eps, hdt));
        mb_drop(&t);
        MB_TRY(mlp_branch(w, o, x, &h, &f));
        MB_TRY(remat_add(&y, x1, f));
    }
    *out = remat_scope_keep(y);
done:
    remat_scope_end(s);
    return rc;
}

remat_status remat_causal_mask(remat_tensor **out, int64_t T, remat_device device) {
    if (!out) return mb_err(REMAT_EINVAL, "remat_causal_mask: out is NULL");
    *out = NULL;
    if (T < 1 || T > (int64_t)1 << 20)
        return mb_err(REMAT_EINVAL, "remat_causal_mask: T = %lld (expected 1 to 2^20)",
                      (long long)T);
    int64_t *m = malloc(sizeof(int64_t) * (size_t)(T * T));
    if (!m) return mb_err(REMAT_ENOMEM, "remat_causal_mask: out of memory");
    for (int64_t i = 0; i < T; i++)
        for (int64_t j = 0; j < T; j++) m[i * T + j] = j > i;
    return mb_i64_tensor(out, 2, (int64_t[]){T, T}, m, device);
}
