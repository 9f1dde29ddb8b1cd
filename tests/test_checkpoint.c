/* tests/test_checkpoint.c — remat_checkpoint semantics (PyTorch:
 * test_autograd.py's checkpoint tests, TestNestedCheckpoint): options,
 * trigger counts, gradients vs no checkpoint, non-tensor inputs/outputs,
 * partial grad, grad() inside and around, nesting, early stop, determinism
 * errors and debug traces, "already unpacked once", access outside
 * backward, global overrides, context_fn, user_data lifetime. Models,
 * memory and RNG/device tests are in test_checkpoint_models.c and
 * test_checkpoint_rng.c. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/core.h"

#include "core/intercept.h"

#include "autograd/graph.h"
#include "support/models.h"
#include "support/rt.h"

/* REMAT_TEST_DEVICE=cuda runs these tests on the GPU (tests/support/rt.h) */
RT_ON_TEST_DEVICE

static remat_checkpoint_options nonre(void) {
    remat_checkpoint_options o = {0};
    o.use_reentrant = REMAT_OPT_FALSE;
    return o;
}
static remat_checkpoint_options reent(void) {
    remat_checkpoint_options o = {0};
    o.use_reentrant = REMAT_OPT_TRUE;
    return o;
}

static remat_tensor *leaf(int ndim, const int64_t *shape, unsigned seed) {
    remat_tensor *t = rt_rand(ndim, shape, REMAT_F64, -1, 1, seed);
    RT_OK(remat_set_requires_grad(t, true));
    return t;
}

static remat_tensor *sum_all(remat_tensor *t) {
    remat_tensor *s;
    RT_OK(remat_sum_all(&s, t));
    return s;
}

/* ---- a configurable chain: x → (x * w) → exp → tanh → exp ... ---------------------- */
typedef struct chain {
    int calls;
    int n;           /* number of alternating exp/tanh ops */
    remat_tensor *w; /* optional parameter (NULL: none) */
} chain;

static int chain_fn(void *ud, remat_tensor *const *in, int n_in, remat_tensor **out, int n_out) {
    chain *c = ud;
    cr_assert_eq(n_in, 1);
    cr_assert_eq(n_out, 1);
    c->calls++;
    remat_tensor *x = remat_retain(in[0]);
    int rc = REMAT_OK;
    if (c->w) {
        remat_tensor *y = NULL;
        rc = remat_mul(&y, x, c->w);
        remat_release(x);
        x = y;
    }
    for (int i = 0; i < c->n && rc == REMAT_OK; i++) {
        remat_tensor *y = NULL;
        rc = i % 2 ? remat_tanh(&y, x) : remat_exp(&y, x);
        remat_release(x);
        x = y;
    }
    if (rc) {
        remat_release(x);
        return rc;
    }
    out[0] = x;
    return REMAT_OK;
}

/* gradient of sum(f(x)) w.r.t. x (and w), with or without checkpoint */
static void chain_grads(chain *c, remat_tensor *x, const remat_checkpoint_options *o,
                        remat_tensor **gx, remat_tensor **gw) {
    remat_tensor *y = NULL;
    if (o) RT_OK(remat_checkpoint(chain_fn, c, 1, &x, 1, &y, o));
    else RT_OK(chain_fn(c, &x, 1, &y, 1));
    remat_tensor *l = sum_all(y);
    remat_release(y);
    rt_zero_grads(1, &x);
    if (c->w) rt_zero_grads(1, &c->w);
    RT_OK(remat_backward_scalar(l));
    remat_release(l);
    *gx = remat_retain(remat_tensor_grad(x));
    if (gw) *gw = c->w ? remat_retain(remat_tensor_grad(c->w)) : NULL;
}

/* ---- options -------------------------------------------------------------------------- */
Test(checkpoint, unset_use_reentrant_warns_then_uses_reentrant) {
    rt_capture_warnings();
    int64_t sh[] = {3};
    remat_tensor *x = leaf(1, sh, 1);
    chain c = {0, 3, NULL};
    remat_tensor *y;
    RT_OK(remat_checkpoint(chain_fn, &c, 1, &x, 1, &y, NULL));
    cr_assert(strstr(rt_warnings(), "use_reentrant option should be passed explicitly"),
              "warnings: %s", rt_warnings());
    /* reentrant: the output comes from the checkpoint's custom function */
    cr_assert_str_eq(remat_node_name(remat_grad_fn(y)), "CheckpointFunctionBackward");
    remat_release(y);
    /* a zero-initialised struct means the same */
    int n = rt_warning_count();
    remat_checkpoint_options z = {0};
    RT_OK(remat_checkpoint(chain_fn, &c, 1, &x, 1, &y, &z));
    cr_assert_eq(rt_warning_count(), n + 1);
    cr_assert_str_eq(remat_node_name(remat_grad_fn(y)), "CheckpointFunctionBackward");
    remat_release(y);
    /* explicit: no warning; non-reentrant records the function's own graph */
    remat_checkpoint_options o = nonre();
    RT_OK(remat_checkpoint(chain_fn, &c, 1, &x, 1, &y, &o));
    cr_assert_eq(rt_warning_count(), n + 1);
    cr_assert_str_eq(remat_node_name(remat_grad_fn(y)), "ExpBackward");
    o = reent();
    remat_release(y);
    RT_OK(remat_checkpoint(chain_fn, &c, 1, &x, 1, &y, &o));
    cr_assert_eq(rt_warning_count(), n + 1);
    remat_release(y);
    remat_release(x);
    cr_assert_eq(remat_live_tensors(), 0);
}

static int ctx_fn_noop(void *ud, remat_checkpoint_contexts *pair) {
    (void)ud;
    (void)pair;
    return REMAT_OK;
}

Test(checkpoint, bad_arguments_and_options) {
    int64_t sh[] = {3};
    remat_tensor *x = leaf(1, sh, 1);
    chain c = {0, 2, NULL};
    remat_tensor *y = (remat_tensor *)1;
    remat_checkpoint_options o = nonre();
    RT_FAILS(remat_checkpoint(NULL, &c, 1, &x, 1, &y, &o), REMAT_EINVAL, "remat_checkpoint");
    cr_assert_null(y);
    RT_FAILS(remat_checkpoint(chain_fn, &c, 1, NULL, 1, &y, &o), REMAT_EINVAL, "inputs");
    RT_FAILS(remat_checkpoint(chain_fn, &c, -1, &x, 1, &y, &o), REMAT_EINVAL, "n_inputs");
    RT_FAILS(remat_checkpoint(chain_fn, &c, 1, &x, 1, NULL, &o), REMAT_EINVAL, "outputs");
    o.determinism_check = (remat_determinism_check)7;
    RT_FAILS(remat_checkpoint(chain_fn, &c, 1, &x, 1, &y, &o), REMAT_EINVAL,
             "remat_checkpoint: option determinism_check must be REMAT_DETERMINISM_DEFAULT (0) "
             "or REMAT_DETERMINISM_NONE (1), got 7");
    o = reent();
    o.determinism_check = (remat_determinism_check)-1;
    RT_FAILS(remat_checkpoint(chain_fn, &c, 1, &x, 1, &y, &o), REMAT_EINVAL, "determinism_check");
    o = nonre();
    o.early_stop = (remat_tristate)7;
    RT_FAILS(remat_checkpoint(chain_fn, &c, 1, &x, 1, &y, &o), REMAT_EINVAL, "early_stop");
    /* reentrant rejects context_fn and debug */
    o = reent();
    o.context_fn = ctx_fn_noop;
    RT_FAILS(remat_checkpoint(chain_fn, &c, 1, &x, 1, &y, &o), REMAT_EINVAL,
             "only supported when use_reentrant = REMAT_OPT_FALSE");
    o = reent();
    o.debug = REMAT_OPT_TRUE;
    RT_FAILS(remat_checkpoint(chain_fn, &c, 1, &x, 1, &y, &o), REMAT_EINVAL,
             "only supported when use_reentrant");
    /* debug = false explicitly is fine, and the global override does not
     * apply to reentrant (PyTorch checks the argument only) */
    o.debug = REMAT_OPT_FALSE;
    int prev = remat_set_checkpoint_debug(REMAT_OPT_TRUE);
    RT_OK(remat_checkpoint(chain_fn, &c, 1, &x, 1, &y, &o));
    remat_release(y);
    cr_assert_eq(c.calls, 1, "no failed call may run the function");
    /* non-reentrant: unlike PyTorch, debug (here via the override) combines with
     * a context_fn, so that traces cover selective regions */
    o = nonre();
    o.context_fn = ctx_fn_noop;
    RT_OK(remat_checkpoint(chain_fn, &c, 1, &x, 1, &y, &o));
    remat_release(y);
    remat_set_checkpoint_debug(prev);
    cr_assert_eq(c.calls, 2);
    remat_release(x);
    cr_assert_eq(remat_live_tensors(), 0);
}

static int failing_fn(void *ud, remat_tensor *const *in, int n_in, remat_tensor **out, int n_out) {
    (void)ud;
    (void)n_in;
    (void)n_out;
    /* produce an output, then fail: the checkpoint must release it */
    RT_OK(remat_exp(&out[0], in[0]));
    return remat_set_error(REMAT_ECALLBACK, "failing_fn: nope");
}

