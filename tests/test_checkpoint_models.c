/* tests/test_checkpoint_models.c — checkpointing real blocks: gradients of an
 * MLP and of transformer blocks bitwise equal to the un-checkpointed run in
 * both modes (with dropout: the RNG state is restored for the recompute),
 * preserve_rng_state off, checkpoint_sequential with several segment counts
 * and remainders, and memory: the allocator peak of per-block
 * checkpointing, and recomputed tensors freed as soon as they are unpacked
 * even with retain_graph. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "support/models.h"
#include "support/rt.h"

/* REMAT_TEST_DEVICE=cuda runs these tests on the GPU (tests/support/rt.h) */
RT_ON_TEST_DEVICE

#define SEED 1234

static remat_checkpoint_options opts_for(int mode) {
    remat_checkpoint_options o = {0};
    o.use_reentrant = mode ? REMAT_OPT_TRUE : REMAT_OPT_FALSE;
    return o;
}

/* ---- a stack of blocks ----------------------------------------------------------------------- */
static bool any_differs(const rt_grads *a, const rt_grads *b) {
    for (int i = 0; i < a->n; i++)
        if (!rt_bitwise_equal(a->g[i], b->g[i])) return true;
    return false;
}

/* ---- MLP ----------------------------------------------------------------------------------------- */
#define L_MLP 4

static void mlp_setup(rt_mlp_block *b, void **uds, remat_tensor **params, int *n_params,
                      double p_drop) {
    *n_params = 0;
    for (int i = 0; i < L_MLP; i++) {
        rt_mlp_block_init(&b[i], 8, 16, p_drop, REMAT_F32, 100 + (unsigned)i);
        uds[i] = &b[i];
        *n_params += rt_mlp_block_params(&b[i], params + *n_params);
    }
}

static void mlp_teardown(rt_mlp_block *b) {
    for (int i = 0; i < L_MLP; i++) rt_mlp_block_free(&b[i]);
}

static remat_tensor *mlp_input(void) {
    int64_t sh[] = {4, 8};
    remat_tensor *x = rt_rand(2, sh, REMAT_F32, -1, 1, 77);
    RT_OK(remat_set_requires_grad(x, true));
    return x;
}

Test(checkpoint_models, mlp_gradients_bitwise_equal_with_dropout) {
    rt_mlp_block b[L_MLP];
    void *uds[L_MLP];
    remat_tensor *params[L_MLP * 4];
    int np;
    mlp_setup(b, uds, params, &np, 0.3);
    remat_tensor *x = mlp_input();
    rt_grads ref, got;
    rt_run_blocks(SEED, L_MLP, rt_mlp_block_fn, uds, params, np, x, NULL, &ref);
    for (int i = 0; i < L_MLP; i++) cr_assert_eq(b[i].calls, 1);
    for (int mode = 0; mode < 2; mode++) {
        remat_checkpoint_options o = opts_for(mode);
        rt_run_blocks(SEED, L_MLP, rt_mlp_block_fn, uds, params, np, x, &o, &got);
        rt_assert_same_grads(&ref, &got, mode ? "mlp reentrant" : "mlp non-reentrant");
        for (int i = 0; i < L_MLP; i++)
            cr_assert_eq(b[i].calls, 1 + 2 * (mode + 1), "block %d ran %d times", i, b[i].calls);
        rt_grads_free(&got);
    }
    rt_grads_free(&ref);
    remat_release(x);
    mlp_teardown(b);
    cr_assert_eq(remat_live_tensors(), 0);
}

Test(checkpoint_models, preserve_rng_state_off_runs_and_changes_dropout) {
    rt_mlp_block b[L_MLP];
    void *uds[L_MLP];
    remat_tensor *params[L_MLP * 4];
    int np;
    mlp_setup(b, uds, params, &np, 0.5);
    remat_tensor *x = mlp_input();
    rt_grads ref, got;
    rt_run_blocks(SEED, L_MLP, rt_mlp_block_fn, uds, params, np, x, NULL, &ref);
    for (int mode = 0; mode < 2; mode++) {
        remat_checkpoint_options o = opts_for(mode);
        o.preserve_rng_state = REMAT_OPT_FALSE;
        rt_run_blocks(SEED, L_MLP, rt_mlp_block_fn, uds, params, np, x, &o, &got);
        /* the forward is the same, but the recomputation drew other masks */
        cr_assert(rt_bitwise_equal(ref.out, got.out));
        cr_assert(any_differs(&ref, &got), "without RNG restore the dropout masks should differ");
        rt_grads_free(&got);
    }
    rt_grads_free(&ref);
    remat_release(x);
    mlp_teardown(b);
    cr_assert_eq(remat_live_tensors(), 0);
}

