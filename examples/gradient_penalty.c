/*
 * examples/gradient_penalty.c — a WGAN-GP critic step (Gulrajani et al.,
 * "Improved Training of Wasserstein GANs", 2017) with a checkpointed
 * critic: double backward (create_graph) through remat_checkpoint.
 *
 * The critic C is an MLP, D -> H -> H -> 1 with tanh-GELU blocks, each
 * block run through a non-reentrant remat_checkpoint. One critic step:
 *
 *   x_hat   = eps * x_real + (1 - eps) * x_fake        eps ~ U(0, 1) per row
 *   g       = dC(x_hat)/dx_hat                         remat_grad_ex, create_graph
 *   penalty = mean((||g||_2 - 1)^2)                    over the rows
 *   loss    = mean(C(x_fake)) - mean(C(x_real)) + 10 * penalty
 *   backward(loss), then SGD on the critic's weights
 *
 * The penalty's gradient with respect to the weights is a gradient of a
 * gradient: its backward runs the critic's backward graph backwards, and
 * each checkpointed block is recomputed once per pass. The same steps run
 * with and without checkpointing; the losses must be bitwise equal (exit 1
 * otherwise). Prints the loss per step and the allocator's peak bytes of a
 * step above the bytes live before it (and, when run with
 * build/libremat_heap_peak.so preloaded, the C heap's growth, measured as
 * bench/pytorch/gradient_penalty.py measures PyTorch's).
 *
 *   ./example_gradient_penalty [steps] [batch]
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "remat/remat.h"

#define D 32
#define H 256
#define N_BLOCKS 3
#define LAMBDA 10.0
#define LR 1e-3

#define CHECK(expr)                                                                                \
    do {                                                                                           \
        int rc_ = (expr);                                                                          \
        if (rc_) {                                                                                 \
            fprintf(stderr, "%s:%d: %s failed: %s\n", __FILE__, __LINE__, #expr,                   \
                    remat_last_error());                                                           \
            exit(1);                                                                               \
        }                                                                                          \
    } while (0)

typedef struct critic {
    remat_tensor *w[N_BLOCKS], *b[N_BLOCKS]; /* blocks: D->H, H->H, H->H */
    remat_tensor *w_out, *b_out;             /* H -> 1 */
    bool checkpoint;
} critic;

static remat_tensor *param(int ndim, const int64_t *shape, double bound) {
    remat_tensor *t = NULL;
    CHECK(remat_rand_uniform(&t, ndim, shape, -bound, bound, REMAT_F32, REMAT_DEVICE_CPU));
    CHECK(remat_set_requires_grad(t, true));
    return t;
}

static void critic_init(critic *c, uint64_t seed) {
    remat_manual_seed(seed);
    for (int i = 0; i < N_BLOCKS; i++) {
        const int64_t ws[2] = {H, i == 0 ? D : H}, bs[1] = {H};
        c->w[i] = param(2, ws, 1.0 / (i == 0 ? 5.66 : 16.0));
        c->b[i] = param(1, bs, 0.05);
    }
    const int64_t ws[2] = {1, H}, bs[1] = {1};
    c->w_out = param(2, ws, 1.0 / 16.0);
    c->b_out = param(1, bs, 0.05);
}

static void critic_free(critic *c) {
    for (int i = 0; i < N_BLOCKS; i++) remat_release(c->w[i]), remat_release(c->b[i]);
    remat_release(c->w_out), remat_release(c->b_out);
}

typedef struct block_arg {
    critic *c;
    int i;
} block_arg;

/* One block: gelu(x W^T + b). */
static remat_status block_fn(void *ud, remat_tensor *const *in, int n_in, remat_tensor **out,
                             int n_out) {
    (void)n_in, (void)n_out;
    block_arg *a = ud;
    remat_tensor *l = NULL;
    int rc = remat_linear(&l, in[0], a->c->w[a->i], a->c->b[a->i]);
    if (!rc) rc = remat_gelu(&out[0], l, REMAT_GELU_TANH);
    remat_release(l);
    return rc;
}

/* C(x): (B, D) -> (B, 1). */
static void critic_forward(critic *c, remat_tensor *x, remat_tensor **out) {
    static block_arg args[N_BLOCKS];
    remat_tensor *h = remat_retain(x);
    for (int i = 0; i < N_BLOCKS; i++) {
        args[i] = (block_arg){c, i};
        remat_tensor *nx = NULL;
        if (c->checkpoint) {
            remat_checkpoint_options o = {.use_reentrant = REMAT_OPT_FALSE};
            CHECK(remat_checkpoint(block_fn, &args[i], 1, &h, 1, &nx, &o));
        } else {
            CHECK(block_fn(&args[i], &h, 1, &nx, 1));
        }
        remat_release(h);
        h = nx;
    }
    CHECK(remat_linear(out, h, c->w_out, c->b_out));
    remat_release(h);
}

static remat_tensor *mean_of(remat_tensor *t) {
    remat_tensor *m = NULL;
    CHECK(remat_mean(&m, t, 0, NULL, false));
    return m;
}

