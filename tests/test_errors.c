/* tests/test_errors.c — status names, messages, warnings, NULL handling,
 * device registry errors. */
#include <string.h>

#include "support/rt.h"

Test(errors, names_and_messages) {
    cr_assert_str_eq(remat_err_name(REMAT_OK), "REMAT_OK");
    cr_assert_str_eq(remat_err_name(REMAT_ESHAPE), "REMAT_ESHAPE");
    cr_assert_str_eq(remat_err_name(12345), "REMAT_E?");
    cr_assert_str_eq(remat_strerror(REMAT_ENOMEM), "out of memory");
    cr_assert_str_eq(remat_strerror(-3), "unknown status");
    cr_assert_eq(remat_set_error(REMAT_EIO, "file %s missing", "x.bin"), REMAT_EIO);
    cr_assert_str_eq(remat_last_error(), "file x.bin missing");
    remat_clear_error();
    cr_assert_str_eq(remat_last_error(), "");
}

Test(errors, null_is_harmless_for_destructors) {
    remat_release(NULL);
    remat_release_p(NULL);
    remat_tensor *t = NULL;
    remat_release_p(&t);
    RT_OK(remat_scope_end(NULL));
    cr_assert_null(remat_retain(NULL));
}

Test(errors, null_and_bad_arguments_give_clear_errors) {
    remat_tensor *out = NULL;
    RT_FAILS(remat_exp(&out, NULL), REMAT_EINVAL, "remat_exp");
    RT_FAILS(remat_exp(NULL, NULL), REMAT_EINVAL, "remat_exp");
    int64_t sh[] = {2, 3};
    RT_FAILS(remat_empty(&out, 9, sh, REMAT_F32, REMAT_DEVICE_CPU), REMAT_EINVAL, "ndim 9");
    int64_t neg[] = {2, -1};
    RT_FAILS(remat_empty(&out, 2, neg, REMAT_F32, REMAT_DEVICE_CPU), REMAT_EINVAL, "negative size");
    RT_FAILS(remat_empty(&out, 2, sh, REMAT_F32, (remat_device){REMAT_CPU, 1}), REMAT_EDEVICE,
             "cpu:1");
    RT_FAILS(remat_empty(&out, 2, sh, REMAT_F32, (remat_device){6, 0}), REMAT_EDEVICE, NULL);
    remat_tensor *i;
    RT_OK(remat_arange(&i, 4));
    RT_FAILS(remat_exp(&out, i), REMAT_EDTYPE, "f32 or f64");
    cr_assert_null(out);
    remat_release(i);
}

static char g_last_warning[512];
static int g_n_warn;
static void cb(void *ud, remat_log_level lvl, const char *msg) {
    (void)ud;
    cr_assert_eq(lvl, REMAT_LOG_WARN);
    strncpy(g_last_warning, msg, sizeof g_last_warning - 1);
    g_n_warn++;
}

Test(errors, log_callback_is_replaceable) {
    remat_set_log_callback(cb, NULL);
    remat_warn("something odd: %d", 7);
    cr_assert_str_eq(g_last_warning, "something odd: 7");
    cr_assert_eq(g_n_warn, 1);
    remat_set_log_callback(NULL, NULL);
    remat_warn("to stderr once");
    remat_warn("to stderr once");
    cr_assert_eq(g_n_warn, 1, "restored default must not call the old callback");
}

Test(errors, device_registry_errors) {
    remat_device_type_def def = {0};
    int id;
    RT_FAILS(remat_register_device_type(NULL, &id), REMAT_EINVAL, NULL);
    def.name = "half";
    RT_FAILS(remat_register_device_type(&def, &id), REMAT_EINVAL, "must supply alloc");
    int td = rt_testdev_register();
    cr_assert_gt(td, 0);
    cr_assert_eq(remat_device_type_id("testdev"), td);
    cr_assert_str_eq(remat_device_type_name(td), "testdev");
    cr_assert_eq(remat_device_count(td), 2);
    cr_assert(remat_device_host_addressable(td));
    cr_assert_eq(remat_device_type_id("cpu"), REMAT_CPU);
    cr_assert_eq(remat_device_type_id("nope"), -1);
    RT_FAILS(remat_set_current_device(td, 5), REMAT_EDEVICE, "testdev");
    RT_FAILS(remat_unregister_device_type(REMAT_CPU), REMAT_EINVAL, NULL);
    /* live memory blocks unregistering */
    int64_t sh[] = {2};
    remat_tensor *t;
    RT_OK(remat_empty(&t, 1, sh, REMAT_F32, (remat_device){td, 0}));
    RT_FAILS(remat_unregister_device_type(td), REMAT_ESTATE, "live");
    remat_release(t);
}

Test(errors, mixed_devices_are_rejected) {
    int td = rt_testdev_register();
    int64_t sh[] = {2};
    remat_tensor *a, *b, *c = NULL;
    RT_OK(remat_zeros(&a, 1, sh, REMAT_F32, REMAT_DEVICE_CPU));
    RT_OK(remat_zeros(&b, 1, sh, REMAT_F32, (remat_device){td, 1}));
    RT_FAILS(remat_add(&c, a, b), REMAT_EDEVICE, "testdev:1");
    cr_assert_null(c);
    remat_release(a);
    remat_release(b);
}
