/* tests/test_report.c — residual reports: entries (op, call, name, shape,
 * dtype, bytes, call site), distinct storages counted once, totals equal to
 * what the allocator holds for the graph, per-op totals, hooked and
 * recomputed entries inside checkpoints, the printer, and misuse. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "support/models.h"
#include "support/rt.h"

typedef rt_net2 net; /* x (16, 8), W1, b1, W2, t: tests/support/models.h */

/* x named "input", as the report shows it */
static net make_net(void) {
    net n = rt_net2_make();
    RT_OK(remat_set_name(n.x, "input"));
    return n;
}

/* loss = mse(linear(gelu(tag(linear(x)))), t); the call sites of the ops
 * are inside this function. */
__attribute__((noinline)) static void forward_step(net *n, remat_tensor **loss) {
    remat_tensor *h = NULL, *ht = NULL, *g = NULL, *y = NULL;
    RT_OK(remat_linear(&h, n->x, n->w1, n->b1));
    RT_OK(remat_tag(&ht, h, "hidden"));
    RT_OK(remat_gelu(&g, ht, REMAT_GELU_TANH));
    RT_OK(remat_linear(&y, g, n->w2, NULL));
    RT_OK(remat_mse_loss(loss, y, n->t));
    remat_release(h);
    remat_release(ht);
    remat_release(g);
    remat_release(y);
}

static bool site_in_forward_step(void *site) {
    char *f = (char *)(void *)forward_step;
    /* the return addresses lie inside its body (generous bound: sanitizers bloat code) */
    return (char *)site > f && (char *)site < f + 65536;
}

Test(report, entries_totals_and_the_allocator_agree) {
    net n = make_net();
    size_t before = remat_cpu_current_bytes();
    remat_residual_report *rep;
    RT_OK(remat_residual_report_begin(&rep));
    remat_tensor *loss = NULL;
    forward_step(&n, &loss);
    RT_OK(remat_residual_report_end(rep));
    size_t held = remat_cpu_current_bytes() - before; /* what the graph keeps, plus the loss */

    /* linear1 saves x and W1; gelu saves its input (the tagged h); linear2
     * saves g and W2; mse saves y and t */
    const char *ops[] = {"LinearBackward", "LinearBackward",  "GeluBackward",   "LinearBackward",
                         "LinearBackward", "MseLossBackward", "MseLossBackward"};
    const char *calls[] = {"remat_linear", "remat_linear",   "remat_gelu",    "remat_linear",
                           "remat_linear", "remat_mse_loss", "remat_mse_loss"};
    int count = remat_residual_report_count(rep);
    cr_assert_eq(count, 7, "%d entries", count);
    for (int i = 0; i < count; i++) {
        const remat_residual *e = remat_residual_report_entry(rep, i);
        cr_assert_str_eq(e->op, ops[i], "entry %d: %s", i, e->op);
        cr_assert_str_eq(e->call, calls[i]);
        cr_assert(site_in_forward_step(e->site), "entry %d: site %p not in forward_step", i,
                  e->site);
        cr_assert(e->site_str[0], "entry %d has no symbolised site", i);
        cr_assert(!e->hooked && !e->in_backward);
        cr_assert_eq(e->dtype, REMAT_F32);
    }
    const remat_residual *e0 = remat_residual_report_entry(rep, 0);
    cr_assert_str_eq(e0->name, "input");
    cr_assert_eq(e0->ndim, 2);
    cr_assert_eq(e0->shape[0], 16);
    cr_assert_eq(e0->bytes, 16 * 8 * 4u);
    const remat_residual *eg = remat_residual_report_entry(rep, 2);
    cr_assert_str_eq(eg->name, "hidden", "the tag names the saved tensor: '%s'", eg->name);
    cr_assert_eq(eg->bytes, 16 * 32 * 4u);
    cr_assert_null(remat_residual_report_entry(rep, 7));
    cr_assert_null(remat_residual_report_entry(rep, -1));

    remat_residual_totals t;
    RT_OK(remat_residual_report_totals(rep, &t));
    cr_assert_eq(t.count, 7);
    /* every saved storage is distinct here; the ones that existed before
     * the step (x, W1, W2, t) are not part of the allocator's delta, the
     * loss is part of it but not saved */
    size_t pre = rt_bytes(4, (remat_tensor *[]){n.x, n.w1, n.w2, n.t});
    cr_assert_eq(t.unique_bytes, held - 4 + pre, "report %zu, allocator %zu (+%zu - 4)",
                 t.unique_bytes, held, pre);
    cr_assert_eq(t.kept_bytes, t.unique_bytes);
    cr_assert_eq(t.bytes, t.unique_bytes);

    remat_residual_op_total lin = remat_residual_report_op_named(rep, "LinearBackward");
    cr_assert_eq(lin.count, 4);
    cr_assert_eq(lin.bytes, (16 * 8 + 32 * 8 + 16 * 32 + 4 * 32) * 4u);
    cr_assert_eq(remat_residual_report_n_ops(rep), 3);
    cr_assert_str_eq(remat_residual_report_op(rep, 0)->op, "LinearBackward");
    cr_assert_eq(remat_residual_report_op_named(rep, "Nope").count, 0);

    char buf[8192];
    size_t len = remat_residual_report_format(rep, buf, sizeof buf);
    cr_assert(len < sizeof buf);
    cr_assert(strstr(buf, "7 tensors saved for backward") != NULL, "%s", buf);
    cr_assert(strstr(buf, "each storage counted once") != NULL);
    cr_assert(strstr(buf, "GeluBackward") != NULL && strstr(buf, "hidden") != NULL);
    cr_assert(strstr(buf, "[16, 32]") != NULL);
    cr_assert(strstr(buf, e0->site_str) != NULL);
    char small[16];
    cr_assert_eq(remat_residual_report_format(rep, small, sizeof small), len);
    cr_assert_eq(strlen(small), sizeof small - 1);
    FILE *f = tmpfile();
    RT_OK(remat_residual_report_print(rep, f));
    cr_assert_eq((size_t)ftell(f), len);
    fclose(f);

    RT_OK(remat_backward_scalar(loss));
    remat_release(loss);
    remat_residual_report_free(rep);
    rt_net2_free(&n);
    cr_assert_eq(remat_live_tensors(), 0);
}

