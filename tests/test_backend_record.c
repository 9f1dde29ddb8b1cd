/* tests/test_backend_record.c — a backend is one record (src/core/backend.h): its device
 * vtable, kernel rows, kernel flags and transfer ops come in together through
 * rm_backend_register, as the cpu's (backend 0) do; unregistering takes them all away. */
#include <stdlib.h>
#include <string.h>

#include "core/backend.h"
#include "core/core.h"
#include "core/kernels.h"
#include "support/rt.h"

static void *rb_alloc(void *ud, int index, size_t n) {
    (void)ud, (void)index;
    return malloc(n ? n : 1);
}
static void rb_free(void *ud, int index, void *p, size_t n) {
    (void)ud, (void)index, (void)n;
    free(p);
}
static int rb_copy(void *ud, int index, void *dst, const void *src, size_t n, remat_copy_kind k) {
    (void)ud, (void)index, (void)k;
    memcpy(dst, src, n);
    return REMAT_OK;
}
static int g_count = 1;
static int rb_count(void *ud) {
    (void)ud;
    return g_count;
}
static const char *rb_why(void) { return "the test's board is unplugged"; }

/* Its one kernel: negation in f64 (the row), counted. */
static int g_calls;
static int rb_neg_f64(const rm_kargs *k) {
    g_calls++;
    const double *x = rm_ptr(k->in[0]);
    double *y = rm_ptr(k->out[0]);
    for (int64_t i = 0; i < remat_numel(k->out[0]); i++) y[i] = -x[i];
    return REMAT_OK;
}
static const rm_kernel_fn k_rows[RM_K_COUNT][RM_N_DTYPES] = {
    [RM_K_UNARY] = {[REMAT_F64] = rb_neg_f64},
};
static const unsigned char k_flags[RM_K_COUNT] = {[RM_K_UNARY_BWD] = RM_KF_IN_PLACE};

static void *rb_host_alloc(size_t n) { return malloc(n); }
static void rb_host_free(void *p, size_t n) {
    (void)n;
    free(p);
}
static const rm_transfer_ops k_transfer = {.host_alloc = rb_host_alloc, .host_free = rb_host_free};

static int g_registered_id = -1;
static void rb_registered(int type_id) { g_registered_id = type_id; }

static const rm_backend k_record = {
    .device = {.name = "recorded",
               .alloc = rb_alloc,
               .free = rb_free,
               .copy = rb_copy,
               .device_count = rb_count},
    .kernels = k_rows,
    .kernel_flags = k_flags,
    .transfer = &k_transfer,
    .registered = rb_registered,
    .unavailable_reason = rb_why,
};

Test(backend_record, the_cpu_is_backend_0_with_its_rows_and_host_routines) {
    cr_assert_eq(remat_device_type_id("cpu"), 0);
    cr_assert_not_null(rm_host(), "backend 0 lends the core its host routines");
    cr_assert_not_null(rm_kernel_lookup(RM_K_MATMUL, REMAT_CPU, REMAT_F32));
    cr_assert_not_null(rm_kernel_lookup(RM_K_SUM, REMAT_CPU, REMAT_BF16),
                       "a bf16 entry the cpu lacks comes from its bf16 fallback");
    cr_assert(rm_kernel_allows(RM_K_UNARY_BWD, REMAT_CPU, RM_KF_IN_PLACE));
    cr_assert(rm_kernel_allows(RM_K_MATMUL, REMAT_CPU, RM_KF_WIDE_GRAD));
    cr_assert_not(rm_kernel_allows(RM_K_SUM, REMAT_CPU, RM_KF_IN_PLACE));
}

Test(backend_record, one_record_brings_rows_flags_transfer_and_its_id) {
    int id = -1;
    RT_OK(rm_backend_register(&k_record, &id));
    cr_assert_gt(id, 0);
    cr_assert_eq(g_registered_id, id, "registered() is told the type id");
    cr_assert_eq(rm_kernel_lookup(RM_K_UNARY, id, REMAT_F64), rb_neg_f64);
    cr_assert_null(rm_kernel_lookup(RM_K_UNARY, id, REMAT_F32), "no row, no kernel");
    cr_assert_null(rm_kernel_lookup(RM_K_MATMUL, id, REMAT_F64),
                   "a type with rows of its own does not adopt the cpu's");
    cr_assert(rm_kernel_allows(RM_K_UNARY_BWD, id, RM_KF_IN_PLACE));
    cr_assert_eq(rm_transfer_get(id), &k_transfer);

    int64_t sh[] = {3};
    double v[] = {1, -2, 3};
    remat_tensor *x = rt_tensor(1, sh, REMAT_F64, v), *xd = NULL, *y = NULL, *back = NULL;
    RT_OK(remat_to_device(&xd, x, (remat_device){id, 0}));
    RT_OK(remat_neg(&y, xd));
    cr_assert_eq(g_calls, 1, "the record's kernel ran");
    RT_OK(remat_to_device(&back, y, REMAT_DEVICE_CPU));
    const double *b = remat_data(back);
    for (int i = 0; i < 3; i++) cr_assert_eq(b[i], -v[i]);
    remat_release(back);
    remat_release(y);
    remat_release(xd);
    remat_release(x);

    g_count = 0; /* no device: the record says why */
    RT_FAILS(remat_device_check((remat_device){id, 0}), REMAT_EUNSUPPORTED,
             "the test's board is unplugged");
    g_count = 1;

    int again = -1;
    RT_FAILS(rm_backend_register(&k_record, &again), REMAT_EINVAL, "already registered");
    RT_OK(remat_unregister_device_type(id));
    cr_assert_null(rm_kernel_lookup(RM_K_UNARY, id, REMAT_F64), "rows go with the record");
    cr_assert_not(rm_kernel_allows(RM_K_UNARY_BWD, id, RM_KF_IN_PLACE), "so do the flags");
    cr_assert_null(rm_transfer_get(id), "and the transfer ops");
}

Test(backend_record, a_host_addressable_vtable_alone_runs_backend_0s_kernels) {
    const rm_backend vt = {.device = {.name = "hostlike",
                                      .host_addressable = true,
                                      .alloc = rb_alloc,
                                      .free = rb_free,
                                      .copy = rb_copy,
                                      .device_count = rb_count}};
    int id = -1;
    RT_OK(rm_backend_register(&vt, &id));
    cr_assert_eq(rm_kernel_lookup(RM_K_MATMUL, id, REMAT_F32),
                 rm_kernel_lookup(RM_K_MATMUL, REMAT_CPU, REMAT_F32));
    cr_assert(rm_kernel_allows(RM_K_MATMUL, id, RM_KF_WIDE_GRAD), "with their flags");
    cr_assert_null(rm_transfer_get(id));
    RT_OK(remat_unregister_device_type(id));
}
