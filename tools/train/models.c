/* tools/train/models.c — GPT and deep MLP on the public remat API (see models.h). */
#include "models.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "io/hf_dir.h"
#include "remat/autocast.h"

#define TRY(expr)                                                                                  \
    do {                                                                                           \
        if ((rc = (expr)) != REMAT_OK) goto done;                                                  \
    } while (0)

static const double LN_EPS = 1e-5;

void batch_free(batch *b) {
    remat_release_p(&b->idx);
    remat_release_p(&b->targets);
    remat_release_p(&b->x);
    remat_release_p(&b->y);
}

/* ---- parameters ----------------------------------------------------------------- */
enum { INIT_NORMAL, INIT_ZEROS, INIT_ONES };

static int new_param(model *m, const char *name, int ndim, const int64_t *shape, int init,
                     double std, bool decay, remat_tensor **slot) {
    remat_tensor *t = NULL;
    int rc;
    if (init == INIT_NORMAL)
        rc = remat_rand_normal(&t, ndim, shape, 0.0, std, REMAT_F32, m->device);
    else rc = remat_full(&t, ndim, shape, init == INIT_ONES ? 1.0 : 0.0, REMAT_F32, m->device);
    if (!rc) rc = remat_set_requires_grad(t, true);
    if (!rc) rc = remat_set_name(t, name);
    if (rc) {
        remat_release(t);
        return rc;
    }
    param *p = &m->params[m->n_params++];
    snprintf(p->name, sizeof p->name, "%s", name);
    p->t = t;
    p->decay = decay;
    m->n_weights += remat_numel(t);
    *slot = t;
    return REMAT_OK;
}

static int init_gpt(model *m) {
    int rc = REMAT_OK;
    const int64_t C = m->width, V = m->vocab, T = m->context, L = m->layers;
    char nm[MODEL_MAX_NAME];
    const double std = 0.02, proj_std = 0.02 / sqrt(2.0 * (double)L);
    m->gblocks = calloc((size_t)L, sizeof *m->gblocks);
    if (!m->gblocks) return remat_set_error(REMAT_ENOMEM, "remat: out of memory");
    TRY(new_param(m, "wte", 2, (int64_t[]){V, C}, INIT_NORMAL, std, true, &m->wte));
    TRY(new_param(m, "wpe", 2, (int64_t[]){T, C}, INIT_NORMAL, std, true, &m->wpe));
    for (int l = 0; l < L; l++) {
        gpt_block_weights *b = &m->gblocks[l];
        gpt_weight_spec sp[GPT_BLOCK_N_WEIGHTS];
        gpt_block_weight_specs(C, sp);
        for (int i = 0; i < GPT_BLOCK_N_WEIGHTS; i++) {
            const bool matrix = sp[i].kind == GPT_W_MATRIX; /* normal, decayed */
            const int init = matrix                     ? INIT_NORMAL
                             : sp[i].kind == GPT_W_GAIN ? INIT_ONES
                                                        : INIT_ZEROS;
            snprintf(nm, sizeof nm, "h.%d.%s", l, sp[i].name);
            TRY(new_param(m, nm, sp[i].ndim, sp[i].shape, init, sp[i].residual_out ? proj_std : std,
                          matrix, gpt_block_weight_slot(b, i)));
        }
    }
    TRY(new_param(m, "ln_f.w", 1, (int64_t[]){C}, INIT_ONES, 0, false, &m->lnf_w));
    TRY(new_param(m, "ln_f.b", 1, (int64_t[]){C}, INIT_ZEROS, 0, false, &m->lnf_b));
    if (m->untied)
        TRY(new_param(m, "head", 2, (int64_t[]){V, C}, INIT_NORMAL, std, true, &m->head));
    else m->head = m->wte;

    rc = gpt_causal_mask(&m->mask, T, m->device); /* 1 where key j > query i */
done:
    return rc;
}