Test(checkpoint, function_error_propagates_without_leaks) {
    int64_t sh[] = {3};
    remat_tensor *x = leaf(1, sh, 1);
    remat_tensor *y = NULL;
    for (int mode = 0; mode < 2; mode++) {
        remat_checkpoint_options o = mode ? reent() : nonre();
        RT_FAILS(remat_checkpoint(failing_fn, NULL, 1, &x, 1, &y, &o), REMAT_ECALLBACK,
                 "failing_fn: nope");
        cr_assert_null(y);
    }
    remat_release(x);
    cr_assert_eq(remat_live_tensors(), 0);
}

/* ---- trigger counts ---------------------------------------------------------------------- */
Test(checkpoint, checkpointed_segment_runs_twice_others_once) {
    int64_t sh[] = {4};
    for (int mode = 0; mode < 2; mode++) {
        remat_tensor *x = leaf(1, sh, 3);
        chain a = {0, 3, NULL}, b = {0, 2, NULL}, d = {0, 2, NULL};
        remat_checkpoint_options o = mode ? reent() : nonre();
        remat_tensor *h1, *h2, *h3;
        RT_OK(chain_fn(&a, &x, 1, &h1, 1));                        /* plain */
        RT_OK(remat_checkpoint(chain_fn, &b, 1, &h1, 1, &h2, &o)); /* checkpointed */
        RT_OK(chain_fn(&d, &h2, 1, &h3, 1));                       /* plain */
        cr_assert_eq(a.calls + b.calls + d.calls, 3);
        remat_tensor *l = sum_all(h3);
        RT_OK(remat_backward_scalar(l));
        cr_assert_eq(a.calls, 1);
        cr_assert_eq(b.calls, 2, "mode %d: checkpointed segment ran %d times", mode, b.calls);
        cr_assert_eq(d.calls, 1);
        remat_release(l);
        remat_release(h1);
        remat_release(h2);
        remat_release(h3);
        remat_release(x);
    }
    cr_assert_eq(remat_live_tensors(), 0);
}

static int destroy_calls;
static void count_destroy(void *ud) {
    (void)ud;
    destroy_calls++;
}

Test(checkpoint, no_grad_mode_runs_once_and_records_nothing) {
    int64_t sh[] = {4};
    remat_tensor *x = leaf(1, sh, 3);
    for (int mode = 0; mode < 2; mode++) {
        chain c = {0, 3, NULL};
        remat_checkpoint_options o = mode ? reent() : nonre();
        o.user_data_destroy = count_destroy;
        destroy_calls = 0;
        bool prev = remat_no_grad_begin();
        remat_tensor *y;
        RT_OK(remat_checkpoint(chain_fn, &c, 1, &x, 1, &y, &o));
        remat_grad_mode_restore(prev);
        cr_assert_not(remat_requires_grad(y));
        cr_assert_eq(c.calls, 1);
        cr_assert_eq(destroy_calls, 1, "user_data is not needed any more");
        remat_release(y);
    }
    remat_release(x);
    cr_assert_eq(remat_live_tensors(), 0);
}

Test(checkpoint, user_data_destroy_runs_when_graph_dies) {
    int64_t sh[] = {4};
    remat_tensor *x = leaf(1, sh, 3);
    for (int mode = 0; mode < 2; mode++) {
        chain c = {0, 3, NULL};
        remat_checkpoint_options o = mode ? reent() : nonre();
        o.user_data_destroy = count_destroy;
        destroy_calls = 0;
        remat_tensor *y;
        RT_OK(remat_checkpoint(chain_fn, &c, 1, &x, 1, &y, &o));
        cr_assert_eq(destroy_calls, 0);
        remat_tensor *l = sum_all(y);
        RT_OK(remat_backward(1, &l, NULL, true, 0, NULL));
        cr_assert_eq(destroy_calls, 0, "retained graph may recompute again");
        remat_release(l);
        remat_release(y);
        cr_assert_eq(destroy_calls, 1);
        /* failure: destroyed at once */
        destroy_calls = 0;
        o.determinism_check = (remat_determinism_check)2;
        RT_FAILS(remat_checkpoint(chain_fn, &c, 1, &x, 1, &y, &o), REMAT_EINVAL, NULL);
        cr_assert_eq(destroy_calls, 1);
    }
    remat_release(x);
    cr_assert_eq(remat_live_tensors(), 0);
}

/* ---- gradients equal to the un-checkpointed run ---------------------------------------- */
Test(checkpoint, gradients_bitwise_equal_both_modes) {
    int64_t sh[] = {2, 3};
    for (int mode = 0; mode < 2; mode++) {
        for (int with_w = 0; with_w < 2; with_w++) {
            remat_tensor *x = leaf(2, sh, 5);
            chain c = {0, 5, with_w ? leaf(2, sh, 6) : NULL};
            remat_tensor *gx0, *gw0, *gx1, *gw1;
            chain_grads(&c, x, NULL, &gx0, &gw0);
            remat_checkpoint_options o = mode ? reent() : nonre();
            chain_grads(&c, x, &o, &gx1, &gw1);
            cr_assert(rt_bitwise_equal(gx0, gx1), "mode %d: dx differs", mode);
            cr_assert(rt_bitwise_equal(gw0, gw1), "mode %d: dw differs", mode);
            remat_release(gx0);
            remat_release(gx1);
            remat_release(gw0);
            remat_release(gw1);
            remat_release(c.w);
            remat_release(x);
        }
    }
    cr_assert_eq(remat_live_tensors(), 0);
}

Test(checkpoint, backward_twice_with_retain_graph_recomputes_each_time) {
    int64_t sh[] = {5};
    remat_tensor *x = leaf(1, sh, 2);
    chain c = {0, 4, NULL};
    remat_checkpoint_options o = nonre();
    remat_tensor *y;
    RT_OK(remat_checkpoint(chain_fn, &c, 1, &x, 1, &y, &o));
    remat_tensor *l = sum_all(y);
    RT_OK(remat_backward(1, &l, NULL, true, 0, NULL));
    remat_tensor *g1 = remat_retain(remat_tensor_grad(x));
    rt_zero_grads(1, &x);
    RT_OK(remat_backward(1, &l, NULL, false, 0, NULL));
    cr_assert_eq(c.calls, 3);
    cr_assert(rt_bitwise_equal(g1, remat_tensor_grad(x)));
    /* the graph is freed now */
    RT_FAILS(remat_backward(1, &l, NULL, false, 0, NULL), REMAT_ESTATE, "second time");
    remat_release(g1);
    remat_release(l);
    remat_release(y);
    remat_release(x);
    cr_assert_eq(remat_live_tensors(), 0);
}

/* ---- non-tensor and None inputs/outputs --------------------------------------------------- */
typedef struct mixed {
    int calls;
    double k;      /* non-tensor input */
    double result; /* non-tensor output */
} mixed;

/* inputs: (a, NULL, b) — outputs: (k * a * exp(b), NULL) */
static int mixed_fn(void *ud, remat_tensor *const *in, int n_in, remat_tensor **out, int n_out) {
    mixed *m = ud;
    cr_assert_eq(n_in, 3);
    cr_assert_eq(n_out, 2);
    cr_assert_null(in[1]);
    m->calls++;
    remat_tensor *e = NULL, *p = NULL;
    int rc = remat_exp(&e, in[2]);
    if (!rc) rc = remat_mul(&p, in[0], e);
    if (!rc) rc = remat_mul_scalar(&out[0], p, m->k);
    remat_release(e);
    remat_release(p);
    m->result = 42.0;
    return rc;
}

Test(checkpoint, non_tensor_inputs_and_outputs) {
    for (int mode = 0; mode < 2; mode++) {
        for (int early = 0; early < 2; early++) {
            int64_t sh[] = {3};
            remat_tensor *a = leaf(1, sh, 1), *b = leaf(1, sh, 2);
            remat_tensor *in[3] = {a, NULL, b};
            mixed m = {0, 3.0, 0};
            remat_tensor *out[2] = {(remat_tensor *)1, (remat_tensor *)1};
            remat_checkpoint_options o = mode ? reent() : nonre();
            o.early_stop = early ? REMAT_OPT_TRUE : REMAT_OPT_FALSE;
            RT_OK(remat_checkpoint(mixed_fn, &m, 3, in, 2, out, &o));
            cr_assert_null(out[1], "a None output stays NULL");
            cr_assert_eq(m.result, 42.0);
            remat_tensor *l = sum_all(out[0]), *g[2];
            remat_tensor *ab[2] = {a, b};
            if (mode == 0) {
                RT_OK(remat_grad(1, &l, NULL, 2, ab, false, false, g));
            } else {
                RT_OK(remat_backward_scalar(l));
                g[0] = remat_retain(remat_tensor_grad(a));
                g[1] = remat_retain(remat_tensor_grad(b));
            }
            cr_assert_eq(m.calls, 2);
            /* reference without checkpoint */
            remat_tensor *ref[2];
            mixed m2 = {0, 3.0, 0};
            RT_OK(mixed_fn(&m2, in, 3, ref, 2));
            remat_tensor *l2 = sum_all(ref[0]), *g2[2];
            RT_OK(remat_grad(1, &l2, NULL, 2, ab, false, false, g2));
            cr_assert(rt_bitwise_equal(g[0], g2[0]));
            cr_assert(rt_bitwise_equal(g[1], g2[1]));
            for (int i = 0; i < 2; i++) {
                remat_release(g[i]);
                remat_release(g2[i]);
            }
            remat_release(ref[0]);
            remat_release(l2);
            remat_release(l);
            remat_release(out[0]);
            remat_release(a);
            remat_release(b);
        }
    }
    cr_assert_eq(remat_live_tensors(), 0);
}

