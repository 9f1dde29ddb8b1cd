/* src/models/model.c — GPT-2 and Llama models (remat/models.h): the
 * parameters with HF's names, embedding, the chain of blocks and the head. */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "blocks.h"
#include "core/core.h"

#include "remat/autocast.h"
#include "remat/models.h"

#define NAME_MAX_LEN 64
#define GPT2_PER_LAYER 12
#define LLAMA_PER_LAYER 16 /* with every bias */
typedef struct layer_ctx {
    remat_model *m;
    int layer;
    remat_block_part part;
} layer_ctx;

typedef struct named_param {
    char name[NAME_MAX_LEN];
    remat_tensor *t;
} named_param;

struct remat_model {
    remat_model_config cfg;
    remat_device device;
    bool training;
    int n_params, cap;
    named_param *params;
    int64_t numel;
    remat_tensor *tok_emb, *pos_emb; /* wte / embed_tokens; wpe (GPT-2) */
    remat_tensor *norm_w, *norm_b;   /* ln_f / norm (no bias) */
    remat_tensor *lm_head;           /* == tok_emb when tied */
    remat_gpt2_block_weights *gpt2;  /* n_layers, borrowed from params */
    mb_llama_weights *llama;         /* n_layers, borrowed from params */
    remat_tensor **masks;            /* GPT-2 composed attention: masks[T-1], made on demand */
    layer_ctx *ctx;                  /* n_layers whole blocks, then 2 · n_layers halves */
    remat_stage *stages;             /* n_layers */
    remat_stage *halves;             /* 2 · n_layers: attention, MLP, attention, ... */
};

/* ---- config ---------------------------------------------------------------------------------- */
remat_status remat_model_config_default(remat_model_config *cfg, remat_model_family family) {
    if (!cfg) return mb_err(REMAT_EINVAL, "remat_model_config_default: cfg is NULL");
    remat_model_config c;
    memset(&c, 0, sizeof c);
    c.family = family;
    c.initializer_range = 0.02;
    if (family == REMAT_MODEL_GPT2) {
        c.n_layers = 12, c.n_heads = 12, c.n_kv_heads = 12;
        c.hidden = 768, c.vocab = 50257, c.max_positions = 1024;
        c.norm_eps = 1e-5;
        c.tie_word_embeddings = true;
        c.gelu = REMAT_GELU_TANH;
        c.embd_pdrop = c.attn_pdrop = c.resid_pdrop = 0.1;
    } else if (family == REMAT_MODEL_LLAMA) {
        c.n_layers = 32, c.n_heads = 32, c.n_kv_heads = 32;
        c.hidden = 4096, c.intermediate = 11008, c.vocab = 32000, c.max_positions = 2048;
        c.norm_eps = 1e-6;
        c.rope_theta = 10000.0;
    } else {
        return mb_err(REMAT_EINVAL, "remat_model_config_default: unknown model family %d",
                      (int)family);
    }
    *cfg = c;
    return REMAT_OK;
}

static bool is_gpt2(const remat_model_config *c) { return c->family == REMAT_MODEL_GPT2; }

/* Derived sizes: GPT-2's MLP width (n_inner, or 4 x hidden when 0), and
 * every family's head_dim and kv heads. */
