/*
 * examples/checkpoint_mlp.c — train a deep residual MLP with per-block
 * activation checkpointing and compare it with training without.
 *
 * The model is L blocks of  x + W2·gelu(W1·x + b1) + b2  followed by a
 * linear read-out; it learns to imitate a fixed random "teacher" network
 * (mean squared error, plain SGD). The same steps run three times:
 *
 *   none            every activation is kept for backward
 *   non-reentrant   each block is remat_checkpoint'ed (use_reentrant off)
 *   reentrant       each block is remat_checkpoint'ed (use_reentrant on)
 *
 * and the program prints the loss curve and the allocator's peak bytes of
 * each. Checkpointing recomputes each block's forward during backward, so
 * the losses are identical while the peak drops from "all L blocks'
 * hidden activations" to "L block inputs + one block's internals".
 *
 *   ./example_checkpoint_mlp [layers] [steps]
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "remat/remat.h"

#define BATCH 256
#define DIM 64
#define HIDDEN 256

typedef struct block {
    remat_tensor *w1, *b1, *w2, *b2;
} block;

typedef struct model {
    int n_layers;
    block *blocks;
    remat_tensor *w_out, *b_out;
} model;

#define CHECK(expr)                                                                                \
    do {                                                                                           \
        int rc_ = (expr);                                                                          \
        if (rc_) {                                                                                 \
            fprintf(stderr, "%s:%d: %s failed: %s\n", __FILE__, __LINE__, #expr,                   \
                    remat_last_error());                                                           \
            exit(1);                                                                               \
        }                                                                                          \
    } while (0)

static remat_tensor *param(int ndim, const int64_t *shape, double bound) {
    remat_tensor *t;
    CHECK(remat_rand_uniform(&t, ndim, shape, -bound, bound, REMAT_F32, REMAT_DEVICE_CPU));
    CHECK(remat_set_requires_grad(t, true));
    return t;
}

static void model_init(model *m, int n_layers, uint64_t seed) {
    remat_manual_seed(seed);
    m->n_layers = n_layers;
    m->blocks = calloc((size_t)n_layers, sizeof *m->blocks);
    int64_t s1[] = {HIDDEN, DIM}, s2[] = {DIM, HIDDEN}, sh[] = {HIDDEN}, sd[] = {DIM};
    for (int i = 0; i < n_layers; i++) {
        block *b = &m->blocks[i];
        b->w1 = param(2, s1, 0.125); /* 1/sqrt(DIM) */
        b->b1 = param(1, sh, 0.125);
        b->w2 = param(2, s2, 0.5 / 16.0); /* small: keeps the residual stream tame */
        b->b2 = param(1, sd, 0.01);
    }
    int64_t so[] = {DIM, DIM};
    m->w_out = param(2, so, 0.125);
    m->b_out = param(1, sd, 0.125);
}

static void model_free(model *m) {
    for (int i = 0; i < m->n_layers; i++) {
        remat_release(m->blocks[i].w1);
        remat_release(m->blocks[i].b1);
        remat_release(m->blocks[i].w2);
        remat_release(m->blocks[i].b2);
    }
    free(m->blocks);
    remat_release(m->w_out);
    remat_release(m->b_out);
}

/* One residual block: a remat_checkpoint_fn, so it can be checkpointed as is. */
static int block_fn(void *user_data, remat_tensor *const *in, int n_in, remat_tensor **out,
                    int n_out) {
    block *b = user_data;
    (void)n_in;
    (void)n_out;
    remat_scope *s;
    int rc = remat_scope_begin(&s);
    if (rc) return rc;
    remat_tensor *h = NULL, *g = NULL, *y = NULL, *r = NULL;
    rc = remat_linear(&h, in[0], b->w1, b->b1);
    if (!rc) rc = remat_gelu(&g, h, REMAT_GELU_TANH);
    if (!rc) rc = remat_linear(&y, g, b->w2, b->b2);
    if (!rc) rc = remat_add(&r, in[0], y);
    if (!rc) out[0] = remat_scope_keep(r); /* the output outlives the scope */
    remat_scope_end(s);
    return rc;
}

typedef enum { CK_NONE, CK_NONREENTRANT, CK_REENTRANT } ck_mode;
static const char *k_mode_name[] = {"none", "non-reentrant", "reentrant"};

static remat_tensor *teacher_targets(remat_tensor *x, int n_layers) {
    model t;
    model_init(&t, n_layers, 1000);
    bool prev = remat_no_grad_begin();
    remat_tensor *h = remat_retain(x), *y;
    for (int i = 0; i < n_layers; i++) {
        CHECK(block_fn(&t.blocks[i], &h, 1, &y, 1));
        remat_release(h);
        h = y;
    }
    CHECK(remat_linear(&y, h, t.w_out, t.b_out));
    remat_release(h);
    remat_grad_mode_restore(prev);
    model_free(&t);
    return y;
}