Test(checkpoint_models, rng_state_after_checkpointed_backward_is_untouched) {
    /* the recomputation forks the generators: what comes after a backward
     * does not depend on whether it recomputed (the dropout draws from the generator of the
     * tensors' device: the test device's is the one compared) */
    rt_mlp_block b[L_MLP];
    void *uds[L_MLP];
    remat_tensor *params[L_MLP * 4];
    int np;
    mlp_setup(b, uds, params, &np, 0.3);
    remat_tensor *x = mlp_input();
    uint8_t s_ref[REMAT_RNG_STATE_BYTES], s_ck[REMAT_RNG_STATE_BYTES];
    rt_grads g;
    rt_run_blocks(SEED, L_MLP, rt_mlp_block_fn, uds, params, np, x, NULL, &g);
    RT_OK(remat_rng_get_state(rt_tensor_device(), s_ref));
    rt_grads_free(&g);
    remat_checkpoint_options o = opts_for(0);
    rt_run_blocks(SEED, L_MLP, rt_mlp_block_fn, uds, params, np, x, &o, &g);
    RT_OK(remat_rng_get_state(rt_tensor_device(), s_ck));
    cr_assert(memcmp(s_ref, s_ck, sizeof s_ref) == 0);
    rt_grads_free(&g);
    remat_release(x);
    mlp_teardown(b);
    cr_assert_eq(remat_live_tensors(), 0);
}

/* ---- transformer blocks ---------------------------------------------------------------------- */
#define L_TF 2

Test(checkpoint_models, transformer_gradients_bitwise_equal_with_dropout) {
    for (int drop = 0; drop < 2; drop++) {
        rt_tblock b[L_TF];
        void *uds[L_TF];
        remat_tensor *params[L_TF * 12];
        int np = 0;
        for (int i = 0; i < L_TF; i++) {
            rt_tblock_init(&b[i], 16, 4, 6, drop ? 0.2 : 0.0, REMAT_F32, 10 + (unsigned)i);
            uds[i] = &b[i];
            np += rt_tblock_params(&b[i], params + np);
        }
        int64_t sh[] = {2, 6, 16};
        remat_tensor *x = rt_rand(3, sh, REMAT_F32, -1, 1, 5);
        RT_OK(remat_set_requires_grad(x, true));
        rt_grads ref, got;
        rt_run_blocks(SEED, L_TF, rt_tblock_fn, uds, params, np, x, NULL, &ref);
        for (int mode = 0; mode < 2; mode++) {
            for (int early = 0; early < 2; early++) {
                remat_checkpoint_options o = opts_for(mode);
                o.early_stop = early ? REMAT_OPT_TRUE : REMAT_OPT_FALSE;
                rt_run_blocks(SEED, L_TF, rt_tblock_fn, uds, params, np, x, &o, &got);
                char what[64];
                snprintf(what, sizeof what, "transformer mode %d early %d drop %d", mode, early,
                         drop);
                rt_assert_same_grads(&ref, &got, what);
                rt_grads_free(&got);
            }
        }
        rt_grads_free(&ref);
        remat_release(x);
        for (int i = 0; i < L_TF; i++) rt_tblock_free(&b[i]);
        cr_assert_eq(remat_live_tensors(), 0);
    }
}