static int zero_output_fn(void *ud, remat_tensor *const *in, int n_in, remat_tensor **out,
                          int n_out) {
    (void)in;
    (void)n_in;
    (void)out;
    (void)n_out;
    (*(int *)ud)++;
    return REMAT_OK;
}

Test(checkpoint, function_without_outputs) {
    int64_t sh[] = {3};
    remat_tensor *x = leaf(1, sh, 1);
    int calls = 0;
    for (int mode = 0; mode < 2; mode++) {
        remat_checkpoint_options o = mode ? reent() : nonre();
        RT_OK(remat_checkpoint(zero_output_fn, &calls, 1, &x, 0, NULL, &o));
    }
    cr_assert_eq(calls, 2);
    remat_release(x);
    cr_assert_eq(remat_live_tensors(), 0);
}

Test(checkpoint, inputs_not_requiring_grad) {
    int64_t sh[] = {4};
    remat_tensor *x = rt_rand(1, sh, REMAT_F64, -1, 1, 9); /* no grad */
    remat_tensor *w = leaf(1, sh, 10);
    /* non-reentrant: parameters inside still get gradients */
    chain c = {0, 3, w};
    remat_tensor *gx0, *gw0, *gx1, *gw1;
    chain_grads(&c, x, NULL, &gx0, &gw0);
    remat_checkpoint_options o = nonre();
    chain_grads(&c, x, &o, &gx1, &gw1);
    cr_assert_null(gx0);
    cr_assert_null(gx1);
    cr_assert(rt_bitwise_equal(gw0, gw1));
    cr_assert_eq(c.calls, 3);
    /* reentrant: warning, and the output does not require grad (as PyTorch) */
    rt_capture_warnings();
    o = reent();
    remat_tensor *y;
    RT_OK(remat_checkpoint(chain_fn, &c, 1, &x, 1, &y, &o));
    cr_assert(strstr(rt_warnings(), "None of the inputs have requires_grad=true. Gradients will be "
                                    "None"),
              "%s", rt_warnings());
    cr_assert_not(remat_requires_grad(y));
    remat_release(y);
    remat_release(gw0);
    remat_release(gw1);
    remat_release(w);
    remat_release(x);
    cr_assert_eq(remat_live_tensors(), 0);
}

/* ---- reentrant restrictions ------------------------------------------------------------- */
Test(checkpoint, reentrant_rejects_grad_and_backward_with_inputs) {
    int64_t sh[] = {3};
    remat_tensor *x = leaf(1, sh, 1);
    chain c = {0, 3, NULL};
    remat_checkpoint_options o = reent();
    remat_tensor *y, *g;
    RT_OK(remat_checkpoint(chain_fn, &c, 1, &x, 1, &y, &o));
    remat_tensor *l = sum_all(y);
    RT_FAILS(remat_grad(1, &l, NULL, 1, &x, true, false, &g), REMAT_EUNSUPPORTED,
             "incompatible with remat_grad() or passing inputs to remat_backward()");
    RT_FAILS(remat_backward(1, &l, NULL, true, 1, &x), REMAT_EUNSUPPORTED, "use_reentrant");
    /* plain backward works */
    RT_OK(remat_backward(1, &l, NULL, false, 0, NULL));
    cr_assert_not_null(remat_tensor_grad(x));
    remat_release(l);
    remat_release(y);
    remat_release(x);
    cr_assert_eq(remat_live_tensors(), 0);
}

/* In forward returns a function of x; when recomputed, a detached tensor. */
static int detaching_fn(void *ud, remat_tensor *const *in, int n_in, remat_tensor **out,
                        int n_out) {
    int *calls = ud;
    (void)n_in;
    (void)n_out;
    (*calls)++;
    remat_tensor *e = NULL;
    int rc = remat_exp(&e, in[0]);
    if (rc) return rc;
    if (*calls == 1) {
        out[0] = e;
        return REMAT_OK;
    }
    rc = remat_detach(&out[0], e);
    remat_release(e);
    return rc;
}

Test(checkpoint, reentrant_no_output_requires_grad_in_backward) {
    int64_t sh[] = {3};
    remat_tensor *x = leaf(1, sh, 1), *y;
    int calls = 0;
    remat_checkpoint_options o = reent();
    RT_OK(remat_checkpoint(detaching_fn, &calls, 1, &x, 1, &y, &o));
    remat_tensor *l = sum_all(y);
    RT_FAILS(remat_backward_scalar(l), REMAT_ENOGRAD, "none of output has requires_grad=true");
    remat_release(l);
    remat_release(y);
    remat_release(x);
    cr_assert_eq(remat_live_tensors(), 0);
}

/* ---- partial backward / grad() --------------------------------------------------------- */
/* out = (exp(a) * b, tanh(b)) */
static int two_out_fn(void *ud, remat_tensor *const *in, int n_in, remat_tensor **out, int n_out) {
    (void)n_in;
    (void)n_out;
    (*(int *)ud)++;
    remat_tensor *e = NULL;
    int rc = remat_exp(&e, in[0]);
    if (!rc) rc = remat_mul(&out[0], e, in[1]);
    if (!rc) rc = remat_tanh(&out[1], in[1]);
    remat_release(e);
    return rc;
}

Test(checkpoint, partial_grad_and_backward_with_inputs) {
    int64_t sh[] = {4};
    remat_tensor *a = leaf(1, sh, 1), *b = leaf(1, sh, 2), *in[2] = {a, b};
    int calls = 0, calls_ref = 0;
    remat_checkpoint_options o = nonre();
    remat_tensor *out[2], *ref[2];
    RT_OK(remat_checkpoint(two_out_fn, &calls, 2, in, 2, out, &o));
    RT_OK(two_out_fn(&calls_ref, in, 2, ref, 2));
    /* grad of the second output w.r.t. b only */
    remat_tensor *l = sum_all(out[1]), *lr = sum_all(ref[1]), *g, *gr;
    RT_OK(remat_grad(1, &l, NULL, 1, &b, true, false, &g));
    RT_OK(remat_grad(1, &lr, NULL, 1, &b, true, false, &gr));
    cr_assert(rt_bitwise_equal(g, gr));
    cr_assert_eq(calls, 2);
    remat_release(g);
    remat_release(gr);
    /* backward of the first output, accumulating only into a */
    remat_tensor *l0 = sum_all(out[0]), *l0r = sum_all(ref[0]);
    RT_OK(remat_backward(1, &l0, NULL, true, 1, &a));
    cr_assert_null(remat_tensor_grad(b), "inputs= restricts accumulation");
    remat_tensor *ga = remat_retain(remat_tensor_grad(a));
    rt_zero_grads(1, &a);
    RT_OK(remat_backward(1, &l0r, NULL, true, 1, &a));
    cr_assert(rt_bitwise_equal(ga, remat_tensor_grad(a)));
    cr_assert_eq(calls, 3, "each backward pass recomputes once");
    remat_release(ga);
    remat_tensor *all[] = {l, lr, l0, l0r, out[0], out[1], ref[0], ref[1], a, b};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) remat_release(all[i]);
    cr_assert_eq(remat_live_tensors(), 0);
}

/* ---- access outside backward (PyTorch: test_access_saved_tensor_twice_...) --------------------- */
/* b = a * a; c = a * b; d = exp(a) */
static int foo_fn(void *ud, remat_tensor *const *in, int n_in, remat_tensor **out, int n_out) {
    (void)n_in;
    (void)n_out;
    (*(int *)ud)++;
    remat_tensor *b = NULL, *c = NULL;
    int rc = remat_mul(&b, in[0], in[0]);
    if (!rc) rc = remat_mul(&c, in[0], b);
    if (!rc) rc = remat_exp(&out[0], in[0]);
    remat_release(b);
    remat_release(c);
    return rc;
}

Test(checkpoint, access_outside_backward_recomputes_each_time) {
    int64_t sh[] = {5};
    remat_tensor *a = leaf(1, sh, 4), *d, *t;
    int count = 0;
    remat_checkpoint_options o = nonre();
    RT_OK(remat_checkpoint(foo_fn, &count, 1, &a, 1, &d, &o));
    cr_assert_eq(count, 1);
    remat_node *n = remat_grad_fn(d);
    cr_assert_str_eq(remat_node_name(n), "ExpBackward");
    RT_OK(rm_node_unpack(n, 0, &t));
    cr_assert_eq(count, 2);
    /* the value is the forward's result */
    rt_assert_close(t, d, 0, 0, "recomputed exp(a)");
    remat_release(t);
    RT_OK(rm_node_unpack(n, 0, &t));
    cr_assert_eq(count, 3);
    remat_release(t);
    remat_tensor *l = sum_all(d);
    RT_OK(remat_backward_scalar(l));
    cr_assert_eq(count, 4);
    RT_FAILS(rm_node_unpack(n, 0, &t), REMAT_ESTATE,
             "directly access saved tensors after they have already been freed");
    cr_assert_eq(count, 4);
    remat_release(l);
    remat_release(d);
    remat_release(a);
    cr_assert_eq(remat_live_tensors(), 0);
}

