/* tests/test_dispatch.c — the dispatch layer: the op registry (every op a
 * model runs is registered, names unique, remat_policy_from_ops refuses
 * unknown names with the closest ones), the kernel table (an op on a device
 * type with no kernel is REMAT_EUNSUPPORTED naming op, device and dtype; a
 * type that registers a kernel runs it). */
#include <stdlib.h>
#include <string.h>

#include "backends/cpu/cpu.h"
#include "core/kernels.h"
#include "ops/registry.h"
#include "support/models.h"
#include "support/rt.h"

Test(dispatch, registry_names_are_unique_and_found) {
    int n = rm_op_count();
    cr_assert_gt(n, 40);
    for (int i = 0; i < n; i++) {
        const char *name = rm_op_name(i);
        cr_assert(name && strncmp(name, "remat_", 6) == 0, "op %d is named %s", i, name);
        cr_assert_eq(rm_op_find(name), i, "%s is listed twice", name);
        const rm_op_desc *d = rm_op_desc_at(i);
        if (d) {
            cr_assert(d->n_in >= 1 && d->n_in <= RM_OP_MAX_IN, "%s: arity", name);
            cr_assert(d->n_out >= 1 && d->n_out <= RM_OP_MAX_OUT, "%s: outputs", name);
            cr_assert(d->n_saved <= RM_OP_MAX_SAVED, "%s: saves", name);
            cr_assert((unsigned)d->kernel < RM_K_COUNT, "%s: kernel", name);
            cr_assert_not_null(d->backward, "%s: backward", name);
            cr_assert_not_null(rm_cpu_kernels[d->kernel][REMAT_F32], "%s: no f32 cpu kernel", name);
            cr_assert_not_null(rm_cpu_kernels[d->kernel][REMAT_F64], "%s: no f64 cpu kernel", name);
            for (int s = 0; s < d->n_saved; s++)
                if (d->saves[s].kind == RM_SAVE_CUSTOM)
                    cr_assert_not_null(d->save_custom, "%s: custom save without a function", name);
        }
    }
    cr_assert_eq(rm_op_find("remat_no_such_op"), -1);
}

/* Every op a transformer block runs, forward and backward under a
 * checkpoint, announces a registered name. */
static int g_unregistered;
static char g_first_bad[64];
static void check_name(void *ud, const char *op) {
    (void)ud;
    if (rm_op_find(op) >= 0) return;
    if (!g_unregistered++) snprintf(g_first_bad, sizeof g_first_bad, "%s", op);
}

Test(dispatch, every_op_a_model_runs_is_registered) {
    rt_tblock b;
    rt_tblock_init(&b, 16, 2, 8, 0.1, REMAT_F64, 7);
    b.tagged = true;
    remat_tensor *params[RT_MAX_PARAMS];
    int np = rt_tblock_params(&b, params);
    int64_t xs[] = {2, 8, 16};
    remat_tensor *x = rt_leaf(rt_rand(3, xs, REMAT_F64, -1, 1, 3));
    void *uds[] = {&b};
    remat_checkpoint_options o = {0};
    o.use_reentrant = REMAT_OPT_FALSE;
    rt_grads g = {0};
    rm_set_op_observer(check_name, NULL, NULL, NULL);
    rt_run_blocks(5, 1, rt_tblock_fn, uds, params, np, x, &o, &g);
    rm_set_op_observer(NULL, NULL, NULL, NULL);
    cr_assert_eq(g_unregistered, 0, "%d ops not in the registry, first: %s", g_unregistered,
                 g_first_bad);
    rt_grads_free(&g);
    remat_release(x);
    rt_tblock_free(&b);
}

Test(dispatch, policy_from_ops_refuses_unknown_names) {
    remat_policy *p = NULL;
    const char *digit[] = {"2"};
    RT_FAILS(remat_policy_from_ops(&p, 1, digit), REMAT_EINVAL, "ops[0] = '2' is not an op name");
    cr_assert_null(p);
    const char *typo[] = {"remat_gelu", "remat_lienar"};
    RT_FAILS(remat_policy_from_ops(&p, 2, typo), REMAT_EINVAL, "closest are remat_linear");
    cr_assert_null(p);
    const char *fine[] = {"remat_linear", "remat_attention", "remat_tag"};
    RT_OK(remat_policy_from_ops(&p, 3, fine));
    remat_policy_release(p);
}

/* ---- a device type with its own memory and, later, its own kernel ------------------------- */
static void *nh_alloc(void *ud, int index, size_t n) {
    (void)ud, (void)index;
    return malloc(n ? n : 1);
}
static void nh_free(void *ud, int index, void *p, size_t n) {
    (void)ud, (void)index, (void)n;
    free(p);
}
static int nh_copy(void *ud, int index, void *dst, const void *src, size_t n, remat_copy_kind k) {
    (void)ud, (void)index, (void)k;
    memcpy(dst, src, n);
    return REMAT_OK;
}
static int nh_count(void *ud) {
    (void)ud;
    return 1;
}
/* The device's unary kernel: only negation, to show it is this one that ran. */
static int g_device_kernel_calls;
static int nh_unary_f64(const rm_kargs *k) {
    const rm_unary_params *p = k->params;
    g_device_kernel_calls++;
    if (p->op != RM_U_NEG) return remat_set_error(REMAT_EUNSUPPORTED, "nohost: only neg");
    const double *x = rm_ptr(k->in[0]); /* device memory (malloc here) */
    double *y = rm_ptr(k->out[0]);
    for (int64_t i = 0; i < remat_numel(k->out[0]); i++) y[i] = -x[i];
    return REMAT_OK;
}

Test(dispatch, device_without_a_kernel_is_unsupported_until_it_registers_one) {
    remat_device_type_def def = {0};
    def.name = "kernelless";
    def.alloc = nh_alloc;
    def.free = nh_free;
    def.copy = nh_copy;
    def.device_count = nh_count;
    int id;
    RT_OK(remat_register_device_type(&def, &id));
    int64_t sh[] = {2, 3};
    double v[] = {1, -2, 3, -4, 5, -6};
    remat_tensor *x = rt_tensor(2, sh, REMAT_F64, v), *xd = NULL, *y = NULL;
    RT_OK(remat_to_device(&xd, x, (remat_device){id, 0}));
    RT_FAILS(remat_neg(&y, xd), REMAT_EUNSUPPORTED,
             "remat_neg: no unary kernel for device "
             "'kernelless' and dtype f64");
    cr_assert_null(y);
    RT_OK(rm_kernel_register(RM_K_UNARY, id, REMAT_F64, nh_unary_f64));
    RT_OK(remat_neg(&y, xd));
    cr_assert_eq(g_device_kernel_calls, 1);
    remat_tensor *back = NULL;
    RT_OK(remat_to_device(&back, y, REMAT_DEVICE_CPU));
    const double *b = remat_data(back);
    for (int i = 0; i < 6; i++) cr_assert_eq(b[i], -v[i]);
    /* other dtypes and kernels are still refused */
    remat_tensor *e = NULL;
    RT_FAILS(remat_exp(&e, xd), REMAT_EUNSUPPORTED, "nohost: only neg");
    RT_FAILS(rm_kernel_register(RM_K_UNARY, 0, REMAT_F64, nh_unary_f64), REMAT_EINVAL,
             "cpu kernels are fixed");
    remat_release(back);
    remat_release(y);
    remat_release(xd);
    remat_release(x);
    RT_OK(remat_unregister_device_type(id));
    cr_assert_null(rm_kernel_lookup(RM_K_UNARY, id, REMAT_F64), "unregistering clears the kernels");
}
