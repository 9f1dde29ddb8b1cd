/* tests/test_accumulate_observer.c — the engine's leaf-accumulation
 * observer (src/autograd/accumulate.h) as data parallelism uses it: the
 * counts read from the graph before a pass equal the accumulations the
 * pass makes, reentrant checkpoints included (nested ones too: their
 * forward records the leaves their nested passes accumulate into), a
 * custom function of the user's that runs its own pass makes the graph
 * opaque, and progress points (observer called with NULL) come while a
 * checkpoint recomputes inside backward. */
#include "autograd/accumulate.h"
#include "support/by_hand.h"
#include "support/rt.h"

typedef struct obs {
    remat_tensor *w, *b;
    int acc_w, acc_b, progress;
} obs;

static void observe(void *ud, remat_tensor *leaf) {
    obs *o = ud;
    if (!leaf) o->progress++;
    else if (leaf == o->w) o->acc_w++;
    else if (leaf == o->b) o->acc_b++;
}

/* y = sum(tanh(x w + b) * w[0]) : w reached along two edges, one accumulator */
static remat_tensor *plain_loss(remat_tensor *x, remat_tensor *w, remat_tensor *b) {
    remat_tensor *h = NULL, *t = NULL, *row = NULL, *loss = NULL;
    RT_OK(remat_matmul(&h, x, w));
    RT_OK(remat_add(&t, h, b));
    remat_release(h);
    RT_OK(remat_tanh(&h, t));
    remat_release(t);
    RT_OK(remat_slice(&row, w, 0, 0, 1, 1)); /* w[0:1], broadcast over rows */
    RT_OK(remat_mul(&t, h, row));
    RT_OK(remat_sum(&loss, t, 0, NULL, false));
    remat_release(h);
    remat_release(t);
    remat_release(row);
    return loss;
}

static void make(remat_tensor **x, remat_tensor **w, remat_tensor **b) {
    int64_t sx[2] = {3, 4}, sw[2] = {4, 4}, sb[1] = {4};
    remat_manual_seed(3);
    RT_OK(remat_rand_normal(x, 2, sx, 0, 1, REMAT_F32, REMAT_DEVICE_CPU));
    RT_OK(remat_rand_normal(w, 2, sw, 0, 1, REMAT_F32, REMAT_DEVICE_CPU));
    RT_OK(remat_rand_normal(b, 1, sb, 0, 1, REMAT_F32, REMAT_DEVICE_CPU));
    RT_OK(remat_set_requires_grad(*w, true));
    RT_OK(remat_set_requires_grad(*b, true));
}

Test(accumulate_observer, graph_counts_equal_the_pass_accumulations) {
    remat_tensor *x, *w, *b;
    make(&x, &w, &b);
    remat_tensor *loss = plain_loss(x, w, b);
    obs before = {w, b, 0, 0, 0}, during = {w, b, 0, 0, 0};
    bool opaque = true;
    RT_OK(rm_graph_leaf_accumulators(loss, observe, &before, &opaque));
    cr_assert(!opaque, "no custom function in the graph");
    cr_assert_eq(before.acc_w, 1, "w has one accumulator (two edges into it): %d", before.acc_w);
    cr_assert_eq(before.acc_b, 1);
    rm_set_accumulate_observer(observe, &during, NULL, NULL);
    RT_OK(remat_backward_scalar(loss));
    rm_set_accumulate_observer(NULL, NULL, NULL, NULL);
    cr_assert(during.acc_w == before.acc_w && during.acc_b == before.acc_b,
              "the pass accumulated w %d, b %d times", during.acc_w, during.acc_b);
    cr_assert(during.progress > 0, "progress points before the nodes' backwards");
    remat_release(loss);
    remat_release(x);
    remat_release(w);
    remat_release(b);
}

typedef struct region {
    remat_tensor *w, *b;
    obs *o;
    int progress_in_recompute;
} region;

