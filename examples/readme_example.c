/* examples/readme_example.c — the README's checkpoint snippet, with a main
 * that builds three random blocks and runs one forward/backward. */
#include <remat/remat.h>
#include <stdio.h>

typedef struct {
    remat_tensor *w, *b;
} block_params;

/* One MLP block: gelu(x W^T + b). Writes a new reference to out[0]. */
static int block(void *ud, remat_tensor *const *in, int n_in, remat_tensor **out, int n_out) {
    (void)n_in, (void)n_out;
    block_params *p = ud;
    remat_tensor *h = NULL;
    int rc = remat_linear(&h, in[0], p->w, p->b);
    if (!rc) rc = remat_gelu(&out[0], h, REMAT_GELU_TANH);
    remat_release(h);
    return rc;
}

int forward_backward(remat_tensor *x, block_params *blocks, int n_blocks) {
    remat_checkpoint_options opts = {.use_reentrant = REMAT_OPT_FALSE};
    remat_tensor *h = remat_retain(x), *loss = NULL;
    int rc = REMAT_OK;
    for (int i = 0; i < n_blocks && rc == REMAT_OK; i++) {
        remat_tensor *next = NULL;
        rc = remat_checkpoint(block, &blocks[i], 1, &h, 1, &next, &opts);
        remat_release(h);
        h = next;
    }
    if (!rc) rc = remat_sum_all(&loss, h);
    if (!rc) rc = remat_backward_scalar(loss); /* recomputes each block once */
    if (rc) fprintf(stderr, "remat: %s\n", remat_last_error());
    remat_release(loss);
    remat_release(h);
    return rc;
}

int main(void) {
    int64_t xs[] = {4, 8}, ws[] = {8, 8}, bs[] = {8};
    block_params p[3] = {{0}};
    remat_tensor *x = NULL;
    int rc = remat_rand_normal(&x, 2, xs, 0, 1, REMAT_F32, REMAT_DEVICE_CPU);
    for (int i = 0; i < 3 && rc == REMAT_OK; i++) {
        rc = remat_rand_normal(&p[i].w, 2, ws, 0, 0.3, REMAT_F32, REMAT_DEVICE_CPU);
        if (!rc) rc = remat_zeros(&p[i].b, 1, bs, REMAT_F32, REMAT_DEVICE_CPU);
        if (!rc) rc = remat_set_requires_grad(p[i].w, true);
        if (!rc) rc = remat_set_requires_grad(p[i].b, true);
    }
    if (!rc) rc = forward_backward(x, p, 3);
    if (!rc) {
        double g;
        remat_item_at(remat_tensor_grad(p[0].w), 0, &g);
        printf("ok: d loss / d W0[0,0] = %g\n", g);
    }
    for (int i = 0; i < 3; i++) {
        remat_release(p[i].w);
        remat_release(p[i].b);
    }
    remat_release(x);
    return rc == REMAT_OK ? 0 : 1;
}