static int init_mlp(model *m) {
    int rc = REMAT_OK;
    const int64_t W = m->width;
    const double std = 1.0 / sqrt((double)W);
    char nm[MODEL_MAX_NAME];
    m->mblocks = calloc((size_t)m->layers, sizeof *m->mblocks);
    if (!m->mblocks) return remat_set_error(REMAT_ENOMEM, "remat: out of memory");
    TRY(new_param(m, "in.w", 2, (int64_t[]){W, W}, INIT_NORMAL, std, true, &m->min_w));
    TRY(new_param(m, "in.b", 1, (int64_t[]){W}, INIT_ZEROS, 0, false, &m->min_b));
    for (int l = 0; l < m->layers; l++) {
        mlp_block *b = &m->mblocks[l];
        snprintf(nm, sizeof nm, "h.%d.ln_w", l);
        TRY(new_param(m, nm, 1, (int64_t[]){W}, INIT_ONES, 0, false, &b->ln_w));
        snprintf(nm, sizeof nm, "h.%d.ln_b", l);
        TRY(new_param(m, nm, 1, (int64_t[]){W}, INIT_ZEROS, 0, false, &b->ln_b));
        snprintf(nm, sizeof nm, "h.%d.w", l);
        TRY(new_param(m, nm, 2, (int64_t[]){W, W}, INIT_NORMAL, std, true, &b->w));
        snprintf(nm, sizeof nm, "h.%d.b", l);
        TRY(new_param(m, nm, 1, (int64_t[]){W}, INIT_ZEROS, 0, false, &b->b));
    }
    TRY(new_param(m, "ln_f.w", 1, (int64_t[]){W}, INIT_ONES, 0, false, &m->lnf_w));
    TRY(new_param(m, "ln_f.b", 1, (int64_t[]){W}, INIT_ZEROS, 0, false, &m->lnf_b));
    TRY(new_param(m, "head.w", 2, (int64_t[]){W, W}, INIT_NORMAL, std, true, &m->mhead_w));
    TRY(new_param(m, "head.b", 1, (int64_t[]){W}, INIT_ZEROS, 0, false, &m->mhead_b));
done:
    return rc;
}

/* m->ctx and m->ud for m->layers blocks and their 2 x layers halves; nonzero when out of
 * memory. */
static int alloc_blocks(model *m) {
    const size_t n = 3 * (size_t)m->layers;
    m->ctx = calloc(n, sizeof *m->ctx);
    m->ud = calloc(n, sizeof *m->ud);
    if (!m->ctx || !m->ud) return 1;
    for (int l = 0; l < m->layers; l++) {
        m->ctx[l] = (block_ctx){m, l, REMAT_BLOCK_WHOLE};
        for (int h = 0; h < 2; h++)
            m->ctx[m->layers + 2 * l + h] =
                (block_ctx){m, l, h ? REMAT_BLOCK_MLP : REMAT_BLOCK_ATTN};
    }
    for (size_t i = 0; i < n; i++) m->ud[i] = &m->ctx[i];
    return 0;
}

/* The program's view of the library's model m->lib: its shape, blocks and
 * parameters. */
static int adopt_lib(model *m) {
    const remat_model_config *cfg = remat_model_get_config(m->lib);
    m->layers = cfg->n_layers;
    m->width = (int)cfg->hidden;
    m->heads = cfg->n_heads;
    m->vocab = (int)cfg->vocab;
    m->untied = !cfg->tie_word_embeddings;
    remat_model_stages(m->lib, &m->stages);
    remat_model_half_stages(m->lib, &m->halves);
    const int n = remat_model_n_params(m->lib);
    m->params = calloc((size_t)n, sizeof *m->params);
    if (!m->params || alloc_blocks(m)) return remat_set_error(REMAT_ENOMEM, "remat: out of memory");
    for (int i = 0; i < n; i++) {
        const char *name = NULL;
        remat_tensor *t = remat_model_param(m->lib, i, &name);
        param *p = &m->params[m->n_params++];
        snprintf(p->name, sizeof p->name, "%s", name);
        if (strlen(name) >= sizeof p->name)
            return remat_set_error(REMAT_EUNSUPPORTED, "parameter name too long: %s", name);
        p->t = remat_retain(t);
        p->decay = remat_ndim(t) >= 2; /* matrices and embeddings; not biases and norms */
        m->n_weights += remat_numel(t);
    }
    return REMAT_OK;
}

/* The library's model of the directory c->hf, its parameters as the program's. */
static int init_hf(model *m, const config *c, uint64_t seed) {
    if (!c->hf) return remat_set_error(REMAT_EINVAL, "remat: no Hugging Face model directory");
    remat_manual_seed(seed);
    int rc = hf_model_create(&m->lib, c->hf, c->device, !c->resume);
    return rc ? rc : adopt_lib(m);
}

