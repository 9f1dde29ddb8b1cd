/* tests/test_accumulate_observer.c — the engine's leaf-accumulation
 * observer (src/autograd/accumulate.h) as data parallelism uses it: the
 * counts read from the graph before a pass equal the accumulations the
 * pass makes where the graph shows them, a custom function (reentrant
 * checkpoint) makes the graph opaque, and progress points (observer called
 * with NULL) come while a checkpoint recomputes inside backward. */
#include "autograd/accumulate.h"
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

Test(accumulate_observer, reentrant_checkpoint_is_opaque_and_its_recomputation_has_progress_points) {
    remat_tensor *x, *w, *b, *y = NULL, *loss = NULL;
    make(&x, &w, &b);
    RT_OK(remat_set_requires_grad(x, true)); /* reentrant needs an input that requires grad */
    obs o = {w, b, 0, 0, 0};
    region r = {w, b, &o, 0};
    remat_checkpoint_options co = {.use_reentrant = REMAT_OPT_TRUE};
    RT_OK(remat_checkpoint(region_fn, &r, 1, &x, 1, &y, &co));
    RT_OK(remat_sum(&loss, y, 0, NULL, false));
    obs counted = {w, b, 0, 0, 0};
    bool opaque = false;
    RT_OK(rm_graph_leaf_accumulators(loss, observe, &counted, &opaque));
    cr_assert(opaque, "the checkpoint's custom function hides its nested pass");
    cr_assert_eq(counted.acc_w, 0, "w is reached only inside the region");
    rm_set_accumulate_observer(observe, &o, NULL, NULL);
    RT_OK(remat_backward_scalar(loss));
    rm_set_accumulate_observer(NULL, NULL, NULL, NULL);
    cr_assert_eq(o.acc_w, 1, "the nested pass accumulates into w");
    cr_assert(r.progress_in_recompute >= 3, "%d progress points while the region recomputed",
              r.progress_in_recompute);
    remat_release(y);
    remat_release(loss);
    remat_release(x);
    remat_release(w);
    remat_release(b);
}
