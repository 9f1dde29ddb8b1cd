/* tests/test_ref_misuse.c — reference mistakes are reported, never heap
 * corruption (issue 32): a double remat_release, a use of a released
 * tensor (also after its memory went to another tensor), the block()
 * pattern of the README inside a scope, a checkpointed function that
 * returns its input without remat_retain, remat_scope_keep of a reference
 * no scope holds. Each is a status or a warning through the log callback
 * (and the last-error text) naming the call and the tensor, and the
 * program goes on with every count right. The ownership rule is one rule:
 * a function behaves the same called directly or through
 * remat_checkpoint, with or without a scope open. */
#include <stdio.h>
#include <string.h>

#include "support/rt.h"

/* ---- a log callback that keeps the warnings -------------------------------------------------- */
typedef struct warnings {
    int n;
    char last[512];
} warnings;

static void keep_warning(void *ud, remat_log_level level, const char *msg) {
    warnings *w = ud;
    (void)level;
    w->n++;
    snprintf(w->last, sizeof w->last, "%s", msg);
}

static warnings *capture(void) {
    static warnings w;
    memset(&w, 0, sizeof w);
    remat_set_log_callback(keep_warning, &w);
    return &w;
}

static void end_check(void) {
    remat_set_log_callback(NULL, NULL);
    cr_assert_eq(remat_live_tensors(), 0, "%lld tensors leaked", (long long)remat_live_tensors());
}

/* the warning and the last error both say `call`, the tensor and its maker */
static void assert_reported(const warnings *w, int n, const char *call, const char *what) {
    cr_assert_eq(w->n, n, "%d warnings, expected %d (last: %s)", w->n, n, w->last);
    const char *texts[2] = {w->last, remat_last_error()};
    for (int i = 0; i < 2; i++) {
        cr_assert(strstr(texts[i], call), "\"%s\" lacks %s", texts[i], call);
        cr_assert(strstr(texts[i], what), "\"%s\" lacks %s", texts[i], what);
    }
}

static remat_tensor *zeros(int64_t r, int64_t c) {
    int64_t sh[] = {r, c};
    remat_tensor *t = NULL;
    RT_OK(remat_zeros(&t, 2, sh, REMAT_F32, REMAT_DEVICE_CPU));
    return t;
}

/* ---- double release ----------------------------------------------------------------------------- */
Test(ref_misuse, double_release_warns_and_goes_on) {
    warnings *w = capture();
    remat_tensor *t = zeros(2, 3);
    remat_release(t);
    remat_release(t); /* today: free(): double free detected */
    assert_reported(w, 1, "remat_release", "[2, 3] f32 made by remat_zeros");
    cr_assert(strstr(w->last, "already released"), "%s", w->last);
    end_check();
}

Test(ref_misuse, double_release_after_the_memory_went_to_another_tensor) {
    warnings *w = capture();
    remat_tensor *t = zeros(2, 3);
    remat_release(t);
    remat_tensor *u = zeros(3, 2); /* malloc would hand u t's memory */
    remat_release(t);              /* today: drops u's reference, frees u */
    assert_reported(w, 1, "remat_release", "[2, 3] f32");
    cr_assert_eq(remat_live_tensors(), 1, "u is alive");
    cr_assert_eq(remat_size(u, 0), 3);
    remat_tensor *v = NULL;
    RT_OK(remat_add_scalar(&v, u, 1.0));
    cr_assert_eq(rt_item_at(v, 5), 1.0);
    remat_release(v);
    remat_release(u);
    end_check();
}

