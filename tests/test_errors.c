/* tests/test_errors.c — status names, messages, warnings, NULL handling,
 * device registry errors. */
#include <stdio.h>
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

/* Every code of REMAT_STATUS_MAP (the one list) is an enum constant with the
 * list's value, has a distinct name that remat_status_name returns, and a
 * non-empty text; the values run from 0 without gaps, so no code is left
 * out of the name table. */
Test(errors, status_list_enum_names_and_texts_agree) {
    static const struct {
        int code, value;
        const char *name, *text;
    } list[] = {
#define ROW(name, value, text) {REMAT_##name, value, "REMAT_" #name, text},
        REMAT_STATUS_MAP(ROW)
#undef ROW
    };
    const int n = (int)(sizeof list / sizeof list[0]);
    cr_assert_geq(n, 14, "the list lost codes");
    bool seen_value[64] = {false};
    for (int i = 0; i < n; i++) {
        cr_assert_eq(list[i].code, list[i].value, "%s: enum %d, list %d", list[i].name,
                     list[i].code, list[i].value);
        cr_assert(list[i].value >= 0 && list[i].value < n, "%s = %d outside 0..%d", list[i].name,
                  list[i].value, n - 1);
        cr_assert_not(seen_value[list[i].value], "value %d used twice", list[i].value);
        seen_value[list[i].value] = true;
        cr_assert_str_eq(remat_status_name(list[i].code), list[i].name);
        cr_assert_str_eq(remat_err_name(list[i].code), list[i].name);
        cr_assert_str_eq(remat_strerror(list[i].code), list[i].text);
        cr_assert_gt(strlen(list[i].text), 0, "%s has no text", list[i].name);
        for (int j = 0; j < i; j++) {
            cr_assert_str_neq(list[i].name, list[j].name);
            cr_assert_str_neq(remat_strerror(list[i].code), remat_strerror(list[j].code),
                              "%s and %s share a text", list[i].name, list[j].name);
        }
    }
    cr_assert_str_eq(remat_status_name(n), "REMAT_E?");
    cr_assert_str_eq(remat_status_name(-1), "REMAT_E?");
    cr_assert_str_eq(remat_strerror(n), "unknown status");
    /* The numbers are part of the ABI: spot-check that they did not move. */
    cr_assert_eq(REMAT_OK, 0);
    cr_assert_eq(REMAT_EINVAL, 1);
    cr_assert_eq(REMAT_ENOMEM, 5);
    cr_assert_eq(REMAT_EUNSUPPORTED, 10);
    cr_assert_eq(REMAT_ECALLBACK, 13);
}

/* remat_status is an int: functions and callbacks written with `int` keep
 * compiling against the remat_status declarations. */
static int int_stage(void *ud, remat_tensor *const *in, int n_in, remat_tensor **out, int n_out) {
    (void)ud, (void)n_in, (void)n_out;
    return remat_relu(&out[0], in[0]);
}

Test(errors, status_type_is_int_compatible) {
    remat_checkpoint_fn fn = int_stage;
    int (*add)(remat_tensor **, remat_tensor *, remat_tensor *) = remat_add;
    cr_assert_not_null(fn);
    cr_assert_not_null(add);
    cr_assert_eq(sizeof(remat_status), sizeof(int));
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
    RT_FAILS(remat_exp(&out, i), REMAT_EDTYPE, "f32, f64 or bf16");
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

/* ---- versions (issue 32): the headers and the library agree, and a mismatch is named ---------- */
Test(errors, version_check_names_both_versions) {
    cr_assert_eq(remat_version_number(), REMAT_VERSION_NUMBER);
    char v[32];
    snprintf(v, sizeof v, "%d.%d.%d", REMAT_VERSION_MAJOR, REMAT_VERSION_MINOR,
             REMAT_VERSION_PATCH);
    cr_assert_str_eq(remat_version_string(), v);
    RT_OK(REMAT_VERSION_CHECK());
    RT_OK(remat_version_check(REMAT_VERSION_MAJOR, REMAT_VERSION_MINOR, REMAT_VERSION_PATCH + 7));
    RT_FAILS(remat_version_check(REMAT_VERSION_MAJOR, REMAT_VERSION_MINOR + 1, 0),
             REMAT_EUNSUPPORTED, v);
    RT_FAILS(remat_version_check(REMAT_VERSION_MAJOR + 1, 0, 0), REMAT_EUNSUPPORTED,
             "compiled with the headers of remat");
    if (REMAT_VERSION_MAJOR == 0) /* 0.x: every minor version is its own ABI */
        RT_FAILS(remat_version_check(0, REMAT_VERSION_MINOR - 1, 9), REMAT_EUNSUPPORTED, NULL);
}
