/* tests/consumer/main.c — a program outside the source tree that uses an
 * installed remat: a linear model trained with AdamW under a checkpoint
 * (tests/consumer/run.sh builds it with pkg-config and with find_package).
 * Prints "consumer ok" and exits 0 when the loss fell. */
#include <remat/remat.h>
#include <stdio.h>

typedef struct {
    remat_tensor *w;
} ctx;

/* A name remat uses inside (src/autograd): the user's own rm_sum_to links
 * beside libremat.a's and libremat.so's, whose internal names are local. */
int rm_sum_to(int a, int b);
int rm_sum_to(int a, int b) { return a + b; }

static remat_status block(void *ud, remat_tensor *const *in, int n_in, remat_tensor **out,
                          int n_out) {
    (void)n_in;
    (void)n_out;
    remat_tensor *h = NULL;
    int rc = remat_linear(&h, in[0], ((ctx *)ud)->w, NULL);
    if (!rc) rc = remat_gelu(&out[0], h, REMAT_GELU_ERF);
    remat_release(h);
    return rc;
}

int main(void) {
    if (rm_sum_to(2, 3) != 5) return 1;
    int64_t xs[2] = {16, 8}, ws[2] = {8, 8};
    remat_tensor *x = NULL, *t = NULL, *w = NULL;
    remat_manual_seed(1);
    int rc = REMAT_VERSION_CHECK(); /* headers and library agree */
    if (!rc) rc = remat_rand_normal(&x, 2, xs, 0, 1, REMAT_F32, REMAT_DEVICE_CPU);
    if (!rc) rc = remat_rand_normal(&t, 2, xs, 0, 0.5, REMAT_F32, REMAT_DEVICE_CPU);
    if (!rc) rc = remat_rand_normal(&w, 2, ws, 0, 0.3, REMAT_F32, REMAT_DEVICE_CPU);
    if (!rc) rc = remat_set_requires_grad(w, true);
    remat_optim_options o;
    remat_optimizer *opt = NULL;
    if (!rc) rc = remat_optim_options_init(&o, REMAT_OPTIM_ADAMW);
    o.lr = 1e-2;
    if (!rc) rc = remat_optim_create(&opt, &o, &w, 1);
    ctx c = {w};
    double first = 0, last = 0;
    for (int step = 0; !rc && step < 50; step++) {
        remat_tensor *y[1] = {NULL}, *loss = NULL;
        remat_checkpoint_options co = {0};
        co.use_reentrant = REMAT_OPT_FALSE;
        rc = remat_checkpoint(block, &c, 1, &x, 1, y, &co);
        if (!rc) rc = remat_mse_loss(&loss, y[0], t);
        if (!rc) rc = remat_item(loss, step ? &last : &first);
        if (!rc) rc = remat_backward_scalar(loss);
        if (!rc) rc = remat_optim_step(opt, NULL);
        remat_release(loss);
        remat_release(y[0]);
    }
    remat_optim_free(opt);
    remat_release(x);
    remat_release(t);
    remat_release(w);
    if (rc) {
        fprintf(stderr, "consumer: %s\n", remat_last_error());
        return 1;
    }
    printf("consumer ok: remat %s, loss %.4f -> %.4f\n", remat_version_string(), first, last);
    return last < first ? 0 : 1;
}