Test(checkpoint_models, transformer_f64_gradcheck_through_checkpoint) {
    /* the checkpointed block is differentiable like the plain one */
    rt_tblock b;
    rt_tblock_init(&b, 8, 2, 3, 0.0, REMAT_F64, 3);
    int64_t sh[] = {1, 3, 8};
    remat_tensor *x = rt_rand(3, sh, REMAT_F64, -1, 1, 8);
    RT_OK(remat_set_requires_grad(x, true));
    remat_checkpoint_options o = opts_for(0);
    remat_tensor *y, *yr, *g, *gr, *l, *lr;
    RT_OK(remat_checkpoint(rt_tblock_fn, &b, 1, &x, 1, &y, &o));
    RT_OK(rt_tblock_fn(&b, &x, 1, &yr, 1));
    RT_OK(remat_sum_all(&l, y));
    RT_OK(remat_sum_all(&lr, yr));
    RT_OK(remat_grad(1, &l, NULL, 1, &x, false, false, &g));
    RT_OK(remat_grad(1, &lr, NULL, 1, &x, false, false, &gr));
    cr_assert(rt_bitwise_equal(g, gr));
    /* finite differences on one element */
    double eps = 1e-6, base, up, dn, an;
    RT_OK(remat_item(lr, &base));
    rt_add_at(x, 5, eps);
    remat_tensor *y2, *l2;
    RT_OK(rt_tblock_fn(&b, &x, 1, &y2, 1));
    RT_OK(remat_sum_all(&l2, y2));
    RT_OK(remat_item(l2, &up));
    rt_add_at(x, 5, -2 * eps);
    remat_release(y2);
    remat_release(l2);
    RT_OK(rt_tblock_fn(&b, &x, 1, &y2, 1));
    RT_OK(remat_sum_all(&l2, y2));
    RT_OK(remat_item(l2, &dn));
    rt_add_at(x, 5, eps);
    an = rt_item_at(g, 5);
    cr_assert_float_eq(an, (up - dn) / (2 * eps), 1e-6, "analytic %g vs numeric %g", an,
                       (up - dn) / (2 * eps));
    remat_tensor *all[] = {y, yr, g, gr, l, lr, y2, l2, x};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) remat_release(all[i]);
    rt_tblock_free(&b);
    cr_assert_eq(remat_live_tensors(), 0);
}

/* ---- checkpoint_sequential ----------------------------------------------------------------- */
#define L_SEQ 7

Test(checkpoint_models, sequential_segments_and_remainder) {
    rt_mlp_block b[L_SEQ];
    remat_stage st[L_SEQ];
    remat_tensor *params[L_SEQ * 4];
    int np = 0;
    for (int i = 0; i < L_SEQ; i++) {
        rt_mlp_block_init(&b[i], 8, 16, 0.25, REMAT_F32, 200 + (unsigned)i);
        st[i] = (remat_stage){rt_mlp_block_fn, &b[i]};
        np += rt_mlp_block_params(&b[i], params + np);
    }
    remat_tensor *x = mlp_input();
    /* reference: all stages plain */
    rt_grads ref = {0};
    {
        remat_manual_seed(SEED);
        remat_tensor *h = remat_retain(x), *y, *l;
        for (int i = 0; i < L_SEQ; i++) {
            RT_OK(rt_mlp_block_fn(&b[i], &h, 1, &y, 1));
            remat_release(h);
            h = y;
        }
        RT_OK(remat_sum_all(&l, h));
        RT_OK(remat_backward_scalar(l));
        remat_release(l);
        ref.out = h;
        ref.g[ref.n++] = remat_retain(remat_tensor_grad(x));
        for (int i = 0; i < np; i++) ref.g[ref.n++] = remat_retain(remat_tensor_grad(params[i]));
    }
    int seg_counts[] = {1, 2, 3, 4, 7}; /* more than L_SEQ is refused (test_ck_semantics) */
    for (int mode = 0; mode < 2; mode++) {
        for (size_t k = 0; k < sizeof seg_counts / sizeof seg_counts[0]; k++) {
            int segments = seg_counts[k];
            for (int i = 0; i < L_SEQ; i++) b[i].calls = 0;
            rt_zero_grads(np, params);
            rt_zero_grads(1, &x);
            remat_manual_seed(SEED);
            remat_checkpoint_options o = opts_for(mode);
            remat_tensor *y, *l;
            RT_OK(remat_checkpoint_sequential(&y, L_SEQ, st, segments, x, &o));
            RT_OK(remat_sum_all(&l, y));
            RT_OK(remat_backward_scalar(l));
            rt_grads got = {0};
            got.out = y;
            got.g[got.n++] = remat_retain(remat_tensor_grad(x));
            for (int i = 0; i < np; i++)
                got.g[got.n++] = remat_retain(remat_tensor_grad(params[i]));
            char what[64];
            snprintf(what, sizeof what, "sequential mode %d segments %d", mode, segments);
            rt_assert_same_grads(&ref, &got, what);
            /* segments-1 chunks of L/segments stages are checkpointed */
            int seg = L_SEQ / segments, n_ck = seg * (segments - 1);
            for (int i = 0; i < L_SEQ; i++)
                cr_assert_eq(b[i].calls, i < n_ck ? 2 : 1, "%s: stage %d ran %d times", what, i,
                             b[i].calls);
            remat_release(l);
            rt_grads_free(&got);
        }
    }
    rt_grads_free(&ref);
    remat_release(x);
    for (int i = 0; i < L_SEQ; i++) rt_mlp_block_free(&b[i]);
    cr_assert_eq(remat_live_tensors(), 0);
}

