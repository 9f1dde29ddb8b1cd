/* tests/test_offload.c — remat_offload_saved_hooks (src/sac/offload.c) on the "fenced"
 * device (tests/support/fenced.h: memory the host cannot touch, like a GPU's): the saved
 * tensors leave the device, come back for backward, the next ones prefetched; gradients
 * are bitwise the same as without offload. Once with synchronous copies (no transfer ops:
 * the path of a device type that offers none), once with fake transfer ops that log every
 * call, standing in for cuda's side stream and events (src/backends/cuda/transfer.c). */
#include <string.h>

#include "internal.h"
#include "support/fenced.h"
#include "support/rt.h"

/* ---- fake transfer ops: synchronous copies, events that record what happened --------- */
typedef struct fake_event {
    int id;     /* order of the copy */
    bool h2d;   /* direction */
    int waited; /* stream_wait calls on it */
} fake_event;

enum { MAX_LOG = 256 };
static struct {
    int n_copies, n_h2d, n_d2h, n_waits, n_events_live;
    char log[MAX_LOG + 1]; /* 'D' (D2H), 'H' (H2D), 'W' (stream wait) */
    int n_log;
} g_fake;

static void log_c(char c) {
    if (g_fake.n_log < MAX_LOG) g_fake.log[g_fake.n_log++] = c;
}

static void *fake_host_alloc(size_t n) { return malloc(n); }
static void fake_host_free(void *p, size_t n) {
    (void)n;
    free(p);
}
static int fake_copy(int index, void *dst, const void *src, size_t n, remat_copy_kind kind,
                     void **event) {
    remat_device d = {rt_fenced_type(), index};
    int rc = kind == REMAT_COPY_DEVICE_TO_HOST ? rm_device_copy(REMAT_DEVICE_CPU, dst, d, src, n)
                                               : rm_device_copy(d, dst, REMAT_DEVICE_CPU, src, n);
    if (rc) return rc;
    fake_event *e = calloc(1, sizeof *e);
    e->id = g_fake.n_copies++;
    e->h2d = kind == REMAT_COPY_HOST_TO_DEVICE;
    if (e->h2d) g_fake.n_h2d++;
    else g_fake.n_d2h++;
    g_fake.n_events_live++;
    log_c(e->h2d ? 'H' : 'D');
    *event = e;
    return REMAT_OK;
}
static int fake_wait(int index, void *event) {
    (void)index;
    fake_event *e = event;
    cr_assert(e->h2d, "the compute stream waits only for copies back to the device");
    e->waited++;
    g_fake.n_waits++;
    log_c('W');
    return REMAT_OK;
}
static bool fake_done(void *event) {
    (void)event;
    return true;
}
static int fake_host_wait(void *event) {
    (void)event;
    return REMAT_OK;
}
static void fake_event_free(void *event) {
    g_fake.n_events_live--;
    free(event);
}
static const rm_transfer_ops k_fake = {
    .host_alloc = fake_host_alloc,
    .host_free = fake_host_free,
    .copy_async = fake_copy,
    .stream_wait = fake_wait,
    .done = fake_done,
    .host_wait = fake_host_wait,
    .event_free = fake_event_free,
};

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
    RT_OK(rm_transfer_register(type, with_ops ? &k_fake : NULL));
    memset(&g_fake, 0, sizeof g_fake);
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
        cr_assert_gt(g_fake.n_d2h, 0);
        cr_assert_eq(g_fake.n_h2d, g_fake.n_d2h, "each offloaded tensor came back once");
        cr_assert_eq(g_fake.n_waits, g_fake.n_h2d, "the compute stream waited for each");
        cr_assert_eq(g_fake.n_events_live, 0, "every event freed");
        /* backward's first fetch is on demand; after it, copies back run ahead: at some
         * point two H2D copies are in flight before the wait of the first */
        g_fake.log[g_fake.n_log < MAX_LOG ? g_fake.n_log : MAX_LOG - 1] = 0;
        const char *hh = strstr(g_fake.log, "HH");
        cr_assert(hh, "no prefetch in %.*s", g_fake.n_log, g_fake.log);
        /* every D2H precedes every H2D (forward, then backward) */
        const char *lastd = strrchr(g_fake.log, 'D'), *firsth = strchr(g_fake.log, 'H');
        cr_assert(lastd < firsth, "log %.*s", g_fake.n_log, g_fake.log);
    }
    model_free(&m);
    RT_OK(rm_transfer_register(type, NULL));
}

Test(offload, synchronous_copies_on_a_device_without_transfer_ops) { check_offload(false); }

Test(offload, transfer_ops_side_stream_events_and_prefetch) { check_offload(true); }