/* ---- a custom function reading its saved tensor twice --------------------------------------- */
static int twice_status = -1;
static char twice_msg[512];
static bool read_twice;

static int myfunc_forward(remat_function_ctx *ctx, void *ud, remat_tensor *const *in, int n_in,
                          remat_tensor **out, int n_out) {
    (void)ud;
    (void)n_in;
    (void)n_out;
    remat_tensor *w = NULL, *w2 = NULL;
    int rc = remat_mul(&w, in[0], in[1]);
    if (!rc) rc = remat_mul(&w2, w, in[2]);
    if (!rc) rc = remat_add(&out[0], w2, w2);
    remat_tensor *save[5] = {in[0], in[1], in[2], w2, out[0]};
    if (!rc) rc = remat_ctx_save_for_backward(ctx, 5, save);
    remat_release(w);
    remat_release(w2);
    return rc;
}

/* d(2xyz)/dx = 2yz etc. */
static int myfunc_backward(remat_function_ctx *ctx, void *ud, remat_tensor *const *gout, int n_out,
                           remat_tensor **gin, int n_in) {
    (void)ud;
    (void)n_out;
    (void)n_in;
    remat_tensor *s[5] = {0};
    for (int i = 0; i < 5; i++) {
        int rc = remat_ctx_saved(ctx, i, &s[i]);
        if (rc) return rc;
    }
    if (read_twice) {
        remat_tensor *again = NULL;
        twice_status = remat_ctx_saved(ctx, 0, &again);
        snprintf(twice_msg, sizeof twice_msg, "%s", remat_last_error());
        remat_release(again);
    }
    int rc = REMAT_OK;
    for (int i = 0; i < 3 && !rc; i++) {
        remat_tensor *p = NULL, *q = NULL;
        rc = remat_mul(&p, s[(i + 1) % 3], s[(i + 2) % 3]);
        if (!rc) rc = remat_mul_scalar(&q, p, 2.0);
        if (!rc) rc = remat_mul(&gin[i], q, gout[0]);
        remat_release(p);
        remat_release(q);
    }
    for (int i = 0; i < 5; i++) remat_release(s[i]);
    return rc;
}

static const remat_function_def k_myfunc = {"MyFunc", myfunc_forward, myfunc_backward, NULL};

/* x = x*y*z; y = y*y*z; z = z*z; MyFunc(x, y, z) */
static int custom_fn(void *ud, remat_tensor *const *in, int n_in, remat_tensor **out, int n_out) {
    (void)n_in;
    (void)n_out;
    (void)ud;
    remat_tensor *t[6] = {0};
    int rc = remat_mul(&t[0], in[0], in[1]);
    if (!rc) rc = remat_mul(&t[1], t[0], in[2]);
    if (!rc) rc = remat_mul(&t[2], in[1], in[1]);
    if (!rc) rc = remat_mul(&t[3], t[2], in[2]);
    if (!rc) rc = remat_mul(&t[4], in[2], in[2]);
    remat_tensor *args[3] = {t[1], t[3], t[4]};
    if (!rc) rc = remat_function_apply(&k_myfunc, NULL, 3, args, 1, out);
    for (int i = 0; i < 6; i++) remat_release(t[i]);
    return rc;
}

Test(checkpoint, custom_function_reading_saved_tensor_twice_fails) {
    for (int early = 0; early < 2; early++) {
        double v[] = {1.0, 2.0, 3.0};
        remat_tensor *x[3];
        for (int i = 0; i < 3; i++) {
            x[i] = rt_tensor(0, NULL, REMAT_F64, &v[i]);
            RT_OK(remat_set_requires_grad(x[i], true));
        }
        remat_checkpoint_options o = nonre();
        o.early_stop = early ? REMAT_OPT_TRUE : REMAT_OPT_FALSE;
        remat_tensor *out;
        /* reading once: gradients as without checkpoint */
        read_twice = false;
        RT_OK(remat_checkpoint(custom_fn, NULL, 3, x, 1, &out, &o));
        remat_tensor *g[3], *gr[3], *ref;
        RT_OK(remat_grad(1, &out, NULL, 3, x, false, false, g));
        RT_OK(custom_fn(NULL, x, 3, &ref, 1));
        RT_OK(remat_grad(1, &ref, NULL, 3, x, false, false, gr));
        for (int i = 0; i < 3; i++) {
            cr_assert(rt_bitwise_equal(g[i], gr[i]), "grad %d", i);
            remat_release(g[i]);
            remat_release(gr[i]);
        }
        remat_release(ref);
        remat_release(out);
        /* reading twice: the second read fails */
        read_twice = true;
        twice_status = -1;
        RT_OK(remat_checkpoint(custom_fn, NULL, 3, x, 1, &out, &o));
        RT_OK(remat_backward_scalar(out));
        cr_assert_eq(twice_status, REMAT_ESTATE);
        cr_assert(strstr(twice_msg, "Unpack is being triggered for a tensor that was already "
                                    "unpacked once"),
                  "%s", twice_msg);
        remat_release(out);
        for (int i = 0; i < 3; i++) remat_release(x[i]);
    }
    cr_assert_eq(remat_live_tensors(), 0);
}

/* ---- determinism checks ------------------------------------------------------------------- */
enum { M_SAVE2, M_SAVE3, M_SAVE2_RESHAPED, M_SAVE2_OTHER_VALUES };
typedef struct nondet {
    int calls;
    int orig, recomp;
} nondet;

/* M_SAVE2: exp(exp(x)) saves 2; M_SAVE3: tanh(exp(exp(x))) saves 3;
 * M_SAVE2_RESHAPED: the same two saves with x viewed as (3, 2) instead of
 * (2, 3); M_SAVE2_OTHER_VALUES: exp(exp(2x)). */
static int nondet_fn(void *ud, remat_tensor *const *in, int n_in, remat_tensor **out, int n_out) {
    nondet *d = ud;
    (void)n_in;
    (void)n_out;
    int mode = d->calls++ == 0 ? d->orig : d->recomp;
    remat_tensor *x = remat_retain(in[0]), *t = NULL;
    int rc = REMAT_OK;
    if (mode == M_SAVE2_RESHAPED) {
        int64_t sh[] = {3, 2};
        rc = remat_reshape(&t, x, 2, sh);
        remat_release(x);
        x = t;
    } else if (mode == M_SAVE2_OTHER_VALUES) {
        rc = remat_mul_scalar(&t, x, 2.0);
        remat_release(x);
        x = t;
    }
    int n = mode == M_SAVE3 ? 3 : 2;
    for (int i = 0; i < n && !rc; i++) {
        rc = i == 2 ? remat_tanh(&t, x) : remat_exp(&t, x);
        remat_release(x);
        x = t;
    }
    if (!rc && mode == M_SAVE2_RESHAPED) {
        int64_t sh[] = {2, 3};
        rc = remat_reshape(&t, x, 2, sh);
        remat_release(x);
        x = t;
    }
    if (rc) {
        remat_release(x);
        return rc;
    }
    out[0] = x;
    return REMAT_OK;
}

/* Runs checkpoint(nondet) and backward; returns the backward status. */
static int run_nondet(int orig, int recomp, remat_checkpoint_options o) {
    int64_t sh[] = {2, 3};
    remat_tensor *x = leaf(2, sh, 1), *y;
    nondet d = {0, orig, recomp};
    RT_OK(remat_checkpoint(nondet_fn, &d, 1, &x, 1, &y, &o));
    remat_tensor *l = sum_all(y);
    int rc = remat_backward_scalar(l);
    remat_release(l);
    remat_release(y);
    remat_release(x);
    cr_assert_eq(remat_live_tensors(), 0, "leak after a failed recomputation");
    return rc;
}

Test(checkpoint, determinism_fewer_tensors_saved) {
    for (int early = 0; early < 2; early++) {
        remat_checkpoint_options o = nonre();
        o.early_stop = early ? REMAT_OPT_TRUE : REMAT_OPT_FALSE;
        RT_FAILS(run_nondet(M_SAVE3, M_SAVE2, o), REMAT_EDETERMINISM,
                 "A different number of tensors was saved during the original forward and "
                 "recomputation.\nNumber of tensors saved during forward: 3\nNumber of tensors "
                 "saved during recomputation: 2");
        cr_assert(strstr(remat_last_error(), "remat_backward"), "%s", remat_last_error());
        /* "none" still checks the count */
        o.determinism_check = REMAT_DETERMINISM_NONE;
        RT_FAILS(run_nondet(M_SAVE3, M_SAVE2, o), REMAT_EDETERMINISM,
                 "A different number of tensors was saved");
    }
}