static int null_stage(void *ud, remat_tensor *const *in, int n_in, remat_tensor **out, int n_out) {
    (void)ud;
    (void)in;
    (void)n_in;
    (void)out;
    (void)n_out;
    return REMAT_OK;
}

Test(checkpoint_models, sequential_edge_cases_and_errors) {
    remat_tensor *x = mlp_input(), *y = (remat_tensor *)1;
    rt_capture_warnings();
    /* no stages: the input itself */
    RT_OK(remat_checkpoint_sequential(&y, 0, NULL, 1, x, NULL));
    cr_assert_eq(y, x);
    remat_release(y);
    cr_assert_eq(rt_warning_count(), 1, "one warning for an unset use_reentrant");
    cr_assert(strstr(rt_warnings(), "remat_checkpoint_sequential: the use_reentrant option"));
    rt_mlp_block b;
    rt_mlp_block_init(&b, 8, 16, 0.0, REMAT_F32, 1);
    remat_stage st[2] = {{rt_mlp_block_fn, &b}, {rt_mlp_block_fn, &b}};
    remat_checkpoint_options o = opts_for(0);
    RT_FAILS(remat_checkpoint_sequential(&y, 2, st, 0, x, &o), REMAT_EINVAL, "segments");
    cr_assert_null(y);
    RT_FAILS(remat_checkpoint_sequential(NULL, 2, st, 1, x, &o), REMAT_EINVAL, "out");
    RT_FAILS(remat_checkpoint_sequential(&y, 2, st, 1, NULL, &o), REMAT_EINVAL,
             "remat_checkpoint_sequential");
    RT_FAILS(remat_checkpoint_sequential(&y, 2, NULL, 1, x, &o), REMAT_EINVAL, "stages");
    remat_stage bad[2] = {{rt_mlp_block_fn, &b}, {null_stage, NULL}};
    RT_FAILS(remat_checkpoint_sequential(&y, 2, bad, 2, x, &o), REMAT_EINVAL,
             "stage 1 returned no tensor");
    RT_FAILS(remat_checkpoint_sequential(&y, 2, bad, 1, x, &o), REMAT_EINVAL, "stage 1");
    o.determinism_check = (remat_determinism_check)9;
    RT_FAILS(remat_checkpoint_sequential(&y, 2, st, 2, x, &o), REMAT_EINVAL, "determinism_check");
    /* the stage array may go away after the call */
    o = opts_for(0);
    remat_stage *heap = malloc(2 * sizeof *heap);
    heap[0] = st[0];
    heap[1] = st[1];
    RT_OK(remat_checkpoint_sequential(&y, 2, heap, 2, x, &o));
    free(heap);
    remat_tensor *l;
    RT_OK(remat_sum_all(&l, y));
    RT_OK(remat_backward_scalar(l));
    cr_assert_eq(b.calls, 1 + 2 + 1 + 1, "calls %d", b.calls);
    remat_release(l);
    remat_release(y);
    rt_mlp_block_free(&b);
    remat_release(x);
    cr_assert_eq(remat_live_tensors(), 0);
}