static int64_t mlp_width(const remat_model_config *c) {
    return is_gpt2(c) && c->intermediate == 0 ? 4 * c->hidden : c->intermediate;
}
static int64_t head_dim(const remat_model_config *c) {
    return c->head_dim > 0 && !is_gpt2(c) ? c->head_dim : c->hidden / c->n_heads;
}
static int kv_heads(const remat_model_config *c) {
    return is_gpt2(c) || c->n_kv_heads == 0 ? c->n_heads : c->n_kv_heads;
}
remat_status remat_model_config_check(const remat_model_config *c) {
    const char *call = "remat_model_config_check";
    if (!c) return mb_err(REMAT_EINVAL, "%s: cfg is NULL", call);
    if (c->family != REMAT_MODEL_GPT2 && c->family != REMAT_MODEL_LLAMA)
        return mb_err(REMAT_EINVAL, "%s: unknown model family %d", call, (int)c->family);
    const bool g = is_gpt2(c);
    const struct {
        const char *field, *key;
        int64_t v, lo, hi;
    } ints[] = {
        {"n_layers", g ? "n_layer" : "num_hidden_layers", c->n_layers, 1, 1 << 16},
        {"n_heads", g ? "n_head" : "num_attention_heads", c->n_heads, 1, 1 << 16},
        {"hidden", g ? "n_embd" : "hidden_size", c->hidden, 1, (int64_t)1 << 24},
        {"intermediate", g ? "n_inner" : "intermediate_size", c->intermediate, g ? 0 : 1,
         (int64_t)1 << 26},
        {"vocab", "vocab_size", c->vocab, 1, (int64_t)1 << 31},
        {"max_positions", g ? "n_positions" : "max_position_embeddings", c->max_positions, 1,
         (int64_t)1 << 24},
        {"head_dim", "head_dim", c->head_dim, 0, (int64_t)1 << 16},
        {"n_kv_heads", "num_key_value_heads", c->n_kv_heads, 0, 1 << 16},
    };
    for (size_t i = 0; i < sizeof ints / sizeof *ints; i++)
        if (ints[i].v < ints[i].lo || ints[i].v > ints[i].hi)
            return mb_err(REMAT_EINVAL, "%s: %s (%s) = %lld: expected %lld to %lld", call,
                          ints[i].field, ints[i].key, (long long)ints[i].v, (long long)ints[i].lo,
                          (long long)ints[i].hi);
    if ((g || c->head_dim == 0) && c->hidden % c->n_heads)
        return mb_err(REMAT_EINVAL, "%s: n_heads (%s) = %d does not divide hidden (%s) = %lld",
                      call, g ? "n_head" : "num_attention_heads", c->n_heads,
                      g ? "n_embd" : "hidden_size", (long long)c->hidden);
    if (g && c->n_kv_heads != 0 && c->n_kv_heads != c->n_heads)
        return mb_err(REMAT_EINVAL,
                      "%s: GPT-2 has no grouped-query attention (n_kv_heads %d, "
                      "n_heads %d)",
                      call, c->n_kv_heads, c->n_heads);
    if (!g && c->n_heads % kv_heads(c))
        return mb_err(REMAT_EINVAL,
                      "%s: n_kv_heads (num_key_value_heads) = %d does not divide n_heads "
                      "(num_attention_heads) = %d",
                      call, kv_heads(c), c->n_heads);
    if (!g && head_dim(c) % 2)
        return mb_err(REMAT_EINVAL, "%s: head_dim = %lld must be even for RoPE", call,
                      (long long)head_dim(c));
    if (!(c->norm_eps > 0) || !isfinite(c->norm_eps))
        return mb_err(REMAT_EINVAL, "%s: norm_eps (%s) = %g: expected a finite value > 0", call,
                      g ? "layer_norm_epsilon" : "rms_norm_eps", c->norm_eps);
    if (!g && (!(c->rope_theta > 0) || !isfinite(c->rope_theta)))
        return mb_err(REMAT_EINVAL, "%s: rope_theta = %g: expected a finite value > 0", call,
                      c->rope_theta);
    if (g && c->gelu != REMAT_GELU_TANH && c->gelu != REMAT_GELU_ERF)
        return mb_err(REMAT_EINVAL, "%s: gelu (activation_function) = %d is not a GELU form", call,
                      (int)c->gelu);
    const struct {
        const char *field, *key;
        double p;
    } ps[] = {{"embd_pdrop", "embd_pdrop", c->embd_pdrop},
              {"attn_pdrop", g ? "attn_pdrop" : "attention_dropout", c->attn_pdrop},
              {"resid_pdrop", "resid_pdrop", c->resid_pdrop}};
    for (size_t i = 0; i < sizeof ps / sizeof *ps; i++)
        if (!(ps[i].p >= 0 && ps[i].p < 1))
            return mb_err(REMAT_EINVAL, "%s: %s (%s) = %g: expected 0 <= p < 1", call, ps[i].field,
                          ps[i].key, ps[i].p);
    if (!g && (c->embd_pdrop > 0 || c->resid_pdrop > 0))
        return mb_err(REMAT_EINVAL, "%s: Llama has no embd_pdrop or resid_pdrop (set them to 0)",
                      call);
    if (!g && c->attn_pdrop > 0)
        return mb_err(REMAT_EUNSUPPORTED,
                      "%s: attention_dropout = %g: Llama's attention runs fused, without "
                      "dropout (set it to 0)",
                      call, c->attn_pdrop);
    if (!(c->initializer_range >= 0) || !isfinite(c->initializer_range))
        return mb_err(REMAT_EINVAL, "%s: initializer_range = %g: expected a finite value >= 0",
                      call, c->initializer_range);
    return REMAT_OK;
}

/* ---- parameters ------------------------------------------------------------------------------ */
enum { INIT_NORMAL, INIT_ZEROS, INIT_ONES };

static int add_param(remat_model *m, remat_tensor **slot, int init, double std, int ndim,
                     int64_t d0, int64_t d1, const char *fmt, ...)
    __attribute__((format(printf, 8, 9)));

