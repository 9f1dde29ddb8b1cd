/* tests/test_autocast.c — bf16 as a compute dtype and the autocast scope
 * (remat/autocast.h): the scope's state, which ops cast what, gradients in
 * each input's dtype, the conversions' rounding, the bf16 GEMM against its
 * f32 fallback, and checkpointing under autocast (bitwise equal gradients;
 * the recomputation runs under the forward's state whatever is active in
 * backward). PyTorch fixtures for each autocast op: test_autocast_fixtures.c. */
#include <math.h>
#include <omp.h>
#include <stdlib.h>
#include <string.h>

#include "backends/cpu/bf16.h"
#include "backends/cpu/cpu.h"
#include "backends/cpu/gemm.h"
#include "core/core.h"
#include "core/kernels.h"
#include "remat/autocast.h"
#include "remat/report.h"
#include "support/models.h"
#include "support/rt.h"

static remat_autocast_state ac_on(void) {
    remat_autocast_state prev;
    RT_OK(remat_autocast_begin(&prev, REMAT_CPU, REMAT_BF16, true));
    return prev;
}

Test(autocast, scope_nests_and_restores) {
    cr_assert_not(remat_autocast_enabled(REMAT_CPU));
    remat_autocast_state outer = ac_on(), inner;
    cr_assert(remat_autocast_enabled(REMAT_CPU));
    RT_OK(remat_autocast_begin(&inner, REMAT_CPU, REMAT_BF16, false));
    cr_assert_not(remat_autocast_enabled(REMAT_CPU));
    remat_autocast_end(&inner);
    cr_assert(remat_autocast_enabled(REMAT_CPU));
    remat_autocast_end(&outer);
    cr_assert_not(remat_autocast_enabled(REMAT_CPU));
    RT_FAILS(remat_autocast_begin(&inner, REMAT_CPU, REMAT_F64, true), REMAT_EDTYPE, "bf16");
    RT_FAILS(remat_autocast_begin(&inner, 7, REMAT_BF16, true), REMAT_EDEVICE,
             "unknown device type");
    cr_assert_not(remat_autocast_enabled(REMAT_CPU));
    remat_autocast_end(NULL);
}

/* remat_autocast_lower_dtype: the autocast dtype for f32 and bf16 tensors on a device with
 * autocast on, the tensor's own dtype otherwise (f64, i64, autocast off or disabled). */
Test(autocast, lower_dtype_follows_the_scope_and_the_dtype) {
    int64_t n = 4;
    remat_tensor *f = NULL, *h = NULL, *d = NULL, *i = NULL;
    RT_OK(remat_zeros(&f, 1, &n, REMAT_F32, REMAT_DEVICE_CPU));
    RT_OK(remat_zeros(&h, 1, &n, REMAT_BF16, REMAT_DEVICE_CPU));
    RT_OK(remat_zeros(&d, 1, &n, REMAT_F64, REMAT_DEVICE_CPU));
    RT_OK(remat_zeros(&i, 1, &n, REMAT_I64, REMAT_DEVICE_CPU));
    cr_assert_eq(remat_autocast_lower_dtype(f), REMAT_F32, "autocast off: x's own dtype");
    cr_assert_eq(remat_autocast_lower_dtype(h), REMAT_BF16);
    remat_autocast_state outer = ac_on(), inner;
    cr_assert_eq(remat_autocast_lower_dtype(f), REMAT_BF16);
    cr_assert_eq(remat_autocast_lower_dtype(h), REMAT_BF16);
    cr_assert_eq(remat_autocast_lower_dtype(d), REMAT_F64, "f64 is never lowered");
    cr_assert_eq(remat_autocast_lower_dtype(i), REMAT_I64);
    RT_OK(remat_autocast_begin(&inner, REMAT_CPU, REMAT_BF16, false));
    cr_assert_eq(remat_autocast_lower_dtype(f), REMAT_F32, "a disabled inner scope");
    remat_autocast_end(&inner);
    remat_autocast_end(&outer);
    remat_release(f), remat_release(h), remat_release(d), remat_release(i);
}

/* Each category: lower precision (linear), f32 (softmax, layer_norm, the
 * losses, sum), none (gelu keeps bf16), promote (bf16 + f32 → f32), f64 untouched. */
Test(autocast, ops_run_in_their_category_dtype) {
    int64_t xs[2] = {4, 8}, ws[2] = {6, 8}, bs[1] = {6};
    remat_tensor *x = rt_rand(2, xs, REMAT_F32, -1, 1, 1), *w = rt_rand(2, ws, REMAT_F32, -1, 1, 2);
    remat_tensor *b = rt_rand(1, bs, REMAT_F32, -1, 1, 3),
                 *xd = rt_rand(2, xs, REMAT_F64, -1, 1, 4);
    remat_tensor *wd = rt_rand(2, ws, REMAT_F64, -1, 1, 5);
    remat_scope *sc;
    RT_OK(remat_scope_begin(&sc));
    remat_autocast_state prev = ac_on();
    remat_tensor *y, *s, *g, *ln, *sum, *mix, *yd;
    RT_OK(remat_linear(&y, x, w, b));
    cr_assert_eq(remat_tensor_dtype(y), REMAT_BF16);
    RT_OK(remat_gelu(&g, y, REMAT_GELU_ERF));
    cr_assert_eq(remat_tensor_dtype(g), REMAT_BF16);
    RT_OK(remat_softmax(&s, y, -1));
    cr_assert_eq(remat_tensor_dtype(s), REMAT_F32);
    RT_OK(remat_layer_norm(&ln, y, 1, NULL, NULL, 1e-5));
    cr_assert_eq(remat_tensor_dtype(ln), REMAT_F32);
    RT_OK(remat_sum_all(&sum, g));
    cr_assert_eq(remat_tensor_dtype(sum), REMAT_F32);
    RT_OK(remat_add(&mix, g, s));
    cr_assert_eq(remat_tensor_dtype(mix), REMAT_F32);
    RT_OK(remat_linear(&yd, xd, wd, NULL));
    cr_assert_eq(remat_tensor_dtype(yd), REMAT_F64, "f64 is never cast");
    remat_autocast_end(&prev);
    /* off again: f32 stays f32, promotion still applies */
    remat_tensor *y2, *mix2;
    RT_OK(remat_linear(&y2, x, w, b));
    cr_assert_eq(remat_tensor_dtype(y2), REMAT_F32);
    RT_OK(remat_add(&mix2, y, y2));
    cr_assert_eq(remat_tensor_dtype(mix2), REMAT_F32);
    RT_OK(remat_scope_end(sc));
    remat_release(x), remat_release(w), remat_release(b), remat_release(xd), remat_release(wd);
    cr_assert_eq(remat_live_tensors(), 0);
}

/* Master weights: f32 parameters get f32 gradients through the casts; a
 * bf16 leaf gets a bf16 gradient; the values agree with the f32 run to
 * bf16 precision. */