/* ---- memory --------------------------------------------------------------------------------- */
#define MB 256
#define MD 32
#define MH 256
#define ML 8

/* Peak allocator bytes (of the test device) above `base` for one training step of an ML-layer
 * MLP (no dropout), every block checkpointed (non-reentrant) or not. The
 * caller's references to intermediate outputs are dropped right away, so
 * only the graph keeps what it needs. */
static size_t step_peak(rt_mlp_block *b, remat_tensor *x, bool ckpt, size_t *base_out) {
    remat_tensor *params[ML * 4];
    int np = 0;
    for (int i = 0; i < ML; i++) np += rt_mlp_block_params(&b[i], params + np);
    rt_zero_grads(np, params);
    size_t base = rt_device_current_bytes();
    rt_device_reset_peak();
    remat_checkpoint_options o = opts_for(0);
    remat_tensor *h = remat_retain(x), *y, *l;
    for (int i = 0; i < ML; i++) {
        if (ckpt) RT_OK(remat_checkpoint(rt_mlp_block_fn, &b[i], 1, &h, 1, &y, &o));
        else RT_OK(rt_mlp_block_fn(&b[i], &h, 1, &y, 1));
        remat_release(h);
        h = y;
    }
    RT_OK(remat_sum_all(&l, h));
    remat_release(h);
    RT_OK(remat_backward_scalar(l));
    remat_release(l);
    *base_out = base;
    return rt_device_stats().peak_bytes - base;
}

Test(checkpoint_models, per_block_checkpointing_peak_memory) {
    rt_mlp_block b[ML];
    remat_tensor *params[ML * 4];
    int np = 0;
    for (int i = 0; i < ML; i++) {
        rt_mlp_block_init(&b[i], MD, MH, 0.0, REMAT_F32, 300 + (unsigned)i);
        np += rt_mlp_block_params(&b[i], params + np);
    }
    int64_t sh[] = {MB, MD};
    remat_tensor *x = rt_rand(2, sh, REMAT_F32, -1, 1, 1); /* input needs no grad */
    size_t base;
    size_t plain = step_peak(b, x, false, &base);
    size_t ck = step_peak(b, x, true, &base);
    size_t f = sizeof(float);
    size_t param_bytes = rt_bytes(np, params); /* = gradient bytes */
    size_t act = (size_t)MB * MD * f;          /* one block input/output */
    size_t hid = (size_t)MB * MH * f;          /* one hidden activation */
    /* Budget: parameter gradients + the ML block outputs (each the next
     * block's saved input) + one block's internals being recomputed (its two
     * hidden activations) + their gradients (two hidden-sized) + slack of
     * eight model-width tensors (incoming/outgoing gradients, the
     * recomputed linear output, bias/broadcast temporaries) + 16 KiB. */
    size_t budget = param_bytes + ML * act + 4 * hid + 8 * act + 16384;
    cr_log_info("peak above base: plain %zu, checkpointed %zu, budget %zu (params %zu, act %zu, "
                "hidden %zu)",
                plain, ck, budget, param_bytes, act, hid);
    cr_assert_leq(ck, budget, "checkpointed peak %zu exceeds the budget %zu", ck, budget);
    cr_assert_lt(ck, plain, "checkpointing must lower the peak (%zu vs %zu)", ck, plain);
    /* and the plain run really holds every block's hidden activations */
    cr_assert_geq(plain, ML * 2 * hid);
    remat_release(x);
    for (int i = 0; i < ML; i++) rt_mlp_block_free(&b[i]);
    cr_assert_eq(remat_live_tensors(), 0);
}

/* ---- freed as soon as unpacked, even with retain_graph ------------------------------------- */
static size_t bytes_in_hook;
static int measure_hook(void *ud, remat_tensor *grad, remat_tensor **rep) {
    (void)ud;
    (void)grad;
    (void)rep;
    bytes_in_hook = rt_device_current_bytes();
    return REMAT_OK;
}