/* ---- a released tensor used in a call -------------------------------------------------------- */
Test(ref_misuse, released_tensor_in_an_op_is_an_error) {
    warnings *w = capture();
    remat_tensor *a = zeros(2, 3), *b = zeros(2, 3), *y = (remat_tensor *)1;
    remat_release(b);
    remat_tensor *other = zeros(2, 3); /* b's memory would be reused */
    RT_FAILS(remat_add(&y, a, b), REMAT_ESTATE, "remat_add: 'b' [2, 3] f32 made by remat_zeros");
    cr_assert_null(y);
    RT_FAILS(remat_add(&y, b, a), REMAT_ESTATE, "already released");
    RT_FAILS(remat_matmul(&y, a, b), REMAT_ESTATE, "remat_matmul");
    RT_FAILS(remat_sum_all(&y, b), REMAT_ESTATE, "remat_sum_all");
    RT_FAILS(remat_relu_(b), REMAT_ESTATE, "remat_relu_");
    RT_FAILS(remat_reshape(&y, b, 1, (int64_t[]){6}), REMAT_ESTATE, "remat_reshape");
    remat_tensor *list[2] = {a, b};
    RT_FAILS(remat_cat(&y, 2, list, 0), REMAT_ESTATE, "remat_cat");
    RT_FAILS(remat_detach(&y, b), REMAT_ESTATE, "remat_detach");
    RT_FAILS(remat_clone(&y, b), REMAT_ESTATE, "remat_clone");
    RT_FAILS(remat_set_requires_grad(b, true), REMAT_ESTATE, "remat_set_requires_grad");
    RT_FAILS(remat_backward_scalar(b), REMAT_ESTATE, "remat_backward");
    double v;
    RT_FAILS(remat_item(b, &v), REMAT_ESTATE, "remat_item");
    float buf[6];
    RT_FAILS(remat_copy_to_buffer(b, REMAT_F32, buf, 6), REMAT_ESTATE, "remat_copy_to_buffer");
    cr_assert_eq(w->n, 0, "statuses, no warnings: %s", w->last);
    /* calls that return a value warn, and read as NULL would */
    cr_assert_null(remat_data(b));
    assert_reported(w, 1, "remat_data", "[2, 3] f32");
    cr_assert_null(remat_retain(b));
    assert_reported(w, 2, "remat_retain", "[2, 3] f32");
    cr_assert_eq(remat_numel(b), 0);
    cr_assert_eq(remat_ndim(b), -1);
    cr_assert_eq(w->n, 4);
    remat_release(a);
    remat_release(other);
    end_check();
}

static int identity_stage(void *ud, remat_tensor *const *in, int n_in, remat_tensor **out,
                          int n_out) {
    (void)ud, (void)n_in, (void)n_out;
    return remat_neg(&out[0], in[0]);
}

static int noop_fn(void *ud, remat_tensor *const *in, int n_in, remat_tensor **out, int n_out) {
    (void)ud, (void)in, (void)n_in, (void)out, (void)n_out;
    return REMAT_OK;
}

Test(ref_misuse, released_input_of_a_checkpoint_is_an_error) {
    capture();
    remat_tensor *x = zeros(2, 2), *y = (remat_tensor *)1;
    remat_release(x);
    remat_checkpoint_options o = {.use_reentrant = REMAT_OPT_FALSE};
    remat_stage st = {identity_stage, NULL};
    RT_FAILS(remat_checkpoint_sequential(&y, 1, &st, 1, x, &o), REMAT_ESTATE,
             "'input' [2, 2] f32 made by remat_zeros was already released");
    cr_assert_null(y);
    RT_FAILS(remat_checkpoint(noop_fn, NULL, 1, &x, 0, NULL, &o), REMAT_ESTATE,
             "remat_checkpoint: 'inputs[0]' [2, 2] f32");
    end_check();
}

/* ---- the README's block() inside and outside scopes and checkpoints ------------------------------ */
typedef struct block_params {
    remat_tensor *w, *b;
} block_params;

/* The README's block: releases its temporary, writes a new reference to out[0]. */
static int block(void *ud, remat_tensor *const *in, int n_in, remat_tensor **out, int n_out) {
    (void)n_in, (void)n_out;
    block_params *p = ud;
    remat_tensor *h = NULL;
    int rc = remat_linear(&h, in[0], p->w, p->b);
    if (!rc) rc = remat_gelu(&out[0], h, REMAT_GELU_TANH);
    remat_release(h);
    return rc;
}

/* loss = sum(block(x)); returns it and x's gradient, the four ways */
static void run_block(int way, block_params *p, remat_tensor *x, double *loss_out, float *gx) {
    remat_scope *s = NULL;
    if (way & 1) RT_OK(remat_scope_begin(&s));
    remat_tensor *y = NULL, *l = NULL;
    if (way & 2) {
        remat_checkpoint_options o = {.use_reentrant = REMAT_OPT_FALSE};
        RT_OK(remat_checkpoint(block, p, 1, &x, 1, &y, &o));
    } else {
        RT_OK(block(p, &x, 1, &y, 1));
    }
    RT_OK(remat_sum_all(&l, y));
    RT_OK(remat_backward_scalar(l));
    RT_OK(remat_item(l, loss_out));
    RT_OK(remat_copy_to_buffer(remat_tensor_grad(x), REMAT_F32, gx, 6));
    /* the caller's references: released by hand (also with a scope open) */
    remat_release(l);
    remat_release(y);
    RT_OK(remat_scope_end(s));
    RT_OK(remat_set_grad(x, NULL));
}

