/* tests/test_offload.c — remat_offload_saved_hooks (src/sac/offload.c) on the "fenced"
 * device (tests/support/fenced.h: memory the host cannot touch, like a GPU's): the saved
 * tensors leave the device, come back for backward, the next ones prefetched; gradients
 * are bitwise the same as without offload. Once with synchronous copies (no transfer ops:
 * the path of a device type that offers none), once with transfer ops that log every call,
 * standing in for cuda's side stream and events (tests/support/transfer_log.h). */
#include <string.h>

#include "core/core.h"
#include "support/fenced.h"
#include "support/rt.h"
#include "support/transfer_log.h"

/* ---- the model: a chain of blocks, each linear -> gelu -> linear, residual ----------- */
enum { BLOCKS = 4, WIDTH = 24, ROWS = 16 };

typedef struct model {
    remat_tensor *w1[BLOCKS], *w2[BLOCKS], *x;
} model;

static void model_make(model *m, remat_device d) {
    int64_t sw[] = {WIDTH, WIDTH}, sx[] = {ROWS, WIDTH};
    remat_tensor *t;
    for (int b = 0; b < BLOCKS; b++) {
        t = rt_rand(2, sw, REMAT_F64, -0.3, 0.3, 10 + (unsigned)b);
        RT_OK(remat_to_device(&m->w1[b], t, d));
        remat_release(t);
        t = rt_rand(2, sw, REMAT_F64, -0.3, 0.3, 20 + (unsigned)b);
        RT_OK(remat_to_device(&m->w2[b], t, d));
        remat_release(t);
        RT_OK(remat_set_requires_grad(m->w1[b], true));
        RT_OK(remat_set_requires_grad(m->w2[b], true));
    }
    t = rt_rand(2, sx, REMAT_F64, -1, 1, 3);
    RT_OK(remat_to_device(&m->x, t, d));
    remat_release(t);
}

static void model_free(model *m) {
    for (int b = 0; b < BLOCKS; b++) remat_release(m->w1[b]), remat_release(m->w2[b]);
    remat_release(m->x);
}

static remat_tensor *forward(model *m) {
    remat_tensor *h = remat_retain(m->x);
    for (int b = 0; b < BLOCKS; b++) {
        remat_tensor *a = NULL, *g = NULL, *c = NULL, *r = NULL;
        RT_OK(remat_linear(&a, h, m->w1[b], NULL));
        RT_OK(remat_gelu(&g, a, REMAT_GELU_TANH));
        RT_OK(remat_linear(&c, g, m->w2[b], NULL));
        RT_OK(remat_add(&r, h, c));
        remat_release(a), remat_release(g), remat_release(c), remat_release(h);
        h = r;
    }
    remat_tensor *loss = NULL;
    RT_OK(remat_sum_all(&loss, h));
    remat_release(h);
    return loss;
}

static size_t device_bytes(remat_device d) {
    remat_alloc_stats s;
    RT_OK(remat_alloc_stats_get(d, &s));
    return s.current_bytes;
}

/* One forward and backward; the gradients of the weights into g (new references); what
 * the forward added to the device's bytes into *fwd_bytes. */
static void step(model *m, bool offload, remat_tensor **g, size_t *fwd_bytes) {
    remat_device d = remat_tensor_device(m->x);
    size_t before = device_bytes(d);
    remat_saved_hooks hk;
    remat_offload_saved_hooks(&hk);
    if (offload) RT_OK(remat_saved_hooks_push(&hk));
    remat_tensor *loss = forward(m);
    if (offload) RT_OK(remat_saved_hooks_pop());
    *fwd_bytes = device_bytes(d) - before;
    RT_OK(remat_backward(1, &loss, NULL, false, 0, NULL));
    remat_release(loss);
    for (int b = 0; b < BLOCKS; b++) {
        g[2 * b] = remat_retain(remat_tensor_grad(m->w1[b]));
        g[2 * b + 1] = remat_retain(remat_tensor_grad(m->w2[b]));
        RT_OK(remat_set_grad(m->w1[b], NULL));
        RT_OK(remat_set_grad(m->w2[b], NULL));
    }
}

static void check_offload(bool with_ops) {
    int type = rt_fenced_type();
    cr_assert_gt(type, 0);
    remat_device d = {type, 0};
    rt_transfer_log_register(with_ops, 0);
    model m;
    model_make(&m, d);
    remat_tensor *plain[2 * BLOCKS], *off[2 * BLOCKS];
    size_t bytes_plain, bytes_off;
    size_t cpu0 = remat_cpu_current_bytes();
    step(&m, false, plain, &bytes_plain);
    step(&m, true, off, &bytes_off);
    for (int i = 0; i < 2 * BLOCKS; i++) {
        cr_assert_eq(remat_tensor_device(off[i]).type, type);
        cr_assert(rt_bitwise_equal(plain[i], off[i]), "gradient %d differs with offload", i);
        remat_release(plain[i]), remat_release(off[i]);
    }
    /* every block saves its input (x itself for the first: a leaf that stays), the first
     * linear's output (gelu's input) and gelu's output: all of them left the device, and
     * nothing but the loss (a scalar) stayed */
    size_t saved = (size_t)(3 * BLOCKS - 1) * ROWS * WIDTH * sizeof(double);
    cr_assert_geq(bytes_plain, saved, "forward kept %zu bytes on the device", bytes_plain);
    cr_assert_eq(bytes_off, sizeof(double),
                 "forward with offload kept %zu bytes on the device (plain: %zu)", bytes_off,
                 bytes_plain);
    cr_assert_eq(remat_cpu_current_bytes(), cpu0, "host copies freed with the graph");
    if (with_ops) {
        cr_assert_gt(rt_xfer.n_d2h, 0);
        cr_assert_eq(rt_xfer.n_h2d, rt_xfer.n_d2h, "each offloaded tensor came back once");
        cr_assert_eq(rt_xfer.n_waits, rt_xfer.n_h2d, "the compute stream waited for each");
        cr_assert_eq(rt_xfer.n_events_live, 0, "every event freed");
        cr_assert_eq(rt_xfer.n_host_live, 0, "every pinned buffer freed");
        /* backward's first fetch is on demand; after it, copies back run ahead: at some
         * point two H2D copies are in flight before the wait of the first */
        cr_assert(strstr(rt_xfer.log, "HH"), "no prefetch in %s", rt_xfer.log);
        /* every D2H precedes every H2D (forward, then backward) */
        const char *lastd = strrchr(rt_xfer.log, 'D'), *firsth = strchr(rt_xfer.log, 'H');
        cr_assert(lastd < firsth, "log %s", rt_xfer.log);
    }
    model_free(&m);
    rt_transfer_log_register(false, 0);
}

Test(offload, synchronous_copies_on_a_device_without_transfer_ops) { check_offload(false); }

Test(offload, transfer_ops_side_stream_events_and_prefetch) { check_offload(true); }