Test(checkpoint, determinism_more_tensors_saved_masked_by_early_stop) {
    remat_checkpoint_options o = nonre();
    o.early_stop = REMAT_OPT_FALSE;
    RT_FAILS(run_nondet(M_SAVE2, M_SAVE3, o), REMAT_EDETERMINISM,
             "trying to save more tensors during recomputation than during the original "
             "forward pass");
    /* with early stop, recomputation stops before the extra save: no error */
    o.early_stop = REMAT_OPT_DEFAULT;
    RT_OK(run_nondet(M_SAVE2, M_SAVE3, o));
}

/* PyTorch's spelling of determinism_check, for programs that take it as text. */
Test(checkpoint, determinism_check_parse) {
    remat_determinism_check dc = REMAT_DETERMINISM_NONE;
    RT_OK(remat_determinism_check_parse("default", &dc));
    cr_assert_eq(dc, REMAT_DETERMINISM_DEFAULT);
    RT_OK(remat_determinism_check_parse("none", &dc));
    cr_assert_eq(dc, REMAT_DETERMINISM_NONE);
    RT_FAILS(remat_determinism_check_parse("bogus", &dc), REMAT_EINVAL,
             "determinism_check should be one of ['default', 'none'], but got 'bogus'");
    cr_assert_eq(dc, REMAT_DETERMINISM_NONE, "a failed parse leaves *out alone");
    RT_FAILS(remat_determinism_check_parse("Default", &dc), REMAT_EINVAL, "'Default'");
    RT_FAILS(remat_determinism_check_parse(NULL, &dc), REMAT_EINVAL, "NULL");
    RT_FAILS(remat_determinism_check_parse("none", NULL), REMAT_EINVAL, "NULL");
}

/* A zero-initialised options struct is PyTorch's defaults: the enums' zero values
 * are the "not set" / "default" ones. */
Test(checkpoint, zero_options_are_defaults) {
    remat_checkpoint_options o = {0};
    cr_assert_eq(o.use_reentrant, REMAT_OPT_DEFAULT);
    cr_assert_eq(o.preserve_rng_state, REMAT_OPT_DEFAULT);
    cr_assert_eq(o.debug, REMAT_OPT_DEFAULT);
    cr_assert_eq(o.early_stop, REMAT_OPT_DEFAULT);
    cr_assert_eq(o.determinism_check, REMAT_DETERMINISM_DEFAULT);
}

Test(checkpoint, determinism_metadata_lists_every_position) {
    remat_checkpoint_options o = nonre();
    /* the device the tensors live on is named in the metadata (the test device, cpu:0 by
     * default) */
    char want[512];
    snprintf(want, sizeof want,
             "Recomputed values for the following tensors have different metadata than during "
             "the forward pass.\ntensor at position 0:\nsaved metadata: {shape: [2, 3], dtype: "
             "f64, device: %s}\nrecomputed metadata: {shape: [3, 2], dtype: f64, device: "
             "%s}\ntensor at position 1:\nsaved metadata: {shape: [2, 3]",
             rt_tensor_device_str(), rt_tensor_device_str());
    RT_FAILS(run_nondet(M_SAVE2, M_SAVE2_RESHAPED, o), REMAT_EDETERMINISM, want);
    cr_assert(strstr(remat_last_error(), "Tip: to see a more detailed error message"));
    /* "none": no up-front metadata comparison — but a tensor of another
     * shape is still never handed to a backward kernel */
    o.determinism_check = REMAT_DETERMINISM_NONE;
    RT_FAILS(run_nondet(M_SAVE2, M_SAVE2_RESHAPED, o), REMAT_EDETERMINISM,
             "determinism_check \"none\"");
    /* different values with equal metadata pass both checks (as in PyTorch) */
    o.determinism_check = REMAT_DETERMINISM_DEFAULT;
    RT_OK(run_nondet(M_SAVE2, M_SAVE2_OTHER_VALUES, o));
}

Test(checkpoint, debug_report_shows_both_traces) {
    remat_checkpoint_options o = nonre();
    o.debug = REMAT_OPT_TRUE;
    RT_FAILS(run_nondet(M_SAVE2, M_SAVE2_RESHAPED, o), REMAT_EDETERMINISM,
             "You are seeing this error because you passed debug=true to checkpoint");
    const char *m = remat_last_error();
    cr_assert(strstr(m, "Recomputed values for the following tensors have different metadata"),
              "%s", m);
    cr_assert(strstr(m, "original forward"), "%s", m);
    const char *rep = remat_checkpoint_debug_report();
    /* side by side: the forward ran exp, exp; the recompute reshape first */
    char row[128];
    snprintf(row, sizeof row, "%-32s  %-32s  <-- differs", "remat_exp", "remat_reshape");
    cr_assert(strstr(rep, row), "%s", rep);
    cr_assert(strstr(rep, "<-- differs"), "%s", rep);
    cr_assert(strstr(rep, "remat_exp   (1 of 2 in original forward)"), "%s", rep);
    cr_assert(strstr(rep, "remat_reshape   (1 of"), "%s", rep);
    cr_assert(strstr(rep, "    at "), "call sites: %s", rep);
    /* count errors get the report too */
    RT_FAILS(run_nondet(M_SAVE3, M_SAVE2, o), REMAT_EDETERMINISM, "You are seeing this error");
}

Test(checkpoint, global_debug_override_both_ways) {
    remat_checkpoint_options o = nonre();
    o.debug = REMAT_OPT_FALSE;
    int prev = remat_set_checkpoint_debug(REMAT_OPT_TRUE);
    cr_assert_eq(prev, REMAT_OPT_DEFAULT);
    cr_assert_eq(remat_get_checkpoint_debug(), REMAT_OPT_TRUE);
    RT_FAILS(run_nondet(M_SAVE2, M_SAVE2_RESHAPED, o), REMAT_EDETERMINISM,
             "You are seeing this error because you passed debug=true");
    remat_set_checkpoint_debug(REMAT_OPT_FALSE);
    o.debug = REMAT_OPT_TRUE;
    RT_FAILS(run_nondet(M_SAVE2, M_SAVE2_RESHAPED, o), REMAT_EDETERMINISM,
             "Recomputed values for the following tensors have different");
    cr_assert_null(strstr(remat_last_error(), "You are seeing this error"));
    cr_assert_eq(remat_set_checkpoint_debug(REMAT_OPT_DEFAULT), REMAT_OPT_FALSE);
}

/* ---- early stop ----------------------------------------------------------------------------- */
/* A custom clone that counts how often it really computed (not in skip mode). */
static int real_clones;
static int clone_forward(remat_function_ctx *ctx, void *ud, remat_tensor *const *in, int n_in,
                         remat_tensor **out, int n_out) {
    (void)ctx;
    (void)ud;
    (void)n_in;
    (void)n_out;
    int rc = remat_clone(&out[0], in[0]);
    /* in skip mode the clone is a data-less tensor */
    if (!rc && rt_has_data(out[0])) real_clones++;
    return rc;
}
static int clone_backward(remat_function_ctx *ctx, void *ud, remat_tensor *const *gout, int n_out,
                          remat_tensor **gin, int n_in) {
    (void)ctx;
    (void)ud;
    (void)n_out;
    (void)n_in;
    gin[0] = remat_retain(gout[0]);
    return REMAT_OK;
}
static const remat_function_def k_clone = {"CountingClone", clone_forward, clone_backward, NULL};

/* clone(exp(tanh(x))): the clone saves nothing, so with early stop the
 * recomputation skips it. */
static int clone_fn(void *ud, remat_tensor *const *in, int n_in, remat_tensor **out, int n_out) {
    (void)ud;
    (void)n_in;
    (void)n_out;
    remat_tensor *a = NULL, *b = NULL;
    int rc = remat_tanh(&a, in[0]);
    if (!rc) rc = remat_exp(&b, a);
    if (!rc) rc = remat_function_apply(&k_clone, NULL, 1, &b, 1, out);
    remat_release(a);
    remat_release(b);
    return rc;
}

static int clones_for(remat_checkpoint_options o, remat_tristate global) {
    int64_t sh[] = {3};
    remat_tensor *x = leaf(1, sh, 1), *y;
    real_clones = 0;
    remat_tristate prev = remat_set_checkpoint_early_stop(global);
    RT_OK(remat_checkpoint(clone_fn, NULL, 1, &x, 1, &y, &o));
    /* the override is read at forward time: reset it before backward */
    remat_set_checkpoint_early_stop(prev);
    remat_tensor *l = sum_all(y);
    RT_OK(remat_backward_scalar(l));
    remat_release(l);
    remat_release(y);
    remat_release(x);
    return real_clones;
}