Test(autocast, gradients_flow_back_in_each_inputs_dtype) {
    int64_t xs[2] = {16, 32}, ws[2] = {24, 32}, bs[1] = {24};
    remat_tensor *x = rt_leaf(rt_rand(2, xs, REMAT_F32, -1, 1, 1));
    remat_tensor *w = rt_leaf(rt_rand(2, ws, REMAT_F32, -1, 1, 2));
    remat_tensor *b = rt_leaf(rt_rand(1, bs, REMAT_F32, -1, 1, 3));
    remat_tensor *gref[3];
    for (int pass = 0; pass < 2; pass++) {
        remat_scope *sc;
        RT_OK(remat_scope_begin(&sc));
        remat_autocast_state prev;
        RT_OK(remat_autocast_begin(&prev, REMAT_CPU, REMAT_BF16, pass == 1));
        remat_tensor *y, *l;
        RT_OK(remat_linear(&y, x, w, b));
        RT_OK(remat_mse_loss(&l, y, y)); /* 0, but a graph through both inputs */
        RT_OK(remat_sum_all(&l, y));
        remat_autocast_end(&prev);
        RT_OK(remat_backward_scalar(l));
        RT_OK(remat_scope_end(sc));
        remat_tensor *p[3] = {x, w, b};
        for (int i = 0; i < 3; i++) {
            remat_tensor *g = remat_tensor_grad(p[i]);
            cr_assert_eq(remat_tensor_dtype(g), REMAT_F32, "grad %d must be f32", i);
            if (pass == 0) gref[i] = remat_retain(g);
            else rt_assert_close(g, gref[i], 2e-2, 1e-2, "autocast grad vs f32");
        }
        rt_zero_grads(3, p);
    }
    /* a bf16 leaf: its gradient is bf16 */
    remat_tensor *xb = NULL, *xc = NULL;
    RT_OK(remat_to_dtype(&xc, x, REMAT_BF16));
    RT_OK(remat_detach(&xb, xc));
    remat_release(xc);
    RT_OK(remat_set_requires_grad(xb, true));
    remat_tensor *yb, *lb;
    remat_autocast_state prev = ac_on();
    RT_OK(remat_linear(&yb, xb, w, NULL));
    RT_OK(remat_sum_all(&lb, yb));
    remat_autocast_end(&prev);
    RT_OK(remat_backward_scalar(lb));
    cr_assert_eq(remat_tensor_dtype(remat_tensor_grad(xb)), REMAT_BF16);
    cr_assert_eq(remat_tensor_dtype(remat_tensor_grad(w)), REMAT_F32);
    remat_release(yb), remat_release(lb), remat_release(xb);
    for (int i = 0; i < 3; i++) remat_release(gref[i]);
    remat_tensor *p[3] = {x, w, b};
    rt_zero_grads(3, p);
    remat_release(x), remat_release(w), remat_release(b);
    cr_assert_eq(remat_live_tensors(), 0);
}

/* f32 → bf16: round to nearest, ties to even; NaN stays NaN, ±Inf stays
 * ±Inf, overflow past bf16's largest finite rounds to Inf; through
 * remat_to_dtype (the vectorised kernel) as through element access. */
Test(autocast, conversion_rounds_to_nearest_even_and_keeps_specials) {
    union {
        uint32_t u;
        float f;
    } c[] = {
        {0x3F808000u}, /* 1 + 2^-8: tie, even below → 1.0 (0x3F80) */
        {0x3F818000u}, /* tie, odd below → up (0x3F82) */
        {0x3F808001u}, /* just above the tie → up (0x3F81) */
        {0x7F800000u}, {0xFF800000u}, {0x7FC00000u}, {0x7F800001u} /* signalling NaN */,
        {0x7F7FFFFFu}, /* FLT_MAX → Inf */
        {0x00000001u}, /* smallest denormal → 0 (ties to even) */
        {0x80000000u},
    };
    const uint16_t want[] = {0x3F80, 0x3F82, 0x3F81, 0x7F80, 0xFF80, 0x7FC0, 0, 0x7F80, 0, 0x8000};
    int n = (int)(sizeof c / sizeof c[0]);
    int64_t s[1] = {n};
    float vals[16];
    for (int i = 0; i < n; i++) vals[i] = c[i].f;
    remat_tensor *x = NULL, *y = NULL, *back = NULL;
    RT_OK(remat_from_data(&x, 1, s, REMAT_F32, vals));
    RT_OK(remat_to_dtype(&y, x, REMAT_BF16));
    const uint16_t *h = remat_data(y);
    for (int i = 0; i < n; i++) {
        if (i == 6) { /* signalling NaN: a NaN */
            cr_assert((h[i] & 0x7F80) == 0x7F80 && (h[i] & 0x7F), "NaN lost: %04x", h[i]);
            continue;
        }
        cr_assert_eq(h[i], want[i], "element %d: %04x, want %04x", i, h[i], want[i]);
    }
    RT_OK(remat_to_dtype(&back, y, REMAT_F32));
    const float *f = remat_data(back);
    cr_assert(isinf(f[3]) && f[3] > 0 && isinf(f[4]) && f[4] < 0 && isnan(f[5]) && f[0] == 1.0f);
    remat_release(x), remat_release(y), remat_release(back);
}

/* The conversion passes over many elements (vectorised clones, split over
 * the threads at unaligned boundaries) round every element as the scalar
 * rm_f32_to_bf16 does and widen it back exactly: random bit patterns,
 * which include NaNs, infinities, denormals and ties, at 1 and 2 threads
 * and from odd offsets through the per-thread runs. */
Test(autocast, conversion_passes_match_the_scalar_rounding) {
    const int64_t n = 3 * RM_OMP_MIN + 37;
    uint32_t *bits = malloc(sizeof *bits * (size_t)n);
    uint16_t *h = malloc(sizeof *h * (size_t)n);
    float *back = malloc(sizeof *back * (size_t)n);
    cr_assert(bits && h && back);
    uint64_t st = 0x9E3779B97F4A7C15u;
    for (int64_t i = 0; i < n; i++) {
        st = st * 6364136223846793005u + 1442695040888963407u;
        bits[i] = (uint32_t)(st >> 32);
        if (i % 97 == 0) bits[i] = (bits[i] & 0x807FFFFFu) | 0x7F800000u; /* NaN or Inf */
        if (i % 89 == 0) bits[i] = (bits[i] & 0xFFFF0000u) | 0x8000u;     /* a tie */
        if (i % 83 == 0) bits[i] &= 0x807FFFFFu;                          /* denormal */
    }
    const float *f = (const float *)bits;
    for (int threads = 1; threads <= 2; threads++) {
        omp_set_num_threads(threads);
        memset(h, 0, sizeof *h * (size_t)n);
        rm_cpu_f32_to_bf16(f, h, n);
        rm_cpu_bf16_to_f32(h, back, n);
        for (int64_t i = 0; i < n; i++) {
            uint16_t want = rm_f32_to_bf16(f[i]);
            cr_assert_eq(h[i], want, "%d thread(s), element %lld (%08x): %04x, want %04x", threads,
                         (long long)i, bits[i], h[i], want);
            uint32_t wb = (uint32_t)want << 16, gb;
            memcpy(&gb, &back[i], sizeof gb);
            cr_assert_eq(gb, wb, "widening element %lld", (long long)i);
        }
    }
    omp_set_num_threads(2);
    for (int64_t off = 1; off < 40; off += 13) { /* the runs from unaligned starts */
        rm_bf16_round_run(f + off, h + off, n - off - 3);
        rm_bf16_widen_run(h + off, back + off, n - off - 3);
        for (int64_t i = off; i < n - 3; i++) {
            cr_assert_eq(h[i], rm_f32_to_bf16(f[i]), "run from %lld, element %lld", (long long)off,
                         (long long)i);
            float want = rm_bf16_to_f32(h[i]); /* bits: NaN != NaN */
            cr_assert(!memcmp(&back[i], &want, sizeof want), "widening element %lld", (long long)i);
        }
    }
    free(bits), free(h), free(back);
}

/* The bf16 GEMM (oneDNN where the CPU has AVX512_BF16/AMX) against its f32
 * fallback (REMAT_NO_BF16 forces it): both accumulate in f32 and round
 * once, so they agree to one bf16 rounding; and against the f32 product of
 * the bf16 values to bf16 precision. Transposed and batched operands too. */
