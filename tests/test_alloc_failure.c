/* tests/test_alloc_failure.c — issue 14 item 5 (sqlite's discipline): the
 * k-th host allocation of one checkpointed training step fails, for every
 * k, in the reentrant, non-reentrant and selective variants. Every run
 * must end with an error status and parameters untouched — or with
 * REMAT_OK and gradients bitwise equal to those of an undisturbed step —
 * and leave no live tensor behind (LeakSanitizer, in make test-asan, also
 * sees every byte). No crash, no abort.
 *
 * The failures come from the linker: this test is linked with
 * -Wl,--wrap=malloc,--wrap=calloc,--wrap=realloc,--wrap=aligned_alloc,
 * --wrap=strdup (CMakeLists.txt), so every call to those from libremat.a,
 * the test support library and this file goes to the __wrap_ functions
 * below, which fail the armed call and forward the rest to the real
 * allocator (the sanitizers' one under make test-asan). */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "support/rt.h"

void *__real_malloc(size_t n);
void *__real_calloc(size_t n, size_t m);
void *__real_realloc(void *p, size_t n);
void *__real_aligned_alloc(size_t a, size_t n);

static long g_calls;   /* wrapped allocations since arming */
static long g_fail_at; /* 0: never fail; else fail call number g_fail_at */
static bool g_failed;  /* the armed call was reached */

static bool should_fail(void) {
    if (!g_fail_at) return false;
    if (++g_calls != g_fail_at) return false;
    g_failed = true;
    errno = ENOMEM;
    return true;
}
void *__wrap_malloc(size_t n) { return should_fail() ? NULL : __real_malloc(n); }
void *__wrap_calloc(size_t n, size_t m) { return should_fail() ? NULL : __real_calloc(n, m); }
void *__wrap_realloc(void *p, size_t n) { return should_fail() ? NULL : __real_realloc(p, n); }
void *__wrap_aligned_alloc(size_t a, size_t n) {
    return should_fail() ? NULL : __real_aligned_alloc(a, n);
}
char *__wrap_strdup(const char *s) {
    size_t n = strlen(s) + 1;
    char *d = __wrap_malloc(n);
    if (d) memcpy(d, s, n);
    return d;
}

typedef enum { REENTRANT, NON_REENTRANT, SELECTIVE } variant;

typedef struct params {
    remat_tensor *w1, *b1, *w2;
} params;

/* out = linear(gelu(linear(x, w1, b1)), w2) */
static int block(void *ud, remat_tensor *const *in, int n_in, remat_tensor **out, int n_out) {
    (void)n_in, (void)n_out;
    params *p = ud;
    remat_tensor *h = NULL, *g = NULL;
    int rc = remat_linear(&h, in[0], p->w1, p->b1);
    if (!rc) rc = remat_gelu(&g, h, REMAT_GELU_TANH);
    if (!rc) rc = remat_linear(&out[0], g, p->w2, NULL);
    remat_release(h);
    remat_release(g);
    return rc;
}

/* One step: loss = sum(block(block(x))^2) with both blocks checkpointed,
 * backward into the parameters' .grad. Returns the first failing status. */
static int step(variant v, params *p, remat_tensor *x) {
    remat_scope *scope = NULL;
    int rc = remat_scope_begin(&scope);
    if (rc) return rc;
    remat_policy *policy = NULL;
    remat_sac_config cfg = {0};
    remat_checkpoint_options o = {.use_reentrant =
                                      v == REENTRANT ? REMAT_OPT_TRUE : REMAT_OPT_FALSE};
    if (v == SELECTIVE) {
        rc = remat_policy_dots_saveable(&policy);
        cfg.policy = policy;
        o.context_fn = remat_sac_context_fn;
        o.context_fn_data = &cfg;
    }
    remat_tensor *h = NULL, *y = NULL, *sq = NULL, *loss = NULL;
    if (!rc) rc = remat_checkpoint(block, p, 1, &x, 1, &h, &o);
    if (!rc) rc = remat_checkpoint(block, p, 1, &h, 1, &y, &o);
    if (!rc) rc = remat_mul(&sq, y, y);
    if (!rc) rc = remat_sum_all(&loss, sq);
    if (!rc) rc = remat_backward_scalar(loss);
    remat_policy_release(policy);
    int rc2 = remat_scope_end(scope);
    return rc ? rc : rc2;
}

static remat_tensor *g_x;
static void zero_grads(params *p) {
    remat_set_grad(g_x, NULL);
    remat_set_grad(p->w1, NULL);
    remat_set_grad(p->b1, NULL);
    remat_set_grad(p->w2, NULL);
}