Test(checkpoint, early_stop_skips_the_rest_and_global_override_wins) {
    remat_checkpoint_options o = nonre();
    int nc = clones_for(o, REMAT_OPT_DEFAULT);
    cr_assert_eq(nc, 1, "early stop is on by default (%d)", nc);
    o.early_stop = REMAT_OPT_FALSE;
    cr_assert_eq(clones_for(o, REMAT_OPT_DEFAULT), 2);
    o.early_stop = REMAT_OPT_TRUE;
    cr_assert_eq(clones_for(o, REMAT_OPT_FALSE), 2, "override off beats early_stop on");
    o.early_stop = REMAT_OPT_FALSE;
    cr_assert_eq(clones_for(o, REMAT_OPT_TRUE), 1, "override on beats early_stop off");
    cr_assert_eq(remat_get_checkpoint_early_stop(), REMAT_OPT_DEFAULT);
    cr_assert_eq(remat_live_tensors(), 0);
}

/* Ops that save only their inputs (linear, matmul, gelu) save before their
 * kernel, so an early-stopped recomputation does not run the last one:
 * y = linear2(gelu(linear1(x))) (last save: linear2's inputs) and
 * y = gelu(linear1(x)) (last save: gelu's input). `real` counts the calls in
 * which y was really computed (it has data), `mid` those in which the
 * tensor feeding the last op was. */
typedef struct last_op {
    remat_tensor *w1, *b1, *w2, *b2;
    bool gelu_last;
    int real, mid;
} last_op;

static int last_op_fn(void *ud, remat_tensor *const *in, int n_in, remat_tensor **out, int n_out) {
    (void)n_in;
    (void)n_out;
    last_op *l = ud;
    remat_tensor *h = NULL, *g = NULL;
    int rc = remat_linear(&h, in[0], l->w1, l->b1);
    if (!rc && l->gelu_last) {
        rc = remat_gelu(&out[0], h, REMAT_GELU_TANH);
        g = remat_retain(h);
    } else if (!rc) {
        rc = remat_gelu(&g, h, REMAT_GELU_ERF);
        if (!rc) rc = remat_linear(&out[0], g, l->w2, l->b2);
    }
    if (!rc && rt_has_data(out[0])) l->real++;
    if (!rc && rt_has_data(g)) l->mid++;
    remat_release(h);
    remat_release(g);
    return rc;
}

/* one step of last_op_fn (checkpointed or not); returns x's gradient and
 * fills the parameters' */
static remat_tensor *last_op_step(last_op *l, remat_tensor *x, const remat_checkpoint_options *o,
                                  remat_tensor **pg) {
    remat_tensor *y = NULL, *p[4] = {l->w1, l->b1, l->w2, l->b2};
    for (int i = 0; i < 4; i++) RT_OK(remat_set_grad(p[i], NULL));
    RT_OK(remat_set_grad(x, NULL));
    if (o) RT_OK(remat_checkpoint(last_op_fn, l, 1, &x, 1, &y, o));
    else RT_OK(last_op_fn(l, &x, 1, &y, 1));
    remat_tensor *s = sum_all(y);
    RT_OK(remat_backward_scalar(s));
    remat_release(s);
    remat_release(y);
    for (int i = 0; i < 4; i++) pg[i] = remat_retain(remat_tensor_grad(p[i]));
    return remat_retain(remat_tensor_grad(x));
}

Test(checkpoint, early_stop_does_not_run_the_last_ops_kernel) {
    int64_t sx[] = {4, 5}, sw1[] = {6, 5}, sb1[] = {6}, sw2[] = {3, 6}, sb2[] = {3};
    for (int gelu_last = 0; gelu_last < 2; gelu_last++) {
        last_op l = {leaf(2, sw1, 11),
                     leaf(1, sb1, 12),
                     leaf(2, sw2, 13),
                     leaf(1, sb2, 14),
                     gelu_last,
                     0,
                     0};
        remat_tensor *x = leaf(2, sx, 15), *ref_p[4], *got_p[4];
        remat_tensor *ref = last_op_step(&l, x, NULL, ref_p);
        for (int early = 0; early < 2; early++) {
            remat_checkpoint_options o = nonre();
            o.early_stop = early ? REMAT_OPT_TRUE : REMAT_OPT_FALSE;
            l.real = l.mid = 0;
            remat_tensor *got = last_op_step(&l, x, &o, got_p);
            /* forward + recomputation; with early stop the last op is not run again */
            cr_assert_eq(l.real, early ? 1 : 2, "gelu_last=%d early=%d: y computed %d times",
                         gelu_last, early, l.real);
            cr_assert_eq(l.mid, 2, "the last op's input is recomputed (%d)", l.mid);
            cr_assert(rt_bitwise_equal(got, ref), "x grad");
            for (int i = 0; i < 4; i++) {
                /* gelu_last leaves w2, b2 out of the graph */
                if (!ref_p[i]) continue;
                cr_assert(rt_bitwise_equal(got_p[i], ref_p[i]), "param %d grad", i);
                remat_release(got_p[i]);
            }
            remat_release(got);
        }
        for (int i = 0; i < 4; i++) remat_release(ref_p[i]);
        remat_release(ref);
        remat_release(x);
        remat_release(l.w1);
        remat_release(l.b1);
        remat_release(l.w2);
        remat_release(l.b2);
    }
    cr_assert_eq(remat_live_tensors(), 0);
}

/* PyTorch: test_nested_checkpoint_set_early_stop_no_recompution_needed, case 2:
 * a function that saves nothing is never recomputed. */
static int clone_only_fn(void *ud, remat_tensor *const *in, int n_in, remat_tensor **out,
                         int n_out) {
    (void)n_in;
    (void)n_out;
    (*(int *)ud)++;
    return remat_clone(&out[0], in[0]);
}

Test(checkpoint, function_saving_nothing_is_not_recomputed) {
    for (int early = 0; early < 2; early++) {
        int64_t sh[] = {3};
        remat_tensor *x = leaf(1, sh, 1), *y;
        int calls = 0;
        remat_checkpoint_options o = nonre();
        o.early_stop = early ? REMAT_OPT_TRUE : REMAT_OPT_FALSE;
        RT_OK(remat_checkpoint(clone_only_fn, &calls, 1, &x, 1, &y, &o));
        remat_tensor *l = sum_all(y);
        RT_OK(remat_backward_scalar(l));
        cr_assert_eq(calls, 1);
        remat_release(l);
        remat_release(y);
        remat_release(x);
    }
    cr_assert_eq(remat_live_tensors(), 0);
}

/* ---- nesting (PyTorch: TestNestedCheckpoint) ------------------------------------------------------ */
typedef struct nest {
    int depth; /* checkpoints still to wrap around the core */
    remat_checkpoint_fn core;
    void *core_ud;
    remat_checkpoint_options o;
} nest;

static int nest_fn(void *ud, remat_tensor *const *in, int n_in, remat_tensor **out, int n_out) {
    nest *n = ud;
    if (n->depth == 0) return n->core(n->core_ud, in, n_in, out, n_out);
    nest inner = *n;
    inner.depth--;
    /* the inner nest lives on this stack frame, but the inner checkpoint
     * keeps it: copy it to the heap and let the checkpoint free it */
    nest *h = malloc(sizeof *h);
    *h = inner;
    remat_checkpoint_options o = n->o;
    o.user_data_destroy = free;
    return remat_checkpoint(nest_fn, h, n_in, in, n_out, out, &o);
}

/* f(x) = tanh(exp(tanh(x))) */
static int f_fn(void *ud, remat_tensor *const *in, int n_in, remat_tensor **out, int n_out) {
    chain c = {0, 3, NULL};
    int rc = chain_fn(&c, in, n_in, out, n_out);
    if (ud) (*(int *)ud)++;
    return rc;
}

/* g(x): a, b as f; ga = grad(sum a, x); gb = grad(sum b, x); return tanh(x) * ga */
static int g_fn(void *ud, remat_tensor *const *in, int n_in, remat_tensor **out, int n_out) {
    (void)ud;
    remat_tensor *a = NULL, *b = NULL, *sa = NULL, *sb = NULL, *ga = NULL, *gb = NULL, *t = NULL;
    int rc = f_fn(NULL, in, n_in, &a, n_out);
    if (!rc) rc = f_fn(NULL, in, n_in, &b, n_out);
    if (!rc) rc = remat_sum_all(&sa, a);
    if (!rc) rc = remat_sum_all(&sb, b);
    remat_tensor *x = in[0];
    if (!rc) rc = remat_grad(1, &sa, NULL, 1, &x, false, false, &ga);
    if (!rc) rc = remat_grad(1, &sb, NULL, 1, &x, false, false, &gb);
    if (!rc) rc = remat_tanh(&t, x);
    /* ga does not require grad (no create_graph): use it as a constant */
    if (!rc) rc = remat_mul(&out[0], t, ga);
    remat_tensor *all[] = {a, b, sa, sb, ga, gb, t};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) remat_release(all[i]);
    return rc;
}

static remat_tensor *grad_of(remat_checkpoint_fn fn, void *ud, remat_tensor *x) {
    remat_tensor *y, *g;
    RT_OK(fn(ud, &x, 1, &y, 1));
    remat_tensor *l = sum_all(y);
    RT_OK(remat_grad(1, &l, NULL, 1, &x, false, false, &g));
    remat_release(l);
    remat_release(y);
    return g;
}