int model_llama_config(const config *c, remat_model_config *cfg) {
    int rc = remat_model_config_default(cfg, REMAT_MODEL_LLAMA);
    if (rc) return rc;
    cfg->n_layers = c->layers;
    cfg->n_heads = cfg->n_kv_heads = c->heads;
    cfg->hidden = c->width;
    cfg->head_dim = 0; /* width / heads */
    /* LLaMA's SwiGLU width: 2/3 of a 4x MLP, rounded up (to 64 here: 1024 for 384) */
    cfg->intermediate = (8 * (int64_t)c->width / 3 + 63) / 64 * 64;
    cfg->vocab = GPT_VOCAB;
    cfg->max_positions = c->context;
    cfg->tie_word_embeddings = false;
    return remat_model_config_check(cfg);
}

/* --model llama: the library's Llama of the flags' shape, seeded init. */
static int init_llama(model *m, const config *c, uint64_t seed) {
    remat_model_config cfg;
    int rc = model_llama_config(c, &cfg);
    if (rc) return rc;
    remat_manual_seed(seed);
    rc = remat_model_create(&m->lib, &cfg, c->device);
    return rc ? rc : adopt_lib(m);
}

int model_init(model *m, const config *c, uint64_t seed) {
    memset(m, 0, sizeof *m);
    if (c->model == MODEL_HF || c->model == MODEL_LLAMA) {
        m->kind = c->model;
        m->device = c->device;
        m->context = c->context;
        m->autocast = c->autocast;
        int rc = c->model == MODEL_HF ? init_hf(m, c, seed) : init_llama(m, c, seed);
        if (rc) model_free(m);
        return rc;
    }
    m->kind = c->model;
    m->device = c->device;
    m->layers = c->layers;
    m->width = c->width;
    m->heads = c->heads;
    m->context = c->context;
    m->vocab = GPT_VOCAB;
    m->untied = c->untied;
    m->attn_ops = c->attn_ops;
    m->autocast = c->autocast;
    int cap = m->kind == MODEL_GPT ? 5 + 12 * m->layers : 6 + 4 * m->layers;
    m->params = calloc((size_t)cap, sizeof *m->params);
    if (!m->params || alloc_blocks(m)) {
        model_free(m);
        return remat_set_error(REMAT_ENOMEM, "remat: out of memory");
    }
    remat_manual_seed(seed);
    int rc = m->kind == MODEL_GPT ? init_gpt(m) : init_mlp(m);
    if (rc) model_free(m);
    return rc;
}

void model_free(model *m) {
    if (!m) return;
    for (int i = 0; i < m->n_params; i++) remat_release(m->params[i].t);
    remat_release(m->mask);
    remat_model_free(m->lib);
    free(m->params);
    free(m->gblocks);
    free(m->mblocks);
    free(m->ctx);
    free(m->ud);
    memset(m, 0, sizeof *m);
}

void model_json(json *j, const model *m, int batch) {
    json_str(j, "model",
             m->kind == MODEL_GPT                                         ? "gpt"
             : m->kind == MODEL_MLP                                       ? "mlp"
             : remat_model_get_config(m->lib)->family == REMAT_MODEL_GPT2 ? "gpt2"
                                                                          : "llama");
    json_int(j, "layers", m->layers);
    json_int(j, "width", m->width);
    json_int(j, "heads", m->heads);
    json_int(j, "context", m->context);
    json_int(j, "batch", batch);
    json_int(j, "params", m->n_weights);
}

void model_zero_grad(model *m) {
    for (int i = 0; i < m->n_params; i++) remat_set_grad(m->params[i].t, NULL);
}

void model_set_training(model *m, bool training) {
    if (m->lib) remat_model_set_training(m->lib, training);
}

/* ---- blocks ------------------------------------------------------------------------ */
static const char *const MLP_TAGS[] = {"linear", "gelu"};
static const char *const LLAMA_TAGS[] = {"q",        "k",      "v",       "attn",   "attn_out",
                                         "mlp_gate", "mlp_up", "mlp_act", "mlp_out"};

const char *const *model_tags(model_kind kind, int *n) {
    if (kind == MODEL_GPT) return gpt_block_tags(n);
    if (kind == MODEL_LLAMA) { /* remat_model_tags of a Llama (remat/models.h) */
        *n = (int)(sizeof LLAMA_TAGS / sizeof *LLAMA_TAGS);
        return LLAMA_TAGS;
    }
    if (kind == MODEL_HF) { /* per model: remat_model_tags */
        *n = 0;
        return NULL;
    }
    *n = (int)(sizeof MLP_TAGS / sizeof *MLP_TAGS);
    return MLP_TAGS;
}

