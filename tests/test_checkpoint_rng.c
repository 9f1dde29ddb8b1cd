/* tests/test_checkpoint_rng.c — RNG juggling across device types (PyTorch:
 * _infer_device_type, get_device_states, DefaultDeviceType): the device
 * type is inferred from the tensor inputs (cpu ignored; several types →
 * warning; cuda wins, else the first seen; none → the default type), the
 * generators of that type's input devices and of cpu are restored for the
 * recomputation, and a device type initialised inside the forward is an
 * error while preserving RNG state. Uses tests/support's "testdev" and
 * registers a fake host-memory "cuda" (in place of the real one of a build
 * with CUDA) and "otherdev". */
#include <stdlib.h>
#include <string.h>

#include "support/rt.h"

/* ---- fake host-memory device types ----------------------------------------------------------- */
static void *h_alloc(void *ud, int index, size_t n) {
    (void)ud;
    (void)index;
    return aligned_alloc(64, (n + 63) & ~(size_t)63);
}
static void h_free(void *ud, int index, void *p, size_t n) {
    (void)ud;
    (void)index;
    (void)n;
    free(p);
}
static int h_copy(void *ud, int index, void *dst, const void *src, size_t n, remat_copy_kind k) {
    (void)ud;
    (void)index;
    (void)k;
    memmove(dst, src, n);
    return REMAT_OK;
}
static int h_count(void *ud) {
    (void)ud;
    return 1;
}
static int register_fake(const char *name) {
    /* a build with CUDA registers the real "cuda" type at start-up: these
     * tests want a host-memory stand-in under that name */
    int real = remat_device_type_id(name);
    if (real > 0) RT_OK(remat_unregister_device_type(real));
    remat_device_type_def d = {0};
    d.name = name;
    d.host_addressable = true;
    d.alloc = h_alloc;
    d.free = h_free;
    d.copy = h_copy;
    d.device_count = h_count;
    int id = -1;
    RT_OK(remat_register_device_type(&d, &id));
    return id;
}

/* ---- a function that records the random numbers it draws ---------------------------------------- */
#define MAX_DEV 4
typedef struct drawer {
    int calls;
    int n_dev;
    remat_device dev[MAX_DEV]; /* devices to draw one number from */
    double draws[3][MAX_DEV];  /* [call][device] */
} drawer;

/* inputs: x (cpu, requires grad), then any number of device tensors
 * (only their device matters). out = exp(x). */
static int draw_fn(void *ud, remat_tensor *const *in, int n_in, remat_tensor **out, int n_out) {
    drawer *d = ud;
    (void)n_in;
    (void)n_out;
    int call = d->calls++;
    for (int k = 0; k < d->n_dev; k++) {
        int64_t one = 1;
        remat_tensor *r = NULL;
        int rc = remat_rand_uniform(&r, 1, &one, 0, 1, REMAT_F64, d->dev[k]);
        if (rc) return rc;
        if (call < 3) RT_OK(remat_item(r, &d->draws[call][k]));
        remat_release(r);
    }
    return remat_exp(&out[0], in[0]);
}

static remat_tensor *on(remat_device dev) {
    int64_t sh[] = {2};
    remat_tensor *t;
    RT_OK(remat_zeros(&t, 1, sh, REMAT_F32, dev));
    return t;
}

/* Checkpoints draw_fn over (x, extra...) and runs backward; returns the
 * status of the checkpoint call. */
static int run(drawer *d, int n_extra, remat_tensor **extra, remat_checkpoint_options o) {
    int64_t sh[] = {3};
    remat_tensor *x = rt_rand(1, sh, REMAT_F64, -1, 1, 1);
    RT_OK(remat_set_requires_grad(x, true));
    remat_tensor *in[1 + MAX_DEV] = {x};
    for (int i = 0; i < n_extra; i++) in[1 + i] = extra[i];
    remat_tensor *y = NULL;
    int rc = remat_checkpoint(draw_fn, d, 1 + n_extra, in, 1, &y, &o);
    if (rc == REMAT_OK) {
        remat_tensor *l;
        RT_OK(remat_sum_all(&l, y));
        RT_OK(remat_backward_scalar(l));
        remat_release(l);
        remat_release(y);
        cr_assert_eq(d->calls, 2);
    }
    remat_release(x);
    return rc;
}

