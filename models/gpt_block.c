/* models/gpt_block.c — the remat program's GPT block on the library's
 * GPT-2 block, and its weights' helpers (see gpt_block.h). */
#include "gpt_block.h"

#include <stdlib.h>

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

const char *const *gpt_block_tags(int *n) { return remat_gpt2_block_tags(n); }

int gpt_block_forward(const gpt_block_weights *w, const gpt_block_config *cfg, remat_tensor *x,
                      remat_tensor **out) {
    if (!w || !cfg || !out)
        return remat_set_error(REMAT_EINVAL, "gpt block: expected weights, a config and out");
    const remat_gpt2_block_options o = {.heads = cfg->heads,
                                        .eps = LN_EPS,
                                        .linear_layout = true,
                                        .mask = cfg->mask,
                                        .attn_pdrop = cfg->p_drop,
                                        .resid_pdrop = cfg->p_drop,
                                        .gelu = cfg->gelu,
                                        .tags = cfg->tags,
                                        .part = cfg->part};
    return remat_gpt2_block(out, w, &o, x);
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
    remat_tensor **slots[GPT_BLOCK_N_WEIGHTS] = {
        &w->ln_1_weight,      &w->ln_1_bias,      &w->attn_weight,     &w->attn_bias,
        &w->attn_proj_weight, &w->attn_proj_bias, &w->ln_2_weight,     &w->ln_2_bias,
        &w->fc_weight,        &w->fc_bias,        &w->mlp_proj_weight, &w->mlp_proj_bias};
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
    return remat_causal_mask(out, T, device);
}