/* One critic step on (x_real, x_fake, eps); returns the loss. */
static double critic_step(critic *c, remat_tensor *x_real, remat_tensor *x_fake,
                          remat_tensor *eps) {
    enum { N_T = 24 };
    remat_tensor *t[N_T] = {NULL}; /* the step's tensors, released at its end */
    remat_tensor **a = &t[0], **one_m = &t[1], **b = &t[2], **x_hat = &t[3], **c_hat = &t[4],
                 **s = &t[5], **g = &t[6], **g2 = &t[7], **n2 = &t[8], **n2e = &t[9],
                 **norm = &t[10], **d = &t[11], **d2 = &t[12], **pen = &t[13], **pen_l = &t[14],
                 **c_real = &t[15], **c_fake = &t[16], **mr = &t[17], **mf = &t[18], **w = &t[19],
                 **loss = &t[20];
    CHECK(remat_mul(a, eps, x_real));
    CHECK(remat_rsub_scalar(one_m, eps, 1.0));
    CHECK(remat_mul(b, *one_m, x_fake));
    CHECK(remat_add(x_hat, *a, *b));
    CHECK(remat_set_requires_grad(*x_hat, true));

    critic_forward(c, *x_hat, c_hat);
    CHECK(remat_sum_all(s, *c_hat)); /* rows are independent: its gradient is per row */
    const remat_backward_options cg = {.create_graph = true};
    CHECK(remat_grad_ex(1, s, NULL, 1, x_hat, &cg, g));
    /* penalty = mean((sqrt(sum(g^2, 1) + 1e-12) - 1)^2) */
    const int dim1 = 1;
    CHECK(remat_mul(g2, *g, *g));
    CHECK(remat_sum(n2, *g2, 1, &dim1, false));
    CHECK(remat_add_scalar(n2e, *n2, 1e-12));
    CHECK(remat_sqrt(norm, *n2e));
    CHECK(remat_sub_scalar(d, *norm, 1.0));
    CHECK(remat_mul(d2, *d, *d));
    *pen = mean_of(*d2);
    CHECK(remat_mul_scalar(pen_l, *pen, LAMBDA));

    critic_forward(c, x_real, c_real);
    critic_forward(c, x_fake, c_fake);
    *mr = mean_of(*c_real);
    *mf = mean_of(*c_fake);
    CHECK(remat_sub(w, *mf, *mr));
    CHECK(remat_add(loss, *w, *pen_l));
    double value = *(const float *)remat_data(*loss);
    CHECK(remat_backward_scalar(*loss)); /* grad of grad into the weights' .grad */
    for (int i = 0; i < N_T; i++) remat_release(t[i]);

    /* SGD, then clear the gradients */
    bool prev = remat_no_grad_begin();
    remat_tensor *params[2 * N_BLOCKS + 2];
    for (int i = 0; i < N_BLOCKS; i++) params[2 * i] = c->w[i], params[2 * i + 1] = c->b[i];
    params[2 * N_BLOCKS] = c->w_out, params[2 * N_BLOCKS + 1] = c->b_out;
    for (int i = 0; i < 2 * N_BLOCKS + 2; i++) {
        remat_tensor *gr = remat_tensor_grad(params[i]);
        if (gr) CHECK(remat_add_(params[i], gr, -LR));
        CHECK(remat_set_grad(params[i], NULL));
    }
    remat_grad_mode_restore(prev);
    return value;
}

typedef long long (*heap_fn)(void);

int main(int argc, char **argv) {
    int steps = argc > 1 ? atoi(argv[1]) : 3;
    int64_t batch = argc > 2 ? atoll(argv[2]) : 64;
    if (steps < 1 || batch < 1) {
        fprintf(stderr, "usage: %s [steps >= 1] [batch >= 1]\n", argv[0]);
        return 2;
    }
    /* optional: the C-heap counters of build/libremat_heap_peak.so, when preloaded */
    heap_fn heap_reset = (heap_fn)(uintptr_t)dlsym(RTLD_DEFAULT, "remat_heap_peak_reset");
    heap_fn heap_peak = (heap_fn)(uintptr_t)dlsym(RTLD_DEFAULT, "remat_heap_peak_bytes");
    double losses[2][64];
    if (steps > 64) steps = 64;
    for (int mode = 0; mode < 2; mode++) {
        critic c = {.checkpoint = mode == 1};
        critic_init(&c, 42);
        remat_manual_seed(7);
        printf("%s critic:\n", mode ? "checkpointed" : "plain");
        for (int s = 0; s < steps; s++) {
            const int64_t xs[2] = {batch, D}, es[2] = {batch, 1};
            remat_tensor *xr = NULL, *xf = NULL, *eps = NULL;
            CHECK(remat_rand_normal(&xr, 2, xs, 1.0, 0.5, REMAT_F32, REMAT_DEVICE_CPU));
            CHECK(remat_rand_normal(&xf, 2, xs, 0.0, 1.0, REMAT_F32, REMAT_DEVICE_CPU));
            CHECK(remat_rand_uniform(&eps, 2, es, 0.0, 1.0, REMAT_F32, REMAT_DEVICE_CPU));
            size_t base = remat_cpu_current_bytes();
            CHECK(remat_alloc_reset_peak(REMAT_DEVICE_CPU));
            long long heap_base = heap_reset ? heap_reset() : 0;
            losses[mode][s] = critic_step(&c, xr, xf, eps);
            remat_alloc_stats st;
            CHECK(remat_alloc_stats_get(REMAT_DEVICE_CPU, &st));
            printf("  step %d  loss %.6f  peak %zu bytes above the step's start", s,
                   losses[mode][s], st.peak_bytes - base);
            if (heap_peak) printf("  heap+ %lld bytes", heap_peak() - heap_base);
            printf("\n");
            remat_release(xr), remat_release(xf), remat_release(eps);
        }
        critic_free(&c);
    }
    for (int s = 0; s < steps; s++)
        if (memcmp(&losses[0][s], &losses[1][s], sizeof(double)) != 0) {
            fprintf(stderr, "step %d: checkpointed loss %.9g differs from plain %.9g\n", s,
                    losses[1][s], losses[0][s]);
            return 1;
        }
    printf("checkpointed and plain losses are bitwise equal\n");
    return 0;
}