static void sweep(variant v) {
    int64_t sx[] = {4, 8}, sw[] = {8, 8}, sb[] = {8};
    params p = {rt_leaf(rt_rand(2, sw, REMAT_F32, -0.5, 0.5, 1)),
                rt_leaf(rt_rand(1, sb, REMAT_F32, -0.5, 0.5, 2)),
                rt_leaf(rt_rand(2, sw, REMAT_F32, -0.5, 0.5, 3))};
    remat_tensor *x = rt_leaf(rt_rand(2, sx, REMAT_F32, -1, 1, 4)); /* reentrant needs one */
    g_x = x;
    remat_tensor *ref[3] = {0};
    remat_tensor *ps[3] = {p.w1, p.b1, p.w2};
    float before[3][64], now[64];
    for (int i = 0; i < 3; i++) RT_OK(remat_copy_to_buffer(ps[i], REMAT_F32, before[i], 64));
    /* the undisturbed step: reference gradients */
    RT_OK(step(v, &p, x));
    for (int i = 0; i < 3; i++) ref[i] = remat_retain(remat_tensor_grad(ps[i]));
    zero_grads(&p);
    int64_t live0 = remat_live_tensors();
    long k;
    for (k = 1;; k++) {
        g_calls = 0;
        g_failed = false;
        g_fail_at = k;
        remat_clear_error();
        int rc = step(v, &p, x);
        g_fail_at = 0;
        if (!g_failed) { /* the step makes fewer than k allocations: swept them all */
            cr_assert_eq(rc, REMAT_OK, "variant %d: no failure injected, got %s: %s", v,
                         remat_err_name(rc), remat_last_error());
            break;
        }
        if (rc == REMAT_OK) {
            for (int i = 0; i < 3; i++)
                cr_assert(rt_bitwise_equal(remat_tensor_grad(ps[i]), ref[i]),
                          "variant %d, allocation %ld failed: step returned OK with a wrong "
                          "gradient of parameter %d",
                          v, k, i);
        } else {
            cr_assert_eq(rc, REMAT_ENOMEM, "variant %d, allocation %ld failed: reported as %s: %s",
                         v, k, remat_err_name(rc), remat_last_error());
            cr_assert_neq(remat_last_error()[0], '\0',
                          "variant %d, allocation %ld: %s without a "
                          "message",
                          v, k, remat_err_name(rc));
        }
        for (int i = 0; i < 3; i++) {
            RT_OK(remat_copy_to_buffer(ps[i], REMAT_F32, now, 64));
            cr_assert(!memcmp(now, before[i], (size_t)remat_numel(ps[i]) * sizeof(float)),
                      "variant %d, allocation %ld: parameter %d changed", v, k, i);
        }
        zero_grads(&p);
        cr_assert_eq(remat_live_tensors(), live0,
                     "variant %d, allocation %ld failed (%s: %s): %lld tensors leaked", v, k,
                     remat_err_name(rc), remat_last_error(),
                     (long long)(remat_live_tensors() - live0));
        cr_assert_eq(remat_saved_hooks_depth(), 0, "variant %d, allocation %ld: hooks left pushed",
                     v, k);
        cr_assert(remat_is_grad_enabled(), "variant %d, allocation %ld: grad mode left off", v, k);
    }
    cr_assert_gt(k, 50, "variant %d: only %ld allocations swept", v, k);
    cr_log_info("variant %d: %ld allocation failure points swept", v, k - 1);
    for (int i = 0; i < 3; i++) remat_release(ref[i]);
    remat_release(p.w1);
    remat_release(p.b1);
    remat_release(p.w2);
    remat_release(x);
}

Test(alloc_failure, every_allocation_of_a_reentrant_step) { sweep(REENTRANT); }
Test(alloc_failure, every_allocation_of_a_non_reentrant_step) { sweep(NON_REENTRANT); }
Test(alloc_failure, every_allocation_of_a_selective_step) { sweep(SELECTIVE); }

/* ---- one op on the driver (issue 13) ------------------------------------------------------ */

typedef int (*op_fn)(remat_tensor **out, remat_tensor *const *in);
static int run_matmul(remat_tensor **o, remat_tensor *const *in) {
    return remat_matmul(o, in[0], in[1]);
}
static int run_linear(remat_tensor **o, remat_tensor *const *in) {
    return remat_linear(o, in[0], in[1], in[2]);
}
static int run_attention(remat_tensor **o, remat_tensor *const *in) {
    return remat_attention(o, in[0], in[1], in[2], true, 0);
}

