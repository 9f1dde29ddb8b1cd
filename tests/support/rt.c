/* tests/support/rt.c — helpers shared by the test suite (see rt.h). */
#include "rt.h"

#include <execinfo.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#ifndef __has_feature
#define __has_feature(x) 0
#endif
#if defined(__SANITIZE_ADDRESS__) || __has_feature(address_sanitizer)
#include <sanitizer/common_interface_defs.h>
#define RT_ASAN 1
#endif

#include "core/backend.h"
#include "core/core.h"
#include "fenced.h"
#include "transfer_log.h"

bool rt_on_test_device_;

remat_device rt_test_device(void) {
    const char *env = getenv("REMAT_TEST_DEVICE");
    if (!env || !*env || strcmp(env, "cpu") == 0) return REMAT_DEVICE_CPU;
    char name[32];
    int index = 0;
    size_t len = strcspn(env, ":");
    cr_assert(len > 0 && len < sizeof name, "REMAT_TEST_DEVICE=%s: expected TYPE[:INDEX]", env);
    memcpy(name, env, len);
    name[len] = '\0';
    if (env[len] == ':') index = atoi(env + len + 1);
    if (strcmp(name, "cuda") == 0) {
        const char *why = NULL;
        if (!remat_cuda_available(&why)) cr_skip_test("REMAT_TEST_DEVICE=%s: %s", env, why);
    }
    if (strcmp(name, "fenced") == 0) rt_fenced_type(); /* registered on first use */
    int type = remat_device_type_id(name);
    cr_assert(type >= 0, "REMAT_TEST_DEVICE=%s: no device type named '%s'", env, name);
    remat_device d = {type, index};
    RT_OK(remat_device_check(d));
    return d;
}

remat_device rt_cuda0(void) {
    const char *why = NULL;
    if (!remat_cuda_available(&why)) cr_skip_test("no GPU: %s", why);
    return (remat_device){remat_device_type_id("cuda"), 0};
}

void rt_need_cuda(void) { (void)rt_cuda0(); }

remat_tensor *rt_leaf_on(remat_tensor *t, remat_device d, bool grad) {
    remat_tensor *m = NULL, *l = NULL;
    RT_OK(remat_to_device(&m, t, d));
    RT_OK(remat_detach(&l, m));
    remat_release(m);
    if (grad) RT_OK(remat_set_requires_grad(l, true));
    return l;
}

remat_tensor *rt_to_device(remat_tensor *t, remat_device d) {
    remat_device at = remat_tensor_device(t);
    if (at.type == d.type && at.index == d.index) return t;
    remat_tensor *c = NULL;
    bool prev = remat_no_grad_begin();
    int rc = remat_to_device(&c, t, d);
    remat_grad_mode_restore(prev);
    cr_assert_eq(rc, REMAT_OK, "rt_to_device: %s", remat_last_error());
    if (remat_requires_grad(t)) RT_OK(remat_set_requires_grad(c, true));
    remat_release(t);
    return c;
}

remat_tensor *rt_to_test_device(remat_tensor *t) {
    return rt_on_test_device_ ? rt_to_device(t, rt_test_device()) : t;
}

remat_device rt_tensor_device(void) {
    return rt_on_test_device_ ? rt_test_device() : REMAT_DEVICE_CPU;
}

const char *rt_tensor_device_str(void) {
    static char buf[64];
    remat_device d = rt_tensor_device();
    snprintf(buf, sizeof buf, "%s:%d", remat_device_type_name(d.type), d.index);
    return buf;
}

remat_alloc_stats rt_device_stats(void) {
    remat_alloc_stats s;
    RT_OK(remat_alloc_stats_get(rt_tensor_device(), &s));
    return s;
}

size_t rt_device_current_bytes(void) { return rt_device_stats().current_bytes; }

void rt_device_reset_peak(void) { RT_OK(remat_alloc_reset_peak(rt_tensor_device())); }

