/*
 * examples/hvp.c — a Hessian-vector product by double backward
 * (P: torch.autograd.functional.hvp / the "double backward trick").
 *
 * For the loss L(theta) of a small MLP (f64, tanh, mean squared error) and
 * a direction v (one tensor per parameter):
 *
 *   g  = dL/dtheta                     remat_grad_ex with create_graph
 *   Hv = d(sum_i <g_i, v_i>)/dtheta    an ordinary remat_grad of that scalar
 *
 * Hv costs about two backward passes and never forms H. The program checks
 * it against central differences of the gradient,
 * (g(theta + h v) - g(theta - h v)) / 2h, and exits 1 if the relative
 * error exceeds 1e-6. Run with a checkpointed hidden layer as well: the
 * result must be bitwise the same.
 *
 *   ./example_hvp
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "remat/remat.h"

#define BATCH 16
#define IN 8
#define HID 32
#define N_P 4 /* w1, b1, w2, b2 */

#define CHECK(expr)                                                                                \
    do {                                                                                           \
        int rc_ = (expr);                                                                          \
        if (rc_) {                                                                                 \
            fprintf(stderr, "%s:%d: %s failed: %s\n", __FILE__, __LINE__, #expr,                   \
                    remat_last_error());                                                           \
            exit(1);                                                                               \
        }                                                                                          \
    } while (0)

static remat_tensor *theta[N_P], *x_data, *y_data;

static remat_tensor *randn(int nd, const int64_t *shape, double std) {
    remat_tensor *t = NULL;
    CHECK(remat_rand_normal(&t, nd, shape, 0.0, std, REMAT_F64, REMAT_DEVICE_CPU));
    return t;
}

/* the hidden layer tanh(x W1^T + b1) */
static remat_status hidden(void *ud, remat_tensor *const *in, int n_in, remat_tensor **out,
                           int n_out) {
    (void)ud, (void)n_in, (void)n_out;
    remat_tensor *l = NULL;
    int rc = remat_linear(&l, in[0], theta[0], theta[1]);
    if (!rc) rc = remat_tanh(&out[0], l);
    remat_release(l);
    return rc;
}

/* L = mse(tanh(x W1^T + b1) W2^T + b2, y) */
static remat_tensor *loss_of(bool checkpoint) {
    remat_tensor *h = NULL, *p = NULL, *l = NULL;
    if (checkpoint) {
        remat_checkpoint_options o = {.use_reentrant = REMAT_OPT_FALSE};
        CHECK(remat_checkpoint(hidden, NULL, 1, &x_data, 1, &h, &o));
    } else {
        CHECK(hidden(NULL, &x_data, 1, &h, 1));
    }
    CHECK(remat_linear(&p, h, theta[2], theta[3]));
    CHECK(remat_mse_loss(&l, p, y_data));
    remat_release(h), remat_release(p);
    return l;
}

/* g = dL/dtheta, with or without a graph */
static void gradient(bool create_graph, bool checkpoint, remat_tensor **g) {
    remat_tensor *l = loss_of(checkpoint);
    const remat_backward_options o = {.create_graph = create_graph};
    CHECK(remat_grad_ex(1, &l, NULL, N_P, theta, &o, g));
    remat_release(l);
}

static void hvp(remat_tensor *const *v, bool checkpoint, remat_tensor **hv) {
    remat_tensor *g[N_P], *dot = NULL;
    gradient(true, checkpoint, g);
    for (int i = 0; i < N_P; i++) {
        remat_tensor *p = NULL, *s = NULL, *sum = NULL;
        CHECK(remat_mul(&p, g[i], v[i]));
        CHECK(remat_sum_all(&s, p));
        if (dot) CHECK(remat_add(&sum, dot, s));
        else sum = remat_retain(s);
        remat_release(p), remat_release(s), remat_release(dot), remat_release(g[i]);
        dot = sum;
    }
    CHECK(remat_grad(1, &dot, NULL, N_P, theta, false, false, hv));
    remat_release(dot);
}

/* theta += s * v (no graph) */
static void shift(remat_tensor *const *v, double s) {
    bool prev = remat_no_grad_begin();
    for (int i = 0; i < N_P; i++) CHECK(remat_add_(theta[i], v[i], s));
    remat_grad_mode_restore(prev);
}

static double value(remat_tensor *t, int64_t k) {
    remat_tensor *c = NULL;
    CHECK(remat_contiguous(&c, t));
    double v = ((const double *)remat_data(c))[k];
    remat_release(c);
    return v;
}

int main(void) {
    remat_manual_seed(3);
    const int64_t s_w1[2] = {HID, IN}, s_b1[1] = {HID}, s_w2[2] = {1, HID}, s_b2[1] = {1};
    const int64_t *shapes[N_P] = {s_w1, s_b1, s_w2, s_b2};
    const int nds[N_P] = {2, 1, 2, 1};
    remat_tensor *v[N_P];
    for (int i = 0; i < N_P; i++) {
        theta[i] = randn(nds[i], shapes[i], 0.4);
        CHECK(remat_set_requires_grad(theta[i], true));
        v[i] = randn(nds[i], shapes[i], 1.0);
    }
    const int64_t xs[2] = {BATCH, IN}, ys[2] = {BATCH, 1};
    x_data = randn(2, xs, 1.0);
    y_data = randn(2, ys, 1.0);

    remat_tensor *hv[N_P], *hv_ck[N_P], *gp[N_P], *gm[N_P];
    hvp(v, false, hv);
    hvp(v, true, hv_ck);
    const double h = 1e-5;
    shift(v, h);
    gradient(false, false, gp);
    shift(v, -2 * h);
    gradient(false, false, gm);
    shift(v, h);

    double err = 0, scale = 0;
    bool same = true;
    for (int i = 0; i < N_P; i++) {
        for (int64_t k = 0; k < remat_numel(hv[i]); k++) {
            double n = (value(gp[i], k) - value(gm[i], k)) / (2 * h), an = value(hv[i], k);
            err = fmax(err, fabs(an - n));
            scale = fmax(scale, fabs(n));
            same &= value(hv_ck[i], k) == an;
        }
    }
    double rel = err / (scale > 0 ? scale : 1);
    printf("Hessian-vector product of a %d-parameter MLP loss: max |Hv - finite differences| = "
           "%.3g (relative %.3g)\n",
           (int)(HID * IN + HID + HID + 1), err, rel);
    printf("with a checkpointed hidden layer: %s\n", same ? "bitwise the same" : "DIFFERENT");
    for (int i = 0; i < N_P; i++) {
        remat_release(theta[i]), remat_release(v[i]), remat_release(hv[i]);
        remat_release(hv_ck[i]), remat_release(gp[i]), remat_release(gm[i]);
    }
    remat_release(x_data), remat_release(y_data);
    return rel <= 1e-6 && same ? 0 : 1;
}