static bool same(const drawer *d, int k) { return d->draws[0][k] == d->draws[1][k]; }

static remat_checkpoint_options mode_opts(int mode) {
    remat_checkpoint_options o = {0};
    o.use_reentrant = mode ? REMAT_OPT_TRUE : REMAT_OPT_FALSE;
    return o;
}

/* ---- one non-cpu device type ----------------------------------------------------------------- */
Test(checkpoint_rng, input_device_type_generators_restored) {
    int td = rt_testdev_register();
    remat_tensor *t0 = on((remat_device){td, 0}), *t1 = on((remat_device){td, 1});
    for (int mode = 0; mode < 2; mode++) {
        for (int preserve = 0; preserve < 2; preserve++) {
            remat_manual_seed(5);
            drawer d = {0, 3, {REMAT_DEVICE_CPU, {td, 0}, {td, 1}}, {{0}}};
            remat_checkpoint_options o = mode_opts(mode);
            o.preserve_rng_state = preserve ? REMAT_OPT_DEFAULT : REMAT_OPT_FALSE;
            remat_tensor *extra[2] = {t0, t1};
            RT_OK(run(&d, 2, extra, o));
            for (int k = 0; k < 3; k++)
                cr_assert_eq(same(&d, k), preserve == 1,
                             "mode %d preserve %d: device %d draws %g vs %g", mode, preserve, k,
                             d.draws[0][k], d.draws[1][k]);
        }
    }
    /* only the input devices are stashed: testdev:1 alone as input leaves
     * testdev:0 unrestored */
    remat_manual_seed(5);
    drawer d = {0, 2, {{td, 0}, {td, 1}}, {{0}}};
    RT_OK(run(&d, 1, &t1, mode_opts(0)));
    cr_assert_not(same(&d, 0));
    cr_assert(same(&d, 1));
    remat_release(t0);
    remat_release(t1);
    cr_assert_eq(remat_live_tensors(), 0);
}

Test(checkpoint_rng, cpu_only_inputs_use_the_default_device_type) {
    int td = rt_testdev_register();
    cr_assert_str_eq(remat_get_default_device_type(), "cuda");
    rt_capture_warnings();
    remat_manual_seed(5);
    drawer d = {0, 2, {REMAT_DEVICE_CPU, {td, 0}}, {{0}}};
    RT_OK(run(&d, 0, NULL, mode_opts(0)));
    cr_assert(same(&d, 0), "cpu is always restored");
    cr_assert_not(same(&d, 1), "testdev is not the default type: not restored");
    cr_assert_eq(rt_warning_count(), 0, "%s", rt_warnings());
    /* as in PyTorch, the default type only names the type; with no input on it
     * there are no devices whose state to stash */
    RT_OK(remat_set_default_device_type("testdev"));
    cr_assert_str_eq(remat_get_default_device_type(), "testdev");
    remat_manual_seed(5);
    drawer d2 = {0, 2, {REMAT_DEVICE_CPU, {td, 0}}, {{0}}};
    RT_OK(run(&d2, 0, NULL, mode_opts(0)));
    cr_assert(same(&d2, 0));
    cr_assert_not(same(&d2, 1));
    /* setter errors and reset */
    RT_FAILS(remat_set_default_device_type(""), REMAT_EINVAL, "remat_set_default_device_type");
    RT_FAILS(remat_set_default_device_type("a-device-type-name-that-is-way-too-long"), REMAT_EINVAL,
             "31");
    RT_OK(remat_set_default_device_type(NULL));
    cr_assert_str_eq(remat_get_default_device_type(), "cuda");
    cr_assert_eq(remat_live_tensors(), 0);
}

/* ---- several device types ---------------------------------------------------------------------- */
Test(checkpoint_rng, several_types_warn_and_cuda_wins) {
    int td = rt_testdev_register();
    int cu = register_fake("cuda");
    remat_tensor *t = on((remat_device){td, 1}), *c = on((remat_device){cu, 0});
    for (int mode = 0; mode < 2; mode++) {
        rt_capture_warnings();
        remat_manual_seed(9);
        drawer d = {0, 3, {REMAT_DEVICE_CPU, {td, 1}, {cu, 0}}, {{0}}};
        remat_tensor *extra[2] = {t, c}; /* testdev seen first */
        RT_OK(run(&d, 2, extra, mode_opts(mode)));
        cr_assert(strstr(rt_warnings(), "at least two device types"), "%s", rt_warnings());
        cr_assert(strstr(rt_warnings(), "Device types: ['cuda', 'testdev'] first device type: "
                                        "testdev"),
                  "%s", rt_warnings());
        cr_assert(same(&d, 0));
        cr_assert(same(&d, 2), "cuda wins");
        cr_assert_not(same(&d, 1), "the other type is ignored");
    }
    remat_release(t);
    remat_release(c);
    cr_assert_eq(remat_live_tensors(), 0);
}

