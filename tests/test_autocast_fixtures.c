/* tests/test_autocast_fixtures.c — each autocast op against PyTorch 1.13's cpu autocast
 * (tests/fixtures/autocast/ops.txt, written by scripts/gen_autocast_fixtures.py, which says
 * the format and where the reference follows remat's f32 list rather than 1.13's):
 * outputs and input gradients within the per-op bf16 tolerances the fixture gives, and the
 * output dtype of each category (bf16 for matmul/linear/attention, f32 for the rest). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "remat/autocast.h"
#include "support/rt.h"

#define MAXV 8192

typedef struct arr {
    int ndim;
    int64_t shape[8];
    int64_t n;
    double v[MAXV];
} arr;

/* "NDIM SHAPE... VALUES" from s */
static void parse_arr(char *s, arr *a) {
    char *e;
    a->ndim = (int)strtol(s, &e, 10);
    a->n = 1;
    for (int d = 0; d < a->ndim; d++) a->n *= a->shape[d] = strtoll(e, &e, 10);
    cr_assert_leq(a->n, MAXV);
    for (int64_t i = 0; i < a->n; i++) a->v[i] = strtod(e, &e);
}

static remat_tensor *from_arr(const arr *a) {
    return rt_tensor(a->ndim, a->shape, REMAT_F32, a->v);
}

/* the fixture's input formula (scripts/gen_autocast_fixtures.py: gen) */
static remat_tensor *gen(int ndim, const int64_t *shape, int seed) {
    int64_t n = 1;
    for (int d = 0; d < ndim; d++) n *= shape[d];
    double *v = malloc(sizeof(double) * (size_t)n);
    for (int64_t i = 0; i < n; i++)
        v[i] = -2.0 + 4.0 * fmod((double)i * 0.6180339887 + seed * 0.1, 1.0);
    float *f = malloc(sizeof(float) * (size_t)n);
    for (int64_t i = 0; i < n; i++) f[i] = (float)v[i];
    remat_tensor *t = NULL;
    RT_OK(remat_from_data(&t, ndim, shape, REMAT_F32, f));
    free(v), free(f);
    return t;
}

static int run_op(const char *op, remat_tensor **x, remat_tensor **y, bool *lower) {
    *lower = !strcmp(op, "linear") || !strcmp(op, "matmul") || !strcmp(op, "attention") ||
             !strcmp(op, "layer_norm_to") || !strcmp(op, "add_layer_norm_to");
    if (!strcmp(op, "linear")) return remat_linear(y, x[0], x[1], x[2]);
    if (!strcmp(op, "matmul")) return remat_matmul(y, x[0], x[1]);
    if (!strcmp(op, "attention")) return remat_attention(y, x[0], x[1], x[2], true, 0);
    if (!strcmp(op, "softmax")) return remat_softmax(y, x[0], -1);
    if (!strcmp(op, "log_softmax")) return remat_log_softmax(y, x[0], -1);
    if (!strcmp(op, "layer_norm")) return remat_layer_norm(y, x[0], 1, x[1], x[2], 1e-5);
    if (!strcmp(op, "rms_norm")) return remat_rms_norm(y, x[0], 1, x[1], 1e-6);
    if (!strcmp(op, "layer_norm_to"))
        return remat_layer_norm_to(y, x[0], 1, x[1], x[2], 1e-5, REMAT_BF16);
    if (!strcmp(op, "add_layer_norm_to")) { /* y alone: x and r get its gradient */
        remat_tensor *s = NULL;
        int rc = remat_add_layer_norm_to(&s, y, x[0], x[1], 1, x[2], x[3], 1e-5, REMAT_BF16);
        remat_release(s);
        return rc;
    }
    if (!strcmp(op, "mse_loss")) return remat_mse_loss(y, x[0], x[1]);
    if (!strcmp(op, "sum_all")) return remat_sum_all(y, x[0]);
    if (!strcmp(op, "cross_entropy")) {
        int64_t s[1] = {6};
        remat_tensor *t = rt_tensor(1, s, REMAT_I64, (double[]){0, 3, 6, 2, 1, 5});
        int rc = remat_cross_entropy(y, x[0], t, -100);
        remat_release(t);
        return rc;
    }
    cr_assert_fail("unknown op %s", op);
    return REMAT_EINVAL;
}