static remat_status region_fn(void *ud, remat_tensor *const *in, int n_in, remat_tensor **out,
                              int n_out) {
    (void)n_in;
    (void)n_out;
    region *r = ud;
    int before = r->o ? r->o->progress : 0;
    remat_tensor *h = NULL, *t = NULL;
    remat_status rc = remat_matmul(&h, in[0], r->w);
    if (!rc) rc = remat_add(&t, h, r->b);
    remat_release(h);
    if (!rc) rc = remat_tanh(out, t);
    remat_release(t);
    if (remat_in_backward() && r->o) r->progress_in_recompute += r->o->progress - before;
    return rc;
}

/* Counts per leaf: the walk before the pass against the pass itself. */
typedef struct tally {
    remat_tensor *leaf[3];
    int walk[3], pass[3];
    bool in_pass;
} tally;

static void count_leaf(void *ud, remat_tensor *leaf) {
    tally *t = ud;
    for (int i = 0; leaf && i < 3; i++)
        if (t->leaf[i] == leaf) (t->in_pass ? t->pass : t->walk)[i]++;
}

/* Walks the graph behind loss, then runs the pass; *opaque as the walk said. */
static void walk_then_pass(remat_tensor *loss, tally *t, bool *opaque) {
    RT_OK(rm_graph_leaf_accumulators(loss, count_leaf, t, opaque));
    t->in_pass = true;
    rm_set_accumulate_observer(count_leaf, t, NULL, NULL);
    RT_OK(remat_backward_scalar(loss));
    rm_set_accumulate_observer(NULL, NULL, NULL, NULL);
    t->in_pass = false;
}

Test(accumulate_observer, reentrant_checkpoint_counts_its_nested_pass_and_has_progress_points) {
    remat_tensor *x, *w, *b, *y = NULL, *loss = NULL;
    make(&x, &w, &b);
    RT_OK(remat_set_requires_grad(x, true)); /* reentrant needs an input that requires grad */
    obs o = {w, b, 0, 0, 0};
    region r = {w, b, &o, 0};
    remat_checkpoint_options co = {.use_reentrant = REMAT_OPT_TRUE};
    RT_OK(remat_checkpoint(region_fn, &r, 1, &x, 1, &y, &co));
    RT_OK(remat_sum(&loss, y, 0, NULL, false));
    obs counted = {w, b, 0, 0, 0};
    bool opaque = true;
    RT_OK(rm_graph_leaf_accumulators(loss, observe, &counted, &opaque));
    cr_assert(!opaque, "the checkpoint recorded the leaves its region reads");
    cr_assert(counted.acc_w == 1 && counted.acc_b == 1,
              "w and b are reached through the region's nested pass: %d, %d", counted.acc_w,
              counted.acc_b);
    rm_set_accumulate_observer(observe, &o, NULL, NULL);
    RT_OK(remat_backward_scalar(loss));
    rm_set_accumulate_observer(NULL, NULL, NULL, NULL);
    cr_assert(o.acc_w == 1 && o.acc_b == 1, "the nested pass accumulates into w and b once");
    cr_assert(r.progress_in_recompute >= 3, "%d progress points while the region recomputed",
              r.progress_in_recompute);
    remat_release(y);
    remat_release(loss);
    remat_release(x);
    remat_release(w);
    remat_release(b);
}

/* inner: tanh(in[0] @ in[1] + b), w given as an input (in[1]) */
static remat_status inner_fn(void *ud, remat_tensor *const *in, int n_in, remat_tensor **out,
                             int n_out) {
    (void)n_in;
    (void)n_out;
    remat_tensor *b = ud, *h = NULL, *t = NULL;
    remat_status rc = remat_matmul(&h, in[0], in[1]);
    if (!rc) rc = remat_add(&t, h, b);
    remat_release(h);
    if (!rc) rc = remat_tanh(out, t);
    remat_release(t);
    return rc;
}

typedef struct outer_ud {
    remat_tensor *w, *b;
} outer_ud;

/* outer: x @ w + b (both read directly), then two reentrant inner regions
 * that get w as an input and read b themselves */