Test(ref_misuse, one_rule_direct_or_checkpointed_with_or_without_scope) {
    warnings *w = capture();
    block_params p = {rt_rand(2, (int64_t[]){3, 3}, REMAT_F32, -1, 1, 11),
                      rt_rand(1, (int64_t[]){3}, REMAT_F32, -1, 1, 12)};
    remat_tensor *x = rt_rand(2, (int64_t[]){2, 3}, REMAT_F32, -1, 1, 13);
    RT_OK(remat_set_requires_grad(x, true));
    double loss[4];
    float gx[4][6];
    for (int way = 0; way < 4; way++) {
        run_block(way, &p, x, &loss[way], gx[way]);
        cr_assert_eq(remat_live_tensors(), 3, "way %d: only x, w and b remain", way);
    }
    for (int way = 1; way < 4; way++) {
        cr_assert_eq(loss[way], loss[0], "way %d", way);
        cr_assert_eq(memcmp(gx[way], gx[0], sizeof gx[0]), 0, "way %d", way);
    }
    cr_assert_eq(w->n, 0, "no warnings: %s", w->last);
    remat_release(x);
    remat_release(p.w);
    remat_release(p.b);
    end_check();
}

/* A function with its own scope, which gets its input back as a second
 * reference (contiguous of a contiguous tensor) and releases it: inside a
 * checkpoint inside the caller's scope, both scopes stay right. */
static int scoped_block(void *ud, remat_tensor *const *in, int n_in, remat_tensor **out,
                        int n_out) {
    (void)ud, (void)n_in, (void)n_out;
    remat_scope *s;
    int rc = remat_scope_begin(&s);
    remat_tensor *c = NULL, *y = NULL;
    if (!rc) rc = remat_contiguous(&c, in[0]); /* in[0] itself */
    if (!rc) rc = remat_tanh(&y, c);
    remat_release(c); /* by hand, though the scope would */
    if (!rc) out[0] = remat_scope_keep(y);
    remat_scope_end(s);
    return rc;
}

Test(ref_misuse, scopes_inside_checkpoints_inside_scopes) {
    warnings *w = capture();
    for (int way = 0; way < 4; way++) {
        remat_scope *s = NULL;
        if (way & 1) RT_OK(remat_scope_begin(&s));
        remat_tensor *x = rt_rand(2, (int64_t[]){2, 2}, REMAT_F32, -1, 1, 2), *y = NULL, *l = NULL;
        RT_OK(remat_set_requires_grad(x, true));
        if (way & 2) {
            remat_checkpoint_options o = {.use_reentrant = REMAT_OPT_FALSE};
            RT_OK(remat_checkpoint(scoped_block, NULL, 1, &x, 1, &y, &o));
        } else {
            RT_OK(scoped_block(NULL, &x, 1, &y, 1));
        }
        RT_OK(remat_sum_all(&l, y));
        RT_OK(remat_backward_scalar(l));
        cr_assert_not_null(remat_tensor_grad(x));
        remat_release(l); /* by hand, whatever holds them */
        remat_release(y);
        remat_release(x);
        RT_OK(remat_scope_end(s));
        cr_assert_eq(remat_live_tensors(), 0, "way %d: %lld left", way,
                     (long long)remat_live_tensors());
    }
    cr_assert_eq(w->n, 0, "no warnings: %s", w->last);
    end_check();
}

/* The scope is a safety net: what is not released by hand, it releases. */
Test(ref_misuse, scope_releases_what_was_not_released) {
    warnings *w = capture();
    remat_scope *s;
    RT_OK(remat_scope_begin(&s));
    remat_tensor *a = zeros(2, 2), *b = NULL, *c = NULL;
    RT_OK(remat_contiguous(&b, a)); /* a itself, a second reference */
    RT_OK(remat_add(&c, a, b));
    remat_release(b); /* by hand */
    remat_release(a); /* by hand: both references of a are gone */
    cr_assert_eq(remat_live_tensors(), 1);
    remat_tensor *r = remat_retain(c); /* a reference of our own */
    RT_OK(remat_scope_end(s));         /* c's handed-out reference goes here */
    cr_assert_eq(remat_live_tensors(), 1);
    cr_assert_eq(rt_item_at(r, 0), 0.0);
    remat_release(r);
    cr_assert_eq(w->n, 0, "no warnings: %s", w->last);
    end_check();
}

/* ---- a checkpointed function that returns its input ---------------------------------------------- */
static int pass_through(void *ud, remat_tensor *const *in, int n_in, remat_tensor **out,
                        int n_out) {
    (void)ud, (void)n_in, (void)n_out;
    out[0] = in[0]; /* the mistake: no remat_retain */
    return REMAT_OK;
}

static int pass_through_retained(void *ud, remat_tensor *const *in, int n_in, remat_tensor **out,
                                 int n_out) {
    (void)ud, (void)n_in, (void)n_out;
    out[0] = remat_retain(in[0]);
    return REMAT_OK;
}