Test(checkpoint_rng, several_types_without_cuda_first_seen_wins) {
    int td = rt_testdev_register();
    int od = register_fake("otherdev");
    remat_tensor *t = on((remat_device){td, 0}), *o = on((remat_device){od, 0});
    rt_capture_warnings();
    remat_manual_seed(9);
    drawer d = {0, 2, {{td, 0}, {od, 0}}, {{0}}};
    remat_tensor *extra[2] = {o, t}; /* otherdev first */
    RT_OK(run(&d, 2, extra, mode_opts(0)));
    cr_assert(strstr(rt_warnings(), "Device types: ['otherdev', 'testdev'] first device type: "
                                    "otherdev"),
              "%s", rt_warnings());
    cr_assert(same(&d, 1), "otherdev (first seen) restored");
    cr_assert_not(same(&d, 0));
    remat_release(t);
    remat_release(o);
    cr_assert_eq(remat_live_tensors(), 0);
}

/* ---- device initialised inside the forward ------------------------------------------------------- */
typedef struct init_fn_ud {
    int td;
    int calls;
} init_fn_ud;

static int initialising_fn(void *ud, remat_tensor *const *in, int n_in, remat_tensor **out,
                           int n_out) {
    init_fn_ud *u = ud;
    (void)n_in;
    (void)n_out;
    u->calls++;
    remat_tensor *t = on((remat_device){u->td, 0}); /* first allocation initialises it */
    remat_release(t);
    return remat_exp(&out[0], in[0]);
}

Test(checkpoint_rng, device_initialised_in_forward_is_an_error) {
    int td = rt_testdev_register();
    RT_OK(remat_set_default_device_type("testdev"));
    int64_t sh[] = {3};
    remat_tensor *x = rt_rand(1, sh, REMAT_F64, -1, 1, 1), *y = NULL;
    RT_OK(remat_set_requires_grad(x, true));
    for (int mode = 0; mode < 2; mode++) {
        init_fn_ud u = {td, 0};
        rt_testdev_set_initialized(false);
        RT_FAILS(remat_checkpoint(initialising_fn, &u, 1, &x, 1, &y,
                                  &(remat_checkpoint_options){
                                      .use_reentrant = mode ? REMAT_OPT_TRUE : REMAT_OPT_FALSE}),
                 REMAT_ESTATE,
                 "device state of 'testdev' was initialized in the forward pass of "
                 "a checkpoint");
        cr_assert_null(y);
        /* without preserving RNG state it is fine */
        rt_testdev_set_initialized(false);
        RT_OK(remat_checkpoint(
            initialising_fn, &u, 1, &x, 1, &y,
            &(remat_checkpoint_options){.use_reentrant = mode ? REMAT_OPT_TRUE : REMAT_OPT_FALSE,
                                        .preserve_rng_state = REMAT_OPT_FALSE}));
        remat_release_p(&y);
        /* and so is a device initialised before the forward */
        RT_OK(remat_checkpoint(
            initialising_fn, &u, 1, &x, 1, &y,
            &(remat_checkpoint_options){.use_reentrant = mode ? REMAT_OPT_TRUE : REMAT_OPT_FALSE}));
        remat_release_p(&y);
    }
    /* with the default "cuda" (not registered) nothing is checked */
    RT_OK(remat_set_default_device_type(NULL));
    init_fn_ud u = {td, 0};
    rt_testdev_set_initialized(false);
    RT_OK(remat_checkpoint(initialising_fn, &u, 1, &x, 1, &y,
                           &(remat_checkpoint_options){.use_reentrant = REMAT_OPT_FALSE}));
    remat_release(y);
    remat_release(x);
    cr_assert_eq(remat_live_tensors(), 0);
}