static int add_param(remat_model *m, remat_tensor **slot, int init, double std, int ndim,
                     int64_t d0, int64_t d1, const char *fmt, ...) {
    if (m->n_params == m->cap)
        return mb_err(REMAT_EINVAL, "remat_model_create: too many parameters");
    named_param *p = &m->params[m->n_params];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(p->name, sizeof p->name, fmt, ap);
    va_end(ap);
    const int64_t shape[2] = {d0, d1};
    remat_tensor *t = NULL;
    int rc = init == INIT_NORMAL
                 ? remat_rand_normal(&t, ndim, shape, 0.0, std, REMAT_F32, m->device)
                 : remat_full(&t, ndim, shape, init == INIT_ONES ? 1.0 : 0.0, REMAT_F32, m->device);
    if (!rc) rc = remat_set_requires_grad(t, true);
    if (!rc) rc = remat_set_name(t, p->name);
    if (rc) {
        remat_release(t);
        return rc;
    }
    p->t = t;
    m->n_params++;
    m->numel += remat_numel(t);
    *slot = t;
    return REMAT_OK;
}

#define ADD(slot, init, std, ndim, d0, d1, ...)                                                    \
    MB_TRY(add_param(m, slot, init, std, ndim, d0, d1, __VA_ARGS__))

static int init_gpt2(remat_model *m) {
    const remat_model_config *c = &m->cfg;
    const int64_t C = c->hidden, I = mlp_width(c), V = c->vocab, P = c->max_positions;
    const double std = c->initializer_range, proj = std / sqrt(2.0 * c->n_layers);
    int rc = REMAT_OK;
    ADD(&m->tok_emb, INIT_NORMAL, std, 2, V, C, "transformer.wte.weight");
    ADD(&m->pos_emb, INIT_NORMAL, std, 2, P, C, "transformer.wpe.weight");
    for (int l = 0; l < c->n_layers; l++) {
        remat_gpt2_block_weights *w = &m->gpt2[l];
        const char *h = "transformer.h";
        ADD(&w->ln_1_weight, INIT_ONES, 0, 1, C, 0, "%s.%d.ln_1.weight", h, l);
        ADD(&w->ln_1_bias, INIT_ZEROS, 0, 1, C, 0, "%s.%d.ln_1.bias", h, l);
        ADD(&w->attn_weight, INIT_NORMAL, std, 2, C, 3 * C, "%s.%d.attn.c_attn.weight", h, l);
        ADD(&w->attn_bias, INIT_ZEROS, 0, 1, 3 * C, 0, "%s.%d.attn.c_attn.bias", h, l);
        ADD(&w->attn_proj_weight, INIT_NORMAL, proj, 2, C, C, "%s.%d.attn.c_proj.weight", h, l);
        ADD(&w->attn_proj_bias, INIT_ZEROS, 0, 1, C, 0, "%s.%d.attn.c_proj.bias", h, l);
        ADD(&w->ln_2_weight, INIT_ONES, 0, 1, C, 0, "%s.%d.ln_2.weight", h, l);
        ADD(&w->ln_2_bias, INIT_ZEROS, 0, 1, C, 0, "%s.%d.ln_2.bias", h, l);
        ADD(&w->fc_weight, INIT_NORMAL, std, 2, C, I, "%s.%d.mlp.c_fc.weight", h, l);
        ADD(&w->fc_bias, INIT_ZEROS, 0, 1, I, 0, "%s.%d.mlp.c_fc.bias", h, l);
        ADD(&w->mlp_proj_weight, INIT_NORMAL, proj, 2, I, C, "%s.%d.mlp.c_proj.weight", h, l);
        ADD(&w->mlp_proj_bias, INIT_ZEROS, 0, 1, C, 0, "%s.%d.mlp.c_proj.bias", h, l);
    }
    ADD(&m->norm_w, INIT_ONES, 0, 1, C, 0, "transformer.ln_f.weight");
    ADD(&m->norm_b, INIT_ZEROS, 0, 1, C, 0, "transformer.ln_f.bias");
    if (c->tie_word_embeddings) m->lm_head = m->tok_emb;
    else ADD(&m->lm_head, INIT_NORMAL, std, 2, V, C, "lm_head.weight");
done:
    return rc;
}

/* A linear's weight (out, in) and, when `bias`, its bias (out). */
static int add_linear(remat_model *m, remat_tensor **w, remat_tensor **b, bool bias, int64_t out,
                      int64_t in, int l, const char *what) {
    const double std = m->cfg.initializer_range;
    int rc = add_param(m, w, INIT_NORMAL, std, 2, out, in, "model.layers.%d.%s.weight", l, what);
    if (!rc && bias)
        rc = add_param(m, b, INIT_ZEROS, 0, 1, out, 0, "model.layers.%d.%s.bias", l, what);
    return rc;
}

