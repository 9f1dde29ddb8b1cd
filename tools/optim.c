/* tools/optim.c — AdamW and SGD (see optim.h). */
#include "optim.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

int optim_init(optim *o, const config *c, const model *mdl) {
    memset(o, 0, sizeof *o);
    o->kind = c->optim;
    o->lr = c->lr;
    o->weight_decay = c->weight_decay;
    o->momentum = c->momentum;
    o->beta1 = 0.9;
    o->beta2 = 0.95;
    o->eps = 1e-8;
    o->n = mdl->n_params;
    o->m = calloc((size_t)o->n, sizeof *o->m);
    o->v = calloc((size_t)o->n, sizeof *o->v);
    if (!o->m || !o->v) {
        optim_free(o);
        return remat_set_error(REMAT_ENOMEM, "remat: out of memory");
    }
    bool need_m = o->kind == OPTIM_ADAMW || o->momentum != 0;
    bool need_v = o->kind == OPTIM_ADAMW;
    for (int i = 0; i < o->n; i++) {
        remat_tensor *p = mdl->params[i].t;
        int rc = REMAT_OK;
        if (need_m)
            rc = remat_zeros(&o->m[i], remat_ndim(p), remat_shape(p), REMAT_F32, REMAT_DEVICE_CPU);
        if (!rc && need_v)
            rc = remat_zeros(&o->v[i], remat_ndim(p), remat_shape(p), REMAT_F32, REMAT_DEVICE_CPU);
        if (rc) {
            optim_free(o);
            return rc;
        }
    }
    return REMAT_OK;
}

void optim_free(optim *o) {
    for (int i = 0; o->m && i < o->n; i++) remat_release(o->m[i]);
    for (int i = 0; o->v && i < o->n; i++) remat_release(o->v[i]);
    free(o->m);
    free(o->v);
    memset(o, 0, sizeof *o);
}

/* As torch.optim.AdamW: p *= 1 - lr*wd; m = b1 m + (1-b1) g; v = b2 v + (1-b2) g²;
 * p -= lr/bc1 * m / (sqrt(v)/sqrt(bc2) + eps). Loops are float like PyTorch's
 * f32 kernels, with the scalar factors in double. */
static void adamw_kernel(float *restrict p, const float *restrict g, float *restrict m,
                         float *restrict v, int64_t n, float b1, float b2, float decay,
                         float step_size, float inv_sqrt_bc2, float eps) {
#pragma omp parallel for if (n > 65536)
    for (int64_t i = 0; i < n; i++) {
        float gi = g[i];
        float mi = b1 * m[i] + (1.0f - b1) * gi;
        float vi = b2 * v[i] + (1.0f - b2) * gi * gi;
        m[i] = mi;
        v[i] = vi;
        float denom = sqrtf(vi) * inv_sqrt_bc2 + eps;
        p[i] = p[i] * decay - step_size * mi / denom;
    }
}

static void sgd_kernel(float *restrict p, const float *restrict g, float *restrict buf, int64_t n,
                       float lr, float momentum, bool first) {
#pragma omp parallel for if (n > 65536)
    for (int64_t i = 0; i < n; i++) {
        float d = g[i];
        if (buf) {
            d = first ? d : momentum * buf[i] + d;
            buf[i] = d;
        }
        p[i] -= lr * d;
    }
}

int optim_step(optim *o, model *mdl) {
    o->t++;
    double bc1 = 1.0 - pow(o->beta1, (double)o->t), bc2 = 1.0 - pow(o->beta2, (double)o->t);
    for (int i = 0; i < o->n; i++) {
        remat_tensor *p = mdl->params[i].t, *g = remat_tensor_grad(p);
        if (!g) continue;
        /* a gradient may arrive as a strided tensor: the loops want it dense */
        remat_scope *s = NULL;
        if (!remat_is_contiguous(g)) {
            bool prev = remat_no_grad_begin();
            int rc = remat_scope_begin(&s);
            if (!rc) rc = remat_contiguous(&g, g);
            remat_grad_mode_restore(prev);
            if (rc) {
                remat_scope_end(s);
                return rc;
            }
        }
        float *pd = remat_data(p);
        const float *gd = remat_data(g);
        int64_t n = remat_numel(p);
        if (o->kind == OPTIM_ADAMW) {
            double wd = mdl->params[i].decay ? o->weight_decay : 0.0;
            adamw_kernel(pd, gd, remat_data(o->m[i]), remat_data(o->v[i]), n, (float)o->beta1,
                         (float)o->beta2, (float)(1.0 - o->lr * wd), (float)(o->lr / bc1),
                         (float)(1.0 / sqrt(bc2)), (float)o->eps);
        } else {
            sgd_kernel(pd, gd, o->m[i] ? remat_data(o->m[i]) : NULL, n, (float)o->lr,
                       (float)o->momentum, o->t == 1);
        }
        remat_scope_end(s);
    }
    return REMAT_OK;
}
