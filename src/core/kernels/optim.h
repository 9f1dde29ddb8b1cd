/* src/core/kernels/optim.h — kernels of the optimizer family (src/optim/optim.c): the
 * per-element updates of AdamW and SGD on a parameter, its gradient and its state, and the
 * sum of squares of a gradient for global norms. Operands are contiguous, of one dtype (f32
 * or f64) and one device, with the same number of elements; the updated ones are changed in
 * place. Also the scalar factors every device's AdamW kernel forms on the host from the
 * hyperparameters, one copy (rm_adamw_factors_make), so that the cpu and the cuda kernels
 * start from the same bits. Plain C and CUDA C clean. */
#ifndef REMAT_KERNELS_OPTIM_H
#define REMAT_KERNELS_OPTIM_H

#include <math.h>
#include <stdbool.h>
#include <stdint.h>

#define RM_KERNELS_OPTIM(X)                                                                        \
    /* AdamW (decoupled decay): m, v := the moments of g; p := p · decay - step_size · m /    \
     * (sqrt(v) / sqrt(bc2) + eps). in: g; out: p, m, v (updated in place).                  \
     * rm_adamw_kparams */  \
    X(ADAMW, "adamw update")                                                                       \
    /* SGD as torch.optim.SGD: d = g (+ wd · p); with momentum buf := d (first) or mom · buf \
     * + (1 - dampening) · d, d = buf (nesterov: d + mom · buf); p := p - lr · d. in: g;     \
     * out: p, buf (NULL without momentum; updated in place). rm_sgd_kparams */   \
    X(SGD, "sgd update")                                                                           \
    /* s[at] = sum over i of x[i]^2 in double. in: x; out: s (f64, contiguous, on x's        \
     * device, more than `at` elements). rm_sumsq_kparams */     \
    X(SUM_SQUARES, "sum of squares")                                                               \
    /* The updates of many tensors in one kernel (the optimizer's step over its parameters):  \
     * tensor i updated as ADAMW / SGD would update it with its own params[i]. rm_optim_list; \
     * in[0], out[0]: the first gradient and parameter (the lookup's operands) */    \
    X(ADAMW_LIST, "adamw update, many tensors")                                                    \
    X(SGD_LIST, "sgd update, many tensors")

/* ADAMW: remat_adamw_hparams' fields (remat/optim.h). grad_scale (0: none) is a factor the
 * gradient is read with, g rounded times it (the optimizer's mean over micro-batches and
 * its clip), only for a kernel that allows it (RM_KF_GRAD_SCALE): the bits of a SCALE pass
 * over g first, without the pass. */
typedef struct rm_adamw_kparams {
    double lr, beta1, beta2, eps, weight_decay;
    int64_t step;      /* >= 1 */
    double grad_scale; /* 0: none */
} rm_adamw_kparams;
/* SGD: remat_sgd_hparams' fields; grad_scale as ADAMW's. */
typedef struct rm_sgd_kparams {
    double lr, momentum, dampening, weight_decay;
    bool nesterov, first; /* first: the momentum buffer is initialised with d */
    double grad_scale;    /* 0: none */
} rm_sgd_kparams;
/* SUM_SQUARES: which element of s gets the sum. */
typedef struct rm_sumsq_kparams {
    int64_t at;
} rm_sumsq_kparams;

/* ADAMW_LIST, SGD_LIST: n tensors of one dtype on one device, each contiguous; p[i],
 * g[i] and the state s0[i] (AdamW's m, SGD's momentum buffer; NULL entries without
 * momentum), s1[i] (AdamW's v) have the same number of elements; adamw[i] (ADAMW_LIST) or
 * sgd[i] (SGD_LIST) are tensor i's parameters, grad_scale included: a list kernel always
 * reads it (no RM_KF_GRAD_SCALE needed). The kernel reads its tensors from here, not from
 * in[]/out[], so a wrapper that opens only a kernel's operands (tests' fenced device) must
 * not offer it. A device type without these kernels gets one ADAMW / SGD per tensor:
 * every element's result is the same bits either way. */
typedef struct rm_optim_list {
    int n;
    struct remat_tensor *const *p, *const *g, *const *s0, *const *s1;
    const rm_adamw_kparams *adamw;
    const rm_sgd_kparams *sgd;
} rm_optim_list;

/* The scalars of an AdamW update, formed in double from the hyperparameters and rounded
 * once: f64 kernels use the double ones, f32 kernels the float ones. */
typedef struct rm_adamw_factors {
    double b1, b2, eps, decay, step_size, sqrt_bc2;     /* f64 */
    float b1f, b2f, epsf, decayf, stepf, inv_sqrt_bc2f; /* f32 */
    float one_m_b1f, one_m_b2f;                         /* 1.0f - b1f, 1.0f - b2f */
    double gscale;                                      /* grad_scale, or 1 */
    float gscalef;                                      /* (float)gscale */
} rm_adamw_factors;

static inline void rm_adamw_factors_make(const rm_adamw_kparams *h, rm_adamw_factors *f) {
    const double bc1 = 1.0 - pow(h->beta1, (double)h->step);
    const double bc2 = 1.0 - pow(h->beta2, (double)h->step);
    f->b1 = h->beta1;
    f->b2 = h->beta2;
    f->eps = h->eps;
    f->decay = 1.0 - h->lr * h->weight_decay;
    f->step_size = h->lr / bc1;
    f->sqrt_bc2 = sqrt(bc2);
    f->b1f = (float)h->beta1;
    f->b2f = (float)h->beta2;
    f->epsf = (float)h->eps;
    f->decayf = (float)f->decay;
    f->stepf = (float)f->step_size;
    f->inv_sqrt_bc2f = (float)(1.0 / sqrt(bc2));
    f->one_m_b1f = 1.0f - f->b1f;
    f->one_m_b2f = 1.0f - f->b2f;
    f->gscale = h->grad_scale != 0 ? h->grad_scale : 1.0;
    f->gscalef = (float)f->gscale;
}

#endif /* REMAT_KERNELS_OPTIM_H */