/* Bytes alive on the test device when x's gradient arrives, above the bytes before the forward. */
static long hook_bytes(rt_mlp_block *b, bool ckpt, bool retain) {
    int64_t sh[] = {64, 8};
    remat_tensor *x = rt_rand(2, sh, REMAT_F32, -1, 1, 2);
    RT_OK(remat_set_requires_grad(x, true));
    RT_OK(remat_register_hook(x, measure_hook, NULL));
    remat_tensor *params[4];
    rt_mlp_block_params(b, params);
    rt_zero_grads(4, params);
    remat_checkpoint_options o = opts_for(0);
    remat_tensor *y, *l;
    size_t before = rt_device_current_bytes();
    if (ckpt) RT_OK(remat_checkpoint(rt_mlp_block_fn, b, 1, &x, 1, &y, &o));
    else RT_OK(rt_mlp_block_fn(b, &x, 1, &y, 1));
    RT_OK(remat_sum_all(&l, y));
    RT_OK(remat_backward(1, &l, NULL, retain, 0, NULL));
    remat_release(l);
    remat_release(y);
    remat_release(x);
    return (long)bytes_in_hook - (long)before;
}

Test(checkpoint_models, recomputed_tensors_freed_when_unpacked_even_with_retain_graph) {
    rt_mlp_block b;
    rt_mlp_block_init(&b, 8, 512, 0.0, REMAT_F32, 9);
    remat_tensor *params[4];
    rt_mlp_block_params(&b, params);
    long hid = 64 * 512 * (long)sizeof(float), act = 64 * 8 * (long)sizeof(float);
    long grads = (long)rt_bytes(4, params);
    long ck_retain = hook_bytes(&b, true, true);
    long ck_free = hook_bytes(&b, true, false);
    long plain_retain = hook_bytes(&b, false, true);
    cr_log_info("bytes alive at x's gradient: ckpt+retain %ld, ckpt %ld, plain+retain %ld "
                "(hidden %ld, grads %ld)",
                ck_retain, ck_free, plain_retain, hid, grads);
    cr_assert_eq(ck_retain, ck_free, "retain_graph must not keep recomputed tensors alive");
    /* only parameter gradients and model-width tensors (y, x's gradient,
     * the incoming gradient) are alive */
    cr_assert_leq(ck_retain, grads + 4 * act + 1024);
    /* whereas a retained plain graph still holds both hidden activations */
    cr_assert_geq(plain_retain, 2 * hid);
    rt_mlp_block_free(&b);
    cr_assert_eq(remat_live_tensors(), 0);
}

/* ---- a Llama-style block: RMSNorm, grouped-query attention with RoPE (the fused kernel, the
 * kv heads never repeated), a SwiGLU MLP ---------------------------------------------------- */
typedef struct llama_block {
    int dim, heads, kv_heads, hidden;
    remat_tensor *p[9]; /* norm1, wq, wk, wv, wo, norm2, w_gate, w_up, w_down */
    int calls;
} llama_block;

static void llama_init(llama_block *b, int dim, int heads, int kv_heads, int hidden,
                       unsigned seed) {
    b->dim = dim, b->heads = heads, b->kv_heads = kv_heads, b->hidden = hidden, b->calls = 0;
    const int hd = dim / heads;
    const int64_t shapes[9][2] = {
        {dim, 0}, {dim, dim},    {kv_heads * hd, dim}, {kv_heads * hd, dim}, {dim, dim},
        {dim, 0}, {hidden, dim}, {hidden, dim},        {dim, hidden}};
    for (int i = 0; i < 9; i++) {
        bool norm = i == 0 || i == 5;
        b->p[i] = rt_leaf(rt_rand(norm ? 1 : 2, shapes[i], REMAT_F32, norm ? 0.5 : -0.4,
                                  norm ? 1.5 : 0.4, seed + (unsigned)i));
    }
}

static void llama_free(llama_block *b) {
    for (int i = 0; i < 9; i++) remat_release(b->p[i]);
}

/* (B, T, n·hd) -> (B, n, T, hd) */
static int to_heads(remat_tensor **out, remat_tensor *t, int n, int hd) {
    remat_tensor *r = NULL;
    const int64_t *s = remat_shape(t);
    int rc = remat_reshape(&r, t, 4, (int64_t[]){s[0], s[1], n, hd});
    if (!rc) rc = remat_transpose(out, r, 1, 2);
    remat_release(r);
    return rc;
}