Test(autocast, bf16_gemm_matches_the_f32_fallback) {
    int64_t as[3] = {3, 33, 70}, bs2[3] = {3, 70, 45};
    remat_tensor *a = rt_rand(3, as, REMAT_F32, -1, 1, 7),
                 *b = rt_rand(3, bs2, REMAT_F32, -1, 1, 8);
    remat_tensor *ab = NULL, *bb = NULL, *bt = NULL, *y1 = NULL, *y2 = NULL, *ref = NULL;
    RT_OK(remat_to_dtype(&ab, a, REMAT_BF16));
    RT_OK(remat_to_dtype(&bb, b, REMAT_BF16));
    RT_OK(remat_transpose(&bt, bb, 1, 2)); /* a transposed view: (3, 45, 70)ᵀ */
    remat_tensor *btt = NULL, *btc = NULL;
    RT_OK(remat_contiguous(&btc, bt));
    RT_OK(remat_transpose(&btt, btc, 1, 2));
    RT_OK(remat_matmul(&y1, ab, btt));
    setenv("REMAT_NO_BF16", "1", 1);
    RT_OK(remat_matmul(&y2, ab, btt));
    unsetenv("REMAT_NO_BF16");
    remat_tensor *af = NULL, *bf = NULL;
    RT_OK(remat_to_dtype(&af, ab, REMAT_F32));
    RT_OK(remat_to_dtype(&bf, bb, REMAT_F32));
    RT_OK(remat_matmul(&ref, af, bf));
    cr_assert_eq(remat_tensor_dtype(y1), REMAT_BF16);
    remat_tensor *y1f = NULL, *y2f = NULL;
    RT_OK(remat_to_dtype(&y1f, y1, REMAT_F32));
    RT_OK(remat_to_dtype(&y2f, y2, REMAT_F32));
    rt_assert_close(y1f, y2f, 1e-6, 8e-3, "oneDNN bf16 vs f32 fallback");
    rt_assert_close(y1f, ref, 1e-6, 8e-3, "bf16 GEMM vs f32 product of the bf16 values");
    remat_tensor *all[] = {a, b, ab, bb, bt, btt, btc, y1, y2, ref, af, bf, y1f, y2f};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) remat_release(all[i]);
    cr_assert_eq(remat_live_tensors(), 0);
}

/* y = x·Wᵀ + b under autocast with b added once, inside the bf16 GEMM (oneDNN's
 * bias argument; no pass writes b into y first): against the f64 product of the
 * same bf16-rounded x and W plus b. The bias is 32..95 (integers: exact in bf16)
 * while |x·Wᵀ| stays under about 12, so a bias added twice or not at all is off
 * by 32 or more against a bound of 2⁻⁸·|y| + 1e-3 (one bf16 rounding of the
 * f32 sum; at most 0.43 here). 3-D x (one GEMM over the folded rows) and 2-D x,
 * 1 and 2 threads bitwise equal, each linear one bias-fused GEMM where the CPU
 * has bf16 GEMMs; and the f32 fallback (REMAT_NO_BF16) within the same bound. */
Test(autocast, bf16_linear_adds_its_bias_once_inside_the_gemm) {
    const int64_t xs[2][3] = {{2, 70, 384}, {33, 96, 0}}, ns[2] = {150, 40};
    const int nds[2] = {3, 2};
    for (int c = 0; c < 2; c++) {
        int64_t n = ns[c], k = xs[c][nds[c] - 1], ws[2] = {n, k};
        remat_tensor *x = rt_rand(nds[c], xs[c], REMAT_F32, -1, 1, 30 + (uint64_t)c),
                     *w = rt_rand(2, ws, REMAT_F32, -0.1, 0.1, 40 + (uint64_t)c);
        double *bv = malloc(sizeof(double) * (size_t)n);
        cr_assert(bv);
        for (int64_t j = 0; j < n; j++) bv[j] = (double)(32 + (j * 37) % 64) * (j % 2 ? -1 : 1);
        remat_tensor *b = rt_tensor(1, &n, REMAT_F32, bv);
        /* the reference: f64 x·Wᵀ + b from the bf16-rounded operands */
        remat_tensor *xb = NULL, *wb = NULL, *x64 = NULL, *w64 = NULL, *b64 = NULL, *ref = NULL;
        RT_OK(remat_to_dtype(&xb, x, REMAT_BF16));
        RT_OK(remat_to_dtype(&wb, w, REMAT_BF16));
        RT_OK(remat_to_dtype(&x64, xb, REMAT_F64));
        RT_OK(remat_to_dtype(&w64, wb, REMAT_F64));
        RT_OK(remat_to_dtype(&b64, b, REMAT_F64));
        RT_OK(remat_linear(&ref, x64, w64, b64));
        double *rv = rt_values(ref);
        int64_t rows = remat_numel(ref) / n;
        remat_tensor *y[3] = {NULL, NULL, NULL};
        for (int t = 0; t < 3; t++) { /* 1 thread, 2 threads, without bf16 GEMMs */
            omp_set_num_threads(t == 0 ? 1 : 2);
            if (t == 2) setenv("REMAT_NO_BF16", "1", 1);
            uint64_t fused = rm_bgemm_bias_runs(), runs = rm_bgemm_native_runs();
            remat_autocast_state prev = ac_on();
            RT_OK(remat_linear(&y[t], x, w, b));
            remat_autocast_end(&prev);
            unsetenv("REMAT_NO_BF16");
            cr_assert_eq(remat_tensor_dtype(y[t]), REMAT_BF16);
            bool native = t < 2 && remat_cpu_has_bf16();
            cr_assert_eq(rm_bgemm_bias_runs() - fused, native ? 1u : 0u,
                         "case %d run %d: %llu bias-fused bf16 GEMMs", c, t,
                         (unsigned long long)(rm_bgemm_bias_runs() - fused));
            cr_assert_eq(rm_bgemm_native_runs() - runs, native ? 1u : 0u,
                         "case %d run %d: %llu bf16 GEMMs", c, t,
                         (unsigned long long)(rm_bgemm_native_runs() - runs));
            double *yv = rt_values(y[t]), worst = 0;
            for (int64_t i = 0; i < rows * n; i++) {
                double e = fabs(yv[i] - rv[i]), bound = ldexp(fabs(rv[i]), -8) + 1e-3;
                cr_assert(e <= bound, "case %d run %d: y[%lld, %lld] = %g, want %g (bias %g)", c, t,
                          (long long)(i / n), (long long)(i % n), yv[i], rv[i], bv[i % n]);
                worst = fmax(worst, e);
            }
            cr_log_info("case %d run %d: max |error| %.3g", c, t, worst);
            free(yv);
        }
        cr_assert(rt_bitwise_equal(y[0], y[1]), "case %d: 1 and 2 threads differ by %g", c,
                  rt_max_abs_diff(y[0], y[1]));
        free(bv), free(rv);
        remat_tensor *all[] = {x, w, b, xb, wb, x64, w64, b64, ref, y[0], y[1], y[2]};
        for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) remat_release(all[i]);
    }
    omp_set_num_threads(2);
    cr_assert_eq(remat_live_tensors(), 0);
}

/* ---- checkpointing under autocast ------------------------------------------------------ */
/* Runs x through n transformer blocks, each checkpointed with o (NULL: not),
 * the forward under autocast `fwd`, the backward under `bwd`. */