/* GPT block: x (B, T, C) → (B, T, C), models/gpt_block.c with every
 * residual named, composed attention with --attention ops. */
static int gpt_block_fn(void *user_data, remat_tensor *const *inputs, int n_inputs,
                        remat_tensor **outputs, int n_outputs) {
    if (n_inputs != 1 || n_outputs != 1 || !inputs[0])
        return remat_set_error(REMAT_EINVAL, "gpt block: expected 1 input and 1 output");
    block_ctx *bc = user_data;
    const model *m = bc->m;
    gpt_block_config cfg = {.heads = m->heads,
                            .mask = m->attn_ops ? m->mask : NULL,
                            .gelu = REMAT_GELU_TANH,
                            .tags = true,
                            .part = bc->part};
    return gpt_block_forward(&m->gblocks[bc->layer], &cfg, inputs[0], &outputs[0]);
}

/* MLP block: x (B, W) → x + gelu(linear(layer_norm(x))). */
static int mlp_block_forward(void *user_data, remat_tensor *const *inputs, int n_inputs,
                             remat_tensor **outputs, int n_outputs) {
    if (n_inputs != 1 || n_outputs != 1 || !inputs[0])
        return remat_set_error(REMAT_EINVAL, "mlp block: expected 1 input and 1 output");
    block_ctx *bc = user_data;
    mlp_block *b = &bc->m->mblocks[bc->layer];
    remat_scope *s = NULL;
    int rc = remat_scope_begin(&s);
    if (rc) return rc;
    remat_tensor *h = NULL, *t = NULL, *y = NULL;
    TRY(remat_layer_norm_to(&h, inputs[0], 1, b->ln_w, b->ln_b, LN_EPS,
                            remat_autocast_lower_dtype(inputs[0])));
    TRY(remat_linear(&t, h, b->w, b->b));
    block_drop(&h);
    TRY(block_tag(&t, "linear"));
    TRY(remat_gelu(&h, t, REMAT_GELU_ERF));
    block_drop(&t);
    TRY(block_tag(&h, "gelu"));
    TRY(remat_add(&y, inputs[0], h));
    outputs[0] = remat_scope_keep(y);
done:
    remat_scope_end(s);
    return rc;
}

static block_hook_fn g_hook;
static void *g_hook_ud;

void models_set_block_hook(block_hook_fn fn, void *user_data) {
    g_hook = fn;
    g_hook_ud = user_data;
}

/* The function every strategy runs: the model's block plus the trace hook. */
static int traced_block(void *user_data, remat_tensor *const *inputs, int n_inputs,
                        remat_tensor **outputs, int n_outputs) {
    block_ctx *bc = user_data;
    bool recompute = remat_in_backward();
    if (g_hook) g_hook(g_hook_ud, bc->layer, true, recompute);
    const model *m = bc->m;
    /* the library's stage of this block, or of this half */
    const remat_stage *ls = !m->lib ? NULL
                            : bc->part == REMAT_BLOCK_WHOLE
                                ? &m->stages[bc->layer]
                                : &m->halves[2 * bc->layer + (bc->part == REMAT_BLOCK_MLP)];
    int rc = m->kind == MODEL_GPT ? gpt_block_fn(user_data, inputs, n_inputs, outputs, n_outputs)
             : ls                 ? ls->fn(ls->user_data, inputs, n_inputs, outputs, n_outputs)
                  : mlp_block_forward(user_data, inputs, n_inputs, outputs, n_outputs);
    if (g_hook) g_hook(g_hook_ud, bc->layer, false, recompute);
    return rc;
}

block_fn model_block_fn(void) { return traced_block; }

/* ---- whole model -------------------------------------------------------------------- */
/* *out = t on the model's device: t itself, or a copy the open scope owns
 * (the batches are made on cpu). */
static int on_device(const model *m, remat_tensor *t, remat_tensor **out) {
    remat_device d = remat_tensor_device(t);
    if (d.type == m->device.type && d.index == m->device.index) {
        *out = t;
        return REMAT_OK;
    }
    return remat_to_device(out, t, m->device);
}