remat_tensor *rt_tensor(int ndim, const int64_t *shape, remat_dtype dtype, const double *values) {
    int64_t n = rm_shape_numel(ndim, shape);
    remat_tensor *t = NULL;
    int rc = remat_empty(&t, ndim, shape, dtype, REMAT_DEVICE_CPU);
    cr_assert_eq(rc, REMAT_OK, "rt_tensor: %s", remat_last_error());
    void *p = remat_data(t);
    for (int64_t i = 0; i < n; i++) {
        if (dtype == REMAT_F32) ((float *)p)[i] = (float)values[i];
        else if (dtype == REMAT_F64) ((double *)p)[i] = values[i];
        else ((int64_t *)p)[i] = (int64_t)values[i];
    }
    return rt_to_test_device(t);
}

remat_tensor *rt_leaf(remat_tensor *t) {
    RT_OK(remat_set_requires_grad(t, true));
    return t;
}

double *rt_values(const remat_tensor *t) {
    int64_t n = remat_numel(t);
    double *v = malloc(sizeof(double) * (size_t)(n ? n : 1));
    RT_OK(remat_copy_to_buffer(t, REMAT_F64, v, n));
    return v;
}

static uint64_t splitmix(uint64_t *s) {
    uint64_t z = (*s += 0x9E3779B97F4A7C15ULL);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
    return z ^ (z >> 31);
}

remat_tensor *rt_rand(int ndim, const int64_t *shape, remat_dtype dtype, double lo, double hi,
                      unsigned seed) {
    int64_t n = rm_shape_numel(ndim, shape);
    double *v = malloc(sizeof(double) * (size_t)(n ? n : 1));
    uint64_t s = seed * 7919ULL + 17;
    for (int64_t i = 0; i < n; i++)
        v[i] = lo + (hi - lo) * ((double)(splitmix(&s) >> 11) / 9007199254740992.0);
    remat_tensor *t = rt_tensor(ndim, shape, dtype, v);
    free(v);
    return t;
}

double rt_max_abs_diff(const remat_tensor *a, const remat_tensor *b) {
    cr_assert_eq(remat_numel(a), remat_numel(b), "rt_max_abs_diff: numel %lld vs %lld",
                 (long long)remat_numel(a), (long long)remat_numel(b));
    double *va = rt_values(a), *vb = rt_values(b);
    double m = 0;
    for (int64_t i = 0; i < remat_numel(a); i++) {
        double d = fabs(va[i] - vb[i]);
        if (d > m || isnan(d)) m = isnan(d) ? INFINITY : d;
    }
    free(va);
    free(vb);
    return m;
}

bool rt_bitwise_equal(const remat_tensor *a, const remat_tensor *b) {
    if (!a || !b) return a == b;
    if (remat_ndim(a) != remat_ndim(b) || remat_tensor_dtype(a) != remat_tensor_dtype(b))
        return false;
    for (int d = 0; d < remat_ndim(a); d++)
        if (remat_size(a, d) != remat_size(b, d)) return false;
    int64_t n = remat_numel(a);
    size_t es = remat_dtype_size(remat_tensor_dtype(a));
    void *pa = malloc(es * (size_t)(n ? n : 1)), *pb = malloc(es * (size_t)(n ? n : 1));
    remat_copy_to_buffer(a, remat_tensor_dtype(a), pa, n);
    remat_copy_to_buffer(b, remat_tensor_dtype(b), pb, n);
    bool eq = memcmp(pa, pb, es * (size_t)n) == 0;
    free(pa);
    free(pb);
    return eq;
}

void rt_assert_close(const remat_tensor *a, const remat_tensor *b, double atol, double rtol,
                     const char *what) {
    cr_assert_eq(remat_numel(a), remat_numel(b), "%s: numel %lld vs %lld", what,
                 (long long)remat_numel(a), (long long)remat_numel(b));
    double *va = rt_values(a), *vb = rt_values(b);
    for (int64_t i = 0; i < remat_numel(a); i++) {
        double tol = atol + rtol * fabs(vb[i]);
        if (!(fabs(va[i] - vb[i]) <= tol)) {
            double x = va[i], y = vb[i];
            free(va);
            free(vb);
            cr_assert_fail("%s: element %lld: %.9g vs expected %.9g (tol %.3g)", what, (long long)i,
                           x, y, tol);
        }
    }
    free(va);
    free(vb);
}