static void check(const char *what, remat_tensor *got, const arr *want, double atol, double rtol) {
    remat_tensor *g32 = NULL, *w = from_arr(want);
    RT_OK(remat_to_dtype(&g32, got, REMAT_F32));
    rt_assert_close(g32, w, atol, rtol, what);
    remat_release(g32), remat_release(w);
}

Test(autocast_fixtures, every_autocast_op_matches_pytorch_1_13) {
    FILE *f = fopen(REMAT_FIXTURE_DIR "/autocast/ops.txt", "r");
    cr_assert_not_null(f, "missing %s/autocast/ops.txt", REMAT_FIXTURE_DIR);
    static char line[1 << 20];
    static arr a;
    char name[64] = "", op[64] = "";
    double atol = 0, rtol = 0;
    remat_tensor *x[4] = {0}, *y = NULL;
    int nx = 0, ncases = 0;
    while (fgets(line, sizeof line, f)) {
        if (!strncmp(line, "case ", 5)) {
            cr_assert_eq(sscanf(line + 5, "%63s %63s %lf %lf", name, op, &atol, &rtol), 4);
            nx = 0;
        } else if (!strncmp(line, "in ", 3)) {
            char dt[8];
            int nd, off = 0, seed;
            int64_t shape[8];
            cr_assert_eq(sscanf(line + 3, "%7s %d%n", dt, &nd, &off), 2);
            char *e = line + 3 + off;
            for (int d = 0; d < nd; d++) shape[d] = strtoll(e, &e, 10);
            seed = (int)strtol(e, &e, 10);
            remat_tensor *t = gen(nd, shape, seed);
            if (!strcmp(dt, "bf16")) {
                remat_tensor *b = NULL;
                RT_OK(remat_to_dtype(&b, t, REMAT_BF16));
                remat_release(t);
                t = b;
            }
            RT_OK(remat_set_requires_grad(t, true));
            x[nx++] = t;
        } else if (!strncmp(line, "gout ", 5)) {
            parse_arr(line + 5, &a);
            remat_autocast_state prev;
            RT_OK(remat_autocast_begin(&prev, REMAT_CPU, REMAT_BF16, true));
            bool lower;
            int rc = run_op(op, x, &y, &lower);
            remat_autocast_end(&prev);
            RT_OK(rc);
            cr_assert_eq(remat_tensor_dtype(y), lower ? REMAT_BF16 : REMAT_F32,
                         "%s: output dtype %s", name, remat_dtype_name(remat_tensor_dtype(y)));
            remat_tensor *y32 = NULL, *g = from_arr(&a), *p = NULL, *l = NULL;
            RT_OK(remat_to_dtype(&y32, y, REMAT_F32));
            RT_OK(remat_mul(&p, y32, g));
            RT_OK(remat_sum_all(&l, p));
            RT_OK(remat_backward_scalar(l));
            remat_release(y32), remat_release(g), remat_release(p), remat_release(l);
        } else if (!strncmp(line, "out ", 4)) {
            parse_arr(line + 4, &a);
            char what[96];
            snprintf(what, sizeof what, "%s output", name);
            check(what, y, &a, atol, rtol);
        } else if (!strncmp(line, "grad ", 5)) {
            char *e;
            int i = (int)strtol(line + 5, &e, 10);
            parse_arr(e, &a);
            char what[96];
            snprintf(what, sizeof what, "%s gradient of input %d", name, i);
            cr_assert_lt(i, nx);
            remat_tensor *gr = remat_tensor_grad(x[i]);
            cr_assert_not_null(gr, "%s", what);
            cr_assert_eq(remat_tensor_dtype(gr), remat_tensor_dtype(x[i]), "%s: dtype", what);
            check(what, gr, &a, atol, rtol);
        } else if (!strncmp(line, "end", 3)) {
            for (int i = 0; i < nx; i++) remat_release_p(&x[i]);
            remat_release_p(&y);
            ncases++;
        }
    }
    fclose(f);
    cr_assert_eq(ncases, 13, "expected 13 cases, read %d", ncases);
    cr_assert_eq(remat_live_tensors(), 0);
}
