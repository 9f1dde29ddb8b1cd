/* models/gpt_block.c — the shared pre-norm transformer block (see gpt_block.h). */
#include "gpt_block.h"

#include <math.h>
#include <stdlib.h>

#define TRY(expr)                                                                                  \
    do {                                                                                           \
        if ((rc = (expr)) != REMAT_OK) goto done;                                                  \
    } while (0)

static const double LN_EPS = 1e-5;

void block_drop(remat_tensor **t) { remat_release_p(t); }

int block_tag(remat_tensor **t, const char *name) {
    remat_tensor *v = NULL;
    int rc = remat_tag(&v, *t, name);
    if (rc) return rc;
    block_drop(t);
    *t = v;
    return REMAT_OK;
}

static const char *const TAGS[] = {"qkv",    "attn",    "attn_probs", "attn_out",
                                   "mlp_up", "mlp_act", "mlp_out"};

const char *const *gpt_block_tags(int *n) {
    *n = (int)(sizeof TAGS / sizeof *TAGS);
    return TAGS;
}

static int maybe_tag(const gpt_block_config *cfg, remat_tensor **t, const char *name) {
    return cfg->tags ? block_tag(t, name) : REMAT_OK;
}

/* *t = dropout(*t) when p > 0 (the input reference goes). */
static int maybe_dropout(double p, remat_tensor **t) {
    if (p <= 0) return REMAT_OK;
    remat_tensor *d = NULL;
    int rc = remat_dropout(&d, *t, p, true);
    if (rc) return rc;
    block_drop(t);
    *t = d;
    return REMAT_OK;
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
static int composed_attention(const gpt_block_config *cfg, remat_tensor **q, remat_tensor **k,
                              remat_tensor *v, double scale, remat_tensor **out) {
    remat_tensor *kt = NULL, *att = NULL, *t = NULL;
    int rc;
    TRY(remat_transpose(&kt, *k, -2, -1)); /* (B, H, D, T) */
    block_drop(k);
    TRY(remat_matmul(&att, *q, kt)); /* (B, H, T, T) */
    block_drop(q);
    block_drop(&kt);
    TRY(remat_mul_scalar(&t, att, scale));
    block_drop(&att);
    TRY(remat_masked_fill(&att, t, cfg->mask, -INFINITY)); /* causal */
    block_drop(&t);
    TRY(remat_softmax(&t, att, -1));
    block_drop(&att);
    TRY(maybe_tag(cfg, &t, "attn_probs"));
    TRY(maybe_dropout(cfg->p_drop, &t));
    TRY(remat_matmul(out, t, v)); /* (B, H, T, D) */
    block_drop(&t);
done:
    return rc;
}

int gpt_block_forward(const gpt_block_weights *w, const gpt_block_config *cfg, remat_tensor *x,
                      remat_tensor **out) {
    if (!w || !cfg || !x || !out || remat_ndim(x) != 3 || cfg->heads <= 0 ||
        remat_size(x, 2) % cfg->heads)
        return remat_set_error(REMAT_EINVAL, "gpt block: expected x (B, T, C) with C a multiple "
                                             "of the heads");
    const int64_t B = remat_size(x, 0), T = remat_size(x, 1), C = remat_size(x, 2), H = cfg->heads,
                  D = C / H;
    const double scale = 1.0 / sqrt((double)D);
    remat_scope *s = NULL;
    int rc = remat_scope_begin(&s);
    if (rc) return rc;
    remat_tensor *h = NULL, *qkv = NULL, *parts[3] = {NULL, NULL, NULL}, *q = NULL, *k = NULL,
                 *v = NULL, *att = NULL, *t = NULL, *y = NULL, *x1 = NULL, *f = NULL;
    int n_parts = 0;
    /* attention */
    TRY(remat_layer_norm(&h, x, 1, w->ln1_w, w->ln1_b, LN_EPS));
    TRY(remat_linear(&qkv, h, w->attn_w, w->attn_b)); /* (B, T, 3C) */
    block_drop(&h);
    TRY(maybe_tag(cfg, &qkv, "qkv"));
    TRY(remat_split(parts, 3, &n_parts, qkv, C, -1)); /* 3 x (B, T, C) views */
    block_drop(&qkv);
    TRY(to_heads(&q, parts[0], B, T, H, D)); /* (B, H, T, D) */
    TRY(to_heads(&k, parts[1], B, T, H, D));
    TRY(to_heads(&v, parts[2], B, T, H, D));
    for (int i = 0; i < 3; i++) block_drop(&parts[i]);
    if (cfg->mask) {
        TRY(composed_attention(cfg, &q, &k, v, scale, &att));
    } else { /* fused; its output is stored as (B, T, H, D) */
        TRY(remat_attention(&att, q, k, v, true, scale));
        block_drop(&q);
        block_drop(&k);
    }
    block_drop(&v);
    TRY(maybe_tag(cfg, &att, "attn"));
    TRY(remat_transpose(&t, att, 1, 2)); /* (B, T, H, D) */
    block_drop(&att);
    TRY(remat_reshape(&y, t, 3, (int64_t[]){B, T, C})); /* a view when fused */
    block_drop(&t);
    TRY(remat_linear(&t, y, w->proj_w, w->proj_b));
    block_drop(&y);
    TRY(maybe_tag(cfg, &t, "attn_out"));
    TRY(maybe_dropout(cfg->p_drop, &t));
    TRY(remat_add(&x1, x, t));
    block_drop(&t);
    /* MLP */
    TRY(remat_layer_norm(&h, x1, 1, w->ln2_w, w->ln2_b, LN_EPS));
    TRY(remat_linear(&f, h, w->fc_w, w->fc_b)); /* (B, T, 4C) */
    block_drop(&h);
    TRY(maybe_tag(cfg, &f, "mlp_up"));
    TRY(remat_gelu(&t, f, cfg->gelu));
    block_drop(&f);
    TRY(maybe_tag(cfg, &t, "mlp_act"));
    TRY(remat_linear(&f, t, w->fc2_w, w->fc2_b)); /* (B, T, C) */
    block_drop(&t);
    TRY(maybe_tag(cfg, &f, "mlp_out"));
    TRY(maybe_dropout(cfg->p_drop, &f));
    TRY(remat_add(&y, x1, f));
    *out = remat_scope_keep(y);
done:
    remat_scope_end(s);
    return rc;
}

int gpt_block_weight_specs(int64_t C, gpt_weight_spec *spec) {
    const gpt_weight_spec s[GPT_BLOCK_N_WEIGHTS] = {
        {"ln1_w", 1, {C, 0}, GPT_W_GAIN, C, false},
        {"ln1_b", 1, {C, 0}, GPT_W_SHIFT, C, false},
        {"attn_w", 2, {3 * C, C}, GPT_W_MATRIX, C, false},
        {"attn_b", 1, {3 * C, 0}, GPT_W_BIAS, C, false},
        {"proj_w", 2, {C, C}, GPT_W_MATRIX, C, true},
        {"proj_b", 1, {C, 0}, GPT_W_BIAS, C, true},
        {"ln2_w", 1, {C, 0}, GPT_W_GAIN, C, false},
        {"ln2_b", 1, {C, 0}, GPT_W_SHIFT, C, false},
        {"fc_w", 2, {4 * C, C}, GPT_W_MATRIX, C, false},
        {"fc_b", 1, {4 * C, 0}, GPT_W_BIAS, C, false},
        {"fc2_w", 2, {C, 4 * C}, GPT_W_MATRIX, 4 * C, true},
        {"fc2_b", 1, {C, 0}, GPT_W_BIAS, 4 * C, true},
    };
    for (int i = 0; i < GPT_BLOCK_N_WEIGHTS; i++) spec[i] = s[i];
    return GPT_BLOCK_N_WEIGHTS;
}

remat_tensor **gpt_block_weight_slot(gpt_block_weights *w, int i) {
    remat_tensor **slots[GPT_BLOCK_N_WEIGHTS] = {&w->ln1_w,  &w->ln1_b,  &w->attn_w, &w->attn_b,
                                                 &w->proj_w, &w->proj_b, &w->ln2_w,  &w->ln2_b,
                                                 &w->fc_w,   &w->fc_b,   &w->fc2_w,  &w->fc2_b};
    return i >= 0 && i < GPT_BLOCK_N_WEIGHTS ? slots[i] : NULL;
}

int gpt_block_weights_list(const gpt_block_weights *w, remat_tensor **out) {
    for (int i = 0; i < GPT_BLOCK_N_WEIGHTS; i++)
        out[i] = *gpt_block_weight_slot((gpt_block_weights *)w, i);
    return GPT_BLOCK_N_WEIGHTS;
}

void gpt_block_weights_release(gpt_block_weights *w) {
    for (int i = 0; i < GPT_BLOCK_N_WEIGHTS; i++) remat_release_p(gpt_block_weight_slot(w, i));
}

int gpt_causal_mask(remat_tensor **out, int64_t T, remat_device device) {
    int64_t *m = malloc(sizeof(int64_t) * (size_t)(T * T));
    if (!m) return remat_set_error(REMAT_ENOMEM, "gpt_causal_mask: out of memory");
    for (int64_t i = 0; i < T; i++)
        for (int64_t j = 0; j < T; j++) m[i * T + j] = j > i;
    remat_tensor *t = NULL;
    int rc = remat_from_data(&t, 2, (int64_t[]){T, T}, REMAT_I64, m);
    free(m);
    if (!rc && device.type != REMAT_CPU) {
        remat_tensor *d = NULL;
        rc = remat_to_device(&d, t, device);
        remat_release(t);
        t = d;
    }
    if (!rc) *out = t;
    return rc;
}