/* ---- bf16 GEMM results computed two ways ---------------------------------------------- */
remat_tensor *rt_abs_product_bf16(const remat_tensor *a, double fa, const remat_tensor *b,
                                  double fb) {
    cr_assert(remat_ndim(a) == 2 && remat_ndim(b) == 2 && remat_size(a, 1) == remat_size(b, 0),
              "rt_abs_product_bf16: a (m, k) and b (k, n)");
    const remat_tensor *in[2] = {a, b};
    const double f[2] = {fa, fb};
    remat_tensor *abs_[2] = {NULL, NULL}, *p = NULL;
    for (int t = 0; t < 2; t++) {
        double *v = rt_values(in[t]);
        int64_t n = remat_numel(in[t]), shape[2] = {remat_size(in[t], 0), remat_size(in[t], 1)};
        for (int64_t i = 0; i < n; i++)
            v[i] = fabs(rm_bf16_to_f32(rm_f32_to_bf16((float)v[i]))) * f[t];
        RT_OK(remat_from_data(&abs_[t], 2, shape, REMAT_F64, v));
        free(v);
    }
    RT_OK(remat_matmul(&p, abs_[0], abs_[1]));
    remat_release(abs_[0]);
    remat_release(abs_[1]);
    return p;
}

/* One bf16 ulp at |v| (the spacing of bf16 values there; subnormals' below 2⁻¹²⁶). */
static double bf16_ulp(double v) {
    int e;
    frexp(fabs(v), &e); /* |v| in [2^(e-1), 2^e) */
    return ldexp(1.0, (e - 1 > -126 ? e - 1 : -126) - 7);
}

void rt_assert_same_gemm(const remat_tensor *got, const remat_tensor *want,
                         const remat_tensor *absprod, bool out_bf16, const char *what) {
    int64_t n = remat_numel(got);
    cr_assert(n == remat_numel(want) && n == remat_numel(absprod), "%s: %lld, %lld, %lld elements",
              what, (long long)n, (long long)remat_numel(want), (long long)remat_numel(absprod));
    double *g = rt_values(got), *w = rt_values(want), *s = rt_values(absprod);
    int64_t moved = 0, bad = -1;
    double tol = 0;
    for (int64_t i = 0; i < n && bad < 0; i++) {
        double d = fabs(g[i] - w[i]), big = fmax(fabs(g[i]), fabs(w[i]));
        tol = 16.0 * ldexp(s[i], -24) + (out_bf16 ? bf16_ulp(big) : 0.0);
        if (!(d <= tol)) bad = i;
        moved += out_bf16 && d > 16.0 * ldexp(s[i], -24);
    }
    double gb = bad >= 0 ? g[bad] : 0, wb = bad >= 0 ? w[bad] : 0, sb = bad >= 0 ? s[bad] : 0;
    free(g), free(w), free(s);
    cr_assert(bad < 0, "%s: element %lld: %.9g vs %.9g (tolerance %.3g, sum of |products| %.6g)",
              what, (long long)bad, gb, wb, tol, sb);
    cr_assert(moved * 100 <= n, "%s: %lld of %lld elements a bf16 ulp apart (at most 1%%)", what,
              (long long)moved, (long long)n);
}

/* ---- gradcheck ------------------------------------------------------------------------ */
static int64_t elem_offset(const remat_tensor *t, int64_t i) {
    int64_t off = t->offset;
    for (int d = t->ndim - 1; d >= 0; d--) {
        off += (i % t->shape[d]) * t->strides[d];
        i /= t->shape[d];
    }
    return off;
}

/* Reads / writes the f64 element at p of x's storage, on any device. */
static double peek(const remat_tensor *x, const double *p) {
    double v;
    RT_OK(rm_device_copy(REMAT_DEVICE_CPU, &v, x->storage->device, p, sizeof v));
    return v;
}
static void poke(const remat_tensor *x, double *p, double v) {
    RT_OK(rm_device_copy(x->storage->device, p, REMAT_DEVICE_CPU, &v, sizeof v));
}

bool rt_has_data(const remat_tensor *t) { return t && t->storage->data != NULL; }

double rt_item_at(const remat_tensor *t, int64_t i) {
    cr_assert(i >= 0 && i < remat_numel(t), "rt_item_at: index %lld of %lld elements", (long long)i,
              (long long)remat_numel(t));
    double *v = rt_values(t), x = v[i];
    free(v);
    return x;
}