Test(report, shared_storage_counted_once) {
    int64_t sh[] = {10, 10};
    remat_tensor *a = rt_rand(2, sh, REMAT_F64, -1, 1, 1), *b = NULL, *c = NULL, *v = NULL;
    RT_OK(remat_set_requires_grad(a, true));
    remat_residual_report *rep;
    RT_OK(remat_residual_report_begin(&rep));
    RT_OK(remat_transpose(&v, a, 0, 1));
    RT_OK(remat_mul(&b, a, v)); /* saves a and its transposed view: one storage */
    RT_OK(remat_mul(&c, b, a)); /* saves b and a again */
    RT_OK(remat_residual_report_end(rep));
    cr_assert_eq(remat_residual_report_count(rep), 4);
    remat_residual_totals t;
    RT_OK(remat_residual_report_totals(rep, &t));
    cr_assert_eq(t.bytes, 4 * 800u);
    cr_assert_eq(t.unique_bytes, 2 * 800u, "a and b: %zu", t.unique_bytes);
    cr_assert(remat_residual_report_entry(rep, 0)->new_storage);
    cr_assert(!remat_residual_report_entry(rep, 1)->new_storage);
    cr_assert(remat_residual_report_entry(rep, 2)->new_storage);
    cr_assert(!remat_residual_report_entry(rep, 3)->new_storage);
    remat_residual_op_total mul = remat_residual_report_op_named(rep, "MulBackward");
    cr_assert_eq(mul.count, 4);
    cr_assert_eq(mul.unique_bytes, 1600u);
    remat_residual_report_free(rep);
    remat_release(a);
    remat_release(b);
    remat_release(c);
    remat_release(v);
    cr_assert_eq(remat_live_tensors(), 0);
}

Test(report, checkpointed_saves_are_marked) {
    rt_mlp_block blk;
    rt_mlp_block_init(&blk, 8, 16, 0.0, REMAT_F32, 3);
    int64_t sh[] = {4, 8};
    remat_tensor *x = rt_rand(2, sh, REMAT_F32, -1, 1, 2), *y = NULL, *l = NULL;
    RT_OK(remat_set_requires_grad(x, true));
    remat_residual_report *rep;
    RT_OK(remat_residual_report_begin(&rep));
    remat_checkpoint_options o = {.use_reentrant = REMAT_OPT_FALSE};
    RT_OK(remat_checkpoint(rt_mlp_block_fn, &blk, 1, &x, 1, &y, &o));
    int fwd = remat_residual_report_count(rep);
    RT_OK(remat_sum_all(&l, y));
    RT_OK(remat_backward_scalar(l));
    RT_OK(remat_residual_report_end(rep));
    int all = remat_residual_report_count(rep);
    cr_assert(fwd > 0 && all > fwd, "forward %d, all %d", fwd, all);
    int hooked = 0, in_bwd = 0;
    for (int i = 0; i < all; i++) {
        const remat_residual *e = remat_residual_report_entry(rep, i);
        hooked += e->hooked;
        in_bwd += e->in_backward;
        if (i < fwd) cr_assert(!e->in_backward);
    }
    /* the input saver saves x without a hook; everything else is a placeholder */
    cr_assert_eq(hooked, all - 1, "hooked %d of %d", hooked, all);
    cr_assert_eq(in_bwd, all - fwd);
    remat_residual_totals t;
    RT_OK(remat_residual_report_totals(rep, &t));
    cr_assert_eq(t.kept_bytes, 4 * 8 * 4u, "only the checkpoint's input is kept: %zu",
                 t.kept_bytes);
    cr_assert_null(remat_residual_report_entry(rep, 0)->call, "the input saver is not an op");
    remat_residual_report_free(rep);
    remat_release(l);
    remat_release(y);
    remat_release(x);
    rt_mlp_block_free(&blk);
    cr_assert_eq(remat_live_tensors(), 0);
}

Test(report, misuse) {
    remat_residual_report *a, *b = NULL;
    RT_FAILS(remat_residual_report_begin(NULL), REMAT_EINVAL, "remat_residual_report_begin");
    RT_OK(remat_residual_report_begin(&a));
    RT_FAILS(remat_residual_report_begin(&b), REMAT_ESTATE, "another residual report");
    cr_assert_null(b);
    RT_OK(remat_residual_report_end(a));
    RT_FAILS(remat_residual_report_end(a), REMAT_ESTATE, "not recording");
    RT_FAILS(remat_residual_report_end(NULL), REMAT_EINVAL, "NULL");
    remat_residual_totals t;
    RT_FAILS(remat_residual_report_totals(NULL, &t), REMAT_EINVAL, "remat_residual_report_totals");
    RT_FAILS(remat_residual_report_print(a, NULL), REMAT_EINVAL, "print");
    cr_assert_eq(remat_residual_report_count(NULL), 0);
    remat_residual_report_free(a);
    remat_residual_report_free(NULL);
    /* free stops a recording report */
    RT_OK(remat_residual_report_begin(&a));
    remat_residual_report_free(a);
    RT_OK(remat_residual_report_begin(&a));
    remat_residual_report_free(a);
}