static int embed(model *m, const batch *b, remat_tensor **out) {
    remat_scope *s = NULL;
    int rc = remat_scope_begin(&s);
    if (rc) return rc;
    if (m->lib) {
        remat_tensor *x;
        TRY(remat_model_embed(&x, m->lib, b->idx)); /* copies the ids to the model's device */
        *out = remat_scope_keep(x);
    } else if (m->kind == MODEL_GPT) {
        remat_tensor *tok, *pos = m->wpe, *x, *idx;
        int64_t T = remat_size(b->idx, 1);
        TRY(on_device(m, b->idx, &idx));
        TRY(remat_embedding(&tok, m->wte, idx)); /* (B, T, C) */
        if (T != m->context) TRY(remat_slice(&pos, m->wpe, 0, 0, T, 1));
        TRY(remat_add(&x, tok, pos));
        *out = remat_scope_keep(x);
    } else {
        remat_tensor *x, *bx;
        TRY(on_device(m, b->x, &bx));
        TRY(remat_linear(&x, bx, m->min_w, m->min_b));
        *out = remat_scope_keep(x);
    }
done:
    remat_scope_end(s);
    return rc;
}

/* Final norm + head; the loss when want_loss, else the outputs. */
static int head(model *m, remat_tensor *x, const batch *b, bool want_loss, remat_tensor **out) {
    remat_scope *s = NULL;
    int rc = remat_scope_begin(&s);
    if (rc) return rc;
    remat_tensor *h, *o, *r, *t, *bt;
    if (m->lib) { /* final norm, lm_head, and the loss */
        TRY(remat_model_head(&o, m->lib, x, want_loss ? b->targets : NULL));
        *out = remat_scope_keep(o);
        goto done;
    }
    /* in the dtype the head's linear runs in (remat_layer_norm_to: the cast folded in) */
    TRY(remat_layer_norm_to(&h, x, 1, m->lnf_w, m->lnf_b, LN_EPS, remat_autocast_lower_dtype(x)));
    if (m->kind == MODEL_GPT) {
        TRY(remat_linear(&o, h, m->head, NULL)); /* (B, T, V) */
        if (want_loss) {
            int64_t BT = remat_numel(b->targets);
            TRY(remat_reshape(&r, o, 2, (int64_t[]){BT, m->vocab}));
            TRY(on_device(m, b->targets, &bt));
            TRY(remat_reshape(&t, bt, 1, (int64_t[]){BT}));
            TRY(remat_cross_entropy(&o, r, t, -100));
        }
    } else {
        TRY(remat_linear(&o, h, m->mhead_w, m->mhead_b));
        if (want_loss) {
            TRY(on_device(m, b->y, &bt));
            TRY(remat_mse_loss(&o, o, bt));
        }
    }
    *out = remat_scope_keep(o);
done:
    remat_scope_end(s);
    return rc;
}

/* The user_data of the chain a strategy runs: the whole blocks, or, for a plan over the
 * last s->split blocks in halves, blocks 0..layers-split-1 whole and then the halves
 * (*ud malloc'd, *n its stages). */
static int chain_of(const model *m, const strategy *s, int *n, void ***ud) {
    const int split = s->kind == STRAT_BUDGET ? s->split : 0, L = m->layers;
    *n = L + split;
    *ud = malloc(sizeof **ud * (size_t)(L + split > 0 ? L + split : 1));
    if (!*ud) return remat_set_error(REMAT_ENOMEM, "remat: out of memory");
    for (int i = 0; i < L - split; i++) (*ud)[i] = m->ud[i];
    for (int i = 0; i < 2 * split; i++) (*ud)[L - split + i] = m->ud[L + 2 * (L - split) + i];
    return REMAT_OK;
}

static int model_loss_run(model *m, const strategy *s, const batch *b, remat_tensor **loss) {
    remat_tensor *x = NULL, *y = NULL;
    void **ud = NULL;
    int n = 0;
    *loss = NULL;
    int rc = chain_of(m, s, &n, &ud);
    if (!rc) rc = embed(m, b, &x);
    if (!rc) rc = strategy_run_chain(s, n, traced_block, ud, x, &y);
    free(ud);
    if (!rc) rc = head(m, y, b, true, loss);
    remat_release(x);
    remat_release(y);
    return rc;
}