void rt_add_at(remat_tensor *t, int64_t i, double delta) {
    cr_assert(i >= 0 && i < remat_numel(t), "rt_add_at: index %lld of %lld elements", (long long)i,
              (long long)remat_numel(t));
    cr_assert(rt_has_data(t), "rt_add_at: the tensor has no data");
    char *p = (char *)t->storage->data + (size_t)elem_offset(t, i) * remat_dtype_size(t->dtype);
    if (t->dtype == REMAT_F64) {
        poke(t, (double *)p, peek(t, (double *)p) + delta);
        return;
    }
    cr_assert_eq(t->dtype, REMAT_F32, "rt_add_at: f32 or f64 only");
    float v;
    RT_OK(rm_device_copy(REMAT_DEVICE_CPU, &v, t->storage->device, p, sizeof v));
    v = (float)(v + delta);
    RT_OK(rm_device_copy(t->storage->device, p, REMAT_DEVICE_CPU, &v, sizeof v));
}

/* Evaluates sum(f(inputs) * w) with grad off. */
static int eval_loss(rt_fn f, void *ud, int n, remat_tensor *const *inputs, const double *w,
                     int64_t nw, double *loss) {
    bool prev = remat_no_grad_begin();
    remat_tensor *out = NULL;
    int rc = f(ud, inputs, n, &out);
    remat_grad_mode_restore(prev);
    if (rc) return rc;
    if (remat_numel(out) != nw) {
        remat_release(out);
        return remat_set_error(REMAT_ESHAPE, "gradcheck: output size changed");
    }
    double *v = malloc(sizeof(double) * (size_t)(nw ? nw : 1));
    remat_copy_to_buffer(out, REMAT_F64, v, nw);
    double s = 0;
    for (int64_t i = 0; i < nw; i++) s += v[i] * w[i];
    free(v);
    remat_release(out);
    *loss = s;
    return REMAT_OK;
}

bool rt_gradcheck(rt_fn f, void *ud, int n, remat_tensor *const *inputs, double eps, double atol,
                  double rtol, char *msg, size_t msg_len) {
    msg[0] = 0;
    remat_tensor *out = NULL;
    int rc = f(ud, inputs, n, &out);
    if (rc) {
        snprintf(msg, msg_len, "forward failed: %s", remat_last_error());
        return false;
    }
    int64_t nw = remat_numel(out);
    double *w = malloc(sizeof(double) * (size_t)(nw ? nw : 1));
    uint64_t s = 12345;
    for (int64_t i = 0; i < nw; i++) w[i] = 0.5 + (double)(splitmix(&s) >> 11) / 9007199254740992.0;
    remat_tensor *wt = NULL;
    remat_empty(&wt, out->ndim, out->shape, out->dtype, REMAT_DEVICE_CPU);
    for (int64_t i = 0; i < nw; i++) {
        if (out->dtype == REMAT_F32) ((float *)remat_data(wt))[i] = (float)w[i];
        else ((double *)remat_data(wt))[i] = w[i];
    }
    if (!remat_device_host_addressable(out->storage->device.type)) { /* test device */
        remat_tensor *wd = NULL;
        RT_OK(remat_to_device(&wd, wt, out->storage->device));
        remat_release(wt);
        wt = wd;
    }
    remat_tensor *diff_in[16];
    int idx[16], nd = 0;
    for (int i = 0; i < n && nd < 16; i++)
        if (inputs[i] && remat_requires_grad(inputs[i])) {
            diff_in[nd] = inputs[i];
            idx[nd++] = i;
        }
    remat_tensor *grads[16] = {0};
    bool ok = true;
    if (!remat_requires_grad(out)) {
        snprintf(msg, msg_len, "output does not require grad");
        ok = false;
        goto done;
    }
    rc = remat_grad(1, &out, &wt, nd, diff_in, false, true, grads);
    if (rc) {
        snprintf(msg, msg_len, "remat_grad failed: %s", remat_last_error());
        ok = false;
        goto done;
    }
    for (int k = 0; k < nd && ok; k++) {
        remat_tensor *x = diff_in[k];
        int64_t ne = remat_numel(x);
        double *an = NULL;
        if (grads[k]) an = rt_values(grads[k]);
        /* positions sharing storage with an earlier one (expanded views) */
        for (int64_t e = 0; e < ne && ok; e++) {
            int64_t off = elem_offset(x, e);
            bool dup = false;
            for (int64_t e2 = 0; e2 < e && !dup; e2++) dup = elem_offset(x, e2) == off;
            if (dup) continue;
            double *p = (double *)x->storage->data + off;
            if (x->dtype != REMAT_F64) {
                snprintf(msg, msg_len, "gradcheck needs f64 inputs");
                ok = false;
                break;
            }
            double orig = peek(x, p), lp, lm;
            poke(x, p, orig + eps);
            rc = eval_loss(f, ud, n, inputs, w, nw, &lp);
            poke(x, p, orig - eps);
            if (!rc) rc = eval_loss(f, ud, n, inputs, w, nw, &lm);
            poke(x, p, orig);
            if (rc) {
                snprintf(msg, msg_len, "perturbed forward failed: %s", remat_last_error());
                ok = false;
                break;
            }
            double num = (lp - lm) / (2 * eps);
            /* sum the analytic grad over all positions aliasing this element */
            double a = 0;
            for (int64_t e2 = 0; e2 < ne; e2++)
                if (elem_offset(x, e2) == off) a += an ? an[e2] : 0;
            if (!(fabs(a - num) <= atol + rtol * fabs(num))) {
                snprintf(msg, msg_len, "input %d element %lld: analytic %.10g vs numeric %.10g",
                         idx[k], (long long)e, a, num);
                ok = false;
            }
        }
        free(an);
    }
done:
    for (int k = 0; k < nd; k++) remat_release(grads[k]);
    remat_release(wt);
    remat_release(out);
    free(w);
    return ok;
}