static int init_llama(remat_model *m) {
    const remat_model_config *c = &m->cfg;
    const int64_t C = c->hidden, I = c->intermediate, V = c->vocab, D = head_dim(c);
    const int64_t QD = c->n_heads * D, KD = kv_heads(c) * D;
    const bool ab = c->attention_bias, mbias = c->mlp_bias;
    int rc = REMAT_OK;
    ADD(&m->tok_emb, INIT_NORMAL, c->initializer_range, 2, V, C, "model.embed_tokens.weight");
    for (int l = 0; l < c->n_layers; l++) {
        mb_llama_weights *w = &m->llama[l];
        MB_TRY(add_linear(m, &w->q_w, &w->q_b, ab, QD, C, l, "self_attn.q_proj"));
        MB_TRY(add_linear(m, &w->k_w, &w->k_b, ab, KD, C, l, "self_attn.k_proj"));
        MB_TRY(add_linear(m, &w->v_w, &w->v_b, ab, KD, C, l, "self_attn.v_proj"));
        MB_TRY(add_linear(m, &w->o_w, &w->o_b, ab, C, QD, l, "self_attn.o_proj"));
        MB_TRY(add_linear(m, &w->gate_w, &w->gate_b, mbias, I, C, l, "mlp.gate_proj"));
        MB_TRY(add_linear(m, &w->up_w, &w->up_b, mbias, I, C, l, "mlp.up_proj"));
        MB_TRY(add_linear(m, &w->down_w, &w->down_b, mbias, C, I, l, "mlp.down_proj"));
        ADD(&w->input_norm, INIT_ONES, 0, 1, C, 0, "model.layers.%d.input_layernorm.weight", l);
        ADD(&w->post_norm, INIT_ONES, 0, 1, C, 0, "model.layers.%d.post_attention_layernorm.weight",
            l);
    }
    ADD(&m->norm_w, INIT_ONES, 0, 1, C, 0, "model.norm.weight");
    if (c->tie_word_embeddings) m->lm_head = m->tok_emb;
    else ADD(&m->lm_head, INIT_NORMAL, c->initializer_range, 2, V, C, "lm_head.weight");
done:
    return rc;
}

/* ---- blocks ---------------------------------------------------------------------------------- */
/* The (T, T) causal mask of GPT-2's composed attention, made once per T. */
static int gpt2_mask(remat_model *m, int64_t T, remat_tensor **mask) {
    if (T < 1 || T > m->cfg.max_positions)
        return mb_err(REMAT_EINVAL, "remat_model: sequence length %lld outside 1..%lld",
                      (long long)T, (long long)m->cfg.max_positions);
    if (!m->masks) {
        m->masks = calloc((size_t)m->cfg.max_positions, sizeof *m->masks);
        if (!m->masks) return mb_err(REMAT_ENOMEM, "remat_model: out of memory");
    }
    if (!m->masks[T - 1]) { /* the model's own reference, whatever scope is open */
        void *scope = rm_scope_suspend();
        int rc = remat_causal_mask(&m->masks[T - 1], T, m->device);
        rm_scope_resume(scope);
        if (rc) return rc;
    }
    *mask = m->masks[T - 1];
    return REMAT_OK;
}

static mb_llama_options llama_options(const remat_model_config *c, remat_tensor *positions,
                                      bool tags) {
    return (mb_llama_options){.heads = c->n_heads,
                              .kv_heads = kv_heads(c),
                              .head_dim = head_dim(c),
                              .eps = c->norm_eps,
                              .rope_theta = c->rope_theta,
                              .positions = positions,
                              .tags = tags};
}

static remat_status block_fn(void *ud, remat_tensor *const *in, int n_in, remat_tensor **out,
                             int n_out) {
    if (n_in != 1 || n_out != 1 || !in[0] || remat_ndim(in[0]) != 3)
        return mb_err(REMAT_EINVAL, "remat_model block: expected one input (B, T, hidden) and "
                                    "one output");
    layer_ctx *lc = ud;
    remat_model *m = lc->m;
    const remat_model_config *c = &m->cfg;
    if (remat_size(in[0], 2) != c->hidden)
        return mb_err(REMAT_ESHAPE, "remat_model block %d: input width %lld, the model's is %lld",
                      lc->layer, (long long)remat_size(in[0], 2), (long long)c->hidden);
    if (is_gpt2(c)) {
        remat_gpt2_block_options o = {.heads = c->n_heads,
                                      .eps = c->norm_eps,
                                      .gelu = c->gelu,
                                      .attn_pdrop = m->training ? c->attn_pdrop : 0,
                                      .resid_pdrop = m->training ? c->resid_pdrop : 0,
                                      .tags = true,
                                      .part = lc->part};
        if (o.attn_pdrop > 0 && lc->part != REMAT_BLOCK_MLP) {
            int rc = gpt2_mask(m, remat_size(in[0], 1), &o.mask);
            if (rc) return rc;
        }
        return remat_gpt2_block(&out[0], &m->gpt2[lc->layer], &o, in[0]);
    }
    mb_llama_options o = llama_options(c, NULL, true);
    o.part = lc->part;
    return mb_llama_block(&out[0], &m->llama[lc->layer], &o, in[0], NULL);
}

