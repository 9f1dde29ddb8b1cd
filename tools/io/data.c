/* tools/io/data.c — the built-in tasks and --data FILE (see data.h). */
#include "data.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli/util.h"
#include "hf_dir.h"

#define EVAL_TAG 0xE7A1u /* separates held-out streams from training ones */

/* The held-out tail: the last 10% if that leaves a window of T + 1 on both sides. */
static size_t held_out_split(size_t len, int T) {
    size_t split = len - len / 10;
    if (split < (size_t)T + 2 || len - split < (size_t)T + 2) split = len;
    return split;
}

static int init_tokens(task *t, const config *c) {
    t->kind = TASK_TOKENS;
    int rc = hf_read_tokens(c->hf, c->data, "--data", &t->tokens, &t->n_tokens);
    if (rc) return rc;
    if (t->n_tokens < (size_t)c->context + 2)
        return remat_set_error(REMAT_EINVAL,
                               "--data %s: %zu tokens; training needs at least --context + 2 = %d",
                               c->data, t->n_tokens, c->context + 2);
    t->split = held_out_split(t->n_tokens, c->context);
    return REMAT_OK;
}

int task_init(task *t, const config *c) {
    memset(t, 0, sizeof *t);
    t->batch = c->batch;
    t->context = c->context;
    t->width = c->width;
    t->seed = c->seed;
    t->world = 1;
    if (c->model == MODEL_HF) return init_tokens(t, c);
    if (c->model == MODEL_MLP) {
        t->kind = TASK_FUNCTION;
        return REMAT_OK;
    }
    if (!c->data) {
        t->kind = TASK_ADDITION;
        return REMAT_OK;
    }
    t->kind = TASK_TEXT;
    int fd = util_open_regular(c->data, "--data"); /* a FIFO or /dev/zero would never end */
    if (fd < 0) return REMAT_EIO;
    FILE *f = fdopen(fd, "rb");
    if (!f) {
        close(fd);
        return remat_set_error(REMAT_EIO, "--data %s: %s", c->data, strerror(errno));
    }
    size_t cap = 1 << 16, len = 0;
    unsigned char *buf = malloc(cap);
    while (buf) {
        size_t n = fread(buf + len, 1, cap - len, f);
        len += n;
        if (len < cap) break;
        unsigned char *nb = realloc(buf, cap * 2);
        if (!nb) {
            free(buf);
            buf = NULL;
            break;
        }
        buf = nb;
        cap *= 2;
    }
    int err = ferror(f);
    fclose(f);
    if (!buf) return remat_set_error(REMAT_ENOMEM, "--data %s: out of memory", c->data);
    if (err) {
        free(buf);
        return remat_set_error(REMAT_EIO, "--data %s: read error", c->data);
    }
    if (len < (size_t)c->context + 2) {
        free(buf);
        return remat_set_error(REMAT_EINVAL,
                               "--data %s: the file has %zu bytes; it needs at least --context + 2 "
                               "= %d",
                               c->data, len, c->context + 2);
    }
    t->text = buf;
    t->text_len = len;
    t->split = held_out_split(len, c->context); /* the last 10% */
    return REMAT_OK;
}

void task_free(task *t) {
    free(t->text);
    free(t->tokens);
    memset(t, 0, sizeof *t);
}

const char *task_name(const task *t) {
    switch (t->kind) {
    case TASK_ADDITION: return "addition";
    case TASK_TEXT: return "text";
    case TASK_FUNCTION: return "function";
    case TASK_TOKENS: return "tokens";
    }
    return "?";
}

/* ---- addition ------------------------------------------------------------------------ */
/* One pair in ten is held out, independent of --seed. */
static bool held_out(int a, int b) {
    return util_mix(0x5EEDull, (uint64_t)a, (uint64_t)b) % 10 == 0;
}

/* Fills s[0..n) with problems "a+b=c\n" from rng; ans[i] = 1 on answer
 * bytes, prob[i] = problem number of byte i. */