static void run_ac(int n, rt_tblock *blk, remat_tensor *x, const remat_checkpoint_options *o,
                   bool fwd, bool bwd, rt_grads *out) {
    remat_tensor *params[RT_MAX_PARAMS * 4];
    int np = 0;
    for (int i = 0; i < n; i++) np += rt_tblock_params(&blk[i], params + np);
    remat_manual_seed(11);
    rt_zero_grads(np, params);
    rt_zero_grads(1, &x);
    remat_autocast_state prev;
    RT_OK(remat_autocast_begin(&prev, REMAT_CPU, REMAT_BF16, fwd));
    remat_tensor *h = remat_retain(x);
    for (int i = 0; i < n; i++) {
        remat_tensor *y = NULL;
        if (o) RT_OK(remat_checkpoint(rt_tblock_fn, &blk[i], 1, &h, 1, &y, o));
        else RT_OK(rt_tblock_fn(&blk[i], &h, 1, &y, 1));
        remat_release(h);
        h = y;
    }
    remat_tensor *l;
    RT_OK(remat_sum_all(&l, h));
    remat_autocast_end(&prev);
    RT_OK(remat_autocast_begin(&prev, REMAT_CPU, REMAT_BF16, bwd));
    RT_OK(remat_backward_scalar(l));
    remat_autocast_end(&prev);
    remat_release(l);
    out->out = h;
    out->n = 0;
    out->g[out->n++] = remat_retain(remat_tensor_grad(x));
    for (int i = 0; i < np; i++) out->g[out->n++] = remat_retain(remat_tensor_grad(params[i]));
}

static void checkpoint_case(int reentrant, double p_drop) {
    rt_tblock blk[2];
    for (int i = 0; i < 2; i++) rt_tblock_init(&blk[i], 32, 4, 16, p_drop, REMAT_F32, 20 + i);
    int64_t xs[3] = {2, 16, 32};
    remat_tensor *x = rt_leaf(rt_rand(3, xs, REMAT_F32, -1, 1, 9));
    remat_checkpoint_options o = {0};
    o.use_reentrant = reentrant ? REMAT_OPT_TRUE : REMAT_OPT_FALSE;
    rt_grads plain, ck_same, ck_off, ck_f32;
    run_ac(2, blk, x, NULL, true, true, &plain);
    rt_grads again;
    run_ac(2, blk, x, NULL, true, true, &again);
    rt_assert_same_grads(&plain, &again, "two runs under autocast");
    rt_grads_free(&again);
    cr_assert_eq(remat_tensor_dtype(plain.out), REMAT_F32);
    run_ac(2, blk, x, &o, true, true, &ck_same);
    rt_assert_same_grads(&plain, &ck_same, "checkpointed vs not, under autocast");
    /* backward with autocast off: the recomputation still runs in bf16
     * (the default determinism check compares the dtypes of every
     * recomputed saved tensor with the forward's) */
    run_ac(2, blk, x, &o, true, false, &ck_off);
    rt_assert_same_grads(&plain, &ck_off, "recomputed with autocast off in backward");
    /* and the reverse: an f32 forward recomputed in f32 under an active autocast */
    rt_grads f32_plain;
    run_ac(2, blk, x, NULL, false, false, &f32_plain);
    run_ac(2, blk, x, &o, false, true, &ck_f32);
    rt_assert_same_grads(&f32_plain, &ck_f32, "f32 forward recomputed under active autocast");
    rt_grads *all[] = {&plain, &ck_same, &ck_off, &ck_f32, &f32_plain};
    for (int i = 0; i < 5; i++) rt_grads_free(all[i]);
    for (int i = 0; i < 2; i++) rt_tblock_free(&blk[i]);
    remat_release(x);
    cr_assert_eq(remat_live_tensors(), 0);
}

Test(autocast, checkpoint_nonreentrant_recomputes_under_the_forwards_state) {
    checkpoint_case(0, 0.1);
}

Test(autocast, checkpoint_reentrant_recomputes_under_the_forwards_state) {
    checkpoint_case(1, 0.1);
}

/* Selective policies see the op's real dtypes: under autocast the policy
 * callback is handed linear's bf16 inputs. */
typedef struct seen {
    int linear_bf16, linear_other;
} seen;
static remat_checkpoint_policy seen_policy(const remat_sac_context *ctx, const char *op, int n,
                                           remat_tensor *const *in, void *ud) {
    (void)ctx;
    seen *s = ud;
    if (!strcmp(op, "remat_linear") && n >= 2) {
        /* x cast to bf16; the f32 weight reaches the op uncast (its kernel rounds it) */
        if (remat_tensor_dtype(in[0]) == REMAT_BF16 && remat_tensor_dtype(in[1]) == REMAT_F32)
            s->linear_bf16++;
        else s->linear_other++;
    }
    return REMAT_PREFER_RECOMPUTE;
}

Test(autocast, selective_policies_see_the_cast_dtypes) {
    rt_tblock blk[1];
    rt_tblock_init(&blk[0], 32, 4, 16, 0.0, REMAT_F32, 30);
    int64_t xs[3] = {2, 16, 32};
    remat_tensor *x = rt_leaf(rt_rand(3, xs, REMAT_F32, -1, 1, 9));
    seen s = {0};
    remat_policy *pol = NULL;
    RT_OK(remat_policy_from_fn(&pol, seen_policy, &s, NULL));
    remat_sac_config cfg = {.policy = pol};
    remat_checkpoint_options o = {0};
    o.use_reentrant = REMAT_OPT_FALSE;
    o.context_fn = remat_sac_context_fn;
    o.context_fn_data = &cfg;
    rt_grads g;
    run_ac(1, blk, x, &o, true, false, &g);
    cr_assert_gt(s.linear_bf16, 0);
    cr_assert_eq(s.linear_other, 0, "%d linear calls saw other dtypes", s.linear_other);
    rt_grads_free(&g);
    remat_policy_release(pol);
    rt_tblock_free(&blk[0]);
    remat_release(x);
    cr_assert_eq(remat_live_tensors(), 0);
}

/* A bf16 op without a native kernel is its f32 kernel on the widened
 * values, rounded once: bitwise what f32 gives rounded to bf16 — for a
 * large elementwise op (run chunk by chunk) and a small one alike, forward
 * and backward. */
Test(autocast, bf16_ops_round_the_f32_result_once) {
    /* chunked: one partial chunk past whole ones, split over 1, 2 and 3 threads */
    const int64_t sizes[4] = {1000, 600000, 3 * 16384 + 5, 3 * 16384 + 5};
    const int threads[4] = {2, 2, 1, 3};
    for (int c = 0; c < 4; c++) {
        omp_set_num_threads(threads[c]);
        int64_t s[1] = {sizes[c]};
        remat_tensor *x32 = rt_rand(1, s, REMAT_F32, -3, 3, 40 + c), *xb = NULL, *xw = NULL;
        RT_OK(remat_to_dtype(&xb, x32, REMAT_BF16));
        RT_OK(remat_to_dtype(&xw, xb, REMAT_F32)); /* the bf16 values, exactly, in f32 */
        RT_OK(remat_set_requires_grad(xb, true));
        RT_OK(remat_set_requires_grad(xw, true));
        remat_tensor *yb = NULL, *yw = NULL, *ywb = NULL, *lb = NULL, *lw = NULL;
        RT_OK(remat_gelu(&yb, xb, REMAT_GELU_TANH));
        RT_OK(remat_gelu(&yw, xw, REMAT_GELU_TANH));
        RT_OK(remat_to_dtype(&ywb, yw, REMAT_BF16));
        cr_assert(rt_bitwise_equal(yb, ywb), "gelu bf16 (n=%lld) differs from f32 rounded",
                  (long long)s[0]);
        RT_OK(remat_sum_all(&lb, yb));
        RT_OK(remat_sum_all(&lw, yw));
        RT_OK(remat_backward_scalar(lb));
        RT_OK(remat_backward_scalar(lw));
        remat_tensor *gwb = NULL;
        RT_OK(remat_to_dtype(&gwb, remat_tensor_grad(xw), REMAT_BF16));
        cr_assert_eq(remat_tensor_dtype(remat_tensor_grad(xb)), REMAT_BF16);
        cr_assert(rt_bitwise_equal(remat_tensor_grad(xb), gwb), "gelu backward bf16 differs by %g",
                  rt_max_abs_diff(remat_tensor_grad(xb), gwb));
        remat_tensor *all[] = {x32, xb, xw, yb, yw, ywb, lb, lw, gwb};
        rt_zero_grads(1, &xb);
        rt_zero_grads(1, &xw);
        for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) remat_release(all[i]);
    }
    omp_set_num_threads(2);
    cr_assert_eq(remat_live_tensors(), 0);
}