static int llama_fn(void *ud, remat_tensor *const *in, int n_in, remat_tensor **out, int n_out) {
    (void)n_in, (void)n_out;
    llama_block *b = ud;
    b->calls++;
    remat_tensor *x = in[0], *t[24] = {NULL};
    const int hd = b->dim / b->heads;
    const int64_t *s = remat_shape(x);
    int rc = remat_rms_norm(&t[0], x, 1, b->p[0], 1e-5);
    if (!rc) rc = remat_linear(&t[1], t[0], b->p[1], NULL);
    if (!rc) rc = remat_linear(&t[2], t[0], b->p[2], NULL);
    if (!rc) rc = remat_linear(&t[3], t[0], b->p[3], NULL);
    if (!rc) rc = to_heads(&t[4], t[1], b->heads, hd);
    if (!rc) rc = to_heads(&t[5], t[2], b->kv_heads, hd);
    if (!rc) rc = to_heads(&t[6], t[3], b->kv_heads, hd);
    if (!rc) rc = remat_rope(&t[7], t[4], NULL, 10000.0);
    if (!rc) rc = remat_rope(&t[8], t[5], NULL, 10000.0);
    if (!rc) rc = remat_attention(&t[9], t[7], t[8], t[6], true, 0);
    if (!rc) rc = remat_transpose(&t[10], t[9], 1, 2);
    if (!rc) rc = remat_reshape(&t[11], t[10], 3, (int64_t[]){s[0], s[1], b->dim});
    if (!rc) rc = remat_linear(&t[12], t[11], b->p[4], NULL);
    if (!rc) rc = remat_add(&t[13], x, t[12]);
    if (!rc) rc = remat_rms_norm(&t[14], t[13], 1, b->p[5], 1e-5);
    if (!rc) rc = remat_linear(&t[15], t[14], b->p[6], NULL);
    if (!rc) rc = remat_silu(&t[16], t[15]);
    if (!rc) rc = remat_linear(&t[17], t[14], b->p[7], NULL);
    if (!rc) rc = remat_mul(&t[18], t[16], t[17]);
    if (!rc) rc = remat_linear(&t[19], t[18], b->p[8], NULL);
    if (!rc) rc = remat_add(&out[0], t[13], t[19]);
    for (int i = 0; i < 24; i++) remat_release(t[i]);
    return rc;
}

#define L_LLAMA 2

Test(checkpoint_models, llama_block_gradients_bitwise_equal) {
    llama_block b[L_LLAMA];
    void *uds[L_LLAMA];
    remat_tensor *params[L_LLAMA * 9];
    for (int i = 0; i < L_LLAMA; i++) {
        llama_init(&b[i], 16, 4, 2, 24, 300 + 20 * (unsigned)i);
        uds[i] = &b[i];
        memcpy(params + 9 * i, b[i].p, sizeof b[i].p);
    }
    remat_tensor *x = rt_leaf(rt_rand(3, (int64_t[]){2, 6, 16}, REMAT_F32, -1, 1, 78));
    rt_grads ref, got;
    rt_run_blocks(SEED, L_LLAMA, llama_fn, uds, params, L_LLAMA * 9, x, NULL, &ref);
    for (int mode = 0; mode < 2; mode++) {
        remat_checkpoint_options o = opts_for(mode);
        rt_run_blocks(SEED, L_LLAMA, llama_fn, uds, params, L_LLAMA * 9, x, &o, &got);
        rt_assert_same_grads(&ref, &got, mode ? "llama reentrant" : "llama non-reentrant");
        for (int i = 0; i < L_LLAMA; i++)
            cr_assert_eq(b[i].calls, 1 + 2 * (mode + 1), "block %d ran %d times", i, b[i].calls);
        rt_grads_free(&got);
    }
    rt_grads_free(&ref);
    remat_release(x);
    for (int i = 0; i < L_LLAMA; i++) llama_free(&b[i]);
    cr_assert_eq(remat_live_tensors(), 0);
}