static void sgd(remat_tensor *p, double lr) {
    remat_tensor *g = remat_tensor_grad(p);
    if (g) CHECK(remat_add_(p, g, -lr));
    CHECK(remat_set_grad(p, NULL));
}

/* Forward + backward + SGD step; returns the loss. */
static double train_step(model *m, remat_tensor *x, remat_tensor *target, ck_mode mode, double lr) {
    remat_checkpoint_options o = {0};
    o.use_reentrant = mode == CK_REENTRANT ? REMAT_OPT_TRUE : REMAT_OPT_FALSE;
    remat_tensor *h = remat_retain(x), *y, *pred, *loss;
    for (int i = 0; i < m->n_layers; i++) {
        if (mode == CK_NONE) CHECK(block_fn(&m->blocks[i], &h, 1, &y, 1));
        else CHECK(remat_checkpoint(block_fn, &m->blocks[i], 1, &h, 1, &y, &o));
        remat_release(h); /* the graph keeps whatever backward needs */
        h = y;
    }
    CHECK(remat_linear(&pred, h, m->w_out, m->b_out));
    CHECK(remat_mse_loss(&loss, pred, target));
    remat_release(h);
    remat_release(pred);
    double v;
    CHECK(remat_item(loss, &v));
    CHECK(remat_backward_scalar(loss));
    remat_release(loss);
    bool prev = remat_no_grad_begin();
    for (int i = 0; i < m->n_layers; i++) {
        sgd(m->blocks[i].w1, lr);
        sgd(m->blocks[i].b1, lr);
        sgd(m->blocks[i].w2, lr);
        sgd(m->blocks[i].b2, lr);
    }
    sgd(m->w_out, lr);
    sgd(m->b_out, lr);
    remat_grad_mode_restore(prev);
    return v;
}

int main(int argc, char **argv) {
    int n_layers = argc > 1 ? atoi(argv[1]) : 12;
    int steps = argc > 2 ? atoi(argv[2]) : 20;
    if (n_layers < 1 || steps < 1) {
        fprintf(stderr, "usage: %s [layers >= 1] [steps >= 1]\n", argv[0]);
        return 2;
    }
    int64_t xs[] = {BATCH, DIM};
    remat_manual_seed(7);
    remat_tensor *x;
    CHECK(remat_rand_normal(&x, 2, xs, 0, 1, REMAT_F32, REMAT_DEVICE_CPU));
    /* The reentrant variant only produces gradients if an input of the
     * checkpoint requires grad (P's rule); the first block's input is the
     * data, so mark it. */
    CHECK(remat_set_requires_grad(x, true));
    remat_tensor *target = teacher_targets(x, n_layers);

    printf("residual MLP: %d blocks, batch %d, width %d, hidden %d (f32), %d SGD steps\n", n_layers,
           BATCH, DIM, HIDDEN, steps);
    double *losses[3];
    size_t peak[3];
    for (int mode = 0; mode < 3; mode++) {
        model m;
        model_init(&m, n_layers, 42); /* same start for every mode */
        losses[mode] = calloc((size_t)steps, sizeof(double));
        size_t base = remat_cpu_current_bytes();
        CHECK(remat_alloc_reset_peak(REMAT_DEVICE_CPU));
        printf("\ncheckpointing: %s\n", k_mode_name[mode]);
        for (int s = 0; s < steps; s++) {
            losses[mode][s] = train_step(&m, x, target, (ck_mode)mode, 0.05);
            if (s % 10 == 0 || s == steps - 1)
                printf("  step %3d  loss %.6f\n", s, losses[mode][s]);
        }
        peak[mode] = remat_cpu_peak_bytes() - base;
        model_free(&m);
    }
    printf("\n%-15s %14s %10s  %s\n", "checkpointing", "peak (bytes)", "vs none", "same losses");
    for (int mode = 0; mode < 3; mode++) {
        bool same = memcmp(losses[mode], losses[0], (size_t)steps * sizeof(double)) == 0;
        printf("%-15s %14zu %9.1f%%  %s\n", k_mode_name[mode], peak[mode],
               100.0 * (double)peak[mode] / (double)peak[0], same ? "yes" : "NO");
    }
    printf("(peak = allocator bytes above the parameters during training, gradients included)\n");
    for (int mode = 0; mode < 3; mode++) free(losses[mode]);
    remat_release(x);
    remat_release(target);
    return remat_live_tensors() == 0 ? 0 : 1;
}