/* linear's bias gradient on bf16 g (the column sums, RM_K_COLSUM) has a
 * native bf16 kernel that streams g's rows widened, bitwise what the f32
 * kernel on a whole widened copy of g gives rounded (rm_cpu_bf16_via_f32),
 * wide (many row chunks) and narrow, at 1 and 2 threads. */
Test(autocast, bf16_bias_gradient_matches_the_whole_copy_path) {
    rm_kernel_fn native = rm_cpu_kernels[RM_K_COLSUM][REMAT_BF16];
    cr_assert(native, "no native bf16 column-sum kernel");
    const int64_t shapes[3][2] = {{2048, 384}, {37, 1000}, {300, 10}};
    for (int c = 0; c < 3; c++)
        for (int threads = 1; threads <= 2; threads++) {
            omp_set_num_threads(threads);
            remat_tensor *g32 = rt_rand(2, shapes[c], REMAT_F32, -4, 4, 80 + (unsigned)c),
                         *g = NULL;
            RT_OK(remat_to_dtype(&g, g32, REMAT_BF16));
            remat_tensor *db[2];
            for (int r = 0; r < 2; r++) {
                RT_OK(remat_zeros(&db[r], 1, &shapes[c][1], REMAT_BF16, remat_tensor_device(g)));
                rm_kargs k = {.in = {g}, .out = {db[r]}};
                RT_OK(r ? rm_cpu_bf16_via_f32[RM_K_COLSUM](&k) : native(&k));
            }
            cr_assert(rt_bitwise_equal(db[0], db[1]), "%lld x %lld, %d thread(s): differs by %g",
                      (long long)shapes[c][0], (long long)shapes[c][1], threads,
                      rt_max_abs_diff(db[0], db[1]));
            remat_release(g32), remat_release(g), remat_release(db[0]), remat_release(db[1]);
        }
    omp_set_num_threads(2);
    cr_assert_eq(remat_live_tensors(), 0);
}

/* ---- bf16 attention ------------------------------------------------------------------- */
/* q, k, v, gy as per-head views of (B, T, H, D) tensors, as in the GPT: (B, H, T, D)
 * with row stride H·D. */
static remat_tensor *bf16_heads(const int64_t *s, uint64_t seed) {
    remat_tensor *x = rt_rand(4, s, REMAT_F32, -2, 2, seed), *b = NULL, *t = NULL;
    RT_OK(remat_to_dtype(&b, x, REMAT_BF16));
    RT_OK(remat_transpose(&t, b, 1, 2)); /* (B, H, T, D), row stride H·D */
    remat_release(x), remat_release(b);
    return t;
}

/* The attention kernels of dtype dt on in = q, k, v, gy (bf16 heads, or f64 copies
 * for the reference), through rm_cpu_bf16_via_f32 when whole: the forward, then the
 * backward from that forward's output and lse. out: y, lse, dq, dk, dv. */
static void att_kernels(remat_tensor *const *in, remat_dtype dt, bool whole,
                        const rm_attention_params *p, remat_tensor **out) {
    const int64_t *s = remat_shape(in[0]);
    remat_device dev = remat_tensor_device(in[0]);
    remat_dtype ldt = dt == REMAT_F64 ? REMAT_F64 : REMAT_F32;
    rm_kernel_fn fwd =
        whole ? rm_cpu_bf16_via_f32[RM_K_ATTENTION] : rm_cpu_kernels[RM_K_ATTENTION][dt];
    rm_kernel_fn bwd =
        whole ? rm_cpu_bf16_via_f32[RM_K_ATTENTION_BWD] : rm_cpu_kernels[RM_K_ATTENTION_BWD][dt];
    cr_assert(fwd && bwd, "no %s attention kernels", remat_dtype_name(dt));
    RT_OK(remat_zeros(&out[0], 4, s, dt, dev));
    RT_OK(remat_zeros(&out[1], 3, s, ldt, dev));
    rm_kargs kf = {.in = {in[0], in[1], in[2]}, .out = {out[0], out[1]}, .params = p};
    RT_OK(fwd(&kf));
    for (int i = 0; i < 3; i++) RT_OK(remat_zeros(&out[2 + i], 4, s, dt, dev));
    rm_kargs kb = {.in = {in[0], in[1], in[2], out[0], in[3], out[1]},
                   .out = {out[2], out[3], out[4]},
                   .params = p};
    RT_OK(bwd(&kb));
}

static void release_n(remat_tensor **t, int n) {
    for (int i = 0; i < n; i++) remat_release_p(&t[i]);
}

static const char *const att_what[5] = {"y", "lse", "dq", "dk", "dv"};

/* Without bf16 GEMMs (no AVX512_BF16/AMX, here REMAT_NO_BF16) bf16 attention
 * runs the f32 kernel on per batch entry f32 buffers (no f32 copies of whole
 * operands: for the GPT's per-head views of a packed qkv those were three
 * copies of the whole projection) and is bitwise what the whole-copy path
 * (rm_cpu_bf16_via_f32: the f32 kernel on widened operands, rounded once)
 * gives. T spans two query blocks. */
Test(autocast, bf16_attention_fallback_matches_the_whole_copy_path) {
    const int64_t s[4] = {2, 70, 3, 16};
    rm_attention_params p = {.causal = true, .scale = 0.25};
    remat_tensor *in[4], *r[2][5];
    for (int i = 0; i < 4; i++) in[i] = bf16_heads(s, 60 + (uint64_t)i);
    setenv("REMAT_NO_BF16", "1", 1);
    uint64_t runs = rm_bgemm_native_runs();
    att_kernels(in, REMAT_BF16, false, &p, r[0]);
    cr_assert_eq(rm_bgemm_native_runs(), runs, "REMAT_NO_BF16 set, yet oneDNN's bf16 GEMM ran");
    unsetenv("REMAT_NO_BF16");
    att_kernels(in, REMAT_BF16, true, &p, r[1]);
    for (int i = 0; i < 5; i++)
        cr_assert(rt_bitwise_equal(r[0][i], r[1][i]), "%s differs by %g", att_what[i],
                  rt_max_abs_diff(r[0][i], r[1][i]));
    release_n(in, 4), release_n(r[0], 5), release_n(r[1], 5);
    cr_assert_eq(remat_live_tensors(), 0);
}

/* max |got - want| / max |want| */
static double rel_err(remat_tensor *got, remat_tensor *want) {
    double scale = 0, *w = rt_values(want);
    for (int64_t i = 0; i < remat_numel(want); i++) scale = fmax(scale, fabs(w[i]));
    free(w);
    return rt_max_abs_diff(got, want) / scale;
}