/* ---- testdev ------------------------------------------------------------------------------- */
static int g_testdev_id = -1;
static bool g_testdev_init;
static long g_testdev_allocs;

static void *td_alloc(void *ud, int index, size_t nbytes) {
    (void)ud;
    (void)index;
    g_testdev_init = true;
    g_testdev_allocs++;
    return aligned_alloc(64, (nbytes + 63) & ~(size_t)63);
}
static void td_free(void *ud, int index, void *p, size_t n) {
    (void)ud;
    (void)index;
    (void)n;
    free(p);
}
static int td_copy(void *ud, int index, void *dst, const void *src, size_t n, remat_copy_kind k) {
    (void)ud;
    (void)index;
    (void)k;
    memmove(dst, src, n);
    return REMAT_OK;
}
static int td_count(void *ud) {
    (void)ud;
    return 2;
}
static bool td_is_init(void *ud) {
    (void)ud;
    return g_testdev_init;
}

int rt_testdev_register(void) {
    if (g_testdev_id >= 0) return g_testdev_id;
    g_testdev_id = remat_device_type_id("testdev");
    if (g_testdev_id >= 0) return g_testdev_id;
    /* its record: a host-addressable type with no rows of its own runs the cpu's */
    static const rm_backend k_testdev = {
        .device =
            {
                .name = "testdev",
                .host_addressable = true,
                .alloc = td_alloc,
                .free = td_free,
                .copy = td_copy,
                .device_count = td_count,
                .is_initialized = td_is_init,
            },
    };
    int id = -1;
    int rc = rm_backend_register(&k_testdev, &id);
    cr_assert_eq(rc, REMAT_OK, "register testdev: %s", remat_last_error());
    g_testdev_id = id;
    return id;
}

void rt_testdev_set_initialized(bool on) { g_testdev_init = on; }
long rt_testdev_allocs(void) { return g_testdev_allocs; }

/* ---- crashes -------------------------------------------------------------------------------- */
static char g_crash_what[256];

static void say_crash(void) {
    if (write(2, g_crash_what, strlen(g_crash_what)) < 0) {}
}

static void on_crash(int sig) {
    say_crash();
    void *bt[32];
    backtrace_symbols_fd(bt, backtrace(bt, 32), 2);
    signal(sig, SIG_DFL);
    raise(sig);
}