int model_loss(model *m, const strategy *s, const batch *b, remat_tensor **loss) {
    remat_autocast_state prev;
    int rc = remat_autocast_begin(&prev, m->device.type, REMAT_BF16, m->autocast);
    if (!rc) rc = model_loss_run(m, s, b, loss);
    remat_autocast_end(&prev);
    return rc;
}

/* The blocks' profile: whole stages into *prof (with opts) when prof is given, else op by op
 * into *ops. */
static int model_profile_blocks_run(model *m, const batch *b, const remat_profile_options *opts,
                                    remat_profile **prof, remat_op_profile **ops) {
    if (prof) *prof = NULL;
    if (ops) *ops = NULL;
    remat_tensor *x = NULL;
    remat_stage *st = malloc(sizeof *st * (size_t)m->layers);
    if (!st) return remat_set_error(REMAT_ENOMEM, "remat: out of memory");
    for (int i = 0; i < m->layers; i++) st[i] = (remat_stage){traced_block, m->ud[i]};
    /* the blocks' input as in training: it requires grad (through the
     * embedding), so the profile's backward computes what training's does */
    bool prev = remat_enable_grad_begin();
    int rc = embed(m, b, &x);
    if (!rc)
        rc = prof ? remat_profile_stages(prof, m->layers, st, x, opts)
                  : remat_profile_ops(ops, m->layers, st, x, NULL);
    remat_grad_mode_restore(prev);
    remat_release(x);
    free(st);
    return rc;
}

bool model_has_halves(const model *m) { return m->kind != MODEL_MLP; }

static int model_profile_halves_run(model *m, const batch *b, bool grads_kept, remat_profile **prof,
                                    remat_op_profile **ops) {
    const int n = 2 * m->layers;
    remat_tensor *x = NULL;
    remat_stage *st = malloc(sizeof *st * (size_t)n);
    if (!st) return remat_set_error(REMAT_ENOMEM, "remat: out of memory");
    for (int i = 0; i < n; i++) st[i] = (remat_stage){traced_block, m->ud[m->layers + i]};
    bool prev = remat_enable_grad_begin();
    int rc = embed(m, b, &x);
    if (!rc) rc = remat_profile_stages(prof, n, st, x, NULL);
    if (!rc) rc = remat_profile_ops(ops, n, st, x, NULL);
    if (!rc) rc = remat_profile_apply_ops(*prof, *ops);
    remat_grad_mode_restore(prev);
    remat_release(x);
    free(st);
    if (!rc && grads_kept) /* as model_profile_step: the gradients are fixed bytes */
        for (int k = 0; k < n; k++) (*prof)->stages[k].grad_bytes = 0;
    return rc;
}

int model_profile_halves(model *m, const batch *b, bool grads_kept, remat_profile **prof,
                         remat_op_profile **ops) {
    *prof = NULL;
    *ops = NULL;
    if (!model_has_halves(m))
        return remat_set_error(REMAT_EUNSUPPORTED, "remat: the MLP's blocks have no halves");
    remat_autocast_state prev;
    int rc = remat_autocast_begin(&prev, m->device.type, REMAT_BF16, m->autocast);
    if (!rc) rc = model_profile_halves_run(m, b, grads_kept, prof, ops);
    remat_autocast_end(&prev);
    if (rc) {
        remat_profile_free(*prof);
        remat_op_profile_free(*ops);
        *prof = NULL;
        *ops = NULL;
    }
    return rc;
}

int model_profile_ops(model *m, const batch *b, remat_op_profile **out) {
    remat_autocast_state prev;
    int rc = remat_autocast_begin(&prev, m->device.type, REMAT_BF16, m->autocast);
    if (!rc) rc = model_profile_blocks_run(m, b, NULL, NULL, out);
    remat_autocast_end(&prev);
    return rc;
}

int model_profile_chain(model *m, const batch *b, const remat_profile_options *opts,
                        remat_profile **out) {
    remat_autocast_state prev;
    int rc = remat_autocast_begin(&prev, m->device.type, REMAT_BF16, m->autocast);
    if (!rc) rc = model_profile_blocks_run(m, b, opts, out, NULL);
    remat_autocast_end(&prev);
    return rc;
}

/* The parts of a step outside the chain, as one-stage chains for
 * remat_profile_stages: the head (its input: the chain's output) and the
 * embedding (its input is ignored: it reads the batch). */
typedef struct outside_ctx {
    model *m;
    const batch *b;
} outside_ctx;