/* Where the CPU has bf16 GEMMs, bf16 attention runs its six GEMMs in bf16
 * through oneDNN (2 per query block forward, 5 backward: S again, Pᵀ·dO,
 * dO·Vᵀ, dS·K, dSᵀ·Q), the results do not depend on the thread count, and
 * they stay within bf16 rounding of the f64 attention of the same bf16
 * values (the bounds are about 1.5x the errors measured, docs/autocast.md).
 * Shapes: several heads over two query blocks (the items run on threads),
 * one head over three (its backward's GEMMs run outside a parallel region,
 * with the whole team), not causal (T = 40, hd = 8). Also run without bf16 GEMMs
 * (REMAT_NO_BF16): the same bounds hold there. Where the CPU has no bf16 GEMMs
 * every run takes that route, within the bounds (the thread count may move bits). */
Test(autocast, bf16_attention_runs_bf16_gemms_deterministically) {
    const struct {
        int64_t s[4];
        bool causal;
    } cases[3] = {{{2, 70, 3, 16}, true}, {{1, 150, 1, 64}, true}, {{3, 40, 2, 8}, false}};
    const double bound[5] = {6e-3, 2e-7, 7e-3, 7e-3, 6e-3};
    for (int c = 0; c < 3; c++) {
        const int64_t *s = cases[c].s;
        rm_attention_params p = {.causal = cases[c].causal, .scale = 1.0 / sqrt((double)s[3])};
        remat_tensor *in[4], *in64[4], *ref[5], *r[3][5];
        for (int i = 0; i < 4; i++) {
            in[i] = bf16_heads(s, 90 + (uint64_t)(10 * c + i));
            RT_OK(remat_to_dtype(&in64[i], in[i], REMAT_F64));
        }
        att_kernels(in64, REMAT_F64, false, &p, ref);
        for (int t = 0; t < 3; t++) { /* 1 thread, 2 threads, without bf16 GEMMs */
            omp_set_num_threads(t == 0 ? 1 : 2);
            if (t == 2) setenv("REMAT_NO_BF16", "1", 1);
            uint64_t runs = rm_bgemm_native_runs();
            att_kernels(in, REMAT_BF16, false, &p, r[t]);
            unsetenv("REMAT_NO_BF16");
            int64_t nb = s[0] * s[2], nqb = (s[1] + 63) / 64;
            if (t < 2 && remat_cpu_has_bf16())
                cr_assert_eq(rm_bgemm_native_runs() - runs, (uint64_t)(7 * nb * nqb),
                             "case %d: %llu bf16 GEMMs, want %lld", c,
                             (unsigned long long)(rm_bgemm_native_runs() - runs),
                             (long long)(7 * nb * nqb));
            for (int i = 0; i < 5; i++) {
                remat_tensor *w = NULL;
                RT_OK(remat_to_dtype(&w, r[t][i], REMAT_F64));
                double e = rel_err(w, ref[i]);
                cr_log_info("case %d run %d %s: relative error %.3g", c, t, att_what[i], e);
                cr_assert(e <= bound[i], "case %d, run %d: %s off the f64 attention by %g (> %g)",
                          c, t, att_what[i], e, bound[i]);
                remat_release(w);
            }
        }
        /* Thread-count independence is the bf16 kernels' (each GEMM single-threaded on
         * its item). Without bf16 GEMMs (an AVX2 or AVX-512 CPU, ONEDNN_MAX_CPU_ISA below
         * AVX512_CORE_BF16: make test-isa) the f32 route runs some GEMMs with the whole
         * team, and oneDNN's sgemm may split their sums by the thread count: the bounds
         * above are what holds there. */
        for (int i = 0; i < 5 && remat_cpu_has_bf16(); i++)
            cr_assert(rt_bitwise_equal(r[0][i], r[1][i]), "case %d: %s differs at 1 and 2 threads",
                      c, att_what[i]);
        release_n(in, 4), release_n(in64, 4), release_n(ref, 5);
        for (int t = 0; t < 3; t++) release_n(r[t], 5);
    }
    omp_set_num_threads(2);
    cr_assert_eq(remat_live_tensors(), 0);
}

/* Checkpointed vs not under autocast through the fused attention (f32 x cast
 * to bf16 by the driver, per-head views): bitwise equal gradients. */
static int bf16_att_block(void *ud, remat_tensor *const *in, int n_in, remat_tensor **out,
                          int n_out) {
    (void)ud, (void)n_in, (void)n_out;
    remat_tensor *h = NULL, *t = NULL, *y = NULL;
    int rc = remat_tanh(&h, in[0]);
    if (!rc) rc = remat_transpose(&t, h, 1, 2); /* (B, H, T, D) */
    if (!rc) rc = remat_attention(&y, t, in[1], t, true, 0);
    remat_release(h), remat_release(t);
    out[0] = y;
    return rc;
}

Test(autocast, bf16_attention_checkpoint_bitwise) {
    const int64_t xs[4] = {2, 90, 3, 16}, ks[4] = {2, 3, 90, 16};
    remat_tensor *x = rt_leaf(rt_rand(4, xs, REMAT_F32, -1, 1, 31));
    remat_tensor *k = rt_leaf(rt_rand(4, ks, REMAT_F32, -1, 1, 32));
    remat_tensor *g[2][2];
    remat_checkpoint_options o = {.use_reentrant = REMAT_OPT_FALSE};
    for (int ck = 0; ck < 2; ck++) {
        remat_tensor *in[2] = {x, k}, *y = NULL, *l = NULL;
        remat_autocast_state prev = ac_on();
        if (ck) RT_OK(remat_checkpoint(bf16_att_block, NULL, 2, in, 1, &y, &o));
        else RT_OK(bf16_att_block(NULL, in, 2, &y, 1));
        cr_assert_eq(remat_tensor_dtype(y), REMAT_BF16);
        RT_OK(remat_sum_all(&l, y));
        remat_autocast_end(&prev);
        RT_OK(remat_grad(1, &l, NULL, 2, in, false, false, g[ck]));
        remat_release(y), remat_release(l);
    }
    for (int i = 0; i < 2; i++) {
        cr_assert_eq(remat_tensor_dtype(g[0][i]), REMAT_F32);
        cr_assert(rt_bitwise_equal(g[0][i], g[1][i]), "gradient %d: checkpointed differs by %g", i,
                  rt_max_abs_diff(g[0][i], g[1][i]));
        remat_release(g[0][i]), remat_release(g[1][i]);
    }
    remat_release(x), remat_release(k);
    cr_assert_eq(remat_live_tensors(), 0);
}

/* linear's create_graph backward under autocast (the f32 weight kept uncast,
 * src/ops/matmul.c): with L = sum(y ∘ c), y = linear(x, w, b) in bf16,
 *   gx = c·w  (f32, x's dtype),   gw = cᵀ·x  (f32, w's dtype),
 * both differentiable; their second derivatives
 *   d sum(gx ∘ v) / dw = cᵀ·v,   d sum(gw ∘ u) / dx = c·u
 * come back in f32, within bf16 rounding of the f32 products of the bf16
 * values (each bf16 GEMM rounds its operands and its result once). */
static remat_tensor *bf16_values(remat_tensor *t) { /* t's bf16 rounding, as f32 */
    remat_tensor *b = NULL, *f = NULL;
    RT_OK(remat_to_dtype(&b, t, REMAT_BF16));
    RT_OK(remat_to_dtype(&f, b, REMAT_F32));
    remat_release(b);
    return f;
}

static void assert_bf16_close(remat_tensor *got, remat_tensor *want, const char *what) {
    cr_assert_eq(remat_tensor_dtype(got), REMAT_F32, "%s: not f32", what);
    double scale = 0;
    double *w = rt_values(want);
    for (int64_t i = 0; i < remat_numel(want); i++) scale = fmax(scale, fabs(w[i]));
    free(w);
    double d = rt_max_abs_diff(got, want);
    cr_assert(d <= 1.6e-2 * scale, "%s differs by %g (scale %g)", what, d, scale);
}