static void addition_row(uint64_t rng, bool eval, int n, unsigned char *s, unsigned char *ans,
                         int *prob) {
    int len = 0, p = 0;
    while (len < n) {
        int a, b;
        do {
            a = (int)(util_splitmix64(&rng) % 100);
            b = (int)(util_splitmix64(&rng) % 100);
        } while (held_out(a, b) != eval);
        char line[16];
        int q = snprintf(line, sizeof line, "%02d+%02d=", a, b);
        int r = snprintf(line + q, sizeof line - (size_t)q, "%03d\n", a + b);
        for (int i = 0; i < q + r && len < n; i++, len++) {
            s[len] = (unsigned char)line[i];
            ans[len] = i >= q;
            prob[len] = p;
        }
        p++;
    }
}

static int make_tokens(const task *t, bool eval, int64_t key, batch *b) {
    const int B = t->batch, T = t->context;
    int64_t *idx = malloc(sizeof(int64_t) * (size_t)B * (size_t)T);
    int64_t *tgt = malloc(sizeof(int64_t) * (size_t)B * (size_t)T);
    unsigned char *s = malloc((size_t)T + 1), *ans = malloc((size_t)T + 1);
    int *prob = malloc(sizeof(int) * ((size_t)T + 1));
    int rc = REMAT_OK;
    if (!idx || !tgt || !s || !ans || !prob) {
        rc = remat_set_error(REMAT_ENOMEM, "remat: out of memory");
        goto done;
    }
    for (int r = 0; r < B; r++) {
        uint64_t rng = util_mix(t->seed ^ (eval ? EVAL_TAG : 0), (uint64_t)key,
                                (uint64_t)(eval ? r : t->row0 + r));
        if (t->kind == TASK_TOKENS) {
            /* windows at kT of the training part, or of the held-out tail */
            size_t lo = eval && t->split < t->n_tokens ? t->split : 0;
            size_t hi = eval ? t->n_tokens : t->split;
            uint64_t count = (hi - lo - 1) / (size_t)T; /* windows [lo + kT, lo + kT + T + 1) */
            uint64_t g =
                eval ? (uint64_t)key * (uint64_t)B + (uint64_t)r
                     : (uint64_t)key * (uint64_t)B * (uint64_t)t->world + (uint64_t)(t->row0 + r);
            const uint32_t *w = t->tokens + lo + (size_t)(g % count) * (size_t)T;
            for (int j = 0; j < T; j++) {
                idx[r * T + j] = w[j];
                tgt[r * T + j] = w[j + 1];
            }
            continue;
        }
        if (t->kind == TASK_ADDITION) {
            addition_row(rng, eval, T + 1, s, ans, prob);
        } else {
            /* a window of the text: training part, or the held-out tail */
            size_t lo = eval && t->split < t->text_len ? t->split : 0;
            size_t hi = eval ? t->text_len : t->split; /* window must end before hi */
            size_t span = hi - lo - (size_t)T - 1;
            size_t off = lo + (size_t)(util_splitmix64(&rng) % (span + 1));
            memcpy(s, t->text + off, (size_t)T + 1);
            memset(ans, 1, (size_t)T + 1);
        }
        for (int j = 0; j < T; j++) {
            idx[r * T + j] = s[j];
            tgt[r * T + j] = ans[j + 1] ? s[j + 1] : -100;
        }
    }
    memset(b, 0, sizeof *b);
    rc = remat_from_data(&b->idx, 2, (int64_t[]){B, T}, REMAT_I64, idx);
    if (!rc) rc = remat_from_data(&b->targets, 2, (int64_t[]){B, T}, REMAT_I64, tgt);
    if (rc) batch_free(b);
    b->tokens = (int64_t)B * T;
done:
    free(idx);
    free(tgt);
    free(s);
    free(ans);
    free(prob);
    return rc;
}

static int make_function(const task *t, bool eval, int64_t key, batch *b) {
    const int B = t->batch, W = t->width;
    float *x = malloc(sizeof(float) * (size_t)B * (size_t)W);
    float *y = malloc(sizeof(float) * (size_t)B * (size_t)W);
    int rc = REMAT_OK;
    memset(b, 0, sizeof *b);
    if (!x || !y) {
        rc = remat_set_error(REMAT_ENOMEM, "remat: out of memory");
        goto done;
    }
    for (int r = 0; r < B; r++) {
        uint64_t rng = util_mix(t->seed ^ (eval ? EVAL_TAG : 0), (uint64_t)key,
                                (uint64_t)(eval ? r : t->row0 + r));
        float *xr = x + (size_t)r * W, *yr = y + (size_t)r * W;
        for (int i = 0; i < W; i++) xr[i] = (float)util_normal(&rng);
        for (int i = 0; i < W; i++) yr[i] = sinf(2.0f * xr[i]) * cosf(xr[(i + 1) % W]);
    }
    rc = remat_from_data(&b->x, 2, (int64_t[]){B, W}, REMAT_F32, x);
    if (!rc) rc = remat_from_data(&b->y, 2, (int64_t[]){B, W}, REMAT_F32, y);
    if (rc) batch_free(b);
    b->tokens = B;
done:
    free(x);
    free(y);
    return rc;
}