static int head_stage(void *ud, remat_tensor *const *in, int n_in, remat_tensor **out, int n_out) {
    (void)n_in, (void)n_out;
    outside_ctx *o = ud;
    return head(o->m, in[0], o->b, true, out);
}

static int embed_stage(void *ud, remat_tensor *const *in, int n_in, remat_tensor **out, int n_out) {
    (void)in, (void)n_in, (void)n_out;
    outside_ctx *o = ud;
    return embed(o->m, o->b, out);
}

/* The bytes of the weight the head and the embedding share (tied word
 * embeddings), 0 when untied. Its gradient has two contributions, the
 * head's (made first, held by the engine) and the embedding's; the engine
 * adds them out of place before .grad gets the sum, so for a moment the
 * step holds one more gradient of that size than the head's and the
 * embedding's profiles show (GPT-2, V=807 D=24: the measured step peak was
 * 71140 bytes above the prediction without it). */
static size_t tied_weight_bytes(const model *m) {
    if (m->untied || m->kind == MODEL_MLP) return 0;
    if (m->kind == MODEL_GPT) return remat_storage_nbytes(m->wte);
    if (!m->lib) return 0;
    for (int i = 0; i < m->n_params; i++) { /* the library's model: the (V, D) embedding */
        const remat_tensor *t = m->params[i].t;
        if (remat_ndim(t) == 2 && remat_shape(t)[0] == m->vocab && remat_shape(t)[1] == m->width)
            return remat_storage_nbytes(t);
    }
    return 0;
}

static int model_profile_step_run(model *m, const batch *b, bool grads_kept, remat_profile **chain,
                                  remat_step_profile *step) {
    *chain = NULL;
    memset(step, 0, sizeof *step);
    remat_tensor *x = NULL;
    remat_profile *hp = NULL, *ep = NULL;
    outside_ctx o = {m, b};
    remat_stage hs = {head_stage, &o}, es = {embed_stage, &o};
    bool prev = remat_enable_grad_begin();
    /* fixed: what is live when the chain starts (parameters, optimizer
     * state, the batch, the embedding's output and what it keeps) */
    int rc = embed(m, b, &x);
    remat_alloc_stats live; /* on the model's device: the budget bounds its allocator */
    if (!rc) rc = remat_alloc_stats_get(m->device, &live);
    if (!rc) step->fixed_bytes = live.current_bytes;
    if (!rc) rc = model_profile_chain(m, b, NULL, chain);
    /* the blocks keep the shape, so the embedding's output stands in for
     * the chain's output: the head's bytes do not depend on the values */
    if (!rc) rc = remat_profile_stages(&hp, 1, &hs, x, NULL);
    if (!rc) rc = remat_profile_stages(&ep, 1, &es, x, NULL);
    remat_grad_mode_restore(prev);
    if (!rc) {
        step->head = hp->stages[0];
        step->tail_peak = ep->stages[0].bwd_peak + tied_weight_bytes(m);
        if (grads_kept) { /* accumulation: every .grad exists before the step */
            for (int i = 0; i < m->n_params; i++)
                step->fixed_bytes += remat_storage_nbytes(m->params[i].t);
            for (int k = 0; k < (*chain)->n_stages; k++) (*chain)->stages[k].grad_bytes = 0;
            step->head.grad_bytes = 0;
        }
    } else {
        remat_profile_free(*chain);
        *chain = NULL;
    }
    remat_profile_free(hp);
    remat_profile_free(ep);
    remat_release(x);
    return rc;
}

int model_profile_step(model *m, const batch *b, bool grads_kept, remat_profile **chain,
                       remat_step_profile *step) {
    remat_autocast_state prev;
    int rc = remat_autocast_begin(&prev, m->device.type, REMAT_BF16, m->autocast);
    if (!rc) rc = model_profile_step_run(m, b, grads_kept, chain, step);
    remat_autocast_end(&prev);
    return rc;
}

int model_outputs(model *m, const batch *b, remat_tensor **out) {
    strategy none;
    strategy_parse("none", false, &none, NULL, 0);
    remat_tensor *x = NULL, *y = NULL;
    *out = NULL;
    int rc = embed(m, b, &x);
    if (!rc) rc = strategy_run_chain(&none, m->layers, traced_block, m->ud, x, &y);
    if (!rc) rc = head(m, y, b, false, out);
    remat_release(x);
    remat_release(y);
    return rc;
}