Test(autocast, linear_double_backward_under_autocast) {
    const int64_t sx[2] = {5, 8}, sw[2] = {6, 8}, sb[1] = {6}, sy[2] = {5, 6};
    remat_tensor *x = rt_leaf(rt_rand(2, sx, REMAT_F32, -1, 1, 71));
    remat_tensor *w = rt_leaf(rt_rand(2, sw, REMAT_F32, -1, 1, 72));
    remat_tensor *b = rt_leaf(rt_rand(1, sb, REMAT_F32, -1, 1, 73));
    remat_tensor *c32 = rt_rand(2, sy, REMAT_F32, -1, 1, 74), *c = NULL;
    remat_tensor *v = rt_rand(2, sx, REMAT_F32, -1, 1, 75),
                 *u = rt_rand(2, sw, REMAT_F32, -1, 1, 76);
    RT_OK(remat_to_dtype(&c, c32, REMAT_BF16));
    remat_autocast_state prev = ac_on();
    remat_tensor *y = NULL, *yc = NULL, *l = NULL, *g[2] = {NULL, NULL};
    RT_OK(remat_linear(&y, x, w, b));
    cr_assert_eq(remat_tensor_dtype(y), REMAT_BF16);
    RT_OK(remat_mul(&yc, y, c));
    RT_OK(remat_sum_all(&l, yc));
    remat_backward_options create = {.create_graph = true};
    remat_tensor *in[2] = {x, w};
    RT_OK(remat_grad_ex(1, &l, NULL, 2, in, &create, g));
    cr_assert(remat_tensor_dtype(g[0]) == REMAT_F32 && remat_tensor_dtype(g[1]) == REMAT_F32,
              "first gradients not in the inputs' dtype (f32)");
    cr_assert(remat_requires_grad(g[0]) && remat_requires_grad(g[1]),
              "no graph for double backward");
    /* second order: d sum(gx ∘ v)/dw and d sum(gw ∘ u)/dx */
    remat_tensor *p = NULL, *q = NULL, *sp = NULL, *sq = NULL, *hw = NULL, *hx = NULL;
    RT_OK(remat_mul(&p, g[0], v));
    RT_OK(remat_sum_all(&sp, p));
    RT_OK(remat_grad(1, &sp, NULL, 1, &w, true, false, &hw));
    RT_OK(remat_mul(&q, g[1], u));
    RT_OK(remat_sum_all(&sq, q));
    RT_OK(remat_grad(1, &sq, NULL, 1, &x, true, false, &hx));
    remat_autocast_end(&prev);
    /* references: f32 products of the bf16 values */
    remat_tensor *cf = bf16_values(c32), *vf = bf16_values(v), *uf = bf16_values(u);
    remat_tensor *xf = bf16_values(x), *wf = bf16_values(w), *ct = NULL;
    remat_tensor *rgx = NULL, *rgw = NULL, *rhw = NULL, *rhx = NULL;
    RT_OK(remat_transpose(&ct, cf, 0, 1));
    RT_OK(remat_matmul(&rgx, cf, wf)); /* (5, 8) */
    RT_OK(remat_matmul(&rgw, ct, xf)); /* (6, 8) */
    RT_OK(remat_matmul(&rhw, ct, vf)); /* (6, 8) */
    RT_OK(remat_matmul(&rhx, cf, uf)); /* (5, 8) */
    assert_bf16_close(g[0], rgx, "gx");
    assert_bf16_close(g[1], rgw, "gw");
    assert_bf16_close(hw, rhw, "d sum(gx v)/dw");
    assert_bf16_close(hx, rhx, "d sum(gw u)/dx");
    remat_tensor *all[] = {x,  w,  b,  c32, c,  v,  u,  y,  yc, l,  g[0], g[1], p,   q,
                           sp, sq, hw, hx,  cf, vf, uf, xf, wf, ct, rgx,  rgw,  rhw, rhx};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) remat_release(all[i]);
    cr_assert_eq(remat_live_tensors(), 0);
}

/* Under autocast linear's f32 weight reaches the op uncast: its kernel
 * rounds it into a scratch copy, so what the graph keeps after the forward
 * is x's bf16 cast and y — no bf16 copy of the weight per linear (PyTorch
 * keeps its cached cast) — and the weight's gradient is one f32 GEMM of the
 * bf16 operands, not a bf16 gradient widened. Exact allocator bytes. */
Test(autocast, linear_keeps_no_bf16_copy_of_its_weight) {
    int64_t xs[2] = {64, 96}, ws[2] = {128, 96};
    remat_tensor *x = rt_leaf(rt_rand(2, xs, REMAT_F32, -1, 1, 11));
    remat_tensor *w = rt_leaf(rt_rand(2, ws, REMAT_F32, -1, 1, 12));
    remat_device cpu = remat_tensor_device(x);
    remat_alloc_stats before, after;
    RT_OK(remat_alloc_stats_get(cpu, &before));
    remat_autocast_state prev = ac_on();
    remat_tensor *y = NULL, *l = NULL;
    RT_OK(remat_linear(&y, x, w, NULL));
    remat_autocast_end(&prev);
    RT_OK(remat_alloc_stats_get(cpu, &after));
    cr_assert_eq(remat_tensor_dtype(y), REMAT_BF16);
    size_t held = after.current_bytes - before.current_bytes;
    size_t expect = (size_t)(64 * 96 + 64 * 128) * 2; /* x's bf16 cast (saved) and y */
    cr_assert_eq(held, expect, "the forward holds %zu bytes, expected %zu (x cast + y)", held,
                 expect);
    RT_OK(remat_sum_all(&l, y));
    RT_OK(remat_backward_scalar(l));
    /* dW = 1ᵀ · x_bf16 in f32: the column sums of the bf16 x, exact at these sizes in f32 */
    remat_tensor *gw = remat_tensor_grad(w);
    cr_assert_eq(remat_tensor_dtype(gw), REMAT_F32);
    const float *g = remat_data(gw);
    const float *xv = remat_data(x);
    for (int64_t j = 0; j < 96; j++) {
        double s = 0;
        for (int64_t i = 0; i < 64; i++) s += rm_bf16_to_f32(rm_f32_to_bf16(xv[i * 96 + j]));
        cr_assert_float_eq(g[j], s, 1e-4, "dW[0][%lld] = %g, expected %g", (long long)j, g[j], s);
        cr_assert_eq(g[j], g[5 * 96 + j], "every row of dW is the same column sum");
    }
    remat_release(y), remat_release(l);
    remat_tensor *p[2] = {x, w};
    rt_zero_grads(2, p);
    remat_release(x), remat_release(w);
    cr_assert_eq(remat_live_tensors(), 0);
}

/* add's f32 + bf16 (the residual stream plus a block's bf16 output) keeps
 * the bf16 operand uncast on the cpu: the f32 kernel widens it chunk by
 * chunk instead of the driver making a whole f32 copy. Bitwise what the
 * explicit cast gives, forward and backward (b's gradient is the f32
 * gradient rounded, after the broadcast is summed away), in either order,
 * broadcast or not, chunked or not, at 1 and 2 threads; and the forward
 * allocates the output and the per-thread chunk buffers, never a copy of b. */
static remat_tensor *bf16_leaf(int nd, const int64_t *s, uint64_t seed) {
    remat_tensor *x = rt_rand(nd, s, REMAT_F32, -3, 3, seed), *c = NULL, *b = NULL;
    RT_OK(remat_to_dtype(&c, x, REMAT_BF16));
    RT_OK(remat_detach(&b, c));
    RT_OK(remat_set_requires_grad(b, true));
    remat_release(x), remat_release(c);
    return b;
}