/* Every allocation of one op (inputs requiring grad) inside a fresh scope
 * fails in turn, the last being the scope's growth to register the output:
 * the op returns REMAT_ENOMEM with *out NULL, or REMAT_OK with an output
 * (never REMAT_OK without one: the driver used to drop the status of the
 * hand-out), and leaves no tensor behind. */
static void sweep_op(const char *name, op_fn f, int n, remat_tensor *const *in) {
    long k;
    for (k = 1;; k++) {
        int64_t live0 = remat_live_tensors();
        remat_scope *s = NULL;
        cr_assert_eq(remat_scope_begin(&s), REMAT_OK);
        remat_tensor *y = NULL;
        g_calls = 0;
        g_failed = false;
        g_fail_at = k;
        int rc = f(&y, in);
        g_fail_at = 0;
        bool reached = g_failed;
        if (rc == REMAT_OK)
            cr_assert_not_null(y, "%s, allocation %ld failed: REMAT_OK without an output", name, k);
        else
            cr_assert(rc == REMAT_ENOMEM && !y, "%s, allocation %ld failed: %s (%s), out %p", name,
                      k, remat_err_name(rc), remat_last_error(), (void *)y);
        cr_assert_eq(remat_scope_end(s), REMAT_OK);
        cr_assert_eq(remat_live_tensors(), live0, "%s, allocation %ld: tensors leaked", name, k);
        if (!reached) break;
    }
    cr_assert_gt(k, 3, "%s: only %ld allocations swept", name, k);
    for (int i = 0; i < n; i++) remat_release(in[i]);
}

Test(alloc_failure, every_allocation_of_matmul_linear_and_attention) {
    int64_t sa[] = {3, 4}, sb[] = {4, 5}, sx[] = {2, 3, 4}, sw[] = {5, 4}, sbias[] = {5};
    int64_t sq[] = {1, 2, 8, 4};
    remat_tensor *mm[2] = {rt_leaf(rt_rand(2, sa, REMAT_F32, -1, 1, 1)),
                           rt_leaf(rt_rand(2, sb, REMAT_F32, -1, 1, 2))};
    sweep_op("remat_matmul", run_matmul, 2, mm);
    remat_tensor *lin[3] = {rt_leaf(rt_rand(3, sx, REMAT_F32, -1, 1, 3)),
                            rt_leaf(rt_rand(2, sw, REMAT_F32, -1, 1, 4)),
                            rt_leaf(rt_rand(1, sbias, REMAT_F32, -1, 1, 5))};
    sweep_op("remat_linear", run_linear, 3, lin);
    remat_tensor *att[3] = {rt_leaf(rt_rand(4, sq, REMAT_F32, -1, 1, 6)),
                            rt_leaf(rt_rand(4, sq, REMAT_F32, -1, 1, 7)),
                            rt_leaf(rt_rand(4, sq, REMAT_F32, -1, 1, 8))};
    sweep_op("remat_attention", run_attention, 3, att);
    cr_assert_eq(remat_live_tensors(), 0);
}

/* bf16 through f32 (REMAT_NO_BF16, any CPU): the GEMM's widened operands and the attention
 * kernels' scratch come from the allocator (src/backends/cpu/workspace.h), sized here above
 * its 64 KiB floor, and fail in turn too: the GEMM then multiplies element by element
 * (REMAT_OK), attention reports REMAT_ENOMEM; nothing leaks. */
static remat_tensor *bf16_leaf(int ndim, const int64_t *shape, unsigned seed) {
    remat_tensor *f = rt_rand(ndim, shape, REMAT_F32, -1, 1, seed), *b = NULL;
    cr_assert_eq(remat_to_dtype(&b, f, REMAT_BF16), REMAT_OK);
    remat_release(f);
    return rt_leaf(b);
}

Test(alloc_failure, every_allocation_of_bf16_ops_through_f32) {
    setenv("REMAT_NO_BF16", "1", 1);
    int64_t sa[] = {64, 96}, sb[] = {96, 80}, sq[] = {1, 2, 64, 64};
    remat_tensor *mm[2] = {bf16_leaf(2, sa, 1), bf16_leaf(2, sb, 2)};
    sweep_op("bf16 remat_matmul", run_matmul, 2, mm);
    remat_tensor *att[3] = {bf16_leaf(4, sq, 6), bf16_leaf(4, sq, 7), bf16_leaf(4, sq, 8)};
    sweep_op("bf16 remat_attention", run_attention, 3, att);
    cr_assert_eq(remat_live_tensors(), 0);
}