Test(ref_misuse, checkpoint_output_that_is_an_unretained_input_is_an_error) {
    capture();
    remat_tensor *x = rt_rand(2, (int64_t[]){2, 3}, REMAT_F32, -1, 1, 5);
    RT_OK(remat_set_requires_grad(x, true));
    for (int reentrant = 0; reentrant < 2; reentrant++) {
        remat_checkpoint_options o = {.use_reentrant =
                                          reentrant ? REMAT_OPT_TRUE : REMAT_OPT_FALSE};
        remat_tensor *y = (remat_tensor *)1;
        RT_FAILS(remat_checkpoint(pass_through, NULL, 1, &x, 1, &y, &o), REMAT_ECALLBACK,
                 "returned its input 0 ([2, 3] f32 made by");
        cr_assert(strstr(remat_last_error(), "remat_retain"), "%s", remat_last_error());
        cr_assert_null(y);
        cr_assert_eq(remat_live_tensors(), 1, "x is intact");
        /* with remat_retain it is a valid output */
        RT_OK(remat_checkpoint(pass_through_retained, NULL, 1, &x, 1, &y, &o));
        remat_release(y);
        cr_assert_eq(remat_live_tensors(), 1);
    }
    cr_assert_eq(rt_item_at(x, 0), rt_item_at(x, 0));
    remat_release(x);
    end_check();
}

/* ---- remat_scope_keep of a reference no scope holds ---------------------------------------------- */
Test(ref_misuse, keep_of_a_reference_no_scope_holds_warns) {
    warnings *w = capture();
    remat_tensor *x = zeros(4, 1); /* no scope open: the caller's */
    remat_scope *s;
    RT_OK(remat_scope_begin(&s));
    cr_assert_eq(remat_scope_keep(x), x);
    assert_reported(w, 1, "remat_scope_keep", "[4, 1] f32 made by remat_zeros");
    remat_tensor *y = zeros(1, 1);
    cr_assert_eq(remat_scope_keep(y), y);
    cr_assert_eq(w->n, 1);
    cr_assert_eq(remat_scope_keep(y), y); /* kept twice */
    assert_reported(w, 2, "remat_scope_keep", "[1, 1] f32");
    RT_OK(remat_scope_end(s));
    cr_assert_eq(remat_live_tensors(), 2);
    remat_release(x); /* one release each: nothing was added */
    remat_release(y);
    end_check();
}

/* ---- deep checks: a released handle stays recognisable ------------------------------------------- */
Test(ref_misuse, deep_checks_recognise_a_handle_after_any_number_of_tensors) {
    warnings *w = capture();
    cr_assert_eq(remat_get_ref_checks(), REMAT_REF_CHECKS_ON);
    RT_OK(remat_set_ref_checks(REMAT_REF_CHECKS_DEEP));
    remat_tensor *t = zeros(2, 5);
    remat_release(t);
    for (int i = 0; i < 20000; i++) remat_release(zeros(1, 1));
    remat_tensor *y = NULL;
    RT_FAILS(remat_neg(&y, t), REMAT_ESTATE, "remat_neg: 'a' [2, 5] f32 made by remat_zeros");
    remat_release(t);
    assert_reported(w, 1, "remat_release", "[2, 5] f32");
    RT_FAILS(remat_set_ref_checks((remat_ref_checks)7), REMAT_EINVAL, "remat_set_ref_checks");
    RT_OK(remat_set_ref_checks(REMAT_REF_CHECKS_ON));
    end_check();
}

/* ---- a saved tensor released once too often ----------------------------------------------------- */
/* A tensor the library holds too (an optimizer's parameter), released by
 * its user once too often: the optimizer's next call fails naming it. */
Test(ref_misuse, over_released_parameter_fails_the_optimizer_step) {
    warnings *w = capture();
    remat_tensor *p = rt_rand(1, (int64_t[]){4}, REMAT_F32, -1, 1, 3), *l = NULL;
    RT_OK(remat_set_requires_grad(p, true));
    remat_optim_options oo;
    RT_OK(remat_optim_options_init(&oo, REMAT_OPTIM_SGD));
    oo.lr = 0.1;
    remat_optimizer *o = NULL;
    RT_OK(remat_optim_create(&o, &oo, &p, 1));
    RT_OK(remat_sum_all(&l, p));
    RT_OK(remat_backward_scalar(l));
    remat_release(l);
    remat_release(p);
    remat_release(p); /* one too many: drops the optimizer's reference */
    cr_assert_eq(w->n, 0, "%s", w->last);
    RT_FAILS(remat_optim_step(o, NULL), REMAT_ESTATE,
             "remat_optim_step: 'parameter 0' [4] f32 made by remat_empty was already released");
    remat_optim_free(o); /* lets go of p: reported, not freed twice */
    assert_reported(w, 1, "remat_release", "[4] f32");
    end_check();
}