static remat_status outer_fn(void *ud, remat_tensor *const *in, int n_in, remat_tensor **out,
                             int n_out) {
    (void)n_in;
    (void)n_out;
    outer_ud *u = ud;
    remat_checkpoint_options co = {.use_reentrant = REMAT_OPT_TRUE};
    remat_tensor *t = NULL, *h = NULL, *y1 = NULL;
    remat_status rc = remat_matmul(&t, in[0], u->w);
    if (!rc) rc = remat_add(&h, t, u->b);
    remat_release(t);
    remat_tensor *a1[2] = {h, u->w};
    if (!rc) rc = remat_checkpoint(inner_fn, u->b, 2, a1, 1, &y1, &co);
    remat_tensor *a2[2] = {y1, u->w};
    if (!rc) rc = remat_checkpoint(inner_fn, u->b, 2, a2, 1, out, &co);
    remat_release(h);
    remat_release(y1);
    return rc;
}

/* Nested reentrant regions: b, read by the outer region and by both inner
 * ones, is accumulated by three passes; w, read by the outer one and given
 * to the inner ones as an input (they recompute on a detached copy and
 * return its gradient along their edge), by the outer pass only; the outer
 * region's input x by the top pass, through the custom function's edge.
 * The walk says so. */
Test(accumulate_observer, nested_reentrant_regions_count_one_per_nested_pass) {
    remat_tensor *x, *w, *b, *y = NULL, *loss = NULL;
    make(&x, &w, &b);
    RT_OK(remat_set_requires_grad(x, true));
    outer_ud u = {w, b};
    remat_checkpoint_options co = {.use_reentrant = REMAT_OPT_TRUE};
    RT_OK(remat_checkpoint(outer_fn, &u, 1, &x, 1, &y, &co));
    RT_OK(remat_sum(&loss, y, 0, NULL, false));
    tally t = {.leaf = {w, b, x}};
    bool opaque = true;
    walk_then_pass(loss, &t, &opaque);
    cr_assert(!opaque);
    cr_assert(t.pass[0] == 1 && t.pass[1] == 3 && t.pass[2] == 1,
              "passes accumulated w %d, b %d, x %d times", t.pass[0], t.pass[1], t.pass[2]);
    for (int i = 0; i < 3; i++)
        cr_assert_eq(t.walk[i], t.pass[i], "leaf %d: walk %d, pass %d", i, t.walk[i], t.pass[i]);
    remat_release(y);
    remat_release(loss);
    remat_release(x);
    remat_release(w);
    remat_release(b);
}

/* A custom function of the user's whose backward runs a pass of its own:
 * y = x * b, recomputed in backward (tests/support/by_hand.h). */

static remat_status region_by_hand(void *ud, remat_tensor *const *in, int n_in, remat_tensor **out,
                                   int n_out) {
    (void)n_in;
    (void)n_out;
    return remat_function_apply(&rt_by_hand_mul, ud, 1, in, 1, out);
}

/* Such a function hides its pass from the walk (opaque), also inside a
 * reentrant region, whose recording then says it is incomplete. */
Test(accumulate_observer, a_custom_function_running_a_pass_is_opaque) {
    remat_tensor *x, *w, *b;
    make(&x, &w, &b);
    RT_OK(remat_set_requires_grad(x, true));
    for (int in_region = 0; in_region < 2; in_region++) {
        remat_tensor *y = NULL, *loss = NULL;
        remat_checkpoint_options co = {.use_reentrant = REMAT_OPT_TRUE};
        if (in_region) RT_OK(remat_checkpoint(region_by_hand, b, 1, &x, 1, &y, &co));
        else RT_OK(remat_function_apply(&rt_by_hand_mul, b, 1, &x, 1, &y));
        RT_OK(remat_sum(&loss, y, 0, NULL, false));
        tally t = {.leaf = {b, x}};
        bool opaque = false;
        walk_then_pass(loss, &t, &opaque);
        cr_assert(opaque, "in region %d: the function's own pass is not shown", in_region);
        cr_assert(t.pass[0] == 1, "in region %d: b accumulated %d times", in_region, t.pass[0]);
        remat_release(y);
        remat_release(loss);
    }
    remat_release(x);
    remat_release(w);
    remat_release(b);
}