Test(checkpoint, nested_three_levels_both_early_stop) {
    remat_checkpoint_fn cores[2] = {f_fn, g_fn};
    for (int early = 0; early < 2; early++) {
        for (int k = 0; k < 2; k++) {
            int64_t sh[] = {2, 2};
            remat_tensor *x = leaf(2, sh, 7);
            remat_tensor *expected = grad_of(cores[k], NULL, x);
            for (int depth = 1; depth <= 3; depth++) {
                nest n = {depth, cores[k], NULL, nonre()};
                n.o.early_stop = early ? REMAT_OPT_TRUE : REMAT_OPT_FALSE;
                remat_tensor *actual = grad_of(nest_fn, &n, x);
                cr_assert(rt_bitwise_equal(expected, actual), "core %d depth %d early %d", k, depth,
                          early);
                remat_release(actual);
                /* and the forward values agree */
                remat_tensor *y1, *y2;
                RT_OK(cores[k](NULL, &x, 1, &y1, 1));
                RT_OK(nest_fn(&n, &x, 1, &y2, 1));
                cr_assert(rt_bitwise_equal(y1, y2));
                remat_release(y1);
                remat_release(y2);
            }
            remat_release(expected);
            remat_release(x);
            cr_assert_eq(remat_live_tensors(), 0, "graph of nested checkpoints must die");
        }
    }
}

/* alternates reentrant / non-reentrant by level */
typedef struct mixnest {
    int depth;
    int reentrant_first;
} mixnest;

static int mixnest_fn(void *ud, remat_tensor *const *in, int n_in, remat_tensor **out, int n_out) {
    mixnest *m = ud;
    if (m->depth == 0) return f_fn(NULL, in, n_in, out, n_out);
    mixnest *h = malloc(sizeof *h);
    *h = (mixnest){m->depth - 1, !m->reentrant_first};
    remat_checkpoint_options o = {0};
    o.use_reentrant = m->reentrant_first ? REMAT_OPT_TRUE : REMAT_OPT_FALSE;
    o.user_data_destroy = free;
    return remat_checkpoint(mixnest_fn, h, n_in, in, n_out, out, &o);
}

Test(checkpoint, reentrant_and_non_reentrant_nest_in_each_other) {
    int64_t sh[] = {2, 3};
    remat_tensor *x = leaf(2, sh, 21);
    remat_tensor *y0, *l0;
    RT_OK(f_fn(NULL, &x, 1, &y0, 1));
    RT_OK(remat_sum_all(&l0, y0));
    RT_OK(remat_backward_scalar(l0));
    remat_tensor *expected = remat_retain(remat_tensor_grad(x));
    for (int first = 0; first < 2; first++) {
        for (int depth = 2; depth <= 3; depth++) {
            rt_zero_grads(1, &x);
            mixnest m = {depth, first};
            remat_tensor *y, *l;
            RT_OK(mixnest_fn(&m, &x, 1, &y, 1));
            RT_OK(remat_sum_all(&l, y));
            RT_OK(remat_backward_scalar(l));
            cr_assert(rt_bitwise_equal(expected, remat_tensor_grad(x)), "first %d depth %d", first,
                      depth);
            remat_release(l);
            remat_release(y);
        }
    }
    remat_release(expected);
    remat_release(l0);
    remat_release(y0);
    remat_release(x);
    cr_assert_eq(remat_live_tensors(), 0);
}

Test(checkpoint, nested_counts_three_levels) {
    /* every level's function runs once in forward; backward recomputes the
     * outermost once and each inner one twice more (once inside its parent's
     * recomputation, once for its own) — as PyTorch does */
    int64_t sh[] = {3};
    remat_tensor *x = leaf(1, sh, 2);
    int core_calls = 0;
    nest n = {3, f_fn, &core_calls, nonre()};
    n.o.early_stop = REMAT_OPT_FALSE;
    remat_tensor *y;
    RT_OK(nest_fn(&n, &x, 1, &y, 1));
    cr_assert_eq(core_calls, 1);
    remat_tensor *l = sum_all(y);
    RT_OK(remat_backward_scalar(l));
    /* without early stop: level 1 recomputes levels 2-3 and the core (1),
     * level 2 recomputes (2), level 3 (3) */
    cr_assert_eq(core_calls, 4, "core ran %d times", core_calls);
    remat_release(l);
    remat_release(y);
    remat_release(x);
    cr_assert_eq(remat_live_tensors(), 0);
}

/* hc(x) = c(g2)(c(f2)(x)) */
typedef struct sib {
    remat_checkpoint_options o;
    int f_calls, g_calls;
} sib;

static int sib_f(void *ud, remat_tensor *const *in, int n_in, remat_tensor **out, int n_out) {
    sib *s = ud;
    s->f_calls++;
    chain c = {0, 3, NULL};
    return chain_fn(&c, in, n_in, out, n_out);
}
static int sib_g(void *ud, remat_tensor *const *in, int n_in, remat_tensor **out, int n_out) {
    sib *s = ud;
    s->g_calls++;
    chain c = {0, 4, NULL};
    return chain_fn(&c, in, n_in, out, n_out);
}
static int sib_h(void *ud, remat_tensor *const *in, int n_in, remat_tensor **out, int n_out) {
    sib *s = ud;
    (void)n_in;
    (void)n_out;
    remat_tensor *t = NULL;
    int rc = s->o.use_reentrant ? remat_checkpoint(sib_f, s, 1, in, 1, &t, &s->o)
                                : sib_f(s, in, 1, &t, 1);
    if (!rc)
        rc = s->o.use_reentrant ? remat_checkpoint(sib_g, s, 1, &t, 1, out, &s->o)
                                : sib_g(s, &t, 1, out, 1);
    remat_release(t);
    return rc;
}

Test(checkpoint, two_sibling_checkpoints_inside_an_outer_one) {
    for (int early = 0; early < 2; early++) {
        int64_t sh[] = {3, 3};
        remat_tensor *x = leaf(2, sh, 11);
        sib plain = {{0}, 0, 0};
        remat_tensor *expected = grad_of(sib_h, &plain, x);
        sib s = {nonre(), 0, 0};
        s.o.early_stop = early ? REMAT_OPT_TRUE : REMAT_OPT_FALSE;
        remat_checkpoint_options outer = s.o;
        remat_tensor *y, *g;
        RT_OK(remat_checkpoint(sib_h, &s, 1, &x, 1, &y, &outer));
        cr_assert_eq(s.f_calls, 1);
        cr_assert_eq(s.g_calls, 1);
        remat_tensor *l = sum_all(y);
        RT_OK(remat_grad(1, &l, NULL, 1, &x, false, false, &g));
        cr_assert(rt_bitwise_equal(expected, g), "early %d", early);
        remat_release(g);
        remat_release(l);
        remat_release(y);
        remat_release(expected);
        remat_release(x);
        cr_assert_eq(remat_live_tensors(), 0);
    }
}

/* ---- grad() inside and around a checkpoint (PyTorch: Rule 6) ------------------------------------- */
Test(checkpoint, grad_inside_and_around_checkpoint) {
    for (int early = 0; early < 2; early++) {
        int64_t sh[] = {4};
        remat_tensor *x = leaf(1, sh, 3);
        remat_tensor *expected = grad_of(g_fn, NULL, x);
        remat_checkpoint_options o = nonre();
        o.early_stop = early ? REMAT_OPT_TRUE : REMAT_OPT_FALSE;
        remat_tensor *y, *g;
        RT_OK(remat_checkpoint(g_fn, NULL, 1, &x, 1, &y, &o));
        remat_tensor *l = sum_all(y);
        RT_OK(remat_grad(1, &l, NULL, 1, &x, true, false, &g));
        cr_assert(rt_bitwise_equal(expected, g), "grad around, early %d", early);
        remat_release(g);
        /* and backward into .grad after that (retained graph) */
        RT_OK(remat_backward_scalar(l));
        cr_assert(rt_bitwise_equal(expected, remat_tensor_grad(x)));
        remat_release(l);
        remat_release(y);
        remat_release(expected);
        remat_release(x);
        cr_assert_eq(remat_live_tensors(), 0);
    }
}

/* ---- inputs changed in place after the forward ----------------------------------------------- */
Test(checkpoint, input_modified_in_place_is_detected) {
    int64_t sh[] = {3};
    remat_tensor *x0 = leaf(1, sh, 1), *x, *y;
    RT_OK(remat_mul_scalar(&x, x0, 1.0)); /* non-leaf, may be changed in place */
    chain c = {0, 2, NULL};
    remat_checkpoint_options o = nonre();
    RT_OK(remat_checkpoint(chain_fn, &c, 1, &x, 1, &y, &o));
    bool prev = remat_no_grad_begin();
    RT_OK(remat_mul_scalar_(x, 3.0));
    remat_grad_mode_restore(prev);
    remat_tensor *l = sum_all(y);
    RT_FAILS(remat_backward_scalar(l), REMAT_EVERSION, "modified by an in-place operation");
    remat_release(l);
    remat_release(y);
    remat_release(x);
    remat_release(x0);
    cr_assert_eq(remat_live_tensors(), 0);
}