/* ---- create / free --------------------------------------------------------------------------- */
void remat_model_free(remat_model *m) {
    if (!m) return;
    for (int i = 0; i < m->n_params; i++) remat_release(m->params[i].t);
    free(m->params);
    if (m->masks) {
        for (int64_t t = 0; t < m->cfg.max_positions; t++) remat_release(m->masks[t]);
        free(m->masks);
    }
    free(m->gpt2);
    free(m->llama);
    free(m->ctx);
    free(m->stages);
    free(m->halves);
    free(m);
}

remat_status remat_model_create(remat_model **out, const remat_model_config *cfg,
                                remat_device device) {
    if (!out) return mb_err(REMAT_EINVAL, "remat_model_create: out is NULL");
    *out = NULL;
    int rc = remat_model_config_check(cfg);
    if (rc) return rc;
    remat_model *m = calloc(1, sizeof *m);
    if (!m) return mb_err(REMAT_ENOMEM, "remat_model_create: out of memory");
    m->cfg = *cfg;
    m->device = device;
    m->training = true;
    const int L = cfg->n_layers;
    m->cap = 5 + L * (is_gpt2(cfg) ? GPT2_PER_LAYER : LLAMA_PER_LAYER);
    m->params = calloc((size_t)m->cap, sizeof *m->params);
    m->ctx = calloc(3 * (size_t)L, sizeof *m->ctx);
    m->stages = calloc((size_t)L, sizeof *m->stages);
    m->halves = calloc(2 * (size_t)L, sizeof *m->halves);
    if (is_gpt2(cfg)) m->gpt2 = calloc((size_t)L, sizeof *m->gpt2);
    else m->llama = calloc((size_t)L, sizeof *m->llama);
    if (!m->params || !m->ctx || !m->stages || !m->halves || (!m->gpt2 && !m->llama)) {
        remat_model_free(m);
        return mb_err(REMAT_ENOMEM, "remat_model_create: out of memory");
    }
    for (int l = 0; l < L; l++) {
        m->ctx[l] = (layer_ctx){m, l, REMAT_BLOCK_WHOLE};
        m->stages[l] = (remat_stage){block_fn, &m->ctx[l]};
        for (int h = 0; h < 2; h++) {
            layer_ctx *hc = &m->ctx[L + 2 * l + h];
            *hc = (layer_ctx){m, l, h ? REMAT_BLOCK_MLP : REMAT_BLOCK_ATTN};
            m->halves[2 * l + h] = (remat_stage){block_fn, hc};
        }
    }
    /* the parameters are the model's references, whatever scope is open */
    void *scope = rm_scope_suspend();
    rc = is_gpt2(cfg) ? init_gpt2(m) : init_llama(m);
    rm_scope_resume(scope);
    if (rc == REMAT_OK) *out = m;
    else remat_model_free(m);
    return rc;
}

const remat_model_config *remat_model_get_config(const remat_model *m) {
    return m ? &m->cfg : NULL;
}

void remat_model_set_training(remat_model *m, bool training) {
    if (m) m->training = training;
}

bool remat_model_training(const remat_model *m) { return m && m->training; }

int remat_model_n_params(const remat_model *m) { return m ? m->n_params : 0; }

remat_tensor *remat_model_param(const remat_model *m, int i, const char **name) {
    if (!m || i < 0 || i >= m->n_params) return NULL;
    if (name) *name = m->params[i].name;
    return m->params[i].t;
}

remat_tensor *remat_model_find_param(const remat_model *m, const char *name) {
    if (!m || !name) return NULL;
    for (int i = 0; i < m->n_params; i++)
        if (!strcmp(m->params[i].name, name)) return m->params[i].t;
    return NULL;
}

remat_status remat_model_params(const remat_model *m, bool state_dict, remat_params **out) {
    if (!out) return mb_err(REMAT_EINVAL, "remat_model_params: out is NULL");
    *out = NULL;
    if (!m) return mb_err(REMAT_EINVAL, "remat_model_params: model is NULL");
    remat_params *p = NULL;
    int rc = remat_params_new(&p);
    for (int i = 0; !rc && i < m->n_params; i++)
        rc = remat_params_add(p, m->params[i].name, m->params[i].t);
    if (!rc && state_dict && m->cfg.tie_word_embeddings)
        rc = remat_params_add(p, "lm_head.weight", m->lm_head);
    if (rc) {
        remat_params_free(p);
        return rc;
    }
    *out = p;
    return REMAT_OK;
}