void rt_report_crash(const char *what) {
    snprintf(g_crash_what, sizeof g_crash_what, "\n%s\n", what);
    const int sigs[] = {SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGABRT};
    for (size_t i = 0; i < sizeof sigs / sizeof sigs[0]; i++) signal(sigs[i], on_crash);
#ifdef RT_ASAN
    __sanitizer_set_death_callback(say_crash);
#endif
}

/* ---- warnings ------------------------------------------------------------------------------ */
static char g_warn[16384];
static int g_warn_n;

static void warn_cb(void *ud, remat_log_level lvl, const char *m) {
    (void)ud;
    (void)lvl;
    size_t k = strlen(g_warn);
    snprintf(g_warn + k, sizeof g_warn - k, "%s\n", m);
    g_warn_n++;
}

void rt_capture_warnings(void) {
    g_warn[0] = 0;
    g_warn_n = 0;
    remat_set_log_callback(warn_cb, NULL);
}
const char *rt_warnings(void) { return g_warn; }
int rt_warning_count(void) { return g_warn_n; }

/* transfer_log.h's registration for the Criterion suites (transfer_log.c is Criterion-free). */
void rt_transfer_log_register(bool on, int polls) {
    cr_assert_gt(rt_fenced_type(), 0, "fenced device: %s", remat_last_error());
    RT_OK(rt_transfer_log_install(on, polls));
}

void rt_optim_pair(const remat_optim_options *o, remat_tensor *const *a, remat_tensor *const *b,
                   int n, remat_optimizer **oa, remat_optimizer **ob) {
    remat_tensor **ea = calloc((size_t)(4 * n + 4), sizeof *ea); /* even a, odd a, even b, odd b */
    cr_assert_not_null(ea);
    remat_tensor **oa_ = ea + n + 1, **eb = oa_ + n + 1, **ob_ = eb + n + 1;
    int ne = 0, no = 0;
    for (int i = 0; i < n; i++) {
        if (i % 2 == 0) ea[ne] = a[i], eb[ne++] = b[i];
        else oa_[no] = a[i], ob_[no++] = b[i];
    }
    RT_OK(remat_optim_create(oa, o, ea, ne));
    RT_OK(remat_optim_add_group(*oa, oa_, no, 0.0));
    RT_OK(remat_optim_create(ob, o, eb, ne));
    RT_OK(remat_optim_add_group(*ob, ob_, no, 0.0));
    free(ea);
}

void rt_assert_optim_pair_same(const remat_optimizer *oa, const remat_optimizer *ob,
                               remat_tensor *const *a, remat_tensor *const *b, int n,
                               const char *what) {
    cr_assert(remat_optim_last_grad_norm(oa) == remat_optim_last_grad_norm(ob),
              "%s: global norm %.17g against %.17g", what, remat_optim_last_grad_norm(oa),
              remat_optim_last_grad_norm(ob));
    for (int i = 0; i < n; i++) {
        cr_assert(rt_bitwise_equal(a[i], b[i]),
                  "%s: parameter %d (%lld elements, %s) differs (max |d| %g)", what, i,
                  (long long)remat_numel(a[i]), remat_dtype_name(remat_tensor_dtype(a[i])),
                  rt_max_abs_diff(a[i], b[i]));
        for (int slot = 0; slot < 2; slot++) {
            const remat_tensor *sa = remat_optim_state(oa, i, (remat_optim_slot)slot),
                               *sb = remat_optim_state(ob, i, (remat_optim_slot)slot);
            cr_assert_eq(sa == NULL, sb == NULL, "%s: state %d of parameter %d on one side only",
                         what, slot, i);
            if (sa)
                cr_assert(rt_bitwise_equal(sa, sb), "%s: state %d of parameter %d", what, slot, i);
        }
        cr_assert_eq(remat_optim_param_steps(oa, i), remat_optim_param_steps(ob, i),
                     "%s: steps of parameter %d", what, i);
    }
}

int64_t rt_kernel_calls(const remat_timing *t, const char *kernel) {
    int64_t c = 0;
    for (int i = 0; i < remat_timing_count(t); i++)
        if (!strcmp(remat_timing_row_at(t, i)->kernel, kernel))
            c += remat_timing_row_at(t, i)->calls;
    return c;
}