Test(autocast, mixed_add_widens_its_bf16_operand_without_a_copy) {
    const int64_t n_big = 3 * 16384 + 5;
    struct {
        int nda, ndb;
        int64_t sa[2], sb[2];
        bool bf16_first;
        int threads;
    } cases[] = {
        {1, 1, {n_big}, {n_big}, false, 1}, {1, 1, {n_big}, {n_big}, false, 2},
        {1, 1, {n_big}, {n_big}, true, 2},  {2, 2, {40, 25}, {40, 25}, false, 2},
        {2, 1, {300, 64}, {64}, false, 2},  {1, 2, {64}, {300, 64}, true, 1},
    };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        omp_set_num_threads(cases[c].threads);
        remat_tensor *a = rt_leaf(rt_rand(cases[c].nda, cases[c].sa, REMAT_F32, -3, 3, 90 + c));
        remat_tensor *b = bf16_leaf(cases[c].ndb, cases[c].sb, 100 + c);
        remat_tensor *y[2] = {0}, *g[2][2] = {{0}}, *w = NULL;
        for (int pass = 0; pass < 2; pass++) { /* 0: mixed, 1: b cast explicitly (as before) */
            remat_tensor *bw = NULL, *p = NULL, *l = NULL, *u = b;
            if (pass == 1) {
                RT_OK(remat_to_dtype(&bw, b, REMAT_F32));
                u = bw;
            }
            remat_alloc_stats before, after;
            RT_OK(remat_alloc_reset_peak(remat_tensor_device(a)));
            RT_OK(remat_alloc_stats_get(remat_tensor_device(a), &before));
            remat_autocast_state prev = ac_on();
            RT_OK(cases[c].bf16_first ? remat_add(&y[pass], u, a) : remat_add(&y[pass], a, u));
            remat_autocast_end(&prev);
            RT_OK(remat_alloc_stats_get(remat_tensor_device(a), &after));
            cr_assert_eq(remat_tensor_dtype(y[pass]), REMAT_F32);
            int64_t n = remat_numel(y[pass]);
            bool chunked = n > 16384 && remat_numel(a) == n && remat_numel(b) == n;
            if (pass == 0 && chunked) { /* output + one 64 KiB f32 buffer per thread */
                size_t most = (size_t)n * 4 + (size_t)cases[c].threads * 16384 * 4;
                cr_assert_leq(after.peak_bytes - before.current_bytes, most,
                              "case %zu: the add's forward peaked at %zu bytes, at most %zu", c,
                              after.peak_bytes - before.current_bytes, most);
            }
            if (!w) w = rt_rand(remat_ndim(y[0]), remat_shape(y[0]), REMAT_F32, -2, 2, 120 + c);
            RT_OK(remat_mul(&p, y[pass], w));
            RT_OK(remat_sum_all(&l, p));
            RT_OK(remat_backward_scalar(l));
            g[pass][0] = remat_retain(remat_tensor_grad(a));
            g[pass][1] = remat_retain(remat_tensor_grad(b));
            remat_tensor *both[2] = {a, b};
            rt_zero_grads(2, both);
            remat_release(bw), remat_release(p), remat_release(l);
        }
        cr_assert(rt_bitwise_equal(y[0], y[1]), "case %zu: the sum differs by %g", c,
                  rt_max_abs_diff(y[0], y[1]));
        cr_assert_eq(remat_tensor_dtype(g[0][0]), REMAT_F32);
        cr_assert_eq(remat_tensor_dtype(g[0][1]), REMAT_BF16);
        for (int i = 0; i < 2; i++)
            cr_assert(rt_bitwise_equal(g[0][i], g[1][i]), "case %zu: gradient %d differs by %g", c,
                      i, rt_max_abs_diff(g[0][i], g[1][i]));
        remat_release(a), remat_release(b), remat_release(w);
        for (int pass = 0; pass < 2; pass++)
            remat_release(y[pass]), remat_release(g[pass][0]), remat_release(g[pass][1]);
    }
    omp_set_num_threads(2);
    cr_assert_eq(remat_live_tensors(), 0);
}

/* The residual report under autocast gives each saved tensor's real dtype
 * and bytes: linear's x as its bf16 cast (2 bytes an element), its weight
 * as the f32 parameter, gelu's input in bf16; the totals count bf16 bytes
 * and the printed report names the dtypes. */
Test(autocast, residual_report_shows_bf16_dtypes_and_bytes) {
    int64_t xs[2] = {16, 32}, w1s[2] = {64, 32}, w2s[2] = {32, 64};
    remat_tensor *x = rt_leaf(rt_rand(2, xs, REMAT_F32, -1, 1, 21));
    remat_tensor *w1 = rt_leaf(rt_rand(2, w1s, REMAT_F32, -1, 1, 22));
    remat_tensor *w2 = rt_leaf(rt_rand(2, w2s, REMAT_F32, -1, 1, 23));
    remat_residual_report *rep;
    RT_OK(remat_residual_report_begin(&rep));
    remat_autocast_state prev = ac_on();
    remat_tensor *h = NULL, *g = NULL, *y = NULL, *l = NULL;
    RT_OK(remat_linear(&h, x, w1, NULL));
    RT_OK(remat_gelu(&g, h, REMAT_GELU_TANH));
    RT_OK(remat_linear(&y, g, w2, NULL));
    RT_OK(remat_sum_all(&l, y));
    remat_autocast_end(&prev);
    RT_OK(remat_residual_report_end(rep));
    /* linear 1: x (bf16 cast), w1 (f32); gelu: h (bf16); linear 2: g (bf16), w2 (f32) */
    const char *ops[] = {"LinearBackward", "LinearBackward", "GeluBackward", "LinearBackward",
                         "LinearBackward"};
    const remat_dtype dts[] = {REMAT_BF16, REMAT_F32, REMAT_BF16, REMAT_BF16, REMAT_F32};
    const size_t bytes[] = {16 * 32 * 2, 64 * 32 * 4, 16 * 64 * 2, 16 * 64 * 2, 32 * 64 * 4};
    cr_assert_eq(remat_residual_report_count(rep), 5, "%d entries",
                 remat_residual_report_count(rep));
    for (int i = 0; i < 5; i++) {
        const remat_residual *e = remat_residual_report_entry(rep, i);
        cr_assert_str_eq(e->op, ops[i], "entry %d: %s", i, e->op);
        cr_assert_eq(e->dtype, dts[i], "entry %d (%s): dtype %s", i, e->op,
                     remat_dtype_name(e->dtype));
        cr_assert_eq(e->bytes, bytes[i], "entry %d: %zu bytes, expected %zu", i, e->bytes,
                     bytes[i]);
    }
    remat_residual_totals t;
    RT_OK(remat_residual_report_totals(rep, &t));
    cr_assert_eq(t.bytes, (size_t)(16 * 32 * 2 + 64 * 32 * 4 + 2 * 16 * 64 * 2 + 32 * 64 * 4));
    char buf[8192];
    cr_assert_lt(remat_residual_report_format(rep, buf, sizeof buf), sizeof buf);
    cr_assert(strstr(buf, "bf16") && strstr(buf, "f32"), "%s", buf);
    cr_assert(strstr(buf, "[16, 64]") && strstr(buf, "2.0 KiB"), "%s", buf);
    RT_OK(remat_backward_scalar(l));
    remat_residual_report_free(rep);
    remat_release(h), remat_release(g), remat_release(y), remat_release(l);
    remat_tensor *p[3] = {x, w1, w2};
    rt_zero_grads(3, p);
    for (int i = 0; i < 3; i++) remat_release(p[i]);
    cr_assert_eq(remat_live_tensors(), 0);
}