int64_t remat_model_numel(const remat_model *m) { return m ? m->numel : 0; }

void remat_model_zero_grad(remat_model *m) {
    if (!m) return;
    for (int i = 0; i < m->n_params; i++) remat_set_grad(m->params[i].t, NULL);
}

int remat_model_stages(const remat_model *m, const remat_stage **stages) {
    if (stages) *stages = m ? m->stages : NULL;
    return m ? m->cfg.n_layers : 0;
}

int remat_model_half_stages(const remat_model *m, const remat_stage **stages) {
    if (stages) *stages = m ? m->halves : NULL;
    return m ? 2 * m->cfg.n_layers : 0;
}

const char *const *remat_model_tags(const remat_model *m, int *n) {
    if (m && !is_gpt2(&m->cfg)) return mb_llama_tags(n);
    return remat_gpt2_block_tags(n);
}

/* ---- embedding, head, forward ---------------------------------------------------------------- */
/* *out = t on the model's device: t itself, or a copy the open scope owns. */
static int on_device(const remat_model *m, remat_tensor *t, remat_tensor **out) {
    remat_device d = remat_tensor_device(t);
    if (d.type == m->device.type && d.index == m->device.index) {
        *out = t;
        return REMAT_OK;
    }
    return remat_to_device(out, t, m->device);
}

static int check_ids(const remat_model *m, const char *call, const char *what, remat_tensor *ids) {
    if (!ids) return mb_err(REMAT_EINVAL, "%s: %s is NULL", call, what);
    if (remat_tensor_dtype(ids) != REMAT_I64 || remat_ndim(ids) != 2)
        return mb_err(REMAT_EINVAL, "%s: %s must be (batch, seq) i64", call, what);
    const int64_t T = remat_size(ids, 1);
    if (remat_size(ids, 0) < 1 || T < 1 || T > m->cfg.max_positions)
        return mb_err(REMAT_EINVAL,
                      "%s: %s is (%lld, %lld): expected a batch >= 1 and 1 to %lld positions "
                      "(max_positions, %s)",
                      call, what, (long long)remat_size(ids, 0), (long long)T,
                      (long long)m->cfg.max_positions,
                      is_gpt2(&m->cfg) ? "n_positions" : "max_position_embeddings");
    return REMAT_OK;
}

/* x = the embedding of ids at positions start..start+T-1 (checked ids). */
static int embed_at(remat_tensor **x, remat_model *m, remat_tensor *ids, int64_t start,
                    bool dropout) {
    remat_scope *s = NULL;
    int rc = remat_scope_begin(&s);
    if (rc) return rc;
    remat_tensor *idx = NULL, *tok = NULL, *pos = NULL, *y = NULL;
    const int64_t T = remat_size(ids, 1);
    MB_TRY(on_device(m, ids, &idx));
    MB_TRY(remat_embedding(&tok, m->tok_emb, idx)); /* (B, T, C) */
    if (is_gpt2(&m->cfg)) {
        pos = m->pos_emb; /* positions start..start+T-1: rows of wpe, broadcast */
        if (start != 0 || T != m->cfg.max_positions)
            MB_TRY(remat_slice(&pos, m->pos_emb, 0, start, start + T, 1));
        MB_TRY(remat_add(&y, tok, pos));
        MB_TRY(mb_dropout(dropout && m->training ? m->cfg.embd_pdrop : 0, &y));
    } else {
        y = tok;
    }
    *x = remat_scope_keep(y);
done:
    remat_scope_end(s);
    return rc;
}

remat_status remat_model_embed(remat_tensor **x, remat_model *m, remat_tensor *ids) {
    const char *call = "remat_model_embed";
    if (!x) return mb_err(REMAT_EINVAL, "%s: x is NULL", call);
    *x = NULL;
    if (!m) return mb_err(REMAT_EINVAL, "%s: model is NULL", call);
    int rc = check_ids(m, call, "ids", ids);
    if (!rc) rc = embed_at(x, m, ids, 0, true);
    return rc ? rc : rm_hand_out_n(x, 1); /* to the caller's scope, if one is open */
}

