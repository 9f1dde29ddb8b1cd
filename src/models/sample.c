/* src/models/sample.c — picking tokens from logits and generating with a
 * KV cache (remat/models.h). */
#include <math.h>
#include <stdlib.h>

#include "blocks.h"
#include "core/core.h"

#include "remat/models.h"

typedef struct ranked {
    float logit;
    int64_t index;
} ranked;

/* Likeliest first; equal logits by index, so the order never depends on qsort. */
static int by_logit(const void *a, const void *b) {
    const ranked *x = a, *y = b;
    if (x->logit != y->logit) return x->logit > y->logit ? -1 : 1;
    return x->index < y->index ? -1 : x->index > y->index;
}

remat_status remat_sample_logits(const float *logits, int64_t v, double temperature, int top_k,
                                 int64_t *out) {
    const char *call = "remat_sample_logits";
    if (!logits || !out || v < 1 || v > (int64_t)1 << 31)
        return mb_err(REMAT_EINVAL, "%s: expected logits, 1 to 2^31 of them, and out", call);
    if (!(temperature >= 0) || !isfinite(temperature) || top_k < 0)
        return mb_err(REMAT_EINVAL,
                      "%s: temperature %g, top_k %d: expected a finite temperature "
                      ">= 0 and top_k >= 0",
                      call, temperature, top_k);
    ranked *r = malloc(sizeof *r * (size_t)v);
    double *p = malloc(sizeof *p * (size_t)v);
    if (!r || !p) {
        free(r), free(p);
        return mb_err(REMAT_ENOMEM, "%s: out of memory", call);
    }
    int rc = REMAT_OK;
    for (int64_t i = 0; i < v && !rc; i++) {
        if (isnan(logits[i]) || logits[i] == INFINITY)
            rc = mb_err(REMAT_EINVAL, "%s: the model's logits are not finite (a diverged run?)",
                        call);
        r[i] = (ranked){logits[i], i};
    }
    if (rc) goto done;
    qsort(r, (size_t)v, sizeof *r, by_logit);
    if (temperature == 0 || r[0].logit == -INFINITY) {
        *out = r[0].index;
        goto done;
    }
    const int64_t k = top_k > 0 && top_k < v ? top_k : v;
    double sum = 0;
    for (int64_t i = 0; i < k; i++) {
        p[i] = exp(((double)r[i].logit - (double)r[0].logit) / temperature);
        sum += p[i];
    }
    remat_tensor *u = NULL;
    void *scope = rm_scope_suspend();
    rc = remat_rand_uniform(&u, 1, (int64_t[]){1}, 0.0, 1.0, REMAT_F64, REMAT_DEVICE_CPU);
    rm_scope_resume(scope);
    if (rc) goto done;
    double x = *(const double *)remat_data(u) * sum;
    remat_release(u);
    int64_t pick = k - 1; /* rounding may leave x just above the last sum */
    for (int64_t i = 0; i < k; i++) {
        x -= p[i];
        if (x < 0) {
            pick = i;
            break;
        }
    }
    *out = r[pick].index;
done:
    free(r);
    free(p);
    return rc;
}

/* The last position's logits of (1, T, V) on the host, as f32. */
static int last_logits(remat_tensor *logits, float *host) {
    const int64_t T = remat_size(logits, 1), V = remat_size(logits, 2);
    remat_tensor *last = NULL;
    int rc = remat_slice(&last, logits, 1, T - 1, T, 1);
    if (!rc) rc = remat_copy_to_buffer(last, REMAT_F32, host, V);
    remat_release(last);
    return rc;
}

static int generate(remat_tensor **out, remat_model *m, remat_tensor *prompt, int64_t n,
                    double temperature, int top_k) {
    const int64_t P = remat_size(prompt, 1), V = remat_model_get_config(m)->vocab;
    remat_model_cache *c = NULL;
    int64_t *ids = malloc(sizeof *ids * (size_t)(n > 0 ? n : 1));
    float *host = malloc(sizeof *host * (size_t)V);
    int rc = ids && host ? REMAT_OK : mb_err(REMAT_ENOMEM, "remat_model_generate: out of memory");
    if (!rc) rc = remat_model_cache_create(&c, m, 1, P + n);
    remat_tensor *next = prompt ? remat_retain(prompt) : NULL, *logits = NULL;
    for (int64_t i = 0; !rc && i < n; i++) {
        rc = remat_model_forward_cached(&logits, m, c, next);
        if (!rc) rc = last_logits(logits, host);
        if (!rc) rc = remat_sample_logits(host, V, temperature, top_k, &ids[i]);
        remat_release_p(&logits);
        remat_release_p(&next);
        if (!rc) rc = remat_from_data(&next, 2, (int64_t[]){1, 1}, REMAT_I64, &ids[i]);
    }
    remat_release(next);
    if (!rc) rc = remat_from_data(out, 2, (int64_t[]){1, n}, REMAT_I64, ids);
    remat_model_cache_free(c);
    free(ids);
    free(host);
    return rc;
}

remat_status remat_model_generate(remat_tensor **out, remat_model *m, remat_tensor *prompt,
                                  int64_t n, double temperature, int top_k) {
    const char *call = "remat_model_generate";
    if (!out) return mb_err(REMAT_EINVAL, "%s: out is NULL", call);
    *out = NULL;
    if (!m || !prompt || remat_ndim(prompt) != 2 || remat_size(prompt, 0) != 1 ||
        remat_tensor_dtype(prompt) != REMAT_I64 || remat_size(prompt, 1) < 1)
        return mb_err(REMAT_EINVAL, "%s: expected a model and a prompt (1, P) i64 with P >= 1",
                      call);
    const int64_t P = remat_size(prompt, 1), cap = remat_model_get_config(m)->max_positions;
    if (n < 1 || P + n > cap)
        return mb_err(REMAT_EINVAL,
                      "%s: %lld tokens after a prompt of %lld: expected 1 to %lld in all "
                      "(max_positions)",
                      call, (long long)n, (long long)P, (long long)cap);
    void *scope = rm_scope_suspend();
    int rc = generate(out, m, prompt, n, temperature, top_k);
    rm_scope_resume(scope);
    return rc ? rc : rm_hand_out_n(out, 1);
}