/* ---- context_fn ------------------------------------------------------------------------------- */
typedef struct ctx_log {
    int fwd_enter, fwd_exit, rec_enter, rec_exit, destroyed, made;
    int ops_in_fwd, ops_in_rec;
    bool in_fwd, in_rec;
    int fail_rec_enter;
} ctx_log;

static void ctx_observer(void *ud, const char *op) {
    ctx_log *l = ud;
    (void)op;
    if (l->in_fwd) l->ops_in_fwd++;
    if (l->in_rec) l->ops_in_rec++;
}
static int c_fwd_enter(void *st) {
    ctx_log *l = st;
    l->fwd_enter++;
    l->in_fwd = true;
    rm_set_op_observer(ctx_observer, l, NULL, NULL);
    return REMAT_OK;
}
static int c_fwd_exit(void *st, int status) {
    ctx_log *l = st;
    l->fwd_exit++;
    l->in_fwd = false;
    rm_set_op_observer(NULL, NULL, NULL, NULL);
    return status;
}
static int c_rec_enter(void *st) {
    ctx_log *l = st;
    if (l->fail_rec_enter) return remat_set_error(REMAT_ECALLBACK, "rec_enter refused");
    l->rec_enter++;
    l->in_rec = true;
    rm_set_op_observer(ctx_observer, l, NULL, NULL);
    return REMAT_OK;
}
static int c_rec_exit(void *st, int status) {
    ctx_log *l = st;
    l->rec_exit++;
    l->in_rec = false;
    rm_set_op_observer(NULL, NULL, NULL, NULL);
    return status;
}
static void c_destroy(void *st) { ((ctx_log *)st)->destroyed++; }
static int make_ctx(void *ud, remat_checkpoint_contexts *pair) {
    ctx_log *l = ud;
    l->made++;
    pair->forward_enter = c_fwd_enter;
    pair->forward_exit = c_fwd_exit;
    pair->recompute_enter = c_rec_enter;
    pair->recompute_exit = c_rec_exit;
    pair->destroy = c_destroy;
    pair->state = l;
    return REMAT_OK;
}

Test(checkpoint, context_fn_pair_entered_around_forward_and_recompute) {
    int64_t sh[] = {3};
    remat_tensor *x = leaf(1, sh, 1), *y;
    chain c = {0, 3, NULL};
    ctx_log log = {0};
    remat_checkpoint_options o = nonre();
    o.context_fn = make_ctx;
    o.context_fn_data = &log;
    RT_OK(remat_checkpoint(chain_fn, &c, 1, &x, 1, &y, &o));
    cr_assert_eq(log.made, 1);
    cr_assert_eq(log.fwd_enter, 1);
    cr_assert_eq(log.fwd_exit, 1);
    cr_assert_eq(log.rec_enter, 0);
    cr_assert_eq(log.ops_in_fwd, 3, "exp, tanh, exp ran in the forward context");
    remat_tensor *l = sum_all(y);
    RT_OK(remat_backward(1, &l, NULL, true, 0, NULL));
    cr_assert_eq(log.rec_enter, 1);
    cr_assert_eq(log.rec_exit, 1);
    cr_assert_eq(log.ops_in_rec, 3);
    cr_assert_eq(log.fwd_enter, 1);
    /* a failing recompute context fails the backward */
    log.fail_rec_enter = 1;
    RT_FAILS(remat_backward(1, &l, NULL, true, 0, NULL), REMAT_ECALLBACK, "rec_enter refused");
    cr_assert_eq(log.destroyed, 0);
    remat_release(l);
    remat_release(y);
    cr_assert_eq(log.destroyed, 1, "contexts destroyed with the graph");
    /* grad mode off: context_fn is called, but its contexts are not entered */
    log = (ctx_log){0};
    bool prev = remat_no_grad_begin();
    RT_OK(remat_checkpoint(chain_fn, &c, 1, &x, 1, &y, &o));
    remat_grad_mode_restore(prev);
    cr_assert_eq(log.made, 1);
    cr_assert_eq(log.fwd_enter, 0);
    cr_assert_eq(log.destroyed, 1);
    remat_release(y);
    remat_release(x);
    cr_assert_eq(remat_live_tensors(), 0);
}

/* A context that follows the recomputation it is handed (recompute_attach):
 * at the start of every op it notes how many saves are still to come and
 * whether early stop has ended the recomputation. */
typedef struct recomp_log {
    const remat_recomputation *rec;
    int attached, detached, entered_attached; /* attach(ptr) / attach(NULL) / rec set at enter */
    int n;
    int remaining[8];
    bool stopped[8];
    bool stopped_at_exit;
} recomp_log;

static void recomp_observer(void *ud, const char *op) {
    recomp_log *l = ud;
    (void)op;
    if (l->n < 8) {
        l->remaining[l->n] = remat_recomputation_remaining(l->rec);
        l->stopped[l->n] = remat_recomputation_stopped(l->rec);
    }
    l->n++;
}
static void recomp_attach(void *st, const remat_recomputation *rec) {
    recomp_log *l = st;
    if (rec) l->attached++;
    else l->detached++;
    l->rec = rec;
}
static int recomp_enter(void *st) {
    recomp_log *l = st;
    l->entered_attached += l->rec != NULL;
    rm_set_op_observer(recomp_observer, l, NULL, NULL);
    return REMAT_OK;
}
static int recomp_exit(void *st, int status) {
    recomp_log *l = st;
    l->stopped_at_exit = remat_recomputation_stopped(l->rec);
    rm_set_op_observer(NULL, NULL, NULL, NULL);
    return status;
}
static int make_recomp_ctx(void *ud, remat_checkpoint_contexts *pair) {
    pair->recompute_enter = recomp_enter;
    pair->recompute_exit = recomp_exit;
    pair->recompute_attach = recomp_attach;
    pair->state = ud;
    return REMAT_OK;
}

Test(checkpoint, context_is_handed_the_recomputation) {
    int64_t sh[] = {3};
    remat_tensor *x = leaf(1, sh, 1);
    cr_assert_eq(remat_recomputation_remaining(NULL), -1);
    cr_assert(!remat_recomputation_stopped(NULL));
    for (int early = 1; early >= 0; early--) {
        chain c = {0, 3, NULL}; /* exp, tanh, exp: each saves its output */
        recomp_log log = {0};
        remat_checkpoint_options o = nonre();
        o.context_fn = make_recomp_ctx;
        o.context_fn_data = &log;
        o.early_stop = early ? REMAT_OPT_TRUE : REMAT_OPT_FALSE;
        remat_tensor *y, *l;
        RT_OK(remat_checkpoint(chain_fn, &c, 1, &x, 1, &y, &o));
        cr_assert_eq(log.attached, 0, "no recomputation in the forward");
        l = sum_all(y);
        RT_OK(remat_backward_scalar(l));
        cr_assert_eq(log.attached, 1);
        cr_assert_eq(log.entered_attached, 1, "attached before recompute_enter");
        cr_assert_eq(log.detached, 1, "detached once the recomputation is over");
        cr_assert_null(log.rec);
        cr_assert_eq(log.n, 3);
        for (int i = 0; i < 3; i++) {
            cr_assert_eq(log.remaining[i], early ? 3 - i : -1, "op %d: %d", i, log.remaining[i]);
            cr_assert(!log.stopped[i]);
        }
        cr_assert_eq(log.stopped_at_exit, early == 1, "the last save ended it");
        remat_release(l);
        remat_release(y);
        rt_zero_grads(1, &x);
    }
    remat_release(x);
    cr_assert_eq(remat_live_tensors(), 0);
}

static int failing_ctx(void *ud, remat_checkpoint_contexts *pair) {
    (void)ud;
    (void)pair;
    return REMAT_ECALLBACK;
}

Test(checkpoint, context_fn_failure) {
    int64_t sh[] = {3};
    remat_tensor *x = leaf(1, sh, 1), *y;
    chain c = {0, 3, NULL};
    remat_checkpoint_options o = nonre();
    o.context_fn = failing_ctx;
    RT_FAILS(remat_checkpoint(chain_fn, &c, 1, &x, 1, &y, &o), REMAT_ECALLBACK, "context_fn");
    cr_assert_null(y);
    cr_assert_eq(c.calls, 0);
    remat_release(x);
    cr_assert_eq(remat_live_tensors(), 0);
}

/* ---- scopes -------------------------------------------------------------------------------------- */
Test(checkpoint, outputs_belong_to_the_open_scope) {
    int64_t sh[] = {3};
    remat_tensor *x = leaf(1, sh, 1);
    for (int mode = 0; mode < 2; mode++) {
        chain c = {0, 3, NULL};
        remat_checkpoint_options o = mode ? reent() : nonre();
        remat_scope *s;
        RT_OK(remat_scope_begin(&s));
        remat_tensor *y, *l;
        RT_OK(remat_checkpoint(chain_fn, &c, 1, &x, 1, &y, &o));
        RT_OK(remat_sum_all(&l, y));
        RT_OK(remat_backward_scalar(l));
        RT_OK(remat_scope_end(s));
        cr_assert_eq(c.calls, 2);
        rt_zero_grads(1, &x);
    }
    remat_release(x);
    cr_assert_eq(remat_live_tensors(), 0);
}