remat_status remat_model_head(remat_tensor **out, remat_model *m, remat_tensor *x,
                              remat_tensor *targets) {
    const char *call = "remat_model_head";
    if (!out) return mb_err(REMAT_EINVAL, "%s: out is NULL", call);
    *out = NULL;
    if (!m || !x || remat_ndim(x) != 3 || remat_size(x, 2) != m->cfg.hidden)
        return mb_err(REMAT_EINVAL, "%s: expected a model and x (batch, seq, hidden)", call);
    const int64_t B = remat_size(x, 0), T = remat_size(x, 1), V = m->cfg.vocab;
    if (targets) {
        int rc = check_ids(m, call, "targets", targets);
        if (rc) return rc;
        if (remat_size(targets, 0) != B || remat_size(targets, 1) != T)
            return mb_err(REMAT_ESHAPE, "%s: targets (%lld, %lld) do not match x (%lld, %lld, ·)",
                          call, (long long)remat_size(targets, 0),
                          (long long)remat_size(targets, 1), (long long)B, (long long)T);
    }
    remat_scope *s = NULL;
    int rc = remat_scope_begin(&s);
    if (rc) return rc;
    remat_tensor *h = NULL, *o = NULL, *r = NULL, *t = NULL, *dt = NULL;
    /* written in the dtype lm_head runs in (remat_*_norm_to: bf16 under autocast, the cast
     * folded into the norm, the same bits) */
    if (is_gpt2(&m->cfg))
        MB_TRY(remat_layer_norm_to(&h, x, 1, m->norm_w, m->norm_b, m->cfg.norm_eps,
                                   remat_autocast_lower_dtype(x)));
    else
        MB_TRY(
            remat_rms_norm_to(&h, x, 1, m->norm_w, m->cfg.norm_eps, remat_autocast_lower_dtype(x)));
    MB_TRY(remat_linear(&o, h, m->lm_head, NULL)); /* (B, T, V) */
    if (targets) {
        MB_TRY(remat_reshape(&r, o, 2, (int64_t[]){B * T, V}));
        MB_TRY(on_device(m, targets, &dt));
        MB_TRY(remat_reshape(&t, dt, 1, (int64_t[]){B * T}));
        MB_TRY(remat_cross_entropy(&o, r, t, -100));
    }
    *out = remat_scope_keep(o);
done:
    remat_scope_end(s);
    return rc ? rc : rm_hand_out_n(out, 1); /* to the caller's scope, if one is open */
}

static remat_status run(remat_tensor **out, remat_model *m, remat_tensor *ids,
                        remat_tensor *targets, const remat_strategy *s) {
    remat_tensor *x = NULL, *y = NULL;
    void *scope = rm_scope_suspend(); /* x and y are released here, *out handed out at the end */
    int rc = remat_model_embed(&x, m, ids);
    if (!rc) rc = remat_run_chain(&y, m->cfg.n_layers, m->stages, x, s);
    if (!rc) rc = remat_model_head(out, m, y, targets);
    remat_release(x);
    remat_release(y);
    rm_scope_resume(scope);
    return rc ? rc : rm_hand_out_n(out, 1);
}

remat_status remat_model_forward(remat_tensor **logits, remat_model *m, remat_tensor *ids,
                                 const remat_strategy *s) {
    if (!logits) return mb_err(REMAT_EINVAL, "remat_model_forward: logits is NULL");
    *logits = NULL;
    if (!m) return mb_err(REMAT_EINVAL, "remat_model_forward: model is NULL");
    return run(logits, m, ids, NULL, s);
}

remat_status remat_model_loss(remat_tensor **loss, remat_model *m, remat_tensor *ids,
                              remat_tensor *targets, const remat_strategy *s) {
    if (!loss) return mb_err(REMAT_EINVAL, "remat_model_loss: loss is NULL");
    *loss = NULL;
    if (!m || !targets)
        return mb_err(REMAT_EINVAL, "remat_model_loss: expected a model and targets");
    return run(loss, m, ids, targets, s);
}

/* ---- KV cache ------------------------------------------------------------------------------ */
struct remat_model_cache {
    const remat_model *m;
    int64_t batch, capacity, len;
    mb_kv *layers; /* n_layers: k, v (batch, kv heads, capacity, head_dim) */
};

void remat_model_cache_free(remat_model_cache *c) {
    if (!c) return;
    for (int l = 0; c->layers && l < c->m->cfg.n_layers; l++) {
        remat_release(c->layers[l].k);
        remat_release(c->layers[l].v);
    }
    free(c->layers);
    free(c);
}