int task_batch(const task *t, int64_t step, batch *b) {
    return t->kind == TASK_FUNCTION ? make_function(t, false, step, b)
                                    : make_tokens(t, false, step, b);
}

int task_eval_batch(const task *t, int i, batch *b) {
    return t->kind == TASK_FUNCTION ? make_function(t, true, i, b) : make_tokens(t, true, i, b);
}

int task_score(const task *t, int eval_index, const batch *b, remat_tensor *outputs,
               eval_result *r) {
    int rc = REMAT_OK;
    if (t->kind == TASK_FUNCTION) {
        int64_t n = (int64_t)t->batch * t->width;
        float *o = malloc(sizeof(float) * (size_t)n), *y = malloc(sizeof(float) * (size_t)n);
        if (!o || !y) rc = remat_set_error(REMAT_ENOMEM, "remat: out of memory");
        if (!rc) rc = remat_copy_to_buffer(outputs, REMAT_F32, o, n);
        if (!rc) rc = remat_copy_to_buffer(b->y, REMAT_F32, y, n);
        for (int64_t i = 0; !rc && i < n; i++) r->loss_sum += (double)(o[i] - y[i]) * (o[i] - y[i]);
        if (!rc) r->loss_n += n;
        free(o);
        free(y);
        return rc;
    }
    const int B = t->batch, T = t->context, V = t->kind == TASK_TOKENS ? t->vocab : GPT_VOCAB;
    float *logits = malloc(sizeof(float) * (size_t)B * (size_t)T * V);
    int64_t *tgt = malloc(sizeof(int64_t) * (size_t)B * (size_t)T);
    unsigned char *s = malloc((size_t)T + 1), *ans = malloc((size_t)T + 1);
    int *prob = malloc(sizeof(int) * ((size_t)T + 1));
    if (!logits || !tgt || !s || !ans || !prob) {
        rc = remat_set_error(REMAT_ENOMEM, "remat: out of memory");
        goto done;
    }
    rc = remat_copy_to_buffer(outputs, REMAT_F32, logits, (int64_t)B * T * V);
    if (!rc) rc = remat_copy_to_buffer(b->targets, REMAT_I64, tgt, (int64_t)B * T);
    if (rc) goto done;
    for (int row = 0; row < B; row++) {
        int cur = -1;
        bool ok = true, counted = false;
        if (t->kind == TASK_ADDITION) {
            uint64_t rng = util_mix(t->seed ^ EVAL_TAG, (uint64_t)eval_index, (uint64_t)row);
            addition_row(rng, true, T + 1, s, ans, prob);
        }
        for (int j = 0; j < T; j++) {
            int64_t target = tgt[row * T + j];
            if (target < 0) continue;
            const float *l = logits + ((size_t)row * T + (size_t)j) * V;
            int best = 0;
            for (int v = 1; v < V; v++)
                if (l[v] > l[best]) best = v;
            /* cross-entropy of this position: logsumexp(l) - l[target] */
            double se = 0;
            for (int v = 0; v < V; v++) se += exp((double)l[v] - (double)l[best]);
            r->loss_sum += log(se) + (double)l[best] - (double)l[target];
            r->loss_n++;
            bool hit = best == target;
            r->tokens++;
            r->tokens_ok += hit;
            if (t->kind != TASK_ADDITION) continue;
            /* a problem counts when its last answer byte ('\n') is a target */
            int p = prob[j + 1];
            if (p != cur) {
                cur = p;
                ok = true;
                counted = false;
            }
            ok = ok && hit;
            if (target == '\n' && !counted) {
                counted = true;
                r->problems++;
                r->problems_ok += ok;
            }
        }
    }
done:
    free(logits);
    free(tgt);
    free(s);
    free(ans);
    free(prob);
    return rc;
}