remat_status remat_model_cache_create(remat_model_cache **out, const remat_model *m, int64_t batch,
                                      int64_t capacity) {
    const char *call = "remat_model_cache_create";
    if (!out) return mb_err(REMAT_EINVAL, "%s: out is NULL", call);
    *out = NULL;
    if (!m) return mb_err(REMAT_EINVAL, "%s: model is NULL", call);
    if (batch < 1 || batch > (int64_t)1 << 20 || capacity < 1 || capacity > m->cfg.max_positions)
        return mb_err(REMAT_EINVAL,
                      "%s: batch %lld, capacity %lld: expected batch >= 1 and 1 <= capacity <= "
                      "%lld (max_positions)",
                      call, (long long)batch, (long long)capacity, (long long)m->cfg.max_positions);
    remat_model_cache *c = calloc(1, sizeof *c);
    if (c) c->layers = calloc((size_t)m->cfg.n_layers, sizeof *c->layers);
    if (!c || !c->layers) {
        free(c);
        return mb_err(REMAT_ENOMEM, "%s: out of memory", call);
    }
    c->m = m, c->batch = batch, c->capacity = capacity;
    const int64_t shape[4] = {batch, kv_heads(&m->cfg), capacity, head_dim(&m->cfg)};
    void *scope = rm_scope_suspend(); /* the cache's own references */
    int rc = REMAT_OK;
    for (int l = 0; !rc && l < m->cfg.n_layers; l++) {
        rc = remat_zeros(&c->layers[l].k, 4, shape, REMAT_F32, m->device);
        if (!rc) rc = remat_zeros(&c->layers[l].v, 4, shape, REMAT_F32, m->device);
    }
    rm_scope_resume(scope);
    if (rc == REMAT_OK) *out = c;
    else remat_model_cache_free(c);
    return rc;
}

int64_t remat_model_cache_length(const remat_model_cache *c) { return c ? c->len : 0; }

void remat_model_cache_reset(remat_model_cache *c) {
    if (c) c->len = 0;
}

/* *out = (T) i64 on device: start, start + 1, ... (RoPE's positions). */
static int positions(remat_tensor **out, int64_t start, int64_t T, remat_device device) {
    int64_t *p = malloc(sizeof(int64_t) * (size_t)T);
    if (!p) return mb_err(REMAT_ENOMEM, "remat_model: out of memory");
    for (int64_t i = 0; i < T; i++) p[i] = start + i;
    return mb_i64_tensor(out, 1, &T, p, device);
}

/* The cached forward: no grad, no dropout; *logits plain. */
static int forward_cached(remat_tensor **logits, remat_model *m, remat_model_cache *c,
                          remat_tensor *ids) {
    const remat_model_config *cfg = &m->cfg;
    remat_tensor *x = NULL, *y = NULL, *pos = NULL;
    int rc = embed_at(&x, m, ids, c->len, false);
    if (!rc && !is_gpt2(cfg)) rc = positions(&pos, c->len, remat_size(ids, 1), m->device);
    for (int l = 0; !rc && l < cfg->n_layers; l++) {
        c->layers[l].len = c->len;
        if (is_gpt2(cfg)) {
            const remat_gpt2_block_options o = {
                .heads = cfg->n_heads, .eps = cfg->norm_eps, .gelu = cfg->gelu};
            rc = mb_gpt2_block(&y, &m->gpt2[l], &o, x, &c->layers[l]);
        } else {
            const mb_llama_options o = llama_options(cfg, pos, false);
            rc = mb_llama_block(&y, &m->llama[l], &o, x, &c->layers[l]);
        }
        remat_release(x);
        x = y, y = NULL;
    }
    if (!rc) rc = remat_model_head(logits, m, x, NULL);
    remat_release(x);
    remat_release(pos);
    return rc;
}

remat_status remat_model_forward_cached(remat_tensor **logits, remat_model *m, remat_model_cache *c,
                                        remat_tensor *ids) {
    const char *call = "remat_model_forward_cached";
    if (!logits) return mb_err(REMAT_EINVAL, "%s: logits is NULL", call);
    *logits = NULL;
    if (!m || !c || c->m != m)
        return mb_err(REMAT_EINVAL, "%s: expected a model and a cache made for it", call);
    int rc = check_ids(m, call, "ids", ids);
    if (rc) return rc;
    const int64_t B = remat_size(ids, 0), T = remat_size(ids, 1);
    if (B != c->batch || c->len + T > c->capacity)
        return mb_err(REMAT_EINVAL,
                      "%s: ids (%lld, %lld) after %lld cached positions: the cache holds %lld "
                      "sequences of up to %lld positions",
                      call, (long long)B, (long long)T, (long long)c->len, (long long)c->batch,
                      (long long)c->capacity);
    bool prev = remat_no_grad_begin();
    void *scope = rm_scope_suspend();
    rc = forward_cached(logits, m, c, ids);
    rm_scope_resume(scope);
    remat_grad_mode_restore(prev);
    if (rc) return rc;
    c->len += T;
    return rm_hand_out_n(logits, 1);
}
